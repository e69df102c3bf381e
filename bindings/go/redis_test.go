package pacer_test

// RedisPacer against real redis-servers (redis_server_test.go). No test
// asserts how long anything took. The server's clock moves between calls,
// so a test checks relations that hold at any machine speed (answers,
// fallbacks and the server's counters against what the calls were told),
// or runs its sequence on a configuration whose tokens come back so slowly
// that the expected answers hold unless several seconds pass between its
// calls, and says how many.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/connpacer/pacer/bindings/go/internal/redistest"
	"github.com/redis/go-redis/v9"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// fleetConfig is rate 60, burst 2, idle 30 s, 3 retries: wait bound
// 2000 ms, refusal hint at most 2 s. A token comes back every 1000 ms, so
// what a call after the burst gets depends on how fast the calls came:
// only relations are checked on it.
func fleetConfig() pacer.Config {
	return pacer.Config{RatePerMinute: 60, Burst: 2, IdleTimeout: 30 * time.Second, MaxRetries: 3}
}

// longConfig is rate 6, burst 2, idle 300 s, 5 retries: refusing, wait
// bound min(15000, ⌊(300000 − 62000) / 12⌋) = 15000 ms, hint cap 15 s
// (SPEC §3). A token takes 10 s to come back, so on the server's real
// clock a burst spent at once stays spent: the third call waits (0, 10000]
// unless 10 s pass after the first, and the fourth needs 20000 ms less
// what passed, past the bound (refused), unless 5 s pass.
func longConfig() pacer.Config {
	return pacer.Config{RatePerMinute: 6, Burst: 2, IdleTimeout: 300 * time.Second, MaxRetries: 5}
}

// roomyConfig is longConfig's budget (idle 300 s, 5 retries: bound
// 15000 ms, hint cap 15 s) at rate 5, a token every 12000 ms; refusing,
// as the retries' schedule of 5 · 15000 = 75000 ms outlasts the wait for
// one token (SPEC §3). A burst of 2 spent at once stays spent: the third
// call waits 12000 ms less what passed since the first, (0, 12000],
// unless 12 s pass; the fourth needs 24000 ms less that, past the bound:
// refused (required (15000, 24000], hint ⌈required/1000⌉ >= 16, capped
// at 15), or booked (a horizon of at least 15000 + 15000 ms), unless 9 s
// pass after the first.
func roomyConfig() pacer.Config {
	cfg := longConfig()
	cfg.RatePerMinute = 5
	return cfg
}

// minuteConfig is longConfig's budget at rate 1, a token every 60000 ms;
// still refusing, as the 5 retries' schedule of 5 · 15000 = 75000 ms
// outlasts the wait for one token (SPEC §3). A burst spent at once stays
// spent: the next call needs 60000 ms less what passed since the first,
// past the 15000 ms bound: refused (hint 15, the cap) unless 45 s pass.
func minuteConfig() pacer.Config {
	cfg := longConfig()
	cfg.RatePerMinute = 1
	return cfg
}

// slowConfig is rate 10, burst 2, idle 30 s, 3 retries: a third request
// at once is refused (its slot is 6 s away, past the 2000 ms bound)
// unless 4 s pass after the first.
func slowConfig() pacer.Config {
	return pacer.Config{RatePerMinute: 10, Burst: 2, IdleTimeout: 30 * time.Second, MaxRetries: 3}
}

// openRedis opens a RedisPacer whose notices go to the returned capture;
// it is closed when t ends.
func openRedis(t *testing.T, opts pacer.RedisOptions) (*pacer.RedisPacer, *logCapture) {
	t.Helper()
	capture := &logCapture{}
	opts.Config.Notifier = pacer.NewNotifier(slog.New(capture))
	if opts.Key == "" {
		opts.Key = "pacer:" + t.Name()
	}
	r, err := pacer.OpenRedis(opts)
	if err != nil {
		t.Fatalf("OpenRedis: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, capture
}

func mustRedisReserve(t *testing.T, r *pacer.RedisPacer) pacer.RedisDecision {
	t.Helper()
	return must(t, func() (pacer.RedisDecision, error) { return r.Reserve(context.Background()) }, "Reserve")
}

func mustRedisInfo(t *testing.T, r *pacer.RedisPacer) pacer.RedisInfo {
	t.Helper()
	return must(t, func() (pacer.RedisInfo, error) { return r.Info(context.Background()) }, "Info")
}

// countMessages is how many notices contain part.
func countMessages(c *logCapture, part string) int {
	n := 0
	for _, m := range c.messages() {
		if strings.Contains(m, part) {
			n++
		}
	}
	return n
}

const (
	outageStarted = "redis failed"
	outageEnded   = "redis answers again"
)

func TestRedisScriptCopyIsTheFile(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("..", "..", "redis", "pacer.lua"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile("pacer.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, want) {
		t.Fatal("bindings/go/pacer.lua differs from redis/pacer.lua: run go generate in bindings/go")
	}
	if pacer.PacerScript() != string(want) {
		t.Fatal("the embedded script differs from redis/pacer.lua")
	}
}

// engineServer starts a server on which auto finds engine.
func engineServer(t *testing.T, engine pacer.RedisEngine) *redisServer {
	t.Helper()
	switch engine {
	case pacer.EngineModule:
		return startRedis(t, moduleOrSkip(t))
	case pacer.EngineFunction:
		s := startRedis(t, "")
		s.loadFunction(t)
		return s
	}
	return startRedis(t, "")
}

var engines = []pacer.RedisEngine{pacer.EngineModule, pacer.EngineFunction, pacer.EngineScript}

// eachEngine runs test as a subtest per engine, each on a server of its
// own on which auto finds that engine.
func eachEngine(t *testing.T, test func(t *testing.T, engine pacer.RedisEngine, s *redisServer)) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) { test(t, engine, engineServer(t, engine)) })
	}
}

