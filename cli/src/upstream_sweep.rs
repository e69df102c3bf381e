//! `simulate --sweep-upstream T,T,…`: adaptive pacing against fixed rates
//! when the upstream's limit is unknown (SPEC §14). For each hidden limit
//! `T` the same run goes once per fixed rate and once adaptive; the table
//! says, per `T`, how many turns each completed, how many throttle answers
//! the upstream gave, and whether adaptive pacing met its two goals: at
//! least [`TURNS_GOAL_PERCENT`]% of the best fixed rate's completed turns,
//! and throttles under [`THROTTLE_GOAL_PERCENT`]% of its own completed turns.

use serde::Serialize;

use crate::sim::{self, SimConfig, SimReport};
use crate::stats::percent;

/// Adaptive pacing completes at least this share of the best fixed rate's
/// turns, percent.
pub const TURNS_GOAL_PERCENT: f64 = 90.0;
/// Its upstream throttles stay under this share of its completed turns,
/// percent.
pub const THROTTLE_GOAL_PERCENT: f64 = 5.0;

/// One run's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    /// Turns completed.
    pub turns_completed: u64,
    /// Throttle answers the upstream gave.
    pub upstream_throttled: u64,
    /// Turns that ended in a terminal rate-limit error (pacer refusals
    /// and upstream throttles on the last attempt).
    pub terminal_rate_limit_errors: u64,
}

/// One hidden limit's runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    /// The upstream's hidden limit, per minute.
    pub upstream_limit_per_min: u32,
    /// `(rate, run)` for each fixed rate, in the order given.
    pub fixed: Vec<(u32, Run)>,
    /// The adaptive run.
    pub adaptive: Run,
    /// Adaptive turns as a percentage of the best fixed rate's.
    pub turns_percent_of_best_fixed: f64,
    /// Adaptive throttles as a percentage of its completed turns.
    pub throttled_percent_of_turns: f64,
    /// Both goals met.
    pub goals_met: bool,
    /// The adaptive run's rate in force, `[ms, per minute]` every 5 s.
    pub rate_in_force_trace: Vec<[u64; 2]>,
}

/// The sweep.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sweep {
    /// The adaptive runs' starting rate, floor and ceiling.
    pub adaptive_start_per_min: u32,
    /// See `adaptive_start_per_min`.
    pub adaptive_floor_per_min: u32,
    /// See `adaptive_start_per_min`.
    pub adaptive_ceiling_per_min: u32,
    /// One row per hidden limit, in the order given.
    pub rows: Vec<Row>,
}

fn run_of(report: &SimReport) -> Run {
    Run {
        turns_completed: report.turns_completed,
        upstream_throttled: report.upstream_throttled.unwrap_or(0),
        terminal_rate_limit_errors: report.terminal_rate_limit_errors,
    }
}

/// Runs `config` for every limit in `limits`: at each rate of
/// `fixed_rates` without adaptation, and with `config.adaptive` (which must
/// be set) from `config`'s rate.
pub fn run(config: &SimConfig, limits: &[u32], fixed_rates: &[u32]) -> Result<Sweep, String> {
    let Some((floor, ceiling)) = config.adaptive else {
        return Err(
            "--sweep-upstream compares adaptive pacing with fixed rates: add --adaptive".into(),
        );
    };
    let mut rows = Vec::new();
    for &limit in limits {
        let mut fixed = Vec::new();
        for &rate in fixed_rates {
            let mut with = *config;
            with.budget.rate_per_min = rate;
            with.adaptive = None;
            with.upstream_limit_per_min = Some(limit);
            fixed.push((rate, run_of(&sim::run(&with, &mut |_| {})?)));
        }
        let mut with = *config;
        with.upstream_limit_per_min = Some(limit);
        let report = sim::run(&with, &mut |_| {})?;
        let adaptive = run_of(&report);
        let best = fixed
            .iter()
            .map(|(_, r)| r.turns_completed)
            .max()
            .unwrap_or(0);
        let turns_percent = percent(adaptive.turns_completed, best);
        let throttled_percent = percent(adaptive.upstream_throttled, adaptive.turns_completed);
        rows.push(Row {
            upstream_limit_per_min: limit,
            fixed,
            turns_percent_of_best_fixed: turns_percent,
            throttled_percent_of_turns: throttled_percent,
            goals_met: turns_percent >= TURNS_GOAL_PERCENT
                && throttled_percent < THROTTLE_GOAL_PERCENT,
            adaptive,
            rate_in_force_trace: report.rate_in_force_trace,
        });
    }
    Ok(Sweep {
        adaptive_start_per_min: config.budget.rate_per_min,
        adaptive_floor_per_min: floor,
        adaptive_ceiling_per_min: ceiling,
        rows,
    })
}

/// The sweep as a text table with its answer; `heading` names the run.
pub fn render(sweep: &Sweep, heading: &str) -> String {
    let mut out = format!("{heading}\n\n");
    let Some(first) = sweep.rows.first() else {
        return out;
    };
    out.push_str("limit/min");
    for (rate, _) in &first.fixed {
        out.push_str(&format!(" | fixed {rate:>3}: turns throttled"));
    }
    out.push_str(" | adaptive: turns throttled | % of best fixed | throttled % | goals\n");
    for row in &sweep.rows {
        out.push_str(&format!("{:>9}", row.upstream_limit_per_min));
        for (_, run) in &row.fixed {
            out.push_str(&format!(
                " | {:>17} {:>9}",
                run.turns_completed, run.upstream_throttled
            ));
        }
        out.push_str(&format!(
            " | {:>15} {:>9} | {:>15.1} | {:>11.1} | {}\n",
            row.adaptive.turns_completed,
            row.adaptive.upstream_throttled,
            row.turns_percent_of_best_fixed,
            row.throttled_percent_of_turns,
            if row.goals_met { "met" } else { "missed" }
        ));
    }
    out.push('\n');
    let missed: Vec<String> = sweep
        .rows
        .iter()
        .filter(|r| !r.goals_met)
        .map(|r| r.upstream_limit_per_min.to_string())
        .collect();
    if missed.is_empty() {
        out.push_str(&format!(
            "goals: at every limit adaptive pacing completed at least {TURNS_GOAL_PERCENT:.0}% of the \
             best fixed rate's turns, with upstream throttles under {THROTTLE_GOAL_PERCENT:.0}% of its turns\n"
        ));
    } else {
        out.push_str(&format!(
            "goals: missed at limit(s) {} (at least {TURNS_GOAL_PERCENT:.0}% of the best fixed rate's \
             turns, throttles under {THROTTLE_GOAL_PERCENT:.0}% of its turns)\n",
            missed.join(", ")
        ));
    }
    out
}
