//! The upstream's models in `pacer simulate` (cli/src/sim/upstream.rs):
//! the sliding and fixed-minute windows, the token bucket, limit changes
//! and the penalty. The model is driven directly through
//! [`UpstreamLimit::throttles`], one opening per call; every expected
//! answer is derived by hand in the comment beside it.

mod common;

use common::{assert_contains_all, pacer, pacer_json, stdout};
use pacer_cli::sim::{
    self, validate, Load, OnRefusal, SimConfig, UpstreamKind, UpstreamLimit, UpstreamModel,
    MAX_LIMIT_CHANGES,
};
use pacer_cli::upstream_sweep;
use pacer_core::Budget;

/// `changes` as the model's fixed-size schedule.
fn schedule(changes: &[(u64, u32)]) -> [Option<(u64, u32)>; MAX_LIMIT_CHANGES] {
    let mut out = [None; MAX_LIMIT_CHANGES];
    for (slot, &change) in out.iter_mut().zip(changes) {
        *slot = Some(change);
    }
    out
}

fn model(kind: UpstreamKind, changes: &[(u64, u32)], penalty_ms: u64) -> UpstreamModel {
    UpstreamModel {
        kind,
        changes: schedule(changes),
        penalty_ms,
    }
}

/// Judges each `(time, expected throttle)` in order on one upstream.
fn expect(limit: u32, model: UpstreamModel, openings: &[(u64, bool)]) {
    let mut upstream = UpstreamLimit::new(Some(limit), model);
    for (i, &(at, throttled)) in openings.iter().enumerate() {
        assert_eq!(
            upstream.throttles(at),
            throttled,
            "opening #{i} at {at} ms ({model:?}, limit {limit}): expected throttled = {throttled}"
        );
    }
}

const OK: bool = false;
const THROTTLED: bool = true;

/// `(time, fixed-minute throttles, sliding throttles)`, judged in order on
/// one upstream of each model with the same limit.
fn expect_windows(limit: u32, openings: &[(u64, bool, bool)]) {
    let fixed: Vec<(u64, bool)> = openings.iter().map(|&(at, f, _)| (at, f)).collect();
    let sliding: Vec<(u64, bool)> = openings.iter().map(|&(at, _, s)| (at, s)).collect();
    expect(limit, model(UpstreamKind::FixedMinute, &[], 0), &fixed);
    expect(limit, UpstreamModel::SLIDING, &sliding);
}

#[test]
fn the_windows_count_a_calendar_minute_or_the_last_sixty_seconds() {
    // T = 3. Fixed: minute 0 is [0, 60000): 0, 1, 2 open (counts 1..3); 3
    // and 59999 find 3 this minute. 60000 starts minute 1 at count 0:
    // 60000, 60001, 60002 open, 60003 is the fourth.
    // Sliding: 0, 1, 2 open; 3 and 59999 have all three in the last 60 s.
    // At 60000 the opening at 0 has left (0 + 60000 ≤ 60000): 2 in the
    // window, it opens; at 60001 the one at 1 has left: opens; 60002
    // likewise; 60003 finds 60000, 60001, 60002.
    expect_windows(
        3,
        &[
            (0, OK, OK),
            (1, OK, OK),
            (2, OK, OK),
            (3, THROTTLED, THROTTLED),
            (59_999, THROTTLED, THROTTLED),
            (60_000, OK, OK),
            (60_001, OK, OK),
            (60_002, OK, OK),
            (60_003, THROTTLED, THROTTLED),
        ],
    );
    // Three openings late in minute 0 (59000, 59001, 59002). Fixed: they
    // do not count in minute 1, so 60000 and 119000 open (counts 1, 2).
    // Sliding: all three are still in the window at 60000, throttled; at
    // 119000 the one at 59000 has left (59000 + 60000 ≤ 119000): opens.
    expect_windows(
        3,
        &[
            (59_000, OK, OK),
            (59_001, OK, OK),
            (59_002, OK, OK),
            (60_000, OK, THROTTLED),
            (119_000, OK, OK),
        ],
    );
}

