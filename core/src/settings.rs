//! Resolving the four settings strings into a [`Budget`] (SPEC §2).
//!
//! Settings arrive as environment-variable text. A bad value never fails a
//! request: it keeps the default (or is clamped) and yields a [`Notice`].

use crate::budget::*;
use crate::notice::{Notice, NoticeKind};

/// Most notices one resolution can produce: one per setting, the pair rule,
/// and one of `disabled` / `norefuse`.
pub const MAX_NOTICES: usize = 6;

/// The raw settings text; `None` (or blank text) means unset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings<'a> {
    /// New connections per minute.
    pub rate_per_min: Option<&'a str>,
    /// No-data deadline per request, ms.
    pub idle_timeout_ms: Option<&'a str>,
    /// Total deadline per request, ms.
    pub total_timeout_ms: Option<&'a str>,
    /// Client retry count.
    pub max_retries: Option<&'a str>,
}

/// How one settings string reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Missing, empty or only whitespace.
    Unset,
    /// Plain ASCII decimal digits that fit a `u64`.
    Value(u64),
    /// Anything else: signs, exponents, hex, fractions, separators, words,
    /// or a number past `u64::MAX`.
    Malformed,
}

/// Reads a setting strictly: surrounding whitespace trimmed, then only ASCII
/// digits (`1e2`, `0x10`, `-0`, `+5`, `12.5`, `1,000`, `NaN` are malformed).
pub fn parse_setting(raw: Option<&str>) -> Parsed {
    let text = match raw {
        None => return Parsed::Unset,
        Some(text) => text.trim(),
    };
    if text.is_empty() {
        return Parsed::Unset;
    }
    let mut value: u64 = 0;
    for byte in text.bytes() {
        if !byte.is_ascii_digit() {
            return Parsed::Malformed;
        }
        value = match value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(byte - b'0')))
        {
            Some(v) => v,
            None => return Parsed::Malformed,
        };
    }
    Parsed::Value(value)
}

/// A resolved budget and the notices resolving it produced, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution<'a> {
    /// The budget to pace with.
    pub budget: Budget,
    /// What was ignored, clamped or switched off, for the caller to show
    /// (deduplicated through a [`crate::NoticeRegistry`]).
    pub notices: heapless::Vec<Notice<'a>, MAX_NOTICES>,
}

impl<'a> Resolution<'a> {
    fn push(&mut self, notice: Notice<'a>) {
        // Capacity is sized for the worst case above; a full list would be a
        // bug, and dropping a notice must still never fail a request.
        let _ = self.notices.push(notice);
    }
}

/// Where a clamped or defaulted setting landed.
struct Resolved {
    value: u64,
    /// A valid number was given (possibly clamped).
    explicit: bool,
}

/// One numeric setting: unset, the default; malformed, the default and a
/// `malformed` notice `[default]`; outside `[min, max]`, the nearest bound
/// and a `clamped` notice `[value used, context]`.
fn resolve_range<'a>(
    raw: Option<&'a str>,
    default: u64,
    min: u64,
    max: u64,
    (malformed, clamped): (NoticeKind, NoticeKind),
    context: u64,
    out: &mut Resolution<'a>,
) -> Resolved {
    let text = raw.unwrap_or("");
    match parse_setting(raw) {
        Parsed::Unset => Resolved {
            value: default,
            explicit: false,
        },
        Parsed::Malformed => {
            out.push(Notice::new(malformed, text, [default, 0, 0]));
            Resolved {
                value: default,
                explicit: false,
            }
        }
        Parsed::Value(v) => {
            let value = v.clamp(min, max);
            if value != v {
                out.push(Notice::new(clamped, text, [value, context, 0]));
            }
            Resolved {
                value,
                explicit: true,
            }
        }
    }
}

/// Resolves the settings: parse, clamp, apply the timeout pair rule, cap the
/// retry count at the ladder ceiling of the final idle timeout, then report
/// whether pacing switched itself off or cannot refuse.
pub fn resolve<'a>(settings: &Settings<'a>) -> Resolution<'a> {
    resolve_inner(settings, None)
}

