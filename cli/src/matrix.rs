//! `pacer matrix`: the design record's reviewer matrix (SPEC §6.4, §6.5),
//! and `--exhaustive`, the §3 inequalities over every resolvable budget.
//!
//! The expected values are computed here from the SPEC's formulas in
//! `u128`, without calling the core's budget functions, so a wrong formula
//! in the core shows up as a disagreement instead of agreeing with itself
//! (the record's "false oracle"). The core is called only as the thing
//! under test: `settings::resolve`, `Pacer::new`, `reserve`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use pacer_core::{resolve, Budget, Config, Decision, Mode, Pacer, Settings};
use serde::Serialize;

use crate::client::{Client, ClientStep, RetryHeaders};
use crate::sim::mode_name;

/// The idle-timeout texts of the record's matrix (`None` = unset).
pub const IDLE_TEXTS: [Option<&str>; 11] = [
    None,
    Some("9000"),
    Some("10000"),
    Some("14001"),
    Some("20000"),
    Some("30000"),
    Some("120000"),
    Some("300000"),
    Some("3600000"),
    Some("7200000"),
    Some("nonsense"),
];
/// The retry-count texts of the record's matrix (`None` = unset).
pub const RETRY_TEXTS: [Option<&str>; 8] = [
    None,
    Some("0"),
    Some("1"),
    Some("2"),
    Some("5"),
    Some("10"),
    Some("99"),
    Some("-1"),
];
/// The total timeout every matrix case pins.
pub const TOTAL_TEXT: &str = "21600000";
/// The burst the matrix drives the pacer with (the default).
pub const BURST: u32 = 10;

// ---------------------------------------------------------------------------
// The SPEC's formulas, re-derived (§2, §3), in u128 so nothing overflows.

const RUNG: u128 = 2000;
const CEILING_MS: u128 = 15_000;

/// `2000 · (2^r − 1)`.
pub fn spec_backoff(r: u32) -> u128 {
    RUNG * ((1u128 << r.min(100)) - 1)
}

/// Largest `r` with `backoff(r) < idle`.
pub fn spec_ladder_ceiling(idle: u128) -> u32 {
    let mut r = 0;
    while spec_backoff(r + 1) < idle {
        r += 1;
    }
    r
}

/// `min(15000, floor(max(0, idle − backoff(r)) / (2·(r+1))))`.
pub fn spec_bound(idle: u128, r: u32) -> u128 {
    let left = idle.saturating_sub(spec_backoff(r));
    (left / (2 * (u128::from(r) + 1))).min(CEILING_MS)
}

/// `max(1, floor(bound/1000))`, in ms.
pub fn spec_hint_cap_ms(bound: u128) -> u128 {
    (bound / 1000).max(1) * 1000
}

/// `min(max(1, ceil(required/1000)), cap_s)`.
pub fn spec_hint_s(required: u128, bound: u128) -> u128 {
    required
        .div_ceil(1000)
        .max(1)
        .min(spec_hint_cap_ms(bound) / 1000)
}

/// `r > 0 && rate > 0 && r·cap_s·1000·rate >= 60000`.
pub fn spec_can_refuse(rate: u128, r: u32, bound: u128) -> bool {
    r > 0 && rate > 0 && u128::from(r) * spec_hint_cap_ms(bound) * rate >= 60_000
}

/// The mode §3 implies.
pub fn spec_mode(rate: u128, r: u32, bound: u128) -> Mode {
    if rate == 0 || bound == 0 {
        Mode::Disabled
    } else if spec_can_refuse(rate, r, bound) {
        Mode::Refusing
    } else if r > 0 {
        Mode::ShapingLowRate
    } else {
        Mode::ShapingNoRetry
    }
}

/// `(r+1)·bound + backoff(r)`.
pub fn spec_ladder_total(r: u32, bound: u128) -> u128 {
    (u128::from(r) + 1) * bound + spec_backoff(r)
}

/// `(r+1)·bound + Σ_{k<r} max(hint_cap_ms, 2000·2^k)`.
pub fn spec_substituted_total(r: u32, bound: u128) -> u128 {
    let cap = spec_hint_cap_ms(bound);
    (u128::from(r) + 1) * bound + (0..r).map(|k| cap.max(RUNG << k)).sum::<u128>()
}

