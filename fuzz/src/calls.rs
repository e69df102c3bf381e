//! Target `abi_calls`: random call sequences over every export of the C
//! ABI (except the shared pacer, which `shared_open` covers), with oracles
//! beyond "no crash":
//!
//! - no call returns PACER_STATUS_PANIC;
//! - a call that fails leaves its out-parameters (pre-filled with a
//!   sentinel) and the pacer / registry / ticket / booking it was given
//!   byte-for-byte untouched (BUFFER_TOO_SHORT: only *out_written written);
//! - after every step -max_debt_units <= tokens_units <= capacity_units;
//! - a ticket released twice refunds at most once;
//! - pacer_init accepts exactly the configs the documented rules accept;
//! - admitted waits stay within the wait bound; counters never decrease;
//! - renderers: written <= len, UTF-8, the rest of the buffer untouched,
//!   and a measured length is exactly what a second call writes;
//! - the notice registry agrees with a model keyed by pacer_notice_key;
//! - adaptive pacing (SPEC §14): pacer_init takes an adaptive range exactly
//!   when the hand-written rule [`adaptive_range_valid`] does (an invalid
//!   one alone: PACER_STATUS_ADAPTIVE_RANGE); pacer_observe with an unknown
//!   outcome is INVALID_ENUM and changes nothing; pacer_observe and
//!   pacer_rate_in_force report a rate within [floor, ceiling] for an
//!   adaptive pacer and exactly the configured rate, with not one byte of
//!   the pacer changed, otherwise; OPENED and pacer_rate_in_force change
//!   nothing; THROTTLED never raises the rate in force; the rate observe
//!   reports is the rate in force after it;
//! - pacer_status_str never returns NULL, pacer_notice_kind_name is NULL
//!   exactly for unknown kinds;
//! - the switched checks of [`crate::Expect`].

use std::ffi::{c_char, CString};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};

use arbitrary::{Arbitrary, Unstructured};

use pacer::derived::*;
use pacer::frame::*;
use pacer::pacer::{
    pacer as Storage, pacer_booking, pacer_config, pacer_counters, pacer_decision,
    pacer_get_counters, pacer_get_info, pacer_info, pacer_init, pacer_observe, pacer_rate_in_force,
    pacer_redeem, pacer_release, pacer_reserve, pacer_reserve_or_book, pacer_ticket,
    COUNTERS_IN_STORAGE,
};
use pacer::settings::*;
use pacer::shm::pacer_clock_monotonic_ms;
use pacer::status::pacer_status_str;
use pacer::version::*;

use crate::{
    call, expect, st, status_known, ticket, Aligned, Out, ADAPTIVE_RANGE, BUFFER_TOO_SHORT,
    FOREIGN_TICKET, INVALID_ENUM, INVALID_TICKET, INVALID_UTF8, MISALIGNED, NOT_INITIALIZED,
    NULL_PARAMETER, OK, OUTCOME_OPENED, OUTCOME_THROTTLED, SENTINEL, TICKET_LIVE, TICKET_NONE,
    TICKET_SPENT,
};

const PACERS: usize = 3;
const REGISTRIES: usize = 2;
const STORE: usize = size_of::<Storage>() + 32;
const REG_STORE: usize = size_of::<pacer_notice_registry>() + 32;
const MAX_OPS: usize = 64;
const POOL: usize = 24;
const REGISTRY_CAPACITY: usize = 32;

const KIND_ADMITTED: u32 = 1;
const KIND_REFUSED: u32 = 2;
const KIND_BOOKED: u32 = 3;
const PATH_BOOKED: u32 = 5;

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Clock {
    Zero,
    Max,
    Same,
    Forward(u16),
    Back(u16),
    FarForward(u32),
    FarBack(u32),
    Abs(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Cfg {
    Default,
    Valid {
        rate: u16,
        burst: u8,
        idle: u32,
        retries: u8,
        strict: bool,
    },
    Raw {
        rate: u32,
        burst: u32,
        idle: u64,
        retries: u32,
        policy: u32,
        /// (adaptive_floor_per_min, adaptive_ceiling_per_min), else 0, 0.
        adaptive: Option<(u32, u32)>,
    },
    /// A base as [`Cfg::Valid`] (its rate 1..=600) with adaptive pacing on
    /// a range drawn by [`Range`]: valid, on or across an edge, or raw.
    Adaptive {
        rate: u16,
        burst: u8,
        idle: u32,
        retries: u8,
        strict: bool,
        range: Range,
    },
}

/// The adaptive range of [`Cfg::Adaptive`]. Which of these pacer_init
/// must accept is decided by [`adaptive_range_valid`] alone, not by the
/// variant's name.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Range {
    /// 1 <= floor <= rate <= ceiling <= 600, or the default ceiling (0).
    Valid {
        floor: u16,
        ceiling: u16,
        default_ceiling: bool,
    },
    /// A bound on or just across an edge of the rule.
    Edge(u8),
    /// Any floor and ceiling.
    Raw { floor: u32, ceiling: u32 },
}

/// The `outcome` argument of pacer_observe: the two known values, the
/// unknown neighbours and extremes, anything.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum OutcomeArg {
    Opened,
    Throttled,
    Zero,
    Three,
    Max,
    Any(u32),
}

impl OutcomeArg {
    pub fn code(self) -> u32 {
        match self {
            OutcomeArg::Opened => OUTCOME_OPENED,
            OutcomeArg::Throttled => OUTCOME_THROTTLED,
            OutcomeArg::Zero => 0,
            OutcomeArg::Three => 3,
            OutcomeArg::Max => u32::MAX,
            OutcomeArg::Any(v) => v,
        }
    }
}

/// A known pacer_outcome value.
pub fn outcome_known(code: u32) -> bool {
    code == OUTCOME_OPENED || code == OUTCOME_THROTTLED
}

/// Where a pointer argument points.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Ptr {
    Aligned,
    Null,
    /// Into the same buffer, misaligned for the type (8 bytes in first).
    Misaligned(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Buf {
    NullZero,
    NonNullZero,
    NullWithLen(u16),
    Len(u16),
    Exact,
    ExactMinus(u8),
}

#[derive(Arbitrary, Debug)]
pub enum Raw {
    None,
    NullWithLen(u16),
    EmptyNonNull,
    Bytes(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
pub enum NoticeSrc {
    Pool(u8),
    Forged {
        kind: u32,
        reserved: u32,
        values: [u64; 3],
        raw: Raw,
    },
}

#[derive(Arbitrary, Debug)]
pub enum Op {
    Init(InitCall),
    Reserve(PacerCall),
    ReserveOrBook(BookCall),
    Redeem {
        p: u8,
        b: u8,
        now: Clock,
        ptr: Ptr,
        bptr: Ptr,
        null_out: bool,
    },
    Release(ReleaseCall),
    ReleaseBooking {
        p: u8,
        b: u8,
        now: Clock,
        twice: bool,
    },
    CopyTicket {
        t: u8,
    },
    ForgeTicket {
        seq: u32,
        debit: u32,
        state: u32,
        owner: Option<u32>,
        like: u8,
    },
    ForgeBooking {
        t: u8,
        slot_ms: u64,
    },
    Info {
        p: u8,
        ptr: Ptr,
        null_out: bool,
    },
    Counters {
        p: u8,
        ptr: Ptr,
        null_out: bool,
    },
    RefusalBody {
        prefix: Option<Vec<u8>>,
        retry_after_s: u64,
        buf: Buf,
        null_out: bool,
    },
    Resolve {
        s: [Option<Vec<u8>>; 4],
        null_budget: bool,
        with_notices: bool,
    },
    Render {
        n: NoticeSrc,
        buf: Buf,
        key: bool,
        null_notice: bool,
        null_out: bool,
    },
    KindName(u32),
    ModeNotice {
        cfg: Cfg,
        nulls: u8,
    },
    RegInit {
        r: u8,
        ptr: Ptr,
    },
    RegGarbage {
        r: u8,
        fill: u8,
    },
    RegFirst {
        r: u8,
        n: NoticeSrc,
        ptr: Ptr,
        null_notice: bool,
        null_out: bool,
    },
    StatusStr(u32),
    Derived {
        idle: u64,
        retries: u32,
        bound: u64,
        required: u64,
        rate: u32,
    },
    Constants,
    Observe(ObserveCall),
    RateInForce(PacerCall),
}

// The arguments of the ops that call on a pacer slot `p` at `now` (`ptr`
// picks the storage; `null_out` passes NULL for the out-parameter), in the
// order the fuzz input gives them.

/// `pacer_reserve` and `pacer_rate_in_force`: a clock and an out-parameter.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct PacerCall {
    p: u8,
    now: Clock,
    ptr: Ptr,
    null_out: bool,
}

/// `pacer_init`: a configuration, NULL when `null_cfg`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct InitCall {
    p: u8,
    cfg: Cfg,
    now: Clock,
    ptr: Ptr,
    null_cfg: bool,
}

/// `pacer_reserve_or_book`: `nulls` picks NULL or misaligned out-parameters.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct BookCall {
    p: u8,
    now: Clock,
    retries_left: u32,
    ptr: Ptr,
    nulls: u8,
}

