//! Named policies (`RL.POLICY`, `RL.CHECK`): defined, changed, listed,
//! rolled back and deleted; a check by name answers exactly as the inline
//! command with the policy's parameters; policies survive RDB and AOF
//! restarts and reach replicas; bad definitions change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};

fn words_of(v: &Value) -> Vec<String> {
    items(v).iter().map(text).collect()
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

fn set(con: &mut Connection, name: &str, definition: &[&str]) -> i64 {
    let mut words = vec!["RL.POLICY", "SET", name];
    words.extend_from_slice(definition);
    int(&run(con, &words).unwrap())
}

/// `set` of a definition written as one line of words.
fn set_line(con: &mut Connection, name: &str, definition: &str) -> i64 {
    let words: Vec<&str> = definition.split(' ').collect();
    set(con, name, &words)
}

/// A primary with a replica, and a connection to each.
fn primary_and_replica() -> (Server, Server, Connection, Connection) {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let (con, rcon) = (primary.connect(), replica.connect());
    (primary, replica, con, rcon)
}

fn digest(con: &mut Connection) -> String {
    text(&run(con, &["RL.POLICY", "DIGEST"]).unwrap())
}

/// `RL.POLICY GET name` as (version, definition words), None for nil.
fn get(con: &mut Connection, name: &str) -> Option<(i64, Vec<String>)> {
    match run(con, &["RL.POLICY", "GET", name]).unwrap() {
        Value::Nil => None,
        v => {
            let parts = items(&v);
            assert_eq!(text(&parts[0]), name);
            Some((int(&parts[1]), words_of(&parts[2])))
        }
    }
}

#[test]
fn policies_are_defined_listed_versioned_rolled_back_and_deleted() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let empty = digest(&mut con);
    assert_eq!(set(&mut con, "plan:pro", &["tokenbucket", "100", "10"]), 1);
    // The same definition, written another way, is no change.
    assert_eq!(
        set(&mut con, "plan:pro", &["TOKENBUCKET", "100", "10.0"]),
        1
    );
    assert_eq!(
        set(
            &mut con,
            "plan:free",
            &[
                "SLIDINGCOUNTER",
                "10",
                "1m",
                "PRECISION",
                "6",
                "PENALTY",
                "30s"
            ]
        ),
        1
    );
    assert_eq!(
        get(&mut con, "plan:free"),
        Some((
            1,
            [
                "SLIDINGCOUNTER",
                "10",
                "60000ms",
                "PRECISION",
                "6",
                "PENALTY",
                "30000ms"
            ]
            .map(String::from)
            .to_vec()
        ))
    );
    assert_eq!(get(&mut con, "nope"), None);
    // DRYRUN: the version it would have, nothing changed.
    let before = digest(&mut con);
    assert_eq!(
        set(
            &mut con,
            "plan:pro",
            &["TOKENBUCKET", "200", "10", "DRYRUN"]
        ),
        2
    );
    assert_eq!(
        set(&mut con, "plan:new", &["GCRA", "0", "1", "1s", "DRYRUN"]),
        1
    );
    assert_eq!(digest(&mut con), before);
    assert_eq!(get(&mut con, "plan:new"), None);
    for limit in ["200", "300", "400", "500", "600"] {
        set(&mut con, "plan:pro", &["TOKENBUCKET", limit, "10"]);
    }
    let list = run(&mut con, &["RL.POLICY", "LIST"]).unwrap();
    let listed: Vec<(String, i64)> = items(&list)
        .iter()
        .map(|p| (text(&items(p)[0]), int(&items(p)[1])))
        .collect();
    assert_eq!(
        listed,
        vec![("plan:free".into(), 1), ("plan:pro".into(), 6)]
    );
    // The last five versions, newest first.
    let history = run(&mut con, &["RL.POLICY", "HISTORY", "plan:pro"]).unwrap();
    let versions: Vec<(i64, String)> = items(&history)
        .iter()
        .map(|h| (int(&items(h)[0]), words_of(&items(h)[1])[1].clone()))
        .collect();
    assert_eq!(
        versions,
        vec![
            (6, "600".into()),
            (5, "500".into()),
            (4, "400".into()),
            (3, "300".into()),
            (2, "200".into())
        ]
    );
    // A rollback is a new version holding the old definition.
    assert_eq!(
        int(&run(&mut con, &["RL.POLICY", "ROLLBACK", "plan:pro", "3"]).unwrap()),
        7
    );
    assert_eq!(get(&mut con, "plan:pro").unwrap().1[1], "300");
    assert_eq!(
        error_of(&mut con, &["RL.POLICY", "ROLLBACK", "plan:pro", "1"]),
        "ERR policy 'plan:pro' keeps no version 1 (see RL.POLICY HISTORY)"
    );
    assert_eq!(
        error_of(&mut con, &["RL.POLICY", "ROLLBACK", "nope", "1"]),
        "ERR no policy 'nope'"
    );
    // A definition read back from GET defines the same policy: no change.
    let (version, words) = get(&mut con, "plan:free").unwrap();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_eq!(set(&mut con, "plan:free", &words), version);
    assert_eq!(
        int(&run(&mut con, &["RL.POLICY", "DEL", "plan:pro"]).unwrap()),
        1
    );
    assert_eq!(
        int(&run(&mut con, &["RL.POLICY", "DEL", "plan:pro"]).unwrap()),
        0
    );
    assert_eq!(
        int(&run(&mut con, &["RL.POLICY", "DEL", "plan:free"]).unwrap()),
        1
    );
    assert_eq!(digest(&mut con), empty);
}

/// Runs the command pairs of `steps` in order, each pair in one script (the
/// same instant, as near as the clock allows), on keys numbered `attempt`,
/// and returns the pairs of replies that differ. Retried on fresh keys when
/// any differ, so a millisecond ticking between two calls cannot fail a
/// test, while a real difference (which repeats) does.
fn differences(
    con: &mut Connection,
    steps: &dyn Fn(usize) -> Vec<(Vec<String>, Vec<String>)>,
) -> Vec<(Value, Value)> {
    let script = "local n = tonumber(ARGV[1]); local a = {}; local b = {}; \
        for i = 2, n + 1 do a[#a + 1] = ARGV[i] end; \
        for i = n + 2, #ARGV do b[#b + 1] = ARGV[i] end; \
        return {redis.pcall(unpack(a)), redis.pcall(unpack(b))}";
    let mut differ = vec![];
    for attempt in 0..3 {
        differ.clear();
        for (wa, wb) in steps(attempt) {
            let mut words: Vec<String> = vec![
                "EVAL".into(),
                script.into(),
                "0".into(),
                wa.len().to_string(),
            ];
            words.extend(wa);
            words.extend(wb);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let reply = run(con, &words).unwrap();
            let parts = items(&reply).to_vec();
            if parts[0] != parts[1] {
                differ.push((parts[0].clone(), parts[1].clone()));
            }
        }
        if differ.is_empty() {
            break;
        }
    }
    differ
}

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

