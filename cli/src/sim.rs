//! A deterministic, virtual-clock simulation of requests that each need a
//! new upstream connection, going through a gate (this design's pacer or
//! the rejected admit-anyway model) and the SDK client of SPEC §8.
//!
//! # The model, and why
//! - **Time** is virtual milliseconds; events at the same millisecond run in
//!   the order they were scheduled, so a run is a pure function of its
//!   options and seed.
//! - **A request** is one SDK call that needs a new connection. Its first
//!   attempt asks the gate. Admitted after `wait`: the proxy sleeps `wait`,
//!   opens the connection, the first stream part arrives `first_byte_ms`
//!   later and the turn ends `turn_ms` after opening. Refused: the client
//!   waits per §8 (the hint, substituted for its rung) and tries again; a
//!   refusal on its last attempt is terminal — a rate-limit error.
//! - **One no-data deadline** (`idle`) per request, started with its first
//!   attempt and shared by every retry, as the record describes: if the
//!   first stream part has not arrived when it fires (still backing off,
//!   still waiting for its slot, or opened too late), the request fails as a
//!   deadline overrun. A request aborted while waiting for its slot releases
//!   its ticket, as a binding's abort signal would.
//! - **Closed loop** (`agents`): each agent runs one turn at a time and
//!   starts the next as soon as the previous one ends, however it ended — a
//!   coding agent keeps working after a failed turn. Every turn needs a new
//!   connection (the record's fan-out: new connections move with the number
//!   of concurrent agents). No new turn starts at or after `duration`; turns
//!   in flight then run to their end, so every started turn has an outcome.
//! - **Open loop** (`offered per minute`): requests arrive on a fixed
//!   schedule (or Poisson) whatever happens to earlier ones. A refused
//!   request either retries like any SDK call (`retry`, the default) or is
//!   dropped (`drop`: the record's sustained-overload test, which counts
//!   what one offer per 732 ms gets admitted, with no client behind it).
//! - **Turn lengths** vary uniformly by `turn_jitter_ms` around `turn_ms`
//!   (the command's default is a third of the turn). With identical turns
//!   every agent's events land on the same milliseconds as each other's and
//!   the refill, and the order of those ties decides who is refused — a
//!   degenerate case, kept available as `--turn-jitter-ms 0`.
//! - **Cancellations** (`cancel_percent`, default 0): a share of the
//!   requests that must wait is cancelled at a random instant of the wait
//!   and releases its ticket — the only thing that exercises the release
//!   policy here, since a correctly sized bound never lets the deadline
//!   fire during a wait.
//! - **Admissions per minute** count connections *opened* (admission time
//!   plus wait), the quantity the record's traffic analysis and its
//!   sustained-rate test count.
//! - **Machines** (`machines`, default 1): several proxies on several
//!   machines share one upstream account. Each machine has its own load
//!   (closed loop: its own `agents`; open loop: its own arrivals at the
//!   offered rate) and its own random stream (machine 0's is the run's
//!   seed, so one machine is exactly the single-proxy run), all on one
//!   virtual clock. With more than one machine the same machines, seeds and
//!   load run twice, in two arrangements ([`Buckets`]): **a bucket per
//!   machine** — each machine's gate has its own pacer at the configured
//!   rate, what N proxies do today, so the upstream sees up to N × the
//!   rate — and **one fleet bucket** — every machine's gate keeps its own
//!   tickets and bookings but decides with one shared
//!   [`pacer_core::Pacer`] at the configured rate, what SPEC §12's Redis
//!   bucket gives. Both arrangements run the core's own `Pacer`; the fleet
//!   bucket is literally one `Pacer` value that every machine's gate calls.
//!   There is **no network model**: a machine reaches the shared bucket
//!   instantly and never fails to reach it (no latency, no partition, none
//!   of §12's failure policies), and the bucket's clock is the one virtual
//!   clock. The upstream's new connections per minute are summed over the
//!   machines. (The rejected admit-anyway design, when simulated, shares
//!   its whole gate.)

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;

use pacer_core::{Budget, Config, Mode, Outcome as Upstream, Pacer, ReleasePolicy};
use serde::Serialize;

