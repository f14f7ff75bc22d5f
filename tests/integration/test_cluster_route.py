"""
cluster = route: ttlguard as one standalone-looking Redis in front of a real
6-node Redis Cluster (3 primaries, 3 replicas; cluster_util.Cluster), driven
by tools nobody here wrote: redis-cli without -c, redis-benchmark without
--cluster, python3-redis's plain redis.Redis.

What is checked against the real nodes, not only through the proxy:
  - every key lands on the primary that owns its slot, from one address;
  - pipelines whose commands go to several nodes are answered in order, also
    with large replies that arrive in pieces while an earlier one is owed;
  - a TTL rule's rewrite (SET, and the MULTI form of HSET/INCR/LPUSH) gives
    the key its TTL on whichever node owns it;
  - -ASK, -TRYAGAIN and -MOVED of a slot migrated by hand (CLUSTER SETSLOT,
    MIGRATE) and of `redis-cli --cluster reshard` under traffic are followed
    by the proxy: the client never sees one, and the data is where the
    cluster says;
  - keys of several slots get -CROSSSLOT as a cluster words it, before
    anything is sent; what is not built yet is refused with an error that
    names it, and the connection goes on;
  - MULTI/EXEC, WATCH and blocking commands run on a connection of the
    client's own to the node of their keys' slot: the replies are that
    node's (compared with a direct connection), a queued command of another
    node gets -CROSSSLOT and EXEC -EXECABORT, a blocked client holds up
    nobody else and leaves no blocked client behind when it goes;
  - SCAN through the proxy returns exactly the keys SCAN on each primary
    returns (MATCH, COUNT, TYPE), every key present throughout a scan while
    keys are added, Redis's own error for a cursor it cannot read;
    redis-cli --scan without -c; RANDOMKEY nil only for an empty cluster;
  - /metrics counts the redirects followed, by kind;
  - the config refuses what makes no sense with cluster = route (file:line).
"""

import re
import subprocess
import threading
import time
import urllib.request

import pytest

import harness
from harness import Conn, RespError, enc, slow, wait_blocked, wait_for
from cluster_util import Cluster, key_slot

RULE = '[ttl "t:"]\nttl = 900\naction = rewrite\n'
CROSSSLOT = b"CROSSSLOT Keys in request don't hash to the same slot"


class RoutedProxy(harness.Ttlguard):
    """ttlguard with cluster = route, the first two nodes as seeds. Shared
    connections whatever the pass says (TTLG_PROXY_CONF): the only mode
    cluster = route has, multiplex = off is refused with it."""

    def __init__(self, tmpdir, cluster, conf=None, sections=RULE):
        seeds = " ".join("127.0.0.1:%d" % p for p in cluster.ports[:2])
        c = {"cluster": "route", "multiplex": "on"}
        c.update(conf or {})
        super().__init__(tmpdir, cluster.ports[0], conf=c, sections=sections,
                         backend_addr=seeds)


def routed_fixtures(name):
    """A module's `cluster` (6 nodes) and `proxy` (RoutedProxy with an admin
    port, admin_port) fixtures: `cluster, proxy = routed_fixtures("x")`."""
    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):
        c = Cluster(tmp_path_factory.mktemp(name + "-cluster")).start()
        yield c
        c.stop()

    @pytest.fixture(scope="module")
    def proxy(cluster, tmp_path_factory):
        harness.need_binary()
        admin = harness.free_port()
        p = RoutedProxy(tmp_path_factory.mktemp(name + "-proxy"), cluster,
                        conf={"admin": "127.0.0.1:%d" % admin})
        p.admin_port = admin
        p.start()
        yield p
        rc = p.stop()
        assert rc == 0, "ttlguard exit %s\n%s" % (rc, p.stderr())

    return cluster, proxy


cluster, proxy = routed_fixtures("route")


def cli(port, *args):
    """redis-cli without -c: what a client that knows nothing of clusters sees."""
    r = subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=slow(20))
    assert r.returncode == 0, r.stderr
    return r.stdout.rstrip("\n")


def owner_port(cluster, key):
    return cluster.owner_of_slot(key_slot(key))["port"]


def keys_on_each_primary(cluster, prefix, per_node=1):
    """{real port: [keys]}: per_node keys (distinct slots) owned by each primary."""
    return {n["port"]: cluster.keys_for_slot_owner(n, per_node, prefix=prefix)
            for n in cluster.primaries()}


def assert_no_redirect(replies):
    for r in replies:
        if isinstance(r, RespError):
            assert not r.startswith((b"MOVED", b"ASK", b"TRYAGAIN")), replies


# --------------------------------------------------------------------------


def test_config_refuses_what_route_does_not_take(tmp_path):
    harness.need_binary()
    cases = [({"cluster_ports": "21000-21010"}, "cluster_ports is for cluster = on"),
             ({"cluster_announce": "127.0.0.1"}, "cluster_announce is for cluster = on"),
             ({"multiplex": "off"}, "multiplex = off is not supported"),
             ({"client_password": "x"}, "does not log clients in itself yet")]
    for i, (conf, words) in enumerate(cases):
        d = tmp_path / ("c%d" % i)
        t = harness.Ttlguard(d, 1, conf=dict({"multiplex": "on"}, **conf, cluster="route"),
                             backend_addr="127.0.0.1:1 127.0.0.1:2")
        r = subprocess.run(t.command(), capture_output=True, text=True, timeout=slow(10))
        assert r.returncode != 0, (conf, r.stderr)
        with open(t.config_path) as f:
            line = next(i + 1 for i, l in enumerate(f) if l.startswith(next(iter(conf))))
        assert "ttlguard.ini:%d" % line in r.stderr and words in r.stderr, (conf, r.stderr)


def test_a_client_that_connects_before_the_slots_are_known(cluster, tmp_path):
    """A client accepted before the backend's commands and the slot map are
    read waits for them, then is served (not left unread)."""
    p = RoutedProxy(tmp_path, cluster)
    p.stderr_file = open(p.stderr_path, "ab")
    p.proc = subprocess.Popen(p.command(), stdin=subprocess.DEVNULL, stdout=p.stderr_file,
                              stderr=p.stderr_file, env=p.env)

    def connect():
        try:
            return Conn(p.port, timeout=slow(5))
        except OSError:
            return None
    try:
        c = wait_for(connect, 10, "the routed listener", interval=0.005)
        with c:
            c.send(enc("SET", "early:{1}", "x") + enc("GET", "early:{1}") + enc("PING"))
            assert c.replies(3) == [b"OK", b"x", b"PONG"]
    finally:
        assert p.stop() == 0, p.stderr()


def test_redis_cli_without_c_reaches_every_primary(cluster, proxy):
    """Plain redis-cli: SET/GET/INCR of keys owned by each primary, from one
    address; each key is found on its owner directly."""
    for port, keys in keys_on_each_primary(cluster, "cli:", 3).items():
        for k in keys:
            assert cli(proxy.port, "SET", k, "v-" + k) == "OK"
            assert cli(proxy.port, "GET", k) == "v-" + k
            assert cli(proxy.port, "INCR", k + "n") in ("1", "2")
            assert cluster.cmd(port, "GET", k) == ("v-" + k).encode()
    tag = "{cli-same}"
    assert cli(proxy.port, "MSET", tag + "a", "1", tag + "b", "2") == "OK"
    assert cli(proxy.port, "MGET", tag + "a", tag + "b") == "1\n2"
    script = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[2])"
    assert cli(proxy.port, "EVAL", script, "2", tag + "c", tag + "a", "3") == "1"
    assert cluster.cmd(owner_port(cluster, tag), "GET", tag + "c") == b"3"
    assert cli(proxy.port, "PING") == "PONG"


def _moved_count(cluster):
    """-MOVED replies the primaries have sent so far (INFO errorstats)."""
    total = 0
    for n in cluster.primaries():
        text = cluster.cmd(n["port"], "INFO", "errorstats").decode()
        for line in text.splitlines():
            if line.startswith("errorstat_MOVED:count="):
                total += int(line.split("=", 1)[1].split(",")[0])
    return total


