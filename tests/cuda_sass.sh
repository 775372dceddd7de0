#!/usr/bin/env bash
# tests/cuda_sass.sh BINARY... — the machine code of every CUDA kernel in each BINARY (its sm_80 and sm_90 SASS, read
# with cuobjdump) holds no float-to-small-integer conversion: no F2I to an 8- or 16-bit integer and no F2I
# from an f16/bf16 register. No kernel of core/cuda converts a float to such an integer, so one in the
# SASS is the compiler's, not ours: nvcc 13.0's ptxas compiles a memcpy of two bf16 to global memory into
# byte stores whose low byte it CONVERTS (F2I.U8.F16.TRUNC.NTZ: the bf16 bits read as an f16 number,
# truncated to 0..255) instead of storing it — the first H200 run's tensor-core attention, whose every bf16 output
# lost its low byte on the H200 (docs/CUDA.md, "Tensor-core attention: what went wrong"). No GPU needed.
#
# cuobjdump: $MP_CUOBJDUMP, else on PATH, under $CUDA_HOME or /usr/local/cuda*, else the copy Triton ships
# in the bench venv (scripts/bench_venv.sh); none found: exit 77 (skipped), saying so.
set -u
case=cuda_sass; . "$(dirname "$0")/lib.sh"
cuobjdump=${MP_CUOBJDUMP:-}
if [ -z "$cuobjdump" ]; then
  for c in "$(command -v cuobjdump 2>/dev/null)" "${CUDA_HOME:-/nonexistent}/bin/cuobjdump" /usr/local/cuda*/bin/cuobjdump \
           "$HOME"/.cache/meshpoint/bench-venv-*/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump; do
    if [ -n "$c" ] && [ -x "$c" ]; then cuobjdump=$c; break; fi
  done
fi
if [ -z "$cuobjdump" ]; then
  echo "SKIP: no cuobjdump (not on PATH, under \$CUDA_HOME or /usr/local/cuda*, nor in the bench venv's Triton)"
  exit 77
fi
sass=$(mktemp /tmp/mp_cuda_sass.XXXXXX)
trap 'rm -f "$sass"' EXIT
for bin in "$@"; do
  "$cuobjdump" -sass "$bin" > "$sass" 2>&1 || fail "$cuobjdump -sass $bin failed: $(tail -5 "$sass")"
  nfun=$(grep -c 'Function :' "$sass")
  [ "$nfun" -ge 20 ] || fail "$cuobjdump found only $nfun kernels in $bin (not a CUDA build?)"
  # the offending instructions, each with the kernel it is in (first 10)
  bad=$(awk '/Function :/ { fn = $3 }
             /F2I(\.[A-Z0-9]+)*\.(U8|S8|U16|S16|F16|BF16)[ .;]/ { n++; if (n <= 10) { sub(/^[ \t]*\/\*[0-9a-f]*\*\/[ \t]*/, ""); sub(/[ \t]*\/\*.*$/, ""); print fn ": " $0 } }
             END { if (n) print n " such instruction(s) in all" }' "$sass")
  [ -z "$bad" ] || fail "float-to-small-integer conversions in the SASS of $bin (a ptxas miscompile of bf16 byte stores; store whole 32-bit words instead):
$bad"
  echo "cuda_sass: $(basename "$bin"): $nfun kernels: no F2I to 8/16-bit integers, none from f16/bf16"
done
echo "cuda_sass: read with $cuobjdump"
