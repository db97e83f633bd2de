//! An open Redis key holding (or about to hold) one of our types.

use std::ffi::c_int;

use std::marker::PhantomData;

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::api::{rm, Ctx, KeyName};
use super::types::Stored;
use crate::error::CommandError;
use crate::replay::next_expiry;

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

    fn holds(&self, ty: &RedisType) -> Result<bool, CommandError> {
        if self.ptr.is_null() {
            return Ok(false);
        }
        // SAFETY: `ptr` is an open key.
        let key_type = unsafe { rm!(RedisModule_KeyType)(self.ptr) };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(false);
        }
        // SAFETY: `ptr` is an open key; for a non-module key Redis answers null.
        let module_type = unsafe { rm!(RedisModule_ModuleTypeGetType)(self.ptr) };
        if key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && module_type == *ty.raw_type.borrow()
        {
            Ok(true)
        } else {
            Err(CommandError::wrong_type())
        }
    }

    /// The state the key holds: `None` when it does not exist, `WRONGTYPE`
    /// when it holds anything but an `A` (another algorithm's state included).
    pub fn value<A: Stored>(&mut self) -> Result<Option<&mut A>, CommandError> {
        if !self.holds(A::redis_type())? {
            return Ok(None);
        }
        // SAFETY: the key holds a value of A's type, which only this module
        // creates, always from a `Box<A>`; it lives while the key is open and
        // nothing else touches it during the command.
        let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(self.ptr) }.cast::<A>();
        // SAFETY: non-null values of our type are valid `A`s (see above).
        Ok(unsafe { value.as_mut() })
    }

    /// The state the key holds if it is an `A`, to read; `None` when it is
    /// empty or holds anything else.
    pub fn get<A: Stored>(&self) -> Option<&A> {
        if !self.holds(A::redis_type()).ok()? {
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
        let boxed = Box::into_raw(Box::new(value)).cast();
        // SAFETY: `ptr` is a key opened for writing; Redis takes ownership of
        // the box and hands it back to our `free` callback.
        let status = unsafe {
            rm!(RedisModule_ModuleTypeSetValue)(self.ptr, *A::redis_type().raw_type.borrow(), boxed)
        };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so the box is still ours.
            drop(unsafe { Box::from_raw(boxed.cast::<A>()) });
            Err(CommandError::wrong_type())
        }
    }

    /// Puts `state` in the key: in place of the `A` it holds, or as a new
    /// value when it holds nothing (WRONGTYPE when it holds anything else).
    pub fn put<A: Stored>(&mut self, state: A) -> Result<(), CommandError> {
        match self.value::<A>()? {
            Some(slot) => *slot = state,
            None => self.set(state)?,
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
            self.expire_at(after_ms.saturating_add(i64::from(slack_ms)));
            true
        } else {
            self.settle_expiry(after_ms, slack_ms)
        }
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
