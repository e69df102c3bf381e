package pacer_test

// The idiomatic API with an injected clock and sleep (nothing sleeps long):
// Admit and contexts before / during / after the wait, release at most
// once, refusals and their frame, notices, bad configs, Close, and 64
// goroutines on one pacer. Expected numbers are worked out by hand from
// SPEC §3-§9 in the comments, never by asking the code under test.

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// small is rate 60, burst 1, idle 30000, retries 3:
// bound = min(15000, floor((30000 − 2000·(2^3−1)) / (2·4))) = floor(16000/8) = 2000;
// cap 2 s; schedule 3·2·1000 = 6000, 6000·60 >= 60000: refusing.
func small(clock *fakeClock, sleep func(context.Context, time.Duration) error) pacer.Config {
	return pacer.Config{
		RatePerMinute: 60, Burst: 1, IdleTimeout: 30 * time.Second, MaxRetries: 3,
		Clock: clock.Now, Sleep: sleep,
	}
}

// long is rate 60, burst 1, idle 3600000, retries 5: bound min(15000, …) = 15000.
func long(clock *fakeClock, sleep func(context.Context, time.Duration) error) pacer.Config {
	return pacer.Config{
		RatePerMinute: 60, Burst: 1, IdleTimeout: time.Hour, MaxRetries: 5,
		Clock: clock.Now, Sleep: sleep,
	}
}

// defaults is SPEC §2's defaults (rate 60, burst 10, idle 120000, retries
// 5: bound 4833) on clock, with sleep.
func defaults(clock *fakeClock, sleep func(context.Context, time.Duration) error) pacer.Config {
	cfg := pacer.DefaultConfig()
	cfg.Clock = clock.Now
	cfg.Sleep = sleep
	return cfg
}

// admittedOnce is long on a fixed clock at t = 0 with its one token taken
// by an Admit, and that admission (with its ticket).
func admittedOnce(t *testing.T) (*pacer.Pacer, pacer.Admission) {
	t.Helper()
	p := mustNew(t, long(&fakeClock{}, noSleep))
	a, err := p.Admit(t.Context())
	if err != nil || a.Ticket == nil {
		t.Fatalf("%+v, %v", a, err)
	}
	return p, a
}

func TestDefaults(t *testing.T) {
	p := mustNew(t, pacer.DefaultConfig())
	// idle 120000, r 5: floor((120000 − 62000) / 12) = 4833.
	if p.WaitBoundMs() != 4833 || p.Mode() != pacer.ModeRefusing {
		t.Fatalf("bound %d mode %v, want 4833 refusing", p.WaitBoundMs(), p.Mode())
	}
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	// capacity 10 tokens; max_debt = 4833·60/60000 tokens = 4833·60 units.
	if info.CapacityUnits != 10*60000 || info.MaxDebtUnits != 4833*60 {
		t.Fatalf("info %+v", info)
	}
	if pacer.LibraryABIVersion() != pacer.HeaderABIVersion() || pacer.HeaderABIVersion() != 3 {
		t.Fatalf("ABI %d vs header %d", pacer.LibraryABIVersion(), pacer.HeaderABIVersion())
	}
	if pacer.LibraryVersion() == "" {
		t.Fatal("no library version")
	}
}

func TestHintCap(t *testing.T) {
	// SPEC §3 hint cases: bound 666 → 1 s, 2000 → 2, 4833 → 4, 15000 → 15; bound 0 → 1.
	for bound, want := range map[uint64]uint64{666: 1, 2000: 2, 4833: 4, 15000: 15, 0: 1} {
		if got := pacer.HintCapSeconds(bound); got != want {
			t.Errorf("HintCapSeconds(%d) = %d, want %d", bound, got, want)
		}
	}
}

