"""
The event log (docs/events.md) read back after scripted workloads:

  - registrations at start: one per rule, the default included;
  - each violation type, durable writes, ttl_on_durable and unverified
    commands, with exact counts (a line without "count" is one occurrence,
    a folded line is "count" occurrences);
  - folding: the first occurrence at once, the repeats of a window in one
    line written when the window closes (while the proxy runs);
  - client address, name and db; binary keys round-trip;
  - log_keys = hash and prefix keep key names out of the file;
  - SIGUSR1 reopens (logrotate); SIGHUP reload, good and bad;
  - a full disk or an unwritable path never stops the proxy;
  - the backend's eviction policy;
  - `ttlguard report` over the log.
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

import harness
from harness import Conn, enc, wait_for

DURABLE = "owner = payments\nreason = ledger of record\nrebuild = replay from Postgres\n"
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def durable(prefix):
    return '[durable "%s"]\n%s\n' % (prefix, DURABLE)


def ttl_rule(prefix, action, ttl=100, **extra):
    out = '[ttl "%s"]\nttl = %d\naction = %s\n' % (prefix, ttl, action)
    for k, v in extra.items():
        out += "%s = %s\n" % (k, v)
    return out + "\n"


SECTIONS = (ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject") + ttl_rule("lg:", "log")
            + ttl_rule("cap:", "rewrite", ttl=50, max_ttl=100)
            + ttl_rule("bd:", "rewrite", refresh="bound") + durable("du:"))


def read_events(path):
    """Every line of the log, each a JSON object with ts and event."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"" or data.endswith(b"\n"), "last line not terminated"
    for line in data.splitlines():
        e = json.loads(line)
        assert TS_RE.match(e["ts"]), e
        assert isinstance(e["event"], str), e
        out.append(e)
    return out


def of(events, **match):
    return [e for e in events if all(e.get(k) == v for k, v in match.items())]


def occurrences(events, **match):
    return sum(e.get("count", 1) for e in of(events, **match))


def key_bytes(text):
    """A logged key back to its bytes (\\udcXX stands for the byte XX)."""
    return text.encode("utf-8", "surrogateescape")


def wait_event(path, what, pred, timeout=5):
    def seen():
        if not os.path.exists(path):
            return None
        found = [e for e in read_events(path) if pred(e)]
        return found or None
    return wait_for(seen, timeout, what)


def start(make_proxy, redis_srv, tmp_path, sections=SECTIONS, **conf):
    log = os.path.join(str(tmp_path), "events.log")
    c = {"events": log, "event_window": 1}
    c.update(conf)
    p = make_proxy(redis_srv, conf=c, sections=sections)
    return p, log


def local_addr(conn):
    host, port = conn.sock.getsockname()[:2]
    return "%s:%d" % (host, port)


# --------------------------------------------------------------------------
# Registrations
# --------------------------------------------------------------------------

def test_registrations_at_start(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path,
                   sections=SECTIONS + "[default]\naction = log\n")
    pid = p.pid
    assert p.stop() == 0
    ev = read_events(log)

    assert ev[0]["event"] == "log_opened"
    assert ev[0]["pid"] == pid
    assert ev[0]["config"] == p.config_path
    assert ev[0]["log_keys"] == "full"
    assert ev[0]["event_window"] == 1

    regs = of(ev, event="registration")
    assert len(regs) == 7                          # 6 prefix rules and the default
    assert ev[1:8] == regs                         # right after log_opened
    by_prefix = {r["prefix"]: r for r in regs}
    assert set(by_prefix) == {"rw:", "rj:", "lg:", "cap:", "bd:", "du:", ""}
    du = by_prefix["du:"]
    assert (du["kind"], du["rule"], du["owner"], du["reason"], du["rebuild"]) == \
        ("durable", 'durable "du:"', "payments", "ledger of record", "replay from Postgres")
    cap = by_prefix["cap:"]
    assert (cap["kind"], cap["rule"], cap["ttl"], cap["action"], cap["refresh"], cap["max_ttl"]) == \
        ("ttl", 'ttl "cap:"', 50, "rewrite", "allow", 100)
    assert by_prefix["bd:"]["refresh"] == "bound"
    assert by_prefix["rj:"]["action"] == "reject"
    dflt = by_prefix[""]
    assert (dflt["kind"], dflt["rule"], dflt["action"]) == ("default", "default", "log")
    assert all(isinstance(r["line"], int) and r["line"] > 0 for r in regs)

    pol = of(ev, event="backend_policy")
    assert len(pol) == 1
    assert (pol[0]["policy"], pol[0]["level"]) == ("noeviction", "ok")


