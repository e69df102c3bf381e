package pacer_test

// Bookings (SPEC §11). Every number is worked out by hand, never asked of
// the code under test. At the defaults (rate 60/min: one token per 1000 ms,
// 60 units per ms; burst 10; idle 120000; 5 retries):
//
//	bound    = floor((120000 − 2000·(2^5 − 1)) / (2·6)) = floor(58000/12) = 4833 ms
//	hint cap = floor(4833/1000) = 4 s
//	horizon  = bound + retries_left · cap · 1000 = 4833 + 5·4000 = 24833 ms
//
// Fourteen requests at t = 0 take the ten tokens and waits 1000..4000; the
// k-th debit at t = 0 waits (k − 10)·1000 ms, so the 15th would wait 5000:
// beyond the bound, within the horizon.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// drained is a default pacer whose clock reads clock, after the 14
// reservations at t = 0 that admit (waits 0 ×10, 1000, 2000, 3000, 4000).
func drained(t *testing.T, clock *fakeClock, sleep func(context.Context, time.Duration) error) *pacer.Pacer {
	t.Helper()
	p := mustNew(t, defaults(clock, sleep))
	want := []uint64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1000, 2000, 3000, 4000}
	for i, w := range want {
		if d := mustReserve(t, p, 0); !d.Admitted || d.WaitMs != w {
			t.Fatalf("reserve #%d: %+v, want admitted after %d", i, d, w)
		}
	}
	return p
}

// drainedWaits is the wait histogram's buckets after drained: 1000 ms in
// (500, 1000] (bucket 4), 2000 in (1000, 2500] (bucket 5), 3000 and 4000
// in (2500, 5000] (bucket 6); the ten immediate admissions in none.
var drainedWaits = [pacer.WaitBuckets]uint64{4: 1, 5: 1, 6: 2}

// booked is drained on a fixed clock at t = 0 and the booking its 15th
// debit made there with 5 retries left: slot 5000, −5 tokens.
func booked(t *testing.T) (*pacer.Pacer, *pacer.Booking) {
	t.Helper()
	p := drained(t, &fakeClock{}, noSleep)
	return p, mustBook(t, p, 0, 5).Booking
}

func mustBook(t *testing.T, p *pacer.Pacer, now uint64, retriesLeft uint32) pacer.BookingDecision {
	t.Helper()
	book := func() (pacer.BookingDecision, error) { return p.ReserveOrBook(now, retriesLeft) }
	return must(t, book, "ReserveOrBook(%d, %d)", now, retriesLeft)
}

func mustInfo(t *testing.T, p *pacer.Pacer) pacer.Info {
	t.Helper()
	return must(t, p.Info, "Info")
}

// advancingSleep is a timer that fires at once and moves the clock by the
// wait, recording each wait asked for.
type advancingSleep struct {
	clock *fakeClock
	mu    sync.Mutex
	waits []time.Duration
}

func (s *advancingSleep) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	s.clock.Advance(uint64(d / time.Millisecond))
	return nil
}

// refusedKey checks that p.AdmitKey(key) is refused with exactly want.
func refusedKey(t *testing.T, p *pacer.Pacer, key string, want pacer.RefusedError) {
	t.Helper()
	_, err := p.AdmitKey(t.Context(), key)
	var r *pacer.RefusedError
	if !errors.Is(err, pacer.ErrRefused) || !errors.As(err, &r) {
		t.Fatalf("AdmitKey(%q): %v, want a *RefusedError", key, err)
	}
	if *r != want {
		t.Fatalf("AdmitKey(%q): %+v, want %+v", key, *r, want)
	}
}

