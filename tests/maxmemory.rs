//! At `maxmemory` (with `noeviction`) the limiter keeps deciding: what needs
//! no new memory (peeks, denials, updates of a key in place) is answered;
//! only what would create a key or grow its state is refused, with Redis's
//! own OOM error, and changes nothing. Under an eviction policy, a new key
//! is refused only when Redis would refuse a write of its own (nothing left
//! to evict), never while eviction makes room.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// A server at `maxmemory`: keys made first, then the limit set just below
/// what is used.
fn server_at_maxmemory(keys: &[&[&str]]) -> (Server, redis::Connection) {
    let server = Server::start(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.connect();
    for words in keys {
        run(&mut con, words).unwrap();
    }
    let used: i64 = info_field(&mut con, "memory", "used_memory")
        .parse()
        .unwrap();
    run(
        &mut con,
        &[
            "CONFIG",
            "SET",
            "maxmemory",
            &(used - 200_000).max(1).to_string(),
        ],
    )
    .unwrap();
    let oom = error_of(&mut con, &["SET", "probe", "x"]);
    assert!(
        oom.starts_with("OOM"),
        "the server is not at maxmemory: {oom}"
    );
    (server, con)
}

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

#[test]
fn existing_keys_are_still_decided_in_place_at_maxmemory() {
    let (_server, mut con) = server_at_maxmemory(&[
        &["RL.TOKENBUCKET", "tb", "2", "0.001"],
        &["RL.GCRA", "g", "1", "1", "1h"],
        &["RL.FIXEDWINDOW", "fw", "3", "1h"],
        &["RL.SLIDINGCOUNTER", "sc", "3", "1h"],
        &["RL.LEAKYBUCKET", "lb", "3", "0.001"],
        &["CL.THROTTLE", "cl", "2", "1", "3600"],
    ]);
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "tb", "2", "0.001"])[..3],
        [1, 2, 0]
    );
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "tb", "2", "0.001"])[0],
        0,
        "denied"
    );
    assert_eq!(check(&mut con, &["RL.GCRA", "g", "1", "1", "1h"])[0], 1);
    assert_eq!(check(&mut con, &["RL.FIXEDWINDOW", "fw", "3", "1h"])[0], 1);
    assert_eq!(
        check(&mut con, &["RL.SLIDINGCOUNTER", "sc", "3", "1h"])[0],
        1
    );
    assert_eq!(
        check(&mut con, &["RL.LEAKYBUCKET", "lb", "3", "0.001"])[0],
        1
    );
    assert_eq!(
        check(&mut con, &["CL.THROTTLE", "cl", "2", "1", "3600"])[0],
        0,
        "allowed"
    );
    assert_eq!(
        check(&mut con, &["CL.THROTTLE", "cl", "2", "1", "3600", "0"])[0],
        0
    );
}

#[test]
fn peeks_and_denials_are_answered_for_any_key_at_maxmemory() {
    let (_server, mut con) = server_at_maxmemory(&[&["RL.FIXEDWINDOW", "full", "1", "1h"]]);
    let r = check(&mut con, &["RL.TOKENBUCKET", "new", "10", "1", "PEEK"]);
    assert_eq!(r[..3], [1, 10, 10]);
    assert_eq!(
        check(&mut con, &["RL.PEEK", "new", "TOKENBUCKET", "10", "1"])[..3],
        [1, 10, 10]
    );
    assert_eq!(
        check(&mut con, &["CL.THROTTLE", "new", "4", "1", "60", "0"])[0],
        0
    );
    let denied = check(&mut con, &["RL.FIXEDWINDOW", "full", "1", "1h"]);
    assert_eq!(denied[..3], [0, 1, 0]);
    let never = check(
        &mut con,
        &["RL.TOKENBUCKET", "new", "10", "1", "COST", "11"],
    );
    assert_eq!(
        (never[0], never[3]),
        (0, -1),
        "a cost that can never pass is denied, not refused"
    );
    assert!(!exists(&mut con, "new"));
}

/// A full sliding log in a later millisecond: a take would add an entry,
/// but the request is denied, which needs no memory: answered, on one key
/// as through `RL.ALL` (one rule for both), and the log is unchanged.
#[test]
fn a_denial_of_a_log_a_take_would_grow_is_answered_at_maxmemory() {
    let (_server, mut con) = server_at_maxmemory(&[&["RL.SLIDINGLOG", "full", "1", "1h"]]);
    let log = dump(&mut con, "full");
    std::thread::sleep(std::time::Duration::from_millis(3));
    let denied = check(&mut con, &["RL.SLIDINGLOG", "full", "1", "1h"]);
    assert_eq!(denied[..3], [0, 1, 0], "one key's check");
    // RL.ALL answers the combined decision's five numbers, then each tier's.
    let (allowed, limit, remaining, _, _, tiers): (i64, i64, i64, i64, i64, Vec<Vec<i64>>) =
        redis::cmd("RL.ALL")
            .arg(&["1", "full", "SLIDINGLOG", "1", "1h"])
            .query(&mut con)
            .unwrap();
    assert_eq!([allowed, limit, remaining], [0, 1, 0], "RL.ALL");
    assert_eq!(tiers[0][..3], [0, 1, 0], "RL.ALL's tier");
    assert_eq!(dump(&mut con, "full"), log);
}

