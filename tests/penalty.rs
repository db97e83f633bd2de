//! `PENALTY duration`, on real servers: a denial with the option locks its
//! key for the duration (every request denied, the wait counting to the
//! penalty's end), a denial during the penalty does not extend it, the key
//! takes its penalized type and its expiry covers the penalty; the penalty
//! survives RDB, AOF (replayed and rewritten) and reaches a replica as an
//! effect; in `RL.ALL` the tiers that denied get it; a waiting request waits
//! it out; bad input changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;

const HOUR_MS: i64 = 3_600_000;
/// Longer than any algorithm's own wait under `limit_5()` (under an hour
/// and a third, see `Algorithm::limit_of`), so the reply's wait is the
/// penalty's.
const PENALTY: &str = "2h";
const PENALTY_MS: i64 = 2 * HOUR_MS;

/// One field of `RL.INFO key`, as an integer (`None` when absent).
fn info_int(con: &mut redis::Connection, key: &str, field: &str) -> Option<i64> {
    let Value::Array(items) = run(con, &["RL.INFO", key]).unwrap() else {
        panic!("RL.INFO {key} is not an array");
    };
    items.chunks(2).find_map(|pair| match pair {
        [Value::BulkString(name), Value::Int(v)] if name == field.as_bytes() => Some(*v),
        _ => None,
    })
}

fn key_type(con: &mut redis::Connection, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query(con).unwrap()
}

#[test]
fn every_algorithm_locks_its_key_on_a_denial_with_a_penalty_and_never_extends_it() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("login:{cmd}");
        let with_penalty = command_words(cmd, &key, params, &["PENALTY", PENALTY]);
        for _ in 0..5 {
            assert_eq!(check(&mut con, &with_penalty)[0], 1, "{cmd}");
        }
        let plain_type = key_type(&mut con, &key);
        assert!(plain_type.starts_with("rl_"), "{cmd}: {plain_type}");
        assert_eq!(info_int(&mut con, &key, "penalty_until_ms"), None);

        let before = server_time_ms(&mut con);
        let first = check(&mut con, &with_penalty);
        let after = server_time_ms(&mut con);
        assert_eq!(&first[..3], &[0, 5, 0], "{cmd}");
        assert!(
            (PENALTY_MS - (after - before)..=PENALTY_MS).contains(&first[3]),
            "{cmd}: the wait counts to the penalty's end: {first:?}"
        );
        assert!(first[4] >= first[3], "{cmd}: {first:?}");
        assert_eq!(
            key_type(&mut con, &key),
            plain_type.replacen("rl_", "rp_", 1),
            "{cmd}: the key takes its penalized type"
        );
        let until = info_int(&mut con, &key, "penalty_until_ms").unwrap();
        assert!(
            (before + PENALTY_MS..=after + PENALTY_MS).contains(&until),
            "{cmd}: {until}"
        );
        assert!(
            expiry_time(&mut con, &key) >= until,
            "{cmd}: the expiry covers the penalty"
        );

        // During the penalty: denied with or without the option, by a
        // peek too; nothing extends it and nothing changes the state.
        let state = dump(&mut con, &key);
        std::thread::sleep(Duration::from_millis(5));
        let again = check(&mut con, &with_penalty);
        assert_eq!(&again[..3], &[0, 5, 0], "{cmd}");
        assert!(again[3] < first[3], "{cmd}: extended: {again:?}");
        assert_eq!(info_int(&mut con, &key, "penalty_until_ms"), Some(until));
        assert_eq!(
            check(&mut con, &command_words(cmd, &key, params, &[]))[0],
            0
        );
        let peek = check(&mut con, &command_words(cmd, &key, params, &["PEEK"]));
        assert_eq!(&peek[..3], &[0, 5, 0], "{cmd}: PEEK reports the penalty");
        assert!(peek[3] > PENALTY_MS - 60_000, "{cmd}: {peek:?}");
        let name = cmd.trim_start_matches("RL.");
        let mut rl_peek = vec!["RL.PEEK", key.as_str(), name];
        rl_peek.extend_from_slice(params);
        assert_eq!(&check(&mut con, &rl_peek)[..3], &[0, 5, 0], "{cmd}");
        // Other parameters (a higher limit) do not lift it either.
        let mut higher: Vec<&str> = params.to_vec();
        higher[0] = "50";
        assert_eq!(
            check(&mut con, &command_words(cmd, &key, &higher, &[]))[0],
            0
        );
        assert_eq!(dump(&mut con, &key), state, "{cmd}: the state changed");
        assert_eq!(
            run(&mut con, &["GET", &key]).unwrap_err().code(),
            Some("WRONGTYPE")
        );
    }
}

