//! Adaptive pacing (SPEC §14) against an independent model.
//!
//! The law is re-derived here from its statement (the module doc of
//! core/src/adaptive.rs), not from the core's code: the openings are kept
//! as a list of minute labels and recounted at each throttle, times stay
//! absolute, the search is `ℓ · 2ⁿ · (D + r) / D` in i128, the probe's wait
//! is taken in i128 as stated, and the constants are the documented ones
//! written as literals. The bucket is the
//! rational-number model of `model/mod.rs`, given the rate in force before
//! each call.

mod model;
#[path = "common/model_path.rs"]
mod model_path;

use model::{MConfig, MOutcome, Model};
use model_path::core_path;
use pacer_core::{Config, Decision, Outcome, Pacer};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

/// The law's constants as SPEC §14 states them.
const MINUTE_MS: u64 = 60_000;
const HOLD_MS: u64 = 60_000;
const SEARCH_DOUBLING_MS: i128 = 5_000;
const RESEARCH_DOUBLING_MS: i128 = 20_000;
const PROBE_WAIT_MS: i128 = 240_000;
const PROBE_EVERY_OPENINGS: i128 = 80;
/// After a search the probe's wait is a twelfth.
const QUICK_PROBE: i128 = 12;
const SEARCH_NO_WAITS_MS: u64 = 60_000;
/// After a probe's throttle the step is a quarter of `ℓ`, but no narrower
/// than this (nor than half of `ℓ` when that is narrower), per minute.
const NARROW_STEP_MIN: i128 = 80;

/// The law, written from its statement.
#[derive(Clone, Debug)]
struct Law {
    ceiling: i128,
    /// The floor raised to the lowest rate that can refuse.
    lowest: i128,
    origin: u64,
    limit: i128,
    probing: bool,
    again: bool,
    /// The minute (absolute, `⌊t/60000⌋`) the counts were last moved to;
    /// counts never move back to an earlier minute.
    minute: i128,
    /// One entry per opening: the minute it was counted in.
    openings: Vec<i128>,
}

impl Law {
    fn new(rate: u32, floor: u32, ceiling: u32, retries: u32, now: u64) -> Law {
        // SPEC §3: a rate can refuse when its token comes within the retry
        // schedule: rate · schedule ≥ 60000.
        let bound = model::bound(Config::DEFAULT.idle_timeout_ms, retries);
        let schedule = model::schedule_ms(retries, bound);
        let refusing = if schedule == 0 {
            0
        } else {
            (1..).find(|r| r * schedule >= 60_000).unwrap()
        };
        Law {
            ceiling: ceiling as i128,
            lowest: (floor as i128).max(refusing.min(ceiling as i128)),
            origin: now,
            limit: rate as i128,
            probing: false,
            again: false,
            minute: (now / MINUTE_MS) as i128,
            openings: Vec::new(),
        }
    }

    /// When the probe's step begins, ms after the origin.
    fn step_at(&self) -> i128 {
        let l = self.limit.min(self.ceiling);
        let wait = (PROBE_WAIT_MS).max(PROBE_EVERY_OPENINGS * 60_000 / l.max(1));
        let wait = if self.again { wait / QUICK_PROBE } else { wait };
        HOLD_MS as i128 + wait
    }

    fn rate(&self, now: u64) -> i128 {
        let delta = now.saturating_sub(self.origin) as i128;
        let l = self.limit.min(self.ceiling);
        if self.probing && now < self.origin {
            return self.lowest;
        }
        let curve = if self.probing {
            if delta < self.step_at() {
                l
            } else if self.again || l / 2 <= NARROW_STEP_MIN {
                // After a search, or where half of ℓ is at most 80/min.
                l + l / 2 + 2
            } else {
                // After a probe's throttle: a quarter of ℓ, at least 80.
                l + (l / 4).max(NARROW_STEP_MIN) + 2
            }
        } else {
            let period = if self.again {
                RESEARCH_DOUBLING_MS
            } else {
                SEARCH_DOUBLING_MS
            };
            let n = delta / period;
            if n >= 10 {
                self.ceiling
            } else {
                l * 2i128.pow(n as u32) * (period + delta % period) / period
            }
        };
        curve.max(self.lowest).min(self.ceiling)
    }

    fn count(&self, minute: i128) -> i128 {
        self.openings.iter().filter(|&&m| m == minute).count() as i128
    }

