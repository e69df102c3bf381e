//! The upstream model: the account's hidden limit (`--upstream-limit-per-min`),
//! at most that many connections opened in any 60 s, a sliding window over
//! every machine; past it the upstream throttles the opening.

use std::collections::VecDeque;

/// The hidden limit and the openings in its window.
pub(super) struct UpstreamLimit {
    /// Connections per 60 s; `None`: the upstream opens everything.
    limit: Option<u32>,
    /// Opening times in the upstream's last 60 s (with a limit).
    window: VecDeque<u64>,
}

impl UpstreamLimit {
    pub(super) fn new(limit: Option<u32>) -> UpstreamLimit {
        UpstreamLimit {
            limit,
            window: VecDeque::new(),
        }
    }

    /// Whether the upstream's hidden limit throttles a connection opening
    /// at `now`; when it does not, the opening takes its place in the
    /// upstream's window.
    pub(super) fn throttles(&mut self, now: u64) -> bool {
        let Some(limit) = self.limit else {
            return false;
        };
        while self.window.front().is_some_and(|&t| t + 60_000 <= now) {
            self.window.pop_front();
        }
        if self.window.len() as u64 >= u64::from(limit) {
            return true;
        }
        self.window.push_back(now);
        false
    }
}
