"""
`ttlguard audit` (issue 5) against real redis-servers.

A known mix of keys goes into a database, the audit runs as a subprocess, and
the tests compare its --json report (and parts of the text one) with the exact
numbers the mix implies: groups, rules, TTL buckets, types, folded patterns,
escaped binary names, INFO keyspace, exit status, --fix.

Timing-dependent cases (a key that expires, or gets a TTL, while the audit
runs) are made deterministic with --rate: the audit pays for a batch before
it asks about it, so with a slow rate it sits still between two known
commands, and the test waits for that moment by watching the audit's own
connection in CLIENT LIST (name ttlguard-audit, cmd=scan or cmd=type).

Environment: TTLG_BIN (the binary, default build/ttlguard), TTLG_REDIS_PORT
(a redis-server to use for the single-server tests; only databases 9-12 are
touched, each flushed first; it must allow DEBUG from localhost, for
DEBUG SET-ACTIVE-EXPIRE). Servers this file starts, and the fake servers of
the protocol-error cases, listen on free loopback ports (harness.free_port()).
"""

import json
import os
import pty
import select
import signal
import socket
import subprocess
import threading
import time

import pytest
import redis

import harness
from harness import RedisServer

AUDIT_NAME = "ttlguard-audit"

CONFIG = r"""
[proxy]
backend = 127.0.0.1:{port}
{extra}

[ttl "session:"]
ttl = 900
action = rewrite

[ttl "counter:"]
action = log

[ttl "bin\x00ary:"]
ttl = 60
action = reject

[durable "billing:ledger:"]
owner = payments
reason = ledger of record
rebuild = replay ledger_entries from Postgres
"""

UUIDS = ["550e8400-e29b-41d4-a716-446655440000",
         "6fa459ea-ee8a-3ca4-894e-db77e160355e",
         "0b8e5a3c-1f2d-4e6a-9c7b-5d4e3f2a1b0c"]


# --------------------------------------------------------------------------
# servers, binary, running the audit
# --------------------------------------------------------------------------

def start_redis(tmp_path, extra=(), name="redis"):
    """A redis-server of our own on a free loopback port."""
    return RedisServer(tmp_path, extra, name=name).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(port, RedisServer or None): TTLG_REDIS_PORT if set, else our own."""
    harness.need_binary()
    env_port = os.environ.get("TTLG_REDIS_PORT")
    if env_port:
        yield int(env_port), None
        return
    srv = start_redis(tmp_path_factory.mktemp("audit"))
    yield srv.port, srv
    srv.stop()


def client(port, db=0):
    return redis.Redis(host="127.0.0.1", port=port, db=db, socket_timeout=harness.slow(10))


def write_config(tmp_path, port, extra=""):
    path = tmp_path / "audit.ini"
    path.write_text(CONFIG.format(port=port, extra=extra))
    return str(path)


def audit_args(conf, *args):
    return [harness.TTLG_BIN, "audit", "--config", conf] + list(args)


def run_audit(conf, *args, timeout=60):
    """Run to completion: (exit status, stdout bytes, stderr text)."""
    p = subprocess.run(audit_args(conf, *args), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=harness.slow(timeout))
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def run_json(conf, *args):
    rc, out, err = run_audit(conf, "--json", *args)
    assert out, "no report on stdout (exit %d): %s" % (rc, err)
    report = json.loads(out)
    assert report["exit_status"] == rc
    return rc, report


def start_audit(conf, *args):
    return subprocess.Popen(audit_args(conf, *args), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_audit_cmd(port, cmd, timeout=15):
    """Wait until the audit's connection has just run cmd (CLIENT LIST)."""
    r = client(port)
    deadline = time.monotonic() + harness.slow(timeout)
    while time.monotonic() < deadline:
        for c in r.client_list():
            if c.get("name") == AUDIT_NAME and c.get("cmd") == cmd:
                return
        time.sleep(0.005)
    raise AssertionError("the audit never reached cmd=%s" % cmd)


def finish(proc, timeout=30):
    try:
        out, err = proc.communicate(timeout=harness.slow(timeout))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, (err or b"").decode(errors="replace")


# --------------------------------------------------------------------------
# the known mix
# --------------------------------------------------------------------------

