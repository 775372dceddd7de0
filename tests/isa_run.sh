#!/bin/sh
# tests/isa_run.sh MESHPOINT LEVEL CMD... — runs CMD with the CPU kernels of ISA level LEVEL (MP_ISA=LEVEL,
# core/cpu_isa.c), so the numeric and bitwise suites run on every level this machine has. Exit 77
# (skipped) when this CPU cannot run LEVEL or the build has no such level (a one-level build); else
# CMD's own status. The level is confirmed through `meshpoint --version` before CMD runs.
bin=$1 level=$2; shift 2
line=$(MP_ISA=$level "$bin" --version | grep '^cpu kernels:')
case $line in
  "cpu kernels: $level (MP_ISA)") ;;
  *"does not run"*|*"not an ISA level of this build"*) echo "skipped: $line"; exit 77 ;;
  *) echo "FAIL (isa_run): MP_ISA=$level is not what the binary runs: $line"; exit 1 ;;
esac
MP_ISA=$level; export MP_ISA
exec "$@"