// Each engine is the one auto picks on its server, and answers as
// docs/redis.md says.
func TestRedisEnginesByAuto(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			s := engineServer(t, engine)
			// roomyConfig: the third waits, and the fourth and the booking
			// after it are refused, unless 9 s pass between the first call
			// and the booking (seven calls).
			r, capture := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: roomyConfig()})
			ctx := context.Background()
			if got := r.Engine(); got != "" {
				t.Fatalf("Engine before the first call = %q", got)
			}
			if r.WaitBoundMs() != 15000 || r.Mode() != pacer.ModeRefusing {
				t.Fatalf("bound %d, mode %v", r.WaitBoundMs(), r.Mode())
			}
			// The burst admits at once.
			for i := range 2 {
				d := mustRedisReserve(t, r)
				if !d.Admitted || d.WaitMs != 0 || d.Queued || d.Path != pacer.PathPaced || d.Fallback != "" {
					t.Fatalf("burst call %d: %+v", i, d)
				}
				if d.Ticket == nil || d.Ticket.Key != r.Key() || d.Ticket.Value == "" || d.Ticket.Fallback() {
					t.Fatalf("burst call %d: ticket %+v", i, d.Ticket)
				}
			}
			if got := r.Engine(); got != engine {
				t.Fatalf("Engine = %q, want %q", got, engine)
			}
			// The next one waits for the first refill: 0 < w <= 12000.
			last := mustRedisReserve(t, r)
			if !last.Admitted || last.WaitMs == 0 || last.WaitMs > 12000 || !last.Queued || last.Path != pacer.PathPaced {
				t.Fatalf("first call past the burst: %+v", last)
			}
			// The one after needs 24000 ms less what passed, more than the
			// bound: refused, its hint the cap.
			if d := mustRedisReserve(t, r); d.Admitted || d.RetryAfterSeconds != 15 ||
				d.RequiredWaitMs <= 15000 || d.RequiredWaitMs > 24000 || d.Fallback != "" {
				t.Fatalf("refusal: %+v", d)
			}
			before := mustRedisInfo(t, r)
			if before.Mode != pacer.ModeRefusing || before.WaitBoundMs != 15000 || before.RatePerMinute != 5 ||
				before.Burst != 2 || before.IdleTimeoutMs != 300000 || before.MaxRetries != 5 ||
				before.ReleasePolicy != pacer.ReleaseRefund || before.CapacityUnits != 2*60000 ||
				before.Refused != 1 || before.Admitted != 3 || before.Serial != before.Admitted || before.NowMs == 0 {
				t.Fatalf("info: %+v", before)
			}
			// A made-up ticket is the server's error, not a failure.
			_, err := r.Release(ctx, &pacer.RedisTicket{Key: r.Key(), Value: "1.2.3"})
			var replyErr *pacer.RedisError
			if !errors.As(err, &replyErr) || !errors.Is(err, pacer.ErrRedisPacer) ||
				!strings.Contains(replyErr.Reply, "malformed ticket") {
				t.Fatalf("made-up ticket: %v", err)
			}
			// A refusal within the horizon (15000 + 3·15000 ms with 3
			// retries left, SPEC §11) books a place in line, its hint
			// ⌈(wait − 15000)/1000⌉ with the wait (15000, 24000]: 1 to 9 s.
			bd, err := r.ReserveOrBook(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			if bd.Admitted || !bd.Booked() || bd.Booking.Value == "" || bd.Booking.SlotMs == 0 ||
				bd.RetryAfterSeconds < 1 || bd.RetryAfterSeconds > 9 || bd.Fallback != "" {
				t.Fatalf("ReserveOrBook: %+v %+v", bd, bd.Booking)
			}
			// A release refunds once; the ticket is spent after.
			if ok, err := r.Release(ctx, last.Ticket); err != nil || !ok {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			if ok, err := r.Release(ctx, last.Ticket); err != nil || ok {
				t.Fatalf("second Release = %v, %v", ok, err)
			}
			rd, err := r.Redeem(ctx, bd.Booking)
			if err != nil {
				t.Fatal(err)
			}
			// Admitted, the redemption spends the booking and its ticket is
			// the one to release; not yet, the booking is.
			refund := bd.Booking.Ticket
			switch {
			case rd.Admitted:
				if rd.Path != pacer.PathBooked || rd.Ticket == nil || rd.Ticket == bd.Booking.Ticket || rd.WaitMs > 15000 {
					t.Fatalf("redeemed: %+v", rd)
				}
				refund = rd.Ticket
			case rd.RetryAfterSeconds < 1:
				t.Fatalf("not yet: %+v", rd)
			}
			if ok, err := r.Release(ctx, refund); err != nil || !ok {
				t.Fatalf("releasing the booking = %v, %v", ok, err)
			}
			if _, err := r.Redeem(ctx, bd.Booking); !errors.Is(err, pacer.ErrBookingSpent) {
				t.Fatalf("Redeem of a released booking: %v", err)
			}
			after := mustRedisInfo(t, r)
			if after.Released != before.Released+2 || after.Booked != 1 {
				t.Fatalf("info after: %+v", after)
			}
			if created, err := r.Create(ctx); err != nil || created {
				t.Fatalf("Create on the bucket = %v, %v", created, err)
			}
			if n := len(capture.messages()); n != 0 {
				t.Fatalf("notices: %q", capture.messages())
			}
		})
	}
}

