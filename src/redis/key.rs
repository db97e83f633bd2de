//! An open Redis key holding (or about to hold) one of our types: what it
//! holds of an algorithm (its state, penalized or not), storing a state in
//! place or anew, a penalty's start, and the expiry's band. The key itself
//! is `super::ffi::key::OpenKey`.
//!
//! A key opened for reading ([`ReadKey`]) and one opened for writing
//! ([`WriteKey`]) are different types: only a write key changes the value
//! or the expiry, or lends the value mutably. Everything that replaces or
//! frees the value (`delete`, `set`, `put`, `penalize`) takes `&mut self`,
//! so a state read from the key cannot be used after it. Opening a key
//! borrows the command's [`KeyToken`] mutably for as long as the key is
//! open, so no two keys are open at once for one command (two opens of one
//! name would lend its state twice); and a token is made only by the FFI
//! room, one for each call of Redis into the module (a command, a
//! callback), and lent to the code it runs, so a command cannot make a
//! second one. The compile-fail examples in `crate::typed_keys` show all
//! four.

use std::marker::PhantomData;

pub use super::ffi::key::Holds;
use super::ffi::key::OpenKey;
use super::ffi::types::TypedValue;
pub use super::ffi::KeyToken;
use super::ffi::{Ctx, KeyName};
use super::types::{PenalizedStored, Stored};
use crate::algorithms::expiry::{expiry_at, next_expiry};
use crate::algorithms::penalty::Stamp;
use crate::algorithms::{Algorithm, State};
use crate::error::CommandError;

/// A key opened for reading: [`Key::read`].
pub enum Read {}

/// A key opened for reading and writing: [`Key::write`].
pub enum Write {}

/// What a [`Key`] is made of: the server's open key (`OpenKey`), or, in
/// the engine's unit tests, a key of an in-memory store. The primitives
/// only; every rule of storing (siblings, penalties, the expiry's band) is
/// [`Key`]'s, shared by both.
pub trait RawKey {
    /// What the key holds of `A` or `S`, to read.
    fn holds<A: TypedValue, S: TypedValue>(&self) -> Holds<&A, &S>;
    /// What the key holds of `A` or `S`, to change in place.
    fn holds_mut<A: TypedValue, S: TypedValue>(&mut self) -> Holds<&mut A, &mut S>;
    /// Stores `value` in place of what the key holds (its expiry gone with
    /// it): false when refused.
    fn set_value<T: TypedValue>(&mut self, value: T) -> bool;
    fn is_empty(&self) -> bool;
    /// Milliseconds until the key expires; -1 when it has no expiry.
    fn ttl_ms(&self) -> i64;
    fn delete(&mut self);
    /// Makes the key expire at `unix_ms`, if it exists.
    fn expire_at(&mut self, unix_ms: i64);
    fn expires_at(&self) -> Option<i64>;
}

impl RawKey for OpenKey<'_> {
    fn holds<A: TypedValue, S: TypedValue>(&self) -> Holds<&A, &S> {
        OpenKey::holds(self)
    }
    fn holds_mut<A: TypedValue, S: TypedValue>(&mut self) -> Holds<&mut A, &mut S> {
        OpenKey::holds_mut(self)
    }
    fn set_value<T: TypedValue>(&mut self, value: T) -> bool {
        OpenKey::set_value(self, value)
    }
    fn is_empty(&self) -> bool {
        OpenKey::is_empty(self)
    }
    fn ttl_ms(&self) -> i64 {
        OpenKey::ttl_ms(self)
    }
    fn delete(&mut self) {
        OpenKey::delete(self);
    }
    fn expire_at(&mut self, unix_ms: i64) {
        OpenKey::expire_at(self, unix_ms);
    }
    fn expires_at(&self) -> Option<i64> {
        OpenKey::expires_at(self)
    }
}

