//! The atomic store: a [`Pacer`] keeps the rule's state (`rule.rs`) in one
//! 128-bit atomic word, and its adaptive control word in a second, and runs
//! each decision as load, decide, compare-and-swap.
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

use crate::adaptive::{ControlView, Outcome};
use crate::rule::{Params, Transition};
use crate::sync::{AtomicU128, Ordering};
use crate::types::{
    Admission, Booking, BookingDecision, Config, ConfigError, Decision, Mode, Redemption,
    ReleasePolicy, StateView, Ticket,
};

/// A 128-bit word a pacer swaps: the state word or the control word.
trait Word: Copy {
    fn pack(self) -> u128;
    fn unpack(word: u128) -> Self;
}

/// `Word` for the views that already pack and unpack themselves.
macro_rules! word {
    ($($view:ident),*) => {$(
        impl Word for $view {
            #[inline(always)]
            fn pack(self) -> u128 {
                $view::pack(self)
            }
            #[inline(always)]
            fn unpack(word: u128) -> Self {
                $view::unpack(word)
            }
        }
    )*};
}

word!(StateView, ControlView);

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
        self.params.mode()
    }

    /// The longest wait it grants, ms.
    pub const fn wait_bound_ms(&self) -> u64 {
        self.params.wait_bound_ms()
    }

    /// The debt floor, in units.
    pub const fn max_debt_units(&self) -> i64 {
        self.params.max_debt_units()
    }

    /// The capacity (burst), in units.
    pub const fn capacity_units(&self) -> i64 {
        self.params.capacity_units()
    }

    /// The release policy.
    pub const fn release_policy(&self) -> ReleasePolicy {
        self.params.release_policy()
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

    /// The tokens at `now_ms`, in units (60000 a token; negative: debt):
    /// the state refilled at the rate in force, capped at the burst. A
    /// reading behind the high-water mark reads the mark. Reads only.
    pub fn level_at(&self, now_ms: u64) -> i64 {
        self.params_in_force(now_ms).level_at(&self.state(), now_ms)
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
        if let Mode::Disabled = self.params.mode() {
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
        if let Mode::Disabled = self.params.mode() {
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
        if let Mode::Disabled = self.params.mode() {
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
