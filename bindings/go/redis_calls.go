package pacer

// RedisPacer's calls: the Pacer's methods and answers, each decided by the
// server (or, while Redis fails, by the failure policy).

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RedisTicket is the right to refund one admission's debit: the server's
// ticket string and the key it belongs to, or, for an admission the local
// fallback pacer issued, that pacer's ticket (released to it, never to
// Redis). It is released at most once.
type RedisTicket struct {
	// Key is the bucket's key ("" for a fallback ticket).
	Key string
	// Value is the server's ticket (docs/redis.md, "Tickets"); "" for a
	// fallback ticket.
	Value string

	local *Ticket
	spent atomic.Bool
}

// Fallback reports whether the local fallback pacer issued the ticket.
func (t *RedisTicket) Fallback() bool { return t != nil && t.local != nil }

// Spent reports whether the ticket was released (or, for a booking's
// ticket, redeemed or released).
func (t *RedisTicket) Spent() bool { return t != nil && t.spent.Load() }

// RedisDecision is RedisPacer.Reserve's answer, Decision's fields with a
// RedisTicket, plus who decided.
type RedisDecision struct {
	// Admitted: open the connection after WaitMs. Otherwise refused:
	// answer with a retryable rate limit carrying RetryAfterSeconds.
	Admitted bool
	// Path is the rule that admitted (PathNone for a refusal).
	Path Path
	// WaitMs is how long to wait before opening, ms (admitted).
	WaitMs uint64
	// Queued is WaitMs > 0.
	Queued bool
	// Ticket refunds the admission if the connection will not be opened;
	// nil when nothing was debited.
	Ticket *RedisTicket
	// RequiredWaitMs is the wait the rate would need, ms (a refusal by
	// the bucket; 0 for a booking or a redeem the server answered
	// "not yet", whose replies do not carry it).
	RequiredWaitMs uint64
	// RetryAfterSeconds is the hint for the client (refused).
	RetryAfterSeconds uint64
	// ClockRegressed: the server's clock read behind the bucket's
	// high-water mark and was treated as it (SPEC §5).
	ClockRegressed bool
	// Fallback is the failure policy that decided while Redis failed
	// (FailLocal, FailOpen, FailClosed); "" when Redis decided (or pacing
	// is disabled and nothing was asked).
	Fallback FailurePolicy
}

// Wait is WaitMs as a time.Duration (saturating).
func (d RedisDecision) Wait() time.Duration { return msDuration(d.WaitMs) }

// RedisBooking is a place in the bucket's line (SPEC §11): one token
// debited when it was booked, for a connection that may open at SlotMs.
// Redeem it on the request's retry, or release Ticket if the request ends
// without redeeming it.
type RedisBooking struct {
	// Key is the bucket's key ("" for a fallback booking).
	Key string
	// Value is the server's booking string; "" for a fallback booking.
	Value string
	// SlotMs is when the connection may open: ms on the server's clock (on
	// the fallback pacer's clock for a fallback booking).
	SlotMs uint64
	// Ticket is the booked token's refund right until the booking is
	// redeemed: Redeem spends it, and the admission carries the ticket the
	// server's reply gives.
	Ticket *RedisTicket

	local    *Booking
	redeemed atomic.Bool
}

// Fallback reports whether the local fallback pacer made the booking.
func (b *RedisBooking) Fallback() bool { return b != nil && b.local != nil }

// RedisBookingDecision is ReserveOrBook's answer: the embedded decision,
// and for a refusal that booked a place in line, the booking.
type RedisBookingDecision struct {
	RedisDecision
	// Booking is set when the refusal holds a place in line.
	Booking *RedisBooking
}

// Booked reports whether the refusal holds a place in line.
func (d RedisBookingDecision) Booked() bool { return d.Booking != nil }

// RedisAdmission is a granted request: open the connection now. If it
// will not be opened after all, call Release.
type RedisAdmission struct {
	// Wait is the wait the bucket granted.
	Wait time.Duration
	// Waited is how long Admit waited.
	Waited time.Duration
	// Queued is Wait > 0.
	Queued bool
	// Path is the rule that admitted.
	Path Path
	// Ticket is the refund right (nil when nothing was debited).
	Ticket *RedisTicket
	// Fallback is the failure policy that admitted; "" when Redis did.
	Fallback FailurePolicy

	pacer *RedisPacer
}

// Release gives the admission's slot back (the connection will not be
// opened): see RedisPacer.Release.
func (a RedisAdmission) Release(ctx context.Context) (bool, error) {
	if a.pacer == nil || a.Ticket == nil {
		return false, nil
	}
	return a.pacer.Release(ctx, a.Ticket)
}

