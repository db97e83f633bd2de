//! RL.ALL (several tiers, all or nothing), the concurrency limiter
//! (RL.ACQUIRE / RL.RELEASE) and RL.INFO, on a real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::thread::sleep;
use std::time::Duration;

use common::{
    check, digest_value, dump, error_of, every_algorithm, exists, pttl, run, Server, Spec,
    ALGORITHMS,
};
use redis::{Connection, Value};

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

/// The reply of RL.ACQUIRE: the five integers and the lease id (if any).
fn acquire(con: &mut Connection, words: &[&str]) -> (Vec<i64>, Option<String>) {
    let mut cmd = redis::cmd("RL.ACQUIRE");
    for w in words {
        cmd.arg(*w);
    }
    let (a, b, c, d, e, id): (i64, i64, i64, i64, i64, Option<String>) = cmd
        .query(con)
        .unwrap_or_else(|err| panic!("RL.ACQUIRE {words:?} failed: {err}"));
    (vec![a, b, c, d, e], id)
}

fn release(con: &mut Connection, key: &str, id: &str) -> i64 {
    redis::cmd("RL.RELEASE")
        .arg(key)
        .arg(id)
        .query(con)
        .unwrap()
}

/// RL.INFO as a map of field name to value.
fn info(con: &mut Connection, key: &str) -> Option<HashMap<String, Value>> {
    match run(con, &["RL.INFO", key]).unwrap() {
        Value::Nil => None,
        Value::Array(items) => {
            let mut map = HashMap::new();
            for pair in items.chunks(2) {
                let name: String = redis::from_redis_value(pair[0].clone()).unwrap();
                map.insert(name, pair[1].clone());
            }
            Some(map)
        }
        Value::Map(pairs) => Some(
            pairs
                .into_iter()
                .map(|(k, v)| (redis::from_redis_value::<String>(k).unwrap(), v))
                .collect(),
        ),
        other => panic!("RL.INFO {key} replied {other:?}"),
    }
}

fn int(map: &HashMap<String, Value>, field: &str) -> i64 {
    redis::from_redis_value(map[field].clone()).unwrap()
}

fn text(map: &HashMap<String, Value>, field: &str) -> String {
    redis::from_redis_value(map[field].clone()).unwrap()
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
    let sc = info(&mut con, &keys[tier_of("slidingcounter")]).unwrap();
    assert_eq!(int(&sc, "precision"), precision);
    assert_eq!(int(&sc, "remaining"), expected[tier_of("slidingcounter")]);
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

#[test]
fn leases_are_given_up_to_the_limit_and_come_back_when_released() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let (first, a) = acquire(&mut con, &["conc", "2", "30s"]);
    let a = a.expect("an id");
    assert_eq!(&first[..4], &[1, 2, 1, 0]);
    assert_eq!(a.len(), 32, "a drawn id is 32 hex characters: {a}");
    assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    let (second, b) = acquire(&mut con, &["conc", "2", "30s", "ID", "worker-7"]);
    assert_eq!(b.as_deref(), Some("worker-7"));
    assert_eq!(&second[..3], &[1, 2, 0]);
    let (third, none) = acquire(&mut con, &["conc", "2", "30s"]);
    assert_eq!(none, None, "a refused acquire has no id");
    assert_eq!(&third[..3], &[0, 2, 0]);
    assert!(
        (29_000..=30_000).contains(&third[3]),
        "retry after the first lease ends: {third:?}"
    );
    assert_eq!(release(&mut con, "conc", &a), 1);
    assert_eq!(release(&mut con, "conc", &a), 0, "released twice");
    assert_eq!(release(&mut con, "conc", "never-held"), 0);
    assert_eq!(release(&mut con, "nokey", "x"), 0);
    assert_eq!(acquire(&mut con, &["conc", "2", "30s"]).0[0], 1);
}

#[test]
fn drawn_lease_ids_do_not_repeat() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..500 {
        let id = acquire(&mut con, &["many", "1000", "1m"]).1.unwrap();
        assert!(seen.insert(id), "an id was drawn twice");
    }
}

#[test]
fn a_crashed_clients_lease_ends_by_itself_and_the_key_expires_with_the_last_lease() {
    // No expiry slack: the key goes the moment its last lease ends.
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    acquire(&mut con, &["short", "1", "300ms", "ID", "crashed"]);
    assert_eq!(acquire(&mut con, &["short", "1", "300ms"]).0[0], 0);
    let ttl = pttl(&mut con, "short");
    assert!((1..=300).contains(&ttl), "TTL is the lease's end: {ttl}");
    sleep(Duration::from_millis(350));
    assert!(
        !exists(&mut con, "short"),
        "the key outlived its last lease"
    );
    let (again, _) = acquire(&mut con, &["short", "1", "300ms"]);
    assert_eq!(again[0], 1);
}

