#!/usr/bin/python3
"""reference.py: an independent PyTorch forward pass (llama, qwen2) and the golden files.

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
tools/quants.py; nothing here comes from the C++ engine.
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
from gguf import GGUFReader  # noqa: E402

PROMPT_TEXT = "Once upon a time"
N_GREEDY = 16
REPO_ROOT = Path(__file__).resolve().parent.parent
STORIES = REPO_ROOT.parent / "shared" / "models" / "stories260K.gguf"
STORIES_TOKENS = 48
# Models with the same weights in different types, whose logits are compared: (model, baseline).
SAME_WEIGHTS = [("tiny-llama-q4_0", "tiny-llama-f32"), ("tiny-qwen2-q4_0", "tiny-qwen2-f32"),
                ("tiny-kjv-q4_0", "tiny-kjv-f32"), ("tiny-kq-mixed", "tiny-kq-q4_k_m")]
DEFAULT_FREQ_BASE = 10000.0


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
    model = Model(path)
    name = path.name[:-len(".gguf")]
    prompt = prompt_ids(model)
    logits64 = model.forward(prompt, torch.float64)
    logits32 = model.forward(prompt, torch.float32).double()
    ids64, gap = greedy(model, prompt, N_GREEDY, torch.float64)
    ids32, _ = greedy(model, prompt, N_GREEDY, torch.float32)
    scale = logits64.abs().max().item()
    rel = (logits32 - logits64).abs().max().item() / scale
    with open(out_dir / f"{name}.txt", "w") as f:
        f.write("prompt " + " ".join(map(str, prompt)) + "\n")
        f.write("greedy " + " ".join(map(str, ids64)) + "\n")
        f.write(f"n_vocab {model.n_vocab}\n")
        f.write(f"positions {len(prompt)}\n")
    logits64.numpy().astype("<f4").tofile(out_dir / f"{name}.logits.f32")
    print(f"{name:26s} T={len(prompt)} n_vocab={model.n_vocab} max|logit|={scale:6.3f}  "
          f"f32-vs-f64 max rel diff {rel:.2e}  greedy f32==f64: {ids32 == ids64}  "
          f"min top-2 gap (greedy) {gap:.4f}")
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
