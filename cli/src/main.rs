//! `pacer`: simulate, check, replay and explain the pacing core.
//! Usage: `pacer --help`; the replay format is in `cli/README.md`.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{error::ErrorKind, Args, Parser, Subcommand, ValueEnum};
use pacer_cli::engine::RedisKind;
use pacer_cli::matrix::{self, Fault, MatrixOptions};
use pacer_cli::redis_target::Target;
use pacer_cli::sim::{
    self, Arrivals, Design, Load, OnRefusal, SimConfig, UpstreamKind, UpstreamModel, MAX_AGENTS,
    MAX_LIMIT_CHANGES, MAX_MACHINES, MAX_MS, MAX_OFFERED_PER_MIN,
};
use pacer_cli::{advice, explain, grid, plot, progress, replay, sweep, upstream_sweep};
use pacer_core::MAX_BURST;
use pacer_core::{resolve, ReleasePolicy, Settings};

#[derive(Parser, Debug)]
#[command(
    name = "pacer",
    version,
    about = "Simulate, check, replay and explain the new-connection pacer",
    after_help = "\"SPEC §N\" in this help and in the reports is section N of docs/spec.md, \
                  the contract the pacer keeps."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Simulate agents (closed loop) or offered load (open loop) through the
    /// pacer and the SDK client's retry rule, on a virtual clock.
    Simulate(Box<SimulateArgs>),
    /// Check the design record's reviewer matrix (SPEC §6.4, §6.5), or with
    /// --exhaustive the §3 inequalities over every resolvable budget.
    Matrix(MatrixArgs),
    /// Drive the core from JSON lines (file or stdin), one JSON line out per
    /// operation; see cli/README.md for the format.
    Replay(ReplayArgs),
    /// Resolve the settings (NAME=value arguments over the environment) and
    /// show the budget, bound, hint cap, schedule, notices and §3 check.
    Explain(ExplainArgs),
    /// Send reserves to a fleet bucket in Redis at a steady pace and print
    /// each answer as a JSON line with its send and reply times (load for
    /// checking the window bound across clients; tests/fleet).
    Hammer(HammerArgs),
    /// Show what a bucket is doing, refreshed every interval, read without
    /// writing to it: a shared-memory bucket (--shared) or a fleet bucket
    /// in Redis (--redis, --key); --prometheus serves it as /metrics.
    Watch(WatchArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DesignArg {
    /// This design (the core's pacer).
    Paced,
    /// The rejected design: past the bound, wait the bound, open anyway.
    AdmitAnyway,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    Refund,
    Strict,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ArrivalsArg {
    /// Evenly spaced: request k at floor(k · interval).
    Periodic,
    /// Exponential gaps with the same mean (seeded).
    Poisson,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OnRefusalArg {
    /// Retry on the hint per the SDK rule, within the retry count.
    Retry,
    /// Give up at once (the design record's sustained-overload test).
    Drop,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum UpstreamModelArg {
    /// At most T new connections in any 60 s.
    Sliding,
    /// At most T new connections in each calendar minute of virtual time.
    FixedMinute,
    /// A bucket of --upstream-burst connections, refilled at T a minute.
    TokenBucket,
}

#[derive(Args, Debug)]
struct SimulateArgs {
    /// Closed loop: agents, each running one turn at a time (on each
    /// machine, with --machines).
    #[arg(long, default_value_t = 20, conflicts_with_all = ["offered_per_min", "offered_every_ms"],
          value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_AGENTS)))]
    agents: u32,
    /// Open loop: new requests per minute, whatever happens to earlier ones
    /// (on each machine, with --machines).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_OFFERED_PER_MIN), conflicts_with = "offered_every_ms")]
    offered_per_min: Option<u64>,
    /// Open loop: one new request every this many ms (on each machine).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_MS))]
    offered_every_ms: Option<u64>,
    /// Open loop: arrival pattern [default: periodic].
    #[arg(long, value_enum)]
    arrivals: Option<ArrivalsArg>,
    /// Open loop: what a refused request does [default: retry].
    #[arg(long, value_enum)]
    on_refusal: Option<OnRefusalArg>,
    /// New connections per minute (0 = unpaced; above 600 clamps, with a notice).
    #[arg(long, allow_negative_numbers = true)]
    rate: Option<u64>,
    /// Connections admitted with no wait after idle.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_BURST)))]
    burst: u32,
    /// No-data deadline shared by all attempts of a request, ms.
    #[arg(long, allow_negative_numbers = true)]
    idle_timeout_ms: Option<u64>,
    /// Total deadline of a request, ms.
    #[arg(long, allow_negative_numbers = true)]
    total_timeout_ms: Option<u64>,
    /// The client's retry count (clamped to the ladder ceiling).
    #[arg(long, allow_negative_numbers = true)]
    max_retries: Option<u64>,
    /// What releasing a ticket refunds.
    #[arg(long, value_enum, default_value_t = PolicyArg::Refund)]
    release_policy: PolicyArg,
    /// Which admission design to simulate.
    #[arg(long, value_enum, default_value_t = DesignArg::Paced)]
    design: DesignArg,
    /// Turn length from connection open to the end of the turn, ms.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(0..=MAX_MS))]
    turn_ms: u64,
    /// Each turn lasts turn-ms ± this (uniform, seeded), ms. Default: a
    /// third of --turn-ms. 0 makes every turn identical, which puts every
    /// agent's events on the same milliseconds (a degenerate case).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_MS))]
    turn_jitter_ms: Option<u64>,
    /// Time from connection open to the first stream part, ms.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_MS))]
    first_byte_ms: u64,
    /// Closed loop: pause between turns, ms [default: 0].
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_MS))]
    think_ms: Option<u64>,
    /// Closed loop: spread the first turns uniformly over this many ms [default: 0].
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_MS))]
    stagger_ms: Option<u64>,
    /// Virtual run length, ms (no new turn or request starts after it).
    #[arg(long, default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..=MAX_MS))]
    duration_ms: u64,
    /// Seed for jitter, staggering, Poisson arrivals and cancellations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Percent of waiting requests cancelled during their wait (releases).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    cancel_percent: u32,
    /// Book refusals (SPEC §11): a refused request keeps a place in line
    /// for its retry, so overload becomes latency instead of errors.
    #[arg(long, conflicts_with = "compare_booking")]
    booking: bool,
    /// Run the same workload without and with bookings and print both.
    #[arg(long, conflicts_with_all = ["json", "plot"])]
    compare_booking: bool,
    /// How many agents fit: run the closed loop once per agent count in
    /// FROM..TO (both included, at most 1000 counts) and table completed
    /// turns per minute, latency p50/p90 and terminal errors per count.
    #[arg(long, value_name = "FROM..TO", value_parser = agent_range,
          conflicts_with_all = ["agents", "offered_per_min", "offered_every_ms", "compare_booking", "per_minute"])]
    sweep_agents: Option<(u32, u32)>,
    /// Machines (proxies) sharing one upstream account, each with the
    /// whole load (--agents, or --offered-per-min / --offered-every-ms,
    /// per machine). Above 1, runs a bucket per machine and one fleet
    /// bucket shared by all machines (SPEC §12) side by side.
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_MACHINES)))]
    machines: u32,
    /// The upstream's hidden limit: at most this many new connections
    /// open in any 60 s (over every machine); past it the upstream
    /// throttles, and the client retries on its backoff ladder.
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u32).range(1..=60_000))]
    upstream_limit_per_min: Option<u32>,
    /// How the upstream applies its limit T [default: sliding]. Needs
    /// --upstream-limit-per-min or --sweep-upstream.
    #[arg(long, value_enum)]
    upstream_model: Option<UpstreamModelArg>,
    /// --upstream-model token-bucket: the bucket's size, connections
    /// (full at the start) [default: 10].
    #[arg(long, value_name = "N")]
    upstream_burst: Option<u32>,
    /// The upstream's limit changes during the run: from minute M the
    /// limit is T (the sliding window's count, the current minute's count
    /// or the bucket's refill rate is compared with it from then on), at
    /// most 4 changes, minutes increasing.
    #[arg(long, value_name = "M=T,…", value_delimiter = ',', value_parser = limit_change)]
    upstream_limit_at: Option<Vec<(u64, u32)>>,
    /// After a throttle at the limit, the upstream refuses every new
    /// connection for this many ms as well (those refusals are throttles
    /// that do not extend it) [default: 0, off].
    #[arg(long, value_name = "P")]
    upstream_penalty_ms: Option<u64>,
    /// Adaptive pacing (SPEC §14): the pacer sets its rate to what the
    /// upstream let through when it throttles and now and then probes above
    /// it, between --adaptive-floor and --adaptive-ceiling. Needs --upstream-limit-per-min
    /// or --sweep-upstream (only throttles move the rate).
    #[arg(long)]
    adaptive: bool,
    /// Adaptive pacing's lowest rate, per minute [default: 1].
    #[arg(long, requires = "adaptive", value_parser = clap::value_parser!(u32).range(1..=600))]
    adaptive_floor: Option<u32>,
    /// Adaptive pacing's highest rate, per minute [default: the rate].
    #[arg(long, requires = "adaptive", value_parser = clap::value_parser!(u32).range(1..=600))]
    adaptive_ceiling: Option<u32>,
    /// Adaptive pacing against fixed rates (SPEC §14): for each hidden
    /// upstream limit in the list (per minute), run once per --fixed-rates
    /// rate and once adaptive (from --rate, with --adaptive's floor and
    /// ceiling), and table completed turns and upstream throttles. With
    /// --plot, the adaptive runs' rate in force over time.
    #[arg(long, value_name = "T,T,…", value_delimiter = ',', requires = "adaptive",
          value_parser = clap::value_parser!(u32).range(1..=60_000),
          conflicts_with_all = ["upstream_limit_per_min", "sweep_agents", "compare_booking", "per_minute", "machines"])]
    sweep_upstream: Option<Vec<u32>>,
    /// The fixed rates --sweep-upstream compares with, per minute.
    #[arg(long, value_name = "R,R,…", value_delimiter = ',', default_value = "30,60,120",
          requires = "sweep_upstream", value_parser = clap::value_parser!(u32).range(1..=600))]
    fixed_rates: Vec<u32>,
    /// Adaptive pacing on the public grid (SPEC §14; cli/README.md): hidden
    /// limits, start rates, loads, lengths and upstream models, each point
    /// against the best fixed rate; `smoke` runs a few of its points. Exits
    /// 1 when a point misses the goal. Takes the budget, burst, turn
    /// lengths and seed from the other flags.
    #[arg(long, value_name = "SIZE",
          conflicts_with_all = ["adaptive", "upstream_limit_per_min", "sweep_upstream", "sweep_agents",
                                "compare_booking", "per_minute", "machines", "plot"])]
    adaptive_grid: Option<grid::GridSize>,
    /// With --adaptive-grid: judge the rate from this many ms after the
    /// start of each limit rather than the goal's 180000 (a reading of the
    /// grid, said in its last line; 0 to 3600000).
    #[arg(long, value_name = "MS", requires = "adaptive_grid", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u64).range(0..=grid::MAX_SETTLE_MS))]
    grid_settle_ms: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also print the minute-by-minute table (text report only).
    #[arg(long, conflicts_with_all = ["json", "compare_booking"])]
    per_minute: bool,
    /// Write a chart (per minute: offered, attempts, admitted, refused,
    /// terminal errors; turn latency) to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FaultArg {
    OneFewerRetry,
}

