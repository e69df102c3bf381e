//! Bookings (SPEC §11), with every expected figure worked out by hand from
//! the defaults: rate 60/min (one token per 1000 ms), burst 10, bound
//! 4833 ms, hint cap 4 s, 5 retries, so the horizon with all five retries
//! left is 4833 + 5 · 4 · 1000 = 24833 ms.

mod common;

use common::{seen, Seen};
use pacer_core::{
    AdmitPath, Booked, Booking, BookingDecision, Config, Pacer, Redemption, ReleasePolicy, Ticket,
    UNITS_PER_TOKEN,
};

fn pacer(policy: ReleasePolicy) -> Pacer {
    Pacer::new(
        &Config {
            release_policy: policy,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap()
}

fn booked(decision: BookingDecision) -> Booking {
    match decision {
        BookingDecision::Booked(Booked { booking, .. }) => booking,
        other => panic!("expected a booking, got {other:?}"),
    }
}

#[test]
fn thirty_six_at_once_line_up_to_the_horizon() {
    let pacer = pacer(ReleasePolicy::Refund);
    let answers: Vec<Seen> = (0..36)
        .map(|_| seen(&pacer.reserve_or_book(0, 5)))
        .collect();
    let mut want = Vec::new();
    // #0-9: the burst; #10-13: waits 1000..4000 within the bound (SPEC §7).
    for k in 0..14u64 {
        want.push(Seen::Admitted {
            wait_ms: k.saturating_sub(9) * 1000,
        });
    }
    // #14-33: slot (k − 9) · 1000 up to 24000 ≤ 24833; the hint is
    // ceil((slot − 4833)/1000) clamped to 1..=4: 167 → 1, 1167 → 2,
    // 2167 → 3, 3167 → 4, then the cap.
    for k in 14..34u64 {
        let slot_ms = (k - 9) * 1000;
        let retry_after_s = ((slot_ms - 4833).div_ceil(1000)).clamp(1, 4);
        want.push(Seen::Booked {
            slot_ms,
            retry_after_s,
        });
    }
    // #34-35: 25000 > 24833: refused, nothing debited, so #35 sees the same.
    for _ in 34..36 {
        want.push(Seen::Refused {
            required_wait_ms: 25000,
            retry_after_s: 4,
        });
    }
    assert_eq!(answers, want);
    // 34 tokens debited from a full bucket of 10.
    assert_eq!(pacer.state().tokens_units, (10 - 34) * UNITS_PER_TOKEN);
}

#[test]
fn slot_hints_match_the_first_few_by_hand() {
    let pacer = pacer(ReleasePolicy::Refund);
    for _ in 0..14 {
        pacer.reserve_or_book(0, 5);
    }
    let hints: Vec<(u64, u64)> = (0..6)
        .map(|_| match seen(&pacer.reserve_or_book(0, 5)) {
            Seen::Booked {
                slot_ms,
                retry_after_s,
            } => (slot_ms, retry_after_s),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        hints,
        [
            (5000, 1),
            (6000, 2),
            (7000, 3),
            (8000, 4),
            (9000, 4),
            (10000, 4)
        ]
    );
}

#[test]
fn fewer_retries_left_shrink_the_horizon() {
    // With 0 retries left the horizon is the bound: a plain refusal.
    let pacer = pacer(ReleasePolicy::Refund);
    for _ in 0..14 {
        pacer.reserve_or_book(0, 5);
    }
    let before = pacer.state();
    assert_eq!(
        seen(&pacer.reserve_or_book(0, 0)),
        Seen::Refused {
            required_wait_ms: 5000,
            retry_after_s: 4
        }
    );
    assert_eq!(pacer.state(), before);
    // 1 retry left: horizon 8833, so slots 5000..8000 book and 9000 does not.
    for slot in [5000, 6000, 7000, 8000] {
        assert_eq!(booked(pacer.reserve_or_book(0, 1)).slot_ms, slot);
    }
    assert!(matches!(
        pacer.reserve_or_book(0, 1),
        BookingDecision::Refused(_)
    ));
    // More retries than configured count as the configured 5: slots up to
    // 24000 book, 25000 > 24833 does not.
    for slot in (9..=24).map(|k| k * 1000) {
        assert_eq!(booked(pacer.reserve_or_book(0, u32::MAX)).slot_ms, slot);
    }
    assert_eq!(pacer.state().tokens_units, (10 - 34) * UNITS_PER_TOKEN);
    assert!(matches!(
        pacer.reserve_or_book(0, u32::MAX),
        BookingDecision::Refused(_)
    ));
}

#[test]
fn redeeming_is_pure_and_admits_within_the_bound() {
    let pacer = pacer(ReleasePolicy::Refund);
    for _ in 0..20 {
        pacer.reserve_or_book(0, 5);
    }
    let booking = booked(pacer.reserve_or_book(0, 5)); // #20: slot 11000
    assert_eq!(booking.slot_ms, 11000);
    let state = pacer.state();
    let not_yet = |r: Redemption| match r {
        Redemption::NotYet {
            booking,
            retry_after_s,
        } => (booking, retry_after_s),
        other => panic!("{other:?}"),
    };
    // At 1000: 10000 ahead, 5167 beyond the bound → 6 s, capped at 4.
    let (booking, hint) = not_yet(pacer.redeem(booking, 1000));
    assert_eq!(hint, 4);
    // At 5000: 6000 ahead, 1167 beyond → 2 s.
    let (booking, hint) = not_yet(pacer.redeem(booking, 5000));
    assert_eq!(hint, 2);
    // At 6166: 4834 ahead, 1 ms beyond → 1 s.
    let (booking, hint) = not_yet(pacer.redeem(booking, 6166));
    assert_eq!(hint, 1);
    assert_eq!(pacer.state(), state, "redeem changes nothing");
    // At 6167: 4833 ahead = the bound → admitted after 4833.
    match pacer.redeem(booking, 6167) {
        Redemption::Admitted(a) => {
            assert_eq!((a.wait_ms, a.path), (4833, AdmitPath::Booked));
            assert_eq!(a.ticket.unwrap().into_raw(), (21, 60_000));
        }
        other => panic!("{other:?}"),
    }
    // Past the slot: admitted at once.
    let late = Booking {
        ticket: Ticket::from_raw(99, 60_000),
        slot_ms: 11000,
    };
    match pacer.redeem(late, 20000) {
        Redemption::Admitted(a) => assert_eq!(a.wait_ms, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(pacer.state(), state, "redeem changes nothing");
}

#[test]
fn a_redeeming_retry_never_debits_again() {
    // The record's livelock: every retry of a refused request deepened the
    // deficit. A booking is debited once; its retries only redeem.
    let pacer = pacer(ReleasePolicy::Refund);
    for _ in 0..14 {
        pacer.reserve_or_book(0, 5);
    }
    let mut booking = booked(pacer.reserve_or_book(0, 5)); // slot 5000
    let after_booking = pacer.state().tokens_units;
    for now in [0, 10, 100] {
        booking = match pacer.redeem(booking, now) {
            Redemption::NotYet { booking, .. } => booking,
            Redemption::Admitted(a) => panic!("admitted early at {now}: {a:?}"),
        };
    }
    assert_eq!(pacer.state().tokens_units, after_booking);
    // The next fresh request lines up behind it, not in front.
    assert_eq!(booked(pacer.reserve_or_book(0, 5)).slot_ms, 6000);
}

#[test]
fn later_requests_keep_fifo_slots() {
    // A request made later, after some refill, still opens after the
    // earlier bookings: refill moves the clock and the deficit together.
    // Once its slot is within the bound it is simply admitted with a wait.
    let pacer = pacer(ReleasePolicy::Refund);
    for _ in 0..14 {
        pacer.reserve_or_book(0, 5);
    }
    assert_eq!(booked(pacer.reserve_or_book(0, 5)).slot_ms, 5000);
    assert_eq!(booked(pacer.reserve_or_book(0, 5)).slot_ms, 6000);
    // At 2500 the next slot, 7000, is 4500 ahead: within the bound.
    assert_eq!(
        seen(&pacer.reserve_or_book(2500, 5)),
        Seen::Admitted { wait_ms: 4500 }
    );
    // At 2999 the next, 8000, is 5001 ahead: booked.
    assert_eq!(booked(pacer.reserve_or_book(2999, 5)).slot_ms, 8000);
}

#[test]
fn releasing_unredeemed_bookings_restores_the_state() {
    for policy in [ReleasePolicy::Refund, ReleasePolicy::Strict] {
        let pacer = pacer(policy);
        for _ in 0..14 {
            pacer.reserve_or_book(0, 5);
        }
        let before = pacer.state();
        let bookings: Vec<Booking> = (0..5)
            .map(|_| booked(pacer.reserve_or_book(0, 5)))
            .collect();
        // Strict refunds only the latest debit first: release newest first.
        for booking in bookings.into_iter().rev() {
            assert!(pacer.release(booking.ticket, 0), "{policy:?}");
        }
        assert_eq!(
            pacer.state().tokens_units,
            before.tokens_units,
            "{policy:?}"
        );
        assert_eq!(pacer.state().high_water_ms, before.high_water_ms);
    }
}

#[test]
fn shaping_and_disabled_pacers_never_book() {
    // Rate 1/min cannot refuse (SPEC §3): overflow is shaped, as reserve.
    let shaping = Pacer::new(
        &Config {
            rate_per_min: 1,
            burst: 1,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    shaping.reserve_or_book(0, 5);
    match shaping.reserve_or_book(0, 5) {
        BookingDecision::Admitted(a) => assert_eq!(a.path, AdmitPath::Shaped),
        other => panic!("{other:?}"),
    }
    let off = Pacer::new(
        &Config {
            rate_per_min: 0,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    match off.reserve_or_book(0, 5) {
        BookingDecision::Admitted(a) => assert_eq!((a.path, a.ticket), (AdmitPath::Disabled, None)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn extreme_clocks_book_without_overflow() {
    let pacer = Pacer::new(
        &Config {
            burst: 1,
            ..Config::DEFAULT
        },
        u64::MAX - 10,
    )
    .unwrap();
    pacer.reserve_or_book(u64::MAX, 5);
    for _ in 0..30 {
        if let BookingDecision::Booked(b) = pacer.reserve_or_book(u64::MAX, 5) {
            assert_eq!(b.booking.slot_ms, u64::MAX, "saturates");
            assert!(matches!(
                pacer.redeem(b.booking, u64::MAX),
                Redemption::Admitted(_)
            ));
        }
    }
    // A clock behind the high-water mark books at the mark.
    match pacer.reserve_or_book(0, 5) {
        BookingDecision::Refused(r) => assert!(r.clock_regressed),
        BookingDecision::Booked(b) => assert!(b.clock_regressed),
        BookingDecision::Admitted(a) => panic!("{a:?}"),
    }
}

#[test]
fn counters_see_bookings_as_refusals_and_redemptions_as_admissions() {
    use pacer_core::Counters;
    let pacer = pacer(ReleasePolicy::Refund);
    let counters = Counters::new();
    for _ in 0..14 {
        counters.record_booking(&pacer.reserve_or_book(0, 5));
    }
    let decision = pacer.reserve_or_book(0, 5); // booked, slot 5000
    counters.record_booking(&decision);
    let refused = pacer.reserve_or_book(0, 0); // beyond the bound: refused
    counters.record_booking(&refused);
    let booking = booked(decision);
    let not_yet = pacer.redeem(booking, 0);
    counters.record_redemption(&not_yet);
    let Redemption::NotYet { booking, .. } = not_yet else {
        panic!("{not_yet:?}")
    };
    let admitted = pacer.redeem(booking, 167);
    counters.record_redemption(&admitted);
    let s = counters.snapshot();
    // 14 plain admissions (4 with a wait) + 1 redeemed after 4833 ms;
    // refusals: the booking, the plain refusal and the early redemption.
    assert_eq!(
        (
            s.admitted,
            s.admitted_after_wait,
            s.refused,
            s.shaped,
            s.clock_regressions
        ),
        (15, 5, 3, 0, 0)
    );
    assert_eq!(s.booked, 1, "the booking, not the plain refusal");
    assert_eq!(s.redeemed, 1, "the booking's admission, not the plain ones");
    // A booking at a clock behind the mark counts a regression.
    let behind = pacer.reserve_or_book(0, 5);
    assert!(matches!(behind, BookingDecision::Booked(_)));
    let _ = pacer.reserve_or_book(10, 5);
    let regressed = pacer.reserve_or_book(5, 5);
    counters.record_booking(&regressed);
    assert_eq!(counters.snapshot().clock_regressions, 1);
}

#[test]
fn a_wait_exactly_at_the_horizon_books() {
    // 34 debits at t = 0 leave the next slot at 25000, 167 ms past the
    // horizon 24833; at t = 167 the same slot is exactly 24833 away.
    let pacer = pacer(ReleasePolicy::Refund);
    for _ in 0..34 {
        pacer.reserve_or_book(0, 5);
    }
    assert!(matches!(
        pacer.reserve_or_book(0, 5),
        BookingDecision::Refused(_)
    ));
    assert!(matches!(
        pacer.reserve_or_book(166, 5),
        BookingDecision::Refused(_)
    ));
    let at_horizon = booked(pacer.reserve_or_book(167, 5));
    assert_eq!(at_horizon.slot_ms, 25000);
}
