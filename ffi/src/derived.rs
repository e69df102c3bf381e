//! The derived quantities of SPEC §3, for callers that need them. Total
//! functions: every input has an answer.

use pacer_core::budget;

use crate::boundary::guard_value;

/// Largest retry count whose backoff ladder fits inside `idle_timeout_ms`.
#[no_mangle]
pub extern "C" fn pacer_ladder_ceiling(idle_timeout_ms: u64) -> u32 {
    guard_value(0, || budget::ladder_ceiling(idle_timeout_ms))
}

/// The wait bound, ms: min(15000, floor(max(0, idle − backoff(r)) / (2(r+1)))).
#[no_mangle]
pub extern "C" fn pacer_wait_bound_ms(idle_timeout_ms: u64, max_retries: u32) -> u64 {
    guard_value(0, || budget::wait_bound_ms(idle_timeout_ms, max_retries))
}

/// The hint cap, s: max(1, floor(bound/1000)).
#[no_mangle]
pub extern "C" fn pacer_hint_cap_s(wait_bound_ms: u64) -> u64 {
    guard_value(1, || budget::hint_cap_s(wait_bound_ms))
}

/// The retry-after hint, s: min(max(1, ceil(required/1000)), hint cap).
#[no_mangle]
pub extern "C" fn pacer_retry_after_s(required_wait_ms: u64, wait_bound_ms: u64) -> u64 {
    guard_value(1, || budget::retry_after_s(required_wait_ms, wait_bound_ms))
}

/// Whether refusals can outlast the wait for one slot at this rate.
#[no_mangle]
pub extern "C" fn pacer_can_refuse(
    rate_per_min: u32,
    max_retries: u32,
    wait_bound_ms: u64,
) -> bool {
    guard_value(false, || {
        budget::can_refuse(rate_per_min, max_retries, wait_bound_ms)
    })
}
