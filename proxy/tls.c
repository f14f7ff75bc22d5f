/*
 * tls: OpenSSL over memory BIOs on the loop (see tls.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "stream.h"
#include "tls.h"
#include "util.h"

#define CIPHER_CHUNK    (64 * 1024)     /* one socket read of ciphertext */
#define WRITE_SLICE     (64 * 1024)     /* plaintext per SSL_write: bounds the wbio */

struct tls_context {
    SSL_CTX *ctx;
    SSL_SESSION *resume;        /* towards the backend: the newest session it gave us */
};

struct tls {
    SSL *ssl;
    BIO *rbio;                  /* ciphertext read from the socket, for OpenSSL */
    BIO *wbio;                  /* ciphertext OpenSSL wrote, for the socket */
    struct xport *x;
    uv_alloc_cb alloc_cb;       /* the owner's, while it reads */
    uv_read_cb read_cb;
    tls_handshake_fn handshake;
    char *early;                /* plaintext written before the handshake was done */
    size_t early_len, early_cap;
    tls_write_done_fn early_done;
    void *early_ctx;
    int eof;                    /* a negative code from the socket, told after the plaintext */
    unsigned reading:1;         /* the owner reads */
    unsigned sock_reading:1;    /* uv_read_start on the socket */
    unsigned handshaken:1;
    unsigned failed:1;          /* the handshake failed or the read side ended */
    unsigned dead:1;            /* freed inside one of its own callbacks */
    unsigned queued:1;          /* on the resume list */
    unsigned busy;              /* pump() frames on the stack */
    struct tls *next_resume;
    char err[200];
};

/* Sessions whose owner started reading again with decrypted bytes (or an
 * end) still inside OpenSSL: no socket read would tell them, so an idle
 * handle delivers them on the next loop iteration. */
static uv_idle_t resume_idle;
static int resume_inited;
static struct tls *resume_head;

static char cipher_buf[CIPHER_CHUNK];   /* a socket read is handed to OpenSSL at once */
static char *out_buf;                   /* ciphertext on its way to the socket */
static size_t out_cap;

/* ---- contexts ----------------------------------------------------------------- */

/* The reason of the newest OpenSSL error, or fallback. */
static const char *ssl_reason(const char *fallback)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    return r != NULL ? r : fallback;
}

/* A file OpenSSL is about to read: say plainly when it cannot be opened,
 * which OpenSSL's own queue words poorly. */
