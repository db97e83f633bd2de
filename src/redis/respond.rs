//! From a client's command to its reply: every check command,
//! `CL.THROTTLE`, `RL.PEEK`, `RL.ALL` and `RL.ACQUIRE` hand their parsed
//! request to [`respond`], which queues it behind waiters or decides it,
//! propagates what it changed, has it wait (`BLOCK`) or answers it.

use super::engine::check::apply_open;
use super::engine::decide::decide;
use super::engine::leases::renews;
use super::engine::migrate::decided_if_current;
use super::engine::store::Store;
use super::engine::Checked;
use super::ffi::{Args, Ctx, KeyName, Status};
use super::key::KeyToken;
use super::outcome::{answer, answer_one, reply_decision};
use super::replicate::Run;
use super::request::Request;
use super::stats::Counter;
use super::waiters;
use crate::algorithms::penalty::Stamp;
use crate::algorithms::{Decision, Mode};
use crate::parse::Tier;
use crate::policies::Counters;

/// From a client's command to its reply: a request that takes is queued
/// behind the clients already waiting on its keys (`BLOCK`): with `BLOCK` it
/// waits its turn, without it is denied. Otherwise it is decided, and what it
/// changed propagated; a denied request with `BLOCK` waits (when it can pass
/// within its wait); the rest is counted, announced and answered. The
/// command's `token` is lent to every key it opens.
pub fn respond(
    run: &Run<'_>,
    token: &mut KeyToken,
    args: &Args<'_>,
    request: Request,
    keys: &[KeyName<'_>],
) -> Status {
    let ctx = run.ctx;
    let mode = request.mode();
    let block_ms = request.block_ms().filter(|_| waiters::can_block(ctx));
    if mode == Mode::Take && waiters::queued(ctx, keys) && !renewal(run, token, &request, keys) {
        if let Some(block_ms) = block_ms {
            return waiters::wait(ctx, token, args, request, keys, block_ms, None);
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
            return waiters::wait(ctx, token, args, request, keys, block_ms, Some(retry));
        }
    }
    answer(run, &request, keys, &outcome)
}

/// Whether `request` is an `RL.ACQUIRE` renewing the live lease its id
/// holds on its key: it takes no slot, so it goes past the key's waiters
/// rather than queue behind them (denied without `BLOCK`, the heartbeat of
/// a job that holds its slot would fail whenever someone waits for one,
/// and its lease end, handing its slot to a waiter while the job runs).
fn renewal(run: &Run<'_>, token: &mut KeyToken, request: &Request, keys: &[KeyName<'_>]) -> bool {
    match (request, keys) {
        (
            Request::Acquire {
                id, drawn: false, ..
            },
            [key],
        ) => renews(run, token, *key, id),
        _ => false,
    }
}

/// A plain request of one key (`Plain::of` said it is: it takes, waits for
/// nothing, asks no partial grant) of the algorithm `A`: what [`respond`]
/// does with it, on a straight path that knows its algorithm and its
/// options, with no [`Request`] or `Outcome` to build and match again.
/// The caller made sure no client waits on the key (`waiters::queued`):
/// then [`respond`] would decide it, propagate what it changed, and count,
/// announce and answer it, as here.
#[inline(always)]
pub fn respond_plain<A: Checked>(
    run: &Run<'_>,
    token: &mut KeyToken,
    args: &Args<'_>,
    key: KeyName<'_>,
    params: A::Params,
    plain: Plain,
    reply: fn(Ctx<'_>, &Decision) -> Status,
) -> Status {
    let ctx = run.ctx;
    // `apply`'s take, on its key opened here: inlined into the command
    // (no call, and the decision not moved through `apply`'s `Result`).
    let opened = run.write(token, key);
    let decided =
        apply_open::<Run<'_>, A>(run, opened, key, params, plain.cost, plain.penalty_ms, None);
    run.propagate_check(args);
    match decided {
        Ok(decision) => answer_one(
            ctx,
            plain.counter,
            None,
            key,
            plain.shadow,
            &decision,
            reply,
        ),
        Err(error) => ctx.reply_error(&error),
    }
}

/// A plain check by a policy's name (`RL.CHECK` of one tier, `Plain::of`
/// said it is plain, its policy `stamp`ed): what [`respond`] does with its
/// `Request::Policy`, on a straight path. Decided on its key when the key
/// is current (`decided_if_current`, as `decide`'s `by_name` does first),
/// then propagated, counted on the command's and the policy's counters,
/// announced and answered. `None`, having changed nothing, when the key
/// needs the migration step first: the caller then takes the general path.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn respond_by_name(
    run: &Run<'_>,
    token: &mut KeyToken,
    args: &Args<'_>,
    key: KeyName<'_>,
    tier: &Tier,
    stamp: Stamp,
    plain: Plain,
    counters: &Counters,
) -> Option<Status> {
    let ctx = run.ctx;
    let decided = match decided_if_current(
        run,
        token,
        key,
        tier,
        stamp,
        plain.cost,
        plain.penalty_ms,
        None,
    ) {
        Ok(None) => return None,
        Ok(Some(decision)) => Ok(decision),
        Err(error) => Err(error),
    };
    run.propagate_by_name(args);
    Some(match decided {
        Ok(decision) => answer_one(
            ctx,
            plain.counter,
            Some(counters),
            key,
            plain.shadow,
            &decision,
            reply_decision,
        ),
        Err(error) => ctx.reply_error(&error),
    })
}

/// What [`respond_plain`] needs of a plain request's options.
#[derive(Clone, Copy)]
pub struct Plain {
    pub cost: u64,
    /// `PENALTY`'s, unless in `SHADOW` mode (`super::engine::penalty_of`).
    pub penalty_ms: Option<u64>,
    pub shadow: bool,
    /// The command's line in `INFO ratelimit`.
    pub counter: &'static Counter,
}

impl Plain {
    /// The check of the default options (a take of 1, no `PENALTY`, not
    /// in `SHADOW` mode): `Plain::of` of `CheckOptions::default()`, when
    /// no client waits on the key.
    #[inline(always)]
    pub fn of_defaults(counter: &'static Counter) -> Plain {
        Plain {
            cost: 1,
            penalty_ms: None,
            shadow: false,
            counter,
        }
    }

    /// The check of `options`, counted on `counter`, when it is plain: it
    /// takes (no `PEEK`), waits for nothing (no `BLOCK`) and asks no partial
    /// grant (no `UPTO`), and no client waits on `key` before it.
    #[inline(always)]
    pub fn of(
        ctx: Ctx<'_>,
        key: KeyName<'_>,
        options: &crate::parse::CheckOptions,
        counter: &'static Counter,
    ) -> Option<Plain> {
        let plain = !options.peek && !options.upto && options.block_ms.is_none();
        (plain && !waiters::queued(ctx, &[key])).then(|| Plain {
            cost: options.cost,
            penalty_ms: super::engine::penalty_of(options),
            shadow: options.shadow,
            counter,
        })
    }
}
