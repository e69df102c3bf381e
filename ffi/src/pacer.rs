//! `struct pacer`: a pacer in caller-provided storage, and its calls.

use core::mem::{align_of, size_of};
use core::ptr::{addr_of, addr_of_mut};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};

use pacer_core::{
    Admission, AdmitPath, Booking, BookingDecision, Config, ConfigError, Counters, Decision, Mode,
    Outcome, Pacer, Redemption, Refusal, ReleasePolicy, Ticket,
};

use crate::boundary::{arg, arg_mut, checked, guard, out, put};
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

/// What lives in the storage once initialised. The core pacer ends with its
/// two shared words, the state word and then the adaptive control word (its
/// `repr(C)`), and the decision counters follow them, so a shared pacer
/// maps those words and the counters from the file (every process counts
/// into the bucket's counters) and keeps everything before them private.
#[repr(C)]
pub(crate) struct Slot {
    magic: u64,
    /// The tag this pacer writes into its tickets (pacer_ticket.owner);
    /// never 0.
    pub(crate) owner: u32,
    /// Zero; makes the padding before the 16-aligned pacer explicit.
    reserved: u32,
    pub(crate) pacer: Pacer,
    pub(crate) counters: Counters,
}

// No padding between a Slot's fields: the core pacer's shared words and
// then the counters end the slot, where a shared pacer maps them from its
// file (ffi/src/shm.rs). (The core's parameters themselves may hold
// padding: a shared pacer copies them as raw bytes only.)
const _: () = assert!(core::mem::offset_of!(Slot, pacer) == 16);
const _: () = assert!(
    core::mem::offset_of!(Slot, counters)
        == core::mem::offset_of!(Slot, pacer) + size_of::<Pacer>()
);

/// A fresh, never-0 owner tag: a process-wide serial mixed with a random
/// key, so two pacers in one process never share a tag and a tag is not
/// guessable from outside the process.
pub(crate) fn fresh_owner() -> u32 {
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(serial);
    let mixed = hasher.finish();
    match (mixed as u32) ^ ((mixed >> 32) as u32) {
        0 => 1,
        tag => tag,
    }
}

const MAGIC: u64 = u64::from_le_bytes(*b"pacer\x00\x01\x00");

/// Where a pacer's counters lie in its storage, bytes: the only bytes a
/// successful pacer_observe on a fixed-rate pacer writes (for tests and
/// fuzzers that check what a call changed).
/// cbindgen:ignore
pub const COUNTERS_IN_STORAGE: core::ops::Range<usize> = core::mem::offset_of!(Slot, counters)
    ..core::mem::offset_of!(Slot, counters) + size_of::<Counters>();

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
    /// Adaptive pacing (SPEC §14): the lowest rate the outcomes reported
    /// with pacer_observe may lower the rate in force to, 1..=rate_per_min
    /// (raised to the lowest rate that can refuse, SPEC §3, never above
    /// the ceiling); 0 turns adaptation off (the rate in force stays
    /// rate_per_min).
    pub adaptive_floor_per_min: u32,
    /// The highest rate the rate in force may climb back to,
    /// rate_per_min..=600; 0 means rate_per_min. Ignored when adaptation is
    /// off.
    pub adaptive_ceiling_per_min: u32,
}

