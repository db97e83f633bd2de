//! The check commands (`RL.<ALGORITHM>`, `CL.THROTTLE`): parse, load, call
//! the algorithm, store, replicate, reply. What every command that stores a
//! state shares (the effect written to replicas and the AOF, the expiry) is
//! here too.

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{buffer_ptr, now_ms, rm, run, Args, Ctx, KeyName, Status};
use super::super::config::on_denied;
use super::super::key::Key;
use super::super::stats::{self, Counted, Counter};
use super::super::types::{Stored, SET_STATE_COMMAND};
use crate::algorithms::gcra::Gcra;
use crate::algorithms::{Algorithm, Decision, Mode, State};
use crate::error::CommandError;
use crate::parse;
use crate::redis_cell::{cl_throttle, cl_throttle_reply};

/// An algorithm with its own check command.
pub trait Checked: Algorithm + Stored + Counted {}

impl<A: Algorithm + Stored + Counted> Checked for A {}

/// `RL.<ALGORITHM> key <params> [COST n] [PEEK]`.
pub unsafe extern "C" fn check_command<A: Checked>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, check_reply::<A>) }
}

fn check_reply<A: Checked>(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    match check::<A>(ctx, args) {
        Ok(decision) => reply_decision(ctx, &decision),
        Err(error) => ctx.reply_error(&error),
    }
}

fn check<A: Checked>(ctx: Ctx<'_>, args: &Args<'_>) -> Result<Decision, CommandError> {
    let key_name = args.key(1).ok_or(CommandError::Arity)?;
    let (params, options) = parse::check_args::<A::Params>(&args.bytes_from(2))?;
    let mode = if options.peek { Mode::Peek } else { Mode::Take };
    let decision = apply::<A>(ctx, key_name, params, options.cost, mode)?;
    count(A::counter(), mode, &decision);
    Ok(decision)
}

/// Counts a decided request in `INFO ratelimit` (a peek is not a request).
pub fn count(counter: &Counter, mode: Mode, decision: &Decision) {
    if mode == Mode::Take {
        counter.count(decision.allowed);
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
    let result = args.key(1).ok_or(CommandError::Arity).and_then(|key_name| {
        let throttle = cl_throttle(&args.bytes_from(2))?;
        let decision = apply::<Gcra>(ctx, key_name, throttle.params, throttle.cost, throttle.mode)?;
        count(&stats::CL_THROTTLE, throttle.mode, &decision);
        Ok(decision)
    });
    match result {
        Ok(decision) => ctx.reply_integers(&cl_throttle_reply(&decision)),
        Err(error) => ctx.reply_error(&error),
    }
}

/// One check of one key: load its state, decide, and when a request was
/// taken store the new state (in place when the algorithm allows), set its
/// expiry, and replicate it as its effect.
fn apply<A: Checked>(
    ctx: Ctx<'_>,
    key_name: KeyName<'_>,
    params: A::Params,
    cost: u64,
    mode: Mode,
) -> Result<Decision, CommandError> {
    let mut key = Key::open(ctx, key_name, mode == Mode::Take);
    let now_ms = now_ms();
    let Some(stored) = key.value::<A>()? else {
        return match A::check_with(None, params, now_ms, cost, mode) {
            (decision, Some(next)) => {
                store(ctx, &mut key, key_name, next)?;
                Ok(decision)
            }
            (decision, None) => {
                notify_if_denied(ctx, key_name, mode, &decision);
                Ok(decision)
            }
        };
    };
    let (decision, changed) = stored.check_stored(params, now_ms, cost, mode);
    if changed {
        let effect = Effect::of(stored);
        effect.publish(ctx, &key, key_name);
    } else {
        notify_if_denied(ctx, key_name, mode, &decision);
    }
    Ok(decision)
}

pub fn notify_if_denied(ctx: Ctx<'_>, key_name: KeyName<'_>, mode: Mode, decision: &Decision) {
    if mode == Mode::Take && !decision.allowed {
        on_denied(ctx, key_name);
    }
}

/// A state just written to a key, as replicas and the AOF receive it.
pub struct Effect {
    blob: Vec<u8>,
    fresh_at_ms: i64,
}

impl Effect {
    pub fn of<A: State>(state: &A) -> Self {
        // Every state but a long sliding log fits: one allocation, no growth.
        let mut blob = Vec::with_capacity(64);
        state.encode(&mut blob);
        Self {
            blob,
            fresh_at_ms: state.fresh_at_ms(),
        }
    }

    /// Sets the key's expiry to when its state is as good as new, tells
    /// Redis the key changed, and replicates the state as `RL.SETSTATE`.
    pub fn publish(&self, ctx: Ctx<'_>, key: &Key<'_>, key_name: KeyName<'_>) {
        written(ctx, key, key_name, self.fresh_at_ms);
        // SAFETY: `ctx` is the running command's; format "sb" takes the key
        // string object, then the state's bytes and their length.
        unsafe {
            rm!(RedisModule_Replicate)(
                ctx.raw(),
                SET_STATE_COMMAND.as_ptr(),
                c"sb".as_ptr(),
                key_name.raw(),
                buffer_ptr(&self.blob),
                self.blob.len(),
            )
        };
    }
}

/// After a state was written to a key: its expiry is when the state is as
/// good as new, and Redis is told the key changed.
pub fn written(ctx: Ctx<'_>, key: &Key<'_>, key_name: KeyName<'_>, fresh_at_ms: i64) {
    key.expire_at(fresh_at_ms);
    ctx.signal_modified(key_name);
}

/// Writes `state` to an open key (empty, or holding an `A`) and publishes it.
pub fn store<A: Stored>(
    ctx: Ctx<'_>,
    key: &mut Key<'_>,
    key_name: KeyName<'_>,
    state: A,
) -> Result<(), CommandError> {
    let effect = Effect::of(&state);
    key.put(state)?;
    effect.publish(ctx, key, key_name);
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
