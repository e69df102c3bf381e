//! `struct pacer_shared`: one pacer for every process on the machine, kept
//! in a named shared-memory file (the layout and the trust model are in
//! docs/shared-memory.md).
//!
//! The file holds a header (magic number, layout and ABI versions, the
//! configuration) and, from the page boundary at
//! `PACER_SHARED_SPLIT_OFFSET`, the pacer's two 128-bit words: the state
//! word, then the adaptive control word (SPEC §14). A process maps only the
//! page holding those words `MAP_SHARED` and writes the core's immutable
//! parameters itself, from the configuration, into a private page on the
//! other side of the boundary. The `struct pacer` so spans the two pages:
//! `pacer_reserve` and `pacer_observe` work on it unchanged, and nothing
//! another process writes to the file can change the parameters this
//! process decides with. The parameters come first and the two words last
//! (the core's `Pacer` and `Slot` are `repr(C)`; the offsets are
//! compile-time constants, asserted), and the words are the core's
//! `StateView::pack` and `ControlView::pack` encodings, so the file's
//! format is fixed by the source, not found at run time; the header still
//! records both words' offsets, and a file that disagrees is refused.
//!
//! Creation writes a complete file under a temporary name and links it into
//! place (`link` fails if the name exists), so no process ever sees a
//! half-initialised file. There is no lock anywhere and nothing to wait for:
//! a process killed at any instruction leaves the bucket usable.

use core::ffi::c_char;
use core::mem::{align_of, size_of, MaybeUninit};
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::boundary::{arg, arg_mut, checked, guard, guard_value, opt_str, out, put, Outcome};
use crate::pacer::{
    config_error, config_from, fresh_owner, pacer, pacer_booking, pacer_config, pacer_decision,
    pacer_observe, pacer_rate_in_force, pacer_redeem, pacer_release, pacer_reserve,
    pacer_reserve_or_book, pacer_ticket, write_slot, Slot, PACER_STORAGE_SIZE,
};
use crate::status::pacer_status;
use crate::version::PACER_ABI_VERSION;
use pacer_core::{Config, Pacer};

/// Bytes of storage a shared-pacer handle needs (struct pacer_shared).
pub const PACER_SHARED_STORAGE_SIZE: usize = 64;
/// Alignment the handle storage needs.
pub const PACER_SHARED_STORAGE_ALIGN: usize = 16;
/// The file layout this library reads and writes.
pub const PACER_SHARED_LAYOUT_VERSION: u32 = 4;
/// The page boundary in the file where the shared words start: the state
/// word at this offset (where layout 2 had it), the adaptive control word
/// 16 bytes after it (the header records both). A multiple of every page
/// size the library supports, up to 64 KiB.
pub const PACER_SHARED_SPLIT_OFFSET: u64 = 65536;
/// The file's exact size (the boundary + 256).
pub const PACER_SHARED_FILE_SIZE: u64 = 65792;
const _: () = assert!(PACER_SHARED_FILE_SIZE == PACER_SHARED_SPLIT_OFFSET + 256);
/// Bytes of the header at the start of the file.
pub const PACER_SHARED_HEADER_SIZE: usize = 128;

/// A handle on a shared pacer: caller-owned storage that pacer_shared_open
/// fills (the mapping's address and length) and pacer_shared_close
/// releases. Never copy an open handle; close it once.
#[repr(C, align(16))]
pub struct pacer_shared {
    opaque: [u8; PACER_SHARED_STORAGE_SIZE],
}

/// What an open handle holds.
#[derive(Clone, Copy)]
#[repr(C)]
struct Handle {
    magic: u64,
    view: *mut u8,
    view_len: usize,
    storage: *const pacer,
}

const HANDLE_MAGIC: u64 = u64::from_le_bytes(*b"pshared\x01");

const _: () = assert!(size_of::<Handle>() <= PACER_SHARED_STORAGE_SIZE);
const _: () = assert!(align_of::<Handle>() <= PACER_SHARED_STORAGE_ALIGN);
const _: () = assert!(size_of::<pacer_shared>() == PACER_SHARED_STORAGE_SIZE);
const _: () = assert!(align_of::<pacer_shared>() == PACER_SHARED_STORAGE_ALIGN);
const _: () = assert!(PACER_STORAGE_SIZE == 256);

use header::*;
/// The directory a bare name lives in.
const SHM_DIR: &str = "/dev/shm";
/// Longest accepted name (the last path component), leaving room for the
/// temporary name's suffix within NAME_MAX.
const MAX_NAME: usize = 200;
/// Rounds of open → create → open before giving up (each round ends only
/// when another process removes the file between two of our calls).
const OPEN_ROUNDS: u32 = 8;

/// The file's header (docs/shared-memory.md, "The file"): where each field
/// is, for this library and for readers that only look at a bucket (`pacer
/// watch`). Every field is little-endian.
/// cbindgen:ignore
pub mod header {
    use super::{get_u32, get_u64, pacer_config, CONTROL_IN_FILE, COUNTERS_IN_FILE, STATE_IN_FILE};