#[test]
fn the_token_bucket_starts_full_and_refills_exactly() {
    // B = 2, T = 60 (60 units a ms: one token per 1000 ms). Full at 0: two
    // openings at 0 take both tokens; the third finds none. At 999 the
    // bucket holds 999 · 60 = 59940 units < 60000: throttled. At 1000 it
    // holds 60000: one token, taken; a second at 1000 finds 0.
    let bucket = model(UpstreamKind::TokenBucket { burst: 2 }, &[], 0);
    expect(
        60,
        bucket,
        &[
            (0, OK),
            (0, OK),
            (0, THROTTLED),
            (999, THROTTLED),
            (1000, OK),
            (1000, THROTTLED),
            // 9000 ms later the refill would be 9 tokens, capped at 2.
            (10_000, OK),
            (10_000, OK),
            (10_000, THROTTLED),
        ],
    );
    // B = 2, T = 7: 7 units a ms, a token every 60000 / 7 ≈ 8571.43 ms.
    // Two openings at 0 empty the full bucket. At 8571: 59997 units,
    // throttled; at 8572: 60004, opens, 4 left (below the cap of 120000,
    // so nothing is lost). The next token needs 4 + 7k ≥ 60000,
    // k ≥ 8570.86, k = 8571: at 8572 + 8571 = 17143 (at 17142 the bucket
    // holds 4 + 7 · 8570 = 59994). (With B = 1 the cap of 60000 would drop
    // those 4 units at 8572.)
    expect(
        7,
        model(UpstreamKind::TokenBucket { burst: 2 }, &[], 0),
        &[
            (0, OK),
            (0, OK),
            (8571, THROTTLED),
            (8572, OK),
            (17_142, THROTTLED),
            (17_143, OK),
        ],
    );
}

#[test]
fn the_limit_in_force_follows_the_schedule() {
    let changes = model(UpstreamKind::Sliding, &[(60_000, 1), (120_000, 5)], 0);
    // Base 3 until 59999 ms, 1 from 60000, 5 from 120000.
    assert_eq!(changes.limit_at(3, 0), 3);
    assert_eq!(changes.limit_at(3, 59_999), 3);
    assert_eq!(changes.limit_at(3, 60_000), 1);
    assert_eq!(changes.limit_at(3, 119_999), 1);
    assert_eq!(changes.limit_at(3, 120_000), 5);
    assert_eq!(changes.limit_at(3, u64::MAX), 5);
    assert_eq!(changes.change_times_ms(), vec![60_000, 120_000]);
    assert_eq!(UpstreamModel::SLIDING.limit_at(7, 1_000_000), 7);
    assert!(UpstreamModel::SLIDING.change_times_ms().is_empty());
}

#[test]
fn a_lower_limit_applies_to_the_openings_already_in_the_sliding_window() {
    // T = 3, then 1 from 60000, then 5 from 120000. 0, 1, 2 open. At 60000
    // the window holds 1 and 2 (0 has left): 2 ≥ 1, throttled. At 60002
    // both have left: 0 < 1, opens; 60003 finds 1 ≥ 1. At 120001 the window
    // holds 60002 (60002 + 60000 > 120001), 1 < 5: opens, and three more at
    // 120001 bring it to 5; the next is throttled.
    expect(
        3,
        model(UpstreamKind::Sliding, &[(60_000, 1), (120_000, 5)], 0),
        &[
            (0, OK),
            (1, OK),
            (2, OK),
            (60_000, THROTTLED),
            (60_002, OK),
            (60_003, THROTTLED),
            (120_001, OK),
            (120_001, OK),
            (120_001, OK),
            (120_001, OK),
            (120_001, THROTTLED),
        ],
    );
}

