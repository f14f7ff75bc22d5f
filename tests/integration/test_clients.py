"""
Connection state that a multiplexing proxy breaks and a 1:1 proxy must keep:
transactions, SELECT, AUTH/ACL, HELLO 3, CLIENT TRACKING, pub/sub, MONITOR,
blocking pops, CLIENT REPLY, CLIENT KILL, QUIT, RESET. Every test runs
direct and through ttlguard and expects the exact bytes redis-server sends.
"""

import re
import threading
import time

import pytest

import harness
from harness import Conn, RespReader, enc, server_identity


def _later(seconds, fn):
    t = threading.Timer(seconds, fn)
    t.daemon = True
    t.start()
    return t


# --------------------------------------------------------------------------
# transactions
# --------------------------------------------------------------------------

def test_multi_exec(ep):
    with ep.conn() as c:
        c.send(enc("MULTI") + enc("SET", "a", "1") + enc("INCR", "a") + enc("LPUSH", "a", "x")
               + enc("EXEC"))
        assert c.read_exact(len(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n")) == \
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"
        assert c.reply_raw()[1] == (b"*3\r\n+OK\r\n:2\r\n-WRONGTYPE Operation against a key "
                                    b"holding the wrong kind of value\r\n")
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("INCR", "a") == b"QUEUED"
        assert c.cmd("DISCARD") == b"OK"
        assert c.cmd("GET", "a") == b"2"
        assert c.cmd("DISCARD") == b"ERR DISCARD without MULTI"
        assert c.cmd("EXEC") == b"ERR EXEC without MULTI"


def test_watch_conflict_gives_nil_exec(ep):
    with ep.conn() as c, ep.conn() as other:
        assert c.cmd("WATCH", "w") == b"OK"
        assert other.cmd("SET", "w", "theirs") == b"OK"
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("SET", "w", "mine") == b"QUEUED"
        c.send(enc("EXEC"))
        assert c.reply_raw()[1] == b"*-1\r\n"
        assert c.cmd("GET", "w") == b"theirs"
        # Without a conflict the same transaction goes through.
        assert c.cmd("WATCH", "w") == b"OK"
        assert c.cmd("MULTI") == b"OK"
        assert c.cmd("SET", "w", "mine") == b"QUEUED"
        assert c.cmd("EXEC") == [b"OK"]
        # RESP3 spells the aborted EXEC as a null.
        c.cmd("HELLO", "3")
        assert c.cmd("WATCH", "w") == b"OK"
        other.cmd("SET", "w", "again")
        c.send(enc("MULTI") + enc("GET", "w") + enc("EXEC"))
        assert [c.reply_raw()[1] for _ in range(3)] == [b"+OK\r\n", b"+QUEUED\r\n", b"_\r\n"]


def _watch_in_multi_error(port):
    """Redis's own WATCH error; Valkey 8 refuses WATCH as a NO_MULTI command
    (valkey#723), Valkey 9 names the command in that error (valkey#2286)."""
    name, version = server_identity(port)
    if name == "valkey":
        if version >= (9,):
            return b"-ERR Command 'watch' not allowed inside a transaction\r\n"
        return b"-ERR Command not allowed inside a transaction\r\n"
    return b"-ERR WATCH inside MULTI is not allowed\r\n"


def _server_says(port, *cmd):
    """The server's own reply to cmd, straight from it: its words, whichever
    release it is (Redis 8.6 ends an unknown command's error at the name when
    it has no arguments; 7.0 adds ", with args beginning with: ")."""
    with Conn(port) as c:
        c.send(enc(*cmd))
        return c.reply_raw()[1]


def test_execabort_on_queue_time_error(ep):
    unknown = _server_says(ep.redis.port, "NOSUCHCMD")
    assert unknown.startswith(b"-ERR unknown command 'NOSUCHCMD'"), unknown
    with ep.conn() as c:
        c.send(enc("MULTI") + enc("SET", "x") + enc("NOSUCHCMD") + enc("WATCH", "x")
               + enc("SET", "x", "1") + enc("EXEC") + enc("EXISTS", "x"))
        want = (b"+OK\r\n"
                b"-ERR wrong number of arguments for 'set' command\r\n"
                + unknown + _watch_in_multi_error(ep.redis.port) +
                b"+QUEUED\r\n"
                b"-EXECABORT Transaction discarded because of previous errors.\r\n"
                b":0\r\n")
        assert c.read_exact(len(want)) == want


def test_multi_with_blocking_and_select(ep):
    """BLPOP inside MULTI does not block; SELECT inside MULTI sticks."""
    with ep.conn() as c:
        c.send(enc("MULTI") + enc("BLPOP", "nolist", 0) + enc("SELECT", 4) + enc("SET", "m", "4")
               + enc("EXEC") + enc("GET", "m") + enc("SELECT", 0) + enc("GET", "m"))
        r = c.replies(8)
        assert r[:4] == [b"OK", b"QUEUED", b"QUEUED", b"QUEUED"]
        assert r[4] == [None, b"OK", b"OK"]
        assert r[5:] == [b"4", b"OK", None]


# --------------------------------------------------------------------------
# SELECT, AUTH, HELLO
# --------------------------------------------------------------------------

def test_select_isolation(ep):
    with ep.conn() as a, ep.conn() as b:
        assert a.cmd("SELECT", 1) == b"OK"
        assert b.cmd("SELECT", 2) == b"OK"
        assert a.cmd("SET", "k", "one") == b"OK"
        assert b.cmd("SET", "k", "two") == b"OK"
        assert a.cmd("GET", "k") == b"one"
        assert b.cmd("GET", "k") == b"two"
        assert b.cmd("SELECT", 1) == b"OK"
        assert b.cmd("GET", "k") == b"one"
    # A new connection starts in db 0 whatever earlier connections selected.
    with ep.conn() as c:
        assert c.cmd("GET", "k") is None
        assert c.cmd("SELECT", 2) == b"OK"
        assert c.cmd("GET", "k") == b"two"
        assert c.cmd("SELECT", 16) == b"ERR DB index is out of range"


@pytest.mark.redis_args("--requirepass", "pw")
def test_requirepass_and_acl_user(ep):
    with ep.conn() as c:
        assert c.cmd("PING") == b"NOAUTH Authentication required."
        assert c.cmd("AUTH", "wrong") == (b"WRONGPASS invalid username-password pair or user "
                                          b"is disabled.")
        assert c.cmd("AUTH", "pw") == b"OK"
        assert c.cmd("PING") == b"PONG"
        assert c.cmd("ACL", "SETUSER", "alice", "on", ">secret", "~a:*", "+@all", "-flushall") \
            == b"OK"
    with ep.conn() as c:
        assert c.cmd("AUTH", "alice", "secret") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"alice"
        assert c.cmd("SET", "a:1", "x") == b"OK"
        err = c.cmd("SET", "b:1", "x")
        assert err.startswith(b"NOPERM"), err
        assert c.cmd("FLUSHALL").startswith(b"NOPERM")
        # Switching user on the same connection.
        assert c.cmd("AUTH", "default", "pw") == b"OK"
        assert c.cmd("ACL", "WHOAMI") == b"default"
    with ep.conn() as c:
        # Pipelined straight after connect, AUTH first.
        c.send(enc("AUTH", "alice", "secret") + enc("GET", "a:1") + enc("ACL", "WHOAMI"))
        assert c.replies(3) == [b"OK", b"x", b"alice"]


@pytest.mark.redis_args("--requirepass", "pw")
def test_hello3_with_auth(ep):
    with ep.conn() as c:
        r = c.cmd("HELLO", "3")
        assert r.startswith(b"NOAUTH HELLO must be called with the client already "
                            b"authenticated"), r
        assert c.cmd("HELLO", "3", "AUTH", "default", "bad").startswith(b"WRONGPASS")
        r = c.cmd("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "h3")
        d = dict(r)
        # "server" is "valkey" from Valkey (its INFO server_name).
        name = server_identity(ep.redis.port, "pw")[0]
        assert d[b"proto"] == 3 and d[b"server"] == name.encode()
        c.cmd("HSET", "h", "f", "v")
        c.send(enc("HGETALL", "h"))
        assert c.reply_raw()[1] == b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
        assert c.cmd("CLIENT", "GETNAME") == b"h3"
        r = c.cmd("HELLO", "2")             # a flat array in RESP2
        assert dict(zip(r[::2], r[1::2]))[b"proto"] == 2
        c.send(enc("HGETALL", "h"))
        assert c.reply_raw()[1] == b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"


# --------------------------------------------------------------------------
# CLIENT TRACKING (RESP3 push messages among replies)
# --------------------------------------------------------------------------

INVALIDATE_K1 = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk1\r\n"


def test_tracking_push_from_other_client(ep):
    with ep.conn() as c, ep.conn() as other:
        c.cmd("HELLO", "3")
        assert c.cmd("CLIENT", "TRACKING", "ON") == b"OK"
        assert c.cmd("GET", "k1") is None
        assert other.cmd("SET", "k1", "v") == b"OK"
        # The push arrives on its own, while the client waits for nothing.
        assert c.reply_raw()[1] == INVALIDATE_K1
        # ... and before the reply of the next command.
        c.cmd("GET", "k1")
        other.cmd("SET", "k1", "w")
        time.sleep(0.1)
        c.send(enc("PING"))
        assert c.read_exact(len(INVALIDATE_K1) + 7) == INVALIDATE_K1 + b"+PONG\r\n"


def test_tracking_own_write_push_between_replies(pair):
    """A client's own write to a key it tracks: redis sends the push after
    the write's reply and before the next one, inside one pipeline. A QUIT
    at the end proves the proxy did not pair the push with a request."""
    seq = (enc("HELLO", "3") + enc("CLIENT", "TRACKING", "ON") + enc("GET", "k1")
           + enc("SET", "k1", "x") + enc("GET", "k1") + enc("MGET", "k1", "k2")
           + enc("DEL", "k1") + enc("PING") + enc("QUIT"))
    got = {}
    for e in pair:
        with e.conn() as c:
            c.cmd("FLUSHALL")
            c.send(seq)
            got[e.kind] = c.read_until_eof()
    d = got["direct"]
    assert b"+OK\r\n" + INVALIDATE_K1 + b"$1\r\nx\r\n" in d
    assert d.endswith(b"+PONG\r\n+OK\r\n")
    # HELLO reports the connection's id, which differs between the two.
    norm = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")
    assert norm.sub(b"ID", got["proxy"]) == norm.sub(b"ID", d)


def test_tracking_redirect_resp2(ep):
    with ep.conn() as sub, ep.conn() as c, ep.conn() as other:
        sub_id = sub.cmd("CLIENT", "ID")
        assert sub.cmd("SUBSCRIBE", "__redis__:invalidate") == \
            [b"subscribe", b"__redis__:invalidate", 1]
        assert c.cmd("CLIENT", "TRACKING", "ON", "REDIRECT", sub_id) == b"OK"
        assert c.cmd("GET", "k1") is None
        other.cmd("SET", "k1", "v")
        assert sub.reply() == [b"message", b"__redis__:invalidate", [b"k1"]]


# --------------------------------------------------------------------------
# pub/sub
# --------------------------------------------------------------------------

def _msg(*parts, kind=b"*"):
    out = [kind + b"%d\r\n" % len(parts)]
    for p in parts:
        if isinstance(p, int):
            out.append(b":%d\r\n" % p)
        elif p is None:
            out.append(b"$-1\r\n")
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


def test_pubsub_resp2(ep):
    with ep.conn() as c, ep.conn() as pub:
        c.send(enc("SUBSCRIBE", "a", "b") + enc("PSUBSCRIBE", "p*") + enc("SSUBSCRIBE", "s1"))
        want = (_msg(b"subscribe", b"a", 1) + _msg(b"subscribe", b"b", 2)
                + _msg(b"psubscribe", b"p*", 3) + _msg(b"ssubscribe", b"s1", 1))
        assert c.read_exact(len(want)) == want
        assert pub.cmd("PUBLISH", "a", "hi") == 1
        assert pub.cmd("PUBLISH", "pz", "yo") == 1
        assert pub.cmd("SPUBLISH", "s1", "sm") == 1
        assert pub.cmd("PUBLISH", "nobody", "x") == 0
        want = (_msg(b"message", b"a", b"hi") + _msg(b"pmessage", b"p*", b"pz", b"yo")
                + _msg(b"smessage", b"s1", b"sm"))
        assert c.read_exact(len(want)) == want
        # PING in subscribed mode and a command that is not allowed there.
        c.send(enc("PING") + enc("PING", "x") + enc("GET", "k"))
        want = (_msg(b"pong", b"") + _msg(b"pong", b"x")
                + b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                  b"QUIT / RESET are allowed in this context\r\n")
        assert c.read_exact(len(want)) == want
        # A message published while a PING is in flight.
        c.send(enc("PING"))
        pub.cmd("PUBLISH", "b", "m2")
        got = [c.reply() for _ in range(2)]
        assert sorted(got) == sorted([[b"pong", b""], [b"message", b"b", b"m2"]])
        c.send(enc("UNSUBSCRIBE") + enc("PUNSUBSCRIBE") + enc("SUNSUBSCRIBE")
               + enc("UNSUBSCRIBE") + enc("PING") + enc("SET", "k", "v") + enc("GET", "k"))
        r = c.replies(8)
        # Channels leave in the server's hash order; the counts go down.
        assert sorted(x[1] for x in r[:2]) == [b"a", b"b"]
        assert [x[0] for x in r[:2]] == [b"unsubscribe"] * 2
        assert [x[2] for x in r[:2]] == [2, 1]
        assert r[2:] == [[b"punsubscribe", b"p*", 0], [b"sunsubscribe", b"s1", 0],
                         [b"unsubscribe", None, 0], b"PONG", b"OK", b"v"]


def test_unsubscribe_then_lrange_that_looks_like_a_message(ep):
    """After UNSUBSCRIBE, a reply shaped exactly like a pub/sub message
    (LRANGE of ["message", "ch", "hello"]) is a reply, not a message: the
    QUIT behind it must still get its +OK."""
    with ep.conn() as c:
        c.cmd("RPUSH", "L", "message", "ch", "hello")
        assert c.cmd("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        c.send(enc("UNSUBSCRIBE") + enc("LRANGE", "L", 0, -1) + enc("QUIT"))
        assert c.read_until_eof() == (_msg(b"unsubscribe", b"ch", 0)
                                      + _msg(b"message", b"ch", b"hello") + b"+OK\r\n")


def test_pubsub_message_then_quit(ep):
    """Messages do not count as replies: SUBSCRIBE, messages, then QUIT."""
    with ep.conn() as c, ep.conn() as pub:
        assert c.cmd("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        for i in range(3):
            pub.cmd("PUBLISH", "ch", "m%d" % i)
        c.send(enc("QUIT"))
        assert c.read_until_eof() == b"".join(
            _msg(b"message", b"ch", b"m%d" % i) for i in range(3)) + b"+OK\r\n"


def test_subscribe_many_channels_one_command(ep):
    """SUBSCRIBE with N channels owes N replies; UNSUBSCRIBE without
    arguments owes one per channel (or one when there is none)."""
    chans = ["c%d" % i for i in range(50)]
    with ep.conn() as c:
        c.send(enc("SUBSCRIBE", *chans) + enc("UNSUBSCRIBE") + enc("UNSUBSCRIBE") + enc("PING")
               + enc("QUIT"))
        out = c.read_until_eof()
    r = []
    rd = RespReader()
    rd.feed(out)
    while True:
        x = rd.get()
        if x is None:
            break
        r.append(x[0])
    assert r[:50] == [[b"subscribe", ch.encode(), i + 1] for i, ch in enumerate(chans)]
    assert [x[0] for x in r[50:100]] == [b"unsubscribe"] * 50 and r[99][2] == 0
    assert r[100:] == [[b"unsubscribe", None, 0], b"PONG", b"OK"]


def test_pubsub_resp3(ep):
    """In RESP3 the SUBSCRIBE reply itself is a push, messages are pushes,
    and ordinary commands work while subscribed."""
    with ep.conn() as c, ep.conn() as pub:
        c.cmd("HELLO", "3")
        c.cmd("SET", "k", "v")
        c.send(enc("SUBSCRIBE", "a") + enc("PSUBSCRIBE", "p*") + enc("GET", "k") + enc("PING"))
        want = (_msg(b"subscribe", b"a", 1, kind=b">") + _msg(b"psubscribe", b"p*", 2, kind=b">")
                + b"$1\r\nv\r\n+PONG\r\n")
        assert c.read_exact(len(want)) == want
        pub.cmd("PUBLISH", "a", "hi")
        pub.cmd("PUBLISH", "pq", "yo")
        want = (_msg(b"message", b"a", b"hi", kind=b">")
                + _msg(b"pmessage", b"p*", b"pq", b"yo", kind=b">"))
        assert c.read_exact(len(want)) == want
        c.send(enc("SSUBSCRIBE", "s1"))
        assert c.reply_raw()[1] == _msg(b"ssubscribe", b"s1", 1, kind=b">")
        pub.cmd("SPUBLISH", "s1", "sm")
        assert c.reply_raw()[1] == _msg(b"smessage", b"s1", b"sm", kind=b">")
        c.send(enc("UNSUBSCRIBE") + enc("PUNSUBSCRIBE") + enc("SUNSUBSCRIBE") + enc("GET", "k")
               + enc("QUIT"))
        want = (_msg(b"unsubscribe", b"a", 1, kind=b">") + _msg(b"punsubscribe", b"p*", 0, kind=b">")
                + _msg(b"sunsubscribe", b"s1", 0, kind=b">") + b"$1\r\nv\r\n+OK\r\n")
        assert c.read_until_eof() == want


# --------------------------------------------------------------------------
# MONITOR
# --------------------------------------------------------------------------

def test_monitor_then_reset(ep):
    with ep.conn() as mon, ep.conn() as other:
        assert mon.cmd("MONITOR") == b"OK"
        other.cmd("SET", "mk", "v")
        other.cmd("GET", "mk")
        line = mon.reply()
        assert line.endswith(b'"SET" "mk" "v"'), line
        assert mon.reply().endswith(b'"GET" "mk"')
        # Keyspace commands are refused to a monitor; PING is answered.
        mon.send(enc("GET", "mk") + enc("PING"))
        r = [mon.reply() for _ in range(3)]
        assert b"ERR Replica can't interact with the keyspace" in r
        assert b"PONG" in r
        mon.send(enc("RESET") + enc("PING") + enc("GET", "mk"))
        r = []
        while not r or r[-1] != b"v":
            r.append(mon.reply())
        assert r[-3:] == [b"RESET", b"PONG", b"v"]
        # Monitoring stopped with the RESET: another client's commands no
        # longer show up.
        other.cmd("SET", "quiet", "1")
        mon.assert_silent(0.3)


def test_monitor_then_quit(ep):
    with ep.conn() as mon, ep.conn() as other:
        assert mon.cmd("MONITOR") == b"OK"
        for i in range(20):
            other.cmd("INCR", "n")
        time.sleep(0.1)
        mon.send(enc("QUIT"))
        out = mon.read_until_eof()
        assert out.count(b'"INCR" "n"') == 20
        assert out.endswith(b"+OK\r\n")


# --------------------------------------------------------------------------
# blocking commands
# --------------------------------------------------------------------------

def test_blpop_timeout_zero_served_later(ep):
    with ep.conn(timeout=15) as c, ep.conn() as other:
        t0 = time.monotonic()
        c.send(enc("BLPOP", "q", 0))
        pusher = _later(3.0, lambda: other.cmd("LPUSH", "q", "v"))
        assert c.reply(timeout=15) == [b"q", b"v"]
        assert time.monotonic() - t0 >= 2.9
        pusher.join(5)
        assert c.cmd("PING") == b"PONG"


def test_blpop_with_timeout_returns_nil(ep):
    with ep.conn() as c:
        t0 = time.monotonic()
        c.send(enc("BLPOP", "q", "0.5") + enc("PING"))
        assert c.reply_raw()[1] == b"*-1\r\n"
        assert time.monotonic() - t0 >= 0.45
        assert c.reply() == b"PONG"
        c.cmd("HELLO", "3")
        c.send(enc("BLPOP", "q", "0.2"))
        assert c.reply_raw()[1] == b"_\r\n"


def test_blocked_pipeline_keeps_order(ep):
    """Commands pipelined behind a blocked BLPOP are answered after it."""
    with ep.conn() as c, ep.conn() as other:
        c.send(enc("BLPOP", "q", 0) + enc("PING") + enc("GET", "x"))
        harness.wait_blocked(ep.redis.port, "blpop")
        c.assert_silent(0.2)
        other.cmd("RPUSH", "q", "1")
        assert c.replies(3) == [[b"q", b"1"], b"PONG", None]


def test_client_unblock(ep):
    with ep.conn() as c, ep.conn() as other:
        cid = c.cmd("CLIENT", "ID")
        c.send(enc("BLPOP", "q", 0))
        harness.wait_blocked(ep.redis.port, "blpop")
        assert other.cmd("CLIENT", "UNBLOCK", cid, "ERROR") == 1
        assert c.reply() == b"UNBLOCKED client unblocked via CLIENT UNBLOCK"


@pytest.mark.redis_args("--timeout", "1")
@pytest.mark.proxy_conf(client_idle_timeout=1)
def test_idle_timeout_spares_blocked_and_subscribed(ep):
    """Like redis-server's `timeout`: an idle client is closed, a client
    blocked in BLPOP or subscribed is not."""
    with ep.conn(timeout=15) as idle, ep.conn(timeout=15) as blocked, \
            ep.conn(timeout=15) as sub:
        assert idle.cmd("PING") == b"PONG"
        assert sub.cmd("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        blocked.send(enc("BLPOP", "q", 0))
        assert idle.read_until_eof(timeout=6) == b""
        time.sleep(1.0)
        other = ep.conn()
        # Still blocked, idle far beyond the timeout (through the proxy: its
        # backend connection for the client; closing the client closes it).
        listed = other.cmd("CLIENT", "LIST").decode()
        assert "cmd=blpop" in listed, listed
        # The server's idle check can close a client in the very loop
        # iteration that unblocks it, before the reply is written (Redis 8.0,
        # Valkey 9.1: serverCron runs between the LPUSH and beforeSleep):
        # switch the server's timeout off before unblocking it.
        assert other.cmd("CONFIG", "SET", "timeout", "0") == b"OK"
        other.cmd("LPUSH", "q", "v")
        assert blocked.reply() == [b"q", b"v"]
        other.cmd("PUBLISH", "ch", "still here")
        assert sub.reply() == [b"message", b"ch", b"still here"]
        other.close()


def test_proxy_idle_timeout_alone(redis_srv, make_proxy):
    """client_idle_timeout of the proxy, with no timeout on redis-server."""
    p = make_proxy(redis_srv, {"client_idle_timeout": 1})
    with Conn(p.port, timeout=15) as idle, Conn(p.port, timeout=15) as blocked, \
            Conn(p.port, timeout=15) as busy, Conn(redis_srv.port) as other:
        assert idle.cmd("PING") == b"PONG"
        blocked.send(enc("BLPOP", "q", 0))
        t0 = time.monotonic()
        # A client that keeps talking is never idle.
        while time.monotonic() - t0 < 2.5:
            assert busy.cmd("PING") == b"PONG"
            time.sleep(0.2)
        assert idle.read_until_eof(timeout=5) == b""
        other.cmd("LPUSH", "q", "v")
        assert blocked.reply() == [b"q", b"v"]
        assert busy.cmd("PING") == b"PONG"


# --------------------------------------------------------------------------
# CLIENT REPLY, CLIENT KILL, QUIT, RESET
# --------------------------------------------------------------------------

def test_client_reply_off_on_skip(ep):
    with ep.conn() as c:
        c.send(enc("CLIENT", "REPLY", "OFF") + enc("SET", "a", "1") + enc("NOPE")
               + enc("GET", "a"))
        c.assert_silent(0.3)
        c.send(enc("CLIENT", "REPLY", "ON") + enc("GET", "a"))
        assert c.read_exact(len(b"+OK\r\n$1\r\n1\r\n")) == b"+OK\r\n$1\r\n1\r\n"
        c.send(enc("CLIENT", "REPLY", "SKIP") + enc("INCR", "a") + enc("GET", "a"))
        assert c.read_exact(len(b"$1\r\n2\r\n")) == b"$1\r\n2\r\n"
        # SKIP followed by ON: ON clears the skip and answers +OK.
        c.send(enc("CLIENT", "REPLY", "SKIP") + enc("CLIENT", "REPLY", "ON") + enc("PING"))
        assert c.read_exact(len(b"+OK\r\n+PONG\r\n")) == b"+OK\r\n+PONG\r\n"
        # All of it in one pipeline, ending in QUIT: every owed reply, then EOF.
        c.send(enc("CLIENT", "REPLY", "OFF") + enc("INCR", "a") + enc("CLIENT", "REPLY", "ON")
               + enc("CLIENT", "REPLY", "SKIP") + enc("INCR", "a") + enc("INCR", "a")
               + enc("CLIENT", "REPLY", "OFF") + enc("PING") + enc("CLIENT", "REPLY", "ON")
               + enc("QUIT"))
        assert c.read_until_eof() == b"+OK\r\n:5\r\n+OK\r\n+OK\r\n"


def test_client_reply_off_then_quit_silently(ep):
    """redis-server 7.0 quirk: QUIT under CLIENT REPLY OFF produces no
    reply, and since it closes "after the reply", it does not close at all
    (nor does it run later commands). The proxy must not invent a reply."""
    with ep.conn() as c:
        c.send(enc("CLIENT", "REPLY", "OFF") + enc("SET", "z", "1") + enc("QUIT"))
        c.assert_silent(0.5)
        c.send(enc("CLIENT", "REPLY", "ON") + enc("PING"))
        c.assert_silent(0.3)
    with ep.conn() as c:
        assert c.cmd("GET", "z") == b"1"


def test_client_kill_own_connection(ep):
    with ep.conn() as c:
        cid = c.cmd("CLIENT", "ID")
        c.send(enc("CLIENT", "KILL", "ID", cid, "SKIPME", "no") + enc("PING"))
        assert c.read_until_eof() == b":1\r\n"
    with ep.conn() as c:
        addr = dict(f.split(b"=", 1) for f in c.cmd("CLIENT", "INFO").split()
                    if b"=" in f)[b"addr"]
        c.send(enc("CLIENT", "KILL", addr) + enc("PING"))
        assert c.read_until_eof() == b"+OK\r\n"
    with ep.conn() as c:
        assert c.cmd("PING") == b"PONG"


def test_client_kill_other_connection(ep):
    with ep.conn() as victim, ep.conn() as killer, ep.conn() as bystander:
        vid = victim.cmd("CLIENT", "ID")
        assert killer.cmd("CLIENT", "KILL", "ID", vid) == 1
        assert victim.read_until_eof() == b""
        assert killer.cmd("PING") == b"PONG"
        assert bystander.cmd("PING") == b"PONG"
        assert killer.cmd("CLIENT", "KILL", "ID", vid) == 0


def test_quit(ep):
    with ep.conn() as c:
        c.send(enc("PING") + enc("QUIT") + enc("PING"))
        assert c.read_until_eof() == b"+PONG\r\n+OK\r\n"
    with ep.conn() as c:
        c.send(b"QUIT\r\n")
        assert c.read_until_eof() == b"+OK\r\n"


def test_reset(ep):
    with ep.conn() as c, ep.conn() as other:
        c.cmd("HSET", "h", "f", "v")
        c.send(enc("SELECT", 3) + enc("SET", "k", "db3") + enc("HELLO", "3")
               + enc("CLIENT", "SETNAME", "n") + enc("CLIENT", "TRACKING", "ON")
               + enc("WATCH", "h") + enc("MULTI") + enc("SET", "x", "1") + enc("RESET"))
        r = c.replies(9)
        assert r[-1] == b"RESET"
        c.send(enc("GET", "k") + enc("CLIENT", "GETNAME") + enc("HGETALL", "h") + enc("EXEC"))
        assert c.read_exact(len(b"$-1\r\n$-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n")) == \
            b"$-1\r\n$-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        assert c.reply() == b"ERR EXEC without MULTI"
        # Tracking is off after RESET: no push when the key changes.
        other.cmd("HSET", "h", "f", "w")
        c.assert_silent(0.2)
        # RESET leaves subscribed mode too.
        assert c.cmd("SUBSCRIBE", "ch") == [b"subscribe", b"ch", 1]
        c.send(enc("RESET") + enc("GET", "x"))
        assert c.read_exact(len(b"+RESET\r\n$-1\r\n")) == b"+RESET\r\n$-1\r\n"
        assert other.cmd("PUBLISH", "ch", "x") == 0


# --------------------------------------------------------------------------
# backend_username / backend_password (the proxy authenticates itself)
# --------------------------------------------------------------------------

@pytest.mark.redis_args("--requirepass", "pw")
def test_backend_password(redis_srv, make_proxy):
    p = make_proxy(redis_srv, {"backend_password": "pw"})
    with Conn(p.port) as c:
        # First bytes straight after connect: the proxy's own AUTH reply
        # must not reach the client.
        c.send(enc("PING") + enc("ACL", "WHOAMI"))
        assert c.replies(2) == [b"PONG", b"default"]
        c.assert_silent(0.2)


@pytest.mark.redis_args("--requirepass", "pw", "--user", "svc", "on", ">svcpw", "~*", "+@all",
                        "--user", "bob", "on", ">bobpw", "~b:*", "+@all")
def test_backend_username_and_client_auth(redis_srv, make_proxy):
    p = make_proxy(redis_srv, {"backend_username": "svc", "backend_password": "svcpw"})
    with Conn(p.port) as c:
        c.send(enc("ACL", "WHOAMI") + enc("AUTH", "bob", "bobpw") + enc("ACL", "WHOAMI")
               + enc("SET", "x", "1"))
        r = c.replies(4)
        assert r[:3] == [b"svc", b"OK", b"bob"]
        assert r[3].startswith(b"NOPERM"), r[3]
        # A wrong password from the client is the client's business.
        assert c.cmd("AUTH", "bob", "nope").startswith(b"WRONGPASS")


# --------------------------------------------------------------------------
# redis-py (Debian's python3-redis), as an application would use it
# --------------------------------------------------------------------------

def test_redis_py_pipeline_transaction_and_pool(ep):
    import redis
    r = ep.client()
    try:
        pipe = r.pipeline(transaction=False)
        for i in range(10000):
            pipe.set("py:%d" % i, i)
            pipe.incr("py:ctr")
        res = pipe.execute()
        assert res[0::2] == [True] * 10000 and res[1::2] == list(range(1, 10001))
        assert r.mget("py:0", "py:9999", "py:none") == [b"0", b"9999", None]

        # WATCH conflict on the first try, redis-py retries the transaction.
        other = ep.client()
        tries = []

        def txn(p):
            tries.append(1)
            v = int(p.get("py:w") or 0)
            if len(tries) == 1:
                other.set("py:w", 100)
            p.multi()
            p.set("py:w", v + 1)
        r.transaction(txn, "py:w")
        assert len(tries) == 2 and r.get("py:w") == b"101"
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            r.execute_command("GET")
        assert r.blpop(["py:q"], timeout=1) is None

        # Many threads over one connection pool.
        def worker():
            c = redis.Redis(connection_pool=r.connection_pool)
            for _ in range(200):
                c.incr("py:threads")
        ts = [threading.Thread(target=worker) for _ in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert r.get("py:threads") == b"4000"
        other.close()
    finally:
        r.close()


def test_redis_py_pubsub(ep):
    r = ep.client()
    ps = r.pubsub()
    try:
        ps.subscribe("py:ch")
        ps.psubscribe("py:c*")
        got = [ps.get_message(timeout=5) for _ in range(2)]
        assert [m["type"] for m in got] == ["subscribe", "psubscribe"]
        assert r.publish("py:ch", "hello") == 2      # channel and pattern
        msgs = [ps.get_message(timeout=5) for _ in range(2)]
        assert sorted((m["type"], m["data"]) for m in msgs) == [
            ("message", b"hello"), ("pmessage", b"hello")]
        ps.unsubscribe()
        ps.punsubscribe()
        got = [ps.get_message(timeout=5) for _ in range(2)]
        assert sorted(m["type"] for m in got) == ["punsubscribe", "unsubscribe"]
    finally:
        ps.close()
        r.close()


@pytest.mark.redis_args("--requirepass", "pw")
def test_redis_py_auth_and_db(ep):
    with ep.conn() as admin:
        admin.cmd("AUTH", "pw")
        admin.cmd("ACL", "SETUSER", "app", "on", ">apppw", "~*", "+@all")
    r = ep.client(username="app", password="apppw", db=3)
    try:
        assert r.acl_whoami() == "app"
        r.set("in3", "x")
        assert r.client_info()["db"] == 3
    finally:
        r.close()
    r0 = ep.client(password="pw")
    try:
        assert r0.get("in3") is None
        assert r0.execute_command("SELECT", 3) is True
        assert r0.get("in3") == b"x"
    finally:
        r0.close()
