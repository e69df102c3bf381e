//! A bucket in one Redis string, and the commands on it, with no Redis in
//! sight: arguments in, the reply and the bytes to write out. The format and
//! every message are in docs/redis.md; the decisions are the core's pure
//! transitions ([`Params::reserve`] and friends), never a copy of them.

use pacer_core::budget::{ladder_ceiling, MAX_RATE_PER_MIN};
use pacer_core::{
    Admission, AdmitPath, Booking, BookingDecision, Config, ConfigError, ControlView, Decision,
    Mode, Outcome, Params, Redemption, ReleasePolicy, StateView, Ticket, Transition, MAX_BURST,
    UNITS_PER_TOKEN,
};

/// The header's length (two blocks of 256 bytes); the spent-ticket bitmap
/// follows it.
pub const HEADER_LEN: usize = 512;
/// Tickets remembered in the bitmap: older ones are expired.
pub const RING: u64 = 65536;
/// Every number a command takes is below this (exact in Lua's doubles).
pub const LIMIT: u64 = 1 << 52;
const MAGIC: &[u8] = b"PACER2 ";
/// Key format 1's magic: such a key is refused (docs/redis.md "The key").
const FORMAT_1_MAGIC: &[u8] = b"PACER1";

/// (name, offset, width) of each header field, docs/redis.md "The key".
const RATE: (usize, usize) = (7, 3);
const BURST: (usize, usize) = (11, 7);
const IDLE: (usize, usize) = (19, 16);
const RETRIES: (usize, usize) = (36, 2);
const POLICY: (usize, usize) = (39, 1);
const SECRET: (usize, usize) = (41, 16);
const HIGH_WATER: (usize, usize) = (58, 16);
const TOKENS: (usize, usize) = (75, 13);
const SEQ: (usize, usize) = (89, 8);
const SERIAL: (usize, usize) = (98, 16);
const COUNTERS: [(usize, usize); 5] = [(115, 16), (132, 16), (149, 16), (166, 16), (183, 16)];
const ADMITTED: usize = 0;
const REFUSED: usize = 1;
const BOOKED: usize = 2;
const RELEASED: usize = 3;
const RELEASE_REFUSED: usize = 4;
const FIELDS_END: usize = 199;
/// An adaptive bucket's fields (SPEC §14), in bytes 199–255 that a
/// fixed-rate bucket leaves spaces: its range, then its control word.
const FLOOR: (usize, usize) = (200, 3);
const CEILING: (usize, usize) = (204, 3);
const ORIGIN: (usize, usize) = (208, 16);
const WINDOW: (usize, usize) = (225, 5);
const OPENED: (usize, usize) = (231, 5);
const OPENED_BEFORE: (usize, usize) = (237, 5);
const LIMIT_PER_MIN: (usize, usize) = (243, 5);
const PROBING: (usize, usize) = (249, 1);
const AGAIN: (usize, usize) = (251, 1);
const ADAPTIVE_END: usize = 252;
const ADAPTIVE_GAPS: [usize; 9] = [199, 203, 207, 224, 230, 236, 242, 248, 250];
/// The first block's end: the second block (bytes 256–511) follows.
const FIRST_BLOCK_END: usize = 256;
/// The second block's counts, 16 digits each, one space between them from
/// byte 256 (field i at 256 + 17·i): admitted_after_wait, shaped,
/// redeemed, upstream opened, upstream throttled, wait_ms_total, then the
/// wait buckets in `pacer_core::WAIT_BOUNDS_MS`'s order.
pub const MORE_COUNTS: usize = 6 + pacer_core::WAIT_BOUNDS_MS.len();
const AFTER_WAIT: usize = 0;
const SHAPED: usize = 1;
const REDEEMED: usize = 2;
const UPSTREAM_OPENED: usize = 3;
const UPSTREAM_THROTTLED: usize = 4;
const WAIT_MS_TOTAL: usize = 5;
const WAIT_BUCKET: usize = 6;
/// Field i of the second block: (offset, width).
const fn more_field(i: usize) -> (usize, usize) {
    (FIRST_BLOCK_END + 17 * i, 16)
}
/// The byte after the second block's last field: spaces from here to 511.
const MORE_END: usize = FIRST_BLOCK_END + 17 * MORE_COUNTS - 1;

/// A command's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An array of items.
    Array(Vec<Item>),
    /// One integer.
    Int(i64),
}

/// One element of an array reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A bulk string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A nil.
    Nil,
}

/// What a command writes: the header (bytes 0..512), and bits of the
/// bitmap (absolute bit offset, value), in order: at most two (a redemption
/// spends its booking, then issues a ticket).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// The new header, when anything in it changed.
    pub header: Option<[u8; HEADER_LEN]>,
    /// Bits to set or clear, in this order: `SETBIT key offset value`.
    pub bits: Vec<(u64, bool)>,
}

/// A command, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `PACER.CREATE`.
    Create(Config),
    /// `PACER.RESERVE`.
    Reserve(Config),
    /// `PACER.BOOK` with `retries_left`.
    Book(Config, u64),
    /// `PACER.RELEASE` with the ticket text.
    Release(Vec<u8>),
    /// `PACER.REDEEM` with the booking text.
    Redeem(Vec<u8>),
    /// `PACER.INFO`.
    Info,
    /// `PACER.OBSERVE` with the upstream's answer.
    Observe(Outcome),
}

impl Op {
    /// Whether the command may write: all but `PACER.INFO` (a redemption
    /// writes when it admits).
    pub fn writes(&self) -> bool {
        !matches!(self, Op::Info)
    }
}

/// The command names, as the script's `op` argument spells them.
pub const OPS: [&str; 7] = [
    "create", "reserve", "book", "release", "redeem", "info", "observe",
];

/// A parsed call: the command and the caller's clock, if given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// What to do.
    pub op: Op,
    /// `AT <ms>`.
    pub at: Option<u64>,
}

fn err(message: impl core::fmt::Display) -> String {
    format!("ERR pacer: {message}")
}

