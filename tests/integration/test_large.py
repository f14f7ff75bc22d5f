"""
Large requests stream (docs/reliability.md, "Large requests"): once the
proxy has the arguments before a bulk of 64 KiB or more, and what it does
with the request is decided by them, the rest goes to Redis as it arrives,
on the client's own connection, so a shared connection never carries a
partial request. With no key under a rule the request goes as sent; under a
rule it goes inside the proxy's MULTI (where a rewrite rule must give a key
its TTL: the held rewrite's MULTI form when the large argument is the last,
else the command inside WRAP_LUA), and once whole it is judged as any
request: EXEC, or DISCARD and the rule's error. Otherwise (a rule with
max_ttl, a client's own MULTI or WATCH, ...) the request is held until whole
and handled as any other.

Each test runs with multiplex on (the default: the session leaves the shared
connection first) and off.
"""

import json
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


RULE_SECTIONS = RULES + (
    '[ttl "r:"]\nttl = 300\naction = reject\n'
    '[ttl "l:"]\nttl = 300\naction = log\n'
    '[ttl "cap:"]\nttl = 300\nmax_ttl = 600\naction = rewrite\n')


def streamed(c, redis_port, head, value, tail=b""):
    """Send head and the first half of value, wait until Redis holds that
    half (the request streams), then the rest and tail."""
    c.send(head + value[:len(value) // 2])
    wait_qbuf(redis_port, len(value) // 4)
    c.send(value[len(value) // 2:] + b"\r\n" + tail)


def set_head(key, n, opts=()):
    """SET key <n bytes> opts..., up to the value's payload."""
    out = b"*%d\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (3 + len(opts), len(key), key, n)
    return out, b"".join(b"$%d\r\n%s\r\n" % (len(o), o) for o in opts)


def proxy_with_events(make_proxy, redis_srv, tmp_path, mux):
    log = str(tmp_path / "events.log")
    p = make_proxy(redis_srv, {"multiplex": mux, "events": log, "event_window": 1},
                   sections=RULE_SECTIONS)
    return p, log


def violations(p, log):
    """(key, effect, action) of every violation event, once the proxy stopped."""
    assert p.stop() == 0
    with open(log) as f:
        ev = [json.loads(line) for line in f]
    return sorted((e["key"], e["effect"], e["action"]) for e in ev if e["event"] == "violation")


def violation_count(p, log):
    """{(effect, action): violations}, once the proxy stopped; repeats within
    event_window are one line with their "count"."""
    assert p.stop() == 0
    counts = {}
    with open(log) as f:
        for e in map(json.loads, f):
            if e["event"] == "violation":
                k = (e["effect"], e["action"])
                counts[k] = counts.get(k, 0) + e.get("count", 1)
    return counts


@pytest.mark.parametrize("mux", MODES)
def test_a_large_value_under_a_rewrite_rule_streams(redis_srv, make_proxy, tmp_path, mux):
    """A key under a rewrite rule: the value streams (Redis holds half of it
    before the client sent the rest), the client gets SET's own replies, the
    key keeps its TTL or gets the rule's, and an explicit EX stays. A SET
    whose value is its last argument streams in the held rewrite's form (SET
    ... KEEPTTL; EXPIRE ... NX), not in the proxy's script: Redis runs no
    EVAL for it."""
    p, log = proxy_with_events(make_proxy, redis_srv, tmp_path, mux)
    value = bytes(range(256)) * (BIG // 256)
    with Conn(p.port) as c, Conn(redis_srv.port) as r:
        assert r.cmd("CONFIG", "RESETSTAT") == b"OK"
        head, _ = set_head(b"t:new", BIG)
        streamed(c, redis_srv.port, head, value, enc("TTL", "t:new") + enc("GET", "t:new"))
        assert c.replies(3, timeout=20) == [b"OK", 300, value]
        assert r.cmd("SET", "t:keep", "small", "EX", "1000") == b"OK"
        head, _ = set_head(b"t:keep", BIG)
        streamed(c, redis_srv.port, head, value, enc("TTL", "t:keep"))
        got = c.replies(2, timeout=20)
        assert got[0] == b"OK" and 990 <= got[1] <= 1000, got
        stats = r.cmd("INFO", "commandstats").decode()
        assert "cmdstat_eval:" not in stats and "cmdstat_expire:calls=2," in stats, stats
        assert r.cmd("SET", "t:old", "small", "EX", "1000") == b"OK"
        head, tail = set_head(b"t:old", BIG, (b"GET",))
        streamed(c, redis_srv.port, head, value, tail + enc("TTL", "t:old"))
        got = c.replies(2, timeout=20)
        assert got[0] == b"small" and 990 <= got[1] <= 1000, got
        head, tail = set_head(b"t:ex", BIG, (b"EX", b"50"))
        streamed(c, redis_srv.port, head, value, tail + enc("TTL", "t:ex"))
        assert c.replies(2, timeout=20) == [b"OK", 50]
        assert r.cmd("STRLEN", "t:old") == BIG
    assert violation_count(p, log) == {("drops-ttl", "rewritten"): 3}


@pytest.mark.parametrize("mux", MODES)
def test_a_large_value_under_a_reject_rule_streams_and_is_refused(redis_srv, make_proxy,
                                                                 tmp_path, mux):
    """A reject rule: the value streams inside the proxy's MULTI; without a
    TTL the client gets the rule's error and Redis keeps nothing, with EX
    the write goes through. A log rule: streams as sent, logged."""
    p, log = proxy_with_events(make_proxy, redis_srv, tmp_path, mux)
    value = b"r" * BIG
    with Conn(p.port) as c, Conn(redis_srv.port) as r:
        head, _ = set_head(b"r:k", BIG)
        streamed(c, redis_srv.port, head, value, enc("EXISTS", "r:k"))
        refusal, exists = c.replies(2, timeout=20)
        assert isinstance(refusal, harness.RespError) and b'ttl "r:"' in refusal, refusal
        assert exists == 0
        head, tail = set_head(b"r:k", BIG, (b"EX", b"60"))
        streamed(c, redis_srv.port, head, value, tail + enc("TTL", "r:k"))
        assert c.replies(2, timeout=20) == [b"OK", 60]
        head, _ = set_head(b"l:k", BIG)
        streamed(c, redis_srv.port, head, value, enc("TTL", "l:k"))
        assert c.replies(2, timeout=20) == [b"OK", -1]
        assert r.cmd("STRLEN", "r:k") == BIG
    assert violations(p, log) == [("l:k", "drops-ttl", "logged"),
                                  ("r:k", "drops-ttl", "rejected")]


@pytest.mark.parametrize("mux", MODES)
def test_create_only_writes_stream_under_a_rule(redis_srv, make_proxy, mux):
    """HSET and RPUSH of a large value into keys under a rewrite rule: they
    stream, the replies are the commands' own, the keys get the TTL."""
    p = make_proxy(redis_srv, {"multiplex": mux}, sections=RULE_SECTIONS)
    value = b"h" * BIG
    with Conn(p.port) as c:
        head = b"*4\r\n$4\r\nHSET\r\n$3\r\nt:h\r\n$1\r\nf\r\n$%d\r\n" % BIG
        streamed(c, redis_srv.port, head, value, enc("TTL", "t:h"))
        assert c.replies(2, timeout=20) == [1, 300]
        head = b"*4\r\n$5\r\nRPUSH\r\n$3\r\nt:l\r\n$%d\r\n" % BIG
        streamed(c, redis_srv.port, head, value, b"$1\r\nx\r\n" + enc("TTL", "t:l"))
        assert c.replies(2, timeout=20) == [2, 300]
        assert c.cmd("HSTRLEN", "t:h", "f") == BIG


@pytest.mark.parametrize("mux", MODES)
def test_what_a_stream_cannot_decide_is_held(redis_srv, make_proxy, mux):
    """A rule with max_ttl (an EX after the value may need capping) and a
    client under WATCH (no MULTI of the proxy's): held whole, then handled as
    any request; Redis sees no partial request."""
    p = make_proxy(redis_srv, {"multiplex": mux}, sections=RULE_SECTIONS)
    value = b"c" * BIG
    with Conn(p.port) as c:
        head, tail = set_head(b"cap:k", BIG, (b"EX", b"5000"))
        c.send(head + value[:BIG // 2])
        time.sleep(0.2)
        assert all(int(x.get("qbuf", 0)) < BIG // 4 for x in proxy_conns(redis_srv.port).values())
        c.send(value[BIG // 2:] + b"\r\n" + tail + enc("TTL", "cap:k"))
        assert c.replies(2, timeout=20) == [b"OK", 600]
        assert c.cmd("WATCH", "t:w") == b"OK"
        head, _ = set_head(b"t:w", BIG)
        c.send(head + value[:BIG // 2])
        time.sleep(0.2)
        assert all(int(x.get("qbuf", 0)) < BIG // 4 for x in proxy_conns(redis_srv.port).values())
        c.send(value[BIG // 2:] + b"\r\n" + enc("TTL", "t:w"))
        assert c.replies(2, timeout=20) == [b"OK", 300]


@pytest.mark.parametrize("mux", MODES)
def test_a_client_that_leaves_mid_value_under_a_rule_runs_nothing(redis_srv, make_proxy, mux):
    """Inside the proxy's MULTI too: the connection closes with the client's,
    nothing ran, the key is as it was."""
    p = make_proxy(redis_srv, {"multiplex": mux}, sections=RULE_SECTIONS)
    with Conn(redis_srv.port) as r:
        assert r.cmd("SET", "t:cut", "before", "EX", "100") == b"OK"
    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(enc("PING"))
    assert s.recv(100) == b"+PONG\r\n"
    s.sendall(set_head(b"t:cut", BIG)[0] + b"x" * (BIG // 2))
    conn = wait_qbuf(redis_srv.port, BIG // 4)
    s.close()
    harness.wait_for(lambda: conn["id"] not in proxy_conns(redis_srv.port), 10,
                     "the backend connection of the client that left to close")
    with Conn(redis_srv.port) as r:
        assert r.cmd("GET", "t:cut") == b"before"
        assert 0 < r.cmd("TTL", "t:cut") <= 100


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
@pytest.mark.parametrize("key", [b"bad", b"t:bad"])
def test_a_protocol_error_after_a_streamed_value(redis_srv, make_proxy, mux, key):
    """A bad header after the large argument, once the start went on (as
    sent, or inside the proxy's MULTI for a key under a rule): the client gets
    what Redis gives for the same bytes (Redis 7.0 to 8.0 and Valkey: the
    protocol error, then the connection closes; Redis 8.6 drops an error
    found after a partial read and answers nothing, redis#15795); Redis ran
    nothing."""
    p = make_proxy(redis_srv, {"multiplex": mux}, sections=RULES)
    value = b"w" * (256 * 1024)
    head = b"*4\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value))
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
        assert r.cmd("EXISTS", key) == 0
