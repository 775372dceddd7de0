/*
 * tests/fuzz/fuzz_args.c — libFuzzer target for the command-line parser (cli/args.c: mp_args_parse,
 * mp_args_help, mp_args_parse_size).
 *
 * Input: NUL-separated arguments (at most 64), each copied into its own allocation so that ASan sees
 * any read past an argument's end. They are parsed against a flag table with every kind the
 * subcommands use (int, int64, double, string with and without choices, switches with a default of
 * off, on and auto, a `set` marker, a dflt text), the help of that table is printed to /dev/null, and
 * each argument is also read as a size (`--max-memory`) with a minimum taken from the first byte.
 * Contract checks (abort = finding): positional arguments come back in order and unchanged, a
 * parsed int/double keeps its kind's range, a size that parses is > 0, >= the minimum and < 2^62.
 * Corpus: tests/fuzz/corpus/args (command lines of the subcommands, sizes, regressions).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"

#define MAX_ARGS 64

/* /dev/null, opened once, for mp_args_help. */
static FILE *g_null;

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_null) g_null = fopen("/dev/null", "w");
    char *own[MAX_ARGS], *argv[MAX_ARGS];
    int argc = 0;
    for (size_t at = 0; at < size && argc < MAX_ARGS;) {
        const uint8_t *nul = memchr(data + at, 0, size - at);
        size_t n = nul ? (size_t)(nul - (data + at)) : size - at;
        own[argc] = malloc(n + 1);
        memcpy(own[argc], data + at, n);
        own[argc][n] = '\0';
        argv[argc] = own[argc];
        argc++;
        at += n + 1;
    }
    int steps = 7, tp = 1, tp_set = 0, verbose = 0, async = 1, sp = -1;
    int64_t every = 500;
    double lr = 3e-4;
    const char *out = ".", *device = "cpu", *fmt = NULL;
    static const char *const devices[] = {"cpu", "cuda", NULL};
    const mp_arg flags[] = {
        {"steps", MP_ARG_INT, &steps, "N", "steps"},
        {"tp", MP_ARG_INT, &tp, "N", "tensor-parallel degree", .set = &tp_set},
        {"ckpt-every", MP_ARG_I64, &every, "N", "checkpoint every N steps"},
        {"lr", MP_ARG_DOUBLE, &lr, "X", "learning rate"},
        {"out", MP_ARG_STRING, &out, "DIR", "output directory"},
        {"device", MP_ARG_STRING, &device, "DEV", "device", .choices = devices},
        {"data-format", MP_ARG_STRING, &fmt, NULL, "token file format", .dflt = "llmc"},
        {"verbose", MP_ARG_SWITCH, &verbose, NULL, "print more"},
        {"async-save", MP_ARG_SWITCH, &async, NULL, "save in the background"},
        {"sp", MP_ARG_SWITCH, &sp, NULL, "sequence parallel (auto: on when tp > 1)"},
        {"no-fsync", MP_ARG_SWITCH, &verbose, NULL, "a switch whose name starts with no-"},
        {0}};
    int npos = -1, help = -1;
    mp_err err;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err) == MP_OK) {
        if (npos < 0 || npos > argc || (help != 0 && help != 1)) abort();
        /* positionals: argv pointers into our copies, in their original order, unchanged */
        int last = -1;
        for (int i = 0; i < npos; i++) {
            int k = -1;
            for (int j = last + 1; j < argc && k < 0; j++)
                if (argv[i] == own[j]) k = j;
            if (k < 0) abort();
            last = k;
        }
        if (!isfinite(lr) || (tp_set != 0 && tp_set != 1)) abort();
        if (strcmp(device, "cpu") && strcmp(device, "cuda")) abort();
        if (verbose < 0 || verbose > 1 || async < 0 || async > 1 || sp < -1 || sp > 1) abort();
    } else if (!err.msg[0]) {
        abort();   /* a refusal says why */
    }
    mp_args_help(g_null, "meshpoint fuzz [options] FILE...", "About.", flags);
    size_t min = size ? (size_t)1 << (data[0] % 40) : 1;
    for (int i = 0; i < argc; i++) {
        size_t bytes = 0;
        if (mp_args_parse_size(own[i], "--max-memory", min, &bytes, &err) == MP_OK &&
            (bytes == 0 || bytes < min || bytes >= ((size_t)1 << 62)))
            abort();
        free(own[i]);
    }
    return 0;
}
