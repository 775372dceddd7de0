#!/bin/bash
# tests/convert_overlap.sh MESHPOINT EQUAL_TOOL WORKDIR — the overlapped band pipelines of the conversions
# (ckpt/writer_files.c: band k hashed on a helper thread while band k+1 is read and written; reshard/hf_items.c,
# HF and GGUF export: band k written on the helper while band k+1 is read) against the serial path
# (MP_FAULT=ckpt_serial_fill),
# on a model whose boxes span many bands (--max-memory 4M: 1 MiB bands, 2-4 MiB boxes):
#   - init, reshard (tp2 -> tp1, tp2 -> tp4) and import: every dataset and attribute of every file
#     identical (created_utc aside), box checksums included, and the same as with 64 MiB bands, which
#     the writer hands to HDF5 in 1 MiB pieces, the serial path in one H5Dwrite per band;
#   - export fp32 and bf16: the directories byte-identical; export --format gguf f16 and q8_0: the files
#     byte-identical, and the same with the default (larger) bands;
#   - a read error in the middle of a box (one byte flipped in the source's data, past several bands):
#     reshard, export and GGUF export exit 1 naming the rank file and the tensor, and leave no output or .partial.
set -u
bin=$1; equal=$2; work=$3
case=convert_overlap; . "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
py=/usr/bin/python3
cat > "$work/cfg.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 4100,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.02,
 "tie_word_embeddings": false, "hidden_act": "silu", "train": {"batch_size": 1, "seq_len": 64}}
JSON
serial() { MP_FAULT=ckpt_serial_fill "$@"; }
# h5same A B: the .h5 files of two checkpoints hold the same objects, data and attributes (but created_utc)
h5same() {
    $py - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import sys, os, glob, h5py, numpy as np
a, b = sys.argv[1:3]
fa = sorted(os.path.basename(p) for p in glob.glob(a + "/*.h5"))
fb = sorted(os.path.basename(p) for p in glob.glob(b + "/*.h5"))
assert fa == fb and fa, (fa, fb)
n = 0
def walk(g, h, p):
    global n
    assert sorted(g.attrs.keys()) == sorted(h.attrs.keys()), p
    for k in g.attrs.keys():
        if k != "created_utc":
            assert np.array_equal(np.asarray(g.attrs[k]), np.asarray(h.attrs[k])), (p, k)
    if isinstance(g, h5py.Dataset):
        assert g.dtype == h.dtype and g.shape == h.shape and g[()].tobytes() == h[()].tobytes(), p
        n += 1
        return
    assert sorted(g.keys()) == sorted(h.keys()), p
    for k in g.keys():
        walk(g[k], h[k], p + "/" + k)
for f in fa:
    with h5py.File(os.path.join(a, f), "r") as A, h5py.File(os.path.join(b, f), "r") as B:
        walk(A, B, f)
print(f"{len(fa)} files, {n} datasets identical")
PY
}
run() { local log=$1; shift; "$@" >"$log" 2>&1 || fail "$*: $(cat "$log")"; }
mm="--max-memory 4M"

run "$work/i.log" "$bin" init --config "$work/cfg.json" --tp 2 --dp 1 --out "$work/src" $mm
run "$work/is.log" serial "$bin" init --config "$work/cfg.json" --tp 2 --dp 1 --out "$work/src_s" $mm
h5same "$work/src" "$work/src_s"
# the bands really are many: the largest piece is 1 MiB, the embedding box 4100/2 x 256 x 4 = 2 MiB
grep -q "largest piece in memory 1.00 MiB" "$work/i.log" || fail "expected 1 MiB bands: $(tail -1 "$work/i.log")"
for t in 1 4; do
    run "$work/r$t.log" "$bin" reshard "$work/src" --tp $t --dp 1 --out "$work/r$t" $mm
    run "$work/rs$t.log" serial "$bin" reshard "$work/src" --tp $t --dp 1 --out "$work/rs$t" $mm
    run "$work/rb$t.log" "$bin" reshard "$work/src" --tp $t --dp 1 --out "$work/rb$t"
    h5same "$work/r$t" "$work/rs$t"
    run "$work/rbs$t.log" serial "$bin" reshard "$work/src" --tp $t --dp 1 --out "$work/rbs$t"
    h5same "$work/r$t" "$work/rb$t"
    h5same "$work/rb$t" "$work/rbs$t"
    "$equal" "$work/src" "$work/r$t" >"$work/eq.log" 2>&1 || fail "reshard to tp$t changed tensors: $(cat "$work/eq.log")"