// guarded runs call for one of r's exported methods. A nil ctx is an
// ErrInvalidInput error, then check's error (when check is not nil); a
// pacer not made by OpenRedis is ErrClosed, and so is a closed one unless
// release (a release works after Close too: see enterRelease). Close
// waits for call when it started before Close.
func guarded[T any](ctx context.Context, r *RedisPacer, release bool, check func() error, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if ctx == nil {
		return zero, inputError("ctx", nil, "must not be nil")
	}
	if check != nil {
		if err := check(); err != nil {
			return zero, err
		}
	}
	tracked, ok := r.enterRelease()
	if !ok || !tracked && !release {
		return zero, ErrClosed
	}
	if tracked {
		defer r.running.Done()
	}
	return call(ctx)
}

// configArgs is the command's configuration arguments, then extra, then
// ADAPT floor ceiling when adaptation is on (docs/redis.md: after BOOK's
// retries_left).
func (r *RedisPacer) configArgs(extra ...any) []any {
	out := make([]any, 0, len(r.args)+len(extra)+len(r.adapt))
	return append(append(append(out, r.args...), extra...), r.adapt...)
}

// Reserve asks the bucket for one new connection, without waiting: the
// caller waits Decision.WaitMs itself and releases Decision.Ticket if it
// will not open the connection. The server's clock decides. While Redis
// fails, the failure policy answers (Decision.Fallback says which). A
// pacer error (a configuration other than the bucket's) or WRONGTYPE is a
// *RedisError. A ctx that ends first returns ctx.Err() at once; a request
// already sent is read to its reply (within Timeout) and the ticket or
// booking the reply carries is released (so for ReserveOrBook and Redeem).
func (r *RedisPacer) Reserve(ctx context.Context) (RedisDecision, error) {
	return guarded(ctx, r, false, nil, r.reserve)
}

func (r *RedisPacer) reserve(ctx context.Context) (RedisDecision, error) {
	if r.mode == ModeDisabled {
		return r.counted(RedisDecision{Admitted: true, Path: PathDisabled}, nil, nil)
	}
	reply, err := r.run(ctx, "reserve", r.releaseLate("reserve"), r.configArgs()...)
	if err != nil {
		if isFailure(err) {
			return r.counted(r.byPolicy(false, 0))
		}
		return RedisDecision{}, err
	}
	return r.counted(r.parseAdmission("reserve", reply))
}

// counted counts an answer (d, holding booking b when it booked) that
// the caller gets, unless err; it returns d and err.
func (r *RedisPacer) counted(d RedisDecision, b *RedisBooking, err error) (RedisDecision, error) {
	if err == nil {
		r.counts.decision(d, b != nil)
	}
	return d, err
}

// ReserveOrBook is Reserve, except that a refusal within the horizon of
// the request's retriesLeft retries books a place in the bucket's line
// (SPEC §11): refused with RetryAfterSeconds, and Booking set. Redeem the
// booking on the retry, or release Booking.Ticket if the request ends
// without redeeming it. Beyond the horizon it is a plain refusal.
func (r *RedisPacer) ReserveOrBook(ctx context.Context, retriesLeft uint32) (RedisBookingDecision, error) {
	return guarded(ctx, r, false, nil, func(ctx context.Context) (RedisBookingDecision, error) {
		return r.reserveOrBook(ctx, retriesLeft)
	})
}

func (r *RedisPacer) reserveOrBook(ctx context.Context, retriesLeft uint32) (RedisBookingDecision, error) {
	if r.mode == ModeDisabled {
		return r.countedBooking(RedisDecision{Admitted: true, Path: PathDisabled}, nil, nil)
	}
	reply, err := r.run(ctx, "book", r.releaseLate("book"), r.configArgs(strconv.FormatUint(uint64(retriesLeft), 10))...)
	if err != nil {
		if isFailure(err) {
			return r.countedBooking(r.byPolicy(true, retriesLeft))
		}
		return RedisBookingDecision{}, err
	}
	return r.countedBooking(r.parseAdmission("book", reply))
}

// countedBooking is counted's answer as a RedisBookingDecision.
func (r *RedisPacer) countedBooking(d RedisDecision, b *RedisBooking, err error) (RedisBookingDecision, error) {
	d, err = r.counted(d, b, err)
	return RedisBookingDecision{RedisDecision: d, Booking: b}, err
}

// Redeem presents a booking on the request's retry. The server's answer
// changes nothing in the bucket (only its counters): admitted with Path
// PathBooked after a wait within the bound, the booking spent (its Ticket
// then reports Spent and a Release of it refunds nothing) and the
// decision's Ticket the one the server's reply carries; or not yet, with
// the next hint, the booking kept. A
// fallback booking is redeemed by the fallback pacer that made it. While
// Redis fails, a Redis booking is answered by the failure policy as a
// Reserve would be (its token in Redis is not refunded: it passes with
// its slot). A booking already redeemed or released returns
// ErrBookingSpent; the server's errors are *RedisError.
func (r *RedisPacer) Redeem(ctx context.Context, b *RedisBooking) (RedisDecision, error) {
	return guarded(ctx, r, false, nil, func(ctx context.Context) (RedisDecision, error) {
		return r.redeem(ctx, b)
	})
}

