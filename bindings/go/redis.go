package pacer

// RedisPacer: the Pacer's calls over a bucket in Redis (docs/redis.md,
// docs/fleet-clients.md), so every proxy of a fleet paces against one
// bucket. The rule runs in the server (the module, the function library or
// the script); this file picks the engine, sends the calls, reads the
// replies and applies the failure policy.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisEngine is how a RedisPacer runs the rule in the server.
type RedisEngine string

const (
	// EngineAuto asks the server which engine it has: the module, else
	// the function library, else the script.
	EngineAuto RedisEngine = "auto"
	// EngineModule sends PACER.* commands (the module is loaded).
	EngineModule RedisEngine = "module"
	// EngineFunction calls FCALL pacer (the library is loaded with
	// FUNCTION LOAD by the operator).
	EngineFunction RedisEngine = "function"
	// EngineScript sends EVALSHA of the package's copy of redis/pacer.lua,
	// loading it with SCRIPT LOAD when the server does not have it.
	EngineScript RedisEngine = "script"
)

// FailurePolicy is what a RedisPacer answers while Redis fails
// (docs/fleet-clients.md, "When Redis fails"). An answer decided by the
// policy carries it in its Fallback field; "" means Redis decided.
type FailurePolicy string

const (
	// FailLocal decides with an in-process Pacer at rate ⌊rate/N⌋ and
	// burst ⌊burst/N⌋ (at least 1), N = RedisOptions.FleetSize.
	FailLocal FailurePolicy = "local"
	// FailOpen admits at once, nothing debited (PathDisabled).
	FailOpen FailurePolicy = "open"
	// FailClosed refuses with the pacer's largest retry-after hint.
	FailClosed FailurePolicy = "closed"
)

// Defaults of RedisOptions.
const (
	DefaultRedisTimeout    = time.Second // cut to the wait bound when that is less
	DefaultRedisRetryAfter = time.Second
)

// RedisOptions configures OpenRedis.
type RedisOptions struct {
	// Addr is the server: "host:port", or a URL (redis://, rediss://,
	// unix://) as go-redis's ParseURL reads it. Ignored when Client is set;
	// not to be given with ClusterAddrs.
	Addr string
	// ClusterAddrs are seed nodes of a Redis Cluster, as
	// redis.ClusterOptions.Addrs takes them ("host:port" each), or one
	// redis:// or rediss:// URL as go-redis's ParseClusterURL reads it
	// (more seeds as addr= parameters). OpenRedis makes a
	// *redis.ClusterClient for them, which routes the key to the primary
	// owning its slot and follows MOVED and ASK; engine detection and the
	// script's load ask every primary. Ignored when Client is set.
	ClusterAddrs []string
	// Client is a go-redis client to use instead of Addr (a *redis.Client,
	// *redis.ClusterClient, …). Close leaves it open. Its own timeouts
	// and retries stay as configured; a call still ends after Timeout. A
	// *redis.ClusterClient (anything with its ForEachMaster) is a cluster:
	// engine detection and the script's load ask every primary.
	Client redis.UniversalClient
	// Key is the bucket's key (docs/redis.md, "The key").
	Key string
	// Config is the pacer's configuration, as New takes it. Every client
	// of the key must give the same RatePerMinute, Burst, IdleTimeout,
	// MaxRetries, ReleasePolicy and adaptive fields (AdaptiveFloorPerMin,
	// AdaptiveCeilingPerMin: sent as ADAPT floor ceiling). Clock is read
	// only by the local fallback pacer and for Admission.Waited (nil:
	// MonotonicMs); the
	// server's clock decides everything else. Sleep and Notifier are used
	// as by New.
	Config Config
	// Engine is EngineAuto ("" means auto), EngineModule, EngineFunction
	// or EngineScript.
	Engine RedisEngine
	// OnFailure is FailLocal ("" means local), FailOpen or FailClosed.
	OnFailure FailurePolicy
	// FleetSize is N, the number of proxies sharing the key, for the local
	// fallback's rate and burst; 0 means 1.
	FleetSize int
	// Timeout bounds each call to Redis; 0 means the wait bound or 1 s,
	// whichever is less, and a larger one is cut to the wait bound.
	Timeout time.Duration
	// RetryAfter is how long the policy answers alone after a failure
	// before Redis is asked again; 0 means 1 s.
	RetryAfter time.Duration
}

