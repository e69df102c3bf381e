package pacer_test

// RedisPacer under the replies and faults of docs/fleet-clients.md: a
// redemption's fresh ticket, the failure classification on real servers
// (a replica, maxmemory, a function deleted, a module unloaded), the one
// deadline per call, replies of a shape the client does not know and
// cancellation mid round trip. Relations only: no assertion depends on how
// fast the machine is, except deadlines checked with a slack of a second.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// bookOnServer makes ReserveOrBook calls on r until the server books one;
// it returns the booking.
func bookOnServer(t *testing.T, r *pacer.RedisPacer) *pacer.RedisBooking {
	t.Helper()
	for range 20 {
		bd, err := r.ReserveOrBook(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		if bd.Fallback != "" {
			t.Fatalf("answered by the policy: %+v", bd)
		}
		if bd.Booked() {
			return bd.Booking
		}
	}
	t.Fatal("no booking in 20 calls")
	return nil
}

// redeemWhenDue redeems b until the server admits it (its slot comes
// within the wait bound as the server's clock runs).
func redeemWhenDue(t *testing.T, r *pacer.RedisPacer, b *pacer.RedisBooking) pacer.RedisDecision {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		d, err := r.Redeem(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		if d.Admitted {
			return d
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the booking was not admitted in 20 s")
	return pacer.RedisDecision{}
}

// A redemption that admits spends the booking: the admission's ticket is
// a new one, which refunds once; the booking's own ticket refunds nothing
// and is not sent.
func TestRedisRedeemSpendsTheBooking(t *testing.T) {
	eachEngine(t, func(t *testing.T, _ pacer.RedisEngine, s *redisServer) {
		ctx := context.Background()
		cfg := fleetConfig()
		cfg.Burst = 1
		r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: cfg})
		b := bookOnServer(t, r)
		d := redeemWhenDue(t, r, b)
		if d.Path != pacer.PathBooked || d.Fallback != "" || d.Ticket == nil || d.Ticket == b.Ticket ||
			d.Ticket.Key != r.Key() || d.Ticket.Value == "" || d.Ticket.Fallback() || d.Ticket.Spent() {
			t.Fatalf("redeemed: %+v, ticket %+v", d, d.Ticket)
		}
		if !b.Ticket.Spent() {
			t.Fatal("the booking's ticket is not spent after the redemption")
		}
		before := mustRedisInfo(t, r)
		if ok, err := r.Release(ctx, b.Ticket); ok || err != nil {
			t.Fatalf("releasing the redeemed booking = %v, %v", ok, err)
		}
		if info := mustRedisInfo(t, r); info.Released != before.Released || info.ReleaseRefused != before.ReleaseRefused {
			t.Fatalf("the redeemed booking's release reached the server: %+v, before %+v", info, before)
		}
		if ok, err := r.Release(ctx, d.Ticket); !ok || err != nil {
			t.Fatalf("releasing the admission = %v, %v", ok, err)
		}
		if info := mustRedisInfo(t, r); info.Released != before.Released+1 {
			t.Fatalf("released %d, want %d", info.Released, before.Released+1)
		}
		if ok, err := r.Release(ctx, d.Ticket); ok || err != nil {
			t.Fatalf("second release of the admission = %v, %v", ok, err)
		}
		if _, err := r.Redeem(ctx, b); !errors.Is(err, pacer.ErrBookingSpent) {
			t.Fatalf("a second redemption: %v", err)
		}
	})
}

// The admission carries the ticket text of the reply's item 3, on the
// bucket's key, whatever the booking's text was.
func TestRedisRedeemTicketIsTheReplys(t *testing.T) {
	const booking = "4.2.60000.9000.00000000000000aa"
	const fresh = "5.3.60000.0.00000000000000bb"
	f := startFakeRedis(t, func(cmd []string) string {
		switch strings.ToUpper(cmd[0]) {
		case "PACER.BOOK":
			return respArray(respBulk("booked"), respInt(2), respBulk(booking), respInt(9000), respInt(0))
		case "PACER.REDEEM":
			return respArray(respBulk("admitted"), respInt(0), respBulk(fresh), respBulk("booked"), respInt(0))
		case "PACER.RELEASE":
			return respInt(1)
		}
		return respError("ERR unexpected " + cmd[0])
	})
	ctx := context.Background()
	r, _ := openRedis(t, pacer.RedisOptions{
		Addr: f.Addr(), Config: fleetConfig(), Engine: pacer.EngineModule, OnFailure: pacer.FailClosed,
	})
	bd, err := r.ReserveOrBook(ctx, 3)
	if err != nil || !bd.Booked() || bd.Booking.Value != booking {
		t.Fatalf("ReserveOrBook: %+v, %v", bd, err)
	}
	d, err := r.Redeem(ctx, bd.Booking)
	if err != nil || !d.Admitted || d.Fallback != "" || d.Ticket == nil {
		t.Fatalf("Redeem: %+v, %v", d, err)
	}
	if d.Ticket.Value != fresh || d.Ticket.Key != r.Key() {
		t.Fatalf("the admission's ticket is %q on %q, want %q on %q", d.Ticket.Value, d.Ticket.Key, fresh, r.Key())
	}
	if ok, err := r.Release(ctx, bd.Booking.Ticket); ok || err != nil {
		t.Fatalf("releasing the redeemed booking = %v, %v", ok, err)
	}
	if n := f.count("PACER.RELEASE"); n != 0 {
		t.Fatalf("%d releases sent for a spent booking", n)
	}
	if ok, err := r.Release(ctx, d.Ticket); !ok || err != nil {
		t.Fatalf("releasing the admission = %v, %v", ok, err)
	}
	var released []string
	for _, cmd := range f.commands() {
		if strings.EqualFold(cmd[0], "PACER.RELEASE") {
			released = append(released, strings.Join(cmd[1:], " "))
		}
	}
	if want := r.Key() + " " + fresh; len(released) != 1 || released[0] != want {
		t.Fatalf("releases sent: %q, want [%q]", released, want)
	}
}

// waitFor polls cond until it holds, for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within 20 s", what)
}