func (r *RedisPacer) redeem(ctx context.Context, b *RedisBooking) (RedisDecision, error) {
	switch {
	case b == nil || b.Ticket == nil:
		return RedisDecision{}, inputError("booking", nil, "must be a booking from ReserveOrBook")
	case b.redeemed.Load() || b.Ticket.Spent():
		return RedisDecision{}, ErrBookingSpent
	}
	if b.local != nil {
		local := r.issuedLocally()
		if local == nil {
			return RedisDecision{}, inputError("booking", b, "must come from this pacer's ReserveOrBook")
		}
		d, err := local.Redeem(b.local, local.clock())
		if err != nil {
			return RedisDecision{}, err
		}
		out := fromLocal(d)
		if d.Admitted {
			b.spend()
		}
		return r.counted(out, nil, nil)
	}
	if b.Key != r.key {
		return RedisDecision{}, inputError("booking", b.Key, "must belong to this pacer's key "+strconv.Quote(r.key))
	}
	// A redemption the server admitted after the caller left spent the
	// booking: its admission's ticket is released.
	late := func(reply any, err error) {
		if err != nil {
			return
		}
		if d, err := r.parseRedeem(reply); err == nil && d.Admitted {
			b.spend()
			_, _, _ = r.giveBack(context.WithoutCancel(ctx), d.Ticket)
		}
	}
	reply, err := r.run(ctx, "redeem", late, b.Value)
	if err != nil {
		if isFailure(err) {
			return r.counted(r.byPolicy(false, 0))
		}
		return RedisDecision{}, err
	}
	d, err := r.parseRedeem(reply)
	if err != nil || !d.Admitted {
		return r.counted(d, nil, err)
	}
	if !b.spend() {
		return RedisDecision{}, ErrBookingSpent
	}
	return r.counted(d, nil, nil)
}

// spend marks the booking redeemed and its ticket spent (the server spent
// the booking); false when it was already redeemed.
func (b *RedisBooking) spend() bool {
	if !b.redeemed.CompareAndSwap(false, true) {
		return false
	}
	b.Ticket.spent.Store(true)
	return true
}

// parseRedeem reads a redeem reply: admitted, with the ticket the reply
// carries (item 3: the redemption spent the booking), or not yet.
func (r *RedisPacer) parseRedeem(reply any) (RedisDecision, error) {
	items, _ := reply.([]any)
	switch {
	case len(items) >= 5 && str(items[0]) == "admitted":
		wait, okWait := whole(items[1])
		text, okText := items[2].(string)
		regressed, okFlag := flag(items[4])
		if okWait && okText && text != "" && okFlag && named(pathNames, str(items[3]), PathNone) == PathBooked {
			return RedisDecision{
				Admitted: true, Path: PathBooked, WaitMs: wait, Queued: wait > 0,
				Ticket: &RedisTicket{Key: r.key, Value: text}, ClockRegressed: regressed,
			}, nil
		}
	case len(items) >= 3 && str(items[0]) == "notyet":
		if hint, ok := whole(items[1]); ok {
			return RedisDecision{RetryAfterSeconds: hint}, nil
		}
	}
	return RedisDecision{}, badReply("redeem", reply)
}

// Release refunds an admission (or a booking's token) that will not open
// its connection. It reports whether the release policy refunded it; a
// nil or spent ticket reports false and changes nothing. A fallback
// ticket goes back to the local pacer that issued it; a Redis ticket to
// the bucket (PACER.RELEASE). While Redis fails a Redis ticket cannot be
// released: false with no error (the outage has its notice), and the
// ticket stays unspent so a later Release may refund it; unreleased, its
// debit passes with time. It works after Close too when the client is
// still open (see Close).
func (r *RedisPacer) Release(ctx context.Context, t *RedisTicket) (bool, error) {
	return guarded(ctx, r, true, nil, func(ctx context.Context) (bool, error) {
		return r.release(ctx, t)
	})
}

// release is giveBack, counted when the release reached the bucket or
// the fallback pacer.
func (r *RedisPacer) release(ctx context.Context, t *RedisTicket) (bool, error) {
	refunded, reached, err := r.giveBack(ctx, t)
	if reached {
		r.counts.release(refunded)
	}
	return refunded, err
}

