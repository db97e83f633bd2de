//! `RL.APPLY` and `RL.APPLYALL`: replays (`crate::replay`), the way
//! replicas and AOF files receive what a command changed. Each runs the
//! command it replays through the very code that ran it on the primary,
//! on the time and settings the primary pinned. Only a server's primary or
//! its AOF may send them: a client could otherwise pin any time.

use super::super::engine::decide::decide;
use super::super::engine::leases::release;
use super::super::ffi::{command, Args, Ctx, KeyToken, Status, Words};
use super::super::replicate::Run;
use super::super::request::Request;
use super::super::waiters;
use super::all::{declare_keys, keys};
use super::policy::replayed_definition;
use super::refund::refund;
use crate::error::CommandError;
use crate::parse;
use crate::replay::{Command, Header};
use std::sync::Arc;

command! {
    /// `RL.APPLY key <header><word> [word ...]`: a replay of a command on one
    /// key.
    pub fn apply_command => apply_reply;
}

fn apply_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let result = replayed(ctx, args, 2).and_then(|(header, words)| {
        let run = Run::replay(ctx, &header);
        let key = args.key(1).ok_or(CommandError::Arity)?;
        let result = match header.command {
            Command::Release => release(&run, token, Some(key), &words).map(|released| {
                if released {
                    waiters::freed(ctx, token, key);
                }
            }),
            Command::Refund => refund(&run, token, Some(key), &words).map(drop),
            Command::All => Err(CommandError::invalid_state("RL.ALL replays as RL.APPLYALL")),
            command => Request::parse(command, &words, header.drawn_id)
                .and_then(|request| decide(&run, token, &request, &[key], request.mode()))
                .map(drop),
        };
        run.propagate(Some(args), None);
        result
    });
    reply(ctx, result)
}

command! {
    /// `RL.APPLYALL <header><numkeys> key [key ...] <specs> [options]`: a replay
    /// of `RL.ALL`.
    pub fn apply_all_command => apply_all_reply;
}

fn apply_all_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    if ctx.is_keys_position_request() {
        let mut words = args.bytes_from(1);
        if let Some(first) = words.first_mut() {
            *first = Header::unglue(first).map_or(&[][..], |(_, numkeys)| numkeys);
        }
        return declare_keys(ctx, args, &words);
    }
    let result = replayed(ctx, args, 1).and_then(|(header, words)| {
        if header.command != Command::All {
            return Err(CommandError::invalid_state("not a replay of RL.ALL"));
        }
        let run = Run::replay(ctx, &header);
        let result = parse::all(&words).and_then(|parsed| {
            let keys = keys(args, &parsed)?;
            let request = Request::All(parsed);
            decide(&run, token, &request, &keys, request.mode()).map(drop)
        });
        run.propagate(Some(args), None);
        result
    });
    reply(ctx, result)
}

command! {
    /// `RL.APPLYCHECK <header><definition> key [key ...] [options]`: a
    /// replay of `RL.CHECK`, its policy's definition in place of its name.
    pub fn apply_check_command => apply_check_reply;
}

fn apply_check_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    if ctx.is_keys_position_request() {
        let tiers = args
            .bytes(1)
            .and_then(|glued| Header::unglue(glued).ok())
            .and_then(|(_, word)| replayed_definition(word).ok())
            .map_or(0, |(_, definition)| definition.tiers.len());
        for position in 2..2 + tiers {
            ctx.key_at_pos(args, position);
        }
        return Status;
    }
    let result = replayed(ctx, args, 1).and_then(|(header, words)| {
        if header.command != Command::Policy {
            return Err(CommandError::invalid_state("not a replay of RL.CHECK"));
        }
        let run = Run::replay(ctx, &header);
        let (stamp, definition) = replayed_definition(words.first().copied().unwrap_or_default())?;
        let n = definition.tiers.len();
        let keys: Vec<_> = (2..2 + n).filter_map(|i| args.key(i)).collect();
        if keys.len() != n {
            return Err(CommandError::Arity);
        }
        let options = Request::policy_options(&definition, words.get(1 + n..).unwrap_or_default());
        let result = options
            .map(|options| Request::Policy {
                definition: Arc::new(definition),
                options,
                counters: Arc::default(),
                stamp,
            })
            .and_then(|request| decide(&run, token, &request, &keys, request.mode()).map(drop));
        run.propagate(Some(args), None);
        result
    });
    reply(ctx, result)
}

/// The header, and the replayed command's words from `glued_at` on (the
/// header taken off the first), of a replay a primary or an AOF file sent.
fn replayed<'a>(
    ctx: Ctx<'_>,
    args: &Args<'a>,
    glued_at: usize,
) -> Result<(Header, Words<'a>), CommandError> {
    if !ctx.sent_by_primary_or_aof() {
        return Err(CommandError::internal_command());
    }
    let mut words = args.bytes_from(glued_at);
    let Some(first) = words.first_mut() else {
        return Err(CommandError::Arity);
    };
    let (header, word) = Header::unglue(first).map_err(|e| CommandError::invalid_state(e.0))?;
    *first = word;
    Ok((header, words))
}

/// Replies go to the primary or the AOF loader, which drop them; an error
/// still shows in the server's statistics (`INFO errorstats`).
fn reply(ctx: Ctx<'_>, result: Result<(), CommandError>) -> Status {
    match result {
        Ok(()) => ctx.reply_ok(),
        Err(error) => ctx.reply_error(&error),
    }
}
