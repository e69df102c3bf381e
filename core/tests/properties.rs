//! Property tests of the pacing core (SPEC §3–§6) against an independent
//! model (`model/mod.rs`) and against hand-derived bounds.
//!
//! Every expected value here comes from the SPEC's formulas re-derived in
//! the model or written out by hand; the code under test is only ever the
//! thing being checked.

mod model;
#[path = "common/model_path.rs"]
mod model_path;

use model::{MConfig, MMode, MOutcome, Model, Q};
use model_path::core_path;
use pacer_core::{
    budget, AdmitPath, Config, Decision, Mode, Pacer, ReleasePolicy, StateView, Ticket,
};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

/// `cases` cases per property; failures are reported (with the shrunk
/// input) but not persisted to a regressions file.
fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

fn rate_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        1 => Just(0u32),
        2 => 1u32..=5,
        3 => 1u32..=60,
        4 => 1u32..=600,
        1 => Just(600u32),
    ]
}

fn idle_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 10_000u64..=3_600_000,
        2 => 10_000u64..=130_000,
        1 => prop::sample::select(vec![
            10_000u64, 14_000, 14_001, 16_000, 30_000, 30_001, 60_000, 62_001, 120_000, 3_600_000,
        ]),
    ]
}

/// Any resolvable budget: idle in range, retries up to the ladder ceiling
/// (the ceiling computed by the model, not the core), both policies.
fn config_strategy() -> impl Strategy<Value = MConfig> {
    (rate_strategy(), 0u32..=20, idle_strategy(), any::<bool>()).prop_flat_map(
        |(rate, burst, idle, strict)| {
            (0..=model::ladder_ceiling(idle)).prop_map(move |retries| MConfig {
                rate,
                burst,
                idle,
                retries,
                strict,
            })
        },
    )
}

/// Budgets in the refusing mode (enabled and can-refuse, per the model).
fn refusing_config_strategy() -> impl Strategy<Value = MConfig> {
    (1u32..=600, 0u32..=20, idle_strategy(), any::<bool>())
        .prop_flat_map(|(rate, burst, idle, strict)| {
            (1..=model::ladder_ceiling(idle).max(1)).prop_map(move |retries| MConfig {
                rate,
                burst,
                idle,
                retries,
                strict,
            })
        })
        .prop_filter("refusing mode", |c| {
            let b = model::bound(c.idle, c.retries);
            c.retries <= model::ladder_ceiling(c.idle)
                && model::enabled(c.rate, b)
                && model::can_refuse(c.rate, c.retries, b)
        })
}

fn core_config(c: &MConfig) -> Config {
    Config {
        rate_per_min: c.rate,
        burst: c.burst,
        idle_timeout_ms: c.idle,
        max_retries: c.retries,
        release_policy: if c.strict {
            ReleasePolicy::Strict
        } else {
            ReleasePolicy::Refund
        },
        adaptive_floor_per_min: 0,
        adaptive_ceiling_per_min: 0,
    }
}

#[derive(Clone, Debug)]
enum Op {
    Reserve,
    /// Release the held ticket at this index (modulo the number held).
    Release(usize),
    Forward(u64),
    Backward(u64),
    /// Set the clock to an absolute (possibly huge, possibly earlier) value.
    Jump(u64),
    /// Release a forged ticket whose debit no admission can have made
    /// (0, or more than one token): refused, nothing changes.
    ReleaseForged {
        seq: u32,
        debit_units: u32,
    },
}

fn huge_time() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![
        u64::MAX,
        u64::MAX - 1,
        u64::MAX - 59_999,
        u64::MAX / 2,
        1u64 << 40,
        0,
    ])
}

/// Operations with every kind of clock step.
fn op_strategy() -> BoxedStrategy<Op> {
    prop_oneof![
        12 => Just(Op::Reserve),
        4 => any::<usize>().prop_map(Op::Release),
        6 => (0u64..=2_000).prop_map(Op::Forward),
        2 => (0u64..=200_000).prop_map(Op::Forward),
        2 => (0u64..=5_000).prop_map(Op::Backward),
        1 => huge_time().prop_map(Op::Jump),
        1 => (0u32..4, prop_oneof![Just(0u32), 60_001u32..=u32::MAX])
            .prop_map(|(seq, debit_units)| Op::ReleaseForged { seq, debit_units }),
    ]
    .boxed()
}

/// Operations whose clock never goes backwards.
fn monotone_op_strategy() -> BoxedStrategy<Op> {
    prop_oneof![
        12 => Just(Op::Reserve),
        3 => any::<usize>().prop_map(Op::Release),
        6 => (0u64..=1_500).prop_map(Op::Forward),
        1 => (0u64..=90_000).prop_map(Op::Forward),
    ]
    .boxed()
}

fn start_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..=1_000_000,
        1 => huge_time(),
    ]
}

