"""
Seed 000 end to end: the GETSET leak, and ttlguard making it impossible
without touching the application.

The application, as the write-up describes it:
  increment  a Lua script: INCRBY + EXPIRE in one call (here EXPIRE 2 s
             instead of 900 s, so that the test can watch the key expire)
  collect    GETSET key 0 (or its replacement SET key 0 GET)
  the leak   the session dies right after a collect: no more increments, so
             no EXPIRE puts the TTL back, and the key lives forever at 0.

Straight to Redis the leak reproduces (the control). Through ttlguard with
[ttl "session:"]:
  rewrite  the collect keeps the key's remaining TTL (KEEPTTL semantics, not
           the rule's 900 s) and the key expires on time;
  reject   the collect gets the -TTLGUARD error and the counter is untouched;
  log      the collect runs exactly as in Redis (the key loses its TTL) and
           the violation is recorded.
"""

import time

import pytest

from harness import Conn, enc
import rules_cases as rc

INCR_LUA = ("local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
            "redis.call('EXPIRE', KEYS[1], ARGV[2]) return n")
COLLECT_LUA = ("local prev = redis.call('GET', KEYS[1]) if not prev then return false end "
               "redis.call('SET', KEYS[1], '0', 'KEEPTTL') return prev")
SESSION_TTL = 2          # the increment's EXPIRE, seconds (900 in production)
RULE_TTL = 900

COLLECTS = {
    "getset": ("GETSET", "{key}", "0"),
    "set-get": ("SET", "{key}", "0", "GET"),
}


def sections(action):
    return '[ttl "session:"]\nttl = %d\naction = %s\n' % (RULE_TTL, action)


def counter(sid):
    return "session:%s:billableSecondsPending" % sid


def increment(c, key, n):
    return c.cmd("EVAL", INCR_LUA, 1, key, n, SESSION_TTL)


def collect(c, name, key):
    return c.cmd(*[key if a == "{key}" else a for a in COLLECTS[name]])


def collect_raw(c, name, key):
    c.send(enc(*[key if a == "{key}" else a for a in COLLECTS[name]]))
    return c.reply_raw()[1]


def start(make_proxy, redis_srv, tmp_path, action):
    events = str(tmp_path / "events.jsonl")
    return make_proxy(redis_srv, {"events": events}, sections=sections(action)), events


def test_control_the_leak_reproduces_straight_to_redis(redis_srv):
    """Without ttlguard: a collect followed by the session's death leaves a
    persistent 0. (If this stopped failing the way the write-up says, the
    other tests here would prove nothing.)"""
    with Conn(redis_srv.port) as c:
        for name in COLLECTS:
            key = counter("control-" + name)
            assert increment(c, key, 5) == 5
            assert increment(c, key, 7) == 12
            assert collect(c, name, key) == b"12"
            assert c.cmd("PTTL", key) == -1
        # SET ... KEEPTTL on a missing key creates it without a TTL.
        key = counter("control-keepttl")
        assert c.cmd("SET", key, "0", "KEEPTTL") == b"OK"
        assert c.cmd("PTTL", key) == -1


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_rewrite_collect_keeps_remaining_ttl_and_key_expires(redis_srv, make_proxy, tmp_path,
                                                             proto):
    proxy, _ = start(make_proxy, redis_srv, tmp_path, "rewrite")
    keys = {name: counter("rw-%s-%d" % (name, proto)) for name in COLLECTS}
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        if proto == 3:
            c.cmd("HELLO", "3")
        for name, key in keys.items():
            assert increment(c, key, 5) == 5
            assert increment(c, key, 7) == 12
        time.sleep(0.5)     # some of the TTL is gone: the collect must not reset it
        for name, key in keys.items():
            raw = collect_raw(c, name, key)
            assert raw == b"$2\r\n12\r\n", (name, raw)
            assert direct.cmd("GET", key) == b"0"
            pttl = direct.cmd("PTTL", key)
            assert 0 < pttl <= SESSION_TTL * 1000 - 400, \
                "%s: after the collect PTTL is %s; expected the remaining TTL (KEEPTTL), " \
                "not none and not the rule's %d s" % (name, pttl, RULE_TTL)
        # The session dies right after the collect: no more increments.
        deadline = time.monotonic() + SESSION_TTL + 2
        while time.monotonic() < deadline:
            if direct.cmd("EXISTS", *keys.values()) == 0:
                break
            time.sleep(0.05)
        assert direct.cmd("EXISTS", *keys.values()) == 0, "the session counter leaked"


def test_rewrite_live_session_then_collect_then_death(redis_srv, make_proxy, tmp_path):
    """A live session: collect, increment (the script puts its own TTL back),
    collect again, then death. The key still expires."""
    proxy, _ = start(make_proxy, redis_srv, tmp_path, "rewrite")
    key = counter("live")
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert increment(c, key, 3) == 3
        assert collect(c, "getset", key) == b"3"
        assert increment(c, key, 4) == 4
        assert 0 < direct.cmd("PTTL", key) <= SESSION_TTL * 1000
        assert collect(c, "set-get", key) == b"4"
        assert 0 < direct.cmd("PTTL", key) <= SESSION_TTL * 1000
        deadline = time.monotonic() + SESSION_TTL + 2
        while direct.cmd("EXISTS", key) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert direct.cmd("EXISTS", key) == 0


