#!/usr/bin/env python3
"""Checks of the deployment kit: docker/k8s-sidecar.yaml, config/ttlguard.service,
config/prometheus-rules.yml, config/grafana-dashboard.json, docs/man/*.

tests/deploy/run.sh runs one subcommand per check:

  test_deploy.py k8s                  the manifest's fields; its ini passes --check-config
  test_deploy.py k8s-live             the ini on a live ttlguard: the probes' paths answer
  test_deploy.py live METRICS_OUT     redis-server + ttlguard, violations, /metrics saved
  test_deploy.py rules-metrics        every metric and label the alert rules use is documented
  test_deploy.py grafana METRICS      the dashboard: JSON, layout, metric names, labels, PromQL
  test_deploy.py unit                 the unit file says what the sandbox needs
  test_deploy.py sandbox              ttlguard under strace: syscalls, socket families, /proc
                                      and writes fit the unit's sandbox
  test_deploy.py man-coverage         every option of --help and every config key is in the pages
  test_deploy.py install PREFIX       what cmake --install put under PREFIX

Each prints what it found wrong, one line per problem, and exits 1 if anything was;
on success one summary line. Needs Python 3 with PyYAML (Debian: python3-yaml).
TTLG_BIN: the ttlguard binary (default build/ttlguard).
"""
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("TTLG_BIN") or os.path.join(ROOT, "build", "ttlguard")
MANIFEST = os.path.join(ROOT, "docker", "k8s-sidecar.yaml")
UNIT = os.path.join(ROOT, "config", "ttlguard.service")
RULES = os.path.join(ROOT, "config", "prometheus-rules.yml")
DASHBOARD = os.path.join(ROOT, "config", "grafana-dashboard.json")
METRICS_MD = os.path.join(ROOT, "docs", "metrics.md")
EVENTS_MD = os.path.join(ROOT, "docs", "events.md")
CONFIG_MD = os.path.join(ROOT, "docs", "config.md")
CONFIG_C = os.path.join(ROOT, "proxy", "config.c")
MAN1 = os.path.join(ROOT, "docs", "man", "ttlguard.1")
MAN5 = os.path.join(ROOT, "docs", "man", "ttlguard.ini.5")

problems = []

# Metrics only a mode exports (cluster = on|route, sentinel): the live check runs
# a single server, so it does not see them.
MODE_METRICS = ("ttlguard_cluster_", "ttlguard_sentinel_", "ttlguard_route_")


def bad(msg):
    problems.append(msg)


def expect(cond, msg):
    if not cond:
        bad(msg)
    return cond


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- processes, ports, RESP, HTTP ---------------------------------------------

_taken = set()


def free_port():
    """A free loopback port in 7800-7899 (the range these tests may use)."""
    ports = [p for p in range(7800, 7900) if p not in _taken]
    random.shuffle(ports)
    for p in ports:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            s.close()
        _taken.add(p)
        return p
    raise RuntimeError("no free port in 7800-7899")


def wait_port(port, proc, what, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def stop(proc, sig=signal.SIGTERM, timeout=10.0):
    """Stops a process this script started (by its PID only)."""
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class Redis:
    def __init__(self, tmp):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, "redis-server")

    def stop(self):
        stop(self.proc)


class Ttlguard:
    kill = None         # under strace: signals ttlguard itself

    def __init__(self, ini_text, tmp, wrap=(), name="ttlguard"):
        self.ini = os.path.join(tmp, name + ".ini")
        with open(self.ini, "w") as f:
            f.write(ini_text)
        self.stderr_path = os.path.join(tmp, name + ".stderr")
        self.err = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([*wrap, BIN, "--config", self.ini],
                                     stdout=subprocess.DEVNULL, stderr=self.err)

    def stop(self):
        if self.kill is not None and self.proc.poll() is None:
            try:
                self.kill(signal.SIGTERM)
                return self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                pass
            finally:
                self.err.close()
        rc = stop(self.proc)
        self.err.close()
        return rc

    def stderr(self):
        return read(self.stderr_path)


def resp_encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Resp:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+", b"-"):
            return ("err" if t == b"-" else "ok", rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.s.sendall(resp_encode(*args))
        return self._reply()

    def close(self):
        self.s.close()


def http_get(port, path, timeout=5, headers=None):
    """(status, headers, body) of GET http://127.0.0.1:port/path."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def wait_http(port, path, want, timeout=10.0, headers=None):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = http_get(port, path, timeout=2, headers=headers)
            if last[0] == want:
                return last
        except OSError as e:
            last = (None, {}, str(e))
        time.sleep(0.1)
    return last


# ---- INI (the proxy's config, just enough to read it) ---------------------------

def ini_sections(text):
    """[(header, {key: value})] in order; inline '; comments' dropped."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            out.append((line[: line.index("]", line.rfind('"') + 1) + 1], {}))
            continue
        key, _, value = line.partition("=")
        value = re.split(r"[ \t];", value, maxsplit=1)[0].strip()
        if out:
            out[-1][1][key.strip()] = value
    return out


def ini_proxy(text):
    for header, kv in ini_sections(text):
        if header == "[proxy]":
            return kv
    return {}


def hostport(addr):
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def set_proxy_keys(text, **keys):
    """The ini with [proxy] keys replaced (values as given)."""
    out, in_proxy = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            in_proxy = s.startswith("[proxy]")
        elif in_proxy and "=" in s and not s.startswith((";", "#")):
            k = s.split("=", 1)[0].strip()
            if k in keys:
                line = f"{k} = {keys[k]}"
        out.append(line)
    return "\n".join(out) + "\n"


# ---- docs/metrics.md --------------------------------------------------------------

