"""
cluster = on (issue 12, phase 1): ttlguard in front of a real Redis Cluster of
6 nodes (3 primaries, 3 replicas; cluster_util.Cluster), one listener per node
on a reserved cluster_ports range, cluster_announce = 127.0.0.1, the entry
`listen` port forwarding to a seed.

The invariant behind most assertions: no client ever learns a real node
address. Every address in a topology reply (CLUSTER SLOTS / SHARDS / NODES /
REPLICAS, RESP2 and RESP3) and in a -MOVED / -ASK redirect (single, pipelined,
inside MULTI or EVAL, SSUBSCRIBE) is 127.0.0.1:PORT with PORT in
cluster_ports, the port of that very node (its CLUSTER MYID is the real id),
and none of the real node ports occurs in the bytes. Everything else passes
unchanged: replies are compared byte for byte with the same session sent
straight to the node, the real ports mapped to the proxy's.

  - topology replies through the entry port, RESP2 and RESP3 (CLUSTER
    SLAVES and lower case too); CLUSTER NODES / SLOTS / SHARDS / MYID through
    every node port; inside the client's own MULTI (EXEC's elements);
  - -MOVED through every node port, in a pipeline (with a large value in it)
    on a primary's and a replica's port, RESP2 and RESP3; -ASK and -TRYAGAIN
    on a slot set MIGRATING by hand, ASKING through the importing node's
    port; READONLY reads on a replica's port;
  - a script's error text shaped like a redirect opens no relay to the
    address it names and spends no cluster_ports;
  - a dead first seed: the topology comes from the next seed at once;
  - MULTI/EXEC, EVAL, CROSSSLOT: byte-for-byte with the direct session;
  - pub/sub: SUBSCRIBE/PUBLISH across node ports, SSUBSCRIBE/SPUBLISH on the
    owner's port (RESP2 and RESP3), -MOVED for both through a wrong node;
  - real clients: redis-cli -c, redis-py RedisCluster (set/get, mget,
    pipeline, cluster_nodes), redis-benchmark --cluster: all work through the
    entry port alone and never print a real port;
  - TTL rules on every node (GETSET keeps the TTL, INCR gets the rule's TTL),
    also when RedisCluster routes the commands;
  - nodes with cluster-preferred-endpoint-type unknown-endpoint (NULL
    endpoints, "-MOVED slot :port") and hostname (cluster-announce-hostname):
    still one port per node everywhere, no real port;
  - failover, resharding and a node added with slots (each on a cluster of
    its own): a RedisCluster client working through the proxy meanwhile sees
    no error and only rewritten redirects, and ends on the right nodes;
  - --check-config: the cluster keys' mistakes, exit 1 with file:line.

Clusters: one shared by the tests that leave its topology as found (~3 s to
start), one for the endpoint-type tests, one of its own for each test that
fails over, reshards or adds a node. Keys are namespaced per test.

Every wait is bounded (harness.wait_for, socket timeouts, subprocess
timeouts); every process is stopped by PID by its fixture.
"""

import collections
import json
import logging
import random
import re
import subprocess
import sys
import threading
import time

import pytest

import harness
from harness import Conn, RespError, RespMap, RespPush, RespVerbatim, enc, free_port, slow, \
    wait_for
from cluster_util import ANNOUNCE, Cluster, ClusterProxy, key_slot, parse_nodes, \
    real_ports_in, strip_replication_offsets, tags_for_slots

RULE = '[ttl "t:"]\nttl = 900\naction = rewrite\n'
REDIRECT_RE = re.compile(rb"^(MOVED|ASK) (\d+) ([^ ]*):(\d+)$")

# RedisCluster logs every MOVED it handles at ERROR level, with a traceback:
# it is how the client follows a redirect, not a failure.
logging.getLogger("redis.cluster").setLevel(logging.CRITICAL)


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """One cluster for the tests that leave its topology as they found it
    (startup is ~2 s; keys are namespaced per test)."""
    c = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.stop()


@pytest.fixture
def cluster(shared_cluster):
    shared_cluster.wait_stable()
    return shared_cluster


@pytest.fixture
def own_cluster(tmp_path):
    """A cluster of the test's own, for failover and resharding."""
    c = Cluster(tmp_path / "own-cluster").start()
    yield c
    c.stop()


@pytest.fixture
def cproxy(tmp_path, request):
    """make(cluster, conf=None, sections="") -> started ClusterProxy; at
    teardown SIGTERM, and it must exit 0 (its stderr is shown when the test
    failed or it did not)."""
    started = []

    def make(cluster, conf=None, sections="", expect=b"+PONG", **kw):
        harness.need_binary()
        p = ClusterProxy(tmp_path, cluster, conf, sections, **kw)
        started.append(p)
        p.start(expect=expect)
        return p

    yield make

    problems = []
    for p in started:
        was_running = p.proc is not None
        rc = p.stop()
        failed = getattr(request.node, "rep_call", None)
        failed = failed is not None and failed.failed
        if failed or (was_running and rc != 0):
            sys.stderr.write("---- ttlguard %d (cluster_ports %d-%d) stderr (exit %s) ----\n%s\n"
                             % (p.port, p.range[0], p.range[1], rc, p.stderr()))
        if was_running and rc != 0:
            problems.append("ttlguard on port %d: SIGTERM exit status %s (None = had to "
                            "SIGKILL)\n%s" % (p.port, rc, p.stderr()))
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def as_dict(x):
    """A RESP3 map or a RESP2 flat key/value array -> dict."""
    if isinstance(x, RespMap):
        return dict(x)
    assert isinstance(x, list) and len(x) % 2 == 0, x
    return dict(zip(x[::2], x[1::2]))


def cmd_raw(c, *args):
    c.send(enc(*args))
    return c.reply_raw()


def assert_no_real_port(data, cluster, what):
    leaks = real_ports_in(data, cluster.ports)
    assert not leaks, "%s shows real node ports: %r" % (what, leaks)


def addr_map(cluster, ports):
    """{real address: proxy address} (bytes) of every node."""
    return {b"127.0.0.1:%d" % real: b"%s:%d" % (ANNOUNCE.encode(), ports[cluster.myid(real)])
            for real in cluster.ports}


def map_ports(raw, amap):
    """Direct reply bytes with every real node address replaced by the
    proxy's address of that node: what the proxy must send."""
    for real, proxied in amap.items():
        raw = raw.replace(real, proxied)
    return raw


def session(port, cmds, pipelined=True, hello3=False):
    """Raw reply bytes of cmds sent on one connection, all at once or one by
    one."""
    out = []
    with Conn(port) as c:
        if hello3:
            assert isinstance(c.cmd("HELLO", "3"), RespMap)
        if pipelined:
            c.send(b"".join(enc(*a) for a in cmds))
            for _ in cmds:
                out.append(c.reply_raw()[1])
        else:
            for a in cmds:
                out.append(cmd_raw(c, *a)[1])
    return out


def wipe(cluster, keys):
    """DEL each key straight on its real owner, so that a session replayed
    (direct, then through the proxy) starts from the same data."""
    slot_map = cluster.slots()
    for k in keys:
        s = key_slot(k)
        owner = next(pp for lo, hi, pp, _, _ in slot_map if lo <= s <= hi)
        cluster.cmd(owner, "DEL", k)


def moved(slot, port):
    return RespError(b"MOVED %d %s:%d" % (slot, ANNOUNCE.encode(), port))


class Redirects:
    """Every MOVED / ASK a redis-py client sees (MovedError subclasses
    AskError; both parse "slot host:port" in __init__)."""

    def __init__(self, monkeypatch):
        import redis.exceptions as rex
        self.seen = []
        orig = rex.AskError.__init__
        log = self.seen

        def init(exc, resp):
            orig(exc, resp)
            log.append((type(exc).__name__, exc.slot_id, exc.host, exc.port))
        monkeypatch.setattr(rex.AskError, "__init__", init)

    def bad(self, proxy, allowed_ports=None):
        return [r for r in list(self.seen)
                if r[2] != ANNOUNCE or not proxy.in_range(r[3])
                or (allowed_ports is not None and r[3] not in allowed_ports)]


def rcluster(port, **kw):
    from redis.cluster import RedisCluster
    kw.setdefault("socket_timeout", slow(10))
    return RedisCluster(host="127.0.0.1", port=port, **kw)


