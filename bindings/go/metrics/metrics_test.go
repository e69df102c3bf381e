package metrics_test

// The Collector against a real registry (prometheus.NewRegistry), its
// output compared with exposition text written by hand and parsed with
// expfmt's own parser. Every expected number is worked out by hand in the
// comments, never asked of the code under test.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pacer "github.com/connpacer/pacer/bindings/go"
	"github.com/connpacer/pacer/bindings/go/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
)

// The HELP and TYPE lines of the set, as the exposition must carry them.
const (
	helpDecisions = "# HELP pacer_decisions_total Answers to requests for a new connection: admitted at once, " +
		"admitted after a wait, refused, refused with a booking in line.\n# TYPE pacer_decisions_total counter\n"
	helpWait        = "# HELP pacer_wait_seconds The wait of every admission, seconds (0 for an immediate one).\n# TYPE pacer_wait_seconds histogram\n"
	helpShaped      = "# HELP pacer_shaped_total Admissions by the shaping rule.\n# TYPE pacer_shaped_total counter\n"
	helpRedeemed    = "# HELP pacer_redeemed_total Bookings admitted when presented on their retry.\n# TYPE pacer_redeemed_total counter\n"
	helpReleases    = "# HELP pacer_releases_total Releases of a ticket, refunded to the bucket or not.\n# TYPE pacer_releases_total counter\n"
	helpOutcomes    = "# HELP pacer_upstream_outcomes_total What the upstream answered to new connections, as reported to observe.\n# TYPE pacer_upstream_outcomes_total counter\n"
	helpRegressions = "# HELP pacer_clock_regressions_total Calls whose clock reading was behind the latest one.\n# TYPE pacer_clock_regressions_total counter\n"
	helpRate        = "# HELP pacer_rate_in_force_per_minute The rate the pacer decides at now, new connections per minute.\n# TYPE pacer_rate_in_force_per_minute gauge\n"
	helpTokens      = "# HELP pacer_tokens Tokens in the bucket now (negative: the debt of admissions still waiting).\n# TYPE pacer_tokens gauge\n"
	helpPending     = "# HELP pacer_bookings_pending Keyed requests refused and not yet admitted or forgotten, in this process.\n# TYPE pacer_bookings_pending gauge\n"
	helpFallbacks   = "# HELP pacer_fallbacks_total Answers the failure policy gave because Redis failed.\n# TYPE pacer_fallbacks_total counter\n"
)

// clock is a settable clock in milliseconds.
type clock struct{ ms uint64 }

func (c *clock) now() uint64 { return c.ms }

// quiet is a notifier that logs nothing.
var quiet = pacer.NewNotifier(slog.New(slog.NewTextHandler(io.Discard, nil)))

func noSleep(context.Context, time.Duration) error { return nil }

