/*
 * libFuzzer harness for the config parser (proxy/config.c): a file's bytes
 * -> config_load(), as at start, --check-config and SIGHUP.
 *
 * Every input either loads (and then frees cleanly) or is refused with one
 * line that starts with the file's path: "PATH:LINE: reason" or "PATH: reason".
 * No crash, no leak, no read past the file, whatever the bytes (NULs, CR,
 * lines past the limit, quotes, escapes in prefixes).
 *
 *   CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_config
 *   build-fuzz/fuzz_config tests/fuzz/corpus/config -max_total_time=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fuzz_check.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    snprintf(path, sizeof path, "/tmp/fuzz_config.%d.ini", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    check(f != NULL && fwrite(data, 1, size, f) == size && fclose(f) == 0);

    struct config cfg;
    char err[1024] = "";
    if (config_load(path, &cfg, err, sizeof err) != 0) {
        size_t n = strlen(path);
        check(err[0] != '\0' && strchr(err, '\n') == NULL);
        check(strncmp(err, path, n) == 0 && err[n] == ':');
    }
    config_free(&cfg);
    return 0;
}