// giveBack releases t (see Release), uncounted; reached reports whether
// the release reached the bucket or the fallback pacer (an answer came).
func (r *RedisPacer) giveBack(ctx context.Context, t *RedisTicket) (refunded, reached bool, err error) {
	if t == nil {
		return false, false, nil
	}
	if t.local != nil {
		local := r.issuedLocally()
		if local == nil || !t.spent.CompareAndSwap(false, true) {
			return false, false, nil
		}
		refunded, err := local.Release(t.local, local.clock())
		return refunded, err == nil, err
	}
	if t.Key != r.key {
		return false, false, inputError("ticket", t.Key, "must belong to this pacer's key "+strconv.Quote(r.key))
	}
	if !t.spent.CompareAndSwap(false, true) {
		return false, false, nil
	}
	// A release whose outcome is unknown (not sent, or no reply) leaves
	// the ticket unspent: it may be tried again.
	unknown := func(err error) {
		if err != nil && !isPacerError(err) {
			t.spent.Store(false)
		}
	}
	reply, err := r.run(ctx, "release", func(_ any, err error) { unknown(err) }, t.Value)
	if err != nil {
		switch {
		case isFailure(err):
			unknown(err)
			return false, false, nil
		case errors.Is(err, ErrClosed):
			unknown(err)
		}
		return false, false, err // a pacer error, or the caller's ctx (the late call settles the ticket)
	}
	answer, ok := reply.(int64)
	if !ok {
		return false, false, badReply("release", reply)
	}
	return answer == 1, true, nil
}

// Admit waits for permission to open one new connection: Reserve, then,
// when queued, a sleep until the granted time or until ctx is done or the
// pacer is closed. A refusal returns a *RefusedError (ErrRefused; its
// Fallback says when the policy refused). If ctx is done during the round
// trip (see Reserve) or the wait, the ticket is released and ctx.Err()
// returned; if the pacer is closed during the wait, the ticket is released
// and ErrClosed returned.
func (r *RedisPacer) Admit(ctx context.Context) (RedisAdmission, error) {
	return r.admit(ctx, func(ctx context.Context) (RedisDecision, bool, error) {
		d, err := r.reserve(ctx)
		return d, false, err
	})
}

// admit is Admit and AdmitKey around their attempt: a ctx already done
// returns its error; a refusal is a *RefusedError (Booked when the attempt
// booked a place); an admission is awaited.
func (r *RedisPacer) admit(ctx context.Context, attempt func(context.Context) (RedisDecision, bool, error)) (RedisAdmission, error) {
	ended := func() error { return ctx.Err() }
	return guarded(ctx, r, false, ended, func(ctx context.Context) (RedisAdmission, error) {
		start := r.clock()
		d, booked, err := attempt(ctx)
		if err != nil {
			return RedisAdmission{}, err
		}
		if !d.Admitted {
			return RedisAdmission{}, refusedError(d, booked)
		}
		return r.await(ctx, start, d)
	})
}

func refusedError(d RedisDecision, booked bool) error {
	return &RefusedError{
		RequiredWaitMs: d.RequiredWaitMs, RetryAfterSeconds: d.RetryAfterSeconds,
		Booked: booked, Fallback: d.Fallback,
	}
}

// await turns an admitted decision into an admission, sleeping when it is
// queued; a sleep ended early, or a ctx that ended as the decision came,
// releases the ticket.
func (r *RedisPacer) await(ctx context.Context, start uint64, d RedisDecision) (RedisAdmission, error) {
	a := RedisAdmission{
		Wait: d.Wait(), Queued: d.Queued, Path: d.Path, Ticket: d.Ticket, Fallback: d.Fallback, pacer: r,
	}
	err := ctx.Err() // a decision that came as ctx ended is not used
	closed := false
	if err == nil && d.Queued {
		sleepCtx, cancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(r.life, func() { cancel(ErrClosed) })
		err = r.sleep(sleepCtx, a.Wait)
		stop()
		cancel(nil)
		closed = errors.Is(context.Cause(sleepCtx), ErrClosed)
	}
	if err != nil {
		// A cancelled request opens no connection: give the ticket back,
		// on a context of its own (ctx is done), within Timeout.
		_, _ = r.release(context.WithoutCancel(ctx), d.Ticket)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return RedisAdmission{}, ctxErr
		}
		if closed {
			return RedisAdmission{}, ErrClosed
		}
		return RedisAdmission{}, err
	}
	if end := r.clock(); end > start {
		a.Waited = msDuration(end - start)
	}
	return a, nil
}

// redisKeyed is what AdmitKey remembers of one key: its refused attempts
// and the booking it holds. Its mutex orders the key's own calls.
type redisKeyed struct {
	mu       sync.Mutex
	attempts uint32
	booking  *RedisBooking
	gone     bool // removed from the map: look the key up again
}

// keyEntry is key's entry, locked (created when missing).
func (r *RedisPacer) keyEntry(key string, create bool) *redisKeyed {
	for {
		r.keyedMu.Lock()
		e := r.keyed[key]
		if e == nil {
			if !create {
				r.keyedMu.Unlock()
				return nil
			}
			e = &redisKeyed{}
			r.keyed[key] = e
		}
		r.keyedMu.Unlock()
		e.mu.Lock()
		if !e.gone {
			return e
		}
		e.mu.Unlock()
	}
}

