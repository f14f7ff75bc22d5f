"""
Case data for the TTL-rule integration tests (test_rules_*.py), and the few
helpers those modules share.

CASES maps every command that `ttlguard commands` prints with a non-none TTL
effect to at least one valid invocation (test_rules_table.py fails when one
is missing, so the table and these cases cannot drift apart). Options that
change a key's effect (SET NX / XX / KEEPTTL / GET / EX, COPY ... REPLACE,
GETEX PERSIST, ZADD XX, ...) get a case each.

A case is written with placeholders that the tests replace by keys under the
prefix of the rule being tested ("rw:k", "rj:s", ...):
  {k} {k2}   keys the command writes (listed in `writes` with their effect)
  {s} {s2}   source keys, created by `setup`
  {dump}     the DUMP payload of {s} after setup (RESTORE)
  {exat} {pxat}  an absolute expiry 300 s from now (seconds / milliseconds)

  setup   commands run straight on redis-server before the command, in both
          variants: (a) the written keys are missing, (b) they exist with a TTL
  exist   commands that create the written keys with a type the command
          accepts (variant b; each written key then gets PEXPIRE ORIG_MS);
          empty when there is no variant (b)
  writes  {placeholder: effect} for every key the command writes, effect one
          of create / overwrite / persist / sets-ttl / carry / none (see
          commands.h; carry: the key goes to another database or server,
          judged there by test_carry.py);
          keys not listed (sources) must come out as they would straight
          from Redis
  noop_a, noop_b  the command leaves the written key alone in that variant
          (SET XX on a missing key, SETNX on an existing one, ...): the
          experiment that checks the effect labels skips it there
  script  EVAL / EVALSHA / FCALL: the keys are declared, the writes happen
          out of the proxy's sight; rewrite mode only promises a TTL after it
  view    commands ("{key}" for the key) whose replies stand for a key's data
          where DUMP is not deterministic (a vector set's graph levels are
          random); absent: DUMP
  since   {"redis": (8, 0), "valkey": (9, 0)}: the servers (and first versions)
          that have the command; absent: every server. cases_for() picks a
          server's cases.

The effect labels are not copied from the proxy's table: test_rules_table.py
checks each one by experiment against redis-server (a create leaves a new key
without a TTL and keeps an existing TTL; an overwrite drops it).
"""

import hashlib
import json
import os
import sys
import re
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

ORIG_MS = 100_000      # TTL a written key has in variant (b)
RULE_TTL = 5000        # ttl of the rules under test, seconds
CMD_TTL = 300          # TTLs the commands themselves set, seconds
TOL_MS = 5000          # tolerance when comparing TTLs (ms)

SCRIPT_SET = "return redis.call('SET', KEYS[1], ARGV[1])"
SCRIPT_SET_SHA = hashlib.sha1(SCRIPT_SET.encode()).hexdigest()
FUNCTION_LIB = ("#!lua name=ttlgrules\n"
                "redis.register_function('ttlg_set', function(keys, args) "
                "return redis.call('SET', keys[1], args[1]) end)")

GEO_SRC = ["GEOADD {s} 13.361389 38.115556 Palermo 15.087269 37.502669 Catania"]
SET_SRCS = ["SADD {s} a b c", "SADD {s2} b c d"]
ZSET_SRCS = ["ZADD {s} 1 a 2 b 3 c", "ZADD {s2} 10 b 20 c 30 d"]


