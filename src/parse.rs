//! Parsing of command arguments, in plain Rust: numbers, durations with units,
//! and the option words shared by every check command. Every failure is a
//! [`CommandError`] carrying the one conventional reply text for it.

use crate::algorithms::concurrency::{LeaseParams, MAX_ID_BYTES};
use crate::algorithms::fixed_window::FixedWindowParams;
use crate::algorithms::gcra::{cl_throttle_args, ClThrottleArgs, GcraParams};
use crate::algorithms::leaky_bucket::LeakyBucketParams;
use crate::algorithms::sliding_counter::{SlidingCounterParams, MAX_PRECISION};
use crate::algorithms::sliding_log::SlidingLogParams;
use crate::algorithms::token_bucket::TokenBucketParams;
use crate::algorithms::{MAX_AMOUNT, MAX_DURATION_MS};
use crate::error::{shown, CommandError};

/// `capacity rate [COST n] [PEEK]`, the parameters of both bucket commands.
fn capacity_and_rate(args: &[&[u8]]) -> Result<(u64, f64, CheckOptions), CommandError> {
    let [capacity, rate_per_s, options @ ..] = args else {
        return Err(CommandError::Arity);
    };
    Ok((
        amount(capacity, "capacity")?,
        rate(rate_per_s, "rate")?,
        check_options(options, ExtraOption::None)?,
    ))
}

/// `RL.TOKENBUCKET key capacity rate [COST n] [PEEK]`, after the key.
pub fn token_bucket(args: &[&[u8]]) -> Result<(TokenBucketParams, CheckOptions), CommandError> {
    let (capacity, rate_per_s, options) = capacity_and_rate(args)?;
    let params = TokenBucketParams {
        capacity,
        rate_per_s,
    };
    Ok((params, options))
}

/// `limit window [COST n] [PEEK]`, the parameters of both window commands.
fn limit_and_window(args: &[&[u8]]) -> Result<(u64, u64, CheckOptions), CommandError> {
    let [limit, window, options @ ..] = args else {
        return Err(CommandError::Arity);
    };
    Ok((
        amount(limit, "limit")?,
        duration_ms(window, "window")?,
        check_options(options, ExtraOption::None)?,
    ))
}

/// `RL.FIXEDWINDOW key limit window [COST n] [PEEK]`, after the key.
pub fn fixed_window(args: &[&[u8]]) -> Result<(FixedWindowParams, CheckOptions), CommandError> {
    let (limit, window_ms, options) = limit_and_window(args)?;
    Ok((FixedWindowParams { limit, window_ms }, options))
}

/// `RL.SLIDINGLOG key limit window [COST n] [PEEK]`, after the key.
pub fn sliding_log(args: &[&[u8]]) -> Result<(SlidingLogParams, CheckOptions), CommandError> {
    let (limit, window_ms, options) = limit_and_window(args)?;
    Ok((SlidingLogParams { limit, window_ms }, options))
}

/// `RL.LEAKYBUCKET key capacity rate [COST n] [PEEK]`, after the key.
pub fn leaky_bucket(args: &[&[u8]]) -> Result<(LeakyBucketParams, CheckOptions), CommandError> {
    let (capacity, rate_per_s, options) = capacity_and_rate(args)?;
    let params = LeakyBucketParams {
        capacity,
        rate_per_s,
    };
    Ok((params, options))
}

/// `RL.GCRA key burst count period [COST n] [PEEK]`, after the key. `burst`
/// may be 0 (then the limit is 1); `count` is at most one a nanosecond.
pub fn gcra(args: &[&[u8]]) -> Result<(GcraParams, CheckOptions), CommandError> {
    let [burst, count, period, options @ ..] = args else {
        return Err(CommandError::Arity);
    };
    let burst = if burst == b"0" {
        0
    } else {
        amount(burst, "burst")
            .ok()
            .filter(|&b| b < MAX_AMOUNT)
            .ok_or_else(|| {
                CommandError::must_be("burst", "an integer from 0 to 9007199254740990")
            })?
    };
    let count = amount(count, "count")?;
    let period_ms = duration_ms(period, "period")?;
    if u128::from(count) > u128::from(period_ms) * 1_000_000 {
        return Err(CommandError::must_be(
            "count",
            "at most 1000000 per millisecond of period",
        ));
    }
    let params = GcraParams {
        burst,
        count,
        period_ms,
    };
    Ok((params, check_options(options, ExtraOption::None)?))
}

