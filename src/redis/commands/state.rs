//! The commands about a key's state itself: `RL.SETSTATE` (how replicas and
//! AOF files receive it) and `RL.INFO` (what it holds, for a person).

use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{now_ms, rm, run, Args, Ctx, KeyName, Status};
use super::super::key::Key;
use super::super::types::{first_of, on_tag, StateVisitor, Stored};
use super::check::written;
use crate::algorithms::Field;
use crate::error::CommandError;

/// `RL.SETSTATE key state`: sets `key` to an absolute state, as encoded by
/// `crate::encoding`, expiring when that state is as good as new. This is how
/// replicas and AOF files receive every change, so it checks its input as
/// strictly as any command: a state this module could not have written is an
/// error, and a key holding anything but that algorithm's type is WRONGTYPE.
pub unsafe extern "C" fn set_state_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, set_state_reply) }
}

fn set_state_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    let result = match (args.len(), args.key(1), args.bytes(2)) {
        (3, Some(key_name), Some(blob)) => on_tag(
            blob,
            SetState {
                ctx,
                key_name,
                blob,
            },
        )
        .unwrap_or_else(|| Err(CommandError::invalid_state("unknown algorithm"))),
        _ => Err(CommandError::Arity),
    };
    match result {
        Ok(()) => ctx.reply_ok(),
        Err(error) => ctx.reply_error(&error),
    }
}

/// Sets a key to the state `blob` encodes, of the type its tag names.
struct SetState<'a> {
    ctx: Ctx<'a>,
    key_name: KeyName<'a>,
    blob: &'a [u8],
}

impl StateVisitor for SetState<'_> {
    type Out = Result<(), CommandError>;

    fn visit<A: Stored>(self) -> Self::Out {
        let state = A::decode(self.blob).map_err(|e| CommandError::invalid_state(e.0))?;
        let mut key = Key::open(self.ctx, self.key_name, true);
        let fresh_at_ms = state.fresh_at_ms();
        key.put(state)?;
        written(self.ctx, &key, self.key_name, fresh_at_ms);
        // SAFETY: `ctx` is the running command's.
        unsafe { rm!(RedisModule_ReplicateVerbatim)(self.ctx.raw()) };
        Ok(())
    }
}

/// `RL.INFO key`: what the key holds, for a person: the algorithm, its
/// parameters as last used, its state as stored, what a request of 1 would
/// be told now, and the TTL. Null for a missing key.
pub unsafe extern "C" fn info_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, info_reply) }
}

fn info_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    let Some(key_name) = args.key(1).filter(|_| args.len() == 2) else {
        return ctx.reply_error(&CommandError::Arity);
    };
    let key = Key::open(ctx, key_name, false);
    let describe = Describe {
        key: &key,
        now_ms: now_ms(),
    };
    match first_of(describe) {
        Some(mut fields) => {
            fields.push(("ttl_ms", Field::Int(key.ttl_ms())));
            ctx.reply_fields(&fields)
        }
        None if key.is_empty() => ctx.reply_null(),
        None => ctx.reply_error(&CommandError::wrong_type()),
    }
}

/// The fields of `RL.INFO` for a key, if it holds an `A`.
#[derive(Clone, Copy)]
struct Describe<'k, 'a> {
    key: &'k Key<'a>,
    now_ms: i64,
}

impl StateVisitor for Describe<'_, '_> {
    type Out = Option<Vec<(&'static str, Field)>>;

    fn visit<A: Stored>(self) -> Self::Out {
        let state = self.key.get::<A>()?;
        let now = state.peek(self.now_ms);
        let mut fields = vec![("algorithm", Field::Text(A::NAME.as_bytes().to_vec()))];
        fields.extend(state.describe());
        fields.push(("remaining", Field::Int(now.remaining as i64)));
        fields.push(("reset_after_ms", Field::Int(now.reset_after_ms)));
        Some(fields)
    }
}
