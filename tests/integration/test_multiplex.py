"""
multiplex = on: stateless sessions share one backend connection.

  - many GET/SET/INCR clients: right replies, one backend connection;
  - concurrent pipelines and large replies on the shared connection: each
    client gets its own replies, in order;
  - pinning (SELECT, inline and any case, MULTI/EXEC, WATCH, SUBSCRIBE in
    RESP2 and after HELLO 3, BLPOP, CLIENT SETNAME, AUTH, QUIT, unknown
    commands, 256 requests in flight, a request trickling in byte by byte,
    half-close): the bytes redis-server sends, and a backend connection of
    the client's own afterwards;
  - requirepass (every client 1:1) and backend_password (shared);
  - state or replies that the pin list does not cover: SCRIPT DEBUG,
    REPLCONF ACK (no reply), SYNC/PSYNC, a password set after the shared
    connection was opened;
  - TTL rules over the shared connection, compared with a 1:1 proxy;
  - faults: a protocol error behind pipelined requests, clients leaving
    with replies owed, a backend restart, Redis gone, a reload to another
    backend, Redis not reading, a slow reader, SIGTERM.

Designed differences from 1:1 that are not tested as bugs: an idle stateless
client survives a backend restart; CLIENT LIST shows one connection for all
stateless clients.
"""

import re
import signal
import socket
import struct
import threading
import time

import pytest

import harness
from harness import Conn, RespError, client_list, enc, server_identity, slow, wait_for

MUX = {"multiplex": "on"}
CTL = "ctl"         # CLIENT SETNAME of the test's own direct connections


def Shared(port, **kw):
    """A client of a multiplexing proxy on the shared connection: a client's
    first request runs on a connection of its own, the next one that can be
    shared moves it there (see consider_sharing() in proxy/session.c)."""
    c = Conn(port, **kw)
    assert c.cmd("PING") == b"PONG"
    assert c.cmd("PING") == b"PONG"
    return c


def ctl(redis, password=None):
    """A direct connection to Redis that proxy_conns() does not count."""
    c = Conn(redis.port)
    if password:
        assert c.cmd("AUTH", password) == b"OK"
    assert c.cmd("CLIENT", "SETNAME", CTL) == b"OK"
    return c


def proxy_conns(redis, password=None):
    """CLIENT LIST entries that are not the test's own direct connections."""
    with ctl(redis, password) as c:
        text = c.cmd("CLIENT", "LIST").decode()
    out = []
    for line in text.splitlines():
        d = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        if d.get("name") not in (CTL, "ttlguard-control"):
            out.append(d)
    return out


def wait_conns(redis, n, what, password=None):
    """Redis closes a connection a moment after its peer did: wait for n."""
    last = []

    def ok():
        last[:] = proxy_conns(redis, password)
        return len(last) == n
    try:
        wait_for(ok, 5, what)
    except AssertionError:
        raise AssertionError("%s: expected %d backend connections, CLIENT LIST shows %d:\n%s"
                             % (what, n, len(last), "\n".join(map(str, last))))


def start(make_proxy, redis, conf=None, **kw):
    """A multiplexing ttlguard whose shared connection is up and probed, so
    that every client from now on starts on it."""
    c = dict(MUX)
    c.update(conf or {})
    p = make_proxy(redis, c, **kw)
    wait_shared(p, redis)
    return p


def wait_shared(proxy, redis, password=None):
    """Until new clients start on the shared connection. Two clients: one
    backend connection between them cannot be a 1:1 one."""
    def shared():
        with Shared(proxy.port) as a, Shared(proxy.port) as b:
            assert a.cmd("PING") == b"PONG" and b.cmd("PING") == b"PONG"
            return len(proxy_conns(redis, password)) == 1
    wait_for(shared, 5, "clients of the proxy on the shared connection alone")


def flushall(redis):
    with ctl(redis) as c:
        assert c.cmd("FLUSHALL") == b"OK"


