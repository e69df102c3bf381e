//! `pacer simulate --machines N`: several proxies against one upstream
//! account, with a bucket per machine and with one fleet bucket (SPEC §12).
//! Every expected figure is derived by hand in the comment beside it, from
//! SPEC §4, §6.1, §7 and §8; none is computed by the code under test.

mod common;

use common::{assert_contains_all, pacer, pacer_json, plot, stdout, u, us};
use pacer_cli::sim::{self, Arrivals, Buckets, Design, Limits, Load, OnRefusal, SimConfig};
use pacer_core::ReleasePolicy;
use serde_json::Value;

/// The two arrangements of a report with several machines: a bucket per
/// machine, one fleet bucket.
fn arrangements(report: &Value) -> (&Value, &Value) {
    let m = &report["machines"];
    (&m["bucket_per_machine"], &m["fleet_bucket"])
}

fn minutes(arrangement: &Value) -> Vec<u64> {
    arrangement["upstream_per_minute"]
        .as_array()
        .expect("upstream_per_minute")
        .iter()
        .map(|v| v.as_u64().expect("a count"))
        .collect()
}

/// The brief's case: 3 machines × 20 agents, 3 s turns (± 1 s, the default
/// jitter), defaults (rate 60, burst 10, bound 4833 ms, hint cap 4 s, 5
/// retries), 10 minutes, no cancellations.
#[test]
fn a_bucket_per_machine_triples_the_upstream_rate_and_a_fleet_bucket_holds_it() {
    let r = pacer_json(&["simulate", "--machines", "3", "--agents", "20", "--json"]);
    assert_eq!(us(&r["machines"], ["machines", "rate_per_min"]), [3, 60]);
    let (per, fleet) = arrangements(&r);
    assert_eq!((u(per, "buckets"), u(fleet, "buckets")), (3, 1));
    // The report's own figures are the bucket-per-machine run.
    assert_eq!(
        u(&r, "admitted_per_min_max"),
        u(per, "upstream_per_min_max")
    );

    // SPEC §6.1: connections opened in any window of W ms through one
    // bucket ≤ burst + rate·W/60000 + 1 (plus releases: none here — no
    // cancellations, and with first byte at once and a bound sized below
    // the deadline no deadline fires during a wait). A whole minute is
    // such a window: ≤ 10 + 60 + 1 = 71 per bucket.
    assert_eq!((u(per, "releases"), u(fleet, "releases")), (0, 0));
    for (minute, &count) in minutes(fleet).iter().enumerate() {
        assert!(count <= 71, "fleet bucket, minute {minute}: {count} > 71");
    }
    assert!(u(fleet, "upstream_per_min_max") <= 71);
    // Three buckets of 71 at most each: ≤ 213 in any minute.
    for (minute, &count) in minutes(per).iter().enumerate() {
        assert!(count <= 213, "bucket per machine, minute {minute}: {count}");
    }
    // The whole run is one window of 600000 ms: ≤ 10 + 600 + 1 = 611
    // through one bucket, so the fleet's mean over the 10 full minutes is
    // ≤ 61.1.
    assert!(u(fleet, "upstream_total") <= 611);
    assert!(fleet["upstream_per_min_mean"].as_f64().unwrap() <= 61.1);
    assert_eq!(u(fleet, "whole_minutes"), 10);

    // From below: a busy bucket spends everything it refills. A bucket
    // loses refill only while full. It starts full, and 20 agents (or 60)
    // drain it at t = 0. To be full again it must climb from below 1 token
    // to 10, 9 s without an admission — but while it holds ≥ 1 token
    // every request is admitted at once, and every agent asks at least
    // every 8.833 s (a turn of ≤ 4 s after a wait of ≤ 4833 ms, or a hint
    // of ≤ 4 s after a refusal, or at once after a terminal error; no think
    // time). So over [0, 600 s) a bucket debits 10 + 600 − its final level
    // (≤ 10) ≥ 600 tokens, one per admission. Admissions that open at or
    // after 600 s (waits ≤ 4833 ms) are at most those debited in the last
    // 4833 ms: ≤ 10 (level) + 4.833 (refill) + 1 < 16. So each bucket opens
    // ≥ 584 connections within the run.
    //
    // A bucket per machine: each of the 3 buckets admits its own 60/min,
    // so the upstream sees about 3 × 60: ≥ 3 × 584 = 1752 in 10 minutes, a
    // mean ≥ 175.2 per full minute, and the peak minute ≥ the mean, well
    // above 2 × 60 = 120.
    assert!(
        u(per, "upstream_total") >= 1752,
        "{}",
        u(per, "upstream_total")
    );
    assert!(per["upstream_per_min_mean"].as_f64().unwrap() >= 175.2);
    assert!(
        u(per, "upstream_per_min_max") > 120,
        "{}",
        u(per, "upstream_per_min_max")
    );
    // One fleet bucket: its 60 agents keep it just as busy: ≥ 584.
    assert!(u(fleet, "upstream_total") >= 584);

    // Both arrangements hold half of the 4,000,000-request limit.
    assert_eq!(
        (u(per, "request_limit"), u(fleet, "request_limit")),
        (2_000_000, 2_000_000)
    );

    // Each machine brings its own 20 agents: both arrangements run 60.
    let text = stdout(&["simulate", "--machines", "3", "--agents", "20"]);
    assert_contains_all(
        &text,
        &[
            "3 machines, each with its own closed loop: 20 agents",
            "Little's law: 60 agents",
        ],
    );
}

