//! Partial grants (`COST n UPTO`) and refunds (`RL.REFUND`) on a real
//! server: the replies, what a refund gives back and where, the key's
//! expiry, waiters woken by a refund, every bad input refused with nothing
//! changed, and replicas, the AOF and RDB holding exactly the primary's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serial_test::serial;

/// `[allowed, limit, remaining, retry_after_ms, reset_after_ms, granted,
/// granted_at_ms]`.
fn grant(con: &mut redis::Connection, words: &[&str]) -> Vec<i64> {
    let reply = check(con, words);
    assert_eq!(reply.len(), 7, "{words:?}: {reply:?}");
    reply
}

fn refund(con: &mut redis::Connection, words: &[&str]) -> i64 {
    let mut all = vec!["RL.REFUND"];
    all.extend_from_slice(words);
    redis::cmd(all[0])
        .arg(&all[1..])
        .query(con)
        .unwrap_or_else(|e| panic!("{all:?}: {e}"))
}

#[test]
fn upto_grants_all_it_can_says_how_much_and_when() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let before = server_time_ms(&mut con);
    let r = grant(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "0.001", "COST", "6", "upto"],
    );
    let after = server_time_ms(&mut con);
    assert_eq!(&r[..6], &[1, 10, 4, 0, r[4], 6]);
    assert!(
        (before..=after).contains(&r[6]),
        "granted_at_ms {} in {before}..={after}",
        r[6]
    );
    let r = grant(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "0.001", "UPTO", "COST", "6"],
    );
    assert_eq!((r[0], r[2], r[5]), (1, 0, 4), "4 left: 4 granted");
    // Nothing left: a denial whose wait is for 1 token (1000 s at 0.001/s).
    let dumped = dump(&mut con, "k");
    let r = grant(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "0.001", "COST", "6", "UPTO"],
    );
    assert_eq!((r[0], r[2], r[5]), (0, 0, 0));
    assert!(
        (999_000..=1_000_000).contains(&r[3]),
        "retry_after_ms {}",
        r[3]
    );
    assert_eq!(
        dump(&mut con, "k"),
        dumped,
        "a grant of nothing changes nothing"
    );
}

#[test]
fn upto_with_peek_says_what_could_be_granted_and_creates_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let r = grant(
        &mut con,
        &["RL.GCRA", "g", "4", "10", "1s", "COST", "9", "UPTO", "PEEK"],
    );
    assert_eq!(&r[..6], &[1, 5, 5, 0, 0, 5]);
    assert!(!exists(&mut con, "g"));
    let r = grant(
        &mut con,
        &["RL.PEEK", "g", "GCRA", "4", "10", "1s", "COST", "2", "UPTO"],
    );
    assert_eq!(&r[..6], &[1, 5, 5, 0, 0, 2]);
    assert!(!exists(&mut con, "g"));
}

#[test]
fn every_counting_algorithm_grants_what_is_left() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (command, params) in [
        ("RL.TOKENBUCKET", vec!["5", "0.001"]),
        ("RL.GCRA", vec!["4", "1", "1h"]),
        ("RL.FIXEDWINDOW", vec!["5", "1h"]),
        ("RL.SLIDINGCOUNTER", vec!["5", "1h", "PRECISION", "4"]),
    ] {
        let key = format!("key:{command}");
        let mut words = vec![command, key.as_str()];
        words.extend(params.iter().copied());
        let with = |extra: &[&'static str]| {
            let mut w = words.clone();
            w.extend_from_slice(extra);
            w
        };
        check(&mut con, &with(&["COST", "3"]));
        let r = grant(&mut con, &with(&["COST", "4", "UPTO"]));
        assert_eq!((r[0], r[2], r[5]), (1, 0, 2), "{command}: 2 of 4");
        let r = grant(&mut con, &with(&["COST", "4", "UPTO"]));
        assert_eq!((r[0], r[5]), (0, 0), "{command}");
        assert!(r[3] > 0, "{command}: a true wait for 1 unit: {r:?}");
    }
}

