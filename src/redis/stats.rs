//! `INFO ratelimit`: how many requests each command allowed and denied since
//! the server started, and (for the commands that take `SHADOW`) how many it
//! would have denied in shadow mode (peeks and errors are not counted),
//! clients waiting (`BLOCK`), and what `RL.TOP`'s sketch holds.
//!
//! Commands run on Redis's main thread only, so a counter is a relaxed load
//! and store, not a locked read-modify-write: counting costs next to nothing
//! on the hot path.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::sketch;

/// Clients waiting now (`BLOCK`, `super::waiters`).
pub static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Waits that ended with the request allowed.
pub static WAITS_ALLOWED: AtomicU64 = AtomicU64::new(0);
/// Waits that ended at their deadline (or were unblocked) without it.
pub static WAITS_TIMED_OUT: AtomicU64 = AtomicU64::new(0);

/// A command's requests: allowed, denied, and denied in `SHADOW` mode
/// (answered allowed), each counted once.
pub struct Counter {
    fields: [&'static CStr; 3],
    counts: [AtomicU64; 3],
    /// Whether the command takes `SHADOW` (else it has no third line).
    shadowable: bool,
}

impl Counter {
    const fn new(fields: [&'static CStr; 3], shadowable: bool) -> Self {
        Self {
            fields,
            counts: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            shadowable,
        }
    }

    /// Counts one decided request.
    pub fn count(&self, allowed: bool, shadow: bool) {
        let i = match (allowed, shadow) {
            (true, _) => 0,
            (false, false) => 1,
            (false, true) => 2,
        };
        if let Some(counter) = self.counts.get(i) {
            counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }
}

/// A command's three fields, `<name>_allowed`, `_denied` and
/// `_shadow_denied`.
macro_rules! fields {
    ($name:expr) => {
        [
            concat_cstr!($name, "_allowed"),
            concat_cstr!($name, "_denied"),
            concat_cstr!($name, "_shadow_denied"),
        ]
    };
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
                static COUNTER: Counter = Counter::new(fields!($name), true);
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

pub static CL_THROTTLE: Counter = Counter::new(fields!("cl_throttle"), false);
pub static ALL: Counter = Counter::new(fields!("all"), true);
pub static ACQUIRE: Counter = Counter::new(fields!("acquire"), false);

/// The fields of the module's section of `INFO` (see `super::ffi::info`).
pub fn info_fields(add: &mut dyn FnMut(&'static CStr, u64)) {
    let (top_tracked, top_counted) = sketch::info_numbers();
    add(c"blocked_clients", WAITING.load(Relaxed) as u64);
    add(c"waits_allowed", WAITS_ALLOWED.load(Relaxed));
    add(c"waits_timed_out", WAITS_TIMED_OUT.load(Relaxed));
    add(c"late_callbacks", super::ffi::block::late_callbacks());
    add(c"top_keys_tracked", top_tracked);
    add(c"top_denials_counted", top_counted);
    for counter in every() {
        // A command that cannot be given SHADOW has no such line.
        let lines = if counter.shadowable { 3 } else { 2 };
        for (field, value) in counter.fields.iter().zip(&counter.counts).take(lines) {
            add(field, value.load(Relaxed));
        }
    }
}