static int readable(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "'%s': cannot open: %s", path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

/* "TLSv1.2 TLSv1.3" (redis.conf's tls-protocols) into SSL_OP_NO_* options
 * for the versions left out. */
static int set_protocols(SSL_CTX *ctx, const char *list, char *err, size_t errlen)
{
    static const struct { const char *name; long no; } v[] = {
        { "TLSv1", SSL_OP_NO_TLSv1 }, { "TLSv1.1", SSL_OP_NO_TLSv1_1 },
        { "TLSv1.2", SSL_OP_NO_TLSv1_2 }, { "TLSv1.3", SSL_OP_NO_TLSv1_3 },
    };
    long no = SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_TLSv1_2 | SSL_OP_NO_TLSv1_3;
    char word[16];
    const char *text = list != NULL ? list : "TLSv1.2 TLSv1.3";
    const char *p = text + strspn(text, " \t,\"");
    while (*p != '\0') {
        size_t n = strcspn(p, " \t,\"");
        if (n > 0) {
            size_t i;
            snprintf(word, sizeof word, "%.*s", (int)(n < sizeof word ? n : sizeof word - 1), p);
            for (i = 0; i < sizeof v / sizeof v[0]; i++)
                if (n < sizeof word && strcasecmp(word, v[i].name) == 0)
                    break;
            if (i == sizeof v / sizeof v[0]) {
                snprintf(err, errlen, "'%s': unknown protocol '%.*s' (expected TLSv1, TLSv1.1, "
                         "TLSv1.2 or TLSv1.3, separated by spaces)", text, (int)n, p);
                return -1;
            }
            no &= ~v[i].no;
        }
        p += n;
        p += strspn(p, " \t,\"");
    }
    if (no == (SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_TLSv1_2 | SSL_OP_NO_TLSv1_3)) {
        snprintf(err, errlen, "'%s': no protocol given (e.g. TLSv1.2 TLSv1.3)", text);
        return -1;
    }
    /* OpenSSL's security level may forbid the old versions anyway. */
    SSL_CTX_set_min_proto_version(ctx, 0);
    SSL_CTX_set_options(ctx, (unsigned long)no);
    return 0;
}

/* Our certificate and key, and whom we trust. */
static int load_files(SSL_CTX *ctx, enum tls_side side, const struct tls_settings *st,
                      const char **bad_key, char *err, size_t errlen)
{
    int to_backend = side == TLS_TO_BACKEND;
    char why[300];

    if (st->cert_file != NULL) {
        /* The key first: a certificate that does not match it then shows in
         * the check below, not as an unreadable key. */
        *bad_key = to_backend ? "backend_tls_key_file" : "tls_key_file";
        if (readable(st->key_file, err, errlen) < 0)
            return -1;
        if (SSL_CTX_use_PrivateKey_file(ctx, st->key_file, SSL_FILETYPE_PEM) != 1) {
            snprintf(err, errlen, "'%s': not a PEM private key: %s", st->key_file,
                     ssl_reason("unreadable"));
            return -1;
        }
        *bad_key = to_backend ? "backend_tls_cert_file" : "tls_cert_file";
        if (readable(st->cert_file, err, errlen) < 0)
            return -1;
        if (SSL_CTX_use_certificate_chain_file(ctx, st->cert_file) != 1) {
            snprintf(err, errlen, "'%s': not a PEM certificate: %s", st->cert_file,
                     ssl_reason("unreadable"));
            return -1;
        }
        *bad_key = to_backend ? "backend_tls_key_file" : "tls_key_file";
        if (SSL_CTX_check_private_key(ctx) != 1) {
            snprintf(err, errlen, "'%s' does not match the certificate '%s'", st->key_file,
                     st->cert_file);
            return -1;
        }
    }
    if (st->ca_cert_file != NULL || st->ca_cert_dir != NULL) {
        *bad_key = st->ca_cert_file != NULL
            ? (to_backend ? "backend_tls_ca_cert_file" : "tls_ca_cert_file")
            : (to_backend ? "backend_tls_ca_cert_dir" : "tls_ca_cert_dir");
        if (st->ca_cert_file != NULL && readable(st->ca_cert_file, err, errlen) < 0)
            return -1;
        if (SSL_CTX_load_verify_locations(ctx, st->ca_cert_file, st->ca_cert_dir) != 1) {
            snprintf(why, sizeof why, "%s", ssl_reason("unreadable"));
            snprintf(err, errlen, "'%s': no CA certificates could be loaded: %s",
                     st->ca_cert_file != NULL ? st->ca_cert_file : st->ca_cert_dir, why);
            return -1;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        *bad_key = to_backend ? "backend_tls_ca_cert_file" : "tls_ca_cert_file";
        snprintf(err, errlen, "the system's CA store cannot be loaded: %s",
                 ssl_reason("unknown"));
        return -1;
    }
    return 0;
}

/* A session the backend gave: kept for the next connection (the reference
 * is ours: return 1). */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct tls_context *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    if (c == NULL || !SSL_SESSION_is_resumable(sess))
        return 0;
    SSL_SESSION_free(c->resume);
    c->resume = sess;
    return 1;
}

struct tls_context *tls_context_new(enum tls_side side, const struct tls_settings *st,
                                    const char **bad_key, char *err, size_t errlen)
{
    int to_backend = side == TLS_TO_BACKEND;
    SSL_CTX *ctx = SSL_CTX_new(to_backend ? TLS_client_method() : TLS_server_method());
    ERR_clear_error();
    *bad_key = NULL;
    if (ctx == NULL) {
        snprintf(err, errlen, "cannot create a TLS context: %s", ssl_reason("out of memory"));
        return NULL;
    }
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    *bad_key = "tls_protocols";
    if (set_protocols(ctx, st->protocols, err, errlen) < 0)
        goto fail;
    *bad_key = "tls_ciphers";
    if (st->ciphers != NULL && SSL_CTX_set_cipher_list(ctx, st->ciphers) != 1) {
        snprintf(err, errlen, "'%s': no usable cipher in it", st->ciphers);
        goto fail;
    }
    *bad_key = "tls_ciphersuites";
    if (st->ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, st->ciphersuites) != 1) {
        snprintf(err, errlen, "'%s': no usable TLSv1.3 cipher suite in it", st->ciphersuites);
        goto fail;
    }
    if (load_files(ctx, side, st, bad_key, err, errlen) < 0)
        goto fail;
    if (to_backend) {
        SSL_CTX_set_verify(ctx, st->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    } else {
        int mode = st->auth_clients == 0 ? SSL_VERIFY_NONE
                 : st->auth_clients == 1 ? SSL_VERIFY_PEER
                 : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        SSL_CTX_set_verify(ctx, mode, NULL);
        /* Resumed sessions must belong to this service (client certificates). */
        SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"ttlguard", 8);
    }
    *bad_key = NULL;
    struct tls_context *c = xcalloc(1, sizeof *c);
    c->ctx = ctx;
    if (to_backend) {
        /* Resume sessions: a client's first backend connection (1:1, or its
         * own before it joins a shared one) then skips the certificate
         * exchange. OpenSSL tells each new session (TLS 1.3: each ticket). */
        SSL_CTX_set_app_data(ctx, c);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
                                            SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    }
    return c;

fail:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}