use crate::client::{Client, ClientStep, RetryHeaders};
use crate::gate::{AdmitAnywayGate, BookingGate, CoreGate, Gate, GateDecision};
use crate::rng::SplitMix64;
use crate::stats::{count_in, percent, percentile, PerMinute};

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
    /// `None`: the upstream opens everything.
    pub upstream_limit_per_min: Option<u32>,
    /// Adaptive pacing (SPEC §14) between `(floor, ceiling)` per minute:
    /// every gate reports the upstream's answers to its pacer.
    pub adaptive: Option<(u32, u32)>,
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
    /// The most requests the run could start ([`MAX_REQUESTS`] for the
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The next open-loop arrival at this machine.
    Arrival(u32),
    /// This agent's next turn (agents are numbered over all machines:
    /// machine `m`'s are `m · agents ..`).
    TurnStart(u32),
    Attempt(usize),
    Open(usize),
    Complete(usize),
    Deadline(usize),
    Cancel(usize),
    /// Record the rate in force (adaptive runs: every [`RATE_SAMPLE_MS`]).
    Sample,
}

/// How often an adaptive run records its rate in force, ms.
pub const RATE_SAMPLE_MS: u64 = 5_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Backoff,
    Waiting,
    Streaming,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Request {
    machine: u32,
    agent: Option<u32>,
    start_ms: u64,
    deadline_ms: u64,
    service_ms: u64,
    attempts: u32,
    refused: u32,
    phase: Phase,
    ticket: Option<u64>,
    first_byte_at: u64,
}

enum Outcome {
    Completed,
    RateLimited,
    Overrun,
    Cancelled,
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

/// What one machine keeps of its own: its random stream and its arrivals.
struct Machine {
    rng: SplitMix64,
    arrival_index: u64,
    poisson_clock: f64,
}

/// Machine `machine`'s seed: the run's seed for machine 0 (so one machine
/// is the single-proxy run), else the `machine`-th output of a SplitMix64
/// seeded with the run's seed xor a constant (the fractional bits of √2),
/// a stream of its own. The same in both arrangements.
pub fn machine_seed(seed: u64, machine: u32) -> u64 {
    if machine == 0 {
        return seed;
    }
    let mut seeder = SplitMix64::new(seed ^ 0x6A09_E667_F3BC_C908);
    let mut value = 0;
    for _ in 0..machine {
        value = seeder.next_u64();
    }
    value
}

struct Sim<'a> {
    cfg: &'a SimConfig,
    /// One gate per machine (the fleet arrangement's share one pacer).
    gates: Vec<Box<dyn Gate>>,
    client: Client,
    machines: Vec<Machine>,
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    requests: Vec<Request>,
    max_requests: u64,
    request_limit_reached_ms: Option<u64>,
    // Tallies.
    completed: u64,
    rate_limited: u64,
    overruns: u64,
    cancelled: u64,
    attempts: u64,
    refusals: u64,
    refused_requests: u64,
    admissions: u64,
    waits: u64,
    wait_sum: u128,
    wait_max: u64,
    releases: u64,
    refunded: u64,
    latencies: Vec<u64>,
    completion_times: Vec<u64>,
    opened_times: Vec<u64>,
    offered_times: Vec<u64>,
    attempts_pm: PerMinute,
    refused_pm: PerMinute,
    rate_limited_pm: PerMinute,
    /// Opening times in the upstream's last 60 s (with a hidden limit).
    upstream_window: VecDeque<u64>,
    upstream_throttled: u64,
    throttled_pm: PerMinute,
    /// `(ms, rate in force)` every [`RATE_SAMPLE_MS`] (adaptive runs).
    rate_trace: Vec<(u64, u32)>,
}

