//! The few Redis module API calls this module makes, behind small safe
//! functions. Redis fills the `raw::RedisModule_*` function pointers when the
//! module loads; [`missing_apis`] checks at load time that every one used here
//! exists on this server, so the module refuses to load rather than fail later.

use std::ffi::{c_char, c_int, c_long, c_longlong, c_void, CString};
use std::marker::PhantomData;

use redis_module::raw;

use crate::algorithms::Field;
use crate::error::CommandError;

/// The API function `$name`, checked at load time by [`missing_apis`]. Only
/// a function of that list can be named here: anything else does not build.
macro_rules! rm {
    ($name:ident) => {{
        let () = $crate::redis::ffi::listed::$name;
        // SAFETY: Redis writes these pointers once, while loading the module,
        // before any command or callback of ours can run; reading a copy is sound.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        match f {
            Some(f) => f,
            None => $crate::redis::ffi::missing_api(stringify!($name)),
        }
    }};
}
pub(crate) use rm;

/// Every API function the module calls, checked at load time. The list and
/// the calls cannot drift apart: `rm!` of a function not listed does not
/// build, and a listed function that nothing calls is dead code (`make lint`
/// refuses it).
macro_rules! required {
    ($($name:ident),* $(,)?) => {
        /// One item per listed function, for `rm!` to name.
        #[allow(non_upper_case_globals)]
        pub(crate) mod listed {
            $(pub(crate) const $name: () = ();)*
        }

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
    RedisModule_RegisterNumericConfig,
    RedisModule_GetAbsExpire,
    RedisModule_CreateString,
    RedisModule_FreeString,
    RedisModule_GetContextFlags,
    RedisModule_BlockClient,
    RedisModule_UnblockClient,
    RedisModule_GetBlockedClientPrivateData,
    RedisModule_GetBlockedClientHandle,
    RedisModule_SetDisconnectCallback,
    RedisModule_CreateTimer,
    RedisModule_StopTimer,
    RedisModule_GetSelectedDb,
    RedisModule_SelectDb,
    RedisModule_AvoidReplicaTraffic,
    RedisModule_GetKeyNameFromOptCtx,
    RedisModule_GetDbIdFromOptCtx,
    RedisModule_GetDetachedThreadSafeContext,
    RedisModule_SubscribeToServerEvent,
    RedisModule_Call,
    RedisModule_CallReplyType,
    RedisModule_CallReplyStringPtr,
    RedisModule_CallReplyArrayElement,
    RedisModule_FreeCallReply,
    RedisModule_DbSize,
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
    (db, string_bytes(name).to_vec())
}

/// Calls `callback` on `event` (a `REDISMODULE_EVENT_*` id) of the server.
pub fn subscribe_server_event(
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

/// A reply of one of Redis's own commands, run by the module, freed when
/// dropped.
struct CallReply(*mut raw::RedisModuleCallReply);

impl CallReply {
    /// The text of a string reply (or of the element `index` of an array).
    fn text(&self, index: Option<usize>) -> Option<Vec<u8>> {
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

/// The context of the running command, valid while it runs (`'a`). Raw
/// context pointers are turned into this once, where Redis calls the
/// module ([`run`]), so nothing else can be handed a stray pointer.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    ptr: *mut raw::RedisModuleCtx,
    life: PhantomData<&'a raw::RedisModuleCtx>,
}

/// A key's name, as the Redis string object a command was given: lives as
/// long as the command's arguments (`'a`).
#[derive(Clone, Copy)]
pub struct KeyName<'a> {
    ptr: *mut raw::RedisModuleString,
    life: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> KeyName<'a> {
    /// # Safety
    /// `ptr` must be a live string object for `'a`.
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleString) -> Self {
        Self {
            ptr,
            life: PhantomData,
        }
    }

    pub fn raw(self) -> *mut raw::RedisModuleString {
        self.ptr
    }

    pub fn bytes(self) -> &'a [u8] {
        string_bytes(self.ptr)
    }
}

/// The C signature of a command.
pub type Handler = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Runs a command's body on typed handles. Every `extern "C"` command
/// function is one call of this.
///
/// # Safety
/// `ctx`, `argv` and `argc` must be those Redis passed to the running command.
pub unsafe fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: fn(Ctx<'_>, &Args<'_>) -> Status,
) -> c_int {
    // SAFETY: per this function's contract.
    let (ctx, args) = unsafe { (Ctx::new(ctx), Args::new(argv, argc)) };
    body(ctx, &args);
    raw::REDISMODULE_OK as c_int
}

/// What a command body returns: the reply was sent.
pub struct Status;

impl<'a> Ctx<'a> {
    /// # Safety
    /// `ptr` must be a context Redis handed the module, valid for `'a`.
    pub unsafe fn new(ptr: *mut raw::RedisModuleCtx) -> Self {
        Self {
            ptr,
            life: PhantomData,
        }
    }

    /// The raw pointer, for the API calls of this layer.
    pub fn raw(self) -> *mut raw::RedisModuleCtx {
        self.ptr
    }

    /// A reply of integers: an array of them.
    pub fn reply_integers(self, values: &[i64]) -> Status {
        self.reply_array(values.len());
        for &v in values {
            self.reply_integer(v);
        }
        Status
    }

