package pacer

import (
	"context"
	"log/slog"
	"sync"
)

// NoticeKind is what a notice reports (numbers shared with the C ABI).
type NoticeKind uint32

// The notice kinds; Notice.Values per kind is given on each.
const (
	NoticeRateMalformed    NoticeKind = 1  // [rate used]
	NoticeRateClamped      NoticeKind = 2  // [rate used]
	NoticeIdleMalformed    NoticeKind = 3  // [idle used]
	NoticeIdleClamped      NoticeKind = 4  // [idle used]
	NoticeTotalMalformed   NoticeKind = 5  // [total used]
	NoticeTotalClamped     NoticeKind = 6  // [total used]
	NoticeRetriesMalformed NoticeKind = 7  // [retries used]
	NoticeRetriesClamped   NoticeKind = 8  // [retries used, idle]
	NoticeIdleLowered      NoticeKind = 9  // [idle before, total]
	NoticeTotalRaised      NoticeKind = 10 // [total before, idle]
	NoticePacingDisabled   NoticeKind = 11 // [retries, idle, rate]
	NoticeNoRefuse         NoticeKind = 12 // [rate, retries, bound]
)

// String is the kind's stable name, as in tests/vectors ("rate_malformed",
// …), from the library.
func (k NoticeKind) String() string { return noticeKindName(k) }

// Notice is a structured report of a setting that was ignored or clamped,
// or of a configuration that changes how pacing behaves (SPEC §2).
type Notice struct {
	Kind NoticeKind
	// Key is the dedupe key, namespaced by kind: "rate:<raw>",
	// "disabled:<r>:<idle>:<rate>", … A hostile setting text can never
	// collide with another kind's key.
	Key string
	// Text is the library's English rendering.
	Text string
	// Raw is the offending setting text as given, or "".
	Raw string
	// Values are the numbers, per kind; unused ones are 0.
	Values [3]uint64
}

// Notifier logs notices through log/slog, each once per key. Safe for
// concurrent use.
type Notifier struct {
	logger *slog.Logger
	mu     sync.Mutex
	seen   map[string]struct{}
}

// NewNotifier logs to logger (nil: slog.Default() at the time of logging).
func NewNotifier(logger *slog.Logger) *Notifier {
	return &Notifier{logger: logger, seen: make(map[string]struct{})}
}

// DefaultNotifier is used when none is given: slog.Default(), one
// registry for the process.
var DefaultNotifier = NewNotifier(nil)

// Notify logs notice at warning level unless its key was seen before, and
// reports whether it logged. A panicking handler is contained: a notice
// never fails a request.
func (n *Notifier) Notify(notice Notice) (logged bool) {
	if n == nil {
		n = DefaultNotifier
	}
	if n == nil {
		return false
	}
	n.mu.Lock()
	if n.seen == nil {
		n.seen = make(map[string]struct{})
	}
	_, dup := n.seen[notice.Key]
	if !dup {
		n.seen[notice.Key] = struct{}{}
	}
	n.mu.Unlock()
	if dup {
		return false
	}
	defer func() { _ = recover() }()
	logger := n.logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []slog.Attr{
		slog.String("kind", notice.Kind.String()),
		slog.String("key", notice.Key),
	}
	if notice.Raw != "" {
		attrs = append(attrs, slog.String("raw", notice.Raw))
	}
	attrs = append(attrs, slog.Any("values", notice.Values[:]))
	logger.LogAttrs(context.Background(), slog.LevelWarn, "pacer: "+notice.Text, attrs...)
	return true
}
