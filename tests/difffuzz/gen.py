"""
Random cases for the differential fuzzer, from a seed.

A case is a few batches (pipelines) of requests sent on one connection; each
request is a list of byte arguments, sent as a multibulk or (sometimes) as an
inline command. The generator follows the connection state with
model.ConnModel so that it only opens a transaction, turns replies off or
subscribes where the comparison stays well defined.

Left out on purpose, because their replies differ between two servers by
nature: SRANDMEMBER, SPOP, HRANDFIELD, ZRANDMEMBER, RANDOMKEY (random), TIME,
LASTSAVE, INFO, CLIENT ID/LIST/INFO, OBJECT FREQ/IDLETIME, DEBUG, MEMORY,
XPENDING's extended form, XINFO CONSUMERS and XINFO STREAM FULL (times and
ids), DUMP (the order of a hash table), XADD with "*" (the clock: explicit
ids are used), expiries of a few milliseconds (whether a key is still there
depends on timing: positive TTLs are at least 100 s; zero and negative ones
delete at once, which is deterministic), and SET/GETEX with an EXAT in the past
(the key lingers until active expiry, and DBSIZE counts it).

With rules (rules=True), keys under "t:" get a TTL through the proxy and not
directly, by design. So on those keys the generator does not observe TTLs
(TTL, PTTL, EXPIRETIME, EXPIRE ... NX|XX|GT|LT), does not send PERSIST or
GETEX ... PERSIST (refused by a rewrite rule, README "What a rule does"), and
does not RENAME/COPY one to a key outside the rule (its TTL would travel).
"""

import hashlib

from model import EXEC_STATE_CHANGERS, ConnModel

NAMES = ["a", "b", "c", "k\0", "k\r\n", "\xff\xfek", "k y"]
PREFIXES_PLAIN = ["", "x:"]
# t: rewrite rule, t:d: durable carve-out inside it, l: a log-only rule.
PREFIXES_RULES = ["", "t:", "t:", "l:", "t:d:"]
RULE_SECTIONS = """
[ttl "t:"]
ttl = 600
action = rewrite

[durable "t:d:"]
owner = difffuzz
reason = carve-out inside a ttl rule
rebuild = nothing to rebuild

[ttl "l:"]
ttl = 600
action = log
"""
CHANNELS = ["ch1", "ch2", "c\0h"]
PATTERNS = ["ch*", "c?2", "*"]
MEMBERS = ["m1", "m2", "m3", "\0m", "m\r\n", "1", "2", "-5"]
SCORES = ["1", "2.5", "-1", "0", "+inf", "-inf", "3e2", "nan", "abc"]
STREAM_IDS = ["1-1", "1-2", "2-0", "3-5", "5-0", "0-1", "0-0", "9-9"]
TTL_SECONDS = ["100", "1000", "86400", "0", "-1", "abc"]
TTL_MS = ["100000", "5000000", "0", "-5"]
FAR_FUTURE, PAST = "4102444800", "1000000000"   # 2100-01-01, 2001-09-09
SCRIPTS = [
    "return redis.call('SET', KEYS[1], ARGV[1])",
    "return redis.call('INCR', KEYS[1])",
    "return redis.call('RPUSH', KEYS[1], ARGV[1])",
    "return redis.call('HSET', KEYS[1], 'f', ARGV[1])",
    "return {1, 2, 'x', {3, 'y'}, redis.status_reply('ST')}",
    "return redis.error_reply('boom')",
    "return redis.call('NOSUCHCMD')",
    "return redis.pcall('INCR', KEYS[1])",
    "return 1 +",
]
TTL_OBSERVERS = {"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"}


def ruled(key):
    """Under the rewrite rule of RULE_SECTIONS (t: but not the t:d: carve-out)."""
    return key.startswith("t:") and not key.startswith("t:d:")


def to_bytes(args):
    return [a.encode("latin-1") if isinstance(a, str) else a for a in args]


