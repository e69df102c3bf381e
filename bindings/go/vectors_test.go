package pacer_test

// tests/vectors/*.json (hand-derived by scripts/gen-vectors.py) replayed
// through the binding: every scenario through the raw Reserve/Release
// (which take any uint64 clock, u64::MAX included) and again through
// Admit/Admission.Release with an injected clock; every budget case through
// Resolve; every derived-quantity table through its function.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

type vStep struct {
	Op     string `json:"op"`
	T      uint64 `json:"t"`
	Ticket *int   `json:"ticket"`
	Expect struct {
		Kind           string  `json:"kind"`
		WaitMs         *uint64 `json:"wait_ms"`
		Ticket         *int    `json:"ticket"`
		RequiredWaitMs *uint64 `json:"required_wait_ms"`
		RetryAfterS    *uint64 `json:"retry_after_s"`
		Refunded       *bool   `json:"refunded"`
	} `json:"expect"`
}

type vScenario struct {
	Name   string `json:"name"`
	Config struct {
		RatePerMin    int    `json:"rate_per_min"`
		Burst         int    `json:"burst"`
		IdleTimeoutMs uint64 `json:"idle_timeout_ms"`
		MaxRetries    int    `json:"max_retries"`
		ReleasePolicy string `json:"release_policy"`
	} `json:"config"`
	T           uint64 `json:"t"`
	ExpectPacer struct {
		BoundMs   uint64 `json:"bound_ms"`
		Enabled   bool   `json:"enabled"`
		CanRefuse bool   `json:"can_refuse"`
	} `json:"expect_pacer"`
	Steps []vStep `json:"steps"`
}

// outcome is one step's answer in the vectors' terms.
type outcome struct {
	kind                   string
	waitMs                 uint64
	ticket                 int // 0 = null
	requiredMs, retryAfter uint64
	refunded               bool
}

func expected(s vStep) outcome {
	e := s.Expect
	o := outcome{kind: e.Kind}
	if e.WaitMs != nil {
		o.waitMs = *e.WaitMs
	}
	if e.Ticket != nil {
		o.ticket = *e.Ticket
	}
	if e.RequiredWaitMs != nil {
		o.requiredMs = *e.RequiredWaitMs
	}
	if e.RetryAfterS != nil {
		o.retryAfter = *e.RetryAfterS
	}
	if e.Refunded != nil {
		o.refunded = *e.Refunded
	}
	return o
}

func scenarioConfig(t *testing.T, s vScenario, clock func() uint64) pacer.Config {
	t.Helper()
	policy := pacer.ReleaseRefund
	switch s.Config.ReleasePolicy {
	case "refund":
	case "strict":
		policy = pacer.ReleaseStrict
	default:
		t.Fatalf("%s: unknown release policy %q", s.Name, s.Config.ReleasePolicy)
	}
	return pacer.Config{
		RatePerMinute: s.Config.RatePerMin,
		Burst:         s.Config.Burst,
		IdleTimeout:   time.Duration(s.Config.IdleTimeoutMs) * time.Millisecond,
		MaxRetries:    s.Config.MaxRetries,
		ReleasePolicy: policy,
		Clock:         clock,
		Sleep:         noSleep,
	}
}

func checkPacer(t *testing.T, s vScenario, p *pacer.Pacer) {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.WaitBoundMs != s.ExpectPacer.BoundMs || p.WaitBoundMs() != s.ExpectPacer.BoundMs {
		t.Errorf("%s: bound %d / %d, want %d", s.Name, info.WaitBoundMs, p.WaitBoundMs(), s.ExpectPacer.BoundMs)
	}
	if enabled := info.Mode != pacer.ModeDisabled; enabled != s.ExpectPacer.Enabled {
		t.Errorf("%s: enabled %v, want %v", s.Name, enabled, s.ExpectPacer.Enabled)
	}
	if refusing := p.Mode() == pacer.ModeRefusing; refusing != s.ExpectPacer.CanRefuse {
		t.Errorf("%s: can refuse %v, want %v", s.Name, refusing, s.ExpectPacer.CanRefuse)
	}
}

