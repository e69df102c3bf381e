//! Properties of the simulator over its accepted options: every run ends,
//! every started turn has an outcome, and the work a run does (events
//! handled) stays within a bound derived by hand from its options.
//!
//! The bound, per request (turn or offer): one start event (turn start or
//! arrival), one deadline, at most `r` retry attempts (the client makes at
//! most `r + 1` attempts; the first runs inside the start event), one
//! opening, one end of turn and one cancellation: `r + 5` events, where `r`
//! is the client's retry count (0 when refused offers are dropped).
//! Requests:
//! - closed loop: an agent starts at most one turn per `max(1, think)` ms
//!   (a turn lasts at least 0 ms, then the agent thinks; and never two
//!   turns in one millisecond), and only before the duration, so at most
//!   `agents · ceil(duration / max(1, think))` turns (a first turn
//!   staggered past the end still starts: that is the `1` of `ceil`);
//! - open loop, periodic: offer k at floor(k · interval) < duration, so
//!   exactly `ceil(duration / interval)` offers;
//! - open loop, Poisson: the count is random with mean
//!   `λ = duration / interval`; `λ + 10·√λ + 20` is exceeded with
//!   probability below 1e-20, so it is the bound used.
//!
//! With `machines` machines every machine carries that whole load (its own
//! agents, or its own arrival stream — for Poisson an independent one, so
//! the bound holds for all of them but with probability below
//! `machines · 1e-20`), so one arrangement starts at most `machines` times
//! the bound; above one machine both arrangements run, each with half of
//! the limits it is given, so the run is given twice the bound.
//!
//! Each run is given that bound as its event limit, so a run that would
//! not end fails the property at once instead of hanging the test.

use pacer_cli::sim::{self, Arrivals, Design, Limits, Load, OnRefusal, SimConfig};
use pacer_core::{resolve, ReleasePolicy, Settings};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum LoadChoice {
    Closed {
        agents: u32,
        think_ms: u64,
        stagger_ms: u64,
    },
    Open {
        /// `(num, den)`: the interval is `num / den` ms.
        interval: (u64, u64),
        poisson: bool,
        drop: bool,
    },
}

#[derive(Clone, Debug)]
struct Case {
    rate: u64,
    idle_ms: u64,
    retries: u64,
    burst: u32,
    strict: bool,
    admit_anyway: bool,
    booking: bool,
    load: LoadChoice,
    turn_ms: u64,
    turn_jitter_ms: u64,
    first_byte_ms: u64,
    duration_ms: u64,
    seed: u64,
    cancel_percent: u32,
    machines: u32,
}

fn load_choice() -> impl Strategy<Value = LoadChoice> {
    prop_oneof![
        (
            1u32..=16,
            prop_oneof![Just(0u64), 0u64..=5_000],
            prop_oneof![Just(0u64), 0u64..=90_000]
        )
            .prop_map(|(agents, think_ms, stagger_ms)| LoadChoice::Closed {
                agents,
                think_ms,
                stagger_ms,
            }),
        (
            prop_oneof![
                // --offered-per-min N: interval 60000 / N ms.
                (1u64..=600).prop_map(|n| (60_000u64, n)),
                // --offered-every-ms M.
                (100u64..=20_000).prop_map(|m| (m, 1u64)),
            ],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(interval, poisson, drop)| LoadChoice::Open {
                interval,
                poisson,
                drop,
            }),
    ]
}

prop_compose! {
    fn case()(
        rate in prop_oneof![Just(0u64), Just(60), 0u64..=700],
        idle_ms in prop_oneof![Just(120_000u64), 10_000u64..=300_000],
        retries in 0u64..=12,
        burst in 0u32..=20,
        strict in any::<bool>(),
        design in 0u8..3,
        load in load_choice(),
        turn_ms in prop_oneof![Just(0u64), 0u64..=15_000],
        jitter in prop_oneof![Just(0u64), 0u64..=5_000],
        first_byte_ms in prop_oneof![Just(0u64), 0u64..=20_000],
        duration_ms in 1u64..=90_000,
        seed in any::<u64>(),
        cancel_percent in prop_oneof![Just(100u32), Just(0), 0u32..=100],
        // --machines: mostly one or a few, sometimes up to the maximum.
        machines in prop_oneof![3 => Just(1u32), 2 => 2u32..=4, 1 => 5u32..=64],
    ) -> Case {
        // Very short turns at a high rate make many turns (an agent can
        // start one every ms), and so do many machines (each carries the
        // whole load, in both arrangements): keep those runs short so that
        // every case stays quick.
        let duration_ms = if turn_ms < 500 {
            duration_ms % (10_000 / u64::from(machines)) + 1
        } else if machines > 4 {
            duration_ms % 3_000 + 1
        } else {
            duration_ms
        };
        Case {
            rate,
            idle_ms,
            retries,
            burst,
            strict,
            admit_anyway: design == 1,
            booking: design == 2,
            load,
            turn_ms,
            turn_jitter_ms: jitter,
            first_byte_ms,
            duration_ms,
            seed,
            cancel_percent,
            machines,
        }
    }
}

/// The request bound of the module comment, for one arrangement.
fn request_bound(case: &Case) -> u64 {
    u64::from(case.machines) * request_bound_per_machine(case)
}