#[test]
fn a_request_that_can_never_pass_starts_no_penalty() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("k:{cmd}");
        let r = check(
            &mut con,
            &command_words(cmd, &key, params, &["COST", "6", "PENALTY", "1h"]),
        );
        assert_eq!((r[0], r[3]), (0, -1), "{cmd}");
        assert!(!exists(&mut con, &key), "{cmd}: a key was made");
        check(&mut con, &command_words(cmd, &key, params, &[]));
        check(
            &mut con,
            &command_words(cmd, &key, params, &["COST", "6", "PENALTY", "1h"]),
        );
        assert!(key_type(&mut con, &key).starts_with("rl_"), "{cmd}");
    }
}

#[test]
fn when_the_penalty_ends_the_algorithm_decides_again_and_took_nothing_meanwhile() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // One token, back within half a second (so the second request, right
    // after the first, is denied), long before the penalty ends: from then
    // on only the penalty denies.
    let words = ["RL.TOKENBUCKET", "k", "1", "2", "PENALTY", "1s"];
    assert_eq!(check(&mut con, &words)[0], 1);
    let first = check(&mut con, &words);
    assert_eq!(first[0], 0, "denied: the token is not back yet");
    let until = info_int(&mut con, "k", "penalty_until_ms").unwrap();
    let started = Instant::now();
    let mut denials = 0;
    loop {
        assert!(started.elapsed() < Duration::from_secs(10), "never allowed");
        let before = server_time_ms(&mut con);
        let r = check(&mut con, &words);
        let after = server_time_ms(&mut con);
        if r[0] == 1 {
            assert!(after >= until, "allowed at {after}, before the end {until}");
            break;
        }
        assert!(before < until, "denied at {before}, after the end {until}");
        assert!(
            (1..=until - before).contains(&r[3]),
            "the wait is the penalty's: {r:?}"
        );
        denials += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(denials > 5, "the penalty lasted: {denials} denials");
    assert_eq!(
        info_int(&mut con, "k", "penalty_until_ms"),
        Some(until),
        "the key keeps its past penalty, which changes nothing"
    );
}

#[test]
fn a_request_that_waits_waits_for_the_penalty_to_end() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // As above: the token is back long before the penalty ends.
    check(&mut con, &["RL.TOKENBUCKET", "k", "1", "2"]);
    check(
        &mut con,
        &["RL.TOKENBUCKET", "k", "1", "2", "PENALTY", "1s"],
    );
    let until = info_int(&mut con, "k", "penalty_until_ms").unwrap();
    let r = check(
        &mut con,
        &["RL.TOKENBUCKET", "k", "1", "2", "BLOCK", "5000"],
    );
    let answered = server_time_ms(&mut con);
    assert_eq!(r[0], 1, "{r:?}");
    assert!(answered >= until, "served at {answered}, before {until}");
}