#[test]
fn a_refund_goes_back_into_the_bucket_up_to_its_capacity_and_the_expiry_follows() {
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    let bucket = ["k", "TOKENBUCKET", "10", "0.01"];
    check(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "0.01", "COST", "8"],
    );
    let ttl = pttl(&mut con, "k");
    assert!(
        (790_000..=800_000).contains(&ttl),
        "8 tokens at 0.01/s: {ttl}"
    );
    assert_eq!(refund(&mut con, &[&bucket[..], &["5"]].concat()), 5);
    let r = check(&mut con, &["RL.TOKENBUCKET", "k", "10", "0.01", "PEEK"]);
    assert_eq!(r[2], 7);
    let ttl = pttl(&mut con, "k");
    assert!((290_000..=300_000).contains(&ttl), "3 missing: {ttl}");
    // More than is missing: up to the capacity only.
    assert_eq!(refund(&mut con, &[&bucket[..], &["50"]].concat()), 3);
    let r = check(&mut con, &["RL.TOKENBUCKET", "k", "10", "0.01", "PEEK"]);
    assert_eq!((r[2], r[4]), (10, 0));
    assert_eq!(refund(&mut con, &[&bucket[..], &["1"]].concat()), 0);
    // Never creates a key.
    assert_eq!(
        refund(&mut con, &["none", "TOKENBUCKET", "10", "1", "3"]),
        0
    );
    assert!(!exists(&mut con, "none"));
}

#[test]
fn a_gcra_refund_moves_the_tat_back_never_before_now() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // 1 an hour, bursts of 4: the limit is 5.
    check(&mut con, &["RL.GCRA", "g", "4", "1", "1h", "COST", "5"]);
    assert_eq!(refund(&mut con, &["g", "GCRA", "4", "1", "1h", "2"]), 2);
    let r = check(&mut con, &["RL.GCRA", "g", "4", "1", "1h", "PEEK"]);
    assert_eq!(r[2], 2);
    assert_eq!(refund(&mut con, &["g", "GCRA", "4", "1", "1h", "9"]), 3);
    let r = check(&mut con, &["RL.GCRA", "g", "4", "1", "1h", "PEEK"]);
    assert_eq!((r[2], r[4]), (5, 0), "a fresh key again");
}

#[test]
fn a_window_refund_goes_back_into_the_window_it_came_from_only() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let r = grant(
        &mut con,
        &["RL.FIXEDWINDOW", "w", "10", "1h", "COST", "8", "UPTO"],
    );
    let at = r[6].to_string();
    assert_eq!(
        refund(&mut con, &["w", "FIXEDWINDOW", "10", "1h", "3", "AT", &at]),
        3
    );
    let r = check(&mut con, &["RL.FIXEDWINDOW", "w", "10", "1h", "PEEK"]);
    assert_eq!(r[2], 5);
    // Never below zero.
    assert_eq!(
        refund(&mut con, &["w", "FIXEDWINDOW", "10", "1h", "99", "at", &at]),
        5
    );
    // A grant of the previous window gives nothing back to this one.
    check(&mut con, &["RL.FIXEDWINDOW", "w", "10", "1h", "COST", "4"]);
    let earlier = (at.parse::<i64>().unwrap() - 3_600_000).to_string();
    assert_eq!(
        refund(
            &mut con,
            &["w", "FIXEDWINDOW", "10", "1h", "4", "AT", &earlier]
        ),
        0
    );
    // A sliding counter: the sub-window the grant was counted in.
    let r = grant(
        &mut con,
        &["RL.SLIDINGCOUNTER", "s", "10", "1h", "COST", "6", "UPTO"],
    );
    let at = r[6].to_string();
    assert_eq!(
        refund(
            &mut con,
            &["s", "SLIDINGCOUNTER", "10", "1h", "9", "AT", &at]
        ),
        6
    );
    let r = check(&mut con, &["RL.SLIDINGCOUNTER", "s", "10", "1h", "PEEK"]);
    assert_eq!(r[2], 10);
}

#[test]
fn a_refund_under_other_parameters_gives_nothing_back() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "0.01", "COST", "8"],
    );
    let dumped = dump(&mut con, "k");
    assert_eq!(
        refund(&mut con, &["k", "TOKENBUCKET", "20", "0.01", "5"]),
        0
    );
    assert_eq!(dump(&mut con, "k"), dumped);
}