class Case:
    def __init__(self, cid, cmd, writes, setup=(), exist=(), noop_a=False, noop_b=False,
                 script=False, note="", since=None, view=None):
        self.id = cid
        self.cmd = cmd if isinstance(cmd, list) else cmd.split(" ")
        self.writes = dict(writes)
        self.setup = list(setup)
        self.exist = list(exist)
        self.noop_a = noop_a
        self.noop_b = noop_b
        self.script = script
        self.note = note
        self.since = since
        self.view = view

    def available(self, server):
        """server: (name, version tuple), e.g. ("valkey", (9, 1, 2))."""
        if self.since is None:
            return True
        name, version = server
        return name in self.since and version >= self.since[name]

    @property
    def table_name(self):
        """The row of `ttlguard commands` the case exercises."""
        name = self.cmd[0].lower()
        if name in ("xgroup", "function"):      # containers: one row per subcommand
            return "%s|%s" % (name, self.cmd[1].lower())
        return name

    def placeholders(self):
        names = set(self.writes)
        for c in [self.cmd] + self.setup + self.exist:
            text = " ".join(c) if isinstance(c, list) else c
            names.update(re.findall(r"\{(k2?|s2?)\}", text))
        return sorted(names)

    def rejecting(self):
        """(placeholder, effect) of the key a reject rule refuses the command
        for: the first written key, in argv order, that may create or drop a
        TTL; None when nothing is refused."""
        if self.script:
            return None
        for arg in self.cmd:
            m = re.fullmatch(r"\{(k2?)\}", arg)
            if m and self.writes.get(m.group(1)) in ("create", "overwrite", "persist"):
                return m.group(1), self.writes[m.group(1)]
        return None

    def strongest(self):
        effects = set(self.writes.values())
        for e in ("persist", "overwrite", "create", "sets-ttl"):
            if e in effects:
                return e
        return "none"

    def __repr__(self):
        return "Case(%s)" % self.id


def C(*a, **kw):
    return Case(*a, **kw)


R80_V90 = {"redis": (8, 0), "valkey": (9, 0)}
R84_V91 = {"redis": (8, 4), "valkey": (9, 1)}     # MSETEX
R84_V81 = {"redis": (8, 4), "valkey": (8, 1)}     # SET ... IFEQ


