//! Serving a waiter: the server as the room's [`Host`]. A waiter's request
//! is decided against what its keys hold now, in the same call that takes
//! it (so nothing can come between the decision and the taking),
//! propagated as a replay of its command, and its client answered through
//! the FFI room that owns the blocked clients' handles (`ffi::block`).
//!
//! In a cluster, a waiter whose keys have left this node (resharding moves
//! them with `MIGRATE`, which removes them here) is answered with where they
//! went (`ASK`, `MOVED`, `TRYAGAIN`: `ffi::cluster::redirect_for`), never
//! decided against a fresh key on a node that no longer serves its slot.

use std::sync::atomic::Ordering::Relaxed;

use super::super::engine::decide::decide;
use super::super::engine::store::Store;
use super::super::ffi::args::OwnedNames;
use super::super::ffi::block::unblock;
use super::super::ffi::cluster::redirect_for;
use super::super::ffi::{now_ms, Ctx};
use super::super::key::KeyToken;
use super::super::outcome::tally;
use super::super::replicate::Run;
use super::super::request::Request;
use super::super::stats::{WAITS_ALLOWED, WAITS_TIMED_OUT};
use super::hold::{paused, Hold};
use super::timer::set_timer;
use super::waiter::{Answer, Parked, Waiters};
use crate::algorithms::Mode;
use crate::error::CommandError;
use crate::policies;
use crate::wait::{Host, Turn, Waiter};
use std::sync::Arc;

/// The server, as the room's host, for one call: its context, and the
/// call's token, lent to the keys a waiter's turn opens.
pub struct Server<'a> {
    ctx: Ctx<'a>,
    token: &'a mut KeyToken,
    hold: Hold,
}

impl<'a> Server<'a> {
    pub fn new(ctx: Ctx<'a>, token: &'a mut KeyToken) -> Self {
        Self {
            ctx,
            token,
            hold: Hold::now(),
        }
    }
}

impl Host<Parked> for Server<'_> {
    type Answer = Answer;

    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn writes_paused(&self) -> bool {
        paused()
    }

    fn out_of_time(&self) -> bool {
        self.hold.over()
    }

    fn take(&mut self, waiter: &Waiter<Parked>) -> Turn<Answer> {
        let ctx = self.ctx;
        ctx.select_db(waiter.db);
        let names = OwnedNames::new(&waiter.keys);
        let keys = names.key_names();
        // In a cluster, a waiter whose keys left this node (resharding) is
        // sent where they went: never decided, nor a key written, here.
        if let Some(redirect) = redirect_for(ctx, &keys) {
            return Turn::Answered(Err(redirect));
        }
        let followed = match following(&waiter.request, keys.len()) {
            Ok(followed) => followed,
            Err(error) => return Turn::Answered(Err(error)),
        };
        let parked = followed.as_ref().unwrap_or(&waiter.request);
        let (command, glue_at) = parked.request.replayed_as();
        let run = Run::woken(ctx, command, glue_at, &parked.words);
        let decided = decide(&run, self.token, &parked.request, &keys, Mode::Take);
        run.propagate(None, parked.request.drawn_id());
        match decided {
            Ok(outcome) if outcome.decision().allowed => {
                tally(ctx, &parked.request, &keys, &outcome);
                WAITS_ALLOWED.fetch_add(1, Relaxed);
                Turn::Taken(Ok(outcome))
            }
            Ok(outcome) if outcome.decision().retry_after_ms < 0 => {
                // Changed parameters made it impossible: answered now, a
                // denial like any other.
                tally(ctx, &parked.request, &keys, &outcome);
                Turn::Answered(Ok(outcome))
            }
            Ok(outcome) => {
                let retry_ms = outcome.decision().retry_after_ms.max(1);
                // Its turn now comes after its deadline (its policy changed
                // under it): answered now, as a check sent now would be;
                // waiting on would hold its keys for nothing (a hold reaches
                // a turn within the wait only), and a key expiring at its old
                // time would let it through early on a new one. An acquire
                // waits on: a release may come first.
                let late = waiter
                    .deadline_ms
                    .is_some_and(|deadline| run.now_ms().saturating_add(retry_ms) > deadline);
                if late && parked.request.retry_is_known() {
                    return Turn::Answered(timed_out_answer(ctx, self.token, waiter));
                }
                Turn::NotYet(retry_ms)
            }
            Err(error) => Turn::Answered(Err(error)),
        }
    }

    fn timed_out(&mut self, waiter: &Waiter<Parked>) -> Answer {
        self.ctx.select_db(waiter.db);
        timed_out_answer(self.ctx, self.token, waiter)
    }

    fn answer(&mut self, waiter: Waiter<Parked>, answer: Answer) {
        unblock::<Waiters>(waiter.id.0, answer);
    }

    fn wake_at(&mut self, at_ms: i64) {
        set_timer(self.ctx, at_ms);
    }
}

/// The answer of a waiter whose wait ended before its turn: denied, from
/// the state as it is now, nothing taken; counted and announced as a
/// denial.
pub fn timed_out_answer(ctx: Ctx<'_>, token: &mut KeyToken, waiter: &Waiter<Parked>) -> Answer {
    WAITS_TIMED_OUT.fetch_add(1, Relaxed);
    let names = OwnedNames::new(&waiter.keys);
    let keys = names.key_names();
    if let Some(redirect) = redirect_for(ctx, &keys) {
        return Err(redirect);
    }
    let followed = following(&waiter.request, keys.len())?;
    let request = &followed.as_ref().unwrap_or(&waiter.request).request;
    let (command, glue_at) = request.replayed_as();
    let run = Run::live(ctx, command, glue_at);
    let outcome = decide(&run, token, request, &keys, Mode::Peek)?.denied(1);
    tally(ctx, request, &keys, &outcome);
    Ok(outcome)
}

/// A waiter that checks by a policy's name, as the policy stands now: `None`
/// when it is no such waiter or its policy is the one it parked under; the
/// error a check by that name gets now when the policy was deleted (never a
/// take under a policy that is gone) or now names another number of keys.
/// A changed policy decides the waiter by its new version (its keys migrate
/// by the policy's `ON-CHANGE`), as a client sending the check now would be.
fn following(parked: &Parked, keys: usize) -> Result<Option<Parked>, CommandError> {
    let (Some(name), Request::Policy { .. }) = (&parked.policy, &parked.request) else {
        return Ok(None);
    };
    let store = policies::store();
    let (policy, current) = store
        .get(name)
        .and_then(|policy| policy.current().map(|current| (policy, current)))
        .ok_or_else(|| policies::no_policy(name))?;
    if parked.words.get(1).map(|word| &word[..]) == Some(&current.replayed[..]) {
        return Ok(None);
    }
    let definition = &current.definition;
    if definition.tiers.len() != keys {
        return Err(policies::wrong_keys(name, definition.tiers.len()));
    }
    let options: Vec<&[u8]> = parked
        .words
        .get(2 + keys..)
        .unwrap_or_default()
        .iter()
        .map(Vec::as_slice)
        .collect();
    let options = Request::policy_options(definition, &options)?;
    let mut words = parked.words.clone();
    if let Some(word) = words.get_mut(1) {
        word.clone_from(&current.replayed);
    }
    Ok(Some(Parked {
        words,
        request: Request::Policy {
            definition: Arc::clone(definition),
            options,
            counters: Arc::clone(&policy.counters),
            stamp: current.stamp,
        },
        policy: Some(name.clone()),
    }))
}
