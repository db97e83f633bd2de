//! `RL.TOP`: the keys denied most on a server, from the sketch every denial
//! of a client's request feeds; against real servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};
use serial_test::serial;

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("expected a key, got {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// `RL.TOP <args>`: its flat reply, read as key, count pairs.
fn top(con: &mut Connection, args: &[&str]) -> Vec<(String, i64)> {
    let words = [&["RL.TOP"][..], args].concat();
    let Value::Array(items) = run(con, &words).unwrap() else {
        panic!("RL.TOP did not reply an array");
    };
    assert_eq!(items.len() % 2, 0, "{items:?}");
    items
        .chunks(2)
        .map(|pair| (text(&pair[0]), int(&pair[1])))
        .collect()
}

/// `RL.TOP <count> WITHERROR`: key, count, error triples.
fn top_with_error(con: &mut Connection, count: usize) -> Vec<(String, i64, i64)> {
    let Value::Array(items) = run(con, &["RL.TOP", &count.to_string(), "WITHERROR"]).unwrap()
    else {
        panic!("RL.TOP did not reply an array");
    };
    assert_eq!(items.len() % 3, 0, "{items:?}");
    items
        .chunks(3)
        .map(|t| (text(&t[0]), int(&t[1]), int(&t[2])))
        .collect()
}

/// The first element of a decision's reply (`allowed`; `limited` for
/// `CL.THROTTLE`), whatever follows it.
fn first(con: &mut Connection, words: &[&str]) -> i64 {
    match run(con, words).unwrap() {
        Value::Array(items) => int(&items[0]),
        other => panic!("{words:?} replied {other:?}"),
    }
}

fn pairs(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
    rows.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// A denial of `key` without a trace in the keyspace: a cost above the
/// limit is denied at once and creates nothing.
fn deny(con: &mut Connection, key: &str) {
    let reply = check(con, &["RL.TOKENBUCKET", key, "1", "1", "COST", "2"]);
    assert_eq!(reply[0], 0, "{key} was not denied");
}

fn info_number(con: &mut Connection, field: &str) -> i64 {
    info_field(con, "ratelimit", &format!("ratelimit_{field}"))
        .parse()
        .unwrap()
}

fn config_set(con: &mut Connection, name: &str, value: &str) {
    run(con, &["CONFIG", "SET", name, value]).unwrap();
}

#[test]
fn denials_are_listed_per_key_most_first_as_key_count_pairs() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(top(&mut con, &[]), pairs(&[]), "nothing denied yet");
    for (key, denials) in [("b", 3), ("a", 5), ("c", 1)] {
        check(&mut con, &["RL.TOKENBUCKET", key, "1", "0.001"]); // allowed
        for _ in 0..denials {
            let reply = check(&mut con, &["RL.TOKENBUCKET", key, "1", "0.001"]);
            assert_eq!(reply[0], 0);
        }
    }
    assert_eq!(top(&mut con, &[]), pairs(&[("a", 5), ("b", 3), ("c", 1)]));
    assert_eq!(top(&mut con, &["2"]), pairs(&[("a", 5), ("b", 3)]));
    assert_eq!(
        top(&mut con, &["1000000"]).len(),
        3,
        "at most what is tracked"
    );
    assert_eq!(info_number(&mut con, "top_keys_tracked"), 3);
    assert_eq!(info_number(&mut con, "top_denials_counted"), 9);
    assert_eq!(
        top_with_error(&mut con, 10),
        [("a", 5, 0), ("b", 3, 0), ("c", 1, 0)].map(|(k, n, e)| (k.to_string(), n, e)),
        "exact while every key has a slot"
    );
}

#[test]
fn allowed_requests_and_peeks_are_not_counted() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for _ in 0..3 {
        check(&mut con, &["RL.TOKENBUCKET", "ok", "10", "1"]);
    }
    check(&mut con, &["RL.TOKENBUCKET", "full", "1", "0.001"]);
    // Each of these would be denied, but only looks.
    let peeks: [&[&str]; 4] = [
        &["RL.TOKENBUCKET", "full", "1", "0.001", "PEEK"],
        &["RL.PEEK", "full", "TOKENBUCKET", "1", "0.001"],
        &["RL.ALL", "1", "full", "TOKENBUCKET", "1", "0.001", "PEEK"],
        &["RL.TOKENBUCKET", "x", "1", "1", "COST", "2", "PEEK"],
    ];
    for words in peeks {
        assert_eq!(first(&mut con, words), 0, "{words:?}");
    }
    assert_eq!(top(&mut con, &[]), pairs(&[]));
    assert_eq!(info_number(&mut con, "top_denials_counted"), 0);
}