// RedisPacer is a Pacer whose bucket lives in Redis: its calls ask the
// server, whose clock and rule decide, so every process using the key
// paces against one bucket. It is safe for concurrent use.
type RedisPacer struct {
	client      redis.UniversalClient
	ownClient   bool
	selfBounded bool          // client ends every command by its context's deadline
	cluster     clusterClient // client, when it is a cluster client; else nil
	key         string
	cfg         Config
	args        []any // the five configuration arguments, as sent
	adapt       []any // ADAPT floor ceiling when adaptation is on, else nil
	mode        Mode
	boundMs     uint64
	hintCap     uint64
	engineWant  RedisEngine
	onFailure   FailurePolicy
	timeout     time.Duration
	retryAfter  time.Duration
	clock       func() uint64
	sleep       func(ctx context.Context, d time.Duration) error
	notifier    *Notifier
	fallbackCfg Config // FailLocal's pacer's configuration
	fallbackMu  sync.Mutex
	fallback    *Pacer // FailLocal's in-process pacer, made on the first failure
	scriptSHA   string
	life        context.Context
	endLife     context.CancelFunc
	closeMu     sync.RWMutex
	closed      bool
	running     sync.WaitGroup
	keyedMu     sync.Mutex             // guards keyed (each entry has its own lock)
	keyed       map[string]*redisKeyed // AdmitKey's requests refused so far
	counts      redisCounts            // what the calls got (Counters)
	lastRate    atomic.Int64           // the rate in force the server last reported (LastRateInForce)

	mu          sync.Mutex  // guards the fields below
	engine      RedisEngine // the engine found ("" until asked)
	scriptReady bool        // the script was loaded since the engine was found
	down        bool        // an outage is under way
	retryAt     time.Time   // while down, Redis is not asked before this
}

// OpenRedis validates opts and returns a RedisPacer. It does not contact
// the server: the first call picks the engine, and an outage at start-up
// is answered by the failure policy like any other. A bad Config returns
// an error wrapping ErrInvalidConfig, a bad option one wrapping
// ErrInvalidInput.
func OpenRedis(opts RedisOptions) (*RedisPacer, error) {
	if err := checkABI(); err != nil {
		return nil, err
	}
	cc, err := opts.Config.validate()
	if err != nil {
		return nil, err
	}
	if opts.Key == "" {
		return nil, inputError("Key", opts.Key, "must not be empty")
	}
	engine := opts.Engine
	if engine == "" {
		engine = EngineAuto
	}
	switch engine {
	case EngineAuto, EngineModule, EngineFunction, EngineScript:
	default:
		return nil, inputError("Engine", string(engine), "must be auto, module, function or script")
	}
	policy := opts.OnFailure
	if policy == "" {
		policy = FailLocal
	}
	switch policy {
	case FailLocal, FailOpen, FailClosed:
	default:
		return nil, inputError("OnFailure", string(policy), "must be local, open or closed")
	}
	fleet := opts.FleetSize
	if fleet == 0 {
		fleet = 1
	}
	if fleet < 0 {
		return nil, inputError("FleetSize", opts.FleetSize, "must not be negative")
	}
	if opts.Timeout < 0 {
		return nil, inputError("Timeout", opts.Timeout, "must not be negative")
	}
	if opts.RetryAfter < 0 {
		return nil, inputError("RetryAfter", opts.RetryAfter, "must not be negative")
	}
	if opts.Client == nil && opts.Addr == "" && len(opts.ClusterAddrs) == 0 {
		return nil, inputError("Addr", opts.Addr, "must name a server when no Client or ClusterAddrs is given")
	}
	if opts.Client == nil && opts.Addr != "" && len(opts.ClusterAddrs) > 0 {
		return nil, inputError("ClusterAddrs", opts.ClusterAddrs, "must not be given with Addr")
	}

	// A local pacer of the full configuration gives the mode and the
	// bound (and logs the configuration's notice, as New does).
	cfg := opts.Config
	if cfg.Notifier == nil {
		cfg.Notifier = DefaultNotifier
	}
	probe, err := New(cfg)
	if err != nil {
		return nil, err
	}
	mode, bound := probe.Mode(), probe.WaitBoundMs()
	_ = probe.Close()

	r := &RedisPacer{
		key:        opts.Key,
		cfg:        cfg,
		mode:       mode,
		boundMs:    bound,
		hintCap:    HintCapSeconds(bound),
		engineWant: engine,
		onFailure:  policy,
		timeout:    redisTimeout(opts.Timeout, bound),
		retryAfter: opts.RetryAfter,
		clock:      cfg.Clock,
		sleep:      cfg.Sleep,
		notifier:   cfg.Notifier,
		scriptSHA:  pacerScriptSHA,
		keyed:      make(map[string]*redisKeyed),
	}
	r.lastRate.Store(int64(cfg.RatePerMinute))
	if r.retryAfter == 0 {
		r.retryAfter = DefaultRedisRetryAfter
	}
	if r.clock == nil {
		r.clock = MonotonicMs
	}
	if r.sleep == nil {
		r.sleep = timerSleep
	}
	policyName := "refund"
	if cc.policy == uint32(ReleaseStrict) {
		policyName = "strict"
	}
	r.args = []any{
		strconv.FormatUint(uint64(cc.rate), 10),
		strconv.FormatUint(uint64(cc.burst), 10),
		strconv.FormatUint(cc.idle, 10),
		strconv.FormatUint(uint64(cc.retries), 10),
		policyName,
	}
	if cc.floor > 0 {
		// The ceiling as given: 0 (the rate) is stored as the rate.
		r.adapt = []any{"ADAPT", strconv.FormatUint(uint64(cc.floor), 10), strconv.FormatUint(uint64(cc.ceiling), 10)}
	}
	if policy == FailLocal {
		r.fallbackCfg = cfg
		r.fallbackCfg.RatePerMinute = max(cfg.RatePerMinute/fleet, 1)
		r.fallbackCfg.Burst = max(cfg.Burst/fleet, 1)
		if cfg.AdaptiveFloorPerMin > 0 {
			// Adaptive between the bounds so divided: ⌊floor/N⌋ and
			// ⌊ceiling/N⌋ (the ceiling 0 is the rate), each at least 1.
			ceiling := cfg.AdaptiveCeilingPerMin
			if ceiling == 0 {
				ceiling = cfg.RatePerMinute
			}
			r.fallbackCfg.AdaptiveFloorPerMin = max(cfg.AdaptiveFloorPerMin/fleet, 1)
			r.fallbackCfg.AdaptiveCeilingPerMin = max(ceiling/fleet, 1)
		}
	}
	switch {
	case opts.Client != nil:
		r.client = opts.Client
	case len(opts.ClusterAddrs) > 0:
		client, err := newRedisClusterClient(opts.ClusterAddrs, r.timeout)
		if err != nil {
			return nil, err
		}
		r.client, r.ownClient = client, true
	default:
		client, err := newRedisClient(opts.Addr, r.timeout, r.reconnected)
		if err != nil {
			return nil, err
		}
		r.client, r.ownClient, r.selfBounded = client, true, true
	}
	r.cluster, _ = r.client.(clusterClient)
	r.life, r.endLife = context.WithCancel(context.Background())
	return r, nil
}

