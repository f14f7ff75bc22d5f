"""
Pub/sub through cluster = route: ttlguard as one standalone-looking Redis in
front of a real 6-node Redis Cluster (cluster_util.Cluster), with clients
nobody here wrote: python3-redis's plain redis.Redis pubsub(), redis-cli
without -c, and raw RESP2/RESP3 connections.

A subscriber leaves routing for a connection of its own to one node (route.c,
ROUTE_OWN): SUBSCRIBE and PSUBSCRIBE to the owner of slot 0 (a cluster
propagates PUBLISH to every node), SSUBSCRIBE to the owner of its channels'
slot. What is checked against the real nodes:
  - a message published through the proxy and directly to each of the six
    nodes arrives once, to SUBSCRIBE and to PSUBSCRIBE;
  - PUBSUB NUMSUB / NUMPAT / CHANNELS through the proxy are the slot-0 node's
    own answers, and count the proxy's subscribers;
  - SSUBSCRIBE/SPUBLISH on channels of every primary; channels of several
    slots get the node's own -CROSSSLOT, one of another node a named error;
    a shard subscriber whose slot moves away is unsubscribed by the node as
    on a direct connection, and routed again;
  - a RESP2 subscriber gets Redis's own refusal for other commands; after
    unsubscribing from everything it is routed again (keys of every primary);
  - a RESP3 subscriber's pushes come in the same places as on a direct
    connection to the node, interleaved with replies; what that node cannot
    answer as the cluster would is refused with an error that says so,
    never a -MOVED;
  - a subscriber whose node is killed sees its connection close; the proxy
    lives on, and a new subscriber reaches the promoted node.
"""

import subprocess
import threading

import pytest
import redis

import harness
from harness import Conn, RespError, RespPush, enc, slow, wait_for
from cluster_util import key_slot
from test_cluster_route import routed_fixtures, _finish_slot, cli

CROSSSLOT = b"CROSSSLOT Keys in request don't hash to the same slot"
SUB_LIMIT = b"ERR ttlguard cluster = route: a subscribed connection stays on its subscriptions'"


cluster, proxy = routed_fixtures("route-pubsub")


def classic_port(cluster):
    """The node classic subscriptions go to: the owner of slot 0."""
    return cluster.owner_of_slot(0)["port"]


def numsub(port, ch):
    with Conn(port) as c:
        return c.cmd("PUBSUB", "NUMSUB", ch)[1]


def channel_on(cluster, node, prefix):
    return cluster.key_for_slot_owner(node, prefix=prefix)


def next_message(ps, timeout=5):
    """The next message (not a confirmation) of a redis-py PubSub."""
    return wait_for(lambda: ps.get_message(ignore_subscribe_messages=True, timeout=0.1),
                    timeout, "a message")


# --------------------------------------------------------------------------


def test_publish_anywhere_reaches_subscribe_and_psubscribe_once(cluster, proxy):
    r = redis.Redis(port=proxy.port, socket_timeout=slow(10))
    ps = r.pubsub()
    ps.subscribe("news")
    ps.psubscribe("ne*")
    got = [ps.get_message(timeout=slow(5)) for _ in range(2)]
    assert [(m["type"], m["data"]) for m in got] == [("subscribe", 1), ("psubscribe", 2)]
    home = classic_port(cluster)
    assert numsub(home, "news") == 1
    assert all(numsub(p, "news") == 0 for p in cluster.ports if p != home)
    senders = [("proxy", proxy.port)] + [("node%d" % i, p) for i, p in enumerate(cluster.ports)]
    for name, port in senders:
        n = Conn(port).cmd("PUBLISH", "news", name)
        assert n == (2 if port in (proxy.port, home) else 0), (name, n)
    want = {(t, name.encode()) for name, _ in senders for t in ("message", "pmessage")}
    seen = [next_message(ps) for _ in range(len(want))]
    assert {(m["type"], m["data"]) for m in seen} == want and len(seen) == len(want)
    assert ps.get_message(timeout=slow(0.5)) is None, "a message came twice"
    # PUBSUB through the proxy is the classic node's own answer.
    with Conn(proxy.port) as c, Conn(home) as d:
        for q in (("NUMSUB", "news", "other"), ("NUMPAT",), ("CHANNELS", "ne*")):
            assert c.cmd("PUBSUB", *q) == d.cmd("PUBSUB", *q), q
        assert c.cmd("PUBSUB", "NUMSUB", "news") == [b"news", 1]
        assert c.cmd("PUBSUB", "NUMPAT") == 1
    ps.close()
    wait_for(lambda: numsub(home, "news") == 0, 5, "the subscription gone with its client")


