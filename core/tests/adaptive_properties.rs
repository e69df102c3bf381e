//! Adaptive pacing (SPEC §14) against an independent model.
//!
//! The law is re-derived here from its statement, not from the core's
//! code: the last decrease is kept as an absolute time (the core keeps it
//! relative to the curve's origin), the cube root is a linear search, the
//! floor of a negative quotient is written out, and the constants are the
//! documented ones written as literals. The bucket is the rational-number
//! model of `model/mod.rs`, given the rate in force before each call.

mod model;

use model::{MConfig, MOutcome, MPath, Model};
use pacer_core::{AdmitPath, Config, Decision, Outcome, Pacer};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

/// The law's constants as SPEC §14 states them.
const SCALE: i128 = 400_000_000;
const SEARCH_SCALE: i128 = 50_000_000;
const SPACING_MS: u64 = 60_000;
const CUBE_CAP_DS: i128 = 200_000;

/// The law, written from its statement.
#[derive(Clone, Debug)]
struct Law {
    floor: i128,
    ceiling: i128,
    peak: i128,
    recover_ds: i128,
    origin: u64,
    /// The last decrease, absolute; `None` before the first.
    last_decrease: Option<u64>,
}

fn cube_root(n: i128) -> i128 {
    let mut k = 0;
    while (k + 1) * (k + 1) * (k + 1) <= n {
        k += 1;
    }
    k
}

fn floor_div(a: i128, b: i128) -> i128 {
    if a >= 0 {
        a / b
    } else {
        -((-a + b - 1) / b)
    }
}

impl Law {
    fn new(rate: u32, floor: u32, ceiling: u32, now: u64) -> Law {
        Law {
            floor: floor as i128,
            ceiling: ceiling as i128,
            peak: rate as i128,
            recover_ds: 0,
            origin: now,
            last_decrease: None,
        }
    }

    fn rate(&self, now: u64) -> i128 {
        let at = now.max(self.origin);
        let ds = (((at - self.origin) / 100) as i128).min(CUBE_CAP_DS);
        let d = ds - self.recover_ds;
        let scale = if self.last_decrease.is_none() {
            SEARCH_SCALE
        } else {
            SCALE
        };
        (self.peak + floor_div(d * d * d, scale)).clamp(self.floor, self.ceiling)
    }

    /// A throttle at `now`: whether it was a decrease, and the rate after.
    fn throttle(&mut self, now: u64) -> (bool, i128) {
        let at = now.max(self.origin);
        let rate = self.rate(at);
        let decrease = match self.last_decrease {
            None => true,
            Some(t) => at - t >= SPACING_MS,
        };
        if decrease {
            let target = (rate * 8 / 10).max(self.floor);
            self.peak = rate;
            self.recover_ds = cube_root((rate - target) * SCALE);
            self.origin = at;
            self.last_decrease = Some(at);
        } else {
            self.origin = at;
        }
        (decrease, self.rate(at))
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Advance the clock by this much (may be negative: a regression).
    Reserve(i64),
    Throttle(i64),
    Opened(i64),
    Probe(i64),
}

fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..=2_000,
        3 => 0i64..=70_000,
        1 => 0i64..=3_000_000,
        1 => -5_000i64..=0,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => step().prop_map(Op::Reserve),
        3 => step().prop_map(Op::Throttle),
        1 => step().prop_map(Op::Opened),
        1 => step().prop_map(Op::Probe),
    ]
}

