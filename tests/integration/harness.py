"""
Integration harness: real redis-server and ttlguard processes on free loopback
ports, raw RESP sockets, and a RESP2/RESP3 reply framer.

Everything here is bounded in time: processes are polled with deadlines and
killed by PID, sockets carry timeouts. Nothing listens on a fixed port: a free
port is found by binding to port 0 and reading it back.

Environment:
  TTLG_BIN       ttlguard binary (default <repo>/build/ttlguard). When it is
                 set explicitly and missing, proxy tests fail instead of skip.
  TTLG_VALGRIND  run ttlguard under valgrind (memory bounds are then not
                 measured: valgrind's own heap dominates VmRSS).
  TTLG_PROXY_CONF  extra [proxy] keys for every ttlguard the suite starts,
                 "key=value;key=value" (e.g. "max_buffer=16kb" to run the
                 whole suite with small buffers); a test's own keys win.
  TTLG_SLOW      multiplier for every timeout (default 1; 3 for an ASan build,
                 5 under valgrind).
  TTLG_REDIS_SERVER  the server binary RedisServer starts (default
                 "redis-server" from PATH, Debian 12's Redis 7.0): a path to
                 another redis-server or a valkey-server (tests/servers.sh
                 builds and prints the ones ttlguard is tested against). Both
                 take the same command line. Tests that depend on which server
                 it is ask server_identity().
"""

import os
import re
import signal
import socket
import subprocess
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_BIN = os.path.join(REPO, "build", "ttlguard")
TTLG_BIN = os.environ.get("TTLG_BIN", DEFAULT_BIN)
TTLG_BIN_EXPLICIT = "TTLG_BIN" in os.environ


def need_binary():
    """The ttlguard binary, or the test cannot run: a failure when TTLG_BIN
    names it (the test command does), else a skip with the reason."""
    if os.path.exists(TTLG_BIN):
        return
    msg = "ttlguard binary %s does not exist (build it or set TTLG_BIN)" % TTLG_BIN
    if TTLG_BIN_EXPLICIT:
        pytest.fail(msg)
    pytest.skip(msg)
VALGRIND = bool(os.environ.get("TTLG_VALGRIND"))

SERVER_BIN = os.environ.get("TTLG_REDIS_SERVER") or "redis-server"
REDIS_SERVER = SERVER_BIN   # the older name


def binary_is_sanitized(path):
    """True for an ASan build (its RSS includes ASan's quarantine/shadow)."""
    try:
        with open(path, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


SANITIZED = binary_is_sanitized(TTLG_BIN)
EXTRA_CONF = dict(kv.split("=", 1) for kv in os.environ.get("TTLG_PROXY_CONF", "").split(";")
                  if "=" in kv)
SLOW = float(os.environ.get("TTLG_SLOW", "5" if VALGRIND else "3" if SANITIZED else "1"))


def slow(seconds):
    """A timeout scaled for slow builds (valgrind, sanitizers)."""
    return seconds * SLOW


_ports_given = set()


def free_port():
    """A loopback port nobody listens on right now (bind to 0, read it), and
    not one this process was given before: a port reserved for a server that
    is not started yet (a backend that is down) is free to the kernel, and
    handing it out again would point a proxy at itself."""
    for _ in range(100):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port not in _ports_given:
            _ports_given.add(port)
            return port
    raise RuntimeError("no fresh loopback port in 100 tries")


def vmrss_kb(pid):
    """Resident set size of a process in kB, from /proc/PID/status."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


# --------------------------------------------------------------------------
# RESP encoding and a reply framer (RESP2 + RESP3)
# --------------------------------------------------------------------------

def enc(*args):
    """Encode one command as a RESP multibulk."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n" % len(a))
        out.append(a)
        out.append(b"\r\n")
    return b"".join(out)


class RespError(bytes):
    """A -ERR / !bulk error reply (its text without the leading '-')."""


class RespMap(list):
    """A RESP3 map (%), kept as a list of (key, value) pairs."""


class RespSet(list):
    """A RESP3 set (~)."""


class RespPush(list):
    """A RESP3 push (>)."""


class RespDouble(bytes):
    """A RESP3 double (,), kept as its text (inf, -inf, nan stay exact)."""


class RespBig(int):
    """A RESP3 big number (()."""


class RespVerbatim(bytes):
    """A RESP3 verbatim string (=), including its 'txt:' prefix."""


class RespAttr:
    """A RESP3 attribute (|) and the reply it is attached to."""

    def __init__(self, attrs, value):
        self.attrs = attrs
        self.value = value

    def __repr__(self):
        return "RespAttr(%r, %r)" % (self.attrs, self.value)


class Incomplete(Exception):
    pass


