//! The few Redis module API calls this module makes, behind small safe
//! functions. Redis fills the `raw::RedisModule_*` function pointers when the
//! module loads; [`missing_apis`] checks at load time that every one used here
//! exists on this server, so the module refuses to load rather than fail later.

use std::ffi::{c_char, c_int, c_long, c_longlong, CString};

use redis_module::raw;

use crate::algorithms::Field;
use crate::error::CommandError;

/// The API function `$name`, checked at load time by [`missing_apis`].
macro_rules! rm {
    ($name:ident) => {{
        // SAFETY: Redis writes these pointers once, while loading the module,
        // before any command or callback of ours can run; reading a copy is sound.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        match f {
            Some(f) => f,
            None => $crate::redis::api::missing_api(stringify!($name)),
        }
    }};
}
pub(crate) use rm;

/// Every API function the module calls. Keep in step with the `rm!` uses.
macro_rules! required {
    ($($name:ident),* $(,)?) => {
        /// The names of required API functions this server lacks.
        pub fn missing_apis() -> Vec<&'static str> {
            let mut missing = Vec::new();
            // SAFETY: as in `rm!`: written once at load, read here after that.
            $(if unsafe { raw::$name }.is_none() { missing.push(stringify!($name)); })*
            missing
        }
    };
}

required!(
    RedisModule_StringPtrLen,
    RedisModule_ReplyWithArray,
    RedisModule_ReplyWithLongLong,
    RedisModule_ReplyWithError,
    RedisModule_ReplyWithSimpleString,
    RedisModule_WrongArity,
    RedisModule_OpenKey,
    RedisModule_CloseKey,
    RedisModule_KeyType,
    RedisModule_ModuleTypeGetType,
    RedisModule_ModuleTypeGetValue,
    RedisModule_ModuleTypeSetValue,
    RedisModule_SetAbsExpire,
    RedisModule_Milliseconds,
    RedisModule_Replicate,
    RedisModule_ReplicateVerbatim,
    RedisModule_SignalModifiedKey,
    RedisModule_SetModuleOptions,
    RedisModule_CreateCommand,
    RedisModule_GetCommand,
    RedisModule_SetCommandInfo,
    RedisModule_EmitAOF,
    RedisModule_SaveStringBuffer,
    RedisModule_LoadStringBuffer,
    RedisModule_IsIOError,
    RedisModule_LogIOError,
    RedisModule_Free,
    RedisModule_DigestAddStringBuffer,
    RedisModule_DigestEndSequence,
    RedisModule_ReplyWithMap,
    RedisModule_ReplyWithDouble,
    RedisModule_ReplyWithNull,
    RedisModule_ReplyWithStringBuffer,
    RedisModule_GetRandomHexChars,
    RedisModule_GetExpire,
    RedisModule_DeleteKey,
    RedisModule_IsKeysPositionRequest,
    RedisModule_KeyAtPos,
    RedisModule_RegisterInfoFunc,
    RedisModule_InfoAddSection,
    RedisModule_InfoAddFieldULongLong,
    RedisModule_RegisterBoolConfig,
    RedisModule_LoadConfigs,
    RedisModule_NotifyKeyspaceEvent,
);

/// Unreachable once [`missing_apis`] passed at load time; if it ever is
/// reached, stop the server with a message rather than call a null pointer.
#[cold]
pub fn missing_api(name: &str) -> ! {
    eprintln!("ratelimit: the Redis module API function {name} is missing");
    std::process::abort()
}

/// The server's clock, in Unix milliseconds.
pub fn now_ms() -> i64 {
    // SAFETY: takes no arguments, reads the server's clock.
    unsafe { rm!(RedisModule_Milliseconds)() }
}

/// The command's arguments, as Redis passed them.
pub struct Args {
    argv: *mut *mut raw::RedisModuleString,
    argc: usize,
}

impl Args {
    /// # Safety
    /// `argv` and `argc` must be those Redis passed to the running command.
    pub unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        Self {
            argv,
            argc: usize::try_from(argc).unwrap_or(0),
        }
    }

    pub fn len(&self) -> usize {
        self.argc
    }

    /// The `i`th argument as Redis's string object (for keys and replication).
    pub fn raw(&self, i: usize) -> Option<*mut raw::RedisModuleString> {
        // SAFETY: `argv` holds `argc` valid pointers for the command's duration.
        (i < self.argc).then(|| unsafe { *self.argv.add(i) })
    }

    /// The `i`th argument's bytes.
    pub fn bytes(&self, i: usize) -> Option<&[u8]> {
        self.raw(i).map(|s| string_bytes(s))
    }

    /// The bytes of every argument from `from` on.
    pub fn bytes_from(&self, from: usize) -> Words<'_> {
        let mut words = Words {
            inline: [&[]; INLINE_WORDS],
            len: 0,
            spilled: Vec::new(),
        };
        let count = self.argc.saturating_sub(from);
        if count <= INLINE_WORDS {
            for (slot, i) in words.inline.iter_mut().zip(from..self.argc) {
                *slot = self.bytes(i).unwrap_or_default();
            }
            words.len = count;
        } else {
            words.spilled = (from..self.argc).filter_map(|i| self.bytes(i)).collect();
        }
        words
    }
}