    pub fn reply_integer(self, value: i64) -> Status {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_ReplyWithLongLong)(self.ptr, value as c_longlong) };
        Status
    }

    /// The header of an array of `len` elements; the elements follow.
    pub fn reply_array(self, len: usize) {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_ReplyWithArray)(self.ptr, len as c_long) };
    }

    /// A reply of field/value pairs: a map under RESP3, a flat array of
    /// alternating names and values under RESP2.
    pub fn reply_fields(self, fields: &[(&str, Field)]) -> Status {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_ReplyWithMap)(self.ptr, fields.len() as c_long) };
        for (name, value) in fields {
            self.reply_bytes(name.as_bytes());
            self.reply_field(value);
        }
        Status
    }

    fn reply_field(self, field: &Field) {
        match field {
            Field::Int(v) => {
                self.reply_integer(*v);
            }
            // SAFETY: `ptr` is the running command's context.
            Field::Float(v) => unsafe {
                rm!(RedisModule_ReplyWithDouble)(self.ptr, *v);
            },
            Field::Text(bytes) => {
                self.reply_bytes(bytes);
            }
            Field::List(items) => {
                self.reply_array(items.len());
                for item in items {
                    self.reply_field(item);
                }
            }
        }
    }

    /// A bulk string.
    pub fn reply_bytes(self, bytes: &[u8]) -> Status {
        // SAFETY: `ptr` is the running command's context; Redis copies the bytes.
        unsafe { rm!(RedisModule_ReplyWithStringBuffer)(self.ptr, buffer_ptr(bytes), bytes.len()) };
        Status
    }

    pub fn reply_null(self) -> Status {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_ReplyWithNull)(self.ptr) };
        Status
    }

    pub fn reply_ok(self) -> Status {
        // SAFETY: `ptr` is the running command's context; the message is a C string.
        unsafe { rm!(RedisModule_ReplyWithSimpleString)(self.ptr, c"OK".as_ptr()) };
        Status
    }

    pub fn reply_error(self, error: &CommandError) -> Status {
        match error {
            // SAFETY: `ptr` is the running command's context.
            CommandError::Arity => unsafe { rm!(RedisModule_WrongArity)(self.ptr) },
            CommandError::Reply(text) => {
                let text = CString::new(text.replace('\0', "?")).unwrap_or_default();
                // SAFETY: `ptr` is the running command's context; `text` is a C
                // string that outlives the call (Redis copies it).
                unsafe { rm!(RedisModule_ReplyWithError)(self.ptr, text.as_ptr()) }
            }
        };
        Status
    }

    /// Whether Redis asks which arguments are keys, rather than running the
    /// command (commands flagged `getkeys-api`).
    pub fn is_keys_position_request(self) -> bool {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_IsKeysPositionRequest)(self.ptr) != 0 }
    }

    /// `REDISMODULE_CTX_FLAGS_*` of the running command.
    pub fn flags(self) -> c_int {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_GetContextFlags)(self.ptr) }
    }

    /// Tells Redis the key changed (WATCH, client-side caching).
    pub fn signal_modified(self, name: KeyName<'_>) {
        // SAFETY: `ptr` and the name belong to the running command.
        unsafe { rm!(RedisModule_SignalModifiedKey)(self.ptr, name.raw()) };
    }
}

/// The command's arguments, as Redis passed them.
pub struct Args<'a> {
    argv: *mut *mut raw::RedisModuleString,
    argc: usize,
    life: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> Args<'a> {
    /// # Safety
    /// `argv` and `argc` must be those Redis passed to the running command.
    pub unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        Self {
            argv,
            argc: usize::try_from(argc).unwrap_or(0),
            life: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.argc
    }

    /// The `i`th argument as a key name.
    pub fn key(&self, i: usize) -> Option<KeyName<'a>> {
        // SAFETY: `argv` holds `argc` valid pointers for the command's duration.
        (i < self.argc).then(|| KeyName {
            ptr: unsafe { *self.argv.add(i) },
            life: PhantomData,
        })
    }

    /// The `i`th argument's bytes.
    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        self.key(i).map(KeyName::bytes)
    }

    /// Puts `new` in place of the `i`th argument and returns the old one.
    ///
    /// # Safety
    /// `i` < `len()`; `new` is a live string object; the caller puts the old
    /// argument back before the command returns, and nothing reads the
    /// argument vector in between but Redis's own propagation call, which
    /// takes references of its own (see `super::replicate`).
    pub unsafe fn replace(
        &self,
        i: usize,
        new: *mut raw::RedisModuleString,
    ) -> *mut raw::RedisModuleString {
        // SAFETY: per this function's contract, `i` is within `argv`.
        unsafe { std::ptr::replace(self.argv.add(i), new) }
    }

    /// The bytes of every argument from `from` on.
    pub fn bytes_from(&self, from: usize) -> Words<'a> {
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

impl std::ops::DerefMut for Words<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        if self.spilled.is_empty() {
            &mut self.inline[..self.len]
        } else {
            &mut self.spilled
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

/// `len` random hex characters from the server's own generator, which is
/// seeded from the operating system's entropy: not guessable by a client.
pub fn random_hex(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` has room for exactly `len` bytes.
    unsafe { rm!(RedisModule_GetRandomHexChars)(out.as_mut_ptr().cast::<c_char>(), len) };
    out
}

/// `*const c_char` of a buffer, for the `b` format of `Replicate`/`EmitAOF`.
pub fn buffer_ptr(buf: &[u8]) -> *const c_char {
    buf.as_ptr().cast::<c_char>()
}
