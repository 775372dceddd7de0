#!/usr/bin/env bash
# tests/cuda_module.sh MESHPOINT DATA CONFIG WORKDIR CASE — the CUDA backend is a module that only a CUDA
# device loads (core/cuda_module.h):
#   maps    (CUDA builds) every program beside the module that can load it exports the core functions the
#           module calls (nm); every CPU command (--version, data, train with a checkpoint, ckpt ls/verify, eval, sample,
#           init, reshard, export, import) runs under LD_DEBUG=libs, and no shared object it loads is
#           libcudart, libcublas(Lt), libnccl or the module; in a CUDA build, `train --device cuda` under
#           the same watch must load the module and libcudart (the watch can see them) and exit 2 with
#           CUDA's reason, creating nothing.
#   hidden  the binary without its CUDA: (1) copied to a folder with no module beside it, LD_LIBRARY_PATH
#           an empty folder: `--version` exits 0 saying why CUDA is unavailable (the module's path, or
#           "cuda not built in"), `--device cuda` exits 2 with that reason, a CPU step trains;
#           (2) CUDA builds, where `unshare --mount` is permitted: the build's binary with its module, the
#           CUDA toolkit's folders and /usr/local/lib's CUDA libraries overmounted (the module's ldd then
#           lacks libcudart): `--version` exits 0, `--device cuda` exits 2 with dlopen's message naming
#           the missing library, and a CPU step with a checkpoint trains and verifies. Without unshare
#           permission part (2) is reported as not run (part (1) still runs).
set -u
bin=$1; data=$2; config=$3; work=$4; what=$5
case=cuda_module_$what; . "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
"$bin" --version > "$work/version" 2>&1 || fail "--version exited $?: $(cat "$work/version")"
cuda=1; grep -q 'cuda not built in' "$work/version" && cuda=0
module="$(dirname "$(readlink -f "$bin")")/libmeshpoint-cuda.so"
if [ $cuda = 1 ] && [ ! -f "$module" ]; then fail "a CUDA build without its module beside the binary: $module"; fi
cuda_libs='libcudart|libcublas|libnccl|libmeshpoint-cuda'

# watch NAME CODE CMD...: runs CMD under LD_DEBUG=libs (every object the loader maps, dlopen included),
# which must exit CODE; the objects it loaded are left in $work/NAME.libs.
watch() {
  local name=$1 code=$2; shift 2
  rm -f "$work/$name.ld".*
  LD_DEBUG=libs LD_DEBUG_OUTPUT="$work/$name.ld" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  [ $rc -eq "$code" ] || fail "$name: exit $rc, not $code: $(tail -20 "$work/$name.log")"
  cat "$work/$name.ld".* 2>/dev/null | sed -n 's/.*calling init: //p' | sort -u > "$work/$name.libs"
  [ -s "$work/$name.libs" ] || fail "$name: LD_DEBUG recorded no library: the watch does not work here"
}

