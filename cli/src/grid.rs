//! `simulate --adaptive-grid`: adaptive pacing (SPEC §14) judged on a grid
//! of hidden limits, start rates, loads, run lengths and upstream models,
//! against the best fixed rate at each point.
//!
//! # The goal at each point
//! - **turns**: adaptive pacing completes at least [`TURNS_GOAL_PERCENT`]%
//!   of the turns of the best fixed rate, the fixed runs made with the same
//!   load, upstream and seed over [`fixed_rates`] (a fine grid around the
//!   limit and a coarse one over 1..=600). The best fixed rate is the one
//!   with the most completed turns among those that themselves meet the
//!   throttles goal: below the lowest rate that can refuse (3/min at the
//!   default budget, SPEC §3) the pacer shapes, admitting every request
//!   within its bound, and such a rate completes the most turns at many
//!   points only because the client retries what the upstream throttled
//!   (at 10 to 50 times the throttles the goal allows). Both are reported:
//!   the best fixed rate of all, and the best that meets the throttles
//!   goal, which is what the turns goal is judged against (the best of all
//!   when none meets it);
//! - **throttles**: the upstream throttles at most
//!   [`THROTTLE_GOAL_PERCENT`]% of adaptive pacing's completed turns, plus a
//!   learning allowance of `burst + 3` throttles per limit the run meets
//!   (the start's unknown limit counts as one);
//! - **rate**: in each stretch of one limit `T` (from the start, or from a
//!   change), from 3 minutes into it on, every 5 s sample of the rate in
//!   force is at least `0.75·T`, and at most [`ABOVE_GOAL_PERCENT`]% of
//!   them are above `T`. A law can learn whether a limit rose only by
//!   exceeding it now and then (its probe), so "never above `T`" is not a
//!   goal any law that finds a risen limit can meet; the share above `T` is
//!   what is judged, and reported. Where the load cannot reach the limit
//!   (its demand, agents × 60000 / turn ms or the offered rate, is at most
//!   `T`), the upstream never throttles and nothing shows the limit: the
//!   rate goal does not apply (`n/a`), the turns goal does.
//!
//! The models: `sliding` (any 60 s), `fixed-minute`, `token-bucket` (burst
//! [`crate::sim::DEFAULT_UPSTREAM_BURST`]), `change` (the limit goes to
//! `⌈T/2⌉` and back to `T`: at minutes 20 and 40 of an hour, 4 and 7 of a
//! 10-minute run; `⌈T/2⌉` rather than `⌊T/2⌋` keeps `T = 5` at 3, the lowest
//! rate the default budget can refuse at, SPEC §3) and `penalty` (sliding,
//! and after a throttle every opening refused for [`PENALTY_MS`]). The
//! loads: closed loops of `agents`, open loops (Poisson) at 2× and 5× the
//! limit, and fleets of [`FLEET_MACHINES`] machines sharing one adaptive
//! bucket.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

pub use crate::upstream_sweep::{THROTTLE_GOAL_PERCENT, TURNS_GOAL_PERCENT};

use crate::sim::{
    self, Arrivals, Buckets, Limits, Load, OnRefusal, SimConfig, SimReport, UpstreamKind,
    UpstreamModel, DEFAULT_UPSTREAM_BURST, MAX_LIMIT_CHANGES,
};

/// At most this share of the rate samples judged may lie above the limit,
/// percent.
pub const ABOVE_GOAL_PERCENT: f64 = 10.0;
/// The penalty model's penalty, ms.
pub const PENALTY_MS: u64 = 10_000;
/// Machines in a fleet point.
pub const FLEET_MACHINES: u32 = 3;
/// The rate is judged from this long after the start of each limit, ms
/// (the goal's; `--grid-settle-ms` reads the grid at another).
pub const SETTLE_MS: u64 = 180_000;
/// The longest settle time `--grid-settle-ms` takes: the longest run.
pub const MAX_SETTLE_MS: u64 = 3_600_000;

