//! The load `make test-valgrind` puts on servers running under valgrind's
//! memcheck (scripts/memcheck.sh): the waiting clients' paths (`BLOCK`) at
//! their boundary, late event loops, the operations of tests/block.rs and
//! tests/operations.rs, and checks by a policy's name through its changes.
//! The verdict is memcheck's log, read by scripts/memcheck_report.py; these
//! tests fail on what a client sees: a server that died or hung, a waiter
//! never answered.
//!
//! Ignored in `cargo test`: run through `make test-valgrind`, which points
//! `RL_SERVER` at scripts/memcheck-server.sh. Without it they run against a
//! plain server (a quick way to try the driver itself).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// How long a client waits for any reply before it counts the request as
/// never answered (the server is 20-50 times slower under memcheck, and a
/// reply lost by a double unblock never comes).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The boundary load's length: `MEMCHECK_LOAD_S` seconds, or 30.
fn load_seconds() -> u64 {
    std::env::var("MEMCHECK_LOAD_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// A connection that gives up on a reply after `REPLY_TIMEOUT`.
fn client(port: u16) -> redis::Connection {
    let con = connect_port(port).unwrap();
    con.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    con
}

/// Sends `words` on a connection of its own; the reply, or the error (a
/// read that timed out reads "timed out" / "would block").
fn send(port: u16, words: &[&str]) -> JoinHandle<redis::RedisResult<Value>> {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    thread::spawn(move || {
        let mut con = client(port);
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        run(&mut con, &refs)
    })
}

fn first_integer(reply: &Value) -> Option<i64> {
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        },
        _ => None,
    }
}

/// Whether an error is a reply that never came (as opposed to an error
/// reply from the server, such as UNBLOCKED or WRONGTYPE).
fn never_answered(error: &redis::RedisError) -> bool {
    error.is_timeout() || error.is_io_error() || error.is_connection_dropped()
}

fn blocked_clients(con: &mut redis::Connection) -> i64 {
    info_field(con, "ratelimit", "ratelimit_blocked_clients")
        .parse()
        .unwrap()
}

/// Waits until `n` clients wait on the server.
fn blocked(con: &mut redis::Connection, n: i64) {
    wait_for("clients to block", REPLY_TIMEOUT, || {
        blocked_clients(con) == n
    });
}

/// The id (`CLIENT LIST`) of the client whose last command was `cmd`.
fn client_id(con: &mut redis::Connection, cmd: &str) -> String {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    list.lines()
        .find(|l| l.contains(&format!("cmd={cmd}")))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .unwrap()
        .to_string()
}

/// Stops the server with `SHUTDOWN NOSAVE`, so that memcheck writes its leak
/// summary (a killed server writes none), and fails if it died before.
fn stop(mut server: Server, what: &str) {
    assert!(server.is_alive(), "the server died during {what}");
    let _ = run(&mut client(server.port), &["SHUTDOWN", "NOSAVE"]);
    let status = server
        .wait_exit(REPLY_TIMEOUT)
        .expect("the server did not exit");
    // Exit code 0: memcheck's --error-exitcode turns any error into another.
    assert!(
        status.success(),
        "the server exited with {status} after {what}"
    );
}

#[derive(Default)]
struct Tally {
    allowed: AtomicU64,
    denied: AtomicU64,
    never_answered: AtomicU64,
}

