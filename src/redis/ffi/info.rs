//! The module's section of `INFO`.

use std::ffi::{c_int, CStr, CString};
use std::sync::OnceLock;

use redis_module::raw;

use super::api::rm;
use super::ctx::Ctx;

/// What writes the section's fields: calls `add` with each name and value.
pub type Fields = fn(add: &mut dyn FnMut(&'static CStr, u64));

static FIELDS: OnceLock<Fields> = OnceLock::new();

/// What writes the section's other lines: `text` with a name and a text
/// value, `dict` with a name and its `key=value` pairs.
pub type Lines = fn(text: &mut Text<'_>, dict: &mut Dict<'_>);

/// Adds a field with a text value.
pub type Text<'a> = dyn FnMut(&CStr, &str) + 'a;

/// Adds a dict field: its name, then its `key=value` pairs.
pub type Dict<'a> = dyn FnMut(&str, &[(&CStr, u64)]) + 'a;

static LINES: OnceLock<Lines> = OnceLock::new();

/// Adds the lines `lines` gives after the fields (at load time).
pub fn register_lines(lines: Lines) {
    let _ = LINES.set(lines);
}

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
    if let Some(lines) = LINES.get() {
        lines(
            &mut |field, value| {
                let value = CString::new(value).unwrap_or_default();
                // SAFETY: `ctx` is the INFO context; both are C strings
                // Redis copies.
                unsafe {
                    rm!(RedisModule_InfoAddFieldCString)(
                        ctx,
                        field.as_ptr(),
                        value.as_ptr().cast_mut(),
                    )
                };
            },
            &mut |name, pairs| {
                let name = CString::new(name).unwrap_or_default();
                // SAFETY: `ctx` is the INFO context; the names are C strings
                // Redis copies; the dict is begun and ended here.
                unsafe {
                    rm!(RedisModule_InfoBeginDictField)(ctx, name.as_ptr());
                    for (field, value) in pairs {
                        rm!(RedisModule_InfoAddFieldULongLong)(ctx, field.as_ptr(), *value);
                    }
                    rm!(RedisModule_InfoEndDictField)(ctx);
                }
            },
        );
    }
}
