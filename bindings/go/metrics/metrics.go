// Package metrics exports pacers' counts as Prometheus metrics through
// client_golang: a Collector of the metric set of docs/metrics.md (the
// same names, types, units and labels as every other binding and
// `pacer watch --prometheus`), for a Pacer, a SharedPacer or a
// RedisPacer, each under its bucket name.
//
//	c, err := metrics.NewCollector(metrics.Source{Bucket: "api", Pacer: p})
//	if err != nil { … }
//	prometheus.MustRegister(c)
//
// Collection reads the counts the pacer already keeps (Counters), its rate
// in force and, for an in-process or shared pacer, its tokens now; the
// admission path does nothing for metrics. A RedisPacer's collection makes
// no round trip to Redis: it exports the client's own counts and the rate
// in force the server last reported, and no pacer_tokens (docs/metrics.md).
package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	pacer "github.com/connpacer/pacer/bindings/go"
	"github.com/prometheus/client_golang/prometheus"
)

// The metric names of docs/metrics.md.
const (
	DecisionsName        = "pacer_decisions_total"
	WaitSecondsName      = "pacer_wait_seconds"
	ShapedName           = "pacer_shaped_total"
	RedeemedName         = "pacer_redeemed_total"
	ReleasesName         = "pacer_releases_total"
	UpstreamOutcomesName = "pacer_upstream_outcomes_total"
	ClockRegressionsName = "pacer_clock_regressions_total"
	RateInForceName      = "pacer_rate_in_force_per_minute"
	TokensName           = "pacer_tokens"
	BookingsPendingName  = "pacer_bookings_pending"
	FallbacksName        = "pacer_fallbacks_total"
)

// BucketLabel is the label every metric carries: the source's Bucket.
const BucketLabel = "bucket"

// ErrInvalidSource matches every error NewCollector and Register return
// for a bad Source: an empty bucket name, one that is not valid UTF-8, a
// bucket given twice, no pacer or more than one.
var ErrInvalidSource = errors.New("metrics: invalid source")

// Source is one pacer to export, under the bucket name Bucket. Set
// exactly one of Pacer, Shared and Redis.
type Source struct {
	// Bucket is the value of the bucket label: any non-empty UTF-8 text
	// (the exposition escapes it).
	Bucket string
	// Pacer is an in-process pacer.
	Pacer *pacer.Pacer
	// Shared is a shared-memory pacer: its counts are the bucket's, every
	// process's (docs/metrics.md, "Whose counts"), so scrape one process
	// per bucket.
	Shared *pacer.SharedPacer
	// Redis is a fleet client: its counts are this process's answers.
	Redis *pacer.RedisPacer
}

// Collector is a prometheus.Collector of the metric set for one or more
// sources. Its descriptors carry each source's bucket as a constant label,
// so a registry refuses a second registration of a bucket it already has.
// Safe for concurrent use.
type Collector struct {
	sources []source
}

// source is one Source with its descriptors.
type source struct {
	bucket string
	reader reader
	descs  descs
}

// descs are one bucket's descriptors (tokens and fallbacks nil when the
// source does not export them).
type descs struct {
	decisions, wait, shaped, redeemed, releases, outcomes, regressions *prometheus.Desc
	rate, tokens, pending, fallbacks                                   *prometheus.Desc
}

// reading is what one collection reads of a source.
type reading struct {
	counters    pacer.Counters
	rate        int
	tokensUnits int64
	pending     int
	fallbacks   uint64
}

// reader reads a source's values; err is pacer.ErrClosed for a closed
// pacer.
type reader interface {
	read() (reading, error)
	hasTokens() bool
	hasFallbacks() bool
}

