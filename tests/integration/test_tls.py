"""
TLS on both sides of ttlguard (backend_tls*, tls_listen, tls_*; docs/config.md, "TLS"):

  - to a TLS-only redis-server (--port 0 --tls-port P), verified with a CA
    file or a hashed CA directory: commands, TTL rules, byte-identical
    replies; AUTH and mutual TLS (TLS 1.2 and 1.3);
  - a TLS listener for clients, to a plain and to a TLS backend: redis-cli
    --tls, python3-redis with ssl=True, raw RESP2 and RESP3 compared byte
    for byte with redis-server itself; `listen =` empty; a unix socket;
    tls_protocols, tls_ciphers, tls_ciphersuites;
  - over TLS on both sides: MULTI/EXEC, pub/sub, BLPOP, a 20 MB value, a
    10,000-command pipeline in one write, shared backend connections, a
    client that does not read (backpressure, bounded memory);
  - failures: wrong CA, wrong name, expired certificate, a backend that does
    not speak TLS, one that never answers the handshake: the client gets
    `-ERR ttlguard: backend ... unavailable: TLS: <reason>` within a bounded
    time and the log says why; backend_tls_verify = off and
    backend_tls_server_name make the matching cases work;
  - the listener: plain or garbage clients, and clients that never finish
    the handshake, closed and logged (and counted in /metrics); client
    certificates (tls_auth_clients no / optional / yes);
  - --check-config loads the certificates and refuses TLS key mistakes;
    SIGHUP rotates the listener's certificate under load and re-reads the
    backend's CA (a bad file keeps the running ones);
  - /healthz and `ttlguard audit` with a TLS backend.

The certificates (tls_util.make_certs) are made once per session with the
openssl CLI. Every server the suite runs against is built with TLS (Debian's
redis-server, and tests/servers.sh's builds): one that has OpenSSL in it and
does not come up on TLS (a start that times out is retried once, with a longer
timeout) fails the tests that need it, with the reason. Only a binary built
without TLS (no OpenSSL in it) skips them, as it cannot serve TLS at all.
"""

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time

import pytest

import harness
from harness import Conn, RespMap, enc, free_port, slow, vmrss_kb, wait_for
from tls_util import (TlsConn, TlsRedis, TlsTtlguard, client_context, make_certs,
                      require_server_tls, silent_listener, tls_client_list)

UNAVAILABLE_TLS = rb"^-ERR ttlguard: backend 127\.0\.0\.1:%d unavailable: TLS: "
MULTIPLEX_ON = harness.EXTRA_CONF.get("multiplex", "on").strip() != "off"


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("tls-certs")))


@pytest.fixture
def make_tls_redis(tmp_path, certs):
    """make_tls_redis(auth_clients="no", cert=None, extra_args=(), plain=False)
    -> a started TlsRedis. Fails the test when SERVER_BIN, built with TLS,
    does not serve it; skips it only when SERVER_BIN was built without TLS."""
    started = []

    def make(auth_clients="no", cert=None, extra_args=(), plain=False):
        require_server_tls(tmp_path, certs)
        r = TlsRedis(tmp_path, certs, auth_clients, cert, extra_args, plain=plain).start()
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


@pytest.fixture
def tls_redis(make_tls_redis):
    return make_tls_redis()


@pytest.fixture
def make_tproxy(tmp_path, certs, request):
    """make_tproxy(backend, conf, sections="", plain=True, ...) -> a started
    TlsTtlguard; at teardown it gets SIGTERM and must exit 0 (as the
    harness's make_proxy), and its stderr is shown when the test failed."""
    started = []

    def make(backend, conf=None, sections="", plain=True, expect=None, ready="ping", **kw):
        harness.need_binary()
        port = backend if isinstance(backend, int) else backend.port
        p = TlsTtlguard(tmp_path, port, certs, conf, sections, plain=plain, **kw)
        started.append(p)
        p.start(expect=expect, ready=ready)
        return p

    yield make
    problems = []
    for p in started:
        was_running = p.proc is not None
        rc = p.stop()
        failed = getattr(request.node, "rep_call", None)
        if (failed is not None and failed.failed) or (was_running and rc != 0):
            sys.stderr.write("---- ttlguard %d stderr (exit %s) ----\n%s\n"
                             % (p.port, rc, p.stderr()))
        if was_running and rc != 0:
            problems.append("ttlguard on port %d: SIGTERM exit status %s\n%s"
                            % (p.port, rc, p.stderr()))
    assert not problems, "\n".join(problems)


def backend_tls(certs, **over):
    """[proxy] keys for a verified TLS backend (the session CA)."""
    c = {"backend_tls": "on", "backend_tls_ca_cert_file": certs.ca.cert}
    c.update(over)
    return c


def listener(certs, **over):
    """[proxy] keys for a TLS listener on a fresh port, serving certs.server."""
    c = {"tls_listen": "127.0.0.1:%d" % free_port(),
         "tls_cert_file": certs.server.cert, "tls_key_file": certs.server.key,
         "tls_ca_cert_file": certs.ca.cert}
    c.update(over)
    return c


def both(certs, **over):
    c = backend_tls(certs)
    c.update(listener(certs))
    c.update(over)
    return c


def unavailable_reply(port, timeout=10):
    """Send PING on a new connection to `port` (ttlguard's plain listener);
    return (everything until the close, seconds it took)."""
    with Conn(port, timeout=timeout) as c:
        t0 = time.monotonic()
        c.send(enc("PING"))
        data = c.read_until_eof(timeout=timeout)
        return data, time.monotonic() - t0


def _ping(port):
    """PING on a new connection to port: the reply (a RespError when the
    backend is unavailable)."""
    with Conn(port, timeout=5) as c:
        return c.cmd("PING")


