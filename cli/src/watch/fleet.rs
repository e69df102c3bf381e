//! A fleet bucket in Redis, read with the read-only info op
//! (docs/redis.md, `PACER.INFO`): the module's `PACER.INFO key`, the
//! function library's `FCALL_RO pacer_ro 1 key info`, or the shipped
//! script's `info` by `EVALSHA_RO` (`EVAL_RO` the first time the server has
//! not cached it). None of them writes; the watch never sends a command
//! that may.
//!
//! A Redis key (key format 2) keeps the bucket's admissions (at once and
//! after a wait), refusals, bookings, redemptions, shaped admissions,
//! releases (refunded and not), the upstream answers its OBSERVE counted,
//! and the waits' sum and histogram; not the clock regressions
//! (docs/metrics.md, "Whose counts").

use std::collections::HashMap;
use std::time::Duration;

use pacer_core::{CounterSnapshot, UNITS_PER_TOKEN, WAIT_BOUNDS_MS};

use super::{Bucket, BucketConfig, Counts, Queue, Reading};
use crate::engine::SCRIPT;
use crate::redis_target::{error_text as one_line, no_script, Connection, Target};

/// How the watch reaches the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    /// The first that the server answers: the module, the function
    /// library, the script.
    Auto,
    /// `PACER.INFO`.
    Module,
    /// `FCALL_RO pacer_ro`.
    Function,
    /// `EVALSHA_RO` of the shipped script.
    Script,
}

/// The door a bucket was found behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    Module,
    Function,
    /// `ro`: the server has `EVALSHA_RO` (Redis 7); older ones run the
    /// same read-only op by `EVALSHA`.
    Script {
        ro: bool,
    },
}

/// A Redis bucket, read-only.
pub struct RedisBucket {
    con: Connection,
    url: Target,
    key: String,
    door: Found,
    sha: String,
}

impl std::fmt::Debug for RedisBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBucket")
            .field("url", &self.url)
            .field("key", &self.key)
            .field("door", &self.door)
            .finish()
    }
}

/// The server does not have this command (an older Redis, no module).
fn unknown_command(e: &redis::RedisError) -> bool {
    one_line(e).to_ascii_lowercase().contains("unknown command")
}

/// `FCALL_RO` names a function the server has not loaded.
fn no_function(e: &redis::RedisError) -> bool {
    unknown_command(e)
        || one_line(e)
            .to_ascii_lowercase()
            .contains("function not found")
}

impl RedisBucket {
    /// Connects to `url` and reads `key` once through `door` (finding it,
    /// with [`Door::Auto`]): an unreachable server, a missing key, a key
    /// of another type or one that holds no bucket is an error, and
    /// nothing is written.
    pub fn connect(url: &Target, key: &str, door: Door) -> Result<RedisBucket, String> {
        if key.is_empty() {
            return Err("--key needs a key, got an empty one".into());
        }
        let con = url.connect(Duration::from_secs(10))?;
        let sha = sha1_smol::Sha1::from(SCRIPT.as_bytes())
            .digest()
            .to_string();
        let mut bucket = RedisBucket {
            con,
            url: url.clone(),
            key: key.to_string(),
            door: Found::Module,
            sha,
        };
        let tries: &[Found] = match door {
            Door::Auto => &[Found::Module, Found::Function, Found::Script { ro: true }],
            Door::Module => &[Found::Module],
            Door::Function => &[Found::Function],
            Door::Script => &[Found::Script { ro: true }],
        };
        let mut last = String::new();
        for (i, &found) in tries.iter().enumerate() {
            bucket.door = found;
            match bucket.info() {
                Ok(_) => return Ok(bucket),
                // Not behind this door: the next, if there is one.
                Err(Missing::Door(text)) if i + 1 < tries.len() => last = text,
                Err(Missing::Door(text)) => last = text,
                Err(Missing::Bucket(text)) => return Err(text),
            }
        }
        Err(match door {
            Door::Auto => format!(
                "{url} runs no pacer engine (no module, no pacer_ro function, no script): {last}"
            ),
            _ => format!("{url}: {last}"),
        })
    }