# --------------------------------------------------------------------------
# Violations, durable writes, unverified commands
# --------------------------------------------------------------------------

def workload(c):
    """One of each kind of event; returns what the log must say."""
    for _ in range(3):
        assert c.cmd("SET", "rw:a", "1") == b"OK"
    for _ in range(2):
        assert isinstance(c.cmd("INCR", "rw:n"), int)
    assert c.cmd("PERSIST", "rw:a").startswith(b"TTLGUARD PERSIST")
    for _ in range(2):
        assert c.cmd("GETSET", "rj:a", "0").startswith(b"TTLGUARD GETSET")
    assert c.cmd("SET", "lg:a", "1") == b"OK"
    assert c.cmd("SET", "cap:a", "1", "EX", "1000") == b"OK"
    assert c.cmd("SET", "bd:a", "1", "EX", "100") == b"OK"          # sets a TTL: passes
    assert c.cmd("EXPIRE", "bd:a", "500") in (0, 1)
    for _ in range(2):
        assert c.cmd("SET", "du:a", "1") == b"OK"
    assert c.cmd("EXPIRE", "du:a", "100") == 1
    assert c.cmd("SWAPDB", "0", "1") == b"OK"
    assert c.cmd("SWAPDB", "0", "1") == b"OK"
    assert c.cmd("FOO.BAR", "x").startswith(b"ERR unknown command")
    assert c.cmd("SET", "plain", "1") == b"OK"                       # no rule, no event
    return {
        ('ttl "rw:"', "SET", "drops-ttl", "rewritten"): 3,
        ('ttl "rw:"', "INCR", "creates-without-ttl", "rewritten"): 2,
        ('ttl "rw:"', "PERSIST", "persist", "rejected"): 1,
        ('ttl "rj:"', "GETSET", "drops-ttl", "rejected"): 2,
        ('ttl "lg:"', "SET", "drops-ttl", "logged"): 1,
        ('ttl "cap:"', "SET", "exceeds-max-ttl", "rewritten"): 1,
        ('ttl "bd:"', "EXPIRE", "extends-ttl", "rewritten"): 1,
    }


def violation_counts(ev):
    out = {}
    for e in of(ev, event="violation"):
        k = (e["rule"], e["command"], e["effect"], e["action"])
        out[k] = out.get(k, 0) + e.get("count", 1)
    return out


def test_each_event_type_with_exact_counts(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path)
    with Conn(p.port) as c:
        addr = local_addr(c)
        want = workload(c)
    assert p.stop() == 0                       # flushes what is still folded
    ev = read_events(log)

    assert violation_counts(ev) == want
    for e in of(ev, event="violation"):
        assert e["client"] == addr and e["db"] == 0, e
        assert "client_name" not in e
        assert e["prefix"] == e["rule"][5:-1], e     # ttl "rw:" -> rw:
        assert key_bytes(e["key"]).startswith(e["prefix"].encode())
    first = of(ev, event="violation", command="SET", action="rewritten")[0]
    assert first["key"] == "rw:a" and "count" not in first

    assert occurrences(ev, event="durable_write", rule='durable "du:"', command="SET") == 2
    assert occurrences(ev, event="ttl_on_durable", rule='durable "du:"', command="EXPIRE") == 1
    assert of(ev, event="ttl_on_durable")[0]["key"] == "du:a"
    assert occurrences(ev, event="unverified", command="SWAPDB") == 2
    assert occurrences(ev, event="unverified", command="FOO.BAR") == 1
    assert not [e for e in ev if "plain" in json.dumps(e)]


