//! Target `shared_open`: pacer_shared_open on hostile files.
//!
//! One private directory per process (mkdtemp under $TMPDIR, made at
//! startup, removed at exit). Each input lays one path there: nothing, a
//! file made from a genuine shared-pacer file (made once at startup) with
//! patched header fields, state word and bytes, random bytes, zeros, of
//! size 0 / short / header-only / exact / long, with a random mode and
//! possibly another owner; a symlink, a directory or a FIFO; then calls
//! pacer_shared_open with that path (or a name that is invalid) and a
//! random config. Every outcome must be a status: never PANIC, never a
//! crash; a failure leaves the handle (sentinel) and the file untouched;
//! statuses that follow from the input alone are checked; an open handle
//! runs a few reserves / releases / observes and is closed.
//!
//! Adaptive pacing on a shared pacer (the config may be adaptive, the
//! header's floor / ceiling / control offset and the control word may be
//! patched): pacer_shared_observe and pacer_shared_rate_in_force through
//! an open, NULL or misaligned handle, with a NULL out or not, any outcome.
//! A failure changes neither the out-parameter nor one byte of the mapped
//! pacer; an unknown outcome is INVALID_ENUM; a success reports a rate
//! within [floor, ceiling] (adaptive) or exactly the configured rate with
//! the pacer's bytes unchanged (not adaptive); OPENED and
//! pacer_shared_rate_in_force never change a byte; a closed handle is
//! NOT_OPEN. Another process may write any control word into the open
//! file meanwhile (ShOp::ScribbleControl): the same checks hold.

use std::ffi::{c_char, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};

use pacer::pacer::{
    pacer as Storage, pacer_config, pacer_decision, pacer_get_info, pacer_info, pacer_release,
    pacer_reserve, pacer_ticket,
};
use pacer::shm::*;

use crate::calls::{
    adaptive_bounds, check_rate, debt_floor, only_its_count, outcome_known, Cfg, OutcomeArg,
    DEFAULT_CFG,
};
use crate::{
    call, expect, st, ticket, Aligned, Out, INVALID_ENUM, MISALIGNED, NULL_PARAMETER, OK,
    OUTCOME_OPENED, TICKET_LIVE, TICKET_SPENT,
};

const SYMLINK: u32 = 13;
const NOT_REGULAR: u32 = 14;
const WRONG_OWNER: u32 = 15;
const PERMISSIONS: u32 = 16;
const TRUNCATED: u32 = 17;
const NOT_OPEN: u32 = 23;
const FILE_SIZE: usize = PACER_SHARED_FILE_SIZE as usize;
const HEADER: usize = PACER_SHARED_HEADER_SIZE;

/// The configuration the template file was made with: the default one.
const TEMPLATE_CFG: pacer_config = DEFAULT_CFG;

struct Env {
    dir: PathBuf,
    template: Vec<u8>,
    /// Where the state word lies in the file (header field at 16).
    state_at: usize,
    /// Where the adaptive control word lies (header field at 96).
    control_at: usize,
}

static ENV: OnceLock<Env> = OnceLock::new();

fn env() -> &'static Env {
    ENV.get_or_init(|| {
        remove_stale(&std::env::temp_dir());
        let base = std::env::temp_dir().join(format!("pacer-fuzz-{}-XXXXXX", std::process::id()));
        let mut t = CString::new(base.as_os_str().as_bytes())
            .unwrap()
            .into_bytes_with_nul();
        // SAFETY: a writable NUL-terminated template.
        let p = unsafe { libc::mkdtemp(t.as_mut_ptr().cast()) };
        assert!(!p.is_null(), "mkdtemp failed");
        t.pop();
        let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&t));
        let path = dir.join("template");
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        let mut h = Out::<pacer_shared>::new();
        let s = st(
            call!(pacer_shared_open(h.ptr(), c.as_ptr(), &TEMPLATE_CFG)),
            "pacer_shared_open(template)",
        );
        assert_eq!(
            s,
            OK,
            "cannot make the template shared pacer in {}",
            dir.display()
        );
        let s = st(call!(pacer_shared_close(h.ptr())), "pacer_shared_close");
        assert_eq!(s, OK);
        let template = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(template.len(), FILE_SIZE);
        let state_at = u64::from_le_bytes(template[16..24].try_into().unwrap()) as usize;
        assert!(state_at + 16 <= FILE_SIZE);
        let control_at = u64::from_le_bytes(template[96..104].try_into().unwrap()) as usize;
        assert!(control_at + 16 <= FILE_SIZE);
        Env {
            dir,
            template,
            state_at,
            control_at,
        }
    })
}

