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

struct server;

#define CONTROL_NAME        "ttlguard-control"
#define CONTROL_NAME_LEN    "16"

void control_start(struct server *srv);
void control_stop(void);

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
