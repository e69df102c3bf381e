package pacer

import (
	"strings"
	"time"
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

// sanitize makes a setting expressible as a C string: C strings end at
// the first NUL, so each NUL byte becomes U+FFFD rather than letting C read
// "12\x00x" as "12". The value is then malformed (default kept, notice).
// Other bytes pass unchanged: pacer_resolve takes any bytes and reads text
// that is not UTF-8 as malformed, rendering it lossily in the notice (as
// every binding does).
func sanitize(s *string) *string {
	if s == nil || strings.IndexByte(*s, 0) < 0 {
		return s
	}
	v := strings.ReplaceAll(*s, "\x00", "\uFFFD")
	return &v
}

// original is the setting text, as given, that a notice of kind reports
// (nil for kinds that report no setting text).
func (s Settings) original(kind NoticeKind) *string {
	switch kind {
	case NoticeRateMalformed, NoticeRateClamped:
		return s.RatePerMinute
	case NoticeIdleMalformed, NoticeIdleClamped:
		return s.IdleTimeoutMs
	case NoticeTotalMalformed, NoticeTotalClamped:
		return s.TotalTimeoutMs
	case NoticeRetriesMalformed, NoticeRetriesClamped:
		return s.MaxRetries
	}
	return nil
}

// Resolve turns settings text into a budget (pacer_resolve): malformed
// values keep the default and out-of-range ones clamp, each with a notice
// logged once per key through n (nil: DefaultNotifier). A bad setting never
// makes it fail, whatever its bytes: text that is not UTF-8 or contains a
// NUL byte is malformed. A notice's Raw is the setting exactly as given;
// its Text and Key show invalid UTF-8 and NUL bytes as U+FFFD. The
// returned Budget lists every notice, logged or not.
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
	for i := range b.Notices {
		if raw := s.original(b.Notices[i].Kind); raw != nil && b.Notices[i].Raw != "" {
			b.Notices[i].Raw = *raw
		}
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