#[test]
fn bad_inputs_are_refused_and_change_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(&mut con, &["RL.FIXEDWINDOW", "w", "10", "1h", "COST", "8"]);
    check(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "0.01", "COST", "8"],
    );
    run(&mut con, &["SET", "str", "x"]).unwrap();
    let before: Vec<_> = ["w", "k", "str"]
        .iter()
        .map(|k| dump(&mut con, k))
        .collect();
    let cases: &[(&[&str], &str)] = &[
        (&["RL.TOKENBUCKET", "k", "10", "0.01", "UPTO"], "ERR syntax error: UPTO needs COST n: the most to grant"),
        (&["RL.TOKENBUCKET", "k", "10", "0.01", "COST", "2", "UPTO", "upto"], "ERR syntax error: UPTO given more than once"),
        (&["RL.TOKENBUCKET", "k", "10", "0.01", "COST", "2", "UPTO", "SHADOW"], "ERR syntax error: UPTO and SHADOW cannot be given together"),
        (&["RL.SLIDINGLOG", "new", "10", "1h", "COST", "2", "UPTO"], "ERR syntax error: UPTO is offered by TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA only"),
        (&["RL.LEAKYBUCKET", "new", "10", "1", "COST", "2", "UPTO"], "ERR syntax error: UPTO is offered by TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA only"),
        (&["RL.PEEK", "new", "SLIDINGLOG", "10", "1h", "COST", "2", "UPTO"], "ERR syntax error: UPTO is offered by TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA only"),
        (&["RL.ALL", "1", "new", "TOKENBUCKET", "10", "1", "COST", "2", "UPTO"], "ERR syntax error: UPTO is not offered by RL.ALL (all or nothing): lease from one key"),
        (&["CL.THROTTLE", "new", "1", "1", "1", "UPTO"], "ERR quantity must be an integer"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01"], "ERR wrong number of arguments for 'rl.refund' command"),
        (&["RL.REFUND", "k"], "ERR wrong number of arguments for 'rl.refund' command"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01", "0"], "ERR amount must be an integer from 1 to 9007199254740991"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01", "x"], "ERR amount must be an integer from 1 to 9007199254740991"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "0", "0.01", "1"], "ERR capacity must be an integer from 1 to 9007199254740991"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01", "1", "FOO"], "ERR syntax error: unknown option 'FOO'"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01", "1", "AT"], "ERR syntax error: AT needs a value"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01", "1", "AT", "-1"], "ERR AT must be a Unix time in milliseconds (a grant's granted_at_ms)"),
        (&["RL.REFUND", "k", "TOKENBUCKET", "10", "0.01", "1", "AT", "1", "AT", "1"], "ERR syntax error: AT given more than once"),
        (&["RL.REFUND", "w", "FIXEDWINDOW", "10", "1h", "1"], "ERR syntax error: FIXEDWINDOW refunds need AT ms: the granted_at_ms of the grant, so the units go back into its window"),
        (&["RL.REFUND", "w", "slidingcounter", "10", "1h", "1"], "ERR syntax error: SLIDINGCOUNTER refunds need AT ms: the granted_at_ms of the grant, so the units go back into its window"),
        (&["RL.REFUND", "w", "SLIDINGLOG", "10", "1h", "1"], "ERR syntax error: SLIDINGLOG takes no refunds (TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA do)"),
        (&["RL.REFUND", "w", "LEAKYBUCKET", "10", "1", "1"], "ERR syntax error: LEAKYBUCKET takes no refunds (TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA do)"),
        (&["RL.REFUND", "w", "BUCKET", "10", "1", "1"], "ERR syntax error: unknown algorithm 'BUCKET' (expected TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW, SLIDINGLOG, LEAKYBUCKET or GCRA)"),
        (&["RL.REFUND", "str", "TOKENBUCKET", "10", "0.01", "1"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.REFUND", "k", "GCRA", "1", "1", "1h", "1"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.REFUND", "k", "FIXEDWINDOW", "10", "1h", "1", "AT", "1"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.TOKENBUCKET", "w", "10", "1", "COST", "2", "UPTO"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
    ];
    for (words, expected) in cases {
        assert_eq!(&error_of(&mut con, words), expected, "{words:?}");
    }
    let after: Vec<_> = ["w", "k", "str"]
        .iter()
        .map(|k| dump(&mut con, k))
        .collect();
    assert_eq!(before, after, "an error changes nothing");
    assert!(!exists(&mut con, "new"));
}

#[test]
fn a_grant_with_block_waits_for_at_least_one_and_takes_what_is_there() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // 5 at once, 10 a second back.
    check(&mut con, &["RL.TOKENBUCKET", "b", "5", "10", "COST", "5"]);
    let start = Instant::now();
    let r = grant(
        &mut con,
        &[
            "RL.TOKENBUCKET",
            "b",
            "5",
            "10",
            "COST",
            "5",
            "UPTO",
            "BLOCK",
            "2000",
        ],
    );
    let waited = start.elapsed();
    assert_eq!(r[0], 1, "{r:?}");
    assert!((1..=5).contains(&r[5]), "granted {}", r[5]);
    assert!(waited >= Duration::from_millis(50), "waited {waited:?}");
    assert!(waited < Duration::from_millis(1500), "waited {waited:?}");
}