def documented_metrics():
    """{name: (type, {label: set(values)})} from the table in docs/metrics.md."""
    out = {}
    for line in read(METRICS_MD).splitlines():
        m = re.match(r"\|\s*`(ttlguard_\w+)`\s*\|\s*(\w+)\s*\|([^|]*)\|", line)
        if not m:
            continue
        name, mtype, labels_col = m.groups()
        labels, current = {}, None
        for part in labels_col.split(","):
            words = re.findall(r"`([^`]+)`", part)
            if "=" in part and words:
                current = words[0]
                labels[current] = set(words[1:])
            elif words and current is not None and labels.get(current):
                labels[current].update(words)           # value list continues
            else:
                for w in words:
                    labels[w] = set()
                current = None
        out[name] = (mtype, labels)
    return out


TARGET_LABELS = {"job", "instance"}


def split_metric(name, docs):
    """(documented base name, is a histogram series) or (None, False)."""
    if name in docs:
        return name, False
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and docs.get(name[: -len(suffix)], ("",))[0] == "histogram":
            return name[: -len(suffix)], suffix == "_bucket"
    return None, False


KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}


def metric_names(expr):
    """The metric names in a PromQL expression (strings, matchers, ranges, label lists
    and function names taken out)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)", e):
        if m.group(1).lower() in KEYWORDS or e[m.end():].lstrip().startswith("("):
            continue
        names.add(m.group(1))
    return names


def check_expr(where, expr, docs, live=None, foreign=()):
    """Metric names, matchers and by/on/without labels of one PromQL expression."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    names = metric_names(expr)
    labels_ok = set(TARGET_LABELS)
    used = []
    for n in sorted(names):
        if n in foreign:
            labels_ok |= set(foreign[n])
            continue
        if not n.startswith("ttlguard_"):
            bad(f"{where}: '{n}' is not a ttlguard metric (expression: {expr})")
            continue
        base, is_bucket = split_metric(n, docs)
        if base is None:
            bad(f"{where}: metric {n} is not in docs/metrics.md")
            continue
        used.append(base)
        labels_ok |= set(docs[base][1])
        if is_bucket:
            labels_ok.add("le")
        if live is not None and not base.startswith(MODE_METRICS) and \
                not any(l == n or l.startswith(n + "{") for l in live):
            bad(f"{where}: metric {n} is not in the live /metrics output")
    # matchers: name{label op "value", ...}
    for m in re.finditer(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", expr):
        metric, body = m.groups()
        base, is_bucket = split_metric(metric, docs)
        for lm in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', body):
            label, op, value = lm.groups()
            if label in TARGET_LABELS:
                continue
            if metric in foreign:
                expect(label in foreign[metric], f"{where}: label {label} on {metric}")
                continue
            if base is None:
                continue
            doc_labels = docs[base][1]
            if not expect(label in doc_labels or (is_bucket and label == "le"),
                          f"{where}: {metric} has no label '{label}' in docs/metrics.md"):
                continue
            if op in ("=", "!=") and doc_labels.get(label):
                expect(value in doc_labels[label],
                       f"{where}: {metric}{{{label}=\"{value}\"}}: docs/metrics.md lists "
                       f"{sorted(doc_labels[label])}")
            elif op in ("=", "!=") and label in ("action", "effect"):
                expect(f"`{value}`" in read(EVENTS_MD),
                       f"{where}: {label} \"{value}\" is not in docs/events.md")
    # by (...), without (...), on (...), ignoring (...)
    for m in re.finditer(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)", e):
        for label in re.findall(r"\w+", m.group(2)):
            expect(label in labels_ok,
                   f"{where}: '{m.group(1)} ({label})': no metric in the expression has "
                   f"label '{label}' (documented: {sorted(labels_ok)})")
    return used


def promtool_syntax(exprs, where):
    """PromQL syntax of each expression, by promtool check rules on recording rules."""
    with tempfile.TemporaryDirectory() as tmp:
        rules = {"groups": [{"name": "syntax", "rules": [
            {"record": f"syntax:check{i}", "expr": e} for i, e in enumerate(exprs)]}]}
        path = os.path.join(tmp, "rules.json")        # JSON is YAML
        with open(path, "w") as f:
            json.dump(rules, f)
        r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
        if r.returncode != 0:
            bad(f"{where}: promtool rejects an expression: {(r.stdout + r.stderr).strip()}")


# ---- k8s ----------------------------------------------------------------------------

def load_manifest():
    import yaml
    with open(MANIFEST) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pod_parts(docs):
    dep = [d for d in docs if d.get("kind") == "Deployment"]
    if len(dep) != 1:
        raise SystemExit("k8s-sidecar.yaml: want exactly one Deployment")
    dep = dep[0]
    spec = dep["spec"]["template"]["spec"]
    all_c = [("containers", c) for c in spec.get("containers", [])] + \
            [("initContainers", c) for c in spec.get("initContainers", [])]
    tg = [(where, c) for where, c in all_c if c.get("name") == "ttlguard"]
    if len(tg) != 1:
        raise SystemExit("k8s-sidecar.yaml: want one container named ttlguard")
    apps = [c for where, c in all_c if where == "containers" and c.get("name") != "ttlguard"]
    return dep, spec, tg[0][0], tg[0][1], apps


def configmap_ini(docs, spec, tg):
    """(path inside the container, ini text) of the config ttlguard is started with."""
    args = tg.get("args", []) + tg.get("command", [])[1:]
    path = args[args.index("--config") + 1] if "--config" in args else None
    if not expect(path is not None, "ttlguard: no --config in args"):
        return None, None
    mount = [m for m in tg.get("volumeMounts", [])
             if path.startswith(m["mountPath"].rstrip("/") + "/")]
    if not expect(mount, f"ttlguard: no volumeMount holds {path}"):
        return path, None
    expect(mount[0].get("readOnly") is True, "ttlguard: the config mount is not readOnly")
    vol = [v for v in spec.get("volumes", []) if v["name"] == mount[0]["name"]]
    if not expect(vol and "configMap" in vol[0], f"volume {mount[0]['name']}: not a ConfigMap"):
        return path, None
    cm_name = vol[0]["configMap"]["name"]
    cms = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name]
    if not expect(cms, f"ConfigMap {cm_name} is not in the manifest"):
        return path, None
    key = path[len(mount[0]["mountPath"].rstrip("/")) + 1:]
    if not expect(key in cms[0].get("data", {}), f"ConfigMap {cm_name} has no key {key}"):
        return path, None
    return path, cms[0]["data"][key]


