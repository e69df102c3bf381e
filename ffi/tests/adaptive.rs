//! Adaptive pacing through the C ABI (SPEC §14): pacer_observe,
//! pacer_rate_in_force, their shared-pacer forms, the config fields and
//! their status. Every expected rate is worked out by hand next to its
//! check from the law in core/src/adaptive.rs. At rate 60 with the default
//! ceiling (60) the search reads 60 until the first throttle; a throttle
//! with nothing counted sets `L = B − max(1, ⌊B/16⌋)`, `B = min(R, ℓ)`
//! (60 → 60 − 3 = 57); as it ends the first search less than a minute
//! after creation (at 0) it pauses: the origin becomes 0 + 60000, and the
//! rate reads the lowest until then (the floor here: the budget's 5
//! retries at bound 4833 can refuse from 3/min), `L` from 60000. A
//! throttle within the 60 s hold after the origin changes nothing; one at
//! the hold's end (120000) lowers `L` the same way (57 → 57 − 3 = 54), or
//! to what the openings counted show got through, never below the lowest
//! rate. While probing the rate is `ℓ` itself until the step (after the
//! hold and the wait, 60000 + 240000/12 after the first search's throttle).

use std::mem::{size_of, MaybeUninit};

use pacer::pacer::{
    pacer as PacerStorage, pacer_config, pacer_decision, pacer_get_metrics, pacer_init,
    pacer_level_at, pacer_metrics, pacer_observe, pacer_outcome, pacer_rate_in_force,
    pacer_release_policy, pacer_reserve,
};
use pacer::shm::{
    clock_ms, pacer_shared, pacer_shared_close, pacer_shared_observe, pacer_shared_open,
    pacer_shared_pacer, pacer_shared_rate_in_force, pacer_shared_reserve, unlink, SharedPacer,
    PACER_SHARED_LAYOUT_VERSION,
};
use pacer::status::pacer_status;
use pacer::version::PACER_ABI_VERSION;
use pacer_core::{Config, Outcome, ReleasePolicy};

const OPENED: u32 = pacer_outcome::Opened as u32;
const THROTTLED: u32 = pacer_outcome::Throttled as u32;
/// The hold after a throttle, ms.
const HOLD_MS: u64 = pacer_core::adaptive::HOLD_MS;

/// The first throttle's answer at rate 60 and floor 10, read during the
/// pause: the lowest rate, max(floor 10, 3) = 10.
fn first() -> u32 {
    10
}

/// What the first throttle sets, nothing counted: B = min(60, 60) = 60,
/// L = 60 − max(1, ⌊60/16⌋) = 60 − 3 = 57, read from the pause's end.
const L1: u32 = 57;

/// The pause's length after creation, ms: the origin becomes t₀ + 60000.
const PAUSE_MS: u64 = 60_000;

/// Rate 60, burst 10, idle 120000, 5 retries, refund; adaptation between
/// `floor` and `ceiling`.
fn config(floor: u32, ceiling: u32) -> pacer_config {
    pacer_config {
        rate_per_min: 60,
        burst: 10,
        idle_timeout_ms: 120_000,
        max_retries: 5,
        release_policy: pacer_release_policy::Refund as u32,
        adaptive_floor_per_min: floor,
        adaptive_ceiling_per_min: ceiling,
    }
}

fn storage() -> Box<PacerStorage> {
    // SAFETY: a `pacer` is plain bytes; all zeroes is a valid value.
    Box::new(unsafe { MaybeUninit::<PacerStorage>::zeroed().assume_init() })
}

