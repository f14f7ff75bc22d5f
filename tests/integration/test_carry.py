"""
Keys that leave for another database or server: MOVE, COPY ... DB n and
MIGRATE carry a key with the TTL it has (COPY: the source's). Only a key that
already has none (leaked, or older than its rule) arrives without one, and
only the server knows which, so ttlguard runs the command inside a script
that checks atomically:

  - rewrite: the key gets its rule's TTL where it lands (MOVE, COPY, in the
    other database), or before it leaves (MIGRATE; taken back when the
    migration fails, so a failed command changes nothing);
  - reject: the command is refused when the key has no TTL, with an error
    that names the rule and the fix, and the event is recorded then;
  - log: recorded.

Every reply is compared with Redis's own to the same command on the same
data, in RESP2 and RESP3.
"""

import pytest

from harness import Conn, RespError, enc
import rules_cases as rc

RULE_TTL = 900
DURABLE = "owner = payments\nreason = ledger\nrebuild = replay\n"
SECTIONS = ('[ttl "t:"]\nttl = %d\naction = rewrite\n\n'
            '[ttl "r:"]\nttl = %d\naction = reject\n\n'
            '[ttl "l:"]\nttl = %d\naction = log\n\n'
            '[durable "d:"]\n%s\n' % (RULE_TTL, RULE_TTL, RULE_TTL, DURABLE))

PROTOS = pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])


@pytest.fixture
def env(redis_srv, make_proxy, tmp_path):
    events = str(tmp_path / "events.jsonl")
    proxy = make_proxy(redis_srv, {"events": events}, sections=SECTIONS)
    proxy.events = events
    return redis_srv, proxy


def conn(port, proto):
    c = Conn(port)
    if proto == 3:
        assert not isinstance(c.cmd("HELLO", "3"), RespError)
    return c


def raw(c, *args):
    c.send(enc(*args))
    return c.reply_raw()[1]


def pttl(port, key, db=0):
    with Conn(port) as c:
        if db:
            c.cmd("SELECT", str(db))
        return c.cmd("PTTL", key)


def both(redis_port, proxy_port, proto, setup, cmd):
    """Runs setup straight on Redis, then cmd straight; flushes, runs setup
    again, then cmd through ttlguard. Returns (direct reply, proxied reply);
    the keyspace is the proxied run's."""
    replies = []
    for port in (redis_port, proxy_port):
        with Conn(redis_port) as ctl:
            assert ctl.cmd("FLUSHALL") == b"OK"
            for c in setup:
                assert not isinstance(ctl.cmd(*c), RespError), c
        with conn(port, proto) as c:
            replies.append(raw(c, *cmd))
    return replies


def near_rule_ttl(ms):
    return RULE_TTL * 1000 - 5000 <= ms <= RULE_TTL * 1000


# --------------------------------------------------------------------------
# Another database
# --------------------------------------------------------------------------

@PROTOS
def test_copy_into_another_db_gets_the_rule_ttl(env, proto):
    """The seed's case: COPY d:src t:dst DB 1 from a durable source without a
    TTL; the copy in db 1 gets the rule's TTL, the reply is Redis's."""
    redis, proxy = env
    d, p = both(redis.port, proxy.port, proto, [("SET", "d:src", "v")],
                ("COPY", "d:src", "t:dst", "DB", "1"))
    assert d == p == b":1\r\n"
    assert near_rule_ttl(pttl(redis.port, "t:dst", db=1))
    assert pttl(redis.port, "d:src") == -1          # the source is not touched


@PROTOS
def test_copy_into_another_db_keeps_the_source_ttl(env, proto):
    redis, proxy = env
    d, p = both(redis.port, proxy.port, proto, [("SET", "d:src", "v", "PX", "50000")],
                ("COPY", "d:src", "t:dst", "DB", "1", "REPLACE"))
    assert d == p == b":1\r\n"
    assert 45000 < pttl(redis.port, "t:dst", db=1) <= 50000


