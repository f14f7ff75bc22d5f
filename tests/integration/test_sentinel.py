"""
Sentinel: ttlguard in front of a primary that three real Sentinels manage
(a primary, two replicas). Start-up errors name the Sentinel; a failover
(SENTINEL FAILOVER, a killed primary) under load is followed, and what
clients saw through ttlguard is compared with the same clients talking to
the servers through redis-py's Sentinel client. The measured times are
printed (pytest -s) and written to $TTLG_SENTINEL_REPORT when set.
"""

import json
import os
import subprocess
import threading
import time
import urllib.request

import pytest

import harness
from harness import Conn, RedisServer, enc, slow, wait_for

redis = pytest.importorskip("redis")
from redis.sentinel import Sentinel  # noqa: E402

MASTER = "mymaster"


class SentinelProc:
    """redis-server --sentinel on a free loopback port, killed by PID."""

    def __init__(self, tmpdir, primary_port):
        self.port = harness.free_port()
        self.dir = os.path.join(str(tmpdir), "sentinel-%d" % self.port)
        os.makedirs(self.dir, exist_ok=True)
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s/log\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel down-after-milliseconds %s 1000\n"
                    "sentinel failover-timeout %s 10000\n"
                    "sentinel parallel-syncs %s 1\n"
                    % (self.port, self.dir, self.dir, MASTER, primary_port, MASTER, MASTER,
                       MASTER))
        self.proc = subprocess.Popen([harness.SERVER_BIN, self.conf, "--sentinel"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_for(lambda: harness._ping_ok(self.port, expect=None), slow(10),
                 "sentinel on %d" % self.port)

    def cmd(self, *args):
        with Conn(self.port) as c:
            return c.cmd(*args)

    def stop(self):
        if self.proc is not None:
            harness._kill_hard(self.proc)
            self.proc = None


class Topology:
    def __init__(self, tmp_path):
        self.primary = RedisServer(tmp_path, name="primary").start()
        self.replicas = [RedisServer(tmp_path, name="replica",
                                     extra_args=["--replicaof", "127.0.0.1",
                                                 str(self.primary.port)]).start()
                         for _ in range(2)]
        self.servers = [self.primary] + self.replicas
        self.sentinels = [SentinelProc(tmp_path, self.primary.port) for _ in range(3)]
        for s in self.sentinels:
            wait_for(lambda: len(s.cmd("SENTINEL", "replicas", MASTER)) == 2 and
                     len(s.cmd("SENTINEL", "sentinels", MASTER)) == 2, slow(30),
                     "sentinel %d sees the replicas and the other Sentinels" % s.port)

    def addrs(self):
        return " ".join("127.0.0.1:%d" % s.port for s in self.sentinels)

    def master_port(self):
        return int(self.sentinels[0].cmd("SENTINEL", "get-master-addr-by-name", MASTER)[1])

    def server(self, port):
        return next(s for s in self.servers if s.port == port)

    def stop(self):
        for s in self.sentinels:
            s.stop()
        for s in self.servers:
            s.stop()


@pytest.fixture
def topo(tmp_path):
    harness.need_binary()
    t = Topology(tmp_path)
    yield t
    t.stop()


def proxy_for(tmp_path, topo, extra=""):
    """A ttlguard whose backend is the Sentinels' master (its config
    written here: no backend key)."""
    p = harness.Ttlguard(tmp_path, 0)
    admin = harness.free_port()
    p.admin_port = admin
    with open(p.config_path, "w") as f:
        f.write("[proxy]\nlisten = 127.0.0.1:%d\nsentinel = %s\nsentinel_master = %s\n"
                "admin = 127.0.0.1:%d\nevents = %s/events.jsonl\n%s"
                % (p.port, topo.addrs(), MASTER, admin, p.dir, extra))
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


class Load:
    """Client threads: SET then GET of their own key, checking the reply.
    make() returns a redis-py client; errors reconnect (redis-py does)."""

    def __init__(self, tag, make, n=4):
        self.tag, self.make, self.stop_ev = tag, make, threading.Event()
        self.ok, self.errors, self.wrong = 0, {}, 0
        self.oks = []               # monotonic time of every success
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, i):
        c = self.make()
        n = 0
        while not self.stop_ev.is_set():
            n += 1
            key, val = "load:%s:%d" % (self.tag, i), str(n)
            try:
                c.set(key, val)
                got = c.get(key)
                with self.lock:
                    if got != val.encode():
                        self.wrong += 1
                    else:
                        self.ok += 1
                        self.oks.append(time.monotonic())
            except Exception as e:     # noqa: BLE001: any client error is counted
                name = type(e).__name__ + (": " + str(e).split(" ")[0] if str(e) else "")
                with self.lock:
                    self.errors[name] = self.errors.get(name, 0) + 1
                time.sleep(0.01)

    def finish(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)

    def first_ok_after(self, t0):
        with self.lock:
            return min((t for t in self.oks if t > t0), default=None)

    def summary(self):
        return {"ok": self.ok, "wrong": self.wrong, "errors": self.errors}


def switch_watcher(sentinel):
    """A thread recording when +switch-master reaches a subscriber."""
    got = {}

    def run():
        with Conn(sentinel.port, timeout=60) as c:
            c.cmd("SUBSCRIBE", "+switch-master")
            msg = c.reply(timeout=60)
            got["at"] = time.monotonic()
            got["msg"] = msg
    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.2)
    return got


