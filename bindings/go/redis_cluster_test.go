package pacer_test

// RedisPacer on a real Redis Cluster (internal/redistest's StartCluster:
// three primaries, three replicas, free loopback ports), through a
// *redis.ClusterClient given as Client and one OpenRedis makes from
// ClusterAddrs. Every expectation is derived by hand below and checked
// against the key's counts read on the primary that owns its slot.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/connpacer/pacer/bindings/go/internal/redistest"
	"github.com/redis/go-redis/v9"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// redirects counts the MOVED and ASK replies a cluster client's nodes
// got (a hook on each node's client).
type redirects struct {
	moved, ask, other, dials atomic.Int64
	mu                       sync.Mutex
	texts                    []string // the other error replies
}

func (h *redirects) note(err error) {
	var reply redis.Error
	switch {
	case err == nil:
	case strings.HasPrefix(err.Error(), "MOVED "):
		h.moved.Add(1)
	case strings.HasPrefix(err.Error(), "ASK "):
		h.ask.Add(1)
	case strings.HasPrefix(err.Error(), "ERR unknown subcommand"):
		// go-redis's CLIENT SETINFO and MAINT_NOTIFICATIONS on a new
		// connection, which Redis 7.0 does not know
	case errors.As(err, &reply):
		h.other.Add(1)
		h.mu.Lock()
		h.texts = append(h.texts, err.Error())
		h.mu.Unlock()
	}
}

func (h *redirects) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *redirects) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(err)
		return err
	}
}

func (h *redirects) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.note(cmd.Err())
		}
		return err
	}
}

