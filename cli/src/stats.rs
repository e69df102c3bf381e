//! Percentiles and per-minute buckets for the reports.

/// The nearest-rank percentile of `sorted` (ascending): the smallest value
/// with at least `percent`% of the values at or below it. `None` when empty.
pub fn percentile(sorted: &[u64], percent: u32) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    let rank = (u64::from(percent.min(100)) * n).div_ceil(100).max(1);
    sorted.get(rank as usize - 1).copied()
}

/// Counts per whole minute of virtual time.
#[derive(Clone, Debug, Default)]
pub struct PerMinute {
    counts: Vec<u64>,
}

impl PerMinute {
    /// Counts one event at `t_ms`.
    pub fn add(&mut self, t_ms: u64) {
        let minute = (t_ms / 60_000) as usize;
        if self.counts.len() <= minute {
            self.counts.resize(minute + 1, 0);
        }
        self.counts[minute] += 1;
    }

    /// The count in minute `minute` (`[minute·60 s, (minute+1)·60 s)`).
    pub fn get(&self, minute: usize) -> u64 {
        self.counts.get(minute).copied().unwrap_or(0)
    }
}

/// `part` as a percentage of `whole`; 0 when `whole` is 0.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Events with time in `[from_ms, to_ms)`.
pub fn count_in(times: &[u64], from_ms: u64, to_ms: u64) -> u64 {
    times.iter().filter(|&&t| t >= from_ms && t < to_ms).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let values: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile(&values, 50), Some(5));
        assert_eq!(percentile(&values, 90), Some(9));
        assert_eq!(percentile(&values, 91), Some(10));
        assert_eq!(percentile(&values, 100), Some(10));
        assert_eq!(percentile(&values, 0), Some(1));
        assert_eq!(percentile(&[7], 50), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn minutes() {
        let mut per = PerMinute::default();
        for t in [0, 59_999, 60_000, 180_000] {
            per.add(t);
        }
        assert_eq!(
            (per.get(0), per.get(1), per.get(2), per.get(3), per.get(9)),
            (2, 1, 0, 1, 0)
        );
        assert_eq!(count_in(&[0, 5, 10, 15], 5, 15), 2);
    }

    #[test]
    fn percentages() {
        assert_eq!(percent(1, 4), 25.0);
        assert_eq!(percent(3, 0), 0.0);
    }
}