def resolve_port(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    bad(f"{container['name']}: probe port '{port}' names no containerPort")
    return None


def cmd_k8s(args):
    docs = load_manifest()
    kinds = sorted(d.get("kind") for d in docs)
    for d in docs:
        expect(d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"),
               f"document without apiVersion/kind/metadata.name: {str(d)[:80]}")
    dep, spec, tg_where, tg, apps = pod_parts(docs)
    expect(dep["apiVersion"] == "apps/v1", "Deployment: apiVersion is not apps/v1")
    sel = dep["spec"]["selector"]["matchLabels"]
    tlabels = dep["spec"]["template"]["metadata"].get("labels", {})
    expect(all(tlabels.get(k) == v for k, v in sel.items()),
           "Deployment: selector.matchLabels do not match the template's labels")
    expect(len(apps) >= 1, "no application container beside ttlguard")
    if tg_where == "initContainers":
        expect(tg.get("restartPolicy") == "Always",
               "ttlguard is an init container without restartPolicy: Always (it would block "
               "the app instead of running beside it)")

    # security
    psc, csc = spec.get("securityContext", {}), tg.get("securityContext", {})
    eff = {**psc, **csc}
    expect(eff.get("runAsNonRoot") is True, "ttlguard: runAsNonRoot is not true")
    uid = int(re.search(r"--uid (\d+)", read(os.path.join(ROOT, "docker", "Dockerfile"))).group(1))
    expect(eff.get("runAsUser") == uid, f"ttlguard: runAsUser {eff.get('runAsUser')}, the "
           f"Dockerfile's user is {uid}")
    expect(csc.get("allowPrivilegeEscalation") is False,
           "ttlguard: allowPrivilegeEscalation is not false")
    expect(csc.get("readOnlyRootFilesystem") is True, "ttlguard: readOnlyRootFilesystem not true")
    expect(csc.get("privileged") in (None, False), "ttlguard: privileged")
    caps = csc.get("capabilities", {})
    expect("ALL" in caps.get("drop", []), "ttlguard: capabilities.drop lacks ALL")
    expect(not caps.get("add"), f"ttlguard: capabilities.add {caps.get('add')}")
    expect(spec.get("hostNetwork") in (None, False), "the Pod uses hostNetwork")

    # resources
    for c in [tg] + apps:
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            expect("memory" in res.get(kind, {}), f"{c['name']}: no resources.{kind}.memory")
        expect("cpu" in res.get("requests", {}), f"{c['name']}: no resources.requests.cpu")
    expect("cpu" in tg.get("resources", {}).get("limits", {}), "ttlguard: no resources.limits.cpu")

    # the config
    path, ini = configmap_ini(docs, spec, tg)
    if ini is None:
        return report("k8s")
    proxy = ini_proxy(ini)
    lhost, lport = hostport(proxy.get("listen", "127.0.0.1:6380"))
    expect(lhost == "127.0.0.1", f"ini: listen = {proxy.get('listen')}: the app is in the same "
           "Pod, loopback is enough (and keeps others from using the proxy port)")
    # Every REDIS* setting of the app points at ttlguard's listener.
    app_env = {e["name"]: str(e.get("value", "")) for a in apps for e in a.get("env", [])}
    redis_env = {k: v for k, v in app_env.items() if "REDIS" in k.upper()}
    expect(redis_env, f"the app has no REDIS* setting to point at 127.0.0.1:{lport}")
    for k, v in redis_env.items():
        if k.upper().endswith("PORT"):
            expect(v == str(lport), f"app env {k}={v}: want {lport} (ttlguard)")
        elif k.upper().endswith("HOST"):
            expect(v in ("127.0.0.1", "localhost"), f"app env {k}={v}: want 127.0.0.1")
        else:
            expect(re.search(rf"(127\.0\.0\.1|localhost):{lport}\b", v),
                   f"app env {k}={v}: want 127.0.0.1:{lport} (ttlguard)")
    bhost, bport = hostport(proxy.get("backend", ""))
    expect(bhost not in ("127.0.0.1", "localhost", "::1") and
           (bhost.endswith(".svc.cluster.local") or "." not in bhost),
           f"ini: backend = {proxy.get('backend')}: expected a Service address")
    expect(proxy.get("events") == "stderr", f"ini: events = {proxy.get('events')}, want stderr")
    ahost, aport = hostport(proxy.get("admin", ":0"))
    expect(ahost in ("0.0.0.0", "::"), f"ini: admin = {proxy.get('admin')}: httpGet probes "
           "connect to the Pod IP, so the admin endpoint must listen on all addresses")
    ttl_rules = [(h, kv) for h, kv in ini_sections(ini) if h.startswith('[ttl "')]
    expect(ttl_rules and all("ttl" in kv or kv.get("action") in ("reject", "log")
                             for _, kv in ttl_rules),
           "ini: no [ttl] rule (or a rewrite rule without ttl)")
    expect(any(p.get("containerPort") == aport for p in tg.get("ports", [])),
           f"ttlguard: no containerPort {aport} (the admin port)")
    expect(not any(p.get("containerPort") == lport for p in tg.get("ports", []))
           or lhost != "127.0.0.1", "containerPort for a loopback-only listener")
    ann = dep["spec"]["template"]["metadata"].get("annotations", {})
    if "prometheus.io/port" in ann:
        expect(ann["prometheus.io/port"] == str(aport), "prometheus.io/port is not the admin port")

    # probes
    probes = {k: tg.get(k) for k in ("livenessProbe", "readinessProbe", "startupProbe")}
    expect(probes["livenessProbe"] and probes["readinessProbe"],
           "ttlguard: liveness and readiness probes are both required")
    for kind, pr in probes.items():
        if not pr:
            continue
        hg = pr.get("httpGet")
        if not expect(hg, f"ttlguard {kind}: not an httpGet probe"):
            continue
        expect(resolve_port(tg, hg.get("port")) == aport,
               f"ttlguard {kind}: port {hg.get('port')} is not the admin port {aport}")
        expect(hg.get("path") in ("/healthz", "/metrics"), f"ttlguard {kind}: path {hg.get('path')}")
    expect(probes["readinessProbe"] and probes["readinessProbe"]["httpGet"]["path"] == "/healthz",
           "ttlguard readinessProbe: not /healthz (the backend's health)")

    # NetworkPolicy: the admin port must stay reachable by something (Prometheus)
    for np in [d for d in docs if d.get("kind") == "NetworkPolicy"]:
        ports = {p.get("port") for rule in np["spec"].get("ingress", [])
                 for p in rule.get("ports", [])}
        expect(aport in ports or "admin" in ports,
               f"NetworkPolicy {np['metadata']['name']}: admin port {aport} not admitted")
        for a in apps:
            for p in a.get("ports", []):
                expect(p["containerPort"] in ports or p.get("name") in ports,
                       f"NetworkPolicy {np['metadata']['name']}: the app's port "
                       f"{p['containerPort']} is not admitted")

    # ttlguard itself accepts the file
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, os.path.basename(path))
        with open(f, "w") as fh:
            fh.write(ini)
        r = subprocess.run([BIN, "--check-config", "--config", f], capture_output=True, text=True)
        expect(r.returncode == 0 and ": OK (" in r.stdout,
               f"ttlguard --check-config on the ConfigMap's ini: exit {r.returncode}: "
               f"{(r.stdout + r.stderr).strip()}")
    return report("k8s", f"{len(docs)} documents ({', '.join(kinds)}); ttlguard in "
                  f"{tg_where}; listen {lhost}:{lport}, admin {ahost}:{aport}; "
                  f"--check-config OK")