@PROTOS
def test_copy_onto_an_existing_key_in_another_db(env, proto):
    """Without REPLACE nothing is copied (0) and the key there keeps its state;
    with REPLACE the copy replaces it and gets the rule's TTL."""
    redis, proxy = env
    setup = [("SET", "d:src", "v"), ("SELECT", "1"), ("SET", "t:dst", "old")]
    d, p = both(redis.port, proxy.port, proto, setup, ("COPY", "d:src", "t:dst", "DB", "1"))
    assert d == p == b":0\r\n"
    assert pttl(redis.port, "t:dst", db=1) == -1     # untouched: it was not copied
    d, p = both(redis.port, proxy.port, proto, setup,
                ("COPY", "d:src", "t:dst", "DB", "1", "REPLACE"))
    assert d == p == b":1\r\n"
    assert near_rule_ttl(pttl(redis.port, "t:dst", db=1))
    with Conn(redis.port) as c:
        c.cmd("SELECT", "1")
        assert c.cmd("GET", "t:dst") == b"v"


@PROTOS
def test_move_of_a_key_without_ttl(env, proto):
    redis, proxy = env
    d, p = both(redis.port, proxy.port, proto, [("SET", "t:k", "v")], ("MOVE", "t:k", "1"))
    assert d == p == b":1\r\n"
    assert pttl(redis.port, "t:k") == -2
    assert near_rule_ttl(pttl(redis.port, "t:k", db=1))


@PROTOS
def test_move_keeps_a_ttl_and_fails_like_redis(env, proto):
    redis, proxy = env
    d, p = both(redis.port, proxy.port, proto, [("SET", "t:k", "v", "PX", "30000")],
                ("MOVE", "t:k", "2"))
    assert d == p == b":1\r\n"
    assert 25000 < pttl(redis.port, "t:k", db=2) <= 30000
    # An existing key there: 0, nothing moves, nothing gets a TTL.
    setup = [("SET", "t:k", "v"), ("SELECT", "2"), ("SET", "t:k", "there")]
    d, p = both(redis.port, proxy.port, proto, setup, ("MOVE", "t:k", "2"))
    assert d == p == b":0\r\n"
    assert pttl(redis.port, "t:k") == -1 and pttl(redis.port, "t:k", db=2) == -1
    for cmd in (("MOVE", "t:k", "x"), ("MOVE", "t:k", "0"), ("MOVE", "t:k", "99999"),
                ("MOVE", "t:missing", "1"), ("COPY", "t:k", "t:k", "DB", "0"),
                ("COPY", "t:k", "t:c", "DB", "-1")):
        d, p = both(redis.port, proxy.port, proto, [("SET", "t:k", "v")], cmd)
        assert d == p, (cmd, d, p)


def test_move_inside_the_clients_multi(env):
    """Queued like any command: EXEC's element is MOVE's own reply."""
    redis, proxy = env
    with Conn(redis.port) as ctl:
        ctl.cmd("FLUSHALL")
        ctl.cmd("SET", "t:k", "v")
    with Conn(proxy.port) as c:
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("MOVE", "t:k", "3") == b"QUEUED"
        assert c.cmd("EXEC") == [1]
    assert near_rule_ttl(pttl(redis.port, "t:k", db=3))


@PROTOS
def test_reject_refuses_only_a_key_without_ttl(env, proto):
    redis, proxy = env
    with Conn(redis.port) as ctl:
        ctl.cmd("FLUSHALL")
        ctl.cmd("SET", "r:k", "v")
        ctl.cmd("SET", "r:t", "v", "EX", "100")
        ctl.cmd("SET", "d:src", "v")
    with conn(proxy.port, proto) as c:
        got = raw(c, "MOVE", "r:k", "1")
        assert got.startswith(b"-TTLGUARD MOVE would carry 'r:k' to db 1 without a TTL "
                              b"(rule ttl \"r:\"): give it one first: EXPIRE key 900 NX"), got
        assert got.endswith(b"\r\n") and got.count(b"\r\n") == 1
        assert c.cmd("MOVE", "r:t", "1") == 1       # it has a TTL: passes
        got = raw(c, "COPY", "d:src", "r:c", "DB", "1")
        assert got.startswith(b"-TTLGUARD COPY would carry 'r:c' to db 1 without a TTL"), got
        assert b"give the source one first" in got
    assert pttl(redis.port, "r:k") == -1 and pttl(redis.port, "r:k", db=1) == -2
    assert 95000 < pttl(redis.port, "r:t", db=1) <= 100000
    assert pttl(redis.port, "r:c", db=1) == -2
    rc.wait_recorded_all(proxy, proxy.events, [
        dict(command="MOVE", key="r:k", effect="moves-without-ttl", action="rejected"),
        dict(command="COPY", key="r:c", effect="moves-without-ttl", action="rejected"),
    ])
    # The MOVE that passed is not recorded as rejected.
    _, evs = rc.recorded_events(proxy, proxy.events)
    assert not [e for e in evs if e.get("key") == "r:t" and e.get("action") == "rejected"]