// clusterClient is a *redis.ClusterClient of the cluster's nodes whose
// redirects are counted, closed when t ends.
func clusterClient(t *testing.T, c *redistest.Cluster) (*redis.ClusterClient, *redirects) {
	t.Helper()
	h := &redirects{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
	t.Cleanup(func() { _ = cc.Close() })
	return cc, h
}

// clusterKeys are keys prefix:0, prefix:1, … chosen so that each of the
// cluster's primaries owns perPrimary of them.
func clusterKeys(t *testing.T, c *redistest.Cluster, prefix string, perPrimary int) []string {
	t.Helper()
	primaries := c.Primaries()
	owned := map[*redistest.Server]int{}
	var keys []string
	for i := 0; len(keys) < perPrimary*len(primaries); i++ {
		if i > 1000 {
			t.Fatalf("no %d keys per primary among 1000", perPrimary)
		}
		key := fmt.Sprintf("%s:%d", prefix, i)
		owner := c.Owner(key)
		if owned[owner] < perPrimary {
			owned[owner]++
			keys = append(keys, key)
		}
	}
	return keys
}

// infoInt is INFO's field name as an integer.
func infoInt(t *testing.T, info map[string]any, name string) int64 {
	t.Helper()
	v, ok := info[name].(int64)
	if !ok {
		t.Fatalf("INFO's %s is %#v", name, info[name])
	}
	return v
}

// told is what a client was answered on one key.
type told struct{ admitted, refused, released int64 }

// checkCounts checks the key's counts, read on the primary that owns its
// slot, against what its clients were told, and that no other primary
// holds a key in its slot.
func checkCounts(t *testing.T, c *redistest.Cluster, key string, want told) {
	t.Helper()
	info := c.Info(key, pacer.PacerScript())
	got := told{infoInt(t, info, "admitted"), infoInt(t, info, "refused"), infoInt(t, info, "released")}
	if got != want {
		t.Errorf("%s on its owner %s: admitted/refused/released %+v, the clients were told %+v", key, c.Owner(key).Addr(), got, want)
	}
	if serial := infoInt(t, info, "serial"); serial != want.admitted {
		t.Errorf("%s: serial %d, want one ticket per admission (%d)", key, serial, want.admitted)
	}
	slot, owner := c.Slot(key), c.Owner(key)
	for _, p := range c.Primaries() {
		if n := c.KeysIn(p, slot); p != owner && n != 0 {
			t.Errorf("%s: primary %s, not its slot's owner, holds %d keys in slot %d", key, p.Addr(), n, slot)
		}
	}
}

// paceKey runs the hand-derived sequence on a fresh key of roomyConfig
// (rate 5/min, burst 2, idle 300 s, 5 retries: wait bound 15000 ms, hint
// cap 15 s, one token per 12000 ms) and returns what the client was told,
// admitted 3, refused 1, released 1, unless 9 s pass between the first
// call and the fourth (on the server's clock, e ms after the first):
//
//	Reserve, Reserve     the burst: admitted at once (the bucket starts full)
//	Reserve              admitted after 12000 − e ms, in (0, 12000]
//	Reserve              24000 − e ms, past the bound: refused, required
//	                     wait (15000, 24000], retry-after 15 s (the cap)
//	Release(the first)   refunded (the refund policy)
func paceKey(t *testing.T, r *pacer.RedisPacer, engine pacer.RedisEngine) told {
	t.Helper()
	ctx := context.Background()
	var first *pacer.RedisTicket
	for i := range 2 {
		d := mustRedisReserve(t, r)
		if !d.Admitted || d.WaitMs != 0 || d.Fallback != "" || d.Ticket == nil || d.Ticket.Key != r.Key() {
			t.Fatalf("%s: burst call %d: %+v", r.Key(), i, d)
		}
		first = cmpOr(first, d.Ticket)
	}
	if got := r.Engine(); got != engine {
		t.Fatalf("%s: Engine %q, want %q", r.Key(), got, engine)
	}
	if d := mustRedisReserve(t, r); !d.Admitted || d.WaitMs == 0 || d.WaitMs > 12000 || d.Path != pacer.PathPaced || d.Fallback != "" {
		t.Fatalf("%s: third call: %+v; want admitted after (0, 12000] ms", r.Key(), d)
	}
	if d := mustRedisReserve(t, r); d.Admitted || d.RetryAfterSeconds != 15 || d.RequiredWaitMs <= 15000 ||
		d.RequiredWaitMs > 24000 || d.Fallback != "" {
		t.Fatalf("%s: fourth call: %+v; want refused, required (15000, 24000] ms, retry after 15 s", r.Key(), d)
	}
	if ok, err := r.Release(ctx, first); !ok || err != nil {
		t.Fatalf("%s: Release = %v, %v; want refunded", r.Key(), ok, err)
	}
	return told{admitted: 3, refused: 1, released: 1}
}

// paceKeys runs paceKey on each key, half through the shared cluster
// client cc (Client) and half through one OpenRedis makes from the seeds
// (ClusterAddrs), and checks each key's counts on its owner.
func paceKeys(t *testing.T, c *redistest.Cluster, cc *redis.ClusterClient, keys []string, force, want pacer.RedisEngine) {
	t.Helper()
	for i, key := range keys {
		opts := pacer.RedisOptions{Key: key, Config: roomyConfig(), Engine: force, OnFailure: pacer.FailClosed}
		if i%2 == 0 {
			opts.Client = cc
		} else {
			opts.ClusterAddrs = c.Addrs()
		}
		r, _ := openRedis(t, opts)
		checkCounts(t, c, key, paceKey(t, r, want))
	}
}

// clusterModule is the module's path, or skips the test.
func clusterModule(t *testing.T) string {
	t.Helper()
	return moduleOrSkip(t)
}

// The module on every node: auto finds it; 12 buckets, 4 per primary, each
// counted by its owner as its client was told; a plain client at a node
// that does not own the key gets MOVED as an error; a slot moved between
// calls, or while the key is being migrated (ASK), leaves the bucket's
// counts continuing.
func TestRedisClusterModule(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Module: clusterModule(t), WithoutModule: -1})
	cc, hops := clusterClient(t, c)
	ctx := context.Background()

	t.Run("buckets", func(t *testing.T) {
		c := c.In(t)
		paceKeys(t, c, cc, clusterKeys(t, c, "pacer:cluster:module", 4), pacer.EngineAuto, pacer.EngineModule)
	})

	t.Run("plain client answered MOVED", func(t *testing.T) {
		c := c.In(t)
		node := c.Nodes[0]
		var key string
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("pacer:cluster:elsewhere:%d", i); c.Owner(k) != node {
				key = k
			}
		}
		r, _ := openRedis(t, pacer.RedisOptions{Addr: node.Addr(), Key: key, Config: fleetConfig(), OnFailure: pacer.FailOpen})
		d, err := r.Reserve(ctx)
		var redisErr *pacer.RedisError
		if !errors.As(err, &redisErr) || !strings.HasPrefix(redisErr.Reply, "MOVED ") {
			t.Fatalf("Reserve on a node that does not own the key: %+v, %v; want a *RedisError with MOVED", d, err)
		}
		if n := c.KeysIn(c.Owner(key), c.Slot(key)); n != 0 {
			t.Fatalf("the key's owner holds %d keys in its slot", n)
		}
	})

	t.Run("slot moved between calls", func(t *testing.T) {
		c := c.In(t)
		key := "pacer:cluster:moved"
		moved := hops.moved.Load()
		out := moveAndContinue(t, c, cc, key, pacer.EngineAuto, func(slot int, dst *redistest.Server) *redistest.Server {
			c.MoveSlot(slot, dst)
			return dst
		})
		checkCounts(t, c, key, out)
		n := hops.moved.Load() - moved
		if n < 1 {
			t.Fatalf("no MOVED was followed")
		}
		t.Logf("MOVED replies followed after the move: %d", n)
	})

	t.Run("slot moving (ASK)", func(t *testing.T) {
		c := c.In(t)
		key := "pacer:cluster:asked"
		asked := hops.ask.Load()
		var mid told
		out := moveAndContinue(t, c, cc, key, pacer.EngineAuto, func(slot int, dst *redistest.Server) *redistest.Server {
			src := c.BeginMove(slot, dst)
			// The key is on dst, the slot still src's: src answers ASK.
			r, _ := openRedis(t, pacer.RedisOptions{Client: cc, Key: key, Config: fleetConfig(), OnFailure: pacer.FailClosed})
			d := mustRedisReserve(t, r)
			switch {
			case d.Fallback != "":
				t.Fatalf("while migrating: answered by the policy: %+v", d)
			case d.Admitted:
				mid.admitted++
			default:
				mid.refused++
			}
			if n := hops.ask.Load() - asked; n != 1 {
				t.Fatalf("%d ASK replies followed while the slot migrated, want 1", n)
			}
			c.FinishMove(slot, src, dst)
			return dst
		})
		out.admitted += mid.admitted
		out.refused += mid.refused
		checkCounts(t, c, key, out)
	})
}

