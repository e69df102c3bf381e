package pacerbench

// What the benchmarks rely on, checked once with numbers worked out by
// hand (run.sh --smoke runs this beside every benchmark at 100 calls).

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	pacer "github.com/connpacer/pacer/bindings/go"
)

func TestSmoke(t *testing.T) {
	Noop() // the floor crosses into C and back

	// cfg (60/min, burst 10, bound 4833 ms) admits at once on a clock
	// advancing 1000 ms per call, one token accruing per call.
	p, err := pacer.New(cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := uint64(1); i <= 300; i++ {
		d, err := p.Reserve(i * 1000)
		if err != nil || !d.Admitted || d.WaitMs != 0 || d.Ticket == nil {
			t.Fatalf("Reserve(%d) = %+v, %v; want admitted at once", i*1000, d, err)
		}
	}
	// At one instant a fresh pacer admits 14 (10 at once, then waits 1000
	// .. 4000, within the bound) and refuses the 15th with a hint of 1..4 s
	// (the hint cap is floor(4833/1000) = 4).
	q, err := pacer.New(cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range 14 {
		d, err := q.Reserve(0)
		want := uint64(0)
		if i >= 10 {
			want = uint64(i-9) * 1000
		}
		if err != nil || !d.Admitted || d.WaitMs != want {
			t.Fatalf("reservation %d: %+v, %v; want admitted after %d ms", i, d, err, want)
		}
	}
	for range 300 {
		d, err := q.Reserve(0)
		if err != nil || d.Admitted || d.RetryAfterSeconds < 1 || d.RetryAfterSeconds > 4 {
			t.Fatalf("drained: %+v, %v; want refused with a hint of 1..4 s", d, err)
		}
	}
	// Admit with an advancing clock admits at once.
	c := cfg()
	var ms uint64
	c.Clock = func() uint64 { ms += 1000; return ms }
	r, err := pacer.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range 300 {
		if a, err := r.Admit(context.Background()); err != nil || a.Queued || a.Ticket == nil {
			t.Fatalf("Admit = %+v, %v; want admitted at once", a, err)
		}
	}

	// x/time/rate at one token a second, burst 10: ten at one instant,
	// then refusals; one a second on the advancing clock.
	lim := limiter()
	for i := range 10 {
		if !lim.AllowN(epoch, 1) {
			t.Fatalf("AllowN %d at the epoch refused; the burst is 10", i)
		}
	}
	if lim.AllowN(epoch, 1) {
		t.Fatal("the 11th AllowN at the epoch admitted")
	}
	for i := 1; i <= 300; i++ {
		at := epoch.Add(time.Duration(i) * time.Second)
		if !lim.AllowN(at, 1) {
			t.Fatalf("AllowN at +%d s refused", i)
		}
	}
	res := limiter()
	for i := 1; i <= 300; i++ {
		at := epoch.Add(time.Duration(i) * time.Second)
		if r := res.ReserveN(at, 1); !r.OK() || r.DelayFrom(at) != 0 {
			t.Fatalf("ReserveN at +%d s: not admitted at once", i)
		}
	}
	// The time.Now cases' limiter (10⁹ a second, burst 1000) never runs dry.
	fast := rate.NewLimiter(rate.Limit(1e9), 1000)
	for range 300 {
		if !fast.Allow() {
			t.Fatal("Allow refused")
		}
		if err := fast.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVersion prints the linked library's version for run.sh.
func TestVersion(t *testing.T) {
	t.Logf("pacer-library-version %s", pacer.LibraryVersion())
}
