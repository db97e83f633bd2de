//! The server's API table: Redis fills the `raw::RedisModule_*` function
//! pointers when the module loads; [`missing_apis`] checks at load time that
//! every one used here exists on this server, so the module refuses to load
//! rather than fail later.

use std::ffi::c_char;

use redis_module::raw;

/// The API function `$name`, checked at load time by [`missing_apis`]. Only
/// a function of that list can be named here: anything else does not build.
/// Once the load-time check passed, a release build calls it without
/// testing it again (a test and a branch per call, on every call the module
/// makes: about 75 instructions a check); a debug build tests it.
macro_rules! rm {
    ($name:ident) => {{
        let () = $crate::redis::ffi::api::listed::$name;
        // SAFETY: Redis writes these pointers once, while loading the module,
        // before any command or callback of ours can run; reading a copy is sound.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        match f {
            Some(f) => f,
            // Debug builds (the tests') still stop on a missing function.
            None if cfg!(debug_assertions) => {
                $crate::redis::ffi::api::missing_api(stringify!($name))
            }
            // SAFETY: never reached: the module refuses to load unless
            // `missing_apis` finds every listed function, `$name` is one
            // (the `listed` item above), and Redis writes the table once,
            // before the module's start-up checks it.
            None => {
                #[allow(unused_unsafe)]
                unsafe {
                    std::hint::unreachable_unchecked()
                };
            }
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
    RedisModule_InfoAddFieldCString,
    RedisModule_InfoBeginDictField,
    RedisModule_InfoEndDictField,
    RedisModule_RegisterBoolConfig,
    RedisModule_LoadConfigs,
    RedisModule_NotifyKeyspaceEvent,
    RedisModule_RegisterNumericConfig,
    RedisModule_GetAbsExpire,
    RedisModule_CreateString,
    RedisModule_FreeString,
    RedisModule_GetContextFlags,
    RedisModule_GetUsedMemoryRatio,
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
    RedisModule_KeyExists,
);

/// Unreachable once [`missing_apis`] passed at load time; in a debug
/// build, if it ever is reached, stop the server with a message rather
/// than call a null pointer.
#[cold]
pub fn missing_api(name: &str) -> ! {
    eprintln!("ratelimit: the Redis module API function {name} is missing");
    std::process::abort()
}

/// `*const c_char` of a buffer, for the `b` format of `Replicate`/`EmitAOF`.
pub fn buffer_ptr(buf: &[u8]) -> *const c_char {
    buf.as_ptr().cast::<c_char>()
}
