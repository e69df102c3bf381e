//! `pacer explain`: resolve the four settings of SPEC §2 and show every
//! derived quantity, the notices, and the §3 inequality with its numbers.

use pacer_core::budget::{backoff_ms, LADDER_BASE_MS, WAIT_BOUND_CEILING_MS};
use pacer_core::{resolve, Config, Decision, Mode, Pacer, Settings};
use serde::Serialize;

use crate::sim::mode_name;

/// The documented setting names, in SPEC §2 order.
pub const NAMES: [&str; 4] = [
    "PACER_RATE_PER_MIN",
    "PACER_IDLE_TIMEOUT_MS",
    "PACER_TOTAL_TIMEOUT_MS",
    "PACER_MAX_RETRIES",
];

/// One setting's raw text and where it came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Raw {
    /// The text, if set.
    pub value: Option<String>,
    /// `argument`, `environment` or `unset`.
    pub source: &'static str,
}

/// Collects the settings: the environment (through `env`), then
/// `NAME=value` arguments, which win.
pub fn collect(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<[Raw; 4], String> {
    let mut raws: [Raw; 4] = Default::default();
    for (raw, name) in raws.iter_mut().zip(NAMES) {
        *raw = match env(name) {
            Some(value) => Raw {
                value: Some(value),
                source: "environment",
            },
            None => Raw {
                value: None,
                source: "unset",
            },
        };
    }
    for arg in args {
        let Some((name, value)) = arg.split_once('=') else {
            return Err(format!(
                "expected NAME=value, found {arg:?} (names: {})",
                NAMES.join(", ")
            ));
        };
        let Some(index) = NAMES.iter().position(|known| *known == name) else {
            return Err(format!(
                "unknown setting {name:?} (names: {})",
                NAMES.join(", ")
            ));
        };
        raws[index] = Raw {
            value: Some(value.to_string()),
            source: "argument",
        };
    }
    Ok(raws)
}

/// Everything `explain` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    /// The settings as given.
    pub settings: Vec<(String, Raw)>,
    /// Resolved new connections per minute.
    pub rate_per_min: u32,
    /// Resolved no-data deadline, ms.
    pub idle_timeout_ms: u64,
    /// Resolved total deadline, ms.
    pub total_timeout_ms: u64,
    /// Resolved retry count.
    pub max_retries: u32,
    /// The ladder `2000·(2^r − 1)`, ms.
    pub backoff_ms: u64,
    /// Wait bound, ms.
    pub bound_ms: u64,
    /// Hint cap, s.
    pub hint_cap_s: u64,
    /// Refusal schedule, ms.
    pub refusal_schedule_ms: u64,
    /// Whether the retry schedule can outlast the wait for a token.
    pub can_refuse: bool,
    /// Whether pacing is on.
    pub enabled: bool,
    /// The pacer's mode at this burst.
    pub mode: &'static str,
    /// The burst used for the pacer lines.
    pub burst: u32,
    /// Debt floor in tokens (`bound · rate / 60000`).
    pub max_debt_tokens: f64,
    /// 1-based index of the first refused request among simultaneous ones
    /// on a full pacer, if it refuses.
    pub first_refusal: Option<u64>,
    /// `(r+1)·bound + backoff(r)`, ms.
    pub ladder_total_ms: u128,
    /// `(r+1)·bound + Σ_{k<r} max(hint_cap_ms, 2000·2^k)`, ms.
    pub substituted_total_ms: u128,
    /// The notices, rendered.
    pub notices: Vec<String>,
}