/// A signed 64-bit integer, for redis-cell's `CL.THROTTLE` arguments (whose
/// ranges `cl_throttle_args` then checks).
fn integer(arg: &[u8], name: &str) -> Result<i64, CommandError> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| CommandError::must_be(name, "an integer"))
}

/// `CL.THROTTLE key max_burst count period [quantity]`, after the key.
pub fn cl_throttle(args: &[&[u8]]) -> Result<ClThrottleArgs, CommandError> {
    let (max_burst, count, period, quantity) = match args {
        [b, c, p] => (b, c, p, None),
        [b, c, p, q] => (b, c, p, Some(q)),
        _ => return Err(CommandError::Arity),
    };
    cl_throttle_args(
        integer(max_burst, "max_burst")?,
        integer(count, "count")?,
        integer(period, "period")?,
        quantity.map_or(Ok(1), |q| integer(q, "quantity"))?,
    )
}

/// `RL.SLIDINGCOUNTER key limit window [PRECISION n] [COST n] [PEEK]`, after
/// the key. `PRECISION` defaults to 1 (Cloudflare's two-window estimate).
pub fn sliding_counter(
    args: &[&[u8]],
) -> Result<(SlidingCounterParams, CheckOptions), CommandError> {
    let [limit, window, options @ ..] = args else {
        return Err(CommandError::Arity);
    };
    let limit = amount(limit, "limit")?;
    let window_ms = duration_ms(window, "window")?;
    let options = check_options(options, ExtraOption::Precision { max: MAX_PRECISION })?;
    let params = SlidingCounterParams {
        limit,
        window_ms,
        precision: options.precision.unwrap_or(1),
    };
    Ok((params, options))
}

/// One tier of `RL.ALL`: an algorithm and its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tier {
    TokenBucket(TokenBucketParams),
    SlidingCounter(SlidingCounterParams),
    FixedWindow(FixedWindowParams),
    SlidingLog(SlidingLogParams),
    LeakyBucket(LeakyBucketParams),
    Gcra(GcraParams),
}

/// `RL.ALL numkeys key [key ...] <ALGORITHM params> [...] [COST n] [PEEK]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AllArgs {
    /// The tiers, one per key, in key order; the keys are the arguments
    /// right after `numkeys`.
    pub tiers: Vec<Tier>,
    pub options: CheckOptions,
}

const ALGORITHMS: &str =
    "TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW, SLIDINGLOG, LEAKYBUCKET or GCRA";

/// `numkeys` of `RL.ALL`, given everything after the command name: a whole
/// number from 1 to the number of arguments that follow it. Used both to
/// parse and to answer Redis's question of which arguments are keys.
pub fn numkeys(args: &[&[u8]]) -> Result<usize, CommandError> {
    let Some(first) = args.first() else {
        return Err(CommandError::Arity);
    };
    let given = args.len() - 1;
    let n = std::str::from_utf8(first)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| CommandError::must_be("numkeys", "a whole number of at least 1"))?;
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
        let Some((name, after)) = rest.split_first() else {
            return Err(CommandError::syntax(&format!(
                "{n} keys need {n} algorithm specs, {} given",
                tiers.len()
            )));
        };
        let name = name.to_ascii_uppercase();
        let wanted = match &name[..] {
            b"GCRA" => 3,
            b"TOKENBUCKET" | b"SLIDINGCOUNTER" | b"FIXEDWINDOW" | b"SLIDINGLOG"
            | b"LEAKYBUCKET" => 2,
            _ => {
                return Err(CommandError::syntax(&format!(
                    "unknown algorithm '{}' (expected {ALGORITHMS})",
                    shown(&name)
                )))
            }
        };
        // A sliding counter's PRECISION belongs to its own spec.
        let with_precision = name == b"SLIDINGCOUNTER"
            && after
                .get(2)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"PRECISION"));
        if after.len() < wanted {
            return Err(CommandError::syntax(&format!(
                "{} needs {wanted} parameters",
                String::from_utf8_lossy(&name)
            )));
        }
        let take = wanted + if with_precision { 2 } else { 0 };
        if after.len() < take {
            return Err(CommandError::syntax("PRECISION needs a value"));
        }
        let (params, next) = after.split_at(take);
        tiers.push(match &name[..] {
            b"TOKENBUCKET" => Tier::TokenBucket(token_bucket(params)?.0),
            b"SLIDINGCOUNTER" => Tier::SlidingCounter(sliding_counter(params)?.0),
            b"FIXEDWINDOW" => Tier::FixedWindow(fixed_window(params)?.0),
            b"SLIDINGLOG" => Tier::SlidingLog(sliding_log(params)?.0),
            b"LEAKYBUCKET" => Tier::LeakyBucket(leaky_bucket(params)?.0),
            _ => Tier::Gcra(gcra(params)?.0),
        });
        rest = next;
    }
    let options = check_options(rest, ExtraOption::None)?;
    Ok(AllArgs { tiers, options })
}