def cmd_k8s_live(args):
    """The ConfigMap's ini on a live ttlguard (addresses moved to loopback test ports):
    each probe's path answers 200 with Redis up; with Redis down readiness fails and
    liveness (and startup) do not."""
    docs = load_manifest()
    dep, spec, _, tg, _ = pod_parts(docs)
    _, ini = configmap_ini(docs, spec, tg)
    if ini is None:
        return report("k8s-live")
    probes = {k: tg[k]["httpGet"]["path"] for k in ("startupProbe", "livenessProbe",
                                                    "readinessProbe") if k in tg}
    # The headers each probe sends (admin_token: Authorization: Bearer ...).
    sends = {k: {h["name"]: h["value"] for h in tg[k]["httpGet"].get("httpHeaders", [])}
             for k in probes}
    with tempfile.TemporaryDirectory() as tmp:
        redis = Redis(tmp)
        admin, listen = free_port(), free_port()
        text = set_proxy_keys(ini, listen=f"127.0.0.1:{listen}",
                              backend=f"127.0.0.1:{redis.port}", admin=f"127.0.0.1:{admin}")
        tgd = Ttlguard(text, tmp)
        try:
            wait_port(admin, tgd.proc, "ttlguard admin")
            for kind, path in probes.items():
                st = wait_http(admin, path, 200, headers=sends[kind])
                expect(st[0] == 200, f"{kind} {path}: {st[0]} {st[2][:200]!r} with Redis up")
            c = Resp(listen)
            expect(c.call("SET", "session:k8s", "v") == ("ok", "OK"), "SET through the sidecar")
            ttl = c.call("TTL", "session:k8s")
            expect(isinstance(ttl, int) and 0 < ttl <= 900,
                   f"the ConfigMap's [ttl \"session:\"] rule did not give a TTL: TTL = {ttl}")
            c.close()
            redis.stop()
            for kind, path in probes.items():
                want = 503 if kind == "readinessProbe" else 200
                st = wait_http(admin, path, want, headers=sends[kind])
                expect(st[0] == want, f"{kind} {path} with Redis down: {st[0]}, want {want}")
        finally:
            rc = tgd.stop()
            redis.stop()
        expect(rc == 0, f"ttlguard exit status {rc} after SIGTERM")
        log = tgd.stderr()
        lines = [l for l in log.splitlines() if l.strip()]
        nonjson = [l for l in lines if not l.startswith("{")]
        if "log_format = json" in ini:
            expect(not nonjson, f"log_format = json, yet non-JSON stderr lines: {nonjson[:3]}")
    return report("k8s-live", ", ".join(f"{k} {p}" for k, p in probes.items()) +
                  ": 200 with Redis up; readiness 503, the others 200 with Redis down")


# ---- live /metrics -------------------------------------------------------------------

LIVE_INI = """\
[proxy]
listen = 127.0.0.1:{listen}
backend = 127.0.0.1:{backend}
admin = 127.0.0.1:{admin}
events = {events}
event_window = 1
watch = on
watch_configure = on
audit_interval = 1
audit_rate = 100000
audit_memory = on

[default]
action = allow

[ttl "session:"]
ttl = 900
action = rewrite

[ttl "cache:"]
action = reject
max_ttl = 3600

[ttl "tmp:"]
action = log

[durable "billing:"]
owner = payments
reason = ledger
rebuild = replay
"""


