//! `pacer replay` against the shared vectors (`tests/vectors/*.json`) and
//! against scenarios written by hand from SPEC §5 and §7.

mod common;

use std::path::PathBuf;

use common::pacer;
use serde_json::{json, Value};

/// Builds the replay input of a scenario and checks every output line.
fn check_scenario(scenario: &Value, origin: &str) {
    let name = scenario["name"].as_str().unwrap_or("?");
    let mut input = json!({"config": scenario["config"], "t": scenario["t"]}).to_string();
    input.push('\n');
    let steps = scenario["steps"].as_array().expect("steps");
    for step in steps {
        // Only the replay fields: the format, not the vector's `expect`.
        let mut line = serde_json::Map::new();
        for key in ["op", "ticket", "t"] {
            if let Some(value) = step.get(key) {
                line.insert(key.to_string(), value.clone());
            }
        }
        input.push_str(&Value::Object(line).to_string());
        input.push('\n');
    }
    let run = pacer(&["replay"], &input);
    assert_eq!(
        run.code, 0,
        "{origin} {name}: replay failed: {}",
        run.stderr
    );
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        steps.len() + 1,
        "{origin} {name}: one line per operation plus the config"
    );
    let first: Value = serde_json::from_str(lines[0]).expect("JSON line");
    assert_eq!(
        first, scenario["expect_pacer"],
        "{origin} {name}: config line"
    );
    for (index, (step, line)) in steps.iter().zip(&lines[1..]).enumerate() {
        let got: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(
            got, step["expect"],
            "{origin} {name}: step {index} ({step})"
        );
    }
}

fn vector_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_scenario_in_the_shared_vectors_replays_exactly() {
    let mut scenarios = 0;
    for file in vector_files() {
        let text = std::fs::read_to_string(&file).expect("readable vector file");
        let doc: Value = serde_json::from_str(&text).expect("vector files are JSON");
        // Other vector files (budgets, derived quantities) have no scenarios.
        let Some(list) = doc.get("scenarios").and_then(Value::as_array) else {
            continue;
        };
        for scenario in list {
            check_scenario(scenario, &file.display().to_string());
            scenarios += 1;
        }
    }
    // The hand-written scenarios below stand in while no vector file exists.
    eprintln!("replayed {scenarios} vector scenarios");
}

