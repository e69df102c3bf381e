//! Regression tests: every accepted `pacer` command finishes with bounded
//! work, absurd numeric flags are rejected with their accepted range, and
//! settings text that is not UTF-8 is reported, never silently dropped.
//!
//! The runs below go through [`guarded`]: the child gets a 4 GiB address
//! space limit and a generous wall-clock safety net, so a regression fails
//! the test (abort, kill) instead of hanging the suite or eating the
//! machine's memory. The assertions themselves are on exit codes, messages
//! and counts, never on how long a run took.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pacer_cli::sim::{self, Limits, Load, SimConfig, SimReport};
use pacer_core::Budget;
use serde_json::Value;

mod common;

use common::{assert_contains_all, u};

/// A safety net only: the runs here take milliseconds.
const SAFETY_NET: Duration = Duration::from_secs(120);

struct Run {
    /// `None`: killed by a signal (an allocation failure aborts).
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `pacer ARGS` under `ulimit -v` (4 GiB) with `env` as the only
/// PACER_* variables, killing it past [`SAFETY_NET`].
fn guarded(args: &[&str], env: &[(&str, OsString)]) -> Run {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in common::SETTINGS_VARS {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("sh and the pacer binary run");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait for pacer").is_some() {
            break;
        }
        if started.elapsed() > SAFETY_NET {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pacer {args:?} was still running after {SAFETY_NET:?} (safety net)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("collect pacer output");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `pacer ARGS`; asserts that it is rejected (exit 2) with a message
/// holding every one of `needles`.
fn rejected(args: &[&str], needles: &[&str]) {
    let run = guarded(args, &[]);
    assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
    assert_contains_all(&run.stderr, needles);
}

fn json_run(args: &[&str]) -> Value {
    let run = guarded(args, &[]);
    assert_eq!(
        run.code,
        Some(0),
        "pacer {args:?}: {}",
        &run.stderr[..run.stderr.len().min(600)]
    );
    serde_json::from_str(&run.stdout).expect("stdout is JSON")
}

/// The command's limits, with at most `max_requests` requests.
fn requests(max_requests: u64) -> Limits {
    Limits {
        max_requests,
        ..Limits::DEFAULT
    }
}

/// Runs pacing off, with `agents` agents on each of `machines` machines,
/// turns of no length, for a week (every agent starts a turn every ms),
/// within `limits`.
fn run_unpaced(agents: u32, machines: u32, limits: Limits) -> Result<SimReport, String> {
    let cfg = SimConfig {
        budget: Budget {
            rate_per_min: 0,
            ..Budget::DEFAULT
        },
        load: Load::closed(agents),
        turn_ms: 0,
        turn_jitter_ms: 0,
        duration_ms: 604_800_000,
        machines,
        ..SimConfig::DEFAULT
    };
    sim::run_with_limits(&cfg, limits, &mut |_| {})
}

/// Defect 1: with every waiting request cancelled, a request cancelled at
/// the instant of its admission used to start its agent's next turn at the
/// same virtual millisecond, forever. The run must end, every started turn
/// must have an outcome, and no agent can start more than one turn per
/// virtual millisecond: 20 agents × 600000 ms bounds the turns.
#[test]
fn simulate_cancel_percent_100_finishes() {
    for extra in [
        &[][..],
        &["--release-policy", "strict"][..],
        &["--booking"][..],
        &["--turn-jitter-ms", "0", "--burst", "1"][..],
        &["--offered-per-min", "600", "--arrivals", "poisson"][..],
    ] {
        let mut args = vec!["simulate", "--cancel-percent", "100", "--json"];
        args.extend_from_slice(extra);
        let r = json_run(&args);
        let started = u(&r, "turns_started");
        let ended = u(&r, "turns_completed")
            + u(&r, "terminal_rate_limit_errors")
            + u(&r, "deadline_overruns")
            + u(&r, "cancelled");
        assert_eq!(started, ended, "{extra:?}: every started turn ends");
        assert!(started <= 20 * 600_000, "{extra:?}: {started} turns");
        assert!(u(&r, "cancelled") > 0, "{extra:?}: waits were cancelled");
    }
}

/// Defect 2: type-valid but absurd values are refused by the parser, with
/// the flag and the accepted range in the message, and exit code 2.
#[test]
fn absurd_numeric_flags_are_rejected_with_their_range() {
    const MAX: &str = "18446744073709551615";
    // (command, flag, value, the accepted range)
    let mut cases = vec![
        ("simulate", "--agents", "1000000000", "0..=100000"),
        ("simulate", "--duration-ms", MAX, "1..=604800000"),
        ("simulate", "--offered-per-min", "1000000000", "1..=60000"),
        ("simulate", "--offered-every-ms", MAX, "1..=604800000"),
        ("simulate", "--burst", "4294967295", "0..=1000000"),
        ("explain", "--burst", "4294967295", "0..=1000000"),
        ("matrix", "--threads", "100000", "1..=1024"),
    ];
    // Every delay: one week at the most.
    for flag in [
        "--stagger-ms",
        "--turn-ms",
        "--turn-jitter-ms",
        "--first-byte-ms",
        "--think-ms",
    ] {
        cases.push(("simulate", flag, MAX, "0..=604800000"));
    }
    for machines in ["0", "65", "4294967295"] {
        cases.push(("simulate", "--machines", machines, "1..=64"));
    }
    for (command, flag, value, range) in cases {
        let args = [command, flag, value];
        let run = guarded(&args, &[]);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(flag) && run.stderr.contains(range),
            "{args:?}: the message should name {flag} and {range}: {}",
            run.stderr
        );
    }
}

/// Defect 2: flags that are each in range but together offer more requests
/// than one run holds (4,000,000) are rejected before any work, naming them.
#[test]
fn an_open_loop_offering_too_many_requests_is_rejected() {
    // 60000/min for 604800000 ms offers 604,800,000 requests.
    rejected(
        &[
            "simulate",
            "--offered-per-min",
            "60000",
            "--duration-ms",
            "604800000",
        ],
        &["--offered-per-min", "--duration-ms", "4000000"],
    );
    // 6000/min for 40 minutes: request k at 10·k ms for 10·k < 2400000,
    // 240,000 offers, well inside the limit; it runs.
    let r = json_run(&[
        "simulate",
        "--offered-per-min",
        "6000",
        "--duration-ms",
        "2400000",
        "--on-refusal",
        "drop",
        "--json",
    ]);
    assert_eq!(u(&r, "turns_started"), 240_000);
}

/// Defect 2: a closed loop whose turns would outrun the request limit
/// stops starting turns when it is reached and says so in its report. (The
/// command's limit is 4,000,000 requests; a smaller one here keeps the
/// debug build quick: 1000 unpaced agents with 1 ms turns start 1000 turns
/// every ms, so the 40,000th starts at 39 ms and the limit bites at 40 ms.)
#[test]
fn a_closed_loop_stops_at_its_request_limit_and_says_so() {
    let report = run_unpaced(1000, 1, requests(40_000)).expect("runs");
    assert_eq!(report.turns_started, 40_000);
    assert_eq!(report.request_limit_reached_ms, Some(40));
    let text = sim::render(&report, false);
    assert!(
        text.contains("note: the run reached its limit of 40000 requests at 0.04 s virtual"),
        "{text}"
    );
}

/// Defect 3: a PACER_* variable whose bytes are not UTF-8 is resolved as
/// its lossy text (U+FFFD is not a digit), so the core reports it as
/// malformed and keeps the default, instead of treating it as unset.
#[test]
fn non_utf8_settings_are_reported_as_malformed() {
    let bad = |bytes: &[u8]| OsString::from_vec(bytes.to_vec());
    let env = [
        ("PACER_RATE_PER_MIN", bad(b"6\xff0")),
        ("PACER_IDLE_TIMEOUT_MS", bad(b"\xfe30000")),
        ("PACER_TOTAL_TIMEOUT_MS", bad(b"600000\x80")),
        ("PACER_MAX_RETRIES", bad(b"\xc3")),
    ];
    let run = guarded(&["explain"], &env);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // The core's wording (core/src/notice.rs) with the defaults of SPEC §2:
    // rate 60, idle 120000 ms, total 600000 ms, retries min(5, 5) = 5.
    let notices = [
        "ignoring new-connection rate \"6\u{FFFD}0\": not a whole number of connections per minute; using 60/minute",
        "ignoring idle timeout \"\u{FFFD}30000\": not a whole number of milliseconds; using 120000ms",
        "ignoring total timeout \"600000\u{FFFD}\": not a whole number of milliseconds; using 600000ms",
        "ignoring max retries \"\u{FFFD}\": not a whole number; using 5",
    ];
    assert_contains_all(&run.stdout, &notices);
}

/// With several machines a run's requests are counted over the machines
/// and both arrangements: each arrangement holds half of the 4,000,000.
/// An open loop whose machines together offer more than 2,000,000 per
/// arrangement is rejected before any work, naming the flags.
#[test]
fn machines_count_towards_the_request_limit() {
    // 60000/min for 2,000,000 ms: request k at k ms, 2,000,000 offers per
    // machine (one run of one machine holds that); on 2 machines that is
    // 4,000,000 per arrangement, 8,000,000 in all.
    rejected(
        &[
            "simulate",
            "--offered-per-min",
            "60000",
            "--duration-ms",
            "2000000",
            "--machines",
            "2",
        ],
        &["--machines 2", "4000000", "8000000", "--duration-ms"],
    );
    // Closed loop: every agent starts a turn at t = 0, so the agents of
    // all machines must fit in one arrangement's half: 100000 × 64 =
    // 6,400,000 > 2,000,000.
    rejected(
        &["simulate", "--agents", "100000", "--machines", "64"],
        &["--agents 100000", "--machines 64", "6400000", "4000000"],
    );
}

/// The exact edges, checked without running: 2,000,000 requests per
/// arrangement are accepted, one more machine's worth is not.
#[test]
fn the_machines_edges_of_the_request_limit() {
    use pacer_cli::sim::{validate, Arrivals, OnRefusal};
    let cfg = |load, machines| SimConfig {
        load,
        turn_jitter_ms: 0,
        duration_ms: 1_000_000,
        machines,
        ..SimConfig::DEFAULT
    };
    let agents = Load::closed;
    // 31250 × 64 = 2,000,000; 31251 × 64 = 2,000,064.
    assert!(validate(&cfg(agents(31_250), 64)).is_ok());
    assert!(validate(&cfg(agents(31_251), 64)).is_err());
    // One machine keeps its own limit: 100000 agents run.
    assert!(validate(&cfg(agents(100_000), 1)).is_ok());
    // 60000/min for 1,000,000 ms: 1,000,000 offers per machine; 2 machines
    // fill an arrangement's half exactly, 3 do not fit.
    let open = Load::Open {
        arrivals: Arrivals::Periodic {
            every_num: 60_000,
            every_den: 60_000,
        },
        on_refusal: OnRefusal::Drop,
    };
    assert!(validate(&cfg(open, 2)).is_ok());
    assert!(validate(&cfg(open, 3)).is_err());
    // Out of range.
    assert!(validate(&cfg(agents(1), 0)).is_err());
    assert!(validate(&cfg(agents(1), 65)).is_err());
}

/// A closed loop on several machines that outruns the request limit
/// stops in both arrangements, each at its half, and says so for each.
/// (As above, a small limit keeps the debug build quick: 2 machines × 500
/// unpaced agents with 1 ms turns start 1000 turns every ms in each
/// arrangement; with 80,000 requests in all, each arrangement holds
/// 40,000, the 40,000th starts at 39 ms and the limit bites at 40 ms.)
#[test]
fn several_machines_stop_at_their_share_of_the_request_limit() {
    let report = run_unpaced(500, 2, requests(80_000)).expect("runs");
    let m = report.machines.as_ref().expect("two machines");
    for a in [&m.bucket_per_machine, &m.fleet_bucket] {
        assert_eq!(a.turns_started, 40_000);
        assert_eq!(a.request_limit, 40_000);
        assert_eq!(a.request_limit_reached_ms, Some(40));
    }
    let text = sim::render(&report, false);
    let notes = [
        "note: the run reached its limit of 40000 requests at 0.04 s virtual",
        "note: the fleet-bucket run reached its limit of 40000 requests at 0.04 s virtual",
    ];
    assert_contains_all(&text, &notes);
    // The event limit is shared the same way: 2 × 1000 events in all is
    // 1000 per arrangement, and the first one (1000 turns at t = 0 alone
    // are 1000 start events) stops at its 1000.
    let limits = Limits {
        max_requests: 80_000,
        max_events: 2_000,
    };
    let error = run_unpaced(500, 2, limits).expect_err("stops");
    assert!(error.contains("stopped after 1000 events"), "{error}");
}

/// Flag errors read as every other error of the CLI (cli/README.md): one
/// line on stderr, prefixed `pacer:`, exit code 2. Help stays clap's.
#[test]
fn flag_errors_are_one_pacer_line() {
    let cases: [&[&str]; 5] = [
        &["simulate", "--bogus"],
        &["simulate", "--agents"],
        &["simulate", "--agents", "many"],
        &["simulate", "--machines", "0"],
        &["nonsense"],
    ];
    for args in cases {
        let run = guarded(args, &[]);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("pacer: ") && run.stderr.ends_with('\n'),
            "{args:?}: {:?}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {:?}", run.stderr);
    }
    let help = guarded(&["simulate", "--help"], &[]);
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    assert!(
        help.stdout.contains("Usage: pacer simulate"),
        "{}",
        help.stdout
    );
}

/// A flag that does not apply to the run is an error naming it, not
/// silently ignored; a chart file must be SVG, and nothing is written
/// otherwise.
#[test]
fn flags_that_do_not_apply_are_errors() {
    let cases: [(&[&str], &str); 6] = [
        (&["simulate", "--arrivals", "poisson"], "--arrivals"),
        (&["simulate", "--on-refusal", "drop"], "--on-refusal"),
        (
            &["simulate", "--offered-per-min", "60", "--think-ms", "5"],
            "--think-ms",
        ),
        (
            &["simulate", "--offered-every-ms", "900", "--stagger-ms", "5"],
            "--stagger-ms",
        ),
        (
            &["simulate", "--per-minute", "--compare-booking"],
            "--per-minute",
        ),
        (&["simulate", "--per-minute", "--json"], "--per-minute"),
    ];
    for (args, flag) in cases {
        let run = guarded(args, &[]);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("pacer: ") && run.stderr.contains(flag),
            "{args:?}: {}",
            run.stderr
        );
    }
    let dir = std::env::temp_dir().join(format!("pacer-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("chart.png");
    let run = guarded(&["simulate", "--plot", png.to_str().unwrap()], &[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains(".svg"), "{}", run.stderr);
    assert!(!png.exists(), "nothing is written for a refused extension");
    let svg = dir.join("chart.svg");
    let run = guarded(
        &[
            "simulate",
            "--duration-ms",
            "180000",
            "--plot",
            svg.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("wrote the chart to {}", svg.display())),
        "{}",
        run.stderr
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    let labels = [
        "refused (attempts)",
        "terminal rate-limit errors (turns)",
        "admitted (opened)",
    ];
    assert_contains_all(&chart, &labels);
    // A three-minute run labels its minute axis 0, 1, 2, 3 and nothing between.
    let packed: String = chart.split_whitespace().collect();
    assert!(
        packed.contains(">3</text>")
            && !packed.contains(">0.5</text>")
            && !packed.contains(">1.5</text>"),
        "minute labels should be whole"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
