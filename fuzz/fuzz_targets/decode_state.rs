//! Fuzzes the state decoder that RDB loading and `RL.SETSTATE` use.
//!
//! Input: `[len: u16 LE][state: len bytes][rest]` (see `common::split_state`).
//! The state's tag byte picks the stored type of the registry, as the Redis
//! layer's dispatch on a state's tag does (the concurrency limiter's leases
//! included). Checked: decoding never panics; what decodes encodes back to
//! the very same bytes (so a replica, an RDB file and the digest agree); and
//! a few checks driven by `rest` (acquires and releases for leases), at
//! later times (or the same time, a clock that stepped back) with any
//! reachable cost, keep every decision and every stored state within the
//! shared checks of `common`.
#![no_main]

mod common;

use common::{
    advance, check_decision, check_storable, cost, encode, on_tag, profile, split_state, step_ms,
    Fuzzed, Other, Visitor,
};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use redis_ratelimit::algorithms::Mode;

fuzz_target!(|data: &[u8]| {
    let (state, rest) = split_state(data);
    if let Some(&tag) = state.first() {
        on_tag(tag, Decoded { state, rest });
    }
});

/// A state's bytes, and the bytes that drive the checks after it.
struct Decoded<'a> {
    state: &'a [u8],
    rest: &'a [u8],
}

impl Visitor for Decoded<'_> {
    type Out = ();

    fn algorithm<A: Fuzzed>(self) {
        let Ok(decoded) = A::decode(self.state) else {
            return;
        };
        assert_eq!(
            encode(&decoded),
            self.state,
            "decoding accepts only what encoding writes"
        );
        check_storable(&decoded, "decoded");
        let params = decoded.params();
        let profile = profile::<A>(params);
        let mut u = Unstructured::new(self.rest);
        let mut state = decoded;
        let mut now = state.last_seen_ms();
        for _ in 0..16 {
            let mode = if u.ratio(1, 4).unwrap_or(false) {
                Mode::Peek
            } else {
                Mode::Take
            };
            let cost = cost(&mut u, &profile, mode);
            now = advance(now, step_ms(&mut u, profile.scale_ms));
            // `check`'s contract: never earlier than the state has seen.
            let at = now.max(state.last_seen_ms());
            let mut next = state.clone();
            let d = next.check(at, cost, mode);
            check_decision(&d, &profile, cost, "check of a decoded state");
            if d.allowed && mode == Mode::Take {
                check_storable(&next, "taken from a decoded state");
                state = next;
            }
            if u.is_empty() {
                break;
            }
        }
    }

    fn other<S: Other>(self) {
        if let Ok(decoded) = S::decode(self.state) {
            assert_eq!(
                encode(&decoded),
                self.state,
                "decoding accepts only what encoding writes"
            );
            decoded.check_storable("decoded");
            S::run(Some(decoded), Unstructured::new(self.rest));
        }
    }
}