def fill_mix(r):
    """52 keys; returns nothing, the expectations below spell them out."""
    p = r.pipeline(transaction=False)
    # leaked: 16
    for i in range(1, 8):
        p.set("session:%d:billableSecondsPending" % i, 0)            # seed 000's GETSET leak
    for u in UUIDS:
        p.set("session:%s:billableSecondsPending" % u, 0)
    for i in range(1, 5):
        p.incr("counter:%d" % i)                                        # rule without a ttl
    p.set(b"bin\x00ary:1", b"x")
    p.set(b"bin\x00ary:2", b"x")
    # expiring: 15
    for i in range(100, 105):
        p.set("session:%d:billableSecondsPending" % i, 0, ex=900)      # 1m-1h
    for i in range(10, 12):
        p.set("counter:%d" % i, 1, ex=30)                               # <1m
    for i, ttl in enumerate([30, 600, 7200, 3 * 86400, 10 * 86400, 40 * 86400]):
        p.set("cache:%d" % i, "v", ex=ttl)                              # one per bucket
    for i in range(2):
        p.rpush("queue:%d" % i, "job")
        p.expire("queue:%d" % i, 7200)                                  # 1h-1d
    # registered: 4, registered with a TTL: 2
    for i in range(4):
        p.zadd("billing:ledger:%d" % i, {"entry": i})
    for i in range(10, 12):
        p.zadd("billing:ledger:%d" % i, {"entry": i})
        p.expire("billing:ledger:%d" % i, 2 * 86400)                   # 1d-7d
    # unregistered persistent: 15
    for i in range(6):
        p.hset("user:%d:profile" % (1000 + i), "name", "u")
    for h in ["5f1d7c2ab3e4f5a6b7c8d9e0", "5f1d7c2ab3e4f5a6b7c8d9e1", "ffeeddccbbaa998877665544"]:
        p.sadd("tags:%s" % h, "red")
    p.xadd("events:7", {"f": "v"})
    p.set(b"odd\xff\n*key", b"v")
    p.set("job:deadbeef", "v")                                           # no digit: not an id
    p.set("v2:config", "v")                                              # v2 is a word
    p.set("date:2026-08-27", "v")
    p.rpush("order:%s:items" % UUIDS[0], "a")
    p.execute()


LEAKED_KEYS = ({b"session:%d:billableSecondsPending" % i for i in range(1, 8)}
               | {b"session:%s:billableSecondsPending" % u.encode() for u in UUIDS}
               | {b"counter:%d" % i for i in range(1, 5)}
               | {b"bin\x00ary:1", b"bin\x00ary:2"})
EXPECTED_GROUPS = {
    "leaked": (16, {"string": 16}),
    "expiring": (15, {"string": 13, "list": 2}),
    "registered": (4, {"zset": 4}),
    "registered_with_ttl": (2, {"zset": 2}),
    "unregistered": (15, {"hash": 6, "set": 3, "stream": 1, "string": 4, "list": 1}),
}
EXPECTED_LEAKED_PATTERNS = [("session:*:billableSecondsPending", 10, 'ttl "session:"'),
                            ("counter:*", 4, 'ttl "counter:"'),
                            ("bin\\x00ary:*", 2, 'ttl "bin\\x00ary:"')]
EXPECTED_UNREGISTERED_PATTERNS = {"user:*:profile": 6, "tags:*": 3, "events:*": 1,
                                  "odd\\xff\\n\\*key": 1, "job:deadbeef": 1,
                                  "v2:config": 1, "date:*-*-*": 1, "order:*:items": 1}


@pytest.fixture
def mixdb(server, tmp_path):
    """(port, db, config path) with the known mix in db 9."""
    port, _ = server
    r = client(port, 9)
    r.flushdb()
    fill_mix(r)
    return port, 9, write_config(tmp_path, port)


def raw(s):
    """The bytes of a key or prefix as --json writes it (docs/events.md, Strings)."""
    return s.encode("utf-8", "surrogateescape")


def ttl_state(r):
    """{key: 'none' | 'ttl'} for every key of r's db."""
    return {k: ("none" if r.pttl(k) == -1 else "ttl") for k in r.scan_iter(count=1000)}


# --------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------

