#!/usr/bin/env python3
"""tests/python/test_defs.py BUILD — checks the ctest entries' definitions: every entry runs
with a temporary directory of its own, so no two entries share Open MPI's session directory
($TMPDIR/ompi.<host>.<uid>, created and removed by every mpiexec; two launches starting and ending at
once race on it: tests/tmpdirs.cmake, tests/mpi_session_race.sh).
Reads ctest's own listing (`ctest -N --show-only=json-v1` in BUILD), so it sees the definitions exactly
as ctest will run them, the deferred environment appends included. For each entry but the fixture's
setup (tmpdirs_make):
  - the effective TMPDIR (the last assignment in ENVIRONMENT wins, as ctest applies them in order) is
    BUILD/tmp/<entry>, and OMPI_MCA_orte_tmpdir_base and PRTE_MCA_prte_tmpdir_base equal it;
  - no two entries share that directory;
  - the entry requires the fixture `tmpdirs` (whose setup creates the directories at test time).
Prints each violation naming the entry; exit 1 if any, else 0 with a summary line."""
import json, os, re, subprocess, sys

build = os.path.abspath(sys.argv[1])
listing = json.loads(subprocess.run(["ctest", "-N", "--show-only=json-v1"], cwd=build, check=True,
                                    capture_output=True, text=True).stdout)
tests = listing["tests"]
problems, owner = [], {}
VARS = ("TMPDIR", "OMPI_MCA_orte_tmpdir_base", "PRTE_MCA_prte_tmpdir_base")


def props(t):
    """The entry's properties as a dict name -> value."""
    return {p["name"]: p["value"] for p in t.get("properties", [])}


def effective_env(p):
    """ENVIRONMENT as the process sees it: later assignments of a name replace earlier ones."""
    env = {}
    for kv in p.get("ENVIRONMENT", []):
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def launches_mpi(t):
    """Whether the entry starts MPI processes through mpiexec (its command, or the script it runs)."""
    cmd = t.get("command") or []
    if any("mpiexec" in c or "mpirun" in c for c in cmd):
        return True
    for c in cmd:
        if c.endswith((".sh", ".py")) and os.path.isfile(c):
            with open(c, errors="replace") as f:
                if re.search(r"\bmpi(exec|run)\b", f.read()):
                    return True
    return False


setup = [t for t in tests if t["name"] == "tmpdirs_make"]
if not setup or "tmpdirs" not in props(setup[0]).get("FIXTURES_SETUP", []):
    problems.append("tmpdirs_make: missing, or not the setup of the fixture `tmpdirs`")
n_mpi = 0
for t in tests:
    name = t["name"]
    if name == "tmpdirs_make":
        continue
    p = props(t)
    env = effective_env(p)
    want = os.path.join(build, "tmp", name)
    for var in VARS:
        if env.get(var) != want:
            problems.append(f"{name}: {var} is {env.get(var)!r}, not its own directory {want!r}")
    d = env.get("TMPDIR")
    if d in owner:
        problems.append(f"{name}: shares TMPDIR {d!r} with {owner[d]}")
    owner.setdefault(d, name)
    if "tmpdirs" not in p.get("FIXTURES_REQUIRED", []):
        problems.append(f"{name}: does not require the fixture `tmpdirs` (its directory may not exist)")
    n_mpi += launches_mpi(t)

for pr in problems:
    print(f"problem: {pr}")
if problems:
    print(f"FAILED: {len(problems)} problem(s) in {len(tests)} ctest entries")
    sys.exit(1)
if n_mpi == 0:
    print("FAILED: no entry launches mpiexec: the listing or the detection is wrong")
    sys.exit(1)
print(f"ok: {len(tests) - 1} ctest entries, each with a TMPDIR of its own ({n_mpi} of them launch mpiexec)")
