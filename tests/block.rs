//! `BLOCK ms`: waiting on the server until a request is allowed, in arrival
//! order, without anyone jumping the queue; a client that leaves while it
//! waits takes nothing; replicas end with the primary's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use serial_test::serial;

/// Sends `words` on a connection of its own and reports the reply with the
/// milliseconds it took, measured from `since`.
fn send(port: u16, words: Vec<String>, since: Instant) -> JoinHandle<(Value, u128)> {
    thread::spawn(move || {
        let mut con = connect_port(port).unwrap();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let reply = run(&mut con, &refs).unwrap();
        (reply, since.elapsed().as_millis())
    })
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

fn allowed(reply: &Value) -> i64 {
    match reply {
        Value::Array(items) => match items[0] {
            Value::Int(i) => i,
            ref other => panic!("not an integer: {other:?}"),
        },
        other => panic!("not an array: {other:?}"),
    }
}

fn info_count(con: &mut redis::Connection, field: &str) -> i64 {
    info_field(con, "ratelimit", &format!("ratelimit_{field}"))
        .parse()
        .unwrap()
}

/// Waits until `n` clients are blocked on the server.
fn blocked(con: &mut redis::Connection, n: i64) {
    wait_for("clients to block", Duration::from_secs(5), || {
        info_count(con, "blocked_clients") == n
    });
}

#[test]
fn a_second_caller_is_allowed_when_the_bucket_refills_and_not_before() {
    let server = Server::start(&[]);
    let start = Instant::now();
    let w = words(&["RL.TOKENBUCKET", "b", "1", "10", "BLOCK", "1000"]);
    let first = send(server.port, w.clone(), start).join().unwrap();
    let second = send(server.port, w, start).join().unwrap();
    assert_eq!((allowed(&first.0), allowed(&second.0)), (1, 1));
    // Measured from before the first request was sent: the server allows
    // the second at least 100 ms after the first (a late reading of the
    // first reply cannot shrink it).
    assert!(
        second.1 >= 99,
        "allowed {} ms after the start: before the refill",
        second.1
    );
    let gap = second.1 - first.1;
    assert!(gap < 600, "allowed only {gap} ms after the first");
}

#[test]
fn waiters_are_allowed_in_the_order_they_arrived() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Empty, refilling 5 a second. The first waiter needs all 10 tokens
    // (2 s, time enough to queue the others on a loaded machine), so every
    // later one queues behind it; then one every 200 ms.
    check(&mut con, &["RL.TOKENBUCKET", "q", "10", "5", "COST", "10"]);
    let start = Instant::now();
    let mut waiters = Vec::new();
    for i in 0..10 {
        let cost = if i == 0 { "10" } else { "1" };
        let w = words(&[
            "RL.TOKENBUCKET",
            "q",
            "10",
            "5",
            "COST",
            cost,
            "BLOCK",
            "10000",
        ]);
        waiters.push((i, send(server.port, w, start)));
        blocked(&mut con, i + 1);
    }
    let mut done: Vec<(u128, i64)> = waiters
        .into_iter()
        .map(|(i, h)| {
            let (reply, at) = h.join().unwrap();
            assert_eq!(allowed(&reply), 1, "waiter {i}");
            (at, i)
        })
        .collect();
    done.sort();
    let order: Vec<i64> = done.iter().map(|&(_, i)| i).collect();
    assert_eq!(
        order,
        (0..10).collect::<Vec<_>>(),
        "served out of arrival order"
    );
    assert_eq!(info_count(&mut con, "waits_allowed"), 10);
}

#[test]
fn a_wait_shorter_than_the_retry_is_denied_at_once() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(&mut con, &["RL.TOKENBUCKET", "slow", "1", "1"]);
    let started = Instant::now();
    let r = check(
        &mut con,
        &["RL.TOKENBUCKET", "slow", "1", "1", "BLOCK", "10"],
    );
    assert_eq!(r[0], 0);
    assert!(r[3] > 10);
    assert!(started.elapsed() < Duration::from_millis(100), "it waited");
    let never = check(
        &mut con,
        &[
            "RL.TOKENBUCKET",
            "slow",
            "1",
            "1",
            "COST",
            "2",
            "BLOCK",
            "0",
        ],
    );
    assert_eq!(
        (never[0], never[3]),
        (0, -1),
        "a request that can never pass does not wait"
    );
    assert_eq!(info_count(&mut con, "blocked_clients"), 0);
}

