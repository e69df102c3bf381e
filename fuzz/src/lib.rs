//! Harness shared by the fuzz targets: the call counter, the switches for
//! checks whose fixes may not have landed yet, status helpers, sentinel
//! out-parameters and the one place that names `pacer_ticket`'s fields.
//!
//! Every call into the C ABI goes through [`call!`], which counts it; the
//! counts are printed when the process exits (libFuzzer ends `-runs=N` and
//! `-max_total_time` with `exit(0)`, so an `atexit` handler sees them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub mod calls;
pub mod shared;

pub use pacer::pacer::pacer_ticket;
pub use pacer::status::pacer_status;

/// Calls into the C ABI made by this process.
pub static CALLS: AtomicU64 = AtomicU64::new(0);
/// Fuzz inputs executed by this process.
pub static ITERATIONS: AtomicU64 = AtomicU64::new(0);

/// Counts one call into the C ABI and makes it.
#[macro_export]
macro_rules! call {
    ($e:expr) => {{
        $crate::CALLS.fetch_add(1, ::std::sync::atomic::Ordering::Relaxed);
        #[allow(unused_unsafe)]
        unsafe {
            $e
        }
    }};
}

static TARGET: OnceLock<&'static str> = OnceLock::new();

extern "C" fn print_counts() {
    let target = TARGET.get().copied().unwrap_or("?");
    eprintln!(
        "pacer-fuzz: target={} iterations={} calls={} expect={}",
        target,
        ITERATIONS.load(Ordering::Relaxed),
        CALLS.load(Ordering::Relaxed),
        expect().describe(),
    );
    for hook in EXIT_HOOKS.get().into_iter().flatten() {
        hook();
    }
}

static EXIT_HOOKS: OnceLock<Vec<fn()>> = OnceLock::new();

/// Once per process: remembers the target's name, reads the switches and
/// prints the counts at exit (after running `hooks`).
pub fn start(target: &'static str, hooks: Vec<fn()>) {
    if TARGET.set(target).is_ok() {
        let _ = EXIT_HOOKS.set(hooks);
        let _ = expect();
        // SAFETY: registers a plain extern "C" fn with no captured state.
        unsafe { libc::atexit(print_counts) };
    }
}

// ------------------------------------------------------------------ switches

/// Checks that fail until a change to ffi/ lands. Each is off unless it is
/// in [`LANDED`] or named in `PACER_FUZZ_EXPECT` (comma-separated names,
/// `all`, `none`; `-name` turns one off). While a check is off its input is
/// still generated but steered to a harmless form (e.g. an aligned pointer
/// instead of a misaligned one), since the unfixed call crashes the process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expect {
    /// Misaligned pacer / registry / ticket / booking / handle pointers
    /// return PACER_STATUS_MISALIGNED (today: SIGSEGV or abort).
    pub misaligned: bool,
    /// A live ticket or booking presented to another pacer returns
    /// PACER_STATUS_FOREIGN_TICKET and changes nothing (today: OK, and the
    /// other pacer may refund).
    pub foreign_ticket: bool,
    /// pacer_resolve takes non-UTF-8 bytes as a malformed value (default +
    /// notice), status OK (today: PACER_STATUS_INVALID_UTF8).
    pub resolve_non_utf8: bool,
    /// The notice registry checks an initialisation magic: an uninitialised
    /// registry returns PACER_STATUS_NOT_INITIALIZED (today: reads garbage
    /// lengths, out-of-bounds reads).
    pub registry_magic: bool,
    /// pacer_shared_close unmaps the whole view: no mapping of the file is
    /// left in /proc/self/maps after every handle is closed (before the
    /// fix: one page of the view stayed mapped per open; after ~65k opens
    /// mmap failed with ENOMEM). While off, the harness unmaps the leftover
    /// itself so long runs stay possible.
    pub close_unmaps: bool,
}

