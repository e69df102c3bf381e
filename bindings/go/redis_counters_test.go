package pacer_test

// RedisPacer.Counters: what this client's calls got, counted in Go
// (docs/metrics.md, "Whose counts"), against a real redis-server.

import (
	"context"
	"errors"
	"fmt"
	"testing"

	pacer "github.com/connpacer/pacer/bindings/go"
)

func mustRedisCounters(t *testing.T, r *pacer.RedisPacer) pacer.RedisCounters {
	t.Helper()
	return must(t, r.Counters, "Counters")
}

// minuteConfig (rate 1: a token per 60000 ms; burst 2, lowered to 1
// here; bound 15000 ms, hint cap 15 s, 5 retries: refusing, since
// 5·15·1000·1 >= 60000; ReserveOrBook(3)'s horizon 15000 + 3·15000 =
// 60000 ms), on the server's clock, e ms after the first call:
//
//	Reserve               admitted at once (the burst)
//	ReserveOrBook(3)      the slot 60000 − e ms away: past the bound, within the horizon: booked
//	ReserveOrBook(3)      120000 − e: past the horizon: refused, nothing held
//	Redeem(booking)       its slot 60000 − e away, still past the bound: not yet (a refusal)
//	Release(booking's)    refunded (refund policy)
//	Observe(opened)       counted (adaptation off: nothing sent)
//
// Admitted 1; refused 3, 1 of them booked; 1 release, refunded; 1 opened:
// each answer as shown unless 45 s pass after the first call.
//
// A client of a port nothing listens on, FailLocal (its fallback pacer is
// the same configuration, FleetSize 1, on this process's clock): Reserve
// admitted at once by the fallback, Reserve refused by it (60000 ms less
// what passed > 15000 unless 45 s pass), the admission released
// (refunded): admitted 1, refused 1, 2 fallbacks, 1 release refunded.
func TestRedisCounters(t *testing.T) {
	s := startRedis(t, "")
	ctx := context.Background()
	cfg := minuteConfig()
	cfg.Burst = 1
	r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: cfg, OnFailure: pacer.FailClosed})
	if c := mustRedisCounters(t, r); c != (pacer.RedisCounters{}) {
		t.Fatalf("a new client counted %+v", c)
	}
	if d := mustRedisReserve(t, r); !d.Admitted || d.Queued || d.Fallback != "" {
		t.Fatalf("first: %+v", d)
	}
	bd, err := r.ReserveOrBook(ctx, 3)
	if err != nil || !bd.Booked() || bd.Fallback != "" {
		t.Fatalf("second: %+v, %v; want booked by the server", bd, err)
	}
	if d, err := r.ReserveOrBook(ctx, 3); err != nil || d.Admitted || d.Booked() {
		t.Fatalf("third: %+v, %v; want refused", d, err)
	}
	if d, err := r.Redeem(ctx, bd.Booking); err != nil || d.Admitted {
		t.Fatalf("early redeem: %+v, %v; want not yet", d, err)
	}
	if ok, err := r.Release(ctx, bd.Booking.Ticket); !ok || err != nil {
		t.Fatalf("release of the booking: %v, %v", ok, err)
	}
	if _, err := r.Observe(ctx, pacer.OutcomeOpened); err != nil {
		t.Fatal(err)
	}
	// Bad input counts nothing: an unknown outcome, a spent ticket.
	if _, err := r.Observe(ctx, pacer.Outcome(7)); !errors.Is(err, pacer.ErrInvalidInput) {
		t.Fatalf("Observe(7): %v", err)
	}
	if ok, err := r.Release(ctx, bd.Booking.Ticket); ok || err != nil {
		t.Fatalf("second release: %v, %v", ok, err)
	}
	want := pacer.RedisCounters{Counters: pacer.Counters{Admitted: 1, Refused: 3, Booked: 1, Released: 1, Refunded: 1,
		Opened: 1}}
	if c := mustRedisCounters(t, r); c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}

	down, _ := openRedis(t, pacer.RedisOptions{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), Config: cfg})
	first := mustRedisReserve(t, down)
	if !first.Admitted || first.Fallback != pacer.FailLocal || first.Ticket == nil {
		t.Fatalf("down, first: %+v", first)
	}
	if d := mustRedisReserve(t, down); d.Admitted || d.Fallback != pacer.FailLocal {
		t.Fatalf("down, second: %+v", d)
	}
	if ok, err := down.Release(ctx, first.Ticket); !ok || err != nil {
		t.Fatalf("down, release: %v, %v", ok, err)
	}
	want = pacer.RedisCounters{Counters: pacer.Counters{Admitted: 1, Refused: 1, Released: 1, Refunded: 1},
		Fallbacks: 2}
	if c := mustRedisCounters(t, down); c != want {
		t.Fatalf("down: counters %+v, want %+v", c, want)
	}

	// After Close, and on a RedisPacer not made by OpenRedis: ErrClosed.
	_ = r.Close()
	var none *pacer.RedisPacer
	for name, p := range map[string]*pacer.RedisPacer{"closed": r, "nil": none, "zero": {}} {
		if c, err := p.Counters(); !errors.Is(err, pacer.ErrClosed) || c != (pacer.RedisCounters{}) {
			t.Errorf("%s: %+v, %v; want ErrClosed", name, c, err)
		}
	}
}

// The waits of the server's admissions, counted in the histogram's
// buckets: slowConfig's burst 2 admitted at once, then rate 1/min with
// the default idle and retries shapes the third after the bound 4833 ms
// (in (2500, 5000], bucket 6), shaped (as long as less than 55 s pass).
func TestRedisCountersWaits(t *testing.T) {
	s := startRedis(t, "")
	cfg := pacer.DefaultConfig()
	cfg.RatePerMinute = 1
	cfg.Burst = 2
	r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: cfg})
	for range 2 {
		if d := mustRedisReserve(t, r); !d.Admitted || d.Queued {
			t.Fatalf("burst: %+v", d)
		}
	}
	if d := mustRedisReserve(t, r); !d.Admitted || d.Path != pacer.PathShaped || d.WaitMs != 4833 {
		t.Fatalf("third: %+v, want shaped after 4833 ms", d)
	}
	want := pacer.RedisCounters{Counters: pacer.Counters{Admitted: 3, AdmittedAfterWait: 1, Shaped: 1,
		WaitMsTotal: 4833, WaitBuckets: [pacer.WaitBuckets]uint64{6: 1}}}
	if c := mustRedisCounters(t, r); c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
}
