'use strict';
// RedisPacer on a real Redis Cluster (test/redis-cluster.js: three primaries,
// three replicas): node-redis's cluster client routes each call by the
// bucket's key and follows MOVED and ASK; the engine is asked of every
// primary and the script loaded on each. Every expectation is derived by
// hand from the configuration (LONG and SLOW below where the server's real
// clock decides a wait or a refusal; CONFIG, rate 60/min, burst 2, idle
// 30000, retries 3, where only a burst's calls are asked) and each key's
// counts are read back on the primary that owns it. Nothing here depends on
// how fast the machine runs: kinds, waits within their bounds and counts are
// checked, never durations, and each sequence holds unless seconds pass.
const { test, before, after, describe } = require('node:test');
const assert = require('node:assert/strict');
const diagnostics = require('node:diagnostics_channel');
const { createClient, createCluster } = require('redis');
const { RedisPacer, RedisTicket } = require('..');
const { RedisCluster } = require('./redis-cluster.js');
const { freePort } = require('./redis-server.js');
const {
  CONFIG, LONG, LONG_HINT_CAP, moduleSkip,
} = require('./redis-support.js');

/** The MOVED and ASK replies node-redis's cluster clients followed while
 * `fn` ran (it publishes each on its 'node-redis:error' channel). */
async function redirectsDuring(fn) {
  const seen = { moved: 0, ask: 0 };
  const listener = ({ error, origin, internal }) => {
    if (origin !== 'cluster' || !internal) return;
    if (error.message.startsWith('MOVED')) seen.moved += 1;
    if (error.message.startsWith('ASK')) seen.ask += 1;
  };
  diagnostics.subscribe('node-redis:error', listener);
  try {
    const result = await fn();
    return { result, ...seen };
  } finally {
    diagnostics.unsubscribe('node-redis:error', listener);
  }
}

async function clusterClient(cluster) {
  const client = createCluster({ rootNodes: [{ url: cluster.nodes[0].url }, { url: cluster.nodes[1].url }] });
  client.on('error', () => {});
  // A dozen pacers share it, each listening for its 'connect' and 'node-ready'.
  client.setMaxListeners(50);
  await client.connect();
  return client;
}

/** One bucket's sequence of reserves on a LONG pacer (redis-support.js),
 * each right after the last: two from the burst admitted at once, the third
 * after a wait of at most one token (10000 ms), the fourth refused with a
 * hint within the cap, whatever the machine's speed. One ticket (the
 * third's) is released. Resolves to what the client was answered, counted. */
async function burstThenRefusal(pacer) {
  const answers = [];
  for (let i = 0; i < 2; i += 1) answers.push(await pacer.reserve());
  for (const d of answers) {
    assert.equal(d.kind, 'admitted');
    assert.equal(d.waitMs, 0);
    assert.equal(d.path, 'paced');
    assert.equal(d.fallback, undefined);
    assert.ok(RedisTicket.isRedisTicket(d.ticket));
    assert.equal(d.ticket.key, pacer.key);
  }
  const third = await pacer.reserve();
  answers.push(third);
  assert.equal(third.kind, 'admitted');
  assert.equal(third.fallback, undefined);
  assert.ok(third.waitMs > 0 && third.waitMs <= 10000, `the third waits ${third.waitMs} ms`);
  const refusal = await pacer.reserve();
  assert.equal(refusal.fallback, undefined);
  assert.equal(refusal.kind, 'refused', `${pacer.key}: the fourth, once the burst and the bound were spent`);
  // Its need is past the 15000 ms bound, so ⌈need/1000⌉ is past the cap:
  // the hint is the cap.
  assert.ok(refusal.requiredWaitMs > pacer.waitBoundMs);
  assert.equal(refusal.retryAfterSeconds, LONG_HINT_CAP);
  assert.equal(await pacer.release(third.ticket), true);
  return { admitted: 3, admittedAfterWait: 1, refused: 1, released: 1 };
}

// Rate 1/min on LONG's budget: burst 2, idle 300000, retries 5, wait bound
// 15000 ms, hint cap 15 s; refusing, since 5 retries of 15 s span 75000 ms,
// past the 60000 ms a token takes (SPEC §3). Once the burst is spent a call
// needs 60000 ms less what passed since the first, past the bound (refused,
// with the hint cap, 15 s, as ⌈required/1000⌉ ≥ 15) unless 45 s pass, a
// slot's move or a failover between the calls included; a refunded token
// admits at once. (At 10/min the margin was 4 s.)
const SLOW = { ...LONG, ratePerMinute: 1 };

/** Spends a SLOW bucket's burst: two admitted at once. Resolves to them. */
async function burstThenSpent(pacer) {
  const answers = [await pacer.reserve(), await pacer.reserve()];
  for (const d of answers) {
    assert.equal(d.kind, 'admitted');
    assert.equal(d.waitMs, 0);
    assert.equal(d.fallback, undefined);
  }
  return answers;
}

