//! Waiters at the edges, as routine traffic meets them: clients that wait
//! exactly as long as their token takes (served in the same event-loop turn
//! in which their deadline passes), an event loop made late, waits that end
//! during a pause, and a backlog of thousands of waiters falling due at
//! once. Every waiting client is answered exactly once; a timed-out answer
//! is a true denial; serving a backlog leaves the server responsive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use serial_test::serial;

fn ints(reply: &Value) -> Vec<i64> {
    items(reply)
        .iter()
        .take(5)
        .map(|v| match v {
            Value::Int(i) => *i,
            other => panic!("not an integer: {other:?}"),
        })
        .collect()
}

fn info_count(con: &mut redis::Connection, field: &str) -> i64 {
    info_field(con, "ratelimit", &format!("ratelimit_{field}"))
        .parse()
        .unwrap()
}

/// What the clients of a load saw: waits allowed, waits denied.
#[derive(Default, Debug)]
struct Seen {
    allowed: i64,
    denied: i64,
}

/// `clients` threads, each for `run_for`: on a fresh key, take its only token
/// (`RL.TOKENBUCKET k 1 20`: the next comes in 50 ms), then wait for the next
/// with `BLOCK 50`, exactly as long as it takes. Each wait must be answered
/// (a connection read times out after 5 s: a reply never sent fails the
/// test instead of hanging it).
fn boundary_load(port: u16, clients: usize, run_for: Duration, tag: &str) -> Seen {
    let stop = Instant::now() + run_for;
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let tag = tag.to_string();
            thread::spawn(move || {
                let mut con = connect_port(port).unwrap();
                con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut seen = Seen::default();
                let mut i = 0;
                while Instant::now() < stop {
                    let key = format!("{tag}:{c}:{i}");
                    i += 1;
                    let first = ints(&run(&mut con, &["RL.TOKENBUCKET", &key, "1", "20"]).unwrap());
                    assert_eq!(first[0], 1, "a fresh key denied: {first:?}");
                    let reply = run(
                        &mut con,
                        &["RL.TOKENBUCKET", &key, "1", "20", "BLOCK", "50"],
                    )
                    .unwrap_or_else(|e| panic!("wait {i} of client {c} not answered: {e}"));
                    let reply = ints(&reply);
                    if reply[0] == 1 {
                        seen.allowed += 1;
                    } else {
                        assert!(
                            reply[2] < 1 && reply[3] > 0,
                            "a denial that is not one: {reply:?}"
                        );
                        seen.denied += 1;
                    }
                }
                seen
            })
        })
        .collect();
    handles.into_iter().fold(Seen::default(), |mut all, h| {
        let seen = h.join().unwrap();
        all.allowed += seen.allowed;
        all.denied += seen.denied;
        all
    })
}

/// What the server counted agrees with what its clients heard, nobody is
/// left waiting, and the server still answers.
fn check_books(server: &Server, seen: &Seen) {
    let mut con = server.connect();
    wait_for("waiters to leave", Duration::from_secs(5), || {
        info_count(&mut con, "blocked_clients") == 0
    });
    assert_eq!(
        info_count(&mut con, "waits_allowed"),
        seen.allowed,
        "{seen:?}"
    );
    assert_eq!(
        info_count(&mut con, "waits_timed_out"),
        seen.denied,
        "{seen:?}"
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
#[serial]
fn eight_clients_waiting_exactly_as_long_as_their_token_takes_are_each_answered_once() {
    let mut server = Server::start(&[]);
    let seen = boundary_load(server.port, 8, Duration::from_secs(8), "edge");
    let late = info_count(&mut server.connect(), "late_callbacks");
    println!("boundary load: {seen:?}; callbacks after the answer (ignored): {late}");
    assert!(server.is_alive(), "the server died: {}", server.log());
    assert!(
        seen.allowed + seen.denied > 200,
        "too little load: {seen:?}"
    );
    check_books(&server, &seen);
}

#[test]
#[serial]
fn waiters_of_an_event_loop_made_late_are_each_answered_once() {
    let mut server = Server::start(&[]);
    let port = server.port;
    let done = Arc::new(AtomicBool::new(false));
    // Someone makes the event loop late, again and again.
    let sleeper = {
        let done = done.clone();
        thread::spawn(move || {
            let mut con = connect_port(port).unwrap();
            while !done.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(40));
                let _: () = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg("0.12")
                    .query(&mut con)
                    .unwrap();
            }
        })
    };
    // Waits of 100 ms for a token that takes 100 ms.
    let waiters: Vec<_> = (0..4)
        .map(|c| {
            thread::spawn(move || {
                let mut con = connect_port(port).unwrap();
                con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut seen = Seen::default();
                for i in 0..25 {
                    let key = format!("late:{c}:{i}");
                    run(&mut con, &["RL.TOKENBUCKET", &key, "1", "10"]).unwrap();
                    let reply = run(
                        &mut con,
                        &["RL.TOKENBUCKET", &key, "1", "10", "BLOCK", "100"],
                    )
                    .unwrap_or_else(|e| panic!("wait {i} of client {c} not answered: {e}"));
                    if ints(&reply)[0] == 1 {
                        seen.allowed += 1;
                    } else {
                        seen.denied += 1;
                    }
                }
                seen
            })
        })
        .collect();
    let mut seen = Seen::default();
    for h in waiters {
        let s = h.join().unwrap();
        seen.allowed += s.allowed;
        seen.denied += s.denied;
    }
    done.store(true, Ordering::Relaxed);
    sleeper.join().unwrap();
    let late = info_count(&mut server.connect(), "late_callbacks");
    println!("late event loop: {seen:?}; callbacks after the answer (ignored): {late}");
    assert!(server.is_alive(), "the server died: {}", server.log());
    assert_eq!(seen.allowed + seen.denied, 100);
    check_books(&server, &seen);
}

