"""
The background audit (audit_interval, audit_rate, audit_memory in [proxy];
proxy/audit_bg.c), against a real redis-server holding a known keyspace in two
databases:

  - the gauges ttlguard_audit_keys{rule,state} (and _bytes with audit_memory)
    count exactly what the keyspace holds, and what `ttlguard audit` counts;
  - one `audit_pass` event per pass, with the counts, the change since the
    previous pass and the `ttlguard audit --fix` commands per database;
  - audit_rate is honoured: a pass of N keys at R keys/s takes at least
    0.8 N/R seconds;
  - a reload that keeps the rules keeps the position (no key is read twice);
    one that changes them starts the pass over;
  - nothing is written: DBSIZE and DEBUG DIGEST unchanged, INFO commandstats
    lists no command COMMAND INFO flags as a write;
  - used_memory near maxmemory pauses the walk (audit_paused, the gauge,
    audit_resumed), /healthz stays 200;
  - Redis loading (DEBUG RELOAD slowed by key-load-delay) pauses it, and the
    batches refused with -LOADING are asked again, not counted as gone;
  - SCAN refused for good (an ACL without it): a line on /healthz (still
    200) and one warning until it is allowed; a server that does not answer
    (CLIENT PAUSE) past the reply timeout: a line on /healthz, a reconnect;
  - audit_from = HOST:PORT: a replica of the backend is read, not the
    backend (INFO commandstats: no SCAN or PTTL on the primary);
  - cluster = on, against a real 6-node cluster (cluster_util): every primary
    read once (and no replica), totals over the cluster, `nodes` in the
    event; a primary killed mid-pass starts the pass over on the promoted
    replica, and the next pass counts the same keyspace;
  - audit_from = replica: one replica of each shard read (READONLY), no
    SCAN on any primary, the same counts; a shard whose replica is down is
    read from its primary, with an `audit_fallback` event;
  - off by default: no ttlguard_audit_* families.
"""

import html as htmllib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import harness
from harness import Conn, wait_for
from test_metrics import get, scrape, series, value

DURABLE = "owner = payments\nreason = ledger of record\nrebuild = replay from Postgres\n"
SECTIONS = ('[ttl "s:"]\nttl = 600\naction = rewrite\n\n'
            '[ttl "lg:"]\naction = log\n\n'
            '[durable "du:"]\n' + DURABLE + "\n")

S, LG, DU, DEF = 'ttl "s:"', 'ttl "lg:"', 'durable "du:"', "default"

# (db, prefix, how many, with a TTL)
KEYSPACE = [
    (0, "s:", 1200, False),      # leaked, fixable (the rule has a ttl)
    (0, "s:e", 400, True),       # expiring
    (0, "lg:", 300, False),      # leaked, no ttl to give
    (0, "du:", 250, False),      # registered
    (0, "du:t", 50, True),       # expiring under a durable rule
    (0, "o:", 200, False),       # unregistered (default allow)
    (0, "o:e", 100, True),       # expiring under the default
    (1, "s:b", 500, False),      # leaked, fixable, in db 1
]
TOTAL = sum(n for _, _, n, _ in KEYSPACE)

EXPECTED = {
    (S, "leaked"): 1700, (S, "expiring"): 400,
    (LG, "leaked"): 300, (LG, "expiring"): 0,
    (DU, "registered"): 250, (DU, "expiring"): 50,
    (DEF, "unregistered"): 200, (DEF, "expiring"): 100,
}

FILL = """
for i = 1, tonumber(ARGV[2]) do
  if ARGV[3] == '1' then
    redis.call('SET', ARGV[1] .. i, 'v', 'EX', 3600)
  else
    redis.call('SET', ARGV[1] .. i, 'v')
  end
end
return 1
"""


def fill(redis_srv):
    with Conn(redis_srv.port) as c:
        for db, prefix, n, ttl in KEYSPACE:
            assert c.cmd("SELECT", str(db)) == b"OK"
            c.cmd("EVAL", FILL, "0", prefix, str(n), "1" if ttl else "0")
        c.cmd("SELECT", "0")
        assert c.cmd("DBSIZE") == TOTAL - 500


