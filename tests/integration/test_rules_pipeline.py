"""
Rules in pipelines and transactions.

  - A pipeline sent in one write with rejected commands in the middle: each
    rejection is at its own position, every other reply is Redis's, byte for
    byte (Redis gets the same pipeline with each rejected command replaced by
    a command that fails without side effects).
  - MULTI with one rejected command: the command's reply is the -TTLGUARD
    error, EXEC answers EXECABORT exactly as Redis does for a command refused
    at queue time, and nothing of the transaction ran.
  - MULTI with rewritten commands: EXEC's reply equals Redis's and every key
    has its TTL.
  - A deep pipeline of 10,000 rewritten INCRs: ordered and correct.
"""

import threading

import pytest

from harness import Conn, RespError, enc
import rules_cases as rc

SECTIONS = rc.rule_sections([("rw:", "rewrite", None), ("rj:", "reject", None)])
# A command Redis refuses at the same position without touching anything.
PLACEHOLDER = ("TTLGUARD-REJECTED-HERE",)


@pytest.fixture
def tg(redis_srv, make_proxy):
    return make_proxy(redis_srv, sections=SECTIONS)


def run_pipeline(port, cmds, proto, flush_port):
    """FLUSHALL (straight), then cmds in one write on port; raw replies."""
    with Conn(flush_port) as ctl:
        ctl.cmd("FLUSHALL")
        ctl.cmd("SET", "rj:counter", "5", "EX", "1000")
    with Conn(port) as c:
        if proto == 3:
            assert not isinstance(c.cmd("HELLO", "3"), RespError)
        c.send(b"".join(enc(*cmd) for cmd in cmds))
        raws = [c.reply_raw()[1] for _ in cmds]
        assert c.cmd("PING") == b"PONG"
    return raws


def state(port, keys):
    with Conn(port) as c:
        return {k: (c.cmd("DUMP", k), c.cmd("PTTL", k)) for k in keys}


