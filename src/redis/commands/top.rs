//! `RL.TOP [count] [WITHERROR]` / `RL.TOP RESET`: the keys denied most
//! often on this server, from one Space-Saving sketch (`crate::top`) of
//! `top-keys` slots that every denial of a client's request feeds
//! ([`denied`], called where a request is answered, so replays, which a
//! replica or an AOF load applies, are never counted: their primary did).
//!
//! The sketch is the server's own: not saved, not replicated, not shared
//! between a cluster's nodes. It counts key names, whatever the database.

use std::cell::RefCell;
use std::ffi::c_int;

use redis_module::raw;

use super::super::api::{run, Args, Ctx, KeyName, Status};
use super::super::command_info::{integer, pure_token, Doc, FIRST_RELEASE, NO_KEYS};
use super::super::config::top_keys;
use super::Command;
use crate::parse::{self, TopArgs};
use crate::top::TopKeys;

thread_local! {
    /// Commands and callbacks run on Redis's main thread only.
    static SKETCH: RefCell<TopKeys> = RefCell::new(TopKeys::new(top_keys()));
}

/// Counts a denial of a client's request on `key` (nothing when `top-keys`
/// is 0). O(1); the key's name is copied when it takes a slot.
pub fn denied(key: KeyName<'_>) {
    SKETCH.with(|sketch| {
        if let Ok(mut sketch) = sketch.try_borrow_mut() {
            sketch.add(key.bytes());
        }
    });
}

/// Follows the setting `top-keys`: a new size starts the counts over (and
/// frees the old sketch's memory, all of it when the size is 0), since the
/// sketch's bound, N / m, holds for the counts made at one size m. Setting
/// the size it has changes nothing. (A `CONFIG SET` of several settings
/// that fails on another one sets this one back, which starts over twice.)
pub fn resize() {
    let size = top_keys();
    SKETCH.with(|sketch| {
        if let Ok(mut sketch) = sketch.try_borrow_mut() {
            if sketch.capacity() != size {
                *sketch = TopKeys::new(size);
            }
        }
    });
}

/// `INFO ratelimit`'s numbers: the keys tracked, and the denials counted
/// since the sketch started (its N).
pub fn info_numbers() -> (u64, u64) {
    SKETCH.with(|sketch| {
        sketch
            .try_borrow()
            .map_or((0, 0), |s| (s.len() as u64, s.total()))
    })
}

/// `RL.TOP [count] [WITHERROR]`, `RL.TOP RESET`.
pub unsafe extern "C" fn top_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes this command's own context and arguments.
    unsafe { run(ctx, argv, argc, top_reply) }
}

fn top_reply(ctx: Ctx<'_>, args: &Args<'_>) -> Status {
    match parse::top(&args.bytes_from(1)) {
        Err(error) => ctx.reply_error(&error),
        Ok(TopArgs::Reset) => {
            SKETCH.with(|sketch| {
                if let Ok(mut sketch) = sketch.try_borrow_mut() {
                    *sketch = TopKeys::new(top_keys());
                }
            });
            ctx.reply_ok()
        }
        Ok(TopArgs::List { count, with_error }) => SKETCH.with(|sketch| {
            let Ok(sketch) = sketch.try_borrow() else {
                ctx.reply_array(0);
                return Status;
            };
            let listed = sketch.top(usize::try_from(count).unwrap_or(usize::MAX));
            ctx.reply_array(listed.len() * if with_error { 3 } else { 2 });
            for tracked in listed {
                ctx.reply_bytes(tracked.key);
                ctx.reply_integer(as_reply(tracked.count));
                if with_error {
                    ctx.reply_integer(as_reply(tracked.error));
                }
            }
            Status
        }),
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