// NewCollector returns a Collector of sources. A Source with an empty
// bucket name, one that is not valid UTF-8, a bucket name given twice, or
// with no pacer or more than one set returns an error wrapping
// ErrInvalidSource, and no Collector.
func NewCollector(sources ...Source) (*Collector, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("%w: no source given", ErrInvalidSource)
	}
	c := &Collector{}
	seen := make(map[string]bool, len(sources))
	for i, s := range sources {
		r, err := s.reader()
		if err != nil {
			return nil, fmt.Errorf("%w: source %d: %w", ErrInvalidSource, i, err)
		}
		switch {
		case s.Bucket == "":
			return nil, fmt.Errorf("%w: source %d: the bucket name must not be empty", ErrInvalidSource, i)
		case !utf8.ValidString(s.Bucket):
			return nil, fmt.Errorf("%w: source %d: the bucket name %s is not valid UTF-8",
				ErrInvalidSource, i, strconv.QuoteToASCII(s.Bucket))
		case seen[s.Bucket]:
			return nil, fmt.Errorf("%w: source %d: the bucket %q is given twice", ErrInvalidSource, i, s.Bucket)
		}
		seen[s.Bucket] = true
		c.sources = append(c.sources, source{bucket: s.Bucket, reader: r, descs: newDescs(s.Bucket, r)})
	}
	return c, nil
}

// Register makes a Collector of sources (see NewCollector) and registers
// it on reg (prometheus.DefaultRegisterer when reg is nil). A bucket name
// reg already has is refused by reg: the error names the buckets and
// wraps reg's (a prometheus.AlreadyRegisteredError when the same buckets
// were registered before), and nothing is registered.
func Register(reg prometheus.Registerer, sources ...Source) (*Collector, error) {
	c, err := NewCollector(sources...)
	if err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: registering the buckets %q: %w", c.Buckets(), err)
	}
	return c, nil
}

// Buckets is the sources' bucket names, in the order given.
func (c *Collector) Buckets() []string {
	out := make([]string, len(c.sources))
	for i, s := range c.sources {
		out[i] = s.bucket
	}
	return out
}

// reader is the source's reader, or an error for no pacer or more than one.
func (s Source) reader() (reader, error) {
	var set []reader
	if s.Pacer != nil {
		set = append(set, pacerReader{s.Pacer})
	}
	if s.Shared != nil {
		set = append(set, sharedReader{s.Shared})
	}
	if s.Redis != nil {
		set = append(set, redisReader{s.Redis})
	}
	if len(set) != 1 {
		return nil, fmt.Errorf("set exactly one of Pacer, Shared and Redis (%d set)", len(set))
	}
	return set[0], nil
}

func newDescs(bucket string, r reader) descs {
	labels := prometheus.Labels{BucketLabel: bucket}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	d := descs{
		decisions: desc(DecisionsName, "Answers to requests for a new connection: admitted at once, "+
			"admitted after a wait, refused, refused with a booking in line.", "decision"),
		wait:     desc(WaitSecondsName, "The wait of every admission, seconds (0 for an immediate one)."),
		shaped:   desc(ShapedName, "Admissions by the shaping rule."),
		redeemed: desc(RedeemedName, "Bookings admitted when presented on their retry."),
		releases: desc(ReleasesName, "Releases of a ticket, refunded to the bucket or not.", "refunded"),
		outcomes: desc(UpstreamOutcomesName, "What the upstream answered to new connections, as reported to observe.",
			"outcome"),
		regressions: desc(ClockRegressionsName, "Calls whose clock reading was behind the latest one."),
		rate:        desc(RateInForceName, "The rate the pacer decides at now, new connections per minute."),
		pending: desc(BookingsPendingName, "Keyed requests refused and not yet admitted or forgotten, "+
			"in this process."),
	}
	if r.hasTokens() {
		d.tokens = desc(TokensName, "Tokens in the bucket now (negative: the debt of admissions still waiting).")
	}
	if r.hasFallbacks() {
		d.fallbacks = desc(FallbacksName, "Answers the failure policy gave because Redis failed.")
	}
	return d
}

// Describe sends every source's descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.sources {
		d := s.descs
		for _, desc := range []*prometheus.Desc{d.decisions, d.wait, d.shaped, d.redeemed, d.releases,
			d.outcomes, d.regressions, d.rate, d.tokens, d.pending, d.fallbacks} {
			if desc != nil {
				ch <- desc
			}
		}
	}
}

