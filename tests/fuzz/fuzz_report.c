/*
 * libFuzzer harness for `ttlguard report` (proxy/report.c): an event log's
 * bytes -> the JSON line reader, the tallies, the text summary and the HTML
 * page, through report_main() itself.
 *
 * An event log is read from disk and may be truncated, rotated mid-line,
 * or not ttlguard's at all: lines that are not events are counted as skipped,
 * so every input must give exit status 0, never a crash, a leak or a read out
 * of bounds.
 *
 *   CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_report
 *   build-fuzz/fuzz_report tests/fuzz/corpus/report -max_total_time=60
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"
#include "fuzz_check.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    snprintf(path, sizeof path, "/tmp/fuzz_report.%d.jsonl", (int)getpid());
    int null = open("/dev/null", O_WRONLY);
    check(null >= 0 && dup2(null, STDOUT_FILENO) >= 0);     /* the summary */
    close(null);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    check(f != NULL && fwrite(data, 1, size, f) == size && fclose(f) == 0);
    char *argv[] = { "report", "--html", "/dev/null", path, NULL };
    int rc = report_main(4, argv);
    check(rc == REPORT_EXIT_OK);
    return 0;
}