// A forced engine is used as it is; one the server lacks is asked for
// again and retried once, then an outage (docs/fleet-clients.md: the same
// engine change again), answered by the policy.
func TestRedisForcedEngine(t *testing.T) {
	s := startRedis(t, "")
	r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: slowConfig(), Engine: pacer.EngineScript})
	if d := mustRedisReserve(t, r); !d.Admitted || d.Fallback != "" || r.Engine() != pacer.EngineScript {
		t.Fatalf("script: %+v, engine %q", d, r.Engine())
	}
	f, capture := openRedis(t, pacer.RedisOptions{
		Addr: s.Addr(), Config: slowConfig(), Engine: pacer.EngineFunction, OnFailure: pacer.FailClosed,
	})
	mustFallback(t, f, capture, "Function not found")
	if _, err := pacer.OpenRedis(pacer.RedisOptions{Addr: s.Addr(), Key: "k", Engine: "lua"}); !errors.Is(err, pacer.ErrInvalidInput) {
		t.Fatalf("Engine lua: %v", err)
	}
}

// SCRIPT FLUSH empties the cache: the next call loads the script again
// and retries, with no outage.
func TestRedisNoScriptReloads(t *testing.T) {
	s := startRedis(t, "")
	control := s.client(t)
	r, capture := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: fleetConfig()})
	if d := mustRedisReserve(t, r); !d.Admitted || r.Engine() != pacer.EngineScript {
		t.Fatalf("first: %+v, engine %q", d, r.Engine())
	}
	ctx := context.Background()
	for range 2 {
		if err := control.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d := mustRedisReserve(t, r)
		if !d.Admitted || d.Fallback != "" || d.Ticket == nil {
			t.Fatalf("after SCRIPT FLUSH: %+v", d)
		}
		if ok, err := r.Release(ctx, d.Ticket); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	}
	sha := control.ScriptLoad(ctx, pacer.PacerScript()).Val()
	if exists := control.ScriptExists(ctx, sha).Val(); len(exists) != 1 || !exists[0] {
		t.Fatal("the script is not loaded")
	}
	if len(capture.messages()) != 0 {
		t.Fatalf("notices: %q", capture.messages())
	}
	// Each retry carried the script (EVAL), so a node whose cache is still
	// empty (a cluster's replica promoted after the reload) runs it too.
	stats := control.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_eval:calls=2,") {
		t.Fatalf("EVAL calls in INFO commandstats: want 2 (one per retry):\n%s", stats)
	}
}

// A configuration other than the bucket's, and a key of another type,
// are errors under every policy and engine.
func TestRedisPacerErrorsSurface(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			s := engineServer(t, engine)
			ctx := context.Background()
			a, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "shared", Config: fleetConfig()})
			if created, err := a.Create(ctx); err != nil || !created {
				t.Fatalf("Create = %v, %v", created, err)
			}
			for _, policy := range []pacer.FailurePolicy{pacer.FailLocal, pacer.FailOpen, pacer.FailClosed} {
				other := fleetConfig()
				other.RatePerMinute = 30
				b, capture := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "shared", Config: other, OnFailure: policy})
				_, err := b.Reserve(ctx)
				var replyErr *pacer.RedisError
				if !errors.As(err, &replyErr) || !errors.Is(err, pacer.ErrRedisPacer) {
					t.Fatalf("%s: mismatch: %v", policy, err)
				}
				if !strings.Contains(replyErr.Reply, "rate_per_min=60") || !strings.Contains(replyErr.Reply, "rate_per_min=30") {
					t.Fatalf("%s: the error names one configuration: %q", policy, replyErr.Reply)
				}
				if _, err := b.Admit(ctx); !errors.Is(err, pacer.ErrRedisPacer) {
					t.Fatalf("%s: Admit: %v", policy, err)
				}
				if _, err := b.AdmitKey(ctx, "req"); !errors.Is(err, pacer.ErrRedisPacer) || b.PendingKeys() != 0 {
					t.Fatalf("%s: AdmitKey: %v, %d pending", policy, err, b.PendingKeys())
				}
				if _, err := b.Create(ctx); !errors.Is(err, pacer.ErrRedisPacer) {
					t.Fatalf("%s: Create: %v", policy, err)
				}
				if len(capture.messages()) != 0 {
					t.Fatalf("%s: notices: %q", policy, capture.messages())
				}
			}
			if err := s.client(t).LPush(ctx, "a-list", "x").Err(); err != nil {
				t.Fatal(err)
			}
			w, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "a-list", Config: fleetConfig(), OnFailure: pacer.FailOpen})
			if _, err := w.Reserve(ctx); !errors.Is(err, pacer.ErrRedisWrongType) {
				t.Fatalf("WRONGTYPE: %v", err)
			}
			if _, err := w.Info(ctx); !errors.Is(err, pacer.ErrRedisWrongType) {
				t.Fatalf("WRONGTYPE (info): %v", err)
			}
		})
	}
}

