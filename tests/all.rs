//! `RL.ALL` on a real server: several tiers decided together, the request
//! taken from all of them or from none; its bad inputs, its key limit
//! (`ratelimit.max-keys`), its key specs and what it replicates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    check, digest_value, dump, error_of, every_algorithm, exists, info_int, pttl, rl_info, run,
    Server, Spec, ALGORITHMS,
};
use redis::Connection;

/// The reply of RL.ALL: the combined five, then each tier's own reply.
fn all(con: &mut Connection, words: &[&str]) -> (Vec<i64>, Vec<Vec<i64>>) {
    let mut cmd = redis::cmd("RL.ALL");
    for w in words {
        cmd.arg(*w);
    }
    let (a, b, c, d, e, tiers): (i64, i64, i64, i64, i64, Vec<Vec<i64>>) = cmd
        .query(con)
        .unwrap_or_else(|err| panic!("RL.ALL {words:?} failed: {err}"));
    (vec![a, b, c, d, e], tiers)
}

const THREE_TIERS: &[&str] = &[
    "3",
    "{u1}:s",
    "{u1}:m",
    "{u1}:h",
    "TOKENBUCKET",
    "2",
    "0.001",
    "SLIDINGLOG",
    "3",
    "1m",
    "FIXEDWINDOW",
    "100",
    "1h",
];

#[test]
fn all_allows_only_while_every_tier_allows_and_takes_from_every_tier() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let (combined, tiers) = all(&mut con, THREE_TIERS);
    assert_eq!(
        &combined[..3],
        &[1, 2, 1],
        "tightest tier: the bucket, 1 left"
    );
    assert_eq!(tiers.len(), 3);
    assert_eq!(&tiers[0][..4], &[1, 2, 1, 0]);
    assert_eq!(&tiers[1][..4], &[1, 3, 2, 0]);
    assert_eq!(&tiers[2][..4], &[1, 100, 99, 0]);
    assert_eq!(all(&mut con, THREE_TIERS).0[..3], [1, 2, 0]);
    let (denied, tiers) = all(&mut con, THREE_TIERS);
    assert_eq!(denied[0], 0, "the bucket is empty");
    assert!(denied[3] > 0, "retry_after_ms: {denied:?}");
    assert_eq!(tiers[0][0], 0);
    // The other tiers would allow; nothing was taken from them, so they
    // report what they hold now, as a peek does.
    assert_eq!(&tiers[1][..4], &[1, 3, 1, 0]);
    assert_eq!(&tiers[2][..4], &[1, 100, 98, 0]);
}

#[test]
fn a_tier_that_denies_leaves_every_other_tier_byte_for_byte_unchanged() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Exhaust only the middle tier, through its own command.
    for _ in 0..3 {
        check(&mut con, &["RL.SLIDINGLOG", "{u1}:m", "3", "1m"]);
    }
    all(&mut con, &["1", "{u1}:s", "TOKENBUCKET", "2", "0.001"]);
    all(&mut con, &["1", "{u1}:h", "FIXEDWINDOW", "100", "1h"]);
    let keys = ["{u1}:s", "{u1}:m", "{u1}:h"];
    let before: Vec<_> = keys.iter().map(|k| dump(&mut con, k)).collect();
    let ttls: Vec<_> = keys.iter().map(|k| pttl(&mut con, k)).collect();
    let (denied, tiers) = all(&mut con, THREE_TIERS);
    assert_eq!(denied[0], 0);
    assert_eq!(tiers.iter().map(|t| t[0]).collect::<Vec<_>>(), [1, 0, 1]);
    let after: Vec<_> = keys.iter().map(|k| dump(&mut con, k)).collect();
    assert_eq!(before, after, "a denial changed a tier");
    for (key, ttl) in keys.iter().zip(ttls) {
        assert!(pttl(&mut con, key) <= ttl, "{key}'s TTL was extended");
    }
}

#[test]
fn all_with_peek_changes_nothing_and_creates_no_key() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let mut words = THREE_TIERS.to_vec();
    words.push("PEEK");
    let (combined, tiers) = all(&mut con, &words);
    assert_eq!(
        &combined[..4],
        &[1, 2, 2, 0],
        "remaining is what is there now"
    );
    assert_eq!(tiers.len(), 3);
    for key in ["{u1}:s", "{u1}:m", "{u1}:h"] {
        assert!(!exists(&mut con, key), "PEEK created {key}");
    }
    all(&mut con, THREE_TIERS);
    let before = dump(&mut con, "{u1}:m");
    all(&mut con, &words);
    assert_eq!(dump(&mut con, "{u1}:m"), before);
}