    /// The file's magic number, at offset 0.
    pub const FILE_MAGIC: [u8; 8] = *b"PACERSHM";
    /// The header's `ready` field once the file is complete ("REDY").
    pub const READY: u32 = u32::from_le_bytes(*b"REDY");
    pub const H_MAGIC: usize = 0;
    pub const H_LAYOUT: usize = 8;
    pub const H_ABI: usize = 12;
    pub const H_STATE_OFFSET: usize = 16;
    pub const H_FILE_SIZE: usize = 24;
    pub const H_READY: usize = 32;
    pub const H_RATE: usize = 36;
    pub const H_BURST: usize = 40;
    pub const H_RETRIES: usize = 44;
    pub const H_POLICY: usize = 48;
    pub const H_IDLE: usize = 56;
    pub const H_CREATOR_PID: usize = 64;
    pub const H_CREATED_AT: usize = 72;
    pub const H_OWNER: usize = 80;
    pub const H_FLOOR: usize = 84;
    pub const H_CEILING: usize = 88;
    pub const H_CONTROL_OFFSET: usize = 96;
    pub const H_COUNTERS_OFFSET: usize = 104;
    /// Where this layout keeps the state word, the control word and the
    /// counters in the file (what the fields at 16, 96 and 104 must say).
    pub const WORDS_IN_FILE: [u64; 3] = [STATE_IN_FILE, CONTROL_IN_FILE, COUNTERS_IN_FILE];

    /// A little-endian u32 field of a header.
    pub fn u32_field(h: &[u8], at: usize) -> u32 {
        get_u32(h, at)
    }

    /// A little-endian u64 field of a header.
    pub fn u64_field(h: &[u8], at: usize) -> u64 {
        get_u64(h, at)
    }

    /// The configuration a header stores (burst, ceiling as normalised at
    /// creation); not checked.
    pub fn config(h: &[u8]) -> pacer_config {
        pacer_config {
            rate_per_min: get_u32(h, H_RATE),
            burst: get_u32(h, H_BURST),
            idle_timeout_ms: get_u64(h, H_IDLE),
            max_retries: get_u32(h, H_RETRIES),
            release_policy: get_u32(h, H_POLICY),
            adaptive_floor_per_min: get_u32(h, H_FLOOR),
            adaptive_ceiling_per_min: get_u32(h, H_CEILING),
        }
    }
}

/// Why opening failed: a status, or a system call's errno.
enum Fail {
    Status(pacer_status),
    Os(i32),
}

impl From<pacer_status> for Fail {
    fn from(status: pacer_status) -> Self {
        Fail::Status(status)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The status of a `Fail`: `SharedOs` leaves the failing call's errno.
fn status_of(fail: Fail) -> pacer_status {
    match fail {
        Fail::Status(status) => status,
        Fail::Os(code) => {
            // SAFETY: errno is this thread's; the location is always valid.
            unsafe { *libc::__errno_location() = code };
            pacer_status::SharedOs
        }
    }
}

/// The outcome of a call forwarded to the in-process entry point.
fn forwarded(status: pacer_status) -> Outcome {
    match status {
        pacer_status::Ok => Ok(()),
        status => Err(status),
    }
}

/// The C outcome of a `Fail`: `SharedOs` leaves the failing call's errno.
fn finish(result: Result<(), Fail>) -> Outcome {
    result.map_err(status_of)
}

/// CLOCK_MONOTONIC in whole milliseconds (0 if the clock cannot be read):
/// pacer_clock_monotonic_ms, the clock every process sharing a pacer uses.
pub fn clock_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec.max(0) as u64 / 1_000_000)
}

/// The storage `pacer_init` writes for `config` at `now_ms` over zeroes,
/// with owner tag 0 (attach writes the file's tag). Kept as `MaybeUninit`:
/// the core's parameters may hold padding, which a typed write leaves
/// undefined, so the image is only ever copied as raw bytes, never read as
/// integers.
fn image(config: &pacer_config, now_ms: u64) -> Result<MaybeUninit<pacer>, Fail> {
    let mut storage = MaybeUninit::<pacer>::uninit();
    // SAFETY: writes exactly the storage's bytes.
    unsafe {
        storage
            .as_mut_ptr()
            .cast::<u8>()
            .write_bytes(0, PACER_STORAGE_SIZE)
    };
    let config = config_from(config)?;
    // SAFETY: the storage was just filled; any bytes are a valid `pacer`.
    write_slot(unsafe { &mut *storage.as_mut_ptr() }, &config, now_ms, 0)?;
    Ok(storage)
}

/// Where this build keeps things. Only the page size is read at run time;
/// the shared words' place is fixed at compile time: a `Slot` ends with the
/// core's `Pacer`, which ends with its state word and then its control
/// word (both `repr(C)`).
struct Layout {
    page: usize,
    /// Offset of the shared words in `struct pacer` (`SHARED_AT`): the
    /// parameters lie before it, in a private page; byte `shared_at` of the
    /// pacer is byte `PACER_SHARED_SPLIT_OFFSET` of the file, the start of
    /// the shared page.
    shared_at: usize,
}