enum Text {
    Unset,
    Value(u128),
    Malformed,
}

fn spec_parse(text: Option<&str>) -> Text {
    let Some(text) = text.map(str::trim) else {
        return Text::Unset;
    };
    if text.is_empty() {
        return Text::Unset;
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 20 {
        return Text::Malformed;
    }
    match text.parse::<u128>() {
        Ok(v) if v <= u128::from(u64::MAX) => Text::Value(v),
        _ => Text::Malformed,
    }
}

/// The budget SPEC §2 resolves these texts to: `(rate, idle, total, r)`.
pub fn spec_resolve(
    rate: Option<&str>,
    idle: Option<&str>,
    total: Option<&str>,
    retries: Option<&str>,
) -> (u128, u128, u128, u32) {
    let rate = match spec_parse(rate) {
        Text::Value(v) => v.min(600),
        _ => 60,
    };
    let (mut idle, idle_set) = match spec_parse(idle) {
        Text::Value(v) => (v.clamp(10_000, 3_600_000), true),
        _ => (120_000, false),
    };
    let (mut total, total_set) = match spec_parse(total) {
        Text::Value(v) => (v.clamp(60_000, 21_600_000), true),
        _ => (600_000, false),
    };
    if total < idle {
        if idle_set && !total_set {
            total = idle;
        } else {
            idle = total;
        }
    }
    let ceiling = spec_ladder_ceiling(idle);
    let r = match spec_parse(retries) {
        Text::Value(v) => v.min(u128::from(ceiling)) as u32,
        _ => ceiling.min(5),
    };
    (rate, idle, total, r)
}

// ---------------------------------------------------------------------------
// One case of the matrix.

/// A deliberately broken client, to show that the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The modelled client gives up one retry early.
    OneFewerRetry,
}

/// What one case showed, when it holds.
#[derive(Clone, Copy, Debug, Default)]
struct CaseStats {
    mode: usize,
    retries_used: u32,
    admitted_at_ms: u128,
    idle_ms: u128,
    r: u32,
    slack_ladder_ms: u128,
    slack_substituted_ms: u128,
}

/// A settings combination, for messages.
#[derive(Clone, Copy, Debug)]
pub struct Case<'a> {
    /// Idle text.
    pub idle: Option<&'a str>,
    /// Retries text.
    pub retries: Option<&'a str>,
    /// Rate.
    pub rate: u32,
}

impl std::fmt::Display for Case<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |text: Option<&str>| text.map_or("unset".to_string(), |t| format!("{t:?}"));
        write!(
            f,
            "idle {}, retries {}, total \"{TOTAL_TEXT}\", rate {}",
            show(self.idle),
            show(self.retries),
            self.rate
        )
    }
}

fn mode_index(mode: Mode) -> usize {
    match mode {
        Mode::Disabled => 0,
        Mode::Refusing => 1,
        Mode::ShapingLowRate => 2,
        Mode::ShapingNoRetry => 3,
    }
}

const MODES: [Mode; 4] = [
    Mode::Disabled,
    Mode::Refusing,
    Mode::ShapingLowRate,
    Mode::ShapingNoRetry,
];

