/*
 * tests/test_args.c — the table-driven flag parser cli/args.c, through cli/args.h (the test links
 * mp_cli). Covers both value spellings, every kind, switches and --no-, positional compaction, "--",
 * --help, the `set` marker and each error, and the --help text.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include "cli/args.h"

typedef struct {
    int n; int64_t big; double x; const char *s, *dev; int sw, on; int n_set, dev_set;
} vals;

static void table(vals *v, mp_arg *t) {
    static const char *const devs[] = {"cpu", "cuda", NULL};
    mp_arg tab[] = {
        {"n", MP_ARG_INT, &v->n, "N", "an int", NULL, &v->n_set},
        {"big", MP_ARG_I64, &v->big, NULL, "an i64", NULL, NULL},
        {"x", MP_ARG_DOUBLE, &v->x, "X", "a double", NULL, NULL},
        {"s", MP_ARG_STRING, &v->s, "STR", "a string", NULL, NULL},
        {"device", MP_ARG_STRING, &v->dev, "DEV", "a choice", devs, &v->dev_set},
        {"sw", MP_ARG_SWITCH, &v->sw, NULL, "a switch", NULL, NULL},
        {"on", MP_ARG_SWITCH, &v->on, NULL, "on by default", NULL, NULL},
        {0}};
    memcpy(t, tab, sizeof tab);
}
#define NT 8

/* Parses the NULL-terminated words; returns the code, positional count in *np. */
static mp_code parse(vals *v, int *np, int *help, mp_err *err, char **words) {
    mp_arg t[NT];
    table(v, t);
    int argc = 0;
    while (words[argc]) argc++;
    return mp_args_parse(t, argc, words, np, help, err);
}

static vals defaults(void) {
    vals v = {7, 5, 0.5, NULL, "cpu", 0, 1, 0, 0};
    return v;
}

Test(args, both_spellings_and_positionals) {
    vals v = defaults();
    char *w[] = {"a", "--n", "-3", "--big=12345678901", "b", "--x", "2.5e-3", "--s=hello=world",
                 "--device", "cuda", "--sw", "--no-on", "-", "--", "--n", "c", NULL};
    int np, help;
    mp_err err;
    cr_assert_eq(parse(&v, &np, &help, &err, w), MP_OK, "%s", err.msg);
    cr_assert_eq(help, 0);
    cr_assert_eq(v.n, -3);
    cr_assert_eq(v.n_set, 1);
    cr_assert_eq(v.big, 12345678901LL);
    cr_assert_float_eq(v.x, 2.5e-3, 1e-15);
    cr_assert_str_eq(v.s, "hello=world");
    cr_assert_str_eq(v.dev, "cuda");
    cr_assert_eq(v.dev_set, 1);
    cr_assert_eq(v.sw, 1);
    cr_assert_eq(v.on, 0);
    cr_assert_eq(np, 5);
    cr_assert_str_eq(w[0], "a");
    cr_assert_str_eq(w[1], "b");
    cr_assert_str_eq(w[2], "-");
    cr_assert_str_eq(w[3], "--n");
    cr_assert_str_eq(w[4], "c");
}

Test(args, defaults_untouched_and_last_wins) {
    vals v = defaults();
    char *w[] = {"--n=1", "--n", "2", "--sw=false", "--on=yes", NULL};
    int np, help;
    cr_assert_eq(parse(&v, &np, &help, NULL, w), MP_OK);
    cr_assert_eq(v.n, 2);
    cr_assert_eq(v.big, 5);
    cr_assert_float_eq(v.x, 0.5, 0);
    cr_assert_null(v.s);
    cr_assert_str_eq(v.dev, "cpu");
    cr_assert_eq(v.dev_set, 0);
    cr_assert_eq(v.sw, 0);
    cr_assert_eq(v.on, 1);
    cr_assert_eq(np, 0);
}

Test(args, help_stops_parsing) {
    vals v = defaults();
    char *w[] = {"p", "--help", "--bogus", NULL};
    int np, help;
    cr_assert_eq(parse(&v, &np, &help, NULL, w), MP_OK);
    cr_assert_eq(help, 1);
    char *w2[] = {"-h", NULL};
    cr_assert_eq(parse(&v, &np, &help, NULL, w2), MP_OK);
    cr_assert_eq(help, 1);
}

