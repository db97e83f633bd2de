//! The context of a command or callback ([`Ctx`]), its replies and the
//! few calls about the running command; the one place Redis calls a
//! command ([`run`], through [`command!`](macro@super::command)); and the
//! token a call lends to every key it opens ([`KeyToken`]).

use std::ffi::{c_int, c_long, c_longlong, CStr, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use redis_module::raw;

use super::api::{buffer_ptr, rm};
use super::args::{Args, KeyName};
use crate::algorithms::Field;
use crate::error::CommandError;

/// The context of the running command, valid while it runs (`'a`). Raw
/// context pointers are turned into this once, where Redis calls the
/// module ([`run`]), so nothing else can be handed a stray pointer.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    ptr: *mut raw::RedisModuleCtx,
    life: PhantomData<&'a raw::RedisModuleCtx>,
}

/// This server's role as tracked ([`track_role`]): unknown until then.
static ROLE: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const PRIMARY: u8 = 1;
const REPLICA: u8 = 2;

/// Tracks this server's role from now on: `Some(replica)` at each change
/// (`super::server::on_role_change`, whose event follows every way a role
/// changes: `REPLICAOF`, both sides of `FAILOVER`, a cluster's failover),
/// `None` to ask the server each time again. A check by name reads the
/// role on every request; asking the server (`RedisModule_GetContextFlags`,
/// which gathers every flag) cost it about 130 instructions.
pub fn track_role(replica: Option<bool>) {
    let role = match replica {
        None => UNKNOWN,
        Some(false) => PRIMARY,
        Some(true) => REPLICA,
    };
    ROLE.store(role, Relaxed);
}

