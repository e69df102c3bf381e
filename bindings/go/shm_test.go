package pacer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sharedDir is where the shared-pacer tests put their files.
func sharedDir(t *testing.T) string {
	if dir := os.Getenv("PACER_SHM_TEST_DIR"); dir != "" {
		return dir
	}
	return t.TempDir()
}

func sharedPath(t *testing.T, what string) string {
	path := filepath.Join(sharedDir(t), fmt.Sprintf("pacer-go-%d-%s", os.Getpid(), what))
	_ = os.Remove(path)
	t.Cleanup(func() { _ = os.Remove(path) })
	return path
}

// openTwo opens two handles on path with the defaults, closed at the end
// of the test.
func openTwo(t *testing.T, path string) (*SharedPacer, *SharedPacer) {
	t.Helper()
	var handles [2]*SharedPacer
	for i := range handles {
		p, err := OpenShared(path, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		handles[i] = p
	}
	return handles[0], handles[1]
}

// Two handles in one process share one bucket: the defaults admit the burst
// (10) at once across both, then the 11th waits one slot (1000 ms at 60/min)
// less the time since the burst's first debit, which the shared clock
// readings before the first and after the 11th bound (whatever the speed).
func TestSharedTwoHandlesOneBucket(t *testing.T) {
	path := sharedPath(t, "two")
	a, b := openTwo(t, path)
	immediate := 0
	before := SharedClockMs()
	for i := 0; i < 10; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		d, err := s.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		if d.Admitted && d.WaitMs == 0 {
			immediate++
		}
	}
	if immediate != 10 {
		t.Fatalf("immediate = %d, want the burst 10", immediate)
	}
	d, err := b.Reserve()
	after := SharedClockMs()
	if err != nil {
		t.Fatal(err)
	}
	// Full (10 tokens) at the first debit t1 >= before; 10 debits; the 11th
	// at t11 <= after waits 1000 − (t11 − t1), at least 1000 − (after − before).
	if !d.Admitted || d.Ticket == nil || d.WaitMs > 1000 || d.WaitMs+(after-before) < 1000 {
		t.Fatalf("11th = %+v, want admitted after 1000 ms less at most %d ms", d, after-before)
	}
	if ok, err := a.Release(d.Ticket); err != nil || ok {
		t.Fatalf("release of b's ticket through a = %v, %v; want false (not a's ticket)", ok, err)
	}
	if ok, err := b.Release(d.Ticket); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	ia, _ := a.Info()
	ib, _ := b.Info()
	if ia.TokensUnits != ib.TokensUnits || ia.HighWaterMs != ib.HighWaterMs {
		t.Fatalf("two states: %+v vs %+v", ia, ib)
	}
	if ia.WaitBoundMs != 4833 || ia.Mode != ModeRefusing {
		t.Fatalf("info %+v", ia)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reserve(); !errors.Is(err, ErrClosed) {
		t.Fatalf("reserve after close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestSharedRefusesAClock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = MonotonicMs
	_, err := OpenShared(sharedPath(t, "clock"), cfg)
	var fe *FieldError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != "Clock" {
		t.Fatalf("err = %v, want a Clock FieldError", err)
	}
}

func TestSharedChecksOnAttach(t *testing.T) {
	path := sharedPath(t, "checks")
	s, err := OpenShared(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	other := DefaultConfig()
	other.RatePerMinute = 61
	if _, err := OpenShared(path, other); !errors.Is(err, StatusSharedConfigMismatch) {
		t.Fatalf("other config: %v", err)
	}
	link := sharedPath(t, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(link, DefaultConfig()); !errors.Is(err, StatusSharedSymlink) {
		t.Fatalf("symlink: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(path, DefaultConfig()); !errors.Is(err, StatusSharedPermissions) {
		t.Fatalf("mode 0644: %v", err)
	}
	if err := UnlinkShared(path); err != nil {
		t.Fatal(err)
	}
	if err := UnlinkShared(path); !errors.Is(err, StatusSharedNotFound) {
		t.Fatalf("unlink twice: %v", err)
	}
	if _, err := OpenShared("/nonexistent-dir-for-pacer/x", DefaultConfig()); !errors.Is(err, StatusSharedOS) {
		t.Fatalf("missing directory: %v", err)
	}
	if _, err := OpenShared("", DefaultConfig()); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("empty name: %v", err)
	}
}

// Admit on a shared pacer reserves and measures its wait on the shared
// clock. rate 600, burst 1, idle 1 h, 5 retries: slots 100 ms apart. The
// second Admit's wait is 100 − (t2 − t1) ms, t1 the first's debit and t2
// its own: at most 100, and at least 100 − (e − b) with b read before the
// first Admit and e as the wait starts (the Sleep hook reads it). The real
// timer never fires early: Waited >= Wait. Nothing here depends on speed.
func TestSharedAdmitWaitsOnTheSharedClock(t *testing.T) {
	var sleepStart uint64
	cfg := Config{RatePerMinute: 600, Burst: 1, IdleTimeout: DefaultIdleTimeout * 30, MaxRetries: 5,
		Sleep: func(ctx context.Context, d time.Duration) error {
			sleepStart = SharedClockMs()
			return timerSleep(ctx, d)
		}}
	s, err := OpenShared(sharedPath(t, "admit"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := SharedClockMs()
	first, err := s.Admit(context.Background())
	if err != nil || first.Queued {
		t.Fatalf("first = %+v, %v", first, err)
	}
	second, err := s.Admit(context.Background())
	if err != nil || second.Wait > 100*time.Millisecond {
		t.Fatalf("second = %+v, %v", second, err)
	}
	if !second.Queued {
		// Only when 100 ms or more passed between the two debits.
		if end := SharedClockMs(); end-before < 100 {
			t.Fatalf("second not queued %d ms after the first", end-before)
		}
		return
	}
	if got, least := second.Wait/time.Millisecond, 100-int64(sleepStart-before); int64(got) < least {
		t.Fatalf("second waits %d ms, want at least %d", got, least)
	}
	if second.Waited < second.Wait {
		t.Fatalf("second = %+v: waited less than granted on the shared clock", second)
	}
}

// A C process creates the pacer and debits the burst; this process then
// sees the debits, and the C process sees this one's.
func TestSharedSeesDebitsOfACProcess(t *testing.T) {
	helper := os.Getenv("PACER_SHM_HELPER")
	if helper == "" {
		t.Skip("PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it to the C helper)")
	}
	path := sharedPath(t, "from-c")
	debit := func(n int) []string {
		out, err := exec.Command(helper, "debit", path, strconv.Itoa(n)).Output()
		if err != nil {
			t.Fatalf("helper: %v", err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	// The shared clock brackets every debit: the C burst happens after
	// before, Go's reservation before goDone and C's last debit before end.
	before := SharedClockMs()
	for i, line := range debit(10) {
		if line != "admitted 0" {
			t.Fatalf("C debit %d: %q", i, line)
		}
	}
	s, err := OpenShared(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.Reserve()
	goDone := SharedClockMs()
	if err != nil {
		t.Fatal(err)
	}
	// The burst is gone: the next slot is 1000 ms after C's first debit t1,
	// so Go waits 1000 − (now − t1), at least 1000 − (goDone − before).
	if !d.Admitted || d.WaitMs > 1000 || d.WaitMs+(goDone-before) < 1000 {
		t.Fatalf("after C's burst: %+v, want a wait of 1000 ms less at most %d", d, goDone-before)
	}
	// And C sees Go's debit: its next slot is 2000 ms after t1.
	line := debit(1)[0]
	end := SharedClockMs()
	var wait uint64
	if _, err := fmt.Sscanf(line, "admitted %d", &wait); err != nil || wait > 2000 || wait+(end-before) < 2000 {
		t.Fatalf("C after Go: %q, want a wait of 2000 ms less at most %d", line, end-before)
	}
}

// Counters of a shared pacer are the bucket's: every handle on one name
// counts into its file and reads the same counts (docs/metrics.md, "Whose
// counts"). Two handles on one name, the defaults (burst 10): 5
// reservations in all (3 through a, 2 through b), all admitted at once
// whatever the time between them; a releases one of its tickets
// (refunded). Both read 5 admitted, 1 released, 1 refunded; a third
// handle opened after them reads the same, and a reservation through it
// shows in all three.
func TestSharedCountersAreTheBucket(t *testing.T) {
	path := sharedPath(t, "counters")
	a, b := openTwo(t, path)
	var aTickets, bTickets []*Ticket
	for i := 0; i < 3; i++ {
		d, err := a.Reserve()
		if err != nil || !d.Admitted || d.Queued {
			t.Fatalf("a: %+v, %v", d, err)
		}
		aTickets = append(aTickets, d.Ticket)
	}
	for i := 0; i < 2; i++ {
		d, err := b.Reserve()
		if err != nil || !d.Admitted || d.Queued {
			t.Fatalf("b: %+v, %v", d, err)
		}
		bTickets = append(bTickets, d.Ticket)
	}
	if ok, err := a.Release(aTickets[0]); !ok || err != nil {
		t.Fatalf("a release: %v, %v", ok, err)
	}
	// b's ticket through a: not a's, refused in Go before any C call
	// (nothing counted).
	if ok, err := a.Release(bTickets[0]); ok || err != nil {
		t.Fatalf("b's ticket through a: %v, %v", ok, err)
	}
	want := Counters{Admitted: 5, Released: 1, Refunded: 1}
	for name, h := range map[string]*SharedPacer{"a": a, "b": b} {
		if c, err := h.Counters(); err != nil || c != want {
			t.Fatalf("%s's counters %+v, %v; want the bucket's %+v", name, c, err, want)
		}
	}
	// A fresh handle on the same bucket reads what was counted before it.
	c, err := OpenShared(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if cc, err := c.Counters(); err != nil || cc != want {
		t.Fatalf("fresh handle's counters %+v, %v; want %+v", cc, err, want)
	}
	if d, err := c.Reserve(); err != nil || !d.Admitted || d.Queued {
		t.Fatalf("c: %+v, %v", d, err)
	}
	want.Admitted = 6
	for name, h := range map[string]*SharedPacer{"a": a, "b": b, "c": c} {
		if got, err := h.Counters(); err != nil || got != want {
			t.Fatalf("%s's counters after c's reservation %+v, %v; want %+v", name, got, err, want)
		}
	}
	// The bucket's level: 10 − 6 + 1 refunded = 5 tokens at the last
	// call, refilled since at 1 token a second, capped at the burst 10.
	// Whatever the time between the calls, it is 5..10 tokens.
	for name, h := range map[string]*SharedPacer{"a": a, "c": c} {
		level, err := h.Level()
		if err != nil || level < 5*UnitsPerToken || level > 10*UnitsPerToken {
			t.Fatalf("%s's level %d units, %v; want 5..10 tokens", name, level, err)
		}
	}
}

// Close while an Admit on a shared pacer waits: the slot goes back to the
// machine-wide bucket. rate 1, burst 1, the default idle and retries
// (bound 4833): refusals cannot outlast a 60 s slot, so the second Admit
// is shaped and waits exactly the bound (unless 55 s pass between the two
// Admits). The sleep is injected; the test never waits on a timer.
func TestSharedCloseDuringAdmitRefunds(t *testing.T) {
	for _, cancelToo := range []bool{false, true} {
		gate := make(chan time.Duration, 1)
		cfg := DefaultConfig()
		cfg.RatePerMinute = 1
		cfg.Burst = 1
		cfg.Notifier = NewNotifier(slog.New(slog.NewTextHandler(io.Discard, nil)))
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			gate <- d
			<-ctx.Done()
			return ctx.Err()
		}
		path := sharedPath(t, fmt.Sprintf("close-%v", cancelToo))
		s, err := OpenShared(path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if a, err := s.Admit(context.Background()); err != nil || a.Queued {
			t.Fatalf("first: %+v, %v", a, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := s.Admit(ctx); done <- err }()
		if d := <-gate; d != 4833*time.Millisecond {
			t.Fatalf("shaped wait %v, want the bound 4833ms", d)
		}
		_ = s.Close()
		var err2 error
		if cancelToo {
			cancel()
			if err2 = <-done; !errors.Is(err2, ErrClosed) && !errors.Is(err2, context.Canceled) {
				t.Fatalf("got %v, want ErrClosed or context.Canceled", err2)
			}
		} else if err2 = <-done; !errors.Is(err2, ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err2)
		}
		cancel()
		c, err := s.p.mem.counters()
		// The shaped wait given, the bound 4833 ms, is in (2500, 5000]
		// (bucket 6), though its slot came back.
		want := Counters{Admitted: 2, AdmittedAfterWait: 1, Shaped: 1, Released: 1, Refunded: 1, WaitMsTotal: 4833,
			WaitBuckets: [WaitBuckets]uint64{6: 1}}
		if err != nil || c != want {
			t.Fatalf("cancelToo %v: counters %+v, %v; want %+v (the waiting slot refunded)", cancelToo, c, err, want)
		}
	}
}
