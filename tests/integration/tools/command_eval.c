/*
 * command_eval: the command table's answer for concrete argvs, for the
 * integration tests (probe_ttl_effects.py compares it with what redis-server
 * does).
 *
 * stdin: one argv per line, each argument hex-encoded (binary safe; "-" for an
 * empty one), separated by single spaces. stdout: one line per input line:
 *
 *   known=<0|1> row=<0|1> rc=<command_keys() result> [key ...]
 *   key := <argi>:<effect>:<ttl unit>:<ttl argi>     e.g. 1:sets-ttl:sec:3
 *
 * rc is "-" when there is no row. Build: link with libttlguard_core.a.
 *
 *   command_eval [--server NAME:VERSION]    the table as that server has it
 *                                           (default redis:7.0)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#define MAX_ARGS 256

static const char *unit_names[] = { "sec", "ms", "unix-sec", "unix-ms" };

/* Decodes the hex words of line in place. Returns argc, or -1 on bad input. */
static int split_hex(char *line, struct slice *argv)
{
    int argc = 0;
    char *save = NULL;

    for (char *w = strtok_r(line, " \n", &save); w != NULL; w = strtok_r(NULL, " \n", &save)) {
        size_t n = strcmp(w, "-") == 0 ? 0 : strlen(w);

        if (argc == MAX_ARGS || n % 2 != 0)
            return -1;
        for (size_t i = 0; i < n / 2; i++) {
            int hi = hex_digit_value(w[2 * i]), lo = hex_digit_value(w[2 * i + 1]);

            if (hi < 0 || lo < 0)
                return -1;
            w[i] = (char)(hi * 16 + lo);
        }
        argv[argc].p = w;
        argv[argc].len = n / 2;
        argc++;
    }
    return argc;
}

int main(int ac, char **av)
{
    static char line[1 << 20];
    struct slice argv[MAX_ARGS];
    struct key_ref keys[MAX_ARGS];
    struct server_id id = server_id_default;

    if (ac == 3 && strcmp(av[1], "--server") == 0) {
        if (server_id_parse(av[2], &id) != 0) {
            fprintf(stderr, "command_eval: bad --server %s\n", av[2]);
            return 2;
        }
    } else if (ac != 1) {
        fprintf(stderr, "usage: command_eval [--server NAME:VERSION]\n");
        return 2;
    }
    struct command_set *set = command_set_new(&id);

    while (fgets(line, sizeof line, stdin) != NULL) {
        int argc = split_hex(line, argv);

        if (argc <= 0) {
            fprintf(stderr, "command_eval: bad input line\n");
            return 2;
        }
        const struct cmd_info *ci = command_resolve(set, argv[0].p, argv[0].len);
        printf("known=%d row=%d", ci != NULL, ci != NULL && ci->row != NULL);
        if (ci == NULL || ci->row == NULL) {
            printf(" rc=-\n");
            continue;
        }
        int n = command_keys(ci, argc, argv, keys);
        printf(" rc=%d", n);
        for (int i = 0; i < n; i++) {
            printf(" %d:%s:%s:%d", keys[i].argi, ttl_effect_name(keys[i].effect),
                   unit_names[keys[i].ttl_unit], keys[i].ttl_argi);
        }
        printf("\n");
        fflush(stdout);
    }
    command_set_free(set);
    return 0;
}
