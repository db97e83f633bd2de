//! Monitoring (issue 31): what `INFO ratelimit` holds — the keys of each
//! algorithm, whichever way a value comes (a command, an RDB load, a copy,
//! `RESTORE`, a replica's sync) and goes (deleted, overwritten, expired,
//! flushed, freed in the background); penalties — where Redis shows the
//! section and where it does not; and the way into Prometheus: Debian's
//! `prometheus-redis-exporter` running `monitoring/ratelimit-info.lua`
//! against a real server, and the shipped rules checked by `promtool`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// The algorithms' names in `INFO ratelimit`, in registry order.
const ALGORITHMS: [&str; 7] = [
    "tokenbucket",
    "slidingcounter",
    "fixedwindow",
    "slidinglog",
    "leakybucket",
    "gcra",
    "concurrency",
];

/// Every `ratelimit_<field>:<n>` of `INFO ratelimit`, by field (the
/// policies' digest and per-policy lines, not numbers, are left out).
fn ratelimit_info(con: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("ratelimit").query(con).unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("ratelimit_")?.split_once(':'))
        .filter(|(k, _)| *k != "policies_digest" && !k.starts_with("policy_"))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect()
}

/// The key counts: each algorithm's, then `keys`, the total.
fn key_counts(con: &mut redis::Connection) -> Vec<u64> {
    let info = ratelimit_info(con);
    ALGORITHMS
        .iter()
        .map(|a| info[&format!("{a}_keys")])
        .chain([info["keys"]])
        .collect()
}

/// One key of each algorithm (`{prefix}:<algorithm>`), the fixed window's
/// under a penalty (its penalized type, the same algorithm).
fn one_key_of_each(con: &mut redis::Connection, prefix: &str) {
    for words in [
        vec!["RL.TOKENBUCKET", "tokenbucket", "10", "1"],
        vec!["RL.SLIDINGCOUNTER", "slidingcounter", "10", "1m"],
        vec!["RL.FIXEDWINDOW", "fixedwindow", "1", "1h", "PENALTY", "1h"],
        vec!["RL.FIXEDWINDOW", "fixedwindow", "1", "1h", "PENALTY", "1h"],
        vec!["RL.SLIDINGLOG", "slidinglog", "1000", "1h"],
        vec!["RL.LEAKYBUCKET", "leakybucket", "10", "1"],
        vec!["RL.GCRA", "gcra", "5", "10", "1s"],
        vec!["RL.ACQUIRE", "concurrency", "10", "1m"],
    ] {
        let key = format!("{prefix}:{}", words[1]);
        let mut words = words.clone();
        words[1] = &key;
        run(con, &words).unwrap();
    }
    assert_eq!(
        run(con, &["TYPE", &format!("{prefix}:fixedwindow")])
            .map(|v| text(&v))
            .unwrap(),
        "rp_fixwin",
        "the penalized type"
    );
}