/// `RL.ACQUIRE key limit lease [ID id]`, after the key: the parameters and
/// the id, when the caller chose one.
pub fn acquire(args: &[&[u8]]) -> Result<(LeaseParams, Option<Vec<u8>>), CommandError> {
    let [limit, lease, options @ ..] = args else {
        return Err(CommandError::Arity);
    };
    let params = LeaseParams {
        limit: amount(limit, "limit")?,
        lease_ms: duration_ms(lease, "lease")?,
    };
    let mut id = None;
    let mut words = options.iter();
    while let Some(word) = words.next() {
        if !word.eq_ignore_ascii_case(b"ID") {
            return Err(CommandError::unknown_option(word));
        }
        if id.is_some() {
            return Err(CommandError::repeated_option("ID"));
        }
        id = Some(lease_id(value_of(words.next(), "ID")?)?);
    }
    Ok((params, id))
}

/// A lease id: 1 to 64 bytes.
pub fn lease_id(id: &[u8]) -> Result<Vec<u8>, CommandError> {
    if (1..=MAX_ID_BYTES).contains(&id.len()) {
        Ok(id.to_vec())
    } else {
        Err(CommandError::must_be("id", "1 to 64 bytes"))
    }
}

/// The options every check command takes after its parameters, plus
/// `PRECISION` where the algorithm has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// How much of the limit this request uses (`COST n`, default 1).
    pub cost: u64,
    /// `PEEK`: answer and change nothing.
    pub peek: bool,
    /// `PRECISION n`, when given.
    pub precision: Option<u16>,
}

/// Which option words a command accepts besides `COST` and `PEEK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraOption {
    None,
    Precision { max: u16 },
}

/// A whole number from 1 to 2^53-1: limits, capacities, costs.
pub fn amount(arg: &[u8], name: &str) -> Result<u64, CommandError> {
    let err = || CommandError::must_be(name, "an integer from 1 to 9007199254740991");
    if arg.is_empty() || arg.len() > 16 || !arg.iter().all(u8::is_ascii_digit) {
        return Err(err());
    }
    let value = arg
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    if (1..=MAX_AMOUNT).contains(&value) {
        Ok(value)
    } else {
        Err(err())
    }
}

/// A whole number in `1..=max`, for small settings such as `PRECISION`.
pub fn small_count(arg: &[u8], name: &str, max: u16) -> Result<u16, CommandError> {
    let err = || CommandError::must_be(name, &format!("an integer from 1 to {max}"));
    let value = amount(arg, name).map_err(|_| err())?;
    match u16::try_from(value) {
        Ok(v) if v <= max => Ok(v),
        _ => Err(err()),
    }
}

/// A plain decimal: digits with at most one decimal point (`1000`, `0.5`,
/// `.25`). No sign, exponent, `inf` or `nan`: what a person would write.
fn decimal(text: &[u8]) -> Option<f64> {
    let digits = text.iter().filter(|b| b.is_ascii_digit()).count();
    let points = text.iter().filter(|&&b| b == b'.').count();
    if digits == 0 || points > 1 || digits + points != text.len() {
        return None;
    }
    if let Some(value) = short_decimal(text) {
        return Some(value);
    }
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    value.is_finite().then_some(value)
}

/// Powers of ten that an `f64` holds exactly.
const EXACT_POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The fast path for the rates people write (`10`, `0.5`, `1000.25`): when
/// the digits, point removed, form an integer below 2^53 and at most 22 of
/// them follow the point, that integer and the power of ten are both exact
/// `f64`s, and one IEEE division rounds correctly — the same value the
/// general parser gives, in a fraction of its time (a check parses its rate
/// on every call). `text` holds only digits and at most one point.
fn short_decimal(text: &[u8]) -> Option<f64> {
    let mut mantissa: u64 = 0;
    let mut after_point: Option<usize> = None;
    for &b in text {
        if b == b'.' {
            after_point = Some(0);
            continue;
        }
        mantissa = mantissa.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        if let Some(n) = after_point.as_mut() {
            *n += 1;
        }
    }
    if mantissa >= 1 << 53 {
        return None;
    }
    let power = EXACT_POWERS_OF_TEN.get(after_point.unwrap_or(0))?;
    Some(mantissa as f64 / power)
}

