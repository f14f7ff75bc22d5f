"""
Client authentication answered by ttlguard (client_password, [user]
sections), protected mode, the admin token, and the limits that hold before
and after a login.

ttlguard answers these itself in the words of the server it fronts
(proxy/login.c), so every reply before and around a login is compared byte
for byte with that very server (TTLG_REDIS_SERVER) started with
--requirepass, or with the same ACL users: ttlguard with client_password in
front of a server without a password must say what that server says. So is
the -DENIED line of protected mode, and the pre-AUTH limits ttlguard
mirrors in front of a server with requirepass. Logins as [user] sections
with a backend login of their own are checked against the server's own ACL
WHOAMI, in both connection modes (multiplex on and off).
"""

import concurrent.futures
import hashlib
import http.client
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

PW = "s3cret"
A = enc("AUTH", PW)


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def send_raw(port, payload, wait=0.2):
    """Everything the server says to payload until `wait` seconds of silence
    (scaled like every time limit here: slow builds answer later), "<EOF>"
    when it closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=harness.slow(wait))
    data = b""
    try:
        s.sendall(payload)
        while True:
            d = s.recv(65536)
            if not d:
                data += b"<EOF>"
                break
            data += d
    except socket.timeout:
        pass
    except ConnectionResetError:
        data += b"<EOF>"
    finally:
        s.close()
    return re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"$2\r\nid\r\n:ID\r\n", data)


def both_raw(direct_port, proxy_port, payload):
    """send_raw() to both at once, (direct, proxy): each waits for silence,
    and one wait for the two is half the suite's time. When they differ, once
    more with five times the wait: on a loaded machine a server's first byte
    can come after 0.2 s of silence (each case is a fresh connection that
    changes nothing another case sees)."""
    got = None
    for wait in (0.2, 1.0):
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            d = ex.submit(send_raw, direct_port, payload, wait)
            p = ex.submit(send_raw, proxy_port, payload, wait)
            got = d.result(), p.result()
        if got[0] == got[1]:
            break
    return got


def identified(proxy):
    """Wait until the proxy has read who its backend is (its words come from
    that: login.c) and what commands it has."""
    wait_for(lambda: "backend: " in proxy.stderr(), 10, "the backend to be identified")
    return proxy


# What a client may send around its login; each is sent on a fresh
# connection to both servers.
CASES = [
    ("command before AUTH", enc("GET", "k")),
    ("unknown command", enc("FOO", "a", "b")),
    ("unknown command, long args", enc("FOO", "a" * 100, "b" * 100, "c")),
    ("unknown command, CRLF in args", enc("FO\r\nO", "a\r\nb")),
    ("unknown command without args", enc("FOO")),
    ("unknown command, NUL in args", enc("FOO", "a\0b", "c")),
    ("unknown command, NUL in name", enc("FO\0O", "a")),
    ("unknown command, inline", b"FOO bar\r\n"),
    ("wrong arity before AUTH", enc("GET")),
    ("container alone", enc("CONFIG")),
    ("unknown subcommand", enc("CONFIG", "FOO")),
    ("unknown subcommand, CRLF", enc("CONFIG", "a\r\nb")),
    ("subcommand, wrong arity", enc("CONFIG", "GET")),
    ("subcommand before AUTH", enc("CONFIG", "GET", "x")),
    ("subcommand as a command", enc("config|get", "x")),
    ("POST", b"POST / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("Host:", enc("Host:", "x")),
    ("PING, then POST", b"PING\r\nPOST / HTTP/1.1\r\n"),
    ("AUTH without args", enc("AUTH")),
    ("AUTH with 3 args", enc("AUTH", "a", "b", "c")),
    ("AUTH wrong", enc("AUTH", "nope")),
    ("AUTH default wrong", enc("AUTH", "default", "nope")),
    ("AUTH unknown user", enc("AUTH", "bob", PW)),
    ("AUTH empty", enc("AUTH", "")),
    ("AUTH as the cluster's internal connection", enc("AUTH", "internal connection", "x")),
    ("wrong AUTH, then AUTH", enc("AUTH", "x") + A + enc("PING")),
    ("NOAUTH, then a wrong AUTH", enc("GET", "k") + enc("AUTH", "x") + A + enc("PING")),
    ("AUTH", A + enc("GET", "k")),
    ("AUTH default", enc("AUTH", "default", PW) + enc("PING")),
    ("auth lowercase, inline", b"auth " + PW.encode() + b"\r\nPING\r\n"),
    ("inline PING", b"PING\r\n"),
    ("empty inline line", b"\r\n" + enc("PING")),
    ("HELLO", enc("HELLO")),
    ("HELLO 3", enc("HELLO", "3") + enc("PING")),
    ("HELLO 2", enc("HELLO", "2")),
    ("HELLO SETNAME without AUTH", enc("HELLO", "3", "SETNAME", "x") + enc("PING")),
    ("HELLO 3 AUTH wrong", enc("HELLO", "3", "AUTH", "default", "x") + enc("PING")),
    ("HELLO 3 AUTH", enc("HELLO", "3", "AUTH", "default", PW) + enc("PING") +
     enc("HGETALL", "nokey")),
    ("HELLO 2 AUTH", enc("HELLO", "2", "AUTH", "default", PW) + enc("HGETALL", "nokey")),
    ("HELLO 4 AUTH", enc("HELLO", "4", "AUTH", "default", PW)),
    ("HELLO x AUTH", enc("HELLO", "x", "AUTH", "default", PW)),
    ("HELLO AUTH without password", enc("HELLO", "3", "AUTH", "default")),
    ("HELLO SETNAME then AUTH", enc("HELLO", "3", "SETNAME", "n", "AUTH", "default", PW) +
     enc("CLIENT", "GETNAME")),
    ("HELLO bad SETNAME after AUTH", enc("HELLO", "3", "AUTH", "default", PW, "SETNAME", "a b") +
     enc("HGETALL", "nokey")),
    ("HELLO bad SETNAME before AUTH", enc("HELLO", "3", "SETNAME", "a b", "AUTH", "default", PW) +
     enc("PING")),
    ("HELLO bad option before AUTH", enc("HELLO", "3", "FOO", "AUTH", "default", PW) + enc("PING")),
    ("HELLO bad option after AUTH", enc("HELLO", "3", "AUTH", "default", PW, "FOO") +
     enc("HGETALL", "x")),
    ("HELLO two SETNAMEs", enc("HELLO", "3", "AUTH", "default", PW, "SETNAME", "x", "SETNAME",
                               "y") + enc("CLIENT", "GETNAME")),
    ("HELLO long bad option", enc("HELLO", "3", "X" * 300)),
    ("HELLO bad option with a NUL", enc("HELLO", "3", "AU\0TH", "default", PW)),
    ("HELLO AUTH with a NUL", enc("HELLO", "3", "AUTH\0x", "default", PW) + enc("PING")),
    ("HELLO AUTH right, then wrong", enc("HELLO", "3", "AUTH", "default", PW, "AUTH", "default",
                                         "x") + enc("PING")),
    ("HELLO AUTH wrong, then right", enc("HELLO", "3", "AUTH", "default", "x", "AUTH", "default",
                                         PW) + enc("PING")),
    ("QUIT", enc("QUIT")),
    ("RESET", enc("RESET")),
    ("RESET with an arg", enc("RESET", "x")),
    ("AUTH, RESET, GET", A + enc("RESET") + enc("GET", "k")),
    ("AUTH, RESET, HELLO 3, AUTH", A + enc("RESET") + enc("HELLO", "3") + A + enc("PING")),
    ("wrong AUTH after a login", A + enc("AUTH", "bad") + enc("PING")),
    ("wrong HELLO AUTH after a login", A + enc("HELLO", "3", "AUTH", "default", "bad") +
     enc("PING")),
    ("AUTH, wrong AUTH, GET", A + enc("AUTH", "x") + enc("GET", "k")),
    ("AUTH under CLIENT REPLY OFF", A + enc("CLIENT", "REPLY", "OFF") + A + enc("AUTH", "bad") +
     enc("CLIENT", "REPLY", "ON") + enc("PING")),
    ("multibulk of 10 before AUTH", enc("AUTH", *["x"] * 9)),
    ("multibulk of 11 before AUTH", b"*11\r\n"),
    ("bulk of 16384 before AUTH", enc("AUTH", "x" * 16384)),
    ("bulk of 16385 before AUTH", b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"),
    ("multibulk of 11 after AUTH", A + enc("DEL", *["k"] * 10)),
    ("multibulk of 11 after AUTH and RESET", A + enc("RESET") + enc("DEL", *["k"] * 10)),
    ("multibulk of 11 after AUTH, RESET, inline PING", A + enc("RESET") + b"PING\r\n" +
     enc("DEL", *["k"] * 10)),
]


@pytest.fixture(params=["on", "off"])
def multiplex(request):
    return request.param


@pytest.fixture
def requirepass_pair(make_redis, make_proxy, multiplex):
    """(redis-server --requirepass PW, ttlguard client_password = PW in front
    of a server without one)."""
    direct = make_redis(["--requirepass", PW])
    plain = make_redis()
    proxy = make_proxy(plain, {"client_password": PW, "multiplex": multiplex}, expect=None)
    return direct, identified(proxy)


@pytest.mark.parametrize("name,payload", CASES, ids=[c[0] for c in CASES])
def test_replies_match_requirepass(requirepass_pair, name, payload):
    direct, proxy = requirepass_pair
    want, got = both_raw(direct.port, proxy.port, payload)
    assert got == want


def test_known_name_and_a_nul(requirepass_pair):
    """GET\\0: the server hashes every byte of a name but compares names with
    strcasecmp, which stops at the NUL. So it finds GET only when the two
    hash to the same bucket under its random seed (about one process in 256:
    then -NOAUTH), and otherwise answers what ttlguard always answers. Not
    a byte comparison with one server process: its answer is chance."""
    direct, proxy = requirepass_pair
    payload = enc("GET\0", "k")
    got = send_raw(proxy.port, payload)
    # A name that never matches shows the server's order of checks: Valkey
    # 9.1 answers -NOAUTH before looking the name up at all.
    never = send_raw(direct.port, enc("ZZZ\0", "k"))
    if never.startswith(b"-NOAUTH"):
        assert got == never
    else:
        assert got.startswith(b"-ERR unknown command 'GET'"), got
    assert send_raw(direct.port, payload) in (got, b"-NOAUTH Authentication required.\r\n")


# A failed login after a reply the client has already read is answered on
# every server (Redis 8.0 and 8.6, Valkey 8.1 say nothing only while an
# earlier reply is pending: the pipelined cases above).
SEQUENCES = [
    ("AUTH, then a wrong AUTH", [(A, 1), (enc("AUTH", "bad"), 1), (enc("PING"), 1)]),
    ("AUTH, then a wrong HELLO AUTH", [(A, 1), (enc("HELLO", "2", "AUTH", "default", "x"), 1),
                                       (enc("PING"), 1)]),
    ("GET, then a wrong AUTH", [(enc("GET", "k"), 1), (enc("AUTH", "x"), 1), (A, 1)]),
]


@pytest.mark.parametrize("name,chunks", SEQUENCES, ids=[c[0] for c in SEQUENCES])
def test_sequences_match_requirepass(requirepass_pair, name, chunks):
    direct, proxy = requirepass_pair
    assert harness.session_bytes(proxy.port, chunks) == harness.session_bytes(direct.port, chunks)


# Before a login, in front of a server with requirepass and no client
# authentication, ttlguard answers one thing itself: the pre-AUTH limits it
# mirrors (more than 10 arguments, bulks over 16384 bytes), which must end
# where Redis's end: at the request after a good AUTH, again after RESET.
LIMIT_CASES = [c for c in CASES if "multibulk" in c[0] or "bulk of" in c[0]] + [
    ("wrong AUTH, then multibulk of 11", enc("AUTH", "x") + enc("DEL", *["k"] * 10)),
]


@pytest.mark.parametrize("name,payload", LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_mirrored_limits_match_requirepass(make_redis, make_proxy, multiplex, name, payload):
    direct = make_redis(["--requirepass", PW])
    proxy = make_proxy(direct, {"multiplex": multiplex}, expect=None)
    want, got = both_raw(direct.port, proxy.port, payload)
    assert got == want


# [user] sections against the same ACL users on the server itself: `default`
# off (no client_password), so AUTH <password> says there is none.
APP = ("app", "apw-Kk29")
OPS = ("ops", "opw-Tt53")
USER_CASES = [
    ("AUTH as a user", enc("AUTH", *APP) + enc("PING")),
    ("AUTH as a user, wrong password", enc("AUTH", APP[0], OPS[1]) + enc("GET", "k")),
    ("AUTH <password>, no default password", enc("AUTH", APP[1]) + enc("GET", "k")),
    ("AUTH default", enc("AUTH", "default", APP[1])),
    ("AUTH default, empty", enc("AUTH", "default", "")),
    ("HELLO 3 AUTH as a user", enc("HELLO", "3", "AUTH", *APP) + enc("PING")),
    ("HELLO AUTH as the wrong user", enc("HELLO", "2", "AUTH", OPS[0], APP[1]) + enc("PING")),
    ("AUTH as one user, then another", enc("AUTH", *APP) + enc("AUTH", *OPS) + enc("PING")),
    ("AUTH, wrong AUTH as another user", enc("AUTH", *APP) + enc("AUTH", OPS[0], "x") +
     enc("PING")),
    ("user names are exact", enc("AUTH", "APP", APP[1]) + enc("AUTH", "ap", APP[1])),
]


@pytest.fixture
def users_pair(make_redis, make_proxy, multiplex):
    """(a server with ACL users app and ops and `default` off, ttlguard with
    the same [user] sections in front of a server without users)."""
    acl = []
    for name, pw in (APP, OPS):
        acl += ["--user", name, "on", ">" + pw, "~*", "+@all"]
    direct = make_redis(acl + ["--user", "default", "off", "nopass", "~*", "+@all"])
    sections = "".join('[user "%s"]\npassword_sha256 = %s\n\n' % (n, sha(pw)) for n, pw in (APP, OPS))
    proxy = make_proxy(make_redis(), {"multiplex": multiplex}, sections=sections, expect=None)
    return direct, identified(proxy)


@pytest.mark.parametrize("name,payload", USER_CASES, ids=[c[0] for c in USER_CASES])
def test_user_replies_match_acl_users(users_pair, name, payload):
    direct, proxy = users_pair
    want, got = both_raw(direct.port, proxy.port, payload)
    assert got == want


def test_no_backend_connection_before_login(make_redis, make_proxy):
    """A client that has not logged in costs Redis nothing: no connection."""
    r = make_redis()
    p = make_proxy(r, {"client_password": PW, "multiplex": "off"}, expect=None)
    before = len(harness.client_list(r.port))
    with Conn(p.port) as c:
        assert c.cmd("PING") == RespError(b"NOAUTH Authentication required.")
        assert len(harness.client_list(r.port)) == before
        assert c.cmd("AUTH", PW) == b"OK"
        assert c.cmd("PING") == b"PONG"
        assert len(harness.client_list(r.port)) == before + 1


# ---- users with backend logins of their own ---------------------------------

BACKEND_ADMIN = "adminpw-Zq81"


@pytest.fixture
def acl_proxy(make_redis, make_proxy, multiplex):
    """Redis with a password and an ACL user `app` (keys app:* only);
    ttlguard with users app (logs in to Redis as app) and ops (as the
    proxy's own backend login, the default user)."""
    r = make_redis(["--requirepass", BACKEND_ADMIN])
    with Conn(r.port) as c:
        assert c.cmd("AUTH", BACKEND_ADMIN) == b"OK"
        assert c.cmd("ACL", "SETUSER", "app", "on", ">bpw-Lm44", "~app:*", "+@all") == b"OK"
    sections = ('[user "app"]\npassword_sha256 = %s\nbackend_user = app\n'
                'backend_password = bpw-Lm44\n\n[user "ops"]\npassword_sha256 = %s\n'
                % (sha("apw-Kk29"), sha("opw-Tt53")))
    p = make_proxy(r, {"backend_password": BACKEND_ADMIN, "multiplex": multiplex},
                   sections=sections, expect=None)
    return r, p


def test_user_logs_in_as_its_backend_user(acl_proxy):
    r, p = acl_proxy
    with Conn(p.port) as c:
        assert c.cmd("AUTH", "app", "apw-Kk29") == b"OK"
        for _ in range(5):      # would a shared connection take it over?
            assert c.cmd("SET", "app:k", "v") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"app"
        err = c.cmd("SET", "other:k", "v")
        assert isinstance(err, RespError) and err.startswith(b"NOPERM")
    with Conn(p.port) as c:
        assert c.cmd("AUTH", "ops", "opw-Tt53") == b"OK"
        for _ in range(5):
            assert c.cmd("SET", "other:k", "v") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"default"


def test_user_errors(acl_proxy):
    r, p = acl_proxy
    with Conn(p.port) as c:
        assert c.cmd("AUTH", "app", "opw-Tt53") == RespError(
            b"WRONGPASS invalid username-password pair or user is disabled.")
        assert c.cmd("AUTH", "apw-Kk29") == RespError(
            b"ERR AUTH <password> called without any password configured for the default "
            b"user. Are you sure your configuration is correct?")
        assert c.cmd("AUTH", "default", "apw-Kk29") == RespError(
            b"WRONGPASS invalid username-password pair or user is disabled.")
        assert c.cmd("GET", "app:k") == RespError(b"NOAUTH Authentication required.")


def test_hello_auth_as_user(acl_proxy):
    r, p = acl_proxy
    with Conn(p.port) as c:
        hello = c.cmd("HELLO", "3", "AUTH", "app", "apw-Kk29", "SETNAME", "web")
        assert isinstance(hello, harness.RespMap) and dict(hello)[b"proto"] == 3
        assert c.cmd("ACL", "WHOAMI") == b"app"
        assert c.cmd("CLIENT", "GETNAME") == b"web"
        assert isinstance(c.cmd("HGETALL", "app:none"), harness.RespMap)


def test_login_as_another_user_and_reset(acl_proxy):
    """Redis semantics: AUTH as another user switches the connection to it;
    RESET logs out. ttlguard logs the backend connection in again each
    time (RESET logs Redis's connection out too)."""
    r, p = acl_proxy
    with Conn(p.port) as c:
        assert c.cmd("AUTH", "ops", "opw-Tt53") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"default"
        assert c.cmd("AUTH", "app", "apw-Kk29") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"app"
        assert c.cmd("RESET") == b"RESET"
        assert c.cmd("GET", "app:k") == RespError(b"NOAUTH Authentication required.")
        assert c.cmd("AUTH", "app", "apw-Kk29") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"app"
        assert c.cmd("AUTH", "ops", "opw-Tt53") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"default"


def test_reset_keeps_the_proxy_logged_in_without_client_auth(make_redis, make_proxy, multiplex):
    """backend_password, no client auth: after RESET the client is still
    served (Redis logged the connection out; ttlguard logs it in again)."""
    r = make_redis(["--requirepass", BACKEND_ADMIN])
    p = make_proxy(r, {"backend_password": BACKEND_ADMIN, "multiplex": multiplex})
    with Conn(p.port) as c:
        assert c.cmd("RESET") == b"RESET"
        assert c.cmd("PING") == b"PONG"


# ---- protected mode and the admin token ---------------------------------------

def check_config(tmp_path, text):
    path = os.path.join(str(tmp_path), "check.ini")
    with open(path, "w") as f:
        f.write(text)
    out = subprocess.run([harness.TTLG_BIN, "--check-config", "--config", path],
                         capture_output=True, text=True, timeout=30)
    return out.returncode, out.stdout + out.stderr, path


@pytest.mark.parametrize("key", ["listen", "tls_listen"])
def test_protected_mode_refuses_exposed_backend_login(tmp_path, key):
    tls = ""
    if key == "tls_listen":
        crt, keyf = (os.path.join(str(tmp_path), n) for n in ("c.crt", "c.key"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", keyf, "-out", crt],
                       check=True, capture_output=True, timeout=60)
        tls = "tls_cert_file = %s\ntls_key_file = %s\n" % (crt, keyf)
    text = ("[proxy]\nlisten = 127.0.0.1:7001\nbackend_password = bpw-Qr12\n%s = 0.0.0.0:7002\n%s"
            % (key, tls)) if key == "tls_listen" else \
        "[proxy]\nbackend_password = bpw-Qr12\nlisten = 0.0.0.0:7001\n"
    rc, out, path = check_config(tmp_path, text)
    assert rc == 1
    line = 4 if key == "tls_listen" else 3
    assert "%s:%d: %s = 0.0.0.0:7002" % (path, line, key) in out or \
        "%s:%d: %s = 0.0.0.0:7001" % (path, line, key) in out, out
    for hint in ("client_password", "[user", "127.0.0.1", "unix:", "protected_mode = no"):
        assert hint in out
    assert "bpw-Qr12" not in out


@pytest.mark.parametrize("extra", ["client_password = cpw-Hh77",
                                   "protected_mode = no"])
def test_protected_mode_satisfied(tmp_path, extra):
    rc, out, _ = check_config(tmp_path, "[proxy]\nbackend_password = bpw-Qr12\n"
                              "listen = 0.0.0.0:7001\n%s\n" % extra)
    assert rc == 0, out


def test_user_section_satisfies_protected_mode(tmp_path):
    rc, out, _ = check_config(tmp_path, "[proxy]\nbackend_password = bpw-Qr12\n"
                              "listen = [::]:7001\n\n[user \"app\"]\npassword_sha256 = %s\n"
                              % sha("x"))
    assert rc == 0, out
    assert "1 user" in out


@pytest.mark.parametrize("text,line,want", [
    ("[proxy]\nadmin = 0.0.0.0:9121\n", 2, "set admin_token"),
    ("[user \"app\"]\npassword_sha256 = abc\n", 2, "expected 64 hex digits"),
    ("[user \"app\"]\nbackend_user = x\n", 1, "has no password_sha256"),
    ("[user \"app\"]\npassword_sha256 = %s\nbackend_user = x\n" % sha("x"), 3,
     "backend_user but no backend_password"),
    ("[user \"a b\"]\n", 1, "bad user name"),
    ("[user]\n", 1, "needs a quoted name"),
    ("[user \"app\"]\npassword_sha256 = %s\n[user \"app\"]\n" % sha("x"), 3,
     "second [user \"app\"] section"),
    ("[proxy]\nclient_password = cpw-Hh77\n[user \"default\"]\npassword_sha256 = %s\n" % sha("x"),
     3, "client_password at line 2"),
    ("[proxy]\nmax_pending = 0\n", 2, "max_pending"),
    ("[proxy]\nprotected_mode = maybe\n", 2, "expected no or yes"),
])
def test_auth_config_errors(tmp_path, text, line, want):
    rc, out, path = check_config(tmp_path, text)
    assert rc == 1
    assert "%s:%d: " % (path, line) in out and want in out, out
    assert "cpw-Hh77" not in out


def test_admin_token_on_any_address(tmp_path):
    rc, out, _ = check_config(tmp_path, "[proxy]\nadmin = 0.0.0.0:9121\n"
                              "admin_token = tok-Vv31\n")
    assert rc == 0, out
    assert "tok-Vv31" not in out


def http_get(port, path, token=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=harness.slow(10))
    headers = {"Authorization": "Bearer " + token} if token is not None else {}
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def test_admin_token(redis_srv, make_proxy):
    admin = harness.free_port()
    make_proxy(redis_srv, {"admin": "127.0.0.1:%d" % admin, "admin_token": "tok-Vv31"})
    for path in ("/metrics", "/rules"):
        for token in (None, "tok-Vv3", "tok-Vv31x", ""):
            status, headers, _ = http_get(admin, path, token)
            assert status == 401, (path, token)
            assert headers.get("WWW-Authenticate", "").startswith("Bearer")
        status, _, body = http_get(admin, path, "tok-Vv31")
        assert status == 200 and b"tok-Vv31" not in body
    assert http_get(admin, "/healthz")[0] == 200


def non_loopback_address():
    """An address of this host other than loopback, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))         # no packet is sent
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def from_another_host(port):
    """Everything said to a connection to 127.0.0.1:port made from this
    host's other address, as a client on another host would (the server
    and ttlguard tell clients apart by their address: they need not listen
    on another one)."""
    addr = non_loopback_address()
    if addr is None:
        pytest.skip("this host has no non-loopback address")
    # Like Redis, ttlguard answers at accept and closes: a request sent
    # meanwhile would only turn the close into a reset that may beat the line.
    with socket.create_connection(("127.0.0.1", port), timeout=harness.slow(5),
                                  source_address=(addr, 0)) as s:
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                return data
            data += d


class ConnFromAnotherHost(Conn):
    """A Conn to 127.0.0.1 from this host's non-loopback address."""

    def __init__(self, port, timeout=10.0):
        addr = non_loopback_address()
        if addr is None:
            pytest.skip("this host has no non-loopback address")
        self.timeout = harness.slow(timeout)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=self.timeout,
                                             source_address=(addr, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = harness.RespReader()


def test_protected_mode_denies_non_loopback_clients(redis_srv, make_proxy):
    """No password anywhere: only loopback clients, as the server's protected
    mode, in its words; what to change in ttlguard's config is logged."""
    p = identified(make_proxy(redis_srv))
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
    want = from_another_host(redis_srv.port)
    assert want.startswith(b"-DENIED ")
    assert from_another_host(p.port) == want
    assert "protected mode: client" in p.stderr()
    for hint in ("client_password", "[user", "protected_mode = no"):
        assert hint in p.stderr()


@pytest.mark.parametrize("conf", [{"protected_mode": "no"}, {"client_password": PW}],
                         ids=["protected_mode_off", "client_password"])
def test_non_loopback_clients_served(redis_srv, make_proxy, conf):
    p = make_proxy(redis_srv, conf, expect=None)
    with ConnFromAnotherHost(p.port) as c:
        if "client_password" in conf:
            assert c.cmd("PING") == RespError(b"NOAUTH Authentication required.")
            assert c.cmd("AUTH", PW) == b"OK"
        assert c.cmd("PING") == b"PONG"


def test_reload_into_exposure_is_refused(make_redis, make_proxy):
    r = make_redis(["--requirepass", BACKEND_ADMIN])
    p = make_proxy(r, {"backend_password": BACKEND_ADMIN})
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("listen = 127.0.0.1:", "listen = 0.0.0.0:"))
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "config refused" in p.stderr(), 10, "the reload to be refused")
    assert "%s:2: listen = 0.0.0.0:" % p.config_path in p.stderr()
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"


