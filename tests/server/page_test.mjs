// page_test.mjs: the server's chat page (GET /, common/server_page.html) in headless Chromium.
//
//   node tests/server/page_test.mjs --url http://127.0.0.1:PORT --out build/server/page.png
//                                   [--api-key KEY]
//
// Needs a running server (build/NN_name/server) with a model that chats, puppeteer-core (in
// tests/server/node_modules) and /usr/bin/chromium. --api-key: the server's key, typed into the
// page's key field (without it the test types a key of its own, which a server without one
// ignores). Prints one line per check, "ok - NAME" or "not ok - NAME: REASON", then
// "N passed, M failed"; exits 0 only when every check passed.
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const TOTAL_TIMEOUT_MS = 120000;
const REPLY_TIMEOUT_MS = 60000;
const STEP_TIMEOUT_MS = 20000;
const CHAT_PATH = '/v1/chat/completions';

function parseArgs(argv) {
  const o = { url: '', out: 'build/server/page.png', apiKey: '' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined && flag !== '-h' && flag !== '--help') usage(`${flag} needs a value`);
    if (flag === '--url') o.url = value;
    else if (flag === '--out') o.out = value;
    else if (flag === '--api-key') o.apiKey = value;
    else if (flag === '-h' || flag === '--help') usage('', 0);
    else usage(`unknown flag ${flag}`);
    i++;
  }
  if (!o.url) usage('--url is required');
  return o;
}

function usage(message, code = 2) {
  if (message) console.error(`page_test: ${message}`);
  console.error('usage: node tests/server/page_test.mjs --url http://127.0.0.1:PORT --out FILE.png [--api-key KEY]');
  process.exit(code);
}

const options = parseArgs(process.argv.slice(2));
const base = new URL(options.url);
const apiKey = options.apiKey || 'page-test-key';
let passed = 0;
let failed = 0;
let browser = null;
let ending = false;

function report(name, reason) {
  if (ending) return;  // past the time limit: the checks cut short by closing are not news
  if (reason === undefined) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    console.log(`not ok - ${name}: ${String(reason).replace(/\s+/g, ' ').trim()}`);
  }
}

/** Runs one check; returns whether it passed. */
async function check(name, body) {
  try {
    await body();
    report(name);
    return true;
  } catch (e) {
    report(name, e && e.message ? e.message : e);
    return false;
  }
}

function expect(condition, reason) {
  if (!condition) throw new Error(reason);
}

