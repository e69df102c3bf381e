//! `pacer hammer`: reserves on one fleet bucket in Redis, at a steady pace,
//! each answer printed as a JSON line with the wall-clock times it was sent
//! and answered. Several of these (and the bindings' `RedisPacer`s) on one
//! key are how `tests/fleet/check.py` checks SPEC §6.1's window bound
//! across clients: an admission opens at `reply_ms + wait_ms`, at most the
//! slowest round trip after the instant the server decided it.
//!
//! The server's clock decides (no `AT`); the times printed are this
//! machine's wall clock, which every client on one machine shares.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::engine::SCRIPT;
use crate::redis_target::{error_text, no_script, Target};

/// How the hammer reaches the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    /// `PACER.RESERVE` (the module).
    Module,
    /// `FCALL pacer` (the script loaded as a function library).
    Function,
    /// `EVALSHA` of the shipped script (loaded by the hammer).
    Script,
}

/// One hammer run.
#[derive(Clone, Debug)]
pub struct Hammer {
    /// The Redis server or cluster.
    pub target: Target,
    /// The bucket's key.
    pub key: String,
    /// rate_per_min, burst, idle_timeout_ms, max_retries, release_policy.
    pub config: [String; 5],
    /// How many reserves.
    pub calls: u64,
    /// Pause between one answer and the next send, ms.
    pub every_ms: u64,
    /// Which door.
    pub door: Door,
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs `call` `calls` times with `pause` between two calls: the first call
/// at once, none after the last (a run ends with its last answer). The
/// first error ends the run.
fn paced(
    calls: u64,
    mut call: impl FnMut() -> Result<(), String>,
    mut pause: impl FnMut(),
) -> Result<(), String> {
    for i in 0..calls {
        if i > 0 {
            pause();
        }
        call()?;
    }
    Ok(())
}

impl Hammer {
    /// Runs the calls, one JSON line each on `out`:
    /// `{"client":"cli","send_ms":…,"reply_ms":…,"answer":"admitted","wait_ms":…}`
    /// or `… "answer":"refused","retry_after_s":…}`. An error reply or a
    /// lost connection ends the run with the error (on a cluster, after
    /// the redirects and retries the cluster connection makes); a
    /// `NOSCRIPT` loads the script again and retries once, by `EVAL`.
    pub fn run(&self, out: &mut impl Write) -> Result<(), String> {
        let mut con = self.target.connect(Duration::from_secs(10))?;
        // On a cluster SCRIPT LOAD goes to every primary.
        let load = |con: &mut dyn redis::ConnectionLike| {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(SCRIPT)
                .query::<String>(con)
                .map_err(|e| error_text(&e))
        };
        let sha = match self.door {
            Door::Script => load(&mut *con)?,
            _ => String::new(),
        };
        let every = Duration::from_millis(self.every_ms);
        // With `carry`, the script's command is EVAL of the script itself.
        let command = |carry: bool| {
            let mut cmd = match self.door {
                Door::Module => {
                    let mut cmd = redis::cmd("PACER.RESERVE");
                    cmd.arg(&self.key);
                    cmd
                }
                Door::Function => {
                    let mut cmd = redis::cmd("FCALL");
                    cmd.arg("pacer").arg(1).arg(&self.key).arg("reserve");
                    cmd
                }
                Door::Script if carry => {
                    let mut cmd = redis::cmd("EVAL");
                    cmd.arg(SCRIPT).arg(1).arg(&self.key).arg("reserve");
                    cmd
                }
                Door::Script => {
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(&sha).arg(1).arg(&self.key).arg("reserve");
                    cmd
                }
            };
            for arg in &self.config {
                cmd.arg(arg);
            }
            cmd
        };
        let call = || -> Result<(), String> {
            let send_ms = wall_ms();
            let reply: redis::Value = match command(false).query(&mut *con) {
                // The script cache was emptied (a restart, or a replica
                // promoted by a failover never had it): load it again and
                // retry once, as the bindings' clients do, by EVAL of the
                // script (a replica promoted a moment ago may have missed
                // the load).
                Err(e) if self.door == Door::Script && no_script(&e) => {
                    load(&mut *con)?;
                    command(true).query(&mut *con)
                }
                other => other,
            }
            .map_err(|e| error_text(&e))?;
            let reply_ms = wall_ms();
            let redis::Value::Array(items) = reply else {
                return Err(format!("expected an array, got {reply:?}"));
            };
            let number = |i: usize| -> Result<i64, String> {
                match items.get(i) {
                    Some(redis::Value::Int(n)) => Ok(*n),
                    other => Err(format!("expected a number at {i}, got {other:?}")),
                }
            };
            let line = match items.first() {
                Some(redis::Value::BulkString(kind)) if kind == b"admitted" => serde_json::json!({
                    "client": "cli", "send_ms": send_ms, "reply_ms": reply_ms,
                    "answer": "admitted", "wait_ms": number(1)?,
                }),
                Some(redis::Value::BulkString(kind)) if kind == b"refused" => serde_json::json!({
                    "client": "cli", "send_ms": send_ms, "reply_ms": reply_ms,
                    "answer": "refused", "retry_after_s": number(1)?,
                }),
                other => return Err(format!("unknown reply {other:?}")),
            };
            writeln!(out, "{line}").map_err(|e| e.to_string())
        };
        paced(self.calls, call, || std::thread::sleep(every))?;
        out.flush().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run did, in order: `C` a call, `P` a pause.
    fn schedule(calls: u64) -> String {
        let events = std::cell::RefCell::new(String::new());
        paced(
            calls,
            || {
                events.borrow_mut().push('C');
                Ok(())
            },
            || events.borrow_mut().push('P'),
        )
        .unwrap();
        events.into_inner()
    }

    #[test]
    fn a_pause_comes_between_two_calls_and_never_after_the_last() {
        assert_eq!(schedule(0), "");
        assert_eq!(schedule(1), "C");
        assert_eq!(schedule(3), "CPCPC");
    }

    #[test]
    fn an_error_ends_the_run_at_once() {
        let mut calls = 0;
        let mut pauses = 0;
        let result = paced(
            5,
            || {
                calls += 1;
                if calls == 2 {
                    Err("lost".to_string())
                } else {
                    Ok(())
                }
            },
            || pauses += 1,
        );
        assert_eq!(result, Err("lost".to_string()));
        assert_eq!((calls, pauses), (2, 1));
    }
}