class ClientLoop(threading.Thread):
    """A RedisCluster client through the proxy doing SET then GET (which
    must read back what it wrote) over keys, until stopped. Counts every
    exception by type and message; records per key the time of its last
    success."""

    def __init__(self, port, keys, **kw):
        super().__init__(daemon=True)
        self.port = port
        self.keys = list(keys)
        self.kw = kw                # for RedisCluster (ssl=True, ...)
        self.stop_ev = threading.Event()
        self.errors = collections.Counter()
        self.ops = 0
        self.last_ok = {}
        self.fatal = None

    def run(self):
        try:
            rc = rcluster(self.port, **self.kw)
        except Exception as e:      # noqa: B902 -- reported by the test
            self.fatal = e
            return
        i = 0
        try:
            while not self.stop_ev.is_set():
                k = self.keys[i % len(self.keys)]
                v = "%s=%d" % (k, i)
                try:
                    if rc.set(k, v) is not True:
                        self.errors["SET %s returned not True" % k] += 1
                    got = rc.get(k)
                    if got != v.encode():
                        self.errors["GET %s: %r, wrote %r" % (k, got, v)] += 1
                    else:
                        self.last_ok[k] = time.monotonic()
                    self.ops += 2
                except Exception as e:      # noqa: B902 -- counted and asserted on
                    self.errors["%s: %s" % (type(e).__name__, str(e)[:120])] += 1
                    time.sleep(0.01)
                i += 1
        finally:
            rc.close()

    def finish(self, timeout=30):
        self.stop_ev.set()
        self.join(slow(timeout))
        assert not self.is_alive(), "client loop did not stop"
        assert self.fatal is None, "RedisCluster through the proxy: %r" % self.fatal


# --------------------------------------------------------------------------
# Topology replies
# --------------------------------------------------------------------------

@pytest.mark.parametrize("proto", [2, 3])
def test_topology_replies_name_only_proxy_ports(cluster, cproxy, proto):
    """Through the entry port (RESP2, and RESP3 after HELLO 3): CLUSTER
    SLOTS / SHARDS / NODES / REPLICAS name every node as 127.0.0.1:PORT, PORT
    inside cluster_ports, one distinct port per node, the same port for a
    node in every reply; node ids, slots, roles are the cluster's own (compared
    with direct replies); no real node port occurs in the bytes. Then every
    node port answers CLUSTER MYID with the real id of the node it stands for
    (direct MYID on the real port), and its CLUSTER NODES 'myself' line is
    that node on that port."""
    p = cproxy(cluster)
    ports = p.node_ports()
    real_ids = {cluster.myid(rp): rp for rp in cluster.ports}
    assert set(ports) == set(real_ids)
    assert len(set(ports.values())) == len(ports) == 6
    assert all(p.in_range(x) for x in ports.values()), (ports, p.range)
    a = ANNOUNCE.encode()

    direct_nodes = {n["id"]: n for n in cluster.nodes()}
    direct_slots = {(lo, hi): (pid, sorted(cluster.node_by_port(r)["id"] for r in reps))
                    for lo, hi, _, reps, pid in cluster.slots()}
    primaries = [n["id"] for n in cluster.primaries()]

    # Sanity of the leak check itself: the direct bytes do show real ports.
    with Conn(cluster.ports[0]) as d:
        assert real_ports_in(cmd_raw(d, "CLUSTER", "NODES")[1], cluster.ports)

    with Conn(p.port) as c:
        if proto == 3:
            hello = c.cmd("HELLO", "3")
            assert isinstance(hello, RespMap) and dict(hello)[b"proto"] == 3, hello

        # CLUSTER SLOTS: [lo, hi, [ip, port, id, meta], replicas...]
        slots, raw = cmd_raw(c, "CLUSTER", "SLOTS")
        assert_no_real_port(raw, cluster, "CLUSTER SLOTS (RESP%d)" % proto)
        seen = {}
        for entry in slots:
            lo, hi, nodes = entry[0], entry[1], entry[2:]
            for nd in nodes:
                ip, port, nid = nd[0], nd[1], nd[2].decode()
                assert ip == a, (ip, entry)
                assert port == ports[nid], (nid, port, ports)
                if len(nd) > 3 and nd[3]:
                    meta = as_dict(nd[3])
                    for k in (b"ip", b"hostname"):
                        if k in meta:
                            assert meta[k] == a, (k, meta)
            seen[(lo, hi)] = (nodes[0][2].decode(), sorted(n[2].decode() for n in nodes[1:]))
        assert seen == direct_slots

        # CLUSTER SHARDS
        shards, raw = cmd_raw(c, "CLUSTER", "SHARDS")
        assert_no_real_port(strip_replication_offsets(raw), cluster,
                            "CLUSTER SHARDS (RESP%d)" % proto)
        shard_ids = set()
        for sh in shards:
            sh = as_dict(sh)
            for nd in sh[b"nodes"]:
                nd = as_dict(nd)
                nid = nd[b"id"].decode()
                shard_ids.add(nid)
                assert nd[b"port"] == ports[nid], (nd, ports)
                assert nd[b"ip"] == a and nd[b"endpoint"] == a, nd
                if b"hostname" in nd:
                    assert nd[b"hostname"] in (a, b""), nd
                if b"tls-port" in nd:
                    assert nd[b"tls-port"] == 0 or p.in_range(nd[b"tls-port"]), nd
        assert shard_ids == set(ports)

        # CLUSTER NODES: a bulk string in RESP2, verbatim (txt:) in RESP3
        text, raw = cmd_raw(c, "CLUSTER", "NODES")
        assert_no_real_port(raw, cluster, "CLUSTER NODES (RESP%d)" % proto)
        if proto == 3:
            assert isinstance(text, RespVerbatim) and text.startswith(b"txt:"), raw[:40]
            text = text[4:]
        else:
            assert raw.startswith(b"$"), raw[:40]
        nodes = parse_nodes(text)
        assert {n["id"] for n in nodes} == set(ports)
        for n in nodes:
            assert n["host"] == ANNOUNCE and n["port"] == ports[n["id"]], n["raw"]
            d = direct_nodes[n["id"]]
            assert (n["flags"] - {"myself"}, n["master"], n["slots"]) == \
                (d["flags"] - {"myself"}, d["master"], d["slots"]), (n["raw"], d["raw"])
        myself = [n["id"] for n in nodes if "myself" in n["flags"]]
        seeds = {cluster.myid(rp) for rp in cluster.ports[:2]}
        assert len(myself) == 1 and myself[0] in seeds, myself

        entry_id = c.cmd("CLUSTER", "MYID")
        assert entry_id.decode() == myself[0]

        # CLUSTER REPLICAS <primary> (and its old name, in lower case)
        for pid, sub in [(pid, sub) for pid in primaries for sub in ("REPLICAS", "slaves")]:
            text, raw = cmd_raw(c, "CLUSTER", sub, pid)
            assert_no_real_port(raw, cluster, "CLUSTER REPLICAS (RESP%d)" % proto)
            lines = [x[4:] if isinstance(x, RespVerbatim) else x for x in text]
            reps = parse_nodes(b"\n".join(lines))
            assert sorted(r["id"] for r in reps) == \
                sorted(n["id"] for n in cluster.replicas_of(pid))
            for r in reps:
                assert r["host"] == ANNOUNCE and r["port"] == ports[r["id"]], r["raw"]

    # Every node port stands for its node.
    for nid, port in ports.items():
        with Conn(port) as c:
            if proto == 3:
                c.cmd("HELLO", "3")
            assert c.cmd("CLUSTER", "MYID") == nid.encode(), (port, nid)
            for sub in ("SLOTS", "shards"):
                v, raw = cmd_raw(c, "cluster", sub)
                assert not isinstance(v, RespError), v
                assert_no_real_port(strip_replication_offsets(raw), cluster,
                                    "cluster %s on node port %d" % (sub, port))
            text, raw = cmd_raw(c, "CLUSTER", "NODES")
            assert_no_real_port(raw, cluster, "CLUSTER NODES on node port %d" % port)
            if isinstance(text, RespVerbatim):
                text = text[4:]
            me = [n for n in parse_nodes(text) if "myself" in n["flags"]]
            assert len(me) == 1 and me[0]["id"] == nid and me[0]["port"] == port, \
                (nid, port, me)


def _info_addresses(text):
    """INFO replication's addresses: [("master", host, port)] on a replica,
    [("slave", ip, port), ...] on a primary."""
    out = []
    f = dict(l.split(":", 1) for l in text.decode().splitlines() if ":" in l)
    if "master_host" in f:
        out.append(("master", f["master_host"], int(f["master_port"])))
    for k, v in f.items():
        if k.startswith("slave") and k[5:].isdigit():
            kv = dict(x.split("=", 1) for x in v.split(","))
            out.append(("slave", kv["ip"], int(kv["port"])))
    return sorted(out)