/// How many points to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GridSize {
    /// The public grid (several minutes on two cores).
    Full,
    /// A few points of it, for the test command (seconds).
    Smoke,
}

/// An upstream model of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// Any 60 s.
    Sliding,
    /// Each calendar minute.
    FixedMinute,
    /// A token bucket with its own burst.
    TokenBucket,
    /// Sliding, with the limit halved and restored mid-run.
    Change,
    /// Sliding, with a penalty after a throttle.
    Penalty,
}

impl Model {
    const ALL: [Model; 5] = [
        Model::Sliding,
        Model::FixedMinute,
        Model::TokenBucket,
        Model::Change,
        Model::Penalty,
    ];

    fn name(self) -> &'static str {
        match self {
            Model::Sliding => "sliding",
            Model::FixedMinute => "fixed-minute",
            Model::TokenBucket => "token-bucket",
            Model::Change => "change",
            Model::Penalty => "penalty",
        }
    }

    /// The simulator's model for limit `limit` in a run of `duration_ms`.
    fn upstream(self, limit: u32, duration_ms: u64) -> UpstreamModel {
        let mut model = UpstreamModel::SLIDING;
        match self {
            Model::Sliding => {}
            Model::FixedMinute => model.kind = UpstreamKind::FixedMinute,
            Model::TokenBucket => {
                model.kind = UpstreamKind::TokenBucket {
                    burst: DEFAULT_UPSTREAM_BURST,
                }
            }
            Model::Change => {
                let (down, up) = if duration_ms >= 3_600_000 {
                    (20, 40)
                } else {
                    (4, 7)
                };
                let mut changes = [None; MAX_LIMIT_CHANGES];
                changes[0] = Some((down * 60_000, limit.div_ceil(2)));
                changes[1] = Some((up * 60_000, limit));
                model.changes = changes;
            }
            Model::Penalty => model.penalty_ms = PENALTY_MS,
        }
        model
    }
}

/// Where a point's requests come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GridLoad {
    /// One machine's agents, one turn at a time.
    Closed {
        /// Agents.
        agents: u32,
    },
    /// Poisson arrivals at this many times the limit, refusals retried.
    Open {
        /// The offered rate over the limit.
        times_limit: u32,
    },
    /// [`FLEET_MACHINES`] machines of `agents` each, one shared bucket.
    Fleet {
        /// Agents on each machine.
        agents: u32,
    },
}

impl GridLoad {
    fn name(self) -> String {
        match self {
            GridLoad::Closed { agents } => format!("{agents} agents"),
            GridLoad::Open { times_limit } => format!("open {times_limit}xT"),
            GridLoad::Fleet { agents } => format!("{FLEET_MACHINES}x{agents} agents"),
        }
    }
}

/// One point of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The upstream model.
    pub model: Model,
    /// The load.
    pub load: GridLoad,
    /// The hidden limit at the start, per minute.
    pub limit_per_min: u32,
    /// Adaptive pacing's starting rate, per minute.
    pub start_per_min: u32,
    /// The run's length, ms.
    pub duration_ms: u64,
}

/// The limits, start rates, agents and lengths of the public grid.
pub const LIMITS: [u32; 8] = [5, 10, 20, 40, 80, 160, 320, 500];
/// See [`LIMITS`].
pub const STARTS: [u32; 4] = [1, 30, 120, 600];
/// See [`LIMITS`].
pub const AGENTS: [u32; 4] = [5, 20, 60, 200];
/// See [`LIMITS`].
pub const DURATIONS_MS: [u64; 2] = [600_000, 3_600_000];
/// Open loops offer this many times the limit.
pub const OPEN_TIMES: [u32; 2] = [2, 5];
/// Agents on each machine of a fleet point.
pub const FLEET_AGENTS: [u32; 2] = [7, 20];

