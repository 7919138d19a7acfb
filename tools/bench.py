#!/usr/bin/env python3
"""Benchmark harness: runs stages' engines on one model and writes the measured tables.

    /usr/bin/python3 tools/bench.py --stages 01_naive 02_loop_reorder --model M.gguf --threads 2

For every stage: one warm-up run, then --runs timed runs of the engine's own CLI (greedy), parsing
its `stats:` line; the median of each figure is reported. Prefill and decode are measured
separately, as llama-bench's pp and tg tests are: a prompt of --prompt-tokens tokens, and
--gen-tokens generated from a one-word prompt.
Results go into docs/benchmarks.md between markers (one section per model and thread count, other
sections kept), the chart docs/benchmarks-<section>.png (gnuplot), and each stage page's
`<!-- bench:table -->` block. Nothing here is a test: speed never fails the build.
"""
import argparse
import datetime
import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATS_RE = re.compile(r"^stats: (.*)$", re.M)
PROMPT_WORDS = ("Once upon a time there was a little robot who loved to count the stars above "
                "the quiet town, and every night it wrote a new number in its small blue book. ")
MARK_BEGIN = "<!-- bench:begin {} -->"
MARK_END = "<!-- bench:end {} -->"
GB = 1e9
README_KEY = "bench-small-q4_0-t2"  # the run whose table the README's stage map shows


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def engine_path(stage):
    return os.path.join(ROOT, "build", stage, "engine")


