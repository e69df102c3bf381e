//! `pacer simulate`: expectations derived by hand from SPEC §4, §6 and §8.

mod common;

use common::{assert_contains_all, pacer, pacer_json, plot, stdout, u, us};
use pacer_cli::sim::{self, SimConfig};
use serde_json::Value;

/// `pacer simulate --json` with identical turns (no jitter), `agents`
/// agents, turns of `turn_ms`, and `extra`.
fn identical_turns(agents: &str, turn_ms: &str, extra: &[&str]) -> Value {
    let args = ["simulate", "--json", "--turn-jitter-ms", "0"];
    let load = ["--agents", agents, "--turn-ms", turn_ms];
    pacer_json(&[&args[..], &load, extra].concat())
}

/// [`identical_turns`] with each agent starting one 100 s turn at t = 0 (a
/// 1 ms run starts no second one), burst 1, an idle timeout of `idle_ms`.
fn one_turn_each(agents: &str, idle_ms: &str, extra: &[&str]) -> Value {
    let args = [
        "--burst",
        "1",
        "--idle-timeout-ms",
        idle_ms,
        "--duration-ms",
        "1",
    ];
    identical_turns(agents, "100000", &[&args[..], extra].concat())
}

/// [`identical_turns`] unpaced (rate 0).
fn unpaced(agents: &str, turn_ms: &str, extra: &[&str]) -> Value {
    identical_turns(agents, turn_ms, &[&["--rate", "0"], extra].concat())
}

#[test]
fn the_main_job_command_prints_a_report() {
    let text = stdout(&["simulate"]);
    let needles = [
        "20 agents",
        "turns started",
        "completed",
        "terminal rate-limit errors",
        "deadline overruns",
        "turn latency                 p50",
        "refused",
        "waited",
        "admitted per minute max",
        "final minute",
    ];
    assert_contains_all(&text, &needles);
}

/// The tests that build a run from [`SimConfig::DEFAULT`] read it as the
/// command with no flag: the same report, key for key (the advice aside).
#[test]
fn the_default_config_is_the_command_with_no_flag() {
    let report = sim::run(&SimConfig::DEFAULT, &mut |_| {}).expect("runs");
    let mut command = pacer_json(&["simulate", "--json"]);
    let advice = command.as_object_mut().expect("an object").remove("advice");
    assert!(advice.is_some(), "the default run has advice");
    // Read back from text, as the command's output is (the same parse of
    // the same digits).
    let text = serde_json::to_string(&report).expect("JSON");
    let report: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(report, command);
}

#[test]
fn unpaced_agents_run_back_to_back_turns() {
    // Rate 0: 4 agents × (10000 ms / 1000 ms turns) = 40 turns of exactly 1 s.
    let r = unpaced("4", "1000", &["--duration-ms", "10000"]);
    assert_eq!(r["settings"]["mode"], "disabled");
    assert_eq!(us(&r, ["turns_started", "turns_completed"]), [40, 40]);
    assert_eq!(us(&r, ["latency_p50_ms", "latency_max_ms"]), [1000, 1000]);
    assert_eq!(us(&r, ["refusals", "waits"]), [0, 0]);
}

#[test]
fn a_refused_request_retries_on_its_hint() {
    // rate 60, burst 1, idle 30000 → 3 retries, bound 2000, hint cap 2 s.
    // 4 agents at t=0 with long turns: #0 now, #1 waits 1000, #2 2000, #3
    // refused (needs 3000) with hint 2 s; it retries at 2000, when the
    // bucket is back to 0 tokens, and waits 1000 → opens at 3000.
    let r = one_turn_each("4", "30000", &[]);
    assert_eq!(r["settings"]["bound_ms"], 2000);
    assert_eq!(us(&r, ["turns_started", "turns_completed"]), [4, 4]);
    let refused = ["attempts", "refusals", "turns_refused_at_least_once"];
    assert_eq!(us(&r, refused), [5, 1, 1]);
    assert_eq!(us(&r, ["waits", "wait_max_ms"]), [3, 2000]);
    // Latencies 100000, 101000, 102000, 103000: nearest-rank p50 and p90.
    let latency = ["latency_p50_ms", "latency_p90_ms", "latency_max_ms"];
    assert_eq!(us(&r, latency), [101_000, 103_000, 103_000]);
    assert_eq!(u(&r, "terminal_rate_limit_errors"), 0);
}

