//! The check commands as a client sees them, against a real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::*;

#[test]
fn token_bucket_allows_a_burst_of_capacity_then_denies_with_retry_after() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let first = check(&mut con, &["RL.TOKENBUCKET", "user:1", "10", "1"]);
    assert_eq!(&first[..4], &[1, 10, 9, 0]);
    assert!((990..=1000).contains(&first[4]), "reset {:?}", first);
    for left in (0..9).rev() {
        let r = check(&mut con, &["RL.TOKENBUCKET", "user:1", "10", "1"]);
        assert_eq!(&r[..4], &[1, 10, left, 0]);
    }
    let denied = check(&mut con, &["RL.TOKENBUCKET", "user:1", "10", "1"]);
    assert_eq!(&denied[..3], &[0, 10, 0]);
    assert!(
        (900..=1000).contains(&denied[3]),
        "retry_after {:?}",
        denied
    );
    assert!((9000..=10_000).contains(&denied[4]), "reset {:?}", denied);
    // The expiry: when the bucket is full again, or up to the default
    // expiry slack (1 s) after.
    let ttl = pttl(&mut con, "user:1");
    assert!((8900..=11_000).contains(&ttl), "ttl {ttl}");
}

#[test]
fn token_bucket_refills_over_real_time() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // 10 a second: the six requests must reach the server within 100 ms
    // for the sixth to be denied, easy on a loaded machine too.
    let cmd = ["RL.TOKENBUCKET", "fast", "5", "10"];
    for _ in 0..5 {
        assert_eq!(check(&mut con, &cmd)[0], 1);
    }
    let denied = check(&mut con, &cmd);
    assert_eq!(denied[0], 0);
    assert!((1..=100).contains(&denied[3]), "retry_after {denied:?}");
    sleep(Duration::from_millis(600));
    let after = check(&mut con, &cmd);
    assert_eq!(
        &after[..3],
        &[1, 5, 4],
        "refilled to full in 600 ms at 10/s"
    );
}

#[test]
fn cost_takes_that_much_and_cost_above_the_limit_never_passes() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let r = check(&mut con, &["RL.TOKENBUCKET", "k", "10", "1", "COST", "7"]);
    assert_eq!(&r[..4], &[1, 10, 3, 0]);
    let r = check(&mut con, &["RL.TOKENBUCKET", "k", "10", "1", "cost", "4"]);
    assert_eq!(&r[..3], &[0, 10, 3]);
    assert!(r[3] > 0);
    let r = check(&mut con, &["RL.TOKENBUCKET", "k", "10", "1", "COST", "11"]);
    assert_eq!(&r[..4], &[0, 10, 3, -1]);
    let r = check(
        &mut con,
        &["RL.SLIDINGCOUNTER", "s", "10", "1m", "COST", "11"],
    );
    assert_eq!(&r[..4], &[0, 10, 10, -1]);
    assert!(
        !exists(&mut con, "s"),
        "a denial on a new key creates nothing"
    );
    let r = check(
        &mut con,
        &["RL.SLIDINGCOUNTER", "s", "10", "1m", "COST", "10"],
    );
    assert_eq!(&r[..4], &[1, 10, 0, 0]);
}

#[test]
fn sliding_counter_does_not_let_twice_the_limit_through_a_window_boundary() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let limit = 20;
    let cmd = ["RL.SLIDINGCOUNTER", "edge", "20", "1s"];
    // Spend the whole limit just before a window boundary, then try again
    // just after it: a fixed window would allow 2x; the estimate must not.
    let now = server_time_ms(&mut con);
    // The next second at least 200 ms away, so that the burst ends
    // before it on a loaded machine too.
    let boundary = ((now + 200) / 1000 + 1) * 1000;
    sleep(Duration::from_millis((boundary - 200 - now) as u64));
    let mut allowed = 0;
    for _ in 0..limit {
        allowed += check(&mut con, &cmd)[0];
    }
    let now = server_time_ms(&mut con);
    assert!(
        now < boundary,
        "the first burst must land before the boundary"
    );
    sleep(Duration::from_millis((boundary + 20 - now) as u64));
    for _ in 0..limit {
        allowed += check(&mut con, &cmd)[0];
    }
    assert!(
        allowed <= limit + 2,
        "{allowed} allowed across the boundary with a limit of {limit}"
    );
    assert!(allowed >= limit);
}