void tls_context_free(struct tls_context *c)
{
    if (c == NULL)
        return;
    SSL_CTX_set_app_data(c->ctx, NULL);     /* sessions still open outlive c */
    SSL_SESSION_free(c->resume);
    SSL_CTX_free(c->ctx);
    free(c);
}

/* SNI and the name the server's certificate must carry; a numeric address
 * is matched against the certificate's IP addresses and not sent as SNI. */
static void set_peer_name(SSL *ssl, const char *name)
{
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    unsigned char ip[16];
    if (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(param, name);
        return;
    }
    SSL_set_tlsext_host_name(ssl, name);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set1_host(ssl, name);
}

/* ---- the session's bytes ------------------------------------------------------ */

static struct tls *tls_of(uv_stream_t *st)
{
    return ((struct xport *)st)->tls;
}

/* Why the last call failed, in OpenSSL's words; a failed verification says
 * what was wrong with the certificate. */
static void set_error(struct tls *t, int ssl_err)
{
    long v = SSL_get_verify_result(t->ssl);
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    if (v != X509_V_OK)
        snprintf(t->err, sizeof t->err, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
    else if (r != NULL)
        snprintf(t->err, sizeof t->err, "%s", r);
    else if (ssl_err == SSL_ERROR_SYSCALL || ssl_err == SSL_ERROR_ZERO_RETURN)
        snprintf(t->err, sizeof t->err, "connection closed during the handshake");
    else
        snprintf(t->err, sizeof t->err, "error %d", ssl_err);
    ERR_clear_error();
}

/* Hand what OpenSSL wrote to the socket. */
static int flush_out(struct tls *t, tls_write_done_fn done, void *ctx)
{
    size_t n = BIO_ctrl_pending(t->wbio);
    if (n == 0)
        return 0;
    if (n > out_cap) {
        out_cap = n;
        out_buf = xrealloc(out_buf, out_cap);
    }
    int got = BIO_read(t->wbio, out_buf, (int)n);
    if (got <= 0)
        return 0;
    uv_buf_t b = uv_buf_init(out_buf, (unsigned)got);
    return stream_writev(&t->x->h.stream, &b, 1, (size_t)got, done, ctx);
}

static void on_cipher_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    *buf = uv_buf_init(cipher_buf, sizeof cipher_buf);
}

