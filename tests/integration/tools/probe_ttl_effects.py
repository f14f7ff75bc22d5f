#!/usr/bin/python3
"""
probe_ttl_effects: what each write command does to a key's TTL, observed on a
real redis-server or valkey-server, compared with ttlguard's command table as
that server has it.

    probe_ttl_effects.py --port 7100 [--server NAME:VERSION]
                         [--eval BIN | --lib LIBTTLGUARD_CORE_A] [-v]

The server is identified from INFO server (Valkey says valkey_version; its
redis_version is 7.2.4 for compatibility), or --server names the one whose
cases and table to run (a warning when it is not the one on --port), and the
table is asked for that server (command_eval --server NAME:VERSION). Every case
says which servers have it (since=, until=: see applies()); only those run.

Every case is one command with placeholders for its keys, named after the key
roles of `ttlguard commands` ({key}, {source1}, {destination}). For each key of
a case, two experiments run on the server (one pipeline per case):

  (a) the key is missing, the case's other keys are set up -> run -> PTTL key:
      missing, created without a TTL, or created with a TTL;
  (b) the key exists with a TTL of 1000 s -> run -> PTTL key: TTL kept,
      dropped, replaced, or the key deleted.

The two outcomes allow one or more effects (see allowed_effects()); the
table's answer for that key of that argv (command_keys(), through the
command_eval tool) must be one of them. A TE_SETS_TTL answer must also point at
the argument and unit that give the TTL the server set. And every key the
table names must be a key to the server too (COMMAND GETKEYS).

A few more experiments check what the table's comments rely on (CARRY_CASES:
COPY, RENAME, RENAMENX and MOVE give the destination the source's TTL) and
that the table refuses (-1) exactly the arguments the server refuses
(SYNTAX_CASES).

Exit status 1 when anything disagrees. The integration suite
(tests/integration/test_command_table.py) runs the same functions.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import redis

DB = 9                  # the probe's keys live here; MOVE goes to DB + 1
PREFIX = "ttlg:probe:"
TTL_MS = 1000000        # the TTL a key has before experiment (b)
CASE_TTL = 5000         # seconds: every TTL a case sets, far from TTL_MS
TOLERANCE_MS = 3000

# How each type of key is set up; "{k}" is the key's name.
SETUP = {
    "string": [["SET", "{k}", "abc"]],
    "int": [["SET", "{k}", "10"]],
    "float": [["SET", "{k}", "1.5"]],
    "list": [["RPUSH", "{k}", "a", "b", "c"]],
    "numlist": [["RPUSH", "{k}", "3", "1", "2"]],
    "set": [["SADD", "{k}", "a", "b", "c"]],
    "set2": [["SADD", "{k}", "c", "d", "e"]],
    "zset": [["ZADD", "{k}", "1", "a", "2", "b", "3", "c"]],
    "zset2": [["ZADD", "{k}", "3", "c", "4", "d"]],
    "hash": [["HSET", "{k}", "f", "1", "g", "2"]],
    "hll": [["PFADD", "{k}", "a", "b", "c"]],
    "geo": [["GEOADD", "{k}", "13.361389", "38.115556", "Palermo",
             "15.087269", "37.502669", "Catania"]],
    # A stream with a group g whose consumer c has entry 1-1 pending.
    "stream": [["XADD", "{k}", "1-1", "f", "v"], ["XGROUP", "CREATE", "{k}", "g", "0"],
               ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "{k}", ">"]],
    # A hash whose field f has a TTL of its own (servers with HEXPIRE only).
    "hashttl": [["HSET", "{k}", "f", "1", "g", "2"],
                ["HEXPIRE", "{k}", "7000", "FIELDS", "1", "f"]],
    # A vector set of two 3-dimensional elements a and b (Redis 8 only).
    "vset": [["VADD", "{k}", "VALUES", "3", "1", "0", "0", "a"],
             ["VADD", "{k}", "VALUES", "3", "0", "1", "0", "b"]],
}

SCRIPT_SET = "return redis.call('SET', KEYS[1], 'x')"
SCRIPT_GET = "return redis.call('GET', KEYS[1])"
LIBRARY = """#!lua name=ttlg_probe
redis.register_function('ttlg_probe_set', function(keys, args)
  return redis.call('SET', keys[1], 'x') end)
redis.register_function{function_name='ttlg_probe_get', flags={'no-writes'},
  callback=function(keys, args) return redis.call('GET', keys[1]) end}