def drive(listen):
    """Commands that pass, get rewritten, rejected, logged, touch durable keys."""
    c = Resp(listen)
    r = [c.call("SET", "plain", "1"), c.call("GET", "plain"),
         c.call("SET", "session:1", "10", "EX", "900"), c.call("GETSET", "session:1", "0"),
         c.call("INCR", "session:2"), c.call("SET", "cache:1", "x"),
         c.call("SET", "cache:2", "x", "EX", "7200"), c.call("SET", "tmp:1", "x"),
         c.call("SET", "billing:1", "x"), c.call("EXPIRE", "billing:1", "100"),
         c.call("PERSIST", "session:1")]
    ttl = c.call("TTL", "session:2")
    c.close()
    expect(0 < ttl <= 900, f"INCR session:2 was not given the rule's TTL: {ttl}")
    expect(r[5][0] == "err" and "TTLGUARD" in r[5][1], f"SET cache:1 was not rejected: {r[5]}")
    return r


def cmd_live(args):
    out = args[0]
    with tempfile.TemporaryDirectory() as tmp:
        redis = Redis(tmp)
        admin, listen = free_port(), free_port()
        events = os.path.join(tmp, "events.jsonl")
        tgd = Ttlguard(LIVE_INI.format(listen=listen, backend=redis.port, admin=admin,
                                       events=events), tmp)
        try:
            wait_port(listen, tgd.proc, "ttlguard")
            wait_http(admin, "/healthz", 200)
            drive(listen)
            tgd.proc.send_signal(signal.SIGHUP)              # a reload: config_reloads_total
            time.sleep(0.5)
            drive(listen)
            time.sleep(0.3)
            # The background audit (audit_interval = 1): a pass that saw the
            # keys drive() wrote (tmp:1 leaked), for its pattern gauge.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                st, headers, body = http_get(admin, "/metrics")
                if "ttlguard_audit_leaked_pattern_keys{" in body:
                    break
                time.sleep(0.2)
            hz = http_get(admin, "/healthz")
        finally:
            rc = tgd.stop()
            redis.stop()
    expect(rc == 0, f"ttlguard exit status {rc}")
    expect(st == 200, f"/metrics: HTTP {st}")
    expect(hz[0] == 200 and hz[2].strip() == "ok", f"/healthz: {hz[0]} {hz[2]!r}")
    ctype = headers.get("Content-Type", "")
    expect(ctype.startswith("text/plain") and "version=0.0.4" in ctype,
           f"/metrics Content-Type {ctype!r}: want text/plain; version=0.0.4")
    with open(out, "w") as f:
        f.write(body)
    docs = documented_metrics()
    live = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
            if m:
                live.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    typed = re.findall(r"^# TYPE (\S+) (\S+)", body, re.M)
    for name, mtype in typed:
        if expect(name in docs, f"live /metrics exports {name}, which docs/metrics.md lacks"):
            expect(docs[name][0] == mtype,
                   f"{name}: live type {mtype}, docs/metrics.md says {docs[name][0]}")
    for name in docs:
        if not name.startswith(MODE_METRICS):
            expect(any(n == name for n, _ in typed),
                   f"{name} (docs/metrics.md) is not in the live /metrics output")

    def value(name, **labels):
        """The sum over the series of name that have these labels."""
        vs = [v for lab, v in live.get(name, [])
              if all(f'{k}="{val}"' in lab for k, val in labels.items())]
        return sum(vs) if vs else None
    sess = 'ttl \\"session:\\"'
    for name, labels, what in [
            ("ttlguard_violations_total", dict(rule=sess, effect="drops-ttl", action="rewritten"),
             "GETSET session:1"),
            ("ttlguard_violations_total", dict(rule='ttl \\"cache:\\"', action="rejected"),
             "SET cache:1"),
            ("ttlguard_violations_total", dict(rule='ttl \\"tmp:\\"', action="logged"),
             "SET tmp:1"),
            ("ttlguard_commands_rewritten_total", {}, "rewrites"),
            ("ttlguard_commands_rejected_total", {}, "rejects"),
            ("ttlguard_durable_writes_total", dict(rule='durable \\"billing:\\"'), "SET billing:1"),
            ("ttlguard_ttl_on_durable_total", dict(rule='durable \\"billing:\\"'), "EXPIRE billing:1"),
            ("ttlguard_config_reloads_total", dict(result="ok"), "SIGHUP"),
            ("ttlguard_request_duration_seconds_count", dict(path="rewritten"), "rewrites"),
            ("ttlguard_events_written_total", {}, "the event log")]:
        v = value(name, **labels)
        expect(v is not None and v > 0, f"{name}{labels}: {v} after {what}")
    expect(value("ttlguard_events_dropped_total") == 0, "events dropped in a quiet test")
    return report("live", f"{len(typed)} metric families, {sum(len(v) for v in live.values())} "
                  f"series; saved to {out}")


# ---- Prometheus rules ------------------------------------------------------------------

FOREIGN = {"up": {"job", "instance"}, "probe_success": {"job", "instance"}}


def cmd_rules_metrics(args):
    import yaml
    docs = documented_metrics()
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    used, n = set(), 0
    for g in rules["groups"]:
        for r in g["rules"]:
            n += 1
            name = r.get("alert") or r.get("record")
            used |= set(check_expr(f"rule {name}", r["expr"], docs, foreign=FOREIGN))
            expect(r.get("labels", {}).get("severity") in ("critical", "warning", "info"),
                   f"rule {name}: no severity label")
            expect(r.get("annotations", {}).get("summary"), f"rule {name}: no summary")
    for want in ("ttlguard_violations_total", "ttlguard_events_dropped_total",
                 "ttlguard_backend_errors_total"):
        expect(want in used, f"no alert on {want}")
    return report("rules-metrics", f"{n} rules over {len(used)} documented metrics")


