//! The check commands (`RL.<ALGORITHM>`, `CL.THROTTLE`, `RL.PEEK`): each
//! parses its words into a request (`super::request`), which is decided by
//! the one-key core here, [`apply`]. What every command that stores a state
//! shares (storing, the expiry, the OOM rule, the five-integer reply) is here
//! too.

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{run, Args, Ctx, KeyName, Status};
use super::super::key::Key;
use super::super::replicate::Run;
use super::super::stats::Counted;
use super::super::types::Stored;
use super::request::{respond, Request};
use crate::algorithms::penalty::{self, Penalizable};
use crate::algorithms::{Algorithm, Decision, Mode};
use crate::error::CommandError;
use crate::parse::{self, IntoTier, Tier};
use crate::redis_cell::cl_throttle;
use crate::replay::Command;

/// An algorithm with its own check command.
pub trait Checked: Algorithm<Params: IntoTier> + Stored + Counted + Penalizable {}

impl<A: Algorithm<Params: IntoTier> + Stored + Counted + Penalizable> Checked for A {}

/// `RL.<ALGORITHM> key <params> [COST n] [PEEK] [BLOCK ms]`.
pub unsafe extern "C" fn check_command<A: Checked>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, check_reply::<A>) }
}

fn check_reply<A: Checked>(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::Check(A::TAG), 2);
    let request = parse::check_args::<A::Params>(&args.bytes_from(2)).map(|(params, options)| {
        Request::Check {
            tier: params.into_tier(),
            options,
        }
    });
    one_key(&run, args, request)
}

/// A request on the command's one key (its first argument).
fn one_key(run: &Run<'_>, args: &Args<'_>, request: Result<Request, CommandError>) -> Status {
    match (args.key(1), request) {
        (Some(key), Ok(request)) => respond(run, args, request, &[key]),
        (None, _) => run.ctx.reply_error(&CommandError::Arity),
        (_, Err(error)) => run.ctx.reply_error(&error),
    }
}

/// `CL.THROTTLE key max_burst count period [quantity]`: redis-cell's command
/// and reply, on the GCRA type (so `RL.GCRA` reads the same keys).
pub unsafe extern "C" fn cl_throttle_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, cl_throttle_reply_to) }
}

fn cl_throttle_reply_to(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::ClThrottle, 2);
    let request = cl_throttle(&args.bytes_from(2)).map(Request::Throttle);
    one_key(&run, args, request)
}

/// `RL.PEEK key <ALGORITHM> <params> [COST n]`: a check's answer, changing
/// nothing, from a command flagged read-only, so that read-only replicas and
/// `EVAL_RO` scripts can answer it (for dashboards reading what is left).
pub unsafe extern "C" fn peek_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, peek_reply) }
}

fn peek_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    let request =
        parse::peek(&args.bytes_from(2)).map(|(tier, options)| Request::Check { tier, options });
    // Nothing changes, so nothing is propagated: the replay named is moot.
    let run = Run::live(ctx, Command::All, 1);
    one_key(&run, args, request)
}

/// Decides with the algorithm `tier` names, made from the registry.
macro_rules! apply_tier {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        pub fn apply_tier(
            run: &Run<'_>,
            key_name: KeyName<'_>,
            tier: &Tier,
            cost: u64,
            mode: Mode,
            penalty_ms: Option<u64>,
        ) -> Result<Decision, CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    apply::<crate::algorithms::$module::$ty>(run, key_name, params, cost, mode, penalty_ms)
                })*
            }
        }
    };
}
crate::registry!(apply_tier);

