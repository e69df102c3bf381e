// Package pacer paces new upstream connections: each request asks whether
// it may open a connection now, after a bounded wait, or must be refused
// with a retry-after hint. The decision is the pacer core's, called through
// its C ABI (libpacer.a, include/pacer.h); waiting, clocks, contexts and
// notices are Go's.
//
// Bookings (SPEC §11, opt-in) turn refusals into a place in line for the
// request's retry: AdmitKey keys them by the request's identity (Forget
// releases what a key holds); ReserveOrBook and Redeem are the raw calls.
// A SharedPacer books on its bucket's machine-wide line the same way.
//
// Adaptive pacing (SPEC §14, opt-in: Config.AdaptiveFloorPerMin) lets the
// upstream's own answers move the rate in force: Observe(OutcomeThrottled)
// where the proxy classifies the upstream's rate-limit answer to a new
// connection, Observe(OutcomeOpened) when the connection opens;
// RateInForce reads it. A SharedPacer's and a RedisPacer's rate in force is
// their bucket's, so one throttle slows every process sharing it.
//
// A RedisPacer (OpenRedis) keeps a fleet's bucket in Redis, decided by the
// same rule inside the server at the server's clock (docs/redis.md), with
// a failure policy for when Redis fails (docs/fleet-clients.md). It uses
// go-redis v9.
//
// Counters reads every count a pacer keeps (a shared pacer's are its
// bucket's, every process's); the package
// github.com/connpacer/pacer/bindings/go/metrics exports them as the
// Prometheus metric set of docs/metrics.md.
//
// Clocks are monotonic milliseconds as uint64: Reserve and Release take
// them from the caller (any value, including math.MaxUint64), as Observe
// and RateInForce do; Admit reads
// the pacer's Config.Clock (MonotonicMs by default).
//
//	p, err := pacer.New(pacer.DefaultConfig())
//	a, err := p.Admit(ctx)
//	var refused *pacer.RefusedError
//	if errors.As(err, &refused) {
//		r, _ := refused.Response("")
//		_ = r.Write(w)
//		return
//	}
//	// open the connection; if it will not be opened after all: a.Release()
package pacer