#[test]
fn releasing_the_last_lease_deletes_the_key_and_the_replica_follows() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let mut r = replica.connect();
    acquire(&mut p, &["rel", "3", "1m", "ID", "a"]);
    acquire(&mut p, &["rel", "3", "1m", "ID", "b"]);
    acquire(&mut p, &["rel", "3", "1m"]);
    release(&mut p, "rel", "b");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(digest_value(&mut p, "rel"), digest_value(&mut r, "rel"));
    let held = info(&mut r, "rel").unwrap();
    assert_eq!(int(&held, "remaining"), 1);
    release(&mut p, "rel", "a");
    let ids: Vec<Vec<Value>> =
        redis::from_redis_value(info(&mut p, "rel").unwrap()["leases"].clone()).unwrap();
    let last: String = redis::from_redis_value(ids[0][0].clone()).unwrap();
    release(&mut p, "rel", &last);
    assert!(!exists(&mut p, "rel"));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    assert!(!exists(&mut r, "rel"), "the replica kept the key");
}

#[test]
fn acquire_and_release_refuse_bad_input() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["SET", "str", "x"]).unwrap();
    check(&mut con, &["RL.TOKENBUCKET", "tb", "1", "1"]);
    let long_id = "x".repeat(65);
    let cases: &[(&[&str], &str)] = &[
        (&["RL.ACQUIRE", "k", "1"], "ERR wrong number of arguments for 'rl.acquire' command"),
        (&["RL.ACQUIRE", "k", "0", "1s"], "ERR limit must be an integer from 1 to 9007199254740991"),
        (&["RL.ACQUIRE", "k", "1", "0"], "ERR lease must be a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)"),
        (&["RL.ACQUIRE", "k", "1", "1s", "ID"], "ERR syntax error: ID needs a value"),
        (&["RL.ACQUIRE", "k", "1", "1s", "ID", ""], "ERR id must be 1 to 64 bytes"),
        (&["RL.ACQUIRE", "k", "1", "1s", "ID", &long_id], "ERR id must be 1 to 64 bytes"),
        (&["RL.ACQUIRE", "k", "1", "1s", "ID", "a", "ID", "b"], "ERR syntax error: ID given more than once"),
        (&["RL.ACQUIRE", "k", "1", "1s", "COST", "1"], "ERR syntax error: unknown option 'COST'"),
        (&["RL.ACQUIRE", "str", "1", "1s"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.ACQUIRE", "tb", "1", "1s"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.RELEASE", "k"], "ERR wrong number of arguments for 'rl.release' command"),
        (&["RL.RELEASE", "k", "a", "b"], "ERR wrong number of arguments for 'rl.release' command"),
        (&["RL.RELEASE", "str", "a"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.RELEASE", "k", &long_id], "ERR id must be 1 to 64 bytes"),
        (&["RL.TOKENBUCKET", "lease", "1", "1"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["RL.INFO"], "ERR wrong number of arguments for 'rl.info' command"),
        (&["RL.INFO", "a", "b"], "ERR wrong number of arguments for 'rl.info' command"),
        (&["RL.INFO", "str"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
    ];
    acquire(&mut con, &["lease", "1", "1m"]);
    for (words, expected) in cases {
        assert_eq!(error_of(&mut con, words), *expected, "{words:?}");
    }
    assert!(!exists(&mut con, "k"));
}

#[test]
fn info_tells_the_algorithm_its_parameters_state_and_ttl() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(info(&mut con, "missing"), None);
    check(
        &mut con,
        &["RL.TOKENBUCKET", "tb", "10", "0.5", "COST", "3"],
    );
    let tb = info(&mut con, "tb").unwrap();
    assert_eq!(text(&tb, "algorithm"), "tokenbucket");
    assert_eq!(int(&tb, "capacity"), 10);
    let rate: f64 = redis::from_redis_value(tb["rate_per_s"].clone()).unwrap();
    assert_eq!(rate, 0.5);
    assert_eq!(int(&tb, "remaining"), 7);
    let ttl = int(&tb, "ttl_ms");
    assert!((1..=7000).contains(&ttl), "{ttl}");
    // Every algorithm answers with its name, its parameters as last used and
    // what a request would be told now.
    type Case<'a> = (&'a [&'a str], &'a str, &'a [(&'a str, i64)]);
    let cases: &[Case] = &[
        (
            &["RL.SLIDINGCOUNTER", "sc", "5", "10s", "PRECISION", "4"],
            "slidingcounter",
            &[
                ("limit", 5),
                ("window_ms", 10_000),
                ("precision", 4),
                ("remaining", 4),
            ],
        ),
        (
            &["RL.FIXEDWINDOW", "fw", "5", "1m"],
            "fixedwindow",
            &[
                ("limit", 5),
                ("window_ms", 60_000),
                ("count", 1),
                ("remaining", 4),
            ],
        ),
        (
            &["RL.SLIDINGLOG", "sl", "5", "1h"],
            "slidinglog",
            &[
                ("limit", 5),
                ("window_ms", 3_600_000),
                ("count", 1),
                ("entries", 1),
                ("remaining", 4),
            ],
        ),
        (
            &["RL.LEAKYBUCKET", "lb", "5", "1"],
            "leakybucket",
            &[("capacity", 5), ("remaining", 4)],
        ),
        (
            &["RL.GCRA", "gc", "4", "1", "60"],
            "gcra",
            &[
                ("burst", 4),
                ("count", 1),
                ("period_ms", 60_000),
                ("remaining", 4),
            ],
        ),
    ];
    for (words, name, fields) in cases {
        check(&mut con, words);
        let map = info(&mut con, words[1]).unwrap();
        assert_eq!(text(&map, "algorithm"), *name);
        for (field, value) in *fields {
            assert_eq!(int(&map, field), *value, "{name} {field}");
        }
        assert!(int(&map, "ttl_ms") > 0);
    }
    // And every algorithm of the registry: its name, each parameter as given
    // (under its name, a unit appended), what remains and its TTL.
    for spec in every_algorithm(5, 3_600_000) {
        let key = format!("info:{}", spec.name);
        check(&mut con, &spec.words(&key, &[]));
        let map = info(&mut con, &key).unwrap();
        assert_eq!(text(&map, "algorithm"), spec.name);
        for (name, word) in spec.param_names.iter().zip(&spec.params) {
            let (field, value) = [
                name.to_string(),
                format!("{name}_ms"),
                format!("{name}_per_s"),
            ]
            .into_iter()
            .find_map(|field| map.get(&field).map(|value| (field, value)))
            .unwrap_or_else(|| panic!("{}: RL.INFO does not show {name}: {map:?}", spec.name));
            let shown: f64 = redis::from_redis_value(value.clone()).unwrap();
            let given: f64 = word.trim_end_matches("ms").parse().unwrap();
            assert_eq!(shown, given, "{} {field}", spec.name);
        }
        assert_eq!(int(&map, "remaining"), 4, "{}", spec.name);
        assert!(int(&map, "ttl_ms") > 0, "{}", spec.name);
    }
    acquire(&mut con, &["conc", "4", "1m", "ID", "w1"]);
    let conc = info(&mut con, "conc").unwrap();
    assert_eq!(text(&conc, "algorithm"), "concurrency");
    assert_eq!(int(&conc, "limit"), 4);
    assert_eq!(int(&conc, "lease_ms"), 60_000);
    assert_eq!(int(&conc, "remaining"), 3);
}

#[test]
fn info_is_a_map_under_resp3() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["HELLO", "3"]).unwrap();
    check(&mut con, &["RL.FIXEDWINDOW", "fw", "5", "1m"]);
    match run(&mut con, &["RL.INFO", "fw"]).unwrap() {
        Value::Map(pairs) => assert!(pairs.len() >= 6, "{pairs:?}"),
        other => panic!("expected a map, got {other:?}"),
    }
}