def test_rewrite_keepttl_on_missing_key_gets_rule_ttl(redis_srv, make_proxy, tmp_path):
    """SET ... KEEPTTL on a missing key would create it without a TTL (the
    write-up's warning): through ttlguard it gets the rule's ttl."""
    proxy, _ = start(make_proxy, redis_srv, tmp_path, "rewrite")
    key = counter("keepttl-missing")
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("SET", key, "0", "KEEPTTL") == b"OK"
        assert RULE_TTL * 1000 - 5000 < direct.cmd("PTTL", key) <= RULE_TTL * 1000
        # On an existing key KEEPTTL keeps the TTL it has.
        key2 = counter("keepttl-existing")
        assert increment(c, key2, 1) == 1
        assert c.cmd("SET", key2, "0", "KEEPTTL") == b"OK"
        assert 0 < direct.cmd("PTTL", key2) <= SESSION_TTL * 1000


def test_rewrite_replacement_collect_script(redis_srv, make_proxy, tmp_path):
    """The write-up's fix, through ttlguard: on a missing key it returns nil
    and writes nothing; on a live key it keeps the TTL."""
    proxy, _ = start(make_proxy, redis_srv, tmp_path, "rewrite")
    key = counter("fixed")
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        assert c.cmd("EVAL", COLLECT_LUA, 1, key) is None
        assert direct.cmd("EXISTS", key) == 0
        assert increment(c, key, 9) == 9
        assert c.cmd("EVAL", COLLECT_LUA, 1, key) == b"9"
        assert 0 < direct.cmd("PTTL", key) <= SESSION_TTL * 1000


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_reject_collect_is_refused_and_counter_untouched(redis_srv, make_proxy, tmp_path, proto):
    proxy, _ = start(make_proxy, redis_srv, tmp_path, "reject")
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        if proto == 3:
            c.cmd("HELLO", "3")
        for name, cmd in (("getset", b"GETSET"), ("set-get", b"SET")):
            key = counter("rj-" + name)
            # The increment script sets its own TTL: it passes.
            assert increment(c, key, 5) == 5
            pttl = direct.cmd("PTTL", key)
            raw = collect_raw(c, name, key)
            want = b"-TTLGUARD %s would drop the TTL of '%s' (rule ttl \"session:\"): " % (
                cmd, key.encode())
            assert raw.startswith(want) and raw.endswith(b"\r\n") and len(raw) > len(want) + 2, \
                "expected %r<how to fix>, got %r" % (want, raw)
            assert b"KEEPTTL" in raw, "the hint should say how to keep the TTL: %r" % raw
            assert direct.cmd("GET", key) == b"5", "the counter was touched"
            assert 0 < direct.cmd("PTTL", key) <= pttl
            # The connection goes on.
            assert increment(c, key, 1) == 6

        # SET ... KEEPTTL on a missing key is refused too, and creates nothing.
        key = counter("rj-keepttl")
        c.send(enc("SET", key, "0", "KEEPTTL"))
        raw = c.reply_raw()[1]
        want = b"-TTLGUARD SET would create without a TTL '%s' (rule ttl \"session:\"): " % (
            key.encode())
        assert raw.startswith(want), raw
        assert direct.cmd("EXISTS", key) == 0


def test_log_collect_forwarded_and_recorded(redis_srv, make_proxy, tmp_path):
    proxy, events = start(make_proxy, redis_srv, tmp_path, "log")
    keys = {}
    with Conn(proxy.port) as c, Conn(redis_srv.port) as direct:
        for name in COLLECTS:
            key = keys[name] = counter("lg-" + name)
            assert increment(c, key, 5) == 5
            assert collect(c, name, key) == b"5"
            # Exactly as Redis would: the TTL is gone.
            assert direct.cmd("PTTL", key) == -1
            assert direct.cmd("GET", key) == b"0"
        key = keys["keepttl"] = counter("lg-keepttl")
        assert c.cmd("SET", key, "0", "KEEPTTL") == b"OK"
        assert direct.cmd("PTTL", key) == -1
    rule = 'ttl "session:"'
    rc.wait_recorded_all(proxy, events, [
        dict(command="GETSET", key=keys["getset"], effect="drops-ttl", action="logged",
             rule=rule),
        dict(command="SET", key=keys["set-get"], effect="drops-ttl", action="logged", rule=rule),
        dict(command="SET", key=keys["keepttl"], effect="creates-without-ttl",
             action="logged", rule=rule),
    ])


def test_reject_error_reaches_redis_py_as_response_error(redis_srv, make_proxy, tmp_path):
    """The -TTLGUARD line is an error reply: redis-py raises it as such,
    with the key and the rule in the message."""
    import redis
    proxy, _ = start(make_proxy, redis_srv, tmp_path, "reject")
    cli = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=10)
    key = counter("py")
    cli.eval(INCR_LUA, 1, key, 5, SESSION_TTL)
    with pytest.raises(redis.ResponseError) as ei:
        cli.getset(key, 0)
    assert "TTLGUARD GETSET would drop the TTL of '%s'" % key in str(ei.value)
    assert cli.get(key) == b"5"
    assert cli.ping() is True