/// A rate: a finite decimal greater than 0 (per second).
pub fn rate(arg: &[u8], name: &str) -> Result<f64, CommandError> {
    match decimal(arg) {
        Some(v) if v > 0.0 => Ok(v),
        _ => Err(CommandError::must_be(
            name,
            "a number greater than 0, such as 0.5 or 1000",
        )),
    }
}

/// A duration: a decimal with an optional unit `ms`, `s`, `m`, `h` or `d`
/// (seconds when none), from 1 ms to 366 days, rounded to the nearest ms.
pub fn duration_ms(arg: &[u8], name: &str) -> Result<u64, CommandError> {
    let err = || {
        CommandError::must_be(
            name,
            "a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)",
        )
    };
    // Unit suffixes in any case, read in place (no lower-cased copy: a
    // window is parsed on every check).
    let (number, unit_ms) = match arg {
        [n @ .., m, s] if m.eq_ignore_ascii_case(&b'm') && s.eq_ignore_ascii_case(&b's') => {
            (n, 1.0)
        }
        [n @ .., unit] => match unit.to_ascii_lowercase() {
            b's' => (n, 1000.0),
            b'm' => (n, 60_000.0),
            b'h' => (n, 3_600_000.0),
            b'd' => (n, 86_400_000.0),
            _ => (arg, 1000.0),
        },
        [] => (arg, 1000.0),
    };
    let ms = decimal(number).ok_or_else(err)? * unit_ms;
    if ms < 1.0 || ms > MAX_DURATION_MS as f64 {
        return Err(err());
    }
    Ok(ms.round() as u64)
}

/// Parses the option words after a command's parameters: each at most once,
/// in any order, case-insensitive.
pub fn check_options(args: &[&[u8]], extra: ExtraOption) -> Result<CheckOptions, CommandError> {
    let mut options = CheckOptions {
        cost: 1,
        peek: false,
        precision: None,
    };
    let (mut seen_cost, mut seen_peek) = (false, false);
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let upper = word.to_ascii_uppercase();
        match (&upper[..], extra) {
            (b"COST", _) => {
                once(&mut seen_cost, "COST")?;
                options.cost = amount(value_of(words.next(), "COST")?, "COST")?;
            }
            (b"PEEK", _) => {
                once(&mut seen_peek, "PEEK")?;
                options.peek = true;
            }
            (b"PRECISION", ExtraOption::Precision { max }) => {
                if options.precision.is_some() {
                    return Err(CommandError::repeated_option("PRECISION"));
                }
                let value = value_of(words.next(), "PRECISION")?;
                options.precision = Some(small_count(value, "PRECISION", max)?);
            }
            _ => return Err(CommandError::unknown_option(word)),
        }
    }
    Ok(options)
}

fn once(seen: &mut bool, name: &str) -> Result<(), CommandError> {
    if std::mem::replace(seen, true) {
        Err(CommandError::repeated_option(name))
    } else {
        Ok(())
    }
}

