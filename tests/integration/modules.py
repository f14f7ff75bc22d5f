"""
Redis modules for the integration tests: Redis 7.0.15's own test modules
(tests/modules/*.c in its source, Debian's `redis` source package) and
ttlgmod, a small module of this suite's own (its source is below) whose
commands declare the key spec shapes the 7.0.15 test modules lack: write
commands with an "unknown" begin_search or find_keys, an INCOMPLETE spec,
five, eight (as many as ttlguard keeps per row) and nine key specs, an OW
spec, an RM/DELETE spec, keys only found through the getkeys-api, a container
with a write subcommand, read commands with nine specs and with an "unknown"
spec, and replies that differ between RESP2 and RESP3 (a double, a map with a
bool, a null).

The source tree comes from `bash tests/debsrc.sh bookworm-security redis`
(cached in /var/cache/ttlguard; tests/redis-suite/run.sh fetches it the same
way). Modules are compiled with the system cc: -fPIC -shared -I<src>/src.

  source_tree()          -> (path of redis-7.0.15, None), or (None, why not)
  build(src, names, outdir) -> {name: path of name.so}
"""

import os
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEBSRC = os.path.join(REPO, "tests", "debsrc.sh")

HOW_TO_GET = ("the Redis 7.0.15 source tree (Debian's redis source package) is needed to build "
              "its test modules: run `bash tests/debsrc.sh bookworm-security redis` as root "
              "(it caches the tree in /var/cache/ttlguard; tests/redis-suite/run.sh uses the "
              "same helper)")


def source_tree():
    """(path, None) of the unpacked redis source, or (None, why not). The
    test command (tests/run.sh) expects it: a failed fetch is tried once
    more before giving up (the why says both)."""
    env_dir = os.environ.get("TTLG_REDIS_SRC")
    if env_dir:
        if os.path.isfile(os.path.join(env_dir, "src", "redismodule.h")):
            return env_dir, None
        return None, "TTLG_REDIS_SRC=%s has no src/redismodule.h; %s" % (env_dir, HOW_TO_GET)
    whys = []
    for _ in range(2):
        path, why = _debsrc()
        if path is not None:
            return path, None
        whys.append(why)
    return None, "%s: tests/debsrc.sh failed twice: %s" % (HOW_TO_GET, " / then: ".join(whys))