/// `pacer_release` of ticket `t` (passed where `tptr` says), `twice`: once
/// more after it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct ReleaseCall {
    p: u8,
    t: u8,
    now: Clock,
    ptr: Ptr,
    tptr: Ptr,
    null_out: bool,
    twice: bool,
}

/// `pacer_observe` of `outcome`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct ObserveCall {
    p: u8,
    outcome: OutcomeArg,
    now: Clock,
    ptr: Ptr,
    null_out: bool,
}

impl Op {
    /// The pacer slot the op calls on, checked after it; None for the
    /// other ops.
    fn pacer(&self) -> Option<u8> {
        match self {
            Op::Init(InitCall { p, .. })
            | Op::Reserve(PacerCall { p, .. })
            | Op::ReserveOrBook(BookCall { p, .. })
            | Op::Redeem { p, .. }
            | Op::Release(ReleaseCall { p, .. })
            | Op::ReleaseBooking { p, .. }
            | Op::Observe(ObserveCall { p, .. })
            | Op::RateInForce(PacerCall { p, .. }) => Some(*p),
            _ => None,
        }
    }
}

/// Who issued a ticket or booking: (pacer index, its init generation);
/// `None` for forged owners.
type Issuer = Option<(usize, u32)>;

struct Tk {
    t: pacer_ticket,
    issuer: Issuer,
}

struct Bk {
    b: pacer_booking,
    issuer: Issuer,
}

struct PacerSlot {
    mem: Box<Aligned<STORE>>,
    init: bool,
    generation: u32,
    owner: Option<u32>,
    last_counters: Option<pacer_counters>,
    /// The config of the instance now in the slot.
    cfg: Option<pacer_config>,
    /// This instance has booked: the level may go below the debt floor,
    /// down to the booking horizon (docs/design.md, Bookings: Debt).
    booked: bool,
}

struct RegSlot {
    mem: Box<Aligned<REG_STORE>>,
    init: bool,
    keys: Vec<Vec<u8>>,
}

struct Run {
    now: u64,
    pacers: Vec<PacerSlot>,
    regs: Vec<RegSlot>,
    tickets: Vec<Tk>,
    bookings: Vec<Bk>,
    notices: Vec<pacer_notice>,
    /// Keeps every string and byte buffer a notice may point into alive.
    arena: Vec<Vec<u8>>,
    strings: Vec<CString>,
}

/// Offsets that misalign a pointer to a type of alignment `align`, the
/// first being 8 bytes in where that misaligns it.
fn misaligned_offset(align: usize, pick: u8) -> usize {
    let offs: Vec<usize> = [8usize, 4, 2, 1, 12]
        .into_iter()
        .filter(|o| o % align != 0)
        .collect();
    offs[pick as usize % offs.len()]
}

fn pick<T>(v: &[T], i: u8) -> Option<usize> {
    if v.is_empty() {
        None
    } else {
        Some(i as usize % v.len())
    }
}

impl Clock {
    fn apply(self, now: &mut u64) -> u64 {
        *now = match self {
            Clock::Zero => 0,
            Clock::Max => u64::MAX,
            Clock::Same => *now,
            Clock::Forward(d) => now.saturating_add(d as u64),
            Clock::Back(d) => now.saturating_sub(d as u64),
            Clock::FarForward(d) => now.saturating_add(d as u64 * 1000),
            Clock::FarBack(d) => now.saturating_sub(d as u64 * 1000),
            Clock::Abs(v) => v,
        };
        *now
    }
}

/// The configuration [`Cfg::Default`] builds: rate 60, burst 10, idle
/// 120000 ms, 5 retries, refund, fixed rate.
pub const DEFAULT_CFG: pacer_config = pacer_config {
    rate_per_min: 60,
    burst: 10,
    idle_timeout_ms: 120_000,
    max_retries: 5,
    release_policy: 0,
    adaptive_floor_per_min: 0,
    adaptive_ceiling_per_min: 0,
};

impl Cfg {
    pub fn build(self) -> pacer_config {
        match self {
            Cfg::Default => DEFAULT_CFG,
            Cfg::Valid {
                rate,
                burst,
                idle,
                retries,
                strict,
            } => {
                let idle = 10_000 + (idle as u64 % 3_590_001);
                let ceiling = call!(pacer_ladder_ceiling(idle));
                pacer_config {
                    rate_per_min: rate as u32 % 601,
                    burst: burst as u32,
                    idle_timeout_ms: idle,
                    max_retries: if ceiling == 0 {
                        0
                    } else {
                        retries as u32 % (ceiling + 1)
                    },
                    release_policy: strict as u32,
                    adaptive_floor_per_min: 0,
                    adaptive_ceiling_per_min: 0,
                }
            }
            Cfg::Raw {
                rate,
                burst,
                idle,
                retries,
                policy,
                adaptive,
            } => {
                let (floor, ceiling) = adaptive.unwrap_or((0, 0));
                pacer_config {
                    rate_per_min: rate,
                    burst,
                    idle_timeout_ms: idle,
                    max_retries: retries,
                    release_policy: policy,
                    adaptive_floor_per_min: floor,
                    adaptive_ceiling_per_min: ceiling,
                }
            }
            Cfg::Adaptive {
                rate,
                burst,
                idle,
                retries,
                strict,
                range,
            } => {
                let mut c = Cfg::Valid {
                    rate,
                    burst,
                    idle,
                    retries,
                    strict,
                }
                .build();
                let r = 1 + rate as u32 % 600;
                c.rate_per_min = r;
                let (floor, ceiling) = match range {
                    Range::Valid {
                        floor,
                        ceiling,
                        default_ceiling,
                    } => (
                        1 + floor as u32 % r,
                        if default_ceiling {
                            0
                        } else {
                            r + ceiling as u32 % (601 - r)
                        },
                    ),
                    Range::Edge(k) => match k % 10 {
                        0 => (r, 600),
                        1 => (r + 1, 0),
                        2 => (1, r - 1),
                        3 => (1, 601),
                        4 => {
                            c.rate_per_min = 0;
                            (1 + k as u32 / 10, 0)
                        }
                        5 => {
                            c.rate_per_min = 0;
                            (0, k as u32)
                        }
                        6 => (0, u32::MAX),
                        7 => (u32::MAX, u32::MAX),
                        8 => (1, r),
                        _ => (r, u32::MAX),
                    },
                    Range::Raw { floor, ceiling } => (floor, ceiling),
                };
                c.adaptive_floor_per_min = floor;
                c.adaptive_ceiling_per_min = ceiling;
                c
            }
        }
    }
}

/// The documented validity rule of a config (pacer_init's statuses).
pub fn config_valid(c: &pacer_config) -> bool {
    base_valid(c) && adaptive_range_valid(c)
}

/// The rule without the adaptive range.
pub fn base_valid(c: &pacer_config) -> bool {
    c.release_policy <= 1
        && c.rate_per_min <= 600
        && c.burst <= 1_000_000
        && c.max_retries <= call!(pacer_ladder_ceiling(c.idle_timeout_ms))
}

/// The adaptive range rule, written from the header (not from the code):
/// a floor of 0 turns adaptation off and the ceiling is then ignored;
/// otherwise the floor may not exceed the rate (so a rate of 0 has no
/// valid floor) and a ceiling other than 0 (0 = the rate) lies within
/// rate..=600. Anything else is PACER_STATUS_ADAPTIVE_RANGE.
pub fn adaptive_range_valid(c: &pacer_config) -> bool {
    let (floor, ceiling, rate) = (
        c.adaptive_floor_per_min,
        c.adaptive_ceiling_per_min,
        c.rate_per_min,
    );
    floor == 0 || (floor <= rate && (ceiling == 0 || (rate <= ceiling && ceiling <= 600)))
}

/// (floor, effective ceiling) of a valid adaptive config; `None` when
/// adaptation is off.
pub fn adaptive_bounds(c: &pacer_config) -> Option<(u32, u32)> {
    (c.adaptive_floor_per_min > 0).then(|| {
        let ceiling = match c.adaptive_ceiling_per_min {
            0 => c.rate_per_min,
            x => x,
        };
        (c.adaptive_floor_per_min, ceiling)
    })
}

/// The highest rate a pacer of the valid config `c` may decide at: the
/// ceiling when adaptive, else the rate.
pub fn top_rate(c: &pacer_config) -> u32 {
    adaptive_bounds(c).map_or(c.rate_per_min, |(_, ceiling)| ceiling)
}

/// The debt floor (units) of a valid config's pacer, from its info: the
/// info's own (at the configured rate), or, when adaptive, at most the
/// wait bound at the ceiling (it decides at the rate in force).
pub fn debt_floor(c: &pacer_config, info: &pacer_info) -> i128 {
    let own = info.max_debt_units as i128;
    match adaptive_bounds(c) {
        Some((_, ceiling)) => own.max(info.wait_bound_ms as i128 * ceiling as i128),
        None => own,
    }
}

/// A rate pacer_observe or pacer_rate_in_force reported for a pacer of
/// the valid config `c`: within [floor, ceiling] when adaptive, else the
/// configured rate.
#[track_caller]
pub fn check_rate(c: &pacer_config, rate: u32, what: &str) {
    match adaptive_bounds(c) {
        Some((floor, ceiling)) => assert!(
            floor <= rate && rate <= ceiling,
            "{what}: rate in force {rate} outside [{floor}, {ceiling}] (rate {})",
            c.rate_per_min
        ),
        None => assert_eq!(
            rate, c.rate_per_min,
            "{what}: adaptation off, yet not the configured rate"
        ),
    }
}

