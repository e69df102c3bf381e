//! `pacer watch`: what a bucket is doing, read every interval without
//! writing to it. A shared-memory bucket is read from its file
//! ([`shared`]), a Redis bucket with the read-only info op ([`fleet`]).
//! Each reading's counts go into a short history, from which the last
//! minute's decisions, its waits and the admissions of the last minutes
//! are differences; `--prometheus` serves the same readings as the metric
//! set of docs/metrics.md ([`exposition`]).

pub mod exposition;
pub mod fleet;
pub mod shared;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pacer_core::{CounterSnapshot, UNITS_PER_TOKEN, WAIT_BOUNDS_MS};
use serde::Serialize;

/// One minute, ms.
const MINUTE_MS: u64 = 60_000;

/// Minutes of admissions the sparkline shows (and the history keeps).
pub const SPARK_MINUTES: usize = 10;

/// The sparkline's bars, lowest first.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Wait histogram bounds, one per bucket of [`WAIT_BOUNDS_MS`].
const WAIT_BUCKETS: usize = WAIT_BOUNDS_MS.len();

/// A bucket's configuration as it stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BucketConfig {
    /// New connections per minute (for an adaptive bucket, its start).
    pub rate_per_min: u32,
    /// Connections admitted with no wait after an idle spell.
    pub burst: u32,
    /// The request's no-data deadline, ms.
    pub idle_timeout_ms: u64,
    /// The client's retry count.
    pub max_retries: u32,
    /// `refund` or `strict`.
    pub release_policy: String,
    /// Adaptive pacing's lowest rate; `None`: adaptation off.
    pub adaptive_floor_per_min: Option<u32>,
    /// Adaptive pacing's highest rate; `None`: adaptation off.
    pub adaptive_ceiling_per_min: Option<u32>,
}

/// A bucket's counts in the metric set's kinds (docs/metrics.md, "The
/// set"). Every bucket keeps them all but the clock regressions, which a
/// Redis key does not keep (`None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Every admission, at once or after a wait, a redeemed booking's too.
    pub admissions: u64,
    /// Admissions at once (`decision="admitted"`).
    pub admitted: u64,
    /// Admissions after a wait (`decision="waited"`).
    pub waited: u64,
    /// Refusals without a booking (`decision="refused"`).
    pub refused: u64,
    /// Refusals with a booking in line (`decision="booked"`).
    pub booked: u64,
    /// Bookings admitted on their retry.
    pub redeemed: u64,
    /// Admissions by the shaping rule.
    pub shaped: u64,
    /// Releases of a ticket.
    pub releases: u64,
    /// Releases refunded to the bucket.
    pub refunded: u64,
    /// Releases not refunded (the policy refused, or the ticket was spent).
    pub release_refused: u64,
    /// Upstream answers reported as opened.
    pub opened: u64,
    /// Upstream answers reported as throttled.
    pub throttled: u64,
    /// Calls whose clock reading was behind the latest one (`None`: a
    /// Redis key does not keep them).
    pub clock_regressions: Option<u64>,
    /// The admissions' waits, summed, ms.
    pub wait_ms_total: u64,
    /// Admissions whose wait was at most `WAIT_BOUNDS_MS[i]` ms, the
    /// immediate ones included (the histogram's cumulative buckets).
    pub wait_le: [u64; WAIT_BUCKETS],
}

impl Counts {
    /// The counts of a core counter snapshot (a shared bucket's file).
    pub fn from_snapshot(s: &CounterSnapshot) -> Counts {
        Counts {
            admissions: s.admitted,
            admitted: s.admitted.wrapping_sub(s.admitted_after_wait),
            waited: s.admitted_after_wait,
            refused: s.refused.wrapping_sub(s.booked),
            booked: s.booked,
            redeemed: s.redeemed,
            shaped: s.shaped,
            releases: s.released,
            refunded: s.refunded,
            release_refused: s.released.wrapping_sub(s.refunded),
            opened: s.opened,
            throttled: s.throttled,
            clock_regressions: Some(s.clock_regressions),
            wait_ms_total: s.wait_ms_total,
            wait_le: std::array::from_fn(|i| s.wait_le(i)),
        }
    }

