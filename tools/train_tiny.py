#!/usr/bin/python3
"""train_tiny.py: trains the project's tiny DeepSeek-LLM-architecture model on the King James Bible.

    train_tiny.py --out data/models                   the committed model (about 30 min, 2 cores)
    train_tiny.py --out /tmp/smoke --steps 30         a smoke run of the whole pipeline
    train_tiny.py ... --engine build/01_naive/engine  also check the C++ tokenizer and generate

Writes tiny-kjv-f32.gguf and tiny-kjv-q4_0.gguf (and their lines in SHA256SUMS) into --out.

Corpus: the King James Version (1611; public domain, see data/README.md) as Debian's
bible-kjv-text package stores it, dumped by its `bible` program (apt-get install bible-kjv).
Verse references are dropped; one verse per line. Every 20th chapter is held out for validation.
Nothing of the text is written out: only the vocabulary and the weights.

Vocabulary: byte-level BPE (tools/bpe.py, the "deepseek-llm" split) trained on the training
chapters, 4096 tokens with BOS/EOS. Model: llama architecture as DeepSeek-LLM uses it (RMSNorm,
RoPE on adjacent pairs, SwiGLU, grouped-query attention), with the output tied to token_embd.
Training: AdamW, bf16 autocast matmuls (oneDNN; float32 weights), fixed seed and data order, so a
rerun with the same torch build, CPU type and --threads gives the same bytes.
"""

import argparse
import copy
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# OpenMP threads that spin while waiting collapse (10x slower) when the 2 cores are shared with
# other jobs; passive waiting costs little when they are not. Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.mkldnn  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bpe  # noqa: E402
import make_models  # noqa: E402
from kjv import read_chapters, split_text  # noqa: E402
import reference  # noqa: E402
from gguf import GGMLType, GGUFReader, GGUFWriter  # noqa: E402

NAME = "tiny-kjv"
DEFAULT_SEED = 20251130
N_VOCAB = 4096        # with the 258 byte and control tokens: 3838 merges
NEWLINE_ID = 10       # token id of "\n" (byte tokens come first; no merge contains a newline)

# Model (multiples of 32 everywhere, so every matrix splits into Q4_0 blocks).
CONFIG = dict(n_embd=128, n_layer=6, n_head=4, n_head_kv=2, n_ff=384, n_ctx=256,
              rms_eps=1e-5, freq_base=10000.0)
INIT_STD = 0.02
# Training.
BATCH = 32            # windows per step, each BOS + 255 tokens
STEPS = 600
LR_PEAK, LR_FINAL = 3e-3, 3e-4
WARMUP = 100
WEIGHT_DECAY = 0.1
ADAM_BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
EVAL_EVERY = 200
SAMPLE_PROMPT = "And it came to pass"
SAMPLE_TOKENS = 48


# ---------------------------------------------------------------------------------------------
# Corpus and vocabulary
# ---------------------------------------------------------------------------------------------

def train_vocab(text):
    """-> make_models.build_vocab's tuple for a N_VOCAB-token vocabulary learned from text."""
    n_merges = N_VOCAB - 256 - 2
    merges = bpe.train_merges(text, n_merges)
    vocab = make_models.build_vocab(merges)
    if len(vocab[0]) != N_VOCAB:
        raise ValueError(f"vocabulary has {len(vocab[0])} tokens, expected {N_VOCAB}")
    return vocab