/// Counts for the exit line of `abi_calls` (how often the adaptive
/// oracles ran).
static ADAPTIVE_INITS: AtomicU64 = AtomicU64::new(0);
static ADAPTIVE_OBSERVES: AtomicU64 = AtomicU64::new(0);
static LOWERED: AtomicU64 = AtomicU64::new(0);
static RANGE_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Prints the adaptive counts (an exit hook of `abi_calls`).
pub fn report() {
    eprintln!(
        "pacer-fuzz: abi_calls adaptive_inits={} adaptive_range_refused={} adaptive_observes={} throttles_lowered={}",
        ADAPTIVE_INITS.load(Ordering::Relaxed),
        RANGE_REFUSED.load(Ordering::Relaxed),
        ADAPTIVE_OBSERVES.load(Ordering::Relaxed),
        LOWERED.load(Ordering::Relaxed),
    );
}

fn cstring(bytes: &[u8]) -> CString {
    let cut: Vec<u8> = bytes.iter().copied().take_while(|&b| b != 0).collect();
    CString::new(cut).expect("no NUL")
}

impl Run {
    fn new(fill: u8) -> Run {
        // A repeated byte never spells the pacer magic: uninitialised
        // storage stays uninitialised.
        Run {
            now: 1_000,
            pacers: (0..PACERS)
                .map(|_| PacerSlot {
                    mem: Aligned::filled(fill),
                    init: false,
                    generation: 0,
                    owner: None,
                    last_counters: None,
                    cfg: None,
                    booked: false,
                })
                .collect(),
            regs: (0..REGISTRIES)
                .map(|_| RegSlot {
                    mem: Aligned::filled(fill),
                    init: false,
                    keys: Vec::new(),
                })
                .collect(),
            tickets: Vec::new(),
            bookings: Vec::new(),
            notices: Vec::new(),
            arena: Vec::new(),
            strings: Vec::new(),
        }
    }

    /// The storage pointer an op asks for, and whether the call is to be
    /// made (a misaligned pointer only while its check is switched on).
    fn storage(&mut self, i: usize, ptr: Ptr) -> Option<(*mut Storage, PtrKind)> {
        let mem = &mut self.pacers[i].mem;
        match ptr {
            Ptr::Null => Some((std::ptr::null_mut(), PtrKind::Null)),
            Ptr::Misaligned(o) if expect().misaligned => {
                Some((mem.at(misaligned_offset(16, o)), PtrKind::Misaligned))
            }
            _ => Some((mem.at(0), PtrKind::Aligned)),
        }
    }

    fn snapshot(&self, i: usize) -> Vec<u8> {
        self.pacers[i].mem.0.to_vec()
    }

    /// [`Run::storage`] for a call on pacer `i`, with the pacer's bytes
    /// before the call.
    fn storage_before(&mut self, i: usize, ptr: Ptr) -> Option<(*mut Storage, PtrKind, Vec<u8>)> {
        let (storage, kind) = self.storage(i, ptr)?;
        Some((storage, kind, self.snapshot(i)))
    }

    /// [`Run::storage_before`] for a call at `now`, with the clock applied
    /// (also when there is no storage to call with).
    fn call_at(
        &mut self,
        i: usize,
        now: Clock,
        ptr: Ptr,
    ) -> Option<(u64, *mut Storage, PtrKind, Vec<u8>)> {
        let now = now.apply(&mut self.now);
        let (storage, kind, before) = self.storage_before(i, ptr)?;
        Some((now, storage, kind, before))
    }

    fn push_ticket(&mut self, t: pacer_ticket, issuer: Issuer) {
        if ticket::state(&t) == TICKET_LIVE || self.tickets.len() < 4 {
            if self.tickets.len() >= POOL {
                self.tickets.remove(0);
            }
            self.tickets.push(Tk { t, issuer });
        }
    }

    fn push_booking(&mut self, b: pacer_booking, issuer: Issuer) {
        if self.bookings.len() >= POOL {
            self.bookings.remove(0);
        }
        self.bookings.push(Bk { b, issuer });
    }

    fn push_notice(&mut self, n: pacer_notice) {
        if self.notices.len() >= POOL {
            self.notices.remove(0);
        }
        self.notices.push(n);
    }

    fn issuer(&self, i: usize) -> Issuer {
        Some((i, self.pacers[i].generation))
    }

    /// Checks a live ticket this pacer wrote: live, owner stable per instance.
    fn check_issued(&mut self, i: usize, t: &pacer_ticket) {
        let (_, debit, state, owner) = ticket::parts(t);
        assert!(
            state == TICKET_LIVE || state == TICKET_NONE,
            "ticket state {state}"
        );
        if state == TICKET_LIVE {
            assert!(debit > 0 && debit <= 60_000, "live ticket debit {debit}");
            if expect().foreign_ticket {
                assert_ne!(owner, 0, "live ticket with owner 0");
                match self.pacers[i].owner {
                    Some(o) => assert_eq!(o, owner, "one pacer wrote two owner tags"),
                    None => self.pacers[i].owner = Some(owner),
                }
            }
        }
    }

    /// The invariants of an initialised pacer, after any step.
    fn check_pacer(&mut self, i: usize) {
        if !self.pacers[i].init {
            return;
        }
        let storage: *const Storage = self.pacers[i].mem.at(0);
        let mut info = Out::<pacer_info>::new();
        let s = st(call!(pacer_get_info(storage, info.ptr())), "pacer_get_info");
        assert_eq!(s, OK, "pacer_get_info on an initialised pacer");
        let info = info.get();
        // The floor: -max_debt_units (SPEC §4); once this instance has
        // booked, -(B + r_max · cap_s · 1000) · R units (design.md,
        // Bookings: Debt), R = rate_per_min units per ms.
        // An adaptive pacer decides at its rate in force, up to the
        // ceiling: R is then the ceiling.
        let cfg = self.pacers[i]
            .cfg
            .expect("an initialised slot has its config");
        let floor = if self.pacers[i].booked {
            let cap_s = call!(pacer_hint_cap_s(info.wait_bound_ms)) as i128;
            debt_floor(&cfg, &info)
                + cfg.max_retries as i128 * cap_s * 1000 * top_rate(&cfg) as i128
        } else {
            debt_floor(&cfg, &info)
        };
        assert!(
            -floor <= info.tokens_units as i128 && info.tokens_units <= info.capacity_units,
            "tokens out of bounds: -{} <= {} <= {} fails (max_debt_units {}, booked {})",
            floor,
            info.tokens_units,
            info.capacity_units,
            info.max_debt_units,
            self.pacers[i].booked
        );
        assert!(info.mode <= 3, "mode {}", info.mode);
        assert!(
            info.release_policy <= 1,
            "release policy {}",
            info.release_policy
        );
        let mut counters = Out::<pacer_counters>::new();
        let s = st(
            call!(pacer_get_counters(storage, counters.ptr())),
            "pacer_get_counters",
        );
        assert_eq!(s, OK);
        let c = counters.get();
        assert!(
            c.admitted_after_wait <= c.admitted,
            "admitted_after_wait > admitted"
        );
        assert!(c.refunded <= c.released, "refunded > released");
        if let Some(last) = self.pacers[i].last_counters {
            let pairs = [
                (last.admitted, c.admitted),
                (last.admitted_after_wait, c.admitted_after_wait),
                (last.refused, c.refused),
                (last.shaped, c.shaped),
                (last.released, c.released),
                (last.refunded, c.refunded),
                (last.clock_regressions, c.clock_regressions),
            ];
            assert!(pairs.iter().all(|(a, b)| a <= b), "a counter went down");
        }
        self.pacers[i].last_counters = Some(c);
    }

    fn wait_bound(&self, i: usize) -> u64 {
        let storage: *const Storage = self.pacers[i].mem.0.as_ptr().cast();
        let mut info = Out::<pacer_info>::new();
        let s = st(call!(pacer_get_info(storage, info.ptr())), "pacer_get_info");
        assert_eq!(s, OK);
        info.get().wait_bound_ms
    }

    fn check_decision(&mut self, i: usize, d: &pacer_decision, booking_ok: bool) {
        match d.kind {
            KIND_ADMITTED => {
                let bound = self.wait_bound(i);
                assert!(
                    d.wait_ms <= bound,
                    "admitted wait {} above the bound {}",
                    d.wait_ms,
                    bound
                );
                assert_eq!(d.queued, d.wait_ms > 0, "queued disagrees with wait_ms");
                assert!(d.path >= 1 && d.path <= 5, "admitted path {}", d.path);
                let t = d.ticket;
                self.check_issued(i, &t);
            }
            KIND_REFUSED => {
                assert_eq!(d.path, 0, "refusal path");
                assert!(d.retry_after_s >= 1, "refusal without a hint");
                assert_eq!(
                    ticket::state(&d.ticket),
                    TICKET_NONE,
                    "refusal with a ticket"
                );
            }
            KIND_BOOKED if booking_ok => {
                assert!(d.retry_after_s >= 1, "booking without a hint");
                assert_eq!(
                    ticket::state(&d.ticket),
                    TICKET_NONE,
                    "booked decision with a ticket"
                );
            }
            k => panic!("decision kind {k}"),
        }
    }