func TestReserveOrBookSlotsAndHorizon(t *testing.T) {
	p := drained(t, &fakeClock{}, noSleep)
	first := mustBook(t, p, 0, 5)
	// The 15th debit waits 5000: slot 5000, hint ceil((5000 − 4833)/1000) = 1.
	if first.Admitted || !first.Booked() || first.Booking.SlotMs != 5000 ||
		first.RequiredWaitMs != 5000 || first.RetryAfterSeconds != 1 || first.Path != pacer.PathNone {
		t.Fatalf("first booking %+v (%+v)", first, first.Booking)
	}
	if tk := first.Booking.Ticket; tk == nil || tk.DebitUnits() != pacer.UnitsPerToken || tk.Spent() {
		t.Fatalf("booking ticket %+v", tk)
	}
	// Slots 6000..24000 (every 1000 ms, FIFO) book with hint
	// min(4, ceil((slot − 4833)/1000)): 6000 → 2, 7000 → 3, 8000 on → 4.
	hints := map[uint64]uint64{6000: 2, 7000: 3}
	for slot := uint64(6000); slot <= 24000; slot += 1000 {
		want, ok := hints[slot]
		if !ok {
			want = 4
		}
		b := mustBook(t, p, 0, 5)
		if !b.Booked() || b.Booking.SlotMs != slot || b.RequiredWaitMs != slot || b.RetryAfterSeconds != want {
			t.Fatalf("slot %d: %+v (%+v), want hint %d", slot, b, b.Booking, want)
		}
	}
	// 10 − 4 − 20 bookings = −24 tokens, within the debt bound
	// 24833·60/60000 = 24.833 tokens of design.md.
	before := mustInfo(t, p)
	if before.TokensUnits != -24*pacer.UnitsPerToken || before.HighWaterMs != 0 {
		t.Fatalf("after 20 bookings: %+v", before)
	}
	// Slot 25000 > horizon 24833: a plain refusal, hint the cap 4, nothing debited.
	beyond := mustBook(t, p, 0, 5)
	if beyond.Admitted || beyond.Booked() || beyond.RequiredWaitMs != 25000 || beyond.RetryAfterSeconds != 4 ||
		beyond.Ticket != nil {
		t.Fatalf("beyond the horizon: %+v", beyond)
	}
	if after := mustInfo(t, p); after != before {
		t.Fatalf("a refusal changed the state: %+v, was %+v", after, before)
	}
	// No retries left: the horizon is the bound 4833, and even the 5000 ms
	// a fresh 15th debit would need is beyond it.
	fresh := drained(t, &fakeClock{}, noSleep)
	if d := mustBook(t, fresh, 0, 0); d.Admitted || d.Booked() || d.RequiredWaitMs != 5000 || d.RetryAfterSeconds != 4 {
		t.Fatalf("no retries left: %+v", d)
	}
	// 14 admissions (4 after a wait), refusals: the 21 booked and plain
	// ones on p, 20 of them booked (the first and the 19 of slots
	// 6000..24000); nothing released. drained's waits, 1000 + 2000 + 3000
	// + 4000 = 10000 ms: 1000 in (500, 1000] (bucket 4), 2000 in (1000,
	// 2500] (bucket 5), 3000 and 4000 in (2500, 5000] (bucket 6).
	want := pacer.Counters{Admitted: 14, AdmittedAfterWait: 4, Refused: 21, Booked: 20, WaitMsTotal: 10000,
		WaitBuckets: drainedWaits}
	if c := mustCounters(t, p); c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
}

func TestReserveOrBookAdmitsLikeReserve(t *testing.T) {
	p := mustNew(t, pacer.DefaultConfig())
	// A full pacer: the first call takes a token at once, path paced.
	d := mustBook(t, p, 0, 5)
	if !d.Admitted || d.Booked() || d.WaitMs != 0 || d.Path != pacer.PathPaced || d.Ticket == nil {
		t.Fatalf("%+v", d)
	}
	if ok, err := p.Release(d.Ticket, 0); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	// Pacing off (rate 0): admitted, nothing debited, never booked.
	off := mustNew(t, pacer.Config{})
	for range 3 {
		if d := mustBook(t, off, 0, 5); !d.Admitted || d.Booked() || d.Path != pacer.PathDisabled || d.Ticket != nil {
			t.Fatalf("disabled: %+v", d)
		}
	}
}

