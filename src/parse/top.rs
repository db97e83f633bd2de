//! `RL.TOP`'s words: `[count] [WITHERROR]`, or `RESET` alone.

use crate::error::CommandError;
use crate::words::values::amount;

/// How many keys `RL.TOP` lists when not told.
pub const DEFAULT_TOP_COUNT: u64 = 10;

/// What `RL.TOP` was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopArgs {
    /// The `count` keys denied most (at most those tracked), with each
    /// count's error when `with_error`.
    List { count: u64, with_error: bool },
    /// Forget every count.
    Reset,
}

/// Parses the words after `RL.TOP`: `RESET` alone, or an optional count
/// then an optional `WITHERROR` (any case). The first word that fits
/// neither is named in the error.
pub fn top(args: &[&[u8]]) -> Result<TopArgs, CommandError> {
    let is = |word: &[u8], token: &str| word.eq_ignore_ascii_case(token.as_bytes());
    match args {
        [word] if is(word, "RESET") => return Ok(TopArgs::Reset),
        [word, _, ..] if is(word, "RESET") => {
            return Err(CommandError::syntax("RESET takes no other argument"))
        }
        _ => {}
    }
    let (count, rest) = match args {
        [first, rest @ ..] if !is(first, "WITHERROR") => (amount(first, "count")?, rest),
        _ => (DEFAULT_TOP_COUNT, args),
    };
    let (with_error, rest) = match rest {
        [word, rest @ ..] if is(word, "WITHERROR") => (true, rest),
        _ => (false, rest),
    };
    match rest {
        [] => Ok(list(count, with_error)),
        [word, ..] if is(word, "WITHERROR") => Err(CommandError::repeated_option("WITHERROR")),
        [word, ..] => Err(CommandError::unknown_option(word)),
    }
}

fn list(count: u64, with_error: bool) -> TopArgs {
    TopArgs::List { count, with_error }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(words: &[&str]) -> String {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        match top(&words) {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    #[test]
    fn count_and_witherror_are_optional_and_in_any_case() {
        for (words, expected) in [
            (&[][..], list(10, false)),
            (&["5"], list(5, false)),
            (&["withError"], list(10, true)),
            (&["3", "WITHERROR"], list(3, true)),
            (&["9007199254740991"], list(9_007_199_254_740_991, false)),
            (&["reset"], TopArgs::Reset),
        ] {
            let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            assert_eq!(top(&bytes), Ok(expected), "{words:?}");
        }
    }

    #[test]
    fn bad_words_are_refused_naming_what_is_wrong() {
        let count = "ERR count must be an integer from 1 to 9007199254740991";
        for (words, expected) in [
            (&["0"][..], count),
            (&["-1"], count),
            (&["abc"], count),
            (&["1.5"], count),
            (&["9007199254740992"], count),
            (&["0", "WITHERROR"], count),
            (&["5", "extra"], "ERR syntax error: unknown option 'extra'"),
            (&["5", "6"], "ERR syntax error: unknown option '6'"),
            (
                &["WITHERROR", "WITHERROR"],
                "ERR syntax error: WITHERROR given more than once",
            ),
            (&["WITHERROR", "5"], "ERR syntax error: unknown option '5'"),
            (
                &["5", "WITHERROR", "extra"],
                "ERR syntax error: unknown option 'extra'",
            ),
            (
                &["5", "WITHERROR", "witherror"],
                "ERR syntax error: WITHERROR given more than once",
            ),
            (
                &["RESET", "extra"],
                "ERR syntax error: RESET takes no other argument",
            ),
            (
                &["RESET", "5"],
                "ERR syntax error: RESET takes no other argument",
            ),
            (&["5", "RESET"], "ERR syntax error: unknown option 'RESET'"),
        ] {
            assert_eq!(text(words), expected, "{words:?}");
        }
    }
}