    /// A failing call: status not OK, out-parameters untouched, pacer
    /// storage unchanged.
    #[track_caller]
    fn failed(&self, i: usize, before: &[u8], status: u32, outs_untouched: bool, what: &str) {
        assert_ne!(status, OK, "{what}: expected a failure");
        assert!(
            outs_untouched,
            "{what}: failed with status {status} but wrote an out-parameter"
        );
        assert_eq!(
            before,
            &self.pacers[i].mem.0[..],
            "{what}: failed with status {status} but changed the pacer storage"
        );
    }

    // -------------------------------------------------------------- ops

    fn init(&mut self, i: usize, cfg: Cfg, now: Clock, ptr: Ptr, null_cfg: bool) {
        let cfg = cfg.build();
        let Some((now, storage, kind, before)) = self.call_at(i, now, ptr) else {
            return;
        };
        let cptr: *const pacer_config = if null_cfg { std::ptr::null() } else { &cfg };
        let s = st(call!(pacer_init(storage, cptr, now)), "pacer_init");
        let valid = config_valid(&cfg);
        match kind {
            PtrKind::Aligned if !null_cfg => {
                if valid {
                    assert_eq!(
                        s,
                        OK,
                        "pacer_init rejected a valid config {:?}: {s}",
                        (
                            cfg.rate_per_min,
                            cfg.burst,
                            cfg.idle_timeout_ms,
                            cfg.max_retries,
                            cfg.release_policy,
                            cfg.adaptive_floor_per_min,
                            cfg.adaptive_ceiling_per_min
                        )
                    );
                    if adaptive_bounds(&cfg).is_some() {
                        ADAPTIVE_INITS.fetch_add(1, Ordering::Relaxed);
                    }
                    let p = &mut self.pacers[i];
                    p.init = true;
                    p.generation += 1;
                    p.owner = None;
                    p.last_counters = None;
                    p.cfg = Some(cfg);
                    p.booked = false;
                    self.check_pacer(i);
                } else {
                    self.failed(i, &before, s, true, "pacer_init(invalid config)");
                    if cfg.release_policy > 1 {
                        assert_eq!(s, INVALID_ENUM, "pacer_init: policy {}", cfg.release_policy);
                    }
                    if base_valid(&cfg) {
                        // Only the adaptive range is wrong.
                        assert_eq!(
                            s,
                            ADAPTIVE_RANGE,
                            "pacer_init: adaptive range (floor {}, ceiling {}) at rate {}",
                            cfg.adaptive_floor_per_min,
                            cfg.adaptive_ceiling_per_min,
                            cfg.rate_per_min
                        );
                        RANGE_REFUSED.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            PtrKind::Misaligned => {
                self.failed(i, &before, s, true, "pacer_init(misaligned)");
                if valid && !null_cfg {
                    assert_eq!(s, MISALIGNED, "pacer_init(misaligned)");
                }
            }
            _ => {
                self.failed(i, &before, s, true, "pacer_init(NULL)");
                assert_eq!(s, NULL_PARAMETER, "pacer_init(NULL)");
            }
        }
    }

    /// The status a call on pacer `i` through `kind` must fail with before
    /// looking at anything else, if any.
    fn storage_failure(&self, i: usize, kind: PtrKind) -> Option<u32> {
        match kind {
            PtrKind::Null => Some(NULL_PARAMETER),
            PtrKind::Misaligned => Some(MISALIGNED),
            PtrKind::Aligned if !self.pacers[i].init => Some(NOT_INITIALIZED),
            PtrKind::Aligned => None,
        }
    }

    fn reserve(&mut self, i: usize, now: Clock, ptr: Ptr, null_out: bool) {
        let Some((now, storage, kind, before)) = self.call_at(i, now, ptr) else {
            return;
        };
        let mut d = Out::<pacer_decision>::new();
        let dptr = d.ptr_or_null(null_out);
        let s = st(call!(pacer_reserve(storage, now, dptr)), "pacer_reserve");
        if let Some(want) = self.storage_failure(i, kind) {
            self.failed(i, &before, s, d.untouched(), "pacer_reserve");
            assert_eq!(s, want, "pacer_reserve");
        } else if null_out {
            self.failed(i, &before, s, true, "pacer_reserve(NULL out)");
        } else {
            assert_eq!(s, OK, "pacer_reserve on a valid pacer");
            let d = d.get();
            self.check_decision(i, &d, false);
            let issuer = self.issuer(i);
            self.push_ticket(d.ticket, issuer);
        }
    }

    fn reserve_or_book(&mut self, i: usize, now: Clock, retries_left: u32, ptr: Ptr, nulls: u8) {
        let Some((now, storage, kind, before)) = self.call_at(i, now, ptr) else {
            return;
        };
        let mut d = Out::<pacer_decision>::new();
        let mut b = Out::<pacer_booking>::new();
        let dptr = d.ptr_or_null(nulls & 1 != 0);
        let mut bmis = Aligned::<64>::filled(SENTINEL);
        let mis = nulls & 4 != 0 && expect().misaligned;
        let bptr = if nulls & 2 != 0 {
            std::ptr::null_mut()
        } else if mis {
            // A booking needs 8-byte alignment.
            bmis.at::<pacer_booking>(misaligned_offset(8, nulls >> 3))
        } else {
            b.ptr()
        };
        let s = st(
            call!(pacer_reserve_or_book(
                storage,
                now,
                retries_left,
                dptr,
                bptr
            )),
            "pacer_reserve_or_book",
        );
        let bmis_untouched = bmis.0.iter().all(|&x| x == SENTINEL);
        if let Some(want) = self.storage_failure(i, kind) {
            self.failed(
                i,
                &before,
                s,
                d.untouched() && b.untouched() && bmis_untouched,
                "pacer_reserve_or_book",
            );
            assert_eq!(s, want, "pacer_reserve_or_book");
        } else if nulls & 3 == 0 && mis {
            self.failed(
                i,
                &before,
                s,
                d.untouched() && bmis_untouched,
                "pacer_reserve_or_book(misaligned out_booking)",
            );
            assert_eq!(
                s, MISALIGNED,
                "pacer_reserve_or_book(misaligned out_booking)"
            );
        } else if nulls & 3 != 0 {
            self.failed(
                i,
                &before,
                s,
                d.untouched() && b.untouched() && bmis_untouched,
                "pacer_reserve_or_book(NULL)",
            );
            assert_eq!(s, NULL_PARAMETER);
        } else {
            assert_eq!(s, OK, "pacer_reserve_or_book on a valid pacer");
            let d = d.get();
            self.check_decision(i, &d, true);
            let issuer = self.issuer(i);
            if d.kind == KIND_BOOKED {
                self.pacers[i].booked = true;
                assert!(!b.untouched(), "booked without writing the booking");
                let bk = b.get();
                self.check_issued(i, &bk.ticket);
                assert_eq!(
                    ticket::state(&bk.ticket),
                    TICKET_LIVE,
                    "a booking's ticket is live"
                );
                self.push_booking(bk, issuer);
            } else {
                assert!(b.untouched(), "not booked, yet *out_booking was written");
                self.push_ticket(d.ticket, issuer);
            }
        }
    }

    fn foreign(&self, i: usize, issuer: Issuer, owner: u32) -> Option<bool> {
        // Known issuer: foreign unless the very instance now in slot i.
        // Forged owner: foreign unless it equals this instance's tag.
        match issuer {
            Some(x) => Some(x != (i, self.pacers[i].generation)),
            None => self.pacers[i].owner.map(|o| o != owner),
        }
    }

    fn redeem(&mut self, i: usize, b: u8, now: Clock, ptr: Ptr, bptr: Ptr, null_out: bool) {
        let now = now.apply(&mut self.now);
        let Some(bi) = pick(&self.bookings, b) else {
            return;
        };
        let Some((storage, kind, before)) = self.storage_before(i, ptr) else {
            return;
        };
        let booking = self.bookings[bi].b;
        let issuer = self.bookings[bi].issuer;
        let mut bmem = Aligned::<64>::filled(0);
        let (bp, bkind) = place(&mut bmem, bptr, booking);
        let bbefore = bmem.0;
        let mut d = Out::<pacer_decision>::new();
        let dptr = d.ptr_or_null(null_out);
        let s = st(call!(pacer_redeem(storage, bp, now, dptr)), "pacer_redeem");
        let untouched = d.untouched() && bmem.0 == bbefore;
        let state = ticket::state(&booking.ticket);
        let foreign = self.foreign(i, issuer, ticket::owner(&booking.ticket));
        if let Some(want) = self.storage_failure(i, kind) {
            self.failed(i, &before, s, untouched, "pacer_redeem");
            assert_eq!(s, want, "pacer_redeem");
            return;
        }
        if bkind != PtrKind::Aligned || null_out {
            self.failed(i, &before, s, untouched, "pacer_redeem(bad pointer)");
            let want = if bkind == PtrKind::Null || null_out {
                NULL_PARAMETER
            } else {
                MISALIGNED
            };
            if bkind == PtrKind::Misaligned && null_out {
                assert!(s == NULL_PARAMETER || s == MISALIGNED, "pacer_redeem: {s}");
            } else {
                assert_eq!(s, want, "pacer_redeem(bad pointer)");
            }
            return;
        }
        if state != TICKET_LIVE {
            self.failed(i, &before, s, untouched, "pacer_redeem(not live)");
            assert!(
                s == INVALID_TICKET || s == INVALID_ENUM,
                "pacer_redeem(not live): {s}"
            );
            return;
        }
        if expect().foreign_ticket && foreign == Some(true) {
            self.failed(i, &before, s, untouched, "pacer_redeem(foreign)");
            assert_eq!(s, FOREIGN_TICKET, "pacer_redeem(foreign booking)");
            return;
        }
        if s != OK {
            // A forged booking may be refused in ways the model does not
            // predict (e.g. an unknown owner); it must still change nothing.
            self.failed(i, &before, s, untouched, "pacer_redeem");
            assert!(
                foreign != Some(false) || !expect().foreign_ticket,
                "pacer_redeem refused its own live booking: {s}"
            );
            return;
        }
        let d = d.get();
        // SAFETY: aligned, within bmem.
        let after = unsafe { bp.read() };
        match d.kind {
            KIND_ADMITTED => {
                assert_eq!(d.path, PATH_BOOKED, "redeemed admission path");
                let bound = self.wait_bound(i);
                assert!(
                    d.wait_ms <= bound,
                    "redeemed wait {} above the bound {bound}",
                    d.wait_ms
                );
                assert_eq!(
                    ticket::state(&after.ticket),
                    TICKET_SPENT,
                    "redeemed booking not spent"
                );
                assert_eq!(
                    ticket::state(&d.ticket),
                    TICKET_LIVE,
                    "redeemed admission without a ticket"
                );
                self.bookings[bi].b = after;
                self.push_ticket(d.ticket, issuer);
            }
            KIND_BOOKED => {
                assert_eq!(bmem.0, bbefore, "not yet: the booking changed");
                assert!(d.retry_after_s >= 1, "not yet without a hint");
            }
            k => panic!("pacer_redeem decision kind {k}"),
        }
    }

    /// Releases `t` (a ticket value) on pacer `i`; returns the ticket after
    /// the call and whether it refunded.
    #[allow(clippy::too_many_arguments)]
    fn release_one(
        &mut self,
        i: usize,
        t: pacer_ticket,
        issuer: Issuer,
        now: u64,
        ptr: Ptr,
        tptr: Ptr,
        null_out: bool,
        what: &str,
    ) -> (pacer_ticket, Option<bool>) {
        let Some((storage, kind, before)) = self.storage_before(i, ptr) else {
            return (t, None);
        };
        let mut tmem = Aligned::<64>::filled(0);
        let (tp, tkind) = place(&mut tmem, tptr, t);
        let tbefore = tmem.0;
        let mut r = Out::<bool>::new();
        let rptr = r.ptr_or_null(null_out);
        let s = st(call!(pacer_release(storage, tp, now, rptr)), what);
        let untouched = r.untouched() && tmem.0 == tbefore;
        if let Some(want) = self.storage_failure(i, kind) {
            self.failed(i, &before, s, untouched, what);
            assert_eq!(s, want, "{what}");
            return (t, None);
        }
        if tkind != PtrKind::Aligned || null_out {
            self.failed(i, &before, s, untouched, what);
            return (t, None);
        }
        let (_, _, state, owner) = ticket::parts(&t);
        let foreign = self.foreign(i, issuer, owner);
        if state > TICKET_SPENT {
            self.failed(i, &before, s, untouched, what);
            assert_eq!(s, INVALID_ENUM, "{what}: ticket state {state}");
            return (t, None);
        }
        if expect().foreign_ticket && state == TICKET_LIVE && foreign == Some(true) {
            self.failed(i, &before, s, untouched, what);
            assert_eq!(s, FOREIGN_TICKET, "{what}: a live ticket of another pacer");
            return (t, None);
        }
        if s != OK {
            self.failed(i, &before, s, untouched, what);
            assert!(
                !expect().foreign_ticket || foreign != Some(false),
                "{what}: its own ticket refused with {s}"
            );
            return (t, None);
        }
        let refunded = r.get();
        // SAFETY: aligned, within tmem.
        let after = unsafe { tp.read() };
        if state == TICKET_LIVE {
            assert_eq!(
                ticket::state(&after),
                TICKET_SPENT,
                "{what}: released ticket not spent"
            );
        } else {
            assert!(!refunded, "{what}: a ticket in state {state} refunded");
            assert_eq!(tmem.0, tbefore, "{what}: a dead ticket changed");
            assert_eq!(
                before,
                &self.pacers[i].mem.0[..],
                "{what}: a dead ticket changed the pacer"
            );
        }
        (after, Some(refunded))
    }

    /// [`Run::release_one`] through aligned pointers and into an out-parameter.
    fn release_plain(
        &mut self,
        i: usize,
        t: pacer_ticket,
        issuer: Issuer,
        now: u64,
        what: &str,
    ) -> (pacer_ticket, Option<bool>) {
        self.release_one(i, t, issuer, now, Ptr::Aligned, Ptr::Aligned, false, what)
    }

    /// The second release of a ticket (a booking's when `booking`) whose
    /// first release answered `first`: it may not refund again. Returns the
    /// ticket after it.
    fn release_again(
        &mut self,
        i: usize,
        t: pacer_ticket,
        issuer: Issuer,
        now: u64,
        first: Option<bool>,
        booking: bool,
    ) -> pacer_ticket {
        let (call, what) = if booking {
            ("pacer_release(booking again)", "a booking")
        } else {
            ("pacer_release(again)", "a ticket struct")
        };
        let (again, second) = self.release_plain(i, t, issuer, now, call);
        if first == Some(true) {
            assert_ne!(second, Some(true), "{what} released twice refunded twice");
        }
        again
    }

    fn release(&mut self, i: usize, call: ReleaseCall) {
        let now = call.now.apply(&mut self.now);
        let Some(ti) = pick(&self.tickets, call.t) else {
            return;
        };
        let Tk { t, issuer } = self.tickets[ti];
        let (ptr, tptr) = (call.ptr, call.tptr);
        let (after, refunded) =
            self.release_one(i, t, issuer, now, ptr, tptr, call.null_out, "pacer_release");
        self.tickets[ti].t = after;
        if call.twice {
            self.check_pacer(i);
            let again = self.release_again(i, after, issuer, now, refunded, false);
            self.tickets[ti].t = again;
        }
    }

    fn release_booking(&mut self, i: usize, b: u8, now: Clock, twice: bool) {
        let now = now.apply(&mut self.now);
        let Some(bi) = pick(&self.bookings, b) else {
            return;
        };
        let issuer = self.bookings[bi].issuer;
        let t = self.bookings[bi].b.ticket;
        let (after, refunded) = self.release_plain(i, t, issuer, now, "pacer_release(booking)");
        self.bookings[bi].b.ticket = after;
        if twice {
            let again = self.release_again(i, after, issuer, now, refunded, true);
            self.bookings[bi].b.ticket = again;
        }
    }

    fn read_state(&mut self, i: usize, ptr: Ptr, null_out: bool, counters: bool) {
        let Some((storage, kind, before)) = self.storage_before(i, ptr) else {
            return;
        };
        let (s, untouched) = if counters {
            let mut o = Out::<pacer_counters>::new();
            let p = o.ptr_or_null(null_out);
            (
                st(call!(pacer_get_counters(storage, p)), "pacer_get_counters"),
                o.untouched(),
            )
        } else {
            let mut o = Out::<pacer_info>::new();
            let p = o.ptr_or_null(null_out);
            (
                st(call!(pacer_get_info(storage, p)), "pacer_get_info"),
                o.untouched(),
            )
        };
        if let Some(want) = self.storage_failure(i, kind) {
            self.failed(i, &before, s, untouched, "pacer_get_info/counters");
            assert_eq!(s, want);
        } else if null_out {
            self.failed(i, &before, s, untouched, "pacer_get_info/counters(NULL)");
            assert_eq!(s, NULL_PARAMETER);
        } else {
            assert_eq!(s, OK);
        }
    }

    // -------------------------------------------------------- adaptive

    /// The rate in force of the initialised pacer `i` at `now` (through an
    /// aligned pointer; must succeed).
    fn rate_now(&self, i: usize, now: u64) -> u32 {
        let storage: *const Storage = self.pacers[i].mem.0.as_ptr().cast();
        let mut r = Out::<u32>::new();
        let s = st(
            call!(pacer_rate_in_force(storage, now, r.ptr())),
            "pacer_rate_in_force",
        );
        assert_eq!(s, OK, "pacer_rate_in_force on an initialised pacer");
        r.get()
    }

    fn observe(&mut self, i: usize, outcome: OutcomeArg, now: Clock, ptr: Ptr, null_out: bool) {
        let now = now.apply(&mut self.now);
        let Some((storage, kind)) = self.storage(i, ptr) else {
            return;
        };
        let code = outcome.code();
        let known = outcome_known(code);
        let failure = self.storage_failure(i, kind);
        // The rate in force just before (pacer_rate_in_force only reads).
        let was = failure.is_none().then(|| self.rate_now(i, now));
        let before = self.snapshot(i);
        let mut r = Out::<u32>::new();
        let rp = r.ptr_or_null(null_out);
        let s = st(
            call!(pacer_observe(storage, code, now, rp)),
            "pacer_observe",
        );
        if let Some(want) = failure {
            self.failed(i, &before, s, r.untouched(), "pacer_observe");
            assert_eq!(s, want, "pacer_observe");
        } else if null_out {
            self.failed(i, &before, s, true, "pacer_observe(NULL out)");
            if known {
                assert_eq!(s, NULL_PARAMETER, "pacer_observe(NULL out)");
            } else {
                // Two bad arguments: either may be reported.
                assert!(
                    s == NULL_PARAMETER || s == INVALID_ENUM,
                    "pacer_observe(NULL out, outcome {code}): {s}"
                );
            }
        } else if !known {
            self.failed(
                i,
                &before,
                s,
                r.untouched(),
                "pacer_observe(unknown outcome)",
            );
            assert_eq!(s, INVALID_ENUM, "pacer_observe(outcome {code})");
        } else {
            assert_eq!(s, OK, "pacer_observe({code}) on a valid pacer");
            let rate = r.get();
            let was = was.expect("read before the call");
            let cfg = self.pacers[i]
                .cfg
                .expect("an initialised slot has its config");
            check_rate(&cfg, rate, "pacer_observe");
            if adaptive_bounds(&cfg).is_none() {
                assert!(
                    only_its_count(&before, &self.pacers[i].mem.0, code),
                    "pacer_observe changed a non-adaptive pacer beyond counting the outcome"
                );
            } else {
                ADAPTIVE_OBSERVES.fetch_add(1, Ordering::Relaxed);
            }
            if code == OUTCOME_OPENED {
                // An opening is counted (an adaptive pacer's control word
                // changes) but never moves the rate in force.
                assert_eq!(rate, was, "pacer_observe(OPENED) moved the rate in force");
            } else {
                // A throttle ending a search may set the rate to what got
                // through, above the rate then (SPEC §14); check_rate keeps
                // it within the range.
                if rate < was {
                    LOWERED.fetch_add(1, Ordering::Relaxed);
                }
            }
            let after = self.rate_now(i, now);
            assert_eq!(
                after, rate,
                "pacer_observe reported {rate}, but the rate in force after it is {after}"
            );
        }
    }

    fn rate_in_force(&mut self, i: usize, now: Clock, ptr: Ptr, null_out: bool) {
        let Some((now, storage, kind, before)) = self.call_at(i, now, ptr) else {
            return;
        };
        let mut r = Out::<u32>::new();
        let rp = r.ptr_or_null(null_out);
        let s = st(
            call!(pacer_rate_in_force(storage, now, rp)),
            "pacer_rate_in_force",
        );
        if let Some(want) = self.storage_failure(i, kind) {
            self.failed(i, &before, s, r.untouched(), "pacer_rate_in_force");
            assert_eq!(s, want, "pacer_rate_in_force");
        } else if null_out {
            self.failed(i, &before, s, true, "pacer_rate_in_force(NULL out)");
            assert_eq!(s, NULL_PARAMETER, "pacer_rate_in_force(NULL out)");
        } else {
            assert_eq!(s, OK, "pacer_rate_in_force on a valid pacer");
            let cfg = self.pacers[i]
                .cfg
                .expect("an initialised slot has its config");
            check_rate(&cfg, r.get(), "pacer_rate_in_force");
            assert_eq!(
                before,
                &self.pacers[i].mem.0[..],
                "pacer_rate_in_force changed the pacer"
            );
        }
    }

    // ------------------------------------------------------ renderers

    /// Runs a renderer with the buffer `buf` asks for and checks the
    /// buffer rules. `expect_ok`: the other arguments are valid.
    fn render(
        &mut self,
        buf: Buf,
        null_out: bool,
        what: &str,
        f: &mut dyn FnMut(*mut u8, usize, *mut usize) -> u32,
    ) -> Option<Vec<u8>> {
        let (null, len) = match buf {
            Buf::NullZero => (true, 0usize),
            Buf::NonNullZero => (false, 0),
            Buf::NullWithLen(n) => (true, n as usize + 1),
            Buf::Len(n) => (false, n as usize % 2048),
            Buf::Exact | Buf::ExactMinus(_) => {
                let mut w = Out::<usize>::new();
                let s = f(std::ptr::null_mut(), 0, w.ptr());
                if s != BUFFER_TOO_SHORT && s != OK {
                    assert!(
                        w.untouched(),
                        "{what}: failed with {s} but wrote *out_written"
                    );
                    return None;
                }
                let needed = w.get();
                match buf {
                    Buf::ExactMinus(k) => (false, needed.saturating_sub(1 + k as usize)),
                    _ => (false, needed),
                }
            }
        };
        // The buffer is exactly `len` bytes (one more kept as a guard for
        // len 0), so ASan sees any write past it.
        let mut mem = vec![SENTINEL; len.max(1)];
        let ptr = if null {
            std::ptr::null_mut()
        } else {
            mem.as_mut_ptr()
        };
        let mut w = Out::<usize>::new();
        let wptr = w.ptr_or_null(null_out);
        let s = f(ptr, len, wptr);
        let buf_untouched = mem.iter().all(|&b| b == SENTINEL);
        match s {
            OK => {
                assert!(!null_out, "{what}: OK with a NULL out_written");
                let n = w.get();
                assert!(n <= len, "{what}: wrote {n} > len {len}");
                assert!(
                    mem[n..len.max(n)].iter().all(|&b| b == SENTINEL),
                    "{what}: wrote past *out_written"
                );
                let text = mem[..n].to_vec();
                assert!(
                    std::str::from_utf8(&text).is_ok(),
                    "{what}: output is not UTF-8"
                );
                Some(text)
            }
            BUFFER_TOO_SHORT => {
                assert!(
                    buf_untouched,
                    "{what}: BUFFER_TOO_SHORT but the buffer was written"
                );
                let needed = w.get();
                assert!(
                    needed > len,
                    "{what}: BUFFER_TOO_SHORT with needed {needed} <= len {len}"
                );
                // Measured: a buffer of exactly that length takes it all.
                let mut again = vec![SENTINEL; needed];
                let mut w2 = Out::<usize>::new();
                let s2 = f(again.as_mut_ptr(), needed, w2.ptr());
                assert_eq!(s2, OK, "{what}: the measured length {needed} does not fit");
                assert_eq!(
                    w2.get(),
                    needed,
                    "{what}: measured {needed}, wrote another length"
                );
                None
            }
            _ => {
                assert!(
                    buf_untouched && w.untouched(),
                    "{what}: failed with {s} but wrote an output"
                );
                if null && len > 0 && !null_out {
                    // Other arguments may fail first; NULL with a length
                    // must never succeed (checked by reaching here).
                }
                None
            }
        }
    }

    fn notice_ptr(&mut self, src: &NoticeSrc) -> Option<pacer_notice> {
        match src {
            NoticeSrc::Pool(i) => pick(&self.notices, *i).map(|i| self.notices[i]),
            NoticeSrc::Forged {
                kind,
                reserved,
                values,
                raw,
            } => {
                let (raw, raw_len): (*const c_char, usize) = match raw {
                    Raw::None => (std::ptr::null(), 0),
                    Raw::NullWithLen(n) => (std::ptr::null(), *n as usize + 1),
                    Raw::EmptyNonNull => (c"".as_ptr(), 0),
                    Raw::Bytes(b) => {
                        let b = b.clone();
                        let p = b.as_ptr().cast();
                        let l = b.len();
                        self.arena.push(b);
                        (if l == 0 { c"".as_ptr() } else { p }, l)
                    }
                };
                Some(pacer_notice {
                    // Mostly known kinds, sometimes anything.
                    kind: if *kind >= 0x1000 { *kind } else { *kind % 14 },
                    reserved: *reserved,
                    values: *values,
                    raw,
                    raw_len,
                })
            }
        }
    }

    fn notice_render(
        &mut self,
        n: &NoticeSrc,
        buf: Buf,
        key: bool,
        null_notice: bool,
        null_out: bool,
    ) {
        let Some(notice) = self.notice_ptr(n) else {
            return;
        };
        let np: *const pacer_notice = if null_notice {
            std::ptr::null()
        } else {
            &notice
        };
        let what = if key {
            "pacer_notice_key"
        } else {
            "pacer_notice_render"
        };
        let mut f = |b: *mut u8, l: usize, w: *mut usize| -> u32 {
            if key {
                st(call!(pacer_notice_key(np, b, l, w)), "pacer_notice_key")
            } else {
                st(
                    call!(pacer_notice_render(np, b, l, w)),
                    "pacer_notice_render",
                )
            }
        };
        let out = self.render(buf, null_out, what, &mut f);
        if null_notice {
            assert!(out.is_none(), "{what}(NULL notice) succeeded");
        }
        let kind_ok = (1..=12).contains(&notice.kind);
        if !kind_ok {
            assert!(
                out.is_none(),
                "{what}: unknown kind {} rendered",
                notice.kind
            );
        }
    }

    fn refusal_body(
        &mut self,
        prefix: &Option<Vec<u8>>,
        retry_after_s: u64,
        buf: Buf,
        null_out: bool,
    ) {
        let c = prefix.as_ref().map(|p| cstring(p));
        let pp: *const c_char = c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let mut f = |b: *mut u8, l: usize, w: *mut usize| -> u32 {
            st(
                call!(pacer_refusal_body(pp, retry_after_s, b, l, w)),
                "pacer_refusal_body",
            )
        };
        let out = self.render(buf, null_out, "pacer_refusal_body", &mut f);
        let utf8 = c
            .as_ref()
            .is_some_and(|c| std::str::from_utf8(c.as_bytes()).is_ok());
        if c.is_none() || !utf8 {
            assert!(
                out.is_none(),
                "pacer_refusal_body succeeded on a NULL or non-UTF-8 prefix"
            );
        }
        if let Some(body) = out {
            let text = String::from_utf8(body).unwrap();
            assert!(
                text.contains(&retry_after_s.to_string()),
                "refusal body without its retry-after"
            );
        }
    }

    fn resolve(&mut self, s: &[Option<Vec<u8>>; 4], null_budget: bool, with_notices: bool) {
        let cs: Vec<Option<CString>> = s.iter().map(|o| o.as_ref().map(|b| cstring(b))).collect();
        let ptrs: Vec<*const c_char> = cs
            .iter()
            .map(|o| o.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
            .collect();
        let mut budget = Out::<pacer_budget>::new();
        let mut notices = Out::<pacer_notices>::new();
        let bp = budget.ptr_or_null(null_budget);
        let np = if with_notices {
            notices.ptr()
        } else {
            std::ptr::null_mut()
        };
        let status = st(
            call!(pacer_resolve(ptrs[0], ptrs[1], ptrs[2], ptrs[3], bp, np)),
            "pacer_resolve",
        );
        let bad: Vec<bool> = cs
            .iter()
            .map(|o| {
                o.as_ref()
                    .is_some_and(|c| std::str::from_utf8(c.as_bytes()).is_err())
            })
            .collect();
        let any_bad = bad.iter().any(|b| *b);
        if status != OK {
            assert!(
                budget.untouched() && notices.untouched(),
                "pacer_resolve failed with {status} but wrote an output"
            );
            if null_budget {
                assert!(
                    status == NULL_PARAMETER || (status == INVALID_UTF8 && any_bad),
                    "pacer_resolve(NULL budget): {status}"
                );
            } else if any_bad {
                assert!(
                    !expect().resolve_non_utf8,
                    "pacer_resolve rejected non-UTF-8 settings with {status}"
                );
                assert_eq!(status, INVALID_UTF8, "pacer_resolve(non-UTF-8)");
            } else {
                panic!("pacer_resolve failed on UTF-8 settings: {status}");
            }
            for c in cs.into_iter().flatten() {
                self.strings.push(c);
            }
            return;
        }
        assert!(!null_budget, "pacer_resolve OK with a NULL budget");
        let b = budget.get();
        assert!(b.rate_per_min <= 600, "resolved rate {}", b.rate_per_min);
        assert!(
            b.max_retries <= call!(pacer_ladder_ceiling(b.idle_timeout_ms)),
            "resolved retries above the ladder ceiling"
        );
        // Every resolved budget is a config pacer_init accepts.
        let cfg = pacer_config {
            rate_per_min: b.rate_per_min,
            burst: 10,
            idle_timeout_ms: b.idle_timeout_ms,
            max_retries: b.max_retries,
            release_policy: 0,
            adaptive_floor_per_min: 0,
            adaptive_ceiling_per_min: 0,
        };
        let mut scratch = Aligned::<STORE>::filled(0);
        let s = st(
            call!(pacer_init(scratch.at(0), &cfg, 0)),
            "pacer_init(resolved)",
        );
        assert_eq!(s, OK, "pacer_init rejects a resolved budget");
        if with_notices {
            let n = notices.get();
            assert!(n.count <= n.items.len(), "notice count {}", n.count);
            let kinds: Vec<u32> = n.items[..n.count].iter().map(|x| x.kind).collect();
            for (field, malformed) in [1u32, 3, 5, 7].into_iter().enumerate() {
                if bad[field] && expect().resolve_non_utf8 {
                    assert!(
                        kinds.contains(&malformed),
                        "non-UTF-8 setting {field} without a malformed notice: {kinds:?}"
                    );
                }
            }
            for item in &n.items[..n.count] {
                assert!(
                    !call!(pacer_notice_kind_name(item.kind)).is_null(),
                    "resolved notice of unknown kind"
                );
                self.push_notice(*item);
            }
        }
        for c in cs.into_iter().flatten() {
            self.strings.push(c);
        }
    }

    fn mode_notice(&mut self, cfg: Cfg, nulls: u8) {
        let cfg = cfg.build();
        let cp: *const pacer_config = if nulls & 1 != 0 {
            std::ptr::null()
        } else {
            &cfg
        };
        let mut n = Out::<pacer_notice>::new();
        let mut present = Out::<bool>::new();
        let np = n.ptr_or_null(nulls & 2 != 0);
        let pp = present.ptr_or_null(nulls & 4 != 0);
        let s = st(call!(pacer_mode_notice(cp, np, pp)), "pacer_mode_notice");
        if s != OK {
            assert!(
                n.untouched() && present.untouched(),
                "pacer_mode_notice failed with {s} but wrote"
            );
            assert!(
                nulls & 7 != 0 || !config_valid(&cfg),
                "pacer_mode_notice rejected a valid config: {s}"
            );
            if nulls & 7 == 0 && base_valid(&cfg) {
                // "An invalid config returns the status pacer_init would."
                assert_eq!(s, ADAPTIVE_RANGE, "pacer_mode_notice: adaptive range");
            }
            return;
        }
        assert!(
            nulls & 7 == 0 && config_valid(&cfg),
            "pacer_mode_notice OK on NULL or an invalid config"
        );
        if present.get() {
            let n = n.get();
            assert!(n.kind == 11 || n.kind == 12, "mode notice kind {}", n.kind);
            self.push_notice(n);
        } else {
            assert!(n.untouched(), "no mode notice, yet *out_notice was written");
        }
    }

    // ------------------------------------------------------- registry

    fn registry(&mut self, r: usize, ptr: Ptr) -> (*mut pacer_notice_registry, PtrKind) {
        let mem = &mut self.regs[r].mem;
        match ptr {
            Ptr::Null => (std::ptr::null_mut(), PtrKind::Null),
            Ptr::Misaligned(o) if expect().misaligned => {
                (mem.at(misaligned_offset(8, o)), PtrKind::Misaligned)
            }
            _ => (mem.at(0), PtrKind::Aligned),
        }
    }

    fn reg_init(&mut self, r: usize, ptr: Ptr) {
        let (p, kind) = self.registry(r, ptr);
        let before = self.regs[r].mem.0;
        let s = st(
            call!(pacer_notice_registry_init(p)),
            "pacer_notice_registry_init",
        );
        match kind {
            PtrKind::Aligned => {
                assert_eq!(s, OK);
                self.regs[r].init = true;
                self.regs[r].keys.clear();
            }
            PtrKind::Null => assert_eq!(s, NULL_PARAMETER),
            PtrKind::Misaligned => {
                assert_eq!(s, MISALIGNED, "pacer_notice_registry_init(misaligned)");
                assert_eq!(before, self.regs[r].mem.0, "misaligned registry init wrote");
            }
        }
    }

    fn reg_first(&mut self, r: usize, n: &NoticeSrc, ptr: Ptr, null_notice: bool, null_out: bool) {
        let Some(notice) = self.notice_ptr(n) else {
            return;
        };
        if !self.regs[r].init && !expect().registry_magic && !matches!(ptr, Ptr::Null) {
            // Unfixed: an uninitialised registry is read as garbage.
            return;
        }
        // The key the model dedupes by (equal keys are the same notice).
        let mut key = vec![0u8; 4096];
        let mut kw = Out::<usize>::new();
        let ks = st(
            call!(pacer_notice_key(
                &notice,
                key.as_mut_ptr(),
                key.len(),
                kw.ptr()
            )),
            "pacer_notice_key",
        );
        let key = (ks == OK).then(|| key[..kw.get()].to_vec());
        let (p, kind) = self.registry(r, ptr);
        let before = self.regs[r].mem.0;
        let np: *const pacer_notice = if null_notice {
            std::ptr::null()
        } else {
            &notice
        };
        let mut first = Out::<bool>::new();
        let fp = first.ptr_or_null(null_out);
        let s = st(
            call!(pacer_notice_registry_first_time(p, np, fp)),
            "pacer_notice_registry_first_time",
        );
        let fail_untouched = |s: u32, first: &Out<bool>, me: &Self| {
            assert_ne!(
                s, OK,
                "pacer_notice_registry_first_time: expected a failure"
            );
            assert!(
                first.untouched(),
                "first_time failed with {s} but wrote *out_first"
            );
            assert_eq!(
                before, me.regs[r].mem.0,
                "first_time failed with {s} but changed the registry"
            );
        };
        match kind {
            PtrKind::Null => {
                fail_untouched(s, &first, self);
                assert_eq!(s, NULL_PARAMETER);
                return;
            }
            PtrKind::Misaligned => {
                fail_untouched(s, &first, self);
                assert_eq!(s, MISALIGNED, "first_time(misaligned registry)");
                return;
            }
            PtrKind::Aligned => {}
        }
        if null_notice || null_out || key.is_none() {
            fail_untouched(s, &first, self);
            return;
        }
        if !self.regs[r].init {
            fail_untouched(s, &first, self);
            assert_eq!(
                s, NOT_INITIALIZED,
                "first_time on an uninitialised registry"
            );
            return;
        }
        assert_eq!(s, OK, "first_time failed on a notice whose key renders");
        let key = key.unwrap();
        let reg = &mut self.regs[r];
        let want = if reg.keys.contains(&key) {
            false
        } else {
            if reg.keys.len() < REGISTRY_CAPACITY {
                reg.keys.push(key);
            }
            true
        };
        assert_eq!(
            first.get(),
            want,
            "registry disagrees with the model (keys seen {})",
            reg.keys.len()
        );
    }

    fn reg_garbage(&mut self, r: usize, fill: u8) {
        self.regs[r].mem.0.fill(fill);
        self.regs[r].init = false;
        self.regs[r].keys.clear();
    }

    // ------------------------------------------------------------ misc

    fn status_str(&mut self, n: u32) {
        for v in [n, n % 64, u32::MAX - (n % 4)] {
            let p = call!(pacer_status_str(v));
            assert!(!p.is_null(), "pacer_status_str({v}) is NULL");
            // SAFETY: static NUL-terminated text.
            let text = unsafe { std::ffi::CStr::from_ptr(p) };
            assert!(!text.to_bytes().is_empty(), "pacer_status_str({v}) empty");
        }
    }

    fn kind_name(&mut self, k: u32) {
        for v in [k, k % 16] {
            let p = call!(pacer_notice_kind_name(v));
            assert_eq!(
                p.is_null(),
                !(1..=12).contains(&v),
                "pacer_notice_kind_name({v})"
            );
        }
    }

    fn derived(&mut self, idle: u64, retries: u32, bound: u64, required: u64, rate: u32) {
        let ceiling = call!(pacer_ladder_ceiling(idle));
        let wb = call!(pacer_wait_bound_ms(idle, retries));
        assert!(wb <= 15_000, "wait bound {wb}");
        let cap = call!(pacer_hint_cap_s(bound));
        assert!(cap >= 1, "hint cap {cap}");
        let hint = call!(pacer_retry_after_s(required, bound));
        assert!(
            hint >= 1 && hint <= cap,
            "retry-after {hint} outside 1..={cap}"
        );
        let _ = call!(pacer_can_refuse(rate, retries, bound));
        let _ = call!(pacer_wait_bound_ms(idle, ceiling));
    }

    fn constants(&mut self) {
        assert!(!call!(pacer_version()).is_null());
        assert_eq!(call!(pacer_abi_version()), PACER_ABI_VERSION);
        assert!(!call!(pacer_refusal_content_type()).is_null());
        let _ = call!(pacer_clock_monotonic_ms());
        for n in [MISALIGNED, FOREIGN_TICKET, ADAPTIVE_RANGE] {
            let _ = status_known(n);
        }
    }

    fn step(&mut self, op: &Op) {
        let p = |x: u8| x as usize % PACERS;
        let r = |x: u8| x as usize % REGISTRIES;
        match *op {
            Op::Init(c) => self.init(p(c.p), c.cfg, c.now, c.ptr, c.null_cfg),
            Op::Reserve(c) => self.reserve(p(c.p), c.now, c.ptr, c.null_out),
            Op::ReserveOrBook(c) => {
                self.reserve_or_book(p(c.p), c.now, c.retries_left, c.ptr, c.nulls)
            }
            Op::Redeem {
                p: i,
                b,
                now,
                ptr,
                bptr,
                null_out,
            } => self.redeem(p(i), b, now, ptr, bptr, null_out),
            Op::Release(c) => self.release(p(c.p), c),
            Op::ReleaseBooking {
                p: i,
                b,
                now,
                twice,
            } => self.release_booking(p(i), b, now, twice),
            Op::CopyTicket { t } => {
                if let Some(ti) = pick(&self.tickets, t) {
                    let copy = Tk {
                        t: self.tickets[ti].t,
                        issuer: self.tickets[ti].issuer,
                    };
                    self.push_ticket(copy.t, copy.issuer);
                }
            }
            Op::ForgeTicket {
                seq,
                debit,
                state,
                owner,
                like,
            } => {
                let (o, issuer) = match (owner, pick(&self.tickets, like)) {
                    (None, Some(ti)) => {
                        (ticket::owner(&self.tickets[ti].t), self.tickets[ti].issuer)
                    }
                    (Some(o), _) => (o, None),
                    (None, None) => (0, None),
                };
                // Mostly valid states, sometimes anything.
                let state = if state >= 0x100 { state } else { state % 4 };
                self.push_ticket(ticket::make(seq, debit, state, o), issuer);
            }
            Op::ForgeBooking { t, slot_ms } => {
                if let Some(ti) = pick(&self.tickets, t) {
                    let b = pacer_booking {
                        ticket: self.tickets[ti].t,
                        slot_ms,
                    };
                    let issuer = self.tickets[ti].issuer;
                    self.push_booking(b, issuer);
                }
            }
            Op::Info {
                p: i,
                ptr,
                null_out,
            } => self.read_state(p(i), ptr, null_out, false),
            Op::Counters {
                p: i,
                ptr,
                null_out,
            } => self.read_state(p(i), ptr, null_out, true),
            Op::RefusalBody {
                ref prefix,
                retry_after_s,
                buf,
                null_out,
            } => self.refusal_body(prefix, retry_after_s, buf, null_out),
            Op::Resolve {
                ref s,
                null_budget,
                with_notices,
            } => self.resolve(s, null_budget, with_notices),
            Op::Render {
                ref n,
                buf,
                key,
                null_notice,
                null_out,
            } => self.notice_render(n, buf, key, null_notice, null_out),
            Op::KindName(k) => self.kind_name(k),
            Op::ModeNotice { cfg, nulls } => self.mode_notice(cfg, nulls),
            Op::RegInit { r: x, ptr } => self.reg_init(r(x), ptr),
            Op::RegGarbage { r: x, fill } => self.reg_garbage(r(x), fill),
            Op::RegFirst {
                r: x,
                ref n,
                ptr,
                null_notice,
                null_out,
            } => self.reg_first(r(x), n, ptr, null_notice, null_out),
            Op::StatusStr(n) => self.status_str(n),
            Op::Derived {
                idle,
                retries,
                bound,
                required,
                rate,
            } => self.derived(idle, retries, bound, required, rate),
            Op::Constants => self.constants(),
            Op::Observe(c) => self.observe(p(c.p), c.outcome, c.now, c.ptr, c.null_out),
            Op::RateInForce(c) => self.rate_in_force(p(c.p), c.now, c.ptr, c.null_out),
        }
        if let Some(i) = op.pacer() {
            self.check_pacer(p(i));
        }
    }
}

/// Writes `value` into `mem` where `ptr` says (at 0, misaligned for `T`,
/// or nowhere for NULL) and returns the pointer to pass and its kind.
fn place<T>(mem: &mut Aligned<64>, ptr: Ptr, value: T) -> (*mut T, PtrKind) {
    let (p, kind): (*mut T, PtrKind) = match ptr {
        Ptr::Null => (std::ptr::null_mut(), PtrKind::Null),
        Ptr::Misaligned(o) if expect().misaligned => (
            mem.at(misaligned_offset(std::mem::align_of::<T>(), o)),
            PtrKind::Misaligned,
        ),
        _ => (mem.at(0), PtrKind::Aligned),
    };
    if !p.is_null() {
        assert!(std::mem::size_of::<T>() + 16 <= 64);
        // SAFETY: within `mem` (the offset is below 16, the value fits
        // after it); write_unaligned for the misaligned case.
        unsafe { p.write_unaligned(value) };
    }
    (p, kind)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PtrKind {
    Aligned,
    Null,
    Misaligned,
}

/// One fuzz input: a fill byte for the storages, then operations.
pub fn run(data: &[u8]) {
    crate::ITERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut u = Unstructured::new(data);
    let fill: u8 = u.arbitrary().unwrap_or(0);
    let mut run = Run::new(fill);
    let mut n = 0;
    while !u.is_empty() && n < MAX_OPS {
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        if crate::trace() {
            eprintln!("op {n}: {op:?}");
        }
        run.step(&op);
        n += 1;
    }
    for i in 0..PACERS {
        run.check_pacer(i);
    }
}

/// Whether a pacer's bytes `after` a successful observe of `outcome` differ
/// from `before` only by its count: one more in the counters' word of the
/// outcome (docs/shared-memory.md's order: opened is word 8, throttled word
/// 9), every other byte as it was.
pub(crate) fn only_its_count(before: &[u8], after: &[u8], outcome: u32) -> bool {
    let range = COUNTERS_IN_STORAGE;
    let word = |bytes: &[u8], w: usize| {
        let at = range.start + 8 * w;
        u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let counted = if outcome == OUTCOME_OPENED { 8 } else { 9 };
    before.len() == after.len()
        && before[..range.start] == after[..range.start]
        && before[range.end..] == after[range.end..]
        && (0..(range.end - range.start) / 8).all(|w| {
            let grown = if w == counted { 1 } else { 0 };
            word(after, w) == word(before, w).wrapping_add(grown)
        })
}