func TestRedeem(t *testing.T) {
	p, b := booked(t)
	// 10 − 4 − 1 = −5 tokens at t = 0.
	state := mustInfo(t, p)
	if state.TokensUnits != -5*pacer.UnitsPerToken {
		t.Fatalf("state %+v", state)
	}
	// At 0 the slot is 5000 − 4833 = 167 ms beyond the bound: not yet, hint 1.
	d, err := p.Redeem(b, 0)
	if err != nil || d.Admitted || d.RetryAfterSeconds != 1 || d.RequiredWaitMs != 5000 || d.Ticket != nil {
		t.Fatalf("redeem at 0: %+v, %v", d, err)
	}
	if b.Ticket.Spent() {
		t.Fatal("a redemption that is not yet must keep the booking")
	}
	// At 167 the slot is exactly the bound away: admitted after 4833.
	a, err := p.Redeem(b, 167)
	if err != nil || !a.Admitted || a.WaitMs != 4833 || !a.Queued || a.Path != pacer.PathBooked ||
		a.Ticket == nil || a.Ticket.DebitUnits() != pacer.UnitsPerToken {
		t.Fatalf("redeem at 167: %+v, %v", a, err)
	}
	if got := mustInfo(t, p); got != state {
		t.Fatalf("redeem changed the state: %+v, was %+v", got, state)
	}
	if !b.Ticket.Spent() || a.Ticket.Spent() {
		t.Fatal("the admission should hold the booking's ticket")
	}
	// A second redemption: typed error, nothing changes.
	_, err = p.Redeem(b, 200)
	if !errors.Is(err, pacer.ErrBookingSpent) || !errors.Is(err, pacer.StatusInvalidTicket) {
		t.Fatalf("second redeem: %v, want ErrBookingSpent", err)
	}
	// The booking's own ticket moved: releasing it refunds nothing.
	if ok, err := p.Release(b.Ticket, 200); ok || err != nil {
		t.Fatalf("release of the moved ticket: %v, %v", ok, err)
	}
	if got := mustInfo(t, p); got != state {
		t.Fatalf("state %+v, was %+v", got, state)
	}
	// The admission's ticket refunds once: at 200, −300000 + 200·60 +
	// 60000 = −228000 units.
	if ok, err := p.Release(a.Ticket, 200); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if ok, _ := p.Release(a.Ticket, 200); ok {
		t.Fatal("second release refunded")
	}
	if got := mustInfo(t, p); got.TokensUnits != -228000 || got.HighWaterMs != 200 {
		t.Fatalf("after the refund: %+v", got)
	}
	// 14 + the redemption admitted (5 after a wait), redeemed; refused:
	// the booking (booked) and the early redemption; one release,
	// refunded. Waits: drained's 10000 ms and the redemption's 4833, in
	// (2500, 5000] (bucket 6).
	waits := drainedWaits
	waits[6]++
	want := pacer.Counters{Admitted: 15, AdmittedAfterWait: 5, Refused: 2, Booked: 1, Redeemed: 1,
		Released: 1, Refunded: 1, WaitMsTotal: 14833, WaitBuckets: waits}
	if c := mustCounters(t, p); c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
}

func TestRedeemReleasedBooking(t *testing.T) {
	p, b := booked(t)
	if ok, err := p.Release(b.Ticket, 0); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if _, err := p.Redeem(b, 167); !errors.Is(err, pacer.ErrBookingSpent) {
		t.Fatalf("redeem after release: %v", err)
	}
}

func TestRedeemBadInputChangesNothing(t *testing.T) {
	p, b := booked(t)
	_, foreign := booked(t)
	state, counters := mustInfo(t, p), mustCounters(t, p)
	moved := *b
	moved.SlotMs = 0
	swapped := *b
	swapped.Ticket = foreign.Ticket
	for name, bad := range map[string]*pacer.Booking{
		"nil": nil, "zero": {}, "literal": {SlotMs: 5000, Ticket: b.Ticket},
		"foreign": foreign, "slot changed": &moved, "ticket swapped": &swapped,
	} {
		d, err := p.Redeem(bad, 167)
		var fe *pacer.FieldError
		if !errors.Is(err, pacer.ErrInvalidInput) || !errors.As(err, &fe) || fe.Field != "booking" || d.Admitted {
			t.Errorf("%s: %+v, %v", name, d, err)
		}
	}
	if got := mustInfo(t, p); got != state {
		t.Fatalf("state %+v, was %+v", got, state)
	}
	if got := mustCounters(t, p); got != counters {
		t.Fatalf("counters %+v, were %+v", got, counters)
	}
	if b.Ticket.Spent() || foreign.Ticket.Spent() {
		t.Fatal("bad input spent a ticket")
	}
	// A copy of the booking value shares its ticket: fine to redeem once.
	same := *b
	if d, err := p.Redeem(&same, 167); err != nil || !d.Admitted {
		t.Fatalf("copy: %+v, %v", d, err)
	}
	if _, err := p.Redeem(b, 167); !errors.Is(err, pacer.ErrBookingSpent) {
		t.Fatalf("original after its copy was redeemed: %v", err)
	}
}

