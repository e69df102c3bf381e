package pacer

// Bookings on shared pacers (SPEC §11 across processes). The clock is the
// real shared one (CLOCK_MONOTONIC), so every expectation below is worked
// out by hand as a function of clock readings taken around the calls, or
// as a relation between answers; none is asked of the code under test.
//
// slowConfig: rate 1/min, burst 1, idle 3600000, 5 retries. One token is
// 60000 units and refills at 1 unit per ms, so a token takes 60000 ms.
//
//	bound    = min(15000, floor((3600000 − 2000·(2^5 − 1)) / (2·6))) = 15000 ms
//	hint cap = floor(15000/1000) = 15 s (every plain refusal's hint)
//	horizon  = 15000 + retries_left · 15 · 1000: 90000, 75000, 60000, 45000 ms
//	           with 5, 4, 3, 2 retries left
//	refusing: 5 · 15 · 1000 · 1 = 75000 >= 60000 (can refuse)
//
// A fresh bucket is full (60000 units). The first debit, at t1, admits at
// once and leaves 0 units. At a later t = t1 + e the bucket holds e units:
// the next debit needs 60000 − e ms (> the bound while e < 45000), so it is
// refused, and booked within the horizon, at slot t + 60000 − e = t1 +
// 60000 whatever e is. After that booking the next request needs 120000 − e
// ms, beyond even the 90000 ms horizon: a plain refusal, nothing debited.
// These hold while e < 15000, i.e. while a test runs for less than 15 s
// after its first debit; the tests take milliseconds.
//
// bookConfig is test_shm's BOOKCFG: rate 600 (one token per 100 ms, 600
// units per ms), burst 1, idle 3600000, 5 retries: bound 15000, hint cap
// 15 s, horizon 90000 with 5 retries left; debt floor 15000 · 600 = 9000000
// units = 150 tokens. The first 1 + 150 debits (burst + floor) admit, with
// waits up to the bound; then refusals within the horizon book. Deep in
// debt every debit, by any process, moves the bucket's next slot by
// exactly 60000/600 = 100 ms: with t units at time a, a debit's slot is
// a + ceil((60000 − t)/600), and the next debit at a' sees
// t − 60000 + 600·(a' − a), so its slot is 100 ms later whatever a' is.
// Each refund of a token moves the next slot back by 100 ms likewise.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func slowConfig() Config {
	return Config{RatePerMinute: 1, Burst: 1, IdleTimeout: time.Hour, MaxRetries: 5, ReleasePolicy: ReleaseRefund}
}

func bookConfig(sleep func(context.Context, time.Duration) error) Config {
	return Config{RatePerMinute: 600, Burst: 1, IdleTimeout: time.Hour, MaxRetries: 5, ReleasePolicy: ReleaseRefund,
		Sleep: sleep}
}

