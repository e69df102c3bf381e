//! Model checks of the admission CAS loops under every interleaving loom
//! can build (run with `RUSTFLAGS="--cfg loom"`, see `scripts/check-loom.sh`).
//!
//! Every expected value below is derived by hand from SPEC §4 with one
//! token = 60000 units and a refill of `rate` units per ms; none is
//! computed by the code under test.
//!
//! The configurations used:
//!
//! | name | rate | burst | idle | retries | bound | mode |
//! |---|---|---|---|---|---|---|
//! | `b1` | 60 | 1 | 30000 | 3 | min(15000, (30000−14000)/8) = 2000 | refusing (3·2·1000·60 ≥ 60000) |
//! | `b2` | 60 | 2 | 30000 | 3 | 2000 | refusing |
//! | `tight` | 60 | 1 | 10000 | 2 | min(15000, (10000−6000)/6) = 666 | refusing (2·1·1000·60 ≥ 60000) |
//!
//! At rate 60 one token takes 1000 ms to refill.

use loom::sync::Arc;
use loom::thread;

use crate::adaptive::Outcome;
use crate::counters::Counters;
use crate::pacer::Pacer;
use crate::types::{
    AdmitPath, BookingDecision, Config, Decision, ReleasePolicy, StateView, Ticket,
};

/// One token in units.
const TOKEN: i64 = 60_000;

fn config(
    burst: u32,
    idle_timeout_ms: u64,
    max_retries: u32,
    release_policy: ReleasePolicy,
) -> Config {
    Config {
        rate_per_min: 60,
        burst,
        idle_timeout_ms,
        max_retries,
        release_policy,
        adaptive_floor_per_min: 0,
        adaptive_ceiling_per_min: 0,
    }
}

fn b1(policy: ReleasePolicy) -> Config {
    config(1, 30_000, 3, policy)
}

fn b2(policy: ReleasePolicy) -> Config {
    config(2, 30_000, 3, policy)
}

/// The wait of an admission that debited a whole token, and its ticket.
fn paced(decision: Decision) -> (u64, Ticket) {
    match decision {
        Decision::Admitted(admission) => {
            assert_eq!(admission.path, AdmitPath::Paced);
            let ticket = admission
                .ticket
                .expect("a paced admission debits, so it has a ticket");
            assert_eq!(ticket.debit_units(), TOKEN as u32);
            (admission.wait_ms, ticket)
        }
        Decision::Refused(refusal) => panic!("expected an admission, got {refusal:?}"),
    }
}

/// SPEC §6.2, checked from inside a thread so that intermediate states
/// are observed too: `-max_debt <= tokens <= capacity`.
fn assert_in_bounds(pacer: &Pacer, capacity: i64, max_debt: i64) -> StateView {
    let state = pacer.state();
    assert!(
        state.tokens_units <= capacity,
        "tokens above capacity: {state:?}"
    );
    assert!(
        state.tokens_units >= -max_debt,
        "tokens below the debt floor: {state:?}"
    );
    state
}

/// Runs `f` on a new thread with its own handle on `pacer`.
fn on_thread<T: Send + 'static>(
    pacer: &Arc<Pacer>,
    f: impl FnOnce(&Pacer) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let pacer = pacer.clone();
    thread::spawn(move || f(&pacer))
}

/// The state word: the high-water mark, the tokens (units) and the
/// release stack counter.
fn view(high_water_ms: u64, tokens_units: i64, seq: u32) -> StateView {
    StateView {
        high_water_ms,
        tokens_units,
        seq,
    }
}

/// X releases `ticket` at `release_ms` while Y reserves at 0, each checking
/// the bounds of config `b1` after its step: X's answer and Y's wait.
fn release_races_reserve(pacer: &Arc<Pacer>, ticket: Ticket, release_ms: u64) -> (bool, u64) {
    let x = on_thread(pacer, move |pacer| {
        let refunded = pacer.release(ticket, release_ms);
        assert_in_bounds(pacer, TOKEN, 120_000);
        refunded
    });
    let y = on_thread(pacer, move |pacer| {
        let (wait, _) = paced(pacer.reserve(0));
        assert_in_bounds(pacer, TOKEN, 120_000);
        wait
    });
    (x.join().unwrap(), y.join().unwrap())
}

