'use strict';
// RedisPacer against real redis-servers (test/redis-server.js): the module,
// the function and the script engines, the failure policies when a server
// is paused, killed or unreachable, pacer errors, cancellation. No
// assertion depends on how fast the machine runs: the answers, fallbacks
// and counters are checked, never how long something took.
const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { createClient } = require('redis');
const { RedisPacer, RedisTicket, RedisBooking, Ticket } = require('..');
const { RedisServer, freePort } = require('./redis-server.js');
const {
  SCRIPT, SHA, CONFIG, LONG, LONG_HINT_CAP, HAVE_MODULE, moduleSkip, freshKey, delay, until, adminOf, loadFunction,
  serverInfo, noticeLog, recordingClient, assertPolicyAnswer,
} = require('./redis-support.js');

const REPOSITORY_SCRIPT = path.join(__dirname, '..', '..', '..', 'redis', 'pacer.lua');

let moduleServer;
let functionServer;
let plainServer;

before(async () => {
  [moduleServer, functionServer, plainServer] = await Promise.all([
    HAVE_MODULE ? RedisServer.start({ module: true }) : null,
    RedisServer.start(),
    RedisServer.start(),
  ]);
  await loadFunction(functionServer);
});

after(async () => {
  await Promise.all([moduleServer, functionServer, plainServer].map((s) => s?.stop()));
});

// pacer.lua is not committed here: scripts/build.js (also npm's prepack)
// copies redis/pacer.lua into the package, and scripts/test-node.sh checks
// the packed tarball's copy too.
test('the package carries redis/pacer.lua byte for byte', () => {
  assert.ok(SCRIPT.equals(fs.readFileSync(REPOSITORY_SCRIPT)),
    'bindings/node/pacer.lua differs from redis/pacer.lua: run node scripts/build.js');
  const { files } = require('../package.json');
  assert.ok(files.includes('pacer.lua') && files.includes('redis.js'), 'npm pack must ship pacer.lua and redis.js');
});