# ---- Grafana --------------------------------------------------------------------------

def cmd_grafana(args):
    live_names = None
    if args:
        live_names = [l.split(" ")[0] for l in read(args[0]).splitlines()
                      if l and not l.startswith("#")]
    try:
        dash = json.loads(read(DASHBOARD))
    except ValueError as e:
        bad(f"grafana-dashboard.json is not JSON: {e}")
        return report("grafana")
    docs = documented_metrics()
    for k in ("title", "uid", "panels", "schemaVersion", "templating"):
        expect(k in dash, f"dashboard: no '{k}'")
    variables = {v["name"] for v in dash.get("templating", {}).get("list", [])}
    panels = []
    for p in dash.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))
    ids = [p.get("id") for p in panels]
    expect(len(ids) == len(set(ids)) and None not in ids, f"panel ids not unique: {ids}")
    exprs, used, boxes = [], set(), []
    for p in panels:
        gp = p.get("gridPos", {})
        title = f"panel {p.get('id')} '{p.get('title')}'"
        expect(all(k in gp for k in "xywh") and gp.get("x", 0) + gp.get("w", 0) <= 24,
               f"{title}: gridPos {gp}")
        boxes.append((gp.get("x", 0), gp.get("y", 0), gp.get("w", 0), gp.get("h", 0), title))
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        expect(targets, f"{title}: no targets")
        refs = [t.get("refId") for t in targets]
        expect(len(refs) == len(set(refs)), f"{title}: duplicate refIds {refs}")
        for t in targets:
            if expect(t.get("expr"), f"{title}: a target without expr"):
                exprs.append((title, t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"label_values\((.*),\s*(\w+)\)$", q or "")
        if v.get("type") == "query" and expect(m, f"variable {v['name']}: query {q!r}"):
            exprs.append((f"variable {v['name']}", m.group(1)))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            exprs.append((f"annotation {a.get('name')}", a["expr"]))
    # overlapping panels
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]:
                bad(f"{a[4]} overlaps {b[4]}")
    concrete = []
    for where, e in exprs:
        for var in re.findall(r"\$\{?(\w+)", e):
            expect(var in variables or var.startswith("__"),
                   f"{where}: ${var} is not a dashboard variable")
        used |= set(check_expr(where, e, docs, live=live_names))
        concrete.append(e.replace("$__rate_interval", "5m").replace("$__range", "1h")
                        .replace("$job", ".*").replace("$instance", ".*"))
    promtool_syntax(concrete, "dashboard")
    missing = sorted(set(docs) - used)
    expect(not missing, f"documented metrics without a panel: {missing}")
    return report("grafana", f"{len(panels)} panels, {len(exprs)} queries over "
                  f"{len(used)} of {len(docs)} documented metrics; PromQL parses")


# ---- systemd ------------------------------------------------------------------------------

def unit_directives(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def cmd_unit(args):
    d = unit_directives(read(UNIT))
    want = {"DynamicUser": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
            "PrivateTmp": "yes", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
            "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
            "LogsDirectory": "ttlguard", "Restart": "on-failure"}
    for k, v in want.items():
        expect(d.get(k, [None])[-1] == v, f"{k}={d.get(k)}: want {v!r}")
    expect("@system-service" in d.get("SystemCallFilter", []),
           f"SystemCallFilter={d.get('SystemCallFilter')}: want @system-service")
    expect("/bin/kill -HUP $MAINPID" in d.get("ExecReload", []),
           f"ExecReload={d.get('ExecReload')}: want /bin/kill -HUP $MAINPID")
    pre = d.get("ExecStartPre", [])
    start = d.get("ExecStart", [""])[0].split()
    expect(len(pre) == 1 and "--check-config" in pre[0] and pre[0].split()[0] == start[0],
           f"ExecStartPre={pre}: want the same binary with --check-config")
    expect("--config" in start, f"ExecStart={start}: no --config")
    # the config path the unit passes is where deploy.md and the man pages say
    env = dict(e.split("=", 1) for e in d.get("Environment", []))
    cfg = start[start.index("--config") + 1] if "--config" in start else ""
    cfg = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), cfg)
    expect(cfg == "/etc/ttlguard/ttlguard.ini", f"config path {cfg}")
    for doc in (MAN1, MAN5, os.path.join(ROOT, "docs", "deploy.md")):
        expect(cfg in read(doc), f"{os.path.relpath(doc, ROOT)} does not name {cfg}")
    return report("unit", f"{sum(len(v) for v in d.values())} directives; sandbox keys present")


def syscall_groups():
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True,
                         text=True, check=True).stdout
    groups, cur = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            cur = groups.setdefault(line.strip(), set())
        elif cur is not None and line.startswith("    ") and not line.strip().startswith("#"):
            cur.add(line.strip())
    def expand(name, seen=()):
        res = set()
        for m in groups.get(name, ()):
            res |= expand(m, seen + (name,)) if m.startswith("@") and m not in seen else {m}
        return res
    return expand


def unit_syscalls():
    """The syscalls the unit's SystemCallFilter= lines allow."""
    expand = syscall_groups()
    allowed = set()
    for v in unit_directives(read(UNIT)).get("SystemCallFilter", []):
        deny = v.startswith("~")
        names = set()
        for w in v.lstrip("~").split():
            names |= expand(w) if w.startswith("@") else {w}
        allowed = allowed - names if deny else allowed | names
    return allowed