    /// What was counted since `earlier` (wrapping, as the counts do).
    pub fn since(&self, earlier: &Counts) -> Counts {
        let d = |now: u64, then: u64| now.wrapping_sub(then);
        let o = |now: Option<u64>, then: Option<u64>| Some(now?.wrapping_sub(then?));
        Counts {
            admissions: d(self.admissions, earlier.admissions),
            admitted: d(self.admitted, earlier.admitted),
            waited: d(self.waited, earlier.waited),
            refused: d(self.refused, earlier.refused),
            booked: d(self.booked, earlier.booked),
            redeemed: d(self.redeemed, earlier.redeemed),
            shaped: d(self.shaped, earlier.shaped),
            releases: d(self.releases, earlier.releases),
            refunded: d(self.refunded, earlier.refunded),
            release_refused: d(self.release_refused, earlier.release_refused),
            opened: d(self.opened, earlier.opened),
            throttled: d(self.throttled, earlier.throttled),
            clock_regressions: o(self.clock_regressions, earlier.clock_regressions),
            wait_ms_total: d(self.wait_ms_total, earlier.wait_ms_total),
            wait_le: std::array::from_fn(|i| d(self.wait_le[i], earlier.wait_le[i])),
        }
    }
}

/// One reading of a bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// Its configuration.
    pub config: BucketConfig,
    /// The rate it decides at now.
    pub rate_in_force_per_min: u32,
    /// Tokens now (negative: debt).
    pub tokens: f64,
    /// The line of debited slots still ahead.
    pub queue: Queue,
    /// Its counts.
    pub counts: Counts,
}

/// The requests a bucket has debited whose slots are still ahead: the
/// admissions sleeping until theirs and the bookings not yet due, the
/// whole bucket's line whoever holds them. Every debit takes one token,
/// and the `k`-th latest slot comes when the level refills to `−(k−1)`
/// tokens, so a level of `L` tokens below zero leaves `ceil(−L)` slots
/// ahead. An admission never waits past the wait bound (its debt stops at
/// the floor, `−max_debt`), so the slots beyond the bound are bookings,
/// `ceil((−L − max_debt) / 1 token)` of them; a booking within the bound
/// may be redeemed on its holder's next retry, and is counted in
/// `slots_ahead` alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Queue {
    /// Debited slots later than now.
    pub slots_ahead: u64,
    /// Of them, slots more than the wait bound ahead: bookings.
    pub booked_beyond_bound: u64,
}

impl Queue {
    /// The line at a level of `level_units` with a debt floor of
    /// `max_debt_units` (one token is [`UNITS_PER_TOKEN`] units).
    pub fn at(level_units: i64, max_debt_units: i64) -> Queue {
        let ahead = |debt: i128| match debt {
            d if d <= 0 => 0,
            d => u64::try_from((d + UNITS_PER_TOKEN as i128 - 1) / UNITS_PER_TOKEN as i128)
                .unwrap_or(u64::MAX),
        };
        let debt = -(level_units as i128);
        Queue {
            slots_ahead: ahead(debt),
            booked_beyond_bound: ahead(debt - max_debt_units.max(0) as i128),
        }
    }
}

/// A bucket the watch reads. Reading never writes to it.
pub trait Bucket: Send {
    /// Reads it now.
    fn read(&mut self) -> Result<Reading, String>;
    /// `shared` or `redis`.
    fn source(&self) -> &'static str;
    /// Where it is, for the display's first line.
    fn describe(&self) -> String;
}

/// Readings' counts over time: enough to difference the last
/// [`SPARK_MINUTES`] minutes.
#[derive(Debug, Default)]
pub struct History {
    /// `(ms since the watch started, counts)`, oldest first.
    samples: VecDeque<(u64, Counts)>,
}