/// Each command that decides requests, with parameters under which a
/// request is denied at once: every algorithm with a limit of 1 asked for 2,
/// and redis-cell's command.
fn denied() -> Vec<Spec> {
    let mut denied = every_algorithm(1, 60_000);
    for spec in &mut denied {
        spec.params.extend(["COST".to_string(), "2".to_string()]);
    }
    denied.push(Spec::other("CL.THROTTLE", &["0", "1", "60", "2"]));
    denied
}

#[test]
fn every_command_that_decides_counts_its_denials() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let mut expected = vec![];
    for (i, spec) in denied().iter().enumerate() {
        let command = spec.command.as_str();
        let key = format!("{}:{i}", command.to_ascii_lowercase());
        let words = spec.words(&key, &[]);
        let reply = check(&mut con, &words);
        let denied = if command == "CL.THROTTLE" { 1 } else { 0 };
        assert_eq!(reply[0], denied, "{words:?}");
        expected.push((key, 1));
    }
    // RL.ACQUIRE: the second of one slot is refused.
    run(&mut con, &["RL.ACQUIRE", "jobs", "1", "1h"]).unwrap();
    run(&mut con, &["RL.ACQUIRE", "jobs", "1", "1h"]).unwrap();
    expected.push(("jobs".into(), 1));
    expected.sort();
    assert_eq!(top(&mut con, &["100"]), expected);
}

#[test]
fn rl_all_counts_the_key_of_each_tier_that_denied_and_no_other() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let call = [
        "RL.ALL",
        "3",
        "{u}:s",
        "{u}:m",
        "{u}:h",
        "TOKENBUCKET",
        "10",
        "1",
        "FIXEDWINDOW",
        "2",
        "1h",
        "SLIDINGLOG",
        "2",
        "1h",
    ];
    for _ in 0..4 {
        run(&mut con, &call).unwrap(); // the last two are denied by two tiers
    }
    assert_eq!(top(&mut con, &[]), pairs(&[("{u}:h", 2), ("{u}:m", 2)]));
    assert_eq!(info_number(&mut con, "top_denials_counted"), 4);
}

#[test]
fn a_request_that_waits_and_times_out_is_one_denial() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["RL.ACQUIRE", "slot", "1", "1h"]).unwrap();
    let reply = first(&mut con, &["RL.ACQUIRE", "slot", "1", "1h", "BLOCK", "50"]);
    assert_eq!(reply, 0);
    assert_eq!(top(&mut con, &[]), pairs(&[("slot", 1)]));
}

#[test]
fn witherror_bounds_each_count_once_keys_share_slots() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    config_set(&mut con, "ratelimit.top-keys", "2");
    for key in ["a", "a", "a", "b", "b", "c"] {
        deny(&mut con, key);
    }
    // c took b's slot (count 2): c's 3 may hold 2 of b's denials.
    assert_eq!(
        top_with_error(&mut con, 10),
        [("a", 3, 0), ("c", 3, 2)].map(|(k, n, e)| (k.to_string(), n, e))
    );
    assert_eq!(
        run(&mut con, &["RL.TOP", "withError"]).unwrap(),
        run(&mut con, &["RL.TOP", "10", "WITHERROR"]).unwrap()
    );
}

#[test]
fn reset_starts_the_counts_over() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    deny(&mut con, "a");
    deny(&mut con, "a");
    assert_eq!(run(&mut con, &["RL.TOP", "reset"]).unwrap(), Value::Okay);
    assert_eq!(top(&mut con, &[]), pairs(&[]));
    assert_eq!(info_number(&mut con, "top_keys_tracked"), 0);
    assert_eq!(info_number(&mut con, "top_denials_counted"), 0);
    deny(&mut con, "b");
    assert_eq!(top(&mut con, &[]), pairs(&[("b", 1)]));
}

#[test]
fn top_keys_0_turns_counting_off_and_a_size_again_counts_from_then() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    deny(&mut con, "before");
    config_set(&mut con, "ratelimit.top-keys", "0");
    deny(&mut con, "while-off");
    assert_eq!(top(&mut con, &[]), pairs(&[]));
    assert_eq!(top(&mut con, &["WITHERROR"]).len(), 0);
    assert_eq!(info_number(&mut con, "top_keys_tracked"), 0);
    assert_eq!(info_number(&mut con, "top_denials_counted"), 0);
    assert_eq!(run(&mut con, &["RL.TOP", "RESET"]).unwrap(), Value::Okay);
    config_set(&mut con, "ratelimit.top-keys", "1000");
    deny(&mut con, "after");
    assert_eq!(top(&mut con, &[]), pairs(&[("after", 1)]));
}

