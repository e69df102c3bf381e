//! # pacer-redis
//!
//! The pacer's core inside Redis: `libpacer_redis.so`, loaded with
//! `--loadmodule`, adds `PACER.CREATE`, `PACER.RESERVE`, `PACER.BOOK`, `PACER.RELEASE`,
//! `PACER.REDEEM`, `PACER.INFO` and `PACER.OBSERVE`. One key holds one bucket that every
//! proxy of a fleet shares; each command reads the key, runs the core's
//! pure transition on it with the server's clock, writes the result back
//! and replicates the written bytes (never the command). Commands, replies,
//! the key's format and the clock, persistence and replication behaviour:
//! docs/redis.md.
//!
//! [`bucket`] is the whole command logic with no Redis in it; this file only
//! moves bytes between it and the server.

pub mod bucket;

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{
    raw, redis_module, Context, KeyType, RedisError, RedisResult, RedisString, RedisValue, Status,
};

use bucket::{Effect, Item, Reply, Stored, HEADER_LEN};

/// Whether `AT <ms>` is allowed: the module was loaded with `test-clock`.
static TEST_CLOCK: AtomicBool = AtomicBool::new(false);

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    // A key is signalled modified (WATCH, client-side caching) only when a
    // command wrote it (`apply`), not whenever it was opened for writing:
    // a call that writes nothing leaves a WATCH on the key alone.
    ctx.set_module_options(raw::ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED);
    if set_key_specs(ctx) == Status::Err {
        return Status::Err;
    }
    for arg in args {
        if arg.as_slice().eq_ignore_ascii_case(b"test-clock") {
            TEST_CLOCK.store(true, Ordering::Relaxed);
        } else {
            ctx.log_warning(&format!(
                "pacer: unknown module argument '{}' (known: test-clock)",
                String::from_utf8_lossy(arg.as_slice())
            ));
            return Status::Err;
        }
    }
    Status::Ok
}

/// Each command's one key (the first argument), as `COMMAND INFO` shows it
/// and ACL key permissions read it: `PACER.INFO` reads it (RO, access),
/// every other command reads and updates it (RW, access, update). Set with
/// `RedisModule_SetCommandInfo` (Redis 7.0), over the spec Redis derives
/// from the (1, 1, 1) range, which is read-write for every command.
fn set_key_specs(ctx: &Context) -> Status {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: the API table is filled by the module's initialisation,
    // before this runs, and not written after.
    let api = unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get_command), Some(set_info)) = api else {
        ctx.log_warning("pacer: this server cannot take key specs (Redis 7.0 or later needed)");
        return Status::Err;
    };
    for (name, flags) in COMMANDS {
        let spec = raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: u64::from(flags),
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
            },
            find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        };
        // SAFETY: all-zero is the key-spec list's terminator (its search
        // type INVALID), as the API defines it.
        let end: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
        let mut specs = [spec, end];
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: std::ptr::null(),
            complexity: std::ptr::null(),
            since: std::ptr::null(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: 0,
            key_specs: specs.as_mut_ptr(),
            args: std::ptr::null_mut(),
        };
        let name = std::ffi::CString::new(name).expect("a command name");
        // SAFETY: called from the module's OnLoad, after the commands were
        // created; Redis copies the info and the specs it points to.
        let set = unsafe {
            let command = get_command(ctx.ctx, name.as_ptr());
            !command.is_null() && set_info(command, &info) == raw::REDISMODULE_OK as i32
        };
        if !set {
            ctx.log_warning(&format!(
                "pacer: could not set the key spec of {}",
                name.to_string_lossy()
            ));
            return Status::Err;
        }
    }
    Status::Ok
}

/// The commands and their key's flags (`REDISMODULE_CMD_KEY_*`).
const COMMANDS: [(&str, u32); 7] = [
    ("pacer.create", WRITES_KEY),
    ("pacer.reserve", WRITES_KEY),
    ("pacer.book", WRITES_KEY),
    ("pacer.release", WRITES_KEY),
    ("pacer.redeem", WRITES_KEY),
    (
        "pacer.info",
        raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    ),
    ("pacer.observe", WRITES_KEY),
];

const WRITES_KEY: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;

/// The server's clock, ms since the epoch.
fn server_ms() -> u64 {
    // SAFETY: RedisModule_Milliseconds takes nothing and only reads the
    // clock; the API table is filled before any command runs.
    let ms = unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) };
    u64::try_from(ms).unwrap_or(0)
}

/// A new bucket's secret: 16 hex digits from the process's random keys
/// and the clock.
fn fresh_secret() -> [u8; 16] {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(server_ms());
    let hex = format!("{:016x}", hasher.finish());
    let mut secret = [0u8; 16];
    secret.copy_from_slice(hex.as_bytes());
    secret
}

fn to_value(reply: Reply) -> RedisValue {
    let item = |item: Item| match item {
        Item::Str(text) => RedisValue::BulkString(text),
        Item::Int(n) => RedisValue::Integer(n),
        Item::Nil => RedisValue::Null,
    };
    match reply {
        Reply::Int(n) => RedisValue::Integer(n),
        Reply::Array(items) => RedisValue::Array(items.into_iter().map(item).collect()),
    }
}

