//! Where a trace's bucket lives: the core in this process, or a Redis
//! server running the module or the script (docs/redis.md). Each engine
//! numbers tickets and bookings 1, 2, 3 … in the order it issues them (a
//! redeemed booking's admission keeps the booking's number), so the same
//! trace gives the same answers on every engine, and a differential test
//! compares them answer by answer and state by state.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::redis_target::{error_text, Connection, Target};
use pacer_core::{
    Booking, BookingDecision, Config, ConfigError, Decision, Pacer, Redemption, Ticket,
};

/// One answer, engine-neutral.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Open after `wait_ms`.
    Admitted {
        /// Wait before opening, ms.
        wait_ms: u64,
        /// The ticket's number, when something was debited.
        ticket: Option<u64>,
        /// Which rule admitted it.
        path: &'static str,
        /// The clock read behind the high-water mark.
        clock_regressed: bool,
    },
    /// Do not open; retry after the hint.
    Refused {
        /// The hint, s.
        retry_after_s: u64,
        /// What the rate would need, ms.
        required_wait_ms: u64,
        /// The clock read behind the high-water mark.
        clock_regressed: bool,
    },
    /// Refused now, with a place in line.
    Booked {
        /// The hint, s.
        retry_after_s: u64,
        /// The booking's number.
        booking: u64,
        /// When the connection may open, ms.
        slot_ms: u64,
        /// The clock read behind the high-water mark.
        clock_regressed: bool,
    },
    /// A booking presented too early.
    NotYet {
        /// The hint, s.
        retry_after_s: u64,
    },
    /// A release: whether the policy refunded it (`false` also for a
    /// ticket already released).
    Released {
        /// Refunded.
        refunded: bool,
    },
}

/// The bucket's state, as every engine can report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// The clock high-water mark, ms.
    pub high_water_ms: u64,
    /// Tokens at the mark, units.
    pub tokens_units: i64,
    /// The strict policy's release counter.
    pub seq: u32,
}

/// A bucket a trace runs against.
pub trait Engine {
    /// One request for a connection at `t`.
    fn reserve(&mut self, t: u64) -> Result<Answer, String>;
    /// The same, booking a place in line within `retries_left` retries.
    fn book(&mut self, t: u64, retries_left: u32) -> Result<Answer, String>;
    /// Gives back ticket or booking number `ticket`.
    fn release(&mut self, ticket: u64, t: u64) -> Result<Answer, String>;
    /// Presents booking number `booking`. Admitted, the booking is spent and
    /// its number names the admission's ticket from then on; a booking not
    /// held, or spent (redeemed or released), is an error ([`no_booking`],
    /// [`spent_booking`]) that changes nothing.
    fn redeem(&mut self, booking: u64, t: u64) -> Result<Answer, String>;
    /// The stored state (read at `t`, which changes nothing).
    fn state(&mut self, t: u64) -> Result<State, String>;
}

/// The error of a redemption of a number that names no booking.
pub fn no_booking(booking: u64) -> String {
    format!("no booking {booking} is held")
}

/// The error of a redemption of a booking already redeemed or released
/// (on Redis, the server's `ERR pacer: ticket already released`).
pub fn spent_booking(booking: u64) -> String {
    format!("booking {booking} was already redeemed or released")
}

/// The core in this process.
#[derive(Debug)]
pub struct CoreEngine {
    pacer: Pacer,
    tickets: HashMap<u64, Ticket>,
    bookings: HashMap<u64, Booking>,
    /// Bookings redeemed or released.
    spent_bookings: HashSet<u64>,
    next: u64,
}

impl CoreEngine {
    /// A pacer created full at `t`.
    pub fn new(config: &Config, t: u64) -> Result<CoreEngine, ConfigError> {
        Ok(CoreEngine {
            pacer: Pacer::new(config, t)?,
            tickets: HashMap::new(),
            bookings: HashMap::new(),
            spent_bookings: HashSet::new(),
            next: 1,
        })
    }

    /// The pacer inside.
    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    fn number(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        n
    }

