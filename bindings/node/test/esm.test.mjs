// The package's entry points load from ESM with named imports, as the
// TypeScript proxy imports them (and connpacer/metrics, as a service would).
import test from 'node:test';
import assert from 'node:assert/strict';
import { Pacer, RedisPacer, refusalResponse, WAIT_BOUNDS_MS } from 'connpacer';
import { WsUpgradePacer, sharedWsUpgradePacer, WS_NEW_CONNECTION_BURST } from 'connpacer/compat';
import { registerMetrics, unregisterMetrics, METRIC_NAMES } from 'connpacer/metrics';

test('named ESM imports of every entry point', () => {
  assert.equal(typeof Pacer, 'function');
  assert.equal(typeof RedisPacer, 'function');
  assert.equal(typeof refusalResponse, 'function');
  assert.equal(typeof WsUpgradePacer, 'function');
  assert.equal(typeof sharedWsUpgradePacer, 'function');
  assert.equal(WS_NEW_CONNECTION_BURST, 10);
  assert.equal(WAIT_BOUNDS_MS.length, 8);
  assert.equal(typeof registerMetrics, 'function');
  assert.equal(typeof unregisterMetrics, 'function');
  assert.equal(METRIC_NAMES.length, 11);
});