func TestVectorScenariosRaw(t *testing.T) {
	var v struct {
		Scenarios []vScenario `json:"scenarios"`
	}
	loadVectors(t, "scenarios", &v)
	if len(v.Scenarios) == 0 {
		t.Fatal("no scenarios")
	}
	steps := 0
	for _, s := range v.Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			start := s.T
			p := mustNew(t, scenarioConfig(t, s, func() uint64 { return start }))
			checkPacer(t, s, p)
			tickets := map[int]*pacer.Ticket{}
			issued := 0
			for i, step := range s.Steps {
				var got outcome
				switch step.Op {
				case "reserve":
					d := mustReserve(t, p, step.T)
					if d.Admitted {
						got = outcome{kind: "admitted", waitMs: d.WaitMs}
						if d.Ticket != nil {
							issued++
							tickets[issued] = d.Ticket
							got.ticket = issued
						}
						if d.Queued != (d.WaitMs > 0) {
							t.Errorf("step %d: queued %v with wait %d", i, d.Queued, d.WaitMs)
						}
					} else {
						got = outcome{kind: "refused", requiredMs: d.RequiredWaitMs, retryAfter: d.RetryAfterSeconds}
					}
				case "release":
					refunded, err := p.Release(tickets[*step.Ticket], step.T)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					got = outcome{kind: "released", refunded: refunded}
				default:
					t.Fatalf("step %d: unknown op %q", i, step.Op)
				}
				if want := expected(step); got != want {
					t.Errorf("step %d (%s at %d): got %+v, want %+v", i, step.Op, step.T, got, want)
				}
				steps++
			}
		})
	}
	t.Logf("%d scenarios, %d steps", len(v.Scenarios), steps)
}

func TestVectorScenariosAdmit(t *testing.T) {
	var v struct {
		Scenarios []vScenario `json:"scenarios"`
	}
	loadVectors(t, "scenarios", &v)
	for _, s := range v.Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			clock := &fakeClock{}
			clock.Set(s.T)
			p := mustNew(t, scenarioConfig(t, s, clock.Now))
			checkPacer(t, s, p)
			admissions := map[int]pacer.Admission{}
			issued := 0
			for i, step := range s.Steps {
				clock.Set(step.T)
				var got outcome
				switch step.Op {
				case "reserve":
					a, err := p.Admit(t.Context())
					var refused *pacer.RefusedError
					switch {
					case errors.As(err, &refused):
						got = outcome{kind: "refused", requiredMs: refused.RequiredWaitMs, retryAfter: refused.RetryAfterSeconds}
					case err != nil:
						t.Fatalf("step %d: %v", i, err)
					default:
						got = outcome{kind: "admitted", waitMs: uint64(a.Wait / time.Millisecond)}
						if a.Ticket != nil {
							issued++
							admissions[issued] = a
							got.ticket = issued
						}
					}
				case "release":
					got = outcome{kind: "released", refunded: admissions[*step.Ticket].Release()}
				}
				if want := expected(step); got != want {
					t.Errorf("step %d (%s at %d): got %+v, want %+v", i, step.Op, step.T, got, want)
				}
			}
		})
	}
}

type vNotice struct {
	Kind   string    `json:"kind"`
	Raw    string    `json:"raw"`
	Values [3]uint64 `json:"values"`
}

type vBudget struct {
	RatePerMin        uint32    `json:"rate_per_min"`
	IdleTimeoutMs     uint64    `json:"idle_timeout_ms"`
	TotalTimeoutMs    uint64    `json:"total_timeout_ms"`
	MaxRetries        uint32    `json:"max_retries"`
	BoundMs           uint64    `json:"bound_ms"`
	HintCapS          uint64    `json:"hint_cap_s"`
	RefusalScheduleMs uint64    `json:"refusal_schedule_ms"`
	CanRefuse         bool      `json:"can_refuse"`
	Enabled           bool      `json:"enabled"`
	Notices           []vNotice `json:"notices"`
}

