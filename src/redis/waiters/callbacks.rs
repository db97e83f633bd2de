//! The callbacks Redis calls into the waiters from outside any command:
//! the room's timer firing (a wake-up), and for a waiting client its reply,
//! `CLIENT UNBLOCK` (Redis's timeout callback) and its going away (the
//! disconnect callback). Freeing a reply, and making sure each client is
//! unblocked exactly once whatever order these come in, is the FFI room's
//! (`ffi::block`). Calls come down from here: nothing below names these
//! functions, only the types they belong to ([`Wake`], [`Waiters`]).

use super::super::ffi::block::{Timer, Waiting};
use super::super::ffi::{Ctx, KeyToken, Status};
use super::events::{apply, take_pending, tell, Event};
use super::room::with_room;
use super::serving::timed_out_answer;
use super::timer::{fired, Wake};
use super::waiter::{Answer, Waiters};
use crate::wait::WaiterId;

/// The room's timer: the events kept aside first, in order, then the
/// room's own wake-up (deadlines, due queues).
impl Timer for Wake {
    fn fire(self, ctx: Ctx<'_>, token: &mut KeyToken) {
        fired();
        let pending = take_pending();
        with_room(ctx, token, |room, server| {
            for event in &pending {
                apply(room, server, event);
            }
            room.wake(server);
        });
    }
}

impl Waiting for Waiters {
    type Reply = Answer;

    /// Replies to an answered waiter.
    fn reply(ctx: Ctx<'_>, reply: Option<&Answer>) -> Status {
        match reply {
            Some(Ok(outcome)) => outcome.reply(ctx),
            Some(Err(error)) => ctx.reply_error(error),
            None => ctx.reply_null(),
        }
    }

    /// `CLIENT UNBLOCK`: the wait ends now, answered as timed out.
    fn unblocked(ctx: Ctx<'_>, token: &mut KeyToken, id: u64) -> Status {
        let left = with_room(ctx, token, |room, server| room.leave(server, WaiterId(id)));
        match left {
            Some(Some(waiter)) => match timed_out_answer(ctx, token, &waiter) {
                Ok(outcome) => outcome.reply(ctx),
                Err(error) => ctx.reply_error(&error),
            },
            Some(None) => ctx.reply_null(),
            None => {
                tell(ctx, token, Event::Left(WaiterId(id)));
                ctx.reply_null()
            }
        }
    }

    /// The client went away (or was killed, or the server answered it): it
    /// took nothing, and leaves.
    fn disconnected(ctx: Ctx<'_>, token: &mut KeyToken, id: u64) {
        tell(ctx, token, Event::Left(WaiterId(id)));
    }
}
