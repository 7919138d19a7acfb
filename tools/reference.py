#!/usr/bin/python3
"""reference.py: an independent PyTorch forward pass (llama, qwen2, deepseek2) and the golden
files.

    reference.py --models data/models --out data/golden

For every <model>.gguf in --models it writes, in --out:
    <model>.txt          prompt <ids...> | greedy <16 ids> | n_vocab <n> | positions <T>
    <model>.logits.f32   little-endian float32 logits (T x n_vocab), one row per prompt position
The numbers come from a float64 run; a float32 run of the same model is compared with it (the
self-check printed for each model). If ../shared/models/stories260K.gguf exists, it is run
greedily from "Once upon a time" and the text printed (nothing is written for it).
It also writes --out/quant-vectors.gguf (tools/make_models.py --quant-vectors): test data and its
quantization to every type, by tools/quants.py.

Weights are read and dequantized (every ggml type this project knows) with tools/gguf.py and
tools/quants.py; nothing here comes from the C++ engine. deepseek2 (Multi-head Latent Attention
+ DeepSeekMoE) follows the semantics of DeepSeek's published modeling_deepseek.py (V2 and V3).
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bpe  # noqa: E402
import make_models  # noqa: E402
from gguf import GGMLType, GGUFReader  # noqa: E402

PROMPT_TEXT = "Once upon a time"
N_GREEDY = 16
# Below this margin between the last picked expert and the next (in router logits for softmax,
# selection scores for sigmoid), an engine that rounds activations to 8 bits for quantized
# weights may pick the other expert, and from that position on computes another function: the
# golden logits of a quantized MoE model stop before the first such position.
ROUTE_MARGIN = 0.05
FLOAT_TYPES = (GGMLType.F32, GGMLType.F16, GGMLType.BF16)
REPO_ROOT = Path(__file__).resolve().parent.parent
STORIES = REPO_ROOT.parent / "shared" / "models" / "stories260K.gguf"
STORIES_TOKENS = 48
# Models with the same weights in different types, whose logits are compared: (model, baseline).
SAME_WEIGHTS = [("tiny-llama-q4_0", "tiny-llama-f32"), ("tiny-qwen2-q4_0", "tiny-qwen2-f32"),
                ("tiny-kjv-q4_0", "tiny-kjv-f32"), ("tiny-kq-mixed", "tiny-kq-q4_k_m"),
                ("tiny-deepseek2-lite-q4_0", "tiny-deepseek2-lite-f32")]
DEFAULT_FREQ_BASE = 10000.0
# YaRN's correction range (DeepSeek's config defaults, also llama.cpp's): the dims whose
# wavelength fits beta_fast times into the original context keep their frequency, those fitting
# fewer than beta_slow times are fully interpolated.
YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0
YARN_MIN_RAMP_WIDTH = 0.001  # DeepSeek's yarn_linear_ramp_mask when low == high
GATING_SOFTMAX, GATING_SIGMOID = 1, 2  # deepseek2.expert_gating_func


class Model:
    """Config and float64 weights of a llama/qwen2 GGUF."""

    def __init__(self, path):
        self.path = Path(path)
        r = GGUFReader(path)
        self.reader = r
        arch = r.get("general.architecture")
        if arch not in ("llama", "qwen2"):
            raise ValueError(f"{path}: unsupported architecture {arch}")
        self.arch = arch
        self.n_embd = r.get(f"{arch}.embedding_length")
        self.n_layer = r.get(f"{arch}.block_count")
        self.n_head = r.get(f"{arch}.attention.head_count")
        self.n_head_kv = r.get(f"{arch}.attention.head_count_kv", self.n_head)
        self.n_ff = r.get(f"{arch}.feed_forward_length")
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = r.get(f"{arch}.rope.dimension_count", self.head_dim)
        if self.n_rot != self.head_dim:
            raise ValueError(f"{path}: partial rotary ({self.n_rot}/{self.head_dim}) unsupported")
        self.eps = r.get(f"{arch}.attention.layer_norm_rms_epsilon")
        self.freq_base = r.get(f"{arch}.rope.freq_base", DEFAULT_FREQ_BASE)
        self.freq_scale = 1.0
        scaling = r.get(f"{arch}.rope.scaling.type", "none")
        if scaling == "linear":
            self.freq_scale = 1.0 / r.get(f"{arch}.rope.scaling.factor")
        elif scaling != "none":
            raise ValueError(f"{path}: rope scaling {scaling} unsupported")
        self.tokens = r.get("tokenizer.ggml.tokens")
        self.bos = r.get("tokenizer.ggml.bos_token_id")

        def t(name):
            return torch.from_numpy(r.tensor(name).astype(np.float64))

        self.token_embd = t("token_embd.weight")                    # (n_vocab, n_embd)
        self.n_vocab = self.token_embd.shape[0]
        self.output_norm = t("output_norm.weight")
        self.output = t("output.weight") if "output.weight" in r.tensors else self.token_embd
        self.freq_factors = t("rope_freqs.weight") if "rope_freqs.weight" in r.tensors else None
        self.layers = []
        for i in range(self.n_layer):
            blk = f"blk.{i}"
            layer = {k: t(f"{blk}.{k}.weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}
            for proj in ("q", "k", "v"):
                name = f"{blk}.attn_{proj}.bias"
                layer[f"b{proj}"] = t(name) if name in r.tensors else None
            self.layers.append(layer)

    def rope_angles(self, n_pos):
        """theta[pos, i] = pos * freq_scale * base^(-2i/hd) / factor_i, float64 (n_pos, hd/2)."""
        i = torch.arange(self.head_dim // 2, dtype=torch.float64)
        freq = self.freq_scale * self.freq_base ** (-2.0 * i / self.head_dim)
        if self.freq_factors is not None:
            freq = freq / self.freq_factors
        return torch.arange(n_pos, dtype=torch.float64)[:, None] * freq[None, :]

    def rope(self, x, cos, sin):
        """x (T, heads, hd) rotated by angle i on the pair (2i, 2i+1) [llama] or (i, i+hd/2)."""
        cos, sin = cos[:, None, :], sin[:, None, :]
        if self.arch == "llama":
            a, b = x[..., 0::2], x[..., 1::2]
            out = torch.empty_like(x)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out
        half = self.head_dim // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, ids, dtype=torch.float64):
        """Logits (T, n_vocab) for every position of ids, computed in dtype."""
        def rmsnorm(x, w):
            return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + self.eps) * w.to(dtype)

        def linear(x, w, b=None):
            y = x @ w.to(dtype).T
            return y if b is None else y + b.to(dtype)

        n_pos, hd = len(ids), self.head_dim
        angles = self.rope_angles(n_pos)
        cos, sin = torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)
        mask = torch.triu(torch.full((n_pos, n_pos), float("-inf"), dtype=dtype), diagonal=1)
        group = self.n_head // self.n_head_kv  # query heads per kv head
        x = self.token_embd[torch.tensor(ids)].to(dtype)                  # (T, n_embd)
        for L in self.layers:
            h = rmsnorm(x, L["attn_norm"])
            q = linear(h, L["attn_q"], L["bq"]).view(n_pos, self.n_head, hd)
            k = linear(h, L["attn_k"], L["bk"]).view(n_pos, self.n_head_kv, hd)
            v = linear(h, L["attn_v"], L["bv"]).view(n_pos, self.n_head_kv, hd)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            # Query head j reads kv head j // group (ggml's broadcast order).
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask
            att = torch.softmax(scores, dim=-1)
            o = torch.einsum("hqk,khd->qhd", att, v).reshape(n_pos, self.n_head * hd)
            x = x + linear(o, L["attn_output"])
            h = rmsnorm(x, L["ffn_norm"])
            gate, up = linear(h, L["ffn_gate"]), linear(h, L["ffn_up"])
            x = x + linear(torch.nn.functional.silu(gate) * up, L["ffn_down"])
        return linear(rmsnorm(x, self.output_norm), self.output)


class DeepSeek2:
    """Config and float64 weights of a deepseek2 GGUF (DeepSeek-V2, V2-Lite, V3): attention heads
    of qk_nope + qk_rope dims decompressed from a per-token latent, and from layer
    leading_dense_block_count on, a routed mixture of experts plus shared experts."""

    def __init__(self, path):
        self.path = Path(path)
        r = GGUFReader(path)
        self.reader = r
        arch = self.arch = "deepseek2"
        if r.get("general.architecture") != arch:
            raise ValueError(f"{path}: not a deepseek2 model")
        self.n_embd = r.get(f"{arch}.embedding_length")
        self.n_layer = r.get(f"{arch}.block_count")
        self.n_head = r.get(f"{arch}.attention.head_count")
        if r.get(f"{arch}.attention.head_count_kv", self.n_head) != self.n_head:
            raise ValueError(f"{path}: only per-head keys/values (head_count_kv = head_count)")
        self.eps = r.get(f"{arch}.attention.layer_norm_rms_epsilon")
        self.n_rot = self.qk_rope = r.get(f"{arch}.rope.dimension_count")
        self.k_head = r.get(f"{arch}.attention.key_length")
        self.qk_nope = self.k_head - self.qk_rope
        self.v_head = r.get(f"{arch}.attention.value_length")
        self.kv_lora_rank = r.get(f"{arch}.attention.kv_lora_rank")
        self.n_dense = r.get(f"{arch}.leading_dense_block_count", 0)
        self.n_expert = r.get(f"{arch}.expert_count", 0)
        self.n_expert_used = r.get(f"{arch}.expert_used_count", 0)
        self.gating = r.get(f"{arch}.expert_gating_func", GATING_SOFTMAX)
        self.weights_norm = r.get(f"{arch}.expert_weights_norm", False)
        self.weights_scale = r.get(f"{arch}.expert_weights_scale", 1.0)
        self.freq_base = r.get(f"{arch}.rope.freq_base", DEFAULT_FREQ_BASE)
        self.inv_freq, mscale = self.yarn_frequencies(r)
        # DeepSeek: softmax_scale = key_length^-0.5 * mscale^2 (q and k each carry one mscale).
        self.softmax_scale = self.k_head ** -0.5 * mscale * mscale
        self.tokens = r.get("tokenizer.ggml.tokens")
        self.bos = r.get("tokenizer.ggml.bos_token_id")

        def t(name):
            return torch.from_numpy(r.tensor(name).astype(np.float64))

        def optional(name):
            return t(name) if name in r.tensors else None

        self.token_embd = t("token_embd.weight")                    # (n_vocab, n_embd)
        self.n_vocab = self.token_embd.shape[0]
        self.output_norm = t("output_norm.weight")
        self.output = optional("output.weight")
        self.output = self.token_embd if self.output is None else self.output
        self.layers = []
        for i in range(self.n_layer):
            blk = f"blk.{i}"
            names = ["attn_norm", "attn_q", "attn_q_a", "attn_q_a_norm", "attn_q_b",
                     "attn_kv_a_mqa", "attn_kv_a_norm", "attn_kv_b", "attn_output", "ffn_norm",
                     "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp", "ffn_gate_exps",
                     "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp",
                     "ffn_down_shexp"]
            layer = {k: optional(f"{blk}.{k}.weight") for k in names}
            layer["exp_probs_b"] = optional(f"{blk}.exp_probs_b.bias")
            self.layers.append(layer)

    def yarn_frequencies(self, r):
        """-> (inv_freq (n_rot/2,) float64, mscale). Without scaling inv_freq[i] = base^(-2i/d);
        with YaRN, DeepSeek's DeepseekV2YarnRotaryEmbedding: a blend of the original frequency
        (extrapolation) and frequency/factor (interpolation), by a linear ramp over the pairs
        between the correction dims of beta_fast and beta_slow. mscale = 1 + log_mul * ln(factor)
        multiplies the scores twice; cos/sin stay unscaled (mscale equals mscale_all_dim)."""
        d, base = self.n_rot, self.freq_base
        freq_extra = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        scaling = r.get(f"{self.arch}.rope.scaling.type", "none")
        if scaling == "none":
            return freq_extra, 1.0
        if scaling != "yarn":
            raise ValueError(f"{self.path}: rope scaling {scaling} unsupported for deepseek2")
        factor = r.get(f"{self.arch}.rope.scaling.factor")
        orig_ctx = r.get(f"{self.arch}.rope.scaling.original_context_length")
        log_mul = r.get(f"{self.arch}.rope.scaling.yarn_log_multiplier", 0.0)

        def correction_dim(n_rotations):
            """The dim whose wavelength fits n_rotations times into orig_ctx."""
            return d * math.log(orig_ctx / (n_rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(correction_dim(YARN_BETA_FAST)), 0)
        high = min(math.ceil(correction_dim(YARN_BETA_SLOW)), d - 1)
        width = high - low if high != low else YARN_MIN_RAMP_WIDTH
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / width).clamp(0, 1)
        extrapolate = 1 - ramp
        freq_inter = freq_extra / factor
        inv_freq = freq_inter * (1 - extrapolate) + freq_extra * extrapolate
        mscale = 1.0 + log_mul * math.log(factor) if factor > 1 else 1.0
        return inv_freq, mscale

    @staticmethod
    def rope(x, cos, sin):
        """x (T, heads, n_rot) rotated by angle i on the adjacent pair (2i, 2i+1). DeepSeek's code
        de-interleaves the slice ((d/2, 2) transposed) and then rotates halves: the same pairs, in
        another order, so every q.k dot product is the same."""
        cos, sin = cos[:, None, :], sin[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def forward(self, ids, dtype=torch.float64, routing=None):
        """Logits (T, n_vocab) for every position of ids, computed in dtype. routing: a list that
        gets, per MoE layer, (selection scores (T, n_expert), picked experts (T, k), the picks
        without exp_probs_b (T, k))."""
        def rmsnorm(x, w):
            return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + self.eps) * w.to(dtype)

        def linear(x, w):
            return x @ w.to(dtype).T

        def swiglu(h, gate, up, down):
            return linear(torch.nn.functional.silu(linear(h, gate)) * linear(h, up), down)

        n_pos, n_head = len(ids), self.n_head
        angles = torch.arange(n_pos, dtype=torch.float64)[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)
        mask = torch.triu(torch.full((n_pos, n_pos), float("-inf"), dtype=dtype), diagonal=1)
        x = self.token_embd[torch.tensor(ids)].to(dtype)                  # (T, n_embd)
        for i, L in enumerate(self.layers):
            h = rmsnorm(x, L["attn_norm"])
            if L["attn_q"] is not None:
                q = linear(h, L["attn_q"])
            else:  # compressed query (V3): down to q_lora_rank, normed, up to the heads
                q = linear(rmsnorm(linear(h, L["attn_q_a"]), L["attn_q_a_norm"]), L["attn_q_b"])
            q = q.view(n_pos, n_head, self.k_head)
            q_nope, q_pe = q.split([self.qk_nope, self.qk_rope], dim=-1)
            latent, k_pe = linear(h, L["attn_kv_a_mqa"]).split(
                [self.kv_lora_rank, self.qk_rope], dim=-1)
            kv = linear(rmsnorm(latent, L["attn_kv_a_norm"]), L["attn_kv_b"])
            k_nope, v = kv.view(n_pos, n_head, self.qk_nope + self.v_head).split(
                [self.qk_nope, self.v_head], dim=-1)
            q_pe = self.rope(q_pe, cos, sin)
            k_pe = self.rope(k_pe[:, None, :], cos, sin)  # one RoPE key for every head
            q = torch.cat([q_nope, q_pe], dim=-1)
            k = torch.cat([k_nope, k_pe.expand(n_pos, n_head, self.qk_rope)], dim=-1)
            scores = torch.einsum("qhd,khd->hqk", q, k) * self.softmax_scale + mask
            att = torch.softmax(scores, dim=-1)
            o = torch.einsum("hqk,khd->qhd", att, v).reshape(n_pos, n_head * self.v_head)
            x = x + linear(o, L["attn_output"])
            h = rmsnorm(x, L["ffn_norm"])
            if i < self.n_dense:
                x = x + swiglu(h, L["ffn_gate"], L["ffn_up"], L["ffn_down"])
            else:
                x = x + self.moe(h, L, dtype, linear, routing) + swiglu(
                    h, L["ffn_gate_shexp"], L["ffn_up_shexp"], L["ffn_down_shexp"])
        return linear(rmsnorm(x, self.output_norm), self.output)

    def moe(self, h, L, dtype, linear, routing):
        """The routed experts' sum for h (T, n_embd). The router's probabilities (softmax or
        sigmoid of its logits), plus exp_probs_b when present (V3), choose the top
        expert_used_count experts; their weights are the unbiased probabilities, renormalised to
        sum 1 if expert_weights_norm, then times expert_weights_scale (routed_scaling_factor).
        llama.cpp and V3's code scale in every case, V2's code only when it does not
        renormalise; no V2 config renormalises, so they agree on every released model."""
        logits = linear(h, L["ffn_gate_inp"])                              # (T, n_expert)
        if self.gating == GATING_SIGMOID:
            probs = torch.sigmoid(logits)
        else:
            probs = torch.softmax(logits, dim=-1)
        bias = L["exp_probs_b"]
        selection = probs if bias is None else probs + bias.to(dtype)
        picked = torch.topk(selection, self.n_expert_used, dim=-1).indices       # (T, k)
        if routing is not None:
            unbiased = torch.topk(probs, self.n_expert_used, dim=-1).indices
            routing.append((selection, picked, unbiased))
        weights = probs.gather(1, picked)
        if self.weights_norm:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights * self.weights_scale
        # Expert e's matrices: gate/up (n_ff_exp, n_embd), down (n_embd, n_ff_exp).
        gate, up = L["ffn_gate_exps"].to(dtype)[picked], L["ffn_up_exps"].to(dtype)[picked]
        down = L["ffn_down_exps"].to(dtype)[picked]                        # (T, k, ., .)
        act = (torch.nn.functional.silu(torch.einsum("tkfd,td->tkf", gate, h)) *
               torch.einsum("tkfd,td->tkf", up, h))
        out = torch.einsum("tkdf,tkf->tkd", down, act)
        return (weights[..., None] * out).sum(dim=1)

    def pick_margins(self, ids, routing=None):
        """(T,) the smallest margin at each position over the MoE layers, between the last picked
        expert and the first unpicked one (units as in routing_summary). routing: forward()'s
        list for ids, when already computed."""
        if routing is None:
            routing = []
            self.forward(ids, torch.float64, routing)
        in_logits = self.gating == GATING_SOFTMAX and all(
            L["exp_probs_b"] is None for L in self.layers)
        k = self.n_expert_used
        margins = torch.full((len(ids),), math.inf, dtype=torch.float64)
        for selection, _, _ in routing:
            ranked = torch.sort(selection, dim=-1, descending=True).values
            ranked = ranked.log() if in_logits else ranked
            margins = torch.minimum(margins, ranked[:, k - 1] - ranked[:, k])
        return margins

    def is_quantized(self):
        """True when some tensor has a quantized type (the engine then rounds activations)."""
        return any(t.type not in FLOAT_TYPES for t in self.reader.tensors.values())

    def routing_summary(self, ids):
        """One line about the router on ids: distinct expert sets picked per MoE layer, the
        smallest margin between the last picked and the first unpicked expert, and how many
        picks exp_probs_b changed. The margin is in router logits for an unbiased softmax (whose
        log-probabilities differ as the logits do), else in selection scores (sigmoid + bias)."""
        routing = []
        self.forward(ids, torch.float64, routing)
        in_logits = self.gating == GATING_SOFTMAX and all(
            L["exp_probs_b"] is None for L in self.layers)
        sets, moved = [], 0
        for _, picked, unbiased in routing:
            sets.append(len({tuple(sorted(p)) for p in picked.tolist()}))
            moved += sum(set(a) != set(b) for a, b in zip(picked.tolist(), unbiased.tolist()))
        margin = self.pick_margins(ids, routing).min().item()
        unit = "router logits" if in_logits else "sigmoid + bias"
        return (f"  router on {len(ids)} tokens: distinct expert sets per MoE layer {sets}, "
                f"min pick margin {margin:.4f} ({unit}), picks moved by exp_probs_b "
                f"{moved}")


def load_model(path):
    """Model or DeepSeek2, by general.architecture."""
    arch = GGUFReader(path).get("general.architecture")
    return DeepSeek2(path) if arch == "deepseek2" else Model(path)


def argmax_lowest(row):
    """Index of the largest value, the lowest index on ties."""
    row = row.numpy()
    return int(np.flatnonzero(row == row.max())[0])


def top2_gap(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


def greedy(model, prompt, n, dtype=torch.float64):
    """n greedy ids after prompt (full recompute per step) and the smallest top-2 logit gap."""
    ids = list(prompt)
    min_gap = math.inf
    for _ in range(n):
        last = model.forward(ids, dtype)[-1]
        min_gap = min(min_gap, top2_gap(last.double()))
        ids.append(argmax_lowest(last))
    return ids[len(prompt):], min_gap


def prompt_ids(model):
    merges = model.reader.get("tokenizer.ggml.merges")
    token_ids = {s: i for i, s in enumerate(model.tokens)}
    return [model.bos] + bpe.encode(PROMPT_TEXT, token_ids, merges)


def write_golden(path, out_dir):
    model = load_model(path)
    name = path.name[:-len(".gguf")]
    prompt = prompt_ids(model)
    logits64 = model.forward(prompt, torch.float64)
    logits32 = model.forward(prompt, torch.float32).double()
    ids64, gap = greedy(model, prompt, N_GREEDY, torch.float64)
    ids32, _ = greedy(model, prompt, N_GREEDY, torch.float32)
    scale = logits64.abs().max().item()
    rel = (logits32 - logits64).abs().max().item() / scale
    positions = len(prompt)
    if isinstance(model, DeepSeek2) and model.is_quantized():
        close = (model.pick_margins(prompt) < ROUTE_MARGIN).nonzero()
        positions = max(1, int(close[0])) if len(close) else positions
    with open(out_dir / f"{name}.txt", "w") as f:
        f.write("prompt " + " ".join(map(str, prompt)) + "\n")
        f.write("greedy " + " ".join(map(str, ids64)) + "\n")
        f.write(f"n_vocab {model.n_vocab}\n")
        f.write(f"positions {positions}\n")
    logits64[:positions].numpy().astype("<f4").tofile(out_dir / f"{name}.logits.f32")
    print(f"{name:26s} T={len(prompt)} n_vocab={model.n_vocab} max|logit|={scale:6.3f}  "
          f"f32-vs-f64 max rel diff {rel:.2e}  greedy f32==f64: {ids32 == ids64}  "
          f"min top-2 gap (greedy) {gap:.4f}")
    if isinstance(model, DeepSeek2):
        print(model.routing_summary(prompt + ids64))
    return logits64


def run_stories():
    """Greedy stories260K from "Once upon a time" (SentencePiece ids), printed, not saved."""
    model = Model(STORIES)
    r = model.reader
    scores = r.get("tokenizer.ggml.scores")
    token_ids = {s: i for i, s in enumerate(model.tokens)}
    ids = sentencepiece_encode(PROMPT_TEXT, token_ids, scores)
    prompt = [model.bos] + ids
    out, _ = greedy(model, prompt, STORIES_TOKENS)
    text = sentencepiece_decode(prompt[1:] + out, model.tokens)
    print(f"stories260K: prompt ids {prompt}")
    print(f"stories260K: {text!r}")
    expected = "Once upon a time, there was a little girl named Lily."
    print("stories260K: matches the known continuation" if text.startswith(expected)
          else "stories260K: DOES NOT match the known continuation")


def sentencepiece_encode(text, token_ids, scores):
    """llama.cpp's SPM: a space prefix, spaces as U+2581, then merge the adjacent pair whose join
    is a token with the highest score (leftmost on ties) until none is left."""
    symbols = list(("▁" + text).replace(" ", "▁"))
    while True:
        best = None
        for i in range(len(symbols) - 1):
            tid = token_ids.get(symbols[i] + symbols[i + 1])
            if tid is not None and (best is None or scores[tid] > best[0]):
                best = (scores[tid], i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    ids = []
    for s in symbols:
        if s in token_ids:
            ids.append(token_ids[s])
        else:  # byte fallback
            ids.extend(token_ids[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
    return ids


def sentencepiece_decode(ids, tokens):
    data = bytearray()
    for i in ids:
        t = tokens[i]
        if t.startswith("<0x") and t.endswith(">") and len(t) == 6:
            data.append(int(t[3:5], 16))
        else:
            data += t.replace("▁", " ").encode("utf-8")
    return data.decode("utf-8", errors="replace").removeprefix(" ")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=REPO_ROOT / "data" / "models")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "data" / "golden")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = sorted(args.models.glob("*.gguf"))
    if not paths:
        print(f"no .gguf files in {args.models}", file=sys.stderr)
        return 1
    logits = {p.name[:-len(".gguf")]: write_golden(p, args.out) for p in paths}
    for model, baseline in SAME_WEIGHTS:
        if model in logits and baseline in logits:
            diff = (logits[model] - logits[baseline]).abs().max().item()
            print(f"{model} vs {baseline}: max |logit diff| {diff:.3f} (quantization error, "
                  "same weights)")
    make_models.write_quant_vectors(args.out / make_models.QUANT_VECTORS_FILE,
                                    make_models.DEFAULT_SEED)
    if STORIES.exists():
        run_stories()
    else:
        print(f"SKIPPED: {STORIES} is not present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
