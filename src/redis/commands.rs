//! The commands: parse, load, call the algorithm, store, replicate, reply.

use std::ffi::c_int;

use redis_module::raw;

use super::api::{
    buffer_ptr, now_ms, random_hex, reply_bytes, reply_error, reply_fields, reply_integers,
    reply_null, reply_ok, rm, Args,
};
use super::config::on_denied;
use super::key::Key;
use super::stats::{self, Counter};
use super::types::{dispatch_on_tag, Checked, Stored, SET_STATE_COMMAND};
use crate::algorithms::concurrency::Leases;
use crate::algorithms::fixed_window::FixedWindow;
use crate::algorithms::gcra::{cl_throttle_reply, Gcra};
use crate::algorithms::leaky_bucket::LeakyBucket;
use crate::algorithms::sliding_counter::SlidingCounter;
use crate::algorithms::sliding_log::SlidingLog;
use crate::algorithms::token_bucket::TokenBucket;
use crate::algorithms::{Decision, Field, Mode, State};
use crate::error::CommandError;
use crate::parse::{self, Tier};

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

/// A command whose one key is its first argument.
const fn one_key(
    name: &'static std::ffi::CStr,
    handler: unsafe extern "C" fn(Ctx, Argv, c_int) -> c_int,
    flags: &'static std::ffi::CStr,
) -> CommandSpec {
    CommandSpec {
        name,
        handler,
        flags,
        first_key: 1,
        last_key: 1,
        key_step: 1,
    }
}

const CHECK: &std::ffi::CStr = c"write deny-oom fast";

/// Every command of the module.
pub const COMMANDS: &[CommandSpec] = &[
    one_key(c"rl.tokenbucket", check_command::<TokenBucket>, CHECK),
    one_key(c"rl.slidingcounter", check_command::<SlidingCounter>, CHECK),
    one_key(c"rl.fixedwindow", check_command::<FixedWindow>, CHECK),
    one_key(c"rl.slidinglog", check_command::<SlidingLog>, CHECK),
    one_key(c"rl.leakybucket", check_command::<LeakyBucket>, CHECK),
    one_key(c"rl.gcra", check_command::<Gcra>, CHECK),
    one_key(c"cl.throttle", cl_throttle_command, CHECK),
    one_key(c"rl.setstate", set_state_command, CHECK),
    one_key(c"rl.acquire", acquire_command, CHECK),
    one_key(c"rl.release", release_command, c"write fast"),
    one_key(c"rl.info", info_command, c"readonly fast"),
    // Its keys are counted by `numkeys`: Redis asks the command itself
    // where they are (getkeys-api), for cluster routing and COMMAND GETKEYS.
    CommandSpec {
        name: c"rl.all",
        handler: all_command,
        flags: c"write deny-oom getkeys-api",
        first_key: 0,
        last_key: 0,
        key_step: 0,
    },
];

/// `RL.<ALGORITHM> key <params> [COST n] [PEEK]`.
unsafe extern "C" fn check_command<A: Checked>(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    match check::<A>(ctx, &args) {
        Ok(decision) => reply_decision(ctx, &decision),
        Err(error) => reply_error(ctx, &error),
    }
}

fn check<A: Checked>(ctx: Ctx, args: &Args) -> Result<Decision, CommandError> {
    let key_name = args.raw(1).ok_or(CommandError::Arity)?;
    let (params, options) = A::parse(&args.bytes_from(2))?;
    let mode = if options.peek { Mode::Peek } else { Mode::Take };
    let decision = apply::<A>(ctx, key_name, params, options.cost, mode)?;
    count(A::counter(), mode, &decision);
    Ok(decision)
}

/// Counts a decided request in `INFO ratelimit` (a peek is not a request).
fn count(counter: &Counter, mode: Mode, decision: &Decision) {
    if mode == Mode::Take {
        counter.count(decision.allowed);
    }
}

