//! `RL.ALL`'s tiers: every tier checked at one instant; the request is
//! taken from all of them or from none. A tier whose key is under a
//! penalty denies; with `PENALTY`, the tiers that denied on their own get
//! one.

use super::store::{store, Store};
use super::{penalty_of, turn_of, Checked};
use crate::algorithms::penalty;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::{AllArgs, Tier};

/// Stores what a tier took, once every tier has allowed.
type Commit<'a, S> = Box<dyn FnOnce(&S, <S as Store>::Name) -> Result<(), CommandError> + 'a>;

/// What one tier decided, and how to store what it took, not yet done.
struct Planned<'a, S: Store> {
    decision: Decision,
    commit: Option<Commit<'a, S>>,
    /// Whether the commit creates the key or grows its state.
    grows: bool,
    /// Whether the tier's key is under a penalty (which denied).
    penalized: bool,
}

/// `RL.ALL`'s tiers on `keys`, in `mode`: every tier decides at one
/// instant, before anything is written, so that a WRONGTYPE or a denial on
/// any tier leaves every key as it was; only when every tier allows is the
/// request taken from all.
pub fn all<S: Store>(
    run: &S,
    keys: &[S::Name],
    parsed: &AllArgs,
    mode: Mode,
) -> Result<(Decision, Vec<Decision>), CommandError> {
    let cost = parsed.options.cost;
    let mut planned = Vec::with_capacity(keys.len());
    for (tier, &key_name) in parsed.tiers.iter().zip(keys) {
        planned.push(plan_tier(run, key_name, tier, cost, mode)?);
    }
    let mut decisions: Vec<Decision> = planned.iter().map(|p| p.decision).collect();
    if Decision::all_of(&decisions).allowed {
        if mode == Mode::Take && planned.iter().any(|p| p.grows) {
            run.out_of_memory()?;
        }
        for (tier, &key_name) in planned.into_iter().zip(keys) {
            if let Some(commit) = tier.commit {
                commit(run, key_name)?;
            }
        }
    } else if mode == Mode::Take {
        // Nothing was taken: a tier that would have allowed reports what
        // it holds now, as a peek does; a tier that denied on its own gets
        // the penalty, if one was asked; every key keeps its expiry in its
        // band, and, when the request waits, until its turn (`turn_of`:
        // when all its tiers allow), or until its state is new under the
        // request's parameters, if sooner (past that a new key answers the
        // same).
        let penalty_ms = penalty_of(&parsed.options);
        // Each tier's penalty end, `NO_PENALTY` for none: plain integers, so
        // no `None` with undefined payload bytes sits in the heap (valgrind
        // flags the branch the optimiser builds over such a payload).
        let mut penalties: Vec<i64> = Vec::with_capacity(keys.len());
        for (((decision, planned), tier), &key_name) in decisions
            .iter_mut()
            .zip(&planned)
            .zip(&parsed.tiers)
            .zip(keys)
        {
            if decision.allowed {
                *decision = plan_tier(run, key_name, tier, cost, Mode::Peek)?.decision;
            }
            let starts =
                penalty_ms.filter(|_| !planned.penalized && penalty::starts(decision, mode));
            let until_ms = starts.map(|ms| penalty::ends_at(run.now_ms(), ms));
            if let Some(until_ms) = until_ms {
                *decision = penalty::denied_until(until_ms, run.now_ms(), *decision);
            }
            penalties.push(until_ms.unwrap_or(NO_PENALTY));
        }
        let combined = Decision::all_of(&decisions);
        let turn_ms = turn_of(&combined, run.now_ms(), parsed.options.block_ms);
        for (((tier, &key_name), until_ms), decision) in
            parsed.tiers.iter().zip(keys).zip(penalties).zip(&decisions)
        {
            let new_at_ms = run.now_ms().saturating_add(decision.reset_after_ms);
            let held_ms = turn_ms.map(|turn_ms| turn_ms.min(new_at_ms));
            let until_ms = (until_ms != NO_PENALTY).then_some(until_ms);
            settle_tier(run, key_name, tier, until_ms, held_ms)?;
        }
    }
    Ok((Decision::all_of(&decisions), decisions))
}

/// No penalty starts on this tier (see `all`).
const NO_PENALTY: i64 = i64::MIN;

/// Plans the tier of the algorithm `tier` names, made from the registry so
/// every algorithm has its arm and no other.
macro_rules! plan_tier {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($others:tt)* }
    ) => {
        fn plan_tier<'a, S: Store + 'a>(
            run: &S,
            key_name: S::Name,
            tier: &Tier,
            cost: u64,
            mode: Mode,
        ) -> Result<Planned<'a, S>, CommandError> {
            match *tier {
                $(Tier::$ty(params) => {
                    plan::<S, crate::algorithms::$module::$ty>(run, key_name, params, cost, mode)
                })*
            }
        }

        /// Gives a tier's key the penalty that starts, if one does, and
        /// puts its expiry in its band, if it holds that tier's state, kept
        /// at least until `turn_ms` (a waiting request's turn).
        fn settle_tier<S: Store>(
            run: &S,
            key_name: S::Name,
            tier: &Tier,
            penalty_until: Option<i64>,
            turn_ms: Option<i64>,
        ) -> Result<(), CommandError> {
            match *tier {
                $(Tier::$ty(_) => {
                    settle::<S, crate::algorithms::$module::$ty>(run, key_name, penalty_until, turn_ms)
                })*
            }
        }
    };
}
crate::registry!(plan_tier);

fn plan<'a, S: Store + 'a, A: Checked>(
    run: &S,
    key_name: S::Name,
    params: A::Params,
    cost: u64,
    mode: Mode,
) -> Result<Planned<'a, S>, CommandError> {
    let key = run.read(key_name);
    let held = key.held_ref::<A>()?;
    if let Some(until_ms) = held
        .as_ref()
        .and_then(|h| h.until_ms)
        .and_then(|until| penalty::in_force(until, run.now_ms()))
    {
        let state = held.map(|h| h.state);
        let (own, _) = A::check_with(state, params, run.now_ms(), cost, Mode::Peek);
        return Ok(Planned {
            decision: penalty::denied_until(until_ms, run.now_ms(), own),
            commit: None,
            grows: false,
            penalized: true,
        });
    }
    let stored = held.map(|h| h.state);
    let grows = match stored {
        Some(state) => state.grows_with(params, run.now_ms(), cost),
        None => true,
    };
    let (decision, next) = A::check_with(stored, params, run.now_ms(), cost, mode);
    Ok(Planned {
        grows: grows && next.is_some(),
        decision,
        penalized: false,
        commit: next.map(|next| {
            Box::new(move |run: &S, key_name: S::Name| {
                let mut key = run.write(key_name);
                store(run, &mut key, key_name, next)
            }) as Commit<'a, S>
        }),
    })
}

fn settle<S: Store, A: Checked>(
    run: &S,
    key_name: S::Name,
    penalty_until: Option<i64>,
    turn_ms: Option<i64>,
) -> Result<(), CommandError> {
    let mut key = run.write(key_name);
    let Some(before_ms) = key.held_ref::<A>()?.map(|held| held.fresh_at_ms()) else {
        return Ok(());
    };
    if let Some(until_ms) = penalty_until {
        key.penalize::<A>(until_ms, run.now_ms())?;
        A::counter().penalized();
    }
    let fresh_at_ms = [penalty_until, turn_ms]
        .into_iter()
        .flatten()
        .fold(before_ms, i64::max);
    if key.settle_expiry(fresh_at_ms, run.expiry_slack_ms()) || penalty_until.is_some() {
        run.written(key_name);
    }
    Ok(())
}
