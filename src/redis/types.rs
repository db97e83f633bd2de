//! The custom Redis data types, one per stored state (each algorithm's, its
//! penalized form's, the leases'), made from the registry; their callbacks
//! (RDB, AOF rewrite, memory usage, digest, copy, free, unlink) are
//! `super::ffi::types`, all through the one encoding in `crate::encoding`,
//! so what an RDB file holds, what AOF rewrite emits and what replicas
//! receive are the same bytes.

use super::ffi::types::TypedValue;

pub use super::ffi::types::{every_type, horizon};
use crate::algorithms::concurrency::Leases;
use crate::algorithms::penalty::{self, Penalized, Stamp, PENALTY_TAG, STAMPED_TAG};
use crate::algorithms::registry::Listed;
use crate::algorithms::{Algorithm, Decision, Mode};

/// A value stored in Redis: its type, and how it looks now (RL.INFO).
pub trait Stored: TypedValue {
    /// The other form of the same algorithm's state: the penalized type of
    /// an algorithm's, the algorithm's of a penalized one (see
    /// `crate::algorithms::penalty`); a state with no other form names
    /// itself. A key holding it holds the same algorithm, not another type.
    type Sibling: Stored;

    /// What a request of 1 would be told at `now_ms`, changing nothing.
    fn peek(&self, now_ms: i64) -> Decision;

    /// Puts `self` into the key's value of the other form in place, when
    /// that keeps what the key must keep: an algorithm's state put into a
    /// key holding its stamped extended form goes inside it (its penalty's
    /// end and policy stamp stay). Otherwise gives `self` back, and the
    /// caller replaces the value.
    fn into_sibling(self, _sibling: &mut Self::Sibling) -> Result<(), Self> {
        Err(self)
    }
}

/// An algorithm's state, whose key may carry a penalty: its penalized form
/// (its `Stored::Sibling`, `crate::algorithms::penalty::Penalized`) and how
/// to take it apart and make it.
pub trait PenalizedStored: Stored {
    type Penalized: Stored;

    /// The state inside a penalized one, and the end of its penalty.
    fn parts(penalized: &mut Self::Penalized) -> (&mut Self, &mut i64);

    /// [`PenalizedStored::parts`], to read.
    fn parts_ref(penalized: &Self::Penalized) -> (&Self, i64);

    /// The state, penalized until `until_ms`.
    fn penalized(until_ms: i64, state: Self) -> Self::Penalized;

    /// The extended form: the state, its penalty's end (0: none) and its
    /// policy stamp.
    fn extended(until_ms: i64, stamp: Stamp, state: Self) -> Self::Penalized;

    /// The policy stamp of an extended state.
    fn stamp_of(extended: &Self::Penalized) -> Stamp;

    /// [`PenalizedStored::stamp_of`], to change in place.
    fn stamp_mut(extended: &mut Self::Penalized) -> &mut Stamp;
}

/// An algorithm looks at itself with its own check, in peek mode.
fn peek_of<A: Algorithm>(state: &A, now_ms: i64) -> Decision {
    A::check_with(Some(state), state.params(), now_ms, 1, Mode::Peek).0
}

/// An algorithm of the registry is stored as itself.
impl<A: Listed> Stored for A {
    type Sibling = Penalized<A>;
    #[inline]
    fn peek(&self, now_ms: i64) -> Decision {
        peek_of(self, now_ms)
    }
    #[inline]
    fn into_sibling(self, sibling: &mut Self::Sibling) -> Result<(), Self> {
        if sibling.stamp.is_none() {
            return Err(self);
        }
        sibling.state = self;
        Ok(())
    }
}

/// ... and in its penalized (extended) form.
impl<A: Listed> Stored for Penalized<A> {
    type Sibling = A;
    #[inline]
    fn peek(&self, now_ms: i64) -> Decision {
        let own = peek_of(&self.state, now_ms);
        match self.in_force(now_ms) {
            Some(until_ms) => penalty::denied_until(until_ms, now_ms, own),
            None => own,
        }
    }
}

impl<A: Listed> PenalizedStored for A {
    type Penalized = Penalized<A>;
    #[inline]
    fn parts(penalized: &mut Self::Penalized) -> (&mut Self, &mut i64) {
        (&mut penalized.state, &mut penalized.until_ms)
    }
    #[inline]
    fn parts_ref(penalized: &Self::Penalized) -> (&Self, i64) {
        (&penalized.state, penalized.until_ms)
    }
    #[inline]
    fn penalized(until_ms: i64, state: Self) -> Self::Penalized {
        Penalized {
            until_ms,
            stamp: Stamp::NONE,
            state,
        }
    }
    #[inline]
    fn extended(until_ms: i64, stamp: Stamp, state: Self) -> Self::Penalized {
        Penalized {
            until_ms,
            stamp,
            state,
        }
    }
    #[inline]
    fn stamp_of(extended: &Self::Penalized) -> Stamp {
        extended.stamp
    }
    #[inline]
    fn stamp_mut(extended: &mut Self::Penalized) -> &mut Stamp {
        &mut extended.stamp
    }
}

/// The concurrency limiter's leases: a state of their own, with no other
/// form.
impl Stored for Leases {
    type Sibling = Self;
    fn peek(&self, now_ms: i64) -> Decision {
        Leases::peek(self, now_ms)
    }
}

/// The stored type whose encoding starts `bytes`: its registry tag, and
/// whether it is the penalized form of that tag's algorithm (its tag after
/// the penalty's); `None` for no bytes.
pub fn stored_tag(bytes: &[u8]) -> Option<(u8, bool)> {
    match *bytes {
        [PENALTY_TAG | STAMPED_TAG, tag, ..] => Some((tag, true)),
        [tag, ..] => Some((tag, false)),
        [] => None,
    }
}
