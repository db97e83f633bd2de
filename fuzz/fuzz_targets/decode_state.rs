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
    advance, check_decision, check_storable, cost, encode, profile, split_state, step_ms, Other,
};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use redis_ratelimit::algorithms::concurrency::Leases;
use redis_ratelimit::algorithms::penalty::{self, Penalized, PENALTY_TAG, STAMPED_TAG};
use redis_ratelimit::algorithms::registry::{self, Each, EachState, Listed};
use redis_ratelimit::algorithms::{Mode, State, MAX_TIMESTAMP_MS};
use redis_ratelimit::encoding::Horizon;

fuzz_target!(|data: &[u8]| {
    let (state, rest) = split_state(data);
    match *state {
        // A penalized state: the algorithm's tag follows the penalty's.
        [PENALTY_TAG | STAMPED_TAG, tag, ..] => {
            registry::on_tag(tag, &mut DecodedPenalized { state, rest });
        }
        [tag, ..] => {
            registry::on_tag(tag, &mut Decoded { state, rest });
        }
        [] => {}
    }
});

/// A state's bytes, and the bytes that drive the checks after it.
struct Decoded<'a> {
    state: &'a [u8],
    rest: &'a [u8],
}

impl Each for Decoded<'_> {
    type Out = ();

    fn algorithm<A: Listed>(&mut self) {
        let Ok(decoded) = A::decode(self.state, Horizon::NONE) else {
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
}

impl EachState for Decoded<'_> {
    fn concurrency(&mut self) {
        self.other::<Leases>()
    }
}

impl Decoded<'_> {
    fn other<S: Other>(&mut self) {
        if let Ok(decoded) = S::decode(self.state, Horizon::NONE) {
            // The lease set reads its leases in any order (versions before
            // the indexed set wrote them in the order taken, and their RDB
            // files must load) and writes them sorted: what it writes back
            // is canonical, read back to the same bytes.
            let written = encode(&decoded);
            let again = S::decode(&written, Horizon::NONE).expect("what was written decodes");
            assert_eq!(encode(&again), written, "the encoding is canonical");
            decoded.check_storable("decoded");
            S::run(Some(decoded), Unstructured::new(self.rest));
        }
    }
}

/// A penalized state's bytes (see `redis_ratelimit::algorithms::penalty`),
/// and the bytes that drive the checks after it.
struct DecodedPenalized<'a> {
    state: &'a [u8],
    rest: &'a [u8],
}

impl Each for DecodedPenalized<'_> {
    type Out = ();

    /// As for a plain state, through the penalty's own check: while the
    /// penalty lasts every request is denied, nothing taken, the wait at
    /// least what is left of it (or never); a denial given a penalty starts
    /// one only outside a penalty.
    fn algorithm<A: Listed>(&mut self) {
        let Ok(decoded) = Penalized::<A>::decode(self.state, Horizon::NONE) else {
            return;
        };
        assert_eq!(
            encode(&decoded),
            self.state,
            "decoding accepts only what encoding writes"
        );
        check_storable(&decoded.state, "decoded under a penalty");
        let Penalized {
            mut until_ms,
            mut state,
            ..
        } = decoded;
        let params = state.params();
        let profile = profile::<A>(params);
        let mut u = Unstructured::new(self.rest);
        let mut now = state.last_seen_ms();
        for _ in 0..16 {
            let mode = if u.ratio(1, 4).unwrap_or(false) {
                Mode::Peek
            } else {
                Mode::Take
            };
            let cost = cost(&mut u, &profile, mode);
            let penalty_ms = u
                .ratio(1, 2)
                .unwrap_or(false)
                .then(|| u.int_in_range(1..=366 * 86_400_000).unwrap_or(1));
            now = advance(now, step_ms(&mut u, profile.scale_ms));
            let before = state.clone();
            let (d, changed, started) = penalty::check_stored(
                &mut state,
                Some(until_ms),
                params,
                now,
                cost,
                mode,
                penalty_ms,
            );
            check_decision(&d, &profile, cost, "check under a penalty");
            if now < until_ms {
                assert!(
                    !d.allowed && d.remaining == 0,
                    "allowed in a penalty: {d:?}"
                );
                assert!(
                    d.retry_after_ms < 0 || d.retry_after_ms >= until_ms - now,
                    "a wait shorter than the penalty: {d:?}"
                );
                assert!(
                    !changed && started.is_none(),
                    "a penalty changed or extended"
                );
                assert_eq!(encode(&state), encode(&before), "taken in a penalty");
            }
            if let Some(started) = started {
                // Later than now, but never past the last time a state
                // can carry (where a penalty starting then ends at once).
                assert!(
                    started >= now && started >= until_ms,
                    "{started} {until_ms} {now}"
                );
                assert!(
                    started > now || now == MAX_TIMESTAMP_MS,
                    "{started} {until_ms} {now}"
                );
                until_ms = started;
            }
            check_storable(&state, "under a penalty");
            if u.is_empty() {
                break;
            }
        }
    }
}

impl EachState for DecodedPenalized<'_> {
    fn concurrency(&mut self) {
        self.other::<Leases>()
    }
}

impl DecodedPenalized<'_> {
    fn other<S: Other>(&mut self) {
        // Only algorithms carry penalties: nothing else decodes.
        assert!(
            redis_ratelimit::algorithms::concurrency::Leases::decode(self.state, Horizon::NONE)
                .is_err(),
            "a penalized state of a non-algorithm decoded"
        );
    }
}
