//! One tier's check in the steps that one key's check and `RL.ALL` share,
//! so that every rule of a check (a penalty's denial and start, the
//! maxmemory rule, the expiry's band, a waiting request's hold) is written
//! once: [`plan`] decides a tier at the run's instant and writes nothing;
//! [`take`] takes an allowed request from the key's state, in place;
//! after a denial, [`denial`] says whether a penalty starts, [`held_until`]
//! how long a waiting request holds the key, and [`settle`] gives the key
//! both. `RL.ALL` (`super::all`) plans every tier, then takes from all or
//! settles each. One key's check ([`apply`]) is the case of one tier, whose
//! decision is the request's: nothing to wait for before taking, so its
//! plan and its take are one step on the key opened once (the fast path:
//! the state decided and updated in place, no copy).
//!
//! Also a partial grant's cost ([`upto`]) and a refund ([`refund`]), and
//! the dispatch on a tier's algorithm ([`on_tier`]).

use super::super::key::{Key, KeyToken, Write};
use super::store::{store, Store};
use super::{turn_of, Checked};
use crate::algorithms::partial::{granted_at_ms, refund_stored, upto_cost};
use crate::algorithms::penalty::{self, denied_until, in_force};
use crate::algorithms::registry::Listed;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::Tier;
use crate::words::syntax::Syntax;

pub use crate::algorithms::registry::OnTier;

/// Calls `op` with the algorithm `tier` names and its parameters: the
/// registry's dispatch on a tier ([`Tier::visit`]).
#[inline]
pub fn on_tier<O: OnTier>(tier: &Tier, op: O) -> O::Out {
    tier.visit(op)
}

/// What one tier decided before anything is written (see [`plan`]).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// What the tier answers, as a peek: a request allowed here is not
    /// yet taken.
    pub decision: Decision,
    /// Whether taking the request creates the key or grows its state.
    pub grows: bool,
    /// Whether the key is under a penalty (which denied).
    pub penalized: bool,
}

/// One tier decided at the run's instant, the key read only: what a request
/// of `cost` would be answered under `params` without being taken (a key
/// under a penalty denies until its end), and what taking it would need.
/// A peek's whole answer; `RL.ALL`'s first step, before anything is taken.
/// Nothing is copied: a stored state answers in place
/// (`crate::algorithms::Algorithm::peek_stored`).
pub fn plan<S: Store, A: Checked>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
) -> Result<Plan, CommandError> {
    let now_ms = run.now_ms();
    let key = run.read(token, key_name);
    Ok(match key.held_ref::<A>()? {
        None => Plan {
            decision: A::check_with(None, params, now_ms, cost, Mode::Peek).0,
            grows: true,
            penalized: false,
        },
        Some(held) => {
            let own = held.state.peek_stored(params, now_ms, cost);
            match held.until_ms.and_then(|until| in_force(until, now_ms)) {
                Some(until_ms) => Plan {
                    decision: denied_until(until_ms, now_ms, own),
                    grows: false,
                    penalized: true,
                },
                None => Plan {
                    decision: own,
                    grows: held.state.grows_with(params, now_ms, cost),
                    penalized: false,
                },
            }
        }
    })
}

/// Whether [`take`] still has to apply the maxmemory rule itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// One key's check: refuse what needs memory, as it is taken.
    ToCheck,
    /// `RL.ALL`: every tier's need was checked before anything was taken.
    Checked,
}

/// What [`take`] did.
#[derive(Debug, Clone, Copy)]
pub enum Took {
    /// The request was taken: stored, the expiry in its band.
    Taken(Decision),
    /// Denied: nothing taken, nothing written.
    Denied(Denied),
}

/// A denial of [`take`], and what [`settle`] needs of it.
#[derive(Debug, Clone, Copy)]
pub struct Denied {
    pub decision: Decision,
    /// Whether the key is under a penalty (which denied).
    pub penalized: bool,
    /// When the key is as good as new (its penalty included); `None` when
    /// it holds nothing.
    pub fresh_at_ms: Option<i64>,
}