// localPacer is FailLocal's in-process pacer, made (full) when the policy
// first answers: its own notice, if its configuration has one, is logged
// then.
func (r *RedisPacer) localPacer() (*Pacer, error) {
	r.fallbackMu.Lock()
	defer r.fallbackMu.Unlock()
	if r.fallback == nil {
		p, err := New(r.fallbackCfg)
		if err != nil {
			return nil, err
		}
		if r.isClosed() {
			_ = p.Close()
		}
		r.fallback = p
	}
	return r.fallback, nil
}

// issuedLocally is the local pacer if it was made, else nil.
func (r *RedisPacer) issuedLocally() *Pacer {
	r.fallbackMu.Lock()
	defer r.fallbackMu.Unlock()
	return r.fallback
}

// redisTimeout is the rule of docs/fleet-clients.md: given, or the wait
// bound or 1 s whichever is less, and never more than the wait bound (a
// bound of 0, pacing disabled, asks nothing of Redis).
func redisTimeout(given time.Duration, boundMs uint64) time.Duration {
	bound := msDuration(boundMs)
	if given == 0 {
		given = DefaultRedisTimeout
	}
	if bound > 0 && given > bound {
		return bound
	}
	return given
}

// newRedisClient is the client OpenRedis makes for addr: no retries (a
// retried reservation could be decided twice), the context's deadline on
// every socket operation, and onConnect told of each new connection.
func newRedisClient(addr string, timeout time.Duration, onConnect func()) (*redis.Client, error) {
	var opt *redis.Options
	if hasURLScheme(addr) {
		parsed, err := redis.ParseURL(addr)
		if err != nil {
			return nil, inputError("Addr", addr, "must be host:port or a redis URL: "+err.Error())
		}
		opt = parsed
	} else {
		opt = &redis.Options{Addr: addr}
	}
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	opt.OnConnect = func(context.Context, *redis.Conn) error {
		onConnect()
		return nil
	}
	return redis.NewClient(opt), nil
}

