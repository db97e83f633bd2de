//! `RL.ALL numkeys key [key ...] <ALGORITHM params> [...] [COST n] [PEEK]`:
//! one spec per key, each an algorithm's word (its registry name, any case),
//! its parameters and its own options (a sliding counter's `PRECISION n`),
//! then the options shared by every tier.

use super::options::{
    check_options, exclusive, own_option, upto_not_offered, value_of, CheckOptions,
};
use crate::algorithms::registry::{self, Each, Listed};
use crate::error::{shown, CommandError};
use crate::words::syntax::{Syntax, MAX_OWN_OPTIONS};
use crate::words::values::whole_in;

pub use crate::algorithms::registry::{IntoTier, OnTier, Tier, NAMES as ALGORITHM_WORDS};

/// The spec whose algorithm `word` names, its parameters read from `rest`;
/// `None` when `word` names no algorithm.
fn tier<'a>(word: &[u8], rest: &'a [&'a [u8]]) -> Option<Spec<'a>> {
    registry::on_name(word, &mut SpecOf { word, rest })
}

/// A spec read: its tier, and the words after it.
type Spec<'a> = Result<(Tier, &'a [&'a [u8]]), CommandError>;

/// [`tier`], for the algorithm its word names.
struct SpecOf<'w, 'a> {
    word: &'w [u8],
    rest: &'a [&'a [u8]],
}

impl<'a> Each for SpecOf<'_, 'a> {
    type Out = Spec<'a>;
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        spec::<A::Params>(self.word, self.rest).map(|(params, rest)| (params.into_tier(), rest))
    }
}

impl Tier {
    /// Whether the tier's algorithm takes partial grants and refunds.
    pub fn partial(&self) -> bool {
        self.visit(Partial)
    }

    /// Whether the tier's algorithm counts in windows (a refund names its
    /// grant's time).
    pub fn windowed(&self) -> bool {
        self.visit(Windowed)
    }

    /// The registry tag of the tier's algorithm.
    pub fn tag(&self) -> u8 {
        self.visit(Tag)
    }
}

/// [`Tier::partial`].
struct Partial;

impl OnTier for Partial {
    type Out = bool;
    fn on<A: Listed>(self, _: A::Params) -> bool {
        <A::Params as Syntax>::PARTIAL
    }
}

/// [`Tier::windowed`].
struct Windowed;

impl OnTier for Windowed {
    type Out = bool;
    fn on<A: Listed>(self, _: A::Params) -> bool {
        <A::Params as Syntax>::WINDOWED
    }
}

/// [`Tier::tag`].
struct Tag;

impl OnTier for Tag {
    type Out = u8;
    fn on<A: Listed>(self, _: A::Params) -> u8 {
        <A as crate::algorithms::Registered>::TAG
    }
}

/// `RL.ALL`'s arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct AllArgs {
    /// The tiers, one per key, in key order; the keys are the arguments
    /// right after `numkeys`.
    pub tiers: Vec<Tier>,
    pub options: CheckOptions,
}

/// `numkeys` of `RL.ALL`, given everything after the command name: a whole
/// number from 1 to the number of arguments that follow it. Used both to
/// parse and to answer Redis's question of which arguments are keys.
pub fn numkeys(args: &[&[u8]]) -> Result<usize, CommandError> {
    let Some(first) = args.first() else {
        return Err(CommandError::Arity);
    };
    let given = args.len() - 1;
    let n = whole_in(
        first,
        "numkeys",
        1..=i64::MAX,
        "a whole number of at least 1",
    )?;
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n > given {
        return Err(CommandError::must_be(
            "numkeys",
            "at most the number of arguments after it",
        ));
    }
    Ok(n)
}

/// Parses `RL.ALL`'s arguments after the command name.
pub fn all(args: &[&[u8]]) -> Result<AllArgs, CommandError> {
    let n = numkeys(args)?;
    let (keys, mut rest) = args
        .get(1..)
        .and_then(|after| after.split_at_checked(n))
        .ok_or(CommandError::Arity)?;
    // A set, not a scan of the keys before each one: Redis accepts a
    // million arguments, and this runs before anything else is checked.
    let mut seen = std::collections::HashSet::with_capacity(n);
    for key in keys {
        if !seen.insert(*key) {
            return Err(CommandError::syntax(&format!(
                "key '{}' is given more than once",
                shown(key)
            )));
        }
    }
    let mut tiers = Vec::with_capacity(n);
    while tiers.len() < n {
        let Some((word, after)) = rest.split_first() else {
            return Err(CommandError::syntax(&format!(
                "{n} keys need {n} algorithm specs, {} given",
                tiers.len()
            )));
        };
        let Some(parsed) = tier(word, after) else {
            return Err(unknown_algorithm(word));
        };
        let (tier, next) = parsed?;
        tiers.push(tier);
        rest = next;
    }
    let options = check_options(rest, &[], &mut [None; MAX_OWN_OPTIONS])?;
    if options.upto {
        // All or nothing: a partial grant would take a different amount
        // from each tier, and its refund would have to name each tier's
        // window.
        return Err(CommandError::syntax(
            "UPTO is not offered by RL.ALL (all or nothing): lease from one key",
        ));
    }
    Ok(AllArgs { tiers, options })
}

