//! `RL.REFUND key <ALGORITHM> <params> amount [AT ms]`: gives back quota a
//! grant took and did not spend (`crate::algorithms::partial`).

use super::super::engine::check::refund_tier;
use super::super::ffi::{command, Args, Ctx, KeyName, KeyToken, Status};
use super::super::replicate::Run;
use super::super::waiters;
use crate::error::CommandError;
use crate::parse;
use crate::replay::Command;

command! {
    /// `RL.REFUND key <ALGORITHM> <params> amount [AT ms]`: the units given
    /// back.
    pub fn refund_command => refund_reply;
}

fn refund_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::Refund, 2);
    let result = refund(&run, token, args.key(1), &args.bytes_from(2));
    run.propagate(Some(args), None);
    match result {
        Ok(given) => ctx.reply_integer(given as i64),
        Err(error) => ctx.reply_error(&error),
    }
}

/// A refund on `key_name`, `words` being what follows the key: the units
/// given back. Units given back may let a waiter (`BLOCK`) on the key go:
/// it is told, as `RL.RELEASE` tells a lease's waiters.
pub fn refund(
    run: &Run<'_>,
    token: &mut KeyToken,
    key_name: Option<KeyName<'_>>,
    words: &[&[u8]],
) -> Result<u64, CommandError> {
    let Some(key_name) = key_name else {
        return Err(CommandError::Arity);
    };
    let parsed = parse::refund(words)?;
    let given = refund_tier(
        run,
        token,
        key_name,
        &parsed.tier,
        parsed.amount,
        parsed.granted_at_ms,
    )?;
    if given > 0 {
        waiters::freed(run.ctx, token, key_name);
    }
    Ok(given)
}