    /// Moves the counts to `at`'s minute (never back).
    fn roll(&mut self, at: u64) {
        self.minute = self.minute.max((at / MINUTE_MS) as i128);
    }

    /// A new origin: the counts' minute is `at`'s (relabelled there when a
    /// regressed clock left them later).
    fn restart(&mut self, at: u64) {
        let shift = self.minute - (at / MINUTE_MS) as i128;
        for m in &mut self.openings {
            *m -= shift;
        }
        self.minute -= shift;
        self.origin = at;
    }

    fn opened(&mut self, now: u64) -> i128 {
        let at = now.max(self.origin);
        // Answers read at the caller's clock.
        let rate = self.rate(now);
        self.roll(at);
        self.openings.push(self.minute);
        let through = self.count(self.minute).max(self.count(self.minute - 1));
        let past_hold = at - self.origin >= HOLD_MS;
        if self.probing && past_hold && through > self.limit + self.limit / 8 + 1 {
            self.probing = false;
            self.again = true;
            self.limit = rate;
            self.restart(at);
        }
        self.rate(now)
    }

    /// A throttle at `now`: the rate after.
    fn throttled(&mut self, now: u64) -> i128 {
        let at = now.max(self.origin);
        // Answers read at the caller's clock.
        let rate = self.rate(now);
        if self.probing && at - self.origin < HOLD_MS {
            return rate;
        }
        let at_step = self.probing && (at - self.origin) as i128 >= self.step_at();
        self.roll(at);
        let (this, before) = (self.count(self.minute), self.count(self.minute - 1));
        let share = (MINUTE_MS - at % MINUTE_MS) as i128;
        let seen = if self.probing {
            this.max(before)
        } else {
            this.max(before)
                .max(this + before * share / MINUTE_MS as i128)
        };
        // The first search (not a search again) pauses until a minute
        // after it began.
        let pause_until = if !self.probing && !self.again {
            Some(self.origin.saturating_add(MINUTE_MS).max(at))
        } else {
            None
        };
        self.limit = if seen == 0 {
            let base = rate.min(self.limit);
            base - (base / 16).max(1).min(base)
        } else if !self.probing {
            seen.min(self.ceiling)
        } else if seen < rate && at_step {
            // L held through the hold and the wait: the throttle says the
            // limit is below the step.
            seen.max(self.limit)
        } else if seen < rate {
            seen
        } else {
            rate - (rate / 16).max(1)
        };
        self.again = !self.probing;
        self.probing = true;
        self.restart(at);
        if let Some(until) = pause_until {
            self.roll(until);
            self.origin = until;
        }
        self.rate(now)
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Advance the clock by this much (may be negative: a regression).
    Reserve(i64),
    Throttle(i64),
    /// Advance the clock, then report this many openings at that instant.
    Opened(i64, u32),
    Probe(i64),
}

fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..=2_000,
        3 => 0i64..=70_000,
        1 => 0i64..=3_000_000,
        1 => 0i64..=7_200_000,
        1 => -70_000i64..=0,
        // The hold's edges.
        1 => prop_oneof![Just(59_999i64), Just(60_000)],
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => step().prop_map(Op::Reserve),
        2 => step().prop_map(Op::Throttle),
        3 => (step(), 1u32..=40).prop_map(|(d, n)| Op::Opened(d, n)),
        // A minute's count past 160, where the narrow step differs from
        // the wide one.
        1 => (step(), 41u32..=200).prop_map(|(d, n)| Op::Opened(d, n)),
        1 => step().prop_map(Op::Probe),
    ]
}

/// Floor, start rate and ceiling (at the default budget, bound 4833 and
/// 5 retries, 3/min and up can refuse: floors 1 and 2 are raised to 3).
fn range() -> impl Strategy<Value = (u32, u32, u32)> {
    (1u32..=60)
        .prop_flat_map(|floor| (Just(floor), floor..=120))
        .prop_flat_map(|(floor, rate)| (Just(floor), Just(rate), rate..=600))
}

/// The pacer both model properties run: its (floor, rate, ceiling) range,
/// its burst (1..=12) and the clock it starts at.
fn pacer_setup() -> impl Strategy<Value = ((u32, u32, u32), u32, u64)> {
    (range(), 1u32..=12, 0u64..=10_000_000)
}

fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn config(floor: u32, rate: u32, ceiling: u32, burst: u32) -> Config {
    Config {
        rate_per_min: rate,
        burst,
        ..Config::DEFAULT
    }
    .adaptive(floor, ceiling)
}

/// Runs `ops` on the core and on the model side by side, checking every
/// answer; returns `(reservation time, admission time, rate in force)` of
/// every grant.
fn run(
    (floor, rate, ceiling): (u32, u32, u32),
    burst: u32,
    start: u64,
    ops: &[Op],
    exclusive: bool,
) -> Result<Vec<(u64, u64, i128)>, TestCaseError> {
    let mut pacer = Pacer::new(&config(floor, rate, ceiling, burst), start).unwrap();
    let retries = Config::DEFAULT.max_retries;
    let mut law = Law::new(rate, floor, ceiling, retries, start);
    let mut bucket = Model::new(
        &MConfig {
            rate,
            burst,
            idle: Config::DEFAULT.idle_timeout_ms,
            retries: Config::DEFAULT.max_retries,
            strict: false,
        },
        start,
    );
    let mut now = start;
    let mut grants = Vec::new();
    for op in ops {
        let (Op::Reserve(d) | Op::Throttle(d) | Op::Opened(d, _) | Op::Probe(d)) = *op;
        now = now.saturating_add_signed(d);
        match op {
            Op::Throttle(_) => {
                let got = pacer.observe(Outcome::Throttled, now);
                prop_assert_eq!(got as i128, law.throttled(now), "throttle at {}", now);
            }
            Op::Opened(_, n) => {
                for _ in 0..*n {
                    let got = pacer.observe(Outcome::Opened, now);
                    prop_assert_eq!(got as i128, law.opened(now), "opened at {}", now);
                }
            }
            Op::Probe(_) => {
                prop_assert_eq!(pacer.rate_in_force(now) as i128, law.rate(now));
            }
            Op::Reserve(_) => {
                let in_force = law.rate(now);
                bucket.set_rate(in_force as u32, Config::DEFAULT.max_retries);
                // No waits in a search's first minute.
                bucket.waits = law.probing || now.saturating_sub(law.origin) >= SEARCH_NO_WAITS_MS;
                let expected = bucket.reserve(now);
                let decision = if exclusive {
                    pacer.reserve_mut(now)
                } else {
                    pacer.reserve(now)
                };
                match (decision, expected) {
                    (
                        Decision::Admitted(a),
                        MOutcome::Admitted {
                            wait_ms,
                            debit,
                            path,
                            regressed,
                        },
                    ) => {
                        prop_assert_eq!(a.wait_ms as i128, wait_ms);
                        prop_assert_eq!(a.path, core_path(path));
                        prop_assert_eq!(a.clock_regressed, regressed);
                        prop_assert_eq!(a.ticket.is_some(), debit.is_some());
                        if debit.is_some() {
                            grants.push((now, now + a.wait_ms, in_force));
                        }
                    }
                    (
                        Decision::Refused(r),
                        MOutcome::Refused {
                            required_ms,
                            hint_s,
                            regressed,
                        },
                    ) => {
                        prop_assert_eq!(r.required_wait_ms as i128, required_ms);
                        prop_assert_eq!(r.retry_after_s as i128, hint_s);
                        prop_assert_eq!(r.clock_regressed, regressed);
                    }
                    (got, want) => {
                        return Err(TestCaseError::fail(format!(
                            "at {now} (rate {in_force}): core {got:?}, model {want:?}"
                        )))
                    }
                }
            }
        }
        let rate = pacer.rate_in_force(now) as i128;
        prop_assert_eq!(rate, law.rate(now), "rate in force at {}", now);
        prop_assert!(
            (law.lowest..=law.ceiling).contains(&rate),
            "rate {} outside [{}, {}]",
            rate,
            law.lowest,
            law.ceiling
        );
    }
    Ok(grants)
}

