//! `struct pacer`: a pacer in caller-provided storage, and its calls.

use core::mem::{align_of, size_of};

use pacer_core::{
    Admission, AdmitPath, Booking, BookingDecision, Config, ConfigError, Counters, Decision, Mode,
    Pacer, Redemption, ReleasePolicy, Ticket,
};

use crate::boundary::{arg, arg_mut, guard, out, put};
use crate::status::pacer_status;

/// Bytes of storage a pacer needs (struct pacer).
pub const PACER_STORAGE_SIZE: usize = 256;
/// Alignment the storage needs.
pub const PACER_STORAGE_ALIGN: usize = 16;
/// Largest accepted burst.
pub const PACER_MAX_BURST: u32 = 1_000_000;
const _: () = assert!(PACER_MAX_BURST == pacer_core::MAX_BURST);
/// Highest accepted rate (new connections per minute).
pub const PACER_MAX_RATE_PER_MIN: u32 = 600;
const _: () = assert!(PACER_MAX_RATE_PER_MIN == pacer_core::budget::MAX_RATE_PER_MIN);

/// Storage for one pacer. Allocate it anywhere (static, stack, heap,
/// shared memory), zeroed or not, then call pacer_init. Never copy it while
/// other threads use it. It holds no resources: there is nothing to free.
#[repr(C, align(16))]
pub struct pacer {
    opaque: [u8; PACER_STORAGE_SIZE],
}

/// What lives in the storage once initialised.
#[repr(C)]
pub(crate) struct Slot {
    magic: u64,
    counters: Counters,
    pub(crate) pacer: Pacer,
}

const MAGIC: u64 = u64::from_le_bytes(*b"pacer\x00\x01\x00");

const _: () = assert!(size_of::<Slot>() <= PACER_STORAGE_SIZE);
const _: () = assert!(align_of::<Slot>() <= PACER_STORAGE_ALIGN);
const _: () = assert!(size_of::<pacer>() == PACER_STORAGE_SIZE);
const _: () = assert!(align_of::<pacer>() == PACER_STORAGE_ALIGN);

/// Release policies (values of pacer_config.release_policy).
#[repr(u32)]
pub enum pacer_release_policy {
    /// Always refund, capped at capacity (the default).
    Refund = 0,
    /// Refund only while every later debit has itself been refunded.
    Strict = 1,
}

/// A pacer's parameters.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_config {
    /// New connections per minute, 0..=600 (0 = pacing off).
    pub rate_per_min: u32,
    /// Connections admitted with no wait after idle; 0 means 1.
    pub burst: u32,
    /// The request's no-data deadline in ms; sizes the wait bound.
    pub idle_timeout_ms: u64,
    /// The client's retry count (at most the ladder ceiling of the deadline).
    pub max_retries: u32,
    /// A pacer_release_policy value.
    pub release_policy: u32,
}

/// Values of pacer_decision.kind.
#[repr(u32)]
pub enum pacer_decision_kind {
    /// Open the connection after wait_ms.
    Admitted = 1,
    /// Do not open; answer with a retryable rate limit (retry_after_s).
    Refused = 2,
    /// Do not open yet; answer with a retryable rate limit (retry_after_s)
    /// and keep the booking pacer_reserve_or_book wrote for the retry.
    Booked = 3,
}

/// Values of pacer_decision.path (which rule admitted).
#[repr(u32)]
pub enum pacer_admit_path {
    /// Not admitted (a refusal).
    None = 0,
    /// Pacing is off.
    Disabled = 1,
    /// A whole token, now or after a wait within the bound.
    Paced = 2,
    /// Shaped overflow: debited down to the floor, waits the bound.
    Shaped = 3,
    /// Overflow past the floor in a shaping mode: at once, nothing debited.
    Overflow = 4,
    /// A redeemed booking (SPEC §11); reserved for the booking calls.
    Booked = 5,
}

/// Values of pacer_ticket.state.
#[repr(u32)]
pub enum pacer_ticket_state {
    /// No ticket (nothing was debited); releasing it reports false.
    None = 0,
    /// Releasable once.
    Live = 1,
    /// Already released; releasing again reports false.
    Spent = 2,
}

/// The right to refund one admission. pacer_release marks it spent.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_ticket {
    /// Position in the pacer's release stack.
    pub seq: u32,
    /// Debit to refund, in units (60000 = one token).
    pub debit_units: u32,
    /// A pacer_ticket_state value.
    pub state: u32,
    /// Zero.
    pub reserved: u32,
}

