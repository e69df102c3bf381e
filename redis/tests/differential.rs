//! The script is a second implementation of the rule, and the module a new
//! home for the first: neither is trusted. Random traces — backward clocks,
//! epoch-scale and near-2^52 times, both release policies, bookings,
//! redemptions, releases, and spent ones presented again (a redeemed
//! booking redeemed again, a released ticket released or redeemed again,
//! each an error or a refusal that changes nothing) — run through the core in this process, the module,
//! the script by `EVALSHA` and the same script loaded as a function library
//! (`FCALL`) on one real redis-server (test clock), and every answer
//! and the stored state after every operation must agree. The expected
//! values come from the core, which is the reference here: this test checks
//! that the Redis engines are the core, not what the core decides
//! (that is checked from SPEC.md by the core's own tests).
//!
//! `PACER_DIFFERENTIAL_TRACES` sets the number of traces (default 10000),
//! `PACER_DIFFERENTIAL_ADAPTIVE_TRACES` that of adaptive ones (default 10000);
//! `PACER_DIFFERENTIAL_SEED` the first seed; `PACER_DIFFERENTIAL_ENGINES`
//! `module`, `script` or `function` runs one engine only (for chasing a
//! disagreement).

mod common;

use pacer_cli::engine::{Answer, CoreEngine, Engine, RedisEngine, RedisKind};
use pacer_cli::rng::SplitMix64;
use pacer_core::budget::ladder_ceiling;
use pacer_core::{
    Admission, AdmitPath, Config, CounterSnapshot, Counters, Decision, Mode, Outcome as Upstream,
    Params, ReleasePolicy, WAIT_BOUNDS_MS,
};
use pacer_redis::bucket::Header;
use redis::Value;
use std::collections::HashMap;

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
    /// Presents the `n`-th spent number (a released ticket or booking, a
    /// redeemed booking) again: redeemed when `true`, else released.
    Again(u64, bool),
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
        adaptive_floor_per_min: 0,
        adaptive_ceiling_per_min: 0,
    }
}

/// A trace's first clock: near 0, near today, within `near_top` of the
/// largest clock, or anywhere.
fn first_clock(rng: &mut SplitMix64, near_top: u64) -> u64 {
    match rng.below(4) {
        0 => rng.below(100_000),
        1 => 1_700_000_000_000 + rng.below(1 << 36),
        2 => LIMIT - 1 - rng.below(near_top),
        _ => rng.below(LIMIT),
    }
}