# ---- secrets stay secret ----------------------------------------------------

def test_secrets_never_appear(make_redis, make_proxy, tmp_path):
    secrets = ["cpw-Ux81", "bpw-Yy62", "tok-Pp45", "upw-Ww19", "bepw-Nn07"]
    r = make_redis(["--requirepass", "bpw-Yy62"])
    with Conn(r.port) as c:
        c.cmd("AUTH", "bpw-Yy62")
        c.cmd("ACL", "SETUSER", "app", "on", ">bepw-Nn07", "~*", "+@all")
    events = os.path.join(str(tmp_path), "events.log")
    admin = harness.free_port()
    sections = ('[ttl "s:"]\nttl = 60\naction = rewrite\n\n[user "app"]\npassword_sha256 = %s\n'
                'backend_user = app\nbackend_password = bepw-Nn07\n' % sha("upw-Ww19"))
    p = make_proxy(r, {"client_password": "cpw-Ux81", "backend_password": "bpw-Yy62",
                       "admin": "127.0.0.1:%d" % admin, "admin_token": "tok-Pp45",
                       "events": events, "event_window": 1}, sections=sections, expect=None)
    with Conn(p.port) as c:
        assert c.cmd("AUTH", "wrong-cpw-Ux81x") != b"OK"
        assert c.cmd("AUTH", "app", "upw-Ww19") == b"OK"
        c.cmd("SET", "s:k", "v")
        c.cmd("PERSIST", "s:k")
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in p.stderr(), 10, "the reload")
    outputs = [p.stderr()]
    for path in ("/metrics", "/rules"):
        outputs.append(http_get(admin, path, "tok-Pp45")[2].decode())
    outputs.append(check_config(tmp_path, open(p.config_path).read())[1])
    wait_for(lambda: os.path.exists(events) and os.path.getsize(events) > 0, 10, "events")
    with open(events) as f:
        outputs.append(f.read())
    for out in outputs:
        for s in secrets:
            assert s not in out