/// The specs at the front of `words`, as many as there are (a policy's
/// tiers, `super::policy`), and the words after them.
pub fn specs<'a>(words: &'a [&'a [u8]]) -> Result<(Vec<Tier>, &'a [&'a [u8]]), CommandError> {
    let mut tiers = Vec::new();
    let mut rest = words;
    while let Some((word, after)) = rest.split_first() {
        let Some(parsed) = tier(word, after) else {
            break;
        };
        let (tier, next) = parsed?;
        tiers.push(tier);
        rest = next;
    }
    Ok((tiers, rest))
}

/// `RL.PEEK key <ALGORITHM> <params> [COST n]`, after the key: one spec, as
/// in `RL.ALL`, then the options (`PEEK` is implied, and accepted; the
/// options `PEEK` excludes are refused).
pub fn peek(args: &[&[u8]]) -> Result<(Tier, CheckOptions), CommandError> {
    let Some((word, after)) = args.split_first() else {
        return Err(CommandError::Arity);
    };
    let Some(parsed) = tier(word, after) else {
        return Err(unknown_algorithm(word));
    };
    let (tier, rest) = parsed?;
    let mut options = check_options(rest, &[], &mut [None; MAX_OWN_OPTIONS])?;
    options.peek = true;
    exclusive(&options)?;
    if options.upto && !tier.partial() {
        return Err(upto_not_offered());
    }
    Ok((tier, options))
}

/// `RL.REFUND key <ALGORITHM> <params> amount [AT ms]`, after the key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefundArgs {
    /// The key's algorithm and parameters, as its checks name them.
    pub tier: Tier,
    /// How much to give back.
    pub amount: u64,
    /// `AT ms`: when the units were granted (a partial grant's
    /// `granted_at_ms`); required by the algorithms that count in windows.
    pub granted_at_ms: Option<i64>,
}

/// Reads `RL.REFUND`'s words after the key: one spec, as in `RL.ALL`, of an
/// algorithm that takes refunds, then the amount, then `AT ms` (required
/// when the algorithm counts in windows, so that the units go back into the
/// window they came from).
pub fn refund(args: &[&[u8]]) -> Result<RefundArgs, CommandError> {
    let Some((word, after)) = args.split_first() else {
        return Err(CommandError::Arity);
    };
    let Some(parsed) = tier(word, after) else {
        return Err(unknown_algorithm(word));
    };
    let (tier, rest) = parsed?;
    let [amount_word, options @ ..] = rest else {
        return Err(CommandError::Arity);
    };
    let shown_name = String::from_utf8_lossy(&word.to_ascii_uppercase()).into_owned();
    if !tier.partial() {
        return Err(CommandError::syntax(&format!(
            "{shown_name} takes no refunds (TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA do)"
        )));
    }
    let amount = crate::words::values::amount(amount_word, "amount")?;
    let mut granted_at_ms = None;
    let mut words = options.iter();
    while let Some(word) = words.next() {
        if word.eq_ignore_ascii_case(b"AT") {
            if granted_at_ms.is_some() {
                return Err(CommandError::repeated_option("AT"));
            }
            let at = whole_in(
                value_of(words.next(), "AT")?,
                "AT",
                0..=crate::algorithms::MAX_TIMESTAMP_MS,
                "a Unix time in milliseconds (a grant's granted_at_ms)",
            )?;
            granted_at_ms = Some(at);
        } else {
            return Err(CommandError::unknown_option(word));
        }
    }
    if granted_at_ms.is_none() && tier.windowed() {
        return Err(CommandError::syntax(&format!(
            "{shown_name} refunds need AT ms: the granted_at_ms of the grant, so the units go back into its window"
        )));
    }
    Ok(RefundArgs {
        tier,
        amount,
        granted_at_ms,
    })
}

