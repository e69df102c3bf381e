//! The pacer's public types: its configuration, the answers it gives and
//! the state it keeps (SPEC §2–§4, §11). The rule that gives the answers is
//! `rule.rs`; the atomic store that keeps the state is `pacer.rs`.

use crate::budget::{self, Budget};
#[cfg(doc)]
use crate::Pacer;

/// One token, in the pacer's integer units: a millisecond refills
/// `rate_per_min` units, so every refill is an exact integer.
pub const UNITS_PER_TOKEN: i64 = 60_000;
/// The largest burst a pacer holds (the token level is a 40-bit field).
pub const MAX_BURST: u32 = 1_000_000;

pub(crate) const SEQ_BITS: u32 = 24;
pub(crate) const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// What happens to a ticket's debit when it is released. (One byte, so the
/// parameters and the state word share one 64-byte line.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReleasePolicy {
    /// Always refund (capped at capacity). Each refund permits one extra
    /// admission at that instant; the design record's behaviour.
    #[default]
    Refund = 0,
    /// Refund only while every debit made after the ticket has itself been
    /// refunded, so the window bound holds with no cancellation term.
    Strict = 1,
}

/// The pacer's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// New connections per minute, `0..=600`; 0 turns pacing off.
    pub rate_per_min: u32,
    /// Connections admitted with no wait after an idle spell; 0 means 1.
    pub burst: u32,
    /// The request's no-data deadline, ms (sizes the wait bound).
    pub idle_timeout_ms: u64,
    /// The client's retry count, at most the ladder ceiling of the deadline.
    pub max_retries: u32,
    /// What a release refunds.
    pub release_policy: ReleasePolicy,
    /// Adaptive pacing (SPEC §14): the lowest rate the law may lower the
    /// rate in force to, `1..=rate_per_min`; 0 (the default) turns
    /// adaptation off and the rate stays `rate_per_min`.
    pub adaptive_floor_per_min: u32,
    /// The highest rate the law may raise it to, `rate_per_min..=600`; 0
    /// means `rate_per_min`. Ignored when adaptation is off.
    pub adaptive_ceiling_per_min: u32,
}

impl Config {
    /// The defaults of SPEC §2 with the refund policy.
    pub const DEFAULT: Config = Config::from_budget(&Budget::DEFAULT, budget::DEFAULT_BURST);

    /// A config pacing with a resolved budget.
    pub const fn from_budget(budget: &Budget, burst: u32) -> Config {
        Config {
            rate_per_min: budget.rate_per_min,
            burst,
            idle_timeout_ms: budget.idle_timeout_ms,
            max_retries: budget.max_retries,
            release_policy: ReleasePolicy::Refund,
            adaptive_floor_per_min: 0,
            adaptive_ceiling_per_min: 0,
        }
    }

    /// This config with adaptation on between `floor` and `ceiling` (0 =
    /// the configured rate).
    pub const fn adaptive(self, floor: u32, ceiling: u32) -> Config {
        Config {
            adaptive_floor_per_min: floor,
            adaptive_ceiling_per_min: ceiling,
            ..self
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::DEFAULT
    }
}

/// Why a [`Config`] was rejected. Numbers are part of the C ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ConfigError {
    /// `rate_per_min` above 600.
    RateTooHigh = 1,
    /// `burst` above [`MAX_BURST`].
    BurstTooLarge = 2,
    /// `max_retries` above the ladder ceiling of `idle_timeout_ms`: the
    /// retry ladder alone would overrun the deadline.
    RetriesExceedLadder = 3,
    /// Adaptation is on with a floor above the rate, or a ceiling (when
    /// given) below the rate or above 600.
    AdaptiveRange = 4,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::RateTooHigh => "pacer: rate_per_min is above 600",
            Self::BurstTooLarge => "pacer: burst is above 1000000 (MAX_BURST)",
            Self::RetriesExceedLadder => {
                "pacer: max_retries is above what the idle timeout holds (the retry ladder would overrun it)"
            }
            Self::AdaptiveRange => {
                "pacer: adaptive pacing needs 1 <= floor <= rate_per_min <= ceiling <= 600 (ceiling 0 means rate_per_min)"
            }
        })
    }
}

impl core::error::Error for ConfigError {}