func mustNew(t *testing.T, cfg pacer.Config) *pacer.Pacer {
	t.Helper()
	cfg.Notifier = quiet
	p, err := pacer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// must(f())(t) is f's value, or fails t with f's error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// config is rate 60/min (a token per 1000 ms, 60 units per ms), burst 2,
// idle 120 s, 5 retries, refund policy: bound floor((120000 −
// 2000·(2^5 − 1)) / 12) = 4833 ms, hint cap 4 s, horizon 4833 + 5·4000 =
// 24833 ms, refusing (5·4·1000·60 >= 60000).
func config(c *clock, burst int) pacer.Config {
	cfg := pacer.DefaultConfig()
	cfg.Burst = burst
	cfg.Clock = c.now
	cfg.Sleep = noSleep
	return cfg
}

// apiPacer makes these calls on a config(burst 2) pacer at t = 0 unless
// said (tokens after each, in tokens; a debit that leaves −k waits
// k·1000 ms):
//
//	Reserve ×3                 admitted at once ×2 (1, 0), the third after 1000 (−1)
//	Release(third, 0)          refunded (0)
//	Reserve ×4                 after 1000, 2000, 3000, 4000 (−4)
//	Reserve                    refused: 5000 > 4833
//	ReserveOrBook(0, 5)        booked, slot 5000 (−5): within the horizon
//	Redeem(booking, 167)       admitted after 5000 − 167 = 4833 (the bound), path booked; state unchanged
//	Observe opened ×2, throttled ×1 (adaptation off: counted, nothing changes)
//	Release(the 4000 one, 200) refunded: −5 + 200·60/60000 + 1 = −3.8 at 200
//	Reserve(100)               clock regressed (read as 200): −4.8, after 4800 ms
//
// Admitted 9: 2 at once, 7 after a wait (1000, 1000, 2000, 3000, 4000,
// 4833, 4800: 20633 ms); refused 2, 1 of them booked; redeemed 1; 2
// releases, both refunded; 1 clock regression. Cumulative waits: ≤ 0.5 s
// the 2 immediate; ≤ 1 s 2 + 2 = 4; ≤ 2.5 s 5; ≤ 5 s 9; ≤ 10 s 9.
// At 1200 the tokens are −4.8 + 1000·60/60000 = −3.8.
func apiPacer(t *testing.T, c *clock) *pacer.Pacer {
	t.Helper()
	p := mustNew(t, config(c, 2))
	reserve := func(now uint64, wantAdmitted bool, wantWait uint64) pacer.Decision {
		t.Helper()
		d := must(p.Reserve(now))(t)
		if d.Admitted != wantAdmitted || d.WaitMs != wantWait {
			t.Fatalf("Reserve(%d): %+v, want admitted %v after %d", now, d, wantAdmitted, wantWait)
		}
		return d
	}
	reserve(0, true, 0)
	reserve(0, true, 0)
	third := reserve(0, true, 1000)
	if ok := must(p.Release(third.Ticket, 0))(t); !ok {
		t.Fatal("the third's release did not refund")
	}
	reserve(0, true, 1000)
	reserve(0, true, 2000)
	reserve(0, true, 3000)
	last := reserve(0, true, 4000)
	reserve(0, false, 0)
	b := must(p.ReserveOrBook(0, 5))(t)
	if !b.Booked() || b.Booking.SlotMs != 5000 {
		t.Fatalf("ReserveOrBook: %+v", b)
	}
	if d := must(p.Redeem(b.Booking, 167))(t); !d.Admitted || d.WaitMs != 4833 || d.Path != pacer.PathBooked {
		t.Fatalf("Redeem: %+v", d)
	}
	for _, o := range []pacer.Outcome{pacer.OutcomeOpened, pacer.OutcomeOpened, pacer.OutcomeThrottled} {
		if rate := must(p.Observe(o, 167))(t); rate != 60 {
			t.Fatalf("Observe(%v): %d, want 60", o, rate)
		}
	}
	if ok := must(p.Release(last.Ticket, 200))(t); !ok {
		t.Fatal("the 4000 ms admission's release did not refund")
	}
	if d := reserve(100, true, 4800); !d.ClockRegressed {
		t.Fatalf("Reserve(100) after 200: %+v, want the clock regressed", d)
	}
	c.ms = 1200
	return p
}

const apiExposition = helpDecisions + `pacer_decisions_total{bucket="api",decision="admitted"} 2
pacer_decisions_total{bucket="api",decision="waited"} 7
pacer_decisions_total{bucket="api",decision="refused"} 1
pacer_decisions_total{bucket="api",decision="booked"} 1
` + helpWait + `pacer_wait_seconds_bucket{bucket="api",le="0.01"} 2
pacer_wait_seconds_bucket{bucket="api",le="0.05"} 2
pacer_wait_seconds_bucket{bucket="api",le="0.1"} 2
pacer_wait_seconds_bucket{bucket="api",le="0.5"} 2
pacer_wait_seconds_bucket{bucket="api",le="1"} 4
pacer_wait_seconds_bucket{bucket="api",le="2.5"} 5
pacer_wait_seconds_bucket{bucket="api",le="5"} 9
pacer_wait_seconds_bucket{bucket="api",le="10"} 9
pacer_wait_seconds_bucket{bucket="api",le="+Inf"} 9
pacer_wait_seconds_sum{bucket="api"} 20.633
pacer_wait_seconds_count{bucket="api"} 9
` + helpShaped + `pacer_shaped_total{bucket="api"} 0
` + helpRedeemed + `pacer_redeemed_total{bucket="api"} 1
` + helpReleases + `pacer_releases_total{bucket="api",refunded="true"} 2
pacer_releases_total{bucket="api",refunded="false"} 0
` + helpOutcomes + `pacer_upstream_outcomes_total{bucket="api",outcome="opened"} 2
pacer_upstream_outcomes_total{bucket="api",outcome="throttled"} 1
` + helpRegressions + `pacer_clock_regressions_total{bucket="api"} 1
` + helpRate + `pacer_rate_in_force_per_minute{bucket="api"} 60
` + helpTokens + `pacer_tokens{bucket="api"} -3.8
` + helpPending + `pacer_bookings_pending{bucket="api"} 0
`

// keyedPacer is config(burst 1) on a clock fixed at 0, asked by AdmitKey
// with six new keys: k0 at once (0 tokens), k1..k4 after 1000..4000 ms
// (−4), k5 would wait 5000 > 4833 and books (within the horizon 24833;
// −5): refused with a booking, pending. Admitted 5, 4 after a wait
// (10000 ms: ≤ 1 s 1 + 1 = 2, ≤ 2.5 s 3, ≤ 5 s 5); booked 1; tokens −5.
func keyedPacer(t *testing.T) *pacer.Pacer {
	t.Helper()
	p := mustNew(t, config(&clock{}, 1))
	for i := range 5 {
		a, err := p.AdmitKey(t.Context(), fmt.Sprintf("k%d", i))
		if err != nil || a.Wait != time.Duration(i)*time.Second {
			t.Fatalf("k%d: %+v, %v", i, a, err)
		}
	}
	_, err := p.AdmitKey(t.Context(), "k5")
	var refused *pacer.RefusedError
	if !errors.As(err, &refused) || !refused.Booked || p.PendingKeys() != 1 {
		t.Fatalf("k5: %v, pending %d; want booked, pending", err, p.PendingKeys())
	}
	return p
}

const keyedExposition = helpDecisions + `pacer_decisions_total{bucket="keyed",decision="admitted"} 1
pacer_decisions_total{bucket="keyed",decision="waited"} 4
pacer_decisions_total{bucket="keyed",decision="refused"} 0
pacer_decisions_total{bucket="keyed",decision="booked"} 1
` + helpWait + `pacer_wait_seconds_bucket{bucket="keyed",le="0.01"} 1
pacer_wait_seconds_bucket{bucket="keyed",le="0.05"} 1
pacer_wait_seconds_bucket{bucket="keyed",le="0.1"} 1
pacer_wait_seconds_bucket{bucket="keyed",le="0.5"} 1
pacer_wait_seconds_bucket{bucket="keyed",le="1"} 2
pacer_wait_seconds_bucket{bucket="keyed",le="2.5"} 3
pacer_wait_seconds_bucket{bucket="keyed",le="5"} 5
pacer_wait_seconds_bucket{bucket="keyed",le="10"} 5
pacer_wait_seconds_bucket{bucket="keyed",le="+Inf"} 5
pacer_wait_seconds_sum{bucket="keyed"} 10
pacer_wait_seconds_count{bucket="keyed"} 5
` + helpShaped + `pacer_shaped_total{bucket="keyed"} 0
` + helpRedeemed + `pacer_redeemed_total{bucket="keyed"} 0
` + helpReleases + `pacer_releases_total{bucket="keyed",refunded="true"} 0
pacer_releases_total{bucket="keyed",refunded="false"} 0
` + helpOutcomes + `pacer_upstream_outcomes_total{bucket="keyed",outcome="opened"} 0
pacer_upstream_outcomes_total{bucket="keyed",outcome="throttled"} 0
` + helpRegressions + `pacer_clock_regressions_total{bucket="keyed"} 0
` + helpRate + `pacer_rate_in_force_per_minute{bucket="keyed"} 60
` + helpTokens + `pacer_tokens{bucket="keyed"} -5
` + helpPending + `pacer_bookings_pending{bucket="keyed"} 1
`

// merge joins expositions of the same families under one HELP and TYPE
// line each (the text format allows a family once).
func merge(texts ...string) string {
	var order []string
	samples := map[string][]string{}
	for _, text := range texts {
		current := ""
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
				if strings.HasPrefix(line, "# HELP ") {
					current = strings.Fields(line)[2]
					if _, ok := samples[current]; !ok {
						order = append(order, current)
						samples[current] = nil
					}
				}
				continue
			}
			samples[current] = append(samples[current], line)
		}
	}
	var b strings.Builder
	for _, name := range order {
		for _, text := range texts {
			if i := strings.Index(text, "# HELP "+name+" "); i >= 0 {
				header := text[i:]
				end := strings.Index(header, "\n# TYPE ")
				end += strings.Index(header[end+1:], "\n") + 2
				b.WriteString(header[:end])
				break
			}
		}
		for _, s := range samples[name] {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

// Two in-process pacers in one Collector, gathered by a real registry and
// compared with the exposition above.
func TestPacersExposition(t *testing.T) {
	c := &clock{}
	api, keyed := apiPacer(t, c), keyedPacer(t)
	reg := prometheus.NewRegistry()
	col, err := metrics.Register(reg, metrics.Source{Bucket: "api", Pacer: api},
		metrics.Source{Bucket: "keyed", Pacer: keyed})
	if err != nil {
		t.Fatal(err)
	}
	if got := col.Buckets(); !slices.Equal(got, []string{"api", "keyed"}) {
		t.Fatalf("Buckets %q", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(merge(apiExposition, keyedExposition))); err != nil {
		t.Fatal(err)
	}
	// The collector alone, through testutil.CollectAndCompare.
	one := must(metrics.NewCollector(metrics.Source{Bucket: "api", Pacer: api}))(t)
	if err := testutil.CollectAndCompare(one, strings.NewReader(apiExposition)); err != nil {
		t.Fatal(err)
	}
	// Collection reads only: the pacer's counters and state are unchanged
	// by scrapes.
	before, info := must(api.Counters())(t), must(api.Info())(t)
	for range 3 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if after := must(api.Counters())(t); after != before {
		t.Fatalf("a scrape changed the counters: %+v, were %+v", after, before)
	}
	if after := must(api.Info())(t); after != info {
		t.Fatalf("a scrape changed the state: %+v, was %+v", after, info)
	}
}

// scrape serves reg through promhttp as a Prometheus server asks for it
// (text format) and parses the answer with expfmt's parser.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("scrape content type %q", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return families
}

// docMetric is one row of docs/metrics.md's table: the name, the type and
// the labels with the values the table lists (nil: any value).
type docMetric struct {
	name, kind string
	labels     map[string][]string
}

// docTable reads the table of docs/metrics.md.
func docTable(t *testing.T) []docMetric {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	const bar = "\x00" // an escaped \| inside a cell
	var out []docMetric
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "| `pacer_") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, bar), "|")
		if len(cells) < 6 {
			t.Fatalf("docs/metrics.md row %q", line)
		}
		m := docMetric{name: strings.Trim(strings.TrimSpace(cells[1]), "`"), kind: strings.TrimSpace(cells[2]),
			labels: map[string][]string{}}
		for _, part := range strings.Split(cells[4], ";") {
			names, values, hasValues := strings.Cut(part, " = ")
			var last string
			for _, name := range strings.Split(names, ",") {
				last = strings.Trim(strings.TrimSpace(name), "`")
				m.labels[last] = nil
			}
			if !hasValues {
				continue
			}
			sep := bar
			if !strings.Contains(values, bar) {
				sep = ","
			}
			for _, v := range strings.Split(values, sep) {
				m.labels[last] = append(m.labels[last], strings.Trim(strings.TrimSpace(v), "`"))
			}
		}
		out = append(out, m)
	}
	if len(out) != 11 {
		t.Fatalf("docs/metrics.md's table has %d metrics, this test knows 11", len(out))
	}
	return out
}