/// A `b2` pacer whose two tokens two reservations at 0 took (0 units), and
/// their tickets.
fn b2_emptied(policy: ReleasePolicy) -> (Arc<Pacer>, Ticket, Ticket) {
    let pacer = Arc::new(Pacer::new(&b2(policy), 0).unwrap());
    let (_, t1) = paced(pacer.reserve(0));
    let (_, t2) = paced(pacer.reserve(0));
    (pacer, t1, t2)
}

fn sorted<const N: usize>(mut values: [u64; N]) -> [u64; N] {
    values.sort_unstable();
    values
}

/// (a) burst 1, bound 2000, three reservations at t=0 (the SPEC §7
/// scenario "rate 60, burst 1, bound 2000"): the sequential run gives
/// #0 now, #1 after ceil(60000/60) = 1000, #2 after ceil(120000/60) = 2000.
/// Concurrently the same three slots must be handed out, each exactly once,
/// and the state must hold all three debits: 60000 − 3·60000 = −120000
/// units (max_debt = 2000·60 = 120000, so exactly at the floor), seq 3.
#[test]
fn concurrent_reservations_get_distinct_slots_burst_1() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Refund), 0).unwrap());
        let handles: [_; 3] = core::array::from_fn(|_| {
            let pacer = pacer.clone();
            thread::spawn(move || {
                let (wait, ticket) = paced(pacer.reserve(0));
                (wait, ticket.seq())
            })
        });
        let results = handles.map(|h| h.join().unwrap());
        let waits = sorted(results.map(|(wait, _)| wait));
        assert_eq!(
            waits,
            [0, 1000, 2000],
            "slots must be distinct and gap-free"
        );
        assert_eq!(
            waits.iter().filter(|&&w| w == 0).count(),
            1,
            "burst 1: one immediate admission"
        );
        // The tickets are the release-stack positions 1, 2, 3, in slot order.
        for (wait, seq) in results {
            assert_eq!(u64::from(seq), wait / 1000 + 1);
        }
        assert_eq!(
            pacer.state(),
            view(0, TOKEN - 3 * TOKEN, 3),
            "a debit was lost"
        );
    });
}

/// (a) burst 2, bound 2000, three reservations at t=0: sequentially #0 and
/// #1 now, #2 after ceil(60000/60) = 1000. Never more than B = 2 immediate
/// admissions; final 120000 − 3·60000 = −60000 units, seq 3.
#[test]
fn concurrent_reservations_respect_burst_2() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b2(ReleasePolicy::Refund), 0).unwrap());
        let handles: [_; 3] =
            core::array::from_fn(|_| on_thread(&pacer, move |pacer| paced(pacer.reserve(0)).0));
        let waits = sorted(handles.map(|h| h.join().unwrap()));
        assert_eq!(waits, [0, 0, 1000]);
        assert!(waits.iter().filter(|&&w| w == 0).count() <= 2);
        assert_eq!(pacer.state(), view(0, 2 * TOKEN - 3 * TOKEN, 3));
    });
}

/// (a) refusals under contention, config `tight` (bound 666, hint cap 1 s):
/// three reservations at t=0. The first takes the only token; each other
/// sees tokens 0, needs ceil(60000/60) = 1000 > 666 ms and is refused with
/// required 1000, hint min(max(1, ceil(1000/1000)), 1) = 1 — and debits
/// nothing, so the state stays at 0 units, seq 1, whoever wins.
#[test]
fn concurrent_refusals_debit_nothing() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&config(1, 10_000, 2, ReleasePolicy::Refund), 0).unwrap());
        let handles: [_; 3] = core::array::from_fn(|_| {
            on_thread(&pacer, move |pacer| match pacer.reserve(0) {
                Decision::Admitted(admission) => {
                    assert_eq!(admission.wait_ms, 0);
                    assert!(admission.ticket.is_some());
                    true
                }
                Decision::Refused(refusal) => {
                    assert_eq!(refusal.required_wait_ms, 1000);
                    assert_eq!(refusal.retry_after_s, 1);
                    false
                }
            })
        });
        let admitted = handles
            .map(|h| h.join().unwrap())
            .iter()
            .filter(|&&a| a)
            .count();
        assert_eq!(admitted, 1);
        assert_eq!(pacer.state(), view(0, 0, 1));
    });
}