func TestBookingCallsAfterClose(t *testing.T) {
	p, b := booked(t)
	if _, err := p.AdmitKey(t.Context(), "k"); err == nil {
		t.Fatal("want a refusal")
	}
	_ = p.Close()
	if _, err := p.ReserveOrBook(0, 5); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("ReserveOrBook: %v", err)
	}
	if _, err := p.Redeem(b, 167); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Redeem: %v", err)
	}
	if _, err := p.AdmitKey(t.Context(), "k"); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("AdmitKey: %v", err)
	}
	// Forget still gives the booked token back after Close (as Release).
	if ok, err := p.Forget("k"); !ok || err != nil {
		t.Fatalf("Forget: %v, %v; want a refund", ok, err)
	}
	if p.PendingKeys() != 0 {
		t.Fatalf("pending %d, want 0", p.PendingKeys())
	}
	var nilPacer *pacer.Pacer
	if _, err := nilPacer.AdmitKey(t.Context(), "k"); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("nil AdmitKey: %v", err)
	}
	if _, err := nilPacer.Forget("k"); !errors.Is(err, pacer.ErrClosed) || nilPacer.PendingKeys() != 0 {
		t.Fatalf("nil Forget: %v", err)
	}
}

func TestAdmitKey(t *testing.T) {
	clock := &fakeClock{}
	sleep := &advancingSleep{clock: clock}
	p := drained(t, clock, sleep.Sleep)
	// a books slot 5000 (hint 1), b slot 6000 (hint ceil(1167/1000) = 2).
	refusedKey(t, p, "a", pacer.RefusedError{RequiredWaitMs: 5000, RetryAfterSeconds: 1, Booked: true})
	refusedKey(t, p, "b", pacer.RefusedError{RequiredWaitMs: 6000, RetryAfterSeconds: 2, Booked: true})
	if p.PendingKeys() != 2 {
		t.Fatalf("pending %d", p.PendingKeys())
	}
	// a retries too early: its booking is presented, not yet (hint 1),
	// nothing debited: 10 − 4 − 2 = −6 tokens either way.
	state := mustInfo(t, p)
	if state.TokensUnits != -6*pacer.UnitsPerToken {
		t.Fatalf("state %+v", state)
	}
	refusedKey(t, p, "a", pacer.RefusedError{RequiredWaitMs: 5000, RetryAfterSeconds: 1, Booked: true})
	if got := mustInfo(t, p); got != state {
		t.Fatalf("the retry changed the state: %+v, was %+v", got, state)
	}
	// After its 1 s hint: slot 5000 is 4000 ahead, within 4833: waits 4000.
	clock.Set(1000)
	a, err := p.AdmitKey(t.Context(), "a")
	if err != nil || !a.Queued || a.Wait != 4*time.Second || a.Waited != 4*time.Second || a.Path != pacer.PathBooked ||
		a.Ticket == nil {
		t.Fatalf("a after 1000 ms: %+v, %v", a, err)
	}
	if len(sleep.waits) != 1 || sleep.waits[0] != 4*time.Second {
		t.Fatalf("sleeps %v", sleep.waits)
	}
	if p.PendingKeys() != 1 {
		t.Fatalf("pending %d, want b only", p.PendingKeys())
	}
	// b gives up: its token comes back once.
	if ok, err := p.Forget("b"); !ok || err != nil {
		t.Fatalf("Forget(b): %v, %v", ok, err)
	}
	if ok, err := p.Forget("b"); ok || err != nil {
		t.Fatalf("Forget(b) again: %v, %v", ok, err)
	}
	if p.PendingKeys() != 0 {
		t.Fatalf("pending %d", p.PendingKeys())
	}
	// The admitted key a is new again. Forget released b at 5000 (the
	// clock after the sleep): −6 + 5000·60/60000 + 1 = 0 tokens, so the
	// next debit waits 1000 ms, within the bound: paced.
	a2, err := p.AdmitKey(t.Context(), "a")
	if err != nil || a2.Wait != time.Second || a2.Path != pacer.PathPaced {
		t.Fatalf("a as a new request: %+v, %v", a2, err)
	}
}