#[test]
fn a_new_size_starts_over_and_bounds_the_keys_tracked_and_the_same_size_keeps_them() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    deny(&mut con, "old");
    config_set(&mut con, "ratelimit.top-keys", "3");
    assert_eq!(top(&mut con, &[]), pairs(&[]), "a new size starts over");
    for key in ["a", "a", "a", "b", "b", "c", "d", "e"] {
        deny(&mut con, key);
    }
    assert_eq!(info_number(&mut con, "top_keys_tracked"), 3);
    assert_eq!(info_number(&mut con, "top_denials_counted"), 8);
    assert_eq!(top(&mut con, &["1"]), pairs(&[("a", 3)]));
    let listed = top(&mut con, &[]);
    config_set(&mut con, "ratelimit.top-keys", "3");
    assert_eq!(top(&mut con, &[]), listed, "the same size keeps the counts");
    for bad in ["-1", "100001", "x", "1.5"] {
        assert!(
            run(&mut con, &["CONFIG", "SET", "ratelimit.top-keys", bad]).is_err(),
            "top-keys {bad} accepted"
        );
    }
    assert_eq!(
        top(&mut con, &[]),
        listed,
        "a refused value changes nothing"
    );
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.top-keys")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, ["ratelimit.top-keys", "3"]);
}

#[test]
fn top_keys_is_settable_by_a_loadmodule_argument_and_in_the_configuration() {
    for (extra, size) in [
        (&["top-keys", "2"][..], "2"),
        (&["--ratelimit.top-keys", "3"], "3"),
    ] {
        let server = Server::start(extra);
        let mut con = server.connect();
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("ratelimit.top-keys")
            .query(&mut con)
            .unwrap();
        assert_eq!(got[1], size, "{extra:?}");
        for key in ["a", "b", "c", "d"] {
            deny(&mut con, key);
        }
        assert_eq!(
            info_number(&mut con, "top_keys_tracked").to_string(),
            size,
            "{extra:?}"
        );
    }
}

/// A stream of denials over many distinct keys (each denied once) with a
/// few heavy hitters among them, in a scrambled order: the heavy hitters
/// are the top, each true count within its listed bounds, every error at
/// most N / m.
#[test]
#[serial(heavy)]
fn heavy_hitters_among_many_keys_are_listed_first_within_the_bound() {
    const SLOTS: i64 = 100;
    const HEAVY: [(&str, i64); 5] = [
        ("heavy:a", 1000),
        ("heavy:b", 800),
        ("heavy:c", 600),
        ("heavy:d", 400),
        ("heavy:e", 300),
    ];
    const TAIL: usize = 15_000;
    let server = Server::start(&["top-keys", &SLOTS.to_string()]);
    let mut con = server.connect();
    let mut stream: Vec<String> = (0..TAIL).map(|i| format!("tail:{i}")).collect();
    for (key, n) in HEAVY {
        stream.extend((0..n).map(|_| key.to_string()));
    }
    // A fixed shuffle (an LCG), so a failure replays the same stream.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..stream.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        stream.swap(i, (state >> 33) as usize % (i + 1));
    }
    for chunk in stream.chunks(1000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("RL.TOKENBUCKET")
                .arg(key)
                .arg(1)
                .arg(1)
                .arg("COST")
                .arg(2)
                .ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
    }
    let total = stream.len() as i64;
    assert_eq!(info_number(&mut con, "top_denials_counted"), total);
    assert_eq!(info_number(&mut con, "top_keys_tracked"), SLOTS);
    let listed = top_with_error(&mut con, HEAVY.len());
    let keys: Vec<&str> = listed.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys, HEAVY.map(|(k, _)| k), "{listed:?}");
    for ((key, count, error), (_, truth)) in listed.iter().zip(HEAVY) {
        assert!(
            count - error <= truth && truth <= *count,
            "{key}: {truth} outside [{}, {count}]",
            count - error
        );
        assert!(error * SLOTS <= total, "{key}: error {error} > N/m");
    }
    let everything = top_with_error(&mut con, 1_000_000);
    assert_eq!(everything.len() as i64, SLOTS);
    assert_eq!(
        everything.iter().map(|(_, c, _)| c).sum::<i64>(),
        total,
        "the counts add up to the denials counted"
    );
}

