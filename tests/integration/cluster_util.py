"""
Redis Cluster pieces for the integration suite (test_cluster.py): a real
6-node cluster (3 primaries, 3 replicas) of harness.SERVER_BIN processes on
free loopback ports, direct helpers that read its topology, and ttlguard in
cluster mode (one listener per node on a reserved port range).

  Cluster(tmpdir).start()   6 servers with --cluster-enabled yes, each in its
                            own directory; `redis-cli --cluster create ...
                            --cluster-replicas 1 --cluster-yes`; then waits
                            (bounded) until every node says cluster_state:ok,
                            knows all 6 nodes, agrees on the owner of every
                            slot, and every replica's link to its primary is
                            up. stop() kills every process by PID.
  cluster.nodes()           CLUSTER NODES of one real node, parsed
  cluster.primaries()       / replicas() / node_by_id() / owner_of_slot()
  cluster.keyslot(key)      CLUSTER KEYSLOT (direct)
  cluster.key_for_slot_owner(node)   "t:{tag}" whose slot lives on node
  reserve_port_range(n)     n consecutive free loopback ports outside the
                            kernel's ephemeral range (so that free_port()
                            users elsewhere do not race us for them)
  ClusterProxy              harness.Ttlguard with cluster = on, the seeds as
                            backend and a reserved cluster_ports range;
                            node_ports() maps real node id -> proxy port,
                            learnt through the proxy (CLUSTER NODES on the
                            entry port), checked with CLUSTER MYID.

Every wait is bounded (harness.wait_for / deadlines) and every process is
stopped by its PID.
"""

import os
import random
import re
import socket
import subprocess
import time

import harness
from harness import Conn, RedisServer, RespError, Ttlguard, slow, wait_for

NODE_TIMEOUT_MS = 2000
ANNOUNCE = "127.0.0.1"


def redis_cli(*args, timeout=60, check=True):
    """Run redis-cli with args; returns CompletedProcess (text)."""
    r = subprocess.run(["redis-cli"] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=slow(timeout))
    if check and r.returncode != 0:
        raise RuntimeError("redis-cli %s: exit %d\n%s%s" % (" ".join(map(str, args)),
                                                            r.returncode, r.stdout, r.stderr))
    return r


def parse_nodes(text):
    """CLUSTER NODES text -> list of dicts: id, host, port, cport, flags (set),
    master (id or None), slots (list of (lo, hi); importing/migrating markers
    are skipped), raw (the line)."""
    if isinstance(text, bytes):
        text = text.decode()
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split(" ")
        addr = f[1]
        m = re.match(r"^(.*):(\d+)@(\d+)(?:,.*)?$", addr)
        if m is None:
            raise ValueError("bad CLUSTER NODES address %r in %r" % (addr, line))
        slots = []
        for s in f[8:]:
            if s.startswith("["):
                continue
            if "-" in s:
                lo, hi = s.split("-")
                slots.append((int(lo), int(hi)))
            elif s:
                slots.append((int(s), int(s)))
        out.append({"id": f[0], "host": m.group(1), "port": int(m.group(2)),
                    "cport": int(m.group(3)), "flags": set(f[2].split(",")),
                    "master": None if f[3] == "-" else f[3], "slots": slots,
                    "link": f[7], "raw": line})
    return out


def slot_map_from_slots(reply):
    """CLUSTER SLOTS reply (RESP2 arrays) -> list of (lo, hi, primary port,
    [replica ports], primary id)."""
    out = []
    for entry in reply:
        lo, hi, primary = entry[0], entry[1], entry[2]
        replicas = [r[1] for r in entry[3:]]
        out.append((lo, hi, primary[1], replicas,
                    primary[2].decode() if len(primary) > 2 else None))
    return sorted(out)


def key_slot(key):
    """The hash slot of key (CRC16 of the hash tag), computed locally, as
    redis-py does; CLUSTER KEYSLOT agrees (checked by the tests)."""
    from redis.crc import key_slot as ks
    return ks(key.encode() if isinstance(key, str) else key)


