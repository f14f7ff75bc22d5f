"""
The wire: inline commands, malformed RESP, deep pipelines, large values,
redis-benchmark and redis-cli --pipe — direct and through ttlguard.
"""

import os
import subprocess
import threading
import time

import pytest

from harness import Conn, enc, server_identity, slow, vmrss_kb


def _sender(conn, data):
    """sendall in a thread, so that replies are read while the request
    bytes are still going out (a single-threaded write-then-read would
    deadlock once both directions' socket buffers are full)."""
    err = []

    def run():
        try:
            conn.send(data)
        except OSError as e:
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, err


# --------------------------------------------------------------------------
# inline commands
# --------------------------------------------------------------------------

def test_inline_commands(ep):
    with ep.conn() as c:
        c.send(b"PING\r\n")
        assert c.reply() == b"PONG"
        c.send(b'SET k "a b"\r\n')
        assert c.reply() == b"OK"
        c.send(b"GET k\n")
        assert c.reply() == b"a b"
        c.send(b"\r\n\n  \r\nPING hi\r\n")   # blank lines get no reply
        assert c.reply() == b"hi"
        c.send(b"ECHO \"\\x41\\n\\t\" \r\n")
        assert c.reply() == b"A\n\t"
        c.send(b"ECHO 'it\\'s'\r\n")
        assert c.reply() == b"it's"
        c.send(b"ECHO a  b\r\n")
        assert c.reply().startswith(b"ERR wrong number of arguments")
        name, version = server_identity(ep.redis.port)
        if name == "valkey" and version >= (9,):
            # Valkey 9 joins quoted and unquoted parts of an argument, as a
            # shell does (valkey#2098): one argument, "its". Only quotes left
            # open are an error there.
            c.send(b"ECHO 'it''s'\r\n")
            assert c.reply_raw()[1] == b"$3\r\nits\r\n"
            c.send(b"ECHO 'it\r\n")
        else:
            # A closing quote must be followed by a space: this is not two args.
            c.send(b"ECHO 'it''s'\r\n")
        assert c.read_until_eof() == b"-ERR Protocol error: unbalanced quotes in request\r\n"


def test_inline_mixed_with_resp_in_one_write(pair):
    data = (b"PING\r\n" + enc("SET", "k", "v\r\n") + b'SET k2 "x y"\n' + enc("GET", "k")
            + b"GET k2\r\n" + enc("MGET", "k", "k2") + b"   \r\n" + b"INCR n\r\n"
            + b"LPUSH l a b c\r\n" + enc("LRANGE", "l", 0, -1) + b"QUIT\r\n")
    out = []
    for e in pair:
        with e.conn() as c:
            c.cmd("FLUSHALL")
            c.send(data)
            out.append(c.read_until_eof())
    assert out[0].startswith(b"+PONG\r\n+OK\r\n+OK\r\n$3\r\nv\r\n\r\n$3\r\nx y\r\n")
    assert out[0].endswith(b"+OK\r\n")
    assert out[1] == out[0]


def test_inline_split_across_writes(ep):
    with ep.conn() as c:
        for piece in (b"PI", b"NG", b" split", b"\r", b"\n"):
            c.send(piece)
            time.sleep(0.02)
        assert c.reply() == b"split"


# --------------------------------------------------------------------------
# malformed input: same bytes as redis-server, then the connection closes
# --------------------------------------------------------------------------