/// The start of the shared words in `struct pacer`: everything before it
/// is private, everything from it on is mapped from the file at
/// `PACER_SHARED_SPLIT_OFFSET`.
const SHARED_AT: usize = core::mem::offset_of!(Slot, pacer) + pacer_core::SHARED_OFFSET;
/// The state word's offset in `struct pacer`.
const STATE_AT: usize = core::mem::offset_of!(Slot, pacer) + pacer_core::STATE_OFFSET;
/// The adaptive control word's offset in `struct pacer`.
const CONTROL_AT: usize = core::mem::offset_of!(Slot, pacer) + pacer_core::CONTROL_OFFSET;
/// The decision counters' offset in `struct pacer`.
const COUNTERS_AT: usize = core::mem::offset_of!(Slot, counters);
/// Bytes of the shared words and counters: the state word, the control
/// word, then the counters (`pacer_core::COUNTER_WORDS` words).
const SHARED_LEN: usize = 32 + size_of::<pacer_core::Counters>();
// Layout 4's order, pinned: the state word starts the shared part, the
// control word follows it, then the counters, and nothing of the slot
// follows them. A core or slot that orders them differently fails to build
// here; it needs a new layout version (and these asserts, the header's
// offsets and the tests updated), never a silently different file.
const _: () = assert!(STATE_AT == SHARED_AT);
const _: () = assert!(CONTROL_AT == STATE_AT + 16);
const _: () = assert!(COUNTERS_AT == CONTROL_AT + 16);
const _: () = assert!(size_of::<pacer_core::Counters>() == 8 * pacer_core::COUNTER_WORDS);
const _: () = assert!(COUNTERS_AT + size_of::<pacer_core::Counters>() == SHARED_AT + SHARED_LEN);
const _: () = assert!(SHARED_AT + SHARED_LEN <= size_of::<Slot>());
const _: () = assert!(size_of::<Slot>() - (SHARED_AT + SHARED_LEN) < 16);
const _: () = assert!(SHARED_AT % 16 == 0);
const _: () = assert!(SHARED_LEN as u64 <= PACER_SHARED_FILE_SIZE - PACER_SHARED_SPLIT_OFFSET);

/// The state word's offset in the file: byte `STATE_AT - SHARED_AT` of the
/// shared page (its first byte, `PACER_SHARED_SPLIT_OFFSET`).
const STATE_IN_FILE: u64 = PACER_SHARED_SPLIT_OFFSET + (STATE_AT - SHARED_AT) as u64;
/// The control word's offset in the file: byte `CONTROL_AT - SHARED_AT` of
/// the shared page (`PACER_SHARED_SPLIT_OFFSET + 16`).
const CONTROL_IN_FILE: u64 = PACER_SHARED_SPLIT_OFFSET + (CONTROL_AT - SHARED_AT) as u64;
/// The counters' offset in the file (`PACER_SHARED_SPLIT_OFFSET + 32`).
const COUNTERS_IN_FILE: u64 = PACER_SHARED_SPLIT_OFFSET + (COUNTERS_AT - SHARED_AT) as u64;
const _: () = assert!(STATE_IN_FILE == PACER_SHARED_SPLIT_OFFSET);
const _: () = assert!(CONTROL_IN_FILE + 16 <= PACER_SHARED_FILE_SIZE);
// The whole slot's tail (the padding after the counters too) lies in the
// file, whose shared page the slot's end is mapped on.
const _: () = assert!(
    PACER_SHARED_SPLIT_OFFSET + (size_of::<Slot>() - SHARED_AT) as u64 <= PACER_SHARED_FILE_SIZE
);

impl Layout {
    /// The state word's offset in the file (the header's field at 16).
    fn state_in_file(&self) -> u64 {
        STATE_IN_FILE
    }

    /// The control word's offset in the file (the header's field at 96).
    fn control_in_file(&self) -> u64 {
        CONTROL_IN_FILE
    }

    /// The counters' offset in the file (the header's field at 104).
    fn counters_in_file(&self) -> u64 {
        COUNTERS_IN_FILE
    }

    /// Where the shared words start in the file: the shared page.
    fn shared_in_file(&self) -> u64 {
        PACER_SHARED_SPLIT_OFFSET
    }
}

fn layout() -> Result<Layout, Fail> {
    let unsupported = Fail::Status(pacer_status::SharedUnsupported);
    // A critical-section fallback cannot lock across processes.
    if !pacer_core::Pacer::is_lock_free() {
        return Err(unsupported);
    }
    // SAFETY: sysconf has no memory preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page < PACER_STORAGE_SIZE as libc::c_long
        || page as u64 > PACER_SHARED_SPLIT_OFFSET
        || PACER_SHARED_SPLIT_OFFSET % page as u64 != 0
    {
        return Err(unsupported);
    }
    Ok(Layout {
        page: page as usize,
        shared_at: SHARED_AT,
    })
}

/// The configuration as stored: burst 0 means 1; with adaptation on, a
/// ceiling of 0 means rate_per_min; with it off, the ceiling is ignored and
/// stored as 0.
fn normalised(config: &pacer_config) -> pacer_config {
    let ceiling = match (
        config.adaptive_floor_per_min,
        config.adaptive_ceiling_per_min,
    ) {
        (0, _) => 0,
        (_, 0) => config.rate_per_min,
        (_, ceiling) => ceiling,
    };
    pacer_config {
        burst: config.burst.max(1),
        adaptive_ceiling_per_min: ceiling,
        ..*config
    }
}

