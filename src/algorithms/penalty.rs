//! Penalties (`PENALTY duration`): a key whose request was denied with the
//! option is denied everything until the penalty ends, whatever its
//! algorithm says.
//!
//! A penalty is part of the key's state, but only of the keys that have had
//! one: the state is then a [`Penalized`] value (the algorithm's state and
//! the moment the penalty ends), stored under a Redis type of its own, so
//! that the keys that never had a penalty pay not one byte for the feature.
//! A key keeps its penalized form once its penalty is over (a past end
//! changes nothing), until it expires.
//!
//! The penalized form is the algorithm's *extended* form: beside the
//! penalty's end it carries the [`Stamp`] of the named policy the key was
//! decided under (`RL.CHECK`), if any. Every key a policy checks holds this
//! form (with a penalty end of 0 when it never had a penalty); keys that
//! never had a penalty or a policy keep the plain form, not a byte more.

use super::{Algorithm, Decision, Field, Mode, Registered, State, MAX_TIMESTAMP_MS};
use crate::encoding::{ensure, put_i64, put_u64, DecodeError, Horizon, Reader};

/// The tag that starts a penalized state's encoding; the algorithm's own tag
/// follows it (see [`Penalized`]'s encoding). Above every registry tag
/// (checked at compile time in `registry::check`).
pub const PENALTY_TAG: u8 = 0x50;

/// The tag of an extended state that carries a policy's [`Stamp`]: the
/// same layout as [`PENALTY_TAG`]'s with the stamp after the penalty's end.
/// A state with no stamp is still written with [`PENALTY_TAG`], byte for
/// byte as before stamps existed, so files written either way load.
pub const STAMPED_TAG: u8 = 0x51;

/// The named policy a key was decided under: the FNV-1a-64 hash of the
/// policy's name and the policy's version. All zero: no policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stamp {
    pub policy: u64,
    pub version: u64,
}

impl Stamp {
    /// No policy.
    pub const NONE: Stamp = Stamp {
        policy: 0,
        version: 0,
    };

    /// The stamp of `version` of the policy named `name`.
    pub fn of(name: &[u8], version: u64) -> Stamp {
        Stamp {
            policy: name_hash(name),
            version,
        }
    }

    pub fn is_none(self) -> bool {
        self == Stamp::NONE
    }
}

/// FNV-1a-64 of a policy's name, never 0 (0 is no policy).
pub fn name_hash(name: &[u8]) -> u64 {
    let hash = name.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash.max(1)
}

/// An algorithm's state with the end of its key's latest penalty.
#[derive(Debug, Clone, PartialEq)]
pub struct Penalized<A> {
    /// When the penalty ends (Unix ms); requests from then on are decided
    /// by the algorithm again. 0 for a stamped key that never had one.
    pub until_ms: i64,
    /// The policy the key was decided under ([`Stamp::NONE`]: none).
    pub stamp: Stamp,
    pub state: A,
}

/// An algorithm whose keys can carry a penalty: every algorithm of the
/// registry (made there), each with the name of its penalized Redis type.
pub trait Penalizable: Algorithm {
    /// The Redis type of its penalized states: its own type's name with
    /// `rp_` for `rl_` (see [`penalized_type_name`]).
    const PENALIZED_TYPE_NAME: &'static str;
}

/// `rl_tokbkt` → `rp_tokbkt`: the name of a penalized type, from the
/// algorithm's (nine characters starting `rl_`, which the registry checks).
#[allow(clippy::indexing_slicing)]
pub const fn penalized_type_name(type_name: &str) -> [u8; 9] {
    let bytes = type_name.as_bytes();
    assert!(
        bytes.len() == 9 && bytes[0] == b'r' && bytes[1] == b'l' && bytes[2] == b'_',
        "a registry type name is nine characters starting rl_"
    );
    let mut out = [0u8; 9];
    let mut i = 0;
    while i < 9 {
        out[i] = bytes[i];
        i += 1;
    }
    out[1] = b'p';
    out
}

impl<A: Penalizable> Registered for Penalized<A> {
    const TAG: u8 = PENALTY_TAG;
    const NAME: &'static str = A::NAME;
    const TYPE_NAME: &'static str = A::PENALIZED_TYPE_NAME;
}

impl<A: Penalizable> Penalized<A> {
    /// The penalty's end, while it lasts at `now_ms`.
    pub fn in_force(&self, now_ms: i64) -> Option<i64> {
        in_force(self.until_ms, now_ms)
    }
}

