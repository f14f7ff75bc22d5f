/*
 * Unit tests for the per-server command sets: server identities, which rows
 * and names each server has, the arguments only some servers accept, the
 * FT_NEWER rule, and rows derived from a server's own key specs. What each
 * case expects was checked against the servers themselves (redis-server
 * 7.0.15, 8.0.6 and 8.6.3, valkey-server 8.1.1 and 9.1.2: tests/integration/
 * test_command_table.py runs the same kinds of argv against each), except
 * the rows of later releases taken from their documentation (CMD_DOCUMENTED).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#define MAX_WORDS 32

static struct command_set *set_for(const char *server)
{
    struct server_id id;

    cr_assert_eq(server_id_parse(server, &id), 0, "%s", server);
    return command_set_new(&id);
}

/* command_keys() of a space-separated command on a set; keys in out. */
static int keys_on(struct command_set *set, const char *text, struct key_ref *out)
{
    char buf[512];
    struct slice argv[MAX_WORDS];
    int argc = 0;

    cr_assert_lt(strlen(text), sizeof buf);
    strcpy(buf, text);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w != NULL;
         w = strtok_r(NULL, " ", &save)) {
        argv[argc].p = w;
        argv[argc].len = strlen(w);
        argc++;
    }
    const struct cmd_info *ci = command_resolve(set, argv[0].p, argv[0].len);
    cr_assert(ci != NULL && ci->row != NULL, "%s: no row", text);
    return command_keys(ci, argc, argv, out);
}

static void expect(struct command_set *set, const char *text, int n, int argi,
                   enum ttl_effect effect)
{
    struct key_ref k[MAX_WORDS];
    int got = keys_on(set, text, k);

    cr_assert_eq(got, n, "%s: command_keys() = %d, want %d", text, got, n);
    if (n > 0) {
        cr_assert_eq(k[0].argi, argi, "%s: key at %d, want %d", text, k[0].argi, argi);
        cr_assert_eq(k[0].effect, effect, "%s: %s, want %s", text, ttl_effect_name(k[0].effect),
                     ttl_effect_name(effect));
    }
}

static int known(struct command_set *set, const char *name)
{
    return command_resolve(set, name, strlen(name)) != NULL;
}

Test(server_id, parse_and_format)
{
    struct server_id id;
    char buf[48];

    cr_assert_eq(server_id_parse("valkey:9.1.2", &id), 0);
    cr_assert_eq(id.kind, SRV_VALKEY);
    cr_assert_eq(id.version, SRV_VERSION(9, 1, 2));
    server_id_format(&id, buf, sizeof buf);
    cr_assert_str_eq(buf, "valkey 9.1.2");
    cr_assert_eq(server_id_parse("redis:8", &id), 0);
    cr_assert_eq(id.version, SRV_VERSION(8, 0, 0));
    cr_assert_eq(id.kind, SRV_REDIS);
    const char *bad[] = { "redis", "redis:", "keydb:6.3", "redis:8.x", "redis:8.0.6.1",
                          "valkey:100.0", "redis:8.0." };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(server_id_parse(bad[i], &id), -1, "%s", bad[i]);
}

Test(sets, names_by_version)
{
    struct command_set *r70 = set_for("redis:7.0.15"), *r74 = set_for("redis:7.4.0"),
                       *r80 = set_for("redis:8.0.6"), *v81 = set_for("valkey:8.1.1"),
                       *v91 = set_for("valkey:9.1.2");

    cr_assert(!known(r70, "hexpire") && known(r74, "hexpire") && known(r80, "HEXPIRE"));
    cr_assert(!known(r74, "hsetex") && known(r80, "hsetex"));
    cr_assert(known(r80, "VADD") && !known(v91, "vadd"));
    cr_assert(!known(r70, "waitaof") && known(v81, "waitaof"));
    cr_assert(!known(v81, "hsetex") && known(v91, "hsetex") && known(v91, "hgetdel"));
    cr_assert(known(v91, "msetex") && !known(r80, "msetex") && !known(v81, "msetex"));
    cr_assert(known(v91, "delifeq") && !known(r80, "delifeq"));
    cr_assert(known(v81, "commandlog") && !known(r80, "commandlog"));
    /* WAIT is a read to 7.0 (noscript), blocking since 7.2: a row, and pinned. */
    cr_assert_null(command_resolve(r70, "wait", 4)->row);
    cr_assert_not_null(command_resolve(r80, "wait", 4)->row);
    cr_assert(command_resolve(r80, "waitaof", 7)->sflags & CS_PIN);
    command_set_free(r70);
    command_set_free(r74);
    command_set_free(r80);
    command_set_free(v81);
    command_set_free(v91);
}

