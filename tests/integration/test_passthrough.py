"""
Byte-for-byte transparency: a long scripted session of mixed commands, RESP2
and RESP3 (HELLO 3, DEBUG PROTOCOL for every RESP3 type), gives exactly the
same reply bytes through ttlguard as from redis-server directly — sent one
command at a time, as one pipelined write, and dribbled one byte per write.
"""

import re
import socket
import time

import pytest

from harness import Conn, enc, session_bytes


def _val(n, seed):
    """A value of n bytes with CR, LF and NUL in it."""
    pat = bytes((seed + i * 7) % 256 for i in range(251)) + b"\r\n\0"
    return (pat * (n // len(pat) + 1))[:n]


def _session():
    """[(request bytes, number of replies)], one entry per command."""
    s = []

    def c(*args):
        s.append((enc(*args), 1))

    # RESP2
    c("PING")
    c("PING", "hello world")
    c("ECHO", b"\r\n\0binary\xff")
    c("SET", "k:str", "v1")
    c("GET", "k:str")
    c("GET", "k:missing")
    c("SET", "k:str", "v2", "XX", "GET")
    c("SET", "k:str", "v3", "NX")
    c("STRLEN", "k:str")
    c("APPEND", "k:str", "-tail")
    c("GETRANGE", "k:str", 0, 3)
    c("SETRANGE", "k:str", 10, "pad")
    c("GET", "k:str")
    c("SET", "k:empty", "")
    c("GET", "k:empty")
    for n in (1, 4095, 4096, 4097, 16383, 16384, 16385, 65537, 262144 + 3):
        c("SET", "k:bin:%d" % n, _val(n, n))
        c("GET", "k:bin:%d" % n)
    c("INCR", "k:n")
    c("INCRBY", "k:n", -42)
    c("INCRBYFLOAT", "k:f", "3.25")
    c("INCR", "k:str")
    c("DEL", "k:str", "k:missing")
    c("EXISTS", "k:n", "k:f", "k:none")
    c("MSET", "m1", "a", "m2", "b")
    c("MGET", "m1", "nope", "m2")
    c("RPUSH", "l", *["e%d" % i for i in range(1000)])
    c("LRANGE", "l", 0, -1)
    c("LRANGE", "l:none", 0, -1)
    c("LPOS", "l", "e500")
    c("HSET", "h", "f1", "v1", "f2", "v2", "f3", "")
    c("HGETALL", "h")
    c("HGET", "h", "nope")
    c("SADD", "s", 3, 1, 2, 100000)
    c("SMEMBERS", "s")
    c("SISMEMBER", "s", 2)
    c("ZADD", "z", "1.5", "a", "2", "b", "-inf", "c")
    c("ZRANGE", "z", 0, -1, "WITHSCORES")
    c("ZSCORE", "z", "a")
    c("ZSCORE", "z", "nope")
    c("XADD", "x", "1-1", "f", "v", "g", "w")
    c("XADD", "x", "2-1", "f", "v2")
    c("XRANGE", "x", "-", "+")
    c("XINFO", "STREAM", "x")
    c("EXPIRE", "m1", 1000)
    c("TTL", "m1")
    c("PTTL", "nope")
    c("TYPE", "h")
    c("OBJECT", "ENCODING", "l")
    c("DBSIZE")
    c("NOPE", "a", "b")
    c("GET")
    c("LPUSH", "h", "x")
    c("EVAL", "return {1,2,{3,'x',{false}},true,'y'}", 0)
    c("EVAL", "return redis.error_reply('My Error')", 0)
    c("EVAL", "return redis.status_reply('FINE')", 0)
    c("EVAL", "return 1.75", 0)
    c("CONFIG", "GET", "maxmemory-policy")
    c("COMMAND", "INFO", "get", "set")
    c("OBJECT", "HELP")
    c("CLIENT", "SETNAME", "scripted")
    c("CLIENT", "GETNAME")
    s.append((enc("MULTI") + enc("INCR", "k:n") + enc("LPUSH", "h", "x") + enc("GET", "k:n")
              + enc("EXEC"), 5))
    for t in ("string", "integer", "double", "bignum", "null", "array", "set", "map",
              "attrib", "push", "verbatim", "true", "false"):
        c("DEBUG", "PROTOCOL", t)
    # RESP3
    c("HELLO", "3")
    c("GET", "k:missing")
    c("HGETALL", "h")
    c("SMEMBERS", "s")
    c("ZSCORE", "z", "a")
    c("ZRANGE", "z", 0, -1, "WITHSCORES")
    c("ZADD", "z", "INCR", "0.25", "a")
    c("CONFIG", "GET", "maxmemory-policy")
    c("XINFO", "STREAM", "x")
    c("COMMAND", "DOCS", "get")
    c("EVAL", "return {1,2,{3,'x',{false}},true,'y'}", 0)
    c("EVAL", "redis.setresp(3); return redis.call('HGETALL', 'h')", 0)
    c("EVAL", "return redis.error_reply('My Error')", 0)
    c("MGET", "m1", "nope")
    c("LPUSH", "h", "x")
    for t in ("string", "integer", "double", "bignum", "null", "array", "set", "map",
              "attrib", "verbatim", "true", "false"):
        c("DEBUG", "PROTOCOL", t)
    # A push comes before its command's reply: two messages, one of them owed.
    s.append((enc("DEBUG", "PROTOCOL", "push"), 2))
    s.append((enc("MULTI") + enc("DEBUG", "PROTOCOL", "attrib") + enc("DEBUG", "PROTOCOL", "map")
              + enc("HGETALL", "h") + enc("EXEC"), 5))
    c("HELLO", "2")
    c("HGETALL", "h")
    c("ZSCORE", "z", "a")
    c("GET", "k:missing")
    c("PING")
    return s


_ID_RE = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")


def _norm(raw):
    # HELLO reports the connection's client id, which differs between runs.
    return _ID_RE.sub(b"$2\r\nid\r\n:ID\r\n", raw)


def _flush(port):
    with Conn(port) as c:
        assert c.cmd("FLUSHALL") == b"OK"


def _run_both(pair, runner):
    direct, prox = pair
    _flush(direct.port)
    want = runner(direct.port)
    _flush(direct.port)
    got = runner(prox.port)
    return want, got


def _assert_same(want, got):
    assert len(got) == len(want), "reply count: direct %d, proxy %d" % (len(want), len(got))
    for i, (w, g) in enumerate(zip(want, got)):
        assert _norm(g) == _norm(w), "reply %d differs:\n direct %r\n proxy  %r" % (
            i, w[:300], g[:300])


def test_session_one_command_at_a_time(pair):
    want, got = _run_both(pair, lambda port: session_bytes(port, _session()))
    # Sanity: the session really exercised RESP3 and the push came first.
    joined = b"".join(want)
    for marker in (b"%", b"~", b",1.5\r\n", b"(1234567", b"|1\r\n", b">2\r\n", b"=29\r\ntxt:",
                   b"#t\r\n", b"_\r\n", b"-WRONGTYPE"):
        assert marker in joined, marker
    _assert_same(want, got)


def _pipelined(port):
    """The whole session as one write; all reply bytes until the last PONG."""
    sess = _session()
    n = sum(k for _, k in sess)
    with Conn(port, timeout=20) as c:
        c.send(b"".join(d for d, _ in sess))
        return [c.reply_raw()[1] for _ in range(n)]


def test_session_one_pipelined_write(pair):
    want, got = _run_both(pair, _pipelined)
    _assert_same(want, got)


def _dribbled(port):
    """A few commands (a large bulk among them) written one byte at a time,
    so that the proxy sees every possible split point of a request."""
    reqs = (enc("SET", "d:k", _val(300, 1)) + enc("GET", "d:k") + b"PING\r\n"
            + enc("HELLO", "3") + enc("HGETALL", "h") + enc("DEBUG", "PROTOCOL", "attrib")
            + enc("HELLO", "2"))
    with Conn(port) as c:
        c.cmd("HSET", "h", "a", "1")
        for i in range(len(reqs)):
            c.send(reqs[i:i + 1])
            if i % 64 == 0:
                time.sleep(0.001)
        return [c.reply_raw()[1] for _ in range(7)]


def test_session_dribbled_byte_by_byte(pair):
    want, got = _run_both(pair, _dribbled)
    _assert_same(want, got)


def test_replies_split_across_reads(pair):
    """Large replies arrive at the proxy in many pieces; the client gets
    them whole and in order with a small reply in between."""
    def run(port):
        with Conn(port, timeout=20) as c:
            big = _val(3 * 1024 * 1024 + 17, 9)
            c.cmd("SET", "big", big)
            c.send(enc("GET", "big") + enc("PING") + enc("GET", "big") + enc("LRANGE", "big", 0, 1))
            out = [c.reply_raw()[1] for _ in range(4)]
            assert out[0] == b"$%d\r\n%s\r\n" % (len(big), big)
            return out
    want, got = _run_both(pair, run)
    _assert_same(want, got)


def test_push_inside_exec_frames_like_redis(pair):
    """DEBUG PROTOCOL push inside MULTI puts a push between the elements of
    the EXEC array (a push is out of band, not an element). The bytes must
    pass unchanged and the replies after it must still be paired correctly:
    a QUIT after it gets +OK and then EOF."""
    def run(port):
        with Conn(port) as c:
            c.cmd("HELLO", "3")
            c.send(enc("MULTI") + enc("DEBUG", "PROTOCOL", "push") + enc("PING") + enc("EXEC")
                   + enc("PING", "after") + enc("QUIT"))
            return c.read_until_eof()
    want, got = _run_both(pair, run)
    assert want.endswith(b"$5\r\nafter\r\n+OK\r\n")
    assert got == want


@pytest.mark.parametrize("n", [1, 3])
def test_push_then_reply_paired(pair, n):
    """`DEBUG PROTOCOL push` answers with a push and then its real reply.
    If the proxy took the push for the reply, a following QUIT would close
    the connection one reply early."""
    def run(port):
        with Conn(port) as c:
            c.cmd("HELLO", "3")
            c.send(enc("DEBUG", "PROTOCOL", "push") * n + enc("ECHO", "last") + enc("QUIT"))
            return c.read_until_eof()
    want, got = _run_both(pair, run)
    assert want.endswith(b"$4\r\nlast\r\n+OK\r\n")
    assert got == want


def test_backend_over_unix_socket(tmp_path, make_redis, make_proxy):
    """backend = unix:/path: the same session, the same bytes as direct."""
    sock = str(tmp_path / "redis.sock")
    r = make_redis(["--unixsocket", sock, "--unixsocketperm", "700"])
    p = make_proxy(r, backend_addr="unix:" + sock)

    class E:
        def __init__(self, port):
            self.port = port
    want, got = _run_both((E(r.port), E(p.port)), lambda port: session_bytes(port, _session()))
    _assert_same(want, got)
    with Conn(p.port) as c:
        info = dict(f.split(b"=", 1) for f in c.cmd("CLIENT", "INFO").split() if b"=" in f)
        # It came over the socket: the address is its path ("/path:0" from
        # Redis and Valkey 8, "[/path:0]:0" from Valkey 9), not 127.0.0.1:port.
        assert sock.encode() + b":0" in info[b"addr"], info[b"addr"]


# Pipelines whose replies do not map one-to-one onto requests: pub/sub
# replies (one per channel, pushes in RESP3, a message in the middle of a
# PUBLISH), CLIENT REPLY, commands inside MULTI, tracking pushes. Each ends
# in PING + QUIT, so a proxy that pairs a reply with the wrong request hangs
# (waiting for a reply that never comes) or closes one reply early.
PAIRING = {
    "subscribe-no-args": [("SUBSCRIBE",), ("PSUBSCRIBE",), ("SSUBSCRIBE",)],
    "subscribe-duplicate": [("SUBSCRIBE", "a", "a"), ("PING",), ("UNSUBSCRIBE", "a"), ("PING",)],
    "unsubscribe-none": [("UNSUBSCRIBE",), ("PUNSUBSCRIBE",), ("SUNSUBSCRIBE",), ("PING",)],
    "subscribe-in-multi": [("MULTI",), ("SUBSCRIBE", "a", "b"), ("EXEC",), ("PING",),
                           ("UNSUBSCRIBE",), ("PING",)],
    "resp3-publish-to-self": [("HELLO", "3"), ("SUBSCRIBE", "a"), ("PUBLISH", "a", "x"),
                              ("PUBLISH", "a", "y"), ("UNSUBSCRIBE", "a"), ("PUBLISH", "a", "z")],
    "resp3-subscribe-then-hello2": [("HELLO", "3"), ("SUBSCRIBE", "a"), ("HELLO", "2"),
                                    ("PING",), ("UNSUBSCRIBE",), ("PING",)],
    "reply-skip-subscribe": [("CLIENT", "REPLY", "SKIP"), ("SUBSCRIBE", "a", "b"), ("PING",),
                             ("UNSUBSCRIBE",), ("PING",)],
    "reply-off-resp3-messages": [("HELLO", "3"), ("CLIENT", "REPLY", "OFF"),
                                 ("SUBSCRIBE", "a"), ("PUBLISH", "a", "x"),
                                 ("CLIENT", "REPLY", "ON"), ("UNSUBSCRIBE",)],
    "reset-while-subscribed": [("SUBSCRIBE", "a"), ("PSUBSCRIBE", "p*"), ("RESET",),
                               ("GET", "k")],
    # A RESP2 subscriber is refused all but (P|S)(UN)SUBSCRIBE, PING, QUIT
    # and RESET, and the refused command changes nothing: HELLO 3, MULTI and
    # CLIENT REPLY OFF here must leave the proxy's view of the connection
    # alone, or the replies after them would be paired wrongly.
    "resp2-subscriber-refused-state": [("SUBSCRIBE", "a"), ("CLIENT", "REPLY", "OFF"),
                                       ("PING",), ("HELLO", "3"), ("PUBLISH", "a", "x"),
                                       ("PING",), ("MULTI",), ("SET", "k", "v"), ("PING",),
                                       ("EXEC",), ("UNSUBSCRIBE",), ("GET", "k")],
    "resp2-subscriber-unsubscribe-pipelined": [("PSUBSCRIBE", "p*"), ("SUBSCRIBE", "a", "b"),
                                               ("UNSUBSCRIBE",), ("GET", "k"),
                                               ("PUNSUBSCRIBE", "p*"), ("SET", "k", "v"),
                                               ("GET", "k")],
    "resp2-subscriber-reset-pipelined": [("SUBSCRIBE", "a"), ("RESET",), ("MULTI",),
                                         ("SET", "k", "v"), ("EXEC",)],
    "quit-inside-multi": [("MULTI",), ("SET", "k", "v")],
    "resp2-flattened-resp3-types": [("MULTI",), ("DEBUG", "PROTOCOL", "map"),
                                    ("DEBUG", "PROTOCOL", "attrib"), ("EXEC",)],
    "tracking-bcast-own-writes": [("HELLO", "3"), ("CLIENT", "TRACKING", "ON", "BCAST",
                                                   "PREFIX", "t:"),
                                  ("SET", "t:1", "a"), ("MSET", "t:2", "b", "t:3", "c"),
                                  ("DEL", "t:1", "t:2"), ("GET", "t:3")],
    "tracking-optin-caching": [("HELLO", "3"), ("CLIENT", "TRACKING", "ON", "OPTIN"),
                               ("CLIENT", "CACHING", "YES"), ("GET", "t:1"), ("SET", "t:1", "x"),
                               ("GET", "t:1"), ("SET", "t:1", "y")],
    "xread-block-timeout": [("XREAD", "BLOCK", "100", "STREAMS", "s", "$"),
                            ("BLMOVE", "l1", "l2", "LEFT", "RIGHT", "0.1")],
    "big-aggregates": [("EVAL", "for i=1,100000 do redis.call('RPUSH','L',i) end "
                        "for i=1,50000 do redis.call('ZADD','Z',i/3,i) end return 1", 0),
                       ("LRANGE", "L", 0, -1), ("HELLO", "3"),
                       ("ZRANGE", "Z", 0, -1, "WITHSCORES"), ("HELLO", "2")],
}


@pytest.mark.parametrize("name", sorted(PAIRING))
def test_reply_pairing_edge_cases(pair, name):
    data = b"".join(enc(*cmd) for cmd in PAIRING[name]) + enc("PING") + enc("QUIT")

    def run(port):
        with Conn(port, timeout=10) as c:
            c.send(data)
            return c.read_until_eof(timeout=10)
    want, got = _run_both(pair, run)
    assert want.endswith(b"+OK\r\n")
    assert _norm(got) == _norm(want)


def _sync_stream(port, sync, redis_port):
    """SYNC/PSYNC on a raw socket: skip newline keepalives and the RDB (a bulk
    without a trailing CRLF), then read the command stream that follows a
    write made by another client. Returns the first stream bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(b"PSYNC ? -1\r\n" if sync == "psync" else b"SYNC\r\n")
        buf = b""

        def line():
            nonlocal buf
            while b"\n" not in buf:
                d = s.recv(65536)
                if not d:
                    raise EOFError(buf[:200])
                buf += d
            ln, buf = buf.split(b"\n", 1)
            return ln
        ln = line()
        while ln in (b"", b"\r"):                   # keepalives while the RDB is made
            ln = line()
        if sync == "psync":
            assert ln.startswith(b"+FULLRESYNC "), ln
            ln = line()
            while ln in (b"", b"\r"):
                ln = line()
        assert ln.startswith(b"$"), ln
        n = int(ln[1:].strip())
        while len(buf) < n:
            buf += s.recv(65536)
        buf = buf[n:]                               # the RDB; no CRLF after it
        with Conn(redis_port) as w:
            assert w.cmd("SET", "repl:k", "v") == b"OK"
        while b"repl:k" not in buf:
            d = s.recv(65536)
            if not d:
                raise EOFError(buf[:200])
            buf += d
        return buf
    finally:
        s.close()


@pytest.mark.parametrize("sync", ["sync", "psync"])
def test_replication_stream_relayed(pair, sync):
    """After SYNC/PSYNC the connection carries an RDB payload without a
    trailing CRLF and then the command stream: relayed as it comes."""
    direct, prox = pair
    # Valkey 9 starts the stream of the first replica of a fresh server with
    # a PING (while its replication offset is 0; replicaStartCommandStream()),
    # a later one with the SELECT: a first sync that is not compared puts
    # both compared ones in the same state.
    _sync_stream(direct.port, sync, direct.redis.port)
    want = _sync_stream(direct.port, sync, direct.redis.port)
    got = _sync_stream(prox.port, sync, direct.redis.port)
    assert b"repl:k" in want and want.startswith(b"*")
    assert got == want


def test_reply_nested_thousands_deep(pair):
    """A Lua table that contains itself: Redis sends about 8,000 nested
    arrays and an error at the bottom; the proxy has no depth limit of its
    own, and the connection goes on."""
    script = "local a = {} local b = {a} a[1] = b return a"

    def run(port):
        with Conn(port) as c:
            c.send(enc("EVAL", script, "0") + enc("PING"))
            raw = c.read_exact(4 * 7000)
            rest = c.sock.recv(1 << 20)
            while b"+PONG\r\n" not in rest:
                rest += c.sock.recv(1 << 20)
            return bytes(raw) + rest
    want, got = _run_both(pair, run)
    assert want.startswith(b"*1\r\n" * 7000) and want.endswith(b"+PONG\r\n")
    assert got == want