/// The switches whose fixes have landed in ffi/ (checked against the tree
/// at the end of the session that wrote this harness; see docs/fuzzing.md).
/// `close_unmaps` is a defect this harness found (fuzz/regressions/README.md),
/// fixed in ffi/src/shm.rs during the same session.
pub const LANDED: &[&str] = &[
    "misaligned",
    "foreign_ticket",
    "resolve_non_utf8",
    "registry_magic",
    "close_unmaps",
];

const NAMES: [&str; 5] = [
    "misaligned",
    "foreign_ticket",
    "resolve_non_utf8",
    "registry_magic",
    "close_unmaps",
];

impl Expect {
    fn set(&mut self, name: &str, on: bool) {
        match name {
            "misaligned" => self.misaligned = on,
            "foreign_ticket" => self.foreign_ticket = on,
            "resolve_non_utf8" => self.resolve_non_utf8 = on,
            "registry_magic" => self.registry_magic = on,
            "close_unmaps" => self.close_unmaps = on,
            "all" => NAMES.iter().for_each(|n| self.set(n, on)),
            "none" => NAMES.iter().for_each(|n| self.set(n, !on)),
            "" => {}
            other => {
                panic!("PACER_FUZZ_EXPECT: unknown switch {other:?} (known: {NAMES:?}, all, none)")
            }
        }
    }

    fn describe(&self) -> String {
        let on = [
            self.misaligned,
            self.foreign_ticket,
            self.resolve_non_utf8,
            self.registry_magic,
            self.close_unmaps,
        ];
        let names: Vec<&str> = NAMES
            .iter()
            .zip(on)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }
}

/// The switches in force (read once).
pub fn expect() -> &'static Expect {
    static EXPECT: OnceLock<Expect> = OnceLock::new();
    EXPECT.get_or_init(|| {
        let mut e = Expect::default();
        LANDED.iter().for_each(|n| e.set(n, true));
        if let Ok(list) = std::env::var("PACER_FUZZ_EXPECT") {
            for item in list.split(',').map(str::trim) {
                match item.strip_prefix('-') {
                    Some(name) => e.set(name, false),
                    None => e.set(item, true),
                }
            }
        }
        e
    })
}

/// PACER_FUZZ_TRACE=1 prints each operation (to read a reproducer).
pub fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("PACER_FUZZ_TRACE").is_some_and(|v| v != "0"))
}

// ------------------------------------------------------------------ statuses

pub const OK: u32 = 0;
pub const NULL_PARAMETER: u32 = 1;
pub const PANIC: u32 = 2;
pub const INVALID_ENUM: u32 = 3;
pub const BUFFER_TOO_SHORT: u32 = 4;
pub const INVALID_UTF8: u32 = 5;
pub const NOT_INITIALIZED: u32 = 6;
pub const INVALID_TICKET: u32 = 25;
/// PACER_STATUS_MISALIGNED (numbers are never reused).
pub const MISALIGNED: u32 = 26;
/// PACER_STATUS_FOREIGN_TICKET.
pub const FOREIGN_TICKET: u32 = 27;
/// PACER_STATUS_ADAPTIVE_RANGE.
pub const ADAPTIVE_RANGE: u32 = 28;

/// PACER_OUTCOME_OPENED and PACER_OUTCOME_THROTTLED (pacer_observe).
pub const OUTCOME_OPENED: u32 = 1;
pub const OUTCOME_THROTTLED: u32 = 2;

pub const TICKET_NONE: u32 = 0;
pub const TICKET_LIVE: u32 = 1;
pub const TICKET_SPENT: u32 = 2;

/// The number of a status, after the first oracle: never PANIC.
#[track_caller]
pub fn st(status: pacer_status, what: &str) -> u32 {
    let n = status as u32;
    assert_ne!(n, PANIC, "{what} returned PACER_STATUS_PANIC");
    n
}