impl<'a> Sim<'a> {
    fn push(&mut self, at_ms: u64, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at_ms, self.seq, event)));
    }

    /// Starts a request, unless the run holds its request limit already;
    /// whether it started.
    fn start_request(&mut self, machine: u32, agent: Option<u32>, now: u64) -> bool {
        if self.requests.len() as u64 >= self.max_requests {
            self.request_limit_reached_ms.get_or_insert(now);
            return false;
        }
        let jitter = self.cfg.turn_jitter_ms;
        let service_ms = if jitter == 0 {
            self.cfg.turn_ms
        } else {
            let low = self.cfg.turn_ms.saturating_sub(jitter);
            let high = self.cfg.turn_ms.saturating_add(jitter);
            low + self.machines[machine as usize].rng.below(high - low + 1)
        }
        .max(1);
        let id = self.requests.len();
        let deadline_ms = now.saturating_add(self.cfg.budget.idle_timeout_ms);
        self.requests.push(Request {
            machine,
            agent,
            start_ms: now,
            deadline_ms,
            service_ms,
            attempts: 0,
            refused: 0,
            phase: Phase::Backoff,
            ticket: None,
            first_byte_at: u64::MAX,
        });
        self.offered_times.push(now);
        self.push(deadline_ms, Event::Deadline(id));
        self.attempt(id, now);
        true
    }

    fn attempt(&mut self, id: usize, now: u64) {
        if self.requests[id].phase != Phase::Backoff {
            return;
        }
        self.requests[id].attempts += 1;
        self.attempts += 1;
        self.attempts_pm.add(now);
        let retries_left = self
            .client
            .max_retries
            .saturating_sub(self.requests[id].attempts - 1);
        let machine = self.requests[id].machine as usize;
        match self.gates[machine].reserve_for(now, id, retries_left) {
            GateDecision::Admitted { wait_ms, ticket } => {
                self.admissions += 1;
                if wait_ms > 0 {
                    self.waits += 1;
                    self.wait_sum += u128::from(wait_ms);
                    self.wait_max = self.wait_max.max(wait_ms);
                }
                let request = &mut self.requests[id];
                request.phase = Phase::Waiting;
                request.ticket = ticket;
                self.push(now.saturating_add(wait_ms), Event::Open(id));
                let rng = &mut self.machines[machine].rng;
                if wait_ms > 0
                    && self.cfg.cancel_percent > 0
                    && rng.percent(self.cfg.cancel_percent)
                {
                    // Strictly inside the wait, `(now, now + wait)`: a
                    // request cancelled at the instant of its admission
                    // would end its turn at the millisecond it began, and an
                    // agent with no think time would start the next one at
                    // that same millisecond, get the refunded slot back and
                    // be cancelled again, forever. (A 1 ms wait has no
                    // inside: the cancel lands on the opening, which was
                    // scheduled first and wins.)
                    let at = now + 1 + rng.below(wait_ms - 1);
                    self.push(at, Event::Cancel(id));
                }
            }
            GateDecision::Refused { retry_after_s, .. } => {
                self.refusals += 1;
                self.refused_pm.add(now);
                let request = &mut self.requests[id];
                request.refused += 1;
                if request.refused == 1 {
                    self.refused_requests += 1;
                }
                self.retry_or_fail(id, RetryHeaders::pacer_refusal(retry_after_s), now);
            }
        }
    }

    fn finish(&mut self, id: usize, outcome: Outcome, now: u64) {
        // A booking the request will never redeem goes back (SPEC §11).
        let machine = self.requests[id].machine as usize;
        if self.gates[machine].forget(id, now) {
            self.releases += 1;
            self.refunded += 1;
        }
        let request = &mut self.requests[id];
        request.phase = Phase::Done;
        match outcome {
            Outcome::Completed => {
                self.completed += 1;
                self.latencies.push(now - request.start_ms);
                self.completion_times.push(now);
            }
            Outcome::RateLimited => {
                self.rate_limited += 1;
                self.rate_limited_pm.add(now);
            }
            Outcome::Overrun => self.overruns += 1,
            Outcome::Cancelled => self.cancelled += 1,
        }
        if let (Some(agent), Load::Closed { think_ms, .. }) = (request.agent, self.cfg.load) {
            // An agent starts at most one turn per virtual millisecond,
            // however its turn ended: that bounds a run's turns by
            // agents × duration whatever the gate does.
            let next = now
                .saturating_add(think_ms)
                .max(request.start_ms.saturating_add(1));
            if next < self.cfg.duration_ms {
                self.push(next, Event::TurnStart(agent));
            }
        }
    }

    fn release_held(&mut self, id: usize, now: u64) {
        let machine = self.requests[id].machine as usize;
        if let Some(ticket) = self.requests[id].ticket.take() {
            self.releases += 1;
            if self.gates[machine].release(ticket, now) {
                self.refunded += 1;
            }
        }
    }

    /// Whether the upstream's hidden limit throttles a connection opening
    /// at `now`; when it does not, the opening takes its place in the
    /// upstream's window.
    fn upstream_throttles(&mut self, now: u64) -> bool {
        let Some(limit) = self.cfg.upstream_limit_per_min else {
            return false;
        };
        while self
            .upstream_window
            .front()
            .is_some_and(|&t| t + 60_000 <= now)
        {
            self.upstream_window.pop_front();
        }
        if self.upstream_window.len() as u64 >= u64::from(limit) {
            return true;
        }
        self.upstream_window.push_back(now);
        false
    }

    /// The upstream throttled request `id`'s connection at `now`: the proxy
    /// tells its pacer (adaptive runs) and answers the client with a
    /// retryable rate limit carrying no delay header (the upstream's own
    /// answer has none), so the client backs off on its ladder; on its last
    /// attempt the turn ends in a rate-limit error.
    fn throttled(&mut self, id: usize, now: u64) {
        self.upstream_throttled += 1;
        self.throttled_pm.add(now);
        let machine = self.requests[id].machine as usize;
        if self.cfg.adaptive.is_some() {
            self.gates[machine].observe(Upstream::Throttled, now);
        }
        self.requests[id].phase = Phase::Backoff;
        self.retry_or_fail(id, RetryHeaders::default(), now);
    }

    /// Request `id`'s attempt failed with a retryable rate limit carrying
    /// `headers` at `now`: the client retries after its delay (SPEC §8),
    /// or, with its retries spent, the turn ends in a rate-limit error.
    fn retry_or_fail(&mut self, id: usize, headers: RetryHeaders, now: u64) {
        let attempts = self.requests[id].attempts;
        match self.client.after_failure(attempts, headers) {
            ClientStep::Retry { delay_ms } => {
                self.push(now.saturating_add(delay_ms), Event::Attempt(id))
            }
            ClientStep::GiveUp => self.finish(id, Outcome::RateLimited, now),
        }
    }

    fn next_arrival(&mut self, machine: u32) -> Option<u64> {
        let Load::Open { arrivals, .. } = self.cfg.load else {
            return None;
        };
        let m = &mut self.machines[machine as usize];
        let at = match arrivals {
            Arrivals::Periodic {
                every_num,
                every_den,
            } => {
                let at = u128::from(m.arrival_index) * u128::from(every_num)
                    / u128::from(every_den.max(1));
                m.arrival_index += 1;
                u64::try_from(at).unwrap_or(u64::MAX)
            }
            Arrivals::Poisson { mean_num, mean_den } => {
                if m.arrival_index > 0 {
                    let mean = mean_num as f64 / mean_den.max(1) as f64;
                    // Inverse transform: -ln(1 - U) · mean, U in [0, 1).
                    m.poisson_clock += -(1.0 - m.rng.unit()).ln() * mean;
                }
                m.arrival_index += 1;
                if m.poisson_clock >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    m.poisson_clock as u64
                }
            }
        };
        (at < self.cfg.duration_ms).then_some(at)
    }

    fn handle(&mut self, now: u64, event: Event) {
        match event {
            Event::Arrival(machine) => {
                if !self.start_request(machine, None, now) {
                    return;
                }
                if let Some(at) = self.next_arrival(machine) {
                    self.push(at, Event::Arrival(machine));
                }
            }
            Event::TurnStart(agent) => {
                let machine = match self.cfg.load {
                    Load::Closed { agents, .. } => agent / agents.max(1),
                    Load::Open { .. } => 0,
                };
                self.start_request(machine, Some(agent), now);
            }
            Event::Attempt(id) => self.attempt(id, now),
            Event::Open(id) => {
                let request = &mut self.requests[id];
                if request.phase != Phase::Waiting {
                    return;
                }
                request.ticket = None;
                if self.upstream_throttles(now) {
                    self.throttled(id, now);
                    return;
                }
                let request = &mut self.requests[id];
                request.phase = Phase::Streaming;
                request.first_byte_at =
                    now.saturating_add(self.cfg.first_byte_ms.min(request.service_ms));
                let end = now.saturating_add(request.service_ms);
                let machine = request.machine as usize;
                self.opened_times.push(now);
                if self.cfg.adaptive.is_some() {
                    self.gates[machine].observe(Upstream::Opened, now);
                }
                self.push(end, Event::Complete(id));
            }
            Event::Sample => {
                if let Some(rate) = self.gates[0].rate_in_force(now) {
                    self.rate_trace.push((now, rate));
                }
                let next = now + RATE_SAMPLE_MS;
                if next <= self.cfg.duration_ms {
                    self.push(next, Event::Sample);
                }
            }
            Event::Complete(id) => {
                if self.requests[id].phase == Phase::Streaming {
                    self.finish(id, Outcome::Completed, now);
                }
            }
            Event::Deadline(id) => {
                let request = self.requests[id];
                let overrun = match request.phase {
                    Phase::Done => false,
                    Phase::Streaming => request.first_byte_at >= request.deadline_ms,
                    Phase::Backoff | Phase::Waiting => true,
                };
                if overrun {
                    self.release_held(id, now);
                    self.finish(id, Outcome::Overrun, now);
                }
            }
            Event::Cancel(id) => {
                if self.requests[id].phase == Phase::Waiting {
                    self.release_held(id, now);
                    self.finish(id, Outcome::Cancelled, now);
                }
            }
        }
    }
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
    Ok(())
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

