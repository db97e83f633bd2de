//! The engine: how a request is decided on the keys it names, below the
//! commands and the request that say what was asked, above the keys and
//! states it reads and writes. One key's check ([`check`]), `RL.ALL`'s
//! tiers decided together then stored or settled ([`all`]), the
//! concurrency limiter's leases ([`leases`]), and what every write shares
//! ([`store`]: storing, the expiry, the maxmemory rule).

pub mod all;
pub mod check;
pub mod leases;
pub mod store;

use super::stats::Counted;
use super::types::PenalizedStored;
use crate::algorithms::penalty::Penalizable;
use crate::algorithms::Algorithm;
use crate::parse::{CheckOptions, IntoTier};

/// An algorithm with its own check command.
pub trait Checked: Algorithm<Params: IntoTier> + PenalizedStored + Counted + Penalizable {}

impl<A: Algorithm<Params: IntoTier> + PenalizedStored + Counted + Penalizable> Checked for A {}

/// The penalty a denial starts: `PENALTY`'s, unless in `SHADOW` mode.
pub fn penalty_of(options: &CheckOptions) -> Option<u64> {
    options.penalty_ms.filter(|_| !options.shadow)
}