#[test]
fn a_lower_limit_applies_to_the_current_minutes_count() {
    // Fixed minute, T = 3, lowered to 2 at 30000 ms (mid-minute; the
    // command only changes at whole minutes, the model takes any instant).
    // 0 and 1 open (count 2); at 30000 the count 2 ≥ 2: throttled. At
    // 60000 the count restarts: 60000 and 60001 open, 60002 is throttled.
    expect(
        3,
        model(UpstreamKind::FixedMinute, &[(30_000, 2)], 0),
        &[
            (0, OK),
            (1, OK),
            (30_000, THROTTLED),
            (60_000, OK),
            (60_001, OK),
            (60_002, THROTTLED),
        ],
    );
}

#[test]
fn a_new_limit_changes_the_bucket_refill_from_that_instant() {
    // B = 2, T = 60 (60 units a ms), 6 from 60000 ms (6 units a ms: a token
    // per 10000 ms). 0, 0 empty the bucket. At 59000 the refill 59000 · 60
    // is capped at 2 tokens; both are taken (0 left). [59000, 60000) at 60
    // units a ms adds 60000: one token at 60000, taken. From 60000 at 6 a
    // ms, the next token is at 70000 (69999: 59994 units).
    expect(
        60,
        model(UpstreamKind::TokenBucket { burst: 2 }, &[(60_000, 6)], 0),
        &[
            (0, OK),
            (0, OK),
            (59_000, OK),
            (59_000, OK),
            (59_000, THROTTLED),
            (60_000, OK),
            (60_000, THROTTLED),
            (69_999, THROTTLED),
            (70_000, OK),
        ],
    );
}

#[test]
fn a_penalty_refuses_everything_for_its_length_without_extending() {
    // Fixed minute, T = 2, P = 5000. 0 and 1 open; 59000 is throttled at the
    // limit: everything in [59000, 64000) is refused. 60000 (a new minute,
    // count 0) and 63999 are refused by the penalty, which they do not
    // extend and which does not count them: 64000 and 64001 open (minute
    // 1's count 1, 2), 64002 is throttled at the limit and starts a new
    // penalty to 69002: 69001 is refused.
    expect(
        2,
        model(UpstreamKind::FixedMinute, &[], 5000),
        &[
            (0, OK),
            (1, OK),
            (59_000, THROTTLED),
            (60_000, THROTTLED),
            (63_999, THROTTLED),
            (64_000, OK),
            (64_001, OK),
            (64_002, THROTTLED),
            (69_001, THROTTLED),
        ],
    );
    // Token bucket B = 1, T = 60: 0 takes the token; 500 finds none
    // (30000 units) and starts a penalty to 5500. 1000 (a token is back)
    // and 5499 are refused by the penalty and take no token: 5500 opens
    // (the bucket, capped at 1, is full), and a second 5500 finds none.
    expect(
        60,
        model(UpstreamKind::TokenBucket { burst: 1 }, &[], 5000),
        &[
            (0, OK),
            (500, THROTTLED),
            (1000, THROTTLED),
            (5499, THROTTLED),
            (5500, OK),
            (5500, THROTTLED),
        ],
    );
    // Sliding T = 1, P = 0 (off): 1 is throttled, 60000 opens.
    expect(
        1,
        UpstreamModel::SLIDING,
        &[(0, OK), (1, THROTTLED), (2, THROTTLED), (60_000, OK)],
    );
}

#[test]
fn without_a_limit_nothing_is_throttled() {
    let mut upstream = UpstreamLimit::new(
        None,
        model(UpstreamKind::TokenBucket { burst: 1 }, &[], 5000),
    );
    assert!((0..100).all(|t| !upstream.throttles(t)));
}

/// Pacing off, one request a second with no retry, for 3 minutes.
fn one_a_second(limit: u32, upstream_model: UpstreamModel) -> SimConfig {
    SimConfig {
        budget: Budget {
            rate_per_min: 0,
            ..Budget::DEFAULT
        },
        load: Load::every(1000, OnRefusal::Drop),
        turn_ms: 100,
        turn_jitter_ms: 0,
        duration_ms: 180_000,
        upstream_limit_per_min: Some(limit),
        upstream_model,
        ..SimConfig::DEFAULT
    }
}