"""


# ---------------------------------------------------------------------------
# Which servers a case applies to
# ---------------------------------------------------------------------------

# A server: (kind, version), e.g. ("redis", (7, 0, 15)), ("valkey", (9, 1, 2)).
# since: {kind: first version that has it}, a kind left out has it in no
# version; None: every server. until: {kind: first version that no longer has
# it} (as the refusals of an option a later version accepts).
R74_V90 = {"redis": (7, 4), "valkey": (9, 0)}       # hash field TTLs: HEXPIRE ... HPERSIST
R80_V90 = {"redis": (8, 0), "valkey": (9, 0)}       # HSETEX, HGETEX
R80_V91 = {"redis": (8, 0), "valkey": (9, 1)}       # HGETDEL
R80 = {"redis": (8, 0)}                             # vector sets; Redis 8's HSETEX parser
R82 = {"redis": (8, 2)}                             # BITOP DIFF..., XADD ... KEEPREF, XDELEX
R84 = {"redis": (8, 4)}                             # SET ... IFNE, DELEX; HSETEX ... FIELDS ... EX
R86 = {"redis": (8, 6)}                             # XADD ... IDMP, XCFGSET
R862 = {"redis": (8, 6, 2)}                         # XIDMPRECORD; HSETEX: one FIELDS only
V81 = {"valkey": (8, 1)}                            # SET ... IFEQ
R84_V81 = {"redis": (8, 4), "valkey": (8, 1)}       # SET ... IFEQ on both
V90 = {"valkey": (9, 0)}                            # DELIFEQ, HSETEX NX|XX
V91 = {"valkey": (9, 1)}                            # MSETEX
R84_V91 = {"redis": (8, 4), "valkey": (9, 1)}       # MSETEX on both
EVERY = {"redis": (0,), "valkey": (0,)}


def applies(since, until, server):
    """True when server (kind, version) is one the case is for."""
    kind, version = server
    if since is not None and (kind not in since or tuple(version) < since[kind]):
        return False
    return not (until and kind in until and tuple(version) >= until[kind])


def server_arg(server):
    """("valkey", (9, 1, 2)) -> "valkey:9.1.2", as ttlguard and command_eval take it."""
    return "%s:%s" % (server[0], ".".join(str(v) for v in server[1]))


def parse_server(text):
    """"valkey:9.1.2" -> ("valkey", (9, 1, 2))."""
    kind, _, version = text.partition(":")
    if kind not in ("redis", "valkey") or not version:
        raise ValueError("not NAME:VERSION (redis:7.0.15, valkey:9.1.2): %r" % text)
    return kind, tuple(int(v) for v in version.split("."))


def identify(r):
    """The server behind the redis-py client r, from INFO server."""
    info = r.info("server")
    if info.get("server_name") == "valkey" or "valkey_version" in info:
        return "valkey", tuple(int(v) for v in str(info["valkey_version"]).split("."))
    return "redis", tuple(int(v) for v in str(info["redis_version"]).split("."))


class Case:
    """cmd: words separated by spaces; {role} placeholders are keys (their
    type in keys=), {ex} {px} {exat} {pxat} {dump} {digest} {script_set} {attr} ... are
    values. absent: keys missing in the setup of the other keys' experiments
    (as MSETNX needs). since, until: the servers that have it (applies())."""

    def __init__(self, cmd, absent=(), since=None, until=None, **keys):
        self.cmd = cmd
        self.keys = keys
        self.absent = set(absent)
        self.since, self.until = since, until

    def applies(self, server):
        return applies(self.since, self.until, server)

    def __repr__(self):
        return self.cmd


C = Case
CASES = [
    # strings
    C("APPEND {key} x", key="string"),
    C("BITFIELD {key} SET u8 0 255", key="string"),
    C("BITFIELD {key} INCRBY u8 0 1", key="string"),
    C("BITFIELD {key} OVERFLOW FAIL INCRBY u8 0 1", key="string"),
    C("BITFIELD {key} GET u8 0", key="string"),
    C("BITOP OR {destination} {source1} {source2}", destination="string",
      source1="string", source2="string"),
    C("BITOP NOT {destination} {source}", destination="string", source="string"),
    C("DECR {key}", key="int"),
    C("DECRBY {key} 2", key="int"),
    C("GETDEL {key}", key="string"),
    C("GETEX {key}", key="string"),
    C("GETEX {key} PERSIST", key="string"),
    C("GETEX {key} EX {ex}", key="string"),
    C("GETEX {key} PX {px}", key="string"),
    C("GETEX {key} EXAT {exat}", key="string"),
    C("GETEX {key} PXAT {pxat}", key="string"),
    C("GETSET {key} v", key="string"),
    C("INCR {key}", key="int"),
    C("INCRBY {key} 2", key="int"),
    C("INCRBYFLOAT {key} 1.5", key="float"),
    C("MSET {key1} v {key2} v", key1="string", key2="string"),
    C("MSETNX {key1} v {key2} v", absent=("key1", "key2"), key1="string", key2="string"),
    C("PSETEX {key} {px} v", key="string"),
    C("SET {key} v", key="string"),
    C("SET {key} v GET", key="string"),
    C("SET {key} v XX", key="string"),
    C("SET {key} v NX", key="string"),
    C("SET {key} v NX GET", key="string"),
    C("SET {key} v KEEPTTL", key="string"),
    C("SET {key} v XX KEEPTTL", key="string"),
    C("SET {key} v EX {ex}", key="string"),
    C("SET {key} v PX {px} GET", key="string"),
    C("SET {key} v EXAT {exat}", key="string"),
    C("SET {key} v PXAT {pxat}", key="string"),
    C("SET {key} v NX EX {ex}", key="string"),
    C("SETBIT {key} 7 1", key="string"),
    C("SETEX {key} {ex} v", key="string"),
    C("SETNX {key} v", key="string"),
    C("SETRANGE {key} 2 xyz", key="string"),
    # keyspace
    C("COPY {source} {destination}", source="string", destination="string"),
    C("COPY {source} {destination} REPLACE", source="string", destination="string"),
    C("COPY {source} {destination} DB %d" % (DB + 1), source="string", destination="string"),
    C("DEL {key1} {key2}", key1="string", key2="list"),
    C("UNLINK {key1} {key2}", key1="string", key2="list"),
    C("EXPIRE {key} {ex}", key="string"),
    C("EXPIRE {key} {ex} GT", key="string"),
    C("PEXPIRE {key} {px} XX", key="string"),
    C("EXPIREAT {key} {exat}", key="string"),
    C("PEXPIREAT {key} {pxat}", key="string"),
    C("PERSIST {key}", key="string"),
    C("MOVE {key} %d" % (DB + 1), key="string"),
    # Nothing listens on port 1: the keys stay (IOERR), or NOKEY.
    C("MIGRATE 127.0.0.1 1 {key} 0 100", key="string"),
    C("MIGRATE 127.0.0.1 1 {empty} 0 100 COPY KEYS {key1} {key2}", key1="string", key2="list"),
    C("RENAME {source} {destination}", source="string", destination="string"),
    C("RENAMENX {source} {destination}", source="string", destination="string"),
    C("RESTORE {key} 0 {dump}", key="string"),
    C("RESTORE {key} 0 {dump} REPLACE", key="string"),
    C("RESTORE {key} {px} {dump}", key="string"),
    C("RESTORE {key} {px} {dump} REPLACE IDLETIME 10", key="string"),
    C("RESTORE {key} {pxat} {dump} ABSTTL REPLACE", key="string"),
    C("RESTORE-ASKING {key} 0 {dump}", key="string"),
    C("RESTORE-ASKING {key} 0 {dump} REPLACE", key="string"),
    C("RESTORE-ASKING {key} {px} {dump} REPLACE", key="string"),
    C("SORT {key}", key="numlist"),
    C("SORT {key} STORE {destination}", key="numlist", destination="list"),
    C("SORT {key} ALPHA STORE {key2} STORE {destination} LIMIT 0 2", key="numlist",
      key2="list", destination="list"),
    # lists
    C("BLMOVE {source} {destination} LEFT RIGHT 0.01", source="list", destination="list"),
    C("BLMPOP 0.01 2 {key1} {key2} LEFT", key1="list", key2="list"),
    C("BLPOP {key} 0.01", key="list"),
    C("BRPOP {key} 0.01", key="list"),
    C("BRPOPLPUSH {source} {destination} 0.01", source="list", destination="list"),
    C("LINSERT {key} BEFORE b x", key="list"),
    C("LMOVE {source} {destination} LEFT LEFT", source="list", destination="list"),
    C("LMPOP 1 {key} LEFT", key="list"),
    C("LPOP {key}", key="list"),
    C("LPUSH {key} x", key="list"),
    C("LPUSHX {key} x", key="list"),
    C("LREM {key} 0 a", key="list"),
    C("LSET {key} 0 x", key="list"),
    C("LTRIM {key} 0 1", key="list"),
    C("RPOP {key}", key="list"),
    C("RPOPLPUSH {source} {destination}", source="list", destination="list"),
    C("RPUSH {key} x", key="list"),
    C("RPUSHX {key} x", key="list"),
    # sets
    C("SADD {key} x", key="set"),
    C("SDIFFSTORE {destination} {source1} {source2}", destination="set", source1="set",
      source2="set2"),
    C("SINTERSTORE {destination} {source1} {source2}", destination="set", source1="set",
      source2="set2"),
    C("SUNIONSTORE {destination} {source1} {source2}", destination="set", source1="set",
      source2="set2"),
    C("SMOVE {source} {destination} a", source="set", destination="set2"),
    C("SPOP {key}", key="set"),
    C("SREM {key} a", key="set"),
    # hashes
    C("HDEL {key} f", key="hash"),
    C("HINCRBY {key} f 1", key="hash"),
    C("HINCRBYFLOAT {key} f 1.5", key="hash"),
    C("HMSET {key} f v", key="hash"),
    C("HSET {key} f v h w", key="hash"),
    C("HSETNX {key} h v", key="hash"),
    # sorted sets
    C("BZMPOP 0.01 1 {key} MIN", key="zset"),
    C("BZPOPMAX {key} 0.01", key="zset"),
    C("BZPOPMIN {key} 0.01", key="zset"),
    C("ZADD {key} 1 x", key="zset"),
    C("ZADD {key} NX CH 1 x", key="zset"),
    C("ZADD {key} INCR 1 a", key="zset"),
    C("ZADD {key} XX GT 5 a", key="zset"),
    C("ZDIFFSTORE {destination} 2 {source1} {source2}", destination="zset", source1="zset",
      source2="zset2"),
    C("ZINCRBY {key} 1 a", key="zset"),
    C("ZINTERSTORE {destination} 2 {source1} {source2}", destination="zset", source1="zset",
      source2="zset2"),
    C("ZUNIONSTORE {destination} 2 {source1} {source2} WEIGHTS 1 2", destination="zset",
      source1="zset", source2="zset2"),
    C("ZMPOP 1 {key} MIN", key="zset"),
    C("ZPOPMAX {key}", key="zset"),
    C("ZPOPMIN {key}", key="zset"),
    C("ZRANGESTORE {destination} {source} 0 -1", destination="zset", source="zset"),
    C("ZREM {key} a", key="zset"),
    C("ZREMRANGEBYLEX {key} [a [a", key="zset"),
    C("ZREMRANGEBYRANK {key} 0 0", key="zset"),
    C("ZREMRANGEBYSCORE {key} 1 1", key="zset"),
    # geo
    C("GEOADD {key} 13.5 38.1 X", key="geo"),
    C("GEOADD {key} XX CH 13.361389 38.115556 Palermo", key="geo"),
    C("GEORADIUS {key} 15 37 200 km", key="geo"),
    C("GEORADIUS {key} 15 37 200 km ASC COUNT 5 STORE {destination}", key="geo",
      destination="zset"),
    C("GEORADIUS {key} 15 37 200 km STORE {key2} STOREDIST {destination}", key="geo",
      key2="zset", destination="zset"),
    C("GEORADIUSBYMEMBER {key} Palermo 200 km STORE {destination}", key="geo",
      destination="zset"),
    C("GEOSEARCHSTORE {destination} {source} FROMLONLAT 15 37 BYRADIUS 200 km",
      destination="zset", source="geo"),
    # hyperloglog
    C("PFADD {key} x", key="hll"),
    C("PFMERGE {destination} {source}", destination="hll", source="hll"),
    C("PFDEBUG TODENSE {key}", key="hll"),
    # streams
    C("XACK {key} g 1-1", key="stream"),
    C("XADD {key} * f v", key="stream"),
    C("XADD {key} MAXLEN ~ 10 * f v", key="stream"),
    C("XADD {key} NOMKSTREAM * f v", key="stream"),
    C("XAUTOCLAIM {key} g c2 0 0", key="stream"),
    C("XCLAIM {key} g c2 0 1-1", key="stream"),
    C("XDEL {key} 1-1", key="stream"),
    C("XGROUP CREATE {key} g2 $", key="stream"),
    C("XGROUP CREATE {key} g2 $ MKSTREAM", key="stream"),
    C("XGROUP CREATE {key} g2 0 ENTRIESREAD 0 MKSTREAM", key="stream"),
    C("XGROUP CREATECONSUMER {key} g c3", key="stream"),
    C("XGROUP DELCONSUMER {key} g c", key="stream"),
    C("XGROUP DESTROY {key} g", key="stream"),
    C("XGROUP SETID {key} g 0", key="stream"),
    C("XREAD BLOCK 10 STREAMS {key} 0", key="stream"),
    C("XREADGROUP GROUP g c2 BLOCK 10 STREAMS {key} >", key="stream"),
    C("XSETID {key} 5-5", key="stream"),
    C("XTRIM {key} MAXLEN 0", key="stream"),
    # scripts: the table declares their keys overwritten, the worst a script can
    # do; the scripts here do just that (SET), or only read (the _RO variants)
    C("EVAL {script_set} 1 {key}", key="string"),
    C("EVALSHA {sha_set} 1 {key}", key="string"),
    C("EVAL_RO {script_get} 1 {key}", key="string"),
    C("EVALSHA_RO {sha_get} 1 {key}", key="string"),
    C("FCALL ttlg_probe_set 1 {key}", key="string"),
    C("FCALL_RO ttlg_probe_get 1 {key}", key="string"),

    # ---- later servers ----
    # SET ... IFEQ (Valkey 8.1, Redis 8.4): writes only over an equal value,
    # never creates; without KEEPTTL it drops the TTL as a plain SET does.
    C("SET {key} v IFEQ abc", since=R84_V81, key="string"),
    C("SET {key} v IFEQ abc GET", since=R84_V81, key="string"),
    C("SET {key} v IFEQ abc KEEPTTL", since=R84_V81, key="string"),
    C("SET {key} v IFEQ abc EX {ex}", since=R84_V81, key="string"),
    C("SET {key} v IFEQ abc PXAT {pxat}", since=R84_V81, key="string"),
    # No "SET ... IFEQ nomatch": it writes nothing, but the table cannot know
    # the value and answers for the write (overwrite), which no experiment on
    # a mismatch can see. DELIFEQ's key is "none" either way: both are here.
    # DELIFEQ (Valkey 9.0): deletes the key when its value is the given one.
    C("DELIFEQ {key} abc", since=V90, key="string"),
    C("DELIFEQ {key} nomatch", since=V90, key="string"),
    # Redis 8.4's IFNE and IFDNE (digest not equal) create a missing key as
    # SET does; IFDEQ, like IFEQ, never creates. Redis takes NX or XX after a
    # condition, and the same condition again (the last value counts).
    C("SET {key} v IFNE nomatch", since=R84, key="string"),
    C("SET {key} v IFNE nomatch KEEPTTL", since=R84, key="string"),
    C("SET {key} v IFNE nomatch NX", since=R84, key="string"),
    C("SET {key} v IFNE nomatch XX", since=R84, key="string"),
    C("SET {key} v IFNE nomatch PXAT {pxat}", since=R84, key="string"),
    C("SET {key} v IFEQ abc NX", since=R84, key="string"),
    C("SET {key} v IFEQ x IFEQ abc", since=R84, key="string"),
    C("SET {key} v IFDEQ {digest}", since=R84, key="string"),
    C("SET {key} v IFDEQ {digest} KEEPTTL", since=R84, key="string"),
    C("SET {key} v IFDNE 0000000000000000 GET", since=R84, key="string"),
    C("SET {key} v IFDNE 0000000000000000 EX {ex}", since=R84, key="string"),
    # DELEX (Redis 8.4): deletes the key, or when its value (digest) compares so.
    C("DELEX {key}", since=R84, key="string"),
    C("DELEX {key} IFEQ abc", since=R84, key="string"),
    C("DELEX {key} IFNE abc", since=R84, key="string"),
    C("DELEX {key} IFDEQ {digest}", since=R84, key="string"),
    C("DELEX {key} IFDNE {digest}", since=R84, key="string"),
    # MSETEX (Redis 8.4, Valkey 9.1): all keys or none.
    C("MSETEX 2 {key1} v {key2} w", since=R84_V91, key1="string", key2="string"),
    C("MSETEX 2 {key1} v {key2} w NX", since=R84_V91, absent=("key1", "key2"),
      key1="string", key2="string"),
    C("MSETEX 2 {key1} v {key2} w XX", since=R84_V91, key1="string", key2="string"),
    C("MSETEX 2 {key1} v {key2} w EX {ex}", since=R84_V91, key1="string", key2="string"),
    C("MSETEX 2 {key1} v {key2} w PX {px}", since=R84_V91, key1="string", key2="string"),
    C("MSETEX 1 {key} v EXAT {exat}", since=R84_V91, key="string"),
    C("MSETEX 1 {key} v PXAT {pxat} NX", since=R84_V91, key="string"),
    C("MSETEX 2 {key1} v {key2} w KEEPTTL", since=R84_V91, key1="string", key2="string"),
    C("MSETEX 2 {key1} v {key2} w XX KEEPTTL", since=R84_V91, key1="string", key2="string"),
    # Hash field TTLs (Redis 7.4, Valkey 9.0) are not key TTLs: the key keeps
    # its own, a hash created has none.
    C("HEXPIRE {key} {ex} FIELDS 1 f", since=R74_V90, key="hash"),
    C("HEXPIRE {key} {ex} NX FIELDS 2 f nosuch", since=R74_V90, key="hash"),
    C("HEXPIRE {key} 0 FIELDS 2 f g", since=R74_V90, key="hash"),
    C("HPEXPIRE {key} {px} GT FIELDS 1 f", since=R74_V90, key="hashttl"),
    C("HEXPIREAT {key} {exat} XX FIELDS 1 f", since=R74_V90, key="hashttl"),
    C("HPEXPIREAT {key} {pxat} LT FIELDS 1 f", since=R74_V90, key="hashttl"),
    C("HPERSIST {key} FIELDS 1 f", since=R74_V90, key="hashttl"),
    C("HPERSIST {key} FIELDS 2 f g", since=R74_V90, key="hash"),
    # HSETEX (Redis 8.0, Valkey 9.0): FXX (every field exists) never creates
    # the hash, nor (Valkey) XX.
    C("HSETEX {key} FIELDS 1 f v", since=R80_V90, key="hash"),
    C("HSETEX {key} FNX FIELDS 1 h v", since=R80_V90, key="hash"),
    C("HSETEX {key} FXX FIELDS 1 f v", since=R80_V90, key="hash"),
    C("HSETEX {key} FXX FIELDS 2 f v h w", since=R80_V90, key="hash"),
    C("HSETEX {key} EX {ex} FIELDS 1 f v", since=R80_V90, key="hash"),
    C("HSETEX {key} PX {px} FIELDS 2 f v h w", since=R80_V90, key="hash"),
    C("HSETEX {key} FNX EXAT {exat} FIELDS 1 h v", since=R80_V90, key="hash"),
    C("HSETEX {key} PXAT {pxat} FXX FIELDS 1 f v", since=R80_V90, key="hashttl"),
    C("HSETEX {key} KEEPTTL FIELDS 1 f v", since=R80_V90, key="hashttl"),
    C("HSETEX {key} NX FIELDS 1 f v", since=V90, key="hash"),
    C("HSETEX {key} XX FIELDS 1 f v", since=V90, key="hash"),
    C("HSETEX {key} XX FNX EX {ex} FIELDS 1 h v", since=V90, key="hash"),
    C("HSETEX {key} NX KEEPTTL FIELDS 1 f v", since=V90, key="hash"),
    # Options after FIELDS (Redis 8.6; the table has it from 8.4).
    C("HSETEX {key} FIELDS 1 f v EX {ex}", since=R84, key="hash"),
    C("HSETEX {key} FIELDS 1 h v PX {px} FNX", since=R84, key="hash"),
    C("HSETEX {key} FIELDS 1 f v FXX", since=R84, key="hash"),
    # HGETEX (Redis 8.0, Valkey 9.0), HGETDEL (Redis 8.0, Valkey 9.1)
    C("HGETEX {key} FIELDS 1 f", since=R80_V90, key="hash"),
    C("HGETEX {key} EX {ex} FIELDS 1 f", since=R80_V90, key="hash"),
    C("HGETEX {key} PXAT {pxat} FIELDS 2 f g", since=R80_V90, key="hash"),
    C("HGETEX {key} PERSIST FIELDS 1 f", since=R80_V90, key="hashttl"),
    C("HGETDEL {key} FIELDS 1 f", since=R80_V91, key="hash"),
    C("HGETDEL {key} FIELDS 2 f g", since=R80_V91, key="hash"),
    # Vector sets (Redis 8.0)
    C("VADD {key} VALUES 3 1 2 3 e1", since=R80, key="vset"),
    C("VADD {key} REDUCE 2 VALUES 3 1 2 3 e1", since=R80, key="vset"),
    C("VREM {key} a", since=R80, key="vset"),
    C("VSETATTR {key} a {attr}", since=R80, key="vset"),
    # BITOP's operators of Redis 8.2: the destination is overwritten as by OR.
    C("BITOP DIFF {destination} {source1} {source2}", since=R82, destination="string",
      source1="string", source2="string"),
    C("BITOP DIFF1 {destination} {source1} {source2}", since=R82, destination="string",
      source1="string", source2="string"),
    C("BITOP ANDOR {destination} {source1} {source2}", since=R82, destination="string",
      source1="string", source2="string"),
    C("BITOP ONE {destination} {source}", since=R82, destination="string", source="string"),
    # Streams of Redis 8.2 to 8.6: KEEPREF|DELREF|ACKED say which entries
    # trimming may delete; IDMP may add no entry but creates the stream.
    C("XADD {key} KEEPREF * f v", since=R82, key="stream"),
    C("XADD {key} ACKED MAXLEN ~ 10 * f v", since=R82, key="stream"),
    C("XADD {key} NOMKSTREAM DELREF * f v", since=R82, key="stream"),
    C("XADD {key} IDMP p i * f v", since=R86, key="stream"),
    C("XADD {key} IDMPAUTO p * f v", since=R86, key="stream"),
    C("XADD {key} NOMKSTREAM IDMP p i * f v", since=R86, key="stream"),
    C("XTRIM {key} MAXLEN 0 ACKED", since=R82, key="stream"),
    C("XTRIM {key} DELREF MINID 2-0", since=R82, key="stream"),
    C("XACKDEL {key} g IDS 1 1-1", since=R82, key="stream"),
    C("XACKDEL {key} g DELREF IDS 1 1-1", since=R82, key="stream"),
    C("XDELEX {key} IDS 1 1-1", since=R82, key="stream"),
    C("XDELEX {key} ACKED IDS 1 1-1", since=R82, key="stream"),
    C("XREADGROUP GROUP g c2 CLAIM 0 STREAMS {key} >", since=R84, key="stream"),
    C("XCFGSET {key} IDMP-DURATION 100", since=R86, key="stream"),
    C("XCFGSET {key} IDMP-MAXSIZE 50 IDMP-DURATION 60", since=R86, key="stream"),
    C("XIDMPRECORD {key} p i 1-1", since=R862, key="stream"),
]

# The destination gets the source's TTL: source has a TTL of 777 s,
# destination missing -> the destination's TTL (in database `db`).
CARRY_CASES = [
    ("COPY {source} {destination}", DB),
    ("COPY {source} {destination} REPLACE", DB),
    ("RENAME {source} {destination}", DB),
    ("RENAMENX {source} {destination}", DB),
    ("MOVE {source} %d" % (DB + 1), DB + 1),
    ("COPY {source} {destination} DB %d" % (DB + 1), DB + 1),
]


class Syntax:
    """A SYNTAX_CASES entry for some servers only (a plain tuple is for all)."""

    def __init__(self, cmd, refused, kind=None, since=None, until=None):
        self.cmd, self.refused, self.kind = cmd, refused, kind
        self.since, self.until = since, until

    def applies(self, server):
        return applies(self.since, self.until, server)


S = Syntax

# Arguments the table must refuse (-1) exactly when the server refuses them:
# (argv, refused[, type of {k}]), or Syntax(...) for the servers that have it.
# Run on missing keys, where only the arguments can fail, unless a type for
# {k} is given.
SYNTAX_CASES = [
    ("SET {k} v NX XX", True), ("SET {k} v XX NX", True), ("SET {k} v EX 0", True),
    ("SET {k} v EX -5", True), ("SET {k} v EX 1.5", True), ("SET {k} v EX", True),
    ("SET {k} v EX 10 PX 10", True), ("SET {k} v KEEPTTL EX 10", True),
    ("SET {k} v EX 10 KEEPTTL", True), ("SET {k} v PERSIST", True),
    ("SET {k} v EX 9223372036854776", True), ("SET {k} v FOO", True),
    ("SET {k} v EX 9223372036854775", True), ("SET {k} v PX 9223372036854775807", True),
    ("SET {k} v PX 9223372036854776", False), ("SET {k} v PXAT 9223372036854775807", False),
    ("PEXPIRE {k} 9223372036854775807", True, "string"),
    ("EXPIRE {k} 9223372036854775", True, "string"),
    ("EXPIREAT {k} 9223372036854775", False, "string"),
    ("PEXPIRE {k} -9223372036854775808", False, "string"),
    ("SET {k} v EX 10 EX 20", False), ("SET {k} v NX NX GET GET", False),
    ("SET {k} v PX 10000 px 20000", False), ("SET {k} v nx\0junk", False),
    ("SET {k} v KEEPTTL KEEPTTL", False), ("SET {k} v XX KEEPTTL GET", False),
    ("GETEX {k} PERSIST EX 10", True), ("GETEX {k} EX 10 PERSIST", True),
    ("GETEX {k} NX", True), ("GETEX {k} KEEPTTL", True),
    # On a missing key GETEX answers nil before it looks at the expiry.
    ("GETEX {k} EX 0", True, "string"), ("GETEX {k} PX -1", True, "string"),
    ("GETEX {k} PERSIST PERSIST", False), ("GETEX {k} EXAT 99999999999", False),
    ("SETEX {k} 0 v", True), ("SETEX {k} x v", True), ("PSETEX {k} -1 v", True),
    ("SETEX {k} 10 v", False),
    ("EXPIRE {k} 10 NX XX", True), ("EXPIRE {k} 10 GT LT", True), ("EXPIRE {k} 10 FOO", True),
    ("EXPIRE {k} ten", True), ("EXPIRE {k} 9223372036854776", True),
    ("EXPIRE {k} 10 XX GT", False), ("EXPIRE {k} -10", False), ("PEXPIREAT {k} 10 nx", False),
    ("MSET {k} v {k2}", True), ("MSETNX {k} v {k2}", True), ("MSET {k} v {k2} w", False),
    ("HSET {k} f v g", True), ("HMSET {k} f v g w", False),
    ("COPY {k} {k}", True), ("COPY {k} {k2} DB x", True), ("COPY {k} {k2} FOO", True),
    ("COPY {k} {k2} DB", True), ("COPY {k} {k2} REPLACE REPLACE", False),
    ("RESTORE {k} -1 {dump}", True), ("RESTORE {k} x {dump}", True),
    ("RESTORE {k} 0 {dump} FREQ 300", True), ("RESTORE {k} 0 {dump} IDLETIME -1", True),
    ("RESTORE {k} 0 {dump} IDLETIME 5 FREQ 5", True), ("RESTORE {k} 0 {dump} FOO", True),
    ("RESTORE {k} 0 {dump} REPLACE REPLACE ABSTTL", False),
    ("RESTORE {k} 0 {dump} FREQ 5", False),
    ("SORT {k} STORE", True), ("SORT {k} LIMIT 0", True), ("SORT {k} LIMIT x 1", True),
    ("SORT {k} FOO", True), ("SORT {k} STORE {k2} STORE {k3} DESC ALPHA", False),
    ("SORT {k} BY nosort GET # LIMIT 0 1", False),
    ("BITFIELD {k} SET u8 0", True), ("BITFIELD {k} OVERFLOW FOO", True),
    ("BITFIELD {k} FOO", True), ("BITFIELD {k} OVERFLOW SAT SET u8 0 1 GET u8 0", False),
    ("BITOP NOT {k} {k2} {k3}", True), ("BITOP FOO {k} {k2}", True),
    ("BITOP XOR {k} {k2} {k3}", False),
    ("LMOVE {k} {k2} UP DOWN", True), ("LMOVE {k} {k2} left RIGHT", False),
    ("BLMOVE {k} {k2} LEFT UP 0.01", True),
    ("ZADD {k} NX XX 1 a", True), ("ZADD {k} GT LT 1 a", True), ("ZADD {k} NX GT 1 a", True),
    ("ZADD {k} 1", True), ("ZADD {k} 1 a 2", True), ("ZADD {k} INCR 1 a 2 b", True),
    ("ZADD {k} CH", True), ("ZADD {k} XX CH GT 1 a", False), ("ZADD {k} NX NX 1 a 2 b", False),
    ("GEOADD {k} XX 1 2", True), ("GEOADD {k} NX XX 1 2 m", True),
    ("GEOADD {k} CH CH CH", True), ("GEOADD {k} CH 1 2 m", False),
    ("GEORADIUS {k} 15 37 200 km STORE {k2} WITHDIST", True),
    ("GEORADIUS {k} 15 37 200 km ANY", True), ("GEORADIUS {k} 15 37 200 km COUNT 0", True),
    ("GEORADIUS {k} 15 37 200 km STORE", True), ("GEORADIUS {k} 15 37 200 km FOO", True),
    ("GEORADIUS {k} 15 37 200 km COUNT 1 ANY STOREDIST {k2}", False),
    ("GEORADIUSBYMEMBER {k} m 200 km WITHCOORD", False),
    ("XADD {k} * f", True), ("XADD {k} * f v g", True), ("XADD {k} LIMIT 10 * f v", True),
    ("XADD {k} MAXLEN 10 LIMIT 10 * f v", True), ("XADD {k} MAXLEN -1 * f v", True),
    ("XADD {k} MAXLEN 10 MINID 0 * f v", True), ("XADD {k} MAXLEN", True),
    ("XADD {k} NOMKSTREAM MAXLEN ~ 10 LIMIT 5 * f v", False),
    ("XADD {k} MINID = 0 1-1 f v", False), ("XADD {k} nomkstream * maxlen 1", False),
    ("XGROUP CREATE {k} g $ MKSTREAM FOO", True), ("XGROUP FOO {k}", True),
    ("XGROUP CREATE {k} g", True), ("XGROUP CREATE {k} g $ ENTRIESREAD x MKSTREAM", True),
    ("XGROUP CREATE {k} g $ MKSTREAM", False),
    ("XGROUP CREATE {k} g $ MKSTREAM MKSTREAM MKSTREAM", False),
    ("XGROUP CREATE {k} g $ MKSTREAM MKSTREAM MKSTREAM MKSTREAM", True),
    ("EVAL {script_set} 2 {k}", True), ("EVAL {script_set} -1 {k}", True),
    ("EVAL {script_set} x {k}", True), ("EVAL {script_set} 1 {k} arg", False),
    ("FCALL ttlg_probe_set 2 {k}", True),
    ("ZUNIONSTORE {k} 0 {k2}", True), ("ZUNIONSTORE {k} 2 {k2}", True),
    ("ZINTERSTORE {k} 1 {k2} AGGREGATE MAX", False), ("ZDIFFSTORE {k} 1 {k2}", False),

    # ---- later servers ----
    # SET ... IFEQ: an option Valkey 8.1 and Redis 8.4 added, a syntax error
    # before. Redis takes NX or XX after it, and the same condition twice;
    # Valkey takes neither.
    S("SET {k} v IFEQ x", True, until=R84_V81), S("SET {k} v IFEQ x GET", True, until=R84_V81),
    S("SET {k} v IFEQ x", False, since=R84_V81),
    S("SET {k} v ifeq x KEEPTTL GET", False, since=R84_V81),
    S("SET {k} v GET IFEQ x PX 100", False, since=R84_V81),
    S("SET {k} v NX IFEQ x", True, since=R84_V81), S("SET {k} v XX IFEQ x", True, since=R84_V81),
    S("SET {k} v IFEQ x XX", True, since=V81), S("SET {k} v IFEQ x XX", False, since=R84),
    S("SET {k} v IFEQ x NX", True, since=V81), S("SET {k} v IFEQ x NX", False, since=R84),
    S("SET {k} v IFEQ", True), S("SET {k} v IFEQ x IFEQ y", True, since=V81),
    S("SET {k} v IFEQ x IFEQ y", False, since=R84),
    S("SET {k} v IFEQ x EX 0", True), S("SET {k} v IFEQ x KEEPTTL EX 10", True),
    # Redis 8.4's IFNE, IFDEQ, IFDNE: one condition at a time; the digest is
    # checked only against an existing string (a missing key here).
    S("SET {k} v IFNE x", True, until=R84), S("SET {k} v IFNE x", False, since=R84),
    S("SET {k} v IFDEQ zz", False, since=R84),
    S("SET {k} v ifdne zz ifdne yy GET", False, since=R84),
    S("SET {k} v IFEQ x IFNE y", True, since=R84), S("SET {k} v IFDEQ x IFDNE y", True, since=R84),
    S("SET {k} v XX IFDNE x", True, since=R84), S("SET {k} v IFNE x NX XX", True, since=R84),
    S("SET {k} v IFDNE", True, since=R84), S("SET {k} v IFNE x KEEPTTL EX 10", True, since=R84),
    # DELEX: one condition and its value, or none.
    S("DELEX {k}", False, since=R84), S("DELEX {k} IFNE x", False, since=R84),
    # BITOP's operators of Redis 8.2: DIFF, DIFF1, ANDOR need two sources.
    S("BITOP ONE {k} {k2}", True, until=R82), S("BITOP one {k} {k2}", False, since=R82),
    S("BITOP DIFF {k} {k2}", True, since=R82), S("BITOP DIFF1 {k} {k2}", True, since=R82),
    S("BITOP ANDOR {k} {k2}", True, since=R82), S("BITOP diff1 {k} {k2} {k3}", False, since=R82),
    S("BITOP ANDOR {k} {k2} {k3} {k2}", False, since=R82),
    # XADD's KEEPREF|DELREF|ACKED (Redis 8.2), IDMPAUTO|IDMP (8.6): one of each;
    # a second reference option is read as the ID.
    S("XADD {k} KEEPREF * f v", True, until=R82), S("XADD {k} KEEPREF * f v", False, since=R82),
    S("XADD {k} nomkstream acked MAXLEN ~ 5 LIMIT 2 * f v", False, since=R82),
    S("XADD {k} KEEPREF DELREF * f v", True, since=R82),
    S("XADD {k} MAXLEN ACKED * f v", True, since=R82),
    S("XADD {k} IDMP p i * f v", True, until=R86), S("XADD {k} IDMP p i * f v", False, since=R86),
    S("XADD {k} IDMPAUTO p MAXLEN 5 * f v", False, since=R86),
    S("XADD {k} IDMP p i 1-1 f v", True, since=R86),
    S("XADD {k} IDMP p {empty} * f v", True, since=R86),
    S("XADD {k} IDMPAUTO {empty} * f v", True, since=R86),
    S("XADD {k} IDMPAUTO p IDMP p i * f v", True, since=R86),
    S("XADD {k} IDMPAUTO p IDMPAUTO q * f v", True, since=R86),
    S("XADD {k} IDMP p * f v", True, since=R86), S("XADD {k} IDMPAUTO", True, since=R86),
    # DELIFEQ: arity only.
    S("DELIFEQ {k}", True, since=V90), S("DELIFEQ {k} v", False, since=V90),
    # HSETEX (opt_hsetex). Redis 8 refuses a repeated option; Valkey 9 parses
    # them as SET does (a repeat is fine, a conflict is not) and has NX|XX.
    S("HSETEX {k} FIELDS 1 f v", False, since=R80_V90),
    S("HSETEX {k} fxx px 10000 FIELDS 2 f v g w", False, since=R80_V90),
    S("HSETEX {k} FIELDS 1 EX 10", False, since=R80_V90),
    S("HSETEX {k} EX 10 f v", True, since=R80_V90),
    S("HSETEX {k} FNX f v", True, since=R80_V90),
    S("HSETEX {k} FIELDS 2 f v", True, since=R80_V90),
    S("HSETEX {k} FIELDS 1 f v g w", True, since=R80_V90),
    S("HSETEX {k} FIELDS 1 f v g", True, since=R80_V90),
    S("HSETEX {k} FIELDS 1 f", True, since=R80_V90),
    S("HSETEX {k} FIELDS 1 f v EX 10", True, since=R80_V90, until=R84),
    S("HSETEX {k} FIELDS 1 f v FIELDS 1 g w", True, since=R80_V90, until=R84),
    S("HSETEX {k} FIELDS 0 f v", True, since=R80_V90),
    S("HSETEX {k} FIELDS -1 f v", True, since=R80_V90),
    S("HSETEX {k} FIELDS x f v", True, since=R80_V90),
    S("HSETEX {k} FIELDS 01 f v", True, since=R80_V90),
    S("HSETEX {k} FIELDS +1 f v", True, since=R80_V90),
    S("HSETEX {k} EX 10 PX 10 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} KEEPTTL EX 10 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EX 10 KEEPTTL FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} PERSIST FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} FNX FXX FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} FXX FNX FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} FOO FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EX FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EX 10 EX 10 FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} EX 10 EX 10 FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} PX 10 PX 20 FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} PX 10 PX 20 FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} KEEPTTL KEEPTTL FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} KEEPTTL KEEPTTL FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} FNX FNX FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} FNX FNX FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} FXX FXX FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} FXX FXX FIELDS 1 f v", False, since=V90),
    # The fields' expiry: an integer >= 0 (0 and past times delete the
    # fields at once); Redis 8 caps it at 2^46 ms from the epoch.
    S("HSETEX {k} EX 0 FIELDS 1 f v", False, since=R80_V90),
    S("HSETEX {k} PXAT 0 FIELDS 1 f v", False, since=R80_V90),
    S("HSETEX {k} EX -1 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} PXAT -1 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EX x FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EX 1.5 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EX 9223372036854775 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} PX 9223372036854775807 FIELDS 1 f v", True, since=R80_V90),
    S("HSETEX {k} EXAT 9223372036854775 FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} EXAT 9223372036854775 FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} PXAT 9223372036854775807 FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} PXAT 9223372036854775807 FIELDS 1 f v", False, since=V90),
    # Key-level NX|XX: Valkey 9 only.
    S("HSETEX {k} NX FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} XX FIELDS 1 f v", True, since=R80),
    S("HSETEX {k} NX FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} XX FNX FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} NX NX FIELDS 1 f v", False, since=V90),
    S("HSETEX {k} NX XX FIELDS 1 f v", True, since=V90),
    S("HSETEX {k} XX NX FIELDS 1 f v", True, since=V90),
    # Options after FIELDS: Redis 8.6 (the table takes them from 8.4); a
    # second FIELDS is refused since 8.6.2, the last one counted before.
    S("HSETEX {k} FIELDS 1 f v EX 10", False, since=R84),
    S("HSETEX {k} FIELDS 1 f v PX 10000 fnx", False, since=R84),
    S("HSETEX {k} FIELDS 1 f v FIELDS 1 g w", False, since=R84, until=R862),
    S("HSETEX {k} FIELDS 1 f v FIELDS 1 g w", True, since=R862),
    S("HSETEX {k} EX 10 FIELDS 1 f v PX 10", True, since=R84),
    S("HSETEX {k} FIELDS 1 f v EX", True, since=R84),
    S("HSETEX {k} FIELDS 1 f v EX -1", True, since=R84),
    S("HSETEX {k} FIELDS 1 f v FXX FNX", True, since=R84),
    S("HSETEX {k} FIELDS 1 f v KEEPTTL PERSIST", True, since=R84),
    S("HSETEX {k} FIELDS 2 f v g", True, since=R84),
    # MSETEX (opt_msetex): Redis 8.4 and Valkey 9.1 parse it alike
    S("MSETEX 1 {k} v", False, since=R84_V91),
    S("MSETEX 2 {k} v {k2} w NX EX 10", False, since=R84_V91),
    S("MSETEX 0 {k} v", True, since=R84_V91), S("MSETEX 0", True, since=R84_V91),
    S("MSETEX -1 {k} v", True, since=R84_V91), S("MSETEX x {k} v", True, since=R84_V91),
    S("MSETEX 01 {k} v", True, since=R84_V91), S("MSETEX 2147483648 {k} v", True, since=R84_V91),
    S("MSETEX 2 {k} v", True, since=R84_V91), S("MSETEX 2 {k} v {k2}", True, since=R84_V91),
    S("MSETEX 1 {k} v {k2}", True, since=R84_V91), S("MSETEX 1 {k} v {k2} w", True, since=R84_V91),
    S("MSETEX 1 {k} v EX 0", True, since=R84_V91), S("MSETEX 1 {k} v EX -1", True, since=R84_V91),
    S("MSETEX 1 {k} v EX", True, since=R84_V91), S("MSETEX 1 {k} v EX x", True, since=R84_V91),
    S("MSETEX 1 {k} v PX 9223372036854775807", True, since=R84_V91),
    S("MSETEX 1 {k} v NX XX", True, since=R84_V91), S("MSETEX 1 {k} v XX NX", True, since=R84_V91),
    S("MSETEX 1 {k} v EX 10 PX 10", True, since=R84_V91),
    S("MSETEX 1 {k} v EX 10 EX 20", False, since=R84_V91),
    S("MSETEX 1 {k} v KEEPTTL EX 10", True, since=R84_V91),
    S("MSETEX 1 {k} v EX 10 KEEPTTL", True, since=R84_V91),
    S("MSETEX 1 {k} v NX NX", False, since=R84_V91),
    S("MSETEX 1 {k} v KEEPTTL KEEPTTL", False, since=R84_V91),
    S("MSETEX 1 {k} v GET", True, since=R84_V91), S("MSETEX 1 {k} v FOO", True, since=R84_V91),
    S("MSETEX 1 {k} v xx keepttl", False, since=R84_V91),
    S("MSETEX 1 {k} v EX 10 NX", False, since=R84_V91),
]


# ---------------------------------------------------------------------------
# The table's side: the command_eval tool
# ---------------------------------------------------------------------------

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(TOOLS, "..", "..", ".."))


def build_command_eval(lib, outdir):
    """Compile tools/command_eval.c against libttlguard_core.a (with the
    sanitizers when the library has them). Returns the binary's path."""
    out = os.path.join(outdir, "command_eval")
    libs = subprocess.run(["pkg-config", "--libs", "libuv", "hiredis", "inih"],
                          check=True, capture_output=True, text=True).stdout.split()
    with open(lib, "rb") as f:
        sanitize = ["-fsanitize=address,undefined"] if b"__asan_" in f.read() else []
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-I", os.path.join(REPO, "proxy")] +
                   sanitize + [os.path.join(TOOLS, "command_eval.c"), lib, "-o", out] +
                   libs + ["-lm"], check=True)
    return out


