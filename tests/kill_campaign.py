#!/usr/bin/python3
"""tests/kill_campaign.py — kill -9 campaign against a training job's checkpoints.

usage: kill_campaign.py --meshpoint BIN --equal TOOL --data TOKENS --config JSON --work DIR
                        [--mpiexec PATH] [--np N] [--steps N] [--trials N] [--budget SECONDS]
                        [--modes M,M...] [--report FILE]

Six modes, tried round-robin: storage {plain, zstd (--compress zstd), async (--async-save)} x kill
{job: SIGKILL every rank and mpiexec at one instant, rank: SIGKILL one rank, chosen at random; Open MPI
then tears the job down}. The job is `mpiexec -np N meshpoint train --ckpt-every 1 --keep 3` (so a kill
can also land in retention). A trial's instant is either
  time  uniform over the cycle of step K (K random): from metrics.jsonl's line K-1 plus a random fraction
        of the run's own mean step period so far (load on the machine changes the pace, not the aim), or
  save  aimed: when step_K.partial appears, wait a random fraction of the time step K-1's save took in
        this run (.partial appearing to the rename), then kill,
so that kills land inside saves often. After the kill, every trial checks:
  1. `meshpoint ckpt ls --json` runs (exit 0) and every checkpoint it lists as complete passes
     `meshpoint ckpt verify` (exit 0). The newest alone may have its views pending: no view.h5
     when the kill landed while rank 0 wrote it after the commit; ls then marks it
     "views_pending", and verify passes with one "views pending" note naming repair-views and no
     problem (counted: views_pending); every other listed checkpoint has its view.h5;
  2. `latest`, when present, names a complete checkpoint (`latest_complete`), and no step directory
     without a valid index is newer than every complete one (only retention leaves such a directory,
     and only an old one);
  3. `train --resume` to the last step exits 0, resumes from the newest complete checkpoint that ls
     named (or from step 0 when there is none), and ends with a final checkpoint bitwise equal to a
     straight run's (tests/tool_ckpt_equal.c) and the straight run's loss at every step (metrics.jsonl);
  4. no process of the job is left once mpiexec is gone (survivors are SIGKILLed and counted).
  5. after the resume, `ckpt ls` shows no leftover (no .partial, no step directory without an index)
     and `latest` names the final checkpoint; no checkpoint has views pending: the resume logged writing
     the pending view.h5 (healed), and that checkpoint, unless retention removed it since,
     verifies without the note.
What the checkpoint directory held at the kill classifies the instant: `partial` (a step_N.partial
without index.h5 existed: rank files being written, the ranks agreeing), `indexed` (a step_N.partial
held index.h5: the index being written or fsynced, or the rename not done yet), `stale` (a step directory newer than `latest`: between the
rename and the replacement of `latest`), `retention` (a step directory without index.h5: an old
checkpoint half removed), `between` (none of these: between saves), `early` (no save had begun yet).

Environment:
  MP_CAMPAIGN_TRIALS   trials (default --trials, 12: ~60-90 s on 2 cores), round-robin over the modes
  MP_CAMPAIGN_SECONDS  soft time budget (default --budget, 120 s): no trial starts after it once every
                       mode has run (a loaded CI machine runs fewer trials rather than time out)
  MP_CAMPAIGN_SEED     seed (default: from the clock; printed). Trial i draws its parameters from
                       (seed, i) alone and its mode is modes[i % len(modes)], so MP_CAMPAIGN_SEED=S
                       MP_CAMPAIGN_ONLY=i (same modes) replays trial i
                       (timing on a loaded machine varies, so the instant is reproduced, not the state)
  MP_CAMPAIGN_ONLY     comma-separated trial numbers to run (replay)
  MP_CAMPAIGN_MODES    comma-separated modes to run (e.g. "zstd/rank,async/job"; default --modes, or
                       all six); straight runs are made only for the storage modes named
  MP_CAMPAIGN_KEEP=1   keep every trial's run directory (default: only failed ones)
Exit status: 0 all checks held, 1 a check failed (each failure printed with its trial, seed and replay
command), 2 bad usage or the reference runs failed.
"""
import argparse
import ctypes
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