/// The answer to pacer_reserve.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_decision {
    /// A pacer_decision_kind value.
    pub kind: u32,
    /// A pacer_admit_path value (PACER_ADMIT_PATH_NONE for a refusal).
    pub path: u32,
    /// Admitted: wait this long before opening, ms.
    pub wait_ms: u64,
    /// Refused: the wait the rate would need, ms (diagnostics).
    pub required_wait_ms: u64,
    /// Refused: the hint the client is asked to honour, seconds.
    pub retry_after_s: u64,
    /// Admitted with wait_ms > 0.
    pub queued: bool,
    /// now_ms was behind the latest reading and was treated as it.
    pub clock_regressed: bool,
    /// The refund right (state PACER_TICKET_STATE_NONE if nothing debited).
    pub ticket: pacer_ticket,
}

/// Values of pacer_info.mode.
#[repr(u32)]
pub enum pacer_mode {
    /// Rate 0 or no room to wait: everything admitted at once.
    Disabled = 0,
    /// Overflow refused with a hint.
    Refusing = 1,
    /// Retries cannot outlast a slot wait at this rate: overflow shaped.
    ShapingLowRate = 2,
    /// No retries: overflow shaped.
    ShapingNoRetry = 3,
}

/// A pacer's derived parameters and current state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_info {
    /// A pacer_mode value.
    pub mode: u32,
    /// A pacer_release_policy value.
    pub release_policy: u32,
    /// Longest wait granted, ms.
    pub wait_bound_ms: u64,
    /// Capacity (burst) in units.
    pub capacity_units: i64,
    /// Debt floor in units.
    pub max_debt_units: i64,
    /// Latest clock reading that changed the state, ms.
    pub high_water_ms: u64,
    /// Tokens at high_water_ms, in units (may be negative).
    pub tokens_units: i64,
}

/// Decision counters.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_counters {
    /// Admissions by any path.
    pub admitted: u64,
    /// Admissions with a wait.
    pub admitted_after_wait: u64,
    /// Refusals.
    pub refused: u64,
    /// Admissions by the shaping rule.
    pub shaped: u64,
    /// Release calls on a live ticket.
    pub released: u64,
    /// Releases refunded.
    pub refunded: u64,
    /// Calls whose clock was behind the latest reading.
    pub clock_regressions: u64,
}

/// The C form of a core `Config`, for Rust callers of the C calls.
impl From<&Config> for pacer_config {
    fn from(config: &Config) -> Self {
        pacer_config {
            rate_per_min: config.rate_per_min,
            burst: config.burst,
            idle_timeout_ms: config.idle_timeout_ms,
            max_retries: config.max_retries,
            release_policy: match config.release_policy {
                ReleasePolicy::Refund => pacer_release_policy::Refund as u32,
                ReleasePolicy::Strict => pacer_release_policy::Strict as u32,
            },
        }
    }
}

pub(crate) fn config_from(config: &pacer_config) -> Result<Config, pacer_status> {
    let release_policy = match config.release_policy {
        0 => ReleasePolicy::Refund,
        1 => ReleasePolicy::Strict,
        _ => return Err(pacer_status::InvalidEnum),
    };
    Ok(Config {
        rate_per_min: config.rate_per_min,
        burst: config.burst,
        idle_timeout_ms: config.idle_timeout_ms,
        max_retries: config.max_retries,
        release_policy,
    })
}

pub(crate) fn config_error(error: ConfigError) -> pacer_status {
    match error {
        ConfigError::RateTooHigh => pacer_status::RateTooHigh,
        ConfigError::BurstTooLarge => pacer_status::BurstTooLarge,
        ConfigError::RetriesExceedLadder => pacer_status::RetriesExceedLadder,
    }
}

/// The initialised slot in `storage`.
///
/// # Safety
/// `storage` is NULL or points to a `struct pacer` valid for `'a`.
pub(crate) unsafe fn slot<'a>(storage: *const pacer) -> Result<&'a Slot, pacer_status> {
    // SAFETY: caller's contract; NULL checked by `arg`.
    let storage = unsafe { arg(storage) }?;
    let base = storage.opaque.as_ptr();
    // SAFETY: the storage is 16-aligned and at least 8 bytes; any bit
    // pattern is a valid u64.
    let magic = unsafe { base.cast::<u64>().read() };
    if magic != MAGIC {
        return Err(pacer_status::NotInitialized);
    }
    // SAFETY: the magic is written only by pacer_init, right after a whole
    // Slot; size and alignment are asserted above.
    Ok(unsafe { &*base.cast::<Slot>() })
}

