//! The check commands (`RL.<ALGORITHM>`, `CL.THROTTLE`, `RL.PEEK`): each
//! parses its words into a request (`super::super::request`) and hands it
//! to `super::super::respond`; the engine decides it
//! (`super::super::engine::check`).

use super::super::engine::Checked;
use super::super::ffi::{command, Args, Ctx, KeyToken, Status, Words};
use super::super::outcome::reply_decision;
use super::super::replicate::Run;
use super::super::request::Request;
use super::super::respond::{respond, respond_plain, Plain};
use super::super::stats;
use super::super::waiters;
use super::params;
use crate::algorithms::gcra::Gcra;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::{self, IntoTier};
use crate::redis_cell::cl_throttle_reply;
use crate::replay::Command;

command! {
    /// `RL.<ALGORITHM> key <params> [COST n] [PEEK] [BLOCK ms]`.
    pub fn check_command<A: Checked> => check_reply::<A>;
}

fn check_reply<A: Checked>(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::Check(A::TAG), 2);
    let mut words = Words::none();
    args.fill_from(2, &mut words);
    // The words of the last check without options: their parameters, no
    // options (`None`: the defaults), nothing parsed.
    let parsed = match params::kept::<A::Params>(ctx, &words) {
        Some(params) => Ok((params, None)),
        None => params::check_args::<A::Params>(ctx, &words).map(|(p, o)| (p, Some(o))),
    };
    // The plain check (no PEEK, BLOCK or UPTO, no waiter before it): its
    // straight path, which knows its algorithm.
    if let (Some(key), Ok((params, options))) = (args.key(1), &parsed) {
        let plain = match options {
            None => (!waiters::queued(ctx, &[key])).then(|| Plain::of_defaults(A::counter())),
            Some(options) => Plain::of(ctx, key, options, A::counter()),
        };
        if let Some(plain) = plain {
            return respond_plain::<A>(&run, token, args, key, *params, plain, reply_decision);
        }
    }
    let request = parsed.map(|(params, options)| Request::Check {
        tier: params.into_tier(),
        options: options.unwrap_or_default(),
    });
    one_key(&run, token, args, request)
}

/// A request on the command's one key (its first argument).
fn one_key(
    run: &Run<'_>,
    token: &mut KeyToken,
    args: &Args<'_>,
    request: Result<Request, CommandError>,
) -> Status {
    match (args.key(1), request) {
        (Some(key), Ok(request)) => respond(run, token, args, request, &[key]),
        (None, _) => run.ctx.reply_error(&CommandError::Arity),
        (_, Err(error)) => run.ctx.reply_error(&error),
    }
}

command! {
    /// `CL.THROTTLE key max_burst count period [quantity]`: redis-cell's command
    /// and reply, on the GCRA type (so `RL.GCRA` reads the same keys).
    pub fn cl_throttle_command => cl_throttle_reply_to;
}

fn cl_throttle_reply_to(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let run = Run::live(ctx, Command::ClThrottle, 2);
    let mut words = Words::none();
    args.fill_from(2, &mut words);
    let plain = Plain {
        cost: 1,
        penalty_ms: None,
        shadow: false,
        counter: &stats::CL_THROTTLE,
    };
    let reply: fn(Ctx<'_>, &Decision) -> Status =
        |ctx, d| ctx.reply_integers(&cl_throttle_reply(d));
    // The words of the last call without a quantity, no waiter before it:
    // a take of 1 on the plain check's straight path, nothing parsed.
    if let (Some(key), Some(params)) = (args.key(1), params::kept_throttle(ctx, &words)) {
        if !waiters::queued(ctx, &[key]) {
            return respond_plain::<Gcra>(&run, token, args, key, params, plain, reply);
        }
    }
    let parsed = params::cl_throttle_args(ctx, &words);
    // A quantity taken, no waiter before it: the plain check's straight path.
    if let (Some(key), Ok(throttle)) = (args.key(1), &parsed) {
        if throttle.mode == Mode::Take && !waiters::queued(ctx, &[key]) {
            let plain = Plain {
                cost: throttle.cost,
                ..plain
            };
            return respond_plain::<Gcra>(&run, token, args, key, throttle.params, plain, reply);
        }
    }
    one_key(&run, token, args, parsed.map(Request::Throttle))
}

command! {
    /// `RL.PEEK key <ALGORITHM> <params> [COST n]`: a check's answer, changing
    /// nothing, from a command flagged read-only, so that read-only replicas and
    /// `EVAL_RO` scripts can answer it (for dashboards reading what is left).
    pub fn peek_command => peek_reply;
}

fn peek_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let request =
        parse::peek(&args.bytes_from(2)).map(|(tier, options)| Request::Check { tier, options });
    // Nothing changes, so nothing is propagated: the replay named is moot.
    let run = Run::live(ctx, Command::All, 1);
    one_key(&run, token, args, request)
}
