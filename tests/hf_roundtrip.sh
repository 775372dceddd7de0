#!/bin/bash
# tests/hf_roundtrip.sh MESHPOINT EQUAL_TOOL DATA WORKDIR CASE — `meshpoint export` / `import` through the
# real CLI.
#   roundtrip  cli_tiny (GQA 4:2, untied) trained on tp 2: export -> import -> export gives byte-identical
#              model.safetensors and config.json (fp32; bf16 likewise); import on tp2 x dp2 in one process
#              = under mpirun -np 2 = `reshard --model-only` of the original to tp2 x dp2 (bitwise, every
#              tensor); eval --checkpoint of the import on tp2 x dp2 = eval of the original there.
#   tied       reshard_mqa_tied (MQA, tied) trained on dp 2: no lm_head.weight written; export -> import ->
#              export identical; import on dp 3 = reshard --model-only; eval equal.
#   uneven     reshard_gqa (intermediate 90, vocab 258: uneven TP slices, vocab padding) trained on tp2 x dp2:
#              round trip identical; import on tp4 = reshard --model-only; eval equal.
#   sharded    --max-shard-size 40KB: model-0000i-of-0000N files + index (total_size, weight_map); import of
#              the shards = import of the single file; export of it = the single-file export; size syntax.
#   rope       a rope_scaling llama3 config: config.json carries it as rope_scaling and rope_parameters (with
#              rope_theta) alike, and import -> export gives it back identically.
#   refusals   configs the model cannot represent (biases, an odd head_dim, an unknown model_type, architectures
#              of another family, rope_scaling type; an even head_dim != hidden/heads is a model, refused at its
#              tensors' shapes), missing / extra / misshapen / F64 tensors, a truncated file, existing destinations,
#              a non-checkpoint, a directory without config.json: exit 2 naming the cause, nothing written.
set -u
bin=$1; equal=$2; data=$3; work=$4; case=$5
src_dir=$(cd "$(dirname "$0")/.." && pwd)
mpi="mpiexec --allow-run-as-root --oversubscribe"
. "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
run() {  # run LOG CMD... : must succeed
    local log=$1; shift
    "$@" >"$log" 2>&1 || fail "$*: $(cat "$log")"
}
expect2() {  # expect2 PATTERN CMD... : exit 2 with PATTERN in the output
    local pat=$1; shift
    "$@" >"$work/x.log" 2>&1; local rc=$?
    [ $rc -eq 2 ] || fail "expected exit 2, got $rc from: $*: $(cat "$work/x.log")"
    grep -Eq -- "$pat" "$work/x.log" || fail "output of $* does not match /$pat/: $(cat "$work/x.log")"
}
same() { "$equal" "$1" "$2" >"$work/eq.log" 2>&1 || fail "$1 and $2 differ: $(cat "$work/eq.log")"; }
ident() { cmp "$1" "$2" >/dev/null || fail "$1 and $2 are not byte-identical"; }
evloss() {  # evloss CKPT TP DP -> the eval loss line's number
    local n=$(( $2 * $3 )) launch=""
    [ $n -gt 1 ] && launch="$mpi -np $n"
    $launch "$bin" eval --checkpoint "$1" --data "$data" --tp "$2" --dp "$3" --batches 1 --batch 12 --seq-len 16 \
        >"$work/ev.log" 2>&1 || fail "eval $1 on tp $2 dp $3: $(cat "$work/ev.log")"
    sed -n 's/^eval loss \([0-9.]*\).*/\1/p' "$work/ev.log"
}
train() {  # train CONFIG RUN NP TP DP
    local launch=""
    [ "$3" -gt 1 ] && launch="$mpi -np $3"
    $launch "$bin" train --config "$1" --train-data "$data" --steps 3 --log-every 0 --run-dir "$2" --tp "$4" --dp "$5" \
        --ckpt-every 3 >"$2.log" 2>&1 || fail "training $1: $(cat "$2.log")"
}
# export -> import -> export is the identity, fp32 and bf16, for the checkpoint $1
round_trip() {
    local ck=$1
    run "$work/e1.log" "$bin" export "$ck" --out "$work/hf1"
    for f in config.json generation_config.json model.safetensors; do [ -f "$work/hf1/$f" ] || fail "no $f written"; done
    [ ! -e "$work/hf1/model.safetensors.index.json" ] || fail "an index for a single file"
    run "$work/i1.log" "$bin" import "$work/hf1" --out "$work/ck_a"
    grep -q "verified $work/ck_a" "$work/i1.log" || fail "import did not verify: $(cat "$work/i1.log")"
    run "$work/e2.log" "$bin" export "$work/ck_a" --out "$work/hf2"
    ident "$work/hf1/model.safetensors" "$work/hf2/model.safetensors"
    ident "$work/hf1/config.json" "$work/hf2/config.json"
    run "$work/eb.log" "$bin" export "$ck" --out "$work/hfb" --dtype bf16
    run "$work/ib.log" "$bin" import "$work/hfb" --out "$work/ck_b"
    run "$work/eb2.log" "$bin" export "$work/ck_b" --out "$work/hfb2" --dtype bf16
    ident "$work/hfb/model.safetensors" "$work/hfb2/model.safetensors"
    [ "$(stat -c %s "$work/hfb/model.safetensors")" -lt "$(stat -c %s "$work/hf1/model.safetensors")" ] || fail "bf16 not smaller"
}
# import of hf1 on TP x DP (one process and mpirun -np 2) = reshard --model-only of CK; eval equal there
import_mesh() {
    local ck=$1 t=$2 d=$3
    run "$work/im.log" "$bin" import "$work/hf1" --out "$work/imp" --tp "$t" --dp "$d"
    run "$work/imm.log" $mpi -np 2 "$bin" import "$work/hf1" --out "$work/impm" --tp "$t" --dp "$d"
    # a source failing on rank 1 only: agreed, one message, exit 2, nothing written, no rank left waiting
    local o rc
    o=$(MP_FAULT=fail_rank:1 timeout 60 $mpi -np 2 -x MP_FAULT "$bin" import "$work/hf1" --out "$work/impf" \
        --tp "$t" --dp "$d" 2>&1); rc=$?
    [ $rc -eq 2 ] && [ "$(printf '%s\n' "$o" | grep -c "error: \[rank 1\] import: source: simulated failure")" -eq 1 ] \
        && [ ! -e "$work/impf" ] || fail "import with a rank-local source failure: exit $rc: $o"
    run "$work/rs.log" "$bin" reshard "$ck" --model-only --tp "$t" --dp "$d" --out "$work/ref"
    same "$work/imp" "$work/impm"
    same "$work/imp" "$work/ref"
    local a b
    a=$(evloss "$ck" "$t" "$d"); b=$(evloss "$work/imp" "$t" "$d")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "eval of the original ($a) and of the import ($b) on tp $t dp $d differ"
    echo "eval on tp $t dp $d: original $a, imported $b"
}