#[test]
fn leases_survive_reload_and_aof_rewrite() {
    let mut server = Server::start(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut con = server.connect();
    for id in ["a", "b", "c"] {
        acquire(&mut con, &["conc", "5", "1h", "ID", id]);
    }
    acquire(&mut con, &["conc", "5", "1h"]);
    release(&mut con, "conc", "b");
    let before = digest_value(&mut con, "conc");
    run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(digest_value(&mut con, "conc"), before, "RDB round trip");
    run(&mut con, &["BGREWRITEAOF"]).unwrap();
    common::wait_for("the AOF rewrite", Duration::from_secs(10), || {
        common::info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
            && common::info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
    });
    drop(con);
    server.shutdown_nosave();
    server.launch();
    let mut con = server.connect();
    assert_eq!(digest_value(&mut con, "conc"), before, "AOF replay");
    let held = info(&mut con, "conc").unwrap();
    assert_eq!(int(&held, "remaining"), 2);
}

#[test]
fn memory_of_a_lease_key_holding_ten_leases() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for i in 0..10 {
        acquire(
            &mut con,
            &["l10", "10", "1h", "ID", &format!("worker-{i:02}")],
        );
    }
    acquire(&mut con, &["drawn", "10", "1h"]);
    for _ in 1..10 {
        acquire(&mut con, &["drawn", "10", "1h"]);
    }
    let named: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("l10")
        .query(&mut con)
        .unwrap();
    let drawn: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("drawn")
        .query(&mut con)
        .unwrap();
    println!("MEMORY USAGE, 10 leases: 9-byte ids {named} B, drawn 32-char ids {drawn} B");
    assert!(named < drawn, "longer ids take more room");
    assert!(drawn <= 1024, "{drawn} B for 10 leases");
}
