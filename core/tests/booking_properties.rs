//! Bookings (SPEC §11) against an independent model, and the §11 bounds.
//!
//! The model is a plain `i128` token bucket written from the SPEC's words
//! (§4 steps in refusing mode, then §11's horizon, slot and hints), with the
//! §3 quantities from `model/mod.rs`. Only refusing-mode pacers with the
//! refund policy are generated: the only mode where §11 books anything.

mod common;
mod model;

use common::{seen, Seen};
use pacer_core::{
    Booking, BookingDecision, Config, Mode, Pacer, Redemption, ReleasePolicy, UNITS_PER_TOKEN,
};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

const U: i128 = UNITS_PER_TOKEN as i128;

#[derive(Clone, Copy, Debug)]
struct Cfg {
    rate: u32,
    burst: u32,
    idle: u64,
    retries: u32,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// A fresh request `dt` ms after the previous op, `left` retries left.
    Book { dt: u64, left: u32 },
    /// The held booking at `pick % held` retries `dt` ms later.
    Redeem { pick: usize, dt: u64 },
    /// The held booking at `pick % held` gives up `dt` ms later.
    Release { pick: usize, dt: u64 },
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    (
        prop_oneof![Just(60u32), Just(600), 2u32..=600],
        1u32..=12,
        prop_oneof![Just(120_000u64), Just(30_000), 10_000u64..=600_000],
        0u32..=6,
    )
        .prop_map(|(rate, burst, idle, r)| Cfg {
            rate,
            burst,
            idle,
            retries: r.min(model::ladder_ceiling(idle)),
        })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop_oneof![Just(0u64), 0u64..=3000], 0u32..=7).prop_map(|(dt, left)| Op::Book { dt, left }),
        2 => (any::<usize>(), 0u64..=6000).prop_map(|(pick, dt)| Op::Redeem { pick, dt }),
        1 => (any::<usize>(), 0u64..=3000).prop_map(|(pick, dt)| Op::Release { pick, dt }),
    ]
}

/// What the model says one op answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// What `reserve_or_book` answers (or `redeem`, when it admits).
    Decided(Seen),
    NotYet {
        retry_after_s: u64,
    },
    Released,
}

/// The model bucket: state changes only when something is debited or
/// refunded, as SPEC §5 says of the high-water mark.
struct Bucket {
    rate: i128,
    capacity: i128,
    bound: i128,
    cap_s: i128,
    retries: i128,
    high_water: u64,
    tokens: i128,
}

impl Bucket {
    fn new(c: &Cfg, now: u64) -> Bucket {
        let bound = model::bound(c.idle, c.retries);
        Bucket {
            rate: c.rate as i128,
            capacity: c.burst as i128 * U,
            bound,
            cap_s: model::cap_s(bound),
            retries: c.retries as i128,
            high_water: now,
            tokens: c.burst as i128 * U,
        }
    }

    fn refilled(&self, at: u64) -> i128 {
        (self.tokens + (at - self.high_water) as i128 * self.rate).min(self.capacity)
    }

    fn hint(&self, beyond_ms: i128) -> u64 {
        let wanted = (beyond_ms + 999) / 1000;
        wanted.clamp(1, self.cap_s) as u64
    }

    fn book(&mut self, now: u64, left: u32) -> Answer {
        let at = now.max(self.high_water);
        let tokens = self.refilled(at);
        let debit = |b: &mut Bucket| {
            b.high_water = at;
            b.tokens = tokens - U;
        };
        if tokens >= U {
            debit(self);
            return Answer::Decided(Seen::Admitted { wait_ms: 0 });
        }
        let wait = (U - tokens + self.rate - 1) / self.rate;
        if wait <= self.bound {
            debit(self);
            return Answer::Decided(Seen::Admitted {
                wait_ms: wait as u64,
            });
        }
        let horizon = self.bound + (left as i128).min(self.retries) * self.cap_s * 1000;
        if wait <= horizon {
            debit(self);
            return Answer::Decided(Seen::Booked {
                slot_ms: at + wait as u64,
                retry_after_s: self.hint(wait - self.bound),
            });
        }
        Answer::Decided(Seen::Refused {
            required_wait_ms: wait as u64,
            retry_after_s: self.cap_s as u64,
        })
    }

    fn redeem(&self, slot: u64, now: u64) -> Answer {
        if slot as i128 - now as i128 <= self.bound {
            Answer::Decided(Seen::Admitted {
                wait_ms: slot.saturating_sub(now),
            })
        } else {
            Answer::NotYet {
                retry_after_s: self.hint(slot as i128 - self.bound - now as i128),
            }
        }
    }

