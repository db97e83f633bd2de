//! Nanoseconds per check of each algorithm core, outside Redis.
//!
//! Each check is measured the way the Redis layer makes it: one
//! `Algorithm::check_stored` on a state already stored, with the parameters
//! `make bench` gives the server (parsed from the same argument words). Two
//! paths for every algorithm:
//! - *allowed*: the clock moves between calls just enough that every call is
//!   allowed, the steady state of a busy but well-behaved key;
//! - *denied*: the same state, used up, with the clock standing still, so
//!   every call is denied (a denial stores nothing: the state stays as it is).
//!
//! The sliding log is also measured at limit 1000 and full: 1000 entries, one
//! leaving and one arriving on each allowed call. Beside the checks, the two
//! other per-call costs of the pure code: parsing the arguments, and encoding
//! the new state (every allowed call replicates it).
//!
//! `make bench-core` runs them (`cargo bench --bench algorithms`);
//! `cargo test --all-targets` runs each once, as a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use redis_ratelimit::algorithms::registry::{each_algorithm, Each, Listed};
use redis_ratelimit::algorithms::sliding_log::SlidingLog;
use redis_ratelimit::algorithms::token_bucket::TokenBucket;
use redis_ratelimit::algorithms::{Algorithm, Mode, State};
use redis_ratelimit::parse::check_args;

/// A Unix time in ms (November 2023) the simulated clocks start from.
const T0_MS: i64 = 1_700_000_000_000;

/// Calls made before measuring, at the allowed pace: enough for every
/// algorithm to reach its steady state (a full window of the sliding log at
/// limit 1000 is 1000 calls).
const WARM_CALLS: usize = 2_000;

/// One algorithm under measurement.
struct Case<A: Algorithm> {
    /// The benchmark group's name.
    name: &'static str,
    params: A::Params,
    /// Clock advance between allowed calls: what the key regains in that time
    /// covers one request, so the allowed path never runs dry.
    step_ms: i64,
}

/// A state after [`WARM_CALLS`] allowed calls `step_ms` apart, and the time
/// of the last one.
fn steady<A: Algorithm>(case: &Case<A>) -> (A, i64) {
    let mut state = A::fresh(case.params, T0_MS);
    let mut now_ms = T0_MS;
    for call in 0..WARM_CALLS {
        now_ms += case.step_ms;
        let (decision, _) = state.check_stored(case.params, now_ms, 1, Mode::Take);
        assert!(
            decision.allowed,
            "{}: warm-up call {call} denied",
            case.name
        );
    }
    (state, now_ms)
}

/// The steady state, used up by calls at one instant until one is denied.
fn used_up<A: Algorithm>(case: &Case<A>) -> (A, i64) {
    let (mut state, now_ms) = steady(case);
    for _ in 0..=WARM_CALLS {
        let (decision, _) = state.check_stored(case.params, now_ms, 1, Mode::Take);
        if !decision.allowed {
            return (state, now_ms);
        }
    }
    panic!("{}: never denied at a standing clock", case.name);
}

fn bench_case<A: Algorithm>(c: &mut Criterion, case: &Case<A>) {
    let mut group = c.benchmark_group(case.name);

    let (mut state, mut now_ms) = steady(case);
    group.bench_function("allowed", |b| {
        b.iter(|| {
            now_ms += case.step_ms;
            black_box(state.check_stored(case.params, black_box(now_ms), 1, Mode::Take))
        })
    });
    let (decision, _) = state.check_stored(case.params, now_ms + case.step_ms, 1, Mode::Peek);
    assert!(decision.allowed, "{}: the allowed path ran dry", case.name);

    let (mut state, now_ms) = used_up(case);
    group.bench_function("denied", |b| {
        b.iter(|| black_box(state.check_stored(case.params, black_box(now_ms), 1, Mode::Take)))
    });
    let (decision, _) = state.check_stored(case.params, now_ms, 1, Mode::Take);
    assert!(!decision.allowed, "{}: the denied path allowed", case.name);

    group.finish();
}

/// The argument words of `make bench`, as the Redis layer hands them to the
/// parsers.
fn words<'a>(args: &[&'a str]) -> Vec<&'a [u8]> {
    args.iter().map(|a| a.as_bytes()).collect()
}

/// Parameters as `make bench` gives them to an algorithm (by its registry
/// name, as scripts/benchkit/cases.py's `BENCH_CASES`), and the clock
/// advance between allowed calls. An algorithm not here is measured as the
/// bench measures it, under its own `limit_of(100, 1 min)`.
const CASES: &[(&str, &[&str], i64)] = &[
    ("tokenbucket", &["100", "10"], 100),
    ("slidingcounter", &["100", "60"], 1_000),
    ("fixedwindow", &["100", "60"], 1_000),
    ("slidinglog", &["100", "60"], 1_000),
    ("leakybucket", &["100", "10"], 100),
    ("gcra", &["99", "10", "1"], 100),
];

/// Measures each algorithm of the registry with its case.
struct Bench<'c>(&'c mut Criterion);

impl Each for Bench<'_> {
    type Out = ();
    fn algorithm<A: Listed>(&mut self) {
        let case = match CASES.iter().find(|(name, ..)| *name == A::NAME) {
            Some(&(name, args, step_ms)) => Case::<A> {
                name,
                params: check_args::<A::Params>(&words(args)).unwrap().0,
                step_ms,
            },
            // 100 a minute: one regained every 600 ms.
            None => Case::<A> {
                name: A::NAME,
                params: A::limit_of(100, 60_000),
                step_ms: 600,
            },
        };
        bench_case(self.0, &case);
    }
}

/// Every algorithm of the registry, then the full sliding log.
fn algorithms(c: &mut Criterion) {
    each_algorithm(&mut Bench(c));
    let (params, _) = check_args(&words(&["1000", "60"])).unwrap();
    let full = Case::<SlidingLog> {
        name: "sliding_log_1000_full",
        params,
        // 1000 calls in one 60 s window: the oldest leaves as the next comes.
        step_ms: 60,
    };
    let (state, _) = steady(&full);
    assert_eq!(state.entry_count(), 1000, "the log at limit 1000 is full");
    bench_case(c, &full);
}

/// The other pure work of an allowed call: parsing its arguments, and
/// encoding the new state for replication (into a new buffer of 64 bytes, as
/// the Redis layer does).
fn per_call(c: &mut Criterion) {
    let mut group = c.benchmark_group("per_call");
    let args = words(&["100", "10"]);
    group.bench_function("parse_token_bucket", |b| {
        b.iter(|| {
            black_box(check_args::<<TokenBucket as Algorithm>::Params>(black_box(
                &args,
            )))
        })
    });
    let (params, _) = check_args(&args).unwrap();
    let (bucket, _) = steady(&Case::<TokenBucket> {
        name: "token_bucket",
        params,
        step_ms: 100,
    });
    group.bench_function("encode_token_bucket", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(64);
            black_box(&bucket).encode(&mut out);
            out
        })
    });
    let (params, _) = check_args(&words(&["1000", "60"])).unwrap();
    let (log, _) = steady(&Case::<SlidingLog> {
        name: "sliding_log_1000_full",
        params,
        step_ms: 60,
    });
    group.bench_function("encode_sliding_log_1000_full", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(64);
            black_box(&log).encode(&mut out);
            out
        })
    });
    group.finish();
}

/// Short runs: the figures settle well within them, and `make bench-core`
/// stays around a minute.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = algorithms, per_call
}
criterion_main!(benches);
