//! A key opened for one command ([`OpenKey`]), closed when dropped: what it
//! holds, read and written as typed values (see [`TypedValue`]), and its
//! expiry.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use redis_module::raw;

use super::api::rm;
use super::args::KeyName;
use super::ctx::{Ctx, KeyToken};
use super::types::TypedValue;

/// What a key holds, of a value type `A` and its other form `S` (the same
/// algorithm's state, penalized or not): nothing, one of them, or anything
/// else.
pub enum Holds<A, S> {
    Nothing,
    This(A),
    Sibling(S),
    Other,
}

/// A key opened for one command (`'a`), closed when dropped. It holds the
/// call's [`KeyToken`], lent mutably, while it is open: no second key is
/// opened beside it (see [`KeyToken`]).
pub struct OpenKey<'a> {
    ptr: *mut raw::RedisModuleKey,
    /// The module type and value the key was last seen holding, kept until
    /// the value is set or deleted (`&mut self`, which clear it): a check
    /// that reads the key's form twice (by a policy's name: its stamp, then
    /// the decision) asks Redis once.
    seen: Cell<Option<(*mut raw::RedisModuleType, *mut c_void)>>,
    life: PhantomData<(Ctx<'a>, &'a mut KeyToken)>,
}

impl<'a> OpenKey<'a> {
    /// Opens `name` for reading, or for reading and writing, the call's
    /// `token` lent to the key. Opening does not create the key; setting a
    /// value does.
    pub fn open(_token: &'a mut KeyToken, ctx: Ctx<'a>, name: KeyName<'a>, write: bool) -> Self {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        #[cfg(debug_assertions)]
        open_keys::opened();
        // SAFETY: `ctx` and `name` belong to the running command.
        let ptr = unsafe { rm!(RedisModule_OpenKey)(ctx.raw(), name.raw(), mode as c_int) };
        Self {
            ptr,
            seen: Cell::new(None),
            life: PhantomData,
        }
    }