    fn admitted(&mut self, admission: pacer_core::Admission) -> Answer {
        let ticket = admission.ticket.map(|ticket| {
            let n = self.number();
            self.tickets.insert(n, ticket);
            n
        });
        Answer::Admitted {
            wait_ms: admission.wait_ms,
            ticket,
            path: admission.path.name(),
            clock_regressed: admission.clock_regressed,
        }
    }
}

fn refused(refusal: pacer_core::Refusal) -> Answer {
    Answer::Refused {
        retry_after_s: refusal.retry_after_s,
        required_wait_ms: refusal.required_wait_ms,
        clock_regressed: refusal.clock_regressed,
    }
}

impl Engine for CoreEngine {
    fn reserve(&mut self, t: u64) -> Result<Answer, String> {
        Ok(match self.pacer.reserve(t) {
            Decision::Admitted(admission) => self.admitted(admission),
            Decision::Refused(refusal) => refused(refusal),
        })
    }

    fn book(&mut self, t: u64, retries_left: u32) -> Result<Answer, String> {
        Ok(match self.pacer.reserve_or_book(t, retries_left) {
            BookingDecision::Admitted(admission) => self.admitted(admission),
            BookingDecision::Booked(booked) => {
                let n = self.number();
                let slot_ms = booked.booking.slot_ms;
                self.bookings.insert(n, booked.booking);
                Answer::Booked {
                    retry_after_s: booked.retry_after_s,
                    booking: n,
                    slot_ms,
                    clock_regressed: booked.clock_regressed,
                }
            }
            BookingDecision::Refused(refusal) => refused(refusal),
        })
    }

    fn release(&mut self, ticket: u64, t: u64) -> Result<Answer, String> {
        let held = match self.tickets.remove(&ticket) {
            Some(ticket) => Some(ticket),
            None => self.bookings.remove(&ticket).map(|booking| {
                self.spent_bookings.insert(ticket);
                booking.ticket
            }),
        };
        Ok(Answer::Released {
            refunded: held.is_some_and(|ticket| self.pacer.release(ticket, t)),
        })
    }

    fn redeem(&mut self, booking: u64, t: u64) -> Result<Answer, String> {
        if self.spent_bookings.contains(&booking) {
            return Err(spent_booking(booking));
        }
        let held = self
            .bookings
            .remove(&booking)
            .ok_or_else(|| no_booking(booking))?;
        Ok(match self.pacer.redeem(held, t) {
            Redemption::Admitted(admission) => {
                let ticket = admission
                    .ticket
                    .expect("a redeemed booking carries its ticket");
                self.tickets.insert(booking, ticket);
                self.spent_bookings.insert(booking);
                Answer::Admitted {
                    wait_ms: admission.wait_ms,
                    ticket: Some(booking),
                    path: admission.path.name(),
                    clock_regressed: admission.clock_regressed,
                }
            }
            Redemption::NotYet {
                booking: held,
                retry_after_s,
            } => {
                self.bookings.insert(booking, held);
                Answer::NotYet { retry_after_s }
            }
        })
    }

    fn state(&mut self, _t: u64) -> Result<State, String> {
        let s = self.pacer.state();
        Ok(State {
            high_water_ms: s.high_water_ms,
            tokens_units: s.tokens_units,
            seq: s.seq,
        })
    }
}

/// Which Redis engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisKind {
    /// The module's `PACER.*` commands.
    Module,
    /// The script, by `EVALSHA`.
    Script,
    /// The same script loaded as a function library, by `FCALL`.
    Function,
}

/// The script as shipped.
pub const SCRIPT: &str = include_str!("../pacer.lua");

/// The script with `AT <ms>` allowed, for traces on a test clock.
pub fn test_clock_script() -> String {
    SCRIPT.replace("local TEST_CLOCK = false", "local TEST_CLOCK = true")
}

/// The line that names the functions the script registers when it is
/// loaded as a library (`FUNCTION LOAD`): `pacer` and `pacer_ro`.
pub const REGISTER_LINE: &str = "local FUNCTION_NAME = 'pacer'";