/// `until_ms`, when a penalty ending then still lasts at `now_ms`.
pub fn in_force(until_ms: i64, now_ms: i64) -> Option<i64> {
    (now_ms < until_ms).then_some(until_ms)
}

/// Layout: [`PENALTY_TAG`], the algorithm's tag, the penalty's end (i64),
/// then the algorithm's own body; or, for a stamped state, [`STAMPED_TAG`],
/// the algorithm's tag, the penalty's end (i64, 0 allowed), the stamp's
/// policy hash and version (u64 each, not both 0), then the body. The
/// algorithm's tag right after the first lets a reader pick the type from
/// the first two bytes. [`State::decode_body`] reads the unstamped layout
/// after its tag (what `encode_body` writes for a state without a stamp).
impl<A: Penalizable> State for Penalized<A> {
    fn fresh_at_ms(&self) -> i64 {
        self.state.fresh_at_ms().max(self.until_ms)
    }

    fn heap_bytes(&self) -> usize {
        self.state.heap_bytes()
    }

    fn free_effort(&self) -> usize {
        self.state.free_effort()
    }

    fn policy_hash(&self) -> u64 {
        self.stamp.policy
    }

    fn describe(&self, now_ms: i64) -> Vec<(&'static str, Field)> {
        let mut fields = self.state.describe(now_ms);
        if self.until_ms > 0 {
            fields.push(("penalty_until_ms", Field::Int(self.until_ms)));
        }
        if !self.stamp.is_none() {
            // The hash in hex: the Redis layer shows the policy's name
            // instead when the server holds it.
            let hash = format!("{:016x}", self.stamp.policy).into_bytes();
            fields.push(("policy", Field::Text(hash)));
            fields.push((
                "policy_version",
                Field::Int(i64::try_from(self.stamp.version).unwrap_or(i64::MAX)),
            ));
        }
        fields
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(if self.stamp.is_none() {
            PENALTY_TAG
        } else {
            STAMPED_TAG
        });
        self.encode_body(out);
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.push(A::TAG);
        put_i64(out, self.until_ms);
        if !self.stamp.is_none() {
            put_u64(out, self.stamp.policy);
            put_u64(out, self.stamp.version);
        }
        self.state.encode_body(out);
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        decode_extended(input, false)
    }

    fn decode(bytes: &[u8], horizon: Horizon) -> Result<Self, DecodeError> {
        let mut input = Reader::within(bytes, horizon);
        let stamped = match input.u8()? {
            PENALTY_TAG => false,
            STAMPED_TAG => true,
            _ => return Err(DecodeError("state is of another algorithm")),
        };
        let state = decode_extended(&mut input, stamped)?;
        input.finish()?;
        Ok(state)
    }
}

/// An extended state's body, after its first tag: stamped or not.
fn decode_extended<A: Penalizable>(
    input: &mut Reader<'_>,
    stamped: bool,
) -> Result<Penalized<A>, DecodeError> {
    ensure(
        input.u8()? == A::TAG,
        "penalty holds a state of another algorithm",
    )?;
    let until_ms = input.timestamp("penalty end out of range")?;
    let stamp = if stamped {
        let stamp = Stamp {
            policy: input.u64()?,
            version: input.u64()?,
        };
        ensure(!stamp.is_none(), "stamp out of range")?;
        stamp
    } else {
        ensure(until_ms >= 1, "penalty end out of range")?;
        Stamp::NONE
    };
    let state = A::decode_body(input)?;
    Ok(Penalized {
        until_ms,
        stamp,
        state,
    })
}

/// When a penalty of `penalty_ms` that starts at `now_ms` ends.
pub fn ends_at(now_ms: i64, penalty_ms: u64) -> i64 {
    let penalty_ms = i64::try_from(penalty_ms).unwrap_or(MAX_TIMESTAMP_MS);
    now_ms.saturating_add(penalty_ms).min(MAX_TIMESTAMP_MS)
}

/// Whether a request given `PENALTY` and decided `decision` (in
/// [`Mode::Take`]) starts a penalty: a denial that could pass later. A
/// request that can never pass (`COST` above the limit, `retry_after_ms`
/// -1) says the request is wrong, not that the key went over its limit, so
/// it does not lock the key.
pub fn starts(decision: &Decision, mode: Mode) -> bool {
    mode == Mode::Take && !decision.allowed && decision.retry_after_ms >= 0
}

