package pacer

// Calls the C wrappers directly, past the Go-side validation, so the
// library's own status codes can be checked against their Go errors.

import (
	"errors"
	"testing"
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
	if d, err := reserve(0); err != nil || !d.Admitted {
		t.Fatalf("%+v, %v", d, err)
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
