"""
Commands the table does not know, judged from the backend's own key specs
(proxy/identify.c, proxy/cmdset.c), and the rule option `unknown`, against a
real redis-server with real modules loaded:

  - Redis 7.0.15's own test modules (datatype, keyspecs, hash), built from
    Debian's source package (tests/debsrc.sh bookworm-security redis), and
    ttlgmod, this suite's own module (tests/integration/modules.py), for the
    key spec shapes the 7.0.15 modules lack (no write command of theirs has an
    "unknown" or INCOMPLETE spec);
  - the backend_server event (server, version, source, derived and unjudged
    counts), with and without modules, and after a backend restart;
  - a derived write is never wrapped in the Lua script: outside the client's
    MULTI it gets the rule's TTL atomically (MULTI; cmd; EXPIRE key ttl NX;
    EXEC) whatever its key spec, so a key an OW spec overwrites gets the
    rule's TTL, not its own old expiry back; inside the client's MULTI it is
    queued unchanged and a fix-up runs after EXEC; an RM/DELETE spec and
    read commands are not judged (a read never is, whatever its specs);
    replies are the server's own, byte for byte, in RESP2 and RESP3;
    violation events carry the "classified from the server's key specs"
    detail; writes outside the rules pass unchanged (MONITOR shows the
    client's command alone); up to 8 key specs are judged spec by spec;
  - unjudged derived writes (a spec "unknown" or INCOMPLETE, more than 8
    specs, keys only a getkeys callback knows) and names the server does not
    know: their keys cannot be known, so the strictest `unknown` of every
    rule decides ([default] and every [ttl]; durable rules do not count);
    SWAPDB: [default]'s rule, as it names no key (and the strictest rule of
    the keys of a command that names some), durable keys ignored; unknown = log | allow |
    reject; in a pipeline and inside MULTI; changed by a reload; [default]
    unknown = reject alone;
  - config errors for `unknown`;
  - identification: a client that connects while the proxy is still reading
    the backend's commands waits, so its first module write is judged too.
"""

import datetime
import json
import os
import re
import signal
import subprocess
import time

import pytest

import harness
import modules
from harness import Conn, RespError, Ttlguard, enc, slow, wait_for

TTL = 900
DERIVED_DETAIL = "classified from the server's key specs, not verified by experiment"
DURABLE = '[durable "d:"]\nowner = tests\nreason = durable test data\nrebuild = nothing\n\n'
TEST_MODULES = ("datatype", "keyspecs", "hash")
MODULES = TEST_MODULES + ("ttlgmod",)


# --------------------------------------------------------------------------
# Modules, servers, proxies, events
# --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def module_paths(tmp_path_factory):
    """Redis 7.0.15's test modules and ttlgmod, built once per session. The
    source tree comes from `bash tests/debsrc.sh bookworm-security redis`
    (cached; TTLG_REDIS_SRC may name another unpacked tree), as the test
    command fetches it for Redis's own suite: a tree that cannot be had
    fails the tests that need it, with the reason (it is not a skip)."""
    src, why = modules.source_tree()
    if src is None:
        pytest.fail("the Redis 7.0.15 source tree for the test modules: %s" % why)
    return modules.build(src, MODULES, str(tmp_path_factory.mktemp("modules")))


def module_args(paths, names=MODULES):
    args = []
    for n in names:
        args += ["--loadmodule", paths[n]]
    return args


@pytest.fixture
def modsrv(make_redis, module_paths):
    """A redis-server with datatype, keyspecs, hash and ttlgmod loaded."""
    return make_redis(module_args(module_paths))


def rules(t_unknown=None, default_unknown=None, extra=""):
    """[ttl "t:"] ttl = 900, action = rewrite (and `unknown` when given),
    [durable "d:"], extra, and [default] with `unknown` when given."""
    out = '[ttl "t:"]\nttl = %d\naction = rewrite\n' % TTL
    if t_unknown:
        out += "unknown = %s\n" % t_unknown
    out += "\n" + DURABLE + extra
    if default_unknown:
        out += "[default]\nunknown = %s\n" % default_unknown
    return out


def start(make_proxy, srv, tmp_path, sections, **conf):
    log = os.path.join(str(tmp_path), "events-%d.log" % harness.free_port())
    c = {"events": log, "event_window": 1}
    c.update(conf)
    p = make_proxy(srv, conf=c, sections=sections)
    return p, log


def read_events(path):
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    # A line is written whole; one being written may still lack its newline.
    return [json.loads(line) for line in data.split(b"\n")[:-1] if line]


def of(events, **match):
    return [e for e in events if all(e.get(k) == v for k, v in match.items())]


def wait_event(path, what, **match):
    return wait_for(lambda: of(read_events(path), **match) or None, 5, what)


def backend_server(log, n=1):
    """The n-th backend_server event."""
    return wait_for(lambda: (lambda ev: ev[n - 1] if len(ev) >= n else None)(
        of(read_events(log), event="backend_server")), 10, "backend_server event #%d" % n)


_marks = [0]


def settle(conn, log):
    """Every event the requests sent on conn so far caused: a rewrite of a
    fresh t: key is logged after them (events are written in order)."""
    _marks[0] += 1
    key = "t:marker:%d:%d" % (os.getpid(), _marks[0])
    assert conn.cmd("INCR", key) == 1
    wait_event(log, "the marker's violation", event="violation", key=key)
    return [e for e in read_events(log) if e.get("key") != key]


def raw(conn, *args):
    conn.send(enc(*args))
    return conn.reply_raw()[1]


def pttl(port, key, db=0):
    with Conn(port) as c:
        if db:
            assert c.cmd("SELECT", db) == b"OK"
        return c.cmd("PTTL", key)


def assert_rule_ttl(port, key):
    v = pttl(port, key)
    assert (TTL - 1) * 1000 <= v <= TTL * 1000, "%s: PTTL %r, expected the rule's %ds" % (
        key, v, TTL)


def hello3(conn):
    r = conn.cmd("HELLO", "3")
    assert not isinstance(r, RespError), r


# Why a command is not judged, as the rejection and the unverified event say it.
WHY_DERIVED = "its key specs say too little to judge it"
WHY_UNJUDGED = "not judged by the proxy"
WHY_UNKNOWN = "unknown command"


def rejection(cmd, why, label):
    """The error (without its "-") refusing cmd under rule label's unknown = reject."""
    return RespError(("TTLGUARD %s: %s, and rule %s has unknown = reject: send it straight to "
                      "the server, or set unknown = log in that rule"
                      % (cmd.upper(), why, label)).encode())


