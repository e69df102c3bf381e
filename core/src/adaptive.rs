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
//! - **Probing** (after a throttle): `curve = min(⌈ℓ · KEEP_NUM /
//!   KEEP_DEN⌉ + ⌊⌊ℓ · d³ / PROBE_SPLIT⌋ · ℓ / S⌋, ℓ + ⌊ℓ / RISE_MARGIN⌋ +
//!   2)` with `d = min(⌊(Δ − HOLD_MS)⁺ / 100⌋, CUBE_CAP_DS)` and `S` =
//!   [`PROBE_SCALE`] (divided by [`QUICK_PROBE`] with `again`): at `L` (up
//!   to `L = 32`) or just under it through the hold and after it, then
//!   slowly above it (one step past `L` about 4 min after the hold at
//!   `L = 20`, 70 s at `L = 500`), never more than one step past the rise
//!   margin below: a limit that rose shows in the count, one that did not
//!   costs a throttle.
//!
//! What `observe` does at `at = max(now, t₀)`, with the counts first moved
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
//!   `E = max(through, recent)` and `R` the rate in force: `L = R` when
//!   nothing was counted; `min(E, ceiling)` when this ends a search (a
//!   burst can open more than the rate); `E` when `E < R`; else `R −
//!   max(1, ⌊R / CUT_DEN⌋)` (the count does not explain the throttle: an
//!   upstream that let a burst through).
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
//! Lua's doubles (the Redis script): `ℓ ≤ 600`, `d ≤ 20,000`, so `ℓ · d³ ≤
//! 4.8·10^15`, and `⌊ℓ·d³/10^6⌋ · ℓ ≤ 2.9·10^12`; the search term is below
//! `600 · 2^9 · 20000`.

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

/// After a decrease the rate starts at `⌈L · KEEP_NUM / KEEP_DEN⌉`.
pub const KEEP_NUM: u32 = 31;
/// See [`KEEP_NUM`].
pub const KEEP_DEN: u32 = 32;

/// The probe's scale: it adds `⌊⌊ℓ·d³/PROBE_SPLIT⌋·ℓ/PROBE_SCALE⌋` per
/// minute, `d` in deciseconds since the hold ended.
pub const PROBE_SCALE: i64 = 5_400_000;

/// The first probe after a search (whose count may have covered less than
/// a minute) divides [`PROBE_SCALE`] by this.
pub const QUICK_PROBE: i64 = 16;

/// A minute's count above `L + L / RISE_MARGIN + 1` shows the limit rose.
pub const RISE_MARGIN: u32 = 8;

/// When the count does not explain a throttle the rate drops by
/// `1/CUT_DEN` of itself (at least 1).
pub const CUT_DEN: u32 = 8;
/// See [`PROBE_SCALE`]: `L · d³` is divided by this first, so every
/// product stays below 2^53.
pub const PROBE_SPLIT: i64 = 1_000_000;

/// The largest `d` the cube is taken of, deciseconds (33 min 20 s).
pub const CUBE_CAP_DS: i64 = 20_000;

/// The largest count a window keeps.
pub const COUNT_CAP: u16 = u16::MAX;

const PROBING_BIT: u16 = 1 << 15;
const AGAIN_BIT: u16 = 1 << 14;
const LIMIT_MASK: u16 = (1 << 14) - 1;

