//! The report as text: one run ([`render`], with several machines the two
//! arrangements side by side) and the booking comparison
//! ([`render_comparison`]).

use super::config::{Design, OnRefusal};
use super::report::{ArrangementReport, MachinesReport, SimReport};
use crate::stats::percent;

fn seconds(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0))
}

/// The human-readable report; `per_minute` adds the minute-by-minute table.
pub fn render(report: &SimReport, per_minute: bool) -> String {
    let s = &report.settings;
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    let load = match s.load {
        "closed" => format!(
            "closed loop: {} agents, every turn needs a new connection, {} ms turns{}{}",
            s.agents.unwrap_or(0),
            s.turn_ms,
            if s.turn_jitter_ms > 0 {
                format!(" ± {} ms", s.turn_jitter_ms)
            } else {
                String::new()
            },
            if s.think_ms.unwrap_or(0) > 0 {
                format!(", {} ms think time", s.think_ms.unwrap_or(0))
            } else {
                String::new()
            },
        ),
        _ => format!(
            "open loop: {:.2} new requests per minute ({}), refused requests {}",
            s.offered_per_min.unwrap_or(0.0),
            s.arrivals.unwrap_or("periodic"),
            match s.on_refusal {
                Some(OnRefusal::Drop) => "dropped (no retry)",
                _ => "retry per the SDK rule",
            }
        ),
    };
    let machines = report.machines.as_ref();
    let load = match machines {
        Some(m) => format!("{} machines, each with its own {load}", m.machines),
        None => load,
    };
    line(format!(
        "pacer simulate — {load}; {} s virtual, seed {}",
        s.duration_ms as f64 / 1000.0,
        s.seed
    ));
    line(format!(
        "design: {} (mode {}): rate {}/min, burst {}, bound {} ms, hint cap {} s, {} retries, idle timeout {} ms, release policy {}",
        match (s.design, s.booking) {
            (Design::Paced, false) => "this design",
            (Design::Paced, true) => "this design with bookings",
            (Design::AdmitAnyway, _) => "admit anyway (the rejected design)",
        },
        s.mode,
        s.rate_per_min,
        s.burst,
        s.bound_ms,
        s.hint_cap_s,
        s.max_retries,
        s.idle_timeout_ms,
        s.release_policy
    ));
    if let Some(limit) = s.upstream_limit_per_min {
        let model = s.upstream_model.unwrap_or_default();
        line(format!(
            "upstream: {}; a throttled connection is retried on the client's ladder",
            model.describe(limit)
        ));
    }
    if let (Some(floor), Some(ceiling)) = (s.adaptive_floor_per_min, s.adaptive_ceiling_per_min) {
        let rates = report.rate_in_force_trace.iter().map(|p| p[1]);
        line(format!(
            "adaptive pacing (SPEC §14): from {}/min within [{floor}, {ceiling}]; rate in force min {}, max {}, at the end {}",
            s.rate_per_min,
            rates.clone().min().unwrap_or(0),
            rates.max().unwrap_or(0),
            report.rate_in_force_trace.last().map_or(0, |p| p[1]),
        ));
    }
    for notice in &report.notices {
        line(format!("notice: {notice}"));
    }
    if let Some(m) = machines {
        line(format!(
            "arrangement below: a bucket per machine ({} pacers, each at {}/min), all machines added up; \
             one fleet bucket (1 pacer at {}/min shared by every machine) is compared at the end",
            m.machines, m.rate_per_min, m.rate_per_min
        ));
    }
    if let Some(at) = report.request_limit_reached_ms {
        line(format!(
            "note: the run reached its limit of {} requests at {} s virtual; no request started after that",
            report.request_limit,
            at as f64 / 1000.0
        ));
    }
    line(String::new());
    line(format!(
        "turns started                {:>8}",
        report.turns_started
    ));
    line(format!(
        "  completed                  {:>8}",
        report.turns_completed
    ));
    if let Some(throttled) = report.upstream_throttled {
        line(format!(
            "  upstream throttles         {:>8}  ({:.1}% of completed turns)",
            throttled,
            percent(throttled, report.turns_completed)
        ));
    }
    line(format!(
        "  terminal rate-limit errors {:>8}  ({:.1}% of turns)",
        report.terminal_rate_limit_errors, report.terminal_error_percent
    ));
    line(format!(
        "  deadline overruns          {:>8}",
        report.deadline_overruns
    ));
    if report.cancelled > 0 || s.cancel_percent > 0 {
        line(format!(
            "  cancelled                  {:>8}  (releases {}, refunded {})",
            report.cancelled, report.releases, report.releases_refunded
        ));
    }
    line(format!(
        "turn latency                 p50 {}, p90 {}, max {} (completed turns, start to end)",
        seconds(report.latency_p50_ms),
        seconds(report.latency_p90_ms),
        seconds(report.latency_max_ms)
    ));
    line(format!(
        "attempts                     {:>8}  ({} refused; {} turns refused at least once)",
        report.attempts, report.refusals, report.turns_refused_at_least_once
    ));
    line(format!(
        "admissions                   {:>8}  ({} waited: mean {}, max {})",
        report.admissions,
        report.waits,
        report
            .wait_mean_ms
            .map_or("-".into(), |ms| format!("{:.0} ms", ms)),
        if report.waits > 0 {
            format!("{} ms", report.wait_max_ms)
        } else {
            "-".into()
        }
    ));
    line(format!(
        "admitted per minute max {}, final minute {}   (offered per minute max {}, final minute {})",
        report.admitted_per_min_max,
        report.admitted_final_minute,
        report.offered_per_min_max,
        report.offered_final_minute
    ));
    if let Some(ms) = report.littles_law_turn_ms {
        line(format!(
            "Little's law: {} agents / {:.2} turns ended per s = {:.1} s per turn (measured mean of completed turns: {})",
            u64::from(s.agents.unwrap_or(0)) * u64::from(machines.map_or(1, |m| m.machines)),
            (report.turns_completed + report.terminal_rate_limit_errors + report.deadline_overruns + report.cancelled) as f64
                / (s.duration_ms as f64 / 1000.0),
            ms / 1000.0,
            report.latency_mean_ms.map_or("-".into(), |ms| format!("{:.1} s", ms / 1000.0))
        ));
    }
    if let Some(m) = machines {
        line(String::new());
        out_machines(m, &mut line);
    }
    if per_minute {
        line(String::new());
        line(
            "minute  offered  attempts  refused  admitted  completed  p50 latency  max latency"
                .into(),
        );
        for row in &report.per_minute {
            line(format!(
                "{:>6}  {:>7}  {:>8}  {:>7}  {:>8}  {:>9}  {:>11}  {:>11}",
                row.minute,
                row.offered,
                row.attempts,
                row.refused,
                row.admitted,
                row.completed,
                seconds(row.latency_p50_ms),
                seconds(row.latency_max_ms)
            ));
        }
        if let Some(m) = machines {
            line(String::new());
            line(format!(
                "upstream new connections, all {} machines:",
                m.machines
            ));
            line("minute  a bucket per machine  one fleet bucket".into());
            let (a, b) = (&m.bucket_per_machine, &m.fleet_bucket);
            for minute in 0..a.upstream_per_minute.len().max(b.upstream_per_minute.len()) {
                let get =
                    |r: &ArrangementReport| r.upstream_per_minute.get(minute).copied().unwrap_or(0);
                line(format!("{minute:>6}  {:>20}  {:>16}", get(a), get(b)));
            }
        }
    }
    out
}

