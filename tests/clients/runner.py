#!/usr/bin/python3
"""
Client compatibility check for ttlguard (issue 15 item 4): real client libraries
(ioredis, node-redis, python3-redis) against ttlguard and straight against Redis.
run.sh installs what is missing and calls this; see README.md.

  1. a redis-server and a ttlguard in front of it (rule [ttl "t:"] ttl = 900,
     action = rewrite);
  2. per library, its connect sequence recorded by a relay (Tap) in front of
     ttlguard and in front of Redis: the same commands, the same kinds of replies,
     and the commands the library is known to send (HELLO 3, CLIENT SETINFO, ...);
  3. every suite (ioredis_suite.js, node_redis_suite.js, python_redis_suite.py) in
     standalone mode twice: through ttlguard, then straight to Redis (FLUSHALL
     before each run);
  4. a 6-node Redis Cluster (3 primaries, 1 replica each) and a ttlguard with
     cluster = on in front of it; the suites' cluster clients get ttlguard's entry
     port as their only seed (and, for the direct run, a real node's port);
  4b. the same over TLS (mode cluster-tls): nodes with tls-cluster and
     tls-replication, ttlguard with backend_tls = on and tls_listen, the suites'
     cluster clients speaking TLS to both (certificates made by openssl in the
     temporary directory: tests/integration/tls_util.py); then, per library, a
     client loop writing and reading its own keys while a replica takes over its
     primary (CLUSTER FAILOVER), through ttlguard and straight to the cluster;
  5. per library, mode and check: both runs passed their own assertions, their
     `value`s are identical, and the TTLs in `ttl` are in the range the rule says
     for each target (only through ttlguard do the "t:" keys get or keep a TTL);
     a check's client `errors` (the failover's) are no more through ttlguard than
     straight to the cluster; the rewrites show up in ttlguard's event log; the
     ttlguards stay up and exit 0 on SIGTERM.

Prints one line per check and `N passed, M failed` last; exits 1 on any failure.
Everything listens on 127.0.0.1, on free ports of TTLG_CLIENTS_PORTS (default
7900-7999); every wait is bounded; every process started here is stopped by its
PID (and dies with this process: PR_SET_PDEATHSIG).

Environment: TTLG_BIN (default build/ttlguard of this tree), TTLG_CLIENTS_PORTS
(lo-hi), TTLG_CLIENTS_KEEP=1 (keep the temporary directory), TTLG_CLIENTS_ONLY
(comma-separated libraries: ioredis,node-redis,python3-redis), TTLG_CLIENTS_MODES
(standalone,cluster,cluster-tls), TTLG_CLIENTS_MULTIPLEX (on/off: ttlguard's
multiplex, default its own default, on).
"""

import ctypes
import itertools
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tls_util  # noqa: E402  (certificates and TLS options, shared with the integration tests)
TTLG_BIN = os.environ.get("TTLG_BIN") or os.path.join(ROOT, "build", "ttlguard")
PYTHON = "/usr/bin/python3"
NODE = shutil.which("node") or "node"
RULE = '[ttl "t:"]\nttl = 900\naction = rewrite\n'
SUITE_DEADLINE_MS = 40000

LIBS = [
    ("ioredis", [NODE, os.path.join(HERE, "ioredis_suite.js")]),
    ("node-redis", [NODE, os.path.join(HERE, "node_redis_suite.js")]),
    ("python3-redis", [PYTHON, os.path.join(HERE, "python_redis_suite.py")]),
]

T0 = time.monotonic()
results = []        # (ok, text)


def report(ok, name, detail=""):
    results.append(ok)
    line = "%s  %s" % ("ok  " if ok else "FAIL", name)
    if detail:
        line += "  " + detail
    print(line, flush=True)


def note(text):
    print("   # " + text, flush=True)


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


procs = []          # every process started here, stopped by PID at the end


