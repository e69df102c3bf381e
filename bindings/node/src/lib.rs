//! Node-API addon over the pacer core.
//!
//! Numbers in, numbers out: building a JavaScript object through Node-API
//! costs more than the admission decision itself, so the hot calls return
//! one number and `index.js` builds the objects. Validation with errors that
//! name the field lives in `index.js`; here every input is total (a NaN,
//! negative or huge number saturates into range), so nothing can panic.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use pacer_core::frame::{write_refusal_body, REFUSAL_CONTENT_TYPE, REFUSAL_STATUS};
use pacer_core::settings::{mode_notice, resolve, resolve_with_idle_override, Settings};
use pacer_core::{
    budget, AdmitPath, Booking, BookingDecision, Budget, Config, ConfigError, Counters, Decision,
    Notice, Pacer, Redemption, ReleasePolicy, Ticket, MAX_BURST, UNITS_PER_TOKEN,
};

/// The largest integer a JS number holds exactly (2^53 − 1).
const MAX_SAFE: u64 = (1 << 53) - 1;

/// A JS number as `u64`: truncates fractions, saturates, NaN and negatives
/// are 0 (Rust's float-to-int `as` is saturating).
fn to_u64(value: f64) -> u64 {
    value as u64
}

fn to_u32(value: f64) -> u32 {
    value as u32
}

/// Wait field width of a paced admission: the wait bound never exceeds
/// 15000 ms, below 2^14.
const PACED_WAIT_SPAN: f64 = 16_384.0;
/// Debit field width of a shaped admission: at most 60000 units, below 2^16.
const SHAPED_DEBIT_SPAN: f64 = 65_536.0;
/// Refusal hint field: `2·retry_after_s + regressed` stays below 32 because
/// the hint never exceeds 15 s.
const REFUSAL_HINT_SPAN: f64 = 32.0;

/// One decision as one number (decoded by `decodeDecision` in `index.js`).
///
/// Admitted (`>= 0`): `8·payload + 4·clock_regressed + path`, where the
/// payload is `seq·2^14 + wait_ms` for a paced admission (its debit is one
/// whole token), `seq·2^16 + debit_units` for a shaped one (its wait is the
/// bound), and 0 when nothing was debited. Refused (`< 0`):
/// `−(1 + 32·required_wait_ms + 2·retry_after_s + clock_regressed)`.
/// Every value stays below 2^53, so the number is exact.
fn encode(decision: Decision) -> f64 {
    match decision {
        Decision::Admitted(admission) => {
            let path = admission.path as u32 as f64;
            let regressed = if admission.clock_regressed { 4.0 } else { 0.0 };
            let payload = match (admission.path, admission.ticket) {
                (AdmitPath::Paced, Some(ticket)) => {
                    debug_assert_eq!(i64::from(ticket.debit_units()), UNITS_PER_TOKEN);
                    debug_assert!((admission.wait_ms as f64) < PACED_WAIT_SPAN);
                    let (seq, _) = ticket.into_raw();
                    f64::from(seq) * PACED_WAIT_SPAN + admission.wait_ms as f64
                }
                (AdmitPath::Shaped, Some(ticket)) => {
                    let (seq, debit_units) = ticket.into_raw();
                    f64::from(seq) * SHAPED_DEBIT_SPAN + f64::from(debit_units)
                }
                _ => 0.0,
            };
            payload * 8.0 + regressed + path
        }
        Decision::Refused(refusal) => {
            // The required wait is at most (1 + debt floor) tokens of refill:
            // far below 2^47, but clamp so the encoding can never lose bits.
            let required = refusal.required_wait_ms.min(1 << 47) as f64;
            let hint = refusal.retry_after_s.min(15) as f64;
            let regressed = if refusal.clock_regressed { 1.0 } else { 0.0 };
            -(1.0 + required * REFUSAL_HINT_SPAN + hint * 2.0 + regressed)
        }
    }
}

/// The native half of `Pacer` in `index.js`: the core pacer and its
/// counters.
#[napi]
pub struct NativePacer {
    pacer: Pacer,
    counters: Counters,
}

#[napi]
impl NativePacer {
    /// Fails with the core's reason (as `RATE_TOO_HIGH: …`) when the config is
    /// rejected; `index.js` checks ranges first and throws a `RangeError`.
    #[napi(constructor)]
    pub fn new(
        rate_per_minute: f64,
        burst: f64,
        idle_timeout_ms: f64,
        max_retries: f64,
        strict: bool,
        now_ms: f64,
    ) -> Result<Self> {
        let config = Config {
            rate_per_min: to_u32(rate_per_minute),
            burst: to_u32(burst),
            idle_timeout_ms: to_u64(idle_timeout_ms),
            max_retries: to_u32(max_retries),
            release_policy: if strict {
                ReleasePolicy::Strict
            } else {
                ReleasePolicy::Refund
            },
        };
        match Pacer::new(&config, to_u64(now_ms)) {
            Ok(pacer) => Ok(NativePacer {
                pacer,
                counters: Counters::new(),
            }),
            Err(error) => Err(Error::new(Status::InvalidArg, config_error_text(error))),
        }
    }