func openShared(t *testing.T, path string, cfg Config) *SharedPacer {
	t.Helper()
	s, err := OpenShared(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// heldBooking is the booking key holds in s's key map, or nil.
func heldBooking(s *SharedPacer, key string) *Booking {
	k := &s.p.keyed
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.pending[key]; e != nil {
		return e.booking
	}
	return nil
}

func asRefusal(t *testing.T, what string, err error) *RefusedError {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) || !errors.Is(err, ErrRefused) {
		t.Fatalf("%s: got %v, want a *RefusedError", what, err)
	}
	return r
}

func sharedInfo(t *testing.T, s *SharedPacer) Info {
	t.Helper()
	i, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// AdmitKey, a retry that is not yet due, a plain refusal beyond the
// horizon, and Forget, on slowConfig (derivation at the top).
func TestSharedAdmitKeyBooksAndForgets(t *testing.T) {
	s := openShared(t, sharedPath(t, "keyed"), slowConfig())
	ctx := t.Context()
	before := SharedClockMs()
	first, err := s.AdmitKey(ctx, "first")
	after1 := SharedClockMs()
	if err != nil || first.Queued || first.Path != PathPaced || first.Ticket == nil {
		t.Fatalf("first: %+v, %v; want admitted at once (the burst)", first, err)
	}
	// a books slot t1 + 60000, t1 in [before, after1]; it needs 60000 − e
	// ms, e = now − t1, hint clamp(ceil((60000 − e − 15000)/1000), 1, 15) = 15.
	_, err = s.AdmitKey(ctx, "a")
	afterA := SharedClockMs()
	r := asRefusal(t, "a", err)
	if !r.Booked || r.RetryAfterSeconds != 15 || r.RequiredWaitMs > 60000 || r.RequiredWaitMs+(afterA-before) < 60000 {
		t.Fatalf("a: %+v, want booked, hint 15, a wait of 60000 less at most %d", *r, afterA-before)
	}
	b := heldBooking(s, "a")
	if b == nil || b.SlotMs < before+60000 || b.SlotMs > after1+60000 || b.Ticket.Spent() {
		t.Fatalf("a's booking %+v, want slot in [%d, %d]", b, before+60000, after1+60000)
	}
	state := sharedInfo(t, s)
	// a again: its booking is presented, the slot is still 60000 − e >
	// 15000 away: refused, booked, nothing debited.
	_, err = s.AdmitKey(ctx, "a")
	if r := asRefusal(t, "a's retry", err); !r.Booked || r.RetryAfterSeconds != 15 || r.RequiredWaitMs > 60000 {
		t.Fatalf("a's retry: %+v", *r)
	}
	if heldBooking(s, "a") != b {
		t.Fatal("a's retry replaced its booking")
	}
	// b needs 120000 − e > 90000: a plain refusal at the cap, nothing held
	// or debited.
	_, err = s.AdmitKey(ctx, "b")
	afterB := SharedClockMs()
	if r := asRefusal(t, "b", err); r.Booked || r.RetryAfterSeconds != 15 || r.RequiredWaitMs > 120000 ||
		r.RequiredWaitMs+(afterB-before) < 120000 {
		t.Fatalf("b: %+v, want a plain refusal needing 120000 less at most %d", *r, afterB-before)
	}
	if got := sharedInfo(t, s); got != state {
		t.Fatalf("a retry and a refusal changed the bucket: %+v, was %+v", got, state)
	}
	if s.PendingKeys() != 2 {
		t.Fatalf("pending %d, want a and b", s.PendingKeys())
	}
	if ok, err := s.Forget("b"); ok || err != nil {
		t.Fatalf("Forget(b): %v, %v; b held nothing", ok, err)
	}
	// Forgetting a refunds its token at the release time r: the bucket
	// goes from T at h to T + (r − h)·1 + 60000 at r (in debt, no cap).
	if ok, err := s.Forget("a"); !ok || err != nil {
		t.Fatalf("Forget(a): %v, %v; want a refund", ok, err)
	}
	got := sharedInfo(t, s)
	if got.HighWaterMs < state.HighWaterMs ||
		got.TokensUnits != state.TokensUnits+int64(got.HighWaterMs-state.HighWaterMs)+UnitsPerToken {
		t.Fatalf("after Forget(a): %+v, was %+v; want one token back", got, state)
	}
	if ok, err := s.Forget("a"); ok || err != nil || s.PendingKeys() != 0 || !b.Ticket.Spent() {
		t.Fatalf("Forget(a) again: %v, %v, pending %d", ok, err, s.PendingKeys())
	}
	// The slot came back: a new key books t1 + 60000 again, a's slot.
	if _, err := s.AdmitKey(ctx, "c"); !asRefusal(t, "c", err).Booked {
		t.Fatalf("c: %v, want booked", err)
	}
	if c := heldBooking(s, "c"); c == nil || c.SlotMs != b.SlotMs {
		t.Fatalf("c's booking %+v, want a's slot %d", c, b.SlotMs)
	}
	// The bucket's counters (this handle made every call on this fresh
	// file): one admission; refusals: a booked, a not yet, b, c booked
	// (2 booked); one release, refunded.
	want := Counters{Admitted: 1, Refused: 4, Booked: 2, Released: 1, Refunded: 1}
	if c, err := s.Counters(); err != nil || c != want {
		t.Fatalf("counters %+v, %v; want %+v", c, err, want)
	}
	// After Close the keyed calls that debit are refused, and Forget still
	// gives c's token back to the machine-wide bucket, as above.
	state = sharedInfo(t, s)
	_ = s.Close()
	if _, err := s.AdmitKey(ctx, "d"); !errors.Is(err, ErrClosed) {
		t.Fatalf("AdmitKey after Close: %v", err)
	}
	if ok, err := s.Forget("c"); !ok || err != nil || s.PendingKeys() != 0 {
		t.Fatalf("Forget(c) after Close: %v, %v, pending %d", ok, err, s.PendingKeys())
	}
	got, err = s.p.InfoAfterClose()
	if err != nil || got.HighWaterMs < state.HighWaterMs ||
		got.TokensUnits != state.TokensUnits+int64(got.HighWaterMs-state.HighWaterMs)+UnitsPerToken {
		t.Fatalf("after Forget(c): %+v, %v; was %+v; want one token back", got, err, state)
	}
}

// The retry countdown on slowConfig: each refusal of a key counts one of
// its 5 retries, shrinking its horizon; a fresh key has all 5.
func TestSharedAdmitKeyCountsDownRetries(t *testing.T) {
	s := openShared(t, sharedPath(t, "countdown"), slowConfig())
	ctx := t.Context()
	if d, err := s.ReserveOrBook(5); err != nil || !d.Admitted || d.Queued || d.Booked() {
		t.Fatalf("burst: %+v, %v", d, err)
	}
	if _, err := s.AdmitKey(ctx, "x"); !asRefusal(t, "x", err).Booked {
		t.Fatal("x: want booked at t1 + 60000")
	}
	// y needs 120000 − e: refused on its 1st, 2nd and 3rd attempts
	// (horizons 90000, 75000, 60000), nothing booked.
	for i := 0; i < 3; i++ {
		if _, err := s.AdmitKey(ctx, "y"); asRefusal(t, "y", err).Booked {
			t.Fatalf("y's attempt %d booked", i+1)
		}
	}
	// x gives its slot back: the next request needs 60000 − e again.
	if ok, err := s.Forget("x"); !ok || err != nil {
		t.Fatalf("Forget(x): %v, %v", ok, err)
	}
	// y's 4th attempt has 2 retries left: horizon 45000 < 60000 − e.
	state := sharedInfo(t, s)
	if _, err := s.AdmitKey(ctx, "y"); asRefusal(t, "y's 4th attempt", err).Booked {
		t.Fatal("y booked with 2 retries left")
	}
	if got := sharedInfo(t, s); got != state {
		t.Fatalf("y's refusal changed the bucket: %+v, was %+v", got, state)
	}
	// A fresh key has 5: horizon 90000, booked.
	if _, err := s.AdmitKey(ctx, "z"); !asRefusal(t, "z", err).Booked {
		t.Fatal("z: want booked")
	}
	if ok, err := s.Forget("z"); !ok || err != nil {
		t.Fatalf("Forget(z): %v, %v", ok, err)
	}
	// Forgotten, y starts over with all 5 retries: booked.
	if ok, err := s.Forget("y"); ok || err != nil {
		t.Fatalf("Forget(y): %v, %v; y held nothing", ok, err)
	}
	if _, err := s.AdmitKey(ctx, "y"); !asRefusal(t, "y after Forget", err).Booked {
		t.Fatal("y after Forget: want booked")
	}
	if ok, err := s.Forget("y"); !ok || err != nil || s.PendingKeys() != 0 {
		t.Fatalf("Forget(y): %v, %v, pending %d", ok, err, s.PendingKeys())
	}
}

// waitSharedClock sleeps until SharedClockMs() >= ms.
func waitSharedClock(ms uint64) {
	for now := SharedClockMs(); now < ms; now = SharedClockMs() {
		time.Sleep(time.Duration(ms-now) * time.Millisecond)
	}
}

// drainShared debits s (bookConfig) with ReserveOrBook until its first
// booking: the 151 or more admissions (burst 1 + debt floor 150), each
// within the bound, then the booking, made at or before `after` on the
// shared clock with its slot need ms ahead.
//
// The first refusal after an admission is always booked, just beyond the
// bound: with the previous debit's wait w' <= 15000 at a', the next at a >=
// a' needs w' + 100 − (a − a') <= 15100 ms (the derivation at the top), and
// more than the bound 15000 since it is refused; 15100 < the horizon 90000.
// Its hint is ceil((need − 15000)/1000) = 1.
func drainShared(t *testing.T, s *SharedPacer) (first *Booking, need, after uint64) {
	t.Helper()
	admitted := 0
	for i := 0; i < 10000; i++ {
		d, err := s.ReserveOrBook(5)
		after = SharedClockMs()
		if err != nil {
			t.Fatal(err)
		}
		if d.Admitted {
			if d.WaitMs > 15000 || d.Ticket == nil || d.Path != PathPaced {
				t.Fatalf("admission %d: %+v", i, d)
			}
			admitted++
			continue
		}
		if !d.Booked() || d.RequiredWaitMs <= 15000 || d.RequiredWaitMs > 15100 || d.RetryAfterSeconds != 1 {
			t.Fatalf("first refusal %+v (%+v), want booked 15001..15100 ms ahead, hint 1", d, d.Booking)
		}
		if admitted < 151 {
			t.Fatalf("%d admissions before the first booking, want at least 1 + 150", admitted)
		}
		return d.Booking, d.RequiredWaitMs, after
	}
	t.Fatal("no booking in 10000 calls")
	return
}

// Redeem and AdmitKey's redemption on bookConfig, and Close during the
// redeemed wait. A booking made at or before `after` with its slot need ms
// ahead is due (slot − now <= bound) once the shared clock reads at least
// after + need − 15000: then it is admitted, path booked, within the bound.
func TestSharedRedeemAndCloseDuringAdmitKey(t *testing.T) {
	var gated atomic.Bool
	gate := make(chan time.Duration, 1)
	s := openShared(t, sharedPath(t, "redeem"), bookConfig(func(ctx context.Context, d time.Duration) error {
		if !gated.Load() {
			return nil // the admissions of the drain: as if the timer fired
		}
		gate <- d
		<-ctx.Done()
		return ctx.Err()
	}))
	b, need, after := drainShared(t, s)
	// Fresh keys until one is refused: that one is booked. After b's
	// booking (need <= 15100) the next debit needs at most 15200, and
	// after an admission at most 15100 (drainShared's derivation); each
	// admitted key is forgotten.
	key := ""
	var needK, afterK uint64
	for i := 0; key == "" && i < 10000; i++ {
		k := fmt.Sprintf("k-%d", i)
		a, err := s.AdmitKey(t.Context(), k)
		afterK = SharedClockMs()
		if err == nil {
			if a.Wait > 15000*time.Millisecond || a.Path != PathPaced || a.Ticket == nil {
				t.Fatalf("%s: %+v", k, a)
			}
			continue
		}
		r := asRefusal(t, k, err)
		if !r.Booked || r.RequiredWaitMs <= 15000 || r.RequiredWaitMs > 15200 || r.RetryAfterSeconds != 1 {
			t.Fatalf("%s: %+v, want booked 15001..15200 ms ahead, hint 1", k, *r)
		}
		key, needK = k, r.RequiredWaitMs
	}
	if s.PendingKeys() != 1 {
		t.Fatalf("pending %d, want the booked key only", s.PendingKeys())
	}
	c1, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}

	waitSharedClock(after + need - 15000)
	d, err := s.Redeem(b)
	if err != nil || !d.Admitted || d.Path != PathBooked || d.WaitMs > 15000 || d.Ticket == nil || !b.Ticket.Spent() {
		t.Fatalf("redeem when due: %+v, %v", d, err)
	}
	if _, err := s.Redeem(b); !errors.Is(err, ErrBookingSpent) || !errors.Is(err, StatusInvalidTicket) {
		t.Fatalf("second redeem: %v, want ErrBookingSpent", err)
	}
	if ok, err := s.Release(b.Ticket); ok || err != nil {
		t.Fatalf("release of the moved ticket: %v, %v", ok, err)
	}
	if ok, err := s.Release(d.Ticket); !ok || err != nil {
		t.Fatalf("release of the redeemed slot: %v, %v", ok, err)
	}

	waitSharedClock(afterK + needK - 15000)
	gated.Store(true)
	done := make(chan error, 1)
	go func() { _, err := s.AdmitKey(t.Context(), key); done <- err }()
	closedDuringWait := false
	var keyWait time.Duration
	select {
	case w := <-gate:
		keyWait = w
		if w > 15000*time.Millisecond {
			t.Fatalf("%s's redeemed wait %v, want at most the bound", key, w)
		}
		_ = s.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("%s during Close: %v, want ErrClosed", key, err)
		}
		closedDuringWait = true
	case err := <-done:
		// Only if the slot had come (15 s after the booking): no wait.
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		_ = s.Close()
	}
	for name, err := range map[string]error{
		"AdmitKey":      func() error { _, err := s.AdmitKey(t.Context(), key); return err }(),
		"ReserveOrBook": func() error { _, err := s.ReserveOrBook(5); return err }(),
		"Redeem":        func() error { _, err := s.Redeem(b); return err }(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if s.PendingKeys() != 0 {
		t.Fatalf("pending %d: the key was admitted", s.PendingKeys())
	}
	// Since c1: b redeemed (after a wait unless the slot had come) and
	// released; the key redeemed, after a wait that Close cut short
	// (refunded). Each wait given is counted in its bucket.
	want := c1
	want.Admitted += 2
	want.Redeemed += 2
	countWait(&want, d.WaitMs)
	want.Released++
	want.Refunded++
	if closedDuringWait {
		countWait(&want, uint64(keyWait/time.Millisecond))
		want.Released++
		want.Refunded++
	}
	if c, err := s.p.CountersAfterClose(); err != nil || c != want {
		t.Fatalf("counters %+v, %v; want %+v", c, err, want)
	}
}

// Bookings are the bucket's: another bucket, another pacer and another
// handle refuse them. Through the API, a booking is checked in Go as one
// of this handle's (ErrInvalidInput, as for Pacer.Redeem); below it, the
// library's own check (pacer_shared_redeem, pacer_shared_release) refuses
// another bucket's booking with StatusForeignTicket, and accepts one of
// the same bucket through another handle.
func TestSharedBookingOfAnotherBucketIsRefused(t *testing.T) {
	pathA := sharedPath(t, "bucket-a")
	a1 := openShared(t, pathA, slowConfig())
	a2 := openShared(t, pathA, slowConfig())
	other := openShared(t, sharedPath(t, "bucket-b"), slowConfig())
	clock := uint64(0)
	cfg := slowConfig()
	cfg.Clock = func() uint64 { return clock }
	local, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if d, err := a1.ReserveOrBook(5); err != nil || !d.Admitted {
		t.Fatalf("burst: %+v, %v", d, err)
	}
	d, err := a1.ReserveOrBook(5)
	if err != nil || !d.Booked() {
		t.Fatalf("booking on a: %+v, %v", d, err)
	}
	b := d.Booking
	// An in-process booking: its burst, then 60000 ms ahead at clock 0.
	if d, err := local.ReserveOrBook(0, 5); err != nil || !d.Admitted {
		t.Fatalf("local burst: %+v, %v", d, err)
	}
	ld, err := local.ReserveOrBook(0, 5)
	if err != nil || !ld.Booked() || ld.Booking.SlotMs != 60000 {
		t.Fatalf("local booking: %+v, %v", ld, err)
	}
	stateA, stateB := sharedInfo(t, a1), sharedInfo(t, other)
	for name, redeem := range map[string]func() (Decision, error){
		"another bucket":              func() (Decision, error) { return other.Redeem(b) },
		"another handle, same bucket": func() (Decision, error) { return a2.Redeem(b) },
		"an in-process pacer":         func() (Decision, error) { return local.Redeem(b, 0) },
		"an in-process booking":       func() (Decision, error) { return a1.Redeem(ld.Booking) },
	} {
		d, err := redeem()
		var fe *FieldError
		if !errors.Is(err, ErrInvalidInput) || !errors.As(err, &fe) || fe.Field != "booking" || d.Admitted {
			t.Errorf("%s: %+v, %v; want ErrInvalidInput", name, d, err)
		}
	}
	if ok, err := other.Release(b.Ticket); ok || err != nil {
		t.Fatalf("release on another bucket: %v, %v", ok, err)
	}
	if c, err := other.Counters(); err != nil || c != (Counters{}) {
		t.Fatalf("the other bucket counted %+v, %v", c, err)
	}
	// The library's check, below Go's: b's numbers and owner tag handed to
	// pacer_shared_redeem / pacer_shared_release of the other bucket, and
	// to pacer_redeem of the in-process pacer.
	tk := b.ticket
	if _, err := other.p.mem.redeem(tk.seq, tk.debitUnits, tk.tag, b.slot, 0, other.p); !errors.Is(err, StatusForeignTicket) {
		t.Errorf("pacer_shared_redeem on another bucket: %v, want StatusForeignTicket", err)
	}
	if _, err := other.p.mem.release(tk.seq, tk.debitUnits, tk.tag, 0); !errors.Is(err, StatusForeignTicket) {
		t.Errorf("pacer_shared_release on another bucket: %v, want StatusForeignTicket", err)
	}
	if _, err := local.mem.redeem(tk.seq, tk.debitUnits, tk.tag, b.slot, 0, local); !errors.Is(err, StatusForeignTicket) {
		t.Errorf("pacer_redeem of an in-process pacer: %v, want StatusForeignTicket", err)
	}
	// Through a2 (same bucket) the library accepts it: not yet (60000 − e
	// ms away), a refusal that changes nothing.
	if d, err := a2.p.mem.redeem(tk.seq, tk.debitUnits, tk.tag, b.slot, 0, a2.p); err != nil || d.Admitted ||
		d.RetryAfterSeconds != 15 {
		t.Errorf("pacer_shared_redeem through another handle on the bucket: %+v, %v", d, err)
	}
	if got := sharedInfo(t, other); got != stateB {
		t.Fatalf("the other bucket changed: %+v, was %+v", got, stateB)
	}
	if got := sharedInfo(t, a1); got != stateA {
		t.Fatalf("bucket a changed: %+v, was %+v", got, stateA)
	}
	if b.Ticket.Spent() {
		t.Fatal("a refused booking was spent")
	}
	// Its own handle: not yet, then released once.
	if d, err := a1.Redeem(b); err != nil || d.Admitted || d.RetryAfterSeconds != 15 {
		t.Fatalf("redeem on a: %+v, %v", d, err)
	}
	if ok, err := a1.Release(b.Ticket); !ok || err != nil {
		t.Fatalf("release on a: %v, %v", ok, err)
	}
	if _, err := a1.Redeem(b); !errors.Is(err, ErrBookingSpent) {
		t.Fatalf("redeem after release: %v", err)
	}
}

// A nil SharedPacer's keyed calls answer as a closed one's.
func TestSharedNilBookingCalls(t *testing.T) {
	var s *SharedPacer
	if _, err := s.AdmitKey(t.Context(), "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("AdmitKey: %v", err)
	}
	if _, err := s.Forget("k"); !errors.Is(err, ErrClosed) {
		t.Errorf("Forget: %v", err)
	}
	if _, err := s.ReserveOrBook(5); !errors.Is(err, ErrClosed) {
		t.Errorf("ReserveOrBook: %v", err)
	}
	if _, err := s.Redeem(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Redeem: %v", err)
	}
	if s.PendingKeys() != 0 {
		t.Error("PendingKeys")
	}
}

// debitLine is one debit on the bucket, from C or Go: its seq (the bucket's
// debit counter) and, for a booking, its slot.
type debitLine struct {
	who    string
	booked bool
	slot   uint64
	waitMs uint64 // an admission's wait
	seq    uint32
}

// parseBookLines reads `test_shm book` output: "admitted WAIT SEQ",
// "booked SLOT SEQ" or "refused HINT".
func parseBookLines(t *testing.T, out []byte) (debits []debitLine, refused int) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "refused" {
			refused++
			continue
		}
		if len(f) != 3 || (f[0] != "admitted" && f[0] != "booked") {
			t.Fatalf("helper line %q", line)
		}
		v, err1 := strconv.ParseUint(f[1], 10, 64)
		seq, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("helper line %q", line)
		}
		d := debitLine{who: "C", booked: f[0] == "booked", seq: uint32(seq)}
		if d.booked {
			d.slot = v
		} else {
			d.waitMs = v
		}
		debits = append(debits, d)
	}
	return debits, refused
}