def assert_rejected(r, cmd, why, label):
    assert isinstance(r, RespError) and r == rejection(cmd, why, label), r


def rejected_detail(why, label):
    """The unverified event's detail for a command rejected under label."""
    return "%s; rejected (rule %s, unknown = reject)" % (why, label)


def ts_epoch(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class Monitor:
    """MONITOR on the backend: the commands it ran, as argument lists."""

    ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')

    def __init__(self, port):
        self.c = Conn(port)
        assert self.c.cmd("MONITOR") == b"OK"

    def until(self, marker):
        out = []
        while True:
            line = self.c.reply()
            args = [a.decode("unicode_escape").encode("latin-1") for a in self.ARG.findall(line)]
            if args[:2] == [b"echo", marker] or args[:2] == [b"ECHO", marker]:
                return out
            out.append(args)

    def close(self):
        self.c.close()


def monitored(srv, conn, *cmd):
    """Send cmd on conn; (its raw reply, what the backend ran for it)."""
    m = Monitor(srv.port)
    try:
        reply = raw(conn, *cmd)
        marker = b"marker-%d" % harness.free_port()
        assert conn.cmd("ECHO", marker) == marker
        ran = m.until(marker)
    finally:
        m.close()
    # The proxy's own control connection polls now and then: not the client's.
    return reply, [a for a in ran if a and a[0].upper() not in (b"ACL", b"CONFIG", b"PING",
                                                                 b"INFO", b"CLIENT")]


# --------------------------------------------------------------------------
# The premise: what the server says about the modules' commands
# --------------------------------------------------------------------------

def command_info(port, name):
    with Conn(port) as c:
        (e,) = c.cmd("COMMAND", "INFO", name)
    specs = [dict(zip(s[::2], s[1::2])) for s in e[8]]
    for s in specs:
        s[b"begin_search"] = dict(zip(s[b"begin_search"][::2], s[b"begin_search"][1::2]))
        s[b"find_keys"] = dict(zip(s[b"find_keys"][::2], s[b"find_keys"][1::2]))
    return e[2], specs


def test_server_describes_the_module_commands_as_assumed(modsrv):
    """redis-cli COMMAND INFO, checked: the shapes the tests below rely on."""
    flags, specs = command_info(modsrv.port, "datatype.set")
    assert b"write" in flags and len(specs) == 1
    assert specs[0][b"flags"] == [b"RW", b"access", b"update"]    # the legacy (1,1,1) triple

    flags, specs = command_info(modsrv.port, "ttlgmod.bsunknown")
    assert b"write" in flags
    assert [s[b"begin_search"][b"type"] for s in specs] == [b"unknown"]
    flags, specs = command_info(modsrv.port, "ttlgmod.fkunknown")
    assert [(s[b"begin_search"][b"type"], s[b"find_keys"][b"type"]) for s in specs] == \
        [(b"index", b"unknown")]
    flags, specs = command_info(modsrv.port, "ttlgmod.incomplete")
    assert b"incomplete" in specs[0][b"flags"]
    for name, n in (("ttlgmod.fivespecs", 5), ("ttlgmod.eightspecs", 8),
                    ("ttlgmod.ninespecs", 9)):
        flags, specs = command_info(modsrv.port, name)
        assert b"write" in flags and len(specs) == n, name
        assert [s[b"begin_search"][b"spec"] for s in specs] == \
            [[b"index", i] for i in range(1, n + 1)], name
    flags, specs = command_info(modsrv.port, "ttlgmod.readnine")
    assert b"write" not in flags and len(specs) == 9
    assert all(s[b"flags"][0] == b"RO" for s in specs), specs
    flags, specs = command_info(modsrv.port, "ttlgmod.readunknown")
    assert b"write" not in flags
    assert [s[b"begin_search"][b"type"] for s in specs] == [b"unknown"]
    flags, specs = command_info(modsrv.port, "ttlgmod.copyto")
    assert [s[b"flags"][0] for s in specs] == [b"RO", b"OW"]
    flags, specs = command_info(modsrv.port, "ttlgmod.getkeys")
    assert b"write" in flags and b"movablekeys" in flags and specs == []

    # Of keyspecs.c, only kspec.complex2 has more than 4 specs (but fewer than
    # 9); none is a write command and none has an "unknown" or INCOMPLETE spec.
    for name in ("kspec.none", "kspec.nonewithgetkeys", "kspec.tworanges",
                 "kspec.tworangeswithgap", "kspec.keyword", "kspec.complex1", "kspec.complex2"):
        flags, specs = command_info(modsrv.port, name)
        assert b"write" not in flags, name
        for s in specs:
            assert s[b"begin_search"][b"type"] != b"unknown", name
            assert s[b"find_keys"][b"type"] != b"unknown", name
            assert b"incomplete" not in s[b"flags"], name
        assert (len(specs) > 4) == (name == "kspec.complex2"), name
        assert len(specs) <= 8, name


# --------------------------------------------------------------------------
# backend_server
# --------------------------------------------------------------------------

def expected_identity(port):
    name, version = harness.server_identity(port)
    if harness.SERVER_BIN == "redis-server":
        assert (name, version) == ("redis", (7, 0, 15)), "Debian 12's redis-server"
    return name, ".".join(str(v) for v in version)


def test_backend_server_with_modules(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    e = backend_server(log)
    name, version = expected_identity(modsrv.port)
    assert e["server"] == name and e["version"] == version, e
    assert e["source"] == "backend", e
    assert e["table_commands"] > 100, e
    assert e["derived_commands"] > 0, e
    # ttlgmod.bsunknown, fkunknown, incomplete, getkeys and ninespecs: no
    # command of the 7.0.15 test modules, and neither fivespecs nor eightspecs
    assert e["unjudged_commands"] == 5, e
    assert e["level"] == "note" and "unknown decides" in e["message"], e
    assert e["derived_commands"] > e["unjudged_commands"], e


def test_backend_server_without_modules(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path, rules())
    e = backend_server(log)
    name, version = expected_identity(redis_srv.port)
    assert (e["server"], e["version"], e["source"]) == (name, version, "backend"), e
    assert e["derived_commands"] == 0 and e["unjudged_commands"] == 0, e
    assert e["table_commands"] > 100, e
    assert e["level"] == "ok" and "message" not in e, e


def test_derived_count_is_one_row_per_command(modsrv, make_proxy, tmp_path):
    with Conn(modsrv.port) as c:
        names = [n for n in c.cmd("COMMAND", "LIST") if b"." in n]  # no built-in name has one
    assert b"ttlgmod.box|set" in names
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    e = backend_server(log)
    assert e["derived_commands"] == len(names), e


def test_backend_restart_with_modules_is_identified_again(make_redis, module_paths, make_proxy,
                                                          tmp_path):
    srv = make_redis()
    p, log = start(make_proxy, srv, tmp_path, rules())
    assert backend_server(log)["derived_commands"] == 0
    with Conn(p.port) as c:                  # unknown to this server: its own error
        assert raw(c, "ttlgmod.incrbyfloat", "t:a", "1").startswith(b"-ERR unknown command")

    srv.extra_args = module_args(module_paths)
    srv.restart()
    e = backend_server(log, 2)
    assert e["source"] == "backend" and e["derived_commands"] > 0, e

    tries = []

    def judged():
        tries.append("t:b%d" % len(tries))
        try:
            with Conn(p.port) as c:
                return raw(c, "ttlgmod.incrbyfloat", tries[-1], "1") == b"$1\r\n1\r\n"
        except (OSError, EOFError):
            return False
    wait_for(judged, 10, "a session on the restarted backend")
    assert_rule_ttl(srv.port, tries[-1])


# --------------------------------------------------------------------------
# Derived writes under a rewrite rule
# --------------------------------------------------------------------------

# (command, args after the key, effect): each creates or replaces its key.
CREATES = [
    ("datatype.set", ["7", "abc"], "creates-without-ttl"),
    ("hash.set", ["a", "f1", "v1", "f2", "v2"], "creates-without-ttl"),
    ("ttlgmod.incrbyfloat", ["2.25"], "creates-without-ttl"),    # a double in RESP3
    ("ttlgmod.hsetinfo", ["f", "v"], "creates-without-ttl"),     # a map with a bool in RESP3
]


@pytest.mark.parametrize("proto", [2, 3])
def test_derived_create_gets_rule_ttl_and_direct_reply(modsrv, make_proxy, tmp_path, proto):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        if proto == 3:
            hello3(via)
            hello3(direct)
        for i, (cmd, args, effect) in enumerate(CREATES):
            t, o = "t:c%d" % i, "o:c%d" % i
            got, want = raw(via, cmd, t, *args), raw(direct, cmd, o, *args)
            assert got == want, (cmd, got, want)
            assert_rule_ttl(modsrv.port, t)
            # Once more, on the existing key: same reply, the TTL stays.
            got, want = raw(via, cmd, t, *args), raw(direct, cmd, o, *args)
            assert got == want, (cmd, got, want)
            assert_rule_ttl(modsrv.port, t)
        # A derived subcommand: ttlgmod.box set key value (an INSERT spec at argv[2])
        assert raw(via, "ttlgmod.box", "set", "t:box", "v") == \
            raw(direct, "ttlgmod.box", "set", "o:box", "v")
        assert_rule_ttl(modsrv.port, "t:box")
        assert raw(via, "ttlgmod.box", "get", "t:box") == raw(direct, "ttlgmod.box", "get", "o:box")
        # The module's own errors, from inside the transaction, are the client's reply.
        assert raw(via, "datatype.set", "t:bad", "x", "abc") == \
            raw(direct, "datatype.set", "o:bad", "x", "abc")
        assert raw(via, "ttlgmod.incrbyfloat", "t:c3", "1") == \
            raw(direct, "ttlgmod.incrbyfloat", "o:c3", "1")           # WRONGTYPE
        assert raw(via, "hash.set", "t:c1", "a") == raw(direct, "hash.set", "o:c1", "a")  # arity
        ev = settle(via, log)

    for i, (cmd, args, effect) in enumerate(CREATES):
        # (a folded line may name another command's key as its example: match both)
        found = of(ev, event="violation", key="t:c%d" % i, command=cmd.upper())
        assert found, (cmd, ev)
        for e in found:
            assert (e["rule"], e["effect"], e["action"]) == ('ttl "t:"', effect, "rewritten"), e
            assert e["detail"] == DERIVED_DETAIL, e
    e = of(ev, event="violation", key="t:box")
    assert e and e[0]["command"] == "TTLGMOD.BOX" and e[0]["detail"] == DERIVED_DETAIL, e
    for e in of(ev, event="violation", command="INCR"):
        assert "detail" not in e, e            # table commands carry no such detail


def test_derived_create_is_rewritten_atomically(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via:
        reply, ran = monitored(modsrv, via, "datatype.set", "t:k", "1", "abc")
    assert reply == b"+OK\r\n"
    assert ran == [[b"MULTI"], [b"datatype.set", b"t:k", b"1", b"abc"],
                   [b"EXPIRE", b"t:k", b"900", b"NX"], [b"EXEC"]], ran


def test_derived_overwrite_gets_the_rule_ttl(modsrv, make_proxy, tmp_path):
    """An OW spec: no Lua script (its replies could differ from the
    server's), the MULTI form; a key whose TTL the command dropped gets the
    rule's TTL, not its own old expiry back (docs: exact replies first)."""
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(modsrv.port) as d:
        assert d.cmd("SET", "t:src", "hello") == b"OK"
        assert d.cmd("SET", "t:dst", "old", "EX", "100") == b"OK"
        assert d.cmd("SET", "o:src", "hello") == b"OK"
        assert d.cmd("SET", "o:dst", "old", "EX", "100") == b"OK"
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        reply, ran = monitored(modsrv, via, "ttlgmod.copyto", "t:src", "t:dst")
        assert reply == raw(direct, "ttlgmod.copyto", "o:src", "o:dst") == b"+OK\r\n"
        # the module's own GET and SET (RM_Call) show too: the client's command
        # runs in MULTI, the RO source gets no EXPIRE
        assert [a for a in ran if a[0] in (b"MULTI", b"ttlgmod.copyto", b"EXPIRE", b"EXEC",
                                            b"EVAL")] == \
            [[b"MULTI"], [b"ttlgmod.copyto", b"t:src", b"t:dst"],
             [b"EXPIRE", b"t:dst", b"900", b"NX"], [b"EXEC"]], ran
        assert_rule_ttl(modsrv.port, "t:dst")                       # the rule's, not 100 s
        assert pttl(modsrv.port, "o:dst") == -1                     # what the command does
        assert pttl(modsrv.port, "t:src") == -1                     # read, not judged
        assert raw(via, "ttlgmod.copyto", "t:src", "t:new") == b"+OK\r\n"
        assert_rule_ttl(modsrv.port, "t:new")
        # a null reply through MULTI; the source is missing, so nothing is
        # written and t:kept keeps its own TTL (EXPIRE ... NX leaves it)
        assert direct.cmd("SET", "t:kept", "old", "EX", "100") == b"OK"
        assert raw(via, "ttlgmod.copyto", "t:missing", "t:kept") == \
            raw(direct, "ttlgmod.copyto", "o:missing", "o:x") == b"$-1\r\n"
        assert 0 < pttl(modsrv.port, "t:kept") <= 100000            # NX: not touched
        # RESP2: ttlgmod.replace's map, bool and double, as the server says them
        assert direct.cmd("EXPIRE", "t:dst", "100") == 1
        assert raw(via, "ttlgmod.replace", "t:dst", "1.5") == \
            raw(direct, "ttlgmod.replace", "o:dst", "1.5")
        assert_rule_ttl(modsrv.port, "t:dst")
        # noscript (deny-script): no script involved, the same MULTI form
        reply, ran = monitored(modsrv, via, "ttlgmod.replacens", "t:ns", "2.5")
        assert reply == raw(direct, "ttlgmod.replacens", "o:ns", "2.5")
        assert [a for a in ran if a[0] in (b"MULTI", b"ttlgmod.replacens", b"EXPIRE", b"EXEC",
                                            b"EVAL")] == \
            [[b"MULTI"], [b"ttlgmod.replacens", b"t:ns", b"2.5"],
             [b"EXPIRE", b"t:ns", b"900", b"NX"], [b"EXEC"]], ran
        assert_rule_ttl(modsrv.port, "t:ns")
        ev = settle(via, log)
    # (t:new's violation is the same event: folded into a later line)
    e = of(ev, event="violation", key="t:dst", command="TTLGMOD.COPYTO")
    assert e and e[0]["effect"] == "drops-ttl" and e[0]["detail"] == DERIVED_DETAIL, ev
    e = of(ev, event="violation", key="t:dst", command="TTLGMOD.REPLACE")
    assert e and e[0]["effect"] == "drops-ttl" and e[0]["detail"] == DERIVED_DETAIL, ev
    assert not of(ev, key="t:src"), ev                            # the RO source is not judged


def test_derived_overwrite_reply_resp3(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        hello3(via)
        hello3(direct)
        want = raw(direct, "ttlgmod.replace", "o:r", "1.5")
        assert want == b"%2\r\n+replaced\r\n#f\r\n+value\r\n,1.5\r\n"
        got = raw(via, "ttlgmod.replace", "t:r", "1.5")
        assert_rule_ttl(modsrv.port, "t:r")                 # the TTL part works
        assert got == want


def test_derived_create_in_client_multi_resp3(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        hello3(via)
        hello3(direct)
        for c, k in ((via, "t:m"), (direct, "o:m")):
            assert c.cmd("MULTI") == b"OK"
            assert c.cmd("ttlgmod.incrbyfloat", k, "2.5") == b"QUEUED"
        got, want = raw(via, "EXEC"), raw(direct, "EXEC")
        assert want == b"*1\r\n,2.5\r\n"
        assert got == want
        assert_rule_ttl(modsrv.port, "t:m")


@pytest.mark.parametrize("watch", [False, True])
def test_derived_in_client_multi_is_queued_unchanged(modsrv, make_proxy, tmp_path, watch):
    """Inside the client's own MULTI (and after WATCH) the derived writes are
    queued as sent; one fix-up per command (EVAL, its reply swallowed) gives
    the rule's TTL to the keys still without one, right after EXEC."""
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(modsrv.port) as d:
        assert d.cmd("SET", "t:src", "hello") == b"OK"
        assert d.cmd("SET", "t:dst", "old", "EX", "100") == b"OK"
    with Conn(p.port) as via:
        m = Monitor(modsrv.port)
        try:
            if watch:
                assert via.cmd("WATCH", "t:w") == b"OK"
            assert via.cmd("MULTI") == b"OK"
            assert via.cmd("ttlgmod.copyto", "t:src", "t:dst") == b"QUEUED"
            assert via.cmd("ttlgmod.incrbyfloat", "t:m", "2.5") == b"QUEUED"
            assert via.cmd("INCR", "o:n") == b"QUEUED"
            assert raw(via, "EXEC") == b"*3\r\n+OK\r\n$3\r\n2.5\r\n:1\r\n"
            marker = b"marker-%d" % harness.free_port()
            assert via.cmd("ECHO", marker) == marker
            ran = m.until(marker)
        finally:
            m.close()
        assert_rule_ttl(modsrv.port, "t:dst")
        assert_rule_ttl(modsrv.port, "t:m")
        assert pttl(modsrv.port, "o:n") == -1
        assert pttl(modsrv.port, "t:src") == -1
        # the next request sees the fix-ups' replies swallowed
        assert via.cmd("PING") == b"PONG"
    top = [a for a in ran if a[0] in (b"MULTI", b"EXEC", b"EVAL", b"WATCH", b"ttlgmod.copyto",
                                       b"ttlgmod.incrbyfloat", b"INCR")]
    head = [[b"WATCH", b"t:w"]] if watch else []
    assert top[:len(head) + 5] == head + [
        [b"MULTI"], [b"ttlgmod.copyto", b"t:src", b"t:dst"],
        [b"ttlgmod.incrbyfloat", b"t:m", b"2.5"], [b"INCR", b"o:n"], [b"EXEC"]], ran
    fix = top[len(head) + 5:]
    assert [(a[0], a[2:]) for a in fix] == [(b"EVAL", [b"1", b"t:dst", b"900"]),
                                            (b"EVAL", [b"1", b"t:m", b"900"])], ran
    assert not [a for a in ran if a[:1] == [b"EXPIRE"] and a[-1:] == [b"NX"]], ran


@pytest.mark.parametrize("proto", [2, 3])
def test_derived_noscript_overwrite_reply(modsrv, make_proxy, tmp_path, proto):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        if proto == 3:
            hello3(via)
            hello3(direct)
        for _ in range(2):
            assert raw(via, "ttlgmod.replacens", "t:n", "2.5") == \
                raw(direct, "ttlgmod.replacens", "o:n", "2.5")
            assert_rule_ttl(modsrv.port, "t:n")


def test_derived_rm_spec_and_reads_are_not_judged(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject"))
    with Conn(modsrv.port) as d:
        assert d.cmd("SET", "t:gone", "1") == b"OK"
        assert d.cmd("datatype.set", "t:dt", "5", "x") == b"OK"
    with Conn(p.port) as via:
        reply, ran = monitored(modsrv, via, "ttlgmod.del", "t:gone")
        assert reply == b":1\r\n"
        # the module's own DEL (RM_Call) shows before the module command
        assert sorted(ran) == [[b"DEL", b"t:gone"], [b"ttlgmod.del", b"t:gone"]], ran
        assert raw(via, "datatype.get", "t:dt") == b"*2\r\n:5\r\n$1\r\nx\r\n"
        assert raw(via, "ttlgmod.box", "get", "t:dt2") == b"$-1\r\n"
        # keyspecs.c's read commands (kspec.complex2: test_read_is_never_unjudged)
        for cmd in (["kspec.none", "t:a", "1", "t:b", "2"], ["kspec.tworanges", "t:a", "t:b"],
                    ["kspec.keyword", "x", "KEYS", "t:a", "t:b"],
                    ["kspec.complex1", "t:a", "STORE", "t:b", "KEYS", "1", "t:c"]):
            assert raw(via, *cmd) == b"+OK\r\n", cmd
        ev = settle(via, log)
    assert not of(ev, event="violation"), ev
    assert not of(ev, event="unverified"), ev


@pytest.mark.parametrize("default_unknown", ["log", "reject"])
def test_read_is_never_unjudged(modsrv, make_proxy, tmp_path, default_unknown):
    """A read command (no write flag) passes whatever its specs: five
    (kspec.complex2), nine (more than a row keeps), an "unknown" one."""
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject",
                                                      default_unknown=default_unknown))
    with Conn(modsrv.port) as d:
        assert d.cmd("SET", "t:9", "x") == b"OK"
    with Conn(p.port) as via:
        assert raw(via, "kspec.complex2", "t:1", "t:2", "t:3", "0", "STORE", "t:4") == b"+OK\r\n"
        assert raw(via, "ttlgmod.readnine", *["t:%d" % i for i in range(1, 10)]) == b":1\r\n"
        assert raw(via, "ttlgmod.readunknown", "t:9") == b":1\r\n"
        assert raw(via, "ttlgmod.readunknown", "o:9") == b":0\r\n"
        ev = settle(via, log)
    assert not of(ev, event="unverified"), ev
    assert not of(ev, event="violation"), ev


@pytest.mark.parametrize("proto", [2, 3])
def test_module_write_outside_rules_passes_unchanged(modsrv, make_proxy, tmp_path, proto):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        if proto == 3:
            hello3(via)
            hello3(direct)
        for cmd, args, _ in CREATES + [("ttlgmod.replace", ["4.5"], None)]:
            reply, ran = monitored(modsrv, via, cmd, "o:p", *args)
            assert reply == raw(direct, cmd, "o:q", *args), cmd
            assert [a for a in ran if a[0] == cmd.encode()] == \
                [[a.encode() for a in [cmd, "o:p"] + args]], (cmd, ran)
            assert not [a for a in ran if a[0].upper() in (b"MULTI", b"EXEC", b"EXPIRE", b"EVAL")]
            assert pttl(modsrv.port, "o:p") == -1
            assert direct.cmd("DEL", "o:p", "o:q") >= 1
        ev = settle(via, log)
    assert not of(ev, event="violation"), ev
    assert not of(ev, event="unverified"), ev


# --------------------------------------------------------------------------
# Up to 8 key specs: judged spec by spec
# --------------------------------------------------------------------------

@pytest.mark.parametrize("cmd,n", [("ttlgmod.fivespecs", 5), ("ttlgmod.eightspecs", 8)])
def test_up_to_eight_specs_are_judged_spec_by_spec(modsrv, make_proxy, tmp_path, cmd, n):
    """Every spec's key is judged, the last one too: t: keys get the rule's
    TTL in the MULTI form; default and durable keys are left alone; nothing
    is unjudged, whatever `unknown` says."""
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject",
                                                      default_unknown="reject"))
    keys = ["o:1", "d:2", "t:3"] + ["d:%d" % i for i in range(4, n)] + ["t:%d" % n]
    with Conn(p.port) as via:
        reply, ran = monitored(modsrv, via, cmd, *keys)
        assert reply == b"+OK\r\n"
        assert [a for a in ran if a[0] in (b"MULTI", cmd.encode(), b"EXPIRE", b"EXEC",
                                            b"EVAL")] == \
            [[b"MULTI"], [cmd.encode()] + [k.encode() for k in keys],
             [b"EXPIRE", b"t:3", b"900", b"NX"], [b"EXPIRE", b"t:%d" % n, b"900", b"NX"],
             [b"EXEC"]], ran
        assert_rule_ttl(modsrv.port, "t:3")
        assert_rule_ttl(modsrv.port, "t:%d" % n)
        for k in ("o:1", "d:2", "d:%d" % (n - 1)):
            assert pttl(modsrv.port, k) == -1, k
        ev = settle(via, log)
    assert not of(ev, event="unverified"), ev
    # (t:N's violation is the same event as t:3's: folded into a later line)
    v = of(ev, event="violation", command=cmd.upper())
    assert v and v[0]["key"] == "t:3", ev
    assert all((e["rule"], e["effect"], e["action"], e["detail"]) ==
               ('ttl "t:"', "creates-without-ttl", "rewritten", DERIVED_DETAIL) for e in v), v


def test_ninth_spec_makes_it_unjudged(modsrv, make_proxy, tmp_path):
    """Nine specs, more than a row keeps: unjudged, even when the first
    eight keys are durable; the ninth key is not judged either."""
    keys = ["d:%d" % i for i in range(1, 9)] + ["t:9"]
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("ttlgmod.ninespecs", *keys), "ttlgmod.ninespecs", WHY_DERIVED,
                        'ttl "t:"')
        assert pttl(modsrv.port, "d:1") == -2 and pttl(modsrv.port, "t:9") == -2

    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via:
        assert raw(via, "ttlgmod.ninespecs", *keys) == b"+OK\r\n"
        assert pttl(modsrv.port, "t:9") == -1               # forwarded unchanged
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="TTLGMOD.NINESPECS")
    assert u["detail"] == WHY_DERIVED, u
    assert not of(ev, event="violation", command="TTLGMOD.NINESPECS"), ev


