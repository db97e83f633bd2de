//! A request, whatever command made it: what was asked (parsed), how it is
//! decided, what it answers, and how a client's request goes from its
//! command to its reply ([`respond`]): queued behind waiters or not, decided,
//! propagated, waiting (`BLOCK`) or answered, counted. Every check command,
//! `CL.THROTTLE`, `RL.PEEK`, `RL.ALL` and `RL.ACQUIRE` go through it, so an
//! option that changes how requests are decided is written here once.

use super::super::api::{Args, Ctx, KeyName, Status};
use super::super::config::on_denied;
use super::super::key::Key;
use super::super::replicate::Run;
use super::super::stats::{self, Counted, Counter};
use super::super::waiters;
use super::all::all;
use super::check::{apply, apply_tier, reply_decision, reply_five_then};
use super::leases::acquire;
use super::top;
use crate::algorithms::concurrency::Leases;
use crate::algorithms::gcra::Gcra;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::{self, AcquireArgs, AllArgs, CheckOptions, Tier};
use crate::redis_cell::{cl_throttle_reply, ClThrottleArgs};
use crate::replay::Command;

/// What a client asked for, parsed.
pub enum Request {
    /// A check of one algorithm (its command, or `RL.PEEK`).
    Check { tier: Tier, options: CheckOptions },
    /// redis-cell's `CL.THROTTLE`.
    Throttle(ClThrottleArgs),
    /// `RL.ACQUIRE`, with the lease's id (`drawn` when the server drew it).
    Acquire {
        args: AcquireArgs,
        id: Vec<u8>,
        drawn: bool,
    },
    /// `RL.ALL`.
    All(AllArgs),
}

/// What a request is answered.
#[derive(Clone)]
pub enum Outcome {
    Decision(Decision),
    Throttle(Decision),
    /// An acquire's decision and, when allowed, its lease's id.
    Acquired(Decision, Option<Vec<u8>>),
    /// `RL.ALL`'s combined decision and each tier's.
    All(Decision, Vec<Decision>),
}

impl Request {
    /// The request of the command a replay names, from its words after the
    /// key (after the command's name for `RL.ALL`); for an acquire, the id
    /// the server drew, if it drew one.
    pub fn parse(
        command: Command,
        words: &[&[u8]],
        drawn_id: Option<Vec<u8>>,
    ) -> Result<Request, CommandError> {
        match command {
            Command::Check(tag) => check_request(tag, words)
                .unwrap_or_else(|| Err(CommandError::invalid_state("unknown algorithm"))),
            Command::ClThrottle => crate::redis_cell::cl_throttle(words).map(Request::Throttle),
            Command::Acquire => acquire_request(words, drawn_id),
            Command::All => parse::all(words).map(Request::All),
            Command::Release => Err(CommandError::invalid_state("not a request")),
        }
    }

    /// The command a replay of this request names, and the word it glues
    /// its header to.
    pub fn replayed_as(&self) -> (Command, usize) {
        match self {
            Request::Check { tier, .. } => (Command::Check(tier.tag()), 2),
            Request::Throttle(_) => (Command::ClThrottle, 2),
            Request::Acquire { .. } => (Command::Acquire, 2),
            Request::All(_) => (Command::All, 1),
        }
    }

    /// Whether the request takes (or only looks).
    pub fn mode(&self) -> Mode {
        match self {
            Request::Check { options, .. } => peek_or_take(options),
            Request::All(all) => peek_or_take(&all.options),
            Request::Throttle(throttle) => throttle.mode,
            Request::Acquire { .. } => Mode::Take,
        }
    }

    /// `BLOCK ms`, when given.
    pub fn block_ms(&self) -> Option<u64> {
        match self {
            Request::Check { options, .. } => options.block_ms,
            Request::All(all) => all.options.block_ms,
            Request::Acquire { args, .. } => args.block_ms,
            Request::Throttle(_) => None,
        }
    }

    /// Whether a denial's `retry_after_ms` is when the request passes, so a
    /// wait shorter than that need not start. For the rate algorithms it is;
    /// for an acquire it is when the first lease ends, and a release may come
    /// sooner.
    pub fn retry_is_known(&self) -> bool {
        !matches!(self, Request::Acquire { .. })
    }

    /// The id the server drew for an acquire, which its replay carries.
    pub fn drawn_id(&self) -> Option<&[u8]> {
        match self {
            Request::Acquire {
                id, drawn: true, ..
            } => Some(id),
            _ => None,
        }
    }

    /// `SHADOW`: never answered a denial (see [`Outcome::shadowed`]).
    pub fn shadow(&self) -> bool {
        match self {
            Request::Check { options, .. } => options.shadow,
            Request::All(all) => all.options.shadow,
            Request::Throttle(_) | Request::Acquire { .. } => false,
        }
    }

