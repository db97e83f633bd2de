//! The words after a command's parameters: the options every check command
//! takes (`COST n`, `PEEK`, `BLOCK ms`), an algorithm's own (`PRECISION n`),
//! and the concurrency limiter's (`ID id`, `BLOCK ms`). Each option at most
//! once, in any order, in any case.

use crate::algorithms::concurrency::{LeaseParams, MAX_ID_BYTES};
use crate::error::CommandError;
use crate::words::syntax::{OptionWord, Syntax, MAX_OWN_OPTIONS};
use crate::words::values::{amount, duration_ms, whole_in, MAX_AMOUNT};

/// The options every check command takes after its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// How much of the limit this request uses (`COST n`, default 1).
    pub cost: u64,
    /// `PEEK`: answer and change nothing.
    pub peek: bool,
    /// `BLOCK ms`: wait on the server until allowed, at most `ms` (0: no
    /// limit).
    pub block_ms: Option<u64>,
    /// `PENALTY duration`: a denial locks the key for this long (ms).
    pub penalty_ms: Option<u64>,
    /// `SHADOW`: decide, but never deny.
    pub shadow: bool,
    /// `UPTO` (with `COST n`): grant as much of `n` as is available now,
    /// possibly 0 (`crate::algorithms::partial`).
    pub upto: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            cost: 1,
            peek: false,
            block_ms: None,
            penalty_ms: None,
            shadow: false,
            upto: false,
        }
    }
}

/// `<params> [options]` of a check command, after the key: the parameters
/// first, then the options, each checked in the order written.
pub fn check_args<P: Syntax>(args: &[&[u8]]) -> Result<(P, CheckOptions), CommandError> {
    let (words, rest) = args
        .split_at_checked(P::PARAMS.len())
        .ok_or(CommandError::Arity)?;
    let params = P::from_words(words)?;
    let mut own = [None; MAX_OWN_OPTIONS];
    if rest.is_empty() {
        // Most checks give no options: nothing to read or to contradict.
        return Ok((params.with_options(&own), CheckOptions::default()));
    }
    let options = check_options(rest, P::OPTIONS, &mut own)?;
    if options.upto && !P::PARTIAL {
        return Err(upto_not_offered());
    }
    Ok((params.with_options(&own), options))
}

/// Reads the option words: the shared ones into the result, the
/// algorithm's own (`own`) into `values`, by position.
pub fn check_options(
    args: &[&[u8]],
    own: &[OptionWord],
    values: &mut [Option<u64>; MAX_OWN_OPTIONS],
) -> Result<CheckOptions, CommandError> {
    let mut options = CheckOptions::default();
    let (mut seen_cost, mut seen_peek, mut seen_shadow) = (false, false, false);
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word.eq_ignore_ascii_case(b"COST") {
            once(&mut seen_cost, "COST")?;
            options.cost = amount(value_of(words.next(), "COST")?, "COST")?;
        } else if word.eq_ignore_ascii_case(b"PEEK") {
            once(&mut seen_peek, "PEEK")?;
            options.peek = true;
        } else if word.eq_ignore_ascii_case(b"BLOCK") {
            if options.block_ms.is_some() {
                return Err(CommandError::repeated_option("BLOCK"));
            }
            options.block_ms = Some(block_ms(value_of(words.next(), "BLOCK")?)?);
        } else if word.eq_ignore_ascii_case(b"PENALTY") {
            if options.penalty_ms.is_some() {
                return Err(CommandError::repeated_option("PENALTY"));
            }
            options.penalty_ms = Some(duration_ms(value_of(words.next(), "PENALTY")?, "PENALTY")?);
        } else if word.eq_ignore_ascii_case(b"SHADOW") {
            once(&mut seen_shadow, "SHADOW")?;
            options.shadow = true;
        } else if word.eq_ignore_ascii_case(b"UPTO") {
            once(&mut options.upto, "UPTO")?;
        } else if let Some((option, slot)) = own_option(word, own, values) {
            if slot.is_some() {
                return Err(CommandError::repeated_option(option.token));
            }
            *slot = Some((option.parse)(value_of(words.next(), option.token)?)?);
        } else {
            return Err(CommandError::unknown_option(word));
        }
    }
    if options.upto && !seen_cost {
        return Err(CommandError::syntax("UPTO needs COST n: the most to grant"));
    }
    exclusive(&options)?;
    Ok(options)
}

/// `UPTO` on an algorithm that takes no partial grants (see
/// `crate::algorithms::partial` for which, and why).
pub(crate) fn upto_not_offered() -> CommandError {
    CommandError::syntax(
        "UPTO is offered by TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA only",
    )
}