fn check_case(case: Case<'_>, fault: Option<Fault>) -> Result<CaseStats, String> {
    let rate_text = case.rate.to_string();
    let settings = Settings {
        rate_per_min: Some(&rate_text),
        idle_timeout_ms: case.idle,
        total_timeout_ms: Some(TOTAL_TEXT),
        max_retries: case.retries,
    };
    let budget = resolve(&settings).budget;
    let (rate, idle, total, r) =
        spec_resolve(Some(&rate_text), case.idle, Some(TOTAL_TEXT), case.retries);
    let got = (
        u128::from(budget.rate_per_min),
        u128::from(budget.idle_timeout_ms),
        u128::from(budget.total_timeout_ms),
        budget.max_retries,
    );
    if got != (rate, idle, total, r) {
        return Err(format!(
            "resolve gave (rate, idle, total, retries) = {got:?}, SPEC §2 gives {:?}",
            (rate, idle, total, r)
        ));
    }
    let bound = spec_bound(idle, r);
    let mut stats = CaseStats {
        idle_ms: idle,
        r,
        slack_ladder_ms: idle.saturating_sub(spec_ladder_total(r, bound)),
        slack_substituted_ms: idle.saturating_sub(spec_substituted_total(r, bound)),
        ..CaseStats::default()
    };
    // §6.5, on the SPEC's own numbers.
    if spec_ladder_total(r, bound) >= idle {
        return Err(format!(
            "§6.5: (r+1)*bound + backoff(r) = {} is not < idle {idle} (r {r}, bound {bound})",
            spec_ladder_total(r, bound)
        ));
    }
    if spec_substituted_total(r, bound) >= idle {
        return Err(format!(
            "§6.5: (r+1)*bound + sum max(hint_cap, rung) = {} is not < idle {idle} (r {r}, bound {bound})",
            spec_substituted_total(r, bound)
        ));
    }
    let pacer = Pacer::new(&Config::from_budget(&budget, BURST), 0)
        .map_err(|e| format!("Pacer::new rejected the resolved budget: {e:?}"))?;
    if u128::from(pacer.wait_bound_ms()) != bound {
        return Err(format!(
            "the pacer's bound is {} ms, SPEC §3 gives {bound}",
            pacer.wait_bound_ms()
        ));
    }
    let expected_mode = spec_mode(rate, r, bound);
    if pacer.mode() != expected_mode {
        return Err(format!(
            "the pacer's mode is {}, SPEC §3 gives {}",
            mode_name(pacer.mode()),
            mode_name(expected_mode)
        ));
    }
    stats.mode = mode_index(expected_mode);
    if expected_mode != Mode::Refusing {
        // No refusal in any other mode, and no wait past the bound.
        let floor_tokens = (bound * rate).div_ceil(60_000);
        for index in 0..(u128::from(BURST) + floor_tokens + 3) {
            match pacer.reserve(0) {
                Decision::Refused(_) => {
                    return Err(format!(
                        "request #{index} refused in mode {}",
                        mode_name(expected_mode)
                    ))
                }
                Decision::Admitted(a) if u128::from(a.wait_ms) > bound => {
                    return Err(format!(
                        "request #{index} waits {} ms, past the bound {bound}",
                        a.wait_ms
                    ))
                }
                Decision::Admitted(a) if expected_mode == Mode::Disabled && a.wait_ms != 0 => {
                    return Err(format!(
                        "disabled pacing made request #{index} wait {} ms",
                        a.wait_ms
                    ))
                }
                Decision::Admitted(_) => {}
            }
        }
        return Ok(stats);
    }
    // §6.4: drive to the deepest state — burst and floor spent at t = 0.
    // Admissions before the first refusal: the burst, then every j ≥ 1 with
    // ceil(j·60000/rate) ≤ bound, i.e. floor(bound·rate/60000) of them.
    let expected_admitted = u128::from(BURST) + bound * rate / 60_000;
    let mut admitted = 0u128;
    let first = loop {
        match pacer.reserve(0) {
            Decision::Admitted(a) => {
                if u128::from(a.wait_ms) > bound {
                    return Err(format!(
                        "request #{admitted} waits {} ms, past the bound {bound}",
                        a.wait_ms
                    ));
                }
                admitted += 1;
                if admitted > expected_admitted {
                    return Err(format!(
                        "more than {expected_admitted} admitted at one instant"
                    ));
                }
            }
            Decision::Refused(refusal) => break refusal,
        }
    };
    if admitted != expected_admitted {
        return Err(format!(
            "first refusal after {admitted} admissions, expected {expected_admitted}"
        ));
    }
    // The next token is (admitted − burst + 1) tokens away.
    let required = ((admitted - u128::from(BURST) + 1) * 60_000).div_ceil(rate);
    if u128::from(first.required_wait_ms) != required {
        return Err(format!(
            "first refusal requires {} ms, expected {required}",
            first.required_wait_ms
        ));
    }
    // One request retrying on its hints, no other traffic.
    let client = Client {
        max_retries: if fault == Some(Fault::OneFewerRetry) {
            r.saturating_sub(1)
        } else {
            r
        },
    };
    let mut refusal = first;
    let mut attempts: u32 = 1;
    let mut t: u128 = 0;
    loop {
        let hint = spec_hint_s(u128::from(refusal.required_wait_ms), bound);
        if u128::from(refusal.retry_after_s) != hint {
            return Err(format!(
                "refusal at {t} ms hints {} s, SPEC §3 gives {hint} s (required {} ms)",
                refusal.retry_after_s, refusal.required_wait_ms
            ));
        }
        match client.after_failure(attempts, RetryHeaders::pacer_refusal(refusal.retry_after_s)) {
            ClientStep::GiveUp => {
                return Err(format!(
                    "§6.4: terminal refusal — refused on all {attempts} attempts (last at {t} ms, deadline {idle} ms)"
                ))
            }
            ClientStep::Retry { delay_ms } => t += u128::from(delay_ms),
        }
        if t >= idle {
            return Err(format!(
                "§6.4: retry {attempts} falls at {t} ms, past the {idle} ms deadline"
            ));
        }
        attempts += 1;
        let now = u64::try_from(t).unwrap_or(u64::MAX);
        match pacer.reserve(now) {
            Decision::Admitted(a) => {
                let open = t + u128::from(a.wait_ms);
                if u128::from(a.wait_ms) > bound || open >= idle {
                    return Err(format!(
                        "§6.4: admitted at {t} ms after {} ms wait, past the bound {bound} or the {idle} ms deadline",
                        a.wait_ms
                    ));
                }
                stats.retries_used = attempts - 1;
                stats.admitted_at_ms = open;
                return Ok(stats);
            }
            Decision::Refused(next) => refusal = next,
        }
    }
}

