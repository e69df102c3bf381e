//! `pacer replay`: JSON lines in, one JSON line out per operation — the
//! language-neutral way to drive the core (format in `cli/README.md`).

use std::io::{BufRead, Write};

use pacer_core::budget::{ladder_ceiling, DEFAULT_BURST, DEFAULT_MAX_RETRIES, MAX_RATE_PER_MIN};
use pacer_core::{Config, ConfigError, Mode, ReleasePolicy, MAX_BURST};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::{Answer, CoreEngine, Engine, RedisEngine, RedisKind};

#[derive(Serialize)]
struct PacerLine {
    bound_ms: u64,
    enabled: bool,
    can_refuse: bool,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum OutLine {
    Admitted {
        wait_ms: u64,
        ticket: Option<u64>,
    },
    Refused {
        required_wait_ms: u64,
        retry_after_s: u64,
    },
    Released {
        refunded: bool,
    },
    Booked {
        retry_after_s: u64,
        booking: u64,
        slot_ms: u64,
    },
    Notyet {
        retry_after_s: u64,
    },
}

impl From<Answer> for OutLine {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Admitted {
                wait_ms, ticket, ..
            } => OutLine::Admitted { wait_ms, ticket },
            Answer::Refused {
                retry_after_s,
                required_wait_ms,
                ..
            } => OutLine::Refused {
                required_wait_ms,
                retry_after_s,
            },
            Answer::Booked {
                retry_after_s,
                booking,
                slot_ms,
                ..
            } => OutLine::Booked {
                retry_after_s,
                booking,
                slot_ms,
            },
            Answer::NotYet { retry_after_s } => OutLine::Notyet { retry_after_s },
            Answer::Released { refunded } => OutLine::Released { refunded },
        }
    }
}

/// Where `pacer replay` runs a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The core in this process.
    Core,
    /// A Redis server or cluster (started for tests) at `url`, module or
    /// script.
    Redis {
        /// One server's `redis://host:port/`, or a cluster's seed nodes.
        url: crate::redis_target::Target,
        /// Which engine.
        kind: RedisKind,
    },
}

const CONFIG_KEYS: [&str; 5] = [
    "rate_per_min",
    "burst",
    "idle_timeout_ms",
    "max_retries",
    "release_policy",
];

fn whole(object: &Map<String, Value>, key: &str, line: usize) -> Result<Option<u64>, String> {
    match object.get(key) {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            format!(
                "line {line}: \"{key}\" must be a whole number from 0 to {}, found {value}",
                u64::MAX
            )
        }),
    }
}

fn small(object: &Map<String, Value>, key: &str, line: usize) -> Result<Option<u32>, String> {
    match whole(object, key, line)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("line {line}: \"{key}\" {v} is too large")),
    }
}

fn parse_config(value: &Value, line: usize) -> Result<(Config, u64), String> {
    let hint = r#"expected the config line first, e.g. {"config":{"rate_per_min":60,"burst":10,"idle_timeout_ms":120000,"max_retries":5,"release_policy":"refund"},"t":0}"#;
    let object = value
        .as_object()
        .ok_or_else(|| format!("line {line}: {hint}"))?;
    let config = match object.get("config") {
        Some(Value::Object(config)) => config,
        Some(other) => {
            return Err(format!(
                "line {line}: \"config\" must be an object, found {other}"
            ))
        }
        None if object.contains_key("op") => {
            return Err(format!(
                "line {line}: found an operation before the config; {hint}"
            ))
        }
        None => return Err(format!("line {line}: {hint}")),
    };
    if let Some(key) = config
        .keys()
        .find(|key| !CONFIG_KEYS.contains(&key.as_str()))
    {
        return Err(format!(
            "line {line}: unknown config key \"{key}\" (known: {})",
            CONFIG_KEYS.join(", ")
        ));
    }
    let t = whole(object, "t", line)?.unwrap_or(0);
    let rate_per_min = small(config, "rate_per_min", line)?.unwrap_or(60);
    let burst = small(config, "burst", line)?.unwrap_or(DEFAULT_BURST);
    let idle_timeout_ms = whole(config, "idle_timeout_ms", line)?.unwrap_or(120_000);
    let max_retries = small(config, "max_retries", line)?
        .unwrap_or_else(|| DEFAULT_MAX_RETRIES.min(ladder_ceiling(idle_timeout_ms)));
    let release_policy = match config.get("release_policy") {
        None => ReleasePolicy::Refund,
        Some(Value::String(text)) if text == "refund" => ReleasePolicy::Refund,
        Some(Value::String(text)) if text == "strict" => ReleasePolicy::Strict,
        Some(other) => {
            return Err(format!(
                "line {line}: \"release_policy\" must be \"refund\" or \"strict\", found {other}"
            ))
        }
    };
    let config = Config {
        rate_per_min,
        burst,
        idle_timeout_ms,
        max_retries,
        release_policy,
        ..Config::DEFAULT
    };
    Ok((config, t))
}

