//! What a waiter is on this server: the command as its client sent it and
//! as it was parsed, the answer it gets, and the type that names the
//! callbacks Redis calls for its client (`callbacks.rs` says what they do).

use super::super::outcome::Outcome;
use super::super::request::Request;
use crate::error::CommandError;

/// A waiting request: the command as sent (for its replay; a check by a
/// policy's name has the policy's definition in place of its name) and as
/// parsed.
pub struct Parked {
    pub words: Vec<Vec<u8>>,
    pub request: Request,
    /// The policy's name, for a check by name (`RL.CHECK`): each turn
    /// decides the waiter under the policy as it stands then.
    pub policy: Option<Box<[u8]>>,
}

/// A waiter's answer: its outcome, or an error.
pub type Answer = Result<Outcome, CommandError>;

/// The callbacks of a waiting client: the type `ffi::block` blocks and
/// unblocks a client with. Redis calls them from outside any command, so
/// what they do sits above everything they reach (`callbacks.rs`); here is
/// only the name, which the files below need to unblock a client.
pub struct Waiters;
