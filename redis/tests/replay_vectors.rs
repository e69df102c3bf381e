//! `pacer replay --engine redis-module|redis-script|redis-function` on the
//! hand-derived scenario vectors (`tests/vectors/scenarios.json`): every
//! line the server's answers print is the vector's expectation, as for the
//! core.
//! A scenario with a clock reading at or past 2^52 ms (the core takes any
//! u64; the Redis engines keep every number exact in Lua's doubles) must
//! instead be refused with the error that says so, having printed the
//! lines before it.

mod common;

use pacer_cli::engine::RedisKind;
use pacer_cli::redis_target::Target as RedisTarget;
use pacer_cli::replay::{run_on, Target};
use serde_json::Value;

fn scenarios() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/scenarios.json"
    );
    let text = std::fs::read_to_string(path).expect("scenarios.json");
    let doc: Value = serde_json::from_str(&text).expect("json");
    doc["scenarios"].as_array().expect("scenarios").clone()
}

/// The trace of a scenario and the lines replay must print for it.
fn trace_and_expected(scenario: &Value) -> (String, Vec<Value>) {
    let mut trace =
        serde_json::json!({"config": scenario["config"], "t": scenario["t"]}).to_string();
    let mut expected = vec![scenario["expect_pacer"].clone()];
    for step in scenario["steps"].as_array().expect("steps") {
        trace.push('\n');
        trace.push_str(&step.to_string());
        expected.push(step["expect"].clone());
    }
    (trace, expected)
}

fn replay(target: &Target, trace: &str) -> (Vec<Value>, Result<(), String>) {
    let mut out = Vec::new();
    let result = run_on(target, trace.as_bytes(), &mut out);
    let lines = String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("json line"))
        .collect();
    (lines, result)
}

/// The index (in replay's output lines) of the first step whose clock is
/// at or past 2^52, if any.
fn first_unrepresentable(scenario: &Value) -> Option<usize> {
    let limit = 1u64 << 52;
    if scenario["t"].as_u64().unwrap_or(0) >= limit {
        return Some(0);
    }
    scenario["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .position(|step| step["t"].as_u64().unwrap_or(0) >= limit)
        .map(|i| i + 1)
}

#[test]
fn every_scenario_vector_replays_as_expected_on_every_redis_engine() {
    let server = common::Server::with_module();
    let scenarios = scenarios();
    assert!(scenarios.len() >= 14);
    let (mut lines, mut beyond) = (0, 0);
    for kind in [RedisKind::Module, RedisKind::Script, RedisKind::Function] {
        let target = Target::Redis {
            url: RedisTarget::Server(server.url()),
            kind,
        };
        for scenario in &scenarios {
            let name = &scenario["name"];
            let (trace, expected) = trace_and_expected(scenario);
            let (got, result) = replay(&target, &trace);
            match first_unrepresentable(scenario) {
                None => {
                    result.unwrap_or_else(|e| panic!("{kind:?}: scenario {name}: {e}"));
                    assert_eq!(got, expected, "{kind:?}: scenario {name}");
                }
                Some(stop) => {
                    let error = result.expect_err("a clock past 2^52 must be refused");
                    assert!(error.contains("below 2^52"), "{kind:?} {name}: {error}");
                    assert_eq!(got, expected[..stop], "{kind:?}: scenario {name}");
                    beyond += 1;
                }
            }
            lines += got.len();
        }
    }
    assert!(beyond < 2 * scenarios.len());
    println!(
        "replay: {} scenarios × 2 engines, {lines} lines as the vectors expect; \
         {beyond} runs refused at a clock past 2^52 as documented",
        scenarios.len()
    );
}

/// A booking admits once, on every engine alike. Rate 60, burst 1, idle
/// 30000, 3 retries (bound 2000, hint cap 2 s): at 0 three admissions
/// (waits 0, 1000, 2000), then booking 4 (wait 3000 within the horizon
/// 2000 + 3·2·1000, slot 3000, hint 1). Redeemed at 1000 (slot 2000 ms
/// away): admitted after 2000, its ticket numbered 4 like the booking.
/// Released: refunded; again: nothing to refund. Redeemed again: an error
/// on line 9, the same on the core and on every Redis engine.
#[test]
fn a_booking_redeemed_twice_fails_the_same_way_on_every_engine() {
    let server = common::Server::with_module();
    let trace = "{\"config\":{\"burst\":1,\"idle_timeout_ms\":30000,\"max_retries\":3},\"t\":0}\n\
                 {\"op\":\"reserve\",\"t\":0}\n{\"op\":\"reserve\",\"t\":0}\n{\"op\":\"reserve\",\"t\":0}\n\
                 {\"op\":\"book\",\"retries_left\":3,\"t\":0}\n\
                 {\"op\":\"redeem\",\"booking\":4,\"t\":1000}\n\
                 {\"op\":\"release\",\"ticket\":4,\"t\":1000}\n\
                 {\"op\":\"release\",\"ticket\":4,\"t\":1000}\n\
                 {\"op\":\"redeem\",\"booking\":4,\"t\":1000}\n";
    let expected: Vec<Value> = [
        r#"{"bound_ms":2000,"enabled":true,"can_refuse":true}"#,
        r#"{"kind":"admitted","wait_ms":0,"ticket":1}"#,
        r#"{"kind":"admitted","wait_ms":1000,"ticket":2}"#,
        r#"{"kind":"admitted","wait_ms":2000,"ticket":3}"#,
        r#"{"kind":"booked","retry_after_s":1,"booking":4,"slot_ms":3000}"#,
        r#"{"kind":"admitted","wait_ms":2000,"ticket":4}"#,
        r#"{"kind":"released","refunded":true}"#,
        r#"{"kind":"released","refunded":false}"#,
    ]
    .iter()
    .map(|line| serde_json::from_str(line).unwrap())
    .collect();
    let error = "line 9: booking 4 was already redeemed or released";
    let mut targets = vec![Target::Core];
    for kind in [RedisKind::Module, RedisKind::Script, RedisKind::Function] {
        targets.push(Target::Redis {
            url: RedisTarget::Server(server.url()),
            kind,
        });
    }
    for target in &targets {
        let (got, result) = replay(target, trace);
        assert_eq!(got, expected, "{target:?}");
        assert_eq!(result, Err(error.to_string()), "{target:?}");
    }
}
