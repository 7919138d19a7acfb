// api_test.mjs: the server's OpenAI-compatible API, with the official `openai` client and plain
// fetch (tests/server/run.sh starts the servers and runs this).
//
//   node tests/server/api_test.mjs --port P --keyed-port Q --pid PID --engine PATH --model PATH
//                                  [--parallel 4] [--max-queue 64] [--only SECTION,...]
//
// P: a server started with `--parallel 4 -c 512` on MODEL (the default --max-queue), PID its
// process (for its RSS); Q: one started with `--api-key secret --parallel 1 --max-queue 1 -c 512`
// on MODEL. ENGINE: the CLI of the same stage, whose greedy text the server's must equal.
// Sections: basics, completions, chats, stops, errors (both servers), queue (503, aborts, on Q),
// load (8 clients x 20 requests, twice; RSS flat), flood (more requests than P's sequences and
// queue hold).
// Prints `ok - name` or `not ok - name: reason` per check, then `N passed, M failed`; exits 0
// only when all passed. Runs on Node 18 and later (global fetch, no newer APIs); only 127.0.0.1.
// Every wait is bounded (a check: 30 s or its own limit; the whole run: 150 s).
import OpenAI from 'openai';
import { execFile } from 'node:child_process';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

// ---- arguments ----

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--') || i + 1 >= argv.length) {
      console.error(`api_test.mjs: bad argument '${a}'`);
      process.exit(2);
    }
    out[a.slice(2)] = argv[++i];
  }
  for (const k of ['port', 'keyed-port', 'engine', 'model']) {
    if (!out[k]) {
      console.error(`api_test.mjs: missing --${k} (usage: --port P --keyed-port Q --pid PID ` +
        '--engine PATH --model PATH)');
      process.exit(2);
    }
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
const BASE = `http://127.0.0.1:${Number(args.port)}`;
const KBASE = `http://127.0.0.1:${Number(args['keyed-port'])}`;
const KEY = 'secret';
const AUTH = { Authorization: `Bearer ${KEY}` };
const MODEL_ID = basename(args.model);
const CTX = 512;
const RUN_LIMIT_MS = 150000;  // the whole run
const CHECK_LIMIT_MS = 30000; // one check

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'none', maxRetries: 0, timeout: 20000 });
const keyed = new OpenAI({ baseURL: `${KBASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 20000 });

// ---- reporting ----

let passed = 0;
let failed = 0;

function report(name, error) {
  if (error === undefined) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    const reason = String(error && error.message ? error.message : error).replace(/\s+/g, ' ');
    console.log(`not ok - ${name}: ${reason.slice(0, 600)}`);
  }
}

function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
}

const watchdog = setTimeout(() => {
  report('whole run', `still running after ${RUN_LIMIT_MS / 1000} s`);
  finish();
}, RUN_LIMIT_MS);
watchdog.unref();

function withTimeout(promise, ms, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/// Runs one check; a thrown error (or its name's extra text returned) is its result.
async function check(name, fn, ms = CHECK_LIMIT_MS) {
  try {
    const extra = await withTimeout(Promise.resolve().then(fn), ms, 'the check');
    report(typeof extra === 'string' && extra ? `${name} (${extra})` : name);
  } catch (e) {
    report(name, e);
  }
}

class Fail extends Error {}

function assert(cond, message) {
  if (!cond) throw new Fail(message);
}

function eq(got, want, what) {
  if (got !== want) throw new Fail(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();

// ---- helpers ----

function run(file, argv) {
  return new Promise((resolve, reject) => {
    execFile(file, argv, { timeout: 30000, maxBuffer: 1 << 24, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${file} ${argv.join(' ')}: ${err.message} ${stderr.slice(-300)}`));
      else resolve(stdout);
    });
  });
}

/// The CLI's greedy completion of prompt (its stdout less the echoed prompt and the newline).
async function cliCompletion(prompt, n) {
  const out = await run(args.engine, ['-m', args.model, '-p', prompt, '-n', String(n), '--temp', '0', '-c', String(CTX)]);
  assert(out.startsWith(prompt) && out.endsWith('\n'), `unexpected CLI output ${JSON.stringify(out)}`);
  return out.slice(prompt.length, -1);
}

/// The CLI's greedy reply to one user message.
async function cliChat(message, n) {
  const out = await run(args.engine, ['-m', args.model, '--chat', '-p', message, '-n', String(n), '--temp', '0', '-c', String(CTX)]);
  assert(out.endsWith('\n'), `unexpected CLI output ${JSON.stringify(out)}`);
  return out.slice(0, -1);
}

/// A plain request; returns {status, text, json (or undefined)}.
async function request(base, method, path, body, headers = {}, ms = 20000) {
  const init = { method, headers: { ...headers }, signal: AbortSignal.timeout(ms) };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(base + path, init);
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch (e) {
    json = undefined;
  }
  return { status: res.status, text, json, headers: res.headers };
}

const post = (path, body, headers, base = BASE) => request(base, 'POST', path, body, headers);

