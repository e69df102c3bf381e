//! The script alone (`redis/pacer.lua`) against a real redis-server, no
//! module loaded: the contract of docs/redis.md at its edges.
//!
//! Every expected value below is derived by hand from SPEC §3–§5, §11 and
//! docs/redis.md, with the derivation in a comment; none is computed by
//! running the code under test. Times are the test clock (`AT <ms>`) except
//! in the test of the shipped script, so nothing depends on machine speed.
//!
//! Reading aid (SPEC §3): `backoff(r) = 2000·(2^r − 1)`,
//! `bound = min(15000, ⌊(idle − backoff(r)) / (2·(r+1))⌋)`,
//! `cap_s = max(1, ⌊bound/1000⌋)`, refusing when `r·cap_s·1000·rate ≥ 60000`;
//! one token is 60000 units and one ms refills `rate` units.

mod common;

use common::{eval, load_script, script_source, test_clock_script, Options, Server};
use redis::Value;
use std::time::Instant;

/// The error for a ticket already released, or redeemed.
const SPENT: &str = "ERR pacer: ticket already released";

/// 2^52 − 1: the largest number an argument may be.
const MAX_ARG: u64 = 4_503_599_627_370_495;

/// One element of a reply, as the client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Str(String),
    Int(i64),
    Nil,
}
use Item::{Int, Nil};

fn s(text: &str) -> Item {
    Item::Str(text.to_string())
}

fn item(value: Value) -> Item {
    match value {
        Value::BulkString(bytes) => Item::Str(String::from_utf8(bytes).expect("UTF-8 reply")),
        Value::Int(n) => Int(n),
        Value::Nil => Nil,
        other => panic!("unexpected reply element {other:?}"),
    }
}

fn items(value: Value) -> Vec<Item> {
    match value {
        Value::Array(elements) => elements.into_iter().map(item).collect(),
        other => vec![item(other)],
    }
}

/// The first 16 hex digits of SHA1(text).
fn sha1_16(text: &str) -> String {
    sha1_smol::Sha1::from(text.as_bytes()).digest().to_string()[..16].to_string()
}

/// A ticket as docs/redis.md "Tickets" spells it:
/// `<serial>.<seq>.<debit>.<slot>.<mac>`, the MAC being the first 16 hex of
/// SHA1(secret ":" key ":" serial ":" seq ":" debit ":" slot).
fn ticket(secret: &str, key: &str, serial: u64, seq: u64, debit: u64, slot: u64) -> String {
    let mac = sha1_16(&format!("{secret}:{key}:{serial}:{seq}:{debit}:{slot}"));
    format!("{serial}.{seq}.{debit}.{slot}.{mac}")
}

/// The header's state and counter fields (docs/redis.md "The key"): the
/// high-water mark, the tokens (signed), seq and the next serial, then the
/// counters admitted, refused, booked, released and release_refused.
fn fields(hw_ms: u64, tokens: i64, seq: u64, serial: u64, counters: [u64; 5]) -> String {
    let [admitted, refused, booked, released, release_refused] = counters;
    format!(
        "{hw_ms:016} {tokens:+013} {seq:08} {serial:016} {admitted:016} {refused:016} \
         {booked:016} {released:016} {release_refused:016}"
    )
}

/// The header's first block docs/redis.md "The key" lays out: `PACER2`,
/// the config fields, the secret, the state and counter fields, spaces to
/// byte 255 (the second block, bytes 256–511, is read apart: `more`).
fn header(config: &str, secret: &str, rest: &str) -> String {
    let text = format!("PACER2 {config} {secret} {rest}");
    assert_eq!(text.len(), 199, "fields end at byte 198: {text:?}");
    format!("{text:<256}")
}

/// A server with the test-clock copy of the script loaded.
struct Lua {
    _server: Server,
    con: redis::Connection,
    sha: String,
}

impl Lua {
    fn start() -> Lua {
        Lua::with_source(&test_clock_script())
    }

    fn with_source(source: &str) -> Lua {
        let server = Server::start(Options {
            module: false,
            ..Default::default()
        });
        let mut con = server.connect();
        let sha = load_script(&mut con, source);
        Lua {
            _server: server,
            con,
            sha,
        }
    }

    /// `EVALSHA sha 1 key op args…`: the reply's elements, or the error.
    fn try_run(&mut self, key: &str, op: &str, args: &[&str]) -> Result<Vec<Item>, String> {
        eval(&mut self.con, &self.sha, key, op, args).map(items)
    }

    fn run(&mut self, key: &str, op: &str, args: &[&str]) -> Vec<Item> {
        self.try_run(key, op, args)
            .unwrap_or_else(|e| panic!("{op} {args:?}: {e}"))
    }

    fn error(&mut self, key: &str, op: &str, args: &[&str]) -> String {
        match self.try_run(key, op, args) {
            Ok(reply) => panic!("{op} {args:?} answered {reply:?}, expected an error"),
            Err(error) => error,
        }
    }

    /// `release ticket AT at`.
    fn release(&mut self, key: &str, ticket: &str, at: &str) -> Vec<Item> {
        self.run(key, "release", &[ticket, "AT", at])
    }

    /// `redeem booking AT at`.
    fn redeem(&mut self, key: &str, booking: &str, at: &str) -> Vec<Item> {
        self.run(key, "redeem", &[booking, "AT", at])
    }

    /// `observe outcome AT at`.
    fn observe(&mut self, key: &str, outcome: &str, at: &str) -> Vec<Item> {
        self.run(key, "observe", &[outcome, "AT", at])
    }

    /// `GETRANGE key 0 255`: the header's first block.
    fn header(&mut self, key: &str) -> String {
        redis::cmd("GETRANGE")
            .arg(key)
            .arg(0)
            .arg(255)
            .query(&mut self.con)
            .expect("GETRANGE")
    }

    /// The key's whole value (header and bitmap), `None` when missing.
    fn value(&mut self, key: &str) -> Option<Vec<u8>> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.con)
            .expect("GET")
    }

    /// The bucket's secret: header bytes 41–56.
    fn secret(&mut self, key: &str) -> String {
        self.header(key)[41..57].to_string()
    }

    fn getbit(&mut self, key: &str, offset: u64) -> i64 {
        redis::cmd("GETBIT")
            .arg(key)
            .arg(offset)
            .query(&mut self.con)
            .expect("GETBIT")
    }

    /// INFO's value for `name`.
    fn info(&mut self, key: &str, at: u64, name: &str) -> Item {
        let reply = self.run(key, "info", &["AT", &at.to_string()]);
        let at = reply
            .iter()
            .position(|i| *i == s(name))
            .unwrap_or_else(|| panic!("INFO has no {name}: {reply:?}"));
        reply[at + 1].clone()
    }
}

/// The ticket string in a reply at `index`.
fn text(reply: &[Item], index: usize) -> String {
    match &reply[index] {
        Item::Str(text) => text.clone(),
        other => panic!("element {index} of {reply:?} is {other:?}, not a string"),
    }
}

// The replies of docs/redis.md, from their fields.

/// `admitted`: the wait, the ticket (`Nil` for none), the path, clock_regressed.
fn admitted(wait_ms: i64, ticket: Item, path: &str, regressed: i64) -> Vec<Item> {
    vec![s("admitted"), Int(wait_ms), ticket, s(path), Int(regressed)]
}

/// `booked`: the hint, the booking's ticket, its slot, clock_regressed.
fn booked(hint_s: i64, ticket: &str, slot_ms: i64, regressed: i64) -> Vec<Item> {
    vec![
        s("booked"),
        Int(hint_s),
        s(ticket),
        Int(slot_ms),
        Int(regressed),
    ]
}

/// `refused`: the hint, the required wait, clock_regressed.
fn refused(hint_s: i64, required_ms: i64, regressed: i64) -> Vec<Item> {
    vec![s("refused"), Int(hint_s), Int(required_ms), Int(regressed)]
}

/// `notyet`: the hint and the booking, unspent.
fn notyet(hint_s: i64, booking: &str) -> Vec<Item> {
    vec![s("notyet"), Int(hint_s), s(booking)]
}

// SPEC §7 "rate 60, burst 1, bound 2000": idle 30000, r 3 gives
// bound = ⌊(30000 − 2000·7)/(2·4)⌋ = ⌊16000/8⌋ = 2000, cap_s = 2,
// refusing (3·2·1000·60 = 360000 ≥ 60000), capacity 60000 units,
// max_debt = 2000·60 = 120000 units.
const SPEC7: [&str; 5] = ["60", "1", "30000", "3", "refund"];
const SPEC7_CONFIG: &str = "060 0000001 0000000000030000 03 0";

/// The header of a §7 bucket with this secret and these fields.
fn spec7_header(secret: &str, fields: String) -> String {
    header(SPEC7_CONFIG, secret, &fields)
}

fn with_at<'a>(args: &[&'a str], at: &'a str) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend(["AT", at]);
    all
}

/// (a) The shipped script has no test clock: `AT` is an error that creates
/// nothing; without it the server's TIME decides.
#[test]
fn shipped_script_refuses_at() {
    let source = script_source();
    assert_eq!(source.matches("local TEST_CLOCK = false").count(), 1);
    let mut lua = Lua::with_source(&source);

    for op_args in [with_at(&SPEC7, "0"), vec!["AT", "0"]] {
        let op = if op_args.len() == 7 {
            "reserve"
        } else {
            "info"
        };
        assert_eq!(
            lua.error("k", op, &op_args),
            "ERR pacer: AT needs a server started for tests"
        );
    }
    assert_eq!(lua.value("k"), None, "a refused AT created nothing");

    // The server's clock: TIME's sec·1000 + ⌊usec/1000⌋, between two
    // readings taken around the call.
    let time_ms = |lua: &mut Lua| -> u64 {
        let (sec, usec): (u64, u64) = redis::cmd("TIME").query(&mut lua.con).expect("TIME");
        sec * 1000 + usec / 1000
    };
    let before = time_ms(&mut lua);
    let reply = lua.run("k", "reserve", &SPEC7);
    let secret = lua.secret("k");
    assert_eq!(
        reply,
        admitted(0, s(&ticket(&secret, "k", 0, 1, 60000, 0)), "paced", 0)
    );
    let reply = lua.run("k", "info", &[]);
    let after = time_ms(&mut lua);
    let Int(now_ms) = reply[39] else {
        panic!("now_ms: {reply:?}")
    };
    let Int(high_water_ms) = reply[19] else {
        panic!("high_water_ms: {reply:?}")
    };
    assert_eq!(reply[38], s("now_ms"));
    assert!(before as i64 <= high_water_ms && high_water_ms <= now_ms && now_ms <= after as i64);
}

