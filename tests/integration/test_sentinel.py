"""
Sentinel: ttlguard in front of a primary that three real Sentinels manage
(a primary, two replicas; the Sentinels are the server binary of the pass in
its --sentinel mode). Start-up errors name the Sentinel; a -READONLY from the
primary makes ttlguard ask again at once; a failover (SENTINEL FAILOVER, a
killed primary) under redis-benchmark load is followed, and what checking
clients saw through ttlguard is compared with the same clients using
redis-py's Sentinel client. The figures are printed (pytest -s) and
appended to $TTLG_SENTINEL_REPORT when set.

TLS (test_tls_*): the same topology on TLS only (port 0, tls-port,
tls-replication yes; certificates from tls_util.make_certs), ttlguard on
tls_listen with backend_tls and sentinel_tls; a SENTINEL FAILOVER under
checking clients on its TLS listener.
"""

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request

import pytest

import harness
from harness import Conn, RedisServer, slow, wait_for
from tls_util import (TlsConn, TlsRedis, TlsTtlguard, client_context, make_certs,
                      require_server_tls, tls_ping_ok)

redis = pytest.importorskip("redis")
from redis.sentinel import Sentinel  # noqa: E402

MASTER = "mymaster"
# Replicas resynchronise at once: no delay before a diskless transfer.
REPL_ARGS = ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]


def connect(port, certs=None):
    """A connection to a server or Sentinel: over TLS (trusting certs.ca,
    showing certs.client) when certs are given."""
    return TlsConn(port, client_context(certs.ca.cert, certs.client)) if certs else Conn(port)


def server_cmd(port, *args, certs=None):
    with connect(port, certs) as c:
        return c.cmd(*args)


def info_field(port, section, name, certs=None):
    for line in server_cmd(port, "INFO", section, certs=certs).decode().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1]
    return None


def field(pairs, name):
    """A field of a RESP2 flat list of names and values (SENTINEL replies)."""
    d = dict(zip(pairs[::2], pairs[1::2]))
    return d.get(name.encode())


def tls_lines(certs):
    """A server's or Sentinel's TLS settings (config file lines): it serves
    certs.server, and reaches the others over TLS (tls-replication: a
    replica its primary, a Sentinel the servers and the other Sentinels)."""
    return ("tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
            "tls-client-cert-file %s\ntls-client-key-file %s\n"
            "tls-auth-clients optional\ntls-replication yes\n"
            % (certs.server.cert, certs.server.key, certs.ca.cert, certs.client.cert,
               certs.client.key))


