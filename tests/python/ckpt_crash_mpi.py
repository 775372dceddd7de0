#!/usr/bin/python3
"""tests/python/ckpt_crash_mpi.py — crash safety of a multi-rank save.

For each crash point of the commit protocol: saves step 1 with N ranks, then kills the job while it
saves step 2 (the fault ckpt_crash_at makes the chosen ranks raise SIGKILL; mpiexec then takes the others
down), and checks with tests/tool_ckpt_mpi check, on N ranks and on a different world size, that
ckpt_find_latest picks the newest complete checkpoint (step 1, or step 2 once the rename happened) and
that it loads and verifies cleanly. Exit status 0 on success, 1 on a failed check.
"""
import argparse
import os
import shutil
import subprocess
import sys

# (crash point, rank to kill or None for every rank, async save, expected step after the crash)
CASES = [
    ("during_rank_files", None, False, 1),
    ("during_rank_files", "2", False, 1),
    ("during_rank_files", "1", True, 1),
    ("after_rank_files", None, False, 1),
    ("before_index", None, False, 1),
    ("after_index", None, False, 1),
    ("after_rename", None, False, 2),
    ("after_latest", None, False, 2),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--np", type=int, default=4)
    a = ap.parse_args()
    base_env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    base_env.pop("MP_FAULT", None)

    def mpi(np_, args, env=None, quiet=False):
        cmd = [a.mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
               "-x", "MP_FAULT", a.tool] + args
        e = dict(base_env, MP_FAULT="")
        if env:
            e.update(env)
        out = subprocess.DEVNULL if quiet else None
        return subprocess.run(cmd, env=e, stdout=out, stderr=out, timeout=300).returncode

    fails = 0
    for point, rank, is_async, want in CASES:
        root = os.path.join(a.workdir, f"{point}_{rank}_{int(is_async)}")
        shutil.rmtree(root, ignore_errors=True)
        label = f"{point} (rank {rank or 'all'}{', async' if is_async else ''})"
        if mpi(a.np, ["save", root, "1"]) != 0:
            print(f"FAIL {label}: saving step 1", file=sys.stderr)
            fails += 1
            continue
        env = {"MP_FAULT": f"ckpt_crash_at:{point}" + (f",ckpt_crash_rank:{rank}" if rank else "")}
        rc = mpi(a.np, ["save", root, "2"] + (["--async"] if is_async else []), env=env, quiet=True)
        if rc == 0:
            print(f"FAIL {label}: the save of step 2 was not killed", file=sys.stderr)
            fails += 1
            continue
        partial = os.path.exists(os.path.join(root, "step_00000002.partial"))
        complete = os.path.exists(os.path.join(root, "step_00000002"))
        if complete != (want == 2) or (want == 1 and not partial):
            print(f"FAIL {label}: partial={partial} complete={complete}", file=sys.stderr)
            fails += 1
        for np_ in (a.np, max(1, a.np - 1)):
            if mpi(np_, ["check", root, str(want)]) != 0:
                print(f"FAIL {label}: check on {np_} ranks", file=sys.stderr)
                fails += 1
        print(f"ok   {label}: resumes from step {want}")
    print("ckpt_crash_mpi:", "FAILED" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
