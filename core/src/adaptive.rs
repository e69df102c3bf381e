//! Adaptive pacing (SPEC §14): the rate in force follows the upstream's own
//! answers, within `[floor, ceiling]`.
//!
//! # The law
//! The pacer counts the connections the upstream opened (what the caller
//! reports with `observe(opened)`) per minute of the clock, `⌊t/60000⌋`,
//! so when a throttle comes it knows about how many got through in the
//! last 60 s: for an upstream that allows `T` in any 60 s, that is `T`.
//! The word keeps an origin `t₀`, a rate `L` (per minute), whether the law
//! *searches* or *probes*, and an `again` bit. Writing `Δ = now − t₀` and
//! `ℓ = min(L, ceiling)`, the rate in force is `clamp(curve, lowest,
//! ceiling)`, where `lowest` is the floor raised to the lowest rate that
//! can refuse (SPEC §3; below it the pacer shapes and admits everything
//! within the bound, so a lower rate would not slow the upstream), never
//! above the ceiling, and:
//!
//! - **Searching** (from creation, `L` the configured rate): `curve =
//!   ℓ · 2ⁿ · (D + r) / D` with `D` = [`SEARCH_DOUBLING_MS`] (or
//!   [`RESEARCH_DOUBLING_MS`] with `again`), `n = ⌊Δ/D⌋`, `r = Δ mod D`;
//!   the ceiling from `n ≥ 10`. With the default ceiling (the configured
//!   rate) the rate never rises.
//! - **Probing** (after a throttle): before `t₀`, the lowest rate (the
//!   pause below); then `curve = ℓ` until `Δ = HOLD_MS + w`, and
//!   `ℓ + s + 2` from then on, where the wait `w = max(PROBE_WAIT_MS,
//!   PROBE_EVERY_OPENINGS · 60000 / ℓ)`, divided by [`QUICK_PROBE`] with
//!   `again`, and the step `s = ⌊ℓ / PROBE_STEP_DEN⌋` with `again` (after
//!   a search), else (after a probe's throttle) the narrower `max(⌊ℓ /
//!   NARROW_STEP_DEN⌋, min(⌊ℓ / PROBE_STEP_DEN⌋, NARROW_STEP_MIN))`.
//!   The probe is a step, not a slope: above
//!   the rise margin below, so a limit that rose shows in the count within
//!   a minute, and far enough above `L` that an upstream still at `L`
//!   throttles within seconds rather than after a minute above it; the
//!   wait keeps probes rare (4 min at the limits from 20/min up, one per
//!   80 openings below), since each costs a throttle or a few when the
//!   limit did not move.
//!
//! What `observe` does at `at = max(now, t₀)` (its answer, and `R`
//! below, read at `now`), with the counts first moved
//! to `at`'s minute (the count becomes the one before when `at` is in the
//! next minute, and both are dropped when later), `through` the larger of
//! the two counts and `recent` this minute's count plus the one before's
//! times the share of it still inside the last 60 s:
//!
//! - **opened**: the count goes up by one. While probing, at least
//!   [`HOLD_MS`] after `t₀`, when `through > L + ⌊L / RISE_MARGIN⌋ + 1` the
//!   limit has risen: search again (`again`) from the rate in force, origin
//!   `at`.
//! - **throttled** while probing, within [`HOLD_MS`] of `t₀`: nothing
//!   changes (a limit counted per minute shows a decrease only after up to
//!   a minute, so these are the same episode's throttles).
//! - **throttled** otherwise: probe from origin `at`, `again` when this
//!   ends a search (its count may have covered less than a minute), with
//!   `R` the rate in force and `E` what got through: `max(through,
//!   recent)` when this ends a search, `through` while probing (no
//!   upstream that allows `T` a minute, in any 60 s or in each calendar
//!   minute, lets a whole minute's count exceed `T`, while `recent` can
//!   read up to `2T` on a calendar-minute upstream). When nothing was
//!   counted (a caller that does not report openings), `L = B − max(1,
//!   ⌊B / CUT_DEN⌋)` with `B = min(R, ℓ)` (a probe's throttle says
//!   nothing of `L` itself); `min(E, ceiling)` when this ends a search (a
//!   burst can open more than the rate); `max(E, L)` when `E < R` at the
//!   probe's step (`Δ ≥ HOLD_MS + w`: `L` held through the hold and the
//!   wait without a throttle, so this one says the limit is below the
//!   step, not below `L`, while the count may cover part of a minute or
//!   a minute below `L`); `E` when `E < R` otherwise; else `R − max(1,
//!   ⌊R / CUT_DEN⌋)` (the count does not explain the throttle: an
//!   upstream that let a burst through).
//! - **The pause**: when the throttle ends the first search (not a search
//!   again) less than a minute after it began, everything the search
//!   opened stays in the upstream's window until a minute after it began,
//!   so every connection opened before then would be throttled too: the
//!   origin becomes `t₀ + 60000` (the counts moved to its minute), and the
//!   rate reads the lowest until then.
//! - **No waits in a search's first minute**: for [`SEARCH_NO_WAITS_MS`]
//!   after a search's origin a refusing pacer's bound in force is 0
//!   (`Params::in_force`), so what a token does not cover at once is
//!   refused with the usual hint rather than granted a wait at a rate the
//!   upstream has not answered. A booking keeps the planned bound when it
//!   is redeemed.
//!
//! The constants' derivation is in docs/design.md ("Adaptive pacing").
//!
//! # State
//! One 128-bit control word beside the pacer's state word: `t₀` (ms) in the
//! high 64 bits; below it the minute of the counts (`⌊t/60000⌋ −
//! ⌊t₀/60000⌋`, 16 bits, saturating), the openings counted in that minute
//! and in the one before (16 bits each, saturating), and the probing bit,
//! the `again` bit and `L` (14 bits). A decision reads it once; `observe`
//! stores it by compare-and-swap. The rate in force is a pure function of
//! the word and the clock.
//!
//! # Exactness
//! Every intermediate is below 2^53, so the same arithmetic is exact in
//! Lua's doubles (the Redis script): `ℓ ≤ 600`, the search term is below
//! `600 · 2^9 · 40000`, the wait below `80 · 60000`, and the origin below
//! `2^52 + 60000` (a pause moves it a minute past a clock below 2^52); the
//! origin and `Δ` are compared and subtracted, never multiplied.