Test(sets, names_of_8_2_to_8_6)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *r82 = set_for("redis:8.2.0"),
                       *r86 = set_for("redis:8.6.0"), *r863 = set_for("redis:8.6.3"),
                       *v91 = set_for("valkey:9.1.2");

    cr_assert(known(r82, "xdelex") && !known(r80, "xackdel") && !known(r82, "delex"));
    cr_assert(known(r86, "msetex") && known(r86, "hotkeys") && !known(r86, "xidmprecord"));
    cr_assert(known(r863, "xidmprecord") && !known(r863, "increx") && !known(v91, "delex"));
    cr_assert_null(command_resolve(r863, "digest", 6)->row);    /* reads */
    cr_assert_null(command_resolve(r863, "vrange", 6)->row);
    command_set_free(r80);
    command_set_free(r82);
    command_set_free(r86);
    command_set_free(r863);
    command_set_free(v91);
}

Test(set, ifeq_on_valkey_only)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *v81 = set_for("valkey:8.1.1");

    expect(r80, "SET k v IFEQ old", -1, 0, TE_NONE);
    expect(v81, "SET k v IFEQ old", 1, 1, TE_OVERWRITE);        /* drops the TTL */
    expect(v81, "SET k v IFEQ old GET", 1, 1, TE_OVERWRITE);
    expect(v81, "SET k v IFEQ old KEEPTTL", 0, 0, TE_NONE);      /* never creates */
    expect(v81, "SET k v IFEQ old EX 10", 1, 1, TE_SETS_TTL);
    expect(v81, "SET k v NX IFEQ old", -1, 0, TE_NONE);
    expect(v81, "SET k v IFEQ old XX", -1, 0, TE_NONE);
    expect(v81, "SET k v IFEQ a IFEQ b", -1, 0, TE_NONE);
    expect(v81, "SET k v IFEQ", -1, 0, TE_NONE);
    command_set_free(r80);
    command_set_free(v81);
}

Test(hsetex, key_created_unless_xx_or_fxx)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *v91 = set_for("valkey:9.1.2");

    expect(r80, "HSETEX h FIELDS 1 f v", 1, 1, TE_CREATE);
    expect(r80, "HSETEX h EX 100 FIELDS 1 f v", 1, 1, TE_CREATE);   /* a field TTL */
    expect(r80, "HSETEX h FNX KEEPTTL FIELDS 2 f v g w", 1, 1, TE_CREATE);
    expect(r80, "HSETEX h FXX FIELDS 1 f v", 0, 0, TE_NONE);
    expect(r80, "HSETEX h XX FIELDS 1 f v", -1, 0, TE_NONE);        /* Valkey's option */
    expect(v91, "HSETEX h XX FIELDS 1 f v", 0, 0, TE_NONE);
    expect(v91, "HSETEX h NX PX 10 FIELDS 1 f v", 1, 1, TE_CREATE);
    const char *bad[] = { "HSETEX h FIELDS 2 f v", "HSETEX h FIELDS 0", "HSETEX h f v",
                          "HSETEX h EX 1 PX 1 FIELDS 1 f v", "HSETEX h FNX FXX FIELDS 1 f v",
                          "HSETEX h KEEPTTL EX 1 FIELDS 1 f v", "HSETEX h FIELDS x f v" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect(v91, bad[i], -1, 0, TE_NONE);
    /* Field TTL commands leave the key's TTL alone. */
    expect(r80, "HEXPIRE h 10 FIELDS 1 f", 0, 0, TE_NONE);
    expect(r80, "HPERSIST h FIELDS 1 f", 0, 0, TE_NONE);
    expect(r80, "HGETEX h PERSIST FIELDS 1 f", 0, 0, TE_NONE);
    command_set_free(r80);
    command_set_free(v91);
}