#[derive(Args, Debug)]
struct MatrixArgs {
    /// Check the §3 inequalities for every idle value in range × every
    /// retry count × every rate, instead of the 88-combination matrix.
    #[arg(long)]
    exhaustive: bool,
    /// Lowest rate (default 1 for the matrix, 0 with --exhaustive).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=600))]
    rate_min: Option<u32>,
    /// Highest rate.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u32).range(0..=600))]
    rate_max: u32,
    /// --exhaustive: lowest idle timeout, ms.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(10_000..=3_600_000))]
    idle_min: u64,
    /// --exhaustive: highest idle timeout, ms.
    #[arg(long, default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(10_000..=3_600_000))]
    idle_max: u64,
    /// Worker threads (default: the number of cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Break the modelled client on purpose (shows the checker can fail).
    #[arg(long, value_enum, hide = true)]
    fault: Option<FaultArg>,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// Trace file of JSON lines; stdin when absent or "-".
    file: Option<PathBuf>,
    /// Where the bucket lives: the core in this process, or a Redis server
    /// running the module, the script or the script as a function library
    /// (docs/redis.md). The Redis engines drive the server with the trace's
    /// clock (`AT`), so the module must have been loaded for tests
    /// (`--loadmodule libpacer_redis.so test-clock`); this command loads a
    /// test-clock copy of the script (by SHA1) or of the library (as
    /// `pacer_test_clock_<sha>`), never replacing the shipped `pacer`.
    #[arg(long, value_enum, default_value = "core")]
    engine: EngineArg,
    /// The Redis server for `--engine redis-module|redis-script|redis-function`.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379/")]
    redis: String,
    /// --redis names a Redis Cluster: seed node URLs separated by commas.
    #[arg(long)]
    cluster: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum EngineArg {
    /// The core in this process.
    Core,
    /// The Redis module's PACER.* commands.
    RedisModule,
    /// The Lua script, by EVALSHA.
    RedisScript,
    /// The same script as a Redis function library, by FCALL.
    RedisFunction,
}

#[derive(Args, Debug)]
struct HammerArgs {
    /// The Redis server.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379/")]
    redis: String,
    /// --redis names a Redis Cluster: seed node URLs separated by commas.
    #[arg(long)]
    cluster: bool,
    /// The bucket's key.
    #[arg(long)]
    key: String,
    /// How to reach it: the module's PACER.RESERVE, FCALL pacer (the script
    /// loaded as a function library), or EVALSHA of the shipped script.
    #[arg(long, value_enum, default_value = "module")]
    door: DoorArg,
    /// New connections per minute.
    #[arg(long, default_value_t = pacer_core::Config::DEFAULT.rate_per_min)]
    rate_per_min: u32,
    /// Connections that open with no wait after an idle spell.
    #[arg(long, default_value_t = pacer_core::Config::DEFAULT.burst)]
    burst: u32,
    /// The request's no-data deadline, ms.
    #[arg(long, default_value_t = pacer_core::Config::DEFAULT.idle_timeout_ms)]
    idle_timeout_ms: u64,
    /// The client's retry count.
    #[arg(long, default_value_t = pacer_core::Config::DEFAULT.max_retries)]
    max_retries: u32,
    /// Release policy.
    #[arg(long, value_enum, default_value = "refund")]
    release_policy: PolicyArg,
    /// How many reserves.
    #[arg(long, default_value_t = 100)]
    calls: u64,
    /// Pause between an answer and the next send, ms (none after the last).
    #[arg(long, default_value_t = 15)]
    every_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DoorArg {
    /// PACER.RESERVE (the module).
    Module,
    /// FCALL pacer (the function library).
    Function,
    /// EVALSHA of the shipped script.
    Script,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("bucket_source").required(true).args(["shared", "redis"])))]