/// The points of a grid of this size.
pub fn points(size: GridSize) -> Vec<Point> {
    let mut points = Vec::new();
    let (models, limits, starts, durations): (&[Model], &[u32], &[u32], &[u64]) = match size {
        GridSize::Full => (&Model::ALL, &LIMITS, &STARTS, &DURATIONS_MS),
        GridSize::Smoke => (
            &[Model::Sliding, Model::Change],
            &[20, 80, 320],
            &[30, 600],
            &[DURATIONS_MS[0]],
        ),
    };
    let loads: Vec<GridLoad> = match size {
        GridSize::Full => AGENTS
            .iter()
            .map(|&agents| GridLoad::Closed { agents })
            .chain(
                OPEN_TIMES
                    .iter()
                    .map(|&times_limit| GridLoad::Open { times_limit }),
            )
            .chain(
                FLEET_AGENTS
                    .iter()
                    .map(|&agents| GridLoad::Fleet { agents }),
            )
            .collect(),
        GridSize::Smoke => vec![GridLoad::Closed { agents: 60 }],
    };
    for &model in models {
        for &load in &loads {
            if matches!(load, GridLoad::Fleet { .. }) && model != Model::Sliding {
                continue;
            }
            for &duration_ms in durations {
                for &limit_per_min in limits {
                    for &start_per_min in starts {
                        points.push(Point {
                            model,
                            load,
                            limit_per_min,
                            start_per_min,
                            duration_ms,
                        });
                    }
                }
            }
        }
    }
    points
}

/// The fixed rates a point's best fixed rate is chosen among: every
/// sixteenth of the limit from a quarter of it to 2.5 times it, and a
/// coarse grid over 1..=600.
pub fn fixed_rates(limit: u32) -> Vec<u32> {
    const COARSE: [u32; 30] = [
        1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 75, 90, 105, 120, 150, 180, 210,
        240, 300, 360, 420, 480, 540, 600,
    ];
    let mut rates: Vec<u32> = (4..=40)
        .map(|k| (limit * k / 16).clamp(1, 600))
        .chain(COARSE)
        .collect();
    rates.sort_unstable();
    rates.dedup();
    rates
}

/// One fixed rate's run.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Fixed {
    /// The rate, per minute.
    pub rate_per_min: u32,
    /// Completed turns.
    pub turns: u64,
    /// Upstream throttles.
    pub throttles: u64,
}

/// What one point measured and whether it met the goal.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    /// The point.
    pub point: Point,
    /// The fixed rate with the most completed turns, per minute, its
    /// turns and its throttles.
    pub most_turns_fixed: Fixed,
    /// The fixed rate with the most completed turns among those within the
    /// throttles goal (the turns goal's yardstick; `most_turns_fixed` when
    /// none is).
    pub best_fixed: Fixed,
    /// Adaptive pacing's completed turns.
    pub turns: u64,
    /// Those as a percentage of the best fixed rate's.
    pub turns_percent_of_best: f64,
    /// Upstream throttles in the adaptive run.
    pub throttles: u64,
    /// Those as a percentage of its completed turns.
    pub throttles_percent_of_turns: f64,
    /// The throttles allowed: the share of turns plus the allowance.
    pub throttles_allowed: f64,
    /// Whether the load's demand exceeds the limit (else the rate goal
    /// does not apply).
    pub limit_binds: bool,
    /// The lowest and highest rate sample judged, per minute.
    pub rate_low_per_min: Option<u32>,
    /// See `rate_low_per_min`.
    pub rate_high_per_min: Option<u32>,
    /// Samples judged above their limit, percent.
    pub above_percent: f64,
    /// The longest time, over the limits of the run, from a limit's start
    /// until the rate stays at or above 0.75 of it, ms (`None`: it never
    /// does).
    pub converge_ms: Option<u64>,
    /// The three goals.
    pub turns_met: bool,
    /// See `turns_met`.
    pub throttles_met: bool,
    /// See `turns_met` (true where it does not apply).
    pub rate_met: bool,
}