class TableAnswer:
    def __init__(self, line):
        f = dict(w.split("=", 1) for w in line.split()[:3])
        self.known = f["known"] == "1"
        self.row = f["row"] == "1"
        self.rc = None if f["rc"] == "-" else int(f["rc"])
        self.keys = {}      # argi -> (effect, unit, ttl_argi)
        for w in line.split()[3:]:
            argi, effect, unit, ttl_argi = w.split(":")
            self.keys[int(argi)] = (effect, unit, int(ttl_argi))


def table_answers(command_eval, argvs, server=None):
    """command_keys() for each argv (a list of bytes), in order, with the
    table as server (kind, version) has it (None: command_eval's default)."""
    text = "".join(" ".join(a.hex() or "-" for a in argv) + "\n" for argv in argvs)
    cmd = [command_eval] + (["--server", server_arg(server)] if server else [])
    out = subprocess.run(cmd, input=text, capture_output=True, text=True,
                         check=True, timeout=30).stdout
    lines = out.splitlines()
    assert len(lines) == len(argvs), out
    return [TableAnswer(line) for line in lines]


# ---------------------------------------------------------------------------
# The server's side
# ---------------------------------------------------------------------------

MISSING, NO_TTL, WITH_TTL = "missing", "created-no-ttl", "created-with-ttl"
KEPT, DROPPED, REPLACED, DELETED = "ttl-kept", "ttl-dropped", "ttl-replaced", "deleted"