// ---------------------------------------------------------------------------
// Driving the pacer
// ---------------------------------------------------------------------------

/// A decision with the ticket replaced by its debit (tickets cannot be
/// copied, and outcomes are compared and stored).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Admitted {
        wait_ms: u64,
        debit_units: Option<u32>,
        path: AdmitPath,
        regressed: bool,
    },
    Refused {
        required_ms: u64,
        hint_s: u64,
        regressed: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Reserve {
        now: u64,
        before: StateView,
        outcome: Outcome,
        id: Option<u64>,
        after: StateView,
    },
    Release {
        now: u64,
        before: StateView,
        id: u64,
        debit_units: u32,
        refunded: bool,
        after: StateView,
    },
}

/// The id of a forged ticket in a trace (real tickets are numbered from 1).
const FORGED: u64 = 0;

/// One pacer, the tickets it handed out (numbered in issue order), and the
/// clock the operations move.
struct Run {
    pacer: Pacer,
    held: Vec<(u64, Ticket)>,
    next_id: u64,
    now: u64,
    /// Feed the pacer the running maximum of the clock instead of the clock.
    running_max: bool,
    max_seen: u64,
    /// Reserve through an exclusive borrow (`Pacer::reserve_mut`).
    exclusive: bool,
}

impl Run {
    fn new(cfg: &MConfig, start: u64) -> Run {
        let pacer = Pacer::new(&core_config(cfg), start).expect("resolvable config");
        Run {
            pacer,
            held: Vec::new(),
            next_id: 0,
            now: start,
            running_max: false,
            max_seen: start,
            exclusive: false,
        }
    }

    fn reading(&mut self) -> u64 {
        self.max_seen = self.max_seen.max(self.now);
        if self.running_max {
            self.max_seen
        } else {
            self.now
        }
    }

    fn reserve(&mut self) -> Event {
        let now = self.reading();
        let before = self.pacer.state();
        let decision = if self.exclusive {
            self.pacer.reserve_mut(now)
        } else {
            self.pacer.reserve(now)
        };
        let (outcome, id) = match decision {
            Decision::Admitted(a) => {
                let debit_units = a.ticket.as_ref().map(|t| t.debit_units());
                let id = a.ticket.map(|t| {
                    self.next_id += 1;
                    self.held.push((self.next_id, t));
                    self.next_id
                });
                (
                    Outcome::Admitted {
                        wait_ms: a.wait_ms,
                        debit_units,
                        path: a.path,
                        regressed: a.clock_regressed,
                    },
                    id,
                )
            }
            Decision::Refused(r) => (
                Outcome::Refused {
                    required_ms: r.required_wait_ms,
                    hint_s: r.retry_after_s,
                    regressed: r.clock_regressed,
                },
                None,
            ),
        };
        Event::Reserve {
            now,
            before,
            outcome,
            id,
            after: self.pacer.state(),
        }
    }

    /// Applies `op`; clock steps produce no event, a release with nothing
    /// held produces none either.
    fn apply(&mut self, op: &Op) -> Option<Event> {
        match *op {
            Op::Reserve => Some(self.reserve()),
            Op::Release(index) => {
                if self.held.is_empty() {
                    return None;
                }
                let (id, ticket) = self.held.swap_remove(index % self.held.len());
                let now = self.reading();
                let before = self.pacer.state();
                let debit_units = ticket.debit_units();
                let refunded = self.pacer.release(ticket, now);
                Some(Event::Release {
                    now,
                    before,
                    id,
                    debit_units,
                    refunded,
                    after: self.pacer.state(),
                })
            }
            Op::Forward(dt) => {
                self.now = self.now.saturating_add(dt);
                None
            }
            Op::Backward(dt) => {
                self.now = self.now.saturating_sub(dt);
                None
            }
            Op::Jump(t) => {
                self.now = t;
                None
            }
            Op::ReleaseForged { seq, debit_units } => {
                let now = self.reading();
                let before = self.pacer.state();
                let refunded = self.pacer.release(Ticket::from_raw(seq, debit_units), now);
                Some(Event::Release {
                    now,
                    before,
                    id: FORGED,
                    debit_units,
                    refunded,
                    after: self.pacer.state(),
                })
            }
        }
    }
}

fn units(q: Q) -> i128 {
    q.units()
        .unwrap_or_else(|| panic!("{q:?} tokens is not a whole number of units"))
}

fn model_mode_matches(model: MMode, core: Mode) -> bool {
    matches!(
        (model, core),
        (MMode::Disabled, Mode::Disabled)
            | (MMode::Refusing, Mode::Refusing)
            | (MMode::Shaping, Mode::ShapingLowRate)
            | (MMode::Shaping, Mode::ShapingNoRetry)
    )
}