/// One tier of each algorithm, as `RL.ALL` takes it: its word, then its
/// parameters, the `i`-th (from 0) with a limit of `10 * (i + 1)` a minute.
fn every_tier() -> Vec<Spec> {
    (0..ALGORITHMS.len())
        .map(|i| every_algorithm(10 * (i as u64 + 1), 60_000).swap_remove(i))
        .collect()
}

#[test]
fn all_takes_cost_from_every_tier_and_mixes_every_algorithm() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let every_tier = every_tier();
    // Key k<i> holds tier i (from 1).
    let keys: Vec<String> = (1..=every_tier.len()).map(|i| format!("k{i}")).collect();
    let tier_of = |name: &str| every_tier.iter().position(|t| t.name == name).unwrap();
    let numkeys = every_tier.len().to_string();
    let mut words = vec![numkeys.clone()];
    words.extend(keys.iter().cloned());
    for tier in &every_tier {
        words.push(tier.word());
        words.extend(tier.params.iter().cloned());
    }
    words.extend(["COST".to_string(), "4".to_string()]);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (combined, tiers) = all(&mut con, &words);
    assert_eq!(&combined[..3], &[1, 10, 6]);
    let remaining: Vec<i64> = tiers.iter().map(|t| t[2]).collect();
    // What remains after a `COST 4`.
    let expected: Vec<i64> = (1..=every_tier.len() as i64).map(|i| 10 * i - 4).collect();
    assert_eq!(remaining, expected);
    assert_eq!(
        tiers[tier_of("leakybucket")].len(),
        6,
        "the leaky bucket's tier carries delay_ms"
    );
    // The same keys answer their own commands with what RL.ALL took.
    let fixed = &every_tier[tier_of("fixedwindow")];
    let fixed_key = &keys[tier_of("fixedwindow")];
    assert_eq!(
        check(&mut con, &fixed.words(fixed_key, &["PEEK"]))[2],
        expected[tier_of("fixedwindow")]
    );
    // An algorithm's own option given in RL.ALL is taken.
    let sliding = &every_tier[tier_of("slidingcounter")];
    let precision = sliding.params[sliding.param_count + 1]
        .parse::<i64>()
        .unwrap();
    let sc = rl_info(&mut con, &keys[tier_of("slidingcounter")]).unwrap();
    assert_eq!(info_int(&sc, "precision"), precision);
    assert_eq!(
        info_int(&sc, "remaining"),
        expected[tier_of("slidingcounter")]
    );
}

