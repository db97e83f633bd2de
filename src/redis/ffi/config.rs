//! The module's settings as Redis keeps them (`CONFIG SET/GET
//! ratelimit.<name>`, redis.conf): registered with a value of ours that
//! Redis reads and writes through callbacks.

use std::ffi::{c_char, c_int, c_longlong, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::raw;

use super::api::rm;
use super::ctx::Ctx;

/// A numeric setting: where its value lives, and what follows a new one.
pub trait NumberSetting: Sync + 'static {
    fn get(&self) -> i64;
    /// Takes a value Redis checked against the bounds given at registration.
    fn set(&self, value: i64);
}

/// Registers the yes/no setting `name`, held in `value`. False when Redis
/// refuses it.
pub fn register_bool(
    ctx: Ctx<'_>,
    name: &'static CStr,
    default: bool,
    value: &'static AtomicBool,
) -> bool {
    // SAFETY: `ctx` is the loading context; the name is a static C string;
    // `privdata` is a static that outlives the module, of the type the
    // callbacks read.
    let status = unsafe {
        rm!(RedisModule_RegisterBoolConfig)(
            ctx.raw(),
            name.as_ptr(),
            c_int::from(default),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_bool),
            Some(set_bool),
            None,
            std::ptr::from_ref(value).cast_mut().cast(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Registers the numeric setting `name`, from `min` to `max`, held by
/// `setting`. False when Redis refuses it.
pub fn register_number<S: NumberSetting>(
    ctx: Ctx<'_>,
    name: &'static CStr,
    default: i64,
    min: i64,
    max: i64,
    setting: &'static S,
) -> bool {
    // SAFETY: as in `register_bool`; `privdata` is an `S`, which the
    // callbacks of `S` read.
    let status = unsafe {
        rm!(RedisModule_RegisterNumericConfig)(
            ctx.raw(),
            name.as_ptr(),
            default,
            raw::REDISMODULE_CONFIG_DEFAULT,
            min,
            max,
            Some(get_number::<S>),
            Some(set_number::<S>),
            None,
            std::ptr::from_ref(setting).cast_mut().cast(),
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// Loads the registered settings' values from the configuration (after
/// every registration). False when Redis refuses one.
pub fn load(ctx: Ctx<'_>) -> bool {
    // SAFETY: `ctx` is the loading context.
    unsafe { rm!(RedisModule_LoadConfigs)(ctx.raw()) == raw::REDISMODULE_OK as c_int }
}

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

unsafe extern "C" fn get_number<S: NumberSetting>(
    _name: *const c_char,
    privdata: *mut c_void,
) -> c_longlong {
    // SAFETY: `privdata` is the `&'static S` given at registration.
    unsafe { &*privdata.cast::<S>() }.get()
}

/// Redis checks the bounds given at registration before calling this.
unsafe extern "C" fn set_number<S: NumberSetting>(
    _name: *const c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in `get_number`.
    unsafe { &*privdata.cast::<S>() }.set(value);
    raw::REDISMODULE_OK as c_int
}
