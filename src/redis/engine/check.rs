//! One check of one key ([`apply`]), and the dispatch on a tier's
//! algorithm ([`apply_tier`]).

use super::super::ffi::KeyName;
use super::super::key::Key;
use super::super::replicate::Run;
use super::store::{out_of_memory, store, written};
use super::{turn_of, Checked};
use crate::algorithms::penalty;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::Tier;

/// Decides with the algorithm `tier` names, made from the registry.
macro_rules! apply_tier {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        pub fn apply_tier(
            run: &Run<'_>,
            key_name: KeyName<'_>,
            tier: &Tier,
            cost: u64,
            mode: Mode,
            penalty_ms: Option<u64>,
            block_ms: Option<u64>,
        ) -> Result<Decision, CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    apply::<crate::algorithms::$module::$ty>(run, key_name, params, cost, mode, penalty_ms, block_ms)
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
/// `crate::replay::next_expiry`), so a key whose expiry was removed or moved
/// gets it back even from a denial. At `maxmemory`, a request that would
/// create a key or grow its state is refused with Redis's OOM error;
/// everything else is decided (see [`out_of_memory`]), a penalty's start
/// included (a few bytes, once per penalty: a denial is worth more than the
/// OOM error). A denial that will wait (`block_ms`) keeps the key until its
/// turn (see [`turn_of`]).
pub fn apply<A: Checked>(
    run: &Run<'_>,
    key_name: KeyName<'_>,
    params: A::Params,
    cost: u64,
    mode: Mode,
    penalty_ms: Option<u64>,
    block_ms: Option<u64>,
) -> Result<Decision, CommandError> {
    let mut key = Key::open(run.ctx, key_name, mode == Mode::Take);
    let Some(held) = key.held::<A>()? else {
        // A fresh state denies only what can never pass: no penalty.
        let (decision, next) = A::check_with(None, params, run.now_ms, cost, mode);
        if let Some(next) = next {
            out_of_memory(run)?;
            store(run, &mut key, key_name, next)?;
        }
        return Ok(decision);
    };
    if mode == Mode::Take && held.state.grows_with(params, run.now_ms, cost) {
        out_of_memory(run)?;
    }
    let before_ms = held.fresh_at_ms();
    let (decision, changed, penalty_until) = if held.until_ms.is_none() && penalty_ms.is_none() {
        // No penalty had, none asked: what `penalty::check_stored` does
        // then, without its wrapping (most checks; ~50 instructions each).
        let (decision, changed) = held.state.check_stored(params, run.now_ms, cost, mode);
        (decision, changed, None)
    } else {
        penalty::check_stored(
            held.state,
            held.until_ms,
            params,
            run.now_ms,
            cost,
            mode,
            penalty_ms,
        )
    };
    if mode == Mode::Peek {
        return Ok(decision);
    }
    let mut after_ms = if changed {
        held.fresh_at_ms()
    } else {
        before_ms
    };
    if let Some(until_ms) = penalty_until {
        key.penalize::<A>(until_ms, run.now_ms)?;
        after_ms = after_ms.max(until_ms);
    }
    if let Some(turn_ms) = turn_of(&decision, run.now_ms, block_ms) {
        after_ms = after_ms.max(turn_ms);
    }
    if key.settle_expiry_moved(before_ms, after_ms, run.expiry_slack_ms)
        || changed
        || penalty_until.is_some()
    {
        written(run, key_name);
    }
    Ok(decision)
}
