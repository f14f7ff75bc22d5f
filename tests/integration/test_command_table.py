"""
The command table (`ttlguard commands --server NAME:VERSION`, proxy/commands.c)
against a real server, whichever it is (Redis 7.0.15, 8.0.6, 8.6.3, Valkey
8.1.1, 9.1.2: tests/servers.sh):

  - every command the server flags `write` (subcommands included) and every
    blocking one is in the table, with the server's arity and flags, and with
    the server's key specs;
  - every name the server knows is known to the table, and no other name the
    table has for some server;
  - what the table says each write does to each key's TTL is what the server
    does, by experiment (tools/probe_ttl_effects.py: the cases this server
    has), and every effect of every key role in the table is exercised by at
    least one experiment;
  - the table refuses (-1) exactly the arguments the server refuses;
  - no row is one taken from the documentation alone (flag "documented"):
    those are for releases newer than every server verified here.

A server newer than the table (a Debian suite that moved on, tests/servers.sh;
or the table held back to an older release with TTLG_TABLE_VERIFIED, which is
how this mode is tested: Redis 8.6.3 behind the table of 8.0.6) is tested for
what the proxy then promises instead: `ttlguard commands` says the server is
newer; every write command without a row has key specs the proxy can follow
(it derives the row at run time); what the table would refuse is "not
judged" (-2, never -1 for what the server accepts), which the rule option
`unknown = protect` covers; every key an experiment writes is one the table
judges or the server's own COMMAND GETKEYS names; the flags of the rows it
has still agree (an argument count may not).

The server: the one on TTLG_REDIS_PORT when set, else one started here
(harness.SERVER_BIN: TTLG_REDIS_SERVER, default redis-server). What it is comes
from its INFO server (harness.server_identity(): Valkey reports
redis_version:7.2.4, its own version is valkey_version), and the table is asked
for that server: `ttlguard commands --server KIND:VERSION`, `command_eval
--server KIND:VERSION`. The table's per-argv answers come from
tools/command_eval.c: TTLG_COMMAND_EVAL, else command_eval next to TTLG_BIN,
else built here against the libttlguard_core.a next to TTLG_BIN.
"""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tools"))

import harness  # noqa: E402
import probe_ttl_effects as probe  # noqa: E402

SCRIPTS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}
# The flag words of `ttlguard commands` (proxy/commands.h).
FLAGS = {"write", "blocking", "script", "unverified", "expire", "noscript", "derived",
         "unjudged", "partial", "documented", "wideint"}
EXPIRES = {"expire", "pexpire", "expireat", "pexpireat"}
UNVERIFIED_AT_LEAST = {"swapdb"}
# Containers with write subcommands, on the servers that have those.
CONTAINERS_WITH_WRITES = {"xgroup": probe.EVERY, "function": probe.EVERY, "cluster": probe.V90}


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    if os.environ.get("TTLG_REDIS_PORT"):
        yield int(os.environ["TTLG_REDIS_PORT"])
        return
    srv = harness.RedisServer(tmp_path_factory.mktemp("command-table")).start()
    yield srv.port
    srv.stop()


@pytest.fixture(scope="module")
def server_id(redis_port):
    """("redis", (7, 0, 15)), ("valkey", (9, 1, 2)), ..."""
    return harness.server_identity(redis_port)


@pytest.fixture(scope="module")
def server_arg(server_id):
    """"redis:7.0.15", "valkey:9.1.2": for ttlguard and command_eval."""
    return probe.server_arg(server_id)


def _raw(redis_port, *args):
    import redis
    r = redis.Redis(host="127.0.0.1", port=redis_port, socket_timeout=harness.slow(10))
    conn = r.connection_pool.get_connection(args[0])
    try:
        # Raw: redis-py's COMMAND reply callback drops the key specs.
        conn.send_command(*args)
        return conn.read_response()
    finally:
        r.connection_pool.release(conn)
        r.close()


@pytest.fixture(scope="module")
def server_commands(redis_port):
    """{name: Cmd} for every command and subcommand ("xgroup|create"); names
    lowercase (Redis 8 names its vector set commands "VADD", ...)."""
    out = {}

    def walk(entry):
        name, arity, flags, _first, _last, _step, _acl, _tips, specs, subs = entry[:10]
        name = name.decode().lower()
        out[name] = ServerCommand(name, arity, {f.decode() for f in flags}, specs)
        for s in subs:
            walk(s)

    for entry in _raw(redis_port, "COMMAND"):
        walk(entry)
    return out