#[test]
fn a_refund_wakes_a_waiter_at_once() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // One token in about 3 s: the waiter waits for it, unless a refund
    // serves it first.
    check(&mut con, &["RL.TOKENBUCKET", "b", "5", "0.34", "COST", "5"]);
    let port = server.port;
    let waiter = std::thread::spawn(move || {
        let mut con = connect_port(port).unwrap();
        let start = Instant::now();
        let r = check(
            &mut con,
            &[
                "RL.TOKENBUCKET",
                "b",
                "5",
                "0.34",
                "COST",
                "4",
                "UPTO",
                "BLOCK",
                "5000",
            ],
        );
        (r, start.elapsed())
    });
    wait_for("the waiter", Duration::from_secs(5), || {
        info_field(&mut con, "ratelimit", "ratelimit_blocked_clients") == "1"
    });
    assert_eq!(refund(&mut con, &["b", "TOKENBUCKET", "5", "0.34", "3"]), 3);
    let (r, waited) = waiter.join().unwrap();
    assert_eq!((r[0], r[5]), (1, 3), "{r:?}");
    assert!(
        waited < Duration::from_millis(1500),
        "woken by the refund, not its deadline: {waited:?}"
    );
}

/// Grants and refunds of every kind on a few keys, as a client leasing
/// quota would send them.
fn traffic(con: &mut redis::Connection, rounds: usize) {
    for n in 0..rounds {
        for (i, (command, params)) in [
            ("RL.TOKENBUCKET", vec!["50", "0.5"]),
            ("RL.GCRA", vec!["49", "30", "1m"]),
            ("RL.FIXEDWINDOW", vec!["50", "1h"]),
            ("RL.SLIDINGCOUNTER", vec!["50", "1h", "PRECISION", "6"]),
        ]
        .iter()
        .enumerate()
        {
            let key = format!("p{i}");
            let cost = (n % 7 + 1).to_string();
            let mut words = vec![*command, key.as_str()];
            words.extend(params.iter().copied());
            words.extend(["COST", &cost, "UPTO"]);
            let r = grant(con, &words);
            if r[5] > 1 && n % 2 == 0 {
                let mut back = vec![key.as_str(), command.trim_start_matches("RL.")];
                back.extend(params.iter().copied());
                let amount = (r[5] / 2).to_string();
                let at = r[6].to_string();
                back.extend([amount.as_str(), "AT", &at]);
                refund(con, &back);
            }
        }
    }
}

fn digests(con: &mut redis::Connection) -> Vec<String> {
    (0..4)
        .map(|i| {
            let key = format!("p{i}");
            format!(
                "{key} {} {}",
                digest_value(con, &key),
                expiry_time(con, &key)
            )
        })
        .collect()
}

#[test]
#[serial]
fn a_replica_holds_exactly_the_primarys_state() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let (mut p, mut r) = (primary.connect(), replica.connect());
    traffic(&mut p, 40);
    let sent: i64 = info_field(&mut p, "replication", "master_repl_offset")
        .parse()
        .unwrap();
    wait_for("the replica to catch up", Duration::from_secs(10), || {
        info_field(&mut r, "replication", "master_repl_offset")
            .parse::<i64>()
            .unwrap()
            >= sent
    });
    let on_primary = digests(&mut p);
    assert!(
        on_primary.iter().all(|l| !l.contains(" -")),
        "every key has an expiry: {on_primary:?}"
    );
    assert_eq!(on_primary, digests(&mut r));
}

#[test]
#[serial]
fn the_aof_and_rdb_restore_exactly_the_same_state() {
    let mut server = Server::start(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut con = server.connect();
    traffic(&mut con, 40);
    let before = digests(&mut con);
    // RDB: save and load.
    run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(digests(&mut con), before, "after DEBUG RELOAD");
    // The AOF of grants and refunds, replayed at start.
    run(&mut con, &["CONFIG", "SET", "appendfsync", "always"]).unwrap();
    server.shutdown_nosave();
    server.relaunch_with(&[]);
    let mut con = server.connect();
    assert_eq!(digests(&mut con), before, "after a restart from the AOF");
}
