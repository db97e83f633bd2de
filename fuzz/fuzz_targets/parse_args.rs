//! Fuzzes the argument parser of every command.
//!
//! Input: arguments separated by `\n` (so seeds and dictionary entries stay
//! readable). The first one names the parser (`tokenbucket`, `gcra`,
//! `cl.throttle`, `options`, `all`, `acquire`, ...); when it names none, the first byte picks
//! one and every argument is passed. Checked: no panic; an error is an
//! `ERR ...` text on one line; what is accepted is within the documented
//! ranges; and a check with accepted parameters on a fresh key gives a
//! decision and a state that pass the shared checks (see `common`).
#![no_main]

mod common;

use common::{check_decision, check_storable, Fuzzed};
use libfuzzer_sys::fuzz_target;
use redis_ratelimit::algorithms::concurrency::{Leases, MAX_ID_BYTES};
use redis_ratelimit::algorithms::fixed_window::FixedWindow;
use redis_ratelimit::algorithms::gcra::Gcra;
use redis_ratelimit::algorithms::leaky_bucket::LeakyBucket;
use redis_ratelimit::algorithms::sliding_counter::SlidingCounter;
use redis_ratelimit::algorithms::sliding_counter::MAX_PRECISION;
use redis_ratelimit::algorithms::sliding_log::SlidingLog;
use redis_ratelimit::algorithms::token_bucket::TokenBucket;
use redis_ratelimit::algorithms::{Decision, Mode, MAX_AMOUNT, MAX_DURATION_MS, MAX_TIMESTAMP_MS};
use redis_ratelimit::error::CommandError;
use redis_ratelimit::parse::{self, AllArgs, CheckOptions, ExtraOption, Tier};

const PARSERS: [&str; 11] = [
    "tokenbucket",
    "leakybucket",
    "slidingcounter",
    "fixedwindow",
    "slidinglog",
    "gcra",
    "cl.throttle",
    "options",
    "options-precision",
    "all",
    "acquire",
];

fuzz_target!(|data: &[u8]| {
    let all: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let named = all
        .first()
        .and_then(|first| PARSERS.iter().position(|p| p.as_bytes() == *first));
    let (which, args) = match named {
        Some(i) => (i, &all[1..]),
        None => (
            usize::from(data.first().copied().unwrap_or(0)) % PARSERS.len(),
            &all[..],
        ),
    };
    match which {
        0 => checked(parse::token_bucket(args), |p, o| {
            assert!((1..=MAX_AMOUNT).contains(&p.capacity));
            assert!(p.rate_per_s.is_finite() && p.rate_per_s > 0.0);
            check_fresh::<TokenBucket>(p, o);
        }),
        1 => checked(parse::leaky_bucket(args), |p, o| {
            assert!((1..=MAX_AMOUNT).contains(&p.capacity));
            assert!(p.rate_per_s.is_finite() && p.rate_per_s > 0.0);
            check_fresh::<LeakyBucket>(p, o);
        }),
        2 => checked(parse::sliding_counter(args), |p, o| {
            assert!((1..=MAX_AMOUNT).contains(&p.limit));
            assert!((1..=MAX_DURATION_MS).contains(&p.window_ms));
            assert!((1..=MAX_PRECISION).contains(&p.precision));
            assert_eq!(o.precision.unwrap_or(1), p.precision);
            check_fresh::<SlidingCounter>(p, o);
        }),
        3 => checked(parse::fixed_window(args), |p, o| {
            assert!((1..=MAX_AMOUNT).contains(&p.limit));
            assert!((1..=MAX_DURATION_MS).contains(&p.window_ms));
            check_fresh::<FixedWindow>(p, o);
        }),
        4 => checked(parse::sliding_log(args), |p, o| {
            assert!((1..=MAX_AMOUNT).contains(&p.limit));
            assert!((1..=MAX_DURATION_MS).contains(&p.window_ms));
            check_fresh::<SlidingLog>(p, o);
        }),
        5 => checked(parse::gcra(args), |p, o| {
            assert!(p.burst < MAX_AMOUNT);
            assert!((1..=MAX_AMOUNT).contains(&p.count));
            assert!((1..=MAX_DURATION_MS).contains(&p.period_ms));
            assert!(u128::from(p.count) <= u128::from(p.period_ms) * 1_000_000);
            check_fresh::<Gcra>(p, o);
        }),
        6 => checked(parse::cl_throttle(args).map(|a| (a, ())), |a, ()| {
            let p = a.params;
            assert!(p.burst < MAX_AMOUNT);
            assert!((1..=MAX_AMOUNT).contains(&p.count));
            assert!(p.period_ms % 1000 == 0 && (1000..=MAX_DURATION_MS).contains(&p.period_ms));
            assert!(a.cost <= MAX_AMOUNT);
            assert_eq!(a.mode == Mode::Peek, a.cost == 0);
            for now in [1_700_000_000_000, MAX_TIMESTAMP_MS] {
                check_once::<Gcra>(p, now, a.cost, a.mode);
            }
        }),
        7 => checked(
            parse::check_options(args, ExtraOption::None).map(|o| (o, ())),
            |o, ()| {
                check_options(&o);
                assert_eq!(o.precision, None);
            },
        ),
        8 => {
            let extra = ExtraOption::Precision { max: MAX_PRECISION };
            checked(
                parse::check_options(args, extra).map(|o| (o, ())),
                |o, ()| {
                    check_options(&o);
                    assert!(o.precision.is_none_or(|p| (1..=MAX_PRECISION).contains(&p)));
                },
            )
        }
        9 => checked(parse::all(args).map(|a| (a, ())), |a, ()| {
            let numkeys = parse::numkeys(args).unwrap_or(0);
            assert_eq!(a.tiers.len(), numkeys);
            check_all(&a);
        }),
        _ => checked(parse::acquire(args), |p, id| {
            assert!((1..=MAX_AMOUNT).contains(&p.limit));
            assert!((1..=MAX_DURATION_MS).contains(&p.lease_ms));
            let id = id.unwrap_or_else(|| b"drawn".to_vec());
            assert!((1..=MAX_ID_BYTES).contains(&id.len()));
            for now in [1_700_000_000_000, MAX_TIMESTAMP_MS] {
                let mut leases = Leases::new(p, now);
                let (d, changed) = leases.acquire(p, now, &id);
                assert!(d.allowed && changed, "a new key takes its first lease");
                common::leases::check_storable(&leases, "fresh lease");
            }
        }),
    }
});