/// A streaming request read with fetch: the events as they come, [DONE] seen or not, times.
function startStream(base, path, body, headers = {}) {
  const ac = new AbortController();
  const st = {
    status: 0, events: [], done: false, afterDone: false, ended: false, aborted: false,
    error: null, errorBody: '', tStart: now(), tHeaders: 0, tFirst: 0, tEnd: 0,
  };
  let gotHeaders;
  let gotFirst;
  st.headers = new Promise((r) => { gotHeaders = r; });
  st.first = new Promise((r) => { gotFirst = r; });
  let reader = null;
  // Aborting the signal alone may leave a pending read() unsettled (seen with Node 20's fetch
  // when the body had all arrived): cancelling the reader settles it.
  const stop = () => {
    ac.abort();
    if (reader) reader.cancel().catch(() => {});
  };
  st.abort = () => {
    st.aborted = true;
    stop();
  };
  const timer = setTimeout(() => {
    st.error = st.error || new Error('the stream did not end within 30 s');
    stop();
  }, 30000);
  st.finished = (async () => {
    try {
      const res = await fetch(base + path, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ ...body, stream: true }),
        signal: ac.signal,
      });
      st.status = res.status;
      st.tHeaders = now();
      gotHeaders(true);
      if (res.status !== 200) {
        st.errorBody = await res.text();
        st.ended = true;
        return;
      }
      reader = res.body.getReader();
      if (st.aborted) stop();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done || st.aborted) break;
        buf += decoder.decode(value, { stream: true });
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, at);
          buf = buf.slice(at + 2);
          for (const line of event.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const data = line.slice(6);
            if (data === '[DONE]') {
              st.done = true;
            } else {
              if (st.done) st.afterDone = true;
              st.events.push(JSON.parse(data));
            }
            if (!st.tFirst) {
              st.tFirst = now();
              gotFirst(true);
            }
          }
        }
      }
      st.rest = buf;
      st.ended = !st.aborted && !st.error;
    } catch (e) {
      if (!st.aborted || st.error) st.error = st.error || e;
    } finally {
      clearTimeout(timer);
      st.tEnd = now();
      gotHeaders(false);
      gotFirst(false);
    }
  })();
  return st;
}

/// The text of a stream's events (completions: text; chat: delta.content).
function streamText(events, chat) {
  return events.map((e) => (chat ? (e.choices[0].delta.content || '') : e.choices[0].text)).join('');
}

/// Checks a finished fetch stream: 200, ended with [DONE], one id, the finish reason on the last
/// chunk only; returns {text, last}.
function validStream(st, chat, maxTokens) {
  if (st.error) throw new Fail(`the stream failed: ${st.error.message || st.error}`);
  eq(st.status, 200, `status (${st.errorBody.slice(0, 200)})`);
  assert(st.ended && st.done, 'the stream did not end with data: [DONE]');
  assert(!st.afterDone, 'events after [DONE]');
  assert(st.events.length > 0, 'no events');
  const object = chat ? 'chat.completion.chunk' : 'text_completion';
  const id = st.events[0].id;
  assert(typeof id === 'string' && id.length > 0, 'no id');
  st.events.forEach((e, i) => {
    eq(e.object, object, 'object');
    eq(e.id, id, 'every chunk\'s id');
    eq(e.model, MODEL_ID, 'model');
    assert(Array.isArray(e.choices) && e.choices.length === 1, 'choices is not one choice');
    const fr = e.choices[0].finish_reason;
    if (i < st.events.length - 1) eq(fr, null, `finish_reason of chunk ${i}`);
  });
  const last = st.events[st.events.length - 1];
  const fr = last.choices[0].finish_reason;
  assert(fr === 'length' || fr === 'stop', `last finish_reason ${JSON.stringify(fr)}`);
  if (last.usage) {
    const u = last.usage;
    eq(u.total_tokens, u.prompt_tokens + u.completion_tokens, 'usage total_tokens');
    if (maxTokens !== undefined) {
      assert(u.completion_tokens <= maxTokens, `completion_tokens ${u.completion_tokens} > max_tokens ${maxTokens}`);
      if (fr === 'length') eq(u.completion_tokens, maxTokens, 'completion_tokens with finish_reason length');
    }
  }
  if (chat) eq(st.events[0].choices[0].delta.role, 'assistant', 'the first delta\'s role');
  return { text: streamText(st.events, chat), last };
}

function errorShape(r, status, param) {
  eq(r.status, status, `status (body ${r.text.slice(0, 200)})`);
  assert(r.json && typeof r.json === 'object' && r.json.error && typeof r.json.error === 'object',
    `not an error object: ${r.text.slice(0, 200)}`);
  const e = r.json.error;
  assert(typeof e.message === 'string' && e.message.length > 0, 'error.message is not a non-empty string');
  assert(typeof e.type === 'string' && e.type.length > 0, 'error.type is not a non-empty string');
  assert('param' in e && (e.param === null || typeof e.param === 'string'), 'error.param missing');
  assert('code' in e, 'error.code missing');
  if (param !== undefined) eq(e.param, param, 'error.param');
}

function checkUsage(u, promptTokens, maxTokens, finishReason) {
  assert(u && typeof u === 'object', 'no usage');
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) {
    assert(Number.isInteger(u[k]) && u[k] >= 0, `usage.${k} is not a count`);
  }
  eq(u.total_tokens, u.prompt_tokens + u.completion_tokens, 'usage.total_tokens');
  if (promptTokens !== undefined) eq(u.prompt_tokens, promptTokens, 'usage.prompt_tokens');
  assert(u.completion_tokens <= maxTokens, `completion_tokens ${u.completion_tokens} > max_tokens ${maxTokens}`);
  eq(finishReason, u.completion_tokens === maxTokens ? 'length' : 'stop', 'finish_reason');
}

