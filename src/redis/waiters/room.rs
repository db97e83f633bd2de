//! The waiting room on this server: the one [`WaitRoom`] (Redis runs
//! commands, timers and callbacks on its main thread), reached through
//! [`with_room`] with the server as its host; what a check asks of it
//! (whether a key has waiters, when they are next served), and a client's
//! arrival (`wait`). Who waits, in what order and until when is the room's
//! own (`crate::wait`, plain Rust).

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

use super::super::ffi::block;
use super::super::ffi::{now_ms, Args, Ctx, KeyName, KeyToken, Status};
use super::super::request::Request;
use super::super::stats::WAITING;
use super::serving::Server;
use super::waiter::{Parked, Waiters};
use crate::error::CommandError;
use crate::wait::WaitRoom;

thread_local! {
    /// Commands, timers and callbacks all run on Redis's main thread.
    static ROOM: RefCell<WaitRoom<Parked>> = RefCell::new(WaitRoom::default());
}

/// Runs `f` on the room with the server as its host, the call's `token`
/// lent to the keys its waiters' turns open; `None` when the room is busy
/// (a call from inside one of its own).
pub fn with_room<R>(
    ctx: Ctx<'_>,
    token: &mut KeyToken,
    f: impl FnOnce(&mut WaitRoom<Parked>, &mut Server<'_>) -> R,
) -> Option<R> {
    let done = ROOM.with(|room| {
        let mut room = room.try_borrow_mut().ok()?;
        let mut server = Server::new(ctx, token);
        let result = f(&mut room, &mut server);
        WAITING.store(room.len(), Relaxed);
        Some(result)
    });
    done
}

/// Whether the running command may block its client: not in `MULTI`, a
/// script, or any client that must not block (there, `BLOCK` answers as if
/// its wait had run out, as Redis's own blocking commands do).
pub fn can_block(ctx: Ctx<'_>) -> bool {
    block::can_block(ctx)
}

/// Whether clients wait on any of `keys`. Inlined: on every check, where
/// nearly always nobody waits at all.
#[inline]
pub fn queued(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> bool {
    WAITING.load(Relaxed) != 0 && queued_in_room(ctx, keys)
}

/// [`queued`], when some client waits somewhere.
fn queued_in_room(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> bool {
    let db = ctx.selected_db();
    ROOM.with(|room| {
        room.try_borrow()
            .is_ok_and(|room| keys.iter().any(|key| room.queued(db, key.bytes())))
    })
}

/// Milliseconds until the waiters of `keys` are next served (at least 1):
/// the earliest a request behind them may try again.
pub fn next_turn_ms(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> i64 {
    let db = ctx.selected_db();
    let now = now_ms();
    ROOM.with(|room| {
        let Ok(room) = room.try_borrow() else {
            return 1;
        };
        keys.iter()
            .filter_map(|key| room.due_at(db, key.bytes()))
            .map(|due| due - now)
            .min()
            .unwrap_or(1)
            .max(1)
    })
}

/// Blocks the running command's client on `keys` for at most `block_ms` (0:
/// no limit), at the end of their queues. `retry_after_ms`: when its request
/// can pass, if it was decided just now (it was not when it queued behind
/// others). No reply now: it comes when the wait ends.
pub fn wait(
    ctx: Ctx<'_>,
    token: &mut KeyToken,
    args: &Args<'_>,
    request: Request,
    keys: &[KeyName<'_>],
    block_ms: u64,
    retry_after_ms: Option<i64>,
) -> Status {
    let db = ctx.selected_db();
    let policy = request
        .policy_stamp()
        .and_then(|stamp| crate::policies::store().name_of(stamp.policy))
        .map(Vec::into_boxed_slice);
    let parked = Parked {
        words: (0..args.len())
            .filter_map(|i| args.bytes(i))
            .map(<[u8]>::to_vec)
            .collect(),
        request,
        policy,
    };
    let keys: Vec<Box<[u8]>> = keys.iter().map(|key| key.bytes().into()).collect();
    let deadline = (block_ms > 0)
        .then(|| now_ms().saturating_add(i64::try_from(block_ms).unwrap_or(i64::MAX)));
    let arrived = with_room(ctx, token, |room, server| {
        if !block::block::<Waiters>(ctx, room.next_id().0) {
            return false;
        }
        room.arrive(server, db, keys, deadline, parked, retry_after_ms);
        true
    });
    match arrived {
        Some(true) => Status,
        _ => ctx.reply_error(&CommandError::syntax("this client cannot wait here")),
    }
}
