"""
cluster = route with TTL rules over keys of several slots, and the routed
address through a node failover, against a real 6-node Redis Cluster
(cluster_util.Cluster). Checked on the real nodes, not only through the proxy:

  - an MSET whose keys lie on every primary, under rewrite rules, is split by
    slot and each part rewritten as an MSET of its keys alone would be: every
    key under the rule has the rule's TTL on the node that owns it, a key
    that had a TTL keeps it, keys outside the rules lose theirs (as MSET
    does), the client gets one +OK;
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
    and traffic there is back soon after the promotion. Measured times are
    printed (-s) for docs/reliability.md.
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
from cluster_util import Cluster, NODE_TIMEOUT_MS, key_slot
from test_cluster_route import RoutedProxy
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