@pytest.mark.parametrize("proto", [2, 3])
def test_role_and_info_name_only_proxy_ports(cluster, cproxy, proto):
    """ROLE and INFO replication name a node's primary or replicas: through
    each node's port, by ttlguard's port of the same node (the one CLUSTER
    NODES gives it), never a real one; the rest is the node's own reply.
    Plain and inside MULTI."""
    p = cproxy(cluster)
    ports = p.node_ports()
    proxied = {real: ports[cluster.myid(real)] for real in cluster.ports}
    for real in cluster.ports:
        with Conn(real) as d:
            role_d = d.cmd("ROLE")
            info_d = _info_addresses(d.cmd("INFO", "replication"))
        with Conn(proxied[real]) as c:
            if proto == 3:
                assert isinstance(c.cmd("HELLO", "3"), RespMap)
            role = c.cmd("ROLE")
            info, info_raw = cmd_raw(c, "INFO", "replication")
            c.send(enc("MULTI") + enc("ROLE") + enc("INFO", "replication") + enc("EXEC"))
            in_multi = [c.reply() for _ in range(4)][3]
        assert role[0] == role_d[0], (role, role_d)
        if role[0] == b"master":
            want = sorted((ANNOUNCE.encode(), b"%d" % proxied[int(r[1])]) for r in role_d[2])
            assert sorted((r[0], r[1]) for r in role[2]) == want, (role, role_d)
        else:
            assert (role[1], role[2]) == (ANNOUNCE.encode(), proxied[role_d[2]]), (role, role_d)
            assert role[3] == role_d[3]
        want = sorted((k, ANNOUNCE, proxied[port]) for k, _host, port in info_d)
        assert _info_addresses(info) == want, (info, info_d)
        assert not real_ports_in(b"".join(
            l for l in info_raw.split(b"\n") if b"port" in l or b"slave" in l), cluster.ports)
        assert in_multi[0][0] == role[0] and _info_addresses(in_multi[1]) == want, in_multi


def test_topology_inside_multi(cluster, cproxy):
    """MULTI, CLUSTER NODES, CLUSTER SLOTS, CLUSTER SHARDS, EXEC through the
    entry port: the EXEC reply must not show a real node port either (the
    contract: no client ever learns a real node address)."""
    p = cproxy(cluster)
    p.node_ports()
    # A value of the user's that looks like a CLUSTER NODES line, read in the
    # same transaction: only the topology elements are rewritten, never data.
    fake = b"0123456789abcdef0123456789abcdef01234567 10.9.8.7:1234@11234 master - 0 0 1 connected"
    key = cluster.key_for_slot_owner(cluster.node_by_port(cluster.ports[0]), prefix="u:")
    with Conn(p.port) as c:
        assert c.cmd("SET", key, fake) == b"OK"
        assert c.cmd("MULTI") == b"OK"
        for sub in ("NODES", "SLOTS", "SHARDS"):
            assert c.cmd("CLUSTER", sub) == b"QUEUED"
        assert c.cmd("GET", key) == b"QUEUED"
        v, raw = cmd_raw(c, "EXEC")
    assert isinstance(v, list) and len(v) == 4, v
    assert v[3] == fake, v[3]
    assert_no_real_port(strip_replication_offsets(raw), cluster, "EXEC of CLUSTER NODES/SLOTS")


def test_a_dead_first_seed(cluster, cproxy):
    """backend = a dead address first, then two real seeds ("one is
    enough"): ttlguard reads the topology from a seed that answers at once,
    not a refresh period (5 s) later: within 3 s of its start every node has
    its port and the entry port answers PING with PONG."""
    dead = free_port()
    t0 = time.monotonic()
    p = cproxy(cluster, expect=None, seed_ports=[dead] + cluster.ports[:2])

    def ready():
        with Conn(p.port) as c:
            if c.cmd("PING") != b"PONG":
                return False
            nodes = c.cmd("CLUSTER", "NODES")
        return not isinstance(nodes, RespError) and \
            all(p.in_range(n["port"]) for n in parse_nodes(nodes))
    try:
        wait_for(ready, 3 - (time.monotonic() - t0), "node ports and a PONG on the entry port")
    except AssertionError as e:
        raise AssertionError("%s\nttlguard stderr:\n%s" % (e, p.stderr()[-1500:]))
    assert len(p.node_ports()) == 6


# --------------------------------------------------------------------------
# Redirects
# --------------------------------------------------------------------------

def test_moved_names_the_owners_proxy_port(cluster, cproxy):
    """GET of a key whose slot is on another primary, through each of the 6
    node ports: -MOVED <slot> 127.0.0.1:<the owner's proxy port> (the slot
    as Redis says it, directly on the same node). A replica without
    READONLY redirects its own primary's keys too."""
    p = cproxy(cluster)
    ports = p.node_ports()
    prim = cluster.primaries()
    keys = {n["id"]: cluster.key_for_slot_owner(n, prefix="mv:") for n in prim}
    for node in cluster.nodes():
        with Conn(ports[node["id"]]) as c, Conn(node["port"]) as d:
            for owner, k in keys.items():
                if owner == node["id"]:
                    continue
                slot = cluster.keyslot(k)
                direct = d.cmd("GET", k)
                assert direct == RespError(b"MOVED %d 127.0.0.1:%d"
                                           % (slot, cluster.node_by_id(owner)["port"]))
                value, raw = cmd_raw(c, "GET", k)
                assert value == moved(slot, ports[owner]), \
                    ("GET %s through %s's port %d" % (k, node["id"], ports[node["id"]]), raw)


def _pipeline(cluster, prefix):
    """Commands over keys of all three primaries: writes, reads, a 300 kB
    value, an INCR, a PING; and the keys they touch."""
    cmds, keys = [], []
    big = "B" * 300000
    for i, n in enumerate(cluster.primaries()):
        k = cluster.key_for_slot_owner(n, prefix=prefix)
        keys += [k, k + ":n", k + ":big"]
        cmds += [("GET", k), ("SET", k, "v%d" % i), ("GET", k), ("INCR", k + ":n"),
                 ("PING",), ("SET", k + ":big", big), ("STRLEN", k + ":big"),
                 ("GET", k + ":big"), ("GET", k)]
    return cmds, keys


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("role", ["primary", "replica"])
def test_moved_rewritten_in_a_pipeline(cluster, cproxy, role, proto):
    """One send of 27 commands over keys of all three primaries (with 300 kB
    values among them) through a primary's / a replica's node port, RESP2
    and RESP3: the reply bytes are exactly the direct session's with each
    real address in a -MOVED replaced by the owner's proxy address; every
    -MOVED is rewritten, none shifted or lost. The same one command at a
    time."""
    p = cproxy(cluster)
    ports = p.node_ports()
    node = cluster.primaries()[1] if role == "primary" else cluster.replicas()[0]
    cmds, keys = _pipeline(cluster, "pl:%s:" % role)
    amap = addr_map(cluster, ports)
    for pipelined in (True, False):
        wipe(cluster, keys)
        direct = session(node["port"], cmds, pipelined, hello3=proto == 3)
        assert any(r.startswith(b"-MOVED ") for r in direct)
        expected = [map_ports(r, amap) for r in direct]
        wipe(cluster, keys)
        got = session(ports[node["id"]], cmds, pipelined, hello3=proto == 3)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g == e, "reply %d to %r: got %r, expected %r" % (i, cmds[i][:2], g[:120],
                                                                    e[:120])
        assert_no_real_port(b"".join(r for r in got if r.startswith(b"-")), cluster,
                            "pipelined redirects")