def assert_unavailable_tls(proxy, backend_port, reason_re, n=2):
    """n clients in turn each get the one-line backend error naming TLS and
    the reason, then the close; ttlguard's log says the same."""
    for _ in range(n):
        data, took = unavailable_reply(proxy.port)
        assert re.match(UNAVAILABLE_TLS % backend_port, data), data
        assert data.endswith(b"\r\n") and data.count(b"\r\n") == 1, data
        assert re.search(reason_re.encode(), data, re.I), (reason_re, data)
        assert took < slow(5), took
    wait_for(lambda: re.search(r"unavailable: TLS: .*(%s)" % reason_re, proxy.stderr(), re.I),
             5, "ttlguard's log line 'unavailable: TLS: %s'" % reason_re)


# A script of commands whose replies cover every RESP2 and RESP3 type;
# run once straight to redis and once through ttlguard, byte for byte.
SCRIPT = [
    ("SET", "s:str", "v"), ("GET", "s:str"), ("APPEND", "s:str", "w"),
    ("INCR", "s:n"), ("INCRBYFLOAT", "s:n", "1.5"),
    ("HSET", "s:h", "a", "1", "b", "2"), ("HGETALL", "s:h"),
    ("RPUSH", "s:l", "x", "y", "z"), ("LRANGE", "s:l", 0, -1),
    ("SADD", "s:s", "m"), ("SMEMBERS", "s:s"),
    ("ZADD", "s:z", "1.5", "m", "2", "n"), ("ZRANGE", "s:z", 0, -1, "WITHSCORES"),
    ("ZSCORE", "s:z", "m"), ("GET", "s:missing"), ("LPOP", "s:missing"),
    ("SET", b"s:bin\x00\xff\r\n", b"\x00\r\n\xff" * 1000), ("GET", b"s:bin\x00\xff\r\n"),
    ("NOSUCHCOMMAND", "x"), ("TYPE", "s:h"), ("EXISTS", "s:str", "s:h", "s:missing"),
    ("DEL", "s:str", "s:n", "s:h", "s:l", "s:s", "s:z", b"s:bin\x00\xff\r\n"),
]


def script_bytes(c, resp3=False):
    """The raw replies of SCRIPT on connection c (after HELLO 3 when
    resp3; HELLO's own reply carries the connection id, so only its
    protocol field is checked)."""
    if resp3:
        hello = c.cmd("HELLO", "3")
        assert isinstance(hello, RespMap), hello
        assert dict(hello)[b"proto"] == 3, hello
    out = []
    for args in SCRIPT:
        c.send(enc(*args))
        out.append(c.reply_raw()[1])
    return out


# --------------------------------------------------------------------------
# backend TLS
# --------------------------------------------------------------------------

def test_backend_tls_verified_commands_and_rules(tls_redis, make_tproxy, certs):
    """Through the plain listener to a TLS-only redis (there is no plain
    port to fall back on): replies byte-identical to redis's own over TLS;
    a rewrite rule works on keys the proxy reaches over TLS (GETSET keeps
    the remaining TTL, INCR gets the rule's 900 s)."""
    p = make_tproxy(tls_redis, backend_tls(certs),
                    sections='[ttl "t:"]\nttl = 900\naction = rewrite\n')
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
        assert c.cmd("SET", "k", "v") == b"OK"
        assert c.cmd("GET", "k") == b"v"
        assert c.cmd("SET", "t:k", "v", "EX", 100) == b"OK"
        assert c.cmd("GETSET", "t:k", "0") == b"v"
        assert 0 < c.cmd("TTL", "t:k") <= 100
        assert c.cmd("INCR", "t:n") == 1
        assert 890 <= c.cmd("TTL", "t:n") <= 900
        proxied = script_bytes(c)
    with tls_redis.conn() as d:
        assert d.cmd("GET", "k") == b"v"         # it went to this server
        assert 0 < d.cmd("TTL", "t:k") <= 100 and d.cmd("GET", "t:k") == b"0"
        assert 890 <= d.cmd("TTL", "t:n") <= 900
        direct = script_bytes(d)
    assert proxied == direct


def test_backend_auth_over_tls(make_tls_redis, make_tproxy, certs):
    """requirepass on the TLS server: ttlguard's backend_password is sent
    over TLS on every backend connection; the client never sends AUTH."""
    r = make_tls_redis(extra_args=["--requirepass", "s3cret"])
    with r.conn() as d:
        assert d.cmd("PING").startswith(b"NOAUTH")       # the control
    p = make_tproxy(r, backend_tls(certs, backend_password="s3cret"), expect=b"+PONG")
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
        assert c.cmd("SET", "a", "1") == b"OK"
        assert c.cmd("INCR", "a") == 2
    with Conn(p.port) as c:
        assert c.cmd("GET", "a") == b"2"


@pytest.mark.parametrize("protocol", ["TLSv1.2", "TLSv1.3"])
def test_mutual_tls_to_the_backend(protocol, make_tls_redis, make_tproxy, certs):
    """redis with --tls-auth-clients yes: ttlguard presenting
    backend_tls_cert_file/key_file is served; without them each client
    gets the backend error naming TLS, and ttlguard logs it. Under TLS 1.2
    redis refuses during the handshake; under TLS 1.3 ttlguard's side of
    the handshake is done before redis judges the (missing) certificate
    and sends its alert, so the refusal arrives with the first read; when
    redis has already closed by then, the kernel answers ttlguard's first
    write with a reset, and the alert is lost: "connection reset by peer"
    (seen under ASan's slower timing)."""
    r = make_tls_redis(auth_clients="yes", extra_args=["--tls-protocols", protocol])
    good = make_tproxy(r, backend_tls(certs, backend_tls_cert_file=certs.client.cert,
                                      backend_tls_key_file=certs.client.key), expect=b"+PONG")
    with Conn(good.port) as c:
        assert c.cmd("SET", "m", "tls") == b"OK"
        assert c.cmd("GET", "m") == b"tls"
    # ready="accept": the test, not the start-up poll, looks at the reply.
    bad = make_tproxy(r, backend_tls(certs), ready="accept")
    refused = UNAVAILABLE_TLS % r.port
    if protocol == "TLSv1.3":
        refused = rb"^-ERR ttlguard: backend 127\.0\.0\.1:%d unavailable: " \
                  rb"(TLS: |connection reset by peer)" % r.port
    for _ in range(2):
        data, took = unavailable_reply(bad.port)
        assert re.match(refused, data), data
        assert b"PONG" not in data and took < slow(5), (data, took)
    wait_for(lambda: re.search("unavailable: (TLS:|connection reset by peer)", bad.stderr()), 5,
             "the log line")


