package pacer_test

// Adaptive pacing (SPEC §14) on the fleet's bucket, against real
// redis-servers, on every engine, by the law in core/src/adaptive.rs. The
// server's clock runs, but each test runs well within a minute of the
// bucket's creation. fleetConfig's budget (3 retries, hint cap 2 s:
// schedule 6000 ms) makes ⌈60000/6000⌉ = 10 the lowest rate that can
// refuse; with floor 10 the rate in force is clamped to [10, 60]. A new
// bucket searches from L = 60, at the default ceiling 60 at any instant; a
// throttle with nothing counted ends the search with L = 60 − max(1,
// ⌊60/16⌋) = 57, and, ending the first search less than a minute after the
// creation t₀, pauses: the origin becomes t₀ + 60000 and the rate reads the
// lowest, 10, until then (every answer here, read at the server's clock,
// is in the pause); a throttle or an opening in the hold after the origin
// changes nothing but the count.

import (
	"context"
	"errors"
	"strconv"
	"testing"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// adaptiveFleetConfig is fleetConfig (rate 60, burst 2, idle 30 s, 3
// retries: bound 2000 ms) adapting between floor and the rate.
func adaptiveFleetConfig(floor int) pacer.Config {
	cfg := fleetConfig()
	cfg.AdaptiveFloorPerMin = floor
	return cfg
}

func mustRedisObserve(t *testing.T, r *pacer.RedisPacer, o pacer.Outcome) int {
	t.Helper()
	return must(t, func() (int, error) { return r.Observe(context.Background(), o) }, "Observe(%v)", o)
}

func TestRedisAdaptive(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			s := engineServer(t, engine)
			ctx := context.Background()
			a, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "fleet", Config: adaptiveFleetConfig(10)})
			b, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "fleet", Config: adaptiveFleetConfig(10)})
			if created, err := a.Create(ctx); err != nil || !created {
				t.Fatalf("Create = %v, %v", created, err)
			}
			info := mustRedisInfo(t, a)
			// ADAPT 10 0 is stored with the ceiling as the rate, searching
			// from its creation.
			if info.RateInForce != 60 || info.AdaptiveFloorPerMin != 10 || info.AdaptiveCeilingPerMin != 60 ||
				info.OriginMs > info.NowMs {
				t.Fatalf("a new adaptive bucket: %+v", info)
			}
			created := info.OriginMs
			if rate, err := b.RateInForce(ctx); rate != 60 || err != nil {
				t.Fatalf("b.RateInForce = %d, %v", rate, err)
			}
			// One proxy's throttle slows the other: to the lowest, 10, in
			// the pause.
			if got := mustRedisObserve(t, a, pacer.OutcomeThrottled); got != 10 {
				t.Fatalf("a throttled: %d, want 10", got)
			}
			if rate, err := b.RateInForce(ctx); rate != 10 || err != nil {
				t.Fatalf("b.RateInForce after a's throttle = %d, %v", rate, err)
			}
			if got := mustRedisObserve(t, b, pacer.OutcomeThrottled); got != 10 {
				t.Fatalf("b throttled within the hold: %d, want 10", got)
			}
			if got := mustRedisObserve(t, b, pacer.OutcomeOpened); got != 10 {
				t.Fatalf("b opened: %d, want 10", got)
			}
			// One decrease, the pause's: the origin t₀ + 60000, still
			// ahead of the server's clock (b's throttle held, not a second
			// decrease from its own instant).
			info = mustRedisInfo(t, b)
			if info.RateInForce != 10 || info.OriginMs != created+60000 || info.NowMs >= info.OriginMs {
				t.Fatalf("after the throttle and the hold: %+v (created %d)", info, created)
			}
			// The adaptive settings are the bucket's configuration: a
			// fixed-rate client, or another floor, is the mismatch error.
			for _, floor := range []int{0, 20} {
				c, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "fleet", Config: adaptiveFleetConfig(floor)})
				if _, err := c.Reserve(ctx); !errors.Is(err, pacer.ErrRedisPacer) {
					t.Fatalf("floor %d on an adaptive bucket: %v", floor, err)
				}
			}
			// A bad outcome sends nothing and changes nothing.
			if _, err := a.Observe(ctx, 9); !errors.Is(err, pacer.ErrInvalidInput) {
				t.Fatalf("Observe(9): %v", err)
			}
			var nilCtx context.Context // nil: the bad input under test
			if _, err := a.Observe(nilCtx, pacer.OutcomeOpened); !errors.Is(err, pacer.ErrInvalidInput) {
				t.Fatalf("Observe(nil ctx): %v", err)
			}
			if _, err := a.RateInForce(nilCtx); !errors.Is(err, pacer.ErrInvalidInput) {
				t.Fatalf("RateInForce(nil ctx): %v", err)
			}
			// Observe on a missing bucket is the server's error.
			m, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "missing", Config: adaptiveFleetConfig(10)})
			if _, err := m.Observe(ctx, pacer.OutcomeThrottled); !errors.Is(err, pacer.ErrRedisPacer) {
				t.Fatalf("Observe on a missing key: %v", err)
			}
		})
	}
}

