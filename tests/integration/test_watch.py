"""
The watcher (`watch = on`): writes that never pass through ttlguard -- a
second client talking straight to Redis, a script writing a key it did not
declare -- are heard through keyspace notifications and checked after the
fact:

  - rewrite rules: a key found without a TTL gets its rule's TTL
    (EXPIRE ... NX, so a TTL set meanwhile is never touched), in the db it
    was written in; log and reject rules: recorded, not fixed;
  - events say `observed` with effect `found-without-ttl`, the event's name
    as the command, the db, and the delay in the detail;
  - notify-keyspace-events: missing flags are named at start, in /healthz
    and /metrics, and set only with watch_configure = on;
  - a backend restart: resubscribed, the gap said (log, event, metrics);
  - a reload: the new rules' prefixes are watched, with no gap;
  - config mistakes: file:line.
"""

import os
import signal
import subprocess

import pytest

import harness
from harness import Conn, RespError, wait_for
import rules_cases as rc
from test_metrics import get, scrape, value

RULE_TTL = 900
DURABLE = "owner = payments\nreason = ledger\nrebuild = replay\n"
SECTIONS = ('[ttl "t:"]\nttl = %d\naction = rewrite\n\n'
            '[ttl "l:"]\nttl = %d\naction = log\n\n'
            '[durable "t:keep:"]\n%s\n' % (RULE_TTL, RULE_TTL, DURABLE))


def start(make_proxy, redis_srv, tmp_path, sections=SECTIONS, **conf):
    admin = harness.free_port()
    c = {"watch": "on", "admin": "127.0.0.1:%d" % admin,
         "events": str(tmp_path / "events.jsonl")}
    c.update(conf)
    p = make_proxy(redis_srv, conf=c, sections=sections)
    p.admin = admin
    p.events = c["events"]
    return p


def subscribed(p):
    wait_for(lambda: value(scrape(p.admin), "ttlguard_watch_subscribed") == 1, 10,
             "the watcher to subscribe")


def pttl(port, key, db=0):
    with Conn(port) as c:
        if db:
            c.cmd("SELECT", str(db))
        return c.cmd("PTTL", key)


def near_rule_ttl(ms):
    return RULE_TTL * 1000 - 5000 <= ms <= RULE_TTL * 1000


def wait_ttl(port, key, db=0):
    wait_for(lambda: pttl(port, key, db) > 0, 5, "%s (db %d) to get a TTL" % (key, db))
    return pttl(port, key, db)


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_direct_writers_get_the_rule_ttl(make_proxy, redis_srv, tmp_path, proto):
    p = start(make_proxy, redis_srv, tmp_path, watch_configure="on")
    subscribed(p)
    with Conn(redis_srv.port) as d:
        if proto == 3:
            assert not isinstance(d.cmd("HELLO", "3"), RespError)
        assert d.cmd("INCR", "t:counter") == 1
        assert d.cmd("HSET", "t:hash", "f", "v") == 1
        assert d.cmd("SADD", "t:set", "a") == 1
        # A script writing a key it did not declare.
        d.cmd("EVAL", "redis.call('SET', ARGV[1], 'v') return 1", "0", "t:script")
        # SET dropping the TTL a key had.
        d.cmd("SET", "t:had", "v", "EX", "30")
        d.cmd("SET", "t:had", "w")
        # Another database.
        d.cmd("SELECT", "2")
        assert d.cmd("LPUSH", "t:list", "x") == 1
        d.cmd("SELECT", "0")
        # Its own TTL: never touched. Durable, no rule, log rule: no TTL given.
        d.cmd("SET", "t:own", "v", "EX", "50")
        d.cmd("SET", "t:keep:x", "v")
        d.cmd("SET", "free:x", "v")
        d.cmd("SET", "l:x", "v")
    for key in ("t:counter", "t:hash", "t:set", "t:script", "t:had"):
        assert near_rule_ttl(wait_ttl(redis_srv.port, key)), key
    assert near_rule_ttl(wait_ttl(redis_srv.port, "t:list", db=2))
    assert 45000 < pttl(redis_srv.port, "t:own") <= 50000
    rc.wait_recorded_all(p, p.events, [
        dict(command="INCRBY", key="t:counter", effect="found-without-ttl", action="observed",
             db=0, detail_has="given the rule's TTL"),
        dict(command="SET", key="t:script", effect="found-without-ttl", action="observed"),
        dict(command="LPUSH", key="t:list", effect="found-without-ttl", db=2),
        dict(command="SET", key="l:x", effect="found-without-ttl", action="observed",
             detail_has="not fixed (rule action log)"),
    ])
    for key in ("t:keep:x", "free:x", "l:x"):
        assert pttl(redis_srv.port, key) == -1, key
    _, evs = rc.recorded_events(p, p.events)
    assert not [e for e in evs if e.get("key") in ("t:own", "t:keep:x", "free:x")]
    with Conn(redis_srv.port) as d:
        names = [ln for ln in d.cmd("CLIENT", "LIST").decode().splitlines()
                 if " name=ttlguard-watch " in ln]
    assert len(names) == 2, names          # its own two connections, named
    m = scrape(p.admin)
    assert value(m, "ttlguard_watch_fixed_total") == 6
    assert value(m, "ttlguard_watch_found_total") == 7
    assert value(m, "ttlguard_watch_missed_total") == 0
    assert value(m, "ttlguard_watch_notifications_total") >= 12