/** A SLOW bucket's answer once its burst is spent: refused by the server,
 * a token (60000 ms) less what passed away, with the hint cap. */
function assertSpent(pacer, d) {
  assert.equal(d.kind, 'refused');
  assert.equal(d.fallback, undefined);
  assert.ok(d.requiredWaitMs > pacer.waitBoundMs && d.requiredWaitMs <= 60000, `required ${d.requiredWaitMs} ms`);
  assert.equal(d.retryAfterSeconds, LONG_HINT_CAP);
}

/** The owning primary's counts of `key` equal `expected`. */
async function assertCounted(cluster, key, expected) {
  const info = await cluster.info(key);
  assert.deepEqual({
    admitted: info.admitted, admittedAfterWait: info.admitted_after_wait, refused: info.refused,
    released: info.released,
  }, expected, `the counts of ${key} on its primary`);
}

/** Twelve buckets, four on each primary: each runs `burstThenRefusal`
 * through its own pacer (made by `connect(key)`), all at once; every key's
 * counts are read back on its owner. */
async function twelveBuckets(cluster, prefix, engine, connect) {
  const byPrimary = await cluster.keysPerPrimary(prefix, 4);
  assert.equal(byPrimary.size, 3);
  const keys = [...byPrimary.values()].flat();
  await Promise.all(keys.map(async (key) => {
    const pacer = await connect(key);
    try {
      const expected = await burstThenRefusal(pacer);
      assert.equal(pacer.engine, engine);
      assert.equal(pacer.counters().fallbacks, 0);
      await assertCounted(cluster, key, expected);
    } finally {
      await pacer.close();
    }
  }));
}

