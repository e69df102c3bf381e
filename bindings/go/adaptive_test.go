package pacer_test

// Adaptive pacing (SPEC §14) on the in-process pacer: Observe, RateInForce,
// the refill at the rate in force, and the checks of the two Config fields
// and of the outcome. Expected rates are worked out by hand from the law's
// statement (core/src/adaptive.rs), never read back from the code under test.
//
// The defaults (60/min, 5 retries, bound 4833 ms: hint cap 4 s, refusal
// schedule 5·4000 = 20000 ms) make ⌈60000/20000⌉ = 3/min the lowest rate
// that can refuse, so the rate in force is clamped to [max(floor, 3),
// ceiling]: [10, 60] with floor 10, [40, 60] with floor 40 (the default
// ceiling, 0, is the rate).
//
//   - Searching (from creation, L = 60): 60·2ⁿ·(5000 + r)/5000 ≥ 60, clamped
//     to the ceiling: 60 at any instant.
//   - 40 openings at 1000 (minute 0), then a throttle at 1000, end the first
//     search: E = max(through 40, recent 40) = 40, L = min(40, 60) = 40,
//     probing (again). The pause: the origin becomes max(1000, 0 + 60000) =
//     60000 (the counts moved to minute 1: the 40 are the count before),
//     and until then the rate reads the lowest (10, or 40); from 60000 it
//     is ℓ = 40 itself through the hold and the wait (w = max(240000,
//     80·60000/40 = 120000)/12 = 20000: the step only from 60000 + 80000).
//   - A throttle within 60000 ms of the origin changes nothing (at 1000 and
//     119999); an opening at 1000 is counted at max(1000, 60000), minute 1.
//   - 40 more openings at 60000 (minute 1: 41; Δ = 0, no rise), then a
//     throttle at 120000 (minute 2, not held): the 41 are the count before,
//     E = through = 41 ≥ R = 40: L = 40 − max(1, ⌊40/16⌋) = 38 (40 with
//     floor 40).
//   - A throttle with nothing counted: B = min(R, ℓ) = 60, L = 60 −
//     max(1, ⌊60/16⌋) = 57, read from the pause's end.

import (
	"errors"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// adaptiveConfig is SPEC §2's defaults (rate 60, burst 10, idle 120 s, 5
// retries, refund: wait bound 4833 ms) with adaptation on between floor
// and the rate (ceiling 0).
func adaptiveConfig(clock *fakeClock, floor int) pacer.Config {
	cfg := defaults(clock, noSleep)
	cfg.AdaptiveFloorPerMin = floor
	return cfg
}

func mustObserve(t *testing.T, p *pacer.Pacer, o pacer.Outcome, now uint64) int {
	t.Helper()
	return must(t, func() (int, error) { return p.Observe(o, now) }, "Observe(%v, %d)", o, now)
}

func mustRateInForce(t *testing.T, p *pacer.Pacer, now uint64) int {
	t.Helper()
	return must(t, func() (int, error) { return p.RateInForce(now) }, "RateInForce(%d)", now)
}

func observeOpened(t *testing.T, p *pacer.Pacer, n int, now uint64, want int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if got := mustObserve(t, p, pacer.OutcomeOpened, now); got != want {
			t.Fatalf("opening %d at %d: %d, want %d", i, now, got, want)
		}
	}
}

// The law's sequence, created at 0 with floor 10 and then floor 40.
func TestAdaptiveObserveSequence(t *testing.T) {
	for _, tc := range []struct {
		floor int
		low   int // the lowest rate, read in the pause: the floor
		last  int // L = 40 − ⌊40/16⌋ = 38, or the floor 40
	}{{10, 10, 38}, {40, 40, 40}} {
		p := mustNew(t, adaptiveConfig(&fakeClock{}, tc.floor))
		if got := mustRateInForce(t, p, 0); got != 60 {
			t.Fatalf("floor %d: rate in force at creation = %d, want 60", tc.floor, got)
		}
		observeOpened(t, p, 40, 1000, 60)
		steps := []struct {
			name    string
			outcome pacer.Outcome
			now     uint64
			want    int
		}{
			{"the first throttle ends the search at L = 40, paused", pacer.OutcomeThrottled, 1000, tc.low},
			{"the same instant: in the hold", pacer.OutcomeThrottled, 1000, tc.low},
			{"an opening in the hold: counted, no rise", pacer.OutcomeOpened, 1000, tc.low},
		}
		steps2 := []struct {
			name    string
			outcome pacer.Outcome
			now     uint64
			want    int
		}{
			{"59999 ms after the origin: in the hold", pacer.OutcomeThrottled, 119999, 40},
			{"60000 ms after: E = 41 ≥ R, L = R − ⌊R/16⌋", pacer.OutcomeThrottled, 120000, tc.last},
		}
		for _, s := range steps {
			if got := mustObserve(t, p, s.outcome, s.now); got != s.want {
				t.Fatalf("floor %d, %s: Observe(%v, %d) = %d, want %d", tc.floor, s.name, s.outcome, s.now, got, s.want)
			}
		}
		if got := mustRateInForce(t, p, 59999); got != tc.low {
			t.Fatalf("floor %d: in the pause = %d, want %d", tc.floor, got, tc.low)
		}
		if got := mustRateInForce(t, p, 60000); got != 40 {
			t.Fatalf("floor %d: after the pause = %d, want 40", tc.floor, got)
		}
		observeOpened(t, p, 40, 60000, 40)
		for _, s := range steps2 {
			if got := mustObserve(t, p, s.outcome, s.now); got != s.want {
				t.Fatalf("floor %d, %s: Observe(%v, %d) = %d, want %d", tc.floor, s.name, s.outcome, s.now, got, s.want)
			}
		}
		if got := mustRateInForce(t, p, 120000); got != tc.last {
			t.Fatalf("floor %d: RateInForce after the sequence = %d, want %d", tc.floor, got, tc.last)
		}
	}
}