def start(make_proxy, redis_srv, tmp_path, env=None, **conf):
    admin = harness.free_port()
    log = os.path.join(str(tmp_path), "events.log")
    c = {"admin": "127.0.0.1:%d" % admin, "events": log, "audit_interval": "1h",
         "audit_rate": "20000"}
    c.update(conf)
    p = make_proxy(redis_srv, conf=c, sections=SECTIONS, env=env)
    return p, admin, log


def events(path, name):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [e for e in map(json.loads, f) if e["event"] == name]


def pass_events(log):
    """The audit_pass events once there is one: the event log is written after
    the gauges change, so a scrape that shows the pass may come first."""
    return wait_for(lambda: events(log, "audit_pass"), harness.slow(5), "the audit_pass event")


def wait_passes(admin, n, timeout):
    def done():
        m = scrape(admin)
        return m if value(m, "ttlguard_audit_passes_total") >= n else None
    return wait_for(done, harness.slow(timeout), "%d background audit pass(es)" % n,
                    interval=0.1)


def keys_gauges(m):
    return {(dict(k)["rule"], dict(k)["state"]): v
            for k, v in series(m, "ttlguard_audit_keys").items()}


def test_gauges_and_event_count_the_keyspace(redis_srv, make_proxy, tmp_path):
    fill(redis_srv)
    p, admin, log = start(make_proxy, redis_srv, tmp_path, log_keys="full")
    m = wait_passes(admin, 1, 20)
    assert keys_gauges(m) == EXPECTED
    assert value(m, "ttlguard_audit_last_pass_keys") == TOTAL
    assert value(m, "ttlguard_audit_keys_read_total") == TOTAL
    assert abs(value(m, "ttlguard_audit_last_pass_end_timestamp_seconds") - time.time()) < 60
    assert value(m, "ttlguard_audit_last_pass_duration_seconds") > 0
    assert value(m, "ttlguard_audit_paused", reason="memory") == 0
    assert ("ttlguard_audit_bytes", ()) not in m and not series(m, "ttlguard_audit_bytes")

    (e,) = pass_events(log)
    assert e["keys"] == TOTAL
    assert e["leaked"] == 2000 and e["leaked_change"] is None
    assert e["registered"] == 250 and e["unregistered"] == 200 and e["expiring"] == 550
    assert e["dbs"] == [{"db": 0, "leaked": 1500}, {"db": 1, "leaked": 500}]
    rules = {r["rule"]: r for r in e["rules"]}
    assert rules[S]["leaked"] == 1700 and rules[S]["prefix"] == "s:"
    assert rules[LG]["leaked"] == 300 and rules[DU]["registered"] == 250
    cfg = os.path.realpath(p.config_path)
    assert e["fix"] == ["ttlguard audit --config %s --fix --yes" % cfg,
                        "ttlguard audit --config %s --db 1 --fix --yes" % cfg]
    assert e["leaked_without_rule_ttl"] == 300          # lg: has no ttl to give
    assert {x["pattern"] for x in e["leaked_patterns"]} >= {"s:*", "lg:*"}

    # The same classification as `ttlguard audit`, database by database.
    for db, leaked in ((0, 1500), (1, 500)):
        out = subprocess.run([harness.TTLG_BIN, "audit", "--config", p.config_path,
                              "--db", str(db), "--json"], capture_output=True, timeout=60)
        assert out.returncode == 1, out.stderr
        groups = json.loads(out.stdout)["groups"]
        assert groups["leaked"]["keys"] == leaked

    # A second pass: the change since the first.
    with Conn(redis_srv.port) as c:
        c.cmd("EVAL", FILL, "0", "s:new", "10", "0")
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("audit_interval = 1h", "audit_interval = 1"))
    p.send_signal(signal.SIGHUP)
    wait_passes(admin, 2, 20)
    e2 = wait_for(lambda: events(log, "audit_pass")[1:], harness.slow(5), "a 2nd audit_pass")[0]
    assert e2["leaked"] == 2010 and e2["leaked_change"] == 10
    assert {r["rule"]: r for r in e2["rules"]}[S]["leaked_change"] == 10
    assert {r["rule"]: r for r in e2["rules"]}[LG]["leaked_change"] == 0

    # ttlguard report: the last pass in the text, the passes over time in the page.
    out = subprocess.run([harness.TTLG_BIN, "report", log], capture_output=True, timeout=60)
    # (+0 when a third pass, a second later, ended before the report ran)
    assert re.search(rb"Background audit: \d+ passes; the last: 3010 keys, 2010 leaked "
                     rb"\(\+(10|0) since", out.stdout), out.stdout
    # ...and per rule: its states at the last pass, each with its change.
    assert re.search(rb'\n  ttl "s:" +1710 \(\+(10|0)\) +400 \(\+0\) +- +-\n', out.stdout), \
        out.stdout
    assert re.search(rb'\n  durable "du:" +- +50 \(\+0\) +250 \(\+0\) +-\n', out.stdout)
    page = os.path.join(str(tmp_path), "report.html")
    subprocess.run([harness.TTLG_BIN, "report", "--html", page, log], check=True, timeout=60)
    with open(page) as f:
        html = f.read()
    assert "Keys by state at each background audit pass" in html
    assert re.search(r"2010 leaked \(\+(10|0) since the pass before\)", html)
    # Leaked keys per rule over time, and the last pass's per rule in a table.
    assert "Leaked keys per rule at each background audit pass" in html
    text = " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", html)).split())
    for row in (r"%s 1710 \+(10|0) 0 0" % re.escape(S), r"%s 300 \+0 0 0" % re.escape(LG)):
        assert re.search(row, text), (row, text[-1000:])