/// A client's bytes as an error message shows them: printable ASCII as
/// it is, every other byte (and the backslash) as `\xNN`, so a reply stays one
/// line of ASCII whatever a key or argument holds.
fn shown(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A whole number as docs/redis.md allows it: `0` or 1–16 digits without
/// a leading zero, below 2^52.
pub fn number(bytes: &[u8]) -> Option<u64> {
    number_below(bytes, LIMIT)
}

/// A canonical decimal below `limit` (a booking's slot may reach past
/// 2^52: it is a clock reading plus a wait; it stays below 2^53).
fn number_below(bytes: &[u8], limit: u64) -> Option<u64> {
    let canonical = match bytes {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.len() <= 15 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical {
        return None;
    }
    let value = bytes.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    (value < limit).then_some(value)
}

fn argument(name: &str, bytes: &[u8]) -> Result<u64, String> {
    number(bytes).ok_or_else(|| {
        err(format_args!(
            "{name} must be a whole number below 2^52, got '{}'",
            shown(bytes)
        ))
    })
}

fn to_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The configuration from its five arguments and, when given, `ADAPT
/// floor ceiling`'s two: each number checked for form in that order, then
/// the ranges, as [`Params::plan`] checks them.
fn config(args: &[&[u8]], adapt: Option<&[&[u8]]>) -> Result<Config, String> {
    let rate = argument("rate_per_min", args[0])?;
    let burst = argument("burst", args[1])?;
    let idle = argument("idle_timeout_ms", args[2])?;
    let retries = argument("max_retries", args[3])?;
    let release_policy = match args[4] {
        b"refund" => ReleasePolicy::Refund,
        b"strict" => ReleasePolicy::Strict,
        other => {
            return Err(err(format_args!(
                "release_policy must be refund or strict, got '{}'",
                shown(other)
            )))
        }
    };
    let (floor, ceiling) = match adapt {
        Some(range) => (
            argument("adaptive_floor_per_min", range[0])?,
            argument("adaptive_ceiling_per_min", range[1])?,
        ),
        None => (0, 0),
    };
    // Stored and compared in one form: a floor of 0 is a fixed-rate bucket
    // (the ceiling is ignored, as the core ignores it), a ceiling of 0 is
    // the rate.
    let (adaptive_floor_per_min, adaptive_ceiling_per_min) = match (floor, ceiling) {
        (0, _) => (0, 0),
        (floor, 0) => (to_u32(floor), to_u32(rate)),
        (floor, ceiling) => (to_u32(floor), to_u32(ceiling)),
    };
    let config = Config {
        rate_per_min: to_u32(rate),
        burst: if burst == 0 { 1 } else { to_u32(burst) },
        idle_timeout_ms: idle,
        max_retries: to_u32(retries),
        release_policy,
        adaptive_floor_per_min,
        adaptive_ceiling_per_min,
    };
    match Params::plan(&config) {
        Ok(_) => Ok(config),
        Err(ConfigError::RateTooHigh) => Err(err(format_args!(
            "rate_per_min {rate} is above {MAX_RATE_PER_MIN}"
        ))),
        Err(ConfigError::BurstTooLarge) => {
            Err(err(format_args!("burst {burst} is above {MAX_BURST}")))
        }
        Err(ConfigError::RetriesExceedLadder) => Err(err(format_args!(
            "max_retries {retries} is above {}, the most whose backoff ladder fits a {idle} ms idle timeout",
            ladder_ceiling(idle)
        ))),
        Err(ConfigError::AdaptiveRange) => Err(err(format_args!(
            "ADAPT {floor} {ceiling} does not fit rate_per_min {rate}: adaptive pacing needs \
             floor <= rate_per_min <= ceiling <= {MAX_RATE_PER_MIN} (ceiling 0 means rate_per_min)"
        ))),
    }
}

/// Parses `op`'s arguments after the key. `test_clock`: whether `AT` is
/// allowed here. The checks run in one order, which the script keeps too:
/// the arity, the arguments left to right (the configuration's ranges right
/// after its numbers), then `AT`'s word, its number and whether it is
/// allowed.
pub fn parse(op: &str, args: &[&[u8]], test_clock: bool) -> Result<Call, String> {
    let fixed = match op {
        "create" | "reserve" => 5,
        "book" => 6,
        "release" | "redeem" | "observe" => 1,
        "info" => 0,
        other => return Err(err(format_args!("unknown op '{other}'"))),
    };
    let (fixed_args, mut rest) = args.split_at(fixed.min(args.len()));
    // `ADAPT floor ceiling` after an admission's arguments, before `AT`.
    let mut adapt = None;
    if fixed >= 5 && matches!(rest.len(), 3 | 5) && rest[0].eq_ignore_ascii_case(b"ADAPT") {
        adapt = Some(&rest[1..3]);
        rest = &rest[3..];
    }
    if fixed_args.len() != fixed || !matches!(rest.len(), 0 | 2) {
        return Err(err(format_args!("wrong number of arguments for {op}")));
    }
    let op_value = match op {
        "create" => Op::Create(config(fixed_args, adapt)?),
        "reserve" => Op::Reserve(config(fixed_args, adapt)?),
        "book" => {
            let config = config(&fixed_args[..5], adapt)?;
            Op::Book(config, argument("retries_left", fixed_args[5])?)
        }
        "release" => Op::Release(fixed_args[0].to_vec()),
        "redeem" => Op::Redeem(fixed_args[0].to_vec()),
        "observe" => Op::Observe(match fixed_args[0] {
            b"opened" => Outcome::Opened,
            b"throttled" => Outcome::Throttled,
            other => {
                return Err(err(format_args!(
                    "outcome must be opened or throttled, got '{}'",
                    shown(other)
                )))
            }
        }),
        _ => Op::Info,
    };
    let at = match rest {
        [] => None,
        [word, value] => {
            if !word.eq_ignore_ascii_case(b"AT") {
                return Err(err(format_args!("unknown argument '{}'", shown(word))));
            }
            let at = argument("AT", value)?;
            if !test_clock {
                return Err(err("AT needs a server started for tests"));
            }
            Some(at)
        }
        _ => unreachable!("arity checked above"),
    };
    Ok(Call { op: op_value, at })
}

/// A bucket's header, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The configuration it was created with (burst 0 stored as 1).
    pub config: Config,
    /// 16 lowercase hex digits.
    pub secret: [u8; 16],
    /// The core's state.
    pub state: StateView,
    /// The next ticket's serial.
    pub serial: u64,
    /// admitted, refused, booked, released, release_refused.
    pub counters: [u64; 5],
    /// An adaptive bucket's control word (SPEC §14); `None` for a
    /// fixed-rate bucket.
    pub control: Option<ControlView>,
    /// The second block's counts, in [`MORE_COUNTS`]' order.
    pub more: [u64; MORE_COUNTS],
}

/// Writes `value` zero-padded into its field; a value too wide for it (only
/// a hand-edited header can hold one) is written as the field's largest.
fn put(out: &mut [u8; HEADER_LEN], (at, width): (usize, usize), value: u64) {
    let largest = 10u64.saturating_pow(width as u32) - 1;
    // Digits from the right, zeros to the left: no text made on the way
    // (every call writes some forty fields).
    let mut rest = value.min(largest);
    for digit in out[at..at + width].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
}

fn get(bytes: &[u8], (at, width): (usize, usize)) -> Option<u64> {
    let field = &bytes[at..at + width];
    if !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(field.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

impl Header {
    /// The header bytes (docs/redis.md "The key").
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [b' '; HEADER_LEN];
        out[..MAGIC.len()].copy_from_slice(MAGIC);
        let c = &self.config;
        put(&mut out, RATE, u64::from(c.rate_per_min));
        put(&mut out, BURST, u64::from(c.burst));
        put(&mut out, IDLE, c.idle_timeout_ms);
        put(&mut out, RETRIES, u64::from(c.max_retries));
        put(&mut out, POLICY, c.release_policy as u64);
        out[SECRET.0..SECRET.0 + 16].copy_from_slice(&self.secret);
        put(&mut out, HIGH_WATER, self.state.high_water_ms);
        let tokens = self.state.tokens_units;
        out[TOKENS.0] = if tokens < 0 { b'-' } else { b'+' };
        put(
            &mut out,
            (TOKENS.0 + 1, TOKENS.1 - 1),
            tokens.unsigned_abs(),
        );
        put(&mut out, SEQ, u64::from(self.state.seq));
        put(&mut out, SERIAL, self.serial);
        for (field, value) in COUNTERS.iter().zip(self.counters) {
            put(&mut out, *field, value);
        }
        if let Some(control) = &self.control {
            put(&mut out, FLOOR, u64::from(c.adaptive_floor_per_min));
            put(&mut out, CEILING, u64::from(c.adaptive_ceiling_per_min));
            put(&mut out, ORIGIN, control.origin_ms);
            put(&mut out, WINDOW, u64::from(control.window));
            put(&mut out, OPENED, u64::from(control.opened));
            put(&mut out, OPENED_BEFORE, u64::from(control.opened_before));
            put(&mut out, LIMIT_PER_MIN, u64::from(control.limit_per_min));
            put(&mut out, PROBING, u64::from(control.probing));
            put(&mut out, AGAIN, u64::from(control.again));
        }
        for (i, value) in self.more.iter().enumerate() {
            put(&mut out, more_field(i), *value);
        }
        out
    }

    /// The header of a stored value, or `None` when it is not a bucket.
    pub fn decode(bytes: &[u8]) -> Option<Header> {
        if bytes.len() < HEADER_LEN || !bytes.starts_with(MAGIC) {
            return None;
        }
        let release_policy = match get(bytes, POLICY)? {
            0 => ReleasePolicy::Refund,
            1 => ReleasePolicy::Strict,
            _ => return None,
        };
        let adaptive = decode_adaptive(bytes)?;
        let (adaptive_floor_per_min, adaptive_ceiling_per_min) =
            adaptive.map_or((0, 0), |(floor, ceiling, _)| (floor, ceiling));
        let config = Config {
            rate_per_min: u32::try_from(get(bytes, RATE)?).ok()?,
            burst: u32::try_from(get(bytes, BURST)?).ok()?,
            idle_timeout_ms: get(bytes, IDLE)?,
            max_retries: u32::try_from(get(bytes, RETRIES)?).ok()?,
            release_policy,
            adaptive_floor_per_min,
            adaptive_ceiling_per_min,
        };
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&bytes[SECRET.0..SECRET.0 + 16]);
        if !secret
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return None;
        }
        let magnitude = i64::try_from(get(bytes, (TOKENS.0 + 1, TOKENS.1 - 1))?).ok()?;
        let tokens_units = match bytes[TOKENS.0] {
            b'+' => magnitude,
            b'-' => -magnitude,
            _ => return None,
        };
        let mut counters = [0u64; 5];
        for (slot, field) in counters.iter_mut().zip(COUNTERS) {
            *slot = get(bytes, field)?;
        }
        let mut more = [0u64; MORE_COUNTS];
        for (i, slot) in more.iter_mut().enumerate() {
            *slot = get(bytes, more_field(i))?;
        }
        // The second block's gaps and its padding are spaces.
        let more_spaces = (1..MORE_COUNTS)
            .map(|i| more_field(i).0 - 1)
            .chain(MORE_END..HEADER_LEN)
            .all(|i| bytes[i] == b' ');
        if !more_spaces {
            return None;
        }
        let gaps_are_spaces = [
            6, 10, 18, 35, 38, 40, 57, 74, 88, 97, 114, 131, 148, 165, 182,
        ]
        .iter()
        .all(|&i| bytes[i] == b' ');
        if !gaps_are_spaces {
            return None;
        }
        // What no command writes: numbers past 2^52, tokens past capacity.
        let high_water_ms = get(bytes, HIGH_WATER)?;
        let serial = get(bytes, SERIAL)?;
        let params = Params::plan(&config).ok()?;
        let in_range = [config.idle_timeout_ms, high_water_ms, serial]
            .iter()
            .chain(&counters)
            .chain(&more)
            .all(|&n| n < LIMIT);
        if !in_range || config.burst == 0 || tokens_units > params.capacity_units() {
            return None;
        }
        Some(Header {
            config,
            secret,
            state: StateView {
                high_water_ms,
                tokens_units,
                seq: u32::try_from(get(bytes, SEQ)?)
                    .ok()
                    .filter(|s| *s < 1 << 24)?,
            },
            serial,
            counters,
            control: adaptive.map(|(_, _, control)| control),
            more,
        })
    }
}