#[test]
fn a_check_by_name_answers_as_the_inline_command_for_every_algorithm() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for spec in limit_5() {
        let name = format!("p:{}", spec.name);
        let mut definition = vec![spec.word()];
        definition.extend(spec.params.iter().cloned());
        let definition: Vec<&str> = definition.iter().map(String::as_str).collect();
        set(&mut con, &name, &definition);
        // Allowed, allowed at a cost, peeked, denied, denied: each reply
        // the inline command's.
        let extras: [&[&str]; 5] = [&[], &["COST", "2"], &["PEEK"], &["COST", "5"], &[]];
        let steps = |attempt: usize| {
            let (a, b) = (format!("{name}:a:{attempt}"), format!("{name}:b:{attempt}"));
            extras
                .iter()
                .map(|extra| {
                    let mut by_name = owned(&["RL.CHECK", &name, &a]);
                    by_name.extend(owned(extra));
                    (by_name, owned(&spec.words(&b, extra)))
                })
                .collect()
        };
        assert_eq!(differences(&mut con, &steps), vec![], "{name}");
    }
}

#[test]
fn a_three_tier_policy_answers_as_rl_all_with_its_penalty() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let tiers = [
        "TOKENBUCKET",
        "2",
        "1",
        "FIXEDWINDOW",
        "10",
        "1h",
        "SLIDINGLOG",
        "5",
        "1h",
    ];
    let mut definition = tiers.to_vec();
    definition.extend(["PENALTY", "1m"]);
    set(&mut con, "three", &definition);
    let steps = |attempt: usize| {
        let a: Vec<String> = (1..=3).map(|t| format!("a{t}:{attempt}")).collect();
        let b: Vec<String> = (1..=3).map(|t| format!("b{t}:{attempt}")).collect();
        (0..4)
            .map(|_| {
                let mut by_name = owned(&["RL.CHECK", "three"]);
                by_name.extend(a.iter().cloned());
                let mut inline = owned(&["RL.ALL", "3"]);
                inline.extend(b.iter().cloned());
                inline.extend(owned(&tiers));
                inline.extend(owned(&["PENALTY", "1m"]));
                (by_name, inline)
            })
            .collect()
    };
    assert_eq!(differences(&mut con, &steps), vec![]);
    // The same keys, step by step: the third request is denied by the
    // bucket (2, refilled at 1 a second) and starts the policy's penalty,
    // whose minute is the wait it answers (not the bucket's second).
    let mut replies = vec![];
    for _ in 0..3 {
        replies.push(run(&mut con, &["RL.CHECK", "three", "x1", "x2", "x3"]).unwrap());
    }
    let combined = |v: &Value| items(v)[0..5].iter().map(int).collect::<Vec<_>>();
    assert_eq!(combined(&replies[0])[0], 1);
    assert_eq!(combined(&replies[2])[0], 0);
    // Locked by the penalty: a peek of the log's key says so.
    let retry = int(&items(&replies[2])[3]);
    assert!(retry > 50_000, "the penalty's wait, not the log's: {retry}");
    // COMMAND GETKEYS names exactly the policy's keys.
    let keys = run(
        &mut con,
        &[
            "COMMAND", "GETKEYS", "RL.CHECK", "three", "x1", "x2", "x3", "COST", "2",
        ],
    )
    .unwrap();
    assert_eq!(words_of(&keys), vec!["x1", "x2", "x3"]);
}

#[test]
fn a_check_by_a_missing_or_deleted_policy_is_an_error_naming_it() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "ghost", "k"]),
        "ERR no policy 'ghost'"
    );
    set(&mut con, "gone", &["TOKENBUCKET", "1", "1"]);
    check(&mut con, &["RL.CHECK", "gone", "k"]);
    run(&mut con, &["RL.POLICY", "DEL", "gone"]).unwrap();
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "gone", "k"]),
        "ERR no policy 'gone'"
    );
    // Wrong numbers of keys and options a policy owns.
    set_line(&mut con, "two", "TOKENBUCKET 1 1 GCRA 0 1 1s");
    let wrong =
        "ERR policy 'two' has 2 tiers: give 2 keys after its name, then COST, PEEK or BLOCK";
    assert_eq!(error_of(&mut con, &["RL.CHECK", "two", "a"]), wrong);
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "two", "a", "b", "c"]),
        wrong
    );
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "two", "a", "b", "SHADOW"]),
        "ERR syntax error: RL.CHECK takes COST, PEEK and BLOCK; SHADOW is not offered"
    );
    // A policy's PENALTY or SHADOW with the request's BLOCK: the error says
    // whose each is.
    set_line(&mut con, "harsh", "TOKENBUCKET 1 1 PENALTY 1m");
    set_line(&mut con, "quiet", "TOKENBUCKET 1 1 SHADOW");
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "harsh", "a", "BLOCK", "10"]),
        "ERR syntax error: the policy's PENALTY and BLOCK cannot be given together"
    );
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "quiet", "a", "BLOCK", "10"]),
        "ERR syntax error: the policy's SHADOW and BLOCK cannot be given together"
    );
    assert_eq!(check(&mut con, &["RL.CHECK", "harsh", "h", "PEEK"])[0], 1);
    assert!(!exists(&mut con, "a"));
    // The replay of a check is for a primary's link and the AOF only.
    assert!(
        error_of(&mut con, &["RL.APPLYCHECK", "TOKENBUCKET 1 1", "a"])
            .starts_with("ERR this command is how replicas and AOF files receive changes")
    );
}

/// A check by name takes its policy from a memo of the last one it used
/// (no lock, no search by name, while no policy changes): every way a
/// policy changes is seen by the very next check, and checks alternating
/// between policies each get their own.
#[test]
fn a_check_by_name_follows_every_change_of_its_policy_at_once() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // An RDB file holding no policy, loaded again below.
    run(&mut con, &["SAVE"]).unwrap();
    let limit =
        |con: &mut Connection, policy: &str, key: &str| check(con, &["RL.CHECK", policy, key])[1];
    set(&mut con, "p", &["TOKENBUCKET", "2", "0.001"]);
    assert_eq!(limit(&mut con, "p", "k1"), 2);
    assert_eq!(limit(&mut con, "p", "k2"), 2);
    set(&mut con, "p", &["TOKENBUCKET", "5", "0.001"]);
    assert_eq!(limit(&mut con, "p", "k3"), 5, "a new version");
    run(&mut con, &["RL.POLICY", "ROLLBACK", "p", "1"]).unwrap();
    assert_eq!(limit(&mut con, "p", "k4"), 2, "a rollback");
    set(&mut con, "q", &["TOKENBUCKET", "7", "0.001"]);
    for _ in 0..2 {
        assert_eq!(limit(&mut con, "q", "k5"), 7);
        assert_eq!(limit(&mut con, "p", "k6"), 2);
    }
    // A name that only begins like another is another policy.
    set(&mut con, "pp", &["TOKENBUCKET", "9", "0.001"]);
    assert_eq!(limit(&mut con, "p", "k7"), 2);
    assert_eq!(limit(&mut con, "pp", "k7b"), 9);
    assert_eq!(limit(&mut con, "p", "k7c"), 2);
    run(&mut con, &["RL.POLICY", "DEL", "p"]).unwrap();
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "p", "k8"]),
        "ERR no policy 'p'"
    );
    set(&mut con, "p", &["TOKENBUCKET", "3", "0.001"]);
    assert_eq!(limit(&mut con, "p", "k9"), 3, "defined again");
    // The policies replaced by an RDB file's (which holds none): the
    // memo's policy is gone with them.
    run(&mut con, &["DEBUG", "RELOAD", "NOSAVE"]).unwrap();
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "p", "k10"]),
        "ERR no policy 'p'"
    );
    assert_eq!(
        error_of(&mut con, &["RL.CHECK", "q", "k10"]),
        "ERR no policy 'q'"
    );
}

