"""
`ttlguard report --html` and `ttlguard audit --html` (issue 15): one
self-contained page each.

Real data first: a redis-server, ttlguard in front of it logging events to a
file, commands that break the rules sent through the proxy, and keys written
straight to Redis past the proxy (the leaks an audit finds). Then:

  1. the pages, parsed with html.parser: no script, no http(s) reference, an
     <svg> under every chart's caption, and the exact numbers of the data
     they were made from (the event log read back in Python; the audit's own
     --json from the same run) in the tables, bars and legends;
  2. each page rendered by headless Chromium (Debian's `chromium`): the
     screenshot is a real PNG, not blank, and shows the bars in the palette's
     colors. Skipped, saying so, when chromium is not installed
     (apt-get install chromium python3-pil).

Environment: TTLG_BIN (the binary, default build/ttlguard).
"""

import html.parser
import json
import os
import shutil
import struct
import subprocess
import time
import zlib

import pytest
import redis

import harness
from harness import Conn, RedisServer, Ttlguard

SECTIONS = r"""
[ttl "session:"]
ttl = 900
action = rewrite

[ttl "counter:"]
action = log

[ttl "bin\x00ary:"]
ttl = 60
action = reject

[durable "billing:ledger:"]
owner = payments & <billing>
reason = ledger of record
rebuild = replay ledger_entries from Postgres
"""

DOT = "\u00b7"
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"]


# --------------------------------------------------------------------------
# the data
# --------------------------------------------------------------------------

def send_violations(port):
    """Through the proxy: 7 + 4 + 2 violations and one durable write, a
    second apart, so that the chart over time has several bars."""
    with Conn(port) as c:
        for i in range(7):
            assert c.cmd("SET", "session:%d:billableSecondsPending" % i, "0") == b"OK"
        time.sleep(1.1)
        for i in range(4):
            assert isinstance(c.cmd("INCR", "counter:%d" % i), int)
        time.sleep(1.1)
        for i in range(2):
            assert c.cmd("SET", b"bin\x00ary:%d" % i, "x").startswith(b"TTLGUARD")
        assert c.cmd("SET", "billing:ledger:1", "entry") == b"OK"
        assert c.cmd("SET", "plain", "1") == b"OK"


def write_past_the_proxy(port):
    """Straight into Redis: leaks, unregistered keys, TTLs of each bucket."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=harness.slow(10))
    p = r.pipeline(transaction=False)
    for i in range(100, 109):
        p.set("session:%d:billableSecondsPending" % i, 0)           # leaked: 9
    p.set(b"bin\x00ary:7", b"x")                                    # leaked: 1
    for i in range(1000, 1005):
        p.hset("user:%d:profile" % i, "name", "x" * 40)             # unregistered: 5
    p.zadd("billing:ledger:2", {"e": 1})
    p.expire("billing:ledger:2", 3 * 86400)                         # durable with a TTL
    for i, ttl in enumerate([30, 600, 7200, 3 * 86400, 10 * 86400, 40 * 86400]):
        p.set("cache:%d" % i, "v", ex=ttl)
    p.execute()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The event log, the config, the pages and what made them."""
    harness.need_binary()
    tmp = tmp_path_factory.mktemp("html")
    srv = RedisServer(tmp).start()
    log = str(tmp / "events.log")
    proxy = Ttlguard(tmp, srv.port, {"events": log, "event_window": 1}, sections=SECTIONS)
    try:
        proxy.start()
        send_violations(proxy.port)
        assert proxy.stop() == 0, proxy.stderr()          # the folded counts are written
        write_past_the_proxy(srv.port)

        d = {"dir": tmp, "log": log, "config": proxy.config_path,
             "report_html": str(tmp / "report.html"), "audit_html": str(tmp / "audit.html")}
        r = run("report", "--html", d["report_html"], log)
        assert r.returncode == 0, r.stderr
        d["report_text"] = r.stdout.decode()
        r = run("audit", "--config", proxy.config_path, "--memory", "--json",
                "--html", d["audit_html"])
        assert r.returncode == 1, r.stderr                  # leaked keys found
        d["audit"] = json.loads(r.stdout)
        d["leaks_html"] = leaks_page(tmp)
        yield d
    finally:
        proxy.stop()
        srv.stop()


