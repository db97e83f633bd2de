//! A key called with other parameters than before: the new ones take over
//! from the key's last allowed request on (docs/commands.md, "Changed
//! parameters"), for a request that waits (`BLOCK`) as for any other.
//!
//! Issue 28, item 3: `RL.TOKENBUCKET k 1 2`, then `RL.TOKENBUCKET k 1 0.2
//! BLOCK 8000` was allowed at ~1.5 s rather than at 5 s: the key expired on
//! the old rate's TTL while the request waited, and the request was decided
//! on a new key. A waiting request now holds the key until its turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// A key's first, allowed, request and a request with other parameters
/// that waits on it; `exposed`: whether the key's expiry under the first
/// parameters comes before the second request's turn (the queue algorithms
/// carry the time their queue drains over, so their turn never comes after
/// the key's expiry).
struct Case {
    first: &'static [&'static str],
    then: &'static [&'static str],
    exposed: bool,
}

const CASES: &[Case] = &[
    Case {
        first: &["RL.TOKENBUCKET", "tb", "1", "20"],
        then: &["RL.TOKENBUCKET", "tb", "1", "0.4"],
        exposed: true,
    },
    Case {
        first: &["RL.TOKENBUCKET", "tb-capacity", "1", "20"],
        then: &["RL.TOKENBUCKET", "tb-capacity", "5", "4", "COST", "5"],
        exposed: true,
    },
    Case {
        first: &["RL.SLIDINGCOUNTER", "sc", "1", "100ms"],
        then: &["RL.SLIDINGCOUNTER", "sc", "1", "2s"],
        exposed: true,
    },
    Case {
        first: &[
            "RL.SLIDINGCOUNTER",
            "sc-precise",
            "2",
            "100ms",
            "PRECISION",
            "10",
        ],
        then: &[
            "RL.SLIDINGCOUNTER",
            "sc-precise",
            "1",
            "2s",
            "PRECISION",
            "10",
        ],
        exposed: true,
    },
    Case {
        first: &["RL.FIXEDWINDOW", "fw", "1", "100ms"],
        then: &["RL.FIXEDWINDOW", "fw", "1", "2s"],
        exposed: true,
    },
    Case {
        first: &["RL.SLIDINGLOG", "sl", "1", "100ms"],
        then: &["RL.SLIDINGLOG", "sl", "1", "2s"],
        exposed: true,
    },
    Case {
        first: &["RL.LEAKYBUCKET", "lb", "1", "20"],
        then: &["RL.LEAKYBUCKET", "lb", "1", "0.4"],
        exposed: false,
    },
    Case {
        first: &["RL.GCRA", "gcra", "0", "20", "1"],
        then: &["RL.GCRA", "gcra", "0", "1", "2"],
        exposed: false,
    },
    Case {
        first: &[
            "RL.ALL",
            "2",
            "all-a",
            "all-b",
            "TOKENBUCKET",
            "1",
            "20",
            "SLIDINGLOG",
            "10",
            "100ms",
        ],
        then: &[
            "RL.ALL",
            "2",
            "all-a",
            "all-b",
            "TOKENBUCKET",
            "1",
            "0.4",
            "SLIDINGLOG",
            "1",
            "2s",
        ],
        exposed: true,
    },
];

/// The five integers every reply starts with (`RL.ALL` appends its tiers').
fn five(con: &mut redis::Connection, words: &[&str]) -> Vec<i64> {
    let reply = run(con, words).unwrap_or_else(|e| panic!("{words:?} failed: {e}"));
    items(&reply)[..5]
        .iter()
        .map(|v| text(v).parse().unwrap())
        .collect()
}

/// The key a case's request names first.
fn key_of(words: &[&str]) -> String {
    let at = if words[0] == "RL.ALL" { 2 } else { 1 };
    words[at].to_string()
}

/// Waits until the server's clock is just past a multiple of 2 s, so that a
/// fixed window of 2 s has most of its length ahead.
fn at_start_of_two_seconds(con: &mut redis::Connection) {
    loop {
        let into = server_time_ms(con) % 2000;
        if into < 100 {
            return;
        }
        thread::sleep(Duration::from_millis((2000 - into) as u64 + 5));
    }
}

