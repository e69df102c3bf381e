//! The client whose retries the pacer's budget is sized for (SPEC §8): the
//! Vercel AI SDK's retry rule, as the design record quotes it from
//! `getRetryDelayInMs` (ai@7.0.22, util/retry-with-exponential-backoff.ts).
//!
//! Re-encoded here on purpose, separately from the core: the simulator and
//! the matrix check the pacer *against* this model, so it must not reuse
//! the core's own arithmetic.

/// The SDK's first backoff rung; each retry doubles it (2, 4, 8, 16, 32 s).
pub const FIRST_RUNG_MS: u64 = 2_000;
/// Hints at or above this are ignored (unless below the current rung).
pub const HINT_LIMIT_MS: u64 = 60_000;

/// The delay headers of a retryable failure, as the SDK reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryHeaders {
    /// `retry-after-ms`, when present and numeric.
    pub retry_after_ms: Option<u64>,
    /// `retry-after` in whole seconds, when present and numeric. The
    /// pacer's refusal carries only this one (SPEC §9).
    pub retry_after_s: Option<u64>,
}

impl RetryHeaders {
    /// The headers of a pacer refusal: `retry-after: N`.
    pub fn pacer_refusal(retry_after_s: u64) -> Self {
        RetryHeaders {
            retry_after_ms: None,
            retry_after_s: Some(retry_after_s),
        }
    }
}

/// The ladder rung before retry number `retry_index` (0 for the first
/// retry): `2000 · 2^retry_index` ms, saturating.
pub fn rung_ms(retry_index: u32) -> u64 {
    if retry_index >= 60 {
        return u64::MAX;
    }
    FIRST_RUNG_MS.saturating_mul(1u64 << retry_index)
}

/// The delay before retry number `retry_index`: the hint when
/// `0 <= hint < 60 s` or below the rung, else the rung. `retry-after-ms`
/// wins over `retry-after`.
pub fn retry_delay_ms(headers: RetryHeaders, retry_index: u32) -> u64 {
    let rung = rung_ms(retry_index);
    let hint_ms = headers
        .retry_after_ms
        .or_else(|| headers.retry_after_s.map(|s| s.saturating_mul(1000)));
    match hint_ms {
        // Unsigned: the SDK's `0 <= ms` holds for every value we can carry.
        Some(ms) if ms < HINT_LIMIT_MS || ms < rung => ms,
        _ => rung,
    }
}

/// What the client does after a retryable failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientStep {
    /// Try again after this many ms.
    Retry {
        /// The delay before the next attempt.
        delay_ms: u64,
    },
    /// The retry count is spent: the failure surfaces to the user (for a
    /// pacer refusal, as a rate-limit error).
    GiveUp,
}

/// The SDK client with its retry count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client {
    /// Retries after the first attempt; 0 fails at once.
    pub max_retries: u32,
}

impl Client {
    /// After attempt number `attempts_made` (1 for the first attempt)
    /// failed with `headers`: retry, or give up.
    pub fn after_failure(&self, attempts_made: u32, headers: RetryHeaders) -> ClientStep {
        if attempts_made > self.max_retries {
            return ClientStep::GiveUp;
        }
        ClientStep::Retry {
            delay_ms: retry_delay_ms(headers, attempts_made - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_is_2_4_8_16_32_seconds() {
        let rungs: Vec<u64> = (0..5).map(rung_ms).collect();
        assert_eq!(rungs, [2000, 4000, 8000, 16000, 32000]);
    }

    #[test]
    fn a_hint_under_60s_replaces_the_rung_even_when_larger() {
        // The substitution that invalidated the record's first bound.
        assert_eq!(retry_delay_ms(RetryHeaders::pacer_refusal(30), 0), 30_000);
        assert_eq!(retry_delay_ms(RetryHeaders::pacer_refusal(1), 4), 1_000);
        assert_eq!(retry_delay_ms(RetryHeaders::pacer_refusal(0), 0), 0);
    }

    #[test]
    fn a_hint_of_60s_or_more_falls_back_to_the_rung_unless_below_it() {
        assert_eq!(retry_delay_ms(RetryHeaders::pacer_refusal(60), 0), 2_000);
        // Rung 2000·2^5 = 64000 > 61000: the hint is below the rung.
        assert_eq!(retry_delay_ms(RetryHeaders::pacer_refusal(61), 5), 61_000);
        assert_eq!(retry_delay_ms(RetryHeaders::default(), 2), 8_000);
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let headers = RetryHeaders {
            retry_after_ms: Some(1500),
            retry_after_s: Some(9),
        };
        assert_eq!(retry_delay_ms(headers, 0), 1500);
    }

    #[test]
    fn the_last_attempt_is_terminal() {
        let client = Client { max_retries: 2 };
        let refusal = RetryHeaders::pacer_refusal(4);
        assert_eq!(
            client.after_failure(1, refusal),
            ClientStep::Retry { delay_ms: 4000 }
        );
        assert_eq!(
            client.after_failure(2, refusal),
            ClientStep::Retry { delay_ms: 4000 }
        );
        assert_eq!(client.after_failure(3, refusal), ClientStep::GiveUp);
        assert_eq!(
            Client { max_retries: 0 }.after_failure(1, refusal),
            ClientStep::GiveUp
        );
    }
}
