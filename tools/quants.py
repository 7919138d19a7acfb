"""quants.py: ggml's tensor types in numpy: block layouts, dequantizers and quantizers.

The quantizers follow ggml's reference algorithms (quantize_row_*_ref in ggml/src/ggml-quants.c,
llama.cpp c392e50: what llama-quantize writes without an importance matrix), so that a quantizer
written separately in C++ can be held to the same bytes. What that takes:

- every computation in float32, one rounding per C operation and in ggml's order of operations
  (a*b+c is round(round(a*b)+c): numpy's float32 ufuncs never fuse a multiply-add);
- sums run one element after another, in index order, as ggml's loops do. numpy's .sum() adds
  pairwise and can differ in the last bit, so the code works on all blocks at once and loops over
  the elements within a block;
- integers come from ggml's nearest_int (round half to even, by a float32 addition) where ggml
  calls it, from C's truncating casts where ggml casts, and from roundf (half away from zero) in
  Q8_0; integers stored in narrower fields wrap as C's conversions do on every ggml platform.

Two rules come from the C++ engine (common/quant.cpp) rather than ggml, for inputs where ggml's
result is undefined or platform-dependent:
- a block holding a NaN or an infinity becomes a NaN fp16 scale (0x7e00) with every other byte 0
  (ggml would convert NaN to an integer, undefined behaviour in C);
- in Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, 1/d counts as 0 when it is not finite: d == 0 (as in ggml),
  and also a d so small that its inverse overflows (such a d is 0 once stored as fp16 anyway).

Layouts (little-endian, "fp16" an IEEE half, weights w in order along a row):
    Q4_0  32 w, 18 B: fp16 d | qs[16]                    w = d (q - 8)
    Q4_1  32 w, 20 B: fp16 d | fp16 m | qs[16]           w = d q + m
    Q5_0  32 w, 22 B: fp16 d | qh u32 | qs[16]           w = d (q - 16)
    Q5_1  32 w, 24 B: fp16 d | fp16 m | qh u32 | qs[16]  w = d q + m
    Q8_0  32 w, 34 B: fp16 d | i8 qs[32]                 w = d q
    (32-weight blocks: low nibble of qs[j] is weight j, high nibble weight j + 16; bit j of qh is
    the fifth bit of weight j)
    Q2_K 256 w,  84 B: scales[16] (scale | min << 4) | qs[64] | fp16 d | fp16 dmin
    Q3_K 256 w, 110 B: hmask[32] | qs[64] | scales[12] (16 x 6 bits) | fp16 d
    Q4_K 256 w, 144 B: fp16 d | fp16 dmin | scales[12] (8 x 6-bit scale, 8 x 6-bit min) | qs[128]
    Q5_K 256 w, 176 B: fp16 d | fp16 dmin | scales[12] | qh[32] | qs[128]
    Q6_K 256 w, 210 B: ql[128] | qh[64] | i8 scales[16] | fp16 d
    F32, F16, BF16: one value each.
"""

from collections import namedtuple

import numpy as np

F32 = np.float32


class GGMLType:
    """ggml tensor types, with the numbers stored in GGUF files."""
    F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 0, 1, 2, 3, 6, 7, 8
    Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16 = 10, 11, 12, 13, 14, 30
    NAMES = {}  # type -> ggml's name ("q4_K"), filled in from TYPES below
    BLOCK = {}  # type -> (weights per block, bytes per block)


QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = 32
QK_K = 256            # weights per K-quant super-block
K_SCALE_SIZE = 12     # bytes of Q4_K/Q5_K packed 6-bit scales and mins (and Q3_K's 16 scales)
Q4_0_OFFSET = 8       # Q4_0 stores q + 8 in a nibble: q in [-8, 7]
Q5_0_OFFSET = 16      # Q5_0 stores q + 16 in 5 bits
Q3_K_OFFSET = 4       # Q3_K stores q + 4 in 3 bits
Q6_K_OFFSET = 32      # Q6_K stores q + 32 in 6 bits: q in [-32, 31]
Q3_K_SCALE_OFFSET = 32  # Q3_K's 6-bit scales stand for -32..31
Q8_0_MAX = 127        # Q8_0 maps max |x| to 127
Q6_K_SCALE_LEVELS = -128  # Q6_K maps the largest sub-block scale to the int8 scale -128
K_SCALE_MAX = 63      # Q4_K/Q5_K: 6-bit sub-block scales and mins
Q2_K_SCALE_MAX = 15   # Q2_K: 4-bit sub-block scales and mins
GROUP_MAX_EPS = F32(1e-15)  # ggml: a group whose max |x| is below this is all zero

F16_NAN = 0x7E00       # the quiet NaN written as the scale of a non-finite block
F16_QUIET_BIT = 0x0200
F16_INF = 0x7C00
F32_TO_F16_MANTISSA_SHIFT = 23 - 10
BF16_QUIET_BIT = 0x0040
BF16_ROUND_BIAS = 0x7FFF  # + the kept lowest bit: round to nearest even when dropping 16 bits
ROUND_MAGIC = F32(12582912.0)  # 1.5 * 2^23: x + this lands where float32's unit is 1
ROUND_MANTISSA = 0x007FFFFF
ROUND_MANTISSA_BIAS = 0x00400000


# ---------------------------------------------------------------------------------------------
# Scalars: fp16, bf16, ggml's rounding
# ---------------------------------------------------------------------------------------------

def fp16_bits(values):
    """float -> IEEE half bits: round to nearest even (as F16C and the engine's fp32_to_fp16);
    a NaN keeps its sign and top payload bits and is made quiet, as F16C does (numpy alone
    would keep a signalling NaN signalling)."""
    values = np.asarray(values, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        bits = values.astype(np.float16).view(np.uint16)
    u = values.view(np.uint32)
    nan_bits = (((u >> 16) & 0x8000) | F16_INF | F16_QUIET_BIT |
                ((u & 0x7FFFFF) >> F32_TO_F16_MANTISSA_SHIFT))
    return np.where(np.isnan(values), nan_bits, bits).astype(np.uint16)


def fp16_value(bits):
    """IEEE half bits -> float32 (exact)."""
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32)


