//! The request budget and the quantities derived from it (SPEC §3).
//!
//! Every function here is a `const fn` over unsigned integers, total on every
//! input: products saturate, nothing divides by zero, nothing panics. The
//! reasoning behind each formula is in `docs/design.md`.

/// Milliseconds in a minute: rates are "per minute", the clock is in ms.
pub const MS_PER_MINUTE: u64 = 60_000;
/// The client's first backoff rung; the ladder doubles from here (2, 4, 8 … s).
pub const LADDER_BASE_MS: u64 = 2_000;
/// The wait bound never exceeds this, whatever the budget leaves.
pub const WAIT_BOUND_CEILING_MS: u64 = 15_000;

/// Default new connections per minute.
pub const DEFAULT_RATE_PER_MIN: u32 = 60;
/// Highest accepted rate; settings above it are clamped to it.
pub const MAX_RATE_PER_MIN: u32 = 600;
/// Default burst: connections that open with no wait after an idle spell.
pub const DEFAULT_BURST: u32 = 10;
/// Default no-data deadline shared by all attempts of one request.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Accepted idle timeouts; settings outside are clamped.
pub const MIN_IDLE_TIMEOUT_MS: u64 = 10_000;
/// See [`MIN_IDLE_TIMEOUT_MS`].
pub const MAX_IDLE_TIMEOUT_MS: u64 = 3_600_000;
/// Default total deadline of one request.
pub const DEFAULT_TOTAL_TIMEOUT_MS: u64 = 600_000;
/// Accepted total timeouts; settings outside are clamped.
pub const MIN_TOTAL_TIMEOUT_MS: u64 = 60_000;
/// See [`MIN_TOTAL_TIMEOUT_MS`].
pub const MAX_TOTAL_TIMEOUT_MS: u64 = 21_600_000;
/// Default client retry count, before the ladder ceiling lowers it.
pub const DEFAULT_MAX_RETRIES: u32 = 5;

/// Total time the client's backoff ladder spends over `retries` retries:
/// `2000 · (2^retries − 1)` ms, saturating at `u64::MAX`.
pub const fn backoff_ms(retries: u32) -> u64 {
    if retries >= 64 {
        return u64::MAX;
    }
    let rungs = (1u128 << retries) - 1;
    let total = rungs * LADDER_BASE_MS as u128;
    if total > u64::MAX as u128 {
        u64::MAX
    } else {
        total as u64
    }
}

/// The largest retry count whose backoff ladder fits strictly inside
/// `idle_timeout_ms` (0 when none does, e.g. an idle timeout of 0).
pub const fn ladder_ceiling(idle_timeout_ms: u64) -> u32 {
    let mut retries = 0;
    while backoff_ms(retries + 1) < idle_timeout_ms {
        retries += 1;
    }
    retries
}

/// The longest a paced request may wait for a slot:
/// `min(15000, floor(max(0, idle − backoff(r)) / (2·(r+1))))`.
///
/// Every attempt of a request shares one no-data deadline, so
/// `(r+1)·bound + backoff(r) < idle` must hold; pacing takes at most half of
/// what the ladder leaves.
pub const fn wait_bound_ms(idle_timeout_ms: u64, max_retries: u32) -> u64 {
    let ladder = backoff_ms(max_retries);
    if ladder >= idle_timeout_ms {
        return 0;
    }
    let attempts = max_retries as u64 + 1;
    let share = (idle_timeout_ms - ladder) / (2 * attempts);
    if share < WAIT_BOUND_CEILING_MS {
        share
    } else {
        WAIT_BOUND_CEILING_MS
    }
}

/// The largest retry-after hint, in whole seconds: `max(1, floor(bound/1000))`.
///
/// The client substitutes a hint under 60 s for its own backoff rung, so an
/// uncapped hint would spend time the bound never budgeted.
pub const fn hint_cap_s(bound_ms: u64) -> u64 {
    let whole = bound_ms / 1000;
    if whole == 0 {
        1
    } else {
        whole
    }
}

/// The retry-after hint for a refusal:
/// `min(max(1, ceil(required/1000)), hint_cap_s(bound))`.
///
/// Never 0: a zero hint means "retry at once", a hot loop that burns the
/// retry budget in milliseconds.
pub const fn retry_after_s(required_wait_ms: u64, bound_ms: u64) -> u64 {
    let mut wanted = required_wait_ms / 1000;
    if required_wait_ms % 1000 != 0 {
        wanted += 1;
    }
    if wanted == 0 {
        wanted = 1;
    }
    let cap = hint_cap_s(bound_ms);
    if wanted < cap {
        wanted
    } else {
        cap
    }
}

/// How long the client keeps retrying a refused request on capped hints:
/// `r · hint_cap_s · 1000` ms (0 when r = 0), saturating.
pub const fn refusal_schedule_ms(max_retries: u32, bound_ms: u64) -> u64 {
    (max_retries as u64)
        .saturating_mul(hint_cap_s(bound_ms))
        .saturating_mul(1000)
}

/// Whether refusing can work: the retry schedule outlasts the wait for one
/// token (`schedule · rate ≥ 60000`). Below that, refusals would only
/// manufacture terminal errors, so the pacer shapes instead.
pub const fn can_refuse(rate_per_min: u32, max_retries: u32, bound_ms: u64) -> bool {
    max_retries > 0
        && rate_per_min > 0
        && refusal_schedule_ms(max_retries, bound_ms).saturating_mul(rate_per_min as u64)
            >= MS_PER_MINUTE
}

/// Whether pacing is on: a positive rate and room to wait (`bound > 0`).
pub const fn pacing_enabled(rate_per_min: u32, bound_ms: u64) -> bool {
    rate_per_min > 0 && bound_ms > 0
}

/// A resolved request budget: the four settings after parsing, clamping and
/// the timeout pair rule. Its derived quantities are methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// New connections per minute; 0 turns pacing off.
    pub rate_per_min: u32,
    /// No-data deadline shared by all attempts of one request, ms.
    pub idle_timeout_ms: u64,
    /// Total deadline of one request, ms.
    pub total_timeout_ms: u64,
    /// The client's retry count (never above the ladder ceiling).
    pub max_retries: u32,
}

impl Budget {
    /// The budget every setting left unset resolves to.
    pub const DEFAULT: Budget = Budget {
        rate_per_min: DEFAULT_RATE_PER_MIN,
        idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
        total_timeout_ms: DEFAULT_TOTAL_TIMEOUT_MS,
        max_retries: DEFAULT_MAX_RETRIES,
    };

    /// See [`wait_bound_ms`].
    pub const fn wait_bound_ms(&self) -> u64 {
        wait_bound_ms(self.idle_timeout_ms, self.max_retries)
    }
    /// See [`hint_cap_s`].
    pub const fn hint_cap_s(&self) -> u64 {
        hint_cap_s(self.wait_bound_ms())
    }
    /// See [`refusal_schedule_ms`].
    pub const fn refusal_schedule_ms(&self) -> u64 {
        refusal_schedule_ms(self.max_retries, self.wait_bound_ms())
    }
    /// See [`can_refuse`].
    pub const fn can_refuse(&self) -> bool {
        can_refuse(self.rate_per_min, self.max_retries, self.wait_bound_ms())
    }
    /// See [`pacing_enabled`].
    pub const fn pacing_enabled(&self) -> bool {
        pacing_enabled(self.rate_per_min, self.wait_bound_ms())
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::DEFAULT
    }
}