/// Replays run what a primary decided through the same code, but only a
/// client's request is counted: a replica whose own writes (allowed by
/// `replica-read-only no`) drained a key applies its primary's allowed
/// requests on it as denials, and counts none of them.
#[test]
#[serial(heavy)]
fn a_replica_counts_none_of_the_replays_it_applies() {
    let primary = Server::start(&[]);
    let replica = Server::start(&["--replica-read-only", "no"]);
    let mut r = replica.connect();
    run(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    )
    .unwrap();
    wait_for("the replica link", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up"
    });
    let mut con = primary.connect();
    check(&mut r, &["RL.TOKENBUCKET", "k", "5", "0.001", "COST", "5"]); // drained here only
    for _ in 0..3 {
        assert_eq!(
            check(&mut con, &["RL.TOKENBUCKET", "k", "5", "0.001"])[0],
            1
        );
    }
    deny(&mut con, "denied-on-the-primary");
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);
    assert_eq!(top(&mut r, &[]), pairs(&[]), "the replica counted a replay");
    assert_eq!(info_number(&mut r, "top_denials_counted"), 0);
    assert_eq!(top(&mut con, &[]), pairs(&[("denied-on-the-primary", 1)]));
    // The replica answers for its own clients' denials.
    deny(&mut r, "denied-on-the-replica");
    assert_eq!(top(&mut r, &[]), pairs(&[("denied-on-the-replica", 1)]));
}

#[test]
fn a_read_only_replica_answers_rl_top() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut r = replica.connect();
    assert_eq!(top(&mut r, &[]), pairs(&[]));
    assert_eq!(run(&mut r, &["RL.TOP", "RESET"]).unwrap(), Value::Okay);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    deny(&mut con, "a");
    let count = "ERR count must be an integer from 1 to 9007199254740991";
    for (words, expected) in [
        (&["0"][..], count),
        (&["-1"], count),
        (&["abc"], count),
        (&["5", "extra"], "ERR syntax error: unknown option 'extra'"),
        (
            &["5", "WITHERROR", "WITHERROR"],
            "ERR syntax error: WITHERROR given more than once",
        ),
        (
            &["RESET", "extra"],
            "ERR syntax error: RESET takes no other argument",
        ),
        (&["5", "RESET"], "ERR syntax error: unknown option 'RESET'"),
    ] {
        let call = [&["RL.TOP"][..], words].concat();
        assert_eq!(error_of(&mut con, &call), expected, "{call:?}");
    }
    assert_eq!(top(&mut con, &[]), pairs(&[("a", 1)]), "nothing changed");
}

/// What a slot costs the server: `used_memory` before and after a sketch
/// of 20,000 slots fills with keys of 16 and of 64 bytes (`cargo test
/// --test top memory -- --nocapture` prints it; the README quotes it).
#[test]
#[serial(heavy)]
fn memory_per_slot() {
    const SLOTS: usize = 20_000;
    let server = Server::start(&["top-keys", &SLOTS.to_string()]);
    let mut con = server.connect();
    let used =
        |con: &mut Connection| -> i64 { info_field(con, "memory", "used_memory").parse().unwrap() };
    let mut report = vec![];
    for length in [16, 64] {
        run(&mut con, &["RL.TOP", "RESET"]).unwrap();
        let before = used(&mut con);
        for chunk in (0..SLOTS).collect::<Vec<_>>().chunks(1000) {
            let mut pipe = redis::pipe();
            for i in chunk {
                let key = format!("{i:0length$}");
                pipe.cmd("RL.TOKENBUCKET")
                    .arg(key)
                    .arg(1)
                    .arg(1)
                    .arg("COST")
                    .arg(2)
                    .ignore();
            }
            pipe.query::<()>(&mut con).unwrap();
        }
        assert_eq!(info_number(&mut con, "top_keys_tracked"), SLOTS as i64);
        let per_slot = (used(&mut con) - before) as f64 / SLOTS as f64;
        report.push(format!("{length}-byte keys: {per_slot:.0} B a slot"));
        assert!(
            per_slot <= 160.0 + length as f64,
            "{per_slot} B a slot with {length}-byte keys"
        );
    }
    println!("RL.TOP sketch, {SLOTS} slots: {}", report.join(", "));
}