/// The pacer's state and control words as bytes: the state word in
/// `[..16]`, the control word in `[16..]`, each read from where the core
/// keeps it (`STATE_OFFSET`, `CONTROL_OFFSET`). In the storage, the
/// library's slot (magic 8 bytes, owner tag and reserved 16, the counters)
/// ends with the core pacer, which ends with the two words.
fn words(p: &PacerStorage) -> [u8; 32] {
    // The slot: magic (8), owner tag (4), zero (4), then the core pacer.
    let pacer_at = 16;
    let mut out = [0; 32];
    for (i, offset) in [pacer_core::STATE_OFFSET, pacer_core::CONTROL_OFFSET]
        .into_iter()
        .enumerate()
    {
        let at = pacer_at + offset;
        assert!(at + 16 <= size_of::<PacerStorage>());
        // SAFETY: the 16 bytes lie within the storage and are one of the
        // atomic words pacer_init wrote.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (p as *const PacerStorage).cast::<u8>().add(at),
                out[16 * i..].as_mut_ptr(),
                16,
            )
        };
    }
    out
}

fn init(c: &pacer_config, now_ms: u64) -> Result<Box<PacerStorage>, pacer_status> {
    let mut p = storage();
    // SAFETY: valid storage and config.
    match unsafe { pacer_init(&mut *p, c, now_ms) } {
        pacer_status::Ok => Ok(p),
        status => Err(status),
    }
}

fn observe(p: &PacerStorage, outcome: u32, now_ms: u64) -> Result<u32, pacer_status> {
    let mut rate = u32::MAX;
    // SAFETY: an initialised pacer and a writable out-parameter.
    match unsafe { pacer_observe(p, outcome, now_ms, &mut rate) } {
        pacer_status::Ok => Ok(rate),
        status => {
            assert_eq!(rate, u32::MAX, "out-parameter written on failure");
            Err(status)
        }
    }
}

fn rate_in_force(p: &PacerStorage, now_ms: u64) -> u32 {
    let mut rate = 0;
    // SAFETY: an initialised pacer and a writable out-parameter.
    assert_eq!(
        unsafe { pacer_rate_in_force(p, now_ms, &mut rate) },
        pacer_status::Ok
    );
    rate
}

/// Throttles at 1000 (the search ends; the pause moves the origin to
/// 60000), 1000 again, then an opened connection at 1000 (`opened`,
/// counted at the origin 60000, minute 1) or a third throttle, one just
/// inside the hold after the origin (119999: nothing changes) and one at
/// its end (120000): the rates answered.
fn episode(floor: u32, opened: bool) -> [Result<u32, pacer_status>; 5] {
    let p = init(&config(floor, 0), 0).unwrap();
    // Created at 0 searching from the configured rate (ceiling 0 = 60).
    assert_eq!(rate_in_force(&p, 0), 60);
    let t = 1000;
    let origin = PAUSE_MS; // max(1000, 0 + 60000)
    let first = observe(&p, THROTTLED, t);
    // The pause: the lowest rate until the origin, then L = 57 (probing,
    // Δ = 0 < the hold: ℓ itself).
    assert_eq!(rate_in_force(&p, origin - 1), floor);
    assert_eq!(rate_in_force(&p, origin), L1);
    let answers = [
        first,
        observe(&p, THROTTLED, t),
        observe(&p, if opened { OPENED } else { THROTTLED }, t),
        observe(&p, THROTTLED, origin + HOLD_MS - 1),
        observe(&p, THROTTLED, origin + HOLD_MS),
    ];
    assert_eq!(rate_in_force(&p, origin + HOLD_MS), answers[4].unwrap());
    answers
}

#[test]
fn a_throttle_lowers_the_rate_once_per_hold() {
    // Nothing counted: 60 → L = 57, the pause: the answer at 1000 (before
    // the origin 60000) the lowest, 10; the same instant twice: held (at =
    // max(1000, 60000), Δ = 0), answered 10 at 1000; 1 ms short of the
    // hold's end (119999): held, answered ℓ = 57 (the wait: max(240000,
    // ⌊80·60000/57⌋ = 84210)/12 = 20000, so the step only from Δ =
    // 80000). At 120000 (Δ = 60000): R = 57, nothing counted, E = 0:
    // B = min(57, 57) = 57, L = 57 − max(1, ⌊57/16⌋ = 3) = 54, origin
    // 120000, answered ℓ = 54.
    assert_eq!(episode(10, false), [Ok(10), Ok(10), Ok(10), Ok(57), Ok(54)]);
}

