//! A named policy's change reaching a key (`ON-CHANGE KEEP|SCALE|RESET`):
//! a step of its own, run on every tier key of a check by name before the
//! decision, which then runs unchanged on what this leaves in the key.
//!
//! Every key a policy checks holds its algorithm's extended form, stamped
//! with the policy's name hash and the version that last decided it
//! (`crate::algorithms::penalty::Stamp`). Per tier, a key:
//! - stamped with this version, under the tier's parameters: nothing to do.
//!   On nearly every check that is all there is: for one tier taking, the
//!   stamp is read on the key the decision opens ([`decided_if_current`]),
//!   so the step costs two compares, not a lookup of its own;
//! - stamped with this policy, under other parameters of the same algorithm:
//!   `KEEP` restamps it (the decision reads it under the new parameters,
//!   clamped, as an inline command with changed parameters does); `SCALE`
//!   replaces its state with one of the new parameters holding the old
//!   remaining scaled by new / old limit (its penalty kept); `RESET`
//!   deletes it, so the decision sees a missing key (its penalty gone);
//! - stamped with this policy, holding another algorithm's state: replaced
//!   by a state of the tier's algorithm, by the same strategy
//!   (`crate::algorithms::migration`), the key's Redis type changing;
//! - under the same parameters with an older version, or holding the tier's
//!   algorithm unstamped or stamped by another policy: restamped, nothing
//!   else changed;
//! - missing (or reset): stamped after the decision, if the decision made it;
//! - anything else: `WRONGTYPE`, nothing written.
//!
//! The migration is the change's effect, not the request's: it is written
//! whatever the decision, on one tier or several. Every tier is planned
//! before any is written, so a `WRONGTYPE` on any changes nothing. A peek
//! writes nothing: when a tier migrates, the peek is answered here from the
//! migrated states, computed on copies. A replica and an AOF replay run
//! this same step from the same state, time and stamp (the replay carries
//! the stamp and the strategy: `crate::policies::replayed_word`), so they
//! reach the same bytes.

use super::super::key::{Holds, Key, KeyToken};
use super::super::outcome::Outcome;
use super::super::types::PenalizedStored;
use super::check::{apply_open, on_tier, OnTier};
use super::store::Store;
use super::Checked;
use crate::algorithms::migration::migrated;
use crate::algorithms::penalty::{self, Stamp};
use crate::algorithms::registry::{self, Each, Listed};
use crate::algorithms::{Algorithm, Decision, Mode};
use crate::error::CommandError;
use crate::parse::policy::OnChange;
use crate::parse::Tier;

/// A write to one tier's key, not done yet.
type Write<'a, S> =
    Box<dyn FnOnce(&S, &mut KeyToken, <S as Store>::Name) -> Result<(), CommandError> + 'a>;

/// What one tier's key needs.
struct Planned<'a, S: Store> {
    /// Before the decision.
    before: Option<Write<'a, S>>,
    /// After the decision: stamping the state the decision created.
    after: Option<Write<'a, S>>,
    /// Whether the decision is taken on another state than the stored one.
    migrated: bool,
    /// In a peek: the tier's answer, from the state after the migration.
    peek: Option<Decision>,
}

/// What a check by name does to its keys around its decision.
pub struct Migration<'a, S: Store> {
    after: Vec<(Write<'a, S>, S::Name)>,
}

impl<S: Store> Migration<'_, S> {
    /// Stamps what the decision created.
    pub fn finish(self, run: &S, token: &mut KeyToken) -> Result<(), CommandError> {
        for (write, key_name) in self.after {
            write(run, token, key_name)?;
        }
        Ok(())
    }
}

