"""
Safe by construction: a write ttlguard cannot judge (an argument the command
table does not know, a server newer than the table) still leaves every key
under a rewrite rule with a TTL (rule option `unknown = protect`, the
default). Its keys are known from the table's key positions or the server's
key specs; the command is sent as MULTI; cmd; EXPIRE key ttl NX ...; EXEC and
the client gets the command's own reply, byte for byte.

A server newer than the table is made here from a real one: TTLG_TABLE_VERIFIED
holds the table back to an older release of the same kind (Redis 8.6 behind a
table of Redis 8.0, Valkey 9.1 behind one of Valkey 8.0, any server behind the
table of its previous patch release), so the new arguments of the real server
are unknown to it, as Redis 8.8's would be to today's table. Which cases run
depends on the server under test (harness.SERVER_BIN; tests/run.sh runs the
suite against each server it builds):

  - every server: arguments the server refuses are refused with its own
    error and nothing is written; unknown = reject refuses with the rule's
    error, unknown = log forwards and records;
  - Redis 8.4 and later (table of 8.0.6): SET ... IFNE | IFEQ | IFDNE,
    BITOP DIFF | DIFF1 | ANDOR | ONE (its sources untouched), XADD ... KEEPREF,
    MSETEX (a name the old table lacks: derived from the key specs);
  - Valkey 9.0 and later (table of 8.0.0): SET ... IFEQ, DELIFEQ.

Each reply is compared with Redis's own on the same data, in RESP2 and RESP3,
alone, pipelined and inside the client's MULTI.
"""

import json

import pytest

import harness
from harness import Conn, RespError, enc

RULE_TTL = 900
SECTIONS = ('[ttl "t:"]\nttl = %d\naction = rewrite\n\n'
            '[ttl "l:"]\nttl = %d\naction = rewrite\nunknown = log\n\n'
            '[ttl "j:"]\nttl = %d\naction = rewrite\nunknown = reject\n\n'
            '[durable "d:"]\nowner = payments\nreason = ledger\nrebuild = replay\n\n'
            % (RULE_TTL, RULE_TTL, RULE_TTL))
PROTOS = pytest.mark.parametrize("proto", [2, 3], ids=["resp2", "resp3"])

SERVER = harness.server_bin_identity()


def held_back(server):
    """The table one release before server: its previous patch release, or
    the older release that lacks the arguments the cases below use."""
    kind, v = server
    if kind == "redis" and v >= (8, 4):
        return "redis:8.0.6"
    if kind == "valkey" and v >= (9, 0):
        return "valkey:8.0.0"
    if v[2] > 0:
        return "%s:%d.%d.%d" % (kind, v[0], v[1], v[2] - 1)
    return "%s:%d.%d.99" % (kind, v[0], v[1] - 1)


HELD = held_back(SERVER)


class Case:
    """cmd with {p} for the rule's prefix; setup run straight on the server
    first; written: the keys (without prefix) that must end with a TTL;
    untouched: keys the command only reads, which keep what they had;
    derived: a name the held-back table lacks (its row is derived from the
    server's key specs and judged as such: test_derived.py)."""

    def __init__(self, cmd, setup=(), written=(), untouched=(), since=None, derived=False):
        self.cmd, self.setup = cmd, setup
        self.written, self.untouched = written, untouched
        self.since, self.derived = since, derived

    def applies(self):
        kind, version = SERVER
        return self.since is None or (kind in self.since and version >= self.since[kind])

    def args(self, prefix):
        return [w.replace("{p}", prefix) for w in self.cmd.split()]

    def setup_cmds(self, prefix):
        return [[w.replace("{p}", prefix) for w in c.split()] for c in self.setup]

    def __repr__(self):
        return self.cmd.replace("{p}", "")