/// What the upstream answered to a new connection (the `outcome` argument
/// of pacer_observe and pacer_shared_observe).
#[repr(u32)]
pub enum pacer_outcome {
    /// The upstream opened it: counted in its minute of the clock, so a
    /// later throttle knows about how many got through (and, past the hold
    /// after a throttle, a count above the limit learned starts a search
    /// for a higher rate).
    Opened = 1,
    /// The upstream throttled it (its own rate limit, not the pacer's):
    /// ends a search, or lowers the rate in force to what the counts show
    /// got through (at most once a minute; a throttle within the hold
    /// changes nothing).
    Throttled = 2,
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

/// The right to refund one admission. pacer_release marks it spent with
/// an atomic compare-and-swap of `state`, so of several threads releasing
/// (or redeeming) the same ticket struct exactly one succeeds. It works
/// only on the pacer whose `owner` tag it carries. A copy of a live ticket
/// is a second handle on the same debit that the pacer cannot tell apart:
/// keep one.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_ticket {
    /// Position in the pacer's release stack.
    pub seq: u32,
    /// Debit to refund, in units (60000 = one token).
    pub debit_units: u32,
    /// A pacer_ticket_state value (changed only by the library).
    pub state: u32,
    /// The issuing pacer's tag; another pacer refuses the ticket with
    /// PACER_STATUS_FOREIGN_TICKET. Keep it as written.
    pub owner: u32,
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

/// A pacer's derived parameters and current state. The mode and the debt
/// floor are those of the configured rate; an adaptive pacer decides at
/// its rate in force (pacer_rate_in_force), which moves with the clock.
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

/// Number of buckets of the wait histogram (pacer_metrics.wait_buckets).
pub const PACER_WAIT_BUCKETS: usize = 8;
const _: () = assert!(PACER_WAIT_BUCKETS == pacer_core::WAIT_BOUNDS_MS.len());

/// The wait histogram's upper bounds, ms: 10, 50, 100, 500, 1000, 2500,
/// 5000, 10000.
/// (Lowercase, as every exported symbol of the library starts with
/// `pacer_`.)
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static pacer_wait_bounds_ms: [u64; PACER_WAIT_BUCKETS] = pacer_core::WAIT_BOUNDS_MS;

/// Every count a pacer keeps (docs/metrics.md): pacer_counters' counts and
/// bookings, upstream answers and the waits given. A shared pacer's are
/// the bucket's: every process's calls are counted in its file. Each count
/// wraps at 2^64.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_metrics {
    /// Admissions by any path.
    pub admitted: u64,
    /// Admissions with a wait.
    pub admitted_after_wait: u64,
    /// Refusals (bookings and a redemption's "not yet" included).
    pub refused: u64,
    /// Admissions by the shaping rule.
    pub shaped: u64,
    /// Release calls on a live ticket.
    pub released: u64,
    /// Releases refunded.
    pub refunded: u64,
    /// Calls whose clock was behind the latest reading.
    pub clock_regressions: u64,
    /// Refusals that booked a place in line.
    pub booked: u64,
    /// Upstream answers reported opened (pacer_observe).
    pub opened: u64,
    /// Upstream answers reported throttled (pacer_observe).
    pub throttled: u64,
    /// The admissions' waits summed, ms.
    pub wait_ms_total: u64,
    /// Admissions of a booking presented on its retry (pacer_redeem).
    pub redeemed: u64,
    /// Admissions that waited more than the bound before
    /// pacer_wait_bounds_ms[i] (0 for i = 0) and at most
    /// pacer_wait_bounds_ms[i]; immediate admissions are in no bucket, nor
    /// waits above the last bound.
    pub wait_buckets: [u64; PACER_WAIT_BUCKETS],
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
            adaptive_floor_per_min: config.adaptive_floor_per_min,
            adaptive_ceiling_per_min: config.adaptive_ceiling_per_min,
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
        adaptive_floor_per_min: config.adaptive_floor_per_min,
        adaptive_ceiling_per_min: config.adaptive_ceiling_per_min,
    })
}

pub(crate) fn config_error(error: ConfigError) -> pacer_status {
    match error {
        ConfigError::RateTooHigh => pacer_status::RateTooHigh,
        ConfigError::BurstTooLarge => pacer_status::BurstTooLarge,
        ConfigError::RetriesExceedLadder => pacer_status::RetriesExceedLadder,
        ConfigError::AdaptiveRange => pacer_status::AdaptiveRange,
    }
}

/// The core outcome a `pacer_outcome` value names.
pub(crate) fn outcome_from(outcome: u32) -> Result<Outcome, pacer_status> {
    match outcome {
        1 => Ok(Outcome::Opened),
        2 => Ok(Outcome::Throttled),
        _ => Err(pacer_status::InvalidEnum),
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

/// The calls that ask the initialised pacer in `storage` one thing and
/// write one answer: the slot is checked, then `out_answer`, then `body`
/// runs; its answer is written only on success.
///
/// # Safety
/// `storage` is NULL or points to a `struct pacer`; `out_answer` is NULL,
/// misaligned, or writable for a `T`.
#[inline(always)]
unsafe fn answer<T>(
    storage: *const pacer,
    out_answer: *mut T,
    body: impl FnOnce(&Slot) -> Result<T, pacer_status>,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; checked by `slot`.
        let slot = unsafe { slot(storage) }?;
        let out_answer = out(out_answer)?;
        let answer = body(slot)?;
        // SAFETY: checked by `out`; writable per the caller's contract.
        unsafe { put(out_answer, answer) };
        Ok(())
    })
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
        write_slot(storage, &config, now_ms, fresh_owner())
    })
}