# ---------------------------------------------------------------------------------------------
# Model: llama as DeepSeek-LLM uses it
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    """x (B, T, heads, hd) rotated on adjacent pairs (2i, 2i+1): GGUF's llama layout."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_head_kv = c["n_head"], c["n_head_kv"]
        self.hd = c["n_embd"] // c["n_head"]
        d = c["n_embd"]
        self.attn_norm = RMSNorm(d, c["rms_eps"])
        self.attn_q = nn.Linear(d, self.n_head * self.hd, bias=False)
        self.attn_k = nn.Linear(d, self.n_head_kv * self.hd, bias=False)
        self.attn_v = nn.Linear(d, self.n_head_kv * self.hd, bias=False)
        self.attn_output = nn.Linear(self.n_head * self.hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, c["rms_eps"])
        self.ffn_gate = nn.Linear(d, c["n_ff"], bias=False)
        self.ffn_up = nn.Linear(d, c["n_ff"], bias=False)
        self.ffn_down = nn.Linear(c["n_ff"], d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = rope(self.attn_q(h).view(B, T, self.n_head, self.hd), cos, sin)
        k = rope(self.attn_k(h).view(B, T, self.n_head_kv, self.hd), cos, sin)
        v = self.attn_v(h).view(B, T, self.n_head_kv, self.hd)
        group = self.n_head // self.n_head_kv  # query head j reads kv head j // group
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))          # (B, heads, T, hd)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(self.hd) + mask
        o = (torch.softmax(scores, dim=-1).to(v.dtype) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.attn_output(o)
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class TinyLlama(nn.Module):
    def __init__(self, c, n_vocab):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(n_vocab, c["n_embd"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.output_norm = RMSNorm(c["n_embd"], c["rms_eps"])
        self.output = nn.Linear(c["n_embd"], n_vocab, bias=False)
        self.output.weight = self.token_embd.weight  # tied: the GGUF has no output.weight
        hd = c["n_embd"] // c["n_head"]
        freq = c["freq_base"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.arange(c["n_ctx"], dtype=torch.float64)[:, None] * freq[None, :]
        self.register_buffer("cos", torch.cos(angles).float(), persistent=False)
        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # residual outputs scaled down by depth (GPT-2's rule)
                deep = name.endswith(("attn_output.weight", "ffn_down.weight"))
                std = INIT_STD / math.sqrt(2 * c["n_layer"]) if deep else INIT_STD
                nn.init.normal_(p, std=std)

    def forward(self, ids):
        """ids (B, T) -> logits (B, T, n_vocab), float32. Output tied to token_embd."""
        T = ids.shape[1]
        cos, sin = self.cos[:T, None, :], self.sin[:T, None, :]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        x = self.token_embd(ids)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        return self.output(self.output_norm(x)).float()


# ---------------------------------------------------------------------------------------------
# Data and training
# ---------------------------------------------------------------------------------------------

def verse_starts(ids, length):
    """Positions where a verse starts and a whole window of length tokens fits."""
    starts = np.concatenate([[0], np.flatnonzero(ids == NEWLINE_ID) + 1])
    return starts[starts + length <= len(ids)]


def windows(ids, starts, bos, length):
    """(len(starts), 1 + length) int64: BOS, then length tokens from each start."""
    out = np.empty((len(starts), 1 + length), dtype=np.int64)
    out[:, 0] = bos
    for row, s in enumerate(starts):
        out[row, 1:] = ids[s:s + length]
    return torch.from_numpy(out)


def tiling_starts(ids, length):
    """Verse starts that cover ids with windows that do not overlap (the evaluation windows)."""
    chosen, nxt = [], 0
    for s in verse_starts(ids, length):
        if s >= nxt:
            chosen.append(s)
            nxt = s + length
    return np.array(chosen)


def mean_loss(model, batches):
    """Mean next-token cross-entropy (nats) over the windows, BOS excluded as a target."""
    total, count = 0.0, 0
    with torch.no_grad():
        for w in batches:
            logits = model(w[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += w[:, 1:].numel()
    return total / count


def lr_at(step, steps):
    """Linear warmup, then cosine from LR_PEAK down to LR_FINAL."""
    if step < WARMUP:
        return LR_PEAK * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return LR_FINAL + 0.5 * (LR_PEAK - LR_FINAL) * (1 + math.cos(math.pi * t))


def train(model, train_ids, val_batches, bos, steps, seed):
    length = model.c["n_ctx"] - 1
    starts = verse_starts(train_ids, length)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR_PEAK,
                            betas=ADAM_BETAS)
    gen = torch.Generator().manual_seed(seed)
    start, recent = time.time(), []
    for step in range(steps):
        pick = torch.randint(len(starts), (BATCH,), generator=gen).numpy()
        w = windows(train_ids, starts[pick], bos, length)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        recent = (recent + [loss.item()])[-EVAL_EVERY:]
        if (step + 1) % EVAL_EVERY == 0 or step + 1 == steps:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                val = mean_loss(model, val_batches)
            print(f"step {step + 1:5d}/{steps}  train {np.mean(recent):.3f} (last {len(recent)})  "
                  f"val {val:.3f} (bf16)  lr {lr_at(step, steps):.2e}  "
                  f"{time.time() - start:6.0f} s", flush=True)


def float32_eval_model(model):
    """A copy whose nn.Linear layers run in float32 through oneDNN (the Debian torch's BLAS is
    the slow reference one), for the final float32 losses."""
    return torch.utils.mkldnn.to_mkldnn(copy.deepcopy(model).eval())


# ---------------------------------------------------------------------------------------------
# Export and checks
# ---------------------------------------------------------------------------------------------

def export(model, vocab, path, quantized):
    """GGUF of the model: F32, or Q4_0 matrices with token_embd (also the output) Q8_0, as
    llama.cpp quantizes a tied embedding like an output matrix. -> sha256."""
    c = dict(model.c, n_vocab=len(vocab[0]))
    writer = GGUFWriter()
    name = path.name[:-len(".gguf")]
    make_models.add_hparams(writer, "llama", name, c)
    writer.add_u32("general.file_type", make_models.FILE_TYPE_MOSTLY_Q4_0 if quantized
                   else make_models.FILE_TYPE_ALL_F32)
    if quantized:
        writer.add_u32("general.quantization_version", make_models.QUANTIZATION_VERSION)
    make_models.add_bpe_vocab(writer, vocab)
    params = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}

    def matrix(gguf_name, key, ggml_type=GGMLType.Q4_0):
        writer.add_tensor(gguf_name, params[key], ggml_type if quantized else GGMLType.F32)

    matrix("token_embd.weight", "token_embd.weight", GGMLType.Q8_0)
    writer.add_tensor("output_norm.weight", params["output_norm.weight"])
    for i in range(c["n_layer"]):
        for t in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                  "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):
            key = f"blocks.{i}.{t}.weight"
            if t.endswith("norm"):
                writer.add_tensor(f"blk.{i}.{t}.weight", params[key])
            else:
                matrix(f"blk.{i}.{t}.weight", key)
    digest = writer.write(path)
    print(f"{path}  {path.stat().st_size} bytes  sha256 {digest}")
    return digest


def load_gguf_weights(model, path):
    """A copy of model holding the (dequantized) weights of the GGUF at path."""
    reader = GGUFReader(path)
    out = copy.deepcopy(model)
    state = out.state_dict()
    for key in state:  # output.weight is token_embd.weight (tied)
        gguf_name = "token_embd.weight" if key == "output.weight" else key.replace("blocks", "blk")
        state[key] = torch.from_numpy(reader.tensor(gguf_name).copy())
    out.load_state_dict(state)
    return out


def check_against_reference(model, path, ids):
    """The exported F32 GGUF through tools/reference.py's float64 forward pass vs the model."""
    ref = reference.Model(path).forward(ids).float()
    with torch.no_grad():
        ours = model(torch.tensor([ids]))[0]
    diff = (ref - ours).abs().max().item() / ref.abs().max().item()
    print(f"reference.py on {path.name} vs the trained model: max rel logit diff {diff:.1e}")
    if diff > 1e-4:
        raise ValueError(f"{path}: exported model disagrees with the trained one ({diff:.1e})")


