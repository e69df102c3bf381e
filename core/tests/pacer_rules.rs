//! Config validation, modes, tickets and clock handling of the pacer,
//! with expectations derived by hand from SPEC §2–§5.

use pacer_core::budget::backoff_ms;
use pacer_core::{
    AdmitPath, Config, ConfigError, Decision, Mode, Pacer, ReleasePolicy, Ticket, MAX_BURST,
    UNITS_PER_TOKEN,
};

/// Default settings with a bucket of one token, created at t = 0.
fn burst_one_pacer() -> Pacer {
    Pacer::new(
        &Config {
            burst: 1,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap()
}

fn admitted(decision: Decision) -> pacer_core::Admission {
    match decision {
        Decision::Admitted(a) => a,
        Decision::Refused(r) => panic!("refused: {r:?}"),
    }
}

#[test]
fn invalid_configs_are_rejected() {
    let base = Config::DEFAULT;
    assert_eq!(
        Pacer::new(
            &Config {
                rate_per_min: 601,
                ..base
            },
            0
        )
        .err(),
        Some(ConfigError::RateTooHigh)
    );
    assert!(Pacer::new(
        &Config {
            rate_per_min: 600,
            ..base
        },
        0
    )
    .is_ok());
    assert_eq!(
        Pacer::new(
            &Config {
                burst: MAX_BURST + 1,
                ..base
            },
            0
        )
        .err(),
        Some(ConfigError::BurstTooLarge)
    );
    assert!(Pacer::new(
        &Config {
            burst: MAX_BURST,
            ..base
        },
        0
    )
    .is_ok());
    // idle 120000: ladder ceiling 5 (2000·(2^6−1) = 126000 ≥ 120000).
    assert_eq!(
        Pacer::new(
            &Config {
                max_retries: 6,
                ..base
            },
            0
        )
        .err(),
        Some(ConfigError::RetriesExceedLadder)
    );
    assert_eq!(
        Pacer::new(
            &Config {
                idle_timeout_ms: 10000,
                max_retries: 3,
                ..base
            },
            0
        )
        .err(),
        Some(ConfigError::RetriesExceedLadder)
    );
}

#[test]
fn burst_zero_means_one() {
    let pacer = Pacer::new(
        &Config {
            burst: 0,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    assert_eq!(pacer.capacity_units(), UNITS_PER_TOKEN);
    assert_eq!(admitted(pacer.reserve(0)).wait_ms, 0);
    assert_eq!(admitted(pacer.reserve(0)).wait_ms, 1000);
}

#[test]
fn four_modes() {
    let base = Config::DEFAULT;
    let mode = |c: Config| Pacer::new(&c, 0).unwrap().mode();
    assert_eq!(mode(base), Mode::Refusing);
    assert_eq!(
        mode(Config {
            rate_per_min: 0,
            ..base
        }),
        Mode::Disabled
    );
    assert_eq!(
        mode(Config {
            idle_timeout_ms: 14001,
            max_retries: 3,
            ..base
        }),
        Mode::Disabled
    );
    assert_eq!(
        mode(Config {
            rate_per_min: 2,
            ..base
        }),
        Mode::ShapingLowRate
    );
    assert_eq!(
        mode(Config {
            rate_per_min: 3,
            ..base
        }),
        Mode::Refusing
    );
    assert_eq!(
        mode(Config {
            max_retries: 0,
            ..base
        }),
        Mode::ShapingNoRetry
    );
    // idle 10000, r 2, bound 666: 29/min cannot refuse, 30/min can.
    assert_eq!(
        mode(Config {
            rate_per_min: 29,
            idle_timeout_ms: 10000,
            max_retries: 2,
            ..base
        }),
        Mode::ShapingLowRate
    );
    assert_eq!(
        mode(Config {
            rate_per_min: 30,
            idle_timeout_ms: 10000,
            max_retries: 2,
            ..base
        }),
        Mode::Refusing
    );
}

#[test]
fn debt_floor_and_bound() {
    let pacer = Pacer::new(&Config::DEFAULT, 0).unwrap();
    assert_eq!(pacer.wait_bound_ms(), 4833);
    assert_eq!(pacer.max_debt_units(), 4833 * 60);
    let shaping = Pacer::new(
        &Config {
            max_retries: 0,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    assert_eq!(shaping.max_debt_units(), 15 * UNITS_PER_TOKEN);
}

#[test]
fn shaping_paths_are_reported() {
    let pacer = Pacer::new(
        &Config {
            rate_per_min: 1,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    for _ in 0..10 {
        assert_eq!(admitted(pacer.reserve(0)).path, AdmitPath::Paced);
    }
    let shaped = admitted(pacer.reserve(0));
    assert_eq!((shaped.path, shaped.wait_ms), (AdmitPath::Shaped, 4833));
    assert_eq!(shaped.ticket.as_ref().map(Ticket::debit_units), Some(4833));
    let overflow = admitted(pacer.reserve(0));
    assert_eq!(
        (overflow.path, overflow.wait_ms, overflow.ticket),
        (AdmitPath::Overflow, 0, None)
    );
    // Releasing the shaped ticket returns its fractional debit: one more shaped.
    assert!(pacer.release(shaped.ticket.unwrap(), 0));
    assert_eq!(admitted(pacer.reserve(0)).path, AdmitPath::Shaped);
}

#[test]
fn invalid_tickets_change_nothing() {
    let pacer = burst_one_pacer();
    let _held = admitted(pacer.reserve(0)).ticket.unwrap();
    let before = pacer.state();
    for (seq, debit) in [(1, 0), (1, 60001), (1 << 24, 60000), (u32::MAX, u32::MAX)] {
        assert!(
            !pacer.release(Ticket::from_raw(seq, debit), 10),
            "{seq} {debit}"
        );
        assert_eq!(pacer.state(), before);
    }
    let disabled = Pacer::new(
        &Config {
            rate_per_min: 0,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    assert!(!disabled.release(Ticket::from_raw(1, 60000), 0));
}

#[test]
fn strict_denial_changes_nothing() {
    let config = Config {
        burst: 1,
        release_policy: ReleasePolicy::Strict,
        ..Config::DEFAULT
    };
    let pacer = Pacer::new(&config, 0).unwrap();
    let first = admitted(pacer.reserve(0)).ticket.unwrap();
    let _second = admitted(pacer.reserve(0)).ticket.unwrap();
    let before = pacer.state();
    assert!(!pacer.release(first, 500));
    assert_eq!(
        pacer.state(),
        before,
        "a denied release must not even move the clock mark"
    );
}

#[test]
fn clock_regression_is_flagged_and_harmless() {
    let config = Config {
        burst: 1,
        idle_timeout_ms: 30000,
        max_retries: 3,
        ..Config::DEFAULT
    };
    let pacer = Pacer::new(&config, 10_000).unwrap();
    let a = admitted(pacer.reserve(10_000));
    assert!(!a.clock_regressed);
    let before = pacer.state();
    let b = admitted(pacer.reserve(0));
    assert!(b.clock_regressed);
    assert_eq!(b.wait_ms, 1000);
    let after = pacer.state();
    assert_eq!(after.high_water_ms, 10_000);
    assert_eq!(after.tokens_units, before.tokens_units - UNITS_PER_TOKEN);
    // A refusal behind the mark is flagged too, and changes nothing.
    pacer.reserve(10_000);
    match pacer.reserve(1) {
        Decision::Refused(r) => {
            assert!(r.clock_regressed && r.required_wait_ms == 3000 && r.retry_after_s == 2)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn extreme_clocks_do_not_overflow() {
    let pacer = Pacer::new(
        &Config {
            rate_per_min: 600,
            burst: MAX_BURST,
            ..Config::DEFAULT
        },
        u64::MAX,
    )
    .unwrap();
    assert_eq!(admitted(pacer.reserve(u64::MAX)).wait_ms, 0);
    assert_eq!(admitted(pacer.reserve(0)).wait_ms, 0);
    assert_eq!(pacer.state().high_water_ms, u64::MAX);
    let pacer = Pacer::new(&Config::DEFAULT, 0).unwrap();
    for _ in 0..14 {
        pacer.reserve(0);
    }
    // From deep debt straight to the end of time: refills to capacity, no wrap.
    assert_eq!(admitted(pacer.reserve(u64::MAX)).wait_ms, 0);
    assert_eq!(pacer.state().tokens_units, 9 * UNITS_PER_TOKEN);
}

#[test]
fn a_pacer_can_be_a_static() {
    static PACER: Result<Pacer, ConfigError> = Pacer::new(&Config::DEFAULT, 0);
    let pacer = PACER.as_ref().unwrap();
    assert_eq!(admitted(pacer.reserve(0)).wait_ms, 0);
}

#[test]
fn backoff_saturates_past_u64() {
    // 2000·(2^53 − 1) = 18014398509481982000 still fits a u64 (max ≈ 1.8447e19);
    // 2000·(2^54 − 1) does not.
    assert_eq!(backoff_ms(5), 62_000);
    assert_eq!(backoff_ms(53), 18_014_398_509_481_982_000);
    assert_eq!(backoff_ms(54), u64::MAX);
    assert_eq!(backoff_ms(63), u64::MAX);
    assert_eq!(backoff_ms(64), u64::MAX);
    assert_eq!(backoff_ms(u32::MAX), u64::MAX);
}

#[test]
fn tickets_carry_their_stack_position_and_debit() {
    // Burst 2 at rate 60: two tokens now, the third waits 1000 ms. Each debit
    // pushes the release stack: positions 1, 2, 3 from a fresh pacer.
    let pacer = Pacer::new(
        &Config {
            burst: 2,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    let first = admitted(pacer.reserve(0));
    assert!(!first.queued());
    let second = admitted(pacer.reserve(0));
    let third = admitted(pacer.reserve(0));
    assert!(third.queued());
    assert_eq!(third.wait_ms, 1000);
    let tickets = [first, second, third].map(|a| a.ticket.unwrap());
    assert_eq!(tickets.each_ref().map(Ticket::seq), [1, 2, 3]);
    let [a, b, c] = tickets;
    assert_eq!(c.into_raw(), (3, 60_000));
    assert_eq!(b.into_raw(), (2, 60_000));
    assert_eq!(a.debit_units(), 60_000);
}

#[test]
fn the_last_stack_position_is_a_valid_ticket() {
    // Positions are 24 bits: 2^24 − 1 is valid (refunded under the refund
    // policy), 2^24 is not (see invalid_tickets_change_nothing).
    let pacer = burst_one_pacer();
    let _held = admitted(pacer.reserve(0)).ticket.unwrap();
    assert!(pacer.release(Ticket::from_raw((1 << 24) - 1, 60_000), 0));
    assert_eq!(pacer.state().tokens_units, 60_000);
}

/// A rejected config is a `std::error::Error` whose text names the setting,
/// so `?` works in a caller's `main` (the README's programs use it).
#[test]
fn config_errors_say_what_is_wrong() {
    let error: Box<dyn std::error::Error> = Box::new(ConfigError::RateTooHigh);
    assert_eq!(error.to_string(), "pacer: rate_per_min is above 600");
    assert_eq!(
        ConfigError::BurstTooLarge.to_string(),
        "pacer: burst is above 1000000 (MAX_BURST)"
    );
    assert_eq!(
        ConfigError::RetriesExceedLadder.to_string(),
        "pacer: max_retries is above what the idle timeout holds (the retry ladder would overrun it)"
    );
}