def make_prompt(stage, model, n_tokens):
    """A prompt text of about n_tokens tokens for this model's tokenizer (checked with --tokenize)."""
    words = (PROMPT_WORDS * (n_tokens // 8 + 4)).split(" ")
    lo, hi = 1, len(words)
    while lo < hi:  # the shortest word prefix with >= n_tokens tokens
        mid = (lo + hi) // 2
        out = run([engine_path(stage), "-m", model, "--tokenize", "-p", " ".join(words[:mid])])
        if out.returncode != 0:
            sys.exit(f"bench: --tokenize failed: {out.stderr.strip()}")
        if len(out.stdout.split()) >= n_tokens:
            hi = mid
        else:
            lo = mid + 1
    return " ".join(words[:lo])


def parse_stats(stderr):
    found = STATS_RE.findall(stderr)
    if not found:
        raise RuntimeError("no stats line in engine output:\n" + stderr[-2000:])
    return {k: float(v) for k, v in (kv.split("=") for kv in found[-1].split())}


def bench_stage(stage, model, prompt_file, args):
    """Two commands, as llama-bench's pp and tg tests: prefill of the --prompt-tokens prompt (one
    token generated), and decode of --gen-tokens tokens from a one-word prompt, so that decode
    reads the weights and an almost empty KV cache (at 576 positions a 7B model's fp32 cache adds
    ~0.5 GB a token to the 3.65 GB of weights)."""
    base = [engine_path(stage), "-m", model, "-t", str(args.threads), "--temp", "0"]
    pp = base + ["-f", prompt_file, "-n", "1", "-c", str(args.prompt_tokens + 16)]
    tg = base + ["-p", PROMPT_WORDS.split()[0], "-n", str(args.gen_tokens),
                 "-c", str(args.gen_tokens + 16)]
    samples = {"pp": [], "tg": [], "bw": []}
    for i in range(args.runs + 1):
        for name, cmd in (("pp", pp), ("tg", tg)):
            out = run(cmd)
            if out.returncode != 0:
                sys.exit(f"bench: {' '.join(cmd)} failed: {out.stderr.strip()[-500:]}")
            if i > 0:  # run 0 is the warm-up (page cache, CPU frequency)
                samples[name].append(parse_stats(out.stderr))
        if i > 0:
            samples["bw"].append(read_bandwidth(args.threads))
    median = {k: statistics.median(s[k] for s in samples["pp"]) for k in samples["pp"][0]}
    median["decode_tok_s"] = statistics.median(s["decode_tok_s"] for s in samples["tg"])
    median["read_gb_s"] = statistics.median(samples["bw"])
    # Each decode run against the read bandwidth measured right after it: the ratio of two
    # figures of the same minute holds when the VM's bandwidth drifts between runs.
    median["decode_tok_s_per_read_gb_s"] = statistics.median(
        tg["decode_tok_s"] / bw for tg, bw in zip(samples["tg"], samples["bw"]))
    median["peak_rss_mb"] = max(s["peak_rss_mb"] for s in samples["pp"] + samples["tg"])
    shown = [" ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)
             for cmd in (pp, tg)]
    median["cmd"] = f"`{shown[0]}` (prefill), `{shown[1]}` (decode)"
    return median


# GiB, passes: `make membench`'s own measurement, repeated after each decode run.
MEMBENCH_ALONGSIDE = (2, 10)


def membench(gib, passes, threads=None):
    """build/membench's rows, {"threads": .., "read_gb_s": ..} for 1 .. threads (default: all)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else None
    r = run([os.path.join(ROOT, "build", "membench"), str(gib), str(passes)], env=env)
    if r.returncode != 0:
        sys.exit(f"bench: build/membench failed: {r.stderr.strip()[-500:]}")
    return [dict(kv.split("=") for kv in line.split()) for line in r.stdout.splitlines()]


def read_bandwidth(threads):
    """Read GB/s with `threads` threads, measured now (this VM's bandwidth drifts by ~10-20%
    over minutes, so the decode runs are also set against a measurement taken between them)."""
    return float(membench(*MEMBENCH_ALONGSIDE, threads=threads)[-1]["read_gb_s"])


def weight_bytes_per_token(model):
    """Bytes of weights one decode step reads: every tensor except the embedding table, of which
    one row is read (unless the output is tied to it, then all of it is read as the output)."""
    r = gguf.GGUFReader(model)
    total = sum(t.nbytes for t in r.tensors.values())
    embd = r.tensors["token_embd.weight"]
    if "output.weight" in r.tensors:
        total -= embd.nbytes - embd.nbytes // embd.ne[1]
    return total


def machine_lines():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cxx = run(["g++", "--version"]).stdout.splitlines()[0]
    flags = run(["make", "-s", "-C", ROOT, "print-flags"]).stdout.strip()
    return [f"- machine: {cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}",
            f"- compiler: {cxx}; flags: `{flags}`"]


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "-"


def read_share(r, bytes_per_token):
    """Median share of the read bandwidth (measured right after each run) that decode moved."""
    return r["decode_tok_s_per_read_gb_s"] * bytes_per_token / GB


def table(results, stages, bytes_per_token):
    head = ("| stage | decode tok/s | x prev | x 01 | prefill tok/s | x prev | x 01 | "
            "peak RSS MB | weights GB/s (decode) | decode / read bandwidth |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    first = results[stages[0]]
    for i, s in enumerate(stages):
        r = results[s]
        prev = results[stages[i - 1]] if i else r
        rows.append(f"| {s} | {r['decode_tok_s']:.2f} | {ratio(r['decode_tok_s'], prev['decode_tok_s'])} | "
                    f"{ratio(r['decode_tok_s'], first['decode_tok_s'])} | {r['prefill_tok_s']:.2f} | "
                    f"{ratio(r['prefill_tok_s'], prev['prefill_tok_s'])} | "
                    f"{ratio(r['prefill_tok_s'], first['prefill_tok_s'])} | {r['peak_rss_mb']:.0f} | "
                    f"{bytes_per_token * r['decode_tok_s'] / GB:.2f} | "
                    f"{read_share(r, bytes_per_token) * 100:.0f}% |")
    return head + "\n".join(rows) + "\n"


def replace_block(text, key, block):
    begin, end = MARK_BEGIN.format(key), MARK_END.format(key)
    new = f"{begin}\n{block}{end}"
    if begin in text and end in text:
        return text[:text.index(begin)] + new + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + new + "\n"


def chart(results, stages, key, png):
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("bench: gnuplot not found (apt-get install gnuplot-nox): no chart", file=sys.stderr)
        return False
    data = png + ".dat"
    with open(data, "w") as f:
        for s in stages:
            f.write(f"{s} {results[s]['decode_tok_s']} {results[s]['prefill_tok_s']}\n")
    script = f"""set terminal pngcairo size 900,420 noenhanced font ',10'
set output '{png}'
set title 'tokens/s per stage ({key}), log scale'
set key left top
set style data histograms
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set logscale y
set grid ytics
set ylabel 'tokens/s'
set xtics rotate by -20
plot '{data}' using 2:xtic(1) title 'decode', '' using 3 title 'prefill'
"""
    out = subprocess.run([gnuplot], input=script, text=True, capture_output=True)
    os.remove(data)
    if out.returncode != 0:
        print("bench: gnuplot failed: " + out.stderr, file=sys.stderr)
        return False
    return True


def update_stage_pages(results, stages, key, bytes_per_token):
    for i, s in enumerate(stages):
        page = os.path.join(ROOT, "docs", "stages", s + ".md")
        if not os.path.exists(page):
            continue
        shown = sorted({stages[0], stages[max(i - 1, 0)], s}, key=stages.index)
        text = open(page).read()
        block = f"Measured by `make bench` ({key}):\n\n" + table(results, shown, bytes_per_token)
        open(page, "w").write(replace_block(text, key, block))


def bench_sampling(stages, vocabs, reps, out):
    """Times each stage's sample_token alone (bench_kernels) and writes the `sampling` tables."""
    rows = {}
    for s in stages:
        for v in vocabs:
            cmd = [os.path.join(ROOT, "build", s, "bench_kernels"), "sampling", str(v), "40", "0.95",
                   str(reps)]
            r = run(cmd)
            if r.returncode != 0:
                sys.exit(f"bench: {' '.join(cmd)} failed: {r.stderr.strip()}")
            rows[(s, v)] = float(re.search(r"us=([0-9.]+)", r.stdout).group(1))
            print(f"{s}: vocab {v}: {rows[(s, v)]:.1f} us per token", flush=True)
    head = "| stage | " + " | ".join(f"V = {v}: us/token | x 01" for v in vocabs) + " |\n"
    head += "|---|" + "---|---|" * len(vocabs) + "\n"
    body = "".join(f"| {s} | " + " | ".join(
        f"{rows[(s, v)]:.1f} | {ratio(rows[(stages[0], v)], rows[(s, v)])}" for v in vocabs) + " |\n"
        for s in stages)
    block = (f"Generated by `make bench-sampling` on {datetime.date.today()}: median of {reps} calls "
             f"of `build/<stage>/bench_kernels sampling V 40 0.95 {reps}` (top-k 40, top-p 0.95, "
             f"temperature 0.8; random logits).\n\n" + head + body)
    for path in (out, os.path.join(ROOT, "docs", "stages", stages[-1] + ".md")):
        text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
        with open(path, "w") as f:
            f.write(replace_block(text, "sampling", block))
    print(f"bench: wrote {os.path.relpath(out, ROOT)}")


def bench_tokenizer(stage, reps, out):
    """Times Tokenizer::encode on a mixed English/Chinese/code text (tools/bench_text.txt)."""
    shared = os.path.join(ROOT, "..", "shared", "vocab", "ggml-vocab-deepseek-llm.gguf")
    vocab = shared if os.path.exists(shared) else os.path.join(ROOT, "data", "models",
                                                               "tiny-llama-f32.gguf")
    text = os.path.join(ROOT, "tools", "bench_text.txt")
    cmd = [os.path.join(ROOT, "build", stage, "bench_kernels"), "tokenize", vocab, text, str(reps)]
    r = run(cmd)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed: {r.stderr.strip()}")
    f = dict(kv.split("=") for kv in r.stdout.split()[1:])
    name = "DeepSeek-LLM (102400 tokens, ../shared)" if vocab == shared else "the test models' (384 tokens)"
    block = (f"Generated by `make bench-tokenizer` on {datetime.date.today()}: `Tokenizer::encode` on "
             f"`tools/bench_text.txt` (English, Chinese, C++ and Python) repeated to "
             f"{int(f['bytes']) / 2**20:.1f} MiB, vocabulary {name}, median of {reps} runs:\n\n"
             f"| MB/s | tokens/s | a 4096-token prompt |\n|---|---|---|\n"
             f"| {float(f['mb_s']):.2f} | {float(f['tok_s']):.0f} | "
             f"{4096 / float(f['tok_s']) * 1e3:.1f} ms |\n")
    print(block)
    for path in (out, os.path.join(ROOT, "docs", "tokenization.md")):
        text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
        with open(path, "w") as fh:
            fh.write(replace_block(text, "tokenizer", block))


def bench_membench(out):
    """Read bandwidth for 1..n threads (build/membench) and the decode rooflines it implies."""
    rows = membench(2, 10)
    models = []
    for path in sorted(glob.glob(os.path.join(ROOT, "build", "models", "*.gguf"))):
        models.append((os.path.basename(path), weight_bytes_per_token(path)))
    head = "| threads | read GB/s | " + " | ".join(f"roofline tok/s, {m}" for m, _ in models) + " |\n"
    head += "|---|---|" + "---|" * len(models) + "\n"
    body = "".join(f"| {row['threads']} | {float(row['read_gb_s']):.1f} | " + " | ".join(
        f"{float(row['read_gb_s']) * GB / b:.2f}" for _, b in models) + " |\n" for row in rows)
    sizes = "; ".join(f"{m}: {b / GB:.3f} GB of weights per decoded token" for m, b in models)
    block = (f"Generated by `make membench` on {datetime.date.today()}: a read-and-sum over a 2 GiB "
             f"float array, best of 10 passes (`build/membench 2 10`). Roofline tok/s = read GB/s / "
             f"bytes of weights one decode step reads ({sizes}).\n\n" + head + body)
    print(block)
    text = open(out).read() if os.path.exists(out) else "# Benchmarks\n"
    with open(out, "w") as fh:
        fh.write(replace_block(text, "membench", block))


def llama_cpp_line(model, threads, results, stages, bytes_per_token):
    """For the 7B-/1B-shaped files: the last stage against llama.cpp's figures measured on this
    machine kind (../shared/reference/llama.cpp-bench.md) and against the membench roofline."""
    ref = os.path.join(ROOT, "..", "shared", "reference", "llama.cpp-bench.md")
    name = os.path.basename(model)
    size = "7B" if "deepseek-7b" in name else "1B" if "deepseek-1b" in name else None
    if size is None or not os.path.exists(ref):
        return ""
    m = re.search(rf"^\| {size} Q4_0 \| {threads} \| ([0-9.]+) [^|]*\| ([0-9.]+) ", open(ref).read(), re.M)
    if not m:
        return ""
    pp, tg = float(m.group(1)), float(m.group(2))
    r = results[stages[-1]]
    line = (f"Against llama.cpp on this machine kind ({size} Q4_0, {threads} thread(s), "
            f"`../shared/reference/llama.cpp-bench.md`: pp512 {pp}, tg128 {tg} tok/s; its file "
            f"keeps every 2-D tensor in Q4_0, as `{name}` does): {stages[-1]} prefills at "
            f"{r['prefill_tok_s'] / pp:.2f}x and decodes at {r['decode_tok_s'] / tg:.2f}x llama.cpp's rate")
    gbs = r["decode_tok_s"] * bytes_per_token / GB
    now = r["read_gb_s"]
    share = read_share(r, bytes_per_token)
    line += (f"; decode moves {gbs:.1f} GB/s of weights. `make membench`'s measurement (`build/membench "
             f"{MEMBENCH_ALONGSIDE[0]} {MEMBENCH_ALONGSIDE[1]}`), repeated right after each decode run, "
             f"read {now:.1f} GB/s (median; roofline {now * GB / bytes_per_token:.2f} tok/s), and each "
             f"decode run moved {share * 100:.0f}% of the bandwidth read right after it (median of "
             f"the per-run ratios; the membench table was measured at another time)")
    return line + ".\n"


def write_block(key, block, out, stages):
    """The block into out, and into the stage pages that show it (those with its marker)."""
    for path in [out] + [os.path.join(ROOT, "docs", "stages", s + ".md") for s in stages]:
        if os.path.exists(path) and (path == out or MARK_BEGIN.format(key) in open(path).read()):
            text = open(path).read()
            with open(path, "w") as fh:
                fh.write(replace_block(text, key, block))


KERNEL_SHAPES = (("q4_0", 1, 9), ("q4_0", 16, 3), ("f32", 1, 9))  # type, tokens, reps


def bench_kernels(stages, out):
    """linear() alone, one thread, on a 4096 x 4096 matrix: decode (1 token) and 16-token shapes."""
    rows = []
    for s in stages:
        cells = []
        for wtype, tokens, reps in KERNEL_SHAPES:
            cmd = [os.path.join(ROOT, "build", s, "bench_kernels"), "matmul", "4096", "4096", wtype,
                   str(tokens), str(reps)]
            r = run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"))
            if r.returncode != 0:
                sys.exit(f"bench: {' '.join(cmd)} failed: {r.stderr.strip()}")
            f = dict(kv.split("=") for kv in r.stdout.split()[1:])
            cells.append(f"{float(f['ms']):.2f} ms, {float(f['gflops']):.1f} GFLOP/s, "
                         f"{float(f['weight_gbs']):.2f} GB/s")
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    head = "| stage | " + " | ".join(f"{t} x {n} token(s)" for t, n, _ in KERNEL_SHAPES) + " |\n"
    head += "|---|" + "---|" * len(KERNEL_SHAPES) + "\n"
    block = (f"Generated by `make bench-kernels` on {datetime.date.today()}: `linear()` alone on a "
             f"4096 x 4096 matrix, one thread (`OMP_NUM_THREADS=1 build/<stage>/bench_kernels matmul "
             f"4096 4096 TYPE TOKENS REPS`), median of REPS after a warm-up, checked against a "
             f"double-precision reference first. GB/s counts the weight bytes as stored.\n\n"
             + head + "\n".join(rows) + "\n")
    write_block("kernels", block, out, stages)


STREAM_SHAPE = ("11008", "4096", "40", "5")  # rows, cols, matrices (1 GB of Q4_0), reps


def bench_stream(stages, out):
    """Decode's matmuls alone against the read bandwidth of the same moments: linear() with one
    token over 1 GB of Q4_0 matrices, each rep next to a read-and-sum of as many bytes."""
    rows = []
    threads = list(range(1, os.cpu_count() + 1))
    for s in stages:
        cells = []
        for t in threads:
            cmd = [os.path.join(ROOT, "build", s, "bench_kernels"), "stream", *STREAM_SHAPE]
            r = run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(t)))
            if r.returncode != 0:
                sys.exit(f"bench: {' '.join(cmd)} failed: {r.stderr.strip()}")
            reps = [dict(kv.split("=") for kv in line.split()[1:]) for line in r.stdout.splitlines()
                    if line.startswith("stream read_gb_s=")]
            read = statistics.median(float(f["read_gb_s"]) for f in reps)
            lin = statistics.median(float(f["linear_gb_s"]) for f in reps)
            ratio_ = statistics.median(float(f["ratio"]) for f in reps)
            cells.append(f"{lin:.1f} / {read:.1f} GB/s = {ratio_ * 100:.0f}%")
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    head = "| stage | " + " | ".join(f"{t} thread(s): linear / read" for t in threads) + " |\n"
    head += "|---|" + "---|" * len(threads) + "\n"
    block = (f"Generated by `make bench-stream` on {datetime.date.today()}: `linear()` with one token "
             f"(decode's shape) over {STREAM_SHAPE[2]} Q4_0 matrices of {STREAM_SHAPE[0]} x "
             f"{STREAM_SHAPE[1]} (1 GB, far more than the caches), each of {STREAM_SHAPE[3]} reps "
             f"right after a read-and-sum over as many bytes (`build/<stage>/bench_kernels stream "
             f"{' '.join(STREAM_SHAPE)}`); medians of the GB/s and of the per-rep ratio. Both halves "
             f"of a rep see the same machine, so the ratio holds when the VM's bandwidth drifts.\n\n"
             + head + "\n".join(rows) + "\n")
    write_block("stream", block, out, stages)


