'use strict';
// tests/vectors/*.json (hand-derived; scripts/gen-vectors.py) replayed
// through the addon: every scenario through the raw native pacer (which
// takes any u64 clock), and every scenario whose numbers fit a JS safe
// integer through the public Pacer.
const test = require('node:test');
const assert = require('node:assert/strict');
const { native, decodeDecision, reserveCode } = require('../native.js');
const { Pacer, NoticeRegistry } = require('../index.js');
const { loadVectors, quiet } = require('./helpers.js');

const scenarios = loadVectors('scenarios').scenarios;

function replay(scenario, api) {
  const tickets = new Map();
  let issued = 0;
  scenario.steps.forEach((step, index) => {
    const where = `${scenario.name} step ${index}`;
    if (step.op === 'reserve') {
      const got = api.reserve(step.t);
      if (got.admitted) {
        let ticket = null;
        if (got.ticket !== null) {
          issued += 1;
          tickets.set(issued, got.ticket);
          ticket = issued;
        }
        assert.deepEqual({ kind: 'admitted', wait_ms: got.waitMs, ticket }, step.expect, where);
      } else {
        assert.deepEqual(
          { kind: 'refused', required_wait_ms: got.requiredWaitMs, retry_after_s: got.retryAfterSeconds },
          step.expect,
          where,
        );
      }
    } else {
      const ticket = tickets.get(step.ticket);
      tickets.delete(step.ticket);
      const refunded = ticket === undefined ? false : api.release(ticket, step.t);
      assert.deepEqual({ kind: 'released', refunded }, step.expect, where);
    }
  });
}

/** The raw native pacer of `scenario`'s config, at its start time. */
function nativePacer(scenario) {
  const c = scenario.config;
  const config = new native.NativeConfig(c.rate_per_min, c.burst, c.idle_timeout_ms, c.max_retries,
    c.release_policy === 'strict');
  return new native.NativePacer(config, scenario.t);
}

test('every scenario through the native pacer', () => {
  for (const scenario of scenarios) {
    const pacer = nativePacer(scenario);
    const [mode, bound] = pacer.info();
    assert.equal(bound, scenario.expect_pacer.bound_ms, scenario.name);
    assert.equal(mode !== 0, scenario.expect_pacer.enabled, scenario.name);
    assert.equal(mode === 1, scenario.expect_pacer.can_refuse, scenario.name);
    replay(scenario, {
      reserve(t) {
        const d = decodeDecision(pacer.reserve(t), bound);
        return d.admitted ? { ...d, ticket: d.debitUnits > 0 ? [d.seq, d.debitUnits] : null } : d;
      },
      release(ticket, t) {
        return pacer.release(ticket[0], ticket[1], t);
      },
    });
  }
});

test('every scenario through the native hot call (reserveHot, via reserveCode)', () => {
  for (const scenario of scenarios) {
    const pacer = nativePacer(scenario);
    const handle = pacer.handle();
    const bound = pacer.info()[1];
    replay(scenario, {
      reserve(t) {
        const d = decodeDecision(reserveCode(handle, t), bound);
        return d.admitted ? { ...d, ticket: d.debitUnits > 0 ? [d.seq, d.debitUnits] : null } : d;
      },
      release(ticket, t) {
        return pacer.release(ticket[0], ticket[1], t);
      },
    });
  }
});

test('every scenario with safe-integer clocks through Pacer', () => {
  let replayed = 0;
  for (const scenario of scenarios) {
    const times = [scenario.t, ...scenario.steps.map((s) => s.t)];
    if (!times.every(Number.isSafeInteger)) continue;
    const c = scenario.config;
    const pacer = new Pacer({
      ratePerMinute: c.rate_per_min,
      burst: c.burst,
      idleTimeoutMs: c.idle_timeout_ms,
      maxRetries: c.max_retries,
      releasePolicy: c.release_policy,
      now: () => scenario.t,
      onNotice: quiet,
      noticeRegistry: new NoticeRegistry(),
    });
    assert.equal(pacer.waitBoundMs, scenario.expect_pacer.bound_ms, scenario.name);
    assert.equal(pacer.enabled, scenario.expect_pacer.enabled, scenario.name);
    assert.equal(pacer.canRefuse, scenario.expect_pacer.can_refuse, scenario.name);
    replay(scenario, {
      reserve(t) {
        const d = pacer.reserve(t);
        return d.kind === 'admitted' ? { ...d, admitted: true } : { ...d, admitted: false };
      },
      release: (ticket, t) => pacer.release(ticket, t),
    });
    replayed += 1;
  }
  assert.equal(replayed, scenarios.length - 1, 'only clock-u64-max needs clocks past 2^53');
});

test('a clock past 2^53 is refused by Pacer and changes nothing', () => {
  const pacer = new Pacer({ burst: 1, now: () => 0, onNotice: quiet });
  assert.throws(() => pacer.reserve(2 ** 64), RangeError);
  assert.throws(() => pacer.reserve(Number.MAX_SAFE_INTEGER + 1), RangeError);
  assert.equal(pacer.reserve(0).waitMs, 0, 'the one token is still there');
});

test('budgets: settings text to budgets and notices', () => {
  for (const c of loadVectors('budgets').cases) {
    const s = c.settings;
    const r = native.resolveSettings(
      s.rate_per_min ?? undefined,
      s.idle_timeout_ms ?? undefined,
      s.total_timeout_ms ?? undefined,
      s.max_retries ?? undefined,
      undefined,
    );
    assert.deepEqual({
      rate_per_min: r.ratePerMinute,
      idle_timeout_ms: r.idleTimeoutMs,
      total_timeout_ms: r.totalTimeoutMs,
      max_retries: r.maxRetries,
      bound_ms: r.waitBoundMs,
      hint_cap_s: r.hintCapSeconds,
      refusal_schedule_ms: r.refusalScheduleMs,
      can_refuse: r.canRefuse,
      enabled: r.enabled,
      notices: r.notices.map((n) => ({ kind: n.name, raw: n.raw, values: n.values })),
    }, c.expect, c.name);
  }
});

test('derived quantities', () => {
  const d = loadVectors('derived');
  for (const c of d.ladder_ceiling) assert.equal(native.ladderCeiling(c.idle_timeout_ms), c.expect);
  for (const c of d.wait_bound_ms) {
    assert.equal(native.waitBoundMs(c.idle_timeout_ms, c.max_retries), c.expect, JSON.stringify(c));
  }
  for (const c of d.retry_after_s) {
    // u64::MAX parses as 2^64 here; the addon saturates it back to u64::MAX.
    assert.equal(native.retryAfterSeconds(c.required_wait_ms, c.bound_ms), c.expect, JSON.stringify(c));
  }
  for (const c of d.can_refuse) {
    assert.equal(native.canRefuse(c.rate_per_min, c.max_retries, c.bound_ms), c.expect, JSON.stringify(c));
  }
});
