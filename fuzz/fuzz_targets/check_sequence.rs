//! Fuzzes sequences of checks, the whole life of a key as the Redis layer
//! drives it: `Algorithm::check_with` (a copy, stored only when a request was
//! taken) and `Algorithm::check_stored` (in place), with changing
//! parameters, times, costs and modes.
//!
//! Input: `[len: u16 LE][state: len bytes][rest]` (see `common::split_state`).
//! A state that decodes is the key's starting value; otherwise the key starts
//! absent, the algorithm (or the concurrency limiter, driven by acquires,
//! releases and peeks) picked from `rest`. Each step of `rest` is one
//! command. Checked at every step: no panic and no overflow (the fuzz build
//! has overflow checks on); the copy path and the in-place path answer the
//! same and leave byte-equal states; a peek answers what a take would and
//! stores nothing; a denial's `retry_after_ms` is the first millisecond at
//! which the same request is allowed; a denial stores nothing; `allows_in_place`, when offered,
//! agrees with the check; every decision and every stored state pass the
//! shared checks of `common` (a replica decoding the stored state after each
//! taken request holds byte for byte what the primary holds).
#![no_main]

mod common;

use common::{
    advance, arbitrary_params, check_decision, check_storable, cost, encode, nth_tag, profile,
    registered, split_state, step_ms, time_ms, Fuzzed, Other, ALGORITHM_TAGS, OTHER_TAGS,
};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use redis_ratelimit::algorithms::concurrency::Leases;
use redis_ratelimit::algorithms::registry::{self, Each, EachState, Listed};
use redis_ratelimit::algorithms::{Mode, MAX_TIMESTAMP_MS};
use redis_ratelimit::encoding::Horizon;

fuzz_target!(|data: &[u8]| {
    let (state, rest) = split_state(data);
    let mut u = Unstructured::new(rest);
    let picked = nth_tag(
        u.choose_index(ALGORITHM_TAGS.len() + OTHER_TAGS.len())
            .unwrap_or(0),
    );
    // A state of no registered type is no key: start from the one picked.
    let (tag, state) = match state.first() {
        Some(&tag) if registered(tag) => (tag, state),
        _ => (picked, &[][..]),
    };
    registry::on_tag(tag, &mut Sequence { state, u });
});

/// A key's starting value (bytes that may not decode: then no key), and
/// the bytes that drive the commands.
struct Sequence<'a> {
    state: &'a [u8],
    u: Unstructured<'a>,
}

impl Each for Sequence<'_> {
    type Out = ();
    fn algorithm<A: Listed>(&mut self) {
        run::<A>(self.state, self.take_u());
    }
}

impl EachState for Sequence<'_> {
    fn concurrency(&mut self) {
        self.other::<Leases>()
    }
}

impl Sequence<'_> {
    /// The driving bytes, for the one dispatch that uses them.
    fn take_u(&mut self) -> Unstructured<'_> {
        std::mem::replace(&mut self.u, Unstructured::new(&[]))
    }

    fn other<S: Other>(&mut self) {
        S::run(S::decode(self.state, Horizon::NONE).ok(), self.take_u());
    }
}

fn run<A: Fuzzed>(bytes: &[u8], mut u: Unstructured<'_>) {
    let mut stored: Option<A> = A::decode(bytes, Horizon::NONE).ok();
    let mut params = match &stored {
        Some(s) => s.params(),
        None => match arbitrary_params::<A>(&mut u) {
            Some(params) => params,
            None => return,
        },
    };
    let mut profile = profile::<A>(params);
    let mut now = match &stored {
        Some(s) => s.last_seen_ms(),
        None => time_ms(&mut u),
    };
    for step in 0..64 {
        if u.ratio(1, 8).unwrap_or(false) {
            if let Some(changed) = arbitrary_params::<A>(&mut u) {
                params = changed;
                profile = common::profile::<A>(params);
            }
        }
        let mode = if u.ratio(1, 4).unwrap_or(false) {
            Mode::Peek
        } else {
            Mode::Take
        };
        let cost = cost(&mut u, &profile, mode);
        now = advance(now, step_ms(&mut u, profile.scale_ms));
        let what = format!("step {step}");

        let (d, next) = A::check_with(stored.as_ref(), params, now, cost, mode);
        check_decision(&d, &profile, cost, &what);
        assert_eq!(
            next.is_some(),
            d.allowed && mode == Mode::Take,
            "{what}: stored only when taken"
        );

        // Peek and take agree on everything but what is taken.
        let other = if mode == Mode::Take {
            Mode::Peek
        } else {
            Mode::Take
        };
        if cost > 0 {
            let (e, _) = A::check_with(stored.as_ref(), params, now, cost, other);
            assert_eq!(d.allowed, e.allowed, "{what}: peek and take disagree");
            assert_eq!(
                d.retry_after_ms, e.retry_after_ms,
                "{what}: peek and take disagree"
            );
        }

        // A denial's wait is exact: denied a millisecond earlier, allowed
        // then (waits past the latest time a state carries saturate).
        let used = stored.as_ref().map_or(now, |s| now.max(s.last_seen_ms()));
        let saturated = d.retry_after_ms >= MAX_TIMESTAMP_MS - used;
        if !d.allowed && d.retry_after_ms > 0 && !saturated {
            let at = used + d.retry_after_ms;
            let peek = |t| A::check_with(stored.as_ref(), params, t, cost, Mode::Peek).0;
            assert!(
                !peek(at - 1).allowed,
                "{what}: allowed before its retry_after {d:?}"
            );
            assert!(
                peek(at).allowed,
                "{what}: denied after its retry_after {d:?}"
            );
        }

        if let Some(s) = &stored {
            let before = encode(s);
            let mut in_place = s.clone();
            let same_params = in_place.params() == params;
            let at = now.max(in_place.last_seen_ms());
            if let (true, Some(allows)) = (same_params, in_place.allows_in_place(at, cost)) {
                assert_eq!(allows, d.allowed, "{what}: allows_in_place disagrees");
            }
            let (e, changed) = in_place.check_stored(params, now, cost, mode);
            assert_eq!(d, e, "{what}: in place and on a copy answer differently");
            assert_eq!(
                changed,
                next.is_some(),
                "{what}: in place and on a copy store differently"
            );
            let after = encode(&in_place);
            match &next {
                Some(n) => assert_eq!(after, encode(n), "{what}: in place and copy differ"),
                None => assert_eq!(after, before, "{what}: a peek or denial changed the state"),
            }
        }

        if let Some(next) = next {
            assert!(
                next.params() == params,
                "{what}: the new parameters are stored"
            );
            let bytes = check_storable(&next, &what);
            // The replica only ever sees the bytes.
            stored = Some(A::decode(&bytes, Horizon::NONE).unwrap_or(next));
        }
        if u.is_empty() {
            break;
        }
    }
}
