//! A real `redis-server` for the tests: started on a free loopback port in a
//! temporary directory with the module loaded, stopped (SIGKILL, then
//! reaped) when dropped — also when a test panics — so nothing is left
//! running. `scripts/test-redis.sh` installs Debian's redis-server first.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How a server is started.
#[derive(Clone, Debug)]
pub struct Options {
    /// Load the module (with `test-clock` when `test_clock`).
    pub module: bool,
    /// Allow `AT <ms>` (the module's load argument).
    pub test_clock: bool,
    /// `appendonly yes` with this `appendfsync` (`always`, `everysec`).
    pub appendfsync: Option<&'static str>,
    /// `replicaof 127.0.0.1 <port>`.
    pub replica_of: Option<u16>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            module: true,
            test_clock: true,
            appendfsync: None,
            replica_of: None,
        }
    }
}

impl Options {
    /// The module as shipped: no `test-clock`, the server's clock decides.
    pub fn production() -> Options {
        Options {
            test_clock: false,
            ..Default::default()
        }
    }
}

/// A running server; dropped = killed.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub options: Options,
    dir: PathBuf,
    /// Owns the directory unless a restart took it over.
    _temp: Option<tempfile::TempDir>,
}

/// `redis-server`, or the test fails saying how to get it.
fn redis_server() -> PathBuf {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let path = Path::new(dir).join("redis-server");
        if path.exists() {
            return path;
        }
    }
    panic!("redis-server not found: run scripts/test-redis.sh, which installs it");
}

/// The module this test binary was built beside: `target/<profile>/`.
pub fn module_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let path = profile_dir.join("libpacer_redis.so");
    assert!(
        path.exists(),
        "{} not built: cargo build -p pacer-redis",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

impl Server {
    /// Starts a server with `options` in a fresh temporary directory.
    pub fn start(options: Options) -> Server {
        let temp = tempfile::Builder::new()
            .prefix("pacer-redis-")
            .tempdir()
            .expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut server = Server::launch(options, dir, None);
        server._temp = Some(temp);
        server
    }

    /// The default server: module with the test clock.
    pub fn with_module() -> Server {
        Server::start(Options::default())
    }

    fn launch(options: Options, dir: PathBuf, port: Option<u16>) -> Server {
        let mut last_error = String::new();
        for _ in 0..20 {
            let port = port.unwrap_or_else(free_port);
            let mut command = Command::new(redis_server());
            command
                .arg("--port")
                .arg(port.to_string())
                .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
                .args(["--protected-mode", "no", "--enable-debug-command", "yes"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("redis.log"));
            match options.appendfsync {
                Some(policy) => command.args(["--appendonly", "yes", "--appendfsync", policy]),
                None => command.args(["--appendonly", "no"]),
            };
            if let Some(primary) = options.replica_of {
                command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
            }
            if options.module {
                command.arg("--loadmodule").arg(module_path());
                if options.test_clock {
                    command.arg("test-clock");
                }
            }
            let mut child = command
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server");
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
                    last_error = format!("redis-server exited ({status}): {log}");
                    break;
                }
                if let Ok(mut con) = connect(port) {
                    let ready: redis::RedisResult<String> = redis::cmd("PING").query(&mut con);
                    if ready.is_ok() {
                        return Server {
                            child: Some(child),
                            port,
                            options,
                            dir,
                            _temp: None,
                        };
                    }
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_error = "redis-server did not answer PING in 20 s".into();
                    break;
                }
                sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new connection.
    pub fn connect(&self) -> redis::Connection {
        connect(self.port).expect("connect")
    }

    /// The data directory (AOF, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// SIGKILL: no shutdown, no final fsync.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (after
    /// [`Server::kill9`]): it loads what its AOF or RDB kept.
    pub fn restart(&mut self) {
        self.kill9();
        let mut again = Server::launch(self.options.clone(), self.dir.clone(), Some(self.port));
        self.child = again.child.take();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Waits until `INFO replication` on `port` says the link to the primary
/// is up (a replica's first sync), failing after 20 s.
pub fn wait_link_up(port: u16) {
    let mut con = connect(port).expect("connect replica");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut con)
            .expect("INFO");
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica link not up in 20 s:\n{info}"
        );
        sleep(Duration::from_millis(20));
    }
}

/// A connection to a loopback port, with timeouts so a test never hangs.
pub fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
    con.set_read_timeout(Some(Duration::from_secs(30)))?;
    con.set_write_timeout(Some(Duration::from_secs(30)))?;
    Ok(con)
}

/// Runs a command, giving the server's reply or its error text.
pub fn call(con: &mut redis::Connection, args: &[&str]) -> Result<redis::Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query::<redis::Value>(con).map_err(|e| error_text(&e))
}

/// The error reply as the server sent it ("ERR pacer: …", "WRONGTYPE …").
pub fn error_text(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => error.to_string(),
    }
}

/// The script as shipped (`redis/pacer.lua`, as `pacer replay` embeds it).
pub fn script_source() -> String {
    pacer_cli::engine::SCRIPT.to_string()
}

/// The shipped script with its one switch turned on: `AT <ms>` accepted
/// (`pacer replay`'s own copy, after checking the switch is there once).
pub fn test_clock_script() -> String {
    let line = "local TEST_CLOCK = false";
    let shipped = script_source();
    assert_eq!(
        shipped.matches(line).count(),
        1,
        "pacer.lua must hold `{line}` once"
    );
    pacer_cli::engine::test_clock_script()
}

/// `SCRIPT LOAD`s `source`, giving its SHA1 for `EVALSHA`.
pub fn load_script(con: &mut redis::Connection, source: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query(con)
        .expect("SCRIPT LOAD")
}

/// `EVALSHA sha 1 key op args…`, as `call` gives it.
pub fn eval(
    con: &mut redis::Connection,
    sha: &str,
    key: &str,
    op: &str,
    args: &[&str],
) -> Result<redis::Value, String> {
    one_key_call(con, "EVALSHA", sha, key, op, args)
}

/// `verb entry 1 key op args…` (EVALSHA or FCALL), as `call` gives it.
fn one_key_call(
    con: &mut redis::Connection,
    verb: &str,
    entry: &str,
    key: &str,
    op: &str,
    args: &[&str],
) -> Result<redis::Value, String> {
    let mut cmd = redis::cmd(verb);
    cmd.arg(entry).arg(1).arg(key).arg(op);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd.query::<redis::Value>(con).map_err(|e| error_text(&e))
}

/// Loads the test-clock script as a function library named `name` (its one
/// function has the same name), giving the name for `fcall`.
pub fn load_function(con: &mut redis::Connection, name: &str) -> String {
    let library = pacer_cli::engine::function_library(&test_clock_script(), name);
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library)
        .query::<String>(con)
        .expect("FUNCTION LOAD")
}

/// A test-clock server with the module, and a connection to it on which
/// the script (its SHA1) and the function library (its name) are loaded.
pub fn every_engine() -> (Server, redis::Connection, String, String) {
    let server = Server::with_module();
    let mut con = server.connect();
    let sha = load_script(&mut con, &test_clock_script());
    let function = load_function(&mut con, "pacer_test");
    (server, con, sha, function)
}

/// `FCALL name 1 key op args…`, as `call` gives it.
pub fn fcall(
    con: &mut redis::Connection,
    name: &str,
    key: &str,
    op: &str,
    args: &[&str],
) -> Result<redis::Value, String> {
    one_key_call(con, "FCALL", name, key, op, args)
}
