//! Real redis-server instances for the integration tests: each on its own
//! loopback port and directory, loading the module, stopped and cleaned up by
//! `Drop` so a failing test leaves nothing behind.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod links;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, Value};
use redis_ratelimit::algorithms::registry::{each_algorithm, Each, Listed};
use redis_ratelimit::parse::Syntax;

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

/// How long a server may take to answer its first PING: `RL_START_TIMEOUT_S`
/// seconds (a server under valgrind starts 20-50 times slower), or 10 s.
fn start_timeout() -> Duration {
    let seconds = std::env::var("RL_START_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(seconds)
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

/// How to start a server, beyond what `Server::start` always sets.
#[derive(Default, Clone, Copy)]
pub struct Options<'a> {
    /// Configuration options given on the command line, after the defaults
    /// (so they override them).
    pub args: &'a [&'a str],
    /// Environment variables of the server process (e.g. `LD_PRELOAD`).
    pub env: &'a [(&'a str, &'a str)],
    /// Cluster mode: `--cluster-enabled yes`, with the cluster bus on a free
    /// port of its own (the default, port + 10000, may be taken or above 65535).
    pub cluster: bool,
    /// The module file to load instead of `module_path()` (e.g. a copy
    /// standing for another release, in the upgrade tests).
    pub module: Option<&'a Path>,
}

pub struct Server {
    pub port: u16,
    /// The cluster bus port of a cluster node (0 otherwise).
    pub bus_port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cluster: bool,
    child: Option<Child>,
}