// Admit cancelled during its wait releases its ticket in the bucket, and
// so does Close during it; Forget releases a keyed booking.
//
// longConfig with burst 1 (a token every 10000 ms, bound 15000 ms): the
// first Admit takes the token at once; the second waits 10000 ms less
// what passed since the first, and so does the third (the second's
// refund put the bucket back where the first left it), unless 10 s pass
// after the first. An Admit that did not wait would never enter the
// gate: that fails the test rather than hanging it.
func TestRedisCancellationReleases(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			s := engineServer(t, engine)
			ctx := context.Background()
			cfg := longConfig()
			cfg.Burst = 1
			gate := newGatedSleep()
			cfg.Sleep = gate.Sleep
			r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "bucket", Config: cfg})
			watch, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "bucket", Config: cfg})

			if a, err := r.Admit(ctx); err != nil || a.Queued || a.Ticket == nil {
				t.Fatalf("first Admit: %+v, %v", a, err)
			}
			done := make(chan error, 1)
			waiting := func() {
				t.Helper()
				select {
				case <-gate.entered:
				case err := <-done:
					t.Fatalf("Admit ended without waiting: %v", err)
				}
			}
			// Cancelled during the wait.
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				_, err := r.Admit(cctx)
				done <- err
			}()
			waiting()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Admit: %v", err)
			}
			if info := mustRedisInfo(t, watch); info.Released != 1 {
				t.Fatalf("released after the cancel = %d", info.Released)
			}
			// Close during a wait releases the ticket too.
			go func() {
				_, err := r.Admit(ctx)
				done <- err
			}()
			waiting()
			_ = r.Close()
			if err := <-done; !errors.Is(err, pacer.ErrClosed) {
				t.Fatalf("Admit woken by Close: %v", err)
			}
			if info := mustRedisInfo(t, watch); info.Released != 2 {
				t.Fatalf("released after Close = %d, want 2", info.Released)
			}
			if _, err := r.Reserve(ctx); !errors.Is(err, pacer.ErrClosed) {
				t.Fatalf("Reserve after Close: %v", err)
			}

			// Keyed: admitted keys, then one booked, whose booking Forget
			// releases.
			cfg.Sleep = noSleep
			k, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Key: "bucket", Config: cfg})
			bookedKey := ""
			for i := 0; i < 20 && bookedKey == ""; i++ {
				key := "req-" + strconv.Itoa(i)
				_, err := k.AdmitKey(ctx, key)
				var refused *pacer.RefusedError
				switch {
				case errors.As(err, &refused):
					if !refused.Booked || refused.Fallback != "" {
						t.Fatalf("keyed refusal: %+v", refused)
					}
					bookedKey = key
				case err != nil:
					t.Fatal(err)
				}
			}
			if bookedKey == "" {
				t.Fatal("no booking in 20 keys")
			}
			if k.PendingKeys() != 1 {
				t.Fatalf("pending keys = %d", k.PendingKeys())
			}
			before := mustRedisInfo(t, watch)
			if ok, err := k.Forget(ctx, bookedKey); err != nil || !ok {
				t.Fatalf("Forget = %v, %v", ok, err)
			}
			if after := mustRedisInfo(t, watch); after.Released != before.Released+1 || after.Booked != 1 {
				t.Fatalf("after Forget: %+v (before %+v)", after, before)
			}
			if k.PendingKeys() != 0 {
				t.Fatalf("pending keys after Forget = %d", k.PendingKeys())
			}
			if ok, err := k.Forget(ctx, bookedKey); err != nil || ok {
				t.Fatalf("second Forget = %v, %v", ok, err)
			}
		})
	}
}