// lostReply wraps a cluster client's connections: once armed, the first
// command written that names key reaches the server, and its reply is read
// and thrown away before the connection is closed: the command ran, its
// client sees the connection lost (io.EOF).
type lostReply struct {
	key   []byte
	armed atomic.Bool
	cut   atomic.Int64
}

type lostReplyConn struct {
	net.Conn
	l    *lostReply
	lose bool
}

func (l *lostReply) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lostReplyConn{Conn: conn, l: l}, nil
}

func (c *lostReplyConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.l.key) && c.l.armed.CompareAndSwap(true, false) {
		c.lose = true
		c.l.cut.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *lostReplyConn) Read(p []byte) (int, error) {
	if c.lose {
		c.lose = false
		_ = c.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Conn.Read(make([]byte, 4096))
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// A reply lost after the command ran: the call is an outage answered by
// the policy, and the command is not sent again, whatever the client's
// own retries (go-redis's defaults: 3 per node, and MaxRedirects 3 for
// the cluster's attempts; 3 for a *redis.Client): the owner counts the
// one admission that ran. Sent again, it would count two for a call that
// kept none.
func TestRedisLostReply(t *testing.T) {
	module := clusterModule(t)
	c := redistest.StartCluster(t, redistest.ClusterConfig{Module: module, WithoutModule: -1})
	single := startRedis(t, module)
	for _, engine := range []pacer.RedisEngine{pacer.EngineModule, pacer.EngineScript} {
		t.Run("cluster "+string(engine), func(t *testing.T) {
			c := c.In(t)
			key := "pacer:cluster:lost-reply:" + string(engine)
			cut := &lostReply{key: []byte(key)}
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Dialer: cut.dial})
			t.Cleanup(func() { _ = cc.Close() })
			loseOneReply(t, cc, key, engine, cut, func() map[string]any { return c.Info(key, pacer.PacerScript()) })
		})
		t.Run("server "+string(engine), func(t *testing.T) {
			key := "pacer:lost-reply:" + string(engine)
			cut := &lostReply{key: []byte(key)}
			client := redis.NewClient(&redis.Options{Addr: single.Addr(), Dialer: cut.dial})
			t.Cleanup(func() { _ = client.Close() })
			loseOneReply(t, client, key, engine, cut, func() map[string]any {
				reply, err := single.client(t).Do(context.Background(), "PACER.INFO", key).Result()
				flat, ok := reply.([]any)
				if err != nil || !ok {
					t.Fatalf("PACER.INFO %s: %v, %v", key, reply, err)
				}
				info := map[string]any{}
				for i := 0; i+1 < len(flat); i += 2 {
					info[fmt.Sprint(flat[i])] = flat[i+1]
				}
				return info
			})
		})
	}
}

