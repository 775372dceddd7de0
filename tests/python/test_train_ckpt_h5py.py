#!/usr/bin/python3
"""tests/python/test_train_ckpt_h5py.py — a real training checkpoint, read with h5py alone.

Trains 3 steps on tp 2 x dp 2 (vocab 250: not a multiple of tp, so the embedding and head carry padding
in memory) and saves a checkpoint, plain or zstd-compressed. Then, with Debian's h5py and nothing of
ours: opens index.h5, reads the layout tables and the metadata, and for EVERY tensor (model/, and both
Adam moments under optim/) assembles it from the rank files through the box table — every element
exactly once — and reads it whole through its virtual view under view/; the two must be equal. Model
tensors must carry the Hugging Face names and logical shapes of the config (vocab unpadded, q/k/v and
gate/up separate). Every box's checksum tiles are checked as in test_ckpt_h5py.py (check_box_tiles:
geometry rule, attributes, tiles dataset, box/tile/tile-array checksums recomputed with libxxhash).
h5dump -d must print a dataset of the checkpoint (with HDF5_PLUGIN_PATH for zstd).
"""
import argparse, json, os, subprocess, sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshpoint", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--plugins", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--compress", default="none")
    a = ap.parse_args()
    os.environ["HDF5_PLUGIN_PATH"] = os.path.abspath(a.plugins)
    os.environ["HDF5_USE_FILE_LOCKING"] = "FALSE"
    import h5py
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_ckpt_h5py import check_box_tiles, layout_boxes
    subprocess.run(["rm", "-rf", a.workdir], check=True)
    cmd = [a.mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", "4", a.meshpoint, "train",
           "--config", a.config, "--train-data", a.data, "--steps", "3", "--ckpt-every", "3", "--tp", "2",
           "--dp", "2", "--run-dir", a.workdir, "--log-every", "0", "--compress", a.compress]
    r = subprocess.run(cmd, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if r.returncode:
        print("FAIL: training exited", r.returncode); return 1
    step_dir = os.path.join(a.workdir, "checkpoints", open(os.path.join(a.workdir, "checkpoints", "latest")).read().strip())
    cfg = json.load(open(a.config))
    D, I, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    hd = D // cfg["num_attention_heads"]
    expect = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        expect.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       p + "self_attn.q_proj.weight": (cfg["num_attention_heads"] * hd, D),
                       p + "self_attn.k_proj.weight": (cfg["num_key_value_heads"] * hd, D),
                       p + "self_attn.v_proj.weight": (cfg["num_key_value_heads"] * hd, D),
                       p + "self_attn.o_proj.weight": (D, cfg["num_attention_heads"] * hd),
                       p + "mlp.gate_proj.weight": (I, D), p + "mlp.up_proj.weight": (I, D),
                       p + "mlp.down_proj.weight": (D, I)})
    fails = []

    def check(cond, msg):
        if not cond:
            fails.append(msg); print("FAIL:", msg, file=sys.stderr)

    idx = h5py.File(os.path.join(step_dir, "index.h5"), "r")
    check(idx.attrs["format"] == b"meshpoint-checkpoint" and int(idx.attrs["format_version"]) == 3, "format")
    check(int(idx.attrs["step"]) == 3, "step")
    for key in ("model_config", "train_config", "mesh", "data_cursor", "lr_schedule", "optimizer", "rng"):
        check(("meta/" + key) in idx, f"metadata {key} missing")
    mesh = json.loads(idx["meta/mesh"][()])
    check(mesh["tp"] == 2 and mesh["dp"] == 2, f"mesh {mesh}")
    check(json.loads(idx["meta/model_config"][()])["vocab_size"] == V, "model_config vocab_size")
    tensors, boxes = idx["layout/tensors"][...], layout_boxes(h5py, np, check, "train", step_dir, idx)
    names = {t["name"].decode() for t in tensors}
    want = {k + "/" + n for n in expect for k in ("model", "optim/exp_avg", "optim/exp_avg_sq")}
    check(names == want, f"tensor names differ: extra {sorted(names - want)[:5]}, missing {sorted(want - names)[:5]}")
    files = {}
    for t in tensors:
        name = t["name"].decode()
        nd = int(t["ndim"])
        shape = tuple(int(x) for x in t["shape"][:nd])
        base = name.split("/", 1)[1] if name.startswith("model/") else name.split("/", 2)[2]
        check(shape == expect.get(base), f"{name}: shape {shape}, HF shape {expect.get(base)}")
        full = np.full(shape, np.nan, np.float32)
        count = np.zeros(shape, np.int32)
        first, n = int(t["box_first"]), int(t["nboxes"])
        for b in boxes[first:first + n]:
            fn = b["file"].decode()
            f = files.setdefault(fn, h5py.File(os.path.join(step_dir, fn), "r"))
            off = [int(x) for x in b["offset"][:nd]]
            shp = [int(x) for x in b["shape"][:nd]]
            sl = tuple(slice(o, o + s) for o, s in zip(off, shp))
            ds = f[b["dataset"].decode()]
            full[sl] = ds[...]
            count[sl] += 1
            check_box_tiles(h5py, np, check, f"{name} {fn}", f, b, ds, a.compress != "none")
        check(bool((count == 1).all()), f"{name}: elements not covered exactly once")
        view = idx["view/" + name][...]
        check(np.array_equal(view, full), f"{name}: view differs from the rank files")
        check(np.isfinite(view).all(), f"{name}: non-finite values")
        if base.endswith("norm.weight") and name.startswith("model/"):
            check(not np.all(view == 1.0), f"{name}: still at its initial value after 3 steps?")
    for f in files.values():
        f.close()
    idx.close()
    rf = os.path.join(step_dir, "rank_00000.h5")
    r = subprocess.run(["h5dump", "-d", "/model/model.embed_tokens.weight/box_0", rf], capture_output=True, text=True)
    check(r.returncode == 0 and "DATA" in r.stdout, f"h5dump failed: {r.stderr[:300]}")
    if fails:
        print(f"test_train_ckpt_h5py: {len(fails)} failures"); return 1
    print(f"test_train_ckpt_h5py ({a.compress}): {len(tensors)} tensors read through their views equal the rank files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