    fn release(&mut self, now: u64) -> Answer {
        let at = now.max(self.high_water);
        self.tokens = (self.refilled(at) + U).min(self.capacity);
        self.high_water = at;
        Answer::Released
    }
}

/// One run: the pacer and the model side by side.
struct Run {
    pacer: Pacer,
    bucket: Bucket,
    now: u64,
    held: Vec<Booking>,
    /// Every debit in order: when it opens (admission time, or the slot
    /// of a booking), whether it waited, and the booking's ticket position.
    opens: Vec<Opening>,
}

struct Opening {
    at: u64,
    queued: bool,
    booking_seq: Option<u32>,
    released: bool,
}

impl Run {
    fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Book { dt, left } => {
                self.now += dt;
                let want = self.bucket.book(self.now, left);
                let got = self.pacer.reserve_or_book(self.now, left);
                prop_assert_eq!(Answer::Decided(seen(&got)), want, "book at {}", self.now);
                match got {
                    BookingDecision::Admitted(a) => self.opens.push(Opening {
                        at: self.now + a.wait_ms,
                        queued: a.wait_ms > 0,
                        booking_seq: None,
                        released: false,
                    }),
                    BookingDecision::Booked(b) => {
                        self.opens.push(Opening {
                            at: b.booking.slot_ms,
                            queued: true,
                            booking_seq: Some(b.booking.ticket.seq()),
                            released: false,
                        });
                        self.held.push(b.booking);
                    }
                    BookingDecision::Refused(_) => {}
                }
            }
            Op::Redeem { pick, dt } if !self.held.is_empty() => {
                self.now += dt;
                let booking = self.held.swap_remove(pick % self.held.len());
                let want = self.bucket.redeem(booking.slot_ms, self.now);
                let before = self.pacer.state();
                let got = match self.pacer.redeem(booking, self.now) {
                    Redemption::Admitted(a) => {
                        Answer::Decided(Seen::Admitted { wait_ms: a.wait_ms })
                    }
                    Redemption::NotYet {
                        booking,
                        retry_after_s,
                    } => {
                        self.held.push(booking);
                        Answer::NotYet { retry_after_s }
                    }
                };
                prop_assert_eq!(got, want, "redeem at {}", self.now);
                prop_assert_eq!(self.pacer.state(), before, "redeem changed the state");
            }
            Op::Release { pick, dt } if !self.held.is_empty() => {
                self.now += dt;
                let booking = self.held.swap_remove(pick % self.held.len());
                let seq = booking.ticket.seq();
                for open in self.opens.iter_mut() {
                    if open.booking_seq == Some(seq) {
                        open.released = true;
                    }
                }
                prop_assert!(self.pacer.release(booking.ticket, self.now));
                self.bucket.release(self.now);
            }
            Op::Redeem { .. } | Op::Release { .. } => {}
        }
        let state = self.pacer.state();
        prop_assert_eq!(
            (state.high_water_ms, state.tokens_units as i128),
            (self.bucket.high_water, self.bucket.tokens),
            "state after {:?}",
            op
        );
        Ok(())
    }
}

fn new_run(c: &Cfg, start: u64) -> Option<Run> {
    new_run_with(c, start, ReleasePolicy::Refund)
}