/// The secret is the first 16 hex of SHA1(key ":" sec ":" usec) for the
/// TIME read when the bucket was created: one of the readings between two
/// TIMEs taken around the creating call.
#[test]
fn secret_comes_from_time_at_creation() {
    let mut lua = Lua::start();
    let time = |lua: &mut Lua| -> u64 {
        let (sec, usec): (u64, u64) = redis::cmd("TIME").query(&mut lua.con).expect("TIME");
        sec * 1_000_000 + usec
    };
    let before = time(&mut lua);
    lua.run("fleet", "reserve", &with_at(&SPEC7, "0"));
    let after = time(&mut lua);
    let secret = lua.secret("fleet");
    let found = (before..=after)
        .find(|us| sha1_16(&format!("fleet:{}:{}", us / 1_000_000, us % 1_000_000)) == secret);
    assert!(
        found.is_some(),
        "no TIME in {before}..={after} gives {secret}"
    );
}

/// (b) SPEC §7's "rate 60, burst 1, bound 2000, 5 simultaneous": #0 now,
/// #1 1000, #2 2000, #3 and #4 refused (required 3000, hint 2); the header
/// after every call.
#[test]
fn spec7_sequence_replies_and_header() {
    let mut lua = Lua::start();
    let args = with_at(&SPEC7, "0");

    // #0: full (60000 ≥ 60000) → wait 0, tokens 0, seq 1, ticket serial 0.
    let reply = lua.run("k", "reserve", &args);
    let secret = lua.secret("k");
    assert!(secret
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_eq!(
        reply,
        admitted(0, s(&ticket(&secret, "k", 0, 1, 60000, 0)), "paced", 0)
    );
    assert_eq!(
        lua.header("k"),
        spec7_header(&secret, fields(0, 0, 1, 1, [1, 0, 0, 0, 0]))
    );

    // #1: tokens 0, deficit 60000, wait ⌈60000/60⌉ = 1000 ≤ 2000 → tokens
    // −60000, seq 2.
    let reply = lua.run("k", "reserve", &args);
    assert_eq!(
        reply,
        admitted(1000, s(&ticket(&secret, "k", 1, 2, 60000, 0)), "paced", 0)
    );
    // #2: deficit 120000, wait 2000 ≤ 2000 → tokens −120000, seq 3.
    let reply = lua.run("k", "reserve", &args);
    assert_eq!(
        reply,
        admitted(2000, s(&ticket(&secret, "k", 2, 3, 60000, 0)), "paced", 0)
    );
    assert_eq!(
        lua.header("k"),
        spec7_header(&secret, fields(0, -120000, 3, 3, [3, 0, 0, 0, 0]))
    );
    // #3, #4: deficit 180000, wait 3000 > 2000, refusing → refused, hint
    // cap_s = 2; nothing debited, only the refused counter moves.
    for count in 1..=2 {
        let reply = lua.run("k", "reserve", &args);
        assert_eq!(reply, refused(2, 3000, 0));
        let fields = fields(0, -120000, 3, 3, [3, count, 0, 0, 0]);
        assert_eq!(lua.header("k"), header(SPEC7_CONFIG, &secret, &fields));
    }

    // INFO at 500: level = −120000 + 500·60 = −90000; the rest as derived.
    let reply = lua.run("k", "info", &["AT", "500"]);
    let expected = [
        ("rate_per_min", Int(60)),
        ("burst", Int(1)),
        ("idle_timeout_ms", Int(30000)),
        ("max_retries", Int(3)),
        ("release_policy", s("refund")),
        ("mode", s("refusing")),
        ("wait_bound_ms", Int(2000)),
        ("capacity_units", Int(60000)),
        ("max_debt_units", Int(120000)),
        ("high_water_ms", Int(0)),
        ("tokens_units", Int(-120000)),
        ("level_units", Int(-90000)),
        ("seq", Int(3)),
        ("serial", Int(3)),
        ("admitted", Int(3)),
        ("refused", Int(2)),
        ("booked", Int(0)),
        ("released", Int(0)),
        ("release_refused", Int(0)),
        ("now_ms", Int(500)),
        // A fixed-rate bucket: its rate, and no range or control word.
        ("rate_in_force", Int(60)),
        ("adaptive_floor_per_min", Int(0)),
        ("adaptive_ceiling_per_min", Int(0)),
        ("origin_ms", Int(0)),
        ("window", Int(0)),
        ("opened", Int(0)),
        ("opened_before", Int(0)),
        ("limit_per_min", Int(0)),
        ("probing", Int(0)),
        ("again", Int(0)),
        // The second block: the waits 1000 (in (500, 1000]) and 2000 (in
        // (1000, 2500]); nothing shaped, redeemed or observed.
        ("admitted_after_wait", Int(2)),
        ("shaped", Int(0)),
        ("redeemed", Int(0)),
        ("upstream_opened", Int(0)),
        ("upstream_throttled", Int(0)),
        ("wait_ms_total", Int(3000)),
        ("wait_bucket_10", Int(0)),
        ("wait_bucket_50", Int(0)),
        ("wait_bucket_100", Int(0)),
        ("wait_bucket_500", Int(0)),
        ("wait_bucket_1000", Int(1)),
        ("wait_bucket_2500", Int(1)),
        ("wait_bucket_5000", Int(0)),
        ("wait_bucket_10000", Int(0)),
    ];
    let expected: Vec<Item> = expected
        .into_iter()
        .flat_map(|(name, value)| [s(name), value])
        .collect();
    assert_eq!(reply, expected);

    // Burst 0 means 1: the same bucket, no config mismatch. At 3000:
    // level −120000 + 3000·60 = 60000 → wait 0, tokens 0, hw 3000.
    let burst_0 = ["60", "0", "30000", "3", "refund", "AT", "3000"];
    let reply = lua.run("k", "reserve", &burst_0);
    assert_eq!(
        reply,
        admitted(0, s(&ticket(&secret, "k", 3, 4, 60000, 0)), "paced", 0)
    );
    // Rate 0 turns pacing off: admitted at once, no ticket (nil), counted.
    let rate_0 = ["0", "0", "30000", "3", "strict", "AT", "7"];
    let reply = lua.run("off", "reserve", &rate_0);
    assert_eq!(reply, admitted(0, Nil, "disabled", 0));
    let off_secret = lua.secret("off");
    assert_eq!(
        lua.header("off"),
        header(
            "000 0000001 0000000000030000 03 1",
            &off_secret,
            &fields(7, 60000, 0, 0, [1, 0, 0, 0, 0])
        )
    );
}

/// SPEC §11 on the §7 bucket: a booking, its redemption (which spends it
/// and issues the admission's own ticket), that ticket's release, and a
/// refusal beyond the horizon.
#[test]
fn spec11_booking_redeem_release() {
    let mut lua = Lua::start();
    let book = |retries: &'static str, at: &'static str| {
        let mut args = SPEC7.to_vec();
        args.extend([retries, "AT", at]);
        args
    };
    // Three admissions at 0 as in §7: tokens −120000, seq 3, serial 3.
    for _ in 0..3 {
        lua.run("k", "book", &book("3", "0"));
    }
    let secret = lua.secret("k");
    // horizon(3) = 2000 + 3·2·1000 = 8000. Deficit 180000 → wait 3000 ≤
    // 8000 → booked: slot 0 + 3000, hint clamp(⌈(3000 − 2000)/1000⌉, 1, 2)
    // = 1; tokens −180000, seq 4, serial 4.
    let reply = lua.run("k", "book", &book("3", "0"));
    let booking = ticket(&secret, "k", 3, 4, 60000, 3000);
    assert_eq!(reply, booked(1, &booking, 3000, 0));
    // horizon(0) = 2000: wait 4000 > 2000 → a plain refusal, hint 2.
    let reply = lua.run("k", "book", &book("0", "0"));
    assert_eq!(reply, refused(2, 4000, 0));
    // retries_left beyond max_retries is clamped to 3: horizon 8000, wait
    // 4000 → booked, slot 4000, hint clamp(⌈2000/1000⌉, 1, 2) = 2.
    let reply = lua.run("k", "book", &book("4503599627370495", "0"));
    let second = ticket(&secret, "k", 4, 5, 60000, 4000);
    assert_eq!(reply, booked(2, &second, 4000, 0));
    assert_eq!(
        lua.header("k"),
        spec7_header(&secret, fields(0, -240000, 5, 5, [3, 1, 2, 0, 0]))
    );
    let before = lua.value("k");

    // At 500, 3000 > 500 + 2000 → not yet, hint clamp(⌈(3000 − 2000 −
    // 500)/1000⌉, 1, 2) = 1; nothing written.
    let reply = lua.redeem("k", &booking, "500");
    assert_eq!(reply, notyet(1, &booking));
    assert_eq!(
        lua.value("k"),
        before,
        "a redemption not yet writes nothing"
    );
    // At 1000: 3000 ≤ 3000 → admitted after 2000 with a fresh ticket: the
    // next serial (5), the booking's seq (4) and debit, slot 0. The booking
    // is spent (bit 4096 + 3, the bitmap from byte 512), the admission counted (admitted 4), serial 6;
    // the state is the booking's debit, untouched.
    let reply = lua.redeem("k", &booking, "1000");
    let admission = ticket(&secret, "k", 5, 4, 60000, 0);
    assert_eq!(reply, admitted(2000, s(&admission), "booked", 0));
    assert_eq!(lua.getbit("k", 4096 + 3), 1);
    assert_eq!(lua.getbit("k", 4096 + 5), 0);
    assert_eq!(
        lua.header("k"),
        spec7_header(&secret, fields(0, -240000, 5, 6, [4, 1, 2, 0, 0]))
    );
    // The booking again, redeemed or released: spent, nothing written.
    let redeemed = lua.value("k");
    assert_eq!(lua.error("k", "redeem", &[&booking, "AT", "3500"]), SPENT);
    assert_eq!(lua.error("k", "release", &[&booking, "AT", "1000"]), SPENT);
    assert_eq!(lua.value("k"), redeemed, "a spent booking writes nothing");

    // Release the admission at 1000 (refund): −240000 + 1000·60 + 60000 =
    // −120000, hw 1000, seq stays 5; released 1; bit 4096 + 5 set.
    assert_eq!(lua.release("k", &admission, "1000"), vec![Int(1)]);
    assert_eq!(lua.getbit("k", 4096 + 5), 1);
    assert_eq!(
        lua.header("k"),
        spec7_header(&secret, fields(1000, -120000, 5, 6, [4, 1, 2, 1, 0]))
    );
    assert_eq!(
        lua.error("k", "release", &[&admission, "AT", "1000"]),
        SPENT
    );
    assert_eq!(lua.error("k", "redeem", &[&admission, "AT", "1000"]), SPENT);
}

/// The strict policy: a release refused because a later debit is still out
/// spends the ticket all the same and counts in release_refused.
#[test]
fn strict_release_refused_still_spends() {
    let mut lua = Lua::start();
    // rate 60, burst 2, idle 30000, r 3 (bound 2000), strict: capacity
    // 120000; two admissions at 0 → tokens 0, seq 2 (tickets seq 1 and 2).
    let args = ["60", "2", "30000", "3", "strict", "AT", "0"];
    lua.run("k", "reserve", &args);
    lua.run("k", "reserve", &args);
    let secret = lua.secret("k");
    let first = ticket(&secret, "k", 0, 1, 60000, 0);
    let last = ticket(&secret, "k", 1, 2, 60000, 0);
    let config = "060 0000002 0000000000030000 03 1";
    // The first ticket's seq 1 ≠ the stack's 2 → refused (0): state as it
    // was, release_refused 1, its bit set.
    assert_eq!(lua.release("k", &first, "0"), vec![Int(0)]);
    assert_eq!(lua.getbit("k", 4096), 1);
    assert_eq!(
        lua.header("k"),
        header(config, &secret, &fields(0, 0, 2, 2, [2, 0, 0, 0, 1]))
    );
    // The last one matches the stack → refunded: tokens 60000, seq 1.
    assert_eq!(lua.release("k", &last, "0"), vec![Int(1)]);
    assert_eq!(
        lua.header("k"),
        header(config, &secret, &fields(0, 60000, 1, 2, [2, 0, 0, 1, 1]))
    );
    // Now the stack is at 1, but the first ticket was spent by its refusal.
    assert_eq!(lua.error("k", "release", &[&first, "AT", "0"]), SPENT);
}

/// SPEC §7 "rate 1 and 2 /min at default budget, 20 simultaneous: 19
/// admitted at once, exactly 1 waits the bound (4833), none refused".
/// Defaults: idle 120000, r 5: bound ⌊(120000 − 62000)/12⌋ = 4833, cap_s 4;
/// at rate 1 the schedule 5·4·1000·1 = 20000 < 60000 → shaping-low-rate;
/// max_debt 4833·1 = 4833 units; burst 10 = 600000 units.
#[test]
fn shaping_low_rate_then_overflow() {
    let mut lua = Lua::start();
    let args = ["1", "10", "120000", "5", "refund", "AT", "0"];
    // #0–#9: whole tokens, wait 0 (600000 → 0).
    for serial in 0..10u64 {
        let reply = lua.run("k", "reserve", &args);
        assert_eq!((&reply[1], &reply[3]), (&Int(0), &s("paced")), "#{serial}");
    }
    let secret = lua.secret("k");
    // #10: wait 60000 > 4833 → shaped: debit min(0 + 4833, 60000) = 4833,
    // wait the bound 4833, ticket serial 10, seq 11, debit 4833.
    let reply = lua.run("k", "reserve", &args);
    let shaped = ticket(&secret, "k", 10, 11, 4833, 0);
    assert_eq!(reply, admitted(4833, s(&shaped), "shaped", 0));
    // #11–#19: the floor −4833 is reached → overflow, at once, no ticket.
    for _ in 11..20 {
        let reply = lua.run("k", "reserve", &args);
        assert_eq!(reply, admitted(0, Nil, "overflow", 0));
    }
    let secret_header = |rest: &str| header("001 0000010 0000000000120000 05 0", &secret, rest);
    assert_eq!(
        lua.header("k"),
        secret_header(&fields(0, -4833, 11, 11, [20, 0, 0, 0, 0]))
    );
    assert_eq!(lua.info("k", 0, "mode"), s("shaping-low-rate"));
    // Releasing the shaped ticket at 3 refunds its fraction: −4833 + 3·1 +
    // 4833 = 3, hw 3.
    assert_eq!(lua.release("k", &shaped, "3"), vec![Int(1)]);
    assert_eq!(&lua.header("k")[58..88], "0000000000000003 +000000000003");
}

/// A wait is ⌈deficit/rate⌉: rate 7, burst 1, idle 120000, r 0 (bound
/// ⌊120000/2⌋ → 15000, shaping-no-retry, max_debt 15000·7 = 105000).
#[test]
fn wait_rounds_up() {
    let mut lua = Lua::start();
    let args = ["7", "1", "120000", "0", "refund", "AT", "0"];
    lua.run("k", "reserve", &args);
    // Deficit 60000: 60000 = 7·8571 + 3 → wait 8572; tokens −60000.
    let reply = lua.run("k", "reserve", &args);
    assert_eq!((&reply[1], &reply[3]), (&Int(8572), &s("paced")));
    // Deficit 120000 → ⌈120000/7⌉ = 17143 > 15000 → shaped, debit
    // min(−60000 + 105000, 60000) = 45000, wait 15000.
    let reply = lua.run("k", "reserve", &args);
    let secret = lua.secret("k");
    assert_eq!(
        reply,
        admitted(15000, s(&ticket(&secret, "k", 2, 3, 45000, 0)), "shaped", 0)
    );
    assert_eq!(lua.info("k", 0, "mode"), s("shaping-no-retry"));
    // At 1: level −105000 + 7 = −104993; deficit 164993 = 7·23570 + 3 →
    // wait 23571 > 15000; above the floor 7 units → shaped, debit 7.
    let reply = lua.run("k", "reserve", &with_at(&args[..5], "1"));
    assert_eq!(
        reply,
        admitted(15000, s(&ticket(&secret, "k", 3, 4, 7, 0)), "shaped", 0)
    );
    // Now −105000 at 1: room 165000 = 7·23571 + 3, so the refill reaches
    // capacity after ⌈165000/7⌉ = 23572 ms, not 23571: at 23572 the level
    // is −105000 + 23571·7 = 59997, at 23573 it is 60000.
    assert_eq!(lua.info("k", 23572, "level_units"), Int(59997));
    assert_eq!(lua.info("k", 23573, "level_units"), Int(60000));
}

/// (c) Clocks at the edge: 2^52 − 1 accepted, 2^52 refused; the header
/// holds the 16-digit mark exactly.
#[test]
fn clock_edges() {
    let mut lua = Lua::start();
    let reply = lua.run("k", "reserve", &with_at(&SPEC7, "4503599627370495"));
    let secret = lua.secret("k");
    assert_eq!(
        reply,
        admitted(0, s(&ticket(&secret, "k", 0, 1, 60000, 0)), "paced", 0)
    );
    assert_eq!(&lua.header("k")[58..74], "4503599627370495");
    assert_eq!(lua.info("k", MAX_ARG, "now_ms"), Int(MAX_ARG as i64));
    let before = lua.value("k");
    for at in ["4503599627370496", "9999999999999999", "10000000000000000"] {
        assert_eq!(
            lua.error("k", "reserve", &with_at(&SPEC7, at)),
            format!("ERR pacer: AT must be a whole number below 2^52, got '{at}'")
        );
    }
    assert_eq!(lua.value("k"), before);
}

/// (c) Rate 600 after an idle spell of 2^52 − 1 ms refills exactly to
/// capacity; a partial refill near 2^52 is exact to the unit.
#[test]
fn rate_600_refill_at_the_edge() {
    let mut lua = Lua::start();
    // rate 600, burst 1, idle 30000, r 3: bound 2000, cap_s 2, refusing
    // (3·2·1000·600 ≥ 60000). At 0: wait 0 (tokens 0), then ⌈60000/600⌉ =
    // 100 (tokens −60000).
    let config = ["600", "1", "30000", "3", "refund"];
    lua.run("k", "reserve", &with_at(&config, "0"));
    let reply = lua.run("k", "reserve", &with_at(&config, "0"));
    assert_eq!((&reply[0], &reply[1]), (&s("admitted"), &Int(100)));
    // At 2^52 − 1: elapsed 2^52 − 1, room 120000; the gain is far beyond the
    // room → exactly capacity, 60000.
    assert_eq!(lua.info("k", MAX_ARG, "level_units"), Int(60000));
    assert_eq!(lua.info("k", MAX_ARG, "tokens_units"), Int(-60000));
    let reply = lua.run("k", "reserve", &with_at(&config, "4503599627370495"));
    assert_eq!((&reply[1], &reply[3]), (&Int(0), &s("paced")));
    assert_eq!(&lua.header("k")[58..88], "4503599627370495 +000000000000");

    // A bucket created at H = 2^52 − 1000 = 4503599627369496, drained to
    // −60000; 150 ms later the level is −60000 + 150·600 = 30000, so a
    // reserve waits ⌈(60000 − 30000)/600⌉ = 50 and leaves −30000 at
    // H + 150 = 4503599627369646.
    lua.run("edge", "reserve", &with_at(&config, "4503599627369496"));
    lua.run("edge", "reserve", &with_at(&config, "4503599627369496"));
    assert_eq!(
        lua.info("edge", 4503599627369646, "level_units"),
        Int(30000)
    );
    // 199 ms: −60000 + 119400 = 59400, one unit short of the 200th ms.
    assert_eq!(
        lua.info("edge", 4503599627369695, "level_units"),
        Int(59400)
    );
    assert_eq!(
        lua.info("edge", 4503599627369696, "level_units"),
        Int(60000)
    );
    let reply = lua.run("edge", "reserve", &with_at(&config, "4503599627369646"));
    assert_eq!((&reply[1], &reply[3]), (&Int(50), &s("paced")));
    assert_eq!(
        &lua.header("edge")[58..88],
        "4503599627369646 -000000030000"
    );
}

/// (c) Burst 1000000: capacity 6·10^10 units in the 12-digit token field.
#[test]
fn largest_burst() {
    let mut lua = Lua::start();
    let config = ["600", "1000000", "30000", "3", "refund"];
    let reply = lua.run("k", "reserve", &with_at(&config, "0"));
    let secret = lua.secret("k");
    let first = ticket(&secret, "k", 0, 1, 60000, 0);
    assert_eq!(reply[2], s(&first));
    // 6·10^10 − 60000 = 59999940000.
    assert_eq!(
        lua.header("k"),
        header(
            "600 1000000 0000000000030000 03 0",
            &secret,
            &fields(0, 59999940000, 1, 1, [1, 0, 0, 0, 0])
        )
    );
    assert_eq!(lua.info("k", 0, "capacity_units"), Int(60_000_000_000));
    // 100 ms refill 60000: back at capacity, 6·10^10, and capped there.
    assert_eq!(lua.info("k", 100, "level_units"), Int(60_000_000_000));
    assert_eq!(lua.info("k", MAX_ARG, "level_units"), Int(60_000_000_000));
    // A release at 50: 59999940000 + 50·600 + 60000 = 60000030000, capped
    // at 60000000000.
    assert_eq!(lua.release("k", &first, "50"), vec![Int(1)]);
    assert_eq!(&lua.header("k")[58..88], "0000000000000050 +060000000000");
    assert_eq!(
        lua.error(
            "k2",
            "reserve",
            &with_at(&["600", "1000001", "30000", "3", "refund"], "0")
        ),
        "ERR pacer: burst 1000001 is above 1000000"
    );
    assert_eq!(lua.value("k2"), None);
}

/// (c) idle_timeout_ms = 2^52 − 1: the ladder ceiling is 41, since
/// 2000·(2^41 − 1) = 4398046511102000 < 4503599627370495 ≤
/// 2000·(2^42 − 1) = 8796093022206000. With r = 41 the bound is
/// min(15000, ⌊(4503599627370495 − 4398046511102000)/84⌋) = 15000.
#[test]
fn largest_idle_timeout() {
    let mut lua = Lua::start();
    let idle = "4503599627370495";
    assert_eq!(
        lua.error(
            "k",
            "reserve",
            &with_at(&["60", "1", idle, "42", "refund"], "0")
        ),
        "ERR pacer: max_retries 42 is above 41, the most whose backoff ladder fits a \
         4503599627370495 ms idle timeout"
    );
    assert_eq!(lua.value("k"), None);
    lua.run(
        "k",
        "reserve",
        &with_at(&["60", "1", idle, "41", "refund"], "0"),
    );
    assert_eq!(&lua.header("k")[7..38], "060 0000001 4503599627370495 41");
    assert_eq!(lua.info("k", 0, "wait_bound_ms"), Int(15000));
    // cap_s 15: refusing (41·15·1000·60 ≥ 60000).
    assert_eq!(lua.info("k", 0, "mode"), s("refusing"));
    // r = 0: bound min(15000, ⌊(2^52 − 1)/2⌋) = 15000, shaping-no-retry.
    lua.run(
        "r0",
        "reserve",
        &with_at(&["60", "1", idle, "0", "refund"], "0"),
    );
    assert_eq!(lua.info("r0", 0, "mode"), s("shaping-no-retry"));
    assert_eq!(lua.info("r0", 0, "max_debt_units"), Int(15000 * 60));

    // Where the floor division shows: idle = 4398046511102000 + 84·1234 + 83
    // = 4398046511205739. Ceiling still 41 (backoff(41) < idle ≤
    // backoff(42)); bound ⌊103739/84⌋ = 1234, cap_s 1, refusing
    // (41·1·1000·60 ≥ 60000). A tighter idle one below backoff(41)+1 …
    let idle = "4398046511205739";
    lua.run(
        "mid",
        "reserve",
        &with_at(&["60", "1", idle, "41", "refund"], "0"),
    );
    assert_eq!(lua.info("mid", 0, "wait_bound_ms"), Int(1234));
    assert_eq!(lua.info("mid", 0, "max_debt_units"), Int(1234 * 60));
    // … and at idle = backoff(41) exactly the ceiling drops to 40.
    assert_eq!(
        lua.error(
            "low",
            "reserve",
            &with_at(&["60", "1", "4398046511102000", "41", "refund"], "0")
        ),
        "ERR pacer: max_retries 41 is above 40, the most whose backoff ladder fits a \
         4398046511102000 ms idle timeout"
    );
}

/// (c) A booking at the deepest horizon. rate 2, burst 1, idle 2^52 − 1,
/// r 41: bound 15000, cap_s 15, refusing (41·15·1000·2 ≥ 60000), horizon
/// 15000 + 41·15·1000 = 630000. After the first (paced) admission the k-th
/// booking has deficit 60000·k and waits 60000·k/2 = 30000·k; k = 21 waits
/// exactly 630000 = the horizon (booked), k = 22 waits 660000 (refused).
#[test]
fn deepest_booking_horizon() {
    let mut lua = Lua::start();
    let config = ["2", "1", "4503599627370495", "41", "refund"];
    let book = |retries: &'static str, at: &'static str| {
        let mut args = config.to_vec();
        args.extend([retries, "AT", at]);
        args
    };
    // At T = 2^52 − 1 − 630000 = 4503599626740495 the deepest slot is
    // T + 630000 = 2^52 − 1.
    let at = "4503599626740495";
    let t: u64 = 4_503_599_626_740_495;
    lua.run("k", "book", &book("41", at));
    let secret = lua.secret("k");
    for k in 1..=21u64 {
        let reply = lua.run("k", "book", &book("4503599627370495", at));
        // hint clamp(⌈(30000k − 15000)/1000⌉, 1, 15) = 15 for every k ≥ 1.
        let booking = ticket(&secret, "k", k, k + 1, 60000, t + 30000 * k);
        assert_eq!(reply, booked(15, &booking, (t + 30000 * k) as i64, 0));
    }
    let deepest = ticket(&secret, "k", 21, 22, 60000, MAX_ARG);
    // k = 22: 660000 > 630000 → refused, hint 15 (retries_left 2^52 − 1 is
    // clamped to 41: unclamped, the horizon would cover it).
    let reply = lua.run("k", "book", &book("4503599627370495", at));
    assert_eq!(reply, refused(15, 660000, 0));
    // tokens 60000 − 22·60000 = −1260000.
    assert_eq!(&lua.header("k")[58..88], "4503599626740495 -000001260000");
    // With 40 retries left the horizon is 615000 < 660000: refused too.
    let reply = lua.run("k", "book", &book("40", at));
    assert_eq!(reply, refused(15, 660000, 0));

    // Redeem the deepest (slot 2^52 − 1): at 2^52 − 1 − 15001 the slot is
    // 15001 > bound ahead → not yet, hint ⌈1/1000⌉ = 1; at 2^52 − 1 − 15000
    // admitted after 15000, with the next serial (22) and its seq (22).
    assert_eq!(
        lua.redeem("k", &deepest, "4503599627355494"),
        notyet(1, &deepest)
    );
    let admission = ticket(&secret, "k", 22, 22, 60000, 0);
    assert_eq!(
        lua.redeem("k", &deepest, "4503599627355495"),
        admitted(15000, s(&admission), "booked", 0)
    );
    // The one before it (k = 20, slot 2^52 − 1 − 30000) at 2^52 − 1: after
    // 0 (the slot is past), serial 23, seq 21.
    let before = ticket(&secret, "k", 20, 21, 60000, t + 30000 * 20);
    let admission = ticket(&secret, "k", 23, 21, 60000, 0);
    assert_eq!(
        lua.redeem("k", &before, "4503599627370495"),
        admitted(0, s(&admission), "booked", 0)
    );

    // Booked at 2^52 − 1 the deepest slot is 2^52 − 1 + 630000 =
    // 4503599628000495, past 2^52 and still exact; it redeems (not yet,
    // hint clamp(⌈615000/1000⌉, 1, 15) = 15) and releases.
    lua.run("top", "book", &book("41", "4503599627370495"));
    for _ in 1..=20 {
        lua.run("top", "book", &book("41", "4503599627370495"));
    }
    let reply = lua.run("top", "book", &book("41", "4503599627370495"));
    let top_secret = lua.secret("top");
    let top = ticket(&top_secret, "top", 21, 22, 60000, 4503599628000495);
    assert_eq!(reply, booked(15, &top, 4503599628000495, 0));
    assert_eq!(
        lua.redeem("top", &top, "4503599627370495"),
        notyet(15, &top)
    );
    assert_eq!(lua.release("top", &top, "4503599627370495"), vec![Int(1)]);
}

/// (d) A clock behind the high-water mark is the mark: no refill, the mark
/// stays, clock_regressed 1. Redeem reads the raw clock.
#[test]
fn backward_clock() {
    let mut lua = Lua::start();
    // §7 bucket created at 1000: tokens 0, hw 1000.
    lua.run("k", "reserve", &with_at(&SPEC7, "1000"));
    let secret = lua.secret("k");
    // At 500 (behind): acts at 1000, deficit 60000 → wait 1000, regressed.
    let reply = lua.run("k", "reserve", &with_at(&SPEC7, "500"));
    assert_eq!(
        reply,
        admitted(1000, s(&ticket(&secret, "k", 1, 2, 60000, 0)), "paced", 1)
    );
    // At 0: deficit 120000 → wait 2000; at 400: deficit 180000 → refused.
    let reply = lua.run("k", "reserve", &with_at(&SPEC7, "0"));
    assert_eq!((&reply[1], &reply[4]), (&Int(2000), &Int(1)));
    let reply = lua.run("k", "reserve", &with_at(&SPEC7, "400"));
    assert_eq!(reply, refused(2, 3000, 1));
    assert_eq!(&lua.header("k")[58..88], "0000000000001000 -000000120000");
    // INFO at 0: the level at max(0, 1000) = −120000; now_ms is the raw 0.
    assert_eq!(lua.info("k", 0, "level_units"), Int(-120000));
    assert_eq!(lua.info("k", 0, "now_ms"), Int(0));
    assert_eq!(lua.info("k", 0, "high_water_ms"), Int(1000));

    // At 2000 (ahead again): +60000 → −60000, wait 2000, not regressed.
    let reply = lua.run("k", "reserve", &with_at(&SPEC7, "2000"));
    assert_eq!((&reply[1], &reply[4]), (&Int(2000), &Int(0)));
    // A booking at 2000: deficit 180000 → wait 3000 ≤ horizon 8000, slot
    // 5000, hint 1, tokens −180000, seq 5 (serial 4).
    let mut args = SPEC7.to_vec();
    args.extend(["3", "AT", "2000"]);
    let reply = lua.run("k", "book", &args);
    let booking = ticket(&secret, "k", 4, 5, 60000, 5000);
    assert_eq!(reply, booked(1, &booking, 5000, 0));
    // Redeem at 0 (behind the mark 2000) uses the raw clock 0:
    // 5000 > 0 + 2000 → not yet, hint clamp(⌈3000/1000⌉, 1, 2) = 2 (at the
    // mark it would be ⌈1000/1000⌉ = 1).
    assert_eq!(lua.redeem("k", &booking, "0"), notyet(2, &booking));
    // A release at 0 acts at the mark 2000: −180000 + 60000 = −120000, hw
    // stays 2000.
    assert_eq!(lua.release("k", &booking, "0"), vec![Int(1)]);
    assert_eq!(&lua.header("k")[58..88], "0000000000002000 -000000120000");
    // Disabled pacing answers clock_regressed 0 whatever the clock (the
    // core reads no state).
    lua.run(
        "off",
        "reserve",
        &["0", "1", "30000", "3", "refund", "AT", "100"],
    );
    let reply = lua.run(
        "off",
        "reserve",
        &["0", "1", "30000", "3", "refund", "AT", "0"],
    );
    assert_eq!(reply, admitted(0, Nil, "disabled", 0));
    assert_eq!(&lua.header("off")[58..74], "0000000000000100");
}

// Tickets out of range: debit 0, debit 60001, seq 2^24.
const ZERO_DEBIT: &str = "0.1.0.0.0123456789abcdef";
const BIG_DEBIT: &str = "0.1.60001.0.0123456789abcdef";
const BIG_SEQ: &str = "0.16777216.60000.0.0123456789abcdef";

/// (e) A bad call answers its error and changes nothing: the key's whole
/// value (header and bitmap) is byte-identical afterwards.
#[test]
fn bad_input_changes_nothing() {
    let mut lua = Lua::start();
    // The §7 bucket with a plain ticket (serial 0), a released one (serial
    // 1) and a booking (serial 3, slot 3000).
    let first = lua.run("k", "reserve", &with_at(&SPEC7, "0"));
    let plain = text(&first, 2);
    let second = lua.run("k", "reserve", &with_at(&SPEC7, "0"));
    let released = text(&second, 2);
    lua.run("k", "reserve", &with_at(&SPEC7, "0"));
    let mut book = SPEC7.to_vec();
    book.extend(["3", "AT", "0"]);
    let booked = lua.run("k", "book", &book);
    let booking = text(&booked, 2);
    assert_eq!(lua.release("k", &released, "0"), vec![Int(1)]);
    let secret = lua.secret("k");
    lua.run("other", "reserve", &with_at(&SPEC7, "0"));
    let foreign = lua.run("other", "reserve", &with_at(&SPEC7, "0"));
    let foreign = text(&foreign, 2);
    redis::cmd("RPUSH")
        .arg("list")
        .arg("x")
        .query::<i64>(&mut lua.con)
        .expect("RPUSH");
    redis::cmd("SET")
        .arg("text")
        .arg("hello")
        .query::<()>(&mut lua.con)
        .expect("SET");
    let short = format!("{:<511}", "PACER2 ");
    redis::cmd("SET")
        .arg("short")
        .arg(&short)
        .query::<()>(&mut lua.con)
        .expect("SET");

    let with = |extra: &[&'static str]| {
        let mut args = SPEC7.to_vec();
        args.extend(extra);
        args
    };
    let config = |rate, burst, idle, retries, policy| vec![rate, burst, idle, retries, policy];
    let number = |name: &str, got: &str| {
        format!("ERR pacer: {name} must be a whole number below 2^52, got '{got}'")
    };
    // A ticket with one field replaced.
    let edit = |ticket: &str, field: usize, to: &str| {
        let mut fields: Vec<&str> = ticket.split('.').collect();
        fields[field] = to;
        fields.join(".")
    };
    let mac_of = |t: &str| t.rsplit('.').next().unwrap().to_string();
    // Serial 4 is not issued yet (serials 0–3 are), with a MAC that matches.
    let unissued = ticket(&secret, "k", 4, 5, 60000, 0);
    let uppercase = edit(&plain, 4, &mac_of(&plain).to_uppercase());
    let edited_debit = edit(&plain, 2, "30000");
    let edited_slot = edit(&booking, 3, "2000");
    let leading_zero = format!("0{plain}");

    let arity = |op: &str| format!("ERR pacer: wrong number of arguments for {op}");
    let not_issued = "ERR pacer: ticket not issued by this bucket".to_string();
    let malformed = |t: &str| format!("ERR pacer: malformed ticket '{t}'");
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value".to_string();
    let created = "ERR pacer: bucket 'k' was created with rate_per_min=60 burst=1 \
                   idle_timeout_ms=30000 max_retries=3 release_policy=refund; this call has";
    let mut book_strict = config("60", "1", "30000", "3", "strict");
    book_strict.push("3");

    let err = |text: &str| format!("ERR pacer: {text}");
    let mut cases: Vec<(&str, &str, Vec<&str>, String)> = vec![
        // Arity, keywords, ops.
        ("k", "reserve", SPEC7[..4].to_vec(), arity("reserve")),
        ("k", "reserve", with(&["AT"]), arity("reserve")),
        ("k", "reserve", with(&["AT", "1", "2"]), arity("reserve")),
        ("k", "book", with(&[]), arity("book")),
        ("k", "release", vec![], arity("release")),
        ("k", "redeem", vec![&booking, "AT"], arity("redeem")),
        ("k", "info", vec!["AT"], arity("info")),
        (
            "k",
            "reserve",
            with(&["XX", "0"]),
            err("unknown argument 'XX'"),
        ),
        ("k", "frobnicate", vec![], err("unknown op 'frobnicate'")),
    ];
    // Numbers: 0 or [1-9] then at most 15 digits, below 2^52. A reserve
    // with this config: the field named and its text.
    let numbers = [
        (["x", "1", "30000", "3", "refund"], "rate_per_min", "x"),
        (["60", "01", "30000", "3", "refund"], "burst", "01"),
        (
            ["60", "1", "4503599627370496", "3", "refund"],
            "idle_timeout_ms",
            "4503599627370496",
        ),
        (["60", "1", "30000", "-1", "refund"], "max_retries", "-1"),
        (["1e2", "1", "30000", "3", "refund"], "rate_per_min", "1e2"),
        (["+60", "1", "30000", "3", "refund"], "rate_per_min", "+60"),
        (["60 ", "1", "30000", "3", "refund"], "rate_per_min", "60 "),
        (["", "1", "30000", "3", "refund"], "rate_per_min", ""),
        (["60", "1", "30000", "3.0", "refund"], "max_retries", "3.0"),
    ];
    for (config, name, got) in numbers {
        cases.push(("k", "reserve", config.to_vec(), number(name, got)));
    }
    let not_bucket = |key: &str| err(&format!("key '{key}' is not a pacer bucket"));
    let no_bucket = err("no bucket at key 'missing'");
    cases.extend([
        (
            "k",
            "reserve",
            config("60", "1", "30000", "3", "Refund"),
            err("release_policy must be refund or strict, got 'Refund'"),
        ),
        ("k", "book", with(&["1.5"]), number("retries_left", "1.5")),
        ("k", "reserve", with(&["AT", "01"]), number("AT", "01")),
        // Params::plan's ranges, and a configuration other than the bucket's.
        (
            "k",
            "reserve",
            config("601", "1", "30000", "3", "refund"),
            err("rate_per_min 601 is above 600"),
        ),
        (
            "k",
            "reserve",
            config("60", "1", "120000", "6", "refund"),
            err(
                "max_retries 6 is above 5, the most whose backoff ladder fits a \
                 120000 ms idle timeout",
            ),
        ),
        (
            "k",
            "reserve",
            config("60", "2", "30000", "3", "refund"),
            format!(
                "{created} rate_per_min=60 burst=2 idle_timeout_ms=30000 max_retries=3 \
                 release_policy=refund"
            ),
        ),
        (
            "k",
            "book",
            book_strict,
            format!(
                "{created} rate_per_min=60 burst=1 idle_timeout_ms=30000 max_retries=3 \
                 release_policy=strict"
            ),
        ),
        // Keys that are not buckets.
        ("list", "reserve", with(&[]), wrongtype.clone()),
        ("list", "info", vec![], wrongtype),
        ("text", "reserve", with(&[]), not_bucket("text")),
        ("short", "info", vec![], not_bucket("short")),
        ("missing", "info", vec![], no_bucket.clone()),
        ("missing", "release", vec![&plain], no_bucket.clone()),
        ("missing", "redeem", vec![&booking], no_bucket),
        // Tickets, in the order of the checks.
        ("k", "release", vec!["1.2.3"], malformed("1.2.3")),
        (
            "k",
            "release",
            vec![&leading_zero],
            malformed(&leading_zero),
        ),
        ("k", "release", vec![&uppercase], malformed(&uppercase)),
        ("k", "release", vec![ZERO_DEBIT], malformed(ZERO_DEBIT)),
        ("k", "release", vec![BIG_DEBIT], malformed(BIG_DEBIT)),
        ("k", "release", vec![BIG_SEQ], malformed(BIG_SEQ)),
        ("k", "release", vec![&edited_debit], not_issued.clone()),
        ("k", "redeem", vec![&edited_slot], not_issued.clone()),
        ("k", "release", vec![&foreign], not_issued.clone()),
        ("k", "release", vec![&unissued], not_issued),
        ("k", "release", vec![&released], SPENT.into()),
        ("k", "redeem", vec![&plain], err("not a booking")),
    ]);
    let watched = ["k", "other", "text", "short", "missing"];
    let list = |lua: &mut Lua| -> Vec<String> {
        redis::cmd("LRANGE")
            .arg("list")
            .arg(0)
            .arg(-1)
            .query(&mut lua.con)
            .expect("LRANGE")
    };
    for (key, op, args, expected) in &cases {
        let before: Vec<_> = watched.iter().map(|k| lua.value(k)).collect();
        let list_before = list(&mut lua);
        assert_eq!(&lua.error(key, op, args), expected, "{op} {key} {args:?}");
        let after: Vec<_> = watched.iter().map(|k| lua.value(k)).collect();
        assert_eq!(before, after, "{op} {key} {args:?} changed a key");
        assert_eq!(list_before, list(&mut lua), "{op} {key} {args:?}");
    }
    // The calls above that would have worked on a valid ticket still do:
    // the booking is admitted with the next serial (4), its seq (4), slot 0.
    let admission = ticket(&secret, "k", 4, 4, 60000, 0);
    assert_eq!(
        lua.redeem("k", &booking, "1000"),
        admitted(2000, s(&admission), "booked", 0)
    );
}

/// (e) Expiry: of the 65537 tickets issued, serial 0 is no longer among the
/// last 65536 (0 < 65537 − 65536). Serial 65536 reuses bit 0, cleared when
/// it was issued, so it releases though serial 0 was released before.
#[test]
fn tickets_expire_after_65536() {
    let mut lua = Lua::start();
    // rate 600, burst 1000000: 65537 admissions at 0 all wait 0.
    let config = ["600", "1000000", "30000", "3", "refund", "AT", "0"];
    let started = Instant::now();
    let mut pipe = redis::pipe();
    for _ in 0..65536 {
        pipe.cmd("EVALSHA")
            .arg(&lua.sha)
            .arg(1)
            .arg("k")
            .arg("reserve")
            .arg(&config[..])
            .ignore();
    }
    pipe.query::<()>(&mut lua.con).expect("65536 reserves");
    eprintln!("65536 pipelined reserves took {:?}", started.elapsed());
    let secret = lua.secret("k");
    let serial0 = ticket(&secret, "k", 0, 1, 60000, 0);
    assert_eq!(lua.release("k", &serial0, "0"), vec![Int(1)]);
    assert_eq!(lua.getbit("k", 4096), 1);
    // Serial 65536 (seq 65537): its bit, 65536 mod 65536 = 0, is cleared.
    let reply = lua.run("k", "reserve", &config);
    let last = ticket(&secret, "k", 65536, 65537, 60000, 0);
    assert_eq!(reply[2], s(&last));
    assert_eq!(lua.getbit("k", 4096), 0);
    let before = lua.value("k");
    assert_eq!(
        lua.error("k", "release", &[&serial0, "AT", "0"]),
        "ERR pacer: ticket expired"
    );
    assert_eq!(lua.value("k"), before);
    // Serial 1 is the oldest live one.
    let serial1 = ticket(&secret, "k", 1, 2, 60000, 0);
    assert_eq!(lua.release("k", &serial1, "0"), vec![Int(1)]);
    assert_eq!(lua.release("k", &last, "0"), vec![Int(1)]);
    assert_eq!(&lua.header("k")[98..114], "0000000000065537");
}

// ---------------------------------------------------------------------------
// Adaptive pacing (SPEC §14, core/src/adaptive.rs). The law's constants are
// tuned on the simulator, so the expectations below come from a model of
// the law written again here from the core's module doc (the core's
// constants are read, never its code): with Δ = now − t₀, ℓ = min(L,
// ceiling), searching, ℓ·2ⁿ·(D + r)/D (n = ⌊Δ/D⌋, r = Δ mod D, D 5 s or
// with `again` 20 s; the ceiling from n ≥ 10); probing, the lowest before
// the origin, ℓ until 60 s plus the wait (max(240 s, 80 openings at ℓ),
// a twelfth with `again`), then a step: ℓ + ⌊ℓ/2⌋ + 2 with `again`,
// otherwise ℓ + max(⌊ℓ/4⌋, min(⌊ℓ/2⌋, 80)) + 2; clamped to [lowest,
// ceiling]. Openings are counted per minute of the clock; a throttle sets
// L from the counts.

use pacer_core::adaptive::{
    COUNT_CAP, CUT_DEN, HOLD_MS, NARROW_STEP_DEN, NARROW_STEP_MIN, PROBE_EVERY_OPENINGS,
    PROBE_STEP_DEN, PROBE_WAIT_MS, QUICK_PROBE, RESEARCH_DOUBLING_MS, RISE_MARGIN,
    SEARCH_DOUBLINGS_CAP, SEARCH_DOUBLING_MS, SEARCH_NO_WAITS_MS, WINDOW_MS,
};

/// The script's `local NAME = <digits>` lines, each name once.
fn lua_constants(source: &str) -> std::collections::HashMap<String, i64> {
    let mut found = std::collections::HashMap::new();
    for line in source.lines() {
        let Some(rest) = line.strip_prefix("local ") else {
            continue;
        };
        let Some((name, value)) = rest.split_once(" = ") else {
            continue;
        };
        let digits = value.split_whitespace().next().unwrap_or("");
        if let Ok(value) = digits.parse::<i64>() {
            assert!(
                found.insert(name.to_string(), value).is_none(),
                "pacer.lua sets {name} twice"
            );
        }
    }
    found
}

/// Each constant of the law stands once in the script, as `local NAME =
/// value` with the core's value: every `pub const` of core/src/adaptive.rs
/// (read as text, so one the core adds is caught too), and the ones named
/// here by the compiler as well. And the bounds that keep the script's
/// arithmetic exact in doubles hold for these values.
#[test]
fn adaptive_constants_are_the_cores() {
    let lua = lua_constants(&script_source());
    let core = include_str!("../../core/src/adaptive.rs");
    let mut compared = Vec::new();
    for line in core.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const ") else {
            continue;
        };
        if rest.starts_with("fn ") {
            continue;
        }
        let (name, rest) = rest.split_once(':').expect("pub const NAME: type = value;");
        let value = rest
            .split_once('=')
            .map(|(_, v)| v.trim().trim_end_matches(';').replace('_', ""))
            .expect("a value");
        let value: i64 = match value.as_str() {
            "u16::MAX" => i64::from(u16::MAX),
            value => value
                .parse()
                .unwrap_or_else(|_| panic!("core constant {name} is not a plain number: {value}")),
        };
        assert_eq!(
            lua.get(name),
            Some(&value),
            "pacer.lua must say `local {name} = {value}` (core/src/adaptive.rs)"
        );
        compared.push(name.to_string());
    }
    for (name, value) in [
        ("WINDOW_MS", WINDOW_MS as i64),
        ("HOLD_MS", HOLD_MS as i64),
        ("SEARCH_DOUBLING_MS", SEARCH_DOUBLING_MS as i64),
        ("RESEARCH_DOUBLING_MS", RESEARCH_DOUBLING_MS as i64),
        ("SEARCH_DOUBLINGS_CAP", SEARCH_DOUBLINGS_CAP as i64),
        ("PROBE_WAIT_MS", PROBE_WAIT_MS as i64),
        ("PROBE_EVERY_OPENINGS", PROBE_EVERY_OPENINGS as i64),
        ("QUICK_PROBE", QUICK_PROBE as i64),
        ("PROBE_STEP_DEN", i64::from(PROBE_STEP_DEN)),
        ("NARROW_STEP_DEN", i64::from(NARROW_STEP_DEN)),
        ("NARROW_STEP_MIN", NARROW_STEP_MIN as i64),
        ("RISE_MARGIN", i64::from(RISE_MARGIN)),
        ("SEARCH_NO_WAITS_MS", SEARCH_NO_WAITS_MS as i64),
        ("CUT_DEN", i64::from(CUT_DEN)),
        ("COUNT_CAP", i64::from(COUNT_CAP)),
    ] {
        assert_eq!(lua.get(name), Some(&value), "pacer.lua's {name}");
        assert!(
            compared.iter().any(|n| n == name),
            "{name} read from the core"
        );
    }
    // Exact in doubles (docs/redis.md, "Exact in Lua"), with ℓ ≤ 600: the
    // probe's wait PROBE_EVERY_OPENINGS·60000 (= 4 800 000) before its
    // division by ℓ, the hold plus that wait, the search's ℓ·2⁹·(D + r) <
    // ℓ·2⁹·2D, a count times the window, and the stored origin, which a
    // pause from a clock just below 2^52 puts up to 2^52 + 60000 − 1.
    let two_53 = 1i64 << 53;
    assert!((PROBE_EVERY_OPENINGS * WINDOW_MS) < two_53 as u64);
    assert!((HOLD_MS + PROBE_EVERY_OPENINGS * WINDOW_MS) < two_53 as u64);
    assert!((1i64 << 52) + (WINDOW_MS as i64) < two_53);
    let period = RESEARCH_DOUBLING_MS.max(SEARCH_DOUBLING_MS) as i64;
    assert!(600 * (1 << (SEARCH_DOUBLINGS_CAP - 1)) * 2 * period < two_53);
    assert!(i64::from(COUNT_CAP) * WINDOW_MS as i64 * 2 < two_53);
    // Past SEARCH_DOUBLINGS_CAP doublings any rate is at any ceiling.
    const { assert!(1 << SEARCH_DOUBLINGS_CAP > 600) };
}