/// (a) racing clock readings (SPEC §5), config `b1`, created at 0:
/// A reserves at 1000, B at 0.
/// - A first: A at 1000 refills to the cap 60000, waits 0 → 0 units, mark
///   1000. B's 0 is behind the mark, acts at 1000 (no refill): waits 1000
///   → −60000 units.
/// - B first: B waits 0 → 0 units, mark 0. A at 1000 refills 1000·60 =
///   60000 → waits 0 → 0 units, mark 1000.
#[test]
fn racing_clock_readings_never_refill_twice() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Refund), 0).unwrap());
        let a = on_thread(&pacer, move |pacer| paced(pacer.reserve(1000)));
        let b = {
            let pacer = pacer.clone();
            thread::spawn(move || match pacer.reserve(0) {
                Decision::Admitted(admission) => {
                    let ticket = admission.ticket.unwrap();
                    (admission.wait_ms, ticket.seq(), admission.clock_regressed)
                }
                Decision::Refused(refusal) => panic!("{refusal:?}"),
            })
        };
        let (a_wait, a_ticket) = a.join().unwrap();
        let (b_wait, b_seq, b_regressed) = b.join().unwrap();
        let state = pacer.state();
        assert_eq!(a_wait, 0);
        if a_ticket.seq() == 1 {
            assert_eq!((b_seq, b_wait, b_regressed), (2, 1000, true));
            assert_eq!(state, view(1000, -TOKEN, 2));
        } else {
            assert_eq!(
                (a_ticket.seq(), b_seq, b_wait, b_regressed),
                (2, 1, 0, false)
            );
            assert_eq!(state, view(1000, 0, 2));
        }
    });
}

/// (b) refund policy, config `b1`. Before the threads start, one
/// reservation at 0 takes the token: 0 units, seq 1, ticket T.
/// X releases T at 0 while Y reserves at 0.
/// - X first: 0 + 60000 = 60000 (= capacity); Y waits 0 → 0 units.
/// - Y first: Y waits 1000 → −60000; X refunds → 0 units.
///
/// Either way the final level is 0 units and X's release reports true.
#[test]
fn release_races_reserve_same_instant() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Refund), 0).unwrap());
        let (wait, ticket) = paced(pacer.reserve(0));
        assert_eq!(wait, 0);
        let (refunded, y_wait) = release_races_reserve(&pacer, ticket, 0);
        assert!(refunded, "a refund-policy release always refunds");
        assert!(y_wait == 0 || y_wait == 1000, "y waited {y_wait}");
        let state = pacer.state();
        assert_eq!((state.high_water_ms, state.tokens_units), (0, 0));
        // The refund policy leaves the release stack alone: two debits.
        assert_eq!(state.seq, 2);
    });
}

/// (b) refund policy, config `b1`, where the capacity cap decides. A
/// reservation at 0 takes the token (0 units, seq 1, ticket T).
/// X releases T at 1000 while Y reserves at 0.
/// - X first: refill to 1000 gives 0 + 60000 = 60000, plus the 60000
///   refund = 120000, capped at 60000, mark 1000. Y's 0 is behind the
///   mark: acts at 1000, waits 0 → 0 units.
/// - Y first: Y waits 1000 → −60000, mark 0. X refills 1000·60 → 0, plus
///   60000 → 60000 (no cap), mark 1000.
#[test]
fn release_races_reserve_capped_at_capacity() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Refund), 0).unwrap());
        let (_, ticket) = paced(pacer.reserve(0));
        let (refunded, y_wait) = release_races_reserve(&pacer, ticket, 1000);
        assert!(refunded);
        let state = pacer.state();
        match y_wait {
            0 => assert_eq!(state, view(1000, 0, 2)),
            1000 => assert_eq!(state, view(1000, TOKEN, 2)),
            other => panic!("y waited {other}"),
        }
    });
}