// newRedisClusterClient is the cluster client OpenRedis makes for the
// seed nodes addrs (or one cluster URL), its nodes' connections made as
// newRedisClient makes its own. MaxRedirects stays go-redis's default (3):
// the redirects of a migration or a failover are followed within it. A
// new connection does not make auto ask for the engine again (as on a
// Client of the caller's, a failure or an engine change does): a cluster
// client connects to nodes at any time (to look up COMMAND, reload the
// slots, follow a redirect), and each would cost every primary a round
// of MODULE LIST and FUNCTION LIST.
func newRedisClusterClient(addrs []string, timeout time.Duration) (*redis.ClusterClient, error) {
	var opt *redis.ClusterOptions
	if len(addrs) == 1 && hasURLScheme(addrs[0]) {
		parsed, err := redis.ParseClusterURL(addrs[0])
		if err != nil {
			return nil, inputError("ClusterAddrs", addrs, "must be host:port seeds or one redis cluster URL: "+err.Error())
		}
		opt = parsed
	} else {
		for _, addr := range addrs {
			if addr == "" || hasURLScheme(addr) {
				return nil, inputError("ClusterAddrs", addrs, "must be host:port seeds or one redis cluster URL")
			}
		}
		opt = &redis.ClusterOptions{Addrs: append([]string(nil), addrs...)}
	}
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	return redis.NewClusterClient(opt), nil
}

// clusterClient is a cluster client (*redis.ClusterClient): what it has
// that a client of one server has not, its primaries.
type clusterClient interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// reconnected is told of each new connection of a client OpenRedis made:
// auto asks the server for its engine again on the next call (a server
// that came back may have another).
func (r *RedisPacer) reconnected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.engine = ""
}

func hasURLScheme(addr string) bool {
	for _, scheme := range []string{"redis://", "rediss://", "unix://"} {
		if len(addr) >= len(scheme) && addr[:len(scheme)] == scheme {
			return true
		}
	}
	return false
}

// Key is the bucket's key.
func (r *RedisPacer) Key() string { return r.key }

// Config is the configuration the pacer was opened with.
func (r *RedisPacer) Config() Config { return r.cfg }

// Mode is how the bucket treats overflow.
func (r *RedisPacer) Mode() Mode { return r.mode }

// WaitBoundMs is the longest wait an admission is given, ms.
func (r *RedisPacer) WaitBoundMs() uint64 { return r.boundMs }

// Timeout is how long a call waits for Redis.
func (r *RedisPacer) Timeout() time.Duration { return r.timeout }

// Engine is the engine in use: the one forced, or the one auto found ("",
// before the first call and after a failure, or a new connection of a
// client OpenRedis made for Addr, until the next call asks again).
func (r *RedisPacer) Engine() RedisEngine {
	if r.engineWant != EngineAuto {
		return r.engineWant
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engine
}

// Client is the go-redis client the pacer uses.
func (r *RedisPacer) Client() redis.UniversalClient { return r.client }

// Close closes the pacer: calls that start after it and would admit or
// read return ErrClosed, and every Admit or AdmitKey waiting for its slot
// wakes, releases its ticket and returns ErrClosed (or ctx.Err()). Close
// waits for calls under way (each bounded by Timeout), then closes the
// client if OpenRedis made it. Releases after Close still go to the local
// fallback pacer for its tickets; a Redis ticket can be released after
// Close only on a Client given in RedisOptions. Idempotent.
func (r *RedisPacer) Close() error {
	if r == nil {
		return nil
	}
	r.closeMu.Lock()
	if r.closed {
		r.closeMu.Unlock()
		return nil
	}
	r.closed = true
	r.closeMu.Unlock()
	r.endLife()
	r.running.Wait()
	if local := r.issuedLocally(); local != nil {
		_ = local.Close()
	}
	if r.ownClient {
		return r.client.Close()
	}
	return nil
}

// enter registers a call that admits or reads; false once closed. The
// caller calls r.running.Done() when it ends.
func (r *RedisPacer) enter() bool {
	if r == nil || r.client == nil {
		return false
	}
	r.closeMu.RLock()
	defer r.closeMu.RUnlock()
	if r.closed {
		return false
	}
	r.running.Add(1)
	return true
}

// enterRelease registers a release: it works after Close too (false only
// for a pacer not made by OpenRedis). A release that starts after Close
// is not waited for.
func (r *RedisPacer) enterRelease() (tracked, ok bool) {
	if r == nil || r.client == nil {
		return false, false
	}
	r.closeMu.RLock()
	defer r.closeMu.RUnlock()
	if r.closed {
		return false, true
	}
	r.running.Add(1)
	return true, true
}

// isClosed reports whether Close has run.
func (r *RedisPacer) isClosed() bool {
	r.closeMu.RLock()
	defer r.closeMu.RUnlock()
	return r.closed
}

// outageStarted records a failure: the policy answers alone until
// RetryAfter has passed, the engine is asked again on the next contact,
// and the first failure of an outage is logged.
func (r *RedisPacer) outageStarted(cause error) {
	r.mu.Lock()
	started := !r.down
	r.down = true
	r.retryAt = time.Now().Add(r.retryAfter)
	r.engine = ""
	r.scriptReady = false
	r.mu.Unlock()
	if started {
		r.notifier.event(slog.LevelWarn, "pacer: redis failed; answering by the failure policy",
			slog.String("key", r.key),
			slog.String("on_failure", string(r.onFailure)),
			slog.Duration("retry_after", r.retryAfter),
			slog.String("error", cause.Error()))
	}
}

// contacted records a reply from the server: an outage under way ends.
func (r *RedisPacer) contacted() {
	r.mu.Lock()
	ended := r.down
	r.down = false
	r.mu.Unlock()
	if ended {
		r.notifier.event(slog.LevelInfo, "pacer: redis answers again; the outage is over",
			slog.String("key", r.key))
	}
}

// waiting reports whether an outage is under way and Redis is not to be
// asked yet.
func (r *RedisPacer) waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down && time.Now().Before(r.retryAt)
}