/// Takes a request of `cost` under `params` from the key (open for
/// writing) if its tier allows it: a stored state is decided and updated in
/// place (`crate::algorithms::Algorithm::check_stored`), a missing key is
/// created; the key's expiry is put in its band after the state is fresh,
/// its penalty included (`crate::algorithms::expiry::next_expiry`). A key
/// under a penalty denies, and takes nothing. With [`Memory::ToCheck`], a
/// request that would be taken and would create the key or grow its state
/// is refused at `maxmemory` with Redis's OOM error (see
/// [`Store::out_of_memory`]), and changes nothing. A denial writes nothing:
/// what follows it is [`settle`]'s. Inlined into its callers, so that what
/// it returns stays in registers and `memory` is known (every check's path:
/// tens of instructions).
#[inline(always)]
pub fn take<S: Store, A: Checked>(
    run: &S,
    key: &mut Key<'_, Write, S::Raw<'_>>,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
    memory: Memory,
) -> Result<Took, CommandError> {
    let now_ms = run.now_ms();
    let Some(held) = key.held::<A>()? else {
        let (decision, next) = A::check_with(None, params, now_ms, cost, Mode::Take);
        let Some(next) = next else {
            return Ok(Took::Denied(Denied {
                decision,
                penalized: false,
                fresh_at_ms: None,
            }));
        };
        if memory == Memory::ToCheck {
            run.out_of_memory()?;
        }
        store(run, key, key_name, next)?;
        return Ok(Took::Taken(decision));
    };
    let before_ms = held.fresh_at_ms();
    if let Some(until_ms) = held.until_ms.and_then(|until| in_force(until, now_ms)) {
        let own = held.state.peek_stored(params, now_ms, cost);
        return Ok(Took::Denied(Denied {
            decision: denied_until(until_ms, now_ms, own),
            penalized: true,
            fresh_at_ms: Some(before_ms),
        }));
    }
    if memory == Memory::ToCheck && held.state.grows_with(params, now_ms, cost) {
        if let Err(refused) = run.out_of_memory() {
            // Only what would be taken needs the memory: a denial is
            // answered (the rule `RL.ALL`'s tiers follow).
            if held.state.peek_stored(params, now_ms, cost).allowed {
                return Err(refused);
            }
        }
    }
    let (decision, changed) = held.state.check_stored(params, now_ms, cost, Mode::Take);
    if !decision.allowed {
        return Ok(Took::Denied(Denied {
            decision,
            penalized: false,
            fresh_at_ms: Some(before_ms),
        }));
    }
    let after_ms = if changed {
        held.fresh_at_ms()
    } else {
        before_ms
    };
    if key.settle_expiry_moved(before_ms, after_ms, run.expiry_slack_ms()) || changed {
        run.written(key_name);
    }
    Ok(Took::Taken(decision))
}

/// A tier's denial (`decision`, not under a penalty unless `penalized`) of
/// a request given `penalty_ms` (`PENALTY`, but not in `SHADOW` mode): the
/// penalty that starts on it, when one does (see `penalty::starts`), and
/// the decision then answered (the penalty's first denial).
pub fn denial(
    now_ms: i64,
    decision: Decision,
    penalized: bool,
    penalty_ms: Option<u64>,
) -> (Decision, Option<i64>) {
    match penalty_ms.filter(|_| !penalized && penalty::starts(&decision, Mode::Take)) {
        Some(penalty_ms) => {
            let until_ms = penalty::ends_at(now_ms, penalty_ms);
            (denied_until(until_ms, now_ms, decision), Some(until_ms))
        }
        None => (decision, None),
    }
}

/// Until when a denied request that waits (`block_ms`) holds a tier's key:
/// its turn (`turn_of` of the request's whole decision, `combined`: when
/// all its tiers allow), or until the tier's state is new under the
/// request's parameters (its `tier` decision's reset), if sooner: past that
/// a new key answers the same.
pub fn held_until(
    now_ms: i64,
    tier: &Decision,
    combined: &Decision,
    block_ms: Option<u64>,
) -> Option<i64> {
    let turn_ms = turn_of(combined, now_ms, block_ms)?;
    Some(turn_ms.min(now_ms.saturating_add(tier.reset_after_ms)))
}