func TestVectorBudgets(t *testing.T) {
	var v struct {
		Cases []struct {
			Name     string `json:"name"`
			Settings struct {
				RatePerMin     *string `json:"rate_per_min"`
				IdleTimeoutMs  *string `json:"idle_timeout_ms"`
				TotalTimeoutMs *string `json:"total_timeout_ms"`
				MaxRetries     *string `json:"max_retries"`
			} `json:"settings"`
			Expect vBudget `json:"expect"`
		} `json:"cases"`
	}
	loadVectors(t, "budgets", &v)
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			s := c.Settings
			b, err := pacer.Resolve(pacer.Settings{
				RatePerMinute:  s.RatePerMin,
				IdleTimeoutMs:  s.IdleTimeoutMs,
				TotalTimeoutMs: s.TotalTimeoutMs,
				MaxRetries:     s.MaxRetries,
			}, quiet())
			if err != nil {
				t.Fatal(err)
			}
			got := vBudget{
				RatePerMin: b.RatePerMinute, IdleTimeoutMs: b.IdleTimeoutMs, TotalTimeoutMs: b.TotalTimeoutMs,
				MaxRetries: b.MaxRetries, BoundMs: b.WaitBoundMs, HintCapS: b.HintCapSeconds,
				RefusalScheduleMs: b.RefusalScheduleMs, CanRefuse: b.CanRefuse, Enabled: b.Enabled,
			}
			for _, n := range b.Notices {
				got.Notices = append(got.Notices, vNotice{Kind: n.Kind.String(), Raw: n.Raw, Values: n.Values})
				if n.Text == "" {
					t.Errorf("notice %s has no text", n.Kind)
				}
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.Expect) {
				t.Errorf("got  %+v\nwant %+v", got, c.Expect)
			}
		})
	}
}

func TestVectorDerived(t *testing.T) {
	var v struct {
		LadderCeiling []struct {
			Idle   uint64 `json:"idle_timeout_ms"`
			Expect uint32 `json:"expect"`
		} `json:"ladder_ceiling"`
		WaitBound []struct {
			Idle    uint64 `json:"idle_timeout_ms"`
			Retries uint32 `json:"max_retries"`
			Expect  uint64 `json:"expect"`
		} `json:"wait_bound_ms"`
		RetryAfter []struct {
			Required uint64 `json:"required_wait_ms"`
			Bound    uint64 `json:"bound_ms"`
			Expect   uint64 `json:"expect"`
		} `json:"retry_after_s"`
		CanRefuse []struct {
			Rate    uint32 `json:"rate_per_min"`
			Retries uint32 `json:"max_retries"`
			Bound   uint64 `json:"bound_ms"`
			Expect  bool   `json:"expect"`
		} `json:"can_refuse"`
	}
	loadVectors(t, "derived", &v)
	n := 0
	for _, c := range v.LadderCeiling {
		if got := pacer.LadderCeiling(c.Idle); got != c.Expect {
			t.Errorf("LadderCeiling(%d) = %d, want %d", c.Idle, got, c.Expect)
		}
		n++
	}
	for _, c := range v.WaitBound {
		if got := pacer.WaitBoundMs(c.Idle, c.Retries); got != c.Expect {
			t.Errorf("WaitBoundMs(%d, %d) = %d, want %d", c.Idle, c.Retries, got, c.Expect)
		}
		n++
	}
	for _, c := range v.RetryAfter {
		if got := pacer.RetryAfterSeconds(c.Required, c.Bound); got != c.Expect {
			t.Errorf("RetryAfterSeconds(%d, %d) = %d, want %d", c.Required, c.Bound, got, c.Expect)
		}
		n++
	}
	for _, c := range v.CanRefuse {
		if got := pacer.CanRefuse(c.Rate, c.Retries, c.Bound); got != c.Expect {
			t.Errorf("CanRefuse(%d, %d, %d) = %v, want %v", c.Rate, c.Retries, c.Bound, got, c.Expect)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no derived cases")
	}
	t.Logf("%d derived cases", n)
}
