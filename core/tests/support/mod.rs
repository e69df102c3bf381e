//! Helpers shared by the core's test files.

use pacer_core::{Counters, Decision, Pacer};

/// `reserve` and `record`, or with `exclusive` their exclusive forms
/// (`reserve_mut`, `record_mut`): the same counts either way.
pub fn decide(
    pacer: &mut Pacer,
    counters: &mut Counters,
    now_ms: u64,
    exclusive: bool,
) -> Decision {
    if exclusive {
        let decision = pacer.reserve_mut(now_ms);
        counters.record_mut(&decision);
        decision
    } else {
        let decision = pacer.reserve(now_ms);
        counters.record(&decision);
        decision
    }
}