#[test]
#[serial]
fn a_wait_that_ends_during_a_pause_is_a_true_denial() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["RL.TOKENBUCKET", "p", "1", "20"]).unwrap();
    let port = server.port;
    let waiter = thread::spawn(move || {
        let mut con = connect_port(port).unwrap();
        let reply = run(
            &mut con,
            &["RL.TOKENBUCKET", "p", "1", "20", "BLOCK", "300"],
        )
        .unwrap();
        ints(&reply)
    });
    wait_for("the waiter to block", Duration::from_secs(5), || {
        info_count(&mut con, "blocked_clients") == 1
    });
    // The token comes back 50 ms in; the pause outlasts the wait.
    run(&mut con, &["CLIENT", "PAUSE", "600", "WRITE"]).unwrap();
    let reply = waiter.join().unwrap();
    run(&mut con, &["CLIENT", "UNPAUSE"]).unwrap();
    assert_eq!(reply[0], 0, "allowed during a pause: {reply:?}");
    assert!(
        reply[2] < 1,
        "denied, yet {} remaining: {reply:?}",
        reply[2]
    );
    assert!(reply[3] > 0, "denied, yet no wait: {reply:?}");
    // Nothing was taken: the bucket is full.
    let peek = ints(&run(&mut con, &["RL.TOKENBUCKET", "p", "1", "20", "PEEK"]).unwrap());
    assert_eq!((peek[0], peek[2]), (1, 1), "{peek:?}");
}

/// A backlog: `n` waiters on `n` keys (one raw connection each, the
/// command written and the reply read later), all falling due while writes
/// are paused. When the pause ends, a client polls `INFO` and `PING`: it
/// must get in while the backlog is being served (some served, not all),
/// which a single callback serving everyone never lets it. Returns the
/// longest `PING` and how many polls saw the backlog part-served.
fn backlog(n: usize) -> (Duration, usize) {
    use std::io::{Read, Write};
    let server = Server::start(&["--maxclients", "25000"]);
    let mut con = server.connect();
    // Every token comes back `refill_ms` after it was taken: time enough, on
    // a busy machine, for every waiter to connect and block first.
    let refill_ms = (n as u64 * 2).max(10_000);
    let rate = format!("{}", 1_000.0 / refill_ms as f64);
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("RL.TOKENBUCKET")
            .arg(format!("b:{i}"))
            .arg(1)
            .arg(&rate);
    }
    let _: Vec<Value> = pipe.query(&mut con).unwrap();
    let drained = Instant::now();
    let mut waiters: Vec<std::net::TcpStream> = (0..n)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            let key = format!("b:{i}");
            let cmd = format!(
                "*6\r\n$14\r\nRL.TOKENBUCKET\r\n${}\r\n{key}\r\n$1\r\n1\r\n${}\r\n{rate}\r\n$5\r\nBLOCK\r\n$6\r\n600000\r\n",
                key.len(),
                rate.len()
            );
            s.write_all(cmd.as_bytes()).unwrap();
            s
        })
        .collect();
    wait_for(
        "the waiters to block",
        Duration::from_millis(refill_ms),
        || info_count(&mut con, "blocked_clients") == n as i64,
    );
    run(&mut con, &["CLIENT", "PAUSE", "100000", "WRITE"]).unwrap();
    let due = Duration::from_millis(refill_ms + 200).saturating_sub(drained.elapsed());
    thread::sleep(due);
    run(&mut con, &["CLIENT", "UNPAUSE"]).unwrap();
    let mut longest = Duration::ZERO;
    let mut part_served = 0;
    loop {
        let sent = Instant::now();
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
        longest = longest.max(sent.elapsed());
        let served = info_count(&mut con, "waits_allowed");
        if served > 0 && served < n as i64 {
            part_served += 1;
        }
        if served == n as i64 {
            break;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "the backlog was never served"
        );
    }
    for (i, s) in waiters.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 8];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"*5\r\n:1\r\n", "waiter {i}");
    }
    (longest, part_served)
}