#[test]
fn every_bad_definition_is_refused_with_its_reason_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    set(&mut con, "p", &["TOKENBUCKET", "10", "1"]);
    let before = (digest(&mut con), get(&mut con, "p"));
    let long = "n".repeat(129);
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.POLICY", "SET", "p"],
            "ERR syntax error: a policy needs at least one tier, e.g. TOKENBUCKET 10 1",
        ),
        (
            &["RL.POLICY", "SET", "p", "BUCKET", "1", "1"],
            "ERR syntax error: a policy needs at least one tier before its options, found 'BUCKET'",
        ),
        (
            &["RL.POLICY", "SET", "p", "TOKENBUCKET", "0", "1"],
            "ERR capacity must be",
        ),
        (
            &["RL.POLICY", "SET", "p", "TOKENBUCKET", "1"],
            "ERR syntax error: TOKENBUCKET needs 2 parameters",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "TOKENBUCKET",
                "1",
                "1",
                "GCRA",
                "0",
                "1",
            ],
            "ERR syntax error: GCRA needs 3 parameters",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "SLIDINGCOUNTER",
                "1",
                "1m",
                "PRECISION",
                "0",
            ],
            "ERR PRECISION must be an integer from 1 to 1000",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "TOKENBUCKET",
                "1",
                "1",
                "PENALTY",
                "0",
            ],
            "ERR PENALTY must be a duration",
        ),
        (
            &["RL.POLICY", "SET", "p", "TOKENBUCKET", "1", "1", "PENALTY"],
            "ERR syntax error: PENALTY needs a value",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "TOKENBUCKET",
                "1",
                "1",
                "SHADOW",
                "SHADOW",
            ],
            "ERR syntax error: SHADOW given more than once",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "TOKENBUCKET",
                "1",
                "1",
                "COST",
                "2",
            ],
            "ERR syntax error: COST is a request's option, not a policy's: give it to RL.CHECK",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "TOKENBUCKET",
                "1",
                "1",
                "ON-CHANGE",
                "LATER",
            ],
            "ERR ON-CHANGE must be KEEP",
        ),
        (
            &[
                "RL.POLICY",
                "SET",
                "p",
                "TOKENBUCKET",
                "1",
                "1",
                "ON-CHANGE",
                "HALVE",
            ],
            "ERR ON-CHANGE must be KEEP, SCALE or RESET",
        ),
        (
            &["RL.POLICY", "SET", "p", "TOKENBUCKET", "1", "1", "WHAT"],
            "ERR syntax error: unknown option 'WHAT'",
        ),
        (
            &["RL.POLICY", "SET", "a b", "TOKENBUCKET", "1", "1"],
            "ERR a policy name must be 1 to 128 printable ASCII characters, no spaces",
        ),
        (
            &["RL.POLICY", "SET", &long, "TOKENBUCKET", "1", "1"],
            "ERR a policy name must be 1 to 128 printable ASCII characters, no spaces",
        ),
        (
            &["RL.POLICY", "LOAD", "p", "9", "TOKENBUCKET", "1", "1"],
            "ERR this command is how replicas and AOF files receive changes",
        ),
        (
            &["RL.POLICY", "FROB"],
            "ERR syntax error: unknown subcommand 'FROB'",
        ),
    ];
    for (words, expected) in cases {
        let error = error_of(&mut con, words);
        assert!(error.starts_with(expected), "{words:?}: {error}");
        assert_eq!(
            (digest(&mut con), get(&mut con, "p")),
            before,
            "{words:?} changed something"
        );
    }
}

