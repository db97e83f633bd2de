//! Soak, on demand (`make soak`, about two minutes): a minute of traffic from
//! many clients over a million distinct keys with second-long windows, so
//! keys are created and expire all along (and a thousand hot keys, so
//! requests are denied too). Prints memory at the baseline, the
//! peak and after every key expired, and asserts there were no error replies
//! and that memory came back to the baseline: no state, TTL or allocation of
//! the module outlives its key.
//!
//! Settings by environment: `SOAK_SECS` (60), `SOAK_CLIENTS` (16),
//! `SOAK_KEYS` (1000000). `make soak` runs it against the release build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// Requests a client sends per round trip.
const PIPELINE: usize = 64;

/// How much `used_memory` may exceed the baseline once every key is gone:
/// room for the buffers of the test's own connection, far below what even
/// a thousand leaked keys would leave.
const MARGIN_BYTES: i64 = 64 * 1024;

/// Each command with parameters that make a key fresh again within about
/// two seconds of its last request, so keys expire soon after use: every
/// algorithm with 5 a second, and redis-cell's command.
fn commands() -> Vec<Spec> {
    let mut commands = every_algorithm(5, 1000);
    commands.push(Spec::other("CL.THROTTLE", &["4", "10", "1"]));
    commands
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number"))
        })
        .unwrap_or(default)
}

fn used_memory(con: &mut redis::Connection) -> i64 {
    info_field(con, "memory", "used_memory").parse().unwrap()
}

fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).unwrap()
}

/// A small deterministic generator (xorshift64*), one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    allowed: AtomicU64,
    errors: AtomicU64,
}

#[test]
#[ignore = "soak: about two minutes; run with `make soak`"]
fn a_minute_on_a_million_expiring_keys_leaves_memory_where_it_started() {
    let (secs, clients, keys) = (
        setting("SOAK_SECS", 60),
        setting("SOAK_CLIENTS", 16),
        setting("SOAK_KEYS", 1_000_000),
    );
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Redis keeps a latency histogram (~25 KB) per command from its first
    // call on: call each once before the baseline, so it is not counted as
    // left behind.
    let commands = Arc::new(commands());
    for spec in commands.iter() {
        check(&mut con, &spec.words("warm-up", &[]));
        run(&mut con, &["DEL", "warm-up"]).unwrap();
    }
    dbsize(&mut con);
    let baseline = used_memory(&mut con);
    println!(
        "soak: {secs} s, {clients} clients, {keys} keys, pipeline {PIPELINE}; \
         baseline used_memory {baseline} B"
    );

    let counts = Arc::new(Counts::default());
    let touched: Arc<Vec<AtomicU8>> = Arc::new((0..keys).map(|_| AtomicU8::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (counts, touched, stop) = (counts.clone(), touched.clone(), stop.clone());
            let commands = commands.clone();
            let port = server.port;
            thread::spawn(move || {
                let mut con = connect_port(port).unwrap();
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (c + 1));
                while !stop.load(Ordering::Relaxed) {
                    let mut pipe = redis::pipe();
                    pipe.ignore_errors();
                    // What an allowed reply starts with, per request.
                    let mut allowed_flag = Vec::with_capacity(PIPELINE);
                    for _ in 0..PIPELINE {
                        // One request in eight goes to a thousand hot keys,
                        // which are denied often; the rest spread thin.
                        let r = rng.next();
                        let n = if r.is_multiple_of(8) {
                            r / 8 % 1000
                        } else {
                            r % keys
                        };
                        touched[n as usize].store(1, Ordering::Relaxed);
                        // A key always gets the same command: no WRONGTYPE.
                        let spec = &commands[n as usize % commands.len()];
                        let command = spec.command.as_str();
                        pipe.cmd(command).arg(format!("k:{n}")).arg(&spec.params);
                        // CL.THROTTLE answers 0 when allowed.
                        allowed_flag.push(if command == "CL.THROTTLE" { 0 } else { 1 });
                    }
                    let replies: Vec<Value> = pipe.query(&mut con).unwrap();
                    for (reply, flag) in replies.into_iter().zip(allowed_flag) {
                        match reply {
                            Value::Array(items) => {
                                if items.first() == Some(&Value::Int(flag)) {
                                    counts.allowed.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            other => {
                                if counts.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                                    eprintln!("error reply: {other:?}");
                                }
                            }
                        }
                    }
                    counts
                        .requests
                        .fetch_add(PIPELINE as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();

    // Sample memory while the traffic runs.
    let start = Instant::now();
    let (mut peak, mut peak_keys) = (baseline, 0);
    while start.elapsed() < Duration::from_secs(secs) {
        thread::sleep(Duration::from_millis(500));
        peak = peak.max(used_memory(&mut con));
        peak_keys = peak_keys.max(dbsize(&mut con));
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let requests = counts.requests.load(Ordering::Relaxed);
    let distinct = touched
        .iter()
        .filter(|t| t.load(Ordering::Relaxed) == 1)
        .count();
    println!(
        "traffic: {requests} requests in {elapsed:.1} s ({:.0}/s), {} allowed, \
         {distinct} distinct keys, {} error replies",
        requests as f64 / elapsed,
        counts.allowed.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed)
    );
    println!(
        "peak: used_memory {peak} B (sampled; INFO used_memory_peak {}), {peak_keys} keys",
        info_field(&mut con, "memory", "used_memory_peak")
    );

    // Active expiry alone must remove every key; then Redis shrinks its
    // tables in its cron.
    let ended = Instant::now();
    let left = dbsize(&mut con);
    wait_for("every key to expire", Duration::from_secs(180), || {
        dbsize(&mut con) == 0
    });
    println!(
        "expiry: {left} keys left at the end of traffic, 0 after {:.1} s; \
         expired_keys {}",
        ended.elapsed().as_secs_f64(),
        info_field(&mut con, "stats", "expired_keys")
    );
    let settle = Instant::now();
    let mut after = used_memory(&mut con);
    while after > baseline + MARGIN_BYTES && settle.elapsed() < Duration::from_secs(30) {
        thread::sleep(Duration::from_millis(500));
        after = used_memory(&mut con);
    }
    println!(
        "after: used_memory {after} B ({:+} B from baseline), used_memory_rss {} B",
        after - baseline,
        info_field(&mut con, "memory", "used_memory_rss")
    );

    assert_eq!(counts.errors.load(Ordering::Relaxed), 0, "error replies");
    assert!(peak > baseline + 10 * 1024 * 1024, "the soak held few keys");
    assert!(
        after <= baseline + MARGIN_BYTES,
        "memory did not come back: baseline {baseline} B, after {after} B"
    );
}