impl PointResult {
    /// All three goals met.
    pub fn met(&self) -> bool {
        self.turns_met && self.throttles_met && self.rate_met
    }
}

/// The grid's results.
#[derive(Clone, Debug, Serialize)]
pub struct GridReport {
    /// How many points.
    pub size: GridSize,
    /// How long after the start of each limit the rate was judged from, ms
    /// ([`SETTLE_MS`] unless read at another).
    pub settle_ms: u64,
    /// One result a point, in [`points`]' order.
    pub points: Vec<PointResult>,
}

impl GridReport {
    /// Points that met the goal.
    pub fn met(&self) -> usize {
        self.points.iter().filter(|p| p.met()).count()
    }
}

/// The run of `point` at `rate` (adaptive when `adaptive`), from `base`'s
/// budget, burst, turns and seed.
fn config(base: &SimConfig, point: &Point, rate: u32, adaptive: bool) -> SimConfig {
    let mut cfg = *base;
    cfg.budget.rate_per_min = rate;
    cfg.duration_ms = point.duration_ms;
    cfg.upstream_limit_per_min = Some(point.limit_per_min);
    cfg.upstream_model = point.model.upstream(point.limit_per_min, point.duration_ms);
    cfg.adaptive = adaptive.then_some((1, 600));
    cfg.machines = 1;
    cfg.load = match point.load {
        GridLoad::Closed { agents } | GridLoad::Fleet { agents } => Load::closed(agents),
        GridLoad::Open { times_limit } => Load::Open {
            arrivals: Arrivals::Poisson {
                mean_num: 60_000,
                mean_den: u64::from(times_limit * point.limit_per_min),
            },
            on_refusal: OnRefusal::Retry,
        },
    };
    if let GridLoad::Fleet { .. } = point.load {
        cfg.machines = FLEET_MACHINES;
    }
    cfg
}

/// One run of `cfg`: a fleet point's shared bucket, else the single
/// machine.
fn simulate(cfg: &SimConfig) -> Result<SimReport, String> {
    let buckets = if cfg.machines > 1 {
        Buckets::Fleet
    } else {
        Buckets::PerMachine
    };
    sim::run_arrangement(cfg, buckets, Limits::DEFAULT, &mut |_| {})
}

/// Runs `jobs` on every core, results in order.
fn on_every_core<J: Sync, R: Send>(
    jobs: &[J],
    run: impl Fn(&J) -> Result<R, String> + Sync,
) -> Result<Vec<R>, String> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<R, String>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(index) else {
                    break;
                };
                let result = run(job);
                results.lock().expect("no worker panics")[index] = Some(result);
            });
        }
    });
    results
        .into_inner()
        .expect("no worker panics")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// The load's demand for new connections, per minute.
fn demand_per_min(base: &SimConfig, point: &Point) -> u64 {
    let turn = base.turn_ms.max(1);
    match point.load {
        GridLoad::Closed { agents } => u64::from(agents) * 60_000 / turn,
        GridLoad::Fleet { agents } => u64::from(agents * FLEET_MACHINES) * 60_000 / turn,
        GridLoad::Open { times_limit } => u64::from(times_limit * point.limit_per_min),
    }
}