// loseOneReply: a reserve admitted, then one whose reply is lost; info
// reads the key's counts on the server.
func loseOneReply(t *testing.T, client redis.UniversalClient, key string, engine pacer.RedisEngine, cut *lostReply, info func() map[string]any) {
	t.Helper()
	r, _ := openRedis(t, pacer.RedisOptions{Client: client, Key: key, Config: fleetConfig(),
		Engine: engine, OnFailure: pacer.FailClosed})
	d := mustRedisReserve(t, r)
	if !d.Admitted || d.Fallback != "" {
		t.Fatalf("first reserve: %+v, want admitted by the server", d)
	}
	cut.armed.Store(true)
	d = mustRedisReserve(t, r)
	if n := cut.cut.Load(); n != 1 {
		t.Fatalf("%d replies were cut, want one", n)
	}
	if d.Admitted || d.Fallback != pacer.FailClosed {
		t.Fatalf("reserve whose reply was lost: %+v, want refused by the closed policy", d)
	}
	// Two admissions ran (the first, and the one whose reply was lost);
	// the client was told of one.
	if got := infoInt(t, info(), "admitted"); got != 2 {
		t.Fatalf("%s: the server counts %d admissions, want 2 (a command sent again counts 3)", key, got)
	}
}

// moveAndContinue: two admissions, the slot moved to another primary (or
// its primary failed over: move returns the key's new owner), then the
// sequence's next reserve and the release of the first ticket: the
// bucket continues on its new owner (a reset one would count one
// admission, and would not know the ticket).
func moveAndContinue(t *testing.T, c *redistest.Cluster, cc *redis.ClusterClient, key string, engine pacer.RedisEngine, move func(slot int, dst *redistest.Server) *redistest.Server) told {
	t.Helper()
	ctx := context.Background()
	r, _ := openRedis(t, pacer.RedisOptions{Client: cc, Key: key, Config: fleetConfig(), Engine: engine, OnFailure: pacer.FailClosed})
	var out told
	var first *pacer.RedisTicket
	for range 2 {
		d := mustRedisReserve(t, r)
		if !d.Admitted || d.Fallback != "" {
			t.Fatalf("before the move: %+v", d)
		}
		first = cmpOr(first, d.Ticket)
		out.admitted++
	}
	src := c.Owner(key)
	var dst *redistest.Server
	for _, p := range c.Primaries() {
		if p != src {
			dst = p
			break
		}
	}
	dst = move(c.Slot(key), dst)
	d := mustRedisReserve(t, r)
	switch {
	case d.Fallback != "":
		t.Fatalf("after the move: answered by the policy: %+v", d)
	case d.Admitted:
		out.admitted++
	default:
		out.refused++
	}
	if ok, err := r.Release(ctx, first); !ok || err != nil {
		t.Fatalf("Release of a ticket issued before the move = %v, %v; want refunded", ok, err)
	}
	out.released++
	if owner := c.Owner(key); owner != dst {
		t.Fatalf("the key's owner is %s, not %s", owner.Addr(), dst.Addr())
	}
	return out
}

