//! `RL.TOP [count] [WITHERROR]` / `RL.TOP RESET`: the keys denied most
//! often on this server, from its sketch (`super::super::sketch`).

use super::super::command_info::{integer, pure_token, Doc, FIRST_RELEASE, NO_KEYS};
use super::super::ffi::{command, Args, Command, Ctx, KeyToken, Status};
use super::super::sketch;
use crate::parse::{self, TopArgs};

command! {
    /// `RL.TOP [count] [WITHERROR]`, `RL.TOP RESET`.
    pub fn top_command => top_reply;
}

fn top_reply(ctx: Ctx<'_>, _token: &mut KeyToken, args: &Args<'_>) -> Status {
    match parse::top(&args.bytes_from(1)) {
        Err(error) => ctx.reply_error(&error),
        Ok(TopArgs::Reset) => {
            sketch::reset();
            ctx.reply_ok()
        }
        Ok(TopArgs::List { count, with_error }) => {
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            let replied = sketch::with_top(count, |listed| {
                ctx.reply_array(listed.len() * if with_error { 3 } else { 2 });
                for tracked in listed {
                    ctx.reply_bytes(tracked.key);
                    ctx.reply_integer(as_reply(tracked.count));
                    if with_error {
                        ctx.reply_integer(as_reply(tracked.error));
                    }
                }
            });
            if replied.is_none() {
                ctx.reply_array(0);
            }
            Status
        }
    }
}

/// A count as an integer reply (no count reaches 2^63 in practice).
fn as_reply(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// `RL.TOP`'s entry in the command table. Read-only (it reads no key and
/// writes none; `RESET` clears this server's own counts), so read-only
/// replicas answer it for their own clients; allowed while loading and
/// on a stale replica, since it reads nothing the keyspace holds. Not
/// `fast`: a listing is as long as asked, up to the sketch's size.
pub fn command() -> Command {
    Command {
        name: c"rl.top".into(),
        handler: top_command,
        flags: c"readonly allow-loading allow-stale",
        keys: (0, 0, 0),
        doc: Doc {
            summary: "The keys denied most often on this server (since it started, RL.TOP RESET, or a change of ratelimit.top-keys), most first, as a flat array of key, count pairs. Counts come from a sketch of ratelimit.top-keys slots: each is at least the key's true count and exceeds it by at most the number of denials counted divided by the slots. RL.TOP RESET (alone) starts over and replies OK.",
            since: FIRST_RELEASE,
            complexity: "O(N log N) where N is the count asked for, plus the keys tied at the last count listed",
            keys: NO_KEYS,
            args: vec![
                integer("count", "How many keys to list, most denied first: a whole number from 1 to 2^53-1 (default 10). Fewer are listed when fewer are tracked."),
                pure_token("witherror", "WITHERROR", "Reply key, count, error triples: the key's true count lies between count - error and count."),
                pure_token("reset", "RESET", "Alone: forget every count and start over (replies OK)."),
            ]
            .into_iter()
            .map(|arg| arg.optional())
            .collect(),
        },
    }
}