// dropKey removes key's entry e (locked by the caller).
func (r *RedisPacer) dropKey(key string, e *redisKeyed) {
	e.gone = true
	r.keyedMu.Lock()
	if r.keyed[key] == e {
		delete(r.keyed, key)
	}
	r.keyedMu.Unlock()
}

// AdmitKey is Admit for a request that may come back, keyed by its
// identity across the client's retries (as Pacer.AdmitKey): a key holding
// a booking redeems it; otherwise it reserves or books with the retries
// it has left (Config.MaxRetries minus its refused attempts). Every
// refusal is a *RefusedError (Booked when a place is held) and counts an
// attempt; an admitted key is forgotten. Cancellation of ctx during the
// round trip or the wait releases the ticket and returns ctx.Err(); Close
// during the wait releases it and returns ErrClosed. A key that ends without admission must be
// given to Forget.
func (r *RedisPacer) AdmitKey(ctx context.Context, key string) (RedisAdmission, error) {
	return r.admit(ctx, func(ctx context.Context) (RedisDecision, bool, error) {
		return r.attempt(ctx, key)
	})
}

// attempt is one attempt of request key, in order with the key's others.
func (r *RedisPacer) attempt(ctx context.Context, key string) (RedisDecision, bool, error) {
	e := r.keyEntry(key, true)
	defer e.mu.Unlock()
	if e.booking != nil && e.booking.Ticket.Spent() {
		// Redeemed by a call whose caller left (its admission released):
		// the key books again.
		e.booking = nil
	}
	var d RedisDecision
	var err error
	if e.booking != nil {
		d, err = r.redeem(ctx, e.booking)
	} else {
		retriesLeft := uint32(0)
		if maxRetries := uint32(r.cfg.MaxRetries); e.attempts < maxRetries {
			retriesLeft = maxRetries - e.attempts
		}
		var bd RedisBookingDecision
		bd, err = r.reserveOrBook(ctx, retriesLeft)
		d = bd.RedisDecision
		if err == nil && bd.Booking != nil {
			e.booking = bd.Booking
		}
	}
	if err != nil {
		if e.attempts == 0 && e.booking == nil {
			r.dropKey(key, e)
		}
		return RedisDecision{}, false, err
	}
	if d.Admitted {
		r.dropKey(key, e)
		return d, false, nil
	}
	if e.attempts < ^uint32(0) {
		e.attempts++
	}
	return d, e.booking != nil, nil
}

// Forget gives back what the keyed request holds when it ends without
// being admitted: its booking is released (to Redis, or to the fallback
// pacer that made it) and the key is forgotten. It reports whether a
// booking was refunded. While Redis fails the key is forgotten all the
// same and a Redis booking is not refunded (false): its token passes with
// its slot.
func (r *RedisPacer) Forget(ctx context.Context, key string) (bool, error) {
	return guarded(ctx, r, true, nil, func(ctx context.Context) (bool, error) {
		return r.forget(ctx, key)
	})
}

func (r *RedisPacer) forget(ctx context.Context, key string) (bool, error) {
	e := r.keyEntry(key, false)
	if e == nil {
		return false, nil
	}
	defer e.mu.Unlock()
	refunded := false
	if b := e.booking; b != nil && !b.redeemed.Load() {
		var err error
		if refunded, err = r.release(ctx, b.Ticket); err != nil {
			return false, err // a pacer error, the caller's ctx, or Close: the key is kept
		}
	}
	r.dropKey(key, e)
	return refunded, nil
}

// PendingKeys is how many keys AdmitKey refused that were neither
// admitted since nor forgotten.
func (r *RedisPacer) PendingKeys() int {
	if r == nil {
		return 0
	}
	r.keyedMu.Lock()
	defer r.keyedMu.Unlock()
	return len(r.keyed)
}

// Create makes the bucket if the key is missing (PACER.CREATE): true when
// it did, false when the same bucket was there. A configuration other
// than the bucket's is a *RedisError naming both, so a proxy can check its
// configuration at start-up. Optional: the first Reserve creates the
// bucket. No failure policy applies: an outage is a
// *RedisUnavailableError.
func (r *RedisPacer) Create(ctx context.Context) (bool, error) {
	return guarded(ctx, r, false, nil, r.create)
}

func (r *RedisPacer) create(ctx context.Context) (bool, error) {
	reply, err := r.run(ctx, "create", nil, r.configArgs()...)
	if err != nil {
		return false, unavailable("create", err)
	}
	created, ok := reply.(int64)
	if !ok {
		return false, badReply("create", reply)
	}
	return created == 1, nil
}

