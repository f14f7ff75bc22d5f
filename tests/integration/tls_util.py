"""
TLS pieces for the integration suite (test_tls.py): certificates made with the
openssl CLI, a redis-server / valkey-server listening on TLS only, a TLS
client with harness.Conn's .cmd()/.reply(), and ttlguard with a TLS listener.

Certificates (make_certs(dir), once per test session; EC P-256 keys, so that
making them all takes a fraction of a second):

  ca, other_ca     two unrelated self-signed CAs
  server           CN ttlguard-test-server, SAN DNS:localhost IP:127.0.0.1,
                   signed by ca, serial 0x1001
  server_b         the same names, CN ttlguard-test-server-b, serial 0x1002
                   (the certificate a reload rotates to)
  wrong_name       SAN DNS:wrong.example only, signed by ca
  expired          localhost / 127.0.0.1, signed by ca, valid 2020-01-01 to
                   2020-01-02 (`openssl ca -startdate/-enddate`: OpenSSL 3.0's
                   `x509 -req` cannot backdate)
  other_server     localhost / 127.0.0.1 signed by other_ca
  client           client certificate (clientAuth) signed by ca
  other_client     client certificate signed by other_ca

Each of those is a Pair(cert, key) of paths; ca and other_ca too.

Every wait here is bounded: sockets carry timeouts, processes are polled
with deadlines and killed by PID (harness).
"""

import os
import re
import shutil
import socket
import ssl
import subprocess
import time

import pytest

import harness
from harness import Conn, Ttlguard, free_port, slow


class Pair:
    def __init__(self, cert, key):
        self.cert = cert
        self.key = key

    def __repr__(self):
        return "Pair(%r, %r)" % (self.cert, self.key)


class Certs:
    """Paths of the session's certificates (see the module docstring)."""

    def __init__(self, d):
        self.dir = d
        p = lambda name: Pair(os.path.join(d, name + ".crt"), os.path.join(d, name + ".key"))
        self.ca = p("ca")
        self.other_ca = p("other-ca")
        self.server = p("server")
        self.server_b = p("server-b")
        self.wrong_name = p("wrong-name")
        self.expired = p("expired")
        self.other_server = p("other-server")
        self.client = p("client")
        self.other_client = p("other-client")
        self.serial = {"server": 0x1001, "server_b": 0x1002}
        # Hashed directories (`openssl rehash`) holding one CA each.
        self.ca_dir = os.path.join(d, "ca-dir")
        self.other_ca_dir = os.path.join(d, "other-ca-dir")


REQ_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""