#[test]
fn in_all_the_tiers_that_denied_get_the_penalty() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let words = [
        "RL.ALL",
        "2",
        "tight",
        "loose",
        "FIXEDWINDOW",
        "1",
        "1h",
        "FIXEDWINDOW",
        "5",
        "1h",
        "PENALTY",
        "1h",
    ];
    let allowed = run(&mut con, &words).unwrap();
    let denied = run(&mut con, &words).unwrap();
    let tiers = |reply: &Value| -> Vec<Vec<i64>> {
        let Value::Array(items) = reply else {
            panic!("{reply:?}")
        };
        let Some(Value::Array(tiers)) = items.last() else {
            panic!("{reply:?}")
        };
        tiers
            .iter()
            .map(|t| redis::from_redis_value(t.clone()).unwrap())
            .collect()
    };
    assert_eq!(tiers(&allowed)[0][0], 1);
    let denied = tiers(&denied);
    assert_eq!(&denied[0][..3], &[0, 1, 0]);
    assert!(denied[0][3] > HOUR_MS - 60_000, "{denied:?}");
    assert_eq!(denied[1][0], 1, "the loose tier allowed on its own");
    assert_eq!(key_type(&mut con, "tight"), "rp_fixwin");
    assert_eq!(key_type(&mut con, "loose"), "rl_fixwin");
    assert!(
        expiry_time(&mut con, "tight") >= info_int(&mut con, "tight", "penalty_until_ms").unwrap()
    );
    // The tight key is locked for its own command too, the loose one not.
    assert_eq!(
        check(&mut con, &["RL.FIXEDWINDOW", "tight", "100", "1h"])[0],
        0
    );
    assert_eq!(
        check(&mut con, &["RL.FIXEDWINDOW", "loose", "5", "1h"])[0],
        1
    );
    // A tier already under its penalty is not given a longer one.
    let until = info_int(&mut con, "tight", "penalty_until_ms").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    run(&mut con, &words).unwrap();
    assert_eq!(info_int(&mut con, "tight", "penalty_until_ms"), Some(until));
}

/// Waits until `replica` has processed all `primary` sent.
fn caught_up(primary: &mut redis::Connection, replica: &mut redis::Connection) {
    let offset = |con: &mut redis::Connection| -> i64 {
        info_field(con, "replication", "master_repl_offset")
            .parse()
            .unwrap()
    };
    let sent = offset(primary);
    wait_for("the replica to catch up", Duration::from_secs(10), || {
        offset(replica) >= sent
    });
}

/// What must be the same wherever a key is: its state, type and expiry.
fn snapshot(con: &mut redis::Connection, keys: &[&str]) -> Vec<(Option<Vec<u8>>, String, i64)> {
    keys.iter()
        .map(|k| (dump(con, k), key_type(con, k), expiry_time(con, k)))
        .collect()
}

#[test]
fn a_penalty_reaches_a_replica_as_an_effect_and_survives_rdb_and_aof() {
    for preamble in ["yes", "no"] {
        let mut primary =
            // `always`: every write is in the file before its reply, so the
            // kill below loses nothing (`everysec` may hold writes back for up
            // to 2 s while a background fsync runs, as on a loaded machine).
            Server::start(&[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--aof-use-rdb-preamble",
                preamble,
            ]);
        let replica = Server::start_replica_of(&primary);
        let mut con = primary.connect();
        let mut rcon = replica.connect();
        let keys = ["p:tb", "p:sl", "p:all"];
        for _ in 0..3 {
            check(
                &mut con,
                &["RL.TOKENBUCKET", "p:tb", "2", "0.001", "PENALTY", "1h"],
            );
            check(
                &mut con,
                &["RL.SLIDINGLOG", "p:sl", "2", "1h", "PENALTY", "30m"],
            );
            run(
                &mut con,
                &[
                    "RL.ALL", "1", "p:all", "GCRA", "1", "1", "1h", "PENALTY", "15m",
                ],
            )
            .unwrap();
        }
        let on_primary = snapshot(&mut con, &keys);
        for (state, ty, at) in &on_primary {
            assert!(
                state.is_some() && ty.starts_with("rp_") && *at > 0,
                "{on_primary:?}"
            );
        }
        caught_up(&mut con, &mut rcon);
        assert_eq!(snapshot(&mut rcon, &keys), on_primary, "replica");
        for key in keys {
            assert_eq!(digest_value(&mut rcon, key), digest_value(&mut con, key));
        }

        // The AOF as written (replays), then rewritten, then RDB.
        primary.kill();
        primary.launch();
        let mut con = primary.connect();
        assert_eq!(
            snapshot(&mut con, &keys),
            on_primary,
            "AOF, preamble {preamble}"
        );
        run(&mut con, &["BGREWRITEAOF"]).unwrap();
        wait_for("the rewrite", Duration::from_secs(20), || {
            info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
                && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
        });
        primary.kill();
        primary.launch();
        let mut con = primary.connect();
        assert_eq!(
            snapshot(&mut con, &keys),
            on_primary,
            "rewritten AOF, preamble {preamble}"
        );
        run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
        assert_eq!(snapshot(&mut con, &keys), on_primary, "RDB");
        assert_eq!(
            check(&mut con, &["RL.TOKENBUCKET", "p:tb", "2", "0.001"])[0],
            0,
            "still under its penalty"
        );
    }
}

