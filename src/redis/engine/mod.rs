//! The engine: how a request is decided on the keys it names, below the
//! commands that say what was asked, above the keys and states it reads
//! and writes. Its entry ([`decide`]), one key's check ([`check`]), `RL.ALL`'s
//! tiers decided together then stored or settled ([`all`]), the
//! concurrency limiter's leases ([`leases`]), and what every write shares
//! ([`store`]: storing, the expiry, the maxmemory rule).

pub mod all;
pub mod check;
pub mod decide;
pub mod leases;
#[cfg(test)]
mod memory;
pub mod migrate;
pub mod store;
#[cfg(test)]
mod tests;

use super::stats::Counted;
use super::types::PenalizedStored;
use crate::algorithms::penalty::Penalizable;
use crate::algorithms::{Algorithm, Decision};
use crate::parse::{CheckOptions, IntoTier};

/// An algorithm with its own check command.
pub trait Checked: Algorithm<Params: IntoTier> + PenalizedStored + Counted + Penalizable {}

impl<A: Algorithm<Params: IntoTier> + PenalizedStored + Counted + Penalizable> Checked for A {}

/// The penalty a denial starts: `PENALTY`'s, unless in `SHADOW` mode.
pub fn penalty_of(options: &CheckOptions) -> Option<u64> {
    options.penalty_ms.filter(|_| !options.shadow)
}

/// Until when a denied request that waits (`BLOCK ms`) holds the keys it
/// waits on: its turn (`now_ms` plus its `retry_after_ms`), when that comes
/// within its wait. A key's expiry is set by its last allowed request, under
/// that request's parameters; a request with other parameters (a lower rate,
/// a longer window) can be due later than that. Without the hold the key
/// would expire while the request waits, and the request would be decided
/// on a new key rather than on the state it was denied on (issue 28, item
/// 3). Past the key's own expiry its state is as good as new under its
/// stored parameters, so the hold changes no answer to those; under the
/// waiter's parameters it keeps the state as the changed-parameters rule
/// says it carries over. Read from the option as written, not from whether
/// the client can wait here (`MULTI`, scripts), so that a replica and an
/// AOF replay, which never wait, hold the key the same.
pub fn turn_of(decision: &Decision, now_ms: i64, block_ms: Option<u64>) -> Option<i64> {
    let block_ms = i64::try_from(block_ms?).unwrap_or(i64::MAX);
    let retry_ms = decision.retry_after_ms;
    let in_time = block_ms == 0 || retry_ms <= block_ms;
    (!decision.allowed && retry_ms >= 0 && in_time).then(|| now_ms.saturating_add(retry_ms))
}