EXT_CNF = """\
[server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[wrong_name]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:wrong.example
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

# A minimal `openssl ca` setup: the only way OpenSSL 3.0's CLI backdates a
# certificate (-startdate/-enddate).
CA_CNF = """\
[ca]
default_ca = ca_default
[ca_default]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}/newcerts
serial = {dir}/serial
default_md = sha256
policy = policy_any
unique_subject = no
email_in_dn = no
[policy_any]
commonName = supplied
"""

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args, cwd=None):
    r = subprocess.run(["openssl"] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed (%d):\n%s%s"
                           % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r.stdout


def make_certs(d):
    """Write every certificate of Certs into directory d (made if needed)
    and return the Certs. Reuses a complete set already there."""
    os.makedirs(d, exist_ok=True)
    certs = Certs(d)
    done = os.path.join(d, ".complete")
    if os.path.exists(done):
        return certs
    req_cnf = os.path.join(d, "req.cnf")
    ext_cnf = os.path.join(d, "ext.cnf")
    with open(req_cnf, "w") as f:
        f.write(REQ_CNF)
    with open(ext_cnf, "w") as f:
        f.write(EXT_CNF)

    def ca(pair, cn):
        _openssl("req", "-x509", *EC, "-keyout", pair.key, "-out", pair.cert,
                 "-subj", "/CN=" + cn, "-days", "3650", "-config", req_cnf,
                 "-extensions", "v3_ca", "-set_serial", "1")

    def csr(pair, cn):
        path = pair.cert[:-4] + ".csr"
        _openssl("req", "-new", *EC, "-keyout", pair.key, "-out", path,
                 "-subj", "/CN=" + cn, "-config", req_cnf)
        return path

    def leaf(pair, cn, issuer, ext, serial):
        path = csr(pair, cn)
        _openssl("x509", "-req", "-in", path, "-CA", issuer.cert, "-CAkey", issuer.key,
                 "-set_serial", str(serial), "-days", "3650", "-sha256",
                 "-extfile", ext_cnf, "-extensions", ext, "-out", pair.cert)

    ca(certs.ca, "ttlguard test CA")
    ca(certs.other_ca, "ttlguard other test CA")
    leaf(certs.server, "ttlguard-test-server", certs.ca, "server", certs.serial["server"])
    leaf(certs.server_b, "ttlguard-test-server-b", certs.ca, "server", certs.serial["server_b"])
    leaf(certs.wrong_name, "wrong.example", certs.ca, "wrong_name", 0x1003)
    leaf(certs.other_server, "ttlguard-other-server", certs.other_ca, "server", 0x2001)
    leaf(certs.client, "ttlguard-test-client", certs.ca, "client", 0x1004)
    leaf(certs.other_client, "ttlguard-other-client", certs.other_ca, "client", 0x2002)

    # The expired one, through `openssl ca`.
    cadir = os.path.join(d, "openssl-ca")
    os.makedirs(os.path.join(cadir, "newcerts"), exist_ok=True)
    open(os.path.join(cadir, "index.txt"), "w").close()
    with open(os.path.join(cadir, "serial"), "w") as f:
        f.write("1005\n")
    ca_cnf = os.path.join(cadir, "ca.cnf")
    with open(ca_cnf, "w") as f:
        f.write(CA_CNF.format(dir=cadir))
    path = csr(certs.expired, "ttlguard-expired-server")
    _openssl("ca", "-batch", "-config", ca_cnf, "-cert", certs.ca.cert, "-keyfile", certs.ca.key,
             "-in", path, "-out", certs.expired.cert, "-notext",
             "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
             "-extfile", ext_cnf, "-extensions", "server")
    out = _openssl("x509", "-in", certs.expired.cert, "-noout", "-enddate")
    assert "2020" in out, out

    for pair, dirname in ((certs.ca, certs.ca_dir), (certs.other_ca, certs.other_ca_dir)):
        os.makedirs(dirname, exist_ok=True)
        shutil.copyfile(pair.cert, os.path.join(dirname, "ca.pem"))
        _openssl("rehash", dirname)
        assert any(re.match(r"^[0-9a-f]{8}\.0$", n) for n in os.listdir(dirname)), dirname
    open(done, "w").close()
    return certs


def cert_serial(path):
    """The serial number of a PEM certificate, as an int."""
    out = _openssl("x509", "-in", path, "-noout", "-serial")
    return int(out.strip().split("=", 1)[1], 16)


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------

def client_context(ca=None, cert=None, verify=True, tls13=True):
    """An SSLContext for a client: trusts the CA file `ca`, presents the
    Pair `cert` when given. An EOF without close_notify reads as EOF (b"")
    instead of raising, so that read_until_eof() works as on TCP."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        ctx.load_verify_locations(ca)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    if not tls13:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    return ctx


class TlsConn(Conn):
    """harness.Conn over TLS: the same .cmd(), .reply(), .read_until_eof()
    ... The handshake runs in the constructor, bounded by the timeout."""

    def __init__(self, port, ctx, server_hostname="localhost", host="127.0.0.1", timeout=10.0):
        super().__init__(port, host=host, timeout=timeout)
        raw = self.sock
        try:
            self.sock = ctx.wrap_socket(raw, server_hostname=server_hostname)
        except BaseException:
            raw.close()
            raise

    def read_until_eof(self, timeout=None):
        """As Conn's, and a TLS alert or unexpected EOF counts as the close."""
        try:
            return super().read_until_eof(timeout)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return b""

    def peer_serial(self):
        return int(self.sock.getpeercert()["serialNumber"], 16)


def tls_ping_ok(port, ctx, server_hostname="localhost"):
    """True when a TLS handshake on port works and PING gets any reply."""
    try:
        with TlsConn(port, ctx, server_hostname=server_hostname, timeout=1.0) as c:
            c.send(b"PING\r\n")
            data = b""
            while b"\r\n" not in data:
                d = c.sock.recv(256)
                if not d:
                    return False
                data += d
            return True
    except (OSError, ssl.SSLError, ValueError):
        return False


# --------------------------------------------------------------------------
# A redis-server / valkey-server on TLS only
# --------------------------------------------------------------------------