/// Removes the private directories that processes which died (a crash
/// skips atexit) left in `tmp`: `pacer-fuzz-<pid>-*` whose pid is gone.
fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("pacer-fuzz-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only probes whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The address ranges /proc/self/maps shows mapped from `path` (None when
/// the path cannot be matched reliably: not plain printable ASCII).
fn mapped_from(path: &Path) -> Option<Vec<(usize, usize)>> {
    let p = path.to_str()?;
    if !p.bytes().all(|b| b.is_ascii_graphic()) || p.contains('\\') {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let deleted = format!("{p} (deleted)");
    let ranges = maps
        .lines()
        .filter(|l| {
            l.ends_with(&deleted)
                || l.ends_with(p)
                    && l.len() > p.len()
                    && l.as_bytes()[l.len() - p.len() - 1] == b' '
        })
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect();
    Some(ranges)
}

/// With PACER_FUZZ_TRACE: prints `label`, then the /proc/self/maps lines
/// of the harness's files or overlapping [at, at + len).
fn trace_maps(label: &str, at: usize, len: usize) {
    if !crate::trace() {
        return;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    eprintln!("{label}");
    for l in maps
        .lines()
        .filter(|l| l.contains("pacer-fuzz") || mapped_in(l, at, len))
    {
        eprintln!("  {l}");
    }
}

/// Whether the maps line's range overlaps [at, at + len).
fn mapped_in(line: &str, at: usize, len: usize) -> bool {
    let Some((a, b)) = line
        .split_whitespace()
        .next()
        .and_then(|r| r.split_once('-'))
    else {
        return false;
    };
    match (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
        (Ok(a), Ok(b)) => a < at + len && at < b,
        _ => false,
    }
}

/// Mappings of a closed file the harness removed itself (close_unmaps off).
static LEFT_MAPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Inputs whose file pacer_shared_open accepted.
static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Of those, the ones with an adaptive config.
static ADAPTIVE_OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Successful pacer_shared_observe calls on an adaptive shared pacer.
static ADAPTIVE_OBSERVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Removes the private directory (an atexit hook).
pub fn cleanup() {
    eprintln!(
        "pacer-fuzz: shared_open opened={} left_mapped_after_close={} adaptive_opened={} adaptive_observes={}",
        OPENED.load(std::sync::atomic::Ordering::Relaxed),
        LEFT_MAPPED.load(std::sync::atomic::Ordering::Relaxed),
        ADAPTIVE_OPENED.load(std::sync::atomic::Ordering::Relaxed),
        ADAPTIVE_OBSERVES.load(std::sync::atomic::Ordering::Relaxed)
    );
    if let Some(env) = ENV.get() {
        let _ = std::fs::remove_dir_all(&env.dir);
    }
}

pub fn init() {
    let _ = env();
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Size {
    Zero,
    Short(u8),
    Partial(u16),
    Exact,
    Long(u16),
    Page,
}

impl Size {
    fn len(self) -> usize {
        match self {
            Size::Zero => 0,
            Size::Short(n) => n as usize % HEADER,
            Size::Partial(n) => HEADER + n as usize % (FILE_SIZE - HEADER),
            Size::Exact => FILE_SIZE,
            Size::Long(n) => FILE_SIZE + 1 + n as usize,
            Size::Page => 65536,
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Field {
    Magic(u64),
    Layout(u32),
    Abi(u32),
    StateOffset(u64),
    FileSize(u64),
    Ready(u32),
    Rate(u32),
    Burst(u32),
    Retries(u32),
    Policy(u32),
    Idle(u64),
    CreatorPid(u32),
    CreatedAt(u64),
    /// The bucket's state word itself.
    State(u128),
    Byte(u32, u8),
    Floor(u32),
    Ceiling(u32),
    ControlOffset(u64),
    /// The adaptive control word itself.
    Control(u128),
}

#[derive(Arbitrary, Debug)]
pub enum Lay {
    /// Nothing there: the open creates the file.
    Missing,
    Template {
        size: Size,
        patches: Vec<Field>,
    },
    Random {
        size: Size,
        bytes: Vec<u8>,
    },
    Zeros(Size),
    SymlinkToTemplate,
    SymlinkDangling,
    SymlinkToDir,
    Directory,
    Fifo,
}

#[derive(Arbitrary, Debug)]
pub enum Name {
    Plain,
    /// A random last component under the private directory ('/' mapped
    /// to '_' so nothing escapes it; may be non-UTF-8, empty, ".", "..",
    /// or too long).
    Random(Vec<u8>),
    /// Names without '/' (they would live in /dev/shm): only invalid ones.
    BareInvalid(u8),
}

/// The handle an adaptive call is given: the open one, NULL, or the open
/// one's storage misaligned (while that check is switched on).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum HandleArg {
    Open,
    Null,
    Misaligned(u8),
}

#[derive(Arbitrary, Debug)]
pub enum ShOp {
    Reserve,
    ReleaseLast,
    ReleaseLastTwice,
    ForgeRelease {
        seq: u32,
        debit: u32,
        state: u8,
        own_owner: bool,
    },
    ReserveAt(u64),
    Info,
    OpenAgain,
    Observe {
        outcome: OutcomeArg,
        handle: HandleArg,
        null_out: bool,
    },
    RateInForce {
        handle: HandleArg,
        null_out: bool,
    },
    /// Another process writes any adaptive control word into the open
    /// file: the rate in force must stay within [floor, ceiling] (and the
    /// tokens within their bounds, which the rate in force sets).
    ScribbleControl(u128),
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    lay: Lay,
    mode: u16,
    other_owner: Option<u16>,
    same_config: bool,
    cfg: Cfg,
    name: Name,
    null_handle: bool,
    null_name: bool,
    null_cfg: bool,
    misaligned_handle: u8,
    ops: Vec<ShOp>,
}

fn patch(bytes: &mut [u8], env: &Env, field: &Field) {
    let (state_at, control_at) = (env.state_at, env.control_at);
    let mut put = |at: usize, v: &[u8]| {
        if at + v.len() <= bytes.len() {
            bytes[at..at + v.len()].copy_from_slice(v);
        }
    };
    match *field {
        Field::Magic(v) => put(0, &v.to_le_bytes()),
        Field::Layout(v) => put(8, &v.to_le_bytes()),
        Field::Abi(v) => put(12, &v.to_le_bytes()),
        Field::StateOffset(v) => put(16, &v.to_le_bytes()),
        Field::FileSize(v) => put(24, &v.to_le_bytes()),
        Field::Ready(v) => put(32, &v.to_le_bytes()),
        Field::Rate(v) => put(36, &v.to_le_bytes()),
        Field::Burst(v) => put(40, &v.to_le_bytes()),
        Field::Retries(v) => put(44, &v.to_le_bytes()),
        Field::Policy(v) => put(48, &v.to_le_bytes()),
        Field::Idle(v) => put(56, &v.to_le_bytes()),
        Field::CreatorPid(v) => put(64, &v.to_le_bytes()),
        Field::CreatedAt(v) => put(72, &v.to_le_bytes()),
        Field::State(v) => put(state_at, &v.to_le_bytes()),
        Field::Byte(at, v) => {
            let at = at as usize % FILE_SIZE.max(1);
            put(at, &[v])
        }
        Field::Floor(v) => put(84, &v.to_le_bytes()),
        Field::Ceiling(v) => put(88, &v.to_le_bytes()),
        Field::ControlOffset(v) => put(96, &v.to_le_bytes()),
        Field::Control(v) => put(control_at, &v.to_le_bytes()),
    }
}

/// How a handle argument was made, for [`adaptive_call`]'s oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HandleKind {
    Open,
    Null,
    Misaligned,
}

/// The handle pointer `arg` asks for, into the open handle's memory `mem`
/// (the handle lies at `off`).
fn adaptive_handle(
    mem: &mut Aligned<128>,
    off: usize,
    arg: HandleArg,
) -> (*const pacer_shared, HandleKind) {
    match arg {
        HandleArg::Null => (std::ptr::null(), HandleKind::Null),
        HandleArg::Misaligned(o) if expect().misaligned => (
            mem.at(off + [8usize, 4, 1][o as usize % 3]),
            HandleKind::Misaligned,
        ),
        _ => (mem.at(off), HandleKind::Open),
    }
}

/// The bytes of the mapped `struct pacer` of the open handle `h`.
fn mapped_pacer(h: *const pacer_shared) -> Vec<u8> {
    let mut p = Out::<*const Storage>::new();
    let s = st(call!(pacer_shared_pacer(h, p.ptr())), "pacer_shared_pacer");
    assert_eq!(s, OK, "pacer_shared_pacer on an open handle");
    // SAFETY: an open handle's pacer is a mapped, readable struct pacer;
    // nothing else in this process writes it during the read.
    unsafe {
        std::slice::from_raw_parts(p.get().cast::<u8>(), std::mem::size_of::<Storage>()).to_vec()
    }
}

/// Runs pacer_shared_observe (`outcome` Some) or pacer_shared_rate_in_force
/// (`outcome` None) through `f(handle, out)` and checks it: `h` is the open
/// handle, `hp` the pointer given (of kind `kind`), `cfg` the pacer's.
fn adaptive_call(
    h: *const pacer_shared,
    hp: *const pacer_shared,
    kind: HandleKind,
    null_out: bool,
    outcome: Option<u32>,
    cfg: &pacer_config,
    f: impl FnOnce(*const pacer_shared, *mut u32) -> u32,
) {
    let what = match outcome {
        Some(_) => "pacer_shared_observe",
        None => "pacer_shared_rate_in_force",
    };
    let known = outcome.is_none_or(outcome_known);
    let before = mapped_pacer(h);
    let mut r = Out::<u32>::new();
    let s = f(hp, r.ptr_or_null(null_out));
    let after = mapped_pacer(h);
    let unchanged = before == after;
    let want = match kind {
        HandleKind::Null => Some(NULL_PARAMETER),
        HandleKind::Misaligned => Some(MISALIGNED),
        HandleKind::Open if null_out && known => Some(NULL_PARAMETER),
        HandleKind::Open if !known && !null_out => Some(INVALID_ENUM),
        HandleKind::Open => None,
    };
    if want.is_some() || null_out || !known {
        assert_ne!(
            s, OK,
            "{what}: OK with {kind:?}, NULL out {null_out}, outcome {outcome:?}"
        );
        assert!(r.untouched(), "{what} failed with {s} but wrote its out");
        assert!(unchanged, "{what} failed with {s} but changed the pacer");
        match want {
            Some(want) => assert_eq!(
                s, want,
                "{what} ({kind:?}, NULL out {null_out}, outcome {outcome:?})"
            ),
            // NULL out and an unknown outcome: either may be reported.
            None => assert!(
                s == NULL_PARAMETER || s == INVALID_ENUM,
                "{what} (NULL out, outcome {outcome:?}): {s}"
            ),
        }
        return;
    }
    assert_eq!(s, OK, "{what} on an open handle (outcome {outcome:?})");
    let rate = r.get();
    check_rate(cfg, rate, what);
    // Every observation is counted in the bucket's counters (in the file);
    // with adaptation off nothing else changes.
    match (adaptive_bounds(cfg), outcome) {
        (None, Some(code)) => assert!(
            only_its_count(&before, &after, code),
            "{what} changed a non-adaptive shared pacer beyond counting the outcome"
        ),
        (Some(_), Some(_)) => {
            ADAPTIVE_OBSERVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (_, None) => assert!(unchanged, "{what} changed the shared pacer"),
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn clear_dir(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {
                    let _ = std::fs::remove_dir_all(&p);
                }
                _ => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
    }
}

/// What lies at `path` (for the "failing open changes nothing" check).
fn observe(path: &Path) -> Option<(u32, u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    let bytes = if m.file_type().is_file() {
        std::fs::read(path).unwrap_or_default()
    } else {
        Vec::new()
    };
    Some((m.mode(), m.uid(), bytes))
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    crate::ITERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let env = env();
    let mut u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary(&mut u) else {
        return;
    };
    if crate::trace() {
        eprintln!("input: {input:?}");
    }
    clear_dir(&env.dir);
    let path = match &input.name {
        Name::Plain => env.dir.join("p"),
        Name::Random(b) => {
            let b: Vec<u8> = b
                .iter()
                .take(300)
                .map(|&c| {
                    if c == b'/' {
                        b'_'
                    } else if c == 0 {
                        b'0'
                    } else {
                        c
                    }
                })
                .collect();
            let mut p = env.dir.as_os_str().as_bytes().to_vec();
            p.push(b'/');
            p.extend_from_slice(&b);
            PathBuf::from(std::ffi::OsStr::from_bytes(&p))
        }
        Name::BareInvalid(k) => PathBuf::from(match k % 4 {
            0 => String::new(),
            1 => ".".into(),
            2 => "..".into(),
            _ => "n".repeat(201 + *k as usize),
        }),
    };
    let bare = matches!(input.name, Name::BareInvalid(_));
    let full = path.as_os_str().as_bytes();
    let base = &full[full.iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1)..];
    let name_invalid = bare || base.is_empty() || base == b"." || base == b".." || base.len() > 200;
    let non_utf8 = std::str::from_utf8(path.as_os_str().as_bytes()).is_err();

    // Lay the path out (never for bare names, which are not in our dir).
    let mut regular = false;
    let mut given_away = false;
    // SAFETY: no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut laid = true;
    if !bare && !name_invalid {
        let made = match &input.lay {
            Lay::Missing => {
                laid = false;
                Ok(())
            }
            Lay::Template { size, patches } => {
                let mut bytes = env.template.clone();
                bytes.resize(size.len(), 0);
                for f in patches.iter().take(8) {
                    patch(&mut bytes, env, f);
                }
                regular = true;
                std::fs::write(&path, &bytes)
            }
            Lay::Random { size, bytes } => {
                let mut b = bytes.clone();
                b.resize(size.len(), 0);
                regular = true;
                std::fs::write(&path, &b)
            }
            Lay::Zeros(size) => {
                regular = true;
                std::fs::write(&path, vec![0u8; size.len()])
            }
            Lay::SymlinkToTemplate => {
                let target = env.dir.join("target");
                std::fs::write(&target, &env.template)
                    .and_then(|_| std::os::unix::fs::symlink(&target, &path))
            }
            Lay::SymlinkDangling => std::os::unix::fs::symlink(env.dir.join("nowhere"), &path),
            Lay::SymlinkToDir => std::os::unix::fs::symlink(&env.dir, &path),
            Lay::Directory => std::fs::create_dir(&path),
            Lay::Fifo => {
                let c = cpath(&path);
                // SAFETY: a NUL-terminated path.
                if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            }
        };
        if made.is_err() {
            // e.g. a name the file system refuses (ENAMETOOLONG): skip.
            return;
        }
        if regular {
            let c = cpath(&path);
            // SAFETY: NUL-terminated path.
            unsafe { libc::chmod(c.as_ptr(), (input.mode & 0o7777) as libc::mode_t) };
            if let Some(uid) = input.other_owner {
                // SAFETY: NUL-terminated path (as root this gives the file away).
                given_away =
                    unsafe { libc::chown(c.as_ptr(), 1 + uid as libc::uid_t, u32::MAX) } == 0;
            }
        }
    }

    let cfg = if input.same_config {
        TEMPLATE_CFG
    } else {
        input.cfg.build()
    };
    let cfg_valid = crate::calls::config_valid(&cfg);
    let before = if bare { None } else { observe(&path) };
    let cp = cpath(&path);
    let mut hmem = Aligned::<128>::filled(crate::SENTINEL);
    let misaligned = expect().misaligned && input.misaligned_handle & 1 == 1;
    let off = if misaligned {
        [8usize, 4, 1][input.misaligned_handle as usize / 2 % 3]
    } else {
        0
    };
    let handle: *mut pacer_shared = if input.null_handle {
        std::ptr::null_mut()
    } else {
        hmem.at(off)
    };
    let name: *const c_char = if input.null_name {
        std::ptr::null()
    } else {
        cp.as_ptr()
    };
    let config: *const pacer_config = if input.null_cfg {
        std::ptr::null()
    } else {
        &cfg
    };
    let hbefore = hmem.0;
    let s = st(
        call!(pacer_shared_open(handle, name, config)),
        "pacer_shared_open",
    );

    if s != OK {
        assert_eq!(
            hbefore, hmem.0,
            "pacer_shared_open failed with {s} but wrote the handle"
        );
        if laid && !bare {
            assert_eq!(
                before,
                observe(&path),
                "pacer_shared_open failed with {s} but changed the file"
            );
        }
    }
    // Each argument is checked in order (handle, name, config): the first
    // bad one decides.
    let first_bad = if input.null_handle {
        Some(NULL_PARAMETER)
    } else if misaligned {
        Some(MISALIGNED)
    } else if input.null_name {
        Some(NULL_PARAMETER)
    } else if non_utf8 {
        Some(crate::INVALID_UTF8)
    } else if input.null_cfg {
        Some(NULL_PARAMETER)
    } else {
        None
    };
    if let Some(want) = first_bad {
        assert_eq!(
            s, want,
            "pacer_shared_open with a NULL, misaligned or non-UTF-8 argument"
        );
        return;
    }
    if !cfg_valid {
        assert_ne!(s, OK, "pacer_shared_open accepted an invalid config");
        return;
    }
    if non_utf8 {
        assert_ne!(s, OK, "pacer_shared_open accepted a non-UTF-8 path");
        return;
    }
    if name_invalid {
        assert_eq!(s, 12, "pacer_shared_open: invalid name {:?}", path);
        return;
    }
    let want = match &input.lay {
        Lay::SymlinkToTemplate | Lay::SymlinkDangling | Lay::SymlinkToDir => Some(SYMLINK),
        Lay::Directory | Lay::Fifo => Some(NOT_REGULAR),
        Lay::Missing => Some(OK),
        _ if given_away => Some(WRONG_OWNER),
        _ if !root && input.mode & 0o600 != 0o600 => None,
        _ if input.mode & 0o077 != 0 => Some(PERMISSIONS),
        Lay::Template {
            size: Size::Short(_) | Size::Zero,
            ..
        }
        | Lay::Random {
            size: Size::Short(_) | Size::Zero,
            ..
        }
        | Lay::Zeros(Size::Short(_) | Size::Zero) => Some(TRUNCATED),
        Lay::Template {
            size: Size::Exact,
            patches,
        } if patches.is_empty() && input.same_config => Some(OK),
        _ => None,
    };
    if let Some(want) = want {
        assert_eq!(s, want, "pacer_shared_open on {:?}", input.lay);
    }
    if s != OK {
        return;
    }
    OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if adaptive_bounds(&cfg).is_some() {
        ADAPTIVE_OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // Opened: the file is a complete shared pacer of ours.
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(&path).expect("opened, yet no file");
        assert!(
            m.file_type().is_file() && m.len() == FILE_SIZE as u64,
            "opened a non-regular or wrong-size file"
        );
        assert_eq!(m.mode() & 0o077, 0, "opened a file open to others");
    }
    // A hostile but accepted file may hold any state word; only a file we
    // made or an unpatched one must keep the bounds.
    let pristine = match &input.lay {
        Lay::Missing => true,
        Lay::Template { patches, .. } => !patches
            .iter()
            .any(|f| matches!(f, Field::State(_) | Field::Byte(..))),
        _ => false,
    };
    let mut handles = vec![hmem];
    let mut tickets: Vec<pacer_ticket> = Vec::new();
    for op in input.ops.iter().take(12) {
        let h: *const pacer_shared = handles.last_mut().unwrap().at(off);
        match *op {
            ShOp::Reserve => {
                let mut d = Out::<pacer_decision>::new();
                let s = st(
                    call!(pacer_shared_reserve(h, d.ptr())),
                    "pacer_shared_reserve",
                );
                assert_eq!(s, OK, "pacer_shared_reserve on an open handle");
                let d = d.get();
                assert!(
                    d.kind == 1 || d.kind == 2,
                    "shared decision kind {}",
                    d.kind
                );
                if ticket::state(&d.ticket) == TICKET_LIVE {
                    tickets.push(d.ticket);
                }
            }
            ShOp::ReserveAt(now) => {
                let mut p = Out::<*const Storage>::new();
                let s = st(call!(pacer_shared_pacer(h, p.ptr())), "pacer_shared_pacer");
                assert_eq!(s, OK);
                let mut d = Out::<pacer_decision>::new();
                let now = call!(pacer_clock_monotonic_ms()).saturating_add(now % 100_000);
                let s = st(
                    call!(pacer_reserve(p.get(), now, d.ptr())),
                    "pacer_reserve(shared)",
                );
                assert_eq!(s, OK);
                if ticket::state(&d.get().ticket) == TICKET_LIVE {
                    tickets.push(d.get().ticket);
                }
            }
            ShOp::ReleaseLast | ShOp::ReleaseLastTwice => {
                let Some(mut t) = tickets.pop() else { continue };
                let mut r = Out::<bool>::new();
                let s = st(
                    call!(pacer_shared_release(h, &mut t, r.ptr())),
                    "pacer_shared_release",
                );
                if s == OK {
                    let first = r.get();
                    assert_eq!(ticket::state(&t), TICKET_SPENT);
                    if matches!(op, ShOp::ReleaseLastTwice) {
                        let mut r2 = Out::<bool>::new();
                        let s2 = st(
                            call!(pacer_shared_release(h, &mut t, r2.ptr())),
                            "pacer_shared_release(again)",
                        );
                        if first && s2 == OK {
                            assert!(!r2.get(), "a shared ticket released twice refunded twice");
                        }
                    }
                } else {
                    // A ticket from the other handle of the same file may
                    // be refused as foreign; nothing else may fail.
                    assert!(
                        handles.len() > 1,
                        "pacer_shared_release of its own ticket failed: {s}"
                    );
                    assert!(r.untouched());
                }
            }
            ShOp::ForgeRelease {
                seq,
                debit,
                state,
                own_owner,
            } => {
                let owner = if own_owner {
                    tickets.last().map_or(0, ticket::owner)
                } else {
                    seq ^ debit
                };
                let mut t = ticket::make(seq, debit, state as u32 % 4, owner);
                let mut r = Out::<bool>::new();
                let s = st(
                    call!(pacer_shared_release(h, &mut t, r.ptr())),
                    "pacer_shared_release(forged)",
                );
                if s != OK {
                    assert!(r.untouched(), "failed release wrote *out_refunded");
                }
            }
            ShOp::Info => {
                let mut p = Out::<*const Storage>::new();
                let s = st(call!(pacer_shared_pacer(h, p.ptr())), "pacer_shared_pacer");
                assert_eq!(s, OK);
                let mut info = Out::<pacer_info>::new();
                let s = st(
                    call!(pacer_get_info(p.get(), info.ptr())),
                    "pacer_get_info(shared)",
                );
                assert_eq!(s, OK);
                let info = info.get();
                if pristine {
                    // An adaptive pacer decides at its rate in force, up
                    // to the ceiling.
                    let floor = debt_floor(&cfg, &info);
                    assert!(
                        -floor <= info.tokens_units as i128
                            && info.tokens_units <= info.capacity_units,
                        "shared tokens out of bounds: {} not in [-{}, {}] (max_debt_units {})",
                        info.tokens_units,
                        floor,
                        info.capacity_units,
                        info.max_debt_units
                    );
                }
            }
            ShOp::Observe {
                outcome,
                handle,
                null_out,
            } => {
                let code = outcome.code();
                let last = handles.last_mut().unwrap();
                let (hp, what) = adaptive_handle(last, off, handle);
                adaptive_call(h, hp, what, null_out, Some(code), &cfg, |hp, rp| {
                    st(
                        call!(pacer_shared_observe(hp, code, rp)),
                        "pacer_shared_observe",
                    )
                });
            }
            ShOp::RateInForce { handle, null_out } => {
                let last = handles.last_mut().unwrap();
                let (hp, what) = adaptive_handle(last, off, handle);
                adaptive_call(h, hp, what, null_out, None, &cfg, |hp, rp| {
                    st(
                        call!(pacer_shared_rate_in_force(hp, rp)),
                        "pacer_shared_rate_in_force",
                    )
                });
            }
            ShOp::ScribbleControl(word) => {
                use std::os::unix::fs::FileExt;
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("the opened file");
                f.write_all_at(&word.to_le_bytes(), env.control_at as u64)
                    .expect("writing the control word");
            }
            ShOp::OpenAgain => {
                if handles.len() >= 3 {
                    continue;
                }
                let mut m = Aligned::<128>::filled(crate::SENTINEL);
                let s = st(
                    call!(pacer_shared_open(m.at(off), cp.as_ptr(), &cfg)),
                    "pacer_shared_open(again)",
                );
                // The file was accepted once; a second open may still fail
                // only if a hostile byte we wrote made it so (not here: the
                // header was checked already), so it must succeed.
                assert_eq!(s, OK, "a second open of an accepted file failed");
                handles.push(m);
            }
        }
    }
    let _ = pacer_release;
    // SAFETY: no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    for mut m in handles {
        let h: *mut pacer_shared = m.at(off);
        // The view is two pages; the storage lies in its first page.
        let mut sp = Out::<*const Storage>::new();
        let s = st(call!(pacer_shared_pacer(h, sp.ptr())), "pacer_shared_pacer");
        assert_eq!(s, OK);
        let view = sp.get() as usize & !(page - 1);
        trace_maps(
            &format!(
                "storage {:#x} view {view:#x}; before close:",
                sp.get() as usize
            ),
            view,
            2 * page,
        );
        let s = st(call!(pacer_shared_close(h)), "pacer_shared_close");
        assert_eq!(s, OK, "pacer_shared_close on an open handle");
        trace_maps("after close:", view, 2 * page);
        // Whether the view is gone is checked below by the file's path, not
        // by address: once unmapped, an address can be handed out again at
        // once (reading /proc/self/maps allocates), so "still mapped at the
        // view's address" is no evidence.
        let s = st(call!(pacer_shared_close(h)), "pacer_shared_close(again)");
        assert_eq!(s, NOT_OPEN, "closing a closed handle");
        let mut d = Out::<pacer_decision>::new();
        let s = st(
            call!(pacer_shared_reserve(h, d.ptr())),
            "pacer_shared_reserve(closed)",
        );
        assert_eq!(s, NOT_OPEN, "reserve on a closed handle");
        assert!(d.untouched());
        let mut r = Out::<u32>::new();
        let s = st(
            call!(pacer_shared_observe(h, crate::OUTCOME_THROTTLED, r.ptr())),
            "pacer_shared_observe(closed)",
        );
        assert_eq!(s, NOT_OPEN, "observe on a closed handle");
        let s = st(
            call!(pacer_shared_rate_in_force(h, r.ptr())),
            "pacer_shared_rate_in_force(closed)",
        );
        assert_eq!(s, NOT_OPEN, "rate in force on a closed handle");
        assert!(r.untouched(), "a call on a closed handle wrote its out");
    }
    // Every handle is closed: nothing of the file may stay mapped.
    if let Some(left) = mapped_from(&path) {
        if !left.is_empty() {
            assert!(
                !expect().close_unmaps,
                "pacer_shared_close left {} mapping(s) of {} in /proc/self/maps: {:x?}",
                left.len(),
                path.display(),
                left
            );
            LEFT_MAPPED.fetch_add(left.len() as u64, std::sync::atomic::Ordering::Relaxed);
            for (a, b) in left {
                // SAFETY: the library's own leftover mapping of this
                // closed file; nothing references it any more.
                unsafe { libc::munmap(a as *mut libc::c_void, b - a) };
            }
        }
    }
    let s = st(
        call!(pacer_shared_unlink(cp.as_ptr())),
        "pacer_shared_unlink",
    );
    assert_eq!(s, OK, "unlinking the opened file");
}