#[test]
fn what_would_create_a_key_or_grow_its_state_is_refused_and_changes_nothing() {
    let (_server, mut con) = server_at_maxmemory(&[
        &["RL.SLIDINGLOG", "log", "10", "1h"],
        &["RL.ACQUIRE", "leases", "5", "1h", "ID", "held"],
        &["RL.TOKENBUCKET", "tb", "10", "0.001"],
    ]);
    for words in [
        &["RL.TOKENBUCKET", "new", "10", "1"][..],
        &["CL.THROTTLE", "new", "4", "1", "60"],
        &["RL.ACQUIRE", "new", "3", "1m"],
        &["RL.ACQUIRE", "leases", "5", "1h", "ID", "another"],
        &[
            "RL.ALL",
            "2",
            "tb",
            "new",
            "TOKENBUCKET",
            "10",
            "0.001",
            "FIXEDWINDOW",
            "5",
            "1m",
        ],
    ] {
        assert_eq!(error_of(&mut con, words), OOM, "{words:?}");
    }
    assert!(!exists(&mut con, "new"));
    let before = dump(&mut con, "tb");
    let _ = check(&mut con, &["RL.TOKENBUCKET", "tb", "10", "0.001", "PEEK"]);
    assert_eq!(dump(&mut con, "tb"), before, "RL.ALL took from no tier");
    // A second request in a millisecond with an entry adds to its count
    // (in place); one in a later millisecond needs an entry: refused.
    let log = dump(&mut con, "log");
    std::thread::sleep(std::time::Duration::from_millis(3));
    assert_eq!(
        error_of(&mut con, &["RL.SLIDINGLOG", "log", "10", "1h"]),
        OOM
    );
    assert_eq!(dump(&mut con, "log"), log);
    // Renewing a lease takes no new slot.
    let (renewed, _) = (
        run(&mut con, &["RL.ACQUIRE", "leases", "5", "1h", "ID", "held"]).unwrap(),
        (),
    );
    let first: Vec<redis::Value> = redis::from_redis_value(renewed).unwrap();
    assert_eq!(first[0], redis::Value::Int(1));
    assert_eq!(
        run(&mut con, &["RL.RELEASE", "leases", "held"]).unwrap(),
        redis::Value::Int(1)
    );
}

/// A replica at its own `maxmemory` still applies what its primary decided.
#[test]
fn a_replica_never_refuses_what_its_primary_decided() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut r = replica.connect();
    let used: i64 = info_field(&mut r, "memory", "used_memory").parse().unwrap();
    run(&mut r, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).unwrap();
    run(
        &mut r,
        &[
            "CONFIG",
            "SET",
            "maxmemory",
            &(used - 200_000).max(1).to_string(),
        ],
    )
    .unwrap();
    let mut p = primary.connect();
    for i in 0..20 {
        check(&mut p, &["RL.TOKENBUCKET", &format!("k{i}"), "10", "1"]);
        check(&mut p, &["RL.SLIDINGLOG", "log", "100", "1h"]);
    }
    let sent: i64 = info_field(&mut p, "replication", "master_repl_offset")
        .parse()
        .unwrap();
    wait_for(
        "the replica to catch up",
        std::time::Duration::from_secs(10),
        || {
            info_field(&mut r, "replication", "master_repl_offset")
                .parse::<i64>()
                .unwrap()
                >= sent
        },
    );
    for key in ["k0", "k19", "log"] {
        assert_eq!(
            digest_value(&mut p, key),
            digest_value(&mut r, key),
            "{key}"
        );
    }
}