/// An adaptive bucket's range and what SPEC §3 says of its budget: the
/// lowest rate the law sets.
#[derive(Clone, Copy, Debug)]
struct Law {
    ceiling: u64,
    lowest: u64,
}

/// The control word, as the key holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Word {
    origin: u64,
    window: u64,
    opened: u64,
    before: u64,
    limit: u64,
    probing: bool,
    again: bool,
}

impl Law {
    /// `lowest`: the floor, raised to the lowest rate that can refuse (a
    /// refused request's retries, `retries · max(1, ⌊bound/1000⌋)` s,
    /// outlast one token's wait, 60000/rate ms), never above the ceiling;
    /// the floor with no retries.
    fn new(floor: u64, ceiling: u64, retries: u64, bound_ms: u64) -> Law {
        let schedule_ms = retries * (bound_ms / 1000).max(1) * 1000;
        let lowest = if schedule_ms == 0 {
            floor
        } else {
            floor.max(60_000u64.div_ceil(schedule_ms).min(ceiling))
        };
        Law { ceiling, lowest }
    }

    /// A bucket created at `t` with configured rate `rate`.
    fn created(rate: u64, t: u64) -> Word {
        Word {
            origin: t,
            window: 0,
            opened: 0,
            before: 0,
            limit: rate,
            probing: false,
            again: false,
        }
    }

