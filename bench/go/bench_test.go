package pacerbench

// Every case runs under b.RunParallel, so -cpu 1 is one goroutine and
// -cpu 2 two goroutines on one shared limiter; ns/op is then wall time
// over the calls of all goroutines. Each call's answer is checked (admitted
// or refused as configured), so a case that stops doing its job fails
// instead of timing something else; the check is one branch, the same on
// every side. (A failure prints single fields, never a whole result: a
// result handed to fmt would be copied out of its registers and stack
// slots on every call, not only on failure.)
//
// Admitting cases drive the clock explicitly where the API takes one, 1000
// ms per call (one token a second is exactly one per call): one goroutine
// counts in a local variable; two share one atomic counter, each call
// taking the next reading, so the readings stay within a few calls of
// order and the burst of 10 absorbs the rest. x/time/rate gets the same
// readings as time.Time values, with the same counter.

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// cfg is the pacer side of every case: 60 a minute (one token a second),
// burst 10, the defaults' idle timeout and retries (bound 4833 ms).
func cfg() pacer.Config { return pacer.DefaultConfig() }

// limiter is x/time/rate's equivalent of cfg: one token a second, burst 10.
func limiter() *rate.Limiter { return rate.NewLimiter(rate.Every(time.Second), 10) }

// epoch is time zero for the x/time/rate cases driven like ours.
var epoch = time.Unix(1_700_000_000, 0)

// measure runs body under RunParallel and reports, besides ns/op and the
// integer -benchmem figures, exact allocations and bytes per call
// (allocs/call, B/call) from the runtime's counters.
func measure(b *testing.B, body func(pb *testing.PB)) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	b.RunParallel(body)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/call")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "B/call")
}

// kept receives the last ticket or reservation of each goroutine, as a
// caller keeps it to refund or cancel later: what a call returns by
// pointer then escapes to the heap as in real use, never onto the stack.
var (
	keptTicket      atomic.Pointer[pacer.Ticket]
	keptReservation atomic.Pointer[rate.Reservation]
)

// clock is the explicit clock of one benchmark run, in ms.
type clock struct {
	solo   bool          // one goroutine: each counts in its own variable
	shared atomic.Uint64 // more: the one counter they all advance
}

func newClock() *clock { return &clock{solo: runtime.GOMAXPROCS(0) == 1} }

// next advances the clock 1000 ms and returns the reading; local is the
// calling goroutine's own count.
func (c *clock) next(local *uint64) uint64 {
	if c.solo {
		*local += 1000
		return *local
	}
	return c.shared.Add(1000)
}

