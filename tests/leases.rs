//! The concurrency limiter's leases (`RL.ACQUIRE` / `RL.RELEASE`) on a real
//! server: given up to the limit and back when released or when they end,
//! their ids, bad inputs, reloads, the AOF and replicas, their memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{
    acquire, check, digest_value, error_of, exists, info_int, pttl, rl_info, run, Server,
};
use redis::{Connection, Value};

fn release(con: &mut Connection, key: &str, id: &str) -> i64 {
    redis::cmd("RL.RELEASE")
        .arg(key)
        .arg(id)
        .query(con)
        .unwrap()
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
    let held = rl_info(&mut r, "rel").unwrap();
    assert_eq!(info_int(&held, "remaining"), 1);
    release(&mut p, "rel", "a");
    let ids: Vec<Vec<Value>> =
        redis::from_redis_value(rl_info(&mut p, "rel").unwrap()["leases"].clone()).unwrap();
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
    let held = rl_info(&mut con, "conc").unwrap();
    assert_eq!(info_int(&held, "remaining"), 2);
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
