//! What every command that writes a state shares: the maxmemory rule,
//! telling Redis a key changed, and storing a state with its expiry.

use super::super::ffi::KeyName;
use super::super::key::WriteKey;
use super::super::memory::refuses_growth;
use super::super::replicate::Run;
use super::super::types::Stored;
use crate::error::CommandError;

/// Refuses a request that would take more memory when Redis would refuse a
/// write of its own (see `super::super::memory`): Redis's own OOM error, as
/// for a command flagged `deny-oom`. Replays are never refused: the primary
/// decided.
pub fn out_of_memory(run: &Run<'_>) -> Result<(), CommandError> {
    if !run.is_replay() && refuses_growth(run.ctx) {
        Err(CommandError::out_of_memory())
    } else {
        Ok(())
    }
}

/// After a key was written: Redis is told it changed, and the command will
/// be propagated.
pub fn written(run: &Run<'_>, key_name: KeyName<'_>) {
    run.ctx.signal_modified(key_name);
    run.changed();
}

/// Writes `state` to an open key (empty, or holding an `A`), with its
/// expiry in its band.
pub fn store<A: Stored>(
    run: &Run<'_>,
    key: &mut WriteKey<'_>,
    key_name: KeyName<'_>,
    state: A,
) -> Result<(), CommandError> {
    let fresh_at_ms = state.fresh_at_ms();
    key.put(state)?;
    key.expire_fresh(fresh_at_ms, run.expiry_slack_ms);
    written(run, key_name);
    Ok(())
}