def _debsrc():
    try:
        p = subprocess.run(["bash", DEBSRC, "bookworm-security", "redis"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    out = p.stdout.decode(errors="replace").strip().splitlines()
    path = out[-1] if out else ""
    if p.returncode != 0 or not os.path.isfile(os.path.join(path, "src", "redismodule.h")):
        return None, "exit %d: %s" % (p.returncode,
                                      p.stderr.decode(errors="replace").strip()[-500:])
    return path, None


def build(src, names, outdir):
    """Compile each module (a 7.0.15 test module name, or "ttlgmod") into
    outdir; {name: .so path}. Raises RuntimeError with the compiler's output."""
    os.makedirs(outdir, exist_ok=True)
    out = {}
    for name in names:
        if name == "ttlgmod":
            c_file = os.path.join(outdir, "ttlgmod.c")
            with open(c_file, "w") as f:
                f.write(TTLGMOD_C)
        else:
            c_file = os.path.join(src, "tests", "modules", name + ".c")
        so = os.path.join(outdir, name + ".so")
        cmd = ["cc", "-std=gnu99", "-O1", "-g", "-W", "-Wall", "-Wno-missing-field-initializers",
               "-Wno-unused-parameter", "-fno-common", "-fPIC", "-shared",
               "-I" + os.path.join(src, "src"), "-o", so, c_file]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300)
        if p.returncode != 0:
            raise RuntimeError("building %s failed:\n%s\n%s"
                               % (name, " ".join(cmd), p.stdout.decode(errors="replace")))
        out[name] = so
    return out


TTLGMOD_C = r'''
/* ttlgmod: key spec shapes for ttlguard's tests (tests/integration/modules.py). */
#include <stdlib.h>
#include <string.h>
#include "redismodule.h"

#define RO  REDISMODULE_CMD_KEY_RO
#define RW  REDISMODULE_CMD_KEY_RW
#define OW  REDISMODULE_CMD_KEY_OW
#define RM  REDISMODULE_CMD_KEY_RM
#define ACCESS REDISMODULE_CMD_KEY_ACCESS
#define UPDATE REDISMODULE_CMD_KEY_UPDATE
#define INSERT REDISMODULE_CMD_KEY_INSERT
#define DELETE REDISMODULE_CMD_KEY_DELETE
#define INCOMPLETE REDISMODULE_CMD_KEY_INCOMPLETE

/* Pass an error reply on; 1 when it was one. */
static int passed_error(RedisModuleCtx *ctx, RedisModuleCallReply *r)
{
    if (r == NULL)
        return RedisModule_ReplyWithError(ctx, "ERR call failed"), 1;
    if (RedisModule_CallReplyType(r) == REDISMODULE_REPLY_ERROR)
        return RedisModule_ReplyWithCallReply(ctx, r), 1;
    return 0;
}

/* ttlgmod.incrbyfloat key incr -> the new value as a double (RESP3 ",") */
static int cmd_incrbyfloat(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 3)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "INCRBYFLOAT", "ss", argv[1], argv[2]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    size_t len;
    const char *p = RedisModule_CallReplyStringPtr(r, &len);
    char buf[64];
    if (len >= sizeof buf)
        len = sizeof buf - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return RedisModule_ReplyWithDouble(ctx, strtod(buf, NULL));
}

/* ttlgmod.hsetinfo key field value -> {"added": n, "new": bool} (RESP3 map, bool) */
static int cmd_hsetinfo(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 4)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "HSET", "sss", argv[1], argv[2], argv[3]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    long long added = RedisModule_CallReplyInteger(r);
    RedisModule_ReplyWithMap(ctx, 2);
    RedisModule_ReplyWithSimpleString(ctx, "added");
    RedisModule_ReplyWithLongLong(ctx, added);
    RedisModule_ReplyWithSimpleString(ctx, "new");
    RedisModule_ReplyWithBool(ctx, added > 0);
    return REDISMODULE_OK;
}

/* ttlgmod.copyto src dst: SET dst (GET src), dropping dst's TTL (an OW spec);
 * null (RESP3 "_") when src is missing */
static int cmd_copyto(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 3)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "GET", "s", argv[1]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    if (RedisModule_CallReplyType(r) == REDISMODULE_REPLY_NULL)
        return RedisModule_ReplyWithNull(ctx);
    size_t len;
    const char *p = RedisModule_CallReplyStringPtr(r, &len);
    r = RedisModule_Call(ctx, "SET", "sb", argv[2], p, len);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ttlgmod.del key (an RM|DELETE spec) */
static int cmd_del(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 2)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "DEL", "s", argv[1]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    return RedisModule_ReplyWithLongLong(ctx, RedisModule_CallReplyInteger(r));
}

/* ttlgmod.bsunknown / fkunknown / incomplete / getkeys key value: SET key value */
static int cmd_setone(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (RedisModule_IsKeysPositionRequest(ctx)) {
        if (argc >= 2)
            RedisModule_KeyAtPos(ctx, 1);
        return REDISMODULE_OK;
    }
    if (argc != 3)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "SET", "ss", argv[1], argv[2]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ttlgmod.fivespecs k1 .. k5, eightspecs k1 .. k8, ninespecs k1 .. k9 (one
 * RW|UPDATE spec per key): SET each to 1 */
static int set_each(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int n)
{
    RedisModule_AutoMemory(ctx);
    if (argc != n + 1)
        return RedisModule_WrongArity(ctx);
    for (int i = 1; i <= n; i++) {
        RedisModuleCallReply *r = RedisModule_Call(ctx, "SET", "sc", argv[i], "1");
        if (passed_error(ctx, r))
            return REDISMODULE_OK;
    }
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

static int cmd_fivespecs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return set_each(ctx, argv, argc, 5);
}

static int cmd_eightspecs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return set_each(ctx, argv, argc, 8);
}

static int cmd_ninespecs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return set_each(ctx, argv, argc, 9);
}

/* ttlgmod.readnine k1 .. k9 (nine RO specs), ttlgmod.readunknown key (an
 * "unknown" RO spec): read commands, no write flag -> the number of the keys
 * that exist */
static int cmd_exists(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "EXISTS", "v", argv + 1, (size_t)(argc - 1));
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    return RedisModule_ReplyWithLongLong(ctx, RedisModule_CallReplyInteger(r));
}

/* ttlgmod.replace key number: SET key number (dropping its TTL: an OW spec)
 * -> {"replaced": bool, "value": double} (RESP3 map, bool, double);
 * ttlgmod.replacens is the same, flagged deny-script (noscript) */
static int cmd_replace(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 3)
        return RedisModule_WrongArity(ctx);
    double d;
    if (RedisModule_StringToDouble(argv[2], &d) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR value is not a valid float");
    RedisModuleCallReply *r = RedisModule_Call(ctx, "EXISTS", "s", argv[1]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    long long existed = RedisModule_CallReplyInteger(r);
    r = RedisModule_Call(ctx, "SET", "ss", argv[1], argv[2]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    RedisModule_ReplyWithMap(ctx, 2);
    RedisModule_ReplyWithSimpleString(ctx, "replaced");
    RedisModule_ReplyWithBool(ctx, existed > 0);
    RedisModule_ReplyWithSimpleString(ctx, "value");
    RedisModule_ReplyWithDouble(ctx, d);
    return REDISMODULE_OK;
}

/* ttlgmod.box set key value | ttlgmod.box get key */
static int cmd_box_set(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 4)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "SET", "ss", argv[2], argv[3]);
    if (passed_error(ctx, r))
        return REDISMODULE_OK;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

static int cmd_box_get(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    RedisModule_AutoMemory(ctx);
    if (argc != 3)
        return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *r = RedisModule_Call(ctx, "GET", "s", argv[2]);
    return RedisModule_ReplyWithCallReply(ctx, r);
}

static int info(RedisModuleCtx *ctx, const char *name, RedisModuleCommandKeySpec *specs)
{
    RedisModuleCommand *c = RedisModule_GetCommand(ctx, name);
    RedisModuleCommandInfo ci = {
        .version = REDISMODULE_COMMAND_INFO_VERSION,
        .key_specs = specs,
    };
    if (c == NULL || RedisModule_SetCommandInfo(c, &ci) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "SetCommandInfo %s failed", name);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}

#define INDEX(at) .begin_search_type = REDISMODULE_KSPEC_BS_INDEX, .bs.index.pos = (at)
#define ONE .find_keys_type = REDISMODULE_KSPEC_FK_RANGE, .fk.range = {0, 1, 0}
#define SPEC(fl, at) { .flags = (fl), INDEX(at), ONE }

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (RedisModule_Init(ctx, "ttlgmod", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;

    /* Legacy (first, last, step) triples: Redis makes one RW|ACCESS|UPDATE spec. */
    if (RedisModule_CreateCommand(ctx, "ttlgmod.incrbyfloat", cmd_incrbyfloat, "write deny-oom",
                                  1, 1, 1) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "ttlgmod.hsetinfo", cmd_hsetinfo, "write deny-oom",
                                  1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;

    /* Explicit key specs. */
    const char *plain[] = { "ttlgmod.copyto", "ttlgmod.del", "ttlgmod.bsunknown",
                            "ttlgmod.fkunknown", "ttlgmod.incomplete", "ttlgmod.fivespecs",
                            "ttlgmod.replace", "ttlgmod.replacens" };
    RedisModuleCmdFunc fn[] = { cmd_copyto, cmd_del, cmd_setone, cmd_setone, cmd_setone,
                                cmd_fivespecs, cmd_replace, cmd_replace };
    for (int i = 0; i < 8; i++) {
        if (RedisModule_CreateCommand(ctx, plain[i], fn[i], i == 7 ? "write deny-script" : "write",
                                      0, 0, 0) == REDISMODULE_ERR)
            return REDISMODULE_ERR;
    }
    if (info(ctx, "ttlgmod.copyto", (RedisModuleCommandKeySpec[]){
            { .flags = RO | ACCESS, INDEX(1), ONE },
            { .flags = OW | UPDATE, INDEX(2), ONE },
            { 0 } }) ||
        info(ctx, "ttlgmod.replace", (RedisModuleCommandKeySpec[]){
            { .flags = OW | UPDATE, INDEX(1), ONE },
            { 0 } }) ||
        info(ctx, "ttlgmod.replacens", (RedisModuleCommandKeySpec[]){
            { .flags = OW | UPDATE, INDEX(1), ONE },
            { 0 } }) ||
        info(ctx, "ttlgmod.del", (RedisModuleCommandKeySpec[]){
            { .flags = RM | DELETE, INDEX(1), ONE },
            { 0 } }) ||
        info(ctx, "ttlgmod.bsunknown", (RedisModuleCommandKeySpec[]){
            { .flags = RW | UPDATE, .begin_search_type = REDISMODULE_KSPEC_BS_UNKNOWN,
              .find_keys_type = REDISMODULE_KSPEC_FK_UNKNOWN },
            { 0 } }) ||
        info(ctx, "ttlgmod.fkunknown", (RedisModuleCommandKeySpec[]){
            { .flags = RW | UPDATE, INDEX(1), .find_keys_type = REDISMODULE_KSPEC_FK_UNKNOWN },
            { 0 } }) ||
        info(ctx, "ttlgmod.incomplete", (RedisModuleCommandKeySpec[]){
            { .flags = RW | UPDATE | INCOMPLETE, INDEX(1), ONE },
            { 0 } }) ||
        info(ctx, "ttlgmod.fivespecs", (RedisModuleCommandKeySpec[]){
            { .flags = RW | UPDATE, INDEX(1), ONE },
            { .flags = RW | UPDATE, INDEX(2), ONE },
            { .flags = RW | UPDATE, INDEX(3), ONE },
            { .flags = RW | UPDATE, INDEX(4), ONE },
            { .flags = RW | UPDATE, INDEX(5), ONE },
            { 0 } }))
        return REDISMODULE_ERR;

    /* As many key specs as ttlguard keeps per row (8), and one more. */
    if (RedisModule_CreateCommand(ctx, "ttlgmod.eightspecs", cmd_eightspecs, "write",
                                  0, 0, 0) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "ttlgmod.ninespecs", cmd_ninespecs, "write",
                                  0, 0, 0) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "ttlgmod.readnine", cmd_exists, "readonly",
                                  0, 0, 0) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "ttlgmod.readunknown", cmd_exists, "readonly",
                                  0, 0, 0) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (info(ctx, "ttlgmod.eightspecs", (RedisModuleCommandKeySpec[]){
            SPEC(RW | UPDATE, 1), SPEC(RW | UPDATE, 2), SPEC(RW | UPDATE, 3),
            SPEC(RW | UPDATE, 4), SPEC(RW | UPDATE, 5), SPEC(RW | UPDATE, 6),
            SPEC(RW | UPDATE, 7), SPEC(RW | UPDATE, 8),
            { 0 } }) ||
        info(ctx, "ttlgmod.ninespecs", (RedisModuleCommandKeySpec[]){
            SPEC(RW | UPDATE, 1), SPEC(RW | UPDATE, 2), SPEC(RW | UPDATE, 3),
            SPEC(RW | UPDATE, 4), SPEC(RW | UPDATE, 5), SPEC(RW | UPDATE, 6),
            SPEC(RW | UPDATE, 7), SPEC(RW | UPDATE, 8), SPEC(RW | UPDATE, 9),
            { 0 } }) ||
        info(ctx, "ttlgmod.readnine", (RedisModuleCommandKeySpec[]){
            SPEC(RO | ACCESS, 1), SPEC(RO | ACCESS, 2), SPEC(RO | ACCESS, 3),
            SPEC(RO | ACCESS, 4), SPEC(RO | ACCESS, 5), SPEC(RO | ACCESS, 6),
            SPEC(RO | ACCESS, 7), SPEC(RO | ACCESS, 8), SPEC(RO | ACCESS, 9),
            { 0 } }) ||
        info(ctx, "ttlgmod.readunknown", (RedisModuleCommandKeySpec[]){
            { .flags = RO | ACCESS, .begin_search_type = REDISMODULE_KSPEC_BS_UNKNOWN,
              .find_keys_type = REDISMODULE_KSPEC_FK_UNKNOWN },
            { 0 } }))
        return REDISMODULE_ERR;

    /* Keys known only to the module's getkeys callback: no key specs at all. */
    if (RedisModule_CreateCommand(ctx, "ttlgmod.getkeys", cmd_setone, "write getkeys-api",
                                  0, 0, 0) == REDISMODULE_ERR)
        return REDISMODULE_ERR;

    /* A container with a write subcommand and a read one. */
    if (RedisModule_CreateCommand(ctx, "ttlgmod.box", NULL, "", 0, 0, 0) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    RedisModuleCommand *box = RedisModule_GetCommand(ctx, "ttlgmod.box");
    if (RedisModule_CreateSubcommand(box, "set", cmd_box_set, "write", 0, 0, 0) ||
        RedisModule_CreateSubcommand(box, "get", cmd_box_get, "", 0, 0, 0))
        return REDISMODULE_ERR;
    if (info(ctx, "ttlgmod.box|set", (RedisModuleCommandKeySpec[]){
            { .flags = RW | INSERT, INDEX(2), ONE },
            { 0 } }) ||
        info(ctx, "ttlgmod.box|get", (RedisModuleCommandKeySpec[]){
            { .flags = RO | ACCESS, INDEX(2), ONE },
            { 0 } }))
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
'''