// ---------------------------------------------------------------------------
// Running it.

/// Options for both runs.
#[derive(Clone, Copy, Debug)]
pub struct MatrixOptions {
    /// Lowest rate checked.
    pub rate_min: u32,
    /// Highest rate checked.
    pub rate_max: u32,
    /// Worker threads.
    pub threads: usize,
    /// A deliberate fault in the modelled client (tests only).
    pub fault: Option<Fault>,
    /// Exhaustive: lowest idle timeout, ms.
    pub idle_min: u64,
    /// Exhaustive: highest idle timeout, ms.
    pub idle_max: u64,
}

/// The outcome of a run.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixReport {
    /// `matrix` or `exhaustive`.
    pub kind: &'static str,
    /// Cases (matrix) or (idle, retries, rate) triples (exhaustive) checked.
    pub cases: u64,
    /// Cases per mode: disabled, refusing, shaping-low-rate, shaping-no-retry.
    pub modes: [u64; 4],
    /// Counterexamples found (all counted, the first 20 kept).
    pub counterexample_count: u64,
    /// The first counterexamples.
    pub counterexamples: Vec<String>,
    /// Matrix: most retries a refused request needed before admission.
    pub most_retries_used: Option<String>,
    /// Matrix: the admission closest to its deadline.
    pub latest_admission: Option<String>,
    /// The smallest slack of `(r+1)·bound + backoff(r) < idle`.
    pub tightest_ladder: String,
    /// The smallest slack of the hint-substituted inequality.
    pub tightest_substituted: String,
    /// (idle, retries) budgets evaluated (exhaustive).
    pub budgets: u64,
    /// Wall time, s.
    pub seconds: f64,
    /// Worker threads.
    pub threads: usize,
}

struct Shared {
    counterexamples: Mutex<(u64, Vec<String>)>,
    modes: [AtomicU64; 4],
}

impl Shared {
    fn new() -> Self {
        Shared {
            counterexamples: Mutex::new((0, Vec::new())),
            modes: Default::default(),
        }
    }

    /// The report of a run: the counterexamples, the mode counts, the
    /// tightest slacks, the time since `start` and the threads; what only
    /// one kind fills is empty, for the caller to set.
    fn report(
        self,
        kind: &'static str,
        tightest: Tightest,
        start: Instant,
        threads: usize,
    ) -> MatrixReport {
        let (count, examples) = self
            .counterexamples
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        MatrixReport {
            kind,
            cases: 0,
            modes: self.modes.map(|m| m.into_inner()),
            counterexample_count: count,
            counterexamples: examples,
            most_retries_used: None,
            latest_admission: None,
            tightest_ladder: tightest.ladder.text.unwrap_or_default(),
            tightest_substituted: tightest.substituted.text.unwrap_or_default(),
            budgets: 0,
            seconds: start.elapsed().as_secs_f64(),
            threads: threads.max(1),
        }
    }

