#!/bin/bash
# tests/cluster_hosts.sh MESHPOINT DATA CONFIG WORKDIR CASE MPIEXEC [MPIEXEC ARGS...] — meshpoint on two
# hosts, as far as one machine can show it (docs/CLUSTER.md, "What was checked"). Open MPI 4.x only
# (other launchers: skipped, exit 77).
#
# Two hosts on one machine: `mpirun --host nodea:2,nodeb:2` with an rsh agent (written below) that
# "logs in" to nodea / nodeb by running Open MPI's daemon here, as ssh would run it there: with an
# empty environment (only PATH and HOME; what a rank needs comes through `-x` or OMPI_MCA_*), and with
# a session directory of its own per host (TMPDIR), so Open MPI sees two nodes: ranks of one host
# talk through shared memory, ranks of different hosts through TCP (over loopback), and
# MPI_COMM_TYPE_SHARED splits the world into the two hosts. (`--host localhost:2,127.0.0.1:2` is one
# node to Open MPI: both names are this machine.) With NODE_LOCAL=DIR in mpirun's environment, host
# nodeb gets an empty tmpfs over DIR in a mount namespace of its own: DIR is node-local storage there.
#
# Cases (each a ctest entry, tests/cluster_hosts.cmake):
#   train        the launch itself: the environment reaches ranks only with -x; ranks fill a host before
#                the next (consecutive ranks per host: tp groups inside a host), --map-by node
#                alternates; a tp 2 x dp 2 run over the two hosts exits 0 and leaves checkpoints that
#                `ckpt verify` accepts; the memory plan counts the ranks of each host (2 per host here;
#                a bound 4 ranks of one host exceed is met by 2 per host on two hosts)
#   exit_status  mpirun's exit status is meshpoint's: a bad flag value exits 2 (one message), a
#                failure on one host's rank only (the fault fail_rank, reshard's source) exits 2 with one
#                message naming that rank, a rank killed by SIGKILL makes mpirun exit 137 naming the
#                rank and host
#   preempt      SIGTERM to one rank on nodeb (as Slurm signals a job step's tasks): every rank stops at
#                the same step with a checkpoint and exits 0, so mpirun exits 0; `--resume` over the two
#                hosts continues from it and finishes
#   node_local   the checkpoint root on node-local storage: train fails its first save (exit 1, the
#                rank of the other host and "No such file or directory" named, nothing left behind);
#                --resume, reshard's source and reshard's --out there fail naming the rank; needs a
#                mount namespace (unshare -m + mount, root): else skipped (exit 77)
set -u
bin=$1; data=$2; config=$3; work=$4; case=$5; shift 5
mpiexec=("$@")
. "$(dirname "$0")/lib.sh"   # fail, expect
[ ${#mpiexec[@]} -ge 1 ] || fail "usage: cluster_hosts.sh MESHPOINT DATA CONFIG WORKDIR CASE MPIEXEC [ARGS...]"
ver=$("${mpiexec[0]}" --version 2>&1 | head -1)
case "$ver" in
*"Open MPI"*" 4."* | *"OpenRTE"*" 4."*) ;;
*) echo "skipped ($case): two hosts on one machine need Open MPI 4.x's rsh launcher; ${mpiexec[0]} is: $ver"; exit 77 ;;
esac
# Each host's TMPDIR must choose its session directory: an orte_tmpdir_base in the environment (as
# tests/tmpdirs.cmake sets for every entry) travels to the daemons as an MCA parameter and would give both
# hosts one directory. mpirun's own stays the entry's, through TMPDIR.
unset OMPI_MCA_orte_tmpdir_base PRTE_MCA_prte_tmpdir_base
rm -rf "$work"; mkdir -p "$work/nodes"
work=$(cd "$work" && pwd)

# the rsh agent: `fake_ssh [ssh options] HOST COMMAND...`
cat >"$work/fake_ssh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
node="$work/nodes/\$host"
mkdir -p "\$node"
set -- env -i PATH="\$PATH" HOME="\${HOME:-/}" TMPDIR="\$node" OMPI_MCA_btl_vader_backing_directory="\$node" /bin/sh -c "\$*"
if [ -n "\${NODE_LOCAL:-}" ] && [ "\$host" = nodeb ]; then
    exec unshare -m --propagation private /bin/sh -c 'mount -t tmpfs none "\$0" && exec "\$@"' "\$NODE_LOCAL" "\$@"