/// pacer_init's work with a given owner tag (a shared pacer's tag comes
/// from its file).
pub(crate) fn write_slot(
    storage: &mut pacer,
    config: &Config,
    now_ms: u64,
    owner: u32,
) -> Result<(), pacer_status> {
    let pacer = Pacer::new(config, now_ms).map_err(config_error)?;
    let slot = Slot {
        magic: MAGIC,
        owner,
        reserved: 0,
        pacer,
        counters: Counters::new(),
    };
    // SAFETY: the storage is large and aligned enough for a Slot (const
    // asserts above) and exclusively borrowed.
    unsafe { storage.opaque.as_mut_ptr().cast::<Slot>().write(slot) };
    Ok(())
}

/// Asks to open one new connection at `now_ms` (the caller's monotonic
/// clock, ms). Thread-safe and lock-free.
#[no_mangle]
pub unsafe extern "C" fn pacer_reserve(
    storage: *const pacer,
    now_ms: u64,
    out_decision: *mut pacer_decision,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe {
        answer(storage, out_decision, |slot| {
            let decision = slot.pacer.reserve(now_ms);
            slot.counters.record(&decision);
            Ok(match decision {
                Decision::Admitted(admission) => admitted(&admission, slot.owner),
                Decision::Refused(refusal) => plain_refusal(&refusal),
            })
        })
    }
}

fn live_ticket(ticket: &Ticket, owner: u32) -> pacer_ticket {
    pacer_ticket {
        seq: ticket.seq(),
        debit_units: ticket.debit_units(),
        state: pacer_ticket_state::Live as u32,
        owner,
    }
}

fn admitted(admission: &Admission, owner: u32) -> pacer_decision {
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
        ticket: admission
            .ticket
            .as_ref()
            .map_or(NO_TICKET, |ticket| live_ticket(ticket, owner)),
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

/// The C form of a plain refusal.
fn plain_refusal(refusal: &Refusal) -> pacer_decision {
    refused(
        pacer_decision_kind::Refused,
        refusal.required_wait_ms,
        refusal.retry_after_s,
        refusal.clock_regressed,
    )
}

/// A place in line (SPEC §11), written by pacer_reserve_or_book. Keep it
/// under the request's own identity; present it with pacer_redeem on the
/// request's retry; release its ticket with pacer_release if the request
/// ends without redeeming it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pacer_booking {
    /// The refund right for the booked token. pacer_redeem moves it into
    /// the admission (this copy is then marked spent, atomically: of two
    /// threads redeeming one booking struct, one is admitted).
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
            BookingDecision::Admitted(admission) => admitted(&admission, slot.owner),
            BookingDecision::Booked(booked) => {
                let booking = pacer_booking {
                    slot_ms: booked.booking.slot_ms,
                    ticket: live_ticket(&booked.booking.ticket, slot.owner),
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
            BookingDecision::Refused(refusal) => plain_refusal(&refusal),
        };
        // SAFETY: checked by `out`.
        unsafe { put(out_decision, result) };
        Ok(())
    })
}

/// A ticket struct in the caller's memory. Its fields are read one by one
/// and its `state` is changed only by an atomic compare-and-swap, so two
/// threads presenting the same struct never both use it; no Rust reference
/// to the struct is ever made (it may be shared between threads).
struct TicketCell {
    ptr: *mut pacer_ticket,
}

impl TicketCell {
    /// # Safety
    /// `ptr` is NULL, misaligned, or points to a `pacer_ticket` readable and
    /// writable for the call, whose `state` nobody writes non-atomically
    /// meanwhile.
    unsafe fn new(ptr: *mut pacer_ticket) -> Result<TicketCell, pacer_status> {
        checked(ptr)?;
        Ok(TicketCell { ptr })
    }