fn put_u32(h: &mut [u8], at: usize, v: u32) {
    h[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(h: &mut [u8], at: usize, v: u64) {
    h[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(h: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&h[at..at + 4]);
    u32::from_le_bytes(b)
}

fn get_u64(h: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    u64::from_le_bytes(b)
}

fn header(
    config: &pacer_config,
    pid: u32,
    now_ms: u64,
    layout: &Layout,
    owner: u32,
) -> [u8; PACER_SHARED_HEADER_SIZE] {
    let c = normalised(config);
    let mut h = [0u8; PACER_SHARED_HEADER_SIZE];
    h[H_MAGIC..H_MAGIC + 8].copy_from_slice(&FILE_MAGIC);
    put_u32(&mut h, H_LAYOUT, PACER_SHARED_LAYOUT_VERSION);
    put_u32(&mut h, H_ABI, PACER_ABI_VERSION);
    put_u64(&mut h, H_STATE_OFFSET, layout.state_in_file());
    put_u64(&mut h, H_CONTROL_OFFSET, layout.control_in_file());
    put_u64(&mut h, H_COUNTERS_OFFSET, layout.counters_in_file());
    put_u64(&mut h, H_FILE_SIZE, PACER_SHARED_FILE_SIZE);
    put_u32(&mut h, H_READY, READY);
    put_u32(&mut h, H_RATE, c.rate_per_min);
    put_u32(&mut h, H_BURST, c.burst);
    put_u32(&mut h, H_RETRIES, c.max_retries);
    put_u32(&mut h, H_POLICY, c.release_policy);
    put_u64(&mut h, H_IDLE, c.idle_timeout_ms);
    put_u32(&mut h, H_CREATOR_PID, pid);
    put_u64(&mut h, H_CREATED_AT, now_ms);
    put_u32(&mut h, H_OWNER, owner);
    put_u32(&mut h, H_FLOOR, c.adaptive_floor_per_min);
    put_u32(&mut h, H_CEILING, c.adaptive_ceiling_per_min);
    h
}

/// Checks a header read from a file of `size` bytes against `config`.
fn check_header(h: &[u8], size: u64, config: &pacer_config, layout: &Layout) -> Result<(), Fail> {
    if h[H_MAGIC..H_MAGIC + 8] != FILE_MAGIC {
        return Err(pacer_status::SharedForeign.into());
    }
    if get_u32(h, H_LAYOUT) != PACER_SHARED_LAYOUT_VERSION {
        return Err(pacer_status::SharedLayoutVersion.into());
    }
    if get_u32(h, H_ABI) != PACER_ABI_VERSION {
        return Err(pacer_status::SharedAbiVersion.into());
    }
    if get_u64(h, H_FILE_SIZE) != PACER_SHARED_FILE_SIZE {
        return Err(pacer_status::SharedForeign.into());
    }
    // A build whose core lays the pacer out differently keeps the shared
    // words elsewhere: it must not read this file.
    if get_u64(h, H_STATE_OFFSET) != layout.state_in_file()
        || get_u64(h, H_CONTROL_OFFSET) != layout.control_in_file()
        || get_u64(h, H_COUNTERS_OFFSET) != layout.counters_in_file()
    {
        return Err(pacer_status::SharedLayoutVersion.into());
    }
    if size != PACER_SHARED_FILE_SIZE {
        return Err(pacer_status::SharedTruncated.into());
    }
    if get_u32(h, H_READY) != READY {
        return Err(pacer_status::SharedIncomplete.into());
    }
    let (c, stored) = (normalised(config), header::config(h));
    let same = stored.rate_per_min == c.rate_per_min
        && stored.burst == c.burst
        && stored.max_retries == c.max_retries
        && stored.release_policy == c.release_policy
        && stored.idle_timeout_ms == c.idle_timeout_ms
        && stored.adaptive_floor_per_min == c.adaptive_floor_per_min
        && stored.adaptive_ceiling_per_min == c.adaptive_ceiling_per_min;
    if !same {
        return Err(pacer_status::SharedConfigMismatch.into());
    }
    Ok(())
}

/// The file's path, its directory and its last component.
struct Names {
    path: CString,
    dir: String,
    base: String,
}

fn names(path_or_name: &str) -> Result<Names, Fail> {
    let invalid = Fail::Status(pacer_status::SharedInvalidName);
    let (dir, base) = match path_or_name.rfind('/') {
        Some(0) => ("/".to_string(), &path_or_name[1..]),
        Some(at) => (path_or_name[..at].to_string(), &path_or_name[at + 1..]),
        None => (SHM_DIR.to_string(), path_or_name),
    };
    if base.is_empty() || base == "." || base == ".." || base.len() > MAX_NAME {
        return Err(invalid);
    }
    let full = if path_or_name.contains('/') {
        path_or_name.to_string()
    } else {
        format!("{SHM_DIR}/{base}")
    };
    if full.len() >= 4000 {
        return Err(invalid);
    }
    let path = CString::new(full).map_err(|_| Fail::Status(pacer_status::SharedInvalidName))?;
    Ok(Names {
        path,
        dir,
        base: base.to_string(),
    })
}

/// Repeats a positioned read or write until `len` bytes are moved:
/// `step(done)` moves bytes from offset `done` on and returns the system
/// call's result. EINTR retries; moving nothing fails with `at_end`.
fn move_all(
    len: usize,
    at_end: impl FnOnce() -> Fail,
    mut step: impl FnMut(usize) -> libc::ssize_t,
) -> Result<(), Fail> {
    let mut done = 0;
    while done < len {
        let n = step(done);
        if n <= 0 {
            let code = errno();
            if n < 0 && code == libc::EINTR {
                continue;
            }
            return Err(if n == 0 { at_end() } else { Fail::Os(code) });
        }
        done += n as usize;
    }
    Ok(())
}

/// Writes all of `bytes` at `offset`.
fn pwrite_all(fd: libc::c_int, bytes: &[u8], offset: u64) -> Result<(), Fail> {
    move_all(
        bytes.len(),
        || Fail::Os(libc::EIO),
        |done| {
            // SAFETY: the pointer and length stay within `bytes`.
            unsafe {
                libc::pwrite(
                    fd,
                    bytes[done..].as_ptr().cast(),
                    bytes.len() - done,
                    (offset + done as u64) as libc::off_t,
                )
            }
        },
    )
}

/// Reads `buf.len()` bytes at offset 0 (the caller checked the size).
fn pread_all(fd: libc::c_int, buf: &mut [u8]) -> Result<(), Fail> {
    let len = buf.len();
    move_all(
        len,
        || pacer_status::SharedTruncated.into(),
        |done| {
            // SAFETY: the pointer and length stay within `buf`.
            unsafe {
                libc::pread(
                    fd,
                    buf[done..].as_mut_ptr().cast(),
                    len - done,
                    done as libc::off_t,
                )
            }
        },
    )
}

static TEMP_SERIAL: AtomicU32 = AtomicU32::new(0);

/// A temporary name's unguessable part: another user who can write the
/// directory cannot squat the names this process will try.
fn temp_suffix(serial: u32) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(serial);
    hasher.finish()
}

/// Creates the file complete under a temporary name in its directory, then
/// links it into place. Ok also when another process linked first.
fn create(names: &Names, config: &pacer_config, layout: &Layout) -> Result<(), Fail> {
    let now = clock_ms();
    // The shared side of a new pacer is its two words, in the core's
    // encodings (StateView::pack, ControlView::pack), native byte order,
    // each where the pacer keeps it relative to the start of the shared
    // words: the state word, then the control word; then its counters, all
    // zero.
    let params = pacer_core::Params::plan(&config_from(config)?).map_err(config_error)?;
    let mut shared = [0u8; SHARED_LEN];
    let (state, control) = (STATE_AT - SHARED_AT, CONTROL_AT - SHARED_AT);
    shared[state..state + 16].copy_from_slice(&params.initial_state(now).pack().to_ne_bytes());
    shared[control..control + 16]
        .copy_from_slice(&params.initial_control(now).pack().to_ne_bytes());
    let shared_at = layout.shared_in_file();
    let pid = std::process::id();
    let head = header(config, pid, now, layout, fresh_owner());
    for _ in 0..16 {
        let serial = TEMP_SERIAL.fetch_add(1, Ordering::Relaxed);
        let temp = format!(
            "{}/.{}.{pid}.{:016x}.tmp",
            names.dir,
            names.base,
            temp_suffix(serial)
        );
        let temp = CString::new(temp).map_err(|_| Fail::Status(pacer_status::SharedInvalidName))?;
        let flags =
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path; open takes the mode as a variadic.
        let fd = unsafe { libc::open(temp.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            match errno() {
                libc::EEXIST => continue,
                code => return Err(Fail::Os(code)),
            }
        }
        let filled = (|| {
            // Whatever the umask did, the file is the owner's only.
            // SAFETY: `fd` is open.
            if unsafe { libc::fchmod(fd, 0o600) } != 0 {
                return Err(Fail::Os(errno()));
            }
            // SAFETY: `fd` is open.
            if unsafe { libc::ftruncate(fd, PACER_SHARED_FILE_SIZE as libc::off_t) } != 0 {
                return Err(Fail::Os(errno()));
            }
            pwrite_all(fd, &head, 0)?;
            pwrite_all(fd, &shared, shared_at)?;
            // SAFETY: both paths are NUL-terminated.
            if unsafe { libc::link(temp.as_ptr(), names.path.as_ptr()) } != 0 {
                return match errno() {
                    libc::EEXIST => Ok(()),
                    code => Err(Fail::Os(code)),
                };
            }
            Ok(())
        })();
        // SAFETY: the temporary name is ours (created O_EXCL above).
        unsafe { libc::unlink(temp.as_ptr()) };
        // SAFETY: `fd` is open and closed once.
        unsafe { libc::close(fd) };
        return filled;
    }
    Err(Fail::Os(libc::EEXIST))
}

/// Checks the open file `fd` and maps its shared page (the state and
/// control words) behind a private page holding this process's own pacer
/// parameters.
fn attach(
    fd: libc::c_int,
    config: &pacer_config,
    layout: &Layout,
    reference: &MaybeUninit<pacer>,
) -> Result<Handle, Fail> {
    // SAFETY: an all-zero stat is a valid value to overwrite.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is writable.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Fail::Os(errno()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(pacer_status::SharedNotRegular.into());
    }
    // SAFETY: geteuid has no preconditions.
    if st.st_uid != unsafe { libc::geteuid() } {
        return Err(pacer_status::SharedWrongOwner.into());
    }
    if st.st_mode & 0o077 != 0 {
        return Err(pacer_status::SharedPermissions.into());
    }
    let size = st.st_size.max(0) as u64;
    if size < PACER_SHARED_HEADER_SIZE as u64 {
        return Err(pacer_status::SharedTruncated.into());
    }
    let mut head = [0u8; PACER_SHARED_HEADER_SIZE];
    pread_all(fd, &mut head)?;
    check_header(&head, size, config, layout)?;

    let page = layout.page;
    let len = 2 * page;
    // SAFETY: a fresh anonymous mapping; no existing memory is touched.
    let view = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if view == libc::MAP_FAILED {
        return Err(Fail::Os(errno()));
    }
    let view = view.cast::<u8>();
    let (at, file_offset) = (page, layout.shared_in_file());
    // SAFETY: replaces the second page of our own fresh mapping with the
    // file's page that starts with the shared words (offset and length are
    // page multiples; the file is long enough, checked above).
    let shared = unsafe {
        libc::mmap(
            view.add(at).cast(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            file_offset as libc::off_t,
        )
    };
    if shared == libc::MAP_FAILED {
        let code = errno();
        // SAFETY: unmaps only the mapping made above.
        unsafe { libc::munmap(view.cast(), len) };
        return Err(Fail::Os(code));
    }
    // The storage's shared words (SHARED_AT on) land at the start of the
    // file's page: the state word (STATE_AT) on STATE_IN_FILE, the control
    // word (CONTROL_AT) on CONTROL_IN_FILE, the offsets the header records.
    // SAFETY: `page - shared_at` is within the first page and 16-aligned
    // (page and shared_at are multiples of 16); the storage ends within the
    // view.
    let storage = unsafe { view.add(page - layout.shared_at) };
    // The private side gets this process's own parameters.
    let (from, private_len) = (0, layout.shared_at);
    // SAFETY: `from..from + private_len` is the private side of the
    // storage, in the anonymous page, which nothing else references yet.
    unsafe {
        core::ptr::copy_nonoverlapping(
            reference.as_ptr().cast::<u8>().add(from),
            storage.add(from),
            private_len,
        )
    };
    // The bucket's owner tag, so a ticket from any process sharing it
    // releases here and a ticket from any other pacer is refused.
    let owner_at = core::mem::offset_of!(Slot, owner);
    debug_assert!(owner_at + 4 <= layout.shared_at);
    // SAFETY: the owner field lies before the shared words, on the private
    // side (parameters and bookkeeping come first: Slot and Pacer are
    // repr(C)); 4-aligned within the 16-aligned storage.
    unsafe {
        storage
            .add(owner_at)
            .cast::<u32>()
            .write(get_u32(&head, H_OWNER))
    };
    Ok(Handle {
        magic: HANDLE_MAGIC,
        view,
        view_len: len,
        storage: storage.cast::<pacer>(),
    })
}

fn open_shared(path_or_name: &str, config: &pacer_config) -> Result<Handle, Fail> {
    // The config first: an invalid one gets pacer_init's status.
    let reference = image(config, 0)?;
    let layout = layout()?;
    let names = names(path_or_name)?;
    let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    for _ in 0..OPEN_ROUNDS {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(names.path.as_ptr(), flags) };
        if fd >= 0 {
            let attached = attach(fd, config, &layout, &reference);
            // SAFETY: `fd` is open and closed once; the mapping outlives it.
            unsafe { libc::close(fd) };
            return attached;
        }
        match errno() {
            libc::ENOENT => create(&names, config, &layout)?,
            libc::ELOOP => return Err(pacer_status::SharedSymlink.into()),
            libc::EISDIR => return Err(pacer_status::SharedNotRegular.into()),
            libc::EACCES => return Err(denied(&names)),
            code => return Err(Fail::Os(code)),
        }
    }
    Err(Fail::Os(libc::EAGAIN))
}

/// Why opening the file was denied: another user's file is
/// `SharedWrongOwner` (the check attach would make), anything else the
/// system's EACCES.
fn denied(names: &Names) -> Fail {
    // SAFETY: an all-zero stat is a valid value to overwrite.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated path; `st` is writable.
    let found = unsafe { libc::lstat(names.path.as_ptr(), &mut st) } == 0;
    // SAFETY: geteuid has no preconditions.
    if found && st.st_uid != unsafe { libc::geteuid() } {
        pacer_status::SharedWrongOwner.into()
    } else {
        Fail::Os(libc::EACCES)
    }
}

/// Makes `handle` hold `h`.
fn store(handle: &mut pacer_shared, h: Handle) {
    // SAFETY: the storage is 64 bytes, 16-aligned, large enough for a
    // Handle (const asserts above).
    unsafe { handle.opaque.as_mut_ptr().cast::<Handle>().write(h) };
}

/// Unmaps an open handle's view and marks it closed.
fn close_handle(handle: &mut pacer_shared) -> Outcome {
    let h = open_handle(handle)?;
    // SAFETY: the mapping pacer_shared_open made for this handle.
    if unsafe { libc::munmap(h.view.cast(), h.view_len) } != 0 {
        return finish(Err(Fail::Os(errno())));
    }
    let closed = Handle {
        magic: 0,
        view: core::ptr::null_mut(),
        view_len: 0,
        storage: core::ptr::null(),
    };
    store(handle, closed);
    Ok(())
}

/// Removes the file's name.
fn remove(path_or_name: &str) -> Result<(), Fail> {
    let names = names(path_or_name)?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::unlink(names.path.as_ptr()) } != 0 {
        return match errno() {
            libc::ENOENT => Err(pacer_status::SharedNotFound.into()),
            code => Err(Fail::Os(code)),
        };
    }
    Ok(())
}

/// The open handle in `handle`.
fn open_handle(handle: &pacer_shared) -> Result<Handle, pacer_status> {
    // SAFETY: the storage is 64 bytes, 16-aligned (const asserts above);
    // every bit pattern is a valid Handle (integers and raw pointers).
    let h = unsafe { handle.opaque.as_ptr().cast::<Handle>().read() };
    if h.magic != HANDLE_MAGIC || h.storage.is_null() {
        return Err(pacer_status::SharedNotOpen);
    }
    Ok(h)
}

/// Opens the shared pacer `path_or_name` with `config`, creating it (0600,
/// full: burst tokens at the current pacer_clock_monotonic_ms()) if it
/// does not exist. A name without '/' lives in /dev/shm; anything with a
/// '/' is a path. An existing file is checked before use: a symlink, not a
/// regular file, another owner, group/other permissions, a foreign file, a
/// different layout or ABI version, a wrong size, an incomplete file or a
/// different configuration each return their status and change nothing.
/// On success *handle is open; close it with pacer_shared_close (opening
/// into a handle that is still open loses its mapping until exit).
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_open(
    handle: *mut pacer_shared,
    path_or_name: *const c_char,
    config: *const pacer_config,
) -> pacer_status {
    guard(|| {
        let handle = out(handle)?;
        // SAFETY: caller's contract; NULL checked by `opt_str`.
        let path_or_name = unsafe { opt_str(path_or_name) }?;
        let path_or_name = path_or_name.ok_or(pacer_status::NullParameter)?;
        // SAFETY: caller's contract; NULL checked by `arg`.
        let config = unsafe { arg(config) }?;
        let opened = match open_shared(path_or_name, config) {
            Ok(h) => h,
            Err(fail) => return finish(Err(fail)),
        };
        // SAFETY: checked by `out`; a pacer_shared is 64 writable bytes,
        // 16-aligned, large enough for a Handle (const asserts above).
        unsafe { put(handle.cast::<Handle>(), opened) };
        Ok(())
    })
}

/// The calls on an open handle: `body` gets the handle's pacer (a `struct
/// pacer` initialised by pacer_init, mapped until pacer_shared_close).
///
/// # Safety
/// `handle` is NULL, misaligned, or points to a `pacer_shared`.
unsafe fn on_shared(
    handle: *const pacer_shared,
    body: impl FnOnce(*const pacer) -> Outcome,
) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg`.
        let h = open_handle(unsafe { arg(handle) }?)?;
        body(h.storage)
    })
}

/// The pacer of an open handle, for pacer_reserve, pacer_release,
/// pacer_observe, pacer_rate_in_force, pacer_get_info, pacer_get_counters
/// and pacer_get_metrics (the state, the rate in force and the counters
/// are the bucket's: every process's calls count in its file). Pass it the
/// shared clock, pacer_clock_monotonic_ms(), and nothing else.
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_pacer(
    handle: *const pacer_shared,
    out_pacer: *mut *const pacer,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            let out_pacer = out(out_pacer)?;
            put(out_pacer, storage);
            Ok(())
        })
    }
}

/// pacer_reserve on the shared pacer at pacer_clock_monotonic_ms().
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_reserve(
    handle: *const pacer_shared,
    out_decision: *mut pacer_decision,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            let out_decision = out(out_decision)?;
            forwarded(pacer_reserve(storage, clock_ms(), out_decision))
        })
    }
}

/// pacer_release on the shared pacer at pacer_clock_monotonic_ms().
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_release(
    handle: *const pacer_shared,
    ticket: *mut pacer_ticket,
    out_refunded: *mut bool,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            // No reference to the ticket is made here: other threads may be
            // spending the same struct (pacer_release reads it field by field).
            checked(ticket)?;
            let out_refunded = out(out_refunded)?;
            forwarded(pacer_release(storage, ticket, clock_ms(), out_refunded))
        })
    }
}

/// pacer_reserve_or_book on the shared pacer at pacer_clock_monotonic_ms():
/// a refusal within the horizon of `retries_left` retries books a place in
/// the machine-wide line (SPEC §11). The booking's ticket carries the
/// bucket's owner tag, so it redeems and releases through any handle on
/// this bucket, in any process, and nowhere else.
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_reserve_or_book(
    handle: *const pacer_shared,
    retries_left: u32,
    out_decision: *mut pacer_decision,
    out_booking: *mut pacer_booking,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            let out_decision = out(out_decision)?;
            let out_booking = out(out_booking)?;
            forwarded(pacer_reserve_or_book(
                storage,
                clock_ms(),
                retries_left,
                out_decision,
                out_booking,
            ))
        })
    }
}

/// pacer_redeem on the shared pacer at pacer_clock_monotonic_ms(). A
/// booking from another bucket or pacer returns
/// PACER_STATUS_FOREIGN_TICKET.
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_redeem(
    handle: *const pacer_shared,
    booking: *mut pacer_booking,
    out_decision: *mut pacer_decision,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            // No reference to the booking is made here: other threads may be
            // redeeming the same struct (pacer_redeem reads it field by field).
            checked(booking)?;
            let out_decision = out(out_decision)?;
            forwarded(pacer_redeem(storage, booking, clock_ms(), out_decision))
        })
    }
}

/// pacer_observe on the shared pacer at pacer_clock_monotonic_ms(): the
/// rate in force is the machine's, so a throttle reported by one process
/// slows every process on the bucket. *out_rate_per_min is the rate in
/// force after it.
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_observe(
    handle: *const pacer_shared,
    outcome: u32,
    out_rate_per_min: *mut u32,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            let out_rate_per_min = out(out_rate_per_min)?;
            forwarded(pacer_observe(
                storage,
                outcome,
                clock_ms(),
                out_rate_per_min,
            ))
        })
    }
}

/// pacer_rate_in_force on the shared pacer at pacer_clock_monotonic_ms().
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_rate_in_force(
    handle: *const pacer_shared,
    out_rate_per_min: *mut u32,
) -> pacer_status {
    // SAFETY: caller's contract; `body` forwards to the handle's pacer
    // (`on_shared`) only the pointers it checked.
    unsafe {
        on_shared(handle, |storage| {
            let out_rate_per_min = out(out_rate_per_min)?;
            forwarded(pacer_rate_in_force(storage, clock_ms(), out_rate_per_min))
        })
    }
}

/// Unmaps the shared pacer and marks the handle closed. The file stays
/// (see pacer_shared_unlink). The pacer pointer from pacer_shared_pacer is
/// invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_close(handle: *mut pacer_shared) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `arg_mut`.
        let handle = unsafe { arg_mut(handle) }?;
        close_handle(handle)
    })
}

/// Removes the shared pacer's name (a name without '/' lives in /dev/shm).
/// Processes that have it open keep their bucket; the next open creates a
/// new, full one. PACER_STATUS_SHARED_NOT_FOUND if there is no such file.
#[no_mangle]
pub unsafe extern "C" fn pacer_shared_unlink(path_or_name: *const c_char) -> pacer_status {
    guard(|| {
        // SAFETY: caller's contract; NULL checked by `opt_str`.
        let path_or_name = unsafe { opt_str(path_or_name) }?;
        let path_or_name = path_or_name.ok_or(pacer_status::NullParameter)?;
        finish(remove(path_or_name))
    })
}

/// The machine-wide clock every process sharing a pacer must use:
/// CLOCK_MONOTONIC in whole milliseconds (0 if the clock cannot be read).
#[no_mangle]
pub extern "C" fn pacer_clock_monotonic_ms() -> u64 {
    guard_value(0, clock_ms)
}

// ------------------------------------------------------------ Rust callers

/// A shared pacer for Rust callers: an open `pacer_shared` handle, closed
/// on drop. The same files, checks and mapping as pacer_shared_open.
pub struct SharedPacer {
    handle: pacer_shared,
    core: *const Pacer,
    counters: *const pacer_core::Counters,
}

impl SharedPacer {
    /// pacer_shared_open: opens (or creates) the shared pacer `path_or_name`
    /// with `config`. `SharedOs` leaves the failing call's errno.
    pub fn open(path_or_name: &str, config: &Config) -> Result<SharedPacer, pacer_status> {
        let opened = open_shared(path_or_name, &pacer_config::from(config)).map_err(status_of)?;
        let mut shared = SharedPacer {
            handle: pacer_shared {
                opaque: [0; PACER_SHARED_STORAGE_SIZE],
            },
            core: core::ptr::null(),
            counters: core::ptr::null(),
        };
        store(&mut shared.handle, opened);
        // As pacer_shared_pacer: the open handle's storage, then the slot
        // pacer_init wrote there (on failure, dropping `shared` unmaps).
        let storage = open_handle(&shared.handle)?.storage;
        // SAFETY: the view holds a `struct pacer` initialised by pacer_init,
        // mapped until the handle is closed (when `shared` drops).
        let slot = unsafe { crate::pacer::slot(storage) }?;
        shared.core = &slot.pacer;
        shared.counters = &slot.counters;
        Ok(shared)
    }

    /// The mapped core pacer (its state and control words are the
    /// machine's: `observe` through it moves every process's rate in
    /// force). Pass it [`clock_ms`] and nothing else.
    pub fn pacer(&self) -> &Pacer {
        // SAFETY: an initialised core pacer (this process's parameters, the
        // file's state and control words) in the view, mapped until `self`
        // drops.
        unsafe { &*self.core }
    }

    /// The bucket's counters, in the file: count every call made through
    /// [`SharedPacer::pacer`] here (as the C calls do), so every process
    /// sharing the bucket reads them all.
    pub fn counters(&self) -> &pacer_core::Counters {
        // SAFETY: the slot's counters, in the file's mapped page, mapped
        // until `self` drops.
        unsafe { &*self.counters }
    }
}

impl Drop for SharedPacer {
    fn drop(&mut self) {
        // pacer_shared_close; nothing borrows the view past `self`.
        let _ = close_handle(&mut self.handle);
    }
}

/// pacer_shared_unlink. `SharedOs` leaves the failing call's errno.
pub fn unlink(path_or_name: &str) -> Result<(), pacer_status> {
    finish(remove(path_or_name))
}