// checkAgainstDocs checks every family of docs/metrics.md's table in
// families: present (unless absent lists it), its type, its label names,
// and every value the table lists for a label seen, and no other.
func checkAgainstDocs(t *testing.T, families map[string]*dto.MetricFamily, bucket string, absent ...string) {
	t.Helper()
	for _, doc := range docTable(t) {
		f, ok := families[doc.name]
		if slices.Contains(absent, doc.name) {
			if ok {
				t.Errorf("%s: exported for bucket %q, which should not have it", doc.name, bucket)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: missing", doc.name)
			continue
		}
		if kind := strings.ToLower(f.GetType().String()); kind != doc.kind {
			t.Errorf("%s: type %s, docs/metrics.md says %s", doc.name, kind, doc.kind)
		}
		seen := map[string][]string{}
		for _, m := range f.GetMetric() {
			var names []string
			for _, lp := range m.GetLabel() {
				names = append(names, lp.GetName())
				if !slices.Contains(seen[lp.GetName()], lp.GetValue()) {
					seen[lp.GetName()] = append(seen[lp.GetName()], lp.GetValue())
				}
			}
			if h := m.GetHistogram(); h != nil {
				names = append(names, "le")
				for _, b := range h.GetBucket() {
					// The parser keeps the +Inf bucket of the text.
					seen["le"] = append(seen["le"], strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
			}
			var want []string
			for name := range doc.labels {
				want = append(want, name)
			}
			slices.Sort(names)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("%s: labels %q, docs/metrics.md says %q", doc.name, names, want)
			}
		}
		if got := seen[metrics.BucketLabel]; !slices.Equal(got, []string{bucket}) {
			t.Errorf("%s: bucket values %q, want %q", doc.name, got, bucket)
		}
		for name, values := range doc.labels {
			if values == nil {
				continue
			}
			got, want := slices.Clone(seen[name]), slices.Clone(values)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: label %s values %q, docs/metrics.md says %q", doc.name, name, got, want)
			}
		}
	}
}

// The scrape through promhttp, parsed: every metric of docs/metrics.md's
// table with its type, labels and label values (an in-process pacer has
// no pacer_fallbacks_total), and the values of apiPacer.
func TestScrapeMatchesDocs(t *testing.T) {
	c := &clock{}
	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, metrics.Source{Bucket: "api", Pacer: apiPacer(t, c)}); err != nil {
		t.Fatal(err)
	}
	families := scrape(t, reg)
	checkAgainstDocs(t, families, "api", metrics.FallbacksName)
	value := func(name string, labels ...string) float64 {
		t.Helper()
		for _, m := range families[name].GetMetric() {
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					ok = ok || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				match = match && ok
			}
			if match {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("%s %q: no such sample", name, labels)
		return 0
	}
	// apiPacer's derivation.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{metrics.DecisionsName, []string{"decision", "waited"}, 7},
		{metrics.DecisionsName, []string{"decision", "booked"}, 1},
		{metrics.RedeemedName, nil, 1},
		{metrics.ReleasesName, []string{"refunded", "true"}, 2},
		{metrics.UpstreamOutcomesName, []string{"outcome", "throttled"}, 1},
		{metrics.ClockRegressionsName, nil, 1},
		{metrics.TokensName, nil, -3.8},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s %q = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	h := families[metrics.WaitSecondsName].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 9 || h.GetSampleSum() != 20.633 {
		t.Errorf("wait histogram count %d sum %v, want 9 and 20.633", h.GetSampleCount(), h.GetSampleSum())
	}
}

// A bucket name the exposition must escape (a quote, a backslash, a line
// break, text beyond ASCII) reads back the same through the parser.
func TestBucketNameEscaped(t *testing.T) {
	const name = "api \"eu\" \\ one\nzwei ☃"
	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, metrics.Source{Bucket: name, Pacer: mustNew(t, config(&clock{}, 2))}); err != nil {
		t.Fatal(err)
	}
	families := scrape(t, reg)
	checkAgainstDocs(t, families, name, metrics.FallbacksName)
}