// A C process (test_shm book, bookConfig) and this process book on one
// bucket, in turn and at the same time: 200 C calls, then 150 C calls
// while 4 goroutines make 30 AdmitKey calls each, then 20 C calls; 490
// calls in all. Expectations (derivation at the top):
//
//   - nothing is refused: the k-th booking is at most 15000 + 100·k ms
//     ahead, and k <= 490 − 151 = 339 gives 48900 < 90000, the horizon;
//   - every call debits once, so the seqs of all admissions and bookings,
//     C's and Go's, are exactly 1..490 (a fresh bucket starts at 0, and
//     the refund policy never takes a seq back);
//   - at least 1 + 150 are admitted, and admitted + booked = 490;
//   - FIFO across processes: sorted by seq, two bookings' slots differ by
//     exactly 100 ms per debit between them;
//   - the window bound (SPEC §6.1) on the booked slots: any W ms holds at
//     most 600·W/60000 + 1 of them;
//   - Go's bookings are released by Forget (one refund each), and C's next
//     debit sees it: seq 491 and, if booked, slot last + 100·(491 − last
//     seq) − 100·refunds.
func TestSharedBookingsFIFOWithACProcess(t *testing.T) {
	helper := os.Getenv("PACER_SHM_HELPER")
	if helper == "" {
		t.Skip("PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it to the C helper)")
	}
	path := sharedPath(t, "fifo")
	s := openShared(t, path, bookConfig(func(context.Context, time.Duration) error { return nil }))
	book := func(n int) *exec.Cmd { return exec.Command(helper, "book", path, strconv.Itoa(n)) }
	var cDebits []debitLine
	cRefused := 0
	collect := func(out []byte, err error) {
		if err != nil {
			t.Fatalf("helper: %v", err)
		}
		d, r := parseBookLines(t, out)
		cDebits = append(cDebits, d...)
		cRefused += r
	}
	collect(book(200).Output())

	const goroutines, perGoroutine = 4, 30
	type goResult struct {
		key string
		a   Admission
		err error
	}
	results := make([]goResult, goroutines*perGoroutine)
	cmd := book(150)
	var cOut strings.Builder
	cmd.Stdout = &cOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			for i := 0; i < perGoroutine; i++ {
				key := fmt.Sprintf("go-%d-%d", g, i)
				a, err := s.AdmitKey(context.Background(), key)
				results[g*perGoroutine+i] = goResult{key, a, err}
			}
		})
	}
	wg.Wait()
	err := cmd.Wait()
	collect([]byte(cOut.String()), err)
	collect(book(20).Output())

	debits := append([]debitLine(nil), cDebits...)
	goBooked, goAdmitted, goAfterWait := 0, 0, 0
	for _, r := range results {
		var refused *RefusedError
		switch {
		case r.err == nil:
			if r.a.Ticket == nil || r.a.Wait > 15000*time.Millisecond {
				t.Fatalf("%s admitted: %+v", r.key, r.a)
			}
			goAdmitted++
			if r.a.Queued {
				goAfterWait++
			}
			debits = append(debits, debitLine{who: "Go", seq: r.a.Ticket.seq, waitMs: uint64(r.a.Wait / time.Millisecond)})
		case errors.As(r.err, &refused) && refused.Booked:
			b := heldBooking(s, r.key)
			if b == nil || b.SlotMs < refused.RequiredWaitMs {
				t.Fatalf("%s: booking %+v for %+v", r.key, b, *refused)
			}
			goBooked++
			debits = append(debits, debitLine{who: "Go", booked: true, slot: b.SlotMs, seq: b.ticket.seq})
		default:
			t.Fatalf("%s: %v, want admitted or booked", r.key, r.err)
		}
	}
	const calls = 200 + 150 + goroutines*perGoroutine + 20
	if cRefused != 0 || len(debits) != calls {
		t.Fatalf("%d refused by C, %d debits; want 0 and %d", cRefused, len(debits), calls)
	}
	sort.Slice(debits, func(i, j int) bool { return debits[i].seq < debits[j].seq })
	var booked []debitLine
	cBooked := 0
	for i, d := range debits {
		if d.seq != uint32(i+1) {
			t.Fatalf("debit %d has seq %d: the seqs are not 1..%d", i, d.seq, calls)
		}
		if d.booked {
			booked = append(booked, d)
			if d.who == "C" {
				cBooked++
			}
		}
	}
	admitted := calls - len(booked)
	if admitted < 151 || cBooked == 0 || goBooked == 0 {
		t.Fatalf("%d admitted, %d booked by C, %d by Go; want >= 151, >= 1, >= 1", admitted, cBooked, goBooked)
	}
	for k := 1; k < len(booked); k++ {
		p, q := booked[k-1], booked[k]
		if q.slot != p.slot+100*uint64(q.seq-p.seq) {
			t.Fatalf("%s's slot %d (seq %d) after %s's %d (seq %d): want %d ms apart", q.who, q.slot, q.seq, p.who,
				p.slot, p.seq, 100*(q.seq-p.seq))
		}
	}
	for _, w := range []uint64{0, 99, 999, 4999} {
		worst := 0
		for i, j := 0, 0; i < len(booked); i++ {
			for booked[i].slot-booked[j].slot > w {
				j++
			}
			worst = max(worst, i-j+1)
		}
		if uint64(worst) > 600*w/60000+1 {
			t.Fatalf("window %d ms holds %d booked slots, more than %d", w, worst, 600*w/60000+1)
		}
	}
	// The bucket's counters, C's calls and Go's alike (the file keeps
	// them): every debit above, admitted with its wait, or booked (a
	// refusal that booked); Go's AdmitKey calls were each one debit (no
	// redemption: every key was new). Nothing was released yet.
	var want Counters
	for _, d := range debits {
		if d.booked {
			want.Refused++
			want.Booked++
			continue
		}
		want.Admitted++
		countWait(&want, d.waitMs)
	}
	if c, err := s.Counters(); err != nil || c != want {
		t.Fatalf("the bucket's counters %+v, %v; want %+v (Go: %d admitted, %d after a wait, %d booked)", c, err, want,
			goAdmitted, goAfterWait, goBooked)
	}
	refunds := 0
	for _, r := range results {
		ok, err := s.Forget(r.key)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			refunds++
		}
	}
	if refunds != goBooked || s.PendingKeys() != 0 {
		t.Fatalf("%d refunds, %d pending; want %d and 0", refunds, s.PendingKeys(), goBooked)
	}
	out, err := book(1).Output()
	next, _ := parseBookLines(t, out)
	if err != nil || len(next) != 1 || next[0].seq != calls+1 {
		t.Fatalf("C after the refunds: %q, %v; want seq %d", out, err, calls+1)
	}
	last := booked[len(booked)-1]
	if want := last.slot + 100*uint64(calls+1-last.seq) - 100*uint64(refunds); next[0].booked && next[0].slot != want {
		t.Fatalf("C's booking after %d refunds: slot %d, want %d", refunds, next[0].slot, want)
	}
	turns := 0 // how often the line passes between C and Go (scheduling decides; not checked)
	for k := 1; k < len(booked); k++ {
		if booked[k].who != booked[k-1].who {
			turns++
		}
	}
	t.Logf("%d admitted, %d booked (C %d, Go %d; the line changes hands %d times), %d refunded by Forget; C's next: %+v",
		admitted, len(booked), cBooked, goBooked, turns, refunds, next[0])
}

// countWait adds one admission's wait to c's wait counts, by the bounds
// of docs/metrics.md written out here (10, 50, 100, 500, 1000, 2500, 5000,
// 10000 ms; a bucket holds the waits above the bound before it up to its
// own): an immediate admission adds nothing, a wait above 10000 ms only
// to AdmittedAfterWait and WaitMsTotal.
func countWait(c *Counters, waitMs uint64) {
	if waitMs == 0 {
		return
	}
	c.AdmittedAfterWait++
	c.WaitMsTotal += waitMs
	for i, bound := range []uint64{10, 50, 100, 500, 1000, 2500, 5000, 10000} {
		if waitMs <= bound {
			c.WaitBuckets[i]++
			return
		}
	}
}
