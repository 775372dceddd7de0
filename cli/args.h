/*
 * cli/args.h — a tiny table-driven flag parser shared by every subcommand.
 *
 * A subcommand describes its flags once, as a table of mp_arg terminated by {0}; the same table parses
 * argv and prints --help, so the two never disagree. Each entry points at the variable it fills; the
 * value that variable holds before parsing is the default (and is shown in --help).
 *
 *     const char *out = "."; double frac = 0.1; int verbose = 0; int tp_set = 0, tp = 1;
 *     const mp_arg flags[] = {
 *         {"out", MP_ARG_STRING, &out, "DIR", "output directory"},
 *         {"val-fraction", MP_ARG_DOUBLE, &frac, "F", "fraction of tokens for validation"},
 *         {"tp", MP_ARG_INT, &tp, "N", "tensor-parallel degree", .set = &tp_set},
 *         {"verbose", MP_ARG_SWITCH, &verbose, NULL, "print more"},
 *         {0}};
 *     int npos, help;
 *     mp_err err;
 *     if (mp_args_parse(flags, argc, argv, &npos, &help, &err) != MP_OK) { print err.msg; return 2; }
 *     if (help) { mp_args_help(stdout, "meshpoint data [options] FILE...", "About text.", flags); return 0; }
 *     // argv[0 .. npos) are now the positional arguments, in their original order.
 *
 * Syntax accepted:
 *   --name value  and  --name=value    for INT, I64, DOUBLE, STRING (the value may start with '-')
 *   --name, --no-name, --name=BOOL     for SWITCH (BOOL: 1/0, true/false, yes/no, on/off)
 *   --help, -h                         sets *help and stops parsing (MP_OK)
 *   --                                 everything after it is positional
 *   anything not starting with '-' (and a lone "-") is positional
 * Numbers: INT and I64 are decimal only — an optional '-' or '+' and digits, nothing else. Leading zeros
 * do not mean octal ("010" is 10, "08" is 8) and there is no hex ("0x10" is refused), so a value reads as
 * it looks. DOUBLE is decimal or exponent notation ("3e-4", "-0.5"), finite; no hex floats, inf or nan.
 * Errors (MP_EINPUT, the message naming the flag): unknown flag, missing value, a value that is not a
 * number of the right kind or is out of range, a value given to a switch that is not a BOOL, an empty
 * STRING value ("the path is empty" for DIR/FILE/CKPT metavars), a STRING value not among the entry's
 * choices. A flag given twice takes the last value.
 */
#ifndef MP_ARGS_H
#define MP_ARGS_H

#include <stdio.h>
#include "core/error.h"

typedef enum {
    MP_ARG_INT,      /* int *        (decimal only; range-checked)       */
    MP_ARG_I64,      /* int64_t *    (decimal only; range-checked)       */
    MP_ARG_DOUBLE,   /* double *     (decimal/exponent notation, finite)  */
    MP_ARG_STRING,   /* const char ** (points into argv)                  */
    MP_ARG_SWITCH    /* int *        (set to 1 or 0)                      */
} mp_arg_kind;

typedef struct mp_arg {
    const char *name;              /* without the leading "--"; NULL ends the table */
    mp_arg_kind kind;
    void *ptr;                     /* the variable filled, of the type listed for kind */
    const char *metavar;           /* value placeholder in --help ("DIR"); NULL: derived from kind */
    const char *help;              /* one line for --help */
    const char *const *choices;    /* STRING only, optional: NULL-terminated list of allowed values */
    int *set;                      /* optional: set to 1 when the flag appears (to tell a CLI override
                                      from a default, e.g. when merging with a config file) */
    const char *dflt;              /* optional: the default as --help shows it, when the variable's value
                                      does not say it ("required", "RUN/checkpoints"); "" shows none */
} mp_arg;

/* Parses argv[0 .. argc) (the arguments after the subcommand name) against flags. Positional arguments
 * are moved, in order, to argv[0 .. *npos). *help is set to 1 if --help/-h was seen (parsing stops
 * there), else 0. Returns MP_OK or MP_EINPUT with a message naming the offending flag. */
mp_code mp_args_parse(const mp_arg *flags, int argc, char **argv, int *npos, int *help, mp_err *err);

/* Prints "usage: <usage>", the about text (may be NULL) and one line per flag with its metavar, help,
 * choices and default to out. The default is the entry's dflt text when given, else the variable's
 * current value (the value used when the flag is absent): a switch shows both spellings ("--sp,
 * --no-sp") and its default as on, off, or auto for a tri-state switch whose variable holds -1 (the
 * program decides; the help text says how). */
void mp_args_help(FILE *out, const char *usage, const char *about, const mp_arg *flags);

/* A size flag's value: "256M", "1G", "64MiB", "2T", "1048576" (K/M/G/T are powers of 1024) -> bytes.
 * MP_EINPUT naming flag for anything else, a size of 0, or one below min bytes. */
mp_code mp_args_parse_size(const char *s, const char *flag, size_t min, size_t *out, mp_err *err);

#endif