// cmpOr is a unless it is nil, else b.
func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// scriptOnEveryPrimary checks that every primary has the script cached.
func scriptOnEveryPrimary(t *testing.T, c *redistest.Cluster) {
	t.Helper()
	sum := sha1.Sum([]byte(pacer.PacerScript()))
	sha := hex.EncodeToString(sum[:])
	for _, p := range c.Primaries() {
		got, err := c.Client(p).ScriptExists(context.Background(), sha).Result()
		if err != nil || len(got) != 1 || !got[0] {
			t.Errorf("SCRIPT EXISTS on primary %s: %v, %v", p.Addr(), got, err)
		}
	}
}

// A cluster whose first primary (Nodes[0]) lacks the module, the function
// library loaded on every primary: auto finds the function (the module
// is not on every primary); the script forced is loaded on every primary,
// and reloaded on every primary after a NOSCRIPT, and after a failover of
// a key's primary the counts continue on the promoted replica (whose
// script cache the client fills); with the library deleted,
// auto finds the script; the module forced is an outage the policy
// answers for a key of the primary without it, and counted by no shard.
func TestRedisClusterMixed(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Module: clusterModule(t), WithoutModule: 0})
	c.LoadFunction(pacer.PacerScript())
	cc, hops := clusterClient(t, c)
	ctx := context.Background()

	t.Run("function by auto", func(t *testing.T) {
		c := c.In(t)
		paceKeys(t, c, cc, clusterKeys(t, c, "pacer:cluster:function", 4), pacer.EngineAuto, pacer.EngineFunction)
	})

	t.Run("script forced", func(t *testing.T) {
		c := c.In(t)
		paceKeys(t, c, cc, clusterKeys(t, c, "pacer:cluster:script", 4), pacer.EngineScript, pacer.EngineScript)
		scriptOnEveryPrimary(t, c)
	})

	// Admitted once; the script cache of the key's owner emptied; the
	// next call answers NOSCRIPT, the client loads the script on every
	// primary and retries: admitted by the server (the burst's second).
	t.Run("NOSCRIPT reloads", func(t *testing.T) {
		c := c.In(t)
		key := "pacer:cluster:noscript"
		r, _ := openRedis(t, pacer.RedisOptions{Client: cc, Key: key, Config: fleetConfig(), Engine: pacer.EngineScript, OnFailure: pacer.FailClosed})
		if d := mustRedisReserve(t, r); !d.Admitted || d.Fallback != "" {
			t.Fatalf("first: %+v", d)
		}
		for _, p := range c.Primaries() {
			if err := c.Client(p).ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if d := mustRedisReserve(t, r); !d.Admitted || d.WaitMs != 0 || d.Fallback != "" {
			t.Fatalf("after SCRIPT FLUSH: %+v; want the burst's second, from the server", d)
		}
		scriptOnEveryPrimary(t, c)
		checkCounts(t, c, key, told{admitted: 2})
	})

	t.Run("failover", func(t *testing.T) {
		c := c.In(t)
		// A key whose primary is not Nodes[0] (the one without the module,
		// which the last subtest needs to stay a primary).
		var key string
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("pacer:cluster:failover:%d", i); c.Owner(k) != c.Nodes[0] {
				key = k
			}
		}
		moved, other, dials := hops.moved.Load(), hops.other.Load(), hops.dials.Load()
		hops.mu.Lock()
		seen := len(hops.texts)
		hops.mu.Unlock()
		out := moveAndContinue(t, c, cc, key, pacer.EngineScript, func(int, *redistest.Server) *redistest.Server {
			return c.Failover(c.Owner(key))
		})
		checkCounts(t, c, key, out)
		scriptOnEveryPrimary(t, c)
		t.Logf("after the failover: MOVED replies followed %d, other error replies %d %q, new connections %d",
			hops.moved.Load()-moved, hops.other.Load()-other, hops.texts[seen:], hops.dials.Load()-dials)
	})

	c.DeleteFunction()

	t.Run("script by auto", func(t *testing.T) {
		c := c.In(t)
		for _, p := range c.Primaries() {
			if err := c.Client(p).ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		paceKeys(t, c, cc, clusterKeys(t, c, "pacer:cluster:auto", 4), pacer.EngineAuto, pacer.EngineScript)
		scriptOnEveryPrimary(t, c)
	})

	t.Run("module forced", func(t *testing.T) {
		c := c.In(t)
		bare := c.Nodes[0]
		var without, with string
		for i := 0; without == "" || with == ""; i++ {
			key := fmt.Sprintf("pacer:cluster:forced:%d", i)
			if c.Owner(key) == bare {
				without = cmp.Or(without, key)
			} else {
				with = cmp.Or(with, key)
			}
		}
		r, capture := openRedis(t, pacer.RedisOptions{Client: cc, Key: without, Config: fleetConfig(), Engine: pacer.EngineModule})
		d := mustRedisReserve(t, r)
		if !d.Admitted || d.Fallback != pacer.FailLocal {
			t.Fatalf("a key of the primary without the module: %+v; want admitted by the local fallback", d)
		}
		if countMessages(capture, outageStarted) != 1 {
			t.Fatalf("notices %q; want one outage notice", capture.messages())
		}
		slot := c.Slot(without)
		for _, p := range c.Primaries() {
			if n := c.KeysIn(p, slot); n != 0 {
				t.Fatalf("primary %s holds %d keys in slot %d: the fallback's admission was counted", p.Addr(), n, slot)
			}
		}
		r2, _ := openRedis(t, pacer.RedisOptions{Client: cc, Key: with, Config: fleetConfig(), Engine: pacer.EngineModule})
		if d := mustRedisReserve(t, r2); !d.Admitted || d.Fallback != "" {
			t.Fatalf("a key of a primary with the module: %+v; want admitted by the server", d)
		}
		checkCounts(t, c, with, told{admitted: 1})
	})
}