def bf16_bits(values):
    """float -> bfloat16 bits as ggml's fp32_to_bf16: round to nearest even; NaN made quiet."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + BF16_ROUND_BIAS + ((u >> 16) & 1)) >> 16
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(is_nan, (u >> 16) | BF16_QUIET_BIT, rounded).astype(np.uint16)


def bf16_value(bits):
    """bfloat16 bits -> float32 (exact: the top half of a float32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def nearest_int(values):
    """ggml's nearest_int: x + 1.5*2^23 in float32 rounds x to an integer (half to even), which
    is read back from the low mantissa bits. Done the same way here so that even inputs outside
    ggml's asserted range (|x| <= 4194303) give ggml's numbers."""
    with np.errstate(over="ignore", invalid="ignore"):
        biased = (np.asarray(values, dtype=np.float32) + ROUND_MAGIC).astype(np.float32)
    return (biased.view(np.int32) & ROUND_MANTISSA) - ROUND_MANTISSA_BIAS


def round_away(values):
    """C's roundf (half away from zero), exactly: a float32 plus 0.5 is exact in float64."""
    v = np.asarray(values, dtype=np.float32).astype(np.float64)
    return (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)


def inverse_scale(d):
    """1/d, or 0 where that is not finite (the engine's rule; ggml tests only d == 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(d != 0, F32(1.0) / d, F32(0.0)).astype(np.float32)
    return np.where(np.isfinite(inv), inv, F32(0.0)).astype(np.float32)


def trunc_int(values):
    """C's float -> integer conversion (truncation toward zero)."""
    return np.trunc(np.asarray(values, dtype=np.float32)).astype(np.int64)


def clamp(values, lo, hi):
    return np.minimum(np.maximum(values, lo), hi)


def fl(ints):
    """Integers -> float32 (exact for the small values here), so products stay float32."""
    return np.asarray(ints).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Block plumbing
# ---------------------------------------------------------------------------------------------

def as_blocks(x, block):
    """float array (..., n) -> float32 (n_blocks, block) and the leading shape."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % block:
        raise ValueError(f"rows of {x.shape[-1]} values are not whole {block}-value blocks")
    return x.reshape(-1, block), x.shape[:-1]


def split_finite(blocks):
    """-> (blocks with every non-finite block replaced by zeros, mask of those blocks). The zeros
    keep the vectorised arithmetic quiet; the blocks are overwritten by poison() afterwards."""
    bad = ~np.isfinite(blocks).all(axis=1)
    if bad.any():
        blocks = np.where(bad[:, None], F32(0.0), blocks)
    return blocks, bad


def poison(out, bad, d_offset):
    """Non-finite blocks: all bytes 0 but the fp16 scale at d_offset, a quiet NaN."""
    out[bad] = 0
    out[bad, d_offset:d_offset + 2] = np.array([F16_NAN], dtype="<u2").view(np.uint8)


def put_fp16(out, offset, values):
    out[:, offset:offset + 2] = fp16_bits(values).astype("<u2").reshape(-1, 1).view(np.uint8)


def put_fp16_bits(out, offset, bits):
    out[:, offset:offset + 2] = np.asarray(bits, dtype="<u2").reshape(-1, 1).view(np.uint8)


def get_fp16(blocks, offset):
    return fp16_value(blocks[:, offset:offset + 2].copy().view("<u2").reshape(-1))


def raw_blocks(raw, block_bytes):
    return np.asarray(raw, dtype=np.uint8).reshape(-1, block_bytes)


def first_absmax(blocks):
    """ggml's `if (amax < |x|) { amax = |x|; max = x; }` over each row: the signed value of
    largest magnitude (the first on ties), 0 for an all-zero row. -> (max, amax)."""
    amax = np.zeros(blocks.shape[0], dtype=np.float32)
    vmax = np.zeros(blocks.shape[0], dtype=np.float32)
    for i in range(blocks.shape[1]):
        ax = np.abs(blocks[:, i])
        take = amax < ax
        amax = np.where(take, ax, amax)
        vmax = np.where(take, blocks[:, i], vmax)
    return vmax, amax


def running_min_max(blocks, lo, hi):
    """ggml's `if (x < min) min = x; if (x > max) max = x;` from the given starting values."""
    for i in range(blocks.shape[1]):
        lo = np.where(blocks[:, i] < lo, blocks[:, i], lo)
        hi = np.where(blocks[:, i] > hi, blocks[:, i], hi)
    return lo, hi


def seq_sum(terms):
    """Sum over each row, one element after another (float32), as a C loop adds."""
    total = np.zeros(terms.shape[0], dtype=np.float32)
    for i in range(terms.shape[1]):
        total = total + terms[:, i]
    return total


def pack_nibbles(q):
    """(nb, 32) values < 16 -> (nb, 16) bytes: weight j low, weight j + 16 high."""
    q = q.astype(np.uint8)
    return q[:, :16] | (q[:, 16:] << 4)


def unpack_nibbles(qs):
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def pack_fifth_bits(q):
    """(nb, 32) 5-bit values -> (nb, 4) bytes of a little-endian u32: bit j = bit 4 of q[j]."""
    bits = ((q.astype(np.uint32) >> 4) & 1) << np.arange(32, dtype=np.uint32)
    qh = np.bitwise_or.reduce(bits, axis=1).astype("<u4")
    return qh.reshape(-1, 1).view(np.uint8)


def unpack_fifth_bits(qh_bytes):
    qh = qh_bytes.copy().view("<u4").reshape(-1, 1)
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32) << 4


# ---------------------------------------------------------------------------------------------
# Float types
# ---------------------------------------------------------------------------------------------

def quantize_f32(x):
    return np.ascontiguousarray(x, dtype="<f4").view(np.uint8)