#[test]
#[serial]
fn a_backlog_of_five_thousand_due_waiters_is_served_in_slices_letting_others_in() {
    let n = std::env::var("BACKLOG_WAITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let (longest, part_served) = backlog(n);
    println!("{n} due waiters: longest PING {longest:?} while they were served; {part_served} polls got in between");
    assert!(
        part_served > 0,
        "no client got in while {n} waiters were served"
    );
}

/// A waited key that expired while the event loop was late (`DEBUG SLEEP`
/// past both the key's expiry and its waiter's turn; no slack, so the
/// expiry is the turn), found expired by another command of the module's
/// read in the same turn, before the waiter's timer: Redis deletes it as
/// that command opens it, inside the open, and tells the module (the
/// type's `unlink`), which keeps the news for the waiters' wake-up and
/// opens nothing there (a debug build, the tests', stops the server on any
/// key opened while another is open). For each command read in that turn:
/// it is answered, a check beside the waiter is denied (the waiter is
/// first), the waiter is allowed exactly once, and the key holds its take.
#[test]
#[serial]
fn a_waited_key_found_expired_by_another_command_is_decided_after_it() {
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    run(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let others: &[&[&str]] = &[
        &["RL.TOKENBUCKET", "{k}", "1", "1"],
        &["RL.TOKENBUCKET", "{k}", "1", "1", "PEEK"],
        &["RL.TOKENBUCKET", "{k}", "1", "1", "BLOCK", "100"],
        &["RL.INFO", "{k}"],
        &["RL.ALL", "1", "{k}", "TOKENBUCKET", "1", "1"],
    ];
    for (i, other) in others.iter().enumerate() {
        let key = format!("found:{i}");
        let words: Vec<&str> = other
            .iter()
            .map(|w| if *w == "{k}" { key.as_str() } else { w })
            .collect();
        assert_eq!(check(&mut con, &["RL.TOKENBUCKET", &key, "1", "1"])[0], 1);
        let port = server.port;
        let waited = key.clone();
        let waiter = thread::spawn(move || {
            let mut con = connect_port(port).unwrap();
            let words = ["RL.TOKENBUCKET", &waited, "1", "1", "BLOCK", "5000"];
            ints(&run(&mut con, &words).unwrap())
        });
        wait_for("the waiter to block", Duration::from_secs(5), || {
            info_count(&mut con, "blocked_clients") == 1
        });
        // The sleep and the other command in one read: both run before the
        // waiter's timer, the command after the key's expiry.
        let mut pipe = redis::pipe();
        pipe.cmd("DEBUG").arg("SLEEP").arg("1.2");
        let mut cmd = redis::cmd(words[0]);
        cmd.arg(&words[1..]);
        pipe.add_command(cmd);
        let replies: Vec<Value> = pipe.query(&mut con).expect("the server stopped");
        let waited = waiter.join().unwrap();
        assert_eq!(waited[0], 1, "{words:?}: the waiter {waited:?}");
        if words[0] == "RL.TOKENBUCKET" && !words.contains(&"PEEK") {
            let other = ints(&replies[1]);
            assert_eq!(
                other[0], 0,
                "{words:?} allowed beside the waiter: {other:?}"
            );
        }
        let peek = check(&mut con, &["RL.TOKENBUCKET", &key, "1", "1", "PEEK"]);
        assert_eq!((peek[0], peek[2]), (0, 0), "{words:?}: after both {peek:?}");
    }
}
