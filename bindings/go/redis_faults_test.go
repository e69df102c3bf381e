package pacer_test

// RedisPacer under the replies and faults of docs/fleet-clients.md: a
// redemption's fresh ticket, the failure classification on real servers
// (a replica, maxmemory, a function deleted, a module unloaded), the one
// deadline per call, and cancellation mid round trip. Relations only: no
// assertion depends on how fast the machine is, except deadlines checked
// with a slack of a second.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"pacer"
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
