//! Counters of what a pacer decided, kept apart from the pacer so the
//! admission path stays a load and a compare-and-swap: whoever wants them
//! records each decision (one relaxed increment per immediate admission or
//! refusal, three more for an admission that waits; or plain additions
//! through an exclusive borrow: [`Counters::record_mut`]).
//!
//! They are the source of the metric set (docs/metrics.md): decisions by
//! kind, a histogram of the waits given, releases, and what the upstream
//! answered ([`Counters::record_outcome`]). Their memory is
//! [`COUNTER_WORDS`] 64-bit words in a fixed order (`repr(C)`), so a
//! shared-memory bucket keeps them in its file beside its state word and
//! every process counts into the same ones (docs/shared-memory.md).

use crate::adaptive::Outcome;
use crate::sync::{AtomicU64, Ordering};
use crate::types::{Admission, AdmitPath, BookingDecision, Decision, Redemption};

/// The wait histogram's upper bounds, ms (each bucket counts the waits
/// above the bound before it, up to and including its own; waits above the
/// last bound fall in no bucket: `admitted_after_wait` less the buckets'
/// sum). An immediate admission (wait 0) is in no bucket either: a
/// histogram of every admission's wait adds `admitted − admitted_after_wait`
/// to every bucket ([`CounterSnapshot::wait_le`]).
pub const WAIT_BOUNDS_MS: [u64; 8] = [10, 50, 100, 500, 1000, 2500, 5000, 10000];

/// The counters' memory: this many 64-bit words.
pub const COUNTER_WORDS: usize = 12 + WAIT_BOUNDS_MS.len();

/// Live counters, updated with relaxed atomic increments (plain additions
/// through `&mut`). `repr(C)`: [`COUNTER_WORDS`] words in the order of
/// [`CounterSnapshot::from_words`].
#[derive(Debug, Default)]
#[repr(C)]
pub struct Counters {
    words: [AtomicU64; COUNTER_WORDS],
}

/// A copy of the counters at one moment (each field read independently).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct CounterSnapshot {
    /// Admissions, immediate or after a wait, by any path.
    pub admitted: u64,
    /// Admissions with a wait greater than 0.
    pub admitted_after_wait: u64,
    /// Refusals (a booking and a redemption's "not yet" are refusals too).
    pub refused: u64,
    /// Admissions by the shaping rule (debited to the floor, or past it).
    pub shaped: u64,
    /// Release calls on a ticket.
    pub released: u64,
    /// Releases the policy refunded.
    pub refunded: u64,
    /// Calls whose clock reading was behind the high-water mark.
    pub clock_regressions: u64,
    /// Refusals that booked a place in line.
    pub booked: u64,
    /// Upstream answers reported as opened.
    pub opened: u64,
    /// Upstream answers reported as throttled.
    pub throttled: u64,
    /// The waits of the admissions, summed, ms (wraps like the counts).
    pub wait_ms_total: u64,
    /// Admissions of a booking presented on its retry (`AdmitPath::Booked`).
    pub redeemed: u64,
    /// Admissions whose wait was above the bound before `WAIT_BOUNDS_MS[i]`
    /// (0 for the first) and at most `WAIT_BOUNDS_MS[i]`, wait 0 excluded.
    pub wait_buckets: [u64; WAIT_BOUNDS_MS.len()],
}

/// The word each count lives in.
#[derive(Clone, Copy)]
enum Tally {
    Admitted = 0,
    AdmittedAfterWait = 1,
    Refused = 2,
    Shaped = 3,
    Released = 4,
    Refunded = 5,
    ClockRegressions = 6,
    Booked = 7,
    Opened = 8,
    Throttled = 9,
    WaitMsTotal = 10,
    Redeemed = 11,
}

/// The first wait bucket's word.
const WAIT_BUCKET_WORD: usize = 12;

/// The bucket word of a wait above 0, or `None` above the last bound.
#[inline(always)]
fn wait_word(wait_ms: u64) -> Option<usize> {
    WAIT_BOUNDS_MS
        .iter()
        .position(|&bound| wait_ms <= bound)
        .map(|bucket| WAIT_BUCKET_WORD + bucket)
}