fi
exec "\$@"
EOF
chmod +x "$work/fake_ssh"

# the launcher of every run below: two hosts of 2 slots; the sanitizer build's options travel with -x
fwd=(-x OPENBLAS_NUM_THREADS=1)
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && fwd+=(-x "$v"); done
mpi=(timeout 120 "${mpiexec[@]}" --mca plm_rsh_agent "$work/fake_ssh" --mca btl_tcp_if_include lo
     --mca oob_tcp_if_include lo --host nodea:2,nodeb:2 -np 4 "${fwd[@]}")
tiny=(--config "$config" --log-every 0)
nerrors() { grep -c 'meshpoint [a-z ]*: error:' "$1"; }
# the bytes of a size as meshpoint prints it ("957.0 KiB")
bytes() { awk -v n="$1" -v u="$2" 'BEGIN { m = u == "GiB" ? 2^30 : u == "MiB" ? 2^20 : u == "KiB" ? 2^10 : 1; printf "%d", n * m }'; }

case "$case" in
train)
    # the environment: only what -x names reaches the ranks (as with ssh); OMPI_MCA_* always does
    FOO=1 OMPI_MCA_mpi_yield_when_idle=1 "${mpi[@]}" sh -c 'echo "foo=[${FOO:-}] mca=[${OMPI_MCA_mpi_yield_when_idle:-}]"' \
        >"$work/env.log" 2>&1 || fail "launching on two hosts: $(cat "$work/env.log")"
    [ "$(grep -c '^foo=\[\] mca=\[1\]$' "$work/env.log")" -eq 4 ] ||
        fail "without -x the ranks should not see FOO, and should see OMPI_MCA_*: $(cat "$work/env.log")"
    FOO=1 "${mpi[@]}" -x FOO sh -c 'echo "foo=[${FOO:-}]"' >"$work/env_x.log" 2>&1 || fail "$(cat "$work/env_x.log")"
    [ "$(grep -c '^foo=\[1\]$' "$work/env_x.log")" -eq 4 ] || fail "-x FOO did not reach every rank: $(cat "$work/env_x.log")"
    # rank placement (rank:host, the host from the per-host TMPDIR): a host is filled before the next
    where='echo "$OMPI_COMM_WORLD_RANK:${TMPDIR##*/}"'
    # (only the rank:host lines: Open MPI's rsh launcher may add a warning of its own, e.g. a setpgid race)
    got=$("${mpi[@]}" sh -c "$where" 2>&1 | grep -E '^[0-9]+:node[ab]$' | LC_ALL=C sort | tr '\n' ' ')
    [ "$got" = "0:nodea 1:nodea 2:nodeb 3:nodeb " ] || fail "default placement: $got"
    got=$("${mpi[@]}" --map-by node sh -c "$where" 2>&1 | grep -E '^[0-9]+:node[ab]$' | LC_ALL=C sort | tr '\n' ' ')
    [ "$got" = "0:nodea 1:nodeb 2:nodea 3:nodeb " ] || fail "--map-by node placement: $got"
    # tp 2 x dp 2 over the two hosts, a checkpoint every 2 steps
    expect 0 "2 rank\(s\) on this host" "$work/train.log" \
        "${mpi[@]}" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 4 --ckpt-every 2 --run-dir "$work/run"
    grep -q "done: 4 steps" "$work/train.log" || fail "the run did not finish: $(cat "$work/train.log")"
    [ "$(cat "$work/run/checkpoints/latest")" = step_00000004 ] || fail "latest: $(cat "$work/run/checkpoints/latest")"
    for s in 2 4; do
        expect 0 "^ok: " "$work/verify_$s.log" "$bin" ckpt verify "$work/run/checkpoints/step_0000000$s"
    done
    grep -Eq '"tp":[[:space:]]*2' <("$bin" ckpt show "$work/run" --json) || fail "the checkpoint's mesh is not tp 2"
    # the memory plan is per host: a bound between 2 and 4 ranks' plans holds for 2 ranks per host and
    # refuses 4 ranks on one host (this machine, without the fake hosts)
    read -r n u < <(grep -o 'largest rank [0-9.]* [KMG]*i*B' "$work/train.log" | awk '{print $3, $4}')
    [ -n "${n:-}" ] || fail "no memory plan line: $(cat "$work/train.log")"
    avail=$(( $(bytes "$n" "$u") * 3 ))
    expect 0 "2 rank\(s\) on this host" "$work/plan2.log" env MP_FAULT=mem_available:$avail \
        "${mpi[@]}" -x MP_FAULT "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 1 \
        --run-dir "$work/plan2"
    expect 2 "the 4 rank\(s\) on this host need" "$work/plan1.log" env MP_FAULT=mem_available:$avail \
        timeout 120 "${mpiexec[@]}" -np 4 -x OPENBLAS_NUM_THREADS=1 -x MP_FAULT "$bin" train "${tiny[@]}" \
        --train-data "$data" --tp 2 --dp 2 --steps 1 --run-dir "$work/plan1"
    echo "ok ($case): 4 ranks on two hosts trained and checkpointed (ckpt verify: ok); placement and the per-host memory plan as documented"
    ;;
