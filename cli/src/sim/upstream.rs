//! The upstream model: the account's hidden limit, shared by every
//! machine. A connection the upstream throttles is not opened, and it does
//! not count against the limit. The limit `T` is `--upstream-limit-per-min`
//! (the base), possibly changed during the run by a schedule.
//!
//! Each opening at virtual time `now` (ms) is judged by one model
//! (`--upstream-model`):
//!
//! - **sliding** (the default): throttled when `T` connections opened in
//!   the last 60 s, `(now − 60000, now]`; an opening at `t` leaves the
//!   window at `t + 60000`.
//! - **fixed-minute**: throttled when `T` connections opened in the current
//!   calendar minute of virtual time, `[k·60000, (k+1)·60000)` with
//!   `k = now / 60000`; the count starts again at 0 each minute.
//! - **token-bucket**: a bucket of `B` tokens (`--upstream-burst`, default
//!   [`DEFAULT_UPSTREAM_BURST`]), full at time 0. An opening takes one token;
//!   with no whole token it is throttled. The bucket refills `T` tokens a
//!   minute, counted exactly in units of 1/60000 token: one token is 60000
//!   units, each ms adds `T` units, the bucket holds at most `B·60000`.
//!
//! **Limit changes** (`--upstream-limit-at M=T,…`, at most
//! [`MAX_LIMIT_CHANGES`]): from minute `M` (virtual time `M·60000` ms
//! included) the limit is `T`, until the next change. The limit in force at
//! `now` ([`UpstreamModel::limit_at`]) is what each model compares with:
//! the sliding window's count (openings already in the window count against
//! the new limit), the fixed window's count for the current minute (openings
//! before the change in that minute count too), or, for the token bucket,
//! the refill rate from that instant on (the tokens held stay, at most `B`).
//!
//! **Penalty** (`--upstream-penalty-ms P`, on top of any model; 0 is off): an
//! opening at `t` that the model throttles (the limit reached) makes the
//! upstream refuse every opening in `[t, t + P)` as well. Those refusals are
//! throttles too, but they neither start nor extend a penalty, and they do
//! not touch the model's count or tokens.

use std::collections::VecDeque;

use serde::Serialize;

/// The most limit changes a schedule holds.
pub const MAX_LIMIT_CHANGES: usize = 4;

/// The token bucket's burst when `--upstream-burst` is not given.
pub const DEFAULT_UPSTREAM_BURST: u32 = 10;

/// The largest upstream burst (and limit): 60,000.
pub const MAX_UPSTREAM_LIMIT: u32 = 60_000;

/// Token-bucket units per token: the bucket gains `T` units a ms.
const UNITS_PER_TOKEN: u64 = 60_000;

/// How the upstream counts openings against its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamKind {
    /// At most `T` openings in any 60 s.
    Sliding,
    /// At most `T` openings in each calendar minute of virtual time.
    FixedMinute,
    /// A bucket of `burst` tokens refilled at `T` a minute.
    TokenBucket {
        /// The bucket's size, tokens (≥ 1).
        burst: u32,
    },
}

impl UpstreamKind {
    /// The flag's spelling: `sliding`, `fixed-minute`, `token-bucket`.
    pub fn name(self) -> &'static str {
        match self {
            UpstreamKind::Sliding => "sliding",
            UpstreamKind::FixedMinute => "fixed-minute",
            UpstreamKind::TokenBucket { .. } => "token-bucket",
        }
    }
}

/// The upstream's model besides its base limit: how it counts, when its
/// limit changes, and its penalty. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamModel {
    /// How openings are counted.
    pub kind: UpstreamKind,
    /// `(at ms, new limit)`, in increasing time, the used entries first
    /// ([`crate::sim::validate`] checks it).
    pub changes: [Option<(u64, u32)>; MAX_LIMIT_CHANGES],
    /// After a throttle by the limit, every opening is refused for this
    /// many ms (0: no penalty).
    pub penalty_ms: u64,
}

impl Default for UpstreamModel {
    fn default() -> UpstreamModel {
        UpstreamModel::SLIDING
    }
}

impl UpstreamModel {
    /// The default: a sliding 60 s window, no change, no penalty.
    pub const SLIDING: UpstreamModel = UpstreamModel {
        kind: UpstreamKind::Sliding,
        changes: [None; MAX_LIMIT_CHANGES],
        penalty_ms: 0,
    };

    /// Whether this is [`UpstreamModel::SLIDING`].
    pub fn is_default(&self) -> bool {
        *self == UpstreamModel::SLIDING
    }

    /// The scheduled changes, `(at ms, limit)`, in order.
    pub fn scheduled(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.changes.iter().flatten().copied()
    }

    /// The instants (ms) at which the limit changes, in order.
    pub fn change_times_ms(&self) -> Vec<u64> {
        self.scheduled().map(|(at, _)| at).collect()
    }

    /// The limit in force at `at_ms` when the run starts with `base`: the
    /// last change at or before `at_ms`, else `base`.
    pub fn limit_at(&self, base: u32, at_ms: u64) -> u32 {
        self.scheduled()
            .take_while(|&(at, _)| at <= at_ms)
            .last()
            .map_or(base, |(_, limit)| limit)
    }