    /// The rate in force at `now` (in u128: no product can overflow).
    /// Searching: ℓ·2ⁿ·(D + r)/D, the ceiling from n ≥ 10. Probing: the
    /// lowest before the origin (the pause); ℓ until Δ = 60000 + w, then
    /// ℓ + ⌊ℓ/2⌋ + 2, with w = max(240000, ⌊80·60000/max(ℓ, 1)⌋), ⌊w/12⌋
    /// with `again`.
    fn rate(&self, w: &Word, now: u64) -> u64 {
        if w.probing && now < w.origin {
            return self.lowest;
        }
        let delta = u128::from(now.saturating_sub(w.origin));
        let l = u128::from(w.limit.min(self.ceiling));
        let curve = if !w.probing {
            let d = u128::from(if w.again { 20_000u64 } else { 5_000 });
            let n = delta / d;
            if n >= 10 {
                u128::from(self.ceiling)
            } else {
                l * (1 << n) * (d + delta % d) / d
            }
        } else {
            if delta < self.step_at(w) {
                l
            } else if w.again {
                l + l / 2 + 2
            } else {
                // After a probe's throttle: a quarter of ℓ, at least 80
                // (or half of ℓ where that is less).
                l + (l / 4).max((l / 2).min(80)) + 2
            }
        };
        curve.clamp(u128::from(self.lowest), u128::from(self.ceiling)) as u64
    }

