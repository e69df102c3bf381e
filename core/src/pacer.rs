//! When is a new connection admitted? The whole rule (SPEC §4–§5).
//!
//! # Units
//! One token is [`UNITS_PER_TOKEN`] = 60000 units, and one millisecond
//! refills `rate_per_min` units, so a refill of `rate/60000` tokens per ms is
//! exact integer arithmetic. The debt floor is `bound_ms · rate` units
//! (`bound · rate/60000` tokens). No floats anywhere.
//!
//! # State
//! One 128-bit atomic word: the high 64 bits are the clock high-water mark
//! (the latest `now_ms` a state change was made at); the low 64 bits hold
//! the token level at that instant (signed, 40 bits, in units) above a
//! 24-bit release stack counter used by the `strict` policy. Every field is
//! in the one word, so a decision is: load, compute, compare-and-swap.
//!
//! # Orderings
//! `Relaxed` is enough: all the state lives in one atomic location, whose
//! modification order is total, and the pacer publishes no other memory.
//! A caller never learns anything from a decision beyond the decision.
//!
//! # Clock
//! A reading behind the high-water mark is treated as the high-water mark:
//! it refills nothing and drains nothing. Refusals and zero-debit
//! admissions only read; everything that writes moves the mark forward.

use crate::adaptive::{self, ControlView, Outcome, Range};
use crate::budget::{self, Budget, MAX_RATE_PER_MIN};
use crate::sync::{AtomicU128, Ordering};

/// One token, in the pacer's integer units (see the module doc).
pub const UNITS_PER_TOKEN: i64 = 60_000;
/// The largest burst a pacer holds (the token level is a 40-bit field).
pub const MAX_BURST: u32 = 1_000_000;

const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

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
        match self {
            AdmitPath::Disabled => "disabled",
            AdmitPath::Paced => "paced",
            AdmitPath::Shaped => "shaped",
            AdmitPath::Overflow => "overflow",
            AdmitPath::Booked => "booked",
        }
    }
}

impl Mode {
    /// The mode's name in text interfaces: `disabled`, `refusing`,
    /// `shaping-low-rate`, `shaping-no-retry`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Disabled => "disabled",
            Mode::Refusing => "refusing",
            Mode::ShapingLowRate => "shaping-low-rate",
            Mode::ShapingNoRetry => "shaping-no-retry",
        }
    }
}

impl ReleasePolicy {
    /// The policy's name in text interfaces: `refund`, `strict`.
    pub const fn name(self) -> &'static str {
        match self {
            ReleasePolicy::Refund => "refund",
            ReleasePolicy::Strict => "strict",
        }
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
    const DISABLED: Admission = Admission {
        wait_ms: 0,
        ticket: None,
        path: AdmitPath::Disabled,
        clock_regressed: false,
    };

    /// Overflow past the floor in a shaping mode: at once, nothing debited.
    const fn overflow(clock_regressed: bool) -> Admission {
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

/// A 128-bit word a pacer swaps: the state word or the control word.
trait Word: Copy {
    fn pack(self) -> u128;
    fn unpack(word: u128) -> Self;
}

impl Word for StateView {
    #[inline(always)]
    fn pack(self) -> u128 {
        StateView::pack(self)
    }
    #[inline(always)]
    fn unpack(word: u128) -> Self {
        StateView::unpack(word)
    }
}

impl Word for ControlView {
    #[inline(always)]
    fn pack(self) -> u128 {
        ControlView::pack(self)
    }
    #[inline(always)]
    fn unpack(word: u128) -> Self {
        ControlView::unpack(word)
    }
}

/// The derived, immutable parameters a pacer decides with, and the rule
/// itself: every decision is a pure function of (params, state, now) —
/// [`Params::reserve`], [`Params::reserve_or_book`], [`Params::release`],
/// [`Params::redeem`] — that returns the state to store and the answer.
/// [`Pacer`] keeps the state in one atomic word and stores it by
/// compare-and-swap; a shared-memory file or a Redis key keeps the same
/// state elsewhere and runs the same functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Refill per ms in units (= new connections per minute, ≤ 600).
    rate: u16,
    /// The client's retry count (at most the ladder ceiling, which is
    /// below 64 for every deadline): sizes the booking horizon.
    max_retries: u16,
    /// `⌈2^64 / rate⌉`, so the wait needs a multiply instead of a divide
    /// (see [`Params::wait_ms`]); 0 when the rate is 0 (never used then).
    rate_reciprocal: u128,
    capacity_units: i64,
    max_debt_units: i64,
    /// The wait bound, ms (at most `WAIT_BOUND_CEILING_MS` = 15000: 16 bits
    /// keep the parameters and the state word in one 64-byte line).
    bound_ms: u16,
    /// The hint every refusal carries: [`budget::hint_cap_s`] of the bound.
    /// A refusal's required wait exceeds the bound, so its wanted hint
    /// `⌈required/1000⌉ ≥ ⌊bound/1000⌋` and [`budget::retry_after_s`]
    /// always returns the cap.
    refusal_hint_s: u16,
    mode: Mode,
    release_policy: ReleasePolicy,
    /// Adaptive pacing's bounds (`floor == 0`: off).
    range: Range,
}

// The bound, the refusal hint, the rate and the retry count are stored in
// 16 bits.
const _: () = assert!(budget::WAIT_BOUND_CEILING_MS <= u16::MAX as u64);
const _: () = assert!(MAX_RATE_PER_MIN <= u16::MAX as u32);
const _: () = assert!(budget::ladder_ceiling(u64::MAX) <= u16::MAX as u32);

/// One decision: the state to store, if any, and the answer. `S` is the
/// state word it is about: [`StateView`], or for
/// [`Params::observe`] the adaptive control word ([`ControlView`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Transition<A, S = StateView> {
    /// The state after the decision; `None` when nothing changes (a
    /// refusal, an admission with nothing debited, a refund the policy
    /// refuses).
    pub next: Option<S>,
    /// What the caller is told.
    pub answer: A,
}