def test_ask_and_tryagain_on_a_migrating_slot(cluster, cproxy):
    """A slot set MIGRATING by hand (CLUSTER SETSLOT straight to the nodes,
    restored afterwards): through the owner's node port, GET of a missing
    key -> -ASK <slot> 127.0.0.1:<importing node's proxy port>, an existing
    key is served, MGET of both -> -TRYAGAIN byte for byte as Redis sends it,
    also pipelined. Through the importing node's port: SET without ASKING ->
    -MOVED to the owner's proxy port; ASKING then SET -> OK."""
    p = cproxy(cluster)
    ports = p.node_ports()
    src, dst = cluster.primaries()[0], cluster.primaries()[1]
    base = cluster.key_for_slot_owner(src, prefix="ask:")   # ask:{N}
    slot = cluster.keyslot(base)
    present, missing = base + ":present", base + ":missing"
    cluster.cmd(src["port"], "DEL", present, missing)
    assert cluster.cmd(src["port"], "SET", present, "x") == b"OK"
    cmds = [("GET", missing), ("GET", present), ("MGET", present, missing), ("PING",)]
    try:
        assert cluster.cmd(dst["port"], "CLUSTER", "SETSLOT", slot, "IMPORTING", src["id"]) == b"OK"
        assert cluster.cmd(src["port"], "CLUSTER", "SETSLOT", slot, "MIGRATING", dst["id"]) == b"OK"
        direct = session(src["port"], cmds)
        assert direct[0] == b"-ASK %d 127.0.0.1:%d\r\n" % (slot, dst["port"]), direct
        assert direct[2].startswith(b"-TRYAGAIN "), direct
        for pipelined in (True, False):
            got = session(ports[src["id"]], cmds, pipelined)
            assert got[0] == b"-ASK %d %s:%d\r\n" % (slot, ANNOUNCE.encode(), ports[dst["id"]]), got
            assert got[1:] == direct[1:], (got, direct)
        with Conn(ports[dst["id"]]) as c:
            assert c.cmd("SET", missing, "y") == moved(slot, ports[src["id"]])
            assert c.cmd("ASKING") == b"OK"
            assert c.cmd("SET", missing, "y") == b"OK"
        with Conn(dst["port"]) as d:
            assert d.cmd("ASKING") == b"OK"
            assert d.cmd("GET", missing) == b"y"
    finally:
        with Conn(dst["port"]) as d:
            d.cmd("ASKING")
            d.cmd("DEL", missing)
        for n in (src, dst):
            cluster.cmd(n["port"], "CLUSTER", "SETSLOT", slot, "STABLE")
        cluster.cmd(src["port"], "DEL", present)


def test_readonly_reads_on_a_replica_port(cluster, cproxy):
    """Through a replica's node port: GET of its primary's key -> -MOVED to
    the primary's proxy port; after READONLY the replica serves it; a key of
    another shard still gets -MOVED naming that owner's proxy port; after
    READWRITE the first key is redirected again."""
    p = cproxy(cluster)
    ports = p.node_ports()
    rep = cluster.replicas()[0]
    prim = cluster.node_by_id(rep["master"])
    other = next(n for n in cluster.primaries() if n["id"] != prim["id"])
    k = cluster.key_for_slot_owner(prim, prefix="ro:")
    ko = cluster.key_for_slot_owner(other, prefix="ro:")
    with Conn(prim["port"]) as d:
        assert d.cmd("SET", k, "replicated") == b"OK"
        assert d.cmd("WAIT", 1, 5000) == 1
    with Conn(ports[rep["id"]]) as c:
        assert c.cmd("GET", k) == moved(cluster.keyslot(k), ports[prim["id"]])
        assert c.cmd("READONLY") == b"OK"
        assert c.cmd("GET", k) == b"replicated"
        assert c.cmd("GET", ko) == moved(cluster.keyslot(ko), ports[other["id"]])
        assert c.cmd("READWRITE") == b"OK"
        assert c.cmd("GET", k) == moved(cluster.keyslot(k), ports[prim["id"]])


def test_a_script_error_shaped_like_a_redirect_opens_no_relay(cluster, cproxy, make_redis):
    """A Lua script can return any error text, "MOVED 1 host:port" or "ASK
    1 host:port" too. Those are not the cluster's redirects: the proxy must
    not open a listener that forwards to an address a client made up (a
    relay to any host:port, here a plain redis-server that is no cluster
    node, and unroutable 10.x addresses), and must not spend cluster_ports
    on them (ports are never reused: a real node joining later would find
    none left). Afterwards every port of the range that accepts a connection
    stands for one of the 6 nodes (CLUSTER MYID), none reaches the other
    server."""
    victim = make_redis()
    with Conn(victim.port) as v:
        assert v.cmd("SET", "victim:marker", "not-a-cluster-node") == b"OK"
    p = cproxy(cluster)
    ports = p.node_ports()
    targets = ["127.0.0.1:%d" % victim.port] + ["10.255.%d.1:6379" % i for i in range(3)]
    with Conn(ports[cluster.primaries()[0]["id"]]) as c:
        for target in targets:
            for word in ("MOVED", "ASK"):
                r = c.cmd("EVAL", "return redis.error_reply('%s 1 %s')" % (word, target), 0)
                assert isinstance(r, RespError) and r.startswith(word.encode()), r
        assert c.cmd("PING") == b"PONG"
    node_of_port = {port: nid for nid, port in ports.items()}
    for port in range(p.range[0], p.range[1] + 1):
        try:
            c = Conn(port, timeout=3)
        except ConnectionRefusedError:
            continue
        with c:
            myid = c.cmd("CLUSTER", "MYID")
            marker = c.cmd("GET", "victim:marker")
        assert marker != b"not-a-cluster-node", \
            "port %d of cluster_ports relays to the redis-server on %d" % (port, victim.port)
        assert node_of_port.get(port) is not None and myid == node_of_port[port].encode(), \
            "port %d of cluster_ports is no node's (CLUSTER MYID %r); nodes: %r" % (
                port, myid, ports)


# --------------------------------------------------------------------------
# Transactions, scripts, CROSSSLOT
# --------------------------------------------------------------------------

def test_multi_eval_and_crossslot_pass_unchanged(cluster, cproxy):
    """On one primary's node port: MULTI/EXEC and EVAL over two keys of one
    slot (hash tag), CROSSSLOT from MSET / EVAL / DEL over keys of two slots,
    a key of another primary in EVAL and inside MULTI (-MOVED, then
    -EXECABORT): the reply bytes are the direct session's, -MOVED addresses
    mapped to proxy ports; pipelined and one by one."""
    p = cproxy(cluster)
    ports = p.node_ports()
    a, b = cluster.primaries()[0], cluster.primaries()[1]
    ka, kc = cluster.keys_for_slot_owner(a, 2, prefix="tx:")    # two slots of a
    ka1, ka2 = ka + ":1", ka + ":2"
    kb = cluster.key_for_slot_owner(b, prefix="tx:")
    cmds = [
        ("GET", ka1),
        ("MULTI",), ("SET", ka1, "x"), ("INCR", ka2), ("GET", ka1), ("EXEC",),
        ("EVAL", "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('INCRBY', KEYS[2], 5)",
         2, ka1, ka2, "y"),
        ("EVAL", "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}", 2, ka1, ka2),
        ("MSET", ka1, "1", kc, "2"),
        ("MSET", ka1, "1", kb, "2"),
        ("DEL", ka1, kc),
        ("EVAL", "return 1", 2, ka1, kc),
        ("EVAL", "return redis.call('GET', KEYS[1])", 1, kb),
        ("MULTI",), ("SET", ka1, "z"), ("GET", kb), ("EXEC",),
        ("MULTI",), ("SET", ka1, "w"), ("SET", ka2, "w"), ("EXEC",),
        ("MGET", ka1, ka2),
    ]
    amap = addr_map(cluster, ports)
    for pipelined in (True, False):
        wipe(cluster, [ka1, ka2, kc, kb])
        direct = session(a["port"], cmds, pipelined)
        wipe(cluster, [ka1, ka2, kc, kb])
        crossslot = [r for r in direct if r.startswith(b"-CROSSSLOT")]
        assert len(crossslot) == 4, direct
        assert any(r.startswith(b"-MOVED") for r in direct), direct
        expected = [map_ports(r, amap) for r in direct]
        got = session(ports[a["id"]], cmds, pipelined)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g == e, "reply %d to %r: got %r, expected %r" % (i, cmds[i][:2], g, e)


# --------------------------------------------------------------------------
# Pub/sub
# --------------------------------------------------------------------------

