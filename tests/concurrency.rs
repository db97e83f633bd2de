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
                    allowed += check(&mut con, words)[0];
                }
                allowed
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
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
