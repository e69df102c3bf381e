//! `pacer explain`: expected numbers from SPEC §3's worked budgets and the
//! notice texts quoted in the design record.

mod common;

use common::{pacer, pacer_env};

fn explain(args: &[&str]) -> String {
    let mut full = vec!["explain"];
    full.extend(args);
    let run = pacer(&full, "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

fn has(text: &str, needle: &str) {
    assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
}

#[test]
fn defaults() {
    let out = explain(&[]);
    has(&out, "resolved budget: rate 60/min, idle timeout 120000 ms, total timeout 600000 ms, max retries 5");
    has(&out, "wait bound: 4833 ms");
    has(&out, "hint cap: 4 s");
    has(&out, "refusal schedule: 20000 ms");
    has(&out, "can refuse: yes");
    has(&out, "first refusal at simultaneous request #15");
    has(&out, "6*4833 + 62000 = 90998 < 120000: holds");
    // 6·4833 + (4000 + 4000 + 8000 + 16000 + 32000) = 92998.
    has(
        &out,
        "6*4833 + (4000 + 4000 + 8000 + 16000 + 32000) = 92998 < 120000: holds",
    );
    has(&out, "notices: none");
}

#[test]
fn short_deadlines() {
    let out = explain(&["PACER_IDLE_TIMEOUT_MS=10000"]);
    has(&out, "max retries 2");
    has(&out, "3*666 + 6000 = 7998 < 10000: holds");
    has(&out, "hint cap: 1 s");
    let out = explain(&[
        "PACER_IDLE_TIMEOUT_MS=600000",
        "PACER_TOTAL_TIMEOUT_MS=60000",
    ]);
    has(
        &out,
        "idle timeout 60000 ms, total timeout 60000 ms, max retries 4",
    );
    has(&out, "wait bound: 3000 ms");
    has(
        &out,
        "idle timeout 600000ms is longer than the 60000ms total timeout; lowering it to 60000ms",
    );
}

#[test]
fn pacing_that_switches_itself_off_says_so() {
    let out = explain(&["PACER_IDLE_TIMEOUT_MS=14001"]);
    has(&out, "wait bound: 0 ms");
    has(&out, "pacing: disabled");
    // The record's own terminal output, minus its "clodex:" prefix and "OpenAI".
    has(&out, "not pacing new connections: a 3-retry budget leaves no room to queue inside the resolved 14001ms request deadline");
}

#[test]
fn low_rates_shape_instead_of_refusing() {
    let out = explain(&["PACER_RATE_PER_MIN=1"]);
    has(&out, "can refuse: no");
    has(&out, "mode shaping-low-rate");
    has(&out, "a 5-retry schedule spans only 20000ms, which cannot outlast the 60000ms wait for a free connection slot");
    let out = explain(&["PACER_RATE_PER_MIN=3"]);
    has(&out, "schedule*rate = 20000 * 3 = 60000 >= 60000");
}

#[test]
fn malformed_and_clamped_values_give_notices() {
    let out = explain(&["PACER_RATE_PER_MIN=1e2", "PACER_MAX_RETRIES=99"]);
    has(&out, "ignoring new-connection rate \"1e2\"");
    has(
        &out,
        "max retries \"99\" is more than a 120000ms idle timeout can hold; using 5",
    );
}

#[test]
fn the_environment_is_read_and_arguments_win() {
    let run = pacer_env(&["explain"], "", &[("PACER_RATE_PER_MIN", "0")]);
    assert_eq!(run.code, 0);
    has(&run.stdout, "\"0\" (environment)");
    has(&run.stdout, "pacing: disabled");
    let run = pacer_env(
        &["explain", "PACER_RATE_PER_MIN=30"],
        "",
        &[("PACER_RATE_PER_MIN", "0")],
    );
    has(&run.stdout, "\"30\" (argument)");
    has(&run.stdout, "rate 30/min");
    let run = pacer_env(&["explain", "--no-env"], "", &[("PACER_RATE_PER_MIN", "0")]);
    has(&run.stdout, "rate 60/min");
}

#[test]
fn unknown_names_and_shapes_fail() {
    for (args, message) in [
        (
            vec!["explain", "PACER_RATE=5"],
            "unknown setting \"PACER_RATE\"",
        ),
        (vec!["explain", "60"], "expected NAME=value"),
        (vec!["explain", "--burst", "x"], "invalid value 'x'"),
    ] {
        let run = pacer(&args, "");
        assert_eq!(run.code, 2, "{args:?}");
        assert!(run.stderr.contains(message), "{args:?}: {}", run.stderr);
    }
}