#[test]
fn sliding_counter_weights_the_previous_window_and_takes_precision() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let r = check(
        &mut con,
        &["RL.SLIDINGCOUNTER", "p", "100", "1h", "PRECISION", "60"],
    );
    assert_eq!(&r[..4], &[1, 100, 99, 0]);
    // With 60 buckets of a minute, the request stops counting 61 minutes
    // after the start of its minute, at most.
    assert!(r[4] > 3_600_000 && r[4] <= 3_660_000, "reset {r:?}");
    let r = check(
        &mut con,
        &[
            "RL.SLIDINGCOUNTER",
            "p",
            "100",
            "1h",
            "precision",
            "60",
            "COST",
            "99",
        ],
    );
    assert_eq!(&r[..4], &[1, 100, 0, 0]);
    let r = check(
        &mut con,
        &["RL.SLIDINGCOUNTER", "p", "100", "1h", "PRECISION", "60"],
    );
    assert_eq!(&r[..3], &[0, 100, 0]);
}

#[test]
fn peek_changes_nothing_and_creates_no_key() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (cmd, key) in [
        (&["RL.TOKENBUCKET", "tb", "5", "0.001"][..], "tb"),
        (
            &["RL.SLIDINGCOUNTER", "sc", "5", "1h", "PRECISION", "4"][..],
            "sc",
        ),
    ] {
        let peek: Vec<&str> = cmd.iter().copied().chain(["PEEK"]).collect();
        let r = check(&mut con, &peek);
        assert_eq!(&r[..5], &[1, 5, 5, 0, 0], "{cmd:?}");
        assert!(!exists(&mut con, key), "PEEK created {key}");

        check(&mut con, cmd);
        let (dump_before, ttl_before) = (dump(&mut con, key), pttl(&mut con, key));
        sleep(Duration::from_millis(5));
        let r = check(&mut con, &peek);
        assert_eq!(&r[..3], &[1, 5, 4], "{cmd:?}");
        let cost5: Vec<&str> = peek.iter().copied().chain(["COST", "5"]).collect();
        let r = check(&mut con, &cost5);
        assert_eq!(&r[..3], &[0, 5, 4], "{cmd:?}");
        assert!(r[3] > 0);
        assert_eq!(dump(&mut con, key), dump_before, "PEEK changed {key}");
        let ttl_after = pttl(&mut con, key);
        assert!(ttl_after <= ttl_before && ttl_after > ttl_before - 1000);
    }
}

#[test]
fn a_denial_changes_neither_state_nor_ttl() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(
        &mut con,
        &["RL.TOKENBUCKET", "d", "2", "0.001", "COST", "2"],
    );
    let before = dump(&mut con, "d");
    let ttl_before = pttl(&mut con, "d");
    sleep(Duration::from_millis(5));
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "d", "2", "0.001"])[0],
        0
    );
    assert_eq!(dump(&mut con, "d"), before);
    assert!(pttl(&mut con, "d") <= ttl_before);
}

#[test]
fn changed_parameters_carry_the_state_over() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    check(
        &mut con,
        &["RL.TOKENBUCKET", "c", "10", "0.001", "COST", "2"],
    );
    let r = check(&mut con, &["RL.TOKENBUCKET", "c", "5", "0.001"]);
    assert_eq!(
        &r[..3],
        &[1, 5, 4],
        "tokens clamped to the smaller capacity, then one taken"
    );
    check(
        &mut con,
        &["RL.SLIDINGCOUNTER", "w", "10", "1h", "COST", "6"],
    );
    let r = check(&mut con, &["RL.SLIDINGCOUNTER", "w", "8", "1h"]);
    assert_eq!(&r[..3], &[1, 8, 1]);
}

