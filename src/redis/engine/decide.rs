//! A request decided on the keys it names: the engine's entry, which hands
//! each kind of request to its rule (one key's check, `RL.ALL`'s tiers, a
//! lease) and says what it is answered.

use super::super::ffi::KeyName;
use super::super::key::KeyToken;
use super::super::outcome::Outcome;
use super::super::replicate::Run;
use super::super::request::Request;
use super::all::all;
use super::check::{apply, apply_tier, upto_tier};
use super::leases::{acquire, peek};
use super::migrate;
use super::penalty_of;
use crate::algorithms::gcra::Gcra;
use crate::algorithms::partial::Grant;
use crate::algorithms::Mode;
use crate::error::CommandError;

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
        Request::Check { tier, options } => {
            let key = key()?;
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
            match grant {
                None => Outcome::Decision(decision),
                Some((asked, at_ms)) => Outcome::Granted(
                    decision,
                    Grant {
                        granted: if decision.allowed { asked } else { 0 },
                        at_ms,
                    },
                ),
            }
        }
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
            request,
            stamp,
            on_change,
            ..
        } => {
            let (tiers, cost) = match &**request {
                Request::Check { tier, options } => (std::slice::from_ref(tier), options.cost),
                Request::All(args) => (args.tiers.as_slice(), args.options.cost),
                _ => (&[][..], 0),
            };
            if stamp.is_none() {
                // A replay written before stamps: decided as then.
                return decide(run, token, request, keys, mode);
            }
            match migrate::before(run, token, keys, tiers, *stamp, *on_change, mode, cost)? {
                Err(peeked) => peeked,
                Ok(migration) => {
                    let outcome = decide(run, token, request, keys, mode)?;
                    migration.finish(run, token)?;
                    outcome
                }
            }
        }
    })
}