test('rootNodes: one of url, client and rootNodes; seeds are URLs or client options', async () => {
  const base = { key: 'fleet:options', ...CONFIG };
  for (const options of [
    { ...base, url: 'redis://127.0.0.1:1', rootNodes: ['redis://127.0.0.1:1'] },
    { ...base, client: createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:1' }] }), rootNodes: ['redis://x'] },
    { ...base },
  ]) {
    await assert.rejects(RedisPacer.connect(options), { name: 'TypeError', message: /exactly one of url/ });
  }
  for (const rootNodes of [[], 'redis://127.0.0.1:1', [7000], [''], [null]]) {
    await assert.rejects(RedisPacer.connect({ ...base, rootNodes }), { name: 'TypeError', message: /rootNodes must/ });
  }
});

test('rootNodes none of which answers: an outage the policy answers, not an error', async () => {
  const port = await freePort();
  const pacer = await RedisPacer.connect({ rootNodes: [`redis://127.0.0.1:${port}`], key: 'fleet:nowhere', ...CONFIG,
    onFailure: 'closed', retryAfterMs: 0, onNotice: () => {} });
  try {
    // The second call tries to connect again (a cluster client that failed
    // to connect is closed), and fails again the same way.
    for (let i = 0; i < 2; i += 1) {
      const d = await pacer.reserve();
      assert.equal(d.fallback, 'closed');
      assert.equal(d.kind, 'refused');
      assert.equal(pacer.outage, true);
    }
    assert.equal(pacer.counters().fallbacks, 2);
  } finally {
    await pacer.close();
  }
});

describe('a cluster whose every node has the module', { skip: moduleSkip }, () => {
  let cluster;
  let client;

  before(async () => {
    cluster = await RedisCluster.start({ module: true });
    client = await clusterClient(cluster);
  });

  after(async () => {
    try {
      await client?.close();
    } finally {
      await cluster?.stop();
    }
  });

  test('twelve buckets on three primaries: module; each counted on its own primary', async () => {
    await twelveBuckets(cluster, 'fleet:module:', 'module',
      (key) => RedisPacer.connect({ client, key, ...LONG }));
  });

  test('rootNodes: the pacer makes its cluster client from seed nodes and closes it', async () => {
    const [key] = (await cluster.keysPerPrimary('fleet:seeded:', 1)).get(cluster.nodes[2].port);
    const pacer = await RedisPacer.connect({ rootNodes: [cluster.nodes[0].url, { url: cluster.nodes[4].url }],
      key, ...LONG });
    const expected = await burstThenRefusal(pacer);
    assert.equal(pacer.engine, 'module');
    await assertCounted(cluster, key, expected);
    await pacer.close();
    await assert.rejects(pacer.reserve(), { code: 'ERR_PACER_CLOSED' });
  });

  test('a booking on each primary is redeemed (not yet) and released on its own key\'s shard', async () => {
    const keys = [...(await cluster.keysPerPrimary('fleet:booking:', 1)).values()].flat();
    assert.equal(keys.length, 3);
    await Promise.all(keys.map(async (key) => {
      const pacer = await RedisPacer.connect({ client, key, ...SLOW });
      try {
        await burstThenSpent(pacer);
        // The next token is 60000 ms less what passed away: past the 15000 ms
        // bound unless 45 s pass, within the 3 retries' horizon, 15000 +
        // 3·15000 = 60000 ms: booked, its slot 60000 ms after the first;
        // redeemed now, not yet. Both hints ⌈(slot − bound − now)/1000⌉,
        // capped: 15 s unless 30 s pass.
        const booked = await pacer.reserveOrBook(3);
        assert.equal(booked.kind, 'booked');
        assert.equal(booked.fallback, undefined);
        assert.equal(booked.booking.ticket.key, key);
        assert.equal(booked.retryAfterSeconds, LONG_HINT_CAP);
        const notYet = await pacer.redeem(booked.booking);
        assert.equal(notYet.kind, 'booked');
        assert.equal(notYet.fallback, undefined);
        assert.equal(notYet.retryAfterSeconds, LONG_HINT_CAP);
        assert.equal(await pacer.release(booked.booking.ticket), true);
        const info = await cluster.info(key);
        assert.deepEqual([info.admitted, info.booked, info.released], [2, 1, 1], `the counts of ${key}`);
      } finally {
        await pacer.close();
      }
    }));
  });

  test('a slot moved to another primary between calls, and one call in the MIGRATING/IMPORTING window: '
    + 'MOVED and ASK followed, the counts continue', async () => {
    const key = 'fleet:moving';
    const pacer = await RedisPacer.connect({ client, key, ...SLOW, timeoutMs: 2000 });
    try {
      const [first] = await burstThenSpent(pacer);
      const source = await cluster.ownerOf(key);
      const [one, two] = (await cluster.primaries()).filter((p) => p.node !== source).map((p) => p.node);
      const slot = await cluster.slotOf(key);

      // Moved whole: the next call meets MOVED on the old owner. The bucket
      // went with the key: its burst is spent (a new bucket would admit).
      await cluster.moveSlot(slot, one);
      assert.equal(await cluster.ownerOf(key), one);
      const afterMove = await redirectsDuring(() => pacer.reserve());
      assertSpent(pacer, afterMove.result);
      assert.equal(afterMove.moved, 1, 'one MOVED followed');
      await assertCounted(cluster, key, { admitted: 2, admittedAfterWait: 0, refused: 1, released: 0 });

      // Moved again, a call made while the key is on the target and the slot
      // still the source's (MIGRATING there, IMPORTING on the target): the
      // source answers ASK and the client asks the target.
      let inWindow;
      await cluster.moveSlot(slot, two, async () => {
        inWindow = await redirectsDuring(() => pacer.release(first.ticket));
      });
      assert.equal(inWindow.result, true, 'the release refunded on the importing primary');
      assert.equal(inWindow.ask, 1, 'one ASK followed');
      assert.equal(inWindow.moved, 0);
      // The refunded token admits the next call at once.
      const afterAsk = await redirectsDuring(() => pacer.reserve());
      assert.equal(afterAsk.result.kind, 'admitted');
      assert.equal(afterAsk.result.waitMs, 0);
      assert.equal(afterAsk.result.fallback, undefined);
      assert.equal(afterAsk.moved, 1);
      await assertCounted(cluster, key, { admitted: 3, admittedAfterWait: 0, refused: 1, released: 1 });
      assert.equal(pacer.counters().fallbacks, 0);
    } finally {
      await pacer.close();
    }
  });

  test('a failover of the bucket\'s primary between calls: the client follows, the counts continue', async () => {
    const key = 'fleet:failing-over';
    const pacer = await RedisPacer.connect({ client, key, ...SLOW, timeoutMs: 2000 });
    try {
      const [first] = await burstThenSpent(pacer);
      const old = await cluster.ownerOf(key);
      const promoted = await cluster.failover(old);
      assert.equal(await cluster.ownerOf(key), promoted);
      const afterFailover = await redirectsDuring(() => pacer.reserve());
      assertSpent(pacer, afterFailover.result);
      assert.equal(afterFailover.moved, 1, 'the demoted primary answered MOVED once');
      assert.equal(await pacer.release(first.ticket), true);
      const d = await pacer.reserve();
      assert.equal(d.kind, 'admitted');
      assert.equal(d.waitMs, 0);
      await assertCounted(cluster, key, { admitted: 3, admittedAfterWait: 0, refused: 1, released: 1 });
      assert.equal(pacer.counters().fallbacks, 0);
      assert.equal(pacer.engine, 'module');
    } finally {
      await pacer.close();
    }
  });
});

describe('a cluster where one primary lacks the module', { skip: moduleSkip }, () => {
  let cluster;
  let client;
  let bare;

  before(async () => {
    // Nodes 0-2 are made the primaries: node 0 lacks the module.
    cluster = await RedisCluster.start({ module: [1, 2, 3, 4, 5] });
    client = await clusterClient(cluster);
    bare = cluster.nodes[0];
  });

  after(async () => {
    try {
      await client?.close();
    } finally {
      await cluster?.stop();
    }
  });

  test('no function: auto takes the script (loaded on every primary); each call counted by its key\'s shard',
    async () => {
      await twelveBuckets(cluster, 'fleet:partial:', 'script',
        (key) => RedisPacer.connect({ client, key, ...LONG }));
    });

  test('the module forced: a call on a key of the primary without it is an outage the policy answers, '
    + 'counted by no shard', async () => {
    const [onBare] = (await cluster.keysPerPrimary('fleet:forced:', 1)).get(bare.port);
    const [onOther] = (await cluster.keysPerPrimary('fleet:forced:', 1)).get(cluster.nodes[1].port);
    for (const onFailure of ['local', 'closed']) {
      const pacer = await RedisPacer.connect({ client, key: onBare, ...CONFIG, engine: 'module', onFailure,
        onNotice: () => {} });
      try {
        const d = await pacer.reserve();
        assert.equal(d.fallback, onFailure);
        assert.equal(d.kind, onFailure === 'local' ? 'admitted' : 'refused');
        assert.equal(pacer.outage, true);
      } finally {
        await pacer.close();
      }
    }
    assert.equal(await bare.send(['EXISTS', onBare]), 0, 'no shard holds the bucket');
    // On a primary that has it, the forced module answers.
    const pacer = await RedisPacer.connect({ client, key: onOther, ...CONFIG, engine: 'module' });
    try {
      const d = await pacer.reserve();
      assert.equal(d.kind, 'admitted');
      assert.equal(d.fallback, undefined);
      await assertCounted(cluster, onOther, { admitted: 1, admittedAfterWait: 0, refused: 0, released: 0 });
    } finally {
      await pacer.close();
    }
  });

  test('a plain client on a node that does not own the key: MOVED reaches the caller as a pacer error',
    async () => {
      const [key] = (await cluster.keysPerPrimary('fleet:plain:', 1)).get(bare.port);
      const plain = createClient({ url: cluster.nodes[1].url });
      plain.on('error', () => {});
      await plain.connect();
      const pacer = await RedisPacer.connect({ client: plain, key, ...CONFIG });
      try {
        await assert.rejects(pacer.reserve(), (error) => {
          assert.equal(error.code, 'ERR_PACER_REDIS');
          assert.match(error.message, /^MOVED \d+ 127\.0\.0\.1:\d+$/);
          return true;
        });
        assert.equal(pacer.outage, false);
        assert.equal(pacer.counters().fallbacks, 0);
        const slot = await cluster.slotOf(key);
        for (const node of cluster.nodes) {
          assert.equal(await node.send(['CLUSTER', 'COUNTKEYSINSLOT', slot]), 0, 'no node holds the bucket');
        }
      } finally {
        await pacer.close();
        await plain.close();
      }
    });

  describe('the function library loaded on every primary', () => {
    before(() => cluster.loadFunction());

    test('auto takes the function (the module is not on every primary); seeded from rootNodes', async () => {
      await twelveBuckets(cluster, 'fleet:function:', 'function',
        (key) => RedisPacer.connect({ rootNodes: [cluster.nodes[2].url], key, ...LONG }));
    });

    test('the script forced: EVALSHA finds it on every shard', async () => {
      for (const { node } of await cluster.primaries()) await node.send(['SCRIPT', 'FLUSH']);
      await twelveBuckets(cluster, 'fleet:evalsha:', 'script',
        (key) => RedisPacer.connect({ client, key, ...LONG, engine: 'script' }));
    });

    test('the script cache emptied on every primary: NOSCRIPT loads it on each again and retries once',
      async () => {
        const keys = [...(await cluster.keysPerPrimary('fleet:noscript:', 1)).values()].flat();
        const pacers = await Promise.all(keys.map((key) => RedisPacer.connect({ client, key, ...CONFIG,
          engine: 'script' })));
        try {
          for (const pacer of pacers) assert.equal((await pacer.reserve()).fallback, undefined);
          for (const { node } of await cluster.primaries()) await node.send(['SCRIPT', 'FLUSH']);
          for (const pacer of pacers) {
            const d = await pacer.reserve();
            assert.equal(d.kind, 'admitted');
            assert.equal(d.fallback, undefined);
            assert.equal(d.waitMs, 0);
          }
          for (const key of keys) {
            await assertCounted(cluster, key, { admitted: 2, admittedAfterWait: 0, refused: 0, released: 0 });
          }
        } finally {
          await Promise.all(pacers.map((p) => p.close()));
        }
      });
  });
});