// RedisInfo is PACER.INFO's answer: the bucket's configuration, derived
// parameters, state and counters (docs/redis.md). One token is
// UnitsPerToken units.
type RedisInfo struct {
	RatePerMinute  uint64
	Burst          uint64
	IdleTimeoutMs  uint64
	MaxRetries     uint64
	ReleasePolicy  ReleasePolicy
	Mode           Mode
	WaitBoundMs    uint64
	CapacityUnits  int64
	MaxDebtUnits   int64
	HighWaterMs    uint64 // the latest server clock reading that changed the state
	TokensUnits    int64  // the stored level at HighWaterMs
	LevelUnits     int64  // the level refilled to NowMs, capped at capacity
	Seq            uint64
	Serial         uint64 // tickets issued
	Admitted       uint64
	Refused        uint64
	Booked         uint64
	Released       uint64 // releases refunded
	ReleaseRefused uint64 // releases the strict policy refused
	NowMs          uint64 // the server's clock at this call

	// Adaptive pacing (SPEC §14). A fixed-rate bucket reads RateInForce
	// = RatePerMinute and 0 for the others. Mode, MaxDebtUnits and
	// LevelUnits are those of the rate in force.
	RateInForce           uint64 // the rate the next decision uses, per minute
	AdaptiveFloorPerMin   uint64
	AdaptiveCeilingPerMin uint64 // as stored: a ceiling of 0 reads as the rate
	OriginMs              uint64 // t₀: the law's origin (creation, last throttle or search), server's clock
	Window                uint64 // the minute the counts belong to, counted from t₀'s
	Opened                uint64 // openings counted in that minute
	OpenedBefore          uint64 // openings counted in the minute before it
	LimitPerMin           uint64 // L: where a search starts, or what got through at the last throttle
	Probing               bool   // probing from L (after a throttle) rather than searching
	Again                 bool   // a search again, or the quick probe after a search

	// The key's second block (key format 2, docs/redis.md "The key"):
	// the counts the core's counters keep, for the whole fleet.
	AdmittedAfterWait uint64              // admissions with a wait above 0
	Shaped            uint64              // admissions by the shaping rule
	Redeemed          uint64              // redemptions that admitted
	UpstreamOpened    uint64              // openings Observe counted (an adaptive bucket's)
	UpstreamThrottled uint64              // throttles Observe counted (within a hold too)
	WaitMsTotal       uint64              // the admissions' waits, summed, ms
	WaitBuckets       [WaitBuckets]uint64 // admissions with a wait in (the bound before, WaitBoundsMs()[i]]
}

// Info reads the bucket (PACER.INFO). No failure policy applies: an
// outage is a *RedisUnavailableError; a missing bucket is a *RedisError.
func (r *RedisPacer) Info(ctx context.Context) (RedisInfo, error) {
	return guarded(ctx, r, false, nil, r.info)
}

func (r *RedisPacer) info(ctx context.Context) (RedisInfo, error) {
	reply, err := r.run(ctx, "info", nil)
	if err != nil {
		return RedisInfo{}, unavailable("info", err)
	}
	items, ok := reply.([]any)
	if !ok || len(items)%2 != 0 {
		return RedisInfo{}, badReply("info", reply)
	}
	var info RedisInfo
	for i := 0; i < len(items); i += 2 {
		name, v := str(items[i]), items[i+1]
		switch name {
		case "rate_per_min":
			info.RatePerMinute = num(v)
		case "burst":
			info.Burst = num(v)
		case "idle_timeout_ms":
			info.IdleTimeoutMs = num(v)
		case "max_retries":
			info.MaxRetries = num(v)
		case "release_policy":
			if str(v) == "strict" {
				info.ReleasePolicy = ReleaseStrict
			}
		case "mode":
			info.Mode = named(modeNames, str(v), ModeDisabled)
		case "wait_bound_ms":
			info.WaitBoundMs = num(v)
		case "capacity_units":
			info.CapacityUnits = signed(v)
		case "max_debt_units":
			info.MaxDebtUnits = signed(v)
		case "high_water_ms":
			info.HighWaterMs = num(v)
		case "tokens_units":
			info.TokensUnits = signed(v)
		case "level_units":
			info.LevelUnits = signed(v)
		case "seq":
			info.Seq = num(v)
		case "serial":
			info.Serial = num(v)
		case "admitted":
			info.Admitted = num(v)
		case "refused":
			info.Refused = num(v)
		case "booked":
			info.Booked = num(v)
		case "released":
			info.Released = num(v)
		case "release_refused":
			info.ReleaseRefused = num(v)
		case "now_ms":
			info.NowMs = num(v)
		case "rate_in_force":
			info.RateInForce = num(v)
		case "adaptive_floor_per_min":
			info.AdaptiveFloorPerMin = num(v)
		case "adaptive_ceiling_per_min":
			info.AdaptiveCeilingPerMin = num(v)
		case "origin_ms":
			info.OriginMs = num(v)
		case "window":
			info.Window = num(v)
		case "opened":
			info.Opened = num(v)
		case "opened_before":
			info.OpenedBefore = num(v)
		case "limit_per_min":
			info.LimitPerMin = num(v)
		case "probing":
			info.Probing = num(v) == 1
		case "again":
			info.Again = num(v) == 1
		case "admitted_after_wait":
			info.AdmittedAfterWait = num(v)
		case "shaped":
			info.Shaped = num(v)
		case "redeemed":
			info.Redeemed = num(v)
		case "upstream_opened":
			info.UpstreamOpened = num(v)
		case "upstream_throttled":
			info.UpstreamThrottled = num(v)
		case "wait_ms_total":
			info.WaitMsTotal = num(v)
		default:
			// wait_bucket_<bound>, for each bound of WaitBoundsMs.
			for i, bound := range waitBoundsMs {
				if name == "wait_bucket_"+strconv.FormatUint(bound, 10) {
					info.WaitBuckets[i] = num(v)
				}
			}
		}
	}
	return info, nil
}