impl Server {
    /// A server with the module loaded, no persistence unless `extra` asks.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with(Options {
            args: extra,
            ..Options::default()
        })
    }

    /// A server with the module loaded, started as `options` say.
    pub fn start_with(options: Options) -> Server {
        let extra = options.args;
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
        let module = options.module.map_or_else(module_path, Path::to_path_buf);
        args.push(module.display().to_string());
        if options.cluster {
            // The nodes file (nodes.conf) goes to the node's own `--dir`.
            args.extend(["--cluster-enabled", "yes"].map(String::from));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Server {
            port: 0,
            bus_port: 0,
            dir,
            args,
            env: options
                .env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cluster: options.cluster,
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
            let mut command = Command::new(server_binary());
            command.args([
                "--port",
                &self.port.to_string(),
                "--dir",
                self.dir.to_str().unwrap(),
            ]);
            if self.cluster {
                if self.bus_port == 0 || attempt > 0 {
                    self.bus_port = loop {
                        let port = free_port();
                        if port != self.port {
                            break port;
                        }
                    };
                }
                command.args(["--cluster-port", &self.bus_port.to_string()]);
            }
            let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
            let child = command
                .args(&self.args)
                .envs(self.env.iter().cloned())
                .stdout(Stdio::from(log))
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start redis-server (is it installed? `make deps`)");
            self.child = Some(child);
            if self.wait_ready(start_timeout()) {
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

    /// Starts the server again (stopped before), with `extra` options
    /// added to those it had.
    pub fn relaunch_with(&mut self, extra: &[&str]) {
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self.launch();
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

    /// Waits at most `timeout` for the process to exit by itself; its exit
    /// status, or `None` if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Whether the process is still running (it did not crash).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// `host:port`, as cluster tools and `CLUSTER NODES` write it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A string-like reply (bulk, simple, integer, `OK`) as text.
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Okay => "OK".into(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// The elements of an array (or set) reply.
pub fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// The value of `name` in a field/value reply (a map under RESP3, a flat
/// array under RESP2), as `COMMAND DOCS` and `RL.INFO` answer.
pub fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| text(k) == name).map(|(_, v)| v),
        _ => items(v)
            .chunks(2)
            .find(|pair| text(&pair[0]) == name)
            .map(|pair| &pair[1]),
    }
}

/// Runs a command built from words, returning the raw reply.
pub fn run(con: &mut impl ConnectionLike, words: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query(con)
}

/// Runs a check command and returns its integer reply.
pub fn check(con: &mut impl ConnectionLike, words: &[&str]) -> Vec<i64> {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query::<Vec<i64>>(con)
        .unwrap_or_else(|e| panic!("{words:?} failed: {e}"))
}

/// The error text a command replies with (panics if it succeeds).
pub fn error_of(con: &mut impl ConnectionLike, words: &[&str]) -> String {
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
pub fn dump(con: &mut impl ConnectionLike, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).unwrap()
}

/// How many leases a concurrency key stores, ended ones not dropped yet
/// included, read from its `DUMP` (`RL.INFO` shows the live ones only): the
/// state's body is `limit`, `lease_ms`, `updated_ms`, then the count, each
/// 8 bytes little-endian, found after the parameters the key last took
/// (in a `DUMP` made with `rdbcompression` off for the moment).
pub fn stored_leases(con: &mut impl ConnectionLike, key: &str, limit: u64, lease_ms: u64) -> u64 {
    let compression: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "rdbcompression"])
        .query(con)
        .unwrap();
    run(con, &["CONFIG", "SET", "rdbcompression", "no"]).unwrap();
    let dumped = dump(con, key).expect("the key exists");
    run(con, &["CONFIG", "SET", "rdbcompression", &compression[1]]).unwrap();
    let params: Vec<u8> = [limit.to_le_bytes(), lease_ms.to_le_bytes()].concat();
    let at = dumped
        .windows(params.len())
        .position(|w| w == params)
        .expect("the key's parameters in its DUMP");
    let count = &dumped[at + params.len() + 8..][..8];
    u64::from_le_bytes(count.try_into().unwrap())
}

pub fn pttl(con: &mut impl ConnectionLike, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

/// When the key expires, in Unix ms (`PEXPIRETIME`).
pub fn expiry_time(con: &mut impl ConnectionLike, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

pub fn exists(con: &mut impl ConnectionLike, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

pub fn digest_value(con: &mut impl ConnectionLike, key: &str) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query::<Vec<String>>(con)
        .unwrap()
        .concat()
}

/// The server's clock, in Unix ms.
pub fn server_time_ms(con: &mut impl ConnectionLike) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

/// One field of `INFO <section>` ("" when absent).
pub fn info_field(con: &mut impl ConnectionLike, section: &str, field: &str) -> String {
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

/// The cluster tool: `RL_CLI` (e.g. a valkey-cli), or redis-cli.
pub fn cli_binary() -> String {
    std::env::var("RL_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

/// A Redis Cluster on loopback, every node a `Server` with the module (so
/// each is killed on drop). Nodes are numbered in start order; which of them
/// are primaries is decided by the cluster tool and can change (failover),
/// so ask `role` rather than assume.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

/// One line of `CLUSTER NODES`, the fields the tests need.
pub struct NodeLine {
    pub port: u16,
    /// `master` or `slave`, with `fail`/`fail?` when the node is thought down.
    pub flags: Vec<String>,
    /// Slot ranges served (primaries), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Cluster {
    /// `primaries` primaries with `replicas` replicas each, the slots spread
    /// evenly over the primaries, returned once healthy (see `wait_healthy`).
    /// The node timeout is 1 s, so a failover takes a few seconds.
    pub fn start(primaries: usize, replicas: usize, extra: &[&str]) -> Cluster {
        let mut args = vec!["--cluster-node-timeout", "1000"];
        args.extend_from_slice(extra);
        let nodes: Vec<Server> = (0..primaries * (1 + replicas))
            .map(|_| {
                Server::start_with(Options {
                    args: &args,
                    cluster: true,
                    ..Options::default()
                })
            })
            .collect();
        let out = Command::new(cli_binary())
            .args(["--cluster", "create"])
            .args(nodes.iter().map(Server::address))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("cannot run redis-cli (is it installed? `make deps`)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut cluster = Cluster { nodes };
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
    }

    /// Waits until every running node reports `cluster_state:ok` and sees
    /// every slot served, and every running replica's link to its primary is
    /// up (so a write can reach it).
    pub fn wait_healthy(&mut self, timeout: Duration) {
        let ports: Vec<u16> = self
            .running()
            .into_iter()
            .map(|i| self.nodes[i].port)
            .collect();
        wait_for("a healthy cluster", timeout, || {
            ports.iter().all(|&port| {
                let Ok(mut con) = connect_port(port) else {
                    return false;
                };
                let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut con) else {
                    return false;
                };
                let replica_ok = info_field(&mut con, "replication", "role") == "master"
                    || info_field(&mut con, "replication", "master_link_status") == "up";
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && replica_ok
            })
        });
    }

    /// Indexes of the nodes whose process is running.
    pub fn running(&mut self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_alive())
            .collect()
    }

    /// The node's own view of its role: `master` or `slave`.
    pub fn role(&self, node: usize) -> String {
        info_field(&mut self.nodes[node].connect(), "replication", "role")
    }

    /// Indexes of the running nodes that are primaries now.
    pub fn primaries(&mut self) -> Vec<usize> {
        self.running()
            .into_iter()
            .filter(|&i| self.role(i) == "master")
            .collect()
    }

    /// Indexes of the running nodes replicating node `primary`.
    pub fn replicas_of(&mut self, primary: usize) -> Vec<usize> {
        let port = self.nodes[primary].port.to_string();
        self.running()
            .into_iter()
            .filter(|&i| {
                let mut con = self.nodes[i].connect();
                info_field(&mut con, "replication", "role") == "slave"
                    && info_field(&mut con, "replication", "master_port") == port
            })
            .collect()
    }

    /// `CLUSTER NODES` as node `from` sees the cluster.
    pub fn nodes_seen_by(&self, from: usize) -> Vec<NodeLine> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[from].connect())
            .unwrap();
        text.lines()
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // <id> <ip:port@bus> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
                let port = fields[1]
                    .split(['@', ','])
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse().ok())
                    .unwrap();
                let slots = fields[8..]
                    .iter()
                    .filter(|s| !s.starts_with('['))
                    .map(|s| match s.split_once('-') {
                        Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                        None => (s.parse().unwrap(), s.parse().unwrap()),
                    })
                    .collect();
                NodeLine {
                    port,
                    flags: fields[2].split(',').map(str::to_string).collect(),
                    slots,
                }
            })
            .collect()
    }

    /// The index of the node serving `key`'s slot as primary, as node `from`
    /// sees the cluster.
    pub fn primary_of_key(&self, from: usize, key: &str) -> usize {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[from].connect())
            .unwrap();
        let port = self
            .nodes_seen_by(from)
            .into_iter()
            .find(|n| n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("no node serves slot {slot}"));
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }

    /// A cluster client (the `redis` crate's), seeded with every running node.
    pub fn client(&mut self) -> redis::cluster::ClusterConnection {
        let seeds: Vec<String> = self
            .running()
            .into_iter()
            .map(|i| format!("redis://{}/", self.nodes[i].address()))
            .collect();
        redis::cluster::ClusterClient::builder(seeds)
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(5))
            .build()
            .and_then(|c| c.get_connection())
            .expect("cannot connect the cluster client")
    }
}