    /// One info call through the door found, as name → value.
    fn info(&mut self) -> Result<HashMap<String, redis::Value>, Missing> {
        let reply = match self.door {
            Found::Module => redis::cmd("PACER.INFO")
                .arg(&self.key)
                .query(&mut *self.con)
                .map_err(|e| self.classify(e, unknown_command)),
            Found::Function => redis::cmd("FCALL_RO")
                .arg("pacer_ro")
                .arg(1)
                .arg(&self.key)
                .arg("info")
                .query(&mut *self.con)
                .map_err(|e| self.classify(e, no_function)),
            Found::Script { ro } => self.script_info(ro),
        }?;
        let redis::Value::Array(items) = reply else {
            return Err(Missing::Bucket(format!(
                "{}: the info reply for key '{}' is not an array: {reply:?}",
                self.url, self.key
            )));
        };
        let mut map = HashMap::new();
        for pair in items.chunks(2) {
            if let [redis::Value::BulkString(name), value] = pair {
                map.insert(String::from_utf8_lossy(name).into_owned(), value.clone());
            }
        }
        Ok(map)
    }

    /// The script's info: `EVALSHA_RO`, and on a server that has not
    /// cached the script `EVAL_RO` of its text (caching it, which changes
    /// no key); on a server without the `_RO` forms, `EVALSHA` / `EVAL`.
    fn script_info(&mut self, ro: bool) -> Result<redis::Value, Missing> {
        let (by_sha, by_text) = match ro {
            true => ("EVALSHA_RO", "EVAL_RO"),
            false => ("EVALSHA", "EVAL"),
        };
        let call = |con: &mut dyn redis::ConnectionLike, command: &str, script: &str| {
            redis::cmd(command)
                .arg(script)
                .arg(1)
                .arg(&self.key)
                .arg("info")
                .query::<redis::Value>(con)
        };
        let reply = match call(&mut *self.con, by_sha, &self.sha) {
            Err(e) if no_script(&e) => call(&mut *self.con, by_text, SCRIPT),
            other => other,
        };
        match reply {
            Err(e) if ro && unknown_command(&e) => {
                self.door = Found::Script { ro: false };
                self.script_info(false)
            }
            other => other.map_err(|e| self.classify(e, |_| false)),
        }
    }

    /// An error reply: the door is missing (`missing_door`), or the door
    /// answered about the key.
    fn classify(
        &self,
        e: redis::RedisError,
        missing_door: fn(&redis::RedisError) -> bool,
    ) -> Missing {
        let text = one_line(&e);
        if missing_door(&e) {
            return Missing::Door(text);
        }
        let about = match e.code() {
            Some("WRONGTYPE") => format!(
                "key '{}' holds another type, not a pacer bucket ({text})",
                self.key
            ),
            _ if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                format!("lost the connection: {text}")
            }
            _ => text,
        };
        Missing::Bucket(format!("{}: {about}", self.url))
    }
}

/// Why an info call failed.
enum Missing {
    /// The command, function or script is not on the server.
    Door(String),
    /// The server answered about the key (missing, another type, not a
    /// bucket), or the connection failed.
    Bucket(String),
}

/// A field of an info reply as a number.
fn number(info: &HashMap<String, redis::Value>, name: &str) -> Result<i64, String> {
    match info.get(name) {
        Some(redis::Value::Int(n)) => Ok(*n),
        other => Err(format!(
            "the info reply's {name} is not a number: {other:?}"
        )),
    }
}

fn unsigned(info: &HashMap<String, redis::Value>, name: &str) -> Result<u64, String> {
    u64::try_from(number(info, name)?).map_err(|_| format!("the info reply's {name} is negative"))
}

