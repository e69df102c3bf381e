package pacer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// fakeClock is a settable clock in milliseconds.
type fakeClock struct{ ms atomic.Uint64 }

func (c *fakeClock) Now() uint64       { return c.ms.Load() }
func (c *fakeClock) Set(ms uint64)     { c.ms.Store(ms) }
func (c *fakeClock) Advance(ms uint64) { c.ms.Add(ms) }

// noSleep admits at once, as if the timer had fired.
func noSleep(ctx context.Context, d time.Duration) error { return nil }

// gatedSleep records each requested wait and blocks until ctx is done or
// the test opens the gate.
type gatedSleep struct {
	entered chan time.Duration
	gate    chan struct{}
}

func newGatedSleep() *gatedSleep {
	return &gatedSleep{entered: make(chan time.Duration, 16), gate: make(chan struct{})}
}

func (g *gatedSleep) Sleep(ctx context.Context, d time.Duration) error {
	g.entered <- d
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// logCapture is a slog handler that keeps the records it is given.
type logCapture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

func (l *logCapture) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.records))
	for i, r := range l.records {
		out[i] = r.Message
	}
	return out
}

func (l *logCapture) attr(i int, key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v string
	l.records[i].Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// quiet is a notifier whose log goes nowhere.
func quiet() *pacer.Notifier {
	return pacer.NewNotifier(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
}

func loadVectors(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "tests", "vectors", name+".json"))
	if err != nil {
		t.Fatalf("reading vectors: %v", err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatalf("decoding %s.json: %v", name, err)
	}
}

func mustNew(t testing.TB, cfg pacer.Config) *pacer.Pacer {
	t.Helper()
	if cfg.Notifier == nil {
		cfg.Notifier = quiet()
	}
	p, err := pacer.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// must is what get returns, failing t (the call named by format and
// args) when get returns an error.
func must[T any](t testing.TB, get func() (T, error), format string, args ...any) T {
	t.Helper()
	v, err := get()
	if err != nil {
		t.Fatalf(format+": %v", append(args, err)...)
	}
	return v
}

// mustAdmitAfter is a Reserve at now that must be admitted after a wait
// of waitMs.
func mustAdmitAfter(t *testing.T, p *pacer.Pacer, now, waitMs uint64) pacer.Decision {
	t.Helper()
	d := mustReserve(t, p, now)
	if !d.Admitted || d.WaitMs != waitMs {
		t.Fatalf("Reserve(%d) = %+v, want admitted after %d ms", now, d, waitMs)
	}
	return d
}

func mustCounters(t *testing.T, p *pacer.Pacer) pacer.Counters {
	t.Helper()
	return must(t, p.Counters, "Counters")
}

func mustReserve(t *testing.T, p *pacer.Pacer, now uint64) pacer.Decision {
	t.Helper()
	return must(t, func() (pacer.Decision, error) { return p.Reserve(now) }, "Reserve(%d)", now)
}
