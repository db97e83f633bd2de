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

/// The answers to a peek of the whole `limit` at the moment the state left
/// by a take of part `first` of `limit` at `t0` (then, when `later` says, of
/// another part some ms after) is as good as new, from that state and from
/// a new key: the two an algorithm's `fresh_at_ms` promises are the same.
/// `None` when that moment is the last a state can carry.
pub fn stored_and_new_when_fresh<P: StateOf + Copy>(
    params: P,
    limit: u64,
    t0: i64,
    first: f64,
    later: Option<(i64, f64)>,
) -> Option<(Decision, Decision)> {
    let cost = |part: f64| ((limit as f64 * part) as u64).clamp(1, limit);
    let mut s = None;
    call(&mut s, params, t0, cost(first), Mode::Take);
    if let Some((after_ms, part)) = later {
        call(&mut s, params, t0 + after_ms, cost(part), Mode::Take);
    }
    let fresh_at_ms = s.as_ref().map(State::fresh_at_ms).unwrap_or(t0);
    if fresh_at_ms >= super::MAX_TIMESTAMP_MS {
        return None;
    }
    let stored = call(&mut s, params, fresh_at_ms, limit, Mode::Peek);
    let new = call(&mut None, params, fresh_at_ms, limit, Mode::Peek);
    Some((stored, new))
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
