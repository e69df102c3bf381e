//! An independent reference model of SPEC §3–§5, written from the SPEC text
//! alone. It shares no code with `pacer_core`: the derived quantities are
//! re-derived here, and the bucket keeps its tokens as exact fractions of a
//! token (no fixed-point units, no packed words, no sequence counter).

#![allow(dead_code)]

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, Div, Mul, Sub};

// ---------------------------------------------------------------------------
// Exact rationals
// ---------------------------------------------------------------------------

/// An exact rational number, always reduced, denominator positive.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Q {
    num: i128,
    den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

impl Q {
    pub fn new(num: i128, den: i128) -> Q {
        assert!(den != 0, "zero denominator");
        let sign = if den < 0 { -1 } else { 1 };
        let g = gcd(num, den).max(1);
        Q {
            num: sign * num / g,
            den: sign * den / g,
        }
    }

    pub fn int(value: i128) -> Q {
        Q { num: value, den: 1 }
    }

    pub const ZERO: Q = Q { num: 0, den: 1 };
    pub const ONE: Q = Q { num: 1, den: 1 };

    pub fn floor(self) -> i128 {
        self.num.div_euclid(self.den)
    }

    pub fn ceil(self) -> i128 {
        -((-self.num).div_euclid(self.den))
    }

    pub fn is_integer(self) -> bool {
        self.den == 1
    }

    pub fn min(self, other: Q) -> Q {
        if self <= other {
            self
        } else {
            other
        }
    }

    pub fn max(self, other: Q) -> Q {
        if self >= other {
            self
        } else {
            other
        }
    }

    /// This many tokens, in the core's units of 1/60000 token — only when
    /// the value is a whole number of units.
    pub fn units(self) -> Option<i128> {
        let scaled = self * Q::int(60_000);
        scaled.is_integer().then_some(scaled.num)
    }
}

