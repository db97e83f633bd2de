//! Real redis-server instances for the integration tests: each on its own
//! loopback port and directory, loading the module, stopped and cleaned up by
//! `Drop` so a failing test leaves nothing behind.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

/// The module under test: `RL_MODULE`, or the debug build `make test` makes.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return PathBuf::from(path);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/libredis_ratelimit.so");
    assert!(
        path.exists(),
        "{} is missing: build it first (`make test` does), or set RL_MODULE",
        path.display()
    );
    path
}

/// The server binary: `RL_SERVER` (e.g. a valkey-server), or redis-server.
pub fn server_binary() -> String {
    std::env::var("RL_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// A server with the module loaded, no persistence unless `extra` asks.
    pub fn start(extra: &[&str]) -> Server {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rl-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut args: Vec<String> = [
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push("--loadmodule".into());
        args.push(module_path().display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Server {
            port: 0,
            dir,
            args,
            child: None,
        };
        server.launch();
        server
    }

    /// A server replicating `primary`, returned once the link is up.
    pub fn start_replica_of(primary: &Server) -> Server {
        let replica = Server::start(&[]);
        let mut con = replica.connect();
        run(
            &mut con,
            &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
        )
        .unwrap();
        wait_for("the replica link", Duration::from_secs(20), || {
            info_field(&mut con, "replication", "master_link_status") == "up"
        });
        replica
    }

    /// Starts the process again, on the same port and directory (after `stop`).
    pub fn launch(&mut self) {
        for attempt in 0..5 {
            if self.port == 0 || attempt > 0 {
                self.port = free_port();
            }
            let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
            let child = Command::new(server_binary())
                .args([
                    "--port",
                    &self.port.to_string(),
                    "--dir",
                    self.dir.to_str().unwrap(),
                ])
                .args(&self.args)
                .stdout(Stdio::from(log))
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start redis-server (is it installed? `make deps`)");
            self.child = Some(child);
            if self.wait_ready(Duration::from_secs(10)) {
                return;
            }
            self.kill();
        }
        panic!("redis-server did not start; log:\n{}", self.log());
    }

    fn wait_ready(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if let Ok(mut con) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return true;
                }
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?.get_connection()
    }

    pub fn connect(&self) -> Connection {
        self.try_connect()
            .expect("cannot connect to the test server")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Stops the server the hard way (like a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server cleanly, without saving.
    pub fn shutdown_nosave(&mut self) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Whether the process is still running (it did not crash).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a command built from words, returning the raw reply.
pub fn run(con: &mut Connection, words: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query(con)
}

/// Runs a check command and returns its integer reply.
pub fn check(con: &mut Connection, words: &[&str]) -> Vec<i64> {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query::<Vec<i64>>(con)
        .unwrap_or_else(|e| panic!("{words:?} failed: {e}"))
}

/// The error text a command replies with (panics if it succeeds).
pub fn error_of(con: &mut Connection, words: &[&str]) -> String {
    match run(con, words) {
        Ok(v) => panic!("{words:?} should fail, replied {v:?}"),
        Err(e) => {
            let code = e.code().unwrap_or("");
            let detail = e.detail().unwrap_or("");
            format!("{code} {detail}").trim().to_string()
        }
    }
}

/// The key's serialized value (None when the key does not exist).
pub fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).unwrap()
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

pub fn digest_value(con: &mut Connection, key: &str) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query::<Vec<String>>(con)
        .unwrap()
        .concat()
}

/// The server's clock, in Unix ms.
pub fn server_time_ms(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

/// One field of `INFO <section>` ("" when absent).
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// Polls `done` until it holds, failing the test after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}
