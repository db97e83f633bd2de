//! `RL.ALL numkeys key [key ...] <ALGORITHM params> [...] [COST n] [PEEK]`:
//! every tier checked at one instant; the request is taken from all of them
//! or from none.

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{now_ms, rm, run, Args, Ctx, KeyName, Status};
use super::super::config::on_denied;
use super::super::key::Key;
use super::super::stats;
use super::check::{count, reply_decision, reply_five_then, store, Checked};
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::{self, Tier};

pub unsafe extern "C" fn all_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, all_reply) }
}

fn all_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    // SAFETY: `ctx` is the running command's context.
    if unsafe { rm!(RedisModule_IsKeysPositionRequest)(ctx.raw()) } != 0 {
        return declare_keys(ctx, args);
    }
    match all(ctx, args) {
        Ok((combined, tiers)) => reply_five_then(ctx, &combined, || {
            ctx.reply_array(tiers.len());
            for tier in &tiers {
                reply_decision(ctx, tier);
            }
        }),
        Err(error) => ctx.reply_error(&error),
    }
}

/// Answers Redis's question of which arguments are keys (cluster routing,
/// ACLs, `COMMAND GETKEYS`): the `numkeys` arguments after `numkeys`, or
/// none when `numkeys` is not valid (the command itself then says why).
fn declare_keys(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    if let Ok(n) = parse::numkeys(&args.bytes_from(1)) {
        for position in 2..2 + n {
            // SAFETY: `ctx` is a keys-position request; `position` < argc.
            unsafe { rm!(RedisModule_KeyAtPos)(ctx.raw(), position as c_int) };
        }
    }
    Status
}

/// Stores what a tier took, once every tier has allowed.
type Commit<'a> = Box<dyn FnOnce(Ctx<'a>, KeyName<'a>) -> Result<(), CommandError> + 'a>;

/// What one tier decided, and how to store what it took, not yet done.
struct Planned<'a> {
    decision: Decision,
    commit: Option<Commit<'a>>,
}

fn all<'a>(ctx: Ctx<'a>, args: &Args<'a>) -> Result<(Decision, Vec<Decision>), CommandError> {
    if args.len() < 4 {
        return Err(CommandError::Arity);
    }
    let parsed = parse::all(&args.bytes_from(1))?;
    let key_names = (0..parsed.tiers.len())
        .map(|i| args.key(2 + i))
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

/// Plans the tier of the algorithm `tier` names, made from the registry so
/// every algorithm has its arm and no other.
macro_rules! plan_tier {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        fn plan_tier<'a>(
            ctx: Ctx<'a>,
            key_name: KeyName<'a>,
            tier: &Tier,
            now_ms: i64,
            cost: u64,
            mode: Mode,
        ) -> Result<Planned<'a>, CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    plan::<crate::algorithms::$module::$ty>(ctx, key_name, params, now_ms, cost, mode)
                })*
            }
        }
    };
}
crate::registry!(plan_tier);

fn plan<'a, A: Checked>(
    ctx: Ctx<'a>,
    key_name: KeyName<'a>,
    params: A::Params,
    now_ms: i64,
    cost: u64,
    mode: Mode,
) -> Result<Planned<'a>, CommandError> {
    let mut key = Key::open(ctx, key_name, false);
    let stored = key.value::<A>()?;
    let (decision, next) = A::check_with(stored.map(|s| &*s), params, now_ms, cost, mode);
    Ok(Planned {
        decision,
        commit: next.map(|next| {
            Box::new(move |ctx: Ctx<'a>, key_name: KeyName<'a>| {
                let mut key = Key::open(ctx, key_name, true);
                store(ctx, &mut key, key_name, next)
            }) as Commit<'a>
        }),
    })
}
