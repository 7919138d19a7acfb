#!/usr/bin/env bash
# Runs the shared Catch2 suite and the CLI checks for each stage given, then prints one line:
#   N passed, M failed
# where N and M count test cases: every Catch2 test case of every stage's suite, plus every
# command-line check in tests/cli_test.sh, once per stage. A stage with SIMD kernels is also run
# as NN-scalar (its scalar fallback), NN-check (its native SIMD path) and NN-avx2 (the AVX2 path),
# the last two checked against the scalar kernels (bit for bit from stage 09 on); a stage with AMX tiles also as
# NN-noamx (the AVX-512 path they fall back to, checked the same way). The long run (a hidden test case,
# [long]) counts once, for the last stage.
# With --python first (make test), the Python module's pytest suite (tests/python, against
# build/python) runs last and its test cases count too, and so do the server's checks
# (tests/server/run.sh) for each stage that builds a server, and the pipeline's under mpirun
# (tests/mpi/run.sh) for each stage with pipeline.h.
#
# The stages run side by side, TEST_JOBS at a time (default: one per core): each suite is one
# thread for most of its run, so two at once halve the wall time on 2 cores. The server and mpi
# checks, which mostly wait on sockets and child processes, run one at a time beside them (their
# ports and ranks never meet another stage's). Each stage's lines are printed in the order the
# stages were given, as soon as they and every stage before them are done.
set -uo pipefail
cd "$(dirname "$0")/.."
python_suite=0
if [ "${1:-}" = "--python" ]; then
  python_suite=1
  shift
fi
jobs=${TEST_JOBS:-$(nproc)}
# A suite's OpenMP threads poll at a barrier this many times before they sleep, as the engine's
# (common/main.cpp): libgomp's default, milliseconds of polling, would take the core that the
# stage running beside it needs.
spin_count=1000
runs=build/test-runs
rm -rf "$runs"
mkdir -p "$runs"

# counted NAME SCRIPT LOG FAILURE_PATTERN ARGS...: runs a checker that ends with "N passed, M
# failed", prints its counts as "NAME P passed, F failed" and on failure its failed checks and
# where its log is; its last line is "P F" for the caller.
counted() {
  local name=$1 script=$2 log=$3 pattern=$4
  shift 4
  bash "$script" "$@" >"$log" 2>&1
  local line pass fail
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  pass=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"${line:-0 passed}")
  fail=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"${line:-0 passed, 1 failed}")
  [ -z "$line" ] && fail=1  # the checker stopped before its summary
  echo "$name $pass passed, $fail failed"
  if [ "$fail" -ne 0 ]; then
    grep -E "$pattern" "$log" | head -n 20 | cut -c 1-600
    echo "$name: whole log: $log"
  fi
  echo "$pass $fail"
}

# suite_and_cli STAGE: the stage's Catch2 suite, then its engine's command-line checks. Prints
# what it found; its last line is "PASSED FAILED".
suite_and_cli() {
  local stage=$1 log="build/$1/tests.log"
  GOMP_SPINCOUNT=$spin_count "build/$stage/tests" >"$log" 2>&1
  local status=$? pass=0 fail=0 line skipped
  if line=$(grep -E '^All tests passed' "$log"); then
    pass=$(sed -E 's/.* in ([0-9]+) test case.*/\1/' <<<"$line")
  elif line=$(grep -E '^test cases:' "$log"); then
    pass=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$line")
    fail=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$line")
    grep -q 'passed' <<<"$line" || pass=0
  else
    fail=1  # the suite crashed before its summary
  fi
  [ "$status" -ne 0 ] && [ "$fail" -eq 0 ] && fail=1
  skipped=$(grep -c 'SKIPPED:' "$log")
  echo "$stage: suite $pass passed, $fail failed ($skipped skipped for lack of ../shared)"
  if [ "$fail" -ne 0 ]; then
    # Each failure on one line (Catch2's compact reporter: file, line, expression, messages), the
    # first 20; then where the whole log is.
    GOMP_SPINCOUNT=$spin_count "build/$stage/tests" -r compact >"$log.compact" 2>&1
    grep -E ': failed:' "$log.compact" | head -n 20 | cut -c 1-600
    echo "$stage: whole log: $log (one line per failure: $log.compact)"
  fi
  local cpass=0 cfail=0
  if [ -x "build/$stage/engine" ]; then  # build variants (NN-scalar, NN-check, ..) have no engine
    bash tests/cli_test.sh "$stage" >"build/$stage/cli-tests.log" 2>&1
    read -r cpass cfail < <(tail -n 1 "build/$stage/cli-tests.log")
    echo "$stage: cli ${cpass:-0} passed, ${cfail:-1} failed"
    grep -E '^FAIL ' "build/$stage/cli-tests.log" | head -n 20 | cut -c 1-600
  fi
  echo "$((pass + ${cpass:-0})) $((fail + ${cfail:-1}))"
}