PIPELINE = [
    ("SET", "rw:a", "1"),
    ("INCR", "rw:a"),
    ("GETSET", "rj:counter", "0"),              # rejected
    ("LPUSH", "rw:list", "x", "y"),
    ("SET", "plain", "v"),
    ("ZINCRBY", "rw:z", "1.5", "m"),
    ("SET", "rj:new", "v"),                     # rejected (SET may drop a TTL)
    ("SET", "rj:new", "v", "EX", "100"),        # passes: sets its own TTL
    ("PERSIST", "rw:a"),                        # rejected in rewrite mode too
    ("GET", "rj:counter"),
    ("HSET", "rw:h", "f", "v"),
    ("INCRBY", "rw:missing-type", "notanumber"),  # Redis's own error, rewritten
    ("LRANGE", "rw:list", "0", "-1"),
    ("APPEND", "rj:counter", "x"),              # rejected, last
]
REJECTED = {2: (b"GETSET", b"drop the TTL of", b"rj:counter", b'ttl "rj:"'),
            6: (b"SET", b"drop the TTL of", b"rj:new", b'ttl "rj:"'),
            8: (b"PERSIST", b"remove the TTL of", b"rw:a", b'ttl "rw:"'),
            13: (b"APPEND", b"create without a TTL", b"rj:counter", b'ttl "rj:"')}


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("first", [False, True], ids=["middle", "first"])
def test_pipeline_rejections_at_their_positions(redis_srv, tg, proto, first):
    cmds = list(PIPELINE)
    rejected = dict(REJECTED)
    if first:
        # A rejection as the very first command, before anything was forwarded.
        cmds.insert(0, ("SETNX", "rj:first", "v"))
        rejected = {i + 1: v for i, v in rejected.items()}
        rejected[0] = (b"SETNX", b"create without a TTL", b"rj:first", b'ttl "rj:"')
    direct_cmds = [PLACEHOLDER if i in rejected else c for i, c in enumerate(cmds)]
    d = run_pipeline(redis_srv.port, direct_cmds, proto, redis_srv.port)
    keys = sorted({c[1] for c in cmds if len(c) > 1})
    d_state = state(redis_srv.port, keys)
    p = run_pipeline(tg.port, cmds, proto, redis_srv.port)
    p_state = state(redis_srv.port, keys)

    for i, cmd in enumerate(cmds):
        if i in rejected:
            name, verb, key, label = rejected[i]
            want = b"-TTLGUARD %s would %s '%s' (rule %s): " % (name, verb, key, label)
            assert d[i].startswith(b"-ERR unknown command")
            assert p[i].startswith(want) and p[i].endswith(b"\r\n"), \
                "reply %d (%s): expected %r..., got %r" % (i, cmd[0], want, p[i])
        else:
            assert p[i] == d[i], "reply %d (%s): through ttlguard %r, Redis %r" % (
                i, " ".join(cmd), p[i], d[i])
    for k in keys:
        assert p_state[k][0] == d_state[k][0], "data of %s differs" % k
        if k.startswith("rw:") and d_state[k][0] is not None:
            assert p_state[k][1] > 0, "%s without a TTL through ttlguard" % k
        elif k == "rj:counter":
            assert 0 < p_state[k][1] <= 1000_000
        else:
            assert rc.TOL_MS >= abs(p_state[k][1] - d_state[k][1]) or p_state[k][1] == d_state[k][1]


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_multi_with_rejected_command_aborts(redis_srv, tg, proto):
    """Inside MULTI a rejected command aborts the transaction the way Redis
    does for a command refused at queue time (here: a wrong arity)."""
    def session(port, bad):
        with Conn(redis_srv.port) as ctl:
            ctl.cmd("FLUSHALL")
            ctl.cmd("SET", "rj:counter", "5", "EX", "1000")
        with Conn(port) as c:
            if proto == 3:
                c.cmd("HELLO", "3")
            cmds = [("MULTI",), ("SET", "rw:a", "1"), ("INCR", "rw:b"), bad,
                    ("LPUSH", "rw:l", "x"), ("EXEC",), ("PING",),
                    ("EXISTS", "rw:a", "rw:b", "rw:l")]
            c.send(b"".join(enc(*x) for x in cmds))
            return [c.reply_raw()[1] for _ in cmds]

    d = session(redis_srv.port, ("GETSET", "rj:counter"))      # arity error at queue time
    p = session(tg.port, ("GETSET", "rj:counter", "0"))
    assert d[3].startswith(b"-ERR wrong number of arguments")
    want = b"-TTLGUARD GETSET would drop the TTL of 'rj:counter' (rule ttl \"rj:\"): "
    assert p[3].startswith(want), p[3]
    assert p[:3] == d[:3] == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n"]
    assert p[4] == d[4] == b"+QUEUED\r\n"
    assert p[5] == d[5] == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    assert p[6:] == d[6:] == [b"+PONG\r\n", b":0\r\n"]
    with Conn(redis_srv.port) as ctl:
        assert ctl.cmd("GET", "rj:counter") == b"5"