/** Closes Chromium (killing it when close hangs), prints the summary and exits. */
async function end() {
  if (ending) return;
  ending = true;
  if (browser) {
    const proc = browser.process();
    await Promise.race([browser.close().catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
    if (proc && proc.exitCode === null) proc.kill('SIGKILL');
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
}

const overall = setTimeout(() => {
  report('overall time limit', `the test ran past ${TOTAL_TIMEOUT_MS / 1000} s`);
  end();
}, TOTAL_TIMEOUT_MS);

async function main() {
  browser = await puppeteer.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox'],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 760 });

  // What the page does on the network and the console, over the whole test.
  const consoleErrors = [];
  const foreign = [];
  const failures = [];
  const chats = [];  // {headers, body} of each POST to the chat endpoint
  let expect400 = false;  // the error check's request is refused on purpose
  let stopPressed = false;  // from then on an aborted chat request is expected
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expect400 && /status of 400/.test(m.text())) return;
    consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e && e.message ? e.message : e}`));
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.protocol === 'data:' || u.protocol === 'blob:' || u.protocol === 'about:') return;
    if (u.origin !== base.origin) foreign.push(r.url());
    if (u.pathname === CHAT_PATH && r.method() === 'POST') {
      let body = null;
      try { body = JSON.parse(r.postData() || ''); } catch (e) { /* checked where used */ }
      chats.push({ headers: r.headers(), body });
    }
  });
  page.on('requestfailed', (r) => {
    const why = r.failure() ? r.failure().errorText : 'failed';
    const aborted = why === 'net::ERR_ABORTED' && new URL(r.url()).pathname === CHAT_PATH;
    if (!(aborted && stopPressed)) failures.push(`${r.url()} (${why})`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && !(expect400 && r.status() === 400)) failures.push(`${r.url()} (HTTP ${r.status()})`);
  });

  /** The last assistant message: its text and data attributes, and how many there are. */
  const lastReply = () => page.evaluate(() => {
    const all = document.querySelectorAll('.assistant');
    const el = all[all.length - 1];
    return { count: all.length, text: el ? el.textContent : '', done: el ? el.dataset.done : undefined,
             finish: el ? el.dataset.finish : undefined };
  });
  const errorCount = () => page.$$eval('.error', (els) => els.length);
  const lastError = () => page.$$eval('.error', (els) => (els.length ? els[els.length - 1].textContent : ''));
  /** Waits until the n-th assistant message is done; throws the page's error if one shows up. */
  const waitReply = async (n, timeout) => {
    const errors = errorsAtSend;
    await page.waitForFunction((k, e) => {
      const el = document.querySelectorAll('.assistant')[k - 1];
      return (el && el.dataset.done === 'true') || document.querySelectorAll('.error').length > e;
    }, { timeout, polling: 'mutation' }, n, errors);
    if ((await errorCount()) > errors) throw new Error(`the page shows "${await lastError()}"`);
  };
  const buttons = () => page.evaluate(() => ({
    send: document.getElementById('send').disabled, stop: document.getElementById('stop').disabled }));
  const setField = (selector, value) => page.$eval(selector, (el, v) => { el.value = v; }, value);
  let errorsAtSend = 0;  // errors shown before the last message was sent
  const sendText = async (text, how) => {
    errorsAtSend = await errorCount();
    await page.click('#input');
    await page.type('#input', text);
    if (how === 'enter') await page.keyboard.press('Enter');
    else await page.click('#send');
  };

  const loaded = await check('page loads with title, #input and the controls', async () => {
    const res = await page.goto(base.href, { waitUntil: 'load', timeout: STEP_TIMEOUT_MS });
    expect(res && res.status() === 200, `GET / answered ${res ? res.status() : 'nothing'}`);
    const info = await page.evaluate(() => ({
      title: document.title,
      missing: ['input', 'send', 'stop', 'temperature', 'messages'].filter((id) => !document.getElementById(id)),
      temperature: document.getElementById('temperature') && document.getElementById('temperature').value,
    }));
    expect(info.title.trim() !== '', 'the page has no title');
    expect(info.missing.length === 0, `missing elements: #${info.missing.join(', #')}`);
    expect(Number(info.temperature) === 0.7, `temperature starts at ${info.temperature}, not 0.7`);
    expect(consoleErrors.length === 0, `console errors: ${consoleErrors.join(' | ')}`);
    expect(foreign.length === 0, `requests to other hosts: ${foreign.join(', ')}`);
    expect(failures.length === 0, `failed requests: ${failures.join(', ')}`);
  });
  if (!loaded) return;

  // Each change of the streaming reply's text, seen from inside the page.
  await page.evaluate(() => {
    window.__replyLengths = [];
    new MutationObserver(() => {
      const all = document.querySelectorAll('.assistant');
      const el = all[all.length - 1];
      if (el && el.dataset.done !== 'true') window.__replyLengths.push(el.textContent.length);
    }).observe(document.getElementById('messages'),
      { subtree: true, childList: true, characterData: true, attributes: true });
  });
  const keyField = await page.$('#api-key');
  if (keyField) await keyField.type(apiKey);

  const question = 'Who was Moses?';
  await check('the message appears as a user message and the box empties', async () => {
    await sendText(question, 'click');
    const state = await page.evaluate(() => {
      const users = document.querySelectorAll('#messages .user');
      return { users: users.length, text: users.length ? users[users.length - 1].textContent : '',
               input: document.getElementById('input').value };
    });
    expect(state.users === 1, `${state.users} user messages`);
    expect(state.text.trim() === question, `the user message reads "${state.text}"`);
    if (state.input !== '' && (await errorCount()) > 0) {
      throw new Error(`the page shows "${await lastError()}" (a wrong --api-key?)`);
    }
    expect(state.input === '', `the box still holds "${state.input}"`);
  });

  let first = null;
  const answered = await check('the reply streams into an .assistant message and finishes', async () => {
    await waitReply(1, REPLY_TIMEOUT_MS);
    first = await lastReply();
    expect(first.count === 1, `${first.count} assistant messages`);
    expect(first.text.trim() !== '', 'the finished reply is empty');
  });
  if (!answered) return;

  await check('the reply arrived in more than one piece', async () => {
    const lengths = await page.evaluate(() => window.__replyLengths);
    const distinct = new Set(lengths.filter((n) => n > 0));
    expect(distinct.size >= 2, `${distinct.size} distinct non-empty lengths before done (${lengths.length} changes)`);
  });

  await check('the request holds the conversation, the settings and the key', async () => {
    expect(chats.length === 1, `${chats.length} chat requests`);
    const { headers, body } = chats[0];
    expect(body, 'the request body is not JSON');
    expect(JSON.stringify(body.messages) === JSON.stringify([{ role: 'user', content: question }]),
      `messages: ${JSON.stringify(body.messages)}`);
    expect(body.stream === true, `stream: ${body.stream}`);
    expect(body.temperature === 0.7, `temperature: ${body.temperature}`);
    expect(body.max_tokens === 256, `max_tokens: ${body.max_tokens}`);
    expect(headers.authorization === `Bearer ${apiKey}`, `Authorization: ${headers.authorization}`);
  });

  await check(`screenshot saved to ${options.out}`, async () => {
    fs.mkdirSync(path.dirname(path.resolve(options.out)), { recursive: true });
    await page.screenshot({ path: options.out });
    expect(fs.statSync(options.out).size > 1000, 'the file is too small');
  });

  // Stop: no max tokens (until the end of the context), the download slowed so that the
  // reply cannot finish before Stop is pressed however fast the server is.
  let stopped = null;
  const stopWorked = await check('Stop ends the stream, keeps the partial reply, marks it done', async () => {
    await setField('#max-tokens', '');
    await page.emulateNetworkConditions({ download: 3000, upload: -1, latency: 0 });
    await sendText('Tell me of the plagues of Egypt.', 'click');
    await page.waitForFunction((e) => {
      const el = document.querySelectorAll('.assistant')[1];
      return (el && el.textContent.trim() !== '') || document.querySelectorAll('.error').length > e;
    }, { timeout: REPLY_TIMEOUT_MS, polling: 'mutation' }, errorsAtSend);
    if ((await errorCount()) > errorsAtSend) throw new Error(`the page shows "${await lastError()}"`);
    const before = await buttons();
    expect(!before.stop && before.send, `while streaming: send ${before.send ? 'disabled' : 'enabled'}, stop ${before.stop ? 'disabled' : 'enabled'}`);
    stopPressed = true;
    await page.click('#stop');
    await waitReply(2, STEP_TIMEOUT_MS);
    stopped = await lastReply();
    expect(stopped.text.trim() !== '', 'the partial reply is gone');
    expect(stopped.finish === 'stopped', `data-finish is "${stopped.finish}" (did it finish before Stop?)`);
    await new Promise((r) => setTimeout(r, 1000));
    const later = await lastReply();
    expect(later.text === stopped.text, 'text kept arriving after Stop');
    const after = await buttons();
    expect(after.stop && !after.send, 'after Stop: Send not enabled or Stop not disabled');
  });
  await page.emulateNetworkConditions(null);

  await check('Shift+Enter adds a line and does not send', async () => {
    await page.click('#input');
    await page.type('#input', 'one');
    await page.keyboard.down('Shift');
    await page.keyboard.press('Enter');
    await page.keyboard.up('Shift');
    await page.type('#input', 'two');
    const value = await page.$eval('#input', (el) => el.value);
    expect(value === 'one\ntwo', `the box holds ${JSON.stringify(value)}`);
    const n = await page.$$eval('#messages .user', (els) => els.length);
    expect(n === 2, `${n} user messages`);
    await setField('#input', '');
  });

  await check('after Stop the page still chats (Enter sends the whole conversation)', async () => {
    await setField('#max-tokens', '16');
    await sendText('And who was Aaron?', 'enter');
    await waitReply(3, REPLY_TIMEOUT_MS);
    const third = await lastReply();
    expect(third.count === 3, `${third.count} assistant messages`);
    expect(third.text.trim() !== '', 'the reply is empty');
    const body = chats[chats.length - 1].body;
    expect(body && Array.isArray(body.messages), 'the request body has no messages');
    const roles = body.messages.map((m) => m.role).join(',');
    expect(roles === 'user,assistant,user,assistant,user', `roles sent: ${roles}`);
    expect(body.messages[1].content.trimStart() === first.text, 'the first reply was not sent back as it is shown');
    if (stopWorked) {
      expect(body.messages[3].content.trimStart() === stopped.text, 'the stopped reply was not sent back as it is shown');
    }
    expect(body.messages[4].content === 'And who was Aaron?', `the last message: ${JSON.stringify(body.messages[4].content)}`);
    expect(body.max_tokens === 16, `max_tokens: ${body.max_tokens}`);
  });

  await check('an error response is shown in the page', async () => {
    expect400 = true;
    const errorsBefore = await errorCount();
    await setField('#max-tokens', '100000000');
    await sendText('Once more?', 'click');
    await page.waitForFunction((n) => document.querySelectorAll('.error').length > n,
      { timeout: STEP_TIMEOUT_MS, polling: 'mutation' }, errorsBefore);
    const text = await lastError();
    expect(/400/.test(text) && /max_tokens/.test(text), `the error reads "${text}"`);
    const after = await buttons();
    expect(!after.send && after.stop, 'after the error: Send not enabled or Stop not disabled');
    await new Promise((r) => setTimeout(r, 200));  // the console's report of the 400 comes late
    expect400 = false;
    await setField('#max-tokens', '256');
  });

  await check('after a reload the API key field keeps the key', async () => {
    await page.reload({ waitUntil: 'load', timeout: STEP_TIMEOUT_MS });
    const state = await page.evaluate(() => ({
      key: document.getElementById('api-key') ? document.getElementById('api-key').value : null,
      messages: document.querySelectorAll('#messages .msg').length,
    }));
    expect(state.key === apiKey, `the key field holds ${JSON.stringify(state.key)}`);
    expect(state.messages === 0, `${state.messages} messages after the reload`);
  });

  await check('no console errors, no failed requests, none to other hosts', async () => {
    expect(consoleErrors.length === 0, `console errors: ${consoleErrors.join(' | ')}`);
    expect(foreign.length === 0, `requests to other hosts: ${foreign.join(', ')}`);
    expect(failures.length === 0, `failed requests: ${failures.join(', ')}`);
  });
}

main()
  .catch((e) => report('the test ran', e && e.stack ? e.stack.split('\n')[0] : e))
  .finally(() => {
    clearTimeout(overall);
    end();
  });
