package pacer_test

// Counters (pacer_get_metrics), WaitBoundsMs and LevelAt (pacer_level_at)
// of an in-process pacer, each value worked out by hand.

import (
	"errors"
	"testing"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// The bounds of docs/metrics.md, written out.
func TestWaitBoundsMs(t *testing.T) {
	want := [pacer.WaitBuckets]uint64{10, 50, 100, 500, 1000, 2500, 5000, 10000}
	if got := pacer.WaitBoundsMs(); got != want {
		t.Fatalf("WaitBoundsMs %v, want %v", got, want)
	}
	// A copy: changing it changes nothing.
	got := pacer.WaitBoundsMs()
	got[0] = 99
	if pacer.WaitBoundsMs() != want {
		t.Fatal("WaitBoundsMs changed through a copy")
	}
}

// Rate 60 (60 units a ms), burst 2, the default idle and retries (bound
// 4833), clock injected:
//
//	Reserve(0) ×3          at once ×2 (2 → 0 tokens), the third after 1000 ms (−1)
//	LevelAt(0)             −60000 units
//	LevelAt(500)           −60000 + 500·60 = −30000
//	LevelAt(1000)          0
//	LevelAt(5000)          capped at the burst: 120000
//	Reserve(10)            −60000 + 10·60 − 60000 = −119400 units: after 119400/60 = 1990 ms
//	LevelAt(0)             behind the latest reading (10): read at 10, −119400
//	Observe opened ×2, throttled ×1 at 10 (adaptation off): counted
//
// Counters: admitted 4, 2 after a wait (1000 in (500, 1000], bucket 4;
// 1990 in (1000, 2500], bucket 5; 2990 ms), opened 2, throttled 1. The
// cumulative counts: ≤ 500 ms the 2 immediate, ≤ 1000 ms 3, ≤ 2500 ms 4.
func TestCountersAndLevel(t *testing.T) {
	clock := &fakeClock{}
	cfg := pacer.DefaultConfig()
	cfg.Burst = 2
	cfg.Clock = clock.Now
	p := mustNew(t, cfg)
	for i, wait := range []uint64{0, 0, 1000} {
		if d := mustReserve(t, p, 0); !d.Admitted || d.WaitMs != wait {
			t.Fatalf("reserve %d: %+v, want after %d", i, d, wait)
		}
	}
	level := func(now uint64, want int64) {
		t.Helper()
		if got, err := p.LevelAt(now); err != nil || got != want {
			t.Fatalf("LevelAt(%d) = %d, %v; want %d", now, got, err, want)
		}
	}
	level(0, -60000)
	level(500, -30000)
	level(1000, 0)
	level(5000, 2*pacer.UnitsPerToken)
	if d := mustReserve(t, p, 10); !d.Admitted || d.WaitMs != 1990 {
		t.Fatalf("reserve at 10: %+v, want after 1990", d)
	}
	level(0, -119400)
	for _, o := range []pacer.Outcome{pacer.OutcomeOpened, pacer.OutcomeOpened, pacer.OutcomeThrottled} {
		if rate, err := p.Observe(o, 10); err != nil || rate != 60 {
			t.Fatalf("Observe(%v): %d, %v", o, rate, err)
		}
	}
	// An unknown outcome counts nothing.
	if _, err := p.Observe(pacer.Outcome(9), 10); !errors.Is(err, pacer.ErrInvalidInput) {
		t.Fatalf("Observe(9): %v", err)
	}
	want := pacer.Counters{Admitted: 4, AdmittedAfterWait: 2, Opened: 2, Throttled: 1, WaitMsTotal: 2990,
		WaitBuckets: [pacer.WaitBuckets]uint64{4: 1, 5: 1}}
	c := mustCounters(t, p)
	if c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
	for i, le := range []uint64{2, 2, 2, 2, 3, 4, 4, 4} {
		if got := c.WaitLe(i); got != le {
			t.Errorf("WaitLe(%d) = %d, want %d", i, got, le)
		}
	}
	// Reading changes nothing.
	if again := mustCounters(t, p); again != want {
		t.Fatalf("counters %+v after a read, want %+v", again, want)
	}
	_ = p.Close()
	if _, err := p.LevelAt(10); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("LevelAt after Close: %v", err)
	}
	var none *pacer.Pacer
	if _, err := none.LevelAt(10); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("LevelAt of nil: %v", err)
	}
}