// Bad sources are refused by NewCollector and Register with
// ErrInvalidSource, and register nothing.
func TestBadSources(t *testing.T) {
	p := mustNew(t, config(&clock{}, 2))
	q := mustNew(t, config(&clock{}, 2))
	for name, sources := range map[string][]metrics.Source{
		"none":                 nil,
		"empty bucket":         {{Bucket: "", Pacer: p}},
		"invalid UTF-8":        {{Bucket: "api\xff", Pacer: p}},
		"a lone surrogate":     {{Bucket: "api\xed\xa0\x80", Pacer: p}}, // U+D800 encoded, not UTF-8
		"no pacer":             {{Bucket: "api"}},
		"a nil pacer":          {{Bucket: "api", Pacer: nil, Shared: nil, Redis: nil}},
		"two pacers":           {{Bucket: "api", Pacer: p, Shared: &pacer.SharedPacer{}}},
		"one bucket twice":     {{Bucket: "api", Pacer: p}, {Bucket: "api", Pacer: q}},
		"a bad one after good": {{Bucket: "api", Pacer: p}, {Bucket: "", Pacer: q}},
	} {
		if c, err := metrics.NewCollector(sources...); !errors.Is(err, metrics.ErrInvalidSource) || c != nil {
			t.Errorf("%s: NewCollector %v, %v; want ErrInvalidSource", name, c, err)
		}
		reg := prometheus.NewRegistry()
		if c, err := metrics.Register(reg, sources...); !errors.Is(err, metrics.ErrInvalidSource) || c != nil {
			t.Errorf("%s: Register %v, %v; want ErrInvalidSource", name, c, err)
		}
		if families, err := reg.Gather(); err != nil || len(families) != 0 {
			t.Errorf("%s: the registry has %d families, %v; want none", name, len(families), err)
		}
	}
	_, err := metrics.NewCollector(metrics.Source{Bucket: "", Pacer: p})
	if err == nil || !strings.Contains(err.Error(), "must not be empty") {
		t.Errorf("empty bucket: %v", err)
	}
	_, err = metrics.NewCollector(metrics.Source{Bucket: "api\xff", Pacer: p})
	if err == nil || !strings.Contains(err.Error(), `"api\xff" is not valid UTF-8`) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

// One bucket name registered twice on one registry: the registry refuses
// the second, whether the same buckets (an AlreadyRegisteredError) or a
// set that shares one; the first stays registered and collects as before.
// Another registry takes the same bucket.
func TestDuplicateRegistrationRefused(t *testing.T) {
	c := &clock{}
	api, keyed := apiPacer(t, c), keyedPacer(t)
	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, metrics.Source{Bucket: "api", Pacer: api}); err != nil {
		t.Fatal(err)
	}
	other := mustNew(t, config(&clock{}, 2))
	_, err := metrics.Register(reg, metrics.Source{Bucket: "api", Pacer: other})
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) || !strings.Contains(err.Error(), `"api"`) {
		t.Fatalf("the same bucket again: %v; want an AlreadyRegisteredError naming the bucket", err)
	}
	_, err = metrics.Register(reg, metrics.Source{Bucket: "keyed", Pacer: keyed}, metrics.Source{Bucket: "api", Pacer: other})
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a set sharing the bucket: %v; want the registry's duplicate descriptor error", err)
	}
	// A collector made with NewCollector and registered directly: the
	// registry's own error.
	dup := must(metrics.NewCollector(metrics.Source{Bucket: "api", Pacer: other}))(t)
	if err := reg.Register(dup); !errors.As(err, &already) {
		t.Fatalf("reg.Register of the same bucket: %v", err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(apiExposition)); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	if _, err := metrics.Register(prometheus.NewRegistry(), metrics.Source{Bucket: "api", Pacer: other}); err != nil {
		t.Fatalf("another registry: %v", err)
	}
}