def cmd_sandbox(args):
    """ttlguard under strace -f through a session like the unit's: --check-config
    (ExecStartPre), start, clients, a violation, /metrics and /healthz, SIGHUP
    (ExecReload), SIGUSR1 (log rotation), SIGTERM. Every syscall must be allowed by
    SystemCallFilter=, every socket() family by RestrictAddressFamilies=, /proc
    reads must survive ProcSubset=pid, no mapping may be writable and executable
    (MemoryDenyWriteExecute=), and every file opened for writing must be in the
    event log directory (LogsDirectory=) or /dev."""
    d = unit_directives(read(UNIT))
    families = set(d["RestrictAddressFamilies"][-1].split())
    allowed = unit_syscalls()
    with tempfile.TemporaryDirectory() as tmp:
        logs = os.path.join(tmp, "log", "ttlguard")
        os.makedirs(logs)
        trace = os.path.join(tmp, "strace")
        strace = ["strace", "-f", "-qq", "-e", "signal=none", "-o"]
        redis = Redis(tmp)
        admin, listen = free_port(), free_port()
        # backend by name: the resolver (NSS, /etc/hosts) runs under the trace too
        ini = LIVE_INI.format(listen=listen, backend=redis.port, admin=admin,
                              events=os.path.join(logs, "events.jsonl")) \
            .replace("backend = 127.0.0.1:", "backend = localhost:")
        cfg = os.path.join(tmp, "check.ini")
        with open(cfg, "w") as f:
            f.write(ini)
        chk = subprocess.run([*strace, trace + ".check", BIN, "--check-config",
                              "--config", cfg], capture_output=True, text=True)
        expect(chk.returncode == 0, f"--check-config under strace: {chk.stderr.strip()}")
        tgd = Ttlguard(ini, tmp, wrap=[*strace, trace])
        try:
            wait_port(listen, tgd.proc, "ttlguard under strace", timeout=20)
            # Signals go to ttlguard, strace's child, not to strace.
            kids = read(f"/proc/{tgd.proc.pid}/task/{tgd.proc.pid}/children").split()
            if len(kids) != 1:
                raise RuntimeError(f"strace has children {kids}, want one (ttlguard)")
            child = int(kids[0])
            tgd.kill = lambda sig: os.kill(child, sig)
            wait_http(admin, "/healthz", 200)
            drive(listen)
            http_get(admin, "/metrics")
            http_get(admin, "/rules")
            tgd.kill(signal.SIGHUP)
            time.sleep(0.5)
            os.rename(os.path.join(logs, "events.jsonl"), os.path.join(logs, "events.jsonl.1"))
            tgd.kill(signal.SIGUSR1)
            time.sleep(0.5)
            drive(listen)
            time.sleep(1.2)                               # a folded event gets written
        finally:
            rc = tgd.stop()
            redis.stop()
        expect(rc == 0, f"ttlguard under strace: exit status {rc}")
        expect(os.path.exists(os.path.join(logs, "events.jsonl")), "SIGUSR1 did not reopen the log")
        text = read(trace) + read(trace + ".check")
    seen, fams, opens_w, procs, wx = {}, set(), set(), set(), set()
    for line in text.splitlines():
        m = re.match(r"(?:\d+\s+)?(?:<\.\.\. )?([a-z_0-9]+)(?:\(| resumed>)", line)
        if not m or line.startswith(("+++", "---")):
            continue
        name = m.group(1)
        seen[name] = seen.get(name, 0) + 1
        if name == "socket":
            f = re.search(r"socket\((AF_\w+|\d+)", line)
            if f:
                fams.add(f.group(1))
        if name in ("mmap", "mprotect", "pkey_mprotect") and \
                re.search(r"PROT_WRITE\|PROT_EXEC|PROT_EXEC\|PROT_WRITE|PROT_READ\|PROT_WRITE\|PROT_EXEC", line):
            wx.add(line.split(None, 1)[-1][:120])
        if name in ("open", "openat", "creat"):
            p = re.search(r'"([^"]*)"', line)
            path = p.group(1) if p else ""
            if name == "creat" or re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND", line):
                opens_w.add(path)
            if path.startswith("/proc/") and not re.match(r"/proc/(self|thread-self|\d+)/", path):
                procs.add(path)
    # execve is strace's own launch; systemd's filter allows what it needs to exec too
    denied = sorted(s for s in seen if s not in allowed and s not in ("execve",))
    expect(not denied, f"syscalls outside SystemCallFilter= "
           f"({' '.join(d['SystemCallFilter'])}): {denied}")
    expect(fams <= families, f"socket families outside RestrictAddressFamilies=: "
           f"{sorted(fams - families)}")
    expect(not procs, f"/proc paths hidden by ProcSubset=pid: {sorted(procs)}")
    expect(not wx, f"writable and executable mappings (MemoryDenyWriteExecute=yes refuses "
           f"them): {sorted(wx)[:3]}")
    bad_w = sorted(p for p in opens_w if not (p.startswith(logs + "/") or p.startswith("/dev/")))
    expect(not bad_w, f"files opened for writing outside LogsDirectory= (ProtectSystem=strict "
           f"makes them read-only): {bad_w}")
    return report("sandbox", f"{len(seen)} distinct syscalls, all within the filter "
                  f"({len(allowed)} allowed); socket families {sorted(fams)}; "
                  f"writes only under the log directory")


# ---- man pages ----------------------------------------------------------------------------

def render(page):
    r = subprocess.run(["mandoc", "-T", "ascii", "-O", "width=300", page],
                       capture_output=True, text=True)
    return re.sub(r".\x08", "", r.stdout)


def help_options(*argv):
    r = subprocess.run([BIN, *argv], capture_output=True, text=True)
    text = r.stdout + r.stderr
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", text))


