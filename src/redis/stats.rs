//! `INFO ratelimit`: how many requests each command allowed and denied since
//! the server started. Peeks and errors are not counted.
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

macro_rules! counters {
    ($($name:ident => $field:literal),* $(,)?) => {
        $(pub static $name: Counter =
            Counter::new(concat_cstr!($field, "_allowed"), concat_cstr!($field, "_denied"));)*
        static EVERY: &[&Counter] = &[$(&$name),*];
    };
}

/// A C string literal made of two string literals.
macro_rules! concat_cstr {
    ($a:literal, $b:literal) => {
        match CStr::from_bytes_with_nul(concat!($a, $b, "\0").as_bytes()) {
            Ok(s) => s,
            Err(_) => panic!("a field name holds a NUL"),
        }
    };
}

counters!(
    TOKEN_BUCKET => "tokenbucket",
    SLIDING_COUNTER => "slidingcounter",
    FIXED_WINDOW => "fixedwindow",
    SLIDING_LOG => "slidinglog",
    LEAKY_BUCKET => "leakybucket",
    GCRA => "gcra",
    CL_THROTTLE => "cl_throttle",
    ALL => "all",
    ACQUIRE => "acquire",
);

/// The `INFO` callback: one section, named after the module.
pub unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: `ctx` is the INFO context Redis passes; a null section name
    // means the module's own section.
    unsafe { rm!(RedisModule_InfoAddSection)(ctx, std::ptr::null()) };
    for counter in EVERY {
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