#[test]
fn a_run_with_a_fixed_minute_and_a_schedule() {
    // Fixed minute, 30, then 10 from minute 1, 45 from minute 2, one
    // request a second (0, 1000, …, 179000): minute 0 opens 0 … 29 s and
    // throttles 30 … 59 s (30 + 30); minute 1 opens 60 … 69 s, throttles 70
    // … 119 s (10 + 50); minute 2 opens the first 45 of its 60 and
    // throttles 15. 85 open, 95 throttled.
    let cfg = one_a_second(
        30,
        model(UpstreamKind::FixedMinute, &[(60_000, 10), (120_000, 45)], 0),
    );
    let report = sim::run(&cfg, &mut |_| {}).unwrap();
    assert_eq!(report.admitted_total, 85);
    assert_eq!(report.upstream_throttled, Some(95));
    let throttled: Vec<Option<u64>> = report.per_minute.iter().map(|r| r.throttled).collect();
    assert_eq!(throttled, vec![Some(30), Some(50), Some(15)]);
    let settings = serde_json::to_value(&report.settings).unwrap();
    assert_eq!(settings["upstream_model"]["kind"], "fixed-minute");
    assert_eq!(
        settings["upstream_model"]["limit_changes"],
        serde_json::json!([{"minute": 1, "limit": 10}, {"minute": 2, "limit": 45}])
    );
    // The default model is not named: the settings are as before.
    let plain = sim::run(&one_a_second(30, UpstreamModel::SLIDING), &mut |_| {}).unwrap();
    let settings = serde_json::to_value(&plain.settings).unwrap();
    assert!(settings.get("upstream_model").is_none(), "{settings}");
}

#[test]
fn validate_explains_a_bad_model() {
    let bad = |upstream_model, limit: Option<u32>| {
        let cfg = SimConfig {
            upstream_limit_per_min: limit,
            ..one_a_second(30, upstream_model)
        };
        validate(&cfg).unwrap_err()
    };
    let fixed = |changes: &[(u64, u32)]| model(UpstreamKind::FixedMinute, changes, 0);
    assert!(bad(fixed(&[]), None).contains("need --upstream-limit-per-min"));
    assert!(bad(fixed(&[(60_000, 0)]), Some(30)).contains("the limit must be 1..="));
    assert!(bad(fixed(&[(120_000, 5), (60_000, 9)]), Some(30)).contains("must increase"));
    assert!(bad(fixed(&[(60_000, 5), (60_000, 9)]), Some(30)).contains("must increase"));
    assert!(bad(fixed(&[(0, 5)]), Some(30)).contains("start at minute 1"));
    assert!(bad(fixed(&[(180_000, 5)]), Some(30)).contains("not within the run"));
    let gap = UpstreamModel {
        changes: [None, Some((60_000, 5)), None, None],
        ..fixed(&[])
    };
    assert!(bad(gap, Some(30)).contains("no gap"));
    let empty = model(UpstreamKind::TokenBucket { burst: 0 }, &[], 0);
    assert!(bad(empty, Some(30)).contains("--upstream-burst must be 1..="));
    assert!(validate(&one_a_second(30, fixed(&[(60_000, 5), (120_000, 9)]))).is_ok());
}

/// `--sweep-upstream` runs every limit with the chosen model: its fixed
/// rates' figures are those of single runs with the same model.
#[test]
fn the_upstream_sweep_keeps_the_model() {
    let bucket = model(
        UpstreamKind::TokenBucket { burst: 3 },
        &[(60_000, 10)],
        2000,
    );
    let closed = SimConfig {
        load: Load::closed(10),
        duration_ms: 180_000,
        upstream_model: bucket,
        adaptive: Some((1, 60)),
        ..SimConfig::DEFAULT
    };
    let sweep = upstream_sweep::run(&closed, &[20], &[60]).unwrap();
    let single = |upstream_model| {
        sim::run(
            &SimConfig {
                adaptive: None,
                upstream_limit_per_min: Some(20),
                upstream_model,
                ..closed
            },
            &mut |_| {},
        )
        .unwrap()
    };
    let with_model = single(bucket);
    let sliding = single(UpstreamModel::SLIDING);
    let row = &sweep.rows[0].fixed[0].1;
    assert_eq!(
        row.upstream_throttled,
        with_model.upstream_throttled.unwrap()
    );
    assert_eq!(row.turns_completed, with_model.turns_completed);
    // The model matters here, so the equality above says it was used.
    assert_ne!(with_model.upstream_throttled, sliding.upstream_throttled);
}

