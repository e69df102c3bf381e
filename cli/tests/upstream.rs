//! `simulate --upstream-limit-per-min` and `--adaptive` (SPEC §14): the
//! hidden upstream limit and adaptive pacing in the simulator. Expectations
//! are derived by hand from the model's statement (a sliding window of 60 s
//! counting opened connections) or are relations that hold for any seed.

use pacer_cli::sim::{self, Load, OnRefusal, SimConfig, SimReport};
use pacer_cli::upstream_sweep;
use pacer_core::Budget;

/// The command's defaults (20 agents, 3000 ms turns ± 1000 ms) at `rate`
/// for `duration_ms`.
fn closed(rate: u32, duration_ms: u64) -> SimConfig {
    SimConfig {
        budget: Budget {
            rate_per_min: rate,
            ..Budget::DEFAULT
        },
        duration_ms,
        ..SimConfig::DEFAULT
    }
}

fn run(cfg: &SimConfig) -> SimReport {
    sim::run(cfg, &mut |_| {}).unwrap()
}

/// Pacing off, one request a second for two minutes, each given up at its
/// first failure (`drop`), against a limit of 30 a minute: the requests at
/// 0 … 29 s open; 30 … 59 s find 30 openings in the last 60 s and are
/// throttled; at 60 s the opening at 0 s has left the window (0 + 60000 ≤
/// 60000), so 60 … 89 s open and 90 … 119 s are throttled. 60 open, 60
/// throttled, each throttle a terminal error; 30 of each per minute.
#[test]
fn the_hidden_limit_is_a_sliding_minute() {
    let cfg = SimConfig {
        load: Load::every(1000, OnRefusal::Drop),
        upstream_limit_per_min: Some(30),
        ..closed(0, 120_000)
    };
    let r = run(&cfg);
    assert_eq!(r.turns_started, 120);
    assert_eq!(r.upstream_throttled, Some(60));
    assert_eq!(r.turns_completed, 60);
    assert_eq!(r.terminal_rate_limit_errors, 60);
    let rows: Vec<(u64, Option<u64>)> = r
        .per_minute
        .iter()
        .map(|row| (row.admitted, row.throttled))
        .collect();
    assert_eq!(rows, [(30, Some(30)), (30, Some(30))]);
    assert!(r.rate_in_force_trace.is_empty(), "no adaptation, no trace");

    // The window is (now − 60 s, now]: with a limit of 1, requests exactly
    // 60 s apart all open.
    let spaced = SimConfig {
        load: Load::every(60_000, OnRefusal::Drop),
        duration_ms: 180_000,
        upstream_limit_per_min: Some(1),
        ..cfg
    };
    let r = run(&spaced);
    assert_eq!((r.turns_started, r.upstream_throttled), (3, Some(0)));
}

/// Without the flags the report has none of the new keys, so every figure
/// made before them reads the same.
#[test]
fn without_the_flags_the_report_is_unchanged() {
    let r = run(&closed(60, 120_000));
    let json = serde_json::to_value(&r).unwrap();
    for key in ["upstream_throttled", "rate_in_force_trace"] {
        assert!(json.get(key).is_none(), "{key}");
    }
    for key in [
        "upstream_limit_per_min",
        "adaptive_floor_per_min",
        "adaptive_ceiling_per_min",
    ] {
        assert!(json["settings"].get(key).is_none(), "{key}");
    }
    for row in json["per_minute"].as_array().unwrap() {
        assert!(row.get("throttled").is_none() && row.get("rate_in_force").is_none());
    }
}

