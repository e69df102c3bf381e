package pacer

import (
	"sync/atomic"
	"unsafe"
)

// Ticket is the right to refund one admission's debit. It is released at
// most once, however many goroutines try: every copy of a Decision or an
// Admission shares the one *Ticket, and its spent flag is atomic.
type Ticket struct {
	owner      uint64 // the issuing Pacer's id (Pacer.id)
	seq        uint32
	debitUnits uint32
	tag        uint32 // the library's owner tag (pacer_ticket.owner), passed back on release
	spent      atomic.Bool
}

// DebitUnits is the debit the ticket refunds (UnitsPerToken = one connection).
func (t *Ticket) DebitUnits() uint32 { return t.debitUnits }

// Spent reports whether the ticket was released already.
func (t *Ticket) Spent() bool { return t.spent.Load() }

// pacerIDs numbers the Pacers made by New and OpenShared from 1, so a
// ticket names its issuer without a pointer: a Ticket holds no pointer at
// all, which the collector neither scans nor guards with write barriers.
var pacerIDs atomic.Uint64

// issued reports whether t is one of p's tickets.
func (p *Pacer) issued(t *Ticket) bool { return t != nil && p.id != 0 && t.owner == p.id }

// ticketChunkLen is how many tickets one allocation holds.
const ticketChunkLen = 16

// ticketChunk is ticketChunkLen tickets allocated at once and handed out
// one by one, each exactly once (next counts the ones taken): a
// reservation costs a sixteenth of an allocation instead of one. A ticket
// kept alive keeps its whole chunk alive (16 · 24 bytes).
type ticketChunk struct {
	next atomic.Uint32
	t    [ticketChunkLen]Ticket
}

// ticketStripes is how many chunks a Pacer hands tickets out from at once.
const ticketStripes = 8

// ticketCache is the chunks a Pacer is handing tickets out from, one per
// stripe, each stripe on its own cache line. Goroutines pick a stripe by
// where their stack is, so two goroutines running at once mostly take
// tickets from different chunks: neither the chunk's counter nor the
// tickets written next to each other bounce between processors. Which
// stripe a call picks matters only for speed.
type ticketCache struct {
	stripes [ticketStripes]ticketStripe
}

type ticketStripe struct {
	cur atomic.Pointer[ticketChunk]
	_   [56]byte // pads the stripe to a 64-byte cache line
}

// stripe is the calling goroutine's stripe: a hash of its stack address in
// 2 KiB units (the smallest goroutine stack), so goroutines keep theirs
// while their stacks stay put and neighbouring stacks get different ones.
func (c *ticketCache) stripe() *ticketStripe {
	var here byte
	a := uintptr(unsafe.Pointer(&here)) >> 11
	return &c.stripes[(a^a>>3)%ticketStripes]
}

// newTicket is a fresh ticket of p's, unspent, never handed out before.
// Lock-free: a slot is claimed with one atomic add, and when the chunk is
// used up the caller starts a new one (if two goroutines do so at once,
// both chunks are used; the loser's other slots are simply dropped).
func (p *Pacer) newTicket(seq, debitUnits, tag uint32) *Ticket {
	st := p.tickets.stripe()
	c := st.cur.Load()
	var t *Ticket
	if c != nil {
		if i := c.next.Add(1) - 1; i < ticketChunkLen {
			t = &c.t[i]
		}
	}
	if t == nil {
		n := &ticketChunk{}
		n.next.Store(1)
		st.cur.CompareAndSwap(c, n)
		t = &n.t[0]
	}
	t.owner, t.seq, t.debitUnits, t.tag = p.id, seq, debitUnits, tag
	return t
}
