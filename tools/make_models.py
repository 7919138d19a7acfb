#!/usr/bin/python3
"""make_models.py: seeded, reproducible test models (GGUF) with random weights.

    make_models.py --out data/models              the tiny test models + SHA256SUMS (committed)
    make_models.py --check --out data/models      regenerate in a temp dir, compare the sha256s
    make_models.py --quant-vectors [FILE]         data/golden/quant-vectors.gguf: src and each type
    make_models.py --preset deepseek-7b --out build/models [--output-type q4_0]
    make_models.py --preset deepseek-1b --out build/models [--output-type q4_0]
    make_models.py --preset deepseek-v2-lite --out build/models [--output-type q4_0]

Randomness comes from our own counter-based generator (splitmix64 of a per-tensor key and the
element index), and normals are the sum of 12 uniform 16-bit integers (Irwin-Hall, mean 0,
variance 1), computed exactly in integers. No libm call and no numpy Generator is involved, so the
bytes do not depend on the numpy version or the platform.

The tiny models share one project-made byte-level BPE vocabulary learned from BUILTIN_TEXT.
Models whose "weights" entry is equal share the same random weights (e.g. tiny-llama-q4_0 is
tiny-llama-f32 quantized), so the tests can compare them. Quantized tensors come from
tools/quants.py (ggml's reference quantizers), so a C++ quantizer can be checked byte for byte.
"""

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bpe  # noqa: E402
from gguf import (GGMLType, GGUFReader, GGUFType, GGUFWriter, QK4_0, QK_K,  # noqa: E402
                  fp16_bits, random_q6_k_blocks)
from quants import TYPE_BY_NAME  # noqa: E402

DEFAULT_SEED = 20251130
REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_VOCAB = REPO_ROOT.parent / "shared" / "vocab" / "ggml-vocab-deepseek-llm.gguf"

# ---------------------------------------------------------------------------------------------
# Random numbers
# ---------------------------------------------------------------------------------------------

_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment (2^64 / golden ratio)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_IRWIN_HALL_TERMS = 12           # 12 uniforms on [0,1) sum to variance 1
_U16 = 1 << 16
_IRWIN_HALL_MEAN = _IRWIN_HALL_TERMS * (_U16 - 1) / 2


def stream_key(seed, name):
    """64-bit key of one named random stream (a tensor), from the seed and the name."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return np.uint64(int.from_bytes(digest[:8], "little"))


def random_u64(key, start, count):
    """splitmix64 outputs for counters start .. start+count-1 of stream key."""
    counters = np.arange(start, start + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = key + (counters + np.uint64(1)) * _GOLDEN_GAMMA
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def random_normal(key, count):
    """count approximately standard normal float64 values (sum of 12 uniform 16-bit integers)."""
    u = random_u64(key, 0, 3 * count).reshape(count, 3)
    total = np.zeros(count, dtype=np.int64)
    for shift in (0, 16, 32, 48):
        total += ((u >> np.uint64(shift)) & np.uint64(_U16 - 1)).astype(np.int64).sum(axis=1)
    return (total - _IRWIN_HALL_MEAN) / _U16


def random_bytes(key, start_u64, n_u64):
    """Little-endian bytes of n_u64 stream values, as uint8 (n_u64, 8)."""
    return random_u64(key, start_u64, n_u64).astype("<u8").view(np.uint8).reshape(n_u64, 8)


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------

BOS_TEXT = "<｜begin▁of▁sentence｜>"
EOS_TEXT = "<｜end▁of▁sentence｜>"
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5  # llama.cpp's token type numbers
N_MERGES = 96
VOCAB_MULTIPLE = 32  # pad the vocabulary to a multiple of this with unused tokens

# Project-written text the merges are learned from.
BUILTIN_TEXT = """\
Once upon a time, there was a little town by the sea. In the town there lived a baker and his
daughter. Every morning the baker made bread, and the daughter carried it to the market. The
people of the town liked the bread, and they said that it was the best in the land. One day the
sea was grey and the wind was strong. The daughter went to the market anyway, and on the way she
met an old man who was sitting in the rain. She gave him a warm loaf of bread. He thanked her and
told her a story about the time when the town was young. When she came home, she told the story to
her father, and then they both went to the window to watch the sea. The wind stopped in the
evening, and the sun came out over the water. They were happy, and the town was quiet again.
"""


def build_vocab(merges=None):
    """-> (tokens, token_types, merges, bos_id, eos_id) of a byte-level BPE vocabulary: the 256
    byte tokens, the merge results, BOS, EOS, then unused tokens up to a multiple of
    VOCAB_MULTIPLE. merges: (a, b) pairs; default: the tiny models', learned from BUILTIN_TEXT."""
    tokens = [bpe.BYTE_TO_CHAR[b] for b in range(256)]
    if merges is None:
        merges = bpe.train_merges(BUILTIN_TEXT, N_MERGES)
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
    types = [TOKEN_NORMAL] * len(tokens)
    bos_id, eos_id = len(tokens), len(tokens) + 1
    tokens += [BOS_TEXT, EOS_TEXT]
    types += [TOKEN_CONTROL, TOKEN_CONTROL]
    n_unused = -len(tokens) % VOCAB_MULTIPLE
    tokens += [f"<unused_{i}>" for i in range(n_unused)]
    types += [TOKEN_UNUSED] * n_unused
    return tokens, types, [f"{a} {b}" for a, b in merges], bos_id, eos_id


def add_tiny_vocab(writer):
    return add_bpe_vocab(writer, build_vocab())


