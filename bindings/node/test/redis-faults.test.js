'use strict';
// RedisPacer when Redis fails or answers oddly (docs/fleet-clients.md,
// "Which replies are failures", "One deadline per call", "Cancellation"):
// real redis-servers (test/redis-server.js) where the state can be made,
// stand-in clients where a reply must be held or shaped. Only the deadline
// tests read a clock, against the timeout plus a slack of 1000 ms.
const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { createClient, ErrorReply } = require('redis');
const { RedisPacer, Ticket } = require('..');
const { RedisServer } = require('./redis-server.js');
const {
  SHA, CONFIG, HAVE_MODULE, moduleSkip, freshKey, delay, until, onServer, loadFunction, serverInfo, noticeLog,
  recordingClient, assertPolicyAnswer,
} = require('./redis-support.js');

const SLACK_MS = 1000;

/** The server's own count of admissions on `key`, less its releases. */
async function heldOnServer(server, key) {
  const info = await serverInfo(server, key);
  return { admitted: info.admitted, released: info.released, held: info.admitted - info.released };
}

/** A loopback server that accepts connections, reads and never writes. */
async function silentServer() {
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', () => {});
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${server.address().port}`,
    stop: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A plain server and, when the module is built, one with the module
 * (`moduleArgs`: more arguments of it), for the suite this is called in. */
function plainAndModuleServers(moduleArgs = []) {
  const servers = { plain: null, module: null };
  before(async () => {
    [servers.plain, servers.module] = await Promise.all([
      RedisServer.start(),
      HAVE_MODULE ? RedisServer.start({ module: true, args: moduleArgs }) : null,
    ]);
  });
  after(async () => {
    await Promise.all([servers.plain?.stop(), servers.module?.stop()]);
  });
  return servers;
}

describe('a replica answers writes with READONLY: the policy answers', () => {
  let primary;
  let replica;

  before(async () => {
    // The primary sends its data to a replica at once, not after 5 s.
    [primary, replica] = await Promise.all([RedisServer.start({ args: ['--repl-diskless-sync-delay', '0'] }),
      RedisServer.start()]);
    await loadFunction(primary);
    await onServer(replica, ['REPLICAOF', '127.0.0.1', String(primary.port)]);
    // The replica has synced once it has the primary's function library.
    await until('the replica synced', async () => {
      const [replication, libraries] = await onServer(replica, ['INFO', 'replication'],
        ['FUNCTION', 'LIST', 'LIBRARYNAME', 'pacer']);
      return /master_link_status:up/.test(replication) && libraries.length === 1;
    });
  });

  after(async () => {
    await Promise.all([replica?.stop(), primary?.stop()]);
  });

  // The script's write meets `ERR READONLY …` (Redis prefixes the error a
  // script's redis.call raised); FCALL of a function that writes meets
  // `READONLY …`; auto finds the function the replica has.
  for (const engine of ['script', 'function', 'auto']) {
    for (const policy of ['closed', 'local']) {
      test(`engine ${engine}, onFailure ${policy}`, async () => {
        const notices = noticeLog();
        const pacer = await RedisPacer.connect({ url: replica.url, key: freshKey(), ...CONFIG, engine,
          onFailure: policy, onNotice: notices.sink });
        try {
          assertPolicyAnswer(policy, await pacer.reserve(), Ticket);
          assert.equal(pacer.outage, true);
          assert.deepEqual(notices.kinds(), ['redis_unavailable']);
          assert.match(notices.log[0].text, /READONLY/);
        } finally {
          await pacer.close();
        }
      });
    }
  }
});

describe('the engine gone under a client: found again, the call retried once', () => {
  const servers = plainAndModuleServers(['--enable-module-command', 'local']);

  test('FUNCTION DELETE pacer: auto goes on with the script, every call answered by the server', async () => {
    await loadFunction(servers.plain);
    const key = freshKey();
    const pacer = await RedisPacer.connect({ url: servers.plain.url, key, ...CONFIG, onFailure: 'closed' });
    try {
      for (let i = 0; i < 2; i += 1) assert.equal((await pacer.reserve()).fallback, undefined);
      assert.equal(pacer.engine, 'function');
      await onServer(servers.plain, ['FUNCTION', 'DELETE', 'pacer']);
      for (let i = 0; i < 2; i += 1) {
        const d = await pacer.reserve();
        assert.equal(d.fallback, undefined, `call ${i + 3} after the function was deleted`);
        assert.equal(d.kind, 'admitted');
      }
      assert.equal(pacer.engine, 'script');
      assert.equal(pacer.outage, false);
      assert.equal((await serverInfo(servers.plain, key)).admitted, 4);
    } finally {
      await pacer.close();
    }
  });

  test('FUNCTION DELETE pacer with engine function forced: an outage, not an error', async () => {
    await loadFunction(servers.plain);
    const key = freshKey();
    const pacer = await RedisPacer.connect({ url: servers.plain.url, key, ...CONFIG, engine: 'function',
      onFailure: 'closed', onNotice: () => {} });
    try {
      assert.equal((await pacer.reserve()).fallback, undefined);
      await onServer(servers.plain, ['FUNCTION', 'DELETE', 'pacer']);
      assertPolicyAnswer('closed', await pacer.reserve(), Ticket);
      assert.equal(pacer.outage, true);
    } finally {
      await pacer.close();
    }
  });

  test('MODULE UNLOAD pacer: auto goes on with the function', { skip: moduleSkip }, async () => {
    await loadFunction(servers.module);
    const key = freshKey();
    const pacer = await RedisPacer.connect({ url: servers.module.url, key, ...CONFIG, onFailure: 'closed' });
    try {
      assert.equal((await pacer.reserve()).fallback, undefined);
      assert.equal(pacer.engine, 'module');
      await onServer(servers.module, ['MODULE', 'UNLOAD', 'pacer']);
      const d = await pacer.reserve();
      assert.equal(d.fallback, undefined);
      assert.equal(d.kind, 'admitted');
      assert.equal(pacer.engine, 'function');
      assert.equal((await serverInfo(servers.module, key)).admitted, 2);
    } finally {
      await pacer.close();
    }
  });

  test('an engine change again on the retry after the reload: an outage', async () => {
    let scriptLoads = 0;
    const client = recordingClient((args) => {
      if (args[0] === 'SCRIPT') {
        scriptLoads += 1;
        return SHA;
      }
      throw new ErrorReply('NOSCRIPT No matching script. Please use EVAL.');
    });
    const pacer = await RedisPacer.connect({ client, key: 'k', ...CONFIG, engine: 'script', onFailure: 'closed',
      onNotice: () => {} });
    assertPolicyAnswer('closed', await pacer.reserve(), Ticket);
    // The retry carries the script (EVAL), and is the only one.
    assert.deepEqual(client.sent.map((args) => args[0]), ['SCRIPT', 'EVALSHA', 'SCRIPT', 'EVAL']);
    assert.equal(scriptLoads, 2);
    await pacer.close();
  });
});

describe('out of memory (OOM): the policy answers', () => {
  const servers = plainAndModuleServers();

  before(async () => {
    await loadFunction(servers.plain);
    // Any server uses more than 1 byte: every write is refused.
    await Promise.all([servers.plain, servers.module].filter(Boolean)
      .map((s) => onServer(s, ['CONFIG', 'SET', 'maxmemory', '1'])));
  });

  for (const engine of ['script', 'function', 'module']) {
    test(`engine ${engine}`, { skip: engine === 'module' && moduleSkip }, async () => {
      const notices = noticeLog();
      const url = engine === 'module' ? servers.module.url : servers.plain.url;
      const pacer = await RedisPacer.connect({ url, key: freshKey(), ...CONFIG, engine, onFailure: 'closed',
        onNotice: notices.sink });
      try {
        assertPolicyAnswer('closed', await pacer.reserve(), Ticket);
        assert.match(notices.log[0].text, /OOM/);
      } finally {
        await pacer.close();
      }
    });
  }
});

describe('one deadline per call', () => {
  let silent;

  before(async () => {
    silent = await silentServer();
  });

  after(async () => {
    await silent?.stop();
  });

  test('a server that accepts and never answers: connect and the call end as an outage', async () => {
    const notices = noticeLog();
    const startedAt = performance.now();
    const pacer = await RedisPacer.connect({ url: silent.url, key: freshKey(), ...CONFIG, timeoutMs: 300,
      onFailure: 'closed', onNotice: notices.sink });
    const connectMs = performance.now() - startedAt;
    try {
      const callAt = performance.now();
      const d = await pacer.reserve();
      const callMs = performance.now() - callAt;
      assertPolicyAnswer('closed', d, Ticket);
      assert.equal(pacer.outage, true);
      assert.deepEqual(notices.kinds(), ['redis_unavailable']);
      assert.ok(connectMs < 300 + SLACK_MS, `connect took ${connectMs} ms`);
      assert.ok(callMs < 300 + SLACK_MS, `the call took ${callMs} ms`);
    } finally {
      await pacer.close();
    }
  });

  test('detection, loading the script and the call share the deadline', async () => {
    // A ready client whose every reply comes 120 ms after the command: auto
    // asks MODULE LIST, FUNCTION LIST, then SCRIPT LOAD and EVALSHA, 480 ms
    // in all, past a 300 ms deadline.
    const client = recordingClient(async (args) => {
      await delay(120);
      if (args[0] === 'SCRIPT') return SHA;
      if (args[0] === 'EVALSHA') return ['admitted', 0, '0.1.60000.0.0123456789abcdef', 'paced', 0];
      return [];
    });
    const pacer = await RedisPacer.connect({ client, key: freshKey(), ...CONFIG, timeoutMs: 300,
      onFailure: 'closed', onNotice: () => {} });
    try {
      const callAt = performance.now();
      const d = await pacer.reserve();
      const callMs = performance.now() - callAt;
      assertPolicyAnswer('closed', d, Ticket);
      assert.ok(callMs < 300 + SLACK_MS, `the call took ${callMs} ms`);
    } finally {
      await pacer.close();
    }
  });

  test('50 reserves while the client is not ready: each answered, no MaxListenersExceededWarning', async () => {
    const warnings = [];
    const onWarning = (warning) => warnings.push(warning);
    process.on('warning', onWarning);
    const pacer = await RedisPacer.connect({ url: silent.url, key: freshKey(), ...CONFIG, timeoutMs: 300,
      onFailure: 'closed', onNotice: () => {} });
    try {
      const answers = await Promise.all(Array.from({ length: 50 }, () => pacer.reserve()));
      for (const d of answers) assertPolicyAnswer('closed', d, Ticket);
      // A warning is emitted on a later tick.
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(warnings.map((w) => `${w.name}: ${w.message}`), []);
    } finally {
      process.off('warning', onWarning);
      await pacer.close();
    }
  });
});

describe('replies no engine gives are errors, never admissions', () => {
  for (const [op, reply] of [
    ['reserve', ['admitted', 'soon', '0.1.60000.0.0123456789abcdef', 'paced', 0]],
    ['reserve', ['admitted', -5, '0.1.60000.0.0123456789abcdef', 'paced', 0]],
    ['reserve', ['admitted', 0, '0.1.60000.0.0123456789abcdef', 'sideways', 0]],
    ['reserve', ['admitted', 0, 7, 'paced', 0]],
    ['reserve', ['admitted']],
    ['reserve', ['refused', 'later', 3000, 0]],
    ['reserve', ['maybe', 1]],
    ['reserve', 'OK'],
    ['book', ['booked', 2, null, 5000, 0]],
    ['book', ['booked', 2, '0.1.60000.5000.0123456789abcdef', 'soon', 0]],
    ['release', 'yes'],
    ['release', 2],
  ]) {
    test(`${op} answered ${JSON.stringify(reply)}`, async () => {
      const client = recordingClient((args) => (args[0] === `PACER.${op.toUpperCase()}`
        ? reply : ['admitted', 0, '0.1.60000.0.0123456789abcdef', 'paced', 0]));
      const pacer = await RedisPacer.connect({ client, key: 'k', ...CONFIG, engine: 'module', onFailure: 'open' });
      try {
        const call = op === 'reserve' ? () => pacer.reserve()
          : op === 'book' ? () => pacer.reserveOrBook(3)
            : async () => pacer.release((await pacer.reserve()).ticket);
        await assert.rejects(call(), (error) => {
          assert.equal(error.code, 'ERR_PACER_REDIS');
          assert.ok(error.message.includes(JSON.stringify(reply)), error.message);
          return true;
        });
        assert.equal(pacer.counters().fallbacks, 0);
      } finally {
        await pacer.close();
      }
    });
  }
});

describe('cancellation at any point of admit() is released', () => {
  test('an abort while the reply is on its way rejects at once; the ticket that comes back is released', async () => {
    let deliver;
    const client = recordingClient((args) => (args[0] === 'PACER.RESERVE'
      ? new Promise((resolve) => { deliver = resolve; })
      : 1));
    const pacer = await RedisPacer.connect({ client, key: 'k', ...CONFIG, engine: 'module' });
    const controller = new AbortController();
    let settled = null;
    const admitting = pacer.admit({ signal: controller.signal })
      .then((outcome) => { settled = outcome; }, (error) => { settled = error; });
    await until('the reserve was sent', () => deliver !== undefined);
    const reason = new Error('cancelled');
    controller.abort(reason);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(settled, reason, 'admit() did not reject with the reason while the reply was on its way');
    await admitting;
    // close() waits for the release of what the late reply admits.
    const closing = pacer.close();
    deliver(['admitted', 0, '0.1.60000.0.0123456789abcdef', 'paced', 0]);
    await closing;
    assert.deepEqual(client.sent, [
      ['PACER.RESERVE', 'k', '60', '2', '30000', '3', 'refund'],
      ['PACER.RELEASE', 'k', '0.1.60000.0.0123456789abcdef'],
    ]);
  });

  test('aborts at random points against a real server: admitted − released = the admissions kept', async () => {
    const server = await RedisServer.start({ module: HAVE_MODULE });
    // Every reply held 15 ms on its way, so aborts land before the send,
    // while the reply travels, and during the wait. Rate 600, burst 3, idle
    // 60000, retries 2: the wait bound is 9000 ms, a timeout of 5000 ms.
    const inner = createClient({ url: server.url });
    inner.on('error', () => {});
    await inner.connect();
    const client = {
      get isOpen() { return inner.isOpen; },
      get isReady() { return inner.isReady; },
      on: (...args) => inner.on(...args),
      off: (...args) => inner.off(...args),
      connect: () => inner.connect(),
      sendCommand: (args) => inner.sendCommand(args).then(
        async (reply) => { await delay(15); return reply; },
        async (error) => { await delay(15); throw error; },
      ),
    };
    const key = freshKey();
    const pacer = await RedisPacer.connect({ client, key, ratePerMinute: 600, burst: 3, idleTimeoutMs: 60000,
      maxRetries: 2, timeoutMs: 5000, onFailure: 'closed' });
    // A fixed sequence (xorshift32), so a failure repeats.
    let state = 38;
    const random = () => {
      state ^= state << 13; state >>>= 0;
      state ^= state >>> 17;
      state ^= state << 5; state >>>= 0;
      return state / 2 ** 32;
    };
    try {
      let kept = 0;
      let cancelled = 0;
      for (let round = 0; round < 4; round += 1) {
        await Promise.all(Array.from({ length: 10 }, async () => {
          const controller = new AbortController();
          const abortAt = random() < 0.8 ? Math.floor(random() * 80) : null;
          const reason = new Error('cancelled');
          const timer = abortAt === null ? null : setTimeout(() => controller.abort(reason), abortAt);
          try {
            const outcome = await pacer.admit({ signal: controller.signal });
            if (outcome.kind === 'admitted' && outcome.fallback === undefined) kept += 1;
          } catch (error) {
            assert.equal(error, reason);
            cancelled += 1;
          } finally {
            clearTimeout(timer);
          }
        }));
      }
      await pacer.close();
      assert.ok(cancelled > 0 && kept > 0, `kept ${kept}, cancelled ${cancelled}`);
      const { admitted, released, held } = await heldOnServer(server, key);
      const { fallbacks } = pacer.counters();
      // A call past its deadline (none is expected in 5000 ms) may leave a
      // debit no one holds; otherwise the server holds exactly what was kept.
      assert.ok(held >= kept && held <= kept + fallbacks,
        `admitted ${admitted}, released ${released}, kept ${kept}, fallbacks ${fallbacks}`);
    } finally {
      await pacer.close();
      await inner.close();
      await server.stop();
    }
  });
});
