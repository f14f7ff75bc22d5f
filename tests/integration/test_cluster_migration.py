"""
Slot migration under load through ttlguard (issue 26, item 3).

While RedisCluster clients write and read back keys through ttlguard's entry
port (keys under a rewrite rule, [ttl "mig:"] ttl 900) and, at the same
time, the same client loop runs straight to the cluster, slots move:

  - atomically, by the server: Redis 8.4+ `CLUSTER MIGRATION IMPORT lo hi`
    sent to the new owner, Valkey 9.0+ `CLUSTER MIGRATESLOTS SLOTSRANGE lo hi
    NODE id` sent to the old one, on harness.SERVER_BIN (TTLG_REDIS_SERVER:
    tests/run.sh's passes against Redis 8.6 and Valkey 9.1 run it; a server
    without atomic migration skips it, saying so);
  - classically, `redis-cli --cluster reshard` (MIGRATE / ASK), on
    harness.SERVER_BIN.

Each runs on a plaintext cluster and on a TLS one (test_cluster_tls's
TlsCluster: tls-cluster and tls-replication, so the migration itself runs
over TLS; ttlguard with backend_tls = on and tls_listen, the clients
through it and straight to the nodes' TLS ports speaking TLS).

Asserted: no wrong reply (every GET reads back what was written); client
errors through ttlguard no more than straight to the cluster; the moved keys
keep a TTL (the rule's, at most 900 s) on the new owner; a -MOVED for a moved
key through the old owner's proxy port names the new owner's proxy port.
The figures (requests, wrong replies, errors, direct vs through) are printed.
"""

import contextlib
import time

import pytest

import harness
from harness import Conn, wait_for
from cluster_util import ANNOUNCE, Cluster, ClusterProxy
from test_cluster import ClientLoop
from test_cluster_tls import TlsCluster, TlsClusterProxy, certs  # noqa: F401 (certs: a fixture)

RULE = '[ttl "mig:"]\nttl = 900\naction = rewrite\n'
NSLOTS = 100


def atomic_kind():
    """'redis' or 'valkey' when SERVER_BIN moves slots atomically, else skip."""
    name, version = harness.server_bin_identity()
    if name == "redis" and version >= (8, 4, 0):
        return "redis"
    if name == "valkey" and version >= (9, 0, 0):
        return "valkey"
    pytest.skip("%s %s has no atomic slot migration (Redis 8.4+, Valkey 9.0+): the passes "
                "against those servers run it" % (name, ".".join(map(str, version))))


def atomic_move(cluster, src, dst, lo, hi, kind):
    """Start the server's atomic migration of slots lo..hi from src to dst
    and wait (bounded) until dst owns them all."""
    if kind == "redis":
        r = cluster.cmd(dst["port"], "CLUSTER", "MIGRATION", "IMPORT", lo, hi)
    else:
        r = cluster.cmd(src["port"], "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", lo, hi,
                        "NODE", dst["id"])
    assert not isinstance(r, harness.RespError), r
    wait_for(lambda: all(cluster.owner_of_slot(s)["id"] == dst["id"] for s in (lo, hi)),
             60, "slots %d-%d owned by the destination" % (lo, hi), interval=0.1)
    cluster.wait_stable(60)


def run_under_load(cluster, proxy, move, certs=None):
    """Three client loops through ttlguard and two straight to the cluster
    (over TLS with certs) while move() runs; asserts on what they saw."""
    keys = ["mig:%d" % i for i in range(300)]
    tls = {"ssl": True, "ssl_ca_certs": certs.ca.cert} if certs else {}
    direct_port = cluster.tls_ports[cluster.ports[0]] if certs else cluster.ports[0]
    through = [ClientLoop(proxy.port, keys[i::3], **tls) for i in range(3)]
    direct = [ClientLoop(direct_port, ["d" + k for k in keys[i::3]], **tls) for i in range(2)]
    for c in through + direct:
        c.start()
    try:
        wait_for(lambda: all(c.ops > 100 or c.fatal for c in through + direct), 20,
                 "the client loops running")
        move()
        time.sleep(1.0)
    finally:
        for c in through + direct:
            c.finish()
    t_err = sum(sum(c.errors.values()) for c in through)
    d_err = sum(sum(c.errors.values()) for c in direct)
    wrong = sum(n for c in through for e, n in c.errors.items() if e.startswith("GET"))
    print("migration: through ttlguard %d requests, %d wrong replies, %d errors %r; direct %d "
          "requests, %d errors %r" % (sum(c.ops for c in through), wrong, t_err,
                                      [dict(c.errors) for c in through],
                                      sum(c.ops for c in direct), d_err,
                                      [dict(c.errors) for c in direct]))
    assert wrong == 0
    per_thread_direct = d_err / len(direct)
    assert t_err <= max(0, per_thread_direct * len(through)), (t_err, d_err)
    return keys


def check_moved(cluster, proxy, keys, src, dst, lo, hi):
    ports = proxy.node_ports()
    moved = [k for k in keys if lo <= cluster.cmd(cluster.ports[0], "CLUSTER", "KEYSLOT", k) <= hi]
    assert moved, "no key in the moved slots"
    with Conn(dst["port"]) as d:
        for k in moved:
            assert 0 < d.cmd("TTL", k) <= 900, k
    with proxy.conn(ports[src["id"]]) as c:
        r = c.cmd("GET", moved[0])
    assert isinstance(r, harness.RespError) and r.startswith(b"MOVED"), r
    assert r.endswith(b"%s:%d" % (ANNOUNCE.encode(), ports[dst["id"]])), (r, ports)


@contextlib.contextmanager
def cluster_through_proxy(tmp_path, name, certs=None):
    """A cluster of its own and ttlguard in front of it, with the rule:
    (cluster, proxy, the first primary, the second); ttlguard must exit 0.
    With certs: a TlsCluster and a TlsClusterProxy."""
    harness.need_binary()
    cluster = (TlsCluster(tmp_path / name, certs) if certs else Cluster(tmp_path / name)).start()
    proxy = None
    try:
        if certs:
            proxy = TlsClusterProxy(tmp_path, cluster, certs, sections=RULE).start()
        else:
            proxy = ClusterProxy(tmp_path, cluster, sections=RULE)
            proxy.start(expect=b"+PONG")
        src, dst = cluster.primaries()[0], cluster.primaries()[1]
        yield cluster, proxy, src, dst
    finally:
        if proxy is not None:
            assert proxy.stop() == 0, proxy.stderr()
        cluster.stop()


TRANSPORTS = pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])


@TRANSPORTS
def test_atomic_slot_migration_under_load(tmp_path, request, tls):
    kind = atomic_kind()
    certs = request.getfixturevalue("certs") if tls else None
    with cluster_through_proxy(tmp_path, "atomic", certs) as (cluster, proxy, src, dst):
        lo = src["slots"][0][0]
        hi = lo + NSLOTS - 1
        keys = run_under_load(cluster, proxy,
                              lambda: atomic_move(cluster, src, dst, lo, hi, kind), certs)
        check_moved(cluster, proxy, keys, src, dst, lo, hi)


@TRANSPORTS
def test_classic_reshard_under_load(tmp_path, request, tls):
    certs = request.getfixturevalue("certs") if tls else None
    with cluster_through_proxy(tmp_path, "classic", certs) as (cluster, proxy, src, dst):
        moved = []
        keys = run_under_load(cluster, proxy,
                              lambda: moved.extend(cluster.reshard(src["id"], dst["id"], NSLOTS)),
                              certs)
        check_moved(cluster, proxy, keys, src, dst, min(moved), max(moved))