#[test]
fn a_refusal_on_the_last_attempt_is_terminal() {
    // idle 10000 → 2 retries, bound 666, hint 1 s; burst 1, rate 60.
    // t=0: A0 admitted; A1, A2, A3 refused (needs 1000 > 666).
    // t=1000: A1 admitted; A2, A3 refused again (2nd attempt).
    // t=2000: A2 admitted; A3 refused on its 3rd and last attempt.
    let r = one_turn_each("4", "10000", &[]);
    assert_eq!(r["settings"]["bound_ms"], 666);
    assert_eq!(u(&r, "terminal_rate_limit_errors"), 1);
    assert_eq!(u(&r, "turns_completed"), 3);
    assert_eq!(us(&r, ["attempts", "refusals"]), [9, 6]);
    assert_eq!(r["terminal_error_percent"].as_f64(), Some(25.0));
}

#[test]
fn a_missed_first_byte_is_a_deadline_overrun() {
    // First stream part 200 s after opening, deadline 120 s: overrun.
    let r = unpaced(
        "1",
        "300000",
        &["--first-byte-ms", "200000", "--duration-ms", "1"],
    );
    assert_eq!(us(&r, ["deadline_overruns", "turns_completed"]), [1, 0]);
}

#[test]
fn cancelled_waits_release_their_tickets() {
    // burst 1, bound 2000: #1 waits 1000, #2 waits 2000; both cancelled
    // during the wait and refunded under the default policy.
    let r = one_turn_each("3", "30000", &["--cancel-percent", "100"]);
    let released = ["cancelled", "releases", "releases_refunded"];
    assert_eq!(us(&r, released), [2, 2, 2]);
    assert_eq!(u(&r, "turns_completed"), 1);
}

#[test]
fn low_rates_never_end_in_terminal_refusals() {
    // SPEC §8: 20 concurrent agents at 1/min and 2/min → 0 terminal refusals.
    for rate in ["1", "2"] {
        let r = pacer_json(&["simulate", "--rate", rate, "--json"]);
        assert_eq!(r["settings"]["mode"], "shaping-low-rate");
        assert_eq!(u(&r, "terminal_rate_limit_errors"), 0, "rate {rate}");
        assert_eq!(u(&r, "deadline_overruns"), 0, "rate {rate}");
    }
}

#[test]
fn sustained_overload_final_minute_spec_6_6() {
    // Offers every 732 ms for four minutes, burst 10, bound 15000 (idle
    // 120000 with 2 retries), rate 60: at most 61 in the final minute; the
    // admit-anyway design reads 82.
    let args = [
        "simulate",
        "--offered-every-ms",
        "732",
        "--duration-ms",
        "240000",
        "--max-retries",
        "2",
        "--on-refusal",
        "drop",
        "--json",
    ];
    let paced = pacer_json(&args);
    assert_eq!(paced["settings"]["bound_ms"], 15000);
    assert!(
        u(&paced, "admitted_final_minute") <= 61,
        "{}",
        paced["admitted_final_minute"]
    );
    let mut anyway: Vec<&str> = args.to_vec();
    anyway.extend(["--design", "admit-anyway"]);
    let anyway = pacer_json(&anyway);
    assert_eq!(u(&anyway, "admitted_final_minute"), 82);
    assert_eq!(u(&anyway, "refusals"), 0);
}

#[test]
fn admissions_per_minute_respect_the_window_bound() {
    // SPEC §6.1: connections opened in any 60 s window ≤ burst + rate + 1
    // (no releases here). Aligned minutes are such windows.
    for args in [
        vec!["--agents", "40", "--turn-jitter-ms", "1500", "--seed", "9"],
        vec![
            "--offered-per-min",
            "240",
            "--arrivals",
            "poisson",
            "--seed",
            "3",
        ],
        vec![
            "--agents",
            "30",
            "--rate",
            "30",
            "--burst",
            "5",
            "--idle-timeout-ms",
            "30000",
        ],
    ] {
        let mut full = vec!["simulate", "--json"];
        full.extend(&args);
        let r = pacer_json(&full);
        let limit = u(&r["settings"], "burst") + u(&r["settings"], "rate_per_min") + 1;
        for row in r["per_minute"].as_array().expect("rows") {
            assert!(
                u(row, "admitted") <= limit,
                "{args:?}: minute {row} above {limit}"
            );
        }
    }
}