/// A plain connection to a port on loopback.
pub fn connect_port(port: u16) -> redis::RedisResult<Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()
}

// The registry's algorithms, for the tests that go over every one of them.
//
// A test that runs every algorithm asks each for the same limit through
// `Algorithm::limit_of` (see `every_algorithm`), so an algorithm added to
// the registry is run by every such test without an edit here or there.

/// The name of every algorithm of the registry, in registry order: its
/// command is `RL.<NAME>`, its word in `RL.ALL` is `<NAME>`.
pub const ALGORITHMS: &[&str] = redis_ratelimit::algorithms::registry::NAMES;

pub const HOUR_MS: u64 = 3_600_000;

/// An algorithm of the registry as a test calls it: its command and the
/// words of its parameters (and own options).
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Its name in the registry (lower case).
    pub name: &'static str,
    /// `RL.<NAME>`.
    pub command: String,
    /// The words after the key.
    pub params: Vec<String>,
    /// How many of `params` are the algorithm's parameters; its own options
    /// follow them.
    pub param_count: usize,
    /// The parameters' names (`Syntax::PARAMS`), as `RL.INFO` shows them
    /// (a duration with `_ms`, a rate with `_per_s`).
    pub param_names: Vec<&'static str>,
}

impl Spec {
    /// A command or anything else a test calls like one (`CL.THROTTLE`):
    /// `command` then `params`, no registry entry.
    pub fn other(command: &str, params: &[&str]) -> Spec {
        Spec {
            name: "",
            command: command.to_string(),
            params: params.iter().map(|w| w.to_string()).collect(),
            param_count: params.len(),
            param_names: vec![],
        }
    }

