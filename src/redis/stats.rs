//! `INFO ratelimit`: how many requests each command allowed and denied since
//! the server started (peeks and errors are not counted), clients waiting
//! (`BLOCK`), and what `RL.TOP`'s sketch holds.
//!
//! Commands run on Redis's main thread only, so a counter is a relaxed load
//! and store, not a locked read-modify-write: counting costs next to nothing
//! on the hot path.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw;

use super::api::rm;

pub struct Counter {
    allowed_field: &'static CStr,
    denied_field: &'static CStr,
    allowed: AtomicU64,
    denied: AtomicU64,
}

impl Counter {
    const fn new(allowed_field: &'static CStr, denied_field: &'static CStr) -> Self {
        Self {
            allowed_field,
            denied_field,
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
        }
    }

    /// Counts one decided request.
    pub fn count(&self, allowed: bool) {
        let counter = if allowed { &self.allowed } else { &self.denied };
        counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
    }
}

/// A C string literal made of two string literals.
macro_rules! concat_cstr {
    ($a:expr, $b:literal) => {
        match CStr::from_bytes_with_nul(concat!($a, $b, "\0").as_bytes()) {
            Ok(s) => s,
            Err(_) => panic!("a field name holds a NUL"),
        }
    };
}

/// A command's line in `INFO ratelimit`.
pub trait Counted {
    fn counter() -> &'static Counter;
}

/// One counter for each algorithm's check command (fields named after the
/// algorithm), and the list `INFO` walks: the algorithms in registry order,
/// then the other commands that decide requests.
macro_rules! counters {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        $(impl Counted for crate::algorithms::$module::$ty {
            fn counter() -> &'static Counter {
                static COUNTER: Counter =
                    Counter::new(concat_cstr!($name, "_allowed"), concat_cstr!($name, "_denied"));
                &COUNTER
            }
        })*

        fn every() -> [&'static Counter; [$($tag,)*].len() + 3] {
            [
                $(<crate::algorithms::$module::$ty as Counted>::counter(),)*
                &CL_THROTTLE,
                &ALL,
                &ACQUIRE,
            ]
        }
    };
}
crate::registry!(counters);

pub static CL_THROTTLE: Counter = Counter::new(c"cl_throttle_allowed", c"cl_throttle_denied");
pub static ALL: Counter = Counter::new(c"all_allowed", c"all_denied");
pub static ACQUIRE: Counter = Counter::new(c"acquire_allowed", c"acquire_denied");

/// The `INFO` callback: one section, named after the module.
pub unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: `ctx` is the INFO context Redis passes; a null section name
    // means the module's own section.
    unsafe { rm!(RedisModule_InfoAddSection)(ctx, std::ptr::null()) };
    let (top_tracked, top_counted) = super::commands::top::info_numbers();
    for (field, value) in [
        (
            c"blocked_clients",
            super::waiters::WAITING.load(Relaxed) as u64,
        ),
        (
            c"waits_allowed",
            super::waiters::WAITS_ALLOWED.load(Relaxed),
        ),
        (
            c"waits_timed_out",
            super::waiters::WAITS_TIMED_OUT.load(Relaxed),
        ),
        (c"top_keys_tracked", top_tracked),
        (c"top_denials_counted", top_counted),
    ] {
        // SAFETY: `ctx` is the INFO context; `field` is a static C string.
        unsafe { rm!(RedisModule_InfoAddFieldULongLong)(ctx, field.as_ptr(), value) };
    }
    for counter in every() {
        for (field, value) in [
            (counter.allowed_field, &counter.allowed),
            (counter.denied_field, &counter.denied),
        ] {
            // SAFETY: as above; `field` is a static C string.
            unsafe {
                rm!(RedisModule_InfoAddFieldULongLong)(ctx, field.as_ptr(), value.load(Relaxed))
            };
        }
    }
}