def test_missing_flags_are_named_and_not_set(make_proxy, redis_srv, tmp_path):
    with Conn(redis_srv.port) as d:
        assert d.cmd("CONFIG", "SET", "notify-keyspace-events", "Ex") == b"OK"
    p = start(make_proxy, redis_srv, tmp_path)
    want = 'notify-keyspace-events "xE" lacks Kg$lshztd'
    wait_for(lambda: want in p.stderr(), 5, "the watcher to name the missing flags")
    status, _, body = get(p.admin, "/healthz")
    assert status == 200 and body.startswith(b"ok\n") and want.encode() in body, body
    assert b"watch_configure = on" in body
    assert value(scrape(p.admin), "ttlguard_watch_flags_ok") == 0
    with Conn(redis_srv.port) as d:
        assert d.cmd("CONFIG", "GET", "notify-keyspace-events") == [b"notify-keyspace-events",
                                                                     b"xE"]
        d.cmd("SET", "t:unseen", "v")
    assert pttl(redis_srv.port, "t:unseen") == -1


def test_watch_configure_adds_the_flags_it_needs(make_proxy, redis_srv, tmp_path):
    with Conn(redis_srv.port) as d:
        assert d.cmd("CONFIG", "SET", "notify-keyspace-events", "Ex") == b"OK"
    p = start(make_proxy, redis_srv, tmp_path, watch_configure="on")
    wait_for(lambda: value(scrape(p.admin), "ttlguard_watch_flags_ok") == 1, 5,
             "the flags to be set")
    with Conn(redis_srv.port) as d:
        flags = d.cmd("CONFIG", "GET", "notify-keyspace-events")[1].decode()
        assert set("KEg$lshztdx") <= set(flags.replace("A", "g$lshzxetd")), flags
        d.cmd("SET", "t:seen", "v")
    wait_ttl(redis_srv.port, "t:seen")
    status, _, body = get(p.admin, "/healthz")
    assert (status, body) == (200, b"ok\n")


def test_a_keyspace_flag_set_is_enough(make_proxy, redis_srv, tmp_path):
    """A (every class) with K is all it needs; it changes nothing."""
    with Conn(redis_srv.port) as d:
        assert d.cmd("CONFIG", "SET", "notify-keyspace-events", "AK") == b"OK"
    p = start(make_proxy, redis_srv, tmp_path, watch_configure="on")
    wait_for(lambda: value(scrape(p.admin), "ttlguard_watch_flags_ok") == 1, 5, "flags ok")
    with Conn(redis_srv.port) as d:
        assert d.cmd("CONFIG", "GET", "notify-keyspace-events")[1] == b"AK"


