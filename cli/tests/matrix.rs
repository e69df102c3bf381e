//! `pacer matrix`: the reviewer matrix and a slice of `--exhaustive`.
//! Mode counts are derived by hand from SPEC §2-§3.

mod common;

use common::{assert_contains_all, pacer, pacer_json, stdout};

#[test]
fn the_full_matrix_holds() {
    let r = pacer_json(&["matrix", "--json"]);
    assert_eq!(r["cases"], 52_800);
    assert_eq!(r["counterexample_count"], 0, "{}", r["counterexamples"]);
    let modes: Vec<u64> = r["modes"]
        .as_array()
        .expect("modes")
        .iter()
        .map(|m| m.as_u64().expect("count"))
        .collect();
    // [disabled, refusing, shaping-low-rate, shaping-no-retry]. Disabled:
    // only idle 14001 with 3 retries (unset, 5, 10, 99, -1 all resolve to 3)
    // leaves a zero bound: 5 × 600. No-retry: retries "0" with every idle
    // value, all of which then have a positive bound: 11 × 600.
    assert_eq!(modes[0], 5 * 600);
    assert_eq!(modes[3], 11 * 600);
    assert_eq!(modes.iter().sum::<u64>(), 52_800);
    // At defaults (r 5, bound 4833, schedule 20000) rates 1 and 2 shape,
    // 3 and up refuse; so shaping-low-rate is at least 2 per such combo.
    assert!(modes[2] > 0 && modes[1] > modes[2]);
}

#[test]
fn the_text_report_names_the_case_count_and_counterexamples() {
    let text = stdout(&["matrix", "--rate-min", "1", "--rate-max", "10"]);
    let needles = [
        "88 settings combinations",
        "= 880 cases",
        "counterexamples: 0",
    ];
    assert_contains_all(&text, &needles);
}

#[test]
fn a_broken_client_is_caught_and_exits_non_zero() {
    // A client that gives up one retry early: with one retry configured
    // (bound 15000, rate 4) the only retry is the one that reaches the slot.
    let run = pacer(
        &[
            "matrix",
            "--fault",
            "one-fewer-retry",
            "--rate-min",
            "4",
            "--rate-max",
            "4",
        ],
        "",
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("COUNTEREXAMPLE idle unset, retries \"1\", total \"21600000\", rate 4"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("counterexample(s) found"));
}

#[test]
fn an_exhaustive_slice_holds() {
    // idle 10000..=10200: backoff(2) = 6000 < idle <= backoff(3) = 14000,
    // so retries 0, 1, 2: 201 × 3 budgets, each at rates 0..=600.
    let r = pacer_json(&[
        "matrix",
        "--exhaustive",
        "--idle-min",
        "10000",
        "--idle-max",
        "10200",
        "--json",
    ]);
    assert_eq!(r["budgets"], 603);
    assert_eq!(r["cases"], 603 * 601);
    assert_eq!(r["counterexample_count"], 0, "{}", r["counterexamples"]);
    // Rate 0 is disabled for every budget.
    assert!(r["modes"][0].as_u64().expect("count") >= 603);
}

#[test]
fn bad_ranges_are_refused() {
    assert_eq!(pacer(&["matrix", "--rate-max", "601"], "").code, 2);
    assert_eq!(
        pacer(&["matrix", "--rate-min", "9", "--rate-max", "3"], "").code,
        2
    );
    assert_eq!(
        pacer(&["matrix", "--exhaustive", "--idle-min", "9999"], "").code,
        2
    );
    assert_eq!(pacer(&["matrix", "--threads", "zero"], "").code, 2);
}
