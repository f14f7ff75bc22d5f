"""
cluster = route with TTL rules over keys of several slots, and the routed
address through a node failover, against a real 6-node Redis Cluster
(cluster_util.Cluster). Checked on the real nodes, not only through the proxy:

  - an MSET whose keys lie on every primary, under rewrite rules, is split by
    slot and each part rewritten as an MSET of its keys alone would be: every
    key under the rule has the rule's TTL on the node that owns it, a key
    that had a TTL keeps it, keys outside the rules lose theirs (as MSET
    does), the client gets one +OK (RESP2 and RESP3), pipelined too; a part
    that meets -MOVED inside the proxy's MULTI goes, whole, to the new owner;
  - a reject rule on one key refuses the whole MSET with the rule's error,
    and nothing is written on any node;
  - a log rule writes and logs;
  - the event log counts what the same MSETs give through ttlguard in front
    of one standalone redis-server (no event twice, none missing), and so do
    the rewrite and rejection counters of /metrics;
  - CLUSTER FAILOVER of a replica, and a primary killed (SIGKILL) and
    replaced by its replica, while plain clients (python3-redis threads,
    redis-benchmark without --cluster) write and read through the routed
    address: the proxy stays up, no reply goes to another request, no
    client sees -MOVED or -ASK; a manual failover costs no error at all, a
    killed primary only errors on its own slots while they have no primary,
    and traffic there is back soon after the promotion (redis-py's
    RedisCluster straight to the nodes runs alongside, for comparison).
    Measured times are printed (-s) for docs/reliability.md.
"""

import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

import harness
from harness import Conn, RespError, slow, wait_for
from cluster_util import Cluster, NODE_TIMEOUT_MS, key_slot, tags_for_slots
from test_cluster_route import RoutedProxy, redirects_followed
from test_events import durable, occurrences, read_events, ttl_rule, violation_counts