/// Bytes 199–255 of a stored header: `Some(None)` when they are spaces (a
/// fixed-rate bucket), `Some(Some((floor, ceiling, control)))` when they
/// hold an adaptive bucket's fields in their form and in the ranges the
/// commands write (a floor and a ceiling of at least 1, as the commands
/// store them, [`Params::plan`] checking the rest of the range; the origin
/// below 2^52 + a minute (a pause after a search moves it a minute past a
/// clock below 2^52), the minute and the counts within 16 bits, the limit at most
/// the ceiling, the two flags 0 or 1), `None` for anything else.
#[allow(clippy::type_complexity)]
fn decode_adaptive(bytes: &[u8]) -> Option<Option<(u32, u32, ControlView)>> {
    if bytes[FIELDS_END..FIRST_BLOCK_END]
        .iter()
        .all(|&b| b == b' ')
    {
        return Some(None);
    }
    let spaces = ADAPTIVE_GAPS
        .iter()
        .copied()
        .chain(ADAPTIVE_END..FIRST_BLOCK_END)
        .all(|i| bytes[i] == b' ');
    let floor = u32::try_from(get(bytes, FLOOR)?).ok()?;
    let ceiling = u32::try_from(get(bytes, CEILING)?).ok()?;
    let sixteen = |field| u16::try_from(get(bytes, field)?).ok();
    let flag = |field| match get(bytes, field)? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    };
    let control = ControlView {
        origin_ms: get(bytes, ORIGIN)?,
        window: sixteen(WINDOW)?,
        opened: sixteen(OPENED)?,
        opened_before: sixteen(OPENED_BEFORE)?,
        limit_per_min: sixteen(LIMIT_PER_MIN)?,
        probing: flag(PROBING)?,
        again: flag(AGAIN)?,
    };
    let in_range = floor >= 1
        && ceiling >= 1
        && control.origin_ms < LIMIT + pacer_core::adaptive::WINDOW_MS
        && u32::from(control.limit_per_min) <= ceiling;
    (spaces && in_range).then_some(Some((floor, ceiling, control)))
}

/// `rate_per_min=… burst=… idle_timeout_ms=… max_retries=… release_policy=…`,
/// then `adaptive_floor_per_min=… adaptive_ceiling_per_min=…` for an
/// adaptive configuration.
fn describe(config: &Config) -> String {
    let mut text = format!(
        "rate_per_min={} burst={} idle_timeout_ms={} max_retries={} release_policy={}",
        config.rate_per_min,
        config.burst,
        config.idle_timeout_ms,
        config.max_retries,
        config.release_policy.name()
    );
    if config.adaptive_floor_per_min > 0 {
        text.push_str(&format!(
            " adaptive_floor_per_min={} adaptive_ceiling_per_min={}",
            config.adaptive_floor_per_min, config.adaptive_ceiling_per_min
        ));
    }
    text
}

