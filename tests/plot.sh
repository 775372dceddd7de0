#!/bin/bash
# tests/plot.sh MESHPOINT DATA VAL CONFIG WORKDIR — `meshpoint plot`: a run's curves drawn to
# a PNG that is a real image (PNG signature, the requested size in its header, decoded pixels far from
# blank: many distinct colours, curve pixels in the plot colour); an existing --out is refused without
# --force; a run directory without metrics is refused naming the file.
set -u
bin=$1; data=$2; val=$3; config=$4; work=$5; case=plot
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
train --run-dir "$work/run" --steps 30 --ckpt-every 10 --val-data "$val" --eval-every 10 >/dev/null 2>&1 || fail "training"
expect 0 "wrote .*run.png: 30 steps, 3 validation points, 3 checkpoints" "$work/log" "$bin" plot "$work/run" --out "$work/run.png" --size 900x700
/usr/bin/python3 - "$work/run.png" <<'PY' || fail "the PNG is not a plot"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
assert (w, h) == (900, 700), (w, h)
idat, at = b"", 8
while at < len(data):
    n, kind = struct.unpack(">I4s", data[at:at + 8])
    if kind == b"IDAT": idat += data[at + 8:at + 8 + n]
    at += 12 + n
raw = zlib.decompress(idat)
bpp = {2: 3, 6: 4}[ctype]
stride = w * bpp + 1
# undo the PNG row filters to count the real pixel colours
prev = bytearray(w * bpp); colours = {}; blue = 0
for y in range(h):
    f, row = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
    for i in range(len(row)):
        a = row[i - bpp] if i >= bpp else 0; b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + b) & 255
        elif f == 3: row[i] = (row[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, w * bpp, bpp):
        px = tuple(row[x:x + 3]); colours[px] = colours.get(px, 0) + 1
        if px[2] > 150 and px[0] < 80: blue += 1
    prev = row
white = colours.get((255, 255, 255), 0)
assert white < w * h * 0.98, "blank image"
assert len(colours) > 20 and blue > 500, (len(colours), blue)
print("png %dx%d: %d colours, %d curve pixels" % (w, h, len(colours), blue))
PY
expect 2 "meshpoint plot: error: --out .*run.png exists \(--force replaces it\)" "$work/log2" "$bin" plot "$work/run" --out "$work/run.png"
expect 0 "wrote" "$work/log3" "$bin" plot "$work/run" --out "$work/run.png" --force
mkdir -p "$work/empty"
expect 2 "cannot read .*empty/metrics.jsonl" "$work/log4" "$bin" plot "$work/empty" --out "$work/e.png"
ls "$work" | grep -q '^e\.png' && fail "a refused plot left a file: $(ls "$work")"
expect 2 "--size: \"9x9\" is not WIDTHxHEIGHT" "$work/log5" "$bin" plot "$work/run" --out "$work/s.png" --size 9x9
echo "ok ($case)"