func TestAdmitImmediateQueuedRefused(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(1000)
	gate := newGatedSleep()
	p := mustNew(t, small(clock, gate.Sleep))

	first, err := p.Admit(t.Context())
	if err != nil || first.Queued || first.Wait != 0 || first.Path != pacer.PathPaced || first.Ticket == nil {
		t.Fatalf("first: %+v, %v", first, err)
	}
	// Two queued behind it: slots 1000 and 2000 ms later.
	type result struct {
		a   pacer.Admission
		err error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			a, err := p.Admit(t.Context())
			results <- result{a, err}
		}()
	}
	waits := map[time.Duration]bool{<-gate.entered: true, <-gate.entered: true}
	if !waits[time.Second] || !waits[2*time.Second] {
		t.Fatalf("waits %v, want 1s and 2s", waits)
	}
	// The fourth needs 3000 ms > bound 2000: refused, hint min(ceil(3000/1000), 2) = 2.
	_, err = p.Admit(t.Context())
	var refused *pacer.RefusedError
	if !errors.Is(err, pacer.ErrRefused) || !errors.As(err, &refused) {
		t.Fatalf("fourth: %v, want a refusal", err)
	}
	if refused.RequiredWaitMs != 3000 || refused.RetryAfterSeconds != 2 {
		t.Fatalf("refusal %+v, want 3000 ms, 2 s", refused)
	}
	clock.Advance(2000)
	close(gate.gate)
	for range 2 {
		r := <-results
		if r.err != nil || !r.a.Queued || r.a.Waited != 2*time.Second {
			t.Fatalf("queued: %+v, %v", r.a, r.err)
		}
	}
	c := mustCounters(t, p)
	// The waits given: 1000 ms, in (500, 1000] (bucket 4), and 2000 ms, in
	// (1000, 2500] (bucket 5); 3000 ms in all. The first's wait 0 is in no
	// bucket.
	want := pacer.Counters{Admitted: 3, AdmittedAfterWait: 2, Refused: 1, WaitMsTotal: 3000,
		WaitBuckets: [pacer.WaitBuckets]uint64{4: 1, 5: 1}}
	if c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
}

func TestAdmitCancelledBefore(t *testing.T) {
	clock := &fakeClock{}
	gate := newGatedSleep()
	p := mustNew(t, small(clock, gate.Sleep))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Admit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if c := mustCounters(t, p); c != (pacer.Counters{}) {
		t.Fatalf("counters %+v, want nothing decided", c)
	}
	mustAdmitAfter(t, p, 0, 0) // the one token is still there
}

func TestAdmitCancelledDuringRefunds(t *testing.T) {
	p := cancelledWhileWaiting(t)
	c := mustCounters(t, p)
	if c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v, want the slot released and refunded", c)
	}
	// SPEC §7: the released slot is given back, so the next arrival waits
	// 1000, not 2000.
	mustAdmitAfter(t, p, 0, 1000)
}