// The first search's end as in the sequence (L = 40, the pause to 60000,
// the 40 openings of minute 0 the count before minute 1). 20 openings at
// 60000 (minute 1; Δ = 0, in the hold: no rise) read ℓ = 40. A throttle
// at 120000 (minute 2, Δ = 60000: not held, before the step at 120000
// after the origin): R = 40, minute 0's count dropped, minute 1's 20 the
// count before: E = through = 20 < R = 40, so L = 20; with floor 25, 25.
func TestAdaptiveCountExplainsTheThrottle(t *testing.T) {
	for _, tc := range []struct{ floor, want int }{{10, 20}, {25, 25}} {
		p := mustNew(t, adaptiveConfig(&fakeClock{}, tc.floor))
		observeOpened(t, p, 40, 1000, 60)
		if got := mustObserve(t, p, pacer.OutcomeThrottled, 1000); got != tc.floor {
			t.Fatalf("floor %d: the search's end (paused): %d, want %d", tc.floor, got, tc.floor)
		}
		observeOpened(t, p, 20, 60000, 40)
		if got := mustRateInForce(t, p, 119999); got != 40 {
			t.Fatalf("floor %d: at 119999: %d, want 40", tc.floor, got)
		}
		if got := mustObserve(t, p, pacer.OutcomeThrottled, 120000); got != tc.want {
			t.Fatalf("floor %d: the throttle at 120000: %d, want %d", tc.floor, got, tc.want)
		}
	}
}

// After the throttle at 1000 (L = 40, the pause: origin 60000, probing
// again) a rise shows when a minute's count passes 40 + ⌊40/8⌋ + 1 = 46 at
// least 60000 ms after the origin. `more` openings at 90000 (minute 1) are
// in the hold (40 stays); one at 120000 (minute 2: minute 0's 40 dropped,
// minute 1's `more` the count before) makes through = max(1, more). 47 >
// 46: search again from the rate in force, 40 (Δ = 60000, before the step
// at Δ = 60000 + max(240000, 120000)/12 = 80000), origin 120000, doubling
// every 20000 ms: 40·(20000 + 5000)/20000 = 50 at 125000, 40·30000/20000 =
// 60 at 130000 (the ceiling). 46: still probing, ℓ = 40 at both.
func TestAdaptiveRiseSearchesAgain(t *testing.T) {
	for _, tc := range []struct {
		more           int
		at125k, at130k int
	}{{47, 50, 60}, {46, 40, 40}} {
		p := mustNew(t, adaptiveConfig(&fakeClock{}, 10))
		observeOpened(t, p, 40, 1000, 60)
		if got := mustObserve(t, p, pacer.OutcomeThrottled, 1000); got != 10 {
			t.Fatalf("throttle (paused: the lowest): %d", got)
		}
		observeOpened(t, p, tc.more, 90000, 40)
		observeOpened(t, p, 1, 120000, 40)
		if got := mustRateInForce(t, p, 125000); got != tc.at125k {
			t.Fatalf("%d more: at 125000: %d, want %d", tc.more, got, tc.at125k)
		}
		if got := mustRateInForce(t, p, 130000); got != tc.at130k {
			t.Fatalf("%d more: at 130000: %d, want %d", tc.more, got, tc.at130k)
		}
	}
}

