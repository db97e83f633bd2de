//! What a command changed reaches replicas and the AOF as its replay
//! (`RL.APPLY`, `RL.APPLYALL`): these tests attach replicas and switch the
//! AOF on in the middle of traffic, cut replication links so that replicas
//! resume with a partial sync, and restart from the AOF, then compare every
//! key's digest and expiry with the primary's. Any effect dropped, doubled or
//! replayed differently shows as a difference.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis_ratelimit::algorithms::sliding_log::{SlidingLog, SlidingLogParams};
use redis_ratelimit::algorithms::{Algorithm, Mode, State};
use serial_test::serial;

/// Keys the traffic touches: a few dozen, so each sees many changes.
const KEYS: usize = 24;

/// Every algorithm of the registry, with parameters that keep a key for
/// hours: 100,000 per 366 days, one regained every 5 minutes.
fn algorithms() -> &'static [Spec] {
    static ALGORITHMS: std::sync::OnceLock<Vec<Spec>> = std::sync::OnceLock::new();
    ALGORITHMS.get_or_init(|| every_algorithm(100_000, 366 * 24 * HOUR_MS))
}

/// One command of the traffic mix, for the `n`th call on key number `k`.
/// Parameters keep every key alive for hours, so none expires during a test
/// (an expiry is replicated as a deletion: also fine, but it would hide a
/// key from the comparison).
fn command(k: usize, n: usize) -> Vec<String> {
    let key = format!("k{k}");
    // Every algorithm first, then redis-cell's command,
    // RL.ALL and the leases.
    let algorithms = algorithms();
    let slot = k % (algorithms.len() + 4);
    let words: Vec<String> = match slot.checked_sub(algorithms.len()) {
        None => {
            let spec = &algorithms[slot];
            let mut words = vec![spec.command.clone(), key];
            words.extend(spec.params.iter().cloned());
            words
        }
        Some(0) => vec!["CL.THROTTLE", &key, "100000", "1", "7200"]
            .into_iter()
            .map(String::from)
            .collect(),
        Some(1) => {
            // Tiers in one slot of a cluster would need a hash tag; here
            // they only need to share a server.
            let (a, b) = (format!("{key}:a"), format!("{key}:b"));
            [
                "RL.ALL",
                "2",
                &a,
                &b,
                "TOKENBUCKET",
                "1000",
                "0.01",
                "SLIDINGLOG",
                "100000",
                "2h",
            ]
            .into_iter()
            .map(String::from)
            .collect()
        }
        Some(2) => {
            // Leases with drawn ids, some released again.
            if n % 3 == 2 {
                vec!["RL.RELEASE".to_string(), key, format!("w{}", n - 1)]
            } else {
                vec![
                    "RL.ACQUIRE".to_string(),
                    key,
                    "100000".to_string(),
                    "2h".to_string(),
                    "ID".to_string(),
                    format!("w{n}"),
                ]
            }
        }
        _ => vec!["RL.ACQUIRE", &key, "100000", "2h"]
            .into_iter()
            .map(String::from)
            .collect(),
    };
    let mut words = words;
    if n % 7 == 3 && slot < algorithms.len() {
        words.extend(["COST".to_string(), "3".to_string()]);
    }
    words
}

/// Every key the traffic may have written.
fn all_keys() -> Vec<String> {
    let mut keys = Vec::new();
    for k in 0..KEYS {
        keys.push(format!("k{k}"));
        keys.push(format!("k{k}:a"));
        keys.push(format!("k{k}:b"));
    }
    keys
}

/// Clients sending the traffic mix to `port` until `stop` is set, some of
/// it in MULTI/EXEC and through EVAL. Returns how many commands they sent.
fn traffic(port: u16, stop: Arc<AtomicBool>, clients: usize) -> Vec<thread::JoinHandle<usize>> {
    (0..clients)
        .map(|c| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut con = connect_port(port).unwrap();
                let mut sent = 0;
                let mut n = c;
                while !stop.load(Ordering::Relaxed) {
                    let k = (n * 7 + c) % KEYS;
                    let words = command(k, n);
                    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
                    match n % 11 {
                        // Two checks in one transaction.
                        4 => {
                            let second = command((k + 1) % KEYS, n + 1);
                            let mut pipe = redis::pipe();
                            pipe.atomic();
                            pipe.cmd(refs[0]).arg(&refs[1..]);
                            pipe.cmd(&second[0]).arg(&second[1..]);
                            let _: redis::Value = pipe.query(&mut con).unwrap();
                        }
                        // A check from a script.
                        9 => {
                            let _: redis::Value = redis::cmd("EVAL")
                                .arg("return redis.call(unpack(ARGV))")
                                .arg(0)
                                .arg(&refs[..])
                                .query(&mut con)
                                .unwrap();
                        }
                        _ => {
                            run(&mut con, &refs).unwrap();
                        }
                    }
                    sent += 1;
                    n += clients;
                }
                sent
            })
        })
        .collect()
}