/// Runs a simulation. `progress` is called now and then with the virtual
/// time reached (with several machines, the work done: `duration` plus
/// the virtual time reached during the second arrangement).
pub fn run(cfg: &SimConfig, progress: &mut dyn FnMut(u64)) -> Result<SimReport, String> {
    run_with_limits(cfg, Limits::DEFAULT, progress)
}

/// [`run`] with other work limits: no request starts past
/// `limits.max_requests`, and the run fails with an error once more than
/// `limits.max_events` events have been handled (the tests' way to fail a
/// run that would not end).
///
/// With several machines both arrangements run, the bucket-per-machine one
/// first, each with half of each limit; the report is the
/// bucket-per-machine run with both arrangements in
/// [`SimReport::machines`].
pub fn run_with_limits(
    cfg: &SimConfig,
    limits: Limits,
    progress: &mut dyn FnMut(u64),
) -> Result<SimReport, String> {
    validate(cfg)?;
    if cfg.machines <= 1 {
        return run_arrangement(cfg, Buckets::PerMachine, limits, progress);
    }
    let half = Limits {
        max_requests: limits.max_requests / 2,
        max_events: limits.max_events / 2,
    };
    let mut per_machine = run_arrangement(cfg, Buckets::PerMachine, half, progress)?;
    let done = cfg.duration_ms;
    let fleet = run_arrangement(cfg, Buckets::Fleet, half, &mut |now| {
        progress(done.saturating_add(now))
    })?;
    per_machine.machines = Some(MachinesReport {
        machines: cfg.machines,
        rate_per_min: cfg.budget.rate_per_min,
        bucket_per_machine: arrangement_report(&per_machine, Buckets::PerMachine, cfg.machines),
        fleet_bucket: arrangement_report(&fleet, Buckets::Fleet, cfg.machines),
    });
    Ok(per_machine)
}