    /// The command's line in `INFO ratelimit`.
    pub fn counter(&self) -> &'static Counter {
        match self {
            Request::Check { tier, .. } => counter_of(tier),
            Request::Throttle(_) => &stats::CL_THROTTLE,
            Request::Acquire { .. } => &stats::ACQUIRE,
            Request::All(_) => &stats::ALL,
        }
    }

    /// Decides the request on `keys` (one, or `RL.ALL`'s), in `mode`.
    pub fn decide(
        &self,
        run: &Run<'_>,
        keys: &[KeyName<'_>],
        mode: Mode,
    ) -> Result<Outcome, CommandError> {
        let key = || keys.first().copied().ok_or(CommandError::Arity);
        Ok(match self {
            Request::Check { tier, options } => Outcome::Decision(apply_tier(
                run,
                key()?,
                tier,
                options.cost,
                mode,
                penalty_of(options),
            )?),
            Request::Throttle(throttle) => Outcome::Throttle(apply::<Gcra>(
                run,
                key()?,
                throttle.params,
                throttle.cost,
                mode,
                None,
            )?),
            Request::Acquire { args, id, .. } => match mode {
                Mode::Take => {
                    let decision = acquire(run, key()?, args.params, id)?;
                    Outcome::Acquired(decision, decision.allowed.then(|| id.clone()))
                }
                Mode::Peek => {
                    let key = Key::open(run.ctx, key()?, false);
                    let decision = match key.get::<Leases>() {
                        Some(leases) => leases.peek_with(args.params, run.now_ms),
                        None if key.is_empty() => {
                            Leases::new(args.params, run.now_ms).peek_with(args.params, run.now_ms)
                        }
                        None => return Err(CommandError::wrong_type()),
                    };
                    Outcome::Acquired(decision, None)
                }
            },
            Request::All(args) => {
                let (combined, tiers) = all(run, keys, args, mode)?;
                Outcome::All(combined, tiers)
            }
        })
    }
}

/// The penalty a denial starts: `PENALTY`'s, unless in `SHADOW` mode.
pub fn penalty_of(options: &CheckOptions) -> Option<u64> {
    options.penalty_ms.filter(|_| !options.shadow)
}

fn peek_or_take(options: &CheckOptions) -> Mode {
    if options.peek {
        Mode::Peek
    } else {
        Mode::Take
    }
}

/// `RL.ACQUIRE`'s request: the caller's id, or `drawn` (a replay's, a
/// waiter's), or one drawn now.
fn acquire_request(words: &[&[u8]], drawn: Option<Vec<u8>>) -> Result<Request, CommandError> {
    let args = parse::acquire(words)?;
    let (id, drawn) = match (&args.id, drawn) {
        (Some(id), _) => (id.clone(), false),
        (None, Some(id)) => (id, true),
        (None, None) => (super::super::api::random_hex(DRAWN_ID_LEN), true),
    };
    Ok(Request::Acquire { args, id, drawn })
}

/// The length of a lease id the server draws: 32 hex characters, 128 bits.
const DRAWN_ID_LEN: usize = 32;

impl Outcome {
    pub fn decision(&self) -> &Decision {
        match self {
            Outcome::Decision(d) | Outcome::Throttle(d) | Outcome::Acquired(d, _) => d,
            Outcome::All(d, _) => d,
        }
    }

    /// The same answer, denied: what a request gets when it did not take,
    /// because others wait before it or its wait ran out. `retry_after_ms`
    /// is at least `at_least_ms` (or -1 when it can never pass).
    pub fn denied(self, at_least_ms: i64) -> Outcome {
        let deny = |d: Decision| Decision {
            allowed: false,
            retry_after_ms: if d.retry_after_ms < 0 {
                -1
            } else {
                d.retry_after_ms.max(at_least_ms).max(1)
            },
            delay_ms: None,
            ..d
        };
        match self {
            Outcome::Decision(d) => Outcome::Decision(deny(d)),
            Outcome::Throttle(d) => Outcome::Throttle(deny(d)),
            Outcome::Acquired(d, _) => Outcome::Acquired(deny(d), None),
            Outcome::All(d, tiers) => Outcome::All(deny(d), tiers),
        }
    }

