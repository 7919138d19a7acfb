#!/usr/bin/env bash
# tests/server/run.sh STAGE: the server's tests (make test runs `bash tests/server/run.sh STAGE`).
#
# Starts build/STAGE/server twice on free 127.0.0.1 ports (the main one: --parallel 4 -c 512; a
# keyed one: --api-key secret --parallel 1 --max-queue 1 -c 512), runs api_test.mjs (the OpenAI
# client against both) and, when it exists, page_test.mjs (the chat page in headless Chromium),
# then checks that a second server on a port in use exits with one line, that SIGTERM stops each
# server with exit 0, and that SIGINT with a stream in flight ends the stream and the server
# (signal_test.mjs on a third server). Logs go to build/server/.
# Needs node >= 18 and npm (Debian's nodejs and npm packages, or nodesource's nodejs); the node
# modules come from `npm ci` when tests/server/node_modules is missing.
# Prints `ok - ...` / `not ok - ...` lines, and last `N passed, M failed`; exit 0 only when all
# passed. MODEL=file.gguf overrides the model (default data/models/tiny-kjv-q4_0.gguf).
set -u

STAGE="${1:-}"
if [[ -z "$STAGE" ]]; then
  echo "usage: bash tests/server/run.sh STAGE   (e.g. 23_batched_sequences)" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
HERE=tests/server
SERVER="build/$STAGE/server"
ENGINE="build/$STAGE/engine"
MODEL="${MODEL:-data/models/tiny-kjv-q4_0.gguf}"
LOGS=build/server

die() {
  echo "error: $*" >&2
  echo "0 passed, 1 failed"
  exit 1
}

for f in "$SERVER" "$ENGINE"; do
  [[ -x "$f" ]] || die "$f is missing: build it first (make $SERVER $ENGINE)"
done
[[ -f "$MODEL" ]] || die "the model $MODEL is missing (make models)"
command -v node >/dev/null 2>&1 ||
  die "node is missing: install Node.js 18 or later (apt-get install nodejs npm, or nodesource's nodejs)"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
(( NODE_MAJOR >= 18 )) || die "node $(node --version 2>/dev/null) is too old: the tests need Node.js 18 or later"
if [[ ! -d "$HERE/node_modules/openai" ]]; then
  command -v npm >/dev/null 2>&1 ||
    die "npm is missing (apt-get install npm, or nodesource's nodejs): it installs $HERE/node_modules"
  echo "# npm ci in $HERE"
  (cd "$HERE" && npm ci --ignore-scripts --no-audit --no-fund) >&2 || die "npm ci failed in $HERE"
fi
mkdir -p "$LOGS"

PASSED=0
FAILED=0
ok() {
  PASSED=$((PASSED + 1))
  echo "ok - $1"
}
not_ok() {
  FAILED=$((FAILED + 1))
  echo "not ok - $1"
}

PIDS=()
# On exit: SIGTERM to what this script started and still runs, SIGKILL to what outlives 2 s.
cleanup() {
  local pid i left
  for pid in "${PIDS[@]}"; do
    running "$pid" && kill -TERM "$pid" 2>/dev/null
  done
  for ((i = 0; i < 20; i++)); do
    left=0
    for pid in "${PIDS[@]}"; do
      running "$pid" && left=1
    done
    ((left)) || return 0
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do
    running "$pid" && kill -KILL "$pid" 2>/dev/null
  done
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A child of this script that has not exited (a zombie, exited but not waited for, counts as
# exited; a reused pid, another process's child, is not ours).
running() {
  local fields
  [[ -r "/proc/$1/stat" ]] || return 1
  fields="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]) ([0-9]+) .*/\1 \2/' "/proc/$1/stat" 2>/dev/null)"
  [[ "${fields#* }" == "$$" && "${fields%% *}" != Z && "${fields%% *}" != X ]]
}

# Free ports on 127.0.0.1, as the kernel gives them for port 0 (all held until all are known).
free_ports() {
  node -e '
    const net = require("net");
    const n = Number(process.argv[1]);
    const servers = [];
    for (let i = 0; i < n; i++) {
      const s = net.createServer();
      s.listen(0, "127.0.0.1", () => {
        servers.push(s);
        if (servers.length === n) {
          console.log(servers.map((x) => x.address().port).join(" "));
          servers.forEach((x) => x.close());
        }
      });
    }' "$1"
}

# start NAME PORT FLAGS...: starts a server in the background; its pid in LAST_PID.
start() {
  local name="$1" port="$2"
  shift 2
  "$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" "$@" >"$LOGS/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_health NAME PORT PID: polls /health for up to 20 s while the process lives.
wait_health() {
  local name="$1" port="$2" pid="$3"
  if node -e '
      const [port, pid] = process.argv.slice(1).map(Number);
      const t0 = Date.now();
      const alive = () => { try { process.kill(pid, 0); return true; } catch (e) { return false; } };
      (async () => {
        while (Date.now() - t0 < 20000 && alive()) {
          try {
            const r = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) });
            if (r.status === 200) process.exit(0);
          } catch (e) {}
          await new Promise((r) => setTimeout(r, 100));
        }
        process.exit(1);
      })();' "$port" "$pid" && running "$pid"; then
    ok "$name server up on 127.0.0.1:$port (/health)"
    return 0
  fi
  if running "$pid"; then
    not_ok "$name server up on 127.0.0.1:$port: no /health answer within 20 s; its log ($LOGS/$name.log):"
  else
    not_ok "$name server up on 127.0.0.1:$port: it exited before answering /health; its log ($LOGS/$name.log):"
  fi
  tail -n 5 "$LOGS/$name.log" | sed 's/^/#   /'
  return 1
}

