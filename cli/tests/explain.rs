//! `pacer explain`: expected numbers from SPEC §3's worked budgets and the
//! notice texts quoted in the design record.

mod common;

use common::{assert_contains_all, pacer, pacer_env, stdout};

/// Runs `pacer explain ARGS` and checks that it says every one of `needles`.
fn explains(args: &[&str], needles: &[&str]) {
    assert_contains_all(&stdout(&[&["explain"], args].concat()), needles);
}

#[test]
fn defaults() {
    explains(
        &[],
        &[
            "resolved budget: rate 60/min, idle timeout 120000 ms, total timeout 600000 ms, max retries 5",
            "wait bound: 4833 ms",
            "hint cap: 4 s",
            "refusal schedule: 20000 ms",
            "can refuse: yes",
            "first refusal at simultaneous request #15",
            "6*4833 + 62000 = 90998 < 120000: holds",
            // 6·4833 + (4000 + 4000 + 8000 + 16000 + 32000) = 92998.
            "6*4833 + (4000 + 4000 + 8000 + 16000 + 32000) = 92998 < 120000: holds",
            "notices: none",
        ],
    );
}

#[test]
fn short_deadlines() {
    explains(
        &["PACER_IDLE_TIMEOUT_MS=10000"],
        &[
            "max retries 2",
            "3*666 + 6000 = 7998 < 10000: holds",
            "hint cap: 1 s",
        ],
    );
    explains(
        &[
            "PACER_IDLE_TIMEOUT_MS=600000",
            "PACER_TOTAL_TIMEOUT_MS=60000",
        ],
        &[
            "idle timeout 60000 ms, total timeout 60000 ms, max retries 4",
            "wait bound: 3000 ms",
            "idle timeout 600000ms is longer than the 60000ms total timeout; lowering it to 60000ms",
        ],
    );
}

#[test]
fn pacing_that_switches_itself_off_says_so() {
    explains(
        &["PACER_IDLE_TIMEOUT_MS=14001"],
        &[
            "wait bound: 0 ms",
            "pacing: disabled",
            // The record's own terminal output, minus its "clodex:" prefix and "OpenAI".
            "not pacing new connections: a 3-retry budget leaves no room to queue inside the resolved 14001ms request deadline",
        ],
    );
}

#[test]
fn low_rates_shape_instead_of_refusing() {
    explains(
        &["PACER_RATE_PER_MIN=1"],
        &[
            "can refuse: no",
            "mode shaping-low-rate",
            "a 5-retry schedule spans only 20000ms, which cannot outlast the 60000ms wait for a free connection slot",
        ],
    );
    explains(
        &["PACER_RATE_PER_MIN=3"],
        &["schedule*rate = 20000 * 3 = 60000 >= 60000"],
    );
}

#[test]
fn malformed_and_clamped_values_give_notices() {
    explains(
        &["PACER_RATE_PER_MIN=1e2", "PACER_MAX_RETRIES=99"],
        &[
            "ignoring new-connection rate \"1e2\"",
            "max retries \"99\" is more than a 120000ms idle timeout can hold; using 5",
        ],
    );
}

#[test]
fn the_environment_is_read_and_arguments_win() {
    let env = [("PACER_RATE_PER_MIN", "0")];
    let run = pacer_env(&["explain"], "", &env);
    assert_eq!(run.code, 0);
    assert_contains_all(&run.stdout, &["\"0\" (environment)", "pacing: disabled"]);
    let run = pacer_env(&["explain", "PACER_RATE_PER_MIN=30"], "", &env);
    assert_contains_all(&run.stdout, &["\"30\" (argument)", "rate 30/min"]);
    let run = pacer_env(&["explain", "--no-env"], "", &env);
    assert_contains_all(&run.stdout, &["rate 60/min"]);
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
