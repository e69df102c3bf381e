//! Notices: structured reports of settings that were ignored, clamped or
//! that switched pacing off (SPEC §2), a fixed-capacity once-per-key
//! registry, and their English rendering.

use core::fmt;

use crate::budget::{refusal_schedule_ms, MS_PER_MINUTE};
use crate::text::write_into;

/// What a notice reports. The numbers are part of the C ABI: never reused.
///
/// The meaning of [`Notice::values`] for each kind is given on the variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum NoticeKind {
    /// Rate text is not a plain decimal number. `[rate used]`.
    RateMalformed = 1,
    /// Rate above the maximum. `[rate used]`.
    RateClamped = 2,
    /// Idle timeout text is malformed. `[idle used, ms]`.
    IdleMalformed = 3,
    /// Idle timeout outside its range. `[idle used, ms]`.
    IdleClamped = 4,
    /// Total timeout text is malformed. `[total used, ms]`.
    TotalMalformed = 5,
    /// Total timeout outside its range. `[total used, ms]`.
    TotalClamped = 6,
    /// Retry count text is malformed. `[retries used]`.
    RetriesMalformed = 7,
    /// Retry count above the ladder ceiling. `[retries used, idle ms]`.
    RetriesClamped = 8,
    /// Total below idle: idle lowered to total. `[idle before, total]`.
    IdleLowered = 9,
    /// Idle set, total not and below it: total raised. `[total before, idle]`.
    TotalRaised = 10,
    /// Positive rate but no room to wait: pacing off. `[retries, idle ms, rate]`.
    PacingDisabled = 11,
    /// Pacing on but refusals could not outlast the wait for a slot, so
    /// overflow is shaped and admitted. `[rate, retries, bound ms]`.
    NoRefuse = 12,
}

impl NoticeKind {
    /// Every kind, in number order.
    pub const ALL: [NoticeKind; 12] = [
        NoticeKind::RateMalformed,
        NoticeKind::RateClamped,
        NoticeKind::IdleMalformed,
        NoticeKind::IdleClamped,
        NoticeKind::TotalMalformed,
        NoticeKind::TotalClamped,
        NoticeKind::RetriesMalformed,
        NoticeKind::RetriesClamped,
        NoticeKind::IdleLowered,
        NoticeKind::TotalRaised,
        NoticeKind::PacingDisabled,
        NoticeKind::NoRefuse,
    ];

    /// The dedupe-key namespace: the setting a notice is about, or the
    /// condition it reports. Keys of different namespaces never collide.
    pub const fn namespace(self) -> &'static str {
        match self {
            NoticeKind::RateMalformed | NoticeKind::RateClamped => "rate",
            NoticeKind::IdleMalformed | NoticeKind::IdleClamped => "idle",
            NoticeKind::TotalMalformed | NoticeKind::TotalClamped => "total",
            NoticeKind::RetriesMalformed | NoticeKind::RetriesClamped => "retries",
            NoticeKind::IdleLowered => "pair-idle",
            NoticeKind::TotalRaised => "pair-total",
            NoticeKind::PacingDisabled => "disabled",
            NoticeKind::NoRefuse => "norefuse",
        }
    }

    /// The kind's stable name, as in `tests/vectors` (`rate_malformed`, …).
    pub const fn name(self) -> &'static str {
        match self {
            NoticeKind::RateMalformed => "rate_malformed",
            NoticeKind::RateClamped => "rate_clamped",
            NoticeKind::IdleMalformed => "idle_malformed",
            NoticeKind::IdleClamped => "idle_clamped",
            NoticeKind::TotalMalformed => "total_malformed",
            NoticeKind::TotalClamped => "total_clamped",
            NoticeKind::RetriesMalformed => "retries_malformed",
            NoticeKind::RetriesClamped => "retries_clamped",
            NoticeKind::IdleLowered => "idle_lowered",
            NoticeKind::TotalRaised => "total_raised",
            NoticeKind::PacingDisabled => "pacing_disabled",
            NoticeKind::NoRefuse => "norefuse",
        }
    }

    /// Whether the key is the offending text (`rate:<raw>`) rather than
    /// the numbers (`disabled:<r>:<idle>`).
    pub const fn keyed_by_text(self) -> bool {
        (self as u32) <= NoticeKind::RetriesClamped as u32
    }
}

/// One notice: its kind, the offending text (empty when the notice is
/// about a combination of values), and up to three numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Notice<'a> {
    /// What happened.
    pub kind: NoticeKind,
    /// The setting's text as given (untrimmed), or `""`.
    pub raw: &'a str,
    /// The numbers, as documented on each [`NoticeKind`]; unused ones are 0.
    pub values: [u64; 3],
}

impl<'a> Notice<'a> {
    /// Builds a notice.
    pub const fn new(kind: NoticeKind, raw: &'a str, values: [u64; 3]) -> Self {
        Notice { kind, raw, values }
    }

    /// The dedupe key. Within a namespace, text-keyed notices are keyed by
    /// a 64-bit hash of the text (FNV-1a) plus its length; number-keyed
    /// notices by their exact numbers.
    pub fn key(&self) -> NoticeKey {
        let (text_hash, text_len, values) = if self.kind.keyed_by_text() {
            (fnv1a(self.raw.as_bytes()), self.raw.len() as u64, [0; 3])
        } else {
            (0, 0, self.values)
        };
        NoticeKey {
            namespace: self.kind.namespace(),
            text_hash,
            text_len,
            values,
        }
    }