    /// `Pacer::reserve`, encoded by [`encode`].
    #[napi]
    pub fn reserve(&self, now_ms: f64) -> f64 {
        let decision = self.pacer.reserve(to_u64(now_ms));
        self.counters.record(&decision);
        encode(decision)
    }

    /// `Pacer::reserve_or_book` (SPEC §11). Admitted: `[0, code]` with
    /// `code` as [`encode`]; booked: `[1, seq, slot_ms, retry_after_s,
    /// clock_regressed]` (the booking's debit is one token); refused: `[2,
    /// required_wait_ms, retry_after_s, clock_regressed]`. Not the hot path.
    #[napi]
    pub fn reserve_or_book(&self, now_ms: f64, retries_left: f64) -> Vec<f64> {
        let decision = self
            .pacer
            .reserve_or_book(to_u64(now_ms), to_u32(retries_left));
        self.counters.record_booking(&decision);
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        match decision {
            BookingDecision::Admitted(admission) => {
                vec![0.0, encode(Decision::Admitted(admission))]
            }
            BookingDecision::Booked(booked) => {
                let (seq, _) = booked.booking.ticket.into_raw();
                vec![
                    1.0,
                    f64::from(seq),
                    booked.booking.slot_ms.min(MAX_SAFE) as f64,
                    booked.retry_after_s as f64,
                    flag(booked.clock_regressed),
                ]
            }
            BookingDecision::Refused(refusal) => vec![
                2.0,
                refusal.required_wait_ms.min(MAX_SAFE) as f64,
                refusal.retry_after_s as f64,
                flag(refusal.clock_regressed),
            ],
        }
    }

    /// `Pacer::redeem` of the booking `(seq, slot_ms)`: `[0, wait_ms]` when
    /// admitted (the ticket is the booking's), `[1, retry_after_s]` when not
    /// yet. Changes nothing but the counters.
    #[napi]
    pub fn redeem(&self, seq: f64, slot_ms: f64, now_ms: f64) -> Vec<f64> {
        let booking = Booking {
            ticket: Ticket::from_raw(to_u32(seq), UNITS_PER_TOKEN as u32),
            slot_ms: to_u64(slot_ms),
        };
        let redemption = self.pacer.redeem(booking, to_u64(now_ms));
        self.counters.record_redemption(&redemption);
        match redemption {
            Redemption::Admitted(admission) => {
                vec![0.0, admission.wait_ms.min(MAX_SAFE) as f64]
            }
            Redemption::NotYet { retry_after_s, .. } => vec![1.0, retry_after_s as f64],
        }
    }

    /// `Pacer::release` of the ticket `(seq, debit_units)`; whether the
    /// policy refunded it.
    #[napi]
    pub fn release(&self, seq: f64, debit_units: f64, now_ms: f64) -> bool {
        let ticket = Ticket::from_raw(to_u32(seq), to_u32(debit_units));
        let refunded = self.pacer.release(ticket, to_u64(now_ms));
        self.counters.record_release(refunded);
        refunded
    }

    /// `[mode, wait_bound_ms, capacity_units, max_debt_units, strict]`.
    #[napi]
    pub fn info(&self) -> Vec<f64> {
        vec![
            self.pacer.mode() as u32 as f64,
            self.pacer.wait_bound_ms() as f64,
            self.pacer.capacity_units() as f64,
            self.pacer.max_debt_units() as f64,
            match self.pacer.release_policy() {
                ReleasePolicy::Refund => 0.0,
                ReleasePolicy::Strict => 1.0,
            },
        ]
    }

    /// `[high_water_ms, tokens_units, seq]`.
    #[napi]
    pub fn state(&self) -> Vec<f64> {
        let state = self.pacer.state();
        vec![
            state.high_water_ms as f64,
            state.tokens_units as f64,
            f64::from(state.seq),
        ]
    }

    /// `[admitted, admitted_after_wait, refused, shaped, released, refunded,
    /// clock_regressions]`.
    #[napi]
    pub fn counters(&self) -> Vec<f64> {
        let c = self.counters.snapshot();
        [
            c.admitted,
            c.admitted_after_wait,
            c.refused,
            c.shaped,
            c.released,
            c.refunded,
            c.clock_regressions,
        ]
        .iter()
        .map(|&v| v as f64)
        .collect()
    }
}

fn config_error_text(error: ConfigError) -> &'static str {
    match error {
        ConfigError::RateTooHigh => "RATE_TOO_HIGH: ratePerMinute is above 600",
        ConfigError::BurstTooLarge => "BURST_TOO_LARGE: burst is above the maximum",
        ConfigError::RetriesExceedLadder => {
            "RETRIES_EXCEED_LADDER: maxRetries is above the ladder ceiling of idleTimeoutMs"
        }
    }
}

