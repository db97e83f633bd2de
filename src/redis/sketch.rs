//! The server's one sketch of the keys denied most (`crate::top`), of
//! `top-keys` slots, fed by every denial of a client's request ([`denied`],
//! called where a request is answered, so replays, which a replica or an
//! AOF load applies, are never counted: their primary did), read by
//! `RL.TOP` (`super::commands::top`) and `INFO ratelimit`.
//!
//! The sketch is the server's own: not saved, not replicated, not shared
//! between a cluster's nodes. It counts key names, whatever the database.

use std::cell::RefCell;

use super::config::top_keys;
use super::ffi::KeyName;
use crate::top::{TopKeys, Tracked};

thread_local! {
    /// Commands and callbacks run on Redis's main thread only.
    static SKETCH: RefCell<TopKeys> = RefCell::new(TopKeys::new(top_keys()));
}

/// Counts a denial of a client's request on `key` (nothing when `top-keys`
/// is 0). O(1); the key's name is copied when it takes a slot.
pub fn denied(key: KeyName<'_>) {
    SKETCH.with(|sketch| {
        if let Ok(mut sketch) = sketch.try_borrow_mut() {
            sketch.add(key.bytes());
        }
    });
}

/// Follows the setting `top-keys` (called by `super::config` through the
/// callback the module's start-up gives it): a new size starts the counts
/// over (and frees the old sketch's memory, all of it when the size is 0),
/// since the sketch's bound, N / m, holds for the counts made at one size
/// m. Setting the size it has changes nothing. (A `CONFIG SET` of several
/// settings that fails on another one sets this one back, which starts over
/// twice.)
pub fn resize() {
    let size = top_keys();
    SKETCH.with(|sketch| {
        if let Ok(mut sketch) = sketch.try_borrow_mut() {
            if sketch.capacity() != size {
                *sketch = TopKeys::new(size);
            }
        }
    });
}

/// Forgets every count (`RL.TOP RESET`).
pub fn reset() {
    SKETCH.with(|sketch| {
        if let Ok(mut sketch) = sketch.try_borrow_mut() {
            *sketch = TopKeys::new(top_keys());
        }
    });
}

/// `f` of the `count` keys denied most, most first; `None` if the sketch is
/// in use (it never is: commands run one at a time).
pub fn with_top<R>(count: usize, f: impl FnOnce(Vec<Tracked<'_>>) -> R) -> Option<R> {
    SKETCH.with(|sketch| sketch.try_borrow().ok().map(|s| f(s.top(count))))
}

/// `INFO ratelimit`'s numbers: the keys tracked, and the denials counted
/// since the sketch started (its N).
pub fn info_numbers() -> (u64, u64) {
    SKETCH.with(|sketch| {
        sketch
            .try_borrow()
            .map_or((0, 0), |s| (s.len() as u64, s.total()))
    })
}
