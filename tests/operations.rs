//! Routine operations with clients waiting (`BLOCK`): pauses, failovers and
//! shutdowns keep the server alive and its replicas equal, nothing is served
//! or written while writes are paused, and every waiter gets an answer; a
//! waited key that is deleted, expires, is overwritten or flushed wakes its
//! waiters, decided against what it holds now; a waiter that leaves frees
//! its memory at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use serial_test::serial;

/// A reply, and when it came (from the start of the call).
type Answer = (redis::RedisResult<Value>, Duration);

/// Sends `words` on a connection of its own.
fn send(port: u16, words: &[&str]) -> JoinHandle<Answer> {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    thread::spawn(move || {
        let start = Instant::now();
        let mut con = connect_port(port).unwrap();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let reply = run(&mut con, &refs);
        (reply, start.elapsed())
    })
}

fn first_integer(reply: &redis::RedisResult<Value>) -> i64 {
    match reply {
        Ok(Value::Array(items)) => match items.first() {
            Some(Value::Int(i)) => *i,
            other => panic!("not an integer: {other:?}"),
        },
        other => panic!("not an array: {other:?}"),
    }
}

fn blocked_clients(con: &mut redis::Connection) -> i64 {
    info_field(con, "ratelimit", "ratelimit_blocked_clients")
        .parse()
        .unwrap()
}

/// Waits until `n` clients wait on the server.
fn blocked(con: &mut redis::Connection, n: i64) {
    wait_for("clients to block", Duration::from_secs(10), || {
        blocked_clients(con) == n
    });
}

/// Empties the one-token bucket `key`, refilled `rate` a second, then sends
/// a request that waits for its token (`BLOCK block_ms`), returned once it
/// waits.
fn waiter_on_empty_bucket(
    port: u16,
    con: &mut redis::Connection,
    key: &str,
    rate: &str,
    block_ms: &str,
) -> JoinHandle<Answer> {
    check(con, &["RL.TOKENBUCKET", key, "1", rate]);
    let waiter = send(port, &["RL.TOKENBUCKET", key, "1", rate, "BLOCK", block_ms]);
    blocked(con, 1);
    waiter
}

fn digest(con: &mut redis::Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(con).unwrap()
}

/// Waits until `replica` has everything `primary` sent, then compares their
/// datasets.
fn assert_same_dataset(primary: &mut redis::Connection, replica: &mut redis::Connection) {
    let sent: i64 = info_field(primary, "replication", "master_repl_offset")
        .parse()
        .unwrap();
    wait_for("the replica to catch up", Duration::from_secs(10), || {
        info_field(replica, "replication", "master_repl_offset")
            .parse::<i64>()
            .unwrap()
            >= sent
    });
    assert_eq!(digest(primary), digest(replica), "the replica differs");
}

/// A waiter whose turn comes while writes are paused is served when the
/// pause ends: nothing changes during the pause (no crash, though the
/// server has an AOF, and replicas when asked), and its reply comes after it.
fn paused_waiter(mode: &str, with_replica: bool) {
    let primary = Server::start(&["--appendonly", "yes"]);
    let replica = with_replica.then(|| Server::start_replica_of(&primary));
    let mut con = primary.connect();
    // Empty now, one token again 200 ms later.
    let waiter = waiter_on_empty_bucket(primary.port, &mut con, "k", "5", "10000");
    let before = digest(&mut con);
    run(&mut con, &["CLIENT", "PAUSE", "1500", mode]).unwrap();
    let paused_at = Instant::now();
    // The waiter's turn (200 ms) comes and goes during the pause.
    sleep(Duration::from_millis(700));
    let mut primary = primary;
    assert!(primary.is_alive(), "the server died during the pause");
    if mode == "WRITE" {
        // Reads are served during a write pause: the dataset has not changed.
        assert_eq!(digest(&mut con), before, "a paused dataset changed");
    }
    let (reply, _) = waiter.join().unwrap();
    let served_after = paused_at.elapsed();
    assert_eq!(first_integer(&reply), 1, "the waiter was not served");
    assert!(
        served_after >= Duration::from_millis(1400),
        "served {served_after:?} after the pause began, before its end (1.5 s)"
    );
    assert!(primary.is_alive(), "the server died after the pause");
    assert_ne!(
        digest(&mut con),
        before,
        "the waiter's request took nothing"
    );
    if let Some(replica) = replica {
        assert_same_dataset(&mut con, &mut replica.connect());
    }
}

#[test]
fn a_waiter_due_during_client_pause_write_is_served_when_the_pause_ends() {
    paused_waiter("WRITE", false);
}

#[test]
#[serial]
fn a_waiter_due_during_client_pause_all_is_served_when_the_pause_ends() {
    paused_waiter("ALL", true);
}