def test_requests_go_to_the_owner_first(cluster, proxy):
    """With a stable cluster every request reaches the node that owns its
    slot at once: the slot is computed as the cluster computes it (hash
    tags too), so no node answers -MOVED (which the proxy would follow
    silently)."""
    import redis
    r = redis.Redis(port=proxy.port)
    cli(proxy.port, "GET", "warm")          # the slot map from a first read
    before = _moved_count(cluster)
    pipe = r.pipeline(transaction=False)
    for i in range(300):
        pipe.set("own:%d" % i, i)
        pipe.get("{own%d}:x" % i)
        pipe.hget("own:{%d}h" % i, "f")
    pipe.execute()
    assert _moved_count(cluster) == before


def test_standalone_answers_and_refusals(proxy):
    """What a standalone server says to cluster commands, what a cluster says
    to SELECT and to keys of several slots, and the limitations of this slice,
    each named; the connection goes on after each."""
    a, b = "x{1}", "x{2}"
    assert key_slot(a) != key_slot(b)
    cases = [
        (("CLUSTER", "INFO"), b"ERR This instance has cluster support disabled"),
        (("CLUSTER", "SLOTS"), b"ERR This instance has cluster support disabled"),
        (("READONLY",), b"ERR This instance has cluster support disabled"),
        (("ASKING",), b"ERR This instance has cluster support disabled"),
        (("SELECT", "1"), b"ERR SELECT is not allowed in cluster mode"),
        (("MSETNX", a, "1", b, "2"), CROSSSLOT),
        (("SUNIONSTORE", a, b), CROSSSLOT),
        (("RENAME", a, b), CROSSSLOT),
        (("EVAL", "return 1", "2", a, b), CROSSSLOT),
        (("CLIENT", "TRACKING", "ON"), b"ERR ttlguard cluster = route does not support "
                                       b"client-side caching"),
        (("WAIT", "0", "0"), b"ERR ttlguard cluster = route does not support WAIT yet"),
        (("WAITAOF", "0", "0", "0"), b"ERR ttlguard cluster = route does not support WAITAOF "
                                     b"yet"),
        (("SWAPDB", "0", "1"), b"ERR SWAPDB is not allowed in cluster mode"),
        (("DBSIZE", "x"), b"ERR wrong number of arguments for 'dbsize' command"),
    ]
    with Conn(proxy.port) as c:
        assert c.cmd("SELECT", "0") == b"OK"
        for args, want in cases:
            got = c.cmd(*args)
            assert isinstance(got, RespError) and got.startswith(want), (args, got)
            assert c.cmd("PING") == b"PONG"
        # Pipelined: the same answers in their places among forwarded replies.
        c.send(b"".join(enc(*args) + enc("GET", a) for args, _ in cases))
        got = c.replies(2 * len(cases))
        for i, (args, want) in enumerate(cases):
            assert got[2 * i].startswith(want), (args, got[2 * i])
            assert not isinstance(got[2 * i + 1], RespError), got[2 * i + 1]


def test_quit_answers_and_closes(cluster, proxy):
    """QUIT as a server answers it: +OK, then the connection closes and
    nothing pipelined after it runs (also inside MULTI, which QUIT ends)."""
    ctr = "quit:ctr"
    port = cluster.owner_of_slot(key_slot(ctr))["port"]
    cluster.cmd(port, "DEL", ctr)
    for before in ([], [enc("MULTI")]):
        with Conn(proxy.port) as c:
            c.send(b"".join(before) + enc("INCR", ctr) + enc("QUIT") + enc("INCR", ctr))
            got = c.replies(len(before) + 2)
            assert got[-1] == b"OK", got
            assert c.read_until_eof(timeout=5) == b""
    assert cluster.cmd(port, "GET", ctr) == b"1"


def test_pipelines_across_nodes_answer_in_order(cluster, proxy):
    """redis-py's plain client, a pipeline of 600 commands over every slot
    owner; and a raw pipeline whose large replies (1 MB from each primary)
    arrive in pieces while an earlier one is still owed."""
    import redis
    r = redis.Redis(port=proxy.port)
    pipe = r.pipeline(transaction=False)
    keys = ["pl:%d" % i for i in range(200)]
    for i, k in enumerate(keys):
        pipe.set(k, i)
        pipe.incr(k)
        pipe.get(k)
    res = pipe.execute()
    for i, k in enumerate(keys):
        assert res[3 * i:3 * i + 3] == [True, i + 1, str(i + 1).encode()], (k, res[3 * i:3 * i + 3])
    assert len({owner_port(cluster, k) for k in keys}) == 3
    assert r.pipeline(transaction=True).set("pl:0", 1).get("pl:0").execute() == [True, b"1"]

    big = {port: ks[0] for port, ks in keys_on_each_primary(cluster, "big:").items()}
    values = {k: (("%s-" % k) * 80000)[:1 << 20].encode() for k in big.values()}
    for port, k in big.items():
        assert cluster.cmd(port, "SET", k, values[k]) == b"OK"
    order = list(big.values()) * 3
    with Conn(proxy.port, timeout=slow(20)) as c:
        c.send(b"".join(enc("GET", k) + enc("STRLEN", k) for k in order))
        got = c.replies(2 * len(order))
    for i, k in enumerate(order):
        assert got[2 * i] == values[k] and got[2 * i + 1] == len(values[k]), (i, k)


def test_resp3_across_nodes(cluster, proxy):
    """HELLO 3, then a pipeline over every primary: RESP3 replies (nulls,
    maps) from each node's RESP3 connection, in order, a split MGET too."""
    per_node = keys_on_each_primary(cluster, "r3:", 2)
    keys = [k for ks in per_node.values() for k in ks]
    with Conn(proxy.port) as c:
        hello = c.cmd("HELLO", "3")
        assert dict(hello)[b"proto"] == 3, hello
        c.send(b"".join(enc("SET", k, k) + enc("HSET", k + "h", "f", "v") +
                        enc("HGETALL", k + "h") + enc("GET", k + "nope") for k in keys) +
               enc("MGET", keys[0], "r3:nope", keys[-1]))
        got = c.replies(4 * len(keys) + 1)
    for i, k in enumerate(keys):
        assert got[4 * i] == b"OK" and got[4 * i + 1] in (0, 1), got[4 * i:4 * i + 4]
        assert isinstance(got[4 * i + 2], harness.RespMap), got[4 * i + 2]
        assert list(got[4 * i + 2]) == [(b"f", b"v")] and got[4 * i + 3] is None
    assert got[-1] == [keys[0].encode(), None, keys[-1].encode()], got[-1]


def test_multi_key_commands_split_by_slot(cluster, proxy):
    """MSET, MGET, EXISTS, TOUCH, DEL, UNLINK over keys of 7 slots (each with
    several keys, interleaved) on every primary, pipelined among single-key
    commands: one reply each, merged in the client's key order, and the keys
    where the cluster keeps them."""
    keys = ["sp:{%d}:%d" % (i % 7, i) for i in range(40)]  # 7 slots, interleaved
    assert len({owner_port(cluster, k) for k in keys}) == 3
    missing = "sp:missing"
    args = [x for k in keys for x in (k, "v-" + k)]
    with Conn(proxy.port) as c:
        assert c.cmd("DEL", *keys, missing) in range(0, 41)
        c.send(enc("MSET", *args) + enc("GET", keys[7]) + enc("MGET", missing, *keys) +
               enc("EXISTS", *keys, missing, keys[0]) + enc("TOUCH", *keys) +
               enc("PING") + enc("DEL", *keys[:20]) + enc("UNLINK", *keys[10:], missing) +
               enc("MGET", *keys[15:25]))
        got = c.replies(9)
    assert got[0] == b"OK" and got[1] == b"v-" + keys[7].encode(), got[:2]
    assert got[2] == [None] + [("v-" + k).encode() for k in keys], got[2]
    assert got[3:6] == [41, 40, b"PONG"], got[3:6]
    assert got[6:8] == [20, 20], got[6:8]
    assert got[8] == [None] * 10, got[8]
    with Conn(proxy.port) as c:
        assert c.cmd("MSET", *args) == b"OK"
    for k in keys:
        assert cluster.cmd(owner_port(cluster, k), "GET", k) == ("v-" + k).encode(), k
    with Conn(proxy.port) as c:             # an odd MSET: what a node says of it
        got = c.cmd("MSET", keys[0], "a", keys[3])
        direct = cluster.cmd(cluster.primaries()[0]["port"], "MSET", keys[0], "a", keys[3])
        assert isinstance(got, RespError) and got == direct, (got, direct)
        assert c.cmd("DEL", *keys) == 40


