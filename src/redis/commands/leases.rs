//! The concurrency limiter: `RL.ACQUIRE key limit lease [ID id]` and
//! `RL.RELEASE key id`.

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{random_hex, run, Args, Ctx, KeyName, Status};
use super::super::key::Key;
use super::super::replicate::Run;
use super::super::stats;
use super::check::{count, denied, out_of_memory, reply_five_then, store, written};
use crate::algorithms::concurrency::Leases;
use crate::algorithms::{Decision, Mode, State};
use crate::error::CommandError;
use crate::parse;
use crate::replay::Command;

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
    let run = Run::live(ctx, Command::Acquire, 2);
    let result = acquire(&run, args.key(1), &args.bytes_from(2), None);
    let drawn = result
        .as_ref()
        .ok()
        .and_then(|a| a.drawn.then_some(&a.id[..]));
    run.propagate(args, drawn);
    match result {
        Ok(acquired) => reply_five_then(ctx, &acquired.decision, || {
            if acquired.decision.allowed {
                ctx.reply_bytes(&acquired.id);
            } else {
                ctx.reply_null();
            }
        }),
        Err(error) => ctx.reply_error(&error),
    }
}

/// What `RL.ACQUIRE` decided, and for which id.
pub struct Acquired {
    pub decision: Decision,
    pub id: Vec<u8>,
    /// Whether the server drew the id (the caller gave none).
    pub drawn: bool,
}

/// `RL.ACQUIRE` on `key_name`, `words` being what follows the key. Without
/// an `ID` in the words, the lease's id is `drawn` (a replay's), or drawn
/// now.
pub fn acquire(
    run: &Run<'_>,
    key_name: Option<KeyName<'_>>,
    words: &[&[u8]],
    drawn: Option<Vec<u8>>,
) -> Result<Acquired, CommandError> {
    let key_name = key_name.ok_or(CommandError::Arity)?;
    let (params, given) = parse::acquire(words)?;
    let (id, drawn) = match given {
        Some(id) => (id, false),
        None => (drawn.unwrap_or_else(|| random_hex(DRAWN_ID_LEN)), true),
    };
    let mut key = Key::open(run.ctx, key_name, true);
    let decision = match key.value::<Leases>()? {
        Some(leases) => {
            if leases.would_add(params, run.now_ms, &id) {
                out_of_memory(run)?;
            }
            let (decision, changed) = leases.acquire(params, run.now_ms, &id);
            let fresh_at_ms = leases.fresh_at_ms();
            let moved = key.settle_expiry(fresh_at_ms, run.expiry_slack_ms);
            if changed || moved {
                written(run, key_name);
            }
            decision
        }
        None => {
            out_of_memory(run)?;
            let mut leases = Leases::new(params, run.now_ms);
            let (decision, _) = leases.acquire(params, run.now_ms, &id);
            store(run, &mut key, key_name, leases)?;
            decision
        }
    };
    count(run, &stats::ACQUIRE, Mode::Take, &decision);
    denied(run, key_name, Mode::Take, &decision);
    Ok(Acquired {
        decision,
        id,
        drawn,
    })
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
    run.propagate(args, None);
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
    Ok(true)
}