#[test]
fn keys_of_other_types_are_wrongtype_both_ways() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["SET", "str", "x"]).unwrap();
    run(&mut con, &["RPUSH", "list", "x"]).unwrap();
    check(&mut con, &["RL.TOKENBUCKET", "tb", "5", "1"]);
    check(&mut con, &["RL.SLIDINGCOUNTER", "sc", "5", "1s"]);
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for cmd in [
        &["RL.TOKENBUCKET", "str", "5", "1"][..],
        &["RL.TOKENBUCKET", "list", "5", "1", "PEEK"],
        &["RL.TOKENBUCKET", "sc", "5", "1"],
        &["RL.SLIDINGCOUNTER", "str", "5", "1s"],
        &["RL.SLIDINGCOUNTER", "list", "5", "1s"],
        &["RL.SLIDINGCOUNTER", "tb", "5", "1s", "PEEK"],
        &["GET", "tb"],
        &["LPUSH", "sc", "x"],
        &["INCR", "tb"],
    ] {
        assert_eq!(error_of(&mut con, cmd), wrongtype, "{cmd:?}");
    }
    assert_eq!(
        run(&mut con, &["GET", "str"]).unwrap(),
        redis::Value::BulkString(b"x".to_vec())
    );
    assert_eq!(
        run(&mut con, &["TYPE", "tb"]).unwrap(),
        redis::Value::SimpleString("rl_tokbkt".into())
    );
}

/// Each bad input: the error text it must get (a prefix where the text
/// names a value).
fn bad_inputs() -> Vec<(Vec<&'static str>, &'static str)> {
    let amount = "must be an integer from 1 to 9007199254740991";
    let rate = "ERR rate must be a number greater than 0";
    let window = "ERR window must be a duration from 1ms to 366d";
    let not_finite = "ERR rate must be a finite number, not";
    let mut table = vec![];
    for (args, err) in [
        (
            vec![],
            "ERR wrong number of arguments for 'rl.tokenbucket' command",
        ),
        (
            vec!["10"],
            "ERR wrong number of arguments for 'rl.tokenbucket' command",
        ),
        (vec!["0", "1"], "ERR capacity must be"),
        (vec!["-5", "1"], "ERR capacity must be"),
        (vec!["ten", "1"], "ERR capacity must be"),
        (vec!["1.5", "1"], "ERR capacity must be"),
        (vec!["9007199254740992", "1"], "ERR capacity must be"),
        (vec!["99999999999999999999999", "1"], "ERR capacity must be"),
        (vec!["10", "0"], rate),
        (vec!["10", "-1"], rate),
        (vec!["10", "nan"], not_finite),
        (vec!["10", "inf"], not_finite),
        (vec!["10", "1e999"], not_finite),
        (vec!["10", "abc"], rate),
        (
            vec!["10", "1", "COST"],
            "ERR syntax error: COST needs a value",
        ),
        (vec!["10", "1", "COST", "0"], "ERR COST must be"),
        (vec!["10", "1", "COST", "-1"], "ERR COST must be"),
        (vec!["10", "1", "COST", "x"], "ERR COST must be"),
        (
            vec!["10", "1", "PEEK", "PEEK"],
            "ERR syntax error: PEEK given more than once",
        ),
        (
            vec!["10", "1", "COST", "1", "cost", "2"],
            "ERR syntax error: COST given more than once",
        ),
        (
            vec!["10", "1", "PRECISION", "5"],
            "ERR syntax error: unknown option 'PRECISION'",
        ),
        (
            vec!["10", "1", "NOW", "5"],
            "ERR syntax error: unknown option 'NOW'",
        ),
    ] {
        let mut cmd = vec!["RL.TOKENBUCKET"];
        if !args.is_empty() {
            cmd.push("k");
        }
        cmd.extend(args);
        table.push((cmd, err));
    }
    for (args, err) in [
        (
            vec![],
            "ERR wrong number of arguments for 'rl.slidingcounter' command",
        ),
        (
            vec!["10"],
            "ERR wrong number of arguments for 'rl.slidingcounter' command",
        ),
        (vec!["0", "1s"], "ERR limit must be"),
        (vec!["-1", "1s"], "ERR limit must be"),
        (vec!["1.5e0", "1s"], "ERR limit must be"),
        (vec!["10", "0"], window),
        (vec!["10", "0.5ms"], window),
        (vec!["10", "-1s"], window),
        (vec!["10", "367d"], window),
        (vec!["10", "10x"], window),
        (
            vec!["10", "nan"],
            "ERR window must be a finite number, not 'nan'",
        ),
        (
            vec!["10", "infs"],
            "ERR window must be a finite number, not 'inf'",
        ),
        (
            vec!["10", "1s", "PRECISION"],
            "ERR syntax error: PRECISION needs a value",
        ),
        (
            vec!["10", "1s", "PRECISION", "0"],
            "ERR PRECISION must be an integer from 1 to 1000",
        ),
        (
            vec!["10", "1s", "PRECISION", "1001"],
            "ERR PRECISION must be an integer from 1 to 1000",
        ),
        (
            vec!["10", "1s", "PRECISION", "2", "PRECISION", "2"],
            "ERR syntax error: PRECISION given more than once",
        ),
        (
            vec!["10", "1s", "COST", "9007199254740992"],
            "ERR COST must be",
        ),
        (
            vec!["10", "1s", "BOGUS"],
            "ERR syntax error: unknown option 'BOGUS'",
        ),
    ] {
        let mut cmd = vec!["RL.SLIDINGCOUNTER"];
        if !args.is_empty() {
            cmd.push("k");
        }
        cmd.extend(args);
        table.push((cmd, err));
    }
    assert!(amount.starts_with("must"));
    table
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (cmd, expected) in bad_inputs() {
        let got = error_of(&mut con, &cmd);
        assert!(
            got.starts_with(expected),
            "{cmd:?}: got {got:?}, want {expected:?}"
        );
        assert!(!exists(&mut con, "k"), "{cmd:?} created the key");
    }
    // Against existing keys of each type: still an error, nothing changed.
    check(&mut con, &["RL.TOKENBUCKET", "k", "10", "0.001"]);
    let tb = dump(&mut con, "k");
    for (cmd, expected) in bad_inputs()
        .into_iter()
        .filter(|(c, _)| c[0] == "RL.TOKENBUCKET")
    {
        assert!(error_of(&mut con, &cmd).starts_with(expected), "{cmd:?}");
        assert_eq!(dump(&mut con, "k"), tb, "{cmd:?} changed the key");
    }
    run(&mut con, &["DEL", "k"]).unwrap();
    check(&mut con, &["RL.SLIDINGCOUNTER", "k", "10", "1h"]);
    let sc = dump(&mut con, "k");
    for (cmd, expected) in bad_inputs()
        .into_iter()
        .filter(|(c, _)| c[0] == "RL.SLIDINGCOUNTER")
    {
        assert!(error_of(&mut con, &cmd).starts_with(expected), "{cmd:?}");
        assert_eq!(dump(&mut con, "k"), sc, "{cmd:?} changed the key");
    }
}

