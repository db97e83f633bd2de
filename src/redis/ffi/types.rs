//! The callbacks of the module's Redis data types (RDB save/load, AOF
//! rewrite, memory usage, digest, copy, free, unlink), generic over the
//! state a type holds, and [`TypedValue`]: the pairing of a Rust type with
//! the Redis type whose values it is, which every cast of a key's value
//! (`super::key`) relies on. All of them go through the one encoding in
//! `crate::encoding`, so what an RDB file holds, what AOF rewrite emits and
//! what replicas receive are the same bytes.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::api::{buffer_ptr, rm};
use super::ctx::Ctx;
use super::server::now_ms;
use super::server::opt_ctx_key;
use crate::algorithms::penalty::Penalized;
use crate::algorithms::registry::{Line, Listed, ALGORITHMS, LINES};
use crate::algorithms::{Registered, State};
use crate::encoding::Horizon;
use crate::log_throttle::{LogThrottle, Verdict};

/// The RDB encoding version of every type. The state's own tag byte says
/// which layout follows; this number changes only if the RDB framing does.
pub const ENCODING_VERSION: i32 = 1;

/// A Rust type whose values are the values of one Redis data type.
///
/// # Safety
/// Every value Redis holds of [`TypedValue::redis_type`] is a `Box<Self>`:
/// the type's callbacks are [`methods::<Self>`](methods), and no other Rust
/// type names it. Implemented here only, each type at its own place in one
/// static array of types.
pub unsafe trait TypedValue: State + 'static {
    fn redis_type() -> &'static RedisType;

    /// How many values of this type Redis holds now: each made for Redis
    /// (stored by a command, loaded from an RDB file or a `RESTORE`,
    /// copied) counts one up, each freed (deleted, expired, overwritten,
    /// flushed, evicted, in a background thread too) one down. `INFO
    /// ratelimit`'s key counts.
    fn held() -> &'static AtomicU64;
}

/// One more value of `A` handed to Redis.
pub fn held_one_more<A: TypedValue>() {
    A::held().fetch_add(1, Relaxed);
}

/// Creates the Redis data type `ty` (at load time).
pub fn create(ctx: Ctx<'_>, ty: &RedisType) -> Result<(), String> {
    ty.create_data_type(ctx.raw()).map_err(str::to_string)
}

/// The Redis data types, made from the registry: every type the module
/// stores has its place in one static array, each algorithm's at its
/// registry line, its penalized form's after them, then each other state's
/// (see [`Slot`]), so that every algorithm's [`TypedValue`] is one generic
/// impl, and so every algorithm of the registry is a stored type without an
/// item of its own. The only per-line code of the Redis layer.
macro_rules! redis_types {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal $(, $more:tt)*;)* }
        others { $($otag:literal $oty:ident: $omodule:ident, $oname:literal, $otype_name:literal $(, $omore:tt)*;)* }
    ) => {
        /// Every Redis data type the module stores, at its [`Slot`].
        static TYPES: [RedisType; SLOTS] = [
            $(RedisType::new(
                <crate::algorithms::$module::$ty as Registered>::TYPE_NAME,
                ENCODING_VERSION,
                methods::<crate::algorithms::$module::$ty>(),
            ),)*
            $(RedisType::new(
                <Penalized<crate::algorithms::$module::$ty> as Registered>::TYPE_NAME,
                ENCODING_VERSION,
                methods::<Penalized<crate::algorithms::$module::$ty>>(),
            ),)*
            $(RedisType::new(
                <crate::algorithms::$omodule::$oty as Registered>::TYPE_NAME,
                ENCODING_VERSION,
                methods::<crate::algorithms::$omodule::$oty>(),
            ),)*
        ];

        // The array above is in registry order: each line where its slot
        // says, which is what makes the impls below (and the generic ones)
        // sound.
        const _: () = {
            let mut line = 0;
            $(assert!(<crate::algorithms::$module::$ty as Line>::LINE == line);
            line += 1;)*
            $(assert!(<crate::algorithms::$omodule::$oty as Line>::LINE == line);
            line += 1;)*
            assert!(line == LINES);
        };

        $(// SAFETY: the slot of this type in `TYPES`, made with its callbacks.
        #[allow(clippy::indexing_slicing)] // `Slot::AT` is in range: checked at compile time.
        unsafe impl TypedValue for crate::algorithms::$omodule::$oty {
            #[inline]
            fn redis_type() -> &'static RedisType {
                &TYPES[Slot::<Self, false>::AT]
            }
            #[inline]
            fn held() -> &'static AtomicU64 {
                &HELD[Slot::<Self, false>::AT]
            }
        })*
    };
}
crate::registry!(redis_types);

/// How many Redis data types the module stores: one per line, and one more
/// for each algorithm (its penalized form).
const SLOTS: usize = LINES + ALGORITHMS;