/// Initialises `storage` as a pacer with `config`, full (burst tokens
/// available) at `now_ms`. An invalid config returns its status and leaves
/// the storage as it was. Do not call it while other threads use `storage`.
#[no_mangle]
pub unsafe extern "C" fn pacer_init(
    storage: *mut pacer,
    config: *const pacer_config,
    now_ms: u64,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg`/`arg_mut`.
        let config = unsafe { arg(config) }?;
        // SAFETY: as above.
        let storage = unsafe { arg_mut(storage) }?;
        let config = config_from(config)?;
        let pacer = Pacer::new(&config, now_ms).map_err(config_error)?;
        let slot = Slot {
            magic: MAGIC,
            counters: Counters::new(),
            pacer,
        };
        // SAFETY: the storage is large and aligned enough for a Slot (const
        // asserts above) and exclusively borrowed.
        unsafe { storage.opaque.as_mut_ptr().cast::<Slot>().write(slot) };
        Ok(())
    })
}

/// Asks to open one new connection at `now_ms` (the caller's monotonic
/// clock, ms). Thread-safe and lock-free.
#[no_mangle]
pub unsafe extern "C" fn pacer_reserve(
    storage: *const pacer,
    now_ms: u64,
    out_decision: *mut pacer_decision,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        let out_decision = out(out_decision)?;
        let decision = slot.pacer.reserve(now_ms);
        slot.counters.record(&decision);
        let result = match decision {
            Decision::Admitted(admission) => admitted(admission),
            Decision::Refused(refusal) => refused(
                pacer_decision_kind::Refused,
                refusal.required_wait_ms,
                refusal.retry_after_s,
                refusal.clock_regressed,
            ),
        };
        // SAFETY: checked by `out`; the caller provides a writable decision.
        unsafe { put(out_decision, result) };
        Ok(())
    })
}

fn live_ticket(ticket: Ticket) -> pacer_ticket {
    let (seq, debit_units) = ticket.into_raw();
    pacer_ticket {
        seq,
        debit_units,
        state: pacer_ticket_state::Live as u32,
        reserved: 0,
    }
}

fn admitted(admission: Admission) -> pacer_decision {
    pacer_decision {
        kind: pacer_decision_kind::Admitted as u32,
        path: match admission.path {
            AdmitPath::Disabled => pacer_admit_path::Disabled,
            AdmitPath::Paced => pacer_admit_path::Paced,
            AdmitPath::Shaped => pacer_admit_path::Shaped,
            AdmitPath::Overflow => pacer_admit_path::Overflow,
            AdmitPath::Booked => pacer_admit_path::Booked,
        } as u32,
        wait_ms: admission.wait_ms,
        required_wait_ms: 0,
        retry_after_s: 0,
        queued: admission.wait_ms > 0,
        clock_regressed: admission.clock_regressed,
        ticket: admission.ticket.map_or(NO_TICKET, live_ticket),
    }
}

fn refused(
    kind: pacer_decision_kind,
    required_wait_ms: u64,
    retry_after_s: u64,
    clock_regressed: bool,
) -> pacer_decision {
    pacer_decision {
        kind: kind as u32,
        path: pacer_admit_path::None as u32,
        wait_ms: 0,
        required_wait_ms,
        retry_after_s,
        queued: false,
        clock_regressed,
        ticket: NO_TICKET,
    }
}

/// A place in line (SPEC §11), written by pacer_reserve_or_book. Keep it
/// under the request's own identity; present it with pacer_redeem on the
/// request's retry; release its ticket with pacer_release if the request
/// ends without redeeming it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_booking {
    /// The refund right for the booked token. pacer_redeem moves it into
    /// the admission (this copy is then marked spent).
    pub ticket: pacer_ticket,
    /// When the connection may open, ms on the pacer's clock.
    pub slot_ms: u64,
}

/// pacer_reserve, except that a refusal whose wait fits the horizon of the
/// request's `retries_left` retries books a place in line (SPEC §11): kind
/// PACER_DECISION_KIND_BOOKED, one token debited, *out_booking written.
/// Otherwise *out_booking is left untouched. Thread-safe and lock-free.
#[no_mangle]
pub unsafe extern "C" fn pacer_reserve_or_book(
    storage: *const pacer,
    now_ms: u64,
    retries_left: u32,
    out_decision: *mut pacer_decision,
    out_booking: *mut pacer_booking,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        let out_decision = out(out_decision)?;
        let out_booking = out(out_booking)?;
        let decision = slot.pacer.reserve_or_book(now_ms, retries_left);
        slot.counters.record_booking(&decision);
        let result = match decision {
            BookingDecision::Admitted(admission) => admitted(admission),
            BookingDecision::Booked(booked) => {
                let booking = pacer_booking {
                    slot_ms: booked.booking.slot_ms,
                    ticket: live_ticket(booked.booking.ticket),
                };
                // SAFETY: checked by `out`.
                unsafe { put(out_booking, booking) };
                refused(
                    pacer_decision_kind::Booked,
                    booked.booking.slot_ms.saturating_sub(now_ms),
                    booked.retry_after_s,
                    booked.clock_regressed,
                )
            }
            BookingDecision::Refused(refusal) => refused(
                pacer_decision_kind::Refused,
                refusal.required_wait_ms,
                refusal.retry_after_s,
                refusal.clock_regressed,
            ),
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_decision, result) };
        Ok(())
    })
}

/// Presents a booking on the request's retry at `now_ms`; changes nothing
/// in the pacer. Admitted (path PACER_ADMIT_PATH_BOOKED) after
/// `max(0, slot − now)` when `slot − now ≤ bound`: the decision carries the
/// booking's ticket and the booking's copy is marked spent. Otherwise
/// PACER_DECISION_KIND_BOOKED again with the next hint, booking unchanged.
/// A booking whose ticket is not live returns PACER_STATUS_INVALID_TICKET.
#[no_mangle]
pub unsafe extern "C" fn pacer_redeem(
    storage: *const pacer,
    booking: *mut pacer_booking,
    now_ms: u64,
    out_decision: *mut pacer_decision,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        // SAFETY: caller's contract; NULL checked by `arg_mut`.
        let booking = unsafe { arg_mut(booking) }?;
        let out_decision = out(out_decision)?;
        if booking.ticket.state != pacer_ticket_state::Live as u32 {
            return Err(pacer_status::InvalidTicket);
        }
        let core_booking = Booking {
            ticket: Ticket::from_raw(booking.ticket.seq, booking.ticket.debit_units),
            slot_ms: booking.slot_ms,
        };
        let redemption = slot.pacer.redeem(core_booking, now_ms);
        slot.counters.record_redemption(&redemption);
        let result = match redemption {
            Redemption::Admitted(admission) => {
                booking.ticket.state = pacer_ticket_state::Spent as u32;
                admitted(admission)
            }
            Redemption::NotYet {
                booking: kept,
                retry_after_s,
            } => refused(
                pacer_decision_kind::Booked,
                kept.slot_ms.saturating_sub(now_ms),
                retry_after_s,
                false,
            ),
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_decision, result) };
        Ok(())
    })
}

const NO_TICKET: pacer_ticket = pacer_ticket {
    seq: 0,
    debit_units: 0,
    state: pacer_ticket_state::None as u32,
    reserved: 0,
};

/// Releases an admission that will not open its connection. A live ticket
/// is marked spent and *out_refunded says whether the policy refunded it
/// (true even when the capacity cap absorbed the refund). A ticket with
/// nothing to refund, or already spent, reports false and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn pacer_release(
    storage: *const pacer,
    ticket: *mut pacer_ticket,
    now_ms: u64,
    out_refunded: *mut bool,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        // SAFETY: caller's contract; NULL checked by `arg_mut`.
        let ticket = unsafe { arg_mut(ticket) }?;
        let out_refunded = out(out_refunded)?;
        let refunded = match ticket.state {
            0 | 2 => false,
            1 => {
                let refunded = slot
                    .pacer
                    .release(Ticket::from_raw(ticket.seq, ticket.debit_units), now_ms);
                slot.counters.record_release(refunded);
                ticket.state = pacer_ticket_state::Spent as u32;
                refunded
            }
            _ => return Err(pacer_status::InvalidEnum),
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_refunded, refunded) };
        Ok(())
    })
}

/// Reads the decision counters (each read independently).
#[no_mangle]
pub unsafe extern "C" fn pacer_get_counters(
    storage: *const pacer,
    out_counters: *mut pacer_counters,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        let out_counters = out(out_counters)?;
        let s = slot.counters.snapshot();
        let counters = pacer_counters {
            admitted: s.admitted,
            admitted_after_wait: s.admitted_after_wait,
            refused: s.refused,
            shaped: s.shaped,
            released: s.released,
            refunded: s.refunded,
            clock_regressions: s.clock_regressions,
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_counters, counters) };
        Ok(())
    })
}

/// Reads the pacer's derived parameters and current state.
#[no_mangle]
pub unsafe extern "C" fn pacer_get_info(
    storage: *const pacer,
    out_info: *mut pacer_info,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        let out_info = out(out_info)?;
        let pacer = &slot.pacer;
        let state = pacer.state();
        let info = pacer_info {
            mode: match pacer.mode() {
                Mode::Disabled => pacer_mode::Disabled,
                Mode::Refusing => pacer_mode::Refusing,
                Mode::ShapingLowRate => pacer_mode::ShapingLowRate,
                Mode::ShapingNoRetry => pacer_mode::ShapingNoRetry,
            } as u32,
            release_policy: pacer.release_policy() as u32,
            wait_bound_ms: pacer.wait_bound_ms(),
            capacity_units: pacer.capacity_units(),
            max_debt_units: pacer.max_debt_units(),
            high_water_ms: state.high_water_ms,
            tokens_units: state.tokens_units,
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_info, info) };
        Ok(())
    })
}
