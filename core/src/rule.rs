//! When is a new connection admitted? The whole rule (SPEC §4–§5, §11,
//! §14), as pure functions of the parameters, a state value and the clock:
//! [`Params::reserve`], [`Params::reserve_or_book`], [`Params::redeem`],
//! [`Params::release`] over the state word ([`StateView`]) and
//! [`Params::observe`] over the adaptive control word ([`ControlView`]).
//! Each returns a [`Transition`]: the state to store, if any, and the
//! answer. The stores keep the state and run these functions: [`Pacer`]
//! (one atomic word, `pacer.rs`), a shared-memory file (the same word in a
//! mapping) and a Redis key (the module, which links this crate).
//!
//! # Units
//! One token is [`UNITS_PER_TOKEN`] = 60000 units, and one millisecond
//! refills `rate_per_min` units, so a refill of `rate/60000` tokens per ms is
//! exact integer arithmetic. The debt floor is `bound_ms · rate` units
//! (`bound · rate/60000` tokens). No floats anywhere.
//!
//! # Clock
//! A reading behind the high-water mark is treated as the high-water mark:
//! it refills nothing and drains nothing. Refusals and zero-debit
//! admissions only read; everything that writes moves the mark forward.
//!
//! # Reading order
//! The parameters and the answer type; planning (a [`Config`] to
//! parameters); the rule; the arithmetic it runs on; the accessors. The
//! proofs of its invariants are in docs/design.md.

use crate::adaptive::{self, ControlView, Outcome, Range};
use crate::budget::{self, MAX_RATE_PER_MIN};
use crate::types::{
    Admission, AdmitPath, Booked, Booking, BookingDecision, Config, ConfigError, Decision, Mode,
    Redemption, Refusal, ReleasePolicy, StateView, Ticket, MAX_BURST, SEQ_MASK, UNITS_PER_TOKEN,
};
#[cfg(doc)]
use crate::Pacer;

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
    pub(crate) const fn read_only(answer: A) -> Transition<A, S> {
        Transition { next: None, answer }
    }
}

/// Planning: a [`Config`] to parameters, and the parameters at a rate.
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

    /// The state of a pacer created full (burst tokens) at `now_ms`.
    pub const fn initial_state(&self, now_ms: u64) -> StateView {
        StateView {
            high_water_ms: now_ms,
            tokens_units: self.capacity_units,
            seq: 0,
        }
    }
}

