//! What a run measured: [`SimReport`] (with several machines, both
//! arrangements in [`MachinesReport`]), built from the event loop's tallies
//! once it has run.

use pacer_core::{Mode, ReleasePolicy};
use serde::Serialize;

use super::config::{Arrivals, Buckets, Design, Load, OnRefusal, SimConfig};
use super::upstream::UpstreamModel;
use crate::stats::{count_in, percent, percentile, PerMinute};

/// One arrangement of several machines, summed over the machines.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ArrangementReport {
    /// Which arrangement.
    pub arrangement: Buckets,
    /// Pacers (buckets) in it: the machines, or 1.
    pub buckets: u32,
    /// The upstream's new connections (opened) in each minute, all
    /// machines together; the last row is partial when the run is not a
    /// whole number of minutes.
    pub upstream_per_minute: Vec<u64>,
    /// Most new connections in one whole minute (the one partial minute of
    /// a run shorter than a minute).
    pub upstream_per_min_max: u64,
    /// Mean new connections per whole minute (none in a run shorter than
    /// a minute).
    pub upstream_per_min_mean: Option<f64>,
    /// Whole minutes the mean is over.
    pub whole_minutes: u64,
    /// Connections opened before `duration`.
    pub upstream_total: u64,
    /// Turns (requests) started.
    pub turns_started: u64,
    /// Turns that got their connection and finished.
    pub turns_completed: u64,
    /// Turns that ended in a terminal rate-limit error.
    pub terminal_rate_limit_errors: u64,
    /// Those as a percentage of turns started.
    pub terminal_error_percent: f64,
    /// Turns whose no-data deadline fired before the first stream part.
    pub deadline_overruns: u64,
    /// Turns cancelled while waiting for a slot.
    pub cancelled: u64,
    /// Attempts, retries included.
    pub attempts: u64,
    /// Admission decisions.
    pub admissions: u64,
    /// Attempts refused.
    pub refusals: u64,
    /// Releases (cancellations, deadline aborts, unredeemed bookings).
    pub releases: u64,
    /// Turn latency of completed turns, nearest-rank p50, ms.
    pub latency_p50_ms: Option<u64>,
    /// p90, ms.
    pub latency_p90_ms: Option<u64>,
    /// Events this arrangement's run handled.
    pub events: u64,
    /// The most requests this arrangement's run could start.
    pub request_limit: u64,
    /// When it reached that limit, the virtual time, ms.
    pub request_limit_reached_ms: Option<u64>,
}

/// Several machines against one upstream account: both arrangements.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MachinesReport {
    /// Machines (proxies), each with the whole configured load.
    pub machines: u32,
    /// The configured rate of every pacer, new connections per minute.
    pub rate_per_min: u32,
    /// A pacer per machine (the report's main figures are this run).
    pub bucket_per_machine: ArrangementReport,
    /// One pacer shared by every machine.
    pub fleet_bucket: ArrangementReport,
}

/// One minute of a run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MinuteRow {
    /// Minute index (`[minute·60 s, (minute+1)·60 s)`).
    pub minute: u64,
    /// New requests (turns) started.
    pub offered: u64,
    /// Attempts, retries included.
    pub attempts: u64,
    /// Attempts refused.
    pub refused: u64,
    /// Turns that ended in a terminal rate-limit error in this minute.
    pub terminal_errors: u64,
    /// Connections opened.
    pub admitted: u64,
    /// Turns completed in this minute.
    pub completed: u64,
    /// Median latency of the turns completed in this minute, ms.
    pub latency_p50_ms: Option<u64>,
    /// Longest latency of the turns completed in this minute, ms.
    pub latency_max_ms: Option<u64>,
    /// With a hidden upstream limit: throttle answers in this minute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttled: Option<u64>,
    /// Adaptive runs: the rate in force at the minute's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_in_force: Option<u32>,
}