fn unknown_algorithm(word: &[u8]) -> CommandError {
    CommandError::syntax(&format!(
        "unknown algorithm '{}' (expected {})",
        shown(&word.to_ascii_uppercase()),
        expected_words()
    ))
}

/// One spec after its algorithm's `word`: the parameters, then any of the
/// algorithm's own options right after them. Returns the words left.
fn spec<'a, P: Syntax>(
    word: &[u8],
    rest: &'a [&'a [u8]],
) -> Result<(P, &'a [&'a [u8]]), CommandError> {
    let wanted = P::PARAMS.len();
    let Some((words, mut rest)) = rest.split_at_checked(wanted) else {
        return Err(CommandError::syntax(&format!(
            "{} needs {wanted} parameters",
            String::from_utf8_lossy(&word.to_ascii_uppercase())
        )));
    };
    let params = P::from_words(words)?;
    let mut values = [None; MAX_OWN_OPTIONS];
    while let Some((option_word, after)) = rest.split_first() {
        let Some((option, slot)) = own_option(option_word, P::OPTIONS, &mut values) else {
            break;
        };
        if slot.is_some() {
            return Err(CommandError::repeated_option(option.token));
        }
        let value = value_of(after.first(), option.token)?;
        *slot = Some((option.parse)(value)?);
        rest = after.get(1..).unwrap_or_default();
    }
    Ok((params.with_options(&values), rest))
}