func TestAdmitKeyCancelledDuringWaitRefunds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p, done := redeemingKey(t, ctx)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// Released at 1000: −300000 + 1000·60 + 60000 = −180000 units.
	if got := mustInfo(t, p); got.TokensUnits != -180000 || got.HighWaterMs != 1000 {
		t.Fatalf("after the cancel: %+v", got)
	}
	if c := mustCounters(t, p); c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v", c)
	}
	if p.PendingKeys() != 0 {
		t.Fatalf("pending %d: an admitted key is forgotten", p.PendingKeys())
	}
	if ok, err := p.Forget("k"); ok || err != nil {
		t.Fatalf("Forget after the refund: %v, %v", ok, err)
	}
}

func TestAdmitKeyContextAndInput(t *testing.T) {
	p := drained(t, &fakeClock{}, noSleep)
	state, counters := mustInfo(t, p), mustCounters(t, p)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.AdmitKey(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v", err)
	}
	var nilCtx context.Context // nil: the bad input under test
	if _, err := p.AdmitKey(nilCtx, "k"); !errors.Is(err, pacer.ErrInvalidInput) {
		t.Fatalf("nil ctx: %v", err)
	}
	if p.PendingKeys() != 0 || mustInfo(t, p) != state || mustCounters(t, p) != counters {
		t.Fatal("a call that never attempted changed something")
	}
	if ok, err := p.Forget("never seen"); ok || err != nil {
		t.Fatalf("Forget(unknown): %v, %v", ok, err)
	}
}

// The retry countdown. small: rate 60, burst 1, idle 30000, 3 retries:
// bound floor((30000 − 2000·7)/8) = 2000, cap 2 s, horizon with r retries
// left 2000 + r·2000 (8000 with all 3).
func TestAdmitKeyCountsDownRetries(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, small(clock, noSleep))
	for i, w := range []uint64{0, 1000, 2000} {
		if d := mustReserve(t, p, 0); !d.Admitted || d.WaitMs != w {
			t.Fatalf("reserve #%d: %+v", i, d)
		}
	}
	var held []*pacer.Booking
	for slot := uint64(3000); slot <= 8000; slot += 1000 {
		d := mustBook(t, p, 0, 3)
		if !d.Booked() || d.Booking.SlotMs != slot {
			t.Fatalf("slot %d: %+v", slot, d)
		}
		held = append(held, d.Booking)
	}
	// y's first attempt: 9000 > 8000, a plain refusal at the cap 2.
	refusedKey(t, p, "y", pacer.RefusedError{RequiredWaitMs: 9000, RetryAfterSeconds: 2})
	// The slot-8000 booking goes back: the next wait is 8000 again.
	if ok, err := p.Release(held[len(held)-1].Ticket, 0); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	// y has 2 retries left: horizon 6000 < 8000, refused, nothing held.
	refusedKey(t, p, "y", pacer.RefusedError{RequiredWaitMs: 8000, RetryAfterSeconds: 2})
	// A fresh key has all 3: horizon 8000, booked, hint min(2, ceil(6000/1000)) = 2.
	refusedKey(t, p, "z", pacer.RefusedError{RequiredWaitMs: 8000, RetryAfterSeconds: 2, Booked: true})
	if p.PendingKeys() != 2 {
		t.Fatalf("pending %d", p.PendingKeys())
	}
	// z gives up: the next wait is 8000 again (−8 + 1 = −7 tokens).
	if ok, err := p.Forget("z"); !ok || err != nil {
		t.Fatalf("Forget(z): %v, %v", ok, err)
	}
	// y's third attempt has 1 retry left: horizon 4000 < 8000, refused,
	// nothing debited.
	tokens := mustInfo(t, p).TokensUnits
	refusedKey(t, p, "y", pacer.RefusedError{RequiredWaitMs: 8000, RetryAfterSeconds: 2})
	if got := mustInfo(t, p).TokensUnits; got != tokens {
		t.Fatalf("tokens %d, were %d", got, tokens)
	}
	if ok, err := p.Forget("y"); ok || err != nil {
		t.Fatalf("Forget(y): %v, %v: nothing booked, nothing to refund", ok, err)
	}
	// Forgotten, y starts over with all 3 retries: booked at 8000.
	refusedKey(t, p, "y", pacer.RefusedError{RequiredWaitMs: 8000, RetryAfterSeconds: 2, Booked: true})
	if ok, err := p.Forget("y"); !ok || err != nil || p.PendingKeys() != 0 {
		t.Fatalf("Forget(y): %v, %v, pending %d", ok, err, p.PendingKeys())
	}
}

