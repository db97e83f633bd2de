//! Named policies' grammar: `RL.POLICY SET name <tier> [<tier> ...]
//! [PENALTY duration] [SHADOW] [ON-CHANGE KEEP|SCALE|RESET] [DRYRUN]`, a
//! policy's name, and `RL.CHECK`'s words after the policy's name. A tier is
//! written as `RL.ALL` takes a spec (`super::all`), read by the same code,
//! so a policy refuses exactly what `RL.ALL` refuses, in the same words.

use super::all::{specs, OnTier, Tier};
use super::options::{check_options, value_of, CheckOptions};
use crate::algorithms::registry::Listed;
use crate::error::{shown, CommandError};
use crate::words::syntax::{duration_word, Syntax, MAX_OWN_OPTIONS};
use crate::words::values::whole_in;

/// The longest policy name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// The most tiers a policy may hold (each is a key of every check).
pub const MAX_TIERS: usize = 16;

pub use crate::algorithms::migration::OnChange;

/// A policy's definition: its tiers and the options that go with them.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// One per key of each check, in key order.
    pub tiers: Vec<Tier>,
    /// `PENALTY duration`, in ms.
    pub penalty_ms: Option<u64>,
    /// `SHADOW`: decide, never deny.
    pub shadow: bool,
    pub on_change: OnChange,
}

impl Definition {
    /// The words that define it, normalised (algorithm names and options in
    /// capitals, durations in ms): `RL.POLICY SET name` followed by these
    /// defines it again, and two nodes holding the same definition hold the
    /// same words (the digest is taken over them).
    pub fn words(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for tier in &self.tiers {
            out.extend(tier.visit(SpecWords).into_iter().map(String::into_bytes));
        }
        if let Some(ms) = self.penalty_ms {
            out.push(b"PENALTY".to_vec());
            out.push(duration_word(ms).into_bytes());
        }
        if self.shadow {
            out.push(b"SHADOW".to_vec());
        }
        // ON-CHANGE KEEP is the default: not written.
        if self.on_change != OnChange::Keep {
            out.push(b"ON-CHANGE".to_vec());
            out.push(self.on_change.word().as_bytes().to_vec());
        }
        out
    }
}

/// A tier's spec as words: the algorithm's name, its parameters.
struct SpecWords;

impl OnTier for SpecWords {
    type Out = Vec<String>;
    fn on<A: Listed>(self, params: A::Params) -> Vec<String> {
        let mut words = vec![A::NAME.to_ascii_uppercase()];
        words.extend(params.to_words());
        words
    }
}

/// `RL.POLICY SET`'s words after the name: the definition, and whether
/// `DRYRUN` was given.
pub fn definition(words: &[&[u8]]) -> Result<(Definition, bool), CommandError> {
    if words.is_empty() {
        return Err(CommandError::syntax(
            "a policy needs at least one tier, e.g. TOKENBUCKET 10 1",
        ));
    }
    let (tiers, rest) = specs(words)?;
    if tiers.is_empty() {
        return Err(CommandError::syntax(&format!(
            "a policy needs at least one tier before its options, found '{}'",
            shown(words.first().copied().unwrap_or_default())
        )));
    }
    if tiers.len() > MAX_TIERS {
        return Err(CommandError::must_be(
            "the number of tiers",
            &format!("at most {MAX_TIERS}"),
        ));
    }
    // The policy's own words are taken out; the rest are read as a check's
    // options, so PENALTY and SHADOW are checked as the inline commands
    // check them, and an option that belongs to a request is named.
    let mut on_change = None;
    let mut dryrun = false;
    let mut shared: Vec<&[u8]> = Vec::with_capacity(rest.len());
    let mut it = rest.iter();
    while let Some(word) = it.next() {
        if word.eq_ignore_ascii_case(b"ON-CHANGE") {
            if on_change.is_some() {
                return Err(CommandError::repeated_option("ON-CHANGE"));
            }
            on_change = Some(on_change_word(value_of(it.next(), "ON-CHANGE")?)?);
        } else if word.eq_ignore_ascii_case(b"DRYRUN") {
            if dryrun {
                return Err(CommandError::repeated_option("DRYRUN"));
            }
            dryrun = true;
        } else if [&b"COST"[..], b"PEEK", b"BLOCK", b"UPTO"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w))
        {
            return Err(CommandError::syntax(&format!(
                "{} is a request's option, not a policy's: give it to RL.CHECK",
                shown(&word.to_ascii_uppercase())
            )));
        } else {
            shared.push(word);
        }
    }
    let options = check_options(&shared, &[], &mut [None; MAX_OWN_OPTIONS])?;
    Ok((
        Definition {
            tiers,
            penalty_ms: options.penalty_ms,
            shadow: options.shadow,
            on_change: on_change.unwrap_or_default(),
        },
        dryrun,
    ))
}

