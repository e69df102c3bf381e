//! A small seeded generator for the simulator.
//!
//! SplitMix64: a few lines, no dependency, and the same stream for the same
//! seed on every platform — which is all `simulate --seed` promises. It is
//! not for anything security-related.

/// Deterministic pseudo-random numbers from a 64-bit seed.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..bound` (0 when `bound` is 0). Uses the
    /// multiply-shift reduction; its bias is below 2^-64 · bound, far
    /// beneath anything a simulation of minutes can show.
    pub fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    /// A uniform float in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `percent / 100` (`percent` clamped to 0..=100).
    pub fn percent(&mut self, percent: u32) -> bool {
        self.below(100) < u64::from(percent.min(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_output_matches_the_published_reference() {
        // SplitMix64 with seed 0 starts 0xE220A8397B1DCDAF (Vigna's
        // reference implementation, splitmix64.c).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = SplitMix64::new(7);
        for bound in [1u64, 2, 3, 10, 1000] {
            for _ in 0..1000 {
                assert!(rng.below(bound) < bound);
            }
        }
        assert_eq!(rng.below(0), 0);
    }
}