// 64 goroutines, distinct keys, one instant (t = 0) at the defaults. A
// refusal debits nothing, so whatever the order, the k-th debit waits
// max(0, k − 10)·1000 ms:
//
//   - admitted while the wait is within the bound, (k − 10)·1000 <= 4833:
//     k <= 14 — 14 admissions (10 at once, 4 after 1000..4000);
//   - booked while it is within the horizon of a first attempt (5 retries
//     left), (k − 10)·1000 <= 24833: k <= 34 — floor(24833/1000) − 4 = 20
//     bookings, at the distinct slots 5000, 6000, …, 24000 (FIFO, 1000 ms
//     apart);
//   - the other 64 − 34 = 30 would need 25000 > 24833: plain refusals, hint
//     the cap 4, nothing debited.
//
// Tokens end at 10 − 14 − 20 = −24; forgetting every key refunds the 20
// bookings: −4.
func TestAdmitKeyConcurrentDistinctKeys(t *testing.T) {
	p := mustNew(t, defaults(&fakeClock{}, noSleep))
	type outcome struct {
		a   pacer.Admission
		err error
	}
	results := make([]outcome, 64)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			a, err := p.AdmitKey(t.Context(), fmt.Sprintf("req-%d", i))
			results[i] = outcome{a, err}
		})
	}
	wg.Wait()
	waits := map[time.Duration]int{}
	slots := map[uint64]int{}
	plain := 0
	for i, r := range results {
		var refused *pacer.RefusedError
		switch {
		case r.err == nil:
			waits[r.a.Wait]++
		case errors.As(r.err, &refused) && refused.Booked:
			slots[refused.RequiredWaitMs]++
		case errors.As(r.err, &refused):
			if refused.RequiredWaitMs != 25000 || refused.RetryAfterSeconds != 4 {
				t.Errorf("req-%d: %+v", i, refused)
			}
			plain++
		default:
			t.Fatalf("req-%d: %v", i, r.err)
		}
	}
	wantWaits := map[time.Duration]int{0: 10, time.Second: 1, 2 * time.Second: 1, 3 * time.Second: 1, 4 * time.Second: 1}
	if fmt.Sprint(waits) != fmt.Sprint(wantWaits) {
		t.Fatalf("admission waits %v, want %v", waits, wantWaits)
	}
	if len(slots) != 20 || plain != 30 {
		t.Fatalf("%d booked slots %v, %d plain refusals; want 20 and 30", len(slots), slots, plain)
	}
	for slot := uint64(5000); slot <= 24000; slot += 1000 {
		if slots[slot] != 1 {
			t.Fatalf("slot %d booked %d times: %v", slot, slots[slot], slots)
		}
	}
	if p.PendingKeys() != 50 {
		t.Fatalf("pending %d, want 50", p.PendingKeys())
	}
	if got := mustInfo(t, p).TokensUnits; got != -24*pacer.UnitsPerToken {
		t.Fatalf("tokens %d, want −24 tokens", got)
	}
	var refunds sync.WaitGroup
	var mu sync.Mutex
	refunded := 0
	for i := range results {
		refunds.Go(func() {
			ok, err := p.Forget(fmt.Sprintf("req-%d", i))
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				refunded++
				mu.Unlock()
			}
		})
	}
	refunds.Wait()
	if refunded != 20 || p.PendingKeys() != 0 {
		t.Fatalf("%d refunds, %d pending; want 20 and 0", refunded, p.PendingKeys())
	}
	if got := mustInfo(t, p).TokensUnits; got != -4*pacer.UnitsPerToken {
		t.Fatalf("tokens %d after the refunds, want −4 tokens", got)
	}
}

func TestPathBookedString(t *testing.T) {
	if pacer.PathBooked.String() != "booked" || pacer.StatusInvalidTicket.String() == "unknown status" {
		t.Fatalf("%q, %q", pacer.PathBooked.String(), pacer.StatusInvalidTicket.String())
	}
}