#[test]
fn the_command_takes_each_flag() {
    let base = [
        "simulate",
        "--duration-ms",
        "120000",
        "--upstream-limit-per-min",
        "30",
    ];
    let with = |extra: &[&'static str]| [&base[..], extra].concat();
    for (extra, words) in [
        (&["--upstream-model", "sliding"][..], "in any 60 s;"),
        (
            &["--upstream-model", "fixed-minute"][..],
            "in each calendar minute",
        ),
        (
            &["--upstream-model", "token-bucket", "--upstream-burst", "4"][..],
            "token bucket of 4 connections refilled at 30 a minute",
        ),
        (
            &["--upstream-model", "token-bucket"][..],
            "token bucket of 10 connections",
        ),
        (&["--upstream-limit-at", "1=15"][..], ", 15 from minute 1"),
        (
            &["--upstream-penalty-ms", "5000"][..],
            "refuses every connection for 5000 ms",
        ),
    ] {
        assert_contains_all(&stdout(&with(extra)), &[words]);
    }
    let report = pacer_json(&with(&[
        "--upstream-model",
        "token-bucket",
        "--upstream-limit-at",
        "1=15",
        "--json",
    ]));
    assert_eq!(
        report["settings"]["upstream_model"],
        serde_json::json!({"kind": "token-bucket", "burst": 10,
            "limit_changes": [{"minute": 1, "limit": 15}], "penalty_ms": 0})
    );
    // The default names no model.
    let plain = pacer_json(&with(&["--json"]));
    assert!(plain["settings"].get("upstream_model").is_none());
    let sweep = stdout(&[
        "simulate",
        "--sweep-upstream",
        "20",
        "--adaptive",
        "--duration-ms",
        "120000",
        "--upstream-model",
        "fixed-minute",
    ]);
    assert_contains_all(
        &sweep,
        &["upstream: a hidden limit of T new connections in each calendar minute"],
    );
}

#[test]
fn the_command_explains_bad_upstream_flags() {
    for (args, message) in [
        (
            &["--upstream-model", "fixed-minute"][..],
            "--upstream-model needs --upstream-limit-per-min or --sweep-upstream",
        ),
        (
            &["--upstream-penalty-ms", "100"][..],
            "--upstream-penalty-ms needs --upstream-limit-per-min",
        ),
        (
            &["--upstream-limit-per-min", "30", "--upstream-burst", "5"][..],
            "--upstream-burst applies to --upstream-model token-bucket",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-model",
                "token-bucket",
                "--upstream-burst",
                "0",
            ][..],
            "--upstream-burst must be 1..=60000, not 0",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-limit-at",
                "2=0",
            ][..],
            "--upstream-limit-at 2=0: the limit must be 1..=60000",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-limit-at",
                "5=10,3=20",
            ][..],
            "the minutes must increase (3 comes after 5)",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-limit-at",
                "20=15",
            ][..],
            "minute 20 is not within the run",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-limit-at",
                "2:15",
            ][..],
            "'2:15' is not MINUTE=LIMIT",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-limit-at",
                "1=1,2=2,3=3,4=4,5=5",
            ][..],
            "at most 4 changes",
        ),
        (
            &[
                "--upstream-limit-per-min",
                "30",
                "--upstream-model",
                "leaky",
            ][..],
            "invalid value 'leaky'",
        ),
    ] {
        let out = pacer(
            &[&["simulate", "--duration-ms", "600000"][..], args].concat(),
            "",
        );
        assert_ne!(out.code, 0, "{args:?} was accepted");
        assert!(out.stderr.contains(message), "{args:?}: {}", out.stderr);
    }
}
