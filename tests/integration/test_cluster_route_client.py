"""
CLIENT through cluster = route (proxy/route_client.c): ttlguard is the one
server its clients see in front of a real 6-node Redis Cluster, and CLIENT
is about its clients, answered by the proxy as Redis answers it.

Checked with real clients (python3-redis's plain redis.Redis, redis-cli
without -c), against a real standalone redis-server where the proxy claims
Redis's words, and on the nodes themselves where the proxy sends something:
  - SETNAME / GETNAME / ID / INFO / LIST (and HELLO ... SETNAME): names, ids
    and lines of the proxy's own clients; a name reaches the connection a blocking command opens on
    its node (the node's CLIENT LIST shows it);
  - CLIENT KILL (old and filter forms): the killed client's connection
    really closes, the replies and errors are Redis's;
  - CLIENT REPLY OFF / SKIP / ON in a pipeline over keys of every primary:
    the writes happen on their nodes (a TTL rule's rewrite too), only the
    replies wanted come back, in order;
  - CLIENT UNBLOCK of a client blocked on its node unblocks it there, with
    the timeout's reply or the error, as Redis does;
  - CLIENT PAUSE WRITE holds a write sent straight to every primary until
    CLIENT UNPAUSE through the proxy;
  - what is not built is refused with an error that says so.
"""

import socket

import pytest
import redis

import harness
from harness import Conn, RespError, enc, wait_blocked, wait_for
from test_cluster_route import routed_fixtures, cli, keys_on_each_primary, owner_port


cluster, proxy = routed_fixtures("route-client")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    s = harness.RedisServer(tmp_path_factory.mktemp("route-client-redis")).start()
    yield s
    s.stop()


def client(port, **kw):
    return redis.Redis(port=port, socket_timeout=10, **kw)


def fields(line):
    return dict(f.split("=", 1) for f in line.split(" ") if "=" in f)


def lines(text):
    if isinstance(text, bytes):
        text = text.decode()
    return [fields(l) for l in text.splitlines()]


# --------------------------------------------------------------------------

# Forms whose reply does not depend on who else is connected: the proxy's
# must be the very bytes a standalone Redis gives.
SAME_AS_REDIS = [
    ("CLIENT", "GETNAME"),
    ("CLIENT", "SETNAME", "a b"),
    ("CLIENT", "SETNAME", "a\nb"),
    ("CLIENT", "SETNAME", "caf\xe9"),
    ("CLIENT", "GETNAME"),
    ("CLIENT", "SETNAME", "app-1"),
    ("CLIENT", "GETNAME"),
    ("CLIENT", "SETNAME", ""),
    ("CLIENT", "GETNAME"),
    ("CLIENT", "SETNAME"),
    ("CLIENT", "SETNAME", "a", "b"),
    ("CLIENT", "ID", "x"),
    ("CLIENT", "NOSUCH"),
    ("CLIENT",),
    ("CLIENT", "LIST", "TYPE", "nosuch"),
    ("CLIENT", "LIST", "TYPE", "master"),
    ("CLIENT", "LIST", "ID", "abc"),
    ("CLIENT", "LIST", "ID", "999999"),
    ("CLIENT", "LIST", "nosuch"),
    ("CLIENT", "LIST", "TYPE", "normal", "x"),
    ("CLIENT", "KILL"),
    ("CLIENT", "KILL", "10.9.9.9:1"),
    ("CLIENT", "KILL", "ID", "0"),
    ("CLIENT", "KILL", "ID", "x"),
    ("CLIENT", "KILL", "ID", "999999"),
    ("CLIENT", "KILL", "TYPE", "nosuch"),
    ("CLIENT", "KILL", "TYPE", "master"),
    ("CLIENT", "KILL", "USER", "nosuch"),
    ("CLIENT", "KILL", "SKIPME", "maybe"),
    ("CLIENT", "KILL", "ADDR"),
    ("CLIENT", "KILL", "ADDR", "10.9.9.9:1", "FOO", "x"),
    ("CLIENT", "KILL", "ADDR", "10.9.9.9:1", "SKIPME", "no"),
    ("CLIENT", "REPLY", "maybe"),
    ("CLIENT", "REPLY"),
    ("CLIENT", "UNBLOCK", "x"),
    ("CLIENT", "UNBLOCK", "1", "maybe"),
    ("CLIENT", "UNBLOCK", "999999"),
    ("CLIENT", "UNBLOCK", "1", "TIMEOUT", "x"),
    ("HELLO", "3", "SETNAME", "a b"),
    ("HELLO", "4", "SETNAME", "x"),
    ("HELLO", "x", "SETNAME", "x"),
    ("CLIENT", "GETNAME"),
    ("PING",),
]


