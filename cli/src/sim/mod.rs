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
//!
//! # Where each part lives
//! - this file: the event loop (requests, events, each arrangement's
//!   gates) and [`run`];
//! - `config.rs`: what a run depends on ([`SimConfig`]), its limits and
//!   [`validate`];
//! - `load.rs`: each machine's random stream and open-loop arrivals;
//! - `upstream.rs`: the upstream's hidden limit and its models
//!   ([`UpstreamModel`]: sliding or fixed-minute window, token bucket, limit
//!   changes, penalty);
//! - `report.rs`: what a run measured ([`SimReport`]), from the loop's
//!   tallies; `render.rs`: the report as text.
//!
//! The client's retry rule (SPEC §8) is [`crate::client`]; the gates are
//! [`crate::gate`].

mod config;
mod load;
mod render;
mod report;
mod upstream;

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;

use pacer_core::{Config, Outcome as Upstream, Pacer};

pub use config::{
    validate, Arrivals, Buckets, Design, Limits, Load, OnRefusal, SimConfig, MAX_AGENTS,
    MAX_EVENTS, MAX_MACHINES, MAX_MS, MAX_OFFERED_PER_MIN, MAX_REQUESTS,
};
pub use load::machine_seed;
pub use render::{render, render_comparison};
pub use report::{
    mode_name, policy_name, ArrangementReport, MachinesReport, MinuteRow, RunSettings, SimReport,
};
pub use upstream::{
    UpstreamKind, UpstreamLimit, UpstreamModel, DEFAULT_UPSTREAM_BURST, MAX_LIMIT_CHANGES,
    MAX_UPSTREAM_LIMIT,
};

use crate::client::{Client, ClientStep, RetryHeaders};
use crate::gate::{AdmitAnywayGate, BookingGate, CoreGate, Gate, GateDecision};
use load::Machine;
use report::{arrangement_report, report, Tallies};

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
    /// What the run counted, for its report.
    tallies: Tallies,
    /// The upstream's hidden limit (`--upstream-limit-per-min`).
    upstream: UpstreamLimit,
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
            self.tallies.request_limit_reached_ms.get_or_insert(now);
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
        self.tallies.offered_times.push(now);
        self.push(deadline_ms, Event::Deadline(id));
        self.attempt(id, now);
        true
    }

    fn attempt(&mut self, id: usize, now: u64) {
        if self.requests[id].phase != Phase::Backoff {
            return;
        }
        self.requests[id].attempts += 1;
        self.tallies.attempts += 1;
        self.tallies.attempts_pm.add(now);
        let retries_left = self
            .client
            .max_retries
            .saturating_sub(self.requests[id].attempts - 1);
        let machine = self.requests[id].machine as usize;
        match self.gates[machine].reserve_for(now, id, retries_left) {
            GateDecision::Admitted { wait_ms, ticket } => {
                self.tallies.admissions += 1;
                if wait_ms > 0 {
                    self.tallies.waits += 1;
                    self.tallies.wait_sum += u128::from(wait_ms);
                    self.tallies.wait_max = self.tallies.wait_max.max(wait_ms);
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
                self.tallies.refusals += 1;
                self.tallies.refused_pm.add(now);
                let request = &mut self.requests[id];
                request.refused += 1;
                if request.refused == 1 {
                    self.tallies.refused_requests += 1;
                }
                self.retry_or_fail(id, RetryHeaders::pacer_refusal(retry_after_s), now);
            }
        }
    }

    fn finish(&mut self, id: usize, outcome: Outcome, now: u64) {
        // A booking the request will never redeem goes back (SPEC §11).
        let machine = self.requests[id].machine as usize;
        if self.gates[machine].forget(id, now) {
            self.tallies.releases += 1;
            self.tallies.refunded += 1;
        }
        let request = &mut self.requests[id];
        request.phase = Phase::Done;
        match outcome {
            Outcome::Completed => {
                self.tallies.completed += 1;
                self.tallies.latencies.push(now - request.start_ms);
                self.tallies.completion_times.push(now);
            }
            Outcome::RateLimited => {
                self.tallies.rate_limited += 1;
                self.tallies.rate_limited_pm.add(now);
            }
            Outcome::Overrun => self.tallies.overruns += 1,
            Outcome::Cancelled => self.tallies.cancelled += 1,
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
            self.tallies.releases += 1;
            if self.gates[machine].release(ticket, now) {
                self.tallies.refunded += 1;
            }
        }
    }

    /// The upstream throttled request `id`'s connection at `now`: the proxy
    /// tells its pacer (adaptive runs) and answers the client with a
    /// retryable rate limit carrying no delay header (the upstream's own
    /// answer has none), so the client backs off on its ladder; on its last
    /// attempt the turn ends in a rate-limit error.
    fn throttled(&mut self, id: usize, now: u64) {
        self.tallies.upstream_throttled += 1;
        self.tallies.throttled_pm.add(now);
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
        self.machines[machine as usize].next_arrival(self.cfg.load, self.cfg.duration_ms)
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
                if self.upstream.throttles(now) {
                    self.throttled(id, now);
                    return;
                }
                let request = &mut self.requests[id];
                request.phase = Phase::Streaming;
                request.first_byte_at =
                    now.saturating_add(self.cfg.first_byte_ms.min(request.service_ms));
                let end = now.saturating_add(request.service_ms);
                let machine = request.machine as usize;
                self.tallies.opened_times.push(now);
                if self.cfg.adaptive.is_some() {
                    self.gates[machine].observe(Upstream::Opened, now);
                }
                self.push(end, Event::Complete(id));
            }
            Event::Sample => {
                if let Some(rate) = self.gates[0].rate_in_force(now) {
                    self.tallies.rate_trace.push((now, rate));
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
        release_policy: cfg.release_policy,
        adaptive_floor_per_min: cfg.adaptive.map_or(0, |(floor, _)| floor),
        adaptive_ceiling_per_min: cfg.adaptive.map_or(0, |(_, ceiling)| ceiling),
        ..Config::from_budget(&budget, cfg.burst)
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
            .map(|machine| Machine::new(cfg.seed, machine))
            .collect(),
        heap: BinaryHeap::new(),
        seq: 0,
        requests: Vec::new(),
        max_requests: limits.max_requests,
        tallies: Tallies::default(),
        upstream: UpstreamLimit::new(cfg.upstream_limit_per_min, cfg.upstream_model),
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
    let started = sim.requests.len() as u64;
    Ok(report(
        cfg,
        &sim.tallies,
        started,
        sim.max_requests,
        mode,
        bound_ms,
        handled,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_core::Budget;

    fn closed(agents: u32, rate: u32, turn_ms: u64, duration_ms: u64) -> SimConfig {
        SimConfig {
            budget: Budget {
                rate_per_min: rate,
                ..Budget::DEFAULT
            },
            load: Load::closed(agents),
            turn_ms,
            turn_jitter_ms: 0,
            duration_ms,
            ..SimConfig::DEFAULT
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