/// Arguments held on the stack up to this many (every check command with
/// its options fits), so parsing allocates nothing.
const INLINE_WORDS: usize = 12;

/// Argument bytes, as a slice (`Deref`), without a heap allocation for the
/// usual short commands.
pub struct Words<'a> {
    inline: [&'a [u8]; INLINE_WORDS],
    len: usize,
    spilled: Vec<&'a [u8]>,
}

impl<'a> std::ops::Deref for Words<'a> {
    type Target = [&'a [u8]];

    fn deref(&self) -> &Self::Target {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }
}

/// The bytes of a Redis string object, valid while the object lives.
pub fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: `s` is a live string object; Redis returns a pointer to its
    // `len` bytes, which stay valid and unchanged while the object lives.
    unsafe {
        let ptr = rm!(RedisModule_StringPtrLen)(s, &mut len);
        if ptr.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }
}

/// A request's reply: an array of integers.
pub fn reply_integers(ctx: *mut raw::RedisModuleCtx, values: &[i64]) -> c_int {
    // SAFETY: `ctx` is the running command's context.
    unsafe {
        rm!(RedisModule_ReplyWithArray)(ctx, values.len() as c_long);
        for &v in values {
            rm!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// A reply of field/value pairs: a map under RESP3, a flat array of
/// alternating names and values under RESP2.
pub fn reply_fields(ctx: *mut raw::RedisModuleCtx, fields: &[(&str, Field)]) -> c_int {
    // SAFETY: `ctx` is the running command's context.
    unsafe { rm!(RedisModule_ReplyWithMap)(ctx, fields.len() as c_long) };
    for (name, value) in fields {
        reply_bytes(ctx, name.as_bytes());
        reply_field(ctx, value);
    }
    raw::REDISMODULE_OK as c_int
}

fn reply_field(ctx: *mut raw::RedisModuleCtx, field: &Field) {
    match field {
        // SAFETY (all arms): `ctx` is the running command's context.
        Field::Int(v) => unsafe {
            rm!(RedisModule_ReplyWithLongLong)(ctx, *v as c_longlong);
        },
        Field::Float(v) => unsafe {
            rm!(RedisModule_ReplyWithDouble)(ctx, *v);
        },
        Field::Text(bytes) => reply_bytes(ctx, bytes),
        Field::List(items) => {
            // SAFETY: as above.
            unsafe { rm!(RedisModule_ReplyWithArray)(ctx, items.len() as c_long) };
            for item in items {
                reply_field(ctx, item);
            }
        }
    }
}

/// A bulk string.
pub fn reply_bytes(ctx: *mut raw::RedisModuleCtx, bytes: &[u8]) {
    // SAFETY: `ctx` is the running command's context; Redis copies the bytes.
    unsafe { rm!(RedisModule_ReplyWithStringBuffer)(ctx, buffer_ptr(bytes), bytes.len()) };
}

pub fn reply_null(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // SAFETY: `ctx` is the running command's context.
    unsafe { rm!(RedisModule_ReplyWithNull)(ctx) };
    raw::REDISMODULE_OK as c_int
}

/// `len` random hex characters from the server's own generator, which is
/// seeded from the operating system's entropy: not guessable by a client.
pub fn random_hex(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` has room for exactly `len` bytes.
    unsafe { rm!(RedisModule_GetRandomHexChars)(out.as_mut_ptr().cast::<c_char>(), len) };
    out
}

pub fn reply_ok(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // SAFETY: `ctx` is the running command's context; the message is a C string.
    unsafe { rm!(RedisModule_ReplyWithSimpleString)(ctx, c"OK".as_ptr()) };
    raw::REDISMODULE_OK as c_int
}

pub fn reply_error(ctx: *mut raw::RedisModuleCtx, error: &CommandError) -> c_int {
    match error {
        // SAFETY: `ctx` is the running command's context.
        CommandError::Arity => unsafe { rm!(RedisModule_WrongArity)(ctx) },
        CommandError::Reply(text) => {
            let text = CString::new(text.replace('\0', "?")).unwrap_or_default();
            // SAFETY: `ctx` is the running command's context; `text` is a C
            // string that outlives the call (Redis copies it).
            unsafe { rm!(RedisModule_ReplyWithError)(ctx, text.as_ptr()) }
        }
    };
    raw::REDISMODULE_OK as c_int
}

/// `*const c_char` of a buffer, for the `b` format of `Replicate`/`EmitAOF`.
pub fn buffer_ptr(buf: &[u8]) -> *const c_char {
    buf.as_ptr().cast::<c_char>()
}
