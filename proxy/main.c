/*
 * ttlguard: a transparent Redis proxy that keeps keys from losing their TTL.
 *
 * main: the command line. Subcommands share the config file:
 *   ttlguard [--config FILE] [--listen ADDR] [--backend ADDR]   run the proxy
 *   ttlguard --check-config --config FILE                       validate and exit
 *   ttlguard commands [--server NAME:VERSION]                   print the command table
 *   ttlguard audit --config FILE ...                            find keys that leaked (audit.c)
 *   ttlguard report FILE...                                     summarise event logs (report.c)
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "commands.h"
#include "config.h"
#include "report.h"
#include "server.h"
#include "util.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: ttlguard [OPTIONS]\n"
"       ttlguard audit --config FILE [AUDIT OPTIONS]   (ttlguard audit --help)\n"
"       ttlguard report FILE...\n"
"       ttlguard commands [--server NAME:VERSION]\n"
"\n"
"A transparent Redis (RESP) proxy that enforces TTL rules on key prefixes.\n"
"Point clients at the listen address instead of Redis.\n"
"\n"
"Options:\n"
"  -c, --config FILE     read the INI config FILE (see config/ttlguard.ini);\n"
"                        without it the built-in defaults apply\n"
"  -l, --listen ADDR     listen on ADDR (host:port or unix:/path), overrides [proxy] listen\n"
"  -b, --backend ADDR    Redis to forward to (host:port or unix:/path), overrides [proxy] backend\n"
"      --check-config    validate the config and exit: 0 when valid, 1 with the reason\n"
"  -v, --verbose         debug logging (debug builds only)\n"
"  -h, --help            show this help and exit\n"
"  -V, --version         show the version and exit\n"
"\n"
"Subcommands:\n"
"  audit                 scan Redis for keys that already leaked (see docs/audit.md)\n"
"  report FILE...        summarise event logs: durable prefixes, violations, top keys\n"
"  commands              print how each command is classified (keys, TTL effects) on\n"
"                        --server redis:7.0 (default), redis:8.0, valkey:8.1, valkey:9.1, ...;\n"
"                        the proxy picks the table by the backend's own name and version\n"
"\n"
"Signals: SIGTERM/SIGINT stop accepting, let owed replies drain (5 s at most), exit 0;\n"
"SIGHUP reloads the config (a bad one is refused, the old one stays); SIGUSR1 reopens\n"
"the event log.\n");
}

/* --check-config: can the event log be opened for appending, as the start
 * will? Checked without creating it: the file, or else its directory. */
static int event_log_writable(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    if (path == NULL || config_events_to_stderr(path))
        return 0;
    if (access(path, F_OK) == 0) {
        if (access(path, W_OK) == 0)
            return 0;
        snprintf(err, errlen, "events = %s: cannot be written: %s", path, strerror(errno));
        return -1;
    }
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (access(dir, W_OK | X_OK) == 0)
        return 0;
    snprintf(err, errlen, "events = %s: cannot be created in %.300s: %s", path, dir,
             strerror(errno));
    return -1;
}

/* ttlguard commands [--server NAME:VERSION] */
static int commands_main(int argc, char **argv)
{
    struct server_id id = server_id_default;

    if (argc == 3 && strcmp(argv[1], "--server") == 0) {
        if (server_id_parse(argv[2], &id) != 0) {
            fprintf(stderr, "ttlguard commands: bad --server '%s' (want redis:VERSION or "
                    "valkey:VERSION, e.g. valkey:9.1.2)\n", argv[2]);
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: ttlguard commands [--server NAME:VERSION]\n");
        return 2;
    }
    struct command_set *set = command_set_new(&id);
    commands_print(stdout, set);
    if (command_set_features(set) & FT_NEWER) {
        char name[40], note[96];
        server_id_format(&id, name, sizeof name);
        command_set_table_note(set, note, sizeof note);
        fprintf(stderr, "ttlguard commands: %s is newer than the command table (%s): "
                "arguments the table does not know are not judged, and rows flagged "
                "documented were not verified by experiment\n", name, note);
    }
    command_set_free(set);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config",       required_argument, NULL, 'c' },
        { "listen",       required_argument, NULL, 'l' },
        { "backend",      required_argument, NULL, 'b' },
        { "check-config", no_argument,       NULL, 'k' },
        { "verbose",      no_argument,       NULL, 'v' },
        { "help",         no_argument,       NULL, 'h' },
        { "version",      no_argument,       NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    const char *config_path = NULL, *listen = NULL, *backend = NULL;
    int check = 0, c;

    if (argc > 1 && strcmp(argv[1], "commands") == 0)
        return commands_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "audit") == 0)
        return audit_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "report") == 0)
        return report_main(argc - 1, argv + 1);

    while ((c = getopt_long(argc, argv, "c:l:b:vhV", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 'l': listen = optarg; break;
        case 'b': backend = optarg; break;
        case 'k': check = 1; break;
        case 'v': log_threshold = LOG_DEBUG; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("ttlguard %s\n", TTLG_VERSION); return 0;
        default:  usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ttlguard: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    struct config *cfg = xcalloc(1, sizeof *cfg);
    char err[1024];
    if (config_path != NULL) {
        if (config_load(config_path, cfg, err, sizeof err) != 0) {
            fprintf(stderr, "ttlguard: %s\n", err);
            free(cfg);
            return 1;
        }
    } else {
        config_defaults(cfg);
    }

    struct addr a;
    if ((listen && addr_parse(listen, &a, err, sizeof err) != 0) ||
        (backend && addr_parse(backend, &a, err, sizeof err) != 0)) {
        fprintf(stderr, "ttlguard: %s\n", err);
        config_free(cfg);
        free(cfg);
        return 1;
    }
    if (check && event_log_writable(cfg->events, err, sizeof err) != 0) {
        fprintf(stderr, "ttlguard: %s: %s\n", config_path ? config_path : "(defaults)", err);
        config_free(cfg);
        free(cfg);
        return 1;
    }
    if (check) {
        printf("%s: OK (%zu rules, %zu user%s)\n", config_path ? config_path : "(defaults)",
               cfg->rules.n, cfg->users.n, cfg->users.n == 1 ? "" : "s");
        config_free(cfg);
        free(cfg);
        return 0;
    }

    return server_run(cfg, listen, backend);     /* takes cfg */
}
