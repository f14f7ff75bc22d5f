"""
Faults: the backend down, restarted or killing a connection; clients going
away; SIGTERM with requests in flight.
"""

import re
import signal
import socket
import subprocess
import time

import pytest

import harness
from harness import Conn, RedisServer, client_list, enc, slow, wait_for

BACKEND_DOWN_RE = re.compile(rb"^-ERR .*backend.*unavailable", re.I)


def test_backend_at_the_proxys_own_address_is_refused():
    """Every session would connect to the proxy itself, each opening the
    next, until the descriptors run out: refused at start, with the reason."""
    harness.need_binary()
    port = harness.free_port()
    addr = "127.0.0.1:%d" % port
    r = subprocess.run([harness.TTLG_BIN, "--listen", addr, "--backend", addr],
                       capture_output=True, text=True, timeout=slow(10))
    assert r.returncode == 1, r
    assert "backend %s is ttlguard's own listen address" % addr in r.stderr, r.stderr


def test_backend_down_at_connect(tmp_path, make_proxy):
    """No backend: the client gets a -ERR saying so at once (no hang, no
    silent close); once redis-server is up, new clients are served."""
    redis = RedisServer(tmp_path)          # port reserved, not started
    p = make_proxy(redis.port)
    for _ in range(3):
        with Conn(p.port, timeout=5) as c:
            t0 = time.monotonic()
            c.send(enc("PING"))
            line = c.read_until_eof(timeout=5)
            assert BACKEND_DOWN_RE.match(line), line
            assert line.endswith(b"\r\n") and line.count(b"\r\n") == 1, line
            assert time.monotonic() - t0 < slow(5)
    redis.start()
    try:
        with Conn(p.port) as c:
            assert c.cmd("PING") == b"PONG"
            assert c.cmd("SET", "k", "v") == b"OK"
    finally:
        redis.stop()


def test_backend_restart(ep):
    """redis-server killed and started again on the same port: a session
    gets the replies redis sent before it died, then EOF; new sessions work."""
    with ep.conn() as idle, ep.conn() as owed:
        assert idle.cmd("PING") == b"PONG"
        owed.cmd("SET", "n", "0")
        owed.cmd("CLIENT", "SETNAME", "owed")
        owed.send(enc("INCR", "n") * 1000)
        # Wait until redis has run them all and written every reply out
        # (redis writes replies before it sleeps, so a GET from another
        # client can see n = 1000 while the last replies are still queued).
        wait_for(lambda: _get(ep.redis.port, "n") == b"1000" and _written(ep.redis.port, "owed"),
                 5, "redis to run 1000 INCRs and send the replies")
        ep.redis.stop()
        assert owed.replies(1000) == list(range(1, 1001))
        assert owed.read_until_eof(timeout=5) == b""
        assert idle.read_until_eof(timeout=5) == b""
        ep.redis.start()
    with ep.conn() as c:
        assert c.cmd("GET", "n") is None      # a fresh server (no persistence)
        assert c.cmd("PING") == b"PONG"


def test_backend_restart_then_proxy_sessions_meanwhile(redis_srv, make_proxy):
    """Clients arriving while the backend is down get the backend error;
    after the restart the proxy serves again without being restarted."""
    p = make_proxy(redis_srv)
    redis_srv.stop()
    with Conn(p.port, timeout=5) as c:
        c.send(enc("PING"))
        assert BACKEND_DOWN_RE.match(c.read_until_eof(timeout=5))
    redis_srv.start()
    with Conn(p.port) as c:
        assert c.cmd("PING") == b"PONG"


def _get(port, key):
    with Conn(port) as c:
        return c.cmd("GET", key)


def _written(port, name):
    """True when redis holds no unsent reply bytes for client `name`."""
    for c in client_list(port):
        if c.get("name") == name:
            return c["obl"] == "0" and c["oll"] == "0" and c["qbuf"] == "0"
    raise AssertionError("no client named %s" % name)


def test_backend_kills_session_connection(ep):
    """CLIENT KILL (sent to redis directly) of one session's connection
    closes that client; another client is untouched."""
    with ep.conn() as victim, ep.conn() as bystander:
        vid = victim.cmd("CLIENT", "ID")     # through the proxy: its backend conn
        bystander.cmd("CLIENT", "SETNAME", "bystander")
        with Conn(ep.redis.port) as admin:
            assert admin.cmd("CLIENT", "KILL", "ID", vid) == 1
        assert victim.read_until_eof(timeout=5) == b""
        assert bystander.cmd("PING") == b"PONG"
        assert bystander.cmd("CLIENT", "GETNAME") == b"bystander"