SECTIONS = (ttl_rule("rw:", "rewrite", ttl=900) + ttl_rule("rj:", "reject")
            + ttl_rule("lg:", "log") + durable("du:"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("route-rules-cluster")).start()
    yield c
    c.stop()


def start_routed(cluster, tmp_path, **conf):
    """A routed ttlguard under SECTIONS, with an event log and /metrics."""
    harness.need_binary()
    admin = harness.free_port()
    log = os.path.join(str(tmp_path), "events-routed.log")
    c = {"admin": "127.0.0.1:%d" % admin, "events": log, "event_window": "1"}
    c.update(conf)
    p = RoutedProxy(tmp_path, cluster, conf=c, sections=SECTIONS)
    p.admin_port, p.events = admin, log
    return p.start()


@pytest.fixture
def routed(cluster, tmp_path):
    p = start_routed(cluster, tmp_path)
    yield p
    rc = p.stop()
    assert rc == 0, "ttlguard exit %s\n%s" % (rc, p.stderr())


@pytest.fixture
def standalone(redis_srv, make_proxy, tmp_path):
    """ttlguard under SECTIONS in front of one redis-server."""
    admin = harness.free_port()
    log = os.path.join(str(tmp_path), "events-standalone.log")
    p = make_proxy(redis_srv, conf={"admin": "127.0.0.1:%d" % admin, "events": log,
                                    "event_window": "1"}, sections=SECTIONS)
    p.admin_port, p.events = admin, log
    return p


def metrics(p):
    url = "http://127.0.0.1:%d/metrics" % p.admin_port
    with urllib.request.urlopen(url, timeout=slow(5)) as r:
        text = r.read().decode()
    names = ("ttlguard_commands_rewritten_total", "ttlguard_commands_rejected_total",
             "ttlguard_rewrite_errors_total")
    return {n: int(float(m.group(1))) for n in names
            for m in [re.search(r"^%s (\S+)$" % n, text, re.M)] if m}


def owner(cluster, key):
    return cluster.owner_of_slot(key_slot(key))["port"]


def spread(cluster, prefix, per_node=3):
    """per_node keys (distinct slots) on each primary, interleaved by node."""
    per = [cluster.keys_for_slot_owner(n, per_node, prefix=prefix) for n in cluster.primaries()]
    return [k for group in zip(*per) for k in group]


def flat(pairs):
    return [x for kv in pairs for x in kv]


# -- MSET over several slots under rules ---------------------------------------


def test_mset_over_every_primary_under_a_rewrite_rule(cluster, routed):
    """MSET of rw: keys on every primary, some of them existing with a TTL,
    some without, some new, and free keys between them: one +OK; on each
    owner a rw: key has the rule's 900 s, or the TTL it had (MSET under the
    rule keeps it, as on one server), and a free key has none (MSET drops
    it)."""
    rw = spread(cluster, "rw:sp:", 4)
    free = spread(cluster, "free:sp:", 1)
    kept, bare = rw[:3], rw[3:6]
    for k in rw + free:
        cluster.cmd(owner(cluster, k), "DEL", k)
    for k in kept:
        assert cluster.cmd(owner(cluster, k), "SET", k, "old", "EX", "5000") == b"OK"
    for k in bare + free:
        assert cluster.cmd(owner(cluster, k), "SET", k, "old") == b"OK"
    for k in free:
        assert cluster.cmd(owner(cluster, k), "EXPIRE", k, "5000") == 1
    keys = [k for pair in zip(rw, free + [None] * len(rw)) for k in pair if k]
    with Conn(routed.port) as c:
        assert c.cmd("MSET", *flat((k, "v-" + k) for k in keys)) == b"OK"
        assert c.cmd("MGET", *keys) == [("v-" + k).encode() for k in keys]
    for k in keys:
        port = owner(cluster, k)
        assert cluster.cmd(port, "GET", k) == ("v-" + k).encode(), k
        ttl = cluster.cmd(port, "TTL", k)
        if k in kept:
            assert 4900 <= ttl <= 5000, (k, ttl)
        elif k.startswith("rw:"):
            assert 850 <= ttl <= 900, (k, ttl)
        else:
            assert ttl == -1, (k, ttl)
    assert metrics(routed)["ttlguard_rewrite_errors_total"] == 0


def test_mset_pipelined_among_other_commands(cluster, routed):
    """Split and rewritten MSETs pipelined between single-key commands of
    other nodes: every reply in its place."""
    rw = spread(cluster, "rw:pl:", 2)
    lg = spread(cluster, "lg:pl:", 1)
    with Conn(routed.port) as c:
        out = b""
        for i in range(20):
            out += harness.enc("MSET", *flat((k, "%s-%d" % (k, i)) for k in rw + lg))
            out += harness.enc("GET", rw[i % len(rw)]) + harness.enc("INCR", "rw:pl:n")
        c.send(out)
        got = c.replies(60)
    for i in range(20):
        assert got[3 * i] == b"OK", got[3 * i:3 * i + 3]
        assert got[3 * i + 1] == ("%s-%d" % (rw[i % len(rw)], i)).encode()
        assert got[3 * i + 2] == i + 1 or i == 0, got[3 * i + 2]
    for k in rw:
        assert 850 <= cluster.cmd(owner(cluster, k), "TTL", k) <= 900, k
    for k in lg:
        assert cluster.cmd(owner(cluster, k), "TTL", k) == -1, k


def test_a_part_redirected_and_resp3(cluster, routed):
    """A slot handed to another primary straight on the nodes (the proxy's
    slot map still names the old one): the rewritten part for it meets the
    old owner's -MOVED inside the proxy's MULTI and goes, whole, to the new
    owner; the client, speaking RESP3, gets one +OK and the key its TTL
    there. Another RESP3 MSET over every primary: one +OK."""
    src, dst = cluster.primaries()[0], cluster.primaries()[1]
    moved = next(k for k in cluster.keys_for_slot_owner(src, 20, prefix="rw:mv:")
                 if cluster.cmd(src["port"], "CLUSTER", "COUNTKEYSINSLOT", key_slot(k)) == 0)
    slot = key_slot(moved)
    others = spread(cluster, "rw:mv3:", 1)
    with Conn(routed.port) as c:
        assert isinstance(c.cmd("HELLO", "3"), harness.RespMap)
        assert c.cmd("GET", moved) is None        # the proxy's map: the slot on src
        for n in cluster.primaries() + cluster.replicas():
            cluster.cmd(n["port"], "CLUSTER", "SETSLOT", slot, "NODE", dst["id"])
        before = redirects_followed(routed)["moved"]
        try:
            assert c.cmd("MSET", *flat((k, "v") for k in [moved] + others)) == b"OK"
            assert redirects_followed(routed)["moved"] == before + 1
            assert c.cmd("MSET", *flat((k, "w") for k in others)) == b"OK"
            assert 850 <= cluster.cmd(dst["port"], "TTL", moved) <= 900
            assert cluster.cmd(src["port"], "EXISTS", moved).startswith(b"MOVED")
            for k in others:
                assert cluster.cmd(owner(cluster, k), "GET", k) == b"w"
                assert 850 <= cluster.cmd(owner(cluster, k), "TTL", k) <= 900, k
        finally:
            cluster.cmd(dst["port"], "DEL", moved)
            for n in cluster.primaries() + cluster.replicas():
                cluster.cmd(n["port"], "CLUSTER", "SETSLOT", slot, "NODE", src["id"])
    cluster.wait_stable()
    assert metrics(routed)["ttlguard_rewrite_errors_total"] == 0


def test_a_reject_rule_refuses_the_whole_mset(cluster, routed, standalone):
    """One rj: key among rw: keys of every primary: the rule's error (as
    ttlguard in front of one server words it), and not one key written on
    any node."""
    rw = spread(cluster, "rw:rj:", 2)
    rj = spread(cluster, "rj:rj:", 1)[1]
    keys = rw[:3] + [rj] + rw[3:]
    for k in keys:
        cluster.cmd(owner(cluster, k), "DEL", k)
    args = flat((k, "v") for k in keys)
    with Conn(routed.port) as c:
        got = c.cmd("MSET", *args)
        assert c.cmd("PING") == b"PONG"
    with Conn(standalone.port) as c:
        want = c.cmd("MSET", *args)
    assert isinstance(got, RespError) and got == want, (got, want)
    assert got.startswith(b"TTLGUARD MSET would drop the TTL of '%s'" % rj.encode())
    for k in keys:
        assert cluster.cmd(owner(cluster, k), "EXISTS", k) == 0, k


def test_a_log_rule_writes_and_logs(cluster, routed):
    lg = spread(cluster, "lg:w:", 2)
    with Conn(routed.port) as c:
        assert c.cmd("MSET", *flat((k, "v") for k in lg)) == b"OK"
    for k in lg:
        assert cluster.cmd(owner(cluster, k), "GET", k) == b"v"
        assert cluster.cmd(owner(cluster, k), "TTL", k) == -1
    assert routed.stop() == 0
    ev = read_events(routed.events)
    assert occurrences(ev, event="violation", rule='ttl "lg:"', command="MSET",
                       action="logged") == len(lg)


def workload(c, keys):
    """The same MSETs, through either proxy: rewritten, mixed with free and
    durable keys, logged, rejected."""
    rw, lg, du, free, rj = keys
    got = [c.cmd("MSET", *flat((k, "1") for k in rw)),
           c.cmd("MSET", *flat((k, "2") for k in rw[:2] + free + du + lg[:1])),
           c.cmd("MSET", *flat((k, "3") for k in lg + free)),
           c.cmd("MSET", *flat((k, "4") for k in rw[:1] + rj + du))]
    return [g if not isinstance(g, RespError) else g[:40] for g in got]


def test_events_and_metrics_as_on_one_server(cluster, routed, standalone):
    """The workload's MSETs through the routed proxy (keys of every primary)
    and through ttlguard in front of one redis-server: the same replies, the
    same violations and durable writes in the event log (each counted once,
    not once per part), the same rewritten and rejected counts."""
    keys = [spread(cluster, p, 2) for p in ("rw:ev:", "lg:ev:", "du:ev:", "free:ev:")]
    keys.append(spread(cluster, "rj:ev:", 1)[:1])
    with Conn(routed.port) as c:
        got = workload(c, keys)
    with Conn(standalone.port) as c:
        want = workload(c, keys)
    assert got == want and got[:3] == [b"OK"] * 3, (got, want)
    m_routed, m_alone = metrics(routed), metrics(standalone)
    assert m_routed == m_alone, (m_routed, m_alone)
    assert m_routed["ttlguard_commands_rewritten_total"] == 2
    assert m_routed["ttlguard_commands_rejected_total"] == 1
    assert routed.stop() == 0 and standalone.stop() == 0
    ev_routed, ev_alone = read_events(routed.events), read_events(standalone.events)
    assert violation_counts(ev_routed) == violation_counts(ev_alone), \
        (violation_counts(ev_routed), violation_counts(ev_alone))
    for e in ("durable_write", "unverified"):
        assert occurrences(ev_routed, event=e) == occurrences(ev_alone, event=e), e
    assert occurrences(ev_routed, event="durable_write") == 2 * len(keys[2])
    assert violation_counts(ev_routed)[('ttl "rw:"', "MSET", "drops-ttl", "rewritten")] == \
        len(keys[0]) + 2


# -- a node failover under traffic ------------------------------------------------

def plain_client(port):
    import redis
    return lambda: redis.Redis(port=port, socket_timeout=slow(5),
                               socket_connect_timeout=slow(5))


def cluster_client(cluster):
    """redis-py's RedisCluster straight to the nodes, its defaults: what a
    cluster-aware client sees, for comparison."""
    from redis.cluster import RedisCluster
    return lambda: RedisCluster(host="127.0.0.1", port=cluster.ports[0],
                                socket_timeout=slow(5), socket_connect_timeout=slow(5))


class Traffic:
    """Clients in threads (plain redis.Redis through the routed address by
    default), each writing and reading back its own keys, one per slot over
    all 16384 slots between them: SET k <k>-<n>, then GET k. Every reply is
    checked: a GET returns what its client last wrote (either value when
    that SET failed), or an error. Errors are kept with their time and slot."""

    def __init__(self, port, nthreads=4, prefix="fo", watch=(), connect=None):
        tags = tags_for_slots(range(16384), prefix=prefix)
        keys = sorted(("%s:{%s}" % (prefix, tag), slot) for slot, tag in tags.items())
        self.connect = connect or plain_client(port)
        self.shares = [keys[i::nthreads] for i in range(nthreads)]
        self.errors = []            # (monotonic time, slot, op, error text)
        self.wrong = []             # replies to another request
        self.ops = [0] * nthreads
        self.watch = set(watch)     # slots whose successful GETs are timed:
        self.watched = []           # ...their times
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(nthreads)]

    def run(self, i):
        r = self.connect()
        may_hold = {}
        n = 0
        while not self.stop_flag.is_set():
            n += 1
            for key, slot in self.shares[i]:
                if self.stop_flag.is_set():
                    return
                value = "%s-%d" % (key, n)
                try:
                    assert r.set(key, value) is True
                    may_hold[key] = {value.encode()}
                except Exception as e:      # noqa: BLE001 (RedisCluster's are not all RedisError)
                    self.errors.append((time.monotonic(), slot, "SET", repr(e)))
                    may_hold.setdefault(key, {None}).add(value.encode())
                try:
                    got = r.get(key)
                    if got not in may_hold[key]:
                        self.wrong.append((key, got, may_hold[key]))
                    if slot in self.watch:
                        self.watched.append(time.monotonic())
                except Exception as e:      # noqa: BLE001
                    self.errors.append((time.monotonic(), slot, "GET", repr(e)))
                self.ops[i] += 2

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def done(self):
        return sum(self.ops)

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(slow(30))
        assert not any(t.is_alive() for t in self.threads)


