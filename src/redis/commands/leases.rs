//! The concurrency limiter: `RL.ACQUIRE key limit lease [ID id]` and
//! `RL.RELEASE key id`.

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{run, Args, Ctx, KeyName, Status};
use super::super::key::Key;
use super::super::replicate::Run;
use super::super::waiters;
use super::check::{out_of_memory, store, written};
use super::request::{respond, Request};
use crate::algorithms::concurrency::{LeaseParams, Leases};
use crate::algorithms::{Decision, State};
use crate::error::CommandError;
use crate::parse;
use crate::replay::Command;

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
    let run = Run::live(ctx, Command::Acquire, 2);
    match (
        args.key(1),
        Request::parse(Command::Acquire, &args.bytes_from(2), None),
    ) {
        (Some(key), Ok(request)) => respond(&run, args, request, &[key]),
        (None, _) => ctx.reply_error(&CommandError::Arity),
        (_, Err(error)) => ctx.reply_error(&error),
    }
}

/// Takes a slot for `id` on `key_name` under `params` (or renews `id`'s
/// lease): the decision. A key's first lease creates it.
pub fn acquire(
    run: &Run<'_>,
    key_name: KeyName<'_>,
    params: LeaseParams,
    id: &[u8],
) -> Result<Decision, CommandError> {
    let mut key = Key::open(run.ctx, key_name, true);
    match key.value::<Leases>()? {
        Some(leases) => {
            if leases.would_add(params, run.now_ms, id) {
                out_of_memory(run)?;
            }
            let (decision, changed) = leases.acquire(params, run.now_ms, id);
            let fresh_at_ms = leases.fresh_at_ms();
            let moved = key.settle_expiry(fresh_at_ms, run.expiry_slack_ms);
            if changed || moved {
                written(run, key_name);
            }
            Ok(decision)
        }
        None => {
            out_of_memory(run)?;
            let mut leases = Leases::new(params, run.now_ms);
            let (decision, _) = leases.acquire(params, run.now_ms, id);
            store(run, &mut key, key_name, leases)?;
            Ok(decision)
        }
    }
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
    let run = Run::live(ctx, Command::Release, 2);
    let result = match args.len() {
        3 => release(&run, args.key(1), &args.bytes_from(2)),
        _ => Err(CommandError::Arity),
    };
    run.propagate(Some(args), None);
    match result {
        Ok(released) => ctx.reply_integer(i64::from(released)),
        Err(error) => ctx.reply_error(&error),
    }
}

/// `RL.RELEASE` on `key_name`, `words` being what follows the key (the id).
pub fn release(
    run: &Run<'_>,
    key_name: Option<KeyName<'_>>,
    words: &[&[u8]],
) -> Result<bool, CommandError> {
    let (Some(key_name), [id]) = (key_name, words) else {
        return Err(CommandError::Arity);
    };
    let id = parse::lease_id(id)?;
    let mut key = Key::open(run.ctx, key_name, true);
    let Some(leases) = key.value::<Leases>()? else {
        return Ok(false);
    };
    if !leases.release(run.now_ms, &id) {
        return Ok(false);
    }
    let (empty, fresh_at_ms) = (leases.is_empty(), leases.fresh_at_ms());
    if empty {
        key.delete();
    } else {
        key.settle_expiry(fresh_at_ms, run.expiry_slack_ms);
    }
    written(run, key_name);
    waiters::freed(run.ctx, key_name);
    Ok(true)
}
