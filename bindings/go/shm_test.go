package pacer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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

// Two handles in one process share one bucket: the defaults admit the burst
// (10) at once across both, then the 11th waits one slot (1000 ms at 60/min,
// less the few ms since the burst).
func TestSharedTwoHandlesOneBucket(t *testing.T) {
	path := sharedPath(t, "two")
	a, err := OpenShared(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenShared(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	immediate := 0
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
	if err != nil {
		t.Fatal(err)
	}
	if !d.Admitted || d.WaitMs <= 900 || d.WaitMs > 1000 {
		t.Fatalf("11th = %+v, want admitted after about 1000 ms", d)
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

func TestSharedAdmitWaitsOnTheSharedClock(t *testing.T) {
	// rate 600, burst 1, idle 3600000, 5 retries: slots 100 ms apart.
	cfg := Config{RatePerMinute: 600, Burst: 1, IdleTimeout: DefaultIdleTimeout * 30, MaxRetries: 5}
	s, err := OpenShared(sharedPath(t, "admit"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Admit(context.Background())
	if err != nil || first.Queued {
		t.Fatalf("first = %+v, %v", first, err)
	}
	second, err := s.Admit(context.Background())
	if err != nil || !second.Queued || second.Waited < second.Wait-5e6 {
		t.Fatalf("second = %+v, %v", second, err)
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
	if err != nil {
		t.Fatal(err)
	}
	// The burst is gone: the next slot is 1000 ms after the C debits.
	if !d.Admitted || !d.Queued || d.WaitMs <= 500 || d.WaitMs > 1000 {
		t.Fatalf("after C's burst: %+v, want queued up to 1000 ms", d)
	}
	// And C sees Go's debit: its next slot is one more second out.
	line := debit(1)[0]
	var wait uint64
	if _, err := fmt.Sscanf(line, "admitted %d", &wait); err != nil || wait <= d.WaitMs+500 || wait > 2000 {
		t.Fatalf("C after Go: %q (Go waited %d)", line, d.WaitMs)
	}
}