fn on_change_word(word: &[u8]) -> Result<OnChange, CommandError> {
    if word.eq_ignore_ascii_case(b"KEEP") {
        Ok(OnChange::Keep)
    } else if word.eq_ignore_ascii_case(b"SCALE") {
        Ok(OnChange::Scale)
    } else if word.eq_ignore_ascii_case(b"RESET") {
        Ok(OnChange::Reset)
    } else {
        Err(CommandError::must_be("ON-CHANGE", "KEEP, SCALE or RESET"))
    }
}

/// A policy's name: 1 to 128 bytes, each a printable ASCII character other
/// than a space (`!` to `~`), so a name can be written in a file, a log line
/// or `INFO` as it is.
pub fn name(word: &[u8]) -> Result<&[u8], CommandError> {
    let fits = (1..=MAX_NAME_BYTES).contains(&word.len());
    if fits && word.iter().all(|b| (b'!'..=b'~').contains(b)) {
        Ok(word)
    } else {
        Err(CommandError::must_be(
            "a policy name",
            "1 to 128 printable ASCII characters, no spaces",
        ))
    }
}

/// A policy's version as `RL.POLICY ROLLBACK` and the internal load name it.
pub fn version(word: &[u8]) -> Result<u64, CommandError> {
    whole_in(
        word,
        "version",
        1..=i64::MAX,
        "a whole number of at least 1",
    )
    .map(|v| v as u64)
}

/// `RL.CHECK`'s options after the keys: `COST n`, `PEEK`, `BLOCK ms` (the
/// policy gives the rest).
pub fn check_request_options(words: &[&[u8]]) -> Result<CheckOptions, CommandError> {
    for word in words {
        let policy_own = [&b"PENALTY"[..], b"SHADOW", b"UPTO"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w));
        if policy_own {
            return Err(CommandError::syntax(&format!(
                "RL.CHECK takes COST, PEEK and BLOCK; {} is not offered",
                shown(&word.to_ascii_uppercase())
            )));
        }
    }
    check_options(words, &[], &mut [None; MAX_OWN_OPTIONS])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(words: &[&str]) -> Result<(Definition, bool), CommandError> {
        let w: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        definition(&w)
    }

    fn text(r: Result<impl std::fmt::Debug, CommandError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    #[test]
    fn a_definition_reads_tiers_then_its_options_and_writes_itself_back() {
        let (d, dry) = def(&[
            "tokenbucket",
            "10",
            "1",
            "slidingcounter",
            "100",
            "1m",
            "precision",
            "6",
            "penalty",
            "30s",
            "shadow",
            "on-change",
            "keep",
            "dryrun",
        ])
        .unwrap();
        assert!(dry);
        assert_eq!(d.tiers.len(), 2);
        assert_eq!(
            (d.penalty_ms, d.shadow, d.on_change),
            (Some(30_000), true, OnChange::Keep)
        );
        let words: Vec<String> = d
            .words()
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect();
        let again: Vec<&str> = words.iter().map(String::as_str).collect();
        assert_eq!(def(&again).unwrap(), (d, false));
    }

    #[test]
    fn bad_definitions_are_refused_with_the_reason() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "ERR syntax error: a policy needs at least one tier, e.g. TOKENBUCKET 10 1"),
            (&["PENALTY", "1s"], "ERR syntax error: a policy needs at least one tier before its options, found 'PENALTY'"),
            (&["TOKENBUCKET", "0", "1"], "ERR capacity must be a whole number from 1 to 2^53-1"),
            (&["TOKENBUCKET", "1"], "ERR syntax error: TOKENBUCKET needs 2 parameters"),
            (&["TOKENBUCKET", "1", "1", "COST", "2"], "ERR syntax error: COST is a request's option, not a policy's: give it to RL.CHECK"),
            (&["TOKENBUCKET", "1", "1", "ON-CHANGE", "MAYBE"], "ERR ON-CHANGE must be KEEP, SCALE or RESET"),
            (&["TOKENBUCKET", "1", "1", "FOO"], "ERR syntax error: unknown option 'FOO'"),
        ];
        for (words, expected) in cases {
            let got = text(def(words));
            assert!(
                got.starts_with(expected.split(" must be").next().unwrap()),
                "{words:?}: {got}"
            );
            if !expected.contains("capacity") {
                assert_eq!(got, *expected, "{words:?}");
            }
        }
    }

    #[test]
    fn names_are_printable_ascii_without_spaces() {
        assert!(name(b"plan:free").is_ok());
        assert!(name(&[b'a'; 128]).is_ok());
        for bad in [&b""[..], b"a b", b"a\nb", &[b'a'; 129], "é".as_bytes()] {
            assert!(name(bad).is_err(), "{bad:?}");
        }
    }
}