// RESERVE and BOOK carry ADAPT (after BOOK's retries_left). The budget is
// longConfig's (idle 300 s, 5 retries: bound 15000 ms, hint cap 15 s, a
// schedule of 75000 ms, so ⌈60000/75000⌉ = 1 is the lowest rate that can
// refuse) at rate 60, burst 1, floor 1: rate in force within [1, 60].
// After the first reserve, 30 openings reported and then a throttle end
// the first search (L = min(E, 60), E = max(through, recent) = 30, or 29
// should the clock's minute turn among them) less than a minute after the
// creation: the pause, in which the rate in force is the lowest, 1,
// answered by the throttle. A reservation after it, read at 1/min, would
// wait 60000 ms less what passed since the first debit, beyond the
// 15000 ms bound unless 45 s pass: refused, where at 60/min it waits at
// most 1000 ms.
func TestRedisAdaptiveRefill(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			s := engineServer(t, engine)
			cfg := longConfig()
			cfg.RatePerMinute = 60
			cfg.Burst = 1
			cfg.AdaptiveFloorPerMin = 1
			r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "refill", Config: cfg})
			if d := mustRedisReserve(t, r); !d.Admitted || d.WaitMs != 0 {
				t.Fatalf("first: %+v", d)
			}
			for i := 0; i < 30; i++ {
				if got := mustRedisObserve(t, r, pacer.OutcomeOpened); got != 60 {
					t.Fatalf("opening %d while searching: %d, want 60", i, got)
				}
			}
			if rate := mustRedisObserve(t, r, pacer.OutcomeThrottled); rate != 1 {
				t.Fatalf("throttle: %d, want 1 (the pause)", rate)
			}
			if d := mustRedisReserve(t, r); d.Admitted {
				t.Fatalf("after the throttle: %+v, want refused (60000 ms at 1/min > the 15000 ms bound)", d)
			}
			// A keyed request books through BOOK … ADAPT on the same bucket.
			k, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "refill", Config: cfg})
			if _, err := k.AdmitKey(context.Background(), "req"); err != nil {
				var refused *pacer.RefusedError
				if !errors.As(err, &refused) {
					t.Fatalf("AdmitKey on the adaptive bucket: %v", err)
				}
				_, _ = k.Forget(context.Background(), "req")
			}
		})
	}
}

// Adaptation off: Observe and RateInForce send nothing (a missing key is
// no error) and answer the rate.
func TestRedisAdaptiveOffAsksNothing(t *testing.T) {
	s := startRedis(t, "")
	r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "never-made", Config: fleetConfig()})
	ctx := context.Background()
	for _, o := range []pacer.Outcome{pacer.OutcomeThrottled, pacer.OutcomeOpened} {
		if got := mustRedisObserve(t, r, o); got != 60 {
			t.Fatalf("Observe(%v) = %d", o, got)
		}
	}
	if rate, err := r.RateInForce(ctx); rate != 60 || err != nil {
		t.Fatalf("RateInForce = %d, %v", rate, err)
	}
	if n, err := s.client(t).Exists(ctx, "never-made").Result(); n != 0 || err != nil {
		t.Fatalf("the key exists: %d, %v", n, err)
	}
	_ = r.Close()
	if _, err := r.Observe(ctx, pacer.OutcomeOpened); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Observe after Close: %v", err)
	}
	if _, err := r.RateInForce(ctx); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("RateInForce after Close: %v", err)
	}
}

// While Redis fails, local reports to its fallback pacer, adaptive at
// ⌊rate/N⌋ between ⌊floor/N⌋ and ⌊ceiling/N⌋: with N = 2, 30 between 5
// and 30 (the lowest rate that can refuse, 10, above the floor 5). A
// throttle with nothing counted ends its search (L = 30 − max(1, ⌊30/16⌋) =
// 29) less than a minute after the fallback pacer began: the pause, which
// reads the lowest, 10; one in the hold changes nothing, and the opening
// answers 10 too; open and closed learn nothing and answer the configured
// rate. RateInForce needs Redis, as Info.
func TestRedisAdaptiveDuringAnOutage(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx := context.Background()
	local, _ := openRedis(t, pacer.RedisOptions{Addr: addr, Config: adaptiveFleetConfig(10), FleetSize: 2})
	for _, o := range []pacer.Outcome{pacer.OutcomeThrottled, pacer.OutcomeThrottled, pacer.OutcomeOpened} {
		if got := mustRedisObserve(t, local, o); got != 10 {
			t.Fatalf("local %v: %d, want 10", o, got)
		}
	}
	if _, err := local.RateInForce(ctx); !errors.Is(err, pacer.ErrRedisUnavailable) {
		t.Fatalf("RateInForce during an outage: %v", err)
	}
	for _, policy := range []pacer.FailurePolicy{pacer.FailOpen, pacer.FailClosed} {
		r, _ := openRedis(t, pacer.RedisOptions{Addr: addr, Config: adaptiveFleetConfig(10), OnFailure: policy})
		if got := mustRedisObserve(t, r, pacer.OutcomeThrottled); got != 60 {
			t.Fatalf("%s: %d, want 60", policy, got)
		}
	}
}

// OpenRedis checks the adaptive fields as New does.
func TestRedisAdaptiveBadConfig(t *testing.T) {
	cfg := adaptiveFleetConfig(61)
	if _, err := pacer.OpenRedis(pacer.RedisOptions{Addr: "127.0.0.1:1", Key: "k", Config: cfg}); !errors.Is(err, pacer.ErrInvalidConfig) {
		t.Fatalf("floor above the rate: %v", err)
	}
}
