//! The atomics the crate uses, in one place: `loom`'s under `cfg(loom)` so
//! the model checker sees every access, `portable-atomic`'s otherwise (which
//! also provides the critical-section fallback for targets without CAS).
//!
//! The pacer's whole state is one 128-bit word. loom has no 128-bit atomic,
//! so under loom it is modelled as a `loom` mutex around a `u128`: every
//! load and compare-exchange is one atomic step, which is exactly the
//! linearizable primitive the real `AtomicU128` gives.

#[cfg(not(loom))]
pub(crate) use portable_atomic::{AtomicU128, AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(loom)]
impl AtomicU128 {
    pub(crate) fn new(value: u128) -> Self {
        AtomicU128(loom::sync::Mutex::new(value))
    }

    pub(crate) fn load(&self, _order: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }

    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        _success: Ordering,
        _failure: Ordering,
    ) -> Result<u128, u128> {
        let mut value = self.0.lock().unwrap();
        if *value == current {
            *value = new;
            Ok(current)
        } else {
            Err(*value)
        }
    }

    /// Only for the deliberately broken CAS experiment in `docs/design.md`.
    #[allow(dead_code)]
    pub(crate) fn store(&self, new: u128, _order: Ordering) {
        *self.0.lock().unwrap() = new;
    }

    pub(crate) fn is_lock_free() -> bool {
        true
    }
}
