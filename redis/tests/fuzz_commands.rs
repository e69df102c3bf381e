//! Nothing a client sends crashes the server or changes a bucket by
//! mistake: random argument vectors — wrong arity, numbers at and past
//! 2^52, leading zeros, signs, NUL and non-UTF-8 bytes, other keys' and
//! edited tickets, keys of other types, `ADAPT` ranges, outcomes — go to the
//! module's commands, to
//! the script (`EVALSHA`) and to the script as a function (`FCALL`) on one
//! live server. After every command the server still
//! answers, and a command that answered an error left every bucket byte
//! for byte as it was.
//!
//! `PACER_FUZZ_COMMANDS` sets the number of commands (default 20000).

mod common;

use pacer_cli::rng::SplitMix64;
use redis::Value;

const CONFIG: [&str; 5] = ["60", "3", "120000", "5", "refund"];
const OPS: [&str; 7] = [
    "create", "reserve", "book", "release", "redeem", "info", "observe",
];

struct Fuzzer {
    rng: SplitMix64,
    /// Ticket strings seen in replies, to send back whole or edited.
    tickets: Vec<Vec<u8>>,
}

impl Fuzzer {
    fn number(&mut self) -> Vec<u8> {
        let text = match self.rng.below(12) {
            0 => "0".to_string(),
            1 => "01".into(),
            2 => "-1".into(),
            3 => "+5".into(),
            4 => (1u64 << 52).to_string(),
            5 => ((1u64 << 52) - 1).to_string(),
            6 => u64::MAX.to_string(),
            7 => "99999999999999999999999".into(),
            8 => "1.5".into(),
            9 => " 7".into(),
            10 => self.rng.below(1000).to_string(),
            _ => self.rng.below(200_000).to_string(),
        };
        text.into_bytes()
    }

    fn bytes(&mut self) -> Vec<u8> {
        let len = self.rng.below(24) as usize;
        (0..len).map(|_| self.rng.below(256) as u8).collect()
    }

    fn ticket(&mut self) -> Vec<u8> {
        if self.tickets.is_empty() || self.rng.below(4) == 0 {
            return b"0.1.60000.0.0123456789abcdef".to_vec();
        }
        let mut ticket = self.tickets[self.rng.below(self.tickets.len() as u64) as usize].clone();
        match self.rng.below(4) {
            0 => {}
            1 => {
                let i = self.rng.below(ticket.len() as u64) as usize;
                ticket[i] = b"0123456789abcdef."[self.rng.below(17) as usize];
            }
            2 => ticket.push(b'0'),
            _ => {
                ticket.pop();
            }
        }
        ticket
    }

    fn argument(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0..=3 => self.number(),
            4 => CONFIG[self.rng.below(5) as usize].as_bytes().to_vec(),
            5 => b"AT".to_vec(),
            6 => self.ticket(),
            7 => [
                b"strict".as_slice(),
                b"refund",
                b"REFUND",
                b"",
                b"ADAPT",
                b"throttled",
                b"opened",
            ][self.rng.below(7) as usize]
                .to_vec(),
            _ => self.bytes(),
        }
    }

    /// Arguments after the key: often the right shape with one part
    /// spoiled, sometimes anything.
    fn arguments(&mut self, op: &str) -> Vec<Vec<u8>> {
        let mut args: Vec<Vec<u8>> = match op {
            "create" | "reserve" => CONFIG.iter().map(|a| a.as_bytes().to_vec()).collect(),
            "book" => {
                let mut a: Vec<Vec<u8>> = CONFIG.iter().map(|a| a.as_bytes().to_vec()).collect();
                a.push(b"3".to_vec());
                a
            }
            "release" | "redeem" => vec![self.ticket()],
            "observe" => vec![[b"throttled".to_vec(), b"opened".to_vec()]
                [self.rng.below(2) as usize]
                .clone()],
            _ => vec![],
        };
        // An adaptive range after a configuration, often a valid one.
        if matches!(op, "create" | "reserve" | "book") && self.rng.below(3) == 0 {
            args.push(b"ADAPT".to_vec());
            if self.rng.below(2) == 0 {
                args.push(b"10".to_vec());
                args.push(b"0".to_vec());
            } else {
                args.push(self.number());
                args.push(self.number());
            }
        }
        match self.rng.below(6) {
            0 => {
                let n = self.rng.below(10);
                args = (0..n).map(|_| self.argument()).collect();
            }
            1 if !args.is_empty() => {
                let i = self.rng.below(args.len() as u64) as usize;
                args[i] = self.argument();
            }
            2 => {
                args.push(b"AT".to_vec());
                args.push(self.number());
            }
            3 => args.push(self.argument()),
            4 if !args.is_empty() => {
                args.pop();
            }
            _ => {}
        }
        args
    }
}