describe('engine auto-selection and the answers', () => {
  for (const [name, server, engine] of [
    ['a server with the module', () => moduleServer, 'module'],
    ['a server with the function library', () => functionServer, 'function'],
    ['a plain server', () => plainServer, 'script'],
  ]) {
    const skip = engine === 'module' && moduleSkip;
    test(`${name}: ${engine}; a burst admits at once, the next calls wait or are refused`, { skip }, async () => {
      const key = freshKey();
      // LONG: the third waits and the fourth is refused at any speed.
      const pacer = await RedisPacer.connect({ url: server().url, key, ...LONG });
      try {
        assert.equal(pacer.engine, null);
        const first = await pacer.reserve();
        assert.equal(pacer.engine, engine);
        const second = await pacer.reserve();
        for (const d of [first, second]) {
          assert.equal(d.kind, 'admitted');
          assert.equal(d.waitMs, 0);
          assert.equal(d.queued, false);
          assert.equal(d.path, 'paced');
          assert.equal(d.fallback, undefined);
          assert.ok(RedisTicket.isRedisTicket(d.ticket));
          assert.equal(d.ticket.key, key);
          assert.match(d.ticket.text, /^\d+\.\d+\.60000\.0\.[0-9a-f]{16}$/);
        }
        const third = await pacer.reserve();
        assert.equal(third.kind, 'admitted');
        assert.ok(third.waitMs > 0 && third.waitMs <= 10000, `third waits ${third.waitMs}`);
        assert.equal(third.queued, true);
        // The fourth is refused, its need past the bound, so ⌈need/1000⌉ is
        // past the cap: the hint is the cap.
        const refusal = await pacer.reserve();
        assert.equal(refusal.kind, 'refused');
        assert.ok(refusal.requiredWaitMs > pacer.waitBoundMs);
        assert.equal(refusal.retryAfterSeconds, LONG_HINT_CAP);
        assert.equal(await pacer.release(third.ticket), true);
        assert.equal(await pacer.release(third.ticket), false, 'a spent ticket is not released twice');
        const info = await pacer.info();
        assert.equal(info.engine, engine);
        assert.equal(info.ratePerMin, 6);
        assert.equal(info.waitBoundMs, 15000);
        assert.equal(info.mode, 'refusing');
        assert.equal(info.released, 1);
        assert.equal(info.admitted, 3);
        assert.equal(info.refused, 1);
        const counters = pacer.counters();
        assert.equal(counters.released, 1);
        assert.equal(counters.refunded, 1);
        assert.equal(counters.fallbacks, 0);
      } finally {
        await pacer.close();
      }
    });

    test(`${name}: a booking is redeemed or released on the server`, { skip }, async () => {
      const key = freshKey();
      // LONG: two at once and the third after a wait (admitted, within the
      // 15000 ms bound, at any speed); the fourth needs 20000 ms less what
      // passed since the first, past the bound unless 5 s pass and within
      // the horizon of 3 retries, 15000 + 3·15000 = 60000 ms (SPEC §11): it
      // books, its slot 20000 ms after the first, its hint
      // ⌈(20000 − passed − 15000)/1000⌉, 1 to 5 s.
      const pacer = await RedisPacer.connect({ url: server().url, key, ...LONG });
      try {
        for (let i = 0; i < 3; i += 1) assert.equal((await pacer.reserveOrBook(3)).kind, 'admitted');
        const booked = await pacer.reserveOrBook(3);
        assert.equal(booked.kind, 'booked');
        assert.ok(RedisBooking.isRedisBooking(booked.booking));
        assert.ok(booked.retryAfterSeconds >= 1 && booked.retryAfterSeconds <= 5, `hint ${booked.retryAfterSeconds}`);
        // Its slot is past the bound unless 5 s passed since the first: not
        // yet, the hint again 1 to 5 s.
        const early = await pacer.redeem(booked.booking);
        assert.equal(early.kind, 'booked');
        assert.equal(early.booking, booked.booking);
        assert.ok(early.retryAfterSeconds >= 1 && early.retryAfterSeconds <= 5, `hint ${early.retryAfterSeconds}`);
        assert.equal(await pacer.release(booked.booking.ticket), true);
        await assert.rejects(pacer.redeem(booked.booking), RangeError);
        const info = await pacer.info();
        assert.deepEqual([info.admitted, info.booked, info.released], [3, 1, 1]);
      } finally {
        await pacer.close();
      }
    });
  }

  test('a node-redis client of the caller, RESP3, finds the function; close() leaves it open', async () => {
    const client = createClient({ url: functionServer.url, RESP: 3 });
    client.on('error', () => {});
    await client.connect();
    const pacer = await RedisPacer.connect({ client, key: freshKey(), ...CONFIG });
    assert.equal((await pacer.reserve()).kind, 'admitted');
    assert.equal(pacer.engine, 'function');
    await pacer.close();
    assert.equal(client.isOpen, true);
    await assert.rejects(pacer.reserve(), { code: 'ERR_PACER_CLOSED' });
    await client.close();
  });

  test('engine can be forced: the script on a server with the module', { skip: moduleSkip }, async () => {
    const key = freshKey();
    const pacer = await RedisPacer.connect({ url: moduleServer.url, key, ...CONFIG, engine: 'script' });
    assert.equal((await pacer.reserve()).kind, 'admitted');
    assert.equal(pacer.engine, 'script');
    // The same key format: the module reads the bucket the script wrote.
    assert.equal((await serverInfo(moduleServer, key)).admitted, 1);
    await pacer.close();
  });

  test('NOSCRIPT after SCRIPT FLUSH: loaded again, the call retried by EVAL', async () => {
    const key = freshKey();
    const pacer = await RedisPacer.connect({ url: plainServer.url, key, ...CONFIG });
    try {
      assert.equal((await pacer.reserve()).kind, 'admitted');
      assert.equal(pacer.engine, 'script');
      const admin = await adminOf(plainServer);
      await admin.sendCommand(['SCRIPT', 'FLUSH']);
      const evalCalls = async () => {
        const stats = String(await admin.sendCommand(['INFO', 'commandstats']));
        return Number(/^cmdstat_eval:calls=(\d+),/m.exec(stats)?.[1] ?? 0);
      };
      const carried = await evalCalls();
      const d = await pacer.reserve();
      assert.equal(d.kind, 'admitted');
      assert.equal(d.fallback, undefined);
      assert.equal(pacer.outage, false);
      assert.deepEqual(await admin.sendCommand(['SCRIPT', 'EXISTS', SHA]), [1]);
      // The retry carried the script (EVAL): a node whose cache is still
      // empty (a cluster's replica promoted after the reload) runs it too.
      assert.equal(await evalCalls() - carried, 1);
      await admin.close();
      assert.equal((await pacer.info()).admitted, 2);
    } finally {
      await pacer.close();
    }
  });
});

describe('errors of the pacer are errors, whatever the policy', () => {
  for (const [name, server] of [['module', () => moduleServer], ['function', () => functionServer],
    ['script', () => plainServer]]) {
    test(`${name}: another configuration names both`, { skip: name === 'module' && moduleSkip }, async () => {
      const key = freshKey();
      const first = await RedisPacer.connect({ url: server().url, key, ...CONFIG });
      const other = await RedisPacer.connect({ url: server().url, key, ...CONFIG, ratePerMinute: 30,
        onFailure: 'open' });
      try {
        assert.equal((await first.reserve()).kind, 'admitted');
        await assert.rejects(other.reserve(), (error) => {
          assert.equal(error.code, 'ERR_PACER_REDIS');
          assert.match(error.message, /^ERR pacer: bucket .* rate_per_min=60 .*this call has rate_per_min=30/);
          return true;
        });
        assert.equal(other.outage, false);
        assert.equal(other.counters().fallbacks, 0);
      } finally {
        await first.close();
        await other.close();
      }
    });
  }

  test('WRONGTYPE is an error, not an outage', async () => {
    const key = freshKey();
    const admin = await adminOf(plainServer);
    await admin.sendCommand(['LPUSH', key, 'x']);
    await admin.close();
    const pacer = await RedisPacer.connect({ url: plainServer.url, key, ...CONFIG, onFailure: 'open' });
    await assert.rejects(pacer.reserve(), /WRONGTYPE/);
    assert.equal(pacer.outage, false);
    await pacer.close();
  });

  test('a ticket the server did not issue is an error', async () => {
    const key = freshKey();
    const pacer = await RedisPacer.connect({ url: functionServer.url, key, ...CONFIG });
    assert.equal((await pacer.reserve()).kind, 'admitted');
    const forged = new RedisTicket(key, '0.1.60000.0.0000000000000000');
    await assert.rejects(pacer.release(forged), /ERR pacer: ticket not issued by this bucket/);
    await pacer.close();
  });
});