/// The gates of `cfg.machines` machines in one arrangement, one per
/// machine.
fn gates(
    cfg: &SimConfig,
    config: &Config,
    buckets: Buckets,
    bound_ms: u64,
) -> Result<Vec<Box<dyn Gate>>, String> {
    let machines = cfg.machines.max(1) as usize;
    let rejected = |e| format!("the pacer rejected the settings: {e:?}");
    let gates: Vec<Box<dyn Gate>> = match (cfg.design, buckets) {
        (Design::AdmitAnyway, buckets) => {
            let new = || AdmitAnywayGate::new(cfg.budget.rate_per_min, cfg.burst, bound_ms, 0);
            match buckets {
                Buckets::PerMachine => (0..machines)
                    .map(|_| Box::new(new()) as Box<dyn Gate>)
                    .collect(),
                Buckets::Fleet => {
                    let shared = Rc::new(RefCell::new(new()));
                    (0..machines)
                        .map(|_| Box::new(Rc::clone(&shared)) as Box<dyn Gate>)
                        .collect()
                }
            }
        }
        (Design::Paced, buckets) => {
            let fleet = match buckets {
                Buckets::PerMachine => None,
                Buckets::Fleet => Some(Rc::new(Pacer::new(config, 0).map_err(rejected)?)),
            };
            let mut gates: Vec<Box<dyn Gate>> = Vec::with_capacity(machines);
            for _ in 0..machines {
                let pacer = match &fleet {
                    Some(shared) => Rc::clone(shared),
                    None => Rc::new(Pacer::new(config, 0).map_err(rejected)?),
                };
                gates.push(if cfg.booking {
                    Box::new(BookingGate::sharing(pacer))
                } else {
                    Box::new(CoreGate::sharing(pacer))
                });
            }
            gates
        }
    };
    Ok(gates)
}