VERIFY_FAILURES = {
    # case: (server certificate, extra [proxy] keys, reason)
    "wrong-ca": ("server", {"backend_tls_ca_cert_file": "OTHER_CA"},
                 # redis-server sends its CA along (OpenSSL builds the chain
                 # from its trust store): an untrusted self-signed root, then.
                 r"certificate verify failed.*(unable to get local issuer certificate"
                 r"|self-signed certificate in certificate chain)"),
    "server-name": ("server", {"backend_tls_server_name": "wrong.example"},
                    r"certificate verify failed.*hostname mismatch"),
    "cert-for-another-name": ("wrong_name", {},
                              r"certificate verify failed.*(hostname|IP address) mismatch"),
    "expired": ("expired", {}, r"certificate verify failed.*certificate has expired"),
}


@pytest.mark.parametrize("case", sorted(VERIFY_FAILURES))
def test_backend_verification_fails(case, make_tls_redis, make_tproxy, certs):
    """A backend certificate that does not verify: every client request
    gets `-ERR ttlguard: backend 127.0.0.1:P unavailable: TLS: <OpenSSL's
    reason>` and the close, at once; the log line carries the reason."""
    cert, extra, reason = VERIFY_FAILURES[case]
    r = make_tls_redis(cert=getattr(certs, cert))
    extra = {k: (certs.other_ca.cert if v == "OTHER_CA" else v) for k, v in extra.items()}
    p = make_tproxy(r, backend_tls(certs, **extra))
    assert_unavailable_tls(p, r.port, reason)
    assert p.proc.poll() is None


def test_backend_server_name_and_verify_off(make_tls_redis, make_tproxy, certs):
    """The other side of two failures above: backend_tls_server_name =
    wrong.example verifies the wrong.example certificate; backend_tls_verify
    = off accepts a certificate from an unknown CA, with a warning at start."""
    named = make_tls_redis(cert=certs.wrong_name)
    p = make_tproxy(named, backend_tls(certs, backend_tls_server_name="wrong.example"),
                    expect=b"+PONG")
    with Conn(p.port) as c:
        assert c.cmd("SET", "n", "1") == b"OK" and c.cmd("GET", "n") == b"1"
    assert "backend_tls_verify = off" not in p.stderr()

    other = make_tls_redis(cert=certs.other_server)
    q = make_tproxy(other, backend_tls(certs, backend_tls_verify="off"), expect=b"+PONG")
    with Conn(q.port) as c:
        assert c.cmd("SET", "o", "1") == b"OK" and c.cmd("GET", "o") == b"1"
    assert "backend_tls_verify = off" in q.stderr(), q.stderr()


def test_backend_ca_cert_dir(tls_redis, make_tproxy, certs):
    """backend_tls_ca_cert_dir (a hashed directory) instead of the file:
    the directory holding the session CA verifies the backend, the one
    holding the other CA does not."""
    p = make_tproxy(tls_redis, {"backend_tls": "on", "backend_tls_ca_cert_dir": certs.ca_dir},
                    expect=b"+PONG")
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
    q = make_tproxy(tls_redis, {"backend_tls": "on",
                                "backend_tls_ca_cert_dir": certs.other_ca_dir})
    assert_unavailable_tls(q, tls_redis.port, r"certificate verify failed", n=1)


def test_sighup_rereads_the_backend_ca(tls_redis, make_tproxy, certs, tmp_path):
    """The file behind backend_tls_ca_cert_file holds the wrong CA: TLS
    errors; the right CA put there, SIGHUP: new clients are served; then
    garbage there, SIGHUP: refused, and the running CA stays in force."""
    ca = str(tmp_path / "backend-ca.pem")
    shutil.copyfile(certs.other_ca.cert, ca)
    p = make_tproxy(tls_redis, backend_tls(certs, backend_tls_ca_cert_file=ca))
    assert_unavailable_tls(p, tls_redis.port, r"certificate verify failed", n=1)
    shutil.copyfile(certs.ca.cert, ca)
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: _ping(p.port) == b"PONG", 5, "PING to work after the reload")
    with Conn(p.port) as c:
        assert c.cmd("SET", "after", "reload") == b"OK"
    assert "config refused" not in p.stderr()
    _write(ca, "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "config refused, keeping the running one" in p.stderr(), 5,
             "the reload to be refused")
    assert ca in p.stderr().split("config refused, keeping the running one")[-1], p.stderr()
    with Conn(p.port) as c:
        assert c.cmd("GET", "after") == b"reload"


def test_backend_that_does_not_speak_tls(redis_srv, make_tproxy, certs):
    """backend_tls = on against a plain redis-server port: the handshake
    fails (or times out at connect_timeout) and the client gets the TLS
    error, bounded; redis itself is unharmed."""
    p = make_tproxy(redis_srv, backend_tls(certs, connect_timeout="500"))
    for _ in range(2):
        data, took = unavailable_reply(p.port)
        assert re.match(UNAVAILABLE_TLS % redis_srv.port, data), data
        assert took < slow(0.5) + 2, took
    wait_for(lambda: "unavailable: TLS:" in p.stderr(), 5, "the log line")
    with Conn(redis_srv.port) as d:
        assert d.cmd("PING") == b"PONG"