#[test]
fn an_acquire_waits_for_a_release_not_for_the_lease_to_run_out() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(
        &mut con,
        &["RL.ACQUIRE", "slots", "1", "30s", "ID", "holder"],
    )
    .unwrap();
    let start = Instant::now();
    let waiter = send(
        server.port,
        words(&["RL.ACQUIRE", "slots", "1", "30s", "BLOCK", "10000"]),
        start,
    );
    blocked(&mut con, 1);
    let released_at = start.elapsed().as_millis();
    assert_eq!(
        run(&mut con, &["RL.RELEASE", "slots", "holder"]).unwrap(),
        Value::Int(1)
    );
    let (reply, at) = waiter.join().unwrap();
    assert_eq!(allowed(&reply), 1);
    assert!(
        at - released_at < 500,
        "woken {} ms after the release",
        at - released_at
    );
}

/// A holder's heartbeat (an acquire with the id of its live lease) renews
/// it while others wait for a slot, with or without `BLOCK`: a renewal
/// takes no slot, so none a waiter is owed. Before, it queued behind them:
/// denied without `BLOCK` (and its lease then ended, handing the slot to a
/// waiter while the job still ran), or waiting with it behind a waiter who
/// waited for its own lease to end.
#[test]
fn a_holders_renewal_is_not_queued_behind_the_waiters_for_its_slot() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let start = Instant::now();
    let (taken, _) = acquire(&mut con, &["jobs", "1", "1h", "ID", "holder"]);
    assert_eq!(taken[0], 1);
    let waiter = send(
        server.port,
        words(&[
            "RL.ACQUIRE",
            "jobs",
            "1",
            "1h",
            "ID",
            "waiter",
            "BLOCK",
            "0",
        ]),
        start,
    );
    blocked(&mut con, 1);
    for block in [None, Some("0")] {
        let mut heartbeat = vec!["jobs", "1", "1h", "ID", "holder"];
        heartbeat.extend(block.map(|ms| ["BLOCK", ms]).into_iter().flatten());
        let (renewed, id) = acquire(&mut con, &heartbeat);
        assert_eq!(renewed[..3], [1, 1, 0], "{block:?}");
        assert_eq!(id.as_deref(), Some("holder"));
    }
    // The waiter still waits, and goes when the holder is done.
    assert_eq!(info_count(&mut con, "blocked_clients"), 1);
    assert_eq!(
        run(&mut con, &["RL.RELEASE", "jobs", "holder"]).unwrap(),
        Value::Int(1)
    );
    let (reply, _) = waiter.join().unwrap();
    assert_eq!(allowed(&reply), 1);
}

#[test]
fn an_acquire_is_woken_when_a_lease_runs_out() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(
        &mut con,
        &["RL.ACQUIRE", "slots", "1", "300ms", "ID", "crashed"],
    )
    .unwrap();
    let start = Instant::now();
    let (reply, at) = send(
        server.port,
        words(&["RL.ACQUIRE", "slots", "1", "300ms", "BLOCK", "5000"]),
        start,
    )
    .join()
    .unwrap();
    assert_eq!(allowed(&reply), 1);
    assert!((250..1500).contains(&at), "woken after {at} ms");
}

