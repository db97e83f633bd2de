//! Every check command, on a real server: the behaviours all of them share
//! (PEEK, denials, WRONGTYPE between every pair of types, persistence), and
//! what is particular to the leaky bucket, GCRA and redis-cell's CL.THROTTLE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn every_algorithm_allows_its_limit_then_denies_and_a_denial_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("lim:{cmd}");
        for left in (0..5).rev() {
            let r = check(&mut con, &command_words(cmd, &key, params, &[]));
            assert_eq!(&r[..4], &[1, 5, left, 0], "{cmd}");
            assert!(r[4] > 0, "{cmd}: reset_after {r:?}");
        }
        let before = (dump(&mut con, &key), pttl(&mut con, &key));
        sleep(Duration::from_millis(3));
        let r = check(&mut con, &command_words(cmd, &key, params, &[]));
        assert_eq!(&r[..3], &[0, 5, 0], "{cmd}");
        assert!(r[3] > 0, "{cmd}: retry_after {r:?}");
        assert_eq!(
            dump(&mut con, &key),
            before.0,
            "{cmd}: a denial changed the state"
        );
        assert!(
            pttl(&mut con, &key) <= before.1,
            "{cmd}: a denial extended the TTL"
        );
        let r = check(&mut con, &command_words(cmd, &key, params, &["COST", "6"]));
        assert_eq!((r[0], r[3]), (0, -1), "{cmd}: cost above the limit");
    }
}

#[test]
fn peek_on_every_algorithm_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("peek:{cmd}");
        let r = check(&mut con, &command_words(cmd, &key, params, &["PEEK"]));
        assert_eq!(&r[..4], &[1, 5, 5, 0], "{cmd}");
        assert!(!exists(&mut con, &key), "{cmd}: PEEK created the key");
        check(&mut con, &command_words(cmd, &key, params, &["COST", "2"]));
        let before = dump(&mut con, &key);
        let r = check(
            &mut con,
            &command_words(cmd, &key, params, &["PEEK", "COST", "3"]),
        );
        assert_eq!(&r[..3], &[1, 5, 3], "{cmd}");
        let r = check(
            &mut con,
            &command_words(cmd, &key, params, &["PEEK", "COST", "4"]),
        );
        assert_eq!(&r[..3], &[0, 5, 3], "{cmd}");
        assert_eq!(dump(&mut con, &key), before, "{cmd}: PEEK changed the key");
    }
}

#[test]
fn each_algorithm_refuses_every_other_type_with_wrongtype() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["SET", "string", "x"]).unwrap();
    run(&mut con, &["RPUSH", "list", "x"]).unwrap();
    let mut keys = vec!["string".to_string(), "list".to_string()];
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("own:{cmd}");
        check(&mut con, &command_words(cmd, &key, params, &[]));
        keys.push(key);
    }
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        for key in &keys {
            if key == &format!("own:{cmd}") {
                continue;
            }
            let before = dump(&mut con, key);
            for extra in [&[][..], &["PEEK"]] {
                assert_eq!(
                    error_of(&mut con, &command_words(cmd, key, params, extra)),
                    wrongtype,
                    "{cmd} on {key}"
                );
            }
            assert_eq!(dump(&mut con, key), before);
        }
        assert_eq!(
            error_of(&mut con, &["GET", &format!("own:{cmd}")]),
            wrongtype
        );
    }
    assert_eq!(
        error_of(
            &mut con,
            &["CL.THROTTLE", "own:RL.TOKENBUCKET", "1", "1", "1"]
        ),
        wrongtype
    );
    assert_eq!(
        error_of(&mut con, &["CL.THROTTLE", "string", "1", "1", "1"]),
        wrongtype
    );
}

#[test]
fn cl_throttle_reproduces_the_replies_recorded_from_redis_cell() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let vectors = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/cl_throttle.tsv"
    ))
    .unwrap();
    let mut rows = 0;
    for line in vectors
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let (case, burst, count, period, quantity) = (cols[0], cols[1], cols[2], cols[3], cols[4]);
        let want: Vec<i64> = cols[5].split(' ').map(|n| n.parse().unwrap()).collect();
        let key = format!("cell:{case}");
        let got = check(
            &mut con,
            &["CL.THROTTLE", &key, burst, count, period, quantity],
        );
        assert_eq!(got, want, "case {case}, row {line:?}");
        rows += 1;
    }
    assert!(rows > 150, "only {rows} rows");
}