    /// The model in words for a report, `base` being the limit at the start
    /// (a number, or a name such as `T`).
    pub fn describe(&self, base: impl std::fmt::Display) -> String {
        let mut text = match self.kind {
            UpstreamKind::Sliding => {
                format!("a hidden limit of {base} new connections in any 60 s")
            }
            UpstreamKind::FixedMinute => {
                format!("a hidden limit of {base} new connections in each calendar minute")
            }
            UpstreamKind::TokenBucket { burst } => {
                format!("a hidden token bucket of {burst} connections refilled at {base} a minute")
            }
        };
        for (at, limit) in self.scheduled() {
            text.push_str(&format!(", {limit} from minute {}", at / 60_000));
        }
        if self.penalty_ms > 0 {
            text.push_str(&format!(
                "; a throttle at the limit refuses every connection for {} ms",
                self.penalty_ms
            ));
        }
        text
    }
}

/// A limit change in a report: from `minute` the limit is `limit`.
#[derive(Serialize)]
struct LimitChange {
    minute: u64,
    limit: u32,
}

/// The model as a report's settings show it.
impl Serialize for UpstreamModel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown {
            kind: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            burst: Option<u32>,
            limit_changes: Vec<LimitChange>,
            penalty_ms: u64,
        }
        Shown {
            kind: self.kind.name(),
            burst: match self.kind {
                UpstreamKind::TokenBucket { burst } => Some(burst),
                _ => None,
            },
            limit_changes: self
                .scheduled()
                .map(|(at, limit)| LimitChange {
                    minute: at / 60_000,
                    limit,
                })
                .collect(),
            penalty_ms: self.penalty_ms,
        }
        .serialize(serializer)
    }
}

/// The upstream during one run: its model and what the model counts.
/// Openings must be judged in non-decreasing time.
#[derive(Clone, Debug)]
pub struct UpstreamLimit {
    /// The base limit per minute; `None`: the upstream opens everything.
    base: Option<u32>,
    model: UpstreamModel,
    /// Sliding: opening times in the last 60 s.
    window: VecDeque<u64>,
    /// Fixed minute: the current minute's index and its openings.
    minute: u64,
    in_minute: u64,
    /// Token bucket: units held (60000 a token) as of `refilled_to` ms.
    units: u64,
    refilled_to: u64,
    /// Openings before this instant are refused (the penalty).
    refuse_until: u64,
}

impl UpstreamLimit {
    /// The upstream at time 0 (a token bucket starts full).
    pub fn new(base: Option<u32>, model: UpstreamModel) -> UpstreamLimit {
        let units = match model.kind {
            UpstreamKind::TokenBucket { burst } => u64::from(burst) * UNITS_PER_TOKEN,
            _ => 0,
        };
        UpstreamLimit {
            base,
            model,
            window: VecDeque::new(),
            minute: 0,
            in_minute: 0,
            units,
            refilled_to: 0,
            refuse_until: 0,
        }
    }

    /// Whether the upstream throttles a connection opening at `now`; when
    /// it does not, the opening counts against the limit.
    pub fn throttles(&mut self, now: u64) -> bool {
        let Some(base) = self.base else {
            return false;
        };
        if now < self.refuse_until {
            return true;
        }
        let limit = u64::from(self.model.limit_at(base, now));
        let throttled = match self.model.kind {
            UpstreamKind::Sliding => {
                while self.window.front().is_some_and(|&t| t + 60_000 <= now) {
                    self.window.pop_front();
                }
                let full = self.window.len() as u64 >= limit;
                if !full {
                    self.window.push_back(now);
                }
                full
            }
            UpstreamKind::FixedMinute => {
                if now / 60_000 != self.minute {
                    self.minute = now / 60_000;
                    self.in_minute = 0;
                }
                let full = self.in_minute >= limit;
                if !full {
                    self.in_minute += 1;
                }
                full
            }
            UpstreamKind::TokenBucket { burst } => {
                self.refill(base, burst, now);
                let empty = self.units < UNITS_PER_TOKEN;
                if !empty {
                    self.units -= UNITS_PER_TOKEN;
                }
                empty
            }
        };
        if throttled {
            self.refuse_until = now.saturating_add(self.model.penalty_ms);
        }
        throttled
    }

    /// Adds the token bucket's refill up to `now`, at the rate in force in
    /// each stretch between limit changes.
    fn refill(&mut self, base: u32, burst: u32, now: u64) {
        let cap = u64::from(burst) * UNITS_PER_TOKEN;
        while self.refilled_to < now {
            let from = self.refilled_to;
            let to = self
                .model
                .scheduled()
                .map(|(at, _)| at)
                .find(|&at| at > from)
                .map_or(now, |at| at.min(now));
            let rate = u64::from(self.model.limit_at(base, from));
            self.units = self
                .units
                .saturating_add(rate.saturating_mul(to - from))
                .min(cap);
            self.refilled_to = to;
        }
    }
}