/// One check of one key: load its state, decide, and when a request was
/// taken store the new state (in place when the algorithm allows). A key
/// under a penalty denies (see `crate::algorithms::penalty`); a denial given
/// `penalty_ms` starts one. Any request (not a peek) leaves the key's expiry
/// in its band after the key is fresh, its penalty included (see
/// `crate::replay::next_expiry`), so a key whose expiry was removed or moved
/// gets it back even from a denial. At `maxmemory`, a request that would
/// create a key or grow its state is refused with Redis's OOM error;
/// everything else is decided (see [`out_of_memory`]), a penalty's start
/// included (a few bytes, once per penalty: a denial is worth more than the
/// OOM error).
pub fn apply<A: Checked>(
    run: &Run<'_>,
    key_name: KeyName<'_>,
    params: A::Params,
    cost: u64,
    mode: Mode,
    penalty_ms: Option<u64>,
) -> Result<Decision, CommandError> {
    let mut key = Key::open(run.ctx, key_name, mode == Mode::Take);
    let Some(held) = key.held::<A>()? else {
        // A fresh state denies only what can never pass: no penalty.
        let (decision, next) = A::check_with(None, params, run.now_ms, cost, mode);
        if let Some(next) = next {
            out_of_memory(run)?;
            store(run, &mut key, key_name, next)?;
        }
        return Ok(decision);
    };
    if mode == Mode::Take && held.state.grows_with(params, run.now_ms, cost) {
        out_of_memory(run)?;
    }
    let before_ms = held.fresh_at_ms();
    let (decision, changed, penalty_until) = if held.until_ms.is_none() && penalty_ms.is_none() {
        // No penalty had, none asked: what `penalty::check_stored` does
        // then, without its wrapping (most checks; ~50 instructions each).
        let (decision, changed) = held.state.check_stored(params, run.now_ms, cost, mode);
        (decision, changed, None)
    } else {
        penalty::check_stored(
            held.state,
            held.until_ms,
            params,
            run.now_ms,
            cost,
            mode,
            penalty_ms,
        )
    };
    if mode == Mode::Peek {
        return Ok(decision);
    }
    let mut after_ms = if changed {
        held.fresh_at_ms()
    } else {
        before_ms
    };
    if let Some(until_ms) = penalty_until {
        key.penalize::<A>(until_ms, run.now_ms)?;
        after_ms = after_ms.max(until_ms);
    }
    if key.settle_expiry_moved(before_ms, after_ms, run.expiry_slack_ms)
        || changed
        || penalty_until.is_some()
    {
        written(run, key_name);
    }
    Ok(decision)
}

/// Refuses a request that would take more memory when the server is at
/// `maxmemory` (with `noeviction`, or nothing left to evict): Redis's own OOM
/// error, as for a command flagged `deny-oom`. The check commands are not
/// flagged so, because most requests need no new memory (peeks, denials,
/// updates of a state in place) and an application at `maxmemory` still
/// needs its decisions. Replays are never refused: the primary decided.
pub fn out_of_memory(run: &Run<'_>) -> Result<(), CommandError> {
    if !run.is_replay() && run.ctx.flags() & raw::REDISMODULE_CTX_FLAGS_OOM as c_int != 0 {
        Err(CommandError::out_of_memory())
    } else {
        Ok(())
    }
}

/// After a key was written: Redis is told it changed, and the command will
/// be propagated.
pub fn written(run: &Run<'_>, key_name: KeyName<'_>) {
    run.ctx.signal_modified(key_name);
    run.changed();
}

/// Writes `state` to an open key (empty, or holding an `A`), with its
/// expiry in its band.
pub fn store<A: Stored>(
    run: &Run<'_>,
    key: &mut Key<'_>,
    key_name: KeyName<'_>,
    state: A,
) -> Result<(), CommandError> {
    let fresh_at_ms = state.fresh_at_ms();
    key.put(state)?;
    key.expire_fresh(fresh_at_ms, run.expiry_slack_ms);
    written(run, key_name);
    Ok(())
}

/// The reply of a check: the five integers, and a leaky bucket's delay.
pub fn reply_decision(ctx: Ctx<'_>, d: &Decision) -> Status {
    match d.delay_ms {
        None => ctx.reply_integers(&five(d)),
        Some(delay_ms) => reply_five_then(ctx, d, || {
            ctx.reply_integer(delay_ms);
        }),
    }
}

/// A reply of six elements: the five integers, then what `sixth` replies.
pub fn reply_five_then(ctx: Ctx<'_>, d: &Decision, sixth: impl FnOnce()) -> Status {
    ctx.reply_array(6);
    for value in five(d) {
        ctx.reply_integer(value);
    }
    sixth();
    Status
}

/// The five integers every check reply starts with.
fn five(d: &Decision) -> [i64; 5] {
    [
        i64::from(d.allowed),
        d.limit as i64,
        d.remaining as i64,
        d.retry_after_ms,
        d.reset_after_ms,
    ]
}