/// Runs the migration of `tiers` on `keys` (in key order) before a check of
/// `cost` in `mode`: in a peek that a migration changes, the answer (the
/// decision is then not to run); otherwise what to do after the decision.
#[allow(clippy::too_many_arguments)]
pub fn before<'a, S: Store + 'a>(
    run: &S,
    token: &mut KeyToken,
    keys: &[S::Name],
    tiers: &[Tier],
    stamp: Stamp,
    on_change: OnChange,
    mode: Mode,
    cost: u64,
) -> Result<Result<Migration<'a, S>, Outcome>, CommandError> {
    // One tier (the usual policy): no list of plans.
    if let ([tier], Some(&key_name)) = (tiers, keys.first()) {
        let planned = plan_tier(run, token, key_name, tier, stamp, on_change, mode, cost)?;
        if mode == Mode::Peek {
            if let (true, Some(peek)) = (planned.migrated, planned.peek) {
                return Ok(Err(Outcome::Decision(peek)));
            }
            return Ok(Ok(Migration { after: Vec::new() }));
        }
        if let Some(write) = planned.before {
            write(run, token, key_name)?;
        }
        let after = match planned.after {
            Some(write) => vec![(write, key_name)],
            None => Vec::new(),
        };
        return Ok(Ok(Migration { after }));
    }
    let mut planned = Vec::with_capacity(tiers.len());
    for (tier, &key_name) in tiers.iter().zip(keys) {
        planned.push(plan_tier(
            run, token, key_name, tier, stamp, on_change, mode, cost,
        )?);
    }
    if mode == Mode::Peek {
        if planned.iter().any(|p| p.migrated) {
            let decisions: Vec<Decision> = planned.iter().filter_map(|p| p.peek).collect();
            return Ok(Err(match decisions.as_slice() {
                [one] => Outcome::Decision(*one),
                _ => Outcome::All(Decision::all_of(&decisions), decisions),
            }));
        }
        return Ok(Ok(Migration { after: Vec::new() }));
    }
    let mut after = Vec::new();
    for (tier, &key_name) in planned.into_iter().zip(keys) {
        if let Some(write) = tier.before {
            write(run, token, key_name)?;
        }
        if let Some(write) = tier.after {
            after.push((write, key_name));
        }
    }
    Ok(Ok(Migration { after }))
}

/// The usual check by name: one tier, taking. When its key holds the
/// tier's state stamped with this version under the tier's parameters, or
/// nothing, the decision, taken as the inline command takes it on the very
/// key the stamp was read from (opened once, nothing else looked up); a new
/// key is made in its stamped form. `None` when the key needs the
/// migration step first ([`before`]), having changed nothing.
#[allow(clippy::too_many_arguments)]
pub fn decided_if_current<S: Store>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    tier: &Tier,
    stamp: Stamp,
    cost: u64,
    penalty_ms: Option<u64>,
    block_ms: Option<u64>,
) -> Result<Option<Decision>, CommandError> {
    struct Current<'r, S: Store> {
        run: &'r S,
        token: &'r mut KeyToken,
        key_name: S::Name,
        stamp: Stamp,
        cost: u64,
        penalty_ms: Option<u64>,
        block_ms: Option<u64>,
    }
    impl<S: Store> OnTier for Current<'_, S> {
        type Out = Result<Option<Decision>, CommandError>;
        #[inline]
        fn on<B: Checked>(self, params: B::Params) -> Self::Out {
            let Current {
                run,
                token,
                key_name,
                stamp,
                cost,
                penalty_ms,
                block_ms,
            } = self;
            let mut key = run.write(token, key_name);
            // The key's form, read once: missing, this policy's current
            // version's stamped state, or anything else (the general path).
            let current = match key.holds_form::<B>() {
                Holds::Nothing => None,
                Holds::Sibling(extended) => Some(
                    B::stamp_of(extended) == stamp && B::parts_ref(extended).0.params() == params,
                ),
                _ => Some(false),
            };
            match current {
                None => {
                    // Made in its stamped form right away, a fresh state,
                    // when the request will take from it (what the decision
                    // then does on it is what it does on a missing key: the
                    // same fresh state, at the same time), so that it is
                    // not stored plain, then stamped. A request a fresh
                    // state denies makes no key.
                    let now_ms = run.now_ms();
                    if B::check_with(None, params, now_ms, cost, Mode::Take)
                        .1
                        .is_some()
                    {
                        run.out_of_memory()?;
                        key.set(B::extended(0, stamp, B::fresh(params, now_ms)))?;
                    }
                }
                Some(true) => {}
                Some(false) => return Ok(None),
            }
            apply_open::<S, B>(run, key, key_name, params, cost, penalty_ms, block_ms).map(Some)
        }
    }
    on_tier(
        tier,
        Current {
            run,
            token,
            key_name,
            stamp,
            cost,
            penalty_ms,
            block_ms,
        },
    )
}

/// A tier's [`plan`], through the engine's one dispatch on a tier
/// ([`on_tier`]).
struct Planning<'r, 'a, S: Store> {
    run: &'r S,
    token: &'r mut KeyToken,
    key_name: S::Name,
    stamp: Stamp,
    on_change: OnChange,
    mode: Mode,
    cost: u64,
    planned: std::marker::PhantomData<&'a ()>,
}

