//! Fuzzes the state decoder that RDB loading and `RL.SETSTATE` use.
//!
//! Input: `[len: u16 LE][state: len bytes][rest]` (see `common::split_state`).
//! The state's tag byte picks the algorithm, as the Redis layer's
//! `dispatch_on_tag!` does (the concurrency limiter's leases included). Checked: decoding never panics; what decodes
//! encodes back to the very same bytes (so a replica, an RDB file and the
//! digest agree); and a few checks driven by `rest`, at later times (or the
//! same time, a clock that stepped back) with any reachable cost, keep every
//! decision and every stored state within the shared checks of `common`.
#![no_main]

mod common;

use common::{advance, check_decision, check_storable, cost, encode, split_state, step_ms, Fuzzed};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use redis_ratelimit::algorithms::concurrency::Leases;
use redis_ratelimit::algorithms::{Mode, State};

fuzz_target!(|data: &[u8]| {
    let (state, rest) = split_state(data);
    match state.first() {
        Some(&Leases::TAG) => {
            if let Ok(decoded) = Leases::decode(state) {
                assert_eq!(
                    encode(&decoded),
                    state,
                    "decoding accepts only what encoding writes"
                );
                common::leases::check_storable(&decoded, "decoded");
                common::leases::run(Some(decoded), Unstructured::new(rest));
            }
        }
        Some(&tag) => dispatch!(tag, run(state, rest), ()),
        None => {}
    }
});

fn run<A: Fuzzed>(bytes: &[u8], rest: &[u8]) {
    let Ok(decoded) = A::decode(bytes) else {
        return;
    };
    assert_eq!(
        encode(&decoded),
        bytes,
        "decoding accepts only what encoding writes"
    );
    check_storable(&decoded, "decoded");
    let params = decoded.params();
    let limit = A::limit(&params);
    let mut u = Unstructured::new(rest);
    let mut state = decoded;
    let mut now = state.last_seen_ms();
    for _ in 0..16 {
        let mode = if u.ratio(1, 4).unwrap_or(false) {
            Mode::Peek
        } else {
            Mode::Take
        };
        let cost = cost::<A>(&mut u, limit, mode);
        now = advance(now, step_ms(&mut u, A::scale_ms(&params)));
        // `check`'s contract: never earlier than the state has seen.
        let at = now.max(state.last_seen_ms());
        let mut next = state.clone();
        let d = next.check(at, cost, mode);
        check_decision::<A>(&d, &params, cost, "check of a decoded state");
        if d.allowed && mode == Mode::Take {
            check_storable(&next, "taken from a decoded state");
            state = next;
        }
        if u.is_empty() {
            break;
        }
    }
}
