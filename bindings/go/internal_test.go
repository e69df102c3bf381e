package pacer

// Calls the C wrappers directly, past the Go-side validation, so the
// library's own status codes can be checked against their Go errors.

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"
)

func TestStatusErrorsFromC(t *testing.T) {
	s, err := allocStorage()
	if err != nil {
		t.Fatal(err)
	}
	defer s.free()
	owner := &Pacer{} // the tickets' owner
	reserve := func(nowMs uint64) (Decision, error) {
		var d Decision
		err := s.reserve(nowMs, owner, &d)
		return d, err
	}
	if !s.aligned() {
		t.Fatal("storage is not 16-byte aligned")
	}
	// Zeroed storage was never initialised.
	if _, err := reserve(0); !errors.Is(err, StatusNotInitialized) {
		t.Fatalf("reserve on fresh storage: %v", err)
	}
	valid := cConfig{rate: 60, burst: 10, idle: 120000, retries: 5}
	for _, tc := range []struct {
		change func(*cConfig)
		want   Status
	}{
		{func(c *cConfig) { c.rate = 601 }, StatusRateTooHigh},
		{func(c *cConfig) { c.burst = 1_000_001 }, StatusBurstTooLarge},
		{func(c *cConfig) { c.retries = 6 }, StatusRetriesExceedLadder},
		{func(c *cConfig) { c.policy = 7 }, StatusInvalidEnum},
		// Adaptive pacing: the two fields reach the library (a floor above
		// the rate, a ceiling below it or above 600, with adaptation on).
		{func(c *cConfig) { c.floor = 61 }, StatusAdaptiveRange},
		{func(c *cConfig) { c.floor, c.ceiling = 10, 59 }, StatusAdaptiveRange},
		{func(c *cConfig) { c.floor, c.ceiling = 10, 601 }, StatusAdaptiveRange},
	} {
		c := valid
		tc.change(&c)
		err := s.init(c, 0)
		var ce *CallError
		if !errors.Is(err, tc.want) || !errors.As(err, &ce) || ce.Op != "pacer_init" {
			t.Errorf("init %+v: got %v, want %v", c, err, tc.want)
		}
		// A failing init leaves the storage as it was: still uninitialised.
		if _, err := reserve(0); !errors.Is(err, StatusNotInitialized) {
			t.Errorf("after a failed init: %v", err)
		}
	}
	if err := s.init(valid, 0); err != nil {
		t.Fatal(err)
	}
	// An outcome the library does not know (Observe refuses it in Go
	// first) is its PACER_STATUS_INVALID_ENUM.
	if _, err := s.observe(Outcome(3), 0); !errors.Is(err, StatusInvalidEnum) {
		t.Fatalf("observe of outcome 3: %v, want StatusInvalidEnum", err)
	}
	if rate, err := s.rateInForce(0); rate != 60 || err != nil {
		t.Fatalf("rateInForce = %d, %v; want 60", rate, err)
	}
	d, err := reserve(0)
	if err != nil || !d.Admitted || d.Ticket == nil || d.Ticket.tag == 0 {
		t.Fatalf("%+v, %v; want admitted with a ticket carrying a nonzero owner tag", d, err)
	}
	// ABI 2: a ticket with another owner tag is refused, nothing changed.
	tk := d.Ticket
	if _, err := s.release(tk.seq, tk.debitUnits, tk.tag+1, 0); !errors.Is(err, StatusForeignTicket) {
		t.Fatalf("release with a foreign tag: %v, want StatusForeignTicket", err)
	}
	if _, err := s.redeem(tk.seq, tk.debitUnits, tk.tag^0x8000_0000, 0, 0, owner); !errors.Is(err, StatusForeignTicket) {
		t.Fatalf("redeem with a foreign tag: %v, want StatusForeignTicket", err)
	}
	if ok, err := s.release(tk.seq, tk.debitUnits, tk.tag, 0); !ok || err != nil {
		t.Fatalf("release with its own tag: %v, %v; want a refund", ok, err)
	}
	// A pacer pointer off its 16-byte alignment is refused before it is read.
	off := &storage{}
	*(*unsafe.Pointer)(unsafe.Pointer(&off.ptr)) = unsafe.Add(unsafe.Pointer(s.ptr), 4)
	if off.aligned() {
		t.Fatal("the offset pointer is aligned")
	}
	if _, err := off.info(); !errors.Is(err, StatusMisaligned) {
		t.Fatalf("info on a misaligned pacer: %v, want StatusMisaligned", err)
	}
	if StatusForeignTicket.String() == "unknown status" || StatusMisaligned.String() == "unknown status" {
		t.Fatalf("%q, %q", StatusForeignTicket, StatusMisaligned)
	}
	if got := StatusNullParameter.String(); got != "a required pointer argument was NULL" {
		t.Errorf("StatusNullParameter = %q", got)
	}
	if got := Status(99).String(); got != "unknown status" {
		t.Errorf("Status(99) = %q", got)
	}
	if statusErr("x", 0) != nil {
		t.Error("OK is not an error")
	}
}

// The default sleep: a timer that fires (nil), and a context already done
// ends an hour-long wait (the timer cannot be ready first).
func TestTimerSleep(t *testing.T) {
	if err := timerSleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("timer: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := timerSleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