def test_whole_keyspace_commands_cover_every_primary(cluster, proxy):
    """DBSIZE is the sum over the primaries, KEYS their union, FLUSHALL
    empties each; SCRIPT LOAD loads the script on each (EVALSHA then runs on
    any key's node)."""
    with Conn(proxy.port) as c:
        assert c.cmd("FLUSHALL") == b"OK"
        assert all(cluster.cmd(n["port"], "DBSIZE") == 0 for n in cluster.primaries())
        keys = ["ks:%d" % i for i in range(30)]
        assert c.cmd("MSET", *[x for k in keys for x in (k, "1")]) == b"OK"
        direct = sum(cluster.cmd(n["port"], "DBSIZE") for n in cluster.primaries())
        assert c.cmd("DBSIZE") == direct == 30
        assert sorted(c.cmd("KEYS", "ks:*")) == sorted(k.encode() for k in keys)
        sha = c.cmd("SCRIPT", "LOAD", "return KEYS[1]")
        assert all(c.cmd("EVALSHA", sha, "1", k) == k.encode() for k in keys)
        assert c.cmd("FLUSHDB") == b"OK" and c.cmd("DBSIZE") == 0


def test_scripts_and_functions_on_every_primary(cluster, proxy):
    """SCRIPT EXISTS says 1 only for a script every primary has (EVALSHA may
    go to any); FUNCTION LOAD, DELETE, FLUSH and RESTORE reach every primary,
    so FCALL runs on whichever node its key names; FUNCTION LIST and DUMP are
    one primary's, the same as each node's; an error of one node is the
    client's, as on one server."""
    prims = [n["port"] for n in cluster.primaries()]
    lib = "#!lua name=tl\nredis.register_function('tl_get', function(k) " \
          "return redis.call('GET', k[1]) end)"
    keys = ["fn:%d" % i for i in range(30)]
    with Conn(proxy.port) as c:
        assert c.cmd("SCRIPT", "FLUSH") == b"OK" and c.cmd("FUNCTION", "FLUSH") == b"OK"
        everywhere = c.cmd("SCRIPT", "LOAD", "return 7")
        only_one = cluster.cmd(prims[1], "SCRIPT", "LOAD", "return 8")
        assert c.cmd("SCRIPT", "EXISTS", everywhere, only_one, "0" * 40) == [1, 0, 0]
        assert c.cmd("FUNCTION", "LOAD", lib) == b"tl"
        assert all(cluster.cmd(p, "FUNCTION", "LIST")[0][1] == b"tl" for p in prims)
        got = c.cmd("FUNCTION", "LOAD", lib)
        assert isinstance(got, RespError) and got == cluster.cmd(prims[0], "FUNCTION", "LOAD", lib)
        assert c.cmd("MSET", *[x for k in keys for x in (k, k + "v")]) == b"OK"
        assert all(c.cmd("FCALL", "tl_get", "1", k) == (k + "v").encode() for k in keys)
        assert c.cmd("FUNCTION", "LIST") == cluster.cmd(prims[2], "FUNCTION", "LIST")
        dump = c.cmd("FUNCTION", "DUMP")
        assert c.cmd("FUNCTION", "DELETE", "tl") == b"OK"
        assert all(cluster.cmd(p, "FUNCTION", "LIST") == [] for p in prims)
        assert c.cmd("FUNCTION", "RESTORE", dump) == b"OK"
        assert all(c.cmd("FCALL", "tl_get", "1", k) == (k + "v").encode() for k in keys)
        assert c.cmd("FUNCTION", "FLUSH") == b"OK" and c.cmd("SCRIPT", "FLUSH") == b"OK"
        assert all(cluster.cmd(p, "FUNCTION", "LIST") == [] for p in prims)
        assert c.cmd("SCRIPT", "EXISTS", everywhere) == [0]
        assert c.cmd("DEL", *keys) == len(keys)


def test_config_set_and_debug_reach_the_nodes_they_mean(cluster, proxy):
    """CONFIG SET reaches every primary (a server's setting, through one
    address: each node the keys may be on takes it), CONFIG GET one of them;
    DEBUG OBJECT KEY asks the key's node; a blocking command with the wrong
    argument count gets the node's own arity error."""
    prims = [n["port"] for n in cluster.primaries()]
    keys = ["cfg:%d" % i for i in range(20)]
    before = cluster.cmd(prims[0], "CONFIG", "GET", "hash-max-listpack-entries")[1]
    with Conn(proxy.port) as c:
        try:
            assert c.cmd("CONFIG", "SET", "hash-max-listpack-entries", "1") == b"OK"
            assert all(cluster.cmd(p, "CONFIG", "GET", "hash-max-listpack-entries") ==
                       [b"hash-max-listpack-entries", b"1"] for p in prims)
            assert c.cmd("CONFIG", "GET", "hash-max-listpack-entries")[1] == b"1"
            for k in keys:
                assert c.cmd("HSET", k, "a", "1", "b", "2") == 2
                got = c.cmd("DEBUG", "OBJECT", k)
                assert b"encoding:hashtable" in got, (k, got)
                node = cluster.owner_of_slot(key_slot(k))["port"]
                assert cluster.cmd(node, "DEBUG", "OBJECT", k).split(b" ")[:4] == \
                    got.split(b" ")[:4]
            bad = c.cmd("CONFIG", "SET", "hash-max-listpack-entries", "nope")
            assert isinstance(bad, RespError) and bad == cluster.cmd(
                prims[1], "CONFIG", "SET", "hash-max-listpack-entries", "nope")
        finally:
            assert c.cmd("CONFIG", "SET", "hash-max-listpack-entries", before) == b"OK"
        assert c.cmd("DEL", *keys) == len(keys)
        for args in (("BZMPOP", "0", "2", "x"), ("BLMPOP", "0", "5", "a", "LEFT")):
            got = c.cmd(*args)
            assert isinstance(got, RespError) and got == cluster.cmd(prims[0], *args), (args, got)


def _info(text):
    """INFO's text as a dict of its name:value lines."""
    if isinstance(text, bytes):
        text = text.decode()
    return dict(l.split(":", 1) for l in text.splitlines() if ":" in l and not l.startswith("#"))


def test_info_counts_the_whole_cluster(cluster, proxy):
    """INFO through route: the keyspace, clients and command counts are the
    sums over the primaries (one server's INFO counts everything it holds),
    a client blocked through ttlguard shows in blocked_clients whichever
    node it waits on; the rest (version, role) is one primary's, with node
    addresses hidden. RESP3's verbatim text too."""
    prims = [n["port"] for n in cluster.primaries()]
    keys = ["inf:%d" % i for i in range(40)]
    with Conn(proxy.port) as c, Conn(proxy.port) as b:
        assert c.cmd("FLUSHALL") == b"OK"
        assert c.cmd("MSET", *[x for k in keys for x in (k, "v")]) == b"OK"
        for k in keys[:10]:
            assert c.cmd("EXPIRE", k, "1000") == 1
        got = _info(c.cmd("INFO", "keyspace"))
        keys_on = [_info(cluster.cmd(p, "INFO", "keyspace")).get("db0", "keys=0") for p in prims]
        assert sum(int(v.split(",")[0].split("=")[1]) for v in keys_on) == 40
        assert got["db0"].startswith("keys=40,expires=10,avg_ttl="), got
        lst = keys[0] + ":list"
        port = cluster.owner_of_slot(key_slot(lst))["port"]
        b.send(enc("BLPOP", lst, "0"))
        wait_blocked(port, "blpop")
        wait_for(lambda: _info(c.cmd("INFO", "clients"))["blocked_clients"] == "1",
                 timeout=5, what="blocked_clients through route")
        assert c.cmd("LPUSH", lst, "x") == 1
        assert b.replies(1) == [[lst.encode(), b"x"]]
        wait_for(lambda: _info(c.cmd("INFO", "clients"))["blocked_clients"] == "0",
                 timeout=5, what="blocked_clients back to 0")
        everything = _info(c.cmd("INFO", "everything"))
        one = _info(cluster.cmd(prims[0], "INFO", "everything"))
        assert everything["redis_version"] == one["redis_version"]
        assert everything["role"] == "master" and everything["maxclients"] == one["maxclients"]
        assert int(everything["total_commands_processed"]) > int(one["total_commands_processed"])
        assert not isinstance(c.cmd("HELLO", "3"), RespError)
        got3 = c.cmd("INFO", "keyspace")
        assert _info(got3)["db0"].startswith("keys=40,expires=10,"), got3
        assert c.cmd("DEL", *keys) == 40