@pytest.fixture(scope="module")
def server_names(redis_port):
    """COMMAND LIST, lowercase: the top-level names the server knows (it lists
    subcommands too: "config|get")."""
    return {n.decode().lower() for n in _raw(redis_port, "COMMAND", "LIST") if b"|" not in n}


def table_output(server_arg):
    """(stdout, stderr) of `ttlguard commands --server KIND:VERSION`."""
    if not os.path.exists(harness.TTLG_BIN):
        msg = "ttlguard binary %s does not exist (build it or set TTLG_BIN)" % harness.TTLG_BIN
        if harness.TTLG_BIN_EXPLICIT:
            pytest.fail(msg)
        pytest.skip(msg)
    p = subprocess.run([harness.TTLG_BIN, "commands", "--server", server_arg],
                       capture_output=True, text=True, timeout=harness.slow(10), check=True)
    return p.stdout, p.stderr


@pytest.fixture(scope="module")
def table(server_arg):
    """{name: Row} from `ttlguard commands --server KIND:VERSION`."""
    out, _ = table_output(server_arg)
    rows = {}
    for line in out.splitlines():
        row = Row(line)
        assert row.name not in rows, "%s printed twice" % row.name
        rows[row.name] = row
    assert rows, "`ttlguard commands --server %s` printed nothing" % server_arg
    return rows


@pytest.fixture(scope="module")
def newer(server_arg):
    """The server is newer than the table (a Debian suite moved on, or
    TTLG_TABLE_VERIFIED holds the table back): `ttlguard commands` says so.
    The table then need not cover the server, only never let a write pass
    that the proxy can neither judge nor protect (see the module doc)."""
    return "is newer than the command table" in table_output(server_arg)[1]


@pytest.fixture(scope="module")
def command_eval(tmp_path_factory):
    if os.environ.get("TTLG_COMMAND_EVAL"):
        return os.environ["TTLG_COMMAND_EVAL"]
    built = os.path.join(os.path.dirname(harness.TTLG_BIN), "command_eval")
    if os.path.exists(built):
        return built
    lib = os.path.join(os.path.dirname(harness.TTLG_BIN), "libttlguard_core.a")
    if not os.path.exists(lib):
        msg = "%s does not exist (build ttlguard or set TTLG_COMMAND_EVAL)" % lib
        if harness.TTLG_BIN_EXPLICIT:
            pytest.fail(msg)
        pytest.skip(msg)
    return probe.build_command_eval(lib, str(tmp_path_factory.mktemp("command-eval")))


@pytest.fixture(scope="module")
def prober(redis_port, server_id):
    p = probe.Probe(redis_port)
    assert p.server == server_id, (p.server, server_id)
    yield p
    p.close()


@pytest.fixture(scope="module")
def probe_results(prober, command_eval, server_id, newer):
    results = probe.run_cases(prober, command_eval, server=server_id, newer=newer)
    assert results, "no experiment applies to %s" % (server_id,)
    return results


@pytest.fixture(scope="module")
def syntax_results(prober, command_eval, server_id, newer):
    return probe.run_syntax(prober, command_eval, server=server_id, newer=newer)


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