if [ "$what" = maps ]; then
  if [ $cuda = 1 ]; then   # every program that can load the module exports the core functions it calls
    nm -D -u "$module" | awk '$2 ~ /^mp_/ { print $2 }' | sort -u > "$work/module_needs"
    [ -s "$work/module_needs" ] || fail "nm lists no mp_* symbol the module takes from core"
    n=0
    for p in "$(dirname "$module")"/*; do
      [ -f "$p" ] && [ -x "$p" ] || continue
      nm -D --defined-only "$p" 2> /dev/null | awk '{ print $3 }' | sort -u > "$work/exports"
      grep -qx mp_cuda_module_load "$work/exports" || continue   # cannot load it
      n=$((n + 1))
      missing=$(comm -23 "$work/module_needs" "$work/exports" | tr '\n' ' ')
      [ -z "$missing" ] || fail "$(basename "$p") can load the CUDA module but does not export what it calls: $missing"
    done
    [ $n -gt 5 ] || fail "only $n programs beside the module can load it"
    echo "$n programs can load the module; each exports the $(wc -l < "$work/module_needs") core functions it calls"
  fi
  run="$work/run"
  watch version 0 "$bin" --version
  watch data 0 "$bin" data --out "$work/data" --name t "$(dirname "$0")/README.md"
  watch train 0 "$bin" train --config "$config" --train-data "$data" --steps 2 --ckpt-every 2 --log-every 1 \
    --device cpu --run-dir "$run"
  ck="$run/checkpoints/step_00000002"
  watch ckpt_ls 0 "$bin" ckpt ls "$run/checkpoints"
  watch ckpt_verify 0 "$bin" ckpt verify "$ck"
  watch eval 0 "$bin" eval --checkpoint "$ck" --data "$data" --batches 1 --device cpu
  watch sample 0 "$bin" sample --checkpoint "$ck" --ids --prompt "1 2" --tokens 2 --device cpu
  watch init 0 "$bin" init --config "$config" --tp 1 --dp 1 --out "$work/init"
  watch reshard 0 "$bin" reshard "$ck" --tp 2 --dp 1 --out "$work/reshard"
  watch export 0 "$bin" export "$ck" --out "$work/hf"
  watch import 0 "$bin" import "$work/hf" --out "$work/imported"
  n=0
  for f in "$work"/*.libs; do
    n=$((n + 1))
    if grep -E "$cuda_libs" "$f" > "$work/bad"; then
      fail "$(basename "$f" .libs) on the CPU loaded CUDA: $(tr '\n' ' ' < "$work/bad")"
    fi
  done
  echo "$n CPU commands ran; none loaded $cuda_libs ($(wc -l < "$work/train.libs") objects in train)"
  if [ $cuda = 1 ]; then
    devices=$(grep '^devices:' "$work/version")
    case "$devices" in *"cuda ("*) echo "a GPU is here ($devices): the refusal part does not apply"; exit 0 ;; esac
    watch cuda 2 "$bin" train --config "$config" --train-data "$data" --steps 1 --device cuda --run-dir "$work/cuda_run"
    grep -q 'device cuda: ' "$work/cuda.log" || fail "--device cuda did not say why: $(cat "$work/cuda.log")"
    grep -q 'libmeshpoint-cuda.so' "$work/cuda.libs" && grep -q 'libcudart' "$work/cuda.libs" ||
      fail "--device cuda loaded no module or libcudart (the watch cannot see them): $(tr '\n' ' ' < "$work/cuda.libs")"
    [ ! -e "$work/cuda_run" ] || fail "--device cuda created its run directory"
    echo "--device cuda loads the module and libcudart, and refuses (exit 2): $(grep -m1 'device cuda' "$work/cuda.log")"
  fi
  exit 0
fi

[ "$what" = hidden ] || fail "unknown case $what (maps or hidden)"
# (1) the binary alone, in a folder without the module, and an empty library path
mkdir -p "$work/alone" "$work/empty"
cp "$bin" "$work/alone/meshpoint"
alone="$work/alone/meshpoint"
export LD_LIBRARY_PATH="$work/empty"
expect 0 '^devices: cpu' "$work/alone_version.log" "$alone" --version
if [ $cuda = 1 ]; then
  grep -q "no usable GPU: the CUDA module $work/alone/libmeshpoint-cuda.so: No such file" "$work/alone_version.log" ||
    fail "--version does not say the module is missing: $(cat "$work/alone_version.log")"
  want="cannot load the CUDA module $work/alone/libmeshpoint-cuda.so"
else
  grep -q 'cuda not built in' "$work/alone_version.log" || fail "--version: $(cat "$work/alone_version.log")"
  want="meshpoint was built without CUDA"
fi
expect 2 "$want" "$work/alone_cuda.log" "$alone" train --config "$config" --train-data "$data" --steps 1 --device cuda \
  --run-dir "$work/alone_cuda"
[ ! -e "$work/alone_cuda" ] || fail "--device cuda created its run directory"
expect 0 'step +1/1 ' "$work/alone_cpu.log" "$alone" train --config "$config" --train-data "$data" --steps 1 --log-every 1 \
  --run-dir "$work/alone_cpu"
echo "without the module: $(grep '^devices:' "$work/alone_version.log"); --device cuda exits 2 ($want); a CPU step trains"
unset LD_LIBRARY_PATH
[ $cuda = 1 ] || exit 0

# (2) the module present, CUDA's libraries hidden in a private mount namespace
if ! unshare --mount true 2> "$work/unshare.err"; then
  echo "NOT RUN: part (2), unshare --mount is not permitted here: $(cat "$work/unshare.err")"
  exit 0
fi
cat > "$work/hidden.sh" <<'EOF'
set -u
work=$1 bin=$2 module=$3 config=$4 data=$5
for d in /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && [ ! -L "$d" ] && mount --bind "$work/empty" "$d"; done
for f in /usr/local/lib/libcudart* /usr/local/lib/libcublas* /usr/local/lib/libnccl* /usr/lib/x86_64-linux-gnu/libcudart* \
         /usr/lib/x86_64-linux-gnu/libcublas* /usr/lib/x86_64-linux-gnu/libnccl*; do
  [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
done
ldd "$module" > "$work/hidden_ldd.log" 2>&1
echo "module ldd: $(grep -c 'not found' "$work/hidden_ldd.log") not found"
"$bin" --version > "$work/hidden_version.log" 2>&1; echo "version exit $?"
"$bin" train --config "$config" --train-data "$data" --steps 1 --device cuda --run-dir "$work/hidden_cuda" \
  > "$work/hidden_cuda.log" 2>&1; echo "cuda exit $?"
"$bin" train --config "$config" --train-data "$data" --steps 2 --ckpt-every 2 --device cpu --run-dir "$work/hidden_cpu" \
  > "$work/hidden_cpu.log" 2>&1 && "$bin" ckpt verify "$work/hidden_cpu/checkpoints/step_00000002" >> "$work/hidden_cpu.log" 2>&1
echo "cpu exit $?"
EOF
unshare --mount --propagation private bash "$work/hidden.sh" "$work" "$bin" "$module" "$config" "$data" > "$work/hidden.log" 2>&1
cat "$work/hidden.log"
grep -Eq '^module ldd: [1-9]' "$work/hidden.log" || fail "CUDA's libraries could not be hidden: $(cat "$work/hidden_ldd.log")"
grep -q '^version exit 0$' "$work/hidden.log" || fail "--version without CUDA's libraries: $(cat "$work/hidden_version.log")"
grep -q '^devices: cpu; cuda built in, no usable GPU: ' "$work/hidden_version.log" ||
  fail "--version does not say why CUDA is unavailable: $(cat "$work/hidden_version.log")"
grep -q '^cuda exit 2$' "$work/hidden.log" || fail "--device cuda without CUDA's libraries: $(cat "$work/hidden_cuda.log")"
grep -Eq "cannot load the CUDA module $module: (libcudart|libcublas|libnccl)[^ ]*: " \
  "$work/hidden_cuda.log" || fail "--device cuda does not name the missing CUDA library: $(cat "$work/hidden_cuda.log")"
[ ! -e "$work/hidden_cuda" ] || fail "--device cuda created its run directory"
grep -q '^cpu exit 0$' "$work/hidden.log" || fail "CPU training without CUDA's libraries: $(tail -20 "$work/hidden_cpu.log")"
echo "CUDA's libraries hidden: $(grep '^devices:' "$work/hidden_version.log")"
echo "--device cuda: $(grep -m1 'device cuda' "$work/hidden_cuda.log")"
echo "a CPU run with a checkpoint trained and verified"