def stage_idea(stage):
    """The stage page's one-line `**Idea:** ...`."""
    page = os.path.join(ROOT, "docs", "stages", stage + ".md")
    if not os.path.exists(page):
        return ""
    m = re.search(r"^\*\*Idea:\*\* (.+?)\.?$", open(page).read(), re.M)
    return m.group(1).replace("|", "/") if m else ""


def update_readme_map(results, stages, key, png):
    """The README's stage map: one row per stage with its idea and the default benchmark."""
    readme = os.path.join(ROOT, "README.md")
    first = results[stages[0]]
    rows = ["| stage | the idea | decode tok/s | x prev | x 01 | prefill tok/s | x prev | x 01 |",
            "|---|---|---|---|---|---|---|---|"]
    for i, s in enumerate(stages):
        r, prev = results[s], results[stages[max(i - 1, 0)]]
        rows.append(f"| [{s}](docs/stages/{s}.md) | {stage_idea(s)} | {r['decode_tok_s']:.2f} | "
                    f"{ratio(r['decode_tok_s'], prev['decode_tok_s'])} | "
                    f"{ratio(r['decode_tok_s'], first['decode_tok_s'])} | {r['prefill_tok_s']:.2f} | "
                    f"{ratio(r['prefill_tok_s'], prev['prefill_tok_s'])} | "
                    f"{ratio(r['prefill_tok_s'], first['prefill_tok_s'])} |")
    block = (f"Measured by `make bench` ({key}: the model, 2 threads; details and machine in "
             f"[docs/benchmarks.md](docs/benchmarks.md)).\n\n" + "\n".join(rows) + "\n\n" +
             (f"![tokens/s per stage](docs/{os.path.basename(png)})\n" if png else ""))
    text = open(readme).read()
    begin, end = "<!-- stage-map:begin -->", "<!-- stage-map:end -->"
    if begin in text and end in text:
        text = text[:text.index(begin) + len(begin)] + "\n" + block + text[text.index(end):]
        open(readme, "w").write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sampling", action="store_true", help="time sample_token alone")
    ap.add_argument("--tokenizer", action="store_true", help="time Tokenizer::encode")
    ap.add_argument("--membench", action="store_true", help="read bandwidth and rooflines")
    ap.add_argument("--kernels", action="store_true", help="time linear() alone per stage")
    ap.add_argument("--stream", action="store_true", help="decode's linear() against read bandwidth")
    ap.add_argument("--stages", nargs="+", default=[])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-pages", action="store_true", help="do not touch docs/stages/*.md")
    ap.add_argument("--readme", action="store_true", help="also rewrite the README's stage map")
    args = ap.parse_args()
    if args.sampling:
        return bench_sampling(args.stages, (102400, 152064), max(args.runs, 50), args.out)
    if args.kernels:
        return bench_kernels(args.stages, args.out)
    if args.stream:
        return bench_stream(args.stages, args.out)
    if args.membench:
        return bench_membench(args.out)
    if args.tokenizer:
        return bench_tokenizer(args.stages[-1], max(args.runs, 5), args.out)
    if not args.model or not args.stages:
        ap.error("--model and --stages are required")

    model = os.path.abspath(args.model)
    bytes_per_token = weight_bytes_per_token(model)
    prompt = make_prompt(args.stages[0], model, args.prompt_tokens)
    prompt_file = os.path.join(ROOT, "build", "bench-prompt.txt")
    with open(prompt_file, "w") as f:
        f.write(prompt)
    results = {}
    for s in args.stages:
        results[s] = bench_stage(s, model, prompt_file, args)
        r = results[s]
        print(f"{s}: prefill {r['prefill_tok_s']:.2f} tok/s, decode {r['decode_tok_s']:.2f} tok/s, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)

    name = os.path.splitext(os.path.basename(model))[0]
    key = f"{name}-t{args.threads}"
    png = os.path.join(os.path.dirname(args.out), f"benchmarks-{key}.png")
    have_chart = chart(results, args.stages, key, png)
    all_stages = sorted(os.path.basename(d) for d in glob.glob(os.path.join(ROOT, "stages", "[0-9][0-9]*_*")))
    only = "" if args.stages == all_stages else (
        'ONLY="' + " ".join(st.split("_")[0] for st in args.stages) + '" ')
    cmd = (f"make bench {only}MODEL={os.path.relpath(model, ROOT)} THREADS={args.threads} "
           f"RUNS={args.runs} PROMPT_TOKENS={args.prompt_tokens} GEN_TOKENS={args.gen_tokens}")
    block = "\n".join([
        f"### {name}, {args.threads} thread(s)", "",
        f"Generated by `{cmd}` on {datetime.date.today()}; median of {args.runs} runs after one "
        f"warm-up; {int(results[args.stages[0]]['prompt_tokens'])}-token prompt, "
        f"{args.gen_tokens} tokens decoded from a one-word prompt, greedy. Decode / read bandwidth: "
        f"each decode run's weight GB/s over the read GB/s of `build/membench "
        f"{MEMBENCH_ALONGSIDE[0]} {MEMBENCH_ALONGSIDE[1]}` measured right after it, median (this "
        f"VM's bandwidth drifts by 10-20% over minutes; the ratio compares rows measured at "
        f"different times).", "",
        *machine_lines(),
        f"- model: `{os.path.relpath(model, ROOT)}`, {os.path.getsize(model) / 2**20:.1f} MiB; "
        f"weights read per decoded token: {bytes_per_token / 2**20:.1f} MiB",
        f"- engine commands (per stage): {results[args.stages[0]]['cmd']}", "",
        table(results, args.stages, bytes_per_token),
        llama_cpp_line(model, args.threads, results, args.stages, bytes_per_token),
        f"![tokens/s per stage]({os.path.basename(png)})\n" if have_chart else ""])
    text = open(args.out).read() if os.path.exists(args.out) else (
        "# Benchmarks\n\nEvery table here is written by `tools/bench.py` (`make bench`); "
        "do not edit by hand.\n")
    with open(args.out, "w") as f:
        f.write(replace_block(text, key, block))
    if not args.no_pages:
        update_stage_pages(results, args.stages, key, bytes_per_token)
        if args.readme and key == README_KEY:
            update_readme_map(results, args.stages, key, png if have_chart else None)
    print(f"bench: wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main()
