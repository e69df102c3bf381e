//! `simulate --sweep-agents FROM..TO`: how many agents fit at this rate.
//! The same closed-loop run once per agent count, tabled: completed turns
//! per minute, turn latency p50/p90 and the share of turns that end in a
//! terminal rate-limit error.

use serde::Serialize;

use crate::sim::{self, Load, SimConfig, SimReport};

/// One agent count's run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SweepRow {
    /// Agents in the run.
    pub agents: u32,
    /// Turns started.
    pub turns_started: u64,
    /// Turns completed.
    pub turns_completed: u64,
    /// Completed turns per minute of the run.
    pub turns_per_min: f64,
    /// Median latency of completed turns, ms.
    pub latency_p50_ms: Option<u64>,
    /// p90, ms.
    pub latency_p90_ms: Option<u64>,
    /// Turns that ended in a terminal rate-limit error.
    pub terminal_rate_limit_errors: u64,
    /// As a percentage of turns started.
    pub terminal_error_percent: f64,
}

/// The sweep: its rows and the answer.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sweep {
    /// One row per agent count, ascending.
    pub rows: Vec<SweepRow>,
    /// The most agents of the sweep whose run, and every run with fewer,
    /// ended no turn in a terminal error (`None`: not even the first).
    pub fit: Option<u32>,
}

/// Runs `config` (a closed loop; its agent count is replaced) once for each
/// count in `from..=to`.
pub fn run(config: &SimConfig, from: u32, to: u32) -> Result<Sweep, String> {
    let Load::Closed {
        think_ms,
        stagger_ms,
        ..
    } = config.load
    else {
        return Err("--sweep-agents sweeps a closed loop; drop the open-loop flags".into());
    };
    let mut rows = Vec::new();
    for agents in from..=to {
        let with = SimConfig {
            load: Load::Closed {
                agents,
                think_ms,
                stagger_ms,
            },
            ..*config
        };
        let report = sim::run(&with, &mut |_| {})?;
        rows.push(row(agents, &report, config.duration_ms));
    }
    let fit = rows
        .iter()
        .take_while(|r| r.terminal_rate_limit_errors == 0)
        .last()
        .map(|r| r.agents);
    Ok(Sweep { rows, fit })
}

fn row(agents: u32, report: &SimReport, duration_ms: u64) -> SweepRow {
    SweepRow {
        agents,
        turns_started: report.turns_started,
        turns_completed: report.turns_completed,
        turns_per_min: report.turns_completed as f64 * 60_000.0 / duration_ms as f64,
        latency_p50_ms: report.latency_p50_ms,
        latency_p90_ms: report.latency_p90_ms,
        terminal_rate_limit_errors: report.terminal_rate_limit_errors,
        terminal_error_percent: report.terminal_error_percent,
    }
}

fn seconds(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".into(), |ms| format!("{:.1}", ms as f64 / 1000.0))
}

/// The sweep as a text table with its answer; `heading` names the run.
pub fn render(sweep: &Sweep, heading: &str) -> String {
    let mut out = format!("{heading}\n\n");
    out.push_str("agents  turns/min  p50 s  p90 s  terminal errors\n");
    for r in &sweep.rows {
        out.push_str(&format!(
            "{:>6}  {:>9.1}  {:>5}  {:>5}  {:>6.1}% ({})\n",
            r.agents,
            r.turns_per_min,
            seconds(r.latency_p50_ms),
            seconds(r.latency_p90_ms),
            r.terminal_error_percent,
            r.terminal_rate_limit_errors
        ));
    }
    out.push('\n');
    match (sweep.fit, sweep.rows.first(), sweep.rows.last()) {
        (Some(fit), _, Some(last)) if fit == last.agents => out.push_str(&format!(
            "fit: every count up to {fit} agents ends no turn in a terminal rate-limit error; \
             sweep further to find the limit\n"
        )),
        (Some(fit), _, _) => {
            let next = sweep.rows.iter().find(|r| r.agents == fit + 1);
            out.push_str(&format!(
                "fit: up to {fit} agents end no turn in a terminal rate-limit error at this rate"
            ));
            if let Some(next) = next {
                out.push_str(&format!(
                    "; at {} agents {:.1}% of turns do",
                    next.agents, next.terminal_error_percent
                ));
            }
            out.push_str(" (--booking turns those errors into waiting)\n");
        }
        (None, Some(first), _) => out.push_str(&format!(
            "fit: even {} agents end {:.1}% of turns in a terminal rate-limit error at this rate\n",
            first.agents, first.terminal_error_percent
        )),
        (None, None, _) => {}
    }
    out
}