fn snapshot(con: &mut redis::Connection, keys: &[&str]) -> Vec<Value> {
    keys.iter()
        .map(|key| {
            redis::cmd("GET")
                .arg(*key)
                .query::<Value>(con)
                .unwrap_or(Value::Nil)
        })
        .collect()
}

fn collect_tickets(value: &Value, into: &mut Vec<Vec<u8>>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| collect_tickets(v, into)),
        Value::BulkString(bytes)
            if into.len() < 64 && bytes.iter().filter(|&&b| b == b'.').count() == 4 =>
        {
            into.push(bytes.clone());
        }
        _ => {}
    }
}

#[test]
fn random_commands_never_crash_the_server_and_errors_change_nothing() {
    let commands: u64 = std::env::var("PACER_FUZZ_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let server = common::Server::start(common::Options::production());
    let mut con = server.connect();
    let sha = common::load_script(&mut con, &common::script_source());
    let library = pacer_cli::engine::function_library(&common::script_source(), "pacer");
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query(&mut con)
        .expect("FUNCTION LOAD");
    // Buckets to hit (one per engine, same format), a list, a plain string.
    let mut setup = |args: &[&str]| common::call(&mut con, args).expect("setup");
    setup(&["PACER.CREATE", "fuzz:a", "60", "3", "120000", "5", "refund"]);
    setup(&["PACER.CREATE", "fuzz:b", "600", "1", "30000", "3", "strict"]);
    setup(&[
        "PACER.CREATE",
        "fuzz:c",
        "60",
        "3",
        "120000",
        "5",
        "refund",
        "ADAPT",
        "10",
        "0",
    ]);
    setup(&["RPUSH", "fuzz:list", "x"]);
    setup(&["SET", "fuzz:string", "PACER2 but not a bucket"]);
    // A key of format 1: refused by every command (docs/redis.md "The key").
    setup(&["SET", "fuzz:v1", "PACER1 a bucket of format 1"]);
    let keys = [
        "fuzz:a",
        "fuzz:b",
        "fuzz:c",
        "fuzz:string",
        "fuzz:v1",
        "fuzz:missing",
    ];
    let mut fuzzer = Fuzzer {
        rng: SplitMix64::new(0x5eed),
        tickets: Vec::new(),
    };
    let (mut errors, mut replies) = (0u64, 0u64);
    for _ in 0..commands {
        let op = OPS[fuzzer.rng.below(OPS.len() as u64) as usize];
        let key: Vec<u8> = match fuzzer.rng.below(9) {
            0..=2 => b"fuzz:a".to_vec(),
            3 => b"fuzz:c".to_vec(),
            4 => b"fuzz:b".to_vec(),
            5 => b"fuzz:list".to_vec(),
            6 => b"fuzz:string".to_vec(),
            7 if fuzzer.rng.below(2) == 0 => b"fuzz:v1".to_vec(),
            7 => b"fuzz:c".to_vec(),
            _ => fuzzer.bytes(),
        };
        let args = fuzzer.arguments(op);
        let door = ["module", "script", "function"][fuzzer.rng.below(3) as usize];
        let mut cmd = if door != "module" {
            let (mut cmd, entry) = if door == "script" {
                (redis::cmd("EVALSHA"), sha.as_str())
            } else {
                (redis::cmd("FCALL"), "pacer")
            };
            // Now and then the wrong key count or a bad op name.
            match fuzzer.rng.below(20) {
                0 => cmd.arg(entry).arg(0),
                1 => cmd.arg(entry).arg(1).arg(&key).arg(fuzzer.bytes()),
                _ => cmd.arg(entry).arg(1).arg(&key).arg(op),
            };
            cmd
        } else {
            let mut cmd = redis::cmd(&format!("PACER.{}", op.to_uppercase()));
            if fuzzer.rng.below(30) != 0 {
                cmd.arg(&key);
            }
            cmd
        };
        for arg in &args {
            cmd.arg(arg.as_slice());
        }
        let before = snapshot(&mut con, &keys);
        match cmd.query::<Value>(&mut con) {
            Ok(value) => {
                replies += 1;
                collect_tickets(&value, &mut fuzzer.tickets);
            }
            Err(e) => {
                assert!(
                    e.code().is_some(),
                    "not an error reply from the server: {e} ({op} on {key:?}, by the {door}, {args:?})"
                );
                errors += 1;
                let after = snapshot(&mut con, &keys);
                assert_eq!(
                    before, after,
                    "an error reply changed a bucket: {e} after {op} {args:?}"
                );
            }
        }
    }
    let pong: String = redis::cmd("PING").query(&mut con).expect("server alive");
    assert_eq!(pong, "PONG");
    println!("fuzz: {commands} commands, {replies} replies, {errors} error replies, server alive");
    assert!(replies > 0 && errors > 0);
}