Test(args, errors_name_the_flag) {
    struct { char *w[4]; const char *want; } cases[] = {
        {{"--bogus", NULL}, "--bogus"},
        {{"--bogus=3", NULL}, "--bogus"},
        {{"-x", NULL}, "-x"},
        {{"--no-n", NULL}, "--no-n"},           /* --no- only for switches */
        {{"--n", NULL}, "--n needs a value"},
        {{"--n", "1.5", NULL}, "--n"},
        {{"--n", "12abc", NULL}, "not an integer"},
        {{"--n", "", NULL}, "--n"},
        {{"--n", "99999999999", NULL}, "out of range"},
        {{"--big", "99999999999999999999", NULL}, "--big"},
        {{"--x", "abc", NULL}, "--x"},
        {{"--x=inf", NULL}, "--x"},
        {{"--x", "1e999", NULL}, "--x"},
        {{"--device", "tpu", NULL}, "cpu, cuda"},
        /* an empty string names the flag (--run-dir "" used to reach mkdir as "creating directory ") */
        {{"--s", "", NULL}, "--s: the value is empty"},
        {{"--s=", NULL}, "--s: the value is empty"},
        {{"--device", "", NULL}, "--device: the value is empty"},
        {{"--sw=maybe", NULL}, "--sw"},
        {{"--no-sw=1", NULL}, "--no-sw"},
        /* integers are decimal only: no hex, no octal prefix games, no spaces, no exponent */
        {{"--n", "0x10", NULL}, "not an integer"},
        {{"--big", "0X1f", NULL}, "--big"},
        {{"--n", " 5", NULL}, "not an integer"},
        {{"--n", "5 ", NULL}, "not an integer"},
        {{"--n", "1e3", NULL}, "not an integer"},
        {{"--n", "-", NULL}, "not an integer"},
        {{"--n", "+", NULL}, "not an integer"},
        {{"--n", "--5", NULL}, "not an integer"},
        {{"--n=-0x5", NULL}, "--n"},
        /* doubles: decimal or exponent notation only */
        {{"--x", "0x1p3", NULL}, "--x"},
        {{"--x", "nan", NULL}, "--x"},
        {{"--x", " 1.5", NULL}, "--x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vals v = defaults();
        int np, help;
        mp_err err;
        mp_err_clear(&err);
        cr_assert_eq(parse(&v, &np, &help, &err, cases[i].w), MP_EINPUT, "case %zu", i);
        cr_assert(strstr(err.msg, cases[i].want), "case %zu: \"%s\" not in: %s", i, cases[i].want, err.msg);
    }
}

Test(args, help_text_lists_flags_and_defaults) {
    vals v = defaults();
    mp_arg t[NT];
    table(&v, t);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mp_args_help(f, "prog [options] FILE", "About.", t);
    fclose(f);
    const char *want[] = {"usage: prog [options] FILE", "About.", "--n N", "[default: 7]", "--big N",
                          "[default: 5]", "--x X", "[default: 0.5]", "--device DEV", "one of: cpu cuda",
                          "[default: cpu]", "--sw, --no-sw", "a switch [default: off]", "--on, --no-on",
                          "on by default [default: on]", "--help", "--version"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(buf, want[i]), "\"%s\" not in:\n%s", want[i], buf);
    free(buf);
}

Test(args, help_shows_tristate_auto_and_stated_defaults) {
    int tri = -1, req = 1;
    const mp_arg t[] = {
        {"sp", MP_ARG_SWITCH, &tri, NULL, "tri-state"},
        {"tp", MP_ARG_INT, &req, "N", "needed", .dflt = "required"},
        {"quiet", MP_ARG_INT, &req, "N", "no default shown", .dflt = ""},
        {0}};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mp_args_help(f, "prog", NULL, t);
    fclose(f);
    cr_assert(strstr(buf, "--sp, --no-sp") && strstr(buf, "tri-state [default: auto]"), "%s", buf);
    cr_assert(strstr(buf, "needed [default: required]") && !strstr(buf, "[default: 1]"), "%s", buf);
    cr_assert(strstr(buf, "no default shown\n"), "%s", buf);
    free(buf);
}

Test(args, integers_are_decimal_whatever_the_leading_zeros) {
    struct { const char *flag, *val; int64_t want; } cases[] = {
        {"--n", "010", 10}, {"--n", "08", 8}, {"--n", "09", 9}, {"--big", "0500", 500}, {"--n", "0", 0},
        {"--n", "-007", -7}, {"--n", "+12", 12}, {"--big", "-0", 0}, {"--n", "2147483647", 2147483647},
        {"--n", "-2147483648", -2147483648LL}, {"--big", "9223372036854775807", INT64_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vals v = defaults();
        char *w[] = {(char *)cases[i].flag, (char *)cases[i].val, NULL};
        int np, help;
        mp_err err;
        cr_assert_eq(parse(&v, &np, &help, &err, w), MP_OK, "%s %s: %s", cases[i].flag, cases[i].val, err.msg);
        int64_t got = !strcmp(cases[i].flag, "--n") ? v.n : v.big;
        cr_assert_eq(got, cases[i].want, "%s %s gave %lld", cases[i].flag, cases[i].val, (long long)got);
    }
    vals v = defaults();
    char *w[] = {"--x=-0.5e-3", NULL};
    int np, help;
    cr_assert_eq(parse(&v, &np, &help, NULL, w), MP_OK);
    cr_assert_float_eq(v.x, -0.5e-3, 1e-18);
}