/// A status the library knows by name (not "unknown status").
pub fn status_known(n: u32) -> bool {
    let p = call!(pacer::status::pacer_status_str(n));
    assert!(!p.is_null(), "pacer_status_str({n}) returned NULL");
    // SAFETY: a static NUL-terminated string (checked non-NULL).
    let text = unsafe { std::ffi::CStr::from_ptr(p) };
    text.to_bytes() != b"unknown status"
}

// ------------------------------------------------------------ ticket fields

/// The one place that names `pacer_ticket`'s fields: (seq, debit_units,
/// state, owner). The ABI renamed `reserved` to `owner`; a rename is one
/// line here.
pub mod ticket {
    use super::pacer_ticket;

    const _: () = assert!(std::mem::size_of::<pacer_ticket>() == 16);

    /// A ticket with these fields, in the header's order (four uint32_t).
    pub fn make(seq: u32, debit_units: u32, state: u32, owner: u32) -> pacer_ticket {
        // SAFETY: pacer_ticket is repr(C), four u32 fields, no padding
        // (size asserted above); every bit pattern is valid.
        let t: pacer_ticket = unsafe { std::mem::transmute([seq, debit_units, state, owner]) };
        debug_assert_eq!(parts(&t), (seq, debit_units, state, owner));
        t
    }

    /// (seq, debit_units, state, owner): the only line naming the fields.
    pub fn parts(t: &pacer_ticket) -> (u32, u32, u32, u32) {
        (t.seq, t.debit_units, t.state, t.owner)
    }

    pub fn state(t: &pacer_ticket) -> u32 {
        parts(t).2
    }

    pub fn owner(t: &pacer_ticket) -> u32 {
        parts(t).3
    }
}

// ----------------------------------------------------------------- sentinels

/// The byte out-parameters are pre-filled with.
pub const SENTINEL: u8 = 0xA5;

/// An out-parameter pre-filled with [`SENTINEL`], so a failing call can be
/// shown to have left it untouched. Read it as a `T` only after success.
#[repr(C, align(16))]
pub struct Out<T> {
    value: std::mem::MaybeUninit<T>,
}

impl<T> Out<T> {
    pub fn new() -> Self {
        let mut value = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: writes exactly the value's bytes.
        unsafe {
            value
                .as_mut_ptr()
                .cast::<u8>()
                .write_bytes(SENTINEL, std::mem::size_of::<T>())
        };
        Out { value }
    }

    pub fn ptr(&mut self) -> *mut T {
        self.value.as_mut_ptr()
    }

    /// [`Out::ptr`], or NULL when `null` (the call is given no output).
    pub fn ptr_or_null(&mut self, null: bool) -> *mut T {
        if null {
            std::ptr::null_mut()
        } else {
            self.ptr()
        }
    }

    /// Every byte is still the sentinel.
    pub fn untouched(&self) -> bool {
        bytes_of(&self.value).iter().all(|&b| b == SENTINEL)
    }
}

impl<T: Copy> Out<T> {
    /// The written value (the call returned OK, so it is initialised).
    pub fn get(&self) -> T {
        // SAFETY: the caller only asks after a successful call wrote it.
        unsafe { self.value.assume_init() }
    }
}

impl<T: Copy> Default for Out<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The bytes of any value (for snapshots and sentinel comparisons).
pub fn bytes_of<T>(value: &T) -> &[u8] {
    // SAFETY: reads size_of::<T>() bytes of a live value; the harness only
    // compares them (padding included: it was filled by us or is stable).
    unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    }
}

/// An aligned byte buffer that storages live in, at offset 0 (aligned) or
/// at an offset (misaligned).
#[repr(C, align(16))]
pub struct Aligned<const N: usize>(pub [u8; N]);

impl<const N: usize> Aligned<N> {
    pub fn filled(b: u8) -> Box<Self> {
        Box::new(Aligned([b; N]))
    }
    pub fn at<T>(&mut self, offset: usize) -> *mut T {
        assert!(offset < N);
        // SAFETY: within the buffer.
        unsafe { self.0.as_mut_ptr().add(offset).cast::<T>() }
    }
}
