//! The words of a command, below the algorithms: what a word holds
//! ([`values`]: amounts, rates, durations, and their bounds) and how an
//! algorithm's parameters are written and documented ([`syntax`]). The
//! algorithms read their parameters with these; the grammar of whole
//! commands (`crate::parse`: options, `RL.ALL`, `RL.TOP`) sits above the
//! algorithms.

pub mod syntax;
pub mod values;