def test_pubsub_and_shard_channels(cluster, cproxy):
    """SUBSCRIBE on one primary's node port receives a PUBLISH sent through
    another primary's and a replica's port (the cluster bus carries it).
    SSUBSCRIBE to a shard channel through its owner's port receives SPUBLISH
    sent through that port (RESP2 arrays, RESP3 pushes); SSUBSCRIBE and
    SPUBLISH through another primary's port get -MOVED naming the owner's
    proxy port."""
    p = cproxy(cluster)
    ports = p.node_ports()
    a, b = cluster.primaries()[0], cluster.primaries()[1]
    rep = cluster.replicas()[0]
    with Conn(ports[a["id"]]) as sub:
        assert sub.cmd("SUBSCRIBE", "ps:news") == [b"subscribe", b"ps:news", 1]
        for via in (b, rep):
            with Conn(ports[via["id"]]) as pub:
                assert isinstance(pub.cmd("PUBLISH", "ps:news", "from-%s" % via["id"]), int)
            assert sub.reply(timeout=5) == [b"message", b"ps:news",
                                            ("from-%s" % via["id"]).encode()]

    ch = cluster.key_for_slot_owner(a, prefix="ps:shard:")
    slot = cluster.keyslot(ch)
    for proto in (2, 3):
        with Conn(ports[a["id"]]) as ssub, Conn(ports[a["id"]]) as pub:
            if proto == 3:
                assert isinstance(ssub.cmd("HELLO", "3"), RespMap)
            r = ssub.cmd("SSUBSCRIBE", ch)
            assert r == [b"ssubscribe", ch.encode(), 1], r
            assert (type(r) is RespPush) == (proto == 3), type(r)
            assert pub.cmd("SPUBLISH", ch, "m%d" % proto) == 1
            msg = ssub.reply(timeout=5)
            assert msg == [b"smessage", ch.encode(), b"m%d" % proto], msg
            assert (type(msg) is RespPush) == (proto == 3), type(msg)
        with Conn(ports[b["id"]]) as wrong:
            if proto == 3:
                assert isinstance(wrong.cmd("HELLO", "3"), RespMap)
            v, raw = cmd_raw(wrong, "SSUBSCRIBE", ch)
            assert v == moved(slot, ports[a["id"]]), raw
            v, raw = cmd_raw(wrong, "SPUBLISH", ch, "x")
            assert v == moved(slot, ports[a["id"]]), raw
            assert wrong.cmd("PING") in (b"PONG",), "connection usable after the redirects"


# --------------------------------------------------------------------------
# Real clients through the entry port alone
# --------------------------------------------------------------------------

def test_redis_cli_cluster_mode(cluster, cproxy):
    """`redis-cli -c -p ENTRY` with SET then GET of keys on each of the 3
    primaries: every reply right, each "-> Redirected to slot [N] located at
    HOST:PORT" names 127.0.0.1 and the slot owner's proxy port, no real port
    anywhere in the output; the values are on the real owners."""
    p = cproxy(cluster)
    ports = p.node_ports()
    keys = [cluster.key_for_slot_owner(n, prefix="cli:") for n in cluster.primaries()]
    script = "".join("SET %s val-%d\nGET %s\n" % (k, i, k) for i, k in enumerate(keys))
    r = subprocess.run(["redis-cli", "-c", "-p", str(p.port)], input=script,
                       capture_output=True, text=True, timeout=slow(30))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert_no_real_port(out, cluster, "redis-cli -c output")
    lines = [x for x in r.stdout.splitlines() if x.strip()]
    values = [x for x in lines if not x.startswith("-> ")]
    assert values == [v for i in range(3) for v in ("OK", "val-%d" % i)], out
    redirects = re.findall(r"-> Redirected to slot \[(\d+)\] located at ([^:\s]+):(\d+)", out)
    assert len(redirects) >= 2, out     # the entry's seed owns one of the three at most
    for slot, host, port in redirects:
        owner = cluster.owner_of_slot(int(slot))
        assert (host, int(port)) == (ANNOUNCE, ports[owner["id"]]), (slot, host, port, ports)
    for i, k in enumerate(keys):
        owner = cluster.owner_of_slot(cluster.keyslot(k))
        assert cluster.cmd(owner["port"], "GET", k) == b"val-%d" % i


def test_redis_py_cluster_client(cluster, cproxy):
    """redis-py RedisCluster(host, ENTRY): it learns 6 nodes, all at
    127.0.0.1 on distinct ports in the range (the primaries on the primaries'
    proxy ports); SET/GET of 200 keys over ~200 slots, each key then found on
    its real owner; MSET/MGET of hash-tagged keys (one slot), mget_nonatomic
    across slots, a pipeline across nodes; cluster_nodes() shows only proxy
    addresses."""
    p = cproxy(cluster)
    ports = p.node_ports()
    rc = rcluster(p.port)
    try:
        nodes = rc.get_nodes()
        assert sorted(n.port for n in nodes) == sorted(ports.values()), (nodes, ports)
        assert {n.host for n in nodes} == {ANNOUNCE}
        assert sorted(n.port for n in rc.get_primaries()) == \
            sorted(ports[n["id"]] for n in cluster.primaries())

        keys = ["py:%d" % i for i in range(200)]
        for k in keys:
            assert rc.set(k, k + "-v") is True
        for k in keys:
            assert rc.get(k) == (k + "-v").encode()
        owners = collections.defaultdict(list)
        slot_map = cluster.slots()
        for k in keys:
            s = key_slot(k)
            owners[next(pp for lo, hi, pp, _, _ in slot_map if lo <= s <= hi)].append(k)
        assert len(owners) == 3
        for real, ks in owners.items():
            with Conn(real) as d:
                for k in ks:
                    assert d.cmd("GET", k) == (k + "-v").encode(), (k, real)

        tagged = ["py:{grp}:%d" % i for i in range(10)]
        assert rc.mset({k: "t" + k for k in tagged}) is True
        assert rc.mget(tagged) == [("t" + k).encode() for k in tagged]
        assert rc.mget_nonatomic(keys[:50]) == [(k + "-v").encode() for k in keys[:50]]

        pipe = rc.pipeline()
        for k in keys[:30]:
            pipe.set(k, "p-" + k)
            pipe.get(k)
        res = pipe.execute()
        assert res == [x for k in keys[:30] for x in (True, ("p-" + k).encode())], res

        cn = rc.cluster_nodes()
        addrs = list(cn) if isinstance(cn, dict) else []
        assert len(addrs) == 6, cn
        for addr in addrs:
            host, port = addr.rsplit(":", 1)
            assert host == ANNOUNCE and int(port) in ports.values(), addr
    finally:
        rc.close()


def test_redis_benchmark_cluster(cluster, cproxy):
    """`redis-benchmark --cluster -h 127.0.0.1 -p ENTRY -t set,get -n 20000
    -q`: exit 0, SET and GET rps lines, the masters it lists are the
    primaries' proxy addresses (the one it asked at the entry port; no real
    port in its output), and each real primary served SETs (INFO
    commandstats straight on the node)."""
    p = cproxy(cluster)
    ports = p.node_ports()
    prim = cluster.primaries()

    def sets(port):
        text = cluster.cmd(port, "INFO", "commandstats").decode()
        m = re.search(r"^cmdstat_set:calls=(\d+)", text, re.M)
        return int(m.group(1)) if m else 0

    before = {n["id"]: sets(n["port"]) for n in prim}
    r = subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(p.port),
                        "-t", "set,get", "-n", "20000", "-q"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=slow(90))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert_no_real_port(out, cluster, "redis-benchmark output")
    assert re.search(r"^SET: [\d.]+ requests per second", out, re.M), out[-3000:]
    assert re.search(r"^GET: [\d.]+ requests per second", out, re.M), out[-3000:]
    # redis-benchmark lists the node it asked (CLUSTER NODES 'myself') at the
    # address it connected to: the entry port.
    with Conn(p.port) as c:
        seed = c.cmd("CLUSTER", "MYID").decode()
    masters = re.findall(r"Master \d+: (\w+) ([^:\s]+):(\d+)", out)
    assert sorted((nid, host, int(port)) for nid, host, port in masters) == \
        sorted((n["id"], ANNOUNCE, p.port if n["id"] == seed else ports[n["id"]])
               for n in prim), out[:1000]
    delta = {n["id"]: sets(n["port"]) - before[n["id"]] for n in prim}
    print("redis-benchmark SETs per primary: %r (entry goes to %s)" % (delta, seed))
    # How the requests split between the nodes depends on how fast each
    # node's clients go (straight to the cluster, on a loaded machine: from
    # 678 to 18484 of 20000): that every primary got SETs is what is certain.
    for n in prim:
        assert delta[n["id"]] > 0, (n["id"], delta, seed, out[-500:])


# --------------------------------------------------------------------------
# Rules on every node
# --------------------------------------------------------------------------