/// A key opened for one command, closed when dropped; `'k` is the borrow of
/// the command's [`KeyToken`] it holds while open; `M` says how it was
/// opened ([`Read`] or [`Write`]); `R` is what it is made of (the server's
/// key, but in the engine's unit tests).
pub struct Key<'k, M, R = OpenKey<'k>> {
    key: R,
    access: PhantomData<(M, &'k mut KeyToken)>,
}

/// A key opened for reading.
pub type ReadKey<'k> = Key<'k, Read>;

/// A key opened for reading and writing.
pub type WriteKey<'k> = Key<'k, Write>;

impl<'k> Key<'k, Read> {
    /// Opens `name` for reading, the command's `token` lent to the key.
    pub fn read<'a: 'k>(token: &'k mut KeyToken, ctx: Ctx<'a>, name: KeyName<'a>) -> Self {
        Self::opened(OpenKey::open(token, ctx, name, false))
    }
}

impl<'k, M> Key<'k, M> {
    /// A key of the server's `raw`, which the caller opened as `M` says
    /// and which holds the command's token while it is open: the way a
    /// server's key is made (the engine's store of the server's keys,
    /// `super::engine::store`, opens its keys here).
    #[inline(always)]
    pub(crate) fn opened(raw: OpenKey<'k>) -> Self {
        Self {
            key: raw,
            access: PhantomData,
        }
    }
}

impl<'k, M, R: RawKey> Key<'k, M, R> {
    /// A key of `raw`, which the caller opened as `M` says, holding the
    /// command's `token` while it is open: the way a key of the engine's
    /// unit tests is made (`super::engine::memory`).
    #[cfg(test)]
    #[inline(always)]
    pub(crate) fn made_of(_token: &'k mut KeyToken, raw: R) -> Self {
        Self {
            key: raw,
            access: PhantomData,
        }
    }

    /// The state the key holds if it is an `A`, to read; `None` when it is
    /// empty or holds anything else.
    pub fn get<A: Stored>(&self) -> Option<&A> {
        match self.key.holds::<A, A::Sibling>() {
            Holds::This(state) => Some(state),
            _ => None,
        }
    }

    /// [`Key::held`], to read only.
    pub fn held_ref<A: PenalizedStored>(&self) -> Result<Option<HeldRef<'_, A>>, CommandError> {
        Ok(match self.key.holds::<A, A::Penalized>() {
            Holds::Nothing => None,
            Holds::This(state) => Some(HeldRef {
                state,
                until_ms: None,
            }),
            Holds::Sibling(penalized) => {
                let (state, until_ms) = A::parts_ref(penalized);
                Some(HeldRef {
                    state,
                    until_ms: Some(until_ms),
                })
            }
            Holds::Other => return Err(CommandError::wrong_type()),
        })
    }

    /// What the key holds of `A`: nothing, its plain form, its extended
    /// (penalized, stamped) form, or anything else.
    pub fn holds_form<A: PenalizedStored>(&self) -> Holds<&A, &A::Penalized> {
        self.key.holds::<A, A::Penalized>()
    }

    /// When the key, holding `A`'s algorithm, is as good as new: its
    /// state fresh, its penalty (if it has had one) over; `None` when it
    /// does not exist, `WRONGTYPE` when it holds anything else. What
    /// [`HeldRef::fresh_at_ms`] says, read off the stored value itself
    /// (a penalized one knows its end), with no `Option` of the end whose
    /// undefined payload the optimiser may branch over (memcheck reports
    /// that jump: `make test-valgrind`).
    pub fn fresh_at_ms<A: PenalizedStored>(&self) -> Result<Option<i64>, CommandError> {
        Ok(match self.key.holds::<A, A::Penalized>() {
            Holds::Nothing => None,
            Holds::This(state) => Some(state.fresh_at_ms()),
            Holds::Sibling(penalized) => Some(penalized.fresh_at_ms()),
            Holds::Other => return Err(CommandError::wrong_type()),
        })
    }

    /// Whether the key holds nothing.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// Milliseconds until the key expires; -1 when it has no expiry.
    pub fn ttl_ms(&self) -> i64 {
        self.key.ttl_ms()
    }

    /// When the key expires (Unix ms), if it does.
    pub fn expires_at(&self) -> Option<i64> {
        self.key.expires_at()
    }
}

impl<'k> Key<'k, Write> {
    /// Opens `name` for reading and writing, the command's `token` lent to
    /// the key. Opening does not create the key; setting a value does.
    pub fn write<'a: 'k>(token: &'k mut KeyToken, ctx: Ctx<'a>, name: KeyName<'a>) -> Self {
        Self::opened(OpenKey::open(token, ctx, name, true))
    }
}