def cmd_man_coverage(args):
    man1, man5 = render(MAN1), render(MAN5)
    n = 0
    for argv, what in ((["--help"], "ttlguard --help"), (["audit", "--help"], "audit --help"),
                       (["report", "--help"], "report --help"), (["commands", "--bogus"],
                                                                  "commands usage")):
        for opt in sorted(help_options(*argv)):
            n += 1
            expect(re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", man1),
                   f"ttlguard.1 lacks {opt} (from {what})")
    # long options in the sources, in case --help forgets one
    for src in ("main.c", "report.c"):
        for opt in re.findall(r'\{\s*"([a-z-]+)",\s*(?:no|required|optional)_argument',
                              read(os.path.join(ROOT, "proxy", src))):
            n += 1
            expect(f"--{opt}" in man1, f"ttlguard.1 lacks --{opt} (proxy/{src})")
    for opt in re.findall(r'!strcmp\(a, "(--[a-z-]+)"\)', read(os.path.join(ROOT, "proxy",
                                                                            "audit.c"))):
        n += 1
        expect(opt in man1, f"ttlguard.1 lacks {opt} (proxy/audit.c)")
    for sub in ("audit", "report", "commands"):
        expect(re.search(rf"ttlguard {sub}\b", man1), f"ttlguard.1: no synopsis for {sub}")
    for sig in ("SIGHUP", "SIGUSR1", "SIGTERM"):
        expect(sig in man1, f"ttlguard.1 does not explain {sig}")
    # every key: docs/config.md's tables and proxy/config.c's key table
    keys = set()
    for line in read(CONFIG_MD).splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`\s*\|", line)
        if m:
            keys.add(m.group(1))
    src = set(re.findall(r'\{\s*"([a-z_]+)",\s+IN_', read(CONFIG_C)))
    for k in sorted(src - keys):
        bad(f"docs/config.md lacks key {k} (proxy/config.c has it)")
    for k in sorted(keys | src):
        n += 1
        expect(re.search(rf"^\s+{k}( =|,)", man5, re.M), f"ttlguard.ini.5 lacks key {k}")
    for sec in ("[proxy]", "[default]", '[ttl "PREFIX"]', '[durable "PREFIX"]'):
        expect(sec in man5, f"ttlguard.ini.5 lacks section {sec}")
    for sec in ('The [ttl "PREFIX"] sections', 'The [durable "PREFIX"] sections'):
        expect(sec in man5, f"ttlguard.ini.5 lacks the heading {sec}")
    # the example configs in the page are valid configs
    blocks = re.findall(r"^\.Bd -literal[^\n]*\n(.*?)^\.Ed", read(MAN5), re.M | re.S)
    examples = [b for b in blocks if b.startswith("[") and "=" in b]
    expect(len(examples) >= 2, f"ttlguard.ini.5: {len(examples)} example configs, want 2")
    with tempfile.TemporaryDirectory() as tmp:
        for i, b in enumerate(examples):
            f = os.path.join(tmp, f"example{i}.ini")
            text = b.replace("\\(dq", '"').replace("\\e", "\\")
            # --check-config also checks that the event log can be created:
            # the page's /var/log/ttlguard is the service's (LogsDirectory=),
            # not this machine's, so the log goes to the temp dir here.
            text = re.sub(r"^(events\s*=\s*)/\S+", lambda m: m.group(1) + tmp + "/events.jsonl",
                          text, flags=re.M)
            with open(f, "w") as fh:
                fh.write(text)
            r = subprocess.run([BIN, "--check-config", "--config", f], capture_output=True,
                               text=True)
            n += 1
            expect(r.returncode == 0, f"ttlguard.ini.5 example {i + 1}: "
                   f"{(r.stdout + r.stderr).strip()}")
    return report("man-coverage", f"{n} options and keys found in the pages "
                  f"({len(keys | src)} config keys)")


def cmd_install(args):
    prefix = args[0]
    files = {"bin/ttlguard": None,
             "share/man/man1/ttlguard.1": MAN1,
             "share/man/man5/ttlguard.ini.5": MAN5,
             "share/doc/ttlguard/ttlguard.ini": os.path.join(ROOT, "config", "ttlguard.ini"),
             "lib/systemd/system/ttlguard.service": None}
    for rel, src in files.items():
        p = os.path.join(prefix, rel)
        if not expect(os.path.isfile(p), f"cmake --install did not install {rel}"):
            continue
        if src:
            expect(read(p) == read(src), f"{rel} differs from {os.path.relpath(src, ROOT)}")
    b = os.path.join(prefix, "bin", "ttlguard")
    if os.path.isfile(b):
        r = subprocess.run([b, "--version"], capture_output=True, text=True)
        expect(r.returncode == 0 and r.stdout.startswith("ttlguard "), f"installed --version: {r}")
    u = os.path.join(prefix, "lib/systemd/system/ttlguard.service")
    if os.path.isfile(u):
        d = unit_directives(read(u))
        want = read(UNIT).replace("/usr/local/bin/ttlguard", b)
        expect(read(u) == want, "the installed unit is not config/ttlguard.service with "
               f"ExecStart* at {b}")
        expect(d["ExecStart"][0].startswith(b + " "), f"installed ExecStart={d['ExecStart']}")
    return report("install", f"{len(files)} files under {prefix}")


# ---- main ----------------------------------------------------------------------------------

def report(name, ok_detail=""):
    if problems:
        for p in problems:
            print(f"  {name}: {p}")
        return 1
    print(f"  {name}: {ok_detail}" if ok_detail else f"  {name}: ok")
    return 0


COMMANDS = {"k8s": cmd_k8s, "k8s-live": cmd_k8s_live, "live": cmd_live,
            "rules-metrics": cmd_rules_metrics, "grafana": cmd_grafana, "unit": cmd_unit,
            "sandbox": cmd_sandbox, "man-coverage": cmd_man_coverage, "install": cmd_install}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        sys.exit(2)
    try:
        sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        problems.append(f"{type(e).__name__}: {e}")
        sys.exit(report(sys.argv[1]) or 1)
