//! Who owns a key's expiry: the module. Every write puts it in its band
//! (from the moment the state is fresh again to that moment plus
//! `ratelimit.expiry-slack`), and any request (not a peek), allowed or
//! denied, puts back an expiry a user removed or moved. RDB, the AOF with
//! and without its RDB preamble, and replicas keep what the key has until
//! then, and agree on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

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

#[test]
fn an_expiry_stays_in_its_band_and_moves_only_when_it_leaves_it() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // 100 tokens refilling 10 a second: each request moves the moment the
    // bucket is full again by 100 ms, less than the 1 s slack.
    let words = ["RL.TOKENBUCKET", "tb", "100", "10"];
    let first = check(&mut con, &words);
    let set = expiry_time(&mut con, "tb");
    let now = server_time_ms(&mut con);
    assert!((now + first[4]..=now + first[4] + 1000).contains(&set));
    for _ in 0..5 {
        check(&mut con, &words);
    }
    assert_eq!(
        expiry_time(&mut con, "tb"),
        set,
        "moved though still in its band"
    );
    for _ in 0..10 {
        check(&mut con, &words);
    }
    assert!(
        expiry_time(&mut con, "tb") > set,
        "left behind by the state"
    );
}

#[test]
fn without_slack_the_expiry_is_exactly_when_the_state_is_fresh() {
    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    let r = check(&mut con, &["RL.GCRA", "g", "4", "1", "1h"]);
    let ttl = pttl(&mut con, "g");
    assert!((r[4] - 1000..=r[4]).contains(&ttl), "{ttl} vs {r:?}");
}

#[test]
fn a_removed_or_shortened_expiry_comes_back_with_the_next_request_even_a_denied_one() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // A sliding log, fresh exactly an hour after its request (a fixed
    // window would be fresh at the end of the clock's hour, which may be
    // less than the minute below away).
    let words = ["RL.SLIDINGLOG", "sl", "1", "1h"];
    check(&mut con, &words);
    run(&mut con, &["PERSIST", "sl"]).unwrap();
    assert_eq!(pttl(&mut con, "sl"), -1);
    let _ = check(&mut con, &["RL.PEEK", "sl", "SLIDINGLOG", "1", "1h"]);
    let _ = check(&mut con, &["RL.SLIDINGLOG", "sl", "1", "1h", "PEEK"]);
    assert_eq!(pttl(&mut con, "sl"), -1, "a peek changes nothing");
    assert_eq!(check(&mut con, &words)[0], 0, "denied");
    assert!(pttl(&mut con, "sl") > 0, "the denial put the expiry back");
    // Shortened: the state would be lost before it is fresh.
    run(&mut con, &["PEXPIRE", "sl", "60000"]).unwrap();
    assert_eq!(check(&mut con, &words)[0], 0);
    assert!(pttl(&mut con, "sl") > 60_000, "moved back to its band");
}

#[test]
fn rdb_and_the_aof_keep_a_removed_expiry_until_the_next_request() {
    for args in [
        &["--appendonly", "no"][..],
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"],
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
    ] {
        let mut server = Server::start(args);
        let mut con = server.connect();
        check(&mut con, &["RL.SLIDINGLOG", "log", "5", "1h"]);
        check(&mut con, &["RL.SLIDINGLOG", "kept", "5", "1h"]);
        run(&mut con, &["PERSIST", "log"]).unwrap();
        let kept = expiry_time(&mut con, "kept");
        if args[1] == "no" {
            run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
        } else {
            run(&mut con, &["BGREWRITEAOF"]).unwrap();
            wait_for("the AOF rewrite", Duration::from_secs(10), || {
                info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
                    && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
            });
            server.shutdown_nosave();
            server.launch();
            con = server.connect();
        }
        assert_eq!(
            pttl(&mut con, "log"),
            -1,
            "{args:?}: the removed expiry came back"
        );
        assert_eq!(
            expiry_time(&mut con, "kept"),
            kept,
            "{args:?}: the expiry moved"
        );
        check(&mut con, &["RL.SLIDINGLOG", "log", "5", "1h"]);
        assert!(
            pttl(&mut con, "log") > 0,
            "{args:?}: no expiry after a request"
        );
    }
}

#[test]
fn a_replica_keeps_the_primarys_expiry_through_persist_and_its_repair() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let (mut p, mut r) = (primary.connect(), replica.connect());
    check(&mut p, &["RL.LEAKYBUCKET", "lb", "1", "0.001"]);
    run(&mut p, &["PERSIST", "lb"]).unwrap();
    caught_up(&mut p, &mut r);
    assert_eq!(expiry_time(&mut r, "lb"), -1);
    assert_eq!(check(&mut p, &["RL.LEAKYBUCKET", "lb", "1", "0.001"])[0], 0);
    caught_up(&mut p, &mut r);
    let repaired = expiry_time(&mut p, "lb");
    assert!(repaired > 0);
    assert_eq!(expiry_time(&mut r, "lb"), repaired);
    assert_eq!(digest_value(&mut p, "lb"), digest_value(&mut r, "lb"));
}