def tags_for_slots(slots, prefix="", limit=2000000):
    """{slot: tag} with one tag per slot in slots, so that "x{tag}" hashes
    to slot: decimal tags counted from 0 (prefix + number)."""
    want = set(slots)
    out = {}
    for i in range(limit):
        tag = "%s%d" % (prefix, i)
        s = key_slot("{%s}" % tag)
        if s in want and s not in out:
            out[s] = tag
            if len(out) == len(want):
                return out
    raise AssertionError("no tags for %d of the slots" % (len(want) - len(out)))


def real_ports_in(data, ports):
    """The real node ports that occur in data (bytes or str) as a number of
    their own: not part of a longer run of letters and digits (node ids are
    hex, timestamps longer). Returns [(port, context)]."""
    if isinstance(data, str):
        data = data.encode()
    found = []
    for p in ports:
        for m in re.finditer(rb"(?<![0-9A-Za-z])%d(?![0-9A-Za-z])" % p, data):
            found.append((p, data[max(0, m.start() - 60):m.end() + 20]))
    return found


def strip_replication_offsets(raw):
    """CLUSTER SHARDS raw bytes without the replication-offset values (a
    number that could equal a port by chance)."""
    return re.sub(rb"replication-offset\r\n:\d+\r\n", b"replication-offset\r\n:?\r\n", raw)


