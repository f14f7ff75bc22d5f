"""
The TTL rules beyond one command at a time:

  - robustness: SCRIPT FLUSH between rewritten commands, a backend restart;
  - refresh = bound and max_ttl (rewrite caps, reject refuses);
  - longest prefix wins: durable inside ttl and ttl inside durable;
  - [default] reject / rewrite with durable carve-outs (seed 002's policy);
  - keys under no rule pass byte for byte;
  - CLIENT REPLY OFF / SKIP with rejected and rewritten commands;
  - Redis's own errors through a rewrite are Redis's bytes;
  - binary prefixes, inline commands, a command too long to wrap.
"""

import time

import pytest

from harness import Conn, RespError, enc, session_bytes, wait_for
import rules_cases as rc

DURABLE = "owner = payments\nreason = ledger of record\nrebuild = replay from Postgres\n"


def durable(prefix):
    return '[durable "%s"]\n%s\n' % (prefix, DURABLE)


def ttl_rule(prefix, action, ttl=100, **extra):
    out = '[ttl "%s"]\nttl = %d\naction = %s\n' % (prefix, ttl, action)
    for k, v in extra.items():
        out += "%s = %s\n" % (k, v)
    return out + "\n"


def raw(c, *args):
    c.send(enc(*args))
    return c.reply_raw()[1]


# --------------------------------------------------------------------------
# Robustness
# --------------------------------------------------------------------------

