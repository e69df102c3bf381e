package pacer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// Four requests at one instant through a pacer with burst 1 (rate 60, idle
// 30 s, 3 retries: wait bound 2000 ms). The clock is fixed and the sleep
// returns at once, so the example runs instantly.
func Example() {
	p, err := pacer.New(pacer.Config{
		RatePerMinute: 60,
		Burst:         1,
		IdleTimeout:   30 * time.Second,
		MaxRetries:    3,
		Clock:         func() uint64 { return 0 },
		Sleep:         func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	for i := range 4 {
		a, err := p.Admit(context.Background())
		var refused *pacer.RefusedError
		switch {
		case errors.As(err, &refused):
			r, _ := refused.Response("")
			fmt.Printf("#%d refused: %d, retry-after %s\n", i, r.Status, r.Header.Get("Retry-After"))
		case err != nil:
			fmt.Println(err)
		default:
			fmt.Printf("#%d admitted after %v\n", i, a.Wait)
		}
	}
	// Output:
	// #0 admitted after 0s
	// #1 admitted after 1s
	// #2 admitted after 2s
	// #3 refused: 200, retry-after 2
}

// Settings from the environment; a malformed value keeps its default and
// logs a notice once.
func ExampleBudgetFromEnv() {
	env := map[string]string{"PACER_RATE_PER_MIN": "1e2", "PACER_IDLE_TIMEOUT_MS": "30000"}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	b, err := pacer.Resolve(pacer.SettingsFromEnv(func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}), pacer.NewNotifier(logger))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.RatePerMinute, b.IdleTimeoutMs, b.MaxRetries, b.WaitBoundMs, b.CanRefuse)
	// Output:
	// level=WARN msg="pacer: ignoring new-connection rate \"1e2\": not a whole number of connections per minute; using 60/minute" kind=rate_malformed key=rate:1e2 raw=1e2 values="[60 0 0]"
	// 60 30000 3 2000 true
}

// Keyed bookings (SPEC §11): a request refused with a place in line keeps
// it under its key, and its retry is admitted in turn. Burst 1, rate 60,
// idle 30 s, 3 retries: wait bound 2000 ms, hint cap 2 s.
func ExamplePacer_AdmitKey() {
	var now uint64
	p, err := pacer.New(pacer.Config{
		RatePerMinute: 60,
		Burst:         1,
		IdleTimeout:   30 * time.Second,
		MaxRetries:    3,
		Clock:         func() uint64 { return now },
		Sleep:         func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	try := func(key string) {
		a, err := p.AdmitKey(context.Background(), key)
		var refused *pacer.RefusedError
		switch {
		case errors.As(err, &refused):
			fmt.Printf("%s refused: retry-after %d, booked %v\n", key, refused.RetryAfterSeconds, refused.Booked)
		case err != nil:
			fmt.Println(err)
		default:
			fmt.Printf("%s admitted after %v (%v)\n", key, a.Wait, a.Path)
		}
	}
	for _, key := range []string{"req-1", "req-2", "req-3", "req-4"} {
		try(key)
	}
	now = 1000 // req-4 comes back after its hint
	try("req-4")
	fmt.Println(p.PendingKeys(), "pending")
	// Output:
	// req-1 admitted after 0s (paced)
	// req-2 admitted after 1s (paced)
	// req-3 admitted after 2s (paced)
	// req-4 refused: retry-after 1, booked true
	// req-4 admitted after 2s (booked)
	// 0 pending
}