def test_known_mix_exact_counts(mixdb):
    port, db, conf = mixdb
    rc, rep = run_json(conf, "--db", str(db))
    assert rc == 1
    assert rep["complete"] is True and rep["db"] == db and rep["role"] == "master"
    assert rep["scan"] == {"keys": 52, "with_ttl": 17, "without_ttl": 35,
                           "expired_during_scan": 0, "duplicates": 0, "leaked": 16}
    assert rep["info"]["start"] == {"keys": 52, "expires": 17}
    assert rep["info"]["end"] == {"keys": 52, "expires": 17}

    for name, (keys, types) in EXPECTED_GROUPS.items():
        g = rep["groups"][name]
        assert (g["keys"], g["types"]) == (keys, types), name
        assert g["memory"] is None
        assert 1 <= len(g["examples"]) <= 3
    assert {raw(k) for k in rep["groups"]["leaked"]["examples"]} <= LEAKED_KEYS
    assert rep["groups"]["expiring"]["ttl"] == {"<1m": 3, "1m-1h": 6, "1h-1d": 3,
                                                "1d-7d": 1, "7d-30d": 1, ">30d": 1}
    assert rep["groups"]["registered_with_ttl"]["ttl"]["1d-7d"] == 2
    assert sum(rep["groups"]["leaked"]["ttl"].values()) == 0

    rules = {r["rule"]: r for r in rep["rules"]}
    assert set(rules) == {'ttl "session:"', 'ttl "counter:"', 'ttl "bin\\x00ary:"',
                          'durable "billing:ledger:"', "default"}
    counts = {name: (r["no_ttl"]["keys"], r["with_ttl"]["keys"]) for name, r in rules.items()}
    assert counts == {'ttl "session:"': (10, 5), 'ttl "counter:"': (4, 2),
                      'ttl "bin\\x00ary:"': (2, 0), 'durable "billing:ledger:"': (4, 2),
                      "default": (15, 8)}
    assert raw(rules['ttl "bin\\x00ary:"']["prefix"]) == b"bin\x00ary:"
    assert rules["default"]["prefix"] is None and rules["default"]["wants_ttl"] is False
    assert rules['ttl "session:"']["ttl"] == 900

    leaked = rep["patterns"]["leaked"]
    assert [(p["pattern"], p["keys"], p["rule"]) for p in leaked["top"]] == EXPECTED_LEAKED_PATTERNS
    assert leaked["distinct"] == 3 and leaked["not_shown_keys"] == 0
    unreg = rep["patterns"]["unregistered"]
    assert {p["pattern"]: p["keys"] for p in unreg["top"]} == EXPECTED_UNREGISTERED_PATTERNS
    assert [p["keys"] for p in unreg["top"]][:2] == [6, 3]     # largest first
    example = {p["pattern"]: p["example"] for p in unreg["top"]}
    assert raw(example["odd\\xff\\n\\*key"]) == b"odd\xff\n*key"    # byte-exact in JSON
    assert rep["fix"]["mode"] == "off"


def test_json_examples_of_invalid_utf8_keys(server, tmp_path):
    """Keys are bytes: a leaked key that is not UTF-8 is an example in
    --json as in the event log (docs/events.md, Strings), and the report
    stays valid JSON."""
    port, _ = server
    r = client(port, 11)
    r.flushdb()
    keys = {b"session:\xff\xfe", b"session:\xc3(", b"session:ok\xe2\x82"}
    for k in keys:
        r.set(k, b"v")
    rc, rep = run_json(write_config(tmp_path, port), "--db", "11")
    assert rc == 1
    assert {raw(k) for k in rep["groups"]["leaked"]["examples"]} == keys
    r.flushdb()


def test_text_report_is_aligned_and_escaped(mixdb):
    port, db, conf = mixdb
    rc, out, _ = run_audit(conf, "--db", str(db))
    assert rc == 1
    assert b"\x00" not in out and b"\xff" not in out    # binary names come out escaped
    text = out.decode()
    lines = text.splitlines()
    group = {l.split("  ")[0].strip(): l for l in lines}
    assert group["leaked"].split()[1] == "16"
    assert group["unregistered persistent"].split()[2] == "15"
    header = next(l for l in lines if l.startswith("GROUP"))
    row = group["leaked"]
    # right-aligned numbers end under the end of their header
    assert row.index("16") + 2 == header.index("KEYS") + 4
    assert "session:*:billableSecondsPending" in text
    assert "bin\\x00ary:*" in text and "odd\\xff\\n\\*key" in text
    assert 'ttl "bin\\x00ary:"' in text
    assert "INFO and the scan agree." in text
    assert lines[-1] == "RESULT: 16 leaked keys under rules that require a TTL; " \
                        "2 durable keys carry a TTL and can be evicted (exit 1)"