#[test]
fn all_refuses_bad_input_with_a_clear_error_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["SET", "str", "x"]).unwrap();
    // The words of the registry's algorithms, in its order, as the error
    // lists them: `TOKENBUCKET, SLIDINGCOUNTER, ... or GCRA`.
    let upper: Vec<String> = ALGORITHMS.iter().map(|a| a.to_ascii_uppercase()).collect();
    let (last, before) = upper.split_last().unwrap();
    let unknown = format!(
        "ERR syntax error: unknown algorithm 'BOGUS' (expected {} or {last})",
        before.join(", ")
    );
    let cases: &[(&[&str], &str)] = &[
        (&["RL.ALL"], "ERR wrong number of arguments for 'rl.all' command"),
        (&["RL.ALL", "1", "a"], "ERR wrong number of arguments for 'rl.all' command"),
        (&["RL.ALL", "0", "a", "TOKENBUCKET", "1", "1"], "ERR numkeys must be a whole number of at least 1"),
        (&["RL.ALL", "-1", "a", "TOKENBUCKET", "1", "1"], "ERR numkeys must be a whole number of at least 1"),
        (&["RL.ALL", "x", "a", "TOKENBUCKET", "1", "1"], "ERR numkeys must be a whole number of at least 1"),
        (&["RL.ALL", "9", "a", "TOKENBUCKET", "1", "1"], "ERR numkeys must be at most the number of arguments after it"),
        (&["RL.ALL", "2", "a", "b", "TOKENBUCKET", "1", "1"], "ERR syntax error: 2 keys need 2 algorithm specs, 1 given"),
        (&["RL.ALL", "1", "a", "BOGUS", "1", "1"], unknown.as_str()),
        (&["RL.ALL", "2", "a", "a", "TOKENBUCKET", "1", "1", "TOKENBUCKET", "1", "1"], "ERR syntax error: key 'a' is given more than once"),
        (&["RL.ALL", "1", "a", "GCRA", "1", "1"], "ERR syntax error: GCRA needs 3 parameters"),
        (&["RL.ALL", "1", "a", "SLIDINGCOUNTER", "5", "1m", "PRECISION"], "ERR syntax error: PRECISION needs a value"),
        (&["RL.ALL", "1", "a", "TOKENBUCKET", "0", "1"], "ERR capacity must be an integer from 1 to 9007199254740991"),
        (&["RL.ALL", "1", "a", "FIXEDWINDOW", "5", "0s"], "ERR window must be a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)"),
        (&["RL.ALL", "1", "a", "TOKENBUCKET", "1", "1", "TOKENBUCKET", "1", "1"], "ERR syntax error: unknown option 'TOKENBUCKET'"),
        (&["RL.ALL", "1", "a", "TOKENBUCKET", "1", "1", "COST", "0"], "ERR COST must be an integer from 1 to 9007199254740991"),
        (&["RL.ALL", "1", "a", "TOKENBUCKET", "1", "1", "PEEK", "PEEK"], "ERR syntax error: PEEK given more than once"),
        (&["RL.ALL", "1", "a", "TOKENBUCKET", "1", "1", "PRECISION", "2"], "ERR syntax error: unknown option 'PRECISION'"),
    ];
    for (words, expected) in cases {
        assert_eq!(error_of(&mut con, words), *expected, "{words:?}");
    }
    assert!(!exists(&mut con, "a"), "an error created a key");
    // WRONGTYPE on any tier, and the tiers before it are untouched.
    for tiers in [
        &[
            "2",
            "ok",
            "str",
            "TOKENBUCKET",
            "5",
            "1",
            "TOKENBUCKET",
            "5",
            "1",
        ][..],
        &[
            "2",
            "str",
            "ok",
            "TOKENBUCKET",
            "5",
            "1",
            "TOKENBUCKET",
            "5",
            "1",
        ][..],
    ] {
        let mut words = vec!["RL.ALL"];
        words.extend_from_slice(tiers);
        assert_eq!(
            error_of(&mut con, &words),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        assert!(!exists(&mut con, "ok"));
    }
    check(&mut con, &["RL.GCRA", "g", "1", "1", "60"]);
    let before = dump(&mut con, "g");
    assert_eq!(
        error_of(
            &mut con,
            &[
                "RL.ALL",
                "2",
                "fresh",
                "g",
                "TOKENBUCKET",
                "5",
                "1",
                "TOKENBUCKET",
                "5",
                "1"
            ]
        ),
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "another algorithm's key is the wrong type too"
    );
    assert_eq!(dump(&mut con, "g"), before);
    assert!(!exists(&mut con, "fresh"));
}

/// `RL.ALL` over `n` token-bucket tiers on the keys `{prefix}:0` ...
fn many_tiers(prefix: &str, n: usize) -> Vec<String> {
    let mut words = vec!["RL.ALL".to_string(), n.to_string()];
    words.extend((0..n).map(|i| format!("{{{prefix}}}:{i}")));
    for _ in 0..n {
        words.extend(["TOKENBUCKET", "5", "1"].map(String::from));
    }
    words
}

fn as_strs(words: &[String]) -> Vec<&str> {
    words.iter().map(String::as_str).collect()
}

fn config_get(con: &mut Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap();
    pair.get(1).cloned().unwrap_or_default()
}