/// The request bound of one machine.
fn request_bound_per_machine(case: &Case) -> u64 {
    let d = case.duration_ms;
    match case.load {
        LoadChoice::Closed {
            agents, think_ms, ..
        } => u64::from(agents) * d.div_ceil(think_ms.max(1)),
        LoadChoice::Open {
            interval: (num, den),
            poisson: false,
            ..
        } => (d * den).div_ceil(num),
        LoadChoice::Open {
            interval: (num, den),
            poisson: true,
            ..
        } => {
            let lambda = d as f64 * den as f64 / num as f64;
            (lambda + 10.0 * lambda.sqrt() + 20.0).ceil() as u64
        }
    }
}

/// What the property reads of one arrangement's run.
struct Figures {
    request_limit_reached_ms: Option<u64>,
    turns_started: u64,
    events: u64,
    ended: u64,
    attempts: u64,
}

/// The [`Figures`] of a [`sim::SimReport`] or of a [`sim::ArrangementReport`]
/// (fields of the same names).
macro_rules! figures {
    ($report:expr) => {{
        let r = $report;
        Figures {
            request_limit_reached_ms: r.request_limit_reached_ms,
            turns_started: r.turns_started,
            events: r.events,
            ended: r.turns_completed
                + r.terminal_rate_limit_errors
                + r.deadline_overruns
                + r.cancelled,
            attempts: r.attempts,
        }
    }};
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn every_accepted_run_ends_within_its_event_bound(case in case()) {
        let (rate, idle, retries) = (
            case.rate.to_string(),
            case.idle_ms.to_string(),
            case.retries.to_string(),
        );
        let budget = resolve(&Settings {
            rate_per_min: Some(&rate),
            idle_timeout_ms: Some(&idle),
            total_timeout_ms: None,
            max_retries: Some(&retries),
        })
        .budget;
        let (load, client_retries) = match case.load {
            LoadChoice::Closed { agents, think_ms, stagger_ms } => (
                Load::Closed { agents, think_ms, stagger_ms },
                budget.max_retries,
            ),
            LoadChoice::Open { interval: (num, den), poisson, drop } => (
                Load::Open {
                    arrivals: if poisson {
                        Arrivals::Poisson { mean_num: num, mean_den: den }
                    } else {
                        Arrivals::Periodic { every_num: num, every_den: den }
                    },
                    on_refusal: if drop { OnRefusal::Drop } else { OnRefusal::Retry },
                },
                if drop { 0 } else { budget.max_retries },
            ),
        };
        let cfg = SimConfig {
            budget,
            burst: case.burst,
            release_policy: if case.strict { ReleasePolicy::Strict } else { ReleasePolicy::Refund },
            design: if case.admit_anyway { Design::AdmitAnyway } else { Design::Paced },
            load,
            turn_ms: case.turn_ms,
            turn_jitter_ms: case.turn_jitter_ms,
            first_byte_ms: case.first_byte_ms,
            duration_ms: case.duration_ms,
            seed: case.seed,
            cancel_percent: case.cancel_percent,
            booking: case.booking,
            machines: case.machines,
            ..SimConfig::DEFAULT
        };
        let per_request = u64::from(client_retries) + 5;
        let requests = request_bound(&case);
        // Above one machine both arrangements run, each with half.
        let arrangements = if case.machines > 1 { 2 } else { 1 };
        let limits = Limits {
            max_requests: arrangements * requests,
            max_events: arrangements * requests * per_request,
        };
        let report = sim::run_with_limits(&cfg, limits, &mut |_| {})
            .map_err(|e| TestCaseError::fail(format!("{e}: {case:?}")))?;
        check(&figures!(&report), requests, per_request, client_retries, &case)?;
        match &report.machines {
            None => prop_assert_eq!(case.machines, 1),
            Some(m) => {
                prop_assert_eq!(m.machines, case.machines);
                let a = &m.bucket_per_machine;
                // The report's own figures are the bucket-per-machine run.
                prop_assert_eq!(
                    (a.turns_started, a.events, a.attempts),
                    (report.turns_started, report.events, report.attempts)
                );
                check(&figures!(a), requests, per_request, client_retries, &case)?;
                check(&figures!(&m.fleet_bucket), requests, per_request, client_retries, &case)?;
            }
        }
    }
}

/// The property for one arrangement: no request limit reached, at most
/// `requests` started, at most `per_request` events each, every started
/// turn ended, at most `retries + 1` attempts each.
fn check(
    f: &Figures,
    requests: u64,
    per_request: u64,
    retries: u32,
    case: &Case,
) -> Result<(), TestCaseError> {
    prop_assert!(
        f.request_limit_reached_ms.is_none(),
        "request bound reached: {:?}",
        case
    );
    prop_assert!(
        f.turns_started <= requests,
        "{} > {requests}: {:?}",
        f.turns_started,
        case
    );
    prop_assert!(
        f.events <= f.turns_started * per_request,
        "{} events for {} requests of at most {} events",
        f.events,
        f.turns_started,
        per_request
    );
    prop_assert_eq!(f.turns_started, f.ended);
    prop_assert!(f.attempts <= f.turns_started * (u64::from(retries) + 1));
    Ok(())
}