def add_bpe_vocab(writer, vocab):
    """tokenizer.* keys of vocab (build_vocab's tuple), gpt2 model, deepseek-llm pre-tokenizer.
    -> the number of tokens."""
    tokens, types, merges, bos_id, eos_id = vocab
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", "deepseek-llm")
    writer.add_array("tokenizer.ggml.tokens", GGUFType.STRING, tokens)
    writer.add_array("tokenizer.ggml.token_type", GGUFType.INT32, types)
    writer.add_array("tokenizer.ggml.merges", GGUFType.STRING, merges)
    writer.add_u32("tokenizer.ggml.bos_token_id", bos_id)
    writer.add_u32("tokenizer.ggml.eos_token_id", eos_id)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_bool("tokenizer.ggml.add_eos_token", False)
    return len(tokens)


# ---------------------------------------------------------------------------------------------
# Tiny test models
# ---------------------------------------------------------------------------------------------

TINY_COMMON = dict(n_embd=64, n_ff=128, n_layer=2, n_ctx=128, rms_eps=1e-6, freq_base=10000.0,
                   n_head=4, n_head_kv=4, tied=False, quant=None, output_type=None,
                   rope_scale=None, rope_freqs=False, mix=None)
# The K-quant models: wide enough (256) for whole 256-weight super-blocks in every matrix.
TINY_KQ = dict(arch="llama", weights="tiny-kq", n_embd=256, n_ff=256, n_head=4, n_head_kv=2)
GATING_SOFTMAX, GATING_SIGMOID = 1, 2  # deepseek2.expert_gating_func (llama.cpp's numbers)
# deepseek2 (Multi-head Latent Attention + DeepSeekMoE), V2-Lite's shape shrunk: heads of 16 + 8
# (no RoPE + RoPE) dims, values of 8, a latent of 32; layer 0 dense (n_ff 128), layers 1-2 pick 2
# of 8 experts of width 32 per token, plus 1 shared expert. 3 layers, so two are MoE layers.
TINY_DEEPSEEK2 = dict(arch="deepseek2", n_layer=3, n_lead_dense=1, q_lora_rank=None,
                      kv_lora_rank=32, qk_nope=16, qk_rope=8, v_head=8, n_expert=8,
                      n_expert_used=2, n_expert_shared=1, n_ff_exp=32, gating=GATING_SOFTMAX,
                      expert_weights_norm=False, expert_weights_scale=1.0, yarn=None)
# YaRN as V2-Lite's config has it, factor 40 shrunk to 4: the 4 rotated pairs of an 8-wide RoPE
# slice get ramps 0, 0, 0.5, 1 (correction dims 1 and 3), so every branch of the blend is used.
# log_mul is 0.1 * mscale_all_dim (0.707), what convert_hf_to_gguf writes.
TINY_YARN = dict(factor=4.0, orig_ctx=4096, log_mul=0.0707)
TINY_MODELS = {
    "tiny-llama-f32": dict(arch="llama", weights="tiny-llama"),
    "tiny-llama-gqa-tied-f32": dict(arch="llama", weights="tiny-llama-gqa-tied", n_head=8,
                                    n_head_kv=2, tied=True),
    "tiny-llama-q4_0": dict(arch="llama", weights="tiny-llama", quant=GGMLType.Q4_0,
                            output_type=GGMLType.Q8_0),
    "tiny-qwen2-f32": dict(arch="qwen2", weights="tiny-qwen2", n_head_kv=2),
    "tiny-qwen2-q4_0": dict(arch="qwen2", weights="tiny-qwen2", n_head_kv=2,
                            quant=GGMLType.Q4_0, output_type=GGMLType.Q4_0),
    # deepseek-coder style: linear scaling by 4, base 100000.
    "tiny-llama-ropescale-f32": dict(arch="llama", weights="tiny-llama", rope_scale=4.0,
                                     freq_base=100000.0),
    # DeepSeek-R1-Distill-Llama style: llama3 frequency factors in rope_freqs.weight.
    "tiny-llama-ropefreqs-f32": dict(arch="llama", weights="tiny-llama", rope_freqs=True),
    # What llama-quantize Q4_K_M writes for this model (see q4_k_m_type).
    "tiny-kq-q4_k_m": dict(TINY_KQ, mix="q4_k_m"),
    # Every type at least once, different types within a layer (KQ_MIXED_TYPES).
    "tiny-kq-mixed": dict(TINY_KQ, mix="mixed"),
    # DeepSeek-V2-Lite style: queries straight from x, softmax router, YaRN.
    "tiny-deepseek2-lite-f32": dict(TINY_DEEPSEEK2, weights="tiny-deepseek2-lite",
                                    yarn=TINY_YARN),
    "tiny-deepseek2-lite-q4_0": dict(TINY_DEEPSEEK2, weights="tiny-deepseek2-lite",
                                     yarn=TINY_YARN, quant=GGMLType.Q4_0,
                                     output_type=GGMLType.Q8_0),
    # DeepSeek-V3 style: compressed queries, sigmoid router with a selection bias, renormalised
    # and scaled expert weights, no rope scaling.
    "tiny-deepseek2-v3-f32": dict(TINY_DEEPSEEK2, weights="tiny-deepseek2-v3", q_lora_rank=32,
                                  gating=GATING_SIGMOID, expert_weights_norm=True,
                                  expert_weights_scale=2.5),
}
NORM_JITTER = 0.1   # norm weights are 1 + 0.1 * N(0,1)
BIAS_STD = 0.2      # qwen2 q/k/v biases
UNTIED_EMBD_STD = 0.5
# deepseek2 router (ffn_gate_inp): 3 times the usual std, so the 8 logits of a token are spread
# (std ~3): the top-2 picks vary from token to token and stay clear of ties (reference.py prints
# the smallest margin on the golden paths), while softmax still gives the second pick weight ~0.2.
ROUTER_STD_SCALE = 3.0
EXP_PROBS_B_STD = 0.1  # V3's selection bias: moves some picks among sigmoid scores in (0, 1)
FILE_TYPE_ALL_F32, FILE_TYPE_MOSTLY_Q4_0 = 0, 2  # general.file_type (llama_ftype numbers)
FILE_TYPE_MOSTLY_Q4_K_M = 15
QUANTIZATION_VERSION = 2                         # general.quantization_version of ggml today