/// What a request is told while its key's penalty lasts (until `until_ms`),
/// given what the algorithm alone would answer (`own`, which takes nothing
/// during a penalty): denied, nothing remaining, waiting until the penalty
/// ends or the algorithm's own wait if longer (never stays never); the key
/// is fresh no sooner than the penalty's end.
pub fn denied_until(until_ms: i64, now_ms: i64, own: Decision) -> Decision {
    let left_ms = until_ms.saturating_sub(now_ms).max(1);
    Decision {
        allowed: false,
        remaining: 0,
        retry_after_ms: if own.retry_after_ms < 0 {
            -1
        } else {
            own.retry_after_ms.max(left_ms)
        },
        reset_after_ms: own.reset_after_ms.max(left_ms),
        delay_ms: None,
        ..own
    }
}

/// One request on a stored `state` whose key's penalty ends at `until_ms`
/// (if it ever had one), decided at `now_ms`: during the penalty the
/// algorithm is only asked (nothing is taken, the penalty is not extended);
/// otherwise it decides, in place (see [`Algorithm::check_stored`]), and a
/// denial given `penalty_ms` that [`starts`] a penalty is answered as the
/// penalty's first denial. Returns the decision, whether the state changed,
/// and the end of the penalty that starts now, if one does.
pub fn check_stored<A: Algorithm>(
    state: &mut A,
    until_ms: Option<i64>,
    params: A::Params,
    now_ms: i64,
    cost: u64,
    mode: Mode,
    penalty_ms: Option<u64>,
) -> (Decision, bool, Option<i64>) {
    if let Some(until_ms) = until_ms.and_then(|until| in_force(until, now_ms)) {
        let own = state.check_stored(params, now_ms, cost, Mode::Peek).0;
        return (denied_until(until_ms, now_ms, own), false, None);
    }
    let (decision, changed) = state.check_stored(params, now_ms, cost, mode);
    match penalty_ms.filter(|_| starts(&decision, mode)) {
        Some(penalty_ms) => {
            let until_ms = ends_at(now_ms, penalty_ms);
            (
                denied_until(until_ms, now_ms, decision),
                changed,
                Some(until_ms),
            )
        }
        None => (decision, changed, None),
    }
}