# --------------------------------------------------------------------------
# unknown = log | reject | allow for unjudged derived commands
# --------------------------------------------------------------------------

# Unjudged derived writes: whatever keys they name, those keys cannot be
# known, so the strictest `unknown` of every rule decides.
UNJUDGED = [
    ("ttlgmod.bsunknown", ["t:b", "v"], "t:b"),                   # begin_search unknown
    ("ttlgmod.fkunknown", ["t:k", "v"], "t:k"),                   # find_keys unknown
    ("ttlgmod.incomplete", ["t:i", "v"], "t:i"),                  # INCOMPLETE
    ("ttlgmod.getkeys", ["t:g", "v"], "t:g"),                     # movablekeys, no key specs
    ("ttlgmod.ninespecs", ["t:n%d" % i for i in range(1, 10)], "t:n1"),   # nine specs
]


def under_default(args):
    """The same arguments, the keys under no prefix rule."""
    return [a.replace("t:", "o:") for a in args]


@pytest.mark.parametrize("cmd,args,key", UNJUDGED)
def test_unjudged_logged_by_default(modsrv, make_proxy, tmp_path, cmd, args, key):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via, Conn(modsrv.port) as direct:
        assert raw(via, cmd, *args) == raw(direct, cmd, *under_default(args)) == b"+OK\r\n"
        assert pttl(modsrv.port, key) == -1              # forwarded unchanged
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command=cmd.upper())
    assert u["detail"] == WHY_DERIVED, u
    assert not of(ev, event="violation", command=cmd.upper()), ev