def dequantize_f32(raw):
    return np.asarray(raw, dtype=np.uint8).view("<f4").astype(np.float32)


def quantize_f16(x):
    return fp16_bits(x).astype("<u2").view(np.uint8)


def dequantize_f16(raw):
    return fp16_value(np.asarray(raw, dtype=np.uint8).view("<u2"))


def quantize_bf16(x):
    return bf16_bits(x).astype("<u2").view(np.uint8)


def dequantize_bf16(raw):
    return bf16_value(np.asarray(raw, dtype=np.uint8).view("<u2"))


# ---------------------------------------------------------------------------------------------
# 32-weight blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
# ---------------------------------------------------------------------------------------------

def symmetric_levels(blocks, levels, offset, max_q):
    """Q4_0/Q5_0: d = (signed max) / -levels, id = 1/d, q = min(max_q, (int8)(x*id + offset
    + 0.5)). -> (d, q)."""
    vmax, _ = first_absmax(blocks)
    d = (vmax / F32(-levels)).astype(np.float32)
    inv = inverse_scale(d)
    scaled = (blocks * inv[:, None]).astype(np.float32) + F32(offset + 0.5)
    q = np.minimum(max_q, trunc_int(scaled).astype(np.int8).astype(np.int64))
    return d, q


def min_max_levels(blocks, levels):
    """Q4_1/Q5_1: d = (max - min) / levels, m = min, id = 1/d, q = (int)((x - min)*id + 0.5).
    -> (d, m, q), q before the format's own clamping (Q4_1 clamps, Q5_1 does not)."""
    lo = np.full(blocks.shape[0], np.finfo(np.float32).max, dtype=np.float32)
    lo, hi = running_min_max(blocks, lo, -lo)
    d = ((hi - lo) / F32(levels)).astype(np.float32)
    inv = inverse_scale(d)
    scaled = ((blocks - lo[:, None]) * inv[:, None]).astype(np.float32) + F32(0.5)
    return d, lo, trunc_int(scaled)


def quantize_q4_0(x):
    """float32 (..., n), n % 32 == 0 -> Q4_0 bytes (..., n/32*18), ggml's reference rounding:
    d = (element of largest |x|, sign kept) / -8, q = min(15, (int8)(x*id + 8.5)), id = 1/d."""
    blocks, lead = as_blocks(x, QK4_0)
    blocks, bad = split_finite(blocks)
    d, q = symmetric_levels(blocks, 8, Q4_0_OFFSET, 15)
    out = np.empty((blocks.shape[0], 18), dtype=np.uint8)
    put_fp16(out, 0, d)
    out[:, 2:] = pack_nibbles(q)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q4_0(raw):
    blocks = raw_blocks(raw, 18)
    q = unpack_nibbles(blocks[:, 2:]) - Q4_0_OFFSET
    return (fl(q) * get_fp16(blocks, 0)[:, None]).reshape(-1)


def quantize_q4_1(x):
    """Q4_1: d = (max - min)/15, m = min, q = min(15, (int8)((x - min)*id + 0.5)), id = 1/d."""
    blocks, lead = as_blocks(x, QK4_1)
    blocks, bad = split_finite(blocks)
    d, m, q = min_max_levels(blocks, 15)
    q = np.minimum(15, q.astype(np.int8).astype(np.int64))
    out = np.empty((blocks.shape[0], 20), dtype=np.uint8)
    put_fp16(out, 0, d)
    put_fp16(out, 2, m)
    out[:, 4:] = pack_nibbles(q)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q4_1(raw):
    blocks = raw_blocks(raw, 20)
    q = unpack_nibbles(blocks[:, 4:])
    d, m = get_fp16(blocks, 0)[:, None], get_fp16(blocks, 2)[:, None]
    return (fl(q) * d + m).reshape(-1)


def quantize_q5_0(x):
    """Q5_0: d = (signed max)/-16, q = min(31, (int8)(x*id + 16.5)), id = 1/d; low 4 bits in
    nibbles, bit 4 in qh."""
    blocks, lead = as_blocks(x, QK5_0)
    blocks, bad = split_finite(blocks)
    d, q = symmetric_levels(blocks, 16, Q5_0_OFFSET, 31)
    out = np.empty((blocks.shape[0], 22), dtype=np.uint8)
    put_fp16(out, 0, d)
    out[:, 2:6] = pack_fifth_bits(q)
    out[:, 6:] = pack_nibbles(q & 0x0F)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q5_0(raw):
    blocks = raw_blocks(raw, 22)
    q = (unpack_nibbles(blocks[:, 6:]) | unpack_fifth_bits(blocks[:, 2:6])) - Q5_0_OFFSET
    return (fl(q) * get_fp16(blocks, 0)[:, None]).reshape(-1)


def quantize_q5_1(x):
    """Q5_1: d = (max - min)/31, m = min, q = (uint8)((x - min)*id + 0.5), id = 1/d (no clamp
    in ggml)."""
    blocks, lead = as_blocks(x, QK5_1)
    blocks, bad = split_finite(blocks)
    d, m, q = min_max_levels(blocks, 31)
    q = q.astype(np.uint8)
    out = np.empty((blocks.shape[0], 24), dtype=np.uint8)
    put_fp16(out, 0, d)
    put_fp16(out, 2, m)
    out[:, 4:8] = pack_fifth_bits(q)
    out[:, 8:] = pack_nibbles(q & 0x0F)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q5_1(raw):
    blocks = raw_blocks(raw, 24)
    q = unpack_nibbles(blocks[:, 8:]) | unpack_fifth_bits(blocks[:, 4:8])
    d, m = get_fp16(blocks, 0)[:, None], get_fp16(blocks, 2)[:, None]
    return (fl(q) * d + m).reshape(-1)


