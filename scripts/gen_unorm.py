#!/usr/bin/env python3
"""scripts/gen_unorm.py [UCD_DIR] > tokenizer/unorm_data.c — generates the Unicode normalization tables of
tokenizer/unorm.c (NFD, NFC, NFKD, NFKC as Hugging Face's `tokenizers` applies them).

Which Unicode version: `tokenizers` normalizes with the Rust crate unicode-normalization-alignments 0.1.12
(the version tokenizers 0.23.3's binary is built with), whose tables are Unicode 9.0.0's. Newer data gives
other results on code points assigned since 9.0 (U+11938 gained a decomposition in 13.0; 98 combining marks
of 10.0-14.0 have a nonzero combining class that 9.0 does not know, so they are not reordered: Python
3.11's unicodedata, 14.0, differs from the library on those 99 code points), so neither ICU (72: Unicode
15.0) nor Python's unicodedata can be used as they are. This script reads a
newer Unicode Character Database (Debian's unicode-data package: /usr/share/unicode, 15.0) and keeps only
the code points DerivedAge.txt says were assigned by 9.0; Unicode's normalization stability policy
(decompositions, combining classes and composition exclusions of assigned characters never change) makes
that exactly Unicode 9.0's normalization data. As a check, every kept code point's full decomposition is
compared with Python's unicodedata.normalize (any version >= 9.0 gives the same for them).

Output (C, deterministic; see tokenizer/unorm.c for how it is read):
  mp_unorm_props[]   per distinct property set: combining class, quick-check flags, offsets and lengths of the
                     full canonical and full compatibility decompositions in mp_unorm_pool[] (Hangul syllables
                     are decomposed by arithmetic, not stored)
  mp_unorm_stage1/2  a two-stage table code point -> props index for code points below MP_UNORM_LIMIT
  mp_unorm_comp[]    the primary composites (first, second, composite), sorted by (first, second)
"""
import os
import sys
import unicodedata

UCD = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
MAX_AGE = (9, 0)
LIMIT = 0x30000          # nothing at or above has a decomposition or a combining class in Unicode 9.0
SHIFT = 7                # stage-2 blocks of 128 code points
S_BASE, L_BASE, V_BASE, T_BASE, L_COUNT, V_COUNT, T_COUNT = 0xAC00, 0x1100, 0x1161, 0x11A7, 19, 21, 28
N_COUNT, S_COUNT = V_COUNT * T_COUNT, 19 * 21 * 28
F_D, F_KD, F_C, F_KC = 1, 2, 4, 8   # the form's quick check is not "yes" for this code point alone


def ranges(path):
    """(first, last, fields) of each data line of a UCD file."""
    for line in open(os.path.join(UCD, path), encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(";")]
        a, _, b = fields[0].partition("..")
        yield int(a, 16), int(b or a, 16), fields[1:]


def load():
    """assigned-by-9.0 set, ccc, one-level decompositions (compat flag), composition exclusions."""
    old = set()
    for a, b, f in ranges("DerivedAge.txt"):
        if tuple(int(x) for x in f[0].split(".")) <= MAX_AGE:
            old.update(range(a, b + 1))
    ccc, dec = {}, {}
    for line in open(os.path.join(UCD, "UnicodeData.txt"), encoding="utf-8"):
        f = line.split(";")
        cp = int(f[0], 16)
        if cp not in old:
            continue
        if int(f[3]):
            ccc[cp] = int(f[3])
        if f[5]:
            parts = f[5].split()
            compat = parts[0].startswith("<")
            dec[cp] = (compat, [int(x, 16) for x in (parts[1:] if compat else parts)])
    excl = {a for a, b, _ in ranges("CompositionExclusions.txt") for a in range(a, b + 1) if a in old}
    return old, ccc, dec, excl


