"""
tests/python/llama_torch.py — a plain PyTorch Llama with Hugging Face LlamaForCausalLM semantics, the
reference that meshpoint's forward and backward are checked against (tests/python/compare_torch.py)
and the peer its training speed is measured against (bench/torch_train.py).

It follows transformers' modeling_llama.py line by line, without depending on transformers:
  - embedding -> N x [x + attn(rmsnorm(x)); x + mlp(rmsnorm(x))] -> rmsnorm -> lm_head -> mean CE;
  - RMSNorm: h = x (upcast to at least fp32) * rsqrt(mean(h^2, -1) + eps), cast back, times w
    (HF upcasts to fp32; in fp64 this model keeps fp64, so the reference is a true fp64 one);
  - RoPE: inv_freq = 1 / theta^(arange(0, hd, 2) / hd), angles = pos * inv_freq, emb = cat(angles,
    angles), q' = q * cos(emb) + rotate_half(q) * sin(emb), rotate_half(x) = cat(-x2, x1) (pairs i and
    i + hd/2, so weights stay in HF row order);
  - grouped-query attention: k/v of num_key_value_heads heads, repeat_kv (repeat_interleave on the
    head axis: query head h uses kv head h // (H/KV)), causal softmax of q k^T / sqrt(hd) (in fp32 at
    least, as HF does), times v, o_proj;
  - SwiGLU MLP: down(silu(gate(x)) * up(x)); no biases except, with qkv_bias (Qwen2), on q/k/v_proj;
  - qk_norm (Qwen3Attention): q_norm / k_norm, RMSNorm(head_dim) over each head of q_proj(x) / k_proj(x)
    (after the bias), before RoPE;
  - head_dim: the config's "head_dim" when given (Qwen3: not hidden/heads; o_proj is [D, H*head_dim]);
  - tie_word_embeddings: lm_head.weight IS model.embed_tokens.weight (one parameter, so its gradient
    sums both uses; named_parameters() lists it once, as model.embed_tokens.weight).
Parameter names are the HF ones (model.layers.3.self_attn.q_proj.weight, ...), so a state dict moves
between this model and a meshpoint dump by name.

Run directly (`/usr/bin/python3 tests/python/llama_torch.py`) for self-checks: RoPE against the complex
rotation, repeat_kv against a per-head loop, RMSNorm against its formula, the whole model against a
transcription of HF's attention written independently, fp32 against fp64, and autograd against finite
differences (torch.autograd.gradcheck) on a tiny config. Exit status 0 when all hold, 1 otherwise.
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class LlamaConfig:
    """The HF config.json fields that change the math; other keys are ignored here (the C side checks
    them). Defaults are HF's LlamaConfig defaults where the key is missing."""

    # keys whose default differs from LlamaConfig's in another family's class (layers/family.c): this
    # reference does not keep those tables, so such a config must give them
    FAMILY_DEFAULTS = {"mistral": ("num_key_value_heads", "max_position_embeddings", "sliding_window"),
                       "qwen2": ("num_key_value_heads", "max_position_embeddings"),
                       "qwen3": ("num_key_value_heads", "max_position_embeddings", "head_dim"),
                       "phi3": ("max_position_embeddings", "rms_norm_eps")}

    def __init__(self, d):
        mt = d.get("model_type", "llama")
        missing = [k for k in self.FAMILY_DEFAULTS.get(mt, ()) if k not in d]
        if missing:
            raise ValueError("model_type %s: %s not given (its class's default differs from LlamaConfig's; "
                             "this reference knows only Llama's)" % (mt, ", ".join(missing)))
        if d.get("sliding_window") and (mt != "qwen2" and mt != "qwen3" or d.get("use_sliding_window")):
            raise ValueError("a sliding window is not computed by this reference")
        self.hidden_size = int(d["hidden_size"])
        self.intermediate_size = int(d["intermediate_size"])
        self.num_hidden_layers = int(d["num_hidden_layers"])
        self.num_attention_heads = int(d["num_attention_heads"])
        self.num_key_value_heads = int(d.get("num_key_value_heads", self.num_attention_heads))
        self.vocab_size = int(d["vocab_size"])
        self.max_position_embeddings = int(d.get("max_position_embeddings", 2048))
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.initializer_range = float(d.get("initializer_range", 0.02))
        assert self.num_attention_heads % self.num_key_value_heads == 0
        hd = d.get("head_dim")
        if hd is None:
            assert self.hidden_size % self.num_attention_heads == 0
            hd = self.hidden_size // self.num_attention_heads
        self.head_dim = int(hd)
        # what the family adds (transformers: Qwen2 always has q/k/v biases, Qwen3 always q/k norms);
        # "qkv_bias" / "qk_norm" keys override (the C side's llama_config fields of those names)
        self.qkv_bias = bool(d.get("qkv_bias", mt == "qwen2"))
        self.qk_norm = bool(d.get("qk_norm", mt == "qwen3"))

    @staticmethod
    def load(path):
        with open(path) as f:
            return LlamaConfig(json.load(f))