describe('cancellation releases', () => {
  test('an admit aborted during its wait releases its ticket on the server', async () => {
    const key = freshKey();
    const server = moduleServer ?? plainServer;
    // LONG: the burst spent, the third waits 10000 ms less what passed since
    // the first, so the abort 50 ms after the call lands before admission
    // unless nearly 10 s pass.
    const pacer = await RedisPacer.connect({ url: server.url, key, ...LONG });
    try {
      assert.equal((await pacer.reserve()).waitMs, 0);
      assert.equal((await pacer.reserve()).waitMs, 0);
      const controller = new AbortController();
      const waiting = pacer.admit({ signal: controller.signal });
      setTimeout(() => controller.abort(), 50);
      await assert.rejects(waiting, { name: 'AbortError' });
      // Aborted during the wait, the release is made before the rejection;
      // aborted while the reply was on its way (a machine slower than
      // 50 ms), when the reply comes: asked until it shows, a bounded number
      // of times.
      await until('the release shows on the server', async () => (await serverInfo(server, key)).released >= 1, 200);
      const info = await serverInfo(server, key);
      assert.deepEqual([info.admitted, info.released], [3, 1]);
    } finally {
      await pacer.close();
    }
  });

  test('close() ends a waiting admit and releases its ticket', async () => {
    const key = freshKey();
    // LONG: the third waits 10000 ms less what passed since the first, so
    // close() 50 ms after the call ends it before admission unless nearly
    // 10 s pass (close() waits for a reply still on its way).
    const pacer = await RedisPacer.connect({ url: plainServer.url, key, ...LONG });
    await pacer.reserve();
    await pacer.reserve();
    const waiting = pacer.admit();
    setTimeout(() => pacer.close(), 50);
    await assert.rejects(waiting, { code: 'ERR_PACER_CLOSED' });
    assert.equal((await serverInfo(plainServer, key)).released, 1);
  });

  test('forget() of a keyed request releases its booking', async () => {
    const key = freshKey();
    const server = moduleServer ?? plainServer;
    const pacer = await RedisPacer.connect({ url: server.url, key, ...LONG });
    try {
      // LONG: spend the burst and a wait without waiting (the third is
      // admitted within the 15000 ms bound at any speed); then the keyed
      // request needs 20000 ms less what passed since the first, past the
      // bound unless 5 s pass and within its 5 retries' horizon, 15000 +
      // 5·15000 = 90000 ms: refused, and it books.
      for (let i = 0; i < 3; i += 1) assert.equal((await pacer.reserve()).kind, 'admitted');
      const refused = await pacer.admit({ key: 'request-1' });
      assert.equal(refused.kind, 'refused');
      assert.ok(refused.retryAfterSeconds >= 1 && refused.retryAfterSeconds <= 5, `hint ${refused.retryAfterSeconds}`);
      assert.equal(refused.fallback, undefined);
      assert.equal(pacer.pendingKeys, 1);
      const before = await serverInfo(server, key);
      assert.deepEqual([before.admitted, before.booked, before.released], [3, 1, 0]);
      assert.equal(await pacer.forget('request-1'), true);
      assert.equal(pacer.pendingKeys, 0);
      assert.equal((await serverInfo(server, key)).released, 1);
      assert.equal(await pacer.forget('request-1'), false);
    } finally {
      await pacer.close();
    }
  });
});