/// Runs `during` while traffic flows to `primary`, then stops the traffic.
fn with_traffic(primary: &Server, during: impl FnOnce()) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = traffic(primary.port, stop.clone(), 3);
    thread::sleep(Duration::from_millis(300));
    during();
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

/// Each key's digest and absolute expiry, as `name digest expiry` lines.
fn state_of(con: &mut redis::Connection) -> Vec<String> {
    all_keys()
        .into_iter()
        .map(|key| {
            let expiry = expiry_time(con, &key);
            format!("{key} {} {expiry}", digest_value(con, &key))
        })
        .collect()
}

/// Waits until the replica has processed everything the primary sent. (Not
/// `WAIT`: it waits only for the writes of the connection it is sent on.)
fn caught_up(primary: &mut redis::Connection, replica: &mut redis::Connection) {
    let sent = repl_offset(primary);
    wait_for("the replica to catch up", Duration::from_secs(10), || {
        repl_offset(replica) >= sent
    });
}

fn assert_same(primary: &mut redis::Connection, other: &mut redis::Connection, what: &str) {
    let (p, o) = (state_of(primary), state_of(other));
    let written = p
        .iter()
        .filter(|line| !line.contains(" 0000000000"))
        .count();
    assert!(written >= KEYS, "only {written} keys written");
    for (pl, ol) in p.iter().zip(&o) {
        assert_eq!(pl, ol, "{what}: a key differs (name digest expiry)");
    }
    let dp: String = redis::cmd("DEBUG").arg("DIGEST").query(primary).unwrap();
    let dot: String = redis::cmd("DEBUG").arg("DIGEST").query(other).unwrap();
    assert_eq!(dp, dot, "{what}: the datasets differ");
}

fn attach_during_traffic(diskless: &str) {
    let primary = Server::start(&["--repl-diskless-sync", diskless]);
    let mut p = primary.connect();
    let mut replica = None;
    let sent = with_traffic(&primary, || {
        replica = Some(Server::start_replica_of(&primary));
        thread::sleep(Duration::from_millis(500));
    });
    assert!(sent > 500, "only {sent} commands sent");
    let replica = replica.unwrap();
    let mut r = replica.connect();
    caught_up(&mut p, &mut r);
    assert_same(&mut p, &mut r, "replica");
    let applied = info_field(&mut replica.connect(), "commandstats", "cmdstat_rl.apply");
    assert!(
        applied.contains("calls="),
        "the replica ran no replay: {applied:?}"
    );
}

#[test]
#[serial]
fn a_replica_attached_during_traffic_with_a_disk_sync_holds_the_primarys_state() {
    attach_during_traffic("no");
}

#[test]
#[serial]
fn a_replica_attached_during_traffic_with_a_diskless_sync_holds_the_primarys_state() {
    attach_during_traffic("yes");
}