#[test]
fn no_check_sees_half_a_policy_while_it_changes() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let a = ["TOKENBUCKET", "10", "1", "FIXEDWINDOW", "100", "1h"];
    let b = ["TOKENBUCKET", "20", "1", "FIXEDWINDOW", "200", "1h"];
    set(&mut con, "flip", &a);
    let mut changer = server.connect();
    let flipper = std::thread::spawn(move || {
        for i in 0..300 {
            let definition = if i % 2 == 0 { b } else { a };
            set(&mut changer, "flip", &definition);
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..600 {
        let reply = run(
            &mut con,
            &["RL.CHECK", "flip", &format!("t:{i}"), &format!("w:{i}")],
        )
        .unwrap();
        let tiers = items(&items(&reply)[5]);
        let limits = (int(&items(&tiers[0])[1]), int(&items(&tiers[1])[1]));
        assert!(
            limits == (10, 100) || limits == (20, 200),
            "half a policy: {limits:?}"
        );
        seen.insert(limits);
    }
    flipper.join().unwrap();
    assert!(!seen.is_empty());
}

fn policies_of(con: &mut Connection) -> (String, Value) {
    (digest(con), run(con, &["RL.POLICY", "LIST"]).unwrap())
}

fn some_policies(con: &mut Connection) {
    set(con, "a", &["TOKENBUCKET", "10", "1", "PENALTY", "1m"]);
    set(con, "a", &["TOKENBUCKET", "20", "1"]);
    set(
        con,
        "b",
        &[
            "GCRA",
            "0",
            "1",
            "1s",
            "SLIDINGCOUNTER",
            "5",
            "1m",
            "PRECISION",
            "3",
            "SHADOW",
        ],
    );
    set(con, "c", &["SLIDINGLOG", "3", "1h"]);
    run(con, &["RL.POLICY", "DEL", "c"]).unwrap();
    check(con, &["RL.CHECK", "a", "k"]);
}

#[test]
fn policies_survive_debug_reload_and_a_restart_from_rdb() {
    let mut server = Server::start(&[]);
    let mut con = server.connect();
    some_policies(&mut con);
    let before = policies_of(&mut con);
    let history = run(&mut con, &["RL.POLICY", "HISTORY", "a"]).unwrap();
    run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(policies_of(&mut con), before);
    assert_eq!(
        run(&mut con, &["RL.POLICY", "HISTORY", "a"]).unwrap(),
        history
    );
    // FLUSHALL removes keys, not policies.
    run(&mut con, &["FLUSHALL"]).unwrap();
    assert_eq!(policies_of(&mut con), before);
    run(&mut con, &["SAVE"]).unwrap();
    drop(con);
    server.shutdown_nosave();
    server.launch();
    let mut con = server.connect();
    assert_eq!(policies_of(&mut con), before);
    assert_eq!(
        run(&mut con, &["RL.POLICY", "HISTORY", "a"]).unwrap(),
        history
    );
}

fn rewrite_aof(con: &mut Connection) {
    run(con, &["BGREWRITEAOF"]).unwrap();
    wait_for("the AOF rewrite", Duration::from_secs(20), || {
        info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
            && info_field(con, "persistence", "aof_last_bgrewrite_status") == "ok"
    });
}

/// A server writing its AOF (every write synced), with or without an RDB
/// preamble.
fn aof_server(preamble: &str) -> Server {
    Server::start(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        preamble,
        "--appendfsync",
        "always",
    ])
}

fn aof_restart(preamble: &str, rewrite: bool) {
    let mut server = aof_server(preamble);
    let mut con = server.connect();
    some_policies(&mut con);
    if rewrite {
        rewrite_aof(&mut con);
        // A change after the rewrite goes to the new incremental file.
        set(&mut con, "d", &["FIXEDWINDOW", "7", "1m"]);
    }
    let before = policies_of(&mut con);
    let history = run(&mut con, &["RL.POLICY", "HISTORY", "a"]).unwrap();
    // The key a check by name changed comes back too (its replay).
    let state = dump(&mut con, "k");
    assert!(state.is_some());
    drop(con);
    server.shutdown_nosave();
    server.launch();
    let mut con = server.connect();
    assert_eq!(
        policies_of(&mut con),
        before,
        "preamble {preamble}, rewrite {rewrite}"
    );
    assert_eq!(
        run(&mut con, &["RL.POLICY", "HISTORY", "a"]).unwrap(),
        history
    );
    assert_eq!(dump(&mut con, "k"), state);
}

#[test]
fn policies_survive_an_aof_restart() {
    aof_restart("yes", false);
    aof_restart("no", false);
}

#[test]
fn policies_survive_an_aof_rewrite_with_an_rdb_preamble() {
    aof_restart("yes", true);
}

#[test]
fn policies_survive_an_aof_rewrite_without_an_rdb_preamble() {
    aof_restart("no", true);
}

#[test]
fn a_replica_holds_the_primary_policies_and_answers_peek_by_name() {
    let primary = Server::start(&[]);
    let mut con = primary.connect();
    // Some before the replica attaches (full sync), some after (propagated).
    set(&mut con, "early", &["TOKENBUCKET", "5", "0.001"]);
    let replica = Server::start_replica_of(&primary);
    let mut rcon = replica.connect();
    some_policies(&mut con);
    for _ in 0..3 {
        check(&mut con, &["RL.CHECK", "early", "e"]);
    }
    run(&mut con, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(policies_of(&mut rcon), policies_of(&mut con));
    assert_eq!(
        run(&mut rcon, &["RL.POLICY", "HISTORY", "a"]).unwrap(),
        run(&mut con, &["RL.POLICY", "HISTORY", "a"]).unwrap()
    );
    // The state the checks left is the primary's, and a peek by name reads it.
    assert_eq!(digest_value(&mut rcon, "e"), digest_value(&mut con, "e"));
    let peek = check(&mut rcon, &["RL.CHECK", "early", "e", "PEEK"]);
    assert_eq!(&peek[..3], &[1, 5, 2]);
    assert!(error_of(&mut rcon, &["RL.CHECK", "early", "e"]).starts_with("READONLY"));
    assert!(error_of(
        &mut rcon,
        &["RL.POLICY", "SET", "x", "GCRA", "0", "1", "1s"]
    )
    .starts_with("READONLY"));
    assert!(error_of(&mut rcon, &["RL.POLICY", "DEL", "early"]).starts_with("READONLY"));
    // A rollback and a delete reach it as well.
    run(&mut con, &["RL.POLICY", "ROLLBACK", "a", "1"]).unwrap();
    run(&mut con, &["RL.POLICY", "DEL", "early"]).unwrap();
    run(&mut con, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(policies_of(&mut rcon), policies_of(&mut con));
}

/// The role (`INFO replication`'s `role`) of the server `con` talks to,
/// once it is `role`.
fn wait_role(con: &mut Connection, role: &str) {
    wait_for(role, Duration::from_secs(20), || {
        info_field(con, "replication", "role") == role
    });
}

/// A primary with a replica, both holding a policy `role` of one tier, and
/// the check that takes by it.
fn pair_with_a_policy() -> (Server, Server, Connection, Connection) {
    let (primary, replica, mut con, rcon) = primary_and_replica();
    set(&mut con, "role", &["TOKENBUCKET", "100", "0.001"]);
    run(&mut con, &["WAIT", "1", "5000"]).unwrap();
    (primary, replica, con, rcon)
}

const TAKE: [&str; 3] = ["RL.CHECK", "role", "k"];

#[test]
fn a_check_by_name_follows_replicaof_promoting_and_demoting() {
    let (_primary, replica, mut con, mut rcon) = pair_with_a_policy();
    assert_eq!(check(&mut con, &TAKE)[0], 1);
    assert!(error_of(&mut rcon, &TAKE).starts_with("READONLY"));
    // The replica promoted: it takes.
    run(&mut rcon, &["REPLICAOF", "NO", "ONE"]).unwrap();
    wait_role(&mut rcon, "master");
    assert_eq!(check(&mut rcon, &TAKE)[0], 1);
    // The primary demoted: it refuses a take, and still answers a peek.
    let port = replica.port.to_string();
    run(&mut con, &["REPLICAOF", "127.0.0.1", &port]).unwrap();
    wait_role(&mut con, "slave");
    assert!(error_of(&mut con, &TAKE).starts_with("READONLY"));
    wait_for(
        "the link to the new primary",
        Duration::from_secs(20),
        || info_field(&mut con, "replication", "master_link_status") == "up",
    );
    assert_eq!(check(&mut con, &["RL.CHECK", "role", "k", "PEEK"])[0], 1);
}

#[test]
fn a_server_started_as_a_replica_refuses_a_check_by_name_that_takes() {
    let primary = Server::start(&[]);
    let mut con = primary.connect();
    set(&mut con, "role", &["TOKENBUCKET", "100", "0.001"]);
    let port = primary.port.to_string();
    let replica = Server::start(&["--replicaof", "127.0.0.1", &port]);
    let mut rcon = replica.connect();
    wait_for("the replica link", Duration::from_secs(20), || {
        info_field(&mut rcon, "replication", "master_link_status") == "up"
    });
    assert!(error_of(&mut rcon, &TAKE).starts_with("READONLY"));
    assert_eq!(check(&mut rcon, &["RL.CHECK", "role", "k", "PEEK"])[0], 1);
}

#[test]
fn a_check_by_name_follows_a_failover() {
    let (_primary, _replica, mut con, mut rcon) = pair_with_a_policy();
    assert_eq!(check(&mut con, &TAKE)[0], 1);
    run(&mut con, &["FAILOVER"]).unwrap();
    wait_role(&mut rcon, "master");
    wait_role(&mut con, "slave");
    assert_eq!(check(&mut rcon, &TAKE)[0], 1);
    assert!(error_of(&mut con, &TAKE).starts_with("READONLY"));
}

#[test]
fn info_shows_the_policies_their_digest_and_each_one_counts() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(info_field(&mut con, "ratelimit", "ratelimit_policies"), "0");
    set(&mut con, "plan:free", &["TOKENBUCKET", "1", "0.001"]);
    set(&mut con, "quiet", &["TOKENBUCKET", "1", "0.001", "SHADOW"]);
    for _ in 0..3 {
        check(&mut con, &["RL.CHECK", "plan:free", "a"]);
        check(&mut con, &["RL.CHECK", "quiet", "b"]);
    }
    // A peek is not a request: not counted.
    check(&mut con, &["RL.CHECK", "plan:free", "a", "PEEK"]);
    assert_eq!(info_field(&mut con, "ratelimit", "ratelimit_policies"), "2");
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_policies_digest"),
        digest(&mut con)
    );
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_policy_plan_free"),
        "checks=3,allowed=1,denied=2,shadow_denied=0,keys=1"
    );
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_policy_quiet"),
        "checks=3,allowed=1,denied=0,shadow_denied=2,keys=1"
    );
}

