"""
The admin endpoint (docs/metrics.md):

  - /metrics counters match a scripted workload exactly: connections,
    requests, forwarded / rewritten / rejected commands, bytes each way,
    violations by rule/effect/action, durable writes, latency histograms,
    events written; the text is valid Prometheus exposition;
  - /healthz: 200 while the backend answers PING, 503 with the reason when it
    is down, slow, or refuses the proxy's credentials; AUTH and ACL users;
  - /rules: the running rules as JSON, binary prefixes included;
  - HTTP: keep-alive, pipelining in order, HEAD, 404, 405, oversized and
    malformed requests; the endpoint follows `admin` across a reload.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

import harness
from harness import Conn, RespError, enc, wait_for

DURABLE = "owner = payments\nreason = ledger of record\nrebuild = replay from Postgres\n"


def durable(prefix):
    return '[durable "%s"]\n%s\n' % (prefix, DURABLE)


def ttl_rule(prefix, action, ttl=100, **extra):
    out = '[ttl "%s"]\nttl = %d\naction = %s\n' % (prefix, ttl, action)
    for k, v in extra.items():
        out += "%s = %s\n" % (k, v)
    return out + "\n"


SECTIONS = ttl_rule("rw:", "rewrite") + ttl_rule("rj:", "reject") + durable("du:")
EFFECTS = ["creates-without-ttl", "drops-ttl", "persist", "exceeds-max-ttl", "extends-ttl",
           "moves-without-ttl"]
ACTIONS = ["rewritten", "rejected", "logged"]
# The watcher's own pair.
WATCHER = ("found-without-ttl", "observed")


def get(port, path, method="GET", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=harness.slow(10))
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def unescape(v):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_metrics(text):
    """{(name, ((label, value), ...)): float}, checking the exposition format
    on the way: every sample belongs to a family with # TYPE before it."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            assert typ in ("counter", "gauge", "histogram"), line
            types[name] = typ
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
        assert m, "bad sample line %r" % line
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, "sample %r before its # TYPE" % line
        lab = tuple(sorted((k, unescape(v)) for k, v in LABEL_RE.findall(labels or "")))
        key = (name, lab)
        assert key not in samples, "duplicate sample %r" % line
        samples[key] = float(value)
    return samples


