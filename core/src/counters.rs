//! Counters of what a pacer decided, kept apart from the pacer so the
//! admission path stays a load and a compare-and-swap: whoever wants them
//! records each decision (one relaxed increment per call, or a plain
//! addition through an exclusive borrow: [`Counters::record_mut`]).

use crate::sync::{AtomicU64, Ordering};
use crate::types::{Admission, AdmitPath, BookingDecision, Decision, Redemption};

/// Live counters, updated with relaxed atomic increments (plain additions
/// through `&mut`).
#[derive(Debug, Default)]
pub struct Counters {
    admitted: AtomicU64,
    admitted_after_wait: AtomicU64,
    refused: AtomicU64,
    shaped: AtomicU64,
    released: AtomicU64,
    refunded: AtomicU64,
    clock_regressions: AtomicU64,
}

/// A copy of the counters at one moment (each field read independently).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct CounterSnapshot {
    /// Admissions, immediate or after a wait, by any path.
    pub admitted: u64,
    /// Admissions with a wait greater than 0.
    pub admitted_after_wait: u64,
    /// Refusals.
    pub refused: u64,
    /// Admissions by the shaping rule (debited to the floor, or past it).
    pub shaped: u64,
    /// Release calls on a ticket.
    pub released: u64,
    /// Releases the policy refunded.
    pub refunded: u64,
    /// Calls whose clock reading was behind the high-water mark.
    pub clock_regressions: u64,
}

/// One of the [`Counters`].
#[derive(Clone, Copy)]
enum Tally {
    Admitted,
    AdmittedAfterWait,
    Refused,
    Shaped,
    Released,
    Refunded,
    ClockRegressions,
}

/// The counters one admission adds one to: `add` is called once for each.
/// The one place that says which counters a decision moves; the shared
/// ([`Counters::record`]) and the exclusive ([`Counters::record_mut`])
/// recordings differ only in how they add.
#[inline(always)]
fn tally_admission(admission: &Admission, add: &mut impl FnMut(Tally)) {
    add(Tally::Admitted);
    if admission.wait_ms > 0 {
        add(Tally::AdmittedAfterWait);
    }
    if matches!(admission.path, AdmitPath::Shaped | AdmitPath::Overflow) {
        add(Tally::Shaped);
    }
    if admission.clock_regressed {
        add(Tally::ClockRegressions);
    }
}

/// The counters a refusal adds one to.
#[inline(always)]
fn tally_refusal(clock_regressed: bool, add: &mut impl FnMut(Tally)) {
    add(Tally::Refused);
    if clock_regressed {
        add(Tally::ClockRegressions);
    }
}

/// The counters one decision of [`crate::Pacer::reserve`] adds one to.
#[inline(always)]
fn tally_decision(decision: &Decision, add: &mut impl FnMut(Tally)) {
    match decision {
        Decision::Admitted(admission) => tally_admission(admission, add),
        Decision::Refused(refusal) => tally_refusal(refusal.clock_regressed, add),
    }
}

impl Counters {
    /// All zero.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Counters {
            admitted: AtomicU64::new(0),
            admitted_after_wait: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            shaped: AtomicU64::new(0),
            released: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
            clock_regressions: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    fn counter(&self, which: Tally) -> &AtomicU64 {
        match which {
            Tally::Admitted => &self.admitted,
            Tally::AdmittedAfterWait => &self.admitted_after_wait,
            Tally::Refused => &self.refused,
            Tally::Shaped => &self.shaped,
            Tally::Released => &self.released,
            Tally::Refunded => &self.refunded,
            Tally::ClockRegressions => &self.clock_regressions,
        }
    }

    /// Adds one to a counter (a relaxed atomic increment).
    #[inline(always)]
    fn bump(&self, which: Tally) {
        self.counter(which).fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one decision of [`crate::Pacer::reserve`].
    #[inline]
    pub fn record(&self, decision: &Decision) {
        tally_decision(decision, &mut |which| self.bump(which));
    }

    /// [`Counters::record`] through an exclusive borrow: plain additions,
    /// no locked instruction (the counters of a pacer only one thread
    /// reaches; see [`crate::Pacer::reserve_mut`]). Wraps like the atomic
    /// increments.
    #[cfg(not(loom))]
    #[inline]
    pub fn record_mut(&mut self, decision: &Decision) {
        tally_decision(decision, &mut |which| {
            let counter = self.counter_mut(which);
            *counter = counter.wrapping_add(1);
        });
    }

    #[cfg(not(loom))]
    #[inline(always)]
    fn counter_mut(&mut self, which: Tally) -> &mut u64 {
        match which {
            Tally::Admitted => self.admitted.get_mut(),
            Tally::AdmittedAfterWait => self.admitted_after_wait.get_mut(),
            Tally::Refused => self.refused.get_mut(),
            Tally::Shaped => self.shaped.get_mut(),
            Tally::Released => self.released.get_mut(),
            Tally::Refunded => self.refunded.get_mut(),
            Tally::ClockRegressions => self.clock_regressions.get_mut(),
        }
    }

    /// Counts one decision of [`crate::Pacer::reserve_or_book`]: a booking
    /// is a refusal on the wire.
    #[inline]
    pub fn record_booking(&self, decision: &BookingDecision) {
        let add = &mut |which| self.bump(which);
        match decision {
            BookingDecision::Admitted(admission) => tally_admission(admission, add),
            BookingDecision::Booked(booked) => tally_refusal(booked.clock_regressed, add),
            BookingDecision::Refused(refusal) => tally_refusal(refusal.clock_regressed, add),
        }
    }

    /// Counts one [`crate::Pacer::redeem`]: not yet is a refusal again.
    #[inline]
    pub fn record_redemption(&self, redemption: &Redemption) {
        let add = &mut |which| self.bump(which);
        match redemption {
            Redemption::Admitted(admission) => tally_admission(admission, add),
            Redemption::NotYet { .. } => tally_refusal(false, add),
        }
    }

    /// Counts one [`crate::Pacer::release`] and whether it refunded.
    #[inline]
    pub fn record_release(&self, refunded: bool) {
        self.bump(Tally::Released);
        if refunded {
            self.bump(Tally::Refunded);
        }
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CounterSnapshot {
            admitted: read(&self.admitted),
            admitted_after_wait: read(&self.admitted_after_wait),
            refused: read(&self.refused),
            shaped: read(&self.shaped),
            released: read(&self.released),
            refunded: read(&self.refunded),
            clock_regressions: read(&self.clock_regressions),
        }
    }
}