def full(cp, dec, compat):
    """The full canonical (compat: compatibility) decomposition of cp, Hangul syllables included."""
    if S_BASE <= cp < S_BASE + S_COUNT:
        s = cp - S_BASE
        out = [L_BASE + s // N_COUNT, V_BASE + (s % N_COUNT) // T_COUNT]
        return out + ([T_BASE + s % T_COUNT] if s % T_COUNT else [])
    d = dec.get(cp)
    if d is None or (d[0] and not compat):
        return [cp]
    return [x for c in d[1] for x in full(c, dec, compat)]


def main():
    old, ccc, dec, excl = load()
    comp = {}
    for cp, (compat, parts) in dec.items():
        if compat or len(parts) != 2 or cp in excl or ccc.get(cp, 0) or ccc.get(parts[0], 0):
            continue   # singletons, non-starter decompositions and exclusions never compose
        comp[tuple(parts)] = cp
    seconds = {b for _, b in comp} | set(range(V_BASE, V_BASE + V_COUNT)) | set(range(T_BASE + 1, T_BASE + T_COUNT))
    primary = set(comp.values())
    props, index, pool = [(0, 0, 0, 0, 0, 0)], {(0, 0, 0, 0, 0, 0): 0}, []
    cp_prop = [0] * LIMIT
    for cp in range(LIMIT):
        d, k = full(cp, dec, False), full(cp, dec, True)
        if cp in old and not 0xD800 <= cp < 0xE000:
            for form, got in (("NFD", d), ("NFKD", k)):
                assert unicodedata.normalize(form, chr(cp)) == "".join(map(chr, got)), (form, hex(cp))
        hangul = S_BASE <= cp < S_BASE + S_COUNT
        flags = 0
        if d != [cp]:
            flags |= F_D | F_KD
        if k != [cp]:
            flags |= F_KD
        if (d != [cp] and cp not in primary and not hangul) or cp in seconds:
            flags |= F_C | F_KC
        if k != d:
            flags |= F_KC
        doff = dlen = koff = klen = 0
        if d != [cp] and not hangul:
            doff, dlen = len(pool), len(d)
            pool += d
        if k != [cp] and not hangul:
            if k == d:
                koff, klen = doff, dlen
            else:
                koff, klen = len(pool), len(k)
                pool += k
        key = (ccc.get(cp, 0), flags, doff, dlen, koff, klen)
        if key not in index:
            index[key] = len(props)
            props.append(key)
        cp_prop[cp] = index[key]
    assert len(props) < 65536 and len(pool) < 65536 and max(p[3] for p in props) < 256
    blocks, stage1, stage2 = {}, [], []
    for b in range(LIMIT >> SHIFT):
        blk = tuple(cp_prop[b << SHIFT:(b + 1) << SHIFT])
        if blk not in blocks:
            blocks[blk] = len(blocks)
            stage2.extend(blk)
        stage1.append(blocks[blk])
    emit(props, pool, stage1, stage2, sorted((a, b, c) for (a, b), c in comp.items()))


def arr(ctype, name, vals, per=16):
    rows = [", ".join(str(v) for v in vals[i:i + per]) for i in range(0, len(vals), per)]
    return "const %s %s[%d] = {\n    %s,\n};\n" % (ctype, name, len(vals), ",\n    ".join(rows))


def emit(props, pool, stage1, stage2, comp):
    w = sys.stdout.write
    w("/*\n * tokenizer/unorm_data.c — GENERATED by scripts/gen_unorm.py from the Unicode Character Database,\n"
      " * restricted to the code points assigned by Unicode %d.%d (the data of unicode-normalization-alignments\n"
      " * 0.1.12, which Hugging Face's `tokenizers` normalizes with). Do not edit; regenerate:\n"
      " *   python3 scripts/gen_unorm.py /usr/share/unicode > tokenizer/unorm_data.c\n */\n" % MAX_AGE)
    w('#include "tokenizer/unorm_data.h"\n\n')
    w("const mp_unorm_prop mp_unorm_props[%d] = {\n" % len(props))
    for p in props:
        w("    {%d, %d, %d, %d, %d, %d},\n" % p)
    w("};\n")
    w(arr("uint32_t", "mp_unorm_pool", pool, 12))
    w(arr("uint16_t", "mp_unorm_stage1", stage1, 24))
    w(arr("uint16_t", "mp_unorm_stage2", stage2, 24))
    w("const mp_unorm_pair mp_unorm_comp[%d] = {\n" % len(comp))
    for a, b, c in comp:
        w("    {0x%04X, 0x%04X, 0x%04X},\n" % (a, b, c))
    w("};\nconst int mp_unorm_ncomp = %d;\n" % len(comp))
    sys.stderr.write("gen_unorm: %d property sets, pool %d, stage1 %d, stage2 %d blocks, %d compositions\n" %
                     (len(props), len(pool), len(stage1), len(stage2) >> SHIFT, len(comp)))


if __name__ == "__main__":
    main()