// A closed pacer exports nothing (its counters cannot be read after
// Close); the collector's other buckets go on.
func TestClosedPacerExportsNothing(t *testing.T) {
	c := &clock{}
	api, keyed := apiPacer(t, c), keyedPacer(t)
	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, metrics.Source{Bucket: "api", Pacer: api},
		metrics.Source{Bucket: "keyed", Pacer: keyed}); err != nil {
		t.Fatal(err)
	}
	_ = keyed.Close()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(apiExposition)); err != nil {
		t.Fatal(err)
	}
	_ = api.Close()
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series, %v after both closed; want none", n, err)
	}
}

// slowConfig is rate 1/min (a token per 60000 ms), burst 2, idle 120 s, 5
// retries: bound 4833 ms, and refusals cannot outlast a 60 s slot
// (5·4·1000·1 < 60000), so overflow is shaped: admitted after the bound,
// debited down to the floor (as long as less than 55 s pass between the
// calls, the slot is still more than the bound away).
func slowConfig(policy pacer.ReleasePolicy) pacer.Config {
	cfg := pacer.DefaultConfig()
	cfg.RatePerMinute = 1
	cfg.Burst = 2
	cfg.ReleasePolicy = policy
	cfg.Notifier = quiet
	return cfg
}

// The bucket's counts, the same through either handle. slowConfig with
// the strict policy, two handles a and b on one file:
//
//	a.Reserve, b.Reserve   admitted at once (the burst)
//	a.Reserve              shaped: admitted after the bound, 4833 ms
//	b.Release(b's)         not refunded: a later debit (a's second) is not refunded
//	a.Release(a's second)  refunded: no debit after it
//	b.Observe(opened), a.Observe(throttled)   counted (adaptation off)
//
// Admitted 3, 1 after a wait of 4833 ms (≤ 5 s: 3; ≤ 2.5 s: 2); shaped 1;
// releases 1 refunded, 1 not; rate 1. The tokens depend on the time
// between the calls: at most the burst, 2.
const sharedExposition = helpDecisions + `pacer_decisions_total{bucket="shared",decision="admitted"} 2
pacer_decisions_total{bucket="shared",decision="waited"} 1
pacer_decisions_total{bucket="shared",decision="refused"} 0
pacer_decisions_total{bucket="shared",decision="booked"} 0
` + helpWait + `pacer_wait_seconds_bucket{bucket="shared",le="0.01"} 2
pacer_wait_seconds_bucket{bucket="shared",le="0.05"} 2
pacer_wait_seconds_bucket{bucket="shared",le="0.1"} 2
pacer_wait_seconds_bucket{bucket="shared",le="0.5"} 2
pacer_wait_seconds_bucket{bucket="shared",le="1"} 2
pacer_wait_seconds_bucket{bucket="shared",le="2.5"} 2
pacer_wait_seconds_bucket{bucket="shared",le="5"} 3
pacer_wait_seconds_bucket{bucket="shared",le="10"} 3
pacer_wait_seconds_bucket{bucket="shared",le="+Inf"} 3
pacer_wait_seconds_sum{bucket="shared"} 4.833
pacer_wait_seconds_count{bucket="shared"} 3
` + helpShaped + `pacer_shaped_total{bucket="shared"} 1
` + helpRedeemed + `pacer_redeemed_total{bucket="shared"} 0
` + helpReleases + `pacer_releases_total{bucket="shared",refunded="true"} 1
pacer_releases_total{bucket="shared",refunded="false"} 1
` + helpOutcomes + `pacer_upstream_outcomes_total{bucket="shared",outcome="opened"} 1
pacer_upstream_outcomes_total{bucket="shared",outcome="throttled"} 1
` + helpRegressions + `pacer_clock_regressions_total{bucket="shared"} 0
` + helpRate + `pacer_rate_in_force_per_minute{bucket="shared"} 1
` + helpPending + `pacer_bookings_pending{bucket="shared"} 0
`

