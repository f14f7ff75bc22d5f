"""
cluster = on with TLS (issue 26, item 1): a 6-node cluster whose nodes serve
TLS (--tls-port, --tls-cluster yes, --tls-replication yes; a plain port too,
for the test's own direct helpers), ttlguard with backend_tls = on towards
every node and tls_listen as the entry port, so that every node listener on
cluster_ports speaks TLS too (docs/config.md, "Redis Cluster").

  - topology replies through the TLS entry port name only proxy ports (the
    nodes' TLS ports and plain ports nowhere; CLUSTER SHARDS shows the
    node's proxy port as "tls-port");
  - redis-py RedisCluster(ssl=True) through the entry port: SET/GET over
    every primary, each key found on its real owner;
  - redis-benchmark --cluster --tls through the entry port;
  - nodes announcing host names (cluster-announce-hostname,
    cluster-preferred-endpoint-type hostname), each with a certificate for
    its host name only (no IP SAN): ttlguard verifies each node by its host
    name (SNI too), so it works; and ttlguard audit --cluster does the same;
  - a failover under a RedisCluster(ssl) client: no client error;
  - SIGHUP with a new client certificate: new TLS clients of the node ports
    get the new certificate.

The server: harness.SERVER_BIN (TTLG_REDIS_SERVER), skipped when it was
built without TLS. Every process is stopped by PID; every wait is bounded.
"""

import os
import re
import signal
import subprocess
import time

import pytest

import harness
import tls_util
from harness import Conn, RedisServer, slow, wait_for
from cluster_util import ANNOUNCE, Cluster, ClusterProxy, real_ports_in, redis_cli
from test_cluster import ClientLoop, rcluster