impl<A, S> Transition<A, S> {
    const fn read_only(answer: A) -> Transition<A, S> {
        Transition { next: None, answer }
    }
}

/// What one reservation does at a given token level.
enum Step {
    Debit {
        wait_ms: u64,
        units: i64,
        path: AdmitPath,
    },
    AdmitFree,
    Refuse {
        required_wait_ms: u64,
    },
}

impl Params {
    /// The parameters of `config`, or why it is rejected.
    pub const fn plan(config: &Config) -> Result<Params, ConfigError> {
        if config.rate_per_min > MAX_RATE_PER_MIN {
            return Err(ConfigError::RateTooHigh);
        }
        if config.burst > MAX_BURST {
            return Err(ConfigError::BurstTooLarge);
        }
        if config.max_retries > budget::ladder_ceiling(config.idle_timeout_ms) {
            return Err(ConfigError::RetriesExceedLadder);
        }
        let floor = config.adaptive_floor_per_min;
        let ceiling = if config.adaptive_ceiling_per_min == 0 {
            config.rate_per_min
        } else {
            config.adaptive_ceiling_per_min
        };
        if floor > 0
            && (floor > config.rate_per_min
                || ceiling < config.rate_per_min
                || ceiling > MAX_RATE_PER_MIN)
        {
            return Err(ConfigError::AdaptiveRange);
        }
        let burst = if config.burst == 0 { 1 } else { config.burst };
        let bound_ms = budget::wait_bound_ms(config.idle_timeout_ms, config.max_retries);
        let params = Params {
            rate: 0,
            max_retries: config.max_retries as u16,
            rate_reciprocal: 0,
            capacity_units: burst as i64 * UNITS_PER_TOKEN,
            max_debt_units: 0,
            bound_ms: bound_ms as u16,
            refusal_hint_s: budget::hint_cap_s(bound_ms) as u16,
            mode: Mode::Disabled,
            release_policy: config.release_policy,
            range: Range {
                floor: floor as u16,
                ceiling: if floor == 0 { 0 } else { ceiling as u16 },
                lowest: adaptive::lowest_rate(floor, ceiling, config.max_retries, bound_ms) as u16,
            },
        };
        Ok(params.at_rate(config.rate_per_min))
    }

    /// These parameters at `rate` (≤ 600): the rate and everything SPEC §3
    /// derives from it — the mode, the debt floor, the wait's reciprocal.
    /// The bound and the hint depend on the budget alone. An adaptive
    /// pacer decides with its parameters at the rate in force.
    #[inline]
    pub const fn at_rate(&self, rate: u32) -> Params {
        let bound_ms = self.bound_ms as u64;
        let retries = self.max_retries as u32;
        let mode = if !budget::pacing_enabled(rate, bound_ms) {
            Mode::Disabled
        } else if budget::can_refuse(rate, retries, bound_ms) {
            Mode::Refusing
        } else if retries > 0 {
            Mode::ShapingLowRate
        } else {
            Mode::ShapingNoRetry
        };
        Params {
            rate: rate as u16,
            // ⌈2^64 / rate⌉ = ⌊(2^64 − 1) / rate⌋ + 1 for every rate ≥ 1.
            rate_reciprocal: if rate == 0 {
                0
            } else {
                (u64::MAX / rate as u64) as u128 + 1
            },
            // bound ≤ 15000 and rate ≤ 600: at most 9e6 units.
            max_debt_units: bound_ms as i64 * rate as i64,
            mode,
            ..*self
        }
    }