/// The counting window, ms: openings are counted per minute of the clock.
pub const WINDOW_MS: u64 = 60_000;

/// While probing, a throttle sooner than this after the origin (the last
/// decrease) changes nothing, and the probe does not start, ms.
pub const HOLD_MS: u64 = 60_000;

/// Before the first throttle the rate doubles every this many ms.
pub const SEARCH_DOUBLING_MS: u64 = 5_000;

/// A search again (after the count showed more room) doubles every this
/// many ms.
pub const RESEARCH_DOUBLING_MS: u64 = 20_000;

/// Doublings after which the search is at any ceiling (2^10 > 600).
pub const SEARCH_DOUBLINGS_CAP: u64 = 10;

/// After the hold, the rate stays at `L` for at least this long before it
/// probes, ms.
pub const PROBE_WAIT_MS: u64 = 240_000;

/// And for at least the time `L` takes to open this many connections, so
/// that at a low limit a probe (one throttle or a few when the limit did
/// not rise) comes at most once every this many openings.
pub const PROBE_EVERY_OPENINGS: u64 = 80;

/// After a search (whose count may have covered less than a minute) the
/// wait before the first probe is divided by this: at the limits from
/// 20/min up the first probe comes 20 s after the hold, so an estimate
/// read from part of a minute is corrected within the first minutes (a
/// probe's throttle does not lower `L`).
pub const QUICK_PROBE: u64 = 12;

/// After a search a probe runs at `L + ⌊L / PROBE_STEP_DEN⌋ + 2`: above
/// the rise margin, so that a limit that rose shows in the count within a
/// minute, and fast enough that one that did not throttles within seconds.
pub const PROBE_STEP_DEN: u32 = 2;

/// After a probe's throttle (`L` held through a hold and a wait, or read
/// from a whole minute's count) the step is `⌊L / NARROW_STEP_DEN⌋`, no
/// narrower than `min(⌊L / PROBE_STEP_DEN⌋, NARROW_STEP_MIN)`: the limit
/// lies near `L` or between `L` and the step refused, and an upstream that
/// throttles on its rate (a token bucket) refuses a wide step within
/// seconds every time, its count reading `L`, so `L` would never climb.
pub const NARROW_STEP_DEN: u32 = 4;

/// The narrow step's least size, per minute (unless `⌊L /
/// PROBE_STEP_DEN⌋` is smaller): 80/min above an upstream still at `L`
/// empties a burst of 10 in 7.5 s, so a step that did not find more room
/// ends within seconds.
pub const NARROW_STEP_MIN: u64 = 80;

/// For this long after a search's origin a refusing pacer grants no
/// waits, ms: its rate is one the upstream has not answered yet, and a wait
/// granted at it is an opening that no throttle seen later can take back
/// (from 600/min at the default bound, 48 of them before the first answer
/// can come back). Once the upstream's window holds a minute of the search
/// without a throttle, the rate has been answered.
pub const SEARCH_NO_WAITS_MS: u64 = 60_000;

/// A minute's count above `L + L / RISE_MARGIN + 1` shows the limit rose.
pub const RISE_MARGIN: u32 = 8;

/// When the count does not explain a throttle the rate drops by
/// `1/CUT_DEN` of itself (at least 1). A count that did not explain a
/// throttle was at least the rate `R`, and the next minute's count can read
/// as much again: the cut leaves that within the rise margin, `R ≤ L + ⌊L /
/// RISE_MARGIN⌋ + 1` for `L = R − max(1, ⌊R / CUT_DEN⌋)`, so it is not
/// taken for a risen limit (with `RISE_MARGIN` 8 that needs `CUT_DEN` of
/// at least 9 at every rate up to 600; at 8 a count of 600 after a cut
/// from 600 read as a rise).
pub const CUT_DEN: u32 = 16;
/// The largest count a window keeps.
pub const COUNT_CAP: u16 = u16::MAX;

const PROBING_BIT: u16 = 1 << 15;
const AGAIN_BIT: u16 = 1 << 14;
const LIMIT_MASK: u16 = (1 << 14) - 1;

// The probe rises past the rise margin, so a limit that rose shows.
const _: () = assert!(PROBE_STEP_DEN < RISE_MARGIN);
const _: () = assert!(NARROW_STEP_DEN < RISE_MARGIN);
const _: () = assert!(1 << SEARCH_DOUBLINGS_CAP > 600);
// A cut leaves the count that did not explain it within the rise margin.
const _: () = assert!(cut_within_margin());