def test_backend_restart_resubscribes_and_says_the_gap(make_proxy, redis_srv, tmp_path):
    p = start(make_proxy, redis_srv, tmp_path, watch_configure="on")
    subscribed(p)
    redis_srv.restart()         # empty, flags back to the default: set again
    wait_for(lambda: "subscribed again after" in p.stderr(), 10, "the watcher to resubscribe")
    # The gap ends once the restarted server has the flags set again, not at
    # the subscription: a key written in between would make no notification.
    err = p.stderr()
    assert err.rindex("lacks") < err.index("subscribed again after"), err
    with Conn(redis_srv.port) as d:
        d.cmd("SET", "t:after", "v")
    wait_ttl(redis_srv.port, "t:after")
    rc.wait_recorded_all(p, p.events, [dict(event="watch_gap")])
    m = scrape(p.admin)
    assert value(m, "ttlguard_watch_resubscribed_total") == 1
    assert "run ttlguard audit" in p.stderr()


def test_reload_watches_the_new_rules_without_a_gap(make_proxy, redis_srv, tmp_path):
    p = start(make_proxy, redis_srv, tmp_path, watch_configure="on")
    subscribed(p)
    with open(p.config_path, "a") as f:
        f.write('\n[ttl "new:"]\nttl = 60\naction = rewrite\n')
    os.kill(p.pid, signal.SIGHUP)
    wait_for(lambda: "reloaded" in p.stderr(), 5, "the reload")

    def fixed():
        with Conn(redis_srv.port) as d:
            d.cmd("SET", "new:k", "v")
        return 55000 < pttl(redis_srv.port, "new:k") <= 60000
    wait_for(fixed, 5, "a key under the new rule to get its TTL")
    with Conn(redis_srv.port) as d:
        d.cmd("SET", "t:still", "v")
    wait_ttl(redis_srv.port, "t:still")
    assert "subscribed again" not in p.stderr()
    assert value(scrape(p.admin), "ttlguard_watch_resubscribed_total") == 0


def test_default_rule_watches_every_key(make_proxy, redis_srv, tmp_path):
    sections = ('[default]\naction = rewrite\nttl = 30\n\n[durable "d:"]\n%s\n' % DURABLE)
    p = start(make_proxy, redis_srv, tmp_path, sections=sections, watch_configure="on")
    subscribed(p)
    with Conn(redis_srv.port) as d:
        d.cmd("SET", "any", "v")
        d.cmd("SET", "d:ledger", "v")
        d.cmd("SET", "glob*[key]?", "v")
    assert 25000 < wait_ttl(redis_srv.port, "any") <= 30000
    assert 25000 < wait_ttl(redis_srv.port, "glob*[key]?") <= 30000
    assert pttl(redis_srv.port, "d:ledger") == -1


def test_glob_characters_in_a_prefix(make_proxy, redis_srv, tmp_path):
    """A prefix is bytes, not a pattern: t*[x]: watches t*[x]... only."""
    sections = '[ttl "t*[x]:"]\nttl = 40\naction = rewrite\n'
    p = start(make_proxy, redis_srv, tmp_path, sections=sections, watch_configure="on")
    subscribed(p)
    with Conn(redis_srv.port) as d:
        d.cmd("SET", "tab[x]:1", "v")
        d.cmd("SET", "t*[x]:1", "v")
    assert 35000 < wait_ttl(redis_srv.port, "t*[x]:1") <= 40000
    assert pttl(redis_srv.port, "tab[x]:1") == -1


@pytest.mark.parametrize("text,line,what", [
    ("[proxy]\nbackend = 127.0.0.1:6379\nwatch_configure = on\n", 3,
     "watch_configure = on needs watch = on"),
    ("[proxy]\nbackend = 127.0.0.1:7000\nwatch = maybe\n", 3, "watch"),
    ("[proxy]\nbackend = 127.0.0.1:7000 127.0.0.1:7001\ncluster = on\ncluster_ports = 9000-9005\n"
     "watch = on\n", 5, "cluster = on with watch = on is not supported yet"),
], ids=["configure-without-watch", "not-on-off", "cluster"])
def test_config_mistakes(tmp_path, text, line, what):
    path = str(tmp_path / "w.ini")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                       capture_output=True, timeout=20)
    out = (r.stdout + r.stderr).decode()
    assert r.returncode == 1, out
    assert "%s:%d:" % (path, line) in out and what in out, out