# ---- limits -----------------------------------------------------------------

def test_auth_timeout(redis_srv, make_proxy):
    """auth_timeout = 2: a client that logs in within it stays; one that
    never sends a byte is closed once it has passed."""
    p = make_proxy(redis_srv, {"client_password": PW, "auth_timeout": 2}, expect=None)
    idle = Conn(p.port)
    late = Conn(p.port)
    try:
        time.sleep(1.0)
        assert late.cmd("AUTH", PW) == b"OK"
        t0 = time.monotonic()
        assert idle.read_until_eof(timeout=5) == b""
        assert time.monotonic() - t0 < 2.0
        time.sleep(1.5)
        assert late.cmd("PING") == b"PONG"
    finally:
        idle.close()
        late.close()


def requests_total(admin):
    body = http_get(admin, "/metrics")[2].decode()
    return int(re.search(r"^ttlguard_requests_total (\d+)$", body, re.M).group(1))


@pytest.mark.parametrize("extra", [0, 1], ids=["at_the_limit", "one_past"])
def test_max_pending(redis_srv, make_proxy, multiplex, extra):
    """max_pending = 4: while Redis answers nothing (DEBUG SLEEP), a client
    gets 4 requests forwarded; a fifth waits in ttlguard until a reply is
    in. Every reply arrives, in order."""
    admin = harness.free_port()
    p = make_proxy(redis_srv, {"max_pending": 4, "multiplex": multiplex,
                               "admin": "127.0.0.1:%d" % admin})
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"
        base = requests_total(admin)
        sleeper = threading.Thread(target=lambda: Conn(redis_srv.port).cmd("DEBUG", "SLEEP", "1"))
        sleeper.start()
        time.sleep(0.2)
        n = 4 + extra
        c.send(b"".join(enc("ECHO", str(i)) for i in range(n)))
        time.sleep(0.4)
        assert requests_total(admin) - base == 4
        assert c.replies(n, timeout=10) == [str(i).encode() for i in range(n)]
        sleeper.join()
        assert requests_total(admin) - base == n