/// The settings a run used, as resolved.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunSettings {
    /// `paced` or `admit-anyway`.
    pub design: Design,
    /// The pacer's mode (`disabled`, `refusing`, `shaping-low-rate`, `shaping-no-retry`).
    pub mode: &'static str,
    /// New connections per minute.
    pub rate_per_min: u32,
    /// Burst.
    pub burst: u32,
    /// Wait bound, ms.
    pub bound_ms: u64,
    /// Hint cap, s.
    pub hint_cap_s: u64,
    /// Client retry count (the budget's).
    pub max_retries: u32,
    /// No-data deadline, ms.
    pub idle_timeout_ms: u64,
    /// Total deadline, ms (resolved; not enforced by the model).
    pub total_timeout_ms: u64,
    /// `refund` or `strict`.
    pub release_policy: &'static str,
    /// `closed` or `open`.
    pub load: &'static str,
    /// Agents (closed loop).
    pub agents: Option<u32>,
    /// Think time between turns (closed loop), ms.
    pub think_ms: Option<u64>,
    /// Start spread (closed loop), ms.
    pub stagger_ms: Option<u64>,
    /// Offered requests per minute (open loop).
    pub offered_per_min: Option<f64>,
    /// `periodic` or `poisson` (open loop).
    pub arrivals: Option<&'static str>,
    /// `retry` or `drop` (open loop).
    pub on_refusal: Option<OnRefusal>,
    /// Turn length after the connection opens, ms.
    pub turn_ms: u64,
    /// Turn length jitter, ms.
    pub turn_jitter_ms: u64,
    /// Time to first stream part, ms.
    pub first_byte_ms: u64,
    /// Run length, ms.
    pub duration_ms: u64,
    /// Seed.
    pub seed: u64,
    /// Percent of waits cancelled.
    pub cancel_percent: u32,
    /// Refusals book a place in line (SPEC §11).
    pub booking: bool,
    /// The upstream's hidden limit, connections per 60 s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_limit_per_min: Option<u32>,
    /// The upstream's model, when it is not the default sliding window
    /// with no limit change and no penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_model: Option<UpstreamModel>,
    /// Adaptive pacing's floor (SPEC §14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive_floor_per_min: Option<u32>,
    /// Adaptive pacing's ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive_ceiling_per_min: Option<u32>,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimReport {
    /// The settings.
    pub settings: RunSettings,
    /// Turns (requests) started.
    pub turns_started: u64,
    /// Turns that got their connection and finished.
    pub turns_completed: u64,
    /// With a hidden upstream limit: the throttle answers the upstream gave
    /// (connections the pacer admitted that the upstream then refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_throttled: Option<u64>,
    /// Turns that ended in a terminal rate-limit error (refused on the last
    /// attempt, or on the only one in `drop` mode).
    pub terminal_rate_limit_errors: u64,
    /// Turns whose no-data deadline fired before the first stream part.
    pub deadline_overruns: u64,
    /// Turns cancelled while waiting for a slot.
    pub cancelled: u64,
    /// Terminal rate-limit errors as a percentage of turns started.
    pub terminal_error_percent: f64,
    /// Turn latency of completed turns (start to end), nearest-rank p50, ms.
    pub latency_p50_ms: Option<u64>,
    /// p90, ms.
    pub latency_p90_ms: Option<u64>,
    /// Longest, ms.
    pub latency_max_ms: Option<u64>,
    /// Mean, ms.
    pub latency_mean_ms: Option<f64>,
    /// Attempts, retries included.
    pub attempts: u64,
    /// Attempts refused.
    pub refusals: u64,
    /// Turns refused at least once.
    pub turns_refused_at_least_once: u64,
    /// Admission decisions.
    pub admissions: u64,
    /// Admissions with a positive wait.
    pub waits: u64,
    /// Mean of the positive waits, ms.
    pub wait_mean_ms: Option<f64>,
    /// Longest wait, ms.
    pub wait_max_ms: u64,
    /// Releases (cancellations and deadline aborts holding a ticket).
    pub releases: u64,
    /// Releases the policy refunded.
    pub releases_refunded: u64,
    /// Connections opened before `duration`.
    pub admitted_total: u64,
    /// Most connections opened in one whole minute.
    pub admitted_per_min_max: u64,
    /// Connections opened in the last 60 s before `duration`.
    pub admitted_final_minute: u64,
    /// Most new requests in one whole minute.
    pub offered_per_min_max: u64,
    /// New requests in the last 60 s before `duration`.
    pub offered_final_minute: u64,
    /// Closed loop: Little's law, agents / (turns ended per s) − think, ms.
    pub littles_law_turn_ms: Option<f64>,
    /// Minute by minute.
    pub per_minute: Vec<MinuteRow>,
    /// Settings notices (filled in by the caller that resolved them).
    pub notices: Vec<String>,
    /// Events the simulation handled (its work).
    pub events: u64,
    /// The most requests the run could start ([`MAX_REQUESTS`](super::MAX_REQUESTS) for the
    /// command; half of it with several machines, where this run is one
    /// of two arrangements).
    pub request_limit: u64,
    /// When the run reached its request limit and stopped starting
    /// requests, the virtual time, ms.
    pub request_limit_reached_ms: Option<u64>,
    /// Several machines (absent for one): both arrangements summed over
    /// the machines. The figures above are then the bucket-per-machine run,
    /// summed over the machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machines: Option<MachinesReport>,
    /// Adaptive runs: `[ms, rate in force]` every 5 s.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_in_force_trace: Vec<[u64; 2]>,
}