/// `source` as a function library named `name` whose functions are
/// `name` and, read-only, `name_ro` (the shipped script as `pacer` and
/// `pacer_ro`: docs/redis.md, "Loading").
pub fn function_library(source: &str, name: &str) -> String {
    format!(
        "#!lua name={name}\n{}",
        source.replace(REGISTER_LINE, &format!("local FUNCTION_NAME = '{name}'"))
    )
}

/// The test-clock script as a library and its name, computed once. The
/// name carries the source's SHA1, so a server's shipped `pacer` library is
/// never replaced by a test-clock copy, and a changed source is a new name.
fn test_clock_library() -> &'static (String, String) {
    static LIBRARY: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    LIBRARY.get_or_init(|| {
        let (source, sha) = test_clock_script_and_sha();
        let name = format!("pacer_test_clock_{}", &sha[..12]);
        (function_library(source, &name), name)
    })
}

/// The test-clock script and its SHA1 (the `EVALSHA` name), computed once.
fn test_clock_script_and_sha() -> &'static (String, String) {
    static SCRIPT_AND_SHA: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    SCRIPT_AND_SHA.get_or_init(|| {
        let source = test_clock_script();
        let sha = sha1_smol::Sha1::from(source.as_bytes())
            .digest()
            .to_string();
        (source, sha)
    })
}

/// A bucket in Redis, driven with the trace's clock (`AT`): the server
/// must have been started for tests (docs/redis.md).
pub struct RedisEngine {
    con: Connection,
    kind: RedisKind,
    /// The script's SHA1 (`EVALSHA`) or the function's name (`FCALL`).
    entry: String,
    key: String,
    config: [String; 5],
    /// Ticket strings by number (a redeemed booking's number: its
    /// admission's ticket).
    tickets: HashMap<u64, String>,
    /// Booking strings by number.
    bookings: HashMap<u64, String>,
    /// The next ticket's or booking's number.
    next: u64,
    /// Send `INFO` with every operation, in one round trip (for a caller
    /// that reads the state after each step).
    read_back: bool,
    /// The `INFO` reply that came with the last operation, and its clock.
    stashed_info: Option<(u64, redis::Value)>,
}

fn config_args(config: &Config) -> [String; 5] {
    [
        config.rate_per_min.to_string(),
        config.burst.to_string(),
        config.idle_timeout_ms.to_string(),
        config.max_retries.to_string(),
        config.release_policy.name().into(),
    ]
}

/// The server's answer to a ticket or booking already spent.
const SPENT: &str = "ERR pacer: ticket already released";

/// Sends `COMMAND LOAD source` (`SCRIPT` or `FUNCTION`); the server must
/// answer with `expected` (the script's SHA1, the library's name).
fn load(
    con: &mut dyn redis::ConnectionLike,
    command: &str,
    source: &str,
    expected: &str,
) -> Result<(), String> {
    let loaded: String = redis::cmd(command)
        .arg("LOAD")
        .arg(source)
        .query(con)
        .map_err(redis_error)?;
    if loaded != expected {
        return Err(format!("{command} LOAD gave {loaded}, expected {expected}"));
    }
    Ok(())
}

fn redis_error(e: redis::RedisError) -> String {
    error_text(&e)
}

fn int(value: &redis::Value) -> Result<u64, String> {
    match value {
        redis::Value::Int(n) if *n >= 0 => Ok(*n as u64),
        other => Err(format!("expected a whole number, got {other:?}")),
    }
}

fn text(value: &redis::Value) -> Result<String, String> {
    match value {
        redis::Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(s) => Ok(s.clone()),
        other => Err(format!("expected a string, got {other:?}")),
    }
}

fn flag(value: &redis::Value) -> Result<bool, String> {
    Ok(int(value)? != 0)
}

fn path_of(text: &str) -> Result<&'static str, String> {
    ["disabled", "paced", "shaped", "overflow", "booked"]
        .into_iter()
        .find(|p| *p == text)
        .ok_or_else(|| format!("unknown path '{text}'"))
}