/// A run whose pacer has `policy`; the model refunds like `Refund`, so a
/// `Strict` run must not release out of order.
fn new_run_with(c: &Cfg, start: u64, policy: ReleasePolicy) -> Option<Run> {
    let pacer = Pacer::new(
        &Config {
            rate_per_min: c.rate,
            burst: c.burst,
            idle_timeout_ms: c.idle,
            max_retries: c.retries,
            release_policy: policy,
            adaptive_floor_per_min: 0,
            adaptive_ceiling_per_min: 0,
        },
        start,
    )
    .ok()?;
    if pacer.mode() != Mode::Refusing {
        return None;
    }
    Some(Run {
        pacer,
        bucket: Bucket::new(c, start),
        now: start,
        held: Vec::new(),
        opens: Vec::new(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_500, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every answer and every state agree with the model; the debt never
    /// passes `horizon_max · rate` units (SPEC §11's bound).
    #[test]
    fn bookings_agree_with_the_model(
        c in cfg_strategy(),
        start in 0u64..=1_000_000,
        ops in prop::collection::vec(op_strategy(), 1..160),
    ) {
        let Some(mut run) = new_run(&c, start) else { return Ok(()) };
        let horizon_max = run.bucket.bound + run.bucket.retries * run.bucket.cap_s * 1000;
        for op in ops {
            run.step(op)?;
            let tokens = run.pacer.state().tokens_units as i128;
            prop_assert!(tokens >= -horizon_max * run.bucket.rate,
                "debt {} units past the horizon bound {}", -tokens, horizon_max * run.bucket.rate);
        }
    }

    /// Opening times (admissions and booked slots that were not released)
    /// keep §6.1's window bound, and consecutive queued openings are FIFO
    /// and at least `floor(60000/rate)` apart.
    #[test]
    fn openings_keep_the_window_bound_and_fifo(
        c in cfg_strategy(),
        start in 0u64..=1_000_000,
        books in prop::collection::vec((prop_oneof![Just(0u64), 0u64..=2000], 0u32..=7), 1..200),
        random_window in 0u64..=200_000,
    ) {
        let Some(mut run) = new_run(&c, start) else { return Ok(()) };
        for (dt, left) in books {
            run.step(Op::Book { dt, left })?;
        }
        let interval = 60_000 / c.rate as u64;
        let opens: Vec<u64> = run.opens.iter().filter(|o| !o.released).map(|o| o.at).collect();
        for w in [0, 1, 999, 1_000, interval, interval + 1, 60_000, random_window] {
            for &t1 in &opens {
                let n = opens.iter().filter(|&&t| t >= t1 && t <= t1 + w).count() as i128;
                let limit = c.burst as i128 * U + c.rate as i128 * w as i128 + U;
                prop_assert!(n * U <= limit, "{} openings in [{}, {}]: limit {}/60000", n, t1, t1 + w, limit);
            }
        }
        // FIFO: of two consecutive debits that both waited (no releases
        // here), the later opens at least one interval after the earlier.
        for pair in run.opens.windows(2) {
            if pair[0].queued && pair[1].queued {
                prop_assert!(pair[1].at >= pair[0].at + interval,
                    "openings {} then {}: less than {} apart", pair[0].at, pair[1].at, interval);
            }
        }
    }

    /// Releasing every unredeemed booking, newest first, returns the level
    /// to what it was before they were booked, under either policy: the
    /// prefix runs against the model, the bookings are made at one instant
    /// once plain reservations are refused there.
    #[test]
    fn releasing_every_unredeemed_booking_restores_the_level(
        c in cfg_strategy(),
        start in 0u64..=1_000_000,
        prefix in prop::collection::vec(op_strategy(), 0..80),
        later in 0u64..=3000,
        bookings in 1usize..=30,
        strict in any::<bool>(),
    ) {
        // The model refunds like `Refund`; under `Strict` the prefix makes
        // no releases, so both agree on every step.
        let policy = if strict { ReleasePolicy::Strict } else { ReleasePolicy::Refund };
        let Some(mut run) = new_run_with(&c, start, policy) else { return Ok(()) };
        for op in prefix {
            if strict && matches!(op, Op::Release { .. }) {
                continue;
            }
            run.step(op)?;
        }
        // At `at`, plain reservations (no retries left: the horizon is the
        // bound) until one is refused; the model follows.
        let at = run.now + later;
        run.step(Op::Book { dt: later, left: 0 })?;
        while !matches!(run.bucket.book(at, 0), Answer::Decided(Seen::Refused { .. })) {
            prop_assert!(matches!(run.pacer.reserve_or_book(at, 0), BookingDecision::Admitted(_)));
        }
        let before = run.bucket.refilled(at);
        let pacer = run.pacer;
        let mut held = Vec::new();
        for _ in 0..bookings {
            match pacer.reserve_or_book(at, c.retries) {
                BookingDecision::Booked(b) => held.push(b.booking),
                BookingDecision::Refused(_) => break,
                BookingDecision::Admitted(a) => prop_assert!(false, "admitted at a refusing instant: {:?}", a),
            }
        }
        if held.is_empty() {
            return Ok(()); // beyond the horizon: nothing booked, nothing written
        }
        prop_assert_eq!(
            pacer.state().tokens_units as i128,
            before - U * held.len() as i128
        );
        while let Some(booking) = held.pop() {
            prop_assert!(pacer.release(booking.ticket, at), "strict {}", strict);
        }
        prop_assert_eq!(pacer.state().tokens_units as i128, before);
    }
}