def test_rules_on_every_primary(cluster, cproxy, tmp_path):
    """[ttl "t:"] ttl = 900, action = rewrite. For a key on each primary,
    through that primary's node port: SET k v EX 100, GETSET k 0 keeps a
    TTL in (0, 100] (straight to Redis the same two commands leave TTL -1:
    the control), and INCR of a new key gets TTL 900; the TTLs are read
    straight on the real node. Then the same through RedisCluster on the
    entry port (commands routed by the client through rewritten topology).
    The event log counts the 6 GETSETs as violations, action rewritten, the
    first one with its key and the real address of the node it ran on
    ("node", docs/events.md)."""
    events = str(tmp_path / "events.jsonl")
    p = cproxy(cluster, {"events": events}, sections=RULE)
    ports = p.node_ports()
    getsets = {}
    for i, n in enumerate(cluster.primaries()):
        k = cluster.key_for_slot_owner(n, prefix="t:")          # t:{N}
        kc = cluster.key_for_slot_owner(n, prefix="ctl:")
        ki = k + ":incr"
        with Conn(n["port"]) as d:
            d.cmd("DEL", k, ki)
            assert d.cmd("SET", kc, "v", "EX", 100) == b"OK"
            assert d.cmd("GETSET", kc, "0") == b"v"
            assert d.cmd("TTL", kc) == -1, "control: GETSET drops the TTL in Redis"
        with Conn(ports[n["id"]]) as c:
            assert c.cmd("SET", k, "v", "EX", 100) == b"OK"
            assert c.cmd("GETSET", k, "0") == b"v"
            getsets[k] = "127.0.0.1:%d" % n["port"]
            ttl = c.cmd("TTL", k)
            assert 0 < ttl <= 100, (n["id"], k, ttl)
            assert c.cmd("INCR", ki) == 1
        with Conn(n["port"]) as d:
            assert 0 < d.cmd("TTL", k) <= 100
            assert d.cmd("GET", k) == b"0"
            assert 890 <= d.cmd("TTL", ki) <= 900, (n["id"], ki)

    rc = rcluster(p.port)
    try:
        for n in cluster.primaries():
            k = cluster.key_for_slot_owner(n, prefix="t:rc:")
            rc.delete(k, k + ":n")
            assert rc.set(k, "v", ex=100) is True
            assert rc.getset(k, "0") == b"v"
            assert rc.incr(k + ":n") == 1
            with Conn(n["port"]) as d:
                assert 0 < d.cmd("TTL", k) <= 100, (n["id"], k)
                assert 890 <= d.cmd("TTL", k + ":n") <= 900, (n["id"], k)
            getsets[k] = "127.0.0.1:%d" % n["port"]
    finally:
        rc.close()

    # Repeats within event_window are folded into one event with a count
    # (and one key, client, node): stop the proxy to have them all written.
    assert p.stop() == 0
    with open(events) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    gs = [e for e in lines if e.get("event") == "violation" and e.get("command") == "GETSET"]
    assert sum(e.get("count", 1) for e in gs) == len(getsets) == 6, gs
    first = next(iter(getsets.items()))
    assert (gs[0]["key"], gs[0].get("node")) == first, (gs[0], first)
    for e in gs:
        assert e["action"] == "rewritten" and e.get("node") in set(getsets.values()), e


# --------------------------------------------------------------------------
# Nodes that announce a hostname / no endpoint (a cluster for these two)
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def endpoint_cluster(tmp_path_factory):
    """A cluster whose cluster-announce-hostname / cluster-preferred-endpoint-
    type the tests below change (the shared one stays plain)."""
    c = Cluster(tmp_path_factory.mktemp("endpoint-cluster")).start()
    yield c
    c.stop()


def _endpoint_type(cluster, kind, hostname=None):
    for port in cluster.ports:
        if hostname is not None:
            assert cluster.cmd(port, "CONFIG", "SET", "cluster-announce-hostname",
                               hostname) == b"OK"
        assert cluster.cmd(port, "CONFIG", "SET", "cluster-preferred-endpoint-type",
                           kind) == b"OK"


def _check_every_node_one_port(cluster, p, ports):
    """Node id -> port is the same in CLUSTER SLOTS / SHARDS / NODES through
    the entry and in -MOVED through every primary's port; all in the range,
    no real port, no port 0; and the range holds no other listener."""
    with Conn(p.port) as c:
        slots, raw_slots = cmd_raw(c, "CLUSTER", "SLOTS")
        shards, raw_shards = cmd_raw(c, "CLUSTER", "SHARDS")
        nodes, raw_nodes = cmd_raw(c, "CLUSTER", "NODES")
    assert_no_real_port(raw_slots + strip_replication_offsets(raw_shards) + raw_nodes,
                        cluster, "topology replies")
    for entry in slots:
        for nd in entry[2:]:
            assert nd[1] == ports[nd[2].decode()], ("CLUSTER SLOTS", nd, ports)
    for sh in shards:
        for nd in as_dict(sh)[b"nodes"]:
            nd = as_dict(nd)
            assert nd[b"port"] == ports[nd[b"id"].decode()], ("CLUSTER SHARDS", nd, ports)
    for n in parse_nodes(nodes):
        assert n["port"] == ports[n["id"]], ("CLUSTER NODES", n["raw"], ports)
    prim = cluster.primaries()
    for via in prim:
        with Conn(ports[via["id"]]) as c:
            for owner in prim:
                if owner["id"] == via["id"]:
                    continue
                k = cluster.key_for_slot_owner(owner, prefix="ep:")
                v, raw = cmd_raw(c, "GET", k)
                assert_no_real_port(raw, cluster, "-MOVED")
                m = REDIRECT_RE.match(bytes(v)) if isinstance(v, RespError) else None
                assert m and int(m.group(4)) == ports[owner["id"]], (raw, ports[owner["id"]])
    assert p.node_ports() == ports, "a node's port changed"
    listening = []
    for port in range(p.range[0], p.range[1] + 1):
        try:
            Conn(port, timeout=2).close()
            listening.append(port)
        except ConnectionRefusedError:
            pass
    assert sorted(listening) == sorted(ports.values()), \
        "one listener per node: range ports accepting %r, node ports %r\n%s" % (
            listening, ports, p.stderr()[-2000:])


def test_nodes_with_unknown_endpoint(endpoint_cluster, cproxy):
    """cluster-preferred-endpoint-type unknown-endpoint on every node: Redis
    gives NULL as each node's endpoint in CLUSTER SLOTS and '-MOVED <slot>
    :<port>' (the client is to keep the host it is connected to). The ports
    must still be the proxy's: CLUSTER SLOTS / SHARDS / NODES and -MOVED show
    each node's proxy port, never a real one."""
    cluster = endpoint_cluster
    _endpoint_type(cluster, "unknown-endpoint")
    try:
        k = cluster.key_for_slot_owner(cluster.primaries()[1], prefix="ep:")
        assert cluster.cmd(cluster.primaries()[0]["port"], "GET", k).startswith(b"MOVED ")
        assert cluster.cmd(cluster.ports[0], "CLUSTER", "SLOTS")[0][2][0] is None
        p = cproxy(cluster)
        ports = p.node_ports()
        _check_every_node_one_port(cluster, p, ports)
    finally:
        _endpoint_type(cluster, "ip")


def test_nodes_announcing_a_hostname(endpoint_cluster, cproxy):
    """cluster-announce-hostname localhost and cluster-preferred-endpoint-type
    hostname on every node (Redis 7's hostname support: CLUSTER SLOTS and
    redirects name 'localhost:<port>', CLUSTER SHARDS carries 'hostname').
    Through the proxy a node is still one node: one listener, the same port
    in CLUSTER SLOTS / SHARDS / NODES and in -MOVED, no port 0, no real
    port; hostname fields show cluster_announce."""
    cluster = endpoint_cluster
    _endpoint_type(cluster, "hostname", hostname="localhost")
    try:
        def gossiped():
            return all(nd[0] == b"localhost"
                       for port in cluster.ports
                       for e in cluster.cmd(port, "CLUSTER", "SLOTS") for nd in e[2:])
        wait_for(gossiped, 10, "every node's hostname known everywhere", interval=0.1)
        p = cproxy(cluster)
        ports = p.node_ports()
        _check_every_node_one_port(cluster, p, ports)
        with Conn(p.port) as c:
            for sh in c.cmd("CLUSTER", "SHARDS"):
                for nd in as_dict(sh)[b"nodes"]:
                    assert as_dict(nd).get(b"hostname") == ANNOUNCE.encode(), nd
    finally:
        _endpoint_type(cluster, "ip", hostname="")


