#!/usr/bin/env bash
# Command-line checks for one stage's engine: bad input of every kind gets one "error:" line on
# stderr and a plain non-zero exit (no crash, no hang); good input gives the documented output.
# Prints one line per failure, then "PASSED FAILED" as its last line.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=$1
engine="build/$stage/engine"
model=data/models/tiny-llama-f32.gguf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout_s=60
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL [$stage] $*"; }

# expect_error NAME ARGS...: exit 1..123, one stderr line starting "error:", nothing crashed.
expect_error() {
  local name=$1
  shift
  timeout "$timeout_s" "$engine" "$@" >"$work/out" 2>"$work/err"
  local rc=$? lines
  lines=$(wc -l <"$work/err")
  if [ "$rc" -ge 1 ] && [ "$rc" -lt 124 ] && [ "$lines" -eq 1 ] && grep -q '^error: ' "$work/err"; then
    ok
  else
    bad "$name: rc=$rc, stderr: $(head -c 300 "$work/err")"
  fi
}

# expect_ok NAME ARGS...: exit 0.
expect_ok() {
  local name=$1
  shift
  if timeout "$timeout_s" "$engine" "$@" >"$work/out" 2>"$work/err"; then
    ok
  else
    bad "$name: rc=$?, stderr: $(head -c 300 "$work/err")"
  fi
}

/usr/bin/python3 tests/cli/make_bad_inputs.py "$work/bad" "$model"
for f in "$work"/bad/*.gguf; do
  expect_error "$(basename "$f")" -m "$f" -p hi -n 1
  grep -q "$(basename "$f")" "$work/err" || bad "$(basename "$f"): message does not name the file"
done
expect_error missing-file -m "$work/no-such-file.gguf" -p hi
expect_error directory -m "$work" -p hi
expect_error no-model -p hi
expect_error unknown-flag -m "$model" --frobnicate
expect_error missing-value -m "$model" -n
expect_error bad-n -m "$model" -n abc
expect_error bad-threads -m "$model" -t 0
expect_error bad-ctx -m "$model" -c -5
expect_error bad-temp -m "$model" --temp -1
expect_error bad-top-p -m "$model" --top-p 1.5
expect_error bad-top-k -m "$model" --top-k x
expect_error bad-seed -m "$model" -s 12abc
expect_error missing-prompt-file -m "$model" -f "$work/none.txt"
expect_error prompt-too-long -m "$model" -c 4 -p "the the the the the the the the the the"
expect_error bad-chat-template -m "$model" --chat -p hi --chat-template nonsense

# A NaN weight must stop the run, whatever type the matrices have (Q4_0 quantizes activations).
/usr/bin/python3 tests/cli/make_nan_models.py "$work/nan" data/models/tiny-llama-f32.gguf \
  data/models/tiny-llama-q4_0.gguf
for f in "$work"/nan/*.gguf; do
  expect_error "$(basename "$f")" -m "$f" -p "the cat" -n 4 --temp 0
  grep -q 'non-finite logit' "$work/err" || bad "$(basename "$f"): $(head -c 200 "$work/err")"
done

# Files that are not regular files: a FIFO would block, /dev/zero never ends, a directory is empty.
mkfifo "$work/fifo"
expect_error fifo-model -m "$work/fifo" -p hi
expect_error fifo-prompt -m "$model" -f "$work/fifo"
expect_error directory-prompt -m "$model" -f "$work"
expect_error endless-prompt -m "$model" -f /dev/zero
truncate -s 65M "$work/huge.txt"
expect_error huge-prompt -m "$model" -f "$work/huge.txt"
grep -q 'at most 67108864' "$work/err" || bad "huge-prompt: $(head -c 200 "$work/err")"
expect_error top-p-zero -m "$model" --top-p 0
grep -qF '(0, 1]' "$work/err" || bad "top-p-zero: $(head -c 200 "$work/err")"
expect_error top-p-large -m "$model" --top-p 1.5
grep -qF '(0, 1]' "$work/err" || bad "top-p-large: $(head -c 200 "$work/err")"

expect_ok help -h
grep -q -- '--dump-logits' "$work/out" || bad "help: no --dump-logits in --help"
expect_ok generate -m "$model" -p "the cat" -n 8 --temp 0
stats_re='^stats: load_ms=[0-9.]+ prompt_tokens=[0-9]+ prefill_tok_s=[0-9.]+ gen_tokens=[0-9]+ decode_tok_s=[0-9.]+ threads=[0-9]+ peak_rss_mb=[0-9.]+$'
grep -Eq "$stats_re" "$work/err" && ok || bad "stats line: $(tail -n 1 "$work/err")"
expect_ok dump-logits -m "$model" -p "the cat" --dump-logits "$work/logits.f32"
n_vocab=$(awk '$1 == "n_vocab" {print $2}' data/golden/tiny-llama-f32.txt 2>/dev/null)
size=$(stat -c %s "$work/logits.f32" 2>/dev/null || echo 0)
[ -n "$n_vocab" ] && [ "$size" -eq $((n_vocab * 4)) ] && ok || bad "dump-logits: $size bytes for n_vocab=$n_vocab"
expect_ok tokenize -m "$model" -p "the cat" --tokenize
grep -Eq '^[0-9]+( [0-9]+)*$' "$work/out" && ok || bad "tokenize output: $(head -c 200 "$work/out")"
# The project's trained model (data/README.md) speaks KJV English, greedily the same in every stage.
expect_ok kjv-greedy -m data/models/tiny-kjv-f32.gguf -p "And it came to pass" -n 12 --temp 0
grep -q '^And it came to pass, when the LORD' "$work/out" && ok || bad "kjv greedy: $(head -c 200 "$work/out")"
# stats_field NAME: a field of the stats line in $work/err.
stats_field() { sed -nE "s/^stats: .*$1=([0-9.]+).*/\1/p" "$work/err"; }
# -n -1 stops with the context, even where a ring cache could slide on for ever.
expect_ok until-end -m "$model" -p "the cat" -c 24 -n -1 --temp 0
[ $(($(stats_field prompt_tokens) + $(stats_field gen_tokens))) -le 25 ] && ok ||
  bad "until-end: $(tail -n 2 "$work/err")"