/// The side-by-side comparison of the two arrangements.
fn out_machines(m: &MachinesReport, line: &mut impl FnMut(String)) {
    let (a, b) = (&m.bucket_per_machine, &m.fleet_bucket);
    for (name, r) in [("bucket-per-machine", a), ("fleet-bucket", b)] {
        if let Some(at) = r.request_limit_reached_ms {
            line(format!(
                "note: the {name} run reached its limit of {} requests at {} s virtual; no request started after that",
                r.request_limit,
                at as f64 / 1000.0
            ));
        }
    }
    let row = |name: &str, x: String, y: String| format!("{name:<40} {x:>22} {y:>18}");
    let both = |f: &dyn Fn(&ArrangementReport) -> String| (f(a), f(b));
    let rows: [(String, (String, String)); 11] = [
        ("pacers (buckets)".into(), both(&|r| r.buckets.to_string())),
        (
            "configured rate of each, per minute".into(),
            both(&|_| m.rate_per_min.to_string()),
        ),
        (
            "upstream new connections: peak minute".into(),
            both(&|r| r.upstream_per_min_max.to_string()),
        ),
        (
            format!(
                "  mean over {} full minute{}",
                a.whole_minutes,
                if a.whole_minutes == 1 { "" } else { "s" }
            ),
            both(&|r| {
                r.upstream_per_min_mean
                    .map_or("-".into(), |x| format!("{x:.1}"))
            }),
        ),
        (
            "turns started".into(),
            both(&|r| r.turns_started.to_string()),
        ),
        (
            "turns completed".into(),
            both(&|r| r.turns_completed.to_string()),
        ),
        ("admissions".into(), both(&|r| r.admissions.to_string())),
        ("refusals".into(), both(&|r| r.refusals.to_string())),
        (
            "terminal rate-limit errors".into(),
            both(&|r| {
                format!(
                    "{} ({:.1}%)",
                    r.terminal_rate_limit_errors, r.terminal_error_percent
                )
            }),
        ),
        (
            "deadline overruns".into(),
            both(&|r| r.deadline_overruns.to_string()),
        ),
        (
            "turn latency p50".into(),
            both(&|r| seconds(r.latency_p50_ms)),
        ),
    ];
    line(row(
        &format!("{} machines, one upstream account", m.machines),
        "a bucket per machine".into(),
        "one fleet bucket".into(),
    ));
    for (name, (x, y)) in rows {
        line(row(&name, x, y));
    }
}