def write_commands(port, names):
    """The names COMMAND INFO flags as writes."""
    with Conn(port) as c:
        out = []
        for n in names:
            (info,) = c.cmd("COMMAND", "INFO", n.split("|")[0])
            if info is not None and b"write" in info[2]:
                out.append(n)
        return out


def commandstats(port):
    with Conn(port) as c:
        text = c.cmd("INFO", "commandstats").decode()
    return {line.split(":")[0][len("cmdstat_"):] for line in text.splitlines()
            if line.startswith("cmdstat_")}


def test_rate_is_honoured_and_nothing_is_written(redis_srv, make_proxy, tmp_path):
    fill(redis_srv)
    with Conn(redis_srv.port) as c:
        digest = c.cmd("DEBUG", "DIGEST")
        sizes = [c.cmd("SELECT", str(db)) and c.cmd("DBSIZE") for db in (0, 1)]
        assert c.cmd("CONFIG", "RESETSTAT") == b"OK"
    rate = 1000
    t0 = time.monotonic()
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_rate=str(rate))
    m = wait_passes(admin, 1, 30)
    took = value(m, "ttlguard_audit_last_pass_duration_seconds")
    assert took >= TOTAL / rate * 0.8, took
    assert time.monotonic() - t0 >= TOTAL / rate * 0.8
    assert took <= TOTAL / rate * 2 + 2, took
    assert keys_gauges(m) == EXPECTED

    stats = commandstats(redis_srv.port)
    assert {"scan", "pttl"} <= stats, stats
    assert write_commands(redis_srv.port, stats) == [], stats
    with Conn(redis_srv.port) as c:
        assert c.cmd("DEBUG", "DIGEST") == digest
        assert [c.cmd("SELECT", str(db)) and c.cmd("DBSIZE") for db in (0, 1)] == sizes