/// SPEC §7, written out by hand.
fn hand_scenarios() -> Value {
    let reserve = |t: u64, expect: Value| json!({"op": "reserve", "t": t, "expect": expect});
    let admitted =
        |wait: u64, ticket: Value| json!({"kind": "admitted", "wait_ms": wait, "ticket": ticket});
    let refused = |required: u64, hint: u64| json!({"kind": "refused", "required_wait_ms": required, "retry_after_s": hint});
    let config = |rate: u64, burst: u64, idle: u64, retries: u64, policy: &str| json!({"rate_per_min": rate, "burst": burst, "idle_timeout_ms": idle, "max_retries": retries, "release_policy": policy});
    // Defaults, 30 simultaneous: #0-9 now, #10-13 wait 1000-4000, #14 on refused (5000, hint 4).
    let mut defaults = Vec::new();
    for i in 0..30u64 {
        let expect = match i {
            0..=9 => admitted(0, json!(i + 1)),
            10..=13 => admitted((i - 9) * 1000, json!(i + 1)),
            _ => refused(5000, 4),
        };
        defaults.push(reserve(0, expect));
    }
    // Retries 0 (bound 15000, floor 15): 10 now, 15 waiting 1000..15000, then free.
    let mut retries0 = Vec::new();
    for i in 0..40u64 {
        let expect = match i {
            0..=9 => admitted(0, json!(i + 1)),
            10..=24 => admitted((i - 9) * 1000, json!(i + 1)),
            _ => admitted(0, Value::Null),
        };
        retries0.push(reserve(0, expect));
    }
    // Rate 1/min at the default budget: 10 now, one shaped (4833), 9 free.
    let mut rate1 = Vec::new();
    for i in 0..20u64 {
        let expect = match i {
            0..=9 => admitted(0, json!(i + 1)),
            10 => admitted(4833, json!(11)),
            _ => admitted(0, Value::Null),
        };
        rate1.push(reserve(0, expect));
    }
    json!([
        {"name": "defaults 30 simultaneous", "config": config(60, 10, 120000, 5, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 4833, "enabled": true, "can_refuse": true}, "steps": defaults},
        {"name": "retries 0, 40 simultaneous", "config": config(60, 10, 120000, 0, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 15000, "enabled": true, "can_refuse": false}, "steps": retries0},
        {"name": "rate 1, 20 simultaneous", "config": config(1, 10, 120000, 5, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 4833, "enabled": true, "can_refuse": false}, "steps": rate1},
        {"name": "burst 1, bound 2000", "config": config(60, 1, 30000, 3, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 2000, "enabled": true, "can_refuse": true}, "steps": [
            reserve(0, admitted(0, json!(1))), reserve(0, admitted(1000, json!(2))),
            reserve(0, admitted(2000, json!(3))), reserve(0, refused(3000, 2)), reserve(0, refused(3000, 2))]},
        {"name": "a release gives the slot back", "config": config(60, 1, 3600000, 5, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 15000, "enabled": true, "can_refuse": true}, "steps": [
            reserve(0, admitted(0, json!(1))), reserve(0, admitted(1000, json!(2))),
            {"op": "release", "ticket": 2, "t": 0, "expect": {"kind": "released", "refunded": true}},
            reserve(0, admitted(1000, json!(3))),
            {"op": "release", "ticket": 2, "t": 0, "expect": {"kind": "released", "refunded": false}},
            {"op": "release", "ticket": 77, "t": 0, "expect": {"kind": "released", "refunded": false}}]},
        {"name": "idle 14001 disables", "config": config(60, 10, 14001, 3, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 0, "enabled": false, "can_refuse": false},
         "steps": (0..50).map(|_| reserve(0, admitted(0, Value::Null))).collect::<Vec<_>>()},
        {"name": "rate 0", "config": config(0, 10, 120000, 5, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 4833, "enabled": false, "can_refuse": false},
         "steps": (0..20).map(|_| reserve(0, admitted(0, Value::Null))).collect::<Vec<_>>()},
        // SPEC §5: a reading behind the latest one refills and drains nothing.
        // burst 1, bound 2000: at 5000 full; 1000 acts as 5000 (wait 1000);
        // 5000 again: wait 2000; 0: wait 3000 > bound, refused (hint 2);
        // 6000: one token refilled, tokens -1, wait 2000.
        {"name": "time going backwards", "config": config(60, 1, 30000, 3, "refund"), "t": 0,
         "expect_pacer": {"bound_ms": 2000, "enabled": true, "can_refuse": true}, "steps": [
            reserve(5000, admitted(0, json!(1))), reserve(1000, admitted(1000, json!(2))),
            reserve(5000, admitted(2000, json!(3))), reserve(0, refused(3000, 2)),
            reserve(6000, admitted(2000, json!(4)))]},
    ])
}

#[test]
fn hand_written_spec_scenarios_replay_exactly() {
    for scenario in hand_scenarios().as_array().expect("list") {
        check_scenario(scenario, "SPEC §7 by hand");
    }
}

#[test]
fn reads_a_file_argument_and_stdin_alike() {
    let trace = "{\"config\":{\"burst\":1},\"t\":100}\n{\"op\":\"reserve\",\"t\":100}\n\n{\"op\":\"reserve\",\"t\":100}\n";
    let path = std::env::temp_dir().join(format!("pacer-replay-{}.jsonl", std::process::id()));
    std::fs::write(&path, trace).expect("temp file");
    let from_file = pacer(&["replay", path.to_str().expect("utf-8 path")], "");
    let from_stdin = pacer(&["replay", "-"], trace);
    let _ = std::fs::remove_file(&path);
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    // Missing config fields take the defaults: rate 60, idle 120000, 5 retries.
    let expected = "{\"bound_ms\":4833,\"enabled\":true,\"can_refuse\":true}\n\
                    {\"kind\":\"admitted\",\"wait_ms\":0,\"ticket\":1}\n\
                    {\"kind\":\"admitted\",\"wait_ms\":1000,\"ticket\":2}\n";
    assert_eq!(from_file.stdout, expected);
    assert_eq!(from_stdin.stdout, expected);
}