struct WatchArgs {
    /// A shared-memory bucket: a bare name is /dev/shm/NAME, anything with
    /// a `/` a path. Opened read-only; never created.
    #[arg(long, value_name = "NAME")]
    shared: Option<String>,
    /// A fleet bucket's Redis server.
    #[arg(long, value_name = "URL", requires = "key")]
    redis: Option<String>,
    /// The fleet bucket's key.
    #[arg(long, requires = "redis")]
    key: Option<String>,
    /// --redis names a Redis Cluster: seed node URLs separated by commas.
    #[arg(long, requires = "redis")]
    cluster: bool,
    /// How to read the fleet bucket: the first the server answers
    /// (PACER.INFO, FCALL_RO pacer_ro, EVALSHA_RO of the script), or one.
    #[arg(long, value_enum, default_value = "auto", requires = "redis")]
    door: WatchDoorArg,
    /// Between two readings, ms.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    interval_ms: u64,
    /// Stop after this many readings (default: until interrupted).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// One JSON line per reading instead of the text display.
    #[arg(long)]
    json: bool,
    /// Serve the metric set (docs/metrics.md) at http://ADDR/metrics, for
    /// as long as the watch runs (port 0: any free port; the address is
    /// printed on stderr).
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
    /// The `bucket` label [default: the shared name or the key].
    #[arg(long, value_name = "LABEL")]
    bucket: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WatchDoorArg {
    /// The first the server answers: module, function, script.
    Auto,
    /// PACER.INFO (the module).
    Module,
    /// FCALL_RO pacer_ro (the function library).
    Function,
    /// EVALSHA_RO of the shipped script.
    Script,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// Settings as NAME=value: PACER_RATE_PER_MIN, PACER_IDLE_TIMEOUT_MS,
    /// PACER_TOTAL_TIMEOUT_MS, PACER_MAX_RETRIES. They override the
    /// environment variables of the same names.
    #[arg(value_name = "NAME=value")]
    settings: Vec<String>,
    /// Ignore the environment; use only the arguments.
    #[arg(long)]
    no_env: bool,
    /// Burst, for the pacer lines (debt floor, first refusal).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_BURST)))]
    burst: u32,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// A failure: message for stderr and exit code.
struct Failure {
    message: String,
    code: u8,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure { message, code: 2 }
    }
}

fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write output: {e}").into()),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value)
        .map(|mut text| {
            text.push('\n');
            text
        })
        .map_err(|e| Failure::from(format!("cannot encode JSON: {e}")))
}