R84 = {"redis": (8, 4)}
V90 = {"valkey": (9, 0)}
# Accepted by the real server, unknown to the held-back table.
CASES = [c for c in [
    Case("SET {p}k v IFNE x", written=["k"], since=R84),
    Case("SET {p}k v IFNE x GET", setup=["SET {p}k old PX 50000"], written=["k"], since=R84),
    Case("SET {p}k v IFEQ old", setup=["SET {p}k old PX 50000"], written=["k"], since=R84),
    Case("SET {p}k v IFDNE 0123456789abcdef", written=["k"], since=R84),
    Case("BITOP DIFF {p}d {p}s1 {p}s2", setup=["SET {p}s1 abc", "SET {p}s2 a"],
         written=["d"], untouched=["s1", "s2"], since=R84),
    Case("BITOP DIFF1 {p}d {p}s1 {p}s2", setup=["SET {p}s1 abc", "SET {p}s2 a"],
         written=["d"], untouched=["s1", "s2"], since=R84),
    Case("BITOP ANDOR {p}d {p}s1 {p}s2", setup=["SET {p}s1 abc", "SET {p}s2 a"],
         written=["d"], untouched=["s1", "s2"], since=R84),
    Case("BITOP ONE {p}d {p}s1 {p}s2", setup=["SET {p}s1 abc", "SET {p}s2 a"],
         written=["d"], untouched=["s1", "s2"], since=R84),
    Case("XADD {p}x KEEPREF 1-1 f v", written=["x"], since=R84),
    Case("MSETEX 2 {p}m1 a {p}m2 b", written=["m1", "m2"], since=R84, derived=True),
    Case("SET {p}k v IFEQ old", setup=["SET {p}k old PX 50000"], written=["k"], since=V90),
    Case("SET {p}k v IFEQ old GET", setup=["SET {p}k old"], written=["k"], since=V90),
] if c.applies()]

# Refused by every server; to a table held back they are unknown arguments.
REFUSED = [Case("SET {p}k v NOSUCHOPTION"), Case("SET {p}k v EX 10 KEEPTTL"),
           Case("EXPIRE {p}k 10 SOMETIMES", setup=["SET {p}k v"])]


@pytest.fixture
def env(redis_srv, make_proxy, tmp_path):
    events = str(tmp_path / "events.jsonl")
    proxy = make_proxy(redis_srv, {"events": events}, sections=SECTIONS,
                       env={"TTLG_TABLE_VERIFIED": HELD})
    proxy.events = events
    return redis_srv, proxy


def conn(port, proto):
    c = Conn(port)
    if proto == 3:
        assert not isinstance(c.cmd("HELLO", "3"), RespError)
    return c


def prepare(redis_port, case, prefix):
    with Conn(redis_port) as ctl:
        assert ctl.cmd("FLUSHALL") == b"OK"
        for c in case.setup_cmds(prefix):
            assert not isinstance(ctl.cmd(*c), RespError), c


def run_both(redis_port, proxy_port, proto, case, prefix, send):
    """send(conn, args) -> raw replies, straight on the server and then
    through ttlguard on the same data; the keyspace is the proxied run's."""
    out = []
    for port in (redis_port, proxy_port):
        prepare(redis_port, case, prefix)
        with conn(port, proto) as c:
            out.append(send(c, case.args(prefix)))
    return out


def alone(c, args):
    c.send(enc(*args))
    return [c.reply_raw()[1]]


def pipelined(c, args):
    """The command between two PINGs, in one write."""
    c.send(enc("PING") + enc(*args) + enc("PING"))
    return [c.reply_raw()[1] for _ in range(3)]


def in_multi(c, args):
    c.send(enc("MULTI") + enc(*args) + enc("EXEC"))
    return [c.reply_raw()[1] for _ in range(3)]


def pttl(port, key):
    with Conn(port) as c:
        return c.cmd("PTTL", key)


def near_rule_ttl(ms):
    return RULE_TTL * 1000 - 5000 < ms <= RULE_TTL * 1000


def ttl_state(ms):
    """-2 missing, -1 no TTL, 1 a TTL: what must match straight and through."""
    return ms if ms < 0 else 1


def unverified_events(path):
    with open(path) as f:
        return [e for e in map(json.loads, f) if e["event"] == "unverified"]


# --------------------------------------------------------------------------
# Protected: the key ends with a TTL, the reply is the server's
# --------------------------------------------------------------------------