class SentinelProc:
    """The pass's server binary in --sentinel mode on a free loopback port,
    killed by PID. With certs: on TLS only (port 0, tls-port)."""

    def __init__(self, tmpdir, primary_port, certs=None):
        self.port, self.certs = harness.free_port(), certs
        self.dir = os.path.join(str(tmpdir), "sentinel-%d" % self.port)
        os.makedirs(self.dir, exist_ok=True)
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(("port 0\ntls-port %d\n%s" % (self.port, tls_lines(certs)) if certs
                     else "port %d\n" % self.port) +
                    "bind 127.0.0.1\ndir %s\nlogfile %s/log\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel down-after-milliseconds %s 1500\n"
                    "sentinel failover-timeout %s 5000\n"
                    "sentinel parallel-syncs %s 2\n"
                    % (self.dir, self.dir, MASTER, primary_port, MASTER, MASTER, MASTER))
        self.proc = subprocess.Popen([harness.SERVER_BIN, conf, "--sentinel"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        ctx = certs and client_context(certs.ca.cert, certs.client)
        wait_for(lambda: tls_ping_ok(self.port, ctx) if certs else
                 harness._ping_ok(self.port, expect=None), slow(10),
                 "sentinel on %d" % self.port)

    def cmd(self, *args):
        return server_cmd(self.port, *args, certs=self.certs)

    def ready(self):
        """It sees both replicas linked and the two other Sentinels."""
        reps = self.cmd("SENTINEL", "replicas", MASTER)
        return (len(reps) == 2 and len(self.cmd("SENTINEL", "sentinels", MASTER)) == 2 and
                all(field(r, "flags") == b"slave" and field(r, "master-link-status") == b"ok"
                    for r in reps))

    def stop(self):
        if self.proc is not None:
            harness._kill_hard(self.proc)
            self.proc = None


class Topology:
    """A primary, two replicas, three Sentinels; with certs, all on TLS only."""

    def __init__(self, tmp_path, certs=None):
        self.certs = certs

        def server(name, args=()):
            if certs is None:
                return RedisServer(tmp_path, name=name, extra_args=REPL_ARGS + list(args))
            return TlsRedis(tmp_path, certs, auth_clients="optional", name=name,
                            extra_args=REPL_ARGS + list(args) + [
                                "--tls-replication", "yes",
                                "--tls-client-cert-file", certs.client.cert,
                                "--tls-client-key-file", certs.client.key])
        self.primary = server("primary").start()
        self.replicas = [server("replica", ["--replicaof", "127.0.0.1",
                                            str(self.primary.port)]).start() for _ in range(2)]
        self.servers = [self.primary] + self.replicas
        self.sentinels = [SentinelProc(tmp_path, self.primary.port, certs) for _ in range(3)]
        for r in self.replicas:
            wait_for(lambda: info_field(r.port, "replication", "master_link_status",
                                        certs) == "up", slow(20), "replica %d linked" % r.port)
        for s in self.sentinels:
            wait_for(s.ready, slow(30), "sentinel %d sees the replicas linked and the other "
                     "Sentinels" % s.port)

    def addrs(self):
        return " ".join("127.0.0.1:%d" % s.port for s in self.sentinels)

    def master_port(self):
        return int(self.sentinels[0].cmd("SENTINEL", "get-master-addr-by-name", MASTER)[1])

    def server(self, port):
        return next(s for s in self.servers if s.port == port)

    def stop(self):
        for s in self.sentinels + self.servers:
            s.stop()


@pytest.fixture
def topo(tmp_path):
    harness.need_binary()
    t = Topology(tmp_path)
    yield t
    t.stop()


def proxy_for(tmp_path, topo):
    """A ttlguard whose backend is the Sentinels' master (no backend key),
    with the pass's TTLG_PROXY_CONF keys."""
    p = harness.Ttlguard(tmp_path, 0)
    p.admin_port = harness.free_port()
    extra = "".join("%s = %s\n" % (k.strip(), v.strip()) for k, v in harness.EXTRA_CONF.items())
    with open(p.config_path, "w") as f:
        f.write("[proxy]\nlisten = 127.0.0.1:%d\nsentinel = %s\nsentinel_master = %s\n"
                "admin = 127.0.0.1:%d\nevents = %s/events.jsonl\n%s"
                % (p.port, topo.addrs(), MASTER, p.admin_port, p.dir, extra))
    return p


def admin_get(p, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (p.admin_port, path),
                                timeout=5) as r:
        return r.read().decode()


def events(p, name):
    try:
        with open(os.path.join(p.dir, "events.jsonl")) as f:
            return [e for e in map(json.loads, f) if e.get("event") == name]
    except OSError:
        return []


def test_start_up_errors_name_the_sentinel(tmp_path, topo):
    s0 = "127.0.0.1:%d" % topo.sentinels[0].port
    p = proxy_for(tmp_path, topo)
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("sentinel_master = %s" % MASTER, "sentinel_master = nope"))
    r = subprocess.run(p.command(), capture_output=True, text=True, timeout=slow(20))
    assert r.returncode == 1
    assert "sentinel %s does not know a master named 'nope'" % s0 in r.stderr, r.stderr
    with open(p.config_path, "w") as f:
        f.write(text + "sentinel_password = wrong\n")
    r = subprocess.run(p.command(), capture_output=True, text=True, timeout=slow(20))
    assert r.returncode == 1
    assert "sentinel %s answered AUTH" % s0 in r.stderr, r.stderr


def test_serves_the_primary_and_reload_keeps_old_config(tmp_path, topo):
    p = proxy_for(tmp_path, topo).start()
    try:
        with Conn(p.port) as c:
            assert c.cmd("SET", "k", "v") == b"OK"
            assert c.cmd("ROLE")[0] == b"master"
        assert "ttlguard_sentinel_primary_info{master=\"mymaster\",primary=\"127.0.0.1:%d\"" \
            % topo.primary.port in admin_get(p, "/metrics")
        assert "sentinel: master mymaster is 127.0.0.1:%d" % topo.primary.port \
            in admin_get(p, "/healthz")
        with open(p.config_path, "a") as f:
            f.write("sentinel_password = wrong\n")
        p.send_signal(harness.signal.SIGHUP)
        wait_for(lambda: events(p, "config_rejected"), slow(10), "the reload refused")
        assert "answered AUTH" in events(p, "config_rejected")[0]["reason"]
        with Conn(p.port) as c:
            assert c.cmd("GET", "k") == b"v"
    finally:
        assert p.stop() == 0


def test_readonly_from_the_primary_asks_at_once(tmp_path, topo):
    """The primary turns replica behind the Sentinels' back (FAILOVER on
    the primary itself): the client gets the server's own -READONLY, and
    ttlguard asks again at once instead of at its next 5 s round."""
    p = proxy_for(tmp_path, topo).start()
    try:
        with Conn(p.port) as c:
            assert c.cmd("SET", "k", "v") == b"OK"
            target = topo.replicas[0].port
            assert server_cmd(topo.primary.port, "FAILOVER", "TO", "127.0.0.1", target) == b"OK"
            wait_for(lambda: server_cmd(topo.primary.port, "ROLE")[0] == b"slave", slow(10),
                     "the primary turned replica")
            direct = server_cmd(topo.primary.port, "SET", "k", "v2")
            got = c.cmd("SET", "k", "v2")
            t0 = time.monotonic()
            assert got == direct and got.startswith(b"READONLY"), (got, direct)
            wait_for(lambda: "does not answer ROLE as master" in admin_get(p, "/healthz"),
                     1.0, "the primary's ROLE asked again")
            assert time.monotonic() - t0 < 1.0
        assert "answered -READONLY: asking the Sentinels now" in p.stderr()
    finally:
        assert p.stop() == 0


class Load:
    """Checking clients: each thread appends to its own list and reads the
    last element back, on one redis-py client, as an application does. A
    reply is wrong when the element read is not the one just written, or
    when the length RPUSH returns is not one more than the last one with no
    error in between (the client was moved, silently, to a server that
    lacks its earlier writes). Errors are counted (redis-py reconnects at
    the next call). A thread of its own asks INFO server and records when
    each server (run_id) first answered."""

    def __init__(self, tag, make, n=3):
        self.tag, self.make, self.stop_ev = tag, make, threading.Event()
        self.ok, self.errors, self.wrong = 0, {}, 0
        self.oks, self.first_from = [], {}
        self.acked = {}             # key: the elements the server acknowledged
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]
        self.threads.append(threading.Thread(target=self.time_servers, daemon=True))
        for t in self.threads:
            t.start()

    def error(self, e):
        name = type(e).__name__ + (": " + str(e).split(" ")[0] if str(e) else "")
        with self.lock:
            self.errors[name] = self.errors.get(name, 0) + 1
        time.sleep(0.005)

    def run(self, i):
        c, n, key, length = self.make(), 0, "chk:%s:%d" % (self.tag, i), None
        self.acked[key] = []
        while not self.stop_ev.is_set():
            n += 1
            try:
                got_len = c.rpush(key, n)
                self.acked[key].append(n)
                got = c.lindex(key, -1)
            except Exception as e:     # noqa: BLE001: every client error is counted
                self.error(e)
                length = None
                continue
            with self.lock:
                if got != str(n).encode() or (length is not None and got_len != length + 1):
                    self.wrong += 1
                else:
                    self.ok += 1
                    self.oks.append(time.monotonic())
            length = got_len

    def time_servers(self):
        c = self.make()
        while not self.stop_ev.is_set():
            try:
                run_id = c.info("server")["run_id"]
            except Exception as e:     # noqa: BLE001
                self.error(e)
                continue
            self.first_from.setdefault(run_id, time.monotonic())
            time.sleep(0.002)

    def finish(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)

    def oks_after(self, t0):
        with self.lock:
            return sum(1 for t in self.oks if t > t0)

    def lost(self, port):
        """Acknowledged writes the server at port does not have."""
        r = redis.Redis(port=port)
        return sum(len(set(map(str, acked)) - set(x.decode() for x in r.lrange(k, 0, -1)))
                   for k, acked in self.acked.items())

    def summary(self):
        return {"ok": self.ok, "wrong": self.wrong, "errors": self.errors}


