//! `pacer watch --prometheus ADDR`: `/metrics` over HTTP (tiny_http), the
//! metric set of docs/metrics.md encoded by the `prometheus-client` crate.
//! Each scrape reads the bucket then (nothing is kept between scrapes) and
//! hands the reading to a collector on a registry of its own.
//!
//! A Redis bucket's key (key format 2, docs/redis.md) keeps every count
//! but the clock regressions: its exposition has every metric a shared
//! bucket's has except `pacer_clock_regressions`. Neither has
//! `pacer_bookings_pending` (bookings held in a process) or
//! `pacer_fallbacks_total` (fleet clients only).

use std::sync::{Arc, Mutex};

use pacer_core::WAIT_BOUNDS_MS;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{lock, Bucket, Reading};

/// One scrape's reading of one bucket, as the metric set.
#[derive(Debug)]
pub struct Exposition {
    /// The `bucket` label.
    pub label: String,
    /// What the bucket said.
    pub reading: Reading,
}

impl Exposition {
    /// Counters of one family, one series per `(label value, count)`.
    fn counters(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        label: &str,
        series: &[(&str, u64)],
    ) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (value, count) in series {
            let labels = [("bucket", self.label.as_str()), (label, value)];
            ConstCounter::new(*count).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A counter of one series, left out when not kept.
    fn counter(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        count: Option<u64>,
    ) -> Result<(), std::fmt::Error> {
        let Some(count) = count else {
            return Ok(());
        };
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        let labels = [("bucket", self.label.as_str())];
        ConstCounter::new(count).encode(metric.encode_family(&labels)?)
    }

    fn gauge(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: f64,
    ) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        let labels = [("bucket", self.label.as_str())];
        ConstGauge::new(value).encode(metric.encode_family(&labels)?)
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.reading.counts;
        let e = &mut encoder;
        // Names as registered; the encoder adds `_total` to counters.
        self.counters(
            e,
            "pacer_decisions",
            "Answers to requests for a new connection, by decision.",
            "decision",
            &[
                ("admitted", c.admitted),
                ("waited", c.waited),
                ("refused", c.refused),
                ("booked", c.booked),
            ],
        )?;
        let le = &c.wait_le;
        let mut metric = e.encode_descriptor(
            "pacer_wait_seconds",
            "The wait of every admission (0 for an immediate one).",
            None,
            MetricType::Histogram,
        )?;
        // The encoder takes each bucket's own count and sums them; `+Inf`
        // and `_count` are every admission.
        let buckets: Vec<(f64, u64)> = (0..WAIT_BOUNDS_MS.len())
            .map(|i| {
                let below = if i == 0 { 0 } else { le[i - 1] };
                (WAIT_BOUNDS_MS[i] as f64 / 1000.0, le[i].wrapping_sub(below))
            })
            .collect();
        let labels = [("bucket", self.label.as_str())];
        metric
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(
                c.wait_ms_total as f64 / 1000.0,
                c.admissions,
                &buckets,
                None,
            )?;
        self.counter(
            e,
            "pacer_shaped",
            "Admissions by the shaping rule.",
            Some(c.shaped),
        )?;
        self.counter(
            e,
            "pacer_redeemed",
            "Bookings admitted when presented on their retry.",
            Some(c.redeemed),
        )?;
        self.counters(
            e,
            "pacer_releases",
            "Releases of a ticket, refunded to the bucket or not.",
            "refunded",
            &[("true", c.refunded), ("false", c.release_refused)],
        )?;
        self.counters(
            e,
            "pacer_upstream_outcomes",
            "What the upstream answered to new connections, as reported to observe.",
            "outcome",
            &[("opened", c.opened), ("throttled", c.throttled)],
        )?;
        self.counter(
            e,
            "pacer_clock_regressions",
            "Calls whose clock reading was behind the latest one.",
            c.clock_regressions,
        )?;
        self.gauge(
            e,
            "pacer_rate_in_force_per_minute",
            "The rate the pacer decides at now, new connections per minute.",
            f64::from(self.reading.rate_in_force_per_min),
        )?;
        self.gauge(
            e,
            "pacer_tokens",
            "Tokens in the bucket now (negative: debt).",
            self.reading.tokens,
        )
    }
}

/// The exposition of `reading` under `label`: OpenMetrics text when
/// `openmetrics`, else the Prometheus text format 0.0.4. Gives the body
/// and its content type.
pub fn encode(
    label: &str,
    reading: Reading,
    openmetrics: bool,
) -> Result<(String, &'static str), String> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition {
        label: label.to_string(),
        reading,
    }));
    let mut body = String::new();
    let content_type = match openmetrics {
        true => {
            prometheus_client::encoding::text::encode(&mut body, &registry)
                .map_err(|_| "cannot encode the metrics".to_string())?;
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        }
        false => {
            prometheus_client::encoding::prometheus_text::encode(&mut body, &registry)
                .map_err(|_| "cannot encode the metrics".to_string())?;
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE
        }
    };
    Ok((body, content_type))
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

/// Binds `address` and answers `GET /metrics` on a thread of its own
/// (reading `bucket` for each scrape) for as long as the process runs.
/// Gives the address bound (port 0: the one the system chose).
pub fn serve(
    address: &str,
    bucket: Arc<Mutex<Box<dyn Bucket>>>,
    label: String,
) -> Result<String, String> {
    let server = tiny_http::Server::http(address)
        .map_err(|e| format!("cannot serve /metrics on {address}: {e}"))?;
    let bound = match server.server_addr().to_ip() {
        Some(ip) => ip.to_string(),
        None => address.to_string(),
    };
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let response = respond(&request, &bucket, &label);
            // A scraper that went away is not the watch's problem.
            let _ = request.respond(response);
        }
    });
    Ok(bound)
}

fn respond(
    request: &tiny_http::Request,
    bucket: &Mutex<Box<dyn Bucket>>,
    label: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let text = |status: u16, body: String| {
        tiny_http::Response::from_string(body)
            .with_status_code(status)
            .with_header(header("Content-Type", "text/plain; charset=utf-8"))
    };
    let path = request.url().split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return text(404, "not found: the metrics are at /metrics\n".into());
    }
    if !matches!(
        request.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    ) {
        return text(405, "only GET /metrics\n".into());
    }
    let openmetrics = request.headers().iter().any(|h| {
        h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text")
    });
    let reading = lock(bucket).read();
    match reading.and_then(|reading| encode(label, reading, openmetrics)) {
        Ok((body, content_type)) => {
            tiny_http::Response::from_string(body).with_header(header("Content-Type", content_type))
        }
        Err(message) => text(503, format!("pacer: {message}\n")),
    }
}
