/*
 * cli/args.c — see args.h. One pass over argv: each "--flag" is looked up in the table, its value taken
 * from "=value" or the next argument, converted strictly (the whole string must be a number of the kind
 * asked, in range), and stored. Positional arguments are compacted to the front of argv as we go.
 */
#include "cli/args.h"
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The entry named name[0 .. len), or NULL. */
static const mp_arg *find_flag(const mp_arg *flags, const char *name, size_t len) {
    for (const mp_arg *a = flags; a->name; a++)
        if (strlen(a->name) == len && !strncmp(a->name, name, len)) return a;
    return NULL;
}

/* 1/0 for a BOOL spelling, -1 otherwise. */
static int parse_bool(const char *v) {
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) return 1;
        if (!strcasecmp(v, no[i])) return 0;
    }
    return -1;
}

/* Converts v for entry a and stores it; MP_EINPUT naming the flag on a bad value. */
static mp_code store_value(const mp_arg *a, const char *v, mp_err *err) {
    char *end = NULL;
    errno = 0;
    switch (a->kind) {
    case MP_ARG_INT:
    case MP_ARG_I64: {
        /* decimal only: an optional sign, then digits ("010" is ten, never octal; no 0x, no spaces) */
        const char *d = v + (*v == '-' || *v == '+');
        int digits = *d != '\0';
        for (const char *c = d; *c; c++) digits &= *c >= '0' && *c <= '9';
        if (!digits)
            return mp_err_set(err, MP_EINPUT, "--%s: \"%s\" is not an integer (decimal digits only)", a->name, v);
        long long x = strtoll(v, &end, 10);
        if (*end) return mp_err_set(err, MP_EINPUT, "--%s: \"%s\" is not an integer", a->name, v);
        if (errno == ERANGE || (a->kind == MP_ARG_INT && (x < INT_MIN || x > INT_MAX)))
            return mp_err_set(err, MP_EINPUT, "--%s: %s is out of range", a->name, v);
        if (a->kind == MP_ARG_INT) *(int *)a->ptr = (int)x;
        else *(int64_t *)a->ptr = (int64_t)x;
        return MP_OK;
    }
    case MP_ARG_DOUBLE: {
        /* decimal notation only: strtod alone would also take hex ("0x10"), "nan" and leading spaces */
        int plain = 1;
        for (const char *c = v; *c; c++) plain &= (*c >= '0' && *c <= '9') || strchr("+-.eE", *c) != NULL;
        double x = plain ? strtod(v, &end) : 0;
        if (!plain || !*v || *end || errno == ERANGE || !isfinite(x))
            return mp_err_set(err, MP_EINPUT, "--%s: \"%s\" is not a finite number", a->name, v);
        *(double *)a->ptr = x;
        return MP_OK;
    }
    case MP_ARG_STRING:
        if (!*v) {   /* --run-dir "" would surface later as "creating directory : No such file or directory" */
            int path = a->metavar && (!strncmp(a->metavar, "DIR", 3) || !strncmp(a->metavar, "FILE", 4) ||
                                      !strcmp(a->metavar, "CKPT"));
            return mp_err_set(err, MP_EINPUT, "--%s: the %s is empty", a->name, path ? "path" : "value");
        }
        if (a->choices) {
            int ok = 0;
            for (const char *const *c = a->choices; *c; c++) ok |= !strcmp(*c, v);
            if (!ok) {
                char list[512] = "";
                size_t at = 0;
                for (const char *const *c = a->choices; *c && at < sizeof list; c++)
                    at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", c == a->choices ? "" : ", ", *c);
                return mp_err_set(err, MP_EINPUT, "--%s: \"%s\" is not one of: %s", a->name, v, list);
            }
        }
        *(const char **)a->ptr = v;
        return MP_OK;
    case MP_ARG_SWITCH: {
        int b = parse_bool(v);
        if (b < 0)
            return mp_err_set(err, MP_EINPUT, "--%s: \"%s\" is not a boolean (use 1/0, true/false, yes/no)",
                              a->name, v);
        *(int *)a->ptr = b;
        return MP_OK;
    }
    }
    return mp_err_set(err, MP_EINTERNAL, "--%s: unknown flag kind %d", a->name, (int)a->kind);
}

mp_code mp_args_parse(const mp_arg *flags, int argc, char **argv, int *npos, int *help, mp_err *err) {
    assert(flags && npos && help && (argc == 0 || argv));
    *npos = 0;
    *help = 0;
    int np = 0, only_pos = 0;
    for (int i = 0; i < argc; i++) {
        char *arg = argv[i];
        if (only_pos || arg[0] != '-' || !strcmp(arg, "-")) {
            argv[np++] = arg;
            continue;
        }
        if (!strcmp(arg, "--")) { only_pos = 1; continue; }
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            *help = 1;
            *npos = np;
            return MP_OK;
        }
        if (arg[1] != '-')
            return mp_err_set(err, MP_EINPUT, "unknown option \"%s\" (options are spelled --name)", arg);
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const mp_arg *a = find_flag(flags, name, len);
        int negated = 0;
        if (!a && len > 3 && !strncmp(name, "no-", 3)) {
            a = find_flag(flags, name + 3, len - 3);
            if (a && a->kind == MP_ARG_SWITCH) negated = 1;
            else a = NULL;
        }
        if (!a) return mp_err_set(err, MP_EINPUT, "unknown option --%.*s (see --help)", (int)len, name);
        if (a->kind == MP_ARG_SWITCH) {
            if (negated && eq) return mp_err_set(err, MP_EINPUT, "--no-%s takes no value", a->name);
            if (eq) MP_TRY(store_value(a, eq + 1, err));
            else *(int *)a->ptr = !negated;
        } else {
            const char *v;
            if (eq) v = eq + 1;
            else if (i + 1 < argc) v = argv[++i];
            else return mp_err_set(err, MP_EINPUT, "--%s needs a value (%s)", a->name, a->metavar ? a->metavar : "VALUE");
            MP_TRY(store_value(a, v, err));
        }
        if (a->set) *a->set = 1;
    }
    *npos = np;
    return MP_OK;
}