func TestAdmitCancelledAfterKeepsAdmission(t *testing.T) {
	p, _ := admittedOnce(t)
	ctx, cancel := context.WithCancel(t.Context())
	a, err := p.Admit(ctx)
	if err != nil || !a.Queued || a.Wait != time.Second {
		t.Fatalf("%+v, %v", a, err)
	}
	cancel()
	if c := mustCounters(t, p); c.Released != 0 {
		t.Fatalf("a cancel after admission must not release: %+v", c)
	}
	if !a.Release() {
		t.Fatal("first Release should refund")
	}
	if a.Release() {
		t.Fatal("second Release must report false")
	}
	if c := mustCounters(t, p); c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// cancelOnWatch is a context that cancels itself the first time someone
// starts watching it (calls Done): Admit checks a context with Err before
// reserving, and only a wait watches it, so it ends during the wait
// whatever the machine's speed.
type cancelOnWatch struct {
	context.Context
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnWatch) Done() <-chan struct{} {
	c.once.Do(c.cancel)
	return c.Context.Done()
}

// The default Sleep (a real timer) with a fixed clock, so the granted waits
// are exact whatever the machine's speed. Only relations that hold at any
// speed are checked: a timer never fires early, and a context that ends as
// the 15 s wait starts ends it.
func TestAdmitRealTimerAndDeadline(t *testing.T) {
	clock := &fakeClock{}
	// rate 600: one slot per 100 ms; burst 1; idle 1 h, 5 retries: bound 15000.
	p := mustNew(t, pacer.Config{RatePerMinute: 600, Burst: 1, IdleTimeout: time.Hour, MaxRetries: 5, Clock: clock.Now})
	if _, err := p.Admit(t.Context()); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	a, err := p.Admit(t.Context())
	elapsed := time.Since(started)
	if err != nil || !a.Queued || a.Wait != 100*time.Millisecond {
		t.Fatalf("%+v, %v: want queued 100ms", a, err)
	}
	if elapsed < a.Wait {
		t.Fatalf("returned after %v, before the granted %v", elapsed, a.Wait)
	}
	// Slots at 200 .. 14900 taken: the next Admit waits 15000 ms (the bound).
	for want := uint64(200); want < 15000; want += 100 {
		if d := mustReserve(t, p, 0); !d.Admitted || d.WaitMs != want {
			t.Fatalf("reserve: %+v, want wait %d", d, want)
		}
	}
	inner, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err = p.Admit(&cancelOnWatch{Context: inner, cancel: cancel}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if c := mustCounters(t, p); c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v, want the cancelled slot refunded", c)
	}
}

func TestAdmitNilContext(t *testing.T) {
	p := mustNew(t, pacer.DefaultConfig())
	var ctx context.Context // nil: the bad input under test
	_, err := p.Admit(ctx)
	if !errors.Is(err, pacer.ErrInvalidInput) {
		t.Fatalf("got %v, want ErrInvalidInput", err)
	}
	if c := mustCounters(t, p); c != (pacer.Counters{}) {
		t.Fatalf("counters %+v", c)
	}
}

func TestReleaseAtMostOnce(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, long(clock, noSleep))
	d := mustReserve(t, p, 0)
	if d.Ticket == nil || d.Ticket.DebitUnits() != pacer.UnitsPerToken {
		t.Fatalf("%+v: want a one-token ticket", d)
	}
	var refunds atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if ok, err := p.Release(d.Ticket, 0); err != nil {
				t.Error(err)
			} else if ok {
				refunds.Add(1)
			}
		})
	}
	wg.Wait()
	if refunds.Load() != 1 || !d.Ticket.Spent() {
		t.Fatalf("%d refunds, want exactly 1", refunds.Load())
	}
	c := mustCounters(t, p)
	if c.Released != 1 || c.Refunded != 1 {
		t.Fatalf("counters %+v, want one release", c)
	}
	// burst 1: one refund puts back one token, no more. Two reservations at
	// t=0: the refunded token now, then a wait of 1000.
	if a, b := mustReserve(t, p, 0), mustReserve(t, p, 0); a.WaitMs != 0 || b.WaitMs != 1000 {
		t.Fatalf("after the refund: %+v then %+v, want 0 then 1000", a, b)
	}
}

// TestReleaseAtTheDebtFloor (SPEC §4, §13), by hand: rate 60, burst 1, idle
// 9667, no retries: bound 9667/2 = 4833 ms, shaping, a floor of 4.833
// tokens of debt. Six at t=0 wait 0, 1000 … 4000, then the sixth debits the
// 0.833 left above the floor and waits the bound. At 4833 the bucket is back
// at 0; the release adds 0.833, so by 4900 it holds 0.9 and the next waits
// 100 ms (a whole token refunded would admit it at once).
func TestReleaseAtTheDebtFloor(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, pacer.Config{
		RatePerMinute: 60, Burst: 1, IdleTimeout: 9667 * time.Millisecond, MaxRetries: 0,
		Clock: clock.Now, Sleep: noSleep,
	})
	want := []uint64{0, 1000, 2000, 3000, 4000, 4833}
	var sixth pacer.Decision
	for i, w := range want {
		d := mustReserve(t, p, 0)
		if !d.Admitted || d.WaitMs != w || d.Queued != (w > 0) {
			t.Fatalf("#%d: %+v, want admitted after %d", i, d, w)
		}
		sixth = d
	}
	if sixth.Path != pacer.PathShaped || sixth.Ticket == nil {
		t.Fatalf("the sixth: %+v, want shaped with a ticket", sixth)
	}
	if ok, err := p.Release(sixth.Ticket, 4833); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, _ := p.Release(sixth.Ticket, 4833); ok {
		t.Fatal("a second release refunded")
	}
	if d := mustReserve(t, p, 4900); !d.Admitted || d.WaitMs != 100 || !d.Queued {
		t.Fatalf("at 4900: %+v, want a wait of 100", d)
	}
}