def quantize_q8_0(x):
    """Q8_0: d = max|x|/127, q = roundf(x*id), id = 1/d (roundf: half away from zero)."""
    blocks, lead = as_blocks(x, QK8_0)
    blocks, bad = split_finite(blocks)
    _, amax = first_absmax(blocks)  # the same maximum as ggml's MAX(amax, |x|)
    d = (amax / F32(Q8_0_MAX)).astype(np.float32)
    inv = inverse_scale(d)
    q = round_away((blocks * inv[:, None]).astype(np.float32)).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    put_fp16(out, 0, d)
    out[:, 2:] = q.view(np.uint8)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q8_0(raw):
    blocks = raw_blocks(raw, 34)
    q = blocks[:, 2:].copy().view(np.int8)
    return (fl(q) * get_fp16(blocks, 0)[:, None]).reshape(-1)


# ---------------------------------------------------------------------------------------------
# ggml's scale searches, on many groups at once (one group per row)
# ---------------------------------------------------------------------------------------------

def make_qkx2_quants(x, weights, nmax, rmin, rdelta, nstep, use_mad):
    """ggml's make_qkx2_quants: an asymmetric grid x ~ scale * L - the_min with L in [0, nmax],
    the min clamped to <= 0; a weighted least-squares fit tried for nstep+1 trial scales, kept
    when it lowers the weighted error (|err| if use_mad else err^2). -> (scale, the_min, L)."""
    n_groups, n = x.shape
    w = weights
    lo, hi = x[:, 0].copy(), x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = (sum_w * x[:, 0]).astype(np.float32)
    for i in range(1, n):
        lo = np.where(x[:, i] < lo, x[:, i], lo)
        hi = np.where(x[:, i] > hi, x[:, i], hi)
        sum_w = sum_w + w[:, i]
        sum_x = sum_x + w[:, i] * x[:, i]
    lo = np.where(lo > 0, F32(0.0), lo)
    flat = hi == lo  # ggml returns at once: scale 0, L = 0, the_min = -lo
    flat_min = -lo

    def grid(iscale, vmin):
        return clamp(nearest_int(iscale[:, None] * (x - vmin[:, None])), 0, nmax)

    def error(scale, vmin, levels):
        diff = (scale[:, None] * fl(levels) + vmin[:, None]) - x
        return seq_sum(w * (np.abs(diff) if use_mad else diff * diff))

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(nmax) / (hi - lo)).astype(np.float32)
        scale = (F32(1.0) / iscale).astype(np.float32)
        levels = grid(iscale, lo)
        best_mad = error(scale, lo, levels)
        for step in range(nstep + 1):
            iscale = ((F32(rmin) + F32(rdelta) * F32(step)) + F32(nmax)) / (hi - lo)
            trial = grid(iscale, lo)
            lf = fl(trial)
            wl = w * lf
            sum_l, sum_l2, sum_xl = seq_sum(wl), seq_sum(wl * lf), seq_sum(wl * x)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = this_min > 0
            this_min = np.where(positive, F32(0.0), this_min)
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            mad = error(this_scale, this_min, trial)
            better = (det > 0) & (mad < best_mad)
            levels = np.where(better[:, None], trial, levels)
            best_mad = np.where(better, mad, best_mad)
            scale = np.where(better, this_scale, scale)
            lo = np.where(better, this_min, lo)  # later trial scales start from this min
    scale = np.where(flat, F32(0.0), scale)
    levels = np.where(flat[:, None], 0, levels)
    the_min = np.where(flat, flat_min, -lo)
    return scale.astype(np.float32), the_min.astype(np.float32), levels


def make_qx_quants_rmse1(x, nmax):
    """ggml's make_qx_quants(rmse_type 1, no importance weights): a symmetric grid
    x ~ scale * (L - nmax), L in [0, 2 nmax), fitted with weights x^2 for the first scale and 18
    nearby trial scales, the best kept. -> (scale, L)."""
    vmax, amax = first_absmax(x)
    zero = amax < GROUP_MAX_EPS
    w = x * x

    def fit(iscale):
        l = clamp(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = fl(l)
        return l, seq_sum(w * x * lf), seq_sum(w * lf * lf)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        l, sumlx, suml2 = fit((F32(-nmax) / vmax).astype(np.float32))
        levels = l + nmax
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0.0)).astype(np.float32)
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            l, sumlx, suml2 = fit((-(F32(nmax) + F32(0.1) * F32(step)) / vmax).astype(np.float32))
            better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            levels = np.where(better[:, None], l + nmax, levels)
            scale = np.where(better, sumlx / suml2, scale)
            best = np.where(better, scale * sumlx, best)
    scale = np.where(zero, F32(0.0), scale)
    levels = np.where(zero[:, None], 0, levels)
    return scale.astype(np.float32), levels