/// One notice, structured; `index.js` renders or forwards it.
#[napi(object)]
pub struct NativeNotice {
    /// `NoticeKind` number (1..=12).
    pub kind: u32,
    /// Stable name (`rate_malformed`, …, as in tests/vectors).
    pub name: String,
    /// Dedupe namespace (`rate`, `disabled`, …).
    pub namespace: String,
    /// Whether the dedupe key is the text (else the numbers).
    pub keyed_by_text: bool,
    /// The setting's text as given, or "".
    pub raw: String,
    /// The kind's numbers (see `NoticeKind`).
    pub values: Vec<f64>,
    /// The core's English text.
    pub text: String,
}

/// A resolved budget and the notices resolving it produced, in order.
#[napi(object)]
pub struct NativeResolution {
    pub rate_per_minute: u32,
    pub idle_timeout_ms: f64,
    pub total_timeout_ms: f64,
    pub max_retries: u32,
    pub wait_bound_ms: f64,
    pub hint_cap_seconds: f64,
    pub refusal_schedule_ms: f64,
    pub can_refuse: bool,
    pub enabled: bool,
    pub notices: Vec<NativeNotice>,
}

fn notice_text(notice: &Notice<'_>) -> String {
    let mut buffer = vec![0u8; 256];
    loop {
        match notice.render(&mut buffer) {
            Ok(written) => {
                buffer.truncate(written);
                return String::from_utf8(buffer).unwrap_or_default();
            }
            Err(needed) => buffer.resize(needed, 0),
        }
    }
}

/// Resolves settings text (SPEC §2). `idle_override_ms`, when given, is the
/// caller's own idle timeout (see `resolve_with_idle_override`).
#[napi]
pub fn resolve_settings(
    rate_per_minute: Option<String>,
    idle_timeout_ms: Option<String>,
    total_timeout_ms: Option<String>,
    max_retries: Option<String>,
    idle_override_ms: Option<f64>,
) -> NativeResolution {
    let settings = Settings {
        rate_per_min: rate_per_minute.as_deref(),
        idle_timeout_ms: idle_timeout_ms.as_deref(),
        total_timeout_ms: total_timeout_ms.as_deref(),
        max_retries: max_retries.as_deref(),
    };
    let resolution = match idle_override_ms {
        Some(idle) => resolve_with_idle_override(&settings, to_u64(idle)),
        None => resolve(&settings),
    };
    let budget = resolution.budget;
    NativeResolution {
        rate_per_minute: budget.rate_per_min,
        idle_timeout_ms: budget.idle_timeout_ms as f64,
        total_timeout_ms: budget.total_timeout_ms as f64,
        max_retries: budget.max_retries,
        wait_bound_ms: budget.wait_bound_ms() as f64,
        hint_cap_seconds: budget.hint_cap_s() as f64,
        refusal_schedule_ms: budget.refusal_schedule_ms() as f64,
        can_refuse: budget.can_refuse(),
        enabled: budget.pacing_enabled(),
        notices: resolution.notices.iter().map(native_notice).collect(),
    }
}

fn native_notice(notice: &Notice<'_>) -> NativeNotice {
    NativeNotice {
        kind: notice.kind as u32,
        name: notice.kind.name().to_string(),
        namespace: notice.kind.namespace().to_string(),
        keyed_by_text: notice.kind.keyed_by_text(),
        raw: notice.raw.to_string(),
        values: notice.values.iter().map(|&v| v as f64).collect(),
        text: notice_text(notice),
    }
}

/// The `disabled` / `norefuse` notice a pacer built from these numbers
/// calls for (`settings::mode_notice`), or `null`.
#[napi]
pub fn mode_notice_for(
    rate_per_minute: f64,
    idle_timeout_ms: f64,
    max_retries: f64,
) -> Option<NativeNotice> {
    let budget = Budget {
        rate_per_min: to_u32(rate_per_minute),
        idle_timeout_ms: to_u64(idle_timeout_ms),
        max_retries: to_u32(max_retries),
        ..Budget::DEFAULT
    };
    mode_notice(&budget).as_ref().map(native_notice)
}

/// The refusal body of SPEC §9 for a message prefix and hint.
#[napi]
pub fn refusal_body(message_prefix: String, retry_after_seconds: f64) -> String {
    let retry_after_s = to_u64(retry_after_seconds);
    let mut buffer = vec![0u8; 256 + message_prefix.len() * 6];
    loop {
        match write_refusal_body(&message_prefix, retry_after_s, &mut buffer) {
            Ok(written) => {
                buffer.truncate(written);
                return String::from_utf8(buffer).unwrap_or_default();
            }
            Err(needed) => buffer.resize(needed, 0),
        }
    }
}

/// SPEC §3 quantities over JS numbers (inputs saturate; `index.js` and
/// `compat.js` map NaN, infinities and negatives first).
#[napi]
pub fn wait_bound_ms(idle_timeout_ms: f64, max_retries: f64) -> f64 {
    budget::wait_bound_ms(to_u64(idle_timeout_ms), to_u32(max_retries)) as f64
}