def test_reload_keeps_the_cursor(redis_srv, make_proxy, tmp_path):
    fill(redis_srv)
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_rate="600")
    # Mid-pass: some keys read, far from all.
    wait_for(lambda: 300 < value(scrape(admin), "ttlguard_audit_keys_read_total") < TOTAL - 500,
             harness.slow(10), "the pass under way", interval=0.05)
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("audit_rate = 600", "audit_rate = 900"))
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "the pass goes on at db" in p.stderr(), harness.slow(5), "the reload")
    m = wait_passes(admin, 1, 30)
    # Not one key read twice: the pass went on from where it was.
    assert value(m, "ttlguard_audit_keys_read_total") == TOTAL
    assert keys_gauges(m) == EXPECTED
    (e,) = pass_events(log)
    assert e["rate"] == 900

    # New rules in the middle of a pass: it starts over (the counts so far
    # were taken under the old ones).
    text = text.replace("audit_rate = 600", "audit_rate = 900")
    with open(p.config_path, "w") as f:
        f.write(text.replace("audit_interval = 1h", "audit_interval = 1"))
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: TOTAL + 300 < value(scrape(admin), "ttlguard_audit_keys_read_total")
             < 2 * TOTAL - 500, harness.slow(10), "the second pass under way", interval=0.05)
    with open(p.config_path, "w") as f:
        f.write(text.replace("audit_interval = 1h", "audit_interval = 1")
                + '[ttl "o:"]\nttl = 60\naction = rewrite\n')
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "the rules changed: the pass starts over" in p.stderr(), harness.slow(5),
             "the pass to start over")
    m = wait_passes(admin, 2, 30)
    assert value(m, "ttlguard_audit_keys_read_total") > 2 * TOTAL + 300
    g = keys_gauges(m)
    assert g[('ttl "o:"', "leaked")] == 200 and g[('ttl "o:"', "expiring")] == 100
    assert (DEF, "unregistered") in g and g[(DEF, "unregistered")] == 0
    assert g[(S, "leaked")] == 1700


def test_memory_near_maxmemory_pauses(redis_srv, make_proxy, tmp_path):
    fill(redis_srv)
    with Conn(redis_srv.port) as c:
        info = c.cmd("INFO", "memory").decode()
        used = int([l for l in info.splitlines() if l.startswith("used_memory:")][0].split(":")[1])
        assert c.cmd("CONFIG", "SET", "maxmemory", str(int(used * 1.05))) == b"OK"
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_memory="on")
    (e,) = wait_for(lambda: events(log, "audit_paused"), harness.slow(10), "audit_paused")
    assert e["reason"] == "memory" and "maxmemory" in e["message"]
    m = scrape(admin)
    assert value(m, "ttlguard_audit_paused", reason="memory") == 1
    assert value(m, "ttlguard_audit_passes_total") == 0
    assert get(admin, "/healthz")[0] == 200
    time.sleep(1.5)
    assert value(scrape(admin), "ttlguard_audit_keys_read_total") == 0
    with Conn(redis_srv.port) as c:
        assert c.cmd("CONFIG", "SET", "maxmemory", "0") == b"OK"
    m = wait_passes(admin, 1, 20)
    assert events(log, "audit_resumed")
    assert value(m, "ttlguard_audit_paused", reason="memory") == 0
    assert keys_gauges(m) == EXPECTED
    # audit_memory = on: bytes per rule and state.
    b = {(dict(k)["rule"], dict(k)["state"]): v
         for k, v in series(m, "ttlguard_audit_bytes").items()}
    assert b[(S, "leaked")] > 1700 * 16 and b[(LG, "leaked")] > 0
    assert b[(LG, "expiring")] == 0


def health(admin):
    status, _, body = get(admin, "/healthz")
    return status, body.decode()


def audit_events(log):
    with open(log) as f:
        return [e["event"] for e in map(json.loads, f) if e["event"].startswith("audit")]


