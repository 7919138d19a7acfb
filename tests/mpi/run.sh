#!/usr/bin/env bash
# The pipeline stage under mpirun (docs/stages/24_pipeline_mpi.md), on this one machine:
#   - 2 and 3 ranks give the text and the last logits of one process, bit for bit, on the test
#     models of both architectures (llama/qwen2 and deepseek2), sliding past the context too,
#     and in --chat and through the server;
#   - one process gives the last logits of the stage before, bit for bit or within the
#     goldens' bound (a stage that sums in another order);
#   - each rank holds about file size / ranks of memory;
#   - failures end every rank with a message, never a hang: a file missing on one rank, a rank
#     killed, a rank stalled (ENGINE_PIPELINE_TIMEOUT), more ranks than layers, a bad timeout.
# Usage: tests/mpi/run.sh STAGE. One "ok - ..." or "not ok - ..." line per check, then
# "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
stage=$1
engine=build/$stage/engine
work=build/$stage/mpi
rm -rf "$work" && mkdir -p "$work"
command -v mpirun >/dev/null || { echo "mpirun not found (tools/deps.sh installs openmpi-bin)"; echo "0 passed, 1 failed"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
# More ranks than this machine's 2 cores, each free to run on any of them.
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none)
LIMIT=60  # seconds a failing run may take to end every rank
pass=0
fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
not_ok() {
  echo "not ok - $1"
  [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 12 "$2" | sed 's/^/#   /'
  fail=$((fail + 1))
}

# The same run alone and under mpirun -np N: stdout (text, or the logits file) byte for byte.
same() {  # same NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  "$engine" "$@" >"$work/one.out" 2>"$work/one.err"
  "${MPIRUN[@]}" -np "$ranks" "$engine" "$@" >"$work/many.out" 2>"$work/many.err"
  if [ $? -eq 0 ] && [ -s "$work/one.out" ] && cmp -s "$work/one.out" "$work/many.out"; then
    ok "$name, $ranks ranks: same as one process"
  else
    not_ok "$name, $ranks ranks: differs from one process" "$work/many.err"
  fi
}
same_logits() {  # same_logits NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  "$engine" "$@" --dump-logits "$work/one.bin" 2>"$work/one.err"
  "${MPIRUN[@]}" -np "$ranks" "$engine" "$@" --dump-logits "$work/many.bin" 2>"$work/many.err"
  if [ $? -eq 0 ] && [ -s "$work/one.bin" ] && cmp -s "$work/one.bin" "$work/many.bin"; then
    ok "$name, $ranks ranks: last logits bit for bit"
  else
    not_ok "$name, $ranks ranks: last logits differ" "$work/many.err"
  fi
  rm -f "$work/one.bin" "$work/many.bin"
}

# ---- Same results. The long prompt goes in several batches (16 rows each with 2 ranks).
prompt="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters."
for spec in tiny-kjv-q4_0:3 tiny-kjv-f32:3 tiny-qwen2-q4_0:2 tiny-llama-gqa-tied-f32:2 \
  tiny-kq-q4_k_m:2 tiny-deepseek2-lite-q4_0:3 tiny-deepseek2-v3-f32:3; do
  model=data/models/${spec%:*}.gguf
  for ranks in $(seq 2 "${spec#*:}"); do
    same "${spec%:*} greedy text" "$ranks" -m "$model" -p "And it came to pass" -n 40 --temp 0 -t 1
    same_logits "${spec%:*} long prompt" "$ranks" -m "$model" -p "$prompt" -c 512 -t 1
  done
done
# Past the context (-c 24): the ring slides on every rank alike; seeded sampling on rank 0.
for model in tiny-kjv-q4_0 tiny-deepseek2-lite-q4_0; do
  same "$model sliding past -c 24" 3 -m "data/models/$model.gguf" -p "And" -c 24 -n 100 \
    --temp 0.8 -s 7 -t 1
done
same "tiny-kjv-q4_0 --chat" 2 -m data/models/tiny-kjv-q4_0.gguf --chat -p "Who made the earth?" \
  -n 24 --temp 0 -t 1
# One process of this stage is the stage before it: bit for bit where the stage keeps the
# arithmetic, else within the Q4_0 goldens' bound (logit_tolerance(): 0.05 of max(1, max |logit|)
# for activations rounded to Q8_0) with the same top token. A stage whose kernels sum in another
# order changes the last bits, and the Q8_0 rounding of each layer's input carries them on
# (26's blocked attention with AVX2's 8-key blocks: 0.13% and 0.75% of max |logit| here).
close_logits() {  # close_logits BEFORE.bin THIS.bin: prints max |diff|, fails past the bound
  /usr/bin/python3 - "$1" "$2" <<'PY'
import array, sys
before, this = (array.array("f", open(path, "rb").read()) for path in sys.argv[1:3])
if len(before) != len(this) or not before:
    sys.exit(f"{len(this)} logits, {len(before)} before")
diff = max(abs(a - b) for a, b in zip(before, this))
print(f"{diff:.3g}")
bound = 0.05 * max(1.0, max(abs(a) for a in before))
top = lambda row: max(range(len(row)), key=row.__getitem__)
sys.exit(0 if diff <= bound and top(before) == top(this) else 1)
PY
}
before=$(ls -d stages/[0-9][0-9]_* | sed 's|stages/||' | grep -B1 -x "$stage" | head -n 1)
for model in tiny-kjv-q4_0 tiny-deepseek2-lite-q4_0; do
  [ "$before" != "$stage" ] && [ -x "build/$before/engine" ] || break
  "build/$before/engine" -m "data/models/$model.gguf" -p "$prompt" -c 512 \
    --dump-logits "$work/before.bin" 2>/dev/null
  "$engine" -m "data/models/$model.gguf" -p "$prompt" -c 512 --dump-logits "$work/this.bin" 2>/dev/null
  max_diff=""
  if [ -s "$work/this.bin" ] && cmp -s "$work/before.bin" "$work/this.bin"; then
    ok "$model, one process: the logits of $before, bit for bit"
  elif [ -s "$work/this.bin" ] && max_diff=$(close_logits "$work/before.bin" "$work/this.bin"); then
    ok "$model, one process: the logits of $before within the bound (max |diff| $max_diff), same top token"
  else not_ok "$model, one process: logits differ from $before (max |diff| ${max_diff:-?})"; fi
done

# ---- The server under mpirun: a completion as the CLI writes it. Port 0: the kernel picks a
# free one and rank 0 names it on stderr (a fixed or random port can be taken, by MPI too).
if [ -x "build/$stage/server" ]; then
  "${MPIRUN[@]}" -np 2 "build/$stage/server" -m data/models/tiny-kjv-q4_0.gguf --port 0 \
    -t 1 --parallel 2 >"$work/server.err" 2>&1 &
  server_pid=$!
  reply=$(/usr/bin/python3 - "$work/server.err" "$server_pid" 2>"$work/client.err" <<'EOF'
import json, os, re, sys, time, urllib.request
log, pid = sys.argv[1], int(sys.argv[2])
no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
port = None
for _ in range(1200):  # up to 120 s for the ranks to load (a loaded CI machine is slow)
    found = re.search(r"on http://127\.0\.0\.1:(\d+)", open(log).read())
    if found:
        port = found.group(1)
        break
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("mpirun ended before the server named its port")
    time.sleep(0.1)
if port is None:
    sys.exit("the server named no port within 120 s")
url = f"http://127.0.0.1:{port}/v1/completions"
body = json.dumps({"prompt": "And it came to pass", "max_tokens": 24, "temperature": 0}).encode()
for attempt in range(50):  # the socket listens before the line is written; retries cover a reset
    try:
        with no_proxy.open(urllib.request.Request(url, body), timeout=60) as r:
            print(json.load(r)["choices"][0]["text"], end="")
            break
    except OSError as e:
        print(f"attempt {attempt}: {e}", file=sys.stderr)
        time.sleep(0.2)
EOF
)
  kill -INT "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  cli=$("$engine" -m data/models/tiny-kjv-q4_0.gguf -p "And it came to pass" -n 24 --temp 0 2>/dev/null)
  if [ -n "$reply" ] && [ "And it came to pass$reply" = "$cli" ]; then ok "server, 2 ranks: completion as the CLI's"
  else
    not_ok "server, 2 ranks: '$reply' is not the CLI's completion; the client said:" "$work/client.err"
    tail -n 12 "$work/server.err" | sed 's/^/#   server: /'
  fi
fi

# ---- Memory: each rank about file / ranks (bench-small's shape, output Q4_0: 12 layers), not
# counting what every process holds before its weights (base_rss_mb: the 102,400-token vocabulary's
# ~65 MB, MPI's ~6 MB).
/usr/bin/python3 tools/make_models.py --preset bench-small --output-type q4_0 --out "$work" >/dev/null
big=$work/bench-small-q4_0-pure.gguf
[ -f "$big" ] || big=$(ls "$work"/bench-small*.gguf | head -n 1)
file_mb=$(( $(stat -c %s "$big") / 1000000 ))
for ranks in 2 3; do
  "${MPIRUN[@]}" -np "$ranks" "$engine" -m "$big" -p "the cat sat" -n 4 -c 256 -t 1 \
    >/dev/null 2>"$work/rss$ranks.err"
  lines=$(grep -c '^pipeline: rank' "$work/rss$ranks.err")
  verdict=$(grep '^pipeline: rank' "$work/rss$ranks.err" | /usr/bin/python3 -c "
import re, sys
sys.path.insert(0, 'tools')
import gguf
tensors = gguf.GGUFReader('$big').tensors.values()
ranks, file_mb = $ranks, $file_mb
share = file_mb / ranks
fine = True
weights = []
grown = []
for line in sys.stdin:
    field = lambda name: float(re.search(name + r'=([0-9.]+)', line).group(1))
    rank = int(re.search(r'rank (\d+) of', line).group(1))
    first, last = map(int, re.search(r'layers=(\d+)-(\d+)', line).groups())
    # While a matrix is packed both its copies are in memory: the rank's largest, once more.
    # Rank 0 reads a row of token_embd per token, not the whole of it.
    mine = [t.nbytes for t in tensors if re.match(r'blk\.(\d+)\.', t.name) and
            first <= int(t.name.split('.')[1]) <= last or
            (rank == ranks - 1 and t.name.startswith('output'))]
    embd = sum(t.nbytes for t in tensors if t.name.startswith('token_embd')) if rank == 0 else 0
    weights.append(field('weights_mb'))
    grown.append(field('peak_rss_mb') - field('base_rss_mb'))
    # Its weights (about its share), its largest matrix again, and its activations, MPI's
    # buffers and heap (6-19 MB here, 24 allowed): a sanity bound on what it holds.
    held = weights[-1] - embd / 1e6 + max(mine) / 1e6
    fine = fine and weights[-1] <= 1.25 * share and grown[-1] <= held + 24
fine = fine and abs(sum(weights) - file_mb) <= 0.05 * file_mb
print(('ok' if fine else 'bad') + ': weights_mb ' + ' '.join(f'{w:.1f}' for w in weights) +
      ', grown past the vocabulary and MPI ' + ' '.join(f'{g:.1f}' for g in grown) +
      f' (file / ranks {share:.1f})')
")
  if [ "$lines" -eq "$ranks" ] && [ "${verdict%%:*}" = ok ]; then ok "memory, $ranks ranks${verdict#ok}"
  else not_ok "memory, $ranks ranks${verdict#bad}" "$work/rss$ranks.err"; fi
done

# ---- Failures: each ends every rank, non-zero, with the message, in under LIMIT seconds.
fails_with() {  # fails_with NAME PATTERN LOG EXIT_STATUS SECONDS
  if [ "$4" -ne 0 ] && [ "$4" -ne 124 ] && [ "$5" -lt "$LIMIT" ] && grep -qE "$2" "$3"; then
    ok "$1: ends every rank in ${5} s with '$(grep -m1 -oE "$2.*" "$3" | head -n 1 | cut -c 1-90)'"
  else
    not_ok "$1: exit $4 after $5 s, or no '$2'" "$3"
  fi
}
rank_pid() {  # rank_pid R: the pid of rank R of this test's job
  grep -l "OMPI_COMM_WORLD_RANK=$1" /proc/[0-9]*/environ 2>/dev/null | while read -r f; do
    p=${f#/proc/}; p=${p%/environ}
    [ "$(readlink "/proc/$p/exe")" = "$(readlink -f "$engine")" ] && echo "$p"
  done | head -n 1
}
m=data/models/tiny-kjv-q4_0.gguf
start=$SECONDS
"${MPIRUN[@]}" -np 1 "$engine" -m "$m" -p hi -t 1 : -np 1 "$engine" -m "$work/missing.gguf" -p hi \
  -t 1 >/dev/null 2>"$work/missing.err"
fails_with "file missing on rank 1" "error: .*missing.gguf" "$work/missing.err" $? $((SECONDS - start))
for how in KILL STOP; do  # a rank that dies; one that stops answering (rank 0 waits 2 s)
  start=$SECONDS
  "${MPIRUN[@]}" -x ENGINE_PIPELINE_TIMEOUT=2 -np 2 "$engine" -m "$m" -p hi -n 1000000 -c 64 -t 1 \
    >/dev/null 2>"$work/$how.err" &
  job=$!
  pid=""
  for _ in $(seq 100); do pid=$(rank_pid 1); [ -n "$pid" ] && break; sleep 0.1; done
  sleep 1
  [ -n "$pid" ] && kill "-$how" "$pid"
  wait "$job"
  status=$?
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  if [ "$how" = KILL ]; then
    fails_with "rank 1 killed" "exited on signal|killed|Killed" "$work/$how.err" $status $((SECONDS - start))
  else
    fails_with "rank 1 stalled" "error: pipeline rank 0 of 2: waited 2 s .*stalled" "$work/$how.err" $status $((SECONDS - start))
  fi
done
start=$SECONDS
"${MPIRUN[@]}" -np 3 "$engine" -m data/models/tiny-llama-f32.gguf -p hi -t 1 >/dev/null 2>"$work/ranks.err"
status=$?
if [ "$(grep -c '^error:' "$work/ranks.err")" -eq 1 ]; then
  fails_with "3 ranks, 2 layers" "error: .*3 ranks for 2 layers" "$work/ranks.err" $status $((SECONDS - start))
else not_ok "3 ranks, 2 layers: not one error line" "$work/ranks.err"; fi
start=$SECONDS
"${MPIRUN[@]}" -x ENGINE_PIPELINE_TIMEOUT=soon -np 2 "$engine" -m "$m" -p hi -t 1 >/dev/null 2>"$work/timeout.err"
fails_with "ENGINE_PIPELINE_TIMEOUT=soon" "error: .*ENGINE_PIPELINE_TIMEOUT='soon'" "$work/timeout.err" $? $((SECONDS - start))

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