def test_script_kill_reaches_the_busy_node(cluster, proxy):
    """SCRIPT KILL and FUNCTION KILL through route end a script that runs
    past busy-reply-threshold on whichever primary runs it (they go to each
    primary over a connection of their own: the busy node reads no more from
    the shared connection the script came on); the script's client gets the
    node's error, a client waiting behind it on that node its reply; with
    nothing running, the node's -NOTBUSY."""
    key = "spin:k"
    port = cluster.owner_of_slot(key_slot(key))["port"]
    lib = "#!lua name=spinlib\nredis.register_function{function_name='spin', " \
          "callback=function(k) while true do end end, flags={'no-writes'}}"
    with Conn(proxy.port) as c:
        assert c.cmd("SET", key, "v") == b"OK"
        assert c.cmd("CONFIG", "SET", "lua-time-limit", "100") == b"OK"
        try:
            for kill, start in ((("SCRIPT", "KILL"), ("EVAL", "while true do end", "1", key)),
                                (("FUNCTION", "KILL"), ("FCALL", "spin", "1", key))):
                if kill[0] == "FUNCTION":
                    assert c.cmd("FUNCTION", "LOAD", "REPLACE", lib) == b"spinlib"
                idle = c.cmd(*kill)
                assert isinstance(idle, RespError) and idle == cluster.cmd(port, *kill), idle
                with Conn(proxy.port) as a, Conn(proxy.port) as b:
                    a.send(enc(*start))
                    wait_for(lambda: isinstance(cluster.cmd(port, "PING"), RespError),
                             timeout=5, what="the node busy with the script")
                    b.send(enc("GET", key))
                    assert c.cmd(*kill) == b"OK"
                    got = a.replies(1, timeout=5)[0]
                    assert isinstance(got, RespError) and b"killed" in got, got
                    assert b.replies(1, timeout=5) == [b"v"]
                assert cluster.cmd(port, "PING") == b"PONG"
        finally:
            assert c.cmd("CONFIG", "SET", "lua-time-limit", "5000") == b"OK"
            c.cmd("FUNCTION", "FLUSH")
        assert c.cmd("DEL", key) == 1


def scan_all(port, *opts, between=None):
    """Every key of a SCAN loop from cursor 0 on port (a list: duplicates
    kept) and the cursors it went through; between(i) runs after call i."""
    keys, cursors, cursor = [], [], b"0"
    with Conn(port) as c:
        for i in range(100000):
            got = c.cmd("SCAN", cursor, *opts)
            assert not isinstance(got, RespError), (cursor, got)
            cursor, page = got
            keys += page
            cursors.append(cursor)
            if cursor == b"0":
                return keys, cursors
            if between is not None:
                between(i)
    raise AssertionError("SCAN did not end: %r" % cursors[-5:])


def scan_primaries(cluster, *opts):
    """The union of a full SCAN on each primary, straight to it."""
    out = set()
    for n in cluster.primaries():
        out |= set(scan_all(n["port"], *opts)[0])
    return out


def test_scan_walks_every_primary(cluster, proxy):
    """SCAN through the proxy over keys of every primary returns exactly the
    keys SCAN on each primary returns, with MATCH, COUNT and TYPE; its
    cursors are 64-bit decimals that end at 0; redis-py's scan_iter agrees."""
    import redis
    with Conn(proxy.port) as c:
        assert c.cmd("FLUSHALL") == b"OK"
        strings = ["sc:%d" % i for i in range(400)]
        assert c.cmd("MSET", *[x for k in strings for x in (k, "v")]) == b"OK"
        hashes = ["sc:h%d" % i for i in range(60)]
        for k in hashes:
            assert c.cmd("HSET", k, "f", "v") == 1
    every = {k.encode() for k in strings + hashes}
    assert len({owner_port(cluster, k) for k in strings}) == 3
    for opts in [(), ("COUNT", "7"), ("COUNT", "1000"), ("MATCH", "sc:1*"),
                 ("MATCH", "sc:h*", "COUNT", "3"), ("TYPE", "hash"),
                 ("TYPE", "string", "COUNT", "50")]:
        keys, cursors = scan_all(proxy.port, *opts)
        direct = scan_primaries(cluster, *opts)
        assert set(keys) == direct, (opts, len(keys), len(direct))
        assert all(0 <= int(x) < 1 << 64 for x in cursors), cursors
    assert scan_primaries(cluster) == every
    assert set(scan_all(proxy.port, "TYPE", "hash")[0]) == {k.encode() for k in hashes}
    r = redis.Redis(port=proxy.port)
    assert set(r.scan_iter(match="sc:2*", count=5)) == {k for k in every if k.startswith(b"sc:2")}
    with Conn(proxy.port) as c:             # inline, as typed in telnet
        cursor, got = b"0", set()
        for _ in range(1000):
            c.send(b"SCAN " + cursor + b" COUNT 100\r\n")
            cursor, page = c.reply()
            got |= set(page)
            if cursor == b"0":
                break
        assert got == every


def test_scan_while_keys_are_added(cluster, proxy):
    """Keys added on every primary between the calls of a scan: every key
    present for the whole scan is returned, and nothing that never was."""
    with Conn(proxy.port) as c:
        assert c.cmd("FLUSHALL") == b"OK"
        base = ["sa:%d" % i for i in range(300)]
        assert c.cmd("MSET", *[x for k in base for x in (k, "v")]) == b"OK"
    added = []

    def add(i):
        ks = ["sa:new:%d:%d" % (i, j) for j in range(8)]
        with Conn(proxy.port) as w:
            assert w.cmd("MSET", *[x for k in ks for x in (k, "n")]) == b"OK"
        added.extend(ks)

    keys, cursors = scan_all(proxy.port, "COUNT", "10", between=add)
    got = set(keys)
    assert {k.encode() for k in base} <= got, sorted({k.encode() for k in base} - got)[:5]
    assert got <= {k.encode() for k in base + added}
    assert len(cursors) > 20 and added


def test_scan_cursor_errors_as_redis_gives_them(cluster, proxy):
    """A cursor Redis cannot read gets Redis's own error, checked against a
    node; SCAN's other errors are the node's; a cursor past the last
    primary ends the scan (empty page, cursor 0)."""
    node = cluster.primaries()[0]["port"]
    with Conn(proxy.port) as c, Conn(node) as d:
        for args in [("abc",), ("12x",), ("18446744073709551616",), ("1.5",),
                     ("0", "COUNT", "0"), ("0", "COUNT", "x"), ("0", "MATCH"), ("0", "BOGUS", "1")]:
            got, want = c.cmd("SCAN", *args), d.cmd("SCAN", *args)
            assert isinstance(want, RespError), (args, want)
            assert got == want, (args, got, want)
        assert c.cmd("SCAN", "abc") == b"ERR invalid cursor"
        got = c.cmd("SCAN")
        assert isinstance(got, RespError) and got == d.cmd("SCAN"), got
        assert c.cmd("SCAN", "16383") == [b"0", []]
        assert c.cmd("PING") == b"PONG"


def test_redis_cli_scan_without_c(cluster, proxy):
    """redis-cli --scan (no -c) through the proxy lists every key of every
    primary, with --pattern too (redis-cli 7.0 has no --count)."""
    with Conn(proxy.port) as c:
        assert c.cmd("FLUSHALL") == b"OK"
        keys = ["rc:%d" % i for i in range(250)] + ["other:%d" % i for i in range(50)]
        assert c.cmd("MSET", *[x for k in keys for x in (k, "v")]) == b"OK"
    out = cli(proxy.port, "--scan").splitlines()
    assert sorted(set(out)) == sorted(keys)
    out = cli(proxy.port, "--scan", "--pattern", "rc:*").splitlines()
    assert sorted(set(out)) == sorted(k for k in keys if k.startswith("rc:"))