@pytest.mark.parametrize("cmd,args,key", UNJUDGED)
def test_unjudged_rejected_by_rule(modsrv, make_proxy, tmp_path, cmd, args, key):
    """[ttl "t:"] unknown = reject refuses it, on t: keys and on keys under
    no prefix alike ([default] only logs): its keys cannot be known."""
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd(cmd, *args), cmd, WHY_DERIVED, 'ttl "t:"')
        assert pttl(modsrv.port, key) == -2                  # nothing ran
        assert via.cmd("PING") == b"PONG"                    # the session goes on
        ev = settle(via, log)
        (u,) = of(ev, event="unverified", command=cmd.upper())
        assert u["detail"] == rejected_detail(WHY_DERIVED, 'ttl "t:"'), u

        assert_rejected(via.cmd(cmd, *under_default(args)), cmd, WHY_DERIVED, 'ttl "t:"')
        assert pttl(modsrv.port, key.replace("t:", "o:")) == -2
        ev = settle(via, log)
    # (the second rejection may be folded into the first's event)
    u = of(ev, event="unverified", command=cmd.upper())
    assert u and all(x["detail"] == rejected_detail(WHY_DERIVED, 'ttl "t:"') for x in u), u


@pytest.mark.parametrize("cmd,args,key", UNJUDGED)
def test_unjudged_allowed_silently(modsrv, make_proxy, tmp_path, cmd, args, key):
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="allow", default_unknown="allow"))
    with Conn(p.port) as via:
        assert raw(via, cmd, *args) == b"+OK\r\n"
        assert raw(via, cmd, *under_default(args)) == b"+OK\r\n"
        assert pttl(modsrv.port, key) == -1
        ev = settle(via, log)
    assert not of(ev, event="unverified"), ev