def test_backend_kills_blocked_session(ep):
    with ep.conn() as victim:
        vid = victim.cmd("CLIENT", "ID")
        victim.send(enc("BLPOP", "q", 0))
        harness.wait_blocked(ep.redis.port, "blpop")
        with Conn(ep.redis.port) as admin:
            assert admin.cmd("CLIENT", "KILL", "ID", vid) == 1
        assert victim.read_until_eof(timeout=5) == b""


def _names(port):
    return [c.get("name") for c in client_list(port)]


def test_client_gone_closes_backend_connection(ep):
    c = ep.conn()
    c.cmd("CLIENT", "SETNAME", "leaver")
    assert "leaver" in _names(ep.redis.port)
    c.close()
    wait_for(lambda: "leaver" not in _names(ep.redis.port), 5, "backend conn to go")


def test_client_gone_while_blocked(ep):
    """A client that leaves while blocked in BLPOP must not leave a backend
    connection behind that would still pop (and lose) the next element."""
    c = ep.conn()
    c.cmd("CLIENT", "SETNAME", "blocked-leaver")
    c.send(enc("BLPOP", "q", 0))
    harness.wait_blocked(ep.redis.port, "blpop")
    c.close()
    wait_for(lambda: "blocked-leaver" not in _names(ep.redis.port), 5, "backend conn to go")
    with ep.conn() as other:
        # Redis serves a blocked client in the same event-loop turn as the
        # push, before it answers anything else: a connection left behind
        # would have popped the element by the time LLEN runs.
        assert other.cmd("LPUSH", "q", "v") == 1
        assert other.cmd("LLEN", "q") == 1


def test_client_gone_mid_pipeline(ep):
    c = ep.conn()
    c.cmd("CLIENT", "SETNAME", "pipe-leaver")
    c.send(enc("SET", "k", "x" * 1000) * 5000 + b"*3\r\n$3\r\nSET\r\n$1\r\nk")
    c.close()
    wait_for(lambda: "pipe-leaver" not in _names(ep.redis.port), 10, "backend conn to go")
    with ep.conn() as other:
        assert other.cmd("PING") == b"PONG"


def test_client_reset_by_peer(ep):
    """An abortive close (RST) from the client is handled like a close."""
    c = ep.conn()
    c.cmd("CLIENT", "SETNAME", "rst-leaver")
    c.send(enc("DEBUG", "SLEEP", "0.2"))
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    c.close()
    wait_for(lambda: "rst-leaver" not in _names(ep.redis.port), 5, "backend conn to go")
    with ep.conn() as other:
        assert other.cmd("PING") == b"PONG"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_with_request_in_flight(redis_srv, make_proxy, sig):
    p = make_proxy(redis_srv)
    with Conn(p.port) as slow_c, Conn(p.port) as idle:
        assert idle.cmd("PING") == b"PONG"
        slow_c.send(enc("DEBUG", "SLEEP", "1") + enc("PING"))
        harness.wait_busy(redis_srv.port)
        p.send_signal(sig)
        wait_for(lambda: _refused(p.port), 5, "the listener to close")
        # The listener is closed: new connections are refused or closed
        # without being served.
        try:
            with Conn(p.port, timeout=2) as late:
                late.send(enc("PING"))
                assert late.read_until_eof(timeout=3) == b""
        except (ConnectionRefusedError, ConnectionResetError):
            pass
        assert slow_c.reply(timeout=5) == b"OK"
        assert slow_c.reply() == b"PONG"
        assert slow_c.read_until_eof(timeout=10) == b""
        assert idle.read_until_eof(timeout=10) == b""
    assert p.stop(sig=None, timeout=10) == 0


def _refused(port):
    # A connect that races the listener's close gets a reset (its SYN met
    # the closing socket) rather than a refusal: both say it is closed.
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except (ConnectionRefusedError, ConnectionResetError):
        return True


def test_sigterm_idle_clients_exit_fast(redis_srv, make_proxy):
    p = make_proxy(redis_srv)
    conns = [Conn(p.port) for _ in range(20)]
    try:
        for c in conns:
            assert c.cmd("PING") == b"PONG"
        t0 = time.monotonic()
        assert p.stop(timeout=10) == 0
        assert time.monotonic() - t0 < slow(3)
    finally:
        for c in conns:
            c.close()


def test_sigterm_blocked_client_bounded_wait(redis_srv, make_proxy):
    """A reply that never comes (BLPOP 0) does not keep the proxy alive
    forever: it exits 0 after its bounded drain wait."""
    p = make_proxy(redis_srv)
    with Conn(p.port, timeout=30) as c:
        c.send(enc("BLPOP", "q", 0))
        harness.wait_blocked(redis_srv.port, "blpop")
        t0 = time.monotonic()
        assert p.stop(timeout=30) == 0
        took = time.monotonic() - t0
        assert c.read_until_eof(timeout=5) == b""
    print("SIGTERM with a client blocked forever: exit after %.1fs" % took)