/// A ticket's fields (docs/redis.md "Tickets").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TicketText {
    /// The bucket's serial for it.
    pub serial: u64,
    /// The core's release stack position.
    pub seq: u32,
    /// Units to refund.
    pub debit_units: u32,
    /// The booking's slot, 0 for a plain ticket.
    pub slot_ms: u64,
}

impl TicketText {
    fn mac(&self, secret: &[u8; 16], key: &[u8]) -> String {
        let mut hasher = sha1_smol::Sha1::new();
        hasher.update(secret);
        hasher.update(b":");
        hasher.update(key);
        hasher.update(
            format!(
                ":{}:{}:{}:{}",
                self.serial, self.seq, self.debit_units, self.slot_ms
            )
            .as_bytes(),
        );
        let mut hex = hasher.digest().to_string();
        hex.truncate(16);
        hex
    }

    /// The ticket string for `key`'s bucket.
    pub fn render(&self, secret: &[u8; 16], key: &[u8]) -> String {
        format!(
            "{}.{}.{}.{}.{}",
            self.serial,
            self.seq,
            self.debit_units,
            self.slot_ms,
            self.mac(secret, key)
        )
    }

    /// The fields and MAC of a ticket string, if well formed.
    pub fn parse(text: &[u8]) -> Option<(TicketText, &[u8])> {
        let mut parts = text.split(|&b| b == b'.');
        let serial = number(parts.next()?)?;
        let seq = number(parts.next()?)?;
        let debit = number(parts.next()?)?;
        let slot = number_below(parts.next()?, 1 << 53)?;
        let mac = parts.next()?;
        let mac_ok = mac.len() == 16 && mac.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if parts.next().is_some() || !mac_ok || seq >= 1 << 24 {
            return None;
        }
        if debit == 0 || debit > UNITS_PER_TOKEN as u64 {
            return None;
        }
        Some((
            TicketText {
                serial,
                seq: seq as u32,
                debit_units: debit as u32,
                slot_ms: slot,
            },
            mac,
        ))
    }
}

/// The bit offset (for `SETBIT`) that marks `serial` released.
pub fn spent_bit(serial: u64) -> u64 {
    (HEADER_LEN as u64) * 8 + serial % RING
}

fn bit_is_set(stored: &[u8], offset: u64) -> bool {
    let byte = (offset / 8) as usize;
    let mask = 0x80u8 >> (offset % 8);
    stored.get(byte).is_some_and(|b| b & mask != 0)
}

/// Where the key stands when a command runs.
pub enum Stored<'a> {
    /// No such key.
    Missing,
    /// A string with these bytes.
    Bytes(&'a [u8]),
}

/// Runs `call` on the bucket at `key` (stored as `stored`) at `now_ms`.
/// `secret` makes a new bucket's secret, called only on creation.
pub fn execute(
    key: &[u8],
    call: &Call,
    stored: Stored<'_>,
    now_ms: u64,
    secret: impl FnOnce() -> [u8; 16],
) -> Result<(Reply, Effect), String> {
    if now_ms >= LIMIT {
        return Err(err("the clock reads 2^52 ms or later"));
    }
    let existing = match stored {
        Stored::Missing => None,
        Stored::Bytes(bytes) if bytes.starts_with(FORMAT_1_MAGIC) => {
            return Err(err(format_args!(
                "key '{}' holds a bucket of key format 1 (PACER1), which this version does \
                 not read; delete the key and it is created again in format 2",
                shown(key)
            )))
        }
        Stored::Bytes(bytes) => Some((
            Header::decode(bytes)
                .ok_or_else(|| err(format_args!("key '{}' is not a pacer bucket", shown(key))))?,
            bytes,
        )),
    };
    let wanted = match &call.op {
        Op::Create(config) | Op::Reserve(config) | Op::Book(config, _) => Some(*config),
        _ => None,
    };
    let created = existing.is_none();
    let (mut header, bytes) = match (existing, wanted) {
        (Some((header, _)), Some(config)) if header.config != config => {
            return Err(err(format_args!(
                "bucket '{}' was created with {}; this call has {}",
                shown(key),
                describe(&header.config),
                describe(&config)
            )))
        }
        (Some((header, bytes)), _) => (header, bytes),
        (None, Some(config)) => {
            let params = Params::plan(&config).map_err(|_| err("invalid config"))?;
            let header = Header {
                config,
                secret: secret(),
                state: params.initial_state(now_ms),
                serial: 0,
                counters: [0; 5],
                control: params.is_adaptive().then(|| params.initial_control(now_ms)),
                more: [0; MORE_COUNTS],
            };
            (header, &[][..])
        }
        (None, None) => {
            return Err(err(format_args!("no bucket at key '{}'", shown(key))));
        }
    };
    let planned = Params::plan(&header.config).map_err(|_| err("invalid config"))?;
    // Every decision on an adaptive bucket is at the rate in force now.
    let params = match &header.control {
        Some(control) => planned.in_force(control, now_ms),
        None => planned,
    };
    let mut effect = Effect::default();
    let reply = match &call.op {
        Op::Create(_) if !created => return Ok((Reply::Int(0), Effect::default())),
        Op::Create(_) => Reply::Int(1),
        Op::Reserve(_) => {
            let step = params.reserve(&header.state, now_ms);
            let answer = match step.answer {
                Decision::Admitted(admission) => {
                    admitted(&mut header, &mut effect, key, admission)?
                }
                Decision::Refused(refusal) => refused(&mut header, refusal),
            };
            settle(&mut header, step.next);
            answer
        }
        Op::Book(_, retries_left) => {
            let retries = to_u32(*retries_left);
            let step = params.reserve_or_book(&header.state, now_ms, retries);
            let answer = match step.answer {
                BookingDecision::Admitted(admission) => {
                    admitted(&mut header, &mut effect, key, admission)?
                }
                BookingDecision::Booked(booked) => {
                    bump(&mut header.counters[BOOKED]);
                    let slot_ms = booked.booking.slot_ms;
                    let (seq, debit) = booked.booking.ticket.into_raw();
                    let text = issue(&mut header, &mut effect, key, seq, debit, slot_ms)?;
                    Reply::Array(vec![
                        Item::Str("booked".into()),
                        Item::Int(booked.retry_after_s as i64),
                        Item::Str(text),
                        Item::Int(slot_ms as i64),
                        Item::Int(i64::from(booked.clock_regressed)),
                    ])
                }
                BookingDecision::Refused(refusal) => refused(&mut header, refusal),
            };
            settle(&mut header, step.next);
            answer
        }
        Op::Release(text) => {
            let ticket = check_ticket(&header, key, bytes, text, false)?;
            let core_ticket = Ticket::from_raw(ticket.seq, ticket.debit_units);
            let step: Transition<bool> = params.release(&header.state, &core_ticket, now_ms);
            bump(
                &mut header.counters[if step.answer {
                    RELEASED
                } else {
                    RELEASE_REFUSED
                }],
            );
            settle(&mut header, step.next);
            effect.bits.push((spent_bit(ticket.serial), true));
            Reply::Int(i64::from(step.answer))
        }
        Op::Redeem(text) => {
            let ticket = check_ticket(&header, key, bytes, text, true)?;
            let booking = Booking {
                ticket: Ticket::from_raw(ticket.seq, ticket.debit_units),
                slot_ms: ticket.slot_ms,
            };
            // As the core's `Pacer::redeem`: the planned bound (a search's
            // bound in force is 0, and a booking made earlier is kept).
            match planned.redeem(booking, now_ms) {
                // Admitted: the booking is spent and the admission gets a
                // ticket of its own (the booking's debit), counted as an
                // admission.
                Redemption::Admitted(admission) => {
                    effect.bits.push((spent_bit(ticket.serial), true));
                    admitted(&mut header, &mut effect, key, admission)?
                }
                Redemption::NotYet { retry_after_s, .. } => {
                    let reply = Reply::Array(vec![
                        Item::Str("notyet".into()),
                        Item::Int(retry_after_s as i64),
                        Item::Str(shown(text)),
                    ]);
                    return Ok((reply, Effect::default()));
                }
            }
        }
        Op::Info => {
            return Ok((info(&header, &params, now_ms), Effect::default()));
        }
        Op::Observe(outcome) => {
            let control = match &header.control {
                Some(control) if planned.mode() != Mode::Disabled => control,
                // Adaptation off (a fixed-rate bucket, or pacing
                // disabled): nothing written, nothing counted.
                _ => {
                    let rate = i64::from(planned.rate_per_min());
                    return Ok((Reply::Int(rate), Effect::default()));
                }
            };
            let step = planned.observe(control, *outcome, now_ms);
            if let Some(next) = step.next {
                header.control = Some(next);
            }
            // Every observation of an adaptive bucket is counted, a
            // throttle within the hold too (it writes its count alone);
            // a fixed-rate bucket's writes nothing (docs/redis.md).
            bump(
                &mut header.more[match outcome {
                    Outcome::Opened => UPSTREAM_OPENED,
                    Outcome::Throttled => UPSTREAM_THROTTLED,
                }],
            );
            Reply::Int(i64::from(step.answer))
        }
    };
    effect.header = Some(header.encode());
    Ok((reply, effect))
}