/// How a pacer answers a request that cannot be admitted within the bound.
/// (One byte, like [`ReleasePolicy`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Rate 0 or no room to wait: everything is admitted at once.
    Disabled = 0,
    /// Overflow is refused with a retry-after hint.
    Refusing = 1,
    /// Retries cannot outlast the wait for a slot at this rate: overflow is
    /// shaped (waits the bound) down to the debt floor, then admitted.
    ShapingLowRate = 2,
    /// No retries: the same shaping, since nothing would retry a refusal.
    ShapingNoRetry = 3,
}

/// Which rule admitted a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AdmitPath {
    /// Pacing is off; nothing was debited.
    Disabled = 0,
    /// A whole token, now or after a wait within the bound.
    Paced = 1,
    /// Overflow in a shaping mode: debited down to the floor, waits the bound.
    Shaped = 2,
    /// Overflow in a shaping mode with the floor reached: admitted at once,
    /// nothing debited.
    Overflow = 3,
    /// A booking redeemed at (or within the bound before) its slot; its
    /// token was debited when it was booked (SPEC §11).
    Booked = 4,
}

impl AdmitPath {
    /// The path's name in text interfaces: `disabled`, `paced`, `shaped`,
    /// `overflow`, `booked`.
    pub const fn name(self) -> &'static str {
        ["disabled", "paced", "shaped", "overflow", "booked"][self as usize]
    }
}

impl Mode {
    /// The mode's name in text interfaces: `disabled`, `refusing`,
    /// `shaping-low-rate`, `shaping-no-retry`.
    pub const fn name(self) -> &'static str {
        [
            "disabled",
            "refusing",
            "shaping-low-rate",
            "shaping-no-retry",
        ][self as usize]
    }
}

impl ReleasePolicy {
    /// The policy's name in text interfaces: `refund`, `strict`.
    pub const fn name(self) -> &'static str {
        ["refund", "strict"][self as usize]
    }
}

/// The right to a refund of one admission's debit. Not `Clone`: in Rust a
/// ticket is released at most once by construction.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    seq: u32,
    debit_units: u32,
}

impl Ticket {
    /// The debit this ticket refunds, in units (60000 = one token).
    pub const fn debit_units(&self) -> u32 {
        self.debit_units
    }

    /// The ticket's position in the pacer's 24-bit release stack.
    pub const fn seq(&self) -> u32 {
        self.seq
    }

    /// Flattens the ticket for storage across a language boundary.
    pub const fn into_raw(self) -> (u32, u32) {
        (self.seq, self.debit_units)
    }

    /// Rebuilds a ticket from [`Ticket::into_raw`]. The holder answers for
    /// releasing it at most once; a forged ticket can refund at most one
    /// token and never past capacity.
    pub const fn from_raw(seq: u32, debit_units: u32) -> Ticket {
        Ticket { seq, debit_units }
    }
}

/// An admission: wait `wait_ms` (0 = now), then open the connection.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Admission {
    /// How long to wait before opening, ms.
    pub wait_ms: u64,
    /// The refund right, when something was debited.
    pub ticket: Option<Ticket>,
    /// Which rule admitted it.
    pub path: AdmitPath,
    /// `now_ms` was behind the high-water mark (and treated as it).
    pub clock_regressed: bool,
}

impl Admission {
    /// Pacing is off: at once, nothing debited.
    pub(crate) const DISABLED: Admission = Admission {
        wait_ms: 0,
        ticket: None,
        path: AdmitPath::Disabled,
        clock_regressed: false,
    };

    /// Overflow past the floor in a shaping mode: at once, nothing debited.
    pub(crate) const fn overflow(clock_regressed: bool) -> Admission {
        Admission {
            wait_ms: 0,
            ticket: None,
            path: AdmitPath::Overflow,
            clock_regressed,
        }
    }

    /// Whether the caller must wait before opening.
    pub const fn queued(&self) -> bool {
        self.wait_ms > 0
    }
}

/// A refusal: answer the client with a retryable rate limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Refusal {
    /// The wait the rate would have needed, ms (diagnostics).
    pub required_wait_ms: u64,
    /// The hint the client is asked to honour, whole seconds.
    pub retry_after_s: u64,
    /// `now_ms` was behind the high-water mark (and treated as it).
    pub clock_regressed: bool,
}