/// The pacer mode's report name.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Disabled => "disabled",
        Mode::Refusing => "refusing",
        Mode::ShapingLowRate => "shaping-low-rate",
        Mode::ShapingNoRetry => "shaping-no-retry",
    }
}

/// The release policy's name.
pub fn policy_name(policy: ReleasePolicy) -> &'static str {
    match policy {
        ReleasePolicy::Refund => "refund",
        ReleasePolicy::Strict => "strict",
    }
}

/// An arrangement's figures, from its run's report.
pub(super) fn arrangement_report(
    report: &SimReport,
    arrangement: Buckets,
    machines: u32,
) -> ArrangementReport {
    let whole_minutes = report.settings.duration_ms / 60_000;
    let upstream_per_minute: Vec<u64> = report.per_minute.iter().map(|row| row.admitted).collect();
    let whole_sum: u64 = upstream_per_minute
        .iter()
        .take(whole_minutes as usize)
        .sum();
    ArrangementReport {
        arrangement,
        buckets: match arrangement {
            Buckets::PerMachine => machines,
            Buckets::Fleet => 1,
        },
        upstream_per_min_max: report.admitted_per_min_max,
        upstream_per_min_mean: (whole_minutes > 0).then(|| whole_sum as f64 / whole_minutes as f64),
        whole_minutes,
        upstream_total: report.admitted_total,
        turns_started: report.turns_started,
        turns_completed: report.turns_completed,
        terminal_rate_limit_errors: report.terminal_rate_limit_errors,
        terminal_error_percent: report.terminal_error_percent,
        deadline_overruns: report.deadline_overruns,
        cancelled: report.cancelled,
        attempts: report.attempts,
        admissions: report.admissions,
        refusals: report.refusals,
        releases: report.releases,
        latency_p50_ms: report.latency_p50_ms,
        latency_p90_ms: report.latency_p90_ms,
        events: report.events,
        request_limit: report.request_limit,
        request_limit_reached_ms: report.request_limit_reached_ms,
        upstream_per_minute,
    }
}

