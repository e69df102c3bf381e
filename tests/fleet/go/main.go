// The Go binding's RedisPacer as a fleet client for tests/fleet/check.py
// and tests/fleet/cluster_check.py:
//
//	go run . URL KEY CALLS EVERY_MS RATE BURST IDLE RETRIES
//
// URL: one server, or a Redis Cluster's seed nodes separated by commas
// (ClusterAddrs; a call may then take up to 4 s, a failover's wait among
// it).
//
// and, with "fault" first, a client of tests/fleet/fault.py (fault.go).
//
// One JSON line per Reserve (wall-clock ms), through the script
// (EVALSHA), so the three bindings together take the three doors. Any
// fallback answer is an error here: the check is about the server's
// decisions.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

func main() {
	run := run
	if len(os.Args) > 1 && os.Args[1] == "fault" {
		run = runFault
		os.Args = os.Args[1:]
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "go hammer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	n, err := numbers(args, "URL KEY CALLS EVERY_MS RATE BURST IDLE RETRIES")
	if err != nil {
		return err
	}
	calls, every := n[0], n[1]
	timeout := time.Second
	if strings.Contains(args[0], ",") {
		timeout = 4 * time.Second
	}
	r, err := open(args[0], args[1], n[2:], timeout, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	out := json.NewEncoder(os.Stdout)
	for range calls {
		sendMs := time.Now().UnixMilli()
		d, err := r.Reserve(context.Background())
		replyMs := time.Now().UnixMilli()
		if err != nil {
			return err
		}
		if d.Fallback != "" {
			return fmt.Errorf("answered by the %s policy, not the server", d.Fallback)
		}
		line := map[string]any{"client": "go", "send_ms": sendMs, "reply_ms": replyMs}
		if d.Admitted {
			line["answer"], line["wait_ms"] = "admitted", d.WaitMs
		} else {
			line["answer"], line["retry_after_s"] = "refused", d.RetryAfterSeconds
		}
		if err := out.Encode(line); err != nil {
			return err
		}
		time.Sleep(time.Duration(every) * time.Millisecond)
	}
	return nil
}

// numbers reads the arguments after URL and KEY as whole numbers, as many
// as usage names.
func numbers(args []string, usage string) ([]int, error) {
	if want := len(strings.Fields(usage)); len(args) != want {
		return nil, fmt.Errorf("want %s, got %d arguments", usage, len(args))
	}
	n := make([]int, len(args)-2)
	for i, text := range args[2:] {
		v, err := strconv.Atoi(text)
		if err != nil {
			return nil, err
		}
		n[i] = v
	}
	return n, nil
}

// open is the fleet client of both modes: through the script (EVALSHA),
// the closed policy, config = RATE BURST IDLE RETRIES; addr is one server
// or a cluster's seed nodes separated by commas.
func open(addr, key string, config []int, timeout, retryAfter time.Duration) (*pacer.RedisPacer, error) {
	rate, burst, idle, retries := config[0], config[1], config[2], config[3]
	options := pacer.RedisOptions{Addr: addr}
	if strings.Contains(addr, ",") {
		// A cluster's seed nodes, as host:port.
		options = pacer.RedisOptions{}
		for _, node := range strings.Split(addr, ",") {
			options.ClusterAddrs = append(options.ClusterAddrs,
				strings.TrimSuffix(strings.TrimPrefix(node, "redis://"), "/"))
		}
	}
	return pacer.OpenRedis(pacer.RedisOptions{
		Addr:         options.Addr,
		ClusterAddrs: options.ClusterAddrs,
		Key:          key,
		Config: pacer.Config{
			RatePerMinute: rate, Burst: burst, IdleTimeout: time.Duration(idle) * time.Millisecond,
			MaxRetries: retries, ReleasePolicy: pacer.ReleaseRefund,
		},
		Engine:     pacer.EngineScript,
		OnFailure:  pacer.FailClosed,
		Timeout:    timeout,
		RetryAfter: retryAfter,
	})
}