class Proc:
    def __init__(self, name, argv, log, cwd=None):
        self.name = name
        self.log = log
        self.logf = open(log, "ab")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf,
                                  stderr=subprocess.STDOUT, cwd=cwd,
                                  preexec_fn=_die_with_parent)
        self.exit = None
        procs.append(self)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=5.0):
        """SIGTERM, a bounded wait, SIGKILL: the exit status, None if killed."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.exit = self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
                self.exit = None
        else:
            self.exit = self.p.returncode
        self.logf.close()
        return self.exit

    def tail(self, n=2000):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


def stop_all():
    for pr in reversed(procs):
        if pr.p.poll() is None:
            pr.stop()


# --------------------------------------------------------------------------
# ports, a tiny RESP client, waits
# --------------------------------------------------------------------------

def _port_range():
    spec = os.environ.get("TTLG_CLIENTS_PORTS", "7900-7999")
    lo, hi = spec.split("-")
    return int(lo), int(hi)


_given = set()


def _free(port):
    if port in _given:
        return False
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # as the servers bind (SO_REUSEADDR): a port in TIME_WAIT from an earlier run is free
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        return False
    finally:
        s.close()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return False
    except OSError:
        return True


_start = None


def free_port():
    """The next free port of the range, from a random start (other runs pick
    other starts), so that what is left stays in one piece."""
    global _start
    lo, hi = _port_range()
    if _start is None:
        _start = random.randrange(lo, hi + 1)
    cands = [lo + (_start - lo + i) % (hi - lo + 1) for i in range(hi - lo + 1)]
    for p in cands:
        if _free(p):
            _given.add(p)
            return p
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


def free_range(n):
    lo, hi = _port_range()
    starts = list(range(lo, hi - n + 2))
    random.shuffle(starts)
    for s in starts:
        if all(_free(p) for p in range(s, s + n)):
            _given.update(range(s, s + n))
            return s, s + n - 1
    raise RuntimeError("no %d consecutive free ports in %d-%d" % (n, lo, hi))


class RespError(Exception):
    pass


class Fatal(Exception):
    """Raised inside a wait_for() condition: stop waiting (a process died)."""


def _read_reply(f):
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest
    if t == b"-":
        return RespError(rest.decode(errors="replace"))
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if t == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [_read_reply(f) for _ in range(n)]
    raise ValueError("unexpected reply %r" % line)


def _connect(port, timeout, ctx):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if ctx is None:
        return s
    try:
        return ctx.wrap_socket(s, server_hostname="127.0.0.1")
    except BaseException:
        s.close()
        raise


def cmd(port, *args, timeout=3.0, ctx=None):
    """One command on a fresh connection to 127.0.0.1:port (RESP2); over TLS
    with the ssl.SSLContext ctx."""
    with _connect(port, timeout, ctx) as s:
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        with s.makefile("rb") as f:
            return _read_reply(f)


def wait_for(fn, timeout, what, interval=0.05):
    """Poll fn() until it returns a true value (returned); errors count as false.
    Raises RuntimeError with the last value or error after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = fn()
            if v:
                return v
            last = v
        except Fatal:
            raise
        except Exception as e:  # not up yet
            last = e
        if time.monotonic() >= deadline:
            raise RuntimeError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))
        time.sleep(interval)


# --------------------------------------------------------------------------
# servers
# --------------------------------------------------------------------------

def start_redis(tmp, name, extra=()):
    port = free_port()
    d = os.path.join(tmp, "%s-%d" % (name, port))
    os.makedirs(d)
    pr = Proc(name, ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--daemonize", "no",
                     "--dir", d, *extra], os.path.join(d, "redis.log"))
    pr.port = pr.redis_port = port
    def up():
        if not pr.alive():
            raise Fatal("redis-server exited %s at startup:\n%s" % (pr.p.returncode, pr.tail()))
        return cmd(port, "PING") == b"PONG"
    wait_for(up, 10, "redis-server on %d" % port)
    return pr


def start_ttlguard(tmp, name, proxy_keys, ctx=None):
    """ttlguard on a free port: `listen`, or `tls_listen` alone when ctx (the
    client's ssl.SSLContext) is given."""
    port = free_port()
    d = os.path.join(tmp, "%s-%d" % (name, port))
    os.makedirs(d)
    conf = os.path.join(d, "ttlguard.ini")
    events = os.path.join(d, "events.jsonl")
    # event_window = 1: folded counts are written a second after the first occurrence
    listen = ["tls_listen = 127.0.0.1:%d" % port, "listen ="] if ctx else ["listen = 127.0.0.1:%d" % port]
    lines = ["[proxy]"] + listen + ["events = %s" % events, "event_window = 1"]
    lines += ["%s = %s" % kv for kv in proxy_keys]
    if os.environ.get("TTLG_CLIENTS_MULTIPLEX"):
        lines.append("multiplex = %s" % os.environ["TTLG_CLIENTS_MULTIPLEX"])
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n" + RULE)
    pr = Proc(name, [TTLG_BIN, "--config", conf], os.path.join(d, "stderr.log"))
    pr.port, pr.events, pr.conf = port, events, conf

    def up():
        if not pr.alive():
            raise Fatal("ttlguard exited %s at startup:\n%s" % (pr.p.returncode, pr.tail()))
        return cmd(port, "PING", ctx=ctx) == b"PONG"
    wait_for(up, 10, "ttlguard %s answering PING on %d" % (name, port))
    return pr