    fn counterexample(&self, text: String) {
        let mut guard = self
            .counterexamples
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        if guard.1.len() < 20 {
            guard.1.push(text);
        }
    }
}

/// A "best so far" tracker: keeps the case with the largest key.
#[derive(Default)]
struct Extreme {
    key: Option<(u128, u128)>,
    text: Option<String>,
}

impl Extreme {
    fn offer(&mut self, key: (u128, u128), text: impl FnOnce() -> String) {
        if self.key.is_none_or(|best| key > best) {
            self.key = Some(key);
            self.text = Some(text());
        }
    }

    fn merge(&mut self, other: Extreme) {
        if let (Some(key), Some(text)) = (other.key, other.text) {
            self.offer(key, || text);
        }
    }
}

/// The smallest slacks of §6.5's two inequalities seen so far.
#[derive(Default)]
struct Tightest {
    ladder: Extreme,
    substituted: Extreme,
}

impl Tightest {
    fn merge(&mut self, other: Tightest) {
        self.ladder.merge(other.ladder);
        self.substituted.merge(other.substituted);
    }
}

/// Calls `work` on every index of `0..total` on `threads` threads, each
/// taking the next `chunk` indices in turn (and ticking `tick` with their
/// count) into its own `L`; all share one [`Shared`]. The threads' `L`s and
/// the `Shared`.
fn in_parallel<F, L>(
    total: u64,
    chunk: u64,
    threads: usize,
    tick: &(dyn Fn(u64) + Sync),
    work: F,
) -> (Vec<L>, Shared)
where
    F: Fn(u64, &mut L, &Shared) + Sync,
    L: Default + Send,
{
    let next = AtomicU64::new(0);
    let shared = Shared::new();
    let locals = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut local = L::default();
                    loop {
                        let from = next.fetch_add(chunk, Ordering::Relaxed);
                        if from >= total {
                            break;
                        }
                        let to = (from + chunk).min(total);
                        for index in from..to {
                            work(index, &mut local, &shared);
                        }
                        tick(to - from);
                    }
                    local
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (locals, shared)
}

#[derive(Default)]
struct MatrixLocal {
    most_retries: Extreme,
    latest: Extreme,
    tightest: Tightest,
}

/// Runs the 88-combination × rate matrix.
pub fn run_matrix(options: &MatrixOptions, tick: &(dyn Fn(u64) + Sync)) -> MatrixReport {
    let start = Instant::now();
    let rates = u64::from(options.rate_max.saturating_sub(options.rate_min)) + 1;
    let combos = (IDLE_TEXTS.len() * RETRY_TEXTS.len()) as u64;
    let total = if options.rate_max < options.rate_min {
        0
    } else {
        combos * rates
    };
    let (locals, shared) =
        in_parallel(total, 600, options.threads, tick, |index, local, shared| {
            check_matrix_case(options, rates, index, local, shared)
        });
    let mut merged = MatrixLocal::default();
    for local in locals {
        merged.most_retries.merge(local.most_retries);
        merged.latest.merge(local.latest);
        merged.tightest.merge(local.tightest);
    }
    MatrixReport {
        cases: total,
        most_retries_used: merged.most_retries.text,
        latest_admission: merged.latest.text,
        budgets: combos,
        ..shared.report("matrix", merged.tightest, start, options.threads)
    }
}

