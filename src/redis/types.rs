//! The custom Redis data types, one per stored state (each algorithm's, its
//! penalized form's, the leases'), made from the registry; their callbacks
//! (RDB, AOF rewrite, memory usage, digest, copy, free, unlink) are
//! `super::ffi::types`, all through the one encoding in `crate::encoding`,
//! so what an RDB file holds, what AOF rewrite emits and what replicas
//! receive are the same bytes.

use redis_module::native_types::RedisType;

use super::ffi::types::{value_type, TypedValue};

pub use super::ffi::types::horizon;
use crate::algorithms::penalty::{self, Penalized, Stamp, PENALTY_TAG, STAMPED_TAG};
use crate::algorithms::{Algorithm, Decision, Mode, Registered};

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

/// Each registered state's Redis type (a static of its own, named by the
/// registry), the list of them all, and the dispatch on a state's tag.
macro_rules! stored_types {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal $(, $more:tt)*;)* }
        others { $($otag:literal $oty:ident: $omodule:ident, $oname:literal, $otype_name:literal $(, $omore:tt)*;)* }
    ) => {
        $(value_type!(crate::algorithms::$module::$ty, $type_name);
        value_type!(
            Penalized<crate::algorithms::$module::$ty>,
            <Penalized<crate::algorithms::$module::$ty> as Registered>::TYPE_NAME
        );
        impl PenalizedStored for crate::algorithms::$module::$ty {
            type Penalized = Penalized<crate::algorithms::$module::$ty>;
            fn parts(penalized: &mut Self::Penalized) -> (&mut Self, &mut i64) {
                (&mut penalized.state, &mut penalized.until_ms)
            }
            fn parts_ref(penalized: &Self::Penalized) -> (&Self, i64) {
                (&penalized.state, penalized.until_ms)
            }
            fn penalized(until_ms: i64, state: Self) -> Self::Penalized {
                Penalized { until_ms, stamp: Stamp::NONE, state }
            }
            fn extended(until_ms: i64, stamp: Stamp, state: Self) -> Self::Penalized {
                Penalized { until_ms, stamp, state }
            }
            fn stamp_of(extended: &Self::Penalized) -> Stamp {
                extended.stamp
            }
            fn stamp_mut(extended: &mut Self::Penalized) -> &mut Stamp {
                &mut extended.stamp
            }
        }
        impl Stored for crate::algorithms::$module::$ty {
            type Sibling = Penalized<crate::algorithms::$module::$ty>;
            fn peek(&self, now_ms: i64) -> Decision {
                peek_of(self, now_ms)
            }
            fn into_sibling(self, sibling: &mut Self::Sibling) -> Result<(), Self> {
                if sibling.stamp.is_none() {
                    return Err(self);
                }
                sibling.state = self;
                Ok(())
            }
        }
        impl Stored for Penalized<crate::algorithms::$module::$ty> {
            type Sibling = crate::algorithms::$module::$ty;
            fn peek(&self, now_ms: i64) -> Decision {
                let own = peek_of(&self.state, now_ms);
                match self.in_force(now_ms) {
                    Some(until_ms) => penalty::denied_until(until_ms, now_ms, own),
                    None => own,
                }
            }
        })*
        $(value_type!(crate::algorithms::$omodule::$oty, $otype_name);
        impl Stored for crate::algorithms::$omodule::$oty {
            type Sibling = Self;
            fn peek(&self, now_ms: i64) -> Decision {
                crate::algorithms::$omodule::$oty::peek(self, now_ms)
            }
        })*

        /// Every type the module stores, to create at load time: each
        /// algorithm's, its penalized form's, then the others.
        pub fn every_type() -> [&'static RedisType; 2 * [$($tag,)*].len() + [$($otag,)*].len()] {
            [
                $(<crate::algorithms::$module::$ty as TypedValue>::redis_type(),)*
                $(<Penalized<crate::algorithms::$module::$ty> as TypedValue>::redis_type(),)*
                $(<crate::algorithms::$omodule::$oty as TypedValue>::redis_type(),)*
            ]
        }

        /// Calls `visitor` with the stored type whose tag starts `bytes`
        /// (for a penalized state, the algorithm's tag after the penalty's);
        /// `None` for a tag no type has.
        pub fn on_tag<V: StateVisitor>(bytes: &[u8], visitor: V) -> Option<V::Out> {
            match *bytes {
                [PENALTY_TAG | STAMPED_TAG, tag, ..] => match tag {
                    $($tag => Some(visitor.visit::<Penalized<crate::algorithms::$module::$ty>>()),)*
                    _ => None,
                },
                $([$tag, ..] => Some(visitor.visit::<crate::algorithms::$module::$ty>()),)*
                $([$otag, ..] => Some(visitor.visit::<crate::algorithms::$omodule::$oty>()),)*
                _ => None,
            }
        }

        /// Calls `visitor` with each stored type in turn, until one answers.
        pub fn first_of<V: StateVisitor<Out = Option<R>> + Copy, R>(visitor: V) -> Option<R> {
            None
                $(.or_else(|| visitor.visit::<crate::algorithms::$module::$ty>()))*
                $(.or_else(|| visitor.visit::<Penalized<crate::algorithms::$module::$ty>>()))*
                $(.or_else(|| visitor.visit::<crate::algorithms::$omodule::$oty>()))*
        }
    };
}
crate::registry!(stored_types);

/// Something done with one stored type, chosen at run time (by a tag, or by
/// what a key holds).
pub trait StateVisitor {
    type Out;
    fn visit<A: Stored>(self) -> Self::Out;
}
