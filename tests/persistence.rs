//! State survives RDB reloads, AOF rewrite and restarts, and replicates to a
//! replica as its effect: a replica holds exactly the primary's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use redis::Connection;

/// A few keys of each type, in states other than fresh.
fn make_keys(con: &mut Connection) -> Vec<String> {
    let mut keys = vec![];
    for i in 0..5 {
        let tb = format!("tb:{i}");
        let cost = (i + 1).to_string();
        check(con, &["RL.TOKENBUCKET", &tb, "10", "0.01", "COST", &cost]);
        let sc = format!("sc:{i}");
        let precision = (i * 7 + 1).to_string();
        check(
            con,
            &[
                "RL.SLIDINGCOUNTER",
                &sc,
                "100",
                "1h",
                "PRECISION",
                &precision,
                "COST",
                &cost,
            ],
        );
        keys.push(tb);
        keys.push(sc);
    }
    keys
}

fn snapshot(con: &mut Connection, keys: &[String]) -> Vec<(Option<Vec<u8>>, String)> {
    keys.iter()
        .map(|k| (dump(con, k), digest_value(con, k)))
        .collect()
}

fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn debug_reload_keeps_every_state_and_ttl() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let keys = make_keys(&mut con);
    let before = snapshot(&mut con, &keys);
    run(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(snapshot(&mut con, &keys), before);
    for k in &keys {
        assert!(pttl(&mut con, k) > 0, "{k} lost its TTL");
    }
    let r = check(&mut con, &["RL.TOKENBUCKET", "tb:4", "10", "0.01", "PEEK"]);
    assert_eq!(&r[..3], &[1, 10, 5]);
}

#[test]
fn aof_rewrite_then_restart_keeps_every_state() {
    let mut server = Server::start(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "always",
    ]);
    let mut con = server.connect();
    let mut keys = make_keys(&mut con);
    run(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_for("the AOF rewrite", Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
            && info_field(&mut con, "persistence", "aof_last_bgrewrite_status") == "ok"
    });
    // The rewritten base file must rebuild our keys with RL.SETSTATE.
    let aof_dir = server.dir.join("appendonlydir");
    let base = std::fs::read_dir(&aof_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().contains(".base.aof"))
        .expect("no base AOF file");
    let text = std::fs::read(base.path()).unwrap();
    assert!(
        text.windows(11).any(|w| w == b"RL.SETSTATE"),
        "the rewritten AOF does not use RL.SETSTATE"
    );
    // Changes after the rewrite go to the incremental file.
    check(&mut con, &["RL.TOKENBUCKET", "after", "3", "0.01"]);
    keys.push("after".into());
    let before = snapshot(&mut con, &keys);
    drop(con);
    server.shutdown_nosave();
    server.launch();
    let mut con = server.connect();
    assert_eq!(
        snapshot(&mut con, &keys),
        before,
        "state changed across the restart"
    );
}

#[test]
fn a_replica_holds_exactly_the_primary_state() {
    let primary = Server::start(&[]);
    let replica = Server::start(&[]);
    let mut p = primary.connect();
    let mut r = replica.connect();
    run(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    )
    .unwrap();
    wait_for("the replica link", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up"
    });
    // Thousands of mixed calls: both algorithms, costs, peeks, parameter
    // changes and denials, with a simple deterministic generator.
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut keys = std::collections::BTreeSet::new();
    for _ in 0..3000 {
        let key = format!("k:{}", next(40));
        let cost = (next(4) + 1).to_string();
        let peek = next(10) == 0;
        let mut cmd: Vec<String> = if key.ends_with(['0', '1', '2', '3', '4']) {
            let cap = (20 + next(3) * 5).to_string();
            vec!["RL.TOKENBUCKET".into(), key.clone(), cap, "0.5".into()]
        } else {
            let precision = (1 + next(3) * 5).to_string();
            vec![
                "RL.SLIDINGCOUNTER".into(),
                key.clone(),
                "30".into(),
                "10m".into(),
                "PRECISION".into(),
                precision,
            ]
        };
        cmd.extend(["COST".to_string(), cost]);
        if peek {
            cmd.push("PEEK".into());
        }
        let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
        check(&mut p, &words);
        keys.insert(key);
    }
    let replicas: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(replicas, 1);
    let mut compared = 0;
    for key in &keys {
        if !exists(&mut p, key) {
            continue;
        }
        assert_eq!(
            digest_value(&mut p, key),
            digest_value(&mut r, key),
            "{key} differs"
        );
        assert_eq!(dump(&mut p, key), dump(&mut r, key), "{key} differs");
        let ttl = pttl(&mut r, key);
        assert!(ttl > 0, "{key} has no TTL on the replica ({ttl})");
        compared += 1;
    }
    assert!(compared >= 30, "only {compared} keys compared");
    let dp: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut p).unwrap();
    let dr: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut r).unwrap();
    assert_eq!(dp, dr, "the datasets differ");
}
