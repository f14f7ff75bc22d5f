/*
 * report: `ttlguard report FILE...`, a human summary of event logs
 * (docs/events.md): the durable prefixes and their owners, violations by
 * rule, command, effect and action, the keys seen most, unverified commands,
 * reloads and backend warnings.
 */
#ifndef TTLG_REPORT_H
#define TTLG_REPORT_H

/* Exit statuses. */
#define REPORT_EXIT_OK      0
#define REPORT_EXIT_ERROR   2   /* usage, or a file that cannot be read */

/* Run the subcommand; argv[0] is "report". Prints to stdout, errors to
 * stderr. Returns the process exit status. */
int report_main(int argc, char **argv);

#endif
