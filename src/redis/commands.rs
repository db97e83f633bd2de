//! The commands: parse, load, call the algorithm, store, replicate, reply.

use std::ffi::c_int;

use redis_module::raw;

use super::api::{buffer_ptr, now_ms, reply_error, reply_integers, reply_ok, rm, Args};
use super::key::Key;
use super::types::{dispatch_on_tag, Stored, SET_STATE_COMMAND};
use crate::algorithms::fixed_window::FixedWindow;
use crate::algorithms::gcra::{cl_throttle_reply, Gcra};
use crate::algorithms::leaky_bucket::LeakyBucket;
use crate::algorithms::sliding_counter::SlidingCounter;
use crate::algorithms::sliding_log::SlidingLog;
use crate::algorithms::token_bucket::TokenBucket;
use crate::algorithms::{Algorithm, Decision, Mode};
use crate::error::CommandError;

type Ctx = *mut raw::RedisModuleCtx;
type Argv = *mut *mut raw::RedisModuleString;

/// A command as Redis registers it.
pub struct CommandSpec {
    pub name: &'static std::ffi::CStr,
    pub handler: unsafe extern "C" fn(Ctx, Argv, c_int) -> c_int,
    pub flags: &'static std::ffi::CStr,
    pub first_key: c_int,
    pub last_key: c_int,
    pub key_step: c_int,
}

/// Every command of the module.
pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rl.tokenbucket",
        handler: check_command::<TokenBucket>,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"rl.slidingcounter",
        handler: check_command::<SlidingCounter>,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"rl.fixedwindow",
        handler: check_command::<FixedWindow>,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"rl.slidinglog",
        handler: check_command::<SlidingLog>,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"rl.leakybucket",
        handler: check_command::<LeakyBucket>,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"rl.gcra",
        handler: check_command::<Gcra>,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"cl.throttle",
        handler: cl_throttle_command,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
    CommandSpec {
        name: c"rl.setstate",
        handler: set_state_command,
        flags: c"write deny-oom fast",
        first_key: 1,
        last_key: 1,
        key_step: 1,
    },
];

/// `RL.<ALGORITHM> key <params> [COST n] [PEEK]`.
unsafe extern "C" fn check_command<A: Stored>(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    match check::<A>(ctx, &args) {
        Ok(decision) => reply_decision(ctx, &decision),
        Err(error) => reply_error(ctx, &error),
    }
}

fn check<A: Stored>(ctx: Ctx, args: &Args) -> Result<Decision, CommandError> {
    let key_name = args.raw(1).ok_or(CommandError::Arity)?;
    let (params, options) = A::parse(&args.bytes_from(2))?;
    let mode = if options.peek { Mode::Peek } else { Mode::Take };
    apply::<A>(ctx, key_name, params, options.cost, mode)
}

/// `CL.THROTTLE key max_burst count period [quantity]`: redis-cell's command
/// and reply, on the GCRA type (so `RL.GCRA` reads the same keys).
unsafe extern "C" fn cl_throttle_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    let result = args.raw(1).ok_or(CommandError::Arity).and_then(|key_name| {
        let throttle = crate::parse::cl_throttle(&args.bytes_from(2))?;
        apply::<Gcra>(ctx, key_name, throttle.params, throttle.cost, throttle.mode)
    });
    match result {
        Ok(decision) => reply_integers(ctx, &cl_throttle_reply(&decision)),
        Err(error) => reply_error(ctx, &error),
    }
}

/// One check of one key: load its state, decide, and when a request was
/// taken store the new state (in place when the algorithm allows), set its
/// expiry, and replicate it as its effect.
fn apply<A: Stored>(
    ctx: Ctx,
    key_name: *mut raw::RedisModuleString,
    params: A::Params,
    cost: u64,
    mode: Mode,
) -> Result<Decision, CommandError> {
    let mut key = Key::open(ctx, key_name, mode == Mode::Take);
    let now_ms = now_ms();
    let mut blob = Vec::new();
    let (decision, fresh_at_ms) = match key.value::<A>()? {
        Some(stored) => match stored.check_stored(params, now_ms, cost, mode) {
            (decision, true) => {
                stored.encode(&mut blob);
                (decision, stored.fresh_at_ms())
            }
            (decision, false) => return Ok(decision),
        },
        None => match A::check_with(None, params, now_ms, cost, mode) {
            (decision, Some(next)) => {
                let fresh_at_ms = next.fresh_at_ms();
                next.encode(&mut blob);
                key.set(next)?;
                (decision, fresh_at_ms)
            }
            (decision, None) => return Ok(decision),
        },
    };
    key.expire_at(fresh_at_ms);
    signal_modified(ctx, key_name);
    // SAFETY: `ctx` is the running command's; format "sb" takes the key
    // string object, then the state's bytes and their length.
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx,
            SET_STATE_COMMAND.as_ptr(),
            c"sb".as_ptr(),
            key_name,
            buffer_ptr(&blob),
            blob.len(),
        )
    };
    Ok(decision)
}

fn reply_decision(ctx: Ctx, d: &Decision) -> c_int {
    let five = [
        i64::from(d.allowed),
        d.limit as i64,
        d.remaining as i64,
        d.retry_after_ms,
        d.reset_after_ms,
    ];
    match d.delay_ms {
        None => reply_integers(ctx, &five),
        Some(delay_ms) => {
            let mut six = [0; 6];
            six[..5].copy_from_slice(&five);
            six[5] = delay_ms;
            reply_integers(ctx, &six)
        }
    }
}

fn signal_modified(ctx: Ctx, key_name: *mut raw::RedisModuleString) {
    // SAFETY: `ctx` and `key_name` belong to the running command.
    unsafe { rm!(RedisModule_SignalModifiedKey)(ctx, key_name) };
}

/// `RL.SETSTATE key state`: sets `key` to an absolute state, as encoded by
/// `crate::encoding`, expiring when that state is as good as new. This is how
/// replicas and AOF files receive every change, so it checks its input as
/// strictly as any command: a state this module could not have written is an
/// error, and a key holding anything but that algorithm's type is WRONGTYPE.
unsafe extern "C" fn set_state_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    let result = match (args.len(), args.raw(1), args.bytes(2)) {
        (3, Some(key_name), Some(blob)) => dispatch_on_tag!(
            blob,
            set_state(ctx, key_name, blob),
            Err(CommandError::invalid_state("unknown algorithm"))
        ),
        _ => Err(CommandError::Arity),
    };
    match result {
        Ok(()) => reply_ok(ctx),
        Err(error) => reply_error(ctx, &error),
    }
}

fn set_state<A: Stored>(
    ctx: Ctx,
    key_name: *mut raw::RedisModuleString,
    blob: &[u8],
) -> Result<(), CommandError> {
    let state = A::decode(blob).map_err(|e| CommandError::invalid_state(e.0))?;
    let mut key = Key::open(ctx, key_name, true);
    let fresh_at_ms = state.fresh_at_ms();
    match key.value::<A>()? {
        Some(slot) => *slot = state,
        None => key.set(state)?,
    }
    key.expire_at(fresh_at_ms);
    signal_modified(ctx, key_name);
    // SAFETY: `ctx` is the running command's.
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx) };
    Ok(())
}