Test(msetex, keys_and_expiry)
{
    struct command_set *v91 = set_for("valkey:9.1.2"), *r84 = set_for("redis:8.4.0");
    struct key_ref k[MAX_WORDS];

    /* Redis 8.4 parses it as Valkey 9.1 does. */
    expect(r84, "MSETEX 1 a 1 XX KEEPTTL", 0, 0, TE_NONE);
    expect(r84, "MSETEX 1 a 1 EX 10 NX", 1, 2, TE_SETS_TTL);
    expect(r84, "MSETEX 1 a 1 GET", -1, 0, TE_NONE);
    command_set_free(r84);

    cr_assert_eq(keys_on(v91, "MSETEX 2 a 1 b 2", k), 2);
    cr_assert(k[0].argi == 2 && k[1].argi == 4 && k[0].effect == TE_OVERWRITE);
    cr_assert_eq(keys_on(v91, "MSETEX 2 a 1 b 2 PX 5000", k), 2);
    cr_assert(k[1].effect == TE_SETS_TTL && k[1].ttl_argi == 7 && k[1].ttl_unit == TTL_MS);
    expect(v91, "MSETEX 1 a 1 KEEPTTL", 1, 2, TE_CREATE);
    expect(v91, "MSETEX 1 a 1 NX", 1, 2, TE_CREATE);
    expect(v91, "MSETEX 1 a 1 XX", 1, 2, TE_OVERWRITE);
    expect(v91, "MSETEX 1 a 1 XX KEEPTTL", 0, 0, TE_NONE);
    const char *bad[] = { "MSETEX 0 a 1", "MSETEX 2 a 1", "MSETEX 1 a 1 NX XX",
                          "MSETEX 1 a 1 EX 0", "MSETEX 1 a 1 KEEPTTL EX 5", "MSETEX x a 1",
                          "MSETEX 1 a 1 FOO" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect(v91, bad[i], -1, 0, TE_NONE);
    command_set_free(v91);
}

Test(newer, refused_arguments_are_not_judged)
{
    struct command_set *r86 = set_for("redis:8.6.3"), *r88 = set_for("redis:8.8.0");
    struct command_set *v10 = set_for("valkey:10.0.0");

    /* An option the table does not know: Redis refuses it up to 8.6, a later
     * release may not. */
    expect(r86, "SET k v IFXX x", -1, 0, TE_NONE);
    expect(r88, "SET k v IFXX x", -2, 0, TE_NONE);
    expect(v10, "XGROUP NEWSUB k", -2, 0, TE_NONE);
    expect(r88, "SET k v", 1, 1, TE_OVERWRITE);
    cr_assert(!(command_set_features(r86) & FT_NEWER) && (command_set_features(r88) & FT_NEWER));
    command_set_free(r86);
    command_set_free(r88);
    command_set_free(v10);
}

Test(set, compare_conditions_by_server)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *r84 = set_for("redis:8.4.0"),
                       *v81 = set_for("valkey:8.1.1");

    expect(r80, "SET k v IFNE x", -1, 0, TE_NONE);
    expect(v81, "SET k v IFNE x", -1, 0, TE_NONE);
    expect(r84, "SET k v IFNE x", 1, 1, TE_OVERWRITE);       /* creates, drops the TTL */
    expect(r84, "SET k v IFNE x KEEPTTL", 1, 1, TE_CREATE);
    expect(r84, "SET k v IFDNE 0123456789abcdef NX", 1, 1, TE_CREATE);
    expect(r84, "SET k v IFDEQ 0123456789abcdef KEEPTTL", 0, 0, TE_NONE);
    expect(r84, "SET k v IFEQ x NX", 0, 0, TE_NONE);            /* never writes */
    expect(r84, "SET k v IFEQ x NX EX 10", 0, 0, TE_NONE);
    expect(r84, "SET k v IFEQ x NX EX 0", -1, 0, TE_NONE);      /* the expiry is checked first */
    expect(r84, "SET k v IFEQ x XX", 1, 1, TE_OVERWRITE);
    expect(v81, "SET k v IFEQ x XX", -1, 0, TE_NONE);
    expect(r84, "SET k v IFEQ a IFEQ b", 1, 1, TE_OVERWRITE);
    expect(v81, "SET k v IFEQ a IFEQ b", -1, 0, TE_NONE);
    expect(r84, "SET k v IFEQ a IFNE b", -1, 0, TE_NONE);
    expect(r84, "SET k v XX IFNE b", -1, 0, TE_NONE);
    expect(r84, "GETEX k IFEQ a", -1, 0, TE_NONE);
    command_set_free(r80);
    command_set_free(r84);
    command_set_free(v81);
}