func TestReleaseForeignAndNil(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, long(clock, noSleep))
	q := mustNew(t, long(clock, noSleep))
	d := mustReserve(t, p, 0)
	if ok, err := q.Release(d.Ticket, 0); ok || err != nil {
		t.Fatalf("foreign ticket: %v, %v", ok, err)
	}
	if ok, err := p.Release(nil, 0); ok || err != nil {
		t.Fatalf("nil ticket: %v, %v", ok, err)
	}
	if d.Ticket.Spent() {
		t.Fatal("a refused foreign release must not spend the ticket")
	}
	if ok, _ := p.Release(d.Ticket, 0); !ok {
		t.Fatal("the owner's release should refund")
	}
	if c := mustCounters(t, q); c != (pacer.Counters{}) {
		t.Fatalf("the other pacer changed: %+v", c)
	}
	// An admission with nothing debited (pacing off) has no ticket.
	off := mustNew(t, pacer.Config{Clock: clock.Now})
	a, err := off.Admit(t.Context())
	if err != nil || a.Ticket != nil || a.Path != pacer.PathDisabled || a.Release() {
		t.Fatalf("%+v, %v", a, err)
	}
	var zero pacer.Admission
	if zero.Release() {
		t.Fatal("a zero Admission has nothing to release")
	}
}

func TestRawReserveTotalOverU64(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, long(clock, noSleep))
	d := mustReserve(t, p, math.MaxUint64)
	if !d.Admitted || d.WaitMs != 0 {
		t.Fatalf("%+v", d)
	}
	// A reading behind the high-water mark is treated as it (SPEC §5).
	d = mustReserve(t, p, 0)
	if !d.Admitted || d.WaitMs != 1000 || !d.ClockRegressed {
		t.Fatalf("%+v, want wait 1000 with the regression flagged", d)
	}
	if d.Wait() != time.Second {
		t.Fatalf("Wait() = %v", d.Wait())
	}
}