#[test]
fn admit_anyway_passes_offered_load_straight_through() {
    // The record's table: offered 120/min → admitted 120/min once the floor
    // is spent. Whole minutes 1..3 of a 4-minute run.
    let r = pacer_json(&[
        "simulate",
        "--offered-per-min",
        "120",
        "--design",
        "admit-anyway",
        "--duration-ms",
        "240000",
        "--json",
    ]);
    let rows = r["per_minute"].as_array().expect("rows");
    for row in &rows[1..4] {
        assert_eq!(u(row, "admitted"), 120, "{row}");
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let args = [
        "simulate",
        "--turn-jitter-ms",
        "1000",
        "--stagger-ms",
        "5000",
        "--cancel-percent",
        "10",
        "--json",
    ];
    let first = pacer(&args, "");
    let second = pacer(&args, "");
    assert_eq!(first.code, 0);
    assert_eq!(first.stdout, second.stdout);
    let mut other = args.to_vec();
    other.extend(["--seed", "2"]);
    assert_ne!(pacer(&other, "").stdout, first.stdout);
}

#[test]
fn writes_an_svg_chart() {
    let svg = plot(&["simulate", "--duration-ms", "180000"], "plot");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.contains("admitted (opened)") && svg.contains("p50"));
}

#[test]
fn settings_notices_are_reported() {
    let text = stdout(&["simulate", "--rate", "700", "--duration-ms", "60000"]);
    assert_contains_all(
        &text,
        &["notice: new-connection rate \"700\" is above the maximum; using 600/minute"],
    );
}

#[test]
fn bad_arguments_fail_cleanly() {
    let cases: [(&[&str], &str); 7] = [
        (&["simulate", "--frobnicate"], "unexpected argument"),
        (&["simulate", "--agents", "many"], "invalid value 'many'"),
        (&["simulate", "--rate", "-5"], "invalid value '-5'"),
        (&["simulate", "--turn-ms", "1e3"], "invalid value '1e3'"),
        (
            &["simulate", "--agents", "0"],
            "--agents must be at least 1",
        ),
        (
            &["simulate", "--agents", "5", "--offered-per-min", "10"],
            "cannot be used with",
        ),
        (
            &["simulate", "--cancel-percent", "101"],
            "invalid value '101'",
        ),
    ];
    for (args, message) in cases {
        let run = pacer(args, "");
        assert_eq!(run.code, 2, "{args:?}");
        assert!(run.stderr.contains(message), "{args:?}: {}", run.stderr);
    }
    assert_eq!(pacer(&["frobnicate"], "").code, 2);
}

/// Terminal errors come with advice, and each advised change holds when
/// run on its own: the same command with that flag ends no turn in a
/// terminal error. (The claim is checked by a second, separate run.)
#[test]
fn terminal_errors_come_with_changes_that_end_them() {
    let base = ["simulate", "--json"];
    let report = pacer_json(&base);
    assert!(u(&report, "terminal_rate_limit_errors") > 0, "{report}");
    let remedies = report["advice"]["remedies"]
        .as_array()
        .unwrap_or_else(|| panic!("no advice in {report}"));
    let changes: Vec<&str> = remedies
        .iter()
        .map(|r| r["change"].as_str().expect("change is text"))
        .collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert_eq!(changes[0], "--booking");
    assert!(changes[1].starts_with("--agents "), "{changes:?}");
    assert!(changes[2].starts_with("--rate "), "{changes:?}");
    // Fewer agents than the run's 20, a rate above its 60.
    let agents: u32 = changes[1]["--agents ".len()..].parse().expect("a count");
    let rate: u32 = changes[2]["--rate ".len()..].parse().expect("a rate");
    assert!(
        (1..20).contains(&agents) && (61..=600).contains(&rate),
        "{changes:?}"
    );
    for (change, remedy) in changes.iter().zip(remedies) {
        let mut args = base.to_vec();
        args.extend(change.split(' '));
        let again = pacer_json(&args);
        assert_eq!(
            u(&again, "terminal_rate_limit_errors"),
            0,
            "{change}: {again}"
        );
        assert_eq!(
            u(&again, "turns_completed"),
            u(remedy, "turns_completed"),
            "{change}: the advice reports the run it made"
        );
        assert!(again.get("advice").is_none(), "{change}: {again}");
    }
    // The text report says the same in words.
    let text = pacer(&["simulate"], "");
    assert!(text.stdout.contains("advice: "), "{}", text.stdout);
    for change in changes {
        assert!(
            text.stdout.contains(&format!("  {change} ")),
            "{change}: {}",
            text.stdout
        );
    }
}