/// After a tier's denial, on its key (open for writing, as good as new at
/// `fresh_at_ms`, its penalty included): gives it the penalty that starts,
/// if one does (`until_ms`), and puts its expiry in its band after its
/// state is fresh, its penalty included, kept at least until `held_ms` (a
/// waiting request's hold: [`held_until`]); so a key whose expiry was
/// removed or moved gets it back even from a denial.
pub fn settle<S: Store, A: Checked>(
    run: &S,
    key: &mut Key<'_, Write, S::Raw<'_>>,
    key_name: S::Name,
    fresh_at_ms: i64,
    until_ms: Option<i64>,
    held_ms: Option<i64>,
) -> Result<(), CommandError> {
    if let Some(until_ms) = until_ms {
        key.penalize::<A>(until_ms, run.now_ms())?;
        A::counter().penalized();
    }
    let after_ms = [until_ms, held_ms]
        .into_iter()
        .flatten()
        .fold(fresh_at_ms, i64::max);
    if key.settle_expiry_moved(fresh_at_ms, after_ms, run.expiry_slack_ms()) || until_ms.is_some() {
        run.written(key_name);
    }
    Ok(())
}

/// One key's check: `RL.ALL` of one tier (see the module's documentation).
/// A peek is the tier's [`plan`]; a request is [`take`]n from the key
/// opened once, and a denial [`settle`]d on it (a penalty given
/// `penalty_ms` starts, a request that will wait, `block_ms`, keeps the
/// key until its turn: see [`turn_of`]).
#[allow(clippy::too_many_arguments)]
pub fn apply<S: Store, A: Checked>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
    mode: Mode,
    penalty_ms: Option<u64>,
    block_ms: Option<u64>,
) -> Result<Decision, CommandError> {
    if mode == Mode::Peek {
        return Ok(plan::<S, A>(run, token, key_name, params, cost)?.decision);
    }
    let key = run.write(token, key_name);
    apply_open::<S, A>(run, key, key_name, params, cost, penalty_ms, block_ms)
}

/// [`apply`]'s request (a take) on its key, already open for writing (a
/// check by a policy's name, which looked at the key's stamp first).
#[inline(always)]
pub fn apply_open<S: Store, A: Checked>(
    run: &S,
    mut key: Key<'_, Write, S::Raw<'_>>,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
    penalty_ms: Option<u64>,
    block_ms: Option<u64>,
) -> Result<Decision, CommandError> {
    match take::<S, A>(run, &mut key, key_name, params, cost, Memory::ToCheck)? {
        Took::Taken(decision) => Ok(decision),
        Took::Denied(denied) => {
            let (decision, until_ms) =
                denial(run.now_ms(), denied.decision, denied.penalized, penalty_ms);
            if let Some(fresh_at_ms) = denied.fresh_at_ms {
                let held_ms = held_until(run.now_ms(), &decision, &decision, block_ms);
                settle::<S, A>(run, &mut key, key_name, fresh_at_ms, until_ms, held_ms)?;
            }
            Ok(decision)
        }
    }
}

/// [`apply`] with the algorithm `tier` names.
#[allow(clippy::too_many_arguments)]
pub fn apply_tier<S: Store>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    tier: &Tier,
    cost: u64,
    mode: Mode,
    penalty_ms: Option<u64>,
    block_ms: Option<u64>,
) -> Result<Decision, CommandError> {
    struct Apply<'r, S: Store> {
        run: &'r S,
        token: &'r mut KeyToken,
        key_name: S::Name,
        cost: u64,
        mode: Mode,
        penalty_ms: Option<u64>,
        block_ms: Option<u64>,
    }
    impl<S: Store> OnTier for Apply<'_, S> {
        type Out = Result<Decision, CommandError>;
        #[inline]
        fn on<A: Listed>(self, params: A::Params) -> Self::Out {
            apply::<S, A>(
                self.run,
                self.token,
                self.key_name,
                params,
                self.cost,
                self.mode,
                self.penalty_ms,
                self.block_ms,
            )
        }
    }
    on_tier(
        tier,
        Apply {
            run,
            token,
            key_name,
            cost,
            mode,
            penalty_ms,
            block_ms,
        },
    )
}

