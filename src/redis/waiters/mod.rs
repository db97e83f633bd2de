//! `BLOCK ms`: a request that cannot pass now waits on the server, and is
//! taken, in its turn, as soon as the limit allows it.
//!
//! Who waits, in what order and until when is the waiting room's
//! (`crate::wait`, plain Rust, tested without a server). This folder is its
//! host on the server, a file an idea, each importing only the ones listed
//! after it:
//! - `callbacks.rs`: what Redis calls from outside any command: the room's
//!   timer firing, and a waiting client's reply, `CLIENT UNBLOCK` and
//!   disconnect (each client is unblocked exactly once, whatever order
//!   they come in: the FFI room that owns the handles, `ffi::block`);
//! - `events.rs`: keys changed under the waiters (room freed, a key
//!   removed, a database flushed or swapped), told to the room at once, or
//!   kept aside while it is busy and given to it at its next wake-up;
//! - `room.rs`: the one room on the server, what a check asks of it, and a
//!   client's arrival;
//! - `serving.rs`: the server as the room's host: deciding a waiter's
//!   request against what its keys hold now (so nothing can come between
//!   the decision and the taking), propagating it as a replay of its
//!   command, answering its client; a redirect when its keys left the node;
//! - `timer.rs`: the one module timer for the room's next wake-up;
//! - `hold.rs`: the pause hold: nobody served while writes are paused, a
//!   wake-up holding the event loop at most `hold::SLICE`;
//! - `waiter.rs`: what a waiter is here (its command, its answer).
//!
//! This file subscribes to the server's events at load time and is the
//! door the commands use.

mod callbacks;
mod events;
mod hold;
mod room;
mod serving;
mod timer;
mod waiter;

use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;

use super::ffi::types::on_removed;
use super::ffi::{init_detached, on_flush, on_swap, Ctx, KeyToken};
use super::stats::WAITING;

pub use events::{all_changed, freed, removed};
pub use room::{can_block, next_turn_ms, queued, wait};

/// Subscribes to the server's events that change every key of a database
/// at once, and has the types tell of keys removed (at load time).
pub fn init(ctx: Ctx<'_>) -> bool {
    init_detached(ctx);
    on_removed(|| WAITING.load(Relaxed) > 0, removed);
    on_flush(ctx, flushed) && on_swap(ctx, swapped)
}

/// `FLUSHDB` (its database) or `FLUSHALL` (`None`).
fn flushed(ctx: Ctx<'_>, token: &mut KeyToken, db: Option<c_int>) {
    all_changed(ctx, token, db);
}

/// `SWAPDB first second`.
fn swapped(ctx: Ctx<'_>, token: &mut KeyToken, first: c_int, second: c_int) {
    all_changed(ctx, token, Some(first));
    all_changed(ctx, token, Some(second));
}