/// The same workload without and with bookings, side by side.
pub fn render_comparison(without: &SimReport, with: &SimReport) -> String {
    let mut out = String::new();
    let s = &without.settings;
    out.push_str(&format!(
        "pacer simulate --compare-booking — rate {}/min, burst {}, bound {} ms, {} retries, idle timeout {} ms; {} s virtual, seed {}\n\n",
        s.rate_per_min,
        s.burst,
        s.bound_ms,
        s.max_retries,
        s.idle_timeout_ms,
        s.duration_ms as f64 / 1000.0,
        s.seed
    ));
    for notice in &without.notices {
        out.push_str(&format!("notice: {notice}\n"));
    }
    for (name, report) in [("without", without), ("with", with)] {
        if let Some(at) = report.request_limit_reached_ms {
            out.push_str(&format!(
                "note: the run {name} bookings reached its limit of {} requests at {} s virtual; no request started after that\n",
                report.request_limit,
                at as f64 / 1000.0
            ));
        }
    }
    let row = |name: &str, a: String, b: String| format!("{name:<32} {a:>16} {b:>16}\n");
    out.push_str(&row("", "without bookings".into(), "with bookings".into()));
    let count = |f: fn(&SimReport) -> u64| (f(without).to_string(), f(with).to_string());
    let pct = |r: &SimReport| format!("{:.1}%", r.terminal_error_percent);
    let rows: [(&str, (String, String)); 9] = [
        ("turns started", count(|r| r.turns_started)),
        ("turns completed", count(|r| r.turns_completed)),
        (
            "terminal rate-limit errors",
            count(|r| r.terminal_rate_limit_errors),
        ),
        ("  as % of turns started", (pct(without), pct(with))),
        ("deadline overruns", count(|r| r.deadline_overruns)),
        (
            "turn latency p50",
            (
                seconds(without.latency_p50_ms),
                seconds(with.latency_p50_ms),
            ),
        ),
        (
            "turn latency p90",
            (
                seconds(without.latency_p90_ms),
                seconds(with.latency_p90_ms),
            ),
        ),
        ("connections opened", count(|r| r.admitted_total)),
        ("releases refunded", count(|r| r.releases_refunded)),
    ];
    for (name, (a, b)) in rows {
        out.push_str(&row(name, a, b));
    }
    out
}