/// (b) refund policy, config `b2`: two reservations at 0 take both tokens
/// (0 units, tickets T1, T2). X releases T1, Y releases T2, Z reserves,
/// all at 0. The releases always refund: final 0 + 2·60000 − 60000 = 60000
/// units whatever the order (the level peaks at exactly the capacity
/// 120000 when both releases come first, so the cap never cuts). Z waits 0
/// if a release came first, else ceil(60000/60) = 1000.
#[test]
fn two_releases_race_a_reservation() {
    loom::model(|| {
        let (pacer, t1, t2) = b2_emptied(ReleasePolicy::Refund);
        let release = |ticket: Ticket| on_thread(&pacer, move |pacer| pacer.release(ticket, 0));
        let x = release(t1);
        let y = release(t2);
        let z = on_thread(&pacer, move |pacer| paced(pacer.reserve(0)).0);
        assert!(x.join().unwrap());
        assert!(y.join().unwrap());
        let z_wait = z.join().unwrap();
        assert!(z_wait == 0 || z_wait == 1000, "z waited {z_wait}");
        assert_eq!(pacer.state(), view(0, TOKEN, 3));
    });
}

/// (c) strict policy, config `b2`: two reservations at 0 (T1 seq 1, T2
/// seq 2; 0 units, stack counter 2). X releases T1, Y releases T2, at 0.
/// T1 may refund only once T2 has been refunded (T2 is the later debit).
/// - Y then X: Y refunds → 60000, counter 1; X refunds → 120000 (exactly
///   the capacity), counter 0. Both true.
/// - X before Y's refund: X refused (false, nothing changed); Y refunds →
///   60000, counter 1.
///
/// In every interleaving: Y is true, tokens = 120000 − (2 − refunds)·60000,
/// counter = 2 − refunds, never above capacity; both refund only when Y's
/// release came first.
#[test]
fn strict_releases_refund_only_from_the_top() {
    loom::model(|| {
        let (pacer, t1, t2) = b2_emptied(ReleasePolicy::Strict);
        assert_eq!((t1.seq(), t2.seq()), (1, 2));
        let x = {
            let pacer = pacer.clone();
            thread::spawn(move || {
                let refunded = pacer.release(t1, 0);
                // What X saw after its own step: the counter tells whether
                // Y had already refunded (1 → yes, then X took it to 0).
                let after = assert_in_bounds(&pacer, 2 * TOKEN, 120_000);
                (refunded, after)
            })
        };
        let y = on_thread(&pacer, move |pacer| {
            let refunded = pacer.release(t2, 0);
            assert_in_bounds(&pacer, 2 * TOKEN, 120_000);
            refunded
        });
        let (x_refunded, x_after) = x.join().unwrap();
        let y_refunded = y.join().unwrap();
        assert!(
            y_refunded,
            "the latest debit can always be refunded under strict"
        );
        let refunds = 1 + i64::from(x_refunded);
        let state = pacer.state();
        assert_eq!(state.tokens_units, 2 * TOKEN - (2 - refunds) * TOKEN);
        assert_eq!(i64::from(state.seq), 2 - refunds);
        assert!(state.tokens_units <= 2 * TOKEN);
        if x_refunded {
            // Only possible when Y's refund was already in: X then left the
            // stack empty and the bucket full.
            assert_eq!(x_after, view(0, 2 * TOKEN, 0));
        } else {
            assert_eq!(state, view(0, TOKEN, 1));
        }
    });
}

/// (c) strict policy, config `b1`: a reservation at 0 takes the token (0
/// units, T seq 1). X releases T while Z reserves, both at 0.
/// - X first: refund → 60000, counter 0; Z waits 0 → 0 units, counter 1.
/// - Z first: Z waits 1000 → −60000, counter 2; X is refused (a later
///   debit exists): false, nothing changed.
#[test]
fn strict_release_races_reserve() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Strict), 0).unwrap());
        let (_, ticket) = paced(pacer.reserve(0));
        let x = on_thread(&pacer, move |pacer| pacer.release(ticket, 0));
        let z = on_thread(&pacer, move |pacer| paced(pacer.reserve(0)).0);
        let x_refunded = x.join().unwrap();
        let z_wait = z.join().unwrap();
        let state = pacer.state();
        if x_refunded {
            assert_eq!(z_wait, 0);
            assert_eq!(state, view(0, 0, 1));
        } else {
            assert_eq!(z_wait, 1000);
            assert_eq!(state, view(0, -TOKEN, 2));
        }
    });
}