// withoutTokens is every family of the set but pacer_tokens and
// pacer_fallbacks_total.
var withoutTokens = []string{metrics.DecisionsName, metrics.WaitSecondsName, metrics.ShapedName,
	metrics.RedeemedName, metrics.ReleasesName, metrics.UpstreamOutcomesName, metrics.ClockRegressionsName,
	metrics.RateInForceName, metrics.BookingsPendingName}

func TestSharedPacerBucketCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics-shared")
	open := func() *pacer.SharedPacer {
		s, err := pacer.OpenShared(path, slowConfig(pacer.ReleaseStrict))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	if d := must(a.Reserve())(t); !d.Admitted || d.Queued {
		t.Fatalf("a's first: %+v", d)
	}
	bFirst := must(b.Reserve())(t)
	if !bFirst.Admitted || bFirst.Queued {
		t.Fatalf("b's first: %+v", bFirst)
	}
	aSecond := must(a.Reserve())(t)
	if !aSecond.Admitted || aSecond.Path != pacer.PathShaped || aSecond.WaitMs != 4833 {
		t.Fatalf("a's second: %+v, want shaped after 4833 ms", aSecond)
	}
	if refunded := must(b.Release(bFirst.Ticket))(t); refunded {
		t.Fatal("b's release refunded past a later debit (strict policy)")
	}
	if refunded := must(a.Release(aSecond.Ticket))(t); !refunded {
		t.Fatal("a's release of the last debit did not refund")
	}
	must(b.Observe(pacer.OutcomeOpened))(t)
	must(a.Observe(pacer.OutcomeThrottled))(t)

	for name, h := range map[string]*pacer.SharedPacer{"a": a, "b": b} {
		reg := prometheus.NewRegistry()
		if _, err := metrics.Register(reg, metrics.Source{Bucket: "shared", Shared: h}); err != nil {
			t.Fatal(err)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(sharedExposition), withoutTokens...); err != nil {
			t.Fatalf("through %s: %v", name, err)
		}
		families := scrape(t, reg)
		checkAgainstDocs(t, families, "shared", metrics.FallbacksName)
		if tokens := families[metrics.TokensName].GetMetric()[0].GetGauge().GetValue(); tokens > 2 {
			t.Fatalf("through %s: %v tokens, more than the burst", name, tokens)
		}
	}
}

