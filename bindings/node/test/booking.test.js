'use strict';
// Bookings (SPEC §11) through the addon. Every number is worked out by hand
// from the defaults: rate 60/min (one token per 1000 ms), burst 10, bound
// 4833 ms, hint cap 4 s, 5 retries, so 14 requests at t = 0 take the burst
// and waits up to 4000 ms, and the 15th would wait 5000 ms: beyond the
// bound, within the horizon 4833 + 5·4·1000 = 24833 ms.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Pacer, Booking, Ticket } = require('../index.js');
const { FakeTime, flush, quiet } = require('./helpers.js');

function drained(time) {
  const pacer = new Pacer({ now: time.now, schedule: time.schedule, onNotice: quiet });
  for (let i = 0; i < 14; i++) assert.equal(pacer.reserve(time.nowMs).kind, 'admitted');
  return pacer;
}

test('reserveOrBook: booked at slot 5000 with hint 1, then plain refusal past the horizon', () => {
  const time = new FakeTime(0);
  const pacer = drained(time);
  const booked = pacer.reserveOrBook(0, 5);
  assert.equal(booked.kind, 'booked');
  assert.ok(Booking.isBooking(booked.booking));
  assert.equal(booked.booking.slotMs, 5000);
  assert.equal(booked.requiredWaitMs, 5000);
  assert.equal(booked.retryAfterSeconds, 1);
  assert.ok(Ticket.isTicket(booked.booking.ticket));
  assert.equal(booked.booking.ticket.debitUnits, 60000);
  // Slot k·1000 for k = 6..24 books with the cap of 4 s from slot 9000 on;
  // 25000 > 24833 is refused and debits nothing.
  for (let slot = 6000; slot <= 24000; slot += 1000) {
    const b = pacer.reserveOrBook(0, 5);
    assert.equal(b.kind, 'booked');
    assert.equal(b.booking.slotMs, slot);
    assert.equal(b.retryAfterSeconds, Math.min(4, Math.ceil((slot - 4833) / 1000)));
  }
  const before = pacer.state();
  assert.deepEqual(pacer.reserveOrBook(0, 5), {
    kind: 'refused', requiredWaitMs: 25000, retryAfterSeconds: 4, clockRegressed: false,
  });
  assert.deepEqual(pacer.state(), before);
  // With no retries left the horizon is the bound.
  assert.equal(pacer.reserveOrBook(0, 0).kind, 'refused');
});

test('redeem: not yet, then admitted within the bound; pure; at most once', () => {
  const time = new FakeTime(0);
  const pacer = drained(time);
  const { booking } = pacer.reserveOrBook(0, 5);
  const state = pacer.state();
  // At 0: 5000 − 4833 = 167 ms beyond the bound → 1 s.
  assert.deepEqual(pacer.redeem(booking, 0), { kind: 'booked', booking, retryAfterSeconds: 1 });
  // At 167 the slot is exactly the bound away.
  const admitted = pacer.redeem(booking, 167);
  assert.equal(admitted.kind, 'admitted');
  assert.equal(admitted.waitMs, 4833);
  assert.equal(admitted.queued, true);
  assert.equal(admitted.path, 'booked');
  assert.deepEqual(pacer.state(), state, 'redeem changes nothing');
  assert.equal(booking.ticket.spent, true, 'the admission took over the ticket');
  assert.throws(() => pacer.redeem(booking, 200), RangeError);
  assert.equal(pacer.release(admitted.ticket, 200), true);
  assert.equal(pacer.release(admitted.ticket, 200), false);
});