// event logs one record, with no dedupe: the outage notices are logged
// once per outage, each time one starts or ends.
func (n *Notifier) event(level slog.Level, msg string, attrs ...slog.Attr) {
	if n == nil {
		n = DefaultNotifier
	}
	defer func() { _ = recover() }()
	logger := n.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// redisFailure is a failure of Redis (the connection, the deadline, an
// error reply of the class "outage"): the policy answers it, or the caller
// sees a *RedisUnavailableError where no policy applies.
type redisFailure struct{ err error }

func (f *redisFailure) Error() string { return f.err.Error() }

// lateReply is given what a call got after its caller's ctx ended (the
// reply, or the error), so that what the reply carries can be released.
type lateReply func(reply any, err error)

// run sends one pacer operation (op and its arguments after the key) to
// the server. It returns the reply; a *RedisError for an error reply of
// the pacer or a reply no policy hides; a *redisFailure when Redis failed
// (the outage is recorded); ErrClosed when the client was closed; the
// caller's ctx.Err() when ctx ended first.
//
// The call (engine detection, script load, the command, its retry) has
// one deadline, Timeout, and does not end with the caller's ctx: when ctx
// ends first, run returns ctx.Err() at once and the call goes on to its
// end, whose reply or error is given to late (if not nil), to release
// what the reply carries. A ctx already ended sends nothing (late is
// given ctx.Err()).
func (r *RedisPacer) run(ctx context.Context, op string, late lateReply, args ...any) (any, error) {
	if r.waiting() {
		return nil, &redisFailure{err: errRetryLater}
	}
	if ctx.Done() == nil {
		return r.call(ctx, op, args)
	}
	if err := ctx.Err(); err != nil {
		if late != nil {
			late(nil, err)
		}
		return nil, err
	}
	type result struct {
		reply any
		err   error
	}
	var mu sync.Mutex
	left := false // the caller returned: the result goes to late
	done := make(chan result, 1)
	tracked := r.enter() // Close waits for the call, as for its caller
	go func() {
		if tracked {
			defer r.running.Done()
		}
		reply, err := r.call(context.WithoutCancel(ctx), op, args)
		mu.Lock()
		gone := left
		if !gone {
			done <- result{reply, err}
		}
		mu.Unlock()
		if gone && late != nil {
			late(reply, err)
		}
	}()
	select {
	case res := <-done:
		return res.reply, res.err
	case <-ctx.Done():
	}
	mu.Lock()
	select {
	case res := <-done: // it came as ctx ended
		mu.Unlock()
		if late != nil {
			late(res.reply, res.err)
		}
	default:
		left = true
		mu.Unlock()
	}
	return nil, ctx.Err()
}

// call is one whole call of run, within Timeout from now.
func (r *RedisPacer) call(ctx context.Context, op string, args []any) (any, error) {
	callCtx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	reply, err := r.exchange(callCtx, op, args)
	if err == nil {
		r.contacted()
		return reply, nil
	}
	if errors.Is(err, redis.ErrClosed) {
		return nil, ErrClosed
	}
	var replyErr *RedisError
	if errors.As(err, &replyErr) {
		r.contacted()
		return nil, err
	}
	r.outageStarted(err)
	return nil, &redisFailure{err: err}
}

var errRetryLater = errors.New("pacer: redis failed recently; not asked again before RetryAfter")

// exchange picks the engine (when not known) and sends the operation. An
// error reply of the class "engine" (the engine in use is gone: the
// script cache emptied, the function deleted, the module unloaded) asks
// the server again which engine it has, loads the script if that is the
// engine, and retries once; the same class again is a failure. The
// script's retry is EVAL, which carries the script: on a cluster the
// script was loaded on every primary the client knows, and a replica
// promoted a moment ago may not be among them yet (its EVALSHA answered
// NOSCRIPT again). It returns a pacer error as a *RedisError, a failure as
// the error it is.
func (r *RedisPacer) exchange(ctx context.Context, op string, args []any) (any, error) {
	engine, err := r.pickEngine(ctx)
	if err != nil {
		return nil, err
	}
	reply, err := r.send(ctx, engine, op, args, false)
	if class, ok := replyClassOf(err); ok && class == classEngine {
		r.forgetEngine()
		if engine, err = r.pickEngine(ctx); err != nil {
			return nil, err
		}
		reply, err = r.send(ctx, engine, op, args, true)
	}
	if err != nil {
		return nil, classify(op, err)
	}
	return reply, nil
}

// forgetEngine makes the next call ask which engine the server has (a
// forced engine is kept), and load the script before it runs it.
func (r *RedisPacer) forgetEngine() {
	r.mu.Lock()
	r.engine = ""
	r.scriptReady = false
	r.mu.Unlock()
}

// send is one command of engine; with carry, the script's is EVAL of the
// script itself rather than EVALSHA of its SHA1.
func (r *RedisPacer) send(ctx context.Context, engine RedisEngine, op string, args []any, carry bool) (any, error) {
	var cmd []any
	switch engine {
	case EngineModule:
		cmd = make([]any, 0, 2+len(args))
		cmd = append(cmd, "PACER."+strings.ToUpper(op), r.key)
	case EngineFunction:
		cmd = make([]any, 0, 5+len(args))
		cmd = append(cmd, "FCALL", "pacer", 1, r.key, op)
	default:
		cmd = make([]any, 0, 5+len(args))
		if carry {
			cmd = append(cmd, "EVAL", pacerScript, 1, r.key, op)
		} else {
			cmd = append(cmd, "EVALSHA", r.scriptSHA, 1, r.key, op)
		}
	}
	cmd = append(cmd, args...)
	return r.do(ctx, cmd...)
}

// sentOnce is a command go-redis sends at most once: a client's retries
// (a *redis.Client's MaxRetries, a cluster client's attempts, which share
// MaxRedirects with the redirections) would send it again after a
// connection lost with the command sent, and the server could decide it
// twice. MOVED and ASK are replies, followed as before.
type sentOnce struct{ *redis.Cmd }

func (sentOnce) NoRetry() bool { return true }

// do runs one command on the client, and returns when it answers or ctx
// ends, whichever comes first: a client given in RedisOptions may not
// follow the context's deadline on its socket, and a call never waits on
// Redis longer than Timeout. A late reply is dropped (its command may
// still run in the server). A nil reply is a reply (nil), not an error.
// The command is sent at most once (sentOnce).
func (r *RedisPacer) do(ctx context.Context, args ...any) (any, error) {
	reply, err := r.bounded(ctx, func() (any, error) {
		cmd := sentOnce{redis.NewCmd(ctx, args...)}
		_ = r.client.Process(ctx, cmd)
		return cmd.Result()
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return reply, err
}

// bounded runs call (one command on the client) as do describes. A
// cluster client, even one OpenRedis made, is bounded here too: it may
// look up COMMAND's table or the slots on its own deadline.
func (r *RedisPacer) bounded(ctx context.Context, call func() (any, error)) (any, error) {
	if r.selfBounded {
		return call()
	}
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pickEngine is the engine to send to: the forced one, or the one auto
// found (asking the server on the first call and after a failure or an
// engine change). The script is loaded before its first use.
func (r *RedisPacer) pickEngine(ctx context.Context) (RedisEngine, error) {
	r.mu.Lock()
	engine, ready := r.engine, r.scriptReady
	r.mu.Unlock()
	if engine == "" {
		engine = r.engineWant
		if engine == EngineAuto {
			var err error
			if engine, err = r.detect(ctx); err != nil {
				return "", err
			}
		}
		ready = false
		r.mu.Lock()
		r.engine = engine
		r.mu.Unlock()
	}
	if engine == EngineScript && !ready {
		if err := r.loadScript(ctx); err != nil {
			return "", err
		}
	}
	return engine, nil
}

// detect asks the server which engine it has. A server that refuses
// MODULE LIST or FUNCTION LIST (an error reply other than an outage's) is
// taken to have neither. On a cluster every primary is asked: the module
// when every primary has it, else the function when every primary has
// it, else the script.
func (r *RedisPacer) detect(ctx context.Context) (RedisEngine, error) {
	var module, function bool
	var err error
	if r.cluster == nil {
		module, function, err = engines(ctx, r.do, false)
	} else {
		var mu sync.Mutex
		module, function = true, true
		_, err = r.bounded(ctx, func() (any, error) {
			return nil, r.cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				m, f, err := engines(ctx, nodeDo(node), true)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				module, function = module && m, function && f
				return nil
			})
		})
	}
	switch {
	case err != nil:
		return "", err
	case module:
		return EngineModule, nil
	case function:
		return EngineFunction, nil
	}
	return EngineScript, nil
}

// engines asks one server (do sends it a command) whether it has the
// module (MODULE LIST names pacer) and the function library (FUNCTION
// LIST lists it). The library is not asked for when the module is there,
// unless both is true.
func engines(ctx context.Context, do func(ctx context.Context, args ...any) (any, error), both bool) (module, function bool, err error) {
	modules, err := do(ctx, "MODULE", "LIST")
	if failed(err) {
		return false, false, err
	}
	module = err == nil && listNames(modules, "name", "pacer")
	if module && !both {
		return true, false, nil
	}
	libraries, err := do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", "pacer")
	if failed(err) {
		return false, false, err
	}
	return module, err == nil && listNames(libraries, "library_name", "pacer"), nil
}

// nodeDo sends a command to one node of a cluster (a nil reply is nil,
// not an error, as do answers it).
func nodeDo(node *redis.Client) func(ctx context.Context, args ...any) (any, error) {
	return func(ctx context.Context, args ...any) (any, error) {
		reply, err := node.Do(ctx, args...).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return reply, err
	}
}

// failed reports whether err is a failure: not an error reply, or one of
// the class "outage".
func failed(err error) bool {
	class, ok := replyClassOf(err)
	return err != nil && (!ok || class == classOutage)
}

// loadScript sends SCRIPT LOAD of the package's copy of pacer.lua; on a
// cluster, to every primary, so that EVALSHA finds it whichever primary
// owns the key.
func (r *RedisPacer) loadScript(ctx context.Context) error {
	var err error
	if r.cluster == nil {
		var sha any
		sha, err = r.bounded(ctx, func() (any, error) { return r.client.ScriptLoad(ctx, pacerScript).Result() })
		if err == nil {
			err = r.checkSHA(sha)
		}
	} else {
		_, err = r.bounded(ctx, func() (any, error) {
			return nil, r.cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				sha, err := node.ScriptLoad(ctx, pacerScript).Result()
				if err != nil {
					return err
				}
				return r.checkSHA(sha)
			})
		})
	}
	var shaErr *RedisError
	if errors.As(err, &shaErr) {
		return err
	}
	if err != nil {
		return classify("script load", err)
	}
	r.mu.Lock()
	r.scriptReady = true
	r.mu.Unlock()
	return nil
}

