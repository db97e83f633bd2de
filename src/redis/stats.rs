//! `INFO ratelimit`: how many requests each command allowed and denied since
//! the server started, and (for the commands that take `SHADOW`) how many it
//! would have denied in shadow mode (peeks and errors are not counted),
//! clients waiting (`BLOCK`), and what `RL.TOP`'s sketch holds; and what
//! the module holds: its keys, by algorithm, and the bytes it allocated.
//!
//! Commands run on Redis's main thread only, so a counter is a relaxed load
//! and store, not a locked read-modify-write: counting costs next to nothing
//! on the hot path.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::ffi::alloc::allocated_bytes;
use super::ffi::info::{Dict, Text};
use super::ffi::types::TypedValue;
use super::sketch;
use crate::algorithms::concurrency::Leases;
use crate::algorithms::penalty::Penalized;
use crate::algorithms::registry::{
    each_state, Each, EachState, Listed, ALGORITHMS, LINES, NAMES, OTHER_NAMES,
};

/// Clients waiting now (`BLOCK`, `super::waiters`).
pub static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Waits that ended with the request allowed.
pub static WAITS_ALLOWED: AtomicU64 = AtomicU64::new(0);
/// Waits that ended at their deadline (or were unblocked) without it.
pub static WAITS_TIMED_OUT: AtomicU64 = AtomicU64::new(0);

