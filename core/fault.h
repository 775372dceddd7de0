/*
 * core/fault.h — fault injection: the one way the tests reach inside the library to make a failure
 * happen (a kill at a named point of a save, a failed transfer, a rank whose device cannot be used, less
 * memory or disk than there is, a non-finite gradient norm) or to force a path the host would not take
 * (the serial fill, the rename fallback, nodes of N ranks).
 *
 * One environment variable, MP_FAULT, holds a comma-separated list of faults, each `name` or `name:arg`:
 *
 *     MP_FAULT=ckpt_crash_at:after_index,ckpt_crash_rank:1 meshpoint train ...
 *
 * The names are the table in fault.c (mp_fault_names), each documented in docs/RELIABILITY.md ("Fault
 * injection"). Library code reads no other test variable: tests/python/code_shape.py checks that every
 * getenv outside this module reads a documented user variable. The variable is read at each query (a test
 * may setenv between calls); the queries are on cold paths (a save's phases, start-up).
 */
#ifndef MP_FAULT_H
#define MP_FAULT_H

#include <stdint.h>
#include "core/error.h"

/* The argument of fault `name` in MP_FAULT ("" when given without one), copied into buf (cap bytes);
 * NULL when MP_FAULT does not name it. name must be in the table (an assertion: a misspelt query would
 * otherwise never fire). */
const char *mp_fault_arg(const char *name, char *buf, size_t cap);
/* Whether fault `name` is set with an argument other than "0" ("" counts as set). */
int mp_fault_on(const char *name);
/* Fault `name`'s argument as an integer (strtoll, base 10); dflt when the fault is not set or its
 * argument is empty or not a whole number. */
int64_t mp_fault_int(const char *name, int64_t dflt);
/* Whether a fault aimed at a rank applies to `rank`: the rank fault `rank_name` is unset, empty or equal
 * to rank (the rule of ckpt_crash_rank and ckpt_fail_rank: no rank given means every rank). */
int mp_fault_rank_matches(const char *rank_name, int rank);
/* MP_EINPUT naming the entry when MP_FAULT holds a name that is not in the table (a test's typo would
 * otherwise inject nothing and pass); MP_OK when MP_FAULT is unset or every entry is known. The CLI
 * checks it at start-up. */
mp_code mp_fault_check(mp_err *err);

#endif