/// Makes the `extern "C"` function Redis calls for a command from its body,
/// a safe function of the running command's context, its [`KeyToken`] and
/// its arguments:
/// `command!(pub fn all_command => all_reply);`, or, generic over one type,
/// `command!(pub fn check_command<A: Checked> => check_reply::<A>);`. Every
/// command's function is made here, so none handles a raw pointer.
macro_rules! command {
    ($(#[$attr:meta])* $vis:vis fn $name:ident $(<$g:ident: $bound:path>)? => $body:expr;) => {
        $(#[$attr])*
        $vis unsafe extern "C" fn $name $(<$g: $bound>)? (
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: Redis calls a command's function with that command's
            // own context and arguments.
            unsafe { $crate::redis::ffi::ctx::run(ctx, argv, argc, $body) }
        }
    };
}
pub(crate) use command;

/// The C signature of a command.
pub type Handler = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Runs a command's body on typed handles, lending it the command's one
/// [`KeyToken`]. Every `extern "C"` command function is one call of this
/// ([`command!`]).
///
/// # Safety
/// `ctx`, `argv` and `argc` must be those Redis passed to the running command.
pub unsafe fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: fn(Ctx<'_>, &mut KeyToken, &Args<'_>) -> Status,
) -> c_int {
    // SAFETY: per this function's contract.
    let (ctx, args) = unsafe { (Ctx::new(ctx), Args::new(argv, argc)) };
    body(ctx, &mut KeyToken::new(), &args);
    raw::REDISMODULE_OK as c_int
}

/// The right to have one key open: opening a key (`crate::redis::key`)
/// borrows the token mutably until the key is closed (dropped), so a
/// second key opened while one is open, for reading or writing, of the
/// same name or another, does not compile (E0499). Key names are run-time
/// values, so types cannot tell two opens of one name from opens of two
/// names; they forbid both, and the engine needs no more (`RL.ALL` plans,
/// takes and settles its tiers one after another). Two opens of one name
/// would lend its state twice (two `&mut`, or a `&` beside a `&mut`).
/// Nothing at run time: a token has no bytes.
///
/// Made only here, in the FFI room, one for each call of Redis into the
/// module that may open keys: a command ([`run`]), the waiters' timer and
/// a blocked client's `CLIENT UNBLOCK` and disconnect callbacks
/// (`super::block`), the flush and swap events (`super::server`). None of
/// these runs inside another call into the module; the one callback that
/// does (the type's `unlink`, inside a command's delete or its open of a
/// key found expired, `super::types`) opens nothing and has no token. Each
/// lends its one token down to every place that opens a key; code outside
/// this room cannot make one (its constructor is the room's), so a command
/// cannot have two. Debug builds check it at run time too: a key opened
/// while another is open stops the server (`super::key`).
pub struct KeyToken {
    /// Private: no token is made outside this room.
    _private: (),
}

impl KeyToken {
    /// The token of one call of Redis into the module, made where the
    /// call enters (see [`KeyToken`]).
    #[inline(always)]
    pub(super) fn new() -> Self {
        KeyToken { _private: () }
    }

    /// A token for the engine's unit tests, whose keys live in memory.
    #[cfg(test)]
    pub(crate) fn in_memory() -> Self {
        KeyToken { _private: () }
    }
}

/// What a command body returns: the reply was sent.
pub struct Status;

impl<'a> Ctx<'a> {
    /// # Safety
    /// `ptr` must be a context Redis handed the module, valid for `'a`.
    pub(super) unsafe fn new(ptr: *mut raw::RedisModuleCtx) -> Self {
        Self {
            ptr,
            life: PhantomData,
        }
    }

    /// The loading context the module's start-up is handed, for as long as
    /// the crate's handle of it lives.
    pub fn loading(ctx: &'a redis_module::Context) -> Self {
        Self {
            ptr: ctx.get_raw(),
            life: PhantomData,
        }
    }

    /// At load time: the module signals the keys it modifies itself (so a
    /// peek or a denial does not disturb `WATCH`), and handles RDB read
    /// errors itself.
    pub fn signal_explicitly_and_handle_io_errors(self) {
        let options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
            | raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS;
        // SAFETY: `ptr` is the loading context.
        unsafe { rm!(RedisModule_SetModuleOptions)(self.ptr, options as c_int) };
    }

    /// Whether Redis says it is out of memory (over `maxmemory`) now.
    #[inline(always)]
    pub fn out_of_memory(self) -> bool {
        // Redis flags OOM when the memory it counts exceeds `maxmemory`,
        // that is when this share (0 without a `maxmemory`) exceeds 1. Read
        // first, it costs a quarter of the context's flags (which compute a
        // dozen other things): well below 1 it cannot be OOM, whatever a
        // float's rounding, so the flags are asked only near the limit.
        // SAFETY: takes no arguments, reads the server's memory figures.
        if unsafe { rm!(RedisModule_GetUsedMemoryRatio)() } < 0.99 {
            return false;
        }
        self.flags() & raw::REDISMODULE_CTX_FLAGS_OOM as c_int != 0
    }

    /// The raw pointer, for the API calls of this layer.
    pub(super) fn raw(self) -> *mut raw::RedisModuleCtx {
        self.ptr
    }

    /// A reply of integers: an array of them.
    pub fn reply_integers(self, values: &[i64]) -> Status {
        self.reply_array(values.len());
        // The API's pointer read once for the array, not once an integer.
        let reply = rm!(RedisModule_ReplyWithLongLong);
        for &v in values {
            // SAFETY: `ptr` is the running command's context.
            unsafe { reply(self.ptr, v as c_longlong) };
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

    /// Declares the argument at `position` of `args` (the running
    /// command's) a key, answering a keys-position request; a position
    /// beyond the arguments is not declared.
    pub fn key_at_pos(self, args: &Args<'_>, position: usize) {
        let Ok(at) = c_int::try_from(position) else {
            return;
        };
        if position < args.len() {
            // SAFETY: `ptr` is the running command's context; `at` is one
            // of its arguments.
            unsafe { rm!(RedisModule_KeyAtPos)(self.ptr, at) };
        }
    }

    /// Whether the running command comes from this server's primary or its
    /// AOF file, rather than from a client.
    pub fn sent_by_primary_or_aof(self) -> bool {
        let trusted = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
        self.flags() & trusted as c_int != 0
    }

    /// Whether this server appends to an AOF (`appendonly yes`).
    pub fn aof_on(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_AOF as c_int != 0
    }

    /// Whether this server is a replica (its data comes from its primary):
    /// its role as last tracked ([`track_role`]), without asking the
    /// server; asked when it is not tracked.
    pub fn is_replica(self) -> bool {
        match ROLE.load(Relaxed) {
            PRIMARY => false,
            REPLICA => true,
            _ => self.flags() & raw::REDISMODULE_CTX_FLAGS_SLAVE as c_int != 0,
        }
    }

    /// Propagates the running command as it is (to replicas and the AOF).
    pub fn replicate_verbatim(self) {
        // SAFETY: `ptr` is the running command's context.
        unsafe { rm!(RedisModule_ReplicateVerbatim)(self.ptr) };
    }

    /// Propagates `RL.SETSTATE key state PXAT at_ms`.
    pub fn replicate_set_state(self, key: KeyName<'_>, state: &[u8], at_ms: i64) {
        // SAFETY: `ptr` is the running command's context; format "sbcl"
        // takes the key, the state's bytes and length, a C string and a
        // long long; Redis copies them.
        unsafe {
            rm!(RedisModule_Replicate)(
                self.ptr,
                c"RL.SETSTATE".as_ptr(),
                c"sbcl".as_ptr(),
                key.raw(),
                buffer_ptr(state),
                state.len(),
                c"PXAT".as_ptr(),
                at_ms,
            )
        };
    }

    /// The database the context has selected.
    pub fn selected_db(self) -> c_int {
        // SAFETY: `ptr` is a live context.
        unsafe { rm!(RedisModule_GetSelectedDb)(self.ptr) }
    }

    /// Selects the database `db` for what the context does next (a timer's
    /// context, serving the waiters of a key of `db`).
    pub fn select_db(self, db: c_int) {
        // SAFETY: `ptr` is a live context; Redis refuses a database that
        // does not exist.
        unsafe { rm!(RedisModule_SelectDb)(self.ptr, db) };
    }

    /// Publishes the keyspace event `event` of module keys on `key`.
    pub fn notify_module_event(self, event: &CStr, key: KeyName<'_>) {
        // SAFETY: `ptr` and the key belong to the running command; the
        // event name is a C string Redis copies.
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent)(
                self.ptr,
                raw::REDISMODULE_NOTIFY_MODULE as c_int,
                event.as_ptr(),
                key.raw(),
            )
        };
    }

    /// Tells Redis the key changed (WATCH, client-side caching).
    pub fn signal_modified(self, name: KeyName<'_>) {
        // SAFETY: `ptr` and the name belong to the running command.
        unsafe { rm!(RedisModule_SignalModifiedKey)(self.ptr, name.raw()) };
    }
}