/// The band's width is the primary's setting, carried by the replay: a
/// replica configured otherwise sets the very same expiry.
#[test]
fn a_replica_with_another_slack_sets_the_primarys_expiry() {
    let primary = Server::start(&["--ratelimit.expiry-slack", "5000"]);
    let replica = Server::start_replica_of(&primary);
    let (mut p, mut r) = (primary.connect(), replica.connect());
    run(&mut r, &["CONFIG", "SET", "ratelimit.expiry-slack", "0"]).unwrap();
    for _ in 0..3 {
        check(&mut p, &["RL.TOKENBUCKET", "tb", "10", "1"]);
    }
    caught_up(&mut p, &mut r);
    assert_eq!(expiry_time(&mut r, "tb"), expiry_time(&mut p, "tb"));
}

#[test]
fn peek_is_answered_by_a_read_only_replica_and_a_read_only_script() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let (mut p, mut r) = (primary.connect(), replica.connect());
    for _ in 0..3 {
        check(&mut p, &["RL.TOKENBUCKET", "tb", "10", "0.001"]);
    }
    caught_up(&mut p, &mut r);
    let words = ["RL.PEEK", "tb", "TOKENBUCKET", "10", "0.001"];
    assert_eq!(check(&mut r, &words)[..3], [1, 10, 7]);
    let refused = error_of(&mut r, &["RL.TOKENBUCKET", "tb", "10", "0.001", "PEEK"]);
    assert!(refused.starts_with("READONLY"), "{refused}");
    let scripted: Vec<i64> = redis::cmd("EVAL_RO")
        .arg("return redis.call('RL.PEEK', KEYS[1], 'TOKENBUCKET', '10', '0.001', 'COST', '2')")
        .arg(1)
        .arg("tb")
        .query(&mut p)
        .unwrap();
    assert_eq!(scripted[..3], [1, 10, 7]);
    assert_eq!(
        error_of(&mut p, &["RL.PEEK", "tb", "GCRA", "1", "1"]),
        "ERR syntax error: GCRA needs 3 parameters"
    );
    assert_eq!(
        error_of(&mut p, &["RL.PEEK", "tb", "FIXEDWINDOW", "1", "1"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
}

/// A token bucket of more than 2^44 tokens, where a step of a float is a
/// sixty-fourth of a token, expires no sooner than it is full. Its refill
/// time from the rate (here 8,178,740,392,920,500 ms, exactly: 81,787,403,929,205
/// tokens at 10 a second) leaves its own refill, rounded as every check
/// rounds it, 1/64 of a token short; the key, which expired then, handed
/// out that fraction (a request of the whole capacity passed a millisecond
/// early).
/// (A case the property test of `token_bucket::fresh_at_ms` found.) The
/// state the key holds, read back, allows its whole capacity at the key's
/// expiry; and the PTTL is never below the time the key's own state still
/// needs to refill, as a peek of the whole capacity answers it.
#[test]
fn a_bucket_past_2_44_tokens_expires_no_sooner_than_it_is_full() {
    use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
    use redis_ratelimit::algorithms::{Algorithm, Mode};

    let server = Server::start(&["--ratelimit.expiry-slack", "0"]);
    let mut con = server.connect();
    let (capacity, cost) = (116_882_369_647_764u64, 81_787_403_929_205u64);
    let params = TokenBucketParams {
        capacity,
        rate_per_s: 10.0,
    };
    let (capacity_word, cost_word) = (capacity.to_string(), cost.to_string());
    let take = [
        "RL.TOKENBUCKET",
        "big",
        &capacity_word,
        "10",
        "COST",
        &cost_word,
    ];
    assert_eq!(check(&mut con, &take)[0], 1, "taken");
    let expires_at = expiry_time(&mut con, "big");
    let info = rl_info(&mut con, "big").expect("the key exists");
    let updated_ms = info_int(&info, "updated_ms");
    let (_, stored) = TokenBucket::check_with(None, params, updated_ms, cost, Mode::Take);
    let stored = stored.expect("the same take, here");
    let at_expiry =
        TokenBucket::check_with(Some(&stored), params, expires_at, capacity, Mode::Peek).0;
    assert!(
        at_expiry.allowed,
        "not full at its expiry ({expires_at}): {at_expiry:?}"
    );

    let before_ms = server_time_ms(&mut con);
    let whole = [
        "RL.TOKENBUCKET",
        "big",
        &capacity_word,
        "10",
        "COST",
        &capacity_word,
        "PEEK",
    ];
    let refill_ms = check(&mut con, &whole)[3];
    let ttl = pttl(&mut con, "big");
    let after_ms = server_time_ms(&mut con);
    // The refill time when the PTTL was read: less than the peek's by the
    // time between them, at most `after_ms - before_ms`.
    assert!(
        ttl >= refill_ms - (after_ms - before_ms),
        "PTTL {ttl} below the refill time {refill_ms} (less {} ms)",
        after_ms - before_ms
    );
}