/// `TOKENBUCKET, SLIDINGCOUNTER, ... or GCRA`.
fn expected_words() -> String {
    let upper: Vec<String> = ALGORITHM_WORDS
        .iter()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    match upper.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, before)) => format!("{} or {last}", before.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn peek_reads_one_spec_then_cost() {
        let words: Vec<&[u8]> = vec![
            b"slidingcounter",
            b"5",
            b"1m",
            b"PRECISION",
            b"3",
            b"COST",
            b"2",
        ];
        let (tier, options) = peek(&words).unwrap();
        assert_eq!(
            tier,
            Tier::SlidingCounter(SlidingCounterParams {
                limit: 5,
                window_ms: 60_000,
                precision: 3
            })
        );
        assert_eq!(options.cost, 2);
        assert_eq!(peek(&[]), Err(CommandError::Arity));
        assert_eq!(
            text(peek(&[b"BUCKET", b"1", b"1"])),
            format!(
                "ERR syntax error: unknown algorithm 'BUCKET' (expected {})",
                registry_words()
            )
        );
        assert_eq!(
            text(peek(&[b"GCRA", b"1", b"1"])),
            "ERR syntax error: GCRA needs 3 parameters"
        );
    }

    use super::*;
    use crate::algorithms::gcra::GcraParams;
    use crate::algorithms::sliding_counter::SlidingCounterParams;
    use crate::algorithms::token_bucket::TokenBucketParams;

    /// The algorithms' words as an unknown one's error lists them, in
    /// registry order: `TOKENBUCKET, SLIDINGCOUNTER, ... or GCRA`.
    fn registry_words() -> String {
        let upper: Vec<String> = ALGORITHM_WORDS
            .iter()
            .map(|w| w.to_ascii_uppercase())
            .collect();
        match upper.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, before)) => format!("{} or {last}", before.join(", ")),
            None => String::new(),
        }
    }

    fn text(r: Result<impl std::fmt::Debug, CommandError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    fn all_of(words: &[&str]) -> Result<AllArgs, CommandError> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        all(&args)
    }

    #[test]
    fn all_reads_one_spec_per_key_then_the_shared_options() {
        let parsed = all_of(&[
            "3",
            "a",
            "b",
            "c",
            "tokenbucket",
            "10",
            "1",
            "SlidingCounter",
            "5",
            "1m",
            "precision",
            "6",
            "GCRA",
            "0",
            "1",
            "1s",
            "PEEK",
            "cost",
            "2",
        ])
        .unwrap();
        assert_eq!(parsed.tiers.len(), 3);
        assert_eq!(
            parsed.tiers[0],
            Tier::TokenBucket(TokenBucketParams {
                capacity: 10,
                rate_per_s: 1.0
            })
        );
        assert_eq!(
            parsed.tiers[1],
            Tier::SlidingCounter(SlidingCounterParams {
                limit: 5,
                window_ms: 60_000,
                precision: 6
            })
        );
        assert_eq!(
            parsed.tiers[2],
            Tier::Gcra(GcraParams {
                burst: 0,
                count: 1,
                period_ms: 1000
            })
        );
        assert_eq!((parsed.options.cost, parsed.options.peek), (2, true));
    }

    #[test]
    fn numkeys_counts_the_keys_and_no_more_than_are_given() {
        let n = |words: &[&str]| {
            let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            text(numkeys(&args))
        };
        assert_eq!(n(&["2", "a", "b", "x"]), "ok 2");
        assert_eq!(
            n(&["3", "a", "b"]),
            "ERR numkeys must be at most the number of arguments after it"
        );
        // Any decimal form of a whole number, as every numeric argument.
        assert_eq!(n(&["2e0", "a", "b", "x"]), "ok 2");
        assert_eq!(n(&["+1", "a"]), "ok 1");
        assert_eq!(n(&["1.0", "a"]), "ok 1");
        for bad in ["0", "-1", "1.5", "", "1e", "99999999999999999999999"] {
            assert_eq!(
                n(&[bad, "a"]),
                "ERR numkeys must be a whole number of at least 1",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn all_refuses_missing_unknown_and_extra_specs_and_repeated_keys() {
        let unknown = format!(
            "ERR syntax error: unknown algorithm 'LUA' (expected {})",
            registry_words()
        );
        let cases: &[(&[&str], &str)] = &[
            (
                &["2", "a", "b", "FIXEDWINDOW", "1", "1"],
                "ERR syntax error: 2 keys need 2 algorithm specs, 1 given",
            ),
            (&["1", "a", "LUA", "1", "1"], unknown.as_str()),
            (
                &["1", "a", "SLIDINGLOG", "1"],
                "ERR syntax error: SLIDINGLOG needs 2 parameters",
            ),
            (
                &["1", "a", "SLIDINGLOG", "1", "1", "SLIDINGLOG", "1", "1"],
                "ERR syntax error: unknown option 'SLIDINGLOG'",
            ),
            (
                &[
                    "2",
                    "k",
                    "k",
                    "SLIDINGLOG",
                    "1",
                    "1",
                    "SLIDINGLOG",
                    "1",
                    "1",
                ],
                "ERR syntax error: key 'k' is given more than once",
            ),
            (
                &["1", "a", "SLIDINGCOUNTER", "1", "1", "PRECISION"],
                "ERR syntax error: PRECISION needs a value",
            ),
            (
                &["1", "a", "SLIDINGCOUNTER", "1", "1", "PRECISION", "0"],
                "ERR PRECISION must be an integer from 1 to 1000",
            ),
        ];
        for (words, expected) in cases {
            assert_eq!(text(all_of(words)), *expected, "{words:?}");
        }
    }

    /// Regression (found by the panic and cost audit): repeated keys were
    /// looked for by comparing each key with every key before it, so
    /// `RL.ALL 40000 ...` spent 1.4 s of the server's one thread before any
    /// other check (a million keys, which Redis accepts, about 15 minutes).
    #[test]
    fn all_finds_a_repeated_key_among_many_in_linear_time() {
        let keys: Vec<String> = (0..40_000).map(|i| format!("user:{i}")).collect();
        let mut words: Vec<&str> = vec!["40001"];
        words.extend(keys.iter().map(String::as_str));
        words.push("user:17");
        let started = std::time::Instant::now();
        let answer = text(all_of(&words));
        let took = started.elapsed();
        assert_eq!(
            answer,
            "ERR syntax error: key 'user:17' is given more than once"
        );
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        let first_repeat = text(all_of(&["4", "a", "b", "b", "a", "GCRA", "0", "1", "1"]));
        assert_eq!(
            first_repeat,
            "ERR syntax error: key 'b' is given more than once"
        );
    }

    /// Regression (found by fuzzing): RL.ALL quoted an unknown algorithm
    /// name and a repeated key as the client sent them, whole and with any
    /// CR or LF, where every other error shows at most 64 characters and
    /// control characters as `?`.
    #[test]
    fn all_quotes_client_words_in_errors_bounded_and_without_control_characters() {
        let long = "k".repeat(1000);
        let cases: [(&[&str], String); 2] = [
            (
                &["1", "a", "TOKENBUCKET\r\n19", "1", "1"],
                format!(
                    "ERR syntax error: unknown algorithm 'TOKENBUCKET??19' (expected {})",
                    registry_words()
                ),
            ),
            (
                &[
                    "2", &long, &long, "GCRA", "0", "1", "1", "GCRA", "0", "1", "1",
                ],
                format!(
                    "ERR syntax error: key '{}' is given more than once",
                    &long[..64]
                ),
            ),
        ];
        for (words, expected) in cases {
            assert_eq!(text(all_of(words)), expected);
        }
    }
}
