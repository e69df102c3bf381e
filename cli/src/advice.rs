//! What would end a run's terminal rate-limit errors: each change the
//! simulator can make on its own (bookings, fewer agents, a higher rate),
//! simulated with everything else as it was.
//!
//! The searches bisect: the most agents below the run's count, and the
//! lowest rate above its own, that end no turn in a terminal error
//! (terminal errors grow with agents and fall with the rate, so a handful
//! of runs finds each; every change reported was itself simulated).

use serde::Serialize;

use crate::sim::{self, Design, Load, SimConfig, SimReport};

/// One change and what the simulator measured with it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Remedy {
    /// The flag that makes the change, as the command line takes it.
    pub change: String,
    /// Terminal rate-limit errors with the change.
    pub terminal_rate_limit_errors: u64,
    /// Turns completed with the change.
    pub turns_completed: u64,
    /// Median latency of completed turns with the change, ms.
    pub latency_p50_ms: Option<u64>,
    /// Completed turns per minute of the run with the change.
    pub turns_per_min: f64,
}

/// What the advice looked for and found.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Advice {
    /// The changes that end every terminal error, in the order bookings,
    /// fewer agents, a higher rate.
    pub remedies: Vec<Remedy>,
    /// What was looked for and not found (for example no rate up to 600).
    pub not_found: Vec<String>,
}

fn remedy(change: String, report: &SimReport, duration_ms: u64) -> Remedy {
    Remedy {
        change,
        terminal_rate_limit_errors: report.terminal_rate_limit_errors,
        turns_completed: report.turns_completed,
        latency_p50_ms: report.latency_p50_ms,
        turns_per_min: report.turns_completed as f64 * 60_000.0 / duration_ms as f64,
    }
}

/// The advice for a run of `config` that reported `report`: `None` when it
/// has no terminal errors, or when it is not a run the changes apply to
/// (the seed's admit-anyway design, several machines, a hidden upstream
/// limit, whose throttles no pacer setting can end).
pub fn advise(config: &SimConfig, report: &SimReport) -> Result<Option<Advice>, String> {
    if report.terminal_rate_limit_errors == 0
        || config.design != Design::Paced
        || config.machines > 1
        || config.upstream_limit_per_min.is_some()
    {
        return Ok(None);
    }
    let quiet = &mut |_| {};
    let mut advice = Advice {
        remedies: Vec::new(),
        not_found: Vec::new(),
    };
    if !config.booking {
        let with = SimConfig {
            booking: true,
            ..*config
        };
        let run = sim::run(&with, quiet)?;
        if run.terminal_rate_limit_errors == 0 {
            advice
                .remedies
                .push(remedy("--booking".into(), &run, config.duration_ms));
        } else {
            advice.not_found.push(format!(
                "--booking still ends {} turns in a terminal error",
                run.terminal_rate_limit_errors
            ));
        }
    }
    if let Load::Closed {
        agents,
        think_ms,
        stagger_ms,
    } = config.load
    {
        let with_agents = |fewer: u32| SimConfig {
            load: Load::Closed {
                agents: fewer,
                think_ms,
                stagger_ms,
            },
            ..*config
        };
        // The most agents (below the run's) that end no turn in an error.
        match last_clean(1, agents.saturating_sub(1), |n| {
            sim::run(&with_agents(n), quiet)
        })? {
            Some((fewer, run)) => advice.remedies.push(remedy(
                format!("--agents {fewer}"),
                &run,
                config.duration_ms,
            )),
            None => advice
                .not_found
                .push("no agent count below this one ends every terminal error".into()),
        }
    }
    let rate = config.budget.rate_per_min;
    let max = pacer_core::budget::MAX_RATE_PER_MIN;
    if rate > 0 && rate < max {
        let with_rate = |higher: u32| {
            let mut budget = config.budget;
            budget.rate_per_min = higher;
            SimConfig { budget, ..*config }
        };
        // The lowest rate (above the run's) that ends no turn in an error.
        match first_clean(rate + 1, max, |r| sim::run(&with_rate(r), quiet))? {
            Some((higher, run)) => {
                advice
                    .remedies
                    .push(remedy(format!("--rate {higher}"), &run, config.duration_ms))
            }
            None => advice
                .not_found
                .push(format!("no rate up to {max} ends every terminal error")),
        }
    }
    Ok(Some(advice))
}

/// One run of the simulator.
type Simulated = Result<SimReport, String>;

/// What a search of a range found: the value and its run, or `None`.
type Found = Result<Option<(u32, SimReport)>, String>;

/// The lowest `x` in `lo..=hi` whose run ends no turn in a terminal error,
/// by bisection (terminal errors fall as `x` rises; the answer's own run is
/// returned, so what is reported was simulated), or `None` when even `hi`
/// leaves some.
fn first_clean(lo: u32, hi: u32, mut run: impl FnMut(u32) -> Simulated) -> Found {
    if lo > hi {
        return Ok(None);
    }
    let top = run(hi)?;
    if top.terminal_rate_limit_errors > 0 {
        return Ok(None);
    }
    let (mut lo, mut best) = (lo, (hi, top));
    while lo < best.0 {
        let mid = lo + (best.0 - lo) / 2;
        let report = run(mid)?;
        if report.terminal_rate_limit_errors == 0 {
            best = (mid, report);
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(best))
}

/// The highest `x` in `lo..=hi` whose run ends no turn in a terminal error
/// (terminal errors rise with `x`), or `None` when even `lo` leaves some:
/// [`first_clean`] over `lo..=hi` read from the top down.
fn last_clean(lo: u32, hi: u32, mut run: impl FnMut(u32) -> Simulated) -> Found {
    let mirror = |x: u32| lo + hi - x;
    Ok(first_clean(lo, hi, |x| run(mirror(x)))?.map(|(x, report)| (mirror(x), report)))
}

/// The advice as the text report's closing lines.
pub fn render(report: &SimReport, advice: &Advice) -> String {
    let mut out = format!(
        "\nadvice: {} turns ({:.1}%) ended in a terminal rate-limit error. {}\n",
        report.terminal_rate_limit_errors,
        report.terminal_error_percent,
        if advice.remedies.is_empty() {
            "None of the changes the simulator tries ends them all:"
        } else {
            "Each change below, simulated with everything else as it was, ends them all:"
        }
    );
    for r in &advice.remedies {
        let p50 = r.latency_p50_ms.map_or_else(
            || "-".to_string(),
            |ms| format!("{:.1} s", ms as f64 / 1000.0),
        );
        out.push_str(&format!(
            "  {:<14} 0 terminal errors, {} turns completed ({:.1}/min), p50 {p50}\n",
            r.change, r.turns_completed, r.turns_per_min
        ));
    }
    for line in &advice.not_found {
        out.push_str(&format!("  ({line})\n"));
    }
    out
}