class CaseGen:
    """Builds one case from a random.Random."""

    def __init__(self, rng, rules, payloads):
        self.r = rng
        self.rules = rules
        self.payloads = payloads
        prefixes = PREFIXES_RULES if rules else PREFIXES_PLAIN
        pool = sorted({p + n for p in prefixes for n in NAMES})
        self.keys = rng.sample(pool, rng.randint(3, 7))
        self.model = ConnModel()
        self.builders = [(name[2:], getattr(self, name)) for name in sorted(dir(self))
                         if name.startswith("c_")]

    # -- small pieces --------------------------------------------------------

    def pick(self, seq):
        return self.r.choice(seq)

    def key(self, free=False):
        """A key of the case; free=True: one whose TTL may be observed."""
        keys = [k for k in self.keys if not (free and self.rules and ruled(k))]
        return self.pick(keys) if keys else None

    def dest_for(self, src):
        """A destination that may receive src's TTL (RENAME, COPY)."""
        if self.rules and ruled(src):
            keys = [k for k in self.keys if ruled(k)]
            return self.pick(keys)
        return self.key()

    def val(self):
        x = self.r.random()
        if x < 0.3:
            return self.pick(["v", "1", "-7", "3.5", "0", "10", "9223372036854775807"])
        if x < 0.6:
            return self.pick(["", "x", "hello world", "\0", "a\r\nb", "\xff\xfe\0",
                              "*1\r\n$3\r\nGET\r\n", "-ERR not an error\r\n"])
        if x < 0.985:
            return "".join(chr(self.r.randrange(256)) for _ in range(self.r.randint(1, 40)))
        return self.pick("xyz\0\r\n") * self.r.randint(16000, 70000)

    def num(self):
        return self.pick(["0", "1", "2", "-1", "5", "-3", "100"])

    def ttl_args(self, ms_ok=True):
        """An expiry option for SET/GETEX, or nothing."""
        x = self.r.random()
        if x < 0.5:
            return []
        if x < 0.65:
            return ["EX", self.pick(TTL_SECONDS)]
        if x < 0.75 and ms_ok:
            return ["PX", self.pick(TTL_MS)]
        if x < 0.85:
            # Not PAST: Redis 7.0's SET keeps a key already expired until
            # active expiry finds it, and DBSIZE counts it meanwhile.
            return ["EXAT", FAR_FUTURE]
        return ["KEEPTTL"]

    def ms(self, seq):
        """Some members of seq, at least one."""
        return self.r.sample(seq, self.r.randint(1, min(3, len(seq))))

    def keys_n(self, lo=1, hi=3):
        return [self.key() for _ in range(self.r.randint(lo, hi))]

    # -- builders: each returns the arguments of one request, or None --------
    # Their names (c_<family>_...) make them weigh the same within the table;
    # BUILDER_WEIGHTS gives each family its share.

    def c_str_set(self):
        k = self.key()
        opts = []
        if self.r.random() < 0.3:
            opts.append(self.pick(["NX", "XX"]))
        if self.r.random() < 0.2:
            opts.append("GET")
        return ["SET", k, self.val()] + opts + self.ttl_args()

    def c_str_get(self):
        return [self.pick(["GET", "GETDEL", "STRLEN", "INCR", "DECR"]), self.key()]

    def c_str_misc(self):
        k = self.key()
        return self.pick([
            ["GETSET", k, self.val()], ["APPEND", k, self.val()],
            ["INCRBY", k, self.pick(["5", "-9", "notint"])], ["DECRBY", k, "2"],
            ["INCRBYFLOAT", k, self.pick(["1.5", "-0.25", "1e3"])],
            ["GETRANGE", k, "0", "-1"], ["SETRANGE", k, self.pick(["0", "3", "20"]), self.val()],
            ["SETNX", k, self.val()], ["SETEX", k, self.pick(["100", "0"]), self.val()],
            ["PSETEX", k, "200000", self.val()], ["LCS", k, self.key()],
            ["MSET", k, self.val(), self.key(), self.val()], ["MSETNX", k, self.val()],
            ["MGET"] + self.keys_n(1, 4)])

    def c_str_getex(self):
        k = self.key()
        opts = self.ttl_args()
        if opts == ["KEEPTTL"]:
            opts = [] if self.rules and ruled(k) else ["PERSIST"]
        return ["GETEX", k] + opts

    def c_list_push(self):
        return [self.pick(["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]), self.key()] + \
            [self.val() for _ in range(self.r.randint(1, 3))]

    def c_list_read(self):
        k = self.key()
        return self.pick([["LRANGE", k, "0", "-1"], ["LINDEX", k, self.num()], ["LLEN", k],
                          ["LPOS", k, self.val()], ["LPOP", k], ["RPOP", k, self.num()]])

    def c_list_edit(self):
        k = self.key()
        return self.pick([
            ["LSET", k, self.num(), self.val()], ["LINSERT", k, "BEFORE", "v", self.val()],
            ["LREM", k, self.num(), self.val()], ["LTRIM", k, "0", self.num()],
            ["LMOVE", k, self.key(), self.pick(["LEFT", "RIGHT"]), self.pick(["LEFT", "RIGHT"])],
            ["RPOPLPUSH", k, self.key()],
            ["LMPOP", "2", k, self.key(), self.pick(["LEFT", "RIGHT"]), "COUNT", "2"]])

    def c_list_block(self):
        k = self.key()
        return self.pick([
            ["BLPOP", k, self.key(), "0.01"], ["BRPOP", k, "0.01"],
            ["BLMOVE", k, self.key(), "LEFT", "RIGHT", "0.01"],
            ["BRPOPLPUSH", k, self.key(), "0.01"], ["BLMPOP", "0.01", "1", k, "LEFT"],
            ["BZPOPMIN", k, "0.01"], ["BZMPOP", "0.01", "1", k, "MAX"],
            ["XREAD", "BLOCK", "10", "STREAMS", k, "$"]])

    def c_hash_write(self):
        k = self.key()
        fv = []
        for m in self.ms(MEMBERS):
            fv += [m, self.val()]
        return self.pick([["HSET", k] + fv, ["HSETNX", k, self.pick(MEMBERS), self.val()],
                          ["HDEL", k] + self.ms(MEMBERS),
                          ["HINCRBY", k, self.pick(MEMBERS), self.num()],
                          ["HINCRBYFLOAT", k, self.pick(MEMBERS), "0.5"]])

    def c_hash_read(self):
        k = self.key()
        return self.pick([["HGET", k, self.pick(MEMBERS)], ["HMGET", k] + self.ms(MEMBERS),
                          ["HLEN", k], ["HEXISTS", k, "m1"], ["HKEYS", k], ["HVALS", k],
                          ["HGETALL", k], ["HSTRLEN", k, "m2"],
                          ["HSCAN", k, "0", "COUNT", "1000"]])

    def c_set_write(self):
        k = self.key()
        return self.pick([["SADD", k] + self.ms(MEMBERS), ["SREM", k] + self.ms(MEMBERS),
                          ["SMOVE", k, self.key(), self.pick(MEMBERS)],
                          [self.pick(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]),
                           self.key()] + self.keys_n()])

    def c_set_read(self):
        k = self.key()
        return self.pick([["SMEMBERS", k], ["SISMEMBER", k, self.pick(MEMBERS)],
                          ["SMISMEMBER", k] + self.ms(MEMBERS), ["SCARD", k],
                          [self.pick(["SINTER", "SUNION", "SDIFF"])] + self.keys_n(),
                          ["SINTERCARD", "2", k, self.key()],
                          ["SSCAN", k, "0", "COUNT", "1000"]])

    def c_zset_write(self):
        k = self.key()
        opts = self.r.sample(["NX", "XX", "GT", "CH", "INCR"], self.r.randint(0, 2))
        pairs = []
        for m in self.ms(MEMBERS):
            pairs += [self.pick(SCORES), m]
        return self.pick([
            ["ZADD", k] + opts + pairs, ["ZINCRBY", k, self.pick(SCORES), self.pick(MEMBERS)],
            ["ZREM", k] + self.ms(MEMBERS), ["ZPOPMIN", k], ["ZPOPMAX", k, "2"],
            ["ZREMRANGEBYSCORE", k, "-inf", "1"], ["ZREMRANGEBYRANK", k, "0", "0"],
            ["ZRANGESTORE", self.key(), k, "0", "-1"],
            [self.pick(["ZUNIONSTORE", "ZINTERSTORE"]), self.key(), "2", k, self.key(),
             "AGGREGATE", self.pick(["SUM", "MIN", "MAX"])],
            ["ZDIFFSTORE", self.key(), "2", k, self.key()], ["ZMPOP", "1", k, "MIN"]])

    def c_zset_read(self):
        k = self.key()
        return self.pick([
            ["ZRANGE", k, "0", "-1", "WITHSCORES"],
            ["ZRANGE", k, "(1", "+inf", "BYSCORE", "LIMIT", "0", "2"],
            ["ZRANGE", k, "-", "+", "BYLEX", "REV"], ["ZRANK", k, self.pick(MEMBERS)],
            ["ZREVRANK", k, "m1"], ["ZSCORE", k, self.pick(MEMBERS)],
            ["ZMSCORE", k] + self.ms(MEMBERS), ["ZCARD", k], ["ZCOUNT", k, "-inf", "+inf"],
            ["ZLEXCOUNT", k, "-", "+"], ["ZUNION", "2", k, self.key(), "WITHSCORES"],
            ["ZINTER", "2", k, self.key()], ["ZDIFF", "2", k, self.key()],
            ["ZSCAN", k, "0", "COUNT", "1000"]])

    def c_stream(self):
        k = self.key()
        sid = self.pick(STREAM_IDS)
        return self.pick([
            ["XADD", k] + self.pick([[], ["NOMKSTREAM"], ["MAXLEN", "3"]]) +
            [sid, "f", self.val()],
            ["XADD", k, sid, "f", self.val(), "g", "w"], ["XLEN", k], ["XRANGE", k, "-", "+"],
            ["XREVRANGE", k, "+", "-", "COUNT", "2"], ["XDEL", k, sid], ["XTRIM", k, "MAXLEN", "2"],
            ["XREAD", "COUNT", "2", "STREAMS", k, "0-0"],
            ["XGROUP", "CREATE", k, "g", "0"] + self.pick([[], ["MKSTREAM"]]),
            ["XGROUP", "DESTROY", k, "g"],
            ["XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", k, ">"],
            ["XACK", k, "g", sid], ["XPENDING", k, "g"], ["XCLAIM", k, "g", "c2", "0", sid, "JUSTID"],
            ["XAUTOCLAIM", k, "g", "c2", "0", "0-0", "JUSTID"], ["XINFO", "STREAM", k],
            ["XSETID", k, self.pick(STREAM_IDS)]])

    def c_bitmap(self):
        k = self.key()
        return self.pick([
            ["SETBIT", k, self.pick(["0", "7", "100", "-1"]), self.pick(["0", "1"])],
            ["GETBIT", k, "7"], ["BITCOUNT", k], ["BITCOUNT", k, "0", "-1", "BIT"],
            ["BITPOS", k, "1"], ["BITOP", self.pick(["AND", "OR", "XOR"]), self.key(), k, self.key()],
            ["BITOP", "NOT", self.key(), k],
            ["BITFIELD", k, "SET", "u8", "0", "200", "GET", "u4", "4", "OVERFLOW",
             self.pick(["SAT", "FAIL", "WRAP"]), "INCRBY", "i5", "3", "7"],
            ["BITFIELD_RO", k, "GET", "u8", "0"]])

    def c_hll(self):
        k = self.key()
        return self.pick([["PFADD", k] + self.ms(MEMBERS), ["PFCOUNT", k] + self.keys_n(0, 1),
                          ["PFMERGE", self.key(), k, self.key()]])

    def c_key_basic(self):
        return self.pick([["DEL"] + self.keys_n(), ["UNLINK", self.key()],
                          ["EXISTS"] + self.keys_n(), ["TYPE", self.key()],
                          ["TOUCH", self.key()], ["OBJECT", "ENCODING", self.key()], ["DBSIZE"],
                          ["SCAN", "0", "COUNT", "1000"] + self.pick(
                              [[], ["MATCH", "*a*"], ["TYPE", "string"]]),
                          ["KEYS", self.pick(["*", "t:*", "?"])]])

    def c_key_expire(self):
        k = self.key()
        opts = []
        if self.r.random() < 0.3 and not (self.rules and ruled(k)):
            opts = [self.pick(["NX", "XX", "GT", "LT"])]
        return self.pick([["EXPIRE", k, self.pick(TTL_SECONDS)] + opts,
                          ["PEXPIRE", k, self.pick(TTL_MS)] + opts,
                          ["EXPIREAT", k, self.pick([FAR_FUTURE, PAST])] + opts,
                          ["PEXPIREAT", k, self.pick([FAR_FUTURE + "000", PAST + "000"])]])

    def c_key_ttl(self):
        k = self.key(free=True)
        if k is None:
            return None
        cmd = [self.pick(sorted(TTL_OBSERVERS)), k]
        return self.pick([cmd, cmd, ["PERSIST", k]])

    def c_key_move(self):
        k = self.key()
        return self.pick([
            ["RENAME", k, self.dest_for(k)], ["RENAMENX", k, self.dest_for(k)],
            ["COPY", k, self.dest_for(k)] + self.pick([[], ["REPLACE"], ["DB", "1"]]),
            ["MOVE", k, "1"], ["RESTORE", k, "0", self.pick(self.payloads)] +
            self.pick([[], ["REPLACE"]]),
            ["SORT", k] + self.pick([["ALPHA"], ["DESC", "LIMIT", "0", "2"]]) +
            self.pick([[], ["STORE", self.key()]]),
            ["SORT_RO", k, "ALPHA"]])

    def c_db(self):
        if self.model.multi:
            return None
        return self.pick([["SELECT", self.pick(["0", "1", "0", "99"])], ["SWAPDB", "0", "1"],
                          ["FLUSHDB"] if self.r.random() < 0.2 else ["DBSIZE"]])

    def c_script(self):
        i = self.r.randrange(len(SCRIPTS))
        sha = hashlib.sha1(SCRIPTS[i].encode()).hexdigest()
        k = self.key()
        return self.pick([["EVAL", SCRIPTS[i], "1", k, self.val()],
                          ["EVAL_RO", "return redis.call('GET', KEYS[1])", "1", k],
                          ["SCRIPT", "LOAD", SCRIPTS[i]], ["EVALSHA", sha, "1", k, self.val()]])

    def c_conn(self):
        if self.model.multi:
            return ["PING"]
        return self.pick([["PING"], ["PING", self.val()], ["ECHO", self.val()],
                          ["HELLO", self.pick(["2", "3", "3", "4"])],
                          ["CLIENT", "SETNAME", self.pick(["n1", "n2"])], ["CLIENT", "GETNAME"],
                          ["RESET"] if self.r.random() < 0.2 else ["PING"]])

    def c_reply(self):
        if self.model.multi or (self.model.subscribed() and self.model.proto == 3):
            return None
        return ["CLIENT", "REPLY", self.pick(["ON", "OFF", "SKIP", "SKIP"])]

    def c_pubsub(self):
        if self.model.multi or self.model.reply != "on":
            return None
        return self.pick([
            ["SUBSCRIBE"] + self.ms(CHANNELS), ["UNSUBSCRIBE"] + self.pick([[], [CHANNELS[0]]]),
            ["PSUBSCRIBE", self.pick(PATTERNS)], ["PUNSUBSCRIBE"] + self.pick([[], ["ch*"]]),
            ["PUBLISH", self.pick(CHANNELS), self.val()], ["PUBSUB", "NUMSUB", "ch1", "ch2"],
            ["PUBSUB", "NUMPAT"]])

    def c_tx(self):
        if self.model.multi:
            return self.pick([["EXEC"], ["EXEC"], ["DISCARD"], ["WATCH", self.key()], ["MULTI"]])
        return self.pick([["MULTI"], ["MULTI"], ["WATCH"] + self.keys_n(1, 2), ["UNWATCH"],
                          ["EXEC"]])

    def c_error(self):
        x = self.r.random()
        if x < 0.3:
            return ["NOSUCHCMD", self.key() or "k"]
        if x < 0.6:
            args = self.pick(self.builders)[1]() or ["GET"]
            return args[:1]
        return self.pick([["SET", self.key(), "v", "EX"], ["ZADD", self.key(), "x", "m"],
                          ["EXPIRE", self.key(), "10", "FOO"], ["LPOS", self.key(), "v", "RANK", "0"],
                          ["OBJECT", "FOOBAR", self.key()], ["GET", self.key(), "extra"],
                          ["SET", self.key(), "v", "NX", "XX"]])

    # -- requests and batches --------------------------------------------------

    def family_weights(self):
        """Weight of each builder family given the connection state: a RESP2
        subscriber is refused all else (which must change nothing); a
        transaction wants closing."""
        if self.model.subscribed() and self.model.proto == 2:
            return {"pubsub": 12, "conn": 2, "str": 1, "key": 1, "reply": 1, "tx": 1,
                    "error": 1}
        w = {"str": 6, "list": 5, "hash": 4, "set": 4, "zset": 4, "stream": 3, "bitmap": 2,
             "hll": 2, "key": 6, "db": 1, "script": 2, "conn": 2, "reply": 1.5, "pubsub": 2,
             "tx": 2, "error": 2}
        if self.model.multi:
            w["tx"] = 4
        if self.model.subscribed():
            w["pubsub"] = 6
        return w

    def request_args(self):
        weights = self.family_weights()
        families = sorted(weights)
        while True:
            fam = self.r.choices(families, [weights[f] for f in families])[0]
            builders = [b for name, b in self.builders if name.split("_")[0] == fam]
            args = self.pick(builders)()
            if args is None or any(a is None for a in args):
                continue
            args = to_bytes(args)
            if not (self.model.multi and args[0].upper() in EXEC_STATE_CHANGERS):
                return args

    def inline_form(self, args):
        """The request as an inline command, or None when it would be too long."""
        if sum(len(a) for a in args) > 500:
            return None
        words = [a.decode("latin-1") if a and all(c.isalnum() or c in ":._*+-" for c in
                                                   a.decode("latin-1")) and max(a) < 128
                 else quote_inline(a) for a in args]
        return (" ".join(words) + self.pick(["\r\n", "\r\n", "\n"])).encode("latin-1")

    def request(self):
        """One request: {"args": [...]} plus "inline" for the inline form."""
        if self.r.random() < 0.02:
            # Redis runs no command for these, but resets the client.
            return {"args": [], "inline": self.pick([b"\r\n", b"\n", b"*0\r\n", b"*-1\r\n"])}
        args = self.request_args()
        req = {"args": args}
        if self.r.random() < 0.12:
            line = self.inline_form(args)
            if line is not None:
                req["inline"] = line
        return req

    def batch(self):
        if self.r.random() < 0.03 and not self.model.multi and self.model.reply == "on" \
                and not self.model.subscribed():
            k = self.key()
            reqs = [{"args": to_bytes(self.pick([["INCR", k], ["GET", k], ["SET", k, "1"]]))}
                    for _ in range(self.r.randint(257, 400))]
            for req in reqs:
                self.model.step(req["args"])
        else:
            reqs = []
            for _ in range(self.r.randint(1, 25)):
                reqs.append(self.request())
                self.model.step(reqs[-1]["args"])
        for args in self.model.epilogue():
            self.model.step(args)
        return reqs


def quote_inline(arg):
    """A double-quoted inline argument (sdssplitargs: \\xHH, \\", \\\\)."""
    out = ['"']
    for b in arg:
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append("\\x%02x" % b)
    out.append('"')
    return "".join(out)


def setup_commands(rng, rules):
    """Initial data written straight to both servers before a case: a few keys
    of each type (keys under a rewrite rule with a TTL, as the rule wants)."""
    prefixes = PREFIXES_RULES if rules else PREFIXES_PLAIN
    out = []
    for _ in range(rng.randint(0, 6)):
        k = rng.choice(prefixes) + rng.choice(NAMES)
        out.append(rng.choice([["SET", k, "7"], ["RPUSH", k, "a", "b", "c"],
                               ["HSET", k, "m1", "1", "m2", "x"], ["SADD", k, "m1", "m2", "3"],
                               ["ZADD", k, "1", "m1", "2", "m2"], ["XADD", k, "1-1", "f", "v"],
                               ["PFADD", k, "a", "b"]]))
        if rules and ruled(k) or rng.random() < 0.2:
            out.append(["EXPIRE", k, "1000"])
    return [to_bytes(c) for c in out]


def generate(rng, rules, payloads):
    """A case: {"protocol", "setup", "batches", "split_seed"}."""
    g = CaseGen(rng, rules, payloads)
    proto = 3 if rng.random() < 0.4 else 2
    batches = []
    if proto == 3:
        g.model.step([b"HELLO", b"3"])
    for i in range(rng.randint(1, 6)):
        b = g.batch()
        if i == 0 and proto == 3:
            b.insert(0, {"args": [b"HELLO", b"3"]})
        batches.append(b)
    return {"protocol": proto, "setup": setup_commands(rng, rules), "batches": batches,
            "split_seed": rng.randrange(1 << 30)}