/* The placeholder shown after a flag in --help. */
static const char *metavar_of(const mp_arg *a) {
    if (a->metavar) return a->metavar;
    switch (a->kind) {
    case MP_ARG_INT:
    case MP_ARG_I64: return "N";
    case MP_ARG_DOUBLE: return "X";
    case MP_ARG_STRING: return "STR";
    case MP_ARG_SWITCH: return "";
    }
    return "";
}

/* Prints the default of entry a (see mp_args_help) to out, with a leading space; nothing for a STRING
 * flag without a value (NULL or "") or an empty dflt. */
static void print_default(FILE *out, const mp_arg *a) {
    if (a->dflt) {
        if (*a->dflt) fprintf(out, " [default: %s]", a->dflt);
        return;
    }
    switch (a->kind) {
    case MP_ARG_INT: fprintf(out, " [default: %d]", *(const int *)a->ptr); break;
    case MP_ARG_I64: fprintf(out, " [default: %lld]", (long long)*(const int64_t *)a->ptr); break;
    case MP_ARG_DOUBLE: fprintf(out, " [default: %g]", *(const double *)a->ptr); break;
    case MP_ARG_STRING:
        if (*(const char *const *)a->ptr && **(const char *const *)a->ptr)
            fprintf(out, " [default: %s]", *(const char *const *)a->ptr);
        break;
    case MP_ARG_SWITCH: {
        int v = *(const int *)a->ptr;
        fprintf(out, " [default: %s]", v < 0 ? "auto" : v ? "on" : "off");
        break;
    }
    }
}

void mp_args_help(FILE *out, const char *usage, const char *about, const mp_arg *flags) {
    fprintf(out, "usage: %s\n", usage);
    if (about && *about) fprintf(out, "\n%s\n", about);
    fprintf(out, "\noptions:\n");
    for (const mp_arg *a = flags; a->name; a++) {
        char lhs[160];
        const char *mv = metavar_of(a);
        if (a->kind == MP_ARG_SWITCH && strncmp(a->name, "no-", 3))
            snprintf(lhs, sizeof lhs, "--%s, --no-%s", a->name, a->name);
        else snprintf(lhs, sizeof lhs, "--%s%s%s", a->name, *mv ? " " : "", mv);
        /* a long left side gets its own line, so the help column stays aligned */
        if (strlen(lhs) > 24) fprintf(out, "  %s\n  %-24s %s", lhs, "", a->help ? a->help : "");
        else fprintf(out, "  %-24s %s", lhs, a->help ? a->help : "");
        if (a->kind == MP_ARG_STRING && a->choices) {
            fputs(" (one of:", out);
            for (const char *const *c = a->choices; *c; c++) fprintf(out, " %s", *c);
            fputc(')', out);
        }
        print_default(out, a);
        fputc('\n', out);
    }
    fprintf(out, "  %-24s %s\n", "--help", "print this help and exit");
    fprintf(out, "  %-24s %s\n", "--version", "print the program and checkpoint format versions and exit");
}

mp_code mp_args_parse_size(const char *s, const char *flag, size_t min, size_t *out, mp_err *err) {
    char *end = NULL;
    errno = 0;
    int plain = *s != '\0';
    for (const char *c = s; *c && !strchr("KkMmGgTtiB", *c); c++) plain &= (*c >= '0' && *c <= '9') || *c == '.';
    double v = plain ? strtod(s, &end) : 0;
    if (!plain || end == s || errno || !(v > 0))
        return mp_err_set(err, MP_EINPUT, "%s: \"%s\" is not a size (e.g. 256M, 1G)", flag, s);
    double mul = 1;
    if (*end && strchr("Kk", *end)) mul = 1024.0, end++;
    else if (*end && strchr("Mm", *end)) mul = 1048576.0, end++;
    else if (*end && strchr("Gg", *end)) mul = 1073741824.0, end++;
    else if (*end && strchr("Tt", *end)) mul = 1099511627776.0, end++;
    if (mul > 1 && (!strcmp(end, "iB") || !strcmp(end, "B"))) end += strlen(end);
    if (*end) return mp_err_set(err, MP_EINPUT, "%s: \"%s\" is not a size (e.g. 256M, 1G)", flag, s);
    v *= mul;
    if (v >= 0x1p62) return mp_err_set(err, MP_EINPUT, "%s: %s is out of range", flag, s);
    if (v < (double)min) {
        char m[32];
        snprintf(m, sizeof m, "%zu bytes", min);
        if (min % 1048576 == 0) snprintf(m, sizeof m, "%zuM", min / 1048576);
        return mp_err_set(err, MP_EINPUT, "%s: %s is below the minimum of %s", flag, s, m);
    }
    if ((size_t)v == 0) return mp_err_set(err, MP_EINPUT, "%s: %s is below one byte", flag, s);
    *out = (size_t)v;
    return MP_OK;
}