/// Counts one, saturating at 2^52 − 1: a counter never reaches a value
/// the header's decoding refuses.
fn bump(counter: &mut u64) {
    add(counter, 1);
}

/// Adds `amount`, saturating at 2^52 − 1 like [`bump`].
fn add(counter: &mut u64, amount: u64) {
    *counter = counter.saturating_add(amount).min(LIMIT - 1);
}

/// The second block's counts of one admission, as the core's
/// `Counters` tallies it (core/src/counters.rs, `tally_admission`): a wait
/// above 0 is counted, summed and put in the bucket of the first bound at
/// or above it (none above the last bound); the shaping rule's paths are
/// shaped, a redemption's is redeemed.
fn tally_admission(more: &mut [u64; MORE_COUNTS], admission: &Admission) {
    if admission.wait_ms > 0 {
        bump(&mut more[AFTER_WAIT]);
        add(&mut more[WAIT_MS_TOTAL], admission.wait_ms);
        if let Some(bucket) = pacer_core::WAIT_BOUNDS_MS
            .iter()
            .position(|&bound| admission.wait_ms <= bound)
        {
            bump(&mut more[WAIT_BUCKET + bucket]);
        }
    }
    match admission.path {
        AdmitPath::Shaped | AdmitPath::Overflow => bump(&mut more[SHAPED]),
        AdmitPath::Booked => bump(&mut more[REDEEMED]),
        AdmitPath::Disabled | AdmitPath::Paced => {}
    }
}

/// Stores the transition's state, if it wrote one.
fn settle(header: &mut Header, next: Option<StateView>) {
    if let Some(state) = next {
        header.state = state;
    }
}

/// The error when `header` can issue no more tickets: its next serial is
/// 2^52 − 1, the largest its field holds, so the last ticket (2^52 − 2)
/// is out.
fn serial_left(header: &Header, key: &[u8]) -> Result<(), String> {
    if header.serial < LIMIT - 1 {
        return Ok(());
    }
    Err(err(format_args!(
        "bucket '{}' has issued its last ticket (serial {}); create a new bucket",
        shown(key),
        LIMIT - 2
    )))
}

/// Numbers a debit with the next serial: its ticket string. The serial's
/// bit is cleared when the ring has wrapped onto an older ticket's bit.
fn issue(
    header: &mut Header,
    effect: &mut Effect,
    key: &[u8],
    seq: u32,
    debit_units: u32,
    slot_ms: u64,
) -> Result<String, String> {
    serial_left(header, key)?;
    let serial = header.serial;
    header.serial += 1;
    if serial >= RING {
        effect.bits.push((spent_bit(serial), false));
    }
    Ok(TicketText {
        serial,
        seq,
        debit_units,
        slot_ms,
    }
    .render(&header.secret, key))
}

/// Counts an admission and answers it, issuing its ticket if it has one.
fn admitted(
    header: &mut Header,
    effect: &mut Effect,
    key: &[u8],
    admission: Admission,
) -> Result<Reply, String> {
    bump(&mut header.counters[ADMITTED]);
    tally_admission(&mut header.more, &admission);
    let ticket = match admission.ticket {
        Some(ticket) => {
            let (seq, debit) = ticket.into_raw();
            Item::Str(issue(header, effect, key, seq, debit, 0)?)
        }
        None => Item::Nil,
    };
    Ok(Reply::Array(vec![
        Item::Str("admitted".into()),
        Item::Int(admission.wait_ms as i64),
        ticket,
        Item::Str(admission.path.name().into()),
        Item::Int(i64::from(admission.clock_regressed)),
    ]))
}

/// Counts a refusal and answers it.
fn refused(header: &mut Header, refusal: pacer_core::Refusal) -> Reply {
    bump(&mut header.counters[REFUSED]);
    Reply::Array(vec![
        Item::Str("refused".into()),
        Item::Int(refusal.retry_after_s as i64),
        Item::Int(refusal.required_wait_ms as i64),
        Item::Int(i64::from(refusal.clock_regressed)),
    ])
}

/// The checks of docs/redis.md "Tickets", in order.
fn check_ticket(
    header: &Header,
    key: &[u8],
    stored: &[u8],
    text: &[u8],
    booking: bool,
) -> Result<TicketText, String> {
    let (ticket, mac) = TicketText::parse(text)
        .ok_or_else(|| err(format_args!("malformed ticket '{}'", shown(text))))?;
    if ticket.mac(&header.secret, key).as_bytes() != mac || ticket.serial >= header.serial {
        return Err(err("ticket not issued by this bucket"));
    }
    if ticket.serial + RING < header.serial {
        return Err(err("ticket expired"));
    }
    if bit_is_set(stored, spent_bit(ticket.serial)) {
        return Err(err("ticket already released"));
    }
    if booking && ticket.slot_ms == 0 {
        return Err(err("not a booking"));
    }
    Ok(ticket)
}

