/*
 * tls: OpenSSL on the proxy's own loop, for both sides.
 *
 * A TLS session sits between a libuv stream and its owner (transport.h
 * routes to it when a connection has one). OpenSSL never touches the
 * socket: it reads and writes two memory BIOs, and this module moves the
 * bytes between them and libuv.
 *
 *   socket ─uv read─▶ tls_on_read ─BIO_write─▶ rbio ─SSL_read─▶ owner's read_cb
 *   owner ─tls_writev─▶ SSL_write ─▶ wbio ─(one span)─▶ uv_try_write / uv_write
 *
 * No thread, no extra copy beyond the encryption itself: the ciphertext is
 * written from the BIO's memory, and only what the kernel refuses is copied
 * into a queued chunk, as for plain writes (stream.c).
 *
 * Handshake: tls_start() begins it; it runs on the reads while the owner
 * is not reading yet, and `handshake` is called once with NULL (done) or the
 * reason it failed ("certificate verify failed: certificate has expired").
 * Plaintext written before it is done waits in the session, counted in its
 * backlog, and goes out when it is.
 *
 * Contexts: one SSL_CTX per side, built from the config by
 * tls_context_new(); a config owns its contexts, and a session keeps a
 * reference to the one it was made from, so a reload may free the old ones
 * while their sessions live on.
 *
 * Errors: tls_* return 0 or a negative libuv code (UV_EPROTO for TLS
 * failures); the words for the last TLS failure are in tls_error().
 */
#ifndef TTLG_TLS_H
#define TTLG_TLS_H

#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

struct xport;
struct tls;
struct tls_context;
struct config;

/* Which side a context serves. */
enum tls_side {
    TLS_TO_BACKEND,     /* ttlguard is the TLS client */
    TLS_FOR_CLIENTS,    /* ttlguard is the TLS server (tls_listen) */
};

/* The TLS keys of one side, as config.c read them. Paths may be NULL. */
struct tls_settings {
    const char *cert_file, *key_file;       /* our certificate (client cert towards the backend) */
    const char *ca_cert_file, *ca_cert_dir; /* whom we trust; both NULL: the system store */
    int verify;                             /* backend: verify the server (default 1) */
    int auth_clients;                       /* clients: 0 no, 1 optional, 2 yes */
    const char *protocols;                  /* "TLSv1.2 TLSv1.3" */
    const char *ciphers, *ciphersuites;     /* OpenSSL lists; NULL: OpenSSL's defaults */
};

/* A context for one side, or NULL with the reason in err and the name of the
 * key whose value is at fault in *bad_key ("tls_cert_file", ...), so the
 * caller can name its line. */
struct tls_context *tls_context_new(enum tls_side side, const struct tls_settings *st,
                                    const char **bad_key, char *err, size_t errlen);
void tls_context_free(struct tls_context *ctx);

/* Blocking TLS over a connected socket, for `ttlguard audit` (never on the
 * loop). The socket's SO_RCVTIMEO/SO_SNDTIMEO bound the handshake too.
 * send/recv behave like send(2)/recv(2): -1 with errno (EAGAIN on a
 * timeout, EINTR, EPROTO for a TLS failure), 0 at the peer's close. */
struct tls_blocking;
struct tls_blocking *tls_blocking_connect(struct tls_context *ctx, int fd, const char *name,
                                          char *err, size_t errlen);
ssize_t tls_blocking_send(struct tls_blocking *b, const void *p, size_t n);
ssize_t tls_blocking_recv(struct tls_blocking *b, void *p, size_t n);
void tls_blocking_free(struct tls_blocking *b);

/* Called once per session: the handshake is done (why == NULL) or failed. */
typedef void (*tls_handshake_fn)(struct xport *x, const char *why);

/* Put a TLS session on x (connected or accepted) and start the handshake.
 * name: towards the backend, the name sent as SNI and verified (a numeric
 * address is verified against the certificate's IP addresses and not sent).
 * Returns 0, or a negative libuv code (x->tls stays NULL). */
int tls_start(struct xport *x, struct tls_context *ctx, const char *name, tls_handshake_fn done);

/* Free the session (from xport_close; safe inside its own callbacks). */
void tls_free(struct tls *t);

int tls_read_start(struct xport *x, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
void tls_read_stop(struct xport *x);

/* A queued write finished (status as libuv's): stream.h's stream_done_fn. */
typedef void (*tls_write_done_fn)(void *ctx, int status);
int tls_writev(struct xport *x, const uv_buf_t *iov, int n, tls_write_done_fn done, void *ctx);

/* Plaintext not yet handed to the socket: before the handshake is done. */
size_t tls_pending(const struct tls *t);

/* close_notify, then a half-close of the socket. */
int tls_shutdown(struct xport *x, uv_shutdown_t *req, uv_shutdown_cb cb);

int tls_handshake_done(const struct tls *t);

/* The host name a TLS client sent as SNI (the name it connects by); NULL
 * when it sent none (a client connecting by address). */
const char *tls_client_sni(const struct tls *t);
const char *tls_error(const struct tls *t);

/* Start the module on the loop (the handle that resumes reads of sessions
 * with decrypted bytes left when their owner stopped reading). */
void tls_init(uv_loop_t *loop);
void tls_shutdown_module(void);

#endif