MALFORMED = [
    (b"*3000000000\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\n$600000000\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-10\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\nfoo\r\n", b"-ERR Protocol error: expected '$', got 'f'\r\n"),
    (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"PING\r\n*3000000000\r\n",
     b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"),
    (enc("SET", "a", "b") + b"*2\r\n$3\r\nGET\r\n:1\r\n",
     b"+OK\r\n-ERR Protocol error: expected '$', got ':'\r\n"),
    (b'SET k "a b\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"x" * (70 * 1024), b"-ERR Protocol error: too big inline request\r\n"),
    (b"*1\r\n$" + b"9" * 30 + b"\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
]


@pytest.mark.parametrize("data,expect", MALFORMED, ids=[repr(d[:24]) for d, _ in MALFORMED])
def test_malformed_same_bytes_then_close(pair, data, expect):
    got = {}
    for e in pair:
        with e.conn(timeout=5) as c:
            c.send(data)
            got[e.kind] = c.read_until_eof(timeout=5)
    assert got["direct"] == expect
    assert got["proxy"] == got["direct"]


def test_incomplete_request_then_client_closes(ep):
    """A half-sent request followed by a close: nothing breaks for others."""
    with ep.conn() as c:
        c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc")
    with ep.conn() as c:
        assert c.cmd("GET", "k") is None
        assert c.cmd("PING") == b"PONG"


@pytest.mark.redis_args("--requirepass", "pw")
@pytest.mark.parametrize("data,expect", [
    (b"*100\r\n", b"-ERR Protocol error: unauthenticated multibulk length\r\n"),
    (b"*1\r\n$20000\r\n", b"-ERR Protocol error: unauthenticated bulk length\r\n"),
], ids=["multibulk", "bulk"])
def test_unauthenticated_big_request(pair, data, expect):
    """redis-server refuses a multibulk of more than 10 elements, or a bulk
    over 16 KB, from a client that has not authenticated yet, as soon as it
    reads the header (CVE-2021-32675 fix). A proxy that waits for the whole
    request before forwarding leaves the client hanging instead."""
    got = {}
    for e in pair:
        with e.conn(timeout=5) as c:
            c.send(data)
            try:
                got[e.kind] = c.read_until_eof(timeout=3)
            except TimeoutError as ex:
                got[e.kind] = "hang: %s" % ex
    assert got["direct"] == expect
    assert got["proxy"] == got["direct"]


@pytest.mark.parametrize("header", [b"*1\r\n$500000000\r\n", b"*2000000000\r\n",
                                    b"*1\r\n$600000000\r\n"])
def test_declared_lengths_not_allocated(proxy, header):
    """Declared lengths are not allocated up front: the proxy's VmRSS stays
    put while a connection announces a huge bulk or multibulk and sends
    (almost) nothing of it."""
    before = vmrss_kb(proxy.pid)
    conns = []
    for _ in range(4):
        c = Conn(proxy.port, timeout=5)
        c.send(header + b"abc")
        conns.append(c)
    time.sleep(0.3)
    after = vmrss_kb(proxy.pid)
    with Conn(proxy.port) as c:
        assert c.cmd("PING") == b"PONG"
    for c in conns:
        c.close()
    assert after - before < 32 * 1024, "VmRSS grew %d kB -> %d kB" % (before, after)


# --------------------------------------------------------------------------
# pipelines
# --------------------------------------------------------------------------

def test_deep_pipeline_50000(ep):
    n = 50000
    parts = []
    for i in range(n):
        if i % 3 == 0:
            parts.append(enc("SET", "k:%d" % i, "v:%d" % i))
        elif i % 3 == 1:
            parts.append(enc("GET", "k:%d" % (i - 1)))
        else:
            parts.append(enc("INCR", "ctr"))
    data = b"".join(parts)
    with ep.conn(timeout=60) as c:
        t, err = _sender(c, data)
        replies = c.replies(n, timeout=60)
        t.join(slow(10))
        assert not err
        for i, r in enumerate(replies):
            if i % 3 == 0:
                assert r == b"OK", (i, r)
            elif i % 3 == 1:
                assert r == b"v:%d" % (i - 1), (i, r)
            else:
                assert r == (i + 1) // 3, (i, r)
        assert c.cmd("PING") == b"PONG"
        assert c.reader.pending() == 0


def test_deep_inline_pipeline(ep):
    n = 20000
    with ep.conn(timeout=60) as c:
        t, err = _sender(c, b"".join(b"INCR c\r\n" for _ in range(n)))
        assert c.replies(n, timeout=60) == list(range(1, n + 1))
        t.join(slow(10))
        assert not err


def test_redis_benchmark(ep):
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(ep.port), "-n", "20000", "-c", "20",
         "-P", "16", "-r", "100000", "-t", "get,set,incr,lpush,mset", "--csv"],
        capture_output=True, timeout=slow(60), text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "rror" not in text, text
    for t in ("GET", "SET", "INCR", "LPUSH", "MSET"):
        assert '"%s' % t in out.stdout, out.stdout


def test_redis_benchmark_no_pipeline_many_clients(ep):
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(ep.port), "-n", "5000", "-c", "50",
         "-t", "ping,set,get", "-q"], capture_output=True, timeout=slow(60), text=True)
    assert out.returncode == 0, out.stderr
    assert "rror" not in out.stdout + out.stderr, out.stdout + out.stderr


def test_redis_cli_pipe_mass_insert(ep):
    n = 100000
    data = b"".join(enc("SET", "mass:%d" % i, "value-%d" % i) for i in range(n))
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(ep.port), "--pipe"],
                         input=data, capture_output=True, timeout=slow(60))
    assert out.returncode == 0, out.stderr
    assert b"errors: 0, replies: %d" % n in out.stdout, out.stdout
    with ep.conn() as c:
        assert c.cmd("DBSIZE") == n
        assert c.cmd("GET", "mass:%d" % (n - 1)) == b"value-%d" % (n - 1)


def test_redis_cli_commands(ep):
    def cli(*args):
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(ep.port)] + list(args),
                              capture_output=True, timeout=slow(10), text=True).stdout

    assert cli("SET", "c", "hello world") == "OK\n"
    assert cli("GET", "c") == "hello world\n"
    assert cli("-3", "--no-raw", "HGETALL", "nope") == "(empty hash)\n"
    assert cli("--no-raw", "DEBUG", "PROTOCOL", "bignum") == \
        '"1234567999999999999999999999999999999"\n'
    assert cli("-3", "--no-raw", "DEBUG", "PROTOCOL", "double") == "(double) 3.141\n"


# --------------------------------------------------------------------------
# large values
# --------------------------------------------------------------------------

@pytest.mark.timeout(300)
@pytest.mark.parametrize("mb", [100, 200])
def test_large_value(ep, mb):
    n = mb * 1024 * 1024
    value = os.urandom(n)
    with ep.conn(timeout=60) as c:
        c.send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n" % n)
        c.send(value)
        c.send(b"\r\n" + enc("STRLEN", "big"))
        assert c.reply(timeout=60) == b"OK"
        assert c.reply() == n
        # GET, with a small command pipelined behind it.
        c.send(enc("GET", "big") + enc("PING"))
        hdr = b"$%d\r\n" % n
        assert c.read_exact(len(hdr)) == hdr
        got = c.read_exact(n, timeout=60)
        assert got == value
        del got
        assert c.read_exact(2) == b"\r\n"
        assert c.reply() == b"PONG"
        assert c.cmd("DEL", "big") == 1