/// Sends `n` commands made by `words_of(i)` down one connection, pipelined
/// in batches, and counts the error replies (the replies here are simple
/// strings, errors, or arrays of integers).
fn errors_of(port: u16, n: usize, words_of: impl Fn(usize) -> Vec<String>) -> usize {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut errors = 0;
    let mut line = String::new();
    for batch in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut out = Vec::new();
        for &i in batch {
            let words = words_of(i);
            out.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
            for w in &words {
                out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
            }
        }
        writer.write_all(&out).unwrap();
        for _ in batch {
            line.clear();
            reader.read_line(&mut line).unwrap();
            match line.as_bytes().first() {
                Some(b'-') => errors += 1,
                Some(b'*') => {
                    let len: usize = line[1..].trim().parse().unwrap();
                    for _ in 0..len {
                        line.clear();
                        reader.read_line(&mut line).unwrap();
                    }
                }
                _ => {}
            }
        }
    }
    errors
}

#[test]
fn under_every_policy_new_keys_are_refused_no_more_often_than_set_is() {
    const N: usize = 40_000;
    let policies = [
        "noeviction",
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ];
    for policy in policies {
        let server = Server::start(&["--maxmemory", "4mb", "--maxmemory-policy", policy]);
        let mut con = server.connect();
        let mut errors = Vec::new();
        type WordsOf = fn(usize) -> Vec<String>;
        let kinds: [(&str, WordsOf); 3] = [
            // The yardstick: Redis's own write of a new key, with an expiry
            // (as every limiter key has), so `volatile-*` may evict it.
            ("SET", |i| {
                ["SET", &format!("k{i}"), &"x".repeat(100), "EX", "3600"]
                    .map(String::from)
                    .to_vec()
            }),
            ("RL.TOKENBUCKET", |i| {
                ["RL.TOKENBUCKET", &format!("k{i}"), "10", "1"]
                    .map(String::from)
                    .to_vec()
            }),
            ("RL.SLIDINGLOG", |i| {
                ["RL.SLIDINGLOG", &format!("k{i}"), "10", "1m"]
                    .map(String::from)
                    .to_vec()
            }),
        ];
        for (name, words_of) in kinds {
            run(&mut con, &["FLUSHALL"]).unwrap();
            errors.push((name, errors_of(server.port, N, words_of)));
        }
        println!("{policy}: {errors:?} errors of {N} new keys each");
        let set_errors = errors[0].1;
        if policy == "noeviction" {
            // How many are refused depends on the size of each key; what
            // counts is that nothing is refused before the server is full.
            assert!(set_errors > N / 2, "the server never reached maxmemory");
            continue;
        }
        assert_eq!(set_errors, 0, "{policy}: Redis refused SET");
        for &(name, rl_errors) in &errors[1..] {
            assert!(
                rl_errors <= set_errors + N / 100,
                "{policy}: {name} refused {rl_errors} new keys, SET {set_errors}"
            );
        }
    }
}

#[test]
fn under_a_volatile_policy_with_nothing_to_evict_new_keys_are_refused() {
    let server = Server::start(&["--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru"]);
    let mut con = server.connect();
    // Keys without an expiry until Redis refuses: nothing it may evict.
    let mut i = 0;
    while run(&mut con, &["SET", &format!("s{i}"), "x"]).is_ok() {
        i += 1;
    }
    assert!(i > 100, "maxmemory reached after {i} keys");
    // Well over the limit, not at its edge.
    run(&mut con, &["CONFIG", "SET", "maxmemory", "1mb"]).unwrap();
    assert!(error_of(&mut con, &["SET", "probe", "x"]).starts_with("OOM"));
    assert_eq!(
        error_of(&mut con, &["RL.TOKENBUCKET", "new", "10", "1"]),
        OOM
    );
    assert!(!exists(&mut con, "new"));
    // Peeks are still answered.
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "new", "10", "1", "PEEK"])[0],
        1
    );
}

#[test]
fn a_policy_changed_at_run_time_applies_to_the_next_check() {
    let server = Server::start(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.connect();
    for i in 0..5000 {
        run(&mut con, &["SET", &format!("s{i}"), &"x".repeat(100)]).unwrap();
    }
    // Well over the limit, with plenty an eviction policy could evict.
    let over_the_limit = |con: &mut redis::Connection| {
        let used: i64 = info_field(con, "memory", "used_memory").parse().unwrap();
        run(
            con,
            &["CONFIG", "SET", "maxmemory", &(used - 100_000).to_string()],
        )
        .unwrap();
    };
    over_the_limit(&mut con);
    assert_eq!(
        error_of(&mut con, &["RL.TOKENBUCKET", "new", "10", "1"]),
        OOM
    );
    // Now Redis may evict the strings: the new key goes in.
    run(
        &mut con,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .unwrap();
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "new", "10", "1"])[..3],
        [1, 10, 9]
    );
    // And back.
    run(
        &mut con,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    )
    .unwrap();
    over_the_limit(&mut con);
    assert_eq!(
        error_of(&mut con, &["RL.TOKENBUCKET", "newer", "10", "1"]),
        OOM
    );
}