static void on_cipher_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* Read the socket while the handshake runs or the owner reads. */
static void sock_reading_update(struct tls *t)
{
    int want = !t->failed && t->eof == 0 && (!t->handshaken || t->reading);
    if (want && !t->sock_reading) {
        if (uv_read_start(&t->x->h.stream, on_cipher_alloc, on_cipher_read) == 0)
            t->sock_reading = 1;
    } else if (!want && t->sock_reading) {
        uv_read_stop(&t->x->h.stream);
        t->sock_reading = 0;
    }
}

static void handshake_failed(struct tls *t)
{
    t->failed = 1;
    flush_out(t, NULL, NULL);       /* the alert tells the peer why */
    sock_reading_update(t);
    t->handshake(t->x, t->err);
}

/* One step of the handshake; 1 once it is done (and the owner told). */
static int handshake_step(struct tls *t)
{
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r != 1) {
        int e = SSL_get_error(t->ssl, r);
        if (e == SSL_ERROR_WANT_READ) {
            flush_out(t, NULL, NULL);
            return 0;
        }
        set_error(t, e);
        handshake_failed(t);
        return 0;
    }
    t->handshaken = 1;
    log_debug("TLS handshake with the %s done: %s, %s, session %s",
              SSL_is_server(t->ssl) ? "client" : "backend", SSL_get_version(t->ssl),
              SSL_get_cipher_name(t->ssl), SSL_session_reused(t->ssl) ? "resumed" : "new");
    flush_out(t, NULL, NULL);
    if (t->early_len > 0) {
        uv_buf_t b = uv_buf_init(t->early, (unsigned)t->early_len);
        t->early_len = 0;
        tls_writev(t->x, &b, 1, t->early_done, t->early_ctx);
    }
    free(t->early);
    t->early = NULL;
    t->early_cap = 0;
    sock_reading_update(t);
    t->handshake(t->x, NULL);
    return !t->dead;
}

/* Decrypt what OpenSSL holds into the owner's buffers while it reads. */
static void deliver(struct tls *t)
{
    uv_stream_t *st = &t->x->h.stream;
    while (t->reading && !t->dead && !t->failed) {
        uv_buf_t buf;
        t->alloc_cb(&t->x->h.handle, CIPHER_CHUNK, &buf);
        ERR_clear_error();
        int n = SSL_read(t->ssl, buf.base, buf.len > INT32_MAX ? INT32_MAX : (int)buf.len);
        if (n > 0) {
            t->read_cb(st, n, &buf);
            continue;
        }
        int e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ) {
            if (t->eof == 0)
                break;
            /* Everything before the socket's end was delivered: now the end. */
            t->failed = 1;
            t->read_cb(st, t->eof, &buf);
            break;
        }
        t->failed = 1;
        sock_reading_update(t);
        if (e == SSL_ERROR_ZERO_RETURN) {
            t->read_cb(st, UV_EOF, &buf);       /* close_notify */
        } else {
            set_error(t, e);
            t->read_cb(st, UV_EPROTO, &buf);
        }
        break;
    }
}

static void free_now(struct tls *t)
{
    SSL_free(t->ssl);               /* frees both BIOs */
    free(t->early);
    free(t);
}

/* Everything after new ciphertext or a resume: handshake, plaintext, and
 * whatever OpenSSL wants to send meanwhile (alerts, key updates). */
static void pump(struct tls *t)
{
    t->busy++;
    if (t->handshaken || (!t->failed && handshake_step(t))) {
        deliver(t);
        if (!t->dead)
            flush_out(t, NULL, NULL);
    }
    if (--t->busy == 0 && t->dead)
        free_now(t);
}

static void on_cipher_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct tls *t = tls_of(st);
    if (nread == 0)
        return;
    if (nread < 0) {
        t->eof = (int)nread;
        sock_reading_update(t);
        if (!t->handshaken && !t->failed) {
            snprintf(t->err, sizeof t->err, "%s",
                     nread == UV_EOF ? "connection closed during the handshake"
                                     : uv_strerror((int)nread));
            handshake_failed(t);
            return;
        }
        pump(t);
        return;
    }
    BIO_write(t->rbio, buf->base, (int)nread);
    pump(t);
}

