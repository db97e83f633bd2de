//! The concurrency limiter: `RL.ACQUIRE key limit lease [ID id]` and
//! `RL.RELEASE key id`.

use super::super::engine::leases::release;
use super::super::ffi::{command, Args, Ctx, KeyToken, Status};
use super::super::replicate::Run;
use super::super::request::Request;
use super::super::respond::respond;
use super::super::waiters;
use crate::error::CommandError;
use crate::replay::Command;

command! {
    /// `RL.ACQUIRE key limit lease [ID id]`: the five integers, then the lease's
    /// id (null when refused).
    pub fn acquire_command => acquire_reply;
}

fn acquire_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::Acquire, 2);
    match (
        args.key(1),
        Request::parse(Command::Acquire, &args.bytes_from(2), None),
    ) {
        (Some(key), Ok(request)) => respond(&run, token, args, request, &[key]),
        (None, _) => ctx.reply_error(&CommandError::Arity),
        (_, Err(error)) => ctx.reply_error(&error),
    }
}

command! {
    /// `RL.RELEASE key id`: 1 when `id` held a live lease, now given back;
    /// 0 otherwise. The key goes when its last lease does.
    pub fn release_command => release_reply;
}

fn release_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::Release, 2);
    let result = match args.len() {
        3 => release(&run, token, args.key(1), &args.bytes_from(2)),
        _ => Err(CommandError::Arity),
    };
    if let (Ok(true), Some(key)) = (&result, args.key(1)) {
        waiters::freed(ctx, token, key);
    }
    run.propagate(Some(args), None);
    match result {
        Ok(released) => ctx.reply_integer(i64::from(released)),
        Err(error) => ctx.reply_error(&error),
    }
}
