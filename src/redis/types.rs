//! The custom Redis data types, one per algorithm, and their callbacks:
//! RDB save/load, AOF rewrite, memory usage, digest, copy and free. All of
//! them go through the one encoding in `crate::encoding`, so what an RDB file
//! holds, what AOF rewrite emits and what replicas receive are the same bytes.

use std::ffi::{c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::api::{buffer_ptr, rm};
use super::stats::{self, Counter};
use crate::algorithms::concurrency::Leases;
use crate::algorithms::fixed_window::FixedWindow;
use crate::algorithms::gcra::Gcra;
use crate::algorithms::leaky_bucket::LeakyBucket;
use crate::algorithms::sliding_counter::SlidingCounter;
use crate::algorithms::sliding_log::SlidingLog;
use crate::algorithms::token_bucket::TokenBucket;
use crate::algorithms::{Algorithm, Decision, Mode, State};
use crate::error::CommandError;
use crate::parse::{self, CheckOptions};

/// The RDB encoding version of every type. The state's own tag byte says
/// which layout follows; this number changes only if the RDB framing does.
const ENCODING_VERSION: i32 = 1;

/// The command that sets a key to an absolute state: what an allowed check
/// replicates, what AOF rewrite emits. Deterministic: it carries the state,
/// the key's expiry follows from it.
pub const SET_STATE_COMMAND: &std::ffi::CStr = c"RL.SETSTATE";

/// A value stored in Redis: its type, and how it looks now (RL.INFO).
pub trait Stored: State + 'static {
    fn redis_type() -> &'static RedisType;

    /// What a request of 1 would be told at `now_ms`, changing nothing.
    fn peek(&self, now_ms: i64) -> Decision;
}

/// An algorithm with its own check command: how that command is parsed.
pub trait Checked: Stored + Algorithm {
    fn parse(args: &[&[u8]]) -> Result<(Self::Params, CheckOptions), CommandError>;

    /// Its command's line in `INFO ratelimit`.
    fn counter() -> &'static Counter;
}

/// Every algorithm looks at itself with its own check, in peek mode.
macro_rules! stored_algorithm {
    ($ty:ty, $redis_type:ident, $parse:path, $counter:ident) => {
        impl Stored for $ty {
            fn redis_type() -> &'static RedisType {
                &$redis_type
            }
            fn peek(&self, now_ms: i64) -> Decision {
                Self::check_with(Some(self), self.params(), now_ms, 1, Mode::Peek).0
            }
        }

        impl Checked for $ty {
            fn parse(args: &[&[u8]]) -> Result<(Self::Params, CheckOptions), CommandError> {
                $parse(args)
            }
            fn counter() -> &'static Counter {
                &stats::$counter
            }
        }
    };
}

pub static TOKEN_BUCKET_TYPE: RedisType =
    RedisType::new("rl_tokbkt", ENCODING_VERSION, methods::<TokenBucket>());
pub static SLIDING_COUNTER_TYPE: RedisType =
    RedisType::new("rl_slcntr", ENCODING_VERSION, methods::<SlidingCounter>());
pub static LEAKY_BUCKET_TYPE: RedisType =
    RedisType::new("rl_leakyb", ENCODING_VERSION, methods::<LeakyBucket>());
pub static FIXED_WINDOW_TYPE: RedisType =
    RedisType::new("rl_fixwin", ENCODING_VERSION, methods::<FixedWindow>());
pub static SLIDING_LOG_TYPE: RedisType =
    RedisType::new("rl_slolog", ENCODING_VERSION, methods::<SlidingLog>());
pub static GCRA_TYPE: RedisType = RedisType::new("rl_gcrast", ENCODING_VERSION, methods::<Gcra>());
pub static LEASES_TYPE: RedisType =
    RedisType::new("rl_leases", ENCODING_VERSION, methods::<Leases>());

stored_algorithm!(
    TokenBucket,
    TOKEN_BUCKET_TYPE,
    parse::token_bucket,
    TOKEN_BUCKET
);
stored_algorithm!(
    SlidingCounter,
    SLIDING_COUNTER_TYPE,
    parse::sliding_counter,
    SLIDING_COUNTER
);
stored_algorithm!(
    FixedWindow,
    FIXED_WINDOW_TYPE,
    parse::fixed_window,
    FIXED_WINDOW
);
stored_algorithm!(
    SlidingLog,
    SLIDING_LOG_TYPE,
    parse::sliding_log,
    SLIDING_LOG
);
stored_algorithm!(
    LeakyBucket,
    LEAKY_BUCKET_TYPE,
    parse::leaky_bucket,
    LEAKY_BUCKET
);
stored_algorithm!(Gcra, GCRA_TYPE, parse::gcra, GCRA);

