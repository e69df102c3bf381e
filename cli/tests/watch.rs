//! `pacer watch`: a bucket driven to hand-derived counts, then watched; the
//! watch reports exactly those counts and leaves the bucket's bytes as they
//! were. Shared buckets are driven through the C ABI by another process
//! (this test binary run again, see [`drive_a_bucket_when_asked`]); Redis
//! buckets by `pacer hammer` against a real `redis-server` started here.

mod common;

use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::mem::MaybeUninit;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pacer;
use serde_json::{json, Value};

/// The variable that turns this test binary into a driver: `SCENARIO:PATH`.
const DRIVE: &str = "PACER_WATCH_TEST_DRIVE";

// ------------------------------------------------------------------ driver

/// The answer of one C call, checked.
fn ok(status: pacer::status::pacer_status, what: &str) {
    assert_eq!(status, pacer::status::pacer_status::Ok, "{what}");
}

/// A decision out of a C call that fills one.
fn decision(
    call: impl FnOnce(*mut pacer::pacer::pacer_decision) -> pacer::status::pacer_status,
) -> pacer::pacer::pacer_decision {
    let mut out = MaybeUninit::<pacer::pacer::pacer_decision>::zeroed();
    ok(call(out.as_mut_ptr()), "decision");
    // SAFETY: the call succeeded, so it wrote the decision (and zeroes are
    // a valid decision anyway: plain integers and bools).
    unsafe { out.assume_init() }
}

const ADMITTED: u32 = pacer::pacer::pacer_decision_kind::Admitted as u32;
const REFUSED: u32 = pacer::pacer::pacer_decision_kind::Refused as u32;
const BOOKED: u32 = pacer::pacer::pacer_decision_kind::Booked as u32;

/// Opens (creating) the shared bucket at `path_or_name` through the C ABI,
/// makes the scenario's decisions on the pacer `pacer_shared_pacer` gives,
/// all at one reading of the shared clock `t0` (so they do not depend on
/// how fast this runs), checks each against its derivation, and closes.
fn drive(scenario: &str, path_or_name: &str) {
    use pacer::pacer::{
        pacer_config, pacer_observe, pacer_redeem, pacer_release, pacer_reserve,
        pacer_reserve_or_book,
    };
    use pacer::shm::{pacer_shared, pacer_shared_close, pacer_shared_open, pacer_shared_pacer};
    let config = match scenario {
        // SPEC §2's defaults: rate 60, burst 10, idle 120000, 5 retries
        // (wait bound 4000 ms), refund, no adaptation.
        "defaults" => pacer_config {
            rate_per_min: 60,
            burst: 10,
            idle_timeout_ms: 120_000,
            max_retries: 5,
            release_policy: 0,
            adaptive_floor_per_min: 0,
            adaptive_ceiling_per_min: 0,
        },
        // Rate 60, burst 1, idle 30000, 3 retries (wait bound 2000 ms,
        // hint cap 2 s: redis/tests/replay_vectors.rs), adaptive 30..60.
        "bookings" => pacer_config {
            rate_per_min: 60,
            burst: 1,
            idle_timeout_ms: 30_000,
            max_retries: 3,
            release_policy: 0,
            adaptive_floor_per_min: 30,
            adaptive_ceiling_per_min: 60,
        },
        other => panic!("unknown scenario {other}"),
    };
    let name = CString::new(path_or_name).expect("no NUL");
    let mut handle = MaybeUninit::<pacer_shared>::zeroed();
    // SAFETY: writable handle storage of the right size and alignment, a
    // NUL-terminated name and a valid config.
    ok(
        unsafe { pacer_shared_open(handle.as_mut_ptr(), name.as_ptr(), &config) },
        "open",
    );
    let mut p = std::ptr::null();
    // SAFETY: the handle was opened above.
    ok(
        unsafe { pacer_shared_pacer(handle.as_ptr(), &mut p) },
        "pacer",
    );
    // After the open, so at or after the file's creation: the bucket is
    // full at t0 (it was full when created, and the refill is capped).
    let t0 = pacer::shm::clock_ms();
    // SAFETY (every call below): `p` is the open handle's pacer, and every
    // out-pointer is writable storage of its type.
    let reserve = |t: u64| decision(|out| unsafe { pacer_reserve(p, t, out) });
    match scenario {
        "defaults" => {
            // 16 requests at t0: the burst of 10 at once; the 11th to 14th
            // wait 1000, 2000, 3000, 4000 ms (one token a second, bound
            // 4000); the 15th and 16th would wait 5000 ms: refused.
            for i in 0..16u64 {
                let d = reserve(t0);
                match i {
                    0..=9 => assert_eq!((d.kind, d.wait_ms), (ADMITTED, 0), "request {i}"),
                    10..=13 => assert_eq!(
                        (d.kind, d.wait_ms),
                        (ADMITTED, (i - 9) * 1000),
                        "request {i}"
                    ),
                    _ => assert_eq!((d.kind, d.required_wait_ms), (REFUSED, 5000), "request {i}"),
                }
            }
        }
        _ => {
            // A minute after the creation, when the search (at its
            // ceiling, 60/min) grants waits (adaptive::SEARCH_NO_WAITS_MS):
            // three at t1, waits 0, 1000, 2000 (bound 2000); the fourth
            // would wait 3000: refused.
            let t1 = t0 + 60_000;
            let first = reserve(t1);
            assert_eq!((first.kind, first.wait_ms), (ADMITTED, 0));
            for wait_ms in [1000, 2000] {
                let d = reserve(t1);
                assert_eq!((d.kind, d.wait_ms), (ADMITTED, wait_ms));
            }
            let refused = reserve(t1);
            assert_eq!((refused.kind, refused.required_wait_ms), (REFUSED, 3000));
            // With 3 retries left the same wait is within the horizon
            // 2000 + 3·2·1000: booked, slot t1 + 3000.
            let mut booking = MaybeUninit::<pacer::pacer::pacer_booking>::zeroed();
            let booked = decision(|out| unsafe {
                pacer_reserve_or_book(p, t1, 3, out, booking.as_mut_ptr())
            });
            assert_eq!(booked.kind, BOOKED);
            // SAFETY: a booked decision wrote the booking.
            let mut booking = unsafe { booking.assume_init() };
            assert_eq!(booking.slot_ms, t1 + 3000);
            // Presented at t1 + 1000: the slot is 2000 away, within the
            // bound: admitted after 2000.
            let redeemed = decision(|out| unsafe { pacer_redeem(p, &mut booking, t1 + 1000, out) });
            assert_eq!((redeemed.kind, redeemed.wait_ms), (ADMITTED, 2000));
            // The first admission's ticket given back: refunded (refund
            // policy).
            let mut ticket = first.ticket;
            let mut refunded = false;
            ok(
                unsafe { pacer_release(p, &mut ticket, t1 + 1000, &mut refunded) },
                "release",
            );
            assert!(refunded);
            // The upstream opened three and throttled two.
            for outcome in [1, 1, 1, 2, 2] {
                let mut rate = 0;
                ok(
                    unsafe { pacer_observe(p, outcome, t1 + 1000, &mut rate) },
                    "observe",
                );
            }
        }
    }
    // SAFETY: opened above, closed once.
    ok(unsafe { pacer_shared_close(handle.as_mut_ptr()) }, "close");
}

