//! Runs the built `pacer` binary.

#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The settings variables the CLI reads; every run starts without them.
pub const SETTINGS_VARS: [&str; 4] = [
    "PACER_RATE_PER_MIN",
    "PACER_IDLE_TIMEOUT_MS",
    "PACER_TOTAL_TIMEOUT_MS",
    "PACER_MAX_RETRIES",
];

/// Runs `pacer ARGS` with `stdin`, without the PACER_* environment.
pub fn pacer(args: &[&str], stdin: &str) -> Run {
    pacer_env(args, stdin, &[])
}

/// Runs `pacer ARGS` with `stdin` and only the given PACER_* variables.
pub fn pacer_env(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pacer"));
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in SETTINGS_VARS {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("the pacer binary runs");
    let input = stdin.as_bytes().to_vec();
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || {
        // The binary may exit before reading everything (an early error).
        let _ = pipe.write_all(&input);
    });
    let output = child.wait_with_output().expect("the pacer binary finishes");
    writer.join().expect("stdin writer");
    let code = output
        .status
        .code()
        .expect("exited, not killed by a signal");
    // 101 is Rust's panic exit code: never acceptable.
    assert_ne!(
        code,
        101,
        "pacer panicked: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Run {
        code,
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

/// Runs and parses stdout as one JSON value; asserts exit 0.
pub fn pacer_json(args: &[&str]) -> serde_json::Value {
    let run = pacer(args, "");
    assert_eq!(run.code, 0, "pacer {args:?} failed: {}", run.stderr);
    serde_json::from_str(&run.stdout).expect("stdout is JSON")
}

/// Runs `pacer ARGS` with no input; asserts exit 0 and returns stdout.
pub fn stdout(args: &[&str]) -> String {
    let run = pacer(args, "");
    assert_eq!(run.code, 0, "pacer {args:?} failed: {}", run.stderr);
    run.stdout
}

/// Asserts that `text` holds every one of `needles`.
pub fn assert_contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

/// Runs `pacer ARGS --plot FILE` with `FILE` a fresh SVG file named after
/// `name`; asserts exit 0 and returns the chart, removing the file.
pub fn plot(args: &[&str], name: &str) -> String {
    let path = std::env::temp_dir().join(format!("pacer-{name}-{}.svg", std::process::id()));
    let path_text = path.to_str().expect("utf-8 path");
    stdout(&[args, &["--plot", path_text]].concat());
    let svg = std::fs::read_to_string(&path).expect("the plot was written");
    let _ = std::fs::remove_file(&path);
    svg
}

/// The unsigned integer `key` of a JSON report.
pub fn u(report: &serde_json::Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {report}"))
}

/// The unsigned integers `keys` of a JSON report, in order.
pub fn us<const N: usize>(report: &serde_json::Value, keys: [&str; N]) -> [u64; N] {
    keys.map(|key| u(report, key))
}