STORAGE = {"plain": [], "zstd": ["--compress", "zstd"], "async": ["--async-save"]}
KILLS = ["job", "rank"]
MODES = [f"{s}/{k}" for s in STORAGE for k in KILLS]
PHASES = ["partial", "indexed", "stale", "retention", "between", "early", "ended"]

TAG_VAR = "MP_KILL_CAMPAIGN_TAG"
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """preexec_fn: mpiexec dies (SIGKILL) if this driver dies (e.g. killed by ctest's timeout); its
    ranks then abort when they lose it, and the cleanup below never depends on this process alone."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def log(*a):
    print(*a, flush=True)


# ---- processes of one job: every process launched by mpiexec inherits the trial's tag ----
def tagged_procs(tag, prefix=False):
    """{pid: rank or None} of the live (non-zombie) processes whose environment holds TAG_VAR=tag (with
    prefix: TAG_VAR=tag...)."""
    want = f"{TAG_VAR}={tag}".encode()
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if not any(e == want or (prefix and e.startswith(want)) for e in env):
                continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                st = f.read()
            if st[st.rindex(b")") + 2:][:1] in (b"Z", b"X"):
                continue
        except (OSError, ValueError):
            continue
        rank = None
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                rank = int(e.split(b"=", 1)[1])
        out[pid] = rank
    return out


def sigkill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap_all(tag, grace):
    """Waits up to grace seconds for the tagged processes to go, then SIGKILLs what is left; returns the
    number that had to be killed."""
    end = time.monotonic() + grace
    while time.monotonic() < end and tagged_procs(tag):
        time.sleep(0.05)
    left = tagged_procs(tag)
    for pid in left:
        sigkill(pid)
    end = time.monotonic() + 10
    while time.monotonic() < end and tagged_procs(tag):
        time.sleep(0.05)
    return len(left)


# ---- the checkpoint directory ----
def snapshot(root):
    """What ROOT holds now: {'dirs': {name: has index.h5}, 'latest': str or None}."""
    s = {"dirs": {}, "latest": None}
    try:
        names = os.listdir(root)
    except OSError:
        return s
    for n in names:
        if n.startswith("step_"):
            s["dirs"][n] = os.path.exists(os.path.join(root, n, "index.h5"))
    try:
        with open(os.path.join(root, "latest")) as f:
            s["latest"] = f.read().strip()
    except OSError:
        pass
    return s


def phase_of(s):
    dirs = s["dirs"]
    partials = [n for n in dirs if n.endswith(".partial")]
    if partials:
        return "indexed" if any(dirs[n] for n in partials) else "partial"
    steps = sorted(n for n in dirs if not n.endswith(".partial"))
    if not steps:
        return "early"
    if any(not has for has in dirs.values()):
        return "retention"
    if s["latest"] != steps[-1]:
        return "stale"
    return "between"


def loss_lines(path):
    try:
        with open(path) as f:
            return re.findall(r'"step": [0-9]+, "loss": [^,]*', f.read())
    except OSError:
        return []


class Campaign:
    def __init__(self, a):
        self.a = a
        self.mpi = [a.mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(a.np)]
        self.common = ["train", "--config", a.config, "--train-data", a.data, "--steps", str(a.steps),
                       "--log-every", "1", "--ckpt-every", "1", "--keep", "3", "--dp", str(a.np)]
        self.ref = {}            # storage -> {'final', 'losses', 'train_s', 'save_s'}
        self.rows = []           # one dict per trial
        self.failures = []

    def train_cmd(self, storage, run, *extra):
        return self.mpi + [self.a.meshpoint] + self.common + STORAGE[storage] + ["--run-dir", run] + list(extra)

    @staticmethod
    def views_pending_ok(d, c, vout, newest_listed):
        """'' when checkpoint d (ls entry c, verify output vout) is as a views-pending checkpoint must be,
        else what is wrong: only the newest, no view.h5, one note naming repair-views and no problem."""
        if c["name_step"] != newest_listed:
            return "an older checkpoint than the newest has its views pending"
        if os.path.lexists(os.path.join(d, "view.h5")):
            return "ls says views pending, but view.h5 exists"
        notes = [l for l in vout.splitlines() if "views pending" in l]
        if len(notes) != 2 or not notes[0].startswith("note: views pending:") or \
                f"meshpoint ckpt repair-views {d}" not in notes[0] or not notes[1].startswith("ok:"):
            return "verify does not report the pending views as one note naming repair-views"
        if any(l.startswith("problem:") for l in vout.splitlines()):
            return "verify reports problems besides the pending views"
        return ""

    def check_healed(self, root, name, rout, run, fail):
        """The resume (log rout) wrote the pending view.h5 of root/name, which verifies without the note
        unless retention has removed it since."""
        d = os.path.join(root, name)
        if not re.search(r"views: wrote the missing view\.h5 of \S*/" + re.escape(name) + " ", rout):
            fail(f"the resume did not write the pending view.h5 of {name}: {rout.strip()[-3000:]}")
        elif os.path.isdir(d):
            rc, vout = self.run([self.a.meshpoint, "ckpt", "verify", d], run + ".verify_healed.log", 120)
            if rc != 0 or "views pending" in vout or not os.path.isfile(os.path.join(d, "view.h5")):
                fail(f"{name} after the resume healed it: verify exits {rc}: {vout.strip()[-2000:]}")

    def run(self, cmd, logpath, timeout):
        with open(logpath, "w") as lf:
            try:
                p = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, timeout=timeout,
                                   preexec_fn=die_with_parent)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = 124
        with open(logpath, errors="replace") as lf:
            return rc, lf.read()

    def start(self, cmd, logpath, tag):
        env = dict(os.environ)
        env[TAG_VAR] = tag
        lf = open(logpath, "w")
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                             preexec_fn=die_with_parent)
        lf.close()
        return p

    # ---- straight runs: the reference state and the timings that aim the kills ----
    def references(self, storages):
        for st in storages:
            run = os.path.join(self.a.work, f"ref_{st}")
            root = os.path.join(run, "checkpoints")
            tag = f"{os.getpid()}-ref-{st}"
            t0 = time.monotonic()
            p = self.start(self.train_cmd(st, run), run + ".log", tag)
            t_lock = None
            while p.poll() is None:
                if t_lock is None and os.path.exists(os.path.join(root, ".lock")):
                    t_lock = time.monotonic()
                time.sleep(0.002)
            t_end = time.monotonic()
            reap_all(tag, 5)
            out = open(run + ".log", errors="replace").read()
            if p.returncode != 0:
                log(f"kill campaign: the straight {st} run failed (exit {p.returncode}):\n{out}")
                sys.exit(2)
            saves = [float(x) for x in re.findall(r"saved: ([0-9.]+) s", out)]
            saves += [float(w) + float(c) for w, c in re.findall(r"committed: stall [0-9.]+ s, write ([0-9.]+) s, "
                                                                 r"commit ([0-9.]+) s", out)]
            final = os.path.join(root, f"step_{self.a.steps:08d}")
            self.ref[st] = {"final": final, "losses": loss_lines(os.path.join(run, "metrics.jsonl")),
                            "train_s": t_end - (t_lock or t0), "save_s": sum(saves) / len(saves) if saves else 0.1}
            log(f"kill campaign: straight {st} run: {t_end - t0:.2f} s ({self.ref[st]['train_s']:.2f} s after the "
                f"lock), mean save {self.ref[st]['save_s'] * 1000:.0f} ms, {len(self.ref[st]['losses'])} steps")
            if len(self.ref[st]["losses"]) != self.a.steps:
                log(f"kill campaign: the straight {st} run logged {len(self.ref[st]['losses'])} steps")
                sys.exit(2)
        # the storage modes train the same model: their final states must agree too
        base = storages[0]
        for st in storages[1:]:
            rc, out = self.run([self.a.equal, self.ref[base]["final"], self.ref[st]["final"]],
                               os.path.join(self.a.work, f"ref_{st}_equal.log"), 60)
            if rc != 0 or self.ref[st]["losses"] != self.ref[base]["losses"]:
                log(f"kill campaign: the straight {st} run differs from the {base} one: {out}")
                sys.exit(2)

    # ---- one trial ----
    def trial(self, i, mode, seed):
        st, kill = mode.split("/")
        rng = random.Random(f"{seed}:{i}")
        aim = "save" if rng.random() < 0.5 else "time"
        target = rng.randint(1 if aim == "time" else 2, self.a.steps)
        frac = rng.random()
        victim = rng.randrange(self.a.np)
        ref = self.ref[st]
        run = os.path.join(self.a.work, f"t{i:03d}_{st}_{kill}")
        shutil.rmtree(run, ignore_errors=True)
        root = os.path.join(run, "checkpoints")
        tag = f"{os.getpid()}-{seed}-{i}"
        row = {"trial": i, "mode": mode, "aim": aim, "fail": []}
        t_trial = time.monotonic()
        what = (f"at {frac:.2f} of the save of step {target}" if aim == "save"
                else f"at {frac:.2f} of step {target}'s cycle")
        what += ", every process" if kill == "job" else f", rank {victim} only"
        row["what"] = what

        def fail(msg):
            row["fail"].append(msg)

        p = self.start(self.train_cmd(st, run), os.path.join(run + ".kill.log"), tag)
        t0 = time.monotonic()
        deadline = t0 + 60
        # wait for the job to start (its lock), then for the instant
        while p.poll() is None and not os.path.exists(os.path.join(root, ".lock")) and time.monotonic() < deadline:
            time.sleep(0.002)
        t_lock = time.monotonic()
        metrics = os.path.join(run, "metrics.jsonl")
        if aim == "time":
            # uniform over step `target`'s cycle (compute, metrics line, save), at this run's own pace, so
            # that a loaded machine does not push every kill past the end of the job
            t_a = t_lock
            while target > 1 and p.poll() is None and time.monotonic() < deadline:
                if len(loss_lines(metrics)) >= target - 1:
                    t_a = time.monotonic()
                    break
                time.sleep(0.002)
            period = (t_a - t_lock) / (target - 1) if target > 1 else ref["train_s"] / self.a.steps
            t_kill = t_a + frac * period
            while p.poll() is None and time.monotonic() < t_kill:
                time.sleep(0.001)
        else:
            # aimed: step `target`'s save, lasting about as long as step target-1's did in this run
            # (.partial appearing to the rename; the reference's mean save when that was not seen)
            seen = {}
            watch = [f"step_{target - 1:08d}.partial", f"step_{target - 1:08d}", f"step_{target:08d}.partial",
                     f"step_{target:08d}"]
            while p.poll() is None and time.monotonic() < deadline:
                now = time.monotonic()
                for n in watch:
                    if n not in seen and os.path.isdir(os.path.join(root, n)):
                        seen[n] = now
                if watch[2] in seen or watch[3] in seen:
                    break
                time.sleep(0.001)
            save_s = ref["save_s"]
            if watch[0] in seen and watch[1] in seen:
                save_s = max(seen[watch[1]] - seen[watch[0]], 0.005) * 1.2
            t_kill = time.monotonic() + frac * save_s
            while p.poll() is None and time.monotonic() < t_kill:
                time.sleep(0.001)
        ended = p.poll() is not None
        procs = tagged_procs(tag)
        ranks = {r: pid for pid, r in procs.items() if r is not None}
        if not ended:
            if kill == "job":
                for pid in ranks.values():
                    sigkill(pid)
                sigkill(p.pid)
                for pid in procs:
                    sigkill(pid)
                end = time.monotonic() + 10   # dead before the snapshot: it shows the state at the kill
                while time.monotonic() < end and tagged_procs(tag):
                    time.sleep(0.002)
            elif victim in ranks:
                sigkill(ranks[victim])
            else:
                fail(f"rank {victim} not found among the job's processes {procs}")
                sigkill(p.pid)
        snap = snapshot(root)
        row["phase"] = "ended" if ended else phase_of(snap)
        row["at_kill"] = snap
        # the job goes: mpiexec exits (after tearing down the other ranks when one was killed)
        try:
            row["mpiexec_rc"] = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail("mpiexec still running 60 s after the kill")
            sigkill(p.pid)
            row["mpiexec_rc"] = p.wait()
        row["teardown_s"] = round(time.monotonic() - t_kill, 2) if not ended else 0
        row["survivors"] = reap_all(tag, 3)
        if ended and p.returncode != 0:
            fail(f"the job ended on its own with exit {p.returncode} before the kill")

        # 1. every checkpoint listed complete verifies
        rc, out = self.run([self.a.meshpoint, "ckpt", "ls", "--json", root], run + ".ls.log", 60)
        row["complete"] = row["verified"] = 0
        listing = None
        if rc != 0:
            fail(f"ckpt ls exit {rc}: {out}")
        else:
            try:
                listing = json.loads(out[out.index("{"):])
            except ValueError as ex:
                fail(f"ckpt ls --json output does not parse ({ex}): {out}")
        newest = None
        if listing:
            newest_listed = max((c["name_step"] for c in listing["checkpoints"]), default=-1)
            for c in listing["checkpoints"]:
                row["complete"] += 1
                d = os.path.join(root, c["dir"])
                rc, vout = self.run([self.a.meshpoint, "ckpt", "verify", d], run + f".verify_{c['dir']}.log", 120)
                if c.get("views_pending"):
                    # killed while rank 0 wrote view.h5 after the commit: the resume heals it
                    row["views_pending"] = c["dir"]
                    why = self.views_pending_ok(d, c, vout, newest_listed)
                    if why:
                        fail(f"{c['dir']}: {why}: {vout.strip()[-2000:]}")
                elif not os.path.isfile(os.path.join(d, "view.h5")) or "views pending" in vout:
                    fail(f"{c['dir']}: ls does not say views pending, yet it has no view.h5 or verify says so")
                if rc == 0:
                    row["verified"] += 1
                else:
                    fail(f"{c['dir']} is listed complete but verify exits {rc}: {vout.strip()[-2000:]}")
            # 2. latest names a complete checkpoint
            row["latest"] = listing.get("latest")
            if listing.get("latest") is not None and not listing.get("latest_complete"):
                fail(f"latest names {listing['latest']}, not a complete checkpoint: {out}")
            newest = listing.get("newest_complete")
            # a step directory (not .partial) without a valid index is only an old checkpoint that
            # retention was removing: one newer than every complete checkpoint was renamed too early
            newest_step = max((c["name_step"] for c in listing["checkpoints"]), default=-1)
            for x in listing.get("incomplete", []):
                if not x["dir"].endswith(".partial") and x["step"] > newest_step:
                    fail(f"{x['dir']} has no valid index ({x['reason']}) and is newer than every complete "
                         f"checkpoint: renamed before its index was complete")
            row["latest_stale"] = bool(newest and listing.get("latest") != newest)
        # 3. the resume ends where the straight run did, bit for bit
        rc, rout = self.run(self.train_cmd(st, run, "--resume"), run + ".resume.log", 300)
        row["resumed_from"] = None
        m = re.search(r"resumed from \S*/(step_[0-9]+) at step ([0-9]+)", rout)
        if m:
            row["resumed_from"] = m.group(1)
        row["equal"] = False
        if rc != 0:
            fail(f"the resume exits {rc}: {rout.strip()[-3000:]}")
        else:
            if listing is not None and row["resumed_from"] != newest:
                fail(f"resumed from {row['resumed_from']}, but ckpt ls named {newest} the newest complete checkpoint")
            final = os.path.join(root, f"step_{self.a.steps:08d}")
            rc, eout = self.run([self.a.equal, ref["final"], final], run + ".equal.log", 120)
            if rc != 0:
                fail(f"the final checkpoint differs from the straight run's: {eout.strip()}")
            elif loss_lines(os.path.join(run, "metrics.jsonl")) != ref["losses"]:
                fail(f"metrics.jsonl's losses differ from the straight run's: "
                     f"{loss_lines(os.path.join(run, 'metrics.jsonl'))} vs {ref['losses']}")
            else:
                row["equal"] = True
            # 5. nothing left over
            rc, out = self.run([self.a.meshpoint, "ckpt", "ls", "--json", root], run + ".ls2.log", 60)
            try:
                after = json.loads(out[out.index("{"):]) if rc == 0 else None
            except ValueError:
                after = None
            want = f"step_{self.a.steps:08d}"
            if after is None:
                fail(f"ckpt ls after the resume exits {rc}: {out}")
            elif after.get("latest") != want or not after.get("latest_complete") or after.get("incomplete"):
                fail(f"after the resume, latest is {after.get('latest')} (want {want}) and the root holds "
                     f"incomplete directories {after.get('incomplete')}")
            elif any(x.get("views_pending") for x in after["checkpoints"]):
                fail(f"after the resume, views are still pending: {after['checkpoints']}")
            if row.get("views_pending"):
                self.check_healed(root, row["views_pending"], rout, run, fail)
        if reap_all(tag, 0):
            fail("processes of the resumed job were left behind")
        if row["fail"]:
            self.failures.append((i, mode, row))
        elif not self.a.keep:
            shutil.rmtree(run, ignore_errors=True)
            for f in os.listdir(self.a.work):
                if f.startswith(os.path.basename(run) + "."):
                    os.unlink(os.path.join(self.a.work, f))
        row["seconds"] = round(time.monotonic() - t_trial, 1)
        self.rows.append(row)
        return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--meshpoint", required=True)
    ap.add_argument("--equal", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--trials", type=int, default=12, help="trials unless MP_CAMPAIGN_TRIALS says otherwise")
    ap.add_argument("--budget", type=float, default=120, help="seconds, unless MP_CAMPAIGN_SECONDS says otherwise")
    ap.add_argument("--modes", default="", help="comma-separated modes (default all six) unless MP_CAMPAIGN_MODES "
                    "says otherwise")
    ap.add_argument("--report", help="write the figures as JSON here")
    a = ap.parse_args()
    a.trials = int(os.environ.get("MP_CAMPAIGN_TRIALS", str(a.trials)))
    budget = float(os.environ.get("MP_CAMPAIGN_SECONDS", str(a.budget)))
    seed = int(os.environ.get("MP_CAMPAIGN_SEED", str(int(time.time() * 1000) % 1000000007)))
    only = {int(x) for x in os.environ.get("MP_CAMPAIGN_ONLY", "").split(",") if x.strip()}
    modes = [m.strip() for m in os.environ.get("MP_CAMPAIGN_MODES", a.modes).split(",") if m.strip()] or MODES
    bad = [m for m in modes if m not in MODES]
    if bad or a.trials < 1 or a.np < 2:
        log(f"kill campaign: bad MP_CAMPAIGN_MODES {bad} (modes: {MODES}) or trials/np")
        return 2
    a.keep = os.environ.get("MP_CAMPAIGN_KEEP", "") not in ("", "0")
    for p in (a.meshpoint, a.equal, a.data, a.config):
        a_path = os.path.abspath(p)
        if not os.path.exists(a_path):
            log(f"kill campaign: {p}: no such file")
            return 2
    a.meshpoint, a.equal, a.data, a.config = (os.path.abspath(p) for p in (a.meshpoint, a.equal, a.data, a.config))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    a.work = os.path.abspath(a.work)
    log(f"kill campaign: seed {seed} (replay: MP_CAMPAIGN_SEED={seed}), {a.trials} trials over {len(modes)} modes, "
        f"mpiexec -np {a.np}, {a.steps} steps, --ckpt-every 1 --keep 3")
    c = Campaign(a)
    t_start = time.monotonic()

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        c.references(list(dict.fromkeys(m.split("/")[0] for m in modes)))
        ran = set()
        for i in range(a.trials):
            mode = modes[i % len(modes)]
            if only and i not in only:
                continue
            if time.monotonic() - t_start > budget and ran >= set(modes):
                log(f"kill campaign: time budget of {budget:.0f} s spent: trials {i}..{a.trials - 1} not run")
                break
            r = c.trial(i, mode, seed)
            ran.add(mode)
            status = "FAIL" if r["fail"] else "ok"
            log(f"trial {i:3d} {mode:11s} {r['what']}: kill landed {r['phase']}; {r['complete']} complete, "
                f"{r['verified']} verified; resumed from {r['resumed_from'] or 'step 0'}"
                f"{'; equal' if r['equal'] else ''}{'; ' + str(r['survivors']) + ' survivor(s) killed' if r['survivors'] else ''}"
                f" (mpiexec exit {r['mpiexec_rc']}, {r['seconds']:.1f} s) -> {status}")
            for f in r["fail"]:
                log(f"    FAIL: {f}")
    except KeyboardInterrupt:
        log("kill campaign: interrupted")
        return 1
    finally:
        # whatever happened, no process of this campaign outlives it
        left = tagged_procs(f"{os.getpid()}-", prefix=True)
        for pid in left:
            sigkill(pid)
        if left:
            log(f"kill campaign: killed {len(left)} process(es) left by an interrupted trial")
    elapsed = time.monotonic() - t_start

    # ---- figures ----
    per = {}
    for r in c.rows:
        d = per.setdefault(r["mode"], {"trials": 0, "complete": 0, "verified": 0, "equal": 0, "failures": 0,
                                       "latest_stale": 0, "views_pending": 0, "survivors": 0,
                                       **{p: 0 for p in PHASES}})
        d["trials"] += 1
        d[r["phase"]] += 1
        d["complete"] += r["complete"]
        d["verified"] += r["verified"]
        d["equal"] += r["equal"]
        d["failures"] += bool(r["fail"])
        d["latest_stale"] += bool(r.get("latest_stale"))
        d["views_pending"] += bool(r.get("views_pending"))
        d["survivors"] += r["survivors"]
    tot = {k: sum(d[k] for d in per.values()) for k in
           ["trials", "complete", "verified", "equal", "failures", "latest_stale", "views_pending", "survivors"] + PHASES}
    log("")
    log(f"{'mode':11s} {'trials':>6s} {'in save':>7s} {'partial':>7s} {'indexed':>7s} {'stale':>5s} {'retain':>6s} {'between':>7s} "
        f"{'early':>5s} {'ended':>5s} {'verified':>9s} {'equal':>5s} {'fail':>4s}")
    for m in modes:
        if m not in per:
            continue
        d = per[m]
        insave = d["partial"] + d["indexed"] + d["stale"] + d["retention"]
        log(f"{m:11s} {d['trials']:6d} {insave:7d} {d['partial']:7d} {d['indexed']:7d} {d['stale']:5d} {d['retention']:6d} "
            f"{d['between']:7d} {d['early']:5d} {d['ended']:5d} {d['verified']:4d}/{d['complete']:<4d} {d['equal']:5d} "
            f"{d['failures']:4d}")
    insave = tot["partial"] + tot["indexed"] + tot["stale"] + tot["retention"]
    log(f"kill campaign summary: seed {seed}, {tot['trials']} trials in {elapsed:.0f} s, {insave} kills during a save "
        f"({tot['partial']} before the index, {tot['indexed']} with the index in .partial, {tot['stale']} between rename and latest, {tot['retention']} in "
        f"retention), {tot['between']} between saves, {tot['early']} before the first save, {tot['ended']} after "
        f"the job ended; complete checkpoints verified {tot['verified']}/{tot['complete']} ({tot['views_pending']} newest "
        f"with its views pending (no background view.h5 yet), healed by the resume); resumes bitwise equal "
        f"{tot['equal']}/{tot['trials']}; survivors killed by cleanup {tot['survivors']}; failures {tot['failures']}")
    if a.report:
        with open(a.report, "w") as f:
            json.dump({"seed": seed, "elapsed_s": round(elapsed, 1), "np": a.np, "steps": a.steps, "modes": per,
                       "total": tot, "trials": c.rows}, f, indent=1)
    for i, mode, r in c.failures:
        how = f" MP_CAMPAIGN_MODES={','.join(modes)}" if modes != MODES else ""
        log(f"FAILED trial {i} ({mode}, {r['what']}); replay: MP_CAMPAIGN_SEED={seed} MP_CAMPAIGN_ONLY={i}{how} "
            f"MP_CAMPAIGN_KEEP=1 (same --steps/--np); run directory and logs kept under {a.work}/t{i:03d}_*")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
