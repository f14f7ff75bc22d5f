"""
python3-redis (Debian's, redis-py 4.3.4) against one target (ttlguard or Redis
itself): see common.js for the protocol with runner.py (the same JSON lines).
RESP2; redis-py 4.3.4's connect sequence sends nothing of its own: [CLIENT
SETNAME name] when client_name is given, [SELECT db] when db is not 0. Its
cluster client RedisCluster reads CLUSTER SLOTS and COMMAND through the seed.

Run with /usr/bin/python3 (where Debian's python3-redis is importable):
    python_redis_suite.py CONFIG_JSON
"""

import json
import logging
import signal
import sys
import threading
import time
import traceback

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

CFG = json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}")
HOST = CFG.get("host", "127.0.0.1")
PORT = CFG.get("port", 6379)

# RedisCluster logs every redirect it follows at ERROR level: how it works, not a failure.
logging.getLogger("redis.cluster").setLevel(logging.CRITICAL)

BINARY = bytes(range(256)) + b"\r\n$-1\r\n*2\r\n+OK\r\n\x00\r\n"
BINARY_KEY = b"k:\x00\xff\r\n$3"

EXPECT = {
    "keep100": {"proxy": [1, 100], "direct": [-1, -1]},
    "rule900": {"proxy": [880, 900], "direct": [-1, -1]},
    "none": {"proxy": [-1, -1], "direct": [-1, -1]},
}


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def watchdog(signum, frame):
    out({"fatal": "suite still running after %s ms (watchdog)" % CFG.get("deadline_ms", 40000)})
    sys.stdout.flush()
    import os
    os._exit(3)


signal.signal(signal.SIGALRM, watchdog)
signal.setitimer(signal.ITIMER_REAL, CFG.get("deadline_ms", 40000) / 1000.0)


def norm(v):
    """The same JSON forms as common.js norm(): bytes as hex, errors by message."""
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return {"hex": bytes(v).hex()}
    if isinstance(v, BaseException):
        return {"err": str(v)}
    if isinstance(v, dict):
        return {"map": [[norm(k), norm(x)] for k, x in v.items()]}
    if isinstance(v, set):
        return {"set": sorted(json.dumps(norm(x)) for x in v)}
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    return v