impl Stored for Leases {
    fn redis_type() -> &'static RedisType {
        &LEASES_TYPE
    }
    fn peek(&self, now_ms: i64) -> Decision {
        Leases::peek(self, now_ms)
    }
}

/// Calls `$f::<A>($args)` for the algorithm whose tag starts `$bytes`.
macro_rules! dispatch_on_tag {
    ($bytes:expr, $f:ident($($args:expr),*), $otherwise:expr) => {
        match $bytes.first() {
            Some(&TokenBucket::TAG) => $f::<TokenBucket>($($args),*),
            Some(&SlidingCounter::TAG) => $f::<SlidingCounter>($($args),*),
            Some(&FixedWindow::TAG) => $f::<FixedWindow>($($args),*),
            Some(&SlidingLog::TAG) => $f::<SlidingLog>($($args),*),
            Some(&LeakyBucket::TAG) => $f::<LeakyBucket>($($args),*),
            Some(&Gcra::TAG) => $f::<Gcra>($($args),*),
            Some(&Leases::TAG) => $f::<Leases>($($args),*),
            _ => $otherwise,
        }
    };
}
pub(crate) use dispatch_on_tag;

const fn methods<A: Stored>() -> raw::RedisModuleTypeMethods {
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
        free_effort: None,
        unlink: None,
        copy: Some(copy::<A>),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
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

unsafe extern "C" fn rdb_save<A: Stored>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    if let Some(state) = unsafe { state::<A>(value) } {
        let buf = encoded(state);
        // SAFETY: `rdb` is the open RDB stream; the buffer outlives the call.
        unsafe { rm!(RedisModule_SaveStringBuffer)(rdb, buffer_ptr(&buf), buf.len()) };
    }
}

/// Reads a state back; any buffer that is not exactly one this module writes
/// fails the load (null), logged, without a panic.
unsafe extern "C" fn rdb_load<A: Stored>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
) -> *mut c_void {
    let refuse = |why: &str| {
        let msg = std::ffi::CString::new(format!(
            "ratelimit: cannot load a {} value: {why}",
            A::redis_type_name()
        ))
        .unwrap_or_default();
        // SAFETY: `rdb` is the open stream; the format is "%s" with one C string.
        unsafe {
            rm!(RedisModule_LogIOError)(rdb, c"warning".as_ptr(), c"%s".as_ptr(), msg.as_ptr())
        };
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
    let decoded = A::decode(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) });
    // SAFETY: allocated by Redis for us, freed once, after its last use.
    unsafe { rm!(RedisModule_Free)(ptr.cast()) };
    match decoded {
        Ok(state) => Box::into_raw(Box::new(state)).cast(),
        Err(e) => refuse(e.0),
    }
}

unsafe extern "C" fn aof_rewrite<A: Stored>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    if let Some(state) = unsafe { state::<A>(value) } {
        let buf = encoded(state);
        // SAFETY: `aof` is the rewrite stream, `key` a live string; format
        // "sb" takes a string object then a buffer and its length.
        unsafe {
            rm!(RedisModule_EmitAOF)(
                aof,
                SET_STATE_COMMAND.as_ptr(),
                c"sb".as_ptr(),
                key,
                buffer_ptr(&buf),
                buf.len(),
            )
        };
    }
}

unsafe extern "C" fn mem_usage<A: Stored>(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    let heap = unsafe { state::<A>(value) }.map_or(0, State::heap_bytes);
    std::mem::size_of::<A>() + heap
}

unsafe extern "C" fn digest<A: Stored>(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
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

unsafe extern "C" fn free<A: Stored>(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: every value of this type was made by `Box::into_raw` of an `A`.
        drop(unsafe { Box::from_raw(value.cast::<A>()) });
    }
}

unsafe extern "C" fn copy<A: Stored>(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: Redis passes a value of this type.
    match unsafe { state::<A>(value) } {
        Some(state) => Box::into_raw(Box::new(state.clone())).cast(),
        None => std::ptr::null_mut(),
    }
}

/// The name of a type, for log lines.
trait TypeName {
    fn redis_type_name() -> &'static str;
}

impl<A: Stored> TypeName for A {
    fn redis_type_name() -> &'static str {
        std::any::type_name::<A>()
            .rsplit("::")
            .next()
            .unwrap_or("ratelimit")
    }
}