def run_threads(fns, timeout=30):
    """Run the callables at once; re-raise the first exception."""
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:      # noqa: B902 -- reported below
            errors.append(e)
    ts = [threading.Thread(target=wrap, args=(f,), daemon=True) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(slow(timeout))
        assert not t.is_alive(), "thread still running after %ss" % slow(timeout)
    if errors:
        raise errors[0]


def raw_replies(c, n):
    return [c.reply_raw()[1] for _ in range(n)]


def direct_then_proxy(redis, proxy, script):
    """script(port) -> anything; run against Redis, FLUSHALL, then through
    ttlguard. Returns (direct, proxied)."""
    flushall(redis)
    d = script(redis.port)
    flushall(redis)
    p = script(proxy.port)
    return d, p


# --------------------------------------------------------------------------
# Sharing
# --------------------------------------------------------------------------

def test_many_stateless_clients_one_backend_connection(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    conns = [Shared(proxy.port) for _ in range(20)]
    try:
        for i, c in enumerate(conns):
            assert c.cmd("SET", "k:%d" % i, "v%d" % i) == b"OK"
        for rnd in range(1, 4):
            for i, c in enumerate(conns):
                assert c.cmd("INCR", "n:%d" % i) == rnd
        for i, c in enumerate(conns):
            c.send(enc("GET", "k:%d" % i) + enc("INCR", "n:%d" % i) + enc("GET", "nope"))
        for i, c in enumerate(conns):
            assert c.replies(3) == [b"v%d" % i, 4, None]
        # All 20 clients connected: the shared connection, the proxy's
        # control connection and our own only.
        wait_conns(redis_srv, 1, "20 stateless clients")
        entries = client_list(redis_srv.port)
        assert len(entries) == 3, entries
        assert [e["name"] for e in entries].count("ttlguard-control") == 1, entries
    finally:
        for c in conns:
            c.close()


def test_new_client_starts_on_its_own_connection(redis_srv, make_proxy):
    """A client that only connects and sets its state is a client of its own
    to Redis (INFO connected_clients counts it), as without the proxy; its
    first request that can be shared, after one was answered, moves it to
    the shared connection of its state."""
    proxy = start(make_proxy, redis_srv)
    base = len(proxy_conns(redis_srv))          # the shared connection of db 0
    with Conn(proxy.port) as a, Conn(proxy.port) as b:
        assert a.cmd("SELECT", "9") == b"OK" and b.cmd("SELECT", "9") == b"OK"
        wait_conns(redis_srv, base + 2, "two clients that only SELECTed")
        assert a.cmd("SET", "k", "v") == b"OK"
        assert b.cmd("GET", "k") == b"v"
        wait_conns(redis_srv, base + 1, "both on the shared connection of db 9")
        assert sorted(e["db"] for e in proxy_conns(redis_srv))[-1] == "9"
        assert a.cmd("GET", "k") == b"v" and b.cmd("DBSIZE") == 1


def test_no_sharing_while_a_client_pause_lasts(redis_srv, make_proxy):
    """Under CLIENT PAUSE Redis holds each connection's commands back on
    its own (INFO blocked_clients counts them): clients join no shared
    connection while a pause sent through the proxy lasts."""
    proxy = start(make_proxy, redis_srv)
    base = len(proxy_conns(redis_srv))          # the shared connection of db 0
    with Conn(proxy.port) as admin, Conn(proxy.port) as a, Conn(proxy.port) as b:
        assert admin.cmd("CLIENT", "PAUSE", "10000", "WRITE") == b"OK"
        for c in (a, b):
            assert c.cmd("GET", "x") is None and c.cmd("GET", "x") is None
        wait_conns(redis_srv, base + 3, "admin, a and b, each on its own while paused")
        assert admin.cmd("CLIENT", "UNPAUSE") == b"OK"
        assert a.cmd("GET", "x") is None and b.cmd("GET", "x") is None
        wait_conns(redis_srv, base + 1, "a and b on the shared connection after UNPAUSE")


def test_concurrent_pipelines_get_their_own_replies(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    nthreads, rounds, depth = 8, 5, 200     # 200 in flight: stays shared

    def worker(i):
        def run():
            with Shared(proxy.port) as c:
                n = 0
                for _ in range(rounds):
                    batch = []
                    for _ in range(depth // 4):
                        batch += [enc("INCR", "ctr:%d" % i), enc("APPEND", "s:%d" % i, "x"),
                                  enc("GET", "ctr:%d" % i), enc("ECHO", "t%d" % i)]
                    c.send(b"".join(batch))
                    got = c.replies(depth)
                    want = []
                    for _ in range(depth // 4):
                        n += 1
                        want += [n, n, b"%d" % n, b"t%d" % i]
                    assert got == want, "thread %d: first difference at %d" % (
                        i, next(k for k in range(depth) if got[k] != want[k]))
                assert n == rounds * depth // 4
        return run
    run_threads([worker(i) for i in range(nthreads)])
    wait_conns(redis_srv, 1, "after the concurrent pipelines (none of them pinned)")


def test_concurrent_large_replies_split_across_reads(redis_srv, make_proxy):
    """Replies larger than one read of the shared connection, for several
    clients at once: each byte goes to the client that asked."""
    proxy = start(make_proxy, redis_srv)
    vals = [bytes([65 + i]) * (300 * 1024 + i) for i in range(6)]
    with ctl(redis_srv) as c:
        for i, v in enumerate(vals):
            assert c.cmd("SET", "v:%d" % i, v) == b"OK"

    def worker(i):
        def run():
            with Shared(proxy.port) as c:
                for _ in range(4):
                    c.send((enc("GET", "v:%d" % i) + enc("STRLEN", "v:%d" % i)) * 10)
                    got = c.replies(20)
                    assert got == [vals[i], len(vals[i])] * 10, "client %d" % i
        return run
    run_threads([worker(i) for i in range(6)])
    wait_conns(redis_srv, 1, "after the large replies")


@pytest.mark.parametrize("chunk", [200, 1000], ids=["shared", "pins-at-256"])
def test_incr_sequence_1000_pipelined(redis_srv, make_proxy, chunk):
    """Six clients INCR their own counters 1000 times at once, in writes of
    200 (they stay on the shared connection) or of 1000 (each pins)."""
    proxy = start(make_proxy, redis_srv)

    def worker(i):
        def run():
            with Shared(proxy.port) as c:
                got = []
                for _ in range(1000 // chunk):
                    c.send(enc("INCR", "seq:%d" % i) * chunk)
                    got += c.replies(chunk)
                assert got == list(range(1, 1001)), "client %d: first wrong reply at %d" % (
                    i, next(k for k in range(1000) if got[k] != k + 1))
        return run
    run_threads([worker(i) for i in range(6)])
    with ctl(redis_srv) as c:
        for i in range(6):
            assert c.cmd("GET", "seq:%d" % i) == b"1000"


# --------------------------------------------------------------------------
# Pinning
# --------------------------------------------------------------------------

SELECT_PIPELINE = (enc("SET", "a", "1") + enc("SELECT", "1") + enc("GET", "a")
                   + enc("SET", "a", "2") + enc("SELECT", "0") + enc("GET", "a"))


def test_select_shares_transparently(redis_srv, make_proxy):
    """SELECT moves a client to the shared connection of that database: the
    replies are Redis's own, and no connection of its own is opened."""
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c:
            c.send(SELECT_PIPELINE)
            return raw_replies(c, 6)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d == [b"+OK\r\n", b"+OK\r\n", b"$-1\r\n", b"+OK\r\n", b"+OK\r\n", b"$1\r\n1\r\n"]
    assert p == d

    flushall(redis_srv)
    with Shared(proxy.port) as other, Shared(proxy.port) as c:
        assert other.cmd("PING") == b"PONG"
        c.send(SELECT_PIPELINE)
        assert raw_replies(c, 6) == d
        assert c.cmd("SELECT", "1") == b"OK"
        assert c.cmd("GET", "a") == b"2"
        assert c.cmd("DBSIZE") == 1
        assert other.cmd("GET", "a") == b"1"       # the other client stays in db 0
        assert c.cmd("GET", "a") == b"2"           # and this one in db 1
        with Shared(proxy.port) as third:
            assert third.cmd("SELECT", "1") == b"OK"
            assert third.cmd("GET", "a") == b"2"
            # one shared connection per database, nothing of their own
            wait_conns(redis_srv, 2, "one shared connection per database")
        dbs = sorted(e["db"] for e in proxy_conns(redis_srv))
        assert dbs == ["0", "1"], dbs
        assert other.cmd("DBSIZE") == 1
        with ctl(redis_srv) as direct:
            assert direct.cmd("SELECT", "1") == b"OK"
            assert direct.cmd("GET", "a") == b"2"
        # What Redis refuses, Redis says, on a connection of the client's own.
        assert c.cmd("SELECT", "99") == RespError(b"ERR DB index is out of range")
        wait_conns(redis_srv, 3, "a refused SELECT: the client has its own connection")
        assert c.cmd("GET", "a") == b"2"           # still in db 1 there


def test_inline_select_pins_transparently(redis_srv, make_proxy):
    """Inline requests, any letter case."""
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c:
            c.send(b"SET a 1\r\nselect 1\r\nGET a\r\nSET a 2\r\nSeLeCt 0\r\nGET a\r\n")
            return raw_replies(c, 6)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d == [b"+OK\r\n", b"+OK\r\n", b"$-1\r\n", b"+OK\r\n", b"+OK\r\n", b"$1\r\n1\r\n"]
    assert p == d


@pytest.mark.parametrize("pin", [False, True], ids=["shared", "pinning"])
def test_half_close_after_pipeline(redis_srv, make_proxy, pin):
    """shutdown(SHUT_WR) after a pipeline: every reply, then EOF (also when
    the pipeline pins the client half way)."""
    proxy = start(make_proxy, redis_srv)
    cmds = [enc("SET", "a", "1"), enc("GET", "a"), enc("INCR", "n")]
    if pin:
        cmds += [enc("SELECT", "1"), enc("GET", "a"), enc("SELECT", "0")]
    cmds += [enc("GET", "a")] * 3

    def script(port):
        with Conn(port) as c:
            c.send(b"".join(cmds))
            c.sock.shutdown(socket.SHUT_WR)
            return c.read_until_eof(timeout=5)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d.count(b"\r\n") >= len(cmds), d
    assert p == d


def test_multi_exec_pipelined(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c:
            c.send(enc("SET", "x", "1") + enc("MULTI") + enc("INCR", "x") + enc("GET", "x")
                   + enc("LPUSH", "x", "y") + enc("EXEC")
                   + enc("MULTI") + enc("INCR", "x", "extra") + enc("EXEC")
                   + enc("DISCARD") + enc("EXEC") + enc("GET", "x"))
            return raw_replies(c, 12)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d[5].startswith(b"*3\r\n:2\r\n$1\r\n2\r\n-WRONGTYPE"), d
    assert d[8].startswith(b"-EXECABORT"), d
    assert p == d


def test_watch_conflict(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        out = []
        with Conn(port) as c, ctl(redis_srv) as other:
            c.send(enc("SET", "w", "0"))
            out.append(c.reply_raw()[1])
            c.send(enc("WATCH", "w") + enc("GET", "w"))
            out += raw_replies(c, 2)
            assert other.cmd("SET", "w", "theirs") == b"OK"
            c.send(enc("MULTI") + enc("SET", "w", "mine") + enc("EXEC") + enc("GET", "w"))
            out += raw_replies(c, 4)
            c.send(enc("WATCH", "w") + enc("MULTI") + enc("SET", "w", "mine") + enc("EXEC")
                   + enc("GET", "w"))
            out += raw_replies(c, 5)
        return out
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d[5] == b"*-1\r\n" and d[6] == b"$6\r\ntheirs\r\n", d
    assert d[-1] == b"$4\r\nmine\r\n", d
    assert p == d


def test_subscribe_resp2(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        out = []
        with Conn(port) as c, ctl(redis_srv) as pub:
            c.send(enc("GET", "x") + enc("SUBSCRIBE", "ch", "ch2"))
            out += raw_replies(c, 3)
            out.append(b"%d" % pub.cmd("PUBLISH", "ch", "hello"))
            out += raw_replies(c, 1)
            c.send(enc("PING") + enc("UNSUBSCRIBE") + enc("GET", "x"))
            out += raw_replies(c, 4)
        return out
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d[3] == b"1" and d[4] == b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n", d
    assert p == d


HELLO_ID = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")


def test_subscribe_resp3_after_hello(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        out = []
        with Conn(port) as c, ctl(redis_srv) as pub:
            c.send(enc("SET", "x", "1") + enc("HELLO", "3") + enc("SUBSCRIBE", "ch"))
            r = raw_replies(c, 3)
            r[1] = HELLO_ID.sub(b"$2\r\nid\r\n:0\r\n", r[1])    # differs per connection
            out += r
            out.append(b"%d" % pub.cmd("PUBLISH", "ch", "hello"))
            out += raw_replies(c, 1)
            c.send(enc("GET", "x") + enc("GET", "nope") + enc("UNSUBSCRIBE", "ch")
                   + enc("HGETALL", "nope"))
            out += raw_replies(c, 4)
        return out
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d[1].startswith(b"%7\r\n"), d
    assert d[4] == b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n", d
    assert d[6] == b"_\r\n" and d[8] == b"%0\r\n", d
    assert p == d


def test_blpop_served_by_other_client_does_not_block_shared(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c, ctl(redis_srv) as pusher:
            c.send(enc("GET", "q") + enc("BLPOP", "q", "5") + enc("GET", "q"))
            first = c.reply_raw()[1]
            wait_for(lambda: any(e["cmd"] == "blpop" for e in proxy_conns(redis_srv)), 3,
                     "the BLPOP blocked in Redis")
            if port == proxy.port:
                # The shared connection is not the blocked one.
                with Shared(proxy.port) as other:
                    t0 = time.monotonic()
                    assert other.cmd("SET", "k", "v") == b"OK"
                    assert other.cmd("GET", "k") == b"v"
                    assert time.monotonic() - t0 < slow(1)
            assert pusher.cmd("RPUSH", "q", "v") == 1
            return [first] + raw_replies(c, 2)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d == [b"$-1\r\n", b"*2\r\n$1\r\nq\r\n$1\r\nv\r\n", b"$-1\r\n"]
    assert p == d


def test_client_setname_getname(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c, Conn(port) as other:
            c.send(enc("SET", "k", "v") + enc("CLIENT", "SETNAME", "alice")
                   + enc("CLIENT", "GETNAME") + enc("GET", "k"))
            out = raw_replies(c, 4)
            other.send(enc("GET", "k") + enc("CLIENT", "GETNAME"))
            out += raw_replies(other, 2)
            names = [e.get("name") for e in proxy_conns(redis_srv)]
            out.append(b"%d" % names.count("alice"))
        return out
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d == [b"+OK\r\n", b"+OK\r\n", b"$5\r\nalice\r\n", b"$1\r\nv\r\n",
                 b"$1\r\nv\r\n", b"$-1\r\n", b"1"]
    assert p == d


def test_quit_pipelined(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c:
            c.send(enc("SET", "k", "v") + enc("GET", "k") + enc("QUIT") + enc("GET", "k"))
            return c.read_until_eof(timeout=5)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d == b"+OK\r\n$1\r\nv\r\n+OK\r\n"
    assert p == d


def test_unknown_command(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c:
            c.send(enc("SET", "k", "v") + enc("FOO", "bar") + enc("GET", "k")
                   + b"NOSUCH inline\r\n" + enc("INCR", "n"))
            return raw_replies(c, 5)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d[1] == b"-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n", d
    assert p == d


def _auth_error_dropped_behind_reply(redis, password):
    """True when a failed AUTH gets no reply at all while an earlier reply is
    still in the server's output buffer: one reply fewer than requests.
    Redis 8.0 and Valkey 8.1 do that (addAuthErrReply() returns when
    clientHasPendingReplies(), since module auth in Redis 7.2; redis#15640),
    Valkey 9 replies (valkey#2287), Redis 7.0 has no module auth."""
    with Conn(redis.port) as c:
        c.send(enc("GET", "x") + enc("AUTH", "wrong"))
        assert c.reply().startswith(b"NOAUTH")
        c.send(enc("AUTH", password))
        r = c.reply()
        if r == b"OK":
            return True     # that was the reply to the second AUTH
        assert r.startswith(b"WRONGPASS"), r
        assert c.reply() == b"OK"
        return False


@pytest.mark.parametrize("conf", [MUX, {"multiplex": "off"}], ids=["mux", "1to1"])
def test_pipelined_failed_auth_keeps_replies_paired(make_redis, make_proxy, conf):
    """A failed AUTH behind a pending reply: on servers that drop its reply
    (see _auth_error_dropped_behind_reply) the proxy, pairing replies by
    count, would hand every later reply to the wrong request. It sends an
    AUTH only once the replies owed are in, so each request gets its own
    reply on every server (straight to such a server the client gets one
    reply fewer)."""
    redis = make_redis(["--requirepass", "secret"])
    proxy = make_proxy(redis, dict(conf), expect=b"-NOAUTH")
    with Conn(proxy.port) as c:
        c.send(enc("GET", "x") + enc("AUTH", "wrong") + enc("GET", "x") +
               enc("HELLO", "2", "AUTH", "default", "wrong") + enc("AUTH", "secret") +
               enc("SET", "x", "1") + enc("GET", "x"))
        out = raw_replies(c, 7)
    assert out[0].startswith(b"-NOAUTH") and out[1].startswith(b"-WRONGPASS"), out
    assert out[2].startswith(b"-NOAUTH") and out[3].startswith(b"-WRONGPASS"), out
    assert out[4:] == [b"+OK\r\n", b"+OK\r\n", b"$1\r\n1\r\n"], out
    if not _auth_error_dropped_behind_reply(redis, "secret"):
        with Conn(redis.port) as d:
            d.send(enc("GET", "x") + enc("AUTH", "wrong") + enc("GET", "x") +
                   enc("HELLO", "2", "AUTH", "default", "wrong") + enc("AUTH", "secret") +
                   enc("SET", "x", "1") + enc("GET", "x"))
            assert raw_replies(d, 7) == out


def test_requirepass_every_client_one_to_one(make_redis, make_proxy):
    redis = make_redis(["--requirepass", "secret"])
    proxy = make_proxy(redis, dict(MUX), expect=b"-NOAUTH")
    # On a server that drops that reply, the wrong AUTH goes once GET's
    # reply has been read: a pipeline that loses a reply cannot be compared.
    split = _auth_error_dropped_behind_reply(redis, "secret")

    def script(port):
        with Conn(port) as c, Conn(port) as c2:
            out = []
            if split:
                c.send(enc("GET", "x"))
                out += raw_replies(c, 1)
                c.send(enc("AUTH", "wrong") + enc("SET", "x", "1"))
                out += raw_replies(c, 2)
            else:
                c.send(enc("GET", "x") + enc("AUTH", "wrong") + enc("SET", "x", "1"))
                out += raw_replies(c, 3)
            c.send(enc("AUTH", "secret") + enc("SET", "x", "1") + enc("GET", "x"))
            out += raw_replies(c, 3)
            c2.send(enc("PING") + enc("GET", "x") + enc("AUTH", "secret") + enc("GET", "x"))
            out += raw_replies(c2, 4)
        return out

    def flush():
        with ctl(redis, "secret") as c:
            assert c.cmd("FLUSHALL") == b"OK"
    flush()
    d = script(redis.port)
    flush()
    p = script(proxy.port)
    assert d[0].startswith(b"-NOAUTH") and d[1].startswith(b"-WRONGPASS"), d
    assert d[5] == b"$1\r\n1\r\n" and d[7].startswith(b"-NOAUTH"), d
    assert p == d

    # Each client of the proxy has a connection of its own: three opened
    # after this point (the script's may still be closing, so a count of
    # everything would race them).
    top = max(int(d["id"]) for d in proxy_conns(redis, "secret"))
    conns = [Conn(proxy.port) for _ in range(3)]
    try:
        for c in conns:
            assert c.cmd("AUTH", "secret") == b"OK"
            assert c.cmd("GET", "x") == b"1"
        new = []
        def three():
            new[:] = [d for d in proxy_conns(redis, "secret") if int(d["id"]) > top]
            return len(new) == 3
        try:
            wait_for(three, 5, "three authenticated clients")
        except AssertionError:
            raise AssertionError("expected 3 new backend connections, CLIENT LIST shows %d:\n%s"
                                 % (len(new), "\n".join(map(str, new))))
    finally:
        for c in conns:
            c.close()


def test_backend_password_shares(make_redis, make_proxy):
    """The proxy authenticates the shared connection itself: clients need
    no AUTH, so sharing is right."""
    redis = make_redis(["--requirepass", "secret"])
    p = make_proxy(redis, dict(MUX, backend_password="secret"))
    wait_shared(p, redis, "secret")
    conns = [Shared(p.port) for _ in range(5)]
    try:
        for i, c in enumerate(conns):
            assert c.cmd("SET", "k%d" % i, i) == b"OK"
            assert c.cmd("GET", "k%d" % i) == b"%d" % i
        wait_conns(redis, 1, "five clients behind backend_password", password="secret")
    finally:
        for c in conns:
            c.close()


def test_password_set_after_sharing_started(redis_srv, make_proxy):
    """CONFIG SET requirepass: Redis keeps the connections it has
    authenticated, and a new direct client gets -NOAUTH. A new client of the
    proxy must get it too, not ride on the shared connection's old login."""
    proxy = start(make_proxy, redis_srv)
    with Shared(proxy.port) as c:
        assert c.cmd("SET", "secret:data", "x") == b"OK"
    with ctl(redis_srv) as c:
        assert c.cmd("CONFIG", "SET", "requirepass", "pw") == b"OK"
    try:
        with Conn(redis_srv.port) as direct:
            d = direct.cmd("GET", "secret:data")
        assert isinstance(d, RespError) and d.startswith(b"NOAUTH"), d
        # The shared connection asks once a second whether the default user
        # still needs no password (docs/architecture.md, "Shared backend connections").
        deadline = time.monotonic() + 3
        while True:
            with Conn(proxy.port) as c:
                p = c.cmd("GET", "secret:data")
            if p == d or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert p == d, "new client after CONFIG SET requirepass: direct %r, proxy %r" % (d, p)
    finally:
        with Conn(redis_srv.port) as c:
            c.cmd("AUTH", "pw")
            c.cmd("CONFIG", "SET", "requirepass", "")


def _script_debug_no_after_other_eval(redis):
    """What the server itself answers SCRIPT DEBUG NO with after SCRIPT DEBUG
    SYNC and another client's EVAL: +OK from Redis and Valkey 8; Valkey 9
    answers with the debugger log of that other client's script
    ("* Stopped at 1, stop reason = step over", ...) instead."""
    with Conn(redis.port) as a, Conn(redis.port) as b:
        assert a.cmd("SCRIPT", "DEBUG", "SYNC") == b"OK"
        assert b.cmd("EVAL", "return 7", "0") == 7
        r = a.cmd("SCRIPT", "DEBUG", "NO")
        name, version = server_identity(redis.port)
        if name == "valkey" and version >= (9,):
            assert isinstance(r, list) and r[0].startswith(b"* Stopped at 1"), r
        else:
            assert r == b"OK", r
        return r


def test_script_debug_is_connection_state(redis_srv, make_proxy):
    """SCRIPT DEBUG YES|SYNC is per connection: another client's EVAL must
    run normally."""
    want_no = _script_debug_no_after_other_eval(redis_srv)
    proxy = start(make_proxy, redis_srv)
    with Shared(proxy.port) as a, Shared(proxy.port) as b:
        assert a.cmd("SCRIPT", "DEBUG", "SYNC") == b"OK"
        b.send(enc("EVAL", "return 7", "0") + enc("GET", "k"))
        got = []
        try:
            got = b.replies(2, timeout=3)
        except (TimeoutError, EOFError) as e:
            got.append(repr(e))
            # The shared connection is in a Lua debugging session that
            # blocks Redis: end it, so that the proxy can shut down.
            redis_srv.stop()
        assert got == [7, None], "EVAL of another client after SCRIPT DEBUG SYNC: %r" % got
        assert a.cmd("SCRIPT", "DEBUG", "NO") == want_no
        assert b.cmd("EVAL", "return 8", "0") == 8


def test_replconf_ack_has_no_reply(redis_srv, make_proxy):
    """REPLCONF ACK / GETACK from a client that is not a replica get no
    reply at all: nobody else's reply may take its place."""
    proxy = start(make_proxy, redis_srv)
    with ctl(redis_srv) as c:
        assert c.cmd("SET", "kb", "b-secret") == b"OK"

    def script(port):
        with Conn(port, timeout=2) as a, Conn(port, timeout=2) as b:
            a.send(enc("REPLCONF", "ACK", "0"))
            time.sleep(0.1)
            try:
                got_b = b.cmd("GET", "kb")
            except (TimeoutError, EOFError, OSError) as e:
                got_b = repr(e)
            try:
                a.assert_silent(0.3)
                got_a = "silent"
            except AssertionError as e:
                got_a = str(e)
            return got_a, got_b
    d = script(redis_srv.port)
    p = script(proxy.port)
    # A reply the shared connection will never get would hold the proxy's
    # shutdown: end that connection.
    redis_srv.stop()
    assert d == ("silent", b"b-secret"), d
    assert p == d, "REPLCONF ACK on a, then GET on b: direct %r, proxy %r" % (d, p)


@pytest.mark.parametrize("cmd", [("SYNC",), ("PSYNC", "?", "-1")], ids=["sync", "psync"])
def test_sync_does_not_take_the_shared_connection(redis_srv, make_proxy, cmd):
    """SYNC / PSYNC make the connection a replica (Redis then drops it at
    the first command that would get a reply): other clients must keep
    working."""
    proxy = start(make_proxy, redis_srv)
    with ctl(redis_srv) as c:
        assert c.cmd("SET", "k", "v") == b"OK"
    with Shared(proxy.port, timeout=2) as a:
        a.send(enc(*cmd))
        time.sleep(0.3)
        with Shared(proxy.port, timeout=2) as b:
            try:
                got = b.cmd("GET", "k")
            except (TimeoutError, EOFError, OSError) as e:
                got = repr(e)
            assert got == b"v", "GET by another client after SYNC: %r" % (got,)


def test_request_trickling_in_byte_by_byte(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    stop = threading.Event()

    def busy():
        with Shared(proxy.port) as c:
            n = 0
            while not stop.is_set():
                n += 1
                c.send(enc("INCR", "busy") + enc("ECHO", "e%d" % n))
                got = c.replies(2)
                assert got[1] == b"e%d" % n and isinstance(got[0], int), got

    def trickle():
        try:
            with Shared(proxy.port) as c:
                data = (enc("SET", "t", "x" * 300) + enc("GET", "t") + enc("SELECT", "2")
                        + enc("SET", "t", "db2") + enc("SELECT", "0") + enc("STRLEN", "t"))
                for i in range(len(data)):
                    c.send(data[i:i + 1])
                    if i % 16 == 0:
                        time.sleep(0.001)
                assert c.replies(6) == [b"OK", b"x" * 300, b"OK", b"OK", b"OK", 300]
        finally:
            stop.set()
    run_threads([busy, busy, trickle])


def test_deep_pipeline_pins_past_256(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    with ctl(redis_srv) as c:
        for i in range(100):
            assert c.cmd("SET", "d:%d" % i, "val-%d" % i) == b"OK"
    with Shared(proxy.port) as c:
        c.send(b"".join(enc("GET", "d:%d" % (i % 100)) for i in range(10000)))
        got = c.replies(10000, timeout=20)
        bad = [(i, g) for i, g in enumerate(got) if g != b"val-%d" % (i % 100)]
        assert not bad, "first wrong replies (index, got): %r" % bad[:5]
        assert c.cmd("INCR", "after") == 1
        # Stateless again, with nothing owed: back on the shared connection.
        assert c.cmd("INCR", "after") == 2
        wait_conns(redis_srv, 1, "a client that had 256 requests in flight")


# --------------------------------------------------------------------------
# TTL rules
# --------------------------------------------------------------------------

RULES = ('[ttl "rw:"]\nttl = 100\naction = rewrite\n\n'
         '[ttl "rj:"]\nttl = 100\naction = reject\n\n')


def test_rules_over_shared_connection(redis_srv, make_redis, make_proxy):
    proxy = start(make_proxy, redis_srv, sections=RULES)
    ref_redis = make_redis()
    ref = make_proxy(ref_redis, {}, sections=RULES)          # 1:1, the reference

    def script(redis, port):
        out = []
        with Conn(port) as c, ctl(redis) as direct:
            c.send(enc("INCR", "rw:x"))
            out.append(c.reply_raw()[1])
            out.append(direct.cmd("PTTL", "rw:x"))
            assert direct.cmd("SET", "rw:y", "old", "EX", "5000") == b"OK"
            c.send(enc("SET", "rw:y", "new"))
            out.append(c.reply_raw()[1])
            out.append(direct.cmd("PTTL", "rw:y"))
            out.append(direct.cmd("GET", "rw:y"))
            c.send(enc("SET", "a", "1") + enc("SET", "rj:k", "v") + enc("INCR", "rw:n")
                   + enc("GET", "a") + enc("SET", "rj:k", "v", "EX", "10") + enc("GET", "rj:k")
                   + enc("INCR", "rj:c") + enc("ECHO", "end"))
            out += raw_replies(c, 8)
            out.append(direct.cmd("PTTL", "rw:n"))
            out.append(direct.cmd("EXISTS", "rj:c"))
        return out
    p = script(redis_srv, proxy.port)
    r = script(ref_redis, ref.port)

    assert p[0] == b":1\r\n" and 0 < p[1] <= 100000, p
    assert p[2] == b"+OK\r\n" and 4990000 < p[3] <= 5000000 and p[4] == b"new", p
    rep = p[5:13]
    assert rep[0] == b"+OK\r\n" and rep[1].startswith(b"-"), rep
    assert rep[2] == b":1\r\n" and rep[3] == b"$1\r\n1\r\n", rep
    assert rep[4] == b"+OK\r\n" and rep[5] == b"$1\r\nv\r\n", rep
    assert rep[6].startswith(b"-") and rep[7] == b"$3\r\nend\r\n", rep
    assert 0 < p[13] <= 100000 and p[14] == 0, p
    # Same as the 1:1 proxy, TTL values aside.
    for i in (0, 2, 4) + tuple(range(5, 13)) + (14,):
        assert p[i] == r[i], "item %d: multiplex %r, 1:1 %r" % (i, p[i], r[i])
    wait_conns(redis_srv, 1, "rules applied over the shared connection")

    # A rejected command's error, then a pin, in one pipeline.
    def pinned(port):
        with Conn(port) as c:
            c.send(enc("SET", "a", "1") + enc("SET", "rj:z", "v") + enc("SELECT", "1")
                   + enc("INCR", "rw:p") + enc("SET", "rj:z", "v") + enc("SELECT", "0")
                   + enc("GET", "a"))
            return raw_replies(c, 7)
    p = pinned(proxy.port)
    r = pinned(ref.port)
    assert p[1].startswith(b"-") and p[4].startswith(b"-") and p[6] == b"$1\r\n1\r\n", p
    assert p == r
    with ctl(redis_srv) as direct:
        assert direct.cmd("SELECT", "1") == b"OK"
        assert 0 < direct.cmd("PTTL", "rw:p") <= 100000


# --------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------

def test_protocol_error_after_pipelined_requests(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)

    def script(port):
        with Conn(port) as c:
            c.send(enc("SET", "k", "v") + b"PING\r\n" + enc("GET", "k") + b"*3000000000\r\n")
            return c.read_until_eof(timeout=5)
    d, p = direct_then_proxy(redis_srv, proxy, script)
    assert d == (b"+OK\r\n+PONG\r\n$1\r\nv\r\n"
                 b"-ERR Protocol error: invalid multibulk length\r\n"), d
    assert p == d
    with Shared(proxy.port) as c:
        assert c.cmd("GET", "k") == b"v"
    wait_conns(redis_srv, 1, "after the protocol error")


def test_clients_leaving_with_replies_owed(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    with ctl(redis_srv) as c:
        for i in range(10):
            assert c.cmd("SET", "big:%d" % i, ("B%d" % i) * 5000) == b"OK"
        for i in range(4):
            assert c.cmd("SET", "own:%d" % i, "mine-%d" % i) == b"OK"
    stop = threading.Event()

    def leaver():
        for rnd in range(15):
            for i in range(10):
                c = Shared(proxy.port)
                c.send(enc("GET", "big:%d" % i) * 100 + enc("DEBUG", "SLEEP", "0")
                       + enc("INCR", "leaver"))
                c.close()
        stop.set()

    def checker(i):
        def run():
            with Shared(proxy.port) as c:
                n = 0
                while not stop.is_set() or n < 20:
                    c.send((enc("GET", "own:%d" % i) + enc("ECHO", "e%d" % i)) * 50)
                    got = c.replies(100)
                    assert got == [b"mine-%d" % i, b"e%d" % i] * 50, "checker %d round %d" % (i, n)
                    n += 1
        return run
    run_threads([leaver] + [checker(i) for i in range(4)])
    with Shared(proxy.port) as c:
        assert c.cmd("GET", "own:0") == b"mine-0"
        c.send(enc("ECHO", "a") + enc("ECHO", "b"))
        assert c.replies(2) == [b"a", b"b"]
    wait_conns(redis_srv, 1, "after 150 clients left with replies owed")


def test_backend_restart_with_replies_owed(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    with ctl(redis_srv) as c:
        assert c.cmd("SET", "k", "v") == b"OK"
    owed = Shared(proxy.port)
    behind = Shared(proxy.port)
    idle = Shared(proxy.port)
    pinned = Shared(proxy.port)
    try:
        assert idle.cmd("PING") == b"PONG"
        assert pinned.cmd("CLIENT", "SETNAME", "pinned") == b"OK"
        wait_conns(redis_srv, 2, "shared + pinned")
        pause = ctl(redis_srv)
        assert pause.cmd("CLIENT", "PAUSE", "10000", "WRITE") == b"OK"
        # The GET is answered, the SET waits for the pause: the shared
        # connection is stuck behind it, with the next client's GET too.
        owed.send(enc("GET", "k") + enc("SET", "k", "w") + enc("GET", "k"))
        assert owed.reply_raw()[1] == b"$1\r\nv\r\n"
        behind.send(enc("GET", "k"))
        behind.assert_silent(0.2)
        redis_srv.restart()
        pause.close()
        assert owed.read_until_eof(timeout=5) == b""
        assert behind.read_until_eof(timeout=5) == b""
        assert pinned.read_until_eof(timeout=5) == b""
        # As with Redis, whose restart closes every client's connection.
        assert idle.read_until_eof(timeout=5) == b""

        def works():
            try:
                with Shared(proxy.port, timeout=2) as c:
                    return c.cmd("SET", "after", "1") == b"OK"
            except (OSError, EOFError, TimeoutError):
                return False
        wait_for(works, 10, "a new client after the backend restart")
        with Shared(proxy.port) as c:
            c.send(enc("GET", "after") + enc("INCR", "after"))
            assert c.replies(2) == [b"1", 2]
        wait_conns(redis_srv, 1, "new clients shared again after the restart")
    finally:
        for c in (owed, behind, idle, pinned):
            c.close()


def test_backend_down_for_an_idle_shared_client(redis_srv, make_proxy):
    """Redis gone for good: a stateless client's connection closes, as a
    direct client's does; a new client gets the proxy's "backend
    unavailable" error and EOF."""
    proxy = start(make_proxy, redis_srv)
    idle = Shared(proxy.port)
    try:
        assert idle.cmd("PING") == b"PONG"
        redis_srv.stop()
        assert idle.read_until_eof(timeout=5) == b""
        with Conn(proxy.port) as fresh:
            fresh.send(enc("GET", "k"))
            new = fresh.read_until_eof(timeout=5)
        assert new.startswith(b"-ERR ttlguard: backend ") and new.endswith(b"\r\n"), new
        redis_srv.start()

        def works():
            try:
                with Shared(proxy.port, timeout=2) as c:
                    return c.cmd("SET", "after", "1") == b"OK"
            except (OSError, EOFError, TimeoutError):
                return False
        wait_for(works, 10, "a client after Redis is back")
    finally:
        idle.close()


def test_shared_connection_over_unix_socket(tmp_path, make_redis, make_proxy):
    sock = str(tmp_path / "redis.sock")
    r = make_redis(["--unixsocket", sock, "--unixsocketperm", "700"])
    p = make_proxy(r, dict(MUX), backend_addr="unix:" + sock)
    wait_shared(p, r)
    conns = [Shared(p.port) for _ in range(5)]
    try:
        for i, c in enumerate(conns):
            c.send(enc("SET", "u%d" % i, i) + enc("GET", "u%d" % i))
        for i, c in enumerate(conns):
            assert c.replies(2) == [b"OK", b"%d" % i]
        wait_conns(r, 1, "five clients over the unix socket")
        assert conns[0].cmd("CLIENT", "SETNAME", "pinned") == b"OK"
        wait_conns(r, 2, "one of them pinned")
        assert conns[1].cmd("GET", "u0") == b"0"
    finally:
        for c in conns:
            c.close()


def test_reload_to_another_backend(redis_srv, make_redis, make_proxy):
    """SIGHUP with a new backend address: replies owed on the old shared
    connection end as if it had closed (what was received, then EOF), and
    stateless requests go to the new backend."""
    proxy = start(make_proxy, redis_srv)
    other = make_redis()
    with ctl(redis_srv) as a, ctl(other) as b:
        assert a.cmd("SET", "where", "old") == b"OK"
        assert b.cmd("SET", "where", "new") == b"OK"
    owed = Shared(proxy.port)
    idle = Shared(proxy.port)
    pause = ctl(redis_srv)
    try:
        assert idle.cmd("GET", "where") == b"old"
        assert pause.cmd("CLIENT", "PAUSE", "10000", "WRITE") == b"OK"
        owed.send(enc("GET", "where") + enc("SET", "x", "1") + enc("GET", "where"))
        assert owed.reply_raw()[1] == b"$3\r\nold\r\n"
        with open(proxy.config_path) as f:
            text = f.read()
        with open(proxy.config_path, "w") as f:
            f.write(text.replace("backend = 127.0.0.1:%d" % redis_srv.port,
                                 "backend = 127.0.0.1:%d" % other.port))
        proxy.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in proxy.stderr(), 5, "the reload")
        assert owed.read_until_eof(timeout=5) == b""
        assert pause.cmd("CLIENT", "UNPAUSE") == b"OK"
        with Shared(proxy.port) as c:
            assert c.cmd("GET", "where") == b"new"
        assert idle.cmd("GET", "where") == b"new"       # by design, as after a restart
        with ctl(redis_srv) as a:
            assert a.cmd("GET", "x") is None             # the paused SET never ran
        wait_conns(other, 1, "the new backend: one shared connection")
    finally:
        for c in (owed, idle, pause):
            c.close()


BIG = 100 * 1024


def test_slow_reader_does_not_stall_others(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    with ctl(redis_srv) as c:
        assert c.cmd("SET", "big", b"x" * BIG) == b"OK"
        assert c.cmd("SET", "small", "s") == b"OK"
    one = b"$%d\r\n" % BIG + b"x" * BIG + b"\r\n"
    slow1 = Shared(proxy.port)
    slow2 = Shared(proxy.port)
    try:
        slow1.send(enc("GET", "big") * 250)        # under 256: stays shared
        slow2.send(enc("GET", "big") * 1000)       # pins after 256
        time.sleep(0.3)
        with Shared(proxy.port) as fast:
            for rnd in range(3):
                t0 = time.monotonic()
                for _ in range(100):
                    assert fast.cmd("PING") == b"PONG"
                assert fast.cmd("GET", "small") == b"s"
                took = time.monotonic() - t0
                assert took < slow(2), "100 PINGs took %.2fs next to slow readers" % took
        assert slow1.read_exact(len(one) * 250, timeout=20) == one * 250
        assert slow2.read_exact(len(one) * 1000, timeout=30) == one * 1000
        assert slow1.cmd("GET", "small") == b"s"
        assert slow2.cmd("GET", "small") == b"s"
    finally:
        slow1.close()
        slow2.close()


def test_redis_not_reading_pauses_then_resumes_writers(redis_srv, make_proxy):
    """Redis stops reading (DEBUG SLEEP) while clients send megabytes over the
    shared connection: the proxy holds them back, then everything runs, in
    order, once Redis reads again."""
    proxy = start(make_proxy, redis_srv, {"max_buffer": "256kb"})
    val = b"v" * (512 * 1024)
    sleeper = ctl(redis_srv)
    try:
        sleeper.send(enc("DEBUG", "SLEEP", "1"))
        harness.wait_busy(redis_srv.port)

        def writer(i):
            def run():
                with Shared(proxy.port, timeout=15) as c:
                    c.send(b"".join(enc("SET", "w:%d:%d" % (i, k), val) + enc("INCR", "wn:%d" % i)
                                    for k in range(20)))
                    assert c.replies(40) == [x for k in range(20) for x in (b"OK", k + 1)]
                    assert c.cmd("STRLEN", "w:%d:19" % i) == len(val)
            return run

        def reader():
            with Shared(proxy.port, timeout=15) as c:
                for k in range(50):
                    assert c.cmd("ECHO", "r%d" % k) == b"r%d" % k
        run_threads([writer(i) for i in range(3)] + [reader])
        assert sleeper.reply() == b"OK"
        with Shared(proxy.port) as c:
            assert c.cmd("GET", "wn:2") == b"20"
    finally:
        sleeper.close()


def test_sigterm_with_shared_and_pinned_clients(redis_srv, make_proxy):
    proxy = start(make_proxy, redis_srv)
    shared = Shared(proxy.port)
    pinned = Shared(proxy.port)
    busy = Shared(proxy.port)
    try:
        assert shared.cmd("PING") == b"PONG"
        assert pinned.cmd("CLIENT", "SETNAME", "pinned") == b"OK"
        busy.send(enc("DEBUG", "SLEEP", "0.3") + enc("ECHO", "done"))
        harness.wait_busy(redis_srv.port)
        proxy.send_signal(signal.SIGTERM)
        assert busy.read_until_eof(timeout=5) == b"+OK\r\n$4\r\ndone\r\n"
        assert shared.read_until_eof(timeout=5) == b""
        assert pinned.read_until_eof(timeout=5) == b""
        assert proxy.stop(sig=None, timeout=5) == 0
    finally:
        for c in (shared, pinned, busy):
            c.close()


def reset_close(c):
    """Close with RST (SO_LINGER 0): the proxy sees ECONNRESET, not EOF."""
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


@pytest.mark.parametrize("how", ["eof", "reset"])
def test_sigterm_after_client_left_with_reply_owed(redis_srv, make_proxy, how):
    """A client leaves while its reply is still owed on the shared
    connection; then SIGTERM: the proxy must still exit, and 0."""
    proxy = start(make_proxy, redis_srv)
    c = Shared(proxy.port)
    c.send(enc("DEBUG", "SLEEP", "0.5") + enc("GET", "k"))
    harness.wait_busy(redis_srv.port)
    if how == "reset":
        reset_close(c)
    else:
        c.close()
    time.sleep(0.1)
    proxy.send_signal(signal.SIGTERM)
    rc = proxy.stop(sig=None, timeout=4)
    assert rc == 0, "exit status %r (None: still running 4 s after SIGTERM)" % rc
