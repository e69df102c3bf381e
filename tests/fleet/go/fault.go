package main

// The Go binding's RedisPacer as a client of the fault run
// (tests/fleet/fault.py):
//
//	go run . fault URL KEY UNTIL_MS QUIET_FROM_MS QUIET_TO_MS EVERY_MS TIMEOUT_MS SEED RATE BURST IDLE RETRIES
//
// Calls until the wall clock reads UNTIL_MS (none from QUIET_FROM_MS to
// QUIET_TO_MS), one JSON line per Admit, through the script (EVALSHA).
// URL is one server or a Redis Cluster's seed nodes separated by commas
// (tests/fleet/cluster_fault.py). Each call's context is cancelled at a
// random point in [0, TIMEOUT_MS) or not at all; admissions the server
// made are kept, so the server's counters account for every answer.

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

func runFault(args []string) error {
	n, err := numbers(args, "URL KEY UNTIL_MS QUIET_FROM_MS QUIET_TO_MS EVERY_MS TIMEOUT_MS SEED RATE BURST IDLE RETRIES")
	if err != nil {
		return err
	}
	until, quietFrom, quietTo, every, timeoutMs, seed := n[0], n[1], n[2], n[3], n[4], n[5]
	r, err := open(args[0], args[1], n[6:], time.Duration(timeoutMs)*time.Millisecond, 50*time.Millisecond)
	if err != nil {
		return err
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	out := json.NewEncoder(os.Stdout)
	for i := 0; time.Now().UnixMilli() < int64(until); i++ {
		if now := time.Now().UnixMilli(); now >= int64(quietFrom) && now < int64(quietTo) {
			time.Sleep(time.Duration(int64(quietTo)-now) * time.Millisecond)
		}
		line := map[string]any{"client": "go", "call": i, "start_ms": time.Now().UnixMilli(), "cancel_at_ms": nil}
		ctx, cancel := context.WithCancel(context.Background())
		if rng.IntN(2) == 0 {
			at := rng.IntN(timeoutMs)
			line["cancel_at_ms"] = at
			time.AfterFunc(time.Duration(at)*time.Millisecond, cancel)
		}
		a, err := r.Admit(ctx)
		var refused *pacer.RefusedError
		switch {
		case err == nil:
			line["outcome"], line["by"], line["wait_ms"] = "admitted", by(a.Fallback), a.Waited.Milliseconds()
		case errors.As(err, &refused):
			line["outcome"], line["by"] = "refused", by(refused.Fallback)
		case errors.Is(err, context.Canceled):
			line["outcome"] = "cancelled"
		default:
			line["outcome"], line["error"] = "error", err.Error()
		}
		cancel()
		line["end_ms"] = time.Now().UnixMilli()
		if err := out.Encode(line); err != nil {
			return err
		}
		time.Sleep(time.Duration(every) * time.Millisecond)
	}
	return nil
}

func by(fallback pacer.FailurePolicy) string {
	if fallback == "" {
		return "server"
	}
	return string(fallback)
}