/// The counts of the last minute (or of what there is of it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LastMinute {
    /// A minute of samples: the differences run from the newest sample at
    /// least 60 s old. `false`: from the first sample, less than a minute.
    pub complete: bool,
    /// The time the differences cover, ms.
    pub window_ms: u64,
    /// Every admission.
    pub admissions: u64,
    /// Admissions at once.
    pub admitted: u64,
    /// Admissions after a wait.
    pub waited: u64,
    /// Refusals without a booking.
    pub refused: u64,
    /// Refusals with a booking.
    pub booked: u64,
    /// Bookings admitted on their retry.
    pub redeemed: u64,
    /// Upstream answers: opened.
    pub opened: u64,
    /// Upstream answers: throttled.
    pub throttled: u64,
    /// The median wait, ms, from the histogram (as Prometheus'
    /// `histogram_quantile` would say); `None` without admissions.
    pub wait_p50_ms: Option<f64>,
    /// The 90th percentile wait, ms.
    pub wait_p90_ms: Option<f64>,
}

impl History {
    /// Adds a reading's counts taken `at_ms` after the watch started (not
    /// before the last one), dropping what the sparkline no longer needs.
    pub fn push(&mut self, at_ms: u64, counts: Counts) {
        self.samples.push_back((at_ms, counts));
        let keep_from = at_ms.saturating_sub(SPARK_MINUTES as u64 * MINUTE_MS);
        // Keep the newest sample at or before `keep_from`: the oldest
        // minute is differenced from it.
        while self.samples.len() >= 2 && self.samples[1].0 <= keep_from {
            self.samples.pop_front();
        }
    }

    /// The newest sample at or before `t`.
    fn at_or_before(&self, t: u64) -> Option<&(u64, Counts)> {
        match self.samples.partition_point(|(at, _)| *at <= t) {
            0 => None,
            n => self.samples.get(n - 1),
        }
    }

    /// The last minute's differences (empty before the first sample).
    pub fn last_minute(&self) -> Option<LastMinute> {
        let (now, counts) = self.samples.back()?;
        let full = now
            .checked_sub(MINUTE_MS)
            .and_then(|t| self.at_or_before(t));
        let (complete, (then, base)) = match full {
            Some(sample) => (true, sample),
            None => (false, self.samples.front()?),
        };
        let diff = counts.since(base);
        let quantile = |q: f64| wait_quantile_ms(q, &diff.wait_le, diff.admissions);
        Some(LastMinute {
            complete,
            window_ms: now - then,
            admissions: diff.admissions,
            admitted: diff.admitted,
            waited: diff.waited,
            refused: diff.refused,
            booked: diff.booked,
            redeemed: diff.redeemed,
            opened: diff.opened,
            throttled: diff.throttled,
            wait_p50_ms: quantile(0.5),
            wait_p90_ms: quantile(0.9),
        })
    }

    /// Admissions in each whole minute before the newest sample, oldest
    /// first: minute k (0 the latest) from the newest sample at or before
    /// `now − (k+1)·60 s` to the newest at or before `now − k·60 s`; as
    /// many minutes as the history reaches back, at most [`SPARK_MINUTES`].
    pub fn admissions_per_minute(&self) -> Vec<u64> {
        let Some((now, _)) = self.samples.back() else {
            return Vec::new();
        };
        let mut minutes = Vec::new();
        for k in 0..SPARK_MINUTES as u64 {
            let end = now
                .checked_sub(k * MINUTE_MS)
                .and_then(|t| self.at_or_before(t));
            let start = now
                .checked_sub((k + 1) * MINUTE_MS)
                .and_then(|t| self.at_or_before(t));
            match (start, end) {
                (Some((_, start)), Some((_, end))) => {
                    minutes.push(end.admissions.wrapping_sub(start.admissions))
                }
                _ => break,
            }
        }
        minutes.reverse();
        minutes
    }
}