exit_status)
    expect 2 "--steps" "$work/flag.log" "${mpi[@]}" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 \
        --steps abc --run-dir "$work/flag"
    [ "$(nerrors "$work/flag.log")" -eq 1 ] || fail "a bad flag: expected one error line: $(cat "$work/flag.log")"
    "${mpi[@]}" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 2 --ckpt-every 2 \
        --run-dir "$work/run" >"$work/train.log" 2>&1 || fail "training: $(cat "$work/train.log")"
    # a failure on one rank of nodeb only: agreed, so every rank exits 2
    expect 2 "\[rank 2\] reshard: source: simulated failure on rank 2" "$work/rank.log" env MP_FAULT=fail_rank:2 \
        "${mpi[@]}" -x MP_FAULT "$bin" reshard "$work/run" --tp 1 --dp 1 --out "$work/out"
    [ "$(nerrors "$work/rank.log")" -eq 1 ] || fail "one rank failing: expected one error line: $(cat "$work/rank.log")"
    [ ! -e "$work/out" ] && [ ! -e "$work/out.partial" ] || fail "a refused reshard left its output behind"
    # rank 3 (nodeb) SIGKILLed once training runs: the launcher reports the signal, 128 + 9
    "${mpi[@]}" sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then
            (m=$0/metrics.jsonl; for _ in $(seq 1200); do
                 [ -s "$m" ] && [ "$(wc -l < "$m")" -ge 3 ] && { kill -KILL $$; break; }; sleep 0.05; done) &
        fi; exec "$@"' "$work/killed" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 1000000 \
        --run-dir "$work/killed" >"$work/kill.log" 2>&1
    rc=$?
    [ $rc -eq 137 ] || fail "a rank killed by SIGKILL: mpirun exit $rc, expected 137: $(tail -20 "$work/kill.log")"
    grep -Eq "rank 3 .* on node nodeb exited on signal 9" "$work/kill.log" || fail "the killed rank is not named: $(tail -20 "$work/kill.log")"
    echo "ok ($case): mpirun exits 2 (bad flag), 2 (one rank failed, one message), 137 (a rank SIGKILLed)"
    ;;