Test(bitop, operators_of_8_2)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *r82 = set_for("redis:8.2.0");

    expect(r80, "BITOP ONE d s", -1, 0, TE_NONE);
    expect(r82, "BITOP ONE d s", 1, 2, TE_OVERWRITE);
    expect(r82, "BITOP DIFF d s", -1, 0, TE_NONE);
    expect(r82, "BITOP andor d s t", 1, 2, TE_OVERWRITE);
    command_set_free(r80);
    command_set_free(r82);
}

Test(xadd, references_and_idmp)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *r82 = set_for("redis:8.2.0"),
                       *r86 = set_for("redis:8.6.0");

    expect(r80, "XADD s KEEPREF * f v", -1, 0, TE_NONE);
    expect(r82, "XADD s KEEPREF * f v", 1, 1, TE_CREATE);
    expect(r82, "XADD s ACKED MAXLEN ~ 5 LIMIT 2 NOMKSTREAM * f v", 0, 0, TE_NONE);
    expect(r82, "XADD s ACKED DELREF * f v", -1, 0, TE_NONE);
    expect(r82, "XADD s IDMP p i * f v", -1, 0, TE_NONE);
    expect(r86, "XADD s IDMP p i * f v", 1, 1, TE_CREATE);
    expect(r86, "XADD s NOMKSTREAM IDMPAUTO p * f v", 0, 0, TE_NONE);
    expect(r86, "XADD s IDMP p i 1-1 f v", -1, 0, TE_NONE);     /* only with "*" */
    expect(r86, "XADD s IDMPAUTO p IDMPAUTO q * f v", -1, 0, TE_NONE);
    command_set_free(r80);
    command_set_free(r82);
    command_set_free(r86);
}

Test(hsetex, options_after_fields)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *r84 = set_for("redis:8.4.0"),
                       *r862 = set_for("redis:8.6.2"), *v91 = set_for("valkey:9.1.2");

    expect(r80, "HSETEX h FIELDS 1 f v EX 10", -1, 0, TE_NONE);
    expect(v91, "HSETEX h FIELDS 1 f v EX 10", -1, 0, TE_NONE);
    expect(r84, "HSETEX h FIELDS 1 f v EX 10", 1, 1, TE_CREATE);
    expect(r84, "HSETEX h FIELDS 1 f v FXX", 0, 0, TE_NONE);
    expect(r84, "HSETEX h FIELDS 1 f v FIELDS 1 g w", 1, 1, TE_CREATE);
    expect(r862, "HSETEX h FIELDS 1 f v FIELDS 1 g w", -1, 0, TE_NONE);
    expect(r862, "HSETEX h FIELDS 2 f v", -1, 0, TE_NONE);
    expect(r862, "HSETEX h FIELDS 1 f v g", -1, 0, TE_NONE);
    expect(r862, "HSETEX h EX 1 FIELDS 1 f v EX 1", -1, 0, TE_NONE);
    command_set_free(r80);
    command_set_free(r84);
    command_set_free(r862);
    command_set_free(v91);
}

Test(vector_sets, arity_since_8_4)
{
    struct command_set *r80 = set_for("redis:8.0.6"), *r86 = set_for("redis:8.6.3");

    expect(r80, "VADD k x", 1, 1, TE_CREATE);                  /* arity -1: the server's */
    expect(r86, "VADD k x", -1, 0, TE_NONE);
    expect(r86, "VREM k a", 0, 0, TE_NONE);
    expect(r86, "VSETATTR k a", -1, 0, TE_NONE);
    command_set_free(r80);
    command_set_free(r86);
}

static char *printed(struct command_set *set)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_not_null(f);
    commands_print(f, set);
    fclose(f);
    return text;
}

/* One line per row, sorted by name, for every server (rows of one name for
 * different servers, as DELEX's, must not both be printed). */
