//! Who may call what, on a real redis-server: the module's key specs (which
//! ACL key permissions a command needs), its ACL categories where the
//! server's module API can set them, and a server at `maxmemory`
//! (docs/redis.md, "Access: ACL, key specs, memory").

mod common;

use common::{call, Server};
use redis::Value;

const CONFIG: [&str; 7] = ["60", "2", "30000", "3", "refund", "AT", "0"];

/// The module's commands, as COMMAND INFO names them.
const COMMANDS: [&str; 7] = [
    "pacer.create",
    "pacer.reserve",
    "pacer.book",
    "pacer.release",
    "pacer.redeem",
    "pacer.info",
    "pacer.observe",
];

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) | Value::Set(items) => items
            .iter()
            .map(|item| match item {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => panic!("not a string: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// `COMMAND INFO name`: its ACL categories and its one key spec's flags.
fn command_info(con: &mut redis::Connection, name: &str) -> (Vec<String>, Vec<String>) {
    let Ok(Value::Array(commands)) = call(con, &["COMMAND", "INFO", name]) else {
        panic!("COMMAND INFO {name}")
    };
    let Value::Array(entry) = &commands[0] else {
        panic!("{name} is not a command: {commands:?}")
    };
    let Value::Array(specs) = &entry[8] else {
        panic!("{name}: key specs {:?}", entry[8])
    };
    assert_eq!(specs.len(), 1, "{name}: one key");
    let Value::Array(spec) = &specs[0] else {
        panic!("{name}: key spec {:?}", specs[0])
    };
    let flags = spec
        .chunks(2)
        .find(|pair| pair[0] == Value::BulkString(b"flags".to_vec()))
        .map(|pair| strings(&pair[1]))
        .expect("flags");
    (strings(&entry[6]), flags)
}

/// The server's version, (major, minor).
fn version(con: &mut redis::Connection) -> (u32, u32) {
    let Ok(Value::BulkString(info)) = call(con, &["INFO", "server"]) else {
        panic!("INFO server")
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    let line = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .expect("redis_version");
    let mut parts = line.trim().split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// A connection authenticated as `user` (created with `nopass`).
fn as_user(server: &Server, user: &str) -> redis::Connection {
    let mut con = server.connect();
    assert_eq!(
        call(&mut con, &["AUTH", user, "any"]),
        Ok(Value::Okay),
        "AUTH {user}"
    );
    con
}

/// PACER.INFO reads its key (key spec RO, access); every other command
/// reads and updates it (RW, access, update). So a user whose key
/// permission is read-only (`%R~*`) may call PACER.INFO and no other.
#[test]
fn info_reads_its_key_and_every_other_command_writes_it() {
    let server = Server::with_module();
    let mut con = server.connect();
    for name in COMMANDS {
        let (_, flags) = command_info(&mut con, name);
        let expected: &[&str] = if name == "pacer.info" {
            &["RO", "access"]
        } else {
            &["RW", "access", "update"]
        };
        assert_eq!(flags, expected, "{name}");
    }
    let mut create = vec!["PACER.CREATE", "k"];
    create.extend(CONFIG);
    call(&mut con, &create).unwrap();
    call(
        &mut con,
        &[
            "ACL",
            "SETUSER",
            "reads-keys",
            "on",
            "nopass",
            "+@all",
            "%R~*",
        ],
    )
    .unwrap();
    let mut reader = as_user(&server, "reads-keys");
    assert!(
        matches!(
            call(&mut reader, &["PACER.INFO", "k", "AT", "0"]),
            Ok(Value::Array(_))
        ),
        "PACER.INFO with read-only key permission"
    );
    let mut reserve = vec!["PACER.RESERVE", "k"];
    reserve.extend(CONFIG);
    assert_eq!(
        call(&mut reader, &reserve),
        Err(
            "NOPERM this user has no permissions to access one of the keys used as arguments"
                .into()
        )
    );
}

/// ACL categories: PACER.INFO in @read, the others in @write (and all in
/// @fast), where the server's module API sets a command's categories
/// (RedisModule_SetCommandACLCategories, Redis 7.2 and later). On 7.0 a
/// module command belongs to no category: `+@read` grants none of them,
/// and a user is granted them by name (`+pacer.info`).
#[test]
fn acl_categories_grant_what_the_server_allows() {
    let server = Server::with_module();
    let mut con = server.connect();
    let mut create = vec!["PACER.CREATE", "k"];
    create.extend(CONFIG);
    call(&mut con, &create).unwrap();
    let categories_set = version(&mut con) >= (7, 2);
    for name in COMMANDS {
        let (categories, _) = command_info(&mut con, name);
        let expected: &[&str] = match (categories_set, name) {
            (false, _) => &[],
            (true, "pacer.info") => &["@read", "@fast"],
            (true, _) => &["@write", "@fast"],
        };
        assert_eq!(categories, expected, "{name}");
    }
    for (user, grants) in [
        ("reads", &["+@read", "~*"][..]),
        ("writes", &["+@read", "+@write", "~*"]),
        ("named", &["+@read", "+pacer.info", "~*"]),
    ] {
        let mut args = vec!["ACL", "SETUSER", user, "on", "nopass"];
        args.extend(grants);
        call(&mut con, &args).unwrap();
    }
    let info = ["PACER.INFO", "k", "AT", "0"];
    let mut reserve = vec!["PACER.RESERVE", "k"];
    reserve.extend(CONFIG);
    let denied = |name: &str| {
        Err(format!(
            "NOPERM this user has no permissions to run the '{name}' command"
        ))
    };
    let ran = |reply: Result<Value, String>| matches!(reply, Ok(Value::Array(_)));
    let mut reads = as_user(&server, "reads");
    let mut writes = as_user(&server, "writes");
    let mut named = as_user(&server, "named");
    if categories_set {
        assert!(ran(call(&mut reads, &info)), "+@read: PACER.INFO");
        assert_eq!(call(&mut reads, &reserve), denied("pacer.reserve"));
        assert!(ran(call(&mut writes, &reserve)), "+@write: PACER.RESERVE");
    } else {
        assert_eq!(call(&mut reads, &info), denied("pacer.info"));
        assert_eq!(call(&mut writes, &reserve), denied("pacer.reserve"));
    }
    assert!(ran(call(&mut named, &info)), "+pacer.info");
    assert_eq!(call(&mut named, &reserve), denied("pacer.reserve"));
}

/// At `maxmemory` (policy noeviction) every call that may write is refused
/// with Redis's OOM error, the same text from the module (flag deny-oom),
/// the function (a function that may write is refused before it runs) and
/// the script (refused at its first write: a call of it that writes
/// nothing is answered); info is answered by every engine; nothing changes.
#[test]
fn at_maxmemory_every_engine_refuses_writes_with_redis_own_error() {
    let (_server, mut con, sha, function) = common::every_engine();
    let mut create = vec!["PACER.CREATE", "k"];
    create.extend(CONFIG);
    call(&mut con, &create).unwrap();
    let reserve = |con: &mut redis::Connection| {
        let mut args = vec!["PACER.RESERVE", "k"];
        args.extend(CONFIG);
        call(con, &args)
    };
    let ticket = match reserve(&mut con) {
        Ok(Value::Array(items)) => items[2].clone(),
        other => panic!("{other:?}"),
    };
    let Value::BulkString(ticket) = ticket else {
        panic!("no ticket")
    };
    let ticket = String::from_utf8(ticket).unwrap();
    // Burst 2, bound 2000: three more admissions at 0 (waits 0, 1000,
    // 2000), then a booking (wait 3000, slot 3000), due at 1000.
    for _ in 0..3 {
        reserve(&mut con).unwrap();
    }
    let mut book: Vec<&str> = CONFIG[..5].to_vec();
    book.extend(["3", "AT", "0"]);
    let mut args = vec!["PACER.BOOK", "k"];
    args.extend(&book);
    let booking = match call(&mut con, &args) {
        Ok(Value::Array(items)) => items[2].clone(),
        other => panic!("{other:?}"),
    };
    let Value::BulkString(booking) = booking else {
        panic!("no booking")
    };
    let booking = String::from_utf8(booking).unwrap();
    let key = call(&mut con, &["GET", "k"]).unwrap();
    let info = call(&mut con, &["PACER.INFO", "k", "AT", "0"]).unwrap();
    call(
        &mut con,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    )
    .unwrap();
    call(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();

    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    // (op, arguments, the script's answer): CREATE of the bucket there
    // writes nothing (0), nor does a throttle on a fixed-rate bucket (60).
    let writes: [(&str, Vec<&str>, Result<Value, String>); 6] = [
        ("create", CONFIG.to_vec(), Ok(Value::Int(0))),
        ("reserve", CONFIG.to_vec(), Err(oom.into())),
        ("book", book, Err(oom.into())),
        ("release", vec![&ticket, "AT", "0"], Err(oom.into())),
        ("redeem", vec![&booking, "AT", "1000"], Err(oom.into())),
        ("observe", vec!["throttled", "AT", "0"], Ok(Value::Int(60))),
    ];
    for (op, args, by_script) in &writes {
        let name = format!("PACER.{}", op.to_uppercase());
        let mut module = vec![name.as_str(), "k"];
        module.extend(args);
        assert_eq!(call(&mut con, &module), Err(oom.into()), "module {op}");
        assert_eq!(
            common::fcall(&mut con, &function, "k", op, args),
            Err(oom.into()),
            "FCALL {op}"
        );
        assert_eq!(
            &common::eval(&mut con, &sha, "k", op, args),
            by_script,
            "EVALSHA {op}"
        );
    }
    // The function that may write is refused whatever the op.
    assert_eq!(
        common::fcall(&mut con, &function, "k", "info", &["AT", "0"]),
        Err(oom.into())
    );
    let read_only = format!("{function}_ro");
    for reply in [
        call(&mut con, &["PACER.INFO", "k", "AT", "0"]),
        call(
            &mut con,
            &["FCALL_RO", &read_only, "1", "k", "info", "AT", "0"],
        ),
        common::eval(&mut con, &sha, "k", "info", &["AT", "0"]),
    ] {
        assert_eq!(reply, Ok(info.clone()));
    }
    assert_eq!(call(&mut con, &["GET", "k"]), Ok(key), "nothing changed");
    call(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    assert!(matches!(reserve(&mut con), Ok(Value::Array(_))));
}