// openRedis is a RedisPacer on addr (closed when t ends).
func openRedis(t *testing.T, addr, key string, cfg pacer.Config, policy pacer.FailurePolicy) *pacer.RedisPacer {
	t.Helper()
	r, err := pacer.OpenRedis(pacer.RedisOptions{Addr: addr, Key: key, Config: cfg, OnFailure: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// A fleet client against a real redis-server (the script engine), on
// slowConfig with the refund policy; the server's clock decides:
//
//	Reserve ×2             admitted at once (the burst)
//	Reserve                shaped: after the bound, 4833 ms
//	Release(the shaped)    refunded (refund policy)
//	Observe opened, throttled   counted; adaptation off, nothing sent
//
// and a client of a server that is not there (a port nothing listens
// on), FailOpen: Reserve ×2 admitted at once by the policy, 2 fallbacks.
// A fleet client exports no pacer_tokens; its rate in force is the
// configured one (adaptation off).
const fleetExposition = helpDecisions + `pacer_decisions_total{bucket="fleet",decision="admitted"} 2
pacer_decisions_total{bucket="fleet",decision="waited"} 1
pacer_decisions_total{bucket="fleet",decision="refused"} 0
pacer_decisions_total{bucket="fleet",decision="booked"} 0
pacer_decisions_total{bucket="down",decision="admitted"} 2
pacer_decisions_total{bucket="down",decision="waited"} 0
pacer_decisions_total{bucket="down",decision="refused"} 0
pacer_decisions_total{bucket="down",decision="booked"} 0
` + helpWait + `pacer_wait_seconds_bucket{bucket="fleet",le="0.01"} 2
pacer_wait_seconds_bucket{bucket="fleet",le="0.05"} 2
pacer_wait_seconds_bucket{bucket="fleet",le="0.1"} 2
pacer_wait_seconds_bucket{bucket="fleet",le="0.5"} 2
pacer_wait_seconds_bucket{bucket="fleet",le="1"} 2
pacer_wait_seconds_bucket{bucket="fleet",le="2.5"} 2
pacer_wait_seconds_bucket{bucket="fleet",le="5"} 3
pacer_wait_seconds_bucket{bucket="fleet",le="10"} 3
pacer_wait_seconds_bucket{bucket="fleet",le="+Inf"} 3
pacer_wait_seconds_sum{bucket="fleet"} 4.833
pacer_wait_seconds_count{bucket="fleet"} 3
pacer_wait_seconds_bucket{bucket="down",le="0.01"} 2
pacer_wait_seconds_bucket{bucket="down",le="0.05"} 2
pacer_wait_seconds_bucket{bucket="down",le="0.1"} 2
pacer_wait_seconds_bucket{bucket="down",le="0.5"} 2
pacer_wait_seconds_bucket{bucket="down",le="1"} 2
pacer_wait_seconds_bucket{bucket="down",le="2.5"} 2
pacer_wait_seconds_bucket{bucket="down",le="5"} 2
pacer_wait_seconds_bucket{bucket="down",le="10"} 2
pacer_wait_seconds_bucket{bucket="down",le="+Inf"} 2
pacer_wait_seconds_sum{bucket="down"} 0
pacer_wait_seconds_count{bucket="down"} 2
` + helpShaped + `pacer_shaped_total{bucket="fleet"} 1
pacer_shaped_total{bucket="down"} 0
` + helpRedeemed + `pacer_redeemed_total{bucket="fleet"} 0
pacer_redeemed_total{bucket="down"} 0
` + helpReleases + `pacer_releases_total{bucket="fleet",refunded="true"} 1
pacer_releases_total{bucket="fleet",refunded="false"} 0
pacer_releases_total{bucket="down",refunded="true"} 0
pacer_releases_total{bucket="down",refunded="false"} 0
` + helpOutcomes + `pacer_upstream_outcomes_total{bucket="fleet",outcome="opened"} 1
pacer_upstream_outcomes_total{bucket="fleet",outcome="throttled"} 1
pacer_upstream_outcomes_total{bucket="down",outcome="opened"} 0
pacer_upstream_outcomes_total{bucket="down",outcome="throttled"} 0
` + helpRegressions + `pacer_clock_regressions_total{bucket="fleet"} 0
pacer_clock_regressions_total{bucket="down"} 0
` + helpRate + `pacer_rate_in_force_per_minute{bucket="fleet"} 1
pacer_rate_in_force_per_minute{bucket="down"} 60
` + helpPending + `pacer_bookings_pending{bucket="fleet"} 0
pacer_bookings_pending{bucket="down"} 0
` + helpFallbacks + `pacer_fallbacks_total{bucket="fleet"} 0
pacer_fallbacks_total{bucket="down"} 2
`

// commandsProcessed is the server's total_commands_processed (INFO
// stats), read through c.
func commandsProcessed(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_commands_processed in INFO stats:\n%s", info)
	return 0
}

func TestRedisPacerClientCounts(t *testing.T) {
	addr := startRedis(t)
	ctx := t.Context()
	fleet := openRedis(t, addr, "metrics:fleet", slowConfig(pacer.ReleaseRefund), pacer.FailClosed)
	for i := range 2 {
		if d := must(fleet.Reserve(ctx))(t); !d.Admitted || d.Queued || d.Fallback != "" {
			t.Fatalf("reserve %d: %+v", i, d)
		}
	}
	shaped := must(fleet.Reserve(ctx))(t)
	if !shaped.Admitted || shaped.Path != pacer.PathShaped || shaped.WaitMs != 4833 || shaped.Fallback != "" {
		t.Fatalf("third: %+v, want shaped after 4833 ms by the server", shaped)
	}
	if refunded := must(fleet.Release(ctx, shaped.Ticket))(t); !refunded {
		t.Fatal("the release did not refund")
	}
	must(fleet.Observe(ctx, pacer.OutcomeOpened))(t)
	must(fleet.Observe(ctx, pacer.OutcomeThrottled))(t)

	downCfg := pacer.DefaultConfig()
	downCfg.Notifier = quiet
	down := openRedis(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "metrics:down", downCfg, pacer.FailOpen)
	for i := range 2 {
		if d := must(down.Reserve(ctx))(t); !d.Admitted || d.Fallback != pacer.FailOpen {
			t.Fatalf("down %d: %+v, want admitted by FailOpen", i, d)
		}
	}

	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, metrics.Source{Bucket: "fleet", Redis: fleet},
		metrics.Source{Bucket: "down", Redis: down}); err != nil {
		t.Fatal(err)
	}
	// Scrapes send nothing to Redis: the server counts only the INFO
	// before them until the INFO after (both on one connection, opened
	// before: no handshake between them).
	control := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	defer control.Close()
	before := commandsProcessed(t, control)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fleetExposition)); err != nil {
		t.Fatal(err)
	}
	families := scrape(t, reg)
	if after := commandsProcessed(t, control); after != before+1 {
		t.Fatalf("the server processed %d commands during the scrapes, want only the first INFO", after-before)
	}
	// Every family of the table but pacer_tokens, for both buckets.
	fleetOnly := map[string]*dto.MetricFamily{}
	for name, f := range families {
		kept := &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == metrics.BucketLabel && lp.GetValue() == "fleet" {
					kept.Metric = append(kept.Metric, m)
				}
			}
		}
		fleetOnly[name] = kept
	}
	checkAgainstDocs(t, fleetOnly, "fleet", metrics.TokensName)
}