fn trace(seed: u64) -> Trace {
    let mut rng = SplitMix64::new(seed);
    let config = config(&mut rng);
    let start = first_clock(&mut rng, 10_000_000);
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
                8 if rng.below(3) == 0 => Op::Again(rng.next_u64(), rng.below(2) == 0),
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

/// The number in the environment variable `name`, or `default`.
fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What a step did on one engine: its answer (an error is an answer too:
/// it must be the same everywhere), then the state.
type Outcome = (
    Result<Answer, String>,
    Result<pacer_cli::engine::State, String>,
);

/// What a step was, as far as the answers before it tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Other,
    /// The release of a redeemed booking's number (its admission's ticket).
    ReleaseAfterRedemption,
    /// A redeemed booking presented again, or released again.
    SpentBookingAgain,
}

/// Runs `trace` on `engine`. Held, spent tickets and bookings are tracked
/// from the answers, so a step names "the n-th held one" the same way on
/// every engine as long as the answers agree.
fn run(trace: &Trace, engine: &mut dyn Engine) -> (Vec<Outcome>, Vec<Step>) {
    let mut held: Vec<u64> = Vec::new();
    let mut bookings: Vec<u64> = Vec::new();
    let mut redeemed: Vec<u64> = Vec::new();
    let mut spent: Vec<u64> = Vec::new();
    let (mut out, mut steps) = (Vec::new(), Vec::new());
    for &(t, op) in &trace.steps {
        let mut step = Step::Other;
        let answer = match op {
            Op::Reserve => engine.reserve(t),
            Op::Book(retries_left) => engine.book(t, retries_left),
            Op::Release(n) if !held.is_empty() => {
                let id = held.remove((n % held.len() as u64) as usize);
                bookings.retain(|b| *b != id);
                spent.push(id);
                if redeemed.contains(&id) {
                    step = Step::ReleaseAfterRedemption;
                }
                engine.release(id, t)
            }
            Op::Redeem(n) if !bookings.is_empty() => {
                let id = bookings[(n % bookings.len() as u64) as usize];
                let answer = engine.redeem(id, t);
                if let Ok(Answer::Admitted { .. }) = answer {
                    // The booking is spent; its number is the admission's
                    // ticket, still held.
                    bookings.retain(|b| *b != id);
                    redeemed.push(id);
                    spent.push(id);
                }
                answer
            }
            Op::Again(n, redeem) if !spent.is_empty() => {
                let id = spent[(n % spent.len() as u64) as usize];
                if redeemed.contains(&id) {
                    step = Step::SpentBookingAgain;
                }
                if redeem {
                    engine.redeem(id, t)
                } else {
                    engine.release(id, t)
                }
            }
            Op::Release(_) | Op::Redeem(_) | Op::Again(..) => engine.reserve(t),
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
        let state = engine.state(t);
        let failed = state.is_err();
        out.push((answer, state));
        steps.push(step);
        if failed {
            break;
        }
    }
    (out, steps)
}

#[test]
fn module_and_script_agree_with_the_core_on_random_traces() {
    let traces: u64 = env_number("PACER_DIFFERENTIAL_TRACES", 10_000);
    let first: u64 = env_number("PACER_DIFFERENTIAL_SEED", 1);
    let engines: Vec<RedisKind> = match std::env::var("PACER_DIFFERENTIAL_ENGINES").as_deref() {
        Ok("module") => vec![RedisKind::Module],
        Ok("script") => vec![RedisKind::Script],
        Ok("function") => vec![RedisKind::Function],
        _ => vec![RedisKind::Module, RedisKind::Script, RedisKind::Function],
    };
    let server = common::Server::with_module();
    let url = pacer_cli::redis_target::Target::Server(server.url());
    let (mut steps, mut agreed, mut backward, mut booked, mut released, mut strict) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut redeemed, mut spent_again, mut released_after) = (0u64, 0u64, 0u64);
    for seed in first..first + traces {
        let trace = trace(seed);
        let mut core = CoreEngine::new(&trace.config, trace.start)
            .unwrap_or_else(|e| panic!("seed {seed}: generated an invalid config: {e:?}"));
        let (expected, kinds) = run(&trace, &mut core);
        for &kind in &engines {
            let mut engine = RedisEngine::new(&url, kind, &trace.config, trace.start)
                .unwrap_or_else(|e| panic!("seed {seed} {kind:?}: {e}"));
            engine.read_back_state(true);
            let (got, _) = run(&trace, &mut engine);
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
        for ((&(t, _), (answer, _)), kind) in trace.steps.iter().zip(&expected).zip(&kinds) {
            backward += u64::from(t < last);
            last = last.max(t);
            match answer {
                Ok(Answer::Booked { .. }) => booked += 1,
                Ok(Answer::Admitted { path: "booked", .. }) => redeemed += 1,
                Ok(Answer::Released { refunded: true }) => released += 1,
                _ => {}
            }
            match kind {
                Step::ReleaseAfterRedemption => released_after += 1,
                Step::SpentBookingAgain => spent_again += 1,
                Step::Other => {}
            }
        }
        strict += u64::from(trace.config.release_policy == ReleasePolicy::Strict);
        steps += expected.len() as u64;
        agreed += 1;
    }
    println!(
        "differential: {agreed} of {traces} traces agree on core, module, script and function \
         ({steps} steps each; {backward} steps behind the latest clock reading, {booked} bookings, \
         {redeemed} redeemed, {released_after} of them released, {spent_again} redeemed bookings \
         presented again, {released} refunds, \
         {strict} strict traces)"
    );
    assert_eq!(agreed, traces);
    if traces >= 100 {
        assert!(backward > 0 && booked > 0 && released > 0 && strict > 0);
        assert!(redeemed > 0 && released_after > 0 && spent_again > 0);
    }
}

// ---------------------------------------------------------------------------
// Adaptive buckets (SPEC §14): `ADAPT floor ceiling` and `PACER.OBSERVE`.
// The engines of pacer_cli know neither, so these traces are driven here
// with raw commands. The three Redis engines must give byte-identical
// replies and leave byte-identical keys (each engine has its own database,
// the same key name and, after creation, the same secret), and the module's
// answers and the bucket it stores must be the core's: the answers of a
// `Pacer` with the same configuration and its state and control word.

#[derive(Clone, Copy, Debug)]
enum AdaptiveOp {
    Reserve,
    Book(u32),
    Release(u64),
    Redeem(u64),
    Observe(Upstream),
    /// An observation at a clock no engine accepts (`AT` past 2^52, up to
    /// u64::MAX): the same error everywhere, nothing changed.
    ObserveBeyond(Upstream, u64),
    Info,
    /// Sends the `n`-th spent ticket or booking text (released, or a
    /// booking redeemed) again: redeemed when `true`, else released.
    Again(u64, bool),
}

#[derive(Clone, Debug)]
struct AdaptiveTrace {
    config: Config,
    /// `ADAPT floor ceiling` as sent (`None`: not sent).
    adapt: Option<(u32, u32)>,
    start: u64,
    steps: Vec<(u64, AdaptiveOp)>,
}

fn adaptive_trace(seed: u64) -> AdaptiveTrace {
    let mut rng = SplitMix64::new(seed ^ 0xada9_7ade);
    let mut config = config(&mut rng);
    let rate = config.rate_per_min;
    let adapt = if rate == 0 || rng.below(8) == 0 {
        // Fixed-rate: OBSERVE writes nothing and answers the rate.
        match rng.below(3) {
            0 => None,
            1 => Some((0, 0)),
            _ => Some((0, rng.below(601) as u32)),
        }
    } else {
        let floor = match rng.below(4) {
            0 => 1,
            1 => rate,
            2 => rate.div_ceil(2),
            _ => 1 + rng.below(u64::from(rate)) as u32,
        };
        let ceiling = match rng.below(4) {
            0 => 0,
            1 => rate,
            2 => 600,
            _ => rate + rng.below(u64::from(601 - rate)) as u32,
        };
        Some((floor, ceiling))
    };
    if let Some((floor, ceiling)) = adapt {
        config = config.adaptive(floor, ceiling);
    }
    let start = first_clock(&mut rng, 30_000_000);
    let mut t = start;
    // Some traces mostly count openings (a probe's count rising past its
    // limit needs more than L + L/8 + 1 of them in a minute).
    let opens = rng.below(4) == 0;
    let steps = (0..1 + rng.below(60))
        .map(|_| {
            // Clock jumps within a minute (the counting window), of up to
            // minutes (the search doubles every 5 s or 20 s, the hold is a
            // minute, the probe moves over minutes), now and then hours
            // (past the probe's wait), back, and hostile readings: 0, the
            // largest accepted (2^52 − 1).
            t = match rng.below(16) {
                0 => t.saturating_sub(rng.below(120_000)),
                1 | 2 => t,
                3 => t + rng.below(100),
                4 | 5 => t + rng.below(300_000),
                6 => t + rng.below(30_000_000),
                7 if rng.below(8) == 0 => 0,
                8 if rng.below(8) == 0 => LIMIT - 1,
                _ => t + rng.below(if opens { 1_500 } else { 5_000 }),
            }
            .min(LIMIT - 1);
            let op = match rng.below(if opens { 20 } else { 15 }) {
                0..=2 => AdaptiveOp::Reserve,
                3..=4 => AdaptiveOp::Book(rng.below(u64::from(config.max_retries) + 3) as u32),
                5 => AdaptiveOp::Release(rng.next_u64()),
                6 if rng.below(3) == 0 => AdaptiveOp::Again(rng.next_u64(), rng.below(2) == 0),
                6 => AdaptiveOp::Redeem(rng.next_u64()),
                7..=9 => AdaptiveOp::Observe(Upstream::Throttled),
                10 if rng.below(4) == 0 => {
                    let outcome = pick(&mut rng, &[Upstream::Opened, Upstream::Throttled]);
                    AdaptiveOp::ObserveBeyond(outcome, pick(&mut rng, &[LIMIT, u64::MAX]))
                }
                10..=12 => AdaptiveOp::Observe(Upstream::Opened),
                13 => AdaptiveOp::Info,
                _ => AdaptiveOp::Observe(Upstream::Opened),
            };
            (t, op)
        })
        .collect();
    AdaptiveTrace {
        config,
        adapt,
        start,
        steps,
    }
}

/// A reply, or the error's text.
type Reply = Result<Value, String>;

fn text_of(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn int_of(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Ticket and booking strings by the numbers pacer_cli's engines give
/// them: 1, 2, 3 … as issued; a redeemed booking's admission takes the
/// booking's number (its ticket replaces the booking's string in
/// `tickets`; `bookings` keeps the booking's).
#[derive(Default)]
struct Numbered {
    tickets: HashMap<u64, String>,
    bookings: HashMap<u64, String>,
    issued: u64,
}

impl Numbered {
    fn number(&mut self, text: String) -> u64 {
        self.issued += 1;
        self.tickets.insert(self.issued, text);
        self.issued
    }
}

/// A reply of RESERVE, BOOK, REDEEM or RELEASE as pacer_cli's `Answer`;
/// ticket strings are numbered in `numbered` (a redemption's under the
/// booking's number, `redeemed`).
fn answer_of(reply: &Value, numbered: &mut Numbered, redeemed: Option<u64>) -> Answer {
    let items = match reply {
        Value::Int(refunded) => {
            return Answer::Released {
                refunded: *refunded == 1,
            }
        }
        Value::Array(items) => items,
        other => panic!("unexpected reply {other:?}"),
    };
    let mut ticket = |value: &Value| -> Option<u64> {
        match (value, redeemed) {
            (Value::Nil, _) => None,
            (value, Some(n)) => {
                numbered.tickets.insert(n, text_of(value));
                Some(n)
            }
            (value, None) => Some(numbered.number(text_of(value))),
        }
    };
    let path = |value: &Value| -> &'static str {
        let name = text_of(value);
        ["disabled", "paced", "shaped", "overflow", "booked"]
            .into_iter()
            .find(|p| *p == name)
            .unwrap_or_else(|| panic!("unknown path {name}"))
    };
    match text_of(&items[0]).as_str() {
        "admitted" => Answer::Admitted {
            wait_ms: int_of(&items[1]) as u64,
            ticket: ticket(&items[2]),
            path: path(&items[3]),
            clock_regressed: int_of(&items[4]) == 1,
        },
        "refused" => Answer::Refused {
            retry_after_s: int_of(&items[1]) as u64,
            required_wait_ms: int_of(&items[2]) as u64,
            clock_regressed: int_of(&items[3]) == 1,
        },
        "booked" => {
            let booking = ticket(&items[2]).expect("a booking");
            numbered.bookings.insert(booking, text_of(&items[2]));
            Answer::Booked {
                retry_after_s: int_of(&items[1]) as u64,
                booking,
                slot_ms: int_of(&items[3]) as u64,
                clock_regressed: int_of(&items[4]) == 1,
            }
        }
        "notyet" => Answer::NotYet {
            retry_after_s: int_of(&items[1]) as u64,
        },
        other => panic!("unknown reply {other}"),
    }
}

/// INFO's pairs by name.
fn info_map(reply: &Value) -> HashMap<String, Value> {
    let Value::Array(items) = reply else {
        panic!("INFO: {reply:?}")
    };
    items
        .chunks(2)
        .map(|pair| (text_of(&pair[0]), pair[1].clone()))
        .collect()
}

/// One engine's door to its database.
struct Door {
    kind: RedisKind,
    con: redis::Connection,
    /// The script's SHA1 or the function's name.
    entry: String,
}

impl Door {
    /// The module's, the script's and the function's doors, each to its
    /// own database (1, 2, 3).
    fn all(server: &common::Server) -> Vec<Door> {
        [RedisKind::Module, RedisKind::Script, RedisKind::Function]
            .into_iter()
            .zip(1..)
            .map(|(kind, db)| Door::open(server, kind, db))
            .collect()
    }

    fn open(server: &common::Server, kind: RedisKind, db: i64) -> Door {
        let mut con = server.connect();
        redis::cmd("SELECT")
            .arg(db)
            .query::<()>(&mut con)
            .expect("SELECT");
        let entry = match kind {
            RedisKind::Module => String::new(),
            RedisKind::Script => common::load_script(&mut con, &common::test_clock_script()),
            RedisKind::Function => common::load_function(&mut con, "pacer_adaptive"),
        };
        Door { kind, con, entry }
    }

    /// `op` on `key` with `args`, then the key's bytes, in one round trip.
    fn call(&mut self, key: &str, op: &str, args: &[String]) -> (Reply, Value) {
        let mut cmd = match self.kind {
            RedisKind::Module => redis::cmd(&format!("PACER.{}", op.to_uppercase())),
            RedisKind::Script => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&self.entry).arg(1);
                cmd
            }
            RedisKind::Function => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg(&self.entry).arg(1);
                cmd
            }
        };
        cmd.arg(key);
        if self.kind != RedisKind::Module {
            cmd.arg(op);
        }
        for arg in args {
            cmd.arg(arg);
        }
        let mut get = redis::cmd("GET");
        get.arg(key);
        let replies: Vec<Value> = redis::pipe()
            .add_command(cmd)
            .add_command(get)
            .ignore_errors()
            .query(&mut self.con)
            .expect("pipeline");
        let reply = match &replies[0] {
            Value::ServerError(e) => Err(format!("{} {}", e.code(), e.details().unwrap_or(""))),
            value => Ok(value.clone()),
        };
        (reply, replies[1].clone())
    }
}