def test_log_records_and_forwards(env):
    redis, proxy = env
    d, p = both(redis.port, proxy.port, 2, [("SET", "l:k", "v")], ("MOVE", "l:k", "1"))
    assert d == p == b":1\r\n"
    assert pttl(redis.port, "l:k", db=1) == -1
    rc.wait_recorded_all(proxy, proxy.events, [
        dict(command="MOVE", key="l:k", effect="moves-without-ttl", action="logged")])


# --------------------------------------------------------------------------
# Another server
# --------------------------------------------------------------------------

@pytest.fixture
def target(make_redis):
    return make_redis()


def migrate(target_port, key, *opts):
    return ("MIGRATE", "127.0.0.1", str(target_port), key, "0", "5000") + opts


@PROTOS
def test_migrate_gives_the_rule_ttl_before_the_key_leaves(env, target, proto):
    redis, proxy = env
    for cmd in (migrate(target.port, "t:k"),
                migrate(target.port, "t:k", "REPLACE"),
                migrate(target.port, "", "KEYS", "t:k", "x:other")):
        replies = []
        for port in (redis.port, proxy.port):
            for p in (redis.port, target.port):
                with Conn(p) as ctl:
                    ctl.cmd("FLUSHALL")
            with Conn(redis.port) as ctl:
                ctl.cmd("SET", "t:k", "v")
                ctl.cmd("SET", "x:other", "w")
            with conn(port, proto) as c:
                replies.append(raw(c, *cmd))
        assert replies[0] == replies[1] == b"+OK\r\n", (cmd, replies)
        assert near_rule_ttl(pttl(target.port, "t:k")), cmd
        assert pttl(redis.port, "t:k") == -2
        if "x:other" in cmd:
            assert pttl(target.port, "x:other") == -1       # under no rule


@PROTOS
def test_migrate_copy_keeps_the_ttl_it_was_given(env, target, proto):
    redis, proxy = env
    d, p = both(redis.port, proxy.port, proto, [("SET", "t:k", "v"), ("SET", "t:t", "v", "EX", "60")],
                migrate(target.port, "", "COPY", "REPLACE", "KEYS", "t:k", "t:t"))
    assert d == p == b"+OK\r\n"
    assert near_rule_ttl(pttl(target.port, "t:k")) and near_rule_ttl(pttl(redis.port, "t:k"))
    assert 55000 < pttl(target.port, "t:t") <= 60000   # its own TTL travels


@PROTOS
def test_failed_migrate_changes_nothing(env, target, proto):
    """The TTL given before the key leaves is taken back when it does not
    leave: an unreachable target, a key there already (BUSYKEY), NOKEY."""
    redis, proxy = env
    with Conn(target.port) as t:
        t.cmd("FLUSHALL")
        t.cmd("SET", "t:k", "there")
    for cmd in (("MIGRATE", "127.0.0.1", "1", "t:k", "0", "200"),
                migrate(target.port, "t:k"),
                migrate(target.port, "t:missing"),
                migrate(target.port, "t:k", "KEYS", "t:k")):
        d, p = both(redis.port, proxy.port, proto, [("SET", "t:k", "v")], cmd)
        assert d == p, (cmd, d, p)
        assert d.startswith((b"-", b"+NOKEY")), d
        assert pttl(redis.port, "t:k") == -1, cmd


