//! The server itself, outside any key: its clock and pause state, its
//! random generator, its events, the module's detached context, and the few
//! of Redis's own commands the module runs (`INFO keyspace`, `CONFIG GET`,
//! `DBSIZE`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use redis_module::raw;

use super::api::rm;
use super::args::string_bytes;
use super::ctx::{track_role, Ctx, KeyToken};

/// The server's clock, in Unix milliseconds.
pub fn now_ms() -> i64 {
    // SAFETY: takes no arguments, reads the server's clock.
    unsafe { rm!(RedisModule_Milliseconds)() }
}

/// Whether Redis asks modules to write nothing now: clients are paused for
/// writes (`CLIENT PAUSE WRITE|ALL`, and the pauses of `FAILOVER`, `CLUSTER
/// FAILOVER` and `SHUTDOWN` with replicas). Redis aborts when anything is
/// propagated then, and a paused dataset must not change, so work done
/// outside a client's command (a waiter's turn) waits for the pause to end.
pub fn writes_paused() -> bool {
    // SAFETY: takes no arguments, reads the server's pause state.
    unsafe { rm!(RedisModule_AvoidReplicaTraffic)() != 0 }
}

/// A context of the module's own, outside any command, made once at load
/// time and kept: for creating timers from callbacks that are handed no
/// context (a key's removal).
static DETACHED: std::sync::atomic::AtomicPtr<raw::RedisModuleCtx> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Makes the module's detached context (at load time).
pub fn init_detached(ctx: Ctx<'_>) {
    // SAFETY: `ctx` is the loading context; the detached context lives as
    // long as the module and is never freed.
    let detached = unsafe { rm!(RedisModule_GetDetachedThreadSafeContext)(ctx.raw()) };
    DETACHED.store(detached, std::sync::atomic::Ordering::Relaxed);
}

/// The module's detached context, if made (see [`init_detached`]).
pub fn detached() -> Option<Ctx<'static>> {
    let ptr = DETACHED.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: made at load time and never freed; used on the main thread
    // only, for calls that read the module it belongs to.
    (!ptr.is_null()).then(|| unsafe { Ctx::new(ptr) })
}

/// The name and database of the key a type callback is about (its
/// `RedisModuleKeyOptCtx`), copied.
///
/// # Safety
/// `ctx` is the option context Redis passed to the running callback.
pub unsafe fn opt_ctx_key(ctx: *mut raw::RedisModuleKeyOptCtx) -> (c_int, Vec<u8>) {
    // SAFETY: the caller's live option context.
    let db = unsafe { rm!(RedisModule_GetDbIdFromOptCtx)(ctx) };
    // SAFETY: as above; the name lives while the callback runs, and is
    // copied before it returns.
    let name = unsafe { rm!(RedisModule_GetKeyNameFromOptCtx)(ctx) };
    // SAFETY: as above: the bytes are read at once.
    (db, unsafe { string_bytes(name) }.to_vec())
}

/// Calls `callback` on `event` (a `REDISMODULE_EVENT_*` id) of the server.
fn subscribe_server_event(
    ctx: Ctx<'_>,
    event: u64,
    callback: unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        raw::RedisModuleEvent,
        u64,
        *mut c_void,
    ),
) -> bool {
    let event = raw::RedisModuleEvent {
        id: event,
        dataver: 1,
    };
    // SAFETY: `ctx` is a live context; the callback is a plain fn.
    let status =
        unsafe { rm!(RedisModule_SubscribeToServerEvent)(ctx.raw(), event, Some(callback)) };
    status == raw::REDISMODULE_OK as c_int
}

/// Keeps this server's role tracked (`super::ctx::track_role`): read from
/// `ctx`'s flags now (at load time: a server started with `replicaof` is a
/// replica already), then set by each role-change event. False, and the
/// role asked each time, when the server has no such event.
pub fn on_role_change(ctx: Ctx<'_>) -> bool {
    let subscribed = subscribe_server_event(
        ctx,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        role_changed,
    );
    track_role(None);
    if subscribed {
        track_role(Some(ctx.is_replica()));
    }
    subscribed
}

unsafe extern "C" fn role_changed(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    track_role(Some(
        subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA,
    ));
}

static CONFIG_CHANGED: OnceLock<fn()> = OnceLock::new();
static FORKED: OnceLock<fn(Ctx<'_>)> = OnceLock::new();

/// Calls `f` in the parent right after each fork of a child (an AOF
/// rewrite, an RDB save), at load time. An AOF rewrite has opened its new
/// incremental file before it forks, so what `f` propagates lands after the
/// rewritten base file.
pub fn on_fork(ctx: Ctx<'_>, f: fn(Ctx<'_>)) -> bool {
    let _ = FORKED.set(f);
    subscribe_server_event(ctx, raw::REDISMODULE_EVENT_FORK_CHILD, forked)
}