    /// The core ticket it names and its owner tag.
    fn read(&self) -> (Ticket, u32) {
        // SAFETY: non-NULL, aligned, readable (`new`'s contract); these
        // fields are never written by the library.
        let (seq, debit_units, owner) = unsafe {
            (
                addr_of!((*self.ptr).seq).read(),
                addr_of!((*self.ptr).debit_units).read(),
                addr_of!((*self.ptr).owner).read(),
            )
        };
        (Ticket::from_raw(seq, debit_units), owner)
    }

    fn state(&self) -> &AtomicU32 {
        // SAFETY: the field is 4-aligned (the struct is, checked by `new`),
        // valid for the call, and accessed atomically (`new`'s contract).
        unsafe { AtomicU32::from_ptr(addr_of_mut!((*self.ptr).state)) }
    }

    /// Live and issued by `owner`: Ok(true). Not live: Ok(false) (None or
    /// Spent) or `InvalidEnum` (an unknown state). Another owner:
    /// `ForeignTicket`.
    fn live_for(&self, owner: u32) -> Result<bool, pacer_status> {
        match self.state().load(Ordering::Acquire) {
            0 | 2 => Ok(false),
            1 if self.read().1 == owner => Ok(true),
            1 => Err(pacer_status::ForeignTicket),
            _ => Err(pacer_status::InvalidEnum),
        }
    }

    /// Live → Spent; false when another call spent it first.
    fn spend(&self) -> bool {
        self.state()
            .compare_exchange(
                pacer_ticket_state::Live as u32,
                pacer_ticket_state::Spent as u32,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// Presents a booking on the request's retry at `now_ms`; changes nothing
/// in the pacer. Admitted (path PACER_ADMIT_PATH_BOOKED) after
/// `max(0, slot − now)` when `slot − now ≤ bound`: the decision carries the
/// booking's ticket and the booking's copy is marked spent (atomically: of
/// concurrent redemptions of one booking struct, one is admitted). Otherwise
/// PACER_DECISION_KIND_BOOKED again with the next hint, booking unchanged.
/// A booking whose ticket is not live returns PACER_STATUS_INVALID_TICKET;
/// one issued by another pacer, PACER_STATUS_FOREIGN_TICKET.
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
        checked(booking)?;
        // SAFETY: non-NULL and aligned (checked); the ticket field of a
        // readable, writable booking (caller's contract).
        let cell = unsafe { TicketCell::new(addr_of_mut!((*booking).ticket)) }?;
        let out_decision = out(out_decision)?;
        if !cell.live_for(slot.owner)? {
            return Err(pacer_status::InvalidTicket);
        }
        let (ticket, _) = cell.read();
        // SAFETY: non-NULL, aligned, readable (checked above).
        let slot_ms = unsafe { addr_of!((*booking).slot_ms).read() };
        let redemption = slot.pacer.redeem(Booking { ticket, slot_ms }, now_ms);
        let result = match &redemption {
            Redemption::Admitted(_) if !cell.spend() => return Err(pacer_status::InvalidTicket),
            Redemption::Admitted(admission) => admitted(admission, slot.owner),
            Redemption::NotYet {
                booking: kept,
                retry_after_s,
            } => refused(
                pacer_decision_kind::Booked,
                kept.slot_ms.saturating_sub(now_ms),
                *retry_after_s,
                false,
            ),
        };
        slot.counters.record_redemption(&redemption);
        // SAFETY: checked by `out`.
        unsafe { put(out_decision, result) };
        Ok(())
    })
}

const NO_TICKET: pacer_ticket = pacer_ticket {
    seq: 0,
    debit_units: 0,
    state: pacer_ticket_state::None as u32,
    owner: 0,
};