// ClusterAddrs makes a *redis.ClusterClient of the seeds (host:port each,
// or one cluster URL with addr= parameters); with Addr, an empty seed or
// a URL among several, OpenRedis refuses it. Nothing is contacted.
func TestRedisClusterAddrsOption(t *testing.T) {
	cfg := fleetConfig()
	cfg.Notifier = quiet()
	for _, seeds := range [][]string{
		{"127.0.0.1:1", "127.0.0.1:2"},
		{"redis://127.0.0.1:1?addr=127.0.0.1:2"},
	} {
		r, err := pacer.OpenRedis(pacer.RedisOptions{ClusterAddrs: seeds, Key: "k", Config: cfg})
		if err != nil {
			t.Fatalf("%q: %v", seeds, err)
		}
		cc, ok := r.Client().(*redis.ClusterClient)
		if !ok {
			t.Fatalf("%q: Client is %T, want *redis.ClusterClient", seeds, r.Client())
		}
		if got := cc.Options().Addrs; len(got) != 2 || got[0] != "127.0.0.1:1" || got[1] != "127.0.0.1:2" {
			t.Fatalf("%q: seeds %q", seeds, got)
		}
		if cc.Options().MaxRetries != -1 || !cc.Options().ContextTimeoutEnabled || cc.Options().ReadTimeout != r.Timeout() {
			t.Fatalf("%q: options %+v", seeds, cc.Options())
		}
		_ = r.Close()
	}
	for _, opts := range []pacer.RedisOptions{
		{Addr: "127.0.0.1:1", ClusterAddrs: []string{"127.0.0.1:2"}},
		{ClusterAddrs: []string{"127.0.0.1:1", ""}},
		{ClusterAddrs: []string{"127.0.0.1:1", "redis://127.0.0.1:2"}},
		{ClusterAddrs: []string{"redis://127.0.0.1:1?nosuchoption=1"}},
	} {
		opts.Key, opts.Config = "k", cfg
		if r, err := pacer.OpenRedis(opts); !errors.Is(err, pacer.ErrInvalidInput) {
			_ = r.Close()
			t.Fatalf("%+v: %v; want ErrInvalidInput", opts, err)
		}
	}
}
