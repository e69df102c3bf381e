//! What a run depends on: [`SimConfig`] (the budget, the design, the load,
//! the machines, the upstream), the work limits of a run, and [`validate`].

use pacer_core::{Budget, ReleasePolicy};
use serde::Serialize;

use super::upstream::{UpstreamKind, UpstreamModel, MAX_UPSTREAM_LIMIT};

/// The most requests (turns, offers) one run starts. With at most
/// `max retries + 5 ≤ 15` events per request (start, deadline, retries,
/// open, complete, cancel) this keeps a run under 6·10^7 events, and at
/// about 200 bytes per request (its record, its times, its pending
/// deadline, its ticket) under ~1 GiB. A closed loop that reaches it stops
/// starting turns and says so in its report; an open loop whose schedule
/// offers more is rejected before it starts.
///
/// With several machines the count is the total over the machines and
/// both arrangements: each arrangement holds half of the limit (and of
/// [`MAX_EVENTS`]), and runs after the other, so memory stays that of one
/// run of this many requests.
pub const MAX_REQUESTS: u64 = 4_000_000;

/// The most agents (`--agents`): each starts at least one turn, well
/// inside [`MAX_REQUESTS`]. With several machines every machine has this
/// many agents, and [`validate`] requires all of them to fit in one
/// arrangement's half of [`MAX_REQUESTS`].
pub const MAX_AGENTS: u32 = 100_000;

/// The longest virtual time a flag can name, ms: one week. It bounds the
/// run length (10,080 minute rows) and every delay (turn, jitter, first
/// byte, think, stagger, arrival interval), so no virtual time overflows.
pub const MAX_MS: u64 = 604_800_000;

/// The highest offered load (`--offered-per-min`): 1000 per second, a
/// hundred times the highest pacing rate (600/min).
pub const MAX_OFFERED_PER_MIN: u64 = 60_000;

/// The most machines (`--machines`).
pub const MAX_MACHINES: u32 = 64;

/// A run that handles more events than this stops with an error. The
/// request limit keeps every run below it; this is a second guard.
pub const MAX_EVENTS: u64 = 100_000_000;

/// The work limits of one run. With several machines they are the totals
/// over both arrangements, each of which gets half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Requests started at most; then no request starts (reported).
    pub max_requests: u64,
    /// Events handled at most; past it the run fails with an error.
    pub max_events: u64,
}

impl Limits {
    /// The command's limits: [`MAX_REQUESTS`], [`MAX_EVENTS`].
    pub const DEFAULT: Limits = Limits {
        max_requests: MAX_REQUESTS,
        max_events: MAX_EVENTS,
    };
}

/// Which admission design to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    /// This design: the core's pacer.
    Paced,
    /// The rejected design: past the bound, wait the bound and open anyway.
    AdmitAnyway,
}

/// What a refused request does in open-loop mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnRefusal {
    /// Retry per the SDK rule (§8) within the budget's retry count.
    Retry,
    /// Give up at once: the offer is lost (the record's overload test).
    Drop,
}

/// When open-loop requests arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    /// Request `k` at `floor(k · every_num / every_den)` ms.
    Periodic {
        /// Interval numerator, ms.
        every_num: u64,
        /// Interval denominator (≥ 1).
        every_den: u64,
    },
    /// Exponential gaps with mean `mean_num / mean_den` ms.
    Poisson {
        /// Mean interval numerator, ms.
        mean_num: u64,
        /// Mean interval denominator (≥ 1).
        mean_den: u64,
    },
}

/// Where requests come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// A fixed number of agents, one turn at a time.
    Closed {
        /// Number of agents.
        agents: u32,
        /// Pause between the end of a turn and the next, ms.
        think_ms: u64,
        /// First turns start uniformly in `[0, stagger_ms)` (0: all at once).
        stagger_ms: u64,
    },
    /// Requests on a schedule, independent of earlier outcomes.
    Open {
        /// The schedule.
        arrivals: Arrivals,
        /// What a refused request does.
        on_refusal: OnRefusal,
    },
}

impl Load {
    /// A closed loop of `agents` with no think time and no stagger.
    pub const fn closed(agents: u32) -> Load {
        Load::Closed {
            agents,
            think_ms: 0,
            stagger_ms: 0,
        }
    }

    /// An open loop offering a request every `every_ms` ms (periodic).
    pub const fn every(every_ms: u64, on_refusal: OnRefusal) -> Load {
        Load::Open {
            arrivals: Arrivals::Periodic {
                every_num: every_ms,
                every_den: 1,
            },
            on_refusal,
        }
    }
}