def test_scan_refused_shows_on_healthz_until_allowed(redis_srv, make_proxy, tmp_path):
    """The proxy's backend user may not SCAN (an ACL): /healthz stays 200 and
    says so on a line of its own, logged once (the INFO read before each retry,
    every 10 s, does not clear it); no pass ends, no audit event is written
    (the refusal is not a pause: nothing to resume from INFO). Allowed again,
    the next retry walks the keyspace and the line goes."""
    fill(redis_srv)
    with Conn(redis_srv.port) as c:
        assert c.cmd("ACL", "SETUSER", "auditor", "on", ">pw", "~*", "&*", "+@all",
                     "-scan") == b"OK"
        # The server's own words for the refusal (Redis 7.0: "this user has no
        # permissions", 8.0: "User auditor has no permissions", Valkey: its own).
        assert c.cmd("AUTH", "auditor", "pw") == b"OK"
        refusal = c.cmd("SCAN", "0")
        assert isinstance(refusal, harness.RespError) and refusal.startswith(b"NOPERM"), refusal
        assert c.cmd("AUTH", "default", "") is not None
    with Conn(redis_srv.port) as c:
        assert c.cmd("ACL", "LOG", "RESET") == b"OK"
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_interval="1",
                          backend_username="auditor", backend_password="pw")
    line = "audit: SCAN refused by 127.0.0.1:%d: %s" % (redis_srv.port, refusal.decode())
    wait_for(lambda: line in health(admin)[1], harness.slow(5), "the refusal on /healthz")
    assert health(admin) == (200, "ok\n" + line + "\n")

    def denied():       # Redis's own count of the SCANs it refused the proxy
        with Conn(redis_srv.port) as c:
            log_ = c.cmd("ACL", "LOG")
        return sum(int(dict(zip(e[0::2], e[1::2]))[b"count"]) for e in log_
                   if dict(zip(e[0::2], e[1::2]))[b"object"] == b"scan")
    wait_for(lambda: denied() >= 2, harness.slow(15), "a 2nd SCAN, 10 s later")
    assert health(admin) == (200, "ok\n" + line + "\n")
    assert p.stderr().count("audit: SCAN refused") == 1, p.stderr()
    m = scrape(admin)
    assert value(m, "ttlguard_audit_passes_total") == 0
    assert value(m, "ttlguard_audit_keys_read_total") == 0
    assert audit_events(log) == []

    with Conn(redis_srv.port) as c:
        assert c.cmd("ACL", "SETUSER", "auditor", "+scan") == b"OK"
    m = wait_passes(admin, 1, 15)
    assert keys_gauges(m) == EXPECTED
    assert health(admin) == (200, "ok\n")
    assert audit_events(log) == ["audit_pass"]


def test_unanswered_command_reconnects(redis_srv, make_proxy, tmp_path):
    """A server that takes a command and does not answer (CLIENT PAUSE):
    after the reply timeout (60 s; TTLG_AUDIT_REPLY_MAX_MS = 1000 here) the
    audit says so on /healthz and in the log, drops the connection, and once
    the server answers again the line goes and passes go on."""
    fill(redis_srv)
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_interval="1",
                          env={"TTLG_AUDIT_REPLY_MAX_MS": "1000"})
    wait_passes(admin, 1, 20)
    with Conn(redis_srv.port) as c:
        assert c.cmd("CLIENT", "PAUSE", str(int(harness.slow(4) * 1000)), "ALL") == b"OK"
    line = "audit: 127.0.0.1:%d did not answer in 1 s: reconnecting" % redis_srv.port
    status, text = wait_for(lambda: (lambda h: h if line in h[1] else None)(health(admin)),
                            harness.slow(4), "the timeout on /healthz")
    # /healthz's own PING waits too: 503 for the backend, the audit's line after it.
    assert status == 503 and text.endswith("\n" + line + "\n"), text
    assert line in p.stderr()
    n = value(scrape(admin), "ttlguard_audit_passes_total")
    m = wait_passes(admin, n + 1, 20)
    assert keys_gauges(m) == EXPECTED
    wait_for(lambda: health(admin) == (200, "ok\n"), harness.slow(5), "a clean /healthz")
    assert p.stderr().count("did not answer") >= 1     # again while the pause lasts


