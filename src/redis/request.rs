//! A request, whatever command made it: what was asked, parsed, and what
//! it says of itself (its mode, its wait, its replay, its counter). Data
//! only: the engine decides it (`super::engine::decide`), and
//! `super::outcome` counts, announces and answers it. Every check command,
//! `CL.THROTTLE`, `RL.PEEK`, `RL.ALL` and `RL.ACQUIRE` make one, so an
//! option that changes how requests are decided is read here once.

use super::ffi::random_hex;
use super::stats::{self, Counted, Counter};
use crate::algorithms::penalty::Stamp;
use crate::algorithms::registry::{self, Each, IntoTier, Listed, OnTier};
use crate::algorithms::Mode;
use crate::error::CommandError;
use crate::parse::policy::{check_request_options, Definition};
use crate::parse::{self, AcquireArgs, AllArgs, CheckOptions, Tier};
use crate::policies::Counters;
use crate::redis_cell::ClThrottleArgs;
use crate::replay::Command;
use std::sync::Arc;

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
    /// `RL.CHECK`: the inline request its policy stands for (one tier: its
    /// algorithm's check; several: `RL.ALL`), read from the policy's own
    /// definition, shared with the policy's store rather than copied, so
    /// a check by name allocates nothing; and the policy's counters
    /// (`INFO ratelimit`), counted beside the inline command's.
    Policy {
        /// The definition of the version checked: its tiers, and how a key
        /// stamped with an older version migrates (`ON-CHANGE`).
        definition: Arc<Definition>,
        /// The request's options, the policy's `PENALTY` and `SHADOW`
        /// applied (see [`Request::policy_options`]).
        options: CheckOptions,
        counters: Arc<Counters>,
        /// What the keys it decides are stamped with ([`Stamp::NONE`]: a
        /// replay written before stamps, which stamps nothing).
        stamp: Stamp,
    },
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
            Command::Release | Command::Refund | Command::Policy => {
                Err(CommandError::invalid_state("not a request"))
            }
        }
    }

    /// The options of a check of `definition` (a policy's) given as
    /// `words` (after the keys), the policy's `PENALTY` and `SHADOW`
    /// applied: on the primary, where its replay runs, and for a waiter
    /// whose policy changed while it waited. Inlined: the usual check gives
    /// no words, so its options are the policy's, nothing parsed.
    #[inline(always)]
    pub fn policy_options(
        definition: &Definition,
        words: &[&[u8]],
    ) -> Result<CheckOptions, CommandError> {
        if words.is_empty() {
            // Nothing to parse and nothing that clashes (neither PEEK,
            // BLOCK nor UPTO).
            return Ok(CheckOptions {
                penalty_ms: definition.penalty_ms,
                shadow: definition.shadow,
                ..CheckOptions::default()
            });
        }
        Self::policy_options_given(definition, words)
    }

    /// [`Request::policy_options`] of a check that gives words.
    #[inline(never)]
    fn policy_options_given(
        definition: &Definition,
        words: &[&[u8]],
    ) -> Result<CheckOptions, CommandError> {
        let mut options = check_request_options(words)?;
        // The policy's PENALTY and SHADOW, except on a peek (which changes
        // nothing, so neither applies: the inline command refuses them there).
        if !options.peek {
            options.penalty_ms = definition.penalty_ms;
            options.shadow = definition.shadow;
            // The request's own words clash with none of their own
            // (`check_request_options`): a clash is the policy's option
            // with BLOCK, said so rather than named as if the client had
            // written both.
            if let Err(error) = parse::options::exclusive(&options) {
                let own = if definition.shadow {
                    "SHADOW"
                } else if definition.penalty_ms.is_some() {
                    "PENALTY"
                } else {
                    return Err(error);
                };
                return Err(CommandError::syntax(&format!(
                    "the policy's {own} and BLOCK cannot be given together"
                )));
            }
        }
        Ok(options)
    }

    /// The command a replay of this request names, and the word it glues
    /// its header to.
    pub fn replayed_as(&self) -> (Command, usize) {
        match self {
            Request::Check { tier, .. } => (Command::Check(tier.tag()), 2),
            Request::Throttle(_) => (Command::ClThrottle, 2),
            Request::Acquire { .. } => (Command::Acquire, 2),
            Request::All(_) => (Command::All, 1),
            // Replayed as RL.CHECK, its definition in place of its name.
            Request::Policy { .. } => (Command::Policy, 1),
        }
    }

    /// What the keys of a check by a policy's name are stamped with.
    pub fn policy_stamp(&self) -> Option<Stamp> {
        match self {
            Request::Policy { stamp, .. } => Some(*stamp),
            _ => None,
        }
    }

    /// Whether the request takes (or only looks).
    pub fn mode(&self) -> Mode {
        match self {
            Request::Check { options, .. } => peek_or_take(options),
            Request::All(all) => peek_or_take(&all.options),
            Request::Throttle(throttle) => throttle.mode,
            Request::Acquire { .. } => Mode::Take,
            Request::Policy { options, .. } => peek_or_take(options),
        }
    }

    /// `BLOCK ms`, when given.
    pub fn block_ms(&self) -> Option<u64> {
        match self {
            Request::Check { options, .. } => options.block_ms,
            Request::All(all) => all.options.block_ms,
            Request::Acquire { args, .. } => args.block_ms,
            Request::Throttle(_) => None,
            Request::Policy { options, .. } => options.block_ms,
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

    /// `SHADOW`: never answered a denial (see `super::outcome::Outcome::shadowed`).
    pub fn shadow(&self) -> bool {
        match self {
            Request::Check { options, .. } => options.shadow,
            Request::All(all) => all.options.shadow,
            Request::Throttle(_) | Request::Acquire { .. } => false,
            Request::Policy { options, .. } => options.shadow,
        }
    }

    /// The command's line in `INFO ratelimit`.
    pub fn counter(&self) -> &'static Counter {
        match self {
            Request::Check { tier, .. } => counter_of(tier),
            Request::Throttle(_) => &stats::CL_THROTTLE,
            Request::Acquire { .. } => &stats::ACQUIRE,
            Request::All(_) => &stats::ALL,
            // The inline command's: one tier's algorithm, or RL.ALL.
            Request::Policy { definition, .. } => match definition.tiers.as_slice() {
                [tier] => counter_of(tier),
                _ => &stats::ALL,
            },
        }
    }
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
        (None, None) => (random_hex(DRAWN_ID_LEN), true),
    };
    Ok(Request::Acquire { args, id, drawn })
}

/// The length of a lease id the server draws: 32 hex characters, 128 bits.
const DRAWN_ID_LEN: usize = 32;

/// The counter of the algorithm of `tier`.
pub fn counter_of(tier: &Tier) -> &'static Counter {
    tier.visit(CounterOf)
}

/// [`counter_of`].
struct CounterOf;

impl OnTier for CounterOf {
    type Out = &'static Counter;
    #[inline]
    fn on<A: Listed>(self, _: A::Params) -> &'static Counter {
        A::counter()
    }
}

/// The request of the check command of the algorithm tagged `tag`.
fn check_request(tag: u8, words: &[&[u8]]) -> Option<Result<Request, CommandError>> {
    registry::on_algorithm_tag(tag, &mut CheckRequest(words))
}

/// [`check_request`].
struct CheckRequest<'w, 'a>(&'w [&'a [u8]]);

impl Each for CheckRequest<'_, '_> {
    type Out = Result<Request, CommandError>;
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        parse::check_args::<A::Params>(self.0).map(|(params, options)| Request::Check {
            tier: params.into_tier(),
            options,
        })
    }
}