class Cluster:
    """A 6-node Redis Cluster on free loopback ports (see module docstring)."""

    def __init__(self, tmpdir, n=6, replicas=1):
        self.tmpdir = str(tmpdir)
        self.n = n
        self.replicas_per_primary = replicas
        self.n_replicas = n - n // (replicas + 1)     # 6 nodes, 1 replica each: 3
        self.servers = []

    # -- lifecycle -----------------------------------------------------------

    def _new_server(self):
        port = harness.free_port()
        # The bus port explicitly: free ports come from the ephemeral range,
        # where port + 10000 (the default) may not exist.
        args = ["--cluster-enabled", "yes",
                "--cluster-config-file", "nodes-%d.conf" % port,
                "--cluster-port", str(harness.free_port()),
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                # replicas in sync at once, not after the 5 s default
                "--repl-diskless-sync-delay", "0"]
        srv = RedisServer(self.tmpdir, args, port=port, name="cluster")
        self.servers.append(srv)
        srv.start()
        return srv

    def start(self, timeout=60):
        try:
            for _ in range(self.n):
                self._new_server()
            redis_cli("--cluster", "create",
                      *["127.0.0.1:%d" % s.port for s in self.servers],
                      "--cluster-replicas", self.replicas_per_primary, "--cluster-yes",
                      timeout=timeout)
            self.wait_stable_roles(timeout)
            # One write per primary: a replication offset other than 0, which
            # Redis 7 requires before it lists a replica in CLUSTER SLOTS.
            for node in self.primaries():
                k = self.key_for_slot_owner(node, prefix="cluster-util:warmup:")
                # (-CLUSTERDOWN until the node has seen every slot covered)
                wait_for(lambda: self.cmd(node["port"], "SET", k, "1") == b"OK", timeout,
                         "a write accepted by %d" % node["port"], interval=0.05)
                assert self.cmd(node["port"], "DEL", k) == 1
            self.wait_stable(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def add_node(self, timeout=30):
        """A new empty primary: `redis-cli --cluster add-node`, then wait until
        the cluster is stable with it. Returns its CLUSTER NODES dict."""
        srv = self._new_server()
        self.n += 1
        redis_cli("--cluster", "add-node", "127.0.0.1:%d" % srv.port,
                  "127.0.0.1:%d" % self.ports[0], timeout=timeout)
        self.wait_stable(timeout)
        return self.node_by_port(srv.port)

    def cli_node(self, port):
        """redis-cli's options and address for the node on (real, plain)
        port: here none and its address; a TlsCluster's TLS options and TLS
        port (where the node speaks as the cluster does: MIGRATE goes over
        TLS with tls-cluster, so the ports redis-cli hands it must be TLS)."""
        return [], "127.0.0.1:%d" % port

    def reshard(self, from_id, to_id, nslots, via=None, timeout=60):
        """`redis-cli --cluster reshard` straight to the real nodes; returns
        the slots that moved (from_id's slots before minus after)."""
        before = self._slots_of(from_id)
        opts, addr = self.cli_node(via or self.ports[0])
        r = redis_cli(*opts, "--cluster", "reshard", addr,
                      "--cluster-from", from_id, "--cluster-to", to_id,
                      "--cluster-slots", nslots, "--cluster-yes", timeout=timeout)
        self.wait_stable(timeout)
        moved = before - self._slots_of(from_id)
        assert len(moved) == nslots, (len(moved), r.stdout[-2000:])
        return sorted(moved)

    def _slots_of(self, node_id):
        return {s for lo, hi in self.node_by_id(node_id)["slots"] for s in range(lo, hi + 1)}

    def stop(self):
        for s in self.servers:
            s.stop()

    @property
    def ports(self):
        """Real ports of all nodes."""
        return [s.port for s in self.servers]

    def server(self, port):
        return next(s for s in self.servers if s.port == port)

    def logs(self):
        return "\n".join("---- node %d ----\n%s" % (s.port, s.log()[-1500:])
                         for s in self.servers)

    # -- direct queries ------------------------------------------------------

    def cmd(self, port, *args, timeout=10.0):
        with Conn(port, timeout=timeout) as c:
            return c.cmd(*args)

    def info(self, port, section):
        text = self.cmd(port, "INFO", section) if section != "cluster" else \
            self.cmd(port, "CLUSTER", "INFO")
        return dict(line.split(":", 1) for line in text.decode().splitlines() if ":" in line)

    def nodes(self, port=None):
        """CLUSTER NODES of one real node (the first by default), parsed."""
        return parse_nodes(self.cmd(port or self.ports[0], "CLUSTER", "NODES"))

    def myid(self, port):
        return self.cmd(port, "CLUSTER", "MYID").decode()

    def node_by_id(self, node_id, port=None):
        return next(n for n in self.nodes(port) if n["id"] == node_id)

    def node_by_port(self, real_port, port=None):
        return next(n for n in self.nodes(port) if n["port"] == real_port)

    def primaries(self, port=None):
        """Primaries that own slots, sorted by their first slot."""
        ps = [n for n in self.nodes(port) if "master" in n["flags"] and n["slots"]
              and "fail" not in n["flags"]]
        return sorted(ps, key=lambda n: min(n["slots"]))

    def replicas(self, port=None):
        return [n for n in self.nodes(port) if "slave" in n["flags"]]

    def replicas_of(self, primary_id, port=None):
        return [n for n in self.replicas(port) if n["master"] == primary_id]

    def slots(self, port=None):
        """CLUSTER SLOTS of one real node (see slot_map_from_slots)."""
        return slot_map_from_slots(self.cmd(port or self.ports[0], "CLUSTER", "SLOTS"))

    def owner_of_slot(self, slot, port=None):
        """The primary (CLUSTER NODES dict) that owns slot, by CLUSTER SLOTS."""
        for lo, hi, pport, _, _ in self.slots(port):
            if lo <= slot <= hi:
                return self.node_by_port(pport, port)
        raise AssertionError("slot %d is not covered" % slot)

    def keyslot(self, key):
        return self.cmd(self.ports[0], "CLUSTER", "KEYSLOT", key)

    def keys_for_slot_owner(self, node, n=1, prefix="t:", start=0, exclude_slots=()):
        """n keys prefix{tag} (distinct slots) whose slots live on node (a
        CLUSTER NODES dict or a node id). Tags are decimal numbers counted
        from start, so results are reproducible."""
        node_id = node["id"] if isinstance(node, dict) else node
        owner = self.node_by_id(node_id)
        ranges = owner["slots"]
        out, seen = [], set(exclude_slots)
        with Conn(self.ports[0]) as c:
            for i in range(start, start + 20000):
                key = "%s{%d}" % (prefix, i)
                slot = c.cmd("CLUSTER", "KEYSLOT", key)
                if slot in seen:
                    continue
                if any(lo <= slot <= hi for lo, hi in ranges):
                    seen.add(slot)
                    out.append(key)
                    if len(out) == n:
                        return out
        raise AssertionError("no %d keys for node %s (slots %r)" % (n, node_id, ranges))

    def key_for_slot_owner(self, node, prefix="t:", start=0):
        """A key prefix{tag} whose slot lives on node (dict or id)."""
        return self.keys_for_slot_owner(node, 1, prefix, start)[0]

    # -- stability -----------------------------------------------------------

    def state(self):
        """None when the cluster is stable, else a sentence saying why not:
        every node cluster_state:ok, knows all nodes (none failing or in
        handshake), all nodes agree on the slot map, every replica's link up."""
        maps = set()
        for port in self.ports:
            try:
                inf = self.info(port, "cluster")
                if inf.get("cluster_state") != "ok":
                    return "node %d: cluster_state %s" % (port, inf.get("cluster_state"))
                nodes = parse_nodes(self.cmd(port, "CLUSTER", "NODES"))
                if len(nodes) != self.n:
                    return "node %d knows %d nodes" % (port, len(nodes))
                # redis-cli --cluster create returns before every node has
                # heard of every CLUSTER REPLICATE: count the replicas.
                owners = {nd["id"] for nd in nodes if "master" in nd["flags"] and nd["slots"]}
                reps = [nd for nd in nodes if "slave" in nd["flags"]]
                if len(reps) != self.n_replicas or any(r["master"] not in owners for r in reps):
                    return "node %d sees %d replicas (of %d), masters %r" % (
                        port, len(reps), self.n_replicas, [r["master"] for r in reps])
                for nd in nodes:
                    bad = nd["flags"] & {"fail", "fail?", "handshake", "noaddr"}
                    if bad or nd["link"] != "connected":
                        return "node %d sees %s as %s/%s" % (port, nd["port"], nd["flags"],
                                                             nd["link"])
                    if nd["port"] not in self.ports:
                        return "node %d: unknown node port %d" % (port, nd["port"])
                slot_map = self.slots(port)
                # Redis 7 leaves a replica out of CLUSTER SLOTS until it has
                # heard (by gossip) a replication offset other than 0.
                for lo, hi, pport, reps, pid in slot_map:
                    want = sum(1 for nd in nodes if nd["master"] == pid)
                    if len(reps) != want:
                        return "node %d: CLUSTER SLOTS lists %d of %d replicas of %d" % (
                            port, len(reps), want, pport)
                maps.add(tuple((lo, hi, p) for lo, hi, p, _, _ in slot_map))
                if "slave" in next(nd for nd in nodes if "myself" in nd["flags"])["flags"]:
                    repl = self.info(port, "replication")
                    if repl.get("master_link_status") != "up":
                        return "replica %d: master_link_status %s" % (
                            port, repl.get("master_link_status"))
            except (OSError, EOFError, TimeoutError, StopIteration, ValueError) as e:
                return "node %d: %r" % (port, e)
        if len(maps) != 1:
            return "nodes disagree on the slot map: %r" % (maps,)
        (m,) = maps
        covered = sum(hi - lo + 1 for lo, hi, _ in m)
        if covered != 16384:
            return "%d slots covered" % covered
        return None

    def wait_stable_roles(self, timeout=30):
        """Until the first node sees every replica as one (before any write:
        see start())."""
        wait_for(lambda: len(self.replicas()) == self.n_replicas
                 and len(self.primaries()) == self.n - self.n_replicas,
                 timeout, "every node's role known", interval=0.1)

    def wait_stable(self, timeout=30):
        last = ["?"]

        def ok():
            last[0] = self.state()
            return last[0] is None
        try:
            wait_for(ok, timeout, "a stable cluster", interval=0.1)
        except AssertionError:
            raise AssertionError("cluster not stable in %ss: %s\n%s"
                                 % (slow(timeout), last[0], self.logs()))


# --------------------------------------------------------------------------
# Port ranges for cluster_ports
# --------------------------------------------------------------------------

_ranges_given = []


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _listening(port):
    """True when something accepts on 127.0.0.1:port (a bind test alone
    does not see a listener on 0.0.0.0 with SO_REUSEADDR quirks)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def reserve_port_range(n=10):
    """(lo, hi): n consecutive loopback ports in 20000-29999 (below the
    kernel's ephemeral range, so bind-to-0 users do not take them), all
    bindable now, none handed out before by this process (free_port() or
    an earlier range)."""
    rnd = random.Random(os.getpid() ^ int(time.time() * 1000))
    for _ in range(200):
        lo = rnd.randrange(20000, 29990 - n)
        hi = lo + n - 1
        if any(not (hi < a or lo > b) for a, b in _ranges_given):
            continue
        ports = range(lo, hi + 1)
        if any(p in harness._ports_given for p in ports):
            continue
        if all(_bindable(p) and not _listening(p) for p in ports):
            _ranges_given.append((lo, hi))
            harness._ports_given.update(ports)
            return lo, hi
    raise RuntimeError("no free range of %d ports in 20000-29999" % n)


# --------------------------------------------------------------------------
# ttlguard in cluster mode
# --------------------------------------------------------------------------

class ClusterProxy(Ttlguard):
    """ttlguard with cluster = on: backend = the seed nodes, cluster_ports =
    a reserved range, cluster_announce = 127.0.0.1. port is the entry port.
    seed_ports: the backend list instead of the cluster's first `seeds`."""

    def __init__(self, tmpdir, cluster, conf=None, sections="", seeds=2, nports=10,
                 port_range=None, seed_ports=None, **kw):
        self.cluster = cluster
        self.range = port_range or reserve_port_range(nports)
        c = {"cluster": "on", "cluster_ports": "%d-%d" % self.range,
             "cluster_announce": ANNOUNCE}
        c.update(conf or {})
        seeds_addr = " ".join("127.0.0.1:%d" % p
                              for p in (seed_ports or cluster.ports[:seeds]))
        super().__init__(tmpdir, cluster.ports[0], c, sections=sections,
                         backend_addr=seeds_addr, **kw)

    def in_range(self, port):
        return self.range[0] <= port <= self.range[1]

    def conn(self, port=None):
        """A client connection to a node port (default: the entry port)."""
        return Conn(port or self.port)

    def node_ports(self, timeout=10):
        """{real node id: proxy port}, from CLUSTER NODES through the entry
        port; waits (bounded) until the proxy shows all nodes, each on its
        own port in the range."""
        last = [None]

        def ok():
            with self.conn() as c:
                r = c.cmd("CLUSTER", "NODES")
            if isinstance(r, RespError):
                last[0] = r
                return None
            nodes = parse_nodes(r)
            last[0] = r
            m = {nd["id"]: nd["port"] for nd in nodes}
            if len(m) != self.cluster.n or len(set(m.values())) != self.cluster.n:
                return None
            if not all(self.in_range(p) for p in m.values()):
                return None
            return m
        try:
            return wait_for(ok, timeout, "the proxy's CLUSTER NODES", interval=0.1)
        except AssertionError:
            raise AssertionError("CLUSTER NODES through the entry port %d never showed %d "
                                 "nodes on distinct ports in %r; last reply %r"
                                 % (self.port, self.cluster.n, self.range, last[0]))

    def port_of(self, node):
        """The proxy port of a node (dict, id or real port)."""
        if isinstance(node, int):
            node = self.cluster.node_by_port(node)
        node_id = node["id"] if isinstance(node, dict) else node
        return self.node_ports()[node_id]