/// `CL.THROTTLE key max_burst count period [quantity]`: redis-cell's command
/// and reply, on the GCRA type (so `RL.GCRA` reads the same keys).
unsafe extern "C" fn cl_throttle_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    let result = args.raw(1).ok_or(CommandError::Arity).and_then(|key_name| {
        let throttle = crate::parse::cl_throttle(&args.bytes_from(2))?;
        let decision = apply::<Gcra>(ctx, key_name, throttle.params, throttle.cost, throttle.mode)?;
        count(&stats::CL_THROTTLE, throttle.mode, &decision);
        Ok(decision)
    });
    match result {
        Ok(decision) => reply_integers(ctx, &cl_throttle_reply(&decision)),
        Err(error) => reply_error(ctx, &error),
    }
}

/// One check of one key: load its state, decide, and when a request was
/// taken store the new state (in place when the algorithm allows), set its
/// expiry, and replicate it as its effect.
fn apply<A: Checked>(
    ctx: Ctx,
    key_name: *mut raw::RedisModuleString,
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

fn notify_if_denied(
    ctx: Ctx,
    key_name: *mut raw::RedisModuleString,
    mode: Mode,
    decision: &Decision,
) {
    if mode == Mode::Take && !decision.allowed {
        on_denied(ctx, key_name);
    }
}

/// A state just written to a key, as replicas and the AOF receive it.
struct Effect {
    blob: Vec<u8>,
    fresh_at_ms: i64,
}

impl Effect {
    fn of<A: State>(state: &A) -> Self {
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
    fn publish(&self, ctx: Ctx, key: &Key, key_name: *mut raw::RedisModuleString) {
        written(ctx, key, key_name, self.fresh_at_ms);
        // SAFETY: `ctx` is the running command's; format "sb" takes the key
        // string object, then the state's bytes and their length.
        unsafe {
            rm!(RedisModule_Replicate)(
                ctx,
                SET_STATE_COMMAND.as_ptr(),
                c"sb".as_ptr(),
                key_name,
                buffer_ptr(&self.blob),
                self.blob.len(),
            )
        };
    }
}

/// After a state was written to a key: its expiry is when the state is as
/// good as new, and Redis is told the key changed.
fn written(ctx: Ctx, key: &Key, key_name: *mut raw::RedisModuleString, fresh_at_ms: i64) {
    key.expire_at(fresh_at_ms);
    signal_modified(ctx, key_name);
}

/// Writes `state` to an open key (empty, or holding an `A`) and publishes it.
fn store<A: Stored>(
    ctx: Ctx,
    key: &mut Key,
    key_name: *mut raw::RedisModuleString,
    state: A,
) -> Result<(), CommandError> {
    let effect = Effect::of(&state);
    key.put(state)?;
    effect.publish(ctx, key, key_name);
    Ok(())
}

fn reply_decision(ctx: Ctx, d: &Decision) -> c_int {
    match d.delay_ms {
        None => reply_integers(ctx, &five(d)),
        // SAFETY: `ctx` is the running command's context.
        Some(delay_ms) => reply_five_then(ctx, d, || unsafe {
            rm!(RedisModule_ReplyWithLongLong)(ctx, delay_ms);
        }),
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
    key.put(state)?;
    written(ctx, &key, key_name, fresh_at_ms);
    // SAFETY: `ctx` is the running command's.
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx) };
    Ok(())
}

/// `RL.ALL numkeys key [key ...] <ALGORITHM params> [...] [COST n] [PEEK]`:
/// every tier checked at one instant; the request is taken from all of them
/// or from none.
unsafe extern "C" fn all_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    // SAFETY: `ctx` is the running command's context.
    if unsafe { rm!(RedisModule_IsKeysPositionRequest)(ctx) } != 0 {
        return declare_keys(ctx, &args);
    }
    match all(ctx, &args) {
        Ok((combined, tiers)) => {
            reply_five_then(ctx, &combined, || {
                // SAFETY: `ctx` is the running command's context.
                unsafe { rm!(RedisModule_ReplyWithArray)(ctx, tiers.len() as std::ffi::c_long) };
                for tier in &tiers {
                    reply_decision(ctx, tier);
                }
            })
        }
        Err(error) => reply_error(ctx, &error),
    }
}