/// Not a test of its own: when [`DRIVE`] is set (by [`run_driver`]), this
/// binary drives a shared bucket and exits; otherwise it does nothing.
#[test]
fn drive_a_bucket_when_asked() {
    if let Ok(task) = std::env::var(DRIVE) {
        let (scenario, path) = task.split_once(':').expect("SCENARIO:PATH");
        drive(scenario, path);
    }
}

/// Runs this test binary as the driver of `scenario` on `path_or_name`, in
/// another process, to its end.
fn run_driver(scenario: &str, path_or_name: &str) {
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "drive_a_bucket_when_asked",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(DRIVE, format!("{scenario}:{path_or_name}"))
        .output()
        .expect("the driver runs");
    assert!(
        output.status.success(),
        "the driver failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// ------------------------------------------------------------------ helpers

/// The names in a directory, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("readable dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// `pacer watch ARGS --json`: each line parsed; asserts exit 0.
fn watch_json(args: &[&str]) -> Vec<Value> {
    let run = pacer(&[&["watch"], args, &["--json"]].concat(), "");
    assert_eq!(run.code, 0, "pacer watch {args:?} failed: {}", run.stderr);
    run.stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The wait histogram's cumulative counts (bounds 10, 50, 100, 500, 1000,
/// 2500, 5000, 10000 ms) of the `defaults` scenario: 10 immediate, waits
/// of 1000 (≤ 1000), 2000 (≤ 2500), 3000 and 4000 (≤ 5000).
const DEFAULTS_WAIT_LE: [u64; 8] = [10, 10, 10, 10, 11, 12, 14, 14];

/// A shared bucket in a temporary directory, with the `bookings` scenario
/// driven into it.
fn bookings_bucket() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bucket");
    run_driver("bookings", path.to_str().expect("UTF-8 path"));
    (dir, path)
}

// ------------------------------------------------------------------ shared

/// The `bookings` scenario's totals: admissions at t0 with waits 0, 1000
/// and 2000, and the booking redeemed after 2000 (4 admissions: 1 at once,
/// 3 after a wait, 5000 ms in all; 1000 in (500, 1000], the two 2000s in
/// (1000, 2500]); one refusal and one booking (the core counts a booking
/// as a refusal too: 2 refusals, 1 of them booked); one release,
/// refunded; three opened, two throttled. Watched three times, 10 ms
/// apart, with nothing driving it: the same totals each time, nothing in
/// the last minute, and the file's 65792 bytes as they were, with no
/// other file made beside it.
#[test]
fn a_shared_bucket_reports_the_counts_its_processes_made_and_is_not_written() {
    let (dir, path) = bookings_bucket();
    let before = std::fs::read(&path).expect("the bucket's file");
    assert_eq!(before.len(), 65792);
    let names = listing(dir.path());
    let path_text = path.to_str().unwrap();
    let frames = watch_json(&["--shared", path_text, "--count", "3", "--interval-ms", "10"]);
    assert_eq!(frames.len(), 3);
    let expected_totals = json!({
        "admissions": 4, "admitted": 1, "waited": 3, "refused": 1, "booked": 1,
        "redeemed": 1, "shaped": 0, "releases": 1, "refunded": 1, "release_refused": 0,
        "opened": 3, "throttled": 2, "clock_regressions": 0, "wait_ms_total": 5000,
        "wait_le": [1, 1, 1, 1, 2, 4, 4, 4],
    });
    for frame in &frames {
        assert_eq!(frame["totals"], expected_totals, "{frame}");
        assert_eq!(frame["source"], "shared");
        assert_eq!(frame["bucket"], path_text);
        assert_eq!(
            frame["config"],
            json!({"rate_per_min": 60, "burst": 1, "idle_timeout_ms": 30000, "max_retries": 3,
                   "release_policy": "refund", "adaptive_floor_per_min": 30,
                   "adaptive_ceiling_per_min": 60})
        );
        // Between the adaptive bounds, wherever the throttles and the
        // clock have moved it.
        let rate = frame["rate_in_force_per_min"].as_u64().unwrap();
        assert!((30..=60).contains(&rate), "{rate}");
        // Less than a minute of samples, and nothing decided meanwhile.
        let minute = &frame["last_minute"];
        assert_eq!(minute["complete"], false);
        assert_eq!(
            [
                &minute["admissions"],
                &minute["refused"],
                &minute["booked"],
                &minute["throttled"]
            ],
            [&json!(0), &json!(0), &json!(0), &json!(0)]
        );
        assert_eq!(frame["admissions_per_minute"], json!([]));
        // The line of slots ahead is the debt in whole tokens, rounded up
        // (however far the clock has moved since the driver's debits),
        // and the bookings past the bound are some of it.
        let tokens = frame["tokens"].as_f64().unwrap();
        let queue = &frame["queue"];
        let ahead = queue["slots_ahead"].as_u64().unwrap();
        assert_eq!(ahead as f64, (-tokens).max(0.0).ceil(), "{frame}");
        assert!(
            queue["booked_beyond_bound"].as_u64().unwrap() <= ahead,
            "{frame}"
        );
    }
    assert_eq!(frames[0]["last_minute"]["window_ms"], 0);
    assert_eq!(std::fs::read(&path).expect("still there"), before);
    assert_eq!(listing(dir.path()), names);
}

/// A bare name is the file /dev/shm/NAME. The `defaults` scenario: 10
/// admitted at once, 4 after waits of 1000..4000 ms (10000 ms in all), 2
/// refused, nothing booked, released or observed.
#[test]
fn a_bare_name_is_watched_in_dev_shm() {
    let name = format!("pacer-watch-test-{}", std::process::id());
    struct Unlink(PathBuf);
    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let file = Unlink(PathBuf::from("/dev/shm").join(&name));
    run_driver("defaults", &name);
    let before = std::fs::read(&file.0).expect("the bucket's file");
    let frames = watch_json(&["--shared", &name, "--count", "1"]);
    let totals = &frames[0]["totals"];
    assert_eq!(
        totals,
        &json!({
            "admissions": 14, "admitted": 10, "waited": 4, "refused": 2, "booked": 0,
            "redeemed": 0, "shaped": 0, "releases": 0, "refunded": 0, "release_refused": 0,
            "opened": 0, "throttled": 0, "clock_regressions": 0, "wait_ms_total": 10000,
            "wait_le": DEFAULTS_WAIT_LE,
        })
    );
    assert_eq!(frames[0]["bucket"], name.as_str());
    assert_eq!(frames[0]["config"]["adaptive_floor_per_min"], Value::Null);
    assert_eq!(frames[0]["rate_in_force_per_min"], 60);
    // Four waiting admissions debited past the burst, no booking: at most
    // four slots ahead, none past the wait bound.
    let queue = &frames[0]["queue"];
    assert!(queue["slots_ahead"].as_u64().unwrap() <= 4, "{queue}");
    assert_eq!(queue["booked_beyond_bound"], 0, "{queue}");
    assert_eq!(std::fs::read(&file.0).unwrap(), before);
}

/// The text display of the `bookings` bucket: the same totals, in words.
#[test]
fn the_text_display_shows_the_rate_the_tokens_and_the_totals() {
    let (_dir, path) = bookings_bucket();
    let run = pacer(
        &["watch", "--shared", path.to_str().unwrap(), "--count", "1"],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    common::assert_contains_all(
        &run.stdout,
        &[
            "rate 60/min, burst 1, idle 30000 ms, 3 retries, refund, adaptive 30..60/min",
            "rate in force",
            "tokens",
            "slots ahead (",
            "booked beyond the wait bound)",
            "less than a minute of samples",
            "(after a minute of samples)",
            "admitted 1, waited 3, refused 1, booked 1, redeemed 1",
            "releases 1 (1 refunded, 0 not)",
            "upstream opened 3, throttled 2",
        ],
    );
}

/// Writes `bytes` to a fresh file in `dir` and returns its path.
fn file_with(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

/// A layout-4 header's first 12 bytes with layout version `version`.
fn head(version: u32) -> Vec<u8> {
    let mut bytes = b"PACERSHM".to_vec();
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes
}

/// Runs a watch that must fail: exit 2, one line on stderr holding
/// `needle`, nothing on stdout.
fn refused(args: &[&str], needle: &str) {
    let run = pacer(&[&["watch"], args].concat(), "");
    assert_eq!(
        run.code, 2,
        "pacer watch {args:?}: {}{}",
        run.stdout, run.stderr
    );
    assert_eq!(run.stdout, "", "{args:?}");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert!(run.stderr.starts_with("pacer: "), "{}", run.stderr);
    assert!(
        run.stderr.contains(needle),
        "{needle:?} not in {}",
        run.stderr
    );
}

/// Files that are no layout-4 bucket are refused with what is wrong, and
/// left as they were; a name that does not exist is not created.
#[test]
fn a_missing_or_foreign_or_old_shared_file_is_one_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent");
    refused(
        &["--shared", missing.to_str().unwrap()],
        "no shared bucket at",
    );
    assert!(!missing.exists(), "the watch created the file");
    let name = format!("pacer-watch-absent-{}", std::process::id());
    refused(&["--shared", &name], &format!("/dev/shm/{name}"));
    assert!(!Path::new("/dev/shm").join(&name).exists());
    refused(&["--shared", ""], "empty");

    // A layout-3 bucket's header (a whole file of that size, zeroes after
    // the version): refused for its layout, before anything else.
    let mut old = head(3);
    old.resize(65792, 0);
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            file_with(dir.path(), "layout3", &old),
            "layout 3 bucket; this pacer reads layout 4",
        ),
        (
            file_with(dir.path(), "layout5", &head(5)),
            "layout 5 bucket",
        ),
        (
            file_with(dir.path(), "foreign", &[b'x'; 65792]),
            "not a pacer shared bucket",
        ),
        (
            file_with(dir.path(), "empty", b""),
            "not a pacer shared bucket",
        ),
        (file_with(dir.path(), "short", &head(4)), "truncated"),
    ];
    for (path, needle) in &cases {
        let before = std::fs::read(path).unwrap();
        refused(&["--shared", path.to_str().unwrap()], needle);
        assert_eq!(&std::fs::read(path).unwrap(), &before, "{}", path.display());
    }
    // A real bucket cut short.
    let (_bucket_dir, bucket) = bookings_bucket();
    let mut cut = std::fs::read(&bucket).unwrap();
    cut.truncate(65600);
    let cut = file_with(dir.path(), "cut", &cut);
    refused(
        &["--shared", cut.to_str().unwrap()],
        "65600 bytes, a layout 4 bucket has 65792",
    );
    // A directory.
    refused(
        &["--shared", dir.path().to_str().unwrap()],
        "not a regular file",
    );
}

/// Breaks the first eight bytes of a real bucket's copy; then its ready
/// mark: each refused.
#[test]
fn a_bucket_with_a_broken_header_is_refused() {
    let (dir, bucket) = bookings_bucket();
    let good = std::fs::read(&bucket).unwrap();
    let mut no_magic = good.clone();
    no_magic[0] = b'p';
    let no_magic = file_with(dir.path(), "no-magic", &no_magic);
    refused(
        &["--shared", no_magic.to_str().unwrap()],
        "no PACERSHM magic number",
    );
    let mut not_ready = good.clone();
    not_ready[32..36].copy_from_slice(b"WAIT");
    let not_ready = file_with(dir.path(), "not-ready", &not_ready);
    refused(&["--shared", not_ready.to_str().unwrap()], "incomplete");
    let mut moved = good;
    moved[104..112].copy_from_slice(&65600u64.to_le_bytes());
    let moved = file_with(dir.path(), "moved", &moved);
    refused(
        &["--shared", moved.to_str().unwrap()],
        "offsets [65536, 65552, 65600]",
    );
}

// ------------------------------------------------------------------ Prometheus

/// A watch serving /metrics: killed (it is ours) when dropped.
struct Serving {
    child: Child,
    address: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `pacer watch ARGS --prometheus 127.0.0.1:0` (one reading an
/// hour: the scrapes read the bucket themselves) and waits for the address
/// it prints.
fn serve(args: &[&str]) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(
            [
                &["watch"],
                args,
                &[
                    "--prometheus",
                    "127.0.0.1:0",
                    "--interval-ms",
                    "3600000",
                    "--json",
                ],
            ]
            .concat(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pacer runs");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    lines.read_line(&mut line).expect("a line on stderr");
    let address = line
        .trim()
        .strip_prefix("pacer: serving /metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    Serving { child, address }
}

/// One HTTP/1.1 request; gives the status line, the headers (lower-case
/// names) and the body.
fn http_get(
    address: &str,
    path: &str,
    accept: Option<&str>,
) -> (String, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("headers, then a body");
    let mut head_lines = head.lines();
    let status = head_lines.next().unwrap_or_default().to_string();
    let headers = head_lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn value_of(
    scrape: &prometheus_parse::Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> prometheus_parse::Value {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no {metric} {labels:?}"))
        .value
        .clone()
}

fn counter(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    match value_of(scrape, metric, labels) {
        prometheus_parse::Value::Counter(v) => v,
        other => panic!("{metric} is not a counter: {other:?}"),
    }
}

/// docs/metrics.md's table of the metric set: `(name, type)` per row.
fn metric_table() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))
        .expect("docs/metrics.md");
    doc.lines()
        .filter_map(|line| {
            let mut cells = line.strip_prefix("| `pacer_")?.split('|');
            let name = format!("pacer_{}", cells.next()?.trim().trim_end_matches('`'));
            Some((name, cells.next()?.trim().to_string()))
        })
        .collect()
}

/// The `bookings` bucket scraped over HTTP: the names, types and values
/// of docs/metrics.md under the `bucket` label given, the file unchanged.
#[test]
fn prometheus_serves_the_metric_set_of_a_shared_bucket() {
    let (_dir, path) = bookings_bucket();
    let before = std::fs::read(&path).unwrap();
    let label = "proxy-a";
    let serving = serve(&["--shared", path.to_str().unwrap(), "--bucket", label]);
    let (status, headers, body) = http_get(&serving.address, "/metrics", None);
    assert!(status.contains("200"), "{status}");
    assert!(headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("text/plain; version=0.0.4")));
    let scrape =
        prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let bucket = ("bucket", label);
    for (decision, count) in [
        ("admitted", 1.0),
        ("waited", 3.0),
        ("refused", 1.0),
        ("booked", 1.0),
    ] {
        assert_eq!(
            counter(
                &scrape,
                "pacer_decisions_total",
                &[bucket, ("decision", decision)]
            ),
            count,
            "{decision}"
        );
    }
    assert_eq!(counter(&scrape, "pacer_redeemed_total", &[bucket]), 1.0);
    assert_eq!(counter(&scrape, "pacer_shaped_total", &[bucket]), 0.0);
    assert_eq!(
        counter(&scrape, "pacer_clock_regressions_total", &[bucket]),
        0.0
    );
    assert_eq!(
        counter(
            &scrape,
            "pacer_releases_total",
            &[bucket, ("refunded", "true")]
        ),
        1.0
    );
    assert_eq!(
        counter(
            &scrape,
            "pacer_releases_total",
            &[bucket, ("refunded", "false")]
        ),
        0.0
    );
    assert_eq!(
        counter(
            &scrape,
            "pacer_upstream_outcomes_total",
            &[bucket, ("outcome", "opened")]
        ),
        3.0
    );
    assert_eq!(
        counter(
            &scrape,
            "pacer_upstream_outcomes_total",
            &[bucket, ("outcome", "throttled")]
        ),
        2.0
    );
    // Waits 0, 1000, 2000, 2000 ms: cumulative 1 up to 0.5 s, 2 at 1 s, 4
    // from 2.5 s; +Inf and the count 4; the sum 5 s.
    let prometheus_parse::Value::Histogram(buckets) =
        value_of(&scrape, "pacer_wait_seconds", &[bucket])
    else {
        panic!("pacer_wait_seconds is not a histogram");
    };
    let got: Vec<(f64, f64)> = buckets.iter().map(|b| (b.less_than, b.count)).collect();
    assert_eq!(
        got,
        vec![
            (0.01, 1.0),
            (0.05, 1.0),
            (0.1, 1.0),
            (0.5, 1.0),
            (1.0, 2.0),
            (2.5, 4.0),
            (5.0, 4.0),
            (10.0, 4.0),
            (f64::INFINITY, 4.0)
        ]
    );
    let untyped = |metric: &str| match value_of(&scrape, metric, &[bucket]) {
        prometheus_parse::Value::Untyped(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Counter(v) => v,
        other => panic!("{metric}: {other:?}"),
    };
    assert_eq!(untyped("pacer_wait_seconds_sum"), 5.0);
    assert_eq!(untyped("pacer_wait_seconds_count"), 4.0);
    let rate = match value_of(&scrape, "pacer_rate_in_force_per_minute", &[bucket]) {
        prometheus_parse::Value::Gauge(v) => v,
        other => panic!("the rate is not a gauge: {other:?}"),
    };
    assert!((30.0..=60.0).contains(&rate), "{rate}");
    assert!(matches!(
        value_of(&scrape, "pacer_tokens", &[bucket]),
        prometheus_parse::Value::Gauge(_)
    ));
    // Every family of docs/metrics.md's table, typed as there, but the
    // two a watch has no counts for (bookings held in a process, a fleet
    // client's fallbacks); and no other family.
    let mut documented = Vec::new();
    for (name, kind) in metric_table() {
        if name == "pacer_bookings_pending" || name == "pacer_fallbacks_total" {
            assert!(!body.contains(&name), "{name} in\n{body}");
            continue;
        }
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "no TYPE {kind} for {name} in\n{body}"
        );
        documented.push(name);
    }
    assert_eq!(documented.len(), 9);
    assert_eq!(body.matches("# TYPE ").count(), documented.len(), "{body}");
    // OpenMetrics when asked for.
    let (_, headers, body) = http_get(
        &serving.address,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    );
    assert!(headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("application/openmetrics-text")));
    assert!(body.ends_with("# EOF\n"), "{body}");
    // Anything else is not found.
    let (status, _, _) = http_get(&serving.address, "/", None);
    assert!(status.contains("404"), "{status}");
    drop(serving);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// A label with a double quote, a backslash and a line break is escaped
/// by the library as the text format says (`\"`, `\\`, `\n`). Checked
/// on the exposition's text: prometheus-parse keeps label values as
/// written, escapes and all.
#[test]
fn the_bucket_label_is_escaped_in_the_exposition() {
    let (_dir, path) = bookings_bucket();
    let label = "proxy \"a\" \\ 1\nsecond line";
    let serving = serve(&["--shared", path.to_str().unwrap(), "--bucket", label]);
    let (_, _, body) = http_get(&serving.address, "/metrics", None);
    let escaped = r#"bucket="proxy \"a\" \\ 1\nsecond line""#;
    assert!(
        body.contains(&format!("pacer_redeemed_total{{{escaped}}} 1\n")),
        "{body}"
    );
    assert_eq!(
        body.matches(escaped).count(),
        body.lines().filter(|l| !l.starts_with('#')).count()
    );
}

/// Bad addresses and labels: one line, exit 2.
#[test]
fn a_bad_prometheus_address_or_label_is_one_error() {
    let (_dir, path) = bookings_bucket();
    let path = path.to_str().unwrap();
    refused(
        &[
            "--shared",
            path,
            "--prometheus",
            "not an address",
            "--count",
            "1",
        ],
        "cannot serve /metrics on not an address",
    );
    refused(
        &["--shared", path, "--bucket", "", "--count", "1"],
        "--bucket needs a label",
    );
    // A port already taken.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    refused(
        &["--shared", path, "--prometheus", &address, "--count", "1"],
        "cannot serve /metrics",
    );
}

// ------------------------------------------------------------------ Redis

/// A `redis-server` (no module) on a free loopback port in a temporary
/// directory; killed when dropped. scripts/test.sh installs redis-server
/// (scripts/redis-deps.sh) before the tests.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|path| Path::new(path).exists())
            .expect("redis-server: run scripts/redis-deps.sh, which installs it");
        let dir = tempfile::Builder::new()
            .prefix("pacer-watch-redis-")
            .tempdir()
            .unwrap();
        for _ in 0..20 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new(binary)
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--protected-mode", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken meanwhile: another one
                }
                let ping = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .and_then(|c| c.get_connection())
                    .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
                if ping.is_ok() {
                    return Redis {
                        child,
                        port,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redis-server");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn con(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pacer hammer` on `key` through `door`: the admissions' waits, ms, and
/// how many were refused.
fn hammer(server: &Redis, key: &str, door: &str, calls: u64) -> (Vec<u64>, u64) {
    let run = pacer(
        &[
            "hammer",
            "--redis",
            &server.url(),
            "--key",
            key,
            "--door",
            door,
            "--calls",
            &calls.to_string(),
            "--every-ms",
            "0",
        ],
        "",
    );
    assert_eq!(run.code, 0, "hammer: {}", run.stderr);
    let answers: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len() as u64, calls);
    let count = |kind: &str| answers.iter().filter(|a| a["answer"] == kind).count() as u64;
    let waits = answers
        .iter()
        .filter(|a| a["answer"] == "admitted")
        .map(|a| a["wait_ms"].as_u64().expect("a wait"))
        .collect();
    (waits, count("refused"))
}

/// The totals a Redis key keeps after a hammer run answered `waits` (the
/// admissions') and `refused` refusals, counted from the answers (none
/// shaped: the default configuration refuses, rate 60 with bound 4833 ms;
/// the hammer neither books, releases nor observes): every count but the
/// clock regressions, which a key does not keep.
fn totals_of(waits: &[u64], refused: u64) -> Value {
    let waited = waits.iter().filter(|&&w| w > 0).count() as u64;
    let wait_le: Vec<u64> = pacer_core::WAIT_BOUNDS_MS
        .iter()
        .map(|&bound| waits.iter().filter(|&&w| w <= bound).count() as u64)
        .collect();
    json!({
        "admissions": waits.len(), "admitted": waits.len() as u64 - waited, "waited": waited,
        "refused": refused, "booked": 0, "redeemed": 0, "shaped": 0,
        "releases": 0, "refunded": 0, "release_refused": 0, "opened": 0,
        "throttled": 0, "clock_regressions": null, "wait_ms_total": waits.iter().sum::<u64>(),
        "wait_le": wait_le,
    })
}

fn get(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

/// 30 reserves by the script (EVALSHA) and 30 by the function library
/// (FCALL), each on a key of its own with the defaults, as fast as the
/// server answers: the watch's totals are the hammer's answers, counted
/// (how many were admitted depends on how fast they went; the watch must
/// say the same, waits and their histogram included). The keys' bytes are
/// the same before and after, and the watch adds no key. What a key does
/// not keep (clock regressions) is null.
#[test]
fn a_redis_bucket_reports_what_the_hammer_was_answered_and_is_not_written() {
    let server = Redis::start();
    let mut con = server.con();
    let library = pacer_cli::engine::function_library(pacer_cli::engine::SCRIPT, "pacer");
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&library)
        .query(&mut con)
        .unwrap();
    for (door, key) in [("script", "watch:script"), ("function", "watch:function")] {
        let (waits, refused_count) = hammer(&server, key, door, 30);
        assert!(waits.len() >= 10, "the burst at least: {waits:?}");
        let before = get(&mut con, key).expect("the bucket's key");
        let keys_before: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        // Auto: the server has no module, so the function answers (both
        // keys are read through it); then each door by name.
        for watch_door in ["auto", door] {
            let frames = watch_json(&[
                "--redis",
                &server.url(),
                "--key",
                key,
                "--door",
                watch_door,
                "--count",
                "2",
                "--interval-ms",
                "10",
            ]);
            assert_eq!(frames.len(), 2);
            for frame in &frames {
                assert_eq!(
                    frame["totals"],
                    totals_of(&waits, refused_count),
                    "{door} via {watch_door}"
                );
                assert_eq!(frame["source"], "redis");
                assert_eq!(frame["bucket"], key);
                assert_eq!(frame["config"]["rate_per_min"], 60);
                assert_eq!(frame["config"]["burst"], 10);
                assert_eq!(frame["rate_in_force_per_min"], 60);
                // Two samples 10 ms apart: nothing decided between them,
                // so no quantile of the last minute's waits.
                assert_eq!(frame["last_minute"]["wait_p50_ms"], Value::Null);
            }
        }
        assert_eq!(get(&mut con, key), Some(before), "{door}: the key changed");
        let keys_after: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        assert_eq!(keys_after, keys_before);
    }
}

/// A Redis bucket's exposition: decisions, waits, upstream answers,
/// shaping, redemptions and releases as the key counts them (equal to the
/// hammer's answers), the two gauges, and no clock regressions (a key does
/// not keep them).
#[test]
fn prometheus_serves_what_a_redis_key_keeps() {
    let server = Redis::start();
    let (waits, refused_count) = hammer(&server, "watch:prom", "script", 20);
    let serving = serve(&["--redis", &server.url(), "--key", "watch:prom"]);
    let (status, _, body) = http_get(&serving.address, "/metrics", None);
    assert!(status.contains("200"), "{status}");
    let scrape =
        prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let bucket = ("bucket", "watch:prom");
    assert_eq!(
        counter(
            &scrape,
            "pacer_decisions_total",
            &[bucket, ("decision", "refused")]
        ),
        refused_count as f64
    );
    assert_eq!(
        counter(
            &scrape,
            "pacer_decisions_total",
            &[bucket, ("decision", "booked")]
        ),
        0.0
    );
    assert_eq!(
        counter(
            &scrape,
            "pacer_releases_total",
            &[bucket, ("refunded", "true")]
        ),
        0.0
    );
    let waited = waits.iter().filter(|&&w| w > 0).count() as f64;
    for (decision, count) in [
        ("admitted", waits.len() as f64 - waited),
        ("waited", waited),
    ] {
        assert_eq!(
            counter(
                &scrape,
                "pacer_decisions_total",
                &[bucket, ("decision", decision)]
            ),
            count,
            "{decision}"
        );
    }
    for outcome in ["opened", "throttled"] {
        assert_eq!(
            counter(
                &scrape,
                "pacer_upstream_outcomes_total",
                &[bucket, ("outcome", outcome)]
            ),
            0.0,
            "{outcome}"
        );
    }
    assert!(body.contains("pacer_wait_seconds"), "{body}");
    assert!(body.contains("pacer_shaped_total"), "{body}");
    assert!(body.contains("pacer_redeemed_total"), "{body}");
    assert!(!body.contains("pacer_clock_regressions"), "{body}");
    assert!(matches!(
        value_of(&scrape, "pacer_rate_in_force_per_minute", &[bucket]),
        prometheus_parse::Value::Gauge(60.0)
    ));
}

/// A missing key, a list, a string that is no bucket, a closed port: one
/// line, exit 2, and the database as it was (no key made, none changed).
#[test]
fn a_missing_or_foreign_redis_key_or_a_closed_port_is_one_error_and_nothing_is_written() {
    let server = Redis::start();
    let mut con = server.con();
    let _: () = redis::cmd("RPUSH")
        .arg("a-list")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("a-string")
        .arg("hello")
        .query(&mut con)
        .unwrap();
    let url = server.url();
    for door in ["auto", "script"] {
        refused(
            &["--redis", &url, "--key", "absent", "--door", door],
            "no bucket at key 'absent'",
        );
        refused(
            &["--redis", &url, "--key", "a-list", "--door", door],
            "key 'a-list' holds another type, not a pacer bucket (WRONGTYPE",
        );
        refused(
            &["--redis", &url, "--key", "a-string", "--door", door],
            "not a pacer bucket",
        );
    }
    refused(
        &["--redis", &url, "--key", "absent", "--door", "module"],
        "unknown command",
    );
    refused(&["--redis", &url, "--key", ""], "--key needs a key");
    let keys: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 2);
    assert_eq!(get(&mut con, "a-string"), Some(b"hello".to_vec()));
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg("a-list")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(list, ["x"]);
    // A port nothing listens on: bound, then closed.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    refused(
        &[
            "--redis",
            &format!("redis://127.0.0.1:{port}/"),
            "--key",
            "k",
        ],
        "cannot reach Redis at",
    );
}