#[test]
fn bad_penalty_and_shadow_options_are_refused_and_change_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let duration = "ERR PENALTY must be a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)";
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.TOKENBUCKET", "k", "5", "1", "PENALTY"],
            "ERR syntax error: PENALTY needs a value",
        ),
        (&["RL.TOKENBUCKET", "k", "5", "1", "PENALTY", "0"], duration),
        (
            &["RL.TOKENBUCKET", "k", "5", "1", "PENALTY", "-1s"],
            duration,
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "1", "PENALTY", "367d"],
            duration,
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "1", "PENALTY", "1x"],
            duration,
        ),
        (
            &[
                "RL.TOKENBUCKET",
                "k",
                "5",
                "1",
                "PENALTY",
                "1s",
                "PENALTY",
                "2s",
            ],
            "ERR syntax error: PENALTY given more than once",
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "1", "SHADOW", "SHADOW"],
            "ERR syntax error: SHADOW given more than once",
        ),
        (
            &["RL.FIXEDWINDOW", "k", "5", "1m", "PEEK", "PENALTY", "1m"],
            "ERR syntax error: PEEK and PENALTY cannot be given together",
        ),
        (
            &["RL.FIXEDWINDOW", "k", "5", "1m", "SHADOW", "PEEK"],
            "ERR syntax error: PEEK and SHADOW cannot be given together",
        ),
        (
            &["RL.FIXEDWINDOW", "k", "5", "1m", "SHADOW", "BLOCK", "100"],
            "ERR syntax error: SHADOW and BLOCK cannot be given together",
        ),
        (
            &[
                "RL.FIXEDWINDOW",
                "k",
                "5",
                "1m",
                "BLOCK",
                "100",
                "PENALTY",
                "1m",
            ],
            "ERR syntax error: PENALTY and BLOCK cannot be given together",
        ),
        (
            &["RL.PEEK", "k", "FIXEDWINDOW", "5", "1m", "PENALTY", "1m"],
            "ERR syntax error: PEEK and PENALTY cannot be given together",
        ),
        (
            &["RL.PEEK", "k", "FIXEDWINDOW", "5", "1m", "SHADOW"],
            "ERR syntax error: PEEK and SHADOW cannot be given together",
        ),
        (
            &[
                "RL.ALL",
                "1",
                "k",
                "FIXEDWINDOW",
                "5",
                "1m",
                "PENALTY",
                "soon",
            ],
            duration,
        ),
        (
            &[
                "RL.ALL",
                "1",
                "k",
                "FIXEDWINDOW",
                "5",
                "1m",
                "SHADOW",
                "BLOCK",
                "0",
            ],
            "ERR syntax error: SHADOW and BLOCK cannot be given together",
        ),
        (
            &["RL.ACQUIRE", "k", "3", "1s", "PENALTY", "1m"],
            "ERR syntax error: unknown option 'PENALTY'",
        ),
        (
            &["RL.ACQUIRE", "k", "3", "1s", "SHADOW"],
            "ERR syntax error: unknown option 'SHADOW'",
        ),
    ];
    for (words, expected) in cases {
        assert_eq!(&error_of(&mut con, words), expected, "{words:?}");
        assert!(!exists(&mut con, "k"), "{words:?} made the key");
    }
    // A penalized key is its algorithm's, to every other algorithm.
    check(&mut con, &["RL.FIXEDWINDOW", "p", "1", "1h"]);
    check(
        &mut con,
        &["RL.FIXEDWINDOW", "p", "1", "1h", "PENALTY", "1h"],
    );
    let state = dump(&mut con, "p");
    assert!(error_of(&mut con, &["RL.GCRA", "p", "1", "1", "1h"]).starts_with("WRONGTYPE"));
    assert!(error_of(&mut con, &["RL.ACQUIRE", "p", "1", "1h"]).starts_with("WRONGTYPE"));
    assert!(error_of(
        &mut con,
        &["RL.ALL", "1", "p", "TOKENBUCKET", "1", "1", "PENALTY", "1m"]
    )
    .starts_with("WRONGTYPE"));
    assert_eq!(dump(&mut con, "p"), state);
}