/// The configuration arguments (and retries_left for BOOK), ADAPT, AT.
fn adaptive_args(trace: &AdaptiveTrace, retries_left: Option<u32>, t: u64) -> Vec<String> {
    let c = &trace.config;
    let mut args = vec![
        c.rate_per_min.to_string(),
        c.burst.to_string(),
        c.idle_timeout_ms.to_string(),
        c.max_retries.to_string(),
        c.release_policy.name().to_string(),
    ];
    args.extend(retries_left.map(|r| r.to_string()));
    if let Some((floor, ceiling)) = trace.adapt {
        args.extend(["ADAPT".to_string(), floor.to_string(), ceiling.to_string()]);
    }
    args.extend(["AT".to_string(), t.to_string()]);
    args
}

#[derive(Default)]
struct Covered {
    steps: u64,
    /// Throttles that started a probe (ending a search or a probe).
    decreases: u64,
    /// Throttles within a probe's hold (nothing changed).
    holds: u64,
    /// Openings counted without a change of law.
    counted: u64,
    /// Openings that showed a rise: a search again.
    rises: u64,
    /// Probes (and searches) that count across a minute's end.
    rolled: u64,
    /// Observations at a clock no engine accepts.
    beyond: u64,
    observed_fixed: u64,
    rate_changes: u64,
    at_floor: u64,
    above_start: u64,
    mode_changes: u64,
    spent_again: u64,
    /// Admissions after a wait, and how many fell in each wait bucket.
    waited: u64,
    wait_buckets: [u64; WAIT_BOUNDS_MS.len()],
    /// Admissions by the shaping rule, and redemptions that admitted.
    shaped: u64,
    redeemed: u64,
    /// Observations the second block counted.
    outcomes_counted: u64,
}