/// Everything a run depends on.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// The resolved budget (rate, deadline, retries).
    pub budget: Budget,
    /// Pacer burst (0 is treated as 1, as by the core).
    pub burst: u32,
    /// What a release refunds.
    pub release_policy: ReleasePolicy,
    /// Which design admits.
    pub design: Design,
    /// Where requests come from.
    pub load: Load,
    /// Time from connection open to the end of the turn, ms.
    pub turn_ms: u64,
    /// Each turn lasts `turn_ms ± turn_jitter_ms` (uniform).
    pub turn_jitter_ms: u64,
    /// Time from connection open to the first stream part, ms (capped at
    /// the turn's length).
    pub first_byte_ms: u64,
    /// New requests start only before this, ms.
    pub duration_ms: u64,
    /// Seeds jitter, staggering, Poisson arrivals and cancellations.
    pub seed: u64,
    /// Percent of waiting requests cancelled during their wait.
    pub cancel_percent: u32,
    /// Book refusals (SPEC §11): a refused request keeps a place in line
    /// for its retry (this design only).
    pub booking: bool,
    /// Machines (proxies) sharing one upstream account, each with the
    /// whole `load` (1..=[`MAX_MACHINES`]). More than one runs both
    /// [`Buckets`] arrangements.
    pub machines: u32,
    /// The upstream's hidden limit (`--upstream-limit-per-min`): at most
    /// this many connections open in any 60 s (a sliding window over every
    /// machine, one account); past it the upstream throttles the attempt.
    /// `None`: the upstream opens everything. With another
    /// `upstream_model`, the limit at the start of the run.
    pub upstream_limit_per_min: Option<u32>,
    /// How the upstream applies its limit (`--upstream-model`, its limit
    /// changes and penalty); [`UpstreamModel::SLIDING`] is the sliding
    /// window above. Anything else needs `upstream_limit_per_min`.
    pub upstream_model: UpstreamModel,
    /// Adaptive pacing (SPEC §14) between `(floor, ceiling)` per minute:
    /// every gate reports the upstream's answers to its pacer.
    pub adaptive: Option<(u32, u32)>,
}

impl SimConfig {
    /// What `pacer simulate` runs with no flag: the default budget (SPEC
    /// §2), burst 10, the refund policy, this design, a closed loop of 20
    /// agents, 3000 ms turns ± 1000 ms (a third), the connection's first
    /// part at once, 600 s virtual, seed 1, no cancellations, no bookings,
    /// one machine, an upstream without a limit, fixed pacing.
    pub const DEFAULT: SimConfig = SimConfig {
        budget: Budget::DEFAULT,
        burst: 10,
        release_policy: ReleasePolicy::Refund,
        design: Design::Paced,
        load: Load::closed(20),
        turn_ms: 3000,
        turn_jitter_ms: 1000,
        first_byte_ms: 0,
        duration_ms: 600_000,
        seed: 1,
        cancel_percent: 0,
        booking: false,
        machines: 1,
        upstream_limit_per_min: None,
        upstream_model: UpstreamModel::SLIDING,
        adaptive: None,
    };
}

/// How the machines' proxies pace their new connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Buckets {
    /// Each machine has its own pacer at the configured rate (today's
    /// proxies: the upstream sees up to machines × the rate).
    PerMachine,
    /// Every machine's gate decides with one shared pacer at the
    /// configured rate (SPEC §12's fleet bucket, without its network).
    Fleet,
}