/// `FROM..TO` (or `FROM..=TO`): agent counts, 1 ≤ FROM ≤ TO ≤ the agent
/// limit, at most 1000 of them.
fn agent_range(text: &str) -> Result<(u32, u32), String> {
    let (from, to) = text
        .split_once("..=")
        .or_else(|| text.split_once(".."))
        .ok_or_else(|| format!("'{text}' is not FROM..TO (for example 1..64)"))?;
    let parse = |part: &str| {
        part.parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_AGENTS).contains(n))
            .ok_or_else(|| format!("'{part}' is not an agent count in 1..={MAX_AGENTS}"))
    };
    let (from, to) = (parse(from)?, parse(to)?);
    if from > to {
        return Err(format!("{from}..{to} is empty"));
    }
    if to - from >= 1000 {
        return Err(format!("{from}..{to} is more than 1000 counts"));
    }
    Ok((from, to))
}

/// `M=T`: from minute `M` the upstream's limit is `T` (checked with the
/// run: [`sim::validate`]).
fn limit_change(text: &str) -> Result<(u64, u32), String> {
    let shape = || format!("'{text}' is not MINUTE=LIMIT (for example 20=15)");
    let (minute, limit) = text.split_once('=').ok_or_else(shape)?;
    let minute: u64 = minute.trim().parse().map_err(|_| shape())?;
    let limit: u32 = limit.trim().parse().map_err(|_| shape())?;
    let at = minute
        .checked_mul(60_000)
        .filter(|&at| at <= MAX_MS)
        .ok_or_else(|| format!("'{text}': minute {minute} is beyond one week"))?;
    Ok((at, limit))
}