/// [`resolve`] for a caller that sizes its own request deadline: the idle
/// timeout is `idle_timeout_ms` as given (the idle setting text is not read,
/// not clamped, no notice), and when the total timeout is shorter the idle
/// timeout is lowered to it silently. The retry count is then capped at the
/// ladder ceiling of that idle timeout as usual.
pub fn resolve_with_idle_override<'a>(
    settings: &Settings<'a>,
    idle_timeout_ms: u64,
) -> Resolution<'a> {
    resolve_inner(settings, Some(idle_timeout_ms))
}

fn resolve_inner<'a>(settings: &Settings<'a>, idle_override_ms: Option<u64>) -> Resolution<'a> {
    let mut out = Resolution {
        budget: Budget::DEFAULT,
        notices: heapless::Vec::new(),
    };

    let rate_per_min = resolve_range(
        settings.rate_per_min,
        DEFAULT_RATE_PER_MIN as u64,
        0,
        MAX_RATE_PER_MIN as u64,
        (NoticeKind::RateMalformed, NoticeKind::RateClamped),
        0,
        &mut out,
    )
    .value as u32;

    let idle = match idle_override_ms {
        Some(value) => Resolved {
            value,
            explicit: false,
        },
        None => resolve_range(
            settings.idle_timeout_ms,
            DEFAULT_IDLE_TIMEOUT_MS,
            MIN_IDLE_TIMEOUT_MS,
            MAX_IDLE_TIMEOUT_MS,
            (NoticeKind::IdleMalformed, NoticeKind::IdleClamped),
            0,
            &mut out,
        ),
    };
    let total = resolve_range(
        settings.total_timeout_ms,
        DEFAULT_TOTAL_TIMEOUT_MS,
        MIN_TOTAL_TIMEOUT_MS,
        MAX_TOTAL_TIMEOUT_MS,
        (NoticeKind::TotalMalformed, NoticeKind::TotalClamped),
        0,
        &mut out,
    );

    let (mut idle_ms, mut total_ms) = (idle.value, total.value);
    if total_ms < idle_ms {
        if idle_override_ms.is_some() {
            idle_ms = total_ms;
        } else if idle.explicit && !total.explicit {
            out.push(Notice::new(
                NoticeKind::TotalRaised,
                "",
                [total_ms, idle_ms, 0],
            ));
            total_ms = idle_ms;
        } else {
            out.push(Notice::new(
                NoticeKind::IdleLowered,
                "",
                [idle_ms, total_ms, 0],
            ));
            idle_ms = total_ms;
        }
    }

    let ceiling = ladder_ceiling(idle_ms);
    let default_retries = if DEFAULT_MAX_RETRIES < ceiling {
        DEFAULT_MAX_RETRIES
    } else {
        ceiling
    };
    let max_retries = resolve_range(
        settings.max_retries,
        default_retries as u64,
        0,
        ceiling as u64,
        (NoticeKind::RetriesMalformed, NoticeKind::RetriesClamped),
        idle_ms,
        &mut out,
    )
    .value as u32;

    let budget = Budget {
        rate_per_min,
        idle_timeout_ms: idle_ms,
        total_timeout_ms: total_ms,
        max_retries,
    };
    if let Some(notice) = mode_notice(&budget) {
        out.push(notice);
    }
    out.budget = budget;
    out
}

/// The notice a budget's pacing mode calls for, if any: `disabled` when a
/// positive rate has no room to wait (bound 0), `norefuse` when pacing is on
/// with retries but the refusal schedule cannot outlast the wait for a slot.
/// [`resolve`] ends with it; a binding building a pacer from numbers rather
/// than settings text reports it the same way.
pub fn mode_notice(budget: &Budget) -> Option<Notice<'static>> {
    let bound = budget.wait_bound_ms();
    let (rate, retries) = (budget.rate_per_min as u64, budget.max_retries as u64);
    if rate > 0 && bound == 0 {
        Some(Notice::new(
            NoticeKind::PacingDisabled,
            "",
            [retries, budget.idle_timeout_ms, rate],
        ))
    } else if budget.pacing_enabled() && retries > 0 && !budget.can_refuse() {
        Some(Notice::new(
            NoticeKind::NoRefuse,
            "",
            [rate, retries, bound],
        ))
    } else {
        None
    }
}
