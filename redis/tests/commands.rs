//! The module, the script and the script loaded as a function library are
//! three doors to one bucket format: a bucket one creates, another uses; a
//! bad call or an edited key gets the same error from each and changes
//! nothing; and the replies are the same structure in RESP2 and RESP3.

mod common;

use common::{call, eval, fcall, Server};
use redis::Value;

const CONFIG: [&str; 5] = ["60", "2", "30000", "3", "refund"];

/// `SET key value`.
fn store(con: &mut redis::Connection, key: &str, value: &[u8]) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(con)
        .expect("SET");
}

fn bytes(con: &mut redis::Connection, key: &str) -> Value {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn module(
    con: &mut redis::Connection,
    op: &str,
    key: &str,
    args: &[&str],
) -> Result<Value, String> {
    let name = format!("PACER.{}", op.to_uppercase());
    let mut argv = vec![name.as_str(), key];
    argv.extend_from_slice(args);
    call(con, &argv)
}

/// A test-clock server with the module, the script (its SHA1) and the
/// function (its name) loaded, and CONFIG at `AT 0`.
struct Doors {
    server: Server,
    con: redis::Connection,
    sha: String,
    function: String,
    with_at: Vec<&'static str>,
}

impl Doors {
    fn open() -> Doors {
        let (server, con, sha, function) = common::every_engine();
        let mut with_at: Vec<&str> = CONFIG.to_vec();
        with_at.extend(["AT", "0"]);
        Doors {
            server,
            con,
            sha,
            function,
            with_at,
        }
    }
}

/// The server's clock as the engines read it: TIME's s·1000 + ⌊µs/1000⌋.
fn server_ms(con: &mut redis::Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    s * 1000 + us / 1000
}

/// Each `(name, value)` is INFO's integer for `name` (engine: for messages).
fn assert_info(info: &Value, engine: &str, expected: &[(&str, i64)]) {
    for &(name, value) in expected {
        assert_eq!(info_value(info, name), Value::Int(value), "{engine} {name}");
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a string: {other:?}"),
    }
}

/// With the config above (rate 60 → one token per 1000 ms, burst 2, idle
/// 30000, 3 retries → bound min(15000, ⌊(30000 − 14000)/8⌋) = 2000): two
/// admissions at once, the third waits 1000 ms, the fourth 2000, the fifth
/// would need 3000 > 2000 and is refused with hint ⌊2000/1000⌋ = 2.
#[test]
fn a_bucket_made_by_one_engine_is_used_by_the_other() {
    let server = Server::with_module();
    let mut con = server.connect();
    let sha = common::load_script(&mut con, &common::test_clock_script());
    let key = "both";
    let config_at = |t: &str| {
        let mut v: Vec<String> = CONFIG.iter().map(|s| s.to_string()).collect();
        v.extend(["AT".to_string(), t.to_string()]);
        v
    };
    let at0 = config_at("0");
    let at0: Vec<&str> = at0.iter().map(String::as_str).collect();
    assert_eq!(
        module(&mut con, "create", key, &at0).unwrap(),
        Value::Int(1)
    );
    assert_eq!(
        eval(&mut con, &sha, key, "create", &at0).unwrap(),
        Value::Int(0)
    );
    let waits: Vec<i64> = (0..4)
        .map(|i| {
            let reply = if i % 2 == 0 {
                module(&mut con, "reserve", key, &at0).unwrap()
            } else {
                eval(&mut con, &sha, key, "reserve", &at0).unwrap()
            };
            match reply {
                Value::Array(items) => match items[1] {
                    Value::Int(wait) => wait,
                    ref other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(waits, [0, 0, 1000, 2000]);
    let refused = eval(&mut con, &sha, key, "reserve", &at0).unwrap();
    assert_eq!(
        refused,
        Value::Array(vec![
            Value::BulkString(b"refused".to_vec()),
            Value::Int(2),
            Value::Int(3000),
            Value::Int(0)
        ])
    );
    // On a second bucket: a ticket the module issued released by the
    // script, and the script's own by the module.
    let second = "both2";
    assert_eq!(
        module(&mut con, "create", second, &at0).unwrap(),
        Value::Int(1)
    );
    let by_module = match module(&mut con, "reserve", second, &at0).unwrap() {
        Value::Array(items) => text(&items[2]),
        other => panic!("{other:?}"),
    };
    let by_script = match eval(&mut con, &sha, second, "reserve", &at0).unwrap() {
        Value::Array(items) => text(&items[2]),
        other => panic!("{other:?}"),
    };
    assert!(by_module.starts_with("0.1.60000.0."), "{by_module}");
    assert!(by_script.starts_with("1.2.60000.0."), "{by_script}");
    assert_eq!(
        eval(&mut con, &sha, second, "release", &[&by_module, "AT", "0"]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(
        module(&mut con, "release", second, &[&by_script, "AT", "0"]).unwrap(),
        Value::Int(1)
    );
    // Each engine now refuses the other's ticket again: it is spent.
    for (engine_is_module, ticket) in [(true, &by_module), (false, &by_script)] {
        let error = if engine_is_module {
            module(&mut con, "release", second, &[ticket, "AT", "0"])
        } else {
            eval(&mut con, &sha, second, "release", &[ticket, "AT", "0"])
        }
        .unwrap_err();
        assert_eq!(error, "ERR pacer: ticket already released");
    }
    // Both read the same INFO.
    assert_eq!(
        module(&mut con, "info", second, &["AT", "0"]).unwrap(),
        eval(&mut con, &sha, second, "info", &["AT", "0"]).unwrap()
    );
}

/// One key, written in turn by the function, the module and the script:
/// each call continues from the last one's bytes, whoever wrote them (the
/// function remembers the header it wrote and must notice another's).
/// Config as above: two admissions at once, then waits of 1000 and 2000 ms,
/// then a refusal with hint 2.
#[test]
fn the_function_continues_from_whichever_engine_wrote_last() {
    let Doors {
        server: _server, // the server stops when this is dropped
        mut con,
        sha,
        function,
        with_at,
    } = Doors::open();
    let engines = ["function", "module", "function", "script", "function"];
    let waits = [0, 0, 1000, 2000];
    for (i, engine) in engines.iter().enumerate() {
        let reply = match *engine {
            "function" => fcall(&mut con, &function, "turns", "reserve", &with_at),
            "module" => module(&mut con, "reserve", "turns", &with_at),
            _ => eval(&mut con, &sha, "turns", "reserve", &with_at),
        }
        .unwrap();
        let Value::Array(items) = reply else {
            panic!("{engine}: {reply:?}")
        };
        if i < waits.len() {
            assert_eq!(
                items[0],
                Value::BulkString(b"admitted".to_vec()),
                "{engine} call {i}"
            );
            assert_eq!(items[1], Value::Int(waits[i]), "{engine} call {i}");
            let ticket = text(&items[2]);
            let serial_seq = format!("{i}.{}.60000.0.", i + 1);
            assert!(
                ticket.starts_with(&serial_seq),
                "{engine} call {i}: {ticket}"
            );
        } else {
            assert_eq!(
                items[0],
                Value::BulkString(b"refused".to_vec()),
                "{engine} call {i}"
            );
            assert_eq!(items[1], Value::Int(2), "{engine} call {i}");
        }
    }
    // The module and the function read the same bucket.
    assert_eq!(
        module(&mut con, "info", "turns", &["AT", "0"]).unwrap(),
        fcall(&mut con, &function, "turns", "info", &["AT", "0"]).unwrap()
    );
}

/// Bad calls: the module, the script and the function answer the same
/// error and change nothing.
#[test]
fn bad_calls_get_the_same_error_from_every_engine_and_change_nothing() {
    let (server, mut con, sha, function) = common::every_engine();
    let mut setup = |args: &[&str]| call(&mut con, args).expect("setup");
    for key in ["a", "b"] {
        setup(&[&["PACER.CREATE", key][..], &CONFIG, &["AT", "0"]].concat());
    }
    setup(&["RPUSH", "list", "x"]);
    setup(&["SET", "plain", "hello"]);
    let mut con = server.connect();
    let reserve = |key: &str| -> String {
        let mut con = server.connect();
        let reply = module(
            &mut con,
            "reserve",
            key,
            &["60", "2", "30000", "3", "refund", "AT", "0"],
        )
        .unwrap();
        match reply {
            Value::Array(items) => text(&items[2]),
            other => panic!("{other:?}"),
        }
    };
    let ticket_a = reserve("a");
    let ticket_b = reserve("b");
    let edited_debit = ticket_a.replacen(".60000.", ".59999.", 1);
    let (head, mac) = ticket_a.rsplit_once('.').unwrap();
    let flipped = format!(
        "{head}.{}{}",
        if mac.starts_with('0') { '1' } else { '0' },
        &mac[1..]
    );
    let cases: Vec<(&str, &str, Vec<&str>, String)> = vec![
        ("reserve", "a", vec!["60", "2", "30000", "3"], "ERR pacer: wrong number of arguments for reserve".into()),
        ("reserve", "a", vec!["x", "2", "30000", "3", "refund"], "ERR pacer: rate_per_min must be a whole number below 2^52, got 'x'".into()),
        ("reserve", "a", vec!["60", "02", "30000", "3", "refund"], "ERR pacer: burst must be a whole number below 2^52, got '02'".into()),
        ("reserve", "a", vec!["60", "2", "30000", "3", "Refund"], "ERR pacer: release_policy must be refund or strict, got 'Refund'".into()),
        ("reserve", "a", vec!["601", "2", "30000", "3", "refund"], "ERR pacer: rate_per_min 601 is above 600".into()),
        ("reserve", "a", vec!["60", "1000001", "30000", "3", "refund"], "ERR pacer: burst 1000001 is above 1000000".into()),
        ("reserve", "a", vec!["60", "2", "30000", "4", "refund"], "ERR pacer: max_retries 4 is above 3, the most whose backoff ladder fits a 30000 ms idle timeout".into()),
        ("reserve", "a", vec!["60", "3", "30000", "3", "refund"], "ERR pacer: bucket 'a' was created with rate_per_min=60 burst=2 idle_timeout_ms=30000 max_retries=3 release_policy=refund; this call has rate_per_min=60 burst=3 idle_timeout_ms=30000 max_retries=3 release_policy=refund".into()),
        ("reserve", "a", vec!["60", "2", "30000", "3", "refund", "AT", "4503599627370496"], "ERR pacer: AT must be a whole number below 2^52, got '4503599627370496'".into()),
        ("reserve", "a", vec!["60", "2", "30000", "3", "refund", "NOW", "5"], "ERR pacer: unknown argument 'NOW'".into()),
        ("reserve", "list", vec!["60", "2", "30000", "3", "refund"], "WRONGTYPE Operation against a key holding the wrong kind of value".into()),
        ("reserve", "plain", vec!["60", "2", "30000", "3", "refund"], "ERR pacer: key 'plain' is not a pacer bucket".into()),
        ("book", "a", vec!["60", "2", "30000", "3", "refund", "-1"], "ERR pacer: retries_left must be a whole number below 2^52, got '-1'".into()),
        ("release", "a", vec!["nonsense"], "ERR pacer: malformed ticket 'nonsense'".into()),
        ("release", "a", vec![&ticket_b], "ERR pacer: ticket not issued by this bucket".into()),
        ("release", "a", vec![&edited_debit], "ERR pacer: ticket not issued by this bucket".into()),
        ("release", "a", vec![&flipped], "ERR pacer: ticket not issued by this bucket".into()),
        ("redeem", "a", vec![&ticket_a], "ERR pacer: not a booking".into()),
        ("release", "missing", vec![&ticket_a], "ERR pacer: no bucket at key 'missing'".into()),
        ("info", "missing", vec![], "ERR pacer: no bucket at key 'missing'".into()),
        ("release", "a\u{1}b", vec![&ticket_a], "ERR pacer: no bucket at key 'a\\x01b'".into()),
    ];
    for (op, key, args, expected) in &cases {
        let before: Vec<Value> = ["a", "b", "plain"]
            .iter()
            .map(|k| bytes(&mut con, k))
            .collect();
        let by_module = module(&mut con, op, key, args).unwrap_err();
        let by_script = eval(&mut con, &sha, key, op, args).unwrap_err();
        let by_function = fcall(&mut con, &function, key, op, args).unwrap_err();
        assert_eq!(&by_module, expected, "module: {op} {key} {args:?}");
        assert_eq!(&by_script, expected, "script: {op} {key} {args:?}");
        assert_eq!(&by_function, expected, "function: {op} {key} {args:?}");
        let after: Vec<Value> = ["a", "b", "plain"]
            .iter()
            .map(|k| bytes(&mut con, k))
            .collect();
        assert_eq!(before, after, "{op} {key} {args:?} changed a key");
    }
    // A release, then the same ticket again: spent on both doors.
    assert_eq!(
        module(&mut con, "release", "a", &[&ticket_a]).unwrap(),
        Value::Int(1)
    );
    for error in [
        module(&mut con, "release", "a", &[&ticket_a]).unwrap_err(),
        eval(&mut con, &sha, "a", "release", &[&ticket_a]).unwrap_err(),
    ] {
        assert_eq!(error, "ERR pacer: ticket already released");
    }
}

/// A booking admits once (docs/redis.md, "Tickets"), on every engine. With
/// CONFIG (burst 2, bound 2000) at 0: four admissions (serials 0–3, seq
/// 1–4, waits 0, 0, 1000, 2000), then a booking: wait 3000 within the
/// horizon 2000 + 3·2·1000 → serial 4, seq 5, slot 3000. Redeemed at 500
/// (slot 2500 ms away, past the bound): not yet, nothing written. At 1000:
/// admitted after 2000 with a fresh ticket (serial 5, seq 5, slot 0);
/// admitted 5, serial 6. The booking, redeemed or released after that, is
/// spent and writes nothing; the fresh ticket releases once.
#[test]
fn a_redeemed_booking_is_spent_and_its_admission_releases_once() {
    let mut doors = Doors::open();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for engine in ["module", "script", "function"] {
        let key = format!("redeem:{engine}");
        let with_at = doors.with_at.clone();
        let run = |doors: &mut Doors, op: &str, args: &[&str]| by(doors, engine, op, &key, args);
        for wait in [0, 0, 1000, 2000] {
            let Ok(Value::Array(items)) = run(&mut doors, "reserve", &with_at) else {
                panic!("{engine}: reserve")
            };
            assert_eq!(items[1], Value::Int(wait), "{engine}");
        }
        let mut book = CONFIG.to_vec();
        book.extend(["3", "AT", "0"]);
        let Ok(Value::Array(items)) = run(&mut doors, "book", &book) else {
            panic!("{engine}: book")
        };
        assert_eq!(items[0], Value::BulkString(b"booked".to_vec()), "{engine}");
        let booking = text(&items[2]);
        assert!(
            booking.starts_with("4.5.60000.3000."),
            "{engine}: {booking}"
        );
        let before = bytes(&mut doors.con, &key);
        assert_eq!(
            run(&mut doors, "redeem", &[&booking, "AT", "500"]),
            Ok(Value::Array(vec![
                Value::BulkString(b"notyet".to_vec()),
                Value::Int(1),
                Value::BulkString(booking.clone().into_bytes()),
            ])),
            "{engine}"
        );
        assert_eq!(
            bytes(&mut doors.con, &key),
            before,
            "{engine}: not yet wrote"
        );
        let Ok(Value::Array(items)) = run(&mut doors, "redeem", &[&booking, "AT", "1000"]) else {
            panic!("{engine}: redeem")
        };
        let admission = text(&items[2]);
        assert_eq!(
            items,
            vec![
                Value::BulkString(b"admitted".to_vec()),
                Value::Int(2000),
                Value::BulkString(admission.clone().into_bytes()),
                Value::BulkString(b"booked".to_vec()),
                Value::Int(0),
            ],
            "{engine}"
        );
        assert!(
            admission.starts_with("5.5.60000.0."),
            "{engine}: {admission}"
        );
        let info = run(&mut doors, "info", &["AT", "1000"]).unwrap();
        assert_eq!(info_value(&info, "admitted"), Value::Int(5), "{engine}");
        assert_eq!(info_value(&info, "serial"), Value::Int(6), "{engine}");
        assert_eq!(info_value(&info, "booked"), Value::Int(1), "{engine}");
        let redeemed = bytes(&mut doors.con, &key);
        for (op, at) in [("redeem", "1000"), ("redeem", "3000"), ("release", "1000")] {
            assert_eq!(
                run(&mut doors, op, &[&booking, "AT", at]),
                Err("ERR pacer: ticket already released".to_string()),
                "{engine}: {op} of the redeemed booking"
            );
        }
        assert_eq!(
            bytes(&mut doors.con, &key),
            redeemed,
            "{engine}: a spent booking wrote"
        );
        assert_eq!(
            run(&mut doors, "release", &[&admission, "AT", "1000"]),
            Ok(Value::Int(1)),
            "{engine}"
        );
        assert_eq!(
            run(&mut doors, "release", &[&admission, "AT", "1000"]),
            Err("ERR pacer: ticket already released".to_string()),
            "{engine}"
        );
        keys.push(without_secret(bytes(&mut doors.con, &key)));
    }
    assert_eq!(keys[0], keys[1], "the module and the script");
    assert_eq!(keys[0], keys[2], "the module and the function");
}

/// Counters and the serial at their limit (docs/redis.md "The key"):
/// `good` with `edits` (offset, text) written over it, stored at `key`
/// before each engine's turn; each engine then answers `calls`, and its
/// replies and the key's bytes after them are returned. Two calls through
/// the function: the second runs on what its memory kept from the first.
fn after_edits(
    doors: &mut Doors,
    key: &str,
    good: &[u8],
    edits: &[(usize, &str)],
    calls: &[(&str, Vec<&str>)],
) -> Vec<(Vec<Result<Value, String>>, Value)> {
    let mut edited = good.to_vec();
    for (at, text) in edits {
        edited[*at..*at + text.len()].copy_from_slice(text.as_bytes());
    }
    ["module", "script", "function"]
        .iter()
        .map(|engine| {
            store(&mut doors.con, key, &edited);
            let replies = calls
                .iter()
                .map(|(op, args)| by(doors, engine, op, key, args))
                .collect();
            (replies, bytes(&mut doors.con, key))
        })
        .collect()
}

/// 2^52 − 1, the largest number a field holds (docs/redis.md).
const TOP: &str = "4503599627370495";

#[test]
fn counters_saturate_and_the_last_serial_is_refused_on_every_engine() {
    let mut doors = Doors::open();
    let with_at = doors.with_at.clone();
    module(&mut doors.con, "create", "top", &with_at).unwrap();
    let Value::BulkString(fresh) = bytes(&mut doors.con, "top") else {
        panic!("no bucket")
    };
    let reserve = || ("reserve", with_at.clone());
    let info = || ("info", vec!["AT", "0"]);
    let admitted = |wait: i64, serial: &str| -> Box<dyn Fn(&Value) -> bool> {
        let prefix = format!("{serial}.");
        Box::new(move |reply: &Value| match reply {
            Value::Array(items) => {
                items[0] == Value::BulkString(b"admitted".to_vec())
                    && items[1] == Value::Int(wait)
                    && text(&items[2]).starts_with(&prefix)
            }
            _ => false,
        })
    };
    let top = i64::try_from((1u64 << 52) - 1).unwrap();

    // Every counter at 2^52 − 1 (bytes 115–198): two admissions at 0 (burst
    // 2: no wait, serials 0 and 1); admitted stays at 2^52 − 1.
    let counters: Vec<(usize, &str)> = [115, 132, 149, 166, 183]
        .iter()
        .map(|&at| (at, TOP))
        .collect();
    let runs = after_edits(
        &mut doors,
        "top",
        &fresh,
        &counters,
        &[reserve(), reserve(), info()],
    );
    for (engine, (replies, _)) in ["module", "script", "function"].iter().zip(&runs) {
        assert!(
            admitted(0, "0")(replies[0].as_ref().unwrap()),
            "{engine}: {replies:?}"
        );
        assert!(
            admitted(0, "1")(replies[1].as_ref().unwrap()),
            "{engine}: {replies:?}"
        );
        let info = replies[2].as_ref().unwrap();
        for name in [
            "admitted",
            "refused",
            "booked",
            "released",
            "release_refused",
        ] {
            assert_eq!(info_value(info, name), Value::Int(top), "{engine} {name}");
        }
        assert_eq!(info_value(info, "serial"), Value::Int(2), "{engine}");
    }
    assert_eq!(runs[0], runs[1], "the module and the script");
    assert_eq!(runs[0], runs[2], "the module and the function");

    // The serial at 2^52 − 2: one ticket left (serial 2^52 − 2); then no
    // ticket can be issued, an error that writes nothing, twice.
    let last = "4503599627370494";
    let exhausted = format!(
        "ERR pacer: bucket 'top' has issued its last ticket (serial {last}); \
         create a new bucket"
    );
    let runs = after_edits(
        &mut doors,
        "top",
        &fresh,
        &[(98, last)],
        &[reserve(), info(), reserve(), reserve()],
    );
    for (engine, (replies, _)) in ["module", "script", "function"].iter().zip(&runs) {
        assert!(
            admitted(0, last)(replies[0].as_ref().unwrap()),
            "{engine}: {replies:?}"
        );
        let info = replies[1].as_ref().unwrap();
        assert_eq!(info_value(info, "serial"), Value::Int(top), "{engine}");
        assert_eq!(replies[2], Err(exhausted.clone()), "{engine}");
        assert_eq!(replies[3], Err(exhausted.clone()), "{engine}");
    }
    assert_eq!(runs[0], runs[1], "the module and the script");
    assert_eq!(runs[0], runs[2], "the module and the function");
    // A refusal issues no ticket: still answered and counted. The bucket
    // (burst 2, bound 2000) at serial 2^52 − 1 with its tokens at −120000
    // at 0: a request would wait ⌈180000/60⌉ = 3000 > 2000, refused with
    // hint 2.
    let runs = after_edits(
        &mut doors,
        "top",
        &fresh,
        &[(98, TOP), (75, "-000000120000")],
        &[reserve(), reserve(), info()],
    );
    let refused = Value::Array(vec![
        Value::BulkString(b"refused".to_vec()),
        Value::Int(2),
        Value::Int(3000),
        Value::Int(0),
    ]);
    for (engine, (replies, _)) in ["module", "script", "function"].iter().zip(&runs) {
        assert_eq!(replies[0], Ok(refused.clone()), "{engine}");
        assert_eq!(replies[1], Ok(refused.clone()), "{engine}");
        assert_eq!(
            info_value(replies[2].as_ref().unwrap(), "refused"),
            Value::Int(2)
        );
    }
    assert_eq!(runs[0], runs[1], "the module and the script");
    assert_eq!(runs[0], runs[2], "the module and the function");

    // A booking takes the last ticket (tokens −120000 at 0: the wait 3000
    // is within the horizon 2000 + 3·2·1000, slot 3000); its redemption at
    // 1000 would issue a ticket: the error, and nothing written (the
    // booking is not spent: it still answers so).
    let mut book = CONFIG.to_vec();
    book.extend(["3", "AT", "0"]);
    let mut edited = fresh.clone();
    edited[98..114].copy_from_slice(last.as_bytes());
    edited[75..88].copy_from_slice(b"-000000120000");
    for engine in ["module", "script", "function"] {
        store(&mut doors.con, "top", &edited);
        let Ok(Value::Array(items)) = by(&mut doors, engine, "book", "top", &book) else {
            panic!("{engine}: book")
        };
        let booking = text(&items[2]);
        assert!(
            booking.starts_with(&format!("{last}.1.60000.3000.")),
            "{engine}: {booking}"
        );
        let before = bytes(&mut doors.con, "top");
        for _ in 0..2 {
            assert_eq!(
                by(
                    &mut doors,
                    engine,
                    "redeem",
                    "top",
                    &[&booking, "AT", "1000"]
                ),
                Err(exhausted.clone()),
                "{engine}"
            );
            assert_eq!(
                by(&mut doors, engine, "book", "top", &book),
                Err(exhausted.clone()),
                "{engine}"
            );
        }
        assert_eq!(bytes(&mut doors.con, "top"), before, "{engine}: wrote");
    }

    // A counter past 2^52 − 1 is not a bucket, to the function's second
    // call as to its first.
    let not_a_bucket = Err("ERR pacer: key 'top' is not a pacer bucket".to_string());
    let runs = after_edits(
        &mut doors,
        "top",
        &fresh,
        &[(115, "4503599627370496")],
        &[reserve(), reserve()],
    );
    for (engine, (replies, _)) in ["module", "script", "function"].iter().zip(&runs) {
        assert_eq!(
            replies,
            &vec![not_a_bucket.clone(), not_a_bucket.clone()],
            "{engine}"
        );
    }
    assert_eq!(runs[0], runs[2], "the module and the function");
}

/// Past 65536 tickets, issuing serial `s` clears bit `s mod 65536` as
/// `SETBIT key <4096 + s mod 65536> 0` would (docs/redis.md "The key"):
/// past the end the key grows with zero bytes to hold it, in every engine.
/// A bucket whose serial is 65536 + 800 and that holds no released ticket
/// (512 bytes): the next ticket clears bit 800 of the bitmap, in byte
/// 512 + 100, so the key is 613 bytes, the bitmap all zeros.
#[test]
fn a_ticket_past_the_ring_grows_the_key_as_setbit_does_on_every_engine() {
    let mut doors = Doors::open();
    let with_at = doors.with_at.clone();
    module(&mut doors.con, "create", "ring", &with_at).unwrap();
    let Value::BulkString(mut fresh) = bytes(&mut doors.con, "ring") else {
        panic!("no bucket")
    };
    fresh[98..114].copy_from_slice(b"0000000000066336");
    let mut keys = Vec::new();
    for engine in ["module", "script", "function"] {
        store(&mut doors.con, "ring", &fresh);
        let Ok(Value::Array(items)) = by(&mut doors, engine, "reserve", "ring", &with_at) else {
            panic!("{engine}: reserve")
        };
        assert!(
            text(&items[2]).starts_with("66336.1."),
            "{engine}: {items:?}"
        );
        let Value::BulkString(key) = bytes(&mut doors.con, "ring") else {
            panic!("{engine}: no bucket")
        };
        assert_eq!(key.len(), 613, "{engine}");
        assert!(key[512..].iter().all(|&b| b == 0), "{engine}");
        keys.push(key);
    }
    assert_eq!(keys[0], keys[1], "the module and the script");
    assert_eq!(keys[0], keys[2], "the module and the function");
}

/// The module creates the bucket "good" with `config` (its clock included)
/// and admits once: that admission's ticket.
fn good_bucket(doors: &mut Doors, config: &[&str]) -> String {
    module(&mut doors.con, "create", "good", config).unwrap();
    match module(&mut doors.con, "reserve", "good", config).unwrap() {
        Value::Array(items) => text(&items[2]),
        other => panic!("{other:?}"),
    }
}

/// The bucket "good", byte for byte.
fn bucket_bytes(doors: &mut Doors) -> Vec<u8> {
    let Value::BulkString(good) = bytes(&mut doors.con, "good") else {
        panic!("no bucket bytes")
    };
    good
}

/// Each edit of `good` (what, first byte, replacement), stored at
/// "edited", is "not a pacer bucket" to every engine for every command
/// (admissions with `config`, a release of `ticket`), and the key stays as
/// it was.
fn edits_are_not_buckets(
    doors: &mut Doors,
    good: &[u8],
    edits: &[(&str, usize, &str)],
    config: &[&str],
    ticket: &str,
) {
    let calls = [
        ("reserve", config.to_vec()),
        ("info", vec!["AT", "0"]),
        ("release", vec![ticket, "AT", "0"]),
        ("observe", vec!["throttled", "AT", "0"]),
        ("create", config.to_vec()),
    ];
    for &(what, at, replacement) in edits {
        let mut edited = good.to_vec();
        edited[at..at + replacement.len()].copy_from_slice(replacement.as_bytes());
        store(&mut doors.con, "edited", &edited);
        for (op, args) in &calls {
            for engine in ["module", "script", "function"] {
                assert_eq!(
                    by(doors, engine, op, "edited", args),
                    Err("ERR pacer: key 'edited' is not a pacer bucket".to_string()),
                    "{engine} {op} with {what}"
                );
            }
        }
        assert_eq!(
            bytes(&mut doors.con, "edited"),
            Value::BulkString(edited),
            "{what}: the key changed"
        );
    }
}

/// A key whose header was edited by hand is "not a pacer bucket" to every
/// engine, for every command, and stays as it was: each edit below breaks
/// one rule of the header's form (docs/redis.md, "The key").
#[test]
fn an_edited_header_is_not_a_bucket_to_any_engine() {
    let mut doors = Doors::open();
    let with_at = doors.with_at.clone();
    let ticket = good_bucket(&mut doors, &with_at);
    let good = bucket_bytes(&mut doors);
    assert_eq!(good.len(), 512);
    // (first byte, replacement): byte offsets from the layout table.
    let edits: [(&str, usize, &str); 19] = [
        ("magic", 0, "PACER3"),
        ("magic's space", 6, "x"),
        ("rate above 600 (the call's config is valid)", 7, "700"),
        ("a zero burst", 11, "0000000"),
        ("a space inside idle_timeout_ms", 19, " "),
        ("a sign on max_retries", 36, "+3"),
        ("policy 2", 39, "2"),
        ("an uppercase secret digit", 41, "A"),
        ("tokens above capacity (burst 2)", 75, "+000000120001"),
        ("no sign on tokens", 75, "0"),
        ("seq at 2^24", 89, "16777216"),
        ("a counter at 2^52", 132, "4503599627370496"),
        ("a letter in the padding", 230, "x"),
        ("a digit in the gap after the last field", 199, "0"),
        // The second block (bytes 256–511).
        ("a letter in admitted_after_wait", 256, "x"),
        ("a digit in the second block's first gap", 272, "0"),
        (
            "a count at 2^52 in the last wait bucket",
            477,
            "4503599627370496",
        ),
        ("a digit in the second block's padding", 493, "0"),
        ("a letter at byte 511", 511, "x"),
    ];
    edits_are_not_buckets(&mut doors, &good, &edits, &with_at, &ticket);
}

/// RESP3 (`HELLO 3`) gets the same arrays, integers, strings and nils.
#[test]
fn replies_are_the_same_structure_in_resp2_and_resp3() {
    let server = Server::with_module();
    let mut resp2 = server.connect();
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).expect("url");
    let mut resp3 = client.get_connection().expect("resp3");
    let hello: Value = redis::cmd("HELLO")
        .arg(3)
        .query(&mut resp3)
        .expect("HELLO 3");
    assert!(matches!(hello, Value::Map(_)), "{hello:?}");
    let sha = common::load_script(&mut resp2, &common::test_clock_script());
    // rate 0 admits with nothing debited: the reply holds a nil.
    let disabled = ["0", "1", "30000", "3", "refund", "AT", "0"];
    let refusing = ["60", "1", "30000", "3", "refund", "AT", "0"];
    for (i, config) in [disabled, refusing].iter().enumerate() {
        for engine in ["module", "script"] {
            let run = |con: &mut redis::Connection, key: &str| -> Vec<Value> {
                let mut out = Vec::new();
                for op in ["reserve", "reserve", "info"] {
                    let args: &[&str] = if op == "info" { &["AT", "0"] } else { config };
                    out.push(if engine == "module" {
                        module(con, op, key, args).unwrap()
                    } else {
                        eval(con, &sha, key, op, args).unwrap()
                    });
                }
                out
            };
            let two = run(&mut resp2, &format!("r2:{engine}:{i}"));
            let three = run(&mut resp3, &format!("r3:{engine}:{i}"));
            // Tickets differ by key (their MAC): compare with the MACs cut.
            let cut = |values: Vec<Value>| -> Vec<Value> {
                values
                    .into_iter()
                    .map(|v| match v {
                        Value::Array(items) => Value::Array(
                            items
                                .into_iter()
                                .map(|item| match item {
                                    Value::BulkString(b)
                                        if b.iter().filter(|&&c| c == b'.').count() == 4 =>
                                    {
                                        Value::BulkString(b[..b.len() - 16].to_vec())
                                    }
                                    other => other,
                                })
                                .collect(),
                        ),
                        other => other,
                    })
                    .collect()
            };
            assert_eq!(cut(two), cut(three), "{engine} config {i}");
        }
    }
}

/// In production (no `test-clock`) the module refuses a caller's clock, and
/// a bucket's clock is the server's: between two `TIME` readings.
#[test]
fn without_test_clock_the_server_clock_decides() {
    let server = Server::start(common::Options::production());
    let mut con = server.connect();
    let error = module(
        &mut con,
        "reserve",
        "k",
        &["60", "2", "30000", "3", "refund", "AT", "0"],
    )
    .unwrap_err();
    assert_eq!(error, "ERR pacer: AT needs a server started for tests");
    assert_eq!(bytes(&mut con, "k"), Value::Nil, "nothing created");
    let before = server_ms(&mut con);
    module(
        &mut con,
        "create",
        "k",
        &["60", "2", "30000", "3", "refund"],
    )
    .unwrap();
    let after = server_ms(&mut con);
    let Value::Array(info) = module(&mut con, "info", "k", &[]).unwrap() else {
        panic!("INFO is an array")
    };
    let high_water = info
        .chunks(2)
        .find(|pair| pair[0] == Value::BulkString(b"high_water_ms".to_vec()))
        .map(|pair| match pair[1] {
            Value::Int(n) => n,
            ref other => panic!("{other:?}"),
        })
        .expect("high_water_ms");
    assert!(
        before <= high_water && high_water <= after,
        "{before} {high_water} {after}"
    );
}

/// The shipped script loaded as docs/redis.md says (`#!lua name=pacer`
/// before its first line, `FUNCTION LOAD`): `FCALL pacer` decides at the
/// server's clock and refuses `AT`, as the shipped script does by EVALSHA.
#[test]
fn the_shipped_library_is_pacer_on_the_server_clock() {
    let server = Server::start(common::Options::production());
    let mut con = server.connect();
    let library = format!("#!lua name=pacer\n{}", common::script_source());
    assert_eq!(
        library,
        pacer_cli::engine::function_library(&common::script_source(), "pacer"),
        "the shipped script registers `pacer` itself"
    );
    let loaded: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&library)
        .query(&mut con)
        .expect("FUNCTION LOAD");
    assert_eq!(loaded, "pacer");
    let mut with_at: Vec<&str> = CONFIG.to_vec();
    with_at.extend(["AT", "0"]);
    assert_eq!(
        fcall(&mut con, "pacer", "k", "reserve", &with_at),
        Err("ERR pacer: AT needs a server started for tests".to_string())
    );
    assert_eq!(bytes(&mut con, "k"), Value::Nil, "nothing created");
    let before = server_ms(&mut con);
    let Value::Array(reply) = fcall(&mut con, "pacer", "k", "reserve", &CONFIG).unwrap() else {
        panic!("reserve is an array")
    };
    assert_eq!(reply[0], Value::BulkString(b"admitted".to_vec()));
    let Value::Array(info) = fcall(&mut con, "pacer", "k", "info", &[]).unwrap() else {
        panic!("INFO is an array")
    };
    // Its read-only function, `pacer_ro`, answers info too (the same
    // bucket; its clock is read anew).
    let read_only = call(&mut con, &["FCALL_RO", "pacer_ro", "1", "k", "info"]).unwrap();
    assert_eq!(
        info_value(&read_only, "high_water_ms"),
        info[19],
        "pacer_ro's INFO"
    );
    let after = server_ms(&mut con);
    let high_water = match info[19] {
        Value::Int(n) => n,
        ref other => panic!("high_water_ms: {other:?}"),
    };
    assert_eq!(info[18], Value::BulkString(b"high_water_ms".to_vec()));
    assert!(
        before <= high_water && high_water <= after,
        "{before} {high_water} {after}"
    );
}

// ---------------------------------------------------------------------------
// Adaptive buckets (SPEC §14): `ADAPT floor ceiling` and `PACER.OBSERVE`.

/// `op` on `key` by one engine, by name.
fn by(
    doors: &mut Doors,
    engine: &str,
    op: &str,
    key: &str,
    args: &[&str],
) -> Result<Value, String> {
    match engine {
        "module" => module(&mut doors.con, op, key, args),
        "script" => eval(&mut doors.con, &doors.sha, key, op, args),
        _ => fcall(&mut doors.con, &doors.function, key, op, args),
    }
}

/// INFO's value for `name`.
fn info_value(info: &Value, name: &str) -> Value {
    let Value::Array(items) = info else {
        panic!("INFO: {info:?}")
    };
    items
        .chunks(2)
        .find(|pair| pair[0] == Value::BulkString(name.as_bytes().to_vec()))
        .map(|pair| pair[1].clone())
        .unwrap_or_else(|| panic!("INFO has no {name}"))
}

/// The header with the secret (bytes 41–56) blanked: the same on every
/// engine for the same calls.
fn without_secret(value: Value) -> Vec<u8> {
    let Value::BulkString(mut bytes) = value else {
        panic!("no bucket: {value:?}")
    };
    bytes[41..57].fill(b'-');
    bytes
}

/// `OBSERVE outcome AT t` on `key` by `engine`: the reply.
fn observed(doors: &mut Doors, engine: &str, key: &str, outcome: &str, t: u64) -> Value {
    by(
        doors,
        engine,
        "observe",
        key,
        &[outcome, "AT", &t.to_string()],
    )
    .unwrap_or_else(|e| panic!("{engine} observe {outcome} at {t}: {e}"))
}

/// The key after a throttle within the hold (`after`) is the key before it
/// (`before`) but for the second block's `upstream_throttled` (bytes
/// 324–339, docs/redis.md), which goes from `count` − 1 to `count`: the
/// control word and every other byte are unchanged.
fn held_throttle_counted(engine: &str, before: &Value, after: &Value, count: u64) {
    let (Value::BulkString(before), Value::BulkString(after)) = (before, after) else {
        panic!("{engine}: no bucket")
    };
    const FIELD: std::ops::Range<usize> = 324..340;
    assert_eq!(before.len(), after.len(), "{engine}: the key's length");
    assert_eq!(
        String::from_utf8_lossy(&before[FIELD]),
        format!("{:016}", count - 1),
        "{engine}: upstream_throttled before the hold's throttle"
    );
    assert_eq!(
        String::from_utf8_lossy(&after[FIELD]),
        format!("{count:016}"),
        "{engine}: upstream_throttled after the hold's throttle"
    );
    assert_eq!(
        before[..FIELD.start],
        after[..FIELD.start],
        "{engine}: a hold's throttle wrote before upstream_throttled"
    );
    assert_eq!(
        before[FIELD.end..],
        after[FIELD.end..],
        "{engine}: a hold's throttle wrote after upstream_throttled"
    );
}

/// `INFO AT t` on `key` by `engine`.
fn info_at(doors: &mut Doors, engine: &str, key: &str, t: u64) -> Value {
    by(doors, engine, "info", key, &["AT", &t.to_string()])
        .unwrap_or_else(|e| panic!("{engine} info at {t}: {e}"))
}

/// `OBSERVE outcome AT t` on `key` by `engine` replies `reply` and leaves
/// `fields` in bytes 199–255 (an adaptive bucket's fields).
fn expect_observe(
    doors: &mut Doors,
    engine: &str,
    key: &str,
    (outcome, t): (&str, u64),
    reply: i64,
    fields: &str,
) {
    let got = observed(doors, engine, key, outcome, t);
    assert_eq!(got, Value::Int(reply), "{engine}: {outcome} at {t}");
    let Value::BulkString(b) = bytes(&mut doors.con, key) else {
        panic!("{engine}: no bucket at {key}")
    };
    assert_eq!(
        &b[199..256],
        fields.as_bytes(),
        "{engine}: {outcome} at {t}"
    );
}

/// Hand-derived from core/src/adaptive.rs's module doc: rate 60, burst 10,
/// idle 120000, retries 5, refund (the default budget: bound 4833, so a
/// rate refuses from ⌈60000/20000⌉ = 3, the lowest), ADAPT 1 600, created
/// at 0.
/// - searching from L = 60, doubling every 5 s: at 2500, 60·7500/5000 =
///   90; at 5000, 120; at 12500, 240·7500/5000 = 360; at 17500, 720: the
///   ceiling 600.
/// - 45 openings at 1000, 2000, …, 45000 (minute 0): counted, 45.
/// - throttled at 50000: ends the first search, so `again`; E = max(45,
///   45 + 0) = 45: L = min(45, 600) = 45. The pause: origin max(50000,
///   0 + 60000) = 60000, the next minute, so the 45 become the minute
///   before. The answer, read at 50000 (before the origin): the lowest, 3.
/// - throttled at 55000: at = the origin 60000, within the hold: the
///   control word unchanged, only `upstream_throttled` counted (1 → 2,
///   every other byte equal); the answer read at 55000, in the pause: 3.
/// - throttled at 80000: within the hold (20 s after the origin): ℓ = 45,
///   again only its count written (2 → 3).
/// - opened at 70000, the origin's minute: 1 now, 45 before.
/// - the step: the wait is max(240000, ⌊80·60000/45⌋ = 106666) = 240000,
///   /12 with `again` = 20000; so 45 until Δ = 60000 + 20000 (t = 140000),
///   then 45 + ⌊45/2⌋ + 2 = 69.
/// - 52 openings at 180000, …, 180051 (minute 2 of the origin: both
///   counts dropped; the rate 69, the step): the 52nd makes through = 52 > 45 + ⌊45/8⌋ + 1 = 51,
///   a rise: search again from the rate then, 69, origin 180051, doubling
///   every 20 s: 69 at once, ⌊69·30000/20000⌋ = 103 at 190051, 138 at
///   200051.
/// - throttled at 200051 (the same minute): ends a search again, so no
///   pause; E = max(52, 52 + 0) = 52: L = 52, probing with `again`, ℓ =
///   52 at once.
/// - throttled at 260051, past the hold, minute 1 of the origin: the 52
///   are the minute before, E = through = 52 ≥ the rate 52 (the wait
///   max(240000, ⌊4800000/52⌋ = 92307)/12 = 20000 is not over): the count
///   does not explain it: L = 52 − max(1, ⌊52/16⌋) = 49, not `again`.
/// - the next step: wait max(240000, ⌊4800000/49⌋ = 97959) = 240000
///   (not quick): 49 until Δ = 300000 (t = 560051), then 49 + 24 + 2 =
///   75.
#[test]
fn observe_follows_the_law_by_hand_on_every_engine() {
    let mut doors = Doors::open();
    let d = &mut doors;
    let mut config = vec!["60", "10", "120000", "5", "refund", "ADAPT", "1", "600"];
    config.extend(["AT", "0"]);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for engine in ["module", "script", "function"] {
        let key = &format!("adapt:{engine}");
        assert_eq!(by(d, engine, "create", key, &config), Ok(Value::Int(1)));
        let rate = |d: &mut Doors, t: u64| info_value(&info_at(d, engine, key, t), "rate_in_force");
        for (t, expected) in [
            (0, 60),
            (2500, 90),
            (5000, 120),
            (12_500, 360),
            (17_500, 600),
        ] {
            assert_eq!(rate(d, t), Value::Int(expected), "{engine} at {t}");
        }
        // At 1000: 60·6000/5000 = 72.
        let fields = " 001 600 0000000000000000 00000 00001 00000 00060 0 0    ";
        expect_observe(d, engine, key, ("opened", 1000), 72, fields);
        for t in (2..=45).map(|i| i * 1000) {
            observed(d, engine, key, "opened", t);
        }
        // The first search's throttle and its pause.
        let fields = " 001 600 0000000000060000 00000 00000 00045 00045 1 1    ";
        expect_observe(d, engine, key, ("throttled", 50_000), 3, fields);
        assert_eq!(rate(d, 59_999), Value::Int(3), "{engine}");
        assert_eq!(rate(d, 60_000), Value::Int(45), "{engine}");
        // Within the hold: the law unmoved, the throttle counted alone.
        for (t, reply, count) in [(55_000, 3, 2), (80_000, 45, 3)] {
            let before = bytes(&mut d.con, key);
            expect_observe(d, engine, key, ("throttled", t), reply, fields);
            let after = bytes(&mut d.con, key);
            held_throttle_counted(engine, &before, &after, count);
        }
        let fields = " 001 600 0000000000060000 00000 00001 00045 00045 1 1    ";
        expect_observe(d, engine, key, ("opened", 70_000), 45, fields);
        // The step.
        assert_eq!(rate(d, 139_999), Value::Int(45), "{engine}");
        assert_eq!(rate(d, 140_000), Value::Int(69), "{engine}");
        for t in 180_000..180_051 {
            observed(d, engine, key, "opened", t);
        }
        // The rise.
        let fields = " 001 600 0000000000180051 00000 00052 00000 00069 0 1    ";
        expect_observe(d, engine, key, ("opened", 180_051), 69, fields);
        for (t, expected) in [(180_051, 69), (190_051, 103), (200_051, 138)] {
            assert_eq!(rate(d, t), Value::Int(expected), "{engine} at {t}");
        }
        // A search again ends: no pause.
        let fields = " 001 600 0000000000200051 00000 00052 00000 00052 1 1    ";
        expect_observe(d, engine, key, ("throttled", 200_051), 52, fields);
        // The cut.
        let fields = " 001 600 0000000000260051 00000 00000 00052 00049 1 0    ";
        expect_observe(d, engine, key, ("throttled", 260_051), 49, fields);
        assert_eq!(rate(d, 560_050), Value::Int(49), "{engine}");
        assert_eq!(rate(d, 560_051), Value::Int(75), "{engine}");
        let info = info_at(d, engine, key, 260_051);
        assert_info(
            &info,
            engine,
            &[
                ("rate_in_force", 49),
                ("adaptive_floor_per_min", 1),
                ("adaptive_ceiling_per_min", 600),
                ("origin_ms", 260_051),
                ("window", 0),
                ("opened", 0),
                ("opened_before", 52),
                ("limit_per_min", 49),
                ("probing", 1),
                ("again", 0),
            ],
        );
        keys.push(without_secret(bytes(&mut d.con, key)));
    }
    // The module's, the script's and the function's keys are the same.
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys[0], keys[2]);

    // A fixed-rate bucket: OBSERVE answers the rate and writes nothing.
    for engine in ["module", "script", "function"] {
        let key = format!("fixed:{engine}");
        let config = ["60", "10", "120000", "5", "refund", "AT", "0"];
        by(&mut doors, engine, "create", &key, &config).unwrap();
        let before = bytes(&mut doors.con, &key);
        for outcome in ["throttled", "opened", "throttled"] {
            let reply = by(
                &mut doors,
                engine,
                "observe",
                &key,
                &[outcome, "AT", "1000"],
            );
            assert_eq!(reply, Ok(Value::Int(60)), "{engine}");
        }
        assert_eq!(
            bytes(&mut doors.con, &key),
            before,
            "{engine}: OBSERVE wrote"
        );
        let Value::BulkString(header) = before else {
            panic!("no bucket")
        };
        assert!(header[199..256].iter().all(|&b| b == b' '), "{engine}");
        let info = by(&mut doors, engine, "info", &key, &["AT", "1000"]).unwrap();
        assert_info(
            &info,
            engine,
            &[
                ("rate_in_force", 60),
                ("adaptive_floor_per_min", 0),
                ("adaptive_ceiling_per_min", 0),
                ("origin_ms", 0),
                ("window", 0),
                ("opened", 0),
                ("opened_before", 0),
                ("limit_per_min", 0),
                ("probing", 0),
                ("again", 0),
            ],
        );
    }
}

/// ADAPT's and OBSERVE's errors, the same from every engine, and nothing
/// changed; and errors that combine are reported in one order (the
/// arity, the arguments left to right with a configuration's ranges right
/// after its numbers, then AT) by every engine.
#[test]
fn adaptive_bad_calls_get_the_same_error_from_every_engine() {
    let mut doors = Doors::open();
    let config = ["60", "2", "30000", "3", "refund"];
    let mut setup = |key: &str, extra: &[&str]| {
        let mut args = config.to_vec();
        args.extend_from_slice(extra);
        args.extend(["AT", "0"]);
        module(&mut doors.con, "create", key, &args).expect("setup");
    };
    setup("fixed", &[]);
    setup("adaptive", &["ADAPT", "10", "0"]);
    let with = |extra: &[&'static str]| {
        let mut args: Vec<&str> = config.to_vec();
        args.extend_from_slice(extra);
        args
    };
    let fixed_text = "rate_per_min=60 burst=2 idle_timeout_ms=30000 max_retries=3 \
                      release_policy=refund";
    let adaptive_text =
        format!("{fixed_text} adaptive_floor_per_min=10 adaptive_ceiling_per_min=60");
    let mismatch = |key: &str, stored: &str, call: &str| {
        format!("ERR pacer: bucket '{key}' was created with {stored}; this call has {call}")
    };
    let range = |floor: &str, ceiling: &str, rate: &str| {
        format!(
            "ERR pacer: ADAPT {floor} {ceiling} does not fit rate_per_min {rate}: adaptive \
             pacing needs floor <= rate_per_min <= ceiling <= 600 (ceiling 0 means rate_per_min)"
        )
    };
    let number = |name: &str, got: &str| {
        format!("ERR pacer: {name} must be a whole number below 2^52, got '{got}'")
    };
    let err = |text: &str| format!("ERR pacer: {text}");
    let mut cases: Vec<(&str, &str, Vec<&str>, String)> = vec![
        (
            "reserve",
            "fixed",
            with(&["ADAPT", "10", "0"]),
            mismatch("fixed", fixed_text, &adaptive_text),
        ),
        (
            "reserve",
            "adaptive",
            with(&[]),
            mismatch("adaptive", &adaptive_text, fixed_text),
        ),
        (
            "book",
            "adaptive",
            with(&["3", "ADAPT", "20", "0", "AT", "0"]),
            mismatch(
                "adaptive",
                &adaptive_text,
                &format!("{fixed_text} adaptive_floor_per_min=20 adaptive_ceiling_per_min=60"),
            ),
        ),
    ];
    // A floor and ceiling that do not fit a new bucket of rate 60.
    for (floor, ceiling) in [("61", "0"), ("10", "59"), ("10", "601")] {
        let args = with(&["ADAPT", floor, ceiling]);
        cases.push(("reserve", "new", args, range(floor, ceiling, "60")));
    }
    cases.extend([
        (
            "create",
            "new",
            vec!["0", "2", "30000", "3", "refund", "ADAPT", "1", "0"],
            range("1", "0", "0"),
        ),
        (
            "reserve",
            "new",
            with(&["ADAPT", "x", "0"]),
            number("adaptive_floor_per_min", "x"),
        ),
        (
            "reserve",
            "new",
            with(&["ADAPT", "10", "-1"]),
            number("adaptive_ceiling_per_min", "-1"),
        ),
        (
            "reserve",
            "new",
            with(&["ADAPT", "10"]),
            err("unknown argument 'ADAPT'"),
        ),
        (
            "reserve",
            "new",
            with(&["AT", "0", "ADAPT", "10", "0"]),
            err("wrong number of arguments for reserve"),
        ),
        (
            "info",
            "adaptive",
            vec!["ADAPT", "10", "0"],
            err("wrong number of arguments for info"),
        ),
        (
            "observe",
            "missing",
            vec!["throttled"],
            err("no bucket at key 'missing'"),
        ),
        (
            "observe",
            "adaptive",
            vec!["Throttled"],
            err("outcome must be opened or throttled, got 'Throttled'"),
        ),
        (
            "observe",
            "adaptive",
            vec![],
            err("wrong number of arguments for observe"),
        ),
        (
            "observe",
            "adaptive",
            vec!["throttled", "NOW", "5"],
            err("unknown argument 'NOW'"),
        ),
        (
            "observe",
            "adaptive",
            vec!["throttled", "AT", "01"],
            number("AT", "01"),
        ),
        // Two errors at once: the first in the documented order.
        (
            "reserve",
            "fixed",
            vec!["x", "2", "30000", "3", "refund", "NOW", "5"],
            number("rate_per_min", "x"),
        ),
        (
            "book",
            "fixed",
            vec!["601", "2", "30000", "3", "refund", "-1"],
            err("rate_per_min 601 is above 600"),
        ),
        (
            "reserve",
            "fixed",
            vec!["601", "2", "30000", "3", "refund", "AT", "01"],
            err("rate_per_min 601 is above 600"),
        ),
        (
            "reserve",
            "fixed",
            with(&["ADAPT", "61", "0", "AT", "x"]),
            range("61", "0", "60"),
        ),
        (
            "release",
            "missing",
            vec!["nonsense"],
            err("no bucket at key 'missing'"),
        ),
        (
            "observe",
            "missing",
            vec!["sideways", "AT", "x"],
            err("outcome must be opened or throttled, got 'sideways'"),
        ),
    ]);
    let watched = ["fixed", "adaptive", "new", "missing"];
    for (op, key, args, expected) in &cases {
        for engine in ["module", "script", "function"] {
            let before: Vec<Value> = watched.iter().map(|k| bytes(&mut doors.con, k)).collect();
            let reply = by(&mut doors, engine, op, key, args);
            assert_eq!(
                reply.as_ref(),
                Err(expected),
                "{engine}: {op} {key} {args:?}"
            );
            let after: Vec<Value> = watched.iter().map(|k| bytes(&mut doors.con, k)).collect();
            assert_eq!(before, after, "{engine}: {op} {key} {args:?} changed a key");
        }
    }
}

/// An adaptive header edited by hand is "not a pacer bucket" to every
/// engine and every command, and stays as it was (docs/redis.md, "The key",
/// bytes 199–255). The zero burst is the fixed-rate test's.
#[test]
fn an_edited_adaptive_header_is_not_a_bucket_to_any_engine() {
    let mut doors = Doors::open();
    let mut config: Vec<&str> = CONFIG.to_vec(); // rate 60
    config.extend(["ADAPT", "10", "90", "AT", "0"]);
    let ticket = good_bucket(&mut doors, &config);
    module(&mut doors.con, "observe", "good", &["throttled", "AT", "5"]).unwrap();
    let good = bucket_bytes(&mut doors);
    // Floor 10, ceiling 90; the throttle at 5 ends the first search with
    // nothing counted: R = ⌊60·5005/5000⌋ = 60, B = min(60, 60) = 60, L =
    // 60 − max(1, ⌊60/16⌋) = 57; the pause puts the origin at max(5, 0 +
    // 60000) = 60000; probing, again.
    assert_eq!(
        &good[199..256],
        b" 010 090 0000000000060000 00000 00000 00000 00057 1 1    "
    );
    let edits: [(&str, usize, &str); 17] = [
        ("floor 0 with the fields there", 200, "000"),
        ("floor above the rate", 200, "061"),
        ("ceiling 0 (stored as the rate)", 204, "000"),
        ("ceiling below the rate", 204, "059"),
        ("ceiling above 600", 204, "601"),
        ("origin at 2^52 + 60000", 208, "4503599627430496"),
        ("window past 16 bits", 225, "65536"),
        ("opened past 16 bits", 231, "65536"),
        ("opened_before past 16 bits", 237, "99999"),
        ("limit above the ceiling", 243, "00091"),
        ("probing neither 0 nor 1", 249, "2"),
        ("again neither 0 nor 1", 251, "x"),
        ("a sign in the floor", 200, "+10"),
        ("a digit in a gap", 203, "0"),
        ("a digit in the last gap", 250, "0"),
        ("a letter in the padding", 253, "x"),
        ("a space inside the origin", 215, " "),
    ];
    edits_are_not_buckets(&mut doors, &good, &edits, &config, &ticket);
}

// ---------------------------------------------------------------------------
// What is read-only (docs/redis.md "Read-only calls"): PACER.INFO, the
// library's `<name>_ro` function (flag no-writes) and the script's info.

/// On a replica (`replicaof`) every engine answers info as the primary
/// does, and every call that may write is refused with Redis's own error,
/// the same text from each engine; the keys stay as they were.
#[test]
fn a_replica_answers_info_on_every_engine_and_refuses_writes_alike() {
    let primary = Server::with_module();
    let replica = Server::start(common::Options {
        replica_of: Some(primary.port),
        ..Default::default()
    });
    common::wait_link_up(replica.port);
    let mut con = primary.connect();
    let function = common::load_function(&mut con, "pacer_test");
    let read_only = format!("{function}_ro");
    let mut with_at: Vec<&str> = CONFIG.to_vec();
    with_at.extend(["AT", "0"]);
    module(&mut con, "create", "k", &with_at).unwrap();
    let ticket = match module(&mut con, "reserve", "k", &with_at).unwrap() {
        Value::Array(items) => text(&items[2]),
        other => panic!("{other:?}"),
    };
    assert_eq!(call(&mut con, &["WAIT", "1", "0"]), Ok(Value::Int(1)));
    let info = module(&mut con, "info", "k", &["AT", "0"]).unwrap();
    let key = bytes(&mut con, "k");

    let mut on_replica = replica.connect();
    let sha = common::load_script(&mut on_replica, &common::test_clock_script());
    let r = &mut on_replica;
    let at0 = ["AT", "0"];
    // Info, by every door.
    assert_eq!(module(r, "info", "k", &at0), Ok(info.clone()), "PACER.INFO");
    for verb in ["FCALL_RO", "FCALL"] {
        let mut args = vec![verb, &read_only, "1", "k", "info"];
        args.extend(at0);
        assert_eq!(call(r, &args), Ok(info.clone()), "{verb} {read_only}");
    }
    for verb in ["EVALSHA", "EVALSHA_RO"] {
        let mut args = vec![verb, &sha, "1", "k", "info"];
        args.extend(at0);
        assert_eq!(call(r, &args), Ok(info.clone()), "{verb}");
    }
    // Every op but info may write: Redis's READONLY error from the module
    // and the function, before they run. The script by EVALSHA is refused
    // when it writes, with the same error; a call of it that writes
    // nothing is answered as on the primary: here CREATE of the bucket
    // there (0), a redemption of a plain ticket (an error) and a throttle
    // on a fixed-rate bucket (its rate).
    let readonly = "READONLY You can't write against a read only replica.";
    let mut book = CONFIG.to_vec();
    book.extend(["3", "AT", "0"]);
    let writes: [(&str, Vec<&str>, Result<Value, String>); 6] = [
        ("create", with_at.clone(), Ok(Value::Int(0))),
        ("reserve", with_at.clone(), Err(readonly.into())),
        ("book", book, Err(readonly.into())),
        ("release", vec![&ticket, "AT", "0"], Err(readonly.into())),
        (
            "redeem",
            vec![&ticket, "AT", "0"],
            Err("ERR pacer: not a booking".into()),
        ),
        ("observe", vec!["throttled", "AT", "0"], Ok(Value::Int(60))),
    ];
    for (op, args, by_script) in &writes {
        assert_eq!(
            module(r, op, "k", args),
            Err(readonly.into()),
            "module {op}"
        );
        assert_eq!(
            fcall(r, &function, "k", op, args),
            Err(readonly.into()),
            "FCALL {op}"
        );
        assert_eq!(&eval(r, &sha, "k", op, args), by_script, "EVALSHA {op}");
        let mut ro = vec!["FCALL_RO", &read_only, "1", "k", op];
        ro.extend(args);
        assert_eq!(
            call(r, &ro),
            Err(format!(
                "ERR pacer: op '{op}' may write: the read-only function takes only info"
            )),
            "FCALL_RO {op}"
        );
        let mut ro = vec!["EVALSHA_RO", &sha, "1", "k", op];
        ro.extend(args);
        let by_script_ro = match by_script {
            Err(e) if e == readonly => {
                Err("ERR Write commands are not allowed from read-only scripts.".into())
            }
            other => other.clone(),
        };
        assert_eq!(call(r, &ro), by_script_ro, "EVALSHA_RO {op}");
    }
    // The writing function is refused on a replica whatever the op, and by
    // FCALL_RO on the primary.
    assert_eq!(fcall(r, &function, "k", "info", &at0), Err(readonly.into()));
    let mut ro = vec!["FCALL_RO", &function, "1", "k", "info"];
    ro.extend(at0);
    assert_eq!(call(r, &ro), Err(readonly.into()));
    assert_eq!(
        call(&mut con, &ro),
        Err("ERR Can not execute a script with write flag using *_ro command.".into())
    );
    assert_eq!(call(&mut con, &["WAIT", "1", "0"]), Ok(Value::Int(1)));
    assert_eq!(bytes(&mut on_replica, "k"), key, "the replica's key");
    assert_eq!(bytes(&mut con, "k"), key, "the primary's key");
}

/// `WATCH key`, `call`, then `MULTI`/`PING`/`EXEC`: whether the
/// transaction ran (a call that modified the key aborts it: EXEC nil).
fn watch_survives(doors: &mut Doors, engine: &str, key: &str, op: &str, args: &[&str]) -> bool {
    call(&mut doors.con, &["WATCH", key]).unwrap();
    let _ = by(doors, engine, op, key, args);
    call(&mut doors.con, &["MULTI"]).unwrap();
    call(&mut doors.con, &["PING"]).unwrap();
    match call(&mut doors.con, &["EXEC"]).unwrap() {
        Value::Nil => false,
        Value::Array(_) => true,
        other => panic!("EXEC: {other:?}"),
    }
}

/// A call that writes nothing does not signal the key modified, so a
/// client's `WATCH` on it survives; one that writes aborts the `WATCH`.
/// On every engine. With CONFIG at 0 (bound 2000): a booking after four
/// admissions (slot 3000), not yet at 500. OBSERVE on this fixed-rate
/// bucket writes nothing; on an adaptive one a throttle within the hold
/// writes its count (docs/redis.md), so it aborts the `WATCH`.
#[test]
fn a_watch_survives_every_call_that_writes_nothing() {
    let mut doors = Doors::open();
    let with_at = doors.with_at.clone();
    let mut book = CONFIG.to_vec();
    book.extend(["3", "AT", "0"]);
    for engine in ["module", "script", "function"] {
        let key = format!("watched:{engine}");
        let key = key.as_str();
        by(&mut doors, engine, "create", key, &with_at).unwrap();
        let mut tickets = Vec::new();
        for _ in 0..4 {
            let Ok(Value::Array(items)) = by(&mut doors, engine, "reserve", key, &with_at) else {
                panic!("{engine}: reserve")
            };
            tickets.push(text(&items[2]));
        }
        let Ok(Value::Array(items)) = by(&mut doors, engine, "book", key, &book) else {
            panic!("{engine}: book")
        };
        let booking = text(&items[2]);
        by(
            &mut doors,
            engine,
            "release",
            key,
            &[&tickets[0], "AT", "0"],
        )
        .unwrap();
        let mut other = CONFIG.to_vec();
        other[1] = "3";
        other.extend(["AT", "0"]);
        let nothing: [(&str, Vec<&str>); 9] = [
            ("info", vec!["AT", "0"]),
            ("create", with_at.clone()),
            ("redeem", vec![&booking, "AT", "500"]),
            ("observe", vec!["throttled", "AT", "0"]),
            ("observe", vec!["opened", "AT", "0"]),
            ("release", vec![&tickets[0], "AT", "0"]),
            ("release", vec!["nonsense", "AT", "0"]),
            ("redeem", vec![&tickets[1], "AT", "0"]),
            ("reserve", other),
        ];
        for (op, args) in &nothing {
            let before = bytes(&mut doors.con, key);
            assert!(
                watch_survives(&mut doors, engine, key, op, args),
                "{engine}: {op} {args:?} aborted a WATCH"
            );
            assert_eq!(bytes(&mut doors.con, key), before, "{engine}: {op} wrote");
        }
        // And calls that write abort it: an admission, a refusal (its
        // counter), a release, a redemption that admits.
        let writes: [(&str, Vec<&str>); 4] = [
            ("reserve", with_at.clone()),
            ("reserve", with_at.clone()),
            ("release", vec![&tickets[1], "AT", "0"]),
            ("redeem", vec![&booking, "AT", "1000"]),
        ];
        for (op, args) in &writes {
            assert!(
                !watch_survives(&mut doors, engine, key, op, args),
                "{engine}: {op} {args:?} wrote and the WATCH survived"
            );
        }
        // An adaptive bucket: the throttle at 0 ends the first search
        // (the pause: origin 60000); another at 0 is within the hold and
        // writes its count alone.
        let adaptive = format!("watched-adaptive:{engine}");
        let adaptive = adaptive.as_str();
        let mut config = CONFIG.to_vec();
        config.extend(["ADAPT", "1", "600", "AT", "0"]);
        by(&mut doors, engine, "create", adaptive, &config).unwrap();
        observed(&mut doors, engine, adaptive, "throttled", 0);
        let held = ["throttled", "AT", "0"];
        let before = bytes(&mut doors.con, adaptive);
        assert!(
            !watch_survives(&mut doors, engine, adaptive, "observe", &held),
            "{engine}: a throttle within the hold wrote and the WATCH survived"
        );
        let after = bytes(&mut doors.con, adaptive);
        held_throttle_counted(engine, &before, &after, 2);
    }
}

// ---------------------------------------------------------------------------
// Key format 2 (docs/redis.md "The key"): the second block's counts, and a
// key of format 1 refused.

/// A key of format 1 (magic `PACER1`: a 256-byte header, then its bitmap)
/// is refused by every command of every engine with the format error, and
/// stays as it was.
#[test]
fn a_format_1_key_is_refused_by_every_engine_and_command() {
    let mut doors = Doors::open();
    let with_at = doors.with_at.clone();
    // A format-1 bucket as version 1 wrote it (rate 60, burst 2, idle
    // 30000, 3 retries, refund, created at 0), and one byte of bitmap.
    let mut old = "PACER1 060 0000002 0000000000030000 03 0 0123456789abcdef \
                   0000000000000000 +000000120000 00000000 0000000000000000 \
                   0000000000000000 0000000000000000 0000000000000000 \
                   0000000000000000 0000000000000000"
        .to_string();
    old = format!("{old:<256}");
    let mut old = old.into_bytes();
    old.push(0);
    let mut book = with_at.clone();
    book.insert(5, "3");
    let calls: [(&str, Vec<&str>); 7] = [
        ("create", with_at.clone()),
        ("reserve", with_at.clone()),
        ("book", book),
        ("release", vec!["0.1.60000.0.0123456789abcdef", "AT", "0"]),
        ("redeem", vec!["0.1.60000.5.0123456789abcdef", "AT", "0"]),
        ("info", vec!["AT", "0"]),
        ("observe", vec!["opened", "AT", "0"]),
    ];
    let expected = "ERR pacer: key 'v1' holds a bucket of key format 1 (PACER1), which this \
                    version does not read; delete the key and it is created again in format 2";
    for engine in ["module", "script", "function"] {
        for (op, args) in &calls {
            store(&mut doors.con, "v1", &old);
            assert_eq!(
                by(&mut doors, engine, op, "v1", args),
                Err(expected.to_string()),
                "{engine} {op}"
            );
            assert_eq!(
                bytes(&mut doors.con, "v1"),
                Value::BulkString(old.clone()),
                "{engine} {op} wrote"
            );
        }
    }
}

/// The second block's counts, by hand, the same from every engine. Rate
/// 60 (60 units a ms), burst 2, idle 120000, 5 retries: bound
/// min(15000, ⌊(120000 − 62000)/12⌋) = 4833; ADAPT 1 600 so that OBSERVE
/// writes (docs/redis.md: a fixed-rate bucket's OBSERVE writes nothing, so
/// counts nothing). At 0: two admissions at once (2 tokens), the third
/// waits 60000/60 = 1000 ms, the fourth 120000/60 = 2000 ms; then opened
/// (counted) and throttled (it ends the first search, not within a hold:
/// written). So: admitted 4, admitted_after_wait 2, wait_ms_total 3000,
/// wait_bucket_1000 1 (500 < 1000 ≤ 1000), wait_bucket_2500 1 (1000 <
/// 2000 ≤ 2500), upstream_opened 1, upstream_throttled 1, nothing shaped
/// or redeemed.
#[test]
fn the_second_block_counts_by_hand_on_every_engine() {
    let mut doors = Doors::open();
    // Adaptive 1..60 (OBSERVE writes; the rate stays 60). Created at 0 by
    // an admission with no wait; a minute later (a search grants no waits
    // in its first minute) the level is back at the burst of 2: waits 0,
    // 0, 1000, 2000.
    let created = [
        "60", "2", "120000", "5", "refund", "ADAPT", "1", "60", "AT", "0",
    ];
    let config = [
        "60", "2", "120000", "5", "refund", "ADAPT", "1", "60", "AT", "60000",
    ];
    let mut keys = Vec::new();
    for engine in ["module", "script", "function"] {
        let key = format!("counted:{engine}");
        let waits: Vec<Value> = (0..5)
            .map(|k| {
                let args = if k == 0 { &created } else { &config };
                match by(&mut doors, engine, "reserve", &key, args) {
                    Ok(Value::Array(items)) => items[1].clone(),
                    other => panic!("{engine}: {other:?}"),
                }
            })
            .collect();
        assert_eq!(
            waits,
            [0, 0, 0, 1000, 2000].map(Value::Int),
            "{engine}: the waits"
        );
        observed(&mut doors, engine, &key, "opened", 60_000);
        observed(&mut doors, engine, &key, "throttled", 60_000);
        let info = info_at(&mut doors, engine, &key, 60_000);
        assert_info(
            &info,
            engine,
            &[
                ("admitted", 5),
                ("refused", 0),
                ("admitted_after_wait", 2),
                ("shaped", 0),
                ("redeemed", 0),
                ("upstream_opened", 1),
                ("upstream_throttled", 1),
                ("wait_ms_total", 3000),
                ("wait_bucket_10", 0),
                ("wait_bucket_50", 0),
                ("wait_bucket_100", 0),
                ("wait_bucket_500", 0),
                ("wait_bucket_1000", 1),
                ("wait_bucket_2500", 1),
                ("wait_bucket_5000", 0),
                ("wait_bucket_10000", 0),
            ],
        );
        // The same counts in the second block's bytes (docs/redis.md).
        let Value::BulkString(b) = bytes(&mut doors.con, &key) else {
            panic!("{engine}: no bucket")
        };
        let expected = "0000000000000002 0000000000000000 0000000000000000 \
                        0000000000000001 0000000000000001 0000000000003000 \
                        0000000000000000 0000000000000000 0000000000000000 \
                        0000000000000000 0000000000000001 0000000000000001 \
                        0000000000000000 0000000000000000                   ";
        assert_eq!(
            String::from_utf8_lossy(&b[256..512]),
            expected,
            "{engine}: the second block"
        );
        keys.push(without_secret(Value::BulkString(b)));
    }
    assert_eq!(keys[0], keys[1], "the module and the script");
    assert_eq!(keys[0], keys[2], "the module and the function");
}