/// Capacity and debt floor in units, from the SPEC's formulas (via the
/// model's own §3 arithmetic).
fn limits_units(c: &MConfig) -> (i128, i128) {
    let burst = c.burst.max(1) as i128;
    let bound = model::bound(c.idle, c.retries);
    (burst * 60_000, bound * c.rate as i128)
}

fn run_all(cfg: &MConfig, start: u64, ops: &[Op]) -> Vec<Event> {
    let mut run = Run::new(cfg, start);
    ops.iter().filter_map(|op| run.apply(op)).collect()
}

// ---------------------------------------------------------------------------
// 1. Agreement with the model
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(2_000))]

    /// Every decision, refund answer and state word agrees with the model.
    #[test]
    fn agrees_with_model(
        cfg in config_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..160),
        exclusive in any::<bool>(),
    ) {
        let mut run = Run::new(&cfg, start);
        run.exclusive = exclusive;
        let mut model = Model::new(&cfg, start);
        prop_assert!(model_mode_matches(model.mode, run.pacer.mode()), "mode {:?} vs {:?}", model.mode, run.pacer.mode());
        prop_assert_eq!(run.pacer.wait_bound_ms() as i128, model.bound);
        let mut model_ids = std::collections::HashMap::new();
        for op in &ops {
            let Some(event) = run.apply(op) else { continue };
            match &event {
                Event::Reserve { now, outcome, id, after, .. } => {
                    let expected = model.reserve(*now);
                    match (outcome, &expected) {
                        (
                            Outcome::Admitted { wait_ms, debit_units, path, regressed },
                            MOutcome::Admitted { wait_ms: m_wait, debit, path: m_path, regressed: m_regressed },
                        ) => {
                            prop_assert_eq!(*wait_ms as i128, *m_wait, "wait at {}", now);
                            prop_assert_eq!(*path, core_path(*m_path), "path vs model {:?}", m_path);
                            prop_assert_eq!(regressed, m_regressed);
                            prop_assert_eq!(debit_units.map(|u| u as i128), debit.map(|(d, _)| units(d)));
                            if let (Some(id), Some((_, m_id))) = (id, debit) {
                                model_ids.insert(*id, *m_id);
                            }
                        }
                        (
                            Outcome::Refused { required_ms, hint_s, regressed },
                            MOutcome::Refused { required_ms: m_required, hint_s: m_hint, regressed: m_regressed },
                        ) => {
                            prop_assert_eq!(*required_ms as i128, *m_required);
                            prop_assert_eq!(*hint_s as i128, *m_hint);
                            prop_assert_eq!(regressed, m_regressed);
                        }
                        _ => prop_assert!(false, "at {}: core {:?}, model {:?}", now, outcome, expected),
                    }
                    prop_assert_eq!(after.tokens_units as i128, units(model.tokens));
                    prop_assert_eq!(after.high_water_ms, model.hwm);
                }
                Event::Release { now, id, refunded, after, .. } => {
                    // The model never issued a ticket for a forged one.
                    let expected = model.release(model_ids.get(id).copied().unwrap_or(u64::MAX), *now);
                    prop_assert_eq!(*refunded, expected, "release of #{} at {}", id, now);
                    prop_assert_eq!(after.tokens_units as i128, units(model.tokens));
                    prop_assert_eq!(after.high_water_ms, model.hwm);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 2. §6.1 window bounds in the refusing mode
// ---------------------------------------------------------------------------

/// Checks both §6.1 bounds on a trace whose clock never went backwards.
/// Counting is in units (1/60000 token) so the rational bound is exact.
fn check_window_bounds(
    cfg: &MConfig,
    events: &[Event],
    window_ms: u64,
) -> Result<(), TestCaseError> {
    let (capacity, max_debt) = limits_units(cfg);
    let bound = model::bound(cfg.idle, cfg.retries);
    let refill = cfg.rate as i128 * window_ms as i128;
    let refunded: std::collections::HashSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Release {
                id, refunded: true, ..
            } => Some(*id),
            _ => None,
        })
        .collect();
    // (reservation time, admission time, ticket id) of every grant.
    let grants: Vec<(u64, u64, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Reserve {
                now,
                outcome: Outcome::Admitted { wait_ms, .. },
                id,
                ..
            } => Some((
                *now,
                now + wait_ms,
                id.expect("refusing mode: every admission debits"),
            )),
            _ => None,
        })
        .collect();
    let refund_times: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Release {
                now,
                refunded: true,
                ..
            } => Some(*now),
            _ => None,
        })
        .collect();
    let refunds_in = |from: u64, to: u64| -> i128 {
        if cfg.strict {
            0
        } else {
            refund_times
                .iter()
                .filter(|&&t| t >= from && t <= to)
                .count() as i128
        }
    };

    // Reservations granted, by reservation time. Under `strict`, grants
    // later refunded are not counted (nor is any release).
    for &(t1, _, _) in &grants {
        let t2 = t1 + window_ms;
        let granted = grants
            .iter()
            .filter(|(s, _, id)| *s >= t1 && *s <= t2 && !(cfg.strict && refunded.contains(id)))
            .count() as i128;
        let limit = capacity + max_debt + refill + 60_000 + 60_000 * refunds_in(t1, t2);
        prop_assert!(
            granted * 60_000 <= limit,
            "{} grants reserved in [{}, {}] > burst + max_debt + rate·W/60000 + 1 (+releases): limit {}/60000",
            granted,
            t1,
            t2,
            limit
        );
    }

    // Admission times of admissions that kept their debit. A refund can
    // only lift the count for admissions reserved after it, and those are
    // reserved at most `bound` before their admission time.
    let kept: Vec<(u64, u64)> = grants
        .iter()
        .filter(|(_, _, id)| !refunded.contains(id))
        .map(|&(s, a, _)| (s, a))
        .collect();
    for &(_, t1) in &kept {
        let t2 = t1 + window_ms;
        let admitted = kept.iter().filter(|(_, a)| *a >= t1 && *a <= t2).count() as i128;
        let limit =
            capacity + refill + 60_000 + 60_000 * refunds_in(t1.saturating_sub(bound as u64), t2);
        prop_assert!(
            admitted * 60_000 <= limit,
            "{} admission times in [{}, {}] > burst + rate·W/60000 + 1 (+releases): limit {}/60000",
            admitted,
            t1,
            t2,
            limit
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(800))]

    #[test]
    fn window_bounds_hold_when_refusing(
        cfg in refusing_config_strategy(),
        start in 0u64..=1_000_000,
        ops in prop::collection::vec(monotone_op_strategy(), 1..240),
        random_window in 0u64..=300_000,
    ) {
        let events = run_all(&cfg, start, &ops);
        let bound = model::bound(cfg.idle, cfg.retries) as u64;
        let interval = 60_000 / cfg.rate as u64;
        for window in [0, 1, 999, 1_000, 1_001, interval, interval + 1, bound, 60_000, random_window] {
            check_window_bounds(&cfg, &events, window)?;
        }
    }
}