class Benchmark:
    """redis-benchmark through ttlguard until stopped; it exits when a
    connection breaks (as at a switch) and is started again."""

    def __init__(self, port):
        self.port, self.runs, self.stop_ev = port, 0, threading.Event()
        self.proc = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        exe = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
        while not self.stop_ev.is_set():
            self.runs += 1
            self.proc = subprocess.Popen([exe, "-p", str(self.port), "-c", "8", "-n", "200000",
                                          "-t", "set,get", "-r", "10000", "-q"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.proc.wait()
            time.sleep(0.05)

    def finish(self):
        self.stop_ev.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self.thread.join(10)


def switch_watcher(topo):
    """What the Sentinels publish: the earliest moment +promoted-slave and
    +switch-master reach a subscriber of any of them, and every primary
    change (old, new) in order (a loaded machine may see Sentinel fail over
    twice)."""
    got, lock = {"moves": []}, threading.Lock()

    def run(port):
        with Conn(port, timeout=60) as c:
            c.cmd("SUBSCRIBE", "+promoted-slave", "+switch-master")
            c.reply(timeout=10)
            while True:
                try:
                    channel, text = c.reply(timeout=60)[1:]
                except (EOFError, OSError):
                    return          # the Sentinel was stopped
                with lock:
                    got.setdefault(channel.decode(), time.monotonic())
                    if channel == b"+switch-master":
                        w = text.decode().split()
                        move = ("%s:%s" % (w[1], w[2]), "%s:%s" % (w[3], w[4]))
                        if move not in got["moves"]:
                            got["moves"].append(move)
    for s in topo.sentinels:
        threading.Thread(target=run, args=(s.port,), daemon=True).start()
    time.sleep(0.2)
    return got


def ttlguard_conns(port):
    """Clients of the server at port that are ttlguard's: not a Sentinel's,
    not a replica, not the direct checking clients, not this one."""
    lines = server_cmd(port, "CLIENT", "LIST", "TYPE", "normal").decode().splitlines()
    return [ln for ln in lines if " name=sentinel-" not in ln and " name=chk-direct" not in ln
            and "cmd=client" not in ln]


@pytest.mark.parametrize("how", ["failover", "kill"])
def test_failover_under_load(tmp_path, topo, how):
    p = proxy_for(tmp_path, topo).start()
    old = topo.master_port()
    run_ids = {s.port: info_field(s.port, "server", "run_id") for s in topo.servers}
    sent = Sentinel([("127.0.0.1", s.port) for s in topo.sentinels], socket_timeout=2)
    through = Load("through", lambda: redis.Redis(port=p.port, socket_timeout=2))
    direct = Load("direct", lambda: sent.master_for(MASTER, socket_timeout=2,
                                                    client_name="chk-direct"))
    bench = Benchmark(p.port)
    idle, sub = Conn(p.port), Conn(p.port)
    try:
        assert idle.cmd("SET", "idle", "1") == b"OK"
        assert sub.cmd("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        time.sleep(1.0)
        got = switch_watcher(topo)
        t_start = time.monotonic()
        if how == "failover":
            assert topo.sentinels[0].cmd("SENTINEL", "FAILOVER", MASTER) == b"OK"
        else:
            topo.server(old).stop()
        wait_for(lambda: "+switch-master" in got, slow(40), "+switch-master")
        wait_for(lambda: events(p, "sentinel_switch"), slow(10), "ttlguard's switch event")
        t_sw, t_pr = got["+switch-master"], got.get("+promoted-slave")
        if how == "failover":       # the old primary is up: ttlguard left it at once
            wait_for(lambda: not ttlguard_conns(old), 1.0, "ttlguard's connections to the "
                     "old primary closed")
        with pytest.raises((EOFError, OSError)):
            sub.reply(timeout=2)    # a subscriber is closed at once
        if how == "failover":       # an idle client is not closed under it (its
            with pytest.raises(TimeoutError):      # library would reconnect unseen)...
                idle.reply(timeout=0.3)
        with pytest.raises((EOFError, OSError)):
            idle.send(b"*1\r\n$4\r\nPING\r\n")    # ...its next request ends it,
            idle.reply(timeout=2)                   # unsent
        time.sleep(2.5)
        back = any(m[1] == "127.0.0.1:%d" % old for m in got["moves"])    # Sentinel chose it
        left = ttlguard_conns(old) if how == "failover" and not back else []
    finally:
        bench.finish()
        through.finish()
        direct.finish()
        idle.close()
        sub.close()
    # ttlguard followed every switch Sentinel made, in order, and no other
    # (none back to a primary a lagging Sentinel still names).
    moves = lambda: [(e["from"], e["to"]) for e in events(p, "sentinel_switch")]  # noqa: E731
    try:
        wait_for(lambda: moves() == got["moves"], 5, "ttlguard's switches to be Sentinel's")
    except AssertionError:
        pass
    assert moves() == got["moves"], (moves(), got["moves"])
    new, ev = topo.master_port(), events(p, "sentinel_switch")
    assert got["moves"][0][0] == "127.0.0.1:%d" % old
    assert got["moves"][-1][1] == "127.0.0.1:%d" % new
    first_new = int(ev[0]["to"].rsplit(":", 1)[1])
    first = {k: load.first_from.get(run_ids[first_new]) for k, load in
             (("through", through), ("direct", direct))}
    report = {
        "how": how, "server": os.path.basename(os.path.dirname(harness.SERVER_BIN)) or
        harness.SERVER_BIN, "switches": len(ev),
        "proxy_conf": os.environ.get("TTLG_PROXY_CONF", ""),
        "trigger_to_switch_master_s": round(t_sw - t_start, 3),
        "promoted_slave_to_switch_master_s": None if t_pr is None else round(t_sw - t_pr, 3),
        "ttlguard_source": ev[0]["source"], "ttlguard_follow_ms": ev[0]["follow_ms"],
        "switch_master_to_first_reply_from_new_primary_s": {
            k: None if v is None else round(v - t_sw, 3) for k, v in first.items()},
        "promoted_slave_to_first_reply_from_new_primary_s": {
            k: None if v is None or t_pr is None else round(v - t_pr, 3)
            for k, v in first.items()},
        "through_ttlguard": dict(through.summary(), lost_acked_writes=through.lost(new),
                                 oks_after_switch=through.oks_after(t_sw)),
        "direct_via_sentinel": dict(direct.summary(), lost_acked_writes=direct.lost(new),
                                    oks_after_switch=direct.oks_after(t_sw)),
        "benchmark_runs": bench.runs,
    }
    print("\nSENTINEL REPORT " + json.dumps(report))
    if os.environ.get("TTLG_SENTINEL_REPORT"):
        with open(os.environ["TTLG_SENTINEL_REPORT"], "a") as f:
            f.write(json.dumps(report) + "\n")
    assert through.wrong == 0, report
    assert left == [], (left, report)
    assert ev[0]["follow_ms"] < 1000, report
    assert first["through"] is not None and first["through"] - min(t_sw, t_pr or t_sw) < 1.0, \
        report
    assert through.oks_after(t_sw) > 0 and bench.runs >= 1, report
    assert "ttlguard_sentinel_switches_total %d" % len(ev) in admin_get(p, "/metrics")
    with Conn(p.port) as c:
        assert c.cmd("ROLE")[0] == b"master"
        assert c.cmd("SET", "after", "1") == b"OK"
    assert redis.Redis(port=new).get("after") == b"1"
    assert p.stop() == 0


def test_no_sentinel_answers_keeps_the_primary(tmp_path, topo):
    p = proxy_for(tmp_path, topo).start()
    try:
        for s in topo.sentinels:
            s.stop()
        wait_for(lambda: events(p, "sentinel_unreachable"), slow(15), "sentinel_unreachable")
        assert "no Sentinel answers: keeping primary 127.0.0.1:%d (ROLE master)" \
            % topo.primary.port in admin_get(p, "/healthz")
        assert "ttlguard_sentinel_reachable 0" in admin_get(p, "/metrics")
        with Conn(p.port) as c:
            assert c.cmd("SET", "still", "served") == b"OK"
    finally:
        assert p.stop() == 0


def test_a_sentinel_client_pointed_at_ttlguard(tmp_path, topo):
    """redis-py's Sentinel client given ttlguard as its only Sentinel is
    told the master is ttlguard itself, and works through it."""
    p = proxy_for(tmp_path, topo).start()
    try:
        with Conn(p.port) as c:
            assert c.cmd("SENTINEL", "get-master-addr-by-name", MASTER) == \
                [b"127.0.0.1", str(p.port).encode()]
            assert c.cmd("SENTINEL", "get-master-addr-by-name", "other") is None
            assert c.cmd("SENTINEL", "sentinels", MASTER) == []
            assert c.cmd("SENTINEL", "reset", "*").startswith(b"ERR ttlguard answers")
        s = Sentinel([("127.0.0.1", p.port)], socket_timeout=2)
        assert s.discover_master(MASTER) == ("127.0.0.1", p.port)
        m = s.master_for(MASTER, socket_timeout=2)
        assert m.set("via", "sentinel-client") and m.get("via") == b"sentinel-client"
        assert redis.Redis(port=topo.master_port()).get("via") == b"sentinel-client"
    finally:
        assert p.stop() == 0


# --------------------------------------------------------------------------
# TLS: the Sentinels, the primary and its replicas on TLS only
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("sentinel-certs")))


@pytest.fixture
def tls_topo(tmp_path, certs):
    harness.need_binary()
    require_server_tls(tmp_path, certs)
    t = Topology(tmp_path, certs)
    yield t
    t.stop()


def tls_proxy_for(tmp_path, topo, certs, **keys):
    """A ttlguard on tls_listen only, following topo's TLS Sentinels
    (sentinel_tls) to a TLS primary (backend_tls), showing certs.client to
    both; keys override."""
    conf = {"tls_listen": "127.0.0.1:%d" % harness.free_port(),
            "tls_cert_file": certs.server.cert, "tls_key_file": certs.server.key,
            "sentinel": topo.addrs(), "sentinel_master": MASTER, "sentinel_tls": "on",
            "backend_tls": "on", "backend_tls_ca_cert_file": certs.ca.cert,
            "backend_tls_cert_file": certs.client.cert, "backend_tls_key_file": certs.client.key,
            "events": "%s/events.jsonl" % tmp_path}
    conf.update(keys)
    p = TlsTtlguard(tmp_path, 0, certs, conf, plain=False)
    p.dir = str(tmp_path)           # where events() reads events.jsonl
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("backend = 127.0.0.1:0\n", ""))
    return p