def test_unjudged_strictest_of_every_rule(modsrv, make_proxy, tmp_path):
    """`ttlgmod.bsunknown x v`: x is under no prefix, yet the strictest
    `unknown` of [default] and every [ttl] rule decides; durable rules do not
    count, nor do durable keys."""
    u_rule = '[ttl "u:"]\nttl = 60\nunknown = %s\n\n'

    # [default] logs, [ttl "t:"] rejects: rejected, naming t:
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject", default_unknown="log"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("ttlgmod.bsunknown", "x", "v"), "ttlgmod.bsunknown",
                        WHY_DERIVED, 'ttl "t:"')
        assert pttl(modsrv.port, "x") == -2
        # a durable key does not let it through
        assert_rejected(via.cmd("ttlgmod.fkunknown", "d:x", "v"), "ttlgmod.fkunknown",
                        WHY_DERIVED, 'ttl "t:"')
        assert pttl(modsrv.port, "d:x") == -2
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="TTLGMOD.BSUNKNOWN")
    assert u["detail"] == rejected_detail(WHY_DERIVED, 'ttl "t:"'), u

    # [default] rejects, t: allows: rejected, naming default
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="allow", default_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("ttlgmod.bsunknown", "t:b2", "v"), "ttlgmod.bsunknown",
                        WHY_DERIVED, "default")
        assert pttl(modsrv.port, "t:b2") == -2
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="TTLGMOD.BSUNKNOWN")
    assert u["detail"] == rejected_detail(WHY_DERIVED, "default"), u

    # a second [ttl] rule that rejects, no key under it: rejected, naming it
    p, log = start(make_proxy, modsrv, tmp_path,
                   rules(t_unknown="log", default_unknown="allow", extra=u_rule % "reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("ttlgmod.incomplete", "t:i", "v"), "ttlgmod.incomplete",
                        WHY_DERIVED, 'ttl "u:"')
        assert pttl(modsrv.port, "t:i") == -2

    # everything allows but u:, which logs: forwarded and logged
    p, log = start(make_proxy, modsrv, tmp_path,
                   rules(t_unknown="allow", default_unknown="allow", extra=u_rule % "log"))
    with Conn(p.port) as via:
        assert raw(via, "ttlgmod.bsunknown", "x2", "v") == b"+OK\r\n"
        assert pttl(modsrv.port, "x2") == -1
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="TTLGMOD.BSUNKNOWN")
    assert u["detail"] == WHY_DERIVED, u


