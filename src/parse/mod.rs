//! Parsing of command arguments, in plain Rust. Every failure is a
//! [`CommandError`](crate::error::CommandError) carrying the one
//! conventional reply text for it.
//!
//! - [`values`]: the numbers a word holds (amounts, rates, durations);
//! - [`syntax`]: how an algorithm's parameters are written, documented;
//! - [`options`]: the words after the parameters (`COST`, `PEEK`, `ID`...);
//! - [`all`]: `RL.ALL`'s grammar;
//! - [`top`]: `RL.TOP`'s words.
//!
//! redis-cell's `CL.THROTTLE` arguments are read in `crate::redis_cell`.

pub mod all;
pub mod options;
pub mod syntax;
pub mod top;
pub mod values;

pub use all::{all, numkeys, peek, AllArgs, IntoTier, Tier};
pub use options::{acquire, check_args, lease_id, AcquireArgs, CheckOptions};
pub use syntax::Syntax;
pub use top::{top, TopArgs};
pub use values::{amount, duration_ms, rate, small_count};