def test_replies_and_errors_are_redis_own(proxy, standalone):
    for resp in (2, 3):
        with Conn(proxy.port) as p, Conn(standalone.port) as r:
            if resp == 3:
                assert isinstance(p.cmd("HELLO", "3"), list)
                r.cmd("HELLO", "3")
            for args in SAME_AS_REDIS:
                p.send(enc(*args))
                r.send(enc(*args))
                got, want = p.reply_raw(), r.reply_raw()
                assert got == want, (resp, args, got, want)


def test_names_ids_and_the_client_list(proxy):
    a, b = client(proxy.port), client(proxy.port)
    assert a.client_setname("worker-a") and b.client_setname("worker-b")
    assert a.client_getname() == "worker-a"
    ida, idb = a.client_id(), b.client_id()
    assert ida != idb and ida > 0 and idb > 0
    info = a.client_info()
    assert int(info["id"]) == ida and info["name"] == "worker-a"
    assert info["laddr"] == "127.0.0.1:%d" % proxy.port
    # addr is the client's own end of its connection
    sock = a.connection_pool.get_connection("PING")
    try:
        assert info["addr"] == "%s:%d" % sock._sock.getsockname()[:2]
    finally:
        a.connection_pool.release(sock)
    for f in ("fd", "age", "idle", "flags", "db", "sub", "psub", "multi", "qbuf", "omem",
              "cmd", "user", "resp", "lib-name", "lib-ver"):
        assert f in info, f
    assert info["flags"] == "N" and str(info["db"]) == "0" and str(info["multi"]) == "-1"
    every = {int(c["id"]): c for c in a.client_list()}
    assert every[ida]["name"] == "worker-a" and every[idb]["name"] == "worker-b"
    assert set(every) >= {ida, idb}
    assert [int(c["id"]) for c in a.client_list(_type="normal")
            if int(c["id"]) in (ida, idb)] == [ida, idb]        # oldest first
    assert a.client_list(_type="pubsub") == []
    one = a.client_list(client_id=[str(idb)])      # redis-py 4.3 takes one id only
    assert len(one) == 1 and one[0]["name"] == "worker-b"
    # an empty name clears it; RESP3 clients see theirs too
    assert b.client_setname("") and b.client_getname() is None
    c3 = Conn(proxy.port)
    c3.cmd("HELLO", "3")
    assert c3.cmd("CLIENT", "SETNAME", "r3") == b"OK"
    line = c3.cmd("CLIENT", "INFO")
    assert isinstance(line, harness.RespVerbatim), line
    assert fields(bytes(line).decode())["resp"] == "3"
    c3.close()
    # HELLO ... SETNAME names the client as CLIENT SETNAME does
    with Conn(proxy.port) as h:
        assert isinstance(h.cmd("HELLO", "2", "SETNAME", "via-hello"), list)
        assert h.cmd("CLIENT", "GETNAME") == b"via-hello"
        assert h.cmd("PING") == b"PONG"
    # redis-cli without -c: its one connection is in the list, named
    out = cli(proxy.port, "CLIENT", "INFO")
    assert fields(out)["laddr"] == "127.0.0.1:%d" % proxy.port
    a.close()
    b.close()