/// The options that contradict each other: `PEEK` changes nothing, so it
/// neither waits (`BLOCK`), nor starts a penalty, nor is shadowed; a
/// request that never denies (`SHADOW`) has nothing to wait for; and one
/// that waits until allowed is never answered a denial that could start a
/// penalty when it gets its turn. `SHADOW` with `PENALTY` is accepted (a
/// rule with a penalty in shadow mode), and starts no penalty. A partial
/// grant (`UPTO`) is never shadowed: it answers how much it took, and a
/// shadowed request takes its whole cost or nothing.
pub(crate) fn exclusive(options: &CheckOptions) -> Result<(), CommandError> {
    // Most requests give none of them: checked on every request.
    let changes = options.block_ms.is_some() || options.penalty_ms.is_some() || options.shadow;
    if !changes {
        return Ok(());
    }
    let given = [
        ("PEEK", options.peek),
        ("BLOCK", options.block_ms.is_some()),
        ("PENALTY", options.penalty_ms.is_some()),
        ("SHADOW", options.shadow),
        ("UPTO", options.upto),
    ];
    const CLASHES: [(&str, &str); 6] = [
        ("PEEK", "BLOCK"),
        ("PEEK", "PENALTY"),
        ("PEEK", "SHADOW"),
        ("SHADOW", "BLOCK"),
        ("PENALTY", "BLOCK"),
        ("UPTO", "SHADOW"),
    ];
    let has = |name: &str| given.iter().any(|&(n, on)| on && n == name);
    match CLASHES.iter().find(|(a, b)| has(a) && has(b)) {
        Some((a, b)) => Err(CommandError::syntax(&format!(
            "{a} and {b} cannot be given together"
        ))),
        None => Ok(()),
    }
}

/// `BLOCK`'s value: whole milliseconds, 0 for no limit (Redis's convention
/// for blocking commands).
pub fn block_ms(word: &[u8]) -> Result<u64, CommandError> {
    whole_in(
        word,
        "BLOCK",
        0..=MAX_AMOUNT as i64,
        "a whole number of milliseconds from 0 (no limit) to 9007199254740991",
    )
    .map(|ms| ms as u64)
}

/// The algorithm's option `word` names, and the slot for its value.
pub(crate) fn own_option<'o, 'v>(
    word: &[u8],
    own: &'o [OptionWord],
    values: &'v mut [Option<u64>; MAX_OWN_OPTIONS],
) -> Option<(&'o OptionWord, &'v mut Option<u64>)> {
    let i = own
        .iter()
        .position(|o| word.eq_ignore_ascii_case(o.token.as_bytes()))?;
    Some((own.get(i)?, values.get_mut(i)?))
}

/// `RL.ACQUIRE key limit lease [ID id] [BLOCK ms]`, after the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireArgs {
    pub params: LeaseParams,
    /// The lease's id, when the caller chose one.
    pub id: Option<Vec<u8>>,
    /// `BLOCK ms`: wait until a slot is free, at most `ms` (0: no limit).
    pub block_ms: Option<u64>,
}

/// `RL.ACQUIRE key limit lease [ID id] [BLOCK ms]`, after the key.
pub fn acquire(args: &[&[u8]]) -> Result<AcquireArgs, CommandError> {
    let [limit, lease, options @ ..] = args else {
        return Err(CommandError::Arity);
    };
    let params = LeaseParams {
        limit: amount(limit, "limit")?,
        lease_ms: duration_ms(lease, "lease")?,
    };
    let (mut id, mut block) = (None, None);
    let mut words = options.iter();
    while let Some(word) = words.next() {
        if word.eq_ignore_ascii_case(b"ID") {
            if id.is_some() {
                return Err(CommandError::repeated_option("ID"));
            }
            id = Some(lease_id(value_of(words.next(), "ID")?)?);
        } else if word.eq_ignore_ascii_case(b"BLOCK") {
            if block.is_some() {
                return Err(CommandError::repeated_option("BLOCK"));
            }
            block = Some(block_ms(value_of(words.next(), "BLOCK")?)?);
        } else {
            return Err(CommandError::unknown_option(word));
        }
    }
    Ok(AcquireArgs {
        params,
        id,
        block_ms: block,
    })
}

/// A lease id: 1 to 64 bytes.
pub fn lease_id(id: &[u8]) -> Result<Vec<u8>, CommandError> {
    if (1..=MAX_ID_BYTES).contains(&id.len()) {
        Ok(id.to_vec())
    } else {
        Err(CommandError::must_be("id", "1 to 64 bytes"))
    }
}

fn once(seen: &mut bool, name: &str) -> Result<(), CommandError> {
    if std::mem::replace(seen, true) {
        Err(CommandError::repeated_option(name))
    } else {
        Ok(())
    }
}