/// What the event loop counts as it runs, for the report.
#[derive(Default)]
pub(super) struct Tallies {
    /// When the run reached its request limit, the virtual time, ms.
    pub(super) request_limit_reached_ms: Option<u64>,
    pub(super) completed: u64,
    pub(super) rate_limited: u64,
    pub(super) overruns: u64,
    pub(super) cancelled: u64,
    pub(super) attempts: u64,
    pub(super) refusals: u64,
    pub(super) refused_requests: u64,
    pub(super) admissions: u64,
    pub(super) waits: u64,
    pub(super) wait_sum: u128,
    pub(super) wait_max: u64,
    pub(super) releases: u64,
    pub(super) refunded: u64,
    pub(super) latencies: Vec<u64>,
    pub(super) completion_times: Vec<u64>,
    pub(super) opened_times: Vec<u64>,
    pub(super) offered_times: Vec<u64>,
    pub(super) attempts_pm: PerMinute,
    pub(super) refused_pm: PerMinute,
    pub(super) rate_limited_pm: PerMinute,
    pub(super) upstream_throttled: u64,
    pub(super) throttled_pm: PerMinute,
    /// `(ms, rate in force)` every [`RATE_SAMPLE_MS`](super::RATE_SAMPLE_MS)
    /// (adaptive runs).
    pub(super) rate_trace: Vec<(u64, u32)>,
}