class Benchmark:
    """redis-benchmark without --cluster, SET and GET of keys of one hash tag
    (one slot), 8 clients, run again and again until stopped: every run's
    exit status and output are kept."""

    def __init__(self, port, tag):
        self.cmd = ["redis-benchmark", "-p", str(port), "-c", "8", "-n", "10000", "-r",
                    "100000", "-q", "-t", "set,get"]
        self.tag = tag
        self.runs = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop_flag.is_set():
            for op, extra in (("SET", ["v"]), ("GET", [])):
                r = subprocess.run(self.cmd[:-2] + [op, "bm:{%s}:__rand_int__" % self.tag] +
                                   extra, stdin=subprocess.DEVNULL, capture_output=True,
                                   text=True, timeout=slow(60))
                self.runs.append((r.returncode, r.stdout + r.stderr))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_flag.set()
        self.thread.join(slow(60))
        assert not self.thread.is_alive()
        return self.runs


def slots_of(node):
    return {s for lo, hi in node["slots"] for s in range(lo, hi + 1)}


def assert_no_redirect_seen(traffic):
    seen = [e for e in traffic.errors if re.search(r"\b(MOVED|ASK)\b", e[3])]
    assert not seen, seen[:5]


def test_cluster_failover_under_traffic(cluster, tmp_path):
    """CLUSTER FAILOVER on the replica of a primary while clients write and
    read every slot through the proxy, and redis-benchmark runs against keys
    of that primary: not one error, no reply to another request, no
    redirect seen by a client; the keys are on the promoted node after."""
    p = start_routed(cluster, tmp_path)
    try:
        old = cluster.primaries()[1]
        new = cluster.replicas_of(old["id"])[0]
        tag = tags_for_slots([min(slots_of(old))], prefix="bm")[min(slots_of(old))]
        moved = redirects_followed(p)["moved"]
        traffic = Traffic(p.port, prefix="mf").start()
        wait_for(lambda: traffic.done() > 20000, 30, "a first round of traffic")
        bench = Benchmark(p.port, tag).start()
        wait_for(lambda: len(bench.runs) >= 2, 30, "a first redis-benchmark run")
        t0 = time.monotonic()
        assert cluster.cmd(new["port"], "CLUSTER", "FAILOVER") == b"OK"
        wait_for(lambda: "master" in cluster.node_by_id(new["id"], new["port"])["flags"],
                 15, "the replica promoted")
        promoted = time.monotonic() - t0
        ops = traffic.done()
        wait_for(lambda: traffic.done() > ops + 20000, 30, "traffic after the failover")
        bench_out = bench.stop()
        traffic.stop()
        print("\nCLUSTER FAILOVER: promoted in %.2f s; %d client operations, %d errors; "
              "%d redis-benchmark runs" % (promoted, traffic.done(), len(traffic.errors),
                                       len(bench_out)))
        assert not traffic.wrong, traffic.wrong[:5]
        assert not traffic.errors, traffic.errors[:5]
        for rc, text in bench_out:
            assert rc == 0 and "rror" not in text and "MOVED" not in text, text
        assert p.proc.poll() is None
        assert redirects_followed(p)["moved"] > moved     # the proxy followed them
        k = "mf:{%s}" % tags_for_slots([min(slots_of(old))], prefix="mf")[min(slots_of(old))]
        assert cluster.cmd(new["port"], "EXISTS", k) == 1
    finally:
        rc = p.stop()
    assert rc == 0, p.stderr()
    cluster.wait_stable()