/// SPEC §7's 30 simultaneous requests, spread over 3 machines: each
/// machine's 10 agents start one turn at t = 0 (100 s turns, identical; a
/// 1 ms run starts no second turn).
#[test]
fn thirty_simultaneous_requests_on_three_machines() {
    let r = pacer_json(&[
        "simulate",
        "--machines",
        "3",
        "--agents",
        "10",
        "--turn-ms",
        "100000",
        "--turn-jitter-ms",
        "0",
        "--duration-ms",
        "1",
        "--json",
    ]);
    let (per, fleet) = arrangements(&r);
    // A bucket per machine: 10 requests against a burst of 10 each: all 30
    // admitted at once, none waits, none is refused; every turn lasts
    // exactly 100 s.
    let admitted = ["turns_started", "admissions", "refusals", "turns_completed"];
    assert_eq!(us(per, admitted), [30, 30, 0, 30]);
    assert_eq!((u(&r, "waits"), u(per, "latency_p50_ms")), (0, 100_000));
    // One fleet bucket: SPEC §7 — #1–10 at once, #11–14 wait 1000, 2000,
    // 3000, 4000 (level −4), #15 needs 5000 > 4833: refused with hint
    // min(ceil(5000/1000), 4) = 4 s, as are the other 15. They retry at
    // 4000 ms, when the level is back to −4 + 4 = 0: again 4 admitted
    // (waits 1000–4000, opening at 5–8 s) and the rest refused with hint
    // 4. Rounds at 0, 4, 8, 12, 16 s admit 14, 4, 4, 4, 4 = 30 and refuse
    // 16, 12, 8, 4, 0 = 40; the last four used 4 of their 5 retries, so
    // none is terminal. Attempts 30 + 40 = 70.
    let keys = [
        "turns_started",
        "admissions",
        "refusals",
        "attempts",
        "terminal_rate_limit_errors",
        "turns_completed",
    ];
    assert_eq!(us(fleet, keys), [30, 30, 40, 70, 0, 30]);
    // Opening times: 10 at 0, then one at each second 1 … 20 s. Latency =
    // opening + 100 s; nearest-rank p50 of 30 is the 15th: 10 zeros, then
    // 1, 2, 3, 4, 5 s → 105 s.
    assert_eq!(u(fleet, "latency_p50_ms"), 105_000);
    // Both open all 30 within the run's one (partial) minute; no whole
    // minute, so no mean.
    for arrangement in [per, fleet] {
        assert_eq!(minutes(arrangement), [30]);
        assert_eq!(u(arrangement, "upstream_per_min_max"), 30);
        assert!(arrangement["upstream_per_min_mean"].is_null());
    }
}

