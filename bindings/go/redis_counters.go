package pacer

// A RedisPacer's counts: the answers this process's calls got, counted in
// Go (docs/metrics.md, "Whose counts": each client of a Redis bucket
// exports its own, and Prometheus sums them). They follow the core's
// rules (core/src/counters.rs), so a RedisPacer's Counters read as a
// Pacer's do.

import "sync/atomic"

// RedisCounters are what a RedisPacer's calls got so far, in this
// process: Counters, counted from the answers (the server's, the failure
// policy's, or the local fallback pacer's), plus the answers the failure
// policy gave. The bucket's own counts, every client's together, are
// RedisInfo's.
type RedisCounters struct {
	Counters
	// Fallbacks are the answers the failure policy gave because Redis
	// failed: those whose Fallback is set (a fallback booking's redemption
	// by the local pacer included).
	Fallbacks uint64
}

// redisCounts are a RedisPacer's counts: relaxed atomic additions, each
// read independently.
type redisCounts struct {
	admitted, admittedAfterWait, refused, booked, redeemed, shaped atomic.Uint64
	released, refunded, clockRegressions, opened, throttled        atomic.Uint64
	waitMsTotal, fallbacks                                         atomic.Uint64
	waitBuckets                                                    [WaitBuckets]atomic.Uint64
}

// decision counts one answer to a reserve, a book or a redeem: an
// admission (its wait, its path), or a refusal (booked when it holds a
// place in line).
func (c *redisCounts) decision(d RedisDecision, booked bool) {
	if d.Fallback != "" {
		c.fallbacks.Add(1)
	}
	if d.ClockRegressed {
		c.clockRegressions.Add(1)
	}
	if !d.Admitted {
		c.refused.Add(1)
		if booked {
			c.booked.Add(1)
		}
		return
	}
	c.admitted.Add(1)
	switch d.Path {
	case PathShaped, PathOverflow:
		c.shaped.Add(1)
	case PathBooked:
		c.redeemed.Add(1)
	}
	if d.WaitMs == 0 {
		return
	}
	c.admittedAfterWait.Add(1)
	c.waitMsTotal.Add(d.WaitMs)
	for i, bound := range waitBoundsMs {
		if d.WaitMs <= bound {
			c.waitBuckets[i].Add(1)
			return
		}
	}
}

// release counts one release that reached the bucket (or the fallback
// pacer), and whether it refunded.
func (c *redisCounts) release(refunded bool) {
	c.released.Add(1)
	if refunded {
		c.refunded.Add(1)
	}
}

// outcome counts one upstream answer reported to Observe.
func (c *redisCounts) outcome(o Outcome) {
	if o == OutcomeThrottled {
		c.throttled.Add(1)
	} else {
		c.opened.Add(1)
	}
}

// snapshot reads every count.
func (c *redisCounts) snapshot() RedisCounters {
	out := RedisCounters{
		Counters: Counters{
			Admitted:          c.admitted.Load(),
			AdmittedAfterWait: c.admittedAfterWait.Load(),
			Refused:           c.refused.Load(),
			Booked:            c.booked.Load(),
			Redeemed:          c.redeemed.Load(),
			Shaped:            c.shaped.Load(),
			Released:          c.released.Load(),
			Refunded:          c.refunded.Load(),
			ClockRegressions:  c.clockRegressions.Load(),
			Opened:            c.opened.Load(),
			Throttled:         c.throttled.Load(),
			WaitMsTotal:       c.waitMsTotal.Load(),
		},
		Fallbacks: c.fallbacks.Load(),
	}
	for i := range out.WaitBuckets {
		out.WaitBuckets[i] = c.waitBuckets[i].Load()
	}
	return out
}

// Counters reads what this RedisPacer's calls got so far (each count read
// independently; no call to Redis). An answer counts when the call
// returns it: a reservation, booking or redemption answered by the
// server, by the failure policy (counted in Fallbacks too) or by the
// local fallback pacer, or by the configuration when pacing is disabled
// (admitted at once, nothing asked); a release that reached the bucket or
// the fallback pacer; every Observe of a valid outcome, whether adaptation
// is on or off and whether Redis answered. A call whose ctx ended before
// its answer came counts nothing (what the late answer carried is
// released, uncounted). As Pacer.Counters, it returns ErrClosed after
// Close, and for a nil RedisPacer or one not made by OpenRedis.
func (r *RedisPacer) Counters() (RedisCounters, error) {
	if r == nil || r.client == nil || r.isClosed() {
		return RedisCounters{}, ErrClosed
	}
	return r.counts.snapshot(), nil
}