/// The core's counters of one admission the core answered (its path by
/// name): the independent model of the key's second block.
fn record_admission(counters: &Counters, answer: &Answer) {
    let Answer::Admitted {
        wait_ms,
        path,
        clock_regressed,
        ..
    } = *answer
    else {
        return;
    };
    let path = match path {
        "paced" => AdmitPath::Paced,
        "shaped" => AdmitPath::Shaped,
        "overflow" => AdmitPath::Overflow,
        "disabled" => AdmitPath::Disabled,
        "booked" => AdmitPath::Booked,
        other => panic!("path {other}"),
    };
    counters.record(&Decision::Admitted(Admission {
        wait_ms,
        ticket: None,
        path,
        clock_regressed,
    }));
}

/// The key's second block as the core's counters say it should be
/// (docs/redis.md "The key": admitted_after_wait, shaped, redeemed,
/// upstream_opened, upstream_throttled, wait_ms_total, the wait buckets).
/// The key saturates at 2^52 − 1 where the core wraps; no trace gets near.
fn second_block(s: &CounterSnapshot) -> Vec<u64> {
    let mut v = vec![
        s.admitted_after_wait,
        s.shaped,
        s.redeemed,
        s.opened,
        s.throttled,
        s.wait_ms_total,
    ];
    v.extend_from_slice(&s.wait_buckets);
    v
}

