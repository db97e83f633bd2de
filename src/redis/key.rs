//! An open Redis key holding (or about to hold) one of our types.

use std::ffi::c_int;

use std::marker::PhantomData;

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::api::{rm, Ctx, KeyName};
use super::types::Stored;
use crate::algorithms::penalty::{Penalizable, Penalized};
use crate::error::CommandError;
use crate::replay::{expiry_at, next_expiry};

/// A key opened for one command (`'a`), closed when dropped.
pub struct Key<'a> {
    ptr: *mut raw::RedisModuleKey,
    life: PhantomData<Ctx<'a>>,
}

impl<'a> Key<'a> {
    /// Opens `name` for reading, or for reading and writing. Opening does not
    /// create the key; setting a value does.
    pub fn open(ctx: Ctx<'a>, name: KeyName<'a>, write: bool) -> Self {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: `ctx` and `name` belong to the running command.
        let ptr = unsafe { rm!(RedisModule_OpenKey)(ctx.raw(), name.raw(), mode as c_int) };
        Self {
            ptr,
            life: PhantomData,
        }
    }

    /// What the key holds of `A`'s algorithm: nothing, an `A`, or `A`'s
    /// sibling (its other form, see `Stored::sibling_type`); `WRONGTYPE`
    /// when it holds anything else.
    fn holds<A: Stored>(&self) -> Result<Holds, CommandError> {
        if self.ptr.is_null() {
            return Ok(Holds::Nothing);
        }
        // SAFETY: `ptr` is an open key.
        let key_type = unsafe { rm!(RedisModule_KeyType)(self.ptr) };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(Holds::Nothing);
        }
        if key_type != raw::REDISMODULE_KEYTYPE_MODULE as c_int {
            return Err(CommandError::wrong_type());
        }
        // SAFETY: `ptr` is an open key holding a module value.
        let module_type = unsafe { rm!(RedisModule_ModuleTypeGetType)(self.ptr) };
        let is = |ty: &RedisType| module_type == *ty.raw_type.borrow();
        if is(A::redis_type()) {
            Ok(Holds::This)
        } else if A::sibling_type().is_some_and(is) {
            Ok(Holds::Sibling)
        } else {
            Err(CommandError::wrong_type())
        }
    }

    /// The value the key holds, as a `T` (`A` or its sibling, as
    /// [`Key::holds`] said).
    ///
    /// # Safety
    /// The key must hold a value of `T`'s type.
    unsafe fn raw_value<T>(&mut self) -> Option<&mut T> {
        // SAFETY: per the caller, the key holds a value of T's type, which
        // only this module creates, always from a `Box<T>`; it lives while
        // the key is open and nothing else touches it during the command.
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(self.ptr) }.cast::<T>();
        // SAFETY: non-null values of our types are valid `T`s (see above).
        unsafe { value.as_mut() }
    }

    /// The state the key holds: `None` when it does not exist, `WRONGTYPE`
    /// when it holds anything but an `A` (another algorithm's state
    /// included). For an algorithm's state, whose key may carry a penalty,
    /// see [`Key::held`].
    pub fn value<A: Stored>(&mut self) -> Result<Option<&mut A>, CommandError> {
        match self.holds::<A>()? {
            // SAFETY: the key holds an `A`.
            Holds::This => Ok(unsafe { self.raw_value::<A>() }),
            Holds::Nothing => Ok(None),
            Holds::Sibling => Err(CommandError::wrong_type()),
        }
    }

    /// The algorithm's state the key holds, and the end of its latest
    /// penalty when it has had one: `None` when the key does not exist,
    /// `WRONGTYPE` when it holds anything but `A`'s algorithm. (`A` is an
    /// algorithm of the registry, whose sibling is its penalized form.)
    pub fn held<A: Stored + Penalizable>(&mut self) -> Result<Option<Held<'_, A>>, CommandError> {
        Ok(match self.holds::<A>()? {
            Holds::Nothing => None,
            // SAFETY: the key holds an `A`.
            Holds::This => unsafe { self.raw_value::<A>() }.map(|state| Held {
                state,
                until_ms: None,
            }),
            // SAFETY: the key holds `A`'s sibling, its penalized form.
            Holds::Sibling => unsafe { self.raw_value::<Penalized<A>>() }.map(|p| Held {
                state: &mut p.state,
                until_ms: Some(p.until_ms),
            }),
        })
    }

    /// Gives the key, which holds `A`'s algorithm, a penalty until
    /// `until_ms`: the end is written in place in a penalized state; a
    /// state that never had a penalty takes its penalized form (a value of
    /// the penalized type, the state moved into it), keeping the key's
    /// expiry. The key must be open for writing.
    pub fn penalize<A: Stored + Penalizable>(
        &mut self,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<(), CommandError> {
        match self.holds::<A>()? {
            Holds::Sibling => {
                // SAFETY: the key holds `A`'s penalized form.
                if let Some(penalized) = unsafe { self.raw_value::<Penalized<A>>() } {
                    penalized.until_ms = until_ms;
                }
                Ok(())
            }
            Holds::This => {
                // SAFETY: the key holds an `A`.
                let Some(slot) = (unsafe { self.raw_value::<A>() }) else {
                    return Ok(());
                };
                // The state leaves the old value for a fresh one (cheap for
                // every algorithm), which Redis frees when the key's value
                // is replaced: no copy of a long sliding log.
                let fresh = A::fresh(slot.params(), now_ms);
                let state = std::mem::replace(slot, fresh);
                let penalized_type = A::sibling_type().ok_or_else(CommandError::wrong_type)?;
                self.replace(penalized_type, Penalized { until_ms, state })
            }
            Holds::Nothing => Err(CommandError::invalid_state("no state to penalize")),
        }
    }

    /// Sets `value` in place of the key's value of another type, keeping
    /// the key's expiry (setting a value deletes the key first).
    fn replace<T>(&self, ty: &RedisType, value: T) -> Result<(), CommandError> {
        let expires_at = self.expires_at();
        self.set_as(ty, value)?;
        if let Some(at) = expires_at {
            self.expire_at(at);
        }
        Ok(())
    }

    /// The state the key holds if it is an `A`, to read; `None` when it is
    /// empty or holds anything else.
    pub fn get<A: Stored>(&self) -> Option<&A> {
        if !matches!(self.holds::<A>(), Ok(Holds::This)) {
            return None;
        }
        // SAFETY: as in `value`; shared, since `&self` lends nothing mutable.
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(self.ptr) }.cast::<A>();
        // SAFETY: non-null values of our type are valid `A`s (see `value`).
        unsafe { value.as_ref() }
    }

    /// Whether the key holds nothing.
    pub fn is_empty(&self) -> bool {
        // SAFETY: `ptr` is null or an open key.
        self.ptr.is_null()
            || unsafe { rm!(RedisModule_KeyType)(self.ptr) }
                == raw::REDISMODULE_KEYTYPE_EMPTY as c_int
    }

    /// Milliseconds until the key expires; -1 when it has no expiry.
    pub fn ttl_ms(&self) -> i64 {
        if self.ptr.is_null() {
            return -1;
        }
        // SAFETY: `ptr` is an open key.
        let ttl = unsafe { rm!(RedisModule_GetExpire)(self.ptr) };
        if ttl < 0 {
            -1
        } else {
            ttl
        }
    }

    /// Deletes the key (opened for writing).
    pub fn delete(&self) {
        // SAFETY: `ptr` is a key opened for writing.
        unsafe { rm!(RedisModule_DeleteKey)(self.ptr) };
    }

    /// Stores `value` in a key that holds nothing (or an `A`, which is freed).
    pub fn set<A: Stored>(&self, value: A) -> Result<(), CommandError> {
        self.set_as(A::redis_type(), value)
    }

    /// Stores `value` as a value of the type `ty`, which must be the type
    /// whose callbacks take a `T` (its own, or `T`'s sibling's for a
    /// penalized state: see `Stored::sibling_type`).
    fn set_as<T>(&self, ty: &RedisType, value: T) -> Result<(), CommandError> {
        let boxed = Box::into_raw(Box::new(value)).cast();
        // SAFETY: `ptr` is a key opened for writing; Redis takes ownership of
        // the box and hands it back to the type's `free` callback, which
        // drops a `T` (per the caller).
        let status =
            unsafe { rm!(RedisModule_ModuleTypeSetValue)(self.ptr, *ty.raw_type.borrow(), boxed) };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so the box is still ours.
            drop(unsafe { Box::from_raw(boxed.cast::<T>()) });
            Err(CommandError::wrong_type())
        }
    }

    /// Puts `state` in the key: in place of the `A` it holds, in place of
    /// its sibling (its algorithm's other form, keeping the expiry), or as a
    /// new value when it holds nothing (WRONGTYPE when it holds anything
    /// else).
    pub fn put<A: Stored>(&mut self, state: A) -> Result<(), CommandError> {
        match self.holds::<A>()? {
            // SAFETY: the key holds an `A`.
            Holds::This => match unsafe { self.raw_value::<A>() } {
                Some(slot) => *slot = state,
                None => self.set(state)?,
            },
            Holds::Sibling => self.replace(A::redis_type(), state)?,
            Holds::Nothing => self.set(state)?,
        }
        Ok(())
    }

    /// Makes the key expire at `unix_ms` (an absolute time, so a replica and
    /// an AOF replay set the very same moment).
    pub fn expire_at(&self, unix_ms: i64) {
        // SAFETY: `ptr` is a key opened for writing that holds a value.
        unsafe { rm!(RedisModule_SetAbsExpire)(self.ptr, unix_ms.max(1)) };
    }

    /// When the key expires (Unix ms), if it does.
    pub fn expires_at(&self) -> Option<i64> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr` is an open key.
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.ptr) };
        (at >= 0).then_some(at)
    }

    /// Sets the key's expiry to the end of its band after `fresh_at_ms`
    /// (`crate::replay::expiry_at`). The key must be open for writing and
    /// hold a value.
    pub fn expire_fresh(&self, fresh_at_ms: i64, slack_ms: u32) {
        self.expire_at(expiry_at(fresh_at_ms, slack_ms));
    }

    /// Puts the key's expiry in its band after `fresh_at_ms` (see
    /// `crate::replay::next_expiry`). Returns whether it moved. The key
    /// must be open for writing and hold a value.
    pub fn settle_expiry(&self, fresh_at_ms: i64, slack_ms: u32) -> bool {
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
    /// check that must move it anyway.
    pub fn settle_expiry_moved(&self, before_ms: i64, after_ms: i64, slack_ms: u32) -> bool {
        if after_ms.saturating_sub(before_ms) > i64::from(slack_ms) {
            self.expire_fresh(after_ms, slack_ms);
            true
        } else {
            self.settle_expiry(after_ms, slack_ms)
        }
    }
}

/// What a key holds, of one algorithm.
enum Holds {
    Nothing,
    This,
    Sibling,
}

/// An algorithm's state as a key holds it, and the end of the key's latest
/// penalty, when it has had one.
pub struct Held<'k, A> {
    pub state: &'k mut A,
    pub until_ms: Option<i64>,
}

impl<A: Stored> Held<'_, A> {
    /// When the key is as good as new: its state fresh, its penalty over.
    pub fn fresh_at_ms(&self) -> i64 {
        let fresh_at_ms = self.state.fresh_at_ms();
        self.until_ms
            .map_or(fresh_at_ms, |until| fresh_at_ms.max(until))
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` was opened by `open` and is closed once, here.
            unsafe { rm!(RedisModule_CloseKey)(self.ptr) };
        }
    }
}