    /// The key's value, if it is a value of `A`'s or `S`'s Redis type.
    fn value<A: TypedValue, S: TypedValue>(&self) -> Holds<*mut c_void, *mut c_void> {
        if self.ptr.is_null() {
            return Holds::Nothing;
        }
        let (module_type, value) = match self.seen.get() {
            Some(seen) => seen,
            None => {
                // The module type first: null unless the key holds a
                // module value, so the key's type is asked only then, to
                // tell an empty key from one of another type (one call
                // fewer on every check of a stored state).
                // SAFETY: `ptr` is an open key.
                let module_type = unsafe { rm!(RedisModule_ModuleTypeGetType)(self.ptr) };
                if module_type.is_null() {
                    // SAFETY: `ptr` is an open key.
                    let key_type = unsafe { rm!(RedisModule_KeyType)(self.ptr) };
                    return if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                        Holds::Nothing
                    } else {
                        Holds::Other
                    };
                }
                // SAFETY: `ptr` is an open key holding a module value.
                let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(self.ptr) };
                self.seen.set(Some((module_type, value)));
                (module_type, value)
            }
        };
        let is = |ty: &redis_module::native_types::RedisType| module_type == *ty.raw_type.borrow();
        let which = if is(A::redis_type()) {
            Holds::This(())
        } else if is(S::redis_type()) {
            Holds::Sibling(())
        } else {
            return Holds::Other;
        };
        match which {
            _ if value.is_null() => Holds::Nothing,
            Holds::This(()) => Holds::This(value),
            _ => Holds::Sibling(value),
        }
    }

    /// What the key holds of `A` or `S`, to read.
    pub fn holds<A: TypedValue, S: TypedValue>(&self) -> Holds<&A, &S> {
        match self.value::<A, S>() {
            // SAFETY: a value of `A`'s Redis type is an `A` (see
            // `TypedValue`); it lives while the key is open, and `&self`
            // lends nothing mutable.
            Holds::This(value) => {
                unsafe { value.cast::<A>().as_ref() }.map_or(Holds::Nothing, Holds::This)
            }
            // SAFETY: as above, for `S`.
            Holds::Sibling(value) => {
                unsafe { value.cast::<S>().as_ref() }.map_or(Holds::Nothing, Holds::Sibling)
            }
            Holds::Nothing => Holds::Nothing,
            Holds::Other => Holds::Other,
        }
    }

    /// What the key holds of `A` or `S`, to change in place.
    pub fn holds_mut<A: TypedValue, S: TypedValue>(&mut self) -> Holds<&mut A, &mut S> {
        match self.value::<A, S>() {
            // SAFETY: as in `holds`; nothing else touches the value during
            // the command, and `&mut self` lends it once.
            Holds::This(value) => {
                unsafe { value.cast::<A>().as_mut() }.map_or(Holds::Nothing, Holds::This)
            }
            // SAFETY: as above, for `S`.
            Holds::Sibling(value) => {
                unsafe { value.cast::<S>().as_mut() }.map_or(Holds::Nothing, Holds::Sibling)
            }
            Holds::Nothing => Holds::Nothing,
            Holds::Other => Holds::Other,
        }
    }

    /// Stores `value` as the key's value (the key opened for writing),
    /// replacing (and freeing) what it holds: `&mut self`, so no value read
    /// through [`OpenKey::holds`] outlives it. False when Redis refuses it.
    pub fn set_value<T: TypedValue>(&mut self, value: T) -> bool {
        if self.ptr.is_null() {
            return false;
        }
        self.seen.set(None);
        let policy_hash = crate::algorithms::State::policy_hash(&value);
        let boxed = Box::into_raw(Box::new(value)).cast::<c_void>();
        // SAFETY: `ptr` is a key opened for writing; Redis takes ownership
        // of the box and hands it back to `T`'s type's `free` callback,
        // which drops a `T` (see `TypedValue`).
        let status = unsafe {
            rm!(RedisModule_ModuleTypeSetValue)(self.ptr, *T::redis_type().raw_type.borrow(), boxed)
        };
        if status == raw::REDISMODULE_OK as c_int {
            super::types::held_one_more::<T>();
            crate::policies::count_keys(policy_hash, 1);
            true
        } else {
            // SAFETY: Redis refused the value, so the box is still ours.
            drop(unsafe { Box::from_raw(boxed.cast::<T>()) });
            false
        }
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

    /// Deletes the key (opened for writing), freeing its value: `&mut self`,
    /// so no value read through [`OpenKey::holds`] outlives it.
    pub fn delete(&mut self) {
        self.seen.set(None);
        if !self.ptr.is_null() {
            // SAFETY: `ptr` is a key opened for writing.
            unsafe { rm!(RedisModule_DeleteKey)(self.ptr) };
        }
    }

    /// Makes the key expire at `unix_ms` (at least 1).
    pub fn expire_at(&self, unix_ms: i64) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` is a key opened for writing.
            unsafe { rm!(RedisModule_SetAbsExpire)(self.ptr, unix_ms.max(1)) };
        }
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
}

impl Drop for OpenKey<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` was opened by `open` and is closed once, here.
            unsafe { rm!(RedisModule_CloseKey)(self.ptr) };
        }
        #[cfg(debug_assertions)]
        open_keys::closed();
    }
}

/// What the types say of one call into the module (its one [`KeyToken`],
/// lent to one open key at a time) held across them in debug builds (the
/// tests'): no key is opened while another is, anywhere. A callback that
/// Redis runs inside a command of the module's own (the type's `unlink`,
/// inside a delete or a key found expired as it is opened) makes its own
/// token, which the types cannot tell from the command's; opening a key
/// there would stop the server here.
#[cfg(debug_assertions)]
mod open_keys {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Keys open now (on Redis's main thread, the only one that opens keys).
    static OPEN: AtomicUsize = AtomicUsize::new(0);

    pub fn opened() {
        let before = OPEN.fetch_add(1, Relaxed);
        assert_eq!(before, 0, "a key opened while another is open");
    }

    pub fn closed() {
        OPEN.fetch_sub(1, Relaxed);
    }
}
