//! What a key's state becomes when the named policy it was decided under
//! changed its parameters or its algorithm (`ON-CHANGE KEEP|SCALE|RESET`):
//! plain Rust, for any two algorithms of the registry. The Redis layer
//! (`crate::redis::engine::migrate`) finds the keys that need it and stores
//! what this makes.
//!
//! A state's *limit* and *remaining* are what a peek of it answers
//! ([`Decision::limit`](super::Decision), the most a fresh key allows at
//! once: a token bucket's or leaky bucket's capacity, a window's limit, a
//! sliding counter's or log's limit, GCRA's burst plus one).

use super::{Algorithm, Mode};

/// What a key decided under an older version of a policy becomes on its
/// next check, when the tier's parameters (or algorithm) changed: see
/// `crate::redis::engine::migrate`. `KEEP`, the default, is the state as it
/// stands, read under the new parameters (clamped to the new limit), what
/// an inline command does when its parameters change: a reset on every
/// change would hand out a full quota each time. `SCALE`: the remaining
/// quota scaled by new / old limit. `RESET`: a fresh state, as a missing
/// key (the penalty dropped too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnChange {
    #[default]
    Keep,
    Scale,
    Reset,
}

impl OnChange {
    pub fn word(self) -> &'static str {
        match self {
            OnChange::Keep => "KEEP",
            OnChange::Scale => "SCALE",
            OnChange::Reset => "RESET",
        }
    }
}

/// What a peek of `state` under its own parameters answers at `now_ms`:
/// its limit, and what it has remaining.
pub fn limit_and_remaining<A: Algorithm>(state: &A, now_ms: i64) -> (u64, u64) {
    let peek = A::check_with(Some(state), state.params(), now_ms, 1, Mode::Peek).0;
    (peek.limit, peek.remaining.min(peek.limit))
}

/// The limit of a fresh state of `params`.
pub fn limit_of<A: Algorithm>(params: A::Params, now_ms: i64) -> u64 {
    A::check_with(None, params, now_ms, 1, Mode::Peek).0.limit
}

/// What remains under the new limit, by the strategy, of `old_remaining`
/// out of `old_limit`: `KEEP` the same, clamped to the new limit; `SCALE`
/// scaled by new / old limit, rounded down; `RESET` the whole new limit.
/// Never more than `new_limit`.
pub fn remaining_after(
    on_change: OnChange,
    old_remaining: u64,
    old_limit: u64,
    new_limit: u64,
) -> u64 {
    match on_change {
        OnChange::Keep => old_remaining.min(new_limit),
        OnChange::Scale => {
            let scaled =
                u128::from(old_remaining) * u128::from(new_limit) / u128::from(old_limit.max(1));
            u64::try_from(scaled).unwrap_or(u64::MAX).min(new_limit)
        }
        OnChange::Reset => new_limit,
    }
}

/// A state of `params` at `now_ms` with `remaining` left: a fresh one from
/// which the rest of its limit is taken by the algorithm's own check (a
/// fresh one when nothing is to be taken).
pub fn with_remaining<B: Algorithm>(params: B::Params, now_ms: i64, remaining: u64) -> B {
    let fresh = B::fresh(params, now_ms);
    let take = limit_of::<B>(params, now_ms).saturating_sub(remaining);
    if take == 0 {
        return fresh;
    }
    match B::check_with(Some(&fresh), params, now_ms, take, Mode::Take) {
        (_, Some(next)) => next,
        (_, None) => fresh,
    }
}

/// `old` (of any algorithm) as a state of `params`, by the strategy, at
/// `now_ms`: what remains of it under its own parameters carried to the
/// new ones ([`remaining_after`]).
pub fn migrated<A: Algorithm, B: Algorithm>(
    old: &A,
    params: B::Params,
    now_ms: i64,
    on_change: OnChange,
) -> B {
    let (old_limit, old_remaining) = limit_and_remaining(old, now_ms);
    let new_limit = limit_of::<B>(params, now_ms);
    let remaining = remaining_after(on_change, old_remaining, old_limit, new_limit);
    with_remaining::<B>(params, now_ms, remaining)
}

#[cfg(test)]
mod tests {
    use super::super::fixed_window::{FixedWindow, FixedWindowParams};
    use super::super::gcra::Gcra;
    use super::super::sliding_counter::SlidingCounter;
    use super::super::token_bucket::{TokenBucket, TokenBucketParams};
    use super::*;
    use proptest::prelude::*;

    const T0: i64 = 1_700_000_000_000;