function checkShape(r, chat, maxTokens, promptTokens) {
  assert(typeof r.id === 'string' && r.id.startsWith(chat ? 'chatcmpl-' : 'cmpl-'), `id ${JSON.stringify(r.id)}`);
  eq(r.object, chat ? 'chat.completion' : 'text_completion', 'object');
  assert(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 300,
    `created ${r.created} is not the time now`);
  eq(r.model, MODEL_ID, 'model');
  assert(Array.isArray(r.choices) && r.choices.length === 1, 'choices is not one choice');
  const c = r.choices[0];
  eq(c.index, 0, 'choices[0].index');
  if (chat) {
    eq(c.message && c.message.role, 'assistant', 'message.role');
    assert(typeof c.message.content === 'string', 'message.content is not a string');
  } else {
    assert(typeof c.text === 'string', 'text is not a string');
  }
  checkUsage(r.usage, promptTokens, maxTokens, c.finish_reason);
}

async function promptTokens(text) {
  const r = await post('/tokenize', { content: text, add_special: true, parse_special: true });
  eq(r.status, 200, '/tokenize status');
  return r.json.tokens.length;
}

async function clientStreamText(stream, chat) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert(chunks.length > 0, 'no chunks');
  const text = chunks.map((c) => (chat ? (c.choices[0].delta.content || '') : c.choices[0].text)).join('');
  const fr = chunks[chunks.length - 1].choices[0].finish_reason;
  chunks.slice(0, -1).forEach((c, i) => eq(c.choices[0].finish_reason, null, `finish_reason of chunk ${i}`));
  const ids = new Set(chunks.map((c) => c.id));
  eq(ids.size, 1, 'distinct chunk ids');
  eq(chunks[0].object, chat ? 'chat.completion.chunk' : 'text_completion', 'chunk object');
  return { text, finish: fr, chunks };
}

// ---- the checks ----

const PROMPTS = ['In the beginning', 'And the LORD said unto Moses,'];
const CHAT_MESSAGE = 'Who is the Lord?';
const N_COMPLETION = 32;
const N_CHAT = 24;
const LONG_PROMPT = 'And it came to pass';

async function basics() {
  await check('GET /health', async () => {
    const r = await request(BASE, 'GET', '/health');
    eq(r.status, 200, 'status');
    eq(r.json && r.json.status, 'ok', 'status field');
  });

  await check('GET /v1/models (openai client)', async () => {
    const page = await client.models.list();
    const models = page.data;
    assert(Array.isArray(models) && models.length >= 1, 'no models');
    eq(models[0].id, MODEL_ID, 'data[0].id');
    eq(models[0].object, 'model', 'data[0].object');
    const raw = await request(BASE, 'GET', '/v1/models');
    eq(raw.json.object, 'list', 'object');
  });

  await check('/tokenize + /detokenize round trip', async () => {
    const text = 'In the beginning God created the heaven and the earth.\nAnd the earth was without form';
    const t = await post('/tokenize', { content: text });
    eq(t.status, 200, '/tokenize status');
    const tokens = t.json.tokens;
    assert(Array.isArray(tokens) && tokens.length > 0 && tokens.every(Number.isInteger), 'tokens is not an array of ids');
    const d = await post('/detokenize', { tokens });
    eq(d.status, 200, '/detokenize status');
    eq(d.json.content, text, 'detokenized text');
    const s = await post('/tokenize', { content: text, add_special: true });
    eq(s.json.tokens.length, tokens.length + 1, 'tokens with add_special (a BOS first)');
    eq(JSON.stringify(s.json.tokens.slice(1)), JSON.stringify(tokens), 'tokens after the BOS');
    return `${tokens.length} tokens`;
  });
}

async function completions() {
  for (const prompt of PROMPTS) {
    const tag = JSON.stringify(prompt);
    let expected;
    let whole;
    let nPrompt;
    await check(`completion ${tag} (non-streaming) equals the CLI's greedy text`, async () => {
      expected = await cliCompletion(prompt, N_COMPLETION);
      nPrompt = await promptTokens(prompt);
      const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N_COMPLETION, temperature: 0 });
      whole = r;
      eq(r.choices[0].text, expected, 'text');
    });
    await check(`completion ${tag} response shape and usage`, async () => {
      assert(whole, 'no response');
      checkShape(whole, false, N_COMPLETION, nPrompt);
      eq(whole.choices[0].finish_reason, 'length', 'finish_reason');
    });
    await check(`completion ${tag} (streaming, openai client) equals the CLI and the non-streaming text`, async () => {
      assert(expected !== undefined, 'no CLI text');
      const stream = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N_COMPLETION, temperature: 0, stream: true });
      const { text, finish, chunks } = await clientStreamText(stream, false);
      eq(text, expected, 'joined text');
      eq(text, whole.choices[0].text, 'joined text vs non-streaming');
      eq(finish, 'length', 'last finish_reason');
      const last = chunks[chunks.length - 1];
      if (last.usage) checkUsage(last.usage, nPrompt, N_COMPLETION, finish);
      return `${chunks.length} chunks`;
    });
    await check(`completion ${tag} (streaming, raw SSE) ends with [DONE] and equals the CLI`, async () => {
      const st = startStream(BASE, '/v1/completions', { prompt, max_tokens: N_COMPLETION, temperature: 0 });
      await st.finished;
      const { text } = validStream(st, false, N_COMPLETION);
      eq(text, expected, 'joined text');
      eq(st.rest, '', 'bytes after the last event');
    });
  }
}