/// The rule: pure transitions over a [`StateView`] (SPEC §4, §5, §11) and
/// the control word (SPEC §14). Each returns the state to store, if any,
/// and the answer.
impl Params {
    /// One request for a new connection at `now_ms` in `state` (SPEC §4).
    #[inline(always)]
    pub fn reserve(&self, state: &StateView, now_ms: u64) -> Transition<Decision> {
        if let Mode::Disabled = self.mode {
            return Transition::read_only(Decision::Admitted(Admission::DISABLED));
        }
        let (at_ms, clock_regressed, tokens) = self.view(state, now_ms);
        let (wait_ms, units, path) = match self.decide(tokens) {
            Step::Refuse { required_wait_ms } => {
                // (A search's bound in force is 0; its refusals keep the
                // hint of the planned bound.)
                debug_assert!(
                    self.bound_ms == 0
                        || self.refusal_hint_s as u64
                            == budget::retry_after_s(required_wait_ms, self.bound_ms as u64)
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

    /// [`Params::reserve`], except that a refusal whose wait is within the
    /// horizon of `retries_left` retries books a place in line (SPEC §11;
    /// see [`Pacer::reserve_or_book`]): the token the slot will use is
    /// debited now, and the refusal carries the booking.
    #[inline(always)]
    pub fn reserve_or_book(
        &self,
        state: &StateView,
        now_ms: u64,
        retries_left: u32,
    ) -> Transition<BookingDecision> {
        let Transition { next, answer } = self.reserve(state, now_ms);
        let refusal = match answer {
            Decision::Admitted(admission) => {
                return Transition {
                    next,
                    answer: BookingDecision::Admitted(admission),
                }
            }
            Decision::Refused(refusal) => refusal,
        };
        let wait_ms = refusal.required_wait_ms;
        if wait_ms > self.horizon_ms(retries_left) {
            return Transition::read_only(BookingDecision::Refused(refusal));
        }
        let (at_ms, _, tokens) = self.view(state, now_ms);
        let (next, ticket) = Params::debit(state, at_ms, tokens, UNITS_PER_TOKEN);
        Transition {
            next: Some(next),
            answer: BookingDecision::Booked(Booked {
                retry_after_s: self.booking_hint_s(wait_ms - self.bound_ms as u64),
                booking: Booking {
                    ticket,
                    slot_ms: at_ms.saturating_add(wait_ms),
                },
                clock_regressed: refusal.clock_regressed,
            }),
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
        let debit = ticket.debit_units() as i64;
        if let Mode::Disabled = self.mode {
            return Transition::read_only(false);
        }
        if debit <= 0 || debit > UNITS_PER_TOKEN || ticket.seq() as u64 > SEQ_MASK {
            return Transition::read_only(false);
        }
        let strict = matches!(self.release_policy, ReleasePolicy::Strict);
        if strict && state.seq != ticket.seq() {
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

/// The arithmetic the rule runs on.
impl Params {
    /// The clock reading to act at, and whether `now_ms` was behind.
    fn effective_now(state: &StateView, now_ms: u64) -> (u64, bool) {
        if now_ms < state.high_water_ms {
            (state.high_water_ms, true)
        } else {
            (now_ms, false)
        }
    }

    /// The state as seen at `now_ms`: the instant to act at, whether
    /// `now_ms` was behind the high-water mark, and the refilled level.
    #[inline(always)]
    fn view(&self, state: &StateView, now_ms: u64) -> (u64, bool, i64) {
        let (at_ms, clock_regressed) = Params::effective_now(state, now_ms);
        (at_ms, clock_regressed, self.refill(state, at_ms))
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
        let ticket = Ticket::from_raw(seq, units as u32);
        (next, ticket)
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
}

/// Reading the parameters (diagnostics, stores, text interfaces).
impl Params {
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
    ///
    /// In the first minute of a search a refusing pacer grants no waits
    /// (its bound in force is 0, and with it the debt floor; see
    /// [`crate::adaptive::SEARCH_NO_WAITS_MS`]). A request a token does not
    /// cover at once is refused with the usual hint.
    #[inline]
    pub fn in_force(&self, control: &ControlView, now_ms: u64) -> Params {
        if !self.adapts() {
            return *self;
        }
        let params = self.at_rate(self.range.rate_at(control, now_ms));
        match params.mode {
            Mode::Refusing if !crate::adaptive::grants_waits(control, now_ms) => Params {
                bound_ms: 0,
                max_debt_units: 0,
                ..params
            },
            _ => params,
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

    /// In a search's first minute a refusing pacer grants no waits; then,
    /// and probing, it does. At 60/min with the level at 0 the next token is 1000 ms away,
    /// within the default bound (4833 ms, hint cap 4 s).
    #[test]
    fn a_search_grants_no_waits() {
        let config = Config {
            rate_per_min: 60,
            burst: 1,
            ..Config::DEFAULT
        };
        let planned = Params::plan(&config.adaptive(1, 600)).unwrap();
        let empty = StateView {
            high_water_ms: 0,
            tokens_units: 0,
            seq: 0,
        };
        let searching = planned.initial_control(0);
        let search = planned.in_force(&searching, 0);
        assert_eq!((search.wait_bound_ms(), search.max_debt_units()), (0, 0));
        match search.reserve(&empty, 0).answer {
            Decision::Refused(r) => assert_eq!((r.required_wait_ms, r.retry_after_s), (1000, 4)),
            other => panic!("searching: {other:?}"),
        }
        // A minute into the search (rate 600: the next token in 100 ms)
        // the waits are back; a millisecond before, not yet.
        let state = |at: u64| StateView {
            high_water_ms: at,
            ..empty
        };
        let refused = planned
            .in_force(&searching, 59_999)
            .reserve(&state(59_999), 59_999);
        assert!(matches!(refused.answer, Decision::Refused(r) if r.required_wait_ms == 100));
        let minute = planned.in_force(&searching, 60_000);
        assert_eq!(minute.wait_bound_ms(), 4833);
        match minute.reserve(&state(60_000), 60_000).answer {
            Decision::Admitted(a) => assert_eq!(a.wait_ms, 100),
            other => panic!("a minute in: {other:?}"),
        }
        let probing = ControlView {
            probing: true,
            ..searching
        };
        let probe = planned.in_force(&probing, 0);
        assert_eq!(
            (probe.wait_bound_ms(), probe.max_debt_units()),
            (4833, 4833 * 60)
        );
        match probe.reserve(&empty, 0).answer {
            Decision::Admitted(a) => assert_eq!(a.wait_ms, 1000),
            other => panic!("probing: {other:?}"),
        }
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