/// One arrangement of `cfg.machines` machines (one machine: the single
/// proxy, the same in both arrangements), with these limits; its report
/// has no [`SimReport::machines`].
pub fn run_arrangement(
    cfg: &SimConfig,
    buckets: Buckets,
    limits: Limits,
    progress: &mut dyn FnMut(u64),
) -> Result<SimReport, String> {
    let max_events = limits.max_events;
    validate(cfg)?;
    let budget = cfg.budget;
    let config = Config {
        rate_per_min: budget.rate_per_min,
        burst: cfg.burst,
        idle_timeout_ms: budget.idle_timeout_ms,
        max_retries: budget.max_retries,
        release_policy: cfg.release_policy,
        adaptive_floor_per_min: cfg.adaptive.map_or(0, |(floor, _)| floor),
        adaptive_ceiling_per_min: cfg.adaptive.map_or(0, |(_, ceiling)| ceiling),
    };
    let probe =
        Pacer::new(&config, 0).map_err(|e| format!("the pacer rejected the settings: {e:?}"))?;
    let mode = probe.mode();
    let bound_ms = probe.wait_bound_ms();
    let gates = gates(cfg, &config, buckets, bound_ms)?;
    let client_retries = match cfg.load {
        Load::Open {
            on_refusal: OnRefusal::Drop,
            ..
        } => 0,
        _ => budget.max_retries,
    };
    let mut sim = Sim {
        cfg,
        gates,
        client: Client {
            max_retries: client_retries,
        },
        machines: (0..cfg.machines)
            .map(|machine| Machine {
                rng: SplitMix64::new(machine_seed(cfg.seed, machine)),
                arrival_index: 0,
                poisson_clock: 0.0,
            })
            .collect(),
        heap: BinaryHeap::new(),
        seq: 0,
        requests: Vec::new(),
        max_requests: limits.max_requests,
        request_limit_reached_ms: None,
        completed: 0,
        rate_limited: 0,
        overruns: 0,
        cancelled: 0,
        attempts: 0,
        refusals: 0,
        refused_requests: 0,
        admissions: 0,
        waits: 0,
        wait_sum: 0,
        wait_max: 0,
        releases: 0,
        refunded: 0,
        latencies: Vec::new(),
        completion_times: Vec::new(),
        opened_times: Vec::new(),
        offered_times: Vec::new(),
        attempts_pm: PerMinute::default(),
        refused_pm: PerMinute::default(),
        rate_limited_pm: PerMinute::default(),
        upstream_window: VecDeque::new(),
        upstream_throttled: 0,
        throttled_pm: PerMinute::default(),
        rate_trace: Vec::new(),
    };
    if cfg.adaptive.is_some() {
        sim.push(0, Event::Sample);
    }
    for machine in 0..cfg.machines {
        match cfg.load {
            Load::Closed {
                agents, stagger_ms, ..
            } => {
                for agent in machine * agents..(machine + 1) * agents {
                    let at = if stagger_ms > 0 {
                        sim.machines[machine as usize].rng.below(stagger_ms)
                    } else {
                        0
                    };
                    sim.push(at, Event::TurnStart(agent));
                }
            }
            Load::Open { .. } => {
                if let Some(at) = sim.next_arrival(machine) {
                    sim.push(at, Event::Arrival(machine));
                }
            }
        }
    }
    let mut handled: u64 = 0;
    while let Some(Reverse((now, _, event))) = sim.heap.pop() {
        if handled == max_events {
            return Err(format!(
                "the simulation stopped after {max_events} events at virtual time {now} ms \
                 without ending (please report this as a bug)"
            ));
        }
        sim.handle(now, event);
        handled += 1;
        if handled & 4095 == 0 {
            progress(now.min(cfg.duration_ms));
        }
    }
    progress(cfg.duration_ms);
    Ok(report(sim, mode, bound_ms, handled))
}