    /// Whether adaptive pacing is on (SPEC §14).
    pub const fn is_adaptive(&self) -> bool {
        self.range.floor > 0
    }

    /// Whether the rate in force moves: adaptation on and pacing enabled
    /// (a disabled pacer decides nothing a rate could change).
    const fn adapts(&self) -> bool {
        self.is_adaptive() && !matches!(self.mode, Mode::Disabled)
    }

    /// The configured rate (for an adaptive pacer, its starting rate).
    pub const fn rate_per_min(&self) -> u32 {
        self.rate as u32
    }

    /// The adaptive bounds `(floor, ceiling)`, or `None` when adaptation is
    /// off.
    pub const fn adaptive_range(&self) -> Option<(u32, u32)> {
        if self.is_adaptive() {
            Some((self.range.floor as u32, self.range.ceiling as u32))
        } else {
            None
        }
    }

    /// The control word of a pacer created at `now_ms` (SPEC §14):
    /// searching from the configured rate, nothing counted.
    pub const fn initial_control(&self, now_ms: u64) -> ControlView {
        Range::initial(self.rate as u32, now_ms)
    }

    /// The rate in force at `now_ms` under `control`: the configured rate
    /// when adaptation is off (or pacing is, for want of a bound).
    pub fn rate_in_force(&self, control: &ControlView, now_ms: u64) -> u32 {
        if self.adapts() {
            self.range.rate_at(control, now_ms)
        } else {
            self.rate as u32
        }
    }

    /// The parameters in force at `now_ms` under `control` (themselves when
    /// adaptation is off).
    #[inline]
    pub fn in_force(&self, control: &ControlView, now_ms: u64) -> Params {
        if self.adapts() {
            self.at_rate(self.range.rate_at(control, now_ms))
        } else {
            *self
        }
    }

    /// What the upstream answered to a new connection at `now_ms` (SPEC
    /// §14): the control word to store, if it changes, and the rate in
    /// force after it. Adaptation off (or pacing disabled): nothing
    /// changes and the answer is the configured rate.
    pub fn observe(
        &self,
        control: &ControlView,
        outcome: Outcome,
        now_ms: u64,
    ) -> Transition<u32, ControlView> {
        if !self.adapts() {
            return Transition::read_only(self.rate as u32);
        }
        let (next, rate) = self.range.observe(control, outcome, now_ms);
        Transition { next, answer: rate }
    }

    /// The clock reading to act at, and whether `now_ms` was behind.
    fn effective_now(state: &StateView, now_ms: u64) -> (u64, bool) {
        if now_ms < state.high_water_ms {
            (state.high_water_ms, true)
        } else {
            (now_ms, false)
        }
    }

    /// Tokens at `at_ms ≥ high_water_ms`: refilled, capped at capacity.
    fn refill(&self, state: &StateView, at_ms: u64) -> i64 {
        let elapsed_ms = at_ms - state.high_water_ms;
        let gain = elapsed_ms.saturating_mul(self.rate as u64);
        let room = (self.capacity_units - state.tokens_units) as u64;
        if gain >= room {
            self.capacity_units
        } else {
            state.tokens_units + gain as i64
        }
    }

    /// How far ahead a request with `retries_left` retries may book (SPEC
    /// §11): `bound + min(retries_left, max_retries) · hint_cap_s · 1000` ms.
    /// Clamping to the configured retry count keeps the debt within
    /// `horizon_max · rate` units whatever the caller passes.
    fn horizon_ms(&self, retries_left: u32) -> u64 {
        let retries = if retries_left < self.max_retries as u32 {
            retries_left
        } else {
            self.max_retries as u32
        };
        self.bound_ms as u64 + retries as u64 * self.refusal_hint_s as u64 * 1000
    }

    /// The hint for a wait of `wait_ms` beyond the bound:
    /// `clamp(⌈wait_ms/1000⌉, 1, hint_cap_s)`.
    fn booking_hint_s(&self, beyond_bound_ms: u64) -> u64 {
        let wanted = beyond_bound_ms.div_ceil(1000);
        let cap = self.refusal_hint_s as u64;
        if wanted < 1 {
            1
        } else if wanted > cap {
            cap
        } else {
            wanted
        }
    }

