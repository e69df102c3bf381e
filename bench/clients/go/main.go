// The Go binding's RedisPacer.Reserve beside go-redis's PING on the same
// client (bench/clients/run.sh):
//
//	go run . URL KEY ENGINE CALLS ROUNDS
//
// One JSON line per round: the mean µs per call of CALLS sequential PINGs
// and of CALLS sequential reserves (the order alternates by round). One
// goroutine, so the client's pool hands both the same connection.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "go clients bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("want URL KEY ENGINE CALLS ROUNDS, got %d arguments", len(args))
	}
	calls, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	rounds, err := strconv.Atoi(args[4])
	if err != nil {
		return err
	}
	engine := pacer.RedisEngine(args[2])
	r, err := pacer.OpenRedis(pacer.RedisOptions{
		Addr: args[0], Key: args[1], Engine: engine, OnFailure: pacer.FailClosed,
		Config: pacer.Config{RatePerMinute: 600, Burst: 1000000, IdleTimeout: 120 * time.Second, MaxRetries: 5},
	})
	if err != nil {
		return err
	}
	defer r.Close()
	ctx := context.Background()
	client := r.Client()
	pings := func() (float64, error) {
		start := time.Now()
		for range calls {
			if err := client.Ping(ctx).Err(); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(start).Nanoseconds()) / 1000 / float64(calls), nil
	}
	reserves := func() (float64, error) {
		start := time.Now()
		for i := range calls {
			d, err := r.Reserve(ctx)
			if err != nil {
				return 0, err
			}
			if !d.Admitted || d.WaitMs != 0 || d.Fallback != "" {
				return 0, fmt.Errorf("reserve %d: %+v", i, d)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / 1000 / float64(calls), nil
	}
	out := json.NewEncoder(os.Stdout)
	for round := range rounds {
		first, second := pings, reserves
		if round%2 == 1 {
			first, second = reserves, pings
		}
		a, err := first()
		if err != nil {
			return err
		}
		b, err := second()
		if err != nil {
			return err
		}
		ping, reserve := a, b
		if round%2 == 1 {
			ping, reserve = b, a
		}
		if r.Engine() != engine {
			return fmt.Errorf("engine %q, want %q", r.Engine(), engine)
		}
		line := map[string]any{"client": "go", "engine": string(engine), "round": round, "ping_us": ping, "reserve_us": reserve}
		if err := out.Encode(line); err != nil {
			return err
		}
	}
	return nil
}