/// A command's requests: allowed, denied, and denied in `SHADOW` mode
/// (answered allowed), each counted once; and for an algorithm, the
/// penalties its denials started (`PENALTY`; a denial during a penalty
/// starts none).
pub struct Counter {
    fields: [&'static CStr; 4],
    counts: [AtomicU64; 4],
    /// Whether the command takes `SHADOW` (else it has no third line).
    shadowable: bool,
    /// Whether it is an algorithm's, which counts penalties (else it has no
    /// fourth line: `RL.ALL`'s penalties are counted by each tier's
    /// algorithm).
    penalizable: bool,
}

impl Counter {
    const fn new(fields: [&'static CStr; 4], shadowable: bool, penalizable: bool) -> Self {
        Self {
            fields,
            counts: [
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ],
            shadowable,
            penalizable,
        }
    }

    /// Counts one decided request.
    pub fn count(&self, allowed: bool, shadow: bool) {
        let i = match (allowed, shadow) {
            (true, _) => 0,
            (false, false) => 1,
            (false, true) => 2,
        };
        self.bump(i);
    }

    /// Counts a penalty a denial started.
    pub fn penalized(&self) {
        self.bump(3);
    }

    fn bump(&self, i: usize) {
        if let Some(counter) = self.counts.get(i) {
            counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }
}

/// A command's four fields, `<name>_allowed`, `_denied`, `_shadow_denied`
/// and `_penalties`.
macro_rules! fields {
    ($name:expr) => {
        [
            concat_cstr!($name, "_allowed"),
            concat_cstr!($name, "_denied"),
            concat_cstr!($name, "_shadow_denied"),
            concat_cstr!($name, "_penalties"),
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

/// Each algorithm's check command has its counter, at its registry line.
impl<A: Listed> Counted for A {
    #[inline]
    #[allow(clippy::indexing_slicing)] // in range: checked at compile time.
    fn counter() -> &'static Counter {
        const {
            assert!(
                A::LINE < ALGORITHMS,
                "an algorithm's line beyond the counters"
            )
        };
        &COUNTERS[A::LINE]
    }
}

/// The counters `INFO` walks: the algorithms in registry order, then the
/// other commands that decide requests.
fn every() -> impl Iterator<Item = &'static Counter> {
    COUNTERS.iter().chain([&CL_THROTTLE, &ALL, &ACQUIRE])
}

/// The room for a field name made from a registry name, its NUL included.
const FIELD_BYTES: usize = 64;

/// `name` then `suffix` then a NUL: a field name, made at compile time.
#[allow(clippy::indexing_slicing)]
const fn joined(name: &str, suffix: &str) -> [u8; FIELD_BYTES] {
    let (name, suffix) = (name.as_bytes(), suffix.as_bytes());
    assert!(
        name.len() + suffix.len() < FIELD_BYTES,
        "a field name is too long"
    );
    let mut out = [0; FIELD_BYTES];
    let mut i = 0;
    while i < name.len() {
        assert!(name[i] != 0, "a field name holds a NUL");
        out[i] = name[i];
        i += 1;
    }
    let mut j = 0;
    while j < suffix.len() {
        out[i + j] = suffix[j];
        j += 1;
    }
    out
}

/// The field name in `$bytes` (made by [`joined`]), in a static's
/// initializer (at compile time, where a missing NUL stops the build).
macro_rules! field {
    ($bytes:expr) => {
        match CStr::from_bytes_until_nul($bytes) {
            Ok(name) => name,
            Err(_) => panic!("a field name ends with a NUL"),
        }
    };
}

/// An algorithm's four counts, as its counter's fields name them.
const COUNTS: [&str; 4] = ["_allowed", "_denied", "_shadow_denied", "_penalties"];

/// The names of each algorithm's counter's fields.
#[allow(clippy::indexing_slicing)]
static COUNTER_FIELDS: [[[u8; FIELD_BYTES]; 4]; ALGORITHMS] = {
    let mut out = [[[0; FIELD_BYTES]; 4]; ALGORITHMS];
    let mut line = 0;
    while line < ALGORITHMS {
        let mut i = 0;
        while i < 4 {
            out[line][i] = joined(NAMES[line], COUNTS[i]);
            i += 1;
        }
        line += 1;
    }
    out
};

/// Each algorithm's counter (fields named after the algorithm), at its
/// registry line.
#[allow(clippy::indexing_slicing)]
static COUNTERS: [Counter; ALGORITHMS] = {
    let mut out = [const { Counter::new([c""; 4], true, true) }; ALGORITHMS];
    let mut line = 0;
    while line < ALGORITHMS {
        let names = &COUNTER_FIELDS[line];
        out[line] = Counter::new(
            [
                field!(&names[0]),
                field!(&names[1]),
                field!(&names[2]),
                field!(&names[3]),
            ],
            true,
            true,
        );
        line += 1;
    }
    out
};

/// `<name>_keys` for each line of the registry, as bytes.
#[allow(clippy::indexing_slicing)]
static KEY_FIELD_BYTES: [[u8; FIELD_BYTES]; LINES] = {
    let mut out = [[0; FIELD_BYTES]; LINES];
    let mut line = 0;
    while line < LINES {
        out[line] = if line < ALGORITHMS {
            joined(NAMES[line], "_keys")
        } else {
            joined(OTHER_NAMES[line - ALGORITHMS], "_keys")
        };
        line += 1;
    }
    out
};

/// `<name>_keys` for each line of the registry.
#[allow(clippy::indexing_slicing)]
static KEY_FIELDS: [&CStr; LINES] = {
    let mut out = [c""; LINES];
    let mut line = 0;
    while line < LINES {
        out[line] = field!(&KEY_FIELD_BYTES[line]);
        line += 1;
    }
    out
};

/// How many values of `A` Redis holds (see `TypedValue::held`).
fn held<A: TypedValue>() -> u64 {
    A::held().load(Relaxed)
}

/// The keys of each line of the registry: an algorithm's, penalized ones
/// included (the same algorithm), the leases'.
struct Held;

impl Each for Held {
    type Out = u64;
    fn algorithm<A: Listed>(&mut self) -> u64 {
        held::<A>() + held::<Penalized<A>>()
    }
}

impl EachState for Held {
    fn concurrency(&mut self) -> u64 {
        held::<Leases>()
    }
}

/// The keys each algorithm holds, penalized ones included (the same
/// algorithm), as `<name>_keys`, then the leases' keys, then all of them
/// as `keys`: what `SCAN ... TYPE` over every type name would count,
/// without the scan. Like `DBSIZE`, over every database, and counting
/// expired keys Redis has not reclaimed yet.
fn key_counts(add: &mut dyn FnMut(&'static CStr, u64)) {
    let mut all = 0;
    for (name, n) in KEY_FIELDS.iter().zip(each_state(&mut Held)) {
        all += n;
        add(name, n);
    }
    add(c"keys", all);
}

pub static CL_THROTTLE: Counter = Counter::new(fields!("cl_throttle"), false, false);
pub static ALL: Counter = Counter::new(fields!("all"), true, false);
pub static ACQUIRE: Counter = Counter::new(fields!("acquire"), false, false);

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
        // A command that cannot be given SHADOW, or PENALTY, has no such line.
        let lines = [true, true, counter.shadowable, counter.penalizable];
        for ((field, value), shown) in counter.fields.iter().zip(&counter.counts).zip(lines) {
            if shown {
                add(field, value.load(Relaxed));
            }
        }
    }
    key_counts(add);
    add(c"memory_bytes", allocated_bytes() as u64);
}

/// The policies' lines of `INFO ratelimit`: how many, their digest (equal
/// on nodes holding the same policies: alert when nodes disagree), and per
/// policy a line `policy_<name>:checks=..,allowed=..,denied=..,shadow_denied=..,keys=..`
/// (`keys`: how many keys hold a state stamped with the policy)
/// (a name's characters other than letters, digits, `-`, `.` and `_` shown
/// as `_`, so the line parses as every INFO line does).
pub fn policy_lines(text: &mut Text<'_>, dict: &mut Dict<'_>) {
    let store = crate::policies::store();
    text(c"policies", &store.len().to_string());
    text(c"policies_digest", &store.digest());
    for (name, policy) in store.iter() {
        let shown: String = name
            .iter()
            .map(|&b| {
                if b.is_ascii_alphanumeric() || b"-._".contains(&b) {
                    b as char
                } else {
                    '_'
                }
            })
            .collect();
        let c = &policy.counters;
        dict(
            &format!("policy_{shown}"),
            &[
                (c"checks", c.checks.load(Relaxed)),
                (c"allowed", c.allowed.load(Relaxed)),
                (c"denied", c.denied.load(Relaxed)),
                (c"shadow_denied", c.shadow_denied.load(Relaxed)),
                (
                    c"keys",
                    u64::try_from(crate::policies::keys_of(name)).unwrap_or(0),
                ),
            ],
        );
    }
}