/// The upstream's model from its flags; they need a limit, and the burst
/// needs the token bucket.
fn upstream_model(args: &SimulateArgs) -> Result<UpstreamModel, Failure> {
    let given = [
        ("--upstream-model", args.upstream_model.is_some()),
        ("--upstream-burst", args.upstream_burst.is_some()),
        ("--upstream-limit-at", args.upstream_limit_at.is_some()),
        ("--upstream-penalty-ms", args.upstream_penalty_ms.is_some()),
    ];
    let limited = args.upstream_limit_per_min.is_some() || args.sweep_upstream.is_some();
    if let Some((flag, _)) = given.iter().find(|(_, given)| *given).filter(|_| !limited) {
        return Err(format!(
            "{flag} needs --upstream-limit-per-min or --sweep-upstream: it models that limit"
        )
        .into());
    }
    let kind = match args.upstream_model.unwrap_or(UpstreamModelArg::Sliding) {
        UpstreamModelArg::TokenBucket => UpstreamKind::TokenBucket {
            burst: args.upstream_burst.unwrap_or(sim::DEFAULT_UPSTREAM_BURST),
        },
        _ if args.upstream_burst.is_some() => {
            return Err("--upstream-burst applies to --upstream-model token-bucket"
                .to_string()
                .into())
        }
        UpstreamModelArg::Sliding => UpstreamKind::Sliding,
        UpstreamModelArg::FixedMinute => UpstreamKind::FixedMinute,
    };
    let schedule = args.upstream_limit_at.as_deref().unwrap_or_default();
    if schedule.len() > MAX_LIMIT_CHANGES {
        return Err(format!(
            "--upstream-limit-at holds at most {MAX_LIMIT_CHANGES} changes, not {}",
            schedule.len()
        )
        .into());
    }
    let mut changes = [None; MAX_LIMIT_CHANGES];
    for (slot, &change) in changes.iter_mut().zip(schedule) {
        *slot = Some(change);
    }
    Ok(UpstreamModel {
        kind,
        changes,
        penalty_ms: args.upstream_penalty_ms.unwrap_or(0),
    })
}

/// A flag given where it does not apply is an error, not silently ignored.
fn check_flags_apply(args: &SimulateArgs) -> Result<(), Failure> {
    let open = args.offered_per_min.is_some() || args.offered_every_ms.is_some();
    let (misplaced, this_run) = if open {
        (
            [
                ("--think-ms", args.think_ms.is_some()),
                ("--stagger-ms", args.stagger_ms.is_some()),
            ],
            "an open loop (--offered-per-min or --offered-every-ms)",
        )
    } else {
        (
            [
                ("--arrivals", args.arrivals.is_some()),
                ("--on-refusal", args.on_refusal.is_some()),
            ],
            "a closed loop (--agents)",
        )
    };
    if let Some((flag, _)) = misplaced.iter().find(|(_, given)| *given) {
        let applies = if open {
            "a closed loop"
        } else {
            "an open loop"
        };
        return Err(format!("{flag} applies to {applies}; this run is {this_run}").into());
    }
    if let Some(path) = &args.plot {
        plot::require_svg(path)?;
    }
    Ok(())
}