/// The words one admission adds to: `add(word, amount)` is called once for
/// each. The one place that says which counters a decision moves; the
/// shared ([`Counters::record`]) and the exclusive ([`Counters::record_mut`])
/// recordings differ only in how they add.
#[inline(always)]
fn tally_admission(admission: &Admission, add: &mut impl FnMut(usize, u64)) {
    add(Tally::Admitted as usize, 1);
    if admission.wait_ms > 0 {
        add(Tally::AdmittedAfterWait as usize, 1);
        add(Tally::WaitMsTotal as usize, admission.wait_ms);
        if let Some(word) = wait_word(admission.wait_ms) {
            add(word, 1);
        }
    }
    match admission.path {
        AdmitPath::Shaped | AdmitPath::Overflow => add(Tally::Shaped as usize, 1),
        AdmitPath::Booked => add(Tally::Redeemed as usize, 1),
        AdmitPath::Disabled | AdmitPath::Paced => {}
    }
    if admission.clock_regressed {
        add(Tally::ClockRegressions as usize, 1);
    }
}

/// The words a refusal adds one to.
#[inline(always)]
fn tally_refusal(clock_regressed: bool, add: &mut impl FnMut(usize, u64)) {
    add(Tally::Refused as usize, 1);
    if clock_regressed {
        add(Tally::ClockRegressions as usize, 1);
    }
}

/// The words one decision of [`crate::Pacer::reserve`] adds to.
#[inline(always)]
fn tally_decision(decision: &Decision, add: &mut impl FnMut(usize, u64)) {
    match decision {
        Decision::Admitted(admission) => tally_admission(admission, add),
        Decision::Refused(refusal) => tally_refusal(refusal.clock_regressed, add),
    }
}

/// The words one decision of [`crate::Pacer::reserve_or_book`] adds to: a
/// booking is a refusal on the wire, counted as booked too.
#[inline(always)]
fn tally_booking(decision: &BookingDecision, add: &mut impl FnMut(usize, u64)) {
    match decision {
        BookingDecision::Admitted(admission) => tally_admission(admission, add),
        BookingDecision::Booked(booked) => {
            tally_refusal(booked.clock_regressed, add);
            add(Tally::Booked as usize, 1);
        }
        BookingDecision::Refused(refusal) => tally_refusal(refusal.clock_regressed, add),
    }
}

impl Counters {
    /// All zero.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Counters {
            words: [const { AtomicU64::new(0) }; COUNTER_WORDS],
        }
    }

    /// Adds to a word (a relaxed atomic addition, wrapping).
    #[inline(always)]
    fn add(&self, word: usize, amount: u64) {
        self.words[word].fetch_add(amount, Ordering::Relaxed);
    }

    /// Counts one decision of [`crate::Pacer::reserve`].
    #[inline]
    pub fn record(&self, decision: &Decision) {
        tally_decision(decision, &mut |word, amount| self.add(word, amount));
    }

    /// [`Counters::record`] through an exclusive borrow: plain additions,
    /// no locked instruction (the counters of a pacer only one thread
    /// reaches; see [`crate::Pacer::reserve_mut`]). Wraps like the atomic
    /// additions.
    #[cfg(not(loom))]
    #[inline]
    pub fn record_mut(&mut self, decision: &Decision) {
        tally_decision(decision, &mut |word, amount| {
            let counter = self.words[word].get_mut();
            *counter = counter.wrapping_add(amount);
        });
    }

    /// Counts one decision of [`crate::Pacer::reserve_or_book`]: a booking
    /// is a refusal on the wire, and booked.
    #[inline]
    pub fn record_booking(&self, decision: &BookingDecision) {
        tally_booking(decision, &mut |word, amount| self.add(word, amount));
    }

    /// Counts one [`crate::Pacer::redeem`]: not yet is a refusal again.
    #[inline]
    pub fn record_redemption(&self, redemption: &Redemption) {
        let add = &mut |word, amount| self.add(word, amount);
        match redemption {
            Redemption::Admitted(admission) => tally_admission(admission, add),
            Redemption::NotYet { .. } => tally_refusal(false, add),
        }
    }

    /// Counts one [`crate::Pacer::release`] and whether it refunded.
    #[inline]
    pub fn record_release(&self, refunded: bool) {
        self.add(Tally::Released as usize, 1);
        if refunded {
            self.add(Tally::Refunded as usize, 1);
        }
    }

    /// Counts one upstream answer reported to [`crate::Pacer::observe`]
    /// (counted whether adaptation is on or off).
    #[inline]
    pub fn record_outcome(&self, outcome: Outcome) {
        self.add(
            match outcome {
                Outcome::Opened => Tally::Opened,
                Outcome::Throttled => Tally::Throttled,
            } as usize,
            1,
        );
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        let mut words = [0u64; COUNTER_WORDS];
        for (word, counter) in words.iter_mut().zip(self.words.iter()) {
            *word = counter.load(Ordering::Relaxed);
        }
        CounterSnapshot::from_words(&words)
    }
}