case "$case" in
roundtrip)
    train "$src_dir/tests/configs/cli_tiny.json" "$work/run" 2 2 1
    round_trip "$work/run"
    import_mesh "$work/run" 2 2
    ;;
tied)
    train "$src_dir/tests/configs/reshard_mqa_tied.json" "$work/run" 2 1 2
    round_trip "$work/run"
    grep -q '"lm_head.weight"' <(head -c 4096 "$work/hf1/model.safetensors") && fail "tied export wrote lm_head.weight"
    grep -q '"tie_word_embeddings":[[:space:]]*true' "$work/hf1/config.json" || fail "config.json: tie_word_embeddings"
    import_mesh "$work/run" 1 3
    ;;
uneven)
    train "$src_dir/tests/configs/reshard_gqa.json" "$work/run" 4 2 2
    round_trip "$work/run"
    import_mesh "$work/run" 4 1
    ;;
sharded)
    train "$src_dir/tests/configs/cli_tiny.json" "$work/run" 1 1 1
    run "$work/e1.log" "$bin" export "$work/run" --out "$work/hf1"
    run "$work/es.log" "$bin" export "$work/run" --out "$work/hfs" --max-shard-size 40KB
    n=$(ls "$work/hfs" | grep -c '^model-000[0-9][0-9]-of-000[0-9][0-9]\.safetensors$')
    [ "$n" -ge 3 ] || fail "expected several shards, got $n: $(ls "$work/hfs")"
    [ ! -e "$work/hfs/model.safetensors" ] || fail "a sharded export also wrote model.safetensors"
    /usr/bin/python3 - "$work/hfs" "$work/hf1/model.safetensors" <<'PY' || fail "the index"
