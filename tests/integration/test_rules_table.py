"""
Every command of the table, through ttlguard and straight to Redis.

One redis-server and one ttlguard serve the whole module; the proxy has a
rule per action:

  rw:  [ttl] action = rewrite     rj:  [ttl] action = reject
  lg:  [ttl] action = log         free:  no rule ([default] allow)

Each case of rules_cases.CASES runs twice on a flushed database with the
same setup: once straight to redis-server, once through ttlguard, on raw
sockets, in RESP2 and in RESP3 (HELLO 3), with the written keys (a) missing
and (b) existing with a TTL of ORIG_MS (test_command_through_route: the
same through ttlguard's cluster = route in front of a 6-node cluster, the
keys hash-tagged into one slot, compared with the node that owns it). Then:

  rewrite  the reply bytes equal Redis's; the data equals Redis's; a written
           key ends with a TTL: the one it had in (b), the rule's in (a)
           (scripts: some TTL); PERSIST / GETEX PERSIST are refused
  reject   a command that would create or drop a TTL gets the -TTLGUARD
           error and nothing changes (DUMP and PTTL before = after); the
           others (explicit TTLs, reads, scripts) behave as in Redis
  log      reply, data and TTLs exactly as in Redis; the violation is
           recorded (test_log_mode_records_every_violation)
  free     reply, data and TTLs exactly as in Redis

test_case_effects_by_experiment checks the cases' effect labels against
redis-server itself, and test_every_table_write_has_a_case keeps the cases
and `ttlguard commands` in step.
"""

import subprocess
import time
import types

import pytest

import harness
from harness import Conn, RedisServer, RespError, Ttlguard, enc
import rules_cases as rc
from rules_cases import CASES, ORIG_MS, RULE_TTL, TOL_MS, Rendered

MODES = {"rewrite": "rw:", "reject": "rj:", "log": "lg:", "free": "free:"}
SECTIONS = rc.rule_sections([("rw:", "rewrite", None), ("rj:", "reject", None),
                             ("lg:", "log", None)])


class Env:
    def __init__(self, redis, proxy):
        self.redis = redis
        self.proxy = proxy


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One redis-server and one ttlguard with the four prefixes, for the
    whole module: each test flushes the database first."""
    harness.need_binary()
    d = tmp_path_factory.mktemp("rules-table")
    redis = RedisServer(d).start()
    proxy = Ttlguard(d, redis.port, {"events": str(d / "events.jsonl")}, sections=SECTIONS)
    try:
        proxy.start()
    except Exception:
        redis.stop()
        raise
    yield Env(redis, proxy)
    rc_ = proxy.stop()
    redis.stop()
    assert rc_ == 0, "ttlguard exit status %s on SIGTERM:\n%s" % (rc_, proxy.stderr())


# --------------------------------------------------------------------------
# One run of a case
# --------------------------------------------------------------------------

class KeyState:
    def __init__(self, dump, pttl):
        self.dump = dump
        self.pttl = pttl

    def __repr__(self):
        return "KeyState(pttl=%s, dump=%r)" % (self.pttl, self.dump and self.dump[:40])


def key_data(ctl, r, key):
    """DUMP, or the replies of the case's view commands (Case.view)."""
    if r.case.view is None:
        return ctl.cmd("DUMP", key)
    return tuple(ctl.cmd(*[key if w == "{key}" else w for w in v.split(" ")])
                 for v in r.case.view)


def snapshot(ctl, r):
    return {p: KeyState(key_data(ctl, r, k), ctl.cmd("PTTL", k)) for p, k in r.keys.items()}


def same_ttl(a, b):
    """Two PTTLs taken a few ms apart describe the same expiry."""
    if a < 0 or b < 0:
        return a == b
    return abs(a - b) <= TOL_MS


def near(pttl, ms):
    return ms - TOL_MS <= pttl <= ms


def ok(reply, what):
    assert not isinstance(reply, RespError), "%s: %r" % (what, reply)
    return reply