def test_multi_rejected_then_discard_and_new_transaction(redis_srv, tg):
    """After a rejection inside MULTI, DISCARD ends the transaction and the
    next MULTI/EXEC runs normally (the abort does not leak into it)."""
    with Conn(tg.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("SET", "rj:x", "1").startswith(b"TTLGUARD SET")
        assert c.cmd("DISCARD") == b"OK"
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("SET", "rw:x", "1") == b"QUEUED"
        assert c.cmd("SET", "rj:y", "2", "EX", "50") == b"QUEUED"
        assert c.cmd("EXEC") == [b"OK", b"OK"]
        assert direct.cmd("PTTL", "rw:x") > 0
        assert 0 < direct.cmd("PTTL", "rj:y") <= 50_000
        assert direct.cmd("EXISTS", "rj:x") == 0


MULTI_CMDS = [
    ("SET", "rw:a", "1"),
    ("INCR", "rw:a"),
    ("GETSET", "rw:a", "10"),
    ("LPUSH", "rw:l", "x", "y"),
    ("HSET", "rw:h", "f", "v"),
    ("ZINCRBY", "rw:z", "1.5", "m"),
    ("ZADD", "rw:z", "INCR", "2", "m"),
    ("SET", "rw:b", "v", "GET"),
    ("SET", "rw:old", "new", "GET"),
    ("BLMOVE", "rw:l", "rw:l2", "LEFT", "RIGHT", "0"),   # does not block inside MULTI
    ("EVAL", rc.SCRIPT_SET, "1", "rw:script", "v"),
    ("SADD", "rw:s", "m"),
    ("SUNIONSTORE", "rw:su", "rw:s"),
    ("INCR", "rw:h"),                                    # WRONGTYPE inside EXEC
    ("SET", "plain", "v"),
]


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_multi_with_rewritten_commands(redis_srv, tg, proto):
    keys = sorted({c[1] if c[0] != "EVAL" else c[3] for c in MULTI_CMDS} | {"rw:l2"})

    def session(port):
        with Conn(redis_srv.port) as ctl:
            ctl.cmd("FLUSHALL")
            ctl.cmd("SET", "rw:old", "o", "PX", "50000")
        with Conn(port) as c:
            if proto == 3:
                c.cmd("HELLO", "3")
            cmds = [("MULTI",)] + MULTI_CMDS + [("EXEC",)]
            c.send(b"".join(enc(*x) for x in cmds))
            raws = [c.reply_raw()[1] for _ in cmds]
            assert c.cmd("PING") == b"PONG"
        return raws, state(redis_srv.port, keys)

    d, d_state = session(redis_srv.port)
    p, p_state = session(tg.port)
    assert p[:-1] == d[:-1], "MULTI/QUEUED replies differ"
    assert p[-1] == d[-1], "EXEC through ttlguard:\n%r\nRedis:\n%r" % (p[-1], d[-1])
    for k in keys:
        assert p_state[k][0] == d_state[k][0], "data of %s differs" % k
        if not k.startswith("rw:") or d_state[k][0] is None:
            assert p_state[k][1] == d_state[k][1]
        elif k == "rw:old":
            assert 45_000 <= p_state[k][1] <= 50_000, "rw:old must keep its TTL: %s" % (
                p_state[k][1],)
        else:
            assert rc.RULE_TTL * 1000 - rc.TOL_MS < p_state[k][1] <= rc.RULE_TTL * 1000, \
                "%s has PTTL %s after EXEC" % (k, p_state[k][1])


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_deep_pipeline_of_rewritten_incrs(redis_srv, tg, proto):
    n = 10_000
    keys = ["rw:deep:%d" % (i % 7) for i in range(n)]
    payload = b"".join(enc("INCR", k) for k in keys)
    counts = {}
    expected = []
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
        expected.append(b":%d\r\n" % counts[k])
    with Conn(tg.port, timeout=60) as c, Conn(redis_srv.port) as direct:
        if proto == 3:
            c.cmd("HELLO", "3")
        # Write from a thread while this one reads, so that neither side's
        # socket buffers can stall the other.
        t = threading.Thread(target=c.send, args=(payload,))
        t.start()
        got = c.read_exact(sum(len(e) for e in expected), timeout=60)
        t.join()
        assert bytes(got) == b"".join(expected), "replies out of order or wrong"
        assert c.cmd("PING") == b"PONG"
        for k in set(keys):
            assert direct.cmd("GET", k) == b"%d" % counts[k]
            assert direct.cmd("PTTL", k) > 0


def test_deep_pipeline_rejections_interleaved_with_rewrites(redis_srv, tg):
    """5,000 rejected and 5,000 rewritten commands alternating in one stream:
    every local error sits between the right forwarded replies."""
    n = 5000
    payload = b"".join(enc("GETSET", "rj:deep", "0") + enc("INCR", "rw:deep") for _ in range(n))
    want_err = b"-TTLGUARD GETSET would drop the TTL of 'rj:deep' (rule ttl \"rj:\"): "
    with Conn(tg.port, timeout=60) as c, Conn(redis_srv.port) as direct:
        direct.cmd("SET", "rj:deep", "keep", "EX", 1000)
        t = threading.Thread(target=c.send, args=(payload,))
        t.start()
        for i in range(n):
            err = c.reply_raw(timeout=60)[1]
            assert err.startswith(want_err), "reply %d: %r" % (2 * i, err)
            got = c.reply_raw(timeout=60)[1]
            assert got == b":%d\r\n" % (i + 1), "reply %d: %r" % (2 * i + 1, got)
        t.join()
        assert direct.cmd("GET", "rj:deep") == b"keep"
        assert direct.cmd("PTTL", "rw:deep") > 0