/// The place in `TYPES` (and `HELD`) of the type of the registry line
/// `L`'s state, or (`PENALIZED`) of the algorithm's penalized form.
struct Slot<L, const PENALIZED: bool>(std::marker::PhantomData<L>);

impl<L: Line, const PENALIZED: bool> Slot<L, PENALIZED> {
    /// Evaluated at compile time for each type that uses it, so a slot out
    /// of range stops the build, and indexing with it cannot panic.
    const AT: usize = {
        let at = if PENALIZED || L::LINE >= ALGORITHMS {
            L::LINE + ALGORITHMS
        } else {
            L::LINE
        };
        assert!(at < SLOTS, "a registry line beyond the types");
        at
    };
}

/// How many values of each type Redis holds (see [`TypedValue::held`]).
static HELD: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

// SAFETY: the slot of the algorithm's type in `TYPES`, made with its
// callbacks.
#[allow(clippy::indexing_slicing)] // `Slot::AT` is in range: checked at compile time.
unsafe impl<A: Listed> TypedValue for A {
    #[inline]
    fn redis_type() -> &'static RedisType {
        &TYPES[Slot::<A, false>::AT]
    }
    #[inline]
    fn held() -> &'static AtomicU64 {
        &HELD[Slot::<A, false>::AT]
    }
}

// SAFETY: the slot of the algorithm's penalized type in `TYPES`, made with
// the callbacks of `Penalized<A>`.
#[allow(clippy::indexing_slicing)] // `Slot::AT` is in range: checked at compile time.
unsafe impl<A: Listed> TypedValue for Penalized<A> {
    #[inline]
    fn redis_type() -> &'static RedisType {
        &TYPES[Slot::<A, true>::AT]
    }
    #[inline]
    fn held() -> &'static AtomicU64 {
        &HELD[Slot::<A, true>::AT]
    }
}

/// Every type the module stores, to create at load time: each algorithm's,
/// each penalized form's, then the others'.
pub fn every_type() -> &'static [RedisType] {
    &TYPES
}

/// The callbacks of the Redis type whose values are `A`s.
pub const fn methods<A: TypedValue>() -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<A>),
        rdb_save: Some(rdb_save::<A>),
        aof_rewrite: Some(aof_rewrite::<A>),
        mem_usage: Some(mem_usage::<A>),
        digest: Some(digest::<A>),
        free: Some(free::<A>),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: Some(free_effort::<A>),
        unlink: None,
        copy: Some(copy::<A>),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink),
        copy2: None,
        aux_save2: None,
    }
}

fn encoded<A: State>(state: &A) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    state.encode(&mut buf);
    buf
}

/// # Safety
/// `value` must be a pointer this module stored for type `A`.
unsafe fn state<'a, A>(value: *const c_void) -> Option<&'a A> {
    // SAFETY: per the caller, a valid `A` or null.
    unsafe { value.cast::<A>().as_ref() }
}

unsafe extern "C" fn rdb_save<A: State>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    if let Some(state) = unsafe { state::<A>(value) } {
        let buf = encoded(state);
        // SAFETY: `rdb` is the open RDB stream; the buffer outlives the call.
        unsafe { rm!(RedisModule_SaveStringBuffer)(rdb, buffer_ptr(&buf), buf.len()) };
    }
}

/// Refused loads: any client can cause one (`RESTORE` of a forged value),
/// so each does not get its own log line. The first does, then at most one
/// every 10 s, counting the refusals in between: six lines a minute at most,
/// whatever a client sends.
static REFUSALS: Mutex<LogThrottle> = Mutex::new(LogThrottle::new(Duration::from_secs(10)));

/// The log line of a refused load of a `type_name` value, if it gets one.
fn refusal_line(type_name: &str, why: &str) -> Option<String> {
    let mut refusals = REFUSALS.lock().unwrap_or_else(PoisonError::into_inner);
    let Verdict::Log {
        unlogged,
        since_last,
    } = refusals.event(Instant::now())
    else {
        return None;
    };
    let refused = format!("ratelimit: cannot load a {type_name} value: {why}");
    Some(match (since_last, unlogged) {
        (None, _) => format!(
            "{refused} (further refusals are logged at most once every {} s, each line counting those not logged)",
            refusals.interval().as_secs()
        ),
        (Some(_), 0) => refused,
        (Some(since), unlogged) => format!(
            "{refused}; {unlogged} other values were refused in the {:.1} s since the last such line, not logged one by one",
            since.as_secs_f64()
        ),
    })
}