/// Runs `accepted` on what was parsed, or checks the error's text.
fn checked<P, O>(result: Result<(P, O), CommandError>, accepted: impl FnOnce(P, O)) {
    match result {
        Ok((p, o)) => accepted(p, o),
        Err(CommandError::Arity) => {}
        Err(e) => {
            let text = e.text();
            assert!(text.starts_with("ERR "), "{text:?}");
            assert!(!text.contains(['\r', '\n']), "{text:?}");
        }
    }
}

/// Every tier of an `RL.ALL` on fresh keys, and their combined answer.
fn check_all(a: &AllArgs) {
    check_options(&a.options);
    let mode = if a.options.peek {
        Mode::Peek
    } else {
        Mode::Take
    };
    let cost = a.options.cost;
    let now = 1_700_000_000_000;
    let decisions: Vec<Decision> = a
        .tiers
        .iter()
        .map(|tier| match *tier {
            Tier::TokenBucket(p) => check_once::<TokenBucket>(p, now, cost, mode),
            Tier::SlidingCounter(p) => check_once::<SlidingCounter>(p, now, cost, mode),
            Tier::FixedWindow(p) => check_once::<FixedWindow>(p, now, cost, mode),
            Tier::SlidingLog(p) => check_once::<SlidingLog>(p, now, cost, mode),
            Tier::LeakyBucket(p) => check_once::<LeakyBucket>(p, now, cost, mode),
            Tier::Gcra(p) => check_once::<Gcra>(p, now, cost, mode),
        })
        .collect();
    let all = Decision::all_of(&decisions);
    assert_eq!(all.allowed, decisions.iter().all(|d| d.allowed));
    assert!(all.remaining <= all.limit, "{all:?}");
    assert!(decisions
        .iter()
        .any(|d| (d.limit, d.remaining) == (all.limit, all.remaining)));
    if all.allowed {
        assert_eq!(all.retry_after_ms, 0);
    } else if decisions.iter().any(|d| d.retry_after_ms < 0) {
        assert_eq!(all.retry_after_ms, -1);
    } else {
        assert!(all.retry_after_ms >= 1, "{all:?}");
    }
}

fn check_options(o: &CheckOptions) {
    assert!((1..=MAX_AMOUNT).contains(&o.cost), "{o:?}");
}

/// A command with these parameters and options on a fresh key, at a common
/// time and at the last time a state can carry.
fn check_fresh<A: Fuzzed>(params: A::Params, options: CheckOptions) {
    check_options(&options);
    let mode = if options.peek { Mode::Peek } else { Mode::Take };
    for now in [1_700_000_000_000, MAX_TIMESTAMP_MS] {
        check_once::<A>(params, now, options.cost, mode);
    }
}

fn check_once<A: Fuzzed>(params: A::Params, now: i64, cost: u64, mode: Mode) -> Decision {
    let (d, next) = A::check_with(None, params, now, cost, mode);
    check_decision::<A>(&d, &params, cost, "fresh key");
    assert_eq!(
        d.allowed,
        cost <= A::limit(&params),
        "a fresh key allows up to its limit"
    );
    assert_eq!(next.is_some(), d.allowed && mode == Mode::Take);
    if let Some(next) = next {
        check_storable(&next, "fresh key");
    }
    d
}