class RespReader:
    """Splits a byte stream into replies. get() returns (value, raw_bytes)
    or None when more input is needed. raw_bytes are the exact bytes of the
    reply, so that the proxy's output can be compared byte for byte."""

    def __init__(self):
        self.buf = bytearray()
        self.pos = 0

    def feed(self, data):
        if self.pos > 1 << 20 and self.pos > len(self.buf) // 2:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += data

    def pending(self):
        return len(self.buf) - self.pos

    def _line(self, p):
        e = self.buf.find(b"\r\n", p)
        if e < 0:
            raise Incomplete()
        return bytes(self.buf[p:e]), e + 2

    def _parse(self, p):
        if p >= len(self.buf):
            raise Incomplete()
        t = chr(self.buf[p])
        line, p = self._line(p + 1)
        if t == "+":
            return line, p
        if t == "-":
            return RespError(line), p
        if t == ":":
            return int(line), p
        if t == "(":
            return RespBig(int(line)), p
        if t == ",":
            return RespDouble(line), p
        if t == "#":
            if line not in (b"t", b"f"):
                raise ValueError("bad boolean %r" % line)
            return line == b"t", p
        if t == "_":
            if line:
                raise ValueError("bad null %r" % line)
            return None, p
        if t in "$=!":
            n = int(line)
            if n < 0:
                return None, p
            if len(self.buf) < p + n + 2:
                raise Incomplete()
            if self.buf[p + n : p + n + 2] != b"\r\n":
                raise ValueError("bulk not terminated by CRLF")
            data = bytes(self.buf[p : p + n])
            p += n + 2
            if t == "=":
                return RespVerbatim(data), p
            if t == "!":
                return RespError(data), p
            return data, p
        if t in "*~>":
            n = int(line)
            if n < 0:
                return None, p
            items = []
            for _ in range(n):
                v, p = self._parse(p)
                items.append(v)
            if t == "~":
                return RespSet(items), p
            if t == ">":
                return RespPush(items), p
            return items, p
        if t in "%|":
            n = int(line)
            pairs = []
            for _ in range(n):
                k, p = self._parse(p)
                v, p = self._parse(p)
                pairs.append((k, v))
            if t == "|":
                # An attribute is followed by the reply it annotates.
                v, p = self._parse(p)
                return RespAttr(RespMap(pairs), v), p
            return RespMap(pairs), p
        raise ValueError("unknown RESP type byte %r at %d" % (t, p - 1))

    def get(self):
        try:
            v, p = self._parse(self.pos)
        except Incomplete:
            return None
        raw = bytes(self.buf[self.pos : p])
        self.pos = p
        return v, raw


class Conn:
    """A raw TCP connection speaking RESP, with deadlines on every read."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.timeout = slow(timeout)
        self.sock = socket.create_connection((host, port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = RespReader()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def cmd(self, *args):
        self.send(enc(*args))
        return self.reply()

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete reply within %.1fs (have %d bytes: %r)"
                               % (self.timeout, self.reader.pending(),
                                  bytes(self.reader.buf[self.reader.pos:self.reader.pos + 200])))
        self.sock.settimeout(left)
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("connection closed (pending %r)"
                           % bytes(self.reader.buf[self.reader.pos:self.reader.pos + 200]))
        self.reader.feed(data)

    def reply_raw(self, timeout=None):
        """Next reply as (value, raw bytes)."""
        deadline = time.monotonic() + (slow(timeout) if timeout else self.timeout)
        while True:
            r = self.reader.get()
            if r is not None:
                return r
            self._fill(deadline)

    def reply(self, timeout=None):
        return self.reply_raw(timeout)[0]

    def replies(self, n, timeout=None):
        deadline = time.monotonic() + (slow(timeout) if timeout else self.timeout)
        out = []
        while len(out) < n:
            r = self.reader.get()
            if r is not None:
                out.append(r[0])
                continue
            self._fill(deadline)
        return out

    def read_exact(self, n, timeout=None):
        """n raw bytes (what the reader buffered first, then the socket),
        as a bytearray: recv_into a preallocated buffer keeps 100 MB reads
        fast."""
        deadline = time.monotonic() + (slow(timeout) if timeout else self.timeout)
        out = bytearray(n)
        have = min(n, self.reader.pending())
        out[:have] = self.reader.buf[self.reader.pos : self.reader.pos + have]
        self.reader.pos += have
        view = memoryview(out)
        while have < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("read_exact: %d of %d bytes" % (have, n))
            self.sock.settimeout(left)
            got = self.sock.recv_into(view[have:], n - have)
            if not got:
                raise EOFError("read_exact: EOF after %d of %d bytes" % (have, n))
            have += got
        return out

    def read_until_eof(self, timeout=None):
        """Everything left until the peer closes. Raises TimeoutError when
        the peer keeps the connection open."""
        deadline = time.monotonic() + (slow(timeout) if timeout else self.timeout)
        out = bytearray(self.reader.buf[self.reader.pos :])
        self.reader.pos = len(self.reader.buf)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("peer did not close; got %r" % bytes(out[:300]))
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return bytes(out)
            if not data:
                return bytes(out)
            out += data

    def assert_silent(self, seconds):
        """Nothing arrives for `seconds`, scaled like every time limit here
        (slow()), and the connection stays open. A reply that comes later
        still is caught by the caller: every test reads and checks the next
        reply on the connection after it."""
        seconds = slow(seconds)
        assert self.reader.pending() == 0, "unexpected buffered bytes %r" % bytes(
            self.reader.buf[self.reader.pos:])
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return
        raise AssertionError("expected silence, got %r" % data)


def session_bytes(port, chunks, timeout=10.0):
    """Send each chunk of a scripted session, read the replies a chunk owes
    (chunks are (bytes, n_replies)), and return every reply's raw bytes."""
    out = []
    with Conn(port, timeout=timeout) as c:
        for data, n in chunks:
            c.send(data)
            for _ in range(n):
                out.append(c.reply_raw()[1])
    return out


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