/// The `q`-quantile of the waits, ms, from a histogram's cumulative counts
/// `le[i]` (admissions with a wait of at most `WAIT_BOUNDS_MS[i]`) and the
/// admissions (the `+Inf` bucket), the way Prometheus' `histogram_quantile`
/// computes it: the rank `q · total` falls in the first bucket whose
/// cumulative count reaches it, and is placed linearly between that
/// bucket's bounds (0 below the first); a rank in the `+Inf` bucket is the
/// highest finite bound. `None` without admissions.
pub fn wait_quantile_ms(q: f64, le: &[u64; WAIT_BUCKETS], total: u64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let Some(b) = le.iter().position(|&count| count as f64 >= rank) else {
        return Some(WAIT_BOUNDS_MS[WAIT_BUCKETS - 1] as f64);
    };
    let (lower, below) = match b {
        0 => (0.0, 0.0),
        _ => (WAIT_BOUNDS_MS[b - 1] as f64, le[b - 1] as f64),
    };
    let upper = WAIT_BOUNDS_MS[b] as f64;
    let in_bucket = le[b] as f64 - below;
    Some(lower + (upper - lower) * (rank - below) / in_bucket)
}

/// `values` as bars scaled to the largest (all lowest when every value is
/// 0).
pub fn sparkline(values: &[u64]) -> String {
    let peak = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| match peak {
            0 => BARS[0],
            _ => {
                BARS[((v as u128 * (BARS.len() as u128 - 1) + peak as u128 / 2) / peak as u128)
                    as usize]
            }
        })
        .collect()
}

/// One interval's output: a JSON line with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Frame {
    /// `shared` or `redis`.
    pub source: &'static str,
    /// The bucket label (`--bucket`, or the shared name or the key).
    pub bucket: String,
    /// When the reading was taken, ms since the watch started.
    pub at_ms: u64,
    /// The bucket's configuration.
    pub config: BucketConfig,
    /// The rate it decides at now, per minute.
    pub rate_in_force_per_min: u32,
    /// Tokens now (negative: debt).
    pub tokens: f64,
    /// The debited slots still ahead.
    pub queue: Queue,
    /// The counts since the bucket was made.
    pub totals: Counts,
    /// The last minute's decisions, waits and upstream answers.
    pub last_minute: LastMinute,
    /// Admissions in each of the last whole minutes, oldest first.
    pub admissions_per_minute: Vec<u64>,
}

