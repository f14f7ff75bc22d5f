#!/usr/bin/env python3
"""
Differential fuzzing of ttlguard's transparency.

Random cases (gen.py: pipelines of real commands over strings, lists, hashes,
sets, sorted sets, streams, bitmaps, HyperLogLog, the keyspace, scripts,
MULTI/EXEC/WATCH, CLIENT REPLY, pub/sub, blocking pops with 10 ms timeouts,
inline commands, errors, RESP2 and RESP3, binary keys and values) are sent to
one redis-server directly and through ttlguard to a second one, both started
fresh and given the same initial data before every case. Each batch is
written in random-sized chunks (the same split on both sides) and ends with a
PING round trip. Then:

  - every reply must be byte-identical (compare.py names the few replies that
    are nondeterministic by nature and how they are compared instead); the
    connection model (model.py, Redis 7.0) says which reply belongs to which
    request, and where it does not follow the server (another reply count:
    Redis 7.2+, Valkey) the batch is compared raw, the proxy's replies
    against the server's position by position (compare_raw), as is a batch
    whose sentinel never comes back on either side (both must end alike);
  - at the end both keyspaces must be equal: the same keys in databases 0 and
    1, DUMP equal (hash-table sets and hashes, and streams with consumer
    groups, by content: their DUMP carries hash order or delivery times), PTTL
    within 2000 ms (or the time the case took, when longer);
  - with multiplex = off, the client's backend connection is gone within
    LEAK_SECONDS of the client's;
  - with rules (rules mode: [ttl "t:"] rewrite, [durable "t:d:"], [ttl "l:"]
    log), every key under the rewrite rule has a TTL on the proxied server
    after every batch, checked after the batch's PING round trip (README
    Limits: the follow-up of a blocking command or a script runs right after
    it on that connection), and replies stay identical to the direct run.

Each mode pair runs with `multiplex = on` (the default) and `multiplex = off`.
A difference is shrunk (delta debugging over the requests, then the initial
data, then the write split) and written as tests/difffuzz/cases/NNN.json;
tests/integration/test_difffuzz.py replays every case there on each run and
fuzzes for TTLG_DIFFFUZZ_SECONDS (default 60) per connection mode per rules
mode.

Usage:
  python3 tests/difffuzz/difffuzz.py --seconds 1800 --seed N
      fuzz for 1800 s in total, split over the four modes (--modes picks some:
      mux-plain, mux-rules, 1to1-plain, 1to1-rules); prints pipelines and
      commands run and every finding; new cases go to --cases (default
      tests/difffuzz/cases)
  python3 tests/difffuzz/difffuzz.py --replay [FILE...]
      run the regression cases (all of --cases by default)
The binaries are the harness's: TTLG_BIN (default build/ttlguard) and
TTLG_REDIS_SERVER (default redis-server; any server ttlguard supports).
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import compare  # noqa: E402
import gen  # noqa: E402
from harness import (Conn, RedisServer, Ttlguard, client_list, enc, server_bin_identity,  # noqa: E402
                     slow)
from model import ConnModel, Unsupported, request_normaliser  # noqa: E402

CASES_DIR = os.path.join(HERE, "cases")
MODES = ["mux-plain", "mux-rules", "1to1-plain", "1to1-rules"]
READ_TIMEOUT = 5.0
# Times and TTLs may differ by this much, or by how long the case has run if
# longer (a TTL set or read directly and through ttlguard some batches of
# 10 ms blocking pops apart: Redis ends those timeouts on its 100 ms clock).
TTL_TOLERANCE_MS = 2000
DBS = (0, 1)
# With multiplex = off, a client's backend connection must be closed within
# this many seconds of the client's (check_backend_closed).
LEAK_SECONDS = 2.0


class Finding(Exception):
    """The proxied run differs from the direct one."""

    def __init__(self, kind, signature, detail):
        super().__init__("%s: %s" % (kind, detail))
        self.kind = kind
        self.signature = (kind, signature)
        self.detail = detail


class Invalid(Exception):
    """The case says nothing about the proxy: the direct server's process
    died under it (a crash of the server itself, reported, not compared)."""


# --------------------------------------------------------------------------
# Servers and proxy
# --------------------------------------------------------------------------

class Env:
    """A direct redis-server, a second one behind ttlguard, and an admin
    connection straight to each."""

    def __init__(self, tmpdir, mode):
        self.tmpdir = tmpdir
        self.mode = mode
        self.multiplex = mode.startswith("mux")
        self.rules = mode.endswith("rules")
        self.direct = RedisServer(tmpdir, name="direct").start()
        self.backend = RedisServer(tmpdir, name="proxied").start()
        self.proxy = None
        self.start_proxy()
        self.admin = {"direct": Conn(self.direct.port), "proxied": Conn(self.backend.port)}
        self.payloads = dump_payloads(self.admin["direct"])

    def start_proxy(self):
        self.proxy = Ttlguard(self.tmpdir, self.backend.port,
                              conf={"multiplex": "on" if self.multiplex else "off"},
                              sections=gen.RULE_SECTIONS if self.rules else "")
        self.proxy.start(expect=b"+PONG")

    def restart_direct(self):
        """A direct server that died: a fresh one on the same port."""
        self.admin["direct"].close()
        self.direct.restart()
        self.admin["direct"] = Conn(self.direct.port)

    def proxy_alive(self):
        return self.proxy.proc is not None and self.proxy.proc.poll() is None

    def restart_proxy(self):
        self.proxy.stop()
        self.start_proxy()

    def close(self):
        """Stop everything; ttlguard's SIGTERM exit status (0 expected)."""
        for c in self.admin.values():
            c.close()
        rc = self.proxy.stop()
        self.direct.stop()
        self.backend.stop()
        return rc