// Collect reads each source and sends its metrics. A closed pacer sends
// nothing (its bucket's series end; unregister the Collector when its
// pacers are closed); any other error reading a source is sent as an
// invalid metric, which fails the scrape with that error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sources {
		r, err := s.reader.read()
		if errors.Is(err, pacer.ErrClosed) {
			continue
		}
		if err != nil {
			ch <- prometheus.NewInvalidMetric(s.descs.decisions, fmt.Errorf("bucket %q: %w", s.bucket, err))
			continue
		}
		s.send(ch, r)
	}
}

// send sends one reading's metrics, derived as docs/metrics.md says.
func (s source) send(ch chan<- prometheus.Metric, r reading) {
	d, n := s.descs, r.counters
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	counter(d.decisions, n.Admitted-n.AdmittedAfterWait, "admitted")
	counter(d.decisions, n.AdmittedAfterWait, "waited")
	counter(d.decisions, n.Refused-n.Booked, "refused")
	counter(d.decisions, n.Booked, "booked")
	bounds := pacer.WaitBoundsMs()
	buckets := make(map[float64]uint64, len(bounds))
	for i, bound := range bounds {
		buckets[float64(bound)/1000] = n.WaitLe(i)
	}
	ch <- prometheus.MustNewConstHistogram(d.wait, n.Admitted, float64(n.WaitMsTotal)/1000, buckets)
	counter(d.shaped, n.Shaped)
	counter(d.redeemed, n.Redeemed)
	counter(d.releases, n.Refunded, "true")
	counter(d.releases, n.Released-n.Refunded, "false")
	counter(d.outcomes, n.Opened, "opened")
	counter(d.outcomes, n.Throttled, "throttled")
	counter(d.regressions, n.ClockRegressions)
	gauge(d.rate, float64(r.rate))
	if d.tokens != nil {
		gauge(d.tokens, float64(r.tokensUnits)/pacer.UnitsPerToken)
	}
	gauge(d.pending, float64(r.pending))
	if d.fallbacks != nil {
		counter(d.fallbacks, r.fallbacks)
	}
}

// pacerReader reads an in-process pacer at its own clock.
type pacerReader struct{ p *pacer.Pacer }

func (pacerReader) hasTokens() bool    { return true }
func (pacerReader) hasFallbacks() bool { return false }

func (r pacerReader) read() (reading, error) {
	clock := r.p.Config().Clock
	if clock == nil {
		clock = pacer.MonotonicMs
	}
	now := clock()
	counters, err := r.p.Counters()
	if err != nil {
		return reading{}, err
	}
	rate, err := r.p.RateInForce(now)
	if err != nil {
		return reading{}, err
	}
	level, err := r.p.LevelAt(now)
	if err != nil {
		return reading{}, err
	}
	return reading{counters: counters, rate: rate, tokensUnits: level, pending: r.p.PendingKeys()}, nil
}

// sharedReader reads a shared pacer at the shared clock.
type sharedReader struct{ s *pacer.SharedPacer }

func (sharedReader) hasTokens() bool    { return true }
func (sharedReader) hasFallbacks() bool { return false }

func (r sharedReader) read() (reading, error) {
	counters, err := r.s.Counters()
	if err != nil {
		return reading{}, err
	}
	rate, err := r.s.RateInForce()
	if err != nil {
		return reading{}, err
	}
	level, err := r.s.Level()
	if err != nil {
		return reading{}, err
	}
	return reading{counters: counters, rate: rate, tokensUnits: level, pending: r.s.PendingKeys()}, nil
}

// redisReader reads a fleet client's own counts: no round trip.
type redisReader struct{ r *pacer.RedisPacer }

func (redisReader) hasTokens() bool    { return false }
func (redisReader) hasFallbacks() bool { return true }

func (r redisReader) read() (reading, error) {
	counters, err := r.r.Counters()
	if err != nil {
		return reading{}, err
	}
	return reading{
		counters: counters.Counters, rate: r.r.LastRateInForce(), pending: r.r.PendingKeys(),
		fallbacks: counters.Fallbacks,
	}, nil
}
