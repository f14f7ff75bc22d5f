#!/usr/bin/python3
"""
chaos: faults and load at the same time, through ttlguard.

    tests/chaos/chaos.py [--seconds 40] [--mode shared|own|both] [--checkers 8]
                         [--soak] [--json FILE]

For each connection mode (multiplex = on, "shared"; off, "own") it starts a
redis-server and a ttlguard with rewrite rules in front of it (the integration
harness's classes: TTLG_BIN, TTLG_REDIS_SERVER as there), and for --seconds runs
at once:

  - load: redis-benchmark SET/GET/INCR/LPUSH, -c 20 -P 16, restarted whenever a
    fault ends it;
  - checkers: clients that each write keys whose values name them and read
    them back in pipelines (SET, GET, INCR, ECHO): every reply must be their
    own -- a value of another client, or a GET that does not return what the
    SET before it wrote, is a reply delivered to the wrong client; an error
    (the backend down, OOM, LOADING) or a close is fine, a read that waits
    longer than 15 s is a hang;
  - vanishers: clients that connect, send part of a pipeline (cut inside a
    request) or all of it, and reset the connection without reading;
  - faults, one every 2 s in turn: the backend killed (SIGKILL) and started
    again, paused (SIGSTOP for 2.5 s, past connect_timeout, then SIGCONT),
    made to drop its clients (CLIENT KILL TYPE normal), to close idle ones
    (CONFIG SET timeout 1 for 2.5 s), and over maxmemory (set to half of what
    it uses, noeviction: OOM errors for 2.5 s).

--soak is the long run for a sanitizer build (TTLG_BIN from -DTTLG_SANITIZE=ON,
30 minutes or more, outside CI): no faults, but a config reload (SIGHUP) every
3 s and an event log reopen (SIGUSR1) every 5 s under the same load; RSS is
sampled every minute and must end within 8 MB of where it stood after the
first quarter of the run (flat), and ttlguard must exit 0 on SIGTERM (ASan's
leak check runs then; UBSan halts on its first error).

Afterwards ttlguard must still answer PING, have no more open descriptors than
at its baseline (+2: a shared connection may be open or not) and, but in a
soak, an RSS within 16 MB of it (ttlguard hands freed memory back to the
system every 10 s; a sanitizer's allocator does not). The
figures (faults injected, requests, replies checked, errors by kind,
reconnects, worst and final RSS, descriptors) go to stdout as a Markdown
table and, with --json, to a file. Every fault must have been injected (each
at least once in a run of 20 s or more; one that fails to inject fails the
run), and the checkers' replies in each fault's window may be errors only up
to a share: half under maxmemory (the writes), a tenth around the backend's
restart, 1 % otherwise (ERROR_SHARE).
Exit status 1 when anything above does not hold.
"""

import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import harness  # noqa: E402
from harness import Conn, RespError, enc  # noqa: E402

RULES = ('[ttl "key:"]\nttl = 600\naction = rewrite\n\n'
         '[ttl "counter:"]\nttl = 600\naction = rewrite\n\n'
         '[ttl "c:"]\nttl = 600\naction = rewrite\n')
HANG_S = 15.0
FAULT_EVERY = 2.0
# The share of the checkers' replies that may be errors in a fault's window
# (from its injection to the next fault): under maxmemory only the writes
# (SET and INCR, half of each pipeline) are refused; the backend's restart
# costs the replies of the moment it is down; nothing else may fail.
ERROR_SHARE = {"maxmemory reached": 0.5, "backend killed and restarted": 0.1}
ERROR_SHARE_DEFAULT = 0.01
ALL_FAULTS_S = 20.0     # every fault in turn: 2 s apart, three of them last 2.5 s
RSS_SLACK_KB = 16 * 1024
FD_SLACK = 2