impl<R: RawKey> Key<'_, Write, R> {
    /// The state the key holds: `None` when it does not exist, `WRONGTYPE`
    /// when it holds anything but an `A` (another algorithm's state
    /// included). For an algorithm's state, whose key may carry a penalty,
    /// see [`Key::held`].
    pub fn value<A: Stored>(&mut self) -> Result<Option<&mut A>, CommandError> {
        match self.key.holds_mut::<A, A::Sibling>() {
            Holds::This(state) => Ok(Some(state)),
            Holds::Nothing => Ok(None),
            Holds::Sibling(_) | Holds::Other => Err(CommandError::wrong_type()),
        }
    }

    /// The algorithm's state the key holds, and the end of its latest
    /// penalty when it has had one: `None` when the key does not exist,
    /// `WRONGTYPE` when it holds anything but `A`'s algorithm. (`A` is an
    /// algorithm of the registry, whose sibling is its penalized form.)
    pub fn held<A: PenalizedStored>(&mut self) -> Result<Option<Held<'_, A>>, CommandError> {
        Ok(match self.key.holds_mut::<A, A::Penalized>() {
            Holds::Nothing => None,
            Holds::This(state) => Some(Held {
                state,
                until_ms: None,
            }),
            Holds::Sibling(penalized) => {
                let (state, until_ms) = A::parts(penalized);
                Some(Held {
                    state,
                    until_ms: Some(*until_ms),
                })
            }
            Holds::Other => return Err(CommandError::wrong_type()),
        })
    }

    /// Gives the key, which holds `A`'s algorithm, a penalty until
    /// `until_ms`: the end is written in place in a penalized state; a
    /// state that never had a penalty takes its penalized form (a value of
    /// the penalized type, the state moved into it), keeping the key's
    /// expiry. The key must be open for writing.
    pub fn penalize<A: PenalizedStored + Algorithm>(
        &mut self,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<(), CommandError> {
        match self.key.holds_mut::<A, A::Penalized>() {
            Holds::Sibling(penalized) => {
                *A::parts(penalized).1 = until_ms;
                Ok(())
            }
            Holds::This(slot) => {
                // The state leaves the old value for a fresh one (cheap for
                // every algorithm), which Redis frees when the key's value
                // is replaced: no copy of a long sliding log.
                let fresh = A::fresh(slot.params(), now_ms);
                let state = std::mem::replace(slot, fresh);
                self.replace(A::penalized(until_ms, state))
            }
            Holds::Nothing => Err(CommandError::invalid_state("no state to penalize")),
            Holds::Other => Err(CommandError::wrong_type()),
        }
    }

    /// Stamps the key, which holds `A`'s algorithm, with `stamp`: in place
    /// in an extended state; a plain state takes its extended form (no
    /// penalty), keeping the key's expiry.
    pub fn stamp<A: PenalizedStored + Algorithm>(
        &mut self,
        stamp: Stamp,
        now_ms: i64,
    ) -> Result<(), CommandError> {
        match self.key.holds_mut::<A, A::Penalized>() {
            Holds::Sibling(extended) => {
                let own = A::stamp_mut(extended);
                crate::policies::move_key(own.policy, stamp.policy);
                *own = stamp;
                Ok(())
            }
            Holds::This(slot) => {
                let fresh = A::fresh(slot.params(), now_ms);
                let state = std::mem::replace(slot, fresh);
                self.replace(A::extended(0, stamp, state))
            }
            Holds::Nothing => Err(CommandError::invalid_state("no state to stamp")),
            Holds::Other => Err(CommandError::wrong_type()),
        }
    }

    /// Sets `value` in place of the key's value of another type, keeping
    /// the key's expiry (setting a value deletes the key first).
    fn replace<T: Stored>(&mut self, value: T) -> Result<(), CommandError> {
        let expires_at = self.expires_at();
        self.set(value)?;
        if let Some(at) = expires_at {
            self.expire_at(at);
        }
        Ok(())
    }

    /// Deletes the key. `&mut self`: nothing read from the value
    /// ([`Key::get`]) outlives it.
    pub fn delete(&mut self) {
        self.key.delete();
    }

    /// Stores `value` in a key that holds nothing (or a value it replaces,
    /// which is freed), as a value of its own type.
    /// `&mut self`: nothing read from the value it replaces outlives it.
    pub fn set<A: Stored>(&mut self, value: A) -> Result<(), CommandError> {
        // Redis removes the value it replaces first: that is not a removal
        // for the waiters of this key (see `writing_own`).
        OWN_WRITE.with(|own| own.set(true));
        let stored = self.key.set_value(value);
        OWN_WRITE.with(|own| own.set(false));
        if stored {
            Ok(())
        } else {
            Err(CommandError::wrong_type())
        }
    }

    /// Puts `state` in the key: in place of the `A` it holds, in place of
    /// its sibling (its algorithm's other form, keeping the expiry), or as a
    /// new value when it holds nothing (WRONGTYPE when it holds anything
    /// else).
    pub fn put<A: Stored>(&mut self, state: A) -> Result<(), CommandError> {
        match self.key.holds_mut::<A, A::Sibling>() {
            Holds::This(slot) => {
                crate::policies::move_key(slot.policy_hash(), state.policy_hash());
                *slot = state;
            }
            Holds::Sibling(_) => self.replace(state)?,
            Holds::Nothing => self.set(state)?,
            Holds::Other => return Err(CommandError::wrong_type()),
        }
        Ok(())
    }

    /// [`Key::put`] of a state a check decided: into the key's stamped
    /// extended form when it holds one (its penalty's end and policy stamp
    /// stay; see `Stored::into_sibling`).
    pub fn put_decided<A: Stored>(&mut self, state: A) -> Result<(), CommandError> {
        match self.key.holds_mut::<A, A::Sibling>() {
            Holds::This(slot) => {
                crate::policies::move_key(slot.policy_hash(), state.policy_hash());
                *slot = state;
            }
            Holds::Sibling(sibling) => {
                if let Err(state) = state.into_sibling(sibling) {
                    self.replace(state)?;
                }
            }
            Holds::Nothing => self.set(state)?,
            Holds::Other => return Err(CommandError::wrong_type()),
        }
        Ok(())
    }

    /// Makes the key expire at `unix_ms` (an absolute time, so a replica and
    /// an AOF replay set the very same moment).
    pub fn expire_at(&mut self, unix_ms: i64) {
        self.key.expire_at(unix_ms);
    }

    /// Sets the key's expiry to the end of its band after `fresh_at_ms`
    /// (`crate::algorithms::expiry::expiry_at`). The key must be open for writing and
    /// hold a value.
    pub fn expire_fresh(&mut self, fresh_at_ms: i64, slack_ms: u32) {
        self.expire_at(expiry_at(fresh_at_ms, slack_ms));
    }

    /// Puts the key's expiry in its band after `fresh_at_ms` (see
    /// `crate::algorithms::expiry::next_expiry`). Returns whether it moved. The key
    /// must be open for writing and hold a value. Inlined always: every
    /// take whose state's fresh moment barely moved (a window's count)
    /// reads and keeps the expiry here.
    #[inline(always)]
    pub fn settle_expiry(&mut self, fresh_at_ms: i64, slack_ms: u32) -> bool {
        match next_expiry(fresh_at_ms, self.expires_at(), slack_ms) {
            Some(at) => {
                self.expire_at(at);
                true
            }
            None => false,
        }
    }

    /// [`Key::settle_expiry`] for a state whose fresh moment moved from
    /// `before_ms` to `after_ms`. A move by more than the slack leaves no
    /// expiry in the band it had (at most `before_ms + slack_ms`) valid, so
    /// the expiry is set without being read first: a lookup saved on every
    /// check that must move it anyway. Inlined always (a plain `#[inline]`
    /// left it a call with its prologue on every check).
    #[inline(always)]
    pub fn settle_expiry_moved(&mut self, before_ms: i64, after_ms: i64, slack_ms: u32) -> bool {
        if after_ms.saturating_sub(before_ms) > i64::from(slack_ms) {
            self.expire_fresh(after_ms, slack_ms);
            true
        } else {
            self.settle_expiry(after_ms, slack_ms)
        }
    }
}