# Where the server has no argument that an older table of its kind lacks
# (Redis 7.0, 8.0), only the refusals below apply: these are not collected.
if CASES:
    @pytest.mark.parametrize("send", [alone, pipelined, in_multi],
                             ids=["alone", "pipelined", "in-multi"])
    @pytest.mark.parametrize("case", CASES, ids=repr)
    @PROTOS
    def test_unknown_argument_is_protected(env, case, proto, send):
        redis, proxy = env
        direct, proxied = run_both(redis.port, proxy.port, proto, case, "t:", send)
        assert direct == proxied
        for k in case.written:
            # Inside the client's MULTI the TTL is given right after its EXEC.
            harness.wait_for(lambda: pttl(redis.port, "t:" + k) != -1, 2,
                             "a TTL on t:%s" % k)
            assert near_rule_ttl(pttl(redis.port, "t:" + k)), k
        for k in case.untouched:
            assert pttl(redis.port, "t:" + k) == -1, k      # sources are not given one


    @pytest.mark.parametrize("case", [c for c in CASES if not c.derived], ids=repr)
    def test_protection_is_recorded_as_not_judged(env, case):
        redis, proxy = env
        prepare(redis.port, case, "t:")
        with Conn(proxy.port) as c:
            assert not isinstance(c.cmd(*case.args("t:")), RespError)
        harness.wait_for(lambda: unverified_events(proxy.events), 5, "an unverified event")
        e = unverified_events(proxy.events)[-1]
        assert e["command"] == case.cmd.split()[0]
        assert "t:" + case.written[0] in e["keys"]
        assert "protected" in e["detail"] and "does not know" in e["detail"], e


    @pytest.mark.parametrize("case", [c for c in CASES if c.setup], ids=repr)
    def test_a_key_under_no_rule_is_passed_as_is(env, case):
        """The same command on keys under no prefix: forwarded untouched, the
        key ends as it would straight from the server."""
        redis, proxy = env
        states = []
        for port in (redis.port, proxy.port):
            prepare(redis.port, case, "o:")
            with Conn(port) as c:
                states.append((alone(c, case.args("o:")),
                               [ttl_state(pttl(redis.port, "o:" + k)) for k in case.written]))
        assert states[0] == states[1]


    @pytest.mark.parametrize("case", [c for c in CASES if not c.derived], ids=repr)
    def test_a_durable_key_is_not_given_a_ttl(env, case):
        redis, proxy = env
        prepare(redis.port, case, "d:")
        with Conn(proxy.port) as c:
            assert not isinstance(c.cmd(*case.args("d:")), RespError)
        for k in case.written:
            assert pttl(redis.port, "d:" + k) == -1


# --------------------------------------------------------------------------
# What the server refuses; unknown = log and reject
# --------------------------------------------------------------------------

@pytest.mark.parametrize("case", REFUSED, ids=repr)
@PROTOS
def test_refused_argument_gets_the_server_error(env, case, proto):
    redis, proxy = env
    for send in (alone, pipelined, in_multi):
        direct, proxied = run_both(redis.port, proxy.port, proto, case, "t:", send)
        assert direct == proxied, send.__name__
        if send is alone:
            assert proxied[0].startswith(b"-ERR")
        # Nothing is written; a key that was there without a TTL (leaked
        # under the rule) has the rule's now, as with every MULTI form: its
        # EXPIRE ... NX runs whether the command succeeded or not.
        if case.setup:
            harness.wait_for(lambda: pttl(redis.port, "t:k") != -1, 2, "a TTL on t:k")
            assert near_rule_ttl(pttl(redis.port, "t:k"))
            with Conn(redis.port) as c:
                assert c.cmd("GET", "t:k") == b"v"
        else:
            assert pttl(redis.port, "t:k") == -2


@pytest.mark.parametrize("case", [c for c in CASES if not c.derived] + REFUSED, ids=repr)
def test_unknown_log_forwards_as_sent(env, case):
    """unknown = log: today's pass-through; every key ends as the server
    leaves it straight (SET ... IFNE: without a TTL), and it is recorded."""
    redis, proxy = env
    states = []
    for port in (redis.port, proxy.port):
        prepare(redis.port, case, "l:")
        with Conn(port) as c:
            states.append((alone(c, case.args("l:")),
                           [ttl_state(pttl(redis.port, "l:" + k)) for k in case.written]))
    assert states[0] == states[1]
    harness.wait_for(lambda: unverified_events(proxy.events), 5, "an unverified event")
    e = unverified_events(proxy.events)[-1]
    assert "protected" not in e["detail"] and "does not know" in e["detail"], e


@pytest.mark.parametrize("case", [c for c in CASES if not c.derived] + REFUSED[:1], ids=repr)
def test_unknown_reject_refuses(env, case):
    redis, proxy = env
    prepare(redis.port, case, "j:")
    with Conn(redis.port) as c:
        before = [c.cmd("DUMP", "j:" + k) for k in case.written]
    with Conn(proxy.port) as c:
        r = c.cmd(*case.args("j:"))
    assert isinstance(r, RespError) and r.startswith(b"TTLGUARD "), r
    assert b"unknown = reject" in r and b'ttl "j:"' in r
    with Conn(redis.port) as c:
        assert [c.cmd("DUMP", "j:" + k) for k in case.written] == before