// ---------------------------------------------------------------------------
// 3. §6.2 tokens stay within [−max_debt, capacity]
// 4. §6.3 a refusal changes nothing
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(1_000))]

    #[test]
    fn tokens_stay_between_floor_and_capacity(
        cfg in config_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..200),
    ) {
        let (capacity, max_debt) = limits_units(&cfg);
        let mut run = Run::new(&cfg, start);
        prop_assert_eq!(run.pacer.state().tokens_units as i128, capacity);
        for op in &ops {
            let _ = run.apply(op);
            let tokens = run.pacer.state().tokens_units as i128;
            prop_assert!(tokens <= capacity, "tokens {} above capacity {} after {:?}", tokens, capacity, op);
            prop_assert!(tokens >= -max_debt, "tokens {} below the floor -{} after {:?}", tokens, max_debt, op);
        }
    }

    #[test]
    fn refusal_leaves_state_identical(
        cfg in refusing_config_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..200),
    ) {
        for event in run_all(&cfg, start, &ops) {
            if let Event::Reserve { before, outcome: Outcome::Refused { .. }, after, now, .. } = event {
                prop_assert_eq!(before, after, "refusal at {} changed the state", now);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 5. §6.4 a request retrying on its hints is admitted in time
// ---------------------------------------------------------------------------

/// One request retrying on its hints, with no other traffic: returns the
/// retries it used and the total time from its first attempt to the moment
/// it may open (its last attempt's admission time), or a description of
/// the terminal refusal.
fn retry_on_hints(
    pacer: &Pacer,
    first_attempt_ms: u64,
    retries: u32,
    bound: i128,
) -> Result<(u32, u64), String> {
    let mut at = first_attempt_ms;
    for attempt in 0..=retries {
        match pacer.reserve(at) {
            Decision::Admitted(a) => {
                if a.wait_ms as i128 > bound {
                    return Err(format!(
                        "admitted after {} ms, above the bound {bound}",
                        a.wait_ms
                    ));
                }
                if let Some(ticket) = a.ticket {
                    // Keep the admission: the ticket is simply never released.
                    let _ = ticket.into_raw();
                }
                return Ok((attempt, at + a.wait_ms - first_attempt_ms));
            }
            Decision::Refused(r) => {
                if r.retry_after_s as i128 > model::cap_s(bound) || r.retry_after_s == 0 {
                    return Err(format!(
                        "hint {} s outside 1..={} s",
                        r.retry_after_s,
                        model::cap_s(bound)
                    ));
                }
                if attempt == retries {
                    return Err(format!(
                        "terminal refusal on attempt {attempt} at {at}: {r:?}"
                    ));
                }
                at += r.retry_after_s * 1000;
            }
        }
    }
    unreachable!()
}

/// The hand-derived ceiling on a request's time from first attempt to
/// opening: `(n+1)·bound + Σ_{k<n} max(hint_cap_ms, 2000·2^k)` for `n`
/// retries used, and (§3's stronger inequality) that is `< idle` for every
/// `n ≤ r`.
fn check_retry_budget(
    cfg: &MConfig,
    retries_used: u32,
    elapsed_ms: u64,
) -> Result<(), TestCaseError> {
    let bound = model::bound(cfg.idle, cfg.retries);
    let budget = (retries_used as i128 + 1) * bound + model::retry_spend(retries_used, bound);
    prop_assert!(
        elapsed_ms as i128 <= budget,
        "{} ms from first attempt to opening, budget {} ({} retries)",
        elapsed_ms,
        budget,
        retries_used
    );
    prop_assert!(
        (elapsed_ms as i128) < cfg.idle as i128,
        "{} ms >= idle {}",
        elapsed_ms,
        cfg.idle
    );
    Ok(())
}

proptest! {
    #![proptest_config(cases(1_500))]

    #[test]
    fn retrying_on_hints_is_admitted_within_deadline(
        cfg in refusing_config_strategy(),
        start in 0u64..=1_000_000,
        prefix in prop::collection::vec(monotone_op_strategy(), 0..200),
        offset in prop_oneof![3 => Just(0u64), 1 => 0u64..=20_000],
    ) {
        let mut run = Run::new(&cfg, start);
        for op in &prefix {
            let _ = run.apply(op);
        }
        let bound = model::bound(cfg.idle, cfg.retries);
        let first = run.now.max(run.pacer.state().high_water_ms) + offset;
        match retry_on_hints(&run.pacer, first, cfg.retries, bound) {
            Ok((used, elapsed)) => check_retry_budget(&cfg, used, elapsed)?,
            Err(why) => prop_assert!(false, "{:?}: {}", cfg, why),
        }
    }
}

/// Across the budget × rate space — idle timeouts at and around the points
/// where the ladder ceiling or the bound changes, every retry count up to
/// the ceiling, every refusing rate 1..=600 — from the deepest state one
/// instant can reach (drained until the first refusal), one request
/// retrying on its hints is admitted in time.
#[test]
fn retrying_on_hints_from_the_floor_across_budget_space() {
    let idles = [
        10_000u64, 10_001, 14_001, 16_000, 20_000, 30_000, 30_001, 45_000, 62_001, 90_000, 120_000,
        126_001, 254_001, 600_000, 3_600_000,
    ];
    let mut combos = 0;
    for idle in idles {
        for retries in 1..=model::ladder_ceiling(idle) {
            let bound = model::bound(idle, retries);
            for rate in 1u32..=600 {
                if !(model::enabled(rate, bound) && model::can_refuse(rate, retries, bound)) {
                    continue;
                }
                let cfg = MConfig {
                    rate,
                    burst: 1,
                    idle,
                    retries,
                    strict: false,
                };
                let pacer = Pacer::new(&core_config(&cfg), 0).unwrap();
                assert_eq!(pacer.mode(), Mode::Refusing, "{cfg:?}");
                let mut drained = 0;
                while let Decision::Admitted(a) = pacer.reserve(0) {
                    let _ = a.ticket.map(Ticket::into_raw);
                    drained += 1;
                    assert!(drained <= 1 + 151, "{cfg:?}: never refused");
                }
                match retry_on_hints(&pacer, 0, retries, bound) {
                    Ok((used, elapsed)) => {
                        let budget = (used as i128 + 1) * bound + model::retry_spend(used, bound);
                        assert!(
                            elapsed as i128 <= budget && (elapsed as i128) < idle as i128,
                            "{cfg:?}: {elapsed} ms"
                        );
                    }
                    Err(why) => panic!("{cfg:?}: {why}"),
                }
                combos += 1;
            }
        }
    }
    assert!(
        combos > 20_000,
        "only {combos} refusing combinations checked"
    );
}

// ---------------------------------------------------------------------------
// 6. §6.5 the §3 inequalities over every resolvable budget
// ---------------------------------------------------------------------------

fn check_budget(idle: u64, retries: u32) -> Result<(), TestCaseError> {
    let core_bound = budget::wait_bound_ms(idle, retries) as i128;
    let own_bound = model::bound(idle, retries);
    for bound in [core_bound, own_bound] {
        let attempts = retries as i128 + 1;
        prop_assert!(
            attempts * bound + model::backoff(retries) < idle as i128,
            "(r+1)·bound + backoff(r) = {} >= idle {}",
            attempts * bound + model::backoff(retries),
            idle
        );
        prop_assert!(
            attempts * bound + model::retry_spend(retries, bound) < idle as i128,
            "(r+1)·bound + Σ max(hint_cap, rung) = {} >= idle {}",
            attempts * bound + model::retry_spend(retries, bound),
            idle
        );
        prop_assert!((0..=15_000).contains(&bound));
    }
    prop_assert_eq!(core_bound, own_bound, "bound(idle {}, r {})", idle, retries);
    // The other §3 quantities, against the model's own arithmetic.
    let bound = own_bound;
    prop_assert_eq!(
        budget::hint_cap_s(bound as u64) as i128,
        model::cap_s(bound)
    );
    prop_assert_eq!(
        budget::refusal_schedule_ms(retries, bound as u64) as i128,
        model::schedule_ms(retries, bound)
    );
    for rate in [0u32, 1, 2, 3, 29, 30, 60, 600] {
        prop_assert_eq!(
            budget::can_refuse(rate, retries, bound as u64),
            model::can_refuse(rate, retries, bound)
        );
        prop_assert_eq!(
            budget::pacing_enabled(rate, bound as u64),
            model::enabled(rate, bound)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(10_000))]

    #[test]
    fn budget_inequalities_hold(
        (idle, retries) in prop_oneof![
            4 => 10_000u64..=3_600_000,
            1 => prop::sample::select(vec![10_000u64, 10_001, 14_000, 14_001, 30_000, 30_001, 62_000, 62_001, 3_600_000]),
        ]
        .prop_flat_map(|idle| (Just(idle), 0..=model::ladder_ceiling(idle))),
    ) {
        prop_assert_eq!(budget::ladder_ceiling(idle), model::ladder_ceiling(idle));
        check_budget(idle, retries)?;
    }
}

/// SPEC §3's worked budgets and thresholds, hand-written.
#[test]
fn worked_budgets() {
    let rows: [(u64, u32, u64); 8] = [
        (120_000, 5, 4833),
        (30_000, 3, 2000),
        (10_000, 2, 666),
        (3_600_000, 5, 15_000),
        (60_000, 4, 3000),
        (14_001, 3, 0),
        (120_000, 0, 15_000),
        (3_600_000, 10, 15_000),
    ];
    for (idle, retries, bound) in rows {
        assert_eq!(
            budget::wait_bound_ms(idle, retries),
            bound,
            "idle {idle}, r {retries}"
        );
        assert_eq!(
            model::bound(idle, retries),
            bound as i128,
            "model: idle {idle}, r {retries}"
        );
    }
    for (idle, ceiling) in [
        (120_000u64, 5u32),
        (30_000, 3),
        (14_001, 3),
        (10_000, 2),
        (3_600_000, 10),
    ] {
        assert_eq!(budget::ladder_ceiling(idle), ceiling);
        assert_eq!(model::ladder_ceiling(idle), ceiling);
    }
    // Lowest refusing rates: 3/min at defaults, 30/min at idle 10000.
    assert!(!model::can_refuse(2, 5, 4833) && model::can_refuse(3, 5, 4833));
    assert!(!model::can_refuse(29, 2, 666) && model::can_refuse(30, 2, 666));
    assert!(!budget::can_refuse(2, 5, 4833) && budget::can_refuse(3, 5, 4833));
    assert!(!budget::can_refuse(29, 2, 666) && budget::can_refuse(30, 2, 666));
    for (required, bound, hint) in [
        (5000u64, 666u64, 1u64),
        (99_000, 2000, 2),
        (99_000, 4833, 4),
        (99_000, 15_000, 15),
        (3000, 15_000, 3),
        (1200, 4833, 2),
    ] {
        assert_eq!(budget::retry_after_s(required, bound), hint);
        assert_eq!(model::hint_s(required as i128, bound as i128), hint as i128);
    }
}

// ---------------------------------------------------------------------------
// 7. §6.7 determinism
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(500))]

    #[test]
    fn identical_inputs_give_identical_outputs(
        cfg in config_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..200),
    ) {
        let mut first = Run::new(&cfg, start);
        let mut second = Run::new(&cfg, start);
        prop_assert_eq!(first.pacer.state(), second.pacer.state());
        for op in &ops {
            let a = first.apply(op);
            let b = second.apply(op);
            prop_assert_eq!(a, b, "diverged at {:?}", op);
        }
        prop_assert_eq!(first.pacer.state(), second.pacer.state());
    }
}