    /// How long after the origin a probe's step begins: 60000 + w (as in
    /// `rate`).
    fn step_at(&self, w: &Word) -> u128 {
        let l = u128::from(w.limit.min(self.ceiling));
        let spaced = 4_800_000 / l.max(1);
        60_000 + spaced.max(240_000) / if w.again { 12 } else { 1 }
    }

    /// The upstream's answer at `now`: the word to store (`None`: nothing
    /// is written) and the rate in force after it, read at `now` (not at
    /// `at`).
    fn observe(&self, w: &Word, opened: bool, now: u64) -> (Option<Word>, u64) {
        let at = now.max(w.origin);
        let rate = self.rate(w, now);
        let held = w.probing && at - w.origin < 60_000;
        if held && !opened {
            return (None, rate);
        }
        // The counts moved to at's minute of the clock.
        let mut c = *w;
        let minute = (at / 60_000 - w.origin / 60_000).min(65_535);
        if minute > w.window {
            c.before = if minute == w.window + 1 { w.opened } else { 0 };
            c.opened = 0;
            c.window = minute;
        }
        let through = c.opened.max(c.before);
        if opened {
            c.opened = (c.opened + 1).min(65_535);
            let through = c.opened.max(c.before);
            if !w.probing || held || through <= w.limit + w.limit / 8 + 1 {
                return (Some(c), rate);
            }
            c.probing = false;
            c.again = true;
            c.limit = rate;
        } else {
            let recent = c.opened + c.before * (60_000 - at % 60_000) / 60_000;
            // E: the larger whole-minute count while probing, with the
            // estimate of the last 60 s when this ends a search.
            let seen = if w.probing {
                through
            } else {
                through.max(recent)
            };
            c.limit = if seen == 0 {
                let base = rate.min(w.limit);
                base - (base / 16).max(1).min(base)
            } else if !w.probing {
                seen.min(self.ceiling)
            } else if seen < rate && u128::from(at - w.origin) >= self.step_at(w) {
                // At the probe's step: L held through the hold and the wait.
                seen.max(w.limit)
            } else if seen < rate {
                seen
            } else {
                rate - (rate / 16).max(1)
            };
            c.again = !w.probing;
            c.probing = true;
        }
        // The pause: a throttle ending the first search moves the origin to
        // a minute after that search began (when later than at).
        let origin = if !opened && !w.probing && !w.again {
            at.max(w.origin + 60_000)
        } else {
            at
        };
        // The counts as if the origin were at (minute 0), then moved to the
        // new origin's minute.
        match origin / 60_000 - at / 60_000 {
            0 => {}
            1 => {
                c.before = c.opened;
                c.opened = 0;
            }
            _ => {
                c.before = 0;
                c.opened = 0;
            }
        }
        c.origin = origin;
        c.window = 0;
        (Some(c), self.rate(&c, now))
    }
}