/// Checks case `index` of the matrix (settings combination `index /
/// rates`, the `index % rates`th rate of the range) into the thread's
/// `local` and the run's `shared`.
fn check_matrix_case(
    options: &MatrixOptions,
    rates: u64,
    index: u64,
    local: &mut MatrixLocal,
    shared: &Shared,
) {
    let combo = (index / rates) as usize;
    let case = Case {
        idle: IDLE_TEXTS[combo / RETRY_TEXTS.len()],
        retries: RETRY_TEXTS[combo % RETRY_TEXTS.len()],
        rate: options.rate_min + (index % rates) as u32,
    };
    match check_case(case, options.fault) {
        Ok(stats) => {
            shared.modes[stats.mode].fetch_add(1, Ordering::Relaxed);
            if stats.mode == 1 {
                local.most_retries.offer(
                    (u128::from(stats.retries_used), u128::MAX - index as u128),
                    || {
                        format!(
                            "{} of {} retries ({case}): admitted at {} ms",
                            stats.retries_used, stats.r, stats.admitted_at_ms
                        )
                    },
                );
                // Closest to the deadline, as a fraction of it.
                let per_million = stats.admitted_at_ms * 1_000_000 / stats.idle_ms.max(1);
                local
                    .latest
                    .offer((per_million, u128::MAX - index as u128), || {
                        format!(
                        "connection opens at {} ms of a {} ms deadline after {} retries ({case})",
                        stats.admitted_at_ms, stats.idle_ms, stats.retries_used
                    )
                    });
            }
            local.tightest.ladder.offer(
                (u128::MAX - stats.slack_ladder_ms, u128::MAX - index as u128),
                || {
                    format!(
                        "slack {} ms of {} ms ({case})",
                        stats.slack_ladder_ms, stats.idle_ms
                    )
                },
            );
            local.tightest.substituted.offer(
                (
                    u128::MAX - stats.slack_substituted_ms,
                    u128::MAX - index as u128,
                ),
                || {
                    format!(
                        "slack {} ms of {} ms ({case})",
                        stats.slack_substituted_ms, stats.idle_ms
                    )
                },
            );
        }
        Err(why) => shared.counterexample(format!("{case}: {why}")),
    }
}

/// Checks one resolvable budget `(idle, r)` and the core's view of it at
/// every rate in the range. Returns the per-mode counts.
fn check_budget(
    idle: u64,
    r: u32,
    options: &MatrixOptions,
    modes: &mut [u64; 4],
) -> Result<(u128, u128), String> {
    let idle_wide = u128::from(idle);
    let bound = spec_bound(idle_wide, r);
    let ladder = spec_ladder_total(r, bound);
    let substituted = spec_substituted_total(r, bound);
    if ladder >= idle_wide {
        return Err(format!(
            "(r+1)*bound + backoff(r) = {ladder} is not < {idle}"
        ));
    }
    if substituted >= idle_wide {
        return Err(format!(
            "(r+1)*bound + sum max(hint_cap, rung) = {substituted} is not < {idle}"
        ));
    }
    // The settings path: in-range texts resolve to themselves.
    let (idle_text, r_text) = (idle.to_string(), r.to_string());
    let settings = Settings {
        rate_per_min: None,
        idle_timeout_ms: Some(&idle_text),
        total_timeout_ms: Some(TOTAL_TEXT),
        max_retries: Some(&r_text),
    };
    let budget = resolve(&settings).budget;
    if (budget.idle_timeout_ms, budget.max_retries) != (idle, r) {
        return Err(format!(
            "resolve gave idle {} retries {}",
            budget.idle_timeout_ms, budget.max_retries
        ));
    }
    // The rate dimension: the inequalities have no rate term, so they were
    // evaluated once above. What the rate changes is the core's
    // classification; construct the real pacer at every rate and compare
    // its bound (must not move) and mode with §3's.
    for rate in options.rate_min..=options.rate_max {
        let config = Config {
            rate_per_min: rate,
            ..Config::from_budget(
                &Budget {
                    rate_per_min: rate,
                    ..budget
                },
                BURST,
            )
        };
        let pacer =
            Pacer::new(&config, 0).map_err(|e| format!("rate {rate}: Pacer::new failed: {e:?}"))?;
        let expected = spec_mode(u128::from(rate), r, bound);
        if u128::from(pacer.wait_bound_ms()) != bound || pacer.mode() != expected {
            return Err(format!(
                "rate {rate}: pacer bound {} mode {}, SPEC §3 gives bound {bound} mode {}",
                pacer.wait_bound_ms(),
                mode_name(pacer.mode()),
                mode_name(expected)
            ));
        }
        modes[mode_index(expected)] += 1;
    }
    Ok((idle_wide - ladder, idle_wide - substituted))
}

#[derive(Default)]
struct ExhaustiveLocal {
    modes: [u64; 4],
    budgets: u64,
    tightest: Tightest,
}