/// Judges one adaptive run of `point` against its best fixed rate.
fn judge(
    base: &SimConfig,
    settle_ms: u64,
    point: Point,
    fixed: &[Fixed],
    report: &SimReport,
) -> PointResult {
    let model = point.model.upstream(point.limit_per_min, point.duration_ms);
    let mut starts = vec![0];
    starts.extend(model.change_times_ms());
    let allowed = |turns: u64| {
        THROTTLE_GOAL_PERCENT / 100.0 * turns as f64
            + f64::from(base.burst + 3) * starts.len() as f64
    };
    let most = |admit: &dyn Fn(&Fixed) -> bool| {
        fixed
            .iter()
            .filter(|f| admit(f))
            .fold(None::<Fixed>, |best, f| match best {
                Some(b) if b.turns >= f.turns => Some(b),
                _ => Some(*f),
            })
    };
    let most_turns_fixed = most(&|_| true).unwrap_or_default();
    let best_fixed = most(&|f| f.throttles as f64 <= allowed(f.turns)).unwrap_or(most_turns_fixed);
    let turns = report.turns_completed;
    let throttles = report.upstream_throttled.unwrap_or(0);
    let throttles_allowed = allowed(turns);
    let limit_binds = demand_per_min(base, &point) > u64::from(point.limit_per_min);
    let (mut low, mut high, mut judged, mut above) = (None::<u32>, None::<u32>, 0u64, 0u64);
    let mut below = false;
    let mut converge_ms = Some(0u64);
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(point.duration_ms);
        let limit = model.limit_at(point.limit_per_min, start);
        let floor = 0.75 * f64::from(limit);
        let stretch: Vec<(u64, u32)> = report
            .rate_in_force_trace
            .iter()
            .map(|&[at, rate]| (at, rate as u32))
            .filter(|&(at, _)| at >= start && at < end)
            .collect();
        // From the last sample below 0.75·T on, the rate stays up.
        let settled = match stretch.iter().rposition(|&(_, r)| f64::from(r) < floor) {
            None => Some(0),
            Some(k) => stretch.get(k + 1).map(|&(at, _)| at - start),
        };
        converge_ms = match (converge_ms, settled) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        for &(at, rate) in &stretch {
            if at < start.saturating_add(settle_ms) {
                continue;
            }
            judged += 1;
            low = Some(low.map_or(rate, |l| l.min(rate)));
            high = Some(high.map_or(rate, |h| h.max(rate)));
            below |= f64::from(rate) < floor;
            above += u64::from(rate > limit);
        }
    }
    let above_percent = crate::stats::percent(above, judged);
    let turns_percent_of_best = crate::stats::percent(turns, best_fixed.turns);
    PointResult {
        point,
        most_turns_fixed,
        best_fixed,
        turns,
        turns_percent_of_best,
        throttles,
        throttles_percent_of_turns: crate::stats::percent(throttles, turns),
        throttles_allowed,
        limit_binds,
        rate_low_per_min: low,
        rate_high_per_min: high,
        above_percent,
        converge_ms,
        turns_met: turns_percent_of_best >= TURNS_GOAL_PERCENT,
        throttles_met: throttles as f64 <= throttles_allowed,
        rate_met: !limit_binds || (!below && above_percent <= ABOVE_GOAL_PERCENT),
    }
}