/// A check by name is counted as its inline command is, beside its
/// policy's line: on the algorithm's line of `INFO ratelimit`, and its
/// denials (not its shadowed ones) in `RL.TOP`.
#[test]
fn a_check_by_name_counts_on_its_inline_commands_line_and_in_rl_top() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    set(&mut con, "plan:free", &["TOKENBUCKET", "1", "0.001"]);
    set(&mut con, "quiet", &["TOKENBUCKET", "1", "0.001", "SHADOW"]);
    for _ in 0..3 {
        check(&mut con, &["RL.CHECK", "plan:free", "a"]);
        check(&mut con, &["RL.CHECK", "quiet", "b"]);
    }
    let field = |con: &mut redis::Connection, name: &str| {
        info_field(con, "ratelimit", &format!("ratelimit_tokenbucket_{name}"))
    };
    assert_eq!(field(&mut con, "allowed"), "2");
    assert_eq!(field(&mut con, "denied"), "2");
    assert_eq!(field(&mut con, "shadow_denied"), "2");
    let top = run(&mut con, &["RL.TOP", "10"]).unwrap();
    assert_eq!(words_of(&top), ["a", "2"]);
}

#[test]
fn a_check_by_name_waits_with_block_and_its_replay_reaches_the_replica() {
    let (_primary, _replica, mut con, mut rcon) = primary_and_replica();
    // One token, back after 50 ms.
    set(&mut con, "fast", &["TOKENBUCKET", "1", "20"]);
    assert_eq!(check(&mut con, &["RL.CHECK", "fast", "w"])[0], 1);
    assert_eq!(check(&mut con, &["RL.CHECK", "fast", "w"])[0], 0);
    // Waits for the token rather than being denied.
    let waited = check(&mut con, &["RL.CHECK", "fast", "w", "BLOCK", "5000"]);
    assert_eq!(&waited[..3], &[1, 1, 0]);
    run(&mut con, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(digest_value(&mut rcon, "w"), digest_value(&mut con, "w"));
    // A policy with a penalty cannot wait, as the inline command cannot.
    set_line(&mut con, "strict", "TOKENBUCKET 1 20 PENALTY 1s");
    assert!(error_of(&mut con, &["RL.CHECK", "strict", "s", "BLOCK", "10"]).starts_with("ERR"));
}

// ---- A key records its policy and version; ON-CHANGE KEEP|SCALE|RESET ----

/// A policy of one tier of `spec`, with `extra` options.
fn define(con: &mut Connection, name: &str, spec: &Spec, extra: &[&str]) -> i64 {
    let mut definition = vec![spec.word()];
    definition.extend(spec.params.iter().cloned());
    definition.extend(extra.iter().map(|w| w.to_string()));
    let definition: Vec<&str> = definition.iter().map(String::as_str).collect();
    set(con, name, &definition)
}

/// [allowed, limit, remaining] of a check by name.
fn head(con: &mut Connection, words: &[&str]) -> Vec<i64> {
    check(con, words)[..3].to_vec()
}

/// The replica holds exactly the primary's bytes for `keys`.
fn same_on_replica(con: &mut Connection, rcon: &mut Connection, keys: &[&str], what: &str) {
    run(con, &["WAIT", "1", "5000"]).unwrap();
    for key in keys {
        assert_eq!(dump(rcon, key), dump(con, key), "{what}: {key}");
        assert_eq!(
            digest_value(rcon, key),
            digest_value(con, key),
            "{what}: {key}"
        );
    }
}

/// Each algorithm: 10 at once (refilled 10 an hour), 4 taken, then the
/// limit becomes 20 with `strategy`: the key's remaining is what the rule
/// says, a peek says it before the check, and the replica's bytes are the
/// primary's after each step.
fn each_algorithm_migrates(strategy: &str, expected: impl Fn(&Spec) -> i64) {
    let (_primary, _replica, mut con, mut rcon) = primary_and_replica();
    let old = every_algorithm(10, HOUR_MS);
    let new = every_algorithm(20, HOUR_MS);
    for (old, new) in old.iter().zip(&new) {
        let name = format!("m:{}", old.name);
        let key = format!("k:{}", old.name);
        define(&mut con, &name, old, &["ON-CHANGE", strategy]);
        for _ in 0..4 {
            assert_eq!(check(&mut con, &["RL.CHECK", &name, &key])[0], 1);
        }
        let info = rl_info(&mut con, &key).unwrap();
        assert_eq!(info_text(&info, "policy"), name);
        assert_eq!(info_int(&info, "policy_version"), 1);
        define(&mut con, &name, new, &["ON-CHANGE", strategy]);
        let before = dump(&mut con, &key);
        // A peek answers from the migrated state and writes nothing.
        let peek = head(&mut con, &["RL.CHECK", &name, &key, "PEEK"]);
        assert_eq!(dump(&mut con, &key), before, "{name}: the peek wrote");
        let remaining = expected(old);
        assert_eq!(peek, vec![1, 20, remaining], "{name} {strategy} peek");
        // A read-only replica answers the peek the same, from a copy.
        run(&mut con, &["WAIT", "1", "5000"]).unwrap();
        let replica_before = dump(&mut rcon, &key);
        assert_eq!(
            head(&mut rcon, &["RL.CHECK", &name, &key, "PEEK"]),
            peek,
            "{name} {strategy}: the replica's peek"
        );
        assert_eq!(dump(&mut rcon, &key), replica_before);
        let taken = head(&mut con, &["RL.CHECK", &name, &key]);
        assert_eq!(taken, vec![1, 20, remaining - 1], "{name} {strategy}");
        let info = rl_info(&mut con, &key).unwrap();
        assert_eq!(info_int(&info, "policy_version"), 2);
        same_on_replica(&mut con, &mut rcon, &[&key], strategy);
    }
}

#[test]
fn on_change_scale_scales_the_remaining_by_new_over_old_limit() {
    // 6 of 10 left: 12 of 20.
    each_algorithm_migrates("SCALE", |_| 12);
}

#[test]
fn on_change_reset_gives_a_fresh_state() {
    each_algorithm_migrates("RESET", |_| 20);
}

#[test]
fn on_change_keep_reads_the_state_under_the_new_parameters_as_the_inline_command() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let old = every_algorithm(10, HOUR_MS);
    let new = every_algorithm(20, HOUR_MS);
    for (old, new) in old.iter().zip(&new) {
        let name = format!("keep:{}", old.name);
        define(&mut con, &name, old, &[]);
        for _ in 0..4 {
            check(&mut con, &["RL.CHECK", &name, "a"]);
            check(&mut con, &old.words("b", &[]));
        }
        define(&mut con, &name, new, &[]);
        let by_name = head(&mut con, &["RL.CHECK", &name, "a"]);
        let inline = check(&mut con, &new.words("b", &[]))[..3].to_vec();
        assert_eq!(by_name, inline, "{name}");
        run(&mut con, &["DEL", "a", "b"]).unwrap();
    }
}