def _die_with_parent():
    """preexec_fn: SIGKILL the child when the test process dies, so that a
    killed pytest leaves no redis-server or ttlguard behind."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_exit(proc, timeout):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def _kill_hard(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _ping_ok(port, expect=b"+PONG"):
    """True when port accepts and answers PING with a line starting with
    `expect` (any reply at all when expect is None)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            data = b""
            while b"\r\n" not in data:
                d = s.recv(256)
                if not d:
                    return False
                data += d
            return expect is None or data.startswith(expect)
    except OSError:
        return False


class RedisServer:
    """A redis-server (or valkey-server: SERVER_BIN, from TTLG_REDIS_SERVER)
    on a free loopback port, killed by PID at teardown. restart() brings it
    back on the same port (for backend-restart tests)."""

    def __init__(self, tmpdir, extra_args=(), port=None, name="redis"):
        self.port = port or free_port()
        self.dir = os.path.join(str(tmpdir), "%s-%d" % (name, self.port))
        os.makedirs(self.dir, exist_ok=True)
        self.extra_args = list(extra_args)
        self.proc = None
        self.logfile = os.path.join(self.dir, "redis.log")

    @property
    def pid(self):
        return self.proc.pid

    def start(self, timeout=10.0):
        args = [SERVER_BIN, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no", "--logfile", self.logfile,
                "--enable-debug-command", "yes"] + self.extra_args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        # A server with requirepass answers PING with -NOAUTH: that is "up" too.
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %s:\n%s" % (SERVER_BIN, self.proc.returncode,
                                                          self.log()))
            if _ping_ok(self.port, expect=None):
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("%s on %d not up in %ss\n%s" % (SERVER_BIN, self.port, timeout,
                                                                 self.log()))

    def stop(self):
        """Kill at once (SIGKILL): a crash as far as its clients can tell."""
        if self.proc is not None:
            _kill_hard(self.proc)
            self.proc = None

    def restart(self):
        self.stop()
        return self.start()

    def log(self):
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""


class Ttlguard:
    """ttlguard with a generated config file, stderr captured to a file.
    stop() sends SIGTERM and returns the exit status (SIGKILL after a bounded
    wait, reported as None)."""

    def __init__(self, tmpdir, backend_port, conf=None, sections="", port=None,
                 env=None, backend_addr=None):
        self.port = port or free_port()
        self.dir = os.path.join(str(tmpdir), "ttlguard-%d" % self.port)
        os.makedirs(self.dir, exist_ok=True)
        self.config_path = os.path.join(self.dir, "ttlguard.ini")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.proc = None
        self.env = dict(os.environ)
        if env:
            self.env.update(env)
        lines = ["[proxy]",
                 "listen = 127.0.0.1:%d" % self.port,
                 "backend = %s" % (backend_addr or "127.0.0.1:%d" % backend_port)]
        keys = {k.strip(): v.strip() for k, v in EXTRA_CONF.items()}
        keys.update(conf or {})
        for k, v in keys.items():
            lines.append("%s = %s" % (k, v))
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n" + sections)

    @property
    def pid(self):
        return self.proc.pid

    def command(self):
        cmd = [TTLG_BIN, "--config", self.config_path]
        if VALGRIND:
            cmd = ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full",
                   "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite"] + cmd
        return cmd

    def start(self, expect=None, timeout=10.0):
        """Start and wait until the port answers PING with a line starting
        with `expect`; None accepts any reply (-NOAUTH from a backend with a
        password, -ERR from a proxy whose backend is down on purpose)."""
        self.stderr_file = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=self.stderr_file, stderr=self.stderr_file,
                                     env=self.env, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + slow(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc, self.proc = self.proc.returncode, None
                self.stderr_file.close()
                raise RuntimeError("ttlguard exited %s at startup:\n%s" % (rc, self.stderr()))
            if _ping_ok(self.port, expect=expect):
                return self
            time.sleep(0.05)
        _kill_hard(self.proc)
        self.proc = None
        self.stderr_file.close()
        raise RuntimeError("ttlguard on %d not answering PING in %ss:\n%s"
                           % (self.port, slow(timeout), self.stderr()))

    def send_signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=10.0, sig=signal.SIGTERM):
        """Send sig (None: send nothing, it was sent already) and wait,
        bounded. Returns the exit status, or None when it had to be killed."""
        if self.proc is None:
            return 0
        proc, self.proc = self.proc, None
        if sig is not None and proc.poll() is None:
            proc.send_signal(sig)
        rc = _wait_exit(proc, slow(timeout))
        if rc is None:
            _kill_hard(proc)
        self.stderr_file.close()
        return rc

    def stderr(self):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()[-8000:]
        except OSError:
            return ""