def test_clean_database_exits_zero(server, tmp_path):
    port, _ = server
    r = client(port, 10)
    r.flushdb()
    r.set("session:1:x", 1, ex=100)
    r.zadd("billing:ledger:1", {"a": 1})
    conf = write_config(tmp_path, port)
    rc, out, _ = run_audit(conf, "--db", "10")
    assert rc == 0
    assert out.decode().splitlines()[-1] == "RESULT: no leaked keys (exit 0)"
    r.flushdb()
    rc, rep = run_json(conf, "--db", "10")       # empty db: no INFO line at all
    assert rc == 0 and rep["scan"]["keys"] == 0 and rep["info"]["start"]["keys"] == 0


def test_strict_default_makes_unregistered_keys_leaks(server, tmp_path):
    port, _ = server
    r = client(port, 10)
    r.flushdb()
    r.set("plain:1", "v")
    r.set("plain:2", "v", ex=60)
    conf = write_config(tmp_path, port)
    with open(conf, "a") as f:
        f.write("\n[default]\naction = rewrite\nttl = 3600\n")
    rc, rep = run_json(conf, "--db", "10", "--fix")
    assert rc == 1
    assert rep["groups"]["leaked"]["keys"] == 1 and rep["groups"]["unregistered"]["keys"] == 0
    assert rep["patterns"]["leaked"]["top"][0]["pattern"] == "plain:*"
    assert rep["fix"]["candidates"] == 1


def test_usage_config_and_connection_errors(server, tmp_path):
    port, _ = server
    conf = write_config(tmp_path, port)
    bin_ = harness.TTLG_BIN
    cases = [
        ([bin_, "audit"], "--config FILE is required"),
        ([bin_, "audit", "--config", conf, "--rate", "0"], "--rate"),
        ([bin_, "audit", "--config", conf, "--db", "x"], "--db"),
        ([bin_, "audit", "--config", conf, "--yes"], "--yes only makes sense with --fix"),
        ([bin_, "audit", "--config", conf, "--frobnicate"], "unknown argument"),
        ([bin_, "audit", "--config", str(tmp_path / "missing.ini")], "missing.ini"),
        ([bin_, "audit", "--config", conf, "--backend", "127.0.0.1:1"], "cannot connect"),
        ([bin_, "audit", "--config", conf, "--db", "100000"], "SELECT"),
    ]
    for argv, msg in cases:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        assert p.returncode == 2, argv
        assert msg in p.stderr.decode(), (argv, p.stderr)
        assert p.stdout == b""
    p = subprocess.run([bin_, "audit", "--help"], stdout=subprocess.PIPE, timeout=30)
    assert p.returncode == 0 and b"Exit status" in p.stdout


def test_fix_dry_run_changes_nothing(mixdb):
    port, db, conf = mixdb
    r = client(port, db)
    before = ttl_state(r)
    rc, rep = run_json(conf, "--db", str(db), "--fix")
    assert rc == 1
    assert ttl_state(r) == before
    assert rep["fix"] == {"mode": "dry_run", "candidates": 12, "no_rule_ttl": 4, "fixed": 0,
                          "skipped": 0, "errors": 0, "first_error": None}
    rc, out, _ = run_audit(conf, "--db", str(db), "--fix")
    assert "dry run: would give 12 leaked keys their rule's TTL" in out.decode()