#[napi]
pub fn hint_cap_seconds(wait_bound_ms: f64) -> f64 {
    budget::hint_cap_s(to_u64(wait_bound_ms)) as f64
}

#[napi]
pub fn retry_after_seconds(required_wait_ms: f64, wait_bound_ms: f64) -> f64 {
    budget::retry_after_s(to_u64(required_wait_ms), to_u64(wait_bound_ms)) as f64
}

#[napi]
pub fn refusal_schedule_ms(max_retries: f64, wait_bound_ms: f64) -> f64 {
    budget::refusal_schedule_ms(to_u32(max_retries), to_u64(wait_bound_ms)) as f64
}

#[napi]
pub fn can_refuse(rate_per_minute: f64, max_retries: f64, wait_bound_ms: f64) -> bool {
    budget::can_refuse(
        to_u32(rate_per_minute),
        to_u32(max_retries),
        to_u64(wait_bound_ms),
    )
}

#[napi]
pub fn ladder_ceiling(idle_timeout_ms: f64) -> u32 {
    budget::ladder_ceiling(to_u64(idle_timeout_ms))
}

/// The core's constants, once (SPEC §2 defaults and limits).
#[napi(object)]
pub struct NativeConstants {
    pub version: String,
    pub default_rate_per_minute: u32,
    pub max_rate_per_minute: u32,
    pub default_burst: u32,
    pub max_burst: u32,
    pub default_idle_timeout_ms: f64,
    pub min_idle_timeout_ms: f64,
    pub max_idle_timeout_ms: f64,
    pub default_total_timeout_ms: f64,
    pub min_total_timeout_ms: f64,
    pub max_total_timeout_ms: f64,
    pub default_max_retries: u32,
    pub wait_bound_ceiling_ms: f64,
    pub units_per_token: f64,
    pub refusal_status: u32,
    pub refusal_content_type: String,
}

#[napi]
pub fn constants() -> NativeConstants {
    NativeConstants {
        version: env!("CARGO_PKG_VERSION").to_string(),
        default_rate_per_minute: budget::DEFAULT_RATE_PER_MIN,
        max_rate_per_minute: budget::MAX_RATE_PER_MIN,
        default_burst: budget::DEFAULT_BURST,
        max_burst: MAX_BURST,
        default_idle_timeout_ms: budget::DEFAULT_IDLE_TIMEOUT_MS as f64,
        min_idle_timeout_ms: budget::MIN_IDLE_TIMEOUT_MS as f64,
        max_idle_timeout_ms: budget::MAX_IDLE_TIMEOUT_MS as f64,
        default_total_timeout_ms: budget::DEFAULT_TOTAL_TIMEOUT_MS as f64,
        min_total_timeout_ms: budget::MIN_TOTAL_TIMEOUT_MS as f64,
        max_total_timeout_ms: budget::MAX_TOTAL_TIMEOUT_MS as f64,
        default_max_retries: budget::DEFAULT_MAX_RETRIES,
        wait_bound_ceiling_ms: budget::WAIT_BOUND_CEILING_MS as f64,
        units_per_token: UNITS_PER_TOKEN as f64,
        refusal_status: u32::from(REFUSAL_STATUS),
        refusal_content_type: REFUSAL_CONTENT_TYPE.to_string(),
    }
}

// ---------------------------------------------------------------- shared pacers

/// A pacer whose state word lives in a shared-memory file, so every process
/// on the machine that opens the same name paces against one bucket. The
/// file layout is docs/shared-memory.md's; the C library (`ffi/src/shm.rs`)
/// reads and writes the same files, and the smoke test checks that both
/// see each other's debits. The calls take no clock: they read
/// CLOCK_MONOTONIC, the clock every process on the machine shares.
#[napi]
pub struct NativeSharedPacer {
    view: Option<shared::View>,
    counters: Counters,
}

#[napi]
impl NativeSharedPacer {
    /// Opens (or creates) the shared pacer; fails with `CODE: text`, the
    /// code being the C library's status name (`SHARED_CONFIG_MISMATCH`, …).
    #[napi(factory)]
    pub fn open(
        path_or_name: String,
        rate_per_minute: f64,
        burst: f64,
        idle_timeout_ms: f64,
        max_retries: f64,
        strict: bool,
    ) -> Result<Self> {
        let config = Config {
            rate_per_min: to_u32(rate_per_minute),
            burst: to_u32(burst),
            idle_timeout_ms: to_u64(idle_timeout_ms),
            max_retries: to_u32(max_retries),
            release_policy: if strict {
                ReleasePolicy::Strict
            } else {
                ReleasePolicy::Refund
            },
        };
        if let Err(error) = Pacer::new(&config, 0) {
            return Err(Error::new(Status::InvalidArg, config_error_text(error)));
        }
        match shared::View::open(&path_or_name, &config) {
            Ok(view) => Ok(NativeSharedPacer {
                view: Some(view),
                counters: Counters::new(),
            }),
            Err(text) => Err(Error::new(Status::GenericFailure, text)),
        }
    }