def test_backend_that_never_answers_the_handshake(make_tproxy, certs):
    """A backend that accepts TCP and never says a word: connect_timeout
    covers the handshake; the client gets the TLS error after about that
    long, not a hang, and the proxy serves the next client the same way."""
    silent = silent_listener()
    try:
        port = silent.getsockname()[1]
        p = make_tproxy(port, backend_tls(certs, connect_timeout="500"))
        for _ in range(2):
            data, took = unavailable_reply(p.port)
            assert re.match(UNAVAILABLE_TLS % port, data), data
            assert 0.4 <= took < slow(0.5) + 2, took
        wait_for(lambda: "unavailable: TLS:" in p.stderr(), 5, "the log line")
    finally:
        silent.close()


# --------------------------------------------------------------------------
# the TLS listener
# --------------------------------------------------------------------------

def _redis_cli(certs, port, *args, ca=None):
    return subprocess.run(["redis-cli", "--tls", "--cacert", ca or certs.ca.cert,
                           "-h", "127.0.0.1", "-p", str(port)] + list(args),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=slow(10))


@pytest.mark.parametrize("backend", ["plain", "tls"])
def test_tls_listener_clients(backend, make_tls_redis, make_tproxy, certs, request):
    """Clients on tls_listen, to a plain backend and to a TLS one:
    redis-cli --tls and python3-redis (ssl=True, hostname checked) work;
    a client that does not trust the proxy's CA is refused; raw RESP2 and
    RESP3 replies are byte-identical to redis-server's own."""
    if backend == "tls":
        r = make_tls_redis()
        p = make_tproxy(r, both(certs))
        direct = r.conn
    else:
        r = request.getfixturevalue("redis_srv")
        p = make_tproxy(r, listener(certs))
        direct = lambda: Conn(r.port)   # noqa: E731
    out = _redis_cli(certs, p.tls_port, "SET", "cli:k", "hello")
    assert (out.returncode, out.stdout) == (0, "OK\n"), out
    out = _redis_cli(certs, p.tls_port, "GET", "cli:k")
    assert (out.returncode, out.stdout) == (0, "hello\n"), out
    out = _redis_cli(certs, p.tls_port, "PING", ca=certs.other_ca.cert)
    assert out.returncode != 0 and "PONG" not in out.stdout, out

    import redis
    rc = redis.Redis(host="127.0.0.1", port=p.tls_port, ssl=True, ssl_ca_certs=certs.ca.cert,
                     ssl_cert_reqs="required", ssl_check_hostname=True,
                     socket_timeout=slow(10))
    try:
        assert rc.ping() is True
        assert rc.get("cli:k") == b"hello"
        assert rc.hset("py:h", mapping={"a": "1", "b": "2"}) == 2
        assert rc.hgetall("py:h") == {b"a": b"1", b"b": b"2"}
        pipe = rc.pipeline(transaction=False)
        for _ in range(100):
            pipe.incr("py:n")
        assert pipe.execute() == list(range(1, 101))
        pipe = rc.pipeline(transaction=True)
        pipe.set("py:t", "x").get("py:t")
        assert pipe.execute() == [True, b"x"]
    finally:
        rc.close()

    for resp3 in (False, True):
        with p.tls_conn() as c:
            proxied = script_bytes(c, resp3)
        with direct() as d:
            assert script_bytes(d, resp3) == proxied, "resp3=%s" % resp3
    with p.tls_conn() as c:                       # the plain listener is there too
        with Conn(p.port) as plain:
            assert c.cmd("GET", "cli:k") == plain.cmd("GET", "cli:k") == b"hello"


def test_tls_listener_only(redis_srv, make_tproxy, certs):
    """`listen =` empty with tls_listen set: TLS clients alone are served."""
    p = make_tproxy(redis_srv, listener(certs), plain=False)
    with p.tls_conn() as c:
        assert c.cmd("SET", "only", "tls") == b"OK"
        assert c.cmd("GET", "only") == b"tls"
    with Conn(redis_srv.port) as d:
        assert d.cmd("GET", "only") == b"tls"


# What a TLS server can judge at once (a record or a handshake message cut
# short would make it wait for the rest): RESP, inline, HTTP, text, and a
# complete handshake record holding a ClientHello that is nonsense.
GARBAGE = [enc("PING"), b"PING\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
           b"garbage\r\n" * 300,
           b"\x16\x03\x01\x00\x10" + b"\x01\x00\x00\x0c" + b"\x01" * 12]


def _plain_to_tls(port, data):
    """A plain TCP client sends data to a TLS port; what it reads until the
    close (a TLS alert at most, never a RESP reply)."""
    with Conn(port, timeout=5) as c:
        c.send(data)
        try:
            return c.read_until_eof(timeout=5)
        except ConnectionResetError:
            return b""


def _handshake_errors(admin):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", admin, timeout=slow(10))
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    m = re.search(r"^ttlguard_tls_handshake_errors_total (\d+)$", text, re.M)
    assert m, text[:2000]
    return int(m.group(1))


def test_plain_and_garbage_clients_on_the_tls_listener(redis_srv, make_tproxy, certs):
    """A client speaking RESP or garbage to tls_listen is closed (at most a
    TLS alert record comes back), ttlguard logs `TLS handshake with client`,
    and serves TLS and plain clients as before. A TLS client that does not
    trust the proxy's certificate fails its own handshake; no harm either."""
    admin = free_port()
    p = make_tproxy(redis_srv, listener(certs, admin="127.0.0.1:%d" % admin))
    for data in GARBAGE:
        got = _plain_to_tls(p.tls_port, data)
        assert got == b"" or got.startswith(b"\x15\x03"), got[:100]
    wait_for(lambda: p.stderr().count("TLS handshake with client") >= len(GARBAGE), 5,
             "a log line 'TLS handshake with client' per client")
    wait_for(lambda: _handshake_errors(admin) == len(GARBAGE), 5,
             "ttlguard_tls_handshake_errors_total = %d" % len(GARBAGE))
    with pytest.raises(ssl.SSLCertVerificationError):
        TlsConn(p.tls_port, client_context(certs.other_ca.cert), timeout=5)
    with p.tls_conn() as c:
        assert c.cmd("PING") == b"PONG"
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
    assert p.proc.poll() is None


