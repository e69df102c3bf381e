//! Adaptive pacing (SPEC §14): the rate in force follows the upstream's own
//! throttle answers, within `[floor, ceiling]`.
//!
//! # The law
//! A cubic curve after each decrease, as TCP CUBIC and the AWS SDKs'
//! adaptive retry mode use, in exact integers. Writing `W` for the *peak*
//! (the rate in force when the upstream last made the rate go down; at
//! creation, the configured rate), `t₀` for the curve's *origin* and `d` for
//! the whole deciseconds since `t₀`, less `K`:
//!
//! ```text
//!     rate(t) = clamp(W + ⌊d³ / S⌋, floor, ceiling)
//!     K       = ⌊∛((W − target) · SCALE)⌋ ds,   target = max(floor, ⌊W · 8/10⌋)
//! ```
//!
//! A decrease drops the rate at once to `target` (exactly: `K³ ≤ (W −
//! target)·SCALE` and the floor of the quotient gives back `target`); the
//! curve climbs back concavely, flattens at `W` after `K`, then probes above
//! it, convexly, until the upstream throttles again. `S` is [`SCALE`] after
//! the first decrease and [`SEARCH_SCALE`] before it: a new pacer starts at
//! its configured rate with `K = 0` and climbs faster while the limit is
//! still unknown. With the default ceiling (the configured rate) the rate
//! never rises above where it started.
//!
//! - **A throttle at least [`DECREASE_SPACING_MS`] after the last decrease**
//!   (or the first throttle ever) is a decrease: `W` becomes the rate in
//!   force, `t₀` now.
//! - **A throttle sooner than that holds the rate:** `t₀` moves to now, `W`
//!   and `K` stay, so the rate reads `target` again and does not climb while
//!   the upstream still throttles. A limit counted per minute reflects a
//!   decrease only after up to a minute; decreasing on the throttles of that
//!   minute drives the rate to the floor (measured: allowing a decrease after
//!   every opened connection, the simulator's interleaved throttles and
//!   openings at a 60/min limit took it from 60 to 6).
//! - **An opened connection changes nothing:** the law learns only from
//!   throttles, and grows with time, not with traffic (the AWS SDKs' success
//!   path likewise only reads the curve). `observe(opened)` returns the rate
//!   in force.
//!
//! # State
//! One 128-bit control word beside the pacer's state word: the origin `t₀`
//! (ms) in the high 64 bits; below it the time from the last decrease to
//! the origin (ms, 32 bits; `u32::MAX` before the first decrease), `K`
//! (deciseconds, 16 bits) and `W` (per minute, 16 bits). A decision reads it
//! once; `observe` stores it by compare-and-swap. The rate in force is a
//! pure function of the word and the clock, so it needs no write as it
//! grows.
//!
//! # Exactness
//! `d` is capped at [`CUBE_CAP_DS`] (5.5 hours), so `|d³| < 2^53`: the same
//! arithmetic is exact in Lua's doubles (the Redis script). At the cap the
//! curve is far outside `[0, 600]` for either scale, so the cap never
//! changes a rate.

/// The curve's scale after a decrease: the rate moves by `d³ / SCALE` per
/// minute `d` deciseconds from the plateau (see the module doc). This and
/// the other constants were chosen on the simulator's evidence
/// (docs/figures.md "Adaptive pacing").
pub const SCALE: i64 = 400_000_000;

/// The curve's scale before the upstream first throttles: the limit is
/// unknown then, so the rate climbs from the configured rate faster than it
/// probes past a known peak.
pub const SEARCH_SCALE: i64 = 50_000_000;

/// The decrease: a throttle sets the rate to `⌊W · BETA_NUM / BETA_DEN⌋`.
pub const BETA_NUM: u32 = 8;
/// See [`BETA_NUM`].
pub const BETA_DEN: u32 = 10;

/// The largest `|d|` the cube is taken of, deciseconds.
pub const CUBE_CAP_DS: i64 = 200_000;

// d³ is exact in a double, and at the cap the curve leaves [0, 1200].
const _: () = assert!(CUBE_CAP_DS * CUBE_CAP_DS * CUBE_CAP_DS < 1 << 53);
const _: () = assert!(CUBE_CAP_DS * CUBE_CAP_DS * CUBE_CAP_DS / SCALE > 1200);
const _: () = assert!(CUBE_CAP_DS * CUBE_CAP_DS * CUBE_CAP_DS / SEARCH_SCALE > 1200);
// K = ∛((W − target)·SCALE) < ∛(600·SCALE) fits its 16 bits.
const _: () = assert!(65_535 * 65_535 * 65_535 > 600 * SCALE);

/// A throttle lowers the rate only when the last decrease is at least this
/// long ago, ms: a limit counted per minute shows the effect of a decrease
/// only after up to a minute, and the throttles until then are the same
/// episode's.
pub const DECREASE_SPACING_MS: u64 = 60_000;

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
        match self {
            Outcome::Opened => "opened",
            Outcome::Throttled => "throttled",
        }
    }
}