/// The report of a run of `cfg` that started `started` requests (at most
/// `request_limit`) and handled `events` events, from what it counted.
pub(super) fn report(
    cfg: &SimConfig,
    t: &Tallies,
    started: u64,
    request_limit: u64,
    mode: Mode,
    bound_ms: u64,
    events: u64,
) -> SimReport {
    let duration = cfg.duration_ms;
    let minutes = duration.div_ceil(60_000);
    let whole_minutes = duration / 60_000;
    let mut opened = PerMinute::default();
    t.opened_times.iter().for_each(|&t| opened.add(t));
    let mut offered = PerMinute::default();
    t.offered_times.iter().for_each(|&t| offered.add(t));
    let mut per_minute_latency: Vec<Vec<u64>> = vec![Vec::new(); minutes as usize];
    for (&t, &latency) in t.completion_times.iter().zip(&t.latencies) {
        if let Some(bucket) = per_minute_latency.get_mut((t / 60_000) as usize) {
            bucket.push(latency);
        }
    }
    let per_minute: Vec<MinuteRow> = (0..minutes)
        .map(|minute| {
            let m = minute as usize;
            let bucket = &mut per_minute_latency[m];
            bucket.sort_unstable();
            MinuteRow {
                minute,
                offered: offered.get(m),
                attempts: t.attempts_pm.get(m),
                refused: t.refused_pm.get(m),
                terminal_errors: t.rate_limited_pm.get(m),
                admitted: opened.get(m),
                completed: bucket.len() as u64,
                latency_p50_ms: percentile(bucket, 50),
                latency_max_ms: bucket.last().copied(),
                throttled: cfg.upstream_limit_per_min.map(|_| t.throttled_pm.get(m)),
                rate_in_force: t
                    .rate_trace
                    .get(t.rate_trace.partition_point(|&(t, _)| t < minute * 60_000))
                    .map(|&(_, rate)| rate),
            }
        })
        .collect();
    // Whole minutes only for the maxima; a run shorter than a minute
    // reports its one partial minute.
    let whole = if whole_minutes == 0 {
        &per_minute[..]
    } else {
        &per_minute[..whole_minutes as usize]
    };
    let final_from = duration.saturating_sub(60_000);
    let mut latencies = t.latencies.clone();
    latencies.sort_unstable();
    let ended = t.completed + t.rate_limited + t.overruns + t.cancelled;
    let littles_law_turn_ms = match cfg.load {
        Load::Closed {
            agents, think_ms, ..
        } if ended > 0 => {
            let throughput_per_ms = ended as f64 / duration as f64;
            let agents = f64::from(agents) * f64::from(cfg.machines.max(1));
            Some(agents / throughput_per_ms - think_ms as f64)
        }
        _ => None,
    };
    let (load, agents, think_ms, stagger_ms, offered_per_min, arrivals, on_refusal) = match cfg.load
    {
        Load::Closed {
            agents,
            think_ms,
            stagger_ms,
        } => (
            "closed",
            Some(agents),
            Some(think_ms),
            Some(stagger_ms),
            None,
            None,
            None,
        ),
        Load::Open {
            arrivals,
            on_refusal,
        } => {
            let (num, den, kind) = match arrivals {
                Arrivals::Periodic {
                    every_num,
                    every_den,
                } => (every_num, every_den, "periodic"),
                Arrivals::Poisson { mean_num, mean_den } => (mean_num, mean_den, "poisson"),
            };
            let per_min = 60_000.0 * den as f64 / num as f64;
            (
                "open",
                None,
                None,
                None,
                Some(per_min),
                Some(kind),
                Some(on_refusal),
            )
        }
    };
    SimReport {
        settings: RunSettings {
            design: cfg.design,
            mode: match cfg.design {
                Design::Paced => mode_name(mode),
                Design::AdmitAnyway => {
                    if matches!(mode, Mode::Disabled) {
                        "disabled"
                    } else {
                        "admit-anyway"
                    }
                }
            },
            rate_per_min: cfg.budget.rate_per_min,
            burst: cfg.burst.max(1),
            bound_ms,
            hint_cap_s: (bound_ms / 1000).max(1),
            max_retries: cfg.budget.max_retries,
            idle_timeout_ms: cfg.budget.idle_timeout_ms,
            total_timeout_ms: cfg.budget.total_timeout_ms,
            release_policy: policy_name(cfg.release_policy),
            load,
            agents,
            think_ms,
            stagger_ms,
            offered_per_min,
            arrivals,
            on_refusal,
            turn_ms: cfg.turn_ms,
            turn_jitter_ms: cfg.turn_jitter_ms,
            first_byte_ms: cfg.first_byte_ms,
            duration_ms: duration,
            seed: cfg.seed,
            cancel_percent: cfg.cancel_percent,
            booking: cfg.booking,
            upstream_limit_per_min: cfg.upstream_limit_per_min,
            upstream_model: (!cfg.upstream_model.is_default()).then_some(cfg.upstream_model),
            adaptive_floor_per_min: cfg.adaptive.map(|(floor, _)| floor),
            adaptive_ceiling_per_min: cfg.adaptive.map(|(_, ceiling)| ceiling),
        },
        turns_started: started,
        turns_completed: t.completed,
        upstream_throttled: cfg.upstream_limit_per_min.map(|_| t.upstream_throttled),
        terminal_rate_limit_errors: t.rate_limited,
        deadline_overruns: t.overruns,
        cancelled: t.cancelled,
        terminal_error_percent: percent(t.rate_limited, started),
        latency_p50_ms: percentile(&latencies, 50),
        latency_p90_ms: percentile(&latencies, 90),
        latency_max_ms: latencies.last().copied(),
        latency_mean_ms: (!latencies.is_empty())
            .then(|| latencies.iter().map(|&l| l as f64).sum::<f64>() / latencies.len() as f64),
        attempts: t.attempts,
        refusals: t.refusals,
        turns_refused_at_least_once: t.refused_requests,
        admissions: t.admissions,
        waits: t.waits,
        wait_mean_ms: (t.waits > 0).then(|| t.wait_sum as f64 / t.waits as f64),
        wait_max_ms: t.wait_max,
        releases: t.releases,
        releases_refunded: t.refunded,
        admitted_total: count_in(&t.opened_times, 0, duration),
        admitted_per_min_max: whole.iter().map(|row| row.admitted).max().unwrap_or(0),
        admitted_final_minute: count_in(&t.opened_times, final_from, duration),
        offered_per_min_max: whole.iter().map(|row| row.offered).max().unwrap_or(0),
        offered_final_minute: count_in(&t.offered_times, final_from, duration),
        littles_law_turn_ms,
        per_minute,
        notices: Vec::new(),
        events,
        request_limit,
        request_limit_reached_ms: t.request_limit_reached_ms,
        machines: None,
        rate_in_force_trace: t
            .rate_trace
            .iter()
            .map(|&(t, rate)| [t, u64::from(rate)])
            .collect(),
    }
}