def test_client_handshake_not_finished_is_closed(redis_srv, make_tproxy, certs):
    """A client that connects to tls_listen and says nothing, and one that
    stops in the middle of its ClientHello, are closed after about 10 s
    (docs/config.md), and others are served meanwhile."""
    p = make_tproxy(redis_srv, listener(certs))
    silent = Conn(p.tls_port, timeout=30)
    partial = Conn(p.tls_port, timeout=30)
    t0 = time.monotonic()
    try:
        # A record announcing 512 bytes, a handshake header, then nothing.
        partial.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        with p.tls_conn() as c:
            assert c.cmd("PING") == b"PONG"
        silent.assert_silent(2)
        assert silent.read_until_eof(timeout=slow(10) + 5) == b""
        got = partial.read_until_eof(timeout=5)
        assert got == b"" or got.startswith(b"\x15\x03"), got
        took = time.monotonic() - t0
        assert 9 <= took <= slow(10) + 5, took
    finally:
        silent.close()
        partial.close()
    with p.tls_conn() as c:
        assert c.cmd("PING") == b"PONG"


def test_tls_listener_on_a_unix_socket(redis_srv, make_tproxy, certs, tmp_path):
    """tls_listen = unix:/path: TLS over a unix socket."""
    import socket as socket_mod
    path = str(tmp_path / "tls.sock")
    p = make_tproxy(redis_srv, listener(certs, tls_listen="unix:" + path))
    wait_for(lambda: os.path.exists(path), 5, "the unix socket")
    s = socket_mod.socket(socket_mod.AF_UNIX, socket_mod.SOCK_STREAM)
    s.settimeout(slow(10))
    s.connect(path)
    ts = client_context(certs.ca.cert).wrap_socket(s, server_hostname="localhost")
    try:
        ts.sendall(enc("SET", "unix", "tls") + enc("GET", "unix"))
        data = b""
        while data.count(b"\r\n") < 3:
            d = ts.recv(4096)
            assert d, data
            data += d
        assert data == b"+OK\r\n$3\r\ntls\r\n", data
    finally:
        ts.close()
    assert p.proc.poll() is None


def _refused(p, cert):
    """True when a TLS client presenting `cert` (None: no certificate) gets
    no reply to PING: the handshake fails, or (TLS 1.3, where the server
    judges the client's certificate after the client finished) the first
    read brings the alert or EOF."""
    try:
        with p.tls_conn(cert, timeout=5) as c:
            c.send(enc("PING"))
            return c.reply(timeout=5) != b"PONG"
    except (ssl.SSLError, EOFError, ConnectionResetError, BrokenPipeError):
        return True


@pytest.mark.parametrize("mode", ["yes", "optional"])
def test_client_certificates(mode, redis_srv, make_tproxy, certs):
    """tls_auth_clients = yes: only a client certificate from the CA gets
    in; optional: no certificate is fine too; in both an unknown CA's
    certificate is refused. Refusals are logged; the proxy keeps serving."""
    p = make_tproxy(redis_srv, listener(certs, tls_auth_clients=mode))
    assert _refused(p, "other_client")
    assert _refused(p, None) == (mode == "yes")
    with p.tls_conn("client") as c:
        assert c.cmd("PING") == b"PONG"
    if mode == "optional":
        with p.tls_conn(None) as c:
            assert c.cmd("SET", "nocert", "1") == b"OK"
    wait_for(lambda: "TLS handshake with client" in p.stderr(), 5, "the refusal in the log")


def test_tls_auth_clients_no_ignores_client_certificates(redis_srv, make_tproxy, certs):
    """The default (no): any client is served, with or without a
    certificate, even one from an unknown CA (it is not asked for)."""
    p = make_tproxy(redis_srv, listener(certs))
    for cert in (None, "client", "other_client"):
        with p.tls_conn(cert) as c:
            assert c.cmd("PING") == b"PONG", cert


def test_tls_protocols(redis_srv, make_tproxy, certs):
    """tls_protocols = TLSv1.3: a client limited to TLS 1.2 is refused,
    a TLS 1.3 client is served (and sees TLS 1.3)."""
    p = make_tproxy(redis_srv, listener(certs, tls_protocols="TLSv1.3"))
    with p.tls_conn() as c:
        assert c.sock.version() == "TLSv1.3"
        assert c.cmd("PING") == b"PONG"
    with pytest.raises((ssl.SSLError, ConnectionResetError, EOFError)):
        with TlsConn(p.tls_port, client_context(certs.ca.cert, tls13=False), timeout=5) as c:
            c.cmd("PING")


def test_tls_ciphers_and_ciphersuites(redis_srv, make_tproxy, certs):
    """tls_ciphers (TLS 1.2) and tls_ciphersuites (TLS 1.3) pick what the
    listener negotiates."""
    p = make_tproxy(redis_srv, listener(certs, tls_ciphers="ECDHE-ECDSA-CHACHA20-POLY1305",
                                        tls_ciphersuites="TLS_CHACHA20_POLY1305_SHA256"))
    with p.tls_conn() as c:
        assert c.sock.cipher()[0] == "TLS_CHACHA20_POLY1305_SHA256", c.sock.cipher()
        assert c.cmd("PING") == b"PONG"
    with TlsConn(p.tls_port, client_context(certs.ca.cert, tls13=False)) as c:
        assert c.sock.version() == "TLSv1.2"
        assert c.sock.cipher()[0] == "ECDHE-ECDSA-CHACHA20-POLY1305", c.sock.cipher()
        assert c.cmd("PING") == b"PONG"


