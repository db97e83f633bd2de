//! Fuzzes the argument parser of every command.
//!
//! Input: arguments separated by `\n` (so seeds and dictionary entries stay
//! readable). The first one names the parser: an algorithm of the registry
//! (`tokenbucket`, `gcra`, ...: its check command's `<params> [options]`),
//! `options` (the options every check takes), `options-<algorithm>` for an
//! algorithm with options of its own (`options-slidingcounter`),
//! `cl.throttle`, `all` or `acquire`. When it names none, the first byte
//! picks one and every argument is passed. Checked: no panic; an error is an
//! `ERR ...` text on one line; what is accepted is what the words say,
//! within the documented ranges (every parameter shows in `RL.INFO` as its
//! word reads); and a check with accepted parameters on a fresh key gives a
//! decision and a state that pass the shared checks (see `common`).
#![no_main]

mod common;

use std::sync::OnceLock;

use common::{
    check_decision, check_error, check_params_are_the_words, check_storable, profile, Fuzzed,
    Other, ALGORITHM_NAMES, ALGORITHM_TAGS,
};
use libfuzzer_sys::fuzz_target;
use redis_ratelimit::algorithms::concurrency::{Leases, MAX_ID_BYTES};
use redis_ratelimit::algorithms::gcra::Gcra;
use redis_ratelimit::algorithms::registry::{self, Each, EachState, Listed};
use redis_ratelimit::algorithms::{Decision, Mode, MAX_AMOUNT, MAX_DURATION_MS, MAX_TIMESTAMP_MS};
use redis_ratelimit::error::CommandError;
use redis_ratelimit::parse::all::OnTier;
use redis_ratelimit::parse::options::check_options;
use redis_ratelimit::parse::syntax::MAX_OWN_OPTIONS;
use redis_ratelimit::parse::{self, check_args, AllArgs, CheckOptions, Syntax};
use redis_ratelimit::redis_cell;

/// The parsers, each by the word that names it in an input.
#[derive(Debug, Clone, Copy)]
enum Parser {
    /// The check command of the algorithm with this tag.
    Check(u8),
    /// The options every check command takes.
    Options,
    /// The options of the check command of the algorithm with this tag,
    /// which has some of its own.
    OwnOptions(u8),
    ClThrottle,
    All,
    Acquire,
}

/// Every parser and its name: one for each algorithm of the registry, one
/// for the options of each that has its own, then the other commands.
fn parsers() -> &'static [(String, Parser)] {
    static PARSERS: OnceLock<Vec<(String, Parser)>> = OnceLock::new();
    PARSERS.get_or_init(|| {
        let mut parsers: Vec<(String, Parser)> = ALGORITHM_NAMES
            .iter()
            .zip(ALGORITHM_TAGS)
            .map(|(name, &tag)| (name.to_string(), Parser::Check(tag)))
            .collect();
        parsers.push(("cl.throttle".into(), Parser::ClThrottle));
        parsers.push(("options".into(), Parser::Options));
        for (name, &tag) in ALGORITHM_NAMES.iter().zip(ALGORITHM_TAGS) {
            if registry::on_tag(tag, &mut HasOwnOptions) == Some(true) {
                parsers.push((format!("options-{name}"), Parser::OwnOptions(tag)));
            }
        }
        parsers.push(("all".into(), Parser::All));
        parsers.push(("acquire".into(), Parser::Acquire));
        parsers
    })
}

