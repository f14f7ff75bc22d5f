/*
 * config: the INI file (inih) turned into one immutable, validated struct.
 *
 * Errors carry "FILE:LINE: what is wrong". A config is never edited after
 * config_load() returns: a reload builds a new one and swaps the pointer.
 * A config owns its TLS contexts: config_load() reads the certificates and
 * keys, so a bad one fails the load like any bad value.
 */
#ifndef TTLG_CONFIG_H
#define TTLG_CONFIG_H

#include <stddef.h>
#include "auth.h"
#include "rules.h"

struct tls_context;

enum log_keys {
    LOG_KEYS_FULL,      /* key names as they are */
    LOG_KEYS_HASH,      /* hex of a keyed hash of the key */
    LOG_KEYS_PREFIX,    /* only the matched rule prefix */
};

/* audit_from: where the background audit reads the keyspace. */
enum audit_from {
    AUDIT_FROM_PRIMARY,     /* the backend, or every primary of the cluster */
    AUDIT_FROM_REPLICA,     /* cluster = on: a replica of each shard (its primary if none) */
    AUDIT_FROM_ADDR,        /* cluster = off: the server at audit_from_addr */
};

struct config {
    char *path;                     /* file it was read from; NULL for built-in defaults */

    /* [proxy] */
    char *listen;                   /* "127.0.0.1:6380"; NULL when only tls_listen is set */
    char *backend;                  /* "127.0.0.1:6379"; with cluster = on the first seed */
    char *backend_seeds;            /* cluster = on: every seed as written, space separated */
    char *backend_username;         /* NULL when unset */
    char *backend_password;         /* NULL when unset */
    char *sentinel;                 /* Sentinel addresses as written, space separated; NULL:
                                       the backend is `backend` (sentinel.c) */
    char *sentinel_master;          /* the master name the Sentinels know; with sentinel */
    char *sentinel_username;        /* the Sentinels' own login; NULL when unset */
    char *sentinel_password;
    int sentinel_tls;               /* TLS to the Sentinels (backend_tls_* files); 0 */
    struct secret client_password;  /* the `default` user's password (auth.h) */
    struct auth_users users;        /* default (client_password) and [user] sections: clients
                                       log in to ttlguard itself when there is any */
    int protected_mode;             /* listeners other hosts reach need client auth; 1 */
    unsigned auth_timeout;          /* seconds a client has to log in; 0 = off; 10 */
    int max_clients;                /* 10000 */
    int max_pending;                /* requests of one client owed a reply at most; 100000 */
    unsigned client_idle_timeout;   /* seconds; 0 = off */
    size_t max_buffer;              /* bytes per direction per session; 4 MiB */
    unsigned connect_timeout;       /* ms for a backend connect; 3000 */
    char *events;                   /* NULL = off, "stderr", or a file path */
    char *admin;                    /* NULL = off, else "host:port" */
    struct secret admin_token;      /* Authorization: Bearer TOKEN for /metrics and /rules */
    enum log_keys log_keys;         /* full */
    int log_format;                 /* ttlguard's own log lines: 0 text, 1 JSON */
    unsigned event_window;          /* seconds repeats are folded; 10 */
    int multiplex;                  /* share backend connections between sessions; 1 */
    int watch;                      /* check keys written out of sight (watch.c); 0 */
    int watch_configure;            /* ...and set notify-keyspace-events if needed; 0 */
    unsigned audit_interval;        /* seconds between the starts of two background audit
                                       passes (audit_bg.c); 0 = off */
    unsigned audit_rate;            /* keys per second the background audit reads; 1000 */
    int audit_memory;               /* ...and MEMORY USAGE of each key: bytes per rule; 0 */
    int audit_from;                 /* enum audit_from: the servers it reads; primary */
    char *audit_from_addr;          /* audit_from = HOST:PORT: that server; else NULL */

    /* TLS (tls.h). Paths are NULL when unset. */
    int backend_tls;                /* TLS to the backend; 0 */
    char *backend_tls_ca_cert_file; /* whom to trust; both NULL: the system store */
    char *backend_tls_ca_cert_dir;
    char *backend_tls_cert_file;    /* client certificate (mutual TLS) and its key */
    char *backend_tls_key_file;
    char *backend_tls_server_name;  /* SNI and the name verified; NULL: the backend host */
    int backend_tls_verify;         /* verify the backend's certificate; 1 */
    char *tls_listen;               /* a TLS listener for clients; NULL = none */
    char *tls_cert_file;            /* what it shows its clients */
    char *tls_key_file;
    char *tls_ca_cert_file;         /* what client certificates are verified against */
    char *tls_ca_cert_dir;
    int tls_auth_clients;           /* 0 no, 1 optional, 2 yes */
    char *tls_protocols;            /* both sides; NULL: "TLSv1.2 TLSv1.3" */
    char *tls_ciphers;
    char *tls_ciphersuites;
    struct tls_context *backend_tls_ctx;    /* built by config_load: NULL when backend_tls off */
    struct tls_context *client_tls_ctx;     /* NULL without tls_listen */
    struct tls_context *sentinel_tls_ctx;   /* NULL unless sentinel and sentinel_tls */

    /* Redis Cluster (cluster.c) */
    int cluster;                    /* enum cluster_mode; CLUSTER_OFF */
    int cluster_port_min;           /* cluster_ports: one listener per node from this range */
    int cluster_port_max;
    char *cluster_announce;         /* host in rewritten topology replies; NULL: the listen host */

    /* [default], [ttl "P"], [durable "P"] */
    struct ruleset rules;
};

/* cluster = off | on | route (the words' order is parse_choice's). */
enum cluster_mode {
    CLUSTER_OFF,
    CLUSTER_ON,         /* one listener per node (cluster.c) */
    CLUSTER_ROUTE,      /* one address, requests routed by slot (route.c) */
};

/* Fill *cfg with the built-in defaults (no file). The strings are allocated:
 * release with config_free(). */
void config_defaults(struct config *cfg);

/* Read path into *cfg (which need not be initialised). On error returns -1
 * with "path:line: reason" in err ("path: cannot open: ..." when the file
 * cannot be opened) and leaves *cfg freed (nothing to release). The format
 * and every message are in docs/config.md. */
int config_load(const char *path, struct config *cfg, char *err, size_t errlen);

/* Protected mode: why cfg may not serve clients at listen_text (an address
 * other hosts reach while the proxy logs every client in to Redis with
 * backend_password and clients do not authenticate), or NULL when it may. */
const char *config_exposure_problem(const struct config *cfg, const char *listen_text);

/* Frees everything *cfg owns and zeroes it, so a second call is harmless. */
/* events = stderr: the event log goes to standard error, not to a file. */
int config_events_to_stderr(const char *events);

void config_free(struct config *cfg);

/* Parse a byte size as written in the file: "4096", "64kb", "4mb", "1gb"
 * (suffixes x1024, any case). Returns 0, or -1 without touching *out. */
int config_parse_bytes(const char *text, size_t *out);

/* Parse a duration as written in the file: "3600", "90s", "30m", "1h",
 * "7d" (any case); "" is 0. Returns 0, or -1 without touching *secs. */
int config_parse_duration(const char *text, unsigned long long *secs);

#endif