/// Runs `--exhaustive`: every idle value in range × every resolvable retry
/// count × every rate in range.
pub fn run_exhaustive(options: &MatrixOptions, tick: &(dyn Fn(u64) + Sync)) -> MatrixReport {
    let start = Instant::now();
    let (idle_min, idle_max) = (options.idle_min, options.idle_max);
    let total = if idle_max < idle_min {
        0
    } else {
        idle_max - idle_min + 1
    };
    let (locals, shared) = in_parallel(
        total,
        2_000,
        options.threads,
        tick,
        |offset, local, shared| check_idle(options, idle_min + offset, local, shared),
    );
    let mut merged = ExhaustiveLocal::default();
    for local in locals {
        for (sum, part) in merged.modes.iter_mut().zip(local.modes) {
            *sum += part;
        }
        merged.budgets += local.budgets;
        merged.tightest.merge(local.tightest);
    }
    let rates = u64::from(options.rate_max.saturating_sub(options.rate_min)) + 1;
    MatrixReport {
        cases: merged.budgets * rates,
        modes: merged.modes,
        budgets: merged.budgets,
        ..shared.report("exhaustive", merged.tightest, start, options.threads)
    }
}

/// Checks every resolvable budget with idle timeout `idle` into the
/// thread's `local` and the run's `shared`.
fn check_idle(options: &MatrixOptions, idle: u64, local: &mut ExhaustiveLocal, shared: &Shared) {
    for r in 0..=spec_ladder_ceiling(u128::from(idle)) {
        local.budgets += 1;
        match check_budget(idle, r, options, &mut local.modes) {
            Ok((slack_ladder, slack_substituted)) => {
                let order = u128::MAX - u128::from(idle);
                local
                    .tightest
                    .ladder
                    .offer((u128::MAX - slack_ladder, order), || {
                        format!("slack {slack_ladder} ms (idle {idle}, retries {r})")
                    });
                local
                    .tightest
                    .substituted
                    .offer((u128::MAX - slack_substituted, order), || {
                        format!("slack {slack_substituted} ms (idle {idle}, retries {r})")
                    });
            }
            Err(why) => shared.counterexample(format!("idle {idle}, retries {r}: {why}")),
        }
    }
}