/// Resolves and derives.
pub fn explain(raws: &[Raw; 4], burst: u32) -> Result<Explanation, String> {
    let settings = Settings {
        rate_per_min: raws[0].value.as_deref(),
        idle_timeout_ms: raws[1].value.as_deref(),
        total_timeout_ms: raws[2].value.as_deref(),
        max_retries: raws[3].value.as_deref(),
    };
    let resolution = resolve(&settings);
    let budget = resolution.budget;
    let bound_ms = budget.wait_bound_ms();
    let hint_cap_ms = u128::from(budget.hint_cap_s()) * 1000;
    let attempts = u128::from(budget.max_retries) + 1;
    let ladder_total_ms =
        attempts * u128::from(bound_ms) + u128::from(backoff_ms(budget.max_retries));
    let substituted_total_ms = attempts * u128::from(bound_ms)
        + (0..budget.max_retries)
            .map(|k| hint_cap_ms.max(u128::from(LADDER_BASE_MS) << k))
            .sum::<u128>();
    let pacer = Pacer::new(&Config::from_budget(&budget, burst), 0)
        .map_err(|e| format!("the pacer rejects the resolved budget: {e:?}"))?;
    let mode = pacer.mode();
    let first_refusal = (mode == Mode::Refusing).then(|| {
        // Burst plus at most bound·rate/60000 paced waits, then a refusal.
        let limit =
            u64::from(burst.max(1)) + bound_ms * u64::from(budget.rate_per_min) / 60_000 + 2;
        (1..=limit).find(|_| matches!(pacer.reserve(0), Decision::Refused(_)))
    });
    Ok(Explanation {
        settings: NAMES
            .iter()
            .map(|n| n.to_string())
            .zip(raws.iter().cloned())
            .collect(),
        rate_per_min: budget.rate_per_min,
        idle_timeout_ms: budget.idle_timeout_ms,
        total_timeout_ms: budget.total_timeout_ms,
        max_retries: budget.max_retries,
        backoff_ms: backoff_ms(budget.max_retries),
        bound_ms,
        hint_cap_s: budget.hint_cap_s(),
        refusal_schedule_ms: budget.refusal_schedule_ms(),
        can_refuse: budget.can_refuse(),
        enabled: budget.pacing_enabled(),
        mode: mode_name(mode),
        burst: burst.max(1),
        max_debt_tokens: pacer.max_debt_units() as f64 / 60_000.0,
        first_refusal: first_refusal.flatten(),
        ladder_total_ms,
        substituted_total_ms,
        notices: resolution
            .notices
            .iter()
            .map(|notice| notice.to_string())
            .collect(),
    })
}

fn mark(holds: bool) -> &'static str {
    if holds {
        "holds"
    } else {
        "VIOLATED"
    }
}

/// The human-readable explanation.
pub fn render(e: &Explanation) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line("settings:".into());
    for (name, raw) in &e.settings {
        let shown = match &raw.value {
            Some(value) => format!("{value:?} ({})", raw.source),
            None => "unset".into(),
        };
        line(format!("  {name:<24} {shown}"));
    }
    line(format!(
        "resolved budget: rate {}/min, idle timeout {} ms, total timeout {} ms, max retries {}",
        e.rate_per_min, e.idle_timeout_ms, e.total_timeout_ms, e.max_retries
    ));
    let r = u64::from(e.max_retries);
    line(format!(
        "wait bound: {} ms = min({WAIT_BOUND_CEILING_MS}, floor(max(0, {} - {}) / (2*{})))",
        e.bound_ms,
        e.idle_timeout_ms,
        e.backoff_ms,
        r + 1
    ));
    line(format!(
        "hint cap: {} s = max(1, floor({} / 1000))",
        e.hint_cap_s, e.bound_ms
    ));
    line(format!(
        "refusal schedule: {} ms = {} retries * {} s",
        e.refusal_schedule_ms, r, e.hint_cap_s
    ));
    let product = u128::from(e.refusal_schedule_ms) * u128::from(e.rate_per_min);
    line(format!(
        "can refuse: {} (retries > 0, rate > 0 and schedule*rate = {} * {} = {} {} 60000)",
        if e.can_refuse { "yes" } else { "no" },
        e.refusal_schedule_ms,
        e.rate_per_min,
        product,
        if product >= 60_000 { ">=" } else { "<" }
    ));
    line(format!(
        "pacing: {} (mode {}), burst {}, debt floor {:.3} tokens{}",
        if e.enabled { "enabled" } else { "disabled" },
        e.mode,
        e.burst,
        e.max_debt_tokens,
        match e.first_refusal {
            Some(n) => format!(", first refusal at simultaneous request #{n}"),
            None => ", never refuses".into(),
        }
    ));
    let attempts = r + 1;
    line(format!(
        "SPEC §3: (r+1)*bound + backoff(r) < idle: {attempts}*{} + {} = {} < {}: {}",
        e.bound_ms,
        e.backoff_ms,
        e.ladder_total_ms,
        e.idle_timeout_ms,
        mark(e.ladder_total_ms < u128::from(e.idle_timeout_ms))
    ));
    let cap_ms = e.hint_cap_s * 1000;
    let gaps: Vec<String> = (0..e.max_retries)
        .map(|k| format!("{}", cap_ms.max(LADDER_BASE_MS << k)))
        .collect();
    line(format!(
        "with the hint substituted: (r+1)*bound + sum_k<r max(hint_cap_ms, 2000*2^k) < idle: {attempts}*{} + ({}) = {} < {}: {}",
        e.bound_ms,
        if gaps.is_empty() { "0".into() } else { gaps.join(" + ") },
        e.substituted_total_ms,
        e.idle_timeout_ms,
        mark(e.substituted_total_ms < u128::from(e.idle_timeout_ms))
    ));
    if e.notices.is_empty() {
        line("notices: none".into());
    } else {
        line("notices:".into());
        for notice in &e.notices {
            line(format!("  {notice}"));
        }
    }
    out
}