/// The answer to [`Pacer::reserve`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Open after the wait.
    Admitted(Admission),
    /// Do not open; tell the client to retry.
    Refused(Refusal),
}

/// A place in line (SPEC §11): one token debited at booking time for a
/// connection that may open at `slot_ms`. The holder keys it by its own
/// request identity, presents it with [`Pacer::redeem`] on the request's
/// retry, and releases [`Booking::ticket`] if the request ends without
/// redeeming it. Not `Clone`, like [`Ticket`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Booking {
    /// The refund right for the booked token.
    pub ticket: Ticket,
    /// When the connection may open, ms on the pacer's clock.
    pub slot_ms: u64,
}

/// A refusal that booked a place in line: answer the client with a
/// retryable rate limit carrying `retry_after_s`, and keep the booking for
/// its retry.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Booked {
    /// The place in line.
    pub booking: Booking,
    /// The hint: `clamp(⌈(wait − bound)/1000⌉, 1, hint cap)`, so the retry
    /// lands when the slot is within the bound.
    pub retry_after_s: u64,
    /// `now_ms` was behind the high-water mark (and treated as it).
    pub clock_regressed: bool,
}

/// The answer to [`Pacer::reserve_or_book`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum BookingDecision {
    /// Open after the wait, as [`Decision::Admitted`].
    Admitted(Admission),
    /// Refused now, with a place in line for the retry.
    Booked(Booked),
    /// Refused, nothing debited: the wait is beyond even the horizon the
    /// request's remaining retries could cover.
    Refused(Refusal),
}

/// The answer to [`Pacer::redeem`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum Redemption {
    /// The slot is within the bound: open after `wait_ms` (path
    /// [`AdmitPath::Booked`]); the booking's ticket is the admission's.
    Admitted(Admission),
    /// Still too early: refuse again with `retry_after_s`, keep `booking`.
    NotYet {
        /// The same booking, for the next retry.
        booking: Booking,
        /// `clamp(⌈(slot − bound − now)/1000⌉, 1, hint cap)`.
        retry_after_s: u64,
    },
}

/// A pacer's whole mutable state: what the rule reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateView {
    /// The clock high-water mark, ms.
    pub high_water_ms: u64,
    /// Tokens at the high-water mark, in units (may be negative).
    pub tokens_units: i64,
    /// The strict policy's release stack counter (24 bits).
    pub seq: u32,
}

impl StateView {
    /// The state as its 128-bit word: the high-water mark in the high 64
    /// bits; below it the token level (40-bit two's complement, units)
    /// shifted over the 24-bit release stack counter. This is the encoding
    /// a shared-memory file keeps (docs/shared-memory.md).
    pub const fn pack(self) -> u128 {
        let low = ((self.tokens_units as u64) << SEQ_BITS) | (self.seq as u64 & SEQ_MASK);
        ((self.high_water_ms as u128) << 64) | low as u128
    }

    /// The state a word holds ([`StateView::pack`]'s inverse).
    pub const fn unpack(word: u128) -> StateView {
        let low = word as u64;
        StateView {
            high_water_ms: (word >> 64) as u64,
            tokens_units: (low as i64) >> SEQ_BITS,
            seq: (low & SEQ_MASK) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text names of SPEC §3's modes, §4's paths and the release
    /// policies, as the text interfaces print them.
    #[test]
    fn names_are_the_documented_ones() {
        let modes = [
            Mode::Disabled,
            Mode::Refusing,
            Mode::ShapingLowRate,
            Mode::ShapingNoRetry,
        ];
        let names = modes.map(Mode::name);
        assert_eq!(
            names,
            [
                "disabled",
                "refusing",
                "shaping-low-rate",
                "shaping-no-retry"
            ]
        );
        let paths = [
            AdmitPath::Disabled,
            AdmitPath::Paced,
            AdmitPath::Shaped,
            AdmitPath::Overflow,
            AdmitPath::Booked,
        ];
        assert_eq!(
            paths.map(AdmitPath::name),
            ["disabled", "paced", "shaped", "overflow", "booked"]
        );
        assert_eq!(
            [ReleasePolicy::Refund, ReleasePolicy::Strict].map(ReleasePolicy::name),
            ["refund", "strict"]
        );
    }
}
