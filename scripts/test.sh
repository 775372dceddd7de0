#!/usr/bin/env bash
# scripts/test.sh — the whole test suite from a fresh machine: installs the packages, builds Release,
# runs every test (unit, CLI, multi-rank under mpiexec, PyTorch and h5py interop), then builds with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs the tests again there (unit and multi-rank; a few
# repetitive crash-injection entries excepted, see below), then runs the libFuzzer targets for a bounded
# time (clang build). .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OPENBLAS_NUM_THREADS=1
# Open MPI as root on a small machine: allow it, let ranks outnumber cores, and yield while waiting.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1
jobs=$(nproc)
# BUILD_DIR (default build) names the Release build; the sanitizer build goes to BUILD_DIR-asan.
build=${BUILD_DIR:-build}

echo "== build (Release)"
# With the CUDA toolkit present (nvcc on PATH or in /usr/local/cuda) this build compiles the CUDA backend
# in (cmake/cuda.cmake: MP_CUDA=AUTO), warnings as errors, and the whole CPU suite below runs in that
# binary; without it, the CPU-only build, as on any machine without the toolkit.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  ./scripts/build.sh "$build" -DMP_CUDA=ON -DMP_WERROR=ON
else
  ./scripts/build.sh "$build" -DMP_CUDA=OFF
fi
echo "== tests (Release)"
(cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 900)

echo "== build (ASan + UBSan)"
# (CPU only: ASan's shadow memory and the CUDA runtime's mappings do not mix)
./scripts/build.sh "$build-asan" -DMP_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMP_CUDA=OFF
echo "== tests (ASan + UBSan): unit and multi-rank"
# Every entry, mpiexec-launched ranks included, runs with leak checking on: tests/sanitize.cmake sets
# ASAN/LSAN/UBSAN_OPTIONS on each ctest entry (they reach the ranks through mpiexec's environment) and
# tests/lsan.supp suppresses Open MPI's, HDF5's and Criterion's own allocations.
# Left out here (they run in the Release pass above), to keep this pass to a few minutes on 2 cores:
#   ckpt_crash_mpi         SIGKILLs a 4-rank save at every point of the commit protocol, ~20 launches
#                          of the same save/load code that ckpt_mpi_np{1,3,4} and ckpt_h5py run here
#                          (~150 s alone under ASan);
#   train_fault_crash_{during_rank_files,after_rank_files,after_index,after_latest}
#                          the same kill at other points: crash_before_index (resume from the previous
#                          checkpoint past a .partial leftover) and crash_after_rename (resume from the
#                          new one, `latest` stale) cover both resume paths; diskfull, diskfull-continue
#                          and corrupt (the error paths) stay.
#   corruption_campaign, kill_campaign_*
#                          time-bounded campaigns that repeat verify/load/save thousands of times; their
#                          code paths run here in the views, crafted, fault and diskfull entries, and the
#                          fuzz targets below run the parsers under ASan + UBSan;
#   diskfull_sweep_{async,zstd,np2}
#                          the disk-full sweep of the other save modes (diskfull_sweep runs here, with 10
#                          points instead of 40: MP_DISKFULL_POINTS).
#   bad_input_ulimit_*     runs under `ulimit -v` / `ulimit -d`: ASan reserves terabytes of address space
#                          for its shadow memory and cannot start under such a limit.
#   cluster_hosts_*        two simulated hosts (Open MPI daemons started by a stand-in rsh agent with a
#                          cleared environment): the launch and placement are what it checks; the train,
#                          resume and reshard code it drives runs here in the other entries.
#   ckpt_nodefiles_np{4,8} files of several ranks on 4 and 8 processes (~160 s and ~240 s under ASan):
#                          ckpt_nodefiles_np2 runs the same script here (leaders, members, simulated
#                          nodes, the failure paths) and nodefiles_train the training and offline paths;
#                          more ranks add members to the same loops, not code.
#   ckpt_planned_same      the planned open against ckpt_open on 1-8 ranks (~120 s under ASan): its code runs
#                          here in ckpt_planned_load, resume_planned_load and test_ckpt_plan;
#   recompute_mesh_bitwise, family_{mistral,qwen2}, memory_plan_{qwen3,phi3}, gpu_e2e_dry_cpu_bf16
#                          more meshes and families through the same code: recomputation runs here in
#                          test_recompute and every mpi_llama entry, the families' layers in mpi_llama_family_*
#                          and family_{llama,qwen3,phi3} and the windows in family_*_window, the staged comm in
#                          staged_comm_cpu_meshes; the memory plans' peaks are not asserted under ASan anyway;
#   tokenizer_unorm, gguf_import, dcp_titan
#                          outside oracles over many inputs (every code point; llama.cpp's and torchtitan's
#                          files): the parsers they drive run here in tokenizer_compare, gguf_export,
#                          dcp_import and the fuzz targets below.
# Everything else runs: mpi_comm, mpi_llama (every mesh), ckpt_mpi, cli_mpi, resume_exact, the
# load-time and offline reshards (workers included), signals, run directories, h5py and torch interop.
asan_skip='^(ckpt_crash_mpi|train_fault_crash_(during_rank_files|after_rank_files|after_index|after_latest)'
asan_skip+='|corruption_campaign|kill_campaign.*|diskfull_sweep_(async|zstd|np2)|bad_input_ulimit_.*|cluster_hosts_.*'
asan_skip+='|ckpt_nodefiles_np(4|8)|ckpt_planned_same|recompute_mesh_bitwise|family_(mistral|qwen2)'
asan_skip+='|memory_plan_(qwen3|phi3)|gpu_e2e_dry_cpu_bf16|tokenizer_unorm|gguf_import|dcp_titan)$'
(cd "$build-asan" && MP_DISKFULL_POINTS=10 ctest --output-on-failure -j"$jobs" --timeout 900 -E "$asan_skip")

# libFuzzer targets (tests/fuzz/, docs/RELIABILITY.md "Fuzzing"): built with clang in $build-fuzz, each
# run for FUZZ_SECONDS (default 20: about 2 minutes with the build on 2 cores), seeded by the committed
# corpora. Longer runs on demand: ./scripts/fuzz.sh SECONDS.
echo "== fuzz (libFuzzer + ASan + UBSan, ${FUZZ_SECONDS:-20} s per target)"
FUZZ_BUILD="$build-fuzz" ./scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