test('admit with a key: the retry redeems the booking, a second key lines up behind', async () => {
  const time = new FakeTime(0);
  const pacer = drained(time);
  const first = await pacer.admit({ key: 'req-a' });
  assert.deepEqual(first, { kind: 'refused', requiredWaitMs: 5000, retryAfterSeconds: 1 });
  const second = await pacer.admit({ key: 'req-b' });
  assert.deepEqual(second, { kind: 'refused', requiredWaitMs: 6000, retryAfterSeconds: 2 });
  assert.equal(pacer.pendingKeys, 2);
  // req-a retries too early: refused again, nothing debited.
  const tokens = pacer.state().tokensUnits;
  assert.deepEqual(await pacer.admit({ key: 'req-a' }), { kind: 'refused', requiredWaitMs: 5000, retryAfterSeconds: 1 });
  assert.equal(pacer.state().tokensUnits, tokens);
  // After its 1 s hint: 4000 ahead, within the bound → waits 4000.
  await time.advance(1000);
  const pending = pacer.admit({ key: 'req-a' });
  await flush();
  await time.advance(4000);
  const admission = await pending;
  assert.equal(admission.kind, 'admitted');
  assert.equal(admission.waitedMs, 4000);
  assert.equal(pacer.pendingKeys, 1);
  // req-b gives up: forgetting it refunds its token.
  assert.equal(pacer.forget('req-b'), true);
  assert.equal(pacer.forget('req-b'), false);
  assert.equal(pacer.pendingKeys, 0);
});

test('admit with a key: aborting the wait after redeeming refunds the token', async () => {
  const time = new FakeTime(0);
  const pacer = drained(time);
  await pacer.admit({ key: 'k' });
  const tokensBooked = pacer.state().tokensUnits;
  await time.advance(1000);
  const controller = new AbortController();
  const pending = pacer.admit({ key: 'k', signal: controller.signal });
  await flush();
  controller.abort(new Error('client went away'));
  await assert.rejects(pending, /client went away/);
  // The booked token came back (1000 ms of refill at 60 units/ms also landed).
  assert.equal(pacer.state().tokensUnits, tokensBooked + 60000 + 1000 * 60);
  assert.equal(pacer.pendingKeys, 0);
});

test('a keyed request that keeps being refused counts down its retries', async () => {
  // Burst 1 and 60/min at idle 30000, 3 retries: bound 2000, cap 2 s,
  // horizon with r retries left 2000 + r·2000 (8000 with all 3).
  const time = new FakeTime(0);
  const pacer = new Pacer({
    ratePerMinute: 60, burst: 1, idleTimeoutMs: 30000, maxRetries: 3,
    now: time.now, schedule: time.schedule, onNotice: quiet,
  });
  for (let i = 0; i < 3; i++) pacer.reserve(0); // waits 0, 1000, 2000
  const held = [];
  for (let slot = 3000; slot <= 8000; slot += 1000) held.push(pacer.reserveOrBook(0, 3).booking);
  // Key y's first attempt: 9000 > 8000, refused, nothing held.
  assert.deepEqual(await pacer.admit({ key: 'y' }), { kind: 'refused', requiredWaitMs: 9000, retryAfterSeconds: 2 });
  // The slot-8000 booking goes back: the next wait is 8000 again.
  assert.equal(pacer.release(held.pop().ticket, 0), true);
  // y has 2 retries left now: horizon 6000 < 8000, still refused.
  assert.equal((await pacer.admit({ key: 'y' })).kind, 'refused');
  // A fresh key has all 3: horizon 8000, booked.
  assert.deepEqual(await pacer.admit({ key: 'z' }), { kind: 'refused', requiredWaitMs: 8000, retryAfterSeconds: 2 });
  assert.equal(pacer.pendingKeys, 2);
  assert.equal(pacer.forget('y'), false, 'nothing booked, nothing to refund');
  assert.equal(pacer.forget('z'), true);
});

test('bookings: bad input throws and changes nothing', async () => {
  const time = new FakeTime(0);
  const pacer = drained(time);
  const state = pacer.state();
  assert.throws(() => pacer.reserveOrBook(-1, 5), /nowMs/);
  assert.throws(() => pacer.reserveOrBook(0, 1.5), /retriesLeft/);
  assert.throws(() => pacer.reserveOrBook(0, Number.NaN), /retriesLeft/);
  assert.throws(() => pacer.reserveOrBook('0', 5), TypeError);
  assert.throws(() => pacer.redeem({ slotMs: 1 }, 0), TypeError);
  await assert.rejects(pacer.admit({ key: {} }), TypeError);
  await assert.rejects(pacer.admit({ key: null }), TypeError);
  assert.deepEqual(pacer.state(), state);
  const other = drained(new FakeTime(0));
  const { booking } = other.reserveOrBook(0, 5);
  assert.throws(() => pacer.redeem(booking, 0), RangeError, 'a booking of another pacer');
});