def allowed_effects(a, b):
    """The effects consistent with outcome a of experiment (a) and b of (b)."""
    s = set()
    if a == MISSING and b in (KEPT, DELETED):
        s.add("none")
        s.add("carry")                  # where it goes: CARRY_CASES
    if a == NO_TTL and b == KEPT:
        s.add("create")
    if a in (NO_TTL, MISSING) and b == DROPPED:
        s.add("overwrite")              # SET ... XX never creates, but drops the TTL
    if a == MISSING and b == DROPPED:
        s.add("persist")
    if a in (MISSING, WITH_TTL) and b in (KEPT, REPLACED) and (a == WITH_TTL or b == REPLACED):
        s.add("sets-ttl")
    return s


def outcome_a(pttl):
    return MISSING if pttl == -2 else NO_TTL if pttl == -1 else WITH_TTL


def outcome_b(pttl):
    if pttl == -2:
        return DELETED
    if pttl == -1:
        return DROPPED
    return KEPT if TTL_MS - TOLERANCE_MS <= pttl <= TTL_MS else REPLACED


class Probe:
    """Runs the experiments on one redis-server or valkey-server (database
    DB). .server: what it is, ("valkey", (9, 1, 2))."""

    def __init__(self, port, host="127.0.0.1"):
        self.r = redis.Redis(host=host, port=port, db=DB, socket_timeout=30)
        self.r.ping()
        self.server = identify(self.r)
        # Where MOVE puts keys: emptied of the case's keys around each case.
        self.next_db = redis.Redis(host=host, port=port, db=DB + 1, socket_timeout=30)
        self.r.set(PREFIX + "dumped", "restored")
        self.values = {
            "dump": self.r.dump(PREFIX + "dumped"),
            "script_set": SCRIPT_SET.encode(),
            "script_get": SCRIPT_GET.encode(),
            "sha_set": self.r.script_load(SCRIPT_SET).encode(),
            "sha_get": self.r.script_load(SCRIPT_GET).encode(),
            "attr": b'{"size": 3}',
            "empty": b"",
        }
        try:
            # The digest of "abc", a "string" key's value (DIGEST: Redis 8.4).
            self.r.set(PREFIX + "digested", "abc")
            self.values["digest"] = self.r.execute_command("DIGEST", PREFIX + "digested")
        except redis.ResponseError:
            self.values["digest"] = b"0000000000000000"
        self.r.delete(PREFIX + "dumped", PREFIX + "digested")
        self.r.execute_command("FUNCTION LOAD REPLACE", LIBRARY)

    def close(self):
        self.r.execute_command("FUNCTION DELETE", "ttlg_probe")
        self.r.close()
        self.next_db.close()

    def argv(self, cmd):
        """A case's command with its values and key names filled in. The
        times are taken now, once: experiments (a) and (b) share them."""
        now = time.time()
        values = dict(self.values)
        values.update(ex=b"%d" % CASE_TTL, px=b"%d" % (CASE_TTL * 1000),
                      exat=b"%d" % (int(now) + CASE_TTL),
                      pxat=b"%d" % (int(now * 1000) + CASE_TTL * 1000))
        out = []
        for word in cmd.split(" "):
            if word.startswith("{") and word.endswith("}"):
                name = word[1:-1]
                out.append(values[name] if name in values else (PREFIX + name).encode())
            else:
                out.append(word.encode())
        return out

    @staticmethod
    def _setup(pipe, name, kind):
        for cmd in SETUP[kind]:
            pipe.execute_command(*[PREFIX + name if w == "{k}" else w for w in cmd])

    def observe(self, case, argv):
        """Experiments (a) and (b) for each key of the case: {key: (a, b, pttls,
        replies)}."""
        pipe = self.r.pipeline(transaction=False)
        names = [PREFIX + k for k in case.keys]
        self.next_db.delete(*names)
        for probed in case.keys:
            for experiment in "ab":
                pipe.delete(*names)
                for k, kind in case.keys.items():
                    if k == probed:
                        if experiment == "b":
                            self._setup(pipe, k, kind)
                            pipe.pexpire(PREFIX + k, TTL_MS)
                    elif k not in case.absent:
                        self._setup(pipe, k, kind)
                pipe.execute_command(*argv)
                pipe.pttl(PREFIX + probed)
        pipe.delete(*names)
        replies = pipe.execute(raise_on_error=False)
        self.next_db.delete(*names)

        # Walk the replies in the order the pipeline was built.
        out, i = {}, 0
        for probed in case.keys:
            seen = []
            for experiment in "ab":
                i += 1      # DEL
                for k, kind in case.keys.items():
                    if k == probed:
                        if experiment == "b":
                            i += len(SETUP[kind]) + 1
                    elif k not in case.absent:
                        i += len(SETUP[kind])
                seen.append((replies[i], replies[i + 1]))
                i += 2
            (ra, pa), (rb, pb) = seen
            out[probed] = (outcome_a(pa), outcome_b(pb), (pa, pb), (ra, rb))
        return out

    def carry(self, cmd, db):
        """The destination's TTL in ms after cmd, the source having 777 s."""
        src, dst = PREFIX + "source", PREFIX + "destination"
        other = self.r if db == DB else self.next_db
        self.r.delete(src, dst)
        other.delete(src, dst)
        self.r.set(src, "v", px=777000)
        self.r.execute_command(*self.argv(cmd))
        ttl = other.pttl(dst if "{destination}" in cmd else src)
        self.r.delete(src, dst)
        other.delete(src, dst)
        return ttl

    def refused(self, argv, kind=None):
        """True when the server answers argv with an error; the keys missing,
        or {k} set up as kind."""
        self.r.delete(PREFIX + "k", PREFIX + "k2", PREFIX + "k3")
        if kind is not None:
            self._setup(self.r, "k", kind)
        try:
            self.r.execute_command(*argv)
            refused = False
        except redis.ResponseError:
            refused = True
        self.r.delete(PREFIX + "k", PREFIX + "k2", PREFIX + "k3")
        return refused

    def getkeys(self, argv):
        """The key names redis finds in argv (redis-py decodes them)."""
        try:
            return set(self.r.execute_command("COMMAND GETKEYS", *argv))
        except redis.ResponseError:
            return set()