def test_script_flush_between_rewritten_commands(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("SET", "rw:a", "1") == b"OK"
        assert c.cmd("SCRIPT", "FLUSH") == b"OK"
        assert c.cmd("INCR", "rw:a") == 2
        assert direct.cmd("SCRIPT", "FLUSH") == b"OK"
        assert c.cmd("GETSET", "rw:a", "7") == b"2"
        # In one pipeline, flushes between the rewrites, on both sides.
        cmds = [("INCR", "rw:a"), ("SCRIPT", "FLUSH"), ("INCR", "rw:a"),
                ("SCRIPT", "FLUSH", "SYNC"),
                ("LPUSH", "rw:l", "x"), ("SCRIPT", "FLUSH", "ASYNC"), ("SET", "rw:a", "0", "GET")]
        c.send(b"".join(enc(*x) for x in cmds))
        got = c.replies(len(cmds))
        assert got == [8, b"OK", 9, b"OK", 1, b"OK", b"9"], got
        for k in ("rw:a", "rw:l"):
            assert direct.cmd("PTTL", k) > 0


def test_backend_restart_then_rewrites_still_work(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    with Conn(proxy.port) as c:
        assert c.cmd("SET", "rw:before", "1") == b"OK"
    redis_srv.restart()         # SIGKILL and start again: empty, no scripts cached

    def works():
        try:
            with Conn(proxy.port, timeout=2) as c:
                return c.cmd("SET", "rw:after", "1") == b"OK"
        except (OSError, EOFError, TimeoutError):
            return False
    wait_for(works, 10, "a rewritten SET through ttlguard after the backend restart")
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("INCR", "rw:after") == 2
        assert c.cmd("GETSET", "rw:after", "0") == b"2"
        assert direct.cmd("PTTL", "rw:after") > 0
        assert direct.cmd("EXISTS", "rw:before") == 0


# --------------------------------------------------------------------------
# refresh = bound
# --------------------------------------------------------------------------

@pytest.mark.parametrize("action", ["rewrite", "reject"])
def test_refresh_bound(redis_srv, make_proxy, action):
    """An EXPIRE-family command on a key that has a TTL does not extend it;
    on a key without one it sets it. LT (can only shorten) passes."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("b:", action, refresh="bound"))
    now = int(time.time())
    extend = [("EXPIRE", "b:k", 1000), ("PEXPIRE", "b:k", 1000000),
              ("EXPIREAT", "b:k", now + 1000), ("PEXPIREAT", "b:k", (now + 1000) * 1000),
              ("EXPIRE", "b:k", 1000, "GT"), ("EXPIRE", "b:k", 1000, "XX"),
              ("PEXPIRE", "b:k", 1000000, "GT")]
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        direct.cmd("SET", "b:k", "v", "EX", 50)
        for cmd in extend:
            r = c.cmd(*cmd)
            assert not isinstance(r, RespError), (cmd, r)
            pttl = direct.cmd("PTTL", "b:k")
            assert 45_000 < pttl <= 50_000, "%r extended the bound: PTTL %s" % (cmd, pttl)
        # Shortening is no refresh.
        assert c.cmd("EXPIRE", "b:k", 20, "LT") == 1
        assert 15_000 < direct.cmd("PTTL", "b:k") <= 20_000
        # A key without a TTL gets the one asked for.
        for i, cmd in enumerate([("EXPIRE", "b:n%d", 1000), ("PEXPIRE", "b:n%d", 1000000),
                                 ("EXPIREAT", "b:n%d", now + 1000)]):
            key = cmd[1] % i
            direct.cmd("SET", key, "v")
            assert c.cmd(cmd[0], key, cmd[2]) == 1
            assert 990_000 < direct.cmd("PTTL", key) <= 1_000_000, cmd
        # On a missing key: Redis's own answer.
        assert c.cmd("EXPIRE", "b:missing", 10) == 0


def test_refresh_allow_extends(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("s:", "rewrite"))
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        direct.cmd("SET", "s:k", "v", "EX", 50)
        assert c.cmd("EXPIRE", "s:k", 1000) == 1
        assert direct.cmd("PTTL", "s:k") > 900_000


# --------------------------------------------------------------------------
# max_ttl
# --------------------------------------------------------------------------

def max_ttl_cmds(key):
    """Commands setting a TTL of 1000 s (above the cap of 100 s): (command,
    needs the key to exist)."""
    now = time.time()
    return [
        (("SET", key, "v", "EX", 1000), False),
        (("SET", key, "v", "PX", 1000000), False),
        (("SET", key, "v", "EXAT", int(now) + 1000), False),
        (("SET", key, "v", "PXAT", int(now * 1000) + 1000000), False),
        (("SET", key, "v", "EX", 1000, "GET"), False),
        (("SETEX", key, 1000, "v"), False),
        (("PSETEX", key, 1000000, "v"), False),
        (("EXPIRE", key, 1000), True),
        (("PEXPIRE", key, 1000000), True),
        (("EXPIREAT", key, int(now) + 1000), True),
        (("PEXPIREAT", key, int(now * 1000) + 1000000), True),
        (("GETEX", key, "EX", 1000), True),
        (("GETEX", key, "PXAT", int(now * 1000) + 1000000), True),
    ]


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_max_ttl_caps_in_rewrite_mode(redis_srv, make_proxy, proto):
    proxy = make_proxy(redis_srv, sections=ttl_rule("cap:", "rewrite", ttl=50, max_ttl=100))
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        if proto == 3:
            c.cmd("HELLO", "3")
            direct.cmd("HELLO", "3")
        for cmd, exists in max_ttl_cmds("cap:k"):
            replies = []
            for conn in (direct, c):
                direct.cmd("DEL", "cap:k")
                if exists:
                    direct.cmd("SET", "cap:k", "old", "EX", 10)
                replies.append(raw(conn, *cmd))
            assert replies[1] == replies[0], "%r: reply %r, Redis %r" % (
                cmd, replies[1], replies[0])
            pttl = direct.cmd("PTTL", "cap:k")
            assert 95_000 < pttl <= 100_000, "%r: PTTL %s, expected capped to 100 s" % (cmd, pttl)
        # Below the cap: untouched.
        assert c.cmd("SET", "cap:k", "v", "EX", 60) == b"OK"
        assert 55_000 < direct.cmd("PTTL", "cap:k") <= 60_000
        assert c.cmd("EXPIRE", "cap:k", 100) == 1
        assert 95_000 < direct.cmd("PTTL", "cap:k") <= 100_000


def test_max_ttl_refused_in_reject_mode(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("capj:", "reject", ttl=50, max_ttl=100))
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        for cmd, exists in max_ttl_cmds("capj:k"):
            direct.cmd("DEL", "capj:k")
            if exists:
                direct.cmd("SET", "capj:k", "old", "EX", 10)
            before = (direct.cmd("DUMP", "capj:k"), direct.cmd("PTTL", "capj:k"))
            r = raw(c, *cmd)
            want = b"-TTLGUARD %s would set a TTL above max_ttl 100 s on 'capj:k' " \
                   b"(rule ttl \"capj:\"): " % cmd[0].encode()
            assert r.startswith(want) and r.endswith(b"\r\n"), "%r: %r" % (cmd, r)
            after = (direct.cmd("DUMP", "capj:k"), direct.cmd("PTTL", "capj:k"))
            assert after[0] == before[0] and abs(after[1] - before[1]) < 1000, cmd
        # At the cap: passes.
        assert c.cmd("SET", "capj:k", "v", "EX", 100) == b"OK"
        assert c.cmd("SETEX", "capj:k", 99, "v") == b"OK"


# --------------------------------------------------------------------------
# Longest prefix, default rule
# --------------------------------------------------------------------------

def test_longest_prefix_durable_inside_ttl_and_ttl_inside_durable(redis_srv, make_proxy):
    sections = (ttl_rule("app:", "rewrite") + durable("app:ledger:") +
                durable("d:") + ttl_rule("d:tmp:", "rewrite") +
                durable("e:") + ttl_rule("e:strict:", "reject"))
    proxy = make_proxy(redis_srv, sections=sections)
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        # Durable under a ttl prefix: untouched, byte for byte.
        for cmd in [("SET", "app:ledger:1", "v"), ("INCR", "app:ledger:c"),
                    ("GETSET", "app:ledger:1", "w"), ("PERSIST", "app:ledger:1"),
                    ("RPUSH", "app:ledger:l", "a"), ("SET", "app:ledger:2", "v", "GET")]:
            want = raw(direct, *cmd)
            direct.cmd("DEL", cmd[1])
            if cmd[0] in ("GETSET", "PERSIST"):
                direct.cmd("SET", cmd[1], "v")
            assert raw(c, *cmd) == want, cmd
            assert direct.cmd("PTTL", cmd[1]) == -1, cmd
        assert c.cmd("SET", "app:x", "v") == b"OK"
        assert direct.cmd("PTTL", "app:x") > 0
        # One command, keys under both: each judged on its own.
        assert c.cmd("MSET", "app:ledger:m", "a", "app:m", "b") == b"OK"
        assert direct.cmd("PTTL", "app:ledger:m") == -1
        assert direct.cmd("PTTL", "app:m") > 0
        # ttl inside durable.
        assert c.cmd("SET", "d:y", "v") == b"OK"
        assert direct.cmd("PTTL", "d:y") == -1
        assert c.cmd("SET", "d:tmp:z", "v") == b"OK"
        assert direct.cmd("PTTL", "d:tmp:z") > 0
        assert c.cmd("SET", "e:1", "v") == b"OK"
        r = raw(c, "SET", "e:strict:1", "v")
        assert r.startswith(b"-TTLGUARD SET would drop the TTL of 'e:strict:1' "
                            b"(rule ttl \"e:strict:\"): "), r
        assert direct.cmd("EXISTS", "e:strict:1") == 0


def test_default_reject_with_durable_carve_outs(redis_srv, make_proxy):
    """Seed 002's strict policy: every key needs a TTL unless registered as
    durable."""
    sections = ("[default]\naction = reject\n\n" + durable("billing:ledger:") +
                ttl_rule("session:", "rewrite", ttl=900))
    proxy = make_proxy(redis_srv, sections=sections)
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        r = raw(c, "SET", "anything", "v")
        assert r.startswith(b"-TTLGUARD SET would drop the TTL of 'anything' (rule default): "), r
        r = raw(c, "INCR", "cnt")
        assert r.startswith(b"-TTLGUARD INCR would create without a TTL 'cnt' (rule default): "), r
        r = raw(c, "HSET", "h", "f", "v")
        assert r.startswith(b"-TTLGUARD HSET would create without a TTL 'h' (rule default): "), r
        assert direct.cmd("EXISTS", "anything", "cnt", "h") == 0
        # With a TTL in the same call: passes.
        assert c.cmd("SET", "anything", "v", "EX", 10) == b"OK"
        assert 0 < direct.cmd("PTTL", "anything") <= 10_000
        # Reads and deletes pass.
        assert c.cmd("GET", "anything") == b"v"
        assert c.cmd("DEL", "anything") == 1
        # Durable carve-out.
        assert c.cmd("SET", "billing:ledger:1", "v") == b"OK"
        assert c.cmd("INCR", "billing:ledger:n") == 1
        assert direct.cmd("PTTL", "billing:ledger:1") == -1
        # The ttl rule still rewrites.
        assert c.cmd("SET", "session:1", "v") == b"OK"
        assert 0 < direct.cmd("PTTL", "session:1") <= 900_000
        # A command with a durable key and a default key: refused as a whole.
        r = raw(c, "MSET", "billing:ledger:2", "a", "other", "b")
        assert r.startswith(b"-TTLGUARD MSET would drop the TTL of 'other' (rule default): "), r
        assert direct.cmd("EXISTS", "billing:ledger:2", "other") == 0


def test_default_rewrite_gives_every_key_a_ttl(redis_srv, make_proxy):
    sections = "[default]\naction = rewrite\nttl = 60\n\n" + durable("billing:ledger:")
    proxy = make_proxy(redis_srv, sections=sections)
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("SET", "x", "v") == b"OK"
        assert c.cmd("SADD", "s", "m") == 1
        assert c.cmd("SET", "billing:ledger:1", "v") == b"OK"
        assert 55_000 < direct.cmd("PTTL", "x") <= 60_000
        assert 55_000 < direct.cmd("PTTL", "s") <= 60_000
        assert direct.cmd("PTTL", "billing:ledger:1") == -1


# --------------------------------------------------------------------------
# Keys under no rule
# --------------------------------------------------------------------------

UNRULED = [
    ("SET", "plain:s", "v"), ("GETSET", "plain:s", "0"), ("SET", "plain:s", "1", "GET"),
    ("INCR", "plain:s"), ("INCRBYFLOAT", "plain:s", "1.5"), ("APPEND", "plain:s", "x"),
    ("GETEX", "plain:s", "PERSIST"), ("PERSIST", "plain:s"), ("EXPIRE", "plain:s", 100),
    ("RPUSH", "plain:l", "a", "b", "c"), ("LMOVE", "plain:l", "plain:l2", "LEFT", "RIGHT"),
    ("HSET", "plain:h", "f", "1"), ("HINCRBYFLOAT", "plain:h", "f", "0.25"), ("HGETALL", "plain:h"),
    ("ZADD", "plain:z", "1", "a", "2", "b"), ("ZINCRBY", "plain:z", "1.5", "a"),
    ("ZADD", "plain:z", "INCR", "2", "b"), ("ZRANGE", "plain:z", 0, -1, "WITHSCORES"),
    ("ZUNIONSTORE", "plain:zu", 1, "plain:z"), ("SADD", "plain:set", "x"),
    ("SMEMBERS", "plain:set"), ("XADD", "plain:x", "1-1", "f", "v"),
    ("BITFIELD", "plain:b", "OVERFLOW", "FAIL", "INCRBY", "u2", 0, 5),
    ("PFADD", "plain:hll", "a"), ("PFCOUNT", "plain:hll"), ("COPY", "plain:s", "plain:c"),
    ("RENAME", "plain:c", "plain:d"), ("SORT", "plain:l2", "STORE", "plain:sorted"),
    ("EVAL", rc.SCRIPT_SET, 1, "plain:e", "v"), ("TTL", "plain:s"), ("DEL", "plain:d"),
    ("INCRBY", "plain:big", "9007199254740993"),
]


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_keys_under_no_rule_pass_byte_for_byte(redis_srv, make_proxy, proto):
    sections = ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject") + durable("du:")
    proxy = make_proxy(redis_srv, sections=sections)
    hello = [(enc("HELLO", "3"), 1)] if proto == 3 else []
    chunks = [(enc(*c), 1) for c in UNRULED]
    out = []
    for port in (redis_srv.port, proxy.port):
        with Conn(redis_srv.port) as ctl:
            ctl.cmd("FLUSHALL")
        got = session_bytes(port, hello + chunks)[len(hello):]
        with Conn(redis_srv.port) as ctl:
            ttls = [ctl.cmd("PTTL", k) for k in ("plain:s", "plain:l2", "plain:h", "plain:zu",
                                                 "plain:e", "plain:big")]
        out.append((got, ttls))
    (d, d_ttl), (p, p_ttl) = out
    for c, a, b in zip(UNRULED, d, p):
        assert b == a, "%r: through ttlguard %r, Redis %r" % (c, b, a)
    assert [t > 0 for t in p_ttl] == [t > 0 for t in d_ttl]
    assert d_ttl[1:] == [-1] * 5


# --------------------------------------------------------------------------
# CLIENT REPLY
# --------------------------------------------------------------------------

def client_reply_session(redis_srv, proxy, script):
    """script(c, rejected) on a raw connection straight to Redis (where the
    command ttlguard rejects is replaced by PING, also silent) and through
    ttlguard. Returns [(script's result, PTTL rw:a, PTTL rw:b)] for both."""
    out = []
    for port, rejected in ((redis_srv.port, ("PING",)), (proxy.port, ("GETSET", "rj:k", "0"))):
        with Conn(redis_srv.port) as ctl:
            ctl.cmd("FLUSHALL")
        with Conn(port, timeout=3) as c:
            got = script(c, rejected)
        with Conn(redis_srv.port) as ctl:
            out.append((got, ctl.cmd("PTTL", "rw:a"), ctl.cmd("PTTL", "rw:b")))
    return out


def test_client_reply_off_with_rejected_and_rewritten_commands(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject"))

    def script(c, rejected):
        c.send(enc("CLIENT", "REPLY", "OFF") + enc(*rejected) + enc("SET", "rw:a", "1") +
               enc("PERSIST", "rw:a") + enc("CLIENT", "REPLY", "ON") + enc("INCR", "rw:a"))
        got = c.reply_raw()[1] + c.reply_raw()[1]
        c.assert_silent(0.2)
        return got

    d, p = client_reply_session(redis_srv, proxy, script)
    assert p[0] == d[0] == b"+OK\r\n:2\r\n", (p, d)
    assert d[1] == -1               # PERSIST ran straight to Redis; ttlguard refuses it
    assert p[1] > 0, "a rewritten command under CLIENT REPLY OFF lost the TTL"


def test_client_reply_skip_with_rejected_command(redis_srv, make_proxy):
    """SKIP is consumed by the rejected command, as Redis would consume it:
    the next command answers, and replies stay paired with their requests."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject"))

    def script(c, rejected):
        c.send(enc("CLIENT", "REPLY", "SKIP") + enc(*rejected) + enc("PING", "after"))
        got = [c.reply_raw()[1]]
        c.send(enc("PING", "next") + enc("INCR", "rw:a"))
        got += [c.reply_raw()[1], c.reply_raw()[1]]
        c.assert_silent(0.2)
        return got

    d, p = client_reply_session(redis_srv, proxy, script)
    assert d[0] == [b"$5\r\nafter\r\n", b"$4\r\nnext\r\n", b":1\r\n"]
    assert p[0] == d[0], "through ttlguard %r, Redis %r" % (p[0], d[0])


def test_client_reply_skip_with_rewritten_command(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject"))

    def script(c, rejected):
        c.send(enc("CLIENT", "REPLY", "SKIP") + enc("SET", "rw:b", "1") + enc("GET", "rw:b"))
        got = c.reply_raw()[1]
        c.assert_silent(0.2)
        return got

    d, p = client_reply_session(redis_srv, proxy, script)
    assert p[0] == d[0] == b"$1\r\n1\r\n"
    assert d[2] == -1 and p[2] > 0, "a rewritten command under CLIENT REPLY SKIP lost the TTL"


# --------------------------------------------------------------------------
# Redis's errors through a rewrite
# --------------------------------------------------------------------------

ERRORS = [
    [("SET", "{k}", "abc"), ("INCR", "{k}")],
    [("SET", "{k}", "abc"), ("INCRBYFLOAT", "{k}", "1")],
    [("SET", "{k}", "abc"), ("RPUSH", "{k}", "a")],
    [("SET", "{k}", "abc"), ("HSET", "{k}", "f", "v")],
    [("SETBIT", "{k}", 1, 2)],
    [("SETRANGE", "{k}", -1, "x")],
    [("ZADD", "{k}", "nan", "m")],
    [("ZINCRBY", "{k}", "abc", "m")],
    [("XADD", "{k}", "0-0", "f", "v")],
    [("RESTORE", "{k}", 0, "garbage")],
    [("SET", "{k}", "v", "EX", 0)],
    [("SET", "{k}", "v", "NX", "XX")],
    [("GETSET", "{k}")],
    [("LPUSH", "{k}", "a"), ("SORT", "{k}", "STORE", "{k}2")],
    [("SET", "{k}", "1"), ("LMOVE", "{k}", "{k}2", "LEFT", "RIGHT")],
    [("SET", "{k}", "1"), ("SUNIONSTORE", "{k}2", "{k}")],
    [("SET", "{k}", "1"), ("ZADD", "{k}", "1", "m")],
    [("SET", "{k}", "1"), ("HINCRBY", "{k}", "f", 1)],
    [("SET", "{k}2", "9223372036854775807"), ("INCR", "{k}2")],
]


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_redis_errors_through_rewrite_are_identical(redis_srv, make_proxy, proto):
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    for seq in ERRORS:
        out = []
        for port in (redis_srv.port, proxy.port):
            with Conn(redis_srv.port) as ctl:
                ctl.cmd("FLUSHALL")
            with Conn(port) as c:
                if proto == 3:
                    c.cmd("HELLO", "3")
                got = []
                for cmd in seq:
                    argv = [a.replace("{k}", "rw:k") if isinstance(a, str) else a for a in cmd]
                    got.append(raw(c, *argv))
            out.append(got)
        assert out[1] == out[0], "%r: through ttlguard %r, Redis %r" % (seq, out[1], out[0])
        assert out[0][-1].startswith((b"-", b"!")), (seq, out[0])


# --------------------------------------------------------------------------
# Odd shapes
# --------------------------------------------------------------------------

def test_binary_prefix(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections='[ttl "bin\\x00ary:"]\nttl = 100\naction = rewrite\n')
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("SET", b"bin\x00ary:k", "v") == b"OK"
        assert c.cmd("SET", b"bin", "v") == b"OK"
        assert c.cmd("SET", b"bin\x00aryX", "v") == b"OK"
        assert 0 < direct.cmd("PTTL", b"bin\x00ary:k") <= 100_000
        assert direct.cmd("PTTL", b"bin") == -1
        assert direct.cmd("PTTL", b"bin\x00aryX") == -1


def test_inline_commands_are_judged(redis_srv, make_proxy):
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject"))
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        c.send(b"SET rw:inl v\r\n")
        assert c.reply_raw()[1] == b"+OK\r\n"
        assert direct.cmd("PTTL", "rw:inl") > 0
        c.send(b"INCR rw:n\r\nGETSET rj:x 0\r\nPING\r\n")
        got = [c.reply_raw()[1] for _ in range(3)]
        assert got[0] == b":1\r\n" and got[2] == b"+PONG\r\n", got
        assert got[1].startswith(b"-TTLGUARD GETSET would drop the TTL of 'rj:x'"), got
        assert direct.cmd("PTTL", "rw:n") > 0


def test_command_too_long_to_wrap_still_gets_ttls(redis_srv, make_proxy):
    """An MSET with more arguments than a script can unpack runs as sent,
    followed by the fix-up: every key ends with a TTL, the reply is +OK."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    args = ["MSET"]
    for i in range(4000):
        args += ["rw:m:%d" % i, "v%d" % i]
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert raw(c, *args) == b"+OK\r\n"
        assert c.cmd("PING") == b"PONG"
        missing = [i for i in range(0, 4000, 97) if direct.cmd("PTTL", "rw:m:%d" % i) <= 0]
        assert not missing and direct.cmd("PTTL", "rw:m:3999") > 0, missing
        assert direct.cmd("GET", "rw:m:3999") == b"v3999"


def test_rewrite_in_another_db_and_big_value(redis_srv, make_proxy):
    """The rewrite runs in the client's SELECTed database; a large value
    passes through the rewrite intact."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    big = bytes(range(256)) * 8192          # 2 MiB, every byte value
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("SELECT", 3) == b"OK"
        assert c.cmd("SET", "rw:db3", "v") == b"OK"
        assert c.cmd("SET", "rw:big", big) == b"OK"
        assert c.cmd("GET", "rw:big") == big
        assert direct.cmd("EXISTS", "rw:db3") == 0
        assert direct.cmd("SELECT", 3) == b"OK"
        assert direct.cmd("PTTL", "rw:db3") > 0
        assert direct.cmd("PTTL", "rw:big") > 0
        assert direct.cmd("STRLEN", "rw:big") == len(big)


REFUSED = [("SET", "rw:k", "v"), ("INCR", "rw:pre"), ("GETSET", "rw:pre", "0"),
           ("LPUSH", "rw:l", "x"), ("ZINCRBY", "rw:z", "1", "m"),
           ("EVAL", rc.SCRIPT_SET, 1, "rw:e", "v"), ("SET", "plain", "v"), ("PING",)]


def refused_replies(port):
    with Conn(port) as c:
        return [raw(c, *cmd) for cmd in REFUSED]


def test_backend_refusing_writes_oom_same_errors(redis_srv, make_proxy):
    """maxmemory reached (noeviction): a rewritten command gets Redis's own
    -OOM line, not a script's error."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    with Conn(redis_srv.port) as ctl:
        ctl.cmd("SET", "rw:pre", "1")
        assert ctl.cmd("CONFIG", "SET", "maxmemory", "1") == b"OK"
        try:
            d = refused_replies(redis_srv.port)
            p = refused_replies(proxy.port)
        finally:
            ctl.cmd("CONFIG", "SET", "maxmemory", "0")
    assert d[0].startswith(b"-OOM ")
    assert p == d


def test_backend_refusing_writes_readonly_replica_same_errors(redis_srv, make_redis, make_proxy):
    replica = make_redis(["--replicaof", "127.0.0.1", str(redis_srv.port)])
    proxy = make_proxy(replica, sections=ttl_rule("rw:", "rewrite"))
    d = refused_replies(replica.port)
    p = refused_replies(proxy.port)
    assert d[0].startswith(b"-READONLY ")
    assert p == d


@pytest.mark.redis_args("--notify-keyspace-events", "KA")
@pytest.mark.parametrize("tracking", [False, True], ids=["psubscribe", "tracking"])
def test_resp3_pushes_never_land_inside_the_proxys_exec(redis_srv, make_proxy, tracking):
    """Redis 7.0 writes a push to a RESP3 client as it happens, inside an EXEC
    reply too: a subscriber (here to its own keyspace notifications) or a
    tracking client writing under a rewrite rule must still get each
    command's own reply, so the proxy makes no MULTI of its own for it."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))

    def replies(port):
        with Conn(redis_srv.port) as d:
            d.cmd("FLUSHALL")
        with Conn(port) as c:
            assert not isinstance(c.cmd("HELLO", "3"), RespError)
            if tracking:
                assert c.cmd("CLIENT", "TRACKING", "ON") == b"OK"
                c.cmd("GET", "rw:c")                        # tracked: INCR invalidates it
            else:
                c.send(enc("PSUBSCRIBE", "__keyspace*"))
                c.reply_raw()
            c.send(enc("INCR", "rw:c") + enc("INCR", "rw:c") + enc("HSET", "rw:h", "f", "v") +
                   enc("PING"))
            out = []
            while not out or out[-1] != b"+PONG\r\n":
                raw_reply = c.reply_raw()[1]
                if not raw_reply.startswith(b">"):
                    out.append(raw_reply)
            return out
    direct = replies(redis_srv.port)
    assert replies(proxy.port) == direct == [b":1\r\n", b":2\r\n", b":1\r\n", b"+PONG\r\n"]
    with Conn(redis_srv.port) as d:
        assert d.cmd("PTTL", "rw:c") > 0 and d.cmd("PTTL", "rw:h") > 0


def test_reset_then_hello_3_pipelined_keeps_resp3(redis_srv, make_proxy):
    """RESET; HELLO 3 in one pipeline: RESET's reply, which arrives after HELLO
    was sent, must not take the mirrored protocol back to RESP2 (difffuzz
    case 005)."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", "rewrite"))
    with Conn(proxy.port) as c:
        c.send(enc("RESET") + enc("HELLO", "3") + enc("SET", "rw:k", "abc"))
        assert c.reply_raw()[1] == b"+RESET\r\n"
        assert c.reply_raw()[1].startswith(b"%")
        assert c.reply_raw()[1] == b"+OK\r\n"
        c.send(enc("PSUBSCRIBE", "*") + enc("PFMERGE", "rw:k", "x"))
        assert c.reply_raw()[1].startswith(b">3\r\n$10\r\npsubscribe\r\n")
        assert c.reply_raw()[1].startswith(b"-WRONGTYPE")


@pytest.mark.parametrize("action", ["rewrite", "reject"])
def test_resp2_subscriber_write_is_refused_by_redis(redis_srv, make_proxy, action):
    """A RESP2 subscriber's SET under a rule is refused by Redis itself (only
    (P|S)(UN)SUBSCRIBE, PING, QUIT and RESET run in that context): the client
    gets Redis's error naming SET, not the rewrite's command or the rule's
    refusal, and nothing is written. Pipelined after UNSUBSCRIBE, the same
    SET runs and is judged."""
    proxy = make_proxy(redis_srv, sections=ttl_rule("rw:", action))

    def replies(port):
        with Conn(port) as c:
            c.cmd("DEL", "rw:s")
            c.send(enc("SUBSCRIBE", "a") + enc("SET", "rw:s", "v") + enc("GETSET", "rw:s", "w") +
                   enc("UNSUBSCRIBE", "a") + enc("SET", "rw:s", "v") + enc("PING"))
            return [c.reply_raw()[1] for _ in range(6)]
    direct = replies(redis_srv.port)
    with Conn(redis_srv.port) as d:
        assert d.cmd("TTL", "rw:s") == -1
    got = replies(proxy.port)
    assert got[:4] == direct[:4]
    assert got[1].startswith(b"-ERR Can't execute 'set'"), got[1]
    assert got[2].startswith(b"-ERR Can't execute 'getset'"), got[2]
    with Conn(redis_srv.port) as d:
        if action == "rewrite":
            assert got[4:] == direct[4:]
            assert d.cmd("TTL", "rw:s") > 0
        else:
            assert got[4].startswith(b"-TTLGUARD"), got[4]
            assert d.cmd("EXISTS", "rw:s") == 0
