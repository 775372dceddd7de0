#!/usr/bin/env python3
"""tests/python/doc_citations.py SRCDIR — every citation of a docs/DESIGN_NOTES.md section names a section
that exists. Code comments, docs and tests cite the design notes by section title, as
`docs/DESIGN_NOTES.md, "The memory plan is an upper bound"` (or `DESIGN_NOTES.md "..."`, or the title
first: `"Files of several ranks", docs/DESIGN_NOTES.md` or `"..." in docs/DESIGN_NOTES.md`); the notes are cut and reorganised from time to
time, and a title renamed there would leave the citing comment pointing at nothing. A cited text must be
the start of a `## ` title of docs/DESIGN_NOTES.md (a citation may shorten a long title), matched after
joining a title split over two comment lines. Only the files git tracks are read.
Prints each broken citation as FILE:LINE; exit 1 if any, else 0 with the count checked."""
import os, re, subprocess, sys

root = sys.argv[1]
notes = os.path.join(root, "docs", "DESIGN_NOTES.md")
titles = [line[3:].strip() for line in open(notes, encoding="utf-8") if line.startswith("## ")]

# A quoted title, possibly continued on the next line behind a comment marker (" * ", "# ", "// ").
CONT = r'\n[ \t]*(?:\*|#|//)?[ \t]*'
QUOTE = r'"([^"\n]+(?:' + CONT + r'[^"\n]+)?)"'
NAME = r'DESIGN_NOTES\.md`?(?:\]\([^)]*\))?'
AFTER = re.compile(NAME + r',?[ \t]*(?:' + CONT + r')?' + QUOTE)   # DESIGN_NOTES.md, "Title"
BEFORE = re.compile(QUOTE + r'(?:,| in)[ \t]*(?:' + CONT + r')?`?(?:docs/)?' + NAME)   # "Title", docs/DESIGN_NOTES.md
EXT = (".c", ".h", ".cu", ".cuh", ".md", ".sh", ".py", ".cmake", ".txt")


def cited(text):
    """Yield (offset, title) for each citation of a design-notes section in text."""
    for pat in (AFTER, BEFORE):
        for m in pat.finditer(text):
            yield m.start(), re.sub(CONT, " ", m.group(1)).strip()


def main():
    files = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                           text=True).stdout.split()
    checked, broken = 0, []
    for f in files:
        if not f.endswith(EXT) or f == "docs/DESIGN_NOTES.md" or f == "tests/python/doc_citations.py":
            continue
        try:
            text = open(os.path.join(root, f), encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        for at, title in cited(text):
            checked += 1
            if not any(t.startswith(title) for t in titles):
                broken.append(f'{f}:{text.count(chr(10), 0, at) + 1}: "{title}" is no section of docs/DESIGN_NOTES.md')
    for b in broken:
        print(b)
    if checked < 10:
        print(f"only {checked} citations found: the patterns above are broken")
        return 1
    if broken:
        return 1
    print(f"PASS: {checked} citations of docs/DESIGN_NOTES.md sections, each naming one of its {len(titles)} sections")
    return 0


if __name__ == "__main__":
    sys.exit(main())