describe('failure policies', () => {
  const RETRY_AFTER_MS = 300;

  /** Calls until one is answered by Redis again (bounded tries, each after
   * retryAfterMs has passed); returns that answer. */
  async function untilRedisAnswers(pacer) {
    for (let i = 0; i < 40; i += 1) {
      await delay(RETRY_AFTER_MS + 20);
      const d = await pacer.reserve();
      if (d.fallback === undefined) return d;
    }
    throw new Error('Redis was not used again');
  }

  for (const policy of ['local', 'open', 'closed']) {
    test(`${policy}: a paused server times out, the policy answers; Redis is used again after`, async () => {
      const server = functionServer;
      const key = freshKey();
      const notices = noticeLog();
      const pacer = await RedisPacer.connect({ url: server.url, key, ...CONFIG, onFailure: policy,
        timeoutMs: 200, retryAfterMs: RETRY_AFTER_MS, onNotice: notices.sink });
      try {
        const first = await pacer.reserve();
        assert.equal(first.fallback, undefined);
        // Paused 3000 ms: the next call times out (200 ms), and so does the
        // one after it if retryAfterMs has passed and Redis is asked again,
        // unless 2.8 s pass between the pause and that call (at 800 ms a
        // stall of 0.6 s let the server answer it).
        const admin = await adminOf(server);
        await admin.sendCommand(['CLIENT', 'PAUSE', '3000', 'ALL']);
        const during = await pacer.reserve();
        assertPolicyAnswer(policy, during, Ticket);
        assert.equal(pacer.outage, true);
        // A ticket Redis issued is not refunded during the outage (false,
        // not an error) and stays unspent.
        assert.equal(await pacer.release(first.ticket), false);
        assert.equal(first.ticket.spent, false);
        // Within retryAfterMs Redis is not asked: the policy answers again
        // (and after it, the paused server times out again).
        assertPolicyAnswer(policy, await pacer.reserve(), Ticket);
        assert.deepEqual(notices.kinds(), ['redis_unavailable']);
        if (policy === 'local') assert.equal(await pacer.release(during.ticket), true);
        await admin.close();
        const back = await untilRedisAnswers(pacer);
        assert.ok(RedisTicket.isRedisTicket(back.ticket) || back.kind === 'refused');
        assert.equal(pacer.outage, false);
        // The bucket outlived the pause: the ticket is refunded now.
        const released = (await pacer.info()).released;
        assert.equal(await pacer.release(first.ticket), true);
        assert.equal((await pacer.info()).released, released + 1);
        assert.deepEqual(notices.kinds(), ['redis_unavailable', 'redis_recovered']);
        assert.ok(pacer.counters().fallbacks >= 2);
      } finally {
        await pacer.close();
      }
    });

    test(`${policy}: a killed server, then restarted on its port`, async () => {
      const server = await RedisServer.start({ module: HAVE_MODULE });
      const key = freshKey();
      const notices = noticeLog();
      const pacer = await RedisPacer.connect({ url: server.url, key, ...LONG, onFailure: policy,
        retryAfterMs: RETRY_AFTER_MS, onNotice: notices.sink });
      try {
        const first = await pacer.reserve();
        assert.equal(first.fallback, undefined);
        // A keyed request whose booking Redis holds. LONG: after the burst
        // and the third's wait it needs 20000 ms less what passed since the
        // first, past the 15000 ms bound unless 5 s pass: refused, booked.
        for (let i = 0; i < 2; i += 1) assert.equal((await pacer.reserve()).kind, 'admitted');
        const refused = await pacer.admit({ key: 'request-1' });
        assert.equal(refused.kind, 'refused');
        assert.equal(refused.fallback, undefined);
        assert.equal((await pacer.info()).booked, 1);
        await server.kill();
        assertPolicyAnswer(policy, await pacer.reserve(), Ticket, LONG_HINT_CAP);
        assertPolicyAnswer(policy, await pacer.reserve(), Ticket, LONG_HINT_CAP);
        // A ticket Redis issued cannot be released while it is down: false,
        // not an error. Forgetting the keyed request forgets it (its booking
        // passes with its slot).
        assert.equal(await pacer.release(first.ticket), false);
        assert.equal(await pacer.forget('request-1'), false);
        assert.equal(pacer.pendingKeys, 0);
        assert.deepEqual(notices.kinds(), ['redis_unavailable']);
        await server.restart();
        const back = await untilRedisAnswers(pacer);
        assert.equal(back.kind, 'admitted');
        assert.equal(pacer.engine, HAVE_MODULE ? 'module' : 'script');
        assert.deepEqual(notices.kinds(), ['redis_unavailable', 'redis_recovered']);
        assert.equal((await pacer.info()).admitted, 1, 'the restarted server (no persistence) began afresh');
      } finally {
        await pacer.close();
        await server.stop();
      }
    });

    test(`${policy}: an unreachable server`, async () => {
      const notices = noticeLog();
      const pacer = await RedisPacer.connect({ url: `redis://127.0.0.1:${await freePort()}`, key: freshKey(),
        ...CONFIG, onFailure: policy, retryAfterMs: RETRY_AFTER_MS, onNotice: notices.sink });
      try {
        assertPolicyAnswer(policy, await pacer.reserve(), Ticket);
        const booked = await pacer.reserveOrBook(3);
        assert.equal(booked.fallback, policy);
        const outcome = await pacer.admit();
        assert.equal(outcome.fallback, policy);
        assert.deepEqual(notices.kinds(), ['redis_unavailable']);
        await assert.rejects(pacer.info(), { code: 'ERR_PACER_REDIS_UNAVAILABLE' });
      } finally {
        await pacer.close();
      }
    });
  }

  test('local: the fallback paces at floor(rate/N), floor(burst/N) and takes back its tickets', async () => {
    // Rate 12, burst 4 over 2 machines: the fallback is LONG's bucket on the
    // machine's clock, ⌊12/2⌋ = 6/min, burst ⌊4/2⌋ = 2, bound 15000 ms. A
    // token takes 10 s: the third waits 10000 ms less what passed since the
    // first, more than the 5000 ms a token takes at the undivided 12/min
    // unless 5 s pass. (At CONFIG's 30/min share it waited only while the
    // third came within 2 s of the first.)
    const pacer = await RedisPacer.connect({ url: `redis://127.0.0.1:${await freePort()}`, key: freshKey(),
      ...LONG, ratePerMinute: 12, burst: 4, fleetSize: 2, onNotice: () => {} });
    try {
      const a = await pacer.reserve();
      const b = await pacer.reserve();
      const c = await pacer.reserve();
      for (const d of [a, b]) {
        assert.equal(d.fallback, 'local');
        assert.equal(d.waitMs, 0);
      }
      assert.equal(c.fallback, 'local');
      assert.equal(c.kind, 'admitted');
      assert.ok(c.waitMs > 5000 && c.waitMs <= 10000, `burst 4 over 2 machines at 6/min: the third waits ${c.waitMs}`);
      assert.equal(await pacer.release(c.ticket), true);
      assert.equal(await pacer.release(c.ticket), false);
      assert.equal(pacer.counters().refunded, 1);
    } finally {
      await pacer.close();
    }
  });
});