fn simulate(args: SimulateArgs) -> Result<(), Failure> {
    if args.burst > MAX_BURST {
        return Err(format!("--burst {} is above the maximum {MAX_BURST}", args.burst).into());
    }
    check_flags_apply(&args)?;
    let (rate, idle, total, retries) = (
        args.rate.map(|v| v.to_string()),
        args.idle_timeout_ms.map(|v| v.to_string()),
        args.total_timeout_ms.map(|v| v.to_string()),
        args.max_retries.map(|v| v.to_string()),
    );
    let resolution = resolve(&Settings {
        rate_per_min: rate.as_deref(),
        idle_timeout_ms: idle.as_deref(),
        total_timeout_ms: total.as_deref(),
        max_retries: retries.as_deref(),
    });
    let notices: Vec<String> = resolution.notices.iter().map(|n| n.to_string()).collect();
    let load = match (args.offered_per_min, args.offered_every_ms) {
        (None, None) => Load::Closed {
            agents: args.agents,
            think_ms: args.think_ms.unwrap_or(0),
            stagger_ms: args.stagger_ms.unwrap_or(0),
        },
        (per_min, every) => {
            let (num, den) = match (per_min, every) {
                (Some(n), _) => (60_000, n),
                (_, Some(ms)) => (ms, 1),
                (None, None) => unreachable!("matched above"),
            };
            let arrivals = match args.arrivals.unwrap_or(ArrivalsArg::Periodic) {
                ArrivalsArg::Periodic => Arrivals::Periodic {
                    every_num: num,
                    every_den: den,
                },
                ArrivalsArg::Poisson => Arrivals::Poisson {
                    mean_num: num,
                    mean_den: den,
                },
            };
            let on_refusal = match args.on_refusal.unwrap_or(OnRefusalArg::Retry) {
                OnRefusalArg::Retry => OnRefusal::Retry,
                OnRefusalArg::Drop => OnRefusal::Drop,
            };
            Load::Open {
                arrivals,
                on_refusal,
            }
        }
    };
    let config = SimConfig {
        budget: resolution.budget,
        burst: args.burst,
        release_policy: match args.release_policy {
            PolicyArg::Refund => ReleasePolicy::Refund,
            PolicyArg::Strict => ReleasePolicy::Strict,
        },
        design: match args.design {
            DesignArg::Paced => Design::Paced,
            DesignArg::AdmitAnyway => Design::AdmitAnyway,
        },
        load,
        turn_ms: args.turn_ms,
        // Identical turns keep the agents in lockstep, tied to the same
        // milliseconds as each other and the refill; the order of those ties
        // then decides who is refused (1 ms of jitter moves the default
        // run's terminal errors from 12% to 31%). Real turns vary, so the
        // default spreads them by a third of their length.
        turn_jitter_ms: args.turn_jitter_ms.unwrap_or(args.turn_ms / 3),
        first_byte_ms: args.first_byte_ms,
        duration_ms: args.duration_ms,
        seed: args.seed,
        cancel_percent: args.cancel_percent,
        booking: args.booking,
        machines: args.machines,
        upstream_limit_per_min: args.upstream_limit_per_min,
        upstream_model: upstream_model(&args)?,
        adaptive: args.adaptive.then(|| {
            let rate = resolution.budget.rate_per_min;
            (
                args.adaptive_floor.unwrap_or(1),
                args.adaptive_ceiling.unwrap_or(rate),
            )
        }),
    };
    if args.adaptive && args.upstream_limit_per_min.is_none() && args.sweep_upstream.is_none() {
        return Err(
            "--adaptive needs --upstream-limit-per-min or --sweep-upstream: only the upstream's throttles move the rate"
                .to_string()
                .into(),
        );
    }
    if let Some((floor, ceiling)) = config.adaptive {
        let rate = config.budget.rate_per_min;
        if rate == 0 || floor > rate || ceiling < rate {
            return Err(format!(
                "--adaptive needs --adaptive-floor {floor} <= --rate {rate} <= --adaptive-ceiling {ceiling}, and a rate above 0"
            )
            .into());
        }
    }
    if let Some((from, to)) = args.sweep_agents {
        if args.machines > 1 {
            return Err("--sweep-agents sweeps one machine; drop --machines"
                .to_string()
                .into());
        }
        let sweep = sweep::run(&config, from, to)?;
        let s = &config;
        let heading = format!(
            "pacer simulate --sweep-agents {from}..{to} — how many agents fit: closed loop, rate {}/min, \
             burst {}, {} retries, {} ms turns ± {} ms, {} s virtual{}",
            s.budget.rate_per_min,
            s.burst,
            s.budget.max_retries,
            s.turn_ms,
            s.turn_jitter_ms,
            s.duration_ms / 1000,
            if s.booking { ", bookings" } else { "" },
        );
        return show_sweep(
            &args,
            &sweep,
            &heading,
            plot::write_sweep_svg,
            sweep::render,
        );
    }
    if let Some(size) = args.adaptive_grid {
        let report = grid::run(
            &config,
            size,
            args.grid_settle_ms.unwrap_or(grid::SETTLE_MS),
        )?;
        let missed = report.points.len() - report.met();
        if args.json {
            print(&to_json(&report)?)?;
        } else {
            let heading = format!(
                "pacer simulate --adaptive-grid {} — adaptive pacing (floor 1, ceiling 600) against the best fixed \
                 rate: burst {}, {} retries, {} ms turns ± {} ms, seed {}",
                match size {
                    grid::GridSize::Full => "full",
                    grid::GridSize::Smoke => "smoke",
                },
                config.burst,
                config.budget.max_retries,
                config.turn_ms,
                config.turn_jitter_ms,
                config.seed,
            );
            print(&grid::render(&report, &heading))?;
        }
        return match missed {
            0 => Ok(()),
            _ => Err(Failure {
                message: format!(
                    "adaptive pacing missed its goal at {missed} of {} points",
                    report.points.len()
                ),
                code: 1,
            }),
        };
    }
    if let Some(limits) = &args.sweep_upstream {
        let sweep = upstream_sweep::run(&config, limits, &args.fixed_rates)?;
        let s = &config;
        let heading = format!(
            "pacer simulate --sweep-upstream — adaptive pacing (from {}/min, floor {}, ceiling {}) against fixed rates: \
             closed loop, {} agents, burst {}, {} retries, {} ms turns ± {} ms, {} s virtual",
            s.budget.rate_per_min,
            sweep.adaptive_floor_per_min,
            sweep.adaptive_ceiling_per_min,
            match s.load {
                sim::Load::Closed { agents, .. } => agents,
                sim::Load::Open { .. } => 0,
            },
            s.burst,
            s.budget.max_retries,
            s.turn_ms,
            s.turn_jitter_ms,
            s.duration_ms / 1000,
        );
        let heading = match s.upstream_model.is_default() {
            true => heading,
            false => format!(
                "{heading}; upstream: {} (T: each row's limit)",
                s.upstream_model.describe("T")
            ),
        };
        return show_sweep(
            &args,
            &sweep,
            &heading,
            plot::write_upstream_sweep_svg,
            upstream_sweep::render,
        );
    }
    if args.compare_booking {
        if args.machines > 1 {
            let message = "--compare-booking compares one machine's runs; \
                           it cannot be used with --machines above 1";
            return Err(message.to_string().into());
        }
        let mut runs = Vec::new();
        for booking in [false, true] {
            let config = SimConfig { booking, ..config };
            let mut report = sim::run(&config, &mut |_| {})?;
            report.notices = notices.clone();
            runs.push(report);
        }
        return print(&sim::render_comparison(&runs[0], &runs[1]));
    }
    let agents = u64::from(args.agents) * u64::from(args.machines);
    let long_run = args.duration_ms >= 30 * 60_000 || agents >= 200;
    // Several machines run both arrangements, one after the other.
    let runs = if args.machines > 1 { 2 } else { 1 };
    let bar = progress::bar(args.duration_ms * runs, "simulating", long_run);
    let result = sim::run(&config, &mut |now| bar.set_position(now));
    bar.finish_and_clear();
    let mut report = result?;
    report.notices = notices;
    if let Some(path) = &args.plot {
        plot::write_svg(&report, path)?;
        eprintln!("pacer: wrote the chart to {}", path.display());
    }
    // Terminal errors come with what would end them, each simulated.
    let advice = advice::advise(&config, &report)?;
    if args.json {
        // The report's keys in their order, then the advice (last, so a
        // reader taking a key's first occurrence reads the report's).
        #[derive(serde::Serialize)]
        struct WithAdvice<'a> {
            #[serde(flatten)]
            report: &'a sim::SimReport,
            #[serde(skip_serializing_if = "Option::is_none")]
            advice: Option<&'a advice::Advice>,
        }
        print(&to_json(&WithAdvice {
            report: &report,
            advice: advice.as_ref(),
        })?)
    } else {
        let mut text = sim::render(&report, args.per_minute);
        if let Some(advice) = &advice {
            text.push_str(&advice::render(&report, advice));
        }
        print(&text)
    }
}