class Tally:
    """Counters shared by the threads; `window` names the fault whose window
    the run is in (from its injection to the next one; "steady" before the
    first), for the error rate per fault."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = {}
        self.window = "steady"

    def add(self, name, k=1):
        with self.lock:
            self.n[name] = self.n.get(name, 0) + k

    def get(self, name):
        with self.lock:
            return self.n.get(name, 0)


def error_kind(reply):
    text = bytes(reply).decode(errors="replace")
    return "error " + (text.split(" ")[0] if not text.startswith("ERR ttlguard") else
                       "ERR ttlguard (backend unavailable)")


def count_errors(replies, tally):
    """Errors by kind, and replies and errors in the current fault window."""
    window = tally.window
    tally.add("window %s: replies" % window, len(replies))
    for r in replies:
        if isinstance(r, RespError):
            tally.add(error_kind(r))
            tally.add("window %s: errors" % window)


def check_round(i, seq, replies, tally):
    """One pipeline's replies; counts what was wrong."""
    set_r, get_r, incr_r, echo_r = replies
    count_errors(replies, tally)
    if not isinstance(echo_r, RespError) and echo_r != b"me:%d:%d" % (i, seq):
        tally.add("wrong replies")
    if isinstance(get_r, bytes) and not isinstance(get_r, RespError):
        mine = get_r.startswith(b"%d:" % i)
        if not mine or (set_r == b"OK" and get_r != b"%d:%d" % (i, seq)):
            tally.add("wrong replies")
    if not isinstance(incr_r, (int, RespError)):
        tally.add("wrong replies")
    tally.add("replies checked", 4)


def checker(i, port, stop, tally):
    conn, seq, got = None, 0, []
    while not stop.is_set():
        try:
            if conn is None:
                conn = Conn(port, timeout=HANG_S)
                tally.add("checker connects")
            seq += 1
            key = "c:chk:%d:%d" % (i, seq % 64)
            conn.send(enc("SET", key, "%d:%d" % (i, seq)) + enc("GET", key) +
                      enc("INCR", "c:ctr:%d" % i) + enc("ECHO", "me:%d:%d" % (i, seq)))
            got = []
            for _ in range(4):
                got.append(conn.reply())
            check_round(i, seq, got, tally)
        except TimeoutError:
            tally.add("hangs")
            conn.close()
            conn = None
        except (EOFError, OSError):
            count_errors(got, tally)        # what came before the close, e.g. "backend down"
            tally.add("checker closes")
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)
    if conn is not None:
        conn.close()


def vanisher(port, stop, tally, rng):
    pipeline = b"".join(enc("SET", "c:v:%d" % k, "x" * 100) + enc("GET", "c:v:%d" % k)
                        for k in range(20))
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(pipeline[:rng.randrange(1, len(pipeline) + 1)])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()                                   # RST, nothing read
            tally.add("vanished clients")
        except OSError:
            pass
        time.sleep(0.01)


