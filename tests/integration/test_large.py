"""
Large requests stream (docs/reliability.md, "Large requests"): once the
proxy has the arguments before a bulk of 64 KiB or more, and nothing it does
depends on the rest (no key under a rule, a command it only forwards), the
rest goes to Redis as it arrives, on the client's own connection, so a shared
connection never carries a partial request. Otherwise the request is held
until whole, and handled as any other.

Each test runs with multiplex on (the default: the session leaves the shared
connection first) and off.
"""

import socket
import time

import pytest

import harness
from harness import Conn, enc

MODES = ["on", "off"]
RULES = '[ttl "t:"]\nttl = 300\naction = rewrite\n'
BIG = 1024 * 1024


def big_set_head(key, n):
    return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, n)


def proxy_conns(redis_port):
    """The proxy's client connections to Redis, by id: its own (control,
    watcher) are named ttlguard-*."""
    return {c["id"]: c for c in harness.client_list(redis_port)
            if not c.get("name", "").startswith("ttlguard")
            and c.get("cmd") != "client|list"}


def wait_qbuf(redis_port, at_least):
    """Until a connection of the proxy's holds at least `at_least` bytes of a
    request Redis has not run yet (CLIENT LIST qbuf=): the proxy passed them
    on before the request was whole."""
    def partial():
        return [c for c in proxy_conns(redis_port).values()
                if int(c.get("qbuf", 0)) >= at_least and c.get("cmd") != "set"]
    harness.wait_for(lambda: partial(), 10, "%d bytes of a partial request at Redis" % at_least)
    return partial()[0]


@pytest.mark.parametrize("mux", MODES)
def test_a_large_value_passes_before_it_is_whole(redis_srv, make_proxy, mux):
    """Half a 1 MB value, then a pause: Redis already holds that half; the
    rest, pipelined with a GET: both replies right, in order."""
    p = make_proxy(redis_srv, {"multiplex": mux})
    value = bytes(range(256)) * (BIG // 256)
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
        c.send(big_set_head(b"big", BIG) + value[:BIG // 2])
        conn = wait_qbuf(redis_srv.port, BIG // 4)
        c.send(value[BIG // 2:] + b"\r\n" + enc("STRLEN", "big") + enc("GET", "big"))
        assert c.replies(3, timeout=20) == [b"OK", BIG, value]
        # The connection that took the partial request is the client's own
        # (multiplex = on: it left the shared one), and it keeps it.
        assert c.cmd("ECHO", "after") == b"after"
        assert proxy_conns(redis_srv.port)[conn["id"]]["cmd"] == "echo"


@pytest.mark.parametrize("mux", MODES)
def test_a_client_that_leaves_mid_value_runs_nothing(redis_srv, make_proxy, mux):
    """Redis never runs a truncated request: the client's connection to it
    closes with the client's."""
    p = make_proxy(redis_srv, {"multiplex": mux})
    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(enc("PING"))
    assert s.recv(100) == b"+PONG\r\n"
    s.sendall(big_set_head(b"cut", BIG) + b"x" * (BIG // 2))
    conn = wait_qbuf(redis_srv.port, BIG // 4)
    s.close()
    harness.wait_for(lambda: conn["id"] not in proxy_conns(redis_srv.port), 10,
                     "the backend connection of the client that left to close")
    with Conn(redis_srv.port) as r:
        assert r.cmd("EXISTS", "cut") == 0


@pytest.mark.parametrize("mux", MODES)
def test_a_stalled_client_holds_up_nobody(redis_srv, make_proxy, mux):
    """A client stalled mid-value: other clients' requests are answered
    meanwhile, on whatever connection they use."""
    p = make_proxy(redis_srv, {"multiplex": mux})
    with Conn(p.port) as stalled, Conn(p.port) as other:
        assert stalled.cmd("PING") == b"PONG"
        assert other.cmd("SET", "a", "1") == b"OK"
        stalled.send(big_set_head(b"slow", BIG) + b"y" * 1000)
        for i in range(50):
            assert other.cmd("INCR", "a") == 2 + i
        stalled.send(b"y" * (BIG - 1000) + b"\r\n")
        assert stalled.reply(timeout=20) == b"OK"
        assert other.cmd("STRLEN", "slow") == BIG


@pytest.mark.parametrize("mux", MODES)
def test_a_large_value_under_a_rule_is_rewritten(redis_srv, make_proxy, mux):
    """A key under a rewrite rule: the request is held whole and rewritten,
    the client gets SET's own reply, the key its TTL."""
    p = make_proxy(redis_srv, {"multiplex": mux}, sections=RULES)
    value = b"z" * BIG
    with Conn(p.port) as c:
        c.send(big_set_head(b"t:big", BIG) + value[:BIG // 2])
        time.sleep(0.1)
        c.send(value[BIG // 2:] + b"\r\n" + enc("TTL", "t:big"))
        assert c.replies(2, timeout=20) == [b"OK", 300]
        assert c.cmd("STRLEN", "t:big") == BIG


@pytest.mark.parametrize("mux", MODES)
def test_options_after_a_streamed_value(redis_srv, make_proxy, mux):
    """Arguments after the large one (SET ... EX n GET), in pieces that cut
    their headers: framed as they arrive, the reply Redis's."""
    p = make_proxy(redis_srv, {"multiplex": mux})
    value = b"v" * (256 * 1024)
    req = (b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % len(value) + value +
           b"\r\n$2\r\nEX\r\n$3\r\n100\r\n$3\r\nGET\r\n")
    with Conn(p.port) as c:
        assert c.cmd("SET", "k", "old") == b"OK"
        for cut in range(0, len(req), 99991):
            c.send(req[cut:cut + 99991])
            time.sleep(0.01)
        for piece in (b"*", b"2\r\n$3", b"\r\nTTL\r\n$1\r", b"\nk\r\n"):
            c.send(piece)
            time.sleep(0.01)
        assert c.replies(2, timeout=20) == [b"old", 100]


def outcome(conn, seconds):
    """(bytes, closed): what the peer sent within `seconds`, and whether it
    closed the connection."""
    out, deadline = bytearray(), time.monotonic() + harness.slow(seconds)
    while time.monotonic() < deadline:
        conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = conn.sock.recv(1 << 16)
        except socket.timeout:
            break
        if not data:
            return bytes(out), True
        out += data
    return bytes(out), False


@pytest.mark.parametrize("mux", MODES)
def test_a_protocol_error_after_a_streamed_value(redis_srv, make_proxy, mux):
    """A bad header after the large argument, once the start went on: the
    client gets what Redis gives for the same bytes (Redis 7.0 to 8.0 and
    Valkey: the protocol error, then the connection closes; Redis 8.6 drops
    an error found after a partial read and answers nothing, redis#15795);
    Redis ran nothing."""
    p = make_proxy(redis_srv, {"multiplex": mux})
    value = b"w" * (256 * 1024)
    head = b"*4\r\n$3\r\nSET\r\n$3\r\nbad\r\n$%d\r\n" % len(value)
    with Conn(redis_srv.port) as direct:
        direct.send(head + value[:1000])
        time.sleep(0.1)
        direct.send(value[1000:] + b"\r\n:1\r\n")
        want = outcome(direct, 3)
    with Conn(p.port) as c:
        c.send(head + value[:1000])
        wait_qbuf(redis_srv.port, 1000)
        c.send(value[1000:] + b"\r\n:1\r\n")
        assert outcome(c, 3) == want
    if want[1]:
        assert want[0].startswith(b"-ERR Protocol error: expected '$', got ':'"), want
    with Conn(redis_srv.port) as r:
        assert r.cmd("EXISTS", "bad") == 0