import json, os, struct, sys
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
wm, files = idx["weight_map"], set(idx["weight_map"].values())
assert list(wm) == sorted(wm), "weight_map not sorted"
def header(p):
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8)); return json.loads(f.read(n))
total = 0
for fn in files:
    h = header(os.path.join(d, fn)); h.pop("__metadata__")
    assert os.path.getsize(os.path.join(d, fn)) - 8 - len(json.dumps(h)) > 0
    for k, v in h.items():
        assert wm[k] == fn, (k, fn); total += v["data_offsets"][1] - v["data_offsets"][0]
    assert sum(v["data_offsets"][1] - v["data_offsets"][0] for v in h.values()) <= 40000 or len(h) == 1, fn
single = header(sys.argv[2]); single.pop("__metadata__")
assert set(single) == set(wm), "shards hold other tensors than the single file"
assert idx["metadata"]["total_size"] == total, (idx["metadata"], total)
print(len(files), "shards,", len(wm), "tensors,", total, "bytes")
PY
    run "$work/is.log" "$bin" import "$work/hfs" --out "$work/ck_s" --tp 2 --dp 1
    run "$work/i1.log" "$bin" import "$work/hf1" --out "$work/ck_1" --tp 2 --dp 1
    same "$work/ck_s" "$work/ck_1"
    run "$work/e2.log" "$bin" export "$work/ck_s" --out "$work/hf2"
    ident "$work/hf1/model.safetensors" "$work/hf2/model.safetensors"
    run "$work/e3.log" "$bin" export "$work/run" --out "$work/hf3" --max-shard-size 1GiB
    ident "$work/hf1/model.safetensors" "$work/hf3/model.safetensors"
    expect2 "max-shard-size" "$bin" export "$work/run" --out "$work/hf4" --max-shard-size 5XB
    [ ! -e "$work/hf4" ] || fail "a refused export left $work/hf4"
    ;;
rope)
    /usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['rope_scaling']={'rope_type':'llama3','factor':8.0,'low_freq_factor':1.0,'high_freq_factor':4.0,'original_max_position_embeddings':64}; json.dump(c,open(sys.argv[2],'w'))" \
        "$src_dir/tests/configs/cli_tiny.json" "$work/rope.json"
    run "$work/init.log" "$bin" init --config "$work/rope.json" --tp 1 --dp 1 --out "$work/ck"
    round_trip "$work/ck"
    /usr/bin/python3 - "$work/hf1/config.json" <<'PY' || fail "config.json of a llama3 RoPE model: $(cat "$work/hf1/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
rs, rp = c["rope_scaling"], c["rope_parameters"]
assert rs["rope_type"] == "llama3" and rs["factor"] == 8 and rs["original_max_position_embeddings"] == 64, rs
assert rp == dict(rs, rope_theta=c["rope_theta"]), (rp, rs)
PY
    ;;