class TlsRedis(harness.RedisServer):
    """SERVER_BIN with --port 0 --tls-port P (port = P, the TLS port, so
    the harness's make_proxy(backend) and Ttlguard use it as the backend).
    auth_clients: redis's --tls-auth-clients (no, optional, yes). cert: the
    Pair it serves (default certs.server). plain=True adds a plain port too
    (plain_port) for the odd test that needs one."""

    def __init__(self, tmpdir, certs, auth_clients="no", cert=None, extra_args=(),
                 plain=False, name="tlsredis"):
        super().__init__(tmpdir, extra_args, name=name)
        self.certs = certs
        self.cert = cert or certs.server
        self.auth_clients = auth_clients
        self.plain_port = free_port() if plain else 0

    def args(self):
        return [harness.SERVER_BIN, "--port", str(self.plain_port),
                "--tls-port", str(self.port),
                "--tls-cert-file", self.cert.cert, "--tls-key-file", self.cert.key,
                "--tls-ca-cert-file", self.certs.ca.cert,
                "--tls-auth-clients", self.auth_clients,
                "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--daemonize", "no", "--logfile", self.logfile,
                "--enable-debug-command", "yes"] + self.extra_args

    def ctx(self):
        """A client context this server accepts (CA-signed client cert). It
        does not verify the server: some serve a bad certificate on purpose."""
        return client_context(cert=self.certs.client, verify=False)

    def conn(self, **kw):
        """A direct TLS connection to the server (with a client cert)."""
        return TlsConn(self.port, self.ctx(), **kw)

    def start(self, timeout=10.0):
        """Start and wait for a TLS PING, bounded by timeout (scaled by
        harness.slow). A start that times out (the server still running, no
        handshake and PING answered in time: a loaded machine) is retried
        once, from scratch, with three times the timeout; a server that
        exits fails at once. Raises RuntimeError (StartTimeout after the
        retry) with the server's log."""
        try:
            return self._start_once(timeout)
        except StartTimeout as first:
            try:
                return self._start_once(3 * timeout)
            except StartTimeout as e:
                raise StartTimeout("%s\n(the first start, with %ss, timed out too: %s)"
                                   % (e, slow(timeout), str(first).splitlines()[0]))

    def _start_once(self, timeout):
        self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=harness._die_with_parent)
        ctx = self.ctx()
        deadline = time.monotonic() + slow(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s (TLS) exited %s:\n%s" % (harness.SERVER_BIN,
                                                                self.proc.returncode, self.log()))
            # A server with requirepass answers -NOAUTH: that is "up" too.
            if tls_ping_ok(self.port, ctx):
                return self
            time.sleep(0.02)
        self.stop()
        raise StartTimeout("%s on TLS port %d not up in %ss\n%s"
                           % (harness.SERVER_BIN, self.port, slow(timeout), self.log()))


def cluster_node_tls_args(certs, tls_port, cert=None):
    """Options of a cluster node (redis-server / valkey-server) that serves
    TLS on tls_port beside its plain port, with the cluster bus and the
    replication over TLS too (tls-cluster, tls-replication): it shows cert
    (default certs.server), presents certs.client on its own connections to
    the other nodes, and asks its clients for no certificate (optional)."""
    cert = cert or certs.server
    return ["--tls-port", str(tls_port), "--tls-cluster", "yes", "--tls-replication", "yes",
            "--tls-cert-file", cert.cert, "--tls-key-file", cert.key,
            "--tls-ca-cert-file", certs.ca.cert,
            "--tls-client-cert-file", certs.client.cert,
            "--tls-client-key-file", certs.client.key, "--tls-auth-clients", "optional"]


class StartTimeout(RuntimeError):
    """A TLS server that kept running but did not answer in time."""


def server_built_with_tls(path=None):
    """True when the server binary (SERVER_BIN by default) has OpenSSL in it:
    built with BUILD_TLS=yes, as tests/servers.sh builds every server and
    Debian builds /usr/bin/redis-server. Such a server is expected to serve
    TLS; one without OpenSSL cannot (its TLS options only fail)."""
    path = shutil.which(path or harness.SERVER_BIN) or path or harness.SERVER_BIN
    with open(path, "rb") as f:
        return b"SSL_CTX_new" in f.read()


_server_tls = {}


def server_tls_problem(tmpdir, certs):
    """None when SERVER_BIN serves TLS; else (expected, reason): expected is
    True when the binary was built with TLS (server_built_with_tls), so that
    its failing to come up is a failure of the run, not a skip. Probed once
    per binary: start a TlsRedis (a start that times out is retried once with
    a longer timeout), PING it over TLS."""
    if harness.SERVER_BIN not in _server_tls:
        expected = server_built_with_tls()
        if not expected:
            _server_tls[harness.SERVER_BIN] = (
                False, "%s was built without TLS (no OpenSSL in the binary): it cannot serve "
                "TLS" % harness.SERVER_BIN)
        else:
            r = TlsRedis(tmpdir, certs, name="tlsprobe")
            try:
                r.start()
                _server_tls[harness.SERVER_BIN] = None
            except (RuntimeError, OSError) as e:
                _server_tls[harness.SERVER_BIN] = (
                    True, "%s was built with TLS (OpenSSL in the binary) but a TLS-only "
                    "server did not come up: %s" % (harness.SERVER_BIN, str(e)[-1500:]))
            finally:
                r.stop()
    return _server_tls[harness.SERVER_BIN]