def cluster_nodes(port):
    """CLUSTER NODES of one node, each line split at its spaces."""
    txt = cmd(port, "CLUSTER", "NODES").decode()
    return [ln.split(" ") for ln in txt.splitlines() if ln.strip()]


def node_port(fields):
    return int(fields[1].split(":")[1].split("@")[0])


def cluster_agrees(ports):
    """Every node says cluster_state:ok, sees every node connected and none
    failing, and all agree on the primaries and their slots."""
    owners = None
    for p in ports:
        if "cluster_state:ok" not in cmd(p, "CLUSTER", "INFO").decode():
            return False
        ns = cluster_nodes(p)
        if len(ns) != len(ports):
            return False
        for f in ns:
            if f[7] != "connected" or any(x in f[2] for x in ("fail", "handshake", "noaddr")):
                return False
        mine = sorted((f[0], tuple(f[8:])) for f in ns if "master" in f[2])
        if owners is None:
            owners = mine
        elif mine != owners:
            return False
    return True


def cluster_settled(ports):
    """cluster_agrees(), and every node's CLUSTER SLOTS covers all slots, each
    range with its replica, and every replica's link to its primary is up."""
    if not cluster_agrees(ports):
        return False
    for p in ports:
        sl = cmd(p, "CLUSTER", "SLOTS")
        if not isinstance(sl, list) or sum(e[1] - e[0] + 1 for e in sl) != 16384:
            return False
        if any(len(e) < 4 for e in sl):   # a range without its replica
            return False
    for f in cluster_nodes(ports[0]):
        if "slave" in f[2] and "master_link_status:up" not in \
                cmd(node_port(f), "INFO", "replication").decode():
            return False
    return True


def primaries_of(ports):
    """The real ports of the primaries, in the order of their first slot."""
    ns = [f for f in cluster_nodes(ports[0]) if "master" in f[2] and len(f) > 8]
    return [node_port(f) for f in sorted(ns, key=lambda f: int(f[8].split("-")[0]))]