done
for dt in fp32 bf16; do
    run "$work/e$dt.log" "$bin" export "$work/src" --out "$work/hf_$dt" --dtype $dt $mm
    run "$work/es$dt.log" serial "$bin" export "$work/src" --out "$work/hfs_$dt" --dtype $dt $mm
    diff -r "$work/hf_$dt" "$work/hfs_$dt" >/dev/null || fail "export $dt: the overlapped and serial outputs differ"
done
# GGUF export (reshard/gguf_sink.c through rs_hf_items_stream: q/k permuted row by row on the worker): the
# same file overlapped, serial and with the default bands (at most 4 MiB each); f16 and q8_0 (whole blocks
# per row), every other byte path's twin. The model name comes from the file name: same names, own dirs.
for dt in f16 q8_0; do
    mkdir -p "$work/g_o" "$work/g_s" "$work/g_b"
    run "$work/g$dt.log" "$bin" export "$work/src" --format gguf --dtype $dt --out "$work/g_o/m_$dt.gguf" $mm
    run "$work/gs$dt.log" serial "$bin" export "$work/src" --format gguf --dtype $dt --out "$work/g_s/m_$dt.gguf" $mm
    run "$work/gb$dt.log" "$bin" export "$work/src" --format gguf --dtype $dt --out "$work/g_b/m_$dt.gguf"
    cmp "$work/g_o/m_$dt.gguf" "$work/g_s/m_$dt.gguf" >/dev/null || fail "GGUF export $dt: the overlapped and serial files differ"
    cmp "$work/g_o/m_$dt.gguf" "$work/g_b/m_$dt.gguf" >/dev/null ||
        fail "GGUF export $dt: 128 Ki-element bands and the default ones differ"
done
run "$work/m.log" "$bin" import "$work/hf_fp32" --tp 2 --dp 1 --out "$work/imp" $mm
run "$work/ms.log" serial "$bin" import "$work/hf_fp32" --tp 2 --dp 1 --out "$work/imp_s" $mm
h5same "$work/imp" "$work/imp_s"
echo "ok: overlapped = serial for init, reshard, export (HF and GGUF), import"

# a read error mid-box: flip one byte 1.5 MiB into model/embed_tokens's box in rank 1's file
cp -r "$work/src" "$work/bad"
off=$($py - "$work/bad/rank_00001.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f["model/model.embed_tokens.weight/box_0"] if "model/model.embed_tokens.weight" in f else None
    if d is None:
        names = []
        f.visit(lambda n: names.append(n) if n.endswith("box_0") and "embed" in n and n.startswith("model/") else None)
        d = f[names[0]]
    assert d.nbytes >= 2 << 20, d.nbytes
    print(d.id.get_offset() + (3 << 19))
PY
) || fail "no embedding box found in rank_00001.h5"
$py -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xff]))' \
    "$work/bad/rank_00001.h5" "$off"
for mode in overlap serial; do
    pre=(); [ $mode = serial ] && pre=(env MP_FAULT=ckpt_serial_fill)
    expect 1 "rank_00001.h5.*embed_tokens|embed_tokens.*rank_00001.h5" "$work/bad_r.log" \
        "${pre[@]}" "$bin" reshard "$work/bad" --tp 1 --dp 1 --out "$work/bad_r" $mm
    [ ! -e "$work/bad_r" ] && [ ! -e "$work/bad_r.partial" ] || fail "$mode: a failed reshard left output behind"
    expect 1 "rank_00001.h5.*embed_tokens|embed_tokens.*rank_00001.h5" "$work/bad_e.log" \
        "${pre[@]}" "$bin" export "$work/bad" --out "$work/bad_e" $mm
    [ ! -e "$work/bad_e" ] && [ ! -e "$work/bad_e.partial" ] || fail "$mode: a failed export left output behind"
    expect 1 "rank_00001.h5.*embed_tokens|embed_tokens.*rank_00001.h5" "$work/bad_g.log" \
        "${pre[@]}" "$bin" export "$work/bad" --format gguf --dtype f16 --out "$work/bad_g.gguf" $mm
    [ -z "$(ls "$work" | grep '^bad_g\.gguf')" ] || fail "$mode: a failed GGUF export left output behind: $(ls "$work" | grep '^bad_g')"
    echo "ok ($mode): the corrupt band is named: $(grep -m1 -o 'rank_00001.h5[^;]*' "$work/bad_r.log" | head -c 200)"
done
rm -rf "$work"