// Reserve refills at the rate in force: with burst 1, 30 openings and a
// throttle between two reservations at 61000 (minute 1: E = max(30, 30 +
// 0) = 30, L = min(30, 60) = 30; a minute after the creation, so no pause:
// origin max(61000, 0 + 60000) = 61000, the rate ℓ = 30 at once) make the
// second wait 60000/30 = 2000 ms (1000 ms at 60/min), within the 4833 ms
// bound.
func TestAdaptiveRefillFollowsTheRate(t *testing.T) {
	clock := &fakeClock{}
	cfg := adaptiveConfig(clock, 10)
	cfg.Burst = 1
	p := mustNew(t, cfg)
	mustAdmitAfter(t, p, 61000, 0)
	observeOpened(t, p, 30, 61000, 60)
	if got := mustObserve(t, p, pacer.OutcomeThrottled, 61000); got != 30 {
		t.Fatalf("throttle = %d, want 30", got)
	}
	mustAdmitAfter(t, p, 61000, 2000)
}

// The clock's ends: a throttle at 0 with nothing counted sets L = 60 −
// max(1, ⌊60/16⌋) = 57 and pauses (origin 0 + 60000): it reads the lowest,
// 10; an opening at 2⁶⁴ − 1 (long past the hold and the wait: the step,
// 57 + ⌊57/2⌋ + 2 = 87, clamped to the ceiling) reads 60; a throttle
// there, at the probe's step: R = 60, E = through = 1 < 60, and L held
// through the hold and the wait, so L = max(1, 57) = 57, read at once.
func TestAdaptiveClockEnds(t *testing.T) {
	p := mustNew(t, adaptiveConfig(&fakeClock{}, 10))
	const top = ^uint64(0)
	for _, s := range []struct {
		outcome pacer.Outcome
		now     uint64
		want    int
	}{{pacer.OutcomeThrottled, 0, 10}, {pacer.OutcomeOpened, top, 60}, {pacer.OutcomeThrottled, top, 57}} {
		if got := mustObserve(t, p, s.outcome, s.now); got != s.want {
			t.Fatalf("Observe(%v, %d) = %d, want %d", s.outcome, s.now, got, s.want)
		}
	}
	if got := mustRateInForce(t, p, top); got != 57 {
		t.Fatalf("RateInForce(2⁶⁴ − 1) = %d, want 57", got)
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
// the first real throttle afterwards still ends the search with nothing
// counted (L = 60 − max(1, ⌊60/16⌋) = 57, read from the pause's end, 60000;
// the throttle itself, in the pause, answers the lowest, 10).
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
	if got := mustObserve(t, p, pacer.OutcomeThrottled, 1000); got != 10 {
		t.Fatalf("first throttle after bad outcomes = %d, want 10", got)
	}
	if got := mustRateInForce(t, p, 60000); got != 57 {
		t.Fatalf("after the pause = %d, want 57", got)
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

// A ceiling above the rate lets the rate climb: before any throttle the
// search curve is 60·2ⁿ·(5000 + r)/5000 (n = ⌊t/5000⌋, r = t mod 5000): 60
// at 0, 66 at 500, 90 at 2500, 120 at 5000, 240 at 10000, 480 at 15000, 960
// at 20000 (600 with ceiling 600); ceiling 70 clamps 72 at 1000 to 70; with
// the default ceiling it stays 60. Three openings at 0 and a throttle at
// 20000 (floor 1: lowest max(1, 3) = 3) end the search at L = min(3, 600) =
// 3 (E = max(3, 3)); the pause (origin 60000) reads the lowest, 3, too.
func TestAdaptiveCeiling(t *testing.T) {
	cfg := adaptiveConfig(&fakeClock{}, 1)
	cfg.AdaptiveCeilingPerMin = 600
	wide := mustNew(t, cfg)
	for _, s := range []struct {
		now  uint64
		want int
	}{{0, 60}, {500, 66}, {2500, 90}, {5000, 120}, {10000, 240}, {15000, 480}, {20000, 600}, {100_000, 600}} {
		if got := mustRateInForce(t, wide, s.now); got != s.want {
			t.Fatalf("ceiling 600 at %d: %d, want %d", s.now, got, s.want)
		}
	}
	observeOpened(t, wide, 3, 0, 60)
	if got := mustObserve(t, wide, pacer.OutcomeThrottled, 20000); got != 3 {
		t.Fatalf("the search's end: %d, want 3", got)
	}
	cfg = adaptiveConfig(&fakeClock{}, 10)
	cfg.AdaptiveCeilingPerMin = 70
	high := mustNew(t, cfg)
	if got := mustRateInForce(t, high, 1000); got != 70 {
		t.Fatalf("at 1 s with ceiling 70: %d, want 70", got)
	}
	if got := mustRateInForce(t, high, 500); got != 66 {
		t.Fatalf("at 0.5 s with ceiling 70: %d, want 66", got)
	}
	capped := mustNew(t, adaptiveConfig(&fakeClock{}, 10))
	if got := mustRateInForce(t, capped, 100_000); got != 60 {
		t.Fatalf("at 100 s with the default ceiling: %d, want 60", got)
	}
}
