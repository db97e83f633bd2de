//! What the algorithms' unit tests share: one call the way the Redis layer
//! makes it, and the encoding round trip.

use super::registry::IntoTier;
use super::{Algorithm, Decision, Mode, State};
use crate::encoding::{DecodeError, Horizon};

/// The algorithm whose parameters these are, so that a test's `call` needs
/// no type annotations: the registry's [`IntoTier`] says it.
pub trait StateOf: Sized {
    type State: Algorithm<Params = Self>;
}

impl<P: IntoTier> StateOf for P {
    type State = P::Algorithm;
}

/// Runs one command against `state` the way the Redis layer does: the
/// stored state (or none), the parameters of this call; a taken request
/// stores the new state, anything else leaves it as it was.
pub fn call<P: StateOf>(
    state: &mut Option<P::State>,
    params: P,
    now_ms: i64,
    cost: u64,
    mode: Mode,
) -> Decision {
    let (decision, next) = P::State::check_with(state.as_ref(), params, now_ms, cost, mode);
    if let Some(next) = next {
        *state = Some(next);
    }
    decision
}

/// The state's body, without its tag.
pub fn encode_body<A: State>(state: &A) -> Vec<u8> {
    let mut buf = Vec::new();
    state.encode_body(&mut buf);
    buf
}

/// The state's full encoding, tag first.
pub fn encode<A: State>(state: &A) -> Vec<u8> {
    let mut buf = Vec::new();
    state.encode(&mut buf);
    buf
}

/// A body written by [`encode_body`] read back, every byte of it.
pub fn decode_body<A: State>(body: &[u8]) -> Result<A, DecodeError> {
    let mut full = vec![A::TAG];
    full.extend_from_slice(body);
    A::decode(&full, Horizon::NONE)
}
