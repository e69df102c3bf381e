package pacer_test

// Tickets and Close on the lock-free hot path: tickets are handed out from
// shared chunks, so each must still be its own (released at most once,
// through any copy, from any goroutine), and Close takes no lock, so calls
// racing it must be safe and calls after it refused. Run under -race.

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// wide is rate 60, burst 1000, idle 1 h, retries 5: the first 1000
// reservations at one instant are admitted at once, one token each.
func wide(clock *fakeClock) pacer.Config {
	return pacer.Config{
		RatePerMinute: 60, Burst: 1000, IdleTimeout: time.Hour, MaxRetries: 5,
		Clock: clock.Now, Sleep: noSleep,
	}
}

func TestTicketsAreDistinct(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, wide(clock))
	// 40 tickets span several of the chunks tickets are carved from.
	var ds []pacer.Decision
	seen := map[*pacer.Ticket]bool{}
	for i := range 40 {
		d := mustReserve(t, p, 0)
		if !d.Admitted || d.WaitMs != 0 || d.Ticket == nil || d.Ticket.DebitUnits() != pacer.UnitsPerToken {
			t.Fatalf("reservation %d: %+v, want admitted at once with a one-token ticket", i, d)
		}
		if seen[d.Ticket] {
			t.Fatalf("reservation %d reuses a ticket", i)
		}
		seen[d.Ticket] = true
		ds = append(ds, d)
	}
	// Release the odd ones, each through a copy of its Decision.
	for i := 1; i < len(ds); i += 2 {
		c := ds[i]
		if ok, err := p.Release(c.Ticket, 0); !ok || err != nil {
			t.Fatalf("release %d: %v, %v", i, ok, err)
		}
	}
	for i, d := range ds {
		if d.Ticket.Spent() != (i%2 == 1) {
			t.Fatalf("ticket %d spent = %v; only the odd ones were released", i, d.Ticket.Spent())
		}
	}
	// A second release, through the original or another copy, does nothing.
	for i := 1; i < len(ds); i += 2 {
		c := ds[i]
		if ok, err := p.Release(c.Ticket, 0); ok || err != nil {
			t.Fatalf("second release %d: %v, %v", i, ok, err)
		}
	}
	// 1000 tokens − 40 taken + 20 refunded = 980 tokens at t=0.
	c := mustCounters(t, p)
	if c.Admitted != 40 || c.Released != 20 || c.Refunded != 20 {
		t.Fatalf("counters %+v, want 40 admitted, 20 released and refunded", c)
	}
	info, err := p.Info()
	if err != nil || info.TokensUnits != 980*pacer.UnitsPerToken {
		t.Fatalf("info %+v, %v; want 980 tokens", info, err)
	}
}

func TestTicketsFromManyGoroutines(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, wide(clock))
	const goroutines, each = 4, 200
	tickets := make([][]*pacer.Ticket, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				d, err := p.Reserve(0)
				if err != nil || !d.Admitted || d.Ticket == nil {
					t.Errorf("%+v, %v: want admitted with a ticket", d, err)
					return
				}
				tickets[g] = append(tickets[g], d.Ticket)
			}
		})
	}
	wg.Wait()
	seen := map[*pacer.Ticket]bool{}
	for _, ts := range tickets {
		for _, tk := range ts {
			if seen[tk] {
				t.Fatal("two reservations got the same ticket")
			}
			seen[tk] = true
		}
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d tickets, want %d", len(seen), goroutines*each)
	}
	// Every ticket released twice at once, from two goroutines: one refund
	// each.
	var refunds atomic.Int64
	for tk := range seen {
		for range 2 {
			wg.Go(func() {
				if ok, err := p.Release(tk, 0); err != nil {
					t.Error(err)
				} else if ok {
					refunds.Add(1)
				}
			})
		}
	}
	wg.Wait()
	c := mustCounters(t, p)
	if refunds.Load() != goroutines*each || c.Released != goroutines*each || c.Refunded != goroutines*each {
		t.Fatalf("%d refunds, counters %+v; want %d", refunds.Load(), c, goroutines*each)
	}
}

func TestAdmissionCopiesReleaseOnce(t *testing.T) {
	p, a := admittedOnce(t)
	copies := []pacer.Admission{a, a, a, a}
	var refunds atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			var ok bool
			if i%2 == 0 {
				ok = copies[i%len(copies)].Release()
			} else {
				ok, _ = p.Release(a.Ticket, 0)
			}
			if ok {
				refunds.Add(1)
			}
		})
	}
	wg.Wait()
	if refunds.Load() != 1 {
		t.Fatalf("%d refunds through copies, want exactly 1", refunds.Load())
	}
	if c := mustCounters(t, p); c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v, want one release", c)
	}
}

func TestCloseDuringCalls(t *testing.T) {
	clock := &fakeClock{}
	cfg := wide(clock)
	cfg.Notifier = quiet()
	p, err := pacer.New(cfg) // not mustNew: nothing else may keep p reachable
	if err != nil {
		t.Fatal(err)
	}
	var closed atomic.Bool // set once Close has returned
	var started sync.WaitGroup
	var wg sync.WaitGroup
	const goroutines = 4
	for g := range goroutines {
		started.Add(1)
		wg.Go(func() {
			var once sync.Once
			running := func() { once.Do(started.Done) }
			defer running()
			for i := 0; ; i++ {
				if i == 10 {
					running()
				}
				if i > 10_000_000 {
					t.Error("calls still succeed long after Close")
					return
				}
				after := closed.Load()
				var err error
				switch (g + i) % 4 {
				case 0:
					var d pacer.Decision
					if d, err = p.Reserve(uint64(i)); err == nil && d.Ticket != nil {
						_, err = p.Release(d.Ticket, uint64(i))
					}
				case 1:
					_, err = p.ReserveOrBook(uint64(i), 1)
				case 2:
					_, err = p.Counters()
				default:
					_, err = p.Info()
				}
				if errors.Is(err, pacer.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("call %d: %v", i, err)
					return
				}
				if after {
					t.Errorf("call %d started after Close returned and succeeded", i)
					return
				}
			}
		})
	}
	started.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	wg.Wait()
	if _, err := p.Reserve(0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Reserve after Close: %v", err)
	}
	// Once unreachable, its cleanup frees the storage (once).
	p = nil
	runtime.GC()
	runtime.GC()
}