/// The adaptive fields after byte 199 (docs/redis.md, "The key").
fn adaptive_tail(floor: u64, ceiling: u64, w: &Word) -> String {
    format!(
        "{floor:03} {ceiling:03} {:016} {:05} {:05} {:05} {:05} {} {}    ",
        w.origin,
        w.window,
        w.opened,
        w.before,
        w.limit,
        u8::from(w.probing),
        u8::from(w.again)
    )
}

/// Clocks at 2^52 − 1: a bucket created there and throttled at once with
/// nothing counted (L = B − max(1, ⌊B/16⌋), B = min(R, L)) pauses to an
/// origin a minute later, 2^52 + 59999, past the clock's own bound;
/// buckets created at 0 read at 2^52 − 1: a search long past its tenth
/// doubling (the ceiling), and probes long past their wait (the step).
#[test]
fn adaptive_at_the_clock_edge() {
    let mut lua = Lua::start();
    let max = MAX_ARG.to_string();
    // Idle 120000, r 5: bound ⌊(120000 − 62000)/12⌋ = 4833, cap_s 4, so a
    // rate refuses from ⌈60000/20000⌉ = 3: lowest = max(10, 3) = 10.
    let law = Law::new(10, 60, 5, 4833);
    assert_eq!(law.lowest, 10);
    let config = ["60", "10", "120000", "5", "refund", "ADAPT", "10", "0"];
    assert_eq!(
        lua.run("edge", "create", &with_at(&config, &max)),
        vec![Int(1)]
    );
    let created = Law::created(60, MAX_ARG);
    assert_eq!(&lua.header("edge")[200..], adaptive_tail(10, 60, &created));
    assert_eq!(
        &lua.header("edge")[200..],
        "010 060 4503599627370495 00000 00000 00000 00060 0 0    "
    );
    // The throttle ends the first search at Δ = 0: R = 60·(5000 + 0)/5000
    // = 60, nothing counted, B = min(60, 60) = 60, L = 60 − max(1, 3) =
    // 57. The pause: origin max(2^52 − 1, 2^52 − 1 + 60000) = 2^52 +
    // 59999 = 4503599627430495 (nothing counted to move). The answer is
    // read at the caller's clock, before the origin: the lowest, 10.
    assert_eq!(lua.observe("edge", "throttled", &max), vec![Int(10)]);
    assert_eq!(
        &lua.header("edge")[200..],
        "010 060 4503599627430495 00000 00000 00000 00057 1 1    "
    );
    assert_eq!(lua.info("edge", MAX_ARG, "rate_in_force"), Int(10));
    assert_eq!(
        lua.info("edge", MAX_ARG, "origin_ms"),
        Int(4_503_599_627_430_495)
    );
    // A throttle there is held (at = the origin, Δ = 0 < 60000): the law
    // unmoved, only `upstream_throttled` (bytes 324–339) counted, 1 → 2;
    // the answer the lowest, 10.
    let mut before = lua.value("edge").expect("the bucket");
    assert_eq!(lua.observe("edge", "throttled", &max), vec![Int(10)]);
    before[324..340].copy_from_slice(b"0000000000000002");
    assert_eq!(lua.value("edge"), Some(before));

    // Created at 0, ceiling 600: at 2^52 − 1 the search is at the ceiling.
    let wide = ["60", "10", "120000", "5", "refund", "ADAPT", "10", "600"];
    lua.run("cap", "create", &with_at(&wide, "0"));
    assert_eq!(lua.info("cap", MAX_ARG, "rate_in_force"), Int(600));
    // One token refills in ⌈60000/600⌉ = 100 ms at the rate in force: ten
    // admissions empty the burst of 10, the eleventh waits 100.
    for _ in 0..10 {
        lua.run("cap", "reserve", &with_at(&wide, &max));
    }
    let reply = lua.run("cap", "reserve", &with_at(&wide, &max));
    assert_eq!((&reply[0], &reply[1]), (&s("admitted"), &Int(100)));
    // A throttle there, nothing counted: R = 600 but L = 60, so B =
    // min(600, 60) = 60 and L = 60 − 3 = 57. No pause: the search began
    // long before, max(2^52 − 1, 0 + 60000) = 2^52 − 1. The probe reads
    // ℓ = 57 at Δ = 0.
    assert_eq!(lua.observe("cap", "throttled", &max), vec![Int(57)]);
    // Another throttle at the same instant is within the hold: the law
    // unmoved, only `upstream_throttled` (bytes 324–339) counted, 1 → 2.
    let mut before = lua.value("cap").expect("the bucket");
    assert_eq!(lua.observe("cap", "throttled", &max), vec![Int(57)]);
    before[324..340].copy_from_slice(b"0000000000000002");
    assert_eq!(lua.value("cap"), Some(before));

    // Rate 600 (lowest max(1, 3) = 3) created and throttled at 0: R =
    // 600, B = 600, L = 600 − 37 = 563, `again`; the pause puts the origin
    // at 60000 and the answer at 0 is the lowest, 3. The wait: max(240000,
    // ⌊4800000/563⌋ = 8525) = 240000, /12 = 20000; the step from Δ =
    // 60000 + 20000 (t = 140000): 563 + 281 + 2 = 846, the ceiling 600.
    let top = ["600", "10", "120000", "5", "refund", "ADAPT", "1", "600"];
    lua.run("top", "create", &with_at(&top, "0"));
    assert_eq!(lua.observe("top", "throttled", "0"), vec![Int(3)]);
    assert_eq!(lua.info("top", 59_999, "rate_in_force"), Int(3));
    assert_eq!(lua.info("top", 60_000, "rate_in_force"), Int(563));
    assert_eq!(lua.info("top", 139_999, "rate_in_force"), Int(563));
    assert_eq!(lua.info("top", 140_000, "rate_in_force"), Int(600));
    assert_eq!(lua.info("top", MAX_ARG, "rate_in_force"), Int(600));
    // The same at rate 60, ceiling 600: L = 60 − 3 = 57, the wait
    // max(240000, ⌊4800000/57⌋ = 84210) / 12 = 20000, the step 57 + 28 +
    // 2 = 87 from t = 140000.
    let mid = ["60", "10", "120000", "5", "refund", "ADAPT", "1", "600"];
    lua.run("mid", "create", &with_at(&mid, "0"));
    assert_eq!(lua.observe("mid", "throttled", "0"), vec![Int(3)]);
    assert_eq!(lua.info("mid", 139_999, "rate_in_force"), Int(57));
    assert_eq!(lua.info("mid", 140_000, "rate_in_force"), Int(87));
    assert_eq!(lua.info("mid", MAX_ARG, "rate_in_force"), Int(87));
}