func TestRefusalFrame(t *testing.T) {
	// SPEC §9, by hand.
	r, err := pacer.RefusalResponse(2, `say "hi"\`)
	if err != nil {
		t.Fatal(err)
	}
	wantBody := `data: {"type":"error","sequence_number":0,"error":{"type":"rate_limit_error","code":"429",` +
		`"message":"say \"hi\"\\; retry after 2s","param":null,"retry_after_seconds":2}}` + "\n\n"
	if r.Status != 200 || string(r.Body) != wantBody {
		t.Fatalf("status %d body %q\nwant %q", r.Status, r.Body, wantBody)
	}
	if r.Header.Get("content-type") != "text/event-stream; charset=utf-8" || r.Header.Get("retry-after") != "2" {
		t.Fatalf("headers %v", r.Header)
	}
	rec := httptest.NewRecorder()
	if err := r.Write(rec); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 200 || rec.Body.String() != wantBody || rec.Header().Get("Retry-After") != "2" ||
		rec.Header().Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("written: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}

	// From a refusal, with the default prefix.
	clock := &fakeClock{}
	p := mustNew(t, small(clock, noSleep))
	for range 3 {
		if _, err := p.Admit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	_, err = p.Admit(t.Context())
	var refused *pacer.RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("got %v, want a refusal", err)
	}
	r, err = refused.Response("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.Body), `"message":"`+pacer.DefaultMessagePrefix+`; retry after 2s"`) ||
		r.Header.Get("Retry-After") != "2" {
		t.Fatalf("%v %q", r.Header, r.Body)
	}

	for _, bad := range []string{"a\x00b", "a\xffb"} {
		if _, err := pacer.RefusalResponse(1, bad); !errors.Is(err, pacer.ErrInvalidInput) {
			t.Errorf("prefix %q: got %v, want ErrInvalidInput", bad, err)
		}
	}
}

func TestBadConfigs(t *testing.T) {
	ok := pacer.Config{RatePerMinute: 1, Burst: 10, IdleTimeout: 2 * time.Minute, MaxRetries: 5}
	cases := []struct {
		field  string
		change func(*pacer.Config)
	}{
		{"RatePerMinute", func(c *pacer.Config) { c.RatePerMinute = -1 }},
		{"RatePerMinute", func(c *pacer.Config) { c.RatePerMinute = 601 }},
		{"Burst", func(c *pacer.Config) { c.Burst = -1 }},
		{"Burst", func(c *pacer.Config) { c.Burst = 1_000_001 }},
		{"IdleTimeout", func(c *pacer.Config) { c.IdleTimeout = -time.Millisecond }},
		{"IdleTimeout", func(c *pacer.Config) { c.IdleTimeout = 1500 * time.Microsecond }},
		// idle 120000: ladder ceiling 5 (2000·(2^6−1) = 126000 is not < 120000).
		{"MaxRetries", func(c *pacer.Config) { c.MaxRetries = 6 }},
		{"MaxRetries", func(c *pacer.Config) { c.MaxRetries = -1 }},
		// idle 10000: ceiling 2 (2000·7 = 14000 >= 10000).
		{"MaxRetries", func(c *pacer.Config) { c.IdleTimeout = 10 * time.Second; c.MaxRetries = 3 }},
		{"ReleasePolicy", func(c *pacer.Config) { c.ReleasePolicy = 2 }},
	}
	for _, tc := range cases {
		cfg := ok
		tc.change(&cfg)
		logs := &logCapture{}
		cfg.Notifier = pacer.NewNotifier(slog.New(logs))
		p, err := pacer.New(cfg)
		var fe *pacer.FieldError
		if p != nil || !errors.Is(err, pacer.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, %v; want an ErrInvalidConfig naming %s", cfg, p, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("message %q does not name %s", err, tc.field)
		}
		// A valid rate-1 config would log a norefuse notice: a rejected one logs nothing.
		if len(logs.messages()) != 0 {
			t.Errorf("%s: rejected config logged %v", tc.field, logs.messages())
		}
	}
	// The edges are accepted.
	for _, cfg := range []pacer.Config{
		{RatePerMinute: 600, Burst: 1_000_000, IdleTimeout: 2 * time.Minute, MaxRetries: 5},
		{RatePerMinute: 60, Burst: 0, IdleTimeout: time.Hour, MaxRetries: 10},
		{RatePerMinute: 60, IdleTimeout: 10 * time.Second, MaxRetries: 2, ReleasePolicy: pacer.ReleaseStrict},
		{},
	} {
		mustNew(t, cfg)
	}
}

func TestModeNotices(t *testing.T) {
	logs := &logCapture{}
	n := pacer.NewNotifier(slog.New(logs))
	// SPEC §7: rate 1 at the default budget cannot refuse (schedule
	// 5·4·1000 = 20000 ms < the 60000 ms wait for a token): norefuse
	// [rate 1, retries 5, bound 4833].
	cfg := pacer.DefaultConfig()
	cfg.RatePerMinute = 1
	cfg.Notifier = n
	p := mustNew(t, cfg)
	if p.Mode() != pacer.ModeShapingLowRate {
		t.Fatalf("mode %v", p.Mode())
	}
	mustNew(t, cfg) // same key: not logged again
	msgs := logs.messages()
	if len(msgs) != 1 || !strings.Contains(msgs[0], "a 5-retry schedule spans only 20000ms") ||
		!strings.Contains(msgs[0], "the 60000ms wait") {
		t.Fatalf("logged %q", msgs)
	}
	if logs.attr(0, "kind") != "norefuse" || logs.attr(0, "key") != "norefuse:1:5:4833" {
		t.Fatalf("attrs kind=%q key=%q", logs.attr(0, "kind"), logs.attr(0, "key"))
	}
	// idle 14001, r 3: bound floor((14001 − 14000)/8) = 0: pacing disabled
	// [retries 3, idle 14001, rate 60].
	mustNew(t, pacer.Config{RatePerMinute: 60, Burst: 10, IdleTimeout: 14001 * time.Millisecond, MaxRetries: 3, Notifier: n})
	if msgs := logs.messages(); len(msgs) != 2 || logs.attr(1, "key") != "disabled:3:14001:60" {
		t.Fatalf("logged %q", msgs)
	}
	// retries 0 shapes without a notice; rate 0 is off without one.
	mustNew(t, pacer.Config{RatePerMinute: 60, Burst: 10, IdleTimeout: 2 * time.Minute, Notifier: n})
	mustNew(t, pacer.Config{Notifier: n})
	if msgs := logs.messages(); len(msgs) != 2 {
		t.Fatalf("logged %q", msgs)
	}
}

func TestBudgetFromEnvAndNoticesOnce(t *testing.T) {
	logs := &logCapture{}
	previous := slog.Default()
	slog.SetDefault(slog.New(logs))
	defer slog.SetDefault(previous)
	// A fresh default registry, so a second run in this process (-count)
	// logs again.
	previousNotifier := pacer.DefaultNotifier
	pacer.DefaultNotifier = pacer.NewNotifier(nil)
	defer func() { pacer.DefaultNotifier = previousNotifier }()

	// A hostile rate text shaped like another kind's key cannot suppress
	// that kind's notice (SPEC §2).
	env := map[string]string{
		"PACER_RATE_PER_MIN":    "disabled:3:14001",
		"PACER_IDLE_TIMEOUT_MS": " 14001 ",
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	b, err := pacer.BudgetFromEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	// Malformed rate → 60; idle 14001 → ceiling 3, bound 0: disabled.
	if b.RatePerMinute != 60 || b.IdleTimeoutMs != 14001 || b.MaxRetries != 3 || b.WaitBoundMs != 0 || b.Enabled {
		t.Fatalf("budget %+v", b)
	}
	if len(b.Notices) != 2 || b.Notices[0].Kind != pacer.NoticeRateMalformed ||
		b.Notices[0].Key != "rate:disabled:3:14001" || b.Notices[1].Key != "disabled:3:14001:60" {
		t.Fatalf("notices %+v", b.Notices)
	}
	if _, err := pacer.BudgetFromEnv(lookup); err != nil {
		t.Fatal(err)
	}
	msgs := logs.messages()
	if len(msgs) != 2 {
		t.Fatalf("logged %d times, want each of 2 notices once: %q", len(msgs), msgs)
	}
	// The budget's pacer: its own disabled notice has the same key, so it
	// is not logged a third time.
	cfg := b.Config()
	cfg.Notifier = pacer.DefaultNotifier
	p := mustNew(t, cfg)
	if p.Mode() != pacer.ModeDisabled || len(logs.messages()) != 2 {
		t.Fatalf("mode %v, logged %q", p.Mode(), logs.messages())
	}

	// Unset variables are defaults: no notices.
	b, err = pacer.BudgetFromEnv(func(string) (string, bool) { return "", false })
	if err != nil || b.RatePerMinute != 60 || b.WaitBoundMs != 4833 || len(b.Notices) != 0 {
		t.Fatalf("%+v, %v", b, err)
	}
}

// Settings text that is not a number whatever C makes of it: a NUL byte
// (a C string would end there, reading "12\x00x" as 12) and bytes that are
// not UTF-8. Each is malformed: the default is kept and the notice shows
// the bad bytes as U+FFFD; its Raw is the text exactly as given. Texts are
// SPEC §2's rendering, written out by hand.
func TestResolveUnrepresentableText(t *testing.T) {
	// The setting each kind of notice is about, holding raw.
	setting := map[pacer.NoticeKind]func(raw string) pacer.Settings{
		pacer.NoticeRateMalformed:    func(raw string) pacer.Settings { return pacer.Settings{RatePerMinute: &raw} },
		pacer.NoticeRetriesMalformed: func(raw string) pacer.Settings { return pacer.Settings{MaxRetries: &raw} },
		pacer.NoticeIdleMalformed:    func(raw string) pacer.Settings { return pacer.Settings{IdleTimeoutMs: &raw} },
	}
	for _, tc := range []struct {
		name string
		kind pacer.NoticeKind
		raw  string
		key  string
		text string
	}{
		{
			name: "rate with NUL", kind: pacer.NoticeRateMalformed, raw: "12\x00x", key: "rate:12\uFFFDx",
			text: "ignoring new-connection rate \"12\uFFFDx\": not a whole number of connections per minute; using 60/minute",
		},
		{
			name: "rate not UTF-8", kind: pacer.NoticeRateMalformed, raw: "\xff12", key: "rate:\uFFFD12",
			text: "ignoring new-connection rate \"\uFFFD12\": not a whole number of connections per minute; using 60/minute",
		},
		{
			// A NUL right after a valid number: never read as 60.
			name: "retries with trailing NUL", kind: pacer.NoticeRetriesMalformed, raw: "3\x00", key: "retries:3\uFFFD",
			text: "ignoring max retries \"3\uFFFD\": not a whole number; using 5",
		},
		{
			name: "idle not UTF-8", kind: pacer.NoticeIdleMalformed, raw: "9\xfe\xff", key: "idle:9\uFFFD\uFFFD",
			text: "ignoring idle timeout \"9\uFFFD\uFFFD\": not a whole number of milliseconds; using 120000ms",
		},
	} {
		logs := &logCapture{}
		b, err := pacer.Resolve(setting[tc.kind](tc.raw), pacer.NewNotifier(slog.New(logs)))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		// Every setting keeps its default: rate 60, 5 retries, idle
		// 120000, so bound 4833 (3 retries would give 13500).
		if b.RatePerMinute != 60 || b.MaxRetries != 5 || b.IdleTimeoutMs != 120000 || b.WaitBoundMs != 4833 {
			t.Errorf("%s: budget %+v", tc.name, b)
		}
		if len(b.Notices) != 1 {
			t.Errorf("%s: notices %+v, want one", tc.name, b.Notices)
			continue
		}
		n := b.Notices[0]
		if n.Kind != tc.kind || n.Raw != tc.raw || n.Key != tc.key || n.Text != tc.text {
			t.Errorf("%s: notice\n %+v\nwant kind %v raw %q key %q\n text %q", tc.name, n, tc.kind, tc.raw, tc.key, tc.text)
		}
		if msgs := logs.messages(); len(msgs) != 1 || msgs[0] != "pacer: "+tc.text || logs.attr(0, "raw") != tc.raw {
			t.Errorf("%s: logged %q raw=%q", tc.name, msgs, logs.attr(0, "raw"))
		}
	}
	// Through BudgetFromEnv too (an environment value can hold any bytes
	// but NUL; a stand-in lookup can hold NUL as well).
	env := map[string]string{pacer.EnvRatePerMinute: "12\x00x"}
	b, err := pacer.BudgetFromEnv(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	if err != nil || b.RatePerMinute != 60 || len(b.Notices) != 1 || b.Notices[0].Raw != "12\x00x" {
		t.Fatalf("BudgetFromEnv: %+v, %v", b, err)
	}
}

type panickyHandler struct{ logCapture }

func (h *panickyHandler) Handle(context.Context, slog.Record) error { panic("sink down") }

func TestNoticeSinkPanicContained(t *testing.T) {
	n := pacer.NewNotifier(slog.New(&panickyHandler{}))
	rate := "abc"
	if _, err := pacer.Resolve(pacer.Settings{RatePerMinute: &rate}, n); err != nil {
		t.Fatal(err)
	}
}

func TestClose(t *testing.T) {
	clock := &fakeClock{}
	p, err := pacer.New(long(clock, noSleep))
	if err != nil {
		t.Fatal(err)
	}
	d := mustReserve(t, p, 0)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := p.Reserve(0); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Reserve after Close: %v", err)
	}
	if _, err := p.Admit(t.Context()); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Admit after Close: %v", err)
	}
	// A ticket issued before Close still releases (its slot comes back).
	if ok, err := p.Release(d.Ticket, 0); !ok || err != nil {
		t.Fatalf("Release after Close: %v, %v; want a refund", ok, err)
	}
	if _, err := p.Counters(); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Counters after Close: %v", err)
	}
	if _, err := p.Info(); !errors.Is(err, pacer.ErrClosed) {
		t.Fatalf("Info after Close: %v", err)
	}
	// Neither a nil nor a zero Pacer (not made by New) panics.
	var zero pacer.Pacer
	for _, q := range []*pacer.Pacer{nil, &zero} {
		if _, err := q.Reserve(0); !errors.Is(err, pacer.ErrClosed) {
			t.Fatalf("Reserve: %v", err)
		}
		if _, err := q.Admit(t.Context()); !errors.Is(err, pacer.ErrClosed) {
			t.Fatalf("Admit: %v", err)
		}
		if _, err := q.Release(d.Ticket, 0); !errors.Is(err, pacer.ErrClosed) {
			t.Fatalf("Release: %v", err)
		}
		if _, err := q.Counters(); !errors.Is(err, pacer.ErrClosed) {
			t.Fatalf("Counters: %v", err)
		}
		if err := q.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

func TestUnclosedPacersAreFreed(t *testing.T) {
	// Pacers are freed by their cleanup once unreachable, closed or not
	// (Close only marks a pacer closed, so nothing is freed twice). Run
	// under -race.
	for i := range 200 {
		p, err := pacer.New(pacer.Config{RatePerMinute: 60, Burst: 1, IdleTimeout: time.Minute, MaxRetries: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reserve(uint64(i)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			_ = p.Close()
		}
	}
	runtime.GC()
	runtime.GC()
}

// SPEC §6.1 with refusals available, derived by hand for the defaults
// (rate 60, burst 10, idle 120000, r 5): bound 4833, max_debt =
// 4833·60/60000 = 4.833 tokens. Reservations granted within one instant
// (W = 0) are at most burst + max_debt + rate·0/60000 + 1 = 15.833, so at
// most 15; admission times (now + wait) within W ms at most
// 10 + 60·W/60000 + 1. SPEC §7 pins the exact answer: 14 (10 at once, then
// 1000, 2000, 3000, 4000).
const hammerBound = 15

func TestHammerReserveFixedClock(t *testing.T) {
	p := mustNew(t, pacer.DefaultConfig())
	var mu sync.Mutex
	var waits []uint64
	refused := 0
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				d, err := p.Reserve(0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if d.Admitted {
					waits = append(waits, d.WaitMs)
				} else {
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(waits) > hammerBound {
		t.Fatalf("%d admissions at one instant, SPEC §6.1 allows at most %d", len(waits), hammerBound)
	}
	if len(waits) != 14 || refused != 64*20-14 {
		t.Fatalf("%d admitted, %d refused; want 14 and %d", len(waits), refused, 64*20-14)
	}
	counts := map[uint64]int{}
	last := uint64(0)
	for _, w := range waits {
		counts[w]++
		last = max(last, w)
	}
	// Admission times in the window [0, 4000]: at most 10 + 4 + 1 = 15.
	if want := map[uint64]int{0: 10, 1000: 1, 2000: 1, 3000: 1, 4000: 1}; len(counts) != len(want) {
		t.Fatalf("slots %v, want %v", counts, want)
	} else {
		for w, n := range want {
			if counts[w] != n {
				t.Fatalf("slots %v, want %v", counts, want)
			}
		}
	}
	if uint64(len(waits)) > 10+60*last/60000+1 {
		t.Fatalf("%d admission times within %d ms", len(waits), last)
	}
}

func TestHammerAdmitFixedClock(t *testing.T) {
	clock := &fakeClock{}
	p := mustNew(t, defaults(clock, noSleep))
	for round, now := range []uint64{0, 60_000, 120_000} {
		// A minute refills 60 tokens, capped at the burst of 10: every
		// round starts full, so each admits the same 14 (bound 15).
		clock.Set(now)
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				_, err := p.Admit(t.Context())
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.Is(err, pacer.ErrRefused):
					refused.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if admitted.Load() > hammerBound || admitted.Load() != 14 || refused.Load() != 50 {
			t.Fatalf("round %d: %d admitted, %d refused; want 14 (at most %d) and 50",
				round, admitted.Load(), refused.Load(), hammerBound)
		}
	}
}

func TestHammerWithReleases(t *testing.T) {
	// Under the refund policy each release may permit one more admission at
	// that instant (SPEC §4, §6.1): admitted <= 15 + refunds.
	p := mustNew(t, pacer.DefaultConfig())
	var admitted, refunds atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 20 {
				d, err := p.Reserve(0)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Admitted {
					continue
				}
				admitted.Add(1)
				if (g+i)%2 == 0 {
					if ok, _ := p.Release(d.Ticket, 0); ok {
						refunds.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() > hammerBound+refunds.Load() {
		t.Fatalf("%d admitted with %d refunds: SPEC §6.1 allows at most %d", admitted.Load(), refunds.Load(), hammerBound+refunds.Load())
	}
	c := mustCounters(t, p)
	if int64(c.Admitted) != admitted.Load() || int64(c.Refunded) != refunds.Load() {
		t.Fatalf("counters %+v vs %d admitted, %d refunds", c, admitted.Load(), refunds.Load())
	}
}
