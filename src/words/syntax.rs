//! How an algorithm's parameters are written in a command, documented where
//! they are parsed: the words after the key, the options only that
//! algorithm takes, and what its command does. The command table, its
//! `COMMAND DOCS`, the parser of the check command and `RL.ALL`'s grammar
//! are all made from one [`Syntax`], so they cannot disagree.

use crate::error::CommandError;

/// How a value is written, as `COMMAND DOCS` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number.
    Integer,
    /// A decimal (a rate).
    Decimal,
    /// A decimal with an optional unit (to Redis, a string).
    Duration,
}

/// One word a command takes: its placeholder name, how it is written, and
/// what it means (one sentence for `COMMAND DOCS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word {
    pub name: &'static str,
    pub kind: Kind,
    pub summary: &'static str,
}

/// An option of one algorithm only, written `TOKEN value` (e.g.
/// `PRECISION 60`), at most once, anywhere among the options.
#[derive(Debug, Clone, Copy)]
pub struct OptionWord {
    pub token: &'static str,
    pub value: Word,
    /// Checks the value, with the error reply naming `token`.
    pub parse: fn(&[u8]) -> Result<u64, CommandError>,
}

/// The most options of its own an algorithm may take.
pub const MAX_OWN_OPTIONS: usize = 4;

/// An algorithm's parameters as a command writes them.
pub trait Syntax: Copy + PartialEq + std::fmt::Debug + Sized {
    /// The words after the key, in order; all required.
    const PARAMS: &'static [Word];

    /// Options of this algorithm only, besides those every check takes.
    const OPTIONS: &'static [OptionWord] = &[];

    /// Whether the check command takes `UPTO` (a partial grant) and its
    /// keys take refunds (`RL.REFUND`): see `crate::algorithms::partial`.
    const PARTIAL: bool = false;

    /// Whether the algorithm counts in windows, so that a refund must name
    /// the time of its grant (`RL.REFUND ... AT ms`) to go back into the
    /// window it came from.
    const WINDOWED: bool = false;

    /// What the check command does and replies, for `COMMAND DOCS`.
    const SUMMARY: &'static str;

    /// Its time complexity, in Redis's usual words.
    const COMPLEXITY: &'static str = "O(1)";

    /// The parameters from exactly `PARAMS.len()` words, checked in order.
    fn from_words(words: &[&[u8]]) -> Result<Self, CommandError>;

    /// Takes the values of [`Syntax::OPTIONS`] given (in `OPTIONS` order,
    /// `None` when not given), already checked by each option's `parse`.
    fn with_options(self, _values: &[Option<u64>]) -> Self {
        self
    }

    /// Words that parse to parameters of this kind (for tests, fuzzing and
    /// examples).
    const EXAMPLE: &'static [&'static str];

    /// Whether these are parameters the parser can give; otherwise the one
    /// that is out of range. A state's decoder (RDB, `RL.SETSTATE`, a
    /// replica's full sync) accepts exactly these, so no state can hold
    /// parameters a command refuses (a property test holds this to the
    /// parser).
    fn check(&self) -> Result<(), &'static str>;

    /// The words (and own options) that parse back to these parameters.
    fn to_words(&self) -> Vec<String>;
}

/// A duration in ms as a word the parser reads back exactly.
pub fn duration_word(ms: u64) -> String {
    format!("{ms}ms")
}
