//! A value only Redis's main thread touches ([`MainThreadCell`]): a memo
//! kept from one command to the next without a lock or a thread-local's
//! lookup.

use std::cell::{Cell, UnsafeCell};

use super::ctx::Ctx;

/// A value reached only with a [`Ctx`], which exists only on Redis's main
/// thread: the module runs no thread of its own, a `Ctx` is neither `Send`
/// nor `Sync`, and Redis hands contexts to the module only on its main
/// thread (commands, callbacks, timers; the module's detached context is
/// used there too). So no two threads reach the value, and a lent value
/// cannot be reached again while it is lent ([`MainThreadCell::with`] says
/// so instead).
pub struct MainThreadCell<T> {
    value: UnsafeCell<T>,
    lent: Cell<bool>,
}

// SAFETY: the value is reached only through `with`, which needs a `Ctx`:
// only on Redis's main thread (see the type's comment), never on two
// threads at once; `lent` keeps it from being lent twice.
unsafe impl<T> Sync for MainThreadCell<T> {}

impl<T> MainThreadCell<T> {
    pub const fn new(value: T) -> Self {
        Self {
            value: UnsafeCell::new(value),
            lent: Cell::new(false),
        }
    }

    /// `f` of the value, lent for the length of the call; `None` when it is
    /// lent already (a call of `with` from inside `f`), `f` not called.
    #[inline(always)]
    pub fn with<R>(&self, _on_main_thread: Ctx<'_>, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.lent.replace(true) {
            return None;
        }
        // SAFETY: on the main thread only (the `Ctx`), and not lent now
        // (`lent` was false): this is the one reference to the value
        // until `f` returns. Should `f` unwind, `lent` stays set and the
        // value is never lent again.
        let out = f(unsafe { &mut *self.value.get() });
        self.lent.set(false);
        Some(out)
    }
}
