"""
The command table (`ttlguard commands`, proxy/commands.c) against a real
redis-server 7.0.15:

  - every command the server flags `write` (subcommands included) and every
    blocking one is in the table, with the server's arity and flags, and with
    the server's key specs;
  - every name the server knows is known to the table;
  - what the table says each write does to each key's TTL is what the server
    does, by experiment (tools/probe_ttl_effects.py), and every effect of every
    key role in the table is exercised by at least one experiment;
  - the table refuses (-1) exactly the arguments the server refuses.

The server: the one on TTLG_REDIS_PORT when set, else one started here.
The table's per-argv answers come from tools/command_eval.c: TTLG_COMMAND_EVAL,
else command_eval next to TTLG_BIN, else built here against the
libttlguard_core.a next to TTLG_BIN.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tools"))

import harness  # noqa: E402
import probe_ttl_effects as probe  # noqa: E402

SCRIPTS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}
EXPIRES = {"expire", "pexpire", "expireat", "pexpireat"}
UNVERIFIED_AT_LEAST = {"swapdb", "migrate"}
CONTAINERS_WITH_WRITES = {"xgroup", "function"}


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
def server_commands(redis_port):
    """{name: Cmd} for every command and subcommand ("xgroup|create")."""
    import redis
    r = redis.Redis(host="127.0.0.1", port=redis_port, socket_timeout=harness.slow(10))
    version = r.info("server")["redis_version"]
    assert version == "7.0.15", "the table is for redis 7.0.15, the server is %s" % version
    conn = r.connection_pool.get_connection("COMMAND")
    try:
        # Raw: redis-py's COMMAND reply callback drops the key specs.
        conn.send_command("COMMAND")
        raw = conn.read_response()
    finally:
        r.connection_pool.release(conn)
        r.close()
    out = {}

    def walk(entry):
        name, arity, flags, _first, _last, _step, _acl, _tips, specs, subs = entry
        name = name.decode()
        out[name] = ServerCommand(name, arity, {f.decode() for f in flags}, specs)
        for s in subs:
            walk(s)

    for entry in raw:
        walk(entry)
    return out


@pytest.fixture(scope="module")
def table():
    """{name: Row} from `ttlguard commands`."""
    if not os.path.exists(harness.TTLG_BIN):
        msg = "ttlguard binary %s does not exist (build it or set TTLG_BIN)" % harness.TTLG_BIN
        if harness.TTLG_BIN_EXPLICIT:
            pytest.fail(msg)
        pytest.skip(msg)
    out = subprocess.run([harness.TTLG_BIN, "commands"], capture_output=True, text=True,
                         timeout=harness.slow(10), check=True).stdout
    rows = {}
    for line in out.splitlines():
        row = Row(line)
        assert row.name not in rows, "%s printed twice" % row.name
        rows[row.name] = row
    return rows


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
def prober(redis_port):
    p = probe.Probe(redis_port)
    yield p
    p.close()


@pytest.fixture(scope="module")
def probe_results(prober, command_eval):
    return probe.run_cases(prober, command_eval)


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
        """A key spec in `ttlguard commands` notation; None for "unknown"."""
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
            assert (fk_spec["keynumidx"], fk_spec["firstkey"], fk_spec["keystep"]) == (0, 1, 1), \
                "%s: a keynum spec the table's notation cannot express" % self.name
            return where + "+numkeys"
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
        self.roles = []
        for w in words[3:]:
            role, rest = w.split("@", 1)
            where, effects = rest.rsplit(":", 1)
            self.roles.append((role, where, effects.split("|")))


def subcommands(server, name):
    return [c for n, c in server.items() if n.startswith(name + "|")]


def server_flags(server, name):
    """A container's flags are the union of its subcommands'."""
    subs = subcommands(server, name)
    if subs:
        return set().union(*(s.flags for s in subs))
    return server[name].flags


# ---------------------------------------------------------------------------
# Completeness and flags
# ---------------------------------------------------------------------------

def test_every_write_command_is_in_the_table(server_commands, table):
    missing = sorted(n for n, c in server_commands.items()
                     if "write" in c.flags and n not in table)
    assert not missing, "write commands missing from the table: %s" % missing
    not_write = sorted(n for n, c in server_commands.items()
                       if "write" in c.flags and "write" not in table[n].flags)
    assert not not_write, "the server flags these write, the table does not: %s" % not_write


def test_every_blocking_command_is_in_the_table(server_commands, table):
    missing = sorted(n for n, c in server_commands.items()
                     if "blocking" in c.flags and (n not in table or "blocking" not in table[n].flags))
    assert not missing, "blocking commands missing or not flagged blocking: %s" % missing


def test_write_subcommands_reach_their_container(table):
    for container in CONTAINERS_WITH_WRITES:
        assert container in table, container
        assert "write" in table[container].flags, container


def test_rows_have_the_servers_arity_and_flags(server_commands, table):
    problems = []
    for name, row in table.items():
        if name not in server_commands:
            problems.append("%s: the server has no such command" % name)
            continue
        srv = server_commands[name]
        if row.arity != srv.arity:
            problems.append("%s: arity %d, server %d" % (name, row.arity, srv.arity))
        flags = server_flags(server_commands, name)
        for flag in ("write", "blocking", "noscript"):
            if (flag in row.flags) != (flag in flags):
                problems.append("%s: %s %s in the table, %s on the server" % (
                    name, flag, "set" if flag in row.flags else "unset",
                    "set" if flag in flags else "unset"))
        if ("script" in row.flags) != (name in SCRIPTS):
            problems.append("%s: script flag" % name)
        if ("expire" in row.flags) != (name in EXPIRES):
            problems.append("%s: expire flag" % name)
        if not (row.flags & {"write", "blocking", "script", "unverified"}) and "|" not in name:
            problems.append("%s: a row for a command that neither writes nor blocks" % name)
    for name in UNVERIFIED_AT_LEAST:
        if "unverified" not in table[name].flags:
            problems.append("%s: not flagged unverified" % name)
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


def test_known_names(server_commands, command_eval, table):
    names = sorted(n for n in server_commands if "|" not in n)
    unknown = ["nosuch", "json.set", "setx", "xgroup|create", "hsetex", "getx"]
    answers = probe.table_answers(command_eval, [[n.encode()] for n in names + unknown])
    problems = []
    for name, ans in zip(names + unknown, answers):
        want_known = name in server_commands and "|" not in name
        if ans.known != want_known:
            problems.append("%s: known=%s" % (name, ans.known))
        if ans.row != (name in table and "|" not in name):
            problems.append("%s: row=%s, printed=%s" % (name, ans.row, name in table))
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------
# By experiment
# ---------------------------------------------------------------------------

def test_ttl_effects_agree_with_the_server(probe_results):
    bad = [str(r) for r in probe_results if r.problem]
    assert not bad, "table and server disagree:\n" + "\n".join(bad)


def test_every_effect_of_every_key_role_is_probed(table, probe_results):
    """The experiment covers the table: each effect a key role can have was
    seen, and agreed with, in at least one case."""
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


def test_malformed_arguments_agree_with_the_server(prober, command_eval):
    bad = ["%s: %s" % (cmd.replace("\0", "\\0"), problem)
           for cmd, _refused, _rc, problem in probe.run_syntax(prober, command_eval) if problem]
    assert not bad, "\n".join(bad)
