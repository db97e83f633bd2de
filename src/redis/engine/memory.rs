//! The engine over keys in memory (test code only): [`Memory`] is a
//! [`Store`] whose keys live in a map, with Redis's rules for what the
//! engine relies on (a value set in place of another loses its expiry; a
//! key past its expiry is gone when opened; writes that need memory
//! refused while it is full),
//! so the engine's own code (`all`, `apply`) is unit-tested without a
//! server.

use std::any::Any;
use std::cell::{Cell, RefCell, RefMut};
use std::collections::BTreeMap;

use super::super::ffi::key::Holds;
use super::super::ffi::types::TypedValue;
use super::super::key::{Key, KeyToken, RawKey, Read, Write};
use super::store::Store;
use crate::error::CommandError;

/// A stored value: any of the module's types, its bytes readable.
trait Value: Any {
    fn bytes(&self) -> Vec<u8>;
    fn fresh_at_ms(&self) -> i64;
    fn copy(&self) -> Box<dyn Value>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: TypedValue> Value for T {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
    fn fresh_at_ms(&self) -> i64 {
        crate::algorithms::State::fresh_at_ms(self)
    }
    fn copy(&self) -> Box<dyn Value> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

struct Entry {
    value: Box<dyn Value>,
    expires_at: Option<i64>,
}

impl Clone for Entry {
    fn clone(&self) -> Self {
        Entry {
            value: self.value.copy(),
            expires_at: self.expires_at,
        }
    }
}

type Map = BTreeMap<&'static str, Entry>;

/// Keys in memory, and the time the next command runs at.
#[derive(Default)]
pub struct Memory {
    keys: RefCell<Map>,
    now_ms: Cell<i64>,
    slack_ms: u32,
    written: RefCell<Vec<&'static str>>,
    /// Whether the server would refuse a write that needs memory now.
    full: Cell<bool>,
}

impl Memory {
    pub fn at(now_ms: i64, slack_ms: u32) -> Self {
        Memory {
            now_ms: Cell::new(now_ms),
            slack_ms,
            ..Memory::default()
        }
    }

    pub fn set_now(&self, now_ms: i64) {
        self.now_ms.set(now_ms);
    }

    /// Makes the server refuse (or take again) writes that need memory.
    pub fn set_full(&self, full: bool) {
        self.full.set(full);
    }

    /// A copy of the store, every key as it is now.
    pub fn copy(&self) -> Memory {
        let copy = Memory::at(self.now_ms.get(), self.slack_ms);
        *copy.keys.borrow_mut() = self.keys.borrow().clone();
        copy
    }

    /// A copy of the store with only `name` (as it is now).
    pub fn only(&self, name: &'static str) -> Memory {
        let copy = Memory::at(self.now_ms.get(), self.slack_ms);
        if let Some(entry) = self.keys.borrow().get(name) {
            copy.keys.borrow_mut().insert(name, entry.clone());
        }
        copy
    }

    /// What `name` holds now, as bytes, and its expiry: `None` when it is
    /// missing or past its expiry.
    pub fn seen(&self, name: &str) -> Option<(Vec<u8>, Option<i64>)> {
        let now = self.now_ms.get();
        self.keys
            .borrow()
            .get(name)
            .filter(|e| e.expires_at.is_none_or(|at| at > now))
            .map(|e| (e.value.bytes(), e.expires_at))
    }

    /// When the value `name` holds is as good as new, if it holds one.
    pub fn fresh_at_ms(&self, name: &str) -> Option<i64> {
        self.keys.borrow().get(name).map(|e| e.value.fresh_at_ms())
    }

    /// The keys written since the last call.
    pub fn take_written(&self) -> Vec<&'static str> {
        std::mem::take(&mut self.written.borrow_mut())
    }

    fn open(&self, name: &'static str) -> MemoryKey<'_> {
        let mut keys = self.keys.borrow_mut();
        let now = self.now_ms.get();
        if keys
            .get(name)
            .is_some_and(|e| e.expires_at.is_some_and(|at| at <= now))
        {
            keys.remove(name);
        }
        MemoryKey { keys, name, now }
    }
}

/// One key of [`Memory`], open: the whole map is held while it is (no
/// second key is opened at the same time: the key holds the command's
/// [`KeyToken`], as the server's do).
pub struct MemoryKey<'s> {
    keys: RefMut<'s, Map>,
    name: &'static str,
    now: i64,
}

impl RawKey for MemoryKey<'_> {
    fn holds<A: TypedValue, S: TypedValue>(&self) -> Holds<&A, &S> {
        let Some(entry) = self.keys.get(self.name) else {
            return Holds::Nothing;
        };
        let any = entry.value.as_any();
        if let Some(a) = any.downcast_ref::<A>() {
            Holds::This(a)
        } else if let Some(s) = any.downcast_ref::<S>() {
            Holds::Sibling(s)
        } else {
            Holds::Other
        }
    }

    fn holds_mut<A: TypedValue, S: TypedValue>(&mut self) -> Holds<&mut A, &mut S> {
        let Some(entry) = self.keys.get_mut(self.name) else {
            return Holds::Nothing;
        };
        let any = entry.value.as_any_mut();
        if any.is::<A>() {
            any.downcast_mut::<A>().map_or(Holds::Other, Holds::This)
        } else if any.is::<S>() {
            any.downcast_mut::<S>().map_or(Holds::Other, Holds::Sibling)
        } else {
            Holds::Other
        }
    }

    fn set_value<T: TypedValue>(&mut self, value: T) -> bool {
        let entry = Entry {
            value: Box::new(value),
            expires_at: None,
        };
        self.keys.insert(self.name, entry);
        true
    }

    fn is_empty(&self) -> bool {
        !self.keys.contains_key(self.name)
    }

    fn ttl_ms(&self) -> i64 {
        self.expires_at().map_or(-1, |at| at - self.now)
    }

    fn delete(&mut self) {
        self.keys.remove(self.name);
    }

    fn expire_at(&mut self, unix_ms: i64) {
        if let Some(entry) = self.keys.get_mut(self.name) {
            entry.expires_at = Some(unix_ms.max(1));
        }
    }

    fn expires_at(&self) -> Option<i64> {
        self.keys.get(self.name).and_then(|e| e.expires_at)
    }
}

impl Store for Memory {
    type Name = &'static str;
    type Raw<'s> = MemoryKey<'s>;

    fn now_ms(&self) -> i64 {
        self.now_ms.get()
    }

    fn expiry_slack_ms(&self) -> u32 {
        self.slack_ms
    }

    fn read<'k>(
        &'k self,
        token: &'k mut KeyToken,
        name: &'static str,
    ) -> Key<'k, Read, MemoryKey<'k>> {
        Key::made_of(token, self.open(name))
    }

    fn write<'k>(
        &'k self,
        token: &'k mut KeyToken,
        name: &'static str,
    ) -> Key<'k, Write, MemoryKey<'k>> {
        Key::made_of(token, self.open(name))
    }

    fn out_of_memory(&self) -> Result<(), CommandError> {
        if self.full.get() {
            Err(CommandError::out_of_memory())
        } else {
            Ok(())
        }
    }

    fn written(&self, name: &'static str) {
        self.written.borrow_mut().push(name);
    }
}