    /// `⌈deficit / rate⌉` for `1 ≤ deficit ≤ 2^54`, by one multiply.
    ///
    /// With `M = ⌈2^64 / d⌉`, `M·d = 2^64 + e` for some `0 ≤ e < d`, so
    /// `x·M / 2^64 = x/d + x·e / (d·2^64)` and the floor is `⌊x/d⌋` whenever
    /// `x·e < 2^64` (the extra part then stays below `1/d` and cannot carry
    /// `x mod d ≤ d − 1` past a multiple of `d`). With `d ≤ 600` that holds
    /// for all `x < 2^54`, and a deficit is at most `60000 + 2^39` (the
    /// token field is 40-bit signed). Then `⌈n/d⌉ = ⌊(n − 1)/d⌋ + 1`.
    fn wait_ms(&self, deficit: u64) -> u64 {
        let below = deficit - 1;
        ((below as u128 * self.rate_reciprocal) >> 64) as u64 + 1
    }

    /// SPEC §4 steps 3–6 at token level `tokens` (never below the floor).
    fn decide(&self, tokens: i64) -> Step {
        if tokens >= UNITS_PER_TOKEN {
            return Step::Debit {
                wait_ms: 0,
                units: UNITS_PER_TOKEN,
                path: AdmitPath::Paced,
            };
        }
        let wait_ms = self.wait_ms((UNITS_PER_TOKEN - tokens) as u64);
        if wait_ms <= self.bound_ms as u64 {
            return Step::Debit {
                wait_ms,
                units: UNITS_PER_TOKEN,
                path: AdmitPath::Paced,
            };
        }
        if let Mode::Refusing = self.mode {
            return Step::Refuse {
                required_wait_ms: wait_ms,
            };
        }
        let above_floor = tokens + self.max_debt_units;
        let units = if above_floor < UNITS_PER_TOKEN {
            above_floor
        } else {
            UNITS_PER_TOKEN
        };
        if units > 0 {
            Step::Debit {
                wait_ms: self.bound_ms as u64,
                units,
                path: AdmitPath::Shaped,
            }
        } else {
            Step::AdmitFree
        }
    }
}

/// A lock-free, allocation-free pacer for new connections. Place it where
/// you like (a `static`, the stack, shared memory); every call takes the
/// caller's monotonic clock in ms.
///
/// `repr(C)` with the parameters first and the two words a store shares
/// last — the state word, then the adaptive control word — so a store that
/// shares only them (docs/shared-memory.md) finds every other byte of the
/// pacer on one side, whatever the compiler. The parameters and the state
/// word fill the first 64 bytes, the line a fixed-rate decision touches;
/// the control word, read only by an adaptive pacer, lies past it.
#[derive(Debug)]
#[repr(C)]
pub struct Pacer {
    params: Params,
    state: AtomicU128,
    /// The adaptive controller (SPEC §14); never written when adaptation
    /// is off.
    control: AtomicU128,
}

/// Where the shared words begin in a [`Pacer`]: after the parameters; the
/// state word, then the control word, and nothing follows (`repr(C)`;
/// checked below).
#[cfg(not(loom))]
pub const SHARED_OFFSET: usize = core::mem::offset_of!(Pacer, state);
/// Where the state word lies in a [`Pacer`]: the start of the shared words.
#[cfg(not(loom))]
pub const STATE_OFFSET: usize = core::mem::offset_of!(Pacer, state);
/// Where the adaptive control word lies in a [`Pacer`]: the last 16 bytes.
#[cfg(not(loom))]
pub const CONTROL_OFFSET: usize = core::mem::offset_of!(Pacer, control);

#[cfg(not(loom))]
const _: () = assert!(STATE_OFFSET + 16 == CONTROL_OFFSET);
#[cfg(not(loom))]
const _: () = assert!(CONTROL_OFFSET + 16 == core::mem::size_of::<Pacer>());
#[cfg(not(loom))]
const _: () = assert!(SHARED_OFFSET % 16 == 0);
// The parameters and the state word: one 64-byte line.
#[cfg(not(loom))]
const _: () = assert!(STATE_OFFSET + 16 <= 64);

impl Pacer {
    /// A pacer created full (burst tokens available) at `now_ms`.
    #[cfg(not(loom))]
    pub const fn new(config: &Config, now_ms: u64) -> Result<Pacer, ConfigError> {
        match Params::plan(config) {
            Ok(params) => Ok(Pacer {
                params,
                state: AtomicU128::new(Self::initial(&params, now_ms)),
                control: AtomicU128::new(params.initial_control(now_ms).pack()),
            }),
            Err(error) => Err(error),
        }
    }

    /// A pacer created full (burst tokens available) at `now_ms`.
    #[cfg(loom)]
    pub fn new(config: &Config, now_ms: u64) -> Result<Pacer, ConfigError> {
        let params = Params::plan(config)?;
        Ok(Pacer {
            params,
            state: AtomicU128::new(Self::initial(&params, now_ms)),
            control: AtomicU128::new(params.initial_control(now_ms).pack()),
        })
    }