# --------------------------------------------------------------------------
# Topology changes (a cluster of the test's own each)
# --------------------------------------------------------------------------

def _keys_per_primary(cluster, prefix, n):
    out = []
    for node in cluster.primaries():
        out += cluster.keys_for_slot_owner(node, n, prefix=prefix)
    return out


def test_failover_followed_through_the_proxy(own_cluster, cproxy, monkeypatch):
    """A RedisCluster client on the entry port does SET/GET (reading back
    what it wrote) over keys of all three primaries while CLUSTER FAILOVER is
    sent straight to one replica. The same loop straight to the cluster saw
    no error at all (measured while writing this test), so through the proxy:
    no error either; every redirect it saw names 127.0.0.1 and a port in the
    range, at least one -MOVED names the promoted replica's proxy port; keys
    of the failed-over shard succeed after the failover; CLUSTER SLOTS
    through the entry then shows the promoted node as primary of those slots
    on its proxy port and the old primary as its replica."""
    cluster = own_cluster
    redirects = Redirects(monkeypatch)
    p = cproxy(cluster)
    ports = p.node_ports()
    old = cluster.primaries()[0]
    new = cluster.replicas_of(old["id"])[0]
    keys = _keys_per_primary(cluster, "fo:", 10)
    old_keys = cluster.keys_for_slot_owner(old, 10, prefix="fo:")

    loop = ClientLoop(p.port, keys)
    loop.start()
    try:
        wait_for(lambda: loop.ops > 200 or loop.fatal, 10, "the client loop running")
        assert cluster.cmd(new["port"], "CLUSTER", "FAILOVER") == b"OK"
        try:
            wait_for(lambda: "master" in cluster.node_by_id(new["id"], new["port"])["flags"],
                     15, "the replica promoted")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, cluster.logs()))
        cluster.wait_stable()
        done = time.monotonic()
        wait_for(lambda: all(loop.last_ok.get(k, 0) > done for k in old_keys) or loop.fatal,
                 15, "every key of the failed-over shard written and read back after it")
        time.sleep(0.5)
    finally:
        loop.finish()
    print("failover: %d ops, errors %r, redirects %d" % (loop.ops, dict(loop.errors),
                                                          len(redirects.seen)))
    assert not loop.errors, "client errors through the proxy: %r" % dict(loop.errors)
    assert not redirects.bad(p), "redirects not rewritten: %r" % redirects.bad(p)
    assert any(r[0] == "MovedError" and r[3] == ports[new["id"]] for r in redirects.seen), \
        redirects.seen[:20]

    with Conn(p.port) as c:
        slots, raw = cmd_raw(c, "CLUSTER", "SLOTS")
    assert_no_real_port(raw, cluster, "CLUSTER SLOTS after the failover")
    owned = [e for e in slots if e[2][2].decode() == new["id"]]
    assert sorted((e[0], e[1]) for e in owned) == sorted(old["slots"]), slots
    for e in owned:
        assert e[2][:2] == [ANNOUNCE.encode(), ports[new["id"]]], e
        assert [r[:3] for r in e[3:]] == [[ANNOUNCE.encode(), ports[old["id"]],
                                           old["id"].encode()]], e
    rc = rcluster(p.port)
    try:
        assert rc.get_node_from_key(old_keys[0]).port == ports[new["id"]]
    finally:
        rc.close()


def _fill(cluster, node, slots, per_slot, prefix):
    """per_slot keys in each slot, written straight to node (pipelined):
    {key: value}."""
    tags = tags_for_slots(slots, prefix="")
    data = {"%s{%s}:%d" % (prefix, tags[s], j): "val-%d-%d" % (s, j)
            for s in slots for j in range(per_slot)}
    with Conn(node["port"]) as d:
        items = list(data.items())
        for i in range(0, len(items), 500):
            chunk = items[i:i + 500]
            d.send(b"".join(enc("SET", k, v) for k, v in chunk))
            assert d.replies(len(chunk)) == [b"OK"] * len(chunk)
    return data


class RawWatcher(threading.Thread):
    """GET over keys, one at a time, through one node port; keeps every
    error reply (the redirects the node sends during a migration)."""

    def __init__(self, port, keys):
        super().__init__(daemon=True)
        self.port = port
        self.keys = list(keys)
        self.stop_ev = threading.Event()
        self.errors = []
        self.ops = 0
        self.fatal = None

    def run(self):
        try:
            with Conn(self.port) as c:
                i = 0
                while not self.stop_ev.is_set():
                    v, raw = cmd_raw(c, "GET", self.keys[i % len(self.keys)])
                    if isinstance(v, RespError):
                        self.errors.append(bytes(v))
                    self.ops += 1
                    i += 1
        except Exception as e:      # noqa: B902 -- reported by the test
            self.fatal = e

    def finish(self, timeout=20):
        self.stop_ev.set()
        self.join(slow(timeout))
        assert not self.is_alive()
        assert self.fatal is None, "GET loop through the node port: %r" % self.fatal


def test_reshard_followed_through_the_proxy(own_cluster, cproxy, monkeypatch):
    """100 slots (2250 keys in the first 150 slots of the source) moved from
    one primary to another by `redis-cli --cluster reshard` straight to the
    real nodes, while a RedisCluster client on the entry port reads and
    writes those slots and a raw connection GETs them through the source's
    node port: the client sees no error; every -MOVED / -ASK either saw
    names 127.0.0.1 and the target's proxy port (and a slot that moved);
    afterwards every moved key reads back through the proxy, the source's
    port redirects to the target's, the target's port serves the keys, and
    CLUSTER SLOTS through the entry shows the moved slots on the target."""
    cluster = own_cluster
    redirects = Redirects(monkeypatch)
    p = cproxy(cluster)
    ports = p.node_ports()
    src, dst = cluster.primaries()[0], cluster.primaries()[1]
    src_slots = sorted(s for lo, hi in src["slots"] for s in range(lo, hi + 1))
    filled = set(src_slots[:150])
    data = _fill(cluster, src, sorted(filled), 15, "rs:")
    keys = list(data)
    random.Random(12).shuffle(keys)

    watcher = RawWatcher(ports[src["id"]], keys)
    client_keys = [k + ":w" for k in keys[:300]]
    loop = ClientLoop(p.port, client_keys)
    watcher.start()
    loop.start()
    try:
        wait_for(lambda: (loop.ops > 100 and watcher.ops > 100) or loop.fatal or watcher.fatal,
                 10, "client loops running")
        moved_slots = cluster.reshard(src["id"], dst["id"], 100, via=src["port"])
        done = time.monotonic()
        wait_for(lambda: (all(loop.last_ok.get(k, 0) > done for k in client_keys[:40])
                          and any(e.startswith(b"MOVED ") for e in list(watcher.errors)))
                 or loop.fatal or watcher.fatal,
                 15, "the client loop's keys read back after the reshard, a -MOVED on "
                 "the source's port")
    finally:
        loop.finish()
        watcher.finish()
    kinds = collections.Counter(e.split(b" ")[0] for e in watcher.errors)
    print("reshard: client %d ops, errors %r, redirects %d; watcher %d GETs, %r"
          % (loop.ops, dict(loop.errors), len(redirects.seen), watcher.ops, dict(kinds)))
    assert not loop.errors, "client errors through the proxy: %r" % dict(loop.errors)
    assert not redirects.bad(p, {ports[dst["id"]]}), redirects.bad(p, {ports[dst["id"]]})
    moved_set = set(moved_slots)
    assert moved_set <= filled, "redis-cli moved slots without keys: %r" % sorted(
        moved_set - filled)
    for e in watcher.errors:
        m = REDIRECT_RE.match(e)
        assert m, "unexpected error through the source's port: %r" % e
        assert m.group(3) == ANNOUNCE.encode() and int(m.group(4)) == ports[dst["id"]], e
        assert int(m.group(2)) in moved_set, e
    assert kinds[b"MOVED"] >= 1, kinds

    rc = rcluster(p.port)
    try:
        moved_keys = [k for k in keys if key_slot(k) in moved_set]
        assert len(moved_keys) == 1500
        got = rc.mget_nonatomic(moved_keys)
        assert got == [data[k].encode() for k in moved_keys]
    finally:
        rc.close()
    k = moved_keys[0]
    with Conn(ports[src["id"]]) as c:
        assert c.cmd("GET", k) == moved(key_slot(k), ports[dst["id"]])
    with Conn(ports[dst["id"]]) as c:
        assert c.cmd("GET", k) == data[k].encode()
    with Conn(p.port) as c:
        slots, raw = cmd_raw(c, "CLUSTER", "SLOTS")
    assert_no_real_port(raw, cluster, "CLUSTER SLOTS after the reshard")
    on_dst = {s for e in slots if e[2][2].decode() == dst["id"]
              for s in range(e[0], e[1] + 1)}
    assert moved_set <= on_dst
    assert all(e[2][1] == ports[dst["id"]] for e in slots if e[2][2].decode() == dst["id"])