#[test]
fn cl_throttle_and_rl_gcra_share_keys_and_quantity_zero_peeks() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(
        check(&mut con, &["CL.THROTTLE", "g", "4", "10", "60", "3"]),
        [0, 5, 2, -1, 18]
    );
    let before = dump(&mut con, "g");
    assert_eq!(
        check(&mut con, &["CL.THROTTLE", "g", "4", "10", "60", "0"]),
        [0, 5, 2, -1, 18]
    );
    assert_eq!(dump(&mut con, "g"), before, "quantity 0 changed the key");
    let r = check(&mut con, &["RL.GCRA", "g", "4", "10", "60s", "PEEK"]);
    assert_eq!(&r[..3], &[1, 5, 2]);
    assert!((17_900..=18_000).contains(&r[4]), "{r:?}");
}

/// A `CL.THROTTLE` takes the parameters of its own words, whatever the
/// calls before it said: the module keeps the parameters the last call
/// without a quantity read, with its words, and skips the parsing when the
/// words are the same (`src/redis/commands/params.rs`). Words that differ
/// in a byte, in length, in any one of the three, a quantity given, a
/// refused call between them, and the same parameters written otherwise:
/// each reply (on a new key: limit, remaining, and a reset of one emission
/// interval per unit, in seconds rounded up) is that of its own words.
#[test]
fn each_cl_throttle_reads_the_parameters_of_its_own_words() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let cases: &[(&[&str], [i64; 5])] = &[
        (&["4", "10", "60"], [0, 5, 4, -1, 6]),
        (&["7", "10", "60"], [0, 8, 7, -1, 6]),
        (&["4", "10", "60"], [0, 5, 4, -1, 6]),
        (&["4", "10", "6"], [0, 5, 4, -1, 1]),
        (&["4", "1", "60"], [0, 5, 4, -1, 60]),
        (&["4", "10", "600"], [0, 5, 4, -1, 60]),
        (&["4", "10", "61"], [0, 5, 4, -1, 7]),
        (&["40", "10", "60"], [0, 41, 40, -1, 6]),
        (&["4", "10", "60", "2"], [0, 5, 3, -1, 12]),
        (&["4", "10", "60"], [0, 5, 4, -1, 6]),
        (&["04", "10", "60"], [0, 5, 4, -1, 6]),
        (&["4", "100", "60"], [0, 5, 4, -1, 1]),
        (&["4", "10", "60"], [0, 5, 4, -1, 6]),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let key = format!("own:{i}");
        let words = command_words("CL.THROTTLE", &key, args, &[]);
        assert_eq!(check(&mut con, &words), want, "{words:?}");
        let bad = format!("bad:{i}");
        let refused = command_words("CL.THROTTLE", &bad, &[args[0], "0", args[2]], &[]);
        assert!(error_of(&mut con, &refused).starts_with("ERR count must be"));
        assert!(error_of(&mut con, &refused).starts_with("ERR count must be"));
        assert!(!exists(&mut con, &bad), "{refused:?} created its key");
    }
}

#[test]
fn cl_throttle_refuses_what_crashed_or_corrupted_redis_cell() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (args, want) in [
        (&["1", "0", "60"][..], "ERR count must be"),
        (&["1", "-5", "60"], "ERR count must be"),
        (&["1", "10", "0"], "ERR period must be"),
        (&["-1", "10", "60"], "ERR max_burst must be"),
        (&["1", "10", "60", "-1"], "ERR quantity must be"),
        (&["1", "10", "60.5"], "ERR period must be an integer"),
        (
            &["1", "10"],
            "ERR wrong number of arguments for 'cl.throttle' command",
        ),
        (
            &["1", "10", "60", "1", "1"],
            "ERR wrong number of arguments for 'cl.throttle' command",
        ),
    ] {
        let w = command_words("CL.THROTTLE", "k", args, &[]);
        let got = error_of(&mut con, &w);
        assert!(got.starts_with(want), "{args:?}: {got}");
        assert!(!exists(&mut con, "k"), "{args:?} created a key");
    }
}

#[test]
fn leaky_bucket_spaces_allowed_requests_by_its_rate_with_delay_ms() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let mut delays = vec![];
    for left in (0..3).rev() {
        let r = check(&mut con, &["RL.LEAKYBUCKET", "q", "3", "2"]);
        assert_eq!(r.len(), 6, "an allowed reply has delay_ms: {r:?}");
        assert_eq!(&r[..4], &[1, 3, left, 0]);
        delays.push(r[5]);
    }
    assert_eq!(delays[0], 0);
    for pair in delays.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (300..=500).contains(&gap),
            "delays {delays:?}: one every 500 ms at 2/s"
        );
    }
    let r = check(&mut con, &["RL.LEAKYBUCKET", "q", "3", "2"]);
    assert_eq!(r.len(), 5, "a denied reply has no delay_ms");
    assert_eq!(&r[..3], &[0, 3, 0]);
    assert!((1..=500).contains(&r[3]), "{r:?}");
}