def make_q3_quants_rmse(x, nmax):
    """ggml's make_q3_quants(do_rmse true): a symmetric grid x ~ scale * (L - nmax), then up to
    5 passes that move one L at a time to its best value while the weighted fit (weights x^2)
    improves. -> (scale, L). A pass that changes nothing leaves the state as it was, so running
    all 5 passes on every group matches ggml's early stop."""
    vmax, amax = first_absmax(x)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-nmax) / vmax).astype(np.float32)
        l = clamp(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = fl(l)
        sumlx, suml2 = seq_sum(w * x * lf), seq_sum(w * lf * lf)
        for _ in range(5):
            for i in range(x.shape[1]):
                wi, xi, li = w[:, i], x[:, i], fl(l[:, i])
                slx = sumlx - wi * xi * li
                sl2 = suml2 - wi * li * li
                new_l = clamp(nearest_int(xi * sl2 / slx), -nmax, nmax - 1)
                nf = fl(new_l)
                slx_new = slx + wi * xi * nf
                sl2_new = sl2 + wi * nf * nf
                take = ((slx > 0) & (new_l != l[:, i]) & (sl2_new > 0) &
                        (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new))
                l[:, i] = np.where(take, new_l, l[:, i])
                sumlx = np.where(take, slx_new, sumlx)
                suml2 = np.where(take, sl2_new, suml2)
        scale = (sumlx / suml2).astype(np.float32)
    scale = np.where(zero, F32(0.0), scale)
    levels = np.where(zero[:, None], 0, l + nmax)
    return scale.astype(np.float32), levels


def running_max(values, init=0.0):
    """ggml's `if (v > m) m = v;` over each row, from init (so never below it)."""
    m = np.full(values.shape[0], init, dtype=np.float32)
    for j in range(values.shape[1]):
        m = np.where(values[:, j] > m, values[:, j], m)
    return m


def requantize(x, d, offset, lo, hi, keep, dm=None):
    """ggml's second pass with the stored (fp16-rounded) scales: L = clamp(nearest_int((x + dm)
    / d)) + offset per sub-block; sub-blocks whose d is 0 keep their first-pass levels `keep`.
    x: (nb, n_sub, sub); d, dm: (nb, n_sub)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        shifted = x if dm is None else x + dm[:, :, None]
        levels = clamp(nearest_int(shifted / d[:, :, None]), lo, hi) + offset
    return np.where((d != 0)[:, :, None], levels, keep)


def pack_2bit(levels):
    """(nb, 256) 2-bit values -> (nb, 64): byte 32h + l holds weights 128h + l + 32k in bits
    2k..2k+1 (k < 4)."""
    q = levels.astype(np.uint8).reshape(-1, 2, 4, 32)
    packed = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return packed.reshape(-1, 64)


def unpack_2bit(qs):
    """Inverse of pack_2bit: (nb, 64) -> (nb, 256)."""
    q = qs.reshape(-1, 2, 1, 32).astype(np.int32)
    shifts = (2 * np.arange(4, dtype=np.int32)).reshape(1, 1, 4, 1)
    return ((q >> shifts) & 3).reshape(-1, QK_K)


# ---------------------------------------------------------------------------------------------
# Q2_K
# ---------------------------------------------------------------------------------------------

Q2_K_RMIN, Q2_K_RDELTA, Q2_K_NSTEP = -0.5, 0.1, 15


def quantize_q2_k(x):
    """Q2_K: 16 sub-blocks of 16, each fitted by make_qkx2_quants (levels 0..3, weights |x|,
    absolute error); scales and mins quantized to 4 bits against their maxima; then every
    weight re-rounded with the stored scales."""
    blocks, lead = as_blocks(x, QK_K)
    blocks, bad = split_finite(blocks)
    nb = blocks.shape[0]
    groups = blocks.reshape(-1, 16)
    scales, mins, first = make_qkx2_quants(groups, np.abs(groups), 3, Q2_K_RMIN, Q2_K_RDELTA,
                                           Q2_K_NSTEP, True)
    scales, mins = scales.reshape(nb, 16), mins.reshape(nb, 16)
    max_scale, max_min = running_max(scales), running_max(mins)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(Q2_K_SCALE_MAX) / max_scale).astype(np.float32)
        ls = np.where((max_scale > 0)[:, None], nearest_int(iscale[:, None] * scales), 0)
        imin = (F32(Q2_K_SCALE_MAX) / max_min).astype(np.float32)
        lm = np.where((max_min > 0)[:, None], nearest_int(imin[:, None] * mins), 0)
    packed_scales = (ls | (lm << 4)).astype(np.uint8)  # C stores the ints into a byte
    d_bits = fp16_bits(np.where(max_scale > 0, max_scale / F32(Q2_K_SCALE_MAX), F32(0.0)))
    dmin_bits = fp16_bits(np.where(max_min > 0, max_min / F32(Q2_K_SCALE_MAX), F32(0.0)))
    d = fp16_value(d_bits)[:, None] * fl(packed_scales & 0xF)
    dm = fp16_value(dmin_bits)[:, None] * fl(packed_scales >> 4)
    levels = requantize(blocks.reshape(nb, 16, 16), d, 0, 0, 3, first.reshape(nb, 16, 16), dm)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, 0:16] = packed_scales
    out[:, 16:80] = pack_2bit(levels.reshape(nb, QK_K))
    put_fp16_bits(out, 80, d_bits)
    put_fp16_bits(out, 82, dmin_bits)
    poison(out, bad, 80)
    return out.reshape(*lead, -1)


def dequantize_q2_k(raw):
    """w = d * (scale & 15) * q - dmin * (scale >> 4), scale per 16 weights."""
    blocks = raw_blocks(raw, 84)
    nb = blocks.shape[0]
    sc = blocks[:, 0:16]
    q = unpack_2bit(blocks[:, 16:80]).reshape(nb, 16, 16)
    dl = get_fp16(blocks, 80)[:, None] * fl(sc & 0xF)
    ml = get_fp16(blocks, 82)[:, None] * fl(sc >> 4)
    return (dl[:, :, None] * fl(q) - ml[:, :, None]).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Q3_K
# ---------------------------------------------------------------------------------------------

def pack_q3_k_scales(ls):
    """16 6-bit scales (nb, 16) -> 12 bytes: low 4 bits of scale j in byte j % 8 (low nibble for
    j < 8, high for j >= 8), the top 2 bits in byte 8 + j % 4 at bit 2 (j / 4)."""
    ls = ls.astype(np.uint8)
    out = np.zeros((ls.shape[0], 12), dtype=np.uint8)
    out[:, 0:8] = (ls[:, 0:8] & 0xF) | ((ls[:, 8:16] & 0xF) << 4)
    for j in range(16):
        out[:, 8 + j % 4] |= (ls[:, j] >> 4) << (2 * (j // 4))
    return out


def unpack_q3_k_scales(packed):
    """12 bytes -> the 16 6-bit scales (nb, 16), 0..63."""
    ls = np.empty((packed.shape[0], 16), dtype=np.int32)
    for j in range(16):
        low = (packed[:, j] & 0xF) if j < 8 else (packed[:, j - 8] >> 4)
        high = (packed[:, 8 + j % 4] >> (2 * (j // 4))) & 3
        ls[:, j] = low | (high << 4)
    return ls


def quantize_q3_k(x):
    """Q3_K: 16 sub-blocks of 16 fitted by make_q3_quants (levels -4..3); the signed scale of
    largest magnitude maps to -32 and every scale to 6 bits; weights re-rounded with the stored
    scales; bit 2 of each level goes to hmask."""
    blocks, lead = as_blocks(x, QK_K)
    blocks, bad = split_finite(blocks)
    nb = blocks.shape[0]
    scales, first = make_q3_quants_rmse(blocks.reshape(-1, 16), Q3_K_OFFSET)
    scales = scales.reshape(nb, 16)
    max_scale, _ = first_absmax(scales)
    nonzero = max_scale != 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-Q3_K_SCALE_OFFSET) / max_scale).astype(np.float32)
        l = nearest_int(iscale[:, None] * scales).astype(np.int8).astype(np.int32)  # int8_t l
        ls = np.where(nonzero[:, None], clamp(l, -32, 31) + Q3_K_SCALE_OFFSET, 0)
        d_bits = fp16_bits(np.where(nonzero, F32(1.0) / iscale, F32(0.0)))
    packed = pack_q3_k_scales(ls)
    d = fp16_value(d_bits)[:, None] * fl(unpack_q3_k_scales(packed) - Q3_K_SCALE_OFFSET)
    levels = requantize(blocks.reshape(nb, 16, 16), d, Q3_K_OFFSET, -4, 3,
                        first.reshape(nb, 16, 16)).reshape(nb, QK_K)
    high = (levels > 3).reshape(nb, 8, 32).astype(np.uint8)  # weight 32k + m -> bit k of byte m
    out = np.empty((nb, 110), dtype=np.uint8)
    out[:, 0:32] = np.bitwise_or.reduce(high << np.arange(8, dtype=np.uint8)[None, :, None],
                                        axis=1)
    out[:, 32:96] = pack_2bit(np.where(levels > 3, levels - 4, levels))
    out[:, 96:108] = packed
    put_fp16_bits(out, 108, d_bits)
    poison(out, bad, 108)
    return out.reshape(*lead, -1)


def dequantize_q3_k(raw):
    """w = d * (scale - 32) * (low 2 bits | high bit << 2, minus 4), scale per 16 weights."""
    blocks = raw_blocks(raw, 110)
    nb = blocks.shape[0]
    hmask = blocks[:, 0:32].astype(np.int32)
    high = (hmask[:, None, :] >> np.arange(8, dtype=np.int32)[None, :, None]) & 1
    q = unpack_2bit(blocks[:, 32:96]) + 4 * high.reshape(nb, QK_K) - Q3_K_OFFSET
    dl = get_fp16(blocks, 108)[:, None] * fl(unpack_q3_k_scales(blocks[:, 96:108]) -
                                            Q3_K_SCALE_OFFSET)
    return (dl[:, :, None] * fl(q.reshape(nb, 16, 16))).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins
# ---------------------------------------------------------------------------------------------

Q4_K_RMIN, Q4_K_RDELTA, Q4_K_NSTEP = -1.0, 0.1, 20
Q5_K_RMIN, Q5_K_RDELTA, Q5_K_NSTEP = -0.5, 0.1, 15


def pack_k_scales(ls, lm):
    """8 scales and 8 mins of 6 bits (nb, 8) -> 12 bytes: sub-blocks 0-3 whole in bytes 0-3
    (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4 bits in bytes 8-11 (scale low
    nibble, min high nibble) and their top 2 bits in bits 6-7 of bytes 0-3 (scales) and 4-7."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    out = np.empty((ls.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return out


def unpack_k_scales(packed):
    """ggml's get_scale_min_k4 for j = 0..7: 12 bytes -> (scales, mins), each (nb, 8)."""
    p = packed.astype(np.int32)
    ls = np.concatenate([p[:, 0:4] & 63, (p[:, 8:12] & 0xF) | ((p[:, 0:4] >> 6) << 4)], axis=1)
    lm = np.concatenate([p[:, 4:8] & 63, (p[:, 8:12] >> 4) | ((p[:, 4:8] >> 6) << 4)], axis=1)
    return ls, lm


def k_sub_weights(groups):
    """Q4_K/Q5_K's weights for the fit: sqrt(mean of x^2) + |x| per 32-weight sub-block."""
    av_x = np.sqrt(seq_sum(groups * groups) / F32(32)).astype(np.float32)
    return av_x[:, None] + np.abs(groups)


def quantize_k_levels(blocks, nmax, rmin, rdelta, nstep):
    """The shared part of Q4_K and Q5_K: fit each sub-block of 32 (make_qkx2_quants, squared
    error), 6-bit scales and mins against their maxima, re-round with the stored scales.
    -> (d_bits, dmin_bits, packed scales (nb, 12), levels (nb, 256))."""
    nb = blocks.shape[0]
    groups = blocks.reshape(-1, 32)
    scales, mins, first = make_qkx2_quants(groups, k_sub_weights(groups), nmax, rmin, rdelta,
                                           nstep, False)
    scales, mins = scales.reshape(nb, 8), mins.reshape(nb, 8)
    max_scale, max_min = running_max(scales), running_max(mins)
    with np.errstate(divide="ignore", over="ignore"):
        inv_scale = np.where(max_scale > 0, F32(K_SCALE_MAX) / max_scale, F32(0.0))
        inv_min = np.where(max_min > 0, F32(K_SCALE_MAX) / max_min, F32(0.0))
    # C: uint8_t ls = nearest_int(...) wraps to a byte, then MIN(63, ls).
    ls = np.minimum(K_SCALE_MAX, nearest_int(inv_scale[:, None] * scales).astype(np.uint8))
    lm = np.minimum(K_SCALE_MAX, nearest_int(inv_min[:, None] * mins).astype(np.uint8))
    packed = pack_k_scales(ls, lm)
    d_bits = fp16_bits(max_scale / F32(K_SCALE_MAX))
    dmin_bits = fp16_bits(max_min / F32(K_SCALE_MAX))
    sc, m = unpack_k_scales(packed)
    d = fp16_value(d_bits)[:, None] * fl(sc)
    dm = fp16_value(dmin_bits)[:, None] * fl(m)
    levels = requantize(blocks.reshape(nb, 8, 32), d, 0, 0, nmax, first.reshape(nb, 8, 32), dm)
    return d_bits, dmin_bits, packed, levels.reshape(nb, QK_K)


def k_nibble_pairs(levels):
    """(nb, 256) levels -> (nb, 128) bytes: byte 32c + l holds weight 64c + l in its low nibble
    and 64c + 32 + l in its high nibble (low 4 bits of each level)."""
    q = (levels & 0xF).astype(np.uint8).reshape(-1, 4, 2, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)


def k_nibble_values(qs):
    """Inverse of k_nibble_pairs: (nb, 128) -> (nb, 256) nibbles in weight order."""
    q = qs.reshape(-1, 4, 1, 32).astype(np.int32)
    return np.concatenate([q & 0xF, q >> 4], axis=2).reshape(-1, QK_K)


def k_dequantize(d, dmin, packed, q):
    """w = d * scale * q - dmin * min, scale and min per 32 weights. q: (nb, 256)."""
    nb = q.shape[0]
    sc, m = unpack_k_scales(packed)
    d1 = d[:, None] * fl(sc)
    m1 = dmin[:, None] * fl(m)
    return (d1[:, :, None] * fl(q.reshape(nb, 8, 32)) - m1[:, :, None]).reshape(-1)


def quantize_q4_k(x):
    """Q4_K: levels 0..15 per sub-block of 32 (make_qkx2_quants, rmin -1, 21 steps)."""
    blocks, lead = as_blocks(x, QK_K)
    blocks, bad = split_finite(blocks)
    d_bits, dmin_bits, packed, levels = quantize_k_levels(blocks, 15, Q4_K_RMIN, Q4_K_RDELTA,
                                                          Q4_K_NSTEP)
    out = np.empty((blocks.shape[0], 144), dtype=np.uint8)
    put_fp16_bits(out, 0, d_bits)
    put_fp16_bits(out, 2, dmin_bits)
    out[:, 4:16] = packed
    out[:, 16:144] = k_nibble_pairs(levels)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q4_k(raw):
    blocks = raw_blocks(raw, 144)
    return k_dequantize(get_fp16(blocks, 0), get_fp16(blocks, 2), blocks[:, 4:16],
                        k_nibble_values(blocks[:, 16:144]))


def quantize_q5_k(x):
    """Q5_K: levels 0..31 per sub-block of 32 (make_qkx2_quants, rmin -0.5, 16 steps); bit 4 of
    weight 32g + l is bit g of qh[l]."""
    blocks, lead = as_blocks(x, QK_K)
    blocks, bad = split_finite(blocks)
    nb = blocks.shape[0]
    d_bits, dmin_bits, packed, levels = quantize_k_levels(blocks, 31, Q5_K_RMIN, Q5_K_RDELTA,
                                                          Q5_K_NSTEP)
    high = ((levels >> 4) & 1).reshape(nb, 8, 32).astype(np.uint8)
    out = np.empty((nb, 176), dtype=np.uint8)
    put_fp16_bits(out, 0, d_bits)
    put_fp16_bits(out, 2, dmin_bits)
    out[:, 4:16] = packed
    out[:, 16:48] = np.bitwise_or.reduce(high << np.arange(8, dtype=np.uint8)[None, :, None],
                                         axis=1)
    out[:, 48:176] = k_nibble_pairs(levels)
    poison(out, bad, 0)
    return out.reshape(*lead, -1)


def dequantize_q5_k(raw):
    blocks = raw_blocks(raw, 176)
    nb = blocks.shape[0]
    qh = blocks[:, 16:48].astype(np.int32)
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.int32)[None, :, None]) & 1).reshape(nb, QK_K)
    q = k_nibble_values(blocks[:, 48:176]) + 16 * high
    return k_dequantize(get_fp16(blocks, 0), get_fp16(blocks, 2), blocks[:, 4:16], q)