fuzz_target!(|data: &[u8]| {
    let all: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let parsers = parsers();
    let named = all.first().and_then(|first| {
        parsers
            .iter()
            .position(|(name, _)| name.as_bytes() == *first)
    });
    let (which, args) = match named {
        Some(i) => (i, &all[1..]),
        None => (
            usize::from(data.first().copied().unwrap_or(0)) % parsers.len(),
            &all[..],
        ),
    };
    match parsers[which].1 {
        Parser::Check(tag) => {
            registry::on_tag(tag, &mut CheckCommand { args });
        }
        Parser::OwnOptions(tag) => {
            registry::on_tag(tag, &mut OwnOptions { args });
        }
        Parser::ClThrottle => checked(redis_cell::cl_throttle(args).map(|a| (a, ())), |a, ()| {
            let p = a.params;
            assert!(p.burst < MAX_AMOUNT);
            assert!((1..=MAX_AMOUNT).contains(&p.count));
            assert!(p.period_ms % 1000 == 0 && (1000..=MAX_DURATION_MS).contains(&p.period_ms));
            assert!(u128::from(p.count) <= u128::from(p.period_ms) * 1_000_000);
            assert!(a.cost <= MAX_AMOUNT);
            assert_eq!(a.mode == Mode::Peek, a.cost == 0);
            for now in [1_700_000_000_000, MAX_TIMESTAMP_MS] {
                let d = check_once::<Gcra>(p, now, a.cost, a.mode);
                let reply = redis_cell::cl_throttle_reply(&d);
                assert_eq!(reply[0], i64::from(!d.allowed), "{reply:?} {d:?}");
                assert_eq!(
                    reply[3] == -1,
                    d.allowed || d.retry_after_ms < 0,
                    "{reply:?}"
                );
                assert!(reply.iter().all(|&n| n >= -1), "{reply:?}");
            }
        }),
        Parser::Options => checked(
            check_options(args, &[], &mut [None; MAX_OWN_OPTIONS]).map(|o| (o, ())),
            |o, ()| check_options_in_range(&o),
        ),
        Parser::All => checked(parse::all(args).map(|a| (a, ())), |a, ()| {
            let numkeys = parse::numkeys(args).unwrap_or(0);
            assert_eq!(a.tiers.len(), numkeys);
            check_all(&a);
        }),
        Parser::Acquire => checked(parse::acquire(args).map(|a| (a.params, a.id)), |p, id| {
            assert!((1..=MAX_AMOUNT).contains(&p.limit));
            assert!((1..=MAX_DURATION_MS).contains(&p.lease_ms));
            let id = id.unwrap_or_else(|| b"drawn".to_vec());
            assert!((1..=MAX_ID_BYTES).contains(&id.len()));
            for now in [1_700_000_000_000, MAX_TIMESTAMP_MS] {
                let mut leases = Leases::new(p, now);
                let (d, changed) = leases.acquire(p, now, &id);
                assert!(d.allowed && changed, "a new key takes its first lease");
                Other::check_storable(&leases, "fresh lease");
            }
        }),
    }
});

/// Whether the algorithm has options of its own.
struct HasOwnOptions;

impl Each for HasOwnOptions {
    type Out = bool;
    fn algorithm<A: Listed>(&mut self) -> bool {
        !A::Params::OPTIONS.is_empty()
    }
}

impl EachState for HasOwnOptions {
    fn concurrency(&mut self) -> bool {
        self.other::<Leases>()
    }
}

impl HasOwnOptions {
    fn other<S: Other>(&mut self) -> bool {
        false
    }
}

/// `RL.<ALGORITHM> key <args>`, after the key.
struct CheckCommand<'a> {
    args: &'a [&'a [u8]],
}

impl Each for CheckCommand<'_> {
    type Out = ();
    fn algorithm<A: Listed>(&mut self) {
        checked(check_args::<A::Params>(self.args), |p, o| {
            check_params_are_the_words::<A>(p, self.args);
            check_fresh::<A>(p, o);
        });
    }
}

impl EachState for CheckCommand<'_> {
    fn concurrency(&mut self) {
        self.other::<Leases>()
    }
}

impl CheckCommand<'_> {
    fn other<S: Other>(&mut self) {}
}

/// The options after an algorithm's parameters, its own among them.
struct OwnOptions<'a> {
    args: &'a [&'a [u8]],
}