impl<'a, S: Store + 'a> OnTier for Planning<'_, 'a, S> {
    type Out = Result<Planned<'a, S>, CommandError>;
    fn on<B: Listed>(self, params: B::Params) -> Self::Out {
        plan::<S, B>(
            self.run,
            self.token,
            self.key_name,
            params,
            self.stamp,
            self.on_change,
            self.mode,
            self.cost,
        )
    }
}

/// Plans `tier` on its key: [`plan`] of the algorithm it names.
#[allow(clippy::too_many_arguments)]
fn plan_tier<'a, S: Store + 'a>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    tier: &Tier,
    stamp: Stamp,
    on_change: OnChange,
    mode: Mode,
    cost: u64,
) -> Result<Planned<'a, S>, CommandError> {
    let planning = Planning {
        run,
        token,
        key_name,
        stamp,
        on_change,
        mode,
        cost,
        planned: std::marker::PhantomData,
    };
    on_tier(tier, planning)
}

/// The state of the tier's algorithm `B` that a key holding another
/// algorithm's state, stamped with `stamp`'s policy, becomes (with its
/// penalty's end); `None` when the key holds no algorithm's state stamped
/// so (`WRONGTYPE`); `Some(None)` for a reset. A dispatch on the stored
/// value's type, not on the tier: each algorithm of the registry asked in
/// turn whether the key holds its extended form.
fn across<B: Checked, R: super::super::key::RawKey, M>(
    key: &Key<'_, M, R>,
    params: B::Params,
    stamp: Stamp,
    on_change: OnChange,
    now_ms: i64,
) -> Option<Option<B::Penalized>> {
    let mut across = Across::<B, R, M> {
        key,
        params,
        stamp,
        on_change,
        now_ms,
    };
    registry::find_algorithm(&mut across).flatten()
}

/// [`across`]'s question to one algorithm.
struct Across<'k, 'a, B: Checked, R, M> {
    key: &'k Key<'a, M, R>,
    params: B::Params,
    stamp: Stamp,
    on_change: OnChange,
    now_ms: i64,
}

impl<B: Checked, R: super::super::key::RawKey, M> Each for Across<'_, '_, B, R, M> {
    /// `None` when the key does not hold `A`'s extended form, else what
    /// [`across`] answers.
    type Out = Option<Option<Option<B::Penalized>>>;
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        let Holds::Sibling(extended) = self.key.holds_form::<A>() else {
            return None;
        };
        if A::stamp_of(extended).policy != self.stamp.policy {
            return Some(None);
        }
        if self.on_change == OnChange::Reset {
            return Some(Some(None));
        }
        let (state, until_ms) = A::parts_ref(extended);
        let next = migrated::<_, B>(state, self.params, self.now_ms, self.on_change);
        Some(Some(Some(B::extended(until_ms, self.stamp, next))))
    }
}

#[allow(clippy::too_many_arguments)]
fn plan<'a, S: Store + 'a, B: Checked>(
    run: &S,
    token: &mut KeyToken,
    key_name: S::Name,
    params: B::Params,
    stamp: Stamp,
    on_change: OnChange,
    mode: Mode,
    cost: u64,
) -> Result<Planned<'a, S>, CommandError> {
    let now = (params, stamp, on_change, mode, cost);
    if mode == Mode::Take {
        plan_on::<S, B, _>(run, run.write(token, key_name), now)
    } else {
        plan_on::<S, B, _>(run, run.read(token, key_name), now)
    }
}