/// An algorithm's state as a key holds it, to read, and the end of the
/// key's latest penalty, when it has had one.
pub struct HeldRef<'k, A> {
    pub state: &'k A,
    pub until_ms: Option<i64>,
}

impl<A: Stored> HeldRef<'_, A> {
    /// When the key is as good as new: its state fresh, its penalty over.
    #[inline]
    pub fn fresh_at_ms(&self) -> i64 {
        let fresh_at_ms = self.state.fresh_at_ms();
        self.until_ms
            .map_or(fresh_at_ms, |until| fresh_at_ms.max(until))
    }
}

/// An algorithm's state as a key holds it, to change in place, and the end
/// of the key's latest penalty, when it has had one.
pub struct Held<'k, A> {
    pub state: &'k mut A,
    pub until_ms: Option<i64>,
}

impl<A: Stored> Held<'_, A> {
    /// When the key is as good as new: its state fresh, its penalty over.
    #[inline]
    pub fn fresh_at_ms(&self) -> i64 {
        let fresh_at_ms = self.state.fresh_at_ms();
        self.until_ms
            .map_or(fresh_at_ms, |until| fresh_at_ms.max(until))
    }
}

thread_local! {
    /// Set while the module itself replaces a key's value.
    static OWN_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the value being removed now is one the module is replacing
/// itself (a state stored over another), rather than a key leaving.
pub fn writing_own() -> bool {
    OWN_WRITE.with(std::cell::Cell::get)
}