/// Whether, at every rate `R` up to the largest, the cut's `L = cut(R)`
/// keeps `R ≤ L + ⌊L / RISE_MARGIN⌋ + 1`.
const fn cut_within_margin() -> bool {
    let mut rate = 1;
    while rate <= crate::budget::MAX_RATE_PER_MIN {
        let limit = cut(rate);
        if rate > limit + limit / RISE_MARGIN + 1 {
            return false;
        }
        rate += 1;
    }
    true
}

/// `rate` less `max(1, ⌊rate / CUT_DEN⌋)`, not below 0: the law's
/// multiplicative step down.
const fn cut(rate: u32) -> u32 {
    let step = if rate / CUT_DEN > 1 {
        rate / CUT_DEN
    } else {
        1
    };
    rate.saturating_sub(step)
}

/// What the upstream answered to a new connection (the argument of
/// [`Pacer::observe`](crate::Pacer::observe)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Outcome {
    /// The upstream opened it.
    Opened = 1,
    /// The upstream throttled it (its rate limit, not the pacer's).
    Throttled = 2,
}

impl Outcome {
    /// The outcome's name in text interfaces: `opened`, `throttled`.
    pub const fn name(self) -> &'static str {
        ["opened", "throttled"][self as usize - 1]
    }
}

/// The adaptive controller's state: the control word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControlView {
    /// The law's origin `t₀`, ms: the last decrease or search start (or
    /// the pacer's creation).
    pub origin_ms: u64,
    /// The minute the counts belong to: `⌊t/60000⌋ − ⌊t₀/60000⌋` at the
    /// last count (saturating).
    pub window: u16,
    /// Openings counted in that minute (saturating).
    pub opened: u16,
    /// Openings counted in the minute before it (0 when the count is older
    /// than that).
    pub opened_before: u16,
    /// `L`, per minute: the rate a search starts from, or what got through
    /// when the upstream last throttled (at creation, the configured rate).
    pub limit_per_min: u16,
    /// Whether the law probes from `L` (after a throttle) rather than
    /// searches.
    pub probing: bool,
    /// Whether a search is a search again (the count showed a limit that
    /// rose): it doubles every [`RESEARCH_DOUBLING_MS`].
    pub again: bool,
}

impl ControlView {
    /// The control word: `origin_ms` in the high 64 bits, then `window`,
    /// `opened`, `opened_before` (16 bits each), then the `probing` bit, the
    /// `again` bit and `limit_per_min` (14 bits).
    pub const fn pack(self) -> u128 {
        let low = (self.limit_per_min & LIMIT_MASK)
            | if self.probing { PROBING_BIT } else { 0 }
            | if self.again { AGAIN_BIT } else { 0 };
        ((self.origin_ms as u128) << 64)
            | ((self.window as u128) << 48)
            | ((self.opened as u128) << 32)
            | ((self.opened_before as u128) << 16)
            | low as u128
    }

    /// The view a word holds ([`ControlView::pack`]'s inverse).
    pub const fn unpack(word: u128) -> ControlView {
        ControlView {
            origin_ms: (word >> 64) as u64,
            window: (word >> 48) as u16,
            opened: (word >> 32) as u16,
            opened_before: (word >> 16) as u16,
            limit_per_min: word as u16 & LIMIT_MASK,
            probing: word as u16 & PROBING_BIT != 0,
            again: word as u16 & AGAIN_BIT != 0,
        }
    }
}

/// The bounds the law moves within; `floor == 0` means adaptation is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Range {
    pub(crate) floor: u16,
    pub(crate) ceiling: u16,
    /// The lowest rate the law sets: the floor, raised to the lowest rate
    /// that can refuse (SPEC §3; never above the ceiling). Below
    /// it the pacer shapes: it admits every request within the bound, so
    /// a lower rate would not slow the upstream's new connections.
    pub(crate) lowest: u16,
}

impl Range {
    /// The control word of a pacer created at `now_ms` with configured rate
    /// `rate`: searching from it, nothing counted.
    pub(crate) const fn initial(rate: u32, now_ms: u64) -> ControlView {
        ControlView {
            origin_ms: now_ms,
            window: 0,
            opened: 0,
            opened_before: 0,
            limit_per_min: rate as u16,
            probing: false,
            again: false,
        }
    }

    /// The rate in force at `now_ms` (before the origin: a search reads
    /// the origin, a probe the lowest rate).
    pub(crate) fn rate_at(&self, control: &ControlView, now_ms: u64) -> u32 {
        if control.probing && now_ms < control.origin_ms {
            // The pause after a search's first throttle.
            return self.lowest as u32;
        }
        let elapsed = now_ms.saturating_sub(control.origin_ms);
        let ceiling = self.ceiling as u64;
        let limit = (control.limit_per_min as u64).min(ceiling);
        let curve = if !control.probing {
            let period = if control.again {
                RESEARCH_DOUBLING_MS
            } else {
                SEARCH_DOUBLING_MS
            };
            let doublings = elapsed / period;
            if doublings >= SEARCH_DOUBLINGS_CAP {
                ceiling
            } else {
                (limit << doublings) * (period + elapsed % period) / period
            }
        } else if elapsed < self.step_from_ms(control) {
            limit
        } else {
            limit + probe_step(limit, control.again) + 2
        };
        curve.clamp(self.lowest as u64, ceiling) as u32
    }

