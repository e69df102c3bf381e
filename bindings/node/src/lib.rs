//! Node-API addon over the pacer core.
//!
//! Numbers in, numbers out: building a JavaScript object through Node-API
//! costs more than the admission decision itself, so the hot calls return
//! one number and `index.js` builds the objects. Validation with errors that
//! name the field lives in `index.js`; here every input is total (a NaN,
//! negative or huge number saturates into range), so nothing can panic.

mod hot;

use hot::Table;

use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use pacer::shm::{self, SharedPacer};
use pacer::status::{pacer_status, pacer_status_str};
use pacer_core::frame::{write_refusal_body, REFUSAL_CONTENT_TYPE, REFUSAL_STATUS};
use pacer_core::settings::{mode_notice, resolve, resolve_with_idle_override, Settings};
use pacer_core::{
    budget, AdmitPath, Booking, BookingDecision, Budget, Config, ConfigError, CounterSnapshot,
    Counters, Decision, Notice, Outcome, Pacer, Redemption, ReleasePolicy, Ticket, MAX_BURST,
    UNITS_PER_TOKEN, WAIT_BOUNDS_MS,
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

/// A pacer's configuration from the JS numbers (`index.js` has
/// range-checked them): what `NativePacer` and `NativeSharedPacer.open`
/// are built from.
#[napi]
pub struct NativeConfig {
    config: Config,
}

#[napi]
impl NativeConfig {
    /// The adaptive floor and ceiling per minute (SPEC §14) may be left
    /// out: a floor left out (or 0) keeps adaptation off, a ceiling left out
    /// (or 0) is the rate.
    #[napi(constructor)]
    pub fn new(
        rate_per_minute: f64,
        burst: f64,
        idle_timeout_ms: f64,
        max_retries: f64,
        strict: bool,
        floor: Option<f64>,
        ceiling: Option<f64>,
    ) -> Self {
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
            adaptive_floor_per_min: 0,
            adaptive_ceiling_per_min: 0,
        };
        NativeConfig {
            config: config.adaptive(floor.map_or(0, to_u32), ceiling.map_or(0, to_u32)),
        }
    }
}

/// An outcome as `index.js` and `compat.js` pass it (the core's `Outcome`
/// numbers: 1 opened, 2 throttled).
fn outcome_of(code: u32) -> Result<Outcome> {
    match code {
        1 => Ok(Outcome::Opened),
        2 => Ok(Outcome::Throttled),
        _ => Err(Error::new(
            Status::InvalidArg,
            format!("OUTCOME: {code} is neither 1 (opened) nor 2 (throttled)"),
        )),
    }
}

/// The core pacer and its counters: shared by a `NativePacer` and the table
/// slots of its handles, and only ever used on its env's JS thread (an
/// `Rc`). Each call borrows them for its own span and never across a call
/// into JavaScript, so a borrow is never refused, and the hot call may take
/// them exclusively: `Pacer::reserve_mut` and `Counters::record_mut`, with
/// no locked instruction.
struct Core {
    parts: RefCell<Parts>,
}

struct Parts {
    pacer: Pacer,
    counters: Counters,
}

/// A borrow of a pacer refused: a call on it is already running, which the
/// addon never does (no call into JavaScript while a pacer is borrowed).
const BUSY: &str = "pacer: called again while a call on this pacer was running";

impl Core {
    /// The pacer and its counters, for one call.
    fn parts(&self) -> Result<std::cell::Ref<'_, Parts>> {
        self.parts
            .try_borrow()
            .map_err(|_| Error::new(Status::GenericFailure, BUSY))
    }

    /// `Pacer::reserve_mut`, counted by `Counters::record_mut` and encoded
    /// by [`encode`].
    fn reserve(&self, now_ms: f64) -> std::result::Result<f64, String> {
        let mut parts = self.parts.try_borrow_mut().map_err(|_| BUSY.to_string())?;
        let Parts { pacer, counters } = &mut *parts;
        let decision = pacer.reserve_mut(to_u64(now_ms));
        counters.record_mut(&decision);
        Ok(encode(decision))
    }
}

/// The native half of `Pacer` in `index.js`: the core pacer and its
/// counters.
#[napi]
pub struct NativePacer {
    core: Rc<Core>,
}