/// Floor, start rate and ceiling that refuse at every rate in between at
/// the default budget (bound 4833, 5 retries: 3/min and up can refuse).
fn range() -> impl Strategy<Value = (u32, u32, u32)> {
    (3u32..=60)
        .prop_flat_map(|floor| (Just(floor), floor..=120))
        .prop_flat_map(|(floor, rate)| (Just(floor), Just(rate), rate..=600))
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

fn path_matches(model: MPath, core: AdmitPath) -> bool {
    matches!(
        (model, core),
        (MPath::Paced, AdmitPath::Paced)
            | (MPath::Shaped, AdmitPath::Shaped)
            | (MPath::Overflow, AdmitPath::Overflow)
            | (MPath::Disabled, AdmitPath::Disabled)
    )
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
    let mut law = Law::new(rate, floor, ceiling, start);
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
        let (Op::Reserve(d) | Op::Throttle(d) | Op::Opened(d) | Op::Probe(d)) = *op;
        now = now.saturating_add_signed(d);
        match op {
            Op::Throttle(_) => {
                let before = law.rate(now.max(law.origin));
                let (decrease, after) = law.throttle(now);
                let got = pacer.observe(Outcome::Throttled, now);
                prop_assert_eq!(got as i128, after, "throttle at {}", now);
                if decrease {
                    // A decrease lands exactly on ⌊rate · 8/10⌋ (or the floor).
                    prop_assert_eq!(after, (before * 8 / 10).max(floor as i128));
                } else {
                    prop_assert!(after <= before, "a hold never raises the rate");
                }
            }
            Op::Opened(_) => {
                let got = pacer.observe(Outcome::Opened, now);
                prop_assert_eq!(got as i128, law.rate(now));
            }
            Op::Probe(_) => {
                prop_assert_eq!(pacer.rate_in_force(now) as i128, law.rate(now));
            }
            Op::Reserve(_) => {
                let in_force = law.rate(now);
                bucket.set_rate(in_force as u32, Config::DEFAULT.max_retries);
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
                        prop_assert!(path_matches(path, a.path));
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
        let rate = pacer.rate_in_force(now);
        prop_assert!(
            (floor..=ceiling).contains(&rate),
            "rate {} outside [{}, {}]",
            rate,
            floor,
            ceiling
        );
    }
    Ok(grants)
}

proptest! {
    #![proptest_config(cases(600))]

    /// The core's rate, decisions and answers are the model's, call by call.
    #[test]
    fn agrees_with_the_model(
        range in range(),
        burst in 1u32..=12,
        start in 0u64..=10_000_000,
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
        range in range(),
        burst in 1u32..=12,
        start in 0u64..=10_000_000,
        ops in prop::collection::vec(op(), 1..200),
        random_window in 0u64..=300_000,
    ) {
        // Forward time only: a window is a span of readings.
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|op| match op {
                Op::Reserve(d) => Op::Reserve(d.max(0)),
                Op::Throttle(d) => Op::Throttle(d.max(0)),
                Op::Opened(d) => Op::Opened(d.max(0)),
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

/// The hand-derived sequence of SPEC §14 (independent of the scale): rate
/// 60, floor 10, ceiling 60.
#[test]
fn the_documented_sequence() {
    let pacer = Pacer::new(&Config::DEFAULT.adaptive(10, 0), 0).unwrap();
    assert_eq!(pacer.rate_in_force(0), 60);
    assert_eq!(pacer.observe(Outcome::Throttled, 1000), 48);
    let control = pacer.control();
    assert_eq!(pacer.observe(Outcome::Throttled, 1000), 48);
    assert_eq!(pacer.observe(Outcome::Opened, 1000), 48);
    assert_eq!(
        pacer.control(),
        control,
        "nothing written at the same instant"
    );
    assert_eq!(pacer.observe(Outcome::Throttled, 60_999), 48, "a hold");
    assert_eq!(pacer.observe(Outcome::Throttled, 61_000), 38, "⌊48·8/10⌋");
    let floored = Pacer::new(&Config::DEFAULT.adaptive(40, 0), 0).unwrap();
    assert_eq!(floored.observe(Outcome::Throttled, 1000), 48);
    assert_eq!(floored.observe(Outcome::Throttled, 60_999), 48, "a hold");
    assert_eq!(floored.observe(Outcome::Throttled, 61_000), 40, "the floor");
    // The refill follows the rate in force: at 48/min one token takes
    // ⌈60000/48⌉ = 1250 ms.
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
    assert_eq!(one.observe(Outcome::Throttled, 1000), 48);
    assert!(matches!(one.reserve(1000), Decision::Admitted(a) if a.wait_ms == 1250));
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