@PROTOS
def test_migrate_reject(env, target, proto):
    redis, proxy = env
    with Conn(redis.port) as ctl:
        ctl.cmd("FLUSHALL")
        ctl.cmd("SET", "r:a", "v", "EX", "100")
        ctl.cmd("SET", "r:b", "v")
        ctl.cmd("SET", "t:c", "v")
    with Conn(target.port) as t:
        t.cmd("FLUSHALL")
    with conn(proxy.port, proto) as c:
        got = raw(c, *migrate(target.port, "", "KEYS", "t:c", "r:a", "r:b"))
        assert got.startswith(b"-TTLGUARD MIGRATE would carry 'r:b' to another server without "
                              b"a TTL (rule ttl \"r:\")"), got
        # Nothing left, nothing was given a TTL.
        assert pttl(redis.port, "t:c") == -1 and pttl(target.port, "r:a") == -2
        assert raw(c, *migrate(target.port, "r:a")) == b"+OK\r\n"
    assert 95000 < pttl(target.port, "r:a") <= 100000
    rc.wait_recorded_all(proxy, proxy.events, [
        dict(command="MIGRATE", key="r:b", effect="moves-without-ttl", action="rejected")])


@PROTOS
def test_only_keys_without_ttl_are_recorded(env, target, proto):
    """Carrying a key that has a TTL loses nothing: no violation, in rewrite
    and in log mode. Which keys have none only the server knows; a PTTL sent
    right before the command tells the proxy, and its reply never reaches the
    client. In a pipeline, replies stay in order."""
    redis, proxy = env
    with Conn(target.port) as t:
        t.cmd("FLUSHALL")
    with Conn(redis.port) as ctl:
        ctl.cmd("FLUSHALL")
        for k in ("t:a", "t:b", "t:m", "l:a", "d:src"):
            ctl.cmd("SET", k, "v", "EX", "100")
        ctl.cmd("SET", "t:bare", "v")
        ctl.cmd("SET", "l:bare", "v")
        ctl.cmd("SET", "t:keep", "v")
    with conn(proxy.port, proto) as c:
        c.send(enc("MOVE", "t:a", "1") + enc("COPY", "d:src", "t:c", "DB", "1") +
               enc("GET", "t:keep") + enc("MOVE", "l:a", "1") +
               enc("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", "t:m",
                   "t:bare") +
               enc("MOVE", "l:bare", "2") + enc("PING"))
        got = [c.reply_raw()[1] for _ in range(7)]
    assert got == [b":1\r\n", b":1\r\n", b"$1\r\nv\r\n", b":1\r\n", b"+OK\r\n", b":1\r\n",
                   b"+PONG\r\n"], got
    assert near_rule_ttl(pttl(target.port, "t:bare"))
    rc.wait_recorded_all(proxy, proxy.events, [
        dict(command="MIGRATE", key="t:bare", effect="moves-without-ttl", action="rewritten"),
        dict(command="MOVE", key="l:bare", effect="moves-without-ttl", action="logged"),
    ])
    _, evs = rc.recorded_events(proxy, proxy.events)
    carried = sorted(e["key"] for e in evs if e.get("effect") == "moves-without-ttl")
    assert carried == ["l:bare", "t:bare"], carried


def test_swapdb_stays_unverified(env):
    """SWAPDB moves whole databases: every key keeps its TTL, so nothing
    loses one, but keys that leaked in one are now in the other; the proxy
    cannot judge that without a scan (docs: run ttlguard audit on both)."""
    redis, proxy = env
    with Conn(proxy.port) as c:
        assert c.cmd("SWAPDB", "0", "1") == b"OK"
    rc.wait_recorded_all(proxy, proxy.events, [dict(event="unverified", command="SWAPDB")])


def test_inline_move_is_judged_too(env):
    """An inline command is rewritten from its argv (no argument bytes to reuse)."""
    redis, proxy = env
    with Conn(redis.port) as ctl:
        ctl.cmd("FLUSHALL")
        ctl.cmd("SET", "t:k", "v")
    with Conn(proxy.port) as c:
        c.send(b"MOVE t:k 4\r\n")
        assert c.reply_raw()[1] == b":1\r\n"
    assert near_rule_ttl(pttl(redis.port, "t:k", db=4))