#[test]
fn all_refuses_more_keys_than_max_keys_before_touching_any() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut con = primary.connect();
    assert_eq!(config_get(&mut con, "ratelimit.max-keys"), "100");
    let at_most = many_tiers("a", 100);
    let (combined, tiers) = all(&mut con, &as_strs(&at_most)[1..]);
    assert_eq!((combined[0], tiers.len()), (1, 100));

    // One key more: refused before any key is read or written, nothing
    // replicated, not counted.
    check(&mut con, &["RL.TOKENBUCKET", "{b}:0", "5", "1"]);
    let before = dump(&mut con, "{b}:0");
    let offset = || common::info_field(&mut primary.connect(), "replication", "master_repl_offset");
    let offset_before = offset();
    let allowed_before = common::info_field(&mut con, "ratelimit", "ratelimit_all_allowed");
    let over = many_tiers("b", 101);
    assert_eq!(
        error_of(&mut con, &as_strs(&over)),
        "ERR numkeys must be at most 100 (ratelimit.max-keys)"
    );
    let mut peek = over.clone();
    peek.push("PEEK".into());
    assert_eq!(
        error_of(&mut con, &as_strs(&peek)),
        "ERR numkeys must be at most 100 (ratelimit.max-keys)",
        "a peek is bounded too"
    );
    assert_eq!(
        dump(&mut con, "{b}:0"),
        before,
        "a refused call changed a key"
    );
    assert!(!exists(&mut con, "{b}:1"), "a refused call created a key");
    assert_eq!(offset(), offset_before, "a refused call was replicated");
    assert_eq!(
        common::info_field(&mut con, "ratelimit", "ratelimit_all_allowed"),
        allowed_before
    );

    // Lowered at run time.
    run(&mut con, &["CONFIG", "SET", "ratelimit.max-keys", "2"]).unwrap();
    assert_eq!(
        error_of(&mut con, &as_strs(&many_tiers("c", 3))),
        "ERR numkeys must be at most 2 (ratelimit.max-keys)"
    );
    assert_eq!(all(&mut con, &as_strs(&many_tiers("c", 2))[1..]).0[0], 1);
    // Raised at run time.
    run(&mut con, &["CONFIG", "SET", "ratelimit.max-keys", "1000"]).unwrap();
    assert_eq!(config_get(&mut con, "ratelimit.max-keys"), "1000");
    assert_eq!(all(&mut con, &as_strs(&many_tiers("d", 1000))[1..]).0[0], 1);
    for bad in ["0", "1000001", "-1", "x"] {
        assert!(
            run(&mut con, &["CONFIG", "SET", "ratelimit.max-keys", bad]).is_err(),
            "max-keys {bad} accepted"
        );
    }
    assert_eq!(config_get(&mut con, "ratelimit.max-keys"), "1000");

    // The replica, still at the default of 100, applies every RL.ALL its
    // primary allowed: the bound is for clients, not for replays.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.connect();
    assert_eq!(config_get(&mut r, "ratelimit.max-keys"), "100");
    for key in ["{a}:99", "{c}:1", "{d}:0", "{d}:999"] {
        assert!(exists(&mut r, key), "{key} is missing on the replica");
        assert_eq!(
            digest_value(&mut con, key),
            digest_value(&mut r, key),
            "{key}"
        );
    }
}

#[test]
fn max_keys_is_settable_by_a_loadmodule_argument() {
    let server = Server::start(&["max-keys", "3"]);
    let mut con = server.connect();
    assert_eq!(config_get(&mut con, "ratelimit.max-keys"), "3");
    assert_eq!(
        error_of(&mut con, &as_strs(&many_tiers("a", 4))),
        "ERR numkeys must be at most 3 (ratelimit.max-keys)"
    );
}

#[test]
fn command_getkeys_names_exactly_the_keys_numkeys_counts() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.ALL")
        .arg("2")
        .arg("TOKENBUCKET")
        .arg("b")
        .arg("TOKENBUCKET")
        .arg("1")
        .arg("1")
        .arg("TOKENBUCKET")
        .arg("1")
        .arg("1")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["TOKENBUCKET", "b"], "keys are positions, not words");
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.ACQUIRE")
        .arg("conc")
        .arg("5")
        .arg("30s")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["conc"]);
}

#[test]
fn all_replicates_only_the_effects_of_an_allowed_request() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let mut r = replica.connect();
    for _ in 0..4 {
        all(&mut p, THREE_TIERS);
    }
    let mut words = THREE_TIERS.to_vec();
    words.push("PEEK");
    all(&mut p, &words);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    for key in ["{u1}:s", "{u1}:m", "{u1}:h"] {
        assert_eq!(
            digest_value(&mut p, key),
            digest_value(&mut r, key),
            "{key}"
        );
    }
    let offset =
        |con: &mut Connection| common::info_field(con, "replication", "master_repl_offset");
    let before = offset(&mut p);
    all(&mut p, THREE_TIERS); // denied: the bucket holds 2
    all(&mut p, &words);
    assert_eq!(offset(&mut p), before, "a denial or a peek was replicated");
}