static void on_resume(uv_idle_t *h)
{
    struct tls *list = resume_head;
    resume_head = NULL;
    uv_idle_stop(h);
    while (list != NULL) {
        struct tls *t = list;
        list = t->next_resume;
        t->queued = 0;
        pump(t);
    }
}

static void resume_later(struct tls *t)
{
    if (t->queued)
        return;
    t->queued = 1;
    t->next_resume = resume_head;
    resume_head = t;
    uv_idle_start(&resume_idle, on_resume);
}

static void resume_forget(struct tls *t)
{
    if (!t->queued)
        return;
    for (struct tls **pp = &resume_head; *pp != NULL; pp = &(*pp)->next_resume) {
        if (*pp == t) {
            *pp = t->next_resume;
            break;
        }
    }
    t->queued = 0;
}

int tls_start(struct xport *x, struct tls_context *ctx, const char *name, tls_handshake_fn done)
{
    struct tls *t = xcalloc(1, sizeof *t);
    t->ssl = SSL_new(ctx->ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        free(t);
        return UV_ENOMEM;
    }
    /* An empty read BIO means "more later", not end of file. */
    BIO_set_mem_eof_return(t->rbio, -1);
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    t->x = x;
    t->handshake = done;
    int is_client = !SSL_is_server(t->ssl);     /* from the context's method */
    if (is_client) {
        SSL_set_connect_state(t->ssl);
        if (name != NULL)
            set_peer_name(t->ssl, name);
        if (ctx->resume != NULL)
            SSL_set_session(t->ssl, ctx->resume);
    } else {
        SSL_set_accept_state(t->ssl);
    }
    x->tls = t;
    sock_reading_update(t);
    if (is_client)
        pump(t);            /* the ClientHello */
    return 0;
}

void tls_free(struct tls *t)
{
    if (t == NULL)
        return;
    if (t->handshaken && t->err[0] == '\0' && !t->dead) {
        /* A clean end: close_notify, best effort (the handle is closing).
         * It also keeps the session resumable: OpenSSL drops the session of
         * a connection freed without one. */
        ERR_clear_error();
        SSL_shutdown(t->ssl);
        ERR_clear_error();
        flush_out(t, NULL, NULL);
    }
    resume_forget(t);
    if (t->sock_reading)
        uv_read_stop(&t->x->h.stream);
    t->sock_reading = 0;
    t->reading = 0;
    if (t->busy > 0)
        t->dead = 1;        /* pump() frees it on the way out */
    else
        free_now(t);
}

int tls_read_start(struct xport *x, uv_alloc_cb alloc_cb, uv_read_cb read_cb)
{
    struct tls *t = x->tls;
    t->alloc_cb = alloc_cb;
    t->read_cb = read_cb;
    if (t->reading)
        return 0;
    t->reading = 1;
    sock_reading_update(t);
    if (t->handshaken && !t->failed &&
        (SSL_pending(t->ssl) > 0 || BIO_ctrl_pending(t->rbio) > 0 || t->eof != 0))
        resume_later(t);
    return 0;
}

void tls_read_stop(struct xport *x)
{
    struct tls *t = x->tls;
    t->reading = 0;
    resume_forget(t);
    sock_reading_update(t);
}

int tls_writev(struct xport *x, const uv_buf_t *iov, int n, tls_write_done_fn done, void *ctx)
{
    struct tls *t = x->tls;
    if (t->failed && !t->handshaken)
        return UV_EPROTO;
    if (!t->handshaken) {
        for (int i = 0; i < n; i++) {
            if (t->early_len + iov[i].len > t->early_cap) {
                t->early_cap = (t->early_len + iov[i].len) * 2;
                t->early = xrealloc(t->early, t->early_cap);
            }
            memcpy(t->early + t->early_len, iov[i].base, iov[i].len);
            t->early_len += iov[i].len;
        }
        t->early_done = done;
        t->early_ctx = ctx;
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const char *p = iov[i].base;
        size_t left = iov[i].len;
        while (left > 0) {
            int len = left > WRITE_SLICE ? WRITE_SLICE : (int)left;
            ERR_clear_error();
            int w = SSL_write(t->ssl, p, len);
            if (w <= 0) {
                set_error(t, SSL_get_error(t->ssl, w));
                return UV_EPROTO;
            }
            p += w;
            left -= (size_t)w;
            if (BIO_ctrl_pending(t->wbio) >= WRITE_SLICE) {
                int r = flush_out(t, done, ctx);
                if (r < 0)
                    return r;
            }
        }
    }
    return flush_out(t, done, ctx);
}