/// A token bucket of 10 (4 taken) becomes a fixed window of 20 by each
/// strategy: the key changes type, its remaining is the rule's, and the
/// replica holds the same bytes.
#[test]
fn a_changed_algorithm_migrates_the_key_by_each_strategy() {
    let (_primary, _replica, mut con, mut rcon) = primary_and_replica();
    for (strategy, remaining) in [("KEEP", 6), ("SCALE", 12), ("RESET", 20)] {
        let name = format!("alg:{strategy}");
        let key = format!("alg:{strategy}:k");
        set(
            &mut con,
            &name,
            &["TOKENBUCKET", "10", "0.001", "ON-CHANGE", strategy],
        );
        for _ in 0..4 {
            check(&mut con, &["RL.CHECK", &name, &key]);
        }
        let type_before = text(&run(&mut con, &["TYPE", &key]).unwrap());
        set(
            &mut con,
            &name,
            &["FIXEDWINDOW", "20", "1h", "ON-CHANGE", strategy],
        );
        assert_eq!(
            head(&mut con, &["RL.CHECK", &name, &key, "PEEK"]),
            vec![1, 20, remaining],
            "{strategy} peek"
        );
        assert_eq!(text(&run(&mut con, &["TYPE", &key]).unwrap()), type_before);
        assert_eq!(
            head(&mut con, &["RL.CHECK", &name, &key]),
            vec![1, 20, remaining - 1],
            "{strategy}"
        );
        assert_ne!(text(&run(&mut con, &["TYPE", &key]).unwrap()), type_before);
        let info = rl_info(&mut con, &key).unwrap();
        assert_eq!(info_text(&info, "algorithm"), "fixedwindow");
        same_on_replica(&mut con, &mut rcon, &[&key], strategy);
    }
}

#[test]
fn a_key_of_another_algorithm_not_stamped_by_the_policy_stays_wrongtype() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    set_line(&mut con, "fw", "FIXEDWINDOW 20 1h ON-CHANGE RESET");
    set_line(&mut con, "tb", "TOKENBUCKET 10 1 ON-CHANGE RESET");
    check(&mut con, &["RL.TOKENBUCKET", "inline", "10", "1"]);
    check(&mut con, &["RL.CHECK", "tb", "other"]);
    run(&mut con, &["SET", "string", "x"]).unwrap();
    for key in ["inline", "other", "string"] {
        let before = dump(&mut con, key);
        assert!(
            error_of(&mut con, &["RL.CHECK", "fw", key]).starts_with("WRONGTYPE"),
            "{key}"
        );
        assert!(error_of(&mut con, &["RL.CHECK", "fw", key, "PEEK"]).starts_with("WRONGTYPE"));
        assert_eq!(dump(&mut con, key), before, "{key}");
    }
}

/// A policy deleted and defined again starts again at version 1: its keys
/// hold the same stamp as before, under other parameters, and still
/// migrate by the strategy (the stamp alone does not say a key is current).
#[test]
fn a_policy_defined_again_after_its_deletion_migrates_its_keys() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (strategy, remaining) in [("RESET", 4), ("SCALE", 0), ("KEEP", 1)] {
        let key = format!("k:{strategy}");
        let definition = format!("TOKENBUCKET 10 0.001 ON-CHANGE {strategy}");
        assert_eq!(set_line(&mut con, "again", &definition), 1);
        assert_eq!(
            check(&mut con, &["RL.CHECK", "again", &key, "COST", "8"])[2],
            2
        );
        run(&mut con, &["RL.POLICY", "DEL", "again"]).unwrap();
        let definition = format!("TOKENBUCKET 5 0.001 ON-CHANGE {strategy}");
        assert_eq!(set_line(&mut con, "again", &definition), 1);
        // RESET: a fresh bucket of 5; SCALE: 2 of 10 is 1 of 5; KEEP: the 2
        // tokens as they are. One taken from each.
        let reply = check(&mut con, &["RL.CHECK", "again", &key]);
        assert_eq!(&reply[..3], &[1, 5, remaining], "{strategy}");
        run(&mut con, &["RL.POLICY", "DEL", "again"]).unwrap();
    }
}

/// A new version that leaves a tier's parameters as they were restamps its
/// key and changes nothing else, whatever the strategy.
#[test]
fn a_new_version_with_the_same_parameters_only_restamps() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    set_line(&mut con, "same", "TOKENBUCKET 10 0.001 ON-CHANGE RESET");
    for _ in 0..4 {
        check(&mut con, &["RL.CHECK", "same", "k"]);
    }
    let timeless = |con: &mut Connection| {
        let mut info = rl_info(con, "k").unwrap();
        info.remove("ttl_ms");
        info.remove("reset_after_ms");
        (info, expiry_time(con, "k"))
    };
    let (before, expiry) = timeless(&mut con);
    // Version 2: a penalty, the tier's parameters as they were.
    set_line(
        &mut con,
        "same",
        "TOKENBUCKET 10 0.001 PENALTY 1h ON-CHANGE RESET",
    );
    // A request that can never pass: takes nothing, starts no penalty.
    assert_eq!(
        check(&mut con, &["RL.CHECK", "same", "k", "COST", "11"])[0],
        0
    );
    let (mut after, expiry_after) = timeless(&mut con);
    assert_eq!(info_int(&after, "policy_version"), 2);
    after.insert("policy_version".into(), before["policy_version"].clone());
    assert_eq!((after, expiry_after), (before, expiry));
    assert_eq!(
        head(&mut con, &["RL.CHECK", "same", "k", "PEEK"]),
        vec![1, 10, 6]
    );
}

/// RESET drops a penalty (a customer moved to a new plan is unblocked),
/// and a rollback is a change like any other: reset again.
#[test]
fn a_reset_drops_the_penalty_and_a_rollback_resets_again() {
    let (_primary, _replica, mut con, mut rcon) = primary_and_replica();
    set_line(
        &mut con,
        "plan",
        "TOKENBUCKET 2 0.001 PENALTY 1h ON-CHANGE RESET",
    );
    check(&mut con, &["RL.CHECK", "plan", "c"]);
    check(&mut con, &["RL.CHECK", "plan", "c"]);
    assert_eq!(check(&mut con, &["RL.CHECK", "plan", "c"])[0], 0);
    assert!(check(&mut con, &["RL.CHECK", "plan", "c", "PEEK"])[3] > 3_000_000);
    set_line(
        &mut con,
        "plan",
        "TOKENBUCKET 3 0.001 PENALTY 1h ON-CHANGE RESET",
    );
    assert_eq!(head(&mut con, &["RL.CHECK", "plan", "c"]), vec![1, 3, 2]);
    assert!(!rl_info(&mut con, "c")
        .unwrap()
        .contains_key("penalty_until_ms"));
    same_on_replica(&mut con, &mut rcon, &["c"], "reset");
    // Back to version 1's definition, as version 3: reset to 2 tokens.
    assert_eq!(
        int(&run(&mut con, &["RL.POLICY", "ROLLBACK", "plan", "1"]).unwrap()),
        3
    );
    assert_eq!(head(&mut con, &["RL.CHECK", "plan", "c"]), vec![1, 2, 1]);
    assert_eq!(
        info_int(&rl_info(&mut con, "c").unwrap(), "policy_version"),
        3
    );
    same_on_replica(&mut con, &mut rcon, &["c"], "rollback");
}