def test_randomkey(cluster, proxy):
    """RANDOMKEY: nil for an empty cluster only; the one key of a cluster
    whose only key lives on one primary, whichever primary that is; a key of
    the cluster otherwise."""
    with Conn(proxy.port) as c:
        assert c.cmd("FLUSHALL") == b"OK"
        assert c.cmd("RANDOMKEY") is None
        for port, (k,) in keys_on_each_primary(cluster, "rk:").items():
            assert c.cmd("SET", k, "v") == b"OK" and cluster.cmd(port, "DBSIZE") == 1
            assert all(c.cmd("RANDOMKEY") == k.encode() for _ in range(12)), k
            assert c.cmd("DEL", k) == 1
        keys = {("rk:%d" % i).encode() for i in range(30)}
        assert c.cmd("MSET", *[x for k in keys for x in (k, b"v")]) == b"OK"
        seen = {c.cmd("RANDOMKEY") for _ in range(60)}
        assert seen <= keys and len({owner_port(cluster, k) for k in seen}) > 1, seen
    with Conn(proxy.port) as c:             # RESP3: its null
        assert dict(c.cmd("HELLO", "3"))[b"proto"] == 3
        assert c.cmd("FLUSHALL") == b"OK" and c.cmd("RANDOMKEY") is None


def test_rules_rewrite_on_every_primary(cluster, proxy):
    """Under [ttl "t:"] (rewrite, 900 s): SET without EX, and HSET, INCR,
    LPUSH (the proxy's MULTI form), pipelined over keys of every primary:
    each reply is the command's own and each key has its TTL on its owner."""
    import redis
    r = redis.Redis(port=proxy.port)
    per_node = keys_on_each_primary(cluster, "t:rw:", 4)
    pipe = r.pipeline(transaction=False)
    keys = [k for ks in per_node.values() for k in ks]
    for k in keys:
        pipe.delete(k + ":s", k + ":h", k + ":c", k + ":l")
        pipe.set(k + ":s", "v")
        pipe.hset(k + ":h", "f", "v")
        pipe.incr(k + ":c")
        pipe.lpush(k + ":l", "a", "b")
    res = pipe.execute()
    for i, k in enumerate(keys):
        assert res[5 * i + 1:5 * i + 5] == [True, 1, 1, 2], (k, res[5 * i:5 * i + 5])
    for port, ks in per_node.items():
        for k in ks:
            for suffix in (":s", ":h", ":c", ":l"):
                ttl = cluster.cmd(port, "TTL", k + suffix)
                assert 850 <= ttl <= 900, (k + suffix, port, ttl)
    # Outside the rule nothing changes.
    assert r.set("free:{1}", "v") and r.ttl("free:{1}") == -1


# -- transactions, WATCH, blocking commands: a connection of the client's own --


def _direct_and_routed(cluster, proxy, key, seq):
    """seq (a list of commands) pipelined through the proxy and straight to
    the node that owns key's slot, each after DEL of the keys it names: the
    two reply lists."""
    def run(port):
        with Conn(port) as c:
            c.cmd("DEL", key, key + ":b")
            c.send(b"".join(enc(*args) for args in seq))
            return c.replies(len(seq))
    return run(proxy.port), run(owner_port(cluster, key))


TX_SEQUENCES = [
    # keyed at once
    [("MULTI",), ("SET", "{K}", "1"), ("INCR", "{K}"), ("GET", "{K}"), ("EXEC",)],
    # keyless first: the transaction moves to the key's node
    [("MULTI",), ("PING",), ("ECHO", "x"), ("SET", "{K}", "1"), ("GET", "{K}"),
     ("EXEC",)],
    # queue-time errors: an unknown command, a wrong arity; EXEC aborts
    [("MULTI",), ("SET", "{K}", "1"), ("NOSUCHCMD", "a"), ("GET", "{K}"), ("EXEC",),
     ("GET", "{K}")],
    [("MULTI",), ("SET", "{K}"), ("EXEC",)],
    # DISCARD, an empty transaction, nesting, EXEC/DISCARD/UNWATCH without MULTI
    [("MULTI",), ("SET", "{K}", "1"), ("DISCARD",), ("GET", "{K}")],
    [("MULTI",), ("EXEC",)],
    [("MULTI",), ("MULTI",), ("SET", "{K}:b", "2"), ("EXEC",)],
    [("EXEC",), ("DISCARD",), ("UNWATCH",), ("PING",)],
    # keys of two slots of the same node: the node's own -CROSSSLOT
    [("MULTI",), ("SET", "{K}", "1"), ("SET", "{K2}", "1"), ("EXEC",)],
    # a blocking command inside MULTI does not block; SELECT is queued
    [("MULTI",), ("RPUSH", "{K}", "a"), ("BLPOP", "{K}", "0"), ("SELECT", "0"), ("EXEC",)],
]


def test_multi_exec_as_the_owning_node(cluster, proxy):
    """MULTI ... EXEC over keys of each primary: the replies a client gets
    straight from the node that owns the keys' slot (+OK, +QUEUED, EXEC's
    array, the node's queue-time errors, -EXECABORT), also when MULTI and
    commands without keys come first (the transaction moves to the node of
    its first key)."""
    for port, keys in keys_on_each_primary(cluster, "tx:", 2).items():
        k, k2 = keys
        for seq in TX_SEQUENCES:
            seq = [tuple(a.replace("{K2}", k2).replace("{K}", k) for a in args)
                   for args in seq]
            routed, direct = _direct_and_routed(cluster, proxy, k, seq)
            assert routed == direct, (port, seq, routed, direct)
    # the same one command at a time, as an interactive client sends them
    k = "txi:{0}"
    cluster.cmd(owner_port(cluster, k), "DEL", k)
    with Conn(proxy.port) as c, Conn(owner_port(cluster, k)) as d:
        for args in [("MULTI",), ("PING",), ("SET", k, "v"), ("GET", k), ("EXEC",),
                     ("GET", k)]:
            assert c.cmd(*args) == d.cmd(*args), args


def test_multi_crossslot_aborts_and_routing_goes_on(cluster, proxy):
    """A queued command whose keys are not in the transaction's slot gets a
    cluster's -CROSSSLOT (never a -MOVED, never a node address) and EXEC
    -EXECABORT; nothing was written. After EXEC (or DISCARD) the same
    connection reaches every primary again."""
    per_node = keys_on_each_primary(cluster, "txc:")
    a, b = [ks[0] for ks in per_node.values()][:2]
    with Conn(proxy.port) as c:
        c.cmd("DEL", a)
        c.cmd("DEL", b)
        c.send(enc("MULTI") + enc("SET", a, "1") + enc("SET", b, "1") + enc("MSET", a, 1, b, 2) +
               enc("EXEC") + enc("EXISTS", a) + enc("EXISTS", b))
        got = c.replies(7)
        assert got[:2] == [b"OK", b"QUEUED"], got
        assert got[2] == got[3] == CROSSSLOT, got
        assert got[4].startswith(b"EXECABORT Transaction discarded because of previous errors"), got
        assert got[5:] == [0, 0], got
        # one key of each node right after: the session routes again
        for port, ks in per_node.items():
            assert c.cmd("SET", ks[0], "after") == b"OK"
            assert cluster.cmd(port, "GET", ks[0]) == b"after"
        # a transaction on each node in turn, on the same connection
        for port, ks in per_node.items():
            c.send(enc("MULTI") + enc("INCR", ks[0] + "n") + enc("EXEC"))
            assert c.replies(3)[2] == [1], ks
            assert cluster.cmd(port, "GET", ks[0] + "n") == b"1"
            c.cmd("DEL", ks[0] + "n")
        assert c.cmd("MULTI") == b"OK" and c.cmd("SET", a, "x") == b"QUEUED"
        assert c.cmd("DISCARD") == b"OK" and c.cmd("GET", a) == b"after"
        assert c.cmd("GET", b) == b"after"


