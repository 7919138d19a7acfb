// signal_test.mjs: a signal while a stream is in flight (tests/server/run.sh runs this).
//
//   node tests/server/signal_test.mjs --port P --pid PID [--signal SIGINT]
//
// Opens a long streaming completion on the server at 127.0.0.1:P, sends the signal to PID once
// the first chunk came, and checks that the stream then ends (not hangs) as a whole response:
// its last chunk has a finish_reason, then data: [DONE]. run.sh checks the server's exit status.
// Prints `ok - ...` / `not ok - ...: reason` lines, then `N passed, M failed`.
const argv = process.argv.slice(2);
const args = {};
for (let i = 0; i + 1 < argv.length; i += 2) args[argv[i].replace(/^--/, '')] = argv[i + 1];
if (!args.port || !args.pid) {
  console.error('usage: node signal_test.mjs --port P --pid PID [--signal SIGINT]');
  process.exit(2);
}
const signal = args.signal || 'SIGINT';
const name = `${signal} with a stream in flight: the stream ends with a finish_reason and [DONE]`;
const MAX_TOKENS = 500;

let passed = 0;
let failed = 0;
function report(n, error) {
  if (error === undefined) {
    passed++;
    console.log(`ok - ${n}`);
  } else {
    failed++;
    console.log(`not ok - ${n}: ${String(error && error.message ? error.message : error).replace(/\s+/g, ' ')}`);
  }
}

async function main() {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 15000);
  const res = await fetch(`http://127.0.0.1:${Number(args.port)}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'And it came to pass', max_tokens: MAX_TOKENS, temperature: 0, stream: true }),
    signal: ac.signal,
  });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let signalled = false;
  let done = false;
  const events = [];
  try {
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      buf += decoder.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!line.startsWith('data: ')) continue;
        if (line === 'data: [DONE]') done = true;
        else events.push(JSON.parse(line.slice(6)));
      }
      if (!signalled && events.length > 0) {
        signalled = true;
        process.kill(Number(args.pid), signal);
      }
    }
  } catch (e) {
    throw new Error(`the stream broke after ${events.length} chunks (${ac.signal.aborted ? 'no end within 15 s' : e.message})`);
  } finally {
    clearTimeout(timer);
  }
  if (!signalled) throw new Error('the stream ended before its first chunk');
  if (!done) throw new Error(`the stream ended after ${events.length} chunks without data: [DONE]`);
  const last = events[events.length - 1];
  const fr = last && last.choices && last.choices[0].finish_reason;
  if (fr !== 'stop' && fr !== 'length') throw new Error(`the last chunk's finish_reason is ${JSON.stringify(fr)}`);
  const n = last.usage ? last.usage.completion_tokens : -1;
  return `${events.length} chunks, finish_reason ${fr}, ${n} of ${MAX_TOKENS} tokens`;
}

try {
  report(`${name} (${await main()})`);
} catch (e) {
  report(name, e);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