    fn used<A: Algorithm>(params: A::Params, taken: u64) -> A {
        with_remaining::<A>(params, T0, limit_of::<A>(params, T0).saturating_sub(taken))
    }

    #[test]
    fn scale_rounds_down_and_keep_clamps() {
        assert_eq!(remaining_after(OnChange::Scale, 7, 10, 20), 14);
        assert_eq!(remaining_after(OnChange::Scale, 7, 10, 3), 2);
        assert_eq!(remaining_after(OnChange::Keep, 7, 10, 3), 3);
        assert_eq!(remaining_after(OnChange::Keep, 7, 10, 20), 7);
        assert_eq!(remaining_after(OnChange::Reset, 0, 10, 20), 20);
        assert_eq!(
            remaining_after(OnChange::Scale, u64::MAX, 1, u64::MAX),
            u64::MAX
        );
    }

    #[test]
    fn a_token_bucket_scaled_to_twice_its_capacity_keeps_twice_its_tokens() {
        let old: TokenBucket = used(
            TokenBucketParams {
                capacity: 10,
                rate_per_s: 0.001,
            },
            3,
        );
        let new = TokenBucketParams {
            capacity: 20,
            rate_per_s: 0.001,
        };
        let scaled: TokenBucket = migrated(&old, new, T0, OnChange::Scale);
        assert_eq!(limit_and_remaining(&scaled, T0), (20, 14));
        let kept: TokenBucket = migrated(&old, new, T0, OnChange::Keep);
        assert_eq!(limit_and_remaining(&kept, T0), (20, 7));
        let reset: TokenBucket = migrated(&old, new, T0, OnChange::Reset);
        assert_eq!(reset, TokenBucket::fresh(new, T0));
    }

    #[test]
    fn a_fixed_window_moves_to_a_token_bucket_with_what_it_had_left() {
        let old: FixedWindow = used(
            FixedWindowParams {
                limit: 10,
                window_ms: 60_000,
            },
            4,
        );
        let new = TokenBucketParams {
            capacity: 5,
            rate_per_s: 0.001,
        };
        let kept: TokenBucket = migrated(&old, new, T0, OnChange::Keep);
        assert_eq!(limit_and_remaining(&kept, T0), (5, 5));
        let scaled: TokenBucket = migrated(&old, new, T0, OnChange::Scale);
        assert_eq!(limit_and_remaining(&scaled, T0), (5, 3));
    }

    fn bounds<A: Algorithm, B: Algorithm + PartialEq + std::fmt::Debug>(
        old: A::Params,
        new: B::Params,
        taken: u64,
    ) -> Result<(), TestCaseError> {
        let state: A = used(old, taken);
        let (_, before) = limit_and_remaining(&state, T0);
        let new_limit = limit_of::<B>(new, T0);
        for on_change in [OnChange::Keep, OnChange::Scale, OnChange::Reset] {
            let next: B = migrated(&state, new, T0, on_change);
            let (limit, remaining) = limit_and_remaining(&next, T0);
            prop_assert_eq!(limit, new_limit);
            prop_assert!(remaining <= new_limit, "{:?}", on_change);
            match on_change {
                OnChange::Keep => prop_assert!(remaining <= before),
                OnChange::Scale => prop_assert!(
                    remaining
                        <= remaining_after(on_change, before, limit_of::<A>(old, T0), new_limit)
                ),
                OnChange::Reset => {
                    prop_assert_eq!(&next, &B::fresh(new, T0));
                }
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn no_strategy_gives_more_than_the_new_limit_or_keep_more_than_was_left(
            old_limit in 1u64..50,
            new_limit in 1u64..50,
            taken in 0u64..60,
        ) {
            let tb = |l| TokenBucket::limit_of_params(l);
            bounds::<TokenBucket, TokenBucket>(tb(old_limit), tb(new_limit), taken)?;
            bounds::<FixedWindow, TokenBucket>(FixedWindow::limit_of(old_limit, 60_000), tb(new_limit), taken)?;
            bounds::<SlidingCounter, Gcra>(SlidingCounter::limit_of(old_limit, 60_000), Gcra::limit_of(new_limit, 60_000), taken)?;
            bounds::<Gcra, SlidingCounter>(Gcra::limit_of(old_limit, 60_000), SlidingCounter::limit_of(new_limit, 60_000), taken)?;
        }
    }

    trait LimitOf: Algorithm {
        fn limit_of_params(limit: u64) -> Self::Params {
            Self::limit_of(limit, 60_000)
        }
    }
    impl<A: Algorithm> LimitOf for A {}
}
