//! `pacer_budget`, `pacer_notice`, `pacer_notice_registry`: resolving the
//! settings strings, and rendering and deduplicating their notices.

use core::ffi::{c_char, CStr};
use core::mem::{align_of, size_of};
use std::borrow::Cow;

use pacer_core::budget::Budget;
use pacer_core::settings::{mode_notice, resolve, Settings, MAX_NOTICES};
use pacer_core::{Notice, NoticeKind, NoticeRegistry, Pacer};

use crate::boundary::{arg, arg_mut, buffer, guard, guard_value, out, put, render_into};
use crate::pacer::{config_error, config_from, pacer_config};
use crate::status::pacer_status;

/// Most notices one resolution produces.
pub const PACER_MAX_NOTICES: usize = 6;
const _: () = assert!(PACER_MAX_NOTICES == MAX_NOTICES);

/// A resolved budget and its derived quantities.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_budget {
    /// New connections per minute (0 = off).
    pub rate_per_min: u32,
    /// Client retry count.
    pub max_retries: u32,
    /// No-data deadline per request, ms.
    pub idle_timeout_ms: u64,
    /// Total deadline per request, ms.
    pub total_timeout_ms: u64,
    /// Longest wait a paced request is granted, ms.
    pub wait_bound_ms: u64,
    /// Largest retry-after hint, s.
    pub hint_cap_s: u64,
    /// How long refusals keep a request retrying, ms.
    pub refusal_schedule_ms: u64,
    /// Refusals can outlast the wait for a slot.
    pub can_refuse: bool,
    /// Pacing is on.
    pub enabled: bool,
}

/// Values of pacer_notice.kind (numbers shared with the Rust core).
#[repr(u32)]
pub enum pacer_notice_kind {
    /// Rate text malformed. values: [rate used].
    RateMalformed = 1,
    /// Rate above 600. values: [rate used].
    RateClamped = 2,
    /// Idle timeout text malformed. values: [idle used].
    IdleMalformed = 3,
    /// Idle timeout out of range. values: [idle used].
    IdleClamped = 4,
    /// Total timeout text malformed. values: [total used].
    TotalMalformed = 5,
    /// Total timeout out of range. values: [total used].
    TotalClamped = 6,
    /// Retry count malformed. values: [retries used].
    RetriesMalformed = 7,
    /// Retry count above the ladder ceiling. values: [retries used, idle].
    RetriesClamped = 8,
    /// Idle lowered to the total. values: [idle before, total].
    IdleLowered = 9,
    /// Total raised to the idle. values: [total before, idle].
    TotalRaised = 10,
    /// Pacing switched itself off. values: [retries, idle, rate].
    PacingDisabled = 11,
    /// Pacing cannot refuse; overflow is shaped. values: [rate, retries, bound].
    NoRefuse = 12,
}

/// One notice. `raw` points into the settings string the caller passed to
/// pacer_resolve (valid as long as that string is); `raw_len` bytes, not
/// NUL-terminated; NULL with length 0 when the notice has no text.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_notice {
    /// A pacer_notice_kind value.
    pub kind: u32,
    /// Zero.
    pub reserved: u32,
    /// The numbers, per kind.
    pub values: [u64; 3],
    /// The offending setting text, or NULL.
    pub raw: *const c_char,
    /// Length of `raw` in bytes.
    pub raw_len: usize,
}

/// The notices of one resolution, in order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_notices {
    /// How many of `items` are set.
    pub count: usize,
    /// The notices.
    pub items: [pacer_notice; PACER_MAX_NOTICES],
}

fn kind_from(number: u32) -> Result<NoticeKind, pacer_status> {
    NoticeKind::ALL
        .iter()
        .copied()
        .find(|kind| *kind as u32 == number)
        .ok_or(pacer_status::InvalidEnum)
}

const EMPTY_NOTICE: pacer_notice = pacer_notice {
    kind: 0,
    reserved: 0,
    values: [0; 3],
    raw: core::ptr::null(),
    raw_len: 0,
};

/// One setting as given: its bytes, and the text the core reads. Text that
/// is not UTF-8 is read as a lossy copy: U+FFFD is not a digit, so the
/// setting is malformed (default and a notice) and never an error.
struct SettingText<'a> {
    bytes: &'a [u8],
    text: Cow<'a, str>,
}

/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for `'a`.
unsafe fn setting_text<'a>(ptr: *const c_char) -> Option<SettingText<'a>> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    Some(SettingText {
        bytes,
        text: String::from_utf8_lossy(bytes),
    })
}

