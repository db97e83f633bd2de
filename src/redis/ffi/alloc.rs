//! The module's global allocator: Redis's allocator once Redis has loaded the
//! module (so `used_memory` and `MEMORY USAGE` count our heap), the system
//! allocator in any other program that links this crate (benches, fuzz
//! targets, examples), where there is no Redis to ask.
//!
//! The choice is made once per process: `RedisModule_Alloc` is set by the
//! module's `OnLoad` before the module allocates anything, and is never unset,
//! so no block is ever freed by the other allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use redis_module::alloc::RedisAlloc;
use redis_module::raw;

#[derive(Default, Debug, Clone, Copy)]
pub struct ModuleAlloc;

/// Bytes the module has asked Redis's allocator for and not yet given back
/// (`INFO ratelimit`'s `memory_bytes`): its states and their entries, the
/// `RL.TOP` sketch, waiters. Sizes as asked for (the allocator may round
/// each up); atomic, as values may be freed in Redis's background threads.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// See [`ALLOCATED`].
pub fn allocated_bytes() -> usize {
    ALLOCATED.load(Relaxed)
}

fn inside_redis() -> bool {
    // SAFETY: a plain read of a function pointer that is written once, by
    // the module's `OnLoad`, before any of our code allocates.
    unsafe { std::ptr::addr_of!(raw::RedisModule_Alloc).read().is_some() }
}

// SAFETY: both allocators uphold `GlobalAlloc`'s contract, and a process uses
// only one of them (see the module comment).
unsafe impl GlobalAlloc for ModuleAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if inside_redis() {
            // SAFETY: forwarded with the caller's layout.
            let ptr = unsafe { RedisAlloc.alloc(layout) };
            if !ptr.is_null() {
                ALLOCATED.fetch_add(layout.size(), Relaxed);
            }
            ptr
        } else {
            // SAFETY: as above.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if inside_redis() {
            ALLOCATED.fetch_sub(layout.size(), Relaxed);
            // SAFETY: `ptr` came from the same allocator (see above).
            unsafe { RedisAlloc.dealloc(ptr, layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
    }
}