# services STAGE: the server's and the pipeline's checks, for a stage that has them. Its last
# line is "PASSED FAILED".
services() {
  local stage=$1 out p f pass=0 fail=0
  if [ -x "build/$stage/server" ]; then
    out=$(counted "$stage: server" tests/server/run.sh "build/$stage/server-tests.log" '^not ok' "$stage")
    sed '$d' <<<"$out"
    read -r p f <<<"$(tail -n 1 <<<"$out")"
    pass=$((pass + p)) fail=$((fail + f))
  fi
  if [ -f "stages/$stage/pipeline.h" ]; then
    out=$(counted "$stage: mpi" tests/mpi/run.sh "build/$stage/mpi-tests.log" '^not ok' "$stage")
    sed '$d' <<<"$out"
    read -r p f <<<"$(tail -n 1 <<<"$out")"
    pass=$((pass + p)) fail=$((fail + f))
  fi
  echo "$pass $fail"
}

# Stage i's output goes to $runs/i.suite (and $runs/i.services); a .done file marks each finished.
stages=("$@")
if [ "$python_suite" -eq 1 ]; then  # make test, not sanitizers: the services, one at a time
  (
    for i in "${!stages[@]}"; do
      services "${stages[$i]}" >"$runs/$i.services" 2>&1
      touch "$runs/$i.services.done"
    done
  ) &
  services_pid=$!
else
  for i in "${!stages[@]}"; do
    echo "0 0" >"$runs/$i.services"
    touch "$runs/$i.services.done"
  done
fi

total_pass=0
total_fail=0
printed=0
# print_finished: prints, in order, every stage whose parts are all done, up to the first that
# is not; the last line of each part (its counts) is added to the totals, not printed.
print_finished() {
  local part p f
  while [ "$printed" -lt "${#stages[@]}" ] && [ -e "$runs/$printed.suite.done" ] &&
    [ -e "$runs/$printed.services.done" ]; do
    for part in suite services; do
      sed '$d' "$runs/$printed.$part"
      read -r p f < <(tail -n 1 "$runs/$printed.$part")
      total_pass=$((total_pass + ${p:-0}))
      total_fail=$((total_fail + ${f:-1}))
    done
    printed=$((printed + 1))
  done
}

for i in "${!stages[@]}"; do
  while [ "$(jobs -rp | grep -cv "^${services_pid:-none}$")" -ge "$jobs" ]; do
    wait -n
    print_finished
  done
  (suite_and_cli "${stages[$i]}" >"$runs/$i.suite" 2>&1; touch "$runs/$i.suite.done") &
done
while [ "$printed" -lt "${#stages[@]}" ]; do
  wait -n || true
  print_finished
  [ -z "$(jobs -rp)" ] && print_finished && break
done
[ "$printed" -lt "${#stages[@]}" ] && { echo "run_all: a stage's checks ended without a result"; total_fail=$((total_fail + 1)); }

# The long run (100,000 tokens through a ring, memory and speed steady): once, on the last
# numbered stage given (it takes ~15 s), alone, after the others.
long_stage=$(printf '%s\n' "$@" | grep -E '^[0-9][0-9]_[a-z0-9_]+$' | tail -n 1)
if [ -n "$long_stage" ]; then
  log="build/$long_stage/tests-long.log"
  if "build/$long_stage/tests" "[long]" >"$log" 2>&1; then
    echo "$long_stage: long run passed"
    total_pass=$((total_pass + 1))
  else
    echo "$long_stage: long run FAILED"
    tail -n 40 "$log"
    total_fail=$((total_fail + 1))
  fi
fi
if [ "$python_suite" -eq 1 ]; then
  log="build/python/pytest.log"
  PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider tests/python \
    >"$log" 2>&1
  summary=$(tail -n 1 "$log")
  ppass=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  pfail=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | awk '{s += $1} END {print s + 0}')
  pskip=$(grep -oE '[0-9]+ skipped' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  [ "$ppass" -eq 0 ] && [ "$pfail" -eq 0 ] && pfail=1  # pytest crashed before its summary
  echo "python: pytest $ppass passed, $pfail failed ($pskip skipped for lack of ../shared)"
  if [ "$pfail" -ne 0 ]; then
    grep -E '^(FAILED|ERROR) ' "$log" | head -n 20 | cut -c 1-600
    echo "python: whole log: $log"
  fi
  total_pass=$((total_pass + ppass))
  total_fail=$((total_fail + pfail))
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