// ---------------------------------------------------------------------------
// 8. §5 a clock reading behind the high-water mark never creates tokens
// ---------------------------------------------------------------------------

/// Operations without releases, every kind of clock step.
fn no_release_op_strategy() -> BoxedStrategy<Op> {
    prop_oneof![
        12 => Just(Op::Reserve),
        6 => (0u64..=2_000).prop_map(Op::Forward),
        2 => (0u64..=200_000).prop_map(Op::Forward),
        3 => (0u64..=5_000).prop_map(Op::Backward),
        1 => huge_time().prop_map(Op::Jump),
    ]
    .boxed()
}

/// The token level of `state` brought forward to `at` (capacity-capped),
/// in units, by the SPEC's refill rule.
fn tokens_at(cfg: &MConfig, state: &StateView, at: u64) -> i128 {
    let (capacity, _) = limits_units(cfg);
    let gain = (at as i128 - state.high_water_ms as i128) * cfg.rate as i128;
    (state.tokens_units as i128 + gain).min(capacity)
}

proptest! {
    #![proptest_config(cases(1_000))]

    /// Without releases, feeding the readings as given or their running
    /// maximum ends in the same tokens (and, here, the very same state after
    /// every operation): a backwards reading refills and drains nothing.
    ///
    /// Only reservations: a release is a write at its own reading, so with
    /// releases a run fed the running maximum acts later, holds more tokens
    /// and may spend them on an extra admission, ending *lower* (see
    /// `regressed_reading_acts_at_the_high_water_mark` for the rule that
    /// holds with releases).
    #[test]
    fn backwards_readings_never_create_tokens(
        cfg in config_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec(no_release_op_strategy(), 1..200),
    ) {
        let mut as_read = Run::new(&cfg, start);
        let mut running_max = Run::new(&cfg, start);
        running_max.running_max = true;
        for op in &ops {
            let _ = as_read.apply(op);
            let _ = running_max.apply(op);
            let a = as_read.pacer.state();
            let b = running_max.pacer.state();
            let common = a.high_water_ms.max(b.high_water_ms);
            prop_assert!(
                tokens_at(&cfg, &a, common) <= tokens_at(&cfg, &b, common),
                "after {:?}: tokens {:?} with readings as given > {:?} with the running maximum", op, a, b
            );
            prop_assert_eq!(a, b, "after {:?}", op);
        }
        let a = as_read.pacer.state().tokens_units;
        let b = running_max.pacer.state().tokens_units;
        prop_assert!(a <= b, "tokens {} with readings as given > {} with the running maximum", a, b);
    }

    /// With any operations (releases too, both policies): a reading behind
    /// the high-water mark acts exactly as a reading at the mark — the same
    /// decision (flagged as regressed) and the same state after.
    #[test]
    fn regressed_reading_acts_at_the_high_water_mark(
        cfg in config_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..100),
    ) {
        let mut run = Run::new(&cfg, start);
        for (index, op) in ops.iter().enumerate() {
            let hwm = run.pacer.state().high_water_ms;
            let Some(event) = run.apply(op) else { continue };
            let (now, outcome, after) = match &event {
                Event::Reserve { now, outcome, after, .. } => (*now, Some(outcome.clone()), *after),
                Event::Release { now, after, .. } => (*now, None, *after),
            };
            if now >= hwm || !model::enabled(cfg.rate, model::bound(cfg.idle, cfg.retries)) {
                continue;
            }
            // Replay the prefix on a fresh pacer, then this operation at the mark.
            let mut twin = Run::new(&cfg, start);
            for earlier in &ops[..index] {
                let _ = twin.apply(earlier);
            }
            prop_assert_eq!(twin.pacer.state().high_water_ms, hwm);
            twin.now = hwm;
            twin.max_seen = twin.max_seen.max(hwm);
            let twin_event = twin.apply(op).expect("same operation");
            match (&event, &twin_event) {
                (Event::Reserve { .. }, Event::Reserve { outcome: at_mark, after: twin_after, .. }) => {
                    prop_assert_eq!(outcome.unwrap(), with_regressed(at_mark.clone()), "reserve at {} behind {}", now, hwm);
                    prop_assert_eq!(after, *twin_after);
                }
                (Event::Release { refunded, .. }, Event::Release { refunded: at_mark, after: twin_after, .. }) => {
                    prop_assert_eq!(refunded, at_mark);
                    prop_assert_eq!(after, *twin_after);
                }
                _ => prop_assert!(false, "{:?} vs {:?}", event, twin_event),
            }
        }
    }
}

