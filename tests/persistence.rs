//! State survives RDB reloads, AOF rewrite and restarts, and replicates to a
//! replica as its effect: a replica holds exactly the primary's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use redis::Connection;
use serial_test::serial;

/// A few keys of each type, in states other than fresh: of every algorithm
/// (10 an hour), of sliding counters cut into more and more buckets, and of
/// redis-cell's command.
fn make_keys(con: &mut Connection) -> Vec<String> {
    let mut keys = vec![];
    for i in 0..5 {
        let cost = (i + 1).to_string();
        let precision = (i * 7 + 1).to_string();
        let sliding_counter =
            Spec::other("RL.SLIDINGCOUNTER", &["100", "1h", "PRECISION", &precision]);
        for spec in every_algorithm(10, HOUR_MS) {
            let key = format!("{}:{i}", spec.command);
            check(con, &spec.words(&key, &["COST", &cost]));
            keys.push(key);
        }
        let key = format!("sc:{i}");
        check(con, &sliding_counter.words(&key, &["COST", &cost]));
        keys.push(key);
    }
    check(con, &["CL.THROTTLE", "cell", "4", "10", "60"]);
    keys.push("cell".into());
    keys
}

fn snapshot(con: &mut Connection, keys: &[String]) -> Vec<(Option<Vec<u8>>, String)> {
    keys.iter()
        .map(|k| (dump(con, k), digest_value(con, k)))
        .collect()
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
    let specs = every_algorithm(10, HOUR_MS);
    let bucket = specs.iter().find(|s| s.name == "tokenbucket").unwrap();
    let r = check(&mut con, &bucket.words("RL.TOKENBUCKET:4", &["PEEK"]));
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

/// The commands of the replica test, each with its parameters for a
/// `choice` from 0 to 2 (limits 20, 25, 30 over 40 s, 10 min, 1 h): every
/// algorithm, and redis-cell's command on GCRA.
fn mixed(choice: u64) -> Vec<Spec> {
    let window_ms = [40_000, 600_000, HOUR_MS][choice as usize];
    let mut mixed = every_algorithm(20 + choice * 5, window_ms);
    let limit = (20 + choice).to_string();
    mixed.push(Spec::other("CL.THROTTLE", &[&limit, "1", "2"]));
    mixed
}

#[test]
#[serial(heavy)]
fn a_replica_holds_exactly_the_primary_state() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let mut r = replica.connect();
    // Thousands of mixed calls: every check command, costs, peeks, parameter
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
        let choice = next(3);
        let mixed = mixed(choice);
        let kind = key.trim_start_matches("k:").parse::<u64>().unwrap() as usize % mixed.len();
        let command = mixed[kind].command.as_str();
        let mut cmd = vec![command.to_string(), key.clone()];
        cmd.extend(mixed[kind].params.iter().cloned());
        if command == "CL.THROTTLE" {
            // redis-cell's form takes a quantity, no options.
            let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
            check(&mut p, &words);
            keys.insert(key);
            continue;
        }
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

/// Redis's CRC-64 (Jones polynomial, reflected), which seals DUMP payloads.
fn crc64(bytes: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Re-seals a DUMP payload after editing it.
fn reseal(payload: &mut [u8]) {
    let body = payload.len() - 8;
    let crc = crc64(&payload[..body]);
    payload[body..].copy_from_slice(&crc.to_le_bytes());
}

/// A token bucket's DUMP payload (the server must run with `--rdbcompression
/// no`, so the state's bytes can be found and edited), and where its state
/// starts: tag 1, then capacity 10 (little-endian).
fn token_bucket_payload(con: &mut Connection) -> (Vec<u8>, usize) {
    check(con, &["RL.TOKENBUCKET", "tb", "10", "0.01", "COST", "3"]);
    let good = dump(con, "tb").unwrap();
    let mut resealed = good.clone();
    reseal(&mut resealed);
    assert_eq!(resealed, good, "the test's CRC-64 must match Redis's");
    let mut pattern = vec![1u8];
    pattern.extend_from_slice(&10u64.to_le_bytes());
    let at = good
        .windows(pattern.len())
        .position(|w| w == pattern)
        .expect("state not found in the DUMP payload");
    (good, at)
}

/// A sealed payload (Redis accepts its checksum) whose token bucket holds
/// 11 tokens of a capacity of 10: a state this module never writes.
fn too_many_tokens(good: &[u8], at: usize) -> Vec<u8> {
    let mut payload = good.to_vec();
    payload[at + 17..at + 25].copy_from_slice(&11.0f64.to_le_bytes());
    reseal(&mut payload);
    payload
}

fn restore(con: &mut Connection, payload: &[u8]) -> redis::RedisResult<String> {
    redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(payload)
        .query::<String>(con)
}

#[test]
fn a_corrupt_or_future_serialized_state_is_refused_without_a_crash() {
    let mut server = Server::start(&["--rdbcompression", "no"]);
    let mut con = server.connect();
    let (good, at) = token_bucket_payload(&mut con);
    assert_eq!(restore(&mut con, &good).unwrap(), "OK");
    run(&mut con, &["DEL", "copy"]).unwrap();

    let too_many_tokens = too_many_tokens(&good, at);
    let mut unknown_tag = good.clone();
    unknown_tag[at] = 200;
    reseal(&mut unknown_tag);
    // The module id's low 10 bits are the encoding version: ask for v2.
    let mut future_version = good.clone();
    future_version[at - 2 - 8 + 7] = (future_version[at - 2 - 8 + 7] & 0xFC) | 2;
    let mut other = good.clone();
    other[at - 2 - 8 + 7] = future_version[at - 2 - 8 + 7];
    reseal(&mut future_version);
    assert_ne!(other, good, "the version byte was not where expected");

    for (name, payload) in [
        ("tokens above capacity", too_many_tokens),
        ("unknown tag", unknown_tag),
        ("future encoding version", future_version),
    ] {
        let result = restore(&mut con, &payload);
        assert!(result.is_err(), "{name}: RESTORE accepted it");
        assert!(!exists(&mut con, "copy"), "{name}: a key was created");
    }
    assert!(server.is_alive(), "the server died");
    assert!(
        server.log().contains("ratelimit: cannot load"),
        "no log line"
    );
}

/// How many refusals one of the module's log lines stands for: itself, and
/// the others it counts ("...; 1999 other values were refused ...").
fn refusals_in_line(line: &str) -> u64 {
    let others = line
        .split_once("; ")
        .and_then(|(_, rest)| rest.split_once(" other values were refused"))
        .map_or(0, |(n, _)| n.parse::<u64>().expect("a count of refusals"));
    1 + others
}

#[test]
fn refused_restores_log_the_first_then_a_line_an_interval_that_counts_the_rest() {
    const REFUSALS: u64 = 2000;
    const INTERVAL: Duration = Duration::from_secs(10);
    let server = Server::start(&["--rdbcompression", "no"]);
    let mut con = server.connect();
    let (good, at) = token_bucket_payload(&mut con);
    let bad = too_many_tokens(&good, at);
    let lines_before = server.log().lines().count();

    let start = std::time::Instant::now();
    for i in 0..REFUSALS {
        let error = restore(&mut con, &bad).expect_err("RESTORE accepted a corrupt payload");
        assert_eq!(error.code(), Some("ERR"), "refusal {i} answered {error:?}");
    }
    // One more after the interval: its line counts the refusals before it
    // that were not logged one by one.
    std::thread::sleep(
        (start + INTERVAL + Duration::from_millis(500))
            .saturating_duration_since(std::time::Instant::now()),
    );
    restore(&mut con, &bad).expect_err("RESTORE accepted a corrupt payload");
    let elapsed = start.elapsed();
    assert!(!exists(&mut con, "copy"), "a key was created");

    let log = server.log();
    let ours: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ratelimit: cannot load"))
        .collect();
    let most = 2 + elapsed.as_secs() / INTERVAL.as_secs();
    assert!(
        (2..=most).contains(&(ours.len() as u64)),
        "{} lines for {} refusals in {elapsed:?}, expected 2 to {most}; the first:\n{}",
        ours.len(),
        REFUSALS + 1,
        ours[..ours.len().min(5)].join("\n")
    );
    assert_eq!(
        ours.iter().map(|l| refusals_in_line(l)).sum::<u64>(),
        REFUSALS + 1,
        "the lines do not account for every refusal:\n{}",
        ours.join("\n")
    );
    // Redis 7.0 logs its own line for a refused RESTORE only at `loglevel
    // verbose`: at the default level the log grows by our lines alone.
    let grown = log.lines().count() - lines_before;
    assert_eq!(
        grown,
        ours.len(),
        "the log grew by:\n{}",
        log.lines()
            .skip(lines_before)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