proptest! {
    #![proptest_config(cases(600))]

    /// The core's rate, decisions and answers are the model's, call by call.
    #[test]
    fn agrees_with_the_model(
        (range, burst, start) in pacer_setup(),
        ops in prop::collection::vec(op(), 1..160),
        exclusive in any::<bool>(),
    ) {
        run(range, burst, start, &ops, exclusive)?;
    }

    /// SPEC §6.1 for the rate in force: in any window of `W` ms the grants
    /// reserved are at most `burst + bound·r̂/60000 + r̂·W/60000 + 1`, where
    /// `r̂` is the highest rate in force any grant of the window used (a
    /// refill between two calls is at the later call's rate, and the first
    /// call's refill is capped at capacity).
    #[test]
    fn window_bounds_hold_at_the_rate_in_force(
        (range, burst, start) in pacer_setup(),
        ops in prop::collection::vec(op(), 1..200),
        random_window in 0u64..=300_000,
    ) {
        // Forward time only: a window is a span of readings.
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|op| match op {
                Op::Reserve(d) => Op::Reserve(d.max(0)),
                Op::Throttle(d) => Op::Throttle(d.max(0)),
                Op::Opened(d, n) => Op::Opened(d.max(0), n),
                Op::Probe(d) => Op::Probe(d.max(0)),
            })
            .collect();
        let grants = run(range, burst, start, &ops, false)?;
        let bound = 4833i128;
        for window in [0u64, 1_000, 4_833, 60_000, random_window] {
            for &(t1, _, _) in &grants {
                let t2 = t1 + window;
                let in_window: Vec<_> = grants.iter().filter(|g| g.0 >= t1 && g.0 <= t2).collect();
                let top = in_window.iter().map(|g| g.2).max().unwrap_or(0);
                let limit = burst as i128 * 60_000 + bound * top + top * window as i128 + 60_000;
                prop_assert!(
                    in_window.len() as i128 * 60_000 <= limit,
                    "{} grants in [{}, {}] at rates up to {}: limit {}/60000",
                    in_window.len(), t1, t2, top, limit
                );
            }
        }
    }
}

/// Adaptation off: `observe` answers the configured rate and changes
/// nothing, and the pacer decides exactly as one without the call.
#[test]
fn off_by_default_observe_changes_nothing() {
    let plain = Pacer::new(&Config::DEFAULT, 0).unwrap();
    let observed = Pacer::new(&Config::DEFAULT, 0).unwrap();
    for t in (0..200_000u64).step_by(700) {
        assert_eq!(observed.observe(Outcome::Throttled, t), 60);
        assert_eq!(observed.observe(Outcome::Opened, t), 60);
        assert_eq!(observed.rate_in_force(t), 60);
        assert_eq!(plain.reserve(t), observed.reserve(t));
        assert_eq!(plain.state(), observed.state());
        assert_eq!(plain.control(), observed.control());
    }
}

/// The law's part of the control word: origin, `L`, probing, again.
fn law_of(pacer: &Pacer) -> (u64, u16, bool, bool) {
    let c = pacer.control();
    (c.origin_ms, c.limit_per_min, c.probing, c.again)
}

