/*
 * Unit tests for report.c, `ttlguard report FILE...`: the text summary of
 * the background audit's passes (audit_pass events), per rule, from event
 * logs written by hand.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

/* A log holding lines, at path (a mkstemp() template). */
static void write_log(char *path, const char *lines)
{
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, lines, strlen(lines)), (ssize_t)strlen(lines));
    close(fd);
}

/* What `ttlguard report` prints for lines; the caller frees it. */
static char *report_of(const char *lines)
{
    char path[] = "/tmp/ttlg-test-report-XXXXXX";
    write_log(path, lines);
    char *argv[] = { "report", path, NULL };
    cr_assert_eq(report_main(2, argv), 0);
    fflush(stdout);
    unlink(path);
    size_t cap = 1 << 16;
    char *out = calloc(1, cap);
    size_t len = fread(out, 1, cap - 1, cr_get_redirected_stdout());
    out[len] = '\0';
    return out;
}

#define PASS1 "{\"ts\":\"2026-12-01T10:00:00.000Z\",\"event\":\"audit_pass\",\"keys\":2300," \
    "\"leaked\":1700,\"leaked_change\":null,\"expiring\":450,\"expiring_change\":null," \
    "\"registered\":250,\"registered_change\":null,\"unregistered\":0," \
    "\"unregistered_change\":null,\"rules\":[" \
    "{\"rule\":\"ttl \\\"s:\\\"\",\"prefix\":\"s:\",\"leaked\":1700,\"leaked_change\":null," \
    "\"expiring\":400,\"expiring_change\":null}," \
    "{\"rule\":\"durable \\\"du:\\\"\",\"prefix\":\"du:\",\"registered\":250," \
    "\"registered_change\":null,\"expiring\":50,\"expiring_change\":null}]}\n"

#define PASS2 "{\"ts\":\"2026-12-01T11:00:00.000Z\",\"event\":\"audit_pass\",\"keys\":2508," \
    "\"leaked\":1710,\"leaked_change\":10,\"expiring\":448,\"expiring_change\":-2," \
    "\"registered\":250,\"registered_change\":0,\"unregistered\":100," \
    "\"unregistered_change\":100,\"rules\":[" \
    "{\"rule\":\"ttl \\\"s:\\\"\",\"prefix\":\"s:\",\"leaked\":1710,\"leaked_change\":10," \
    "\"expiring\":398,\"expiring_change\":-2}," \
    "{\"rule\":\"durable \\\"du:\\\"\",\"prefix\":\"du:\",\"registered\":250," \
    "\"registered_change\":0,\"expiring\":50,\"expiring_change\":0}," \
    "{\"rule\":\"default\",\"prefix\":\"\",\"unregistered\":100," \
    "\"unregistered_change\":null,\"expiring\":0,\"expiring_change\":null}]}\n"

#define HEAD "  rule (last pass, change)               leaked         expiring       registered" \
    "     unregistered\n"

Test(report, audit_rules_of_the_last_pass_with_their_change, .init = cr_redirect_stdout)
{
    char *out = report_of(PASS1 PASS2);
    const char *audit = strstr(out, "\nBackground audit:");
    cr_assert_not_null(audit, "%s", out);
    cr_assert_str_eq(audit,
        "\nBackground audit: 2 passes; the last: 2508 keys, 1710 leaked (+10 since the pass "
        "before), 448 expiring, 250 registered, 100 unregistered\n"
        "\n" HEAD
        "  ttl \"s:\"                           1710 (+10)         398 (-2)                -"
        "                -\n"
        "  durable \"du:\"                               -          50 (+0)         250 (+0)"
        "                -\n"
        "  default                                     -                0                -"
        "              100\n");
    free(out);
}

Test(report, audit_first_pass_has_no_change, .init = cr_redirect_stdout)
{
    char *out = report_of(PASS1);
    const char *table = strstr(out, HEAD);
    cr_assert_not_null(table, "%s", out);
    cr_assert_str_eq(table + strlen(HEAD),
        "  ttl \"s:\"                                 1700              400                -"
        "                -\n"
        "  durable \"du:\"                               -               50              250"
        "                -\n");
    free(out);
}

Test(report, audit_pass_without_rules_has_no_table, .init = cr_redirect_stdout)
{
    char *out = report_of("{\"ts\":\"2026-12-01T10:00:00.000Z\",\"event\":\"audit_pass\","
                          "\"keys\":0,\"leaked\":0,\"expiring\":0,\"registered\":0,"
                          "\"unregistered\":0}\n");
    cr_assert_not_null(strstr(out, "Background audit: 1 passes; the last: 0 keys"), "%s", out);
    cr_assert_null(strstr(out, "rule (last pass"), "%s", out);
    free(out);
}