/// The command line: a source is needed, and one only of a kind.
#[test]
fn the_command_line_needs_one_bucket() {
    refused(&[], "required");
    refused(&["--redis", "redis://127.0.0.1:1/"], "required");
    refused(&["--key", "k"], "required");
    refused(&["--shared", "x", "--interval-ms", "0"], "--interval-ms");
}

/// How many times `server` ran `command` (lower case), by INFO commandstats.
fn command_calls(con: &mut redis::Connection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// The script's cache emptied between two calls of `pacer hammer --door
/// script`: the second call's EVALSHA answers NOSCRIPT, the script is
/// loaded again and the call retried once by EVAL of the script (a
/// replica promoted a moment ago may have missed the load), admitted. The
/// cache is emptied once the first answer is printed; the second call
/// comes 5 s after it.
#[test]
fn the_hammer_retries_a_noscript_by_eval_of_the_script() {
    let server = Redis::start();
    let mut con = server.con();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args([
            "hammer",
            "--redis",
            &server.url(),
            "--key",
            "hammer:noscript",
        ])
        .args(["--door", "script", "--calls", "2", "--every-ms", "5000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pacer binary runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let second: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(lines.next().is_none());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(child.wait().unwrap().success(), "hammer: {stderr}");
    for answer in [&first, &second] {
        assert_eq!(answer["answer"], "admitted", "{answer}");
        assert_eq!(answer["wait_ms"], 0, "{answer}");
    }
    // One EVALSHA each, one EVAL for the retry; two loads.
    assert_eq!(command_calls(&mut con, "evalsha"), 2);
    assert_eq!(command_calls(&mut con, "eval"), 1);
    assert_eq!(command_calls(&mut con, "script|load"), 2);
}