/// A hand-derived sequence of the law (SPEC §14): rate 60, floor 1,
/// ceiling 600, the default budget (5 retries at bound 4833, hint cap 4 s:
/// a 20 s schedule, so the lowest rate that can refuse is ⌈60000/20000⌉ =
/// 3 and
/// the floor 1 is raised to 3).
#[test]
fn the_documented_sequence() {
    let pacer = Pacer::new(&Config::DEFAULT.adaptive(1, 600), 0).unwrap();
    let opened = |n: u64, from: u64, step: u64| {
        (0..n)
            .map(|k| pacer.observe(Outcome::Opened, from + k * step))
            .last()
            .unwrap()
    };
    // Searching from L = 60, doubling every 5 s: 60·2ⁿ·(5000 + r)/5000.
    assert_eq!(pacer.rate_in_force(0), 60);
    assert_eq!(pacer.rate_in_force(2500), 90, "60·7500/5000");
    assert_eq!(pacer.rate_in_force(5000), 120, "60·2");
    assert_eq!(pacer.rate_in_force(7500), 180, "120·7500/5000");
    assert_eq!(pacer.rate_in_force(50_000), 600, "n = 10: the ceiling");
    // 45 openings in minute 0 (at 100 … 4500 ms): counted, the rate is the
    // search's (at 4500: 60·9500/5000 = 114).
    assert_eq!(opened(45, 100, 100), 114);
    assert_eq!(pacer.control().opened, 45);
    // A throttle at 20 s ends the first search (rate 60·16 → the ceiling
    // 600): E = max(through 45, recent 45) = 45, and a search's burst rule
    // takes L = min(E, ceiling) = 45 though E < 600; `again`. The search
    // began at 0, so the origin moves to 60000 (the pause): the 45 become
    // the minute before, and the rate reads the lowest, 3, until then.
    assert_eq!(pacer.observe(Outcome::Throttled, 20_000), 3);
    let control = pacer.control();
    assert_eq!(law_of(&pacer), (60_000, 45, true, true));
    assert_eq!((control.opened, control.opened_before), (0, 45));
    assert_eq!(pacer.rate_in_force(59_999), 3);
    assert_eq!(pacer.rate_in_force(60_000), 45);
    // A throttle during the pause is within the hold: nothing changes, and
    // it answers the rate at its own clock.
    assert_eq!(pacer.observe(Outcome::Throttled, 50_000), 3);
    assert_eq!(pacer.control(), control, "a held throttle writes nothing");
    // The probe: after a search the wait is max(240000, 80·60000/45 =
    // 106666)/12 = 20000 past the hold, so L until 140000, then 45 + 22 +
    // 2 = 69.
    assert_eq!(pacer.rate_in_force(139_999), 45);
    assert_eq!(pacer.rate_in_force(140_000), 69);
    // Minute 3 (180 s …; none in minute 2): openings every second. The margin is L + ⌊L/8⌋ +
    // 1 = 51: the 51st (at 230 s) keeps the probe, the 52nd (231 s) shows
    // the limit rose: search again from the rate in force, 69, origin
    // 231 s, doubling every 20 s.
    assert_eq!(opened(51, 180_000, 1000), 69);
    assert!(pacer.control().probing);
    assert_eq!(pacer.observe(Outcome::Opened, 231_000), 69);
    assert_eq!(law_of(&pacer), (231_000, 69, false, true));
    assert_eq!(pacer.rate_in_force(251_000), 138, "69·2");
    assert_eq!(pacer.rate_in_force(261_000), 207, "138·30000/20000");
    // A throttle at 261 s (minute 4) ends this search again (no pause):
    // minute 3's 52 are the minute before; recent = 52·39000/60000 = 33;
    // E = 52, L = 52, `again`: the rate is 52 through the hold, and the
    // probe comes max(240000, 92307)/12 = 20000 after it: 52 + 26 + 2 =
    // 80 from 341 s.
    assert_eq!(pacer.observe(Outcome::Throttled, 261_000), 52);
    assert_eq!(law_of(&pacer), (261_000, 52, true, true));
    assert_eq!(pacer.rate_in_force(340_999), 52);
    assert_eq!(pacer.rate_in_force(341_000), 80);
    // At 400 s (minute 6, two after the counts; at the step, the rate
    // 80): nothing counted, so a step down from min(R, L) = 52: L = 52 −
    // ⌊52/16⌋ = 49. Not after a search: the wait is 240 s.
    assert_eq!(pacer.observe(Outcome::Throttled, 400_000), 49);
    assert_eq!(law_of(&pacer), (400_000, 49, true, false));
    // 10 openings in minute 6, a throttle at 470 s (minute 7, past the
    // hold; the rate 49): E = through = 10 < 49: L = 10.
    assert_eq!(opened(10, 400_100, 100), 49);
    assert_eq!(pacer.observe(Outcome::Throttled, 470_000), 10);
    // 12 openings in minute 9 (past the hold; the margin 10 + 1 + 1 = 12
    // is not passed), a throttle at 610 s (minute 10): E = 12 ≥ the rate
    // 10: the count does not explain it, L = 10 − max(1, ⌊10/16⌋) = 9.
    assert_eq!(opened(12, 541_000, 1000), 10);
    assert_eq!(pacer.observe(Outcome::Throttled, 610_000), 9);
    // 2 openings, a throttle at 680 s: E = 2 < 9, L = 2, raised to the
    // lowest rate that can refuse, 3.
    assert_eq!(opened(2, 611_000, 1000), 9);
    assert_eq!(pacer.observe(Outcome::Throttled, 680_000), 3);
    assert_eq!(pacer.control().limit_per_min, 2);
    // The refill follows the rate in force (floor 10, ceiling 0: 60).
    let one = Pacer::new(
        &Config {
            burst: 1,
            ..Config::DEFAULT
        }
        .adaptive(10, 0),
        0,
    )
    .unwrap();
    assert!(matches!(one.reserve(1000), Decision::Admitted(a) if a.wait_ms == 0));
    // Nothing counted: L = 60 − ⌊60/16⌋ = 57, and the first search's
    // pause: the lowest, 10, until 60000.
    assert_eq!(one.observe(Outcome::Throttled, 1000), 10);
    assert_eq!(one.rate_in_force(60_000), 57);
    // At 60000 the token is back (burst 1), and the next takes ⌈60000/57⌉
    // = 1053 ms.
    assert!(matches!(one.reserve(60_000), Decision::Admitted(a) if a.wait_ms == 0));
    assert!(matches!(one.reserve(60_000), Decision::Admitted(a) if a.wait_ms == 1053));
}