def test_unjudged_incomplete_spec_strictest_rule(modsrv, make_proxy, tmp_path):
    """An INCOMPLETE spec may miss keys: the key it does name (t:i, or o:i
    under [default], which only logs) does not decide; the strictest rule
    does, and nothing runs."""
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject"))
    with Conn(p.port) as via:
        for key in ("t:i", "o:i"):
            assert_rejected(via.cmd("ttlgmod.incomplete", key, "v"), "ttlgmod.incomplete",
                            WHY_DERIVED, 'ttl "t:"')
            assert pttl(modsrv.port, key) == -2, key


def test_unjudged_command_name_is_no_key(modsrv, make_proxy, tmp_path):
    """With [durable "ttlgmod."] neither the command's name nor any argument
    counts as a durable key: [default] unknown = reject decides."""
    extra = '[durable "ttlgmod."]\nowner = o\nreason = r\nrebuild = b\n\n'
    p, log = start(make_proxy, modsrv, tmp_path, rules(default_unknown="reject", extra=extra))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("ttlgmod.bsunknown", "x", "v"), "ttlgmod.bsunknown",
                        WHY_DERIVED, "default")
        assert_rejected(via.cmd("ttlgmod.bsunknown", "ttlgmod.x", "v"), "ttlgmod.bsunknown",
                        WHY_DERIVED, "default")
        assert pttl(modsrv.port, "x") == -2 and pttl(modsrv.port, "ttlgmod.x") == -2