    /// While probing, how long after the origin the step begins, ms: the
    /// hold and the wait at `ℓ = min(L, ceiling)`.
    fn step_from_ms(&self, control: &ControlView) -> u64 {
        let limit = control.limit_per_min.min(self.ceiling) as u64;
        HOLD_MS + probe_wait_ms(limit, control.again)
    }

    /// The control word after `outcome` at `now_ms`, when it changes, and
    /// the rate in force after it.
    pub(crate) fn observe(
        &self,
        control: &ControlView,
        outcome: Outcome,
        now_ms: u64,
    ) -> (Option<ControlView>, u32) {
        let at = if now_ms > control.origin_ms {
            now_ms
        } else {
            control.origin_ms
        };
        // The rate in force at the caller's clock (`at` differs from it
        // only before the origin, where a change is held or counted).
        let rate = self.rate_at(control, now_ms);
        let held = control.probing && at - control.origin_ms < HOLD_MS;
        // At the probe's step (past the hold and the wait).
        let stepped = control.probing && at - control.origin_ms >= self.step_from_ms(control);
        let counted = rolled(control, at);
        let limit = control.limit_per_min as u32;
        let next = match outcome {
            Outcome::Opened => {
                let counted = ControlView {
                    opened: counted.opened.saturating_add(1),
                    ..counted
                };
                if !control.probing || held || through(&counted) <= limit + limit / RISE_MARGIN + 1
                {
                    return (Some(counted), rate);
                }
                // More got through in a minute than the limit it learned:
                // the limit rose. Search again from here.
                ControlView {
                    probing: false,
                    again: true,
                    limit_per_min: rate as u16,
                    ..counted
                }
            }
            Outcome::Throttled if held => return (None, rate),
            Outcome::Throttled => {
                // What got through: after a search, the count's best guess
                // at the last 60 s (the search may have crossed a minute);
                // while probing, the larger whole-minute count, which no
                // upstream that allows `T` a minute (any 60 s or each
                // calendar minute) lets exceed `T`.
                let seen = if control.probing {
                    through(&counted)
                } else {
                    through(&counted).max(recent(&counted, at))
                };
                ControlView {
                    probing: true,
                    again: !control.probing,
                    limit_per_min: match seen {
                        // Nothing counted (a caller that does not report
                        // openings): a multiplicative step down from the
                        // lower of the rate and `L` (a probe's throttle
                        // says nothing of `L` itself).
                        0 => cut(rate.min(control.limit_per_min as u32)),
                        // A search's burst can open more than its rate.
                        seen if !control.probing => seen.min(self.ceiling as u32),
                        // A throttle at the probe's step says the limit is
                        // below the step, not below `L`: `L` held through the
                        // hold and the wait without one (the count may cover
                        // part of a minute, or a minute below `L`).
                        seen if seen < rate && stepped => seen.max(limit),
                        seen if seen < rate => seen,
                        // The count does not explain the throttle (an
                        // upstream that let a burst through): a
                        // multiplicative step.
                        _ => cut(rate),
                    } as u16,
                    ..counted
                }
            }
        };
        // The first search's openings fill the upstream's window until a
        // minute after the search began: pause until then (`rate_at` reads
        // the lowest rate before the origin while probing).
        let origin = if outcome == Outcome::Throttled && !control.probing && !control.again {
            let filled = control.origin_ms.saturating_add(WINDOW_MS);
            if filled > at {
                filled
            } else {
                at
            }
        } else {
            at
        };
        let next = rolled(
            &ControlView {
                origin_ms: at,
                window: 0,
                ..next
            },
            origin,
        );
        let next = ControlView {
            origin_ms: origin,
            window: 0,
            ..next
        };
        (Some(next), self.rate_at(&next, now_ms))
    }
}

/// Whether a refusing pacer under `control` grants waits at `now_ms`: not
/// within [`SEARCH_NO_WAITS_MS`] of a search's origin.
pub(crate) const fn grants_waits(control: &ControlView, now_ms: u64) -> bool {
    control.probing || now_ms.saturating_sub(control.origin_ms) >= SEARCH_NO_WAITS_MS
}

/// The lowest rate the law sets for a pacer with these settings: `floor`,
/// raised to the lowest rate that can refuse (`⌈60000 / schedule⌉`, SPEC
/// §3) but never above `ceiling`. With no retries nothing can refuse, and
/// it is the floor.
pub(crate) const fn lowest_rate(floor: u32, ceiling: u32, max_retries: u32, bound_ms: u64) -> u32 {
    let schedule = crate::budget::refusal_schedule_ms(max_retries, bound_ms);
    if schedule == 0 || floor == 0 {
        return floor;
    }
    let refusing = 60_000u64.div_ceil(schedule);
    let raised = if refusing > ceiling as u64 {
        ceiling as u64
    } else {
        refusing
    };
    if raised > floor as u64 {
        raised as u32
    } else {
        floor
    }
}

/// How long the rate stays at `L` after the hold before it probes, ms:
/// [`PROBE_WAIT_MS`], or the time `L` takes to open
/// [`PROBE_EVERY_OPENINGS`] connections when longer; divided by
/// [`QUICK_PROBE`] after a search (`again`).
const fn probe_wait_ms(limit: u64, again: bool) -> u64 {
    let spaced = PROBE_EVERY_OPENINGS * WINDOW_MS / if limit > 0 { limit } else { 1 };
    let wait = if spaced > PROBE_WAIT_MS {
        spaced
    } else {
        PROBE_WAIT_MS
    };
    if again {
        wait / QUICK_PROBE
    } else {
        wait
    }
}

