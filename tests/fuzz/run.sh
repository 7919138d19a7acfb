#!/usr/bin/env bash
# run.sh SECONDS TARGET...: runs each libFuzzer target in build/fuzz/ for SECONDS on its corpus,
# one after the other, and prints one line per target: its executions, or where its finding is.
# Exits 1 when any target found something (a crash, a sanitizer report, a leak, a timeout, an
# input that used more than the memory limits).
set -uo pipefail
seconds=$1
shift
dir=build/fuzz
mkdir -p "$dir/findings" "$dir/logs"

# 2 GB: a fuzzed file that makes the engine allocate far past its own size is a finding.
memory_mb=2048
# No input of these targets should take seconds (the 1 MB tokenizer tests take 0.3 s).
timeout_s=10

failed=0
for target in "$@"; do
  log="$dir/logs/$target.log"
  options=(-max_total_time="$seconds" -rss_limit_mb=$memory_mb -malloc_limit_mb=$memory_mb
    -timeout=$timeout_s -print_final_stats=1 -artifact_prefix="$dir/findings/$target-")
  # The loaders warn on stderr (e.g. an unknown pre-tokenizer): libFuzzer closes the target's
  # stderr and keeps its own output and the sanitizers' reports.
  [[ $target == gguf_engine ]] && options+=(-close_fd_mask=2)
  started=$(date +%s)
  "$dir/fuzz_$target" "${options[@]}" "$dir/corpus/$target" >"$log" 2>&1
  status=$?
  elapsed=$(($(date +%s) - started))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ $status -eq 0 ]]; then
    echo "fuzz $target: ${execs:-?} executions in $elapsed s, no finding"
  else
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)/\1/p' "$log" | tail -1)
    echo "fuzz $target: FINDING after ${execs:-?} executions (exit $status): ${artifact:-see $log}"
    grep -m3 -E 'ERROR: |runtime error|fuzz finding' "$log" | sed 's/^/    /'
  fi
done
exit $failed