/// Keys whose waiters are served every few milliseconds (50 a second each),
/// so that some turn falls inside any pause: `n` waiters on each of `keys`.
fn busy_waiters(port: u16, keys: &[&str], n: usize, block_ms: &str) -> Vec<JoinHandle<Answer>> {
    let mut con = connect_port(port).unwrap();
    for key in keys {
        check(&mut con, &["RL.TOKENBUCKET", key, "1", "50"]);
    }
    let waiters: Vec<_> = keys
        .iter()
        .flat_map(|key| {
            (0..n).map(move |_| send(port, &["RL.TOKENBUCKET", key, "1", "50", "BLOCK", block_ms]))
        })
        .collect();
    waiters
}

/// Every waiter got an answer: allowed, or an error that says one of
/// `errors` (any error when `None`, as a connection a shutdown closed).
fn answered(waiters: Vec<JoinHandle<Answer>>, errors: Option<&[&str]>) {
    for waiter in waiters {
        let (reply, _) = waiter.join().unwrap();
        match (&reply, errors) {
            (Ok(_), _) => assert_eq!(first_integer(&reply), 1),
            (Err(_), None) => {}
            (Err(e), Some(errors)) => assert!(
                errors.iter().any(|error| e.to_string().contains(error)),
                "a waiter got {e}"
            ),
        }
    }
}

/// A long-lived key, to compare across servers (the busy keys expire).
fn lasting_key(con: &mut redis::Connection) {
    check(con, &["RL.SLIDINGLOG", "lasting", "5", "1h"]);
    check(con, &["RL.FIXEDWINDOW", "window", "5", "1h", "COST", "2"]);
}

#[test]
#[serial]
fn failover_with_clients_waiting_keeps_both_servers_alive_and_equal() {
    let mut primary = Server::start(&["--appendonly", "yes"]);
    let mut replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    lasting_key(&mut p);
    let waiters = busy_waiters(primary.port, &["a", "b", "c"], 20, "20000");
    sleep(Duration::from_millis(100));
    run(&mut p, &["FAILOVER"]).unwrap();
    let mut r = replica.connect();
    wait_for("the failover", Duration::from_secs(15), || {
        info_field(&mut r, "replication", "role") == "master"
    });
    answered(waiters, Some(&["UNBLOCKED"]));
    assert!(primary.is_alive(), "the old primary died");
    assert!(replica.is_alive(), "the new primary died");
    let mut p = primary.connect();
    wait_for("the old primary to follow", Duration::from_secs(15), || {
        info_field(&mut p, "replication", "master_link_status") == "up"
    });
    assert_same_dataset(&mut r, &mut p);
    assert_eq!(
        digest_value(&mut r, "lasting"),
        digest_value(&mut p, "lasting")
    );
}

#[test]
#[serial]
fn shutdown_with_a_replica_aof_and_clients_waiting_exits_cleanly() {
    let mut primary = Server::start(&["--appendonly", "yes"]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    lasting_key(&mut p);
    let waiters = busy_waiters(primary.port, &["a", "b"], 20, "20000");
    sleep(Duration::from_millis(100));
    let mut r = replica.connect();
    // SHUTDOWN pauses writes until the replica has everything, then exits.
    let _ = run(&mut p, &["SHUTDOWN"]);
    let status = primary
        .wait_exit(Duration::from_secs(20))
        .expect("the server did not exit");
    assert!(status.success(), "the server exited with {status}");
    // Served, or told the connection closed: answered either way.
    answered(waiters, None);
    let on_replica = (
        digest_value(&mut r, "lasting"),
        digest_value(&mut r, "window"),
    );
    // Restarted from its AOF: what the replica holds.
    primary.launch();
    let mut p = primary.connect();
    assert_eq!(
        (
            digest_value(&mut p, "lasting"),
            digest_value(&mut p, "window")
        ),
        on_replica
    );
}

#[test]
#[serial]
fn cluster_failover_with_clients_waiting_keeps_both_nodes_alive_and_equal() {
    let mut cluster = Cluster::start(3, 1, &[]);
    let from = cluster.running()[0];
    let owner = cluster.primary_of_key(from, "{w}a");
    let follower = cluster.replicas_of(owner)[0];
    let port = cluster.nodes[owner].port;
    let mut p = cluster.nodes[owner].connect();
    check(&mut p, &["RL.SLIDINGLOG", "{w}lasting", "5", "1h"]);
    let waiters = busy_waiters(port, &["{w}a", "{w}b"], 20, "20000");
    sleep(Duration::from_millis(100));
    let mut f = cluster.nodes[follower].connect();
    run(&mut f, &["CLUSTER", "FAILOVER"]).unwrap();
    wait_for("the cluster failover", Duration::from_secs(20), || {
        info_field(&mut f, "replication", "role") == "master"
    });
    // Unblocked when the node became a replica, or redirected.
    answered(waiters, Some(&["UNBLOCKED", "MOVED"]));
    assert!(cluster.nodes[owner].is_alive(), "the old primary died");
    let mut p = cluster.nodes[owner].connect();
    wait_for("the old primary to follow", Duration::from_secs(20), || {
        info_field(&mut p, "replication", "master_link_status") == "up"
    });
    assert_same_dataset(&mut f, &mut p);
    assert_eq!(
        digest_value(&mut f, "{w}lasting"),
        digest_value(&mut p, "{w}lasting")
    );
}

/// What a waiter on a lease key held by someone else gets after `op`.
fn waiter_after(op: &[&str], before: &[&[&str]]) -> redis::RedisResult<Value> {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["RL.ACQUIRE", "q", "1", "30s", "ID", "holder"]).unwrap();
    for words in before {
        run(&mut con, words).unwrap();
    }
    let waiter = send(
        server.port,
        &["RL.ACQUIRE", "q", "1", "30s", "ID", "w", "BLOCK", "20000"],
    );
    blocked(&mut con, 1);
    let since = Instant::now();
    run(&mut con, op).unwrap();
    let (reply, _) = waiter.join().unwrap();
    // Woken by `op`, not by the end of its wait (20 s).
    let waited = since.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "answered {waited:?} after {op:?}"
    );
    reply
}