def pairs(flat):
    """["a", 1, "b", 2] -> {"a": 1, "b": 2}, names decoded."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


class ServerCommand:
    def __init__(self, name, arity, flags, specs):
        self.name, self.arity, self.flags = name, arity, flags
        self.specs = [pairs(s) for s in specs]

    def spec_where(self, spec):
        """A key spec in `ttlguard commands` notation (commands.h); None for
        "unknown"."""
        bs, fk = pairs(spec["begin_search"]), pairs(spec["find_keys"])
        bs_spec, fk_spec = pairs(bs["spec"]), pairs(fk["spec"])
        kind = bs["type"].decode()
        if kind == "index":
            where = "%d" % bs_spec["index"]
        elif kind == "keyword":
            where = "after(%s,%d)" % (bs_spec["keyword"].decode(), bs_spec["startfrom"])
        else:
            return None
        if fk["type"] == b"keynum":
            # N+numkeys, N+numkeys(keynumidx,firstkey); "/S": every S-th (MSETEX:
            # 1+numkeys/2, a key every other argument)
            if (fk_spec["keynumidx"], fk_spec["firstkey"]) == (0, 1):
                where += "+numkeys"
            else:
                where += "+numkeys(%d,%d)" % (fk_spec["keynumidx"], fk_spec["firstkey"])
            if fk_spec["keystep"] != 1:
                where += "/%d" % fk_spec["keystep"]
            return where
        if fk["type"] != b"range":
            return None
        if fk_spec["lastkey"] != 0:
            where += "..%d" % fk_spec["lastkey"]
        if fk_spec["keystep"] != 1:
            where += "/%d" % fk_spec["keystep"]
        if fk_spec["limit"] != 0:
            where += "%%%d" % fk_spec["limit"]
        return where

    def spec_flags(self, spec):
        return {f.decode() for f in spec["flags"]}


class Row:
    """One line of `ttlguard commands`: name arity flags role@where:effects..."""

    def __init__(self, line):
        words = line.split()
        assert len(words) >= 3, "bad line %r" % line
        self.name, self.arity = words[0], int(words[1])
        self.flags = set() if words[2] == "-" else set(words[2].split(","))
        assert self.flags <= FLAGS, "unknown flags %s in %r" % (self.flags - FLAGS, line)
        self.roles = []
        for w in words[3:]:
            role, rest = w.split("@", 1)
            where, effects = rest.rsplit(":", 1)
            self.roles.append((role, where, effects.split("|")))


def subcommands(server, name):
    return [c for n, c in server.items() if n.startswith(name + "|")]


def server_flags(server, name, table):
    """The flags the table's row must have, from the server's.

    A command: its own. A container: the union of its subcommands'; the
    server gives the container itself no flags (CLUSTER's are empty).

    A container flagged `partial` (CLUSTER: the table lists only its write
    subcommands; command_keys() calls any other subcommand a read, no keys):
    the union of the server's write subcommands' flags only. That is what the
    proxy can honestly claim. The container's flags apply to every argv of
    it, but for an unlisted subcommand there are no keys, so nothing is
    rewritten and `write` and `noscript` change nothing (CLUSTER RESET is
    noscript; counting it would make the row say something about writes
    the proxy never wraps). `blocking` does change something (the session
    leaves a shared connection) whatever the keys: so a partial container
    must list every blocking subcommand too, which
    test_every_blocking_command_is_in_the_table checks (subcommands
    included), as test_every_write_command_is_in_the_table does for write
    ones; test_containers lists the rest."""
    subs = subcommands(server, name)
    if subs and "partial" in table[name].flags:
        subs = [s for s in subs if "write" in s.flags]
    if subs:
        return set().union(*(s.flags for s in subs))
    return server[name].flags


def table_names():
    """Every name proxy/commands.c's known_names[] has, for any server."""
    with open(os.path.join(harness.REPO, "proxy", "commands.c")) as f:
        src = f.read()
    start = src.index("known_names[] = {")
    names = set(re.findall(r'"([^"|]+)"', src[start:src.index("};", start)]))
    assert len(names) > 200, "cannot read known_names[] from proxy/commands.c"
    return names


# ---------------------------------------------------------------------------
# Completeness and flags
# ---------------------------------------------------------------------------

def derivable(cmd):
    """The proxy can find the keys of a command without a row from the
    server's own key specs (COMMAND INFO): it has some, none of them
    "unknown" or INCOMPLETE, or it names no key at all."""
    if not cmd.specs:
        return "movablekeys" not in cmd.flags
    return all(cmd.spec_where(s) is not None and "INCOMPLETE" not in cmd.spec_flags(s)
               for s in cmd.specs)


def test_every_write_command_is_in_the_table(server_commands, table, newer):
    """Newer than the table: a write command without a row is derived from
    its key specs at run time, which must let the proxy find its keys."""
    missing = sorted(n for n, c in server_commands.items()
                     if "write" in c.flags and n not in table and
                     not (newer and derivable(c)))
    assert not missing, "write commands missing from the table%s: %s" % (
        " whose keys the proxy cannot find" if newer else "", missing)
    not_write = sorted(n for n, c in server_commands.items()
                       if "write" in c.flags and n in table and "write" not in table[n].flags)
    assert not not_write, "the server flags these write, the table does not: %s" % not_write


def test_every_blocking_command_is_in_the_table(server_commands, table, newer):
    """Newer than the table: a row derived at run time takes the server's
    blocking flag; a row of the table must have it."""
    missing = sorted(n for n, c in server_commands.items()
                     if "blocking" in c.flags and
                     (n not in table and not newer or n in table and "blocking" not in table[n].flags))
    assert not missing, "blocking commands missing or not flagged blocking: %s" % missing


def test_write_subcommands_reach_their_container(table, server_id, server_commands, newer):
    """Newer than the table, a container without a row is derived from the
    server's COMMAND INFO at run time, its write subcommands with it."""
    for container, since in CONTAINERS_WITH_WRITES.items():
        if not probe.applies(since, None, server_id):
            continue
        if newer and container not in table:
            assert derivable(server_commands[container]), container
            continue
        assert container in table, container
        assert "write" in table[container].flags, container


def test_containers(server_commands, table, newer):
    """A container's rows: a partial one lists exactly the server's write and
    blocking subcommands; any other lists every subcommand the server has
    (command_keys() refuses, -1, a subcommand it does not list). Newer than
    the table, it may list fewer (one it does not list is not judged)."""
    problems = []
    for name, row in table.items():
        listed = {n for n in table if n.startswith(name + "|")}
        theirs = {c.name for c in subcommands(server_commands, name)}
        if not listed:
            continue
        if "partial" in row.flags:
            theirs = {c.name for c in subcommands(server_commands, name)
                      if c.flags & {"write", "blocking"}}
        if listed != theirs and not (newer and listed < theirs):
            problems.append("%s: table lists %s, server has %s" % (
                name, sorted(listed - theirs), sorted(theirs - listed)))
    assert not problems, "\n".join(problems)


def arity_and_flag_problems(server_commands, table):
    """[((name, flag or None), text)]: where the table's arity and flags are
    not the server's."""
    problems = []
    for name, row in table.items():
        if name not in server_commands:
            problems.append(((name, None), "%s: the server has no such command" % name))
            continue
        srv = server_commands[name]
        if row.arity != srv.arity:
            problems.append(((name, "arity"), "%s: arity %d, server %d" % (
                name, row.arity, srv.arity)))
        flags = server_flags(server_commands, name, table)
        for flag in ("write", "blocking", "noscript"):
            if (flag in row.flags) != (flag in flags):
                problems.append(((name, flag), "%s: %s %s in the table, %s on the server" % (
                    name, flag, "set" if flag in row.flags else "unset",
                    "set" if flag in flags else "unset")))
        if ("script" in row.flags) != (name in SCRIPTS):
            problems.append(((name, "script"), "%s: script flag" % name))
        if ("expire" in row.flags) != (name in EXPIRES):
            problems.append(((name, "expire"), "%s: expire flag" % name))
        if ("partial" in row.flags) and not subcommands(server_commands, name):
            problems.append(((name, "partial"),
                             "%s: partial, but the server has no subcommands" % name))
        if not (row.flags & {"write", "blocking", "script", "unverified"}) and "|" not in name:
            problems.append(((name, None),
                             "%s: a row for a command that neither writes nor blocks" % name))
    for name in UNVERIFIED_AT_LEAST:
        if "unverified" not in table[name].flags:
            problems.append(((name, "unverified"), "%s: not flagged unverified" % name))
    return problems


def test_no_row_is_taken_from_documentation_alone(table, server_arg, newer):
    """Rows flagged documented belong to releases newer than every verified
    one: a server the table covers has none (or it would be verified)."""
    documented = sorted(n for n, row in table.items() if "documented" in row.flags)
    assert not documented or newer, "%s: rows not verified by experiment: %s" % (
        server_arg, documented)


def test_rows_have_the_servers_arity_and_flags(server_commands, table, newer):
    """Newer than the table, a command may have gained arguments (an
    argument count the table refuses is then not judged: command_keys() -2),
    or lost the blocking or noscript flag (the table's flag only keeps the
    proxy from wrapping it in a script): the other flags must agree."""
    problems = [text for (name, what), text in arity_and_flag_problems(server_commands, table)
                if not (newer and (what == "arity" or
                                   what in ("blocking", "noscript") and
                                   what in table[name].flags))]
    assert not problems, "\n".join(problems)


def test_key_specs_match_the_server(server_commands, table):
    """Key positions as the server's key specs give them. Where the table's
    options parser finds a key (opt(...)), the server has an "unknown" or a
    keyword spec that cannot be exact (SORT ... STORE, GEORADIUS ... STORE)."""
    problems = []
    for name, row in table.items():
        srv = server_commands[name]
        mine = [(where, effects) for _role, where, effects in row.roles
                if not where.startswith("opt(")]
        theirs = [(srv.spec_where(s), s) for s in srv.specs]
        if len(mine) != len(row.roles):
            theirs = [(w, s) for w, s in theirs if w is not None and not w.startswith("after(")]
        if [w for w, _ in mine] != [w for w, _ in theirs]:
            problems.append("%s: table %s, server %s" % (
                name, [w for w, _ in mine], [w for w, _ in theirs]))
            continue
        for (where, effects), (_w, spec) in zip(mine, theirs):
            if "RO" in srv.spec_flags(spec) and effects != ["none"]:
                problems.append("%s@%s: read-only to the server, %s in the table"
                                % (name, where, effects))
    assert not problems, "\n".join(problems)


def test_known_names(server_commands, server_names, command_eval, server_id, table, newer):
    """Every name the server knows is known, with a row when `ttlguard
    commands` prints one; the names the table has for other servers (and a
    few no server has) are not. Newer than the table, a name it does not
    know is read from the server (COMMAND LIST) at run time."""
    top = {n for n in server_commands if "|" not in n}
    assert top == server_names, "COMMAND and COMMAND LIST differ: %s" % sorted(
        top ^ server_names)
    others = table_names() | {"nosuch", "json.set", "setx", "xgroup|create", "hsetex", "getx",
                              "msetex", "vadd", "delifeq"}
    names = sorted(server_names) + sorted(others - server_names)
    answers = probe.table_answers(command_eval, [[n.encode()] for n in names], server_id)
    problems = []
    for name, ans in zip(names, answers):
        want_known = name in server_names
        if ans.known != want_known and not (newer and want_known):
            problems.append("%s: known=%s, the server %s it" % (
                name, ans.known, "has" if want_known else "does not have"))
        if ans.row != (name in table and "|" not in name):
            problems.append("%s: row=%s, printed=%s" % (name, ans.row, name in table))
    assert not problems, "\n".join(problems)


def test_the_proxy_derives_what_the_table_lacks(redis_port, server_commands, command_eval,
                                                server_id, newer, tmp_path):
    """ttlguard in front of the server reads COMMAND INFO for the commands
    the table has no row for and derives one each (subcommands included):
    every name it does not know, and on a server newer than the table every
    name it knows as a read that writes or blocks there (a container that
    gained a write subcommand). On a server the table covers: none."""
    top = sorted(n for n in server_commands if "|" not in n)
    answers = probe.table_answers(command_eval, [[n.encode()] for n in top], server_id)
    want = 0
    for name, ans in zip(top, answers):
        cmds = [server_commands[name]] + subcommands(server_commands, name)
        if ans.row:
            continue
        if not ans.known or (newer and any(c.flags & {"write", "blocking"} for c in cmds)):
            want += len(cmds)
    events = str(tmp_path / "events.jsonl")
    p = harness.Ttlguard(tmp_path, redis_port, {"events": events},
                         sections='[ttl "t:"]\nttl = 60\naction = rewrite\n')
    p.start()
    try:
        def server_event():
            try:
                with open(events) as f:
                    return [e for e in map(json.loads, f) if e["event"] == "backend_server"]
            except OSError:
                return []
        harness.wait_for(server_event, 10, "the backend_server event")
        e = server_event()[-1]
    finally:
        assert p.stop() == 0
    assert e["derived_commands"] == want, (e, want)
    assert ("newer than the command table" in e.get("message", "")) == newer, e


# ---------------------------------------------------------------------------
# By experiment
# ---------------------------------------------------------------------------

def test_ttl_effects_agree_with_the_server(probe_results):
    bad = [str(r) for r in probe_results if r.problem]
    assert not bad, "table and server disagree:\n" + "\n".join(bad)


def test_every_effect_of_every_key_role_is_probed(table, probe_results):
    """The experiment covers the table: each effect a key role can have was
    seen, and agreed with, in at least one case this server has."""
    seen = {(r.command, r.key.rstrip("0123456789"), r.table)
            for r in probe_results if r.problem is None}
    missing = []
    for name, row in table.items():
        if "unverified" in row.flags:
            continue
        for role, where, effects in row.roles:
            for effect in effects:
                if (name, role, effect) not in seen:
                    missing.append("%s %s@%s:%s" % (name, role, where, effect))
    assert not missing, "no experiment for:\n" + "\n".join(missing)


def test_destinations_get_the_source_ttl(prober):
    bad = [(cmd, problem) for cmd, _ttl, problem in probe.run_carry(prober) if problem]
    assert not bad, bad


def _syntax_line(cmd, problem):
    return "%s: %s" % (cmd.replace("\0", "\\0"), problem)


def test_malformed_arguments_agree_with_the_server(syntax_results):
    bad = [_syntax_line(cmd, problem) for cmd, _refused, _rc, problem in syntax_results if problem]
    assert not bad, "\n".join(bad)