describe('configuration', () => {
  test('mode disabled is answered without Redis', async () => {
    const notices = noticeLog();
    const pacer = await RedisPacer.connect({ url: `redis://127.0.0.1:${await freePort()}`, key: freshKey(),
      ratePerMinute: 0, onNotice: notices.sink });
    try {
      assert.equal(pacer.mode, 'disabled');
      const d = await pacer.reserve();
      assert.equal(d.kind, 'admitted');
      assert.equal(d.path, 'disabled');
      assert.equal(d.fallback, undefined);
      assert.equal((await pacer.admit()).kind, 'admitted');
      assert.equal(await pacer.info(), null);
      assert.equal(pacer.outage, false);
      assert.ok(!notices.kinds().includes('redis_unavailable'));
    } finally {
      await pacer.close();
    }
  });

  test('the timeout: min(wait bound, 1000) by default, a larger one cut to the bound', async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    const made = [];
    const make = async (options) => {
      const pacer = await RedisPacer.connect({ url, key: freshKey(), onNotice: () => {}, ...options });
      made.push(pacer);
      return pacer;
    };
    assert.equal((await make(CONFIG)).timeoutMs, 1000);
    assert.equal((await make({ ...CONFIG, timeoutMs: 5000 })).timeoutMs, 2000);
    assert.equal((await make({ ...CONFIG, timeoutMs: 250 })).timeoutMs, 250);
    // Idle 20000, retries 3: bound (20000 − 14000) / 8 = 750 ms.
    const short = await make({ ratePerMinute: 60, idleTimeoutMs: 20000, maxRetries: 3 });
    assert.ok(short.waitBoundMs < 1000 && short.waitBoundMs > 0);
    assert.equal(short.timeoutMs, short.waitBoundMs);
    await Promise.all(made.map((p) => p.close()));
  });

  test('bad options throw, naming the option', async () => {
    const url = 'redis://127.0.0.1:1';
    await assert.rejects(RedisPacer.connect({ url, key: 'k', engine: 'lua' }), /engine/);
    await assert.rejects(RedisPacer.connect({ url, key: 'k', onFailure: 'maybe' }), /onFailure/);
    await assert.rejects(RedisPacer.connect({ url, key: 'k', fleetSize: 0 }), /fleetSize/);
    await assert.rejects(RedisPacer.connect({ url, key: '' }), /key/);
    await assert.rejects(RedisPacer.connect({ key: 'k' }), /url/);
    await assert.rejects(RedisPacer.connect({ url, key: 'k', ratePerMinute: 601 }), /ratePerMinute/);
    assert.throws(() => new RedisPacer({ url, key: 'k' }), TypeError);
  });
});