#[test]
fn adaptive_buckets_agree_on_every_engine_and_with_the_core() {
    let traces: u64 = env_number("PACER_DIFFERENTIAL_ADAPTIVE_TRACES", 10_000);
    let first: u64 = env_number("PACER_DIFFERENTIAL_SEED", 1);
    let server = common::Server::with_module();
    let mut doors = Door::all(&server);
    let mut covered = Covered::default();
    for seed in first..first + traces {
        let trace = adaptive_trace(seed);
        let key = format!("adaptive:{seed}");
        let context = |i: usize| format!("seed {seed}, step {i} of {trace:?}");
        let mut core = CoreEngine::new(&trace.config, trace.start)
            .unwrap_or_else(|e| panic!("seed {seed}: an invalid config: {e:?}"));
        // Created by each engine: the same header but for the secret
        // (bytes 41–56); then every engine gets the module's bytes.
        let create = adaptive_args(&trace, None, trace.start);
        let mut created: Vec<Vec<u8>> = Vec::new();
        for door in &mut doors {
            let (reply, bytes) = door.call(&key, "create", &create);
            assert_eq!(reply, Ok(Value::Int(1)), "seed {seed} {:?}", door.kind);
            let Value::BulkString(mut bytes) = bytes else {
                panic!("seed {seed}: no key")
            };
            bytes[41..57].copy_from_slice(b"0000000000000000");
            created.push(bytes);
        }
        assert!(
            created.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: {created:?}"
        );
        let module_bytes: Vec<u8> = redis::cmd("GET")
            .arg(&key)
            .query(&mut doors[0].con)
            .expect("GET");
        for door in &mut doors[1..] {
            redis::cmd("SET")
                .arg(&key)
                .arg(&module_bytes)
                .query::<()>(&mut door.con)
                .expect("SET");
        }
        let mut held: Vec<u64> = Vec::new();
        let mut bookings: Vec<u64> = Vec::new();
        let mut numbered = Numbered::default();
        // Texts the bucket has spent: released tickets, redeemed bookings.
        let mut spent: Vec<String> = Vec::new();
        let mut last_rate = core.pacer().params_in_force(trace.start).rate_per_min();
        let mut last_mode = core.pacer().params_in_force(trace.start).mode();
        // The model of the second block: the core's own counters, fed the
        // core's answers (and every upstream answer observed while the
        // core adapts, as a client with adaptation on records each).
        let counters = Counters::new();
        let planned = Params::plan(&trace.config).expect("a valid config");
        for (i, &(t, op)) in trace.steps.iter().enumerate() {
            // The op as sent, and the core's answer to it.
            let mut redeemed = None;
            let (name, args, expected): (&str, Vec<String>, Option<Answer>) = match op {
                AdaptiveOp::Reserve => (
                    "reserve",
                    adaptive_args(&trace, None, t),
                    Some(core.reserve(t).unwrap()),
                ),
                AdaptiveOp::Book(retries) => (
                    "book",
                    adaptive_args(&trace, Some(retries), t),
                    Some(core.book(t, retries).unwrap()),
                ),
                AdaptiveOp::Release(n) if !held.is_empty() => {
                    let id = held.remove((n % held.len() as u64) as usize);
                    bookings.retain(|b| *b != id);
                    let text = numbered.tickets[&id].clone();
                    spent.push(text.clone());
                    let args = vec![text, "AT".into(), t.to_string()];
                    ("release", args, Some(core.release(id, t).unwrap()))
                }
                AdaptiveOp::Redeem(n) if !bookings.is_empty() => {
                    let id = bookings[(n % bookings.len() as u64) as usize];
                    let answer = core.redeem(id, t).unwrap();
                    let text = numbered.bookings[&id].clone();
                    if let Answer::Admitted { .. } = answer {
                        bookings.retain(|b| *b != id);
                        spent.push(text.clone());
                    }
                    redeemed = Some(id);
                    let args = vec![text, "AT".into(), t.to_string()];
                    ("redeem", args, Some(answer))
                }
                AdaptiveOp::Again(n, redeem) if !spent.is_empty() => {
                    let text = spent[(n % spent.len() as u64) as usize].clone();
                    let args = vec![text, "AT".into(), t.to_string()];
                    (if redeem { "redeem" } else { "release" }, args, None)
                }
                AdaptiveOp::Observe(outcome) => {
                    let args = vec![outcome.name().to_string(), "AT".into(), t.to_string()];
                    ("observe", args, None)
                }
                AdaptiveOp::ObserveBeyond(outcome, at) => {
                    let args = vec![outcome.name().to_string(), "AT".into(), at.to_string()];
                    ("observe", args, None)
                }
                AdaptiveOp::Release(_)
                | AdaptiveOp::Redeem(_)
                | AdaptiveOp::Again(..)
                | AdaptiveOp::Info => ("info", vec!["AT".into(), t.to_string()], None),
            };
            let before = core.pacer().control();
            if let AdaptiveOp::Observe(outcome) = op {
                // docs/redis.md: OBSERVE counts every answer when
                // adaptation is on (the core's counters record every
                // observe a client sends; a client sends none with it off:
                // a fixed-rate bucket, or pacing disabled), a throttle
                // within the hold too.
                if planned.is_adaptive() && planned.mode() != Mode::Disabled {
                    counters.record_outcome(outcome);
                    covered.outcomes_counted += 1;
                }
            }
            let observed = match op {
                AdaptiveOp::Observe(outcome) => Some(core.pacer().observe(outcome, t)),
                _ => None,
            };
            let results: Vec<(Reply, Value)> = doors
                .iter_mut()
                .map(|d| d.call(&key, name, &args))
                .collect();
            for (door, result) in doors.iter().zip(&results).skip(1) {
                assert_eq!(
                    &results[0],
                    result,
                    "{}: the module and the {:?} differ ({name} {args:?})",
                    context(i),
                    door.kind
                );
            }
            let (reply, bytes) = &results[0];
            if let AdaptiveOp::ObserveBeyond(_, at) = op {
                let expected =
                    format!("ERR pacer: AT must be a whole number below 2^52, got '{at}'");
                assert_eq!(reply, &Err(expected), "{}", context(i));
                covered.beyond += 1;
            }
            let beyond = matches!(op, AdaptiveOp::ObserveBeyond(..));
            let again = matches!(op, AdaptiveOp::Again(..)) && name != "info";
            if again {
                // docs/redis.md "Tickets": spent, whatever the op; nothing
                // changes (the state is compared with the core's below).
                assert_eq!(
                    reply,
                    &Err("ERR pacer: ticket already released".to_string()),
                    "{}: {name} {args:?}",
                    context(i)
                );
                covered.spent_again += 1;
            }
            // (An error answers nothing more below: no answer is expected.)
            let reply = match reply {
                Err(_) if again || beyond => &Value::Nil,
                reply => reply
                    .as_ref()
                    .unwrap_or_else(|e| panic!("{}: {name} {args:?}: {e}", context(i))),
            };
            // The module against the core.
            if let Some(expected) = expected {
                let got = answer_of(reply, &mut numbered, redeemed);
                assert_eq!(got, expected, "{}: {name} {args:?}", context(i));
                record_admission(&counters, &expected);
                match got {
                    Answer::Admitted {
                        ticket: Some(id), ..
                    } if !held.contains(&id) => held.push(id),
                    Answer::Booked { booking, .. } => {
                        held.push(booking);
                        bookings.push(booking);
                    }
                    _ => {}
                }
            }
            if let Some(rate) = observed {
                assert_eq!(reply, &Value::Int(i64::from(rate)), "{}", context(i));
                let after = core.pacer().control();
                let throttled = matches!(op, AdaptiveOp::Observe(Upstream::Throttled));
                if trace.config.adaptive_floor_per_min == 0 {
                    covered.observed_fixed += 1;
                } else if throttled && after == before && before.probing {
                    covered.holds += 1;
                } else if throttled && after.probing && after.origin_ms >= before.origin_ms {
                    covered.decreases += 1;
                } else if !throttled && before.probing && !after.probing {
                    covered.rises += 1;
                } else if !throttled {
                    covered.counted += 1;
                    covered.rolled += u64::from(after.window > before.window);
                }
            }
            let in_force = core.pacer().params_in_force(t);
            if name == "info" {
                let info = info_map(reply);
                let level = in_force.level_at(&core.pacer().state(), t);
                assert_eq!(
                    (
                        &info["rate_in_force"],
                        &info["mode"],
                        &info["max_debt_units"],
                        &info["level_units"]
                    ),
                    (
                        &Value::Int(i64::from(in_force.rate_per_min())),
                        &Value::BulkString(in_force.mode().name().as_bytes().to_vec()),
                        &Value::Int(in_force.max_debt_units()),
                        &Value::Int(level)
                    ),
                    "{}",
                    context(i)
                );
            }
            let Value::BulkString(bytes) = bytes else {
                panic!("{}: no key", context(i))
            };
            let header = Header::decode(bytes)
                .unwrap_or_else(|| panic!("{}: not a bucket after {name}", context(i)));
            let state = core.pacer().state();
            assert_eq!(header.state, state, "{}: state after {name}", context(i));
            let control = trace
                .config
                .adaptive_floor_per_min
                .gt(&0)
                .then(|| core.pacer().control());
            assert_eq!(
                header.control,
                control,
                "{}: control after {name}",
                context(i)
            );
            let model = counters.snapshot();
            assert_eq!(
                header.more.to_vec(),
                second_block(&model),
                "{}: the second block after {name}",
                context(i)
            );
            assert_eq!(
                header.counters[0],
                model.admitted,
                "{}: admitted after {name}",
                context(i)
            );
            let rate = in_force.rate_per_min();
            covered.rate_changes += u64::from(rate != last_rate);
            covered.mode_changes += u64::from(in_force.mode() != last_mode);
            covered.at_floor +=
                u64::from(control.is_some() && rate == trace.config.adaptive_floor_per_min);
            covered.above_start += u64::from(control.is_some() && rate > trace.config.rate_per_min);
            last_rate = rate;
            last_mode = in_force.mode();
            covered.steps += 1;
        }
        let model = counters.snapshot();
        covered.waited += model.admitted_after_wait;
        for (sum, n) in covered.wait_buckets.iter_mut().zip(model.wait_buckets) {
            *sum += n;
        }
        covered.shaped += model.shaped;
        covered.redeemed += model.redeemed;
    }
    println!(
        "differential (adaptive): {traces} traces, {} steps agree on module, script, function \
         and core ({} throttles that started a probe, {} held throttles, {} openings counted \
         ({} in a later minute), {} rises, {} observations past 2^52, {} observations of \
         fixed-rate buckets; the rate in force changed {} times, was at the floor {} times, \
         above the configured rate {} times; the mode changed {} times; {} spent tickets or \
         bookings sent again)",
        covered.steps,
        covered.decreases,
        covered.holds,
        covered.counted,
        covered.rolled,
        covered.rises,
        covered.beyond,
        covered.observed_fixed,
        covered.rate_changes,
        covered.at_floor,
        covered.above_start,
        covered.mode_changes,
        covered.spent_again
    );
    println!(
        "differential (adaptive): the second block agreed with the core's counters: {} \
         admissions after a wait (by bucket {:?}), {} shaped, {} redeemed, {} upstream answers \
         counted",
        covered.waited,
        covered.wait_buckets,
        covered.shaped,
        covered.redeemed,
        covered.outcomes_counted
    );
    if traces >= 100 {
        assert!(covered.waited > 0 && covered.redeemed > 0 && covered.outcomes_counted > 0);
        assert!(covered.decreases > 0 && covered.holds > 0 && covered.observed_fixed > 0);
        assert!(covered.counted > 0 && covered.rolled > 0 && covered.rises > 0);
        assert!(covered.beyond > 0);
        assert!(covered.rate_changes > 0 && covered.at_floor > 0 && covered.above_start > 0);
        assert!(covered.spent_again > 0);
        // The law never sets a rate below the lowest that can refuse (nor
        // above a ceiling below it), so an adaptive bucket keeps its mode.
        assert_eq!(covered.mode_changes, 0);
    }
}