/// Answers Redis's question of which arguments are keys (cluster routing,
/// ACLs, `COMMAND GETKEYS`): the `numkeys` arguments after `numkeys`, or
/// none when `numkeys` is not valid (the command itself then says why).
fn declare_keys(ctx: Ctx, args: &Args) -> c_int {
    if let Ok(n) = parse::numkeys(&args.bytes_from(1)) {
        for position in 2..2 + n {
            // SAFETY: `ctx` is a keys-position request; `position` < argc.
            unsafe { rm!(RedisModule_KeyAtPos)(ctx, position as c_int) };
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Stores what a tier took, once every tier has allowed.
type Commit = Box<dyn FnOnce(Ctx, *mut raw::RedisModuleString) -> Result<(), CommandError>>;

/// What one tier decided, and how to store what it took, not yet done.
struct Planned {
    decision: Decision,
    commit: Option<Commit>,
}

fn all(ctx: Ctx, args: &Args) -> Result<(Decision, Vec<Decision>), CommandError> {
    if args.len() < 4 {
        return Err(CommandError::Arity);
    }
    let parsed = parse::all(&args.bytes_from(1))?;
    let key_names = (0..parsed.tiers.len())
        .map(|i| args.raw(2 + i))
        .collect::<Option<Vec<_>>>()
        .ok_or(CommandError::Arity)?;
    let cost = parsed.options.cost;
    let mode = if parsed.options.peek {
        Mode::Peek
    } else {
        Mode::Take
    };
    let now_ms = now_ms();
    // Every tier decides before anything is written, so a WRONGTYPE or a
    // denial on any tier leaves every key as it was.
    let mut planned = Vec::with_capacity(key_names.len());
    for (tier, &key_name) in parsed.tiers.iter().zip(&key_names) {
        planned.push(plan_tier(ctx, key_name, tier, now_ms, cost, mode)?);
    }
    let mut decisions: Vec<Decision> = planned.iter().map(|p| p.decision).collect();
    if Decision::all_of(&decisions).allowed {
        for (tier, key_name) in planned.into_iter().zip(key_names) {
            if let Some(commit) = tier.commit {
                commit(ctx, key_name)?;
            }
        }
    } else if mode == Mode::Take {
        // Nothing was taken: a tier that would have allowed reports what
        // it holds now, as a peek does.
        for ((decision, tier), &key_name) in decisions.iter_mut().zip(&parsed.tiers).zip(&key_names)
        {
            if decision.allowed {
                *decision = plan_tier(ctx, key_name, tier, now_ms, cost, Mode::Peek)?.decision;
            } else {
                on_denied(ctx, key_name);
            }
        }
    }
    let combined = Decision::all_of(&decisions);
    count(&stats::ALL, mode, &combined);
    Ok((combined, decisions))
}

fn plan_tier(
    ctx: Ctx,
    key_name: *mut raw::RedisModuleString,
    tier: &Tier,
    now_ms: i64,
    cost: u64,
    mode: Mode,
) -> Result<Planned, CommandError> {
    match *tier {
        Tier::TokenBucket(p) => plan::<TokenBucket>(ctx, key_name, p, now_ms, cost, mode),
        Tier::SlidingCounter(p) => plan::<SlidingCounter>(ctx, key_name, p, now_ms, cost, mode),
        Tier::FixedWindow(p) => plan::<FixedWindow>(ctx, key_name, p, now_ms, cost, mode),
        Tier::SlidingLog(p) => plan::<SlidingLog>(ctx, key_name, p, now_ms, cost, mode),
        Tier::LeakyBucket(p) => plan::<LeakyBucket>(ctx, key_name, p, now_ms, cost, mode),
        Tier::Gcra(p) => plan::<Gcra>(ctx, key_name, p, now_ms, cost, mode),
    }
}

fn plan<A: Checked>(
    ctx: Ctx,
    key_name: *mut raw::RedisModuleString,
    params: A::Params,
    now_ms: i64,
    cost: u64,
    mode: Mode,
) -> Result<Planned, CommandError> {
    let mut key = Key::open(ctx, key_name, false);
    let stored = key.value::<A>()?;
    let (decision, next) = A::check_with(stored.map(|s| &*s), params, now_ms, cost, mode);
    Ok(Planned {
        decision,
        commit: next.map(|next| {
            Box::new(move |ctx: Ctx, key_name: *mut raw::RedisModuleString| {
                let mut key = Key::open(ctx, key_name, true);
                store(ctx, &mut key, key_name, next)
            }) as Commit
        }),
    })
}

/// A reply of six elements: the five integers, then what `sixth` replies.
fn reply_five_then(ctx: Ctx, d: &Decision, sixth: impl FnOnce()) -> c_int {
    // SAFETY: `ctx` is the running command's context.
    unsafe { rm!(RedisModule_ReplyWithArray)(ctx, 6) };
    for value in five(d) {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_ReplyWithLongLong)(ctx, value) };
    }
    sixth();
    raw::REDISMODULE_OK as c_int
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

/// The length of a lease id the server draws: 32 hex characters, 128 bits.
const DRAWN_ID_LEN: usize = 32;

/// `RL.ACQUIRE key limit lease [ID id]`: the five integers, then the lease's
/// id (null when refused).
unsafe extern "C" fn acquire_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    match acquire(ctx, &args) {
        Ok((decision, id)) => reply_five_then(ctx, &decision, || match id {
            Some(id) => reply_bytes(ctx, &id),
            None => {
                reply_null(ctx);
            }
        }),
        Err(error) => reply_error(ctx, &error),
    }
}

fn acquire(ctx: Ctx, args: &Args) -> Result<(Decision, Option<Vec<u8>>), CommandError> {
    let key_name = args.raw(1).ok_or(CommandError::Arity)?;
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
unsafe extern "C" fn release_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    match release(ctx, &args) {
        Ok(released) => reply_integer(ctx, i64::from(released)),
        Err(error) => reply_error(ctx, &error),
    }
}

fn release(ctx: Ctx, args: &Args) -> Result<bool, CommandError> {
    let (Some(key_name), Some(id), 3) = (args.raw(1), args.bytes(2), args.len()) else {
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
        signal_modified(ctx, key_name);
        // SAFETY: `ctx` is the running command's; format "s" takes the key.
        unsafe { rm!(RedisModule_Replicate)(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key_name) };
    } else {
        Effect::of(leases).publish(ctx, &key, key_name);
    }
    Ok(true)
}

fn reply_integer(ctx: Ctx, value: i64) -> c_int {
    // SAFETY: `ctx` is the running command's context.
    unsafe { rm!(RedisModule_ReplyWithLongLong)(ctx, value) };
    raw::REDISMODULE_OK as c_int
}

/// `RL.INFO key`: what the key holds, for a person: the algorithm, its
/// parameters as last used, its state as stored, what a request of 1 would
/// be told now, and the TTL. Null for a missing key.
unsafe extern "C" fn info_command(ctx: Ctx, argv: Argv, argc: c_int) -> c_int {
    // SAFETY: Redis passes this command's own argv/argc.
    let args = unsafe { Args::new(argv, argc) };
    let Some(key_name) = args.raw(1).filter(|_| args.len() == 2) else {
        return reply_error(ctx, &CommandError::Arity);
    };
    let mut key = Key::open(ctx, key_name, false);
    let now_ms = now_ms();
    let fields = describe::<TokenBucket>(&mut key, now_ms)
        .or_else(|| describe::<SlidingCounter>(&mut key, now_ms))
        .or_else(|| describe::<FixedWindow>(&mut key, now_ms))
        .or_else(|| describe::<SlidingLog>(&mut key, now_ms))
        .or_else(|| describe::<LeakyBucket>(&mut key, now_ms))
        .or_else(|| describe::<Gcra>(&mut key, now_ms))
        .or_else(|| describe::<Leases>(&mut key, now_ms));
    match fields {
        Some(mut fields) => {
            fields.push(("ttl_ms", Field::Int(key.ttl_ms())));
            reply_fields(ctx, &fields)
        }
        None if key.is_empty() => reply_null(ctx),
        None => reply_error(ctx, &CommandError::wrong_type()),
    }
}

fn describe<A: Stored>(key: &mut Key, now_ms: i64) -> Option<Vec<(&'static str, Field)>> {
    let state = key.value_if::<A>()?;
    let now = state.peek(now_ms);
    let mut fields = vec![("algorithm", Field::Text(A::NAME.as_bytes().to_vec()))];
    fields.extend(state.describe());
    fields.push(("remaining", Field::Int(now.remaining as i64)));
    fields.push(("reset_after_ms", Field::Int(now.reset_after_ms)));
    Some(fields)
}