#[test]
fn the_lowest_rate_stops_a_decrease() {
    // The pause answers the lowest (the floor, 10 or 40) at 1000. One
    // opening at 1000, counted at at = max(1000, 60000) (minute 1): at
    // 120000 (minute 2) it is the count before, through = max(0, 1) = 1,
    // E = through = 1 (probing) < R = 57: L = 1, raised to the lowest
    // rate, the floor (10 or 40).
    assert_eq!(episode(10, true), [Ok(10), Ok(10), Ok(10), Ok(57), Ok(10)]);
    assert_eq!(episode(40, true), [Ok(40), Ok(40), Ok(40), Ok(57), Ok(40)]);
}

#[test]
fn the_openings_counted_set_the_rate() {
    let p = init(&config(10, 0), 0).unwrap();
    // 30 openings at 1000 (the search reads 60·6000/5000 = 72 → 60).
    for _ in 0..30 {
        assert_eq!(observe(&p, OPENED, 1000), Ok(60));
    }
    // A throttle at 2000 ends the first search: through = recent = 30, E =
    // max(30, 30) = 30, L = min(30, 60) = 30 (a search's burst rule); the
    // pause: origin max(2000, 0 + 60000) = 60000, answered the lowest (10)
    // at 2000, L = 30 read from 60000.
    assert_eq!(observe(&p, THROTTLED, 2000), Ok(10));
    assert_eq!(rate_in_force(&p, 59_999), 10);
    assert_eq!(rate_in_force(&p, 60_000), 30);
    // 31 openings at 60000 (minute 1; Δ = 0, within the hold: no rise),
    // answered ℓ = 30.
    for _ in 0..31 {
        assert_eq!(observe(&p, OPENED, 60_000), Ok(30));
    }
    assert_eq!(observe(&p, THROTTLED, 119_999), Ok(30), "held");
    // At 120000 (minute 2, Δ = 60000, before the step at 60000 +
    // max(240000, 80·60000/30 = 160000)/12 = 80000 after the origin): R =
    // 30; minute 1's 31 is the count before, through = 31, E = 31 ≥ R =
    // 30: the count does not explain the throttle, L = 30 − max(1,
    // ⌊30/16⌋ = 1) = 29, origin 120000, answered ℓ = 29.
    assert_eq!(observe(&p, THROTTLED, 120_000), Ok(29));
    assert_eq!(rate_in_force(&p, 120_000), 29);
}

#[test]
fn adaptation_off_changes_nothing() {
    let p = init(&config(0, 0), 0).unwrap();
    let before = words(&p);
    for (outcome, now) in [
        (THROTTLED, 1000),
        (OPENED, 1000),
        (THROTTLED, 1000 + HOLD_MS),
    ] {
        assert_eq!(observe(&p, outcome, now), Ok(60));
    }
    assert_eq!(rate_in_force(&p, 1000), 60);
    assert_eq!(words(&p), before, "an observation changed a byte");
}

#[test]
fn a_decrease_writes_the_control_word_alone() {
    let p = init(&config(10, 0), 0).unwrap();
    let before = words(&p);
    assert_eq!(observe(&p, THROTTLED, 1000), Ok(first()));
    let after = words(&p);
    assert_ne!(after[16..], before[16..], "the control word");
    assert_eq!(after[..16], before[..16], "the state word");
    // The control word's high 64 bits (native byte order): the law's
    // origin, after the pause: max(1000, 0 + 60000) = 60000.
    let control = u128::from_ne_bytes(after[16..].try_into().unwrap());
    assert_eq!((control >> 64) as u64, 60_000);
}

