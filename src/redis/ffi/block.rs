//! Clients blocked by the module (`BLOCK`) and the module's timers, behind
//! safe functions.
//!
//! Blocked clients: Redis's handle of each is owned here, in one room, from
//! [`block`] until the one call of `RedisModule_UnblockClient` that ends it,
//! whichever comes first: [`unblock`] (the module answers it), `CLIENT
//! UNBLOCK` (the timeout callback: [`Waiting::unblocked`]), or the client
//! going away, killed, or answered by the server itself (the disconnect
//! callback: [`Waiting::disconnected`]). A callback for a handle no longer in
//! the room is the second word on it and does nothing: Redis 7.0 calls the
//! disconnect callback after the module unblocked a client when the client's
//! own deadline passes in the same turn (FIELD-NOTES.md), and unblocking
//! twice frees the handle twice. The module blocks with no deadline of
//! Redis's: its waiters' deadlines are its own (`crate::wait`), so Redis's
//! timeout path, which drops the reply of a client the module has just
//! answered, is never taken. Waiters are named by the module's own ids, not
//! by handle addresses, which Redis reuses once a handle is freed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::api::rm;
use super::ctx::{Ctx, KeyToken, Status};

/// What a kind of waiting client is told and does, from Redis's callbacks.
pub trait Waiting: 'static {
    /// What a client is unblocked with, replied by [`Waiting::reply`].
    type Reply: 'static;

    /// Replies to a client unblocked with `reply` (`None` when it was
    /// unblocked with none).
    fn reply(ctx: Ctx<'_>, reply: Option<&Self::Reply>) -> Status;

    /// `CLIENT UNBLOCK` ended waiter `id`'s wait: reply to it now, in `ctx`,
    /// the call's `token` lent to the keys it opens.
    fn unblocked(ctx: Ctx<'_>, token: &mut KeyToken, id: u64) -> Status;

    /// Waiter `id`'s client went away (or was killed, or was answered by the
    /// server itself): nothing is replied. The call's `token` is lent to
    /// the keys it opens (the waiters its leaving lets go).
    fn disconnected(ctx: Ctx<'_>, token: &mut KeyToken, id: u64);
}

/// The handles of the clients blocked now, by waiter id and by address.
#[derive(Default)]
struct Room {
    by_id: HashMap<u64, usize>,
    by_handle: HashMap<usize, u64>,
}

thread_local! {
    /// Blocking, unblocking and every callback run on Redis's main thread.
    static ROOM: RefCell<Room> = RefCell::new(Room::default());
}

/// Callbacks that came for a handle the module had already unblocked, and
/// were ignored (`INFO ratelimit`: how often a server speaks twice).
static LATE_CALLBACKS: AtomicU64 = AtomicU64::new(0);

/// How many callbacks came after the module had unblocked their client.
pub fn late_callbacks() -> u64 {
    LATE_CALLBACKS.load(Relaxed)
}

/// Takes the handle of waiter `id` out of the room, if it is there.
fn take_by_id(id: u64) -> Option<*mut raw::RedisModuleBlockedClient> {
    ROOM.with(|room| {
        let mut room = room.borrow_mut();
        let handle = room.by_id.remove(&id)?;
        room.by_handle.remove(&handle);
        Some(handle as *mut raw::RedisModuleBlockedClient)
    })
}

/// Takes `handle` out of the room: its waiter's id, if it was there.
fn take_by_handle(handle: *mut raw::RedisModuleBlockedClient) -> Option<u64> {
    ROOM.with(|room| {
        let mut room = room.borrow_mut();
        let id = room.by_handle.remove(&(handle as usize))?;
        room.by_id.remove(&id);
        Some(id)
    })
}

/// Whether the running command's client may block: not in `MULTI`, a
/// script, a replicated or loaded command, or any client that must not.
pub fn can_block(ctx: Ctx<'_>) -> bool {
    let not = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    ctx.flags() & not as c_int == 0
}

/// Blocks the running command's client as waiter `id` (unique: never given
/// twice), with `W`'s callbacks and no deadline of Redis's. `false` when
/// Redis refuses (a client that cannot block).
pub fn block<W: Waiting>(ctx: Ctx<'_>, id: u64) -> bool {
    // SAFETY: `ctx` is the running command's context; the callbacks are
    // plain functions of this module.
    let handle = unsafe {
        rm!(RedisModule_BlockClient)(
            ctx.raw(),
            Some(reply_callback::<W>),
            Some(timeout_callback::<W>),
            Some(free_reply::<W>),
            0,
        )
    };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` was just made.
    unsafe { rm!(RedisModule_SetDisconnectCallback)(handle, Some(disconnected::<W>)) };
    ROOM.with(|room| {
        let mut room = room.borrow_mut();
        room.by_id.insert(id, handle as usize);
        room.by_handle.insert(handle as usize, id);
    });
    true
}

/// Unblocks waiter `id`, which Redis then replies `reply` through
/// [`Waiting::reply`]. `false` (and `reply` dropped) when it waits no more.
pub fn unblock<W: Waiting>(id: u64, reply: W::Reply) -> bool {
    let Some(handle) = take_by_id(id) else {
        return false;
    };
    let reply = Box::into_raw(Box::new(reply));
    // SAFETY: a client this module blocked with `W`'s callbacks, just taken
    // out of the room: no other call unblocks it. Redis hands `reply` to
    // `reply_callback::<W>`, then to `free_reply::<W>`.
    unsafe { rm!(RedisModule_UnblockClient)(handle, reply.cast()) };
    true
}

unsafe extern "C" fn reply_callback<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context Redis replies to the unblocked client in.
    let ctx = unsafe { Ctx::new(ctx) };
    // SAFETY: as above; the private data is the box `unblock` gave, or null.
    let data = unsafe { rm!(RedisModule_GetBlockedClientPrivateData)(ctx.raw()) };
    // SAFETY: `unblock` made it from a `W::Reply`; `free_reply` frees it.
    W::reply(ctx, unsafe { data.cast::<W::Reply>().as_ref() });
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn free_reply<W: Waiting>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: made by `Box::into_raw` in `unblock`, freed once, here.
        drop(unsafe { Box::from_raw(data.cast::<W::Reply>()) });
    }
}

/// Redis calls it for `CLIENT UNBLOCK` (the module sets no deadline of
/// Redis's), and only for a client the module has not unblocked.
unsafe extern "C" fn timeout_callback<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context of the blocked client, on its database.
    let ctx = unsafe { Ctx::new(ctx) };
    // SAFETY: as above.
    let handle = unsafe { rm!(RedisModule_GetBlockedClientHandle)(ctx.raw()) };
    match take_by_handle(handle) {
        Some(id) => {
            W::unblocked(ctx, &mut KeyToken::new(), id);
            // SAFETY: a client this module blocked, just taken out of the
            // room: this is the one call that ends it.
            unsafe { rm!(RedisModule_UnblockClient)(handle, std::ptr::null_mut()) };
        }
        None => {
            LATE_CALLBACKS.fetch_add(1, Relaxed);
            ctx.reply_null();
        }
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn disconnected<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    handle: *mut raw::RedisModuleBlockedClient,
) {
    // Not in the room: the module already unblocked it (the second word).
    let Some(id) = take_by_handle(handle) else {
        LATE_CALLBACKS.fetch_add(1, Relaxed);
        return;
    };
    // SAFETY: the context Redis gives this callback.
    let ctx = unsafe { Ctx::new(ctx) };
    W::disconnected(ctx, &mut KeyToken::new(), id);
    // SAFETY: as in `timeout_callback`.
    unsafe { rm!(RedisModule_UnblockClient)(handle, std::ptr::null_mut()) };
}

/// What a timer carries, and what it does when it fires (in `ctx`, the
/// call's `token` lent to the keys it opens).
pub trait Timer: Sized + 'static {
    fn fire(self, ctx: Ctx<'_>, token: &mut KeyToken);
}

/// A timer of the module, carrying a `T`.
pub struct TimerId<T> {
    id: raw::RedisModuleTimerID,
    life: PhantomData<fn() -> T>,
}

impl<T> Clone for TimerId<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TimerId<T> {}

/// A timer that fires in `delay_ms` (at least 0), handing `data` to
/// [`Timer::fire`].
pub fn create_timer<T: Timer>(ctx: Ctx<'_>, delay_ms: i64, data: T) -> TimerId<T> {
    let data = Box::into_raw(Box::new(data));
    // SAFETY: `ctx` is a live context; the callback is a plain function that
    // takes the box back.
    let id = unsafe {
        rm!(RedisModule_CreateTimer)(ctx.raw(), delay_ms.max(0), Some(fired::<T>), data.cast())
    };
    TimerId {
        id,
        life: PhantomData,
    }
}

/// Stops `timer`, if it has not fired, and gives back what it carries.
pub fn stop_timer<T: Timer>(ctx: Ctx<'_>, timer: TimerId<T>) -> Option<T> {
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: `timer` is a timer of this module (a fired timer clears its
    // entry first, and then this fails); its data is the box it was given,
    // a `T` (its id's type).
    let stopped = unsafe { rm!(RedisModule_StopTimer)(ctx.raw(), timer.id, &mut data) }
        == raw::REDISMODULE_OK as c_int;
    (stopped && !data.is_null())
        // SAFETY: made by `Box::into_raw` in `create_timer`, taken back once.
        .then(|| *unsafe { Box::from_raw(data.cast::<T>()) })
}

unsafe extern "C" fn fired<T: Timer>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: the box `create_timer` made for this timer, taken back once.
    let data = unsafe { Box::from_raw(data.cast::<T>()) };
    // SAFETY: the timer's context, live for this call.
    let ctx = unsafe { Ctx::new(ctx) };
    data.fire(ctx, &mut KeyToken::new());
}