// startReplica starts a server (with primary's module) replicating
// primary, and waits until its link to the primary is up.
func startReplica(t *testing.T, primary *redisServer) *redisServer {
	t.Helper()
	s := startRedis(t, primary.Module)
	c := s.client(t)
	ctx := context.Background()
	// The primary sends its data at once (the default waits 5 s for more
	// replicas).
	if err := primary.client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica's link", func() bool {
		return strings.Contains(c.Info(ctx, "replication").Val(), "master_link_status:up")
	})
	return s
}

// outageError is the error the outage notice carried ("" without one).
func outageError(c *logCapture) string {
	for i, m := range c.messages() {
		if strings.Contains(m, outageStarted) {
			return c.attr(i, "error")
		}
	}
	return ""
}

// mustFallback is a Reserve the policy closed answered, for the reason
// the outage notice names.
func mustFallback(t *testing.T, r *pacer.RedisPacer, capture *logCapture, reason string) {
	t.Helper()
	d, err := r.Reserve(context.Background())
	if err != nil || d.Admitted || d.Fallback != pacer.FailClosed || d.RetryAfterSeconds != pacer.HintCapSeconds(r.WaitBoundMs()) {
		t.Fatalf("Reserve = %+v, %v; want refused by the closed policy", d, err)
	}
	if n := countMessages(capture, outageStarted); n != 1 {
		t.Fatalf("%d outage notices: %q", n, capture.messages())
	}
	if got := outageError(capture); !strings.Contains(got, reason) {
		t.Fatalf("the outage notice's error is %q, want one naming %s", got, reason)
	}
}