/// The counters lose no increment: two threads reserve on `b1` at 0 (one
/// waits 0, one 1000) and release what they got under the refund policy,
/// recording each call.
/// `b1` drained to a 3000 ms wait (three admissions at 0: waits 0, 1000,
/// 2000), then two requests race to book (SPEC §11): horizon with 3
/// retries left = 2000 + 3·2·1000 = 8000 ms, so both book, one at slot
/// 3000 and one at 4000, and each booking debits exactly one token.
#[test]
fn concurrent_bookings_take_distinct_fifo_slots() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Refund), 0).unwrap());
        for want in [0, 1000, 2000] {
            assert_eq!(paced(pacer.reserve(0)).0, want);
        }
        let handles: [_; 2] = core::array::from_fn(|_| {
            on_thread(&pacer, move |pacer| match pacer.reserve_or_book(0, 3) {
                BookingDecision::Booked(b) => (b.booking.slot_ms, b.booking.ticket.seq()),
                other => panic!("expected a booking: {other:?}"),
            })
        });
        let results = handles.map(|h| h.join().unwrap());
        assert_eq!(sorted(results.map(|(slot, _)| slot)), [3000, 4000]);
        for (slot, seq) in results {
            assert_eq!(u64::from(seq), slot / 1000 + 1, "tickets in slot order");
        }
        assert_eq!(pacer.state().tokens_units, -4 * TOKEN);
    });
}

#[test]
fn counters_lose_no_increment() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&b1(ReleasePolicy::Refund), 0).unwrap());
        let counters = Arc::new(Counters::default());
        let handles: [_; 2] = core::array::from_fn(|_| {
            let pacer = pacer.clone();
            let counters = counters.clone();
            thread::spawn(move || {
                let decision = pacer.reserve(0);
                counters.record(&decision);
                if let Decision::Admitted(admission) = decision {
                    counters.record_release(pacer.release(admission.ticket.unwrap(), 0));
                }
            })
        });
        for handle in handles {
            handle.join().unwrap();
        }
        let snapshot = counters.snapshot();
        assert_eq!(snapshot.admitted, 2);
        assert_eq!(snapshot.refused, 0);
        assert_eq!(snapshot.released, 2);
        assert_eq!(snapshot.refunded, 2);
        assert_eq!(snapshot.clock_regressions, 0);
        assert_eq!(snapshot.shaped, 0);
        // One waited 1000 unless the first one's release came before the
        // second's reservation.
        assert!(snapshot.admitted_after_wait <= 1);
        // Two debits, two refunds: back to the full bucket.
        assert_eq!(pacer.state().tokens_units, TOKEN);
    });
}

// ------------------------------------------------------------- adaptive

/// `b1` with adaptation on, floor 10 and the default ceiling (the rate,
/// 60); the lowest rate that can refuse at bound 2000 and 3 retries is
/// ⌈60000/6000⌉ = 10. The hand-derived figures of SPEC §14 used below:
/// - searching from L = 60 the curve is above 60 after the origin, so the
///   rate in force is the ceiling, 60;
/// - a throttle that ends this first search with nothing counted sets L
///   to 60 − max(1, ⌊60/16⌋) = 57; within a minute of the creation it
///   pauses: the origin moves to 60000 and the rate reads the lowest, 10,
///   until then;
/// - a throttle that ends it with `n` openings counted in minute 0 sets
///   L = min(n, 60) = n, with the same pause.
fn adaptive_b1() -> Config {
    b1(ReleasePolicy::Refund).adaptive(10, 0)
}

