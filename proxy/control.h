/*
 * control: the proxy's own connection to the backend.
 *
 * What ttlguard must learn from Redis is asked here, never on a client's
 * connection, where it would show in that client's MONITOR, SLOWLOG, INFO
 * commandstats and CLIENT LIST (cmd=) view:
 *
 *   on connect   PING before any AUTH    does Redis want clients to authenticate?
 *                                         (then the pre-AUTH request limits apply,
 *                                         and nothing may be shared)
 *                AUTH (backend_password)
 *                CLIENT SETNAME ttlguard-control   (so CLIENT LIST tells it apart)
 *                CONFIG GET databases  (which SELECTs a shared session may carry)
 *                COMMAND, INFO server, COMMAND LIST/INFO  (who the backend is, its
 *                                         commands: identify.h)
 *                CONFIG GET maxmemory-policy   (when rules are active; reported as a
 *                                         backend_policy event when it changes)
 *   once a second while a shared connection is in use: ACL GETUSER default
 *                (a password set later: Redis keeps connections logged in, so
 *                the shared one must stop being shared; 1:1 connections need
 *                no probe, Redis itself asks each of them)
 *   after a reload: CONFIG GET maxmemory-policy
 *
 * The connection reconnects once a second while the backend is away; a
 * backend that restarted is probed again. Nothing here blocks the loop.
 * Until the first answer, sessions assume no AUTH is required (only the
 * pre-AUTH limits' early refusal depends on it; Redis still enforces AUTH)
 * and nothing is shared.
 */
#ifndef TTLG_CONTROL_H
#define TTLG_CONTROL_H

#include <stdint.h>

struct loop_ctx;
struct command_set;

#define CONTROL_NAME        "ttlguard-control"
#define CONTROL_NAME_LEN    "16"

/* What the control connection has learned about the backend. Written here
 * only; the others read it through control_facts(). */
struct backend_facts {
    int auth_known;                  /* the control connection has said whether... */
    int clients_must_auth;           /* ...Redis wants AUTH from a client that connects now */
    int databases;                   /* CONFIG GET databases; 0 while unknown */
    char policy[32];                 /* maxmemory-policy last reported */
    int policy_known;
    struct command_set *commands;    /* the backend's commands: the table as its server and
                                        version have it, and rows derived from its key specs */
    int commands_ready;              /* 0 until the backend was identified (or given up on):
                                        sessions under rules wait */
    int backend_known;               /* commands came from the backend's own replies */
};

const struct backend_facts *control_facts(void);

/* Connect; commands_ready() is called each time the backend's commands
 * were read (or given up on: Redis 7.0's are assumed). */
void control_start(struct loop_ctx *ctx, void (*commands_ready)(void));
void control_stop(void);
/* Free what is left once the loop has ended. */
void control_free(void);

/* After a reload: the eviction policy again. */
void control_probe_policy(void);

/* Reconnects, and the periodic ACL probe while `sharing`. */
void control_cron(uint64_t now, int sharing);

/* A reload changed the backend address. */
void control_backend_changed(void);

/* The backend's words (from its identity, INFO server) and commands (COMMAND)
 * for the replies ttlguard gives itself before a login and in protected mode
 * (login.h): Redis 7.0's words and no commands until they are read. */
struct login_backend;
const struct login_backend *control_login(void);

#endif
