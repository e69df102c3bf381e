//! The module, the script and the script loaded as a function library are
//! three doors to one bucket format: a bucket one creates, another uses; a
//! bad call or an edited key gets the same error from each and changes
//! nothing; and the replies are the same structure in RESP2 and RESP3.

mod common;

use common::{call, eval, fcall, Server};
use redis::Value;

const CONFIG: [&str; 5] = ["60", "2", "30000", "3", "refund"];

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
        let server = Server::with_module();
        let mut con = server.connect();
        let sha = common::load_script(&mut con, &common::test_clock_script());
        let function = common::load_function(&mut con, "pacer_test");
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
    let server = Server::with_module();
    let mut con = server.connect();
    let sha = common::load_script(&mut con, &common::test_clock_script());
    let function = common::load_function(&mut con, "pacer_test");
    let mut setup = |args: &[&str]| call(&mut con, args).expect("setup");
    setup(&[
        "PACER.CREATE",
        "a",
        "60",
        "2",
        "30000",
        "3",
        "refund",
        "AT",
        "0",
    ]);
    setup(&[
        "PACER.CREATE",
        "b",
        "60",
        "2",
        "30000",
        "3",
        "refund",
        "AT",
        "0",
    ]);
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

/// A key whose header was edited by hand is "not a pacer bucket" to every
/// engine, for every command, and stays as it was: each edit below breaks
/// one rule of the header's form (docs/redis.md, "The key").
#[test]
fn an_edited_header_is_not_a_bucket_to_any_engine() {
    let Doors {
        server: _server, // the server stops when this is dropped
        mut con,
        sha,
        function,
        with_at,
    } = Doors::open();
    module(&mut con, "create", "good", &with_at).unwrap();
    let ticket = match module(&mut con, "reserve", "good", &with_at).unwrap() {
        Value::Array(items) => text(&items[2]),
        other => panic!("{other:?}"),
    };
    let Value::BulkString(good) = bytes(&mut con, "good") else {
        panic!("no bucket bytes")
    };
    assert_eq!(good.len(), 256);
    // (first byte, replacement): byte offsets from the layout table.
    let edits: [(&str, usize, &str); 12] = [
        ("magic", 0, "PACER2"),
        ("rate above 600 (the call's config is valid)", 7, "700"),
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
    ];
    for (what, at, replacement) in edits {
        let mut edited = good.clone();
        edited[at..at + replacement.len()].copy_from_slice(replacement.as_bytes());
        redis::cmd("SET")
            .arg("edited")
            .arg(&edited)
            .query::<()>(&mut con)
            .unwrap();
        let calls: [(&str, Vec<&str>); 4] = [
            ("reserve", with_at.clone()),
            ("info", vec!["AT", "0"]),
            ("release", vec![&ticket, "AT", "0"]),
            ("create", with_at.clone()),
        ];
        for (op, args) in &calls {
            for (engine, reply) in [
                ("module", module(&mut con, op, "edited", args)),
                ("script", eval(&mut con, &sha, "edited", op, args)),
                ("function", fcall(&mut con, &function, "edited", op, args)),
            ] {
                assert_eq!(
                    reply,
                    Err("ERR pacer: key 'edited' is not a pacer bucket".to_string()),
                    "{engine} {op} with {what}"
                );
            }
        }
        assert_eq!(
            bytes(&mut con, "edited"),
            Value::BulkString(edited),
            "{what}: the key changed"
        );
    }
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
    let server = Server::start(common::Options {
        test_clock: false,
        ..Default::default()
    });
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
    let server = Server::start(common::Options {
        test_clock: false,
        ..Default::default()
    });
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