    /// What a `SHADOW` request is answered: every denial allowed, its wait
    /// kept (so allowed with a wait means "would have been denied"), a
    /// leaky bucket's without a delay (it joined no queue). The request
    /// took nothing: a denial never does.
    pub fn shadowed(self) -> Outcome {
        let allow = |d: Decision| Decision { allowed: true, ..d };
        match self {
            Outcome::Decision(d) => Outcome::Decision(allow(d)),
            Outcome::Throttle(d) => Outcome::Throttle(allow(d)),
            Outcome::Acquired(d, id) => Outcome::Acquired(allow(d), id),
            Outcome::All(d, tiers) => {
                Outcome::All(allow(d), tiers.into_iter().map(allow).collect())
            }
        }
    }

    /// The keys whose decision denied: the one key, or `RL.ALL`'s denying
    /// tiers'.
    pub fn denying<'a>(&self, keys: &[KeyName<'a>]) -> Vec<KeyName<'a>> {
        match self {
            Outcome::All(_, tiers) => tiers
                .iter()
                .zip(keys)
                .filter(|(tier, _)| !tier.allowed)
                .map(|(_, key)| *key)
                .collect(),
            _ if self.decision().allowed => Vec::new(),
            _ => keys.first().copied().into_iter().collect(),
        }
    }

    pub fn reply(&self, ctx: Ctx<'_>) -> Status {
        match self {
            Outcome::Decision(d) => reply_decision(ctx, d),
            Outcome::Throttle(d) => ctx.reply_integers(&cl_throttle_reply(d)),
            Outcome::Acquired(d, id) => reply_five_then(ctx, d, || match id {
                Some(id) => {
                    ctx.reply_bytes(id);
                }
                None => {
                    ctx.reply_null();
                }
            }),
            Outcome::All(combined, tiers) => reply_five_then(ctx, combined, || {
                ctx.reply_array(tiers.len());
                for tier in tiers {
                    reply_decision(ctx, tier);
                }
            }),
        }
    }
}

/// From a client's command to its reply: a request that takes is queued
/// behind the clients already waiting on its keys (`BLOCK`): with `BLOCK` it
/// waits its turn, without it is denied. Otherwise it is decided, and what it
/// changed propagated; a denied request with `BLOCK` waits (when it can pass
/// within its wait); the rest is counted, announced and answered.
pub fn respond(run: &Run<'_>, args: &Args<'_>, request: Request, keys: &[KeyName<'_>]) -> Status {
    let ctx = run.ctx;
    let mode = request.mode();
    let block_ms = request.block_ms().filter(|_| waiters::can_block(ctx));
    if mode == Mode::Take && waiters::queued(ctx, keys) {
        if let Some(block_ms) = block_ms {
            return waiters::wait(ctx, args, request, keys, block_ms, None);
        }
        return match request.decide(run, keys, Mode::Peek) {
            Ok(outcome) => {
                let outcome = outcome.denied(waiters::next_turn_ms(ctx, keys));
                answer(run, &request, keys, &outcome)
            }
            Err(error) => ctx.reply_error(&error),
        };
    }
    let decided = request.decide(run, keys, mode);
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

/// Counts a decided request (a peek is not a request), announces a denial
/// (`deny-events`) on each key that denied and counts it for `RL.TOP`, and
/// replies. A `SHADOW` request's denial is counted and announced as such
/// (not for `RL.TOP`: nothing was denied), and answered allowed (see
/// [`Outcome::shadowed`]).
pub fn answer(run: &Run<'_>, request: &Request, keys: &[KeyName<'_>], outcome: &Outcome) -> Status {
    let shadow = request.shadow();
    if request.mode() == Mode::Take {
        let allowed = outcome.decision().allowed;
        request.counter().count(allowed, shadow);
        if !allowed {
            for key in outcome.denying(keys) {
                on_denied(run.ctx, key, shadow);
                if !shadow {
                    top::denied(key);
                }
            }
        }
    }
    if shadow {
        outcome.clone().shadowed().reply(run.ctx)
    } else {
        outcome.reply(run.ctx)
    }
}

/// The counter of the algorithm of `tier`, made from the registry.
macro_rules! counter_of {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        fn counter_of(tier: &Tier) -> &'static Counter {
            match tier {
                $(Tier::$ty(_) => <crate::algorithms::$module::$ty as Counted>::counter(),)*
            }
        }

        /// The request of the check command of the algorithm tagged `tag`.
        fn check_request(tag: u8, words: &[&[u8]]) -> Option<Result<Request, CommandError>> {
            $(if tag == <crate::algorithms::$module::$ty as crate::algorithms::Registered>::TAG {
                return Some(
                    parse::check_args::<<crate::algorithms::$module::$ty as crate::algorithms::Algorithm>::Params>(words)
                        .map(|(params, options)| Request::Check { tier: parse::IntoTier::into_tier(params), options }),
                );
            })*
            None
        }
    };
}
crate::registry!(counter_of);
