package pacer

// Bookings (SPEC §11): a refusal whose wait fits inside the request's
// remaining retries debits one token now and hands back a place in line;
// the request's retry redeems it instead of competing with fresh arrivals.
// ReserveOrBook and Redeem are the raw calls; AdmitKey and Forget key them
// by the caller's request identity.

import (
	"context"
	"errors"
	"runtime"
	"sync"
)

// Booking is a place in line: one token debited when it was booked, for a
// connection that may open at SlotMs on the pacer's clock. Present it with
// Redeem on the request's retry; if the request ends without redeeming it,
// release Ticket (Pacer.Release). Treat it as read-only: Redeem rejects a
// booking whose fields were changed.
type Booking struct {
	// SlotMs is when the connection may open, ms on the pacer's clock.
	SlotMs uint64
	// Ticket is the refund right of the booked token. Redeem moves it into
	// the admission (it then reports Spent); it is released at most once.
	Ticket *Ticket

	slot   uint64  // SlotMs as booked
	ticket *Ticket // Ticket as booked
}

// BookingDecision is ReserveOrBook's answer: the embedded Decision as
// Reserve's (admitted, or refused with RetryAfterSeconds), and, for a
// refusal that booked a place in line, the Booking.
type BookingDecision struct {
	Decision
	// Booking is the place in line of a booked refusal; nil when admitted
	// or refused beyond the horizon (nothing debited then).
	Booking *Booking
}

// Booked reports whether the refusal holds a place in line.
func (d BookingDecision) Booked() bool { return d.Booking != nil }

// ReserveOrBook is Reserve, except that a refusal whose wait fits the
// horizon of the request's retriesLeft retries, bound + retriesLeft ·
// hint cap · 1000 ms (retriesLeft counted up to Config.MaxRetries), books
// a place in line (SPEC §11): one token is debited now, the decision is
// refused with RetryAfterSeconds and RequiredWaitMs = Booking.SlotMs −
// nowMs, and Booking is set. Answer the client as for a refusal, keep the
// booking under the request's identity and Redeem it on the retry (or
// release its ticket). Beyond the horizon it is a plain refusal, nothing
// debited. Safe for concurrent use.
func (p *Pacer) ReserveOrBook(nowMs uint64, retriesLeft uint32) (BookingDecision, error) {
	if !p.enter() {
		return BookingDecision{}, ErrClosed
	}
	d, b, err := p.mem.reserveOrBook(nowMs, retriesLeft, p)
	runtime.KeepAlive(p)
	if err != nil {
		return BookingDecision{}, err
	}
	return BookingDecision{Decision: d, Booking: b}, nil
}

// Redeem presents a booking on the request's retry at nowMs; it changes
// nothing in the pacer (only its counters). When the slot is within the
// wait bound (SlotMs − nowMs <= WaitBoundMs) the decision is admitted
// after max(0, SlotMs − nowMs) with Path PathBooked, and its Ticket is the
// booking's: the booking's own Ticket is then spent, so the booking cannot
// be redeemed or released again. Otherwise it is not admitted, with the
// hint for the next retry (RetryAfterSeconds, RequiredWaitMs = SlotMs −
// nowMs), and the booking is kept.
//
// A booking already redeemed or released returns ErrBookingSpent
// (errors.Is StatusInvalidTicket too); nil, one changed by the caller, or
// one from another pacer returns ErrInvalidInput. Nothing changes then.
func (p *Pacer) Redeem(b *Booking, nowMs uint64) (Decision, error) {
	if !p.enter() {
		return Decision{}, ErrClosed
	}
	switch {
	case b == nil:
		return Decision{}, inputError("booking", nil, "must not be nil")
	case b.ticket == nil || !p.issued(b.ticket):
		return Decision{}, inputError("booking", b, "must come from this pacer's ReserveOrBook")
	case b.Ticket != b.ticket || b.SlotMs != b.slot:
		return Decision{}, inputError("booking", b, "must not be changed after ReserveOrBook")
	case b.ticket.Spent():
		return Decision{}, ErrBookingSpent
	}
	t := b.ticket
	d, err := p.mem.redeem(t.seq, t.debitUnits, t.tag, b.slot, nowMs, p)
	runtime.KeepAlive(p)
	if errors.Is(err, StatusInvalidTicket) {
		return Decision{}, ErrBookingSpent
	}
	if err != nil {
		return Decision{}, err
	}
	if !d.Admitted {
		return d, nil
	}
	// The admission takes the booking's refund right. The call above was
	// pure, so losing a race with a concurrent Release or Redeem of the
	// same booking costs nothing but this answer.
	if !t.spent.CompareAndSwap(false, true) {
		return Decision{}, ErrBookingSpent
	}
	if d.Ticket == nil {
		d.Ticket = p.newTicket(t.seq, t.debitUnits, t.tag)
	}
	return d, nil
}