preempt)
    args=(train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --run-dir "$work/run")
    mkdir -p "$work/pids"
    "${mpi[@]}" sh -c 'echo $$ > "$0/$OMPI_COMM_WORLD_RANK"; exec "$@"' "$work/pids" "$bin" "${args[@]}" --steps 1000000 \
        >"$work/stop.log" 2>&1 &
    job=$!
    for _ in $(seq 600); do   # until training runs (a few steps in the metrics file) or the job ended
        [ -s "$work/run/metrics.jsonl" ] && [ "$(wc -l < "$work/run/metrics.jsonl")" -ge 3 ] && break
        kill -0 $job 2>/dev/null || break
        sleep 0.05
    done
    [ -s "$work/pids/3" ] && [ -s "$work/run/metrics.jsonl" ] || { wait $job; fail "training did not start: $(cat "$work/stop.log")"; }
    kill -TERM "$(cat "$work/pids/3")"
    wait $job; rc=$?
    [ $rc -eq 0 ] || fail "SIGTERM to rank 3: mpirun exit $rc, expected 0: $(tail -20 "$work/stop.log")"
    # rank 0 prints the line; it says "by signal" only when rank 0 itself got the signal
    step=$(grep -Eo "stopped (by signal )?after step [0-9]+" "$work/stop.log" | grep -o "[0-9]*$")
    [ -n "$step" ] || fail "no clean stop: $(tail -20 "$work/stop.log")"
    dir=$(printf "step_%08d" "$step")
    [ "$(cat "$work/run/checkpoints/latest")" = "$dir" ] || fail "latest does not name $dir"
    expect 0 "^ok: " "$work/verify.log" "$bin" ckpt verify "$work/run/checkpoints/$dir"
    # the requeued job: the same command with --resume
    expect 0 "resumed from .*$dir at step $step" "$work/resume.log" "${mpi[@]}" "$bin" "${args[@]}" --steps $((step + 2)) --resume
    grep -q "done: $((step + 2)) steps" "$work/resume.log" || fail "the resumed run did not finish: $(cat "$work/resume.log")"
    echo "ok ($case): SIGTERM to one rank stopped all 4 after step $step with a checkpoint (mpirun exit 0); --resume finished step $((step + 2))"
    ;;
node_local)
    mkdir -p "$work/probe" "$work/local"
    if ! unshare -m --propagation private sh -c "mount -t tmpfs none '$work/probe'" 2>/dev/null; then
        echo "skipped ($case): no mount namespace here (unshare -m and mount need root)"; exit 77
    fi
    loc=$work/local
    # a fresh run: the first save fails on nodeb's ranks, which do not see the directory rank 0 created
    expect 1 "\[rank 2\] creating .*step_00000002.partial/rank_00002.h5: .*No such file or directory" "$work/save.log" \
        env NODE_LOCAL="$loc" "${mpi[@]}" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 4 \
        --ckpt-every 2 --run-dir "$loc/run"
    [ "$(nerrors "$work/save.log")" -eq 1 ] || fail "a failed save: expected one error line: $(cat "$work/save.log")"
    left=$(ls -A "$loc/run/checkpoints" | grep -v '^\.lock$')
    [ -z "$left" ] || fail "the failed save left $left in $loc/run/checkpoints"
    # a checkpoint only rank 0's host sees: resuming, and reshard reading it, stop naming the rank
    "${mpi[@]}" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 2 --ckpt-every 2 \
        --run-dir "$loc/run2" >"$work/run2.log" 2>&1 || fail "training on shared storage: $(cat "$work/run2.log")"
    # (the collective open agrees on rank 2's error before the CLI's own agreement, which then reports
    # it through rank 0: "[rank 0] resuming: [rank 2] checkpoint directory ... does not exist")
    expect 2 "\[rank 2\] (resuming: )?checkpoint directory .*step_00000002 does not exist" "$work/resume.log" \
        env NODE_LOCAL="$loc" "${mpi[@]}" "$bin" train "${tiny[@]}" --train-data "$data" --tp 2 --dp 2 --steps 4 \
        --run-dir "$loc/run2" --resume
    expect 2 "\[rank 2\] .*run2.*(no such file|does not exist)" "$work/src.log" \
        env NODE_LOCAL="$loc" "${mpi[@]}" "$bin" reshard "$loc/run2" --tp 1 --dp 1 --out "$work/out"
    [ ! -e "$work/out" ] || fail "a refused reshard wrote $work/out"
    # reshard from shared storage into node-local storage: nodeb's workers cannot create their rank
    # files in the directory rank 0 created; nothing is left behind
    cp -r "$loc/run2" "$work/shared_run"
    expect 1 "\[rank 2\] creating .*out.partial/rank_00002.h5: .*No such file or directory" "$work/out.log" \
        env NODE_LOCAL="$loc" "${mpi[@]}" "$bin" reshard "$work/shared_run" --tp 2 --dp 2 --out "$loc/out"
    [ ! -e "$loc/out" ] && [ ! -e "$loc/out.partial" ] || fail "a failed reshard left $loc/out(.partial) behind"
    echo "ok ($case): node-local checkpoint storage fails the first save (exit 1), resume and reshard name the rank"
    ;;
*) fail "unknown case" ;;
esac