# ---------------------------------------------------------------------------------------------
# Q6_K
# ---------------------------------------------------------------------------------------------

def pack_q6_k_bits(q, scales, d_bits):
    """Q6_K blocks from q (nb, 256) in [-32, 31], int8 scales (nb, 16), fp16 d bits (nb,).
    Each half of 128 weights: ql[l] holds quarters 0 (low) and 2 (high) of weight l, ql[l + 32]
    quarters 1 and 3; qh[l] holds the top 2 bits of all four quarters (bits 2k..2k+1)."""
    q = (np.asarray(q, dtype=np.int32) + Q6_K_OFFSET).astype(np.uint8).reshape(-1, 2, 4, 32)
    nb = q.shape[0]
    out = np.empty((nb, 210), dtype=np.uint8)
    ql = np.empty((nb, 2, 64), dtype=np.uint8)
    ql[:, :, 0:32] = (q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4)
    ql[:, :, 32:64] = (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) |
          ((q[:, :, 3] >> 4) << 6))
    out[:, 0:128] = ql.reshape(nb, 128)
    out[:, 128:192] = qh.reshape(nb, 64)
    out[:, 192:208] = np.asarray(scales).astype(np.int8).reshape(nb, 16).view(np.uint8)
    put_fp16_bits(out, 208, d_bits)
    return out


