//! `SHADOW`, on real servers: every check command and `RL.ALL` decide as
//! usual but never deny; a request that would have been denied is answered
//! allowed with its wait, takes nothing, and is counted apart in
//! `INFO ratelimit`; one that is allowed takes as usual. With `PENALTY`, no
//! penalty starts; a key already under one is shadow-denied by it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use redis::Value;

fn count(con: &mut redis::Connection, field: &str) -> i64 {
    info_field(con, "ratelimit", &format!("ratelimit_{field}"))
        .parse()
        .unwrap()
}

#[test]
fn shadow_takes_what_it_allows_and_answers_a_would_be_denial_allowed_with_its_wait() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Every algorithm with a limit of 3 and a slow refill (3 an hour).
    for spec in every_algorithm(3, HOUR_MS) {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("s:{cmd}");
        let shadow = command_words(cmd, &key, params, &["SHADOW"]);
        for left in (0..3).rev() {
            let r = check(&mut con, &shadow);
            assert_eq!(&r[..4], &[1, 3, left, 0], "{cmd}: allowed, taken");
        }
        let state = dump(&mut con, &key);
        let r = check(&mut con, &shadow);
        assert_eq!(&r[..3], &[1, 3, 0], "{cmd}: answered allowed");
        assert!(r[3] > 0, "{cmd}: with the wait it would have had: {r:?}");
        assert_eq!(r.len(), 5, "{cmd}: no delay, it joined no queue: {r:?}");
        assert_eq!(dump(&mut con, &key), state, "{cmd}: it took something");
        // Without SHADOW the same request is denied: the limit is real.
        let denied = check(&mut con, &command_words(cmd, &key, params, &[]));
        assert_eq!(denied[0], 0, "{cmd}");
        assert!(
            (r[3] - 100..=r[3]).contains(&denied[3]),
            "{cmd}: the same wait: {denied:?} {r:?}"
        );

        let name = cmd.trim_start_matches("RL.").to_ascii_lowercase();
        assert_eq!(count(&mut con, &format!("{name}_allowed")), 3, "{cmd}");
        assert_eq!(
            count(&mut con, &format!("{name}_shadow_denied")),
            1,
            "{cmd}"
        );
        assert_eq!(count(&mut con, &format!("{name}_denied")), 1, "{cmd}");
    }
}

#[test]
fn shadow_with_a_penalty_starts_none_but_a_key_under_one_is_shadow_denied() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let shadow = ["RL.FIXEDWINDOW", "k", "1", "1h", "SHADOW", "PENALTY", "1h"];
    assert_eq!(check(&mut con, &shadow)[0], 1);
    let r = check(&mut con, &shadow);
    assert_eq!(r[0], 1);
    let ty: String = redis::cmd("TYPE").arg("k").query(&mut con).unwrap();
    assert_eq!(ty, "rl_fixwin", "no penalty in shadow mode");

    // A key another request locked: the shadow request reports the lock.
    let lock = ["RL.TOKENBUCKET", "t", "1", "0.1", "PENALTY", "1h"];
    check(&mut con, &lock);
    assert_eq!(check(&mut con, &lock)[0], 0);
    let r = check(&mut con, &["RL.TOKENBUCKET", "t", "1", "0.1", "SHADOW"]);
    assert_eq!(r[0], 1);
    assert!(r[3] > 3_500_000, "the penalty's wait: {r:?}");
}

#[test]
fn all_in_shadow_mode_allows_every_tier_and_keeps_the_waits() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let words = [
        "RL.ALL",
        "2",
        "a",
        "b",
        "FIXEDWINDOW",
        "1",
        "1h",
        "TOKENBUCKET",
        "5",
        "1",
        "SHADOW",
    ];
    let parse = |reply: Value| -> (Vec<i64>, Vec<Vec<i64>>) {
        let Value::Array(mut items) = reply else {
            panic!()
        };
        let tiers = items.pop().unwrap();
        let combined = items
            .into_iter()
            .map(|v| redis::from_redis_value(v).unwrap())
            .collect();
        (combined, redis::from_redis_value(tiers).unwrap())
    };
    let (combined, _) = parse(run(&mut con, &words).unwrap());
    assert_eq!(combined[0], 1);
    let b = dump(&mut con, "b");
    let (combined, tiers) = parse(run(&mut con, &words).unwrap());
    assert_eq!(combined[0], 1, "{combined:?}");
    assert!(combined[3] > 0, "{combined:?}");
    assert_eq!((tiers[0][0], tiers[1][0]), (1, 1), "{tiers:?}");
    assert!(tiers[0][3] > 0 && tiers[1][3] == 0, "{tiers:?}");
    assert_eq!(dump(&mut con, "b"), b, "nothing was taken from any tier");
    assert_eq!(count(&mut con, "all_allowed"), 1);
    assert_eq!(count(&mut con, "all_shadow_denied"), 1);
    assert_eq!(count(&mut con, "all_denied"), 0);
}

#[test]
fn a_shadow_denial_is_not_a_denial_to_rl_top() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for _ in 0..3 {
        check(&mut con, &["RL.FIXEDWINDOW", "k", "1", "1h", "SHADOW"]);
    }
    let top: Vec<Value> = redis::cmd("RL.TOP").query(&mut con).unwrap();
    assert!(top.is_empty(), "{top:?}");
    check(&mut con, &["RL.FIXEDWINDOW", "k", "1", "1h"]);
    let top: Vec<(String, i64)> = redis::cmd("RL.TOP").query(&mut con).unwrap();
    assert_eq!(top, [("k".to_string(), 1)]);
}
