//! A `#![no_std]` static library that links every entry point of
//! `pacer-core` a binding uses. Built with `-C panic=abort` (as
//! `scripts/check-nostd.sh` does), it is `no_std` with its own
//! `#[panic_handler]`: if `pacer-core` (or anything it depends on) links
//! `std`, the build fails with a duplicate `panic_impl` lang item. The
//! script's symbol scan then checks that no allocator is referenced.
//!
//! In the workspace's ordinary unwinding builds (`cargo build`/`clippy
//! --workspace`) a `no_std` staticlib cannot link (stable Rust has no
//! `eh_personality` for it), so there the crate keeps `std` and only
//! type-checks the same calls.

#![cfg_attr(panic = "abort", no_std)]

use pacer_core::settings::Settings;
use pacer_core::{frame, resolve, Config, Decision, Pacer};

#[cfg(panic = "abort")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// Runs one admission round trip on settings given as text, renders the
/// first notice and a refusal body into `out`, and returns a checksum of
/// the results so nothing is optimised away.
///
/// # Safety
/// `rate` must point to `rate_len` readable bytes (or be null), and `out`
/// to `out_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pacer_nostd_check(
    rate: *const u8,
    rate_len: usize,
    now_ms: u64,
    out: *mut u8,
    out_len: usize,
) -> u64 {
    let rate_text = if rate.is_null() {
        None
    } else {
        core::str::from_utf8(core::slice::from_raw_parts(rate, rate_len)).ok()
    };
    let out = core::slice::from_raw_parts_mut(out, out_len);

    let settings = Settings {
        rate_per_min: rate_text,
        ..Settings::default()
    };
    let resolution = resolve(&settings);
    let mut sum = resolution.notices.len() as u64;
    if let Some(notice) = resolution.notices.first() {
        sum += match notice.render(out) {
            Ok(n) | Err(n) => n as u64,
        };
    }

    let config = Config::from_budget(&resolution.budget, 10);
    let pacer = match Pacer::new(&config, now_ms) {
        Ok(pacer) => pacer,
        Err(error) => return error as u64,
    };
    match pacer.reserve(now_ms) {
        Decision::Admitted(admission) => {
            sum += admission.wait_ms;
            if let Some(ticket) = admission.ticket {
                sum += pacer.release(ticket, now_ms) as u64;
            }
        }
        Decision::Refused(refusal) => {
            sum += match frame::write_refusal_body("limited", refusal.retry_after_s, out) {
                Ok(n) | Err(n) => n as u64,
            };
        }
    }
    sum + match frame::write_refusal_body("limited", 1, out) {
        Ok(n) | Err(n) => n as u64,
    }
}