def dump_payloads(conn):
    """DUMP payloads of small values of each type, for RESTORE (the server's
    own RDB version, so cases stay valid for it)."""
    conn.cmd("SELECT", 0)
    makers = [["SET", "p", "v"], ["RPUSH", "p", "a", "b"], ["HSET", "p", "f", "v"],
              ["SADD", "p", "1", "2"], ["ZADD", "p", "1", "m"]]
    out = []
    for m in makers:
        conn.cmd(*m)
        out.append(conn.cmd("DUMP", "p"))
        conn.cmd("DEL", "p")
    return out


# --------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------

def sentinel(bi):
    return [b"PING", b"difffuzz-sentinel-%d" % bi]


def plan_case(case):
    """Per batch: (bytes to send, slots, requests). A slot is (index into
    requests, normaliser); requests are the case's batch plus the epilogue
    that closes MULTI and turns replies on, plus the sentinel PING. slots is
    None for a batch the connection model cannot follow (model.Unsupported:
    an EXEC that runs a state changer) and for every batch after it: those
    are compared raw (compare.first_raw_difference)."""
    model = ConnModel()
    plan = []
    lost = False
    for bi, batch in enumerate(case["batches"]):
        reqs = list(batch)
        slots = []
        if not lost:
            try:
                for i, req in enumerate(reqs):
                    slots += [(i, n) for n in model.step(req["args"])]
            except Unsupported:
                lost = True
        # After the model lost track, its epilogue is its best guess: a
        # sentinel the servers do not answer ends the case on both sides
        # (compared as far as it went).
        for args in model.epilogue() + [sentinel(bi)]:
            reqs.append({"args": args})
            if not lost:
                try:
                    slots += [(len(reqs) - 1, n) for n in model.step(args)]
                except Unsupported:
                    lost = True
        data = b"".join(r.get("inline") or enc(*r["args"]) for r in reqs)
        plan.append((data, None if lost else slots, reqs))
    return plan


