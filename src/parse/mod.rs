//! The grammar of command arguments, in plain Rust, above the algorithms
//! (it names their parameters); the words it is made of, below them, are
//! `crate::words` (re-exported here as [`values`] and [`syntax`]). Every
//! failure is a [`CommandError`](crate::error::CommandError) carrying the
//! one conventional reply text for it.
//!
//! - [`options`]: the words after the parameters (`COST`, `PEEK`, `ID`...);
//! - [`all`]: `RL.ALL`'s grammar;
//! - [`top`]: `RL.TOP`'s words.
//!
//! redis-cell's `CL.THROTTLE` arguments are read in `crate::redis_cell`.

pub mod all;
pub mod options;
pub mod policy;
pub mod top;

pub use crate::words::{syntax, values};

pub use crate::words::syntax::Syntax;
pub use crate::words::values::{amount, duration_ms, rate, small_count};
pub use all::{all, numkeys, peek, refund, AllArgs, IntoTier, RefundArgs, Tier};
pub use options::{acquire, check_args, lease_id, AcquireArgs, CheckOptions};
pub use top::{top, TopArgs};