    const fn initial(params: &Params, now_ms: u64) -> u128 {
        params.initial_state(now_ms).pack()
    }

    /// Whether 128-bit atomics are native here (no lock anywhere). A pacer
    /// in memory shared between processes needs this.
    pub fn is_lock_free() -> bool {
        AtomicU128::is_lock_free()
    }

    /// How this pacer answers overflow.
    pub const fn mode(&self) -> Mode {
        self.params.mode
    }

    /// The longest wait it grants, ms.
    pub const fn wait_bound_ms(&self) -> u64 {
        self.params.bound_ms as u64
    }

    /// The debt floor, in units.
    pub const fn max_debt_units(&self) -> i64 {
        self.params.max_debt_units
    }

    /// The capacity (burst), in units.
    pub const fn capacity_units(&self) -> i64 {
        self.params.capacity_units
    }

    /// The release policy.
    pub const fn release_policy(&self) -> ReleasePolicy {
        self.params.release_policy
    }

    /// The current state word, decoded.
    pub fn state(&self) -> StateView {
        StateView::unpack(self.state.load(Ordering::Relaxed))
    }

    /// The parameters this pacer decides with (at the configured rate;
    /// see [`Pacer::params_in_force`]).
    pub const fn params(&self) -> &Params {
        &self.params
    }

    /// The adaptive control word, decoded (SPEC §14).
    pub fn control(&self) -> ControlView {
        ControlView::unpack(self.control.load(Ordering::Relaxed))
    }

    /// The rate in force at `now_ms`: the configured rate unless
    /// adaptation is on.
    pub fn rate_in_force(&self, now_ms: u64) -> u32 {
        self.params.rate_in_force(&self.control(), now_ms)
    }

    /// The parameters in force at `now_ms` (the mode, the debt floor and
    /// the rest at the rate in force).
    pub fn params_in_force(&self, now_ms: u64) -> Params {
        self.params.in_force(&self.control(), now_ms)
    }

    /// Reports what the upstream answered to a new connection at `now_ms`
    /// (SPEC §14; [`Params::observe`]): an opened connection is counted in
    /// its minute (and, while probing past the hold, a count above the
    /// limit learned starts a search again); a throttle ends a search or
    /// lowers the probe's limit to what the counts show got through, or
    /// changes nothing within the hold after the last one. Returns the
    /// rate in force after it. With adaptation off it changes nothing and
    /// returns the configured rate.
    pub fn observe(&self, outcome: Outcome, now_ms: u64) -> u32 {
        Self::swap(&self.control, |control| {
            self.params.observe(control, outcome, now_ms)
        })
    }