NODE_EXT = """\
[node]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = DNS:{name}
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    c = tls_util.make_certs(str(tmp_path_factory.mktemp("certs")))
    tls_util.require_server_tls(str(tmp_path_factory.mktemp("probe")), c)
    return c


def node_cert(certs, name):
    """A certificate for DNS:name only (no IP), signed by certs.ca."""
    pair = tls_util.Pair(os.path.join(certs.dir, name + ".crt"),
                         os.path.join(certs.dir, name + ".key"))
    if os.path.exists(pair.cert):
        return pair
    ext = os.path.join(certs.dir, name + ".ext")
    with open(ext, "w") as f:
        f.write(NODE_EXT.format(name=name))
    csr = pair.cert[:-4] + ".csr"
    tls_util._openssl("req", "-new", *tls_util.EC, "-keyout", pair.key, "-out", csr,
                      "-subj", "/CN=" + name, "-config", os.path.join(certs.dir, "req.cnf"))
    tls_util._openssl("x509", "-req", "-in", csr, "-CA", certs.ca.cert, "-CAkey", certs.ca.key,
                      "-set_serial", str(abs(hash(name)) % 10**9 + 0x3000), "-days", "3650",
                      "-sha256", "-extfile", ext, "-extensions", "node", "-out", pair.cert)
    return pair


def cli_tls(certs):
    """redis-cli / redis-benchmark options for a TLS connection with the
    test client certificate."""
    return ["--tls", "--cacert", certs.ca.cert, "--cert", certs.client.cert,
            "--key", certs.client.key]


class TlsCluster(Cluster):
    """Cluster whose nodes serve TLS on tls_port (and the bus and the
    replication over TLS); the plain port stays for the direct helpers.
    hostnames: each node announces nodeN.ttlg.test and serves a certificate
    for that name only."""

    def __init__(self, tmpdir, certs, hostnames=False):
        super().__init__(tmpdir)
        self.certs = certs
        self.hostnames = hostnames
        self.tls_ports = {}         # plain port -> TLS port
        self.names = {}             # plain port -> announced host name

    def _new_server(self):
        port, tls_port = harness.free_port(), harness.free_port()
        name = "node%d.ttlg.test" % len(self.servers)
        cert = node_cert(self.certs, name) if self.hostnames else self.certs.server
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes-%d.conf" % port,
                "--cluster-port", str(harness.free_port()),
                "--cluster-node-timeout", str(2000), "--repl-diskless-sync-delay", "0"]
        args += tls_util.cluster_node_tls_args(self.certs, tls_port, cert)
        if self.hostnames:
            args += ["--cluster-announce-hostname", name,
                     "--cluster-preferred-endpoint-type", "hostname"]
        srv = RedisServer(self.tmpdir, args, port=port, name="tlscluster")
        self.servers.append(srv)
        self.tls_ports[port] = tls_port
        self.names[port] = name
        srv.start()
        return srv

    def cli_node(self, port):
        return cli_tls(self.certs), "127.0.0.1:%d" % self.tls_ports[port]


class TlsClusterProxy(ClusterProxy):
    """ClusterProxy with backend_tls = on (seeds: the TLS ports) and the
    entry port as tls_listen (listen empty): the node ports speak TLS."""

    def __init__(self, tmpdir, cluster, certs, conf=None, sections="", **kw):
        c = {"backend_tls": "on", "backend_tls_ca_cert_file": certs.ca.cert,
             "tls_cert_file": certs.server.cert, "tls_key_file": certs.server.key,
             "tls_ca_cert_file": certs.ca.cert}
        c.update(conf or {})
        seeds = [cluster.tls_ports[p] for p in cluster.ports[:kw.pop("seeds", 2)]]
        super().__init__(tmpdir, cluster, c, sections, seed_ports=seeds, **kw)
        self.certs = certs
        with open(self.config_path) as f:
            text = f.read()
        text = text.replace("listen = 127.0.0.1:%d\n" % self.port,
                            "listen =\ntls_listen = 127.0.0.1:%d\n" % self.port, 1)
        with open(self.config_path, "w") as f:
            f.write(text)

    def ctx(self):
        return tls_util.client_context(self.certs.ca.cert)

    def conn(self, port=None):
        return tls_util.TlsConn(port or self.port, self.ctx())

    def start(self, timeout=10.0):
        self.stderr_file = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=self.stderr_file, stderr=self.stderr_file,
                                     env=self.env, preexec_fn=harness._die_with_parent)
        ctx = self.ctx()
        try:
            wait_for(lambda: self.proc.poll() is not None or tls_util.tls_ping_ok(self.port, ctx),
                     timeout, "ttlguard's TLS entry port")
        except AssertionError:
            raise AssertionError("ttlguard not ready:\n%s" % self.stderr())
        assert self.proc.poll() is None, self.stderr()
        return self

    def rcluster(self, **kw):
        return rcluster(self.port, ssl=True, ssl_ca_certs=self.certs.ca.cert, **kw)


def all_real_ports(cluster):
    return list(cluster.ports) + list(cluster.tls_ports.values())


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory, certs):
    harness.need_binary()
    c = TlsCluster(tmp_path_factory.mktemp("tlscluster"), certs).start()
    yield c
    c.stop()


@pytest.fixture
def tproxy(tmp_path, request):
    started = []

    def make(cluster, certs, **kw):
        p = TlsClusterProxy(tmp_path, cluster, certs, **kw)
        started.append(p)
        return p.start()

    yield make
    for p in started:
        rc = p.stop()
        if rc != 0:
            print(p.stderr())
        assert rc == 0, "ttlguard exit %s:\n%s" % (rc, p.stderr())


def test_config_takes_tls_with_cluster(tmp_path, certs):
    """--check-config: backend_tls and tls_listen with cluster = on pass;
    listen and tls_listen together are refused (which one the node ports
    are would be a guess)."""
    harness.need_binary()
    base = ["[proxy]", "backend = 127.0.0.1:7000", "cluster = on",
            "cluster_ports = 27100-27110", "cluster_announce = 127.0.0.1", "backend_tls = on",
            "backend_tls_ca_cert_file = " + certs.ca.cert,
            "tls_cert_file = " + certs.server.cert, "tls_key_file = " + certs.server.key]
    for extra, want in ((["listen =", "tls_listen = 127.0.0.1:27099"], 0),
                        (["listen = 127.0.0.1:27098", "tls_listen = 127.0.0.1:27099"], 1)):
        path = str(tmp_path / ("c%d.ini" % want))
        with open(path, "w") as f:
            f.write("\n".join(base + extra) + "\n")
        r = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == want, r.stdout + r.stderr
        if want:
            assert "listen or tls_listen, not both" in r.stdout + r.stderr


def test_topology_over_tls_names_only_proxy_ports(tls_cluster, certs, tproxy):
    """CLUSTER SLOTS / SHARDS / NODES through the TLS entry port: every node on
    its proxy port, no real port (plain or TLS) in the bytes; SHARDS has the
    proxy port as tls-port and no plain port; every node port answers
    CLUSTER MYID over TLS with the id of its node."""
    p = tproxy(tls_cluster, certs)
    ports = p.node_ports()
    with p.conn() as c:
        for args in (("CLUSTER", "SLOTS"), ("CLUSTER", "SHARDS"), ("CLUSTER", "NODES")):
            c.send(harness.enc(*args))
            _, raw = c.reply_raw()
            assert not real_ports_in(raw, all_real_ports(tls_cluster)), (args, raw[:400])
        shards = c.cmd("CLUSTER", "SHARDS")
    for shard in shards:
        for node in dict(zip(shard[0::2], shard[1::2]))[b"nodes"]:
            d = dict(zip(node[0::2], node[1::2]))
            assert b"port" not in d and d[b"tls-port"] == ports[d[b"id"].decode()], d
    for node_id, port in ports.items():
        with p.conn(port) as c:
            assert c.cmd("CLUSTER", "MYID").decode() == node_id


def test_redis_py_cluster_over_tls(tls_cluster, certs, tproxy):
    """RedisCluster(ssl=True) on the entry port: 6 nodes at 127.0.0.1 on proxy
    ports; 200 SET/GET, each key found on its real owner (plain port)."""
    p = tproxy(tls_cluster, certs)
    ports = p.node_ports()
    rc = p.rcluster()
    try:
        assert sorted(n.port for n in rc.get_nodes()) == sorted(ports.values())
        keys = ["tlspy:%d" % i for i in range(200)]
        for k in keys:
            assert rc.set(k, k + "-v") is True
        for k in keys:
            assert rc.get(k) == (k + "-v").encode()
    finally:
        rc.close()
    found = 0
    for n in tls_cluster.primaries():
        with Conn(n["port"]) as d:
            found += sum(1 for k in keys if d.cmd("GET", k) == (k + "-v").encode())
    assert found == len(keys)


def test_redis_benchmark_cluster_tls(tls_cluster, certs, tproxy):
    """redis-benchmark --cluster --tls through the entry port: exit 0, SET
    and GET lines, no real port in its output."""
    p = tproxy(tls_cluster, certs)
    p.node_ports()
    r = subprocess.run(["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(p.port)]
                       + cli_tls(certs) + ["-t", "set,get", "-n", "20000", "-q"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=slow(90))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert re.search(r"^SET: [\d.]+ requests per second", out, re.M), out[-3000:]
    assert re.search(r"^GET: [\d.]+ requests per second", out, re.M), out[-3000:]
    assert not real_ports_in(out, all_real_ports(tls_cluster)), out[-2000:]


def test_nodes_verified_by_their_host_names(tmp_path, certs, tproxy):
    """Nodes announcing host names, each with a certificate for that name
    only: ttlguard verifies (and sends as SNI) each node's own name, so
    RedisCluster(ssl) works through every node port; ttlguard audit
    --cluster over TLS walks the three primaries the same way."""
    cluster = TlsCluster(tmp_path / "hn", certs, hostnames=True).start()
    try:
        # The seed is verified by backend_tls_server_name (as a managed
        # service's configuration endpoint is by its name); the nodes the
        # topology then names, by their own host names.
        p = tproxy(cluster, certs, seeds=1, conf={"backend_tls_server_name": cluster.names[
                   cluster.ports[0]]}, sections='[ttl "hn:"]\nttl = 600\naction = rewrite\n')
        ports = p.node_ports()
        rc = p.rcluster()
        try:
            for i in range(100):
                assert rc.set("hn:%d" % i, "v") is True
            for i in range(100):
                assert rc.get("hn:%d" % i) == b"v"
                assert 590 <= rc.ttl("hn:%d" % i) <= 600
        finally:
            rc.close()
        for node_id, port in ports.items():
            with p.conn(port) as c:
                assert c.cmd("CLUSTER", "MYID").decode() == node_id
        for prim in cluster.primaries():
            k = cluster.key_for_slot_owner(prim, prefix="hn:leak:")
            assert cluster.cmd(prim["port"], "SET", k, "v") == b"OK"
        r = subprocess.run([harness.TTLG_BIN, "audit", "--config", p.config_path, "--cluster",
                            "--json"], capture_output=True, text=True, timeout=slow(60))
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        assert '"leaked": 3' in r.stdout.replace('"leaked":3', '"leaked": 3'), r.stdout[-2000:]
    finally:
        cluster.stop()


def test_failover_over_tls(tmp_path, certs, tproxy):
    """A RedisCluster(ssl) client loop on the entry port while CLUSTER
    FAILOVER is sent straight to a replica: no client error, and keys of
    the failed-over shard work afterwards."""
    cluster = TlsCluster(tmp_path / "fo", certs).start()
    try:
        p = tproxy(cluster, certs)
        p.node_ports()
        old = cluster.primaries()[0]
        new = cluster.replicas_of(old["id"])[0]
        keys = ["tfo:%d" % i for i in range(30)]
        old_keys = cluster.keys_for_slot_owner(old, 5, prefix="tfo:o:")
        loop = ClientLoop(p.port, keys + old_keys, ssl=True, ssl_ca_certs=certs.ca.cert)
        loop.start()
        try:
            wait_for(lambda: loop.ops > 200 or loop.fatal, 10, "the client loop running")
            assert cluster.cmd(new["port"], "CLUSTER", "FAILOVER") == b"OK"
            wait_for(lambda: "master" in cluster.node_by_id(new["id"], new["port"])["flags"],
                     15, "the replica promoted")
            cluster.wait_stable()
            done = time.monotonic()
            wait_for(lambda: all(loop.last_ok.get(k, 0) > done for k in old_keys) or loop.fatal,
                     15, "the failed-over shard's keys written after it")
        finally:
            loop.finish()
        print("TLS failover: %d ops, errors %r" % (loop.ops, dict(loop.errors)))
        assert not loop.errors, dict(loop.errors)
    finally:
        cluster.stop()


def test_sighup_reloads_the_node_ports_certificate(tls_cluster, certs, tproxy):
    """tls_cert_file changed to server_b and SIGHUP: a new TLS connection to
    a node port is served the new certificate."""
    p = tproxy(tls_cluster, certs)
    ports = p.node_ports()
    port = sorted(ports.values())[1]
    with p.conn(port) as c:
        assert c.peer_serial() == certs.serial["server"]
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace(certs.server.cert, certs.server_b.cert)
                    .replace(certs.server.key, certs.server_b.key))
    p.send_signal(signal.SIGHUP)

    def served():
        with p.conn(port) as c:
            return c.peer_serial() == certs.serial["server_b"]
    wait_for(served, 10, "the new certificate on a node port")
