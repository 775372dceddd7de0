#!/usr/bin/python3
"""tests/python/corruption_campaign.py — damaged copies of a checkpoint, classified.

    corruption_campaign.py --bin MESHPOINT --equal TOOL_CKPT_EQUAL --ckpt DIR --other DIR --data FILE
                           --workdir DIR [--seconds S] [--seed N] [--plugins DIR]

Each trial copies the checkpoint DIR (a training checkpoint written by 2 ranks) and damages the copy in
one way, chosen by a seeded RNG (the seed is printed; --seed reproduces a run):
    flip_index      one bit of index.h5 (tables, metadata, views, HDF5 structures)
    flip_rank_meta  one bit in the first 16 KiB of a rank file (superblock, object headers)
    flip_rank_data  one bit anywhere in a rank file (mostly tensor data and tile checksums)
    truncate        a file cut at a random length
    delete          a file removed
    swap            the two rank files exchanged
    other_step      one file replaced by the same file of another step's checkpoint (--other)
and classifies the copy:
    detected  `meshpoint ckpt verify` exits 1 (or 2) naming a problem; then `meshpoint eval` on it must
              either refuse or give exactly the reference loss (a load may skip damage outside the
              model weights, never return wrong weights); when verify names only view problems,
              `ckpt repair-views` must repair it so that h5py reads every view equal to the reference
    benign    verify passes, the data is bitwise the reference's (tool_ckpt_equal) and h5py reads
              every view equal to the reference (the damage hit padding or unused bytes)
    pending   view.h5 deleted: verify passes noting "views pending" (the state a training save
              leaves before its background view write; not a failure), the data is the reference's, and
              `ckpt repair-views` must write view.h5 so that h5py reads every view equal to the reference
    missed    verify passes but the data or a view differs  -> failure
    crash     any meshpoint process killed by a signal, or a timeout -> failure
h5py reads views in a subprocess, so a libhdf5 crash on a damaged view cannot stop the campaign (such a
copy must have been detected by verify; h5py crashing on a copy verify passed counts as missed).
Exit 0 when no trial is missed or crashed; prints the counts per kind and class, and a JSON summary line.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

VIEW_READER = r'''
import sys, h5py, numpy as np
path, ref = sys.argv[1], sys.argv[2]
refd = np.load(ref)
with h5py.File(path + "/index.h5", "r") as f:
    names = []
    f["view"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    if sorted(names) != sorted(refd.files):
        print("view names differ"); sys.exit(3)
    for n in names:
        a = f["view/" + n][()]
        if a.dtype != refd[n].dtype or a.shape != refd[n].shape or a.tobytes() != refd[n].tobytes():
            print("view", n, "differs"); sys.exit(3)
print("views equal")
'''


def run(cmd, timeout=120, env=None):
    """(returncode, combined output); returncode -9999 on timeout."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return -9999, "timeout"


def eval_loss(evalcmd, path, env):
    """(returncode, loss or None, output) of `meshpoint eval --json` on path."""
    try:
        p = subprocess.run(evalcmd + [path], capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return -9999, None, "timeout"
    loss = json.loads(p.stdout)["loss"] if p.returncode == 0 else None
    return p.returncode, loss, p.stdout + p.stderr


def crashed(rc):
    return rc < 0 or rc in (134, 136, 139)


def files_of(ckpt):
    return sorted(f for f in os.listdir(ckpt) if f.endswith(".h5"))


def flip(path, lo, hi, rng):
    size = os.path.getsize(path)
    hi = min(hi, size)
    off = rng.randrange(lo, hi)
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)[0]
        f.seek(off)
        f.write(bytes([b ^ (1 << rng.randrange(8))]))
    return "%s@%d" % (os.path.basename(path), off)