// keyedBookings is AdmitKey's memory: per request key refused so far, its
// refused attempts and the booking it holds, if any.
type keyedBookings struct {
	mu      sync.Mutex
	pending map[string]*keyedEntry
}

type keyedEntry struct {
	attempts uint32   // refused attempts so far
	booking  *Booking // the place in line held, or nil
}

// attempt is one attempt of request key at the pacer's clock (read under
// the lock, so attempts are in clock order): it redeems the key's booking
// if it holds one, else reserves or books with the retries it has left
// (Config.MaxRetries minus the attempts refused so far). An admitted key
// is forgotten; a refused one counts the attempt. The returned time is the
// clock reading the decision was made at (a shared pacer's library call
// reads the shared clock again itself, at or after it).
func (p *Pacer) attempt(key string) (Decision, bool, uint64, error) {
	k := &p.keyed
	k.mu.Lock()
	defer k.mu.Unlock()
	now := p.clock()
	entry := k.pending[key]
	if entry == nil {
		entry = &keyedEntry{}
	}
	var d Decision
	if entry.booking != nil {
		var err error
		if d, err = p.Redeem(entry.booking, now); err != nil {
			return Decision{}, false, now, err
		}
	} else {
		retriesLeft := uint32(0)
		if maxRetries := uint32(p.cfg.MaxRetries); entry.attempts < maxRetries {
			retriesLeft = maxRetries - entry.attempts
		}
		bd, err := p.ReserveOrBook(now, retriesLeft)
		if err != nil {
			return Decision{}, false, now, err
		}
		d = bd.Decision
		if bd.Booking != nil {
			entry.booking = bd.Booking
		}
	}
	if d.Admitted {
		delete(k.pending, key)
		return d, false, now, nil
	}
	if entry.attempts < ^uint32(0) {
		entry.attempts++
	}
	if k.pending == nil {
		k.pending = make(map[string]*keyedEntry)
	}
	k.pending[key] = entry
	return d, entry.booking != nil, now, nil
}

// AdmitKey is Admit for a request that may come back: key is the request's
// identity across the client's retries (a request id header, a hash of the
// body). Its first refusal books a place in line when the wait fits the
// horizon of the retries it has left (SPEC §11); each retry with the same
// key redeems that booking instead of debiting again, and is admitted,
// after a wait within the bound, once the slot is near. Every refusal,
// booked or not, is a *RefusedError (Booked set when a place is held) to
// answer the client with, and counts one attempt against
// Config.MaxRetries.
//
// An admitted key is forgotten. A key that ends without admission
// (aborted, failed, given up) must be given to Forget, or its booked slot
// is lost to everyone and the key is remembered. If ctx is done during
// the wait the slot is refunded and ctx.Err() returned, and if the pacer
// is closed during it the slot is refunded and ErrClosed returned, as with
// Admit.
func (p *Pacer) AdmitKey(ctx context.Context, key string) (Admission, error) {
	if err := p.admitReady(ctx); err != nil {
		return Admission{}, err
	}
	d, booked, start, err := p.attempt(key)
	if err != nil {
		return Admission{}, err
	}
	if !d.Admitted {
		return Admission{}, &RefusedError{
			RequiredWaitMs: d.RequiredWaitMs, RetryAfterSeconds: d.RetryAfterSeconds, Booked: booked,
		}
	}
	return p.await(ctx, start, &d)
}

// Forget gives back what the keyed request holds when it ends without
// being admitted: its booking's token is released at the pacer's clock and
// the key is forgotten. It reports whether a booking was refunded; false
// for a key that holds no booking or is unknown. It works after Close too
// (the booking is refunded as by Release); only a nil Pacer or one not
// made by New returns ErrClosed.
func (p *Pacer) Forget(key string) (bool, error) {
	if p == nil || p.clock == nil {
		return false, ErrClosed
	}
	k := &p.keyed
	k.mu.Lock()
	defer k.mu.Unlock()
	entry := k.pending[key]
	if entry == nil {
		return false, nil
	}
	refunded := false
	if entry.booking != nil {
		var err error
		if refunded, err = p.Release(entry.booking.ticket, p.clock()); err != nil {
			return false, err
		}
	}
	delete(k.pending, key)
	return refunded, nil
}

// PendingKeys is how many keys AdmitKey refused that were neither admitted
// since nor forgotten.
func (p *Pacer) PendingKeys() int {
	if p == nil {
		return 0
	}
	p.keyed.mu.Lock()
	defer p.keyed.mu.Unlock()
	return len(p.keyed.pending)
}
