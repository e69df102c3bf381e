package pacer_test

// Adaptive pacing (SPEC §14) on the in-process pacer: Observe, RateInForce,
// the refill at the rate in force, and the checks of the two Config fields
// and of the outcome. Expected rates are worked out by hand from the law
// (core/src/adaptive.rs): a throttle a minute or more after the last
// decrease (or the first one) sets the rate to max(floor, ⌊rate·8/10⌋); one
// sooner holds it; an opened connection changes nothing. Before the first
// throttle the curve sits at or above the configured rate, and the default
// ceiling (0: the rate) clamps it there.

import (
	"errors"
	"testing"
	"time"

	"pacer"
)

// adaptiveConfig is SPEC §2's defaults (rate 60, burst 10, idle 120 s, 5
// retries, refund: wait bound 4833 ms) with adaptation on between floor
// and the rate (ceiling 0).
func adaptiveConfig(clock *fakeClock, floor int) pacer.Config {
	cfg := pacer.DefaultConfig()
	cfg.AdaptiveFloorPerMin = floor
	cfg.Clock = clock.Now
	cfg.Sleep = noSleep
	return cfg
}

func mustObserve(t *testing.T, p *pacer.Pacer, o pacer.Outcome, now uint64) int {
	t.Helper()
	rate, err := p.Observe(o, now)
	if err != nil {
		t.Fatalf("Observe(%v, %d): %v", o, now, err)
	}
	return rate
}

func mustRateInForce(t *testing.T, p *pacer.Pacer, now uint64) int {
	t.Helper()
	rate, err := p.RateInForce(now)
	if err != nil {
		t.Fatalf("RateInForce(%d): %v", now, err)
	}
	return rate
}

// The law's sequence, created at 0 with floor 10 and then floor 40.
func TestAdaptiveObserveSequence(t *testing.T) {
	for _, tc := range []struct {
		floor int
		last  int // the second decrease: ⌊48·8/10⌋ = 38, or the floor 40
	}{{10, 38}, {40, 40}} {
		p := mustNew(t, adaptiveConfig(&fakeClock{}, tc.floor))
		steps := []struct {
			name    string
			outcome pacer.Outcome
			now     uint64
			want    int
		}{
			{"first throttle: ⌊60·8/10⌋", pacer.OutcomeThrottled, 1000, 48},
			{"the same instant: nothing written", pacer.OutcomeThrottled, 1000, 48},
			{"opened changes nothing", pacer.OutcomeOpened, 1000, 48},
			{"59999 ms after the decrease: a hold", pacer.OutcomeThrottled, 60999, 48},
			{"60000 ms after the decrease: ⌊48·8/10⌋, or the floor", pacer.OutcomeThrottled, 61000, tc.last},
		}
		if got := mustRateInForce(t, p, 0); got != 60 {
			t.Fatalf("floor %d: rate in force at creation = %d, want 60", tc.floor, got)
		}
		for _, s := range steps {
			if got := mustObserve(t, p, s.outcome, s.now); got != s.want {
				t.Fatalf("floor %d, %s: Observe(%v, %d) = %d, want %d", tc.floor, s.name, s.outcome, s.now, got, s.want)
			}
		}
		if got := mustRateInForce(t, p, 61000); got != tc.last {
			t.Fatalf("floor %d: RateInForce after the sequence = %d, want %d", tc.floor, got, tc.last)
		}
	}
}

// Reserve refills at the rate in force: with burst 1, a throttle between
// two reservations at 1000 makes the second wait ⌈60000/48⌉ = 1250 ms
// (1000 ms at 60/min), within the 4833 ms bound.
func TestAdaptiveRefillFollowsTheRate(t *testing.T) {
	clock := &fakeClock{}
	cfg := adaptiveConfig(clock, 10)
	cfg.Burst = 1
	p := mustNew(t, cfg)
	if d := mustReserve(t, p, 1000); !d.Admitted || d.WaitMs != 0 {
		t.Fatalf("first: %+v", d)
	}
	if got := mustObserve(t, p, pacer.OutcomeThrottled, 1000); got != 48 {
		t.Fatalf("throttle = %d, want 48", got)
	}
	if d := mustReserve(t, p, 1000); !d.Admitted || d.WaitMs != 1250 {
		t.Fatalf("second: %+v, want admitted after 1250 ms", d)
	}
}

// Adaptation off (floor 0, whatever the ceiling): Observe returns the rate
// and changes nothing, so the second reservation waits 1000 ms at 60/min.
func TestAdaptiveOff(t *testing.T) {
	for _, ceiling := range []int{0, 90} {
		clock := &fakeClock{}
		cfg := adaptiveConfig(clock, 0)
		cfg.Burst = 1
		cfg.AdaptiveCeilingPerMin = ceiling
		p := mustNew(t, cfg)
		mustReserve(t, p, 1000)
		for _, o := range []pacer.Outcome{pacer.OutcomeThrottled, pacer.OutcomeThrottled, pacer.OutcomeOpened} {
			if got := mustObserve(t, p, o, 1000); got != 60 {
				t.Fatalf("ceiling %d: Observe(%v) = %d, want 60", ceiling, o, got)
			}
		}
		if got := mustRateInForce(t, p, 1000); got != 60 {
			t.Fatalf("ceiling %d: RateInForce = %d", ceiling, got)
		}
		if d := mustReserve(t, p, 1000); !d.Admitted || d.WaitMs != 1000 {
			t.Fatalf("ceiling %d: second: %+v, want admitted after 1000 ms", ceiling, d)
		}
	}
}