/// floor = ceiling = rate: the rate never moves, whatever is observed.
#[test]
fn adaptive_floor_equals_ceiling() {
    let mut lua = Lua::start();
    let config = ["60", "1", "30000", "3", "refund", "ADAPT", "60", "60"];
    lua.run("k", "create", &with_at(&config, "0"));
    assert_eq!(lua.info("k", 86_400_000, "rate_in_force"), Int(60));
    assert_eq!(lua.observe("k", "opened", "1000"), vec![Int(60)]);
    // One opening counted, then a throttle ending the search: E = max(1,
    // 1 + 0) = 1, L = min(1, 60) = 1, probing. The pause: origin max(5000,
    // 0 + 60000) = 60000, a minute later, so the count (1) becomes the one
    // before. The rate is clamped to the floor 60 (the lowest).
    assert_eq!(lua.observe("k", "throttled", "5000"), vec![Int(60)]);
    assert_eq!(
        &lua.header("k")[200..],
        "060 060 0000000000060000 00000 00000 00001 00001 1 1    "
    );
    // The §7 waits at 60/min, as for a fixed-rate bucket: 0, 1000, 2000.
    for wait in [0, 1000, 2000] {
        let reply = lua.run("k", "reserve", &with_at(&config, "5000"));
        assert_eq!(reply[1], Int(wait));
    }
}

/// The lowest rate: rate 3, floor 1, idle 120000, r 5 (bound 4833, cap_s
/// 4: a rate refuses from 3) never goes below 3, so the bucket keeps
/// refusing; with r 0 nothing refuses and the floor, 1, is the lowest.
#[test]
fn adaptive_lowest_rate_is_the_lowest_that_refuses() {
    let mut lua = Lua::start();
    let config = ["3", "1", "120000", "5", "refund", "ADAPT", "1", "0"];
    lua.run("k", "create", &with_at(&config, "0"));
    // Three openings, a throttle at 30 ending the search: E = 3, L =
    // min(3, 3) = 3, probing; the pause puts the origin at 60000 (the 3
    // become the count before) and the rate before it is the lowest, 3.
    for t in ["0", "10", "20"] {
        assert_eq!(lua.observe("k", "opened", t), vec![Int(3)]);
    }
    assert_eq!(lua.observe("k", "throttled", "30"), vec![Int(3)]);
    assert_eq!(lua.info("k", 30, "mode"), s("refusing"));
    // Three openings at 120000 s (past the hold; the next minute: before
    // = 0, opened 1, 2, 3; 3 ≤ 3 + 0 + 1, no rise), a throttle at 130000:
    // through = 3 ≥ the rate 3 (ℓ = 3, within the wait ⌊4800000/3⌋/12 =
    // 133333): the count does not explain it, L = 3 − max(1, ⌊3/16⌋) = 2,
    // which the law lifts back to the lowest, 3. No pause (probing).
    for t in ["120000", "120010", "120020"] {
        assert_eq!(lua.observe("k", "opened", t), vec![Int(3)]);
    }
    assert_eq!(lua.observe("k", "throttled", "130000"), vec![Int(3)]);
    assert_eq!(
        &lua.header("k")[200..],
        "001 003 0000000000130000 00000 00003 00000 00002 1 0    "
    );
    assert_eq!(lua.info("k", 130000, "mode"), s("refusing"));
    assert_eq!(lua.info("k", 130000, "max_debt_units"), Int(4833 * 3));

    // No retries: the same sequence goes down to 2, shaping; the pause
    // reads the floor, 1.
    let none = ["3", "1", "120000", "0", "refund", "ADAPT", "1", "0"];
    lua.run("n", "create", &with_at(&none, "0"));
    for t in ["0", "10", "20"] {
        lua.observe("n", "opened", t);
    }
    assert_eq!(lua.observe("n", "throttled", "30"), vec![Int(1)]);
    for t in ["120000", "120010", "120020"] {
        lua.observe("n", "opened", t);
    }
    // ℓ = 2 at Δ = 0.
    assert_eq!(lua.observe("n", "throttled", "130000"), vec![Int(2)]);
    assert_eq!(lua.info("n", 130000, "mode"), s("shaping-no-retry"));
}