async function chats() {
  const messages = [{ role: 'user', content: CHAT_MESSAGE }];
  let expected;
  let whole;
  await check('chat (non-streaming) equals the CLI --chat greedy reply', async () => {
    expected = await cliChat(CHAT_MESSAGE, N_CHAT);
    whole = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: N_CHAT, temperature: 0 });
    eq(whole.choices[0].message.content, expected, 'content');
  });
  await check('chat response shape and usage', async () => {
    assert(whole, 'no response');
    checkShape(whole, true, N_CHAT);
    assert(whole.usage.prompt_tokens > (await promptTokens(CHAT_MESSAGE)), 'prompt_tokens does not count the template');
    eq(whole.choices[0].finish_reason, 'length', 'finish_reason');
  });
  await check('chat (streaming, openai client) equals the CLI and the non-streaming reply', async () => {
    assert(expected !== undefined, 'no CLI text');
    const stream = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: N_CHAT, temperature: 0, stream: true });
    const { text, finish, chunks } = await clientStreamText(stream, true);
    eq(chunks[0].choices[0].delta.role, 'assistant', 'first delta role');
    eq(text, expected, 'joined content');
    eq(text, whole.choices[0].message.content, 'joined content vs non-streaming');
    eq(finish, 'length', 'last finish_reason');
    return `${chunks.length} chunks`;
  });
  await check('chat (streaming, raw SSE) ends with [DONE]', async () => {
    const st = startStream(BASE, '/v1/chat/completions', { messages, max_tokens: N_CHAT, temperature: 0 });
    await st.finished;
    const { text } = validStream(st, true, N_CHAT);
    eq(text, expected, 'joined content');
  });
}

/// A stop string from the middle of text, not aligned with its words.
function stopFrom(text, at, len) {
  for (let i = Math.floor(text.length * at); i + len <= text.length; i++) {
    const s = text.slice(i, i + len);
    const first = text.indexOf(s);
    if (s.trim().length === len && first > 0) return { stop: s, cut: text.slice(0, first) };
  }
  throw new Fail(`no stop string in ${JSON.stringify(text)}`);
}

async function stops() {
  const prompt = PROMPTS[0];
  const messages = [{ role: 'user', content: CHAT_MESSAGE }];
  let a;
  let b;
  let c;
  let first;
  let full;
  await check('stop strings: the greedy texts to cut', async () => {
    full = (await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N_COMPLETION, temperature: 0 })).choices[0].text;
    a = stopFrom(full, 0.5, 3);
    b = stopFrom(full, 0.3, 5);
    first = full.indexOf(a.stop) < full.indexOf(b.stop) ? a : b;
    const reply = (await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: N_CHAT, temperature: 0 })).choices[0].message.content;
    c = stopFrom(reply, 0.4, 4);
  });
  if (!c) return;
  await check(`stop string ${JSON.stringify(a.stop)} (non-streaming)`, async () => {
    const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N_COMPLETION, temperature: 0, stop: a.stop });
    eq(r.choices[0].text, a.cut, 'text');
    eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    eq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'usage.total_tokens');
  });
  await check(`stop string ${JSON.stringify(a.stop)} (streaming)`, async () => {
    const st = startStream(BASE, '/v1/completions', { prompt, max_tokens: N_COMPLETION, temperature: 0, stop: a.stop });
    await st.finished;
    const { text, last } = validStream(st, false);
    eq(text, a.cut, 'joined text');
    eq(last.choices[0].finish_reason, 'stop', 'finish_reason');
  });
  await check(`stop strings [${JSON.stringify(a.stop)}, ${JSON.stringify(b.stop)}, "zzzz"] (streaming, openai client)`, async () => {
    const stream = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N_COMPLETION, temperature: 0, stop: [a.stop, b.stop, 'zzzz'], stream: true });
    const { text, finish } = await clientStreamText(stream, false);
    eq(text, first.cut, 'joined text');
    eq(finish, 'stop', 'finish_reason');
  });
  await check('a stop string at the very start gives "" (streaming and not)', async () => {
    const stop = full.slice(0, 3);
    const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N_COMPLETION, temperature: 0, stop });
    eq(r.choices[0].text, '', 'text');
    eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    const st = startStream(BASE, '/v1/completions', { prompt, max_tokens: N_COMPLETION, temperature: 0, stop });
    await st.finished;
    const v = validStream(st, false);
    eq(v.text, '', 'streamed text');
    eq(v.last.choices[0].finish_reason, 'stop', 'streamed finish_reason');
  });
  await check('a stop string that the text\'s end only begins: the held-back end still comes (streaming)', async () => {
    const stop = `${full.slice(-2)}\u0001QQ`;
    const st = startStream(BASE, '/v1/completions', { prompt, max_tokens: N_COMPLETION, temperature: 0, stop });
    await st.finished;
    const v = validStream(st, false, N_COMPLETION);
    eq(v.text, full, 'streamed text');
    eq(v.last.choices[0].finish_reason, 'length', 'finish_reason');
  });
  await check(`chat stop string ${JSON.stringify(c.stop)} (streaming and not)`, async () => {
    const r = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: N_CHAT, temperature: 0, stop: [c.stop] });
    eq(r.choices[0].message.content, c.cut, 'content');
    eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    const st = startStream(BASE, '/v1/chat/completions', { messages, max_tokens: N_CHAT, temperature: 0, stop: [c.stop] });
    await st.finished;
    const { text, last } = validStream(st, true);
    eq(text, c.cut, 'streamed content');
    eq(last.choices[0].finish_reason, 'stop', 'streamed finish_reason');
  });
}