// A key that comes back redeems its booking: admitted on the booked path,
// or refused again while the slot is still far, keeping it.
func TestRedisAdmitKeyRedeems(t *testing.T) {
	s := startRedis(t, "")
	cfg := fleetConfig()
	cfg.Burst = 1
	cfg.Sleep = noSleep
	r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: cfg})
	ctx := context.Background()
	booked := ""
	for i := 0; i < 20 && booked == ""; i++ {
		key := "req-" + strconv.Itoa(i)
		if _, err := r.AdmitKey(ctx, key); errors.Is(err, pacer.ErrRefused) {
			booked = key
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if booked == "" {
		t.Fatal("no refusal in 20 keys")
	}
	info := mustRedisInfo(t, r)
	for range 10 {
		a, err := r.AdmitKey(ctx, booked)
		var refused *pacer.RefusedError
		if errors.As(err, &refused) {
			if !refused.Booked {
				t.Fatalf("the key lost its booking: %+v", refused)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if a.Path != pacer.PathBooked || a.Ticket == nil || r.PendingKeys() != 0 {
			t.Fatalf("redeemed: %+v, %d pending", a, r.PendingKeys())
		}
		if after := mustRedisInfo(t, r); after.Booked != info.Booked || after.Serial != info.Serial {
			t.Fatalf("a redeem debited again: %+v then %+v", info, after)
		}
		return
	}
	// Ten retries at once may all come before the slot: still booked.
	if r.PendingKeys() != 1 {
		t.Fatalf("pending keys = %d", r.PendingKeys())
	}
}

// Pacing disabled (rate 0) admits without asking Redis.
func TestRedisDisabledAsksNothing(t *testing.T) {
	cfg := fleetConfig()
	cfg.RatePerMinute = 0
	r, capture := openRedis(t, pacer.RedisOptions{
		Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), Config: cfg, OnFailure: pacer.FailClosed,
	})
	for range 3 {
		a, err := r.Admit(context.Background())
		if err != nil || a.Path != pacer.PathDisabled || a.Fallback != "" || a.Ticket != nil {
			t.Fatalf("disabled: %+v, %v", a, err)
		}
	}
	if r.Mode() != pacer.ModeDisabled || countMessages(capture, outageStarted) != 0 || r.Engine() != "" {
		t.Fatalf("mode %v, engine %q, notices %q", r.Mode(), r.Engine(), capture.messages())
	}
}

// The timeout is the wait bound or 1 s, whichever is less, and never
// more than the bound.
func TestRedisTimeoutRule(t *testing.T) {
	short := pacer.Config{RatePerMinute: 60, Burst: 2, IdleTimeout: 1500 * time.Millisecond, MaxRetries: 0}
	shortBound := time.Duration(pacer.WaitBoundMs(1500, 0)) * time.Millisecond
	if shortBound >= time.Second {
		t.Fatalf("test config's bound %v is not below 1 s", shortBound)
	}
	cases := []struct {
		cfg   pacer.Config
		given time.Duration
		want  time.Duration
	}{
		{fleetConfig(), 0, time.Second},
		{fleetConfig(), 300 * time.Millisecond, 300 * time.Millisecond},
		{fleetConfig(), 5 * time.Second, 2 * time.Second},
		{short, 0, shortBound},
		{short, 5 * time.Second, shortBound},
	}
	for _, c := range cases {
		r, _ := openRedis(t, pacer.RedisOptions{Addr: "127.0.0.1:1", Config: c.cfg, Timeout: c.given})
		if got := r.Timeout(); got != c.want {
			t.Errorf("Timeout(%v) with bound %d ms = %v, want %v", c.given, r.WaitBoundMs(), got, c.want)
		}
	}
	for _, opts := range []pacer.RedisOptions{
		{Addr: "127.0.0.1:1", Config: fleetConfig()},                                // no key
		{Key: "k", Config: fleetConfig()},                                           // no server
		{Addr: "127.0.0.1:1", Key: "k", Config: fleetConfig(), OnFailure: "retry"},  // no such policy
		{Addr: "127.0.0.1:1", Key: "k", Config: fleetConfig(), FleetSize: -1},       // negative
		{Addr: "redis://:badport", Key: "k", Config: fleetConfig(), Timeout: -1},    // negative
		{Addr: "127.0.0.1:1", Key: "k", Config: pacer.Config{RatePerMinute: 601}},   // bad config
		{Addr: "127.0.0.1:1", Key: "k", Config: fleetConfig(), RetryAfter: -1},      // negative
		{Addr: "127.0.0.1:1", Key: "k", Config: fleetConfig(), Engine: "functions"}, // no such engine
	} {
		if _, err := pacer.OpenRedis(opts); !errors.Is(err, pacer.ErrInvalidInput) && !errors.Is(err, pacer.ErrInvalidConfig) {
			t.Errorf("OpenRedis(%+v) = %v", opts, err)
		}
	}
}

// How Redis fails in a test, and how it comes back.
type outage struct {
	name string
	// begin makes Redis fail for r (s is nil for "unreachable").
	begin func(t *testing.T, s *redisServer)
	// end brings it back.
	end func(t *testing.T, s *redisServer)
}

var outages = []outage{
	{
		name:  "unreachable",
		begin: func(t *testing.T, s *redisServer) {},
		end: func(t *testing.T, s *redisServer) {
			if err := s.Run(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.kill)
		},
	},
	{
		name:  "killed",
		begin: func(t *testing.T, s *redisServer) { s.kill() },
		end:   func(t *testing.T, s *redisServer) { s.restart(t) },
	},
	{
		name: "paused",
		// The pause must outlast every call the test makes during the
		// outage: a few hundred ms (one 200 ms timeout for each client,
		// the others answered at once by the policy); 6000 ms leaves more
		// than 5 s for stalls between them on a loaded machine.
		begin: func(t *testing.T, s *redisServer) {
			if err := s.client(t).Do(context.Background(), "CLIENT", "PAUSE", "6000", "ALL").Err(); err != nil {
				t.Fatal(err)
			}
		},
		end: func(t *testing.T, s *redisServer) {
			// A command from a new connection runs once the pause is over.
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
			defer c.Close()
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		},
	},
}

// Each failure policy answers while Redis is unreachable, killed or
// paused, with one notice when the outage starts and one when it ends,
// and Redis decides again once it is back and RetryAfter has passed.
func TestRedisFailurePolicies(t *testing.T) {
	const retryAfter = 100 * time.Millisecond
	for _, o := range outages {
		for _, policy := range []pacer.FailurePolicy{pacer.FailLocal, pacer.FailOpen, pacer.FailClosed} {
			t.Run(o.name+"/"+string(policy), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				var s *redisServer
				if o.name == "unreachable" {
					s = &redisServer{&redistest.Server{Dir: t.TempDir(), Port: freePort(t)}}
				} else {
					s = startRedis(t, "")
				}
				opts := pacer.RedisOptions{
					Addr: s.Addr(), Config: slowConfig(), OnFailure: policy,
					Timeout: 200 * time.Millisecond, RetryAfter: retryAfter,
				}
				if o.name == "paused" && policy == pacer.FailClosed {
					// A client of the caller's, with its own (longer) timeouts:
					// the call still ends after Timeout.
					opts.Client = s.client(t)
				}
				r, capture := openRedis(t, opts)
				var redisTicket *pacer.RedisTicket // issued by Redis before the outage
				var keyed *pacer.RedisPacer        // holds a booking in Redis, on bookedKey
				bookedKey := ""
				if o.name != "unreachable" {
					d := mustRedisReserve(t, r)
					if !d.Admitted || d.Fallback != "" {
						t.Fatalf("before the outage: %+v", d)
					}
					redisTicket = d.Ticket
					kopts := opts
					kopts.Key = "keyed:" + t.Name()
					kopts.Config.Sleep = noSleep
					keyed, _ = openRedis(t, kopts)
					bookedKey = bookInRedis(t, keyed)
				}
				o.begin(t, s)

				var fallbackTicket *pacer.RedisTicket
				for i := range 3 {
					d := mustRedisReserve(t, r)
					if d.Fallback != policy {
						t.Fatalf("call %d: Fallback %q, want %q: %+v", i, d.Fallback, policy, d)
					}
					switch policy {
					case pacer.FailLocal:
						// The in-process pacer of the same configuration
						// (FleetSize 1), on this process's clock: burst 2,
						// then refused (6000 ms less what passed since the
						// first, past the 2000 ms bound) unless 4 s pass.
						if i < 2 && (!d.Admitted || d.WaitMs != 0 || d.Path != pacer.PathPaced || !d.Ticket.Fallback()) {
							t.Fatalf("local call %d: %+v", i, d)
						}
						if i == 2 && (d.Admitted || d.RetryAfterSeconds != 2) {
							t.Fatalf("local call %d: %+v", i, d)
						}
						if i == 0 {
							fallbackTicket = d.Ticket
						}
					case pacer.FailOpen:
						if !d.Admitted || d.WaitMs != 0 || d.Path != pacer.PathDisabled || d.Ticket != nil {
							t.Fatalf("open call %d: %+v", i, d)
						}
					case pacer.FailClosed:
						if d.Admitted || d.RetryAfterSeconds != pacer.HintCapSeconds(2000) {
							t.Fatalf("closed call %d: %+v", i, d)
						}
					}
				}
				_, err := r.Admit(ctx)
				var refused *pacer.RefusedError
				if policy != pacer.FailOpen && (!errors.As(err, &refused) || refused.Fallback != policy) {
					t.Fatalf("Admit during the outage: %v", err)
				}
				if _, err := r.Info(ctx); !errors.Is(err, pacer.ErrRedisUnavailable) {
					t.Fatalf("Info during the outage: %v", err)
				}
				if n := countMessages(capture, outageStarted); n != 1 {
					t.Fatalf("%d outage notices: %q", n, capture.messages())
				}
				if redisTicket != nil {
					// A Redis ticket is not refunded while Redis fails, and
					// that is not an error; a keyed request forgotten now
					// is forgotten (its booking passes with its slot).
					if ok, err := r.Release(ctx, redisTicket); ok || err != nil {
						t.Fatalf("Release of a Redis ticket during the outage = %v, %v", ok, err)
					}
					if ok, err := keyed.Forget(ctx, bookedKey); ok || err != nil {
						t.Fatalf("Forget of a Redis booking during the outage = %v, %v", ok, err)
					}
					if n := keyed.PendingKeys(); n != 0 {
						t.Fatalf("%d keys pending after Forget during the outage", n)
					}
				}

				o.end(t, s)
				time.Sleep(retryAfter + 50*time.Millisecond)
				d := mustRedisReserve(t, r)
				if d.Fallback != "" {
					t.Fatalf("after Redis came back: %+v", d)
				}
				if countMessages(capture, outageEnded) != 1 || countMessages(capture, outageStarted) != 1 {
					t.Fatalf("notices: %q", capture.messages())
				}
				if o.name == "paused" {
					// The bucket outlived the pause, and the ticket stayed
					// unspent: it is refunded now.
					if ok, err := r.Release(ctx, redisTicket); !ok || err != nil {
						t.Fatalf("Release after the outage = %v, %v", ok, err)
					}
					if info := mustRedisInfo(t, r); info.Released != 1 {
						t.Fatalf("after the release: %+v", info)
					}
				}
				// A fallback ticket goes back to the pacer that issued it,
				// not to Redis.
				if fallbackTicket != nil {
					if ok, err := r.Release(ctx, fallbackTicket); err != nil || !ok {
						t.Fatalf("releasing a fallback ticket = %v, %v", ok, err)
					}
					released := uint64(0)
					if o.name == "paused" {
						released = 1 // the Redis ticket, above
					}
					if info := mustRedisInfo(t, r); info.Released != released {
						t.Fatalf("a fallback ticket reached Redis: %+v", info)
					}
				}
			})
		}
	}
}

// While Redis fails, the local policy paces at ⌊rate/N⌋, ⌊burst/N⌋, and
// its keyed bookings are released to the local pacer.
func TestRedisLocalFallbackShare(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx := context.Background()
	r, _ := openRedis(t, pacer.RedisOptions{Addr: addr, Config: slowConfig(), FleetSize: 2})
	first := mustRedisReserve(t, r)
	second := mustRedisReserve(t, r)
	if !first.Admitted || first.WaitMs != 0 || first.Fallback != pacer.FailLocal {
		t.Fatalf("first: %+v", first)
	}
	// Burst 1 at rate 5: the second is not admitted at once.
	if second.Admitted && second.WaitMs == 0 || second.Fallback != pacer.FailLocal {
		t.Fatalf("second: %+v", second)
	}

	k, _ := openRedis(t, pacer.RedisOptions{Addr: addr, Config: slowConfig(), Key: "keyed"})
	booked := ""
	for i := 0; i < 5 && booked == ""; i++ {
		key := "req-" + strconv.Itoa(i)
		_, err := k.AdmitKey(ctx, key)
		var refused *pacer.RefusedError
		if errors.As(err, &refused) {
			if !refused.Booked || refused.Fallback != pacer.FailLocal {
				t.Fatalf("local refusal: %+v", refused)
			}
			booked = key
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if booked == "" {
		t.Fatal("no local booking")
	}
	if ok, err := k.Forget(ctx, booked); err != nil || !ok {
		t.Fatalf("Forget of a local booking = %v, %v", ok, err)
	}
	// A Redis ticket cannot be released while Redis fails: not refunded,
	// not an error.
	if ok, err := k.Release(ctx, &pacer.RedisTicket{Key: "keyed", Value: "0.1.60000.0.0123456789abcdef"}); ok || err != nil {
		t.Fatalf("Release of a Redis ticket during an outage = %v, %v", ok, err)
	}
}

// bookInRedis makes keyed requests on r until one is booked by the
// server; it returns that key.
func bookInRedis(t *testing.T, r *pacer.RedisPacer) string {
	t.Helper()
	for i := range 6 {
		key := "req-" + strconv.Itoa(i)
		_, err := r.AdmitKey(context.Background(), key)
		var refused *pacer.RefusedError
		if errors.As(err, &refused) {
			if !refused.Booked || refused.Fallback != "" {
				t.Fatalf("refusal by Redis: %+v", refused)
			}
			return key
		} else if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no booking in Redis")
	return ""
}

// Many goroutines on one pacer (for the race detector): every call is
// answered, and the bucket counts each.
func TestRedisConcurrentCalls(t *testing.T) {
	s := startRedis(t, "")
	cfg := slowConfig()
	cfg.Sleep = noSleep
	r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: cfg})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				_, err := r.AdmitKey(context.Background(), "g"+strconv.Itoa(g)+"-"+strconv.Itoa(i))
				if err != nil && !errors.Is(err, pacer.ErrRefused) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	info := mustRedisInfo(t, r)
	if info.Admitted+info.Refused+info.Booked != 40 {
		t.Fatalf("counted %d calls: %+v", info.Admitted+info.Refused+info.Booked, info)
	}
}

// A server that comes back with another engine is asked again: the
// script before, the module after.
func TestRedisEngineAfterRestart(t *testing.T) {
	module := moduleOrSkip(t)
	s := startRedis(t, "")
	r, capture := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: slowConfig(), RetryAfter: 50 * time.Millisecond})
	if d := mustRedisReserve(t, r); !d.Admitted || r.Engine() != pacer.EngineScript {
		t.Fatalf("before: %+v, engine %q", d, r.Engine())
	}
	s.Module = module
	s.restart(t)
	// The client reconnects (the pool finds the old connection gone), or
	// the call fails and the policy answers until RetryAfter has passed:
	// either way the server is asked for its engine again.
	var d pacer.RedisDecision
	for range 20 {
		if d = mustRedisReserve(t, r); d.Fallback == "" {
			break
		}
		time.Sleep(60 * time.Millisecond)
	}
	// The call on the new connection may still have gone by the engine
	// known before (the script, loaded again on NOSCRIPT); the next asks.
	if d = mustRedisReserve(t, r); !d.Admitted || d.Fallback != "" || r.Engine() != pacer.EngineModule {
		t.Fatalf("after: %+v, engine %q", d, r.Engine())
	}
	started, ended := countMessages(capture, outageStarted), countMessages(capture, outageEnded)
	if started > 1 || ended != started {
		t.Fatalf("notices: %q", capture.messages())
	}
}