def pack_q6_k(q, scales, d):
    """pack_q6_k_bits with d given as floats (rounded to fp16)."""
    return pack_q6_k_bits(q, scales, fp16_bits(d))


def quantize_q6_k(x):
    """Q6_K: 16 sub-blocks of 16 fitted by make_qx_quants (levels -32..31, weights x^2); the
    signed scale of largest magnitude maps to the int8 scale -128; weights re-rounded with the
    stored scales. A super-block whose scales are all below 1e-15 is all zero bytes."""
    blocks, lead = as_blocks(x, QK_K)
    blocks, bad = split_finite(blocks)
    nb = blocks.shape[0]
    scales, first = make_qx_quants_rmse1(blocks.reshape(-1, 16), Q6_K_OFFSET)
    scales = scales.reshape(nb, 16)
    max_scale, max_abs = first_absmax(scales)
    empty = max_abs < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(Q6_K_SCALE_LEVELS) / max_scale).astype(np.float32)
        d_bits = np.where(empty, 0, fp16_bits(F32(1.0) / iscale)).astype(np.uint16)
        sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)
    sc = np.where(empty[:, None], np.int8(0), sc)
    d = fp16_value(d_bits)[:, None] * fl(sc)
    levels = requantize(blocks.reshape(nb, 16, 16), d, Q6_K_OFFSET, -32, 31,
                        first.reshape(nb, 16, 16)).reshape(nb, QK_K)
    out = pack_q6_k_bits(levels - Q6_K_OFFSET, sc, d_bits)
    out[empty] = 0
    poison(out, bad, 208)
    return out.reshape(*lead, -1)