def wait_for(pred, timeout, what, interval=0.02):
    """Poll pred() until true; fail with `what` after timeout seconds."""
    deadline = time.monotonic() + slow(timeout)
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s" % (slow(timeout), what))


_identity_cache = {}


def server_identity(port, password=None):
    """(name, version) of the server on port, from INFO server on a direct
    connection (AUTH password first, for a server with requirepass):
    ("redis", (7, 0, 15)) or ("valkey", (9, 1, 2)). Valkey reports
    redis_version:7.2.4 for compatibility; its own version is valkey_version
    (and server_name:valkey). Cached per port and binary."""
    key = (port, SERVER_BIN)
    if key not in _identity_cache:
        with Conn(port) as c:
            if password is not None:
                r = c.cmd("AUTH", password)
                if r != b"OK":
                    raise RuntimeError("AUTH on %d: %r" % (port, r))
            text = c.cmd("INFO", "server")
        if isinstance(text, RespError):
            raise RuntimeError("INFO server on %d: %r" % (port, text))
        fields = dict(line.split(":", 1) for line in text.decode().splitlines()
                      if ":" in line)
        if fields.get("server_name") == "valkey" or "valkey_version" in fields:
            name, version = "valkey", fields["valkey_version"]
        else:
            name, version = "redis", fields["redis_version"]
        _identity_cache[key] = (name, tuple(int(x) for x in version.split(".")))
    return _identity_cache[key]


def server_bin_identity():
    """(name, version) of SERVER_BIN from its --version line ("Redis server
    v=8.0.6 ...", "Valkey server v=9.1.2 ..."), without starting it: for test
    collection, which must know the server before any test runs."""
    if SERVER_BIN not in _identity_cache:
        out = subprocess.run([SERVER_BIN, "--version"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
        m = re.search(r"^(\w+) server v=(\d+)\.(\d+)\.(\d+)", out)
        if m is None:
            raise RuntimeError("%s --version: %r" % (SERVER_BIN, out))
        _identity_cache[SERVER_BIN] = (m.group(1).lower(),
                                       tuple(int(m.group(i)) for i in (2, 3, 4)))
    return _identity_cache[SERVER_BIN]


def wait_blocked(port, cmd, timeout=5):
    """Until a client of the server on port is blocked in cmd (CLIENT LIST:
    cmd=blpop, flags with b): the condition a test that sent it waits for."""
    def blocked():
        return any(c.get("cmd") == cmd and "b" in c.get("flags", "")
                   for c in client_list(port))
    wait_for(blocked, timeout, "a client blocked in %s on %d" % (cmd.upper(), port))


def wait_busy(port, timeout=5):
    """Until the server on port is busy running a command that holds it
    (DEBUG SLEEP, a long script): a PING on a new connection gets no answer
    within 50 ms. The PING is answered when the server is free again."""
    def busy():
        with Conn(port, timeout=slow(5)) as c:
            c.send(enc("PING"))
            try:
                c.reply(timeout=0.05)
                return False
            except TimeoutError:
                return True
    wait_for(busy, timeout, "the server on %d to be busy" % port)


def client_list(port):
    """CLIENT LIST of a redis-server as a list of dicts (direct connection)."""
    with Conn(port) as c:
        text = c.cmd("CLIENT", "LIST")
    out = []
    for line in text.decode().splitlines():
        d = {}
        for field in line.split(" "):
            if "=" in field:
                k, v = field.split("=", 1)
                d[k] = v
        out.append(d)
    return out

