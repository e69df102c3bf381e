// The package's entry points load from ESM with named imports, as the
// TypeScript proxy imports them.
import test from 'node:test';
import assert from 'node:assert/strict';
import { Pacer, RedisPacer, refusalResponse } from 'connpacer';
import { WsUpgradePacer, sharedWsUpgradePacer, WS_NEW_CONNECTION_BURST } from 'connpacer/compat';

test('named ESM imports of both entry points', () => {
  assert.equal(typeof Pacer, 'function');
  assert.equal(typeof RedisPacer, 'function');
  assert.equal(typeof refusalResponse, 'function');
  assert.equal(typeof WsUpgradePacer, 'function');
  assert.equal(typeof sharedWsUpgradePacer, 'function');
  assert.equal(WS_NEW_CONNECTION_BURST, 10);
});
