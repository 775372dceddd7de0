#!/usr/bin/env python3
"""tests/python/code_shape.py SRC — the code's shape, checked on every run:
  - no function in cli/, ckpt/ or reshard/ is over 100 lines (from its signature to its closing brace);
  - cli/cmd_train.c is under 400 lines;
  - the libraries depend one way (docs/DESIGN_NOTES.md, "The layers as they are now"): a folder includes
    headers only from the folders it may depend on;
  - nothing outside ckpt/ and tests/ckpt/ (ckpt's white-box tests) includes ckpt/ckpt_internal.h;
  - a module's private header (ckpt/writer_internal.h, reader_internal.h, index_internal.h,
    layers/llama_config_impl.h, core/cuda/backend_cuda_impl.h) is included by that module's own files
    only (ckpt/writer*.c, ...);
  - no library .c file (core/ cli/ ckpt/ layers/ reshard/ tokenizer/, their subfolders but test
    programs) is over 800 lines, so that each reads in one sitting; generated files (GENERATED) are exempt;
  - the library folders read the environment only through core/fault.c (MP_FAULT, the tests' fault
    injection) or for a user variable documented in docs/CLI.md's "Environment variables" table: every
    getenv elsewhere names a documented variable as a string literal;
  - no cli/ file returns or exits with a literal status other than 0 (the one exit-code rule:
    mp_exit_status, through cli/runtime.h's two exits);
  - tests/README.md's "By module" table names every library .c file (core/ cli/ ckpt/ layers/ reshard/
    tokenizer/ and their subfolders; test programs live under tests/), so a new module gets a line saying what tests it.
Prints each violation as FILE:LINE: what; exit 1 if any, else 0 with a summary line."""
import glob, os, re, sys

src = sys.argv[1]
MAX_FN, MAX_TRAIN, MAX_FILE = 100, 400, 800
GENERATED = {"tokenizer/unorm_data.c"}   # Unicode tables written by scripts/gen_unorm.py, not read as code
# private header -> the files that may include it (the module's own)
PRIVATE = {
    "ckpt/writer_internal.h": r"ckpt/writer(_\w+)?\.c$",
    "ckpt/reader_internal.h": r"ckpt/reader(_\w+)?\.c$",
    "ckpt/index_internal.h": r"ckpt/index(_\w+)?\.c$",
    "layers/llama_config_impl.h": r"layers/llama_config(_\w+)?\.c$",
    "core/cuda/backend_cuda_impl.h": r"core/cuda/backend_cuda(_\w+)?\.c$",
}
# folder -> the folders whose headers it may include (itself always)
ALLOWED = {
    "core": set(),
    "tokenizer": {"core"},
    "layers": {"core"},
    "ckpt": {"core"},
    "reshard": {"core", "layers", "ckpt"},
    "cli": {"core", "layers", "ckpt", "reshard", "tokenizer"},
}
FOLDERS = set(ALLOWED)
SIG = re.compile(r'^(?:static\s+|inline\s+)*[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(')
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
bad = []


def rel(p):
    return os.path.relpath(p, src)


def long_functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        m = SIG.match(lines[i])
        if m and not lines[i].rstrip().endswith(";"):
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                if k - i + 1 > MAX_FN:
                    bad.append("%s:%d: function %s is %d lines (at most %d)" % (rel(path), i + 1, m.group(1), k - i + 1,
                                                                              MAX_FN))
                i = k
        i += 1


nfn = 0
for d in ("cli", "ckpt", "reshard"):
    for p in sorted(glob.glob(os.path.join(src, d, "*.c"))):
        long_functions(p)
        nfn += 1
n = len(open(os.path.join(src, "cli/cmd_train.c")).read().split("\n")) - 1
if n >= MAX_TRAIN:
    bad.append("cli/cmd_train.c: %d lines (under %d)" % (n, MAX_TRAIN))

nfiles = 0
for p in sorted(glob.glob(os.path.join(src, "**", "*.[ch]"), recursive=True) +
                glob.glob(os.path.join(src, "**", "*.cu"), recursive=True)):
    r = rel(p)
    top = r.split(os.sep)[0]
    if top.startswith("build") or top.startswith("."):
        continue
    nfiles += 1
    for ln, line in enumerate(open(p, encoding="utf-8", errors="replace"), 1):
        m = INC.match(line)
        if not m:
            continue
        inc = m.group(1)
        folder = inc.split("/")[0]
        if inc == "ckpt/ckpt_internal.h" and top != "ckpt" and not r.startswith(os.path.join("tests", "ckpt", "")):
            bad.append("%s:%d: includes ckpt/ckpt_internal.h from outside ckpt/ and tests/ckpt/" % (r, ln))
        if inc in PRIVATE and not re.match(PRIVATE[inc], r.replace(os.sep, "/")):
            own = PRIVATE[inc].replace("(_\\w+)?\\.c$", "*.c")
            bad.append("%s:%d: includes %s outside its module's files (%s)" % (r, ln, inc, own))
        if top in ALLOWED and folder in FOLDERS and folder != top and folder not in ALLOWED[top]:
            bad.append("%s:%d: %s/ includes %s (%s/ may use only %s)" % (r, ln, top, inc, top,
                                                                      ", ".join(sorted(ALLOWED[top])) or "nothing"))