#[test]
fn bad_traces_fail_with_the_line_number() {
    let config = "{\"config\":{\"rate_per_min\":60},\"t\":0}\n";
    let cases: [(String, &str); 9] = [
        (
            "{\"op\":\"reserve\",\"t\":0}\n".into(),
            "line 1: found an operation before the config",
        ),
        ("not json\n".into(), "line 1: not valid JSON"),
        (
            format!("{config}{{\"op\":\"reserve\",\"t\":0}}\n{{\"op\":\"reserve\"\n"),
            "line 3: not valid JSON",
        ),
        (
            format!("{config}{{\"op\":\"teleport\",\"t\":0}}\n"),
            "line 2: unknown op \"teleport\"",
        ),
        (
            format!("{config}{{\"op\":\"reserve\",\"t\":1.5}}\n"),
            "line 2: \"t\" must be a whole number",
        ),
        (
            format!("{config}{{\"op\":\"reserve\"}}\n"),
            "line 2: missing \"t\"",
        ),
        (
            format!("{config}{{\"op\":\"release\",\"t\":0}}\n"),
            "line 2: a release needs \"ticket\"",
        ),
        (
            format!("{config}{config}"),
            "line 2: a config may appear only on the first line",
        ),
        (
            "{\"config\":{\"rate_per_min\":601},\"t\":0}\n".into(),
            "line 1: the pacer rejects this config: rate_per_min 601",
        ),
    ];
    for (input, message) in cases {
        let run = pacer(&["replay"], &input);
        assert_eq!(run.code, 2, "input {input:?} should fail");
        assert!(
            run.stderr.contains(message),
            "input {input:?}: stderr {:?} lacks {message:?}",
            run.stderr
        );
    }
    let run = pacer(&["replay", "/nonexistent/trace.jsonl"], "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cannot open"), "{}", run.stderr);
    let run = pacer(&["replay"], "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("empty trace"), "{}", run.stderr);
}

#[test]
fn the_largest_clock_reading_is_accepted() {
    let input = "{\"config\":{},\"t\":0}\n{\"op\":\"reserve\",\"t\":18446744073709551615}\n{\"op\":\"reserve\",\"t\":0}\n";
    let run = pacer(&["replay"], input);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[1],
        "{\"kind\":\"admitted\",\"wait_ms\":0,\"ticket\":1}"
    );
    assert_eq!(
        lines[2],
        "{\"kind\":\"admitted\",\"wait_ms\":0,\"ticket\":2}"
    );
}

#[test]
fn bookings_replay_on_the_core() {
    // Rate 60, burst 1, idle 30000, 3 retries: bound 2000, hint cap 2 s,
    // horizon with 3 retries left = 2000 + 3·2·1000 = 8000 ms. At t = 0:
    // #1 now, #2 waits 1000, #3 waits 2000, the 4th needs 3000 > 2000:
    // booked (slot 3000, hint ⌈(3000 − 2000)/1000⌉ = 1). At t = 500 the
    // slot is 2500 ms away, beyond the bound: not yet, hint
    // ⌈(3000 − 2000 − 500)/1000⌉ = 1. At t = 1000 it is 2000 away: admitted
    // after 2000 with the booking's number as its ticket.
    let trace = "{\"config\":{\"burst\":1,\"idle_timeout_ms\":30000,\"max_retries\":3},\"t\":0}\n\
                 {\"op\":\"reserve\",\"t\":0}\n{\"op\":\"reserve\",\"t\":0}\n{\"op\":\"reserve\",\"t\":0}\n\
                 {\"op\":\"book\",\"retries_left\":3,\"t\":0}\n\
                 {\"op\":\"redeem\",\"booking\":4,\"t\":500}\n\
                 {\"op\":\"redeem\",\"booking\":4,\"t\":1000}\n\
                 {\"op\":\"release\",\"ticket\":4,\"t\":1000}\n";
    let run = pacer(&["replay"], trace);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let expected = "{\"bound_ms\":2000,\"enabled\":true,\"can_refuse\":true}\n\
                    {\"kind\":\"admitted\",\"wait_ms\":0,\"ticket\":1}\n\
                    {\"kind\":\"admitted\",\"wait_ms\":1000,\"ticket\":2}\n\
                    {\"kind\":\"admitted\",\"wait_ms\":2000,\"ticket\":3}\n\
                    {\"kind\":\"booked\",\"retry_after_s\":1,\"booking\":4,\"slot_ms\":3000}\n\
                    {\"kind\":\"notyet\",\"retry_after_s\":1}\n\
                    {\"kind\":\"admitted\",\"wait_ms\":2000,\"ticket\":4}\n\
                    {\"kind\":\"released\",\"refunded\":true}\n";
    assert_eq!(run.stdout, expected);
}

#[test]
fn a_redis_engine_with_no_server_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let trace = "{\"config\":{},\"t\":0}\n{\"op\":\"reserve\",\"t\":0}\n";
    for engine in ["redis-module", "redis-script"] {
        let run = pacer(
            &[
                "replay",
                "--engine",
                engine,
                "--redis",
                "redis://127.0.0.1:1/",
            ],
            trace,
        );
        assert_eq!(run.code, 2, "{engine}: {}", run.stdout);
        assert!(
            run.stderr.contains("line 1: redis:"),
            "{engine}: {}",
            run.stderr
        );
        assert_eq!(
            run.stdout, "",
            "{engine}: nothing printed before the bucket exists"
        );
    }
    let run = pacer(&["replay", "--engine", "memcached"], trace);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("memcached"), "{}", run.stderr);
}
