//! The load's machines: each machine's random stream and its open-loop
//! arrivals (periodic or Poisson).

use super::config::{Arrivals, Load};
use crate::rng::SplitMix64;

/// What one machine keeps of its own: its random stream and its arrivals.
pub(super) struct Machine {
    pub(super) rng: SplitMix64,
    arrival_index: u64,
    poisson_clock: f64,
}

impl Machine {
    /// Machine `machine` of a run seeded with `seed`.
    pub(super) fn new(seed: u64, machine: u32) -> Machine {
        Machine {
            rng: SplitMix64::new(machine_seed(seed, machine)),
            arrival_index: 0,
            poisson_clock: 0.0,
        }
    }

    /// This machine's next open-loop arrival, or None past `duration_ms`
    /// (or with a closed loop).
    pub(super) fn next_arrival(&mut self, load: Load, duration_ms: u64) -> Option<u64> {
        let Load::Open { arrivals, .. } = load else {
            return None;
        };
        let m = self;
        let at = match arrivals {
            Arrivals::Periodic {
                every_num,
                every_den,
            } => {
                let at = u128::from(m.arrival_index) * u128::from(every_num)
                    / u128::from(every_den.max(1));
                m.arrival_index += 1;
                u64::try_from(at).unwrap_or(u64::MAX)
            }
            Arrivals::Poisson { mean_num, mean_den } => {
                if m.arrival_index > 0 {
                    let mean = mean_num as f64 / mean_den.max(1) as f64;
                    // Inverse transform: -ln(1 - U) · mean, U in [0, 1).
                    m.poisson_clock += -(1.0 - m.rng.unit()).ln() * mean;
                }
                m.arrival_index += 1;
                if m.poisson_clock >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    m.poisson_clock as u64
                }
            }
        };
        (at < duration_ms).then_some(at)
    }
}

/// Machine `machine`'s seed: the run's seed for machine 0 (so one machine
/// is the single-proxy run), else the `machine`-th output of a SplitMix64
/// seeded with the run's seed xor a constant (the fractional bits of √2),
/// a stream of its own. The same in both arrangements.
pub fn machine_seed(seed: u64, machine: u32) -> u64 {
    if machine == 0 {
        return seed;
    }
    let mut seeder = SplitMix64::new(seed ^ 0x6A09_E667_F3BC_C908);
    let mut value = 0;
    for _ in 0..machine {
        value = seeder.next_u64();
    }
    value
}