/// Open loop: `--offered-per-min` is per machine. 2 machines, 60 offers
/// per minute each (one at every whole second 0 … 59 s), refused offers
/// dropped, one minute.
#[test]
fn offered_load_is_per_machine() {
    let r = pacer_json(&[
        "simulate",
        "--machines",
        "2",
        "--offered-per-min",
        "60",
        "--duration-ms",
        "60000",
        "--on-refusal",
        "drop",
        "--json",
    ]);
    let (per, fleet) = arrangements(&r);
    // 2 × 60 offers in both arrangements.
    assert_eq!(
        (u(per, "turns_started"), u(fleet, "turns_started")),
        (120, 120)
    );
    // A bucket per machine: one offer a second against a refill of one a
    // second from a full bucket: every offer admitted at once, 120 opened
    // within the minute.
    assert_eq!(us(per, ["admissions", "refusals"]), [120, 0]);
    assert_eq!(minutes(per), [120]);
    // One fleet bucket: two offers a second, refill one. Level after the
    // pair at t = k s (k ≤ 8): 10 − 2 + k·(1 − 2) = 8 − k, so pairs at 0 …
    // 8 s open at once (18) and the level is 0. At 9 s: level 1 → at once,
    // then wait 1000 (level −1); 10 s: waits 1000, 2000 (−2); 11 s: 2000,
    // 3000 (−3); 12 s: 3000, 4000 (−4): 8 more. From 13 s the level is −3
    // after the refill: the first waits 4000 (−4), the second would need
    // 5000 > 4833: refused and dropped. 13 … 59 s: 47 admitted, 47
    // refused. Admitted 18 + 8 + 47 = 73.
    let dropped = ["admissions", "refusals", "terminal_rate_limit_errors"];
    assert_eq!(us(fleet, dropped), [73, 47, 47]);
    // Opened before 60 s: the 18, the 8 (at 9 … 16 s), and of the later
    // ones (each opening 4 s after its offer) those offered at 13 … 55 s:
    // 43. 18 + 8 + 43 = 69 = burst + 59, the first minute SPEC §6.1 allows
    // (≤ 71).
    assert_eq!(minutes(fleet), [69]);
    assert_eq!(fleet["upstream_per_min_mean"].as_f64(), Some(69.0));
}

fn config(load: Load, machines: u32) -> SimConfig {
    SimConfig {
        load,
        duration_ms: 180_000,
        seed: 7,
        cancel_percent: 20,
        machines,
        ..SimConfig::DEFAULT
    }
}

/// With one machine the two arrangements are the same thing — one pacer
/// behind one machine's gate, one random stream seeded with the run's
/// seed — so they give identical reports, equal to the plain run, which
/// carries no machines section.
#[test]
fn one_machine_gives_identical_figures_in_both_arrangements() {
    let closed = Load::Closed {
        agents: 20,
        think_ms: 0,
        stagger_ms: 5000,
    };
    let poisson = Load::Open {
        arrivals: Arrivals::Poisson {
            mean_num: 60_000,
            mean_den: 240,
        },
        on_refusal: OnRefusal::Retry,
    };
    let cases = [
        config(closed, 1),
        config(poisson, 1),
        SimConfig {
            booking: true,
            ..config(closed, 1)
        },
        SimConfig {
            design: Design::AdmitAnyway,
            ..config(closed, 1)
        },
        SimConfig {
            release_policy: ReleasePolicy::Strict,
            ..config(poisson, 1)
        },
    ];
    for cfg in cases {
        let run = |buckets| {
            sim::run_arrangement(&cfg, buckets, Limits::DEFAULT, &mut |_| {}).expect("runs")
        };
        let (per, fleet) = (run(Buckets::PerMachine), run(Buckets::Fleet));
        assert!(per.turns_started > 0 && per.cancelled + per.refusals > 0);
        assert_eq!(per, fleet, "{cfg:?}");
        let plain = sim::run(&cfg, &mut |_| {}).expect("runs");
        assert!(plain.machines.is_none());
        assert_eq!(plain, per, "{cfg:?}");
    }
}