unsafe extern "C" fn forked(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        return;
    }
    if let Some(f) = FORKED.get() {
        // SAFETY: Redis passes the event's live context.
        f(unsafe { Ctx::new(ctx) });
    }
}
static FLUSHED: OnceLock<fn(Ctx<'_>, &mut KeyToken, Option<c_int>)> = OnceLock::new();
static SWAPPED: OnceLock<fn(Ctx<'_>, &mut KeyToken, c_int, c_int)> = OnceLock::new();

/// Calls `f` after each change of the server's configuration (at load
/// time). False when the server has no such event (older servers).
pub fn on_config_change(ctx: Ctx<'_>, f: fn()) -> bool {
    let _ = CONFIG_CHANGED.set(f);
    subscribe_server_event(ctx, raw::REDISMODULE_EVENT_CONFIG, config_changed)
}

/// Calls `f` after each `FLUSHDB` (with its database) or `FLUSHALL`
/// (`None`), at load time, lending it the call's [`KeyToken`].
pub fn on_flush(ctx: Ctx<'_>, f: fn(Ctx<'_>, &mut KeyToken, Option<c_int>)) -> bool {
    let _ = FLUSHED.set(f);
    subscribe_server_event(ctx, raw::REDISMODULE_EVENT_FLUSHDB, flushed)
}

/// Calls `f` with the two databases of each `SWAPDB` (at load time),
/// lending it the call's [`KeyToken`].
pub fn on_swap(ctx: Ctx<'_>, f: fn(Ctx<'_>, &mut KeyToken, c_int, c_int)) -> bool {
    let _ = SWAPPED.set(f);
    subscribe_server_event(ctx, raw::REDISMODULE_EVENT_SWAPDB, swapped)
}

unsafe extern "C" fn config_changed(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    if let Some(f) = CONFIG_CHANGED.get() {
        f();
    }
}

unsafe extern "C" fn flushed(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: Redis passes a flush event's info.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
        return;
    };
    // SAFETY: the event's context, live for this call.
    let ctx = unsafe { Ctx::new(ctx) };
    if let Some(f) = FLUSHED.get() {
        f(
            ctx,
            &mut KeyToken::new(),
            (info.dbnum >= 0).then_some(info.dbnum),
        );
    }
}

unsafe extern "C" fn swapped(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: Redis passes a swap event's info.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    // SAFETY: the event's context, live for this call.
    let ctx = unsafe { Ctx::new(ctx) };
    if let Some(f) = SWAPPED.get() {
        f(
            ctx,
            &mut KeyToken::new(),
            info.dbnum_first,
            info.dbnum_second,
        );
    }
}

/// A reply of one of Redis's own commands, run by the module, freed when
/// dropped.
pub(super) struct CallReply(*mut raw::RedisModuleCallReply);

impl CallReply {
    /// Takes ownership of `reply` (a reply of `RedisModule_Call`, or null).
    pub(super) fn new(reply: *mut raw::RedisModuleCallReply) -> Self {
        Self(reply)
    }

    /// The text of a string reply (or of the element `index` of an array).
    pub(super) fn text(&self, index: Option<usize>) -> Option<Vec<u8>> {
        let mut reply = self.0;
        if reply.is_null() {
            return None;
        }
        if let Some(index) = index {
            // SAFETY: a live reply; an array's elements live as long as it.
            if unsafe { rm!(RedisModule_CallReplyType)(reply) }
                != raw::REDISMODULE_REPLY_ARRAY as c_int
            {
                return None;
            }
            // SAFETY: as above; out of range gives null.
            reply = unsafe { rm!(RedisModule_CallReplyArrayElement)(reply, index) };
            if reply.is_null() {
                return None;
            }
        }
        let mut len = 0usize;
        // SAFETY: a live reply; null unless it is a string of `len` bytes.
        let ptr = unsafe { rm!(RedisModule_CallReplyStringPtr)(reply, &mut len) };
        // SAFETY: `len` bytes at `ptr`, alive while the reply is; copied.
        (!ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a reply of `RedisModule_Call`, freed once.
            unsafe { rm!(RedisModule_FreeCallReply)(self.0) };
        }
    }
}

/// `INFO keyspace`, as Redis writes it.
pub fn info_keyspace(ctx: Ctx<'_>) -> Option<Vec<u8>> {
    // SAFETY: a live context; the format "c" takes one C string.
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.raw(),
            c"INFO".as_ptr(),
            c"c".as_ptr(),
            c"keyspace".as_ptr(),
        )
    };
    CallReply(reply).text(None)
}

/// The value of the configuration parameter `name` (`CONFIG GET`).
pub fn config_get(ctx: Ctx<'_>, name: &std::ffi::CStr) -> Option<Vec<u8>> {
    // SAFETY: a live context; the format "cc" takes two C strings.
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.raw(),
            c"CONFIG".as_ptr(),
            c"cc".as_ptr(),
            c"GET".as_ptr(),
            name.as_ptr(),
        )
    };
    CallReply(reply).text(Some(1))
}

/// The number of keys in the selected database.
pub fn db_size(ctx: Ctx<'_>) -> u64 {
    // SAFETY: a live context.
    unsafe { rm!(RedisModule_DbSize)(ctx.raw()) }
}

/// `len` random hex characters from the server's own generator, which is
/// seeded from the operating system's entropy: not guessable by a client.
pub fn random_hex(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` has room for exactly `len` bytes.
    unsafe { rm!(RedisModule_GetRandomHexChars)(out.as_mut_ptr().cast::<c_char>(), len) };
    out
}