def start_error(p):
    r = subprocess.run(p.command(), capture_output=True, text=True, timeout=slow(20))
    assert r.returncode == 1, r.stderr
    return r.stderr


def logs(topo, p):
    """The ends of the Sentinels' logs and of ttlguard's stderr, for a failure."""
    tails = []
    for s in topo.sentinels:
        with open(os.path.join(s.dir, "log"), errors="replace") as f:
            tails.append("---- sentinel %d\n%s" % (s.port, "".join(f.readlines()[-15:])))
    return "\n".join(tails) + "---- ttlguard\n" + p.stderr()[-3000:]


def ssl_kw(certs):
    return {"ssl": True, "ssl_ca_certs": certs.ca.cert, "ssl_certfile": certs.client.cert,
            "ssl_keyfile": certs.client.key, "ssl_cert_reqs": "required"}


def test_tls_failover(tmp_path, tls_topo, certs):
    """TLS Sentinels are not reached in plain TCP (sentinel_tls = off), a
    TLS primary's ROLE is not asked in plain TCP (backend_tls = off): both
    refused at start, naming what did not answer. With both on, a SENTINEL
    FAILOVER under checking clients on ttlguard's TLS listener: no wrong
    reply, ttlguard follows the switch, and as a Sentinel it names its TLS
    listener: by the name the client sent as SNI, else by address."""
    topo, old = tls_topo, tls_topo.master_port()
    err = start_error(tls_proxy_for(tmp_path, topo, certs, sentinel_tls="off"))
    assert "no Sentinel answered" in err and "sentinel_tls = off" in err, err
    err = start_error(tls_proxy_for(tmp_path, topo, certs, backend_tls="off"))
    assert "primary 127.0.0.1:%d" % old in err, err
    p = tls_proxy_for(tmp_path, topo, certs).start()
    kw = ssl_kw(certs)
    through = Load("tls", lambda: redis.Redis(port=p.tls_port, socket_timeout=2, **kw))
    try:
        time.sleep(0.5)
        assert topo.sentinels[0].cmd("SENTINEL", "FAILOVER", MASTER) == b"OK"
        try:
            wait_for(lambda: topo.master_port() != old, slow(40), "the Sentinels' new master",
                     interval=0.1)
            wait_for(lambda: events(p, "sentinel_switch"), slow(10), "ttlguard's switch event")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, logs(topo, p)))
        t_sw = time.monotonic()
        wait_for(lambda: through.oks_after(t_sw) > 50, slow(10), "replies after the switch")
    finally:
        through.finish()
    ev, new = events(p, "sentinel_switch"), topo.master_port()
    assert ev[0]["from"] == "127.0.0.1:%d" % old and ev[-1]["to"] == "127.0.0.1:%d" % new, ev
    assert through.wrong == 0 and ev[0]["follow_ms"] < 1000, (through.summary(), ev)
    with p.tls_conn() as c:
        assert c.cmd("ROLE")[0] == b"master"
        assert c.cmd("SET", "after", "1") == b"OK"
        # the name it was reached by (SNI): what the client verifies
        assert c.cmd("SENTINEL", "get-master-addr-by-name", MASTER) == \
            [b"localhost", str(p.tls_port).encode()]
    assert server_cmd(new, "GET", "after", certs=certs) == b"1"
    s = Sentinel([("127.0.0.1", p.tls_port)], sentinel_kwargs=kw, socket_timeout=2, **kw)
    assert s.discover_master(MASTER) == ("127.0.0.1", p.tls_port)
    assert s.master_for(MASTER, socket_timeout=2).get("after") == b"1"
    assert any("sentinel 127.0.0.1:%d: +" % x.port in p.stderr() for x in topo.sentinels), \
        "no failover event came on a TLS subscription"
    assert p.stop() == 0


def test_tls_config(tmp_path):
    """sentinel with backend_tls and sentinel_tls is a valid config;
    sentinel_tls without sentinel, or not on/off, is refused at its line."""
    harness.need_binary()
    path = os.path.join(str(tmp_path), "t.ini")

    def check(text):
        with open(path, "w") as f:
            f.write("[proxy]\nlisten = 127.0.0.1:%d\n%s" % (harness.free_port(), text))
        return subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                              capture_output=True, text=True, timeout=slow(10))
    r = check("sentinel = 127.0.0.1:1\nsentinel_master = m\nbackend_tls = on\nsentinel_tls = on\n")
    assert r.returncode == 0, r.stderr
    r = check("backend = 127.0.0.1:1\nsentinel_tls = on\n")
    assert r.returncode == 1 and "%s:4: sentinel_tls needs sentinel = HOST:PORT" % path \
        in r.stderr, r.stderr
    r = check("sentinel = 127.0.0.1:1\nsentinel_master = m\nsentinel_tls = yes please\n")
    assert r.returncode == 1 and "%s:5: sentinel_tls" % path in r.stderr, r.stderr
