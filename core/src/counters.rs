//! Counters of what a pacer decided, kept apart from the pacer so the
//! admission path stays a load and a compare-and-swap: whoever wants them
//! records each decision (one relaxed increment per call).

use crate::pacer::{Admission, AdmitPath, BookingDecision, Decision, Redemption};
use crate::sync::{AtomicU64, Ordering};

/// Live counters, updated with relaxed atomic increments.
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

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
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

    /// Counts one decision of [`crate::Pacer::reserve`].
    pub fn record(&self, decision: &Decision) {
        match decision {
            Decision::Admitted(admission) => self.record_admission(admission),
            Decision::Refused(refusal) => self.record_refusal(refusal.clock_regressed),
        }
    }

    /// Counts one decision of [`crate::Pacer::reserve_or_book`]: a booking
    /// is a refusal on the wire.
    pub fn record_booking(&self, decision: &BookingDecision) {
        match decision {
            BookingDecision::Admitted(admission) => self.record_admission(admission),
            BookingDecision::Booked(booked) => self.record_refusal(booked.clock_regressed),
            BookingDecision::Refused(refusal) => self.record_refusal(refusal.clock_regressed),
        }
    }

    /// Counts one [`crate::Pacer::redeem`]: not yet is a refusal again.
    pub fn record_redemption(&self, redemption: &Redemption) {
        match redemption {
            Redemption::Admitted(admission) => self.record_admission(admission),
            Redemption::NotYet { .. } => self.record_refusal(false),
        }
    }

    fn record_admission(&self, admission: &Admission) {
        bump(&self.admitted);
        if admission.wait_ms > 0 {
            bump(&self.admitted_after_wait);
        }
        if matches!(admission.path, AdmitPath::Shaped | AdmitPath::Overflow) {
            bump(&self.shaped);
        }
        if admission.clock_regressed {
            bump(&self.clock_regressions);
        }
    }

    fn record_refusal(&self, clock_regressed: bool) {
        bump(&self.refused);
        if clock_regressed {
            bump(&self.clock_regressions);
        }
    }

    /// Counts one [`crate::Pacer::release`] and whether it refunded.
    pub fn record_release(&self, refunded: bool) {
        bump(&self.released);
        if refunded {
            bump(&self.refunded);
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