/// Pacing off (rate 0) refuses nothing, so there is nothing to advise.
#[test]
fn no_terminal_errors_no_advice() {
    let report = pacer_json(&["simulate", "--rate", "0", "--json"]);
    assert_eq!(u(&report, "terminal_rate_limit_errors"), 0, "{report}");
    assert!(report.get("advice").is_none(), "{report}");
    let text = pacer(&["simulate", "--rate", "0"], "");
    assert!(!text.stdout.contains("advice"), "{}", text.stdout);
}

/// `--sweep-agents`: one row per count. One agent never waits (a turn of
/// 2000–4000 ms asks for at most 30 connections a minute against a rate of
/// 60 and a burst of 10), so its turns take their own length and none ends
/// in an error; the answer is the last count before the first row with
/// terminal errors.
#[test]
fn the_agent_sweep_tables_each_count_and_says_how_many_fit() {
    let sweep = pacer_json(&["simulate", "--sweep-agents", "1..24", "--json"]);
    let rows = sweep["rows"].as_array().expect("rows");
    let counts: Vec<u64> = rows.iter().map(|r| u(r, "agents")).collect();
    assert_eq!(counts, (1..=24).collect::<Vec<u64>>());
    let one = &rows[0];
    assert_eq!(u(one, "terminal_rate_limit_errors"), 0, "{one}");
    assert!((2000..=4000).contains(&u(one, "latency_p50_ms")), "{one}");
    assert!(u(one, "latency_p90_ms") <= 4000, "{one}");
    // The default run (20 agents) has terminal errors, so the sweep must
    // find a limit below 20.
    assert!(
        u(&rows[19], "terminal_rate_limit_errors") > 0,
        "{}",
        rows[19]
    );
    let first_bad = rows
        .iter()
        .position(|r| u(r, "terminal_rate_limit_errors") > 0)
        .expect("a count with errors");
    assert_eq!(u(&sweep, "fit"), first_bad as u64, "{sweep}");
    // Each row is the run `--agents N` makes on its own.
    let twenty = pacer_json(&["simulate", "--json"]);
    assert_eq!(
        u(&rows[19], "turns_completed"),
        u(&twenty, "turns_completed")
    );
    let text = stdout(&["simulate", "--sweep-agents", "1..24"]);
    let fit = format!("fit: up to {first_bad} agents end no turn");
    assert_contains_all(&text, &[&fit]);
    for bad in [
        &["simulate", "--sweep-agents", "5..2"][..],
        &["simulate", "--sweep-agents", "0..4"],
        &["simulate", "--sweep-agents", "1..2000"],
        &["simulate", "--sweep-agents", "1..4", "--agents", "3"],
        &[
            "simulate",
            "--sweep-agents",
            "1..4",
            "--offered-per-min",
            "60",
        ],
    ] {
        let run = pacer(bad, "");
        assert_eq!(run.code, 2, "{bad:?}: {}", run.stderr);
        assert!(run.stderr.starts_with("pacer: "), "{bad:?}: {}", run.stderr);
    }
}

/// The JSON report keeps its keys in the report's order with the advice
/// last: scripts (scripts/figures.sh) read a key's first occurrence, and
/// the advice repeats some of the report's keys.
#[test]
fn the_json_report_puts_the_advice_last() {
    let run = pacer(&["simulate", "--json"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("{\"settings\":"),
        "{}",
        &run.stdout[..80]
    );
    let advice = run.stdout.find("\"advice\":").expect("advice");
    for key in [
        "\"terminal_rate_limit_errors\":",
        "\"turns_completed\":",
        "\"per_minute\":",
    ] {
        let first = run.stdout.find(key).expect(key);
        assert!(first < advice, "{key} first appears inside the advice");
    }
}