// A replica refuses writes, READONLY (through the script: ERR READONLY,
// raised by its redis.call): an outage on every engine, forced or found
// by auto, so the policy answers.
func TestRedisReplicaIsAnOutage(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine pacer.RedisEngine, primary *redisServer) {
		ctx := context.Background()
		replica := startReplica(t, primary)
		if engine == pacer.EngineFunction {
			c := replica.client(t)
			waitFor(t, "the function on the replica", func() bool {
				libs, err := c.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", "pacer").Slice()
				return err == nil && len(libs) == 1
			})
		}
		for _, want := range []pacer.RedisEngine{engine, pacer.EngineAuto} {
			r, capture := openRedis(t, pacer.RedisOptions{
				Addr: replica.Addr(), Key: "replica:" + string(want), Config: slowConfig(),
				Engine: want, OnFailure: pacer.FailClosed,
			})
			mustFallback(t, r, capture, "READONLY")
		}
		// The same calls on the primary are answered.
		p, _ := openRedis(t, pacer.RedisOptions{Addr: primary.Addr(), Config: slowConfig(), Engine: engine})
		if d := mustRedisReserve(t, p); !d.Admitted || d.Fallback != "" {
			t.Fatalf("on the primary: %+v", d)
		}
	})
}

// A server past its maxmemory refuses writes, OOM (through the script:
// ERR OOM): an outage; once memory is allowed again the server answers.
func TestRedisOutOfMemoryIsAnOutage(t *testing.T) {
	eachEngine(t, func(t *testing.T, _ pacer.RedisEngine, s *redisServer) {
		ctx := context.Background()
		const retryAfter = 50 * time.Millisecond
		r, capture := openRedis(t, pacer.RedisOptions{
			Addr: s.Addr(), Config: slowConfig(), OnFailure: pacer.FailClosed, RetryAfter: retryAfter,
		})
		if d := mustRedisReserve(t, r); !d.Admitted || d.Fallback != "" {
			t.Fatalf("before: %+v", d)
		}
		control := s.client(t)
		if err := control.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		mustFallback(t, r, capture, "OOM")
		if err := control.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(retryAfter + 50*time.Millisecond)
		if d := mustRedisReserve(t, r); d.Fallback != "" {
			t.Fatalf("after: %+v", d)
		}
		if countMessages(capture, outageEnded) != 1 {
			t.Fatalf("notices: %q", capture.messages())
		}
	})
}

// reservesAnswered makes n Reserve calls on r, each answered by the
// server (admitted or refused, never by the policy).
func reservesAnswered(t *testing.T, r *pacer.RedisPacer, n int) {
	t.Helper()
	for i := range n {
		if d := mustRedisReserve(t, r); d.Fallback != "" {
			t.Fatalf("call %d answered by the policy: %+v", i, d)
		}
	}
}

// engineRemoved checks an auto client across the removal of the engine it
// found (was): every call before and after answered by the server, the
// script found next, each call counted on the one bucket, no notice.
func engineRemoved(t *testing.T, r *pacer.RedisPacer, capture *logCapture, was pacer.RedisEngine, remove func() error) {
	t.Helper()
	reservesAnswered(t, r, 2)
	if r.Engine() != was {
		t.Fatalf("engine before: %q, want %q", r.Engine(), was)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	reservesAnswered(t, r, 3)
	if r.Engine() != pacer.EngineScript {
		t.Fatalf("engine after %s was removed: %q", was, r.Engine())
	}
	if info := mustRedisInfo(t, r); info.Admitted+info.Refused != 5 {
		t.Fatalf("the server counted %d calls of 5: %+v", info.Admitted+info.Refused, info)
	}
	if n := len(capture.messages()); n != 0 {
		t.Fatalf("notices: %q", capture.messages())
	}
}

// The function deleted under a client (FUNCTION DELETE pacer): auto asks
// the server again, finds the script and goes on. Forced to the function,
// the retry finds it gone again: an outage, until the operator loads it
// again.
func TestRedisFunctionDeletedUnderTheClient(t *testing.T) {
	s := engineServer(t, pacer.EngineFunction)
	const retryAfter = 50 * time.Millisecond
	r, capture := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: fleetConfig(), OnFailure: pacer.FailClosed})
	forced, forcedCapture := openRedis(t, pacer.RedisOptions{
		Addr: s.Addr(), Key: "forced", Config: fleetConfig(), OnFailure: pacer.FailClosed,
		Engine: pacer.EngineFunction, RetryAfter: retryAfter,
	})
	reservesAnswered(t, forced, 1)
	engineRemoved(t, r, capture, pacer.EngineFunction, func() error {
		return s.client(t).FunctionDelete(context.Background(), "pacer").Err()
	})
	mustFallback(t, forced, forcedCapture, "Function not found")
	s.loadFunction(t)
	time.Sleep(retryAfter + 50*time.Millisecond)
	reservesAnswered(t, forced, 1)
	if info := mustRedisInfo(t, forced); info.Admitted+info.Refused != 2 {
		t.Fatalf("the server counted %d calls of 2: %+v", info.Admitted+info.Refused, info)
	}
}

