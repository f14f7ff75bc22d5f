/*
 * audit: the `ttlguard audit` subcommand, which walks a Redis keyspace and
 * finds the keys that already leaked (see docs/audit.md).
 */
#ifndef TTLG_AUDIT_H
#define TTLG_AUDIT_H

/* Exit statuses of `ttlguard audit`. */
#define AUDIT_EXIT_CLEAN        0   /* no leaked keys */
#define AUDIT_EXIT_LEAKS        1   /* leaked keys found (whether or not --fix fixed them) */
#define AUDIT_EXIT_ERROR        2   /* usage, config, connection or backend error */
#define AUDIT_EXIT_INTERRUPTED  3   /* SIGINT/SIGTERM: a partial report was printed */

/* Run the subcommand. argv[0] is "audit". Returns the process exit status. */
int audit_main(int argc, char **argv);

#endif
