//! One check of one key ([`apply`]), and the dispatch on a tier's
//! algorithm ([`apply_tier`]).

use super::store::{store, Store};
use super::{turn_of, Checked};
use crate::algorithms::partial::{granted_at_ms, refund_stored, upto_cost};
use crate::algorithms::penalty;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::Tier;
use crate::words::syntax::Syntax;

/// Decides with the algorithm `tier` names, made from the registry.
macro_rules! apply_tier {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        pub fn apply_tier<S: Store>(
            run: &S,
            key_name: S::Name,
            tier: &Tier,
            cost: u64,
            mode: Mode,
            penalty_ms: Option<u64>,
            block_ms: Option<u64>,
        ) -> Result<Decision, CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    apply::<S, crate::algorithms::$module::$ty>(run, key_name, params, cost, mode, penalty_ms, block_ms)
                })*
            }
        }

        /// What a partial grant (`COST cost UPTO`) on `key_name` asks of
        /// [`apply_tier`], for the algorithm `tier` names: see [`upto`].
        pub fn upto_tier<S: Store>(
            run: &S,
            key_name: S::Name,
            tier: &Tier,
            cost: u64,
        ) -> Result<(u64, i64), CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    upto::<S, crate::algorithms::$module::$ty>(run, key_name, params, cost)
                })*
            }
        }

        /// A refund on `key_name` of the algorithm `tier` names: the units
        /// given back.
        pub fn refund_tier<S: Store>(
            run: &S,
            key_name: S::Name,
            tier: &Tier,
            amount: u64,
            granted_at_ms: Option<i64>,
        ) -> Result<u64, CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    refund::<S, crate::algorithms::$module::$ty>(run, key_name, params, amount, granted_at_ms)
                })*
            }
        }
    };
}
crate::registry!(apply_tier);

/// One check of one key: load its state, decide, and when a request was
/// taken store the new state (in place when the algorithm allows). A key
/// under a penalty denies (see `crate::algorithms::penalty`); a denial given
/// `penalty_ms` starts one. Any request (not a peek) leaves the key's expiry
/// in its band after the key is fresh, its penalty included (see
/// `crate::algorithms::expiry::next_expiry`), so a key whose expiry was
/// removed or moved gets it back even from a denial. At `maxmemory`, a request that would
/// create a key or grow its state is refused with Redis's OOM error;
/// everything else is decided (see [`Store::out_of_memory`]), a penalty's start
/// included (a few bytes, once per penalty: a denial is worth more than the
/// OOM error). A denial that will wait (`block_ms`) keeps the key until its
/// turn (see [`turn_of`]).
pub fn apply<S: Store, A: Checked>(
    run: &S,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
    mode: Mode,
    penalty_ms: Option<u64>,
    block_ms: Option<u64>,
) -> Result<Decision, CommandError> {
    if mode == Mode::Peek {
        let key = run.read(key_name);
        return Ok(match key.held_ref::<A>()? {
            None => A::check_with(None, params, run.now_ms(), cost, mode).0,
            Some(held) => {
                penalty::peek_stored(held.state, held.until_ms, params, run.now_ms(), cost)
            }
        });
    }
    let mut key = run.write(key_name);
    let Some(held) = key.held::<A>()? else {
        // A fresh state denies only what can never pass: no penalty.
        let (decision, next) = A::check_with(None, params, run.now_ms(), cost, mode);
        if let Some(next) = next {
            run.out_of_memory()?;
            store(run, &mut key, key_name, next)?;
        }
        return Ok(decision);
    };
    if held.state.grows_with(params, run.now_ms(), cost) {
        run.out_of_memory()?;
    }
    let before_ms = held.fresh_at_ms();
    let (decision, changed, penalty_until) = if held.until_ms.is_none() && penalty_ms.is_none() {
        // No penalty had, none asked: what `penalty::check_stored` does
        // then, without its wrapping (most checks; ~50 instructions each).
        let (decision, changed) = held.state.check_stored(params, run.now_ms(), cost, mode);
        (decision, changed, None)
    } else {
        penalty::check_stored(
            held.state,
            held.until_ms,
            params,
            run.now_ms(),
            cost,
            mode,
            penalty_ms,
        )
    };
    let mut after_ms = if changed {
        held.fresh_at_ms()
    } else {
        before_ms
    };
    if let Some(until_ms) = penalty_until {
        key.penalize::<A>(until_ms, run.now_ms())?;
        A::counter().penalized();
        after_ms = after_ms.max(until_ms);
    }
    if let Some(turn_ms) = turn_of(&decision, run.now_ms(), block_ms) {
        after_ms = after_ms.max(turn_ms);
    }
    if key.settle_expiry_moved(before_ms, after_ms, run.expiry_slack_ms())
        || changed
        || penalty_until.is_some()
    {
        run.written(key_name);
    }
    Ok(decision)
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
    key_name: S::Name,
    params: A::Params,
    cost: u64,
) -> Result<(u64, i64), CommandError> {
    if !<A::Params as Syntax>::PARTIAL {
        return Err(crate::parse::options::upto_not_offered());
    }
    let key = run.read(key_name);
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
    key_name: S::Name,
    params: A::Params,
    amount: u64,
    granted_at_ms: Option<i64>,
) -> Result<u64, CommandError> {
    let mut key = run.write(key_name);
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