// A reply that says the server cannot serve now (BUSY: a script runs past
// busy-reply-threshold) is a failure, answered by the policy.
func TestRedisBusyIsAFailure(t *testing.T) {
	s := startRedis(t, "", "--busy-reply-threshold", "50")
	ctx := context.Background()
	r, capture := openRedis(t, pacer.RedisOptions{
		Addr: s.Addr(), Config: slowConfig(), OnFailure: pacer.FailClosed,
	})
	busy := s.client(t)
	done := make(chan error, 1)
	go func() { done <- busy.Eval(ctx, "while true do end", nil).Err() }()
	probe := s.client(t)
	for {
		err := probe.Ping(ctx).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := mustRedisReserve(t, r)
	if d.Admitted || d.Fallback != pacer.FailClosed {
		t.Fatalf("while BUSY: %+v", d)
	}
	if err := probe.ScriptKill(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-done
	if countMessages(capture, outageStarted) != 1 {
		t.Fatalf("notices: %q", capture.messages())
	}
}

// A client of the caller's speaking RESP2 finds the same engines and
// reads the same answers: on minuteConfig the burst of 2 at once, then a
// refusal with the hint 15 s unless 45 s pass after the first call.
func TestRedisRESP2Client(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			s := engineServer(t, engine)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
			t.Cleanup(func() { _ = c.Close() })
			r, _ := openRedis(t, pacer.RedisOptions{Client: c, Config: minuteConfig()})
			for i := range 3 {
				d := mustRedisReserve(t, r)
				if d.Fallback != "" || d.Admitted != (i < 2) || (i < 2 && d.Ticket == nil) ||
					(i == 2 && d.RetryAfterSeconds != 15) {
					t.Fatalf("call %d: %+v", i, d)
				}
			}
			if r.Engine() != engine {
				t.Fatalf("engine %q, want %q", r.Engine(), engine)
			}
			if info := mustRedisInfo(t, r); info.Admitted != 2 || info.Refused != 1 || info.Mode != pacer.ModeRefusing {
				t.Fatalf("info: %+v", info)
			}
			_ = r.Close()
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatalf("Close closed the caller's client: %v", err)
			}
		})
	}
}

