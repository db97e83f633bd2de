//! The module's section of `INFO`.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

use redis_module::raw;

use super::api::rm;
use super::ctx::Ctx;

/// What writes the section's fields: calls `add` with each name and value.
pub type Fields = fn(add: &mut dyn FnMut(&'static CStr, u64));

static FIELDS: OnceLock<Fields> = OnceLock::new();

/// Has `INFO` show a section named after the module, of the fields
/// `fields` gives (at load time).
pub fn register(ctx: Ctx<'_>, fields: Fields) {
    let _ = FIELDS.set(fields);
    // SAFETY: `ctx` is the loading context; the callback is a plain fn.
    unsafe { rm!(RedisModule_RegisterInfoFunc)(ctx.raw(), Some(info)) };
}

unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: `ctx` is the INFO context Redis passes; a null section name
    // means the module's own section.
    unsafe { rm!(RedisModule_InfoAddSection)(ctx, std::ptr::null()) };
    if let Some(fields) = FIELDS.get() {
        fields(&mut |field, value| {
            // SAFETY: `ctx` is the INFO context; `field` is a C string.
            unsafe { rm!(RedisModule_InfoAddFieldULongLong)(ctx, field.as_ptr(), value) };
        });
    }
}