def scrape(port):
    status, headers, body = get(port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse_metrics(body.decode())


def value(m, name, **labels):
    return m[(name, tuple(sorted(labels.items())))]


def series(m, name):
    return {k[1]: v for k, v in m.items() if k[0] == name}


def proxy_with_admin(make_proxy, redis_srv, sections=SECTIONS, **conf):
    admin = harness.free_port()
    c = {"admin": "127.0.0.1:%d" % admin}
    c.update(conf)
    p = make_proxy(redis_srv, conf=c, sections=sections)
    return p, admin


# --------------------------------------------------------------------------
# /metrics
# --------------------------------------------------------------------------

def test_metrics_match_a_scripted_workload(redis_srv, make_proxy, tmp_path):
    log = os.path.join(str(tmp_path), "events.log")
    # Backend connections are counted per client: 1:1, whatever the default.
    p, admin = proxy_with_admin(make_proxy, redis_srv, events=log, multiplex="off")
    # The harness's readiness PING went through already: count from here.
    m0 = wait_for(lambda: (lambda x: x if value(x, "ttlguard_client_connections") == 0 else None)
                  (scrape(admin)), 5, "the readiness probe's session to close")

    def delta(name, **labels):
        return value(m, name, **labels) - value(m0, name, **labels)
    ((labels, one),) = series(m0, "ttlguard_build_info").items()
    assert one == 1 and re.match(r"^\d+\.\d+\.\d+$", dict(labels)["version"])

    sent = received = 0
    with Conn(p.port) as c, Conn(p.port) as idle:
        assert idle.cmd("PING") == b"PONG"
        sent += len(enc("PING"))
        received += len(b"+PONG\r\n")
        script = ([("SET", "plain:%d" % i, "v") for i in range(5)] +
                  [("SET", "rw:%d" % i, "v") for i in range(3)] +
                  [("GETSET", "rj:%d" % i, "v") for i in range(2)] +
                  [("SET", "du:%d" % i, "v") for i in range(4)])
        for cmd in script:
            data = enc(*cmd)
            c.send(data)
            sent += len(data)
            received += len(c.reply_raw()[1])

        m = scrape(admin)
        assert value(m, "ttlguard_client_connections") == 2
        assert value(m, "ttlguard_backend_connections") == 2
        assert delta("ttlguard_clients_accepted_total") == 2
        assert delta("ttlguard_clients_rejected_total") == 0
        assert delta("ttlguard_backend_connects_total") == 2
        assert value(m, "ttlguard_backend_errors_total") == 0
        assert delta("ttlguard_requests_total") == 15
        assert delta("ttlguard_commands_forwarded_total") == 13     # PING, 5 plain, 3 rw, 4 du
        assert value(m, "ttlguard_commands_rewritten_total") == 3
        assert value(m, "ttlguard_commands_rejected_total") == 2
        assert delta("ttlguard_bytes_total", direction="client_to_proxy") == sent
        assert delta("ttlguard_bytes_total", direction="proxy_to_client") == received
        assert delta("ttlguard_bytes_total", direction="proxy_to_backend") > 0
        assert delta("ttlguard_bytes_total", direction="backend_to_proxy") > 0

        # Every (effect, action) of every ttl rule, zeros included; none for durable rules.
        viol = series(m, "ttlguard_violations_total")
        want = {}
        for rule in ('ttl "rw:"', 'ttl "rj:"'):
            for e in EFFECTS:
                for a in ACTIONS:
                    want[(("action", a), ("effect", e), ("rule", rule))] = 0
            want[(("action", WATCHER[1]), ("effect", WATCHER[0]), ("rule", rule))] = 0
        want[(("action", "rewritten"), ("effect", "drops-ttl"), ("rule", 'ttl "rw:"'))] = 3
        want[(("action", "rejected"), ("effect", "drops-ttl"), ("rule", 'ttl "rj:"'))] = 2
        assert viol == want
        assert series(m, "ttlguard_durable_writes_total") == {(("rule", 'durable "du:"'),): 4}
        assert series(m, "ttlguard_ttl_on_durable_total") == {(("rule", 'durable "du:"'),): 0}
        assert value(m, "ttlguard_unverified_total") == 0
        assert value(m, "ttlguard_events_dropped_total") == 0

        # Latency: one observation per forwarded command, by path.
        for path, n in (("pass", 10), ("rewritten", 3)):
            assert delta("ttlguard_request_duration_seconds_count", path=path) == n
            assert delta("ttlguard_request_duration_seconds_bucket", path=path, le="+Inf") == n
            assert value(m, "ttlguard_request_duration_seconds_sum", path=path) > 0
            buckets = sorted((float(dict(l)["le"]), v) for (name, l), v in m.items()
                             if name == "ttlguard_request_duration_seconds_bucket"
                             and dict(l)["path"] == path)
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), "buckets must be cumulative"
            assert len(buckets) == 15 and buckets[0][0] == 0.00005 and buckets[-2][0] == 1

    # The counter of written lines matches the file once it is written.
    def written():
        lines = open(log, "rb").read().count(b"\n")
        return lines if value(scrape(admin), "ttlguard_events_written_total") == lines else None
    wait_for(written, 5, "events_written_total to match the lines in the file")

    m = wait_for(lambda: (lambda x: x if value(x, "ttlguard_client_connections") == 0 else None)
                 (scrape(admin)), 5, "the sessions to close")
    assert value(m, "ttlguard_backend_connections") == 0


def test_protocol_errors_and_rejected_clients_are_counted(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv, max_clients=1)
    wait_for(lambda: value(scrape(admin), "ttlguard_client_connections") == 0, 5,
             "the readiness probe's session to close")
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
        with Conn(p.port) as extra:
            extra.send(enc("PING"))
            try:
                extra.read_until_eof()
            except (TimeoutError, ConnectionResetError):
                pass
        m = scrape(admin)
        assert value(m, "ttlguard_clients_rejected_total") == 1
    wait_for(lambda: value(scrape(admin), "ttlguard_client_connections") == 0, 5,
             "the sessions to close (max_clients = 1)")
    with Conn(p.port) as bad:
        bad.send(b"*1\r\n$-7\r\n")
        bad.read_until_eof()
    wait_for(lambda: value(scrape(admin), "ttlguard_protocol_errors_total") == 1, 5,
             "the protocol error to be counted")