// Info carries the key's second block (key format 2, docs/redis.md "The
// key"). On longConfig the burst of 2 is admitted at once and the third
// waits 10000 ms less what passed since the first: (5000, 10000] unless
// 5 s pass. So one admission waited, its wait (from its reply) is the
// total, counted in the histogram's last bucket, index 7 (the bounds are
// 10, 50, 100, 500, 1000, 2500, 5000 and 10000 ms). Nothing is shaped,
// redeemed or observed on this fixed-rate bucket.
func TestRedisInfoCarriesTheSecondBlock(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine pacer.RedisEngine, s *redisServer) {
		r, _ := openRedis(t, pacer.RedisOptions{Addr: s.Addr(), Config: longConfig()})
		for i := range 2 {
			if d := mustRedisReserve(t, r); !d.Admitted || d.WaitMs != 0 {
				t.Fatalf("%s: burst call %d: %+v", engine, i, d)
			}
		}
		third := mustRedisReserve(t, r)
		if !third.Admitted || third.WaitMs <= 5000 || third.WaitMs > 10000 {
			t.Fatalf("%s: third: %+v, want admitted after (5000, 10000] ms", engine, third)
		}
		info := mustRedisInfo(t, r)
		if info.Admitted != 3 || info.Refused != 0 || info.AdmittedAfterWait != 1 || info.WaitMsTotal != third.WaitMs ||
			info.WaitBuckets != [pacer.WaitBuckets]uint64{7: 1} {
			t.Fatalf("%s: third waited %d ms, info %+v", engine, third.WaitMs, info)
		}
		if info.Shaped != 0 || info.Redeemed != 0 || info.UpstreamOpened != 0 || info.UpstreamThrottled != 0 {
			t.Fatalf("%s: info %+v", engine, info)
		}
	})
}