def test_new_node_gets_a_listener(own_cluster, cproxy):
    """A 7th node joins (`redis-cli --cluster add-node`) after ttlguard
    started and 50 slots (with keys) move to it: GET of a moved key through
    the source's node port gets -MOVED naming a port in the range that no
    node had before; that port accepts at once (the listener exists before
    the redirect goes out) and stands for the new node (CLUSTER MYID); the
    key reads back there and through RedisCluster on the entry port;
    CLUSTER NODES through the entry lists 7 nodes on 7 distinct ports."""
    cluster = own_cluster
    p = cproxy(cluster)
    before = p.node_ports()
    src = cluster.primaries()[0]
    src_slots = sorted(s for lo, hi in src["slots"] for s in range(lo, hi + 1))
    data = _fill(cluster, src, src_slots[:50], 5, "nn:")
    new = cluster.add_node()
    moved_slots = cluster.reshard(src["id"], new["id"], 50, via=src["port"])
    k = next(k for k in data if key_slot(k) in set(moved_slots))
    with Conn(before[src["id"]]) as c:
        v, raw = cmd_raw(c, "GET", k)
    assert_no_real_port(raw, cluster, "the redirect to the new node")
    m = REDIRECT_RE.match(bytes(v)) if isinstance(v, RespError) else None
    assert m and m.group(1) == b"MOVED" and m.group(3) == ANNOUNCE.encode(), raw
    port = int(m.group(4))
    assert p.in_range(port) and port not in before.values(), (port, before, p.range)
    with Conn(port) as c:
        assert c.cmd("CLUSTER", "MYID") == new["id"].encode()
        assert c.cmd("GET", k) == data[k].encode()
    after = p.node_ports()
    assert len(after) == 7 and after[new["id"]] == port
    assert {i: after[i] for i in before} == before, "existing nodes kept their ports"
    rc = rcluster(p.port)
    try:
        moved_keys = [x for x in data if key_slot(x) in set(moved_slots)]
        assert rc.mget_nonatomic(moved_keys) == [data[x].encode() for x in moved_keys]
        assert port in {n.port for n in rc.get_nodes()}
    finally:
        rc.close()


# --------------------------------------------------------------------------
# --check-config
# --------------------------------------------------------------------------

def _check_config(path):
    r = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=slow(20))
    return r.returncode, r.stdout + r.stderr


def _cluster_keys(listen_port, lo, hi, seeds):
    return [("listen", "127.0.0.1:%d" % listen_port),
            ("backend", " ".join("127.0.0.1:%d" % s for s in seeds)),
            ("cluster", "on"),
            ("cluster_ports", "%d-%d" % (lo, hi)),
            ("cluster_announce", ANNOUNCE)]


def _write_conf(path, keys):
    with open(path, "w") as f:
        f.write("[proxy]\n" + "".join("%s = %s\n" % kv for kv in keys))
    return path


def test_check_config_accepts_a_cluster_config(cluster, tmp_path):
    """The contract's example shape (two seeds, cluster = on, a port range,
    cluster_announce) passes --check-config: exit 0."""
    harness.need_binary()
    conf = _write_conf(str(tmp_path / "good.ini"),
                       _cluster_keys(free_port(), 27000, 27099, cluster.ports[:2]))
    rc, out = _check_config(conf)
    assert rc == 0, out


@pytest.mark.parametrize("case", ["reversed range", "overlaps listen", "unix backend",
                                  "range not numbers", "range above 65535", "cluster = maybe"])
def test_check_config_refuses_cluster_mistakes(case, tmp_path):
    """Mistakes of the cluster keys: exit 1 and file:line of a key at fault
    (cluster_ports 10-5; a cluster_ports range holding the listen port;
    cluster = on with a unix: backend; cluster_ports abc-def; 65530-65540;
    cluster = maybe)."""
    harness.need_binary()
    listen = free_port()
    keys = dict(_cluster_keys(listen, 27000, 27099, [free_port()]))
    at_fault = {"reversed range": ("cluster_ports", "10-5", ["cluster_ports"]),
                "overlaps listen": ("cluster_ports", "%d-%d" % (listen - 2, listen + 2),
                                    ["cluster_ports", "listen"]),
                "unix backend": ("backend", "unix:/tmp/ttlg-cluster-none.sock",
                                 ["backend", "cluster"]),
                "range not numbers": ("cluster_ports", "abc-def", ["cluster_ports"]),
                "range above 65535": ("cluster_ports", "65530-65540", ["cluster_ports"]),
                "cluster = maybe": ("cluster", "maybe", ["cluster"])}[case]
    key, value, lines_ok = at_fault
    keys[key] = value
    items = list(keys.items())
    conf = _write_conf(str(tmp_path / "bad.ini"), items)
    rc, out = _check_config(conf)
    assert rc == 1, out
    allowed = ["%s:%d:" % (conf, 2 + [k for k, _ in items].index(k)) for k in lines_ok]
    assert any(a in out for a in allowed), (allowed, out)


def test_audit_walks_every_primary(cluster, cproxy):
    """ttlguard audit --cluster, with the proxy's own config (its first seed
    is where the audit asks CLUSTER SHARDS): every primary is walked, the
    totals add up and each node's line has its own share. Keys are written
    straight to the nodes (writers that bypass the proxy): per primary, 3
    leaked au: keys and 1 with a TTL. --from-replicas reads the same keys
    from a replica of each shard (READONLY), and --fix --yes gives every
    leaked key the rule's TTL on its primary."""
    sections = '[ttl "au:"]\nttl = 600\naction = rewrite\n'
    p = cproxy(cluster, sections=sections)
    primaries = cluster.primaries()
    want = {}
    for n in primaries:
        keys = cluster.keys_for_slot_owner(n, 4, prefix="au:")
        with Conn(n["port"]) as d:
            for k in keys[:3]:
                assert d.cmd("SET", k, "v") == b"OK"
            assert d.cmd("SET", keys[3], "v", "EX", 1000) == b"OK"
        want["127.0.0.1:%d" % n["port"]] = keys

    def audit(*extra):
        r = subprocess.run([harness.TTLG_BIN, "audit", "--config", p.config_path, "--cluster",
                            "--json"] + list(extra), capture_output=True, text=True,
                           timeout=harness.slow(60))
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr

    try:
        rc, rep, err = audit()
        assert rc == 1, (rc, err)                       # leaked keys were found
        assert rep["scan"]["leaked"] == 3 * len(primaries), rep["scan"]
        nodes = {n["node"]: n for n in rep["nodes"]}
        assert set(nodes) == set(want), (nodes, want)
        assert all(n["leaked"] == 3 and n["role"] == "master" for n in nodes.values()), nodes
        assert sum(n["keys"] for n in nodes.values()) == rep["scan"]["keys"]
        assert rep["backend"].startswith("cluster of 127.0.0.1:%d (%d primaries)"
                                         % (cluster.ports[0], len(primaries))), rep["backend"]

        rc, rep, err = audit("--from-replicas")
        assert rc == 1, (rc, err)
        assert rep["scan"]["leaked"] == 3 * len(primaries), rep["scan"]
        assert all(n["role"] == "replica" for n in rep["nodes"]), rep["nodes"]
        assert not set(n["node"] for n in rep["nodes"]) & set(want)

        rc, rep, err = audit("--fix", "--yes")
        assert rep is not None and rep["scan"]["leaked"] == 3 * len(primaries), (rc, err)
        for node, keys in want.items():
            with Conn(int(node.split(":")[1])) as d:
                for k in keys[:3]:
                    assert 590 <= d.cmd("TTL", k) <= 600, (node, k)
                assert 990 <= d.cmd("TTL", keys[3]) <= 1000, "a key with a TTL keeps its own"
    finally:
        for node, keys in want.items():
            with Conn(int(node.split(":")[1])) as d:
                d.cmd("DEL", *keys)