def test_config_reloads_are_counted(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    with open(p.config_path, "a") as f:
        f.write('[ttl "new:"]\nttl = 10\naction = reject\n')
    os.kill(p.pid, signal.SIGHUP)
    wait_for(lambda: value(scrape(admin), "ttlguard_config_reloads_total", result="ok") == 1, 5,
             "the reload")
    # The per-rule series follow the new rules.
    assert any(dict(k)["rule"] == 'ttl "new:"' for k in series(scrape(admin), "ttlguard_violations_total"))
    with open(p.config_path, "a") as f:
        f.write("nonsense\n")
    os.kill(p.pid, signal.SIGHUP)
    wait_for(lambda: value(scrape(admin), "ttlguard_config_reloads_total", result="rejected") == 1,
             5, "the refused reload")


def test_backend_server_and_its_commands(redis_srv, make_proxy):
    """The backend's name and version, as the control connection read them,
    and how many of its commands the table knows for that version."""
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    name, version = harness.server_identity(redis_srv.port)
    text = ".".join(map(str, version))
    wait_for(lambda: value(scrape(admin), "ttlguard_backend_server_info", server=name,
                           version=text, source="backend") == 1, 5, "the backend's identity")
    m = scrape(admin)
    printed = subprocess.run([harness.TTLG_BIN, "commands", "--server", "%s:%s" % (name, text)],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    assert value(m, "ttlguard_backend_commands", **{"from": "table"}) == len(printed.splitlines())
    assert value(m, "ttlguard_backend_commands", **{"from": "derived"}) == 0
    assert value(m, "ttlguard_backend_commands", **{"from": "unjudged"}) == 0


# --------------------------------------------------------------------------
# /healthz
# --------------------------------------------------------------------------

def health(port):
    status, _, body = get(port, "/healthz")
    return status, body.decode()


def test_healthz_follows_the_backend(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    assert health(admin) == (200, "ok\n")
    redis_srv.stop()
    status, body = wait_for(lambda: (lambda h: h if h[0] == 503 else None)(health(admin)), 5,
                            "/healthz to notice the backend is gone")
    assert body.startswith("backend 127.0.0.1:%d: cannot connect" % redis_srv.port), body
    redis_srv.start()
    wait_for(lambda: health(admin) == (200, "ok\n"), 5, "/healthz to recover")


def test_healthz_is_cached_for_a_second(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    direct = Conn(redis_srv.port)
    before = int(direct.cmd("INFO", "stats").split(b"total_connections_received:")[1].split(b"\r")[0])
    t0 = time.monotonic()
    for _ in range(20):
        assert health(admin)[0] == 200
    elapsed = time.monotonic() - t0
    after = int(direct.cmd("INFO", "stats").split(b"total_connections_received:")[1].split(b"\r")[0])
    direct.close()
    # One check per second at most (the proxy's own sessions are not involved here).
    assert after - before <= int(elapsed) + 2, (before, after, elapsed)


def test_healthz_times_out_on_a_stuck_backend(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    time.sleep(1.1)                                   # let a cached result expire
    sleeper = threading.Thread(target=lambda: Conn(redis_srv.port, timeout=10).cmd("DEBUG", "SLEEP", "3"))
    sleeper.start()
    harness.wait_busy(redis_srv.port)
    t0 = time.monotonic()
    status, body = health(admin)
    took = time.monotonic() - t0
    sleeper.join()
    assert status == 503
    assert "no answer to PING within 1 s" in body
    assert 0.8 < took < harness.slow(2.5), took


def test_healthz_authenticates(make_redis, make_proxy):
    r = make_redis(["--requirepass", "sekret"])
    with Conn(r.port) as c:
        assert c.cmd("AUTH", "sekret") == b"OK"
        assert c.cmd("ACL", "SETUSER", "app", "on", ">apppw", "+@all", "~*") == b"OK"

    p, admin = proxy_with_admin(make_proxy, r, backend_password="sekret")
    assert health(admin) == (200, "ok\n")
    p, admin = proxy_with_admin(make_proxy, r, backend_username="app", backend_password="apppw")
    assert health(admin) == (200, "ok\n")

    def down(**conf):
        admin = harness.free_port()
        conf["admin"] = "127.0.0.1:%d" % admin
        make_proxy(r, conf=conf, expect=None, sections=SECTIONS)
        return health(admin)

    status, body = down(backend_password="wrong")
    assert status == 503 and "AUTH refused: WRONGPASS" in body, body
    status, body = down()
    assert status == 503 and "PING answered NOAUTH" in body, body


# --------------------------------------------------------------------------
# /rules
# --------------------------------------------------------------------------

def test_rules_as_json(redis_srv, make_proxy):
    sections = ("[default]\naction = reject\n\n" + durable("du:") +
                '[ttl "bin\\x00ary:"]\nttl = 60\naction = rewrite\nmax_ttl = 600\nrefresh = bound\n')
    p, admin = proxy_with_admin(make_proxy, redis_srv, sections=sections)
    status, headers, body = get(admin, "/rules")
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["config"] == p.config_path
    d = doc["default"]
    assert (d["kind"], d["rule"], d["prefix"], d["action"]) == ("default", "default", "", "reject")
    assert [r["prefix"] for r in doc["rules"]] == ["bin\x00ary:", "du:"]
    b, du = doc["rules"]
    assert (b["kind"], b["rule"], b["ttl"], b["action"], b["refresh"], b["max_ttl"]) == \
        ("ttl", 'ttl "bin\\x00ary:"', 60, "rewrite", "bound", 600)
    assert (du["kind"], du["owner"], du["reason"], du["rebuild"]) == \
        ("durable", "payments", "ledger of record", "replay from Postgres")


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------

def test_http_status_codes(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    status, _, body = get(admin, "/nope")
    assert status == 404 and b"/metrics" in body
    status, headers, _ = get(admin, "/metrics", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, headers, body = get(admin, "/metrics", method="HEAD")
    assert status == 200 and int(headers["Content-Length"]) > 1000 and body == b""
    assert get(admin, "/metrics?name=x")[0] == 200


def test_keep_alive_and_pipelining(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    c = http.client.HTTPConnection("127.0.0.1", admin, timeout=harness.slow(10))
    c.request("GET", "/healthz")
    c.getresponse().read()
    sock = c.sock
    for path in ("/rules", "/metrics", "/healthz"):
        c.request("GET", path)
        assert c.getresponse().read()
    assert c.sock is sock                         # one connection throughout
    c.close()

    # Pipelined, /healthz first (it may wait for a backend check): in order.
    time.sleep(1.1)                               # the cached result expires
    req = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /rules HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", admin), timeout=harness.slow(10)) as s:
        s.sendall(req)
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    statuses = re.findall(rb"^HTTP/1\.1 (\d+)", data, re.M)
    assert statuses == [b"200", b"200", b"404", b"200"]
    parts = data.split(b"\r\n\r\n")
    assert parts[1].startswith(b"ok\nHTTP/1.1 200")
    assert parts[2].startswith(b'{"config":')


def raw_exchange(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=harness.slow(10)) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                break
            if not d:
                break
            out += d
    return out


def test_bad_and_oversized_requests_close_the_connection(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    out = raw_exchange(admin, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    out = raw_exchange(admin, b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"p" * 9000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    out = raw_exchange(admin, b"BLAH\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 ")
    # The endpoint still serves.
    assert get(admin, "/healthz")[0] == 200


def test_admin_follows_a_reload(redis_srv, make_proxy):
    p, admin = proxy_with_admin(make_proxy, redis_srv)
    new = harness.free_port()
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("admin = 127.0.0.1:%d" % admin, "admin = 127.0.0.1:%d" % new))
    os.kill(p.pid, signal.SIGHUP)

    def moved():
        try:
            return get(new, "/healthz")[0] == 200
        except OSError:
            return False
    wait_for(moved, 5, "the admin endpoint on the new port")
    with pytest.raises(OSError):
        get(admin, "/healthz")


def test_rewrite_errors_counted_and_logged(make_redis, make_proxy):
    """The backend's user may run INCR but not EXPIRE: the rewrite of
    INCR rw:n (MULTI, INCR, EXPIRE NX, EXEC) is refused by Redis at the
    EXPIRE. ttlguard counts it in ttlguard_rewrite_errors_total and logs
    Redis's own words; a rewrite Redis accepts (a user allowed both) and a
    write under no rule count nothing."""
    r = make_redis()
    with Conn(r.port) as c:
        assert c.cmd("ACL", "SETUSER", "noexp", "on", ">pw", "~*", "+@all", "-expire") == b"OK"
    p, admin = proxy_with_admin(make_proxy, r, backend_username="noexp", backend_password="pw")
    with Conn(p.port) as c:
        c.cmd("SET", "other", "1")                      # no rule: nothing to rewrite
        assert value(scrape(admin), "ttlguard_rewrite_errors_total") == 0
        reply = c.cmd("INCR", "rw:n")
    assert isinstance(reply, RespError), reply          # EXEC aborted: Redis's answer
    assert value(scrape(admin), "ttlguard_rewrite_errors_total") == 1
    wait_for(lambda: "Redis refused ttlguard's rewrite" in p.stderr(), 5, "the warning")
    line = [l for l in p.stderr().splitlines() if "Redis refused ttlguard's rewrite" in l][0]
    assert "NOPERM" in line, line

    q, admin2 = proxy_with_admin(make_proxy, r)        # the default user: allowed everything
    with Conn(q.port) as c:
        assert c.cmd("INCR", "rw:m") == 1
        assert 0 < c.cmd("TTL", "rw:m") <= 900
    assert value(scrape(admin2), "ttlguard_rewrite_errors_total") == 0