/// `reserveHot(handle)`: [`Core::reserve`] of the pacer whose handle
/// ([`NativePacer::handle`]) is given, at the clock in `exchange[0]`; the
/// code goes to `exchange[1]` (`src/hot.rs`).
unsafe extern "C" fn reserve_hot(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node-API calls this with its env and info; `init` made this
    // function over the env's `Table<Core>`.
    unsafe { hot::call::<Core>(env, info, true, |core, now_ms| core.reserve(now_ms)) }
}

/// One env's pacer tables: plain and shared pacers.
#[derive(Clone)]
struct Tables {
    pacers: Rc<Table<Core>>,
    shared: Rc<Table<SharedCore>>,
}

thread_local! {
    /// This thread's env's tables (set by `init`; one env per thread).
    static TABLES: RefCell<Option<Tables>> = const { RefCell::new(None) };
}

/// This env's tables (`init` ran on this thread before any pacer exists).
fn tables() -> Result<Tables> {
    TABLES
        .with(|tables| tables.borrow().clone())
        .ok_or_else(|| {
            Error::new(
                Status::GenericFailure,
                "pacer: the addon was not initialized on this thread",
            )
        })
}

#[napi]
impl NativePacer {
    /// Fails with the core's reason (as `RATE_TOO_HIGH: …`) when the config is
    /// rejected; `index.js` checks ranges first and throws a `RangeError`.
    #[napi(constructor)]
    pub fn new(config: &NativeConfig, now_ms: f64) -> Result<Self> {
        match Pacer::new(&config.config, to_u64(now_ms)) {
            Ok(pacer) => Ok(NativePacer {
                core: Rc::new(Core {
                    parts: RefCell::new(Parts {
                        pacer,
                        counters: Counters::new(),
                    }),
                }),
            }),
            Err(error) => Err(Error::new(Status::InvalidArg, config_error_text(error))),
        }
    }

    /// `Pacer::reserve`, encoded by [`encode`].
    #[napi]
    pub fn reserve(&self, now_ms: f64) -> Result<f64> {
        self.core
            .reserve(now_ms)
            .map_err(|message| Error::new(Status::GenericFailure, message))
    }

    /// This pacer's handle for `reserveHot(handle)`, which does what
    /// [`Self::reserve`] does at a fraction of the cost (`src/hot.rs`).
    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        hot::handle(env, &tables()?.pacers, Rc::clone(&self.core))
    }

    /// `Pacer::reserve_or_book` (SPEC §11), as [`booking_result`]. Not the
    /// hot path.
    #[napi]
    pub fn reserve_or_book(&self, now_ms: f64, retries_left: f64) -> Result<Vec<f64>> {
        let now_ms = to_u64(now_ms);
        let parts = self.core.parts()?;
        let decision = parts.pacer.reserve_or_book(now_ms, to_u32(retries_left));
        parts.counters.record_booking(&decision);
        Ok(booking_result(decision, now_ms))
    }

    /// `Pacer::redeem` of the booking `(seq, slot_ms)`, as
    /// [`redemption_result`]. Changes nothing but the counters.
    #[napi]
    pub fn redeem(&self, seq: f64, slot_ms: f64, now_ms: f64) -> Result<Vec<f64>> {
        let now_ms = to_u64(now_ms);
        let parts = self.core.parts()?;
        let redemption = parts.pacer.redeem(booking_of(seq, slot_ms), now_ms);
        parts.counters.record_redemption(&redemption);
        Ok(redemption_result(redemption, now_ms))
    }

    /// `Pacer::release` of the ticket `(seq, debit_units)`; whether the
    /// policy refunded it.
    #[napi]
    pub fn release(&self, seq: f64, debit_units: f64, now_ms: f64) -> Result<bool> {
        let ticket = Ticket::from_raw(to_u32(seq), to_u32(debit_units));
        let parts = self.core.parts()?;
        let refunded = parts.pacer.release(ticket, to_u64(now_ms));
        parts.counters.record_release(refunded);
        Ok(refunded)
    }

    /// `Pacer::observe` (SPEC §14) of the outcome numbered `outcome` (1
    /// opened, 2 throttled), counted: the rate in force after it.
    #[napi]
    pub fn observe(&self, outcome: u32, now_ms: f64) -> Result<u32> {
        let outcome = outcome_of(outcome)?;
        let parts = self.core.parts()?;
        let rate = parts.pacer.observe(outcome, to_u64(now_ms));
        parts.counters.record_outcome(outcome);
        Ok(rate)
    }

    /// `Pacer::level_at`: the tokens at `now_ms`, in units (60000 a token;
    /// negative: debt). Reads only.
    #[napi]
    pub fn level_at(&self, now_ms: f64) -> Result<f64> {
        Ok(self.core.parts()?.pacer.level_at(to_u64(now_ms)) as f64)
    }

    /// `Pacer::rate_in_force` (SPEC §14): the configured rate unless
    /// adaptation is on.
    #[napi]
    pub fn rate_in_force(&self, now_ms: f64) -> Result<u32> {
        Ok(self.core.parts()?.pacer.rate_in_force(to_u64(now_ms)))
    }

    /// `[mode, wait_bound_ms, capacity_units, max_debt_units, strict]`.
    #[napi]
    pub fn info(&self) -> Result<Vec<f64>> {
        Ok(info_of(&self.core.parts()?.pacer))
    }

    /// `[high_water_ms, tokens_units, seq]`.
    #[napi]
    pub fn state(&self) -> Result<Vec<f64>> {
        Ok(state_of(&self.core.parts()?.pacer))
    }

    /// The counts, as [`counters_of`].
    #[napi]
    pub fn counters(&self) -> Result<Vec<f64>> {
        Ok(counters_of(&self.core.parts()?.counters.snapshot()))
    }
}