impl CounterSnapshot {
    /// The counters from their memory's words, in [`Counters`]' order
    /// (what a shared-memory bucket's file holds, native byte order).
    pub const fn from_words(w: &[u64; COUNTER_WORDS]) -> Self {
        let mut wait_buckets = [0u64; WAIT_BOUNDS_MS.len()];
        let mut i = 0;
        while i < wait_buckets.len() {
            wait_buckets[i] = w[WAIT_BUCKET_WORD + i];
            i += 1;
        }
        CounterSnapshot {
            admitted: w[Tally::Admitted as usize],
            admitted_after_wait: w[Tally::AdmittedAfterWait as usize],
            refused: w[Tally::Refused as usize],
            shaped: w[Tally::Shaped as usize],
            released: w[Tally::Released as usize],
            refunded: w[Tally::Refunded as usize],
            clock_regressions: w[Tally::ClockRegressions as usize],
            booked: w[Tally::Booked as usize],
            opened: w[Tally::Opened as usize],
            throttled: w[Tally::Throttled as usize],
            wait_ms_total: w[Tally::WaitMsTotal as usize],
            redeemed: w[Tally::Redeemed as usize],
            wait_buckets,
        }
    }

    /// Admissions whose wait was at most `WAIT_BOUNDS_MS[bucket]`, the
    /// immediate ones included: the histogram's cumulative count at that
    /// bound (wrapping like the counts).
    pub fn wait_le(&self, bucket: usize) -> u64 {
        let waited: u64 = self.wait_buckets[..=bucket]
            .iter()
            .fold(0u64, |sum, &count| sum.wrapping_add(count));
        self.admitted
            .wrapping_sub(self.admitted_after_wait)
            .wrapping_add(waited)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn waited(wait_ms: u64) -> Decision {
        Decision::Admitted(Admission {
            wait_ms,
            ticket: None,
            path: AdmitPath::Paced,
            clock_regressed: false,
        })
    }

    #[test]
    fn waits_fall_in_the_bucket_of_the_first_bound_at_or_above_them() {
        let counters = Counters::new();
        // Bounds 10, 50, 100, 500, 1000, 2500, 5000, 10000 ms.
        for wait in [0, 1, 10, 11, 50, 51, 9999, 10000, 10001, 600000] {
            counters.record(&waited(wait));
        }
        let s = counters.snapshot();
        assert_eq!(s.admitted, 10);
        assert_eq!(s.admitted_after_wait, 9);
        assert_eq!(s.wait_buckets, [2, 2, 1, 0, 0, 0, 0, 2]);
        assert_eq!(
            s.wait_ms_total,
            1 + 10 + 11 + 50 + 51 + 9999 + 10000 + 10001 + 600000
        );
        // Cumulative, with the immediate admission: 1 + 2, 1 + 4, ...; the
        // two waits above 10 s are in no bucket.
        let cumulative: [u64; 8] = core::array::from_fn(|i| s.wait_le(i));
        assert_eq!(cumulative, [3, 5, 6, 6, 6, 6, 6, 8]);
    }

    #[test]
    fn outcomes_and_bookings_have_their_own_counts() {
        let counters = Counters::new();
        counters.record_outcome(Outcome::Opened);
        counters.record_outcome(Outcome::Opened);
        counters.record_outcome(Outcome::Throttled);
        let s = counters.snapshot();
        assert_eq!((s.opened, s.throttled, s.admitted, s.refused), (2, 1, 0, 0));
    }

    #[test]
    fn the_words_are_the_snapshot_in_order() {
        let words: [u64; COUNTER_WORDS] = core::array::from_fn(|i| 100 + i as u64);
        let s = CounterSnapshot::from_words(&words);
        assert_eq!(
            (
                s.admitted,
                s.refused,
                s.booked,
                s.throttled,
                s.wait_ms_total,
                s.redeemed
            ),
            (100, 102, 107, 109, 110, 111)
        );
        assert_eq!(s.wait_buckets, [112, 113, 114, 115, 116, 117, 118, 119]);
        assert_eq!(core::mem::size_of::<Counters>(), 8 * COUNTER_WORDS);
    }
}