impl fmt::Debug for Q {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

impl Add for Q {
    type Output = Q;
    fn add(self, o: Q) -> Q {
        Q::new(self.num * o.den + o.num * self.den, self.den * o.den)
    }
}

impl Sub for Q {
    type Output = Q;
    fn sub(self, o: Q) -> Q {
        Q::new(self.num * o.den - o.num * self.den, self.den * o.den)
    }
}

impl Mul for Q {
    type Output = Q;
    fn mul(self, o: Q) -> Q {
        Q::new(self.num * o.num, self.den * o.den)
    }
}

impl Div for Q {
    type Output = Q;
    fn div(self, o: Q) -> Q {
        Q::new(self.num * o.den, self.den * o.num)
    }
}

impl PartialOrd for Q {
    fn partial_cmp(&self, o: &Q) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Q {
    fn cmp(&self, o: &Q) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}

// ---------------------------------------------------------------------------
// §3 derived quantities, from the SPEC's formulas
// ---------------------------------------------------------------------------

/// `backoff(r) = 2000·(2^r − 1)` ms.
pub fn backoff(r: u32) -> i128 {
    assert!(r < 100);
    2000 * ((1i128 << r) - 1)
}

/// The largest `r` with `backoff(r) < idle`.
pub fn ladder_ceiling(idle: u64) -> u32 {
    let mut r = 0;
    while backoff(r + 1) < idle as i128 {
        r += 1;
    }
    r
}

/// `min(15000, floor(max(0, idle − backoff(r)) / (2·(r+1))))`.
pub fn bound(idle: u64, r: u32) -> i128 {
    let left = (idle as i128 - backoff(r)).max(0);
    (left / (2 * (r as i128 + 1))).min(15_000)
}

/// `max(1, floor(bound/1000))`.
pub fn cap_s(bound: i128) -> i128 {
    (bound / 1000).max(1)
}

/// `min(max(1, ceil(required/1000)), cap_s)`.
pub fn hint_s(required: i128, bound: i128) -> i128 {
    Q::new(required, 1000).ceil().max(1).min(cap_s(bound))
}

/// `r · cap_s · 1000`.
pub fn schedule_ms(r: u32, bound: i128) -> i128 {
    r as i128 * cap_s(bound) * 1000
}

/// `r > 0 && rate > 0 && schedule·rate ≥ 60000`.
pub fn can_refuse(rate: u32, r: u32, bound: i128) -> bool {
    r > 0 && rate > 0 && schedule_ms(r, bound) * rate as i128 >= 60_000
}

/// `rate > 0 && bound > 0`.
pub fn enabled(rate: u32, bound: i128) -> bool {
    rate > 0 && bound > 0
}

/// `Σ_{k<r} max(hint_cap_ms, 2000·2^k)`: what the retries of one request
/// can spend between attempts when the client substitutes capped hints.
pub fn retry_spend(r: u32, bound: i128) -> i128 {
    let hint_cap_ms = cap_s(bound) * 1000;
    (0..r).map(|k| hint_cap_ms.max(2000 * (1i128 << k))).sum()
}

// ---------------------------------------------------------------------------
// §4 / §5 bucket
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MConfig {
    pub rate: u32,
    pub burst: u32,
    pub idle: u64,
    pub retries: u32,
    pub strict: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MMode {
    Disabled,
    Refusing,
    Shaping,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MPath {
    Disabled,
    Paced,
    Shaped,
    Overflow,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MOutcome {
    Admitted {
        wait_ms: i128,
        /// The debit and the model's ticket id, when something was debited.
        debit: Option<(Q, u64)>,
        path: MPath,
        regressed: bool,
    },
    Refused {
        required_ms: i128,
        hint_s: i128,
        regressed: bool,
    },
}

#[derive(Clone, Debug)]
pub struct Model {
    pub rate: u32,
    pub capacity: Q,
    pub max_debt: Q,
    pub bound: i128,
    pub mode: MMode,
    /// Whether a refusing bucket grants waits (SPEC §14: not in a
    /// search's first minute).
    pub waits: bool,
    pub strict: bool,
    /// Tokens at `hwm` (may be negative).
    pub tokens: Q,
    /// The latest reading a state change was made at.
    pub hwm: u64,
    /// Every debit ever made, in order: (id, debit, spent).
    tickets: Vec<(u64, Q, bool)>,
    /// Strict policy: ids of debits not yet refunded, oldest first. A debit
    /// whose release was denied stays here forever, blocking what is below.
    outstanding: Vec<u64>,
    next_id: u64,
}

impl Model {
    pub fn new(cfg: &MConfig, now: u64) -> Model {
        let bound = bound(cfg.idle, cfg.retries);
        let burst = if cfg.burst == 0 { 1 } else { cfg.burst };
        let mode = if !enabled(cfg.rate, bound) {
            MMode::Disabled
        } else if can_refuse(cfg.rate, cfg.retries, bound) {
            MMode::Refusing
        } else {
            MMode::Shaping
        };
        Model {
            rate: cfg.rate,
            capacity: Q::int(burst as i128),
            max_debt: Q::new(bound * cfg.rate as i128, 60_000),
            bound,
            mode,
            waits: true,
            strict: cfg.strict,
            tokens: Q::int(burst as i128),
            hwm: now,
            tickets: Vec::new(),
            outstanding: Vec::new(),
            next_id: 0,
        }
    }

    /// SPEC §14: the parameters at `rate` (the rate in force of an adaptive
    /// pacer): the rate, the debt floor and the mode follow it; the level,
    /// the mark and the bound stay.
    #[allow(dead_code)]
    pub fn set_rate(&mut self, rate: u32, retries: u32) {
        self.rate = rate;
        self.max_debt = Q::new(self.bound * rate as i128, 60_000);
        self.mode = if !enabled(rate, self.bound) {
            MMode::Disabled
        } else if can_refuse(rate, retries, self.bound) {
            MMode::Refusing
        } else {
            MMode::Shaping
        };
    }

    /// Refill per ms, in tokens.
    pub fn refill_per_ms(&self) -> Q {
        Q::new(self.rate as i128, 60_000)
    }

    /// Tokens at `at ≥ hwm`, capped at capacity.
    fn refilled(&self, at: u64) -> Q {
        let elapsed = at as i128 - self.hwm as i128;
        assert!(elapsed >= 0);
        (self.tokens + Q::int(elapsed) * self.refill_per_ms()).min(self.capacity)
    }

    fn issue(&mut self, debit: Q) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.tickets.push((id, debit, false));
        self.outstanding.push(id);
        id
    }

    pub fn reserve(&mut self, now: u64) -> MOutcome {
        if self.mode == MMode::Disabled {
            return MOutcome::Admitted {
                wait_ms: 0,
                debit: None,
                path: MPath::Disabled,
                regressed: false,
            };
        }
        let regressed = now < self.hwm;
        let at = now.max(self.hwm);
        let tokens = self.refilled(at);
        let wait = if tokens >= Q::ONE {
            0
        } else {
            ((Q::ONE - tokens) / self.refill_per_ms()).ceil()
        };
        let waits = self.waits || self.mode != MMode::Refusing;
        if wait == 0 || (waits && wait <= self.bound) {
            self.tokens = tokens - Q::ONE;
            self.hwm = at;
            let id = self.issue(Q::ONE);
            return MOutcome::Admitted {
                wait_ms: wait,
                debit: Some((Q::ONE, id)),
                path: MPath::Paced,
                regressed,
            };
        }
        if self.mode == MMode::Refusing {
            // The hint of the planned bound: its cap when the wait is
            // beyond it, which is every refusal but a search's.
            return MOutcome::Refused {
                required_ms: wait,
                hint_s: if wait > self.bound {
                    hint_s(wait, self.bound)
                } else {
                    cap_s(self.bound)
                },
                regressed,
            };
        }
        let debit = Q::ONE.min(tokens + self.max_debt);
        if debit > Q::ZERO {
            self.tokens = tokens - debit;
            self.hwm = at;
            let id = self.issue(debit);
            MOutcome::Admitted {
                wait_ms: self.bound,
                debit: Some((debit, id)),
                path: MPath::Shaped,
                regressed,
            }
        } else {
            MOutcome::Admitted {
                wait_ms: 0,
                debit: None,
                path: MPath::Overflow,
                regressed,
            }
        }
    }

    /// Releases ticket `id` at `now`; whether the policy allowed the refund.
    pub fn release(&mut self, id: u64, now: u64) -> bool {
        let Some(entry) = self.tickets.iter_mut().find(|t| t.0 == id) else {
            return false;
        };
        if entry.2 {
            return false;
        }
        entry.2 = true;
        let debit = entry.1;
        if self.strict {
            if self.outstanding.last() != Some(&id) {
                return false;
            }
            self.outstanding.pop();
        }
        let at = now.max(self.hwm);
        self.tokens = (self.refilled(at) + debit).min(self.capacity);
        self.hwm = at;
        true
    }
}
