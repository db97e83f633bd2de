//! From a client's command to its reply: every check command,
//! `CL.THROTTLE`, `RL.PEEK`, `RL.ALL` and `RL.ACQUIRE` hand their parsed
//! request to [`respond`], which queues it behind waiters or decides it,
//! propagates what it changed, has it wait (`BLOCK`) or answers it.

use super::engine::decide::decide;
use super::ffi::{Args, KeyName, Status};
use super::key::KeyToken;
use super::outcome::answer;
use super::replicate::Run;
use super::request::Request;
use super::waiters;
use crate::algorithms::Mode;

/// From a client's command to its reply: a request that takes is queued
/// behind the clients already waiting on its keys (`BLOCK`): with `BLOCK` it
/// waits its turn, without it is denied. Otherwise it is decided, and what it
/// changed propagated; a denied request with `BLOCK` waits (when it can pass
/// within its wait); the rest is counted, announced and answered.
pub fn respond(run: &Run<'_>, args: &Args<'_>, request: Request, keys: &[KeyName<'_>]) -> Status {
    let ctx = run.ctx;
    let token = &mut KeyToken::of(ctx);
    let mode = request.mode();
    let block_ms = request.block_ms().filter(|_| waiters::can_block(ctx));
    if mode == Mode::Take && waiters::queued(ctx, keys) {
        if let Some(block_ms) = block_ms {
            return waiters::wait(ctx, args, request, keys, block_ms, None);
        }
        return match decide(run, token, &request, keys, Mode::Peek) {
            Ok(outcome) => {
                let outcome = outcome.denied(waiters::next_turn_ms(ctx, keys));
                answer(run, &request, keys, &outcome)
            }
            Err(error) => ctx.reply_error(&error),
        };
    }
    let decided = decide(run, token, &request, keys, mode);
    run.propagate(Some(args), request.drawn_id());
    let outcome = match decided {
        Ok(outcome) => outcome,
        Err(error) => return ctx.reply_error(&error),
    };
    let decision = *outcome.decision();
    if let (Some(block_ms), false, Mode::Take) = (block_ms, decision.allowed, mode) {
        let retry = decision.retry_after_ms;
        let in_time = block_ms == 0 || retry <= block_ms as i64 || !request.retry_is_known();
        if retry >= 0 && in_time {
            return waiters::wait(ctx, args, request, keys, block_ms, Some(retry));
        }
    }
    answer(run, &request, keys, &outcome)
}