#[test]
#[serial]
fn a_replica_whose_link_drops_resumes_with_a_partial_sync_and_the_primarys_state() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let partial_before: i64 = info_field(&mut p, "stats", "sync_partial_ok")
        .parse()
        .unwrap();
    with_traffic(&primary, || {
        for _ in 0..3 {
            run(&mut p, &["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
            wait_for("the replica to reconnect", Duration::from_secs(10), || {
                info_field(&mut p, "replication", "connected_slaves") == "1"
            });
            thread::sleep(Duration::from_millis(200));
        }
    });
    let partial: i64 = info_field(&mut p, "stats", "sync_partial_ok")
        .parse()
        .unwrap();
    assert!(
        partial >= partial_before + 3,
        "the replica resumed with full syncs: {partial_before} -> {partial}"
    );
    let mut r = replica.connect();
    caught_up(&mut p, &mut r);
    assert_same(&mut p, &mut r, "replica after partial syncs");
}

/// Switches the AOF on in the middle of traffic, then restarts from it.
fn aof_switched_on_during_traffic(preamble: &str) {
    let mut server = Server::start(&["--aof-use-rdb-preamble", preamble]);
    let mut con = server.connect();
    with_traffic(&server, || {
        run(&mut con, &["CONFIG", "SET", "appendonly", "yes"]).unwrap();
        wait_for("the AOF rewrite", Duration::from_secs(20), || {
            info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
                && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
        });
        thread::sleep(Duration::from_millis(300));
    });
    let before = state_of(&mut con);
    // Restart: `--appendonly yes` on the command line so the server loads
    // the AOF it wrote.
    run(&mut con, &["CONFIG", "SET", "appendfsync", "always"]).unwrap();
    server.shutdown_nosave();
    server.relaunch_with(&["--appendonly", "yes"]);
    let mut con = server.connect();
    assert_eq!(
        before,
        state_of(&mut con),
        "the state reloaded from the AOF differs"
    );
}

#[test]
#[serial]
fn the_aof_switched_on_during_traffic_restores_the_same_state_with_the_rdb_preamble() {
    aof_switched_on_during_traffic("yes");
}

#[test]
#[serial]
fn the_aof_switched_on_during_traffic_restores_the_same_state_without_the_rdb_preamble() {
    aof_switched_on_during_traffic("no");
}

/// A sliding log of `entries` requests at distinct milliseconds ending at
/// `now_ms`, encoded as `RL.SETSTATE` takes it.
fn long_log(entries: u64, now_ms: i64) -> Vec<u8> {
    let params = SlidingLogParams {
        limit: (1 << 53) - 1,
        window_ms: 366 * 86_400_000,
    };
    let start = now_ms - entries as i64;
    let mut log = SlidingLog::fresh(params, start);
    for t in start..now_ms {
        let (decision, _) = log.check_stored(params, t, 1, Mode::Take);
        assert!(decision.allowed);
    }
    let mut out = Vec::new();
    log.encode(&mut out);
    out
}

fn repl_offset(con: &mut redis::Connection) -> i64 {
    info_field(con, "replication", "master_repl_offset")
        .parse()
        .unwrap()
}

/// Replication bytes per allowed check of `words`, over `checks` checks.
fn bytes_per_check(con: &mut redis::Connection, words: &[&str], checks: i64) -> i64 {
    let before = repl_offset(con);
    for _ in 0..checks {
        let reply = run(con, words).unwrap();
        let allowed: Vec<redis::Value> = redis::from_redis_value(reply).unwrap();
        assert_eq!(allowed[0], redis::Value::Int(1), "{words:?} was denied");
    }
    (repl_offset(con) - before) / checks
}

#[test]
#[serial]
fn a_check_replicates_the_same_few_bytes_whatever_the_size_of_its_state() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let now = server_time_ms(&mut p);
    let big: Vec<u8> = long_log(100_000, now);
    let _: () = redis::cmd("RL.SETSTATE")
        .arg("big")
        .arg(&big)
        .query(&mut p)
        .unwrap();
    let log = ["RL.SLIDINGLOG", "big", "9007199254740991", "366d"];
    let big_bytes = bytes_per_check(&mut p, &log, 50);
    let fresh = bytes_per_check(
        &mut p,
        &["RL.SLIDINGLOG", "new", "9007199254740991", "366d"],
        50,
    );
    println!("sliding log, bytes per check: 100k entries {big_bytes}, one entry {fresh}");
    assert!(
        big_bytes <= 80,
        "{big_bytes} bytes a check on a 100k-entry log"
    );
    assert_eq!(
        big_bytes, fresh,
        "the replay of a check does not depend on the state"
    );
    let counter = bytes_per_check(
        &mut p,
        &[
            "RL.SLIDINGCOUNTER",
            "sc",
            "9007199254740991",
            "1h",
            "PRECISION",
            "1000",
        ],
        50,
    );
    assert!(counter <= 100, "{counter} bytes a check at PRECISION 1000");
    for i in 0..2000 {
        run(
            &mut p,
            &[
                "RL.ACQUIRE",
                "leases",
                "100000",
                "1h",
                "ID",
                &format!("w{i}"),
            ],
        )
        .unwrap();
    }
    let acquire = bytes_per_check(&mut p, &["RL.ACQUIRE", "leases", "100000", "1h"], 50);
    assert!(
        acquire <= 120,
        "{acquire} bytes an acquire (a drawn id of 32 bytes included)"
    );
    let mut r = replica.connect();
    caught_up(&mut p, &mut r);
    for key in ["big", "new", "sc", "leases"] {
        assert_eq!(
            digest_value(&mut p, key),
            digest_value(&mut r, key),
            "{key}"
        );
    }
}

#[test]
fn a_client_cannot_send_a_replay() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for words in [
        &["RL.APPLY", "k", "x", "10", "1"][..],
        &["RL.APPLYALL", "x", "k", "TOKENBUCKET", "1", "1"],
    ] {
        let error = error_of(&mut con, words);
        assert!(
            error.starts_with("ERR this command is how replicas and AOF files receive changes"),
            "{words:?}: {error}"
        );
    }
    assert!(!exists(&mut con, "k"));
}

/// The replay pins the primary's time: a replica that replays checks well
/// after the primary ran them (here held up for more than a window) reaches
/// the same state, where re-running the command on its own clock would put
/// the requests in a later window.
#[test]
#[serial]
fn a_replay_runs_at_the_primarys_time_not_the_replicas() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let replica_port = replica.port;
    let asleep = thread::spawn(move || {
        let mut r = connect_port(replica_port).unwrap();
        run(&mut r, &["DEBUG", "SLEEP", "1.5"]).unwrap();
    });
    thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(check(&mut p, &["RL.FIXEDWINDOW", "fw", "10", "1s"])[0], 1);
    }
    asleep.join().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "the replica was not held up"
    );
    let mut r = replica.connect();
    caught_up(&mut p, &mut r);
    assert_eq!(digest_value(&mut p, "fw"), digest_value(&mut r, "fw"));
    assert_eq!(expiry_time(&mut p, "fw"), expiry_time(&mut r, "fw"));
}