/// The human-readable report.
pub fn render(report: &MatrixReport, options: &MatrixOptions) -> String {
    let mut out = String::new();
    let rates = format!("rates {}..={}", options.rate_min, options.rate_max);
    if report.kind == "matrix" {
        out.push_str(&format!(
            "matrix: {} settings combinations (idle x retries, total {TOTAL_TEXT}) x {rates} = {} cases, burst {BURST}\n",
            report.budgets, report.cases
        ));
    } else {
        out.push_str(&format!(
            "exhaustive: idle {}..={} ms, every resolvable retry count = {} budgets; x {rates} = {} (budget, rate) pairs\n",
            options.idle_min, options.idle_max, report.budgets, report.cases
        ));
        out.push_str(
            "  the §3 inequalities have no rate term: each is evaluated once per budget; every rate then builds the\n  core's pacer and checks that its bound is the rate-free one and its mode is the one §3 gives\n",
        );
    }
    out.push_str(&format!(
        "  modes: {} {}, {} {}, {} {}, {} {}\n",
        mode_name(MODES[1]),
        report.modes[1],
        mode_name(MODES[2]),
        report.modes[2],
        mode_name(MODES[3]),
        report.modes[3],
        mode_name(MODES[0]),
        report.modes[0],
    ));
    if let Some(text) = &report.most_retries_used {
        out.push_str(&format!("  §6.4 most retries used: {text}\n"));
    }
    if let Some(text) = &report.latest_admission {
        out.push_str(&format!("  §6.4 latest admission: {text}\n"));
    }
    out.push_str(&format!(
        "  §6.5 tightest (r+1)*bound + backoff(r) < idle: {}\n",
        report.tightest_ladder
    ));
    out.push_str(&format!(
        "  §6.5 tightest with the hint substituted: {}\n",
        report.tightest_substituted
    ));
    for example in &report.counterexamples {
        out.push_str(&format!("  COUNTEREXAMPLE {example}\n"));
    }
    out.push_str(&format!(
        "  counterexamples: {}\n  time: {:.2} s on {} thread{}\n",
        report.counterexample_count,
        report.seconds,
        report.threads,
        if report.threads == 1 { "" } else { "s" }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_formulas_reproduce_the_worked_budgets() {
        // SPEC §3's table, by hand.
        assert_eq!(spec_bound(120_000, 5), 4833);
        assert_eq!(spec_ladder_total(5, 4833), 90_998);
        assert_eq!(spec_bound(30_000, 3), 2000);
        assert_eq!(spec_bound(10_000, 2), 666);
        assert_eq!(spec_ladder_total(2, 666), 7998);
        assert_eq!(spec_bound(3_600_000, 5), 15_000);
        assert_eq!(spec_bound(60_000, 4), 3000);
        assert_eq!(spec_bound(14_001, 3), 0);
        assert_eq!(spec_bound(120_000, 0), 15_000);
        assert_eq!(spec_bound(3_600_000, 10), 15_000);
        for (idle, ceiling) in [
            (120_000, 5),
            (30_000, 3),
            (14_001, 3),
            (10_000, 2),
            (3_600_000, 10),
        ] {
            assert_eq!(spec_ladder_ceiling(idle), ceiling);
        }
        assert!(spec_can_refuse(3, 5, 4833) && !spec_can_refuse(2, 5, 4833));
        assert!(spec_can_refuse(30, 2, 666) && !spec_can_refuse(29, 2, 666));
        assert_eq!(spec_hint_s(3000, 15_000), 3);
        assert_eq!(spec_hint_s(1200, 4833), 2);
        assert_eq!(spec_hint_s(60_000, 666), 1);
        // The record's 1/min example: 6·4833 + (4000+4000+8000+16000+32000).
        assert_eq!(spec_substituted_total(5, 4833), 28_998 + 64_000);
    }

    #[test]
    fn spec_resolution_of_matrix_texts() {
        let t = Some(TOTAL_TEXT);
        assert_eq!(
            spec_resolve(Some("60"), None, t, None),
            (60, 120_000, 21_600_000, 5)
        );
        assert_eq!(
            spec_resolve(Some("60"), Some("9000"), t, Some("99")),
            (60, 10_000, 21_600_000, 2)
        );
        assert_eq!(
            spec_resolve(Some("60"), Some("nonsense"), t, Some("-1")),
            (60, 120_000, 21_600_000, 5)
        );
        assert_eq!(
            spec_resolve(Some("60"), Some("7200000"), t, Some("10")),
            (60, 3_600_000, 21_600_000, 10)
        );
        // The pair rule (not reached by the matrix, which pins total).
        assert_eq!(
            spec_resolve(None, Some("600000"), Some("60000"), None),
            (60, 60_000, 60_000, 4)
        );
        assert_eq!(
            spec_resolve(None, Some("3600000"), None, None),
            (60, 3_600_000, 3_600_000, 5)
        );
    }

    #[test]
    fn refused_requests_reach_their_slot_on_capped_hints() {
        // Defaults, rate 3: 10 admitted at t=0 (4833·3/60000 < 1 paced wait),
        // the 11th needs 20000 ms and is told 4 s. At 16 s the bucket holds
        // 0.8 tokens: wait 4000 ≤ 4833, so the 4th retry is admitted.
        let stats = check_case(
            Case {
                idle: None,
                retries: None,
                rate: 3,
            },
            None,
        )
        .unwrap();
        assert_eq!((stats.retries_used, stats.admitted_at_ms), (4, 20_000));
        // Retries "1" at rate 4: bound 15000 (hint cap 15 s), 11 admitted,
        // the 12th needs 30000 ms; retried at 15 s it waits 15000.
        let case = Case {
            idle: None,
            retries: Some("1"),
            rate: 4,
        };
        let stats = check_case(case, None).unwrap();
        assert_eq!((stats.retries_used, stats.admitted_at_ms), (1, 30_000));
        // The same case with a client that gives up one retry early fails.
        let broken = check_case(case, Some(Fault::OneFewerRetry)).unwrap_err();
        assert!(broken.contains("terminal refusal"), "{broken}");
    }
}
