//! The script is a second implementation of the rule, and the module a new
//! home for the first: neither is trusted. Random traces — backward clocks,
//! epoch-scale and near-2^52 times, both release policies, bookings,
//! redemptions, releases — run through the core in this process, the module,
//! the script by `EVALSHA` and the same script loaded as a function library
//! (`FCALL`) on one real redis-server (test clock), and every answer
//! and the stored state after every operation must agree. The expected
//! values come from the core, which is the reference here: this test checks
//! that the Redis engines are the core, not what the core decides
//! (that is checked from SPEC.md by the core's own tests).
//!
//! `PACER_DIFFERENTIAL_TRACES` sets the number of traces (default 10000);
//! `PACER_DIFFERENTIAL_SEED` the first seed; `PACER_DIFFERENTIAL_ENGINES`
//! `module`, `script` or `function` runs one engine only (for chasing a
//! disagreement).

mod common;

use pacer_cli::engine::{Answer, CoreEngine, Engine, RedisEngine, RedisKind};
use pacer_cli::rng::SplitMix64;
use pacer_core::budget::ladder_ceiling;
use pacer_core::{Config, ReleasePolicy};

/// 2^52: every time on the wire stays below it (docs/redis.md).
const LIMIT: u64 = 1 << 52;

#[derive(Clone, Copy, Debug)]
enum Op {
    Reserve,
    Book(u32),
    /// Releases the `n`-th held ticket or booking (mod the count).
    Release(u64),
    /// Redeems the `n`-th held booking (mod the count).
    Redeem(u64),
}

#[derive(Clone, Debug)]
struct Trace {
    config: Config,
    start: u64,
    steps: Vec<(u64, Op)>,
}

fn pick<T: Copy>(rng: &mut SplitMix64, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize]
}

fn config(rng: &mut SplitMix64) -> Config {
    let rate = match rng.below(6) {
        0 => pick(rng, &[0, 1, 2, 7, 59, 60, 61, 599, 600]),
        1 => 1 + rng.below(10) as u32,
        _ => 1 + rng.below(600) as u32,
    };
    let burst = match rng.below(5) {
        0 => pick(rng, &[0, 1, 1_000_000]),
        _ => rng.below(20) as u32,
    };
    let idle = match rng.below(6) {
        0 => pick(rng, &[0, 1, 9_999, 10_000, 3_600_000, LIMIT - 1]),
        _ => 1_000 + rng.below(600_000),
    };
    let ceiling = ladder_ceiling(idle);
    Config {
        rate_per_min: rate,
        burst,
        idle_timeout_ms: idle,
        max_retries: rng.below(u64::from(ceiling) + 1) as u32,
        release_policy: if rng.below(2) == 0 {
            ReleasePolicy::Refund
        } else {
            ReleasePolicy::Strict
        },
    }
}

fn trace(seed: u64) -> Trace {
    let mut rng = SplitMix64::new(seed);
    let config = config(&mut rng);
    let start = match rng.below(4) {
        0 => rng.below(100_000),
        1 => 1_700_000_000_000 + rng.below(1 << 36),
        2 => LIMIT - 1 - rng.below(10_000_000),
        _ => rng.below(LIMIT),
    };
    let mut t = start;
    let steps = (0..1 + rng.below(30))
        .map(|_| {
            t = match rng.below(10) {
                0 => t.saturating_sub(rng.below(20_000)),
                1 => t,
                2 => t + rng.below(200_000),
                _ => t + rng.below(3_000),
            }
            .min(LIMIT - 1);
            let op = match rng.below(10) {
                0..=3 => Op::Reserve,
                4..=6 => Op::Book(rng.below(u64::from(config.max_retries) + 3) as u32),
                7 => Op::Release(rng.next_u64()),
                _ => Op::Redeem(rng.next_u64()),
            };
            (t, op)
        })
        .collect();
    Trace {
        config,
        start,
        steps,
    }
}

/// What a step did on one engine: its answer, then the state.
type Outcome = Result<(Answer, pacer_cli::engine::State), String>;