def test_client_name_and_db(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path)
    with Conn(p.port) as c:
        assert c.cmd("CLIENT", "SETNAME", "billing-worker") == b"OK"
        assert c.cmd("SELECT", "3") == b"OK"
        assert c.cmd("SET", "rw:x", "1") == b"OK"
        addr = local_addr(c)
    assert p.stop() == 0
    (e,) = of(read_events(log), event="violation")
    assert (e["client"], e["client_name"], e["db"], e["key"]) == (addr, "billing-worker", 3, "rw:x")


def test_binary_keys_round_trip(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path)
    keys = [b"rw:\xff\x00\n", "rw:caf\u00e9".encode(), b'rw:"\\\x7f']
    with Conn(p.port) as c:
        for i, k in enumerate(keys):
            # Different commands: each is a first occurrence, written with its key.
            cmd = ("SET", "APPEND", "SETRANGE")[i]
            args = (k, "v") if cmd != "SETRANGE" else (k, "0", "v")
            c.cmd(cmd, *args)
    assert p.stop() == 0
    raw = open(log, "rb").read()
    raw.decode("utf-8")                        # the file is valid UTF-8 whatever the keys
    got = [key_bytes(e["key"]) for e in of(read_events(log), event="violation")]
    assert sorted(got) == sorted(keys)
    assert b"caf\xc3\xa9" in raw               # valid UTF-8 is written as is


# --------------------------------------------------------------------------
# Folding
# --------------------------------------------------------------------------

def test_repeats_fold_into_one_line_when_the_window_closes(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path, event_window=2)
    n = 1000
    t0 = time.monotonic()
    with Conn(p.port) as c:
        c.send(b"".join(enc("SET", "rw:k%d" % i, "v") for i in range(n)))
        assert c.replies(n) == [b"OK"] * n
    quick = time.monotonic() - t0 < 1.5

    # The folded line is written by the window's timer, not at shutdown.
    folded = wait_event(log, "the folded line", lambda e: e.get("count"), timeout=6)
    ev = read_events(log)
    lines = of(ev, event="violation")
    assert occurrences(ev, event="violation") == n
    assert lines[0]["key"] == "rw:k0" and "count" not in lines[0]
    if quick:                                  # all within one window
        assert len(lines) == 2
        assert folded[0]["count"] == n - 1
        assert folded[0]["key"] == "rw:k%d" % (n - 1)   # the last one is the example

    # A quiet window ends the fold: the next one is written at once.
    time.sleep(harness.slow(2) * 2 + 0.5)
    with Conn(p.port) as c:
        assert c.cmd("SET", "rw:again", "v") == b"OK"
    again = wait_event(log, "the next first occurrence",
                       lambda e: e.get("key") == "rw:again", timeout=3)
    assert "count" not in again[0]
    assert p.stop() == 0
    assert occurrences(read_events(log), event="violation") == n + 1


# --------------------------------------------------------------------------
# log_keys
# --------------------------------------------------------------------------

def test_log_keys_hash(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path, log_keys="hash")
    with Conn(p.port) as c:
        assert c.cmd("SET", "rw:secret-one", "1") == b"OK"
        assert c.cmd("INCR", "rw:secret-one") == 2
        assert c.cmd("SET", "rw:secret-two", "1") == b"OK"
        assert c.cmd("EVAL", "return 1", "1", "rw:secret-three") == 1
    assert p.stop() == 0
    raw = open(log, "rb").read()
    assert b"secret" not in raw
    ev = read_events(log)
    assert re.match(r"^[0-9a-f]{8}$", ev[0]["hash_id"])
    assert ev[0]["log_keys"] == "hash"
    first, incr = of(ev, command="SET")[0], of(ev, command="INCR")[0]
    folded = of(ev, command="SET")[1]
    for e in (first, incr, folded):
        assert "key" not in e and re.match(r"^[0-9a-f]{16}$", e["key_hash"]), e
    assert first["key_hash"] == incr["key_hash"]        # same key, same hash
    assert folded["key_hash"] != first["key_hash"]      # rw:secret-two
    assert folded["count"] == 1