def dequantize_q6_k(raw):
    """w = d * scale * (6-bit q - 32), scale (int8) per 16 weights; see pack_q6_k_bits for where
    each weight's bits are."""
    blocks = raw_blocks(raw, 210)
    nb = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(nb, 2, 64).astype(np.int32)
    qh = blocks[:, 128:192].reshape(nb, 2, 32).astype(np.int32)
    q = np.empty((nb, 2, 4, 32), dtype=np.int32)  # (block, half, quarter, l)
    q[:, :, 0] = (ql[:, :, 0:32] & 0xF) | (((qh >> 0) & 3) << 4)
    q[:, :, 1] = (ql[:, :, 32:64] & 0xF) | (((qh >> 2) & 3) << 4)
    q[:, :, 2] = (ql[:, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4)
    q[:, :, 3] = (ql[:, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4)
    sc = blocks[:, 192:208].copy().view(np.int8).reshape(nb, 16)
    dl = get_fp16(blocks, 208)[:, None] * fl(sc)  # exact: 11 bits times 8 bits
    w = dl[:, :, None] * fl(q.reshape(nb, 16, 16) - Q6_K_OFFSET)
    return w.reshape(-1)


def random_q6_k_blocks(random_bytes, d):
    """Valid Q6_K blocks from raw random bytes (nb, 208): ql and qh are any bytes; scales are
    taken from the last 16 bytes, folded into [-127, 127] (ggml never writes -128); d: (nb,)."""
    random_bytes = np.asarray(random_bytes, dtype=np.uint8)
    nb = random_bytes.shape[0]
    out = np.empty((nb, 210), dtype=np.uint8)
    out[:, 0:192] = random_bytes[:, 0:192]
    sc = random_bytes[:, 192:208].view(np.int8)
    out[:, 192:208] = np.where(sc == -128, np.int8(127), sc).view(np.uint8)
    put_fp16(out, 208, d)
    return out


# ---------------------------------------------------------------------------------------------
# The type table
# ---------------------------------------------------------------------------------------------

TypeInfo = namedtuple("TypeInfo", "name block_size block_bytes quantize dequantize")

# quantize: float array (..., n) -> uint8 bytes; dequantize: bytes -> flat float32.
TYPES = {
    GGMLType.F32: TypeInfo("f32", 1, 4, quantize_f32, dequantize_f32),
    GGMLType.F16: TypeInfo("f16", 1, 2, quantize_f16, dequantize_f16),
    GGMLType.BF16: TypeInfo("bf16", 1, 2, quantize_bf16, dequantize_bf16),
    GGMLType.Q4_0: TypeInfo("q4_0", QK4_0, 18, quantize_q4_0, dequantize_q4_0),
    GGMLType.Q4_1: TypeInfo("q4_1", QK4_1, 20, quantize_q4_1, dequantize_q4_1),
    GGMLType.Q5_0: TypeInfo("q5_0", QK5_0, 22, quantize_q5_0, dequantize_q5_0),
    GGMLType.Q5_1: TypeInfo("q5_1", QK5_1, 24, quantize_q5_1, dequantize_q5_1),
    GGMLType.Q8_0: TypeInfo("q8_0", QK8_0, 34, quantize_q8_0, dequantize_q8_0),
    GGMLType.Q2_K: TypeInfo("q2_K", QK_K, 84, quantize_q2_k, dequantize_q2_k),
    GGMLType.Q3_K: TypeInfo("q3_K", QK_K, 110, quantize_q3_k, dequantize_q3_k),
    GGMLType.Q4_K: TypeInfo("q4_K", QK_K, 144, quantize_q4_k, dequantize_q4_k),
    GGMLType.Q5_K: TypeInfo("q5_K", QK_K, 176, quantize_q5_k, dequantize_q5_k),
    GGMLType.Q6_K: TypeInfo("q6_K", QK_K, 210, quantize_q6_k, dequantize_q6_k),
}
GGMLType.NAMES.update({t: info.name for t, info in TYPES.items()})
GGMLType.BLOCK.update({t: (info.block_size, info.block_bytes) for t, info in TYPES.items()})
TYPE_BY_NAME = {info.name: t for t, info in TYPES.items()}


def quantize(values, ggml_type):
    """float array (..., n) -> the bytes ggml stores for it in ggml_type."""
    return np.ascontiguousarray(TYPES[ggml_type].quantize(values)).view(np.uint8).reshape(-1)


def dequantize(raw, ggml_type):
    """Bytes of ggml_type -> flat float32 values, in ggml's operation order. An infinite or NaN
    scale (an fp16 overflow, a non-finite block) gives inf or NaN weights, as in ggml."""
    with np.errstate(over="ignore", invalid="ignore"):
        return TYPES[ggml_type].dequantize(np.asarray(raw, dtype=np.uint8).reshape(-1))