/// Two tiers: a change of one migrates its key only; the other is
/// restamped; both reach the replica; a migration is written even when the
/// request is denied.
#[test]
fn a_tier_migrates_on_its_own_and_even_on_a_denial() {
    let (_primary, _replica, mut con, mut rcon) = primary_and_replica();
    set_line(
        &mut con,
        "two",
        "TOKENBUCKET 10 0.001 FIXEDWINDOW 4 1h ON-CHANGE SCALE",
    );
    let allowed =
        |con: &mut Connection| int(&items(&run(con, &["RL.CHECK", "two", "t1", "t2"]).unwrap())[0]);
    for _ in 0..4 {
        assert_eq!(allowed(&mut con), 1);
    }
    set_line(
        &mut con,
        "two",
        "TOKENBUCKET 20 0.001 FIXEDWINDOW 4 1h ON-CHANGE SCALE",
    );
    // Denied by the window (4 of 4 used); the bucket's key is scaled anyway.
    assert_eq!(allowed(&mut con), 0);
    let tb = rl_info(&mut con, "t1").unwrap();
    assert_eq!(info_int(&tb, "policy_version"), 2);
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "t1", "20", "0.001", "PEEK"])[2],
        12
    );
    assert_eq!(
        info_int(&rl_info(&mut con, "t2").unwrap(), "policy_version"),
        2
    );
    same_on_replica(&mut con, &mut rcon, &["t1", "t2"], "two tiers");
}

/// Stamps and migrations survive DEBUG RELOAD, a restart from RDB, and an
/// AOF replay (with and without an RDB preamble), byte for byte.
#[test]
fn stamps_and_migrations_survive_rdb_and_aof() {
    for preamble in ["yes", "no"] {
        let mut server = aof_server(preamble);
        let mut con = server.connect();
        set_line(&mut con, "p", "TOKENBUCKET 10 0.001 ON-CHANGE SCALE");
        for _ in 0..4 {
            check(&mut con, &["RL.CHECK", "p", "k"]);
        }
        set_line(&mut con, "p", "GCRA 19 20 1h ON-CHANGE SCALE");
        check(&mut con, &["RL.CHECK", "p", "k"]);
        let state = dump(&mut con, "k");
        let info = rl_info(&mut con, "k").unwrap();
        run(&mut con, &["DEBUG", "LOADAOF"]).unwrap();
        assert_eq!(dump(&mut con, "k"), state, "LOADAOF, preamble {preamble}");
        rewrite_aof(&mut con);
        run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
        assert_eq!(dump(&mut con, "k"), state);
        drop(con);
        server.shutdown_nosave();
        server.launch();
        let mut con = server.connect();
        assert_eq!(dump(&mut con, "k"), state, "restart, preamble {preamble}");
        let mut again = rl_info(&mut con, "k").unwrap();
        again.insert("ttl_ms".into(), info["ttl_ms"].clone());
        assert_eq!(info_text(&again, "policy"), "p");
        assert_eq!(info_int(&again, "policy_version"), 2);
    }
}

/// A penalized state as the module wrote it before stamps (tag 0x50, the
/// algorithm's tag, the penalty's end, the state's body: built here byte
/// by byte) loads (`RL.SETSTATE`, what an RDB file or AOF rewrite of main
/// carries), carries no stamp, and a check by name stamps it, its penalty
/// kept; the stamped encoding starts with 0x51.
#[test]
fn a_penalized_state_written_before_stamps_loads_and_is_stamped_by_a_check() {
    use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
    use redis_ratelimit::algorithms::{Algorithm, Mode, Registered, State};
    let server = Server::start(&[]);
    let mut con = server.connect();
    set_line(&mut con, "p", "TOKENBUCKET 2 0.001 PENALTY 1h");
    let now = server_time_ms(&mut con);
    let params = TokenBucketParams {
        capacity: 2,
        rate_per_s: 0.001,
    };
    let (_, state) = TokenBucket::check_with(None, params, now, 2, Mode::Take);
    let until = now + 3_600_000;
    let mut bytes = vec![0x50, TokenBucket::TAG];
    bytes.extend_from_slice(&until.to_le_bytes());
    state.unwrap().encode_body(&mut bytes);
    redis::cmd("RL.SETSTATE")
        .arg("k")
        .arg(&bytes)
        .query::<()>(&mut con)
        .unwrap();
    let old = rl_info(&mut con, "k").unwrap();
    assert_eq!(info_int(&old, "penalty_until_ms"), until);
    assert!(!old.contains_key("policy"));
    assert_eq!(
        check(&mut con, &["RL.CHECK", "p", "k"])[0],
        0,
        "the penalty holds"
    );
    let info = rl_info(&mut con, "k").unwrap();
    assert_eq!(info_text(&info, "policy"), "p");
    assert_eq!(info_int(&info, "policy_version"), 1);
    assert_eq!(info_int(&info, "penalty_until_ms"), until);
    let stamped = dump(&mut con, "k").unwrap();
    assert!(stamped.windows(2).any(|w| w == [0x51, TokenBucket::TAG]));
}

/// `keys=` of a policy's `INFO ratelimit` line.
fn policy_keys(con: &mut Connection, name: &str) -> i64 {
    let line = info_field(con, "ratelimit", &format!("ratelimit_policy_{name}"));
    let keys = line.rsplit("keys=").next().unwrap_or_default();
    keys.parse()
        .unwrap_or_else(|_| panic!("no keys count in {line:?}"))
}

fn eventually_keys(con: &mut Connection, name: &str, n: i64, what: &str) {
    wait_for(what, Duration::from_secs(10), || {
        policy_keys(con, name) == n
    });
}

/// Each policy counts the keys holding its stamp, without SCAN: up with
/// each check on a new key, COPY, RESTORE; down with DEL, UNLINK, an
/// overwrite, expiry, FLUSHALL (sync and async); moved by a restamp to
/// another policy; the same after DEBUG RELOAD, a restart from RDB, and on
/// a replica after its full sync.
#[test]
fn each_policy_counts_its_keys_without_scan() {
    let mut server = Server::start(&[]);
    let mut con = server.connect();
    set(&mut con, "p", &["TOKENBUCKET", "10", "0.001"]);
    set(&mut con, "q", &["TOKENBUCKET", "5", "0.001"]);
    assert_eq!(policy_keys(&mut con, "p"), 0);
    for i in 0..10 {
        check(&mut con, &["RL.CHECK", "p", &format!("k{i}")]);
    }
    // A new key is stored stamped, with its expiry as the inline command's
    // key of the same state has it.
    check(&mut con, &["RL.TOKENBUCKET", "twin", "10", "0.001"]);
    let (made, twin) = (expiry_time(&mut con, "k9"), expiry_time(&mut con, "twin"));
    assert!(made > 0 && (made - twin).abs() < 1_000, "{made} {twin}");
    run(&mut con, &["DEL", "twin"]).unwrap();
    // A peek and an inline check stamp nothing.
    check(&mut con, &["RL.CHECK", "p", "peeked", "PEEK"]);
    check(&mut con, &["RL.TOKENBUCKET", "inline", "10", "0.001"]);
    assert_eq!(policy_keys(&mut con, "p"), 10);
    run(&mut con, &["DEL", "k0"]).unwrap();
    run(&mut con, &["UNLINK", "k1"]).unwrap();
    run(&mut con, &["SET", "k2", "x"]).unwrap();
    assert_eq!(policy_keys(&mut con, "p"), 7);
    run(&mut con, &["PEXPIRE", "k3", "1"]).unwrap();
    wait_for("k3 expires", Duration::from_secs(5), || {
        !exists(&mut con, "k3")
    });
    assert_eq!(policy_keys(&mut con, "p"), 6);
    run(&mut con, &["COPY", "k4", "c4"]).unwrap();
    let payload = redis::cmd("DUMP")
        .arg("k5")
        .query::<Vec<u8>>(&mut con)
        .unwrap();
    redis::cmd("RESTORE")
        .arg("r5")
        .arg(0)
        .arg(payload)
        .query::<()>(&mut con)
        .unwrap();
    assert_eq!(policy_keys(&mut con, "p"), 8);
    // The copy and the restored key carry the stamp (the one encoding).
    for key in ["c4", "r5"] {
        let info = rl_info(&mut con, key).unwrap();
        assert_eq!(
            (
                info_text(&info, "policy"),
                info_int(&info, "policy_version")
            ),
            ("p".into(), 1)
        );
    }
    assert_eq!(dump(&mut con, "c4"), dump(&mut con, "k4"));
    // The inline key, checked by name, is stamped; a key of p checked by
    // q moves to q.
    check(&mut con, &["RL.CHECK", "p", "inline"]);
    check(&mut con, &["RL.CHECK", "q", "k6"]);
    assert_eq!(
        (policy_keys(&mut con, "p"), policy_keys(&mut con, "q")),
        (8, 1)
    );
    run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(
        (policy_keys(&mut con, "p"), policy_keys(&mut con, "q")),
        (8, 1)
    );
    run(&mut con, &["SAVE"]).unwrap();
    drop(con);
    server.shutdown_nosave();
    server.launch();
    let mut con = server.connect();
    assert_eq!(
        (policy_keys(&mut con, "p"), policy_keys(&mut con, "q")),
        (8, 1)
    );
    let replica = Server::start_replica_of(&server);
    let mut rcon = replica.connect();
    run(&mut con, &["WAIT", "1", "5000"]).unwrap();
    eventually_keys(&mut rcon, "p", 8, "the replica's count");
    assert_eq!(policy_keys(&mut rcon, "q"), 1);
    run(&mut con, &["FLUSHALL", "ASYNC"]).unwrap();
    eventually_keys(&mut con, "p", 0, "FLUSHALL ASYNC frees");
    eventually_keys(&mut rcon, "p", 0, "the replica's FLUSHALL");
    assert_eq!(policy_keys(&mut con, "q"), 0);
    for i in 0..3 {
        check(&mut con, &["RL.CHECK", "p", &format!("k{i}")]);
    }
    assert_eq!(policy_keys(&mut con, "p"), 3);
    run(&mut con, &["FLUSHALL", "SYNC"]).unwrap();
    assert_eq!(policy_keys(&mut con, "p"), 0);
}