/// Random observations (openings, throttles, readings) on the script
/// against the model above, which is not the core: every reply, every
/// header, the rate INFO reads. Clocks move within a minute, across
/// minutes, by hours, back, and to 0 and 2^52 − 1.
#[test]
fn adaptive_law_matches_the_model() {
    let mut lua = Lua::start();
    // (rate, floor, ceiling as sent, idle, r) and the bound SPEC §3 gives.
    let buckets: [(u64, u64, u64, u64, u64, u64); 5] = [
        (60, 1, 600, 30_000, 3, 2000),   // lowest ⌈60000/6000⌉ = 10
        (20, 5, 120, 120_000, 5, 4833),  // lowest max(5, 3) = 5
        (3, 1, 0, 30_000, 0, 15_000),    // no retries: lowest 1
        (600, 1, 600, 120_000, 5, 4833), // lowest 3
        (10, 2, 40, 60_000, 2, 9000),    // ⌈60000/18000⌉ = 4
    ];
    let mut rng = pacer_cli::rng::SplitMix64::new(0x1a_5eed);
    let (mut rises, mut holds, mut cuts, mut unseen, mut rolls) = (0, 0, 0, 0, 0);
    for round in 0..400u64 {
        let (rate, floor, ceiling, idle, retries, bound) = buckets[(round % 5) as usize];
        let top = if ceiling == 0 { rate } else { ceiling };
        let law = Law::new(floor, top, retries, bound);
        let args: Vec<String> = [rate, 1, idle, retries]
            .iter()
            .map(u64::to_string)
            .chain(["refund".into(), "ADAPT".into(), floor.to_string()])
            .chain([ceiling.to_string()])
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let key = format!("m{round}");
        let mut t = match rng.below(3) {
            0 => rng.below(1000),
            1 => 1_700_000_000_000 + rng.below(1 << 30),
            _ => MAX_ARG - rng.below(600_000_000),
        };
        lua.run(&key, "create", &with_at(&args, &t.to_string()));
        let mut w = Law::created(rate, t);
        let opens = rng.below(2) == 0;
        // Every observation of an adaptive bucket is counted, a held
        // throttle too.
        let (mut opened_count, mut throttled_count) = (0, 0);
        for step in 0..80 {
            t = match rng.below(20) {
                0 => t.saturating_sub(rng.below(90_000)),
                1 => t + rng.below(600_000),
                2 if rng.below(4) == 0 => t + rng.below(30_000_000),
                3 if rng.below(20) == 0 => 0,
                4 if rng.below(20) == 0 => MAX_ARG,
                _ => t + rng.below(if opens { 1_000 } else { 6_000 }),
            }
            .min(MAX_ARG);
            let at = t.to_string();
            let context = format!("round {round} step {step} at {t}: {w:?}");
            if rng.below(10) == 0 {
                let got = lua.info(&key, t, "rate_in_force");
                assert_eq!(got, Int(law.rate(&w, t) as i64), "{context}");
                continue;
            }
            let opened = rng.below(if opens { 10 } else { 3 }) != 0;
            let outcome = if opened { "opened" } else { "throttled" };
            let (next, expected) = law.observe(&w, opened, t);
            let reply = lua.observe(&key, outcome, &at);
            assert_eq!(reply, vec![Int(expected as i64)], "{outcome} {context}");
            if opened {
                opened_count += 1;
            } else {
                throttled_count += 1;
            }
            if let Some(next) = next {
                rises += u64::from(opened && w.probing && !next.probing);
                rolls += u64::from(next.window > w.window && next.origin == w.origin);
                if !opened && w.probing {
                    let rate = law.rate(&w, t);
                    cuts += u64::from(next.limit == rate - (rate / 16).max(1));
                }
                unseen += u64::from(!opened && next.opened == 0 && next.before == 0);
                w = next;
            } else {
                holds += 1;
            }
            assert_eq!(
                &lua.header(&key)[200..],
                adaptive_tail(floor, top, &w),
                "{outcome} {context}"
            );
        }
        assert_eq!(lua.info(&key, t, "upstream_opened"), Int(opened_count));
        assert_eq!(
            lua.info(&key, t, "upstream_throttled"),
            Int(throttled_count)
        );
    }
    println!(
        "adaptive model: {rises} rises, {holds} held throttles, {cuts} cuts, {unseen} \
         throttles with nothing counted, {rolls} counts moved to a later minute"
    );
    assert!(rises > 0 && holds > 0 && cuts > 0 && unseen > 0 && rolls > 0);
}

/// The bindings ship this script. Node's and Python's packages copy it in
/// when they are built (bindings/node/scripts/build.js,
/// bindings/python/setup.py); Go's go:embed needs a copy beside its sources,
/// bindings/go/pacer.lua, made by `go generate` and redis/pacer.lua byte for
/// byte. Each binding's own tests check its copy too; this catches a stale
/// copy where the script is changed.
#[test]
fn the_bindings_carry_this_script_byte_for_byte() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let script = std::fs::read(format!("{root}/redis/pacer.lua")).expect("redis/pacer.lua");
    let copy =
        std::fs::read(format!("{root}/bindings/go/pacer.lua")).expect("bindings/go/pacer.lua");
    assert!(
        copy == script,
        "bindings/go/pacer.lua differs from redis/pacer.lua: run go generate in bindings/go"
    );
}

// The second block of the key (docs/redis.md "The key", key format 2):
// the counts the core's `Counters` keeps beside the first block's.

/// INFO's names of the second block, in its order.
const MORE_NAMES: [&str; 14] = [
    "admitted_after_wait",
    "shaped",
    "redeemed",
    "upstream_opened",
    "upstream_throttled",
    "wait_ms_total",
    "wait_bucket_10",
    "wait_bucket_50",
    "wait_bucket_100",
    "wait_bucket_500",
    "wait_bucket_1000",
    "wait_bucket_2500",
    "wait_bucket_5000",
    "wait_bucket_10000",
];

/// The script's wait bounds are `local WAIT_BOUNDS_MS = { … }`, the core's
/// `WAIT_BOUNDS_MS`, and INFO's bucket names carry the same bounds.
#[test]
fn wait_bounds_are_the_cores() {
    let source = script_source();
    let line = source
        .lines()
        .find_map(|l| l.strip_prefix("local WAIT_BOUNDS_MS = {"))
        .expect("pacer.lua says `local WAIT_BOUNDS_MS = { … }`");
    let (inside, _) = line.split_once('}').expect("the table on one line");
    let bounds: Vec<u64> = inside
        .split(',')
        .map(|n| n.trim().parse().expect("a bound"))
        .collect();
    assert_eq!(bounds, pacer_core::WAIT_BOUNDS_MS);
    let named: Vec<u64> = MORE_NAMES[6..]
        .iter()
        .map(|n| n.strip_prefix("wait_bucket_").unwrap().parse().unwrap())
        .collect();
    assert_eq!(named, pacer_core::WAIT_BOUNDS_MS);
}

impl Lua {
    /// INFO's second-block counts, in [`MORE_NAMES`]' order.
    fn more(&mut self, key: &str, at: u64) -> Vec<i64> {
        MORE_NAMES
            .iter()
            .map(|name| match self.info(key, at, name) {
                Int(n) => n,
                other => panic!("{name} is {other:?}"),
            })
            .collect()
    }

    fn set(&mut self, key: &str, value: &[u8]) {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query::<()>(&mut self.con)
            .expect("SET");
    }
}

/// A redemption's wait lands in the bucket of the first bound at or above
/// it: at a bound in that bucket, one past it in the next, past 10000 ms in
/// none; a wait of 0 in none. Rate 4 (4 units a ms), burst 1, idle 120000,
/// 2 retries: bound min(15000, ⌊(120000 − 6000)/6⌋) = 15000, cap_s 15,
/// refusing (2·15·1000·4 ≥ 60000), horizon 15000 + 2·15·1000 = 45000. At
/// 0: the first reserve admits at once, the second waits 60000/4 = 15000
/// (above 10000: in no bucket), the book needs 120000/4 = 30000 > 15000:
/// booked, slot 30000. Then, from that same key each time, a redemption at
/// 30000 − w waits w.
#[test]
fn redemption_waits_fill_the_histogram_at_its_bounds() {
    let mut lua = Lua::start();
    let config = ["4", "1", "120000", "2", "refund"];
    lua.run("k", "reserve", &with_at(&config, "0"));
    let second = lua.run("k", "reserve", &with_at(&config, "0"));
    assert_eq!(second[1], Int(15000));
    let mut book = config.to_vec();
    book.extend(["2", "AT", "0"]);
    let booked = lua.run("k", "book", &book);
    assert_eq!(booked[3], Int(30000));
    let booking = text(&booked, 2);
    let before = lua.value("k").unwrap();
    // Hand-derived: one wait (15000), in no bucket.
    let mut base = vec![0i64; 14];
    base[0] = 1;
    base[5] = 15000;
    assert_eq!(lua.more("k", 0), base);
    // (wait, its bucket's index among the bounds, None for no bucket).
    let cases: [(i64, Option<usize>); 17] = [
        (0, None),
        (1, Some(0)),
        (10, Some(0)),
        (11, Some(1)),
        (50, Some(1)),
        (51, Some(2)),
        (100, Some(2)),
        (101, Some(3)),
        (500, Some(3)),
        (501, Some(4)),
        (1000, Some(4)),
        (1001, Some(5)),
        (2500, Some(5)),
        (2501, Some(6)),
        (5000, Some(6)),
        (5001, Some(7)),
        (10000, Some(7)),
    ];
    for (wait, bucket) in cases.into_iter().chain([(10001, None), (15000, None)]) {
        lua.set("k", &before);
        let at = (30000 - wait).to_string();
        let reply = lua.redeem("k", &booking, &at);
        assert_eq!(reply[1], Int(wait));
        let mut expected = base.clone();
        expected[2] += 1; // redeemed
        if wait > 0 {
            expected[0] += 1;
            expected[5] += wait;
        }
        if let Some(i) = bucket {
            expected[6 + i] += 1;
        }
        assert_eq!(lua.more("k", 30000), expected, "wait {wait}");
    }
    // Every count at 2^52 − 1 stays there through a waited redemption.
    let mut full = before.clone();
    let largest = format!("{MAX_ARG:016}");
    for i in 0..14 {
        full[256 + 17 * i..256 + 17 * i + 16].copy_from_slice(largest.as_bytes());
    }
    lua.set("k", &full);
    lua.redeem("k", &booking, "29990");
    assert_eq!(lua.more("k", 30000), vec![MAX_ARG as i64; 14]);
}

/// Shaping and overflow are counted as shaped. Rate 1, burst 1, idle
/// 30000, 0 retries (docs: shaping-no-retry): bound ⌊30000/2⌋ = 15000,
/// max_debt 15000·1 = 15000 units. At 0: the first admits at once (tokens
/// 0); the second needs 60000 ms > bound: shaped, debited 15000 (to the
/// floor −15000), wait the bound 15000 (no bucket); the third finds
/// nothing above the floor: overflow, wait 0.
#[test]
fn shaped_and_overflow_admissions_count_as_shaped() {
    let mut lua = Lua::start();
    let config = ["1", "1", "30000", "0", "refund"];
    let paths: Vec<Item> = (0..3)
        .map(|_| lua.run("k", "reserve", &with_at(&config, "0"))[3].clone())
        .collect();
    assert_eq!(paths, [s("paced"), s("shaped"), s("overflow")]);
    let mut expected = vec![0i64; 14];
    expected[0] = 1; // the shaped one waited
    expected[1] = 2; // shaped and overflow
    expected[5] = 15000;
    assert_eq!(lua.more("k", 0), expected);
}