def prepare(ctl, r, variant):
    """Flush, run the setup (and the (b) keys with their TTL) straight on
    redis-server. Returns the DUMP payload of {s} (RESTORE)."""
    ok(ctl.cmd("FLUSHALL"), "FLUSHALL")
    for c in r.setup():
        ok(ctl.cmd(*c), "setup %r" % c)
    if variant == "b":
        for c in r.exist():
            ok(ctl.cmd(*c), "exist %r" % c)
        for p in r.case.writes:
            assert ctl.cmd("PEXPIRE", r.key(p), ORIG_MS) == 1, "exist did not create %s" % p
    return ctl.cmd("DUMP", r.key("s")) if "s" in r.keys else None


def run_once(port, ctl_port, r, variant, proto):
    """The case on a fresh database, sent to port. Returns (raw reply,
    state before, state after)."""
    with Conn(ctl_port) as ctl:
        dump = prepare(ctl, r, variant)
        before = snapshot(ctl, r)
        with Conn(port) as c:
            if proto == 3:
                hello = c.cmd("HELLO", "3")
                assert not isinstance(hello, RespError), hello
            c.send(enc(*r.main(dump)))
            _, raw = c.reply_raw()
            # Anything the proxy sends after the command on this connection
            # (a follow-up) has run once PING is answered.
            assert c.cmd("PING") == b"PONG"
        after = snapshot(ctl, r)
    return raw, before, after


def params():
    out = []
    for case in CASES:
        for variant in ("a", "b") if case.exist else ("a",):
            out.append(pytest.param(case, variant, id="%s-%s" % (case.id, variant)))
    return out


def expected_outcome(case, mode):
    if mode == "rewrite" and case.strongest() == "persist":
        return "reject"
    if mode == "reject" and case.rejecting():
        return "reject"
    return mode if mode == "rewrite" else "pass"


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------

def table_rows():
    """`ttlguard commands --server` of the server under test, as {name: set of
    effects over its key roles}."""
    harness.need_binary()
    name, version = rc.SERVER
    out = subprocess.run([harness.TTLG_BIN, "commands", "--server",
                          "%s:%s" % (name, ".".join(map(str, version)))],
                         capture_output=True, timeout=10)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.decode().splitlines():
        parts = line.split()
        if not parts:
            continue
        effects = set()
        for spec in parts[3:]:
            assert "@" in spec and ":" in spec, "cannot read key spec %r in %r" % (spec, line)
            effects.update(spec.rsplit(":", 1)[1].split("|"))
        rows[parts[0]] = effects
    assert len(rows) > 60 and "set" in rows and "getset" in rows, out.stdout[:500]
    return rows


def test_every_table_write_has_a_case():
    rows = table_rows()
    covered = {c.table_name for c in CASES}
    missing = sorted(n for n, eff in rows.items() if eff - {"none"} and n not in covered)
    assert not missing, "commands with a TTL effect but no case in rules_cases.py: %s" % missing
    stale = sorted({c.table_name for c in CASES} - set(rows))
    assert not stale, "cases for commands `ttlguard commands` does not list: %s" % stale
    wrong = ["%s: %s not in %s" % (c.id, e, sorted(rows[c.table_name]))
             for c in CASES for e in c.writes.values() if e not in rows[c.table_name]]
    assert not wrong, "case effects the table does not allow for the command:\n" + "\n".join(wrong)