def load(port, stop, tally):
    while not stop.is_set():
        p = subprocess.Popen(["redis-benchmark", "-p", str(port), "-t", "set,get,incr,lpush",
                              "-c", "20", "-P", "16", "-r", "10000", "-n", "2000000", "-q"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while p.poll() is None and not stop.is_set():
            time.sleep(0.1)
        if p.poll() is None:
            p.kill()
        p.wait()
        tally.add("benchmark runs")


def direct(redis, *args):
    with Conn(redis.port, timeout=5) as c:
        return c.cmd(*args)


def fault_kill(redis):
    redis.stop()
    time.sleep(0.3)
    redis.start()


def fault_pause(redis):
    os.kill(redis.pid, signal.SIGSTOP)
    time.sleep(2.5)
    os.kill(redis.pid, signal.SIGCONT)


def fault_client_kill(redis):
    direct(redis, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


def fault_timeout(redis):
    direct(redis, "CONFIG", "SET", "timeout", "1")
    time.sleep(2.5)
    direct(redis, "CONFIG", "SET", "timeout", "0")


def fault_maxmemory(redis):
    info = direct(redis, "INFO", "memory").decode()
    used = int(next(ln.split(":")[1] for ln in info.splitlines() if ln.startswith("used_memory:")))
    direct(redis, "CONFIG", "SET", "maxmemory-policy", "noeviction")
    direct(redis, "CONFIG", "SET", "maxmemory", str(used // 2))     # over it at once: OOM
    time.sleep(2.5)
    direct(redis, "CONFIG", "SET", "maxmemory", "0")


FAULTS = [("backend killed and restarted", fault_kill), ("backend paused", fault_pause),
          ("CLIENT KILL", fault_client_kill), ("idle timeout 1 s", fault_timeout),
          ("maxmemory reached", fault_maxmemory)]


def inject(k, redis, tally):
    """The k-th fault. From the main thread: the harness starts servers with
    PR_SET_PDEATHSIG, so one started by another thread dies with it."""
    name, fn = FAULTS[k % len(FAULTS)]
    tally.window = name
    try:
        fn(redis)
        tally.add("fault: " + name)
    except (OSError, EOFError, TimeoutError, RuntimeError) as e:
        tally.add("fault failed: %s (%s)" % (name, type(e).__name__))


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def settle_fds(pid, baseline, seconds=10):
    """Descriptors once the clients' connections are closed (they close
    asynchronously): the lowest count seen until it reaches the baseline."""
    low, end = fds(pid), time.monotonic() + seconds
    while time.monotonic() < end and low > baseline + FD_SLACK:
        time.sleep(0.2)
        low = min(low, fds(pid))
    return low


def alive(proxy):
    if proxy.proc is None or proxy.proc.poll() is not None:
        print("ttlguard exited: %s\n%s" % (proxy.proc and proxy.proc.returncode,
                                           proxy.stderr()[-3000:]), file=sys.stderr)
        return False
    last = None
    for _ in range(50):
        try:
            with Conn(proxy.port, timeout=3) as c:
                last = c.cmd("PING")
                if last == b"PONG":
                    return True
        except (OSError, EOFError, TimeoutError) as e:
            last = e
        time.sleep(0.1)
    print("ttlguard does not answer PING: %r" % (last,), file=sys.stderr)
    return False


def signals(proxy, now, last, tally):
    """--soak: SIGHUP every 3 s, SIGUSR1 every 5 s; last holds when."""
    for sig, every, name in ((signal.SIGHUP, 3, "reloads"), (signal.SIGUSR1, 5, "log reopens")):
        if now - last.get(sig, now - every) >= every:
            proxy.send_signal(sig)
            last[sig] = now
            tally.add(name)


def run_mode(mode, seconds, checkers, tmp, soak=False):
    tally, out = Tally(), {}
    redis = harness.RedisServer(tmp).start()
    conf = {"multiplex": "on" if mode == "shared" else "off", "connect_timeout": "1000"}
    if soak:
        conf["events"] = os.path.join(tmp, "events-%s.jsonl" % mode)
    proxy = harness.Ttlguard(tmp, redis.port, conf, sections=RULES)
    proxy.start()
    try:
        with Conn(proxy.port) as c:                     # warm up: the shared connection too
            for _ in range(3):
                c.cmd("SET", "c:warm", "1")
        time.sleep(1)
        base_fds, base_rss = fds(proxy.pid), harness.vmrss_kb(proxy.pid)
        stop, worst = threading.Event(), base_rss
        threads = [threading.Thread(target=checker, args=(i, proxy.port, stop, tally))
                   for i in range(checkers)]
        threads += [threading.Thread(target=vanisher, args=(proxy.port, stop, tally,
                                                            random.Random(k)))
                    for k in range(2)]
        threads.append(threading.Thread(target=load, args=(proxy.port, stop, tally)))
        for t in threads:
            t.start()
        start, k, sent, rss = time.monotonic(), 0, {}, []
        end, next_fault = start + seconds, start + FAULT_EVERY
        while time.monotonic() < end and proxy.proc.poll() is None:
            now = time.monotonic()
            worst = max(worst, harness.vmrss_kb(proxy.pid))
            if soak:
                signals(proxy, now, sent, tally)
                if not rss or now - rss[-1][0] >= 60:
                    rss.append((now, harness.vmrss_kb(proxy.pid)))
            elif now >= next_fault:
                inject(k, redis, tally)
                k += 1
                next_fault = time.monotonic() + FAULT_EVERY
            time.sleep(0.25)
        stop.set()
        for t in threads:
            t.join(HANG_S + 10)
        ok_alive = alive(proxy)
        out.update({"mode": mode, "seconds": seconds, "alive": ok_alive,
                    "baseline_fds": base_fds, "baseline_rss_kb": base_rss,
                    "worst_rss_kb": worst})
        if ok_alive:
            out["final_fds"] = settle_fds(proxy.pid, base_fds)
            time.sleep(11)                  # ttlguard hands freed memory back every 10 s
            out["final_rss_kb"] = harness.vmrss_kb(proxy.pid)
            out["worst_rss_kb"] = max(worst, out["final_rss_kb"])
        out["counts"] = dict(sorted(tally.n.items()))
        if soak:
            out["rss_kb_per_minute"] = [kb for _, kb in rss]
        return out
    finally:
        out["exit_status"] = proxy.stop()
        redis.stop()


def problems(r):
    out = []
    if not r["alive"]:
        out.append("ttlguard died or stopped answering")
    c = r["counts"]
    for bad in ("wrong replies", "hangs"):
        if c.get(bad):
            out.append("%d %s" % (c[bad], bad))
    if r.get("final_fds", 0) > r["baseline_fds"] + FD_SLACK:
        out.append("descriptors: %d after, %d at the baseline" % (r["final_fds"],
                                                                   r["baseline_fds"]))
    series = r.get("rss_kb_per_minute")
    # Back near the idle baseline after the load: the chaos run's check. The
    # soak runs a sanitizer build, whose allocator keeps what it once mapped
    # (and a quarantine): there RSS must stay flat under load instead.
    if series is None and r.get("final_rss_kb", 0) > r["baseline_rss_kb"] + RSS_SLACK_KB:
        out.append("RSS: %d kB after, %d kB at the baseline" % (r["final_rss_kb"],
                                                                r["baseline_rss_kb"]))
    if r.get("exit_status") != 0:
        out.append("exit status %s on SIGTERM (a sanitizer report?)" % r.get("exit_status"))
    if series is None:
        out += fault_problems(r)
    if series and len(series) >= 4 and series[-1] > series[len(series) // 4] + 8 * 1024:
        out.append("RSS grew: %s kB, minute by minute" % series)
    if c.get("replies checked", 0) == 0:
        out.append("no checker got a reply")
    return out


def fault_problems(r):
    """Every fault injected (each at least once in a run long enough for
    all), none failed to inject, and each window's errors within its share."""
    c, out = r["counts"], []
    out += ["%d× %s" % (n, k) for k, n in c.items() if k.startswith("fault failed")]
    if r["seconds"] >= ALL_FAULTS_S:
        out += ["fault never injected: %s" % name for name, _ in FAULTS
                if not c.get("fault: " + name)]
    elif not any(k.startswith("fault: ") for k in c):
        out.append("no fault was injected")
    for name in ["steady"] + [f for f, _ in FAULTS]:
        replies = c.get("window %s: replies" % name, 0)
        errors = c.get("window %s: errors" % name, 0)
        share = ERROR_SHARE.get(name, ERROR_SHARE_DEFAULT)
        if replies and errors > share * replies:
            out.append("%s: %d errors in %d replies, over %.0f%%" % (name, errors, replies,
                                                                     share * 100))
    if c.get("fault: maxmemory reached") and not c.get("error OOM"):
        out.append("maxmemory reached: injected, but no write was refused (OOM)")
    return out


def table(results):
    keys = sorted({k for r in results for k in r["counts"]})
    lines = ["| | " + " | ".join(r["mode"] for r in results) + " |",
             "|---|" + "---|" * len(results)]
    for k in keys:
        lines.append("| %s | %s |" % (k, " | ".join(str(r["counts"].get(k, 0)) for r in results)))
    for label, f in [("RSS baseline / worst / after (MB)",
                      lambda r: "%.1f / %.1f / %.1f" % (r["baseline_rss_kb"] / 1024,
                                                        r["worst_rss_kb"] / 1024,
                                                        r.get("final_rss_kb", 0) / 1024)),
                     ("descriptors baseline / after",
                      lambda r: "%d / %s" % (r["baseline_fds"], r.get("final_fds", "-"))),
                     ("ttlguard alive after", lambda r: "yes" if r["alive"] else "NO"),
                     ("exit status on SIGTERM", lambda r: str(r.get("exit_status")))]:
        lines.append("| %s | %s |" % (label, " | ".join(f(r) for r in results)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--mode", choices=["shared", "own", "both"], default="both")
    ap.add_argument("--checkers", type=int, default=8)
    ap.add_argument("--soak", action="store_true",
                    help="no faults; reloads and log reopens; RSS must stay flat")
    ap.add_argument("--json")
    args = ap.parse_args()
    modes = ["shared", "own"] if args.mode == "both" else [args.mode]
    results, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            r = run_mode(mode, args.seconds, args.checkers, tmp, args.soak)
            results.append(r)
            failed += ["%s: %s" % (mode, p) for p in problems(r)]
    print(table(results))
    for r in results:
        if r.get("rss_kb_per_minute"):
            print("\n%s: RSS (MB) each minute: %s" % (r["mode"], " ".join(
                "%.1f" % (kb / 1024) for kb in r["rss_kb_per_minute"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    for p in failed:
        print("FAIL " + p, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