#[test]
fn gcra_allows_burst_plus_one_then_one_per_interval() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for left in (0..3).rev() {
        let r = check(&mut con, &["RL.GCRA", "g", "2", "2", "1s"]);
        assert_eq!(&r[..4], &[1, 3, left, 0]);
    }
    let r = check(&mut con, &["RL.GCRA", "g", "2", "2", "1s"]);
    assert_eq!(r[0], 0);
    assert!((1..=500).contains(&r[3]), "one every 500 ms: {r:?}");
    sleep(Duration::from_millis(r[3] as u64 + 5));
    assert_eq!(check(&mut con, &["RL.GCRA", "g", "2", "2", "1s"])[0], 1);
}

#[test]
fn bad_input_to_the_other_algorithms_gets_a_clear_error() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (cmd, args, want) in [
        ("RL.LEAKYBUCKET", &["0", "1"][..], "ERR capacity must be"),
        ("RL.LEAKYBUCKET", &["5", "0"], "ERR rate must be"),
        ("RL.LEAKYBUCKET", &["5", "nan"], "ERR rate must be"),
        ("RL.LEAKYBUCKET", &["5"], "ERR wrong number of arguments"),
        (
            "RL.LEAKYBUCKET",
            &["5", "1", "COST", "0"],
            "ERR COST must be",
        ),
        ("RL.GCRA", &["-1", "1", "1s"], "ERR burst must be"),
        ("RL.GCRA", &["1", "0", "1s"], "ERR count must be"),
        ("RL.GCRA", &["1", "1", "0s"], "ERR period must be"),
        ("RL.GCRA", &["1", "1", "400d"], "ERR period must be"),
        ("RL.GCRA", &["1", "5000000", "1ms"], "ERR count must be"),
        ("RL.GCRA", &["1", "1"], "ERR wrong number of arguments"),
        (
            "RL.GCRA",
            &["1", "1", "1s", "PEEK", "PEEK"],
            "ERR syntax error",
        ),
    ] {
        let got = error_of(&mut con, &command_words(cmd, "k", args, &[]));
        assert!(got.starts_with(want), "{cmd} {args:?}: {got}");
        assert!(!exists(&mut con, "k"));
    }
}

#[test]
fn every_type_survives_reload_and_replicates_by_effect() {
    let primary = Server::start(&[]);
    let replica = Server::start_replica_of(&primary);
    let mut p = primary.connect();
    let mut r = replica.connect();
    let mut keys = vec![];
    for spec in limit_5() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        for i in 0..3 {
            let key = format!("rep:{cmd}:{i}");
            for _ in 0..=i {
                check(&mut p, &command_words(cmd, &key, params, &[]));
            }
            keys.push(key);
        }
    }
    check(&mut p, &["CL.THROTTLE", "rep:cell", "4", "10", "60"]);
    keys.push("rep:cell".into());
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    let before: Vec<_> = keys.iter().map(|k| digest_value(&mut p, k)).collect();
    let on_replica: Vec<_> = keys.iter().map(|k| digest_value(&mut r, k)).collect();
    assert_eq!(before, on_replica, "the replica differs");
    run(&mut p, &["DEBUG", "RELOAD"]).unwrap();
    let after: Vec<_> = keys.iter().map(|k| digest_value(&mut p, k)).collect();
    assert_eq!(before, after, "DEBUG RELOAD changed a state");
}

#[test]
fn fixed_window_resets_at_epoch_aligned_boundaries_and_the_log_is_exact() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Fixed window: the reset is the end of the epoch-aligned window.
    // The server's clock read before and after the check; again on a new
    // key in the rare case a window ended in between.
    let (key, r, window_end, before, after) = loop {
        let key = format!("f{}", server_time_ms(&mut con));
        let before = server_time_ms(&mut con);
        let r = check(&mut con, &["RL.FIXEDWINDOW", &key, "3", "10s"]);
        let after = server_time_ms(&mut con);
        if before / 10_000 == after / 10_000 {
            break (key, r, (before / 10_000 + 1) * 10_000, before, after);
        }
    };
    assert!(
        (window_end - after..=window_end - before).contains(&r[4]),
        "{r:?} vs {} to {}",
        window_end - after,
        window_end - before
    );
    // The key expires when the window ends, or up to the default expiry
    // slack (1 s) later.
    let expires = expiry_time(&mut con, &key);
    assert!(
        (window_end..=window_end + 1000).contains(&expires),
        "expires at {expires}, the window ends at {window_end}"
    );

    // Sliding log: 4 in any 300 ms; the retry_after it gives is the moment
    // the oldest request leaves the window.
    let started = Instant::now();
    for left in (0..4).rev() {
        assert_eq!(
            &check(&mut con, &["RL.SLIDINGLOG", "l", "4", "300ms"])[..3],
            &[1, 4, left]
        );
    }
    let r = check(&mut con, &["RL.SLIDINGLOG", "l", "4", "300ms"]);
    let elapsed = started.elapsed().as_millis() as i64;
    assert_eq!(r[0], 0);
    assert!(
        (300 - elapsed - 1..=300).contains(&r[3]),
        "{r:?} after {elapsed} ms"
    );
    sleep(Duration::from_millis(r[3] as u64 + 2));
    assert_eq!(check(&mut con, &["RL.SLIDINGLOG", "l", "4", "300ms"])[0], 1);
}