/// Two openings counted at once: `observe(opened)` writes the control
/// word, so a lost update (a load-and-store instead of the CAS) counts one.
#[test]
fn concurrent_openings_are_both_counted() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&adaptive_b1(), 0).unwrap());
        let other = on_thread(&pacer, move |pacer| pacer.observe(Outcome::Opened, 1000));
        assert_eq!(pacer.observe(Outcome::Opened, 1000), 60);
        assert_eq!(other.join().unwrap(), 60);
        let control = pacer.control();
        assert_eq!((control.opened, control.window), (2, 0));
        assert!(!control.probing, "an opening does not end a search");
    });
}

/// A throttle at 2000 races two openings at 1000. Sequentially: both
/// openings first, E = 2 ends the search with L = 2; one before and one
/// after, L = 1, and the one after reads the pause's origin 60000 (minute
/// 1, where the first one is now the minute before); the throttle first,
/// nothing counted, L = 57, and both openings are counted at 60000. Each
/// reads the lowest, 10 (the pause), every order leaves the origin at
/// 60000, and the two openings are counted once each.
#[test]
fn a_throttle_races_openings() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&adaptive_b1(), 0).unwrap());
        let opener = on_thread(&pacer, move |pacer| {
            pacer.observe(Outcome::Opened, 1000);
            pacer.observe(Outcome::Opened, 1000);
        });
        let throttled = pacer.observe(Outcome::Throttled, 2000);
        opener.join().unwrap();
        let control = pacer.control();
        assert_eq!(
            (control.origin_ms, control.probing, control.again, throttled),
            (60_000, true, true, 10)
        );
        match (control.limit_per_min, control.opened, control.opened_before) {
            (2, 0, 2) | (1, 1, 1) | (57, 2, 0) => {}
            other => panic!("not a sequential outcome: {other:?}"),
        }
    });
}

/// Two throttles race: whatever the order, the control word ends as one of
/// the two sequential outcomes. A throttle at 1000 then one at 70000: the
/// first ends the search (nothing counted, L = 57) and pauses until 60000
/// (it reads 10), the second is within the hold (it reads 57). The one at
/// 70000 first ends the search with no pause (a minute has passed; 57),
/// and the one at 1000 then is held, reading the lowest before the origin
/// (10). Either way L = 57 and the rate at 70000 is 57; the origin is
/// 60000 or 70000.
#[test]
fn racing_throttles_apply_in_some_order() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&adaptive_b1(), 0).unwrap());
        let early = on_thread(&pacer, move |pacer| pacer.observe(Outcome::Throttled, 1000));
        let late = pacer.observe(Outcome::Throttled, 70_000);
        let early = early.join().unwrap();
        let after = pacer.rate_in_force(70_000);
        let control = pacer.control();
        assert_eq!(
            (early, late, after, control.limit_per_min),
            (10, 57, 57, 57)
        );
        assert!(
            control.origin_ms == 60_000 || control.origin_ms == 70_000,
            "origin {}",
            control.origin_ms
        );
    });
}

/// A throttle races a reservation that must wait for a token: the
/// reservation decides at the rate in force when it reads the control
/// word. Before the throttle, 60: it waits ⌈60000/60⌉ = 1000 ms and debits
/// one token. After it, the pause's lowest rate 10: one token takes 6000
/// ms, past the bound 2000, so it is refused and debits nothing. Either
/// way the next request (at 10) is refused: it needs 12000 ms after a
/// debit, 6000 without.
#[test]
fn a_throttle_races_a_waiting_reservation() {
    loom::model(|| {
        let pacer = Arc::new(Pacer::new(&adaptive_b1(), 0).unwrap());
        let (first, _) = paced(pacer.reserve(0));
        assert_eq!(first, 0);
        let waiter = on_thread(&pacer, move |pacer| match pacer.reserve(0) {
            Decision::Admitted(a) => Some(a.wait_ms),
            Decision::Refused(_) => None,
        });
        assert_eq!(pacer.observe(Outcome::Throttled, 0), 10);
        let (level, next) = match waiter.join().unwrap() {
            Some(wait) => {
                assert_eq!(wait, 1000);
                (-TOKEN, 12_000)
            }
            None => (0, 6_000),
        };
        assert_eq!(pacer.state().tokens_units, level);
        match pacer.reserve(0) {
            Decision::Refused(refusal) => assert_eq!(refusal.required_wait_ms, next),
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
}