#[test]
fn durations_take_units() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (window, max_reset) in [
        ("250ms", 500),
        ("1.5s", 3000),
        ("2m", 240_000),
        ("1h", 7_200_000),
        ("1d", 172_800_000),
    ] {
        let key = format!("u:{window}");
        let r = check(&mut con, &["RL.SLIDINGCOUNTER", &key, "3", window]);
        assert!(r[4] > max_reset / 2 && r[4] <= max_reset, "{window}: {r:?}");
    }
}

/// A token-bucket state in the module's encoding (see `src/encoding.rs`).
fn token_bucket_state(capacity: u64, rate: f64, tokens: f64, updated_ms: i64) -> Vec<u8> {
    let mut b = vec![1u8];
    b.extend_from_slice(&capacity.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&tokens.to_le_bytes());
    b.extend_from_slice(&updated_ms.to_le_bytes());
    b
}

#[test]
fn setstate_sets_an_absolute_state_and_its_expiry() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let now = server_time_ms(&mut con);
    // 4 of 10 tokens at `now`, refilling 1/s: full again 6 s later.
    let state = token_bucket_state(10, 1.0, 4.0, now);
    let ok: String = redis::cmd("RL.SETSTATE")
        .arg("s")
        .arg(&state)
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    // Full again 6 s later; the expiry within the default slack (1 s) after.
    let ttl = pttl(&mut con, "s");
    assert!((5000..=7000).contains(&ttl), "ttl {ttl}");
    let r = check(&mut con, &["RL.TOKENBUCKET", "s", "10", "1", "PEEK"]);
    assert_eq!(&r[..3], &[1, 10, 4]);
}

