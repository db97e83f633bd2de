//! The concurrency limiter: `RL.ACQUIRE key limit lease [ID id]` and
//! `RL.RELEASE key id`.

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{now_ms, random_hex, rm, run, Args, Ctx, Status};
use super::super::key::Key;
use super::super::stats;
use super::check::{count, notify_if_denied, reply_five_then, store, Effect};
use crate::algorithms::concurrency::Leases;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse;

/// The length of a lease id the server draws: 32 hex characters, 128 bits.
const DRAWN_ID_LEN: usize = 32;

/// `RL.ACQUIRE key limit lease [ID id]`: the five integers, then the lease's
/// id (null when refused).
pub unsafe extern "C" fn acquire_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, acquire_reply) }
}

fn acquire_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    match acquire(ctx, args) {
        Ok((decision, id)) => reply_five_then(ctx, &decision, || match id {
            Some(id) => {
                ctx.reply_bytes(&id);
            }
            None => {
                ctx.reply_null();
            }
        }),
        Err(error) => ctx.reply_error(&error),
    }
}

fn acquire(ctx: Ctx<'_>, args: &Args<'_>) -> Result<(Decision, Option<Vec<u8>>), CommandError> {
    let key_name = args.key(1).ok_or(CommandError::Arity)?;
    let (params, id) = parse::acquire(&args.bytes_from(2))?;
    let id = id.unwrap_or_else(|| random_hex(DRAWN_ID_LEN));
    let now_ms = now_ms();
    let mut key = Key::open(ctx, key_name, true);
    let decision = match key.value::<Leases>()? {
        Some(leases) => {
            let (decision, changed) = leases.acquire(params, now_ms, &id);
            if changed {
                Effect::of(leases).publish(ctx, &key, key_name);
            }
            decision
        }
        None => {
            let mut leases = Leases::new(params, now_ms);
            let (decision, _) = leases.acquire(params, now_ms, &id);
            store(ctx, &mut key, key_name, leases)?;
            decision
        }
    };
    count(&stats::ACQUIRE, Mode::Take, &decision);
    notify_if_denied(ctx, key_name, Mode::Take, &decision);
    Ok((decision, decision.allowed.then_some(id)))
}

/// `RL.RELEASE key id`: 1 when `id` held a live lease, now given back;
/// 0 otherwise. The key goes when its last lease does.
pub unsafe extern "C" fn release_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, release_reply) }
}

fn release_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    match release(ctx, args) {
        Ok(released) => ctx.reply_integer(i64::from(released)),
        Err(error) => ctx.reply_error(&error),
    }
}

fn release(ctx: Ctx<'_>, args: &Args<'_>) -> Result<bool, CommandError> {
    let (Some(key_name), Some(id), 3) = (args.key(1), args.bytes(2), args.len()) else {
        return Err(CommandError::Arity);
    };
    let id = parse::lease_id(id)?;
    let mut key = Key::open(ctx, key_name, true);
    let Some(leases) = key.value::<Leases>()? else {
        return Ok(false);
    };
    if !leases.release(now_ms(), &id) {
        return Ok(false);
    }
    if leases.is_empty() {
        key.delete();
        ctx.signal_modified(key_name);
        // SAFETY: `ctx` is the running command's; format "s" takes the key.
        unsafe {
            rm!(RedisModule_Replicate)(ctx.raw(), c"DEL".as_ptr(), c"s".as_ptr(), key_name.raw())
        };
    } else {
        Effect::of(leases).publish(ctx, &key, key_name);
    }
    Ok(true)
}