    fn pacer(&self) -> Result<&Pacer> {
        match &self.view {
            Some(view) => Ok(view.pacer()),
            None => Err(Error::new(
                Status::GenericFailure,
                "SHARED_NOT_OPEN: the shared pacer was closed",
            )),
        }
    }

    /// `Pacer::reserve` at the shared clock, encoded by [`encode`]. Any
    /// argument is ignored: a shared pacer never takes a caller's clock.
    #[napi]
    pub fn reserve(&self) -> Result<f64> {
        let decision = self.pacer()?.reserve(shared::clock_ms());
        self.counters.record(&decision);
        Ok(encode(decision))
    }

    /// `Pacer::release` of `(seq, debit_units)` at the shared clock (a third
    /// argument is ignored).
    #[napi]
    pub fn release(&self, seq: f64, debit_units: f64) -> Result<bool> {
        let ticket = Ticket::from_raw(to_u32(seq), to_u32(debit_units));
        let refunded = self.pacer()?.release(ticket, shared::clock_ms());
        self.counters.record_release(refunded);
        Ok(refunded)
    }

    /// `[mode, wait_bound_ms, capacity_units, max_debt_units, strict]`.
    #[napi]
    pub fn info(&self) -> Result<Vec<f64>> {
        let pacer = self.pacer()?;
        Ok(vec![
            pacer.mode() as u32 as f64,
            pacer.wait_bound_ms() as f64,
            pacer.capacity_units() as f64,
            pacer.max_debt_units() as f64,
            match pacer.release_policy() {
                ReleasePolicy::Refund => 0.0,
                ReleasePolicy::Strict => 1.0,
            },
        ])
    }

    /// `[high_water_ms, tokens_units, seq]` of the machine-wide state.
    #[napi]
    pub fn state(&self) -> Result<Vec<f64>> {
        let state = self.pacer()?.state();
        Ok(vec![
            state.high_water_ms as f64,
            state.tokens_units as f64,
            f64::from(state.seq),
        ])
    }

    /// This process's decisions, as `NativePacer::counters`.
    #[napi]
    pub fn counters(&self) -> Vec<f64> {
        let c = self.counters.snapshot();
        [
            c.admitted,
            c.admitted_after_wait,
            c.refused,
            c.shaped,
            c.released,
            c.refunded,
            c.clock_regressions,
        ]
        .iter()
        .map(|&v| v as f64)
        .collect()
    }

    /// Unmaps this process's view (the file stays). Idempotent.
    #[napi]
    pub fn close(&mut self) {
        self.view = None;
    }
}

/// The machine-wide clock shared pacers read: CLOCK_MONOTONIC, whole ms.
#[napi]
pub fn shared_clock_ms() -> f64 {
    shared::clock_ms() as f64
}