/// The value after an option word, or the error saying it is missing.
pub(crate) fn value_of<'a>(arg: Option<&&'a [u8]>, name: &str) -> Result<&'a [u8], CommandError> {
    arg.copied()
        .ok_or_else(|| CommandError::syntax(&format!("{name} needs a value")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::sliding_counter::SlidingCounterParams;
    use crate::algorithms::token_bucket::TokenBucketParams;

    fn text(r: Result<impl std::fmt::Debug, CommandError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    fn shared(args: &[&[u8]]) -> Result<CheckOptions, CommandError> {
        check_options(args, &[], &mut [None; MAX_OWN_OPTIONS])
    }

    #[test]
    fn options_come_in_any_order_and_any_case_once_each() {
        assert_eq!(
            shared(&[b"peek", b"Cost", b"5"]),
            Ok(CheckOptions {
                cost: 5,
                peek: true,
                ..CheckOptions::default()
            })
        );
        assert_eq!(
            shared(&[b"shadow", b"PENALTY", b"15m"]),
            Ok(CheckOptions {
                penalty_ms: Some(900_000),
                shadow: true,
                ..CheckOptions::default()
            })
        );
        let cases: [(&[&[u8]], &str); 6] = [
            (&[b"COST"], "ERR syntax error: COST needs a value"),
            (
                &[b"COST", b"0"],
                "ERR COST must be an integer from 1 to 9007199254740991",
            ),
            (
                &[b"PEEK", b"peek"],
                "ERR syntax error: PEEK given more than once",
            ),
            (
                &[b"COST", b"1", b"COST", b"2"],
                "ERR syntax error: COST given more than once",
            ),
            (&[b"FAST"], "ERR syntax error: unknown option 'FAST'"),
            (
                &[b"PRECISION", b"5"],
                "ERR syntax error: unknown option 'PRECISION'",
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(text(shared(args)), expected, "{args:?}");
        }
    }

    #[test]
    fn block_takes_whole_milliseconds_zero_for_no_limit_and_never_with_peek() {
        assert_eq!(shared(&[b"BLOCK", b"0"]).map(|o| o.block_ms), Ok(Some(0)));
        assert_eq!(
            shared(&[b"block", b"1500"]).map(|o| o.block_ms),
            Ok(Some(1500))
        );
        for bad in [&b"-1"[..], b"1.5", b"x", b""] {
            assert_eq!(
                text(shared(&[b"BLOCK", bad])),
                "ERR BLOCK must be a whole number of milliseconds from 0 (no limit) to 9007199254740991",
                "{bad:?}"
            );
        }
        assert_eq!(
            text(shared(&[b"BLOCK"])),
            "ERR syntax error: BLOCK needs a value"
        );
        assert_eq!(
            text(shared(&[b"BLOCK", b"1", b"PEEK"])),
            "ERR syntax error: PEEK and BLOCK cannot be given together"
        );
    }

    #[test]
    fn penalty_takes_a_duration_once_and_contradicting_options_are_refused() {
        assert_eq!(
            shared(&[b"PENALTY", b"1h"]).map(|o| o.penalty_ms),
            Ok(Some(3_600_000))
        );
        let cases: [(&[&[u8]], &str); 9] = [
            (&[b"PENALTY"], "ERR syntax error: PENALTY needs a value"),
            (
                &[b"PENALTY", b"0"],
                "ERR PENALTY must be a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)",
            ),
            (
                &[b"PENALTY", b"1s", b"penalty", b"2s"],
                "ERR syntax error: PENALTY given more than once",
            ),
            (
                &[b"SHADOW", b"shadow"],
                "ERR syntax error: SHADOW given more than once",
            ),
            (
                &[b"PENALTY", b"1s", b"PEEK"],
                "ERR syntax error: PEEK and PENALTY cannot be given together",
            ),
            (
                &[b"SHADOW", b"PEEK"],
                "ERR syntax error: PEEK and SHADOW cannot be given together",
            ),
            (
                &[b"SHADOW", b"BLOCK", b"5"],
                "ERR syntax error: SHADOW and BLOCK cannot be given together",
            ),
            (
                &[b"BLOCK", b"5", b"PENALTY", b"1m"],
                "ERR syntax error: PENALTY and BLOCK cannot be given together",
            ),
            (
                &[b"PEEK", b"BLOCK", b"5"],
                "ERR syntax error: PEEK and BLOCK cannot be given together",
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(text(shared(args)), expected, "{args:?}");
        }
    }

    #[test]
    fn upto_goes_with_cost_once_never_with_shadow_and_only_where_offered() {
        assert_eq!(
            shared(&[b"upto", b"COST", b"7"]),
            Ok(CheckOptions {
                cost: 7,
                upto: true,
                ..CheckOptions::default()
            })
        );
        assert_eq!(
            shared(&[b"COST", b"7", b"UPTO", b"PEEK"]).map(|o| (o.upto, o.peek)),
            Ok((true, true))
        );
        assert_eq!(
            shared(&[b"COST", b"7", b"UPTO", b"BLOCK", b"10"]).map(|o| o.block_ms),
            Ok(Some(10))
        );
        let cases: [(&[&[u8]], &str); 3] = [
            (
                &[b"UPTO"],
                "ERR syntax error: UPTO needs COST n: the most to grant",
            ),
            (
                &[b"COST", b"2", b"UPTO", b"upto"],
                "ERR syntax error: UPTO given more than once",
            ),
            (
                &[b"COST", b"2", b"UPTO", b"SHADOW"],
                "ERR syntax error: UPTO and SHADOW cannot be given together",
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(text(shared(args)), expected, "{args:?}");
        }
        assert_eq!(
            check_args::<TokenBucketParams>(&[b"10", b"1", b"COST", b"3", b"UPTO"])
                .map(|(_, o)| o.upto),
            Ok(true)
        );
        assert_eq!(
            text(check_args::<crate::algorithms::sliding_log::SlidingLogParams>(&[
                b"10", b"1m", b"COST", b"3", b"UPTO"
            ])),
            "ERR syntax error: UPTO is offered by TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW and GCRA only"
        );
    }

    #[test]
    fn parameters_come_before_options_and_are_all_required() {
        assert_eq!(
            check_args::<TokenBucketParams>(&[b"10"]),
            Err(CommandError::Arity)
        );
        assert_eq!(
            check_args::<TokenBucketParams>(&[b"10", b"0.5", b"PEEK"]).map(|(p, o)| (
                p.capacity,
                p.rate_per_s,
                o.peek
            )),
            Ok((10, 0.5, true))
        );
        assert_eq!(
            text(check_args::<TokenBucketParams>(&[b"PEEK", b"10", b"1"])),
            "ERR capacity must be an integer from 1 to 9007199254740991"
        );
        assert_eq!(
            check_args::<SlidingCounterParams>(&[b"100", b"1m", b"precision", b"60"])
                .map(|(p, _)| p),
            Ok(SlidingCounterParams {
                limit: 100,
                window_ms: 60_000,
                precision: 60
            })
        );
        assert_eq!(
            check_args::<SlidingCounterParams>(&[b"100", b"1m"]).map(|(p, _)| p.precision),
            Ok(1)
        );
    }

    #[test]
    fn an_algorithms_own_option_is_bounded_and_given_once() {
        let sc = |args: &[&[u8]]| {
            let mut words: Vec<&[u8]> = vec![b"100", b"1m"];
            words.extend_from_slice(args);
            text(check_args::<SlidingCounterParams>(&words).map(|(p, _)| p.precision))
        };
        assert_eq!(sc(&[b"PRECISION", b"60"]), "ok 60");
        assert_eq!(
            sc(&[b"precision", b"1001"]),
            "ERR PRECISION must be an integer from 1 to 1000"
        );
        assert_eq!(
            sc(&[b"PRECISION", b"2", b"PRECISION", b"2"]),
            "ERR syntax error: PRECISION given more than once"
        );
        assert_eq!(
            sc(&[b"PRECISION"]),
            "ERR syntax error: PRECISION needs a value"
        );
    }

    #[test]
    fn acquire_takes_limit_lease_and_an_optional_id() {
        let a = |words: &[&str]| {
            let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            text(acquire(&args))
        };
        assert_eq!(
            a(&["3", "30s"]),
            "ok AcquireArgs { params: LeaseParams { limit: 3, lease_ms: 30000 }, id: None, block_ms: None }"
        );
        assert_eq!(
            a(&["3", "250ms", "id", "w", "BLOCK", "0"]),
            "ok AcquireArgs { params: LeaseParams { limit: 3, lease_ms: 250 }, id: Some([119]), block_ms: Some(0) }"
        );
        assert_eq!(
            a(&["3", "1s", "BLOCK", "1", "block", "2"]),
            "ERR syntax error: BLOCK given more than once"
        );
        assert_eq!(a(&["3"]), "ERR wrong number of arguments");
        assert_eq!(a(&["3", "1s", "ID"]), "ERR syntax error: ID needs a value");
        assert_eq!(
            a(&["3", "1s", "PEEK"]),
            "ERR syntax error: unknown option 'PEEK'"
        );
        assert_eq!(
            a(&["3", "1s", "ID", "a", "id", "b"]),
            "ERR syntax error: ID given more than once"
        );
        assert_eq!(
            a(&["3", "1s", "ID", &"x".repeat(65)]),
            "ERR id must be 1 to 64 bytes"
        );
    }
}