# tiny-kq-mixed: per layer, the type of each matrix; every ggml type this project knows appears.
KQ_MIXED_TYPES = {
    "token_embd": GGMLType.Q5_K,
    "output": GGMLType.Q4_K,
    0: dict(attn_q=GGMLType.Q2_K, attn_k=GGMLType.Q3_K, attn_v=GGMLType.Q5_K,
            attn_output=GGMLType.Q4_1, ffn_gate=GGMLType.Q5_0, ffn_up=GGMLType.Q5_1,
            ffn_down=GGMLType.BF16),
    1: dict(attn_q=GGMLType.Q4_K, attn_k=GGMLType.Q6_K, attn_v=GGMLType.Q8_0,
            attn_output=GGMLType.F16, ffn_gate=GGMLType.Q4_0, ffn_up=GGMLType.Q2_K,
            ffn_down=GGMLType.Q3_K),
}

# llama3 rope scaling (as in Llama 3.1's config), with the original context shrunk to 64 so the
# factors differ across the 8 frequencies of a 16-wide head: 1, ~1.3, ~7.6, then 8.
LLAMA3_FACTOR, LLAMA3_LOW_FREQ_FACTOR, LLAMA3_HIGH_FREQ_FACTOR, LLAMA3_ORIG_CTX = 8.0, 1.0, 4.0, 64