@pytest.mark.parametrize("case,variant", params())
def test_case_effects_by_experiment(env, case, variant):
    """The effect labels of the cases, checked against redis-server alone:
    create leaves a new key without a TTL and keeps an existing one,
    overwrite drops it, persist removes it, sets-ttl sets one."""
    r = Rendered(case, "free:")
    _, before, after = run_once(env.redis.port, env.redis.port, r, variant, 2)
    noop = case.noop_a if variant == "a" else case.noop_b
    for p, effect in case.writes.items():
        b, a = before[p], after[p]
        if noop:
            assert a.dump == b.dump and same_ttl(a.pttl, b.pttl), (p, b, a)
            continue
        if effect == "none":
            # Neither creates the key nor touches its TTL.
            assert same_ttl(a.pttl, b.pttl), (p, b, a)
            continue
        if effect == "carry":
            # Here the key is gone (moved) or left as it was.
            assert a.pttl == -2 or same_ttl(a.pttl, b.pttl), (p, b, a)
            continue
        if case.script:
            assert a.pttl == -1, (p, a)
            continue
        if effect in ("create", "overwrite"):
            if variant == "a" or effect == "overwrite":
                assert a.pttl == -1, "%s: %s leaves %s with PTTL %s, expected none" % (
                    case.id, effect, p, a.pttl)
            else:
                assert near(a.pttl, ORIG_MS), "%s: create must keep %s's TTL: %s" % (
                    case.id, p, a.pttl)
        elif effect == "persist":
            assert a.pttl in (-1, -2), (p, a)
            if variant == "b":
                assert a.pttl == -1 and a.dump == b.dump
        elif effect == "sets-ttl":
            if variant == "b" or case.cmd[0].upper() not in ("EXPIRE", "PEXPIRE", "EXPIREAT",
                                                             "PEXPIREAT", "GETEX"):
                assert near(a.pttl, rc.CMD_TTL * 1000), "%s: %s PTTL %s" % (case.id, p, a.pttl)


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case,variant", params())
def test_command(env, case, variant, mode, proto):
    check_command(env.redis.port, env.proxy, case, variant, mode, proto)


def check_command(redis_port, proxy, case, variant, mode, proto, tag=""):
    """The case straight to the server at redis_port and through proxy, on
    keys of the rule of mode (and hash tag: tag)."""
    now = time.time()
    r = Rendered(case, MODES[mode] + tag, now)
    cmd_text = b" ".join(r.main(b"<dump>"))[:200]
    d_raw, d_before, d_after = run_once(redis_port, redis_port, r, variant, proto)
    try:
        p_raw, p_before, p_after = run_once(proxy.port, redis_port, r, variant, proto)
    except (EOFError, TimeoutError) as e:
        pytest.fail("%s (%s, RESP%d, keys %s): no reply through ttlguard (%s); Redis replied %r\n"
                    "ttlguard stderr (tail):\n%s" % (
                        cmd_text, mode, proto, "missing" if variant == "a" else "with TTL", e,
                        d_raw, proxy.stderr()[-1500:]))
    for p in r.keys:
        assert p_before[p].dump == d_before[p].dump, "setup differs for %s" % p

    outcome = expected_outcome(case, mode)
    if outcome == "reject":
        if mode == "rewrite":
            placeholder, effect = next((p, e) for p, e in case.writes.items() if e == "persist")
        else:
            placeholder, effect = case.rejecting()
        label = b'ttl "%s"' % MODES[mode].encode()
        want = rc.reject_prefix(case.cmd[0].encode(), rc.VERB[effect], r.key(placeholder), label)
        assert p_raw.startswith(want) and p_raw.endswith(b"\r\n") and \
            p_raw.count(b"\r\n") == 1 and len(p_raw) > len(want) + 2, \
            "%s (%s, RESP%d): expected %r<hint>\\r\\n, got %r (Redis: %r)" % (
                cmd_text, mode, proto, want, p_raw, d_raw)
        for p in r.keys:
            b, a = p_before[p], p_after[p]
            assert a.dump == b.dump and same_ttl(a.pttl, b.pttl), \
                "%s rejected but %s changed: %r -> %r" % (cmd_text, p, b, a)
        return

    assert p_raw == d_raw, "%s (%s, RESP%d, keys %s): reply through ttlguard %r, from Redis %r" % (
        cmd_text, mode, proto, "missing" if variant == "a" else "with TTL", p_raw, d_raw)
    for p in r.keys:
        d, q = d_after[p], p_after[p]
        assert q.dump == d.dump, "%s (%s): data of %s differs: proxy %r, Redis %r" % (
            cmd_text, mode, p, q, d)
        effect = case.writes.get(p)
        if outcome == "rewrite" and effect in ("create", "overwrite"):
            if d.pttl == -2:
                assert q.pttl == -2
            elif d.pttl >= 0:
                assert same_ttl(q.pttl, d.pttl), (p, q, d)
            elif case.script:
                assert 0 < q.pttl <= RULE_TTL * 1000, \
                    "%s: script key %s left without a TTL: %s" % (cmd_text, p, q.pttl)
            elif p_before[p].pttl > 0:
                assert same_ttl(q.pttl, p_before[p].pttl), \
                    "%s: %s must keep its TTL %s, has %s" % (cmd_text, p, p_before[p].pttl,
                                                             q.pttl)
            else:
                assert near(q.pttl, RULE_TTL * 1000), \
                    "%s: %s must get the rule's ttl, PTTL %s" % (cmd_text, p, q.pttl)
        else:
            assert same_ttl(q.pttl, d.pttl), \
                "%s (%s): PTTL of %s through ttlguard %s, from Redis %s" % (
                    cmd_text, mode, p, q.pttl, d.pttl)