/// Removes a shared pacer's name; `SHARED_NOT_FOUND: …` if there is none.
#[napi]
pub fn unlink_shared(path_or_name: String) -> Result<()> {
    shared::unlink(&path_or_name).map_err(|text| Error::new(Status::GenericFailure, text))
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod shared {
    //! The file protocol of docs/shared-memory.md over std and five libc
    //! calls (declared here: the addon has no libc dependency). Linux on
    //! x86_64 and aarch64, where the constants below hold.

    use std::ffi::{c_int, c_long, c_void};
    use std::fs::{self, OpenOptions};
    use std::io::ErrorKind;
    use std::mem::size_of;
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};

    use pacer_core::{Config, Pacer, ReleasePolicy};

    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }

    extern "C" {
        fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: i64,
        ) -> *mut c_void;
        fn munmap(addr: *mut c_void, len: usize) -> c_int;
        fn sysconf(name: c_int) -> c_long;
        fn geteuid() -> u32;
        fn clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int;
    }

    const PROT_READ: c_int = 1;
    const PROT_WRITE: c_int = 2;
    const MAP_SHARED: c_int = 1;
    const MAP_PRIVATE: c_int = 2;
    const MAP_FIXED: c_int = 0x10;
    const MAP_ANONYMOUS: c_int = 0x20;
    const SC_PAGESIZE: c_int = 30;
    const CLOCK_MONOTONIC: c_int = 1;

    // The file layout (docs/shared-memory.md; ffi/src/shm.rs).
    const SPLIT: u64 = 65536;
    const FILE_SIZE: u64 = SPLIT + 256;
    const HEADER: usize = 128;
    const MAGIC: [u8; 8] = *b"PACERSHM";
    const LAYOUT_VERSION: u32 = 1;
    /// PACER_ABI_VERSION of the C library whose files these are.
    const ABI_VERSION: u32 = 1;
    const READY: u32 = u32::from_le_bytes(*b"REDY");
    /// When the state word ends the shared page, the 64 bytes before it
    /// are the C library's slot prefix: its magic and its counters.
    const SLOT_MAGIC: [u8; 8] = *b"pacer\x00\x01\x00";
    const SLOT_PREFIX: usize = 64;

    /// CLOCK_MONOTONIC in whole milliseconds.
    pub fn clock_ms() -> u64 {
        let mut ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        if unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) } != 0 {
            return 0;
        }
        (ts.tv_sec.max(0) as u64)
            .saturating_mul(1000)
            .saturating_add(ts.tv_nsec.max(0) as u64 / 1_000_000)
    }

    fn err(code: &str, text: &str) -> String {
        format!("{code}: {text}")
    }

    fn unsupported() -> String {
        err(
            "SHARED_UNSUPPORTED",
            "shared pacers need lock-free 128-bit atomics and a supported layout",
        )
    }

    fn os(what: &str, e: std::io::Error) -> String {
        err("SHARED_OS", &format!("{what}: {e}"))
    }

    /// A core pacer's bytes (it has no padding: checked by its size).
    fn bytes(p: &Pacer) -> [u8; 64] {
        let mut out = [0u8; 64];
        if size_of::<Pacer>() == 64 {
            // SAFETY: the pacer is exactly 64 initialised bytes (its fields
            // add up to 64, so there is no padding).
            out = unsafe { std::ptr::read((p as *const Pacer).cast::<[u8; 64]>()) };
        }
        out
    }

    struct Layout {
        page: usize,
        /// Offset of the state word in `Pacer`.
        state_at: usize,
        /// The page boundary's offset in `Pacer`.
        split: usize,
        shared_first: bool,
    }

    impl Layout {
        fn state_in_file(&self) -> u64 {
            SPLIT - self.split as u64 + self.state_at as u64
        }
    }

    fn layout() -> Result<Layout, String> {
        if !Pacer::is_lock_free() || size_of::<Pacer>() != 64 {
            return Err(unsupported());
        }
        // SAFETY: sysconf has no memory preconditions.
        let page = unsafe { sysconf(SC_PAGESIZE) };
        if page < 256 || page as u64 > SPLIT || !SPLIT.is_multiple_of(page as u64) {
            return Err(unsupported());
        }
        let cfg = Config::DEFAULT;
        let other = Config {
            rate_per_min: 7,
            burst: 3,
            idle_timeout_ms: 3_600_000,
            max_retries: 2,
            release_policy: ReleasePolicy::Strict,
        };
        let make = |c: &Config, now| {
            Pacer::new(c, now)
                .map(|p| bytes(&p))
                .map_err(|_| unsupported())
        };
        let (a, b, c) = (make(&cfg, 0)?, make(&cfg, u64::MAX)?, make(&other, 0)?);
        let first = (0..64).find(|&i| a[i] != b[i]).ok_or_else(unsupported)?;
        let last = (0..64)
            .rev()
            .find(|&i| a[i] != b[i])
            .ok_or_else(unsupported)?;
        let state_at = first & !15;
        if last >= state_at + 16 {
            return Err(unsupported());
        }
        let params = (0..64).filter(|&i| a[i] != c[i] && (i < state_at || i >= state_at + 16));
        let (mut before, mut after) = (false, false);
        for i in params {
            if i < state_at {
                before = true;
            } else {
                after = true;
            }
        }
        let shared_first = match (before, after) {
            (false, true) if state_at == 0 => true,
            (true, false) if state_at == 48 => false,
            _ => return Err(unsupported()),
        };
        Ok(Layout {
            page: page as usize,
            state_at,
            split: if shared_first { 16 } else { 48 },
            shared_first,
        })
    }

    fn normalised(c: &Config) -> (u32, u32, u32, u32, u64) {
        (
            c.rate_per_min,
            c.burst.max(1),
            c.max_retries,
            c.release_policy as u32,
            c.idle_timeout_ms,
        )
    }

    fn header(c: &Config, now_ms: u64, state_in_file: u64) -> [u8; HEADER] {
        let (rate, burst, retries, policy, idle) = normalised(c);
        let mut h = [0u8; HEADER];
        let mut put = |at: usize, b: &[u8]| h[at..at + b.len()].copy_from_slice(b);
        put(0, &MAGIC);
        put(8, &LAYOUT_VERSION.to_le_bytes());
        put(12, &ABI_VERSION.to_le_bytes());
        put(16, &state_in_file.to_le_bytes());
        put(24, &FILE_SIZE.to_le_bytes());
        put(32, &READY.to_le_bytes());
        put(36, &rate.to_le_bytes());
        put(40, &burst.to_le_bytes());
        put(44, &retries.to_le_bytes());
        put(48, &policy.to_le_bytes());
        put(56, &idle.to_le_bytes());
        put(64, &std::process::id().to_le_bytes());
        put(72, &now_ms.to_le_bytes());
        h
    }

    fn u32_at(h: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
    }

    fn u64_at(h: &[u8], at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[at..at + 8]);
        u64::from_le_bytes(b)
    }

    fn check_header(h: &[u8], size: u64, c: &Config, layout: &Layout) -> Result<(), String> {
        if h[..8] != MAGIC {
            return Err(err(
                "SHARED_FOREIGN",
                "the file is not a shared pacer (bad magic)",
            ));
        }
        if u32_at(h, 8) != LAYOUT_VERSION {
            return Err(err(
                "SHARED_LAYOUT_VERSION",
                "the file has another layout version",
            ));
        }
        if u32_at(h, 12) != ABI_VERSION {
            return Err(err(
                "SHARED_ABI_VERSION",
                "the file was made by another ABI version",
            ));
        }
        if u64_at(h, 24) != FILE_SIZE {
            return Err(err(
                "SHARED_FOREIGN",
                "the file is not a shared pacer (bad header)",
            ));
        }
        if u64_at(h, 16) != layout.state_in_file() {
            return Err(err(
                "SHARED_LAYOUT_VERSION",
                "the file keeps the state word elsewhere",
            ));
        }
        if size != FILE_SIZE {
            return Err(err(
                "SHARED_TRUNCATED",
                "the file's size is not the layout's",
            ));
        }
        if u32_at(h, 32) != READY {
            return Err(err(
                "SHARED_INCOMPLETE",
                "the file was never completely initialised",
            ));
        }
        let (rate, burst, retries, policy, idle) = normalised(c);
        if u32_at(h, 36) != rate
            || u32_at(h, 40) != burst
            || u32_at(h, 44) != retries
            || u32_at(h, 48) != policy
            || u64_at(h, 56) != idle
        {
            return Err(err(
                "SHARED_CONFIG_MISMATCH",
                "the file holds a different configuration",
            ));
        }
        Ok(())
    }

    /// The file's path, its directory and its name.
    fn names(path_or_name: &str) -> Result<(String, String, String), String> {
        let (dir, base) = match path_or_name.rfind('/') {
            Some(0) => ("/".to_string(), &path_or_name[1..]),
            Some(at) => (path_or_name[..at].to_string(), &path_or_name[at + 1..]),
            None => ("/dev/shm".to_string(), path_or_name),
        };
        if base.is_empty()
            || base == "."
            || base == ".."
            || base.len() > 200
            || path_or_name.len() >= 4000
            || path_or_name.contains('\0')
        {
            return Err(err("SHARED_INVALID_NAME", "invalid name or path"));
        }
        let path = if path_or_name.contains('/') {
            path_or_name.to_string()
        } else {
            format!("{dir}/{base}")
        };
        Ok((path, dir, base.to_string()))
    }

    static TEMP_SERIAL: AtomicU32 = AtomicU32::new(0);

    /// Writes a complete file under a temporary name, then links it into
    /// place; Ok also when another process linked first.
    fn create(
        path: &str,
        dir: &str,
        base: &str,
        c: &Config,
        layout: &Layout,
    ) -> Result<(), String> {
        let now = clock_ms();
        let start = Pacer::new(c, now).map_err(|_| unsupported())?;
        let start = bytes(&start);
        let state = &start[layout.state_at..layout.state_at + 16];
        let mut shared = Vec::with_capacity(SLOT_PREFIX + 16);
        let at = if layout.shared_first {
            shared.extend_from_slice(&SLOT_MAGIC);
            shared.resize(SLOT_PREFIX, 0);
            shared.extend_from_slice(state);
            SPLIT - shared.len() as u64
        } else {
            shared.extend_from_slice(state);
            SPLIT
        };
        let head = header(c, now, layout.state_in_file());
        for _ in 0..16 {
            let serial = TEMP_SERIAL.fetch_add(1, Ordering::Relaxed);
            let temp = format!("{dir}/.{base}.{}.{serial}.tmp", std::process::id());
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)
            {
                Ok(file) => file,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(os("create", e)),
            };
            let written = (|| {
                file.set_permissions(fs::Permissions::from_mode(0o600))?;
                file.set_len(FILE_SIZE)?;
                file.write_all_at(&head, 0)?;
                file.write_all_at(&shared, at)?;
                match fs::hard_link(&temp, path) {
                    Err(e) if e.kind() != ErrorKind::AlreadyExists => Err(e),
                    _ => Ok(()),
                }
            })();
            let _ = fs::remove_file(&temp);
            return written.map_err(|e| os("create", e));
        }
        Err(err("SHARED_OS", "no free temporary name"))
    }

    /// This process's view: a private page with its own parameters beside
    /// the file's page holding the state word.
    pub struct View {
        base: *mut c_void,
        len: usize,
        pacer: *const Pacer,
    }

    impl View {
        pub fn open(path_or_name: &str, c: &Config) -> Result<View, String> {
            let reference = bytes(&Pacer::new(c, 0).map_err(|_| unsupported())?);
            let layout = layout()?;
            let (path, dir, base) = names(path_or_name)?;
            for _ in 0..8 {
                let link = match fs::symlink_metadata(&path) {
                    Ok(m) => m,
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        create(&path, &dir, &base, c, &layout)?;
                        continue;
                    }
                    Err(e) => return Err(os("stat", e)),
                };
                if link.file_type().is_symlink() {
                    return Err(err("SHARED_SYMLINK", "the path is a symbolic link"));
                }
                if !link.is_file() {
                    return Err(err("SHARED_NOT_REGULAR", "the path is not a regular file"));
                }
                let file = match OpenOptions::new().read(true).write(true).open(&path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(os("open", e)),
                };
                let m = file.metadata().map_err(|e| os("fstat", e))?;
                // Swapped for something else (a symlink) since the check
                // above: look again.
                if m.dev() != link.dev() || m.ino() != link.ino() {
                    continue;
                }
                // SAFETY: geteuid has no preconditions.
                if m.uid() != unsafe { geteuid() } {
                    return Err(err(
                        "SHARED_WRONG_OWNER",
                        "the file belongs to another user",
                    ));
                }
                if m.mode() & 0o077 != 0 {
                    return Err(err(
                        "SHARED_PERMISSIONS",
                        "the file is accessible to group or others (want 0600)",
                    ));
                }
                if m.len() < HEADER as u64 {
                    return Err(err(
                        "SHARED_TRUNCATED",
                        "the file's size is not the layout's",
                    ));
                }
                let mut head = [0u8; HEADER];
                file.read_exact_at(&mut head, 0)
                    .map_err(|e| os("read", e))?;
                check_header(&head, m.len(), c, &layout)?;
                return View::map(file.as_raw_fd(), &layout, &reference);
            }
            Err(err("SHARED_OS", "the file kept changing while opening it"))
        }

        fn map(fd: c_int, layout: &Layout, reference: &[u8; 64]) -> Result<View, String> {
            let page = layout.page;
            let len = 2 * page;
            // SAFETY: a fresh anonymous mapping.
            let base = unsafe {
                mmap(
                    std::ptr::null_mut(),
                    len,
                    PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if base as isize == -1 {
                return Err(os("mmap", std::io::Error::last_os_error()));
            }
            let (at, offset) = if layout.shared_first {
                (0, SPLIT - page as u64)
            } else {
                (page, SPLIT)
            };
            // SAFETY: replaces one page of the fresh mapping with the file's
            // page holding the state word (page-multiple offset and length).
            let shared = unsafe {
                mmap(
                    base.cast::<u8>().add(at).cast(),
                    page,
                    PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_FIXED,
                    fd,
                    offset as i64,
                )
            };
            if shared as isize == -1 {
                let e = std::io::Error::last_os_error();
                // SAFETY: the mapping made above.
                unsafe { munmap(base, len) };
                return Err(os("mmap", e));
            }
            // SAFETY: within the first page, 16-aligned (page and split are
            // multiples of 16); the pacer's 64 bytes end within the view.
            let pacer = unsafe { base.cast::<u8>().add(page - layout.split) };
            let (from, count) = if layout.shared_first {
                (layout.split, 64 - layout.split)
            } else {
                (0, layout.split)
            };
            // SAFETY: the private side of the pacer, in the anonymous page.
            unsafe {
                std::ptr::copy_nonoverlapping(reference.as_ptr().add(from), pacer.add(from), count)
            };
            Ok(View {
                base,
                len,
                pacer: pacer.cast::<Pacer>(),
            })
        }

        pub fn pacer(&self) -> &Pacer {
            // SAFETY: an initialised pacer (private parameters, shared state
            // word) mapped for as long as the view lives.
            unsafe { &*self.pacer }
        }
    }

    impl Drop for View {
        fn drop(&mut self) {
            // SAFETY: the mapping `open` made; nothing borrows it past self.
            unsafe { munmap(self.base, self.len) };
        }
    }

    pub fn unlink(path_or_name: &str) -> Result<(), String> {
        let (path, _, _) = names(path_or_name)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Err(err("SHARED_NOT_FOUND", "no such file"))
            }
            Err(e) => Err(os("unlink", e)),
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod shared {
    //! Shared pacers are implemented for Linux on x86_64 and aarch64.
    use pacer_core::{Config, Pacer};

    const UNSUPPORTED: &str = "SHARED_UNSUPPORTED: shared pacers need Linux on x86_64 or aarch64";

    pub fn clock_ms() -> u64 {
        0
    }

    pub struct View;

    impl View {
        pub fn open(_: &str, _: &Config) -> Result<View, String> {
            Err(UNSUPPORTED.to_string())
        }

        pub fn pacer(&self) -> &Pacer {
            unreachable!("never opened")
        }
    }

    pub fn unlink(_: &str) -> Result<(), String> {
        Err(UNSUPPORTED.to_string())
    }
}