/// The horizon of a state read now (see `crate::encoding::Horizon`): none
/// for a copy, while the server loads its RDB or AOF or is a replica (whose
/// states come from its primary); a client's otherwise (`RL.SETSTATE`,
/// `RESTORE`).
pub fn horizon() -> Horizon {
    let copying = (raw::REDISMODULE_CTX_FLAGS_LOADING | raw::REDISMODULE_CTX_FLAGS_SLAVE) as c_int;
    // SAFETY: a null context asks for the server's own flags, which Redis
    // answers without a client.
    let flags = unsafe { rm!(RedisModule_GetContextFlags)(std::ptr::null_mut()) };
    if flags & copying != 0 {
        Horizon::NONE
    } else {
        Horizon::client(now_ms())
    }
}

/// Reads a state back; any buffer that is not exactly one this module writes
/// fails the load (null), logged (see [`REFUSALS`]), without a panic.
unsafe extern "C" fn rdb_load<A: TypedValue>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
) -> *mut c_void {
    let refuse = |why: &str| {
        if let Some(line) = refusal_line(A::TYPE_NAME, why) {
            let msg = std::ffi::CString::new(line).unwrap_or_default();
            // SAFETY: `rdb` is the open stream; the format is "%s" with one C string.
            unsafe {
                rm!(RedisModule_LogIOError)(rdb, c"warning".as_ptr(), c"%s".as_ptr(), msg.as_ptr())
            };
        }
        std::ptr::null_mut()
    };
    if encver != ENCODING_VERSION {
        return refuse("unknown encoding version");
    }
    let mut len = 0usize;
    // SAFETY: `rdb` is the open stream; Redis allocates the returned buffer.
    let ptr = unsafe { rm!(RedisModule_LoadStringBuffer)(rdb, &mut len) };
    // SAFETY: `rdb` is the open stream.
    if ptr.is_null() || unsafe { rm!(RedisModule_IsIOError)(rdb) } != 0 {
        if !ptr.is_null() {
            // SAFETY: allocated by Redis for us, freed once.
            unsafe { rm!(RedisModule_Free)(ptr.cast()) };
        }
        return refuse("truncated data");
    }
    // SAFETY: Redis returned `len` readable bytes at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    let decoded = A::decode(bytes, horizon());
    // SAFETY: allocated by Redis for us, freed once, after its last use.
    unsafe { rm!(RedisModule_Free)(ptr.cast()) };
    match decoded {
        Ok(state) => {
            held_one_more::<A>();
            crate::policies::count_keys(state.policy_hash(), 1);
            Box::into_raw(Box::new(state)).cast()
        }
        Err(e) => refuse(e.0),
    }
}

unsafe extern "C" fn aof_rewrite<A: State>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    if let Some(state) = unsafe { state::<A>(value) } {
        let buf = encoded(state);
        // The expiry is left as it is (KEEPTTL): Redis writes the key's
        // own `PEXPIREAT` after it, when the key has one, so the rewritten
        // file restores it exactly, or restores none.
        // SAFETY: `aof` is the rewrite stream, `key` a live string; format
        // "sbc" takes a string object, a buffer and its length, a C string.
        unsafe {
            rm!(RedisModule_EmitAOF)(
                aof,
                c"RL.SETSTATE".as_ptr(),
                c"sbc".as_ptr(),
                key,
                buffer_ptr(&buf),
                buf.len(),
                c"KEEPTTL".as_ptr(),
            )
        };
    }
}

unsafe extern "C" fn mem_usage<A: State>(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    let heap = unsafe { state::<A>(value) }.map_or(0, State::heap_bytes);
    std::mem::size_of::<A>() + heap
}

unsafe extern "C" fn digest<A: State>(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    if let Some(state) = unsafe { state::<A>(value) } {
        let buf = encoded(state);
        // SAFETY: `md` is the digest being computed; the buffer outlives the calls.
        unsafe {
            rm!(RedisModule_DigestAddStringBuffer)(md, buffer_ptr(&buf).cast_mut(), buf.len());
            rm!(RedisModule_DigestEndSequence)(md);
        }
    }
}

/// Asked whether removals are wanted now (cheaply: a key leaves on every
/// expiry), then told the database and name of each key of ours that
/// leaves the keyspace (see [`on_removed`]).
static REMOVED: OnceLock<(fn() -> bool, Removed)> = OnceLock::new();

/// Told the database and name of a key that left. It opens no key: the
/// type's `unlink` runs inside whatever removed the key, a command of the
/// module's own among them, with its keys open, so it has no
/// [`KeyToken`](super::ctx::KeyToken) to lend.
pub type Removed = fn(c_int, &[u8]);

/// Has `removed` told of each key of ours that leaves the keyspace while
/// `wanted` says so (at load time: `super::super::waiters` decides its
/// waiters again).
pub fn on_removed(wanted: fn() -> bool, removed: Removed) {
    let _ = REMOVED.set((wanted, removed));
}

