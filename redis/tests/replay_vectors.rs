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
            url: server.url(),
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