#[test]
fn setstate_refuses_what_the_module_could_not_have_written() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let now = server_time_ms(&mut con);
    let good = token_bucket_state(10, 1.0, 4.0, now);
    let mut trailing = good.clone();
    trailing.push(0);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "ERR state must be"),
        (vec![99, 1, 2, 3], "ERR state must be"),
        (good[..20].to_vec(), "ERR state must be"),
        (trailing, "ERR state must be"),
        (token_bucket_state(0, 1.0, 0.0, now), "ERR state must be"),
        (
            token_bucket_state(10, f64::NAN, 1.0, now),
            "ERR state must be",
        ),
        (token_bucket_state(10, 1.0, 11.0, now), "ERR state must be"),
        (token_bucket_state(10, 1.0, -1.0, now), "ERR state must be"),
        (token_bucket_state(10, 1.0, 1.0, -5), "ERR state must be"),
        (vec![2; 40], "ERR state must be"),
    ];
    for (blob, expected) in cases {
        let err = redis::cmd("RL.SETSTATE")
            .arg("s")
            .arg(&blob)
            .query::<String>(&mut con)
            .unwrap_err();
        let text = format!(
            "{} {}",
            err.code().unwrap_or(""),
            err.detail().unwrap_or("")
        );
        assert!(text.starts_with(expected), "{blob:?}: {text}");
        assert!(!exists(&mut con, "s"));
    }
    assert!(error_of(&mut con, &["RL.SETSTATE", "s"]).starts_with("ERR wrong number of arguments"));
    run(&mut con, &["SET", "str", "x"]).unwrap();
    let err = redis::cmd("RL.SETSTATE")
        .arg("str")
        .arg(&good)
        .query::<String>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    check(&mut con, &["RL.SLIDINGCOUNTER", "sc", "5", "1s"]);
    let err = redis::cmd("RL.SETSTATE")
        .arg("sc")
        .arg(&good)
        .query::<String>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
}

#[test]
fn memory_usage_of_a_token_bucket_key_is_that_of_a_small_string() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["INCR", "counter"]).unwrap();
    check(&mut con, &["RL.TOKENBUCKET", "tb", "10", "1"]);
    check(&mut con, &["RL.SLIDINGCOUNTER", "sc", "10", "1s"]);
    let usage = |con: &mut redis::Connection, k: &str| -> i64 {
        redis::cmd("MEMORY").arg("USAGE").arg(k).query(con).unwrap()
    };
    let (incr, tb, sc) = (
        usage(&mut con, "counter"),
        usage(&mut con, "tb"),
        usage(&mut con, "sc"),
    );
    println!("MEMORY USAGE: INCR counter {incr} B, token bucket {tb} B, sliding counter {sc} B");
    // The goal is stated for Redis with jemalloc, whose size classes MEMORY
    // USAGE reports; with libc malloc (Valkey's static build) every block
    // rounds differently, so there the bound is "at most an INCR counter
    // plus the state's 32 bytes".
    let allocator = common::info_field(&mut con, "memory", "mem_allocator");
    if allocator.starts_with("jemalloc") {
        assert!(tb <= 64, "token bucket key takes {tb} B");
        assert!(sc <= 128, "sliding counter key takes {sc} B");
    } else {
        assert!(
            tb <= incr + 32,
            "token bucket key takes {tb} B ({allocator})"
        );
        assert!(
            sc <= incr + 80,
            "sliding counter key takes {sc} B ({allocator})"
        );
    }
}