/// The same outcome as read behind the mark.
fn with_regressed(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Admitted {
            wait_ms,
            debit_units,
            path,
            ..
        } => Outcome::Admitted {
            wait_ms,
            debit_units,
            path,
            regressed: true,
        },
        Outcome::Refused {
            required_ms,
            hint_s,
            ..
        } => Outcome::Refused {
            required_ms,
            hint_s,
            regressed: true,
        },
    }
}

// ---------------------------------------------------------------------------
// 9. FIFO slots, spacing, non-compression
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(800))]

    /// Reservations at one instant past the burst get admission times in
    /// reservation order, at least floor(60000/rate) apart.
    #[test]
    fn same_instant_reservations_get_spaced_fifo_slots(
        cfg in config_strategy().prop_filter("enabled", |c| model::enabled(c.rate, model::bound(c.idle, c.retries))),
        start in 0u64..=1_000_000,
        prefix in prop::collection::vec(monotone_op_strategy(), 0..100),
        count in 1usize..=60,
    ) {
        let mut run = Run::new(&cfg, start);
        for op in &prefix {
            let _ = run.apply(op);
        }
        let spacing = 60_000 / cfg.rate as u64;
        let instant = run.now;
        let mut previous: Option<(u64, AdmitPath)> = None;
        for _ in 0..count {
            let Event::Reserve { outcome, now, .. } = run.reserve() else { unreachable!() };
            prop_assert_eq!(now, instant);
            let Outcome::Admitted { wait_ms, debit_units: Some(_), path, .. } = outcome else { continue };
            let slot = instant + wait_ms;
            if let Some((last, last_path)) = previous {
                prop_assert!(slot >= last, "slot {} before the earlier reservation's {}", slot, last);
                if path == AdmitPath::Paced && last_path == AdmitPath::Paced && last > instant {
                    prop_assert!(slot - last >= spacing, "slots {} and {} closer than {} ms", last, slot, spacing);
                }
            }
            previous = Some((slot, path));
        }
    }

    /// Spread-out arrivals (no releases) are never compressed: consecutive
    /// admissions are at least min(arrival gap, floor(60000/rate)) apart,
    /// in order, and at least floor(60000/rate) apart after a queued one.
    #[test]
    fn spread_arrivals_are_not_compressed(
        cfg in refusing_config_strategy(),
        start in 0u64..=1_000_000,
        gaps in prop::collection::vec(prop_oneof![2 => 0u64..=2_000, 1 => 0u64..=70_000], 1..200),
    ) {
        let mut run = Run::new(&cfg, start);
        let spacing = 60_000 / cfg.rate as u64;
        let mut previous: Option<(u64, u64)> = None; // (reserved at, slot)
        for gap in gaps {
            run.now += gap;
            let Event::Reserve { outcome, now, .. } = run.reserve() else { unreachable!() };
            let Outcome::Admitted { wait_ms, .. } = outcome else { continue };
            let slot = now + wait_ms;
            if let Some((last_at, last_slot)) = previous {
                prop_assert!(slot >= last_slot, "slot {} before {}", slot, last_slot);
                prop_assert!(slot - last_slot >= spacing.min(now - last_at), "compressed: {} then {}", last_slot, slot);
                if last_slot > last_at {
                    prop_assert!(slot - last_slot >= spacing, "queued slots {} and {} closer than {}", last_slot, slot, spacing);
                }
            }
            previous = Some((now, slot));
        }
    }
}