def test_log_mode_records_every_violation(redis_srv, make_proxy, tmp_path):
    """Every case a reject rule would refuse, sent under a log rule, is
    recorded with its command, key, effect and action `logged`; scripts
    as unverified with their sha and declared keys."""
    events = str(tmp_path / "events.jsonl")
    proxy = make_proxy(redis_srv, {"events": events}, sections=SECTIONS)
    wanted = []
    for case in CASES:
        r = Rendered(case, "lg:")
        raw, _, _ = run_once(proxy.port, redis_srv.port, r, "a", 2)
        assert not raw.startswith(b"-TTLGUARD"), (case.id, raw)
        rej = case.rejecting()
        if rej:
            wanted.append(dict(command=case.cmd[0], key=r.key(rej[0]).decode(),
                               effect=rc.EFFECT_EVENT[rej[1]], action="logged",
                               rule='ttl "lg:"'))
        elif case.script:
            # Scripts: the sha and the declared keys (issue 3: "at least
            # record the script's sha and keys"); a function by its keys.
            wanted.append(dict(event="unverified", command=case.cmd[0],
                               key=r.key("k").decode(),
                               detail_has="sha=" + rc.SCRIPT_SET_SHA
                               if case.cmd[0] != "FCALL" else None))
    rc.wait_recorded_all(proxy, events, wanted)


# --------------------------------------------------------------------------
# The same through cluster = route
# --------------------------------------------------------------------------

ROUTE_TAG = "{r}"       # every key of a case in one slot, as a cluster wants them


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    """A 6-node cluster and a ttlguard with cluster = route and the same
    rules in front of it; the cases run straight on the primary that owns
    ROUTE_TAG's slot and through the proxy. Shared connections only (the one
    mode route has): the 1:1 pass skips it, its shared pass runs it."""
    if harness.EXTRA_CONF.get("multiplex") == "off":
        pytest.skip("cluster = route shares connections: run by the shared pass")
    from cluster_util import Cluster, key_slot
    from test_cluster_route import RoutedProxy
    d = tmp_path_factory.mktemp("rules-table-route")
    cluster = Cluster(d).start()
    proxy = None
    try:
        proxy = RoutedProxy(d, cluster, sections=SECTIONS)
        proxy.start()
        owner = cluster.owner_of_slot(key_slot(ROUTE_TAG))["port"]
        yield Env(types.SimpleNamespace(port=owner), proxy)
    finally:
        rc_ = proxy.stop() if proxy is not None else 0
        cluster.stop()
    assert rc_ == 0, "ttlguard exit status %s on SIGTERM:\n%s" % (rc_, proxy.stderr())


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case,variant", params())
def test_command_through_route(routed, case, variant, mode, proto):
    """Every case through cluster = route in front of a cluster, its keys in
    one slot: what a node answers and does through the proxy is what it
    answers and does straight, the rules applied as on one server."""
    check_command(routed.redis.port, routed.proxy, case, variant, mode, proto, tag=ROUTE_TAG)