def test_loading_pauses(redis_srv, make_proxy, tmp_path):
    """DEBUG RELOAD mid-pass, made slow by the server's own key-load-delay
    (and events processed every KB meanwhile, so INFO answers loading:1 and
    SCAN/PTTL -LOADING): the walk pauses (audit_paused loading), resumes
    from its cursor when loading ends, and the pass counts the keyspace
    exactly: no batch refused with -LOADING counted as expired keys."""
    fill(redis_srv)
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_rate="600")
    wait_for(lambda: 300 < value(scrape(admin), "ttlguard_audit_keys_read_total") < 1500,
             harness.slow(10), "the pass under way", interval=0.05)
    with Conn(redis_srv.port, timeout=60) as c:
        assert c.cmd("CONFIG", "SET", "key-load-delay", "1000") == b"OK"          # us a key
        assert c.cmd("CONFIG", "SET", "loading-process-events-interval-bytes", "1024") == b"OK"
        t0 = time.monotonic()
        assert c.cmd("DEBUG", "RELOAD") == b"OK"
        took = time.monotonic() - t0
        assert c.cmd("CONFIG", "SET", "key-load-delay", "0") == b"OK"
    assert took > 2, "DEBUG RELOAD took %.2f s: too fast to see loading" % took
    (e,) = wait_for(lambda: events(log, "audit_paused"), harness.slow(5), "audit_paused")
    assert e["reason"] == "loading" and "loading:1" in e["message"], e
    (r,) = wait_for(lambda: events(log, "audit_resumed"), harness.slow(5), "audit_resumed")
    assert r["reason"] == "loading" and r["paused_ms"] > 0
    m = wait_passes(admin, 1, 30)
    assert keys_gauges(m) == EXPECTED
    (e,) = pass_events(log)
    assert e["keys"] == TOTAL and e["expired_during"] == 0


def test_audit_from_a_replica_of_the_backend(redis_srv, make_redis, make_proxy, tmp_path):
    fill(redis_srv)
    replica = make_redis(["--replicaof", "127.0.0.1", str(redis_srv.port)])

    def synced():
        with Conn(replica.port) as c:
            up = b"master_link_status:up" in c.cmd("INFO", "replication")
            return up and c.cmd("DBSIZE") == TOTAL - 500
    wait_for(synced, harness.slow(10), "the replica in sync")
    for port in (redis_srv.port, replica.port):
        with Conn(port) as c:
            assert c.cmd("CONFIG", "RESETSTAT") == b"OK"
    where = "127.0.0.1:%d" % replica.port
    p, admin, log = start(make_proxy, redis_srv, tmp_path, audit_from=where)
    m = wait_passes(admin, 1, 30)
    assert keys_gauges(m) == EXPECTED
    (e,) = pass_events(log)
    assert e["from"] == where and e["keys"] == TOTAL
    # The fix still goes to the backend: the replica is read-only.
    assert all("--backend" not in cmd for cmd in e["fix"]), e["fix"]
    assert {"scan", "pttl"} <= commandstats(replica.port)
    assert not {"scan", "pttl"} & commandstats(redis_srv.port)

    # A reload back to the primary starts the pass over there.
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("audit_from = %s\n" % where, "")
                .replace("audit_interval = 1h", "audit_interval = 1"))
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "audit: audit_from changed: the pass starts over" in p.stderr(),
             harness.slow(5), "the pass to start over")
    wait_passes(admin, 2, 30)
    e2 = wait_for(lambda: events(log, "audit_pass")[1:], harness.slow(5), "a 2nd audit_pass")[0]
    assert "from" not in e2 and e2["keys"] == TOTAL
    assert {"scan", "pttl"} <= commandstats(redis_srv.port)


def test_off_by_default(redis_srv, make_proxy):
    admin = harness.free_port()
    make_proxy(redis_srv, conf={"admin": "127.0.0.1:%d" % admin}, sections=SECTIONS)
    m = scrape(admin)
    assert not [k for k in m if k[0].startswith("ttlguard_audit_")]


# --------------------------------------------------------------------------
# cluster = on: every primary walked, one after the other
# --------------------------------------------------------------------------

# (prefix, how many, with a TTL): database 0 only, spread over the shards by
# the keys' own slots.
CLUSTER_KEYSPACE = [("s:", 600, False), ("s:e", 200, True), ("lg:", 150, False),
                    ("du:", 100, False), ("o:", 100, False)]