// checkSHA is nil when sha, SCRIPT LOAD's reply, is the script's SHA1.
func (r *RedisPacer) checkSHA(sha any) error {
	if s, ok := sha.(string); !ok || s != r.scriptSHA {
		return &RedisError{Op: "script load", Reply: "SCRIPT LOAD answered " + describe(sha) + ", not the script's SHA1 " + r.scriptSHA}
	}
	return nil
}

// listNames reports whether reply, a MODULE LIST or FUNCTION LIST reply
// (an array of entries, each a RESP3 map or a RESP2 flat array of
// name/value pairs), has an entry whose field is value.
func listNames(reply any, field, value string) bool {
	entries, ok := reply.([]any)
	if !ok {
		return false
	}
	for _, entry := range entries {
		switch e := entry.(type) {
		case map[any]any:
			if s, ok := e[field].(string); ok && s == value {
				return true
			}
		case map[string]any:
			if s, ok := e[field].(string); ok && s == value {
				return true
			}
		case []any:
			for i := 0; i+1 < len(e); i += 2 {
				if name, ok := e[i].(string); ok && name == field {
					if s, ok := e[i+1].(string); ok && s == value {
						return true
					}
				}
			}
		}
	}
	return false
}

// replyClass is what an error reply means to a fleet client
// (docs/fleet-clients.md, "Which replies are failures").
type replyClass uint8