# --------------------------------------------------------------------------
# Blocking commands with a destination
# --------------------------------------------------------------------------

@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("cmd", [["BLMOVE", "{s}", "{k}", "LEFT", "RIGHT", "0"],
                                 ["BRPOPLPUSH", "{s}", "{k}", "0"]],
                         ids=["blmove", "brpoplpush"])
def test_blocking_destination_keeps_blocking(env, cmd, proto):
    """On an empty source the command blocks through ttlguard too; when
    another client pushes, the reply is Redis's and the destination has the
    rule's TTL."""
    results = {}
    for name, port in (("direct", env.redis.port), ("proxy", env.proxy.port)):
        src, dst = b"rw:blk:src", b"rw:blk:dst"
        argv = [src if a == "{s}" else dst if a == "{k}" else a for a in cmd]
        with Conn(env.redis.port) as ctl, Conn(port) as c:
            ctl.cmd("FLUSHALL")
            if proto == 3:
                c.cmd("HELLO", "3")
            c.send(enc(*argv))
            c.assert_silent(0.3)
            # The pusher goes through the same endpoint, as an application would.
            with Conn(port) as pusher:
                assert pusher.cmd("RPUSH", src, "job") == 1
            _, raw = c.reply_raw(timeout=5)
            assert c.cmd("PING") == b"PONG"
            results[name] = (raw, ctl.cmd("LRANGE", dst, 0, -1), ctl.cmd("PTTL", dst))
    (d_raw, d_list, d_pttl), (p_raw, p_list, p_pttl) = results["direct"], results["proxy"]
    assert p_raw == d_raw == b"$3\r\njob\r\n"
    assert p_list == d_list == [b"job"]
    # Straight to Redis the pushed key has its TTL (rw: rewrite rule applies
    # to the RPUSH through the proxy only); the destination never does.
    assert d_pttl == -1
    assert near(p_pttl, RULE_TTL * 1000), "destination PTTL %s" % p_pttl


@pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])
def test_blocking_timeout_reply_identical(env, proto):
    """A BLMOVE that times out answers the null of the client's protocol,
    byte for byte, and creates nothing."""
    raws = []
    for port in (env.redis.port, env.proxy.port):
        with Conn(env.redis.port) as ctl, Conn(port) as c:
            ctl.cmd("FLUSHALL")
            if proto == 3:
                c.cmd("HELLO", "3")
            c.send(enc("BLMOVE", "rw:e:src", "rw:e:dst", "LEFT", "RIGHT", "0.1"))
            raws.append(c.reply_raw(timeout=5)[1])
            assert ctl.cmd("EXISTS", "rw:e:dst") == 0
    assert raws[1] == raws[0], "timeout reply through ttlguard %r, from Redis %r" % (
        raws[1], raws[0])


def test_blocking_unblocked_by_proxy_client_pipeline(env):
    """The blocked client's follow-up must not delay or reorder what it sends
    after the reply: a pipeline behind the BLMOVE answers in order."""
    with Conn(env.redis.port) as ctl, Conn(env.proxy.port) as c:
        ctl.cmd("FLUSHALL")
        c.send(enc("BLMOVE", "rw:p:src", "rw:p:dst", "LEFT", "RIGHT", "0") +
               enc("INCR", "rw:p:ctr") + enc("LLEN", "rw:p:dst"))
        c.assert_silent(0.3)
        with Conn(env.redis.port) as pusher:
            assert pusher.cmd("RPUSH", "rw:p:src", "x") == 1
        assert c.replies(3, timeout=5) == [b"x", 1, 1]
        assert ctl.cmd("PTTL", "rw:p:dst") > 0
        assert ctl.cmd("PTTL", "rw:p:ctr") > 0