async function errors() {
  const cases = [
    ['bad JSON -> 400', '/v1/completions', '{"prompt": "In the', 400],
    ['body not an object -> 400', '/v1/completions', '[1, 2]', 400],
    ['prompt not a string -> 400', '/v1/completions', { prompt: 7 }, 400, 'prompt'],
    ['max_tokens a string -> 400', '/v1/completions', { prompt: 'In', max_tokens: '5' }, 400, 'max_tokens'],
    ['temperature a string -> 400', '/v1/completions', { prompt: 'In', temperature: 'hot' }, 400, 'temperature'],
    ['stream a string -> 400', '/v1/completions', { prompt: 'In', stream: 'yes' }, 400, 'stream'],
    ['stop a number -> 400', '/v1/completions', { prompt: 'In', stop: 3 }, 400, 'stop'],
    ['messages not an array -> 400', '/v1/chat/completions', { messages: 'hello' }, 400, 'messages'],
    ['message without content -> 400', '/v1/chat/completions', { messages: [{ role: 'user' }] }, 400, 'messages'],
    ['n=2 -> 400', '/v1/completions', { prompt: 'In', n: 2 }, 400, 'n'],
    ['negative max_tokens -> 400', '/v1/completions', { prompt: 'In', max_tokens: -3 }, 400, 'max_tokens'],
    ['top_p 0 -> 400', '/v1/completions', { prompt: 'In', top_p: 0 }, 400, 'top_p'],
    ['temperature 3 -> 400', '/v1/completions', { prompt: 'In', temperature: 3 }, 400, 'temperature'],
    ['prompt longer than the context -> 400', '/v1/completions', { prompt: 'In the beginning '.repeat(200), max_tokens: 1 }, 400, 'prompt'],
    ['chat longer than the context -> 400', '/v1/chat/completions', { messages: [{ role: 'user', content: 'In the beginning '.repeat(200) }], max_tokens: 1 }, 400, 'messages'],
    ['prompt + max_tokens over the context -> 400', '/v1/completions', { prompt: 'In the beginning', max_tokens: CTX - 3 }, 400, 'max_tokens'],
    ['/tokenize without content -> 400', '/tokenize', { text: 'x' }, 400, 'content'],
    ['/detokenize with a token out of the vocabulary -> 400', '/detokenize', { tokens: [1, 99999999] }, 400, 'tokens'],
  ];
  for (const [name, path, body, status, param] of cases) {
    await check(`error: ${name}`, async () => errorShape(await post(path, body), status, param));
  }
  await check('error: 1.5 MiB body -> 413', async () => {
    const big = JSON.stringify({ prompt: 'x'.repeat(1536 * 1024), max_tokens: 1 });
    errorShape(await post('/v1/completions', big), 413);
  });
  await check('error: 1.5 MiB body sent chunked (no Content-Length) -> 413', async () => {
    const enc = new TextEncoder();
    const piece = enc.encode('x'.repeat(64 * 1024));
    let i = 0;
    const body = new ReadableStream({
      pull(c) {
        if (i === 0) c.enqueue(enc.encode('{"max_tokens": 1, "prompt": "'));
        if (i < 24) {
          c.enqueue(piece);
        } else {
          c.enqueue(enc.encode('"}'));
          c.close();
        }
        i++;
      },
    });
    const res = await fetch(`${BASE}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body, duplex: 'half',
      signal: AbortSignal.timeout(20000),
    });
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch (e) {
      json = undefined;
    }
    errorShape({ status: res.status, text, json }, 413);
  });
  await check('error: unknown path -> 404', async () => {
    errorShape(await request(BASE, 'GET', '/v1/nothing-here'), 404);
    errorShape(await post('/v2/completions', { prompt: 'In' }), 404);
  });
  await check('unknown request fields are ignored -> 200', async () => {
    const r = await post('/v1/completions', {
      prompt: 'In the beginning', max_tokens: 3, temperature: 0, user: 'someone', logit_bias: {},
      frequency_penalty: 0, presence_penalty: 0, suffix: null, echo: false, foo: { bar: [1, 2] },
    });
    eq(r.status, 200, `status (${r.text.slice(0, 200)})`);
    checkShape(r.json, false, 3);
    const c = await post('/v1/chat/completions', {
      messages: [{ role: 'user', content: CHAT_MESSAGE, name: 'me' }], max_tokens: 3, temperature: 0,
      response_format: { type: 'text' }, tools_unknown: 1,
    });
    eq(c.status, 200, `chat status (${c.text.slice(0, 200)})`);
  });
  await check('error: a bad streaming request gets a JSON error, not a stream -> 400', async () => {
    const r = await post('/v1/completions', { prompt: 'In', n: 2, stream: true });
    errorShape(r, 400, 'n');
    assert((r.headers.get('content-type') || '').startsWith('application/json'), `content-type ${r.headers.get('content-type')}`);
  });
  await check('completion without max_tokens: at most 16 tokens (OpenAI\'s default)', async () => {
    const r = await client.completions.create({ model: MODEL_ID, prompt: PROMPTS[0], temperature: 0 });
    checkShape(r, false, 16);
    eq(r.choices[0].text, (await cliCompletion(PROMPTS[0], 16)), 'text');
  });
  await check('openai client raises BadRequestError for n=2', async () => {
    try {
      await client.completions.create({ model: MODEL_ID, prompt: 'In', n: 2 });
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError, `got ${e && e.constructor && e.constructor.name}: ${e.message}`);
      eq(e.status, 400, 'status');
      return;
    }
    throw new Fail('no error');
  });
  await check('keyed: wrong key -> 401', async () => {
    errorShape(await post('/v1/completions', { prompt: 'In', max_tokens: 1 }, { Authorization: 'Bearer wrong' }, KBASE), 401);
    errorShape(await request(KBASE, 'GET', '/v1/models', undefined, { Authorization: 'Bearer wrong' }), 401);
  });
  await check('keyed: missing key -> 401', async () => {
    errorShape(await post('/v1/completions', { prompt: 'In', max_tokens: 1 }, {}, KBASE), 401);
    errorShape(await post('/tokenize', { content: 'In' }, {}, KBASE), 401);
  });
  await check('keyed: /health without key -> 200', async () => {
    const r = await request(KBASE, 'GET', '/health');
    eq(r.status, 200, 'status');
  });
  await check('keyed: openai client with the key -> 200, with a wrong key -> AuthenticationError', async () => {
    const r = await keyed.completions.create({ model: MODEL_ID, prompt: 'In the beginning', max_tokens: 4, temperature: 0 });
    checkShape(r, false, 4);
    const wrong = new OpenAI({ baseURL: `${KBASE}/v1`, apiKey: 'wrong', maxRetries: 0, timeout: 10000 });
    try {
      await wrong.models.list();
    } catch (e) {
      assert(e instanceof OpenAI.AuthenticationError, `got ${e && e.constructor && e.constructor.name}: ${e.message}`);
      return;
    }
    throw new Fail('no error');
  });
}

/// Waits (bounded) until the keyed server takes a request again: aborted requests free their
/// sequence and queue place once the server sees their connection closed, a few steps later.
async function waitIdle(limitMs = 3000) {
  const t0 = now();
  for (let i = 0; i < 100; i++) {
    const r = await post('/v1/completions', { prompt: 'In', max_tokens: 1 }, AUTH, KBASE);
    if (r.status === 200) return now() - t0;
    if (r.status !== 503) throw new Fail(`status ${r.status}: ${r.text.slice(0, 200)}`);
    if (now() - t0 > limitMs) break;
    await sleep(25);
  }
  throw new Fail(`still 503 (queue full) ${Math.round(now() - t0)} ms after the aborts`);
}

const longBody = () => ({ prompt: LONG_PROMPT, max_tokens: CTX - 8, temperature: 0 });

async function queueAndDisconnect() {
  await check('keyed: queue full -> 503 (1 running, 1 queued, a third refused)', async () => {
    const notes = [];
    for (let attempt = 1; attempt <= 5; attempt++) {
      const a = startStream(KBASE, '/v1/completions', longBody(), AUTH);
      let b;
      try {
        assert(await withTimeout(a.first, 10000, 'the first stream'), `the first stream failed: ${a.status} ${a.errorBody} ${a.error}`);
        b = startStream(KBASE, '/v1/completions', longBody(), AUTH);
        // A streaming response's headers come once the server has queued its job.
        await withTimeout(b.headers, 10000, 'the second stream');
        eq(b.status, 200, `the second (queued) request's status ${b.errorBody}`);
        const r = await post('/v1/completions', { prompt: 'In', max_tokens: 1 }, AUTH, KBASE);
        const aRunning = !a.ended;
        if (r.status === 503) {
          errorShape(r, 503);
          return `attempt ${attempt}`;
        }
        notes.push(`attempt ${attempt}: status ${r.status}${aRunning ? ' while the first still ran' : ' (the first had ended)'}`);
      } finally {
        a.abort();
        if (b) b.abort();
        await a.finished;
        if (b) await b.finished;
      }
      await waitIdle();
    }
    throw new Fail(notes.join('; '));
  }, 60000);

  await check('keyed: the server answers after the aborted requests', async () => {
    const t0 = now();
    const idle = await waitIdle();
    const r = await keyed.completions.create({ model: MODEL_ID, prompt: 'In the beginning', max_tokens: 4, temperature: 0 });
    checkShape(r, false, 4);
    const st = startStream(KBASE, '/v1/completions', { prompt: 'In the beginning', max_tokens: 4, temperature: 0 }, AUTH);
    await st.finished;
    validStream(st, false, 4);
    return `free again ${Math.round(idle)} ms after the aborts`;
  });

  await check('keyed: a client gone mid-stream frees its sequence at once', async () => {
    // How long the long request runs when nobody leaves.
    const base = startStream(KBASE, '/v1/completions', longBody(), AUTH);
    await base.finished;
    validStream(base, false, CTX - 8);
    const full = base.tEnd - base.tFirst;
    const a = startStream(KBASE, '/v1/completions', longBody(), AUTH);
    assert(await withTimeout(a.first, 10000, 'the long stream'), `the long stream failed: ${a.status} ${a.errorBody} ${a.error}`);
    const tAbort = now();
    a.abort();
    const d = startStream(KBASE, '/v1/completions', { prompt: 'And God said', max_tokens: 8, temperature: 0 }, AUTH);
    const started = await withTimeout(d.first, 5000, 'the next stream');
    await a.finished;
    await d.finished;
    assert(started, `the next stream failed: status ${d.status} ${d.errorBody} ${d.error || ''}`);
    validStream(d, false, 8);
    const wait = d.tFirst - tAbort;
    const detail = `next stream's first chunk ${Math.round(wait)} ms after the abort; an unaborted run lasts ${Math.round(full)} ms`;
    assert(wait < 2000, detail);
    // Were the sequence held until the aborted request's natural end, the wait would be about
    // `full`: half of it tells the two apart.
    if (full >= 100) assert(wait < full / 2, `${detail}: the aborted request held its sequence`);
    return detail;
  }, 60000);
}