test('the README example runs against a server with the module', { skip: moduleSkip }, async () => {
  const example = path.join(__dirname, '..', 'examples', 'fleet.mjs');
  // The README shows the example file as it is, after its header comment.
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Fleet pacing (Redis)'));
  const block = /```js\n([\s\S]*?)```/.exec(section)[1];
  const file = fs.readFileSync(example, 'utf8');
  assert.equal(block, file.slice(file.indexOf('import ')));
  const output = await new Promise((resolve, reject) => {
    execFile(process.execPath, [example], { env: { ...process.env, REDIS_URL: moduleServer.url },
      timeout: 20000 }, (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`))
      : resolve(stdout)));
  });
  assert.match(output, /^#0 admitted after 0 ms \(engine module\)$/m);
  assert.match(output, /^#1 admitted after \d+ ms \(engine module\)$/m);
  assert.match(output, /^#3 refused: 200, retry-after 2$/m);
});

describe('the drop-in module on a fleet bucket (PACER_REDIS_URL)', () => {
  const compat = require('../compat.js');
  const NAMES = ['PACER_REDIS_URL', 'PACER_REDIS_KEY', 'PACER_REDIS_ON_FAILURE', 'PACER_REDIS_FLEET_SIZE'];
  let saved;
  let lines;

  before(() => {
    saved = Object.fromEntries(NAMES.map((name) => [name, process.env[name]]));
    compat.setParentNoticeSink((line) => lines.push(line));
  });

  after(() => {
    compat.resetWsUpgradePacerForTests();
    for (const name of NAMES) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  });

  function configure(settings) {
    compat.resetWsUpgradePacerForTests();
    lines = [];
    for (const name of NAMES) delete process.env[name];
    Object.assign(process.env, settings);
  }

  test('sharedWsUpgradePacer() paces against the bucket in Redis, with the original shapes', async () => {
    const key = freshKey();
    configure({ PACER_REDIS_URL: functionServer.url, PACER_REDIS_KEY: key });
    const pacer = compat.sharedWsUpgradePacer();
    assert.equal(compat.sharedWsUpgradePacer(), pacer);
    const first = await pacer.admit();
    const second = await pacer.admit();
    for (const outcome of [first, second]) {
      const { release, ...rest } = outcome;
      assert.deepEqual(rest, { kind: 'admitted', waitedMs: 0, queued: false });
      assert.equal(typeof release, 'function');
    }
    // The host's release() returns nothing and is one-shot; the refund
    // reaches the server (asked until it shows, a bounded number of times).
    assert.equal(second.release(), undefined);
    second.release();
    let info;
    for (let asked = 0; asked < 100; asked += 1) {
      info = await serverInfo(functionServer, key);
      if (info.released >= 1) break;
    }
    assert.equal(info.admitted, 2);
    assert.equal(info.released, 1);
    assert.equal(info.burst, 10);
    assert.equal(info.rate_per_min, 60);
    assert.deepEqual(lines, []);
  });

  test('its failure policy and notices come from the settings; a bad setting keeps its default', async () => {
    configure({ PACER_REDIS_URL: `redis://127.0.0.1:${await freePort()}`, PACER_REDIS_KEY: freshKey(),
      PACER_REDIS_ON_FAILURE: 'closed', PACER_REDIS_FLEET_SIZE: 'three' });
    const pacer = compat.sharedWsUpgradePacer();
    const outcome = await pacer.admit();
    assert.equal(outcome.kind, 'refused');
    assert.deepEqual(Object.keys(outcome).sort(), ['kind', 'requiredWaitMs', 'retryAfterSeconds']);
    assert.ok(outcome.retryAfterSeconds >= 1);
    assert.equal(lines.length, 2, lines.join('\n'));
    assert.match(lines[0], /^clodex: ignoring PACER_REDIS_FLEET_SIZE=three/);
    assert.match(lines[1], /^clodex: Redis is unavailable for the bucket .*'closed'/);
  });

  test('with CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN its observe() reports to the bucket and never rejects', async () => {
    const key = freshKey();
    configure({ PACER_REDIS_URL: functionServer.url, PACER_REDIS_KEY: key });
    process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN = '10';
    try {
      const pacer = compat.sharedWsUpgradePacer();
      assert.equal((await pacer.admit()).kind, 'admitted');
      // Rate 60, floor 10 (CONFIG's lowest rate that can refuse is
      // ⌈60000/6000⌉ = 10): the bucket's first throttle, nothing counted,
      // ends the search at L = 60 − max(1, ⌊60/16⌋) = 57, within a minute of
      // the bucket's creation: paused until creation + 60000, the rate reads
      // the lowest, max(10, 10) = 10, until then.
      assert.equal(await pacer.observe('throttled'), 10);
      const info = await serverInfo(functionServer, key);
      assert.equal(info.adaptive_floor_per_min, 10);
      assert.equal(info.adaptive_ceiling_per_min, 60);
      assert.throws(() => pacer.observe('throttle'), TypeError);
      // An error reply (the key holds a list) is said once and resolves to the rate.
      const wrong = freshKey();
      const admin = await adminOf(functionServer);
      await admin.sendCommand(['LPUSH', wrong, 'x']);
      await admin.close();
      configure({ PACER_REDIS_URL: functionServer.url, PACER_REDIS_KEY: wrong });
      const broken = compat.sharedWsUpgradePacer();
      assert.equal(await broken.observe('throttled'), 60);
      assert.equal(await broken.observe('throttled'), 60);
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(lines[0], /^clodex: could not report an upgrade's answer to the fleet bucket: WRONGTYPE/);
    } finally {
      delete process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN;
    }
  });
});

// ---------------------------------------------------------------- adaptive pacing (SPEC §14)

// By hand, as test/adaptive.test.js, from the law in core/src/adaptive.rs:
// CONFIG (3 retries, hint cap 2 s: schedule 6000 ms) makes ⌈60000/6000⌉ =
// 10 the lowest rate that can refuse, so with floor 10 the rate in force is
// clamped to [10, 60]. Rate 60 with the default ceiling reads 60 while it
// searches; the first throttle with nothing counted ends the search at
// L = B − max(1, ⌊B/16⌋) with B = min(R, L) = 60: L = 60 − 3 = 57. It ends
// the first search within a minute of the bucket's creation, so it pauses:
// the origin becomes creation + 60000 and until then the rate reads the
// lowest, 10 (a test runs well within that minute; the 57 shows only after
// it). A throttle in the hold (before the origin, too) changes nothing; an
// opening in it is counted at the origin's minute (window 0) and changes
// nothing else.
// The longest deadline the bound allows (2000 ms, not the default 1000):
// these tests check the server's answers, which a loaded machine must not
// turn into the policy's.
const ADAPTIVE = { ...CONFIG, timeoutMs: 2000, adaptive: { floorPerMinute: 10 } };

describe('adaptive pacing (SPEC §14)', () => {
  /** Canned answers: an admission to RESERVE and BOOK, 59 to OBSERVE. */
  function canned(args) {
    if (args[0] === 'SCRIPT') return SHA;
    const op = args[0].startsWith('PACER.') ? args[0].slice(6).toLowerCase() : args[4];
    return op === 'observe' ? 59 : ['admitted', 0, '1.1.60000.0.0123456789abcdef', 'paced', 0];
  }

  test('the wire: ADAPT floor ceiling after the configuration (and BOOK\'s retries_left); OBSERVE key outcome', async () => {
    const config = ['60', '2', '30000', '3', 'refund'];
    const prefixes = {
      module: (op) => [`PACER.${op.toUpperCase()}`, 'k'],
      function: (op) => ['FCALL', 'pacer', '1', 'k', op],
      script: (op) => ['EVALSHA', SHA, '1', 'k', op],
    };
    for (const [engine, prefix] of Object.entries(prefixes)) {
      for (const [adaptive, adapt] of [
        [{ floorPerMinute: 10 }, ['ADAPT', '10', '0']],
        [{ floorPerMinute: 10, ceilingPerMinute: 90 }, ['ADAPT', '10', '90']],
      ]) {
        const client = recordingClient(canned);
        const pacer = await RedisPacer.connect({ client, key: 'k', ...CONFIG, adaptive, engine });
        assert.deepEqual(pacer.adaptive, { floorPerMinute: 10, ceilingPerMinute: adaptive.ceilingPerMinute ?? 60 });
        await pacer.reserve();
        await pacer.reserveOrBook(3);
        assert.equal(await pacer.observe('throttled'), 59);
        await pacer.observe('opened');
        const calls = client.sent.filter((args) => args[0] !== 'SCRIPT');
        assert.deepEqual(calls, [
          [...prefix('reserve'), ...config, ...adapt],
          [...prefix('book'), ...config, '3', ...adapt],
          [...prefix('observe'), 'throttled'],
          [...prefix('observe'), 'opened'],
        ], `${engine} ${JSON.stringify(adaptive)}`);
        await pacer.close();
      }
    }
  });

  test('adaptation off: no ADAPT, and observe sends nothing and resolves to the configured rate', async () => {
    const client = recordingClient(canned);
    const pacer = await RedisPacer.connect({ client, key: 'k', ...CONFIG, engine: 'module' });
    assert.equal(pacer.adaptive, null);
    await pacer.reserve();
    assert.equal(await pacer.observe('throttled'), 60);
    assert.equal(await pacer.observe('opened'), 60);
    assert.deepEqual(client.sent, [['PACER.RESERVE', 'k', '60', '2', '30000', '3', 'refund']]);
    await pacer.close();
  });

  test('a bad adaptive option rejects, naming it, and nothing is sent; a bad outcome rejects with a TypeError', async () => {
    const client = recordingClient(canned);
    for (const [adaptive, type, name] of [
      [null, TypeError, 'adaptive'],
      [{}, TypeError, 'adaptive.floorPerMinute'],
      [{ floorPerMinute: 0 }, RangeError, 'adaptive.floorPerMinute'],
      [{ floorPerMinute: 61 }, RangeError, 'adaptive.floorPerMinute'],
      [{ floorPerMinute: 1.5 }, RangeError, 'adaptive.floorPerMinute'],
      [{ floorPerMinute: 10, ceilingPerMinute: 59 }, RangeError, 'adaptive.ceilingPerMinute'],
      [{ floorPerMinute: 10, ceilingPerMinute: 601 }, RangeError, 'adaptive.ceilingPerMinute'],
      [{ floorPerMinute: 10, ceilingPerMinute: NaN }, RangeError, 'adaptive.ceilingPerMinute'],
    ]) {
      await assert.rejects(RedisPacer.connect({ client, key: 'k', ...CONFIG, adaptive }), (e) => {
        assert.ok(e instanceof type && e.message.includes(name), `${JSON.stringify(adaptive)}: ${e.message}`);
        return true;
      });
    }
    assert.deepEqual(client.sent, []);
    const pacer = await RedisPacer.connect({ client, key: 'k', ...ADAPTIVE, engine: 'module' });
    for (const bad of ['throttle', 'OPENED', '', undefined, 2]) {
      await assert.rejects(pacer.observe(bad), TypeError, String(bad));
    }
    assert.deepEqual(client.sent, []);
    await pacer.close();
    await assert.rejects(pacer.observe('opened'), { code: 'ERR_PACER_CLOSED' });
  });

  test('during an outage: local observes on its fallback (its share of the rate), open and closed learn nothing', async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    // fleetSize 2: the fallback paces at 30/min between ⌊10/2⌋ = 5 (raised
    // to the lowest rate that can refuse, 10) and ⌊60/2⌋ = 30; a throttle
    // with nothing counted ends its search at L = 30 − max(1, ⌊30/16⌋ = 1)
    // = 29, within a minute of the fallback's creation: paused at the
    // lowest, 10, until creation + 60000; one just after, in the hold,
    // changes nothing.
    const local = await RedisPacer.connect({ url, key: freshKey(), ...ADAPTIVE, fleetSize: 2, onNotice: () => {} });
    assert.equal(await local.observe('throttled'), 10);
    assert.equal(await local.observe('throttled'), 10);
    await local.close();
    for (const onFailure of ['open', 'closed']) {
      const pacer = await RedisPacer.connect({ url, key: freshKey(), ...ADAPTIVE, onFailure, onNotice: () => {} });
      assert.equal(await pacer.observe('throttled'), 60, onFailure);
      await pacer.close();
    }
  });

  for (const [name, server, engine] of [
    ['module', () => moduleServer, 'module'],
    ['function', () => functionServer, 'function'],
    ['script', () => plainServer, 'script'],
  ]) {
    test(`${name}: one bucket's rate in force: a throttle through one client is seen through another`,
      { skip: engine === 'module' && moduleSkip }, async () => {
        const key = freshKey();
        const a = await RedisPacer.connect({ url: server().url, key, ...ADAPTIVE });
        const b = await RedisPacer.connect({ url: server().url, key, ...ADAPTIVE });
        const fixed = await RedisPacer.connect({ url: server().url, key, ...CONFIG });
        try {
          assert.equal((await a.reserve()).kind, 'admitted');
          assert.equal(a.engine, engine);
          // The bounds are the bucket's configuration: BOOK sends them too,
          // and a client without them is another configuration.
          assert.notEqual((await b.reserveOrBook(3)).kind, undefined);
          await assert.rejects(fixed.reserve(), { code: 'ERR_PACER_REDIS' });
          assert.equal(await a.observe('throttled'), 10, 'L = 57, paused at the lowest');
          assert.equal((await b.info()).rateInForce, 10, "b reads a's throttle");
          assert.equal(await b.observe('throttled'), 10, 'within the hold: nothing changes');
          assert.equal(await b.observe('opened'), 10);
          const info = await a.info();
          assert.equal(info.adaptiveFloorPerMin, 10);
          assert.equal(info.adaptiveCeilingPerMin, 60, 'the ceiling left out is the rate');
          // L = 60 − 3 = 57 (nothing counted), probing, again; the opening
          // counted at max(now, origin) = the origin, in its minute (window
          // 0; the search counted nothing, so the one before holds 0); the
          // pause: the origin a minute after the creation, still ahead.
          assert.deepEqual([info.limitPerMin, info.probing, info.again, info.opened, info.openedBefore, info.rateInForce],
            [57, 1, 1, 1, 0, 10]);
          assert.equal(info.window, 0);
          assert.ok(info.nowMs - info.originMs >= -60000 && info.nowMs - info.originMs < 0,
            `now − origin ${info.nowMs - info.originMs}`);
          assert.equal(a.counters().fallbacks + b.counters().fallbacks, 0);
        } finally {
          await Promise.all([a.close(), b.close(), fixed.close()]);
        }
      });
  }
});