CLUSTER_TOTAL = sum(n for _, n, _ in CLUSTER_KEYSPACE)
CLUSTER_EXPECTED = {
    (S, "leaked"): 600, (S, "expiring"): 200, (LG, "leaked"): 150, (LG, "expiring"): 0,
    (DU, "registered"): 100, (DU, "expiring"): 0,
    (DEF, "unregistered"): 100, (DEF, "expiring"): 0,
}


def cluster_fill(cluster):
    """CLUSTER_KEYSPACE written straight to the primary that owns each key."""
    from cluster_util import key_slot
    owner = {}
    for lo, hi, port, _, _ in cluster.slots():
        owner.update((s, port) for s in range(lo, hi + 1))
    conns = {}
    try:
        for prefix, n, ttl in CLUSTER_KEYSPACE:
            for i in range(1, n + 1):
                key = "%s%d" % (prefix, i)
                port = owner[key_slot(key)]
                c = conns.get(port) or conns.setdefault(port, Conn(port).__enter__())
                args = ("SET", key, "v") + (("EX", "3600") if ttl else ())
                assert c.cmd(*args) == b"OK"
    finally:
        for c in conns.values():
            c.__exit__(None, None, None)
    return {p: cluster.cmd(p, "DBSIZE") for p in set(owner.values())}


@pytest.fixture
def filled_cluster(tmp_path):
    """A 6-node cluster of the test's own holding CLUSTER_KEYSPACE: (cluster,
    {primary port: its DBSIZE})."""
    from cluster_util import Cluster
    cluster = Cluster(tmp_path / "cluster").start()
    try:
        sizes = cluster_fill(cluster)
        assert sum(sizes.values()) == CLUSTER_TOTAL and len(sizes) == 3
        assert all(n > 0 for n in sizes.values()), sizes
        yield cluster, sizes
    finally:
        cluster.stop()


@pytest.fixture
def audit_cproxy(tmp_path):
    """start(cluster, rate) -> (proxy, admin port, events log): ttlguard with
    cluster = on and the background audit; at teardown SIGTERM, exit 0."""
    from cluster_util import ClusterProxy
    started = []

    def start(cluster, rate, **conf):
        admin = harness.free_port()
        log = os.path.join(str(tmp_path), "events.log")
        conf.update({"admin": "127.0.0.1:%d" % admin, "events": log, "audit_interval": "1h",
                     "audit_rate": str(rate)})
        p = ClusterProxy(tmp_path, cluster, conf, SECTIONS)
        started.append(p)
        p.start(expect=b"+PONG")
        return p, admin, log

    yield start
    for p in started:
        rc = p.stop()
        if rc != 0:
            sys.stderr.write(p.stderr())
        assert rc == 0, "ttlguard exit status %s" % rc


def test_cluster_walks_every_primary(filled_cluster, audit_cproxy):
    cluster, sizes = filled_cluster
    for port in cluster.ports:
        assert cluster.cmd(port, "CONFIG", "RESETSTAT") == b"OK"
    p, admin, log = audit_cproxy(cluster, 20000)
    m = wait_passes(admin, 1, 30)
    assert keys_gauges(m) == CLUSTER_EXPECTED
    assert value(m, "ttlguard_audit_last_pass_keys") == CLUSTER_TOTAL
    (e,) = pass_events(log)
    assert e["keys"] == CLUSTER_TOTAL and e["leaked"] == 750
    assert e["dbs"] == [{"db": 0, "leaked": 750}]
    # One line per primary, each with the keys it holds.
    nodes = {int(n["node"].rsplit(":", 1)[1]): n for n in e["nodes"]}
    assert {port: n["keys"] for port, n in nodes.items()} == sizes
    assert sum(n["leaked"] for n in nodes.values()) == 750
    assert e["fix"] == ["ttlguard audit --config %s --cluster --fix --yes"
                        % os.path.realpath(p.config_path)]
    # Every primary was read, with nothing written; no replica was read.
    for port in cluster.ports:
        stats = commandstats(port)
        if port in sizes:
            assert {"scan", "pttl"} <= stats, (port, stats)
            assert write_commands(port, stats) == [], (port, stats)
        else:
            assert "scan" not in stats and "pttl" not in stats, (port, stats)