// ---- the load test ----

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Fail(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]);
}

function threads(pid) {
  const m = /Threads:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : -1;
}

/// A small deterministic generator, so that a failing run can be repeated.
function lcg(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

const LOAD_PROMPTS = ['In the beginning', 'And it came to pass', 'The LORD is my shepherd;', 'Blessed are'];
const LOAD_MESSAGES = ['Who is the Lord?', 'What is love?'];

async function references() {
  const ref = { completion: {}, chat: {} };
  for (const p of LOAD_PROMPTS) {
    ref.completion[p] = (await client.completions.create({ model: MODEL_ID, prompt: p, max_tokens: 48, temperature: 0 })).choices[0].text;
  }
  for (const m of LOAD_MESSAGES) {
    ref.chat[m] = (await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: m }], max_tokens: 48, temperature: 0 })).choices[0].message.content;
  }
  return ref;
}

/// One request of the load; returns {kind, aborted, problem, greedyMismatch}.
async function loadRequest(rand, ref) {
  const chat = rand() < 0.4;
  const streaming = rand() < 0.5;
  const greedy = rand() < 0.6;
  const maxTokens = 1 + Math.floor(rand() * 48);
  const abort = streaming && rand() < 0.2;
  const key = chat ? LOAD_MESSAGES[Math.floor(rand() * LOAD_MESSAGES.length)] : LOAD_PROMPTS[Math.floor(rand() * LOAD_PROMPTS.length)];
  const body = { max_tokens: maxTokens };
  if (greedy) {
    body.temperature = 0;
  } else {
    body.temperature = 0.9;
    body.top_p = 0.95;
    body.top_k = 40;
    body.seed = Math.floor(rand() * 1e9);
  }
  if (chat) body.messages = [{ role: 'user', content: key }];
  else body.prompt = key;
  const what = `${chat ? 'chat' : 'completion'} ${streaming ? 'stream' : 'whole'} max_tokens=${maxTokens}${greedy ? ' greedy' : ''}`;
  const out = { aborted: false, problem: null, mismatch: null };
  let text;
  const t0 = now();
  try {
    if (!streaming) {
      const r = chat
        ? await client.chat.completions.create({ model: MODEL_ID, ...body })
        : await client.completions.create({ model: MODEL_ID, ...body });
      checkShape(r, chat, maxTokens);
      text = chat ? r.choices[0].message.content : r.choices[0].text;
    } else {
      const st = startStream(BASE, chat ? '/v1/chat/completions' : '/v1/completions', body);
      if (abort) {
        const got = await st.first;
        st.abort();
        await st.finished;
        if (!got && st.status !== 200) throw new Fail(`status ${st.status} ${st.errorBody.slice(0, 200)}`);
        if (!got && st.error) throw st.error;
        out.aborted = true;
        return out;
      }
      await st.finished;
      const v = validStream(st, chat, maxTokens);
      assert(v.last.usage, 'the last chunk has no usage');
      text = v.text;
    }
  } catch (e) {
    out.problem = `${what}: ${e.message || e} (after ${Math.round(now() - t0)} ms)`;
    return out;
  }
  if (now() - t0 > 10000) out.problem = `${what}: took ${Math.round(now() - t0)} ms`;
  if (greedy) {
    const full = (chat ? ref.chat : ref.completion)[key];
    if (!full.startsWith(text)) out.mismatch = `${what} ${JSON.stringify(key)}: ${JSON.stringify(text)} is not a prefix of ${JSON.stringify(full)}`;
  }
  return out;
}