// The module unloaded under a client (MODULE UNLOAD pacer): auto asks the
// server again and goes on with the script.
func TestRedisModuleUnloadedUnderTheClient(t *testing.T) {
	s := startRedis(t, moduleOrSkip(t), "--enable-module-command", "yes")
	r, capture := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: fleetConfig(), OnFailure: pacer.FailClosed})
	engineRemoved(t, r, capture, pacer.EngineModule, func() error {
		return s.client(t).Do(context.Background(), "MODULE", "UNLOAD", "pacer").Err()
	})
}

// scripted answers each command (by its name, and its subcommand for
// MODULE, FUNCTION and SCRIPT) with the next of its replies, and leaves it
// unanswered once they are used up; each answer comes after delay.
func scripted(delay time.Duration, replies map[string][]string) func(cmd []string) string {
	var mu sync.Mutex
	return func(cmd []string) string {
		name := strings.ToUpper(cmd[0])
		if (name == "MODULE" || name == "FUNCTION" || name == "SCRIPT") && len(cmd) > 1 {
			name += " " + strings.ToUpper(cmd[1])
		}
		mu.Lock()
		next := replies[name]
		reply := ""
		if len(next) > 0 {
			reply, replies[name] = next[0], next[1:]
		}
		mu.Unlock()
		time.Sleep(delay)
		return reply
	}
}

// One deadline bounds the whole call: connecting, asking for the engine,
// loading the script, the retry after an engine change. Past it the call
// is an outage, answered by the policy.
func TestRedisOneDeadlinePerCall(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const slack = time.Second
	sum := sha1.Sum([]byte(pacer.PacerScript()))
	sha := respBulk(hex.EncodeToString(sum[:]))
	noScript := respError("NOSCRIPT No matching script. Please use EVAL.")
	admitted := respArray(respBulk("admitted"), respInt(0), respBulk("0.1.60000.0.0123456789abcdef"), respBulk("paced"), respInt(0))
	cases := []struct {
		name   string
		engine pacer.RedisEngine
		answer func(cmd []string) string
	}{
		{"silent/auto", pacer.EngineAuto, nil},
		{"silent/module", pacer.EngineModule, nil},
		{"silent/function", pacer.EngineFunction, nil},
		{"silent/script", pacer.EngineScript, nil},
		// Each step answers within the timeout; all of them do not.
		{"slow steps", pacer.EngineAuto, scripted(timeout*5/6, map[string][]string{
			"MODULE LIST": {"*0\r\n"}, "FUNCTION LIST": {"*0\r\n"}, "SCRIPT LOAD": {sha}, "EVALSHA": {admitted},
		})},
		{"reload unanswered", pacer.EngineScript, scripted(0, map[string][]string{
			"SCRIPT LOAD": {sha}, "EVALSHA": {noScript},
		})},
		{"engine asked again, unanswered", pacer.EngineAuto, scripted(0, map[string][]string{
			"MODULE LIST": {"*0\r\n"}, "FUNCTION LIST": {"*0\r\n"}, "SCRIPT LOAD": {sha}, "EVALSHA": {noScript},
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startFakeRedis(t, c.answer)
			r, capture := openRedis(t, pacer.RedisOptions{
				Addr: f.Addr(), Config: fleetConfig(), Engine: c.engine, OnFailure: pacer.FailClosed, Timeout: timeout,
			})
			start := time.Now()
			d, err := r.Reserve(context.Background())
			elapsed := time.Since(start)
			if err != nil || d.Admitted || d.Fallback != pacer.FailClosed {
				t.Fatalf("Reserve = %+v, %v; want refused by the closed policy", d, err)
			}
			if elapsed > timeout+slack {
				t.Fatalf("the call took %v, past its timeout %v and %v of slack", elapsed, timeout, slack)
			}
			if countMessages(capture, outageStarted) != 1 {
				t.Fatalf("notices: %q", capture.messages())
			}
		})
	}
}

// A reply of a shape the client does not know is an error showing the
// reply, even under the open policy: never an admission, never an outage.
func TestRedisUnknownReplyIsAnError(t *testing.T) {
	cases := []struct{ reply, shown string }{
		{respNil, "nil"},
		{respInt(1), "1"},
		{respBulk("admitted"), "admitted"},
		{respArray(respBulk("admitted")), "admitted"},
		{respArray(respBulk("admitted"), respBulk("soon"), respNil, respBulk("paced"), respInt(0)), "soon"},
		{respArray(respBulk("admitted"), respInt(0), respInt(7), respBulk("paced"), respInt(0)), "7"},
		{respArray(respBulk("admitted"), respInt(0), respNil, respBulk("quickly"), respInt(0)), "quickly"},
		{respArray(respBulk("granted"), respInt(0), respNil, respBulk("paced"), respInt(0)), "granted"},
	}
	for i, c := range cases {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			f := startFakeRedis(t, func(cmd []string) string { return c.reply })
			r, capture := openRedis(t, pacer.RedisOptions{
				Addr: f.Addr(), Config: fleetConfig(), Engine: pacer.EngineModule, OnFailure: pacer.FailOpen,
			})
			d, err := r.Reserve(context.Background())
			var replyErr *pacer.RedisError
			if !errors.As(err, &replyErr) || d.Admitted {
				t.Fatalf("reply %q: Reserve = %+v, %v; want a *RedisError", c.reply, d, err)
			}
			if !strings.Contains(replyErr.Reply, c.shown) {
				t.Fatalf("reply %q: the error %q does not show it", c.reply, replyErr.Reply)
			}
			if len(capture.messages()) != 0 {
				t.Fatalf("notices: %q", capture.messages())
			}
		})
	}
}