/// A sweep's output: its chart, titled `heading`, in `--plot`'s file when
/// given, then the sweep as JSON with `--json`, else its table under
/// `heading`.
fn show_sweep<T: serde::Serialize>(
    args: &SimulateArgs,
    sweep: &T,
    heading: &str,
    chart: fn(&T, &str, &Path) -> Result<(), String>,
    table: fn(&T, &str) -> String,
) -> Result<(), Failure> {
    if let Some(path) = &args.plot {
        chart(sweep, heading, path)?;
        eprintln!("pacer: wrote the chart to {}", path.display());
    }
    if args.json {
        print(&to_json(sweep)?)
    } else {
        print(&table(sweep, heading))
    }
}

fn run_matrix(args: MatrixArgs) -> Result<(), Failure> {
    let threads = args
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let options = MatrixOptions {
        rate_min: args.rate_min.unwrap_or(if args.exhaustive { 0 } else { 1 }),
        rate_max: args.rate_max,
        threads,
        fault: args
            .fault
            .map(|FaultArg::OneFewerRetry| Fault::OneFewerRetry),
        idle_min: args.idle_min,
        idle_max: args.idle_max,
    };
    if options.rate_min > options.rate_max {
        return Err(format!(
            "--rate-min {} is above --rate-max {}",
            options.rate_min, options.rate_max
        )
        .into());
    }
    if options.idle_min > options.idle_max {
        return Err(format!(
            "--idle-min {} is above --idle-max {}",
            options.idle_min, options.idle_max
        )
        .into());
    }
    let report = if args.exhaustive {
        let bar = progress::bar(options.idle_max - options.idle_min + 1, "exhaustive", true);
        let report = matrix::run_exhaustive(&options, &|n| bar.inc(n));
        bar.finish_and_clear();
        report
    } else {
        let rates = u64::from(options.rate_max - options.rate_min) + 1;
        let bar = progress::bar(88 * rates, "matrix", true);
        let report = matrix::run_matrix(&options, &|n| bar.inc(n));
        bar.finish_and_clear();
        report
    };
    if args.json {
        print(&to_json(&report)?)?;
    } else {
        print(&matrix::render(&report, &options))?;
    }
    if report.counterexample_count > 0 {
        return Err(Failure {
            message: format!("{} counterexample(s) found", report.counterexample_count),
            code: 1,
        });
    }
    Ok(())
}

fn redis_target(args: &ReplayArgs, kind: RedisKind) -> Result<replay::Target, Failure> {
    Ok(replay::Target::Redis {
        url: Target::parse(&args.redis, args.cluster)?,
        kind,
    })
}

