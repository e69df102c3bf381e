package pacer_test

// Close while an Admit or AdmitKey waits for its slot: the slot must come
// back, and the caller sees its own cancellation (ctx.Err()) or ErrClosed,
// never a lost token. The sleep is injected (gatedSleep: it returns only
// when its context ends), and the clock is fixed, so nothing depends on
// how fast the machine runs.

import (
	"context"
	"errors"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// waitingAdmit starts p.Admit(ctx) in a goroutine and returns once it is
// asleep in gate, queued for want; its result arrives on the channel.
func waitingAdmit(t *testing.T, gate *gatedSleep, want time.Duration, admit func() error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- admit() }()
	if d := <-gate.entered; d != want {
		t.Fatalf("queued for %v, want %v", d, want)
	}
	return done
}

// redeemingKey is drained on a fixed clock with a gated sleep, after k's
// first attempt booked slot 5000 (−5 tokens at 0): at t = 1000 k's retry,
// p.AdmitKey(ctx, "k"), redeems the booking and is asleep in the gate for
// the 4000 ms left; its result arrives on the channel.
func redeemingKey(t *testing.T, ctx context.Context) (*pacer.Pacer, <-chan error) {
	t.Helper()
	clock := &fakeClock{}
	gate := newGatedSleep()
	p := drained(t, clock, gate.Sleep)
	if _, err := p.AdmitKey(t.Context(), "k"); !errors.Is(err, pacer.ErrRefused) {
		t.Fatalf("first attempt: %v", err)
	}
	clock.Set(1000)
	return p, waitingAdmit(t, gate, 4*time.Second, func() error { _, err := p.AdmitKey(ctx, "k"); return err })
}

// longOneTaken is long (rate 60, burst 1, bound 15000) on a fixed clock at
// t = 0 with a gated sleep, after one Admit took its one token.
func longOneTaken(t *testing.T) (*pacer.Pacer, *gatedSleep) {
	t.Helper()
	gate := newGatedSleep()
	p := mustNew(t, long(&fakeClock{}, gate.Sleep))
	if _, err := p.Admit(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p, gate
}

// cancelledWhileWaiting is longOneTaken after a second Admit, queued for
// 1000 ms, was cancelled during its wait: it returned context.Canceled.
func cancelledWhileWaiting(t *testing.T) *pacer.Pacer {
	t.Helper()
	p, gate := longOneTaken(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := waitingAdmit(t, gate, time.Second, func() error { _, err := p.Admit(ctx); return err })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	return p
}

// long (rate 60, burst 1, bound 15000) at t = 0: the first Admit takes the
// one token (tokens 0), the second is queued 1000 ms (tokens −1, in units
// −60000). A refund of that slot at t = 0 puts the token back: tokens 0.
func closedWhileWaiting(t *testing.T, cancelToo bool) {
	p, gate := longOneTaken(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := waitingAdmit(t, gate, time.Second, func() error { _, err := p.Admit(ctx); return err })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if cancelToo {
		// The sequence: Close, then the caller cancels. Either may
		// end the wait first; both answers are documented.
		cancel()
		if err := <-done; !errors.Is(err, pacer.ErrClosed) && !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrClosed or context.Canceled", err)
		}
	} else if err := <-done; !errors.Is(err, pacer.ErrClosed) {
		// Close alone wakes the wait.
		t.Fatalf("got %v, want ErrClosed", err)
	}
	c, err := p.CountersAfterClose()
	// The queued admission's 1000 ms wait was given (counted when granted,
	// in (500, 1000], bucket 4), though its slot came back.
	want := pacer.Counters{Admitted: 2, AdmittedAfterWait: 1, Released: 1, Refunded: 1, WaitMsTotal: 1000,
		WaitBuckets: [pacer.WaitBuckets]uint64{4: 1}}
	if err != nil || c != want {
		t.Fatalf("counters %+v, %v; want %+v (the waiting slot refunded)", c, err, want)
	}
	if info, err := p.InfoAfterClose(); err != nil || info.TokensUnits != 0 {
		t.Fatalf("info %+v, %v; want 0 tokens (the slot given back)", info, err)
	}
}

func TestCloseThenCancelWaitingAdmitRefunds(t *testing.T) { closedWhileWaiting(t, true) }

func TestCloseWakesWaitingAdmitAndRefunds(t *testing.T) { closedWhileWaiting(t, false) }

// A cancel before Close: the caller's own cancellation is reported, and
// the slot refunded once (Close finds nothing more to give back).
func TestCancelThenCloseReportsTheCancel(t *testing.T) {
	p := cancelledWhileWaiting(t)
	_ = p.Close()
	if c, err := p.CountersAfterClose(); err != nil || c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v, %v; want one refund", c, err)
	}
}

// AdmitKey redeeming a booking (drained defaults: k books slot 5000; at
// t = 1000 its retry waits 4000) and closed during that wait: the booked
// token comes back (−5 tokens at 0; released at 1000: −300000 + 1000·60 +
// 60000 = −180000 units), the key is forgotten, AdmitKey returns ErrClosed.
func TestCloseWakesWaitingAdmitKeyAndRefunds(t *testing.T) {
	p, done := redeemingKey(t, t.Context())
	_ = p.Close()
	if err := <-done; !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if info, err := p.InfoAfterClose(); err != nil || info.TokensUnits != -180000 {
		t.Fatalf("info %+v, %v; want −180000 units", info, err)
	}
	if c, err := p.CountersAfterClose(); err != nil || c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v, %v; want one refund", c, err)
	}
	if p.PendingKeys() != 0 {
		t.Fatalf("pending %d, want 0", p.PendingKeys())
	}
}

// Tickets issued before Close still release after it: an admission that
// will not open its connection gives its slot back to a closed pacer too.
func TestReleaseAfterClose(t *testing.T) {
	p, a := admittedOnce(t)
	_ = p.Close()
	if !a.Release() {
		t.Fatal("Release after Close should refund")
	}
	if a.Release() {
		t.Fatal("a second Release must report false")
	}
	// burst 1: 0 tokens after the admission, 1 after the refund.
	if info, err := p.InfoAfterClose(); err != nil || info.TokensUnits != pacer.UnitsPerToken {
		t.Fatalf("info %+v, %v; want one token", info, err)
	}
	if _, err := p.Reserve(0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Reserve after Close: %v", err)
	}
}