ALL_CASES = [
    # --- strings ---------------------------------------------------------
    C("append", "APPEND {k} abc", {"k": "create"}, exist=["SET {k} xyz"]),
    C("bitfield-set", "BITFIELD {k} SET u8 0 200 GET u8 0", {"k": "create"},
      exist=["SET {k} a"]),
    C("bitfield-overflow-fail", "BITFIELD {k} OVERFLOW FAIL INCRBY u2 0 5", {"k": "create"},
      exist=["SET {k} a"], note="replies [nil]; creates the key even though the op fails"),
    C("bitfield-i64", "BITFIELD {k} SET i64 0 9223372036854775807 GET i64 0",
      {"k": "create"}, exist=["SET {k} a"], note="integers beyond 2^53"),
    C("bitfield-get", "BITFIELD {k} GET u8 0", {"k": "none"}, exist=["SET {k} a"]),
    C("bitop", "BITOP OR {k} {s} {s2}", {"k": "overwrite"},
      setup=["SET {s} abc", "SET {s2} xyz"], exist=["SET {k} zz"]),
    C("decr", "DECR {k}", {"k": "create"}, exist=["SET {k} 10"]),
    C("decrby", "DECRBY {k} 5", {"k": "create"}, exist=["SET {k} 10"]),
    C("incr", "INCR {k}", {"k": "create"}, exist=["SET {k} 10"]),
    C("incrby", "INCRBY {k} 5", {"k": "create"}, exist=["SET {k} 10"]),
    C("incrby-2^53+1", "INCRBY {k} 9007199254740993", {"k": "create"}, exist=["SET {k} 0"],
      note="an integer reply a Lua number (double) cannot hold"),
    C("decrby-min", "DECRBY {k} 9223372036854775807", {"k": "create"}, exist=["SET {k} -1"]),
    C("incrbyfloat", "INCRBYFLOAT {k} 1.5", {"k": "create"}, exist=["SET {k} 10"]),
    C("getset", "GETSET {k} 0", {"k": "overwrite"}, exist=["SET {k} 5"]),
    C("mset", "MSET {k} 1 {k2} 2", {"k": "overwrite", "k2": "overwrite"},
      exist=["SET {k} a", "SET {k2} b"]),
    C("msetnx", "MSETNX {k} 1 {k2} 2", {"k": "create", "k2": "create"},
      exist=["SET {k} a", "SET {k2} b"], noop_b=True),
    C("psetex", "PSETEX {k} 300000 v", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("setex", "SETEX {k} 300 v", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("setbit", "SETBIT {k} 7 1", {"k": "create"}, exist=["SET {k} a"]),
    C("setnx", "SETNX {k} v", {"k": "create"}, exist=["SET {k} a"], noop_b=True),
    C("setrange", "SETRANGE {k} 2 abc", {"k": "create"}, exist=["SET {k} hello"]),
    C("set", "SET {k} v", {"k": "overwrite"}, exist=["SET {k} a"]),
    C("set-nx", "SET {k} v NX", {"k": "create"}, exist=["SET {k} a"], noop_b=True),
    C("set-nx-get", "SET {k} v NX GET", {"k": "create"}, exist=["SET {k} a"], noop_b=True),
    C("set-xx", "SET {k} v XX", {"k": "overwrite"}, exist=["SET {k} a"], noop_a=True),
    C("set-keepttl", "SET {k} v KEEPTTL", {"k": "create"}, exist=["SET {k} a"]),
    C("set-xx-keepttl", "SET {k} v XX KEEPTTL", {"k": "none"}, exist=["SET {k} a"]),
    C("set-get", "SET {k} v GET", {"k": "overwrite"}, exist=["SET {k} a"]),
    C("set-get-wrongtype", "SET {k} v GET", {"k": "overwrite"}, exist=["RPUSH {k} a"],
      noop_b=True, note="variant (b): WRONGTYPE, nothing written"),
    C("set-ex", "SET {k} v EX 300", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("set-px", "SET {k} v PX 300000", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("set-exat", "SET {k} v EXAT {exat}", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("set-pxat-get", "SET {k} v PXAT {pxat} GET", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("getex", "GETEX {k}", {"k": "none"}, exist=["SET {k} a"]),
    C("getex-persist", "GETEX {k} PERSIST", {"k": "persist"}, exist=["SET {k} a"]),
    C("getex-ex", "GETEX {k} EX 300", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("persist", "PERSIST {k}", {"k": "persist"}, exist=["SET {k} a"]),
    C("expire", "EXPIRE {k} 300", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("expireat", "EXPIREAT {k} {exat}", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("pexpire", "PEXPIRE {k} 300000", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("pexpireat", "PEXPIREAT {k} {pxat}", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    # --- keyspace --------------------------------------------------------
    C("copy", "COPY {s} {k}", {"k": "create"}, setup=["SET {s} v"], exist=["SET {k} a"],
      noop_b=True),
    C("copy-replace", "COPY {s} {k} REPLACE", {"k": "overwrite"}, setup=["SET {s} v"],
      exist=["SET {k} a"]),
    C("copy-db", "COPY {s} {k} DB 1", {"k": "carry"}, setup=["SET {s} v PX 3000000"],
      note="the copy in db 1 takes the source's TTL; a source without one: test_carry.py"),
    C("move", "MOVE {k} 1", {"k": "carry"}, exist=["SET {k} a"],
      note="the key leaves db 0 with its TTL; a key without one: test_carry.py"),
    C("migrate", "MIGRATE 127.0.0.1 1 {k} 0 100", {"k": "carry"}, exist=["SET {k} a"],
      note="nothing listens on port 1: NOKEY or IOERR, nothing changes; test_carry.py "
           "migrates to a second server"),
    C("rename", "RENAME {s} {k}", {"k": "overwrite"}, setup=["SET {s} v"],
      exist=["SET {k} a"]),
    C("renamenx", "RENAMENX {s} {k}", {"k": "create"}, setup=["SET {s} v"],
      exist=["SET {k} a"], noop_b=True),
    C("restore", "RESTORE {k} 0 {dump}", {"k": "create"}, setup=["RPUSH {s} a b"],
      exist=["SET {k} a"], noop_b=True, note="variant (b): BUSYKEY"),
    C("restore-replace", "RESTORE {k} 0 {dump} REPLACE", {"k": "overwrite"},
      setup=["RPUSH {s} a b"], exist=["SET {k} a"]),
    C("restore-ttl", "RESTORE {k} 300000 {dump} REPLACE", {"k": "sets-ttl"},
      setup=["RPUSH {s} a b"], exist=["SET {k} a"]),
    C("restore-absttl", "RESTORE {k} {pxat} {dump} REPLACE ABSTTL", {"k": "sets-ttl"},
      setup=["RPUSH {s} a b"], exist=["SET {k} a"]),
    C("restore-asking", "RESTORE-ASKING {k} 0 {dump} REPLACE", {"k": "overwrite"},
      setup=["RPUSH {s} a b"], exist=["SET {k} a"]),
    C("sort-store", "SORT {s} STORE {k}", {"k": "overwrite"}, setup=["RPUSH {s} 3 1 2"],
      exist=["RPUSH {k} x"]),
    C("sort", "SORT {s} DESC", {}, setup=["RPUSH {s} 3 1 2"]),
    # --- hashes ----------------------------------------------------------
    C("hincrby", "HINCRBY {k} f 2", {"k": "create"}, exist=["HSET {k} f 1"]),
    C("hincrby-2^53+1", "HINCRBY {k} f 9007199254740993", {"k": "create"},
      exist=["HSET {k} f 0"]),
    C("hincrbyfloat", "HINCRBYFLOAT {k} f 1.5", {"k": "create"}, exist=["HSET {k} f 1"]),
    C("hmset", "HMSET {k} f v g w", {"k": "create"}, exist=["HSET {k} f 1"]),
    C("hset", "HSET {k} f v g w", {"k": "create"}, exist=["HSET {k} f 1"]),
    C("hsetnx", "HSETNX {k} f v", {"k": "create"}, exist=["HSET {k} f 1"]),
    # --- lists -----------------------------------------------------------
    C("lpush", "LPUSH {k} a b", {"k": "create"}, exist=["RPUSH {k} x"]),
    C("rpush", "RPUSH {k} a b", {"k": "create"}, exist=["RPUSH {k} x"]),
    C("lmove", "LMOVE {s} {k} LEFT RIGHT", {"k": "create"}, setup=["RPUSH {s} a b"],
      exist=["RPUSH {k} x"]),
    C("rpoplpush", "RPOPLPUSH {s} {k}", {"k": "create"}, setup=["RPUSH {s} a b"],
      exist=["RPUSH {k} x"]),
    C("blmove", "BLMOVE {s} {k} LEFT RIGHT 0", {"k": "create"}, setup=["RPUSH {s} a b"],
      exist=["RPUSH {k} x"], note="source not empty: does not block"),
    C("brpoplpush", "BRPOPLPUSH {s} {k} 0", {"k": "create"}, setup=["RPUSH {s} a b"],
      exist=["RPUSH {k} x"]),
    C("lmove-last", "LMOVE {s} {k} LEFT LEFT", {"k": "create"}, setup=["RPUSH {s} a"],
      exist=["RPUSH {k} x"], note="the source's last element: the source is deleted"),
    # --- sets ------------------------------------------------------------
    C("sadd", "SADD {k} a b", {"k": "create"}, exist=["SADD {k} x"]),
    C("smove", "SMOVE {s} {k} a", {"k": "create"}, setup=SET_SRCS, exist=["SADD {k} x"]),
    C("sdiffstore", "SDIFFSTORE {k} {s} {s2}", {"k": "overwrite"}, setup=SET_SRCS,
      exist=["SADD {k} x"]),
    C("sinterstore", "SINTERSTORE {k} {s} {s2}", {"k": "overwrite"}, setup=SET_SRCS,
      exist=["SADD {k} x"]),
    C("sunionstore", "SUNIONSTORE {k} {s} {s2}", {"k": "overwrite"}, setup=SET_SRCS,
      exist=["SADD {k} x"]),
    # --- sorted sets -----------------------------------------------------
    C("zadd", "ZADD {k} 1 a 2 b", {"k": "create"}, exist=["ZADD {k} 5 x"]),
    C("zadd-incr", "ZADD {k} INCR 1.5 a", {"k": "create"}, exist=["ZADD {k} 5 a"],
      note="a double: ,6.5 in RESP3, a bulk string in RESP2"),
    C("zadd-nx-incr-nil", "ZADD {k} NX INCR 1 a", {"k": "create"}, exist=["ZADD {k} 5 a"],
      noop_b=True, note="variant (b): the member exists, the reply is a null"),
    C("zadd-xx", "ZADD {k} XX 1 x", {"k": "none"}, exist=["ZADD {k} 5 x"]),
    C("zincrby", "ZINCRBY {k} 1.5 a", {"k": "create"}, exist=["ZADD {k} 5 a"]),
    C("zdiffstore", "ZDIFFSTORE {k} 2 {s} {s2}", {"k": "overwrite"}, setup=ZSET_SRCS,
      exist=["ZADD {k} 5 x"]),
    C("zinterstore", "ZINTERSTORE {k} 2 {s} {s2}", {"k": "overwrite"}, setup=ZSET_SRCS,
      exist=["ZADD {k} 5 x"]),
    C("zunionstore", "ZUNIONSTORE {k} 2 {s} {s2} WEIGHTS 1 2", {"k": "overwrite"},
      setup=ZSET_SRCS, exist=["ZADD {k} 5 x"]),
    C("zrangestore", "ZRANGESTORE {k} {s} 0 -1", {"k": "overwrite"}, setup=ZSET_SRCS,
      exist=["ZADD {k} 5 x"]),
    # --- geo ---------------------------------------------------------------
    C("geoadd", "GEOADD {k} 13.361389 38.115556 Palermo", {"k": "create"},
      exist=["GEOADD {k} 15 37 x"]),
    C("geoadd-xx", "GEOADD {k} XX 13.361389 38.115556 x", {"k": "none"},
      exist=["GEOADD {k} 15 37 x"]),
    C("georadius-store", "GEORADIUS {s} 15 37 200 km STORE {k}", {"k": "overwrite"},
      setup=GEO_SRC, exist=["ZADD {k} 5 x"]),
    C("georadius-storedist", "GEORADIUS {s} 15 37 200 km STOREDIST {k}", {"k": "overwrite"},
      setup=GEO_SRC, exist=["ZADD {k} 5 x"]),
    C("georadiusbymember-store", "GEORADIUSBYMEMBER {s} Palermo 200 km STORE {k}",
      {"k": "overwrite"}, setup=GEO_SRC, exist=["ZADD {k} 5 x"]),
    C("geosearchstore", "GEOSEARCHSTORE {k} {s} FROMLONLAT 15 37 BYRADIUS 200 km",
      {"k": "overwrite"}, setup=GEO_SRC, exist=["ZADD {k} 5 x"]),
    C("geosearchstore-storedist",
      "GEOSEARCHSTORE {k} {s} FROMLONLAT 15 37 BYRADIUS 200 km ASC STOREDIST",
      {"k": "overwrite"}, setup=GEO_SRC, exist=["ZADD {k} 5 x"]),
    # --- hyperloglog -----------------------------------------------------
    C("pfadd", "PFADD {k} a b c", {"k": "create"}, exist=["PFADD {k} z"]),
    C("pfmerge", "PFMERGE {k} {s}", {"k": "create"}, setup=["PFADD {s} a b"],
      exist=["PFADD {k} z"], note="merges into an existing HLL in place: keeps its TTL"),
    # --- streams ---------------------------------------------------------
    C("xadd", "XADD {k} 5-1 f v", {"k": "create"}, exist=["XADD {k} 1-1 a b"]),
    C("xadd-nomkstream", "XADD {k} NOMKSTREAM 5-1 f v", {"k": "none"},
      exist=["XADD {k} 1-1 a b"]),
    C("xgroup-create-mkstream", "XGROUP CREATE {k} g $ MKSTREAM", {"k": "create"},
      exist=["XADD {k} 1-1 a b"]),
    C("xgroup-create", "XGROUP CREATE {k} g $", {"k": "none"}, exist=["XADD {k} 1-1 a b"]),
    # --- option words where they are not options ----------------------------
    # A parser that looks for option words anywhere would misjudge these.
    C("set-value-nx", "SET {k} NX", {"k": "overwrite"}, exist=["SET {k} a"],
      note="the value is NX"),
    C("set-value-get", "SET {k} GET", {"k": "overwrite"}, exist=["SET {k} a"]),
    C("set-lowercase-ex", "set {k} v ex 300", {"k": "sets-ttl"}, exist=["SET {k} a"]),
    C("set-lowercase-keepttl", "set {k} v keepttl", {"k": "create"}, exist=["SET {k} a"]),
    C("getex-lowercase-persist", "getex {k} persist", {"k": "persist"}, exist=["SET {k} a"]),
    C("copy-lowercase-replace", "copy {s} {k} replace", {"k": "overwrite"},
      setup=["SET {s} v"], exist=["SET {k} a"]),
    C("zadd-member-xx", "ZADD {k} 1 XX", {"k": "create"}, exist=["ZADD {k} 5 x"]),
    C("zadd-xx-member-xx", "ZADD {k} XX 1 XX", {"k": "none"}, exist=["ZADD {k} 5 XX"]),
    C("xadd-field-nomkstream", "XADD {k} 5-1 NOMKSTREAM v", {"k": "create"},
      exist=["XADD {k} 1-1 a b"]),
    C("xadd-nomkstream-maxlen", "XADD {k} NOMKSTREAM MAXLEN = 10 5-1 f v", {"k": "none"},
      exist=["XADD {k} 1-1 a b"]),
    C("xadd-minid-limit", "XADD {k} MINID ~ 0 LIMIT 10 5-1 f v", {"k": "create"},
      exist=["XADD {k} 1-1 a b"]),
    C("xgroup-create-group-mkstream", "XGROUP CREATE {k} MKSTREAM $", {"k": "none"},
      exist=["XADD {k} 1-1 a b"], note="a group named MKSTREAM: no MKSTREAM option"),
    C("sort-by-pattern-store", "SORT {s} BY STORE", {}, setup=["RPUSH {s} 3 1 2"],
      note="a BY pattern named STORE: no destination"),
    C("sort-limit-get-store", "SORT {s} BY nosort LIMIT 0 10 GET # ALPHA STORE {k}",
      {"k": "overwrite"}, setup=["RPUSH {s} 3 1 2"], exist=["RPUSH {k} x"]),
    C("georadius-store-then-storedist",
      "GEORADIUS {s} 15 37 200 km STORE {k2} STOREDIST {k}", {"k": "overwrite"},
      setup=GEO_SRC, exist=["ZADD {k} 5 x"],
      note="the last of STORE / STOREDIST wins; {k2} is not written"),
    C("bitfield-get-then-set", "BITFIELD {k} GET u8 0 SET u8 8 1", {"k": "create"},
      exist=["SET {k} a"]),
    C("zincrby-tenth", "ZINCRBY {k} 0.1 a", {"k": "create"}, exist=["ZADD {k} 0.2 a"],
      note="a double that needs 17 digits"),
    C("zincrby-inf", "ZINCRBY {k} inf a", {"k": "create"}, exist=["ZADD {k} 1 a"]),
    C("lmove-same-key", "LMOVE {k} {k} LEFT RIGHT", {"k": "create"}, exist=["RPUSH {k} a b"],
      noop_a=True, note="rotation: source and destination are the same key"),
    C("sunionstore-self", "SUNIONSTORE {k} {k} {s}", {"k": "overwrite"}, setup=SET_SRCS,
      exist=["SADD {k} x"]),
    # --- commands of later servers ---------------------------------------
    C("hsetex", "HSETEX {k} FIELDS 2 f v g w", {"k": "create"}, exist=["HSET {k} f 1"],
      since=R80_V90),
    C("hsetex-field-ttl", "HSETEX {k} EXAT 4102444800 FIELDS 1 f v", {"k": "create"},
      exist=["HSET {k} f 1"], since=R80_V90,
      note="the fields' TTL, not the key's (absolute: the two runs' DUMPs compare equal)"),
    C("hsetex-fnx-keepttl", "HSETEX {k} FNX KEEPTTL FIELDS 1 h v", {"k": "create"},
      exist=["HSET {k} f 1"], since=R80_V90),
    C("hsetex-fxx", "HSETEX {k} FXX FIELDS 1 f v", {"k": "none"}, exist=["HSET {k} f 1"],
      since=R80_V90),
    C("hsetex-nx", "HSETEX {k} NX FIELDS 1 f v", {"k": "create"}, exist=["HSET {k} f 1"],
      noop_b=True, since={"valkey": (9, 0)}),
    C("hexpireat", "HEXPIREAT {k} 4102444800 FIELDS 1 f", {"k": "none"},
      exist=["HSET {k} f 1"], since={"redis": (7, 4), "valkey": (9, 0)},
      note="absolute: the two runs' DUMPs compare equal"),
    C("hgetex-persist", "HGETEX {k} PERSIST FIELDS 1 f", {"k": "none"},
      exist=["HSETEX {k} EXAT 4102444800 FIELDS 1 f 1"], since=R80_V90),
    C("vadd", "VADD {k} VALUES 3 1 2 3 e1", {"k": "create"},
      exist=["VADD {k} VALUES 3 1 1 1 e0"], since={"redis": (8, 0)},
      view=["TYPE {key}", "VCARD {key}", "VEMB {key} e0", "VEMB {key} e1"]),
    C("msetex", "MSETEX 2 {k} 1 {k2} 2", {"k": "overwrite", "k2": "overwrite"},
      exist=["SET {k} a", "SET {k2} b"], since=R84_V91),
    C("msetex-keepttl", "MSETEX 2 {k} 1 {k2} 2 KEEPTTL", {"k": "create", "k2": "create"},
      exist=["SET {k} a", "SET {k2} b"], since=R84_V91),
    C("msetex-nx", "MSETEX 1 {k} 1 NX", {"k": "create"}, exist=["SET {k} a"], noop_b=True,
      since=R84_V91),
    C("msetex-ex", "MSETEX 2 {k} 1 {k2} 2 EX 300", {"k": "sets-ttl", "k2": "sets-ttl"},
      exist=["SET {k} a", "SET {k2} b"], since=R84_V91),
    C("set-ifeq", "SET {k} new IFEQ a", {"k": "overwrite"}, exist=["SET {k} a"], noop_a=True,
      since=R84_V81, note="writes only over an equal value: never creates"),
    C("set-ifeq-get", "SET {k} new IFEQ a GET", {"k": "overwrite"}, exist=["SET {k} a"],
      noop_a=True, since=R84_V81),
    # --- scripts and functions -------------------------------------------
    C("eval", ["EVAL", SCRIPT_SET, "1", "{k}", "v"], {"k": "overwrite"},
      exist=["SET {k} a"], script=True),
    C("evalsha", ["EVALSHA", SCRIPT_SET_SHA, "1", "{k}", "v"], {"k": "overwrite"},
      setup=[["SCRIPT", "LOAD", SCRIPT_SET]], exist=["SET {k} a"], script=True),
    C("fcall", "FCALL ttlg_set 1 {k} v", {"k": "overwrite"},
      setup=[["FUNCTION", "LOAD", "REPLACE", FUNCTION_LIB]], exist=["SET {k} a"], script=True),
]

CASES_BY_ID = {c.id: c for c in ALL_CASES}
assert len(CASES_BY_ID) == len(ALL_CASES), "duplicate case id"

# The cases of the server the suite runs against (harness.SERVER_BIN).
SERVER = harness.server_bin_identity()
CASES = [c for c in ALL_CASES if c.available(SERVER)]


# --------------------------------------------------------------------------
# Rendering a case for one prefix
# --------------------------------------------------------------------------

class Rendered:
    """A case's commands with concrete keys and values."""

    def __init__(self, case, prefix, now=None):
        self.case = case
        self.prefix = prefix
        now = time.time() if now is None else now
        self.values = {
            "exat": str(int(now) + CMD_TTL),
            "pxat": str(int(now * 1000) + CMD_TTL * 1000),
        }
        self.keys = {p: (prefix + p).encode() for p in case.placeholders()}

    def key(self, placeholder):
        return self.keys[placeholder]

    def _arg(self, a, dump):
        m = re.fullmatch(r"\{(\w+)\}", a) if isinstance(a, str) else None
        if m:
            name = m.group(1)
            if name in self.keys:
                return self.keys[name]
            if name == "dump":
                assert dump is not None, "no DUMP payload for %s" % self.case.id
                return dump
            if name in self.values:
                return self.values[name].encode()
        if isinstance(a, bytes):
            return a
        return a.encode()

    def command(self, c, dump=None):
        parts = c if isinstance(c, list) else c.split(" ")
        return [self._arg(a, dump) for a in parts]

    def setup(self):
        return [self.command(c) for c in self.case.setup]

    def exist(self):
        return [self.command(c) for c in self.case.exist]

    def main(self, dump=None):
        return self.command(self.case.cmd, dump)


def rule_sections(rules):
    """[ttl "P"] sections for (prefix, action, extra) triples."""
    out = []
    for prefix, action, extra in rules:
        out.append('[ttl "%s"]' % prefix)
        out.append("ttl = %d" % RULE_TTL)
        out.append("action = %s" % action)
        for k, v in (extra or {}).items():
            out.append("%s = %s" % (k, v))
        out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# Where a violation is recorded
# --------------------------------------------------------------------------

EFFECT_EVENT = {
    "create": "creates-without-ttl",
    "overwrite": "drops-ttl",
    "persist": "persist",
}


def _json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def recorded_events(proxy, events_path):
    """(source, events) where source is the events file when the proxy wrote
    one, else its stderr. Events are the JSON objects found; a stderr that
    holds plain log lines gives its lines as {"_stderr_line": text}."""
    text = _read(events_path) if events_path else None
    if text:
        return events_path, _json_lines(text)
    text = proxy.stderr()
    objs = _json_lines(text)
    objs += [{"_stderr_line": ln} for ln in text.splitlines() if not ln.strip().startswith("{")]
    return "stderr", objs


def _match(ev, want):
    """want: event (default "violation"), command (any case), key (the
    event's key, or one of its "keys"), detail_has (a substring
    of its detail), and any other field to compare exactly (effect, action,
    rule, ...)."""
    command, key = want.get("command"), want.get("key")
    if "_stderr_line" in ev:
        # A plain log line: it must name the command, the key and the effect.
        low = ev["_stderr_line"].lower()
        effect = want.get("effect")
        return (command is not None and command.lower() in low
                and (key is None or key.lower() in low)
                and (effect is None or effect in low or effect.replace("-", " ") in low))
    if ev.get("event") != want.get("event", "violation"):
        return False
    if command is not None and str(ev.get("command", "")).lower() != command.lower():
        return False
    if key is not None and ev.get("key") != key and key not in ev.get("keys", []):
        return False
    if want.get("detail_has") and want["detail_has"] not in str(ev.get("detail", "")):
        return False
    return all(ev.get(f) == v for f, v in want.items()
               if f not in ("event", "command", "key", "detail_has") and v is not None)


def wait_recorded_all(proxy, events_path, wanted, timeout=3.0):
    """wanted: dicts as _match() reads them. Wait until each is matched by
    an event in the events file (or, while the proxy writes none, in its
    stderr); fail listing the ones never recorded and what was found."""
    deadline = time.monotonic() + timeout
    while True:
        src, evs = recorded_events(proxy, events_path)
        missing = [w for w in wanted if not any(_match(e, w) for e in evs)]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                "%d event(s) not recorded in %s:\n  %s\nrecorded (last 30):\n  %s"
                % (len(missing), src, "\n  ".join(repr(w) for w in missing),
                   "\n  ".join(repr(e) for e in evs[-30:]) or "(nothing)"))
        time.sleep(0.05)


def reject_prefix(cmd, verb, key, rule_label):
    """The exact start of a -TTLGUARD line, up to the hint."""
    return b"-TTLGUARD %s would %s '%s' (rule %s): " % (
        cmd.upper(), verb, key, rule_label)


VERB = {
    "create": b"create without a TTL",
    "overwrite": b"drop the TTL of",
    "persist": b"remove the TTL of",
}