const (
	// classPacer: an error to the caller, with the reply's text; no
	// failure policy hides it.
	classPacer replyClass = iota
	// classOutage: the server cannot serve now; the policy answers.
	classOutage
	// classEngine: the engine in use is gone; ask again, retry once.
	classEngine
)

func (c replyClass) String() string {
	switch c {
	case classOutage:
		return "outage"
	case classEngine:
		return "engine"
	}
	return "pacer"
}

// isOutageCode reports whether code (a whole word) says the server cannot
// serve now.
func isOutageCode(code string) bool {
	switch code {
	case "LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "OOM", "NOREPLICAS", "MISCONF":
		return true
	}
	return false
}

// classifyReply is the class of an error reply's text, by the one rule
// every fleet client keeps: the code is the first word, or the second
// when the first is ERR and the second an outage code (Redis prefixes
// with "ERR " an error a script's redis.call raised).
func classifyReply(text string) replyClass {
	code, rest, _ := strings.Cut(text, " ")
	if code == "ERR" {
		if next, _, _ := strings.Cut(rest, " "); isOutageCode(next) {
			code = next
		}
	}
	switch {
	case isOutageCode(code):
		return classOutage
	case code == "NOSCRIPT", strings.HasPrefix(text, "ERR Function not found"), unknownPacerCommand(text):
		return classEngine
	}
	return classPacer
}