fn text(info: &HashMap<String, redis::Value>, name: &str) -> Result<String, String> {
    match info.get(name) {
        Some(redis::Value::BulkString(bytes)) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Some(redis::Value::SimpleString(s)) => Ok(s.clone()),
        other => Err(format!("the info reply's {name} is not text: {other:?}")),
    }
}

/// A reading from an info reply.
fn reading(info: &HashMap<String, redis::Value>) -> Result<Reading, String> {
    let small = |name: &str| -> Result<u32, String> {
        u32::try_from(unsigned(info, name)?)
            .map_err(|_| format!("the info reply's {name} is too large"))
    };
    let floor = small("adaptive_floor_per_min")?;
    let rate = small("rate_per_min")?;
    let ceiling = match small("adaptive_ceiling_per_min")? {
        0 => rate,
        ceiling => ceiling,
    };
    let released = unsigned(info, "released")?;
    let release_refused = unsigned(info, "release_refused")?;
    // The histogram: INFO's wait_bucket_<bound> counts, made cumulative
    // with the immediate admissions as the core's counters make theirs.
    let mut waits = CounterSnapshot {
        admitted: unsigned(info, "admitted")?,
        admitted_after_wait: unsigned(info, "admitted_after_wait")?,
        ..CounterSnapshot::default()
    };
    for (count, bound) in waits.wait_buckets.iter_mut().zip(WAIT_BOUNDS_MS) {
        *count = unsigned(info, &format!("wait_bucket_{bound}"))?;
    }
    Ok(Reading {
        config: BucketConfig {
            rate_per_min: rate,
            burst: small("burst")?,
            idle_timeout_ms: unsigned(info, "idle_timeout_ms")?,
            max_retries: small("max_retries")?,
            release_policy: text(info, "release_policy")?,
            adaptive_floor_per_min: (floor > 0).then_some(floor),
            adaptive_ceiling_per_min: (floor > 0).then_some(ceiling),
        },
        rate_in_force_per_min: small("rate_in_force")?,
        tokens: number(info, "level_units")? as f64 / UNITS_PER_TOKEN as f64,
        queue: Queue::at(
            number(info, "level_units")?,
            number(info, "max_debt_units")?,
        ),
        counts: Counts {
            admissions: waits.admitted,
            admitted: waits.admitted.wrapping_sub(waits.admitted_after_wait),
            waited: waits.admitted_after_wait,
            // The key's `refused` counts refusals without a booking.
            refused: unsigned(info, "refused")?,
            booked: unsigned(info, "booked")?,
            redeemed: unsigned(info, "redeemed")?,
            shaped: unsigned(info, "shaped")?,
            // The key's `released` counts the refunded releases.
            releases: released.wrapping_add(release_refused),
            refunded: released,
            release_refused,
            opened: unsigned(info, "upstream_opened")?,
            throttled: unsigned(info, "upstream_throttled")?,
            // Not kept by a Redis key.
            clock_regressions: None,
            wait_ms_total: unsigned(info, "wait_ms_total")?,
            wait_le: std::array::from_fn(|i| waits.wait_le(i)),
        },
    })
}

impl Bucket for RedisBucket {
    fn read(&mut self) -> Result<Reading, String> {
        let info = self.info().map_err(|missing| match missing {
            Missing::Door(text) | Missing::Bucket(text) => text,
        })?;
        reading(&info).map_err(|e| format!("{} key '{}': {e}", self.url, self.key))
    }

    fn source(&self) -> &'static str {
        "redis"
    }

    fn describe(&self) -> String {
        let door = match self.door {
            Found::Module => "PACER.INFO",
            Found::Function => "FCALL_RO pacer_ro",
            Found::Script { ro: true } => "EVALSHA_RO",
            Found::Script { ro: false } => "EVALSHA",
        };
        format!("Redis bucket '{}' at {} ({door})", self.key, self.url)
    }
}