def test_a_name_reaches_the_node_a_blocking_command_waits_on(cluster, proxy):
    k = "bl:{7}"
    node = owner_port(cluster, k)
    with Conn(proxy.port) as c:
        assert c.cmd("CLIENT", "SETNAME", "waiter-7") == b"OK"
        c.send(enc("BLPOP", k, "0"))
        wait_blocked(node, "blpop")
        names = [d.get("name") for d in harness.client_list(node) if d.get("cmd") == "blpop"]
        assert "waiter-7" in names, names
        with Conn(proxy.port) as o:
            flags = [d["flags"] for d in lines(o.cmd("CLIENT", "LIST"))
                     if d["name"] == "waiter-7"]
        assert flags == ["b"], flags
        cluster.cmd(node, "RPUSH", k, "x")
        assert c.reply() == [k.encode(), b"x"]


def test_client_kill_closes_the_client(proxy):
    killer = client(proxy.port)
    victim = Conn(proxy.port)
    vid = victim.cmd("CLIENT", "ID")
    assert killer.client_kill_filter(_id=vid) == 1
    assert victim.read_until_eof() == b""
    assert vid not in [int(c["id"]) for c in killer.client_list()]

    # the old form, by the address the client has in CLIENT LIST
    victim = Conn(proxy.port)
    addr = fields(victim.cmd("CLIENT", "INFO").decode())["addr"]
    assert killer.client_kill(addr) is True
    assert victim.read_until_eof() == b""
    with pytest.raises(redis.ResponseError, match="No such client"):
        killer.client_kill(addr)

    # filters: LADDR and TYPE; SKIPME yes (the default) spares the asker
    v1, v2 = Conn(proxy.port), Conn(proxy.port)
    v1.cmd("CLIENT", "SETNAME", "gone1")
    v2.cmd("CLIENT", "SETNAME", "gone2")
    mine = killer.client_id()
    laddr = "127.0.0.1:%d" % proxy.port
    n = killer.execute_command("CLIENT", "KILL", "LADDR", laddr, "TYPE", "normal",
                               "USER", "default")
    assert n >= 2
    assert v1.read_until_eof() == b"" and v2.read_until_eof() == b""
    assert killer.client_id() == mine       # still here
    # SKIPME no: the asker gets its reply, then its connection closes
    with Conn(proxy.port) as me:
        myid = me.cmd("CLIENT", "ID")
        assert me.cmd("CLIENT", "KILL", "ID", str(myid), "SKIPME", "no") == 1
        assert me.read_until_eof() == b""
    killer.close()


def test_client_reply_off_on_and_skip_across_nodes(cluster, proxy):
    per = keys_on_each_primary(cluster, "rp:", 2)
    assert len(per) == 3
    keys = [k for ks in per.values() for k in ks]
    ttl_keys = ["t:%s" % k for k in keys[:3]]           # under the TTL rule: rewritten
    for k in keys + ttl_keys:
        cluster.cmd(owner_port(cluster, k), "DEL", k)
    with Conn(proxy.port) as c:
        pipeline = [("CLIENT", "REPLY", "OFF")]
        pipeline += [("SET", k, "v-" + k) for k in keys]
        pipeline += [("SET", k, "w") for k in ttl_keys]
        pipeline += [("INCR", keys[0]), ("GET", keys[1]), ("MGET",) + tuple(keys),
                     ("CLIENT", "SETNAME", "bad name"), ("SELECT", "1")]
        pipeline += [("CLIENT", "REPLY", "ON")]
        pipeline += [("GET", k) for k in keys]
        pipeline += [("CLIENT", "REPLY", "SKIP"), ("SET", keys[0], "skipped"),
                     ("GET", keys[0]), ("PING",)]
        c.send(b"".join(enc(*a) for a in pipeline))
        want = [b"OK"] + [("v-" + k).encode() for k in keys] + [b"skipped", b"PONG"]
        assert c.replies(len(want)) == want
        assert c.cmd("PING") == b"PONG"        # nothing else came before it
    for k in keys[1:]:
        assert cluster.cmd(owner_port(cluster, k), "GET", k) == ("v-" + k).encode()
    for k in ttl_keys:
        assert cluster.cmd(owner_port(cluster, k), "GET", k) == b"w"
        assert 0 < cluster.cmd(owner_port(cluster, k), "TTL", k) <= 900