    /// Runs one transition against `word` (the state word or the control
    /// word, as `V` decodes it): load, decide, and compare-and-swap the new
    /// value in (again on a lost race); a read-only decision returns
    /// without a store.
    #[inline(always)]
    fn swap<V: Word, A>(word: &AtomicU128, mut decide: impl FnMut(&V) -> Transition<A, V>) -> A {
        let mut current = word.load(Ordering::Relaxed);
        loop {
            let step = decide(&V::unpack(current));
            let Some(next) = step.next else {
                return step.answer;
            };
            match word.compare_exchange_weak(
                current,
                next.pack(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return step.answer,
                Err(actual) => current = actual,
            }
        }
    }

    /// One rule of [`Params`] against the state word, with the parameters
    /// in force: this pacer's own, or, when adaptation is on, those at the
    /// rate in force at `now_ms` (read once, before the loop).
    #[inline(always)]
    fn apply<A>(&self, now_ms: u64, rule: impl Fn(&Params, &StateView) -> Transition<A>) -> A {
        if self.params.is_adaptive() {
            let params = self.params_in_force(now_ms);
            return Self::swap(&self.state, |state| rule(&params, state));
        }
        Self::swap(&self.state, |state| rule(&self.params, state))
    }

    /// Asks to open one new connection at `now_ms` ([`Params::reserve`]).
    #[inline]
    pub fn reserve(&self, now_ms: u64) -> Decision {
        if let Mode::Disabled = self.params.mode {
            return Decision::Admitted(Admission::DISABLED);
        }
        self.apply(now_ms, |params, state| params.reserve(state, now_ms))
    }

    /// [`Pacer::reserve`] through an exclusive borrow, for a pacer only one
    /// thread reaches (one a JavaScript thread owns, say): the same rule
    /// and the same answers, with the state word read and written by plain
    /// loads and stores instead of a compare-and-swap, so no locked
    /// instruction. A pacer others share keeps to [`Pacer::reserve`].
    #[cfg(not(loom))]
    #[inline]
    pub fn reserve_mut(&mut self, now_ms: u64) -> Decision {
        if let Mode::Disabled = self.params.mode {
            return Decision::Admitted(Admission::DISABLED);
        }
        let in_force;
        let params = if self.params.is_adaptive() {
            in_force = self.params_in_force(now_ms);
            &in_force
        } else {
            &self.params
        };
        let word = self.state.get_mut();
        let step = params.reserve(&StateView::unpack(*word), now_ms);
        if let Some(next) = step.next {
            *word = next.pack();
        }
        step.answer
    }

    /// [`Pacer::reserve`], except that a refusal whose wait is within the
    /// horizon of the request's `retries_left` retries books a place in
    /// line (SPEC §11): one token is debited now and the refusal carries a
    /// [`Booking`] for the retry to [`redeem`](Pacer::redeem). Beyond the
    /// horizon it is a plain refusal with nothing debited. Opt-in: a caller
    /// that never calls it gets the §4 behaviour.
    #[inline]
    pub fn reserve_or_book(&self, now_ms: u64, retries_left: u32) -> BookingDecision {
        if let Mode::Disabled = self.params.mode {
            return BookingDecision::Admitted(Admission::DISABLED);
        }
        self.apply(now_ms, |params, state| {
            params.reserve_or_book(state, now_ms, retries_left)
        })
    }

    /// Presents a booking on the request's retry at `now_ms`. Pure: reads
    /// only the pacer's parameters, changes nothing ([`Params::redeem`]).
    #[inline]
    pub fn redeem(&self, booking: Booking, now_ms: u64) -> Redemption {
        self.params.redeem(booking, now_ms)
    }

    /// Gives back an admission's debit (the caller will not open the
    /// connection), capped at capacity. Returns whether the policy allowed
    /// the refund — `true` even when the cap absorbed it; `false`, with
    /// nothing changed, for a refused strict refund or an invalid ticket.
    #[inline]
    pub fn release(&self, ticket: Ticket, now_ms: u64) -> bool {
        self.apply(now_ms, |params, state| {
            params.release(state, &ticket, now_ms)
        })
    }
}

/// The rule: pure transitions over a [`StateView`] (SPEC §4, §5, §11).
impl Params {
    /// The state of a pacer created full (burst tokens) at `now_ms`.
    pub const fn initial_state(&self, now_ms: u64) -> StateView {
        StateView {
            high_water_ms: now_ms,
            tokens_units: self.capacity_units,
            seq: 0,
        }
    }

    /// How these parameters answer overflow.
    pub const fn mode(&self) -> Mode {
        self.mode
    }

    /// The longest wait granted, ms.
    pub const fn wait_bound_ms(&self) -> u64 {
        self.bound_ms as u64
    }

    /// The capacity (burst), in units.
    pub const fn capacity_units(&self) -> i64 {
        self.capacity_units
    }

    /// The debt floor, in units.
    pub const fn max_debt_units(&self) -> i64 {
        self.max_debt_units
    }

    /// The release policy.
    pub const fn release_policy(&self) -> ReleasePolicy {
        self.release_policy
    }

    /// The hint every refusal carries, whole seconds.
    pub const fn refusal_hint_s(&self) -> u64 {
        self.refusal_hint_s as u64
    }

    /// The token level `state` holds at `now_ms`, in units: refilled and
    /// capped at capacity; a reading behind the high-water mark reads the
    /// mark. Read-only (diagnostics).
    pub fn level_at(&self, state: &StateView, now_ms: u64) -> i64 {
        let (at_ms, _) = Params::effective_now(state, now_ms);
        self.refill(state, at_ms)
    }

    /// The state as seen at `now_ms`: the instant to act at, whether
    /// `now_ms` was behind the high-water mark, and the refilled level.
    #[inline(always)]
    fn view(&self, state: &StateView, now_ms: u64) -> (u64, bool, i64) {
        let (at_ms, clock_regressed) = Params::effective_now(state, now_ms);
        (at_ms, clock_regressed, self.refill(state, at_ms))
    }

    /// The state after debiting `units` from `tokens` at `at_ms`, and the
    /// debit's ticket.
    #[inline(always)]
    fn debit(state: &StateView, at_ms: u64, tokens: i64, units: i64) -> (StateView, Ticket) {
        let seq = state.seq.wrapping_add(1) & SEQ_MASK as u32;
        let next = StateView {
            high_water_ms: at_ms,
            tokens_units: tokens - units,
            seq,
        };
        let ticket = Ticket {
            seq,
            debit_units: units as u32,
        };
        (next, ticket)
    }