impl Each for OwnOptions<'_> {
    type Out = ();
    fn algorithm<A: Listed>(&mut self) {
        let mut own = [None; MAX_OWN_OPTIONS];
        let parsed = check_options(self.args, A::Params::OPTIONS, &mut own);
        checked(parsed.map(|o| (o, ())), |o, ()| {
            check_options_in_range(&o);
            // A value for each option given, and none for any other.
            assert!(own[A::Params::OPTIONS.len()..].iter().all(Option::is_none));
            // Taken on by everyday parameters, the values give a key that
            // checks and stores like any other.
            let words: Vec<&[u8]> = A::Params::PARAMS
                .iter()
                .map(|w| match w.kind {
                    parse::syntax::Kind::Integer => &b"10"[..],
                    parse::syntax::Kind::Decimal => b"1",
                    parse::syntax::Kind::Duration => b"1s",
                })
                .collect();
            let Ok((base, _)) = check_args::<A::Params>(&words) else {
                panic!(
                    "fuzz/common: 10, 1 and 1s are not parameters of {}: \
                     choose everyday words it accepts in OwnOptions",
                    A::NAME
                );
            };
            check_fresh::<A>(base.with_options(&own), o);
        });
    }
}

impl EachState for OwnOptions<'_> {
    fn concurrency(&mut self) {
        self.other::<Leases>()
    }
}

impl OwnOptions<'_> {
    fn other<S: Other>(&mut self) {}
}

/// Runs `accepted` on what was parsed, or checks the error's text.
fn checked<P, O>(result: Result<(P, O), CommandError>, accepted: impl FnOnce(P, O)) {
    match result {
        Ok((p, o)) => accepted(p, o),
        Err(e) => check_error(&e),
    }
}

/// Every tier of an `RL.ALL` on fresh keys, and their combined answer.
fn check_all(a: &AllArgs) {
    check_options_in_range(&a.options);
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
        .map(|&tier| tier.visit(Once { now, cost, mode }))
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

/// One tier of an `RL.ALL`, on a fresh key.
struct Once {
    now: i64,
    cost: u64,
    mode: Mode,
}

impl OnTier for Once {
    type Out = Decision;
    fn on<A: Listed>(self, params: A::Params) -> Decision {
        check_once::<A>(params, self.now, self.cost, self.mode)
    }
}

fn check_options_in_range(o: &CheckOptions) {
    assert!((1..=MAX_AMOUNT).contains(&o.cost), "{o:?}");
    if let Some(penalty_ms) = o.penalty_ms {
        assert!((1..=MAX_DURATION_MS).contains(&penalty_ms), "{o:?}");
    }
    // Options that contradict each other are never accepted together.
    let block = o.block_ms.is_some();
    let penalty = o.penalty_ms.is_some();
    assert!(!(o.peek && (block || penalty || o.shadow)), "{o:?}");
    assert!(!(block && (penalty || o.shadow)), "{o:?}");
}

/// A command with these parameters and options on a fresh key, at a common
/// time and at the last time a state can carry.
fn check_fresh<A: Fuzzed>(params: A::Params, options: CheckOptions) {
    check_options_in_range(&options);
    let mode = if options.peek { Mode::Peek } else { Mode::Take };
    for now in [1_700_000_000_000, MAX_TIMESTAMP_MS] {
        check_once::<A>(params, now, options.cost, mode);
    }
}

fn check_once<A: Fuzzed>(params: A::Params, now: i64, cost: u64, mode: Mode) -> Decision {
    let profile = profile::<A>(params);
    // Whatever the mode, what was accepted is what a key can hold: a state
    // with these parameters is one the decoder accepts.
    check_storable(&A::fresh(params, now), "fresh state");
    let (d, next) = A::check_with(None, params, now, cost, mode);
    check_decision(&d, &profile, cost, "fresh key");
    assert_eq!(
        d.allowed,
        cost <= profile.limit,
        "a fresh key allows up to its limit"
    );
    assert_eq!(next.is_some(), d.allowed && mode == Mode::Take);
    if let Some(next) = next {
        assert!(next.params() == params, "the parameters are stored");
        check_storable(&next, "fresh key");
    }
    d
}