/// Resolves the four settings strings (each NULL = unset) into a budget.
/// Bad values never fail, whatever their bytes (not UTF-8 included): they
/// are defaulted or clamped and reported in `out_notices` (optional: NULL
/// to ignore notices). A notice's `raw` points to the caller's string.
#[no_mangle]
pub unsafe extern "C" fn pacer_resolve(
    rate_per_min: *const c_char,
    idle_timeout_ms: *const c_char,
    total_timeout_ms: *const c_char,
    max_retries: *const c_char,
    out_budget: *mut pacer_budget,
    out_notices: *mut pacer_notices,
) -> pacer_status {
    guard(|| {
        // SAFETY: each is NULL or a NUL-terminated string (caller's contract).
        let given = unsafe {
            [
                setting_text(rate_per_min),
                setting_text(idle_timeout_ms),
                setting_text(total_timeout_ms),
                setting_text(max_retries),
            ]
        };
        let out_budget = out(out_budget)?;
        if !out_notices.is_null() {
            out(out_notices)?;
        }
        let text = |i: usize| given[i].as_ref().map(|s| &*s.text);
        let settings = Settings {
            rate_per_min: text(0),
            idle_timeout_ms: text(1),
            total_timeout_ms: text(2),
            max_retries: text(3),
        };
        let resolution = resolve(&settings);
        let b = resolution.budget;
        let budget = pacer_budget {
            rate_per_min: b.rate_per_min,
            max_retries: b.max_retries,
            idle_timeout_ms: b.idle_timeout_ms,
            total_timeout_ms: b.total_timeout_ms,
            wait_bound_ms: b.wait_bound_ms(),
            hint_cap_s: b.hint_cap_s(),
            refusal_schedule_ms: b.refusal_schedule_ms(),
            can_refuse: b.can_refuse(),
            enabled: b.pacing_enabled(),
        };
        let mut notices = pacer_notices {
            count: 0,
            items: [EMPTY_NOTICE; PACER_MAX_NOTICES],
        };
        for (item, notice) in notices.items.iter_mut().zip(resolution.notices.iter()) {
            *item = c_notice(notice);
            // A text notice points to the caller's own bytes, not the
            // lossy copy this call is about to drop.
            if let Some(given) = setting_of(notice.kind).and_then(|i| given[i].as_ref()) {
                item.raw = given.bytes.as_ptr().cast();
                item.raw_len = given.bytes.len();
            }
            notices.count += 1;
        }
        // SAFETY: checked by `out`.
        unsafe { put(out_budget, budget) };
        if !out_notices.is_null() {
            // SAFETY: checked by `out` above.
            unsafe { put(out_notices, notices) };
        }
        Ok(())
    })
}

/// Which of pacer_resolve's four settings a text notice quotes.
fn setting_of(kind: NoticeKind) -> Option<usize> {
    match kind {
        NoticeKind::RateMalformed | NoticeKind::RateClamped => Some(0),
        NoticeKind::IdleMalformed | NoticeKind::IdleClamped => Some(1),
        NoticeKind::TotalMalformed | NoticeKind::TotalClamped => Some(2),
        NoticeKind::RetriesMalformed | NoticeKind::RetriesClamped => Some(3),
        _ => None,
    }
}

/// A core notice in its C form (`raw` borrows the notice's text).
fn c_notice(notice: &Notice<'_>) -> pacer_notice {
    pacer_notice {
        kind: notice.kind as u32,
        reserved: 0,
        values: notice.values,
        raw: if notice.raw.is_empty() {
            core::ptr::null()
        } else {
            notice.raw.as_ptr().cast()
        },
        raw_len: notice.raw.len(),
    }
}

/// A C notice's kind and text; text that is not UTF-8 (a setting
/// pacer_resolve read as malformed) as a lossy copy.
///
/// # Safety
/// `notice.raw` is NULL or points to `raw_len` readable bytes for `'a`.
unsafe fn notice_parts<'a>(
    notice: &pacer_notice,
) -> Result<(NoticeKind, Cow<'a, str>), pacer_status> {
    let kind = kind_from(notice.kind)?;
    let raw = if notice.raw_len == 0 {
        Cow::Borrowed("")
    } else if notice.raw.is_null() {
        return Err(pacer_status::NullParameter);
    } else {
        // SAFETY: non-NULL with raw_len readable bytes (caller's contract).
        let bytes = unsafe { core::slice::from_raw_parts(notice.raw.cast::<u8>(), notice.raw_len) };
        String::from_utf8_lossy(bytes)
    };
    Ok((kind, raw))
}