    /// One request for a new connection at `now_ms` in `state` (SPEC §4).
    #[inline(always)]
    pub fn reserve(&self, state: &StateView, now_ms: u64) -> Transition<Decision> {
        if let Mode::Disabled = self.mode {
            return Transition::read_only(Decision::Admitted(Admission::DISABLED));
        }
        let (at_ms, clock_regressed, tokens) = self.view(state, now_ms);
        let (wait_ms, units, path) = match self.decide(tokens) {
            Step::Refuse { required_wait_ms } => {
                debug_assert_eq!(
                    self.refusal_hint_s as u64,
                    budget::retry_after_s(required_wait_ms, self.bound_ms as u64)
                );
                return Transition::read_only(Decision::Refused(Refusal {
                    required_wait_ms,
                    retry_after_s: self.refusal_hint_s as u64,
                    clock_regressed,
                }));
            }
            Step::AdmitFree => {
                return Transition::read_only(Decision::Admitted(Admission::overflow(
                    clock_regressed,
                )))
            }
            Step::Debit {
                wait_ms,
                units,
                path,
            } => (wait_ms, units, path),
        };
        let (next, ticket) = Params::debit(state, at_ms, tokens, units);
        Transition {
            next: Some(next),
            answer: Decision::Admitted(Admission {
                wait_ms,
                ticket: Some(ticket),
                path,
                clock_regressed,
            }),
        }
    }

    /// [`Params::reserve`], booking a place in line for a refusal within
    /// the horizon of `retries_left` retries (SPEC §11; see
    /// [`Pacer::reserve_or_book`]).
    #[inline(always)]
    pub fn reserve_or_book(
        &self,
        state: &StateView,
        now_ms: u64,
        retries_left: u32,
    ) -> Transition<BookingDecision> {
        if let Mode::Disabled = self.mode {
            return Transition::read_only(BookingDecision::Admitted(Admission::DISABLED));
        }
        let (at_ms, clock_regressed, tokens) = self.view(state, now_ms);
        let (wait_ms, units, path) = match self.decide(tokens) {
            Step::Refuse { required_wait_ms } => {
                if required_wait_ms > self.horizon_ms(retries_left) {
                    return Transition::read_only(BookingDecision::Refused(Refusal {
                        required_wait_ms,
                        retry_after_s: self.refusal_hint_s as u64,
                        clock_regressed,
                    }));
                }
                // A place in line: the token the slot will use.
                (required_wait_ms, UNITS_PER_TOKEN, AdmitPath::Booked)
            }
            Step::AdmitFree => {
                return Transition::read_only(BookingDecision::Admitted(Admission::overflow(
                    clock_regressed,
                )))
            }
            Step::Debit {
                wait_ms,
                units,
                path,
            } => (wait_ms, units, path),
        };
        let (next, ticket) = Params::debit(state, at_ms, tokens, units);
        let answer = if let AdmitPath::Booked = path {
            BookingDecision::Booked(Booked {
                retry_after_s: self.booking_hint_s(wait_ms - self.bound_ms as u64),
                booking: Booking {
                    ticket,
                    slot_ms: at_ms.saturating_add(wait_ms),
                },
                clock_regressed,
            })
        } else {
            BookingDecision::Admitted(Admission {
                wait_ms,
                ticket: Some(ticket),
                path,
                clock_regressed,
            })
        };
        Transition {
            next: Some(next),
            answer,
        }
    }

    /// A booking presented on the request's retry at `now_ms`: pure
    /// arithmetic on the parameters, no state. Admitted after
    /// `max(0, slot − now)` when `slot − now ≤ bound`; otherwise not yet,
    /// with the hint for the next retry and the same booking.
    pub fn redeem(&self, booking: Booking, now_ms: u64) -> Redemption {
        let bound = self.bound_ms as u64;
        if booking.slot_ms <= now_ms.saturating_add(bound) {
            Redemption::Admitted(Admission {
                wait_ms: booking.slot_ms.saturating_sub(now_ms),
                ticket: Some(booking.ticket),
                path: AdmitPath::Booked,
                clock_regressed: false,
            })
        } else {
            let beyond = booking.slot_ms - bound - now_ms;
            Redemption::NotYet {
                retry_after_s: self.booking_hint_s(beyond),
                booking,
            }
        }
    }