def test_getkeys_api_write_is_unjudged(modsrv, make_proxy, tmp_path):
    """A write whose keys only its getkeys-api callback knows (write,
    movablekeys, no key specs): unjudged, not a command without keys."""
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via:
        assert raw(via, "ttlgmod.getkeys", "t:g", "v") == b"+OK\r\n"
        assert pttl(modsrv.port, "t:g") == -1
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="TTLGMOD.GETKEYS")
    assert u["detail"] == WHY_DERIVED, u

    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("ttlgmod.getkeys", "t:g2", "v"), "ttlgmod.getkeys",
                        WHY_DERIVED, 'ttl "t:"')
        assert pttl(modsrv.port, "t:g2") == -2


NINE = ["t:1"] + ["o:%d" % i for i in range(2, 10)]


def test_unjudged_in_pipeline_and_multi(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules(t_unknown="reject"))
    with Conn(p.port) as via:
        via.send(enc("SET", "o:a", "1") + enc("ttlgmod.ninespecs", *NINE)
                 + enc("INCR", "t:n") + enc("PING"))
        r = via.replies(4)
        assert r[0] == b"OK" and r[2] == 1 and r[3] == b"PONG", r
        assert_rejected(r[1], "ttlgmod.ninespecs", WHY_DERIVED, 'ttl "t:"')
        assert_rule_ttl(modsrv.port, "t:n")

        assert via.cmd("MULTI") == b"OK"
        assert via.cmd("SET", "o:m", "1") == b"QUEUED"
        assert_rejected(via.cmd("ttlgmod.ninespecs", *NINE), "ttlgmod.ninespecs", WHY_DERIVED,
                        'ttl "t:"')
        assert via.cmd("EXEC") == RespError(b"EXECABORT Transaction discarded because of "
                                            b"previous errors.")
        assert pttl(modsrv.port, "o:m") == -2 and pttl(modsrv.port, "o:2") == -2


def test_reload_changes_unknown(modsrv, make_proxy, tmp_path):
    p, log = start(make_proxy, modsrv, tmp_path, rules())
    with Conn(p.port) as via:
        assert raw(via, "ttlgmod.ninespecs", *NINE) == b"+OK\r\n"
        text = open(p.config_path).read()
        with open(p.config_path, "w") as f:
            f.write(text.replace("action = rewrite\n", "action = rewrite\nunknown = reject\n", 1))
        p.send_signal(signal.SIGHUP)
        wait_event(log, "config_reloaded", event="config_reloaded")
        assert via.cmd("DEL", *NINE) == 9
        assert_rejected(via.cmd("ttlgmod.ninespecs", *NINE), "ttlgmod.ninespecs", WHY_DERIVED,
                        'ttl "t:"')

        with open(p.config_path, "w") as f:
            f.write(text.replace("action = rewrite\n", "action = rewrite\nunknown = sometimes\n"))
        p.send_signal(signal.SIGHUP)
        (e,) = wait_event(log, "config_rejected", event="config_rejected")
        assert "unknown = 'sometimes': expected protect, log, allow or reject" in e["reason"], e
        # the running config stays
        assert_rejected(via.cmd("ttlgmod.ninespecs", *NINE), "ttlgmod.ninespecs", WHY_DERIVED,
                        'ttl "t:"')
        assert pttl(modsrv.port, "t:1") == -2


# --------------------------------------------------------------------------
# unknown for commands without keys, unknown names, COPY ... DB
# --------------------------------------------------------------------------

def test_swapdb_default_unknown(redis_srv, make_proxy, tmp_path):
    with Conn(redis_srv.port) as d:
        assert d.cmd("SET", "o:db0", "here") == b"OK"
    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="allow",
                                                          default_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("SWAPDB", "0", "1"), "SWAPDB", WHY_UNJUDGED, "default")
        assert via.cmd("GET", "o:db0") == b"here"            # not swapped
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="SWAPDB")
    assert u["detail"] == rejected_detail(WHY_UNJUDGED, "default"), u

    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="reject",
                                                          default_unknown="log"))
    with Conn(p.port) as via:
        assert via.cmd("SWAPDB", "0", "1") == b"OK"          # no keys: [default] decides
        assert via.cmd("GET", "o:db0") is None
        assert via.cmd("SWAPDB", "0", "1") == b"OK"
        ev = settle(via, log)
    u = of(ev, event="unverified", command="SWAPDB")
    assert u and u[0]["detail"] == WHY_UNJUDGED, ev

    p, log = start(make_proxy, redis_srv, tmp_path, rules(default_unknown="allow"))
    with Conn(p.port) as via:
        assert via.cmd("SWAPDB", "0", "1") == b"OK"
        ev = settle(via, log)
    assert not of(ev, event="unverified"), ev


def test_unknown_name_default_unknown(redis_srv, make_proxy, tmp_path):
    with Conn(redis_srv.port) as d:
        want = raw(d, "NOSUCHCMD", "a", "b")
    assert want.startswith(b"-ERR unknown command 'NOSUCHCMD'")

    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="allow",
                                                          default_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("NOSUCHCMD", "a", "b"), "NOSUCHCMD", WHY_UNKNOWN, "default")
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="NOSUCHCMD")
    assert u["detail"] == "unknown command; rejected (rule default, unknown = reject)", u

    # its keys cannot be known: the strictest rule of all decides, here t:'s
    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="reject"))
    with Conn(p.port) as via:
        assert_rejected(via.cmd("NOSUCHCMD", "a", "b"), "NOSUCHCMD", WHY_UNKNOWN, 'ttl "t:"')
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="NOSUCHCMD")
    assert u["detail"] == rejected_detail(WHY_UNKNOWN, 'ttl "t:"'), u

    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="log"))
    with Conn(p.port) as via:
        assert raw(via, "NOSUCHCMD", "a", "b") == want       # the server's own error
        ev = settle(via, log)
    (u,) = of(ev, event="unverified", command="NOSUCHCMD")
    assert u["detail"] == "unknown command", u

    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="allow",
                                                          default_unknown="allow"))
    with Conn(p.port) as via:
        assert raw(via, "NOSUCHCMD", "a", "b") == want
        ev = settle(via, log)
    assert not of(ev, event="unverified"), ev


