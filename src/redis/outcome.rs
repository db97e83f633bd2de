//! What a request is answered ([`Outcome`]), and how: the replies of every
//! command that decides requests, written once, beside the answer; and
//! what a decided request leaves behind before its reply ([`tally`]: its
//! count, its denial announced).

use super::config::on_denied;
use super::ffi::{Ctx, KeyName, Status};
use super::replicate::Run;
use super::request::Request;
use super::sketch;
use super::stats::Counter;
use crate::algorithms::partial::Grant;
use crate::algorithms::Decision;
use crate::algorithms::Mode;
use crate::policies::Counters;
use crate::redis_cell::cl_throttle_reply;

/// What a request is answered.
#[derive(Clone)]
pub enum Outcome {
    Decision(Decision),
    Throttle(Decision),
    /// An acquire's decision and, when allowed, its lease's id.
    Acquired(Decision, Option<Vec<u8>>),
    /// `RL.ALL`'s combined decision and each tier's.
    All(Decision, Vec<Decision>),
    /// A partial grant's (`COST n UPTO`) decision, and what it granted.
    Granted(Decision, Grant),
}

impl Outcome {
    pub fn decision(&self) -> &Decision {
        match self {
            Outcome::Decision(d)
            | Outcome::Throttle(d)
            | Outcome::Acquired(d, _)
            | Outcome::Granted(d, _) => d,
            Outcome::All(d, _) => d,
        }
    }

    /// The same answer, denied: what a request gets when it did not take,
    /// because others wait before it, writes are paused, or its wait ran
    /// out. `retry_after_ms` is at least `at_least_ms` (or -1 when it can
    /// never pass). Where the limit itself would have allowed it, nothing
    /// remains for this request: `remaining` is 0 (a denial never says that
    /// what it asked for is there).
    pub fn denied(self, at_least_ms: i64) -> Outcome {
        let deny = |d: Decision| Decision {
            allowed: false,
            remaining: if d.allowed { 0 } else { d.remaining },
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
            Outcome::Granted(d, grant) => Outcome::Granted(
                deny(d),
                Grant {
                    granted: 0,
                    ..grant
                },
            ),
        }
    }

    /// What a `SHADOW` request is answered: every denial allowed, its wait
    /// kept (so allowed with a wait means "would have been denied"), a
    /// leaky bucket's without a delay (it joined no queue). The request
    /// took nothing: a denial never does.
    pub fn shadowed(self) -> Outcome {
        let allow = allowed;
        match self {
            Outcome::Decision(d) => Outcome::Decision(allow(d)),
            Outcome::Throttle(d) => Outcome::Throttle(allow(d)),
            Outcome::Acquired(d, id) => Outcome::Acquired(allow(d), id),
            Outcome::Granted(d, grant) => Outcome::Granted(allow(d), grant),
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
            Outcome::Granted(d, grant) => {
                ctx.reply_array(7);
                for value in five(d) {
                    ctx.reply_integer(value);
                }
                ctx.reply_integer(grant.granted as i64);
                ctx.reply_integer(grant.at_ms);
                Status
            }
            Outcome::All(combined, tiers) => reply_five_then(ctx, combined, || {
                ctx.reply_array(tiers.len());
                for tier in tiers {
                    reply_decision(ctx, tier);
                }
            }),
        }
    }
}

/// Counts a decided request (a peek is not a request), announces a denial
/// (`deny-events`) on each key that denied and counts it for `RL.TOP`, and
/// replies. A `SHADOW` request's denial is counted and announced as such
/// (not for `RL.TOP`: nothing was denied), and answered allowed (see
/// [`Outcome::shadowed`]).
pub fn answer(run: &Run<'_>, request: &Request, keys: &[KeyName<'_>], outcome: &Outcome) -> Status {
    let shadow = request.shadow();
    tally_as(run.ctx, request, shadow, keys, outcome);
    if shadow {
        outcome.clone().shadowed().reply(run.ctx)
    } else {
        outcome.reply(run.ctx)
    }
}

/// [`answer`] of one key's decision (a plain check's: see
/// `super::respond::respond_plain`): counted on `counter` (and on a check
/// by name's `policy` counters), its denial announced on `key`, replied by
/// `reply` (allowed when `shadow`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn answer_one(
    ctx: Ctx<'_>,
    counter: &Counter,
    policy: Option<&Counters>,
    key: KeyName<'_>,
    shadow: bool,
    decision: &Decision,
    reply: fn(Ctx<'_>, &Decision) -> Status,
) -> Status {
    counter.count(decision.allowed, shadow);
    if let Some(counters) = policy {
        counters.count(decision.allowed, shadow);
    }
    if !decision.allowed {
        announce_denied(ctx, key, shadow);
        if shadow {
            return reply(ctx, &allowed(*decision));
        }
    }
    reply(ctx, decision)
}

/// A denial announced on `key` (`deny-events`) and, unless `shadow`,
/// counted for `RL.TOP`: for each key that denied.
#[cold]
fn announce_denied(ctx: Ctx<'_>, key: KeyName<'_>, shadow: bool) {
    on_denied(ctx, key, shadow);
    if !shadow {
        sketch::denied(key);
    }
}

/// Counts a decided request and announces its denial, as [`answer`] does,
/// for an answer replied later (a waiter's).
pub fn tally(ctx: Ctx<'_>, request: &Request, keys: &[KeyName<'_>], outcome: &Outcome) {
    tally_as(ctx, request, request.shadow(), keys, outcome);
}

/// [`tally`] of a request whose `SHADOW` is `shadow`: inlined into
/// [`answer`], which asks it once for both.
#[inline(always)]
fn tally_as(
    ctx: Ctx<'_>,
    request: &Request,
    shadow: bool,
    keys: &[KeyName<'_>],
    outcome: &Outcome,
) {
    if request.mode() == Mode::Take {
        let allowed = outcome.decision().allowed;
        request.counter().count(allowed, shadow);
        if let Request::Policy { counters, .. } = request {
            counters.count(allowed, shadow);
        }
        if !allowed {
            for key in outcome.denying(keys) {
                announce_denied(ctx, key, shadow);
            }
        }
    }
}

/// `decision`, allowed: what a `SHADOW` request is answered (see
/// [`Outcome::shadowed`]).
fn allowed(decision: Decision) -> Decision {
    Decision {
        allowed: true,
        ..decision
    }
}

/// The reply of a check: the five integers, and a leaky bucket's delay.
pub fn reply_decision(ctx: Ctx<'_>, d: &Decision) -> Status {
    match d.delay_ms {
        None => ctx.reply_integers(&five(d)),
        Some(delay_ms) => reply_five_then(ctx, d, || {
            ctx.reply_integer(delay_ms);
        }),
    }
}

/// A reply of six elements: the five integers, then what `sixth` replies.
fn reply_five_then(ctx: Ctx<'_>, d: &Decision, sixth: impl FnOnce()) -> Status {
    ctx.reply_array(6);
    for value in five(d) {
        ctx.reply_integer(value);
    }
    sixth();
    Status
}

/// The five integers every check reply starts with.
fn five(d: &Decision) -> [i64; 5] {
    [
        i64::from(d.allowed),
        d.limit as i64,
        d.remaining as i64,
        d.retry_after_ms,
        d.reset_after_ms,
    ]
}