#[test]
fn a_waited_key_that_leaves_the_keyspace_wakes_its_waiter_who_takes_it_fresh() {
    let cases: [(&[&str], &[&[&str]]); 8] = [
        (&["DEL", "q"], &[]),
        (&["UNLINK", "q"], &[]),
        (&["PEXPIRE", "q", "20"], &[]),
        (&["FLUSHDB"], &[]),
        (&["FLUSHALL"], &[]),
        (&["SWAPDB", "0", "1"], &[]),
        (&["MOVE", "q", "1"], &[]),
        (&["FLUSHALL", "ASYNC"], &[]),
    ];
    for (op, before) in cases {
        let reply = waiter_after(op, before);
        assert_eq!(first_integer(&reply), 1, "after {op:?}: {reply:?}");
    }
}

#[test]
fn a_waited_key_overwritten_by_another_type_answers_its_waiter_wrongtype() {
    let cases: [(&[&str], &[&[&str]]); 3] = [
        (&["SET", "q", "x"], &[]),
        (&["RENAME", "s", "q"], &[&["SET", "s", "x"]]),
        (&["SORT", "l", "STORE", "q"], &[&["RPUSH", "l", "1"]]),
    ];
    for (op, before) in cases {
        let reply = waiter_after(op, before);
        let error = reply.expect_err("a waiter on a string was allowed");
        assert!(
            error.to_string().contains("WRONGTYPE"),
            "after {op:?}: {error}"
        );
    }
}

#[test]
fn a_state_set_over_a_waited_key_wakes_its_waiter() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Empty, and a token only 100 s later.
    let waiter = waiter_on_empty_bucket(server.port, &mut con, "tb", "0.01", "0");
    // A full bucket, from RL.SETSTATE and from RESTORE.
    let now = server_time_ms(&mut con);
    let mut full = vec![1u8];
    full.extend_from_slice(&1u64.to_le_bytes());
    full.extend_from_slice(&0.01f64.to_le_bytes());
    full.extend_from_slice(&1.0f64.to_le_bytes());
    full.extend_from_slice(&now.to_le_bytes());
    let ok: String = redis::cmd("RL.SETSTATE")
        .arg("tb")
        .arg(&full)
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    let (reply, waited) = waiter.join().unwrap();
    assert_eq!(first_integer(&reply), 1);
    // Woken by the new state, not at its old turn (100 s).
    assert!(waited < Duration::from_secs(30), "served after {waited:?}");

    check(&mut con, &["RL.TOKENBUCKET", "fresh", "5", "0.01"]);
    let dumped = dump(&mut con, "fresh").unwrap();
    // Empty again (the waiter took the token set).
    let waiter = waiter_on_empty_bucket(server.port, &mut con, "tb", "0.01", "0");
    let ok: String = redis::cmd("RESTORE")
        .arg("tb")
        .arg(0)
        .arg(dumped)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    let (reply, waited) = waiter.join().unwrap();
    assert_eq!(first_integer(&reply), 1);
    // Woken by the new state, not at its old turn (100 s).
    assert!(waited < Duration::from_secs(30), "served after {waited:?}");
}