def test_transactions_pipelined_back_to_back_over_every_node(cluster, proxy):
    """One write of 60 transactions, each on the node of its keys, among
    plain GETs of keys of every node: every reply in its place, every value
    on its owner; and, the client still connected, no connection of its own
    left open on any node once its replies are in."""
    keys = [k for ks in keys_on_each_primary(cluster, "txp:", 4).values() for k in ks]

    def connected():                # less this one, which asks
        return [int(cluster.info(n["port"], "clients")["connected_clients"]) - 1
                for n in cluster.primaries()]
    with Conn(proxy.port) as c:
        for k in keys:
            c.cmd("GET", k)         # the shared connections to every node are open
    before = connected()
    out, want = [], []
    for i in range(60):
        k, g = keys[i % len(keys)], keys[(i * 7 + 3) % len(keys)]
        out += [enc("GET", g), enc("MULTI"), enc("PING"), enc("SET", k, i), enc("GET", k),
                enc("EXEC")]
        want += [[b"OK", b"QUEUED", b"QUEUED", b"QUEUED", [b"PONG", b"OK", str(i).encode()]]]
    with Conn(proxy.port, timeout=slow(30)) as c:
        for k in keys:
            c.cmd("DEL", k)
        c.send(b"".join(out))
        got = c.replies(6 * len(want))
        wait_for(lambda: connected() == before, 5, "the nodes' clients back to %s" % before)
    for i, w in enumerate(want):
        assert not isinstance(got[6 * i], RespError) and got[6 * i + 1:6 * i + 6] == w, \
            (i, got[6 * i:6 * i + 6])
    for i, k in enumerate(keys):
        last = max(j for j in range(60) if j % len(keys) == i)
        assert cluster.cmd(owner_port(cluster, k), "GET", k) == str(last).encode(), k


def test_multi_under_a_ttl_rule(cluster, proxy):
    """Under [ttl "t:"] (rewrite, 900 s) the client's own transaction: each
    reply is the command's own and each key has its TTL on its owner."""
    for port, ks in keys_on_each_primary(cluster, "t:tx:").items():
        k = ks[0]
        with Conn(proxy.port) as c:
            c.cmd("DEL", k + ":s", k + ":h", k + ":c")
            c.send(enc("MULTI") + enc("SET", k + ":s", "v") + enc("HSET", k + ":h", "f", "v") +
                   enc("INCR", k + ":c") + enc("EXEC"))
            got = c.replies(5)
        assert got == [b"OK", b"QUEUED", b"QUEUED", b"QUEUED", [b"OK", 1, 1]], got
        for suffix in (":s", ":h", ":c"):
            ttl = cluster.cmd(port, "TTL", k + suffix)
            assert 850 <= ttl <= 900, (k + suffix, port, ttl)


def test_watch_with_a_concurrent_write(cluster, proxy):
    """WATCH, another client writes the key, MULTI ... EXEC: a null array,
    as from the node; without the write EXEC runs. A transaction on another
    node than the WATCH's, and WATCH of keys of several slots, get
    -CROSSSLOT. UNWATCH, EXEC, DISCARD end the WATCH: the connection then
    runs transactions anywhere."""
    per_node = keys_on_each_primary(cluster, "w:")
    k, other = [ks[0] for ks in per_node.values()][:2]
    with Conn(proxy.port) as c, Conn(proxy.port) as w:
        c.cmd("SET", k, "1")
        assert c.cmd("WATCH", k) == b"OK"
        assert not isinstance(c.cmd("GET", other), RespError)     # routed meanwhile
        assert w.cmd("SET", k, "2") == b"OK"
        c.send(enc("MULTI") + enc("SET", k, "3") + enc("EXEC") + enc("GET", k))
        assert c.replies(4) == [b"OK", b"QUEUED", None, b"2"]
        # no write in between: it runs
        c.send(enc("WATCH", k) + enc("MULTI") + enc("SET", k, "4") + enc("EXEC"))
        assert c.replies(4) == [b"OK", b"OK", b"QUEUED", [b"OK"]]
        # a transaction on another node than the WATCH's: -CROSSSLOT, EXEC aborts
        c.send(enc("WATCH", k) + enc("MULTI") + enc("SET", other, "x") + enc("EXEC"))
        got = c.replies(4)
        assert got[:2] == [b"OK", b"OK"] and got[2] == CROSSSLOT, got
        assert got[3].startswith(b"EXECABORT"), got
        assert c.cmd("WATCH", k, other) == CROSSSLOT
        # UNWATCH ends it; then a transaction on the other node
        assert c.cmd("WATCH", k) == b"OK" and c.cmd("UNWATCH") == b"OK"
        c.send(enc("MULTI") + enc("SET", other, "y") + enc("EXEC"))
        assert c.replies(3) == [b"OK", b"QUEUED", [b"OK"]]
        assert cluster.cmd(owner_port(cluster, other), "GET", other) == b"y"
        assert cluster.cmd(owner_port(cluster, k), "GET", k) == b"4"


def test_redis_py_transactions_and_watch(cluster, proxy):
    """python3-redis's plain client: pipeline(transaction=True) on keys of
    one slot, and its WATCH recipe, which retries after WatchError."""
    import redis
    r = redis.Redis(port=proxy.port)
    for port, ks in keys_on_each_primary(cluster, "py:").items():
        k = ks[0]
        r.delete(k, k + ":n")
        assert r.pipeline(transaction=True).set(k, 5).incr(k + ":n").get(k).execute() == \
            [True, 1, b"5"]
        with r.pipeline() as pipe:
            pipe.watch(k)
            r.set(k, 6)                  # another connection writes it
            pipe.multi()
            pipe.set(k, 7)
            with pytest.raises(redis.WatchError):
                pipe.execute()
        with r.pipeline() as pipe:
            pipe.watch(k)
            v = int(pipe.get(k))
            pipe.multi()
            pipe.set(k, v + 1)
            assert pipe.execute() == [True]
        assert cluster.cmd(port, "GET", k) == b"7"


def test_transactions_in_resp3_and_from_redis_cli(cluster, proxy):
    """HELLO 3 before MULTI: the connection of the client's own speaks RESP3
    too (EXEC's array holds the node's map); redis-cli without -c, a
    transaction on its stdin, prints what it prints for the owning node.
    HELLO between WATCH and EXEC is refused (the connection holding them
    keeps its protocol), and allowed again after UNWATCH."""
    for port, ks in keys_on_each_primary(cluster, "r3tx:").items():
        k = ks[0]
        seq = [("HELLO", "3"), ("MULTI",), ("HSET", k + "h", "f", "v"), ("HGETALL", k + "h"),
               ("GET", k), ("EXEC",)]

        def run(to):
            cluster.cmd(port, "DEL", k, k + "h")
            with Conn(to) as c:
                return [c.cmd(*a) for a in seq]
        routed, direct = run(proxy.port), run(port)
        assert routed[1:] == direct[1:], (routed, direct)
        assert isinstance(routed[-1][1], harness.RespMap), routed[-1]
        lines = "MULTI\nSET %s 1\nINCR %s\nGET %s\nEXEC\n" % (k, k, k)

        def cli_stdin(to):
            cluster.cmd(port, "DEL", k)
            return subprocess.run(["redis-cli", "-p", str(to)], input=lines, text=True,
                                  capture_output=True, timeout=slow(20)).stdout
        outs = [cli_stdin(proxy.port), cli_stdin(port)]
        assert outs[0] == outs[1] and "QUEUED" in outs[0], outs
    k = ks[0]
    with Conn(proxy.port) as c:
        assert c.cmd("WATCH", k) == b"OK"
        got = c.cmd("HELLO", "3")
        assert isinstance(got, RespError) and got.startswith(
            b"ERR ttlguard cluster = route does not support HELLO inside MULTI or after WATCH"), got
        assert c.cmd("UNWATCH") == b"OK"
        assert dict(c.cmd("HELLO", "3"))[b"proto"] == 3


def test_a_rule_refusal_inside_multi_aborts_exec(cluster, tmp_path):
    """Under a reject rule the client's queued write is refused by ttlguard
    (its -TTLGUARD error at queue time), also when it was the command that
    would take the transaction to its node: EXEC is -EXECABORT and nothing
    ran, on any node."""
    harness.need_binary()
    p = RoutedProxy(tmp_path, cluster, sections=RULE + '[ttl "rj:"]\nttl = 60\naction = reject\n')
    p.start()
    try:
        for port, ks in keys_on_each_primary(cluster, "rj:").items():
            k = ks[0]
            cluster.cmd(port, "DEL", k, k + ":ok")
            with Conn(p.port) as c:
                c.send(enc("MULTI") + enc("PING") + enc("SET", k, "v") +
                       enc("SET", k + ":ok", "v", "EX", "60") + enc("EXEC") + enc("MULTI") +
                       enc("SET", k, "v") + enc("EXEC") + enc("EXISTS", k, k + ":ok"))
                got = c.replies(9)
            assert got[:2] == [b"OK", b"QUEUED"] and got[3] == b"QUEUED", got
            assert got[2].startswith(b"TTLGUARD") and got[6].startswith(b"TTLGUARD"), got
            assert got[4].startswith(b"EXECABORT") and got[7].startswith(b"EXECABORT"), got
            assert got[5] == b"OK" and got[8] == 0, got
    finally:
        assert p.stop() == 0, p.stderr()