// An outcome other than the two is ErrInvalidInput and changes nothing:
// the first real throttle afterwards is still the first decrease (48), and
// a second reservation still waits as the untouched bucket says.
func TestAdaptiveBadOutcome(t *testing.T) {
	p := mustNew(t, adaptiveConfig(&fakeClock{}, 10))
	for _, o := range []pacer.Outcome{0, 3, pacer.Outcome(^uint32(0))} {
		rate, err := p.Observe(o, 1000)
		var fe *pacer.FieldError
		if !errors.Is(err, pacer.ErrInvalidInput) || !errors.As(err, &fe) || fe.Field != "outcome" || rate != 0 {
			t.Fatalf("Observe(%d) = %d, %v; want ErrInvalidInput naming outcome", uint32(o), rate, err)
		}
		if o.String() != "unknown" {
			t.Fatalf("Outcome(%d).String() = %q", uint32(o), o.String())
		}
	}
	if got := mustRateInForce(t, p, 1000); got != 60 {
		t.Fatalf("after bad outcomes: %d", got)
	}
	if got := mustObserve(t, p, pacer.OutcomeThrottled, 1000); got != 48 {
		t.Fatalf("first throttle after bad outcomes = %d, want 48", got)
	}
	if pacer.OutcomeOpened.String() != "opened" || pacer.OutcomeThrottled.String() != "throttled" {
		t.Fatalf("%q %q", pacer.OutcomeOpened, pacer.OutcomeThrottled)
	}
}

// Observe and RateInForce after Close, or on a Pacer not made by New, are
// ErrClosed; a bad outcome on a closed pacer is still the input's error.
func TestAdaptiveClosed(t *testing.T) {
	p := mustNew(t, adaptiveConfig(&fakeClock{}, 10))
	_ = p.Close()
	if _, err := p.Observe(pacer.OutcomeThrottled, 0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Observe after Close: %v", err)
	}
	if _, err := p.RateInForce(0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("RateInForce after Close: %v", err)
	}
	if _, err := p.Observe(7, 0); !errors.Is(err, pacer.ErrInvalidInput) {
		t.Fatalf("bad outcome after Close: %v", err)
	}
	var zero pacer.Pacer
	if _, err := zero.Observe(pacer.OutcomeOpened, 0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Observe on a zero Pacer: %v", err)
	}
	var none *pacer.Pacer
	if _, err := none.RateInForce(0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("RateInForce on a nil Pacer: %v", err)
	}
}

// The two Config fields are checked like the others: a *FieldError naming
// the field, wrapping ErrInvalidConfig, and nothing made.
func TestAdaptiveBadConfigs(t *testing.T) {
	base := pacer.DefaultConfig() // rate 60
	for _, tc := range []struct {
		floor, ceiling int
		field          string
	}{
		{-1, 0, "AdaptiveFloorPerMin"},
		{61, 0, "AdaptiveFloorPerMin"}, // above the rate
		{10, -1, "AdaptiveCeilingPerMin"},
		{10, 59, "AdaptiveCeilingPerMin"},  // below the rate
		{10, 601, "AdaptiveCeilingPerMin"}, // above 600
		{0, 601, "AdaptiveCeilingPerMin"},  // out of range even with adaptation off
		{0, -5, "AdaptiveCeilingPerMin"},
	} {
		cfg := base
		cfg.AdaptiveFloorPerMin, cfg.AdaptiveCeilingPerMin = tc.floor, tc.ceiling
		p, err := pacer.New(cfg)
		var fe *pacer.FieldError
		if p != nil || !errors.Is(err, pacer.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("floor %d ceiling %d: %v, %v; want a FieldError on %s", tc.floor, tc.ceiling, p, err, tc.field)
		}
	}
	// Pacing off (rate 0) cannot adapt: any floor is above the rate.
	off := pacer.Config{IdleTimeout: time.Minute, AdaptiveFloorPerMin: 1}
	if _, err := pacer.New(off); !errors.Is(err, pacer.ErrInvalidConfig) {
		t.Errorf("rate 0 with a floor: %v", err)
	}
	// The edges are accepted: floor = rate, ceiling = rate, ceiling 600,
	// and a ceiling below the rate with adaptation off (ignored).
	for _, ok := range [][2]int{{60, 0}, {60, 60}, {1, 600}, {0, 30}} {
		cfg := base
		cfg.Notifier = quiet()
		cfg.AdaptiveFloorPerMin, cfg.AdaptiveCeilingPerMin = ok[0], ok[1]
		p, err := pacer.New(cfg)
		if err != nil {
			t.Errorf("floor %d ceiling %d: %v", ok[0], ok[1], err)
			continue
		}
		if got := p.Config(); got.AdaptiveFloorPerMin != ok[0] || got.AdaptiveCeilingPerMin != ok[1] {
			t.Errorf("Config() = %+v", got)
		}
		_ = p.Close()
	}
}

// A ceiling above the rate lets the rate climb past it with time: before
// any throttle the search curve is 60 + ⌊d³/50000000⌋ with d the
// deciseconds since creation, so at d = 1000 (100 s) it reads 60 + 20 = 80,
// clamped to a ceiling of 70; with the default ceiling it stays 60.
func TestAdaptiveCeiling(t *testing.T) {
	cfg := adaptiveConfig(&fakeClock{}, 10)
	cfg.AdaptiveCeilingPerMin = 70
	high := mustNew(t, cfg)
	if got := mustRateInForce(t, high, 0); got != 60 {
		t.Fatalf("at 0: %d", got)
	}
	if got := mustRateInForce(t, high, 100_000); got != 70 {
		t.Fatalf("at 100 s with ceiling 70: %d, want 70", got)
	}
	capped := mustNew(t, adaptiveConfig(&fakeClock{}, 10))
	if got := mustRateInForce(t, capped, 100_000); got != 60 {
		t.Fatalf("at 100 s with the default ceiling: %d, want 60", got)
	}
}