def test_fix_yes_fixes_exactly_the_leaked_keys(mixdb, tmp_path):
    port, db, _ = mixdb
    events = tmp_path / "events.jsonl"
    conf = write_config(tmp_path, port, "events = %s" % events)
    r = client(port, db)
    before = ttl_state(r)
    rc, rep = run_json(conf, "--db", str(db), "--fix", "--yes")
    assert rc == 1                                   # leaks were found (and fixed)
    assert rep["fix"]["mode"] == "applied"
    assert (rep["fix"]["fixed"], rep["fix"]["skipped"], rep["fix"]["errors"]) == (12, 0, 0)

    after = ttl_state(r)
    changed = {k for k in after if after[k] != before[k]}
    expected = ({("session:%d:billableSecondsPending" % i).encode() for i in range(1, 8)}
                | {("session:%s:billableSecondsPending" % u).encode() for u in UUIDS}
                | {b"bin\x00ary:1", b"bin\x00ary:2"})
    assert changed == expected
    assert all(880_000 < r.pttl(k) <= 900_000 for k in expected if k.startswith(b"session:"))
    assert 50_000 < r.pttl(b"bin\x00ary:1") <= 60_000
    assert r.pttl("counter:1") == -1                 # its rule has no ttl to give

    lines = [json.loads(l) for l in events.read_text().splitlines()]
    assert len(lines) == 12
    assert all(l["event"] == "audit_fix" and l["ts"].endswith("Z") for l in lines)
    # the event log's byte-exact encoding (docs/events.md, Strings)
    assert {raw(l["key"]) for l in lines} == expected
    assert {(l["rule"], l["prefix"], l["ttl"]) for l in lines} == {
        ('ttl "session:"', "session:", 900), ('ttl "bin\\x00ary:"', "bin\x00ary:", 60)}

    rc, rep = run_json(conf, "--db", str(db))
    assert rep["scan"]["leaked"] == 4 and rc == 1    # only the counters are left


@pytest.mark.parametrize("log_keys", ["hash", "prefix"])
def test_fix_events_respect_log_keys(server, tmp_path, log_keys):
    port, _ = server
    r = client(port, 10)
    r.flushdb()
    r.set(b"session:\xff:secret@example.com", 0)
    events = tmp_path / "events.jsonl"
    conf = write_config(tmp_path, port, "events = %s\nlog_keys = %s" % (events, log_keys))
    rc, rep = run_json(conf, "--db", "10", "--fix", "--yes")
    assert rep["fix"]["fixed"] == 1
    text = events.read_text()
    assert "secret" not in text
    line = json.loads(text)
    assert "key" not in line and line["prefix"] == "session:"
    if log_keys == "hash":
        assert len(line["key_hash"]) == 16 and int(line["key_hash"], 16) >= 0
    else:
        assert "key_hash" not in line


def test_fix_never_touches_a_key_that_got_a_ttl_meanwhile(server, tmp_path):
    port, _ = server
    r = client(port, 11)
    r.flushdb()
    for i in range(10):
        r.set("session:%d:x" % i, 0)
        r.set("other:%d" % i, 0)
    conf = write_config(tmp_path, port)
    # 20 keys at 10/s: PTTL/TYPE go out after 2 s, the 10 EXPIREs after 1 s more.
    proc = start_audit(conf, "--db", "11", "--fix", "--yes", "--json",
                       "--rate", "10", "--count", "1000")
    wait_audit_cmd(port, "type")                     # classified; waiting to fix
    r.expire("session:3:x", 5000)                    # a writer gave it a TTL meanwhile
    r.delete("session:4:x")                          # ...and this one went away
    rc, out, err = finish(proc)
    rep = json.loads(out)
    assert rc == 1, err
    assert rep["fix"]["candidates"] == 10
    assert (rep["fix"]["fixed"], rep["fix"]["skipped"]) == (8, 2)
    assert r.ttl("session:3:x") > 4000               # not lowered to 900
    assert r.exists("session:4:x") == 0              # not recreated
    assert all(0 < r.ttl("session:%d:x" % i) <= 900 for i in (0, 1, 2, 5, 6, 7, 8, 9))
    assert all(r.ttl("other:%d" % i) == -1 for i in range(10))


def test_keys_expiring_during_the_scan_and_rate(server, tmp_path):
    port, _ = server
    r = client(port, 11)
    r.flushdb()
    for i in range(25):
        r.set("other:%d" % i, 0)
    for i in range(5):
        r.set("tiny:%d" % i, 0)
    conf = write_config(tmp_path, port)
    t0 = time.monotonic()
    proc = start_audit(conf, "--db", "11", "--json", "--rate", "10", "--count", "1000")
    wait_audit_cmd(port, "scan")                     # SCAN answered; PTTL waits 3 s
    for i in range(5):
        r.pexpire("tiny:%d" % i, 1)
    rc, out, err = finish(proc)
    elapsed = time.monotonic() - t0
    rep = json.loads(out)
    assert rc == 0, err
    assert rep["scan"]["expired_during_scan"] == 5
    assert rep["scan"]["keys"] == 25
    assert rep["groups"]["unregistered"]["keys"] == 25
    assert rep["info"]["start"]["keys"] == 30
    # --rate 10 on 30 keys: at least 3 s, and the report says so too
    assert elapsed >= 2.9 and rep["elapsed_ms"] >= 2900
    rc, rep = run_json(conf, "--db", "11")           # unbounded, the same 25 keys
    assert rep["elapsed_ms"] < 2000