# More threads than CPUs: a warning, and as many threads as CPUs.
expect_ok many-threads -m "$model" -p "the cat" -n 2 -t 1000
[ "$(stats_field threads)" -le "$(nproc)" ] && ok || bad "many-threads: $(tail -n 2 "$work/err")"
# Memory follows the file: rows 2^20 wide must not make 512-token scratch buffers (4 GB).
/usr/bin/python3 tools/make_models.py --preset wide-ffn --output-type q4_0 --out "$work" >/dev/null
expect_ok wide-rows -m "$work/wide-ffn-q4_0-pure.gguf" -p "the cat" -n 2
rss=$(stats_field peak_rss_mb)
[ "${rss%.*}" -lt 1024 ] && ok || bad "wide-rows: peak RSS ${rss} MB for a 61 MB file"
# --chat: empty lines before the first turn do not make it a later turn (no BOS, no system).
chat() { printf "$1" | timeout "$timeout_s" "$engine" -m "$model" --chat --chat-template \
  deepseek-llm --system "Be brief." -n 6 --temp 0 2>/dev/null | sed 's/> //g'; }
[ "$(chat 'the cat\n')" = "$(chat '\n\nthe cat\n')" ] && ok || bad "chat: an empty first line changes the reply"

vocab=../shared/vocab/ggml-vocab-deepseek-llm.gguf
if [ -f "$vocab" ]; then
  expect_ok tokenize-real-vocab -m "$vocab" -p "Hello world" --tokenize
else
  echo "SKIPPED [$stage] tokenize-real-vocab: ../shared is not present" >&2
fi
echo "$pass $fail"