def run(*args):
    return subprocess.run([harness.TTLG_BIN] + list(args), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=harness.slow(30))


def read_events(path):
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().splitlines()]


# --------------------------------------------------------------------------
# reading a page
# --------------------------------------------------------------------------

class Page(html.parser.HTMLParser):
    """What the tests look at: tables (rows of cell texts), figures (caption,
    number of <svg>, the texts and tooltips inside them, legend entries),
    paragraphs, every tag and attribute value."""

    def __init__(self, path):
        super().__init__(convert_charrefs=True)
        self.tags = []
        self.attrs = []
        self.tables = []
        self.figures = []
        self.texts = []
        self.paras = []
        self._cell = self._fig = self._para = None
        self._svg_depth = 0
        with open(path, encoding="utf-8") as f:
            self.source = f.read()
        self.feed(self.source)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(v or "" for _, v in attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "figure":
            self._fig = {"caption": "", "svgs": 0, "texts": [], "titles": [], "legend": [],
                         "none": False}
            self.figures.append(self._fig)
        elif tag == "svg" and self._fig is not None:
            self._fig["svgs"] += 1
        elif tag == "p":
            self._para = []
        elif tag == "span" and self._fig is not None:     # a legend entry
            self._fig["_span"] = []
        self._where = tag

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "figure":
            self._fig = None
        elif tag == "p" and self._para is not None:
            self.paras.append("".join(self._para))
            self._para = None
        elif tag == "span" and self._fig is not None and self._fig.get("_span") is not None:
            self._fig["legend"].append(" ".join("".join(self._fig.pop("_span")).split()))
        self._where = None

    def handle_data(self, data):
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._para is not None:
            self._para.append(data)
        if self._fig is not None:
            if self._where == "figcaption":
                self._fig["caption"] += data
            elif self._where == "text":
                self._fig["texts"].append(data)
            elif self._where == "title":
                self._fig["titles"].append(data)
            elif self._where == "p" and data == "(none)":
                self._fig["none"] = True
            if "_span" in self._fig:
                self._fig["_span"].append(data)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def figure(self, caption):
        found = [f for f in self.figures if f["caption"].startswith(caption)]
        assert len(found) == 1, (caption, [f["caption"] for f in self.figures])
        return found[0]

    def bars(self, caption):
        """A bar chart's (label, value text) pairs, top down."""
        t = self.figure(caption)["texts"]
        return list(zip(t[0::2], t[1::2]))

    def rows(self, head, nth=0, of=1):
        """The body rows of the nth of the `of` tables whose header row is head."""
        found = [t for t in self.tables if t and t[0] == head]
        assert len(found) == of, (head, [t[0] for t in self.tables if t])
        return found[nth][1:]


def assert_self_contained(page):
    low = page.source.lower()
    assert "<script" not in low
    assert "script" not in page.tags
    assert "http://" not in low and "https://" not in low
    assert not any(a.strip().lower().startswith(("http:", "https:", "//", "data:", "javascript:"))
                   for a in page.attrs)
    assert not any(t in page.tags for t in ("link", "img", "iframe", "object", "embed"))
    assert page.source.startswith("<!DOCTYPE html>")
    # Every chart is an inline <svg> under its caption (an empty one says "(none)").
    assert page.figures
    for f in page.figures:
        assert f["svgs"] == 1 or (f["svgs"] == 0 and f["none"]), f["caption"]


# --------------------------------------------------------------------------
# report --html
# --------------------------------------------------------------------------

def test_report_page(data):
    page = Page(data["report_html"])
    assert_self_contained(page)
    assert [f["caption"] for f in page.figures if f["svgs"] == 1] == [
        "Violations over time, by rule and action", "Violations by rule",
        "Top key patterns (folded as the audit folds them)", "Top keys"]
    events = read_events(data["log"])
    viol = [e for e in events if e["event"] == "violation"]

    def occ(**match):
        return sum(e.get("count", 1) for e in viol if all(e.get(k) == v for k, v in match.items()))

    want = {('ttl "session:"', "rewritten"): 7, ('ttl "counter:"', "logged"): 4,
            ('ttl "bin\\x00ary:"', "rejected"): 2}
    for (rule, action), n in want.items():
        assert occ(rule=rule, action=action) == n      # the log says what was sent

    # Totals, and the text report is still printed.
    totals = dict(page.rows(["", "count"]))
    assert totals["violations"] == "13"
    assert totals["writes to durable keys"] == "1"
    assert "Violations: 13" in data["report_text"]

    # The durable registry with its owner, the ttl rules.
    assert page.rows(["prefix", "owner", "reason", "rebuild"]) == [
        ['"billing:ledger:"', "payments & <billing>", "ledger of record",
         "replay ledger_entries from Postgres"]]
    rules = page.rows(["rule", "action", "ttl (s)", "max_ttl (s)", "refresh"])
    assert ['ttl "session:"', "rewrite", "900", "0", "allow"] in rules
    assert ['ttl "bin\\\\x00ary:"', "reject", "60", "0", "allow"] in rules   # as the text shows it

    # Over time: one stacked chart, a legend entry per (rule, action) with its total.
    over = page.figure("Violations over time")
    assert over["svgs"] == 1
    legend = over["legend"]
    for (rule, action), n in want.items():
        shown = rule.replace("\\", "\\\\")
        assert "%s %s %s %d" % (shown, DOT, action, n) in legend, legend
    # Each bar's tooltip: "<rule> · <action>, <time> UTC: <count>"; they add up.
    assert sum(int(t.rsplit(": ", 1)[1]) for t in over["titles"]) == 13
    times = {t.rsplit(", ", 1)[1].split(" UTC")[0] for t in over["titles"]}
    assert len(times) >= 3, over["titles"]          # a second apart: three bars at least

    # By rule: bars with the exact counts; the table by rule/command/effect/action.
    assert page.bars("Violations by rule") == [
        ('ttl "session:"', "7"), ('ttl "counter:"', "4"), ('ttl "bin\\\\x00ary:"', "2")]
    table = page.rows(["count", "rule", "command", "effect", "action"])
    for e in {(e["rule"], e["command"], e["effect"], e["action"]) for e in viol}:
        n = occ(rule=e[0], command=e[1], effect=e[2], action=e[3])
        assert [str(n), e[0].replace("\\", "\\\\"), e[1], e[2], e[3]] in table, table

    # Keys: patterns folded as the audit folds them, binary bytes made visible.
    lines_with = {}
    for e in viol:
        lines_with[e["rule"]] = lines_with.get(e["rule"], 0) + 1
    patterns = dict(page.bars("Top key patterns"))
    assert patterns["session:*:billableSecondsPending"] == str(lines_with['ttl "session:"'])
    assert patterns["counter:*"] == str(lines_with['ttl "counter:"'])
    assert patterns["bin\\x00ary:*"] == str(lines_with['ttl "bin\\x00ary:"'])
    keys = page.rows(["lines", "key", "rule"])
    assert ["1", '"bin\\x00ary:0"', 'ttl "bin\\\\x00ary:"'] in keys, keys
    assert len(page.figure("Top keys")["texts"]) == 2 * len(keys)

    durable = page.rows(["count", "event", "rule", "command"])
    assert durable == [["1", "durable_write", 'durable "billing:ledger:"', "SET"]]


def test_report_html_to_stdout_and_bad_path(data, tmp_path):
    r = run("report", "--html", "-", data["log"])
    assert r.returncode == 0
    assert r.stdout.startswith(b"<!DOCTYPE html>") and b"Violations:" not in r.stdout
    r = run("report", "--html", str(tmp_path / "no" / "such" / "dir.html"), data["log"])
    assert r.returncode == 2
    assert r.stdout == b"" and b"--html" in r.stderr


S, C, X, D = 'ttl "s:"', 'ttl "c:"', 'ttl "x:"', 'durable "d:"'


def audit_pass(ts, leaked, rules):
    """An audit_pass line as the proxy writes it: totals, and per rule its
    leaked keys (a durable rule has "registered" instead)."""
    items = [{"rule": D, "prefix": "d:", "expiring": 0, "expiring_change": None,
              "registered": 10, "registered_change": None}]
    items += [{"rule": r, "prefix": r[5:-1], "leaked": v[0], "leaked_change": v[1], "expiring": 4,
               "expiring_change": None} for r, v in rules.items()]
    for item, v in zip(items[1:], rules.values()):
        if len(v) > 2:                                  # audit_memory = on
            item.update(leaked_bytes=v[2], expiring_bytes=64)
    return {"ts": ts, "event": "audit_pass", "keys": 1000, "duration_ms": 20, "rate": 1000,
            "dbs": [{"db": 0, "leaked": leaked}], "leaked": leaked, "leaked_change": None,
            "expiring": 50, "registered": 10, "unregistered": 7, "rules": items,
            "leaked_patterns": [{"pattern": "s:*", "rule": S, "keys": 1}],
            "nodes": [{"node": "127.0.0.1:7000", "keys": 1000, "leaked": leaked}]}


def violation(ts, rule, action, count):
    return {"ts": ts, "event": "violation", "rule": rule, "command": "SET",
            "effect": "found-without-ttl" if action == "observed" else "creates-without-ttl",
            "action": action, "key": rule[5:-1] + "1", "count": count}


def leaks_page(tmp):
    """`report --html` of a log of background audit passes and violations
    whose numbers are known."""
    lines = [
        audit_pass("2026-12-01T10:00:00.000Z", 30, {S: (20, None), C: (10, None)}),
        audit_pass("2026-12-01T10:00:30.000Z", 31, {S: (21, 1), C: (10, 0)}),  # same bucket
        violation("2026-12-01T10:30:00.000Z", S, "rewritten", 5),
        violation("2026-12-01T10:31:00.000Z", S, "observed", 3),
        violation("2026-12-01T10:32:00.000Z", X, "rejected", 2),
        audit_pass("2026-12-01T11:00:00.000Z", 45, {S: (32, 11, 4096), C: (13, 3, 0)}),
    ]
    log = tmp / "audit-events.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"not": "closed"\n')
    out = tmp / "leaks.html"
    r = run("report", "--html", str(out), str(log))
    assert r.returncode == 0, r.stderr
    return str(out)


def test_report_leaks_per_rule_over_time(data):
    """audit_pass's nested "rules" read back: leaked keys per rule at each
    pass (a gauge: a bucket shows its last pass, the legend the latest
    value), next to each rule's violations and watcher findings."""
    page = Page(data["leaks_html"])
    assert_self_contained(page)

    per_rule = page.figure("Leaked keys per rule at each background audit pass")
    assert per_rule["svgs"] == 1
    assert per_rule["legend"] == ['%s 32' % S, '%s 13' % C]     # the latest pass, not a sum
    bars = sorted(t.replace(" UTC", "") for t in per_rule["titles"])
    assert bars == sorted(["%s, 2026-12-01 10:00:00: 21" % S, "%s, 2026-12-01 10:00:00: 10" % C,
                           "%s, 2026-12-01 11:00:00: 32" % S, "%s, 2026-12-01 11:00:00: 13" % C]), bars
    states = page.figure("Keys by state at each background audit pass")
    assert states["legend"] == ["leaked 45", "expiring 50", "registered 10", "unregistered 7"]

    assert page.rows(["rule", "leaked (last pass)", "change", "leaked bytes",
                      "violations (through the proxy)", "watcher findings"]) == [
        [S, "32", "+11", "4096", "5", "3"], [C, "13", "+3", "0", "0", "0"],
        [X, "-", "-", "-", "2", "0"]]
    assert "3 passes; the last: 1000 keys, 45 leaked" in page.paras
    # The same counts as the bars by rule: violations and findings together.
    assert page.bars("Violations by rule") == [(S, "8"), (X, "2")]


# --------------------------------------------------------------------------
# audit --html
# --------------------------------------------------------------------------

def test_audit_page(data):
    page = Page(data["audit_html"])
    assert_self_contained(page)
    assert [f["caption"] for f in page.figures if f["svgs"] == 1] == [
        "Keys by group", "Leaked keys by rule", "Leaked memory by rule",
        "Leaked keys by pattern", "Leaked memory by pattern", "Unregistered keys by pattern",
        "Unregistered memory by pattern", "Keys by remaining TTL"]
    j = data["audit"]
    leaked = j["scan"]["leaked"]
    assert leaked == 4 + 9 + 1                          # counters, sessions, bin\x00ary:7

    assert any(p.startswith("RESULT: %d leaked keys" % leaked) and p.endswith("(exit 1)")
               for p in page.paras), page.paras

    # Groups: the exact keys and bytes of each.
    groups = {row[0]: row for row in page.rows(
        ["group", "keys", "memory (bytes)", "<1m", "1m-1h", "1h-1d", "1d-7d", "7d-30d", ">30d",
         "types"])}
    names = {"leaked": "leaked", "expiring": "expiring", "registered": "registered (durable)",
             "registered_with_ttl": "durable with a TTL (!)",
             "unregistered": "unregistered persistent"}
    for g, text in names.items():
        row = groups[text]
        assert row[1] == str(j["groups"][g]["keys"])
        assert row[2] == str(j["groups"][g]["memory"])
        assert row[3:9] == [str(v) for v in j["groups"][g]["ttl"].values()]
    assert dict(page.bars("Keys by group"))["leaked"] == str(leaked)

    # Leaked keys and memory by rule.
    by_rule = [(r["rule"], r["no_ttl"]) for r in j["rules"] if r["wants_ttl"] and r["no_ttl"]["keys"]]
    assert page.bars("Leaked keys by rule") == [(r, str(t["keys"])) for r, t in by_rule]
    mem_bars = page.figure("Leaked memory by rule")
    assert len(mem_bars["titles"]) == len(by_rule)

    # Leaked keys by pattern: bars and the table, the binary key escaped.
    top = j["patterns"]["leaked"]["top"]
    assert [p for p, _ in page.bars("Leaked keys by pattern")] == [p["pattern"] for p in top]
    assert [v for _, v in page.bars("Leaked keys by pattern")] == [str(p["keys"]) for p in top]
    assert page.figure("Leaked memory by pattern")["svgs"] == 1
    head = ["keys", "memory (bytes)", "rule", "pattern", "example"]
    table = page.rows(head, 0, of=2)
    assert [[str(p["keys"]), str(p["memory"]), p["rule"], p["pattern"]] for p in top] == \
        [row[:4] for row in table[:len(top)]]
    assert any(row[3] == "bin\\x00ary:*" and row[4] == "bin\\x00ary:7" for row in table), table
    unreg = j["patterns"]["unregistered"]["top"]
    assert page.bars("Unregistered keys by pattern") == [(p["pattern"], str(p["keys"])) for p in unreg]
    assert [row[:4] for row in page.rows(head, 1, of=2)] == \
        [[str(p["keys"]), str(p["memory"]), p["rule"], p["pattern"]] for p in unreg]

    # The TTL distribution: the six buckets summed over the groups.
    want = {}
    for g in j["groups"].values():
        for b, n in g["ttl"].items():
            want[b] = want.get(b, 0) + n
    assert page.bars("Keys by remaining TTL") == [(b, str(n)) for b, n in want.items()]

    # The durable registry with its owner, and what the audit found under it.
    assert page.rows(["prefix", "owner", "reason", "rebuild", "registered keys",
                      "with a TTL (!)"]) == [
        ['"billing:ledger:"', "payments & <billing>", "ledger of record",
         "replay ledger_entries from Postgres", "1", "1"]]

    # Every rule with its counts.
    rules = {row[0]: row for row in page.rows(
        ["rule", "action", "rule ttl", "keys", "no ttl", "with ttl", "memory (bytes)",
         "problem keys", "example"])}
    for r in j["rules"]:
        row = rules[r["rule"]]
        assert row[4:6] == [str(r["no_ttl"]["keys"]), str(r["with_ttl"]["keys"])]


def test_audit_text_and_json_unchanged_by_html(data, tmp_path):
    """--html adds a file; stdout is what it was without it."""
    out = tmp_path / "a.html"
    plain = run("audit", "--config", data["config"])
    with_html = run("audit", "--config", data["config"], "--html", str(out))
    assert plain.returncode == with_html.returncode == 1

    def stable(text):   # timings differ from run to run
        return [l for l in text.decode().splitlines() if not l.startswith("audited ")]
    assert stable(plain.stdout) == stable(with_html.stdout)
    assert out.stat().st_size > 1000

    r = run("audit", "--config", data["config"], "--html", str(tmp_path / "no" / "dir.html"))
    assert r.returncode == 2 and r.stdout == b""
    assert b"--html" in r.stderr


# --------------------------------------------------------------------------
# rendered by Chromium
# --------------------------------------------------------------------------

def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    msg = "chromium is not installed (apt-get install chromium): pages not rendered"
    if os.environ.get("TTLG_CHROMIUM") == "installed":
        pytest.fail(msg + "; tests/run.sh installed it")
    pytest.skip(msg)


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def png_checks(path, width):
    """Not blank, and the charts' colors are on it."""
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) > 20000, "a %d-byte screenshot is too small to hold the page" % len(raw)
    assert png_size(raw)[0] == width
    try:
        from PIL import Image
    except ImportError:     # without python3-pil: the pixel data is not all one value
        chunks, i = b"", 8
        while i < len(raw):
            n, kind = struct.unpack(">I4s", raw[i:i + 8])
            if kind == b"IDAT":
                chunks += raw[i + 8:i + 8 + n]
            i += 12 + n
        assert len(set(zlib.decompress(chunks))) > 16
        return
    img = Image.open(path).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    colors = small.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 20, "a blank screenshot"
    white = sum(n for n, c in colors if c == (255, 255, 255))
    assert white < 0.98 * small.width * small.height, "nearly all white"
    # The bars: the palette's exact colors, in some thousands of pixels.
    hist = img.getcolors(maxcolors=1 << 24)
    for color in PALETTE[:3]:
        rgb = tuple(int(color[k:k + 2], 16) for k in (1, 3, 5))
        near = sum(n for n, c in hist if all(abs(a - b) <= 3 for a, b in zip(c, rgb)))
        assert near > 500, "no bars in %s on the screenshot (%d pixels)" % (color, near)


@pytest.mark.parametrize("which", ["report_html", "audit_html", "leaks_html"])
def test_page_renders_in_chromium(data, which):
    exe = chromium()
    png = str(data["dir"] / (which + ".png"))
    profile = str(data["dir"] / ("chromium-" + which))
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--user-data-dir=" + profile,
                        "--screenshot=" + png, "--window-size=1200,2000",
                        "file://" + data[which]],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=harness.slow(60), env=dict(os.environ, HOME=profile))
    assert os.path.exists(png), "no screenshot (exit %d): %s" % (r.returncode,
                                                              r.stderr.decode()[-2000:])
    png_checks(png, 1200)