def settle(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except Exception as e:  # a reply error, kept as the value
        return e


def client_state(info):
    if isinstance(info, bytes):
        info = info.decode()
    o = {}
    for part in info.strip().split(" "):
        k, _, val = part.partition("=")
        if k:
            o[k] = val
    return {"resp": o.get("resp"), "db": o.get("db"), "name": o.get("name"),
            "lib-name": o.get("lib-name"), "lib-ver": o.get("lib-ver")}


def pipeline_commands():
    """The same 100 commands as common.js pipelineCommands()."""
    cmds = []
    i = 0
    while len(cmds) < 100:
        m = i % 6
        if m == 0:
            cmds.append(["SET", "p:%d" % i, "val-%d" % i])
        elif m == 1:
            cmds.append(["GET", "p:%d" % (i - 1)])
        elif m == 2:
            cmds.append(["INCR", "p:ctr"])
        elif m == 3:
            cmds.append(["RPUSH", "p:list", str(i)])
        elif m == 4:
            cmds.append(["HSET", "p:h", "f%d" % i, str(i)])
        else:
            cmds.append(["INCR", "p:0"] if i == 47 else ["LLEN", "p:list"])
        i += 1
    return cmds


def check_node_ports(ports):
    assert ports, "no nodes discovered"
    real = set(CFG.get("real_ports", []))
    if CFG.get("target") == "proxy":
        lo, hi = CFG["cluster_ports"]
        bad = [p for p in ports if not lo <= p <= hi]
        assert not bad, "node ports outside cluster_ports %d-%d: %s (all: %s)" % (lo, hi, bad, ports)
        leaked = [p for p in ports if p in real]
        assert not leaked, "real node ports discovered through ttlguard: %s" % leaked
    else:
        bad = [p for p in ports if p not in real]
        assert not bad, "direct: node ports that are not real nodes: %s" % bad


def run_checks(checks):
    for name, fn in checks:
        t0 = time.monotonic()
        try:
            r = fn() or {}
            out(dict(check=name, ok=True, ms=int((time.monotonic() - t0) * 1000), **r))
        except Exception:
            out({"check": name, "ok": False, "ms": int((time.monotonic() - t0) * 1000),
                 "error": traceback.format_exc()})


def mk(**kw):
    return redis.Redis(host=HOST, port=PORT, socket_timeout=8, socket_connect_timeout=3, **kw)


def standalone():
    r = mk()
    other = mk()

    def connect():
        st = client_state(r.execute_command("CLIENT", "INFO"))
        assert st["resp"] == "2", st
        return {"value": {"state": st, "ping": r.ping(), "echo": norm(r.echo(BINARY))},
                "info": "resp=%s lib-name=%s" % (st["resp"], st["lib-name"] or "(none)")}

    def client_setinfo():
        a = settle(r.execute_command, "CLIENT", "SETINFO", "LIB-NAME", "compat-check")
        b = settle(r.execute_command, "CLIENT", "SETINFO", "LIB-VER", "9.9.9")
        st = client_state(r.execute_command("CLIENT", "INFO"))
        return {"value": [norm(a), norm(b), st, r.ping()]}

    def set_get_binary():
        v = [r.set(BINARY_KEY, BINARY)]
        got = r.get(BINARY_KEY)
        assert got == BINARY, "binary value changed"
        v += [norm(got), r.strlen(BINARY_KEY)]
        v += [r.set("b:s", "plain"), norm(r.get("b:s")), r.get("b:missing")]
        v += [r.incr("b:ctr"), r.incr("b:ctr"), r.incrby("b:ctr", 40)]
        assert v[-1] == 42
        v.append(norm(settle(r.incr, "b:s")))
        v += [r.append("b:s", b"\x00\x01\x02"), norm(r.get("b:s"))]
        return {"value": v}

    def pipeline_100():
        p = r.pipeline(transaction=False)
        for cmd in pipeline_commands():
            p.execute_command(*cmd)
        res = p.execute(raise_on_error=False)
        assert len(res) == 100
        assert res[1] == b"val-0", res[1]
        assert any(isinstance(x, redis.ResponseError) for x in res), "no error in the pipeline"
        return {"value": norm(res)}

    def multi_exec():
        p = r.pipeline(transaction=True)
        p.set("m:a", "1").incr("m:a").lpush("m:a", "x").get("m:a")
        res = p.execute(raise_on_error=False)
        assert res[1] == 2, res
        v = [norm(res)]
        p = r.pipeline(transaction=True)
        p.execute_command("SET", "m:b")
        p.incr("m:c")
        v.append(norm(settle(p.execute)))
        v.append(r.get("m:c"))
        m = mk(single_connection_client=True)
        v += [norm(m.execute_command("MULTI")), norm(m.execute_command("SET", "m:d", "1")),
              norm(m.execute_command("DISCARD")), m.get("m:d")]
        m.close()
        return {"value": v}

    def watch_optimistic():
        r.set("w:k", "start")
        v = []
        with r.pipeline() as pipe:
            v.append(pipe.watch("w:k"))
            v.append(norm(pipe.get("w:k")))
            v.append(other.set("w:k", "changed-by-other"))
            pipe.multi()
            pipe.set("w:k", "mine")
            aborted = settle(pipe.execute)
            assert isinstance(aborted, redis.WatchError), "EXEC must abort: %r" % (aborted,)
            v.append(type(aborted).__name__)
        with r.pipeline() as pipe:
            v.append(pipe.watch("w:k"))
            v.append(norm(pipe.get("w:k")))
            pipe.multi()
            pipe.incr("w:c")
            pipe.set("w:k", "mine")
            v.append(norm(pipe.execute()))
        v.append(norm(r.get("w:k")))
        assert r.get("w:k") == b"mine"
        return {"value": v}

    def pubsub():
        p = r.pubsub()
        got = []

        def read_until(n, timeout=5.0):
            deadline = time.monotonic() + timeout
            while len(got) < n and time.monotonic() < deadline:
                m = p.get_message(timeout=0.1)
                if m is not None:
                    got.append([m["type"], norm(m["pattern"]), norm(m["channel"]), norm(m["data"])])
            assert len(got) >= n, "messages received: %s" % got
        p.subscribe("ps:ch", "ps:other")
        p.psubscribe("ps:pat*")
        read_until(3)
        p.ping()
        read_until(4)
        v = [other.publish("ps:ch", "hello"), other.publish("ps:pat1", BINARY),
             other.publish("ps:nobody", "x")]
        v.append(norm(other.pubsub_numsub("ps:ch", "ps:other", "ps:nobody")))
        v.append(other.pubsub_numpat())
        read_until(6)
        p.unsubscribe("ps:ch")
        read_until(7)
        v += [other.publish("ps:ch", "after"), other.publish("ps:other", "still")]
        read_until(8)
        p.punsubscribe()
        p.unsubscribe()
        read_until(10)
        v.append(got)
        p.close()
        return {"value": v}

    def blpop():
        b = mk()
        v = [b.set("bl:x", "1"), norm(b.get("bl:x"))]
        t = threading.Timer(0.3, lambda: v.append(other.lpush("bl:q", "v1")))
        t0 = time.monotonic()
        t.start()
        res = b.blpop("bl:q", 5)
        ms = int((time.monotonic() - t0) * 1000)
        t.join(5)
        assert 250 <= ms < 4500, "BLPOP returned after %d ms" % ms
        v.append(norm(res))
        t1 = time.monotonic()
        v.append(norm(b.blpop("bl:empty", 0.3)))
        ms2 = int((time.monotonic() - t1) * 1000)
        assert 250 <= ms2 < 4500, "BLPOP timeout 0.3 returned after %d ms" % ms2
        v += [norm(b.get("bl:x")), b.llen("bl:q")]
        b.close()
        return {"value": v, "info": "unblocked after %d ms" % ms}

    def ttl_rule():
        v = [r.set("t:k", "v", ex=100), norm(r.getset("t:k", "0")), norm(r.get("t:k"))]
        ttl = {"t:k after GETSET": r.ttl("t:k")}
        v.append(r.incr("t:n"))
        ttl["t:n after INCR"] = r.ttl("t:n")
        v.append(r.incr("u:n"))
        ttl["u:n (no rule)"] = r.ttl("u:n")
        v.append(norm(r.pipeline(transaction=False).set("t:p1", "a").incr("t:p2")
                      .hset("t:p3", "f", "v").execute()))
        v.append(norm(r.pipeline(transaction=True).set("t:m1", "a").incrby("t:m2", 5).execute()))
        for k in ["t:p1", "t:p2", "t:p3", "t:m1", "t:m2"]:
            ttl[k] = r.ttl(k)
        return {"value": v, "ttl": ttl, "expect_ttl": {
            "t:k after GETSET": EXPECT["keep100"], "t:n after INCR": EXPECT["rule900"],
            "u:n (no rule)": EXPECT["none"], "t:p1": EXPECT["rule900"], "t:p2": EXPECT["rule900"],
            "t:p3": EXPECT["rule900"], "t:m1": EXPECT["rule900"], "t:m2": EXPECT["rule900"]}}

    def client_name():
        v = [r.client_setname("compat-python-redis"), norm(r.client_getname())]
        v.append(client_state(r.execute_command("CLIENT", "INFO"))["name"])
        r.pipeline(transaction=True).ping().execute()
        v.append(norm(r.client_getname()))
        named = mk(client_name="compat-python-redis-named")
        v += [norm(named.client_getname()), norm(named.get("b:s")), norm(named.client_getname())]
        named.close()
        assert v[1] == "compat-python-redis", v[1]   # (CLIENT GETNAME is decoded by redis-py)
        assert v[4] == "compat-python-redis-named", v[4]
        return {"value": v}

    def select_db1():
        d1 = mk(db=1)
        v = [d1.set("sel:k", "in-db1"), norm(d1.get("sel:k")), r.get("sel:k")]
        assert d1.get("sel:k") == b"in-db1"
        assert v[2] is None, "db 0 sees a key of db 1"
        v += [d1.dbsize(), client_state(d1.execute_command("CLIENT", "INFO"))["db"]]
        v.append(norm(d1.pipeline(transaction=True).get("sel:k").execute()))
        v += [norm(d1.get("sel:k")), r.get("sel:k"), r.exists("sel:k")]
        d1.close()
        return {"value": v}

    def concurrent_clients():
        # 6 clients in threads at once, db 0 and db 1 alternating (ttlguard: shared
        # backend connections per db), each pipelining SET/GET/INCR of its own keys with
        # values of changing sizes, a MULTI now and then: every reply its own.
        cs = [mk(db=i % 2) for i in range(6)]
        bad = [None] * len(cs)

        def work(i):
            errs = []
            try:
                for j in range(40):
                    val = ("c%d-%d-" % (i, j) + "x" * ((i * 131 + j * 977) % 20000)).encode()
                    res = cs[i].pipeline(transaction=False).set("cc:%d" % i, val) \
                        .get("cc:%d" % i).incr("cc:n:%d" % i).execute()
                    if res != [True, val, j + 1]:
                        errs.append("round %d: %r" % (j, res)[:200])
                    if j % 10 == 5:
                        m = cs[i].pipeline(transaction=True).incr("cc:m:%d" % i).get("cc:%d" % i).execute()
                        if m[1] != val:
                            errs.append("multi %d: %r" % (j, m)[:200])
            except Exception as e:
                errs.append(repr(e))
            bad[i] = errs
        ts = [threading.Thread(target=work, args=(i,)) for i in range(len(cs))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        dbs = [cs[0].dbsize(), cs[1].dbsize()]
        for c in cs:
            c.close()
        assert bad == [[] for _ in cs], "replies not the client's own: %s" % bad
        return {"value": {"bad": bad, "dbs": dbs}}

    run_checks([
        ("connect", connect), ("client-setinfo", client_setinfo), ("set-get-binary", set_get_binary),
        ("pipeline-100", pipeline_100), ("multi-exec", multi_exec),
        ("watch-optimistic", watch_optimistic), ("pubsub", pubsub), ("blpop", blpop),
        ("ttl-rule", ttl_rule), ("client-name", client_name), ("select-db1", select_db1),
        ("concurrent-clients", concurrent_clients),
    ])
    r.close()
    other.close()


def mk_cluster():
    """A RedisCluster seeded with the target alone, over TLS when the config
    says so (tls_ca)."""
    tls = {"ssl": True, "ssl_ca_certs": CFG["tls_ca"]} if CFG.get("tls_ca") else {}
    return RedisCluster(host=HOST, port=PORT, socket_timeout=8, socket_connect_timeout=3, **tls)


def cluster():
    rc = mk_cluster()

    def owner(k):
        return rc.get_node_from_key(k).port

    def cluster_nodes():
        nodes = rc.get_nodes()
        ports = sorted(n.port for n in nodes)
        check_node_ports(ports)
        owners = sorted({owner("{%d}" % i) for i in range(200)})
        check_node_ports(owners)
        assert len(owners) == 3, "slot owners: %s" % owners
        return {"value": {"masters": len(rc.get_primaries()), "replicas": len(rc.get_replicas()),
                          "all": len(nodes)},
                "info": "nodes %s" % ",".join(map(str, ports))}

    def set_get_slots():
        keys = ["cs:%d" % i for i in range(300)]
        sets = [rc.set(k, "v%d" % i) for i, k in enumerate(keys)]
        gets = [norm(rc.get(k)) for k in keys]
        assert all(sets)
        assert gets == [{"hex": ("v%d" % i).encode().hex()} for i in range(300)]
        nodes = {owner(k) for k in keys}
        assert len(nodes) == 3, "keys on %d primaries" % len(nodes)
        # RedisCluster's pipeline: commands grouped per node
        p = rc.pipeline()
        for i in range(100):
            p.set("cp:%d" % i, i)
        for i in range(100):
            p.get("cp:%d" % i)
        pres = p.execute()
        assert pres[100:] == [str(i).encode() for i in range(100)]
        return {"value": {"sets": len(sets), "gets": gets, "nodes": len(nodes),
                          "slots": len({key_slot(k.encode()) for k in keys}),
                          "pipeline": norm(pres)}}

    def hashtag_multikey():
        v = [rc.mset({"{ht}:a": "1", "{ht}:b": "2", "{ht}:c": BINARY})]
        v.append(norm(rc.mget("{ht}:a", "{ht}:b", "{ht}:c", "{ht}:none")))
        v += [rc.incr("{ht}:n"), rc.incrby("{ht}:n", 10), rc.rename("{ht}:a", "{ht}:a2")]
        v += [norm(rc.get("{ht}:a2")), rc.delete("{ht}:a2", "{ht}:b")]
        v.append(norm(settle(rc.mget, "{ht}:a", "{other}:a")))
        return {"value": v}

    def ttl_rule():
        keys = ["t:{%d}:n" % i for i in range(30)]
        incrs = [rc.incr(k) for k in keys]
        ttls = [rc.ttl(k) for k in keys]
        v = [incrs, rc.set("t:{g}:k", "v", ex=100), norm(rc.getset("t:{g}:k", "0"))]
        assert len({owner(k) for k in keys}) == 3
        return {"value": v,
                "ttl": {"INCR t:{i}:n min": min(ttls), "INCR t:{i}:n max": max(ttls),
                        "t:{g}:k after GETSET": rc.ttl("t:{g}:k")},
                "expect_ttl": {"INCR t:{i}:n min": EXPECT["rule900"],
                               "INCR t:{i}:n max": EXPECT["rule900"],
                               "t:{g}:k after GETSET": EXPECT["keep100"]}}

    def cluster_moved():
        # a key asked of a primary that does not own it: -MOVED names the owner's port
        # as the client knows it (through ttlguard: one of its own ports)
        v = []
        for k in ["mv:a", "mv:b", "mv:c"]:
            slot = key_slot(k.encode())
            own = owner(k)
            for node in rc.get_primaries():
                if node.port == own:
                    continue
                e = settle(rc.get_redis_connection(node).get, k)
                assert isinstance(e, redis.exceptions.MovedError), "not a MOVED: %r" % (e,)
                assert e.slot_id == slot, (e.slot_id, slot)
                assert e.port == own, "MOVED to %s, owner is %d" % (e.node_addr, own)
                check_node_ports([e.port])
                v.append([k, e.slot_id, e.host])
        return {"value": v}

    def cluster_pubsub():
        # RedisCluster's pubsub: one connection to the node of the channel's slot
        # (through ttlguard: that node's port); PUBLISH through the cluster client
        p = rc.pubsub()
        p.subscribe("cps:plain")
        got = []
        deadline = time.monotonic() + 5
        while len(got) < 1 and time.monotonic() < deadline:
            m = p.get_message(timeout=0.1)
            if m is not None:
                got.append([m["type"], norm(m["channel"]), norm(m["data"])])
        check_node_ports([p.connection.port])
        rc.publish("cps:plain", "hi")
        while len(got) < 2 and time.monotonic() < deadline:
            m = p.get_message(timeout=0.1)
            if m is not None:
                got.append([m["type"], norm(m["channel"]), norm(m["data"])])
        assert len(got) == 2, "messages: %s" % got
        p.close()
        return {"value": got}

    run_checks([("cluster-nodes", cluster_nodes), ("cluster-set-get-slots", set_get_slots),
                ("cluster-hashtag-multikey", hashtag_multikey), ("cluster-moved", cluster_moved),
                ("cluster-pubsub", cluster_pubsub),
                ("cluster-ttl-rule", ttl_rule)])
    rc.close()


def failover():
    """As common.js failoverLoop(): SET and GET of the client's own keys until
    stdin ends (runner.py fails a primary over meanwhile), then their TTLs and
    one more SET and GET each."""
    rc = mk_cluster()
    keys = ["t:fo:%d" % i for i in range(30)]
    stop = threading.Event()

    def wait_eof():
        sys.stdin.buffer.read()
        stop.set()
    threading.Thread(target=wait_eof, daemon=True).start()

    def loop():
        errors, wrong, ops, i = {}, [], 0, 0
        while not stop.is_set():
            k = keys[i % len(keys)]
            v = "%s=%d" % (k, i)
            try:
                done = rc.set(k, v)
                got = rc.get(k)
                ops += 2
                if done is not True or got != v.encode():
                    wrong.append("SET %s %s: %r, GET: %r" % (k, v, done, got))
            except Exception as e:  # counted: compared with direct by runner.py
                m = str(e)[:120]
                errors[m] = errors.get(m, 0) + 1
                time.sleep(0.01)
            if i == len(keys) - 1:
                out({"running": True})
            i += 1
        ttls = [rc.ttl(k) for k in keys]
        final = [[rc.set(k, k + "=last"), norm(rc.get(k))] for k in keys]
        assert not wrong, "%d wrong replies in %d: %s" % (len(wrong), ops, wrong[:5])
        n = sum(errors.values())
        return {"value": {"keys": len(keys), "final": final}, "errors": n,
                "info": "%d requests, %d errors%s" % (ops, n, " %s" % errors if n else ""),
                "ttl": {"min after failover": min(ttls), "max after failover": max(ttls)},
                "expect_ttl": {"min after failover": EXPECT["rule900"],
                               "max after failover": EXPECT["rule900"]}}
    run_checks([("cluster-failover", loop)])
    rc.close()


def handshake():
    """Two connections with the library's connect sequence and nothing else, each
    closed after one PING (runner.py records what they send on the way): the
    defaults, then db 1 with a connection name."""
    def hs():
        a = mk()
        v = [a.ping()]
        a.close()
        time.sleep(0.1)
        b = mk(db=1, client_name="compat-handshake")
        v.append(b.ping())
        b.close()
        return {"value": v}
    run_checks([("handshake", hs)])


def main():
    try:
        if CFG.get("mode") == "handshake":
            handshake()
        elif CFG.get("mode") == "cluster":
            cluster()
        elif CFG.get("mode") == "failover":
            failover()
        else:
            standalone()
    except Exception:
        out({"fatal": traceback.format_exc()})
    out({"done": True, "library": "python3-redis", "version": redis.__version__})


if __name__ == "__main__":
    main()
