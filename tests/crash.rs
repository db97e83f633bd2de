//! Crash recovery: clients drive traffic at token buckets, the server is
//! killed with SIGKILL in the middle of it, restarted on the same directory,
//! and what it remembers is compared with the replies the clients saw.
//!
//! The buckets are large (`CAPACITY`) and refill one token every ~3 hours,
//! so `capacity - remaining` (read with `PEEK`, which takes nothing) is the
//! number of requests the server counted. A client has at most one request
//! in flight, so at the kill up to `CLIENTS` requests may have been counted
//! by the server without the client seeing the reply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serial_test::serial;

const CAPACITY: i64 = 1_000_000;
const RATE: &str = "0.0001";
const KEYS: usize = 16;
const CLIENTS: usize = 4;

fn key(i: usize) -> String {
    format!("bucket:{i}")
}

/// Clients taking one token at a time from the buckets, round robin, each
/// counting the allowed replies it saw per key, until told to stop or the
/// server goes away.
struct Traffic {
    allowed: Arc<Vec<AtomicI64>>,
    stop: Arc<AtomicBool>,
    clients: Vec<thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(port: u16) -> Traffic {
        let allowed: Arc<Vec<AtomicI64>> = Arc::new((0..KEYS).map(|_| AtomicI64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..CLIENTS)
            .map(|c| {
                let (allowed, stop) = (allowed.clone(), stop.clone());
                thread::spawn(move || {
                    let mut con = connect_port(port).unwrap();
                    let cap = CAPACITY.to_string();
                    for n in c.. {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let k = n % KEYS;
                        match run(&mut con, &["RL.TOKENBUCKET", &key(k), &cap, RATE]) {
                            Ok(reply) => {
                                let reply: Vec<i64> = redis::from_redis_value(reply).unwrap();
                                assert_eq!(reply[0], 1, "a bucket ran dry: {reply:?}");
                                allowed[k].fetch_add(1, Ordering::SeqCst);
                            }
                            // The server was killed: anything else is a bug.
                            Err(e) => {
                                assert!(e.is_io_error() || e.is_connection_dropped(), "{e}");
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        Traffic {
            allowed,
            stop,
            clients,
        }
    }

    fn total(&self) -> i64 {
        self.allowed.iter().map(|a| a.load(Ordering::SeqCst)).sum()
    }

    /// Waits until the clients have seen `more` allowed replies beyond now.
    fn wait_for_more(&self, more: i64) {
        let target = self.total() + more;
        wait_for("traffic", Duration::from_secs(30), || {
            self.total() >= target
        });
    }

    /// Stops the clients (after their request in flight, if the server is
    /// up) and returns the allowed replies they saw per key.
    fn finish(self) -> Vec<i64> {
        self.stop.store(true, Ordering::SeqCst);
        for client in self.clients {
            client.join().unwrap();
        }
        self.allowed
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect()
    }
}

/// Tokens taken from each bucket as the server remembers them.
fn taken(server: &Server) -> Vec<i64> {
    let mut con = server.connect();
    let cap = CAPACITY.to_string();
    (0..KEYS)
        .map(|k| CAPACITY - check(&mut con, &["RL.TOKENBUCKET", &key(k), &cap, RATE, "PEEK"])[2])
        .collect()
}

/// Kills the server while `traffic` runs, restarts it on the same directory,
/// and returns what the clients saw allowed and what the server remembers.
fn kill_and_restart(server: &mut Server, traffic: Traffic) -> (Vec<i64>, Vec<i64>) {
    server.kill();
    let seen = traffic.finish();
    let start = Instant::now();
    server.launch();
    println!("restarted in {:?}", start.elapsed());
    (seen, taken(server))
}

/// AOF with fsync on every write: the server replies only after the write is
/// in the file, so every allowed reply a client saw is remembered, and at
/// most the requests in flight at the kill are counted without being seen.
fn aof_remembers_every_allowed_request_across_a_kill(preamble: &str) {
    let mut server = Server::start(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]);
    let traffic = Traffic::start(server.port);
    traffic.wait_for_more(2000);
    // A rewrite under traffic: the base file is rebuilt (as RDB, or as
    // RL.SETSTATE commands without the preamble), the writes meanwhile go to
    // a new incremental file.
    let mut con = server.connect();
    run(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_for("the AOF rewrite", Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
    });
    assert_eq!(
        info_field(&mut con, "persistence", "aof_last_bgrewrite_status"),
        "ok"
    );
    traffic.wait_for_more(2000);
    let (seen, remembered) = kill_and_restart(&mut server, traffic);

    let (seen_total, remembered_total): (i64, i64) = (seen.iter().sum(), remembered.iter().sum());
    println!("allowed replies seen: {seen_total}; requests remembered: {remembered_total}");
    for k in 0..KEYS {
        assert!(
            remembered[k] >= seen[k],
            "{}: {} allowed replies seen, {} remembered",
            key(k),
            seen[k],
            remembered[k]
        );
    }
    assert!(
        remembered_total - seen_total <= CLIENTS as i64,
        "{remembered_total} remembered, but only {seen_total} seen and {CLIENTS} in flight"
    );
}

#[test]
#[serial(heavy)]
fn aof_always_remembers_every_allowed_request_across_a_kill() {
    aof_remembers_every_allowed_request_across_a_kill("yes");
}

#[test]
#[serial(heavy)]
fn aof_always_without_rdb_preamble_remembers_every_allowed_request_across_a_kill() {
    aof_remembers_every_allowed_request_across_a_kill("no");
}

/// Traffic, then a quiet moment with a snapshot (so the clients saw the
/// reply to everything in it), then traffic again until `kill_when` holds.
/// Returns the allowed replies seen before the snapshot, in all, and what
/// the restarted server remembers.
fn snapshot_then_kill_mid_traffic(
    server: &mut Server,
    mut kill_when: impl FnMut() -> bool,
) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let traffic = Traffic::start(server.port);
    traffic.wait_for_more(2000);
    let before_snapshot = traffic.finish();
    let mut con = server.connect();
    run(&mut con, &["BGSAVE"]).unwrap();
    wait_for("the snapshot", Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "rdb_bgsave_in_progress") == "0"
    });
    assert_eq!(
        info_field(&mut con, "persistence", "rdb_last_bgsave_status"),
        "ok"
    );
    let traffic = Traffic::start(server.port);
    traffic.wait_for_more(2000);
    wait_for(
        "the moment to kill",
        Duration::from_secs(20),
        &mut kill_when,
    );
    let (after_snapshot, remembered) = kill_and_restart(server, traffic);
    let seen: Vec<i64> = (0..KEYS)
        .map(|k| before_snapshot[k] + after_snapshot[k])
        .collect();
    println!(
        "allowed replies seen before the snapshot: {}, in all: {}; requests remembered: {}",
        before_snapshot.iter().sum::<i64>(),
        seen.iter().sum::<i64>(),
        remembered.iter().sum::<i64>()
    );
    (before_snapshot, seen, remembered)
}

/// RDB only, no automatic snapshot: the restart loads the last snapshot,
/// exactly. Everything allowed after it is forgotten, so those requests are
/// allowed again: the loss is the traffic since the last snapshot.
#[test]
#[serial(heavy)]
fn rdb_only_forgets_exactly_what_was_allowed_after_the_last_snapshot() {
    let mut server = Server::start(&["--appendonly", "no", "--save", ""]);
    let (before_snapshot, seen, remembered) = snapshot_then_kill_mid_traffic(&mut server, || true);
    assert_eq!(
        remembered, before_snapshot,
        "the restart should hold the snapshot's state"
    );
    assert!(seen.iter().sum::<i64>() > remembered.iter().sum::<i64>());
}

/// RDB only with a snapshot every second under traffic: the restart holds
/// the last snapshot, taken at some moment we do not know exactly, so what it
/// remembers lies between the quiet snapshot we took and the crash: never
/// less than the quiet snapshot (never more permissive than an older
/// snapshot), never more than the clients saw plus the requests in flight.
/// Since an automatic snapshot is only taken after a change, one taken after
/// ours remembers strictly more than ours.
#[test]
#[serial(heavy)]
fn rdb_with_snapshots_every_second_restarts_between_the_last_snapshot_and_the_crash() {
    // Automatic snapshots are turned on only once ours is taken: one
    // running when we ask would refuse our BGSAVE, and one taken before ours
    // would make the count below wrong.
    let mut server = Server::start(&["--appendonly", "no", "--save", ""]);
    let mut con = server.connect();
    let mut saves_with_ours = None;
    let mut saves_after_ours = None;
    let (before_snapshot, seen, remembered) = snapshot_then_kill_mid_traffic(&mut server, || {
        let saves: i64 = info_field(&mut con, "persistence", "rdb_saves")
            .parse()
            .unwrap();
        let Some(with_ours) = saves_with_ours else {
            run(&mut con, &["CONFIG", "SET", "save", "1 1"]).unwrap();
            saves_with_ours = Some(saves);
            return false;
        };
        // Wait for an automatic snapshot after ours, finished.
        let in_progress = info_field(&mut con, "persistence", "rdb_bgsave_in_progress") == "1";
        if saves > with_ours && !in_progress {
            saves_after_ours = Some(saves - with_ours);
            true
        } else {
            false
        }
    });
    println!("automatic snapshots after ours: {saves_after_ours:?}");
    for k in 0..KEYS {
        assert!(
            before_snapshot[k] <= remembered[k],
            "{}: the restart is more permissive than a snapshot",
            key(k)
        );
    }
    let (older, newest, seen_total): (i64, i64, i64) = (
        before_snapshot.iter().sum(),
        remembered.iter().sum(),
        seen.iter().sum(),
    );
    assert!(newest > older, "the automatic snapshot was not loaded");
    assert!(
        newest <= seen_total + CLIENTS as i64,
        "{newest} remembered, {seen_total} seen"
    );
}