#[test]
fn info_ratelimit_counts_the_keys_of_each_algorithm_as_they_come_and_go() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(key_counts(&mut con), [0, 0, 0, 0, 0, 0, 0, 0]);
    one_key_of_each(&mut con, "a");
    assert_eq!(key_counts(&mut con), [1, 1, 1, 1, 1, 1, 1, 7]);
    // Checks on a key that exists add nothing; another database counts.
    check(&mut con, &["RL.TOKENBUCKET", "a:tokenbucket", "10", "1"]);
    run(&mut con, &["SELECT", "1"]).unwrap();
    check(&mut con, &["RL.TOKENBUCKET", "db1", "10", "1"]);
    run(&mut con, &["SELECT", "0"]).unwrap();
    assert_eq!(key_counts(&mut con), [2, 1, 1, 1, 1, 1, 1, 8]);
    // COPY and RESTORE make values; DEL, UNLINK and SET over one free them.
    run(&mut con, &["COPY", "a:gcra", "copy:gcra"]).unwrap();
    let dumped = dump(&mut con, "a:leakybucket").unwrap();
    redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(&dumped)
        .query::<()>(&mut con)
        .unwrap();
    assert_eq!(key_counts(&mut con), [2, 1, 1, 1, 2, 2, 1, 10]);
    run(&mut con, &["DEL", "a:tokenbucket"]).unwrap();
    run(&mut con, &["UNLINK", "a:slidinglog"]).unwrap();
    run(&mut con, &["SET", "copy:gcra", "a string now"]).unwrap();
    assert_eq!(key_counts(&mut con), [1, 1, 1, 0, 2, 1, 1, 7]);
    // An expired key, once Redis reclaims it.
    run(&mut con, &["PEXPIRE", "restored", "1"]).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert!(!exists(&mut con, "restored"));
    assert_eq!(key_counts(&mut con), [1, 1, 1, 0, 1, 1, 1, 6]);
    // An RDB reload frees every value and loads them again: the same counts.
    let before = ratelimit_info(&mut con)["memory_bytes"];
    run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(key_counts(&mut con), [1, 1, 1, 0, 1, 1, 1, 6]);
    // FLUSHALL ASYNC frees them in a background thread.
    run(&mut con, &["FLUSHALL", "ASYNC"]).unwrap();
    wait_for("the background flush", Duration::from_secs(10), || {
        key_counts(&mut con) == [0, 0, 0, 0, 0, 0, 0, 0]
    });
    let after = ratelimit_info(&mut con)["memory_bytes"];
    assert!(
        after < before,
        "memory_bytes {before} then {after} after FLUSHALL"
    );
}

#[test]
fn a_replica_counts_the_keys_it_holds_through_its_sync_writes_and_flushes() {
    let primary = Server::start(&[]);
    let mut p = primary.connect();
    // Before the replica attaches: it receives these in the RDB of its sync.
    one_key_of_each(&mut p, "before");
    let replica = Server::start_replica_of(&primary);
    let mut r = replica.connect();
    wait_for("the sync", Duration::from_secs(10), || {
        key_counts(&mut r) == [1, 1, 1, 1, 1, 1, 1, 7]
    });
    // Then through the replication stream.
    one_key_of_each(&mut p, "after");
    run(&mut p, &["DEL", "before:gcra"]).unwrap();
    wait_for("the stream", Duration::from_secs(10), || {
        key_counts(&mut r) == [2, 2, 2, 2, 2, 1, 2, 13]
    });
    assert_eq!(key_counts(&mut p), key_counts(&mut r));
    // A full resync empties the replica's keys first (freed, not leaked)
    // and loads the primary's again.
    run(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    run(&mut p, &["RL.GCRA", "later", "5", "10", "1s"]).unwrap();
    run(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    )
    .unwrap();
    wait_for("the resync", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up"
            && key_counts(&mut r) == [2, 2, 2, 2, 2, 2, 2, 14]
    });
    run(&mut p, &["FLUSHALL"]).unwrap();
    wait_for("the flush on the replica", Duration::from_secs(10), || {
        key_counts(&mut r) == [0, 0, 0, 0, 0, 0, 0, 0]
    });
}

#[test]
fn penalties_are_counted_by_the_algorithm_that_denied() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let penalties = |con: &mut redis::Connection| {
        let info = ratelimit_info(con);
        ALGORITHMS[..6]
            .iter()
            .map(|a| info[&format!("{a}_penalties")])
            .collect::<Vec<_>>()
    };
    // Allowed: no penalty; denied: one; denied again during it: none more
    // (a denial during a penalty does not extend it).
    for _ in 0..3 {
        run(
            &mut con,
            &["RL.FIXEDWINDOW", "f", "1", "1h", "PENALTY", "1m"],
        )
        .unwrap();
    }
    assert_eq!(penalties(&mut con), [0, 0, 1, 0, 0, 0]);
    // In SHADOW mode nothing is denied, so nothing is penalized.
    for _ in 0..2 {
        run(
            &mut con,
            &["RL.GCRA", "g", "0", "1", "1h", "PENALTY", "1m", "SHADOW"],
        )
        .unwrap();
    }
    assert_eq!(penalties(&mut con), [0, 0, 1, 0, 0, 0]);
    // RL.ALL: the tier that denied, by its algorithm.
    for _ in 0..2 {
        run(
            &mut con,
            &[
                "RL.ALL",
                "2",
                "{t}a",
                "{t}b",
                "TOKENBUCKET",
                "100",
                "1",
                "SLIDINGLOG",
                "1",
                "1h",
                "PENALTY",
                "1m",
            ],
        )
        .unwrap();
    }
    assert_eq!(penalties(&mut con), [0, 0, 1, 1, 0, 0]);
    // Commands that take no PENALTY have no such line.
    let info = ratelimit_info(&mut con);
    for name in ["cl_throttle", "all", "acquire"] {
        assert!(!info.contains_key(&format!("{name}_penalties")), "{name}");
    }
}

