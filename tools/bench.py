#!/usr/bin/env python3
"""Benchmark harness: runs stages' engines on one model and writes the measured tables.

    /usr/bin/python3 tools/bench.py --stages 01_naive 02_loop_reorder --model M.gguf --threads 2

For every stage: one warm-up run, then --runs timed runs of the engine's own CLI (greedy), parsing
its `stats:` line; the median of each figure is reported. Prefill and decode are measured
separately, as llama-bench's pp and tg tests are: a prompt of --prompt-tokens tokens, and
--gen-tokens generated from a one-word prompt.
With --llama-bench LABEL=PATH (one or more llama-bench binaries, each built by whoever runs the
benchmark, outside the repository: docs/benchmarks.md says how), every run of the stages is
followed by one run of each llama-bench on the same file, prompt length, token count and threads
(ours, theirs, ours, theirs, ...), and the last stage is set against each of them by the median
of the per-run ratios.
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
import tempfile
import json

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATS_RE = re.compile(r"^stats: (.*)$", re.M)
PROMPT_WORDS = ("Once upon a time there was a little robot who loved to count the stars above "
                "the quiet town, and every night it wrote a new number in its small blue book. ")
MARK_BEGIN = "<!-- bench:begin {} -->"
MARK_END = "<!-- bench:end {} -->"
GB = 1e9
README_KEY = "bench-small-q4_0-t2"  # the run whose table the README's stage map shows (AVX-512 hosts)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def run_measured(cmd):
    """Runs cmd; returns (returncode, stdout, stderr, its own peak RSS in MB) (os.wait4's rusage,
    so that each run's peak is its own, not the largest of all children so far)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_maxrss / 1024.0


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


def engine_commands(stage, model, prompt_file, args):
    """Two commands, as llama-bench's pp and tg tests: prefill of the --prompt-tokens prompt (one
    token generated), and decode of --gen-tokens tokens from a one-word prompt, so that decode
    reads the weights and an almost empty KV cache (at 576 positions a 7B model's fp32 cache adds
    ~0.5 GB a token to the 3.65 GB of weights)."""
    base = [engine_path(stage), "-m", model, "-t", str(args.threads), "--temp", "0"]
    pp = base + ["-f", prompt_file, "-n", "1", "-c", str(args.prompt_tokens + 16)]
    tg = base + ["-p", PROMPT_WORDS.split()[0], "-n", str(args.gen_tokens),
                 "-c", str(args.gen_tokens + 16)]
    return pp, tg


def run_engine(cmd):
    rc, _, err, rss = run_measured(cmd)
    if rc != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed: {err.strip()[-500:]}")
    stats = parse_stats(err)
    stats["peak_rss_mb"] = rss
    return stats


def llama_bench_command(path, model, args, n_prompt):
    """llama-bench's pp and tg tests in one process: a prompt of n_prompt tokens (as many as the
    engine's prompt had), and args.gen_tokens tokens decoded; one repetition (this harness
    repeats), default options otherwise (mmap, its weight repacking, OpenMP)."""
    return [path, "-m", model, "-t", str(args.threads), "-p", str(n_prompt), "-n",
            str(args.gen_tokens), "-r", "1", "-o", "json"]


def run_llama_bench(cmd):
    rc, out, err, rss = run_measured(cmd)
    if rc != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed: {err.strip()[-500:]}")
    tests = json.loads(out)
    pp = [t["avg_ts"] for t in tests if t["n_prompt"] > 0 and t["n_gen"] == 0]
    tg = [t["avg_ts"] for t in tests if t["n_gen"] > 0 and t["n_prompt"] == 0]
    if not pp or not tg:
        sys.exit(f"bench: {' '.join(cmd)} printed no pp and tg results")
    return {"prefill_tok_s": pp[0], "decode_tok_s": tg[0], "peak_rss_mb": rss}


def parse_peers(specs):
    """LABEL=PATH (or PATH alone, labelled llama.cpp) -> [(label, absolute path)]."""
    peers = []
    for spec in specs:
        label, _, path = spec.rpartition("=")
        label = label or "llama.cpp"
        if not os.access(path, os.X_OK):
            sys.exit(f"bench: llama-bench '{path}' is not an executable file")
        peers.append((label, os.path.abspath(path)))
    if len({label for label, _ in peers}) != len(peers):
        sys.exit("bench: give each llama-bench its own label (LABEL=PATH)")
    return peers


def bench_interleaved(stages, peers, model, prompt_file, args):
    """Runs every stage's two commands, then every peer's llama-bench, --runs + 1 times (run 0
    is the warm-up: page cache, CPU frequency), with `make membench`'s measurement after each
    entry's run. Returns ({entry: medians}, {entry: per-run samples}); entries are the stages
    and the peers' labels."""
    n_prompt = None
    samples = {e: [] for e in list(stages) + [label for label, _ in peers]}
    for i in range(args.runs + 1):
        for stage in stages:
            pp, tg = engine_commands(stage, model, prompt_file, args)
            a, b = run_engine(pp), run_engine(tg)
            n_prompt = n_prompt or int(a["prompt_tokens"])
            if i > 0:
                samples[stage].append({"prefill_tok_s": a["prefill_tok_s"],
                                       "decode_tok_s": b["decode_tok_s"],
                                       "prompt_tokens": a["prompt_tokens"],
                                       "peak_rss_mb": max(a["peak_rss_mb"], b["peak_rss_mb"]),
                                       "read_gb_s": read_bandwidth(args.threads)})
        for label, path in peers:
            r = run_llama_bench(llama_bench_command(path, model, args, n_prompt))
            if i > 0:
                r["prompt_tokens"] = n_prompt
                r["read_gb_s"] = read_bandwidth(args.threads)
                samples[label].append(r)
        print(f"bench: run {i} of {args.runs} done" + (" (warm-up)" if i == 0 else ""), flush=True)
    results = {}
    for entry, runs in samples.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        # Each decode run against the read bandwidth measured right after it: the ratio of two
        # figures of the same minute holds when the VM's bandwidth drifts between runs.
        med["decode_tok_s_per_read_gb_s"] = statistics.median(
            r["decode_tok_s"] / r["read_gb_s"] for r in runs)
        results[entry] = med
    for stage in stages:
        shown = [" ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)
                 for cmd in engine_commands(stage, model, prompt_file, args)]
        results[stage]["cmd"] = f"`{shown[0]}` (prefill), `{shown[1]}` (decode)"
    for label, path in peers:
        results[label]["cmd"] = "`" + " ".join(llama_bench_command(path, model, args, n_prompt)) + "`"
    return results, samples


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
    one row is read (unless the output is tied to it, then all of it is read as the output), and
    of a mixture of experts' stacked expert tensors (*_exps) only the experts a token uses."""
    r = gguf.GGUFReader(model)
    arch = r.get("general.architecture")
    used = r.get(f"{arch}.expert_used_count", 0)
    share = used / r.get(f"{arch}.expert_count") if used else 1.0
    total = sum(t.nbytes * (share if "_exps." in t.name else 1.0) for t in r.tensors.values())
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


def table(results, stages, bytes_per_token, peers=()):
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
    for label in peers:
        r = results[label]
        rows.append(f"| {label} | {r['decode_tok_s']:.2f} | - | - | {r['prefill_tok_s']:.2f} | - | - | "
                    f"{r['peak_rss_mb']:.0f} | {bytes_per_token * r['decode_tok_s'] / GB:.2f} | "
                    f"{read_share(r, bytes_per_token) * 100:.0f}% |")
    return head + "\n".join(rows) + "\n"


def replace_block(text, key, block):
    begin, end = MARK_BEGIN.format(key), MARK_END.format(key)
    new = f"{begin}\n{block}{end}"
    if begin in text and end in text:
        return text[:text.index(begin)] + new + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + new + "\n"


def chart(results, stages, key, png):
    """A bar pair (decode, prefill) per entry: the stages, then any llama-bench peers."""
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


def redraw_charts(out):
    """Each chart of `out` drawn again from its table (after stages are renamed or renumbered:
    the same measurements, new labels)."""
    text = open(out).read()
    for key, body in re.findall(r"<!-- bench:begin (\S+) -->(.*?)<!-- bench:end \1 -->", text, re.S):
        png = os.path.join(os.path.dirname(out), f"benchmarks-{key}.png")
        if os.path.basename(png) not in body:
            continue
        results, entries = {}, []
        for line in body.split("\n"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(cells) > 4 and cells[0] != "stage" and cells[1][:1].isdigit():
                results[cells[0]] = {"decode_tok_s": cells[1], "prefill_tok_s": cells[4]}
                entries.append(cells[0])
        if entries and chart(results, entries, key, png):
            print(f"bench: {os.path.relpath(png, ROOT)} redrawn from its table")


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


# CPU features that decide which kernels llama.cpp and the engine can use.
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def host_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def isa_suffix():
    """The key suffix: none on an AVX-512 host, "-avx2" elsewhere, where the engine and llama.cpp
    run other kernels, so that host's tables get their own keys instead of replacing AVX-512's."""
    return "" if "avx512f" in host_flags() else "-avx2"


def cpu_flags_line():
    have = host_flags()
    listed = " ".join(f for f in CPU_FLAGS if f in have)
    amx = "yes (amx_int8)" if "amx_int8" in have else "no"
    return f"- host CPU flags: {listed}; AMX-INT8: {amx}"


# The CMake options of a llama.cpp build that decide its CPU kernels.
PEER_OPTIONS = ("CMAKE_BUILD_TYPE", "GGML_NATIVE", "GGML_AVX2", "GGML_AVX512", "GGML_AVX512_VNNI",
                "GGML_AVX512_BF16", "GGML_AMX_INT8", "GGML_OPENMP", "LLAMA_CURL")


def peer_line(label, path):
    """A llama-bench binary, described by the CMakeCache.txt of its build folder (bin/..)."""
    cache = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "CMakeCache.txt")
    options = {}
    if os.path.exists(cache):
        for line in open(cache):
            m = re.match(r"^([A-Z0-9_]+):[A-Z]+=(.*)$", line.strip())
            if m and m.group(1) in PEER_OPTIONS:
                options[m.group(1)] = m.group(2)
    shown = ", ".join(f"{k}={options[k]}" for k in PEER_OPTIONS if k in options) or "no CMakeCache.txt"
    return f"- {label}: `{path}` ({shown})"


def roofline_line(stage, r, bytes_per_token):
    gbs = r["decode_tok_s"] * bytes_per_token / GB
    now = r["read_gb_s"]
    return (f"{stage} decodes at {gbs:.1f} GB/s of weights. `make membench`'s measurement (`build/"
            f"membench {MEMBENCH_ALONGSIDE[0]} {MEMBENCH_ALONGSIDE[1]}`), repeated right after each "
            f"decode run, read {now:.1f} GB/s (median; roofline {now * GB / bytes_per_token:.2f} "
            f"tok/s), and each decode run moved {read_share(r, bytes_per_token) * 100:.0f}% of the "
            f"bandwidth read right after it (median of the per-run ratios).\n")


def peer_comparison(stage, peers, samples):
    """The stage against each peer, run for run: medians of the per-run ratios."""
    lines = []
    for label, _ in peers:
        ours, theirs = samples[stage], samples[label]
        dec = statistics.median(a["decode_tok_s"] / b["decode_tok_s"] for a, b in zip(ours, theirs))
        pre = statistics.median(a["prefill_tok_s"] / b["prefill_tok_s"] for a, b in zip(ours, theirs))
        lines.append(f"{stage} against {label}, measured in the same runs (interleaved, median of "
                     f"{len(ours)} per-run ratios): decode {dec:.2f}x, prefill {pre:.2f}x.")
    return "\n".join(lines) + ("\n" if lines else "")


def write_block(key, block, out, stages):
    """The block into out, and into the stage pages that show it (those with its marker), under
    key plus this host's isa_suffix(), as main's tables."""
    key += isa_suffix()
    for path in [out] + [os.path.join(ROOT, "docs", "stages", s + ".md") for s in stages]:
        if os.path.exists(path) and (path == out or MARK_BEGIN.format(key) in open(path).read()):
            text = open(path).read()
            with open(path, "w") as fh:
                fh.write(replace_block(text, key, block))


KERNEL_SHAPES = (("q4_0", 1, 9), ("q4_0", 16, 3), ("f32", 1, 9))  # type, tokens, reps


def time_linear(stage, wtype, tokens, reps):
    """One `bench_kernels matmul 4096 4096` run on one thread: its key=value fields (ms, gflops,
    weight_gbs, ...)."""
    cmd = [os.path.join(ROOT, "build", stage, "bench_kernels"), "matmul", "4096", "4096", wtype,
           str(tokens), str(reps)]
    r = run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed: {r.stderr.strip()}")
    return dict(kv.split("=") for kv in r.stdout.split()[1:])


def bench_kernels(stages, out):
    """linear() alone, one thread, on a 4096 x 4096 matrix: decode (1 token) and 16-token shapes."""
    rows = []
    for s in stages:
        cells = []
        for wtype, tokens, reps in KERNEL_SHAPES:
            f = time_linear(s, wtype, tokens, reps)
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


AMX_SHAPES = (("q4_0", 16), ("q4_0", 64), ("q4_0", 256), ("q8_0", 64))  # type, tokens
AMX_REPS = 5


def bench_amx(stages, out):
    """linear() alone, one thread, 4096 x 4096, batches of 16 to 256 tokens: stage 25's AMX tiles
    against the stage before them, on this host (the block says whether it has AMX)."""
    rows = []
    for s in stages:
        cells = []
        for wtype, tokens in AMX_SHAPES:
            f = time_linear(s, wtype, tokens, AMX_REPS)
            cells.append(f"{float(f['ms']):.2f} ms, {float(f['gflops']):.0f} GFLOP/s")
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    head = "| stage | " + " | ".join(f"{t} x {n} tokens" for t, n in AMX_SHAPES) + " |\n"
    head += "|---|" + "---|" * len(AMX_SHAPES) + "\n"
    block = (f"Generated by `make bench-amx` on {datetime.date.today()}: `linear()` alone on a "
             f"4096 x 4096 matrix, one thread (`OMP_NUM_THREADS=1 build/<stage>/bench_kernels matmul "
             f"4096 4096 TYPE TOKENS {AMX_REPS}`), median of {AMX_REPS} after a warm-up, checked "
             f"against a double-precision reference first; it includes quantizing the activations."
             "\n\n" + "\n".join(machine_lines() + [cpu_flags_line()]) + "\n\n" + head + "\n".join(rows) + "\n")
    write_block("amx-kernels", block, out, stages)


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


CONTENDED_CONFIGS = (("quiet", 1), ("quiet", 2), ("busy", 1), ("busy", 2))


def bench_contended(stages, peers, model, runs, gen_tokens, out):
    """Decode tok/s with 1 and 2 threads on a quiet machine and with another process keeping one
    core busy (a shell loop), interleaved entry by entry; writes the `contended` table."""
    samples = {(e, c): [] for e in list(stages) + [lb for lb, _ in peers] for c in CONTENDED_CONFIGS}
    for i in range(runs + 1):
        for load, threads in CONTENDED_CONFIGS:
            busy = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if load == "busy" else None
            try:
                args = argparse.Namespace(threads=threads, gen_tokens=gen_tokens, prompt_tokens=1)
                for stage in stages:
                    _, tg = engine_commands(stage, model, None, args)
                    r = run_engine(tg)
                    if i > 0:
                        samples[(stage, (load, threads))].append(r["decode_tok_s"])
                for label, path in peers:
                    cmd = [path, "-m", model, "-t", str(threads), "-p", "0", "-n", str(gen_tokens),
                           "-r", "1", "-o", "json"]
                    rc, text, err, _ = run_measured(cmd)
                    if rc != 0:
                        sys.exit(f"bench: {' '.join(cmd)} failed: {err.strip()[-500:]}")
                    if i > 0:
                        samples[(label, (load, threads))].append(json.loads(text)[0]["avg_ts"])
            finally:
                if busy:
                    busy.kill()
                    busy.wait()
        print(f"bench: run {i} of {runs} done" + (" (warm-up)" if i == 0 else ""), flush=True)
    head = ("| stage | quiet, 1 thread | quiet, 2 threads | busy core, 1 thread | busy core, 2 threads "
            "| busy: 2 threads / 1 |\n|---|---|---|---|---|---|\n")
    rows = []
    for e in list(stages) + [lb for lb, _ in peers]:
        med = [statistics.median(samples[(e, c)]) for c in CONTENDED_CONFIGS]
        rows.append(f"| {e} | " + " | ".join(f"{m:.2f}" for m in med) + f" | {med[3] / med[2]:.2f}x |")
        print(rows[-1], flush=True)
    only = 'ONLY="' + " ".join(st.split("_")[0] for st in stages) + '" '
    llama = ' LLAMA_BENCH="' + " ".join(f"{lb}=PATH" for lb, _ in peers) + '"' if peers else ""
    key = "contended-" + os.path.splitext(os.path.basename(model))[0]
    block = "\n".join([
        f"### Decode on a busy machine: {os.path.basename(model)}", "",
        f"Generated by `make bench-contended {only}MODEL={os.path.relpath(model, ROOT)} RUNS={runs} "
        f"GEN_TOKENS={gen_tokens}{llama}` on {datetime.date.today()}: decode tok/s ({gen_tokens} "
        f"tokens from a one-word prompt, median of {runs} runs after one warm-up), on a quiet machine "
        f"and with a shell loop (`while :; do :; done`) keeping one of the {os.cpu_count()} cores "
        f"busy.", "", *machine_lines(), cpu_flags_line(),
        *[peer_line(lb, path) for lb, path in peers], "", head + "\n".join(rows), ""])
    write_block(key, block, out, stages)
    print(f"bench: wrote {os.path.relpath(out, ROOT)}")


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
    ap.add_argument("--amx", action="store_true", help="linear() on batches, before and with AMX")
    ap.add_argument("--stream", action="store_true", help="decode's linear() against read bandwidth")
    ap.add_argument("--contended", action="store_true", help="decode, quiet and with a busy core")
    ap.add_argument("--charts", action="store_true", help="redraw the charts from --out's tables")
    ap.add_argument("--stages", nargs="+", default=[])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-pages", action="store_true", help="do not touch docs/stages/*.md")
    ap.add_argument("--readme", action="store_true", help="also rewrite the README's stage map")
    ap.add_argument("--llama-bench", nargs="*", default=[], metavar="LABEL=PATH",
                    help="llama-bench binaries to run interleaved with the stages (PATH alone: "
                         "labelled llama.cpp)")
    args = ap.parse_args()
    if args.charts:
        return redraw_charts(args.out)
    if args.sampling:
        return bench_sampling(args.stages, (102400, 152064), max(args.runs, 50), args.out)
    if args.kernels:
        return bench_kernels(args.stages, args.out)
    if args.amx:
        return bench_amx(args.stages, args.out)
    if args.stream:
        return bench_stream(args.stages, args.out)
    if args.membench:
        return bench_membench(args.out)
    if args.tokenizer:
        return bench_tokenizer(args.stages[-1], max(args.runs, 5), args.out)
    if not args.model or not args.stages:
        ap.error("--model and --stages are required")

    model = os.path.abspath(args.model)
    peers = parse_peers(args.llama_bench)
    if args.contended:
        return bench_contended(args.stages, peers, model, args.runs, args.gen_tokens, args.out)
    bytes_per_token = weight_bytes_per_token(model)
    prompt = make_prompt(args.stages[0], model, args.prompt_tokens)
    prompt_file = os.path.join(ROOT, "build", "bench-prompt.txt")
    with open(prompt_file, "w") as f:
        f.write(prompt)
    results, samples = bench_interleaved(args.stages, peers, model, prompt_file, args)
    entries = list(args.stages) + [label for label, _ in peers]
    for e in entries:
        r = results[e]
        print(f"{e}: prefill {r['prefill_tok_s']:.2f} tok/s, decode {r['decode_tok_s']:.2f} tok/s, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)

    name = os.path.splitext(os.path.basename(model))[0]
    suffix = isa_suffix()
    key = f"{name}-t{args.threads}{suffix}"
    png = os.path.join(os.path.dirname(args.out), f"benchmarks-{key}.png")
    have_chart = chart(results, entries, key, png)
    all_stages = sorted(os.path.basename(d) for d in glob.glob(os.path.join(ROOT, "stages", "[0-9][0-9]*_*")))
    only = "" if args.stages == all_stages else (
        'ONLY="' + " ".join(st.split("_")[0] for st in args.stages) + '" ')
    llama = ' LLAMA_BENCH="' + " ".join(f"{label}=PATH" for label, _ in peers) + '"' if peers else ""
    cmd = (f"make bench {only}MODEL={os.path.relpath(model, ROOT)} THREADS={args.threads} "
           f"RUNS={args.runs} PROMPT_TOKENS={args.prompt_tokens} GEN_TOKENS={args.gen_tokens}{llama}")
    order = ("; each run: every stage, then " + ", ".join(label for label, _ in peers)
             + " (interleaved)") if peers else ""
    block = "\n".join([
        f"### {name}, {args.threads} thread(s)"
        + (", AVX2 host (no AVX-512)" if suffix else ""), "",
        f"Generated by `{cmd}` on {datetime.date.today()}; median of {args.runs} runs after one "
        f"warm-up{order}; {int(results[args.stages[0]]['prompt_tokens'])}-token prompt, "
        f"{args.gen_tokens} tokens decoded from a one-word prompt, greedy. Decode / read bandwidth: "
        f"each decode run's weight GB/s over the read GB/s of `build/membench "
        f"{MEMBENCH_ALONGSIDE[0]} {MEMBENCH_ALONGSIDE[1]}` measured right after it, median (this "
        f"VM's bandwidth drifts by 10-20% over minutes; the ratio compares rows measured at "
        f"different times). Peak RSS: the largest of the runs' own (wait4).", "",
        *machine_lines(), cpu_flags_line(),
        f"- model: `{os.path.relpath(model, ROOT)}`, {os.path.getsize(model) / 2**20:.1f} MiB; "
        f"weights read per decoded token: {bytes_per_token / 2**20:.1f} MiB",
        f"- engine commands (per stage): {results[args.stages[0]]['cmd']}",
        *[peer_line(label, path) + f", run as {results[label]['cmd']}" for label, path in peers], "",
        table(results, args.stages, bytes_per_token, [label for label, _ in peers]),
        peer_comparison(args.stages[-1], peers, samples) +
        roofline_line(args.stages[-1], results[args.stages[-1]], bytes_per_token),
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