func newPacer(b *testing.B, c pacer.Config) *pacer.Pacer {
	p, err := pacer.New(c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// BenchmarkFloorCgoNoop: an empty cgo call.
func BenchmarkFloorCgoNoop(b *testing.B) {
	measure(b, func(pb *testing.PB) {
		for pb.Next() {
			Noop()
		}
	})
}

// BenchmarkPacerReserve: (*Pacer).Reserve admitting at once, a ticket each.
func BenchmarkPacerReserve(b *testing.B) {
	p := newPacer(b, cfg())
	c := newClock()
	measure(b, func(pb *testing.PB) {
		var now uint64
		var keep *pacer.Ticket
		for pb.Next() {
			now = c.next(&now)
			d, err := p.Reserve(now)
			if err != nil || !d.Admitted || d.WaitMs != 0 || d.Ticket == nil {
				b.Errorf("Reserve(%d): admitted %v, wait %d ms, %v; want admitted at once", now, d.Admitted, d.WaitMs, err)
				return
			}
			keep = d.Ticket
		}
		keptTicket.Store(keep)
	})
}

// drained is a pacer at cfg that refuses at t=0: its 14 admissions of the
// instant (10 at once, 4 queued up to the bound) are taken.
func drained(b *testing.B) *pacer.Pacer {
	p := newPacer(b, cfg())
	for i := range 14 {
		if d, err := p.Reserve(0); err != nil || !d.Admitted {
			b.Fatalf("reservation %d: admitted %v, %v", i, d.Admitted, err)
		}
	}
	return p
}

// BenchmarkPacerReserveRefuse: Reserve on a drained pacer at a fixed clock.
func BenchmarkPacerReserveRefuse(b *testing.B) {
	p := drained(b)
	measure(b, func(pb *testing.PB) {
		for pb.Next() {
			d, err := p.Reserve(0)
			if err != nil || d.Admitted || d.RetryAfterSeconds == 0 {
				b.Errorf("Reserve(0): admitted %v, hint %d s, %v; want refused with a hint", d.Admitted, d.RetryAfterSeconds, err)
				return
			}
		}
	})
}

// BenchmarkPacerAdmit: Admit(ctx) end to end, admitted at once. Admit
// reads the pacer's Clock, here the explicit clock (two goroutines share
// its atomic counter; one has it to itself).
func BenchmarkPacerAdmit(b *testing.B) {
	c := cfg()
	clk, local := newClock(), uint64(0)
	c.Clock = func() uint64 { return clk.next(&local) }
	p := newPacer(b, c)
	ctx := context.Background()
	measure(b, func(pb *testing.PB) {
		for pb.Next() {
			a, err := p.Admit(ctx)
			if err != nil || a.Queued || a.Ticket == nil {
				b.Errorf("Admit: queued %v, %v; want admitted at once", a.Queued, err)
				return
			}
		}
	})
}

// BenchmarkRateAllow: (*rate.Limiter).Allow, which reads time.Now. To
// admit every call on the real clock the limit is 10⁹ a second (burst
// 1000): the same arithmetic, a rate that never runs dry.
func BenchmarkRateAllow(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1e9), 1000)
	measure(b, func(pb *testing.PB) {
		for pb.Next() {
			if !lim.Allow() {
				b.Error("Allow refused")
				return
			}
		}
	})
}

// BenchmarkRateAllowN: AllowN(t, 1) with the readings Reserve gets.
func BenchmarkRateAllowN(b *testing.B) {
	lim := limiter()
	c := newClock()
	measure(b, func(pb *testing.PB) {
		var now uint64
		for pb.Next() {
			now = c.next(&now)
			if !lim.AllowN(epoch.Add(time.Duration(now)*time.Millisecond), 1) {
				b.Errorf("AllowN at %d ms refused", now)
				return
			}
		}
	})
}

// BenchmarkRateAllowNRefuse: AllowN at a fixed time on a drained limiter.
func BenchmarkRateAllowNRefuse(b *testing.B) {
	lim := limiter()
	if !lim.AllowN(epoch, 10) {
		b.Fatal("draining the burst refused")
	}
	measure(b, func(pb *testing.PB) {
		for pb.Next() {
			if lim.AllowN(epoch, 1) {
				b.Error("AllowN on a drained limiter admitted")
				return
			}
		}
	})
}

// BenchmarkRateReserveN: ReserveN(t, 1), which returns a new
// *rate.Reservation, with the readings Reserve gets: x/time/rate's
// counterpart of a decision with a refund right (Reservation.Cancel).
func BenchmarkRateReserveN(b *testing.B) {
	lim := limiter()
	c := newClock()
	measure(b, func(pb *testing.PB) {
		var now uint64
		var keep *rate.Reservation
		for pb.Next() {
			now = c.next(&now)
			t := epoch.Add(time.Duration(now) * time.Millisecond)
			r := lim.ReserveN(t, 1)
			if !r.OK() || r.DelayFrom(t) != 0 {
				b.Errorf("ReserveN at %d ms: not admitted at once", now)
				return
			}
			keep = r
		}
		keptReservation.Store(keep)
	})
}

// BenchmarkRateWait: Wait(ctx), admitted at once (time.Now, limit 10⁹ a
// second as for Allow): x/time/rate's counterpart of Admit.
func BenchmarkRateWait(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1e9), 1000)
	ctx := context.Background()
	measure(b, func(pb *testing.PB) {
		for pb.Next() {
			if err := lim.Wait(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
