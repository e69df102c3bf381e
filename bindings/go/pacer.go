package pacer

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// ReleasePolicy says when a released ticket's debit is refunded (SPEC §4).
type ReleasePolicy uint32

const (
	// ReleaseRefund always refunds, capped at capacity (the default).
	ReleaseRefund ReleasePolicy = 0
	// ReleaseStrict refunds only while every later debit has itself been
	// refunded, so SPEC §6.1's window bound needs no release term.
	ReleaseStrict ReleasePolicy = 1
)

// releasePolicyNames are the release policies there are, by their names.
var releasePolicyNames = map[ReleasePolicy]string{ReleaseRefund: "refund", ReleaseStrict: "strict"}

func (p ReleasePolicy) String() string { return nameOf(releasePolicyNames, p) }

// Mode is how a pacer treats overflow, fixed by its Config.
type Mode uint32

const (
	// ModeDisabled: rate 0 or no room to wait; everything admitted at once.
	ModeDisabled Mode = 0
	// ModeRefusing: overflow is refused with a retry-after hint.
	ModeRefusing Mode = 1
	// ModeShapingLowRate: retries cannot outlast a slot wait at this rate,
	// so overflow is shaped (admitted late) instead.
	ModeShapingLowRate Mode = 2
	// ModeShapingNoRetry: no client retries, so overflow is shaped.
	ModeShapingNoRetry Mode = 3
)

// modeNames are the modes there are, by the names PACER.INFO gives them.
var modeNames = map[Mode]string{
	ModeDisabled:       "disabled",
	ModeRefusing:       "refusing",
	ModeShapingLowRate: "shaping-low-rate",
	ModeShapingNoRetry: "shaping-no-retry",
}

func (m Mode) String() string { return nameOf(modeNames, m) }

// Path is the rule that admitted a request.
type Path uint32

const (
	// PathNone: not admitted (a refusal).
	PathNone Path = 0
	// PathDisabled: pacing is off.
	PathDisabled Path = 1
	// PathPaced: a whole token, now or after a wait within the bound.
	PathPaced Path = 2
	// PathShaped: shaped overflow, debited down to the floor; waits the bound.
	PathShaped Path = 3
	// PathOverflow: overflow past the floor when shaping; at once, nothing debited.
	PathOverflow Path = 4
	// PathBooked: a redeemed booking (SPEC §11); the booked token was
	// debited when the booking was made.
	PathBooked Path = 5
)

// pathNames are the paths there are, by the names the Redis replies give
// them.
var pathNames = map[Path]string{
	PathNone:     "none",
	PathDisabled: "disabled",
	PathPaced:    "paced",
	PathShaped:   "shaped",
	PathOverflow: "overflow",
	PathBooked:   "booked",
}

func (p Path) String() string { return nameOf(pathNames, p) }

// Outcome is what the upstream answered to a new connection, reported
// with Observe (adaptive pacing, SPEC §14).
type Outcome uint32

const (
	// OutcomeOpened: the upstream opened the connection. It changes
	// nothing in the rate in force (the law learns from throttles only).
	OutcomeOpened Outcome = 1
	// OutcomeThrottled: the upstream refused it with its own rate limit
	// (not the pacer's refusal). It lowers the rate in force, at most once
	// a minute, never below the floor.
	OutcomeThrottled Outcome = 2
)

// outcomeNames are the outcomes there are, by the names PACER.OBSERVE
// takes.
var outcomeNames = map[Outcome]string{OutcomeOpened: "opened", OutcomeThrottled: "throttled"}

// String is "opened", "throttled", or "unknown".
func (o Outcome) String() string { return nameOf(outcomeNames, o) }

// nameOf is v's name in names, or "unknown" for a value names lacks.
func nameOf[T comparable](names map[T]string, v T) string {
	if name, ok := names[v]; ok {
		return name
	}
	return "unknown"
}

// named is the value whose name in names is name, or otherwise when none
// is.
func named[T comparable](names map[T]string, name string, otherwise T) T {
	for v, n := range names {
		if n == name {
			return v
		}
	}
	return otherwise
}

// checkOutcome is the ErrInvalidInput error for an outcome that is neither
// OutcomeOpened nor OutcomeThrottled, else nil.
func checkOutcome(o Outcome) error {
	if _, ok := outcomeNames[o]; !ok {
		return inputError("outcome", uint32(o), "must be OutcomeOpened or OutcomeThrottled")
	}
	return nil
}