def test_client_pause_write_holds_writes_on_every_primary(cluster, proxy):
    per = keys_on_each_primary(cluster, "pz:")       # a key of its own: no -MOVED
    primaries = sorted(per)
    assert len(primaries) == 3
    direct = []
    try:
        with Conn(proxy.port) as c:
            assert c.cmd("CLIENT", "PAUSE", "30000", "WRITE") == b"OK"
            for port in primaries:
                d = Conn(port)
                d.send(enc("SET", per[port][0], "1"))
                direct.append(d)
            for port in primaries:
                wait_blocked(port, "set")       # held by the pause, on every primary
            assert c.cmd("CLIENT", "UNPAUSE") == b"OK"
        for d in direct:
            assert d.reply() == b"OK"
    finally:
        for port in primaries:
            cluster.cmd(port, "CLIENT", "UNPAUSE")
        for d in direct:
            d.close()


def test_what_is_not_built_is_refused(proxy):
    cases = [
        (("CLIENT", "TRACKING", "ON"), b"ERR ttlguard cluster = route does not support "
                                       b"client-side caching"),
        (("CLIENT", "CACHING", "YES"), b"ERR ttlguard cluster = route does not support "
                                       b"client-side caching"),
        (("CLIENT", "GETREDIR"), b"ERR ttlguard cluster = route does not support "
                                 b"client-side caching"),
        (("CLIENT", "TRACKINGINFO"), b"ERR ttlguard cluster = route does not support "
                                     b"client-side caching"),
    ]
    with Conn(proxy.port) as c:
        for args, want in cases:
            got = c.cmd(*args)
            assert isinstance(got, RespError) and got.startswith(want), (args, got)
            assert c.cmd("PING") == b"PONG"
        assert c.cmd("MULTI") == b"OK"
        got = c.cmd("CLIENT", "ID")
        assert isinstance(got, RespError) and b"does not support CLIENT" in got, got
        assert isinstance(c.cmd("EXEC"), RespError)


def test_killing_a_blocked_client_leaves_none_on_its_node(cluster, proxy):
    k = "kb:{3}"
    node = owner_port(cluster, k)

    def blocked_on_node():
        return any(d.get("cmd") == "blpop" and "b" in d.get("flags", "")
                   for d in harness.client_list(node))

    with Conn(proxy.port) as victim, Conn(proxy.port) as killer:
        vid = victim.cmd("CLIENT", "ID")
        victim.send(enc("BLPOP", k, "0"))
        wait_blocked(node, "blpop")
        assert killer.cmd("CLIENT", "KILL", "ID", str(vid)) == 1
        assert victim.read_until_eof() == b""
        wait_for(lambda: not blocked_on_node(), 5, "the node to forget the blocked client")
        assert killer.cmd("PING") == b"PONG"


def test_client_unblock_of_a_client_blocked_on_its_node(cluster, proxy):
    k = "ub:{5}"
    node = owner_port(cluster, k)
    with Conn(proxy.port) as victim, Conn(proxy.port) as other:
        vid = victim.cmd("CLIENT", "ID")
        assert other.cmd("CLIENT", "UNBLOCK", str(vid)) == 0        # not blocked
        victim.send(enc("BLPOP", k, "0"))
        wait_blocked(node, "blpop")
        # ttlguard learns the node's id for the pin's connection from a reply
        # it may read after the node shows the client blocked: until then the
        # client is not blocked to it (:0, as Redis says of one not blocked yet).
        wait_for(lambda: other.cmd("CLIENT", "UNBLOCK", str(vid)) == 1, timeout=5,
                 what="CLIENT UNBLOCK through ttlguard")
        assert victim.reply() is None                               # as at its timeout
        victim.send(enc("BRPOP", k, "0"))                           # a pin opened again
        wait_blocked(node, "brpop")
        wait_for(lambda: other.cmd("CLIENT", "UNBLOCK", str(vid), "ERROR") == 1, timeout=5,
                 what="CLIENT UNBLOCK ERROR through ttlguard")
        got = victim.reply()
        assert isinstance(got, RespError) and got.startswith(b"UNBLOCKED"), got
        assert victim.cmd("PING") == b"PONG"
        assert not any("b" in d.get("flags", "") for d in harness.client_list(node))