/// A `reserve_or_book` decision (SPEC §11) made at `now_ms`, as numbers.
/// Admitted: `[0, code]` with `code` as [`encode`]; booked: `[1, seq,
/// slot_ms, retry_after_s, clock_regressed, required_wait_ms]` (the
/// booking's debit is one token; the wait is until the slot from `now_ms`,
/// the reading the decision was made at); refused: `[2, required_wait_ms,
/// retry_after_s, clock_regressed]`.
fn booking_result(decision: BookingDecision, now_ms: u64) -> Vec<f64> {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    match decision {
        BookingDecision::Admitted(admission) => vec![0.0, encode(Decision::Admitted(admission))],
        BookingDecision::Booked(booked) => {
            let slot_ms = booked.booking.slot_ms;
            let (seq, _) = booked.booking.ticket.into_raw();
            vec![
                1.0,
                f64::from(seq),
                slot_ms.min(MAX_SAFE) as f64,
                booked.retry_after_s as f64,
                flag(booked.clock_regressed),
                slot_ms.saturating_sub(now_ms).min(MAX_SAFE) as f64,
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

/// The booking `(seq, slot_ms)` (its debit is one token).
fn booking_of(seq: f64, slot_ms: f64) -> Booking {
    Booking {
        ticket: Ticket::from_raw(to_u32(seq), UNITS_PER_TOKEN as u32),
        slot_ms: to_u64(slot_ms),
    }
}

/// A redemption made at `now_ms`, as numbers: `[0, wait_ms]` when admitted
/// (the ticket is the booking's), `[1, retry_after_s, required_wait_ms]`
/// when not yet (the wait until the slot from `now_ms`).
fn redemption_result(redemption: Redemption, now_ms: u64) -> Vec<f64> {
    match redemption {
        Redemption::Admitted(admission) => vec![0.0, admission.wait_ms.min(MAX_SAFE) as f64],
        Redemption::NotYet {
            booking,
            retry_after_s,
        } => vec![
            1.0,
            retry_after_s as f64,
            booking.slot_ms.saturating_sub(now_ms).min(MAX_SAFE) as f64,
        ],
    }
}

/// `[mode, wait_bound_ms, capacity_units, max_debt_units, strict]`.
fn info_of(pacer: &Pacer) -> Vec<f64> {
    vec![
        pacer.mode() as u32 as f64,
        pacer.wait_bound_ms() as f64,
        pacer.capacity_units() as f64,
        pacer.max_debt_units() as f64,
        match pacer.release_policy() {
            ReleasePolicy::Refund => 0.0,
            ReleasePolicy::Strict => 1.0,
        },
    ]
}

/// `[high_water_ms, tokens_units, seq]`.
fn state_of(pacer: &Pacer) -> Vec<f64> {
    let state = pacer.state();
    vec![
        state.high_water_ms as f64,
        state.tokens_units as f64,
        f64::from(state.seq),
    ]
}

/// `[admitted, admitted_after_wait, refused, shaped, released, refunded,
/// clock_regressions, booked, opened, throttled, wait_ms_total, redeemed,
/// wait_buckets[0], …, wait_buckets[7]]` (`CounterSnapshot`'s order; the
/// wait buckets as the core keeps them, not cumulative).
fn counters_of(c: &CounterSnapshot) -> Vec<f64> {
    [
        c.admitted,
        c.admitted_after_wait,
        c.refused,
        c.shaped,
        c.released,
        c.refunded,
        c.clock_regressions,
        c.booked,
        c.opened,
        c.throttled,
        c.wait_ms_total,
        c.redeemed,
    ]
    .iter()
    .chain(c.wait_buckets.iter())
    .map(|&v| v as f64)
    .collect()
}

fn config_error_text(error: ConfigError) -> &'static str {
    match error {
        ConfigError::RateTooHigh => "RATE_TOO_HIGH: ratePerMinute is above 600",
        ConfigError::BurstTooLarge => "BURST_TOO_LARGE: burst is above the maximum",
        ConfigError::RetriesExceedLadder => {
            "RETRIES_EXCEED_LADDER: maxRetries is above the ladder ceiling of idleTimeoutMs"
        }
        ConfigError::AdaptiveRange => {
            "ADAPTIVE_RANGE: adaptive pacing needs 1 <= floor <= ratePerMinute <= ceiling <= 600"
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
    /// The wait histogram's upper bounds, ms (`WAIT_BOUNDS_MS`).
    pub wait_bounds_ms: Vec<f64>,
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
        wait_bounds_ms: WAIT_BOUNDS_MS.iter().map(|&ms| ms as f64).collect(),
    }
}

// ---------------------------------------------------------------- shared pacers

/// A failed shared-pacer call as `CODE: text`: the C status name
/// (`SHARED_CONFIG_MISMATCH`, …) and `pacer_status_str`'s text, with the
/// system's error for `SHARED_OS`.
fn shared_error(status: pacer_status) -> Error {
    Error::new(Status::GenericFailure, shared_error_text(status))
}

/// The message of [`shared_error`].
fn shared_error_text(status: pacer_status) -> String {
    // Read first: errno is what `SharedOs` leaves.
    let os = std::io::Error::last_os_error();
    let mut code = String::new();
    for (i, c) in format!("{status:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            code.push('_');
        }
        code.push(c.to_ascii_uppercase());
    }
    // SAFETY: pacer_status_str returns a static NUL-terminated string.
    let text = unsafe { CStr::from_ptr(pacer_status_str(status as u32)) }.to_string_lossy();
    match status {
        pacer_status::SharedOs => format!("{code}: {text} ({os})"),
        _ => format!("{code}: {text}"),
    }
}

/// A pacer whose state word lives in a shared-memory file, so every process
/// on the machine that opens the same name paces against one bucket: the C
/// library's shared pacer (`ffi/src/shm.rs`, docs/shared-memory.md). The
/// calls take no clock: they read CLOCK_MONOTONIC, the clock every process
/// on the machine shares.
#[napi]
pub struct NativeSharedPacer {
    core: Rc<SharedCore>,
}

/// The mapping (none once closed) and the bucket's counts as they were
/// when it closed: shared by a `NativeSharedPacer` and the table slots of
/// its handles (only ever used on its env's JS thread). The counts live in
/// the file (`SharedPacer::counters`), where every handle and process that
/// opened the bucket counts.
struct SharedCore {
    shared: RefCell<Option<SharedPacer>>,
    counts_at_close: Cell<CounterSnapshot>,
}

impl SharedCore {
    /// `f` on the pacer and the bucket's counters, or `SharedNotOpen` once
    /// closed.
    fn with_pacer<R>(
        &self,
        f: impl FnOnce(&Pacer, &Counters) -> R,
    ) -> std::result::Result<R, pacer_status> {
        match &*self.shared.borrow() {
            Some(shared) => Ok(f(shared.pacer(), shared.counters())),
            None => Err(pacer_status::SharedNotOpen),
        }
    }

    /// `f` on the pacer and the bucket's counters at the shared clock, read
    /// once, and that reading; `SHARED_NOT_OPEN: …` once closed.
    fn at_clock<R>(&self, f: impl FnOnce(&Pacer, &Counters, u64) -> R) -> Result<(R, u64)> {
        self.with_pacer(|pacer, counters| {
            let now_ms = shm::clock_ms();
            (f(pacer, counters, now_ms), now_ms)
        })
        .map_err(shared_error)
    }

    /// `Pacer::reserve` at the shared clock, counted in the bucket's
    /// counters and encoded by [`encode`].
    fn reserve(&self) -> std::result::Result<f64, pacer_status> {
        self.with_pacer(|pacer, counters| {
            let decision = pacer.reserve(shm::clock_ms());
            counters.record(&decision);
            encode(decision)
        })
    }
}

/// `reserveSharedHot(handle)`: [`SharedCore::reserve`] of the shared pacer
/// whose handle ([`NativeSharedPacer::handle`]) is given, the code written
/// to `exchange[1]`; after `close` it throws `SHARED_NOT_OPEN: …` as the
/// class method does.
unsafe extern "C" fn reserve_shared_hot(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node-API calls this with its env and info; `init` made this
    // function over the env's `Table<SharedCore>`.
    unsafe {
        hot::call::<SharedCore>(env, info, false, |core, _| {
            core.reserve().map_err(shared_error_text)
        })
    }
}

#[napi]
impl NativeSharedPacer {
    /// Opens (or creates) the shared pacer; fails with `CODE: text`, the
    /// code being the C library's status name (`SHARED_CONFIG_MISMATCH`, …).
    #[napi(factory)]
    pub fn open(path_or_name: String, config: &NativeConfig) -> Result<Self> {
        let config = config.config;
        if let Err(error) = Pacer::new(&config, 0) {
            return Err(Error::new(Status::InvalidArg, config_error_text(error)));
        }
        match SharedPacer::open(&path_or_name, &config) {
            Ok(shared) => Ok(NativeSharedPacer {
                core: Rc::new(SharedCore {
                    shared: RefCell::new(Some(shared)),
                    counts_at_close: Cell::new(CounterSnapshot::default()),
                }),
            }),
            Err(status) => Err(shared_error(status)),
        }
    }

    /// `Pacer::reserve` at the shared clock, encoded by [`encode`]. Any
    /// argument is ignored: a shared pacer never takes a caller's clock.
    #[napi]
    pub fn reserve(&self) -> Result<f64> {
        self.core.reserve().map_err(shared_error)
    }

    /// This pacer's handle for `reserveSharedHot(handle)`, which does what
    /// [`Self::reserve`] does at a fraction of the cost (`src/hot.rs`).
    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        hot::handle(env, &tables()?.shared, Rc::clone(&self.core))
    }

    /// `Pacer::reserve_or_book` at the shared clock (what
    /// `pacer_shared_reserve_or_book` does), counted, as [`booking_result`].
    /// The first argument stands where `NativePacer::reserve_or_book` takes
    /// its clock and is ignored: a shared pacer never takes a caller's clock.
    #[napi]
    pub fn reserve_or_book(&self, _now_ms: f64, retries_left: f64) -> Result<Vec<f64>> {
        let (decision, now_ms) = self.core.at_clock(|pacer, counters, now_ms| {
            let decision = pacer.reserve_or_book(now_ms, to_u32(retries_left));
            counters.record_booking(&decision);
            decision
        })?;
        Ok(booking_result(decision, now_ms))
    }

    /// `Pacer::redeem` of the booking `(seq, slot_ms)` at the shared clock
    /// (what `pacer_shared_redeem` does), counted, as
    /// [`redemption_result`] (a third argument is ignored). Changes nothing
    /// in the bucket.
    #[napi]
    pub fn redeem(&self, seq: f64, slot_ms: f64) -> Result<Vec<f64>> {
        let (redemption, now_ms) = self.core.at_clock(|pacer, counters, now_ms| {
            let redemption = pacer.redeem(booking_of(seq, slot_ms), now_ms);
            counters.record_redemption(&redemption);
            redemption
        })?;
        Ok(redemption_result(redemption, now_ms))
    }

    /// `Pacer::release` of `(seq, debit_units)` at the shared clock (a third
    /// argument is ignored).
    #[napi]
    pub fn release(&self, seq: f64, debit_units: f64) -> Result<bool> {
        let ticket = Ticket::from_raw(to_u32(seq), to_u32(debit_units));
        self.core
            .with_pacer(|pacer, counters| {
                let refunded = pacer.release(ticket, shm::clock_ms());
                counters.record_release(refunded);
                refunded
            })
            .map_err(shared_error)
    }

    /// `Pacer::observe` (SPEC §14) at the shared clock, as
    /// `NativePacer::observe` (a second argument is ignored): the control
    /// word it moves is the machine's, and the outcome is counted in the
    /// bucket's counters.
    #[napi]
    pub fn observe(&self, outcome: u32) -> Result<u32> {
        let outcome = outcome_of(outcome)?;
        self.core
            .with_pacer(|pacer, counters| {
                let rate = pacer.observe(outcome, shm::clock_ms());
                counters.record_outcome(outcome);
                rate
            })
            .map_err(shared_error)
    }

    /// `Pacer::rate_in_force` at the shared clock (an argument is ignored).
    #[napi]
    pub fn rate_in_force(&self) -> Result<u32> {
        self.core
            .with_pacer(|pacer, _| pacer.rate_in_force(shm::clock_ms()))
            .map_err(shared_error)
    }

    /// `Pacer::level_at` at the shared clock (an argument is ignored): the
    /// bucket's tokens now, in units. Reads only.
    #[napi]
    pub fn level_at(&self) -> Result<f64> {
        self.core
            .with_pacer(|pacer, _| pacer.level_at(shm::clock_ms()) as f64)
            .map_err(shared_error)
    }

    /// `[mode, wait_bound_ms, capacity_units, max_debt_units, strict]`.
    #[napi]
    pub fn info(&self) -> Result<Vec<f64>> {
        self.core
            .with_pacer(|pacer, _| info_of(pacer))
            .map_err(shared_error)
    }

    /// `[high_water_ms, tokens_units, seq]` of the machine-wide state.
    #[napi]
    pub fn state(&self) -> Result<Vec<f64>> {
        self.core
            .with_pacer(|pacer, _| state_of(pacer))
            .map_err(shared_error)
    }

    /// The bucket's counts (every handle and process that opened it counts
    /// there), as `NativePacer::counters`; once closed, the counts read at
    /// `close`.
    #[napi]
    pub fn counters(&self) -> Vec<f64> {
        let counts = self
            .core
            .with_pacer(|_, counters| counters.snapshot())
            .unwrap_or_else(|_| self.core.counts_at_close.get());
        counters_of(&counts)
    }

    /// Unmaps this process's view (the file stays), keeping the bucket's
    /// counts as they are now for `counters`; the hot `reserve` functions
    /// made for it throw from then on. Idempotent.
    #[napi]
    pub fn close(&self) {
        if let Some(shared) = self.core.shared.borrow_mut().take() {
            self.core.counts_at_close.set(shared.counters().snapshot());
        }
    }
}

/// The machine-wide clock shared pacers read: CLOCK_MONOTONIC, whole ms.
#[napi]
pub fn shared_clock_ms() -> f64 {
    shm::clock_ms() as f64
}

/// Removes a shared pacer's name; `SHARED_NOT_FOUND: …` if there is none.
#[napi]
pub fn unlink_shared(path_or_name: String) -> Result<()> {
    shm::unlink(&path_or_name).map_err(shared_error)
}

/// Adds the hot calls to the exports, over this env's pacer tables and
/// exchange: `reserveHot(handle)`, `reserveSharedHot(handle)`, `exchange`
/// (the `Float64Array` they read the clock from and write the code to), and
/// `floorNoop()`, an empty call made the same way: the crossing floor the
/// benchmarks (bench/node) compare them with.
#[napi(module_exports)]
pub fn init(mut exports: Object, env: Env) -> Result<()> {
    let (exchange, exchange_array) = hot::Exchange::new(&env)?;
    let tables = Tables {
        pacers: Rc::new(Table::new(0, exchange)),
        shared: Rc::new(Table::new(1, exchange)),
    };
    TABLES.with(|slot| *slot.borrow_mut() = Some(tables.clone()));
    let functions = [
        ("exchange", exchange_array),
        (
            "reserveHot",
            hot::table_function(&env, "reserveHot", reserve_hot, tables.pacers)?,
        ),
        (
            "reserveSharedHot",
            hot::table_function(&env, "reserveSharedHot", reserve_shared_hot, tables.shared)?,
        ),
        (
            "floorNoop",
            hot::table_function(&env, "floorNoop", hot::noop, Rc::new(()))?,
        ),
    ];
    for (name, function) in functions {
        // SAFETY: `function` is a live value of this env.
        let function = unsafe { Unknown::from_raw_unchecked(env.raw(), function) };
        exports.set_named_property(name, function)?;
    }
    Ok(())
}