/// Runs the grid from `base` (its budget, burst, turn lengths, seed; every
/// other setting is the grid's), judging the rate from `settle_ms` after the
/// start of each limit ([`SETTLE_MS`] for the goal).
pub fn run(base: &SimConfig, size: GridSize, settle_ms: u64) -> Result<GridReport, String> {
    let points = points(size);
    // The fixed runs do not depend on the start rate: one set per
    // (model, load, limit, length).
    let mut keys: Vec<Point> = Vec::new();
    for p in &points {
        let key = Point {
            start_per_min: 0,
            ..*p
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let fixed_jobs: Vec<(usize, u32)> = keys
        .iter()
        .enumerate()
        .flat_map(|(k, key)| {
            fixed_rates(key.limit_per_min)
                .into_iter()
                .map(move |r| (k, r))
        })
        .collect();
    let fixed = on_every_core(&fixed_jobs, |&(k, rate)| {
        let report = simulate(&config(base, &keys[k], rate, false))?;
        Ok(Fixed {
            rate_per_min: rate,
            turns: report.turns_completed,
            throttles: report.upstream_throttled.unwrap_or(0),
        })
    })?;
    let mut by_key = vec![Vec::new(); keys.len()];
    for (&(k, _), run) in fixed_jobs.iter().zip(&fixed) {
        by_key[k].push(*run);
    }
    let adaptive = on_every_core(&points, |p| {
        simulate(&config(base, p, p.start_per_min, true))
    })?;
    let results = points
        .iter()
        .zip(&adaptive)
        .map(|(p, report)| {
            let key = Point {
                start_per_min: 0,
                ..*p
            };
            let k = keys
                .iter()
                .position(|q| *q == key)
                .expect("every point has its key");
            judge(base, settle_ms, *p, &by_key[k], report)
        })
        .collect();
    Ok(GridReport {
        size,
        settle_ms,
        points: results,
    })
}

/// The grid as a text table, one row a point, and its last line
/// `adaptive goal met at N/M points`.
pub fn render(report: &GridReport, heading: &str) -> String {
    let mut out = format!("{heading}\n\n");
    out.push_str(
        "model        | load          | limit | start | min | most turns fixed: rate turns throttles | best fixed: rate turns | adaptive turns |  % best | throttles (allowed) | % turns | rate low..high | above T % | converge s | goal\n",
    );
    for r in &report.points {
        let p = &r.point;
        let rate = match (r.limit_binds, r.rate_low_per_min, r.rate_high_per_min) {
            (false, _, _) => "n/a".to_string(),
            (true, Some(low), Some(high)) => format!("{low}..{high}"),
            _ => "-".to_string(),
        };
        let converge = match (r.limit_binds, r.converge_ms) {
            (false, _) => "n/a".to_string(),
            (true, Some(ms)) => format!("{}", ms / 1000),
            (true, None) => "never".to_string(),
        };
        let mut missed = Vec::new();
        if !r.turns_met {
            missed.push("turns");
        }
        if !r.throttles_met {
            missed.push("throttles");
        }
        if !r.rate_met {
            missed.push("rate");
        }
        out.push_str(&format!(
            "{:<12} | {:<13} | {:>5} | {:>5} | {:>3} | {:>22} {:>5} {:>9} | {:>16} {:>5} | {:>14} | {:>7.1} | {:>9} ({:>7.1}) | {:>7.1} | {:>14} | {:>9.1} | {:>10} | {}\n",
            p.model.name(),
            p.load.name(),
            p.limit_per_min,
            p.start_per_min,
            p.duration_ms / 60_000,
            r.most_turns_fixed.rate_per_min,
            r.most_turns_fixed.turns,
            r.most_turns_fixed.throttles,
            r.best_fixed.rate_per_min,
            r.best_fixed.turns,
            r.turns,
            r.turns_percent_of_best,
            r.throttles,
            r.throttles_allowed,
            r.throttles_percent_of_turns,
            rate,
            if r.limit_binds { r.above_percent } else { 0.0 },
            converge,
            if missed.is_empty() {
                "met".to_string()
            } else {
                format!("missed: {}", missed.join(", "))
            },
        ));
    }
    out.push('\n');
    for model in Model::ALL {
        let of: Vec<&PointResult> = report
            .points
            .iter()
            .filter(|r| r.point.model == model)
            .collect();
        if of.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "{}: met at {}/{} (turns {}, throttles {}, rate {})\n",
            model.name(),
            of.iter().filter(|r| r.met()).count(),
            of.len(),
            of.iter().filter(|r| r.turns_met).count(),
            of.iter().filter(|r| r.throttles_met).count(),
            of.iter().filter(|r| r.rate_met).count(),
        ));
    }
    out.push_str(&format!(
        "adaptive goal met at {}/{} points{}\n",
        report.met(),
        report.points.len(),
        if report.settle_ms == SETTLE_MS {
            String::new()
        } else {
            format!(
                " (the rate judged from {} s, not the goal's {} s)",
                report.settle_ms as f64 / 1000.0,
                SETTLE_MS / 1000
            )
        }
    ));
    out
}