def split_writes(data, split_seed, bi):
    """The batch as [(chunk, pause_after)]: one write, or random-sized chunks
    (1 byte to 4 KB) with an occasional 1 ms pause. Deterministic per seed."""
    if split_seed is None or len(data) < 2:
        return [(data, False)]
    r = random.Random("%d:%d" % (split_seed, bi))
    biggest = r.choice([0, 1, 16, 256, 4096])
    if biggest == 0:
        return [(data, False)]
    biggest = max(biggest, len(data) // 400 + 1)
    out, pos = [], 0
    while pos < len(data):
        n = r.randint(1, biggest)
        out.append((data[pos:pos + n], r.random() < 0.05))
        pos += n
    return out


def exchange(conn, writes, token):
    """Send the writes (from a thread, so that replies are read while the
    batch is still going out) and read replies up to the sentinel's.
    Returns (replies, error): error is None, or the TimeoutError / EOFError /
    OSError that ended the reading early (replies then holds those read
    before it)."""
    failure = []

    def send():
        try:
            for chunk, pause in writes:
                conn.send(chunk)
                if pause:
                    time.sleep(0.001)
        except OSError as e:
            failure.append(e)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    replies = []
    try:
        while True:
            raw = conn.reply_raw()[1]
            replies.append(raw)
            if raw.endswith(token + b"\r\n"):
                return replies, None
    except (TimeoutError, EOFError, OSError) as e:
        t.join(slow(READ_TIMEOUT))
        return replies, (failure[0] if failure and not replies else e)
    finally:
        t.join(slow(READ_TIMEOUT))   # at once when it has ended already


def error_kind(e):
    """How a side's reading ended: None, "timeout" or "closed"."""
    if e is None:
        return None
    return "timeout" if isinstance(e, TimeoutError) else "closed"


def show(args):
    return " ".join(repr(a)[2:-1] if a.isascii() and b" " not in a else repr(a)
                    for a in args)[:300]


def compare_batch(bi, slots, reqs, ra, rb, slack_ms):
    """Raise a Finding at the first reply that differs."""
    i = 0
    while i < max(len(ra), len(rb)):
        norm = slots[i][1] if i < len(slots) else "exact"
        a = ra[i] if i < len(ra) else None
        b = rb[i] if i < len(rb) else None
        if isinstance(norm, tuple) and norm[0] in ("unsub", "pushes", "publish"):
            if compare.same_group(norm, ra[i:i + norm[1]], rb[i:i + norm[1]]):
                i += norm[1]
                continue
        elif a is not None and b is not None and compare.same(norm, a, b, slack_ms):
            i += 1
            continue
        req = reqs[slots[i][0]]["args"] if i < len(slots) else []
        name = req[0].upper().decode("latin-1") if req else "?"
        raise Finding("reply", name, {
            "batch": bi, "reply": i, "request": show(req),
            "direct": repr(a)[:400], "proxied": repr(b)[:400]})


def compare_raw(bi, reqs, ra, ea, rb, eb, slack_ms):
    """A batch the model does not follow (its reply count differs from the
    server's, or it lost track of the connection): the proxy's replies
    against the server's for the same batch, position by position, and the
    way each side's reading ended (sentinel, timeout, close). Only what
    differs between two servers by nature is relaxed (compare.
    first_raw_difference), under the normalisers of the batch's own
    requests."""
    norms = compare.batch_normalisers([request_normaliser(r["args"]) for r in reqs])
    has_exec = any(r["args"][:1] and r["args"][0].upper() == b"EXEC" for r in reqs)
    i = compare.first_raw_difference(ra, rb, norms, slack_ms, exec_ok=has_exec)
    if i is None and error_kind(ea) == error_kind(eb):
        return
    if i is None:
        i = min(len(ra), len(rb))
    kind = error_kind(eb) if error_kind(eb) != error_kind(ea) and eb is not None else "reply"
    raise Finding(kind, "raw" if kind == "reply" else kind, {
        "batch": bi, "reply": i, "compared": "raw (not modelled)",
        "requests": [show(r["args"]) for r in reqs][:60],
        "direct": repr(ra[i] if i < len(ra) else error_kind(ea))[:400],
        "proxied": repr(rb[i] if i < len(rb) else error_kind(eb))[:400],
        "direct_replies": len(ra), "proxied_replies": len(rb),
        "direct_end": error_kind(ea) or "sentinel", "proxied_end": error_kind(eb) or "sentinel"})


def run_case(env, case, counts=None):
    """Run a case on both sides; return (batches, requests) or raise Finding
    or Invalid. Every batch is compared: with the model's normalisers when
    its reply count is the server's, raw otherwise (counts["raw"] counts
    those batches, when given)."""
    plan = plan_case(case)
    reset_servers(env, case["setup"])
    before = backend_clients(env) if not env.multiplex else None
    start = time.monotonic()
    nreq = nbatch = 0
    with Conn(env.direct.port, timeout=READ_TIMEOUT) as a, \
            Conn(env.proxy.port, timeout=READ_TIMEOUT) as b:
        for bi, (data, slots, reqs) in enumerate(plan):
            writes = split_writes(data, case.get("split_seed"), bi)
            token = sentinel(bi)[1]
            ra, ea = exchange(a, writes, token)
            if ea is not None and env.direct.proc.poll() is not None:
                raise Invalid("the direct server exited %s in batch %d:\n%s"
                              % (env.direct.proc.returncode, bi, env.direct.log()[-1500:]))
            rb, eb = exchange(b, writes, token)
            nbatch += 1
            nreq += len(reqs)
            if ea is None and slots is not None and len(ra) == len(slots):
                if eb is not None:
                    kind = error_kind(eb)
                    raise Finding(kind, kind, {"batch": bi, "error": str(eb)[:400],
                                               "proxied_replies": len(rb)})
                compare_batch(bi, slots, reqs, ra, rb, slack_ms(start))
            else:
                if counts is not None:
                    counts["raw"] = counts.get("raw", 0) + 1
                compare_raw(bi, reqs, ra, ea, rb, eb, slack_ms(start))
            if env.rules:
                check_rule_ttls(env, bi)
            if ea is not None:
                break   # both connections ended the same way: nothing more to send
    compare_keyspaces(env, start)
    if before is not None:
        check_backend_closed(env, before)
    return nbatch, nreq


def backend_clients(env):
    """{id: CLIENT LIST fields} of the proxied server's connections but the
    one asking."""
    return {c["id"]: c for c in client_list(env.backend.port) if c.get("cmd") != "client|list"}


def check_backend_closed(env, before):
    """multiplex = off: the client's backend connection is gone soon after
    the client (a connection left behind keeps its subscriptions, blocked
    commands and transactions for whoever asks the server later)."""
    deadline = time.monotonic() + slow(LEAK_SECONDS)
    while True:
        left = {i: c for i, c in backend_clients(env).items() if i not in before}
        if not left:
            return
        if time.monotonic() > deadline:
            raise Finding("leak", "backend-connection", {
                "after_client_closed_s": LEAK_SECONDS,
                "backend_connections": [" ".join("%s=%s" % (k, c.get(k)) for k in
                                                 ("id", "cmd", "sub", "psub", "multi", "flags", "age"))
                                        for c in left.values()]})
        time.sleep(0.02)


def slack_ms(start):
    return max(TTL_TOLERANCE_MS, 1000 * (time.monotonic() - start))


def reset_servers(env, setup):
    """FLUSHALL, SCRIPT FLUSH and the case's initial data on both servers."""
    for c in env.admin.values():
        c.cmd("SELECT", 0)
        c.cmd("FLUSHALL")
        c.cmd("SCRIPT", "FLUSH")
        for args in setup:
            c.cmd(*args)


# --------------------------------------------------------------------------
# Keyspace checks
# --------------------------------------------------------------------------

def scan_all(conn):
    keys, cursor = [], b"0"
    while True:
        cursor, batch = conn.cmd("SCAN", cursor, "COUNT", 1000)
        keys += batch
        if cursor == b"0":
            return sorted(set(keys))


def key_body(conn, key, typ):
    """What must be equal on both servers: DUMP, or the content where DUMP
    depends on the server (hash-table order; stream delivery times; a
    string's encoding, compared on its own)."""
    encoding = conn.cmd("OBJECT", "ENCODING", key)
    if typ == b"string":
        return encoding, conn.cmd("GET", key)
    if typ == b"stream":
        return encoding, conn.cmd("XRANGE", key, "-", "+"), conn.cmd("XINFO", "GROUPS", key)
    if encoding == b"hashtable" and typ == b"set":
        return encoding, sorted(conn.cmd("SMEMBERS", key))
    if encoding == b"hashtable" and typ == b"hash":
        flat = conn.cmd("HGETALL", key)
        return encoding, sorted(zip(flat[::2], flat[1::2]))
    return encoding, conn.cmd("DUMP", key)


def snapshot(conn):
    """{(db, key): (type, body, pttl)} of databases 0 and 1."""
    out = {}
    for db in DBS:
        conn.cmd("SELECT", db)
        for k in scan_all(conn):
            typ = conn.cmd("TYPE", k)
            out[(db, k)] = (typ, key_body(conn, k, typ), conn.cmd("PTTL", k))
    conn.cmd("SELECT", 0)
    return out


def ttl_agrees(env, key, pa, pb, slack):
    """PTTL direct (pa) vs proxied (pb). Under the rewrite rule the proxied
    key must have a TTL; it has the direct one's when the direct key has one."""
    if env.rules and gen.ruled(key.decode("latin-1")):
        return pb > 0 and (pa < 0 or abs(pa - pb) <= slack)
    if pa < 0 or pb < 0:
        return pa == pb
    return abs(pa - pb) <= slack


def ttl_encoding(env, key, a, b):
    """A string under the rewrite rule whose DUMP is the same on both sides
    and whose encoding is embstr on one and raw on the other. Valkey 8.1
    stores a string written over a key that has a TTL as raw, and the same
    write over a key without one as embstr (PFADD k x; EXPIRE k 600; SET k
    <35 bytes> EX 86400 -> raw; the same without the EXPIRE -> embstr,
    straight against valkey-server): under the rule the proxied key has had
    a TTL since the rule's rewrite gave it one, the direct key not, so these
    are the same value written over keys of different (by design) TTLs. Any
    other encoding difference is a finding."""
    (ta, body_a, _), (tb, body_b, _) = a, b
    return (env.rules and gen.ruled(key.decode("latin-1")) and ta == tb == b"string"
            and body_a[1] == body_b[1] and {body_a[0], body_b[0]} == {b"embstr", b"raw"})


def script_encoding(env, key, a, b):
    """A string under the rewrite rule, the same value on both sides, int
    on one and embstr on the other, on Valkey 9: a value written from a Lua
    script is never int-encoded there (EVAL "return redis.call('SET',KEYS[1],
    ARGV[1])" 1 k -7, then OBJECT ENCODING k: embstr on Valkey 9.1.2, int on
    Redis 7.0/8.x and Valkey 8.1). Where ttlguard cannot add a MULTI of its
    own (WATCH, the client's MULTI, CLIENT REPLY, a RESP3 subscriber) its
    rewrite is such a script: the same value in another encoding (case 010,
    docs/reliability.md "Limits")."""
    (ta, body_a, _), (tb, body_b, _) = a, b
    name, version = server_bin_identity()
    return (env.rules and name == "valkey" and version >= (9, 0, 0)
            and gen.ruled(key.decode("latin-1")) and ta == tb == b"string"
            and body_a[1] == body_b[1] and {body_a[0], body_b[0]} == {b"int", b"embstr"})


def compare_keyspaces(env, start):
    """Both snapshots, then the slack: PTTLs are read one snapshot apart."""
    sa, sb = snapshot(env.admin["direct"]), snapshot(env.admin["proxied"])
    slack = slack_ms(start)
    for k in sorted(set(sa) | set(sb)):
        if k not in sa or k not in sb:
            raise Finding("keyspace", "only-" + ("direct" if k in sa else "proxied"),
                          {"db": k[0], "key": repr(k[1]), "state": repr(sa.get(k, sb.get(k)))[:300]})
        (ta, ba, pa), (tb, bb, pb) = sa[k], sb[k]
        both = (ta, ba, pa), (tb, bb, pb)
        if ((ta, ba) != (tb, bb) and not ttl_encoding(env, k[1], *both)
                and not script_encoding(env, k[1], *both)):
            raise Finding("keyspace", "value", {"db": k[0], "key": repr(k[1]),
                                                "direct": repr((ta, ba))[:300],
                                                "proxied": repr((tb, bb))[:300]})
        if not ttl_agrees(env, k[1], pa, pb, slack):
            raise Finding("keyspace", "ttl", {"db": k[0], "key": repr(k[1]),
                                              "direct": pa, "proxied": pb})


def check_rule_ttls(env, bi):
    """Every key under the rewrite rule has a TTL on the proxied server."""
    conn = env.admin["proxied"]
    for db in DBS:
        conn.cmd("SELECT", db)
        for k in scan_all(conn):
            if gen.ruled(k.decode("latin-1")) and conn.cmd("PTTL", k) == -1:
                conn.cmd("SELECT", 0)
                raise Finding("rule-ttl", "no-ttl", {"batch": bi, "db": db, "key": repr(k)})
    conn.cmd("SELECT", 0)


# --------------------------------------------------------------------------
# Outcome of one run, shrinking
# --------------------------------------------------------------------------

def outcome(env, case, counts=None):
    """run_case, with a dead proxy turned into a "crash" finding (and the
    proxy restarted for the next case). Returns (result, finding, invalid)."""
    try:
        return run_case(env, case, counts), None, None
    except Finding as f:
        if not env.proxy_alive():
            f = Finding("crash", "crash", {"after": f.detail, "stderr": env.proxy.stderr()[-2000:]})
            env.restart_proxy()
        return None, f, None
    except Invalid as e:
        if env.direct.proc.poll() is not None:
            env.restart_direct()
        return None, None, e


def outcome_sig(env, case, signature):
    _, f, _ = outcome(env, case)
    return f is not None and f.signature == signature


def ddmin(items, fails, deadline):
    """Delta debugging: a smaller list for which fails() still holds."""
    n = 2
    while len(items) >= 2 and time.monotonic() < deadline:
        size = -(-len(items) // n)
        parts = [items[i:i + size] for i in range(0, len(items), size)]
        for i in range(len(parts)):
            rest = [x for j, p in enumerate(parts) if j != i for x in p]
            if fails(rest):
                items, n = rest, max(n - 1, 2)
                break
        else:
            if n >= len(items):
                break
            n = min(len(items), n * 2)
    return items


def with_requests(case, positions):
    """The case keeping only the requests at positions [(batch, index)]."""
    batches = {}
    for bi, i in positions:
        batches.setdefault(bi, []).append(case["batches"][bi][i])
    return dict(case, batches=[batches[bi] for bi in sorted(batches)])


def shrink(env, case, signature, seconds):
    """A minimal case with the same finding signature, within `seconds`."""
    deadline = time.monotonic() + seconds

    def fails(c):
        return outcome_sig(env, c, signature)

    if case.get("split_seed") is not None and fails(dict(case, split_seed=None)):
        case = dict(case, split_seed=None)
    positions = [(bi, i) for bi, b in enumerate(case["batches"]) for i in range(len(b))]
    positions = ddmin(positions, lambda p: fails(with_requests(case, p)), deadline)
    case = with_requests(case, positions)
    setup = ddmin(list(case["setup"]), lambda s: fails(dict(case, setup=s)), deadline)
    if fails(dict(case, setup=setup)):
        case = dict(case, setup=setup)
    if case["setup"] and fails(dict(case, setup=[])):
        case = dict(case, setup=[])
    merged = dict(case, batches=[[r for b in case["batches"] for r in b]])
    if len(case["batches"]) > 1 and fails(merged):
        case = merged
    return case


# --------------------------------------------------------------------------
# Case files
# --------------------------------------------------------------------------

def _s(b):
    return b.decode("latin-1")


def _b(s):
    return s.encode("latin-1")


def req_to_json(req):
    if "inline" in req:
        return {"inline": _s(req["inline"]), "args": [_s(a) for a in req["args"]]}
    return [_s(a) for a in req["args"]]


def req_from_json(j):
    if isinstance(j, dict):
        return {"inline": _b(j["inline"]), "args": [_b(a) for a in j["args"]]}
    return {"args": [_b(a) for a in j]}


def case_to_json(case, mode, finding, origin):
    """A regression case: everything needed to replay it, and what differed."""
    return {
        "title": "%s difference at %s (%s)" % (finding.kind, finding.signature[1], origin),
        "mode": mode,
        "protocol": 3 if any(r["args"][:2] == [b"HELLO", b"3"] for b in case["batches"]
                             for r in b) else 2,
        "split_seed": case.get("split_seed"),
        "setup": [[_s(a) for a in c] for c in case["setup"]],
        "batches": [[req_to_json(r) for r in b] for b in case["batches"]],
        "found": {"kind": finding.kind, "signature": list(finding.signature),
                  "detail": finding.detail, "origin": origin},
    }


def case_from_json(doc):
    return {"split_seed": doc.get("split_seed"),
            "setup": [[_b(a) for a in c] for c in doc["setup"]],
            "batches": [[req_from_json(r) for r in b] for b in doc["batches"]]}


def save_case(doc, cases_dir):
    """Write doc as the next NNN.json in cases_dir; returns the path."""
    os.makedirs(cases_dir, exist_ok=True)
    used = [int(f[:3]) for f in os.listdir(cases_dir) if f[:3].isdigit()]
    path = os.path.join(cases_dir, "%03d.json" % (max(used, default=0) + 1))
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    return path


def case_files(cases_dir=CASES_DIR):
    if not os.path.isdir(cases_dir):
        return []
    return sorted(os.path.join(cases_dir, f) for f in os.listdir(cases_dir)
                  if f.endswith(".json"))


def replay(env, path):
    """Run one case file; the Finding (or Invalid) it produces, or None."""
    with open(path) as f:
        case = case_from_json(json.load(f))
    _, finding, invalid = outcome(env, case)
    return finding or invalid


# --------------------------------------------------------------------------
# Campaign
# --------------------------------------------------------------------------

class Stats:
    def __init__(self, mode):
        self.mode = mode
        self.cases = self.batches = self.commands = 0
        self.invalid = []
        self.findings = []   # (finding, case file or None, flaky)
        self.counts = {"raw": 0}   # pipelines compared raw (not modelled)
        self.seconds = 0.0

    def line(self):
        return ("%s: %d cases, %d pipelines (%d compared raw: the model's reply count was "
                "not the server's), %d commands in %.0f s, %d findings, %d invalid"
                % (self.mode, self.cases, self.batches, self.counts["raw"], self.commands,
                   self.seconds, len(self.findings), len(self.invalid)))


def say(line):
    print(line, flush=True)


def campaign(env, seed, seconds, cases_dir, shrink_seconds=90, log=say):
    """Fuzz for `seconds`; each new finding signature is shrunk and saved."""
    st = Stats(env.mode)
    start = time.monotonic()
    seen = set()
    i = 0
    while time.monotonic() - start < seconds:
        origin = "seed %s mode %s case %d" % (seed, env.mode, i)
        case = gen.generate(random.Random("%s:%s:%d" % (seed, env.mode, i)), env.rules,
                            env.payloads)
        i += 1
        result, finding, invalid = outcome(env, case, st.counts)
        st.cases += 1
        if result:
            st.batches += result[0]
            st.commands += result[1]
        if invalid is not None:
            st.invalid.append("%s: %s" % (origin, invalid))
            log("invalid case (%s): %s" % (origin, invalid))
        if finding is None or finding.signature in seen:
            continue
        seen.add(finding.signature)
        log("finding (%s): %s" % (origin, finding))
        flaky = not outcome_sig(env, case, finding.signature)
        small = case if flaky else shrink(env, case, finding.signature, shrink_seconds)
        _, final, _ = outcome(env, small)
        final = final or finding
        path = save_case(case_to_json(small, env.mode, final, origin), cases_dir)
        log("  %s, %d requests -> %s" % ("flaky: not shrunk" if flaky else "shrunk",
                                         sum(len(b) for b in small["batches"]), path))
        st.findings.append((final, path, flaky))
    st.seconds = time.monotonic() - start
    return st


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=240,
                   help="total fuzzing time, split over the modes (default 240)")
    p.add_argument("--seed", default=None, help="campaign seed (default: from the clock)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of "
                   + ",".join(MODES))
    p.add_argument("--cases", default=CASES_DIR, help="where new cases are written and "
                   "--replay reads them")
    p.add_argument("--shrink-seconds", type=float, default=90)
    p.add_argument("--replay", nargs="*", default=None, metavar="FILE",
                   help="replay case files (default: all in --cases) instead of fuzzing")
    return p.parse_args(argv)


def replay_modes(path):
    """A case runs in both connection modes, with or without the rules it
    was found with."""
    with open(path) as f:
        rules = json.load(f)["mode"].split("-")[1]
    return ["mux-" + rules, "1to1-" + rules]


def main_replay(files, tmpdir):
    bad = 0
    for path in files:
        for mode in replay_modes(path):
            env = Env(tmpdir, mode)
            try:
                problem = replay(env, path)
            finally:
                env.close()
            say("%s [%s]: %s" % (path, mode, problem or "ok"))
            bad += problem is not None
    return 1 if bad else 0


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    tmpdir = tempfile.mkdtemp(prefix="difffuzz-")
    try:
        if args.replay is not None:
            return main_replay(args.replay or case_files(args.cases), tmpdir)
        seed = args.seed or str(int(time.time()))
        modes = args.modes.split(",")
        say("difffuzz seed %s, %.0f s over %s" % (seed, args.seconds, ", ".join(modes)))
        total = []
        for mode in modes:
            env = Env(tmpdir, mode)
            try:
                st = campaign(env, seed, args.seconds / len(modes), args.cases,
                              args.shrink_seconds)
            finally:
                rc = env.close()
            say(st.line() + ("" if rc == 0 else ", ttlguard exit status %s" % rc))
            total.append(st)
        return 1 if any(s.findings or s.invalid for s in total) else 0
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