def test_a_killed_primary_under_traffic(cluster, tmp_path):
    """SIGKILL of a primary (by the PID the Cluster started) while clients
    write and read every slot through the proxy and redis-benchmark runs
    against keys of another primary; the cluster promotes its replica after
    cluster-node-timeout. The proxy stays up; no reply goes to another
    request; no client sees a redirect; errors come only for the dead
    primary's slots (its connection refused, or -CLUSTERDOWN while the
    cluster has no primary for them), only from the kill until shortly after
    the promotion; the other primaries' keys see no error; then every slot
    works again. The killed node comes back as a replica."""
    p = start_routed(cluster, tmp_path)
    victim = cluster.primaries()[2]
    assert victim["port"] not in cluster.ports[:2]      # not a seed of the proxy
    heir = cluster.replicas_of(victim["id"])[0]
    other = cluster.primaries()[0]
    dead = slots_of(victim)
    srv = cluster.server(victim["port"])
    try:
        tag = tags_for_slots([min(slots_of(other))], prefix="bk")[min(slots_of(other))]
        traffic = Traffic(p.port, prefix="kp", watch=dead).start()
        direct = Traffic(None, 2, prefix="kd", connect=cluster_client(cluster)).start()
        wait_for(lambda: traffic.done() > 20000, 30, "a first round of traffic")
        bench = Benchmark(p.port, tag).start()
        wait_for(lambda: len(bench.runs) >= 2, 30, "a first redis-benchmark run")
        t_kill = time.monotonic()
        os.kill(srv.pid, signal.SIGKILL)
        srv.proc.wait(slow(10))
        srv.proc = None
        wait_for(lambda: any(n["id"] == heir["id"] for n in cluster.primaries(other["port"])),
                 30, "the replica promoted", interval=0.05)
        t_promoted = time.monotonic()
        ops = traffic.done()
        wait_for(lambda: traffic.done() > ops + 40000, 60, "traffic after the promotion")
        t_end = time.monotonic()
        bench_out = bench.stop()
        traffic.stop()
        direct.stop()
        errs = traffic.errors
        last = max((e[0] for e in errs), default=t_kill)
        back = min(t for t in traffic.watched if t > t_kill + 0.5)     # its slots served again
        before = max(t for t in traffic.watched if t < t_kill)
        print("\nprimary killed: promoted after %.2f s (cluster-node-timeout %d ms); its slots "
              "served again through the proxy %.2f s after the kill (%.2f s after the "
              "promotion); %d client operations, %d errors, all on its slots, from %.2f s to "
              "%.2f s after the kill (%.2f s after the promotion); kinds %r; %d redis-benchmark "
              "runs on another primary without error"
              % (t_promoted - t_kill, NODE_TIMEOUT_MS, back - before, back - t_promoted,
                 traffic.done(), len(errs), min((e[0] for e in errs), default=t_kill) - t_kill,
                 last - t_kill, last - t_promoted,
                 sorted({re.sub(r"\d+", "N", e[3])[:90] for e in errs}), len(bench_out)))
        print("redis-py RedisCluster straight to the nodes meanwhile: %d operations, %d errors "
              "(%d on other primaries' slots), from %.2f s to %.2f s after the kill; kinds %r"
              % (direct.done(), len(direct.errors),
                 sum(1 for e in direct.errors if e[1] not in dead),
                 min((e[0] for e in direct.errors), default=t_kill) - t_kill,
                 max((e[0] for e in direct.errors), default=t_kill) - t_kill,
                 sorted({re.sub(r"\d+", "N", e[3])[:70] for e in direct.errors})))
        assert p.proc.poll() is None
        assert not traffic.wrong, traffic.wrong[:5]
        assert_no_redirect_seen(traffic)
        assert all(e[1] in dead for e in errs), [e for e in errs if e[1] not in dead][:5]
        assert all(t_kill <= e[0] for e in errs)
        assert last - t_promoted < slow(2), (last - t_promoted, errs[-5:])
        assert back - t_promoted < slow(2), back - t_promoted
        assert t_end - last > 1         # then a second and more of traffic without one
        for rc, text in bench_out:
            assert rc == 0 and "rror" not in text and "MOVED" not in text, text
    finally:
        rc = p.stop()
        srv.start()                     # back as a replica of its heir
        cluster.wait_stable(60)
    assert rc == 0, p.stderr()