def _blocked_clients(cluster, port):
    return int(cluster.info(port, "clients")["blocked_clients"])


def test_blpop_blocks_nobody_else(cluster, proxy):
    """BLPOP on a key of node A, pipelined with a GET: while it waits, other
    clients' GETs of keys on A's slots are answered (the shared connection
    to A is not held); an LPUSH from another client answers it, then the
    GET; the session routes to every node again after it."""
    per_node = keys_on_each_primary(cluster, "bl:", 5)
    port, ks = next(iter(per_node.items()))
    lst = ks[0] + ":list"
    cluster.cmd(port, "DEL", lst)
    for k in ks:
        cluster.cmd(port, "SET", k, "v-" + k)
    with Conn(proxy.port) as b, Conn(proxy.port) as other:
        b.send(enc("BLPOP", lst, "0") + enc("GET", ks[1]))
        wait_blocked(port, "blpop")
        assert _blocked_clients(cluster, port) == 1
        for _ in range(20):
            other.send(b"".join(enc("GET", k) for k in ks))
            assert other.replies(len(ks), timeout=2) == [("v-" + k).encode() for k in ks]
        b.assert_silent(0.1)
        assert other.cmd("LPUSH", lst, "x") == 1
        assert b.replies(2) == [[lst.encode(), b"x"], ("v-" + ks[1]).encode()]
        wait_for(lambda: _blocked_clients(cluster, port) == 0, 5, "no blocked client")
        for p, keys in per_node.items():
            assert b.cmd("SET", keys[0] + ":after", "1") == b"OK"
            assert cluster.cmd(p, "GET", keys[0] + ":after") == b"1"
        # a timeout: the node's nil
        assert b.cmd("BLPOP", lst, "0.05") is None


def test_blocking_commands_as_the_owning_node(cluster, proxy):
    """BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP and
    XREAD/XREADGROUP with BLOCK, each with something to take: the node's own
    reply; XREAD without BLOCK is routed as any read."""
    k = "bk:{0}"
    setup = [("DEL", k + ":l", k + ":d", k + ":z", k + ":s"),
             ("RPUSH", k + ":l", "a", "b", "c", "d", "e"), ("ZADD", k + ":z", 1, "m", 2, "n", 3, "o"),
             ("XADD", k + ":s", "1-1", "f", "v"), ("XGROUP", "CREATE", k + ":s", "g", "0")]
    seq = [("BRPOP", k + ":l", "1"), ("BLMOVE", k + ":l", k + ":d", "LEFT", "RIGHT", "1"),
           ("BRPOPLPUSH", k + ":l", k + ":d", "1"), ("BLMPOP", "1", "1", k + ":l", "LEFT"),
           ("BZPOPMIN", k + ":z", "1"), ("BZPOPMAX", k + ":z", "1"),
           ("BZMPOP", "1", "1", k + ":z", "MIN"),
           ("XREAD", "BLOCK", "100", "STREAMS", k + ":s", "0"),
           ("XREAD", "COUNT", "1", "STREAMS", k + ":s", "0"),
           ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "100", "STREAMS", k + ":s", ">"),
           ("LRANGE", k + ":d", "0", "-1")]

    def run(port):
        with Conn(port) as c:
            for args in setup:
                c.cmd(*args)
            return [c.cmd(*args) for args in seq]
    assert run(proxy.port) == run(owner_port(cluster, k))