// Observe reports what the upstream answered to a new connection to the
// fleet's bucket (adaptive pacing, SPEC §14): PACER.OBSERVE key
// opened|throttled (the function's and the script's observe op), on the
// server's clock, so a throttle one proxy sees slows the whole fleet. It
// returns the bucket's rate in force after it, per minute (see
// Pacer.Observe for the law). The bucket must exist (the first Reserve or
// Create makes it): a missing key is a *RedisError. With adaptation off
// (Config.AdaptiveFloorPerMin 0), or pacing disabled, nothing is sent and
// it returns RatePerMinute. While Redis fails, FailLocal reports the
// outcome to its fallback pacer and returns that pacer's rate in force;
// FailOpen and FailClosed learn nothing and return RatePerMinute. An
// outcome other than OutcomeOpened or OutcomeThrottled returns
// ErrInvalidInput and sends nothing.
func (r *RedisPacer) Observe(ctx context.Context, outcome Outcome) (int, error) {
	known := func() error { return checkOutcome(outcome) }
	return guarded(ctx, r, false, known, func(ctx context.Context) (int, error) {
		return r.observe(ctx, outcome)
	})
}

func (r *RedisPacer) observe(ctx context.Context, outcome Outcome) (int, error) {
	r.counts.outcome(outcome)
	if r.adapt == nil || r.mode == ModeDisabled {
		return r.cfg.RatePerMinute, nil
	}
	reply, err := r.run(ctx, "observe", nil, outcome.String())
	if err != nil {
		if !isFailure(err) {
			return 0, err
		}
		if r.onFailure != FailLocal {
			return r.cfg.RatePerMinute, nil
		}
		local, err := r.localPacer()
		if err != nil {
			return 0, err
		}
		return local.Observe(outcome, local.clock())
	}
	rate, ok := reply.(int64)
	if !ok || rate < 0 {
		return 0, badReply("observe", reply)
	}
	r.lastRate.Store(rate)
	return int(rate), nil
}

// RateInForce is the bucket's rate in force, per minute: PACER.INFO's
// rate_in_force, on the server's clock. With adaptation off, or pacing
// disabled, nothing is sent and it returns RatePerMinute. As for Info, no
// failure policy applies (an outage is a *RedisUnavailableError) and a
// missing bucket is a *RedisError.
func (r *RedisPacer) RateInForce(ctx context.Context) (int, error) {
	return guarded(ctx, r, false, nil, r.rateInForce)
}

func (r *RedisPacer) rateInForce(ctx context.Context) (int, error) {
	if r.adapt == nil || r.mode == ModeDisabled {
		return r.cfg.RatePerMinute, nil
	}
	info, err := r.info(ctx)
	if err != nil {
		return 0, err
	}
	r.lastRate.Store(int64(info.RateInForce))
	return int(info.RateInForce), nil
}

// LastRateInForce is the bucket's rate in force, per minute, as the
// server last reported it to this RedisPacer (an Observe's or a
// RateInForce's answer), without asking Redis: RatePerMinute before any
// such answer, and always with adaptation off. The metrics package exports
// it as pacer_rate_in_force_per_minute (collection makes no round trip).
func (r *RedisPacer) LastRateInForce() int {
	if r == nil {
		return 0
	}
	return int(r.lastRate.Load())
}

// isFailure reports whether err is a failure of Redis that the policy
// answers.
func isFailure(err error) bool {
	var f *redisFailure
	return errors.As(err, &f)
}

