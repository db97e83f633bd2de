//! `RL.ALL numkeys key [key ...] <ALGORITHM params> [...] [options]`:
//! every tier checked at one instant; the request is taken from all of them
//! or from none (`super::super::engine::all`).

use super::super::config;
use super::super::ffi::{command, Args, Ctx, KeyName, KeyToken, Status};
use super::super::replicate::Run;
use super::super::request::Request;
use super::super::respond::respond;
use crate::error::CommandError;
use crate::parse::{self, AllArgs};
use crate::replay::Command;

command! {
    pub fn all_command => all_reply;
}

fn all_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    if ctx.is_keys_position_request() {
        return declare_keys(ctx, args, &args.bytes_from(1));
    }
    let words = args.bytes_from(1);
    if let Err(error) = within_max_keys(&words) {
        return ctx.reply_error(&error);
    }
    let run = Run::live(ctx, Command::All, 1);
    match parse::all(&words).and_then(|parsed| Ok((keys(args, &parsed)?, parsed))) {
        Ok((keys, parsed)) => respond(&run, token, args, Request::All(parsed), &keys),
        Err(error) => ctx.reply_error(&error),
    }
}

/// The keys of `RL.ALL` (or of its replay): the arguments after `numkeys`.
pub fn keys<'a>(args: &Args<'a>, parsed: &AllArgs) -> Result<Vec<KeyName<'a>>, CommandError> {
    if args.len() < 4 {
        return Err(CommandError::Arity);
    }
    (0..parsed.tiers.len())
        .map(|i| args.key(2 + i))
        .collect::<Option<Vec<_>>>()
        .ok_or(CommandError::Arity)
}

/// Refuses a client's `RL.ALL` over more keys than the setting `max-keys`,
/// before anything runs: the command holds the server for its whole run.
/// Replays (`RL.APPLYALL`) are not bounded: a replica or an AOF file must
/// do what its primary did, whatever its own setting.
fn within_max_keys(words: &[&[u8]]) -> Result<(), CommandError> {
    let max = config::max_keys();
    match parse::numkeys(words) {
        Ok(n) if n > max => Err(CommandError::too_many_keys(max)),
        _ => Ok(()),
    }
}

/// Answers Redis's question of which arguments are keys (cluster routing,
/// ACLs, `COMMAND GETKEYS`), given the words from `numkeys` on: the
/// `numkeys` arguments after `numkeys`, or none when `numkeys` is not valid
/// (the command itself then says why).
pub fn declare_keys(ctx: Ctx<'_>, args: &Args<'_>, words: &[&[u8]]) -> Status {
    if let Ok(n) = parse::numkeys(words) {
        for position in 2..2 + n {
            ctx.key_at_pos(args, position);
        }
    }
    Status
}