def llama3_freq_factors(head_dim, freq_base):
    """Per-frequency divisors of theta (rope_freqs.weight), llama3's piecewise rule."""
    low_wavelen = LLAMA3_ORIG_CTX / LLAMA3_LOW_FREQ_FACTOR
    high_wavelen = LLAMA3_ORIG_CTX / LLAMA3_HIGH_FREQ_FACTOR
    factors = []
    for i in range(head_dim // 2):
        wavelen = 2 * np.pi * freq_base ** (2 * i / head_dim)
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(LLAMA3_FACTOR)
        else:
            smooth = (LLAMA3_ORIG_CTX / wavelen - LLAMA3_LOW_FREQ_FACTOR) / (
                LLAMA3_HIGH_FREQ_FACTOR - LLAMA3_LOW_FREQ_FACTOR)
            factors.append(1.0 / ((1 - smooth) / LLAMA3_FACTOR + smooth))
    return np.array(factors, dtype=np.float32)


def use_more_bits(i_layer, n_layer):
    """llama-quantize's layers that get more bits in Q4_K_M and Q5_K_M (llama.cpp c392e50,
    src/llama-quant.cpp): the first and last eighth, and every third layer between."""
    return (i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or
            (i_layer - n_layer // 8) % 3 == 2)


def q4_k_m_type(tensor, n_layer):
    """The type llama-quantize Q4_K_M gives a matrix of a llama model whose rows are whole
    super-blocks (no fallbacks): output.weight Q6_K; attn_v and ffn_down Q6_K on use_more_bits
    layers (its counters of those tensors equal the layer index here); everything else,
    token_embd included, the default Q4_K."""
    if tensor == "output.weight":
        return GGMLType.Q6_K
    parts = tensor.split(".")
    if parts[0] == "blk" and parts[2] in ("attn_v", "ffn_down"):
        if use_more_bits(int(parts[1]), n_layer):
            return GGMLType.Q6_K
    return GGMLType.Q4_K


def mixed_type(tensor):
    """tiny-kq-mixed's type for a matrix, from KQ_MIXED_TYPES."""
    parts = tensor.split(".")
    if parts[0] == "blk":
        return KQ_MIXED_TYPES[int(parts[1])][parts[2]]
    return KQ_MIXED_TYPES[parts[0]]


def mix_type(mix, tensor, n_layer):
    """The type of matrix tensor in a model with the given mix (None: no mix)."""
    if mix is None:
        return None
    return q4_k_m_type(tensor, n_layer) if mix == "q4_k_m" else mixed_type(tensor)


def add_hparams(writer, arch, name, cfg):
    # deepseek2 rotates only the qk_rope slice of a head.
    n_rot = cfg["qk_rope"] if arch == "deepseek2" else cfg["n_embd"] // cfg["n_head"]
    writer.add_string("general.architecture", arch)
    writer.add_string("general.name", name)
    writer.add_u32(f"{arch}.context_length", cfg["n_ctx"])
    writer.add_u32(f"{arch}.embedding_length", cfg["n_embd"])
    writer.add_u32(f"{arch}.block_count", cfg["n_layer"])
    writer.add_u32(f"{arch}.feed_forward_length", cfg["n_ff"])
    writer.add_u32(f"{arch}.attention.head_count", cfg["n_head"])
    writer.add_u32(f"{arch}.attention.head_count_kv", cfg["n_head_kv"])
    writer.add_f32(f"{arch}.attention.layer_norm_rms_epsilon", cfg["rms_eps"])
    writer.add_f32(f"{arch}.rope.freq_base", cfg["freq_base"])
    writer.add_u32(f"{arch}.rope.dimension_count", n_rot)
    writer.add_u32(f"{arch}.vocab_size", cfg["n_vocab"])
    if cfg.get("rope_scale"):
        writer.add_string(f"{arch}.rope.scaling.type", "linear")
        writer.add_f32(f"{arch}.rope.scaling.factor", cfg["rope_scale"])
    if arch == "deepseek2":
        add_deepseek2_hparams(writer, cfg)


def add_deepseek2_hparams(writer, cfg):
    """The deepseek2.* keys beyond llama's, as convert_hf_to_gguf writes them for a checkpoint
    whose attention is stored per head (head_count_kv = head_count, key_length = qk_nope +
    qk_rope, value_length = v_head, a combined attn_kv_b)."""
    arch = "deepseek2"
    writer.add_u32(f"{arch}.leading_dense_block_count", cfg["n_lead_dense"])
    if cfg["q_lora_rank"]:
        writer.add_u32(f"{arch}.attention.q_lora_rank", cfg["q_lora_rank"])
    writer.add_u32(f"{arch}.attention.kv_lora_rank", cfg["kv_lora_rank"])
    writer.add_u32(f"{arch}.attention.key_length", cfg["qk_nope"] + cfg["qk_rope"])
    writer.add_u32(f"{arch}.attention.value_length", cfg["v_head"])
    writer.add_u32(f"{arch}.expert_feed_forward_length", cfg["n_ff_exp"])
    writer.add_u32(f"{arch}.expert_count", cfg["n_expert"])
    writer.add_u32(f"{arch}.expert_used_count", cfg["n_expert_used"])
    writer.add_u32(f"{arch}.expert_shared_count", cfg["n_expert_shared"])
    writer.add_f32(f"{arch}.expert_weights_scale", cfg["expert_weights_scale"])
    writer.add_bool(f"{arch}.expert_weights_norm", cfg["expert_weights_norm"])
    writer.add_u32(f"{arch}.expert_gating_func", cfg["gating"])
    if cfg["yarn"]:
        writer.add_string(f"{arch}.rope.scaling.type", "yarn")
        writer.add_f32(f"{arch}.rope.scaling.factor", cfg["yarn"]["factor"])
        writer.add_u32(f"{arch}.rope.scaling.original_context_length", cfg["yarn"]["orig_ctx"])
        writer.add_f32(f"{arch}.rope.scaling.yarn_log_multiplier", cfg["yarn"]["log_mul"])


def tiny_model(name, seed):
    """-> a GGUFWriter holding the tiny model name."""
    cfg = dict(TINY_COMMON, **TINY_MODELS[name])
    arch, quant = cfg["arch"], cfg["quant"]
    n_embd, n_ff, head_dim = cfg["n_embd"], cfg["n_ff"], cfg["n_embd"] // cfg["n_head"]
    q_dim, kv_dim = cfg["n_head"] * head_dim, cfg["n_head_kv"] * head_dim

    cfg["n_vocab"] = len(build_vocab()[0])
    writer = GGUFWriter()
    add_hparams(writer, arch, name, cfg)
    # No llama_ftype names tiny-kq-mixed's mix: like a file llama.cpp guesses the type of, it has
    # no general.file_type.
    if cfg["mix"] == "q4_k_m":
        writer.add_u32("general.file_type", FILE_TYPE_MOSTLY_Q4_K_M)
    elif cfg["mix"] is None:
        writer.add_u32("general.file_type", FILE_TYPE_MOSTLY_Q4_0 if quant else FILE_TYPE_ALL_F32)
    if quant or cfg["mix"]:
        writer.add_u32("general.quantization_version", QUANTIZATION_VERSION)
    n_vocab = add_tiny_vocab(writer)

    def normal(tensor, shape, std, mean=0.0):
        values = random_normal(stream_key(seed, f"{cfg['weights']}/{tensor}"), int(np.prod(shape)))
        return (mean + std * values).astype(np.float32).reshape(shape)

    def matrix(tensor, rows, cols, std=None, ggml_type=None, n_expert=None):
        """W (rows=out, cols=in), std 1/sqrt(cols) unless given; F32 unless quantized (a type
        given here, else the model's mix, else its quant type). n_expert: a 3-D stack of that
        many such matrices (ne [cols, rows, n_expert]; each expert's rows follow the last's)."""
        shape = (rows, cols) if n_expert is None else (n_expert, rows, cols)
        w = normal(tensor, shape, std if std is not None else 1.0 / np.sqrt(cols))
        mixed = mix_type(cfg["mix"], tensor, cfg["n_layer"])
        chosen = next(t for t in (ggml_type, mixed, quant, GGMLType.F32) if t is not None)
        writer.add_tensor(tensor, w, chosen)

    def norm(tensor, width=n_embd):
        writer.add_tensor(tensor, normal(tensor, (width,), NORM_JITTER, 1.0))

    # Tied: embedding rows with std 1/sqrt(n_embd), so logits have std ~1 as untied ones do (a
    # larger std makes the model repeat its input token). Untied: a larger std keeps the token's
    # identity visible through the 2 layers, so greedy decoding does not settle on one token.
    embd_std = 1.0 / np.sqrt(n_embd) if cfg["tied"] else UNTIED_EMBD_STD
    matrix("token_embd.weight", n_vocab, n_embd, std=embd_std)
    norm("output_norm.weight")
    if not cfg["tied"]:
        matrix("output.weight", n_vocab, n_embd, ggml_type=cfg["output_type"])
    if cfg["rope_freqs"]:
        writer.add_tensor("rope_freqs.weight", llama3_freq_factors(head_dim, cfg["freq_base"]))
    if arch == "deepseek2":
        add_deepseek2_blocks(cfg, matrix, norm,
                             lambda tensor, shape, std: writer.add_tensor(
                                 tensor, normal(tensor, shape, std)))
        return writer
    for layer in range(cfg["n_layer"]):
        blk = f"blk.{layer}"
        norm(f"{blk}.attn_norm.weight")
        matrix(f"{blk}.attn_q.weight", q_dim, n_embd)
        matrix(f"{blk}.attn_k.weight", kv_dim, n_embd)
        matrix(f"{blk}.attn_v.weight", kv_dim, n_embd)
        if arch == "qwen2":
            for proj, dim in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                bias = f"{blk}.attn_{proj}.bias"
                writer.add_tensor(bias, normal(bias, (dim,), BIAS_STD))
        matrix(f"{blk}.attn_output.weight", n_embd, q_dim)
        norm(f"{blk}.ffn_norm.weight")
        matrix(f"{blk}.ffn_gate.weight", n_ff, n_embd)
        matrix(f"{blk}.ffn_up.weight", n_ff, n_embd)
        matrix(f"{blk}.ffn_down.weight", n_embd, n_ff)
    return writer


def add_deepseek2_blocks(cfg, matrix, norm, f32):
    """The layers of a deepseek2 model (a tiny one or a preset), in the order llama.cpp's
    converter writes them, through the caller's helpers: matrix(tensor, rows, cols, n_expert=None)
    a matrix (or a 3-D stack of n_expert) in the file's type, norm(tensor, width) a norm,
    f32(tensor, shape, std) random F32 values. The router is F32, as llama-quantize leaves it."""
    n_embd, n_head = cfg["n_embd"], cfg["n_head"]
    k_head = cfg["qk_nope"] + cfg["qk_rope"]
    kv_rank, n_expert, n_ff_exp = cfg["kv_lora_rank"], cfg["n_expert"], cfg["n_ff_exp"]
    n_ff_shexp = n_ff_exp * cfg["n_expert_shared"]
    for layer in range(cfg["n_layer"]):
        blk = f"blk.{layer}"
        norm(f"{blk}.attn_norm.weight")
        if cfg["q_lora_rank"]:
            q_rank = cfg["q_lora_rank"]
            matrix(f"{blk}.attn_q_a.weight", q_rank, n_embd)
            norm(f"{blk}.attn_q_a_norm.weight", q_rank)
            matrix(f"{blk}.attn_q_b.weight", n_head * k_head, q_rank)
        else:
            matrix(f"{blk}.attn_q.weight", n_head * k_head, n_embd)
        # One latent (kv_rank) and one RoPE key (qk_rope) per token, shared by every head.
        matrix(f"{blk}.attn_kv_a_mqa.weight", kv_rank + cfg["qk_rope"], n_embd)
        norm(f"{blk}.attn_kv_a_norm.weight", kv_rank)
        matrix(f"{blk}.attn_kv_b.weight", n_head * (cfg["qk_nope"] + cfg["v_head"]), kv_rank)
        matrix(f"{blk}.attn_output.weight", n_embd, n_head * cfg["v_head"])
        norm(f"{blk}.ffn_norm.weight")
        if layer < cfg["n_lead_dense"]:
            matrix(f"{blk}.ffn_gate.weight", cfg["n_ff"], n_embd)
            matrix(f"{blk}.ffn_up.weight", cfg["n_ff"], n_embd)
            matrix(f"{blk}.ffn_down.weight", n_embd, cfg["n_ff"])
            continue
        f32(f"{blk}.ffn_gate_inp.weight", (n_expert, n_embd), ROUTER_STD_SCALE / np.sqrt(n_embd))
        if cfg["gating"] == GATING_SIGMOID:
            f32(f"{blk}.exp_probs_b.bias", (n_expert,), EXP_PROBS_B_STD)
        matrix(f"{blk}.ffn_gate_exps.weight", n_ff_exp, n_embd, n_expert=n_expert)
        matrix(f"{blk}.ffn_up_exps.weight", n_ff_exp, n_embd, n_expert=n_expert)
        matrix(f"{blk}.ffn_down_exps.weight", n_embd, n_ff_exp, n_expert=n_expert)
        matrix(f"{blk}.ffn_gate_shexp.weight", n_ff_shexp, n_embd)
        matrix(f"{blk}.ffn_up_shexp.weight", n_ff_shexp, n_embd)
        matrix(f"{blk}.ffn_down_shexp.weight", n_embd, n_ff_shexp)


def write_tiny_models(out_dir, seed):
    """Writes every tiny model into out_dir; returns {file name: sha256}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sums = {}
    for name in TINY_MODELS:
        path = out_dir / f"{name}.gguf"
        sums[path.name] = tiny_model(name, seed).write(path)
        print(f"{path}  {path.stat().st_size} bytes  {sums[path.name]}")
    return sums


# ---------------------------------------------------------------------------------------------
# Quantizer test vectors (data/golden/quant-vectors.gguf)
# ---------------------------------------------------------------------------------------------

QUANT_VECTORS_FILE = "quant-vectors.gguf"
QUANT_VECTOR_COLS = 512  # two K-quant super-blocks, sixteen 32-weight blocks per row
QUANT_VECTOR_TYPES = ["f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K",
                      "q4_K", "q5_K", "q6_K"]
QV_CONSTANTS = (0.75, -1.25)  # the constant row's two halves: a positive and a negative level
QV_OUTLIER_STD = 0.05
QV_OUTLIERS = {5: 40.0, 77: -25.0, 200: 60.0, 301: -90.0, 450: 15.0}  # column: value
QV_TINY_STD = 1e-6  # fp16 scales of such blocks are subnormal or round to 0


def quant_vector_rows(seed):
    """The 8 x 512 float32 rows every quantizer is tested on: normal rows at several scales
    (std 1; std 0.02, the size of real weights; std 50; 0.5 + 0.25 N, mostly positive, so the
    K-quant mins clamp to 0), all zeros, a constant row (0.75 then -1.25: flat blocks of either
    sign), N(0, 0.05) with five large outliers, and values of about 1e-6."""
    def normal(i):
        return random_normal(stream_key(seed, f"quant-vectors/row{i}"), QUANT_VECTOR_COLS)

    half = QUANT_VECTOR_COLS // 2
    outliers = QV_OUTLIER_STD * normal(6)
    for col, value in QV_OUTLIERS.items():
        outliers[col] = value
    rows = [normal(0), 0.02 * normal(1), 50.0 * normal(2), 0.5 + 0.25 * normal(3),
            np.zeros(QUANT_VECTOR_COLS),
            np.repeat(QV_CONSTANTS, half),
            outliers, QV_TINY_STD * normal(7)]
    return np.array(rows).astype(np.float32)


def quant_vectors(seed):
    """A GGUFWriter with the F32 tensor src and src quantized to each QUANT_VECTOR_TYPES type,
    one tensor per type, named after it."""
    writer = GGUFWriter()
    writer.add_string("general.name", "quant-vectors")
    src = quant_vector_rows(seed)
    writer.add_tensor("src", src, GGMLType.F32)
    for name in QUANT_VECTOR_TYPES:
        writer.add_tensor(name, src, TYPE_BY_NAME[name])
    return writer


def write_quant_vectors(path, seed):
    """Writes the quantizer test vectors to path; returns the sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = quant_vectors(seed).write(path)
    print(f"{path}  {path.stat().st_size} bytes  {digest}")
    return digest


def check_quant_vectors(golden_dir, seed):
    """Regenerates the test vectors and compares them with golden_dir's. -> True when equal."""
    path = golden_dir / QUANT_VECTORS_FILE
    with tempfile.TemporaryDirectory() as tmp:
        fresh = quant_vectors(seed).write(Path(tmp) / QUANT_VECTORS_FILE)
    on_disk = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"
    ok = fresh == on_disk
    print(f"{'OK  ' if ok else 'DIFF'} {path}  regenerated {fresh[:16]}  on disk {on_disk[:16]}")
    return ok


def read_sums(out_dir):
    """{file name: sha256} from out_dir/SHA256SUMS ({} when absent)."""
    sums_path = out_dir / "SHA256SUMS"
    recorded = {}
    if sums_path.exists():
        for line in sums_path.read_text().splitlines():
            digest, file_name = line.split(maxsplit=1)
            recorded[file_name] = digest
    return recorded


def write_sums(out_dir, sums):
    """Records sums in out_dir/SHA256SUMS, keeping the lines of other files still present there
    (the trained models of tools/train_tiny.py share the file)."""
    kept = {f: d for f, d in read_sums(out_dir).items() if (out_dir / f).exists()}
    kept.update(sums)
    with open(out_dir / "SHA256SUMS", "w") as f:
        for file_name in sorted(kept):
            f.write(f"{kept[file_name]}  {file_name}\n")


def check_tiny_models(out_dir, seed, golden_dir):
    """Regenerates into a temp dir and compares with out_dir and its SHA256SUMS, and the quantizer
    test vectors with golden_dir's. -> exit code."""
    recorded = read_sums(out_dir)  # other files listed there (trained models) are not checked
    with tempfile.TemporaryDirectory() as tmp:
        fresh = write_tiny_models(Path(tmp), seed)
    bad = 0
    for file_name, digest in sorted(fresh.items()):
        path = out_dir / file_name
        on_disk = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"
        ok = digest == on_disk == recorded.get(file_name)
        bad += not ok
        print(f"{'OK  ' if ok else 'DIFF'} {file_name}  regenerated {digest[:16]}  "
              f"on disk {on_disk[:16]}  SHA256SUMS {recorded.get(file_name, 'missing')[:16]}")
    bad += not check_quant_vectors(golden_dir, seed)
    print("reproducible" if not bad else f"{bad} file(s) differ")
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------
# Benchmark presets (multi-GB, random quantized blocks, streamed)
# ---------------------------------------------------------------------------------------------

PRESETS = {
    "deepseek-7b": dict(n_embd=4096, n_layer=30, n_head=32, n_head_kv=32, n_ff=11008,
                        n_ctx=4096),
    "deepseek-1b": dict(n_embd=2048, n_layer=16, n_head=16, n_head_kv=16, n_ff=5504,
                        n_ctx=4096),
    # `make bench`'s default: small enough that stage 01 finishes in minutes (~80 M weights).
    "bench-small": dict(n_embd=512, n_layer=12, n_head=8, n_head_kv=8, n_ff=1408, n_ctx=2048),
    # tests/cli_test.sh: rows 2^20 wide in a 60 MB file; a run's memory must stay near that.
    "wide-ffn": dict(n_embd=32, n_layer=1, n_head=1, n_head_kv=1, n_ff=1 << 20, n_ctx=512),
    # DeepSeek-V2-Lite's shape (its config.json): MLA with a 512-wide latent and no query
    # compression, heads of 128 + 64 dims, values of 128; layer 0 dense (10944), then 26 MoE
    # layers of 64 experts of 1408 (6 used) plus 2 shared; YaRN factor 40. ~8.9 GB.
    "deepseek-v2-lite": dict(arch="deepseek2", n_embd=2048, n_layer=27, n_head=16,
                             n_head_kv=16, n_ff=10944, n_ctx=163840, n_lead_dense=1,
                             q_lora_rank=None, kv_lora_rank=512, qk_nope=128, qk_rope=64,
                             v_head=128, n_expert=64, n_expert_used=6, n_expert_shared=2,
                             n_ff_exp=1408, gating=GATING_SOFTMAX, expert_weights_norm=False,
                             expert_weights_scale=1.0,
                             yarn=dict(factor=40.0, orig_ctx=4096, log_mul=0.0707)),
}
PRESET_COMMON = dict(rms_eps=1e-6, freq_base=10000.0, n_vocab=102400)
CHUNK_BLOCKS = 1 << 20      # blocks generated per step (~19 MB of Q4_0): bounded memory
Q4_0_NIBBLE_STD = 4.61      # std of a uniform nibble minus 8: sqrt((16^2 - 1) / 12)
Q6_K_WEIGHT_STD = 18.5      # std of a uniform 6-bit value minus 32: sqrt((64^2 - 1) / 12)
Q6_K_SCALE_RMS = 73.3       # rms of a uniform int8 scale in [-127, 127]
SCALE_JITTER_BITS = 10      # d varies by a factor 0.75 .. 1.25 from block to block


def jittered(d_base, u64_column):
    """d_base * (0.75 .. 1.25), from the top bits of one random u64 per block."""
    frac = (u64_column >> np.uint64(64 - SCALE_JITTER_BITS)).astype(np.float32) / (
        1 << SCALE_JITTER_BITS)
    return np.float32(d_base) * (np.float32(0.75) + np.float32(0.5) * frac)


def q4_0_stream(key, n_blocks, weight_std):
    """Callable yielding random Q4_0 blocks (uniform nibbles, d giving weights of weight_std)."""
    d_base = weight_std / Q4_0_NIBBLE_STD
    u64_per_block = 2  # 16 bytes of nibbles

    def chunks():
        for start in range(0, n_blocks, CHUNK_BLOCKS):
            n = min(CHUNK_BLOCKS, n_blocks - start)
            raw = random_bytes(key, start * u64_per_block, n * u64_per_block).reshape(n, 16)
            u_first = raw[:, 0:8].copy().view("<u8").reshape(n)
            out = np.empty((n, 18), dtype=np.uint8)
            out[:, 0:2] = fp16_bits(jittered(d_base, u_first)).reshape(n, 1).view(np.uint8)
            out[:, 2:] = raw
            yield out.tobytes()
    return chunks


def q6_k_stream(key, n_blocks, weight_std):
    """Callable yielding random, valid Q6_K blocks with weights of about weight_std. The fp16 d
    comes out around 1e-5 (fp16 subnormal), as in real Q6_K output matrices."""
    d_base = weight_std / (Q6_K_WEIGHT_STD * Q6_K_SCALE_RMS)
    u64_per_block = 26  # 208 random bytes: ql, qh, scales

    def chunks():
        step = CHUNK_BLOCKS // 8
        for start in range(0, n_blocks, step):
            n = min(step, n_blocks - start)
            raw = random_bytes(key, start * u64_per_block, n * u64_per_block).reshape(n, 208)
            u_first = raw[:, 0:8].copy().view("<u8").reshape(n)
            yield random_q6_k_blocks(raw, jittered(d_base, u_first)).tobytes()
    return chunks


def copy_vocab(writer, n_vocab):
    """DeepSeek-LLM's tokenizer.* metadata from ../shared when present, else a synthetic vocab of
    n_vocab tokens (tiny BPE + unused fillers, BOS 100000 / EOS 100001 as in DeepSeek-LLM)."""
    if SHARED_VOCAB.exists():
        reader = GGUFReader(SHARED_VOCAB)
        for key in reader.fields:
            if key.startswith("tokenizer."):
                writer.add(key, *reader.typed(key))
        n = len(reader.fields["tokenizer.ggml.tokens"])
        if n != n_vocab:
            raise ValueError(f"{SHARED_VOCAB}: {n} tokens, expected {n_vocab}")
        print(f"vocabulary: tokenizer.* copied from {SHARED_VOCAB}")
        return
    print(f"NOTICE: {SHARED_VOCAB} not found; writing a synthetic {n_vocab}-token vocabulary "
          "(tiny BPE + unused fillers), not DeepSeek's", file=sys.stderr)
    tokens, types, merges, _, _ = build_vocab()
    n_normal = types.count(TOKEN_NORMAL)
    tokens, types = tokens[:n_normal], types[:n_normal]
    bos_id = 100000  # DeepSeek-LLM's ids
    for i in range(n_normal, n_vocab):
        if i in (bos_id, bos_id + 1):
            tokens.append(BOS_TEXT if i == bos_id else EOS_TEXT)
            types.append(TOKEN_CONTROL)
        else:
            tokens.append(f"<unused_{i}>")
            types.append(TOKEN_UNUSED)
    add_bpe_vocab(writer, (tokens, types, merges, bos_id, bos_id + 1))


def preset_row_widths(cfg):
    """The row widths (ne[0]) of a preset's Q4_0 matrices."""
    if cfg.get("arch") != "deepseek2":
        return [cfg["n_embd"], cfg["n_ff"]]
    return [cfg["n_embd"], cfg["n_ff"], cfg["q_lora_rank"] or cfg["n_embd"],
            cfg["kv_lora_rank"], cfg["n_head"] * cfg["v_head"], cfg["n_ff_exp"],
            cfg["n_ff_exp"] * cfg["n_expert_shared"]]


def write_preset(preset, out_dir, seed, output_type, n_layer_override, dry_run=False):
    cfg = dict(PRESET_COMMON, **PRESETS[preset])
    arch = cfg.get("arch", "llama")
    if n_layer_override:
        cfg["n_layer"] = n_layer_override
    n_embd, n_ff, n_vocab = cfg["n_embd"], cfg["n_ff"], cfg["n_vocab"]
    if (output_type == "q6_k" and n_embd % QK_K) or any(w % QK4_0
                                                        for w in preset_row_widths(cfg)):
        raise ValueError(f"{preset}: widths must be multiples of the block sizes")
    suffix = "" if output_type == "q6_k" else "-pure"  # "pure": output.weight Q4_0 too
    suffix += f"-L{cfg['n_layer']}" if n_layer_override else ""
    name = f"{preset}-q4_0{suffix}"
    path = out_dir / f"{name}.gguf"
    out_dir.mkdir(parents=True, exist_ok=True)

    writer = GGUFWriter()
    add_hparams(writer, arch, f"{name} (random weights)", cfg)
    writer.add_u32("general.file_type", FILE_TYPE_MOSTLY_Q4_0)
    writer.add_u32("general.quantization_version", QUANTIZATION_VERSION)
    copy_vocab(writer, n_vocab)

    # Keys name the preset, not the file: --layers N and --output-type share the other tensors.
    def q4(tensor, rows, cols, n_expert=None):
        """A Q4_0 matrix (rows=out, cols=in), or a 3-D stack of n_expert of them."""
        key = stream_key(seed, f"{preset}/{tensor}")
        ne = [cols, rows] if n_expert is None else [cols, rows, n_expert]
        n_blocks = int(np.prod(ne, dtype=np.int64)) // QK4_0
        writer.add_raw_tensor(tensor, ne, GGMLType.Q4_0,
                              q4_0_stream(key, n_blocks, 1.0 / np.sqrt(cols)))

    def normal(tensor, shape, std, mean=0.0):
        values = random_normal(stream_key(seed, f"{preset}/{tensor}"), int(np.prod(shape)))
        return (mean + std * values).astype(np.float32).reshape(shape)

    def norm(tensor, width=n_embd):
        writer.add_tensor(tensor, normal(tensor, (width,), NORM_JITTER, 1.0))

    head_dim = n_embd // cfg["n_head"]
    kv_dim = cfg["n_head_kv"] * head_dim
    q4("token_embd.weight", n_vocab, n_embd)
    norm("output_norm.weight")
    if output_type == "q6_k":
        key = stream_key(seed, f"{preset}/output.weight")
        stream = q6_k_stream(key, n_vocab * n_embd // QK_K, 1.0 / np.sqrt(n_embd))
        writer.add_raw_tensor("output.weight", [n_embd, n_vocab], GGMLType.Q6_K, stream)
    else:
        q4("output.weight", n_vocab, n_embd)
    if arch == "deepseek2":
        add_deepseek2_blocks(cfg, q4, norm,
                             lambda tensor, shape, std: writer.add_tensor(
                                 tensor, normal(tensor, shape, std)))
    for layer in range(cfg["n_layer"] if arch == "llama" else 0):
        blk = f"blk.{layer}"
        norm(f"{blk}.attn_norm.weight")
        q4(f"{blk}.attn_q.weight", n_embd, n_embd)
        q4(f"{blk}.attn_k.weight", kv_dim, n_embd)
        q4(f"{blk}.attn_v.weight", kv_dim, n_embd)
        q4(f"{blk}.attn_output.weight", n_embd, n_embd)
        norm(f"{blk}.ffn_norm.weight")
        q4(f"{blk}.ffn_gate.weight", n_ff, n_embd)
        q4(f"{blk}.ffn_up.weight", n_ff, n_embd)
        q4(f"{blk}.ffn_down.weight", n_embd, n_ff)

    if dry_run:
        size = writer.file_size()
        print(f"{path} (not written)  {len(writer.tensors)} tensors  {size} bytes "
              f"({size / 1e9:.2f} GB, {size / 2**30:.2f} GiB)")
        return
    start = time.time()
    tmp_path = path.with_suffix(".gguf.part")  # no half-written file under the final name
    digest = writer.write(tmp_path)
    os.replace(tmp_path, path)
    size = path.stat().st_size
    print(f"{path}  {size} bytes ({size / 2**30:.2f} GiB)  {time.time() - start:.1f} s  "
          f"sha256 {digest}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default data/models, or build/models for presets)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--check", action="store_true",
                        help="regenerate the tiny models (and the quantizer test vectors) in a "
                             "temp dir and compare sha256s")
    parser.add_argument("--quant-vectors", type=Path, nargs="?", metavar="FILE",
                        const=REPO_ROOT / "data" / "golden" / QUANT_VECTORS_FILE,
                        help="write only the quantizer test vectors (default FILE "
                             "data/golden/quant-vectors.gguf; make golden writes it too)")
    parser.add_argument("--golden", type=Path, default=REPO_ROOT / "data" / "golden",
                        help="where --check finds quant-vectors.gguf (default data/golden)")
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="a multi-GB benchmark model with random quantized weights")
    parser.add_argument("--output-type", choices=["q6_k", "q4_0"], default="q6_k",
                        help="type of output.weight in a preset (default q6_k, as llama.cpp's "
                             "Q4_0 files; q4_0 gives an all-Q4_0 file named *-pure)")
    parser.add_argument("--layers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true",
                        help="with --preset: print the file's size, write nothing")
    args = parser.parse_args()

    if args.preset:
        write_preset(args.preset, args.out or REPO_ROOT / "build" / "models", args.seed,
                     args.output_type, args.layers, args.dry_run)
        return 0
    if args.quant_vectors:
        write_quant_vectors(args.quant_vectors, args.seed)
        return 0
    out_dir = args.out or REPO_ROOT / "data" / "models"
    if args.check:
        return check_tiny_models(out_dir, args.seed, args.golden)
    write_sums(out_dir, write_tiny_models(out_dir, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