@pytest.mark.parametrize("how", ["failover", "kill"])
def test_failover_under_load(tmp_path, topo, how):
    p = proxy_for(tmp_path, topo).start()
    old = topo.master_port()
    sent = Sentinel([("127.0.0.1", s.port) for s in topo.sentinels], socket_timeout=2)
    through = Load("through", lambda: redis.Redis(port=p.port, socket_timeout=2,
                                       retry_on_timeout=False))
    direct = Load("direct", lambda: sent.master_for(MASTER, socket_timeout=2))
    try:
        time.sleep(1.0)
        got = switch_watcher(topo.sentinels[1])
        t_start = time.monotonic()
        if how == "failover":
            assert topo.sentinels[0].cmd("SENTINEL", "FAILOVER", MASTER) == b"OK"
        else:
            topo.server(old).stop()
        wait_for(lambda: "at" in got, slow(60), "+switch-master")
        wait_for(lambda: events(p, "sentinel_switch"), slow(10), "ttlguard's switch event")
        t_sw = got["at"]
        time.sleep(3.0)
    finally:
        through.finish()
        direct.finish()
    new = topo.master_port()
    assert new != old
    ev = events(p, "sentinel_switch")[-1]
    assert ev["to"] == "127.0.0.1:%d" % new and ev["from"] == "127.0.0.1:%d" % old
    first_through, first_direct = through.first_ok_after(t_sw), direct.first_ok_after(t_sw)
    assert first_through is not None, through.summary()
    m = admin_get(p, "/metrics")
    assert "ttlguard_sentinel_switches_total 1" in m
    with Conn(p.port) as c:
        assert c.cmd("ROLE")[0] == b"master"
        assert c.cmd("SET", "after", "1") == b"OK"
    report = {
        "how": how,
        "kill_or_failover_to_switch_s": round(t_sw - t_start, 3),
        "ttlguard_follow_ms": ev["follow_ms"],
        "switch_to_first_reply_through_ttlguard_s": round(first_through - t_sw, 3),
        "switch_to_first_reply_direct_sentinel_s":
            None if first_direct is None else round(first_direct - t_sw, 3),
        "through_ttlguard": through.summary(),
        "direct_via_sentinel": direct.summary(),
    }
    print("\nSENTINEL REPORT " + json.dumps(report))
    if os.environ.get("TTLG_SENTINEL_REPORT"):
        with open(os.environ["TTLG_SENTINEL_REPORT"], "a") as f:
            f.write(json.dumps(report) + "\n")
    assert through.wrong == 0 and direct.wrong == 0, report
    assert ev["follow_ms"] < 1000, report
    assert first_through - t_sw < 1.0, report
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