// A cancellation while the request is on the wire ends the call with the
// context's error, and what the late reply carries is released: the
// server counts the release.
func TestRedisCancelInFlightReleases(t *testing.T) {
	eachEngine(t, func(t *testing.T, _ pacer.RedisEngine, s *redisServer) {
		ctx := context.Background()
		p := startHoldProxy(t, s.Addr())
		cfg := fleetConfig()
		r, _ := openRedis(t, pacer.RedisOptions{
			Addr: p.Addr(), Key: "bucket", Config: cfg, Timeout: 2 * time.Second, OnFailure: pacer.FailClosed,
		})
		watch, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "bucket", Config: cfg})
		if created, err := r.Create(ctx); err != nil || !created {
			t.Fatalf("Create = %v, %v", created, err)
		}
		// inFlight runs call, cancelling its context once its request has
		// reached the server and before the reply is let through.
		inFlight := func(call func(ctx context.Context) error) error {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			p.hold()
			defer p.letGo()
			done := make(chan error, 1)
			go func() { done <- call(cctx) }()
			select {
			case <-p.sent:
			case <-time.After(20 * time.Second):
				t.Fatal("no request reached the server in 20 s")
			}
			cancel()
			p.letGo()
			return <-done
		}

		// Admit with no wait (the burst).
		err := inFlight(func(ctx context.Context) error { _, err := r.Admit(ctx); return err })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Admit cancelled in flight: %v", err)
		}
		waitFor(t, "the admission released", func() bool {
			info := mustRedisInfo(t, watch)
			return info.Admitted == 1 && info.Released == 1
		})

		// A booking (or an admission, if the bucket refilled meanwhile).
		for mustRedisReserve(t, watch).Admitted {
		}
		before := mustRedisInfo(t, watch)
		err = inFlight(func(ctx context.Context) error { _, err := r.ReserveOrBook(ctx, 3); return err })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ReserveOrBook cancelled in flight: %v", err)
		}
		waitFor(t, "the booking released", func() bool {
			info := mustRedisInfo(t, watch)
			return info.Booked+info.Admitted == before.Booked+before.Admitted+1 && info.Released == before.Released+1
		})
	})
}