def expected_pttl(argv, unit, ttl_argi, now_ms):
    v = int(argv[ttl_argi])
    return {"sec": v * 1000, "ms": v, "unix-sec": v * 1000 - now_ms,
            "unix-ms": v - now_ms}[unit]


# ---------------------------------------------------------------------------
# The comparisons
# ---------------------------------------------------------------------------

class Result:
    def __init__(self, case, key, argi, a, b, allowed, table, problem, command):
        self.case, self.key, self.argi = case, key, argi
        self.a, self.b, self.allowed, self.table = a, b, allowed, table
        self.problem = problem
        self.command = command      # the row name: "set", "xgroup|create"

    def __str__(self):
        return "%-62s %-12s a=%-16s b=%-12s observed=%-24s table=%-9s %s" % (
            self.case.cmd, self.key, self.a, self.b, "|".join(sorted(self.allowed)),
            self.table, self.problem or "ok")


def row_name(argv):
    name = argv[0].decode().lower()
    if name in ("xgroup", "function", "cluster"):
        return name + "|" + argv[1].decode().lower()
    return name


def run_cases(probe, command_eval, cases=CASES, server=None, newer=False):
    """Every case the server has (server: (kind, version), default the
    probe's) and every key of it: a Result, .problem set when table and
    server disagree. newer: the server is newer than the table (`ttlguard
    commands` says so): a command without a row is derived from the server's
    key specs by the proxy, and one the table cannot judge (-2) is protected
    (rule option unknown = protect), so either is fine as long as the server
    itself names the key (COMMAND GETKEYS)."""
    server = server or probe.server
    cases = [c for c in cases if c.applies(server)]
    argvs = [probe.argv(c.cmd) for c in cases]
    answers = table_answers(command_eval, argvs, server)
    results = []
    for case, argv, ans in zip(cases, argvs, answers):
        now_ms = int(time.time() * 1000)
        observed = probe.observe(case, argv)
        server_keys = probe.getkeys(argv)
        for key, (a, b, pttls, replies) in observed.items():
            argi = argv.index((PREFIX + key).encode())
            effect, unit, ttl_argi = ans.keys.get(argi, ("none", None, -1))
            allowed = allowed_effects(a, b)
            problem = None
            if newer and (ans.rc is None or ans.rc == -2):
                effect = "derived" if ans.rc is None else "protected"
                if PREFIX + key not in server_keys:
                    problem = "%s, but COMMAND GETKEYS does not list it" % effect
            elif ans.rc is None:
                problem = "no row in the table"
            elif ans.rc < 0:
                problem = "table: command_keys() = %d" % ans.rc
            elif effect not in allowed:
                problem = "table says %s; replies %r" % (effect, replies)
            elif effect == "sets-ttl":
                want = expected_pttl(argv, unit, ttl_argi, now_ms)
                got = [p for p in pttls if p > 0 and not (TTL_MS - TOLERANCE_MS <= p <= TTL_MS)]
                if not got or abs(got[0] - want) > TOLERANCE_MS:
                    problem = "TTL from argv[%d] as %s is %d ms, the server set %s" % (
                        ttl_argi, unit, want, pttls)
            if problem is None and effect not in ("none", "derived", "protected") and \
                    PREFIX + key not in server_keys:
                problem = "COMMAND GETKEYS does not list it"
            results.append(Result(case, key, argi, a, b, allowed, effect, problem,
                                  row_name(argv)))
    return results