/// Runs `trace` on `engine`. Held tickets and bookings are tracked from
/// the answers, so a step names "the n-th held one" the same way on every
/// engine as long as the answers agree.
fn run(trace: &Trace, engine: &mut dyn Engine) -> Vec<Outcome> {
    let mut held: Vec<u64> = Vec::new();
    let mut bookings: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for &(t, op) in &trace.steps {
        let answer = match op {
            Op::Reserve => engine.reserve(t),
            Op::Book(retries_left) => engine.book(t, retries_left),
            Op::Release(n) if !held.is_empty() => {
                let id = held.remove((n % held.len() as u64) as usize);
                bookings.retain(|b| *b != id);
                engine.release(id, t)
            }
            Op::Redeem(n) if !bookings.is_empty() => {
                let id = bookings[(n % bookings.len() as u64) as usize];
                let answer = engine.redeem(id, t);
                if let Ok(Answer::Admitted { .. }) = answer {
                    bookings.retain(|b| *b != id);
                }
                answer
            }
            Op::Release(_) | Op::Redeem(_) => engine.reserve(t),
        };
        match &answer {
            Ok(Answer::Admitted {
                ticket: Some(id), ..
            }) if !held.contains(id) => held.push(*id),
            Ok(Answer::Booked { booking, .. }) => {
                held.push(*booking);
                bookings.push(*booking);
            }
            _ => {}
        }
        let outcome = answer.and_then(|a| engine.state(t).map(|s| (a, s)));
        let failed = outcome.is_err();
        out.push(outcome);
        if failed {
            break;
        }
    }
    out
}

#[test]
fn module_and_script_agree_with_the_core_on_random_traces() {
    let traces: u64 = std::env::var("PACER_DIFFERENTIAL_TRACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let first: u64 = std::env::var("PACER_DIFFERENTIAL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let engines: Vec<RedisKind> = match std::env::var("PACER_DIFFERENTIAL_ENGINES").as_deref() {
        Ok("module") => vec![RedisKind::Module],
        Ok("script") => vec![RedisKind::Script],
        Ok("function") => vec![RedisKind::Function],
        _ => vec![RedisKind::Module, RedisKind::Script, RedisKind::Function],
    };
    let server = common::Server::with_module();
    let url = server.url();
    let (mut steps, mut agreed, mut backward, mut booked, mut released, mut strict) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for seed in first..first + traces {
        let trace = trace(seed);
        let mut core = CoreEngine::new(&trace.config, trace.start)
            .unwrap_or_else(|e| panic!("seed {seed}: generated an invalid config: {e:?}"));
        let expected = run(&trace, &mut core);
        for &kind in &engines {
            let mut engine = RedisEngine::new(&url, kind, &trace.config, trace.start)
                .unwrap_or_else(|e| panic!("seed {seed} {kind:?}: {e}"));
            engine.read_back_state(true);
            let got = run(&trace, &mut engine);
            for (i, (want, have)) in expected.iter().zip(&got).enumerate() {
                assert_eq!(
                    want, have,
                    "seed {seed}, {kind:?}, step {i} of {trace:?}: core {want:?}, engine {have:?}"
                );
            }
            assert_eq!(expected.len(), got.len(), "seed {seed} {kind:?}");
        }
        // What the traces covered, so a generator that stops producing a
        // case shows up in the output.
        let mut last = trace.start;
        for (&(t, op), outcome) in trace.steps.iter().zip(&expected) {
            backward += u64::from(t < last);
            last = last.max(t);
            match outcome {
                Ok((Answer::Booked { .. }, _)) => booked += 1,
                Ok((Answer::Released { refunded: true }, _)) => released += 1,
                _ => {}
            }
            let _ = op;
        }
        strict += u64::from(trace.config.release_policy == ReleasePolicy::Strict);
        steps += expected.len() as u64;
        agreed += 1;
    }
    println!(
        "differential: {agreed} of {traces} traces agree on core, module, script and function \
         ({steps} steps each; {backward} steps behind the latest clock reading, {booked} bookings, \
         {released} refunds, {strict} strict traces)"
    );
    assert_eq!(agreed, traces);
    if traces >= 100 {
        assert!(backward > 0 && booked > 0 && released > 0 && strict > 0);
    }
}