def _compute_dtype(dt):
    """HF upcasts norms and softmax to fp32; fp64 stays fp64 so the reference loses nothing."""
    return torch.float64 if dt == torch.float64 else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        in_dtype = x.dtype
        h = x.to(_compute_dtype(in_dtype))
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(in_dtype)


def rope_cos_sin(T, hd, theta, dtype, device=None, pos0=0):
    """cos, sin of shape [T, hd]: HF LlamaRotaryEmbedding (default rope type), computed in fp64 then cast.
    inv_freq_i = 1 / theta^(2i/hd) for i < hd/2; emb = cat(pos*inv_freq, pos*inv_freq)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float64) / hd))
    pos = torch.arange(pos0, pos0 + T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x [B, H, T, hd]; cos/sin [T, hd] (broadcast over B and H)."""
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, n_rep):
    """[B, KV, T, hd] -> [B, KV*n_rep, T, hd]; head h of the result is kv head h // n_rep (HF)."""
    if n_rep == 1:
        return x
    B, KV, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, KV, n_rep, T, hd).reshape(B, KV * n_rep, T, hd)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, H, KV, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.H, self.KV, self.hd = H, KV, hd
        self.q_proj = nn.Linear(D, H * hd, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(D, KV * hd, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(D, KV * hd, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(H * hd, D, bias=False)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd)
        k = self.k_proj(x).view(B, T, self.KV, self.hd)
        if self.qk_norm:   # Qwen3Attention: q_norm(q_proj(x).view(..., hd)) before the transpose and RoPE
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        k = repeat_kv(k, self.H // self.KV)
        v = repeat_kv(v, self.H // self.KV)
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        att = att.masked_fill(mask, float("-inf"))
        att = F.softmax(att, dim=-1, dtype=_compute_dtype(q.dtype)).to(q.dtype)
        y = torch.matmul(att, v)                       # [B, H, T, hd]
        y = y.transpose(1, 2).reshape(B, T, self.H * self.hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """forward(inputs [B, T] long, targets [B, T] long or None) -> (logits [B, T, V], mean loss or None)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._rope = {}
        self.reset_parameters()

    def reset_parameters(self, generator=None):
        """HF _init_weights: normal(0, initializer_range) for linears and the embedding, zeros for biases,
        ones for norms."""
        std = self.cfg.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.ndim == 2:
                    p.normal_(0.0, std, generator=generator)
                else:
                    p.fill_(0.0 if name.endswith(".bias") else 1.0)

    def _rope_tables(self, T, dtype, device):
        key = (T, dtype, str(device))
        if key not in self._rope:
            cos, sin = rope_cos_sin(T, self.cfg.head_dim, self.cfg.rope_theta, dtype, device)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)
            self._rope[key] = (cos, sin, mask)
        return self._rope[key]

    def forward(self, inputs, targets=None):
        B, T = inputs.shape
        x = self.model.embed_tokens(inputs)
        cos, sin, mask = self._rope_tables(T, x.dtype, x.device)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        x = self.model.norm(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1).to(_compute_dtype(logits.dtype)),
                                   targets.reshape(B * T))
        return logits, loss


# ------------------------------------------------------------------------------------------------------
# Self-checks (run this file directly).

def _hf_attention_transcript(layer, x, theta):
    """HF LlamaAttention.forward as written in transformers 4.4x (eager path), transcribed separately
    from Attention.forward: rotary via position_ids and inv_freq @ positions, repeat_kv, additive
    causal mask of finfo.min, softmax in fp32."""
    a = layer.self_attn
    bsz, q_len, _ = x.shape
    hd = a.hd
    q = a.q_proj(x).view(bsz, q_len, a.H, hd).transpose(1, 2)
    k = a.k_proj(x).view(bsz, q_len, a.KV, hd).transpose(1, 2)
    v = a.v_proj(x).view(bsz, q_len, a.KV, hd).transpose(1, 2)
    position_ids = torch.arange(q_len)[None, :].expand(bsz, q_len)
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).double() / hd))
    inv_freq_expanded = inv_freq[None, :, None].expand(bsz, -1, 1)
    freqs = (inv_freq_expanded @ position_ids[:, None, :].double()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(x.dtype).unsqueeze(1)
    sin = emb.sin().to(x.dtype).unsqueeze(1)
    q = (q * cos) + (rotate_half(q) * sin)
    k = (k * cos) + (rotate_half(k) * sin)
    n_rep = a.H // a.KV
    k = torch.repeat_interleave(k, n_rep, dim=1)
    v = torch.repeat_interleave(v, n_rep, dim=1)
    w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
    causal = torch.full((q_len, q_len), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)
    w = w + causal
    w = F.softmax(w, dim=-1, dtype=torch.float32 if x.dtype != torch.float64 else torch.float64).to(q.dtype)
    o = torch.matmul(w, v).transpose(1, 2).contiguous().reshape(bsz, q_len, -1)
    return a.o_proj(o)


def _rel(a, b):
    return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-300)


def self_check():
    torch.manual_seed(0)
    fails = []

    def check(name, err, tol):
        ok = err <= tol
        print(f"  {'ok ' if ok else 'FAIL'} {name}: {err:.3e} (tol {tol:.0e})")
        if not ok:
            fails.append(name)

    # RoPE == complex rotation of the pair (i, i + hd/2) by angle pos * theta^(-2i/hd).
    T, hd, theta = 11, 16, 10000.0
    x = torch.randn(2, 3, T, hd, dtype=torch.float64)
    cos, sin = rope_cos_sin(T, hd, theta, torch.float64)
    z = torch.complex(x[..., : hd // 2], x[..., hd // 2:])
    ang = torch.outer(torch.arange(T, dtype=torch.float64),
                      torch.tensor([theta ** (-2.0 * i / hd) for i in range(hd // 2)], dtype=torch.float64))
    zr = z * torch.polar(torch.ones_like(ang), ang)
    check("rope vs complex rotation", _rel(apply_rope(x, cos, sin), torch.cat((zr.real, zr.imag), -1)), 1e-12)
    # A rotation: norms are preserved, and position 0 is the identity.
    check("rope preserves norms", _rel(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1)), 1e-12)
    check("rope at pos 0 is identity", _rel(apply_rope(x, cos, sin)[:, :, 0], x[:, :, 0]), 0.0)

    # repeat_kv == per-head loop with kv head h // n_rep.
    kv = torch.randn(2, 2, 5, 4, dtype=torch.float64)
    rep = repeat_kv(kv, 3)
    loop = torch.stack([kv[:, h // 3] for h in range(6)], dim=1)
    check("repeat_kv vs loop", _rel(rep, loop), 0.0)

    # RMSNorm against its formula.
    n = RMSNorm(8, 1e-5).double()
    with torch.no_grad():
        n.weight.copy_(torch.randn(8, dtype=torch.float64))
    y = torch.randn(3, 8, dtype=torch.float64)
    ref = y / torch.sqrt((y * y).mean(-1, keepdim=True) + 1e-5) * n.weight
    check("rmsnorm formula", _rel(n(y), ref), 1e-14)

    cfg = LlamaConfig(dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=40, rms_norm_eps=1e-5, rope_theta=10000.0))
    m = LlamaForCausalLM(cfg).double()
    with torch.no_grad():
        for name, p in m.named_parameters():   # non-trivial norm weights so their grads are tested too
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    inp = torch.randint(0, cfg.vocab_size, (2, 7))
    tgt = torch.randint(0, cfg.vocab_size, (2, 7))

    # Attention against the HF transcript.
    xa = torch.randn(2, 7, cfg.hidden_size, dtype=torch.float64)
    cos, sin, mask = m._rope_tables(7, torch.float64, xa.device)
    layer = m.model.layers[0]
    check("attention vs HF transcript", _rel(layer.self_attn(xa, cos, sin, mask),
                                             _hf_attention_transcript(layer, xa, cfg.rope_theta)), 1e-12)

    # Causality: changing a later token must not change earlier logits.
    inp2 = inp.clone()
    inp2[:, 5] = (inp2[:, 5] + 1) % cfg.vocab_size
    l1, _ = m(inp)
    l2, _ = m(inp2)
    check("causal (logits before the change)", _rel(l1[:, :5], l2[:, :5]), 0.0)
    if _rel(l1[:, 5:], l2[:, 5:]) == 0.0:
        fails.append("changed token changes nothing")

    # Loss == mean of -log softmax at targets.
    logits, loss = m(inp, tgt)
    lp = torch.log_softmax(logits, -1).gather(-1, tgt[..., None]).squeeze(-1)
    check("loss = mean CE", abs(loss.item() + lp.mean().item()) / abs(loss.item()), 1e-14)

    # fp32 vs fp64 forward and gradients.
    m32 = LlamaForCausalLM(cfg)
    m32.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    lg32, loss32 = m32(inp, tgt)
    check("fp32 vs fp64 logits", _rel(lg32.double(), logits), 1e-5)
    loss.backward()
    loss32.backward()
    g64 = dict((n_, p.grad) for n_, p in m.named_parameters())
    worst = max(_rel(p.grad.double(), g64[n_]) for n_, p in m32.named_parameters())
    check("fp32 vs fp64 grads (worst tensor)", worst, 1e-4)

    # Tied: one parameter whose gradient is the sum of the embedding and head uses.
    cfgt = LlamaConfig(dict(vars(cfg), tie_word_embeddings=True))
    mt = LlamaForCausalLM(cfgt).double()
    names = [n_ for n_, _ in mt.named_parameters()]
    if "lm_head.weight" in names or mt.lm_head.weight is not mt.model.embed_tokens.weight:
        fails.append("tied model has a separate lm_head.weight")
    _, lt = mt(inp, tgt)
    lt.backward()
    g_tied = mt.model.embed_tokens.weight.grad.clone()
    mu = LlamaForCausalLM(cfg).double()
    sd = {k: v for k, v in mt.state_dict().items()}
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()
    mu.load_state_dict(sd)
    _, lu = mu(inp, tgt)
    lu.backward()
    check("tied grad = embed grad + head grad",
          _rel(g_tied, mu.model.embed_tokens.weight.grad + mu.lm_head.weight.grad), 1e-12)

    # Qwen3's attention: q_norm/k_norm applied per head, against a transcription of Qwen3Attention
    # (per-head RMSNorm written out by hand, after the bias, before RoPE); head_dim 12 != 32/4.
    cq = LlamaConfig(dict(vars(cfg), head_dim=12, qkv_bias=True, qk_norm=True))
    mq = LlamaForCausalLM(cq).double()
    with torch.no_grad():
        for name, p in mq.named_parameters():
            if p.ndim == 1:
                p.copy_((0.0 if name.endswith(".bias") else 1.0) + 0.3 * torch.randn_like(p))
    aq = mq.model.layers[0].self_attn
    if tuple(aq.o_proj.weight.shape) != (32, 48) or aq.q_proj.bias is None:
        fails.append("head_dim / bias shapes")
    cos12, sin12, mask12 = mq._rope_tables(7, torch.float64, xa.device)

    def hand_norm(t, w):
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + cq.rms_norm_eps) * w

    q = hand_norm((xa @ aq.q_proj.weight.T + aq.q_proj.bias).view(2, 7, 4, 12), aq.q_norm.weight).transpose(1, 2)
    k = hand_norm((xa @ aq.k_proj.weight.T + aq.k_proj.bias).view(2, 7, 2, 12), aq.k_norm.weight).transpose(1, 2)
    v = (xa @ aq.v_proj.weight.T + aq.v_proj.bias).view(2, 7, 2, 12).transpose(1, 2)
    q, k = apply_rope(q, cos12, sin12), apply_rope(k, cos12, sin12)
    k, v = torch.repeat_interleave(k, 2, dim=1), torch.repeat_interleave(v, 2, dim=1)
    w_ = torch.softmax((q @ k.transpose(2, 3) / math.sqrt(12)).masked_fill(mask12, float("-inf")), -1)
    ref_o = (w_ @ v).transpose(1, 2).reshape(2, 7, 48) @ aq.o_proj.weight.T
    check("qwen3 attention (bias, q/k norm, head_dim 12) vs transcript", _rel(aq(xa, cos12, sin12, mask12), ref_o),
          1e-12)

    # Autograd against finite differences on very small models: Llama, and with biases, q/k norms and
    # head_dim 6 != 8/2.
    tiny = LlamaConfig(dict(hidden_size=8, intermediate_size=12, num_hidden_layers=1, num_attention_heads=2,
                            num_key_value_heads=1, vocab_size=10, rms_norm_eps=1e-5, tie_word_embeddings=True))
    for tcfg in (tiny, LlamaConfig(dict(vars(tiny), head_dim=6, qkv_bias=True, qk_norm=True))):
        _gradcheck(tcfg, fails)

    if fails:
        print(f"llama_torch self-check: {len(fails)} FAILED: {', '.join(fails)}")
        return 1
    print("llama_torch self-check: all passed")
    return 0


def _gradcheck(tiny, fails):
    """torch.autograd.gradcheck of the mean loss of a tiny model with weights ~0.2."""
    mt = LlamaForCausalLM(tiny).double()
    with torch.no_grad():
        for name, p in mt.named_parameters():
            p.mul_(10.0)   # weights ~0.2 so the function is far from linear
            if name.endswith(".bias"):
                p.normal_(0.0, 0.2)   # biases away from their initial 0
    params = list(mt.parameters())
    ti = torch.randint(0, 10, (2, 4))
    tt = torch.randint(0, 10, (2, 4))

    try:
        from torch.nn.utils import stateless   # torch >= 1.12
        names = [n_ for n_, _ in mt.named_parameters()]

        def g(*ps):
            return stateless.functional_call(mt, dict(zip(names, ps)), (ti, tt))[1]

        ok = torch.autograd.gradcheck(g, tuple(p.detach().clone().requires_grad_(True) for p in params),
                                      eps=1e-6, atol=1e-7, rtol=1e-5)
        what = f"head_dim {tiny.head_dim} qkv_bias {tiny.qkv_bias} qk_norm {tiny.qk_norm}"
        print(f"  {'ok ' if ok else 'FAIL'} autograd vs finite differences ({what})")
        if not ok:
            fails.append("gradcheck " + what)
    except ImportError:
        print("  skip autograd vs finite differences (no torch.nn.utils.stateless)")


if __name__ == "__main__":
    sys.exit(self_check())