// Defaults of SPEC §2.
const (
	DefaultRatePerMinute = 60
	DefaultBurst         = 10
	DefaultIdleTimeout   = 120 * time.Second
	DefaultMaxRetries    = 5
)

// Config is a pacer's parameters. Fields are taken as given (a zero
// RatePerMinute switches pacing off); start from DefaultConfig or
// Budget.Config.
type Config struct {
	// RatePerMinute is new connections per minute, 0..600 (0 = pacing off).
	RatePerMinute int
	// Burst is how many connections open with no wait after an idle spell,
	// 0..1000000 (0 means 1).
	Burst int
	// IdleTimeout is the request's no-data deadline, a whole number of
	// milliseconds >= 0; it sizes the wait bound (SPEC §3).
	IdleTimeout time.Duration
	// MaxRetries is the client's retry count, 0..LadderCeiling(idle).
	MaxRetries int
	// ReleasePolicy is ReleaseRefund (the default) or ReleaseStrict.
	ReleasePolicy ReleasePolicy
	// AdaptiveFloorPerMin turns adaptive pacing on (SPEC §14) when above
	// 0: the lowest rate a throttle reported with Observe may lower the
	// rate in force to (raised to the lowest rate that can refuse),
	// 1..RatePerMinute. 0 (the default) is off: the
	// rate in force stays RatePerMinute.
	AdaptiveFloorPerMin int
	// AdaptiveCeilingPerMin is the highest rate the rate in force may
	// reach (searching or probing), RatePerMinute..600; 0 means RatePerMinute. It must
	// be 0..600 even when adaptation is off (it is then ignored).
	AdaptiveCeilingPerMin int

	// Clock is the monotonic clock Admit and Admission.Release read, in
	// milliseconds; nil means MonotonicMs.
	Clock func() uint64
	// Sleep waits d or until ctx is done, returning ctx.Err() then; nil
	// means a time.Timer raced against ctx.Done().
	Sleep func(ctx context.Context, d time.Duration) error
	// Notifier logs the pacer's own notice (pacing disabled, or overflow
	// shaped rather than refused) once per key; nil means DefaultNotifier.
	Notifier *Notifier
}

// DefaultConfig is SPEC §2's defaults: 60/minute, burst 10, idle timeout
// 120 s, 5 retries, refund policy (wait bound 4833 ms, refusing).
func DefaultConfig() Config {
	return Config{
		RatePerMinute: DefaultRatePerMinute,
		Burst:         DefaultBurst,
		IdleTimeout:   DefaultIdleTimeout,
		MaxRetries:    DefaultMaxRetries,
		ReleasePolicy: ReleaseRefund,
	}
}

// validate checks every field and converts it for pacer_init.
func (c Config) validate() (cConfig, error) {
	if c.RatePerMinute < 0 || c.RatePerMinute > MaxRatePerMinute {
		return cConfig{}, configError("RatePerMinute", c.RatePerMinute, "must be between 0 and 600")
	}
	if c.Burst < 0 || c.Burst > MaxBurst {
		return cConfig{}, configError("Burst", c.Burst, "must be between 0 and 1000000")
	}
	if c.IdleTimeout < 0 {
		return cConfig{}, configError("IdleTimeout", c.IdleTimeout, "must not be negative")
	}
	if c.IdleTimeout%time.Millisecond != 0 {
		return cConfig{}, configError("IdleTimeout", c.IdleTimeout, "must be a whole number of milliseconds")
	}
	idleMs := uint64(c.IdleTimeout / time.Millisecond)
	ceiling := LadderCeiling(idleMs)
	if c.MaxRetries < 0 || uint64(c.MaxRetries) > uint64(ceiling) {
		return cConfig{}, configError("MaxRetries", c.MaxRetries,
			"must be between 0 and the idle timeout's ladder ceiling "+strconv.FormatUint(uint64(ceiling), 10))
	}
	if c.ReleasePolicy != ReleaseRefund && c.ReleasePolicy != ReleaseStrict {
		return cConfig{}, configError("ReleasePolicy", uint32(c.ReleasePolicy), "must be ReleaseRefund or ReleaseStrict")
	}
	if c.AdaptiveFloorPerMin < 0 || c.AdaptiveFloorPerMin > c.RatePerMinute {
		return cConfig{}, configError("AdaptiveFloorPerMin", c.AdaptiveFloorPerMin,
			"must be between 0 (adaptation off) and RatePerMinute "+strconv.Itoa(c.RatePerMinute))
	}
	if c.AdaptiveCeilingPerMin < 0 || c.AdaptiveCeilingPerMin > MaxRatePerMinute {
		return cConfig{}, configError("AdaptiveCeilingPerMin", c.AdaptiveCeilingPerMin,
			"must be 0 (the rate) or between RatePerMinute and 600")
	}
	if c.AdaptiveFloorPerMin > 0 && c.AdaptiveCeilingPerMin != 0 && c.AdaptiveCeilingPerMin < c.RatePerMinute {
		return cConfig{}, configError("AdaptiveCeilingPerMin", c.AdaptiveCeilingPerMin,
			"must be 0 (the rate) or between RatePerMinute "+strconv.Itoa(c.RatePerMinute)+" and 600")
	}
	return cConfig{
		rate:    uint32(c.RatePerMinute),
		burst:   uint32(c.Burst),
		idle:    idleMs,
		retries: uint32(c.MaxRetries),
		policy:  uint32(c.ReleasePolicy),
		floor:   uint32(c.AdaptiveFloorPerMin),
		ceiling: uint32(c.AdaptiveCeilingPerMin),
	}, nil
}

