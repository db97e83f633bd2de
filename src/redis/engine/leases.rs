//! The concurrency limiter's leases: taking a slot, looking without
//! taking, giving one back.

use super::super::ffi::KeyName;
use super::super::key::KeyToken;
use super::super::replicate::Run;
use super::store::{store, Store};
use crate::algorithms::concurrency::{LeaseParams, Leases};
use crate::algorithms::{Decision, State};
use crate::error::CommandError;
use crate::parse;

/// Takes a slot for `id` on `key_name` under `params` (or renews `id`'s
/// lease): the decision. A key's first lease creates it.
pub fn acquire(
    run: &Run<'_>,
    token: &mut KeyToken,
    key_name: KeyName<'_>,
    params: LeaseParams,
    id: &[u8],
) -> Result<Decision, CommandError> {
    let mut key = run.write(token, key_name);
    match key.value::<Leases>()? {
        Some(leases) => {
            if leases.would_add(params, run.now_ms(), id) {
                run.out_of_memory()?;
            }
            let (decision, changed) = leases.acquire(params, run.now_ms(), id);
            let fresh_at_ms = leases.fresh_at_ms();
            let moved = key.settle_expiry(fresh_at_ms, run.expiry_slack_ms());
            if changed || moved {
                run.written(key_name);
            }
            Ok(decision)
        }
        None => {
            run.out_of_memory()?;
            let mut leases = Leases::new(params, run.now_ms());
            let (decision, _) = leases.acquire(params, run.now_ms(), id);
            store(run, &mut key, key_name, leases)?;
            Ok(decision)
        }
    }
}

/// Whether `id` holds a live lease on `key_name` now: an acquire for it is
/// a renewal (a heartbeat), which takes no slot, so none a waiter is owed.
pub fn renews(run: &Run<'_>, token: &mut KeyToken, key_name: KeyName<'_>, id: &[u8]) -> bool {
    let key = run.read(token, key_name);
    key.get::<Leases>()
        .is_some_and(|leases| leases.renews(id, run.now_ms()))
}

/// What an acquire of `params` on `key_name` would be told now, changing
/// nothing.
pub fn peek(
    run: &Run<'_>,
    token: &mut KeyToken,
    key_name: KeyName<'_>,
    params: LeaseParams,
) -> Result<Decision, CommandError> {
    let key = run.read(token, key_name);
    match key.get::<Leases>() {
        Some(leases) => Ok(leases.peek_with(params, run.now_ms())),
        None if key.is_empty() => {
            Ok(Leases::new(params, run.now_ms()).peek_with(params, run.now_ms()))
        }
        None => Err(CommandError::wrong_type()),
    }
}

/// `RL.RELEASE` on `key_name`, `words` being what follows the key (the id):
/// whether a lease was given back (its waiters may go: the caller tells
/// them).
pub fn release(
    run: &Run<'_>,
    token: &mut KeyToken,
    key_name: Option<KeyName<'_>>,
    words: &[&[u8]],
) -> Result<bool, CommandError> {
    let (Some(key_name), [id]) = (key_name, words) else {
        return Err(CommandError::Arity);
    };
    let id = parse::lease_id(id)?;
    let mut key = run.write(token, key_name);
    let Some(leases) = key.value::<Leases>()? else {
        return Ok(false);
    };
    if !leases.release(run.now_ms(), &id) {
        return Ok(false);
    }
    let (empty, fresh_at_ms) = (leases.is_empty(), leases.fresh_at_ms());
    if empty {
        key.delete();
    } else {
        key.settle_expiry(fresh_at_ms, run.expiry_slack_ms());
    }
    run.written(key_name);
    Ok(true)
}