def test_log_keys_prefix(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path, log_keys="prefix")
    with Conn(p.port) as c:
        assert c.cmd("SET", "rw:secret-one", "1") == b"OK"
        assert c.cmd("SET", "du:secret-two", "1") == b"OK"
    assert p.stop() == 0
    assert b"secret" not in open(log, "rb").read()
    ev = read_events(log)
    v = of(ev, event="violation")[0]
    assert v["prefix"] == "rw:" and "key" not in v and "key_hash" not in v
    assert of(ev, event="durable_write")[0]["prefix"] == "du:"


# --------------------------------------------------------------------------
# SIGUSR1, SIGHUP
# --------------------------------------------------------------------------

def test_sigusr1_reopens_the_file(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path)
    with Conn(p.port) as c:
        assert c.cmd("SET", "rw:before", "1") == b"OK"
        wait_event(log, "the first violation", lambda e: e.get("key") == "rw:before")
        os.rename(log, log + ".1")
        os.kill(p.pid, signal.SIGUSR1)
        wait_for(lambda: os.path.exists(log), 5, "the new file")
        assert c.cmd("INCR", "rw:after") == 1
    assert p.stop() == 0

    old, new = read_events(log + ".1"), read_events(log)
    assert of(old, key="rw:before") and not of(old, key="rw:after")
    assert new[0]["event"] == "log_opened"
    assert of(new, key="rw:after") and not of(new, key="rw:before")
    assert not of(new, event="registration")     # a reopen is not a restart


def rewrite_config(p, sections):
    with open(p.config_path) as f:
        head = f.read().split("\n[", 1)[0]         # the [proxy] section
    with open(p.config_path, "w") as f:
        f.write(head + "\n" + sections)


def test_reload_good_config(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path, sections=ttl_rule("rw:", "rewrite"))
    with Conn(p.port) as c:
        assert c.cmd("SET", "rw:a", "1") == b"OK"
        assert c.cmd("SET", "rw:b", "1") == b"OK"          # folded, not yet written
        rewrite_config(p, ttl_rule("rw:", "rewrite") + ttl_rule("new:", "reject") + durable("d:"))
        os.kill(p.pid, signal.SIGHUP)
        wait_event(log, "config_reloaded", lambda e: e["event"] == "config_reloaded")
        # Same session, next request: the new rules apply.
        assert c.cmd("SET", "new:a", "1").startswith(b"TTLGUARD SET")
    assert p.stop() == 0

    ev = read_events(log)
    names = [e["event"] for e in ev]
    i = names.index("config_reloaded")
    # What was folded under the old rules is written before the new registrations.
    folded = of(ev, event="violation", count=1)
    assert folded and ev.index(folded[0]) < i - 4
    assert names[i - 4:i] == ["registration"] * 4
    assert {e["prefix"] for e in ev[i - 4:i]} == {"rw:", "new:", "d:", ""}
    assert ev[i]["config"] == p.config_path and ev[i]["rules"] == 4     # the default too
    assert occurrences(ev, event="violation", rule='ttl "new:"', action="rejected") == 1


def test_reload_bad_config_is_refused_and_logged(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path, sections=ttl_rule("rw:", "rewrite"))
    rewrite_config(p, ttl_rule("rw:", "rewrite") + '[ttl "bad:"]\nttl = 10\naction = explode\n')
    os.kill(p.pid, signal.SIGHUP)
    (e,) = wait_event(log, "config_rejected", lambda e: e["event"] == "config_rejected")
    assert e["config"] == p.config_path
    assert re.match(r"^%s:\d+: action = 'explode'" % re.escape(p.config_path), e["reason"]), e
    with Conn(p.port) as c:                          # the old rules still hold
        assert c.cmd("SET", "rw:a", "1") == b"OK"
        assert 0 < c.cmd("TTL", "rw:a") <= 100
        assert c.cmd("SET", "bad:a", "1") == b"OK"
        assert c.cmd("TTL", "bad:a") == -1
    assert p.stop() == 0
    ev = read_events(log)
    assert not of(ev, event="config_reloaded")
    assert len(of(ev, event="registration")) == 2    # only those of the start


# --------------------------------------------------------------------------
# Failure modes
# --------------------------------------------------------------------------