# ---- environment reads: core/fault.c's MP_FAULT, or a variable docs/CLI.md documents
LIB = ("core", "ckpt", "cli", "layers", "reshard", "tokenizer")
doc = open(os.path.join(src, "docs", "CLI.md"), encoding="utf-8").read()
env_table = doc.split("### Environment variables", 1)[1].split("\n#", 1)[0] if "### Environment variables" in doc else ""
documented = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", env_table))
if not documented:
    bad.append("docs/CLI.md: no \"### Environment variables\" table naming the variables meshpoint reads")
GETENV = re.compile(r'\bgetenv\s*\(\s*("([^"]*)")?')
ngetenv = 0
for d in LIB:
    for p in sorted(glob.glob(os.path.join(src, d, "**", "*.[ch]"), recursive=True) +
                    glob.glob(os.path.join(src, d, "**", "*.cu"), recursive=True)):
        r = rel(p)
        for ln, line in enumerate(open(p, encoding="utf-8", errors="replace"), 1):
            code = line.split("//")[0]
            if code.lstrip().startswith(("*", "/*")):
                continue
            for m in GETENV.finditer(code):
                ngetenv += 1
                name = m.group(2)
                if r == os.path.join("core", "fault.c") and name == "MP_FAULT":
                    continue
                if name is None:
                    bad.append("%s:%d: getenv of a computed name (library code reads only documented variables)" % (r, ln))
                elif name == "MP_FAULT":
                    bad.append("%s:%d: reads MP_FAULT itself (only core/fault.c does: use mp_fault_*)" % (r, ln))
                elif name not in documented:
                    bad.append("%s:%d: getenv(\"%s\"): not a user variable of docs/CLI.md's \"Environment "
                               "variables\" (a test hook goes through core/fault.h)" % (r, ln, name))

# ---- one exit-code rule: no literal status in cli/ other than 0
LITERAL = re.compile(r'\b(?:return|exit|_exit)\s*\(?\s*([1-9][0-9]*)\s*\)?\s*;|MPI_Abort\s*\([^,]*,\s*([1-9][0-9]*)\s*\)')
STATUS_FN = re.compile(r'^(?:static\s+)?int\s+(mp_cmd_\w+|cmd_\w+|\w*_main|main|mp_convert_write_ckpt|mp_runtime_\w+)\s*\(')
for p in sorted(glob.glob(os.path.join(src, "cli", "*.c"))):
    r = rel(p)
    in_status_fn = False
    for ln, line in enumerate(open(p, encoding="utf-8", errors="replace"), 1):
        if STATUS_FN.match(line):
            in_status_fn = True
        elif SIG.match(line) and not line.startswith((" ", "\t")):
            in_status_fn = False
        m = LITERAL.search(line.split("/*")[0])
        if m and (in_status_fn or m.group(2) or "exit" in m.group(0)):
            bad.append("%s:%d: a literal exit status (%s): statuses come from mp_exit_status" % (r, ln, m.group(0).strip()))

def readme_modules(path):
    """The dir/name pairs the first column of README's "By module" table names. An entry with a slash
    ("core/alloc", "ckpt/") sets the folder; a bare name after it ("error") is in that folder;
    parenthesised text and backquotes are only words."""
    names = set()
    text = open(path, encoding="utf-8").read()
    table = text.split("## By module", 1)[-1]
    for line in table.split("\n"):
        if not line.startswith("| ") or line.startswith("| module") or line.startswith("|---"):
            continue
        col = line.split("|")[1].replace("`", "")
        while re.search(r"\([^()]*\)", col):
            col = re.sub(r"\([^()]*\)", " ", col)
        cur = None
        for tok in re.split(r"[,\s]+", col):
            tok = tok.strip(".;:")
            if not tok or tok == "and":
                continue
            if "/" in tok:
                cur, _, name = tok.rpartition("/")
                if name:
                    names.add(cur + "/" + name)
            elif cur and re.match(r"^\w+$", tok):
                names.add(cur + "/" + tok)
    return names


MODULE_DIRS = ("core", "cli", "ckpt", "layers", "reshard", "tokenizer")
mapped = readme_modules(os.path.join(src, "tests", "README.md"))
nmod = 0
for d in MODULE_DIRS:
    for p in sorted(glob.glob(os.path.join(src, d, "**", "*.c"), recursive=True)):
        r = rel(p).replace(os.sep, "/")
        nmod += 1
        nlines = len(open(p, encoding="utf-8", errors="replace").read().split("\n")) - 1
        if nlines > MAX_FILE and r not in GENERATED:
            bad.append("%s: %d lines (at most %d: split it by concern)" % (r, nlines, MAX_FILE))
        if r[:-2] not in mapped:
            bad.append("%s: not in tests/README.md's \"By module\" table (name it in a row's first column "
                       "with the tests that cover it)" % r)

for b in bad:
    print(b)
if bad:
    sys.exit(1)
print("code shape ok: %d C files of cli/ckpt/reshard, no function over %d lines; cmd_train.c %d lines; "
      "%d files follow the one-way dependencies; tests/README.md maps all %d library modules, none over %d lines; "
      "%d getenv calls read MP_FAULT or a documented variable; no literal exit status in cli/" %
      (nfn, MAX_FN, n, nfiles, nmod, MAX_FILE, ngetenv))