/// The adaptive controller's state: the control word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControlView {
    /// The curve's origin `t₀`, ms: the last decrease, or the last throttle
    /// that held the rate there (or the pacer's creation).
    pub origin_ms: u64,
    /// How long before the origin the last decrease was, ms (saturating;
    /// `u32::MAX` before the first decrease).
    pub since_decrease_ms: u32,
    /// `K`: deciseconds from the origin until the curve is back at the
    /// peak.
    pub recover_ds: u16,
    /// `W`: the rate in force when the upstream last lowered it (at
    /// creation, the configured rate), per minute.
    pub peak_per_min: u16,
}

impl ControlView {
    /// The control word: `origin_ms` in the high 64 bits, then
    /// `since_decrease_ms` (32 bits), `recover_ds` (16 bits) and
    /// `peak_per_min` (16 bits).
    pub const fn pack(self) -> u128 {
        ((self.origin_ms as u128) << 64)
            | ((self.since_decrease_ms as u128) << 32)
            | ((self.recover_ds as u128) << 16)
            | self.peak_per_min as u128
    }

    /// The view a word holds ([`ControlView::pack`]'s inverse).
    pub const fn unpack(word: u128) -> ControlView {
        ControlView {
            origin_ms: (word >> 64) as u64,
            since_decrease_ms: (word >> 32) as u32,
            recover_ds: (word >> 16) as u16,
            peak_per_min: word as u16,
        }
    }
}

/// The bounds the law moves within; `floor == 0` means adaptation is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Range {
    pub(crate) floor: u16,
    pub(crate) ceiling: u16,
}

impl Range {
    /// The control word of a pacer created at `now_ms` with configured rate
    /// `rate`: on the curve at its peak, never decreased.
    pub(crate) const fn initial(rate: u32, now_ms: u64) -> ControlView {
        ControlView {
            origin_ms: now_ms,
            since_decrease_ms: u32::MAX,
            recover_ds: 0,
            peak_per_min: rate as u16,
        }
    }

    /// The rate in force at `now_ms` (a reading before the origin reads
    /// the origin).
    pub(crate) fn rate_at(&self, control: &ControlView, now_ms: u64) -> u32 {
        let elapsed_ds = (now_ms.saturating_sub(control.origin_ms) / 100) as i64;
        let d = elapsed_ds.min(CUBE_CAP_DS) - control.recover_ds as i64;
        let scale = if control.since_decrease_ms == u32::MAX {
            SEARCH_SCALE
        } else {
            SCALE
        };
        let curve = control.peak_per_min as i64 + (d * d * d).div_euclid(scale);
        curve.clamp(self.floor as i64, self.ceiling as i64) as u32
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
        if let Outcome::Opened = outcome {
            return (None, rate);
        }
        let since = (at - control.origin_ms).saturating_add(control.since_decrease_ms as u64);
        let next = if since >= DECREASE_SPACING_MS {
            let lowered = (rate as u64 * BETA_NUM as u64 / BETA_DEN as u64) as u32;
            let target = if lowered > self.floor as u32 {
                lowered
            } else {
                self.floor as u32
            };
            ControlView {
                origin_ms: at,
                since_decrease_ms: 0,
                recover_ds: cube_root((rate - target) as i64 * SCALE) as u16,
                peak_per_min: rate as u16,
            }
        } else if at == control.origin_ms {
            return (None, rate);
        } else {
            // Still throttled within the spacing: hold the rate where the
            // decrease put it (the curve restarts here), lower no further.
            ControlView {
                origin_ms: at,
                since_decrease_ms: since as u32,
                ..*control
            }
        };
        (Some(next), self.rate_at(&next, at))
    }
}

/// `⌊∛n⌋` for `0 ≤ n ≤ 600 · SCALE`, by bisection on exact cubes.
pub(crate) fn cube_root(n: i64) -> i64 {
    let (mut low, mut high) = (0i64, CUBE_CAP_DS);
    while low < high {
        let mid = (low + high + 1) / 2;
        if mid * mid * mid <= n {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
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

    #[test]
    fn the_control_word_round_trips() {
        let view = ControlView {
            origin_ms: u64::MAX - 5,
            since_decrease_ms: 0xdead_beef,
            recover_ds: 0xfffe,
            peak_per_min: 600,
        };
        assert_eq!(ControlView::unpack(view.pack()), view);
        assert_eq!(
            view.pack(),
            ((u64::MAX as u128 - 5) << 64) | (0xdead_beef << 32) | (0xfffe << 16) | 600
        );
    }

    #[test]
    fn cube_root_is_the_floor() {
        for n in [0i64, 1, 7, 8, 26, 27, 999, 1000, 1001] {
            let r = cube_root(n);
            assert!(r * r * r <= n && (r + 1) * (r + 1) * (r + 1) > n, "{n}");
        }
        // 6214³ = 239946128344 ≤ 2.4e11 < 6215³ = 240061988375.
        assert_eq!(cube_root(240_000_000_000), 6214);
        assert_eq!(cube_root(239_946_128_344), 6214);
        assert_eq!(cube_root(239_946_128_343), 6213);
    }
}