impl RedisEngine {
    /// Connects to `url`, loads the script (`Script`) or the library
    /// (`Function`) unless the server has it, and
    /// creates a bucket at a fresh key at `t`.
    pub fn new(url: &Target, kind: RedisKind, config: &Config, t: u64) -> Result<Self, String> {
        let con = url.connect(Duration::from_secs(30))?;
        let mut engine = RedisEngine {
            con,
            kind,
            entry: String::new(),
            key: String::new(),
            config: config_args(config),
            tickets: HashMap::new(),
            bookings: HashMap::new(),
            next: 1,
            read_back: false,
            stashed_info: None,
        };
        if kind == RedisKind::Script {
            // Loaded once per server: SCRIPT EXISTS is cheaper than sending
            // the script's 30 KB again.
            let (source, sha) = test_clock_script_and_sha();
            let exists: Vec<bool> = redis::cmd("SCRIPT")
                .arg("EXISTS")
                .arg(sha)
                .query(&mut *engine.con)
                .map_err(redis_error)?;
            if exists != [true] {
                load(&mut *engine.con, "SCRIPT", source, sha)?;
            }
            engine.entry = sha.clone();
        }
        if kind == RedisKind::Function {
            let (library, name) = test_clock_library();
            let listed: redis::Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .arg("LIBRARYNAME")
                .arg(name)
                .query(&mut *engine.con)
                .map_err(redis_error)?;
            if matches!(&listed, redis::Value::Array(libraries) if libraries.is_empty()) {
                load(&mut *engine.con, "FUNCTION", library, name)?;
            }
            engine.entry = name.clone();
        }
        let serial: u64 = redis::cmd("INCR")
            .arg("pacer:replay:keys")
            .query(&mut *engine.con)
            .map_err(redis_error)?;
        engine.key = format!("pacer:replay:{}:{serial}", std::process::id());
        let args: Vec<String> = engine.config.to_vec();
        let created = engine.call("create", &args, t)?;
        if int(&created)? != 1 {
            return Err(format!("key {} already held a bucket", engine.key));
        }
        Ok(engine)
    }

    /// The key of this engine's bucket.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Sends `INFO` in the same round trip as every operation, so that
    /// [`Engine::state`] right after it (at the same clock) costs nothing.
    pub fn read_back_state(&mut self, on: bool) {
        self.read_back = on;
        self.stashed_info = None;
    }

