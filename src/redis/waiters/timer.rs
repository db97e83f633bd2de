//! The room's one module timer: when its next wake-up is. Every wake-up
//! the room or an event asks for is folded into this timer, moved only
//! ever sooner. What a wake-up does is the timer's callback
//! (`callbacks.rs`).

use std::cell::Cell;

use super::super::ffi::block::{create_timer, stop_timer, TimerId};
use super::super::ffi::{now_ms, Ctx};

/// What the room's timer carries; its firing is in `callbacks.rs`, above
/// what it reaches.
pub struct Wake;

thread_local! {
    /// The room's one timer, and when it is due (Unix ms). Timers run on
    /// Redis's main thread.
    static TIMER: Cell<Option<(TimerId<Wake>, i64)>> = const { Cell::new(None) };
}

/// Makes the room's timer due at `at_ms`, or sooner if it is.
pub fn set_timer(ctx: Ctx<'_>, at_ms: i64) {
    let current = TIMER.get();
    if current.is_some_and(|(_, due)| due <= at_ms) {
        return;
    }
    if let Some((id, _)) = current {
        let _stopped = stop_timer(ctx, id);
    }
    let id = create_timer(ctx, at_ms.saturating_sub(now_ms()).max(0), Wake);
    TIMER.set(Some((id, at_ms)));
}

/// The timer fired: none is set until the next [`set_timer`].
pub fn fired() {
    TIMER.set(None);
}