// byPolicy is the failure policy's answer to a reserve (or, with book, a
// reserve-or-book).
func (r *RedisPacer) byPolicy(book bool, retriesLeft uint32) (RedisDecision, *RedisBooking, error) {
	switch r.onFailure {
	case FailOpen:
		return RedisDecision{Admitted: true, Path: PathDisabled, Fallback: FailOpen}, nil, nil
	case FailClosed:
		return RedisDecision{RetryAfterSeconds: r.hintCap, Fallback: FailClosed}, nil, nil
	}
	local, err := r.localPacer()
	if err != nil {
		return RedisDecision{}, nil, err
	}
	now := local.clock()
	if !book {
		d, err := local.Reserve(now)
		if err != nil {
			return RedisDecision{}, nil, err
		}
		return fromLocal(d), nil, nil
	}
	bd, err := local.ReserveOrBook(now, retriesLeft)
	if err != nil {
		return RedisDecision{}, nil, err
	}
	out := fromLocal(bd.Decision)
	if bd.Booking == nil {
		return out, nil, nil
	}
	return out, &RedisBooking{
		SlotMs: bd.Booking.SlotMs,
		Ticket: &RedisTicket{local: bd.Booking.Ticket},
		local:  bd.Booking,
	}, nil
}

// fromLocal is the fallback pacer's decision as a RedisDecision.
func fromLocal(d Decision) RedisDecision {
	out := RedisDecision{
		Admitted: d.Admitted, Path: d.Path, WaitMs: d.WaitMs, Queued: d.Queued,
		RequiredWaitMs: d.RequiredWaitMs, RetryAfterSeconds: d.RetryAfterSeconds,
		ClockRegressed: d.ClockRegressed, Fallback: FailLocal,
	}
	if d.Ticket != nil {
		out.Ticket = &RedisTicket{local: d.Ticket}
	}
	return out
}

// parseAdmission reads a reserve or book reply; a reply of another
// shape is a *RedisError showing it, never an admission.
func (r *RedisPacer) parseAdmission(op string, reply any) (RedisDecision, *RedisBooking, error) {
	items, _ := reply.([]any)
	if len(items) < 4 {
		return RedisDecision{}, nil, badReply(op, reply)
	}
	switch str(items[0]) {
	case "admitted":
		wait, okWait := whole(items[1])
		path := named(pathNames, str(items[3]), PathNone)
		text, isText := items[2].(string)
		if len(items) < 5 || !okWait || path == PathNone || !(isText && text != "" || items[2] == nil) {
			break
		}
		regressed, ok := flag(items[4])
		if !ok {
			break
		}
		d := RedisDecision{Admitted: true, Path: path, WaitMs: wait, Queued: wait > 0, ClockRegressed: regressed}
		if isText {
			d.Ticket = &RedisTicket{Key: r.key, Value: text}
		}
		return d, nil, nil
	case "refused":
		hint, okHint := whole(items[1])
		required, okRequired := whole(items[2])
		regressed, okFlag := flag(items[3])
		if !okHint || !okRequired || !okFlag {
			break
		}
		return RedisDecision{RetryAfterSeconds: hint, RequiredWaitMs: required, ClockRegressed: regressed}, nil, nil
	case "booked":
		if len(items) < 5 {
			break
		}
		hint, okHint := whole(items[1])
		value, _ := items[2].(string)
		slot, okSlot := whole(items[3])
		regressed, okFlag := flag(items[4])
		if !okHint || value == "" || !okSlot || !okFlag {
			break
		}
		d := RedisDecision{RetryAfterSeconds: hint, ClockRegressed: regressed}
		return d, &RedisBooking{
			Key: r.key, Value: value, SlotMs: slot,
			Ticket: &RedisTicket{Key: r.key, Value: value},
		}, nil
	}
	return RedisDecision{}, nil, badReply(op, reply)
}

// releaseLate is the lateReply of a reserve or book: an admission's
// ticket, or a booking's, that came after the caller left is released.
func (r *RedisPacer) releaseLate(op string) lateReply {
	return func(reply any, err error) {
		if err != nil {
			return
		}
		d, b, err := r.parseAdmission(op, reply)
		if err != nil {
			return
		}
		if b != nil {
			d.Ticket = b.Ticket
		}
		_, _, _ = r.giveBack(context.Background(), d.Ticket)
	}
}

// isPacerError reports whether err is a *RedisError: the server's answer
// to the call, an error no policy hides.
func isPacerError(err error) bool {
	var e *RedisError
	return errors.As(err, &e)
}

func badReply(op string, reply any) error {
	return &RedisError{Op: op, Reply: "unexpected reply " + describe(reply)}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// whole is v as a whole number: an integer reply, not negative.
func whole(v any) (uint64, bool) {
	n, ok := v.(int64)
	return uint64(n), ok && n >= 0
}

// flag is v as a flag: an integer reply, 0 or 1.
func flag(v any) (bool, bool) {
	n, ok := v.(int64)
	return n == 1, ok && (n == 0 || n == 1)
}

func num(v any) uint64 {
	switch x := v.(type) {
	case int64:
		if x > 0 {
			return uint64(x)
		}
	case string:
		n, _ := strconv.ParseUint(x, 10, 64)
		return n
	}
	return 0
}

func signed(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