    fn command(&self, op: &str, args: &[String], t: u64) -> redis::Cmd {
        let mut cmd = match self.kind {
            RedisKind::Module => {
                let mut cmd = redis::cmd(&format!("PACER.{}", op.to_uppercase()));
                cmd.arg(&self.key);
                cmd
            }
            RedisKind::Script => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&self.entry).arg(1).arg(&self.key).arg(op);
                cmd
            }
            RedisKind::Function => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg(&self.entry).arg(1).arg(&self.key).arg(op);
                cmd
            }
        };
        for arg in args {
            cmd.arg(arg);
        }
        cmd.arg("AT").arg(t);
        cmd
    }

    fn call(&mut self, op: &str, args: &[String], t: u64) -> Result<redis::Value, String> {
        let cmd = self.command(op, args, t);
        self.stashed_info = None;
        if !self.read_back || op == "info" {
            return cmd
                .query::<redis::Value>(&mut *self.con)
                .map_err(redis_error);
        }
        let info = self.command("info", &[], t);
        // Each reply on its own: an error reply to the operation is its
        // answer, as it is without the INFO beside it.
        let (reply, info): (redis::Value, redis::Value) = redis::pipe()
            .add_command(cmd)
            .add_command(info)
            .ignore_errors()
            .query(&mut *self.con)
            .map_err(redis_error)?;
        self.stashed_info = Some((t, info));
        match reply {
            redis::Value::ServerError(e) => Err(match e.details() {
                Some(detail) => format!("{} {detail}", e.code()),
                None => e.code().to_string(),
            }),
            reply => Ok(reply),
        }
    }

    /// The next number, for a ticket or booking string the server issued.
    fn number(&mut self, text: String) -> u64 {
        let n = self.next;
        self.next += 1;
        self.tickets.insert(n, text);
        n
    }

    /// The reply as an answer; a ticket in it is numbered anew, or, for
    /// the redemption of booking `redeemed`, takes the booking's number.
    fn answer(&mut self, reply: redis::Value, redeemed: Option<u64>) -> Result<Answer, String> {
        let redis::Value::Array(items) = reply else {
            return Err(format!("expected an array, got {reply:?}"));
        };
        let kind = items.first().map(text).transpose()?.unwrap_or_default();
        let at = |i: usize| items.get(i).ok_or_else(|| format!("short reply {items:?}"));
        match kind.as_str() {
            "admitted" => {
                let ticket = match (at(2)?, redeemed) {
                    (redis::Value::Nil, _) => None,
                    (value, Some(n)) => {
                        self.tickets.insert(n, text(value)?);
                        Some(n)
                    }
                    (value, None) => Some(self.number(text(value)?)),
                };
                Ok(Answer::Admitted {
                    wait_ms: int(at(1)?)?,
                    ticket,
                    path: path_of(&text(at(3)?)?)?,
                    clock_regressed: flag(at(4)?)?,
                })
            }
            "refused" => Ok(Answer::Refused {
                retry_after_s: int(at(1)?)?,
                required_wait_ms: int(at(2)?)?,
                clock_regressed: flag(at(3)?)?,
            }),
            "booked" => {
                let booking = text(at(2)?)?;
                let n = self.number(booking.clone());
                self.bookings.insert(n, booking);
                Ok(Answer::Booked {
                    retry_after_s: int(at(1)?)?,
                    booking: n,
                    slot_ms: int(at(3)?)?,
                    clock_regressed: flag(at(4)?)?,
                })
            }
            "notyet" => Ok(Answer::NotYet {
                retry_after_s: int(at(1)?)?,
            }),
            other => Err(format!("unknown reply '{other}'")),
        }
    }

    /// `PACER.INFO` as name/value pairs.
    pub fn info(&mut self, t: u64) -> Result<HashMap<String, redis::Value>, String> {
        let reply = match self.stashed_info.take() {
            Some((at, reply)) if at == t => reply,
            _ => self.call("info", &[], t)?,
        };
        let redis::Value::Array(items) = reply else {
            return Err(format!("expected an array, got {reply:?}"));
        };
        let mut map = HashMap::new();
        for pair in items.chunks(2) {
            if let [name, value] = pair {
                map.insert(text(name)?, value.clone());
            }
        }
        Ok(map)
    }
}

impl Engine for RedisEngine {
    fn reserve(&mut self, t: u64) -> Result<Answer, String> {
        let args = self.config.to_vec();
        let reply = self.call("reserve", &args, t)?;
        self.answer(reply, None)
    }

    fn book(&mut self, t: u64, retries_left: u32) -> Result<Answer, String> {
        let mut args = self.config.to_vec();
        args.push(retries_left.to_string());
        let reply = self.call("book", &args, t)?;
        self.answer(reply, None)
    }

    fn release(&mut self, ticket: u64, t: u64) -> Result<Answer, String> {
        let Some(text) = self.tickets.get(&ticket).cloned() else {
            return Ok(Answer::Released { refunded: false });
        };
        match self.call("release", &[text], t) {
            Ok(reply) => Ok(Answer::Released {
                refunded: int(&reply)? == 1,
            }),
            Err(e) if e == SPENT => Ok(Answer::Released { refunded: false }),
            Err(e) => Err(e),
        }
    }

    fn redeem(&mut self, booking: u64, t: u64) -> Result<Answer, String> {
        let text = self
            .bookings
            .get(&booking)
            .cloned()
            .ok_or_else(|| no_booking(booking))?;
        match self.call("redeem", &[text], t) {
            Ok(reply) => self.answer(reply, Some(booking)),
            Err(e) if e == SPENT => Err(spent_booking(booking)),
            Err(e) => Err(e),
        }
    }

    fn state(&mut self, t: u64) -> Result<State, String> {
        let info = self.info(t)?;
        let get = |name: &str| -> Result<i64, String> {
            match info.get(name) {
                Some(redis::Value::Int(n)) => Ok(*n),
                other => Err(format!("INFO {name}: {other:?}")),
            }
        };
        Ok(State {
            high_water_ms: get("high_water_ms")? as u64,
            tokens_units: get("tokens_units")?,
            seq: get("seq")? as u32,
        })
    }
}