    /// Writes the English text into `out`. `Ok(written)`, or `Err(needed)`
    /// (nothing meaningful written) when `out` is too short.
    pub fn render(&self, out: &mut [u8]) -> Result<usize, usize> {
        write_into(out, |w| fmt::write(w, format_args!("{self}")))
    }

    /// Writes the dedupe key as text (SPEC §2) into `out`: the namespace,
    /// then `:<raw>` for text-keyed kinds (`rate: 9x`) or `:<a>:<b>:<c>`
    /// for the others (`disabled:5:10000:60`). Equal keys mean the same
    /// [`Notice::key`]. For bindings that deduplicate in their own maps.
    /// `Ok(written)`, or `Err(needed)` when `out` is too short.
    pub fn write_key(&self, out: &mut [u8]) -> Result<usize, usize> {
        let namespace = self.kind.namespace();
        if self.kind.keyed_by_text() {
            write_into(out, |w| {
                fmt::write(w, format_args!("{namespace}:{}", self.raw))
            })
        } else {
            let [a, b, c] = self.values;
            write_into(out, |w| {
                fmt::write(w, format_args!("{namespace}:{a}:{b}:{c}"))
            })
        }
    }
}

impl fmt::Display for Notice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.values;
        let raw = self.raw;
        match self.kind {
            NoticeKind::RateMalformed => write!(
                f,
                "ignoring new-connection rate {raw:?}: not a whole number of connections per minute; using {a}/minute"
            ),
            NoticeKind::RateClamped => write!(
                f,
                "new-connection rate {raw:?} is above the maximum; using {a}/minute"
            ),
            NoticeKind::IdleMalformed => write!(
                f,
                "ignoring idle timeout {raw:?}: not a whole number of milliseconds; using {a}ms"
            ),
            NoticeKind::IdleClamped => write!(
                f,
                "idle timeout {raw:?} is outside the accepted range; using {a}ms"
            ),
            NoticeKind::TotalMalformed => write!(
                f,
                "ignoring total timeout {raw:?}: not a whole number of milliseconds; using {a}ms"
            ),
            NoticeKind::TotalClamped => write!(
                f,
                "total timeout {raw:?} is outside the accepted range; using {a}ms"
            ),
            NoticeKind::RetriesMalformed => write!(
                f,
                "ignoring max retries {raw:?}: not a whole number; using {a}"
            ),
            NoticeKind::RetriesClamped => write!(
                f,
                "max retries {raw:?} is more than a {b}ms idle timeout can hold; using {a}"
            ),
            NoticeKind::IdleLowered => write!(
                f,
                "idle timeout {a}ms is longer than the {b}ms total timeout; lowering it to {b}ms"
            ),
            NoticeKind::TotalRaised => write!(
                f,
                "total timeout {a}ms is shorter than the configured {b}ms idle timeout; raising it to {b}ms"
            ),
            NoticeKind::PacingDisabled => write!(
                f,
                "not pacing new connections: a {a}-retry budget leaves no room to queue inside the resolved {b}ms request deadline"
            ),
            NoticeKind::NoRefuse => {
                let retries = u32::try_from(b).unwrap_or(u32::MAX);
                let schedule_ms = refusal_schedule_ms(retries, c);
                let slot_wait_ms = if a == 0 { 0 } else { MS_PER_MINUTE.div_ceil(a) };
                write!(
                    f,
                    "pacing new connections at {a}/minute without refusing overflow: a {b}-retry schedule spans only {schedule_ms}ms, which cannot outlast the {slot_wait_ms}ms wait for a free connection slot, so excess connections are admitted late rather than failed"
                )
            }
        }
    }
}

/// A notice's dedupe key: namespace first, so a hostile setting text can
/// never suppress a notice of another kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NoticeKey {
    /// `rate`, `idle`, `disabled`, `norefuse`, …
    pub namespace: &'static str,
    /// FNV-1a of the offending text (text-keyed namespaces only).
    pub text_hash: u64,
    /// Length of the offending text (text-keyed namespaces only).
    pub text_len: u64,
    /// The numbers (number-keyed namespaces only).
    pub values: [u64; 3],
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Remembers which notices were already emitted, so each is shown once per
/// key. Caller-owned, fixed capacity, no allocation. When full it stops
/// remembering and lets notices through again: repeating a notice is
/// better than losing one.
#[derive(Clone, Debug, Default)]
pub struct NoticeRegistry<const N: usize = 32> {
    seen: heapless::Vec<NoticeKey, N>,
}

impl<const N: usize> NoticeRegistry<N> {
    /// An empty registry.
    pub const fn new() -> Self {
        NoticeRegistry {
            seen: heapless::Vec::new(),
        }
    }

    /// `true` the first time a notice's key is seen (emit it), `false` after.
    pub fn first_time(&mut self, notice: &Notice<'_>) -> bool {
        let key = notice.key();
        if self.seen.contains(&key) {
            return false;
        }
        let _ = self.seen.push(key);
        true
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing has been emitted yet.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}