def require_server_tls(tmpdir, certs):
    """Fail the test when SERVER_BIN, built with TLS, does not serve it
    (server_tls_problem); skip it only when SERVER_BIN was built without."""
    problem = server_tls_problem(tmpdir, certs)
    if problem:
        expected, why = problem
        if expected:
            pytest.fail(why)
        pytest.skip(why)


def tls_client_list(server):
    """CLIENT LIST of a TlsRedis as a list of dicts (direct TLS connection)."""
    with server.conn() as c:
        text = c.cmd("CLIENT", "LIST")
    return [dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
            for line in text.decode().splitlines()]


# --------------------------------------------------------------------------
# ttlguard with a TLS listener
# --------------------------------------------------------------------------

class TlsTtlguard(Ttlguard):
    """ttlguard whose config may carry tls_listen. plain=False writes
    `listen =` (empty): the TLS listener alone. start() waits for the plain
    listener's PING as the harness does (when there is one), and for a TLS
    handshake + PING on tls_listen (with ready_ctx: by default a client
    that trusts certs.ca and presents certs.client, which every
    tls_auth_clients mode accepts)."""

    def __init__(self, tmpdir, backend_port, certs, conf=None, sections="", plain=True,
                 ready_ctx=None, **kw):
        super().__init__(tmpdir, backend_port, conf, sections, **kw)
        self.certs = certs
        self.plain = plain
        self.ready_ctx = ready_ctx
        self.tls_port = None
        with open(self.config_path) as f:
            text = f.read()
        m = re.search(r"^tls_listen = 127\.0\.0\.1:(\d+)$", text, re.M)
        if m:
            self.tls_port = int(m.group(1))
        if not plain:
            text = text.replace("listen = 127.0.0.1:%d\n" % self.port, "listen =\n", 1)
            with open(self.config_path, "w") as f:
                f.write(text)

    def tls_ctx(self, cert="client"):
        """A client context for tls_listen: trusts certs.ca, presents the
        client certificate named (None: no certificate)."""
        return client_context(self.certs.ca.cert, getattr(self.certs, cert) if cert else None)

    def tls_conn(self, cert="client", **kw):
        return TlsConn(self.tls_port, self.tls_ctx(cert), **kw)

    def start(self, expect=None, timeout=10.0, ready="ping"):
        """ready="ping": the plain listener answers PING with a line starting
        with `expect` (None: any line), as the harness waits, and tls_listen
        answers PING over TLS. ready="accept": the listeners accept TCP
        connections, nothing more (for a proxy that is expected to answer
        nothing useful, so that the test itself sees what it answers)."""
        if ready == "ping" and self.plain:
            super().start(expect=expect, timeout=timeout)
            polls = []
        else:
            self.stderr_file = open(self.stderr_path, "ab")
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=self.stderr_file, stderr=self.stderr_file,
                                         env=self.env, preexec_fn=harness._die_with_parent)
            polls = [lambda: _accepts(self.port)] if self.plain else []
        if self.tls_port is not None:
            if ready == "ping":
                ctx = self.ready_ctx or self.tls_ctx()
                polls.append(lambda: tls_ping_ok(self.tls_port, ctx))
            else:
                polls.append(lambda: _accepts(self.tls_port))
        deadline = time.monotonic() + slow(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc, self.proc = self.proc.returncode, None
                self.stderr_file.close()
                raise RuntimeError("ttlguard exited %s at startup:\n%s" % (rc, self.stderr()))
            if all(poll() for poll in polls):
                return self
            time.sleep(0.05)
        harness._kill_hard(self.proc)
        self.proc = None
        self.stderr_file.close()
        raise RuntimeError("ttlguard (listen %d, tls_listen %s) not ready (%s) in %ss:\n%s"
                           % (self.port, self.tls_port, ready, slow(timeout), self.stderr()))


def _accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return True
    except OSError:
        return False


def silent_listener():
    """A loopback socket that listens and never accepts: the kernel
    completes TCP handshakes, nobody ever answers a TLS ClientHello.
    Returns the socket (close it when done)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", free_port()))
    s.listen(64)
    return s
