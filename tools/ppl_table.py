"""ppl_table.py: what each quantization type costs the default model, as a table in docs.

    make ppl     # /usr/bin/python3 tools/ppl_table.py --engine build/<last stage>/engine ...

The F32 model (data/models/tiny-kjv-f32.gguf) is quantized by build/quantize into each file type,
and each file scores the chapters tiny-kjv never saw in training (tools/kjv.py) with the engine's
--perplexity, in chunks of -c tokens (second halves scored). The F32 run writes its token
distributions; every other run reports its KL divergence from them and how often both rank the
same token first. The table goes between the ppl markers of docs/perplexity.md.
"""

import argparse
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf import GGUFReader  # noqa: E402

TYPES = ["F32", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1", "Q4_0",
         "Q3_K_M", "Q2_K"]
BASE = "F32"
MARK_BEGIN, MARK_END = "<!-- ppl:begin -->", "<!-- ppl:end -->"
PPL_RE = re.compile(r"PPL = ([0-9.]+) \+/- ([0-9.]+)")
KL_RE = re.compile(r"Mean\s+KLD:\s+([0-9.e-]+) \+/-\s+([0-9.e-]+)")
P99_RE = re.compile(r"99\.0%\s+KLD:\s+([0-9.e-]+)")
TOP_RE = re.compile(r"Same top p:\s+([0-9.]+) \+/-\s+([0-9.]+) %")
BITS_PER_BYTE = 8


def run(cmd):
    print("+ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout


def weights_summary(path):
    """-> (bits per weight of the 2-D tensors, 'q5_0 x42, q8_0 x1')."""
    reader = GGUFReader(path)
    names = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0",
             10: "q2_K", 11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 30: "bf16"}
    n_weights = n_bytes = 0
    counts = {}
    for name in reader.tensor_order:
        t = reader.tensors[name]
        if len(t.ne) < 2:
            continue
        n = 1
        for v in t.ne:
            n *= v
        n_weights += n
        n_bytes += t.nbytes
        label = names.get(t.type, f"type{t.type}")
        counts[label] = counts.get(label, 0) + 1
    mix = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return BITS_PER_BYTE * n_bytes / n_weights, mix


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--quantize", type=Path, default=Path("build/quantize"))
    parser.add_argument("--model", type=Path, default=Path("data/models/tiny-kjv-f32.gguf"))
    parser.add_argument("--text", type=Path, required=True, help="held-out text (tools/kjv.py)")
    parser.add_argument("--work", type=Path, default=Path("build/ppl"))
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--doc", type=Path, default=Path("docs/perplexity.md"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    base_logits = args.work / "base.logprobs"
    common = ["--perplexity", args.text, "-c", args.ctx, "--chunks", args.chunks,
              "-t", args.threads]
    rows = []
    for ftype in TYPES:
        path = args.model
        if ftype != BASE:
            path = args.work / f"{args.model.stem.replace('-f32', '')}-{ftype.lower()}.gguf"
            run([args.quantize, args.model, path, ftype])
        kl = ["--kl-divergence-base" if ftype == BASE else "--kl-divergence", base_logits]
        out = run([args.engine, "-m", path] + common + kl)
        ppl = PPL_RE.search(out)
        bpw, mix = weights_summary(path)
        row = dict(type=ftype, size=path.stat().st_size, bpw=bpw, mix=mix,
                   ppl=float(ppl[1]), ppl_err=float(ppl[2]))
        if ftype != BASE:
            row.update(kl=float(KL_RE.search(out)[1]), kl_err=float(KL_RE.search(out)[2]),
                       p99=float(P99_RE.search(out)[1]), top=float(TOP_RE.search(out)[1]),
                       top_err=float(TOP_RE.search(out)[2]))
        rows.append(row)
        print(f"{ftype}: PPL {row['ppl']:.4f}", flush=True)

    f32 = rows[0]["ppl"]
    f16 = next(r["ppl"] for r in rows if r["type"] == "F16")
    lines = [
        f"Measured by `make ppl` (engine `{args.engine}`, `-c {args.ctx} --chunks {args.chunks}`: "
        f"{args.chunks} chunks of {args.ctx} tokens, the second half of each scored) on "
        f"{platform.machine()}. Bits per weight count the 2-D matrices; types lists what "
        "build/quantize gave them.",
        "",
        "| file type | bytes | bits/weight | matrices | PPL | vs F16 | mean KLD | 99% KLD | "
        "same top token |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kl = (f"{r['kl']:.5f} +/- {r['kl_err']:.5f} | {r['p99']:.4f} | "
              f"{r['top']:.2f} +/- {r['top_err']:.2f} %" if "kl" in r else "0 | 0 | 100 %")
        lines.append(f"| {r['type']} | {r['size']:,} | {r['bpw']:.3f} | {r['mix']} | "
                     f"{r['ppl']:.4f} +/- {r['ppl_err']:.4f} | {100 * (r['ppl'] / f16 - 1):+.2f}% | "
                     f"{kl} |")
    lines.append("")
    lines.append(f"F32 PPL {f32:.4f}; F16 {f16:.4f}.")
    block = "\n".join([MARK_BEGIN] + lines + [MARK_END])
    doc = args.doc.read_text() if args.doc.exists() else f"# Perplexity\n\n{MARK_BEGIN}\n{MARK_END}\n"
    start, end = doc.index(MARK_BEGIN), doc.index(MARK_END) + len(MARK_END)
    args.doc.write_text(doc[:start] + block + doc[end:])
    print(f"wrote {args.doc}")


if __name__ == "__main__":
    main()