/// An arrangement's figures, from its run's report.
fn arrangement_report(
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

fn report(sim: Sim<'_>, mode: Mode, bound_ms: u64, events: u64) -> SimReport {
    let cfg = sim.cfg;
    let duration = cfg.duration_ms;
    let minutes = duration.div_ceil(60_000);
    let whole_minutes = duration / 60_000;
    let mut opened = PerMinute::default();
    sim.opened_times.iter().for_each(|&t| opened.add(t));
    let mut offered = PerMinute::default();
    sim.offered_times.iter().for_each(|&t| offered.add(t));
    let mut per_minute_latency: Vec<Vec<u64>> = vec![Vec::new(); minutes as usize];
    for (&t, &latency) in sim.completion_times.iter().zip(&sim.latencies) {
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
                attempts: sim.attempts_pm.get(m),
                refused: sim.refused_pm.get(m),
                terminal_errors: sim.rate_limited_pm.get(m),
                admitted: opened.get(m),
                completed: bucket.len() as u64,
                latency_p50_ms: percentile(bucket, 50),
                latency_max_ms: bucket.last().copied(),
                throttled: cfg.upstream_limit_per_min.map(|_| sim.throttled_pm.get(m)),
                rate_in_force: sim
                    .rate_trace
                    .get(
                        sim.rate_trace
                            .partition_point(|&(t, _)| t < minute * 60_000),
                    )
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
    let mut latencies = sim.latencies.clone();
    latencies.sort_unstable();
    let started = sim.requests.len() as u64;
    let ended = sim.completed + sim.rate_limited + sim.overruns + sim.cancelled;
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
            adaptive_floor_per_min: cfg.adaptive.map(|(floor, _)| floor),
            adaptive_ceiling_per_min: cfg.adaptive.map(|(_, ceiling)| ceiling),
        },
        turns_started: started,
        turns_completed: sim.completed,
        upstream_throttled: cfg.upstream_limit_per_min.map(|_| sim.upstream_throttled),
        terminal_rate_limit_errors: sim.rate_limited,
        deadline_overruns: sim.overruns,
        cancelled: sim.cancelled,
        terminal_error_percent: percent(sim.rate_limited, started),
        latency_p50_ms: percentile(&latencies, 50),
        latency_p90_ms: percentile(&latencies, 90),
        latency_max_ms: latencies.last().copied(),
        latency_mean_ms: (!latencies.is_empty())
            .then(|| latencies.iter().map(|&l| l as f64).sum::<f64>() / latencies.len() as f64),
        attempts: sim.attempts,
        refusals: sim.refusals,
        turns_refused_at_least_once: sim.refused_requests,
        admissions: sim.admissions,
        waits: sim.waits,
        wait_mean_ms: (sim.waits > 0).then(|| sim.wait_sum as f64 / sim.waits as f64),
        wait_max_ms: sim.wait_max,
        releases: sim.releases,
        releases_refunded: sim.refunded,
        admitted_total: count_in(&sim.opened_times, 0, duration),
        admitted_per_min_max: whole.iter().map(|row| row.admitted).max().unwrap_or(0),
        admitted_final_minute: count_in(&sim.opened_times, final_from, duration),
        offered_per_min_max: whole.iter().map(|row| row.offered).max().unwrap_or(0),
        offered_final_minute: count_in(&sim.offered_times, final_from, duration),
        littles_law_turn_ms,
        per_minute,
        notices: Vec::new(),
        events,
        request_limit: sim.max_requests,
        request_limit_reached_ms: sim.request_limit_reached_ms,
        machines: None,
        rate_in_force_trace: sim
            .rate_trace
            .iter()
            .map(|&(t, rate)| [t, u64::from(rate)])
            .collect(),
    }
}

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
        line(format!(
            "upstream: a hidden limit of {limit} new connections in any 60 s; a throttled connection is retried on the client's ladder"
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

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(agents: u32, rate: u32, turn_ms: u64, duration_ms: u64) -> SimConfig {
        SimConfig {
            budget: Budget {
                rate_per_min: rate,
                ..Budget::DEFAULT
            },
            burst: 10,
            release_policy: ReleasePolicy::Refund,
            design: Design::Paced,
            load: Load::Closed {
                agents,
                think_ms: 0,
                stagger_ms: 0,
            },
            turn_ms,
            turn_jitter_ms: 0,
            first_byte_ms: 0,
            duration_ms,
            seed: 1,
            cancel_percent: 0,
            booking: false,
            machines: 1,
            upstream_limit_per_min: None,
            adaptive: None,
        }
    }

    #[test]
    fn unpaced_closed_loop_is_back_to_back_turns() {
        // Rate 0: no pacing. 4 agents, 1000 ms turns, 10 s: 10 turns each.
        let report = run(&closed(4, 0, 1000, 10_000), &mut |_| {}).unwrap();
        assert_eq!(report.turns_started, 40);
        assert_eq!(report.turns_completed, 40);
        assert_eq!(
            (report.latency_p50_ms, report.latency_max_ms),
            (Some(1000), Some(1000))
        );
        assert_eq!((report.refusals, report.waits), (0, 0));
    }

    #[test]
    fn twenty_agents_at_one_per_minute_see_no_terminal_refusal() {
        // SPEC §8: at 1/min the pacer shapes instead of refusing, so the
        // client never sees a refusal to run out of retries on.
        let report = run(&closed(20, 1, 3000, 600_000), &mut |_| {}).unwrap();
        assert_eq!(report.settings.mode, "shaping-low-rate");
        assert_eq!((report.refusals, report.terminal_rate_limit_errors), (0, 0));
        assert!(report.waits >= 1);
    }

    /// SPEC §11's acceptance: with bookings, N agents with 3 s turns at the
    /// defaults settle near N seconds per turn with no terminal errors, and
    /// every slot is used: 10 + 60 · 10 − 1 = 609 connections open in the
    /// 10 minutes (the burst, then one per second up to 599 s).
    #[test]
    fn bookings_turn_overload_into_latency() {
        for agents in [10u32, 20] {
            let cfg = SimConfig {
                booking: true,
                turn_jitter_ms: 1000,
                ..closed(agents, 60, 3000, 600_000)
            };
            let report = run(&cfg, &mut |_| {}).unwrap();
            assert_eq!(report.terminal_rate_limit_errors, 0, "{agents} agents");
            assert_eq!(report.deadline_overruns, 0, "{agents} agents");
            let p50 = report.latency_p50_ms.unwrap();
            let n = u64::from(agents) * 1000;
            assert!(
                p50 + 1000 >= n && p50 <= n + 1000,
                "{agents} agents: p50 {p50} ms"
            );
            assert_eq!(report.admitted_total, 609, "{agents} agents");
        }
    }

    #[test]
    fn without_bookings_twenty_agents_hit_terminal_errors() {
        let cfg = SimConfig {
            turn_jitter_ms: 1000,
            ..closed(20, 60, 3000, 600_000)
        };
        let report = run(&cfg, &mut |_| {}).unwrap();
        assert!(report.terminal_rate_limit_errors > 0);
    }

    #[test]
    fn bookings_need_this_design() {
        let cfg = SimConfig {
            booking: true,
            design: Design::AdmitAnyway,
            ..closed(10, 60, 3000, 60_000)
        };
        assert!(validate(&cfg).is_err());
    }
}