/// Validates a configuration; the reason when it cannot run.
pub fn validate(cfg: &SimConfig) -> Result<(), String> {
    if cfg.duration_ms == 0 {
        return Err("--duration-ms must be at least 1".into());
    }
    if !(1..=MAX_MACHINES).contains(&cfg.machines) {
        return Err(format!("--machines must be 1..={MAX_MACHINES}"));
    }
    let machines = u128::from(cfg.machines);
    // With several machines both arrangements run, each with half of the
    // request limit.
    let per_arrangement = if cfg.machines > 1 {
        MAX_REQUESTS / 2
    } else {
        MAX_REQUESTS
    };
    match cfg.load {
        Load::Closed { agents: 0, .. } => return Err("--agents must be at least 1".into()),
        Load::Closed { agents, .. }
            if cfg.machines > 1 && u128::from(agents) * machines > u128::from(per_arrangement) =>
        {
            // Every agent starts a turn at once; past the limit some would
            // never start, a run that measures nothing.
            return Err(format!(
                "--agents {agents} on each of --machines {} is {} agents, each starting a turn in each of \
                 the two arrangements; one run holds at most {MAX_REQUESTS} requests: at most {per_arrangement} \
                 agents over all machines",
                cfg.machines,
                u128::from(agents) * machines
            ));
        }
        Load::Open {
            arrivals:
                Arrivals::Periodic {
                    every_num,
                    every_den,
                },
            ..
        }
        | Load::Open {
            arrivals:
                Arrivals::Poisson {
                    mean_num: every_num,
                    mean_den: every_den,
                },
            ..
        } => {
            if every_num == 0 || every_den == 0 {
                return Err("the arrival interval must be positive".into());
            }
            // Request k arrives at k·interval (periodic; the mean for
            // Poisson) while that is below the duration:
            // ceil(duration / interval) offers.
            let offers = (u128::from(cfg.duration_ms) * u128::from(every_den))
                .div_ceil(u128::from(every_num));
            if offers > u128::from(MAX_REQUESTS) {
                return Err(format!(
                    "--offered-per-min/--offered-every-ms with --duration-ms {} would offer {offers} requests; \
                     one run holds at most {MAX_REQUESTS}: lower the offered rate or the duration",
                    cfg.duration_ms
                ));
            }
            if cfg.machines > 1 && offers * machines > u128::from(per_arrangement) {
                return Err(format!(
                    "--offered-per-min/--offered-every-ms with --duration-ms {} on each of --machines {} \
                     would offer {} requests in each of the two arrangements, {} in all; one run holds at most \
                     {MAX_REQUESTS}: lower the offered rate, the duration or the machines",
                    cfg.duration_ms,
                    cfg.machines,
                    offers * machines,
                    2 * offers * machines
                ));
            }
        }
        Load::Closed { .. } => {}
    }
    if cfg.cancel_percent > 100 {
        return Err("--cancel-percent must be 0..=100".into());
    }
    if cfg.booking && cfg.design != Design::Paced {
        return Err("--booking needs --design paced".into());
    }
    validate_upstream(cfg)
}

/// The upstream's model: it needs a limit, and its burst, schedule and
/// penalty must make sense for this run.
fn validate_upstream(cfg: &SimConfig) -> Result<(), String> {
    let model = &cfg.upstream_model;
    if cfg.upstream_limit_per_min.is_none() {
        if model.is_default() {
            return Ok(());
        }
        return Err(
            "--upstream-model, --upstream-burst, --upstream-limit-at and --upstream-penalty-ms \
             need --upstream-limit-per-min (or --sweep-upstream)"
                .into(),
        );
    }
    if let UpstreamKind::TokenBucket { burst } = model.kind {
        if !(1..=MAX_UPSTREAM_LIMIT).contains(&burst) {
            return Err(format!(
                "--upstream-burst must be 1..={MAX_UPSTREAM_LIMIT}, not {burst}"
            ));
        }
    }
    if model.penalty_ms > MAX_MS {
        return Err(format!(
            "--upstream-penalty-ms must be at most {MAX_MS} (one week), not {}",
            model.penalty_ms
        ));
    }
    let used = model.changes.iter().take_while(|c| c.is_some()).count();
    if model.changes[used..].iter().any(Option::is_some) {
        return Err("the upstream's limit changes must be the first entries, with no gap".into());
    }
    let mut previous: Option<u64> = None;
    for (at, limit) in model.scheduled() {
        let minute = at / 60_000;
        if minute == 0 {
            return Err(
                "--upstream-limit-at: changes start at minute 1 (minute 0's limit is \
                        --upstream-limit-per-min)"
                    .into(),
            );
        }
        if at % 60_000 != 0 {
            return Err(format!(
                "the upstream's limit changes at whole minutes, not at {at} ms"
            ));
        }
        if !(1..=MAX_UPSTREAM_LIMIT).contains(&limit) {
            return Err(format!(
                "--upstream-limit-at {minute}={limit}: the limit must be 1..={MAX_UPSTREAM_LIMIT}"
            ));
        }
        if previous.is_some_and(|p| p >= at) {
            return Err(format!(
                "--upstream-limit-at: the minutes must increase ({minute} comes after {})",
                previous.unwrap_or(0) / 60_000
            ));
        }
        if at >= cfg.duration_ms {
            return Err(format!(
                "--upstream-limit-at {minute}={limit}: minute {minute} is not within the run \
                 (--duration-ms {})",
                cfg.duration_ms
            ));
        }
        previous = Some(at);
    }
    Ok(())
}