/// SPEC §14's example, as docs/spec.md states it.
#[test]
fn the_spec_example() {
    let example = || {
        let pacer = Pacer::new(&Config::DEFAULT.adaptive(1, 600), 0).unwrap();
        let rates = [0, 2500, 5000, 15_000, 16_249, 16_250].map(|t| pacer.rate_in_force(t));
        assert_eq!(rates, [60, 90, 120, 480, 599, 600]);
        for k in 0..12 {
            pacer.observe(Outcome::Opened, 1000 + k * 1000);
        }
        assert_eq!(pacer.observe(Outcome::Throttled, 20_000), 3);
        assert_eq!(law_of(&pacer), (60_000, 12, true, true));
        assert_eq!(
            (pacer.rate_in_force(59_999), pacer.rate_in_force(60_000)),
            (3, 12)
        );
        assert_eq!(pacer.observe(Outcome::Throttled, 30_000), 3);
        assert_eq!(law_of(&pacer), (60_000, 12, true, true));
        assert_eq!(
            (pacer.rate_in_force(153_332), pacer.rate_in_force(153_333)),
            (12, 20)
        );
        // 10 openings in minute 2 (none in minute 1): no rise, 10 ≤ 14.
        for k in 0..10 {
            assert_eq!(pacer.observe(Outcome::Opened, 121_000 + k * 1000), 12);
        }
        pacer
    };
    // At the step (160000): E = 10 < 20, L stays max(10, 12) = 12.
    let pacer = example();
    assert_eq!(pacer.observe(Outcome::Throttled, 160_000), 12);
    assert_eq!(law_of(&pacer), (160_000, 12, true, false));
    // Before it (150000): E = 10 < 12, L = 10.
    let pacer = example();
    assert_eq!(pacer.observe(Outcome::Throttled, 150_000), 10);
    assert_eq!(law_of(&pacer), (150_000, 10, true, false));
}

/// Bad clocks: an observation at 0 or at `u64::MAX` neither panics nor
/// leaves the rate outside `[lowest, ceiling]`.
#[test]
fn extreme_clocks_keep_the_rate_in_range() {
    for start in [0, 1_000_000, u64::MAX - 1] {
        let pacer = Pacer::new(&Config::DEFAULT.adaptive(1, 600), start).unwrap();
        for now in [0, u64::MAX, 0, start, u64::MAX - 1, u64::MAX] {
            for outcome in [Outcome::Opened, Outcome::Throttled, Outcome::Opened] {
                let rate = pacer.observe(outcome, now);
                assert!((3..=600).contains(&rate), "{rate} at {now} from {start}");
                for t in [0, now, u64::MAX] {
                    assert!((3..=600).contains(&pacer.rate_in_force(t)));
                }
            }
        }
    }
}

/// Invalid ranges are refused with `AdaptiveRange`, and a range that is
/// valid at the edges is accepted.
#[test]
fn ranges_are_checked() {
    use pacer_core::ConfigError::AdaptiveRange;
    let at = |floor, rate, ceiling| {
        Pacer::new(
            &Config {
                rate_per_min: rate,
                ..Config::DEFAULT
            }
            .adaptive(floor, ceiling),
            0,
        )
        .err()
    };
    assert_eq!(at(61, 60, 0), Some(AdaptiveRange));
    assert_eq!(at(10, 60, 59), Some(AdaptiveRange));
    assert_eq!(at(10, 60, 601), Some(AdaptiveRange));
    assert_eq!(at(1, 0, 0), Some(AdaptiveRange));
    assert_eq!(at(60, 60, 60), None);
    assert_eq!(at(1, 600, 600), None);
    assert_eq!(
        at(0, 60, 601),
        None,
        "the ceiling is ignored with adaptation off"
    );
}