fn run_replay(args: ReplayArgs) -> Result<(), Failure> {
    let stdout = std::io::stdout();
    let output = std::io::LineWriter::new(stdout.lock());
    let target = match args.engine {
        EngineArg::Core => replay::Target::Core,
        EngineArg::RedisModule => redis_target(&args, RedisKind::Module)?,
        EngineArg::RedisScript => redis_target(&args, RedisKind::Script)?,
        EngineArg::RedisFunction => redis_target(&args, RedisKind::Function)?,
    };
    let result = match &args.file {
        Some(path) if path.as_os_str() != "-" => {
            let file = std::fs::File::open(path)
                .map_err(|e| Failure::from(format!("cannot open {}: {e}", path.display())))?;
            replay::run_on(&target, BufReader::new(file), output)
        }
        _ => replay::run_on(&target, std::io::stdin().lock(), output),
    };
    result.map_err(|message| {
        let prefix = match &args.file {
            Some(path) if path.as_os_str() != "-" => format!("{}: ", path.display()),
            _ => String::new(),
        };
        Failure::from(format!("{prefix}{message}"))
    })
}

fn run_explain(args: ExplainArgs) -> Result<(), Failure> {
    let no_env = args.no_env;
    let raws = explain::collect(&args.settings, |name| {
        if no_env {
            None
        } else {
            // Settings text never fails and is never dropped: bytes that
            // are not UTF-8 go to the core as their lossy text (on Unix,
            // `String::from_utf8_lossy` of the bytes); U+FFFD is not a
            // digit, so the core reports the value as malformed and keeps
            // the default, with its usual notice.
            std::env::var_os(name).map(|value| match value.into_string() {
                Ok(text) => text,
                Err(raw) => raw.to_string_lossy().into_owned(),
            })
        }
    })?;
    let explanation = explain::explain(&raws, args.burst)?;
    if args.json {
        print(&to_json(&explanation)?)
    } else {
        print(&explain::render(&explanation))
    }
}

fn run_hammer(args: HammerArgs) -> Result<(), Failure> {
    let hammer = pacer_cli::hammer::Hammer {
        target: Target::parse(&args.redis, args.cluster)?,
        key: args.key,
        config: [
            args.rate_per_min.to_string(),
            args.burst.to_string(),
            args.idle_timeout_ms.to_string(),
            args.max_retries.to_string(),
            match args.release_policy {
                PolicyArg::Refund => "refund",
                PolicyArg::Strict => "strict",
            }
            .to_string(),
        ],
        calls: args.calls,
        every_ms: args.every_ms,
        door: match args.door {
            DoorArg::Module => pacer_cli::hammer::Door::Module,
            DoorArg::Function => pacer_cli::hammer::Door::Function,
            DoorArg::Script => pacer_cli::hammer::Door::Script,
        },
    };
    let stdout = std::io::stdout();
    let mut out = std::io::LineWriter::new(stdout.lock());
    hammer.run(&mut out).map_err(Failure::from)
}

fn run_watch(args: WatchArgs) -> Result<(), Failure> {
    use pacer_cli::watch::{self, fleet, shared};
    let (bucket, default_label): (Box<dyn watch::Bucket>, String) =
        match (&args.shared, &args.redis, &args.key) {
            (Some(name), _, _) => (Box::new(shared::SharedBucket::open(name)?), name.clone()),
            (None, Some(url), Some(key)) => {
                let door = match args.door {
                    WatchDoorArg::Auto => fleet::Door::Auto,
                    WatchDoorArg::Module => fleet::Door::Module,
                    WatchDoorArg::Function => fleet::Door::Function,
                    WatchDoorArg::Script => fleet::Door::Script,
                };
                (
                    Box::new(fleet::RedisBucket::connect(
                        &Target::parse(url, args.cluster)?,
                        key,
                        door,
                    )?),
                    key.clone(),
                )
            }
            _ => {
                return Err("--watch needs --shared NAME, or --redis URL and --key KEY"
                    .to_string()
                    .into())
            }
        };
    let label = args.bucket.unwrap_or(default_label);
    if label.is_empty() {
        return Err("--bucket needs a label, got an empty one"
            .to_string()
            .into());
    }
    let options = watch::Options {
        interval_ms: args.interval_ms,
        count: args.count,
        json: args.json,
        clear: !args.json && std::io::IsTerminal::is_terminal(&std::io::stdout()),
        label,
        prometheus: args.prometheus,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    watch::run(bucket, &options, &mut out, &mut std::io::stderr()).map_err(Failure::from)
}

/// A command-line error as the rest of the CLI's errors read: one line,
/// `pacer: ` and clap's message, pointing to `--help` for the usage.
fn one_line(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let message = first.strip_prefix("error: ").unwrap_or(first);
    format!("pacer: {message} (see --help)")
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => match error.kind() {
            // Help and version are answers, not errors: clap prints them.
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => error.exit(),
            _ => {
                eprintln!("{}", one_line(&error));
                return ExitCode::from(2);
            }
        },
    };
    let result = match cli.command {
        Command::Simulate(args) => simulate(*args),
        Command::Matrix(args) => run_matrix(args),
        Command::Replay(args) => run_replay(args),
        Command::Explain(args) => run_explain(args),
        Command::Hammer(args) => run_hammer(args),
        Command::Watch(args) => run_watch(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("pacer: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