Test(print, sorted_for_every_server)
{
    const char *servers[] = { "redis:7.0.15", "redis:7.4.0", "redis:8.0.6", "redis:8.2.0",
                              "redis:8.4.0", "redis:8.6.3", "redis:8.12.0", "valkey:8.1.1",
                              "valkey:9.0.0", "valkey:9.1.2", "valkey:9.2.0" };

    for (size_t i = 0; i < sizeof servers / sizeof servers[0]; i++) {
        struct command_set *set = set_for(servers[i]);
        char *text = printed(set), prev[64] = "";

        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            char name[64];

            cr_assert_eq(sscanf(line, "%63s", name), 1);
            cr_assert_gt(strcmp(name, prev), 0, "%s: '%s' after '%s'", servers[i], name, prev);
            strcpy(prev, name);
        }
        free(text);
        command_set_free(set);
    }
}

/* Rows taken from the documentation belong to unverified releases only. */
Test(documented, only_on_newer_servers)
{
    const char *verified[] = { "redis:7.0.15", "redis:8.0.6", "redis:8.6.3", "valkey:8.1.1",
                               "valkey:9.1.2" };

    for (size_t i = 0; i < sizeof verified / sizeof verified[0]; i++) {
        struct command_set *set = set_for(verified[i]);
        char *text = printed(set);

        cr_assert_null(strstr(text, "documented"), "%s", verified[i]);
        free(text);
        command_set_free(set);
    }
    struct command_set *r812 = set_for("redis:8.12.0"), *v92 = set_for("valkey:9.2.0");
    char *text = printed(r812);

    cr_assert(command_set_features(r812) & FT_NEWER);
    cr_assert_not_null(strstr(text, "\nincrex -2 write,documented "
                                    "key@1:none|create|persist|sets-ttl\n"));
    cr_assert_not_null(strstr(text, "\nzmove -4 write,documented source@1:none "
                                    "destination@2:create\n"));
    cr_assert_null(strstr(text, "himport"));                     /* left to its key specs */
    free(text);
    text = printed(v92);
    cr_assert_not_null(strstr(text, "\ndelex -2 write,documented key@1:none\n"));
    cr_assert_null(strstr(text, "zmove"));
    free(text);
    command_set_free(r812);
    command_set_free(v92);
}

Test(documented, effects)
{
    struct command_set *r812 = set_for("redis:8.12.0"), *v92 = set_for("valkey:9.2.0");
    struct key_ref k[MAX_WORDS];

    expect(r812, "INCREX c", 1, 1, TE_CREATE);
    expect(r812, "INCREX c BYINT 5 UBOUND 100 PERSIST", 1, 1, TE_PERSIST);
    cr_assert_eq(keys_on(r812, "INCREX c BYINT 1 EX 60 ENX", k), 1);
    cr_assert(k[0].effect == TE_SETS_TTL && k[0].ttl_argi == 5 && k[0].ttl_unit == TTL_SEC);
    expect(v92, "INCREX c XX", 0, 0, TE_NONE);
    expect(v92, "INCREX c NX PXAT 99999999999999", 1, 1, TE_SETS_TTL);
    /* What the documentation leaves open is not judged, never refused. */
    expect(r812, "INCREX c FOO", -2, 0, TE_NONE);
    expect(r812, "INCREX c EX 10 PX 10", -2, 0, TE_NONE);
    expect(r812, "INCREX c EX 10 PERSIST", -2, 0, TE_NONE);
    expect(r812, "INCREX c EX ten", -2, 0, TE_NONE);
    expect(v92, "DELEX k IFEQ v", 0, 0, TE_NONE);
    expect(r812, "ARSET a 0 x y", 1, 1, TE_CREATE);
    expect(r812, "LMOVEM a b LEFT RIGHT COUNT 2 OBO", 1, 2, TE_CREATE);
    expect(r812, "ZMOVEMEMBER a b NX MEMBERS 1 m", 1, 2, TE_CREATE);
    expect(r812, "SADDEX s EX 10 MEMBERS 1 m", 1, 1, TE_CREATE);
    expect(r812, "SEXPIRE s 10 MEMBERS 1 m", 0, 0, TE_NONE);
    cr_assert_null(command_resolve(r812, "himport", 7));          /* derived from its key specs */
    cr_assert(command_resolve(r812, "bzmove", 6)->sflags & CS_PIN);
    cr_assert(command_flags(command_resolve(r812, "saddex", 6)->row) & CMD_DOCUMENTED);
    command_set_free(r812);
    command_set_free(v92);
}

Test(cluster, partial_container)
{
    struct command_set *v91 = set_for("valkey:9.1.2");

    expect(v91, "CLUSTER INFO", 0, 0, TE_NONE);
    expect(v91, "CLUSTER FLUSHSLOT 5", 0, 0, TE_NONE);
    command_set_free(v91);
}

