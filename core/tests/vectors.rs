//! Replays the language-neutral vectors in `tests/vectors/` through the
//! core. Every expectation there is hand-derived from SPEC.md; the same files
//! are replayed by each binding and by `pacer replay`.

use std::collections::HashMap;

use pacer_core::{budget, settings, Config, Decision, Mode, Pacer, ReleasePolicy, Ticket};
use serde_json::{json, Value};

fn load(name: &str) -> Value {
    let path = format!("{}/../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn config_from(value: &Value) -> Config {
    Config {
        rate_per_min: value["rate_per_min"].as_u64().unwrap() as u32,
        burst: value["burst"].as_u64().unwrap() as u32,
        idle_timeout_ms: value["idle_timeout_ms"].as_u64().unwrap(),
        max_retries: value["max_retries"].as_u64().unwrap() as u32,
        release_policy: match value["release_policy"].as_str().unwrap() {
            "refund" => ReleasePolicy::Refund,
            "strict" => ReleasePolicy::Strict,
            other => panic!("unknown policy {other}"),
        },
        adaptive_floor_per_min: 0,
        adaptive_ceiling_per_min: 0,
    }
}

/// The replay protocol: tickets are numbered 1, 2, 3 … in the order of
/// admissions that debited anything; a released ticket is spent.
struct Replayer {
    pacer: Pacer,
    /// Reserve through an exclusive borrow (`Pacer::reserve_mut`).
    exclusive: bool,
    tickets: HashMap<u64, Ticket>,
    issued: u64,
}

impl Replayer {
    fn step(&mut self, step: &Value) -> Value {
        let t = step["t"].as_u64().unwrap();
        match step["op"].as_str().unwrap() {
            "reserve" => match if self.exclusive {
                self.pacer.reserve_mut(t)
            } else {
                self.pacer.reserve(t)
            } {
                Decision::Admitted(admission) => {
                    let ticket = admission.ticket.map(|ticket| {
                        self.issued += 1;
                        self.tickets.insert(self.issued, ticket);
                        self.issued
                    });
                    json!({"kind": "admitted", "wait_ms": admission.wait_ms, "ticket": ticket})
                }
                Decision::Refused(refusal) => json!({
                    "kind": "refused",
                    "required_wait_ms": refusal.required_wait_ms,
                    "retry_after_s": refusal.retry_after_s,
                }),
            },
            "release" => {
                let refunded = match self.tickets.remove(&step["ticket"].as_u64().unwrap()) {
                    Some(ticket) => self.pacer.release(ticket, t),
                    None => false,
                };
                json!({"kind": "released", "refunded": refunded})
            }
            other => panic!("unknown op {other}"),
        }
    }
}

#[test]
fn scenarios_replay() {
    let doc = load("scenarios.json");
    let scenarios = doc["scenarios"].as_array().unwrap();
    assert!(scenarios.len() >= 12);
    for (scenario, exclusive) in scenarios
        .iter()
        .flat_map(|scenario| [(scenario, false), (scenario, true)])
    {
        let name = scenario["name"].as_str().unwrap();
        let config = config_from(&scenario["config"]);
        let pacer = Pacer::new(&config, scenario["t"].as_u64().unwrap()).unwrap();
        let header = json!({
            "bound_ms": pacer.wait_bound_ms(),
            "enabled": pacer.mode() != Mode::Disabled,
            "can_refuse": pacer.mode() == Mode::Refusing,
        });
        assert_eq!(header, scenario["expect_pacer"], "{name}: pacer header");
        let mut replayer = Replayer {
            pacer,
            exclusive,
            tickets: HashMap::new(),
            issued: 0,
        };
        for (index, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                replayer.step(step),
                step["expect"],
                "{name} (exclusive: {exclusive}): step {index}: {step}"
            );
        }
    }
}

#[test]
fn budgets_resolve() {
    let doc = load("budgets.json");
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let s = &case["settings"];
        let settings = settings::Settings {
            rate_per_min: s["rate_per_min"].as_str(),
            idle_timeout_ms: s["idle_timeout_ms"].as_str(),
            total_timeout_ms: s["total_timeout_ms"].as_str(),
            max_retries: s["max_retries"].as_str(),
        };
        let resolution = settings::resolve(&settings);
        let b = resolution.budget;
        let notices: Vec<Value> = resolution
            .notices
            .iter()
            .map(|n| json!({"kind": n.kind.name(), "raw": n.raw, "values": n.values}))
            .collect();
        let got = json!({
            "rate_per_min": b.rate_per_min,
            "idle_timeout_ms": b.idle_timeout_ms,
            "total_timeout_ms": b.total_timeout_ms,
            "max_retries": b.max_retries,
            "bound_ms": b.wait_bound_ms(),
            "hint_cap_s": b.hint_cap_s(),
            "refusal_schedule_ms": b.refusal_schedule_ms(),
            "can_refuse": b.can_refuse(),
            "enabled": b.pacing_enabled(),
            "notices": notices,
        });
        assert_eq!(got, case["expect"], "{name}");
    }
}

#[test]
fn derived_quantities() {
    let doc = load("derived.json");
    for case in doc["ladder_ceiling"].as_array().unwrap() {
        let idle = case["idle_timeout_ms"].as_u64().unwrap();
        assert_eq!(
            u64::from(budget::ladder_ceiling(idle)),
            case["expect"].as_u64().unwrap(),
            "ceiling {idle}"
        );
    }
    for case in doc["wait_bound_ms"].as_array().unwrap() {
        let (idle, r) = (
            case["idle_timeout_ms"].as_u64().unwrap(),
            case["max_retries"].as_u64().unwrap() as u32,
        );
        assert_eq!(
            budget::wait_bound_ms(idle, r),
            case["expect"].as_u64().unwrap(),
            "bound {idle} {r}"
        );
    }
    for case in doc["retry_after_s"].as_array().unwrap() {
        let (required, bound) = (
            case["required_wait_ms"].as_u64().unwrap(),
            case["bound_ms"].as_u64().unwrap(),
        );
        assert_eq!(
            budget::retry_after_s(required, bound),
            case["expect"].as_u64().unwrap(),
            "hint {required} {bound}"
        );
    }
    for case in doc["can_refuse"].as_array().unwrap() {
        let rate = case["rate_per_min"].as_u64().unwrap() as u32;
        let r = case["max_retries"].as_u64().unwrap() as u32;
        let bound = case["bound_ms"].as_u64().unwrap();
        assert_eq!(
            budget::can_refuse(rate, r, bound),
            case["expect"].as_bool().unwrap(),
            "can_refuse {rate} {r} {bound}"
        );
    }
}