def test_default_unknown_reject_alone(modsrv, make_proxy, tmp_path):
    """No prefix rule, [default] action = allow: unknown = reject still
    refuses what cannot be judged; everything else passes as it is."""
    with Conn(modsrv.port) as d:
        assert d.cmd("SET", "o:db0", "here") == b"OK"
    p, log = start(make_proxy, modsrv, tmp_path, "[default]\nunknown = reject\n")
    with Conn(p.port) as via:
        assert_rejected(via.cmd("SWAPDB", "0", "1"), "SWAPDB", WHY_UNJUDGED, "default")
        assert via.cmd("GET", "o:db0") == b"here"            # not swapped
        assert_rejected(via.cmd("NOSUCHCMD", "a"), "NOSUCHCMD", WHY_UNKNOWN, "default")
        assert_rejected(via.cmd("ttlgmod.bsunknown", "x", "v"), "ttlgmod.bsunknown",
                        WHY_DERIVED, "default")
        assert pttl(modsrv.port, "x") == -2
        # judged commands: allowed, unchanged
        assert raw(via, "ttlgmod.incrbyfloat", "o:f", "1") == b"$1\r\n1\r\n"
        assert via.cmd("SET", "o:s", "v") == b"OK"
        assert pttl(modsrv.port, "o:f") == -1 and pttl(modsrv.port, "o:s") == -1


def test_copy_db_is_judged_not_unknown(redis_srv, make_proxy, tmp_path):
    """COPY ... DB n was unjudged once; now the copy is judged where it lands
    (test_carry.py), so `unknown = reject` no longer refuses it."""
    with Conn(redis_srv.port) as d:
        for k in ("o:src", "d:src"):
            assert d.cmd("SET", k, "v") == b"OK"
    p, log = start(make_proxy, redis_srv, tmp_path, rules(t_unknown="reject",
                                                          default_unknown="reject"))
    with Conn(p.port) as via:
        assert via.cmd("COPY", "o:src", "t:dst", "DB", "1") == 1
        assert via.cmd("COPY", "d:src", "o:dst", "DB", "1") == 1
        ev = settle(via, log)
    assert 0 < pttl(redis_srv.port, "t:dst", db=1) <= TTL * 1000
    assert pttl(redis_srv.port, "o:dst", db=1) == -1
    assert not of(ev, event="unverified"), ev


# --------------------------------------------------------------------------
# Config errors
# --------------------------------------------------------------------------

def check_config(tmp_path, text):
    path = os.path.join(str(tmp_path), "c%d.ini" % harness.free_port())
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=slow(20))
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace"), path


@pytest.mark.parametrize("text,line,what", [
    ('[ttl "t:"]\nttl = 900\nunknown = maybe\n', 3, "unknown = 'maybe': expected protect, log, allow or reject"),
    ('[proxy]\nlisten = 127.0.0.1:1\n\n[default]\naction = log\nunknown = maybe\n', 6,
     "unknown = 'maybe': expected protect, log, allow or reject"),
    ('[default]\nunknown = Reject\n', 2, "unknown = 'Reject': expected protect, log, allow or reject"),
    ('[default]\nunknown =\n', 2, "unknown = '': expected protect, log, allow or reject"),
    ('[ttl "t:"]\nttl = 9\nunknown = log\nunknown = reject\n', 4,
     "unknown set twice in [ttl \"t:\"] (first at line 3)"),
    (DURABLE.replace("rebuild = nothing\n", "rebuild = nothing\nunknown = reject\n"), 5,
     "unknown key 'unknown' in [durable \"d:\"]"),
    ('[proxy]\nunknown = reject\n', 2, "unknown key 'unknown' in [proxy]"),
])
def test_config_errors(tmp_path, text, line, what):
    harness.need_binary()
    rc, out, path = check_config(tmp_path, text)
    assert rc == 1, out
    assert "%s:%d: %s" % (path, line, what) in out, out


@pytest.mark.parametrize("value", ["allow", "log", "reject"])
def test_config_accepts_unknown(tmp_path, value):
    harness.need_binary()
    rc, out, _ = check_config(tmp_path, '[ttl "t:"]\nttl = 9\nunknown = %s\n\n[default]\n'
                                        'unknown = %s\n' % (value, value))
    assert rc == 0, out


# --------------------------------------------------------------------------
# Identification: the first request waits for the backend's commands
# --------------------------------------------------------------------------

def spawn(tmp_path, srv, sections, log):
    """ttlguard started without waiting for it to answer (Ttlguard.start
    would wait for PING, i.e. for identification)."""
    p = Ttlguard(tmp_path, srv.port, {"events": log, "event_window": 1}, sections=sections)
    p.stderr_file = open(p.stderr_path, "ab")
    p.proc = subprocess.Popen(p.command(), stdin=subprocess.DEVNULL, stdout=p.stderr_file,
                              stderr=p.stderr_file, env=p.env,
                              preexec_fn=harness._die_with_parent)
    return p


def connect_asap(p):
    deadline = time.monotonic() + slow(10)
    while True:
        try:
            return Conn(p.port)
        except ConnectionRefusedError:
            if p.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("ttlguard never listened:\n" + p.stderr())
            time.sleep(0.001)


@pytest.mark.parametrize("pause_ms", [0, 300])
def test_first_request_waits_for_identification(modsrv, tmp_path, pause_ms):
    """Started and used at once, a few times: the first requests (a module
    write, then INCR, pipelined) are judged by the backend's own commands.
    With pause_ms the backend holds every reply (CLIENT PAUSE ALL) so the
    client surely comes first; without, it is the natural race."""
    tries = 4 if pause_ms == 0 else 2
    raced = 0
    for i in range(tries):
        log = os.path.join(str(tmp_path), "events-%d-%d.log" % (pause_ms, i))
        mod_key, incr_key = "t:w:%d:%d" % (pause_ms, i), "t:i:%d:%d" % (pause_ms, i)
        if pause_ms:
            with Conn(modsrv.port) as d:
                assert d.cmd("CLIENT", "PAUSE", pause_ms, "ALL") == b"OK"
        p = spawn(tmp_path, modsrv, rules(), log)
        try:
            with connect_asap(p) as c:
                c.send(enc("ttlgmod.incrbyfloat", mod_key, "1") + enc("INCR", incr_key))
                sent = time.time()
                assert c.replies(2, timeout=10) == [b"1", 1]
            assert_rule_ttl(modsrv.port, mod_key)
            assert_rule_ttl(modsrv.port, incr_key)
            e = backend_server(log)
            assert e["derived_commands"] > 0, e
            if sent < ts_epoch(e["ts"]):
                raced += 1
            v = wait_event(log, "the module write's violation", event="violation", key=mod_key)
            assert v[0]["detail"] == DERIVED_DETAIL, v
        finally:
            rc = p.stop()
            assert rc == 0, p.stderr()
    if pause_ms:
        assert raced == tries, "the requests were sent before identification finished"