#[test]
fn a_request_without_block_does_not_take_what_a_waiter_is_owed() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // 2 tokens, 4 a second: empty now; the waiter needs both (500 ms).
    check(&mut con, &["RL.TOKENBUCKET", "owed", "2", "4", "COST", "2"]);
    let start = Instant::now();
    let waiter = send(
        server.port,
        words(&[
            "RL.TOKENBUCKET",
            "owed",
            "2",
            "4",
            "COST",
            "2",
            "BLOCK",
            "3000",
        ]),
        start,
    );
    blocked(&mut con, 1);
    thread::sleep(Duration::from_millis(300));
    // A token is back, but it is the waiter's.
    let r = check(&mut con, &["RL.TOKENBUCKET", "owed", "2", "4"]);
    assert_eq!(r[0], 0, "jumped the queue: {r:?}");
    assert!(r[3] >= 1);
    let (reply, at) = waiter.join().unwrap();
    assert_eq!(allowed(&reply), 1);
    assert!(at < 1200, "the waiter was delayed: {at} ms");
}

/// The same for a check with the words of the last check of its command
/// without options (the module then skips their parsing:
/// `src/redis/commands/params.rs`), a check command's and `CL.THROTTLE`'s,
/// the latter behind an `RL.GCRA` waiter on its key.
#[test]
fn a_check_with_the_last_checks_words_does_not_take_what_a_waiter_is_owed() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // The words kept, from checks of other keys.
    check(&mut con, &["RL.TOKENBUCKET", "other", "2", "4"]);
    check(&mut con, &["CL.THROTTLE", "other:cell", "1", "4", "1"]);
    // 2 tokens, 4 a second: empty now; the waiter needs both (500 ms).
    check(&mut con, &["RL.TOKENBUCKET", "owed", "2", "4", "COST", "2"]);
    // GCRA of limit 2, one every 250 ms: empty now; the same for its waiter.
    check(&mut con, &["CL.THROTTLE", "owed:cell", "1", "4", "1", "2"]);
    let start = Instant::now();
    let waiters = [
        words(&[
            "RL.TOKENBUCKET",
            "owed",
            "2",
            "4",
            "COST",
            "2",
            "BLOCK",
            "3000",
        ]),
        words(&[
            "RL.GCRA",
            "owed:cell",
            "1",
            "4",
            "1s",
            "COST",
            "2",
            "BLOCK",
            "3000",
        ]),
    ]
    .map(|w| send(server.port, w, start));
    blocked(&mut con, 2);
    thread::sleep(Duration::from_millis(300));
    // A unit is back on each key, but it is the waiter's.
    let r = check(&mut con, &["RL.TOKENBUCKET", "owed", "2", "4"]);
    assert_eq!(r[0], 0, "jumped the queue: {r:?}");
    let r = check(&mut con, &["CL.THROTTLE", "owed:cell", "1", "4", "1"]);
    assert_eq!(r[0], 1, "jumped the queue: {r:?}");
    for waiter in waiters {
        let (reply, at) = waiter.join().unwrap();
        assert_eq!(allowed(&reply), 1);
        assert!(at < 1200, "the waiter was delayed: {at} ms");
    }
}

#[test]
fn a_client_that_leaves_while_it_waits_takes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h"]);
    let before = dump(&mut con, "fw");
    // Killed.
    let port = server.port;
    let killed = thread::spawn(move || {
        let mut con = connect_port(port).unwrap();
        run(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h", "BLOCK", "0"]).is_err()
    });
    blocked(&mut con, 1);
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let id = list
        .lines()
        .find(|l| l.contains("cmd=rl.fixedwindow"))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .unwrap()
        .to_string();
    run(&mut con, &["CLIENT", "KILL", "ID", &id]).unwrap();
    assert!(killed.join().unwrap(), "the killed client got a reply");
    blocked(&mut con, 0);
    // Unblocked: the denied reply, the state as it is.
    let unblocked = send(
        server.port,
        words(&["RL.FIXEDWINDOW", "fw", "1", "1h", "BLOCK", "0"]),
        Instant::now(),
    );
    blocked(&mut con, 1);
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let id = list
        .lines()
        .find(|l| l.contains("cmd=rl.fixedwindow"))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .unwrap()
        .to_string();
    assert_eq!(
        run(&mut con, &["CLIENT", "UNBLOCK", &id]).unwrap(),
        Value::Int(1)
    );
    let (reply, _) = unblocked.join().unwrap();
    assert_eq!(allowed(&reply), 0);
    blocked(&mut con, 0);
    assert_eq!(
        dump(&mut con, "fw"),
        before,
        "a client that left took something"
    );
    assert_eq!(info_count(&mut con, "waits_timed_out"), 1);
}

