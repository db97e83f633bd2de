//! Everything that touches the Redis module API. Kept thin: it parses,
//! loads, calls an algorithm, stores, replicates and replies.

pub mod command_info;
pub mod commands;
pub mod config;
pub mod engine;
pub mod ffi;
pub mod key;
pub mod memory;
pub mod outcome;
pub mod replicate;
pub mod request;
pub mod respond;
pub mod sketch;
pub mod stats;
pub mod types;
pub mod waiters;

use std::ffi::c_int;

use redis_module::{raw, Context, RedisString, Status};

use ffi::{missing_apis, rm};

/// Module start-up: check the server has every API we call, take over
/// key-modification signals (so a peek or a denial does not disturb `WATCH`),
/// handle RDB read errors ourselves, create the data types, register the
/// commands and document them (`COMMAND DOCS`, key specs, arity), and take
/// the module's settings.
pub fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let missing = missing_apis();
    if !missing.is_empty() {
        ctx.log_warning(&format!(
            "ratelimit: this server lacks module API functions: {}",
            missing.join(", ")
        ));
        return Status::Err;
    }
    let raw_ctx = ctx.get_raw();
    // SAFETY: `raw_ctx` is the loading context.
    unsafe {
        rm!(RedisModule_SetModuleOptions)(
            raw_ctx,
            (raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
                | raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS) as c_int,
        )
    };
    replicate::init();
    // SAFETY: the loading context, live during the load.
    if !waiters::init(unsafe { ffi::Ctx::new(raw_ctx) }) {
        ctx.log_warning("ratelimit: cannot subscribe to the server's flush and swap events");
        return Status::Err;
    }
    // SAFETY: the loading context, live during the load.
    memory::init(unsafe { ffi::Ctx::new(raw_ctx) });
    for redis_type in types::every_type() {
        if let Err(why) = redis_type.create_data_type(raw_ctx) {
            ctx.log_warning(&format!("ratelimit: cannot create a data type: {why}"));
            return Status::Err;
        }
    }
    for command in commands::table() {
        // SAFETY: `raw_ctx` is the loading context; the name and flags are C
        // strings that Redis copies.
        let status = unsafe {
            rm!(RedisModule_CreateCommand)(
                raw_ctx,
                command.name.as_ptr(),
                Some(command.handler),
                command.flags.as_ptr(),
                command.keys.0,
                command.keys.1,
                command.keys.2,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!("ratelimit: cannot register {:?}", command.name));
            return Status::Err;
        }
        if let Err(why) = command_info::document(raw_ctx, &command.name, &command.doc) {
            ctx.log_warning(&format!("ratelimit: {why}"));
            return Status::Err;
        }
    }
    // SAFETY: `raw_ctx` is the loading context; the callback is a plain fn.
    unsafe { rm!(RedisModule_RegisterInfoFunc)(raw_ctx, Some(stats::info)) };
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    config::on_top_keys_set(sketch::resize);
    if let Err(why) = config::register(raw_ctx, &args) {
        ctx.log_warning(&format!("ratelimit: {why}"));
        return Status::Err;
    }
    Status::Ok
}