def damage(copy, other, kind, rng):
    """Applies one damage of `kind` to the copy; returns a description."""
    names = files_of(copy)
    ranks = [n for n in names if n.startswith("rank_")]
    if kind == "flip_index":
        return flip(os.path.join(copy, "index.h5"), 0, 1 << 62, rng)
    if kind == "flip_rank_meta":
        return flip(os.path.join(copy, rng.choice(ranks)), 0, 16384, rng)
    if kind == "flip_rank_data":
        return flip(os.path.join(copy, rng.choice(ranks)), 0, 1 << 62, rng)
    if kind == "truncate":
        n = rng.choice(names)
        p = os.path.join(copy, n)
        size = os.path.getsize(p)
        keep = rng.randrange(0, size)
        os.truncate(p, keep)
        return "%s cut to %d of %d" % (n, keep, size)
    if kind == "delete":
        n = rng.choice(names)
        os.remove(os.path.join(copy, n))
        return "%s deleted" % n
    if kind == "swap":
        a, b = os.path.join(copy, ranks[0]), os.path.join(copy, ranks[1])
        os.rename(a, a + ".tmp")
        os.rename(b, a)
        os.rename(a + ".tmp", b)
        return "%s <-> %s" % (ranks[0], ranks[1])
    if kind == "other_step":
        n = rng.choice(names)
        shutil.copyfile(os.path.join(other, n), os.path.join(copy, n))
        return "%s from %s" % (n, os.path.basename(other.rstrip("/")))
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--equal", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--other", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--plugins", default="")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("MP_CAMPAIGN_SECONDS", "60")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("MP_CAMPAIGN_SEED", str(int(time.time()) % 100000))))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print("corruption campaign: seed %d, %.0f s (MP_CAMPAIGN_SEED / MP_CAMPAIGN_SECONDS)" % (a.seed, a.seconds))
    env = dict(os.environ)
    if a.plugins:
        env["HDF5_PLUGIN_PATH"] = a.plugins
    evalcmd = [a.bin, "eval", "--data", a.data, "--batches", "1", "--json", "--checkpoint"]
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    # the reference: its loss and every view, read by h5py from the intact checkpoint
    rc, ref_loss, out = eval_loss(evalcmd, a.ckpt, env)
    if rc != 0:
        print("reference eval failed:", out); return 1
    ref_views = os.path.join(a.workdir, "ref_views.npz")
    rc, out = run(["/usr/bin/python3", "-c",
                   "import sys,h5py,numpy as np\n"
                   "f=h5py.File(sys.argv[1]+'/index.h5','r'); d={}\n"
                   "f['view'].visititems(lambda n,o: d.__setitem__(n,o[()]) if isinstance(o,h5py.Dataset) else None)\n"
                   "np.savez(sys.argv[2], **d)", a.ckpt, ref_views], env=env)
    if rc != 0:
        print("reading the reference views failed:", out); return 1

    def views_equal(path):
        rc, out = run(["/usr/bin/python3", "-c", VIEW_READER, path, ref_views], env=env)
        return rc == 0, out.strip()[-200:]

    kinds = ["flip_index", "flip_rank_meta", "flip_rank_data", "truncate", "delete", "swap", "other_step"]
    counts = {k: {"trials": 0, "detected": 0, "benign": 0, "pending": 0, "missed": 0, "crash": 0, "repaired": 0}
              for k in kinds}
    failures = []
    t_end = time.time() + a.seconds
    trial = 0
    while time.time() < t_end or trial < len(kinds):
        kind = kinds[trial % len(kinds)] if trial < len(kinds) else rng.choice(kinds)
        copy = os.path.join(a.workdir, "copy")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(a.ckpt, copy)
        what = damage(copy, a.other, kind, rng)
        c = counts[kind]
        c["trials"] += 1
        trial += 1
        rc, out = run([a.bin, "ckpt", "verify", copy], env=env)
        if crashed(rc):
            c["crash"] += 1
            failures.append("CRASH verify rc %d: %s %s: %s" % (rc, kind, what, out[-300:]))
            continue
        if rc != 0:
            c["detected"] += 1
            # a load may refuse, or succeed only with the reference's weights
            erc, loss, eout = eval_loss(evalcmd, copy, env)
            if crashed(erc):
                c["crash"] += 1
                failures.append("CRASH eval rc %d: %s %s: %s" % (erc, kind, what, eout[-300:]))
            elif erc == 0 and loss != ref_loss:
                c["missed"] += 1
                failures.append("MISSED (loaded wrong weights): %s %s" % (kind, what))
            problems = [l for l in out.splitlines() if l.startswith("problem:")]
            if problems and all(l.startswith("problem: view of") or "libhdf5 crashed" in l or
                                l.startswith("problem: /view") for l in problems):
                rrc, rout = run([a.bin, "ckpt", "repair-views", copy], env=env)
                ok, why = views_equal(copy)
                if rrc == 0 and ok:
                    c["repaired"] += 1
                else:
                    c["missed"] += 1
                    failures.append("NOT REPAIRED: %s %s: repair rc %d %s; %s" % (kind, what, rrc, rout[-200:], why))
            continue
        # verify passed: the copy must be the reference in every respect, but for views pending (no view.h5)
        erc, eout = run([a.equal, a.ckpt, copy], env=env)
        if "views pending" in out:
            rrc, rout = run([a.bin, "ckpt", "repair-views", copy], env=env)
            ok, why = views_equal(copy)
            if erc == 0 and what == "view.h5 deleted" and rrc == 0 and ok:
                c["pending"] += 1
                c["repaired"] += 1
            else:
                c["missed"] += 1
                failures.append("MISSED (views pending): %s %s: data %s, repair rc %d %s; %s" %
                                (kind, what, "equal" if erc == 0 else eout[-200:], rrc, rout[-200:], why))
            continue
        ok, why = views_equal(copy)
        if erc == 0 and ok:
            c["benign"] += 1
        else:
            c["missed"] += 1
            failures.append("MISSED: %s %s: data %s, views %s" % (kind, what, "equal" if erc == 0 else eout[-200:], why))
    total = {k: sum(c[k] for c in counts.values()) for k in counts[kinds[0]]}
    print("%-16s %7s %9s %7s %7s %7s %6s %9s" % ("kind", "trials", "detected", "benign", "pending", "missed", "crash",
                                                  "repaired"))
    for k in kinds + ["total"]:
        c = counts[k] if k != "total" else total
        print("%-16s %7d %9d %7d %7d %7d %6d %9d" % (k, c["trials"], c["detected"], c["benign"], c["pending"],
                                                       c["missed"], c["crash"], c["repaired"]))
    for f in failures:
        print(f)
    print(json.dumps({"seed": a.seed, "total": total, "by_kind": counts}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