#[test]
fn across_a_window_boundary_the_fixed_window_lets_2x_through_and_the_log_does_not() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let now = server_time_ms(&mut con);
    // The next second at least 200 ms away, so that the burst ends
    // before it on a loaded machine too.
    let boundary = ((now + 200) / 1000 + 1) * 1000;
    sleep(Duration::from_millis((boundary - 200 - now) as u64));
    let burst = |con: &mut redis::Connection, cmd: &str| -> i64 {
        (0..10)
            .map(|_| check(con, &[cmd, cmd, "10", "1s"])[0])
            .sum()
    };
    let (fixed_before, log_before) = (
        burst(&mut con, "RL.FIXEDWINDOW"),
        burst(&mut con, "RL.SLIDINGLOG"),
    );
    let now = server_time_ms(&mut con);
    assert!(
        now < boundary,
        "the first burst must land before the boundary"
    );
    sleep(Duration::from_millis((boundary + 20 - now) as u64));
    let (fixed_after, log_after) = (
        burst(&mut con, "RL.FIXEDWINDOW"),
        burst(&mut con, "RL.SLIDINGLOG"),
    );
    assert_eq!(
        (fixed_before, fixed_after),
        (10, 10),
        "the fixed window resets at the boundary"
    );
    assert_eq!(
        (log_before, log_after),
        (10, 0),
        "the log remembers the last second"
    );
}

#[test]
fn memory_per_key_of_every_type() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let usage = |con: &mut redis::Connection, k: &str| -> i64 {
        redis::cmd("MEMORY").arg("USAGE").arg(k).query(con).unwrap()
    };
    // Key names of one length, so only the values differ.
    run(&mut con, &["INCR", "k:i"]).unwrap();
    let mut report = vec![format!("INCR counter: {} B", usage(&mut con, "k:i"))];
    for (i, spec) in limit_5().iter().enumerate() {
        let (cmd, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("k:{i}");
        check(&mut con, &command_words(cmd, &key, params, &[]));
        report.push(format!("{cmd}: {} B", usage(&mut con, &key)));
        // Its penalized (extended) form (PENALTY) next to the same state
        // without: 24 bytes more (the penalty's end and a policy stamp),
        // which may round up to the allocator's next size.
        // The limit taken in one request, then one denied: a state that
        // does not depend on the milliseconds the requests fall in (the
        // sliding log merges the requests of one millisecond).
        let (drained, locked) = (format!("d:{i}"), format!("p:{i}"));
        for (key, extra) in [(&drained, &[][..]), (&locked, &["PENALTY", "1h"][..])] {
            let taken = check(
                &mut con,
                &command_words(cmd, key, params, &[&["COST", "5"], extra].concat()),
            );
            assert_eq!(taken[0], 1, "{cmd}: {taken:?}");
            let denied = check(&mut con, &command_words(cmd, key, params, extra));
            assert_eq!(denied[0], 0, "{cmd}: {denied:?}");
        }
        let (plain, penalized) = (usage(&mut con, &drained), usage(&mut con, &locked));
        report.push(format!(
            "{cmd}, drained: {plain} B, under a penalty: {penalized} B"
        ));
        assert!(
            (plain..=plain + 32).contains(&penalized),
            "{cmd}: {plain} B, penalized {penalized} B"
        );
    }
    // The sliding log at limit 1000, full: 1000 requests at distinct times.
    for _ in 0..1000 {
        check(&mut con, &["RL.SLIDINGLOG", "k:L", "1000", "1h"]);
        sleep(Duration::from_micros(1100));
    }
    let entries_probe = check(&mut con, &["RL.SLIDINGLOG", "k:L", "1000", "1h", "PEEK"]);
    assert_eq!(entries_probe[2], 0, "the log is full");
    check(&mut con, &["RL.SLIDINGLOG", "k:M", "1000", "1h"]);
    let (full, one) = (usage(&mut con, "k:L"), usage(&mut con, "k:M"));
    let per_entry = (full - one) as f64 / 999.0;
    report.push(format!(
        "RL.SLIDINGLOG limit 1000, full: {full} B ({per_entry:.2} B an entry)"
    ));
    println!("{}", report.join("\n"));
    // PRODUCT.md promises at most 8 B a request; the goal is 4, and a full log
    // must not carry spare capacity (it once grew by an eighth past the limit).
    assert!(per_entry <= 4.0, "{per_entry} B an entry");
}
