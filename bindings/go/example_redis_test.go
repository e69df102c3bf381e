package pacer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// A fleet's bucket in Redis: every proxy opens the same key with the same
// configuration. Rate 10/min, burst 2, idle 30 s, 3 retries: wait bound
// 2000 ms, so a third request at once is refused (its slot is 6 s away).
// The tests run it against their own server (REDIS_URL).
func ExampleOpenRedis() {
	ctx := context.Background()
	r, err := pacer.OpenRedis(pacer.RedisOptions{
		Addr: os.Getenv("REDIS_URL"), // e.g. "redis://10.0.0.5:6379" or "10.0.0.5:6379"
		Key:  "pacer:example",
		Config: pacer.Config{
			RatePerMinute: 10, Burst: 2, IdleTimeout: 30 * time.Second, MaxRetries: 3,
		},
		FleetSize: 2, // while Redis fails, each proxy paces alone at 5/min, burst 1
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	for i := range 3 {
		a, err := r.Admit(ctx) // the server's clock decides; a cancelled ctx releases the ticket
		var refused *pacer.RefusedError
		switch {
		case errors.As(err, &refused):
			fmt.Printf("#%d refused: retry after %d s\n", i, refused.RetryAfterSeconds)
		case err != nil:
			fmt.Println(err) // a *pacer.RedisError: another configuration at this key, WRONGTYPE
		default:
			fmt.Printf("#%d admitted after %v (%v)\n", i, a.Wait, a.Path)
			// the connection failed to open: a.Release(ctx)
		}
	}
	info, err := r.Info(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("admitted", info.Admitted, "refused", info.Refused)
	// Output:
	// #0 admitted after 0s (paced)
	// #1 admitted after 0s (paced)
	// #2 refused: retry after 2 s
	// admitted 2 refused 1
}