/// Issue 31: a repeated or conflicting expiry option of `RL.SETSTATE` is
/// named as such, not as an unknown option; and nothing is written.
#[test]
fn setstate_names_a_repeated_or_conflicting_expiry_option() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let now = server_time_ms(&mut con);
    let state = token_bucket_state(10, 1.0, 4.0, now);
    let at = (now + 60_000).to_string();
    let setstate = |con: &mut redis::Connection, options: &[&str]| {
        let mut cmd = redis::cmd("RL.SETSTATE");
        cmd.arg("s").arg(&state);
        for o in options {
            cmd.arg(*o);
        }
        cmd.query::<String>(con)
            .map_err(|e| format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")))
    };
    for (options, expected) in [
        (
            vec!["KEEPTTL", "KEEPTTL"],
            "ERR syntax error: KEEPTTL given more than once",
        ),
        (
            vec!["keepttl", "KEEPTTL"],
            "ERR syntax error: KEEPTTL given more than once",
        ),
        (
            vec!["PXAT", &at, "PXAT", &at],
            "ERR syntax error: PXAT given more than once",
        ),
        (
            vec!["PXAT", "5", "KEEPTTL"],
            "ERR syntax error: PXAT and KEEPTTL cannot be given together",
        ),
        (
            vec!["KEEPTTL", "PXAT", &at],
            "ERR syntax error: KEEPTTL and PXAT cannot be given together",
        ),
        (vec!["PXAT"], "ERR syntax error: PXAT needs a value"),
        (
            vec!["PXAT", "0"],
            "ERR PXAT must be a Unix time in milliseconds from 1 to 2^53",
        ),
        (vec!["EX", "5"], "ERR syntax error: unknown option 'EX'"),
    ] {
        assert_eq!(
            setstate(&mut con, &options),
            Err(expected.to_string()),
            "{options:?}"
        );
        assert!(!exists(&mut con, "s"), "{options:?}");
    }
    // Each alone, in any case, and PXAT in exponent form.
    let exponent = format!("{}e-3", (now + 70_000) * 1000);
    let expiries = [
        (vec!["KEEPTTL"], -1),
        (vec!["pxat", &at], now + 60_000),
        (vec!["PXAT", &exponent], now + 70_000),
    ];
    for (options, expiry) in expiries {
        assert_eq!(
            setstate(&mut con, &options),
            Ok("OK".to_string()),
            "{options:?}"
        );
        assert_eq!(expiry_time(&mut con, "s"), expiry, "{options:?}");
    }
}

/// A check takes the parameters of its own words, whatever the checks
/// before it said: the module keeps the parameters the last check of each
/// algorithm read, with their words, and skips the parsing when the words
/// are the same (`src/redis/commands/params.rs`). Words that differ in a
/// byte, in length, in either word or in number, a refused word between
/// them, and the same parameters written otherwise: each reply's limit and
/// reset (its second and fifth numbers; a bucket's reset after one request
/// is one token's refill) are those of its own words, on a new key each
/// time.
#[test]
fn each_check_reads_the_parameters_of_its_own_words() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Command, parameters, limit, reset (None: the window's position says).
    let cases: &[(&str, &[&str], i64, Option<i64>)] = &[
        ("RL.TOKENBUCKET", &["5", "1"], 5, Some(1000)),
        ("RL.TOKENBUCKET", &["7", "1"], 7, Some(1000)),
        ("RL.TOKENBUCKET", &["5", "1"], 5, Some(1000)),
        ("RL.TOKENBUCKET", &["5", "11"], 5, Some(91)),
        ("RL.TOKENBUCKET", &["51", "1"], 51, Some(1000)),
        ("RL.TOKENBUCKET", &["5", "1", "COST", "2"], 5, Some(2000)),
        ("RL.TOKENBUCKET", &["05", "1.0"], 5, Some(1000)),
        ("RL.TOKENBUCKET", &["5", "10"], 5, Some(100)),
        ("RL.SLIDINGCOUNTER", &["5", "1"], 5, None),
        ("RL.SLIDINGCOUNTER", &["5", "1", "PRECISION", "4"], 5, None),
        ("RL.SLIDINGCOUNTER", &["9", "1"], 9, None),
        ("RL.GCRA", &["4", "1", "1s"], 5, Some(1000)),
        ("RL.GCRA", &["4", "1", "1m"], 5, Some(60_000)),
        ("RL.GCRA", &["40", "1", "1m"], 41, Some(60_000)),
        ("RL.TOKENBUCKET", &["5", "10"], 5, Some(100)),
    ];
    for (i, (command, params, limit, reset)) in cases.iter().enumerate() {
        let key = format!("own:{i}");
        let mut words = vec![*command, key.as_str()];
        words.extend_from_slice(params);
        let reply = check(&mut con, &words);
        assert_eq!(reply[1], *limit, "{words:?}: {reply:?}");
        if let Some(reset) = reset {
            assert_eq!(reply[4], *reset, "{words:?}: {reply:?}");
        }
        let refused = redis::cmd(command)
            .arg(format!("bad:{i}"))
            .arg(params[0])
            .arg("x")
            .query::<redis::Value>(&mut con);
        assert!(refused.is_err(), "{command} {} x: {refused:?}", params[0]);
    }
    // After a refusal, the words before it again.
    assert_eq!(
        check(&mut con, &["RL.TOKENBUCKET", "again", "5", "1"])[4],
        1000
    );
}