// ---------------------------------------------------------------------------
// Past the ring: a trace of more than 65,536 tickets, each engine on its own
// copy of one bucket, and the whole key (header and bitmap, `GET`) the same
// on every engine at every checkpoint. Issuing serial s ≥ 65536 clears bit
// s mod 65536 as SETBIT does (growing the key past its end); releases set
// bits; tickets older than the ring expire.

impl Door {
    /// `calls` (op, arguments) on `key` in one pipeline, then `GET key`:
    /// every reply (an error as its text) and the key's bytes.
    fn batch(&mut self, key: &str, calls: &[(&str, Vec<String>)]) -> (Vec<Reply>, Value) {
        let mut pipe = redis::pipe();
        for (op, args) in calls {
            match self.kind {
                RedisKind::Module => pipe.cmd(&format!("PACER.{}", op.to_uppercase())),
                RedisKind::Script => pipe.cmd("EVALSHA").arg(&self.entry).arg(1),
                RedisKind::Function => pipe.cmd("FCALL").arg(&self.entry).arg(1),
            };
            pipe.arg(key);
            if self.kind != RedisKind::Module {
                pipe.arg(*op);
            }
            for arg in args {
                pipe.arg(arg);
            }
        }
        pipe.cmd("GET").arg(key);
        let mut replies: Vec<Value> = pipe.ignore_errors().query(&mut self.con).expect("pipeline");
        let bytes = replies.pop().expect("GET");
        let replies = replies
            .into_iter()
            .map(|value| match value {
                Value::ServerError(e) => Err(format!("{} {}", e.code(), e.details().unwrap_or(""))),
                value => Ok(value),
            })
            .collect();
        (replies, bytes)
    }
}