var processStart = time.Now()

// MonotonicMs is the default clock: whole milliseconds on the monotonic
// clock since the package was loaded.
func MonotonicMs() uint64 {
	d := time.Since(processStart)
	if d < 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

// timerSleep waits d on a timer, or until ctx is done.
func timerSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pacer decides whether a new upstream connection may open now, after a
// bounded wait, or must be refused. It is safe for concurrent use: Reserve
// and Release are lock-free in the core and take no lock in Go either. Its
// state lives in C-allocated memory, freed once the Pacer is unreachable
// (Close only marks it closed, so no call can ever use freed memory).
type Pacer struct {
	// mem is set once by attach and freed only by the cleanup attached to
	// the Pacer: every call reads it while holding p (runtime.KeepAlive
	// after the C call), so it is live for the whole call.
	mem    *storage
	closed atomic.Bool // set by Close; calls then return ErrClosed
	id     uint64      // names the Pacer in its tickets (0: not made by New)
	// life is cancelled by Close: it wakes every Admit still waiting, which
	// then refunds its slot (await).
	life    context.Context
	endLife context.CancelFunc

	cfg      Config
	clock    func() uint64
	sleep    func(ctx context.Context, d time.Duration) error
	notifier *Notifier
	mode     Mode
	boundMs  uint64

	keyed keyedBookings // AdmitKey's requests refused so far

	// tickets is where the Pacer's tickets are carved from; last, away
	// from the fields every call reads, as its stripes are written.
	tickets ticketCache
}

// newPacer is a Pacer of cfg reading clock, with cfg's sleep and notifier
// or their defaults; its storage is attached after (attach).
func newPacer(cfg Config, clock func() uint64) *Pacer {
	p := &Pacer{cfg: cfg, clock: clock, sleep: cfg.Sleep, notifier: cfg.Notifier}
	p.life, p.endLife = context.WithCancel(context.Background())
	if p.sleep == nil {
		p.sleep = timerSleep
	}
	if p.notifier == nil {
		p.notifier = DefaultNotifier
	}
	return p
}

// New validates cfg and builds a pacer, full (burst tokens available) at
// cfg.Clock(). A bad field returns an error wrapping ErrInvalidConfig (a
// *FieldError naming the field); nothing is allocated or logged then.
func New(cfg Config) (*Pacer, error) {
	if err := checkABI(); err != nil {
		return nil, err
	}
	cc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	clock := cfg.Clock
	if clock == nil {
		clock = MonotonicMs
	}
	p := newPacer(cfg, clock)
	mem, err := allocStorage()
	if err != nil {
		return nil, err
	}
	if err := mem.init(cc, p.clock()); err != nil {
		mem.free()
		return nil, err
	}
	if err := p.attach(mem, cc); err != nil {
		return nil, err
	}
	return p, nil
}

// attach makes mem, an initialised pacer, p's storage: reads its mode and
// bound, frees it when p is collected, and reports the configuration's
// mode notice. On error mem is freed and p is unchanged.
func (p *Pacer) attach(mem *storage, cc cConfig) error {
	info, err := mem.info()
	if err != nil {
		mem.free()
		return err
	}
	p.mem = mem
	p.id = pacerIDs.Add(1)
	p.mode = info.Mode
	p.boundMs = info.WaitBoundMs
	runtime.AddCleanup(p, func(s *storage) { s.free() }, mem)
	if notice, ok, err := modeNotice(cc); err == nil && ok {
		p.notifier.Notify(notice)
	}
	return nil
}

// enter reports whether p may call into its storage: false for a closed
// pacer, a nil one, or one not made by New. It takes no lock: the storage
// stays allocated while the caller holds p, so a Close racing the call
// cannot free it underneath (the caller ends with runtime.KeepAlive(p)).
func (p *Pacer) enter() bool {
	return p.attached() && !p.closed.Load()
}

// attached reports whether p has storage (made by New or OpenShared),
// closed or not. Releases need only this: the storage is freed by the
// cleanup alone, never by Close, so refunding a ticket issued before Close
// is as safe after it as before.
func (p *Pacer) attached() bool { return p != nil && p.mem != nil }

// Close closes the pacer: calls that start after Close and would admit or
// read return ErrClosed (one already running may still complete), and
// every Admit or AdmitKey waiting for its slot wakes, refunds the slot and
// returns ErrClosed (or ctx.Err() when its own context ended first).
// Releases keep working: Release, Admission.Release and Forget still refund
// tickets issued before Close. Close is idempotent and never waits. The C
// storage is freed once the Pacer is unreachable (runtime.AddCleanup; an
// Admission refers to its Pacer, a Ticket does not): calls take no lock,
// so only the collector knows that none is still running.
func (p *Pacer) Close() error {
	if p != nil {
		p.closed.Store(true)
		if p.endLife != nil {
			p.endLife()
		}
	}
	return nil
}

// Config is the configuration the pacer was built with.
func (p *Pacer) Config() Config { return p.cfg }

// Mode is how the pacer treats overflow.
func (p *Pacer) Mode() Mode { return p.mode }

// WaitBoundMs is the longest wait an admission is given, ms.
func (p *Pacer) WaitBoundMs() uint64 { return p.boundMs }

// Decision is Reserve's answer.
type Decision struct {
	// Admitted: open the connection after WaitMs. Otherwise refused: answer
	// with a retryable rate limit carrying RetryAfterSeconds.
	Admitted bool
	// Path is the rule that admitted (PathNone for a refusal).
	Path Path
	// WaitMs is how long to wait before opening, ms (admitted).
	WaitMs uint64
	// Queued is WaitMs > 0.
	Queued bool
	// Ticket refunds the admission if the connection will not be opened;
	// nil when nothing was debited.
	Ticket *Ticket
	// RequiredWaitMs is the wait the rate would need, ms (refused).
	RequiredWaitMs uint64
	// RetryAfterSeconds is the hint for the client (refused).
	RetryAfterSeconds uint64
	// ClockRegressed: nowMs was behind the latest reading and was treated
	// as it (SPEC §5).
	ClockRegressed bool
}

// Wait is WaitMs as a time.Duration (saturating).
func (d Decision) Wait() time.Duration { return msDuration(d.WaitMs) }

func msDuration(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// Reserve decides at nowMs (the caller's monotonic clock in milliseconds;
// any uint64, including math.MaxUint64) without waiting. The caller waits
// Decision.WaitMs itself and releases Decision.Ticket if it will not open
// the connection. Safe for concurrent use.
func (p *Pacer) Reserve(nowMs uint64) (d Decision, err error) {
	if !p.enter() {
		return Decision{}, ErrClosed
	}
	err = p.mem.reserve(nowMs, p, &d)
	runtime.KeepAlive(p)
	return d, err
}

// Release refunds an admission that will not open its connection, at
// nowMs. It reports whether the policy refunded it; a nil ticket, a ticket
// already released or one from another pacer reports false and changes
// nothing. It works after Close too (a closed pacer's slots still come
// back); only a nil Pacer or one not made by New returns ErrClosed.
func (p *Pacer) Release(t *Ticket, nowMs uint64) (bool, error) {
	if !p.attached() {
		return false, ErrClosed
	}
	if t == nil || !p.issued(t) {
		return false, nil
	}
	if !t.spent.CompareAndSwap(false, true) {
		return false, nil
	}
	refunded, err := p.mem.release(t.seq, t.debitUnits, t.tag, nowMs)
	runtime.KeepAlive(p)
	return refunded, err
}

// Admission is a granted request: open the connection now. If it will not
// be opened after all, call Release.
type Admission struct {
	// Wait is the wait the pacer granted.
	Wait time.Duration
	// Waited is how long Admit waited, by the pacer's clock.
	Waited time.Duration
	// Queued is Wait > 0.
	Queued bool
	// Path is the rule that admitted.
	Path Path
	// Ticket is the refund right (nil when nothing was debited).
	Ticket *Ticket

	pacer *Pacer
}

// Release gives the admission's slot back (the connection will not be
// opened). It reports whether the policy refunded it; only the first call
// on an admission (or any copy of it) can.
func (a Admission) Release() bool {
	if a.pacer == nil || a.Ticket == nil {
		return false
	}
	refunded, err := a.pacer.Release(a.Ticket, a.pacer.clock())
	return err == nil && refunded
}

// admitReady is the check Admit and AdmitKey make first: a non-nil ctx
// not done yet, on a pacer made by New or OpenShared.
func (p *Pacer) admitReady(ctx context.Context) error {
	if ctx == nil {
		return inputError("ctx", nil, "must not be nil")
	}
	if p == nil || p.clock == nil {
		return ErrClosed
	}
	return ctx.Err()
}

// Admit waits for permission to open one new connection. It reserves at
// the pacer's clock and, when queued, sleeps until the granted time or
// until ctx is done or the pacer is closed. A refusal returns a
// *RefusedError (errors.Is ErrRefused). If ctx is done before admission,
// the slot is refunded and ctx.Err() returned; if the pacer is closed
// during the wait (and ctx is not done), the slot is refunded and
// ErrClosed returned.
func (p *Pacer) Admit(ctx context.Context) (Admission, error) {
	if err := p.admitReady(ctx); err != nil {
		return Admission{}, err
	}
	start := p.clock()
	d, err := p.Reserve(start)
	if err != nil {
		return Admission{}, err
	}
	if !d.Admitted {
		return Admission{}, &RefusedError{RequiredWaitMs: d.RequiredWaitMs, RetryAfterSeconds: d.RetryAfterSeconds}
	}
	return p.await(ctx, start, &d)
}

// await turns an admitted decision made at start into an Admission,
// sleeping when it is queued. If the sleep ends early, the slot is
// refunded and the reason returned: ctx.Err() when ctx is done (the
// caller's own cancellation comes first), ErrClosed when Close woke it,
// else the Sleep hook's error. (d is a pointer, and the unqueued answer a
// literal, so no whole Decision or Admission is copied on the way: wide
// copies of fields just written stall the processor.)
func (p *Pacer) await(ctx context.Context, start uint64, d *Decision) (Admission, error) {
	if !d.Queued {
		return Admission{Wait: d.Wait(), Path: d.Path, Ticket: d.Ticket, pacer: p}, nil
	}
	a := Admission{Wait: d.Wait(), Queued: true, Path: d.Path, Ticket: d.Ticket, pacer: p}
	// The sleep also ends when Close ends the pacer's life (at once if
	// Close already ran: AfterFunc then calls at once).
	sleepCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(p.life, func() { cancel(ErrClosed) })
	err := p.sleep(sleepCtx, a.Wait)
	stop()
	cancel(nil)
	if err != nil {
		// A cancelled request opens no connection: give the slot back
		// (Release works on a closed pacer too).
		_, _ = p.Release(d.Ticket, p.clock())
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Admission{}, ctxErr
		}
		if errors.Is(context.Cause(sleepCtx), ErrClosed) {
			return Admission{}, ErrClosed
		}
		return Admission{}, err
	}
	if end := p.clock(); end > start {
		a.Waited = msDuration(end - start)
	}
	return a, nil
}

// Observe reports what the upstream answered to a new connection at nowMs
// (adaptive pacing, SPEC §14) and returns the rate in force after it, new
// connections per minute. OutcomeOpened is counted (per minute of the
// clock). OutcomeThrottled (the upstream's own rate limit) sets the rate to
// what got through (L: the count, at most the ceiling, when it ends the
// search or is below the rate in force; else the rate in force less 1/16),
// unless a throttle less than a minute before already did: then it changes
// nothing. Before the first throttle the rate doubles every 5 s up to the
// ceiling (the first throttle pauses at the lowest rate until a minute
// after the start); after one it holds at L, then now and then probes a
// step above it; a minute's count well above L searches again. It stays within the floor (raised to the lowest rate that can
// refuse) and the ceiling; Reserve refills at it. With adaptation off it changes nothing and returns
// RatePerMinute. Any other outcome returns ErrInvalidInput and changes
// nothing. Safe for concurrent use.
func (p *Pacer) Observe(outcome Outcome, nowMs uint64) (int, error) {
	if err := checkOutcome(outcome); err != nil {
		return 0, err
	}
	return onStorage(p, func(s *storage) (int, error) { return s.observe(outcome, nowMs) })
}

// RateInForce is the rate Reserve decides at, at nowMs, new connections
// per minute (SPEC §14): RatePerMinute unless adaptation is on. It reads
// only.
func (p *Pacer) RateInForce(nowMs uint64) (int, error) {
	return onStorage(p, func(s *storage) (int, error) { return s.rateInForce(nowMs) })
}

// Counters are what a pacer decided so far, the counts the metric set is
// derived from (docs/metrics.md). Each count wraps at 2^64.
type Counters struct {
	Admitted          uint64 // admissions by any path
	AdmittedAfterWait uint64 // admissions with a wait
	Refused           uint64 // refusals (a booking and a redemption's "not yet" included)
	Booked            uint64 // refusals that booked a place in line
	Redeemed          uint64 // admissions of a booking presented on its retry (PathBooked)
	Shaped            uint64 // admissions by the shaping rule
	Released          uint64 // releases of a live ticket
	Refunded          uint64 // releases refunded
	ClockRegressions  uint64 // calls whose clock was behind the latest reading
	Opened            uint64 // upstream answers reported OutcomeOpened (Observe)
	Throttled         uint64 // upstream answers reported OutcomeThrottled (Observe)
	WaitMsTotal       uint64 // the admissions' waits summed, ms
	// WaitBuckets[i] counts the admissions whose wait was above
	// WaitBoundsMs()[i-1] (0 for i = 0) and at most WaitBoundsMs()[i];
	// immediate admissions are in none, nor waits above the last bound.
	WaitBuckets [WaitBuckets]uint64
}

// WaitLe is how many admissions waited at most WaitBoundsMs()[i], the
// immediate ones included: the wait histogram's cumulative count at that
// bound (Admitted − AdmittedAfterWait + WaitBuckets[0] + … +
// WaitBuckets[i], wrapping like the counts). i must be below WaitBuckets.
func (c Counters) WaitLe(i int) uint64 {
	n := c.Admitted - c.AdmittedAfterWait
	for _, count := range c.WaitBuckets[:i+1] {
		n += count
	}
	return n
}

// Counters reads every count the pacer keeps (each read independently).
func (p *Pacer) Counters() (Counters, error) {
	return onStorage(p, (*storage).counters)
}

// LevelAt is the tokens in the bucket at nowMs, in units (UnitsPerToken a
// token; negative: the debt of admissions still waiting): the state
// refilled at the rate in force up to nowMs, capped at the burst. A nowMs
// behind the latest reading reads at that reading. It reads only.
func (p *Pacer) LevelAt(nowMs uint64) (int64, error) {
	return onStorage(p, func(s *storage) (int64, error) { return s.levelAt(nowMs) })
}

// Info is a pacer's derived parameters and current state.
type Info struct {
	Mode          Mode
	ReleasePolicy ReleasePolicy
	WaitBoundMs   uint64 // longest wait granted, ms
	CapacityUnits int64  // capacity (burst) in units
	MaxDebtUnits  int64  // debt floor in units
	HighWaterMs   uint64 // latest clock reading that changed the state
	TokensUnits   int64  // tokens at HighWaterMs, in units (may be negative)
}

// Info reads the pacer's derived parameters and current state.
func (p *Pacer) Info() (Info, error) {
	return onStorage(p, (*storage).info)
}

// onStorage is op on p's storage, or ErrClosed for a nil, closed or
// unattached Pacer; p is kept alive until op returns.
func onStorage[T any](p *Pacer, op func(*storage) (T, error)) (T, error) {
	if !p.enter() {
		var zero T
		return zero, ErrClosed
	}
	v, err := op(p.mem)
	runtime.KeepAlive(p)
	return v, err
}