// ---------------------------------------------------------------- redeem issues a fresh ticket

test('an admitting redeem carries the ticket of the reply\'s item 3 (same key); the spent booking is not released', async () => {
  // Canned replies shaped as docs/redis.md gives them: BOOK books, REDEEM
  // admits with a ticket text other than the booking's, RELEASE refunds.
  const BOOKING = '7.3.60000.5000.0123456789abcdef';
  const FRESH = '8.4.60000.0.fedcba9876543210';
  const client = recordingClient((args) => {
    const op = args[0].slice('PACER.'.length);
    if (op === 'BOOK') return ['booked', 2, BOOKING, 5000, 0];
    if (op === 'REDEEM') return ['admitted', 0, FRESH, 'booked', 0];
    if (op === 'RELEASE') return 1;
    throw new Error(`unexpected ${args.join(' ')}`);
  });
  const pacer = await RedisPacer.connect({ client, key: 'k', ...CONFIG, engine: 'module' });
  try {
    const booked = await pacer.reserveOrBook(3);
    assert.equal(booked.kind, 'booked');
    assert.equal(booked.booking.ticket.text, BOOKING);
    const admitted = await pacer.redeem(booked.booking);
    assert.equal(admitted.kind, 'admitted');
    assert.equal(admitted.path, 'booked');
    assert.ok(RedisTicket.isRedisTicket(admitted.ticket));
    assert.equal(admitted.ticket.text, FRESH);
    assert.equal(admitted.ticket.key, 'k');
    assert.notEqual(admitted.ticket, booked.booking.ticket);
    // The booking was spent by the redemption: refused here, nothing sent.
    const sentBefore = client.sent.length;
    assert.equal(await pacer.release(booked.booking.ticket), false);
    await assert.rejects(pacer.redeem(booked.booking), RangeError);
    assert.equal(client.sent.length, sentBefore);
    // The admission's own ticket is released on the server, by its text.
    assert.equal(await pacer.release(admitted.ticket), true);
    assert.deepEqual(client.sent.at(-1), ['PACER.RELEASE', 'k', FRESH]);
  } finally {
    await pacer.close();
  }
});