/// [`check_stored`] of a peek, on a state lent to read only: the same
/// decision (a peek neither changes the state nor starts a penalty).
pub fn peek_stored<A: Algorithm>(
    state: &A,
    until_ms: Option<i64>,
    params: A::Params,
    now_ms: i64,
    cost: u64,
) -> Decision {
    let own = state.peek_stored(params, now_ms, cost);
    match until_ms.and_then(|until| in_force(until, now_ms)) {
        Some(until_ms) => denied_until(until_ms, now_ms, own),
        None => own,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{decode_body, encode, encode_body};
    use super::super::token_bucket::{TokenBucket, TokenBucketParams};
    use super::*;

    fn decision(allowed: bool, remaining: u64, retry: i64, reset: i64) -> Decision {
        Decision {
            allowed,
            limit: 5,
            remaining,
            retry_after_ms: retry,
            reset_after_ms: reset,
            delay_ms: None,
        }
    }

    #[test]
    fn a_penalty_denies_with_the_longer_of_its_end_and_the_algorithms_wait() {
        // The algorithm would allow: the penalty's end is the wait.
        assert_eq!(
            denied_until(10_000, 4_000, decision(true, 3, 0, 800)),
            decision(false, 0, 6_000, 6_000)
        );
        // The algorithm's own wait is longer: it stands.
        assert_eq!(
            denied_until(10_000, 4_000, decision(false, 0, 9_000, 12_000)),
            decision(false, 0, 9_000, 12_000)
        );
        // Never stays never.
        assert_eq!(
            denied_until(10_000, 4_000, decision(false, 5, -1, 0)).retry_after_ms,
            -1
        );
        // The last millisecond of a penalty still waits.
        assert_eq!(
            denied_until(10_000, 9_999, decision(true, 3, 0, 0)).retry_after_ms,
            1
        );
    }

    #[test]
    fn only_a_denial_that_could_pass_later_starts_a_penalty() {
        assert!(starts(&decision(false, 0, 100, 100), Mode::Take));
        assert!(!starts(&decision(true, 4, 0, 100), Mode::Take));
        assert!(!starts(&decision(false, 5, -1, 0), Mode::Take));
        assert!(!starts(&decision(false, 0, 100, 100), Mode::Peek));
    }

    #[test]
    fn a_penalty_lasts_until_its_end_exclusive() {
        assert_eq!(in_force(10_000, 9_999), Some(10_000));
        assert_eq!(in_force(10_000, 10_000), None);
        assert_eq!(ends_at(1_000, 3_600_000), 3_601_000);
        assert_eq!(ends_at(MAX_TIMESTAMP_MS - 1, u64::MAX), MAX_TIMESTAMP_MS);
    }

    #[test]
    fn a_penalized_state_round_trips_and_refuses_what_it_could_not_have_written() {
        let params = TokenBucketParams {
            capacity: 5,
            rate_per_s: 1.0,
        };
        let penalized = Penalized {
            until_ms: 90_000,
            stamp: Stamp::NONE,
            state: TokenBucket::fresh(params, 1_000),
        };
        let body = encode_body(&penalized);
        assert_eq!(
            decode_body::<Penalized<TokenBucket>>(&body),
            Ok(penalized.clone())
        );
        let full = encode(&penalized);
        assert_eq!(&full[..2], &[PENALTY_TAG, TokenBucket::TAG]);
        // The fresh moment is the penalty's end when that is later.
        assert_eq!(penalized.fresh_at_ms(), 90_000);

        let mut other = body.clone();
        other[0] = TokenBucket::TAG + 1;
        assert!(decode_body::<Penalized<TokenBucket>>(&other).is_err());
        for bad_end in [0_i64, -5, MAX_TIMESTAMP_MS + 1] {
            let mut bad = body.clone();
            bad[1..9].copy_from_slice(&bad_end.to_le_bytes());
            assert!(
                decode_body::<Penalized<TokenBucket>>(&bad).is_err(),
                "{bad_end}"
            );
        }
        assert!(decode_body::<Penalized<TokenBucket>>(&body[..body.len() - 1]).is_err());
    }

    #[test]
    fn a_stamped_state_round_trips_and_an_unstamped_one_keeps_the_old_bytes() {
        let params = TokenBucketParams {
            capacity: 5,
            rate_per_s: 1.0,
        };
        let state = TokenBucket::fresh(params, 1_000);
        // The bytes main writes for a penalized state, built by hand: 0x50,
        // the algorithm's tag, the penalty's end, the algorithm's body.
        let mut old = vec![PENALTY_TAG, TokenBucket::TAG];
        old.extend_from_slice(&90_000_i64.to_le_bytes());
        state.encode_body(&mut old);
        let loaded = Penalized::<TokenBucket>::decode(&old, Horizon::NONE).unwrap();
        assert_eq!(loaded.stamp, Stamp::NONE);
        assert_eq!(
            encode(&loaded),
            old,
            "an unstamped state is written as before"
        );
        // Stamped: 0x51, the stamp after the penalty's end (0: none had).
        let stamped = Penalized {
            until_ms: 0,
            stamp: Stamp::of(b"plan:free", 3),
            state,
        };
        let bytes = encode(&stamped);
        assert_eq!(&bytes[..2], &[STAMPED_TAG, TokenBucket::TAG]);
        assert_eq!(bytes.len(), old.len() + 16);
        assert_eq!(
            Penalized::<TokenBucket>::decode(&bytes, Horizon::NONE),
            Ok(stamped.clone())
        );
        // What this code could not have written is refused: a zero stamp
        // under the stamped tag, a zero end under the old one.
        let mut zero = bytes.clone();
        zero[10..26].fill(0);
        assert!(Penalized::<TokenBucket>::decode(&zero, Horizon::NONE).is_err());
        let mut no_end = old.clone();
        no_end[2..10].fill(0);
        assert!(Penalized::<TokenBucket>::decode(&no_end, Horizon::NONE).is_err());
        assert_ne!(name_hash(b"plan:free"), 0);
    }

    /// A key of a bucket of 2 tokens and 1 token/s, with its penalty.
    struct Login {
        state: TokenBucket,
        until_ms: Option<i64>,
    }

    impl Login {
        fn request(&mut self, now_ms: i64, penalty_ms: Option<u64>) -> Decision {
            let params = TokenBucketParams {
                capacity: 2,
                rate_per_s: 1.0,
            };
            let (decision, _, started) = check_stored(
                &mut self.state,
                self.until_ms,
                params,
                now_ms,
                1,
                Mode::Take,
                penalty_ms,
            );
            if started.is_some() {
                self.until_ms = started;
            }
            decision
        }
    }

    #[test]
    fn a_denial_with_a_penalty_locks_the_key_until_the_penalty_ends_and_no_longer() {
        let params = TokenBucketParams {
            capacity: 2,
            rate_per_s: 1.0,
        };
        let mut key = Login {
            state: TokenBucket::fresh(params, 0),
            until_ms: None,
        };
        assert!(key.request(0, Some(60_000)).allowed);
        assert!(key.request(0, Some(60_000)).allowed);
        let first = key.request(0, Some(60_000));
        assert_eq!((first.allowed, first.retry_after_ms), (false, 60_000));
        assert_eq!(key.until_ms, Some(60_000));
        // The bucket is full again long before the penalty ends; denied
        // anyway, and a denial during the penalty does not extend it.
        let during = key.request(30_000, Some(60_000));
        assert_eq!(
            (during.allowed, during.remaining, during.retry_after_ms),
            (false, 0, 30_000)
        );
        assert_eq!(key.until_ms, Some(60_000));
        // Requests without the option are denied as well.
        assert!(!key.request(59_999, None).allowed);
        // From the penalty's end the algorithm decides again, and took
        // nothing during it.
        let after = key.request(60_000, None);
        assert_eq!((after.allowed, after.remaining), (true, 1));
    }

    #[test]
    fn a_request_without_the_option_never_starts_a_penalty() {
        let params = TokenBucketParams {
            capacity: 1,
            rate_per_s: 1.0,
        };
        let mut key = Login {
            state: TokenBucket::fresh(params, 0),
            until_ms: None,
        };
        key.request(0, None);
        let denied = key.request(0, None);
        assert!(!denied.allowed);
        assert_eq!(key.until_ms, None);
    }

    /// A peek on a state lent to read only ([`peek_stored`], what a key
    /// opened for reading offers) answers as [`check_stored`] in peek mode
    /// on the same state, under the state's own parameters (the in-place
    /// answers) and others (the copy), with and without a penalty, and
    /// changes nothing.
    fn peeks_agree<A: Algorithm + PartialEq + std::fmt::Debug>(
        mine: A::Params,
        other: A::Params,
        steps: &[(u16, u8, bool, bool, Option<u16>)],
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let mut state = A::fresh(mine, T0);
        let mut now = T0;
        for &(dt, cost, take, other_params, until) in steps {
            now += i64::from(dt);
            let cost = u64::from(cost);
            let params = if other_params { other } else { mine };
            let until_ms = until.map(|u| now - 500 + i64::from(u));
            let before = state.clone();
            let read_only = peek_stored(&state, until_ms, params, now, cost);
            let (peeked, changed, started) = check_stored(
                &mut state,
                until_ms,
                params,
                now,
                cost,
                Mode::Peek,
                Some(1000),
            );
            proptest::prop_assert_eq!(read_only, peeked);
            proptest::prop_assert!(!changed && started.is_none());
            proptest::prop_assert_eq!(&before, &state);
            if take {
                call_take(&mut state, mine, now, cost);
            }
        }
        Ok(())
    }

    const T0: i64 = 1_700_000_000_000;

    fn call_take<A: Algorithm>(state: &mut A, params: A::Params, now: i64, cost: u64) {
        let _ = state.check_stored(params, now, cost, Mode::Take);
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<(u16, u8, bool, bool, Option<u16>)>>
    {
        use proptest::prelude::*;
        proptest::collection::vec(
            (
                0u16..400,
                0u8..8,
                any::<bool>(),
                any::<bool>(),
                proptest::option::of(0u16..1000),
            ),
            1..60,
        )
    }

    proptest::proptest! {
        #[test]
        fn a_read_only_peek_answers_as_a_peek_on_a_lent_state_token_bucket(steps in steps()) {
            let mine = TokenBucketParams { capacity: 5, rate_per_s: 3.0 };
            let other = TokenBucketParams { capacity: 3, rate_per_s: 1.0 };
            peeks_agree::<TokenBucket>(mine, other, &steps)?;
        }

        #[test]
        fn a_read_only_peek_answers_as_a_peek_on_a_lent_state_sliding_log(steps in steps()) {
            use super::super::sliding_log::{SlidingLog, SlidingLogParams};
            let mine = SlidingLogParams { limit: 6, window_ms: 1000 };
            let other = SlidingLogParams { limit: 4, window_ms: 1500 };
            peeks_agree::<SlidingLog>(mine, other, &steps)?;
        }
    }

    #[test]
    fn type_names_change_only_their_second_letter() {
        assert_eq!(&penalized_type_name("rl_tokbkt"), b"rp_tokbkt");
    }
}
