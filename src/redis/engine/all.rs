//! `RL.ALL`'s tiers: every tier checked at one instant; the request is
//! taken from all of them or from none. A tier whose key is under a
//! penalty denies; with `PENALTY`, the tiers that denied on their own get
//! one. Each tier goes through the steps of one key's check
//! (`super::check`): planned, then taken or settled.

use super::super::key::KeyToken;
use super::check::{denial, held_until, on_tier, plan, settle, take, Memory, OnTier, Plan, Took};
use super::penalty_of;
use super::store::Store;
use crate::algorithms::registry::Listed;
use crate::algorithms::{Decision, Mode};
use crate::error::CommandError;
use crate::parse::{AllArgs, CheckOptions, Tier};

/// `RL.ALL`'s tiers on `keys`, in `mode`: every tier is planned at one
/// instant, before anything is written, so that a WRONGTYPE or a denial on
/// any tier leaves every key as it was; only when every tier allows is the
/// request taken from all (each as its own check would take it).
pub fn all<S: Store>(
    run: &S,
    token: &mut KeyToken,
    keys: &[S::Name],
    parsed: &AllArgs,
    mode: Mode,
) -> Result<(Decision, Vec<Decision>), CommandError> {
    all_tiers(run, token, keys, &parsed.tiers, &parsed.options, mode)
}

/// [`all`] of `tiers` with `options` (a policy's tiers, read in place).
pub fn all_tiers<S: Store>(
    run: &S,
    token: &mut KeyToken,
    keys: &[S::Name],
    tiers: &[Tier],
    options: &CheckOptions,
    mode: Mode,
) -> Result<(Decision, Vec<Decision>), CommandError> {
    let cost = options.cost;
    let mut plans = Vec::with_capacity(keys.len());
    for (tier, &key_name) in tiers.iter().zip(keys) {
        plans.push(on_tier(
            tier,
            Planning {
                run,
                token: &mut *token,
                key_name,
                cost,
            },
        )?);
    }
    let mut decisions: Vec<Decision> = plans.iter().map(|p| p.decision).collect();
    if mode == Mode::Peek {
        return Ok((Decision::all_of(&decisions), decisions));
    }
    if Decision::all_of(&decisions).allowed {
        if plans.iter().any(|p| p.grows) {
            run.out_of_memory()?;
        }
        for ((decision, tier), &key_name) in decisions.iter_mut().zip(tiers).zip(keys) {
            *decision = on_tier(
                tier,
                Taking {
                    run,
                    token: &mut *token,
                    key_name,
                    cost,
                },
            )?;
        }
    } else {
        // Nothing is taken: a tier that would have allowed reports what it
        // holds now, as a peek does (its plan); a tier that denied on its
        // own gets the penalty, if one was asked; every key keeps its
        // expiry in its band, and, when the request waits, until its turn
        // (`held_until`).
        let penalty_ms = penalty_of(options);
        // Each tier's penalty end, `NO_PENALTY` for none: plain integers, so
        // no `None` with undefined payload bytes sits in the heap (valgrind
        // flags the branch the optimiser builds over such a payload).
        let mut penalties: Vec<i64> = Vec::with_capacity(keys.len());
        for (decision, plan) in decisions.iter_mut().zip(&plans) {
            let (denied, until_ms) = denial(run.now_ms(), *decision, plan.penalized, penalty_ms);
            *decision = denied;
            penalties.push(until_ms.unwrap_or(NO_PENALTY));
        }
        let combined = Decision::all_of(&decisions);
        for (((tier, &key_name), until_ms), decision) in
            tiers.iter().zip(keys).zip(penalties).zip(&decisions)
        {
            on_tier(
                tier,
                Settling {
                    run,
                    token: &mut *token,
                    key_name,
                    until_ms: (until_ms != NO_PENALTY).then_some(until_ms),
                    held_ms: held_until(run.now_ms(), decision, &combined, options.block_ms),
                },
            )?;
        }
    }
    Ok((Decision::all_of(&decisions), decisions))
}

/// No penalty starts on this tier (see `all`).
const NO_PENALTY: i64 = i64::MIN;

/// A tier's [`plan`].
struct Planning<'r, S: Store> {
    run: &'r S,
    token: &'r mut KeyToken,
    key_name: S::Name,
    cost: u64,
}

impl<S: Store> OnTier for Planning<'_, S> {
    type Out = Result<Plan, CommandError>;
    fn on<A: Listed>(self, params: A::Params) -> Self::Out {
        plan::<S, A>(self.run, self.token, self.key_name, params, self.cost)
    }
}

/// A tier's [`take`], once every tier allowed and the memory it needs was
/// checked: the tier's decision, the request taken.
struct Taking<'r, S: Store> {
    run: &'r S,
    token: &'r mut KeyToken,
    key_name: S::Name,
    cost: u64,
}

impl<S: Store> OnTier for Taking<'_, S> {
    type Out = Result<Decision, CommandError>;
    fn on<A: Listed>(self, params: A::Params) -> Self::Out {
        let mut key = self.run.write(self.token, self.key_name);
        match take::<S, A>(
            self.run,
            &mut key,
            self.key_name,
            params,
            self.cost,
            Memory::Checked,
        )? {
            Took::Taken(decision) => Ok(decision),
            Took::Denied(denied) => {
                // The plan allowed at this very instant on this very state,
                // and a peek allows exactly what a take does.
                debug_assert!(false, "a planned allow denied: {denied:?}");
                Ok(denied.decision)
            }
        }
    }
}

/// A tier's [`settle`] after the request was denied, if its key holds the
/// tier's state.
struct Settling<'r, S: Store> {
    run: &'r S,
    token: &'r mut KeyToken,
    key_name: S::Name,
    until_ms: Option<i64>,
    held_ms: Option<i64>,
}

impl<S: Store> OnTier for Settling<'_, S> {
    type Out = Result<(), CommandError>;
    fn on<A: Listed>(self, _params: A::Params) -> Self::Out {
        let mut key = self.run.write(self.token, self.key_name);
        let Some(fresh_at_ms) = key.fresh_at_ms::<A>()? else {
            return Ok(());
        };
        settle::<S, A>(
            self.run,
            &mut key,
            self.key_name,
            fresh_at_ms,
            self.until_ms,
            self.held_ms,
        )
    }
}
