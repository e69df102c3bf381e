//! The configs the criterion benches share (`core/benches/reserve.rs` and
//! `ffi/benches/call.rs` include this file), so the core's figures and the
//! C call's are taken on the same pacers.

use pacer_core::{Config, ReleasePolicy, MAX_BURST};

/// How far each thread's clock moves per admit-path call, ms. At 600/min one
/// token refills per 100 ms, so every call refills ten tokens (capped).
pub const STEP_MS: u64 = 1000;

/// Admit-path config: 600/min, bound 4833 ms (defaults), refusing mode.
pub const ADMIT: Config = Config {
    rate_per_min: 600,
    burst: MAX_BURST,
    idle_timeout_ms: 120_000,
    max_retries: 5,
    release_policy: ReleasePolicy::Refund,
    adaptive_floor_per_min: 0,
    adaptive_ceiling_per_min: 0,
};

/// Refuse-path config: 60/min, burst 1, bound 2000 ms; three reservations
/// at 0 drain it.
pub const REFUSE: Config = Config {
    rate_per_min: 60,
    burst: 1,
    idle_timeout_ms: 30_000,
    max_retries: 3,
    release_policy: ReleasePolicy::Refund,
    adaptive_floor_per_min: 0,
    adaptive_ceiling_per_min: 0,
};
