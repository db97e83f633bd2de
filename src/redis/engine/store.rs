//! What the engine decides over ([`Store`]): the keys of one command, the
//! time it runs at, what the server says of memory, and who is told of a
//! write. A client's command, a replay and a woken waiter run over the
//! server's keys (`Run`); the engine's unit tests over keys in memory
//! (`super::memory`). Also what every write shares: storing a state with
//! its expiry.

use super::super::ffi::key::OpenKey;
use super::super::ffi::KeyName;
use super::super::key::{Key, KeyToken, RawKey, Read, Write};
use super::super::memory::refuses_growth;
use super::super::replicate::Run;
use super::super::types::Stored;
use crate::error::CommandError;

/// The keys a request is decided on, and what the engine asks around them.
pub trait Store {
    /// A key's name.
    type Name: Copy;
    /// What a key opened here is made of.
    type Raw<'s>: RawKey
    where
        Self: 's;

    /// The time the command decides at (Unix ms).
    fn now_ms(&self) -> i64;
    /// `ratelimit.expiry-slack` as the command runs it.
    fn expiry_slack_ms(&self) -> u32;
    /// Opens `name` for reading. One key at a time: the key holds the
    /// command's `token` while it is open (see [`KeyToken`]).
    fn read<'k>(
        &'k self,
        token: &'k mut KeyToken,
        name: Self::Name,
    ) -> Key<'k, Read, Self::Raw<'k>>;
    /// Opens `name` for reading and writing. One key at a time: the key
    /// holds the command's `token` while it is open, so a state is never
    /// lent twice (see [`KeyToken`]).
    fn write<'k>(
        &'k self,
        token: &'k mut KeyToken,
        name: Self::Name,
    ) -> Key<'k, Write, Self::Raw<'k>>;
    /// Refuses a request that would take more memory when Redis would
    /// refuse a write of its own (see `super::super::memory`): Redis's own
    /// OOM error, as for a command flagged `deny-oom`. Replays are never
    /// refused: the primary decided.
    fn out_of_memory(&self) -> Result<(), CommandError>;
    /// After a key was written: Redis is told it changed, and the command
    /// will be propagated.
    fn written(&self, name: Self::Name);
}

impl<'a> Store for Run<'a> {
    type Name = KeyName<'a>;
    type Raw<'s>
        = OpenKey<'s>
    where
        Self: 's;

    fn now_ms(&self) -> i64 {
        self.now_ms
    }

    fn expiry_slack_ms(&self) -> u32 {
        self.expiry_slack_ms
    }

    #[inline]
    fn read<'k>(
        &'k self,
        token: &'k mut KeyToken,
        name: KeyName<'a>,
    ) -> Key<'k, Read, OpenKey<'k>> {
        Key::opened(OpenKey::open(token, self.ctx, name, false))
    }

    #[inline]
    fn write<'k>(
        &'k self,
        token: &'k mut KeyToken,
        name: KeyName<'a>,
    ) -> Key<'k, Write, OpenKey<'k>> {
        Key::opened(OpenKey::open(token, self.ctx, name, true))
    }

    #[inline(always)]
    fn out_of_memory(&self) -> Result<(), CommandError> {
        if !self.is_replay() && refuses_growth(self.ctx) {
            Err(CommandError::out_of_memory())
        } else {
            Ok(())
        }
    }

    fn written(&self, name: KeyName<'a>) {
        self.ctx.signal_modified(name);
        self.changed();
    }
}

/// Writes `state` to an open key (empty, or holding an `A`), with its
/// expiry in its band.
pub fn store<S: Store, A: Stored, R: RawKey>(
    run: &S,
    key: &mut Key<'_, Write, R>,
    key_name: S::Name,
    state: A,
) -> Result<(), CommandError> {
    let fresh_at_ms = state.fresh_at_ms();
    key.put_decided(state)?;
    key.expire_fresh(fresh_at_ms, run.expiry_slack_ms());
    run.written(key_name);
    Ok(())
}