/// What a partial grant (`COST cost UPTO`) on `key_name` asks of
/// [`apply_tier`], for the algorithm `tier` names: see [`upto`].
pub fn upto_tier<S: Store>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    tier: &Tier,
    cost: u64,
) -> Result<(u64, i64), CommandError> {
    struct Upto<'r, S: Store> {
        run: &'r S,
        token: &'r mut KeyToken,
        key_name: S::Name,
        cost: u64,
    }
    impl<S: Store> OnTier for Upto<'_, S> {
        type Out = Result<(u64, i64), CommandError>;
        fn on<A: Listed>(self, params: A::Params) -> Self::Out {
            upto::<S, A>(self.run, self.token, self.key_name, params, self.cost)
        }
    }
    on_tier(
        tier,
        Upto {
            run,
            token,
            key_name,
            cost,
        },
    )
}

/// A refund on `key_name` of the algorithm `tier` names: the units given
/// back.
pub fn refund_tier<S: Store>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    tier: &Tier,
    amount: u64,
    granted_at_ms: Option<i64>,
) -> Result<u64, CommandError> {
    struct Refund<'r, S: Store> {
        run: &'r S,
        token: &'r mut KeyToken,
        key_name: S::Name,
        amount: u64,
        granted_at_ms: Option<i64>,
    }
    impl<S: Store> OnTier for Refund<'_, S> {
        type Out = Result<u64, CommandError>;
        fn on<A: Listed>(self, params: A::Params) -> Self::Out {
            refund::<S, A>(
                self.run,
                self.token,
                self.key_name,
                params,
                self.amount,
                self.granted_at_ms,
            )
        }
    }
    on_tier(
        tier,
        Refund {
            run,
            token,
            key_name,
            amount,
            granted_at_ms,
        },
    )
}

/// A partial grant (`COST cost UPTO`) is [`apply`] of the cost available
/// now (at most `cost`, at least 1: see
/// `crate::algorithms::partial::upto_cost`), so that every rule of a plain
/// check holds, and a grant of nothing is the plain check's denial of 1
/// unit; a key under a penalty grants nothing. Returns that cost, and the
/// time the grant is made at (`Grant::at_ms`). Only requests with `UPTO`
/// come here, before their plain check: the plain path is the one every
/// check takes.
pub fn upto<S: Store, A: Checked>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
) -> Result<(u64, i64), CommandError> {
    if !<A::Params as Syntax>::PARTIAL {
        return Err(crate::parse::options::upto_not_offered());
    }
    let key = run.read(token, key_name);
    Ok(match key.held_ref::<A>()? {
        None => (
            upto_cost::<A>(None, params, run.now_ms(), cost),
            run.now_ms(),
        ),
        Some(held) => {
            let state = Some(held.state);
            let penalized = held
                .until_ms
                .and_then(|until| penalty::in_force(until, run.now_ms()))
                .is_some();
            let asked = if penalized {
                1
            } else {
                upto_cost(state, params, run.now_ms(), cost)
            };
            (asked, granted_at_ms(state, run.now_ms()))
        }
    })
}

/// A refund (`RL.REFUND`): gives back up to `amount` units granted at
/// `granted_at_ms` (now, when not given: the algorithms that need it are
/// made to give it) to the state of `key_name`, under `params`. A missing
/// key is left missing (nothing to give back to); a refund that gives back
/// nothing changes nothing. Otherwise the state is stored and the key's
/// expiry follows it (a state fresh sooner expires sooner). The refund is
/// made on a copy, so that a state brought up to date but given nothing
/// back is not written (replicas would not see it).
pub fn refund<S: Store, A: Checked>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    params: A::Params,
    amount: u64,
    granted_at_ms: Option<i64>,
) -> Result<u64, CommandError> {
    let mut key = run.write(token, key_name);
    let Some(held) = key.held::<A>()? else {
        return Ok(0);
    };
    let before_ms = held.fresh_at_ms();
    let at_ms = granted_at_ms.unwrap_or(run.now_ms().max(held.state.last_seen_ms()));
    let mut next = held.state.clone();
    let Some(given) = refund_stored(&mut next, params, run.now_ms(), amount, at_ms) else {
        return Err(crate::parse::options::upto_not_offered());
    };
    if given == 0 {
        return Ok(0);
    }
    *held.state = next;
    let after_ms = held.fresh_at_ms();
    key.settle_expiry_moved(before_ms, after_ms, run.expiry_slack_ms());
    run.written(key_name);
    Ok(given)
}