async function loadRound(seed) {
  const clients = 8;
  const perClient = 20;
  const stats = { requests: 0, aborted: 0, problems: [], mismatches: [] };
  const t0 = now();
  const deadline = t0 + 60000;
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    const rand = lcg(seed * 1000 + c);
    for (let i = 0; i < perClient; i++) {
      if (now() > deadline) {
        stats.problems.push(`client ${c}: the round ran past 60 s`);
        return;
      }
      const r = await loadRequest(rand, loadRound.ref);
      stats.requests++;
      if (r.aborted) stats.aborted++;
      if (r.problem) stats.problems.push(r.problem);
      if (r.mismatch) stats.mismatches.push(r.mismatch);
    }
  }));
  stats.ms = now() - t0;
  return stats;
}

async function load() {
  const pid = Number(args.pid);
  let warm;
  let main;
  await check('load: greedy references', async () => {
    loadRound.ref = await references();
  });
  if (!loadRound.ref) return;
  await check('load: warm-up round (8 clients x 20 requests) without failures', async () => {
    warm = await loadRound(1);
    if (warm.problems.length) throw new Fail(`${warm.problems.length} failed: ${warm.problems.slice(0, 3).join(' | ')}`);
    return `${warm.requests} requests, ${warm.aborted} aborted, ${Math.round(warm.ms)} ms`;
  }, 90000);
  await sleep(300);
  const rssWarm = pid ? rssKiB(pid) : 0;
  const threadsWarm = pid ? threads(pid) : 0;
  await check('load: round (8 clients x 20 requests, mixed, some aborted): every response complete and valid', async () => {
    main = await loadRound(2);
    if (main.problems.length) throw new Fail(`${main.problems.length} failed: ${main.problems.slice(0, 3).join(' | ')}`);
    assert(main.aborted > 0, 'no request was aborted (the mix is wrong)');
    return `${main.requests} requests, ${main.aborted} aborted, ${Math.round(main.ms)} ms`;
  }, 90000);
  await check('load: greedy texts under load equal the sequential ones', async () => {
    assert(warm && main, 'no load rounds');
    const bad = warm.mismatches.concat(main.mismatches);
    if (bad.length) throw new Fail(`${bad.length} differ: ${bad.slice(0, 2).join(' | ')}`);
  });
  await check('load: the server\'s RSS stays flat (within +20 MB or +10% of the warm-up\'s)', async () => {
    assert(pid > 0, 'no --pid given');
    await sleep(300);
    const rss = rssKiB(pid);
    const allowed = Math.max(20 * 1024, rssWarm * 0.1);
    const detail = `after warm-up ${(rssWarm / 1024).toFixed(1)} MB, after the round ${(rss / 1024).toFixed(1)} MB; threads ${threadsWarm} -> ${threads(pid)}`;
    assert(rss - rssWarm <= allowed, detail);
    return detail;
  });
  await check('load: the server answers after the load', async () => {
    const r = await client.completions.create({ model: MODEL_ID, prompt: PROMPTS[0], max_tokens: N_COMPLETION, temperature: 0 });
    eq(r.choices[0].text, await cliCompletion(PROMPTS[0], N_COMPLETION), 'text');
  });
}