/// [`plan`] on the open `key`.
fn plan_on<'a, 'k, S: Store + 'a, B: Checked, M>(
    run: &S,
    key: Key<'k, M, S::Raw<'k>>,
    (params, stamp, on_change, mode, cost): (B::Params, Stamp, OnChange, Mode, u64),
) -> Result<Planned<'a, S>, CommandError> {
    let now_ms = run.now_ms();
    let mut current = None;
    // What the key becomes: `None` a reset (as a missing key), `Some` a
    // migrated state; and whether it is only restamped.
    let (next, restamp): (Option<Option<B::Penalized>>, bool) = match key.holds_form::<B>() {
        Holds::Sibling(extended) => {
            let own = B::stamp_of(extended);
            let (state, until_ms) = B::parts_ref(extended);
            let changed = state.params() != params;
            if own == stamp && !changed {
                // The usual check: nothing to do.
                current = Some(peek_in(
                    mode,
                    Some((state, Some(until_ms))),
                    params,
                    now_ms,
                    cost,
                ));
                (None, false)
            } else {
                match on_change {
                    OnChange::Scale if changed && own.policy == stamp.policy => {
                        let next = migrated::<B, B>(state, params, now_ms, OnChange::Scale);
                        (Some(Some(B::extended(until_ms, stamp, next))), false)
                    }
                    OnChange::Reset if changed && own.policy == stamp.policy => (Some(None), false),
                    _ => (None, true),
                }
            }
        }
        Holds::This(_) => (None, true),
        Holds::Nothing => {
            let peek = peek_in(mode, None::<(&B, _)>, params, now_ms, cost);
            return Ok(Planned {
                before: None,
                after: Some(stamp_created::<S, B>(stamp)),
                migrated: false,
                peek,
            });
        }
        Holds::Other => match across::<B, _, _>(&key, params, stamp, on_change, now_ms) {
            Some(next) => (Some(next), false),
            None => return Err(CommandError::wrong_type()),
        },
    };
    if let Some(peek) = current {
        drop(key);
        return Ok(kept(None, peek));
    }
    if restamp {
        let peek = match (mode, key.held_ref::<B>()?) {
            (Mode::Peek, Some(held)) => Some(penalty::peek_stored(
                held.state,
                held.until_ms,
                params,
                now_ms,
                cost,
            )),
            _ => None,
        };
        let write: Write<'a, S> =
            Box::new(move |run: &S, token: &mut KeyToken, key_name: S::Name| {
                let mut key = run.write(token, key_name);
                key.stamp::<B>(stamp, run.now_ms())?;
                run.written(key_name);
                Ok(())
            });
        return Ok(kept(Some(write), peek));
    }
    drop(key);
    Ok(match next.flatten() {
        Some(extended) => {
            let peek = (mode == Mode::Peek).then(|| {
                let (state, until_ms) = B::parts_ref(&extended);
                penalty::peek_stored(state, Some(until_ms), params, now_ms, cost)
            });
            Planned {
                before: Some(Box::new(
                    move |run: &S, token: &mut KeyToken, key_name: S::Name| {
                        let mut key = run.write(token, key_name);
                        let fresh_at_ms = {
                            let (state, until_ms) = B::parts_ref(&extended);
                            crate::algorithms::State::fresh_at_ms(state).max(until_ms)
                        };
                        key.set(extended)?;
                        key.expire_fresh(fresh_at_ms, run.expiry_slack_ms());
                        run.written(key_name);
                        Ok(())
                    },
                )),
                after: None,
                migrated: true,
                peek,
            }
        }
        None => Planned {
            before: Some(Box::new(
                |run: &S, token: &mut KeyToken, key_name: S::Name| {
                    run.write(token, key_name).delete();
                    run.written(key_name);
                    Ok(())
                },
            )),
            after: Some(stamp_created::<S, B>(stamp)),
            migrated: true,
            peek: peek_in(mode, None::<(&B, _)>, params, now_ms, cost),
        },
    })
}

/// A tier whose state the decision reads as stored (`before`, a restamp).
fn kept<S: Store>(before: Option<Write<'_, S>>, peek: Option<Decision>) -> Planned<'_, S> {
    Planned {
        before,
        after: None,
        migrated: false,
        peek,
    }
}

/// In a peek, what `held` (a state and its penalty's end; a missing key)
/// answers under `params`.
fn peek_in<B: Algorithm>(
    mode: Mode,
    held: Option<(&B, Option<i64>)>,
    params: B::Params,
    now_ms: i64,
    cost: u64,
) -> Option<Decision> {
    (mode == Mode::Peek).then(|| match held {
        Some((state, until_ms)) => penalty::peek_stored(state, until_ms, params, now_ms, cost),
        None => B::check_with(None, params, now_ms, cost, Mode::Peek).0,
    })
}

/// After the decision on a missing key: the state it created, stamped.
fn stamp_created<'a, S: Store + 'a, B: Checked>(stamp: Stamp) -> Write<'a, S> {
    Box::new(move |run: &S, token: &mut KeyToken, key_name: S::Name| {
        let mut key = run.write(token, key_name);
        if let Holds::This(_) = key.holds_form::<B>() {
            key.stamp::<B>(stamp, run.now_ms())?;
        }
        Ok(())
    })
}