# wait_exit PID SECONDS: the exit status in EXIT_RC once the process ended, or 1 past SECONDS.
wait_exit() {
  local pid="$1" tenths=$(($2 * 10)) i
  for ((i = 0; i < tenths; i++)); do
    running "$pid" || break
    sleep 0.1
  done
  if running "$pid"; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    EXIT_RC=timeout
    return 1
  fi
  wait "$pid"
  EXIT_RC=$?
  return 0
}

# run_script NAME LIMIT_S CMD...: runs a test script; adds its `N passed, M failed` to the sums.
run_script() {
  local name="$1" limit="$2" out="$LOGS/$1.out" rc summary p f
  shift 2
  # In the background, so that a signal to this script is handled at once (cleanup stops the
  # script through its `timeout`); tail shows its output as it comes.
  : >"$out"
  timeout -k 5 "$limit" "$@" >"$out" 2>&1 &
  local cpid=$!
  PIDS+=("$cpid")
  tail -n +1 -f --pid="$cpid" "$out" &
  local tpid=$!
  wait "$cpid"
  rc=$?
  wait "$tpid"
  summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)"
  if [[ -z "$summary" ]]; then
    if [[ "$rc" == 124 || "$rc" == 137 ]]; then
      not_ok "$name: no summary line: stopped past its $limit s"
    else
      not_ok "$name: no summary line (exit status $rc)"
    fi
    return
  fi
  p="${summary%% passed*}"
  f="${summary#*passed, }"
  f="${f%% failed}"
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
  if [[ "$rc" != 0 && "$f" == 0 ]]; then
    not_ok "$name: exit status $rc with no failed check"
  fi
}

read -r PORT KEYED_PORT SIGNAL_PORT <<<"$(free_ports 3)"
[[ -n "${SIGNAL_PORT:-}" ]] || die "could not pick free ports on 127.0.0.1"
echo "# $SERVER on $MODEL; ports $PORT (main), $KEYED_PORT (keyed), $SIGNAL_PORT (signal); logs in $LOGS/"

start main "$PORT" --parallel 4 -c 512
MAIN_PID=$LAST_PID
start keyed "$KEYED_PORT" --api-key secret --parallel 1 --max-queue 1 -c 512
KEYED_PID=$LAST_PID
MAIN_UP=0
KEYED_UP=0
wait_health main "$PORT" "$MAIN_PID" && MAIN_UP=1
wait_health keyed "$KEYED_PORT" "$KEYED_PID" && KEYED_UP=1

if ((MAIN_UP && KEYED_UP)); then
  run_script api_test 240 node "$HERE/api_test.mjs" --port "$PORT" --keyed-port "$KEYED_PORT" \
    --pid "$MAIN_PID" --engine "$ENGINE" --model "$MODEL"
else
  not_ok "api_test.mjs: not run (a server is not up)"
fi

if [[ -f "$HERE/page_test.mjs" ]]; then
  if ((MAIN_UP)); then
    run_script page_test 180 node "$HERE/page_test.mjs" --url "http://127.0.0.1:$PORT" --out "$LOGS/page.png"
  else
    not_ok "page_test.mjs: not run (the main server is not up)"
  fi
else
  echo "# $HERE/page_test.mjs does not exist yet: the chat page is not tested"
fi

# A port in use: a second server refuses it with one line, instead of sharing its connections.
if ((MAIN_UP)); then
  "$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" >"$LOGS/taken.log" 2>&1 &
  taken_pid=$!
  PIDS+=("$taken_pid")
  if wait_exit "$taken_pid" 20 && [[ "$EXIT_RC" != 0 ]] &&
    grep -q "cannot listen on 127.0.0.1:$PORT" "$LOGS/taken.log"; then
    ok "a second server on port $PORT exits with 'cannot listen'"
  else
    not_ok "a second server on port $PORT: exit status $EXIT_RC, no 'cannot listen' line"
    tail -n 3 "$LOGS/taken.log" | sed 's/^/#   /'
  fi
fi

# SIGTERM: each server stops with exit 0 within a few seconds.
for which in main keyed; do
  if [[ "$which" == main ]]; then pid=$MAIN_PID; else pid=$KEYED_PID; fi
  if ! running "$pid"; then
    wait "$pid"
    not_ok "server exits 0 on SIGTERM ($which): it had already exited (status $?) before the signal"
    continue
  fi
  kill -TERM "$pid"
  if wait_exit "$pid" 10 && [[ "$EXIT_RC" == 0 ]]; then
    ok "server exits 0 on SIGTERM ($which)"
  else
    not_ok "server exits 0 on SIGTERM ($which): exit status $EXIT_RC"
    tail -n 3 "$LOGS/$which.log" | sed 's/^/#   /'
  fi
done

# SIGINT with a stream in flight, on a server of its own.
start signal "$SIGNAL_PORT" --parallel 4 -c 512
SIGNAL_PID=$LAST_PID
if wait_health signal "$SIGNAL_PORT" "$SIGNAL_PID"; then
  run_script signal_test 30 node "$HERE/signal_test.mjs" --port "$SIGNAL_PORT" --pid "$SIGNAL_PID" --signal SIGINT
  if wait_exit "$SIGNAL_PID" 10 && [[ "$EXIT_RC" == 0 ]]; then
    ok "server exits 0 on SIGINT with a stream in flight"
  else
    not_ok "server exits 0 on SIGINT with a stream in flight: exit status $EXIT_RC"
    tail -n 3 "$LOGS/signal.log" | sed 's/^/#   /'
  fi
fi

echo "$PASSED passed, $FAILED failed"
((FAILED == 0 && PASSED > 0))