// ---------------------------------------------------------------------------
// 10. §6.6 sustained overload
// ---------------------------------------------------------------------------

/// Admission times of offers every 732 ms for four minutes.
fn overload_offers() -> impl Iterator<Item = u64> {
    (0..).map(|k| k * 732).take_while(|&t| t < 240_000)
}

fn in_final_minute(slots: &[u64]) -> usize {
    slots
        .iter()
        .filter(|&&s| (180_000..240_000).contains(&s))
        .count()
}

#[test]
fn sustained_overload_admits_at_most_61_in_the_final_minute() {
    let cfg = MConfig {
        rate: 60,
        burst: 10,
        idle: 3_600_000,
        retries: 5,
        strict: false,
    };
    let pacer = Pacer::new(&core_config(&cfg), 0).unwrap();
    assert_eq!(pacer.wait_bound_ms(), 15_000);
    assert_eq!(pacer.mode(), Mode::Refusing);
    let mut slots = Vec::new();
    for t in overload_offers() {
        if let Decision::Admitted(a) = pacer.reserve(t) {
            slots.push(t + a.wait_ms);
            let _ = a.ticket.map(Ticket::into_raw);
        }
    }
    let last_minute = in_final_minute(&slots);
    assert!(
        last_minute <= 61,
        "{last_minute} admissions in the final minute"
    );
    assert!(
        last_minute >= 59,
        "{last_minute}: the pacer should keep the rate busy"
    );

    // The rejected design on the same offers: past the bound, admit anyway
    // (the model's shaping rule: debit to the floor, wait the bound, then
    // admit at once). The test must be able to tell the two apart.
    let mut admit_anyway = Model::new(&cfg, 0);
    admit_anyway.mode = MMode::Shaping;
    let slots: Vec<u64> = overload_offers()
        .map(|t| match admit_anyway.reserve(t) {
            MOutcome::Admitted { wait_ms, .. } => t + wait_ms as u64,
            MOutcome::Refused { .. } => unreachable!("the shaping rule never refuses"),
        })
        .collect();
    let reads = in_final_minute(&slots);
    assert!((80..=83).contains(&reads), "admit-anyway reads {reads}");
}
