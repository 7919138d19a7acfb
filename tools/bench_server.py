#!/usr/bin/python3
"""bench_server.py: aggregate decode tokens/s of the server with 1, 2, 4, 8 streams at once.

    bench_server.py --server build/23_batched_sequences/server --model F [--threads 2]
                    [--streams 1 2 4 8] [--tokens 64] [--ctx 256] [--runs 2]
                    [--llama-server PATH] [--out docs/benchmarks.md]

For each count n: a server started with --parallel n, n streaming completions sent at once (the
same short prompt, temperature 0, max_tokens tokens, ignore_eos so that every stream runs to the
end). Aggregate decode tokens/s = the tokens the n streams received between the moment the last
of them got its first token (all prefills done) and the moment the first of them ended, over that
time: every stream decoding. The median of --runs rounds, after one warm-up round. With
--llama-server, llama.cpp's llama-server (same file, threads, --parallel n, -c n x ctx: it splits
its context among the slots) is run the same way, interleaved: n for us, then n for it.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (replace_block, machine description)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "Once upon a time"
HEALTH_TIMEOUT_S = 600  # a 7B file loads (and packs) in tens of seconds
REQUEST_TIMEOUT_S = 900


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, proc):
    deadline = time.time() + HEALTH_TIMEOUT_S
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"bench_server: the server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200 and b"ok" in r.read():
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("bench_server: the server did not answer /health in time")


def stream_once(port, tokens, times):
    """One streaming completion; appends (time, n_tokens_so_far) per chunk that carries text."""
    body = json.dumps({"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "n_predict": tokens}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    n = 0
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choice = chunk["choices"][0]
            if choice.get("text"):
                n += 1
                times.append((time.perf_counter(), n))


def round_of(port, n_streams, tokens):
    """Aggregate tokens/s while all n_streams decode."""
    logs = [[] for _ in range(n_streams)]
    threads = [threading.Thread(target=stream_once, args=(port, tokens, logs[i]))
               for i in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(len(log) < 2 for log in logs):
        sys.exit("bench_server: a stream ended after fewer than 2 tokens")
    start = max(log[0][0] for log in logs)  # every prefill done
    end = min(log[-1][0] for log in logs)  # the first stream ends
    counted = sum(sum(1 for (t, _) in log if start < t <= end) for log in logs)
    return counted / (end - start) if end > start else float("nan")


def start_ours(args, n):
    port = free_port()
    cmd = [args.server, "-m", args.model, "-t", str(args.threads), "--parallel", str(n),
           "-c", str(args.ctx), "--port", str(port)]
    return port, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_llama(args, n):
    port = free_port()
    cmd = [args.llama_server, "-m", args.model, "-t", str(args.threads), "--parallel", str(n),
           "-c", str(args.ctx * n), "--port", str(port), "--host", "127.0.0.1", "-ngl", "0"]
    return port, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(starter, args, n):
    port, proc = starter(args, n)
    try:
        wait_healthy(port, proc)
        round_of(port, n, min(args.tokens, 8))  # warm-up
        return statistics.median(round_of(port, n, args.tokens) for _ in range(args.runs))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--llama-server")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    args = p.parse_args()
    stage = os.path.basename(os.path.dirname(os.path.abspath(args.server)))
    ours, peer = {}, {}
    for n in args.streams:
        ours[n] = measure(start_ours, args, n)
        print(f"{stage} --parallel {n}: {ours[n]:.2f} tok/s", file=sys.stderr)
        if args.llama_server:
            peer[n] = measure(start_llama, args, n)
            print(f"llama-server --parallel {n}: {peer[n]:.2f} tok/s", file=sys.stderr)
    one = ours[args.streams[0]]
    model = os.path.relpath(args.model, ROOT) if args.model.startswith(ROOT) else args.model
    lines = [
        f"Generated by `make bench-server MODEL={model} THREADS={args.threads}"
        f"{' LLAMA_SERVER=PATH' if args.llama_server else ''}` on {datetime.date.today()} "
        f"(`tools/bench_server.py`): for each n, a server started with `--parallel n`, n "
        f"streaming completions at once ({args.tokens} tokens each from \"{PROMPT}\", "
        f"temperature 0, ignore_eos); aggregate decode tokens/s while all n streams decode, median "
        f"of {args.runs} rounds after a warm-up"
        f"{'; llama.cpp c392e50 llama-server run the same way after each n (-c n x ' + str(args.ctx) + ')' if args.llama_server else ''}.",
        "",
        *bench.machine_lines(),
        "",
        "| streams | " + stage + " tok/s | x 1 stream |" + (" llama-server tok/s | x 1 stream | ours / llama-server |" if peer else ""),
        "|---|---|---|" + ("---|---|---|" if peer else ""),
    ]
    for n in args.streams:
        row = f"| {n} | {ours[n]:.2f} | {ours[n] / one:.2f}x |"
        if peer:
            row += f" {peer[n]:.2f} | {peer[n] / peer[args.streams[0]]:.2f}x | {ours[n] / peer[n]:.2f}x |"
        lines.append(row)
    block = "\n".join(lines) + "\n"
    key = "server-" + os.path.splitext(os.path.basename(args.model))[0]
    print(block)
    for path in [args.out, os.path.join(ROOT, "docs", "stages", stage + ".md")]:
        if os.path.exists(path):
            text = open(path).read()
            if path == args.out or bench.MARK_BEGIN.format(key) in text:
                with open(path, "w") as f:
                    f.write(bench.replace_block(text, key, block))


if __name__ == "__main__":
    main()