    /// A ticket's debit given back at `now_ms`, capped at capacity: `true`
    /// when the policy allowed the refund (even when the cap absorbed it);
    /// `false`, with no state change, for a refused strict refund or an
    /// invalid ticket.
    pub fn release(&self, state: &StateView, ticket: &Ticket, now_ms: u64) -> Transition<bool> {
        let debit = ticket.debit_units as i64;
        if let Mode::Disabled = self.mode {
            return Transition::read_only(false);
        }
        if debit <= 0 || debit > UNITS_PER_TOKEN || ticket.seq as u64 > SEQ_MASK {
            return Transition::read_only(false);
        }
        let strict = matches!(self.release_policy, ReleasePolicy::Strict);
        if strict && state.seq != ticket.seq {
            return Transition::read_only(false);
        }
        let (at_ms, _) = Params::effective_now(state, now_ms);
        let tokens = self.refill(state, at_ms) + debit;
        let next = StateView {
            high_water_ms: at_ms,
            tokens_units: if tokens < self.capacity_units {
                tokens
            } else {
                self.capacity_units
            },
            seq: if strict {
                state.seq.wrapping_sub(1) & SEQ_MASK as u32
            } else {
                state.seq
            },
        };
        Transition {
            next: Some(next),
            answer: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(rate: u32) -> Params {
        Params::plan(&Config {
            rate_per_min: rate,
            ..Config::DEFAULT
        })
        .unwrap()
    }

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

    /// The accessors of an adaptive pacer's parameters: the configured
    /// (starting) rate and the range, `None` with adaptation off.
    #[test]
    fn adaptive_accessors() {
        let config = Config {
            rate_per_min: 30,
            ..Config::DEFAULT
        };
        let on = Params::plan(&config.adaptive(5, 240)).unwrap();
        assert_eq!(
            (on.rate_per_min(), on.adaptive_range()),
            (30, Some((5, 240)))
        );
        let ceiling_default = Params::plan(&config.adaptive(5, 0)).unwrap();
        assert_eq!(ceiling_default.adaptive_range(), Some((5, 30)));
        let off = Params::plan(&config).unwrap();
        assert_eq!((off.rate_per_min(), off.adaptive_range()), (30, None));
    }

    /// The derived quantities at the defaults (SPEC §3, §4): capacity 10
    /// tokens, bound 4833 ms, debt floor 4833 · 60 = 289980 units, hint cap
    /// 4 s; the level refilled 60 units a ms and capped at capacity.
    #[test]
    fn params_report_the_derived_quantities() {
        let p = params(60);
        assert_eq!(p.capacity_units(), 600_000);
        assert_eq!(p.wait_bound_ms(), 4833);
        assert_eq!(p.max_debt_units(), 289_980);
        assert_eq!(p.refusal_hint_s(), 4);
        let empty = StateView {
            high_water_ms: 1000,
            tokens_units: -60_000,
            seq: 0,
        };
        assert_eq!(p.level_at(&empty, 1500), -60_000 + 500 * 60);
        assert_eq!(
            p.level_at(&empty, 500),
            -60_000,
            "a reading behind the mark"
        );
        assert_eq!(p.level_at(&empty, 1_000_000), 600_000, "capped at capacity");
    }

    /// `Params::observe` with adaptation off, or with pacing disabled (a
    /// bound of 0: idle 14001, 3 retries), answers the configured rate and
    /// writes nothing.
    #[test]
    fn observe_without_adaptation_writes_nothing() {
        let control = Params::plan(&Config::DEFAULT).unwrap().initial_control(0);
        let off = Params::plan(&Config::DEFAULT).unwrap();
        let disabled = Params::plan(
            &Config {
                idle_timeout_ms: 14_001,
                max_retries: 3,
                ..Config::DEFAULT
            }
            .adaptive(10, 0),
        )
        .unwrap();
        assert_eq!(disabled.mode(), Mode::Disabled);
        for p in [off, disabled] {
            for outcome in [Outcome::Throttled, Outcome::Opened] {
                let step = p.observe(&control, outcome, 1000);
                assert_eq!((step.next, step.answer), (None, 60));
            }
            assert_eq!(p.rate_in_force(&control, 1000), 60);
            assert_eq!(p.in_force(&control, 1000), p);
        }
    }

    /// The multiply agrees with the division for every rate, at the edges
    /// of the range the state word can reach and at every multiple ± 1.
    #[test]
    fn wait_by_reciprocal_is_the_ceiling_division() {
        let top = UNITS_PER_TOKEN as u64 + (1 << 39);
        for rate in 1..=MAX_RATE_PER_MIN {
            let p = params(rate);
            let d = rate as u64;
            let check = |n: u64| assert_eq!(p.wait_ms(n), n.div_ceil(d), "{n} / {d}");
            for n in (1..=2 * d + 1).chain(top - 2 * d..=top).chain([1 << 54]) {
                check(n);
            }
            for k in 1..=2000u64 {
                let n = k * d * 997;
                check(n);
                check(n + 1);
                check(n - 1);
            }
        }
    }
}
