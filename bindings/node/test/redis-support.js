'use strict';
// What the RedisPacer test files share: the configuration they pace with,
// the package's script, a plain connection to a server, the server's own
// counters for a key, a notice sink and a stand-in node-redis client.
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { createClient } = require('redis');

const SCRIPT = fs.readFileSync(path.join(__dirname, '..', 'pacer.lua'));
const SHA = crypto.createHash('sha1').update(SCRIPT).digest('hex');

// Rate 60, burst 2, idle 30000, retries 3: refusing, wait bound 2000 ms,
// refusal hint at most 2 s.
const CONFIG = { ratePerMinute: 60, burst: 2, idleTimeoutMs: 30000, maxRetries: 3 };
const HINT_CAP = 2;

// Rate 6, burst 2, idle 300000, retries 5: refusing, wait bound
// min(15000, ⌊(300000 − 62000) / 12⌋) = 15000 ms, refusal hint at most
// 15 s (SPEC §3). A token takes 10 s to come back, so on the server's real
// clock a burst spent at once stays spent: the third call waits (0, 10000]
// unless 10 s pass after the first, and the fourth needs 20000 ms less what
// passed, past the bound (refused), unless 5 s pass. For the sequences whose
// waits and refusal follow from the calls' order alone, at any speed.
const LONG = { ratePerMinute: 6, burst: 2, idleTimeoutMs: 300000, maxRetries: 5 };
const LONG_HINT_CAP = 15;

// The module's path comes from scripts/test-node.sh; without it the tests
// that need the module are skipped, the others run.
const HAVE_MODULE = Boolean(process.env.PACER_REDIS_MODULE);
const moduleSkip = !HAVE_MODULE && 'PACER_REDIS_MODULE is unset (scripts/test-node.sh sets it)';

let keys = 0;
/** A key no other test of this process uses. */
function freshKey() {
  keys += 1;
  return `test:pacer:${keys}`;
}

function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Asks `check` until it holds, at most `tries` times 25 ms apart. */
async function until(what, check, tries = 400) {
  for (let i = 0; i < tries; i += 1) {
    if (await check()) return;
    await delay(25);
  }
  throw new Error(`${what}: not so after ${tries} tries`);
}

async function adminOf(server) {
  const client = createClient({ url: server.url, socket: { reconnectStrategy: false } });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** Runs `commands` on `server` through a plain connection; their replies. */
async function onServer(server, ...commands) {
  const admin = await adminOf(server);
  try {
    const replies = [];
    for (const command of commands) replies.push(await admin.sendCommand(command));
    return replies;
  } finally {
    await admin.close();
  }
}

/** Loads the package's script as the function library `pacer`, as
 * docs/redis.md tells operators: the library's name line, then the file. */
async function loadFunction(server) {
  await onServer(server, ['FUNCTION', 'LOAD', 'REPLACE', Buffer.concat([Buffer.from('#!lua name=pacer\n'), SCRIPT])]);
}

/** The server's INFO pairs for `key` (through a plain connection): the
 * module's PACER.INFO where it is loaded, else the script's `info`. */
async function serverInfo(server, key) {
  const admin = await adminOf(server);
  try {
    const modules = await admin.sendCommand(['MODULE', 'LIST']);
    const reply = modules.length > 0
      ? await admin.sendCommand(['PACER.INFO', key])
      : await admin.sendCommand(['EVAL', SCRIPT, '1', key, 'info']);
    const info = {};
    for (let i = 0; i < reply.length; i += 2) info[reply[i]] = reply[i + 1];
    return info;
  } finally {
    await admin.close();
  }
}

/** Notices a sink received, by kind. */
function noticeLog() {
  const log = [];
  const sink = (notice) => log.push(notice);
  const kinds = () => log.map((n) => n.kind);
  return { log, sink, kinds };
}

/** A node-redis stand-in that records each command and answers `reply(args)`. */
function recordingClient(reply) {
  const sent = [];
  return {
    sent,
    isOpen: true,
    isReady: true,
    on() {},
    off() {},
    connect: async () => {},
    sendCommand: async (args) => {
      sent.push(args.map(String));
      return reply(args.map(String));
    },
  };
}

/** The answer each failure policy gives a reserve while Redis fails, with
 * CONFIG, or with the configuration whose hint cap is `hintCap` (`Ticket`:
 * the local Pacer's ticket class). No clock decides it: 'closed' refuses
 * with the configuration's hint cap, and 'local' is asked here only while
 * its fresh bucket still has a token of its burst. */
function assertPolicyAnswer(policy, d, Ticket, hintCap = HINT_CAP) {
  assert.equal(d.fallback, policy);
  if (policy === 'open') {
    assert.equal(d.kind, 'admitted');
    assert.equal(d.path, 'disabled');
    assert.equal(d.waitMs, 0);
    assert.equal(d.ticket, null);
  } else if (policy === 'closed') {
    assert.equal(d.kind, 'refused');
    assert.equal(d.retryAfterSeconds, hintCap);
  } else {
    assert.equal(d.kind, 'admitted');
    assert.equal(d.path, 'paced');
    assert.ok(Ticket.isTicket(d.ticket), 'the local fallback issues its own ticket');
  }
}

module.exports = {
  SCRIPT, SHA, CONFIG, HINT_CAP, LONG, LONG_HINT_CAP, HAVE_MODULE, moduleSkip, freshKey, delay, until,
  adminOf, onServer, loadFunction, serverInfo, noticeLog, recordingClient, assertPolicyAnswer,
};