/* ---- derived rows --------------------------------------------------------------- */

static struct derived_spec at1(unsigned flags)
{
    return (struct derived_spec){ .flags = flags, .begin = 0, .index = 1, .find = 0,
                                  .lastkey = 0, .keystep = 1 };
}

Test(derived, effects_from_flags)
{
    struct command_set *set = set_for("redis:7.0.15");
    struct derived_spec s[5] = { at1(DK_RW | DK_INSERT), at1(DK_OW | DK_UPDATE),
                                 at1(DK_RW | DK_UPDATE), at1(DK_RM | DK_DELETE), at1(DK_RO) };
    const char *names[5] = { "mod.insert", "mod.overwrite", "mod.update", "mod.delete", "mod.read" };
    enum ttl_effect want[5] = { TE_CREATE, TE_OVERWRITE, TE_CREATE, TE_NONE, TE_NONE };

    for (int i = 0; i < 5; i++) {
        struct derived_cmd d = { .name = names[i], .arity = -2, .write = 1, .nspecs = 1,
                                 .specs = &s[i] };
        cr_assert_eq(command_set_derive(set, &d), 0, "%s", names[i]);
    }
    for (int i = 0; i < 5; i++) {
        char text[64];
        snprintf(text, sizeof text, "%s key x", names[i]);
        expect(set, text, want[i] == TE_NONE ? 0 : 1, 1, want[i]);
        const struct cmd_info *ci = command_resolve(set, names[i], strlen(names[i]));
        cr_assert(command_flags(ci->row) & CMD_DERIVED);
    }
    int table, derived, unjudged;
    command_set_counts(set, &table, &derived, &unjudged);
    cr_assert_eq(derived, 5);
    cr_assert_eq(unjudged, 0);
    /* A name the table has is not derived again. */
    struct derived_cmd dup = { .name = "SET", .arity = -3, .write = 1, .nspecs = 1, .specs = &s[0] };
    cr_assert_eq(command_set_derive(set, &dup), -1);
    command_set_free(set);
}

Test(derived, keyword_and_keynum)
{
    struct command_set *set = set_for("valkey:9.1.2");
    struct derived_spec kw = { .flags = DK_OW, .begin = 1, .keyword = "INTO", .index = 1,
                               .find = 0, .lastkey = 0, .keystep = 1 };
    struct derived_spec kn = { .flags = DK_RW | DK_INSERT, .begin = 0, .index = 1, .find = 1,
                               .keynumidx = 0, .firstkey = 1, .keystep = 2 };
    struct derived_cmd a = { .name = "mod.copy", .arity = -2, .write = 1, .nspecs = 1, .specs = &kw };
    struct derived_cmd b = { .name = "mod.mset", .arity = -4, .write = 1, .nspecs = 1, .specs = &kn };
    struct key_ref k[MAX_WORDS];

    cr_assert_eq(command_set_derive(set, &a), 0);
    cr_assert_eq(command_set_derive(set, &b), 0);
    expect(set, "mod.copy src INTO dst", 1, 3, TE_OVERWRITE);
    expect(set, "mod.copy src", 0, 0, TE_NONE);
    cr_assert_eq(keys_on(set, "mod.mset 2 a 1 b 2", k), 2);
    cr_assert(k[0].argi == 2 && k[1].argi == 4 && k[1].effect == TE_CREATE);
    expect(set, "mod.mset 3 a 1 b 2", -1, 0, TE_NONE);
    command_set_free(set);
}