#[test]
fn one_machine_prints_what_no_flag_prints() {
    for extra in [
        &[][..],
        &["--json"][..],
        &["--per-minute", "--agents", "7"][..],
    ] {
        let mut plain = vec!["simulate", "--duration-ms", "120000"];
        plain.extend_from_slice(extra);
        let mut one = plain.clone();
        one.extend(["--machines", "1"]);
        let (a, b) = (pacer(&plain, ""), pacer(&one, ""));
        assert_eq!((a.code, b.code), (0, 0));
        assert_eq!(a.stdout, b.stdout, "{extra:?}");
        assert!(!b.stdout.contains("fleet") && !b.stdout.contains("machines"));
    }
    // --compare-booking is a one-machine comparison.
    stdout(&[
        "simulate",
        "--machines",
        "1",
        "--compare-booking",
        "--duration-ms",
        "60000",
    ]);
    let run = pacer(&["simulate", "--machines", "2", "--compare-booking"], "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--machines"), "{}", run.stderr);
}

#[test]
fn the_text_report_compares_the_arrangements() {
    let text = stdout(&[
        "simulate",
        "--machines",
        "2",
        "--duration-ms",
        "120000",
        "--per-minute",
    ]);
    let needles = [
        "2 machines, each with its own closed loop: 20 agents",
        "arrangement below: a bucket per machine (2 pacers, each at 60/min)",
        "2 machines, one upstream account",
        "a bucket per machine",
        "one fleet bucket",
        "configured rate of each, per minute",
        "upstream new connections: peak minute",
        "  mean over 2 full minutes",
        "terminal rate-limit errors",
        "turn latency p50",
        "upstream new connections, all 2 machines:",
    ];
    assert_contains_all(&text, &needles);
}

#[test]
fn the_plot_shows_both_arrangements_against_the_rate() {
    let args = ["simulate", "--machines", "3", "--duration-ms", "180000"];
    let svg = plot(&args, "machines");
    let needles = [
        "upstream new connections per minute, all 3 machines",
        "a bucket per machine (3 pacers)",
        "one fleet bucket (1 shared pacer)",
        "configured rate 60/min",
    ];
    assert_contains_all(&svg, &needles);
}

/// Bookings on one shared bucket: 20 agents spread over 4 processes (or
/// machines) keying their own requests. SPEC §11's acceptance for 20 agents
/// with 3 s turns on one bucket is 0 terminal errors with p50 ≈ 20 s; the
/// fleet column is that same one bucket, so it must end no turn in a
/// terminal error either, and still open at most burst + rate + 1 = 71 in
/// any minute (SPEC §6.1, no releases). A bucket per process has four times
/// the capacity for the same agents, so it has no overload at all.
#[test]
fn bookings_on_one_shared_bucket_end_no_turn_in_an_error() {
    let r = pacer_json(&[
        "simulate",
        "--machines",
        "4",
        "--agents",
        "5",
        "--booking",
        "--json",
    ]);
    let (per_machine, fleet) = arrangements(&r);
    assert_eq!(u(fleet, "terminal_rate_limit_errors"), 0);
    assert_eq!(u(per_machine, "terminal_rate_limit_errors"), 0);
    assert!(
        minutes(fleet).iter().all(|&m| m <= 71),
        "{:?}",
        minutes(fleet)
    );
    // p50 near N = 20 seconds per turn (SPEC §11: "p50 turn time ≈ N
    // seconds"); between 15 and 25 s leaves room for turn jitter.
    let p50 = u(fleet, "latency_p50_ms");
    assert!((15_000..=25_000).contains(&p50), "p50 {p50}");
}