/// With the ceiling at the configured rate (60), by the law in
/// core/src/adaptive.rs, against an upstream that allows 20 in any 60 s.
/// The default budget makes 3/min the lowest rate that can refuse, so the
/// rate in force stays in [max(5, 3), 60] = [5, 60].
///
/// - Searching from 60, clamped to the ceiling: 60 until the first throttle.
///   At 60/min with burst 10 at most 10 + ⌊t/1000⌋ are admitted by t, so the
///   21st opening attempt, the first the upstream can refuse, comes at t₁ ≥
///   11 s: the samples at 0, 5 and 10 s read 60.
/// - The first throttle (by 15 s with 20 agents always waiting) ends the
///   search: the 20 opened so far are all in minute 0, E = max(through,
///   recent) = 20, L = min(20, 60) = 20. It ends the first search less than
///   a minute after it began (at 0), so the pacer pauses: the origin moves
///   to 60 s and the rate reads the lowest, 5, until then (samples at 15 …
///   55 s).
/// - From 60 s the rate is L = 20. Throttles before 120 s (the hold) change
///   nothing; at 20/min, admissions 3000 ms apart never put more than 20 in
///   any 60 s, so none follows it. After a search the probe waits
///   max(240 s, 80 openings at 20/min = 240 s)/12 = 20 s past the hold: 20
///   + 10 + 2 = 32 from 140 s, so every sample from 60 s to 135 s reads 20.
///
/// It throttles less than the fixed rate of 60 on the same load.
#[test]
fn adaptation_lowers_the_rate_and_the_throttles() {
    let fixed = SimConfig {
        upstream_limit_per_min: Some(20),
        ..closed(60, 600_000)
    };
    let adaptive = SimConfig {
        adaptive: Some((5, 60)),
        ..fixed
    };
    let (f, a) = (run(&fixed), run(&adaptive));
    let rates: Vec<u64> = a.rate_in_force_trace.iter().map(|p| p[1]).collect();
    assert_eq!(
        rates[..3],
        [60, 60, 60],
        "searching at the ceiling: {rates:?}"
    );
    // Samples 3..=11: 15 s to 55 s, the pause; 12..=27: 60 s to 135 s.
    assert!(
        rates[3..=11].iter().all(|&r| r == 5),
        "the first throttle ends the search with a pause at the lowest rate until 60 s: {rates:?}"
    );
    assert!(
        rates[12..=27].iter().all(|&r| r == 20),
        "then L = 20, held and flat until the probe at 140 s: {rates:?}"
    );
    assert_eq!(rates[28], 32, "the probe's step at 140 s: {rates:?}");
    assert!(rates.iter().all(|r| (5..=60).contains(r)), "{rates:?}");
    assert!(
        a.upstream_throttled.unwrap() < f.upstream_throttled.unwrap() / 2,
        "adaptive {:?} vs fixed {:?}",
        a.upstream_throttled,
        f.upstream_throttled
    );
    // Samples every 5 s from 0 to the end of the run.
    assert_eq!(a.rate_in_force_trace.len(), 600_000 / 5_000 + 1);
}

/// The sweep runs each fixed rate and the adaptive pacer per limit and
/// judges the goals from the runs' own numbers.
#[test]
fn the_sweep_tables_every_limit() {
    let cfg = SimConfig {
        adaptive: Some((1, 600)),
        ..closed(30, 600_000)
    };
    let sweep = upstream_sweep::run(&cfg, &[20, 240], &[30, 120]).unwrap();
    assert_eq!(sweep.rows.len(), 2);
    for row in &sweep.rows {
        let best = row
            .fixed
            .iter()
            .map(|(_, r)| r.turns_completed)
            .max()
            .unwrap();
        let single = run(&SimConfig {
            budget: Budget {
                rate_per_min: row.fixed[0].0,
                ..Budget::DEFAULT
            },
            adaptive: None,
            upstream_limit_per_min: Some(row.upstream_limit_per_min),
            ..cfg
        });
        assert_eq!(row.fixed[0].1.turns_completed, single.turns_completed);
        let percent = 100.0 * row.adaptive.turns_completed as f64 / best as f64;
        assert!((row.turns_percent_of_best_fixed - percent).abs() < 1e-9);
        assert_eq!(
            row.goals_met,
            percent >= 90.0
                && (100.0 * row.adaptive.upstream_throttled as f64
                    / row.adaptive.turns_completed as f64)
                    < 5.0
        );
    }
    // At 240/min the fixed 120 is the best fixed rate and adaptive pacing,
    // free to climb to 600, passes it.
    let high = &sweep.rows[1];
    assert!(high.adaptive.turns_completed > high.fixed[1].1.turns_completed);
}