/// pacer_notice_render and pacer_notice_key: `text` of the notice, written
/// into the caller's buffer by the buffer rules stated there.
///
/// # Safety
/// `notice` is NULL, misaligned, or points to a `pacer_notice` (and
/// `notice_parts`' contract); `buf` holds `len` writable bytes.
unsafe fn write_notice_text(
    notice: *const pacer_notice,
    buf: *mut u8,
    len: usize,
    out_written: *mut usize,
    text: impl Fn(&Notice<'_>, &mut [u8]) -> Result<usize, usize>,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg`.
        let notice = unsafe { arg(notice) }?;
        // SAFETY: caller's contract (raw/raw_len).
        let (kind, raw) = unsafe { notice_parts(notice) }?;
        let notice = Notice::new(kind, &raw, notice.values);
        let out_written = out(out_written)?;
        // SAFETY: `buf` holds `len` writable bytes (caller's contract).
        let buf = unsafe { buffer(buf, len) }?;
        let (status, written) = match render_into(buf, |b| text(&notice, b)) {
            Ok(n) => (Ok(()), n),
            Err((status, needed)) => (Err(status), needed),
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_written, written) };
        status
    })
}

/// Writes a notice's English text (UTF-8, not NUL-terminated) into
/// `buf[0..len]` and its length to *out_written. If it does not fit:
/// PACER_STATUS_BUFFER_TOO_SHORT, *out_written = the needed length, buf
/// untouched. `buf` may be NULL when `len` is 0 (to measure).
#[no_mangle]
pub unsafe extern "C" fn pacer_notice_render(
    notice: *const pacer_notice,
    buf: *mut u8,
    len: usize,
    out_written: *mut usize,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe { write_notice_text(notice, buf, len, out_written, |n, b| n.render(b)) }
}

/// Writes a notice's dedupe key as text (UTF-8, not NUL-terminated):
/// `<namespace>:<raw>` for the setting-text kinds (`rate: 9x`),
/// `<namespace>:<a>:<b>:<c>` for the others (`disabled:3:14001:60`). Equal
/// keys are the same notice for pacer_notice_registry_first_time; a binding
/// that deduplicates in its own map uses this text. Buffer rules as
/// pacer_notice_render.
#[no_mangle]
pub unsafe extern "C" fn pacer_notice_key(
    notice: *const pacer_notice,
    buf: *mut u8,
    len: usize,
    out_written: *mut usize,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe { write_notice_text(notice, buf, len, out_written, |n, b| n.write_key(b)) }
}

/// A static, NUL-terminated name of a notice kind, as in tests/vectors
/// (`rate_malformed`, …, `norefuse`); NULL for an unknown kind. Never free it.
#[no_mangle]
pub extern "C" fn pacer_notice_kind_name(kind: u32) -> *const c_char {
    guard_value(core::ptr::null(), || match kind_from(kind) {
        Ok(kind) => kind_c_name(kind).as_ptr(),
        Err(_) => core::ptr::null(),
    })
}

fn kind_c_name(kind: NoticeKind) -> &'static core::ffi::CStr {
    match kind {
        NoticeKind::RateMalformed => c"rate_malformed",
        NoticeKind::RateClamped => c"rate_clamped",
        NoticeKind::IdleMalformed => c"idle_malformed",
        NoticeKind::IdleClamped => c"idle_clamped",
        NoticeKind::TotalMalformed => c"total_malformed",
        NoticeKind::TotalClamped => c"total_clamped",
        NoticeKind::RetriesMalformed => c"retries_malformed",
        NoticeKind::RetriesClamped => c"retries_clamped",
        NoticeKind::IdleLowered => c"idle_lowered",
        NoticeKind::TotalRaised => c"total_raised",
        NoticeKind::PacingDisabled => c"pacing_disabled",
        NoticeKind::NoRefuse => c"norefuse",
    }
}