    /// The words after the key, borrowed.
    pub fn params(&self) -> Vec<&str> {
        self.params.iter().map(String::as_str).collect()
    }

    /// The whole command: the command, `key`, the parameters, `extra`.
    pub fn words<'a>(&'a self, key: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        command_words(&self.command, key, &self.params(), extra)
    }

    /// `RL.ALL`'s word for the algorithm: its name in upper case.
    pub fn word(&self) -> String {
        self.name.to_ascii_uppercase()
    }
}

struct LimitOf {
    limit: u64,
    window_ms: u64,
}

impl Each for LimitOf {
    type Out = Spec;
    fn algorithm<A: Listed>(&mut self) -> Spec {
        Spec {
            name: A::NAME,
            command: command_of(A::NAME),
            params: A::limit_of(self.limit, self.window_ms).to_words(),
            param_count: <A::Params as Syntax>::PARAMS.len(),
            param_names: <A::Params as Syntax>::PARAMS
                .iter()
                .map(|w| w.name)
                .collect(),
        }
    }
}

/// Every algorithm of the registry, in registry order, with parameters
/// allowing `limit` at once and `limit` again per `window_ms` (see
/// `Algorithm::limit_of`).
pub fn every_algorithm(limit: u64, window_ms: u64) -> Vec<Spec> {
    each_algorithm(&mut LimitOf { limit, window_ms })
}

/// Each algorithm with a limit of 5 and a slow refill (5 an hour), so that
/// a test's own duration changes nothing. (A denial's own wait is under an
/// hour and a third.)
pub fn limit_5() -> Vec<Spec> {
    every_algorithm(5, HOUR_MS)
}

/// A command's words: the command, its key, its parameters, then `extra`.
pub fn command_words<'a>(
    cmd: &'a str,
    key: &'a str,
    params: &[&'a str],
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut w = vec![cmd, key];
    w.extend_from_slice(params);
    w.extend_from_slice(extra);
    w
}

/// The command of the algorithm `name`: `RL.<NAME>`.
pub fn command_of(name: &str) -> String {
    format!("RL.{}", name.to_ascii_uppercase())
}

/// RL.INFO as a map of field name to value (`None` for a missing key).
pub fn rl_info(con: &mut Connection, key: &str) -> Option<HashMap<String, Value>> {
    match run(con, &["RL.INFO", key]).unwrap() {
        Value::Nil => None,
        Value::Array(items) => {
            let mut map = HashMap::new();
            for pair in items.chunks(2) {
                let name: String = redis::from_redis_value(pair[0].clone()).unwrap();
                map.insert(name, pair[1].clone());
            }
            Some(map)
        }
        Value::Map(pairs) => Some(
            pairs
                .into_iter()
                .map(|(k, v)| (redis::from_redis_value::<String>(k).unwrap(), v))
                .collect(),
        ),
        other => panic!("RL.INFO {key} replied {other:?}"),
    }
}

pub fn info_int(map: &HashMap<String, Value>, field: &str) -> i64 {
    redis::from_redis_value(map[field].clone()).unwrap()
}

pub fn info_text(map: &HashMap<String, Value>, field: &str) -> String {
    redis::from_redis_value(map[field].clone()).unwrap()
}

/// The reply of RL.ACQUIRE: the five integers and the lease id (if any).
pub fn acquire(con: &mut Connection, words: &[&str]) -> (Vec<i64>, Option<String>) {
    let mut cmd = redis::cmd("RL.ACQUIRE");
    for w in words {
        cmd.arg(*w);
    }
    let (a, b, c, d, e, id): (i64, i64, i64, i64, i64, Option<String>) = cmd
        .query(con)
        .unwrap_or_else(|err| panic!("RL.ACQUIRE {words:?} failed: {err}"));
    (vec![a, b, c, d, e], id)
}