// ---- more requests than sequences + queue ----

/// A request on a connection of its own (fetch may reuse an idle one, whose server thread
/// already waits on it): resolves {status, body}, or rejects past ms.
function freshRequest(port, method, path, body, ms) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? '' : JSON.stringify(body);
    const head = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n` +
      (payload ? `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n` : '') + '\r\n';
    const sock = net.connect(port, '127.0.0.1', () => sock.write(head + payload));
    let data = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no answer within ${ms} ms`));
    }, ms);
    sock.setEncoding('utf8');
    sock.on('data', (d) => { data += d; });
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.on('close', () => {
      clearTimeout(timer);
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(data);
      if (m) resolve({ status: Number(m[1]), body: data.slice(data.indexOf('\r\n\r\n') + 4) });
      else reject(new Error(`not an HTTP response: ${JSON.stringify(data.slice(0, 100))}`));
    });
  });
}

/// The main server: --parallel 4 and the default --max-queue (64). More requests at once than
/// both hold: each must get its answer at once (200 and a place, or 503), and /health must too.
async function flood() {
  const parallel = Number(args.parallel || 4);
  const maxQueue = Number(args['max-queue'] || 64);
  const n = parallel + maxQueue + 12;
  const streams = [];
  await check(`main: ${n} requests at once (${parallel} sequences, queue ${maxQueue}): each answered at once, the excess with 503, /health too`, async () => {
    try {
      for (let i = 0; i < n; i++) {
        streams.push(startStream(BASE, '/v1/completions', longBody()));
        await sleep(3);  // a burst would overflow the listen backlog (SYN retries are not the server's fault)
      }
      const t0 = now();
      while (now() - t0 < 3000 && streams.some((st) => !st.tHeaders)) await sleep(20);
      const h0 = now();
      let health;
      try {
        health = (await freshRequest(Number(args.port), 'GET', '/health', undefined, 3000)).status;
      } catch (e) {
        health = e.message;
      }
      const healthMs = Math.round(now() - h0);
      const accepted = streams.filter((st) => st.status === 200).length;
      const refused = streams.filter((st) => st.status === 503).length;
      const other = streams.filter((st) => st.tHeaders && st.status !== 200 && st.status !== 503).length;
      const pending = streams.filter((st) => !st.tHeaders).length;
      const detail = `${accepted} accepted, ${refused} got 503, ${other} other, ${pending} without an answer after 3 s; /health: ${health} (${healthMs} ms)`;
      assert(pending === 0 && other === 0 && refused > 0 && health === 200 && healthMs < 2000, detail);
      for (const st of streams.filter((x) => x.status === 503)) {
        await withTimeout(st.finished, 5000, 'a 503 body');  // the status comes before the body
        errorShape({ status: 503, text: st.errorBody, json: JSON.parse(st.errorBody) }, 503);
      }
      return detail;
    } finally {
      for (const st of streams) st.abort();
      await Promise.all(streams.map((st) => st.finished));
    }
  }, 40000);
  await check('main: the server answers after the aborted flood', async () => {
    const t0 = now();
    for (let i = 0; i < 200 && now() - t0 < 20000; i++) {
      try {
        const r = await freshRequest(Number(args.port), 'POST', '/v1/completions', { prompt: 'In', max_tokens: 1 }, 3000);
        if (r.status === 200) return `after ${Math.round(now() - t0)} ms`;
      } catch (e) {
        // not yet
      }
      await sleep(50);
    }
    throw new Fail(`no 200 within ${Math.round(now() - t0)} ms`);
  }, 30000);
}

// ---- main ----

// --only a,b runs some sections (for debugging): basics, completions, chats, stops, errors,
// queue, load, flood.
const SECTIONS = { basics, completions, chats, stops, errors, queue: queueAndDisconnect, load, flood };
const only = args.only ? args.only.split(',') : Object.keys(SECTIONS);
try {
  for (const name of only) {
    if (!SECTIONS[name]) throw new Error(`no section '${name}'`);
    await SECTIONS[name]();
  }
} catch (e) {
  report('the run', e);
}
finish();