def test_info_counts_expired_keys_not_yet_removed(server, tmp_path):
    """Seed 004: INFO keyspace still counts expired keys nobody touched."""
    port, _ = server
    r = client(port, 12)
    r.flushdb()
    conf = write_config(tmp_path, port)

    def expired_keys():
        for i in range(10):
            r.set("gone:%d" % i, 0, px=1)
        time.sleep(0.05)
        assert r.info("keyspace")["db12"]["keys"] == 14

    r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        for i in range(4):
            r.set("live:%d" % i, 0)
        expired_keys()
        rc, rep = run_json(conf, "--db", "12")
        assert rc == 0
        assert rep["scan"]["keys"] == 4 and rep["scan"]["expired_during_scan"] == 0
        assert rep["info"]["start"] == {"keys": 14, "expires": 10}
        # SCAN touched them on a primary, and touching an expired key removes it
        assert rep["info"]["end"] == {"keys": 4, "expires": 0}
        expired_keys()
        rc, out, _ = run_audit(conf, "--db", "12")
        text = out.decode()
        assert "INFO counts 10 keys the scan did not see alive." in text
        assert "has not removed yet" in text
    finally:
        r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")


def test_sigint_prints_partial_report(server, tmp_path):
    port, _ = server
    r = client(port, 11)
    r.flushdb()
    r.mset({"k:%d" % i: 0 for i in range(200)})
    conf = write_config(tmp_path, port)
    # about 10 keys a round, 20 keys/s: the whole walk would take 10 s
    proc = start_audit(conf, "--db", "11", "--json", "--rate", "20", "--count", "10")
    wait_audit_cmd(port, "type")                     # one round asked about
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc, out, err = finish(proc)
    assert time.monotonic() - t0 < 2
    assert rc == 3, err
    rep = json.loads(out)
    assert rep["complete"] is False and rep["exit_status"] == 3
    assert 0 < rep["scan"]["keys"] < 200              # the rounds already asked about
    assert rep["info"]["end"] is None


def test_match_and_memory(mixdb):
    port, db, conf = mixdb
    rc, rep = run_json(conf, "--db", str(db), "--match", "session:*", "--memory")
    assert rc == 1
    assert rep["match"] == "session:*" and rep["scan"]["keys"] == 15
    assert rep["groups"]["leaked"]["keys"] == 10
    assert rep["groups"]["leaked"]["memory"] > 0
    assert rep["patterns"]["leaked"]["top"][0]["memory"] > 0
    rc, out, _ = run_audit(conf, "--db", str(db), "--match", "session:*")
    assert "With --match the scan only counts matching keys" in out.decode()


def test_replica_audits_fine_and_refuses_fix(tmp_path):
    harness.need_binary()
    # no 5 s wait for more replicas before the first sync
    primary = start_redis(tmp_path, ["--repl-diskless-sync-delay", "0"], name="primary")
    replica = start_redis(tmp_path, ["--replicaof", "127.0.0.1", str(primary.port)], name="replica")
    try:
        pr = client(primary.port)
        # Seed 004: keys that expire and that nobody touches stay in both
        # servers' INFO; a replica never removes them on its own.
        pr.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
        fill_mix(pr)
        for i in range(5):
            pr.set("gone:%d" % i, 0, px=200)
        rr = client(replica.port)
        deadline = time.monotonic() + harness.slow(15)
        while time.monotonic() < deadline:
            info = rr.info("replication")
            if info.get("master_link_status") == "up" and rr.dbsize() == 57:
                break
            time.sleep(0.05)
        assert rr.dbsize() == 57
        time.sleep(0.3)                              # the gone:* keys have expired
        conf = write_config(tmp_path, primary.port)
        rc, rep = run_json(conf, "--backend", "127.0.0.1:%d" % replica.port)
        assert rc == 1 and rep["role"] == "replica"
        assert rep["scan"]["keys"] == 52 and rep["scan"]["leaked"] == 16
        for name, (keys, _) in EXPECTED_GROUPS.items():
            assert rep["groups"][name]["keys"] == keys
        assert rep["info"]["start"]["keys"] == 57 and rep["info"]["end"]["keys"] == 57
        rc, rep = run_json(conf, "--backend", "127.0.0.1:%d" % replica.port, "--fix")
        assert rc == 1 and rep["fix"]["candidates"] == 12      # a dry run is fine
        rc, out, err = run_audit(conf, "--backend", "127.0.0.1:%d" % replica.port,
                                 "--fix", "--yes")
        assert rc == 2 and "replica" in err and out == b""
        assert pr.pttl("session:1:billableSecondsPending") == -1
    finally:
        replica.stop()
        primary.stop()