refusals)
    run "$work/init.log" "$bin" init --config "$src_dir/tests/configs/cli_tiny.json" --tp 1 --dp 1 --out "$work/ck"
    run "$work/e.log" "$bin" export "$work/ck" --out "$work/hf"
    variant() {  # variant NAME PYTHON-EXPR-ON-cfg : a copy of hf with config.json changed
        rm -rf "$work/$1"; cp -r "$work/hf" "$work/$1"
        /usr/bin/python3 -c "import json,sys; p=sys.argv[1]+'/config.json'; cfg=json.load(open(p)); $2; json.dump(cfg, open(p,'w'))" "$work/$1"
    }
    variant ab 'cfg["attention_bias"]=True';  expect2 'attention_bias' "$bin" import "$work/ab" --out "$work/o"
    variant mb 'cfg["mlp_bias"]=True';        expect2 'mlp_bias' "$bin" import "$work/mb" --out "$work/o"
    variant hd 'cfg["head_dim"]=15';          expect2 'head_dim' "$bin" import "$work/hd" --out "$work/o"
    # an even head_dim other than hidden/heads is a model (Qwen3's); these weights are not its shape
    variant he 'cfg["head_dim"]=16';          expect2 'q_proj.weight.*has shape.*implies \[64, 32\]' "$bin" import "$work/he" --out "$work/o"
    variant mu 'cfg["model_type"]="gpt2"; cfg.pop("architectures")'; expect2 'model_type.*gpt2' "$bin" import "$work/mu" --out "$work/o"
    variant mt 'cfg["model_type"]="mistral"'; expect2 'model_type' "$bin" import "$work/mt" --out "$work/o"
    variant ar 'cfg["architectures"]=["MistralForCausalLM"]'; expect2 'architectures' "$bin" import "$work/ar" --out "$work/o"
    variant rs 'cfg["rope_scaling"]={"rope_type":"yarn","factor":4.0}'; expect2 'rope_scaling' "$bin" import "$work/rs" --out "$work/o"
    variant sh 'cfg["intermediate_size"]=65'; expect2 'mlp.gate_proj.weight.*has shape' "$bin" import "$work/sh" --out "$work/o"
    edit() {  # edit NAME PYTHON-ON-tensors(dict name -> (dtype, shape, bytes)) : a copy with model.safetensors rewritten
        rm -rf "$work/$1"; cp -r "$work/hf" "$work/$1"
        /usr/bin/python3 - "$work/$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
p = sys.argv[1]
raw = open(p, "rb").read(); (n,) = struct.unpack("<Q", raw[:8]); h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
h.pop("__metadata__")
t = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}
exec(sys.argv[2])
hdr, at, blob = {}, 0, b""
for k, (dt, shp, b) in t.items():
    hdr[k] = {"dtype": dt, "shape": shp, "data_offsets": [at, at + len(b)]}; at += len(b); blob += b
s = json.dumps(hdr).encode(); s += b" " * (-len(s) % 8)
open(p, "wb").write(struct.pack("<Q", len(s)) + s + blob)
PY
    }
    edit miss 'del t["model.norm.weight"]';                        expect2 '"model.norm.weight" is missing' "$bin" import "$work/miss" --out "$work/o"
    edit extra 't["model.extra.weight"]=("F32",[2],bytes(8))';      expect2 '"model.extra.weight" is not part of' "$bin" import "$work/extra" --out "$work/o"
    edit f64 'd,s,b=t["model.norm.weight"]; t["model.norm.weight"]=("F64",s,b+b)'; expect2 'F64' "$bin" import "$work/f64" --out "$work/o"
    edit inv 't["model.layers.0.self_attn.rotary_emb.inv_freq"]=("F32",[4],bytes(16))'
    run "$work/inv.log" "$bin" import "$work/inv" --out "$work/o_inv"   # transformers ignores it too
    rm -rf "$work/tr"; cp -r "$work/hf" "$work/tr"; truncate -s -4 "$work/tr/model.safetensors"
    expect2 'model.safetensors.*past the end' "$bin" import "$work/tr" --out "$work/o"
    rm -rf "$work/nocfg"; cp -r "$work/hf" "$work/nocfg"; rm "$work/nocfg/config.json"
    expect2 'no config.json' "$bin" import "$work/nocfg" --out "$work/o"
    mkdir -p "$work/cfgonly"; cp "$work/hf/config.json" "$work/cfgonly/"
    expect2 'neither model.safetensors' "$bin" import "$work/cfgonly" --out "$work/o"
    [ ! -e "$work/o" ] && [ ! -e "$work/o.partial" ] || fail "a refused import left $work/o"
    # destinations
    expect2 'already exists' "$bin" import "$work/hf" --out "$work/ck"
    expect2 'already exists' "$bin" export "$work/ck" --out "$work/hf"
    run "$work/f1.log" "$bin" import "$work/hf" --out "$work/ck" --force
    run "$work/f2.log" "$bin" export "$work/ck" --out "$work/hf" --force
    [ ! -e "$work/hf.partial" ] && [ ! -e "$work/ck.partial" ] || fail "partial directories left behind"
    expect2 'HF directory itself' "$bin" import "$work/hf" --out "$work/hf" --force
    expect2 'checkpoint' "$bin" export "$work/hf" --out "$work/o"
    expect2 'dtype' "$bin" export "$work/ck" --out "$work/o" --dtype fp16
    expect2 'num_key_value_heads' "$bin" import "$work/hf" --out "$work/o" --tp 4
    [ ! -e "$work/o" ] || fail "a refused command left $work/o"
    ;;
*) fail "unknown case" ;;
esac
echo "OK ($case)"