def test_unopenable_path_refuses_to_start(redis_srv, tmp_path):
    log = os.path.join(str(tmp_path), "no", "such", "dir", "events.log")
    t = harness.Ttlguard(tmp_path, redis_srv.port, {"events": log})
    with pytest.raises(RuntimeError) as exc:
        t.start()
    assert "exited 1 at startup" in str(exc.value)
    assert "events = %s: cannot open: No such file or directory" % log in str(exc.value)


def test_full_disk_never_stops_the_proxy(redis_srv, make_proxy, tmp_path):
    admin = harness.free_port()
    p = make_proxy(redis_srv, conf={"events": "/dev/full", "admin": "127.0.0.1:%d" % admin},
                   sections=ttl_rule("rw:", "rewrite"))
    with Conn(p.port) as c:
        for i in range(50):
            assert c.cmd("SET", "rw:%d" % i, "1") == b"OK"
            assert 0 < c.cmd("TTL", "rw:%d" % i) <= 100

    def dropped():
        import urllib.request
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=5).read()
        m = dict(re.findall(rb"^(ttlguard_events_(?:dropped|written)_total) (\d+)$", body, re.M))
        return m if int(m[b"ttlguard_events_dropped_total"]) >= 5 else None
    m = wait_for(dropped, 5, "events_dropped to count the lost lines")
    assert int(m[b"ttlguard_events_written_total"]) == 0
    assert p.proc.poll() is None                     # still serving
    assert len(re.findall(r"events: writing to /dev/full failed", p.stderr())) == 1   # once a minute


def test_backend_policy_warns_for_durable_rules_under_allkeys(make_redis, make_proxy, tmp_path):
    r = make_redis(["--maxmemory-policy", "allkeys-lru"])
    p, log = start(make_proxy, r, tmp_path, sections=durable("d:"))
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
    assert p.stop() == 0
    (e,) = of(read_events(log), event="backend_policy")
    assert (e["policy"], e["level"], e["durable_rules"]) == ("allkeys-lru", "warn", 1)
    assert "evict" in e["message"]
    assert "allkeys-lru" in p.stderr()


# --------------------------------------------------------------------------
# ttlguard report
# --------------------------------------------------------------------------

