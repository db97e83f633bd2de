//! Clients blocked by the module (`BLOCK`) and the module's timers, behind
//! safe functions: a blocked client is unblocked at most once, through its
//! [`Blocked`] handle (or by the callbacks here, after a timeout or a
//! disconnect); a timer's data is given back typed, to its callback or to
//! whoever stops it.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use redis_module::raw;

use super::api::rm;
use super::ctx::{Ctx, Status};

/// What a kind of waiting client is told and does, from Redis's callbacks.
pub trait Waiting: 'static {
    /// What a client is unblocked with, replied by [`Waiting::reply`].
    type Reply: 'static;

    /// Replies to a client unblocked with `reply` (`None` when it was
    /// unblocked with none).
    fn reply(ctx: Ctx<'_>, reply: Option<&Self::Reply>) -> Status;

    /// The client's wait ran out (or `CLIENT UNBLOCK`): reply to it now, in
    /// `ctx`; it is unblocked after.
    fn timed_out(ctx: Ctx<'_>, client: ClientId) -> Status;

    /// The client went away (or was killed) while it waited; it is
    /// unblocked after.
    fn disconnected(ctx: Ctx<'_>, client: ClientId);
}

/// Which blocked client (for lookups; it unblocks nothing).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ClientId(usize);

/// The handle of a client the module blocked, to unblock it once.
pub struct Blocked {
    ptr: *mut raw::RedisModuleBlockedClient,
}

impl Blocked {
    pub fn id(&self) -> ClientId {
        ClientId(self.ptr as usize)
    }
}

/// Blocks the running command's client for at most `timeout_ms` (0: no
/// limit), with `W`'s callbacks. `None` when Redis refuses (a client that
/// cannot block).
pub fn block<W: Waiting>(ctx: Ctx<'_>, timeout_ms: i64) -> Option<Blocked> {
    // SAFETY: `ctx` is the running command's context; the callbacks are
    // plain functions of this module.
    let ptr = unsafe {
        rm!(RedisModule_BlockClient)(
            ctx.raw(),
            Some(reply_callback::<W>),
            Some(timeout_callback::<W>),
            Some(free_reply::<W>),
            timeout_ms,
        )
    };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was just made.
    unsafe { rm!(RedisModule_SetDisconnectCallback)(ptr, Some(disconnected::<W>)) };
    Some(Blocked { ptr })
}

/// Unblocks `client`, which Redis then replies `reply` through
/// [`Waiting::reply`].
pub fn unblock<W: Waiting>(client: Blocked, reply: W::Reply) {
    let reply = Box::into_raw(Box::new(reply));
    // SAFETY: a client this module blocked with `W`'s callbacks and has not
    // unblocked (the handle is consumed here); Redis hands `reply` to
    // `reply_callback::<W>`, then to `free_reply::<W>`.
    unsafe { rm!(RedisModule_UnblockClient)(client.ptr, reply.cast()) };
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

unsafe extern "C" fn timeout_callback<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context of the blocked client, on its database.
    let ctx = unsafe { Ctx::new(ctx) };
    // SAFETY: as above.
    let client = unsafe { rm!(RedisModule_GetBlockedClientHandle)(ctx.raw()) };
    W::timed_out(ctx, ClientId(client as usize));
    // SAFETY: a client this module blocked: the handle is freed once the
    // module unblocks it, even after a timeout.
    unsafe { rm!(RedisModule_UnblockClient)(client, std::ptr::null_mut()) };
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn disconnected<W: Waiting>(
    ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    // SAFETY: the context Redis gives this callback.
    let ctx = unsafe { Ctx::new(ctx) };
    W::disconnected(ctx, ClientId(client as usize));
    // SAFETY: as in `timeout_callback`.
    unsafe { rm!(RedisModule_UnblockClient)(client, std::ptr::null_mut()) };
}

/// What a timer carries, and what it does when it fires.
pub trait Timer: Sized + 'static {
    fn fire(self, ctx: Ctx<'_>);
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
    data.fire(ctx);
}
