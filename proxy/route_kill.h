/*
 * route_kill: SCRIPT KILL and FUNCTION KILL through cluster = route, each
 * to every primary over a connection of its own.
 *
 * A node busy with a script past busy-reply-threshold reads its other
 * connections again, answers -BUSY there and takes SCRIPT KILL from any of
 * them, but never reads more from the connection whose script runs. Through
 * route that is the node's shared connection: a kill sent there would wait
 * behind the script it is meant to end. So each part of a kill (route.c
 * sends one per primary, their replies merged: MERGE_KILL) goes over a new
 * connection to its node, closed once answered.
 *
 *   SCRIPT KILL ─▶ route.c: one unit per primary ─▶ route_kill_send()
 *                                        new connection to the node ─▶ node
 *                  route_reply(unit) ◀── its one reply, then closed
 */
#ifndef TTLG_ROUTE_KILL_H
#define TTLG_ROUTE_KILL_H

#include <stddef.h>
#include <stdint.h>

struct session;
struct target;

/* Send the request (n bytes, one reply) to t over a connection of its own;
 * its reply goes to route_reply(s, unit), a later failure to route_lost().
 * Returns 0, or -1 when the connection cannot be opened at all. */
int route_kill_send(struct session *s, struct target *t, const char *p, size_t n, uint32_t unit);

/* The session ends: its connections still open forget it and close. */
void route_kill_forget(struct session *s);

#endif