fn value_of<'a>(arg: Option<&&'a [u8]>, name: &str) -> Result<&'a [u8], CommandError> {
    arg.copied()
        .ok_or_else(|| CommandError::syntax(&format!("{name} needs a value")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: Result<impl std::fmt::Debug, CommandError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    #[test]
    fn amounts_are_whole_numbers_from_one_to_2_pow_53_minus_1() {
        assert_eq!(amount(b"1", "limit"), Ok(1));
        assert_eq!(amount(b"9007199254740991", "limit"), Ok(MAX_AMOUNT));
        assert_eq!(amount(b"007", "limit"), Ok(7));
        for bad in [
            &b""[..],
            b"0",
            b"-1",
            b"+1",
            b"1.0",
            b"1e3",
            b" 1",
            b"9007199254740992",
            b"99999999999999999999",
        ] {
            assert_eq!(
                text(amount(bad, "limit")),
                "ERR limit must be an integer from 1 to 9007199254740991",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rates_are_plain_positive_decimals() {
        assert_eq!(rate(b"0.5", "rate"), Ok(0.5));
        assert_eq!(rate(b"1000", "rate"), Ok(1000.0));
        assert_eq!(rate(b".25", "rate"), Ok(0.25));
        for bad in [
            &b"0"[..],
            b"0.0",
            b"-1",
            b"nan",
            b"inf",
            b"infinity",
            b"1e3",
            b"1.2.3",
            b".",
            b"",
            b"0x10",
        ] {
            assert!(
                text(rate(bad, "rate")).starts_with("ERR rate must be"),
                "{bad:?}"
            );
        }
        let huge = vec![b'9'; 400];
        assert!(rate(&huge, "rate").is_err(), "overflow to infinity");
    }

    #[test]
    fn durations_take_units_and_default_to_seconds() {
        for (arg, ms) in [
            (&b"60"[..], 60_000),
            (b"1.5s", 1500),
            (b"250ms", 250),
            (b"250MS", 250),
            (b"2m", 120_000),
            (b"1h", 3_600_000),
            (b"1d", 86_400_000),
            (b"366d", 366 * 86_400_000),
            (b"1ms", 1),
            (b"0.001", 1),
            (b"1.6ms", 2),
        ] {
            assert_eq!(duration_ms(arg, "window"), Ok(ms), "{arg:?}");
        }
        for bad in [
            &b"0"[..],
            b"0.5ms",
            b"0.0001",
            b"367d",
            b"10x",
            b"ms",
            b"-1s",
            b"1 s",
            b"nan",
            b"infs",
            b"1e3",
            b"",
        ] {
            assert!(
                text(duration_ms(bad, "window")).starts_with("ERR window must be a duration"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn options_come_in_any_order_and_any_case_once_each() {
        let none = ExtraOption::None;
        assert_eq!(
            check_options(&[b"peek", b"Cost", b"5"], none),
            Ok(CheckOptions {
                cost: 5,
                peek: true,
                precision: None
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
            assert_eq!(text(check_options(args, none)), expected, "{args:?}");
        }
    }

    #[test]
    fn parameters_come_before_options_and_are_all_required() {
        assert_eq!(token_bucket(&[b"10"]), Err(CommandError::Arity));
        assert_eq!(
            token_bucket(&[b"10", b"0.5", b"PEEK"]).map(|(p, o)| (
                p.capacity,
                p.rate_per_s,
                o.peek
            )),
            Ok((10, 0.5, true))
        );
        assert_eq!(
            text(token_bucket(&[b"PEEK", b"10", b"1"])),
            "ERR capacity must be an integer from 1 to 9007199254740991"
        );
        assert_eq!(
            sliding_counter(&[b"100", b"1m", b"precision", b"60"]).map(|(p, _)| p),
            Ok(SlidingCounterParams {
                limit: 100,
                window_ms: 60_000,
                precision: 60
            })
        );
        assert_eq!(
            sliding_counter(&[b"100", b"1m"]).map(|(p, _)| p.precision),
            Ok(1)
        );
    }

    #[test]
    fn gcra_takes_a_zero_burst_and_bounds_the_rate() {
        assert_eq!(gcra(&[b"0", b"10", b"1s"]).map(|(p, _)| p.burst), Ok(0));
        assert!(text(gcra(&[b"-1", b"10", b"1s"])).starts_with("ERR burst must be"));
        assert!(text(gcra(&[b"1", b"1000001", b"1ms"])).starts_with("ERR count must be"));
        assert_eq!(gcra(&[b"1", b"10"]).map(|_| ()), Err(CommandError::Arity));
    }

    #[test]
    fn cl_throttle_takes_redis_cell_integers_and_refuses_bad_ones() {
        let a = cl_throttle(&[b"4", b"10", b"60"]).map(|a| (a.params.burst, a.cost));
        assert_eq!(a, Ok((4, 1)));
        assert!(
            matches!(cl_throttle(&[b"4", b"10", b"60", b"0"]), Ok(a) if a.mode == crate::algorithms::Mode::Peek)
        );
        for (args, want) in [
            (&[&b"4"[..], b"0", b"60"][..], "ERR count must be"),
            (&[b"4", b"10", b"0"], "ERR period must be"),
            (&[b"-1", b"10", b"60"], "ERR max_burst must be"),
            (&[b"4", b"10", b"60", b"-1"], "ERR quantity must be"),
            (&[b"4", b"10", b"1.5"], "ERR period must be an integer"),
            (&[b"x", b"10", b"60"], "ERR max_burst must be an integer"),
        ] {
            assert!(text(cl_throttle(args)).starts_with(want), "{args:?}");
        }
        assert_eq!(
            cl_throttle(&[b"1", b"2"]).map(|_| ()),
            Err(CommandError::Arity)
        );
        assert_eq!(
            cl_throttle(&[b"1", b"2", b"3", b"4", b"5"]).map(|_| ()),
            Err(CommandError::Arity)
        );
    }

    #[test]
    fn precision_is_bounded_where_accepted() {
        let p = ExtraOption::Precision { max: 1000 };
        assert_eq!(
            check_options(&[b"PRECISION", b"60"], p).map(|o| o.precision),
            Ok(Some(60))
        );
        assert_eq!(
            text(check_options(&[b"precision", b"1001"], p)),
            "ERR PRECISION must be an integer from 1 to 1000"
        );
        assert_eq!(
            text(check_options(&[b"PRECISION", b"2", b"PRECISION", b"2"], p)),
            "ERR syntax error: PRECISION given more than once"
        );
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
        for bad in ["0", "-1", "+1", "1.0", "", "99999999999999999999999"] {
            assert_eq!(
                n(&[bad, "a"]),
                "ERR numkeys must be a whole number of at least 1",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn all_refuses_missing_unknown_and_extra_specs_and_repeated_keys() {
        let cases: &[(&[&str], &str)] = &[
            (&["2", "a", "b", "FIXEDWINDOW", "1", "1"], "ERR syntax error: 2 keys need 2 algorithm specs, 1 given"),
            (&["1", "a", "LUA", "1", "1"], "ERR syntax error: unknown algorithm 'LUA' (expected TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW, SLIDINGLOG, LEAKYBUCKET or GCRA)"),
            (&["1", "a", "SLIDINGLOG", "1"], "ERR syntax error: SLIDINGLOG needs 2 parameters"),
            (&["1", "a", "SLIDINGLOG", "1", "1", "SLIDINGLOG", "1", "1"], "ERR syntax error: unknown option 'SLIDINGLOG'"),
            (&["2", "k", "k", "SLIDINGLOG", "1", "1", "SLIDINGLOG", "1", "1"], "ERR syntax error: key 'k' is given more than once"),
            (&["1", "a", "SLIDINGCOUNTER", "1", "1", "PRECISION"], "ERR syntax error: PRECISION needs a value"),
            (&["1", "a", "SLIDINGCOUNTER", "1", "1", "PRECISION", "0"], "ERR PRECISION must be an integer from 1 to 1000"),
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
                "ERR syntax error: unknown algorithm 'TOKENBUCKET??19' (expected TOKENBUCKET, \
                 SLIDINGCOUNTER, FIXEDWINDOW, SLIDINGLOG, LEAKYBUCKET or GCRA)"
                    .to_string(),
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

    #[test]
    fn acquire_takes_limit_lease_and_an_optional_id() {
        let a = |words: &[&str]| {
            let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            text(acquire(&args))
        };
        assert_eq!(
            a(&["3", "30s"]),
            "ok (LeaseParams { limit: 3, lease_ms: 30000 }, None)"
        );
        assert_eq!(
            a(&["3", "250ms", "id", "w"]),
            "ok (LeaseParams { limit: 3, lease_ms: 250 }, Some([119]))"
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

    #[test]
    fn the_fast_decimal_path_gives_the_general_parsers_value() {
        for text in [
            "0.1",
            "0.5",
            "1",
            "10",
            "1000",
            "0.001",
            "123.456",
            "0.3",
            "9007199254740991",
            "9007199254740992",
            "1.",
            ".5",
            "0.0000000000000000000001",
            "00.10",
            "3.141592653589793",
        ] {
            let general: f64 = text.parse().unwrap();
            assert_eq!(decimal(text.as_bytes()), Some(general), "{text}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_plain_decimal_parses_to_the_general_parsers_value(
            int in "[0-9]{1,17}", frac in proptest::option::of("[0-9]{0,24}")
        ) {
            let text = match &frac {
                Some(f) => format!("{int}.{f}"),
                None => int.clone(),
            };
            let general: f64 = text.parse().unwrap();
            proptest::prop_assert_eq!(decimal(text.as_bytes()), Some(general));
        }
    }
}
