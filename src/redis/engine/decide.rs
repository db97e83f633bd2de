//! A request decided on the keys it names: the engine's entry, which hands
//! each kind of request to its rule (one key's check, `RL.ALL`'s tiers, a
//! lease) and says what it is answered.

use super::super::ffi::KeyName;
use super::super::key::KeyToken;
use super::super::outcome::Outcome;
use super::super::replicate::Run;
use super::super::request::Request;
use super::all::{all, all_tiers};
use super::check::{apply, apply_tier, upto_tier};
use super::leases::{acquire, peek};
use super::migrate;
use super::penalty_of;
use crate::algorithms::gcra::Gcra;
use crate::algorithms::partial::Grant;
use crate::algorithms::penalty::Stamp;
use crate::algorithms::Mode;
use crate::error::CommandError;
use crate::parse::policy::Definition;
use crate::parse::{CheckOptions, Tier};

/// Decides `request` on `keys` (one, or `RL.ALL`'s), in `mode`.
pub fn decide(
    run: &Run<'_>,
    token: &mut KeyToken,
    request: &Request,
    keys: &[KeyName<'_>],
    mode: Mode,
) -> Result<Outcome, CommandError> {
    let key = || keys.first().copied().ok_or(CommandError::Arity);
    Ok(match request {
        Request::Check { tier, options } => check(run, token, key()?, tier, options, mode)?,
        Request::Throttle(throttle) => Outcome::Throttle(apply::<_, Gcra>(
            run,
            token,
            key()?,
            throttle.params,
            throttle.cost,
            mode,
            None,
            None,
        )?),
        Request::Acquire { args, id, .. } => match mode {
            Mode::Take => {
                let decision = acquire(run, token, key()?, args.params, id)?;
                Outcome::Acquired(decision, decision.allowed.then(|| id.clone()))
            }
            Mode::Peek => Outcome::Acquired(peek(run, token, key()?, args.params)?, None),
        },
        Request::All(args) => {
            let (combined, tiers) = all(run, token, keys, args, mode)?;
            Outcome::All(combined, tiers)
        }
        Request::Policy {
            definition,
            options,
            stamp,
            ..
        } => by_name(run, token, definition, options, *stamp, keys, mode)?,
    })
}

/// One key's check of `tier` (its algorithm's command, `RL.PEEK`; a check
/// by name of one tier). Inlined into [`decide`]: every check's path.
#[inline(always)]
fn check(
    run: &Run<'_>,
    token: &mut KeyToken,
    key: KeyName<'_>,
    tier: &Tier,
    options: &CheckOptions,
    mode: Mode,
) -> Result<Outcome, CommandError> {
    // `UPTO`: the plain check of what is available.
    let grant = if options.upto {
        Some(upto_tier(run, token, key, tier, options.cost)?)
    } else {
        None
    };
    let decision = apply_tier(
        run,
        token,
        key,
        tier,
        grant.map_or(options.cost, |(asked, _)| asked),
        mode,
        penalty_of(options),
        options.block_ms,
    )?;
    Ok(match grant {
        None => Outcome::Decision(decision),
        Some((asked, at_ms)) => Outcome::Granted(
            decision,
            Grant {
                granted: if decision.allowed { asked } else { 0 },
                at_ms,
            },
        ),
    })
}

/// A check by a policy's name (`RL.CHECK`, its replay): the inline request
/// its `definition` stands for, on keys brought to the policy's current
/// version (`stamp`) first by the migration step (`super::migrate`). The
/// usual check, one tier taking from a key this version stamped, has no
/// step of its own: its stamp is read on the key the decision opens.
fn by_name(
    run: &Run<'_>,
    token: &mut KeyToken,
    definition: &Definition,
    options: &CheckOptions,
    stamp: Stamp,
    keys: &[KeyName<'_>],
    mode: Mode,
) -> Result<Outcome, CommandError> {
    let tiers = definition.tiers.as_slice();
    if stamp.is_none() {
        // A replay written before stamps: decided as then.
        return inline(run, token, tiers, options, keys, mode);
    }
    if let ([tier], Some(&key), Mode::Take, false) = (tiers, keys.first(), mode, options.upto) {
        let current = migrate::decided_if_current(
            run,
            token,
            key,
            tier,
            stamp,
            options.cost,
            penalty_of(options),
            options.block_ms,
        )?;
        if let Some(decision) = current {
            return Ok(Outcome::Decision(decision));
        }
    }
    let on_change = definition.on_change;
    match migrate::before(
        run,
        token,
        keys,
        tiers,
        stamp,
        on_change,
        mode,
        options.cost,
    )? {
        Err(peeked) => Ok(peeked),
        Ok(migration) => {
            let outcome = inline(run, token, tiers, options, keys, mode)?;
            migration.finish(run, token)?;
            Ok(outcome)
        }
    }
}

/// The inline command a policy's `tiers` stand for: one tier's check, or
/// `RL.ALL`'s.
fn inline(
    run: &Run<'_>,
    token: &mut KeyToken,
    tiers: &[Tier],
    options: &CheckOptions,
    keys: &[KeyName<'_>],
    mode: Mode,
) -> Result<Outcome, CommandError> {
    match tiers {
        [tier] => {
            let key = keys.first().copied().ok_or(CommandError::Arity)?;
            check(run, token, key, tier, options, mode)
        }
        _ => {
            let (combined, each) = all_tiers(run, token, keys, tiers, options, mode)?;
            Ok(Outcome::All(combined, each))
        }
    }
}