fn config_error(error: ConfigError, config: &Config, line: usize) -> String {
    let why = match error {
        ConfigError::RateTooHigh => {
            format!(
                "rate_per_min {} is above {MAX_RATE_PER_MIN}",
                config.rate_per_min
            )
        }
        ConfigError::BurstTooLarge => format!("burst {} is above {MAX_BURST}", config.burst),
        ConfigError::RetriesExceedLadder => format!(
            "max_retries {} is above {}, the most whose backoff ladder fits a {} ms idle timeout",
            config.max_retries,
            ladder_ceiling(config.idle_timeout_ms),
            config.idle_timeout_ms
        ),
        ConfigError::AdaptiveRange => error.to_string(),
    };
    format!("line {line}: the pacer rejects this config: {why}")
}

/// A JSON value whose objects were read with their keys checked: a key
/// given twice in one object is an error (serde_json alone keeps the last).
struct Unique(Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

/// What [`parse_line`]'s error says of a key given twice.
const DUPLICATE: &str = "duplicate key";

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("{DUPLICATE} \"{key}\"")));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// One line of a trace as JSON; a key given twice in one object is an
/// error (`duplicate key "t"`), as is text that is not JSON.
fn parse_line(text: &str) -> Result<Value, String> {
    serde_json::from_str::<Unique>(text)
        .map(|Unique(value)| value)
        .map_err(|e| {
            let message = e.to_string();
            match message.strip_suffix(&format!(" at line {} column {}", e.line(), e.column())) {
                Some(duplicate) if duplicate.starts_with(DUPLICATE) => duplicate.to_string(),
                _ => format!("not valid JSON: {message}"),
            }
        })
}

fn write_line<W: Write, T: Serialize>(out: &mut W, value: &T) -> Result<(), String> {
    serde_json::to_writer(&mut *out, value).map_err(|e| format!("cannot write output: {e}"))?;
    out.write_all(b"\n")
        .map_err(|e| format!("cannot write output: {e}"))
}

/// Replays a trace from `input` on the core, writing one line per
/// decision to `output`.
pub fn run<R: BufRead, W: Write>(input: R, output: W) -> Result<(), String> {
    run_on(&Target::Core, input, output)
}

fn engine_for(target: &Target, config: &Config, t: u64) -> Result<Box<dyn Engine>, String> {
    match target {
        Target::Core => Ok(Box::new(
            CoreEngine::new(config, t).map_err(|e| format!("{e:?}"))?,
        )),
        Target::Redis { url, kind } => Ok(Box::new(
            RedisEngine::new(url, *kind, config, t).map_err(|e| format!("redis: {e}"))?,
        )),
    }
}