/// A key of this type leaves the keyspace (deleted, expired, evicted,
/// overwritten, renamed or moved away): clients waiting on it are decided
/// again, against what it holds then, at the waiters' next wake-up (made
/// due at once: see [`Removed`]).
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    let Some((wanted, removed)) = REMOVED.get() else {
        return;
    };
    if !wanted() {
        return;
    }
    // SAFETY: Redis passes the option context of this call.
    let (db, key) = unsafe { opt_ctx_key(ctx) };
    removed(db, &key);
}

/// How much freeing a value frees (`State::free_effort`): above 64, Redis
/// may free it in a background thread (`UNLINK`, `lazyfree-lazy-*`), calling
/// [`free`] there. That is sound: the value is then no key's and reachable
/// from that thread only, its `Rc`s are all inside it, and the allocator is
/// Redis's own, which its background threads use too.
unsafe extern "C" fn free_effort<A: State>(
    _key: *mut raw::RedisModuleString,
    value: *const c_void,
) -> usize {
    // SAFETY: Redis passes a value of this type.
    unsafe { state::<A>(value) }.map_or(1, |state| state.free_effort().max(1))
}

/// Frees a value: on the main thread, or in a background thread (lazy
/// free), hence the atomic count.
unsafe extern "C" fn free<A: TypedValue>(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: every value of this type was made by `Box::into_raw` of an `A`.
        let state = unsafe { Box::from_raw(value.cast::<A>()) };
        crate::policies::count_keys(state.policy_hash(), -1);
        drop(state);
        A::held().fetch_sub(1, Relaxed);
    }
}

unsafe extern "C" fn copy<A: TypedValue>(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: Redis passes a value of this type.
    match unsafe { state::<A>(value) } {
        Some(state) => {
            held_one_more::<A>();
            crate::policies::count_keys(state.policy_hash(), 1);
            Box::into_raw(Box::new(state.clone())).cast()
        }
        None => std::ptr::null_mut(),
    }
}

/// What the RDB's module aux data holds for this module: the named
/// policies (`crate::policies`), written by the first function before the
/// keys and read back by the second (which answers whether it could).
pub type Aux = (fn() -> Vec<u8>, fn(&[u8]) -> bool);

static AUX: OnceLock<Aux> = OnceLock::new();

/// The data type that carries the module's aux data in RDB files. It never
/// holds a key; its name is what an RDB file names the aux data by.
static AUX_TYPE: RedisType = RedisType::new(
    "rl-policy",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(no_value_load),
        rdb_save: Some(no_value_save),
        aof_rewrite: None,
        mem_usage: None,
        digest: None,
        free: None,
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as i32,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    },
);

/// Creates the aux data's type (at load time), saving and loading with `aux`.
pub fn create_aux(ctx: Ctx<'_>, aux: Aux) -> Result<(), String> {
    let _ = AUX.set(aux);
    create(ctx, &AUX_TYPE)
}

/// No key holds the aux type: a value of it in an RDB file is refused.
unsafe extern "C" fn no_value_load(_rdb: *mut raw::RedisModuleIO, _encver: c_int) -> *mut c_void {
    std::ptr::null_mut()
}

unsafe extern "C" fn no_value_save(_rdb: *mut raw::RedisModuleIO, _value: *mut c_void) {}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    if let Some((save, _)) = AUX.get() {
        let buf = save();
        // SAFETY: `rdb` is the open RDB stream; the buffer outlives the call.
        unsafe { rm!(RedisModule_SaveStringBuffer)(rdb, buffer_ptr(&buf), buf.len()) };
    }
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    const OK: c_int = raw::REDISMODULE_OK as c_int;
    const ERR: c_int = raw::REDISMODULE_ERR as c_int;
    if encver != ENCODING_VERSION || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return ERR;
    }
    let Some((_, load)) = AUX.get() else {
        return ERR;
    };
    let mut len = 0usize;
    // SAFETY: `rdb` is the open stream; Redis allocates the returned buffer.
    let ptr = unsafe { rm!(RedisModule_LoadStringBuffer)(rdb, &mut len) };
    // SAFETY: `rdb` is the open stream.
    if ptr.is_null() || unsafe { rm!(RedisModule_IsIOError)(rdb) } != 0 {
        if !ptr.is_null() {
            // SAFETY: allocated by Redis for us, freed once.
            unsafe { rm!(RedisModule_Free)(ptr.cast()) };
        }
        return ERR;
    }
    // SAFETY: Redis returned `len` readable bytes at `ptr`.
    let loaded = load(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) });
    // SAFETY: allocated by Redis for us, freed once, after its last use.
    unsafe { rm!(RedisModule_Free)(ptr.cast()) };
    if loaded {
        OK
    } else {
        ERR
    }
}