/// The frame as text, for a person.
pub fn render(frame: &Frame, description: &str) -> String {
    let c = &frame.config;
    let mut text = String::new();
    let adaptive = match (c.adaptive_floor_per_min, c.adaptive_ceiling_per_min) {
        (Some(floor), Some(ceiling)) => format!(", adaptive {floor}..{ceiling}/min"),
        _ => String::new(),
    };
    let _ = writeln!(
        text,
        "pacer watch: {description} — rate {}/min, burst {}, idle {} ms, {} retries, {}{adaptive}",
        c.rate_per_min, c.burst, c.idle_timeout_ms, c.max_retries, c.release_policy
    );
    let _ = writeln!(
        text,
        "rate in force     {}/min",
        frame.rate_in_force_per_min
    );
    let _ = writeln!(text, "tokens            {:.2}", frame.tokens);
    let _ = writeln!(
        text,
        "queue             {} slots ahead ({} booked beyond the wait bound)",
        frame.queue.slots_ahead, frame.queue.booked_beyond_bound
    );
    let m = &frame.last_minute;
    let seconds = m.window_ms as f64 / 1000.0;
    let _ = match m.complete {
        true => writeln!(text, "last minute       (differences over {seconds:.1} s)"),
        false => writeln!(
            text,
            "last minute       less than a minute of samples: differences over {seconds:.1} s"
        ),
    };
    let _ = writeln!(
        text,
        "  decisions       admitted {}, waited {}, refused {}, booked {}",
        m.admitted, m.waited, m.refused, m.booked
    );
    let _ = match (m.wait_p50_ms, m.wait_p90_ms) {
        (Some(p50), Some(p90)) => {
            writeln!(text, "  waits           p50 {p50:.0} ms, p90 {p90:.0} ms")
        }
        _ => writeln!(text, "  waits           no admissions"),
    };
    let _ = writeln!(text, "  redeemed        {}", m.redeemed);
    let _ = writeln!(
        text,
        "  upstream        opened {}, throttled {}",
        m.opened, m.throttled
    );
    let minutes = &frame.admissions_per_minute;
    let _ = match minutes.len() {
        0 => writeln!(text, "admissions/min    (after a minute of samples)"),
        n => writeln!(
            text,
            "admissions/min    {}  last {n} min, oldest first: {}",
            sparkline(minutes),
            minutes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    };
    let t = &frame.totals;
    let _ = writeln!(
        text,
        "totals            admitted {}, waited {}, refused {}, booked {}, redeemed {}",
        t.admitted, t.waited, t.refused, t.booked, t.redeemed
    );
    let _ = writeln!(
        text,
        "                  releases {} ({} refunded, {} not)",
        t.releases, t.refunded, t.release_refused
    );
    let _ = writeln!(
        text,
        "                  upstream opened {}, throttled {}",
        t.opened, t.throttled
    );
    text
}

/// How a watch runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Between two readings, ms.
    pub interval_ms: u64,
    /// Stop after this many readings (`None`: until stopped).
    pub count: Option<u64>,
    /// JSON lines instead of text.
    pub json: bool,
    /// Clear the terminal before each text frame.
    pub clear: bool,
    /// The `bucket` label and the JSON's `bucket`.
    pub label: String,
    /// Serve `/metrics` here.
    pub prometheus: Option<String>,
}

/// Reads `bucket` every interval and writes a frame to `out` each time;
/// with `--prometheus`, serves `/metrics` (its bound address is written to
/// `log` first). The first reading comes before anything is served or
/// written, so a bucket that cannot be read is one error and no output. A
/// closed `out` (`| head`) ends the watch quietly.
pub fn run(
    bucket: Box<dyn Bucket>,
    options: &Options,
    out: &mut impl Write,
    log: &mut impl Write,
) -> Result<(), String> {
    let source = bucket.source();
    let description = bucket.describe();
    let bucket = Arc::new(Mutex::new(bucket));
    let start = Instant::now();
    let first = lock(&bucket).read()?;
    if let Some(address) = &options.prometheus {
        let bound = exposition::serve(address, Arc::clone(&bucket), options.label.clone())?;
        writeln!(log, "pacer: serving /metrics on http://{bound}/metrics")
            .and_then(|_| log.flush())
            .map_err(|e| format!("cannot write to stderr: {e}"))?;
    }
    let mut history = History::default();
    let mut reading = Some(first);
    let mut taken = 0u64;
    loop {
        let reading_now = match reading.take() {
            Some(reading) => reading,
            None => lock(&bucket).read()?,
        };
        let at_ms = start.elapsed().as_millis() as u64;
        history.push(at_ms, reading_now.counts);
        let frame = Frame {
            source,
            bucket: options.label.clone(),
            at_ms,
            config: reading_now.config,
            rate_in_force_per_min: reading_now.rate_in_force_per_min,
            tokens: reading_now.tokens,
            queue: reading_now.queue,
            totals: reading_now.counts,
            last_minute: history.last_minute().expect("a sample was just pushed"),
            admissions_per_minute: history.admissions_per_minute(),
        };
        let text = match options.json {
            true => {
                let mut line = serde_json::to_string(&frame)
                    .map_err(|e| format!("cannot encode JSON: {e}"))?;
                line.push('\n');
                line
            }
            false if options.clear => format!("\x1b[H\x1b[2J{}", render(&frame, &description)),
            false => format!("{}\n", render(&frame, &description)),
        };
        match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(format!("cannot write output: {e}")),
        }
        taken += 1;
        if options.count.is_some_and(|count| taken >= count) {
            return Ok(());
        }
        // On a fixed schedule from the start, whatever a reading took.
        let next = Duration::from_millis(taken.saturating_mul(options.interval_ms));
        if let Some(pause) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(pause);
        }
    }
}