/// The reproduction: 8 clients, each on fresh keys in a loop, take
/// the only token of a bucket refilled 20 a second, then wait exactly as long
/// as the next one takes (`BLOCK 50`): the key's timer serves the waiter in
/// the event-loop turn in which Redis finds its deadline passed.
#[test]
#[ignore]
fn boundary_load_eight_clients_waiting_exactly_as_long_as_the_token_takes() {
    let server = Server::start(&[]);
    let seconds = load_seconds();
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let port = server.port;
            let tally = Arc::clone(&tally);
            thread::spawn(move || {
                let mut con = client(port);
                let start = Instant::now();
                let mut i = 0u64;
                while start.elapsed() < Duration::from_secs(seconds) {
                    let key = format!("boundary:{c}:{i}");
                    i += 1;
                    let take = run(&mut con, &["RL.TOKENBUCKET", &key, "1", "20"]);
                    let wait = take.and_then(|_| {
                        run(
                            &mut con,
                            &["RL.TOKENBUCKET", &key, "1", "20", "BLOCK", "50"],
                        )
                    });
                    match wait {
                        Ok(reply) if first_integer(&reply) == Some(1) => &tally.allowed,
                        Ok(_) => &tally.denied,
                        Err(_) => {
                            tally.never_answered.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                    .fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let (allowed, denied, lost) = (
        tally.allowed.load(Ordering::SeqCst),
        tally.denied.load(Ordering::SeqCst),
        tally.never_answered.load(Ordering::SeqCst),
    );
    let mut server = server;
    let state = if server.is_alive() { "running" } else { "dead" };
    println!("boundary load, {seconds} s: {allowed} waits allowed, {denied} timed out, {lost} clients never answered; the server is {state}");
    assert_eq!(lost, 0, "clients never answered; the server is {state}");
    assert!(allowed + denied > 0, "no wait was served");
    stop(server, "the boundary load");
}

/// The boundary made certain: 40 ms into a `BLOCK 100` wait (its token is
/// due at 100 ms too), another client stops the event loop for 120 ms
/// (`DEBUG SLEEP 0.12`), so the token's timer and the deadline both fall due
/// in the turn after it.
#[test]
#[ignore]
fn a_late_event_loop_at_a_waiters_deadline() {
    let mut server = Server::start(&[]);
    let mut con = client(server.port);
    let rounds = std::env::var("MEMCHECK_SLEEP_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    let (mut allowed, mut denied) = (0, 0);
    for round in 0..rounds {
        let key = format!("late:{round}");
        check(&mut con, &["RL.TOKENBUCKET", &key, "1", "10"]);
        let waiter = send(
            server.port,
            &["RL.TOKENBUCKET", &key, "1", "10", "BLOCK", "100"],
        );
        sleep(Duration::from_millis(40));
        run(&mut con, &["DEBUG", "SLEEP", "0.12"]).unwrap();
        match waiter.join().unwrap() {
            Ok(reply) if first_integer(&reply) == Some(1) => allowed += 1,
            Ok(_) => denied += 1,
            Err(e) => {
                let state = if server.is_alive() { "running" } else { "dead" };
                panic!("round {round} ({allowed} allowed, {denied} timed out before): the waiter got {e}; the server is {state}")
            }
        }
    }
    println!("DEBUG SLEEP at the deadline, {rounds} rounds: {allowed} allowed, {denied} timed out");
    stop(server, "the DEBUG SLEEP rounds");
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
) -> JoinHandle<redis::RedisResult<Value>> {
    check(con, &["RL.TOKENBUCKET", key, "1", rate]);
    let waiter = send(port, &["RL.TOKENBUCKET", key, "1", rate, "BLOCK", block_ms]);
    blocked(con, 1);
    waiter
}

/// A reply that came, whatever it says.
fn answered(
    waiter: JoinHandle<redis::RedisResult<Value>>,
    what: &str,
) -> redis::RedisResult<Value> {
    let reply = waiter.join().unwrap();
    if let Err(e) = &reply {
        assert!(!never_answered(e), "{what}: never answered ({e})");
    }
    reply
}

/// The operations of tests/block.rs and tests/operations.rs on one server:
/// pauses with waiters, `CLIENT UNBLOCK`, `CLIENT KILL` of a waiter, waited
/// keys deleted, expired, flushed and overwritten, leases released and run
/// out, `RL.ALL`, waiters timing out behind a stuck one; then `SHUTDOWN`
/// with clients waiting.
#[test]
#[ignore]
fn operations_with_clients_waiting() {
    let mut server = Server::start(&["--appendonly", "yes"]);
    let port = server.port;
    let mut con = client(port);

    // Served when a write pause ends; timed out during one, after its token
    // was due. The token is due 1 s after the bucket is emptied, time enough
    // for the waiter to arrive on a server under memcheck.
    for block_ms in ["10000", "1200"] {
        let waiter = waiter_on_empty_bucket(port, &mut con, "paused", "1", block_ms);
        run(&mut con, &["CLIENT", "PAUSE", "2000", "WRITE"]).unwrap();
        answered(waiter, "a waiter during CLIENT PAUSE WRITE").unwrap();
        run(&mut con, &["DEL", "paused"]).unwrap();
    }

    // CLIENT UNBLOCK, then CLIENT KILL, of a waiter.
    check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h"]);
    let unblocked = send(port, &["RL.FIXEDWINDOW", "fw", "1", "1h", "BLOCK", "0"]);
    blocked(&mut con, 1);
    let id = client_id(&mut con, "rl.fixedwindow");
    run(&mut con, &["CLIENT", "UNBLOCK", &id]).unwrap();
    answered(unblocked, "CLIENT UNBLOCK").unwrap();
    blocked(&mut con, 0);
    let killed = send(port, &["RL.FIXEDWINDOW", "fw", "1", "1h", "BLOCK", "0"]);
    blocked(&mut con, 1);
    let id = client_id(&mut con, "rl.fixedwindow");
    run(&mut con, &["CLIENT", "KILL", "ID", &id]).unwrap();
    assert!(
        killed.join().unwrap().is_err(),
        "the killed client got a reply"
    );
    blocked(&mut con, 0);

    // A waited lease key that leaves the keyspace, or is overwritten.
    let ops: [(&[&str], &[&str]); 7] = [
        (&["DEL", "q"], &[]),
        (&["UNLINK", "q"], &[]),
        (&["PEXPIRE", "q", "20"], &[]),
        (&["FLUSHALL", "ASYNC"], &[]),
        (&["SET", "q", "x"], &[]),
        (&["RENAME", "s", "q"], &["SET", "s", "x"]),
        (&["RL.RELEASE", "q", "holder"], &[]),
    ];
    for (op, before) in ops {
        run(&mut con, &["DEL", "q"]).unwrap();
        run(&mut con, &["RL.ACQUIRE", "q", "1", "30s", "ID", "holder"]).unwrap();
        if !before.is_empty() {
            run(&mut con, before).unwrap();
        }
        let waiter = send(
            port,
            &["RL.ACQUIRE", "q", "1", "30s", "ID", "w", "BLOCK", "20000"],
        );
        blocked(&mut con, 1);
        run(&mut con, op).unwrap();
        let _ = answered(waiter, &format!("after {op:?}"));
    }
    run(&mut con, &["FLUSHALL"]).unwrap();

    // A lease that runs out wakes its waiter; RL.ALL waits for every tier.
    run(
        &mut con,
        &["RL.ACQUIRE", "short", "1", "300ms", "ID", "gone"],
    )
    .unwrap();
    let lease = send(
        port,
        &["RL.ACQUIRE", "short", "1", "300ms", "BLOCK", "5000"],
    );
    let all = [
        "RL.ALL",
        "2",
        "fast",
        "slow",
        "TOKENBUCKET",
        "1",
        "20",
        "TOKENBUCKET",
        "1",
        "4",
    ];
    run(&mut con, &all).unwrap();
    let mut all_waiting = all.to_vec();
    all_waiting.extend(["BLOCK", "2000"]);
    let all_waiter = send(port, &all_waiting);
    answered(lease, "a lease that ran out").unwrap();
    answered(all_waiter, "RL.ALL").unwrap();

    // Waiters that time out behind a stuck one, then the key goes.
    run(
        &mut con,
        &["RL.ACQUIRE", "stuck", "1", "1h", "ID", "holder"],
    )
    .unwrap();
    let front = send(
        port,
        &[
            "RL.ACQUIRE",
            "stuck",
            "1",
            "1h",
            "ID",
            "front",
            "BLOCK",
            "0",
        ],
    );
    blocked(&mut con, 1);
    let behind: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                let mut con = client(port);
                for i in 0..10 {
                    let id = format!("w{t}-{i}");
                    let words = ["RL.ACQUIRE", "stuck", "1", "1h", "ID", &id, "BLOCK", "1"];
                    run(&mut con, &words).unwrap();
                }
            })
        })
        .collect();
    for h in behind {
        h.join().unwrap();
    }
    run(&mut con, &["DEL", "stuck"]).unwrap();
    answered(front, "the stuck waiter").unwrap();

    // SHUTDOWN with clients waiting (an AOF, no replica).
    let waiting: Vec<_> = (0..5)
        .map(|i| {
            let key = format!("left:{i}");
            check(&mut con, &["RL.TOKENBUCKET", &key, "1", "0.01"]);
            send(port, &["RL.TOKENBUCKET", &key, "1", "0.01", "BLOCK", "0"])
        })
        .collect();
    blocked(&mut con, 5);
    assert!(server.is_alive(), "the server died during the operations");
    let _ = run(&mut con, &["SHUTDOWN"]);
    let status = server
        .wait_exit(REPLY_TIMEOUT)
        .expect("the server did not exit");
    for w in waiting {
        let _ = w.join().unwrap();
    }
    // Exit code 0: memcheck's --error-exitcode turns any error into another.
    assert!(status.success(), "the server exited with {status}");
}

/// Keys whose waiters are served every few milliseconds (50 a second each):
/// `n` waiters on each of `keys`.
fn busy_waiters(port: u16, keys: &[&str], n: usize) -> Vec<JoinHandle<redis::RedisResult<Value>>> {
    let mut con = client(port);
    for key in keys {
        check(&mut con, &["RL.TOKENBUCKET", key, "1", "50"]);
    }
    keys.iter()
        .flat_map(|key| {
            (0..n).map(move |_| send(port, &["RL.TOKENBUCKET", key, "1", "50", "BLOCK", "20000"]))
        })
        .collect()
}

/// With a replica attached: waits that reach it, a `CLIENT PAUSE ALL` with
/// a waiter due, a `FAILOVER` and back with clients waiting, then `SHUTDOWN`
/// of the primary (which pauses writes until the replica has everything)
/// with clients waiting.
#[test]
#[ignore]
fn a_replica_attached_with_clients_waiting() {
    let mut primary = Server::start(&["--appendonly", "yes"]);
    let replica = Server::start_replica_of(&primary);
    let mut p = client(primary.port);

    for w in busy_waiters(primary.port, &["a", "b"], 5) {
        answered(w, "a waiter on a primary with a replica").unwrap();
    }

    let waiter = waiter_on_empty_bucket(primary.port, &mut p, "paused", "1", "10000");
    run(&mut p, &["CLIENT", "PAUSE", "1500", "ALL"]).unwrap();
    answered(waiter, "a waiter during CLIENT PAUSE ALL").unwrap();

    let waiters = busy_waiters(primary.port, &["c", "d"], 5);
    sleep(Duration::from_millis(100));
    run(&mut p, &["FAILOVER"]).unwrap();
    let mut r = client(replica.port);
    wait_for("the failover", Duration::from_secs(60), || {
        info_field(&mut r, "replication", "role") == "master"
    });
    for w in waiters {
        let _ = answered(w, "a waiter during FAILOVER");
    }
    wait_for("the old primary to follow", Duration::from_secs(60), || {
        info_field(&mut p, "replication", "master_link_status") == "up"
    });
    run(&mut r, &["FAILOVER"]).unwrap();
    wait_for("the failover back", Duration::from_secs(60), || {
        info_field(&mut p, "replication", "role") == "master"
            && info_field(&mut r, "replication", "master_link_status") == "up"
    });

    let waiters = busy_waiters(primary.port, &["e", "f"], 5);
    sleep(Duration::from_millis(100));
    assert!(primary.is_alive(), "the primary died");
    let _ = run(&mut p, &["SHUTDOWN"]);
    let status = primary
        .wait_exit(REPLY_TIMEOUT)
        .expect("the primary did not exit");
    for w in waiters {
        let _ = w.join().unwrap();
    }
    assert!(status.success(), "the primary exited with {status}");
    stop(replica, "the replica's part");
}

/// Checks by a policy's name, and inline checks on the same keys, through
/// every way a policy changes (a new version, a rollback, a delete and a
/// new definition, `DEBUG RELOAD`), with a replica attached: the check by
/// name's memo of its policy, the open key's memory of its value, the
/// migration of stamped keys, a waiter by name, a wrong-type key. Every
/// request answered; the replica holds the primary's keys and policies.
#[test]
#[ignore]
fn checks_by_name_through_every_change_of_their_policies() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = client(primary.port);
    let mut r = client(replica.port);
    let ask = |con: &mut redis::Connection, words: &[&str]| match run(con, words) {
        Err(e) if never_answered(&e) => panic!("{words:?} never answered: {e}"),
        _ => (),
    };
    ask(
        &mut p,
        &["RL.POLICY", "SET", "one", "TOKENBUCKET", "3", "1"],
    );
    let two = [
        "RL.POLICY",
        "SET",
        "two",
        "TOKENBUCKET",
        "5",
        "1",
        "GCRA",
        "0",
        "1",
        "1s",
    ];
    ask(&mut p, &two);
    ask(&mut p, &["SET", "text", "a string"]);
    // No key expires on its own from here (the replica's would lag a
    // moment behind): the digests below compare like with like.
    ask(&mut p, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    ask(&mut p, &["RL.CHECK", "one", "w", "COST", "3"]);
    let waiter = send(primary.port, &["RL.CHECK", "one", "w", "BLOCK", "3000"]);
    for i in 0..60 {
        let k = format!("k{}", i % 7);
        let (a, b) = (format!("a{}", i % 5), format!("b{}", i % 3));
        ask(&mut p, &["RL.CHECK", "one", &k]);
        ask(&mut p, &["RL.CHECK", "one", &k, "PEEK"]);
        ask(&mut p, &["RL.CHECK", "two", &a, &b]);
        ask(&mut p, &["RL.CHECK", "one", &k, "COST", "2"]);
        ask(&mut p, &["RL.TOKENBUCKET", &k, "3", "1"]);
        ask(&mut p, &["RL.CHECK", "one", "text"]);
        ask(&mut r, &["RL.CHECK", "one", &k, "PEEK"]);
        match i {
            10 | 20 | 50 => {
                let limit = (3 + i / 10).to_string();
                ask(
                    &mut p,
                    &["RL.POLICY", "SET", "one", "TOKENBUCKET", &limit, "1"],
                );
            }
            25 => ask(&mut p, &["RL.POLICY", "ROLLBACK", "one", "1"]),
            30 => ask(&mut p, &["RL.POLICY", "DEL", "one"]),
            31 => ask(
                &mut p,
                &["RL.POLICY", "SET", "one", "TOKENBUCKET", "4", "2"],
            ),
            40 => ask(&mut p, &["DEBUG", "RELOAD"]),
            _ => (),
        }
    }
    let _ = answered(waiter, "a waiter by name through policy changes");
    run(&mut p, &["WAIT", "1", "30000"]).unwrap();
    let digest = |con: &mut redis::Connection, words: &[&str]| run(con, words).unwrap();
    assert_eq!(
        digest(&mut p, &["RL.POLICY", "DIGEST"]),
        digest(&mut r, &["RL.POLICY", "DIGEST"])
    );
    assert_eq!(
        digest(&mut p, &["DEBUG", "DIGEST"]),
        digest(&mut r, &["DEBUG", "DIGEST"])
    );
    stop(replica, "checks by name (replica)");
    stop(primary, "checks by name");
}