def start_cluster(tmp, certs=None, n=6):
    """n nodes (n/2 primaries, one replica each), settled. With certs (tls_util's),
    every node also serves TLS on its tls_port, the bus and replication over TLS."""
    nodes = []
    for _ in range(n):
        extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-port", str(free_port()), "--cluster-node-timeout", "2000",
                 "--repl-diskless-sync-delay", "0"]
        tls_port = None
        if certs:
            tls_port = free_port()
            extra += tls_util.cluster_node_tls_args(certs, tls_port)
        nodes.append(start_redis(tmp, "cluster", extra))
        nodes[-1].tls_port = tls_port
    ports = [nd.port for nd in nodes]
    r = subprocess.run(["redis-cli", "--cluster", "create"] + ["127.0.0.1:%d" % p for p in ports]
                       + ["--cluster-replicas", "1", "--cluster-yes"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("redis-cli --cluster create: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    wait_for(lambda: cluster_agrees(ports), 60, "a stable cluster", interval=0.1)
    primaries = primaries_of(ports)
    # One write per primary: Redis 7 lists a replica in CLUSTER SLOTS only once its
    # replication offset is not 0.
    deadline = time.monotonic() + 30
    for p in primaries:
        i = 0
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError("no write accepted by primary %d in 30s" % p)
            k = "warmup:%d" % i
            r2 = cmd(p, "SET", k, "1")
            if r2 == b"OK":
                cmd(p, "DEL", k)
                break
            if isinstance(r2, RespError) and str(r2).startswith("MOVED"):
                i += 1          # another node's key: the next one
            else:
                time.sleep(0.05)  # -CLUSTERDOWN until every slot is seen covered
    wait_for(lambda: cluster_settled(ports), 30,
             "every slot range with its replica in CLUSTER SLOTS", interval=0.1)
    return nodes, primaries


def failover(ports, shard):
    """CLUSTER FAILOVER on the replica of the shard-th primary (in the order of
    their first slot); waits (bounded) until every node names it that shard's
    primary and the cluster is settled. Returns the seconds that took.
    Successive failovers should take turns over the shards: a replica that won
    an election less than 2 node timeouts ago wins its next manual failover on
    that election's votes, without a new config epoch (Redis 7.0), and is
    turned back into a replica at once."""
    t = time.monotonic()
    old = primaries_of(ports)[shard]
    ns = cluster_nodes(old)
    old_id = next(f[0] for f in ns if "myself" in f[2])
    new = next(node_port(f) for f in ns if f[3] == old_id)
    r = cmd(new, "CLUSTER", "FAILOVER")
    if r != b"OK":
        raise RuntimeError("CLUSTER FAILOVER on %d: %r" % (new, r))

    def done():
        return all(primaries_of([p])[shard] == new for p in ports) and cluster_settled(ports)
    wait_for(done, 30, "replica %d taking over from %d" % (new, old), interval=0.1)
    return time.monotonic() - t


def wait_cluster_proxy(pr, lo, hi, real_ports, ctx=None):
    def ready():
        sl = cmd(pr.port, "CLUSTER", "SLOTS", ctx=ctx)
        if not isinstance(sl, list) or sum(e[1] - e[0] + 1 for e in sl) != 16384:
            return False
        ports = set()
        for e in sl:
            if len(e) < 4:
                return False
            ports.update(x[1] for x in e[2:])
        if not all(lo <= p <= hi for p in ports) or ports & set(real_ports):
            return False
        return all(cmd(p, "PING", ctx=ctx) == b"PONG" for p in ports)
    wait_for(ready, 20, "ttlguard's CLUSTER SLOTS on its own ports, every listener up", interval=0.1)


# --------------------------------------------------------------------------
# the connect sequence: a recording relay in front of a target
# --------------------------------------------------------------------------

class Tap:
    """Listens on a free port, relays every connection to 127.0.0.1:target and
    records both directions: conns = [[client bytes, server bytes], ...] in the
    order they were accepted. Threads are daemons; close() ends it (bounded)."""

    def __init__(self, target):
        import threading
        self.threading = threading
        self.target = target
        self.port = free_port()
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", self.port))
        self.ls.listen(16)
        self.ls.settimeout(0.2)
        self.conns = []
        self.socks = []
        self.stopped = False
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except OSError:
                continue
            s = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            rec = [bytearray(), bytearray()]
            self.conns.append(rec)
            self.socks += [c, s]
            for src, dst, buf in ((c, s, rec[0]), (s, c, rec[1])):
                self.threading.Thread(target=self._pump, args=(src, dst, buf), daemon=True).start()

    def _pump(self, src, dst, buf):
        src.settimeout(30)
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.stopped = True
        self.t.join(2)
        self.ls.close()
        for x in self.socks:
            try:
                x.close()
            except OSError:
                pass


def parse_resp(buf):
    """All whole RESP2/RESP3 values in buf: [(type char, value)], value being bytes
    for strings and errors, a list for aggregates."""
    out, i = [], 0

    def one(i):
        t = buf[i:i + 1].decode()
        j = buf.index(b"\r\n", i)
        head = bytes(buf[i + 1:j])
        i = j + 2
        if t in "+-:,#_(":
            return (t, head), i
        if t in "$=!":
            n = int(head)
            if n < 0:
                return (t, None), i
            if len(buf) < i + n + 2:
                raise ValueError("incomplete")
            return (t, bytes(buf[i:i + n])), i + n + 2
        if t in "*~>%|":
            n = int(head)
            if n < 0:
                return (t, None), i
            items = []
            for _ in range(n * 2 if t in "%|" else n):
                v, i = one(i)
                items.append(v)
            return (t, items), i
        raise ValueError("bad type %r" % t)
    while i < len(buf):
        try:
            v, i = one(i)
        except ValueError:
            break
        out.append(v)
    return out


def _cmd_text(v):
    t, items = v
    args = [x[1].decode(errors="replace") if isinstance(x[1], bytes) else str(x[1]) for x in items or []]
    return " ".join(args)


def _reply_kind(v):
    t, val = v
    if t == "-":
        return "-" + val.split(b" ")[0].decode(errors="replace")
    return {"+": "simple", ":": "integer", "$": "bulk", "*": "array", "%": "map", "_": "null",
            ",": "double", "#": "boolean", "~": "set", ">": "push", "=": "verbatim"}.get(t, t)


# What each library's connect sequence must contain (the commands before its first
# PING), for its two connections: defaults; db 1 with a connection name.
HANDSHAKE_EXPECT = {
    "ioredis": (["CLIENT SETINFO LIB-VER", "CLIENT SETINFO LIB-NAME ioredis", "INFO"],
                ["CLIENT SETNAME compat-handshake", "CLIENT SETINFO LIB-VER",
                 "CLIENT SETINFO LIB-NAME ioredis", "SELECT 1"]),
    "node-redis": (["HELLO 3", "CLIENT SETINFO LIB-VER", "CLIENT SETINFO LIB-NAME node-redis"],
                   ["HELLO 3 SETNAME compat-handshake", "SELECT 1", "CLIENT SETINFO LIB-VER",
                    "CLIENT SETINFO LIB-NAME node-redis"]),
    "python3-redis": ([], ["CLIENT SETNAME compat-handshake", "SELECT 1"]),
}


def handshake_of(rec):
    """[(command, reply kind)] of one recorded connection, up to its first PING."""
    cmds = [_cmd_text(v) for v in parse_resp(rec[0])]
    replies = [_reply_kind(v) for v in parse_resp(rec[1])]
    seq = []
    for i, c in enumerate(cmds):
        if c.upper() == "PING":
            break
        seq.append((c, replies[i] if i < len(replies) else None))
    return seq


def check_handshake(tmp, lib, argv, proxy_port, redis_port):
    """The library's connect sequence through ttlguard and straight to Redis: the
    same commands, the same kinds of replies, the expected commands among them."""
    label = "%-13s %-11s connect-sequence" % (lib, "standalone")
    seqs = {}
    for tgt, port in (("proxy", proxy_port), ("direct", redis_port)):
        tap = Tap(port)
        try:
            recs, fatal, done = run_suite(tmp, lib, argv, {"mode": "handshake", "target": tgt,
                                                           "port": tap.port})
        finally:
            tap.close()
        bad = fatal + [r.get("error", "") for r in recs.values() if not r.get("ok")]
        if bad:
            report(False, label, "(%s) %s" % (tgt, _first_lines(bad[0])))
            return
        seqs[tgt] = [handshake_of(c) for c in tap.conns]
    probs = []
    if len(seqs["proxy"]) != 2 or len(seqs["direct"]) != 2:
        probs.append("connections: %d through ttlguard, %d direct (expected 2)"
                     % (len(seqs["proxy"]), len(seqs["direct"])))
    elif seqs["proxy"] != seqs["direct"]:
        probs.append("through ttlguard %s, straight to redis %s" % (seqs["proxy"], seqs["direct"]))
    else:
        for want, got in zip(HANDSHAKE_EXPECT[lib], seqs["proxy"]):
            cmds = [c for c, _ in got]
            missing = [w for w in want if not any(c.upper().startswith(w.upper()) for c in cmds)]
            if missing:
                probs.append("not sent: %s (sent: %s)" % (missing, cmds))
    if probs:
        report(False, label, "; ".join(probs))
    else:
        report(True, label, " || ".join(" | ".join("%s -> %s" % (c, r) for c, r in seq) or "(nothing)"
                                        for seq in seqs["proxy"]))


# --------------------------------------------------------------------------
# suites and comparison
# --------------------------------------------------------------------------

def _read_until(p, marker, timeout):
    """What the suite p prints on stdout up to and including the line with
    marker (all of it when it ends first), bounded by timeout. Unbuffered reads,
    so that communicate() goes on from there."""
    fd, data = p.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while marker not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


def run_suite(tmp, lib, argv, config, label=None, during=None):
    """Run one suite with config; label names its logs (default: config's mode).
    during: called once the suite prints {"running": true}, then the suite's
    stdin is closed (which tells it to finish); an exception from it is fatal."""
    name = "%s-%s-%s" % (lib, label or config["mode"], config["target"])
    config = dict(config, host="127.0.0.1", deadline_ms=SUITE_DEADLINE_MS)
    errlog = os.path.join(tmp, name + ".stderr")
    outlog = os.path.join(tmp, name + ".jsonl")
    fatal, head = [], b""
    with open(errlog, "wb") as ef:
        p = subprocess.Popen(argv + [json.dumps(config)],
                             stdin=subprocess.PIPE if during else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=ef, cwd=HERE,
                             preexec_fn=_die_with_parent)
        if during is not None:
            head = _read_until(p, b'"running"', SUITE_DEADLINE_MS / 2000)
            try:
                if b'"running"' not in head:
                    raise RuntimeError("the suite never said it was running")
                during()
            except Exception as e:
                fatal.append("while the suite ran: %s" % e)
        try:
            stdout, _ = p.communicate(timeout=SUITE_DEADLINE_MS / 1000 + 10)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, _ = p.communicate(timeout=5)
    stdout = head + stdout
    with open(outlog, "wb") as f:
        f.write(stdout)
    recs, done = {}, None
    for line in stdout.decode(errors="replace").splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            fatal.append("not JSON: " + line[:200])
            continue
        if "check" in o:
            recs[o["check"]] = o
        elif "fatal" in o:
            fatal.append(o["fatal"])
        elif o.get("done"):
            done = o
    if done is None:
        with open(errlog, errors="replace") as f:
            fatal.append("suite did not finish (exit %s); stderr: %s" % (p.returncode, f.read()[-1500:]))
    return recs, fatal, done


def first_diff(a, b, path="value"):
    """The first place where a and b differ, as text."""
    if type(a) != type(b):
        return "%s: %s vs %s" % (path, _short(a), _short(b))
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return "%s.%s: %s vs %s" % (path, k, _short(a.get(k)), _short(b.get(k)))
            d = first_diff(a[k], b[k], "%s.%s" % (path, k))
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        if len(a) != len(b):
            return "%s: length %d vs %d" % (path, len(a), len(b))
        return None
    return None if a == b else "%s: %s vs %s" % (path, _short(a), _short(b))


def _short(v, n=160):
    s = json.dumps(v)
    return s if len(s) <= n else s[:n] + "..."


def _first_lines(text, n=6):
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    # the assertion message is last in Python, first in node
    if lines and lines[0].startswith("Traceback"):
        return " | ".join(lines[-3:])
    return " | ".join(lines[:n])


def compare(lib, mode, proxy, direct):
    precs, pfatal, pdone = proxy
    drecs, dfatal, ddone = direct
    for tgt, fatal in (("proxy", pfatal), ("direct", dfatal)):
        for f in fatal:
            report(False, "%s %s suite (%s)" % (lib, mode, tgt), _first_lines(f))
    names = list(precs) + [n for n in drecs if n not in precs]
    for name in names:
        label = "%-13s %-11s %s" % (lib, mode, name)
        p, d = precs.get(name), drecs.get(name)
        if p is None or d is None:
            report(False, label, "missing through %s" % ("ttlguard" if p is None else "redis"))
            continue
        probs = []
        if not p["ok"]:
            probs.append("through ttlguard: " + _first_lines(p.get("error")))
        if not d["ok"]:
            probs.append("straight to redis: " + _first_lines(d.get("error")))
        if p["ok"] and d["ok"]:
            diff = first_diff(p.get("value"), d.get("value"))
            if diff:
                probs.append("ttlguard vs redis differ at " + diff)
            if "errors" in p and p["errors"] > d["errors"]:
                probs.append("client errors: %d through ttlguard, %d straight to redis"
                             % (p["errors"], d["errors"]))
            ttl_txt = []
            for k, exp in (p.get("expect_ttl") or {}).items():
                for tgt, rec in (("proxy", p), ("direct", d)):
                    got = (rec.get("ttl") or {}).get(k)
                    lo, hi = exp[tgt]
                    if got is None or not lo <= got <= hi:
                        probs.append("TTL of %s %s: %s, expected %d..%d"
                                     % (k, "through ttlguard" if tgt == "proxy" else "straight to redis",
                                        got, lo, hi))
                ttl_txt.append("%s %s/%s" % (k, p["ttl"].get(k), d["ttl"].get(k)))
        if probs:
            report(False, label, "; ".join(probs))
        else:
            detail = p.get("info") or ""
            if p.get("expect_ttl"):
                detail = "TTL ttlguard/redis: " + ", ".join(ttl_txt)
            if "errors" in p:
                detail = "ttlguard/redis: %s / %s; %s" % (p["info"], d["info"], detail)
            report(True, label, detail)
    return pdone


def new_events(pr, offset):
    try:
        with open(pr.events, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return []
    out = []
    for ln in data.splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass
    return out


def events_size(pr):
    try:
        return os.path.getsize(pr.events)
    except OSError:
        return 0


def check_events(label, pr, offset, want):
    """want: {command: n}: the proxy run must have caused exactly n rewrites of each
    command (violation events with action rewritten, folded counts summed: a line
    with `count` stands for that many, one without for 1)."""
    got = {}

    def tally():
        got.clear()
        for e in new_events(pr, offset):
            if e.get("event") == "violation" and e.get("action") == "rewritten":
                got[e.get("command")] = got.get(e.get("command"), 0) + e.get("count", 1)
        return got == want
    try:
        wait_for(tally, 4, "events", interval=0.1)
        report(True, label, "rewrites logged: " + ", ".join("%s %d" % kv for kv in sorted(want.items())))
    except RuntimeError:
        report(False, label, "rewrites in the event log %s, expected %s" % (got, want))


def flush(ports):
    for p in ports:
        r = cmd(p, "FLUSHALL")
        if r != b"OK":
            raise RuntimeError("FLUSHALL on %d: %r" % (p, r))


def selected(env, default):
    v = os.environ.get(env)
    return [x.strip() for x in v.split(",")] if v else default


def selected_libs():
    libs = selected("TTLG_CLIENTS_ONLY", [l for l, _ in LIBS])
    return [(lib, argv) for lib, argv in LIBS if lib in libs]


def run_mode(tmp, mode, proxy, direct_port, flush_ports, extra_cfg, want_events):
    """Every library's suite through ttlguard and direct; the suites are told
    extra_cfg's "mode" when it has one (cluster-tls runs the cluster suite),
    else mode."""
    versions = {}
    for lib, argv in selected_libs():
        if mode == "standalone":
            flush(flush_ports)
            check_handshake(tmp, lib, argv, proxy.port, direct_port)
        flush(flush_ports)
        off = events_size(proxy)
        cfg = dict({"mode": mode}, **extra_cfg)
        pres = run_suite(tmp, lib, argv, dict(cfg, target="proxy", port=proxy.port), mode)
        want = dict(want_events)
        if lib == "python3-redis" and "INCR" in want:   # redis-py sends INCR k as INCRBY k 1
            want["INCRBY"] = want.get("INCRBY", 0) + want.pop("INCR")
        check_events("%-13s %-11s events" % (lib, mode), proxy, off, want)
        flush(flush_ports)
        dres = run_suite(tmp, lib, argv, dict(cfg, target="direct", port=direct_port), mode)
        done = compare(lib, mode, pres, dres)
        if done:
            versions[lib] = done.get("version")
    return versions


def run_failovers(tmp, mode, proxy_port, direct_port, ports, extra_cfg):
    """Per library, the suite's failover loop through ttlguard, then direct,
    each while failover() moves a shard to its replica (the shards in turn)."""
    turn = itertools.cycle(range(len(ports) // 2))
    for lib, argv in selected_libs():
        res = {}
        for tgt, port in (("proxy", proxy_port), ("direct", direct_port)):
            took = []
            shard = next(turn)
            res[tgt] = run_suite(tmp, lib, argv, dict(extra_cfg, mode="failover", target=tgt, port=port),
                                 mode + "-failover",
                                 during=lambda: took.append(failover(ports, shard)))
            rec = res[tgt][0].get("cluster-failover")
            if rec and took:
                rec["info"] += ", failover %.1fs" % took[0]
        compare(lib, mode, res["proxy"], res["direct"])


def run_cluster(tmp, mode, crange, tls=False):
    """The cluster checks: a cluster of its own and a ttlguard in front of it
    (with tls: over TLS, certificates made in tmp, and the failover loops);
    stopped at the end. Returns the libraries' versions."""
    nodes, cprx, versions = [], None, {}
    try:
        t = time.monotonic()
        certs = tls_util.make_certs(os.path.join(tmp, "certs")) if tls else None
        ctx = tls_util.client_context(certs.ca.cert) if tls else None
        nodes, primaries = start_cluster(tmp, certs)
        real = [nd.port for nd in nodes]
        lo, hi = crange
        keys = [("cluster", "on"), ("cluster_ports", "%d-%d" % (lo, hi)),
                ("cluster_announce", "127.0.0.1")]
        seeds, direct, cfg = real[:2], primaries[0], {"cluster_ports": [lo, hi], "real_ports": real}
        if tls:
            tls_of = {nd.port: nd.tls_port for nd in nodes}
            seeds, direct = [tls_of[p] for p in seeds], tls_of[direct]
            keys += [("backend_tls", "on"), ("backend_tls_ca_cert_file", certs.ca.cert),
                     ("tls_cert_file", certs.server.cert), ("tls_key_file", certs.server.key)]
            cfg = {"mode": "cluster", "cluster_ports": [lo, hi], "tls_ca": certs.ca.cert,
                   "real_ports": real + list(tls_of.values())}
        keys.insert(0, ("backend", " ".join("127.0.0.1:%d" % p for p in seeds)))
        cprx = start_ttlguard(tmp, "ttlguard-" + mode, keys, ctx)
        wait_cluster_proxy(cprx, lo, hi, cfg["real_ports"], ctx)
        report(True, "setup " + mode, "6 nodes :%s, ttlguard entry :%d, cluster_ports %d-%d (%.1fs)"
               % (",".join(map(str, real)), cprx.port, lo, hi, time.monotonic() - t))
    except Exception as e:
        report(False, "setup " + mode, str(e))
    else:
        versions = run_mode(tmp, mode, cprx, direct, primaries, cfg, {"INCR": 30, "GETSET": 1})
        if tls:
            run_failovers(tmp, mode, cprx.port, direct, real, cfg)
        check_proxy_end("ttlguard " + mode, cprx)
    finally:
        for pr in [cprx] + nodes:
            if pr is not None:
                pr.stop()
    return versions


def check_proxy_end(label, pr):
    alive = pr.alive()
    rc = pr.stop()
    log = pr.tail(100000)
    bad = [ln for ln in log.splitlines() if " error:" in ln or " crit" in ln or "Sanitizer" in ln
           or "assert" in ln.lower()]
    if alive and rc == 0:
        report(True, label, "up to the end, exit 0 on SIGTERM" +
               ("; %d error lines in its log (first: %s)" % (len(bad), bad[0][:200]) if bad else ""))
    else:
        report(False, label, "%s, exit status %s; log tail:\n%s"
               % ("alive at the end" if alive else "DIED during the run", rc, log[-3000:]))


def main():
    tmp = tempfile.mkdtemp(prefix="ttlguard-clients.")
    modes = selected("TTLG_CLIENTS_MODES", ["standalone", "cluster", "cluster-tls"])
    versions = {}
    try:
        if not os.access(TTLG_BIN, os.X_OK):
            report(False, "setup", "ttlguard binary %s missing (build it or set TTLG_BIN)" % TTLG_BIN)
            return
        node_v = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        redis_v = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.split()[2].replace("v=", "redis-server ")
        note("ttlguard %s; node %s; %s; temp %s" % (TTLG_BIN, node_v, redis_v, tmp))

        # first, while the range is still in one piece
        cranges = {m: free_range(10) for m in ("cluster", "cluster-tls") if m in modes}
        if "standalone" in modes:
            try:
                red = start_redis(tmp, "redis")
                prx = start_ttlguard(tmp, "ttlguard", [("backend", "127.0.0.1:%d" % red.port)])
                report(True, "setup standalone", "redis :%d, ttlguard :%d" % (red.port, prx.port))
            except Exception as e:
                report(False, "setup standalone", str(e))
            else:
                versions.update(run_mode(tmp, "standalone", prx, red.port, [red.port], {},
                                         {"GETSET": 1, "INCR": 2, "SET": 2, "HSET": 1, "INCRBY": 1}))
                check_proxy_end("ttlguard standalone", prx)

        if "cluster" in modes:
            versions.update(run_cluster(tmp, "cluster", cranges["cluster"]))
        if "cluster-tls" in modes:
            versions.update(run_cluster(tmp, "cluster-tls", cranges["cluster-tls"], tls=True))
    finally:
        stop_all()
        failed = results.count(False)
        if versions:
            note("libraries: " + ", ".join("%s %s" % kv for kv in sorted(versions.items())))
        note("%.1fs" % (time.monotonic() - T0))
        if failed or os.environ.get("TTLG_CLIENTS_KEEP"):
            note("logs kept in " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        print("%d passed, %d failed" % (results.count(True), failed), flush=True)
    sys.exit(1 if results.count(False) or not results else 0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    main()