/// The probe's step above `ℓ = limit` (before the `+ 2`): `⌊ℓ /
/// PROBE_STEP_DEN⌋` after a search (`again`); after a probe's throttle
/// `⌊ℓ / NARROW_STEP_DEN⌋`, but at least `min(⌊ℓ / PROBE_STEP_DEN⌋,
/// NARROW_STEP_MIN)`.
const fn probe_step(limit: u64, again: bool) -> u64 {
    let wide = limit / PROBE_STEP_DEN as u64;
    if again {
        return wide;
    }
    let narrow = limit / NARROW_STEP_DEN as u64;
    let least = if wide < NARROW_STEP_MIN {
        wide
    } else {
        NARROW_STEP_MIN
    };
    if narrow > least {
        narrow
    } else {
        least
    }
}

/// `control` with its counts moved to the minute of `at` (≥ its origin):
/// the count becomes the one before when that minute is the next one, and
/// is dropped when it is later.
const fn rolled(control: &ControlView, at: u64) -> ControlView {
    let index = at / WINDOW_MS - control.origin_ms / WINDOW_MS;
    let window = if index > COUNT_CAP as u64 {
        COUNT_CAP
    } else {
        index as u16
    };
    if window <= control.window {
        return *control;
    }
    ControlView {
        window,
        opened: 0,
        opened_before: if window == control.window + 1 {
            control.opened
        } else {
            0
        },
        ..*control
    }
}

/// The openings in the 60 s before `at` as counts rolled to `at` estimate
/// them: this minute's, plus the one before's times the share of it still
/// inside the last 60 s.
const fn recent(counted: &ControlView, at: u64) -> u32 {
    let left = WINDOW_MS - at % WINDOW_MS;
    counted.opened as u32 + (counted.opened_before as u64 * left / WINDOW_MS) as u32
}