# --------------------------------------------------------------------------
# everything else over TLS, both sides
# --------------------------------------------------------------------------

@pytest.fixture
def tls_both(tls_redis, make_tproxy, certs):
    """(TLS redis, ttlguard with TLS on both sides)."""
    return tls_redis, make_tproxy(tls_redis, both(certs))


def test_multi_exec_pubsub_blpop_over_tls(tls_both):
    """MULTI/EXEC; a subscriber and a publisher on two TLS clients (a
    100 KB message too); BLPOP unblocked by another TLS client's LPUSH."""
    r, p = tls_both
    with p.tls_conn() as c:
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("SET", "tx", "1") == b"QUEUED"
        assert c.cmd("INCR", "tx") == b"QUEUED"
        assert c.cmd("EXEC") == [b"OK", 2]

    with p.tls_conn() as sub, p.tls_conn() as pub:
        assert sub.cmd("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        assert pub.cmd("PUBLISH", "ch", "hello") == 1
        assert sub.reply(timeout=5) == [b"message", b"ch", b"hello"]
        big = os.urandom(100 * 1024)
        assert pub.cmd("PUBLISH", "ch", big) == 1
        assert sub.reply(timeout=5) == [b"message", b"ch", big]
        assert sub.cmd("UNSUBSCRIBE", "ch") == [b"unsubscribe", b"ch", 0]
        assert sub.cmd("PING") == b"PONG"

    with p.tls_conn() as blocked, p.tls_conn() as pusher:
        assert blocked.cmd("CLIENT", "SETNAME", "blocked") == b"OK"
        blocked.send(enc("BLPOP", "q", 10))
        wait_for(lambda: any(x.get("name") == "blocked" and x.get("cmd") == "blpop"
                             for x in tls_client_list(r)), 5, "BLPOP to block at redis")
        t0 = time.monotonic()
        assert pusher.cmd("LPUSH", "q", "job") == 1
        assert blocked.reply(timeout=5) == [b"q", b"job"]
        assert time.monotonic() - t0 < slow(2)
        assert blocked.cmd("LLEN", "q") == 0


def test_large_value_and_deep_pipeline_over_tls(tls_both):
    """A 20 MB value SET and read back, through ttlguard and straight from
    redis; 10,000 commands in one write, every reply in order."""
    r, p = tls_both
    value = os.urandom(20 * 1024 * 1024)
    with p.tls_conn(timeout=30) as c:
        assert c.cmd("SET", "big", value) == b"OK"
        assert c.cmd("GET", "big") == value
        assert c.cmd("STRLEN", "big") == len(value)
    with r.conn(timeout=30) as d:
        assert d.cmd("GET", "big") == value

    n = 10000
    with p.tls_conn(timeout=30) as c:
        data = b"".join(enc("SET", "p:%d" % i, i) if i % 2 == 0 else enc("INCR", "pn")
                        for i in range(n))
        # One write, then the reads, in one thread: Python's SSLSocket is
        # not safe to read in one thread while another writes (OpenSSL's
        # SSL object is shared), which made this flaky with a sender
        # thread even straight to redis. The ~60 KB of replies fit in the
        # socket buffers, so the write cannot block on them.
        c.send(data)
        replies = c.replies(n, timeout=30)
        assert replies[0::2] == [b"OK"] * (n // 2)
        assert replies[1::2] == list(range(1, n // 2 + 1))
        assert c.cmd("GET", "p:9998") == b"9998"


def test_many_tls_clients_share_backend_connections(tls_both):
    """20 TLS clients, each with its own keys: right replies for all; with
    multiplex on (the default) redis sees far fewer than 20 connections
    from ttlguard, with multiplex = off exactly one per client."""
    r, p = tls_both
    conns = [p.tls_conn() for _ in range(20)]
    try:
        for i, c in enumerate(conns):
            assert c.cmd("PING") == b"PONG"
            assert c.cmd("PING") == b"PONG"     # the second request joins the shared one
        for i, c in enumerate(conns):
            c.send(enc("SET", "mux:%d" % i, i) + enc("GET", "mux:%d" % i) + enc("PING"))
        for i, c in enumerate(conns):
            assert c.replies(3) == [b"OK", b"%d" % i, b"PONG"]

        def proxy_conns():
            with r.conn() as d:
                assert d.cmd("CLIENT", "SETNAME", "ctl") == b"OK"
                text = d.cmd("CLIENT", "LIST").decode()
            return len([line for line in text.splitlines()
                        if not re.search(r" name=(ctl|ttlguard-control) ", line)])
        if MULTIPLEX_ON:
            wait_for(lambda: proxy_conns() <= 3, 5,
                     "20 TLS clients on at most 3 backend connections (multiplex on)")
        else:
            wait_for(lambda: proxy_conns() == 20, 5, "one backend connection per client")
    finally:
        for c in conns:
            c.close()


def test_backpressure_client_not_reading(tls_redis, make_tproxy, certs):
    """A TLS client pipelines 100 GETs of a 1 MB value and reads nothing:
    ttlguard (max_buffer = 1mb) stops taking replies from redis, its RSS
    stays bounded (not measured under sanitizers or valgrind), redis keeps
    the rest; then the client reads all 100 MB, correct, in order."""
    env = {}
    if harness.SANITIZED:
        env["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=8"
                               ).lstrip(":")
    p = make_tproxy(tls_redis, both(certs, max_buffer="1mb"), env=env)
    value = os.urandom(1024 * 1024)
    n = 100
    with p.tls_conn(timeout=60) as c:
        assert c.cmd("SET", "big", value) == b"OK"
        assert c.cmd("CLIENT", "SETNAME", "slowreader") == b"OK"
        base = vmrss_kb(p.pid)
        peak = base
        c.send(enc("GET", "big") * n + enc("PING"))
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            peak = max(peak, vmrss_kb(p.pid))
            time.sleep(0.02)
        (conn,) = [x for x in tls_client_list(tls_redis) if x.get("name") == "slowreader"]
        # What redis has written to ttlguard (Valkey 8+), or what it still
        # holds (omem; Valkey 9 replies large strings by reference, so its
        # omem does not count them): far from all of it.
        if "tot-net-out" in conn:
            assert int(conn["tot-net-out"]) < n * len(value) - 50 * 1024 * 1024, conn
        else:
            assert int(conn["omem"]) > 50 * 1024 * 1024, conn
        for i in range(n):
            assert c.reply(timeout=30) == value, i
        assert c.reply() == b"PONG"
        assert c.cmd("PING") == b"PONG"
    print("TLS slow reader: VmRSS %d kB before, peak %d kB" % (base, peak))
    if not (harness.SANITIZED or harness.VALGRIND):
        assert peak < 64 * 1024, "VmRSS peak %d kB over 64 MB" % peak


# --------------------------------------------------------------------------
# --check-config, SIGHUP
# --------------------------------------------------------------------------

def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def _check_config(path):
    r = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=slow(20))
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("bad_key,kind", [
    ("tls_cert_file", "missing"),
    ("tls_key_file", "garbage"),
    ("backend_tls_ca_cert_file", "missing"),
    ("backend_tls_cert_file", "garbage"),
    ("tls_key_file", "mismatch"),
])
def test_check_config_loads_the_certificates(bad_key, kind, tmp_path, certs):
    """--check-config: a missing or garbage certificate / key file, or a key
    that is not the certificate's, exits 1, naming file:line of the key and
    the path; the same config with good files exits 0."""
    harness.need_binary()
    keys = [("listen", "127.0.0.1:%d" % free_port()),
            ("backend", "127.0.0.1:%d" % free_port()),
            ("backend_tls", "on"),
            ("backend_tls_ca_cert_file", certs.ca.cert),
            ("backend_tls_cert_file", certs.client.cert),
            ("backend_tls_key_file", certs.client.key),
            ("tls_listen", "127.0.0.1:%d" % free_port()),
            ("tls_cert_file", certs.server.cert),
            ("tls_key_file", certs.server.key),
            ("tls_ca_cert_file", certs.ca.cert),
            ("tls_auth_clients", "optional")]
    good = str(tmp_path / "good.ini")
    _write(good, "[proxy]\n" + "".join("%s = %s\n" % kv for kv in keys))
    rc, out = _check_config(good)
    assert rc == 0, out

    bad_path = str(tmp_path / ("bad-" + bad_key + ".pem"))
    if kind == "mismatch":
        bad_path = certs.client.key          # a key, not the certificate's
    if kind == "garbage":
        _write(bad_path, "-----BEGIN PRIVATE KEY-----\nnot base64 at all!\n"
                         "-----END PRIVATE KEY-----\ngarbage\n")
    keys = [(k, bad_path if k == bad_key else v) for k, v in keys]
    line = 2 + [k for k, _ in keys].index(bad_key)
    conf = str(tmp_path / "bad.ini")
    _write(conf, "[proxy]\n" + "".join("%s = %s\n" % kv for kv in keys))
    rc, out = _check_config(conf)
    assert rc == 1, out
    assert "%s:%d:" % (conf, line) in out, (line, out)
    assert bad_path in out, out


@pytest.mark.parametrize("keys,bad_key,message", [
    ({"backend": "unix:/tmp/ttlg-none.sock", "backend_tls": "on"}, "backend_tls", "host:port"),
    ({"tls_listen": "127.0.0.1:{port}"}, "tls_listen", "tls_cert_file"),
    ({"tls_listen": "127.0.0.1:{port}", "tls_cert_file": "{cert}", "tls_key_file": "{key}",
      "tls_auth_clients": "yes"}, "tls_auth_clients", "tls_ca_cert_file"),
    ({"listen": "", "tls_listen": ""}, "listen", "tls_listen"),
    ({"tls_listen": "{listen}", "tls_cert_file": "{cert}", "tls_key_file": "{key}"},
     "tls_listen", "listen"),
    ({"tls_listen": "127.0.0.1:{port}", "tls_cert_file": "{cert}", "tls_key_file": "{key}",
      "tls_protocols": "TLSv1.2 SSLv3"}, "tls_protocols", "SSLv3"),
    ({"tls_auth_clients": "maybe"}, "tls_auth_clients", "maybe"),
    ({"backend_tls": "yes please"}, "backend_tls", "yes please"),
])
def test_check_config_refuses_tls_mistakes(keys, bad_key, message, tmp_path, certs):
    """Config mistakes of the TLS keys: exit 1, file:line of the key at
    fault, and words that say what is wrong."""
    harness.need_binary()
    listen = "127.0.0.1:%d" % free_port()
    conf = {"listen": listen, "backend": "127.0.0.1:%d" % free_port()}
    fill = {"port": free_port(), "cert": certs.server.cert, "key": certs.server.key,
            "listen": listen}
    conf.update({k: v.format(**fill) for k, v in keys.items()})
    names = list(conf)
    path = _write(str(tmp_path / "t.ini"),
                  "[proxy]\n" + "".join("%s = %s\n" % (k, v) for k, v in conf.items()))
    rc, out = _check_config(path)
    assert rc == 1, out
    assert "%s:%d:" % (path, 2 + names.index(bad_key)) in out, out
    assert message in out, out


def _copy_cert(pair, cert_path, key_path):
    shutil.copyfile(pair.cert, cert_path + ".tmp")
    shutil.copyfile(pair.key, key_path + ".tmp")
    os.replace(cert_path + ".tmp", cert_path)
    os.replace(key_path + ".tmp", key_path)


def test_sighup_rotates_the_listener_certificate_under_load(redis_srv, make_tproxy, certs,
                                                            tmp_path):
    """The files behind tls_cert_file/tls_key_file get certificate B,
    SIGHUP: new connections see B, one opened before keeps working; then a
    garbage certificate file, SIGHUP: refused, logged, B stays. A client
    doing SET/GET (and reconnecting every 20 requests) all along sees no
    error."""
    cert_path, key_path = str(tmp_path / "live.crt"), str(tmp_path / "live.key")
    _copy_cert(certs.server, cert_path, key_path)
    p = make_tproxy(redis_srv, listener(certs, tls_cert_file=cert_path, tls_key_file=key_path))
    a, b = certs.serial["server"], certs.serial["server_b"]

    def new_serial():
        with p.tls_conn(timeout=5) as c:
            assert c.cmd("PING") == b"PONG"
            return c.peer_serial()

    assert new_serial() == a
    stop = threading.Event()
    stats = {"ops": 0, "errors": [], "serials": set()}

    def load():
        c, i = None, 0
        try:
            while not stop.is_set() and i < 100000:
                if i % 20 == 0:
                    if c is not None:
                        c.close()
                    c = p.tls_conn(timeout=5)
                    stats["serials"].add(c.peer_serial())
                v = b"%d" % i
                if c.cmd("SET", "load", v) != b"OK" or c.cmd("GET", "load") != v:
                    stats["errors"].append("wrong reply at %d" % i)
                    return
                stats["ops"] += 1
                i += 1
        except Exception as e:      # noqa: B902 -- reported by the test
            stats["errors"].append(repr(e))
        finally:
            if c is not None:
                c.close()

    t = threading.Thread(target=load, daemon=True)
    with p.tls_conn() as old:
        assert old.peer_serial() == a
        t.start()
        try:
            time.sleep(0.5)
            _copy_cert(certs.server_b, cert_path, key_path)
            p.send_signal(signal.SIGHUP)
            wait_for(lambda: new_serial() == b, 5, "new connections to get certificate B")
            assert "config refused" not in p.stderr(), p.stderr()
            assert old.cmd("SET", "old", "still") == b"OK"
            assert old.cmd("GET", "old") == b"still"
            assert old.peer_serial() == a

            time.sleep(0.3)
            _write(cert_path, "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
            p.send_signal(signal.SIGHUP)
            wait_for(lambda: "config refused, keeping the running one" in p.stderr(), 5,
                     "the reload to be refused")
            time.sleep(0.3)
        finally:
            stop.set()
            t.join(slow(10))
        assert not t.is_alive()
        assert new_serial() == b
        assert old.cmd("PING") == b"PONG"
    assert not stats["errors"], stats["errors"][:5]
    assert stats["ops"] >= 50, stats
    assert stats["serials"] <= {a, b} and b in stats["serials"], stats
    assert p.proc.poll() is None


# --------------------------------------------------------------------------
# /healthz, audit
# --------------------------------------------------------------------------

def _health(port):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=slow(10))
    try:
        c.request("GET", "/healthz")
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def test_healthz_with_a_tls_backend(tls_redis, make_tproxy, certs):
    """/healthz checks the backend over TLS: 200 ok when it verifies, 503
    with the TLS reason when the CA is wrong."""
    admin = free_port()
    make_tproxy(tls_redis, backend_tls(certs, admin="127.0.0.1:%d" % admin), expect=b"+PONG")
    wait_for(lambda: _health(admin) == (200, "ok\n"), 5, "/healthz 200 ok")
    bad_admin = free_port()
    make_tproxy(tls_redis, backend_tls(certs, admin="127.0.0.1:%d" % bad_admin,
                                       backend_tls_ca_cert_file=certs.other_ca.cert))
    status, body = wait_for(lambda: (lambda h: h if h[0] != 200 else None)(_health(bad_admin)),
                            5, "/healthz to fail")
    assert status == 503, (status, body)
    assert "TLS:" in body and re.search("certificate verify failed", body, re.I), body


AUDIT_CONF = """\
[proxy]
backend = 127.0.0.1:{port}
backend_tls = on
backend_tls_ca_cert_file = {ca}

[ttl "session:"]
ttl = 900
action = rewrite
"""


def test_audit_with_a_tls_backend(tls_redis, certs, tmp_path):
    """`ttlguard audit` reaches a TLS-only server with the config's
    backend_tls_* keys: 3 leaked keys of 5 found; with a CA that does not
    match, it fails (exit 2) saying why."""
    harness.need_binary()
    with tls_redis.conn() as d:
        for i in range(3):
            assert d.cmd("SET", "session:%d" % i, "0") == b"OK"
        for i in range(3, 5):
            assert d.cmd("SET", "session:%d" % i, "0", "EX", 500) == b"OK"
    conf = _write(str(tmp_path / "audit.ini"),
                  AUDIT_CONF.format(port=tls_redis.port, ca=certs.ca.cert))
    r = subprocess.run([harness.TTLG_BIN, "audit", "--config", conf, "--json"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=slow(60))
    assert r.stdout, r
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["exit_status"] == 1, r
    assert rep["scan"]["keys"] == 5 and rep["scan"]["leaked"] == 3, rep["scan"]
    assert rep["scan"]["with_ttl"] == 2

    bad = _write(str(tmp_path / "audit-bad.ini"),
                 AUDIT_CONF.format(port=tls_redis.port, ca=certs.other_ca.cert))
    r = subprocess.run([harness.TTLG_BIN, "audit", "--config", bad],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=slow(60))
    assert r.returncode == 2, r
    assert re.search("certificate verify failed", r.stderr, re.I), r.stderr
