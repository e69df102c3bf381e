package pacer

import (
	"errors"
	"testing"
)

// A shared pacer's rate in force is the bucket's (SPEC §14): a throttle
// reported through one handle lowers the rate read through another. The
// shared clock runs, but the test runs well within the law's 60000 ms hold
// (core/src/adaptive.rs): before the first throttle the default ceiling
// holds the search at 60; a throttle with nothing counted ends the search
// with L = 60 − max(1, ⌊60/16⌋) = 57, and as it ends the first search
// within a minute of the file's creation it pauses: the origin becomes the
// creation + 60000 and, until then, every handle reads the lowest rate,
// max(floor 10, 3) = 10 (every answer here, read at the caller's clock, is
// in the pause); a throttle or an opening in the hold changes nothing.
func TestSharedAdaptiveAcrossHandles(t *testing.T) {
	path := sharedPath(t, "adaptive")
	cfg := DefaultConfig()
	cfg.AdaptiveFloorPerMin = 10
	var handles [2]*SharedPacer
	for i := range handles {
		p, err := OpenShared(path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		handles[i] = p
	}
	a, b := handles[0], handles[1]
	check := func(what string, got int, err error, want int) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s = %d, %v; want %d", what, got, err, want)
		}
	}
	rate, err := b.RateInForce()
	check("b.RateInForce before any throttle", rate, err, 60)
	rate, err = a.Observe(OutcomeThrottled)
	check("a.Observe(throttled)", rate, err, 10)
	rate, err = b.RateInForce()
	check("b.RateInForce after a's throttle", rate, err, 10)
	rate, err = b.Observe(OutcomeThrottled) // within the hold: nothing changes
	check("b.Observe(throttled)", rate, err, 10)
	rate, err = b.Observe(OutcomeOpened)
	check("b.Observe(opened)", rate, err, 10)
	rate, err = a.RateInForce()
	check("a.RateInForce", rate, err, 10)

	// The adaptive settings are part of the file's configuration.
	for _, other := range []struct{ floor, ceiling int }{{0, 0}, {20, 0}, {10, 90}} {
		c := DefaultConfig()
		c.AdaptiveFloorPerMin, c.AdaptiveCeilingPerMin = other.floor, other.ceiling
		if p, err := OpenShared(path, c); !errors.Is(err, StatusSharedConfigMismatch) {
			if p != nil {
				_ = p.Close()
			}
			t.Fatalf("floor %d ceiling %d on an adaptive file: %v, want StatusSharedConfigMismatch",
				other.floor, other.ceiling, err)
		}
	}
	// A bad outcome changes nothing; a closed handle is ErrClosed.
	if _, err := a.Observe(0); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("Observe(0): %v", err)
	}
	_ = a.Close()
	if _, err := a.Observe(OutcomeThrottled); !errors.Is(err, ErrClosed) {
		t.Fatalf("Observe after Close: %v", err)
	}
	if _, err := a.RateInForce(); !errors.Is(err, ErrClosed) {
		t.Fatalf("RateInForce after Close: %v", err)
	}
	rate, err = b.RateInForce()
	check("b.RateInForce after a closed", rate, err, 10)
	var none *SharedPacer
	if _, err := none.Observe(OutcomeOpened); !errors.Is(err, ErrClosed) {
		t.Fatalf("nil SharedPacer: %v", err)
	}
}

// With adaptation off a shared pacer's Observe returns the rate and
// changes nothing.
func TestSharedAdaptiveOff(t *testing.T) {
	p, err := OpenShared(sharedPath(t, "fixed"), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, o := range []Outcome{OutcomeThrottled, OutcomeOpened} {
		if rate, err := p.Observe(o); rate != 60 || err != nil {
			t.Fatalf("Observe(%v) = %d, %v; want 60", o, rate, err)
		}
	}
	if rate, err := p.RateInForce(); rate != 60 || err != nil {
		t.Fatalf("RateInForce = %d, %v", rate, err)
	}
}