/// `PACER.INFO`'s pairs; `params` are those in force at `now_ms`.
fn info(header: &Header, params: &Params, now_ms: u64) -> Reply {
    let c = &header.config;
    let s = &header.state;
    let n = |v: u64| Item::Int(v as i64);
    let control = header.control.unwrap_or(ControlView {
        origin_ms: 0,
        window: 0,
        opened: 0,
        opened_before: 0,
        limit_per_min: 0,
        probing: false,
        again: false,
    });
    let m = &header.more;
    let pairs: [(&str, Item); 44] = [
        ("rate_per_min", n(u64::from(c.rate_per_min))),
        ("burst", n(u64::from(c.burst))),
        ("idle_timeout_ms", n(c.idle_timeout_ms)),
        ("max_retries", n(u64::from(c.max_retries))),
        ("release_policy", Item::Str(c.release_policy.name().into())),
        ("mode", Item::Str(params.mode().name().into())),
        ("wait_bound_ms", n(params.wait_bound_ms())),
        ("capacity_units", Item::Int(params.capacity_units())),
        ("max_debt_units", Item::Int(params.max_debt_units())),
        ("high_water_ms", n(s.high_water_ms)),
        ("tokens_units", Item::Int(s.tokens_units)),
        ("level_units", Item::Int(params.level_at(s, now_ms))),
        ("seq", n(u64::from(s.seq))),
        ("serial", n(header.serial)),
        ("admitted", n(header.counters[ADMITTED])),
        ("refused", n(header.counters[REFUSED])),
        ("booked", n(header.counters[BOOKED])),
        ("released", n(header.counters[RELEASED])),
        ("release_refused", n(header.counters[RELEASE_REFUSED])),
        ("now_ms", n(now_ms)),
        ("rate_in_force", n(u64::from(params.rate_per_min()))),
        (
            "adaptive_floor_per_min",
            n(u64::from(c.adaptive_floor_per_min)),
        ),
        (
            "adaptive_ceiling_per_min",
            n(u64::from(c.adaptive_ceiling_per_min)),
        ),
        ("origin_ms", n(control.origin_ms)),
        ("window", n(u64::from(control.window))),
        ("opened", n(u64::from(control.opened))),
        ("opened_before", n(u64::from(control.opened_before))),
        ("limit_per_min", n(u64::from(control.limit_per_min))),
        ("probing", n(u64::from(control.probing))),
        ("again", n(u64::from(control.again))),
        ("admitted_after_wait", n(m[AFTER_WAIT])),
        ("shaped", n(m[SHAPED])),
        ("redeemed", n(m[REDEEMED])),
        ("upstream_opened", n(m[UPSTREAM_OPENED])),
        ("upstream_throttled", n(m[UPSTREAM_THROTTLED])),
        ("wait_ms_total", n(m[WAIT_MS_TOTAL])),
        ("wait_bucket_10", n(m[WAIT_BUCKET])),
        ("wait_bucket_50", n(m[WAIT_BUCKET + 1])),
        ("wait_bucket_100", n(m[WAIT_BUCKET + 2])),
        ("wait_bucket_500", n(m[WAIT_BUCKET + 3])),
        ("wait_bucket_1000", n(m[WAIT_BUCKET + 4])),
        ("wait_bucket_2500", n(m[WAIT_BUCKET + 5])),
        ("wait_bucket_5000", n(m[WAIT_BUCKET + 6])),
        ("wait_bucket_10000", n(m[WAIT_BUCKET + 7])),
    ];
    let mut items = Vec::with_capacity(2 * pairs.len());
    for (name, value) in pairs {
        items.push(Item::Str(name.into()));
        items.push(value);
    }
    Reply::Array(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_canonical_decimals_below_2_pow_52() {
        assert_eq!(number(b"0"), Some(0));
        assert_eq!(number(b"4503599627370495"), Some((1 << 52) - 1));
        for bad in [
            &b""[..],
            b"00",
            b"01",
            b"-1",
            b"+1",
            b"1.0",
            b" 1",
            b"4503599627370496",
            b"10000000000000000",
        ] {
            assert_eq!(number(bad), None, "{:?}", shown(bad));
        }
    }

    #[test]
    fn the_header_is_the_documented_bytes() {
        let header = Header {
            config: Config {
                rate_per_min: 60,
                burst: 1,
                idle_timeout_ms: 30_000,
                max_retries: 3,
                release_policy: ReleasePolicy::Strict,
                adaptive_floor_per_min: 0,
                adaptive_ceiling_per_min: 0,
            },
            secret: *b"0123456789abcdef",
            state: StateView {
                high_water_ms: 1_700_000_000_123,
                tokens_units: -120_000,
                seq: 3,
            },
            serial: 3,
            counters: [3, 1, 0, 2, 1],
            control: None,
            more: [
                2,
                1,
                0,
                4,
                5,
                3000,
                0,
                0,
                0,
                0,
                1,
                1,
                0,
                4_503_599_627_370_495,
            ],
        };
        let bytes = header.encode();
        // Written out by hand from docs/redis.md "The key".
        let expected = "PACER2 060 0000001 0000000000030000 03 1 0123456789abcdef \
                        0001700000000123 -000000120000 00000003 0000000000000003 \
                        0000000000000003 0000000000000001 0000000000000000 \
                        0000000000000002 0000000000000001";
        assert_eq!(&bytes[..FIELDS_END], expected.as_bytes());
        assert!(bytes[FIELDS_END..256].iter().all(|&b| b == b' '));
        // The second block, by hand: 14 fields of 16 digits from byte 256,
        // one space between them, spaces from 493 to 511.
        let second = "0000000000000002 0000000000000001 0000000000000000 \
                      0000000000000004 0000000000000005 0000000000003000 \
                      0000000000000000 0000000000000000 0000000000000000 \
                      0000000000000000 0000000000000001 0000000000000001 \
                      0000000000000000 4503599627370495";
        assert_eq!(&bytes[256..493], second.as_bytes());
        assert!(bytes[493..].iter().all(|&b| b == b' '));
        assert_eq!(bytes.len(), 512);
        assert_eq!(Header::decode(&bytes), Some(header.clone()));
        // What no command writes in the second block: each is not a bucket.
        for (at, text) in [
            (256, "x"),                // a letter in a field
            (477, "4503599627370496"), // a count at 2^52
            (272, "0"),                // a digit in a gap
            (476, "x"),                // a letter in the last gap
            (493, "0"),                // a digit in the padding
            (511, "x"),                // a letter at the last byte
        ] {
            let mut spoiled = bytes;
            spoiled[at..at + text.len()].copy_from_slice(text.as_bytes());
            assert_eq!(Header::decode(&spoiled), None, "{text} at {at}");
        }
        assert_eq!(Header::decode(&bytes[..511]), None);
        let mut spoiled = bytes;
        spoiled[75] = b'*';
        assert_eq!(Header::decode(&spoiled), None);
        let mut spoiled = bytes;
        spoiled[200] = b'x';
        assert_eq!(Header::decode(&spoiled), None);
    }

    #[test]
    fn an_adaptive_header_holds_its_range_and_control_word_after_byte_199() {
        let mut config = Config {
            rate_per_min: 60,
            burst: 1,
            idle_timeout_ms: 30_000,
            max_retries: 3,
            release_policy: ReleasePolicy::Refund,
            adaptive_floor_per_min: 10,
            adaptive_ceiling_per_min: 90,
        };
        let header = Header {
            config,
            secret: *b"0123456789abcdef",
            state: StateView {
                high_water_ms: 5,
                tokens_units: 0,
                seq: 1,
            },
            serial: 1,
            counters: [1, 0, 0, 0, 0],
            more: [0; MORE_COUNTS],
            control: Some(ControlView {
                origin_ms: 1_700_000_000_123,
                window: 65_535,
                opened: 1234,
                opened_before: 7,
                limit_per_min: 90,
                probing: true,
                again: false,
            }),
        };
        let bytes = header.encode();
        // Written out by hand from docs/redis.md "The key".
        let tail = " 010 090 0001700000000123 65535 01234 00007 00090 1 0    ";
        assert_eq!(&bytes[FIELDS_END..256], tail.as_bytes());
        assert_eq!(Header::decode(&bytes), Some(header.clone()));
        // The largest origin a command writes: a pause a minute past a
        // throttle at 2^52 − 1, 2^52 + 59999 = 4503599627430495.
        let mut latest = bytes;
        latest[208..224].copy_from_slice(b"4503599627430495");
        assert_eq!(
            Header::decode(&latest)
                .and_then(|h| h.control)
                .map(|c| c.origin_ms),
            Some((1 << 52) + 59_999)
        );
        // What no command writes: each is not a bucket.
        for (at, text) in [
            (200, "000"),              // a floor of 0 with the fields present
            (200, "061"),              // floor above the rate
            (204, "000"),              // ceiling 0 (stored as the rate)
            (204, "059"),              // ceiling below the rate
            (204, "601"),              // ceiling above 600
            (208, "4503599627430496"), // origin at 2^52 + 60000
            (225, "65536"),            // window past u16
            (231, "65536"),            // opened past u16
            (237, "99999"),            // opened_before past u16
            (243, "00091"),            // limit above the ceiling
            (249, "2"),                // probing neither 0 nor 1
            (251, "9"),                // again neither 0 nor 1
            (203, "0"),                // a digit in a gap
            (250, "0"),                // a digit in a gap
            (252, "x"),                // a letter in the padding
            (211, "x"),                // a letter in a field
        ] {
            let mut spoiled = bytes;
            spoiled[at..at + text.len()].copy_from_slice(text.as_bytes());
            assert_eq!(Header::decode(&spoiled), None, "{text} at {at}");
        }
        // The same bucket with the fields gone is a fixed-rate one.
        let mut fixed = bytes;
        fixed[FIELDS_END..256].fill(b' ');
        config.adaptive_floor_per_min = 0;
        config.adaptive_ceiling_per_min = 0;
        let decoded = Header::decode(&fixed).unwrap();
        assert_eq!((decoded.config, decoded.control), (config, None));
    }

    #[test]
    fn adapt_comes_after_the_configuration_and_before_at() {
        let call = |args: &[&str]| {
            let op = if args.get(5) == Some(&"2") {
                "book"
            } else {
                "reserve"
            };
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            parse(op, &args, true)
        };
        let base = ["60", "1", "30000", "3", "refund"];
        let with = |extra: &[&'static str]| {
            let mut v: Vec<&str> = base.to_vec();
            v.extend_from_slice(extra);
            v
        };
        let range = |c: Result<Call, String>| match c.map(|c| c.op) {
            Ok(Op::Reserve(c)) | Ok(Op::Book(c, _)) => {
                Ok((c.adaptive_floor_per_min, c.adaptive_ceiling_per_min))
            }
            other => Err(format!("{other:?}")),
        };
        assert_eq!(range(call(&with(&[]))), Ok((0, 0)));
        assert_eq!(range(call(&with(&["ADAPT", "10", "0"]))), Ok((10, 60)));
        assert_eq!(
            range(call(&with(&["adapt", "10", "90", "AT", "5"]))),
            Ok((10, 90))
        );
        assert_eq!(range(call(&with(&["ADAPT", "0", "0"]))), Ok((0, 0)));
        assert_eq!(range(call(&with(&["ADAPT", "0", "90"]))), Ok((0, 0)));
        assert_eq!(range(call(&with(&["ADAPT", "60", "60"]))), Ok((60, 60)));
        let mut book = with(&["2", "ADAPT", "10", "0", "AT", "5"]);
        assert_eq!(range(call(&book)), Ok((10, 60)));
        book.truncate(7);
        assert!(call(&book).is_err(), "ADAPT without its ceiling");
        let range_error = "ERR pacer: ADAPT 61 0 does not fit rate_per_min 60: adaptive pacing \
                           needs floor <= rate_per_min <= ceiling <= 600 (ceiling 0 means \
                           rate_per_min)";
        assert_eq!(call(&with(&["ADAPT", "61", "0"])), Err(range_error.into()));
        for (extra, message) in [
            (&["ADAPT", "10"][..], "unknown argument 'ADAPT'"),
            (
                &["AT", "5", "ADAPT", "10", "0"],
                "wrong number of arguments for reserve",
            ),
            (
                &["ADAPT", "x", "0"],
                "adaptive_floor_per_min must be a whole number below 2^52, got 'x'",
            ),
            (
                &["ADAPT", "10", "-1"],
                "adaptive_ceiling_per_min must be a whole number below 2^52, got '-1'",
            ),
        ] {
            assert_eq!(
                call(&with(extra)),
                Err(format!("ERR pacer: {message}")),
                "{extra:?}"
            );
        }
    }

    #[test]
    fn tickets_parse_only_in_their_one_form() {
        let (t, mac) = TicketText::parse(b"7.3.60000.1500.0123456789abcdef").unwrap();
        assert_eq!(
            t,
            TicketText {
                serial: 7,
                seq: 3,
                debit_units: 60000,
                slot_ms: 1500
            }
        );
        assert_eq!(mac, b"0123456789abcdef");
        for bad in [
            &b"7.3.60000.1500"[..],
            b"7.3.60001.0.0123456789abcdef",
            b"7.3.0.0.0123456789abcdef",
            b"7.16777216.1.0.0123456789abcdef",
            b"7.3.1.0.0123456789ABCDEF",
            b"7.3.1.0.0123456789abcde",
            b"7.3.1.0.0123456789abcdef.",
            b"07.3.1.0.0123456789abcdef",
        ] {
            assert_eq!(TicketText::parse(bad), None, "{:?}", shown(bad));
        }
    }

    /// Runs `calls` (op, arguments) on one key, in memory, applying each
    /// effect as the module does: the final key's bytes and the replies.
    fn run_calls(
        key: &[u8],
        start: Vec<u8>,
        calls: &[(&str, &[&str])],
    ) -> (Vec<u8>, Vec<Result<Reply, String>>) {
        let mut stored: Option<Vec<u8>> = (!start.is_empty()).then_some(start);
        let mut replies = Vec::new();
        for (op, args) in calls {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let call = parse(op, &args, true).unwrap();
            let now = call.at.unwrap();
            let at = match &stored {
                Some(bytes) => Stored::Bytes(bytes),
                None => Stored::Missing,
            };
            match execute(key, &call, at, now, || *b"0123456789abcdef") {
                Ok((reply, effect)) => {
                    let mut bytes = stored.take().unwrap_or_default();
                    if let Some(header) = effect.header {
                        if bytes.len() < HEADER_LEN {
                            bytes.resize(HEADER_LEN, 0);
                        }
                        bytes[..HEADER_LEN].copy_from_slice(&header);
                    }
                    for (offset, value) in effect.bits {
                        let byte = (offset / 8) as usize;
                        if byte >= bytes.len() {
                            bytes.resize(byte + 1, 0);
                        }
                        let mask = 0x80u8 >> (offset % 8);
                        if value {
                            bytes[byte] |= mask;
                        } else {
                            bytes[byte] &= !mask;
                        }
                    }
                    stored = (!bytes.is_empty()).then_some(bytes);
                    replies.push(Ok(reply));
                }
                Err(e) => replies.push(Err(e)),
            }
        }
        (stored.unwrap_or_default(), replies)
    }

    #[test]
    fn admissions_and_observations_move_the_second_block_by_hand() {
        // Rate 60 (60 units a ms), burst 2, idle 120000 and 5 retries
        // (bound ⌊(120000 − 62000)/12⌋ = 4833 ms), adaptive 1–60 so that
        // OBSERVE writes and the rate stays 60. Created at 0 by an admission
        // with no wait; a minute later (a search grants no waits in its
        // first minute: adaptive::SEARCH_NO_WAITS_MS) the level is back at
        // the burst: two admissions with no wait, the third waits
        // 60000/60 = 1000 ms, the fourth 120000/60 = 2000 ms. Then an
        // opening and a throttle (a search's throttle: not within a hold).
        let created = [
            "60", "2", "120000", "5", "refund", "ADAPT", "1", "60", "AT", "0",
        ];
        let config = [
            "60", "2", "120000", "5", "refund", "ADAPT", "1", "60", "AT", "60000",
        ];
        let reserve: (&str, &[&str]) = ("reserve", &config);
        let calls = [
            ("reserve", &created[..]),
            reserve,
            reserve,
            reserve,
            reserve,
            ("observe", &["opened", "AT", "60000"][..]),
            ("observe", &["throttled", "AT", "60000"][..]),
        ];
        let (bytes, replies) = run_calls(b"k", Vec::new(), &calls);
        let waits: Vec<i64> = replies[..5]
            .iter()
            .map(|r| match r {
                Ok(Reply::Array(items)) => match items[1] {
                    Item::Int(w) => w,
                    _ => panic!("{items:?}"),
                },
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(waits, [0, 0, 0, 1000, 2000]);
        let header = Header::decode(&bytes).unwrap();
        // Hand-derived: 2 waited, 3000 ms in all, one in (500, 1000], one
        // in (1000, 2500]; nothing shaped or redeemed; 1 opened, 1 throttled.
        assert_eq!(header.counters[ADMITTED], 5);
        assert_eq!(
            header.more,
            [2, 0, 0, 1, 1, 3000, 0, 0, 0, 0, 1, 1, 0, 0],
            "admitted_after_wait shaped redeemed opened throttled wait_ms_total buckets"
        );
    }

    #[test]
    fn a_wait_at_a_bound_is_in_that_bucket_and_counts_stop_at_2_pow_52_minus_1() {
        let admission = |wait_ms, path| Admission {
            wait_ms,
            ticket: None,
            path,
            clock_regressed: false,
        };
        let mut more = [0u64; MORE_COUNTS];
        // By hand: 10 → bucket 0, 11 → 1, 10000 → 7, 10001 → none, 0 → none.
        for wait in [10, 11, 10_000, 10_001, 0] {
            tally_admission(&mut more, &admission(wait, AdmitPath::Paced));
        }
        assert_eq!(more[AFTER_WAIT], 4);
        assert_eq!(more[WAIT_MS_TOTAL], 10 + 11 + 10_000 + 10_001);
        assert_eq!(&more[WAIT_BUCKET..], &[1, 1, 0, 0, 0, 0, 0, 1]);
        tally_admission(&mut more, &admission(0, AdmitPath::Overflow));
        tally_admission(&mut more, &admission(4833, AdmitPath::Shaped));
        tally_admission(&mut more, &admission(0, AdmitPath::Booked));
        assert_eq!((more[SHAPED], more[REDEEMED]), (2, 1));
        let mut full = [LIMIT - 1; MORE_COUNTS];
        tally_admission(&mut full, &admission(10, AdmitPath::Shaped));
        assert_eq!(full, [LIMIT - 1; MORE_COUNTS]);
    }

    #[test]
    fn a_format_1_key_is_refused_by_every_command() {
        let mut old = format!("{:<256}", "PACER1 060").into_bytes();
        old.push(0);
        let message = "ERR pacer: key 'k' holds a bucket of key format 1 (PACER1), which this \
                       version does not read; delete the key and it is created again in format 2";
        for (op, args) in [
            (
                "create",
                &["60", "1", "30000", "3", "refund", "AT", "0"][..],
            ),
            ("reserve", &["60", "1", "30000", "3", "refund", "AT", "0"]),
            ("book", &["60", "1", "30000", "3", "refund", "2", "AT", "0"]),
            ("release", &["0.1.60000.0.0123456789abcdef", "AT", "0"]),
            ("redeem", &["0.1.60000.5.0123456789abcdef", "AT", "0"]),
            ("info", &["AT", "0"]),
            ("observe", &["opened", "AT", "0"]),
        ] {
            let (bytes, replies) = run_calls(b"k", old.clone(), &[(op, args)]);
            assert_eq!(replies, [Err(message.to_string())], "{op}");
            assert_eq!(bytes, old, "{op} wrote");
        }
    }

    #[test]
    fn the_spent_bit_is_setbit_numbering_after_the_header() {
        // The bitmap starts at byte 512: bit 4096.
        assert_eq!(spent_bit(0), 4096);
        assert_eq!(spent_bit(65535), 4096 + 65535);
        assert_eq!(spent_bit(65536), 4096);
        let mut stored = vec![0u8; HEADER_LEN + 1];
        stored[HEADER_LEN] = 0b0100_0000;
        assert!(bit_is_set(&stored, spent_bit(1)));
        assert!(!bit_is_set(&stored, spent_bit(0)));
        assert!(!bit_is_set(&stored, spent_bit(9)));
    }
}