/// One command: parse, read the key, decide, write and replicate.
fn run(ctx: &Context, op: &str, args: &[RedisString]) -> RedisResult {
    if args.len() < 2 {
        return Err(RedisError::String(format!(
            "ERR pacer: wrong number of arguments for {op}"
        )));
    }
    let key_name = &args[1];
    let rest: Vec<&[u8]> = args[2..].iter().map(RedisString::as_slice).collect();
    let call =
        bucket::parse(op, &rest, TEST_CLOCK.load(Ordering::Relaxed)).map_err(RedisError::String)?;
    let now_ms = call.at.unwrap_or_else(server_ms);
    let key_bytes = key_name.as_slice();
    if !call.op.writes() {
        let key = ctx.open_key(key_name);
        let stored = match key.key_type() {
            KeyType::Empty => Stored::Missing,
            KeyType::String => Stored::Bytes(key.read()?.unwrap_or(&[])),
            _ => return Err(RedisError::WrongType),
        };
        let (reply, _) = bucket::execute(key_bytes, &call, stored, now_ms, fresh_secret)
            .map_err(RedisError::String)?;
        return Ok(to_value(reply));
    }
    let key = ctx.open_key_writable(key_name);
    let (reply, effect) = match key.key_type() {
        KeyType::Empty => bucket::execute(key_bytes, &call, Stored::Missing, now_ms, fresh_secret),
        KeyType::String => {
            let dma = key.as_string_dma()?;
            bucket::execute(key_bytes, &call, Stored::Bytes(&dma), now_ms, fresh_secret)
        }
        _ => return Err(RedisError::WrongType),
    }
    .map_err(RedisError::String)?;
    if effect.header.is_some() || !effect.bits.is_empty() {
        apply(ctx, &key, key_bytes, &effect)?;
        // SAFETY: the context and the key name are this command's, alive
        // for the call; the API table is filled before any command runs.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(ctx.ctx, key_name.inner);
            }
        }
    }
    Ok(to_value(reply))
}

/// Writes `effect` into the key in place and replicates the same bytes:
/// `SETRANGE key 0 <header>`, then `SETBIT` for each bit of the bitmap.
fn apply(
    ctx: &Context,
    key: &redis_module::key::RedisKeyWritable,
    key_name: &[u8],
    effect: &Effect,
) -> Result<(), RedisError> {
    let mut dma = key.as_string_dma()?;
    if let Some(header) = &effect.header {
        if dma.len() < HEADER_LEN {
            dma.write(header)?;
        } else {
            dma[..HEADER_LEN].copy_from_slice(header);
        }
        ctx.replicate("SETRANGE", &[key_name, b"0", &header[..]]);
    }
    for &(offset, value) in &effect.bits {
        let byte = (offset / 8) as usize;
        let mask = 0x80u8 >> (offset % 8);
        if byte >= dma.len() {
            // As SETBIT does, a clear included: the key grows with zero
            // bytes to hold the bit (the script's SETBIT does the same).
            let grow = vec![0u8; byte + 1 - dma.len()];
            dma.append(&grow)?;
        }
        if value {
            dma[byte] |= mask;
        } else {
            dma[byte] &= !mask;
        }
        let offset = offset.to_string();
        let value: &[u8] = if value { b"1" } else { b"0" };
        ctx.replicate("SETBIT", &[key_name, offset.as_bytes(), value]);
    }
    Ok(())
}

/// Runs `op`, turning a panic into an error reply: nothing a client sends
/// may take the server down.
fn guarded(ctx: &Context, op: &str, args: Vec<RedisString>) -> RedisResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(ctx, op, &args)))
        .unwrap_or_else(|_| Err(RedisError::Str("ERR pacer: internal error")))
}

/// The commands' entry points, one a name: each runs its op through
/// `guarded`.
macro_rules! commands {
    ($($op:ident),*) => {
        $(
            fn $op(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
                guarded(ctx, stringify!($op), args)
            }
        )*
    };
}

commands!(create, reserve, book, release, redeem, info, observe);

redis_module! {
    name: "pacer",
    version: 1,
    // The system allocator: the module keeps no memory of its own between
    // commands (a bucket's bytes are Redis's own string), and the unit tests
    // run outside Redis, where its allocator does not exist.
    allocator: (std::alloc::System, std::alloc::System),
    data_types: [],
    init: init,
    // The last two: no ACL category required, then the ones set where the
    // server can set a module command's (RedisModule_SetCommandACLCategories,
    // Redis 7.2 and later; on 7.0 a module command has none).
    commands: [
        ["pacer.create", create, "write deny-oom fast", 1, 1, 1, "", "write fast"],
        ["pacer.reserve", reserve, "write deny-oom fast", 1, 1, 1, "", "write fast"],
        ["pacer.book", book, "write deny-oom fast", 1, 1, 1, "", "write fast"],
        ["pacer.release", release, "write deny-oom fast", 1, 1, 1, "", "write fast"],
        ["pacer.redeem", redeem, "write deny-oom fast", 1, 1, 1, "", "write fast"],
        ["pacer.info", info, "readonly fast", 1, 1, 1, "", "read fast"],
        ["pacer.observe", observe, "write deny-oom fast", 1, 1, 1, "", "write fast"],
    ],
}
