//! The race of the seeds: many clients hammering one key. Read-modify-write
//! from clients lets extra requests through; an atomic check must not. The
//! heavy tests run one at a time (`serial`) so two cores are not oversubscribed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread;

use common::*;
use serial_test::serial;

fn hammer(server: &Server, words: &'static [&'static str], clients: usize, calls: usize) -> i64 {
    let port = server.port;
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                let mut con = client.get_connection().unwrap();
                let mut allowed = 0;
                for _ in 0..calls {
                    allowed += first_integer(run(&mut con, words).unwrap());
                }
                allowed
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

/// The first element of a check reply: 1 when allowed.
fn first_integer(reply: redis::Value) -> i64 {
    match reply {
        redis::Value::Array(items) => redis::from_redis_value(items[0].clone()).unwrap(),
        other => panic!("not a check reply: {other:?}"),
    }
}

#[test]
#[serial(heavy)]
fn thirty_two_clients_on_one_token_bucket_get_exactly_its_capacity() {
    let server = Server::start(&[]);
    // Capacity 100, a negligible rate (one token per ~3 hours).
    let allowed = hammer(&server, &["RL.TOKENBUCKET", "hot", "100", "0.0001"], 32, 20);
    assert_eq!(allowed, 100);
}

#[test]
#[serial(heavy)]
fn thirty_two_clients_on_one_sliding_counter_get_exactly_its_limit() {
    let server = Server::start(&[]);
    let allowed = hammer(
        &server,
        &["RL.SLIDINGCOUNTER", "hot", "100", "1h", "COST", "1"],
        32,
        20,
    );
    assert_eq!(allowed, 100);
}

#[test]
#[serial(heavy)]
fn thirty_two_clients_through_three_tiers_get_exactly_the_tightest_limit_from_each() {
    let server = Server::start(&[]);
    let words = &[
        "RL.ALL",
        "3",
        "{t}:a",
        "{t}:b",
        "{t}:c",
        "TOKENBUCKET",
        "100",
        "0.0001",
        "SLIDINGLOG",
        "60",
        "1h",
        "FIXEDWINDOW",
        "1000",
        "1d",
    ];
    assert_eq!(hammer(&server, words, 32, 10), 60);
    let mut con = server.connect();
    // All or nothing: each tier gave exactly the 60 that passed every tier.
    let bucket = check(
        &mut con,
        &["RL.TOKENBUCKET", "{t}:a", "100", "0.0001", "PEEK"],
    );
    assert_eq!(bucket[2], 40);
    let window = check(
        &mut con,
        &["RL.FIXEDWINDOW", "{t}:c", "1000", "366d", "PEEK"],
    );
    assert_eq!(window[2], 940);
}

#[test]
#[serial(heavy)]
fn thirty_two_clients_acquiring_leases_get_exactly_the_limit() {
    let server = Server::start(&[]);
    let allowed = hammer(&server, &["RL.ACQUIRE", "pool", "25", "1h"], 32, 10);
    assert_eq!(allowed, 25);
}