// unknownPacerCommand reports whether text says a PACER.* command is
// unknown (the module is not loaded), the name in any case.
func unknownPacerCommand(text string) bool {
	const module = "pacer."
	name, ok := strings.CutPrefix(text, "ERR unknown command '")
	return ok && len(name) >= len(module) && strings.EqualFold(name[:len(module)], module)
}

// replyClassOf is err's class when err is an error reply (ok false for
// any other error, and for nil).
func replyClassOf(err error) (replyClass, bool) {
	var e redis.Error
	if err == nil || !errors.As(err, &e) {
		return classPacer, false
	}
	return classifyReply(e.Error()), true
}

// classify turns an error of a command into what exchange returns: a
// *RedisError for an error reply of the class "pacer"; any other error
// (the connection, the deadline, an outage's reply, an engine change
// found again) as it is, a failure.
func classify(op string, err error) error {
	if class, ok := replyClassOf(err); ok && class == classPacer {
		return &RedisError{Op: op, Reply: err.Error()}
	}
	return err
}

// ErrRedisPacer matches a *RedisError whose reply is the pacer's own
// error (ERR pacer: …): a configuration other than the bucket's, a spent,
// foreign or malformed ticket, a key that is not a pacer bucket.
var ErrRedisPacer = errors.New("pacer: redis: the pacer's error")

// ErrRedisWrongType matches a *RedisError whose reply is WRONGTYPE: the
// key holds another type.
var ErrRedisWrongType = errors.New("pacer: redis: the key holds another type")

// ErrRedisUnavailable matches a *RedisUnavailableError.
var ErrRedisUnavailable = errors.New("pacer: redis unavailable")

// RedisError is an error reply of the server that no failure policy
// hides: a bug or a misconfiguration, not an outage. errors.Is matches
// ErrRedisPacer for the pacer's errors and ErrRedisWrongType for
// WRONGTYPE; Reply is the server's text (for a configuration mismatch it
// names both configurations).
type RedisError struct {
	Op    string // the pacer operation: reserve, book, release, …
	Reply string // the error reply, e.g. "ERR pacer: ticket already released"
}

func (e *RedisError) Error() string { return "pacer: redis " + e.Op + ": " + e.Reply }

// Unwrap makes errors.Is(err, ErrRedisPacer) or ErrRedisWrongType true.
func (e *RedisError) Unwrap() error {
	switch {
	case len(e.Reply) >= 10 && e.Reply[:10] == "ERR pacer:":
		return ErrRedisPacer
	case len(e.Reply) >= 9 && e.Reply[:9] == "WRONGTYPE":
		return ErrRedisWrongType
	}
	return nil
}

// RedisUnavailableError is a call that needed Redis while it failed and
// that no policy answers (Info, Create). errors.Is(err, ErrRedisUnavailable) is true.
type RedisUnavailableError struct {
	Op  string
	Err error // the failure: a network error, a timeout, an error reply
}

func (e *RedisUnavailableError) Error() string {
	return "pacer: redis " + e.Op + ": unavailable: " + e.Err.Error()
}

// Unwrap gives ErrRedisUnavailable and the failure.
func (e *RedisUnavailableError) Unwrap() []error { return []error{ErrRedisUnavailable, e.Err} }

// unavailable turns a *redisFailure into the caller's error.
func unavailable(op string, err error) error {
	var f *redisFailure
	if errors.As(err, &f) {
		return &RedisUnavailableError{Op: op, Err: f.err}
	}
	return err
}

// describe shows a reply: nil, a quoted string, an integer, an array of
// those in brackets, anything else as Go prints it.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		return strconv.Quote(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case []any:
		items := make([]string, len(x))
		for i, item := range x {
			items[i] = describe(item)
		}
		return "[" + strings.Join(items, " ") + "]"
	}
	return fmt.Sprintf("%v", v)
}