def greedy_text(model, vocab, prompt, n):
    tokens, _, merges, bos, _ = vocab
    ids = [bos] + bpe.encode(prompt, {t: i for i, t in enumerate(tokens)}, merges)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids[-model.c["n_ctx"]:]]))[0, -1].argmax()))
    return bpe.decode(ids[1:], tokens)


def check_engine(engine, path, val_text, val_ids):
    """The C++ tokenizer must give the Python ids on the whole validation text; then a greedy
    sample from the engine."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(val_text)
        f.flush()
        out = subprocess.run([engine, "-m", str(path), "-f", f.name, "--tokenize"], check=True,
                             capture_output=True, text=True).stdout
    cpp = [int(t) for t in out.split()]
    same = cpp == list(val_ids)
    print(f"C++ tokenizer on the validation text ({len(val_ids)} tokens): "
          f"{'same ids' if same else 'DIFFERENT ids'}")
    if not same:
        raise ValueError(f"{engine}: tokenizer disagrees with tools/bpe.py on {path}")
    gen = subprocess.run([engine, "-m", str(path), "-p", SAMPLE_PROMPT, "-n", str(SAMPLE_TOKENS),
                          "--temp", "0"], check=True, capture_output=True, text=True).stdout
    print(f"engine greedy ({path.name}): {gen.strip()!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (data/models)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engine", type=Path, help="C++ engine to check the exported files with")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()

    train_text, val_text = split_text(read_chapters())
    vocab = train_vocab(train_text)
    tokens, _, merges, bos, _ = vocab
    token_ids = {t: i for i, t in enumerate(tokens)}
    train_ids = np.array(bpe.encode(train_text, token_ids, merges), dtype=np.int64)
    val_ids = np.array(bpe.encode(val_text, token_ids, merges), dtype=np.int64)
    print(f"corpus: {len(train_text)} + {len(val_text)} bytes, {len(train_ids)} + {len(val_ids)} "
          f"tokens (train + val), vocabulary {len(tokens)}  {time.time() - t0:.0f} s", flush=True)

    model = TinyLlama(CONFIG, len(tokens))
    length = CONFIG["n_ctx"] - 1
    val_batches = windows(val_ids, tiling_starts(val_ids, length), bos, length).split(BATCH)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters, {CONFIG}", flush=True)
    train(model, train_ids, val_batches, bos, args.steps, args.seed)
    train_time = time.time() - t0

    # Final losses in float32, on the validation windows and as many training windows.
    train_eval = windows(train_ids, tiling_starts(train_ids, length)[:len(val_ids) // length],
                         bos, length).split(BATCH)
    f32 = float32_eval_model(model)
    losses = {"train": mean_loss(f32, train_eval), "val": mean_loss(f32, val_batches)}
    print(f"final float32 loss: train {losses['train']:.4f}  val {losses['val']:.4f}")
    print(f"greedy (PyTorch): {greedy_text(f32, vocab, SAMPLE_PROMPT, SAMPLE_TOKENS)!r}")

    args.out.mkdir(parents=True, exist_ok=True)
    sums = {}
    for suffix, quantized in (("f32", False), ("q4_0", True)):
        path = args.out / f"{NAME}-{suffix}.gguf"
        sums[path.name] = export(model, vocab, path, quantized)
        if quantized:
            q = float32_eval_model(load_gguf_weights(model, path))
            print(f"{path.name}: val loss {mean_loss(q, val_batches):.4f} (float32, dequantized)")
        else:
            check_against_reference(model, path, [bos] + list(val_ids[:32]))
        if args.engine:
            check_engine(str(args.engine), path, val_text, val_ids)
    make_models.write_sums(args.out, sums)
    print(f"total {time.time() - t0:.0f} s (training {train_time:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