/// Releases an admission that will not open its connection. A live ticket
/// is marked spent (atomically: of concurrent releases of one ticket
/// struct, one refunds) and *out_refunded says whether the policy refunded
/// it (true even when the capacity cap absorbed the refund). A ticket with
/// nothing to refund, or already spent, reports false and changes nothing;
/// one issued by another pacer returns PACER_STATUS_FOREIGN_TICKET.
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
        // SAFETY: caller's contract; NULL and alignment checked by `new`.
        let cell = unsafe { TicketCell::new(ticket) }?;
        let out_refunded = out(out_refunded)?;
        let refunded = if cell.live_for(slot.owner)? && cell.spend() {
            let refunded = slot.pacer.release(cell.read().0, now_ms);
            slot.counters.record_release(refunded);
            refunded
        } else {
            false
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
    // SAFETY: caller's contract.
    unsafe {
        answer(storage, out_counters, |slot| {
            let s = slot.counters.snapshot();
            Ok(pacer_counters {
                admitted: s.admitted,
                admitted_after_wait: s.admitted_after_wait,
                refused: s.refused,
                shaped: s.shaped,
                released: s.released,
                refunded: s.refunded,
                clock_regressions: s.clock_regressions,
            })
        })
    }
}

/// Reads every count the pacer keeps (each read independently): for a
/// shared pacer, the bucket's, counted by every process that opened it.
#[no_mangle]
pub unsafe extern "C" fn pacer_get_metrics(
    storage: *const pacer,
    out_metrics: *mut pacer_metrics,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe {
        answer(storage, out_metrics, |slot| {
            let s = slot.counters.snapshot();
            Ok(pacer_metrics {
                admitted: s.admitted,
                admitted_after_wait: s.admitted_after_wait,
                refused: s.refused,
                shaped: s.shaped,
                released: s.released,
                refunded: s.refunded,
                clock_regressions: s.clock_regressions,
                booked: s.booked,
                opened: s.opened,
                throttled: s.throttled,
                wait_ms_total: s.wait_ms_total,
                redeemed: s.redeemed,
                wait_buckets: s.wait_buckets,
            })
        })
    }
}

/// Reads the pacer's derived parameters and current state.
#[no_mangle]
pub unsafe extern "C" fn pacer_get_info(
    storage: *const pacer,
    out_info: *mut pacer_info,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe {
        answer(storage, out_info, |slot| {
            let pacer = &slot.pacer;
            let state = pacer.state();
            Ok(pacer_info {
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
            })
        })
    }
}

/// Reports what the upstream answered to a new connection at `now_ms`
/// (SPEC §14; `outcome` a pacer_outcome value): PACER_OUTCOME_OPENED is
/// counted in its minute (past the hold, a count above the limit learned
/// starts a search again); PACER_OUTCOME_THROTTLED ends a search at what
/// the counts show got through, or lowers the probe's limit to it (by 1/16
/// when the counts do not explain the throttle), at most once a minute,
/// never below the lowest rate; a throttle within the hold changes
/// nothing.
/// *out_rate_per_min is the rate in force after it. With adaptation off it
/// changes nothing and reports rate_per_min. Thread-safe and lock-free.
#[no_mangle]
pub unsafe extern "C" fn pacer_observe(
    storage: *const pacer,
    outcome: u32,
    now_ms: u64,
    out_rate_per_min: *mut u32,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe {
        answer(storage, out_rate_per_min, |slot| {
            let outcome = outcome_from(outcome)?;
            let rate = slot.pacer.observe(outcome, now_ms);
            slot.counters.record_outcome(outcome);
            Ok(rate)
        })
    }
}

/// The tokens at `now_ms`, in units (60000 a token; negative: the debt
/// waiting admissions hold): the state refilled at the rate in force,
/// capped at the burst; a clock behind the latest reading reads that
/// reading. Reads only.
#[no_mangle]
pub unsafe extern "C" fn pacer_level_at(
    storage: *const pacer,
    now_ms: u64,
    out_units: *mut i64,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe { answer(storage, out_units, |slot| Ok(slot.pacer.level_at(now_ms))) }
}

/// The rate in force at `now_ms`, new connections per minute (SPEC §14):
/// rate_per_min unless adaptation is on. Reads only.
#[no_mangle]
pub unsafe extern "C" fn pacer_rate_in_force(
    storage: *const pacer,
    now_ms: u64,
    out_rate_per_min: *mut u32,
) -> pacer_status {
    // SAFETY: caller's contract.
    unsafe {
        answer(storage, out_rate_per_min, |slot| {
            Ok(slot.pacer.rate_in_force(now_ms))
        })
    }
}