Test(derived, unjudged_and_subcommands)
{
    struct command_set *set = set_for("redis:7.0.15");
    struct derived_spec unknown = { .flags = DK_RW, .begin = 2, .find = 2 };
    struct derived_spec incomplete = at1(DK_RW | DK_INCOMPLETE);
    struct derived_spec ok = at1(DK_RW | DK_INSERT);
    struct derived_cmd u = { .name = "mod.scan", .arity = -2, .write = 1, .nspecs = 1,
                             .specs = &unknown };
    struct derived_cmd i = { .name = "mod.partial", .arity = -2, .write = 1, .nspecs = 1,
                             .specs = &incomplete };
    struct derived_cmd parent = { .name = "mod.obj", .arity = -2 };
    struct derived_cmd sub = { .name = "mod.obj|add", .arity = -3, .write = 1, .nspecs = 1,
                               .specs = &(struct derived_spec){ .flags = DK_RW | DK_INSERT,
                                   .begin = 0, .index = 2, .find = 0, .keystep = 1 } };
    struct derived_cmd read = { .name = "mod.obj|get", .arity = 3 };
    struct derived_cmd orphan = { .name = "other|add", .arity = -3, .write = 1, .nspecs = 1,
                                  .specs = &ok };

    cr_assert_eq(command_set_derive(set, &u), 0);
    cr_assert_eq(command_set_derive(set, &i), 0);
    cr_assert_eq(command_set_derive(set, &parent), 0);
    cr_assert_eq(command_set_derive(set, &sub), 0);
    cr_assert_eq(command_set_derive(set, &read), 0);
    cr_assert_eq(command_set_derive(set, &orphan), -1);
    expect(set, "mod.scan k", -2, 0, TE_NONE);
    expect(set, "mod.partial k", -2, 0, TE_NONE);
    expect(set, "mod.obj add k v", 1, 2, TE_CREATE);
    expect(set, "MOD.OBJ GET k", 0, 0, TE_NONE);
    expect(set, "mod.obj nosuch k", -1, 0, TE_NONE);
    const struct cmd_info *ci = command_resolve(set, "mod.obj", 7);
    cr_assert(command_flags(ci->row) & CMD_WRITE, "a container gets its subcommands' flags");
    int table, derived, unjudged;
    command_set_counts(set, &table, &derived, &unjudged);
    cr_assert_eq(unjudged, 2);
    command_set_free(set);
}

Test(derived, blocking_rows_pin)
{
    struct command_set *set = set_for("redis:7.0.15");
    struct derived_cmd d = { .name = "mod.bpop", .arity = 3, .write = 1, .blocking = 1 };

    cr_assert_eq(command_set_derive(set, &d), 0);
    cr_assert(command_resolve(set, "mod.bpop", 8)->sflags & CS_PIN);
    command_set_free(set);
}

Test(key_args, every_key_whatever_the_effect)
{
    struct command_set *set = set_for("redis:7.0.15");
    char text[] = "MIGRATE h 6379 \"\" 0 5000 KEYS a b";
    struct slice argv[MAX_WORDS];
    struct key_ref k[MAX_WORDS];
    int argc = 0;

    for (char *save = NULL, *w = strtok_r(text, " ", &save); w != NULL;
         w = strtok_r(NULL, " ", &save)) {
        argv[argc].p = w;
        argv[argc].len = strlen(w);
        argc++;
    }
    const struct cmd_info *ci = command_resolve(set, "migrate", 7);
    argv[3].len = 0;
    int n = command_key_args(ci, argc, argv, k);
    cr_assert_eq(n, 3);
    cr_assert(k[0].argi == 3 && k[1].argi == 7 && k[2].argi == 8);
    command_set_free(set);
}

/* The keys of a command the proxy cannot judge are found at their positions
 * whatever argc the table allows (a newer server may take more arguments),
 * and a role the command only reads is TE_NONE: protection leaves it alone. */
Test(key_args, whatever_the_arity_and_sources_read_only)
{
    struct command_set *set = set_for("redis:7.0.15");
    struct slice getset[] = { { "GETSET", 6 }, { "k", 1 }, { "v", 1 }, { "extra", 5 } };
    struct slice bitop[] = { { "BITOP", 5 }, { "OR", 2 }, { "d", 1 }, { "s1", 2 }, { "s2", 2 } };
    struct key_ref k[8];

    const struct cmd_info *ci = command_resolve(set, "getset", 6);
    cr_assert_not(command_arity_ok(ci->row, 4));
    cr_assert_eq(command_key_args(ci, 4, getset, k), 1);
    cr_assert(k[0].argi == 1 && k[0].effect == TE_CREATE);

    ci = command_resolve(set, "bitop", 5);
    cr_assert_eq(command_key_args(ci, 5, bitop, k), 3);
    cr_assert(k[0].argi == 2 && k[0].effect == TE_CREATE);
    cr_assert(k[1].argi == 3 && k[1].effect == TE_NONE);
    cr_assert(k[2].argi == 4 && k[2].effect == TE_NONE);
    command_set_free(set);
}