def run_carry(probe):
    """[(cmd, ttl_ms, problem)]: the destination must have the source's 777 s."""
    out = []
    for cmd, db in CARRY_CASES:
        ttl = probe.carry(cmd, db)
        ok = 777000 - TOLERANCE_MS <= ttl <= 777000
        out.append((cmd, ttl, None if ok else "destination TTL %d ms, not the source's" % ttl))
    return out


def syntax_cases(server):
    """The SYNTAX_CASES the server (kind, version) has, as Syntax objects."""
    cases = [c if isinstance(c, Syntax) else Syntax(*c) for c in SYNTAX_CASES]
    return [c for c in cases if c.applies(server)]


def run_syntax(probe, command_eval, server=None, newer=False):
    """[(cmd, refused_by_server, table_rc, problem)] for the cases the server
    has (server: (kind, version), default the probe's). newer: the server is
    newer than the table, which then answers -2 (not judged) for what it
    would refuse: only a -1 for what the server accepts is a problem."""
    server = server or probe.server
    cases = syntax_cases(server)
    argvs = [probe.argv(case.cmd) for case in cases]
    answers = table_answers(command_eval, argvs, server)
    out = []
    for case, argv, ans in zip(cases, argvs, answers):
        cmd, expect = case.cmd, case.refused
        refused = probe.refused(argv, case.kind)
        problem = None
        if refused != expect:
            problem = "the case expects the server to %s it" % ("refuse" if expect else "accept")
        elif newer:
            if not refused and ans.rc == -1:
                problem = "server accepts, command_keys() = -1 (passed unjudged)"
        elif refused != (ans.rc == -1):
            problem = "server %s, command_keys() = %s" % (
                "refuses" if refused else "accepts", ans.rc)
        out.append((cmd, refused, ans.rc, problem))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True,
                    help="redis-server or valkey-server port (loopback)")
    ap.add_argument("--server", type=parse_server, metavar="NAME:VERSION",
                    help="the server whose cases and table to run (redis:8.0.6, "
                    "valkey:9.1.2); default: the one on --port, from its INFO server")
    ap.add_argument("--eval", help="a built command_eval binary")
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "libttlguard_core.a"),
                    help="libttlguard_core.a to build command_eval with (default %(default)s)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every observation")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        command_eval = args.eval or build_command_eval(args.lib, tmp)
        probe = Probe(args.port)
        try:
            server = args.server or probe.server
            if server != probe.server:
                print("warning: the server on %d is %s; running %s's cases and table"
                      % (args.port, server_arg(probe.server), server_arg(server)))
            print("server %s" % server_arg(server))
            results = run_cases(probe, command_eval, server=server)
            carry = run_carry(probe)
            syntax = run_syntax(probe, command_eval, server=server)
        finally:
            probe.close()

    bad = 0
    for r in results:
        if args.verbose or r.problem:
            print(r)
        bad += r.problem is not None
    for cmd, ttl, problem in carry:
        if args.verbose or problem:
            print("carry  %-40s destination pttl=%d %s" % (cmd, ttl, problem or "ok"))
        bad += problem is not None
    for cmd, refused, rc, problem in syntax:
        if args.verbose or problem:
            print("syntax %-60s server=%s table=%s %s" % (
                cmd.replace("\0", "\\0"), "refuses" if refused else "accepts", rc,
                problem or "ok"))
        bad += problem is not None
    print("%d key experiments, %d carry, %d syntax cases: %d disagreements"
          % (len(results), len(carry), len(syntax), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