/// Redis shows a module's section in `INFO everything`, `INFO modules` and
/// by its name, never in `INFO` or `INFO all` (its own help: "all: Return all
/// sections (excluding module generated ones)"), and the module API has no
/// way to ask otherwise. This pins that, so the docs' advice (ask for
/// `INFO ratelimit`, or `everything`) stays true.
#[test]
fn the_section_is_in_info_everything_modules_and_by_name_and_redis_keeps_it_out_of_info_all() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(&mut con, &["RL.TOKENBUCKET", "k", "1", "1"]);
    let info = |con: &mut redis::Connection, args: &[&str]| -> String {
        let mut cmd = redis::cmd("INFO");
        for a in args {
            cmd.arg(*a);
        }
        cmd.query(con).unwrap()
    };
    for args in [
        &["ratelimit"][..],
        &["everything"],
        &["modules"],
        &["server", "ratelimit"],
    ] {
        let text = info(&mut con, args);
        assert!(text.contains("# ratelimit\r\n"), "INFO {args:?}");
        assert!(
            text.contains("ratelimit_tokenbucket_allowed:1"),
            "INFO {args:?}"
        );
    }
    for args in [&[][..], &["all"], &["default"]] {
        let text = info(&mut con, args);
        assert!(!text.contains("ratelimit_"), "INFO {args:?}");
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tool(name: &str) -> Command {
    let found = Command::new(name).arg("--version").output();
    assert!(
        found.is_ok(),
        "{name} is missing: `make deps` installs it (Debian: prometheus-redis-exporter, prometheus)"
    );
    Command::new(name)
}

#[test]
fn the_shipped_rules_pass_promtool_check_and_their_unit_tests() {
    for args in [
        &["check", "rules", "ratelimit-rules.yml"][..],
        &["test", "rules", "ratelimit-rules.test.yml"],
    ] {
        let out = tool("promtool")
            .args(args)
            .current_dir(repo().join("monitoring"))
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("promtool {}: {said}", args.join(" "));
        assert!(out.status.success(), "promtool {args:?}: {said}");
        assert!(said.contains("SUCCESS"), "{said}");
    }
}

/// The exporter, killed on drop.
struct Exporter {
    child: Child,
    port: u16,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

impl Exporter {
    /// Debian's exporter against `server`, with the shipped script, as
    /// the user `exporter` (password `pw`).
    fn start(server: &Server, script: &Path) -> Exporter {
        let port = free_port();
        let child = tool("prometheus-redis-exporter")
            .arg("-redis.addr")
            .arg(format!("redis://127.0.0.1:{}", server.port))
            .args(["-redis.user", "exporter", "-redis.password", "pw"])
            .arg("-script")
            .arg(script)
            .arg("-web.listen-address")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let exporter = Exporter { child, port };
        wait_for("the exporter to listen", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        exporter
    }

    /// The body of `GET /metrics`.
    fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "{head}"
        );
        body.to_string()
    }
}

/// The lines of `metrics` for the script's `key`s: `redis_script_values{key="..."} n`.
fn script_value(metrics: &str, key: &str) -> Option<(String, f64)> {
    let prefix = format!("redis_script_values{{key=\"{key}\"}} ");
    metrics.lines().find_map(|l| {
        let value = l.strip_prefix(&prefix)?;
        Some((l.to_string(), value.parse().unwrap()))
    })
}

#[test]
fn the_exporter_with_the_shipped_script_publishes_each_algorithms_counters() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // One check allowed, one denied, one denied in SHADOW mode, of the
    // token bucket; a penalty of the fixed window; one wait allowed and one
    // timed out; and one check refused at maxmemory.
    // (Rates slow enough that no token comes back between two calls, and a
    // wait of 2 s that no delay between the calls can make unneeded.)
    check(&mut con, &["RL.TOKENBUCKET", "tb", "1", "0.001"]);
    check(&mut con, &["RL.TOKENBUCKET", "tb", "1", "0.001"]);
    check(&mut con, &["RL.TOKENBUCKET", "tb", "1", "0.001", "SHADOW"]);
    for _ in 0..2 {
        check(
            &mut con,
            &["RL.FIXEDWINDOW", "fw", "1", "1h", "PENALTY", "1m"],
        );
    }
    check(&mut con, &["RL.TOKENBUCKET", "w", "1", "0.5"]);
    let waited = check(
        &mut con,
        &["RL.TOKENBUCKET", "w", "1", "0.5", "BLOCK", "10000"],
    );
    assert_eq!(waited[0], 1, "allowed after its wait: {waited:?}");
    run(&mut con, &["RL.ACQUIRE", "slots", "1", "1m"]).unwrap();
    let timed_out = run(&mut con, &["RL.ACQUIRE", "slots", "1", "1m", "BLOCK", "50"]).unwrap();
    assert_eq!(text(&items(&timed_out)[0]), "0", "{timed_out:?}");
    run(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    assert!(error_of(&mut con, &["RL.GCRA", "oom", "1", "1", "1s"]).starts_with("OOM"));
    run(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();

    // The exporter's user as docs/operations.md gives it.
    let acl = "ACL SETUSER exporter on >pw +client +ping +info +config|get +cluster|info \
               +slowlog +latency +memory +select +eval +evalsha +script|load ~*";
    let words: Vec<&str> = acl.split_whitespace().collect();
    run(&mut con, &words).unwrap();
    let doc = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        doc.contains(&acl.replace(">pw", ">password")),
        "docs/operations.md gives the user this test runs the exporter as"
    );
    let exporter = Exporter::start(&server, &repo().join("monitoring/ratelimit-info.lua"));
    let metrics = exporter.metrics();
    for line in ["redis_up 1", "redis_exporter_last_scrape_error{err=\"\"} 0"] {
        assert!(metrics.lines().any(|l| l == line), "no {line}:\n{metrics}");
    }
    let mut shown = Vec::new();
    for (key, expected) in [
        ("tokenbucket_allowed", 3.0),
        ("tokenbucket_denied", 1.0),
        ("tokenbucket_shadow_denied", 1.0),
        ("tokenbucket_penalties", 0.0),
        ("tokenbucket_keys", 2.0),
        ("fixedwindow_allowed", 1.0),
        ("fixedwindow_denied", 1.0),
        ("fixedwindow_penalties", 1.0),
        ("gcra_allowed", 0.0),
        ("acquire_allowed", 1.0),
        ("acquire_denied", 1.0),
        ("concurrency_keys", 1.0),
        ("waits_allowed", 1.0),
        ("waits_timed_out", 1.0),
        ("blocked_clients", 0.0),
        ("keys", 4.0),
    ] {
        let (line, value) = script_value(&metrics, key)
            .unwrap_or_else(|| panic!("no {key} in the exporter's metrics:\n{metrics}"));
        assert_eq!(value, expected, "{line}");
        shown.push(line);
    }
    // Every field of the section reaches the exporter.
    let info = ratelimit_info(&mut con);
    for field in info.keys() {
        assert!(script_value(&metrics, field).is_some(), "{field} missing");
    }
    assert!(script_value(&metrics, "memory_bytes").is_some_and(|(_, v)| v > 0.0));
    // The OOM refusal, as Redis counts it (errorstats) and the rules read it.
    let oom = metrics
        .lines()
        .find(|l| l.starts_with("redis_errors_total{err=\"OOM\"}"))
        .unwrap_or_else(|| panic!("no OOM errors in the metrics:\n{metrics}"));
    assert!(oom.ends_with(" 1"), "{oom}");
    shown.push(oom.to_string());
    println!("{}", shown.join("\n"));
}
