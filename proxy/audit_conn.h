/*
 * audit_conn: the blocking RESP2 connection `ttlguard audit` talks over.
 *
 * The audit is one client doing one thing at a time, so it uses a plain
 * blocking socket (TCP or unix:, TLS over TCP when backend_tls is on: tls.h's
 * blocking client) with send/receive timeouts instead of the
 * proxy's libuv loop. Replies are parsed by hiredis's redisReader; by default
 * it builds redisReply objects (freed with freeReplyObject), and the scanner
 * swaps in its own redisReplyObjectFunctions to parse pipelined batches
 * straight into its arrays, without an allocation per reply.
 *
 * Errors follow the tree's convention: 0 / -1 and the reason in err. A
 * signal that interrupts a blocking read ends it with -1, the reason
 * "interrupted" and aconn_interrupted() true; the caller decides what that
 * means.
 */
#ifndef TTLG_AUDIT_CONN_H
#define TTLG_AUDIT_CONN_H

#include <stddef.h>
#include <hiredis/hiredis.h>

#include "util.h"

/* A growable byte buffer for outgoing commands. */
struct abuf {
    char *p;
    size_t len;
    size_t cap;
};

void abuf_free(struct abuf *b);

/* Append one command in RESP multibulk form. */
void abuf_command(struct abuf *b, int argc, const char **argv, const size_t *lens);

/* Append "*2\r\n" + name_resp + "$len\r\nkey\r\n": name_resp is the command
 * name already encoded as a bulk string ("$4\r\nPTTL\r\n"). The hot path of
 * the scan: no argv arrays, one reserve. */
void abuf_command_key(struct abuf *b, const char *name_resp, size_t name_len,
                      const char *key, size_t keylen);

struct aconn;

struct tls_context;

/* Connect to a within timeout_ms; io_timeout_ms bounds every later send or
 * receive (and the TLS handshake). tls: speak TLS (backend_tls), verifying
 * the server as tls_name (NULL: a's host). Returns NULL with the reason in
 * err. Free with aconn_close(). */
struct aconn *aconn_open(const struct addr *a, unsigned timeout_ms, unsigned io_timeout_ms,
                         struct tls_context *tls, const char *tls_name, char *err,
                         size_t errlen);
void aconn_close(struct aconn *c);

/* Write all of buf. Signals do not interrupt it (see audit_conn.c). */
int aconn_send(struct aconn *c, const char *buf, size_t len, char *err, size_t errlen);

/* Read the next reply. With the default functions *reply is a redisReply the
 * caller frees with freeReplyObject(); with functions set by
 * aconn_use_functions() it is whatever they returned for the top level. */
int aconn_read(struct aconn *c, void **reply, char *err, size_t errlen);

/* 1 when the last aconn_read() failed because a signal interrupted it
 * (nothing was lost: the call can be repeated). */
int aconn_interrupted(const struct aconn *c);

/* Parse replies with fn (privdata is handed to the reader), or go back to
 * hiredis's redisReply objects with fn == NULL. Call only between replies. */
void aconn_use_functions(struct aconn *c, redisReplyObjectFunctions *fn, void *privdata);

/* Send one command and read its reply (default functions only). A Redis
 * error reply is returned as a reply, not as a failure: check ->type.
 * The caller frees *reply with freeReplyObject(). */
int aconn_call(struct aconn *c, redisReply **reply, char *err, size_t errlen,
               int argc, const char **argv);

#endif