/// `RL.SETSTATE` of a full bucket over a waited bucket wakes its waiter at
/// once, whatever the key's expiry becomes: kept (`KEEPTTL`: the waiter's
/// hold, at its turn 1000 s away), an hour away (`PXAT`), or in its band
/// (a second away), and over the key's penalized form (its other type).
/// Before, a state put in place of one of the key's own type told the
/// waiters nothing: only the key's expiry woke them, here 1000 s later.
#[test]
fn a_state_set_in_place_wakes_its_waiter_whatever_its_expiry() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let full = |now: i64| {
        let mut full = vec![1u8];
        full.extend_from_slice(&1u64.to_le_bytes());
        full.extend_from_slice(&0.001f64.to_le_bytes());
        full.extend_from_slice(&1.0f64.to_le_bytes());
        full.extend_from_slice(&now.to_le_bytes());
        full
    };
    for (case, penalized) in [
        ("KEEPTTL", false),
        ("PXAT", false),
        ("", false),
        ("KEEPTTL", true),
    ] {
        let key = format!("tb:{case}:{penalized}");
        // Empty: its next token 1000 s away.
        check(&mut con, &["RL.TOKENBUCKET", &key, "1", "0.001"]);
        if penalized {
            // Its penalized form (a denial with PENALTY), the penalty short.
            let denied = check(
                &mut con,
                &["RL.TOKENBUCKET", &key, "1", "0.001", "PENALTY", "1ms"],
            );
            assert_eq!(denied[0], 0);
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
            assert_eq!(kind, "rp_tokbkt", "{case}");
        }
        let waiter = send(
            server.port,
            &["RL.TOKENBUCKET", &key, "1", "0.001", "BLOCK", "0"],
        );
        blocked(&mut con, 1);
        let now = server_time_ms(&mut con);
        let mut set = redis::cmd("RL.SETSTATE");
        set.arg(&key).arg(full(now));
        match case {
            "PXAT" => drop(set.arg("PXAT").arg(now + 3_600_000)),
            "KEEPTTL" => drop(set.arg("KEEPTTL")),
            _ => {}
        }
        let ok: String = set.query(&mut con).unwrap();
        assert_eq!(ok, "OK");
        // Answered, long before its turn or any expiry (blocked() gives up
        // after 10 s).
        blocked(&mut con, 0);
        let (reply, _) = waiter.join().unwrap();
        assert_eq!(first_integer(&reply), 1, "{case} {penalized}: {reply:?}");
        // It took the token set.
        let peek = check(&mut con, &["RL.TOKENBUCKET", &key, "1", "0.001", "PEEK"]);
        assert_eq!(peek[0], 0, "{case} {penalized}");
    }
}

#[test]
#[serial]
fn waiters_that_time_out_behind_a_stuck_one_free_their_memory() {
    let server = Server::start(&["--hz", "100", "--slowlog-log-slower-than", "-1"]);
    let mut con = server.connect();
    run(&mut con, &["RL.ACQUIRE", "q", "1", "1h", "ID", "holder"]).unwrap();
    // The first in the queue waits for as long as it takes.
    let front = send(
        server.port,
        &["RL.ACQUIRE", "q", "1", "1h", "ID", "front", "BLOCK", "0"],
    );
    blocked(&mut con, 1);
    let time_out_behind = |threads: usize, each: usize| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let port = server.port;
                thread::spawn(move || {
                    let mut con = connect_port(port).unwrap();
                    for i in 0..each {
                        let id = format!("w{t}-{i}");
                        let reply = run(
                            &mut con,
                            &["RL.ACQUIRE", "q", "1", "1h", "ID", &id, "BLOCK", "1"],
                        );
                        assert_eq!(first_integer(&reply), 0);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    };
    let settled = |con: &mut redis::Connection| {
        wait_for("the clients to leave", Duration::from_secs(10), || {
            info_field(con, "clients", "connected_clients") == "2"
        });
        blocked(con, 1);
        info_field(con, "memory", "used_memory")
            .parse::<i64>()
            .unwrap()
    };
    // Once first, so that what Redis itself keeps after a client is counted.
    time_out_behind(40, 5);
    let baseline = settled(&mut con);
    time_out_behind(40, 250);
    let after = settled(&mut con);
    let growth = after - baseline;
    println!("used_memory {baseline} -> {after} after 10,000 waiters timed out");
    assert!(
        growth * 100 <= baseline,
        "10,000 waiters that left kept {growth} B (baseline {baseline} B)"
    );
    // The key goes: the stuck waiter takes it fresh.
    run(&mut con, &["DEL", "q"]).unwrap();
    let (reply, _) = front.join().unwrap();
    assert_eq!(first_integer(&reply), 1);
}