def test_cluster_primary_lost_mid_pass(filled_cluster, audit_cproxy):
    """The primary being walked dies: once the topology shows it failed the
    pass starts over on the primaries there are now (its replica, promoted),
    and the next full pass counts the same keyspace."""
    cluster, sizes = filled_cluster
    p, admin, log = audit_cproxy(cluster, 300)
    walking = wait_for(lambda: re.findall(r"audit: connected to 127\.0\.0\.1:(\d+): the pass",
                                          p.stderr()), harness.slow(10), "the pass under way")
    victim = int(walking[-1])
    assert victim in sizes
    cluster.server(victim).stop()
    wait_for(lambda: "127.0.0.1:%d is no longer an online primary" % victim in p.stderr(),
             harness.slow(30), "the pass to start over")
    m = wait_passes(admin, 1, 60)
    assert keys_gauges(m) == CLUSTER_EXPECTED
    (e,) = pass_events(log)
    ports = {int(n["node"].rsplit(":", 1)[1]) for n in e["nodes"]}
    assert victim not in ports and len(ports) == 3
    assert e["keys"] == CLUSTER_TOTAL


def node_port(name):
    return int(name.rsplit(":", 1)[1])


def test_cluster_reads_a_replica_of_each_shard(filled_cluster, audit_cproxy):
    cluster, sizes = filled_cluster
    for port in cluster.ports:
        assert cluster.cmd(port, "CONFIG", "RESETSTAT") == b"OK"
    p, admin, log = audit_cproxy(cluster, 20000, audit_from="replica")
    m = wait_passes(admin, 1, 30)
    assert keys_gauges(m) == CLUSTER_EXPECTED
    (e,) = pass_events(log)
    assert e["keys"] == CLUSTER_TOTAL and e["leaked"] == 750
    assert events(log, "audit_fallback") == []
    # One replica per shard, each holding what its primary holds.
    replica_of = {n["port"]: cluster.node_by_id(n["master"])["port"]
                  for n in cluster.replicas()}
    read = {node_port(n["node"]): n for n in e["nodes"]}
    assert len(read) == 3 and set(read) <= set(replica_of)
    assert {replica_of[r]: n["keys"] for r, n in read.items()} == sizes
    assert all(node_port(n["replica_of"]) == replica_of[r] for r, n in read.items())
    # The primaries were not walked: no SCAN, no PTTL there.
    for port in cluster.ports:
        stats = commandstats(port)
        if port in read:
            assert {"scan", "pttl", "readonly"} <= stats, (port, stats)
        else:
            assert not {"scan", "pttl"} & stats, (port, stats)


def test_cluster_shard_without_replica_reads_its_primary(filled_cluster, audit_cproxy):
    """A shard whose replica is down is read from its primary (audit_fallback),
    the others from their replicas; the counts are the same."""
    cluster, sizes = filled_cluster
    gone = cluster.replicas()[0]
    primary = cluster.node_by_id(gone["master"])["port"]
    cluster.server(gone["port"]).stop()
    wait_for(lambda: "fail" in cluster.node_by_id(gone["id"], primary)["flags"],
             harness.slow(20), "the cluster to mark the replica failed")
    for port in cluster.ports:
        if port != gone["port"]:
            assert cluster.cmd(port, "CONFIG", "RESETSTAT") == b"OK"
    p, admin, log = audit_cproxy(cluster, 20000, audit_from="replica")
    m = wait_passes(admin, 1, 30)
    assert keys_gauges(m) == CLUSTER_EXPECTED
    (e,) = pass_events(log)  # written after audit_fallback: both are in the file now
    (f,) = events(log, "audit_fallback")
    assert node_port(f["node"]) == primary and "no online replica" in f["message"]
    read = {node_port(n["node"]): n for n in e["nodes"]}
    assert "replica_of" not in read[primary] and read[primary]["keys"] == sizes[primary]
    assert sum(n["keys"] for n in read.values()) == CLUSTER_TOTAL
    for port in sizes:
        assert ("scan" in commandstats(port)) == (port == primary), port