#[test]
fn adaptive_ranges_are_checked_at_init() {
    let cases = [
        (61, 0, "floor above the rate"),
        (10, 59, "ceiling below the rate"),
        (10, 601, "ceiling above 600"),
    ];
    for (floor, ceiling, what) in cases {
        assert_eq!(
            init(&config(floor, ceiling), 0).err(),
            Some(pacer_status::AdaptiveRange),
            "{what}"
        );
    }
    // The edges are accepted: floor = rate, ceiling = rate and 600; with
    // adaptation off the ceiling is not looked at.
    for (floor, ceiling) in [(60, 0), (1, 60), (1, 600), (0, 601)] {
        assert!(
            init(&config(floor, ceiling), 0).is_ok(),
            "{floor}..{ceiling}"
        );
    }
    assert_eq!(pacer_status::AdaptiveRange as u32, 28);
    let text = pacer::status::pacer_status_str(28);
    // SAFETY: a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(text) }.to_str().unwrap();
    assert!(text.contains("floor"), "{text}");
}

#[test]
fn bad_arguments_change_nothing() {
    let p = init(&config(10, 0), 0).unwrap();
    let before = words(&p);
    for outcome in [0, 3, u32::MAX] {
        assert_eq!(
            observe(&p, outcome, 1000),
            Err(pacer_status::InvalidEnum),
            "{outcome}"
        );
    }
    let mut rate = 7;
    // SAFETY: NULL pointers are the cases under test.
    unsafe {
        assert_eq!(
            pacer_observe(core::ptr::null(), THROTTLED, 1000, &mut rate),
            pacer_status::NullParameter
        );
        assert_eq!(
            pacer_observe(&*p, THROTTLED, 1000, core::ptr::null_mut()),
            pacer_status::NullParameter
        );
        assert_eq!(
            pacer_rate_in_force(core::ptr::null(), 1000, &mut rate),
            pacer_status::NullParameter
        );
        assert_eq!(
            pacer_rate_in_force(&*p, 1000, core::ptr::null_mut()),
            pacer_status::NullParameter
        );
    }
    assert_eq!(rate, 7);
    assert_eq!(words(&p), before);
    let zeroed = storage();
    // SAFETY: zeroed storage, never initialised.
    unsafe {
        assert_eq!(
            pacer_observe(&*zeroed, THROTTLED, 0, &mut rate),
            pacer_status::NotInitialized
        );
        assert_eq!(
            pacer_rate_in_force(&*zeroed, 0, &mut rate),
            pacer_status::NotInitialized
        );
    }
}

// ------------------------------------------------------------ shared pacers

/// A test file's path, removed when the guard drops (a failing test too).
struct TestFile(String);

impl Drop for TestFile {
    fn drop(&mut self) {
        let _ = unlink(&self.0);
    }
}

/// A fresh test file name and its path.
fn shm_path(what: &str) -> (TestFile, String) {
    let path = format!("/dev/shm/pacer-rust-test-{}-{what}", std::process::id());
    let _ = unlink(&path);
    (TestFile(path.clone()), path)
}

/// pacer_shared_open into a zeroed handle: the handle and the status.
fn open_handle(path: &str, c: &pacer_config) -> (Box<pacer_shared>, pacer_status) {
    // SAFETY: an all-zero handle is valid storage for pacer_shared_open.
    let mut h: Box<pacer_shared> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    let name = std::ffi::CString::new(path).unwrap();
    // SAFETY: valid handle storage, NUL-terminated path, valid config.
    let status = unsafe { pacer_shared_open(&mut *h, name.as_ptr(), c) };
    (h, status)
}

fn core_config(floor: u32, ceiling: u32) -> Config {
    Config {
        rate_per_min: 60,
        burst: 10,
        idle_timeout_ms: 120_000,
        max_retries: 5,
        release_policy: ReleasePolicy::Refund,
        adaptive_floor_per_min: floor,
        adaptive_ceiling_per_min: ceiling,
    }
}

