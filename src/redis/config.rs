//! Module configuration: `CONFIG SET/GET ratelimit.<name>`, a
//! `ratelimit.<name> <value>` line in redis.conf, or `<name> <value>` pairs
//! after the module's path in `loadmodule`.
//!
//! - `deny-events` (yes/no, default no): publish a keyspace event
//!   `rl.denied` on a key each time a request on it is denied, so operators
//!   can watch for abuse. Redis delivers it only when keyspace events of
//!   module keys are on too (`notify-keyspace-events` with `d`, e.g. `Kd`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::raw;

use super::api::{rm, Ctx, KeyName};

static DENY_EVENTS: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn get_bool(_name: *const c_char, privdata: *mut c_void) -> c_int {
    // SAFETY: `privdata` is the `&'static AtomicBool` given at registration.
    let flag = unsafe { &*privdata.cast::<AtomicBool>() };
    c_int::from(flag.load(Relaxed))
}

unsafe extern "C" fn set_bool(
    _name: *const c_char,
    value: c_int,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in `get_bool`.
    let flag = unsafe { &*privdata.cast::<AtomicBool>() };
    flag.store(value != 0, Relaxed);
    raw::REDISMODULE_OK as c_int
}

/// Registers the settings and loads their values from redis.conf, then from
/// the `loadmodule` arguments. An unknown name or a bad value fails the load.
pub fn register(ctx: *mut raw::RedisModuleCtx, args: &[&[u8]]) -> Result<(), String> {
    // SAFETY: `ctx` is the loading context; the name is a static C string;
    // `privdata` points to a static that outlives the module.
    let status = unsafe {
        rm!(RedisModule_RegisterBoolConfig)(
            ctx,
            c"deny-events".as_ptr(),
            0,
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_bool),
            Some(set_bool),
            None,
            std::ptr::from_ref(&DENY_EVENTS).cast_mut().cast(),
        )
    };
    if status != raw::REDISMODULE_OK as c_int {
        return Err("cannot register the setting deny-events".into());
    }
    // SAFETY: `ctx` is the loading context, after every registration.
    if unsafe { rm!(RedisModule_LoadConfigs)(ctx) } != raw::REDISMODULE_OK as c_int {
        return Err("cannot load the module's settings from the configuration".into());
    }
    let mut pairs = args.chunks(2);
    for pair in pairs.by_ref() {
        match pair {
            [name, value] if name.eq_ignore_ascii_case(b"deny-events") => {
                DENY_EVENTS.store(yes_or_no(value)?, Relaxed);
            }
            [name, _] => {
                return Err(format!(
                    "unknown setting '{}' (known: deny-events)",
                    String::from_utf8_lossy(name)
                ))
            }
            _ => return Err("module arguments must be name value pairs".into()),
        }
    }
    Ok(())
}

fn yes_or_no(value: &[u8]) -> Result<bool, String> {
    if value.eq_ignore_ascii_case(b"yes") {
        Ok(true)
    } else if value.eq_ignore_ascii_case(b"no") {
        Ok(false)
    } else {
        Err("deny-events must be yes or no".into())
    }
}

/// Tells keyspace-event subscribers that a request on `key_name` was
/// denied, when `deny-events` is on.
pub fn on_denied(ctx: Ctx<'_>, key_name: KeyName<'_>) {
    if DENY_EVENTS.load(Relaxed) {
        // SAFETY: `ctx` and `key_name` belong to the running command; the
        // event name is a static C string.
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent)(
                ctx.raw(),
                raw::REDISMODULE_NOTIFY_MODULE as c_int,
                c"rl.denied".as_ptr(),
                key_name.raw(),
            )
        };
    }
}