def test_redis_cli_subscribe_without_c(cluster, proxy):
    p = subprocess.Popen(["redis-cli", "-p", str(proxy.port), "subscribe", "clich"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(3)]
        assert [l.strip() for l in lines] == ["subscribe", "clich", "1"], lines
        home = classic_port(cluster)
        elsewhere = next(q for q in cluster.ports if q != home)
        assert cli(elsewhere, "PUBLISH", "clich", "direct") == "0"    # none on that node
        assert cli(proxy.port, "PUBLISH", "clich", "proxied") == "1"  # as one server counts
        lines = [p.stdout.readline().strip() for _ in range(6)]
        assert lines == ["message", "clich", "direct", "message", "clich", "proxied"], lines
    finally:
        p.kill()
        p.wait()


def test_ssubscribe_and_spublish_on_every_primary(cluster, proxy):
    prims = cluster.primaries()
    chans = [channel_on(cluster, n, "sch:") for n in prims]
    subs = []
    for n, ch in zip(prims, chans):
        c = Conn(proxy.port)
        assert c.cmd("SSUBSCRIBE", ch) == [b"ssubscribe", ch.encode(), 1]
        subs.append(c)
        assert Conn(n["port"]).cmd("PUBSUB", "SHARDNUMSUB", ch) == [ch.encode(), 1]
    with Conn(proxy.port) as pub:
        for n, ch, c in zip(prims, chans, subs):
            assert pub.cmd("SPUBLISH", ch, "via-proxy") == 1
            assert Conn(n["port"]).cmd("SPUBLISH", ch, "direct") == 1
            assert c.replies(2) == [[b"smessage", ch.encode(), b"via-proxy"],
                                    [b"smessage", ch.encode(), b"direct"]]
            assert pub.cmd("PUBSUB", "SHARDNUMSUB", ch) == [ch.encode(), 1]
        listed = pub.cmd("PUBSUB", "SHARDCHANNELS", "sch:*")
        assert sorted(listed) == sorted(ch.encode() for ch in chans)
    c = subs[0]
    # Channels of two slots: the node's own answer; of another node: named.
    with Conn(prims[0]["port"]) as d:
        two = cluster.keys_for_slot_owner(prims[0], 2, prefix="sch2:")
        assert d.cmd("SSUBSCRIBE", *two) == RespError(CROSSSLOT)
        assert c.cmd("SSUBSCRIBE", *two) == RespError(CROSSSLOT)
    got = c.cmd("SSUBSCRIBE", chans[1])
    assert isinstance(got, RespError) and got.startswith(
        b"ERR ttlguard cluster = route does not support SSUBSCRIBE yet on another node"), got
    assert c.cmd("PING") == [b"pong", b""]
    assert c.cmd("SSUBSCRIBE", channel_on(cluster, prims[0], "sch3:"))[2] == 2
    for c in subs:
        c.close()


def test_a_shard_subscriber_whose_slot_moves(cluster, proxy):
    """A node that gives a slot away unsubscribes its shard channels'
    subscribers (an SUNSUBSCRIBE confirmation nobody asked for): through the
    proxy as on a direct connection, and the client is no subscriber then:
    its next commands run, routed."""
    src, dst = cluster.primaries()[1], cluster.primaries()[2]
    ch = channel_on(cluster, src, "mv:")        # a slot without keys: it moves at once
    slot = key_slot(ch)
    other = cluster.key_for_slot_owner(dst, prefix="mv-k:")
    with Conn(proxy.port) as c, Conn(src["port"]) as d:
        assert c.cmd("SET", other, "v") == b"OK"
        assert c.cmd("SSUBSCRIBE", ch) == d.cmd("SSUBSCRIBE", ch) == [b"ssubscribe",
                                                                      ch.encode(), 1]
        try:
            _finish_slot(cluster, slot, dst)
            assert c.reply() == d.reply() == [b"sunsubscribe", ch.encode(), 0]
            assert c.cmd("PING") == d.cmd("PING") == b"PONG"
            assert c.cmd("GET", other) == b"v"
        finally:
            _finish_slot(cluster, slot, src)
            cluster.wait_stable()


def test_resp2_subscriber_refusals_and_back_to_routing(cluster, proxy):
    prims = cluster.primaries()
    keys = [cluster.key_for_slot_owner(n, prefix="ps2:") for n in prims]
    with Conn(proxy.port) as c, Conn(classic_port(cluster)) as d:
        for k in keys:
            assert c.cmd("SET", k, k) == b"OK"
        # (through the proxy, direct to the slot-0 node): the node checks a
        # key's slot before the subscriber's context, so the direct side
        # asks about its own key where the proxy's is on another node.
        seq = [(("SUBSCRIBE", "a", "b"),) * 2,
               (("GET", keys[0]),) * 2,
               (("SET", keys[1], "x"), ("SET", keys[0], "x")),
               (("MGET", keys[1], keys[2]), ("MGET", keys[0])),
               (("OBJECT", "ENCODING", keys[2]), ("OBJECT", "ENCODING", keys[0])),
               (("HELLO", "2"),) * 2,
               (("PING",),) * 2,
               (("PSUBSCRIBE", "p*"),) * 2,
               (("UNSUBSCRIBE",),) * 2,
               (("PUNSUBSCRIBE",),) * 2]
        counts = {"SUBSCRIBE": 2, "UNSUBSCRIBE": 2}
        for via, direct in seq:
            n = counts.get(via[0], 1)
            c.send(enc(*via))
            d.send(enc(*direct))
            mine, theirs = c.replies(n), d.replies(n)
            assert mine == theirs, (via, mine, theirs)
            assert not any(isinstance(r, RespError) and r.startswith(b"MOVED") for r in mine)
        # Unsubscribed from everything: routed again, to every primary.
        assert [c.cmd("GET", k) for k in keys] == [k.encode() for k in keys]
        assert c.cmd("MGET", *keys) == [k.encode() for k in keys]


def _split(items):
    return ([x for x in items if isinstance(x, RespPush)],
            [x for x in items if not isinstance(x, RespPush)])


def test_resp3_subscriber_pushes_in_place(cluster, proxy):
    prims = cluster.primaries()
    home = cluster.owner_of_slot(0)
    mine = cluster.key_for_slot_owner(home, prefix="ps3:")
    other = next(cluster.key_for_slot_owner(n, prefix="ps3:") for n in prims
                 if n["id"] != home["id"])
    with Conn(proxy.port) as c:
        assert c.cmd("SET", mine, "here") == b"OK" and c.cmd("SET", other, "there") == b"OK"
    def seq(ch):
        return enc("SUBSCRIBE", ch) + enc("GET", mine) + enc("PUBLISH", ch, "self") + \
            enc("PING") + enc("PUBSUB", "NUMSUB", ch) + enc("PUBLISH", ch, "again")
    n = 8       # 3 pushes (subscribe, 2 messages) and 5 replies
    with Conn(proxy.port) as c, Conn(home["port"]) as d:
        c.cmd("HELLO", "3")
        d.cmd("HELLO", "3")
        c.send(seq("r3"))
        via = c.replies(n)
        d.send(seq("r3d"))
        direct = [[b"r3" if x == b"r3d" else x for x in r] if isinstance(r, list) else r
                  for r in d.replies(n)]
        assert via == direct, (via, direct)
        assert isinstance(via[0], RespPush) and via[5] == [b"r3", 1]
        # Another node's keys, or every primary's: refused by name, never -MOVED.
        for args in (("GET", other), ("DBSIZE",), ("MULTI",)):
            got = c.cmd(*args)
            assert isinstance(got, RespError) and got.startswith(SUB_LIMIT), (args, got)
        # Messages from elsewhere, interleaved with replies in their order.
        stop = threading.Event()

        def publish():
            with Conn(proxy.port) as p:
                i = 0
                while not stop.is_set():
                    p.cmd("PUBLISH", "r3", "m%d" % i)
                    i += 1
        t = threading.Thread(target=publish)
        t.start()
        try:
            got = []
            for i in range(200):
                c.send(enc("GET", mine) + enc("ECHO", "e%d" % i))
                while len(_split(got)[1]) < 2 * (i + 1):
                    got.append(c.reply())
        finally:
            stop.set()
            t.join()
        pushes, replies = _split(got)
        assert replies == [x for i in range(200) for x in (b"here", b"e%d" % i)]
        nums = [int(p[2][1:]) for p in pushes]
        assert nums == sorted(nums) and len(set(nums)) == len(nums) and nums, nums[:5]
        # Unsubscribed from everything: routed again.
        c.send(enc("UNSUBSCRIBE"))
        wait_for(lambda: c.reply() == RespPush([b"unsubscribe", b"r3", 0]), 5,
                 "the unsubscribe push")
        assert c.cmd("GET", other) == b"there"


def test_a_subscriber_whose_node_dies_is_closed(cluster, proxy):
    """Last in the module: the slot-0 primary is killed and its replica
    takes over."""
    home = cluster.owner_of_slot(0)
    c = Conn(proxy.port)
    assert c.cmd("SUBSCRIBE", "dies") == [b"subscribe", b"dies", 1]
    cluster.server(home["port"]).stop()
    c.read_until_eof(timeout=10)
    assert proxy.proc.poll() is None
    with Conn(proxy.port) as p:
        reply = p.cmd("PING")
        assert reply == b"PONG" or isinstance(reply, RespError), reply
    alive = next(q for q in cluster.ports if q != home["port"])
    new = wait_for(lambda: (lambda n: n if n["port"] != home["port"] else None)(
        cluster.owner_of_slot(0, alive)), 20, "a replica promoted for slot 0", interval=0.1)

    def subscribed_there():     # -CLUSTERDOWN, or closed, until the proxy knows
        try:
            with Conn(proxy.port) as s:
                return s.cmd("SUBSCRIBE", "again") == [b"subscribe", b"again", 1] and \
                    numsub(new["port"], "again") == 1
        except (EOFError, OSError):
            return False
    wait_for(subscribed_there, 20, "a new subscriber on the promoted node", interval=0.2)