#[test]
fn block_does_not_block_in_a_transaction_or_a_script() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(&mut con, &["RL.TOKENBUCKET", "t", "1", "1"]);
    let started = Instant::now();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("RL.TOKENBUCKET")
        .arg(&["t", "1", "1", "BLOCK", "0"]);
    let (r,): (Vec<i64>,) = pipe.query(&mut con).unwrap();
    assert_eq!(r[0], 0);
    let scripted: Vec<i64> = redis::cmd("EVAL")
        .arg("return redis.call('RL.TOKENBUCKET', KEYS[1], '1', '1', 'BLOCK', '0')")
        .arg(1)
        .arg("t")
        .query(&mut con)
        .unwrap();
    assert_eq!(scripted[0], 0);
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[test]
fn rl_all_waits_until_every_tier_allows() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let spec = [
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
    assert_eq!(allowed(&run(&mut con, &spec).unwrap()), 1);
    let start = Instant::now();
    let mut w: Vec<String> = words(&spec);
    w.extend(words(&["BLOCK", "2000"]));
    let (reply, at) = send(server.port, w, start).join().unwrap();
    assert_eq!(allowed(&reply), 1);
    assert!(
        at >= 200,
        "allowed after {at} ms, before the slow tier refilled"
    );
}

#[test]
fn block_takes_whole_milliseconds_and_never_comes_with_peek() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (w, error) in [
        (&["RL.GCRA", "g", "1", "1", "1s", "BLOCK", "-1"][..], "ERR BLOCK must be a whole number of milliseconds from 0 (no limit) to 9007199254740991"),
        (&["RL.GCRA", "g", "1", "1", "1s", "BLOCK", "1.5"], "ERR BLOCK must be a whole number of milliseconds from 0 (no limit) to 9007199254740991"),
        (&["RL.GCRA", "g", "1", "1", "1s", "BLOCK"], "ERR syntax error: BLOCK needs a value"),
        (&["RL.GCRA", "g", "1", "1", "1s", "PEEK", "BLOCK", "5"], "ERR syntax error: PEEK and BLOCK cannot be given together"),
        (&["RL.PEEK", "g", "GCRA", "1", "1", "1s", "BLOCK", "5"], "ERR syntax error: PEEK and BLOCK cannot be given together"),
        (&["RL.ACQUIRE", "l", "1", "1s", "BLOCK", "x"], "ERR BLOCK must be a whole number of milliseconds from 0 (no limit) to 9007199254740991"),
        (&["CL.THROTTLE", "c", "1", "1", "1", "1", "BLOCK"], "ERR wrong number of arguments for 'cl.throttle' command"),
    ] {
        assert_eq!(error_of(&mut con, w), error, "{w:?}");
    }
    assert!(!exists(&mut con, "g"));
}

#[test]
#[serial]
fn waits_reach_replicas_as_what_they_took() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    check(&mut p, &["RL.SLIDINGLOG", "log", "1", "100ms"]);
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let h = send(
                primary.port,
                words(&["RL.SLIDINGLOG", "log", "1", "100ms", "BLOCK", "3000"]),
                start,
            );
            let tx = tx.clone();
            thread::spawn(move || tx.send(allowed(&h.join().unwrap().0)).unwrap())
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    drop(tx);
    assert_eq!(rx.iter().sum::<i64>(), 4);
    let mut r = replica.connect();
    let sent: i64 = info_field(&mut p, "replication", "master_repl_offset")
        .parse()
        .unwrap();
    wait_for("the replica", Duration::from_secs(5), || {
        info_field(&mut r, "replication", "master_repl_offset")
            .parse::<i64>()
            .unwrap()
            >= sent
    });
    assert_eq!(digest_value(&mut p, "log"), digest_value(&mut r, "log"));
}