/// The bucket, whoever held it last (a reading never leaves it half
/// changed: a panic while it is held cannot corrupt what the next reads).
fn lock(bucket: &Mutex<Box<dyn Bucket>>) -> std::sync::MutexGuard<'_, Box<dyn Bucket>> {
    bucket
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(admissions: u64) -> Counts {
        Counts {
            admissions,
            ..Counts::default()
        }
    }

    /// The watch tests' `bookings` bucket (rate 60/min: 60 units a ms, a
    /// token of 60000 units a second; wait bound 2000 ms, so a floor of
    /// 120000 units; burst 1) after its four debits at t0: admissions
    /// with slots t0, t0+1000, t0+2000 and a booking with slot t0+3000,
    /// a level of 60000 − 4·60000 = −180000 units at t0. Counted by hand:
    /// the slots later than each moment, and of them those more than
    /// 2000 ms later.
    #[test]
    fn the_queue_is_the_slots_still_ahead_and_the_bookings_past_the_bound() {
        let floor = 120_000;
        let level_at = |ms: i64| -180_000 + 60 * ms;
        // (ms after t0, slots ahead, of them past the bound).
        let table = [
            // t0+1000, +2000, +3000 ahead; +3000 beyond t0+2000.
            (0, 3, 1),
            // The same three; +3000 beyond t0+2500.
            (500, 3, 1),
            // Still three; +3000 is 2001 ms away.
            (999, 3, 1),
            // t0+1000 is now, not ahead; +3000 is exactly the bound away.
            (1000, 2, 0),
            // Only t0+3000.
            (2500, 1, 0),
            // The line is empty, whatever the level.
            (3000, 0, 0),
            (3001, 0, 0),
            (60_000, 0, 0),
        ];
        for (ms, slots_ahead, booked_beyond_bound) in table {
            let expected = Queue {
                slots_ahead,
                booked_beyond_bound,
            };
            assert_eq!(Queue::at(level_at(ms), floor), expected, "t0+{ms}");
        }
        // A bucket with no floor (pacing off, or a zero bound): every
        // slot ahead is past the bound.
        assert_eq!(
            Queue::at(-1, 0),
            Queue {
                slots_ahead: 1,
                booked_beyond_bound: 1
            }
        );
        // The extremes do not overflow.
        assert_eq!(
            Queue::at(i64::MIN, i64::MAX),
            Queue {
                slots_ahead: (1u64 << 63).div_ceil(60_000),
                booked_beyond_bound: 1
            }
        );
        assert_eq!(Queue::at(i64::MAX, 0), Queue::default());
    }

    /// Ten immediate admissions and waits of 1000, 2000, 3000 and 4000 ms
    /// (bounds 10, 50, 100, 500, 1000, 2500, 5000, 10000): cumulative 10
    /// up to 500, 11 at 1000, 12 at 2500, 14 from 5000; 14 in all. p50:
    /// rank 7 in the first bucket (0, 10], 7 of its 10: 7 ms. p90: rank
    /// 12.6 in (2500, 5000], which holds 2 (12 below it): 2500 + 2500 ·
    /// 0.6 / 2 = 3250 ms.
    #[test]
    fn quantiles_interpolate_inside_the_bucket_like_histogram_quantile() {
        let le = [10, 10, 10, 10, 11, 12, 14, 14];
        let near = |got: Option<f64>, want: f64| {
            let got = got.expect("a quantile");
            assert!((got - want).abs() < 1e-6, "{got} is not {want}");
        };
        near(wait_quantile_ms(0.5, &le, 14), 7.0);
        // 0.9 · 14 is 12.6 to within a rounding of the last bit.
        near(wait_quantile_ms(0.9, &le, 14), 3250.0);
        // No admissions: no quantile.
        assert_eq!(wait_quantile_ms(0.5, &[0; 8], 0), None);
        // Two admissions, both above 10 s (in +Inf only): the highest
        // finite bound, as Prometheus answers.
        assert_eq!(wait_quantile_ms(0.5, &[0; 8], 2), Some(10000.0));
        // Four waits of 30 ms: all in (10, 50]; p50 rank 2 of 4: 10 + 40 ·
        // 2/4 = 30 ms.
        assert_eq!(
            wait_quantile_ms(0.5, &[0, 4, 4, 4, 4, 4, 4, 4], 4),
            Some(30.0)
        );
    }

    #[test]
    fn the_sparkline_scales_to_the_largest_minute() {
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&[0, 0]), "▁▁");
        // 0 → lowest, 70 → highest, 35 → 3.5 of 7 steps, rounded to 4.
        assert_eq!(sparkline(&[0, 35, 70]), "▁▅█");
    }

    /// Samples at 0, 45, 60, 90 and 120 s: after 45 s there is less than
    /// a minute (differences from the first sample); from 60 s on the last
    /// minute runs from the newest sample at least 60 s old: at 90 s the
    /// one at 0 s (the one at 45 s is younger), at 120 s the one at 60 s.
    #[test]
    fn the_last_minute_is_differenced_from_the_newest_sample_a_minute_old() {
        let mut history = History::default();
        history.push(0, counts(0));
        history.push(45_000, counts(7));
        let m = history.last_minute().unwrap();
        assert_eq!((m.complete, m.window_ms, m.admissions), (false, 45_000, 7));
        history.push(60_000, counts(10));
        let m = history.last_minute().unwrap();
        assert_eq!((m.complete, m.window_ms, m.admissions), (true, 60_000, 10));
        history.push(90_000, counts(15));
        let m = history.last_minute().unwrap();
        // The newest at or before 30 s is the one at 0 s.
        assert_eq!((m.complete, m.window_ms, m.admissions), (true, 90_000, 15));
        assert_eq!(history.admissions_per_minute(), vec![15]);
        // At 120 s: from the sample at 60 s, not the first.
        history.push(120_000, counts(21));
        let m = history.last_minute().unwrap();
        assert_eq!((m.complete, m.window_ms, m.admissions), (true, 60_000, 11));
        assert_eq!(history.admissions_per_minute(), vec![10, 11]);
    }

    /// One sample a minute, admissions 0, 3, 9, 9, 12: minutes of 3, 6, 0,
    /// 3, oldest first; after 12 minutes the history keeps the 10 the
    /// sparkline shows (and the sample they start from).
    #[test]
    fn minutes_of_admissions_oldest_first_and_at_most_ten() {
        let mut history = History::default();
        for (minute, admissions) in [0, 3, 9, 9, 12].into_iter().enumerate() {
            history.push(minute as u64 * MINUTE_MS, counts(admissions));
        }
        assert_eq!(history.admissions_per_minute(), vec![3, 6, 0, 3]);
        for minute in 5..=12u64 {
            history.push(minute * MINUTE_MS, counts(12 + minute));
        }
        let minutes = history.admissions_per_minute();
        assert_eq!(minutes.len(), SPARK_MINUTES);
        // Minutes 3..12: 9→9 (0), then 12, 17 (+5), 18, 19, … (+1 each).
        assert_eq!(minutes, vec![0, 3, 5, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(history.samples.len(), SPARK_MINUTES + 1);
    }

    #[test]
    fn differences_wrap_like_the_counts_and_keep_what_is_not_kept() {
        let then = Counts {
            admissions: u64::MAX,
            ..Counts::default()
        };
        let now = Counts {
            admissions: 1,
            clock_regressions: Some(3),
            ..Counts::default()
        };
        let diff = now.since(&then);
        assert_eq!(diff.admissions, 2);
        // Clock regressions kept now but not then: not a difference.
        assert_eq!(diff.clock_regressions, None);
    }
}