/// The notice a pacer built from `config` calls for, the one pacer_resolve
/// ends with when it resolves these numbers from settings text:
/// `pacing_disabled` (a positive rate with no room to wait) or `norefuse`
/// (pacing on with retries, but refusals cannot outlast the wait for a
/// slot). *out_present = false when the mode needs none (out_notice is then
/// left untouched). An invalid config returns the status pacer_init would.
#[no_mangle]
pub unsafe extern "C" fn pacer_mode_notice(
    config: *const pacer_config,
    out_notice: *mut pacer_notice,
    out_present: *mut bool,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg`.
        let config = config_from(unsafe { arg(config) }?)?;
        let out_notice = out(out_notice)?;
        let out_present = out(out_present)?;
        Pacer::new(&config, 0).map_err(config_error)?;
        let budget = Budget {
            rate_per_min: config.rate_per_min,
            idle_timeout_ms: config.idle_timeout_ms,
            total_timeout_ms: config.idle_timeout_ms,
            max_retries: config.max_retries,
        };
        let notice = mode_notice(&budget);
        if let Some(notice) = &notice {
            // SAFETY: checked by `out`.
            unsafe { put(out_notice, c_notice(notice)) };
        }
        // SAFETY: checked by `out`.
        unsafe { put(out_present, notice.is_some()) };
        Ok(())
    })
}

/// Bytes of storage a notice registry needs.
pub const PACER_NOTICE_REGISTRY_SIZE: usize = 2048;
/// Alignment the registry storage needs.
pub const PACER_NOTICE_REGISTRY_ALIGN: usize = 8;
/// How many distinct keys a registry remembers. Past that, a notice whose
/// key is not remembered reports first = true every time (it is shown
/// again rather than lost).
pub const PACER_NOTICE_REGISTRY_KEYS: usize = 32;

/// Remembers which notices were shown, so each shows once per key (up to
/// PACER_NOTICE_REGISTRY_KEYS keys). Caller storage; initialise with
/// pacer_notice_registry_init. Not thread-safe: serialise calls on one
/// registry.
#[repr(C, align(8))]
pub struct pacer_notice_registry {
    opaque: [u8; PACER_NOTICE_REGISTRY_SIZE],
}

/// What lives in the storage once initialised.
#[repr(C)]
struct RegistrySlot {
    magic: u64,
    registry: NoticeRegistry<PACER_NOTICE_REGISTRY_KEYS>,
}

const REGISTRY_MAGIC: u64 = u64::from_le_bytes(*b"pnotice\x01");
const _: () = assert!(size_of::<RegistrySlot>() <= PACER_NOTICE_REGISTRY_SIZE);
const _: () = assert!(align_of::<RegistrySlot>() <= PACER_NOTICE_REGISTRY_ALIGN);
const _: () = assert!(align_of::<pacer_notice_registry>() == PACER_NOTICE_REGISTRY_ALIGN);

/// Empties `registry`.
#[no_mangle]
pub unsafe extern "C" fn pacer_notice_registry_init(
    registry: *mut pacer_notice_registry,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg_mut`.
        let registry = unsafe { arg_mut(registry) }?;
        let slot = RegistrySlot {
            magic: REGISTRY_MAGIC,
            registry: NoticeRegistry::new(),
        };
        // SAFETY: size and alignment asserted above; exclusively borrowed.
        unsafe {
            registry
                .opaque
                .as_mut_ptr()
                .cast::<RegistrySlot>()
                .write(slot)
        };
        Ok(())
    })
}

/// *out_first = true the first time a notice's key is seen by `registry`
/// (show it), false afterwards. Keys are namespaced by kind. A registry
/// that pacer_notice_registry_init never initialised returns
/// PACER_STATUS_NOT_INITIALIZED.
#[no_mangle]
pub unsafe extern "C" fn pacer_notice_registry_first_time(
    registry: *mut pacer_notice_registry,
    notice: *const pacer_notice,
    out_first: *mut bool,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg_mut`.
        let registry = unsafe { arg_mut(registry) }?;
        // SAFETY: caller's contract; NULL checked by `arg`.
        let notice = unsafe { arg(notice) }?;
        // SAFETY: caller's contract (raw/raw_len).
        let (kind, raw) = unsafe { notice_parts(notice) }?;
        let notice = Notice::new(kind, &raw, notice.values);
        let out_first = out(out_first)?;
        // SAFETY: size and alignment asserted above; any bit pattern is a
        // valid u64.
        let magic = unsafe { registry.opaque.as_ptr().cast::<u64>().read() };
        if magic != REGISTRY_MAGIC {
            return Err(pacer_status::NotInitialized);
        }
        // SAFETY: the magic is written only by pacer_notice_registry_init,
        // with a whole RegistrySlot; size and alignment asserted above.
        let slot = unsafe { &mut *registry.opaque.as_mut_ptr().cast::<RegistrySlot>() };
        let first = slot.registry.first_time(&notice);
        // SAFETY: checked by `out`.
        unsafe { put(out_first, first) };
        Ok(())
    })
}