#[test]
fn keys_stay_byte_identical_past_65536_tickets() {
    let steps: u64 = env_number("PACER_DIFFERENTIAL_RING_STEPS", 100_000);
    let server = common::Server::with_module();
    let mut doors = Door::all(&server);
    // Rate 600 (10 units a ms), burst 10, idle 120000, 5 retries: bound
    // 4833 ms, refusing. Mostly 120 ms apart (a token and a fifth refilled
    // a step): nearly every request admitted with a ticket; now and then a
    // dry spell 0–3 ms apart that queues, books and refuses. Releases and
    // redemptions (which set bits) come only before ticket 1000 and after
    // ticket 68000: in between the bitmap stays short, so the serials past
    // 65536 clear bits past the key's end.
    let config: Vec<String> = ["600", "10", "120000", "5", "refund"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let key = "ring";
    let at = |t: u64| vec!["AT".to_string(), t.to_string()];
    let create = [config.clone(), at(0)].concat();
    module_create(&mut doors, key, &create);
    let mut rng = SplitMix64::new(0x51ab_0001);
    let (mut t, mut done) = (0u64, 0u64);
    // Every ticket and booking text the module answered, in order.
    let mut issued: Vec<String> = Vec::new();
    let mut bookings: Vec<String> = Vec::new();
    let (mut checkpoints, mut errors, mut booked, mut redeemed) = (0u64, 0u64, 0u64, 0u64);
    let mut dry = false;
    while done < steps {
        // One chunk: its calls are chosen from what the module answered
        // before it, so every engine gets the same calls.
        let mut calls: Vec<(&str, Vec<String>)> = Vec::new();
        let spent_now = issued.len() < 1000 || issued.len() > 68_000;
        for _ in 0..500 {
            // Dry spells of about 20 steps, about one in 300.
            if rng.below(if dry { 20 } else { 300 }) == 0 {
                dry = !dry;
            }
            t += if dry { rng.below(4) } else { 120 };
            let call = match rng.below(20) {
                0..=1 if spent_now && !issued.is_empty() => {
                    // Any ticket so far: live, spent or expired.
                    let n = rng.below(issued.len() as u64) as usize;
                    ("release", [vec![issued[n].clone()], at(t)].concat())
                }
                2 if spent_now && !bookings.is_empty() => {
                    let n = rng.below(bookings.len() as u64) as usize;
                    ("redeem", [vec![bookings[n].clone()], at(t)].concat())
                }
                3..=5 => ("book", [config.clone(), vec!["5".into()], at(t)].concat()),
                _ => ("reserve", [config.clone(), at(t)].concat()),
            };
            calls.push(call);
        }
        let results: Vec<(Vec<Reply>, Value)> =
            doors.iter_mut().map(|d| d.batch(key, &calls)).collect();
        for (door, result) in doors.iter().zip(&results).skip(1) {
            for (i, (want, have)) in results[0].0.iter().zip(&result.0).enumerate() {
                assert_eq!(
                    want,
                    have,
                    "step {}: {:?} {:?}: the module and the {:?} differ",
                    done + i as u64,
                    calls[i].0,
                    calls[i].1,
                    door.kind
                );
            }
            assert_eq!(
                results[0].1,
                result.1,
                "after step {}: the module's key and the {:?}'s differ",
                done + calls.len() as u64,
                door.kind
            );
        }
        checkpoints += 1;
        for reply in &results[0].0 {
            match reply {
                Ok(Value::Array(items)) => match (text_of(&items[0]).as_str(), &items[2]) {
                    ("booked", booking) => {
                        booked += 1;
                        bookings.push(text_of(booking));
                        issued.push(text_of(booking));
                    }
                    ("admitted", Value::BulkString(_)) => {
                        redeemed += u64::from(text_of(&items[3]) == "booked");
                        issued.push(text_of(&items[2]));
                    }
                    _ => {}
                },
                Err(_) => errors += 1,
                _ => {}
            }
        }
        done += calls.len() as u64;
    }
    let Value::BulkString(bytes) = &doors_get(&mut doors[0], key) else {
        panic!("no bucket")
    };
    let header = Header::decode(bytes).expect("a bucket");
    println!(
        "differential (past the ring): {done} steps, {} tickets and bookings issued, \
         {booked} bookings, {redeemed} redeemed, {errors} error answers; the whole key \
         ({} bytes) the same on module, script and function at {checkpoints} checkpoints",
        header.serial,
        bytes.len()
    );
    if steps >= 100_000 {
        assert!(header.serial > 69_000, "past the ring: {}", header.serial);
        assert!(booked > 0 && redeemed > 0 && errors > 0);
    }
}

/// `PACER.CREATE` by the module in its database, and its bytes (the same
/// secret) copied into the others'.
fn module_create(doors: &mut [Door], key: &str, args: &[String]) {
    let (reply, bytes) = doors[0].call(key, "create", args);
    assert_eq!(reply, Ok(Value::Int(1)));
    let Value::BulkString(bytes) = bytes else {
        panic!("no bucket: {bytes:?}")
    };
    for door in &mut doors[1..] {
        redis::cmd("SET")
            .arg(key)
            .arg(&bytes)
            .query::<()>(&mut door.con)
            .expect("SET");
    }
}

fn doors_get(door: &mut Door, key: &str) -> Value {
    redis::cmd("GET")
        .arg(key)
        .query(&mut door.con)
        .expect("GET")
}