/// Every algorithm (and `RL.ALL`): a waiter with other parameters is
/// allowed at the turn those parameters give from the last allowed request,
/// never before, however soon the key would have expired under the old
/// ones. Without slack (`expiry-slack 0`), the old expiry is the moment the
/// state is new again under the old parameters: some 50-200 ms.
#[test]
fn a_waiter_with_other_parameters_is_decided_on_the_state_it_waited_on() {
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    at_start_of_two_seconds(&mut server.connect());
    let handles: Vec<_> = CASES
        .iter()
        .map(|case| {
            let mut con = server.connect();
            thread::spawn(move || {
                let name = case.then.join(" ");
                assert_eq!(five(&mut con, case.first)[0], 1, "{name}: first");
                let key = key_of(case.first);
                let started = Instant::now();
                let peek = five(&mut con, &[case.then, &["PEEK"]].concat());
                let (allowed, turn_ms) = (peek[0], peek[3]);
                assert_eq!(allowed, 0, "{name}: denied now");
                let old_ttl = pttl(&mut con, &key);
                if case.exposed {
                    assert!(
                        old_ttl + 300 < turn_ms,
                        "{name}: the key's expiry ({old_ttl} ms) comes before its turn ({turn_ms} ms)"
                    );
                } else {
                    // Read a few ms apart: the same moment, give or take.
                    assert!(old_ttl + 20 >= turn_ms, "{name}: {old_ttl} < {turn_ms}");
                }
                let reply = five(&mut con, &[case.then, &["BLOCK", "5000"]].concat());
                let waited = started.elapsed();
                assert_eq!(reply[0], 1, "{name}: allowed after its wait");
                assert!(
                    waited >= Duration::from_millis(turn_ms as u64),
                    "{name}: allowed after {waited:?}, its turn was {turn_ms} ms away"
                );
                assert!(
                    waited < Duration::from_millis(turn_ms as u64 + 1000),
                    "{name}: allowed only after {waited:?} ({turn_ms} ms)"
                );
                waited
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (case, handle) in CASES.iter().zip(handles) {
        match handle.join() {
            Ok(waited) => println!("{}: allowed after {waited:?}", case.then.join(" ")),
            Err(panic) => failures.push(
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "a case panicked".into()),
            ),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The hold is part of what is replicated: while the request waits, past
/// the old expiry, the replica holds the key with the primary's expiry.
#[test]
fn a_replica_holds_the_waited_key_as_its_primary_does() {
    let primary = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    assert_eq!(check(&mut p, &["RL.TOKENBUCKET", "k", "1", "20"])[0], 1);
    let mut waiter = primary.connect();
    let handle = thread::spawn(move || {
        check(
            &mut waiter,
            &["RL.TOKENBUCKET", "k", "1", "0.5", "BLOCK", "5000"],
        )
    });
    thread::sleep(Duration::from_millis(400));
    assert!(
        !handle.is_finished(),
        "the waiter was answered before its turn"
    );
    let mut r = replica.connect();
    assert!(exists(&mut p, "k"), "the primary dropped the waited key");
    let expires = expiry_time(&mut p, "k");
    wait_for("the replica", Duration::from_secs(5), || {
        expiry_time(&mut r, "k") == expires
    });
    assert_eq!(digest_value(&mut r, "k"), digest_value(&mut p, "k"));
    assert_eq!(handle.join().unwrap()[0], 1);
}

/// A denial that does not wait changes nothing, its expiry included: the
/// key still goes when its state is new under the parameters of its last
/// allowed request, and is a new key for whatever parameters come then.
#[test]
fn a_denial_with_other_parameters_leaves_the_expiry_and_a_new_key_follows_it() {
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    assert_eq!(check(&mut con, &["RL.TOKENBUCKET", "k", "1", "20"])[0], 1);
    let expires = expiry_time(&mut con, "k");
    let denied = check(&mut con, &["RL.TOKENBUCKET", "k", "1", "0.4"]);
    assert_eq!(denied[0], 0);
    assert!(denied[3] > 2000, "{denied:?}");
    assert_eq!(
        expiry_time(&mut con, "k"),
        expires,
        "a denial moved the expiry"
    );
    thread::sleep(Duration::from_millis(150));
    let after = check(&mut con, &["RL.TOKENBUCKET", "k", "1", "0.4"]);
    assert_eq!(after[..3], [1, 1, 0], "a new key after the old expiry");
}

/// An `RL.ALL` waiter holds each of its keys until its turn only as long as
/// that key's state needs: a tier that is new again sooner (here under
/// unchanged parameters) keeps its own expiry.
#[test]
fn an_rl_all_waiter_holds_a_key_no_longer_than_its_state_needs() {
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    let words = |extra: &[&'static str]| {
        let mut w = vec![
            "RL.ALL",
            "2",
            "fast",
            "slow",
            "TOKENBUCKET",
            "1",
            "20",
            "TOKENBUCKET",
            "1",
            "0.5",
        ];
        w.extend_from_slice(extra);
        w
    };
    assert_eq!(five(&mut con, &words(&[]))[0], 1);
    let fast = expiry_time(&mut con, "fast");
    let mut waiter = server.connect();
    let handle = thread::spawn(move || five(&mut waiter, &words(&["BLOCK", "5000"])));
    thread::sleep(Duration::from_millis(200));
    assert!(!handle.is_finished());
    assert!(!exists(&mut con, "fast"), "held past its expiry ({fast})");
    assert!(exists(&mut con, "slow"));
    assert_eq!(handle.join().unwrap()[0], 1);
}
