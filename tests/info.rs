//! `RL.INFO` tells a person what the decisions see: no more, no less.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use redis_ratelimit::algorithms::concurrency::{LeaseParams, Leases};
use redis_ratelimit::algorithms::State;

/// Issue 28, item 4: 1,000 leases of 100 ms, ended, then one new
/// `RL.ACQUIRE` (which drops 256 of the ended ones, the rest on the writes
/// after it) -> `RL.INFO` said `lease_count 745` and listed 744 ended ids,
/// while the acquire itself answered 99,999 remaining. It shows the live
/// lease only, as every decision counts it.
#[test]
fn rl_info_of_a_lease_key_shows_live_leases_only_before_the_sweep_drops_ended_ones() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("RL.ACQUIRE")
            .arg(&["pool", "100000", "100ms", "ID", &format!("old-{i}")])
            .ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    sleep(Duration::from_millis(200));
    let reply = run(
        &mut con,
        &["RL.ACQUIRE", "pool", "100000", "1h", "ID", "new"],
    )
    .unwrap();
    let reply = items(&reply);
    assert_eq!(text(&reply[0]), "1");
    assert_eq!(
        text(&reply[2]),
        "99999",
        "the acquire counts the live lease"
    );
    assert_eq!(
        stored_leases(&mut con, "pool", 100_000, 3_600_000),
        745,
        "the sweep dropped 256 ended leases, the rest wait for later writes"
    );

    let info = run(&mut con, &["RL.INFO", "pool"]).unwrap();
    assert_eq!(text(field(&info, "lease_count").unwrap()), "1", "{info:?}");
    let listed = items(field(&info, "leases").unwrap());
    assert_eq!(listed.len(), 1, "ended leases listed: {info:?}");
    assert_eq!(text(&items(&listed[0])[0]), "new");
    assert_eq!(text(field(&info, "remaining").unwrap()), "99999");
}

/// `RL.INFO` on a key of 100,000 leases, all but the last 100 ended and not
/// dropped yet (set whole, so no write sweeps them): the live ones, counted
/// and listed. It finds them by searching the index, not by walking the
/// ended ones; the time a call takes is printed beside a key of the 100
/// live leases alone (with the server's own `usec_per_call`), not
/// asserted (timing is `make bench`'s).
#[test]
fn rl_info_of_a_key_of_100k_leases_mostly_ended_lists_the_live_ones() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let now = server_time_ms(&mut con);
    let ended = LeaseParams {
        limit: 1_000_000,
        lease_ms: 10_000,
    };
    let live = LeaseParams {
        limit: 1_000_000,
        lease_ms: 3_620_000,
    };
    let mut big = Leases::new(ended, now - 20_000);
    let mut small = Leases::new(live, now - 20_000);
    for n in 0..100_000 {
        let id = format!("id-{n:06}");
        if n < 99_900 {
            assert!(big.acquire(ended, now - 20_000, id.as_bytes()).1);
        } else {
            assert!(big.acquire(live, now - 20_000, id.as_bytes()).1);
            assert!(small.acquire(live, now - 20_000, id.as_bytes()).1);
        }
    }
    for (key, leases) in [("big", &big), ("small", &small)] {
        let mut state = Vec::new();
        leases.encode(&mut state);
        redis::cmd("RL.SETSTATE")
            .arg(key)
            .arg(state)
            .query::<()>(&mut con)
            .unwrap();
    }
    assert_eq!(
        stored_leases(&mut con, "big", 1_000_000, 3_620_000),
        100_000
    );

    let mut time_info = |key: &str| {
        let calls = 200;
        run(&mut con, &["CONFIG", "RESETSTAT"]).unwrap();
        let started = Instant::now();
        let mut info = redis::Value::Nil;
        for _ in 0..calls {
            info = run(&mut con, &["RL.INFO", key]).unwrap();
        }
        let round_trip = started.elapsed() / calls;
        let stat = info_field(&mut con, "commandstats", "cmdstat_rl.info");
        (info, round_trip, stat)
    };
    let (info, big_call, big_stat) = time_info("big");
    let (small_info, small_call, small_stat) = time_info("small");
    println!("RL.INFO on 100,000 leases (99,900 ended): {big_call:?} a round trip, {big_stat}");
    println!("RL.INFO on the 100 live ones alone: {small_call:?} a round trip, {small_stat}");
    assert_eq!(text(field(&info, "lease_count").unwrap()), "100");
    let listed = items(field(&info, "leases").unwrap());
    assert_eq!(listed.len(), 100);
    assert_eq!(text(&items(&listed[0])[0]), "id-099900");
    assert_eq!(field(&info, "leases"), field(&small_info, "leases"));
}

#[test]
fn info_tells_the_algorithm_its_parameters_state_and_ttl() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(rl_info(&mut con, "missing"), None);
    check(
        &mut con,
        &["RL.TOKENBUCKET", "tb", "10", "0.5", "COST", "3"],
    );
    let tb = rl_info(&mut con, "tb").unwrap();
    assert_eq!(info_text(&tb, "algorithm"), "tokenbucket");
    assert_eq!(info_int(&tb, "capacity"), 10);
    let rate: f64 = redis::from_redis_value(tb["rate_per_s"].clone()).unwrap();
    assert_eq!(rate, 0.5);
    assert_eq!(info_int(&tb, "remaining"), 7);
    let ttl = info_int(&tb, "ttl_ms");
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
        let map = rl_info(&mut con, words[1]).unwrap();
        assert_eq!(info_text(&map, "algorithm"), *name);
        for (field, value) in *fields {
            assert_eq!(info_int(&map, field), *value, "{name} {field}");
        }
        assert!(info_int(&map, "ttl_ms") > 0);
    }
    // And every algorithm of the registry: its name, each parameter as given
    // (under its name, a unit appended), what remains and its TTL.
    for spec in every_algorithm(5, 3_600_000) {
        let key = format!("info:{}", spec.name);
        check(&mut con, &spec.words(&key, &[]));
        let map = rl_info(&mut con, &key).unwrap();
        assert_eq!(info_text(&map, "algorithm"), spec.name);
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
        assert_eq!(info_int(&map, "remaining"), 4, "{}", spec.name);
        assert!(info_int(&map, "ttl_ms") > 0, "{}", spec.name);
    }
    acquire(&mut con, &["conc", "4", "1m", "ID", "w1"]);
    let conc = rl_info(&mut con, "conc").unwrap();
    assert_eq!(info_text(&conc, "algorithm"), "concurrency");
    assert_eq!(info_int(&conc, "limit"), 4);
    assert_eq!(info_int(&conc, "lease_ms"), 60_000);
    assert_eq!(info_int(&conc, "remaining"), 3);
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