def run_report(*args):
    return subprocess.run([harness.TTLG_BIN, "report"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=harness.slow(30))


def test_report_summarises_the_log(redis_srv, make_proxy, tmp_path):
    p, log = start(make_proxy, redis_srv, tmp_path)
    with Conn(p.port) as c:
        want = workload(c)
    assert p.stop() == 0

    r = run_report(log)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    lines = [" ".join(l.split()) for l in out.splitlines()]
    assert '"du:" owner: payments' in lines
    assert "reason: ledger of record" in lines
    assert "rebuild: replay from Postgres" in lines
    assert "Violations: %d" % sum(want.values()) in lines
    for (rule, cmd, effect, action), n in want.items():
        assert "%d %s %s %s %s" % (n, rule, cmd, effect, action) in lines, out
    # rw:a: the first SET, the folded SETs (their example) and the PERSIST.
    assert '3 "rw:a" (ttl "rw:")' in lines, out
    assert "2 durable \"du:\" SET" in lines
    assert any(l.startswith("1 durable \"du:\" EXPIRE put a TTL") for l in lines), out
    assert "2 SWAPDB not judged by the proxy" in lines, out
    assert "1 FOO.BAR unknown command" in lines, out

    # Two files add up.
    r2 = run_report(log, log)
    assert "Violations: %d" % (2 * sum(want.values())) in r2.stdout.decode()


def test_report_shows_backend_server_warnings(tmp_path):
    """A backend whose identity could not be read is worth a line; an ok one is not."""
    log = tmp_path / "events.jsonl"
    log.write_text(
        '{"ts":"2026-12-01T10:00:00.000Z","event":"backend_server","server":"redis",'
        '"version":"7.0.0","source":"assumed","level":"warn","message":"the backend\'s name '
        'and version are unknown (INFO server refused)","table_commands":124,'
        '"derived_commands":0,"unjudged_commands":0}\n'
        '{"ts":"2026-12-01T10:00:01.000Z","event":"backend_server","server":"valkey",'
        '"version":"9.1.2","source":"backend","level":"ok","table_commands":138,'
        '"derived_commands":0,"unjudged_commands":0}\n')
    r = run_report(str(log))
    assert r.returncode == 0, r.stderr
    lines = [" ".join(l.split()) for l in r.stdout.decode().splitlines()]
    assert "Backend server" in lines, lines
    assert ("redis 7.0.0 (warn): the backend's name and version are unknown "
            "(INFO server refused)") in lines, lines
    assert not any("valkey" in l for l in lines), lines


def test_report_skips_numbers_out_of_range(tmp_path):
    """A number no long long holds (found by fuzz_report: converting it was
    undefined behaviour) makes its line not an event line: counted, skipped."""
    log = tmp_path / "events.jsonl"
    ok = ('{"ts":"2026-12-01T10:00:01.000Z","event":"backend_server","server":"redis",'
          '"version":"7.0.15","source":"backend","level":"ok","table_commands":%s,'
          '"derived_commands":0,"unjudged_commands":0}\n')
    log.write_text(ok % "124" + ok % "1.04444e+26" + ok % "-1e300" + ok % "nan")
    r = run_report(str(log))
    assert r.returncode == 0, r.stderr
    assert b"(3 lines skipped: not event log lines)" in r.stdout, r.stdout


def test_report_unreadable_file_exits_2(tmp_path):
    harness.need_binary()
    r = run_report(os.path.join(str(tmp_path), "missing.log"))
    assert r.returncode == 2
    assert b"missing.log" in r.stderr
    assert r.stdout == b""


def test_log_format_json(make_proxy, tmp_path):
    """log_format = json: every line ttlguard writes about itself (start,
    a backend that is down, a refused reload) is one JSON object with ts,
    level and msg, and the message survives escaping (quotes, backslashes);
    text is the default and stays the "TS ttlguard LEVEL: msg" form."""
    down = harness.free_port()                    # nothing listens there
    p = make_proxy(down, conf={"log_format": "json", "connect_timeout": "300"}, expect=None)
    with Conn(p.port) as c:
        c.send(enc("PING"))
        c.read_until_eof(timeout=5)
    with open(p.config_path, "a") as f:
        f.write('[ttl "a\\"b\\\\"]\naction = rewrite\n')   # refused: no ttl
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "config refused" in p.stderr(), 5, "the refused reload")
    lines = [l for l in p.stderr().splitlines() if l.strip()]
    objs = [json.loads(l) for l in lines]           # raises on any non-JSON line
    assert all(set(o) == {"ts", "level", "msg"} for o in objs), objs
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["ts"]) for o in objs)
    assert any(o["level"] == "warn" and "unavailable: connection refused" in o["msg"]
               for o in objs), objs
    refused = [o["msg"] for o in objs if "config refused" in o["msg"]]
    assert refused and '[ttl "a\\"b\\\\"] has action = rewrite but no ttl' in refused[0], refused

    q = make_proxy(down, expect=None)
    first = [l for l in q.stderr().splitlines() if "listening on" in l][0]
    assert re.match(r"^\S+Z ttlguard info: ttlguard \S+ listening on ", first), first


def test_check_config_sees_an_event_log_it_cannot_write(tmp_path):
    """--check-config answers what the start would: an event log whose
    directory is missing (or a file that cannot be written) is an error,
    exit 1, naming the path; a writable place passes and nothing is created
    by the check itself."""
    harness.need_binary()
    bad = tmp_path / "bad.ini"
    bad.write_text("[proxy]\nevents = %s/missing/events.jsonl\n" % tmp_path)
    r = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", str(bad)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1, r
    assert "events = %s/missing/events.jsonl: cannot be created in %s/missing: No such file" % (
        tmp_path, tmp_path) in r.stderr, r.stderr
    good = tmp_path / "good.ini"
    log = tmp_path / "events.jsonl"
    good.write_text("[proxy]\nevents = %s\n" % log)
    r = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", str(good)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and "OK" in r.stdout, r
    assert not log.exists()