/// What got through, as counts rolled to now show it: the larger of this
/// minute's count and the last minute's. Neither exceeds what an upstream
/// that allows that many in any 60 s lets through.
const fn through(counted: &ControlView) -> u32 {
    if counted.opened > counted.opened_before {
        counted.opened as u32
    } else {
        counted.opened_before as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_have_their_text_names() {
        assert_eq!(Outcome::Opened.name(), "opened");
        assert_eq!(Outcome::Throttled.name(), "throttled");
        assert_eq!((Outcome::Opened as u32, Outcome::Throttled as u32), (1, 2));
    }

    /// Floor 1, ceiling 600, lowest 3 (the default budget's).
    const WIDE: Range = Range {
        floor: 1,
        ceiling: 600,
        lowest: 3,
    };

    fn probing(limit: u16, origin_ms: u64, again: bool) -> ControlView {
        ControlView {
            probing: true,
            again,
            ..Range::initial(limit as u32, origin_ms)
        }
    }

    #[test]
    fn the_search_doubles_then_reaches_the_ceiling() {
        let c = Range::initial(60, 0);
        // 60·2ⁿ·(5000 + r)/5000.
        let rates = [0, 2500, 5000, 7500, 49_999, 50_000].map(|t| WIDE.rate_at(&c, t));
        // At 49999: n = 9, 60·512·9999/5000 = 61434 → the ceiling.
        assert_eq!(rates, [60, 90, 120, 180, 600, 600]);
        // Again: every 20 s, 60·2·(20000 + 10000)/20000 = 180 at 30 s.
        let again = ControlView { again: true, ..c };
        assert_eq!(WIDE.rate_at(&again, 30_000), 180);
        // ℓ = min(L, ceiling): L 700 reads 600 from the origin.
        let narrow = Range {
            ceiling: 100,
            ..WIDE
        };
        assert_eq!(narrow.rate_at(&Range::initial(700, 0), 0), 100);
        // A reading before the origin reads the origin.
        assert_eq!(WIDE.rate_at(&Range::initial(60, 9000), 0), 60);
    }

    #[test]
    fn the_probe_waits_then_jumps() {
        // L = 20: the wait is max(240 s, 80 openings at 20/min = 240 s);
        // at L until 60 s + 240 s, then 20 + 10 + 2 = 32.
        let c = probing(20, 0, false);
        let at = |t: u64| WIDE.rate_at(&c, t);
        assert_eq!(
            (at(0), at(HOLD_MS), at(299_999), at(300_000)),
            (20, 20, 20, 32)
        );
        assert_eq!(at(u64::MAX), 32, "and stays there until a throttle");
        // L = 200: 80 openings take 24 s, so the wait is 240 s. After a
        // probe's throttle the step is narrow: max(200/4, min(200/2, 80))
        // = 80, so 200 + 80 + 2 = 282 from 300 s; after a search it is
        // 200/2: 302 from 60 s + 20 s.
        let c = probing(200, 1000, false);
        let at = |t: u64| WIDE.rate_at(&c, 1000 + t);
        assert_eq!((at(299_999), at(300_000)), (200, 282));
        let c = probing(200, 1000, true);
        let at = |t: u64| WIDE.rate_at(&c, 1000 + t);
        assert_eq!((at(79_999), at(80_000)), (200, 302));
        // The narrow step at other limits: L = 100, max(25, min(50, 80))
        // = 50 (as wide); L = 160, max(40, 80) = 80 (as wide); L = 400,
        // max(100, 80) = 100, so 502 (wide: 400 + 200 + 2, at the ceiling).
        let stepped = |limit: u16, again: bool| WIDE.rate_at(&probing(limit, 0, again), u64::MAX);
        assert_eq!(
            [
                stepped(100, false),
                stepped(160, false),
                stepped(400, false)
            ],
            [152, 242, 502]
        );
        assert_eq!(
            [stepped(100, true), stepped(160, true), stepped(400, true)],
            [152, 242, 600]
        );
        // The first limit where they differ: at 161 both steps are 80
        // (243); at 162 the narrow one is 80 (244), the wide one 81 (245).
        assert_eq!([stepped(161, false), stepped(161, true)], [243, 243]);
        assert_eq!([stepped(162, false), stepped(162, true)], [244, 245]);
        // L = 5: 80 openings take 16 min (960,000 ms): 5 + 2 + 2 = 9 from
        // 1,020,000.
        let c = probing(5, 0, false);
        assert_eq!(
            (WIDE.rate_at(&c, 1_019_999), WIDE.rate_at(&c, 1_020_000)),
            (5, 9)
        );
        // After a search (again) the wait is a twelfth: 240 s / 12 = 20 s
        // at L = 20, so 32 from 80 s; at L = 5, 960 s / 12 = 80 s, so 9
        // from 140 s.
        let c = probing(20, 0, true);
        assert_eq!(
            (WIDE.rate_at(&c, 79_999), WIDE.rate_at(&c, 80_000)),
            (20, 32)
        );
        let c = probing(5, 0, true);
        assert_eq!(
            (WIDE.rate_at(&c, 139_999), WIDE.rate_at(&c, 140_000)),
            (5, 9)
        );
        // Before the origin while probing (the pause after a first
        // search's throttle): the lowest rate.
        let c = probing(20, 60_000, true);
        assert_eq!(
            (WIDE.rate_at(&c, 59_999), WIDE.rate_at(&c, 60_000)),
            (3, 20)
        );
        // A search reads the origin before it.
        assert_eq!(WIDE.rate_at(&Range::initial(20, 60_000), 0), 20);
    }

    #[test]
    fn the_rate_is_clamped_to_lowest_and_ceiling() {
        // L = 2 probing reads 2, raised to the lowest, 3.
        assert_eq!(WIDE.rate_at(&probing(2, 0, false), 0), 3);
        // L = 16383 (the largest): ℓ = 600 through the hold, and the probe
        // 600 + 300 + 2 is clamped to the ceiling; searching, the ceiling.
        assert_eq!(WIDE.rate_at(&probing(LIMIT_MASK, 0, false), 0), 600);
        assert_eq!(WIDE.rate_at(&probing(LIMIT_MASK, 0, false), u64::MAX), 600);
        assert_eq!(WIDE.rate_at(&Range::initial(16_383, 0), 1), 600);
    }

    #[test]
    fn lowest_is_the_floor_raised_to_the_lowest_refusing_rate() {
        // 5 retries at bound 4833 (hint cap 4 s): a 20 s schedule, 3/min.
        assert_eq!(lowest_rate(1, 600, 5, 4833), 3);
        assert_eq!(lowest_rate(10, 600, 5, 4833), 10);
        // 1 retry at bound 1000 (cap 1 s): 60/min, capped at the ceiling.
        assert_eq!(lowest_rate(1, 600, 1, 1000), 60);
        assert_eq!(lowest_rate(1, 40, 1, 1000), 40);
        // No retries: the floor; adaptation off: 0.
        assert_eq!(lowest_rate(1, 600, 0, 4833), 1);
        assert_eq!(lowest_rate(0, 600, 5, 4833), 0);
    }

    /// Applies `outcome` at `now`: the word after and the rate answered.
    fn step(c: &mut ControlView, outcome: Outcome, now: u64) -> u32 {
        let (next, rate) = WIDE.observe(c, outcome, now);
        *c = next.unwrap_or(*c);
        rate
    }

    #[test]
    fn openings_are_counted_per_clock_minute() {
        let mut c = Range::initial(60, 30_000);
        step(&mut c, Outcome::Opened, 59_999);
        step(&mut c, Outcome::Opened, 59_999);
        assert_eq!((c.window, c.opened, c.opened_before), (0, 2, 0));
        // 60000 is minute 1: the 2 become the minute before.
        step(&mut c, Outcome::Opened, 60_000);
        assert_eq!((c.window, c.opened, c.opened_before), (1, 1, 2));
        // Minute 3: both dropped.
        step(&mut c, Outcome::Opened, 180_000);
        assert_eq!((c.window, c.opened, c.opened_before), (3, 1, 0));
        // A regressed clock counts in the latest minute.
        step(&mut c, Outcome::Opened, 61_000);
        assert_eq!((c.window, c.opened, c.opened_before), (3, 2, 0));
        // The minute saturates at 65535 and the count at 65535.
        let far = 30_000 + 70_000 * WINDOW_MS;
        step(&mut c, Outcome::Opened, far);
        assert_eq!((c.window, c.opened), (COUNT_CAP, 1));
        c.opened = COUNT_CAP;
        step(&mut c, Outcome::Opened, far + WINDOW_MS);
        assert_eq!(
            (c.window, c.opened, c.opened_before),
            (COUNT_CAP, COUNT_CAP, 0)
        );
        assert!(!c.probing, "openings do not end a search");
    }

    #[test]
    fn a_throttle_at_the_probe_step_keeps_the_limit() {
        // Probing at L = 40 from 0, not after a search: the wait is
        // max(240 s, 80 · 60 s / 40 = 120 s) = 240 s, so the step, 40 +
        // 20 + 2 = 62, runs from 300 s. 30 opened in minute 4 (a load
        // below L), 5 in minute 5.
        let counted = || {
            let mut c = probing(40, 0, false);
            for _ in 0..30 {
                step(&mut c, Outcome::Opened, 250_000);
            }
            c
        };
        // A throttle 1 ms before the step: E = through = 30 < 40: L = 30.
        let mut c = counted();
        assert_eq!(WIDE.rate_at(&c, 299_999), 40);
        assert_eq!(step(&mut c, Outcome::Throttled, 299_999), 30);
        assert_eq!(c.limit_per_min, 30);
        // At the step: E = max(5, 30) = 30 < 62, but L held through the
        // hold and the wait: L stays 40, and the rate is 40 again.
        let mut c = counted();
        for _ in 0..5 {
            step(&mut c, Outcome::Opened, 300_500);
        }
        assert_eq!(WIDE.rate_at(&c, 302_000), 62);
        assert_eq!(step(&mut c, Outcome::Throttled, 302_000), 40);
        assert_eq!(
            (c.limit_per_min, c.probing, c.again, c.origin_ms),
            (40, true, false, 302_000)
        );
        // A count above L at the step still sets it: 45 in minute 4 (no
        // rise, 45 ≤ 40 + 5 + 1 = 46), E = 45 < 62: L = 45.
        let mut c = probing(40, 0, false);
        for _ in 0..45 {
            step(&mut c, Outcome::Opened, 250_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 301_000), 45);
    }

    #[test]
    fn a_throttle_sets_the_limit_from_the_counts() {
        // Ending the first search at 1000: E = max(through 70, recent 70)
        // = 70, above the rate 60 but a search's burst rule keeps it,
        // min(70, ceiling 60) = 60. The search began at 0, so its openings
        // fill the window until 60000: the origin moves there and the
        // rate is the lowest until then; the 70 counted in minute 0 are
        // the minute before the origin's.
        let mut c = Range::initial(60, 0);
        let narrow = Range {
            ceiling: 60,
            ..WIDE
        };
        for _ in 0..70 {
            c = narrow.observe(&c, Outcome::Opened, 1000).0.unwrap();
        }
        let (next, rate) = narrow.observe(&c, Outcome::Throttled, 1000);
        let next = next.unwrap();
        assert_eq!(
            (next.limit_per_min, next.probing, next.again, next.origin_ms),
            (60, true, true, 60_000)
        );
        assert_eq!((next.window, next.opened, next.opened_before), (0, 0, 70));
        assert_eq!(rate, 3);
        assert_eq!(narrow.rate_at(&next, 60_000), 60);
        // Probing at L = 40 from 0 (after a search: the wait is max(240 s,
        // 120 s)/12 = 20 s, the step from 80 s): at 70 s (minute 1; 20
        // opened in minute 0, 12 in minute 1), neither held nor at the
        // step, the rate 40; E = through = max(12, 20) = 20 < 40: L = 20,
        // no longer `again`, origin 70 s.
        let mut c = probing(40, 0, true);
        c.opened = 20;
        for _ in 0..12 {
            step(&mut c, Outcome::Opened, 61_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 70_000), 20);
        assert_eq!((c.limit_per_min, c.again, c.origin_ms), (20, false, 70_000));
        assert_eq!((c.window, c.opened, c.opened_before), (0, 12, 20));
        // Held until 129999; at 130000 (minute 2) minute 1's 12 are the
        // minute before: E = through = 12 < the rate 20: L = 12.
        assert_eq!(step(&mut c, Outcome::Throttled, 129_999), 20);
        assert_eq!(c.origin_ms, 70_000, "held");
        assert_eq!(step(&mut c, Outcome::Throttled, 130_000), 12);
        // 13 openings in minute 2 within the hold (no rise), then at 210 s
        // (minute 3): through 13 ≥ the rate 12: L = 12 − max(1, 0) = 11.
        for _ in 0..13 {
            step(&mut c, Outcome::Opened, 151_000);
        }
        assert!(c.probing);
        assert_eq!(step(&mut c, Outcome::Throttled, 210_000), 11);
        // Below 32/min the cut is 1: L = 5, 6 openings within the
        // hold, at 60000 (minute 1) E = through 6 ≥ 5: L = 5 − max(1, 0)
        // = 4.
        let mut small = probing(5, 0, false);
        for _ in 0..6 {
            step(&mut small, Outcome::Opened, 1000);
        }
        assert_eq!(step(&mut small, Outcome::Throttled, 60_000), 4);
        // Nothing counted at 400 s (minute 6): a step down from min(R, L)
        // = 11 (the rate is still L: the wait at 11/min is 80 openings'
        // 436 s), L = 11 − max(1, ⌊11/16⌋) = 10.
        assert_eq!(step(&mut c, Outcome::Throttled, 400_000), 10);
        assert_eq!(c.limit_per_min, 10);
        // At 160/min the cut is ⌊160/16⌋ = 10: probing at L = 160 from 0,
        // 170 opened in minute 1, a throttle at 100 s (past the hold,
        // before the step at 300 s): E = through 170 ≥ the rate 160: L =
        // 150, origin 100 s. Nothing counted at 400 s (minute 6; the wait
        // at 150/min is 240 s, so the step, 150 + 75 + 2 = 227, is in force
        // from 400 s): from min(227, 150), 150 − ⌊150/16⌋ = 141.
        let mut c = probing(160, 0, false);
        for _ in 0..170 {
            step(&mut c, Outcome::Opened, 61_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 100_000), 150);
        assert_eq!(step(&mut c, Outcome::Throttled, 400_000), 141);
        // While probing, the count of the last 60 s is not used: at 45 s
        // into minute 1 with 20 in minute 0 and 10 in minute 1, recent
        // would be 10 + 5 = 15, through is 20: at L = 30 (rate 30), L =
        // 20.
        let mut c = probing(30, 0, false);
        c.opened = 20;
        for _ in 0..10 {
            step(&mut c, Outcome::Opened, 100_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 105_000), 20);
    }

    #[test]
    fn only_a_first_search_pauses() {
        // A search again (after a rise) that ends 10 s after it began:
        // no pause, the origin is the throttle.
        let mut c = ControlView {
            again: true,
            ..Range::initial(40, 0)
        };
        for _ in 0..30 {
            step(&mut c, Outcome::Opened, 5000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 10_000), 30);
        assert_eq!((c.origin_ms, c.probing, c.again), (10_000, true, true));
        // A first search that ran longer than a minute: its first openings
        // have left the window, no pause.
        let mut c = Range::initial(40, 0);
        for _ in 0..30 {
            step(&mut c, Outcome::Opened, 70_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 70_000), 30);
        assert_eq!(c.origin_ms, 70_000);
        // A pause from a clock near its end saturates.
        let mut c = Range::initial(40, u64::MAX - 10);
        step(&mut c, Outcome::Opened, u64::MAX - 5);
        assert_eq!(step(&mut c, Outcome::Throttled, u64::MAX - 5), 3);
        assert_eq!(c.origin_ms, u64::MAX);
    }

    #[test]
    fn a_pause_moves_the_counts_from_the_throttles_minute() {
        // An opening read at 500 s (minute 8) while searching, then a
        // throttle from a clock behind it, at 10 s: the counts stay in
        // minute 8 (they never move back), E = 1, L = 1; the pause moves
        // the origin to 60 s, one minute after the throttle's own minute 0,
        // so the opening is the minute before the origin's.
        let mut c = Range::initial(60, 0);
        step(&mut c, Outcome::Opened, 500_000);
        assert_eq!((c.window, c.opened), (8, 1));
        assert_eq!(step(&mut c, Outcome::Throttled, 10_000), 3);
        assert_eq!((c.origin_ms, c.limit_per_min), (60_000, 1));
        assert_eq!((c.window, c.opened, c.opened_before), (0, 0, 1));
    }

    #[test]
    fn a_count_past_the_margin_searches_again() {
        // L = 16: margin 16 + 2 + 1 = 19. Past the hold, the 19th opening in
        // a minute keeps probing, the 20th searches again from the rate in
        // force (16, before the probe), doubling every 20 s.
        let mut c = probing(16, 0, false);
        for _ in 0..19 {
            assert_eq!(step(&mut c, Outcome::Opened, 60_000), 16);
        }
        assert!(c.probing);
        assert_eq!(step(&mut c, Outcome::Opened, 60_000), 16);
        assert_eq!((c.probing, c.again, c.limit_per_min), (false, true, 16));
        assert_eq!((c.origin_ms, c.window, c.opened), (60_000, 0, 20));
        assert_eq!(WIDE.rate_at(&c, 80_000), 32);
        // A cut leaves the count that did not explain it within the
        // margin: at L = 600, 600 opened in minute 1 (600 ≤ 600 + 75 + 1)
        // and a throttle at 100 s: L = 600 − ⌊600/16⌋ = 563, margin 563 +
        // 70 + 1 = 634. Past the hold, 600 more in minute 3 do not search
        // again.
        let mut c = probing(600, 0, false);
        for _ in 0..600 {
            step(&mut c, Outcome::Opened, 61_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 100_000), 563);
        for _ in 0..600 {
            step(&mut c, Outcome::Opened, 180_000);
        }
        assert_eq!((c.probing, c.limit_per_min, c.opened), (true, 563, 600));
        // Within the hold the count rises without a search.
        let mut c = probing(16, 0, false);
        for _ in 0..40 {
            step(&mut c, Outcome::Opened, 59_999);
        }
        assert!(c.probing && c.opened == 40);
    }

    #[test]
    fn the_control_word_round_trips() {
        let view = ControlView {
            origin_ms: u64::MAX - 5,
            window: 0xfffe,
            opened: 0xbeef,
            opened_before: 0x1234,
            limit_per_min: 600,
            probing: true,
            again: false,
        };
        assert_eq!(ControlView::unpack(view.pack()), view);
        assert_eq!(
            view.pack(),
            ((u64::MAX as u128 - 5) << 64)
                | (0xfffe << 48)
                | (0xbeef << 32)
                | (0x1234 << 16)
                | 0x8000
                | 600
        );
    }
}