// ---- A waiter follows its policy ----

/// A client waiting on `RL.CHECK name key BLOCK 10000`, from its own
/// connection, once the server counts it blocked: its reply, or its error.
fn waiting_on(
    server: &Server,
    con: &mut Connection,
    name: &str,
    keys: &[&str],
) -> std::thread::JoinHandle<Result<Vec<i64>, String>> {
    let mut waiter = server.connect();
    let mut words = vec!["RL.CHECK".to_string(), name.to_string()];
    words.extend(keys.iter().map(|k| k.to_string()));
    words.extend(["BLOCK".to_string(), "10000".to_string()]);
    let before = info_field(con, "ratelimit", "ratelimit_blocked_clients");
    let handle = std::thread::spawn(move || {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match run(&mut waiter, &words) {
            Ok(v) => Ok(items(&v).iter().map(int).collect()),
            Err(e) => Err(e.to_string()),
        }
    });
    let blocked = (before.parse::<i64>().unwrap() + 1).to_string();
    wait_for("the client waits", Duration::from_secs(10), || {
        info_field(con, "ratelimit", "ratelimit_blocked_clients") == blocked
    });
    handle
}

/// A change that puts a waiter's turn past its deadline answers it at once,
/// denied, nothing taken: as a check sent then would be. Before, it went on
/// waiting with no hold on its key (a hold reaches only a turn within the
/// wait), so the key expired at the old version's time and the waiter was
/// allowed on a new key, 100 s before the new version's turn.
#[test]
fn a_change_that_puts_a_waiters_turn_past_its_deadline_answers_it_denied() {
    let (primary, _replica, mut con, mut rcon) = primary_and_replica();
    // One token, back after 1 s: the key expires within 2 s.
    set(&mut con, "plan", &["TOKENBUCKET", "1", "1"]);
    assert_eq!(head(&mut con, &["RL.CHECK", "plan", "a"]), [1, 1, 0]);
    let waiter = waiting_on(&primary, &mut con, "plan", &["a"]);
    // Now a token every 100 s: past the waiter's 10 s.
    set(&mut con, "plan", &["TOKENBUCKET", "1", "0.01"]);
    let reply = waiter.join().unwrap().expect("answered");
    assert_eq!(&reply[..3], &[0, 1, 0], "{reply:?}");
    assert!(reply[3] > 0, "{reply:?}");
    same_on_replica(&mut con, &mut rcon, &["a"], "after the waiter");
}

#[test]
fn a_waiter_is_decided_under_its_policy_as_it_stands_when_its_turn_comes() {
    let (primary, _replica, mut con, mut rcon) = primary_and_replica();
    // One token, back after 8 s (a wait of up to 10 s starts).
    set(&mut con, "plan", &["TOKENBUCKET", "1", "0.125"]);
    assert_eq!(head(&mut con, &["RL.CHECK", "plan", "a"]), [1, 1, 0]);
    let waiter = waiting_on(&primary, &mut con, "plan", &["a"]);
    // The plan now has two tokens, back after 50 ms: the waiter is served
    // at once, by the new version (its limit), not at the old turn.
    let at = server_time_ms(&mut con);
    set(&mut con, "plan", &["TOKENBUCKET", "2", "20"]);
    let reply = waiter.join().unwrap().expect("served");
    assert_eq!(&reply[..2], &[1, 2], "{reply:?}");
    assert!(server_time_ms(&mut con) - at < 5_000, "served at once");
    let info = run(&mut con, &["RL.INFO", "a"]).unwrap();
    assert_eq!(int(field(&info, "policy_version").unwrap()), 2);
    same_on_replica(&mut con, &mut rcon, &["a"], "after the waiter");

    // A policy deleted while a client waits: the waiter gets the error a
    // check by that name gets, and nothing is taken.
    set(&mut con, "gone", &["TOKENBUCKET", "1", "0.125"]);
    assert_eq!(head(&mut con, &["RL.CHECK", "gone", "b"]), [1, 1, 0]);
    let before = dump(&mut con, "b");
    let waiter = waiting_on(&primary, &mut con, "gone", &["b"]);
    assert_eq!(
        int(&run(&mut con, &["RL.POLICY", "DEL", "gone"]).unwrap()),
        1
    );
    let error = waiter.join().unwrap().expect_err("refused");
    assert!(error.contains("no policy 'gone'"), "{error}");
    assert_eq!(dump(&mut con, "b"), before);

    // A policy that now has two tiers: the waiter named one key.
    set(&mut con, "grows", &["TOKENBUCKET", "1", "0.125"]);
    assert_eq!(head(&mut con, &["RL.CHECK", "grows", "c"]), [1, 1, 0]);
    let waiter = waiting_on(&primary, &mut con, "grows", &["c"]);
    set_line(&mut con, "grows", "TOKENBUCKET 1 0.125 FIXEDWINDOW 10 1h");
    let error = waiter.join().unwrap().expect_err("refused");
    assert!(error.contains("policy 'grows' has 2 tiers"), "{error}");
    same_on_replica(&mut con, &mut rcon, &["a", "b", "c"], "at the end");
}