// ℓ · d³ is exact in a double.
const _: () = assert!(600 * CUBE_CAP_DS * CUBE_CAP_DS * CUBE_CAP_DS < 1 << 53);
const _: () = assert!(1 << SEARCH_DOUBLINGS_CAP > 600);

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

    /// The rate in force at `now_ms` (a reading before the origin reads
    /// the origin).
    pub(crate) fn rate_at(&self, control: &ControlView, now_ms: u64) -> u32 {
        let elapsed = now_ms.saturating_sub(control.origin_ms);
        let ceiling = self.ceiling as i64;
        let limit = (control.limit_per_min as i64).min(ceiling);
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
                let within = (elapsed % period) as i64;
                let d = period as i64;
                (limit << doublings) * (d + within) / d
            }
        } else {
            let keep = (limit * KEEP_NUM as i64 + KEEP_DEN as i64 - 1) / KEEP_DEN as i64;
            let d = ((elapsed.saturating_sub(HOLD_MS) / 100) as i64).min(CUBE_CAP_DS);
            let scale = if control.again {
                PROBE_SCALE / QUICK_PROBE
            } else {
                PROBE_SCALE
            };
            let cap = limit + limit / RISE_MARGIN as i64 + 2;
            (keep + limit * (d * d * d) / PROBE_SPLIT * limit / scale).min(cap)
        };
        curve.clamp(self.lowest as i64, ceiling) as u32
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
        let rate = self.rate_at(control, at);
        let held = control.probing && at - control.origin_ms < HOLD_MS;
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
            Outcome::Throttled => ControlView {
                probing: true,
                again: !control.probing,
                limit_per_min: match through(&counted).max(recent(&counted, at)) {
                    0 => rate,
                    // A search's burst can open more than its rate.
                    seen if !control.probing => seen.min(self.ceiling as u32),
                    seen if seen < rate => seen,
                    // The count does not explain the throttle (an upstream
                    // that let a burst through): a multiplicative step.
                    _ => rate - (rate / CUT_DEN).max(1),
                } as u16,
                ..counted
            },
        };
        let next = ControlView {
            origin_ms: at,
            window: 0,
            ..next
        };
        (Some(next), self.rate_at(&next, at))
    }
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
    fn the_probe_is_flat_through_the_hold_then_rises() {
        // L = 20: ⌈620/32⌉ = 20 until d = 2382 ds after the hold:
        // ⌊20·2381³/10⁶⌋ = 269_961, ·20/5.4·10⁶ < 1; ⌊20·2382³/10⁶⌋ =
        // 270_301, ·20/5.4·10⁶ = 1.001 → 21.
        let c = probing(20, 0, false);
        let at = |d: u64| WIDE.rate_at(&c, HOLD_MS + d * 100);
        assert_eq!((WIDE.rate_at(&c, HOLD_MS - 1), at(0)), (20, 20));
        assert_eq!((at(2381), at(2382)), (20, 21));
        // L = 500: ⌈15500/32⌉ = 485; past L (501) at d = 702: ⌊500·702³/
        // 10⁶⌋ = 172_986, ·500/5.4·10⁶ = 16.0 → 485 + 16.
        let c = probing(500, 0, false);
        let at = |d: u64| WIDE.rate_at(&c, HOLD_MS + d * 100);
        assert_eq!((at(0), at(701), at(702)), (485, 500, 501));
        // Capped at L + ⌊L/8⌋ + 2 = 564, and the cube at d = 20000.
        assert_eq!((at(1500), at(20_000), at(1 << 40)), (564, 564, 564));
        // A quick probe (again): S/16, at L = 20 one step past at d = 945
        // (⌊20·945³/10⁶⌋ = 16_878, ·20/337500 = 1.0002).
        let c = probing(20, 0, true);
        let at = |d: u64| WIDE.rate_at(&c, HOLD_MS + d * 100);
        assert_eq!((at(944), at(945)), (20, 21));
    }

    #[test]
    fn the_rate_is_clamped_to_lowest_and_ceiling() {
        // L = 2: ⌈62/32⌉ = 2, raised to the lowest, 3.
        assert_eq!(WIDE.rate_at(&probing(2, 0, false), 0), 3);
        // L = 16383 (the largest): ℓ = 600, ⌈600·31/32⌉ = ⌈581.25⌉ = 582;
        // searching, the ceiling.
        assert_eq!(WIDE.rate_at(&probing(LIMIT_MASK, 0, false), 0), 582);
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
    fn a_throttle_sets_the_limit_from_the_counts() {
        // Ending a search: E = max(through 70, recent 70) = 70 is above the
        // rate 60 at 1000 but a search's burst rule keeps it; quick probe.
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
            (next.limit_per_min, next.probing, next.again),
            (60, true, true)
        );
        // min(70, ceiling 60) = 60: ⌈60·31/32⌉ = 59.
        assert_eq!(rate, 59);
        // Probing at L = 40 from 0: at 90 s (minute 1; 20 opened in minute
        // 0, 12 in minute 1): through 20, recent 12 + ⌊20·30000/60000⌋ =
        // 22; E = 22 < the rate 39: L = 22, ⌈682/32⌉ = 22, slow probe.
        let mut c = probing(40, 0, true);
        c.opened = 20;
        for _ in 0..12 {
            step(&mut c, Outcome::Opened, 61_000);
        }
        assert_eq!(step(&mut c, Outcome::Throttled, 90_000), 22);
        assert_eq!((c.limit_per_min, c.again, c.origin_ms), (22, false, 90_000));
        assert_eq!((c.window, c.opened, c.opened_before), (0, 12, 20));
        // Held until 149999; at 150000 (minute 2) minute 1's 12 are the
        // minute before: through 12, recent ⌊12·30000/60000⌋ = 6; E = 12
        // < the rate 22: L = 12, ⌈372/32⌉ = 12.
        assert_eq!(step(&mut c, Outcome::Throttled, 149_999), 22);
        assert_eq!(c.origin_ms, 90_000, "held");
        assert_eq!(step(&mut c, Outcome::Throttled, 150_000), 12);
        // 13 openings in minute 2 within the hold (no rise), then at 210 s
        // (minute 3): through 13 ≥ the rate 12: L = 12 − max(1, 1) = 11,
        // ⌈341/32⌉ = 11.
        for _ in 0..13 {
            step(&mut c, Outcome::Opened, 151_000);
        }
        assert!(c.probing);
        assert_eq!(step(&mut c, Outcome::Throttled, 210_000), 11);
        // Below 8/min the cut is still 1: L = 5 (⌈155/32⌉ = 5), 6 openings
        // within the hold, at 60000 (minute 1) E = max(6, 6) ≥ 5: L = 5 −
        // max(1, 0) = 4, ⌈124/32⌉ = 4.
        let mut small = probing(5, 0, false);
        for _ in 0..6 {
            step(&mut small, Outcome::Opened, 1000);
        }
        assert_eq!(step(&mut small, Outcome::Throttled, 60_000), 4);
        // Nothing counted at 400 s (minute 6): L = the rate in force, 11 +
        // ⌊⌊11·1300³/10⁶⌋·11/5.4·10⁶⌋ = 11 + ⌊24167·11/5.4·10⁶⌋ = 11.
        assert_eq!(step(&mut c, Outcome::Throttled, 400_000), 11);
        assert_eq!(c.limit_per_min, 11);
    }

    #[test]
    fn a_count_past_the_margin_searches_again() {
        // L = 16: margin 16 + 2 + 1 = 19. Past the hold, the 19th opening in
        // a minute keeps probing, the 20th searches again from the rate in
        // force (⌈496/32⌉ = 16 at d = 0), doubling every 20 s.
        let mut c = probing(16, 0, false);
        for _ in 0..19 {
            assert_eq!(step(&mut c, Outcome::Opened, 60_000), 16);
        }
        assert!(c.probing);
        assert_eq!(step(&mut c, Outcome::Opened, 60_000), 16);
        assert_eq!((c.probing, c.again, c.limit_per_min), (false, true, 16));
        assert_eq!((c.origin_ms, c.window, c.opened), (60_000, 0, 20));
        assert_eq!(WIDE.rate_at(&c, 80_000), 32);
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