def test_unix_socket_and_auth(tmp_path):
    harness.need_binary()
    sock = str(tmp_path / "redis.sock")
    srv = start_redis(tmp_path, ["--unixsocket", sock, "--requirepass", "s3cret"])
    try:
        r = redis.Redis(unix_socket_path=sock, password="s3cret")
        r.set("session:1:x", 0)
        r.set("session:2:x", 0, ex=100)
        conf = write_config(tmp_path, srv.port, "backend_password = s3cret")
        rc, rep = run_json(conf, "--backend", "unix:" + sock)
        assert rc == 1 and rep["backend"] == "unix:" + sock
        assert rep["scan"]["keys"] == 2 and rep["scan"]["leaked"] == 1
        conf = write_config(tmp_path, srv.port)      # no password
        rc, out, err = run_audit(conf)
        assert rc == 2 and "NOAUTH" in err
    finally:
        srv.stop()


class FakeRedis:
    """Just enough of a Redis for the audit's setup, then scripted replies to
    SCAN, PTTL and TYPE: for the error paths a real server never takes."""

    def __init__(self, replies):
        self.replies = replies          # command name -> raw reply bytes
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", harness.free_port()))
        self.port = self.sock.getsockname()[1]
        self.sock.listen(1)
        self.sock.settimeout(harness.slow(10))
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        conn.settimeout(harness.slow(10))
        f = conn.makefile("rb")
        info = (b"role:master\r\nredis_version:7.0.15\r\n# Keyspace\r\n"
                b"db0:keys=1,expires=0,avg_ttl=0\r\n")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                argv = []
                for _ in range(int(line[1:])):
                    n = int(f.readline()[1:])
                    argv.append(f.read(n + 2)[:-2])
                name = argv[0].upper().decode()
                if name == "INFO":
                    conn.sendall(b"$%d\r\n%s\r\n" % (len(info), info))
                else:
                    conn.sendall(self.replies.get(name, b"+OK\r\n"))
        except (OSError, ValueError):
            return
        finally:
            conn.close()

    def close(self):
        self.sock.close()
        self.thread.join(harness.slow(10))


@pytest.mark.parametrize("replies,message", [
    ({"SCAN": b"-ERR unknown command 'SCAN'\r\n"}, "unknown command 'SCAN'"),
    ({"SCAN": b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n", "PTTL": b":-1\r\n",
      "TYPE": b":5\r\n"}, "unexpected integer in a reply to PTTL/TYPE"),
    ({"SCAN": b"*2\r\n$2\r\nx1\r\n*0\r\n"}, "bad cursor 'x1'"),
    ({"SCAN": b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n", "PTTL": b"?garbage\r\n"},
     "bad reply from the backend"),
])
def test_backend_that_answers_nonsense_is_an_error(server, tmp_path, replies, message):
    fake = FakeRedis(replies)
    try:
        conf = write_config(tmp_path, fake.port)
        rc, out, err = run_audit(conf, timeout=20)
    finally:
        fake.close()
    assert rc == 2 and out == b""
    assert message in err, err


def test_progress_bar_on_a_terminal(server, tmp_path):
    port, _ = server
    r = client(port, 11)
    r.flushdb()
    r.mset({"k:%d" % i: 0 for i in range(30)})
    conf = write_config(tmp_path, port)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(audit_args(conf, "--db", "11", "--rate", "30", "--count", "5"),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        slave = None
        seen = b""
        deadline = time.monotonic() + harness.slow(20)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:          # EIO: the audit closed its side
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        rc, out, _ = finish(proc)
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert rc == 0
    assert b"\r\x1b[K[" in seen and b"keys/s" in seen and b"ETA" in seen
    assert seen.endswith(b"\r\x1b[K")                # the bar is cleared at the end
    assert b"RESULT" in out