def test_a_client_that_leaves_while_blocked_leaves_no_blocked_client(cluster, proxy):
    """redis-cli BLPOP killed while it waits, and a raw client that closes
    with a request pipelined behind its BLPOP: the node's blocked_clients
    goes back to 0 (the pin is closed), and nothing was popped."""
    k = "bq:{0}"
    port = owner_port(cluster, k)
    cluster.cmd(port, "DEL", k)
    p = subprocess.Popen(["redis-cli", "-p", str(proxy.port), "BLPOP", k, "0"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_blocked(port, "blpop")
    finally:
        p.kill()
        p.wait()
    wait_for(lambda: _blocked_clients(cluster, port) == 0, 5, "the killed client's block gone")
    c = Conn(proxy.port)
    c.send(enc("BLPOP", k, "0") + enc("PING"))
    wait_blocked(port, "blpop")
    c.close()
    wait_for(lambda: _blocked_clients(cluster, port) == 0, 5, "the closed client's block gone")
    assert cluster.cmd(port, "RPUSH", k, "x") == 1      # nobody took it
    assert cluster.cmd(port, "LPOP", k) == b"x"


def test_redis_benchmark_without_cluster(cluster, proxy):
    """redis-benchmark -t set,get -P 16 against the routed address: no error,
    and its keys spread over every primary."""
    for n in cluster.primaries():
        cluster.cmd(n["port"], "FLUSHALL")
    out = subprocess.run(["redis-benchmark", "-p", str(proxy.port), "-t", "set,get",
                          "-n", "20000", "-P", "16", "-r", "100000", "-c", "8", "-q"],
                         capture_output=True, text=True, timeout=slow(60))
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "SET:" in text and "GET:" in text and "requests per second" in text, text
    assert "rror" not in text and "MOVED" not in text, text
    sizes = [cluster.cmd(n["port"], "DBSIZE") for n in cluster.primaries()]
    assert all(s > 1000 for s in sizes), sizes


def redirects_followed(proxy):
    """ttlguard_route_redirects_total by kind, from /metrics."""
    url = "http://127.0.0.1:%d/metrics" % proxy.admin_port
    with urllib.request.urlopen(url, timeout=slow(5)) as r:
        text = r.read().decode()
    pat = r'^ttlguard_route_redirects_total\{kind="(\w+)"\} (\d+)$'
    return {m.group(1): int(m.group(2)) for m in re.finditer(pat, text, re.M)}


def _migrate_slot(cluster, slot, src, dst, keys):
    for k in keys:
        assert cluster.cmd(src["port"], "MIGRATE", "127.0.0.1", dst["port"], k, 0, 5000) in \
            (b"OK", b"NOKEY")


def _finish_slot(cluster, slot, dst):
    for n in cluster.primaries() + [dst]:
        cluster.cmd(n["port"], "CLUSTER", "SETSLOT", slot, "NODE", dst["id"])


def test_ask_tryagain_and_moved_of_a_slot_migrated_by_hand(cluster, proxy):
    """A slot migrated with CLUSTER SETSLOT and MIGRATE straight to the nodes.
    Through the proxy: a key not migrated yet is served by the source; a new
    key is written on the target (-ASK followed with ASKING: found there
    directly); MGET of one key on each side (-TRYAGAIN) succeeds once the
    migration goes on; after SETSLOT NODE, -MOVED is followed. No reply is a
    redirect; /metrics counts the -ASK and -TRYAGAIN followed."""
    before = redirects_followed(proxy)
    assert set(before) == {"moved", "ask", "tryagain"}, before
    src, dst = cluster.primaries()[0], cluster.primaries()[1]
    base = cluster.key_for_slot_owner(src, prefix="mig:")
    slot = key_slot(base)
    old, new = base + ":old", base + ":new"
    with Conn(proxy.port) as c:
        assert c.cmd("SET", old, "o") == b"OK"
        assert c.cmd("DEL", new) in (0, 1)
        assert cluster.cmd(dst["port"], "CLUSTER", "SETSLOT", slot, "IMPORTING", src["id"]) == b"OK"
        assert cluster.cmd(src["port"], "CLUSTER", "SETSLOT", slot, "MIGRATING", dst["id"]) == b"OK"
        try:
            got = [c.cmd("GET", old), c.cmd("SET", new, "n"), c.cmd("GET", new)]
            assert got == [b"o", b"OK", b"n"], got
            # Not on the source (which sends whoever asks for it to the target).
            assert cluster.cmd(src["port"], "EXISTS", new).startswith(b"ASK %d " % slot)
            with Conn(dst["port"]) as d:
                assert d.cmd("ASKING") == b"OK" and d.cmd("GET", new) == b"n"
            # Keys on both sides: -TRYAGAIN until the rest has moved.
            mover = threading.Timer(0.3, _migrate_slot, (cluster, slot, src, dst, [old]))
            mover.start()
            t0 = time.monotonic()
            got = c.cmd("MGET", old, new)
            mover.join()
            assert got == [b"o", b"n"], got
            assert time.monotonic() - t0 < slow(8)
            _finish_slot(cluster, slot, dst)
            c.send(enc("GET", old) + enc("SET", old, "o2") + enc("GET", new) + enc("PING"))
            got = c.replies(4)
            assert got == [b"o", b"OK", b"n", b"PONG"], got
            assert cluster.cmd(dst["port"], "GET", old) == b"o2"
            after = redirects_followed(proxy)
            assert after["ask"] > before["ask"] and after["tryagain"] > before["tryagain"], \
                (before, after)
            assert after["moved"] >= before["moved"], (before, after)
        finally:
            for n in (src, dst):
                cluster.cmd(n["port"], "CLUSTER", "SETSLOT", slot, "STABLE")
    cluster.wait_stable()


def _moved_errors(cluster, port):
    stat = cluster.info(port, "errorstats").get("errorstat_MOVED", "count=0")
    return int(stat.split(",")[0].split("=")[1])


def test_a_blocking_command_follows_a_moved_slot(cluster, proxy):
    """A slot handed to another primary straight on the nodes (the proxy's
    slot map still names the old one): BLPOP of a key in it meets the old
    owner's -MOVED, and its connection follows to the new owner, where it
    blocks until an LPUSH there; the client never sees the redirect."""
    src, dst = cluster.primaries()[0], cluster.primaries()[1]
    k = cluster.key_for_slot_owner(src, prefix="blm:") + ":list"
    slot = key_slot(k)
    assert cluster.cmd(src["port"], "DEL", k) in (0, 1)
    moved = _moved_errors(cluster, src["port"])
    _finish_slot(cluster, slot, dst)
    try:
        with Conn(proxy.port) as c:
            c.send(enc("BLPOP", k, "0") + enc("GET", k))
            wait_blocked(dst["port"], "blpop")
            assert _moved_errors(cluster, src["port"]) > moved
            assert cluster.cmd(dst["port"], "LPUSH", k, "x") == 1
            assert c.replies(2) == [[k.encode(), b"x"], None]
    finally:
        _finish_slot(cluster, slot, src)
    cluster.wait_stable()


def test_reshard_under_traffic_costs_no_errors(cluster, proxy):
    """`redis-cli --cluster reshard` of 150 slots while a client writes and
    reads through the proxy (pipelines of SET, GET and a split MGET): not one
    error, every value read back right and found on the node that owns its
    slot afterwards."""
    import redis
    a, b = cluster.primaries()[0], cluster.primaries()[2]
    keys = ["rs:%d" % i for i in range(600)]
    errors, rounds = [], [0]
    stop = threading.Event()

    def traffic():
        r = redis.Redis(port=proxy.port, socket_timeout=slow(10))
        while not stop.is_set():
            pipe = r.pipeline(transaction=False)
            for k in keys:
                pipe.set(k, "%s-%d" % (k, rounds[0]))
                pipe.get(k)
            pipe.mget(keys[::10])           # split by slot, each part redirected alone
            try:
                res = pipe.execute(raise_on_error=False)
            except Exception as e:      # noqa: BLE001 (a lost connection is a failure)
                errors.append(repr(e))
                return
            for i, k in enumerate(keys):
                want = ("%s-%d" % (k, rounds[0])).encode()
                if res[2 * i] is not True or res[2 * i + 1] != want:
                    errors.append((k, res[2 * i], res[2 * i + 1]))
            if res[-1] != [("%s-%d" % (k, rounds[0])).encode() for k in keys[::10]]:
                errors.append(("MGET", res[-1]))
            rounds[0] += 1

    t = threading.Thread(target=traffic)
    t.start()
    try:
        wait_for(lambda: rounds[0] >= 2, 10, "traffic before the reshard")
        moved = cluster.reshard(a["id"], b["id"], 150)
        after = rounds[0]
        wait_for(lambda: rounds[0] >= after + 2, 10, "traffic after the reshard")
    finally:
        stop.set()
        t.join(slow(30))
    assert not errors, errors[:5]
    assert any(key_slot(k) in set(moved) for k in keys)
    for k in keys:
        assert cluster.cmd(owner_port(cluster, k), "EXISTS", k) == 1, k


def test_scan_across_a_failover(cluster, proxy):
    """CLUSTER FAILOVER of the second primary (by lowest slot) while a scan
    through the proxy is in the middle of it: the promoted replica holds the
    same position, its scan starts over there (keys of that shard come
    twice), every key present throughout is returned, and the scan ends.
    Last in the module: the roles stay swapped."""
    with Conn(proxy.port) as c:
        assert c.cmd("FLUSHALL") == b"OK"
        keys = {("fs:%d" % i).encode() for i in range(600)}
        assert c.cmd("MSET", *[x for k in keys for x in (k, b"v")]) == b"OK"
    old = cluster.primaries()[1]
    new = cluster.replicas_of(old["id"])[0]
    wait_for(lambda: cluster.cmd(new["port"], "DBSIZE") == cluster.cmd(old["port"], "DBSIZE"),
             10, "the replica in sync")
    pos = min(old["slots"])[0]
    got, cursor, failed_over, seen = [], b"0", False, []
    with Conn(proxy.port) as c:
        # The proxy's order of primaries is its slot map's: after the reshard
        # before, parts of it may be a topology read (every 5 s) behind the
        # cluster's. A cursor at pos with no node cursor starts old's scan
        # once the proxy sees old's lowest slot where the cluster says.
        wait_for(lambda: int(c.cmd("SCAN", str(pos), "COUNT", "1")[0]) & 0x3fff == pos,
                 12, "the proxy's slot map as the cluster's", interval=0.2)
        for _ in range(10000):
            cursor, page = c.cmd("SCAN", cursor, "COUNT", "20")
            got += page
            seen.append((int(cursor) & 0x3fff, int(cursor) >> 20, len(page)))
            if cursor == b"0":
                break
            if not failed_over and int(cursor) & 0x3fff == pos and int(cursor) >> 20:
                assert cluster.cmd(new["port"], "CLUSTER", "FAILOVER") == b"OK"
                wait_for(lambda: "master" in cluster.node_by_id(new["id"], new["port"])["flags"],
                         15, "the replica promoted")
                cluster.wait_stable()
                # A key of that shard through the proxy: -MOVED from the old primary,
                # and a topology read soon after.
                k = cluster.key_for_slot_owner(new, prefix="fs:probe:")
                assert c.cmd("SET", k, "x") == b"OK" and c.cmd("DEL", k) == 1
                # Until the proxy scans that position on the promoted node (a
                # cursor's check bits name the node that gave it).
                wait_for(lambda: int(c.cmd("SCAN", str(pos), "COUNT", "1")[0]) >> 14 & 0x3f
                         == scan_check(new["port"]), 12, "the proxy to scan the new primary",
                         interval=0.2)
                failed_over = True
    assert failed_over and cursor == b"0", "%d %r" % (pos, seen)
    if scan_check(old["port"]) == scan_check(new["port"]):
        # The documented 1 in 64 (route_scan.h): the two addresses' check bits
        # agree, so the promoted replica took the old primary's node cursor
        # for its own. The scan still ends; what it returns is not promised.
        return
    assert set(got) == keys, sorted(keys - set(got))[:5]
    twice = [k for k in keys if got.count(k) > 1]
    assert twice and all(owner_port(cluster, k) == new["port"] for k in twice), twice[:5]


def scan_check(port):
    """route_scan.c's scan_check() of the node 127.0.0.1:port: FNV-1a of its
    address, folded to 6 bits."""
    h = 2166136261
    for b in b"127.0.0.1:%d" % port:
        h = ((h ^ b) * 16777619) & 0xffffffff
    return (h ^ h >> 16) & 0x3f