fn file(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn u32_at(f: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(f[at..at + 4].try_into().unwrap())
}

fn u64_at(f: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(f[at..at + 8].try_into().unwrap())
}

#[test]
fn a_throttle_through_one_handle_slows_the_other() {
    let (_file, path) = shm_path("two");
    let a = SharedPacer::open(&path, &core_config(10, 0)).unwrap();
    let b = SharedPacer::open(&path, &core_config(10, 0)).unwrap();
    let t0 = clock_ms();
    assert_eq!(b.pacer().rate_in_force(clock_ms()), 60);
    // The throttle happens at a's clock reading (≥ t0, well within a
    // minute of the creation c ≤ t0): it ends the first search, so the
    // pause moves the origin to c + 60000 > t0 and both read the lowest
    // (10) before it, and L1 = 57 at t0 + 60000 (Δ = t0 − c < the hold,
    // so ℓ itself).
    assert_eq!(a.pacer().observe(Outcome::Throttled, clock_ms()), first());
    assert_eq!(b.pacer().rate_in_force(t0), first());
    assert_eq!(b.pacer().rate_in_force(t0 + PAUSE_MS), L1);
    // One episode for the machine: b's throttle, within the hold after
    // the origin, changes nothing (rather than lowering L again to 54);
    // a's opening, within the hold too, is counted and changes no rate.
    assert_eq!(b.pacer().observe(Outcome::Throttled, clock_ms()), first());
    assert_eq!(a.pacer().observe(Outcome::Opened, t0), first());
    assert_eq!(a.pacer().rate_in_force(t0), first());
    assert_eq!(a.pacer().rate_in_force(t0 + PAUSE_MS), L1);
    drop(a);
    drop(b);

    // The header: layout and ABI versions, both words' offsets, the
    // adaptive fields (ceiling 0 stored as the rate, 60).
    let f = file(&path);
    assert_eq!(u32_at(&f, 8), PACER_SHARED_LAYOUT_VERSION);
    assert_eq!(PACER_SHARED_LAYOUT_VERSION, 4);
    assert_eq!(u32_at(&f, 12), PACER_ABI_VERSION);
    assert_eq!(u64_at(&f, 16), 65536, "state word offset");
    assert_eq!(u64_at(&f, 96), 65552, "control word offset");
    assert_eq!(u64_at(&f, 104), 65568, "counters offset");
    assert_eq!((u32_at(&f, 84), u32_at(&f, 88)), (10, 60));
    // The counters after the control word: the core's observe counts
    // nothing (the C calls count), so all zero.
    assert!(f[65568..65568 + 8 * pacer_core::COUNTER_WORDS]
        .iter()
        .all(|&b| b == 0));
    unlink(&path).unwrap();
}

#[test]
fn the_file_holds_the_initial_state_and_control_words() {
    let (_file, path) = shm_path("control");
    let shared = SharedPacer::open(&path, &core_config(10, 120)).unwrap();
    drop(shared);
    let f = file(&path);
    let created_at = u64_at(&f, 72);
    // The control word at 65552, native byte order: the law's origin, the
    // creation instant, in the high 64 bits; below it the rest of the
    // controller (L, the configured rate 60, in the low 14 bits; searching,
    // nothing counted).
    let word = u128::from_ne_bytes(f[65552..65568].try_into().unwrap());
    assert_eq!((word >> 64) as u64, created_at);
    assert_eq!(word as u64, 60);
    // The state word before it, at 65536: its clock mark (the high 64
    // bits) the creation instant too.
    let state = u128::from_ne_bytes(f[65536..65552].try_into().unwrap());
    assert_eq!((state >> 64) as u64, created_at);
    assert_eq!((u32_at(&f, 84), u32_at(&f, 88)), (10, 120));
    unlink(&path).unwrap();
}

#[test]
fn shared_adaptive_fields_must_match() {
    let (_file, path) = shm_path("mismatch");
    let open = |c: &pacer_config| {
        let (mut h, status) = open_handle(&path, c);
        if status == pacer_status::Ok {
            // SAFETY: an open handle.
            unsafe { pacer::shm::pacer_shared_close(&mut *h) };
        }
        status
    };
    assert_eq!(open(&config(10, 0)), pacer_status::Ok);
    // Ceiling 0 means the rate: the same configuration.
    assert_eq!(open(&config(10, 60)), pacer_status::Ok);
    assert_eq!(open(&config(0, 0)), pacer_status::SharedConfigMismatch);
    assert_eq!(open(&config(11, 0)), pacer_status::SharedConfigMismatch);
    assert_eq!(open(&config(10, 61)), pacer_status::SharedConfigMismatch);
    // An invalid range is refused before the file is looked at.
    assert_eq!(open(&config(61, 0)), pacer_status::AdaptiveRange);
    unlink(&path).unwrap();

    // Adaptation off: the ceiling is not part of the configuration.
    assert_eq!(open(&config(0, 0)), pacer_status::Ok);
    assert_eq!(open(&config(0, 601)), pacer_status::Ok);
    unlink(&path).unwrap();
}

#[test]
fn shared_calls_read_the_machine_clock() {
    let (_file, path) = shm_path("calls");
    let (mut h, status) = open_handle(&path, &config(10, 0));
    assert_eq!(status, pacer_status::Ok);
    let h = &mut *h;
    let mut rate = 0;
    // SAFETY: an open handle and valid out-parameters; NULL and unknown
    // values are the cases under test.
    unsafe {
        assert_eq!(pacer_shared_rate_in_force(h, &mut rate), pacer_status::Ok);
        assert_eq!(rate, 60);
        assert_eq!(
            pacer_shared_observe(h, 0, &mut rate),
            pacer_status::InvalidEnum
        );
        assert_eq!(
            pacer_shared_observe(h, THROTTLED, core::ptr::null_mut()),
            pacer_status::NullParameter
        );
        assert_eq!(
            pacer_shared_observe(core::ptr::null(), THROTTLED, &mut rate),
            pacer_status::NullParameter
        );
        assert_eq!(rate, 60);
        assert_eq!(
            pacer_shared_observe(h, THROTTLED, &mut rate),
            pacer_status::Ok
        );
        assert_eq!(rate, first());
        assert_eq!(pacer::shm::pacer_shared_close(h), pacer_status::Ok);
        assert_eq!(
            pacer_shared_rate_in_force(h, &mut rate),
            pacer_status::SharedNotOpen
        );
    }
    unlink(&path).unwrap();
}

/// The bucket's counts through one handle: pacer_get_metrics on its pacer.
fn bucket_metrics(h: &pacer_shared) -> pacer_metrics {
    let mut p: *const PacerStorage = core::ptr::null();
    // SAFETY: an open handle; `p` is writable.
    assert_eq!(unsafe { pacer_shared_pacer(h, &mut p) }, pacer_status::Ok);
    let mut m = MaybeUninit::<pacer_metrics>::uninit();
    // SAFETY: `p` is the handle's pacer; `m` is writable.
    assert_eq!(
        unsafe { pacer_get_metrics(p, m.as_mut_ptr()) },
        pacer_status::Ok
    );
    // SAFETY: written on Ok.
    unsafe { m.assume_init() }
}

#[test]
fn the_bucket_counts_the_calls_of_every_handle() {
    let (_file, path) = shm_path("metrics");
    let (a, status) = open_handle(&path, &config(10, 0));
    assert_eq!(status, pacer_status::Ok);
    let (b, status) = open_handle(&path, &config(10, 0));
    assert_eq!(status, pacer_status::Ok);
    let mut rate = 0u32;
    // a: throttled; b: opened, throttled (within the hold: no change).
    for (h, outcome) in [(&a, THROTTLED), (&b, OPENED), (&b, THROTTLED)] {
        // SAFETY: an open handle; `rate` is writable.
        assert_eq!(
            unsafe { pacer_shared_observe(&**h, outcome, &mut rate) },
            pacer_status::Ok
        );
    }
    // Burst 10, a fresh bucket: a's three reservations and b's two are
    // admitted at once (the pause lowers the rate, not the tokens).
    for h in [&a, &a, &a, &b, &b] {
        let mut d = MaybeUninit::<pacer_decision>::uninit();
        // SAFETY: an open handle; `d` is writable.
        assert_eq!(
            unsafe { pacer_shared_reserve(&**h, d.as_mut_ptr()) },
            pacer_status::Ok
        );
    }
    let (ma, mb) = (bucket_metrics(&a), bucket_metrics(&b));
    for m in [ma, mb] {
        assert_eq!((m.opened, m.throttled), (1, 2), "opened, throttled");
        assert_eq!((m.admitted, m.admitted_after_wait, m.refused), (5, 0, 0));
    }
    for mut h in [a, b] {
        // SAFETY: an open handle, closed once.
        assert_eq!(unsafe { pacer_shared_close(&mut *h) }, pacer_status::Ok);
    }
    // In the file, after the control word, native byte order: word 0
    // admitted, word 8 opened, word 9 throttled.
    let f = file(&path);
    let word = |i: usize| u64::from_ne_bytes(f[65568 + 8 * i..65576 + 8 * i].try_into().unwrap());
    assert_eq!((word(0), word(8), word(9)), (5, 1, 2));
    unlink(&path).unwrap();
}

fn level_at(p: &PacerStorage, now_ms: u64) -> i64 {
    let mut units = i64::MIN;
    // SAFETY: an initialised pacer and a writable out-parameter.
    assert_eq!(
        unsafe { pacer_level_at(p, now_ms, &mut units) },
        pacer_status::Ok
    );
    units
}

fn reserve(p: &PacerStorage, now_ms: u64) -> pacer_decision {
    let mut d = MaybeUninit::<pacer_decision>::uninit();
    // SAFETY: an initialised pacer and a writable out-parameter.
    assert_eq!(
        unsafe { pacer_reserve(p, now_ms, d.as_mut_ptr()) },
        pacer_status::Ok
    );
    // SAFETY: written on Ok.
    unsafe { d.assume_init() }
}

#[test]
fn the_level_and_the_metrics_follow_the_decisions() {
    // Rate 60 (a token, 60000 units, a second: 60 units a ms), burst 10:
    // full at 0, 600000 units.
    let p = init(&config(0, 0), 0).unwrap();
    assert_eq!(level_at(&p, 0), 600_000);
    for _ in 0..12 {
        reserve(&p, 0);
    }
    // Ten at once, then two waits (1000, 2000 ms): 2 tokens of debt.
    assert_eq!(level_at(&p, 0), -120_000);
    // 500 ms later: −120000 + 500 · 60.
    assert_eq!(level_at(&p, 500), -90_000);
    assert_eq!(level_at(&p, 1_000_000), 600_000, "capped at the burst");
    let mut m = MaybeUninit::<pacer_metrics>::uninit();
    // SAFETY: an initialised pacer and a writable out-parameter.
    assert_eq!(
        unsafe { pacer_get_metrics(&*p, m.as_mut_ptr()) },
        pacer_status::Ok
    );
    // SAFETY: written on Ok.
    let m = unsafe { m.assume_init() };
    assert_eq!((m.admitted, m.admitted_after_wait, m.refused), (12, 2, 0));
    // 1000 ms in the bucket up to 1000, 2000 in the one up to 2500.
    assert_eq!(
        (m.wait_ms_total, m.wait_buckets),
        (3000, [0, 0, 0, 0, 1, 1, 0, 0])
    );
    assert_eq!(observe(&p, OPENED, 10), Ok(60));
    assert_eq!(observe(&p, THROTTLED, 20), Ok(60), "adaptation off");
    let mut m = MaybeUninit::<pacer_metrics>::uninit();
    // SAFETY: as above.
    let m = unsafe {
        assert_eq!(pacer_get_metrics(&*p, m.as_mut_ptr()), pacer_status::Ok);
        m.assume_init()
    };
    assert_eq!(
        (m.opened, m.throttled),
        (1, 1),
        "counted with adaptation off too"
    );
}