size_t tls_pending(const struct tls *t)
{
    return t->early_len;
}

int tls_shutdown(struct xport *x, uv_shutdown_t *req, uv_shutdown_cb cb)
{
    struct tls *t = x->tls;
    if (t->handshaken) {
        ERR_clear_error();
        SSL_shutdown(t->ssl);
        ERR_clear_error();
        int r = flush_out(t, NULL, NULL);
        if (r < 0)
            return r;
    }
    return uv_shutdown(req, &x->h.stream, cb);
}

int tls_handshake_done(const struct tls *t)
{
    return t->handshaken;
}

const char *tls_client_sni(const struct tls *t)
{
    return SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name);
}

const char *tls_error(const struct tls *t)
{
    return t->err;
}

void tls_init(uv_loop_t *loop)
{
    if (resume_inited)
        return;
    uv_idle_init(loop, &resume_idle);
    resume_inited = 1;
}

void tls_shutdown_module(void)
{
    if (!resume_inited)
        return;
    uv_close((uv_handle_t *)&resume_idle, NULL);
    resume_inited = 0;
    free(out_buf);
    out_buf = NULL;
    out_cap = 0;
}

/* ---- blocking (ttlguard audit) -------------------------------------------------- */

struct tls_blocking {
    SSL *ssl;
};

struct tls_blocking *tls_blocking_connect(struct tls_context *ctx, int fd, const char *name,
                                          char *err, size_t errlen)
{
    struct tls t = { 0 };
    t.ssl = SSL_new(ctx->ctx);
    if (t.ssl == NULL || SSL_set_fd(t.ssl, fd) != 1) {
        snprintf(err, errlen, "TLS: %s", ssl_reason("cannot create a session"));
        SSL_free(t.ssl);
        return NULL;
    }
    if (name != NULL)
        set_peer_name(t.ssl, name);
    ERR_clear_error();
    int r = SSL_connect(t.ssl);
    if (r != 1) {
        int e = SSL_get_error(t.ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            snprintf(t.err, sizeof t.err, "handshake timed out");
        else
            set_error(&t, e);
        snprintf(err, errlen, "TLS: %s", t.err);
        SSL_free(t.ssl);
        return NULL;
    }
    struct tls_blocking *b = xcalloc(1, sizeof *b);
    b->ssl = t.ssl;
    return b;
}

/* -1 with errno for a failed SSL_read/SSL_write. */
static ssize_t blocking_error(struct tls_blocking *b, int r)
{
    int e = SSL_get_error(b->ssl, r);
    int saved = errno;
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        errno = saved == EINTR ? EINTR : EAGAIN;
    else if (e == SSL_ERROR_SYSCALL && saved != 0)
        errno = saved;
    else if (e == SSL_ERROR_SYSCALL)
        return 0;           /* the peer closed without close_notify */
    else
        errno = EPROTO;
    return -1;
}

ssize_t tls_blocking_send(struct tls_blocking *b, const void *p, size_t n)
{
    ERR_clear_error();
    errno = 0;
    int r = SSL_write(b->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    return r > 0 ? r : blocking_error(b, r);
}

ssize_t tls_blocking_recv(struct tls_blocking *b, void *p, size_t n)
{
    ERR_clear_error();
    errno = 0;
    int r = SSL_read(b->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    return r > 0 ? r : blocking_error(b, r);
}

void tls_blocking_free(struct tls_blocking *b)
{
    if (b == NULL)
        return;
    SSL_free(b->ssl);
    free(b);
}
