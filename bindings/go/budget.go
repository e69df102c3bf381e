package pacer

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Environment variables BudgetFromEnv reads.
const (
	EnvRatePerMinute  = "PACER_RATE_PER_MIN"
	EnvIdleTimeoutMs  = "PACER_IDLE_TIMEOUT_MS"
	EnvTotalTimeoutMs = "PACER_TOTAL_TIMEOUT_MS"
	EnvMaxRetries     = "PACER_MAX_RETRIES"
)

// Settings are the four settings as text (SPEC §2); nil is unset.
type Settings struct {
	RatePerMinute  *string
	IdleTimeoutMs  *string
	TotalTimeoutMs *string
	MaxRetries     *string
}

// SettingsFromEnv reads the PACER_* variables through lookup (os.LookupEnv
// or a stand-in). A variable that is not set is unset.
func SettingsFromEnv(lookup func(string) (string, bool)) Settings {
	get := func(name string) *string {
		if lookup == nil {
			return nil
		}
		if v, ok := lookup(name); ok {
			return &v
		}
		return nil
	}
	return Settings{
		RatePerMinute:  get(EnvRatePerMinute),
		IdleTimeoutMs:  get(EnvIdleTimeoutMs),
		TotalTimeoutMs: get(EnvTotalTimeoutMs),
		MaxRetries:     get(EnvMaxRetries),
	}
}

// Budget is a resolved set of settings and its derived quantities (SPEC §3).
type Budget struct {
	RatePerMinute     uint32 // new connections per minute (0 = off)
	MaxRetries        uint32 // client retry count
	IdleTimeoutMs     uint64 // no-data deadline per request, ms
	TotalTimeoutMs    uint64 // total deadline per request, ms
	WaitBoundMs       uint64 // longest wait a paced request is granted, ms
	HintCapSeconds    uint64 // largest retry-after hint, s
	RefusalScheduleMs uint64 // how long refusals keep a request retrying, ms
	CanRefuse         bool   // refusals can outlast the wait for a slot
	Enabled           bool   // pacing is on
	Notices           []Notice
}

// Config is a pacer Config for this budget (burst DefaultBurst, refund
// policy); set Clock, Sleep and Notifier on it as needed.
func (b Budget) Config() Config {
	return Config{
		RatePerMinute: int(b.RatePerMinute),
		Burst:         DefaultBurst,
		IdleTimeout:   msDuration(b.IdleTimeoutMs),
		MaxRetries:    int(b.MaxRetries),
		ReleasePolicy: ReleaseRefund,
	}
}

// sanitize makes a setting expressible as a C string without changing
// whether it is a number: invalid UTF-8 and NUL bytes become U+FFFD, so
// such a value is malformed (default kept, notice) rather than an error.
func sanitize(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	if strings.IndexByte(v, 0) >= 0 {
		v = strings.ReplaceAll(v, "\x00", "\uFFFD")
	}
	return &v
}

// Resolve turns settings text into a budget (pacer_resolve): malformed
// values keep the default and out-of-range ones clamp, each with a notice
// logged once per key through n (nil: DefaultNotifier). A bad setting never
// makes it fail; the returned Budget lists every notice, logged or not.
func Resolve(s Settings, n *Notifier) (Budget, error) {
	if err := checkABI(); err != nil {
		return Budget{}, err
	}
	b, err := resolve(Settings{
		RatePerMinute:  sanitize(s.RatePerMinute),
		IdleTimeoutMs:  sanitize(s.IdleTimeoutMs),
		TotalTimeoutMs: sanitize(s.TotalTimeoutMs),
		MaxRetries:     sanitize(s.MaxRetries),
	})
	if err != nil {
		return Budget{}, err
	}
	for _, notice := range b.Notices {
		n.Notify(notice)
	}
	return b, nil
}

// BudgetFromEnv resolves the PACER_* variables read through lookup
// (typically os.LookupEnv), logging notices through DefaultNotifier.
func BudgetFromEnv(lookup func(string) (string, bool)) (Budget, error) {
	return Resolve(SettingsFromEnv(lookup), nil)
}

// IdleTimeout is IdleTimeoutMs as a time.Duration.
func (b Budget) IdleTimeout() time.Duration { return msDuration(b.IdleTimeoutMs) }

// TotalTimeout is TotalTimeoutMs as a time.Duration.
func (b Budget) TotalTimeout() time.Duration { return msDuration(b.TotalTimeoutMs) }