/// Replays a trace from `input` on `target`, writing one line per decision
/// to `output`. Blank lines are skipped; keys an operation line does not
/// use are ignored (a vector step with its `expect` can be fed as it is).
pub fn run_on<R: BufRead, W: Write>(
    target: &Target,
    input: R,
    mut output: W,
) -> Result<(), String> {
    let mut engine: Option<Box<dyn Engine>> = None;
    for (index, text) in input.lines().enumerate() {
        let line = index + 1;
        let text = text.map_err(|e| format!("line {line}: cannot read input: {e}"))?;
        if text.trim().is_empty() {
            continue;
        }
        let value = parse_line(&text).map_err(|e| format!("line {line}: {e}"))?;
        let Some(bucket) = engine.as_mut() else {
            let (config, t) = parse_config(&value, line)?;
            let params =
                pacer_core::Params::plan(&config).map_err(|e| config_error(e, &config, line))?;
            let mode = params.mode();
            let created =
                engine_for(target, &config, t).map_err(|e| format!("line {line}: {e}"))?;
            write_line(
                &mut output,
                &PacerLine {
                    bound_ms: params.wait_bound_ms(),
                    enabled: mode != Mode::Disabled,
                    can_refuse: mode == Mode::Refusing,
                },
            )?;
            engine = Some(created);
            continue;
        };
        let object = value.as_object().ok_or_else(|| {
            format!("line {line}: expected an object like {{\"op\":\"reserve\",\"t\":0}}")
        })?;
        if object.contains_key("config") {
            return Err(format!(
                "line {line}: a config may appear only on the first line"
            ));
        }
        let t =
            whole(object, "t", line)?.ok_or_else(|| format!("line {line}: missing \"t\" (ms)"))?;
        let ops = "\"reserve\", \"book\", \"release\" or \"redeem\"";
        let answer = match object.get("op").and_then(Value::as_str) {
            Some("reserve") => bucket.reserve(t),
            Some("book") => {
                let retries_left = small(object, "retries_left", line)?
                    .ok_or_else(|| format!("line {line}: a book needs \"retries_left\""))?;
                bucket.book(t, retries_left)
            }
            Some("release") => {
                let ticket = whole(object, "ticket", line)?
                    .ok_or_else(|| format!("line {line}: a release needs \"ticket\""))?;
                bucket.release(ticket, t)
            }
            Some("redeem") => {
                let booking = whole(object, "booking", line)?
                    .ok_or_else(|| format!("line {line}: a redeem needs \"booking\""))?;
                bucket.redeem(booking, t)
            }
            Some(other) => {
                return Err(format!(
                    "line {line}: unknown op \"{other}\" (expected {ops})"
                ))
            }
            None => return Err(format!("line {line}: missing \"op\" ({ops})")),
        }
        .map_err(|e| format!("line {line}: {e}"))?;
        write_line(&mut output, &OutLine::from(answer))?;
    }
    if engine.is_none() {
        return Err("empty trace: the first line must be the config".into());
    }
    output
        .flush()
        .map_err(|e| format!("cannot write output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(input: &str) -> Result<String, String> {
        let mut out = Vec::new();
        run(input.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn burst_one_bound_2000_from_spec_7() {
        // rate 60, burst 1, bound 2000 (idle 30000, 3 retries): #0 now,
        // #1 1000, #2 2000, #3 refused (required 3000, hint 2).
        let input = r#"{"config":{"rate_per_min":60,"burst":1,"idle_timeout_ms":30000,"max_retries":3},"t":0}
{"op":"reserve","t":0}
{"op":"reserve","t":0}
{"op":"reserve","t":0}
{"op":"reserve","t":0}
{"op":"release","ticket":2,"t":0}
{"op":"release","ticket":2,"t":0}"#;
        let expected = r#"{"bound_ms":2000,"enabled":true,"can_refuse":true}
{"kind":"admitted","wait_ms":0,"ticket":1}
{"kind":"admitted","wait_ms":1000,"ticket":2}
{"kind":"admitted","wait_ms":2000,"ticket":3}
{"kind":"refused","required_wait_ms":3000,"retry_after_s":2}
{"kind":"released","refunded":true}
{"kind":"released","refunded":false}
"#;
        assert_eq!(replay(input).unwrap(), expected);
    }

    #[test]
    fn errors_name_the_line() {
        let err = replay(r#"{"op":"reserve","t":0}"#).unwrap_err();
        assert!(
            err.starts_with("line 1: found an operation before the config"),
            "{err}"
        );
        let err = replay("{\"config\":{},\"t\":0}\n\n{\"op\":\"reserve\",\"t\":-1}").unwrap_err();
        assert!(
            err.starts_with("line 3: \"t\" must be a whole number"),
            "{err}"
        );
        let err = replay("{\"config\":{\"max_retries\":6},\"t\":0}").unwrap_err();
        assert!(err.contains("max_retries 6 is above 5"), "{err}");
        assert!(replay("").unwrap_err().contains("empty trace"));
    }

    #[test]
    fn a_key_given_twice_in_a_line_is_an_error_naming_the_line() {
        let err =
            replay("{\"config\":{},\"t\":0}\n{\"op\":\"reserve\",\"t\":0,\"t\":5}").unwrap_err();
        assert_eq!(err, "line 2: duplicate key \"t\"");
        let err = replay("{\"config\":{\"burst\":1,\"burst\":2},\"t\":0}").unwrap_err();
        assert_eq!(err, "line 1: duplicate key \"burst\"");
        // The same key in two objects is no duplicate.
        let out = replay("{\"config\":{\"t\":1},\"t\":0}");
        assert!(out.unwrap_err().contains("unknown config key \"t\""));
    }
}
