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

use redis_module::{Context, RedisString, Status};

use ffi::{missing_apis, Ctx};

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
    let loading = Ctx::loading(ctx);
    loading.signal_explicitly_and_handle_io_errors();
    replicate::init();
    if !waiters::init(loading) {
        ctx.log_warning("ratelimit: cannot subscribe to the server's flush and swap events");
        return Status::Err;
    }
    memory::init(loading);
    for redis_type in types::every_type() {
        if let Err(why) = ffi::types::create(loading, redis_type) {
            ctx.log_warning(&format!("ratelimit: cannot create a data type: {why}"));
            return Status::Err;
        }
    }
    if let Err(why) = ffi::types::create_aux(loading, (save_policies, load_policies)) {
        ctx.log_warning(&format!(
            "ratelimit: cannot create the policies' aux type: {why}"
        ));
        return Status::Err;
    }
    // Not required: without the event, the role is asked each time.
    ffi::server::on_role_change(loading);
    if !ffi::server::on_fork(loading, commands::restate_policies) {
        ctx.log_warning("ratelimit: cannot subscribe to the server's fork events");
        return Status::Err;
    }
    for command in commands::table() {
        if let Err(why) = ffi::commands::register(loading, &command) {
            ctx.log_warning(&format!("ratelimit: {why}"));
            return Status::Err;
        }
    }
    ffi::info::register(loading, stats::info_fields);
    ffi::info::register_lines(stats::policy_lines);
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    config::on_top_keys_set(sketch::resize);
    if let Err(why) = config::register(loading, &args) {
        ctx.log_warning(&format!("ratelimit: {why}"));
        return Status::Err;
    }
    Status::Ok
}

/// The policies, as the RDB's aux data holds them.
fn save_policies() -> Vec<u8> {
    crate::policies::store().encode()
}

/// Replaces the policies with those of an RDB file (a restart, a full sync
/// from a primary, `DEBUG RELOAD`); bytes that are not a store this module
/// wrote fail the load and change nothing.
fn load_policies(bytes: &[u8]) -> bool {
    match crate::policies::Store::decode(bytes) {
        Ok(loaded) => {
            crate::policies::store().replace(loaded);
            true
        }
        Err(_) => false,
    }
}
