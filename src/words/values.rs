//! The values a command's words hold: amounts, rates, durations with units.
//! Every failure is a [`CommandError`] naming the parameter and what it
//! accepts.

use crate::error::CommandError;

/// The largest limit, capacity or cost accepted: 2^53 - 1, the largest integer
/// every client language (including JavaScript and Lua) represents exactly.
pub const MAX_AMOUNT: u64 = (1 << 53) - 1;

/// The longest window or period (366 days), which states are held to too.
pub use crate::encoding::MAX_DURATION_MS;

/// A whole number from 1 to 2^53-1: limits, capacities, costs. Written in
/// any decimal form whose value is whole ([`whole_number`]): `1000`,
/// `1000.0`, `1e3`.
#[inline]
pub fn amount(arg: &[u8], name: &str) -> Result<u64, CommandError> {
    // The plain form, read in place: a limit is parsed on every check. Any
    // other word, or one out of range, takes the whole reading (which
    // reads a plain one again, to the same value, and refuses it).
    match plain_amount(arg) {
        Some(value) => Ok(value),
        None => amount_in_any_form(arg, name),
    }
}

/// [`amount`] of a word in the plain form (up to 16 digits, nothing else)
/// and in range; `None` for any other word, which [`amount`] reads in
/// full. For parsers that read their words' plain forms first and all of
/// them in full only when one is not (so their common path calls nothing).
#[inline(always)]
pub fn plain_amount(arg: &[u8]) -> Option<u64> {
    plain_digits(arg, 16).filter(|value| (1..=MAX_AMOUNT).contains(value))
}

/// [`amount`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn amount_in_any_form(arg: &[u8], name: &str) -> Result<u64, CommandError> {
    let err = || CommandError::must_be(name, "an integer from 1 to 9007199254740991");
    if let Some(value) = plain_digits(arg, 16) {
        return if (1..=MAX_AMOUNT).contains(&value) {
            Ok(value)
        } else {
            Err(err())
        };
    }
    match whole_number(arg) {
        Ok(Some(value)) if (1..=MAX_AMOUNT as i64).contains(&value) => Ok(value as u64),
        Err(NotANumber::NotFinite) => Err(not_finite(name, arg)),
        _ => Err(err()),
    }
}

/// The value of `text` when it is 1 to `max_len` decimal digits and nothing
/// else (`max_len` at most 19, so the value fits): the plain form of the
/// numbers a check parses on every call, read in one pass that stops at
/// the first other byte.
#[inline(always)]
fn plain_digits(text: &[u8], max_len: usize) -> Option<u64> {
    // The words of one to three digits (a limit of `100`, the `1` of
    // `1h`), read without a loop: a digit each, the same value.
    let digit = |byte: u8| {
        let digit = byte.wrapping_sub(b'0');
        (digit <= 9).then_some(u64::from(digit))
    };
    if max_len >= 3 {
        match *text {
            [a] => return digit(a),
            [a, b] => return Some(digit(a)? * 10 + digit(b)?),
            [a, b, c] => return Some(digit(a)? * 100 + digit(b)? * 10 + digit(c)?),
            _ => {}
        }
    }
    if text.is_empty() || text.len() > max_len.min(19) {
        return None;
    }
    let mut value = 0u64;
    for &byte in text {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    Some(value)
}

/// A whole number in `1..=max`, for small settings such as `PRECISION`.
pub fn small_count(arg: &[u8], name: &str, max: u16) -> Result<u16, CommandError> {
    let err = || CommandError::must_be(name, &format!("an integer from 1 to {max}"));
    let value = match amount(arg, name) {
        Ok(value) => value,
        Err(e) if is_not_finite(arg) => return Err(e),
        Err(_) => return Err(err()),
    };
    match u16::try_from(value) {
        Ok(v) if v <= max => Ok(v),
        _ => Err(err()),
    }
}

/// A whole number in `min..=max` in any decimal form ([`whole_number`]);
/// refused as `ERR <name> must be <accepted>`, or as not finite.
#[inline]
pub fn whole_in(
    arg: &[u8],
    name: &str,
    range: std::ops::RangeInclusive<i64>,
    accepted: &str,
) -> Result<i64, CommandError> {
    // The plain form (`99`, `-3`), read in place: GCRA's burst and
    // `CL.THROTTLE`'s numbers are parsed on every check. Any other word,
    // or one out of range, takes the whole reading.
    match plain_whole_in(arg, &range) {
        Some(value) => Ok(value),
        None => whole_in_any_form(arg, name, range, accepted),
    }
}

/// [`whole_in`] of a word in the plain form (an optional `-` and up to 18
/// digits) and in `range`; `None` for any other word (see
/// [`plain_amount`]).
#[inline(always)]
pub fn plain_whole_in(arg: &[u8], range: &std::ops::RangeInclusive<i64>) -> Option<i64> {
    plain_whole(arg).filter(|value| range.contains(value))
}

/// [`whole_in`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn whole_in_any_form(
    arg: &[u8],
    name: &str,
    range: std::ops::RangeInclusive<i64>,
    accepted: &str,
) -> Result<i64, CommandError> {
    match whole_number(arg) {
        Ok(Some(value)) if range.contains(&value) => Ok(value),
        Err(NotANumber::NotFinite) => Err(not_finite(name, arg)),
        _ => Err(CommandError::must_be(name, accepted)),
    }
}

/// Why a word is not a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotANumber {
    /// Not a decimal number at all (`abc`, `1.2.3`, `0x10`, ` 1`).
    Malformed,
    /// `inf`, `infinity` or `nan` (any case, any sign), or a decimal too
    /// large for a double (`1e400`).
    NotFinite,
}

/// The refusal of `inf`, `nan` and the like for parameter `name`.
fn not_finite(name: &str, arg: &[u8]) -> CommandError {
    CommandError::must_be(
        name,
        &format!("a finite number, not '{}'", crate::error::shown(arg)),
    )
}

/// Whether `text` names a number that is not finite: `inf`, `infinity`,
/// `nan`, with an optional sign, in any case.
fn is_not_finite(text: &[u8]) -> bool {
    let unsigned = match text {
        [b'+' | b'-', rest @ ..] => rest,
        _ => text,
    };
    [&b"inf"[..], b"infinity", b"nan"]
        .iter()
        .any(|word| unsigned.eq_ignore_ascii_case(word))
}

/// A decimal number as written: `[+|-] digits [. digits] [(e|E) [+|-] digits]`,
/// with at least one digit before the exponent (`1`, `1.`, `.5`, `1e3`,
/// `1.1574074074074073e-05`, `+2E2`). These are the decimal forms Redis
/// reads for a double (`INCRBYFLOAT`); like Redis, no space around it. Unlike
/// `strtod`, no hexadecimal (`0x1p3`), and `inf`/`nan` are refused by name.
struct Written<'a> {
    negative: bool,
    /// The digits before the point, then those after it.
    integer: &'a [u8],
    fraction: &'a [u8],
    /// The exponent, saturated far beyond any double's.
    exponent: i64,
}

fn written(text: &[u8]) -> Result<Written<'_>, NotANumber> {
    if is_not_finite(text) {
        return Err(NotANumber::NotFinite);
    }
    let (negative, rest) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    let digits = |t: &[u8]| t.iter().take_while(|b| b.is_ascii_digit()).count();
    let n = digits(rest);
    let (integer, rest) = rest.split_at(n);
    let (fraction, rest) = match rest {
        [b'.', after @ ..] => {
            let n = digits(after);
            after.split_at(n)
        }
        _ => (&b""[..], rest),
    };
    if integer.is_empty() && fraction.is_empty() {
        return Err(NotANumber::Malformed);
    }
    let exponent = match rest {
        [] => 0,
        [b'e' | b'E', after @ ..] => {
            let (negative, digits) = match after {
                [b'-', d @ ..] => (true, d),
                [b'+', d @ ..] => (false, d),
                _ => (false, after),
            };
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(NotANumber::Malformed);
            }
            let magnitude = digits.iter().fold(0i64, |acc, d| {
                (acc * 10 + i64::from(d - b'0')).min(1_000_000_000)
            });
            if negative {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return Err(NotANumber::Malformed),
    };
    Ok(Written {
        negative,
        integer,
        fraction,
        exponent,
    })
}

/// A number in any decimal form [`Written`] takes, as the nearest double,
/// if finite. Plain decimals take the fast path of [`decimal`].
pub fn number(text: &[u8]) -> Result<f64, NotANumber> {
    if let Some(value) = decimal(text) {
        return Ok(value);
    }
    written(text)?;
    let value: f64 = std::str::from_utf8(text)
        .map_err(|_| NotANumber::Malformed)?
        .parse()
        .map_err(|_| NotANumber::Malformed)?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(NotANumber::NotFinite)
    }
}

/// A whole number in any decimal form [`Written`] takes (`5`, `-5`, `5.0`,
/// `5e0`, `0.5e1`, `1E3`), exactly: `Some` when its value is a whole number
/// in the range of `i64`, `None` when it has a fraction (`1.5`,
/// `9007199254740991.4`) or is out of that range. Read digit by digit, not
/// through a double, so no fraction is rounded away.
pub fn whole_number(text: &[u8]) -> Result<Option<i64>, NotANumber> {
    if let Some(value) = plain_whole(text) {
        return Ok(Some(value));
    }
    let w = written(text)?;
    // The digits, and where the point falls among them after the exponent.
    let digits = || w.integer.iter().chain(w.fraction);
    let count = (w.integer.len() + w.fraction.len()) as i64;
    let point = w.integer.len() as i64 + w.exponent;
    // Everything after the point must be zeros.
    if digits()
        .skip(point.clamp(0, count) as usize)
        .any(|&d| d != b'0')
    {
        return Ok(None);
    }
    let mut value: i64 = 0;
    for &d in digits().take(point.clamp(0, count) as usize) {
        let Some(v) = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i64::from(d - b'0')))
        else {
            return Ok(None);
        };
        value = v;
    }
    // Zeros the exponent adds after the last digit.
    for _ in count..point.max(count) {
        if value == 0 {
            break;
        }
        let Some(v) = value.checked_mul(10) else {
            return Ok(None);
        };
        value = v;
    }
    Ok(Some(if w.negative { -value } else { value }))
}

/// The value of a plain whole number: an optional `-`, then 1 to 18
/// decimal digits (so below 10^18, within `i64`) and nothing else; the
/// form [`whole_number`] reads first, in place.
#[inline(always)]
fn plain_whole(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    let value = plain_digits(digits, 18)? as i64;
    Some(if negative { -value } else { value })
}

/// A plain decimal: digits with at most one decimal point (`1000`, `0.5`,
/// `.25`): the form people write, read by a fast path; [`number`] reads the
/// others (signs, exponents).
///
/// One pass reads and checks it, and the rates people write (`10`, `0.5`,
/// `1000.25`) take the fast path: when the digits, point removed, form an
/// integer below 2^53 and at most 22 of them follow the point, that integer
/// and the power of ten are both exact `f64`s, and one IEEE division rounds
/// correctly — the same value the general parser gives, in a fraction of its
/// time (a check parses its rate on every call).
pub(crate) fn decimal(text: &[u8]) -> Option<f64> {
    if text.len() <= 15 {
        return short_decimal(text);
    }
    let mut mantissa: u64 = 0;
    // Whether `mantissa` still holds every digit (no overflow).
    let mut exact = true;
    let mut digits = 0usize;
    let mut after_point: Option<usize> = None;
    for &b in text {
        match b {
            b'0'..=b'9' => {
                digits += 1;
                match mantissa
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(u64::from(b - b'0')))
                {
                    Some(m) if exact => mantissa = m,
                    _ => exact = false,
                }
                if let Some(n) = after_point.as_mut() {
                    *n += 1;
                }
            }
            b'.' if after_point.is_none() => after_point = Some(0),
            _ => return None,
        }
    }
    if digits == 0 {
        return None;
    }
    if exact && mantissa < 1 << 53 {
        if let Some(power) = EXACT_POWERS_OF_TEN.get(after_point.unwrap_or(0)) {
            return Some(mantissa as f64 / power);
        }
    }
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    value.is_finite().then_some(value)
}

/// [`decimal`] of a word of at most 15 bytes (`None` when longer): up to
/// 15 bytes, the digits fit below 10^15 < 2^53 whatever they are, so they
/// are read without overflow checks, to the value of the longer reading.
/// The form of the rates a check parses on every call (`0.01`, `10`).
#[inline(always)]
fn short_decimal(text: &[u8]) -> Option<f64> {
    short_decimal_parts(text).map(|(mantissa, power)| mantissa as i64 as f64 / power)
}

/// [`short_decimal`] before its one division: the digits, point removed,
/// below 10^15 (so `as i64 as f64` is the exact `as f64`, in one
/// instruction instead of an unsigned conversion's five), and the power of
/// ten to divide them by (at most 10^14).
#[inline(always)]
fn short_decimal_parts(text: &[u8]) -> Option<(u64, f64)> {
    if text.len() > 15 {
        return None;
    }
    // The digits before the point, then those after it: two plain loops,
    // no state carried from byte to byte but the value.
    let mut mantissa: u64 = 0;
    let mut rest = text;
    while let [byte, after @ ..] = rest {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        mantissa = mantissa * 10 + u64::from(digit);
        rest = after;
    }
    let after_point = match rest {
        [] => 0,
        [b'.', fraction @ ..] => {
            for &byte in fraction {
                let digit = byte.wrapping_sub(b'0');
                if digit > 9 {
                    return None;
                }
                mantissa = mantissa * 10 + u64::from(digit);
            }
            // No digit at all (`.`, or nothing): not a number.
            if text.len() == 1 {
                return None;
            }
            fraction.len()
        }
        _ => return None,
    };
    if text.is_empty() {
        return None;
    }
    EXACT_POWERS_OF_TEN
        .get(after_point)
        .map(|&power| (mantissa, power))
}

/// Powers of ten that an `f64` holds exactly.
const EXACT_POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Whether `per_s` is a rate a command takes: finite, greater than 0, and
/// not subnormal (below 2.2e-308, where a float keeps fewer digits and a
/// refill takes longer than any state can say). The parser and every
/// state's decoder ask this one question.
pub fn is_rate(per_s: f64) -> bool {
    per_s.is_normal() && per_s > 0.0
}

/// A rate as a word [`rate`] reads back to the same value: the plain
/// decimal form (`0.5`, `1000`) while it is short, the exponent form
/// (`1e308`, `2.5e-300`) when the plain one would run past 24 characters,
/// as a rate of `1e308` did (309 digits in `RL.POLICY GET`). Both are the
/// shortest digits that read back exactly.
pub fn rate_word(per_s: f64) -> String {
    let plain = per_s.to_string();
    if plain.len() <= 24 {
        plain
    } else {
        format!("{per_s:e}")
    }
}

/// A rate: a number that [`is_rate`] (per second), in any decimal form
/// ([`number`]).
#[inline]
pub fn rate(arg: &[u8], name: &str) -> Result<f64, CommandError> {
    // A short plain decimal (`0.01`, `10`), read in place: a rate is parsed
    // on every check. Any other word, or a value that is no rate, takes
    // the whole reading (the same value, from the same fast path).
    match plain_rate(arg) {
        Some(value) => Ok(value),
        None => rate_in_any_form(arg, name),
    }
}

/// [`rate`] of a short plain decimal (up to 15 bytes of digits and at most
/// one point) that is a rate; `None` for any other word (see
/// [`plain_amount`]).
#[inline(always)]
pub fn plain_rate(arg: &[u8]) -> Option<f64> {
    // [`is_rate`] of the short decimal without asking it of the double:
    // digits below 10^15 over at most 10^14 are 0 or from 1e-14 to below
    // 1e15, normal and finite, so the value is a rate exactly when the
    // digits are not all zeros.
    short_decimal_parts(arg)
        .filter(|&(mantissa, _)| mantissa != 0)
        .map(|(mantissa, power)| mantissa as i64 as f64 / power)
}

/// [`rate`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn rate_in_any_form(arg: &[u8], name: &str) -> Result<f64, CommandError> {
    match number(arg) {
        Ok(v) if is_rate(v) => Ok(v),
        Err(NotANumber::NotFinite) => Err(not_finite(name, arg)),
        _ => Err(CommandError::must_be(
            name,
            "a number greater than 0, such as 0.5, 1000 or 1e-5",
        )),
    }
}

/// A duration: a number in any decimal form ([`number`]) with an optional
/// unit `ms`, `s`, `m`, `h` or `d` (seconds when none), from 1 ms to 366
/// days, rounded to the nearest ms.
#[inline]
pub fn duration_ms(arg: &[u8], name: &str) -> Result<u64, CommandError> {
    // Plain digits with or without a unit (`60`, `1h`, `500ms`), read in
    // place: a window is parsed on every check. Any other word, or a
    // duration out of range, takes the whole reading (the same value for
    // plain digits, see below).
    match plain_duration_ms(arg) {
        Some(ms) => Ok(ms),
        None => duration_ms_in_any_form(arg, name),
    }
}

/// A duration's unit suffix, in any case (`ms`, `s`, `m`, `h`, `d`): the
/// number before it and the unit in ms; seconds when there is none.
#[inline(always)]
fn unit_of(arg: &[u8]) -> (&[u8], u64) {
    // The last byte read once; a letter's either case by setting its 0x20
    // bit (of every byte, only `S` and `s` give `s`, and so on), which
    // leaves digits, the common last byte, to the last arm.
    let Some((&unit, n)) = arg.split_last() else {
        return (arg, 1000);
    };
    match unit | 0x20 {
        b's' => match n.split_last() {
            Some((&m, number)) if m | 0x20 == b'm' => (number, 1),
            _ => (n, 1000),
        },
        b'm' => (n, 60_000),
        b'h' => (n, 3_600_000),
        b'd' => (n, 86_400_000),
        _ => (arg, 1000),
    }
}

/// [`duration_ms`] of plain digits (up to 15) and an optional unit, when
/// in range (1 ms to 366 days); `None` for any other word (see
/// [`plain_amount`]).
#[inline(always)]
pub fn plain_duration_ms(arg: &[u8]) -> Option<u64> {
    let (number, unit_ms) = unit_of(arg);
    plain_digits(number, 15)?
        .checked_mul(unit_ms)
        .filter(|ms| (1..=MAX_DURATION_MS).contains(ms))
}

/// [`duration_ms`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn duration_ms_in_any_form(arg: &[u8], name: &str) -> Result<u64, CommandError> {
    let err = || {
        CommandError::must_be(
            name,
            "a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)",
        )
    };
    // Unit suffixes in any case, read in place (no lower-cased copy).
    let (number, unit_ms) = unit_of(arg);
    // Plain digits (`60`, `1h`, `500ms`), in integers: the same value the
    // decimal reading below gives them (it is exact for whole numbers of
    // up to 15 digits), without a double's division and rounding.
    if let Some(value) = plain_digits(number, 15) {
        return match value.checked_mul(unit_ms) {
            Some(ms) if (1..=MAX_DURATION_MS).contains(&ms) => Ok(ms),
            _ => Err(err()),
        };
    }
    let ms = match self::number(number) {
        Ok(value) => value * unit_ms as f64,
        Err(NotANumber::NotFinite) => return Err(not_finite(name, number)),
        Err(NotANumber::Malformed) => return Err(err()),
    };
    if !(1.0..=MAX_DURATION_MS as f64).contains(&ms) {
        return Err(err());
    }
    Ok(ms.round() as u64)
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
            b"1.5",
            b"1e-3",
            b" 1",
            b"1 ",
            b"0x10",
            b"9.007199254740992e15",
            b"9007199254740991.4",
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
    /// Issue 31: every decimal form a client's float formatting writes, as
    /// Redis reads it for `INCRBYFLOAT`, is a number; whole ones are
    /// amounts too.
    #[test]
    fn numbers_in_every_decimal_form_clients_write_are_read() {
        let smallest = f64::MIN_POSITIVE;
        for (text, value) in [
            ("1e3", 1000.0),
            ("1E2", 100.0),
            ("1e-6", 1e-6),
            ("1e+3", 1000.0),
            ("+1000", 1000.0),
            ("1.5e1", 15.0),
            (".5e1", 5.0),
            ("5.e-1", 0.5),
            ("1.1574074074074073e-05", 1.0 / 86400.0),
            ("2.2250738585072014e-308", smallest),
            ("0.00001", 1e-5),
            ("1000.0", 1000.0),
        ] {
            assert_eq!(number(text.as_bytes()), Ok(value), "{text}");
            assert_eq!(rate(text.as_bytes(), "rate"), Ok(value), "{text}");
        }
        for (text, whole) in [
            ("1e3", 1000),
            ("1E2", 100),
            ("1000.0", 1000),
            ("1.5e1", 15),
            ("+7", 7),
            ("0.01e3", 10),
            ("9.007199254740991e15", MAX_AMOUNT),
            ("90071992547409910e-1", MAX_AMOUNT),
        ] {
            assert_eq!(amount(text.as_bytes(), "limit"), Ok(whole), "{text}");
        }
        assert_eq!(whole_number(b"-5e0"), Ok(Some(-5)));
        assert_eq!(whole_number(b"0e999999999999"), Ok(Some(0)));
        assert_eq!(whole_number(b"1e999999999999"), Ok(None));
        assert_eq!(whole_number(b"1e-999999999999"), Ok(None));
        assert_eq!(whole_number(b"9223372036854775807"), Ok(Some(i64::MAX)));
        assert_eq!(whole_number(b"9223372036854775808"), Ok(None));
        assert_eq!(
            duration_ms(b"1e3ms", "window"),
            Ok(1000),
            "an exponent before a unit"
        );
        assert_eq!(duration_ms(b"1.5e1", "window"), Ok(15_000));
        assert_eq!(duration_ms(b"6E1m", "window"), Ok(3_600_000));
    }
    /// Issue 31: `inf` and `nan` are refused saying why, for every kind of
    /// number.
    #[test]
    fn inf_and_nan_are_refused_as_not_finite() {
        for word in ["inf", "-inf", "+INF", "Infinity", "nan", "NaN", "-nan"] {
            let w = word.as_bytes();
            let not = format!("a finite number, not '{word}'");
            assert_eq!(text(rate(w, "rate")), format!("ERR rate must be {not}"));
            assert_eq!(text(amount(w, "limit")), format!("ERR limit must be {not}"));
            assert_eq!(
                text(duration_ms(w, "window")),
                format!("ERR window must be {not}")
            );
            assert_eq!(
                text(small_count(w, "PRECISION", 1000)),
                format!("ERR PRECISION must be {not}")
            );
        }
        // Too large for a double: not finite to a rate; to an amount, out of
        // its range.
        assert_eq!(
            text(rate(b"1e400", "rate")),
            "ERR rate must be a finite number, not '1e400'"
        );
        assert!(text(amount(b"1e400", "limit")).ends_with("from 1 to 9007199254740991"));
        assert_eq!(
            text(duration_ms(b"infs", "window")),
            "ERR window must be a finite number, not 'inf'"
        );
    }
    #[test]
    fn rates_are_positive_decimals() {
        assert_eq!(rate(b"0.5", "rate"), Ok(0.5));
        assert_eq!(rate(b"1000", "rate"), Ok(1000.0));
        assert_eq!(rate(b".25", "rate"), Ok(0.25));
        for bad in [
            &b"0"[..],
            b"0.0",
            b"0e5",
            b"-1",
            b"-1e3",
            b"1e-400",
            b"1.2.3",
            b".",
            b"",
            b"e3",
            b"1e",
            b"1e+",
            b"1e3.5",
            b"1ee3",
            b" 1e3",
            b"1e3 ",
            b"0x10",
            b"0x1p3",
            b"1_000",
        ] {
            assert!(
                text(rate(bad, "rate")).starts_with("ERR rate must be"),
                "{bad:?}"
            );
        }
        let huge = vec![b'9'; 400];
        assert!(rate(&huge, "rate").is_err(), "overflow to infinity");
        let subnormal = b"1.0996080332984074e-308";
        assert!(
            rate(subnormal, "rate").is_err(),
            "subnormal, in exponent form"
        );
        // Regression (issue 20): 1.0996e-308 a second, a subnormal float,
        // was a rate, and its key's expiry passed 2^53 ms.
        let subnormal = format!("0.{}10996080332984074", "0".repeat(307));
        assert!(rate(subnormal.as_bytes(), "rate").is_err(), "subnormal");
        let smallest = format!("0.{}22250738585072014", "0".repeat(307));
        assert_eq!(rate(smallest.as_bytes(), "rate"), Ok(f64::MIN_POSITIVE));
    }
    #[test]
    fn a_duration_in_plain_digits_reads_as_its_decimal_form_does() {
        // Plain digits take a path of their own (integers); the same value
        // written with a fraction takes the decimal one: both must agree,
        // on values, on the range's edges and beyond them.
        for digits in [
            "0",
            "1",
            "7",
            "60",
            "999",
            "31622400",
            "31622401",
            "527040",
            "8784",
            "366",
            "367",
            "000000000000001",
            "999999999999999",
            "9999999999999999",
        ] {
            for unit in ["", "ms", "s", "m", "h", "d", "MS", "H"] {
                let plain = format!("{digits}{unit}");
                let decimal = format!("{digits}.0{unit}");
                assert_eq!(
                    text(duration_ms(plain.as_bytes(), "window")),
                    text(duration_ms(decimal.as_bytes(), "window")),
                    "{plain}"
                );
            }
        }
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
            b"1e3x",
            b"1e-4",
            b"",
        ] {
            assert!(
                text(duration_ms(bad, "window")).starts_with("ERR window must be a duration"),
                "{bad:?}"
            );
        }
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
    #[test]
    fn the_fast_decimal_path_leaves_every_other_form_to_the_general_reading() {
        for text in [
            "",
            ".",
            "..",
            "1.2.3",
            "1..",
            "-1",
            "+1",
            "1e3",
            "1E3",
            " 1",
            "1 ",
            "0x10",
            "inf",
            "nan",
            "1,5",
            "1.5.",
            "12345678901234.5.",
        ] {
            assert_eq!(decimal(text.as_bytes()), None, "{text:?}");
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

#[cfg(test)]
mod rate_word_tests {
    use super::{rate, rate_word};

    #[test]
    fn a_rate_word_is_short_and_reads_back_exactly() {
        for (value, word) in [
            (0.5, "0.5"),
            (1000.0, "1000"),
            (0.0000001, "0.0000001"),
            (1e308, "1e308"),
            (1e-300, "1e-300"),
            (2.5e-30, "2.5e-30"),
            (f64::MAX, "1.7976931348623157e308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
        ] {
            assert_eq!(rate_word(value), word);
            assert_eq!(
                rate(word.as_bytes(), "rate").unwrap().to_bits(),
                value.to_bits()
            );
        }
    }
}

/// The readers as they were before their fast paths were split out (issue
/// 29): the oracle the property tests below hold the readers to, word for
/// word, accepted value and refusal text alike.
#[cfg(test)]
mod before {
    use super::{not_finite, written, NotANumber, EXACT_POWERS_OF_TEN, MAX_AMOUNT};
    use crate::error::CommandError;
    use crate::words::values::MAX_DURATION_MS;

    fn plain_digits(text: &[u8], max_len: usize) -> Option<u64> {
        if text.is_empty() || text.len() > max_len.min(19) {
            return None;
        }
        let mut value = 0u64;
        for &byte in text {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            value = value * 10 + u64::from(digit);
        }
        Some(value)
    }

    pub fn amount(arg: &[u8], name: &str) -> Result<u64, CommandError> {
        let err = || CommandError::must_be(name, "an integer from 1 to 9007199254740991");
        if let Some(value) = plain_digits(arg, 16) {
            return if (1..=MAX_AMOUNT).contains(&value) {
                Ok(value)
            } else {
                Err(err())
            };
        }
        match whole_number(arg) {
            Ok(Some(value)) if (1..=MAX_AMOUNT as i64).contains(&value) => Ok(value as u64),
            Err(NotANumber::NotFinite) => Err(not_finite(name, arg)),
            _ => Err(err()),
        }
    }

    pub fn whole_in(
        arg: &[u8],
        name: &str,
        range: std::ops::RangeInclusive<i64>,
        accepted: &str,
    ) -> Result<i64, CommandError> {
        match whole_number(arg) {
            Ok(Some(value)) if range.contains(&value) => Ok(value),
            Err(NotANumber::NotFinite) => Err(not_finite(name, arg)),
            _ => Err(CommandError::must_be(name, accepted)),
        }
    }

    pub fn number(text: &[u8]) -> Result<f64, NotANumber> {
        if let Some(value) = decimal(text) {
            return Ok(value);
        }
        written(text)?;
        let value: f64 = std::str::from_utf8(text)
            .map_err(|_| NotANumber::Malformed)?
            .parse()
            .map_err(|_| NotANumber::Malformed)?;
        if value.is_finite() {
            Ok(value)
        } else {
            Err(NotANumber::NotFinite)
        }
    }

    pub fn whole_number(text: &[u8]) -> Result<Option<i64>, NotANumber> {
        let (negative, digits) = match text {
            [b'-', rest @ ..] => (true, rest),
            _ => (false, text),
        };
        if let Some(value) = plain_digits(digits, 18) {
            let value = value as i64;
            return Ok(Some(if negative { -value } else { value }));
        }
        let w = written(text)?;
        let digits = || w.integer.iter().chain(w.fraction);
        let count = (w.integer.len() + w.fraction.len()) as i64;
        let point = w.integer.len() as i64 + w.exponent;
        if digits()
            .skip(point.clamp(0, count) as usize)
            .any(|&d| d != b'0')
        {
            return Ok(None);
        }
        let mut value: i64 = 0;
        for &d in digits().take(point.clamp(0, count) as usize) {
            let Some(v) = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(i64::from(d - b'0')))
            else {
                return Ok(None);
            };
            value = v;
        }
        for _ in count..point.max(count) {
            if value == 0 {
                break;
            }
            let Some(v) = value.checked_mul(10) else {
                return Ok(None);
            };
            value = v;
        }
        Ok(Some(if w.negative { -value } else { value }))
    }

    pub fn decimal(text: &[u8]) -> Option<f64> {
        if text.len() <= 15 {
            let mut mantissa: u64 = 0;
            let mut digits = 0usize;
            let mut point_at: Option<usize> = None;
            for &b in text {
                let digit = b.wrapping_sub(b'0');
                if digit <= 9 {
                    mantissa = mantissa * 10 + u64::from(digit);
                    digits += 1;
                } else if b == b'.' && point_at.is_none() {
                    point_at = Some(digits);
                } else {
                    return None;
                }
            }
            if digits == 0 {
                return None;
            }
            let after_point = point_at.map_or(0, |at| digits - at);
            return EXACT_POWERS_OF_TEN
                .get(after_point)
                .map(|power| mantissa as f64 / power);
        }
        let mut mantissa: u64 = 0;
        let mut exact = true;
        let mut digits = 0usize;
        let mut after_point: Option<usize> = None;
        for &b in text {
            match b {
                b'0'..=b'9' => {
                    digits += 1;
                    match mantissa
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(u64::from(b - b'0')))
                    {
                        Some(m) if exact => mantissa = m,
                        _ => exact = false,
                    }
                    if let Some(n) = after_point.as_mut() {
                        *n += 1;
                    }
                }
                b'.' if after_point.is_none() => after_point = Some(0),
                _ => return None,
            }
        }
        if digits == 0 {
            return None;
        }
        if exact && mantissa < 1 << 53 {
            if let Some(power) = EXACT_POWERS_OF_TEN.get(after_point.unwrap_or(0)) {
                return Some(mantissa as f64 / power);
            }
        }
        let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
        value.is_finite().then_some(value)
    }

    pub fn rate(arg: &[u8], name: &str) -> Result<f64, CommandError> {
        match number(arg) {
            Ok(v) if super::is_rate(v) => Ok(v),
            Err(NotANumber::NotFinite) => Err(not_finite(name, arg)),
            _ => Err(CommandError::must_be(
                name,
                "a number greater than 0, such as 0.5, 1000 or 1e-5",
            )),
        }
    }

    pub fn duration_ms(arg: &[u8], name: &str) -> Result<u64, CommandError> {
        let err = || {
            CommandError::must_be(
                name,
                "a duration from 1ms to 366d: a number with an optional unit ms, s, m, h or d (seconds if none)",
            )
        };
        let (number, unit_ms): (&[u8], u64) = match arg {
            [n @ .., m, s] if m.eq_ignore_ascii_case(&b'm') && s.eq_ignore_ascii_case(&b's') => {
                (n, 1)
            }
            [n @ .., unit] => match unit.to_ascii_lowercase() {
                b's' => (n, 1000),
                b'm' => (n, 60_000),
                b'h' => (n, 3_600_000),
                b'd' => (n, 86_400_000),
                _ => (arg, 1000),
            },
            [] => (arg, 1000),
        };
        if let Some(value) = plain_digits(number, 15) {
            return match value.checked_mul(unit_ms) {
                Some(ms) if (1..=MAX_DURATION_MS).contains(&ms) => Ok(ms),
                _ => Err(err()),
            };
        }
        let ms = match self::number(number) {
            Ok(value) => value * unit_ms as f64,
            Err(NotANumber::NotFinite) => return Err(not_finite(name, number)),
            Err(NotANumber::Malformed) => return Err(err()),
        };
        if !(1.0..=MAX_DURATION_MS as f64).contains(&ms) {
            return Err(err());
        }
        Ok(ms.round() as u64)
    }
}

/// The readers with fast paths read every word as they did before (issue
/// 29): the same value or the same refusal, over words made of the bytes
/// numbers are written with (digits, signs, points, exponents, units,
/// letters of `inf` and `nan`), over plain numbers near and beyond every
/// range's edges, and over any bytes.
#[cfg(test)]
mod same_as_before {
    use super::*;
    use proptest::prelude::*;

    /// Both results, as comparable text (values bit for bit).
    fn shown<T: std::fmt::Debug>(r: Result<T, CommandError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    fn every_reader_agrees(word: &[u8]) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            shown(amount(word, "limit")),
            shown(before::amount(word, "limit"))
        );
        let (new, old) = (rate(word, "rate"), before::rate(word, "rate"));
        prop_assert_eq!(
            new.as_ref()
                .map(|v| v.to_bits())
                .map_err(CommandError::text),
            old.as_ref()
                .map(|v| v.to_bits())
                .map_err(CommandError::text)
        );
        prop_assert_eq!(
            number(word).map(f64::to_bits),
            before::number(word).map(f64::to_bits)
        );
        prop_assert_eq!(
            decimal(word).map(f64::to_bits),
            before::decimal(word).map(f64::to_bits)
        );
        prop_assert_eq!(
            shown(duration_ms(word, "window")),
            shown(before::duration_ms(word, "window"))
        );
        prop_assert_eq!(whole_number(word), before::whole_number(word));
        for (range, accepted) in [
            (i64::MIN..=i64::MAX, "an integer"),
            (
                0..=MAX_AMOUNT as i64 - 1,
                "an integer from 0 to 9007199254740990",
            ),
            (1..=1000, "from 1 to 1000"),
            (-5..=5, "from -5 to 5"),
        ] {
            prop_assert_eq!(
                shown(whole_in(word, "n", range.clone(), accepted)),
                shown(before::whole_in(word, "n", range, accepted))
            );
        }
        Ok(())
    }

    /// Edges every reader has: the ranges' ends and one past them, the
    /// longest plain forms and one digit more, units on them.
    #[test]
    fn every_reader_agrees_on_the_edges() {
        let mut words: Vec<String> = vec![
            "".into(),
            "-".into(),
            "+".into(),
            ".".into(),
            "0".into(),
            "-0".into(),
            "1".into(),
            "0.01".into(),
            "00.0100".into(),
            "9007199254740991".into(),
            "9007199254740992".into(),
            "9007199254740990".into(),
            "-9007199254740991".into(),
            "999999999999999".into(),
            "9999999999999999".into(),
            "99999999999999999".into(),
            "999999999999999999".into(),
            "-999999999999999999".into(),
            "9999999999999999999".into(),
            "9223372036854775807".into(),
            "-9223372036854775808".into(),
            "9223372036854775808".into(),
            "18446744073709551616".into(),
            "31622400".into(),
            "31622401".into(),
            "31622400000".into(),
            "31622400001".into(),
            "366d".into(),
            "367d".into(),
            "8784h".into(),
            "8785h".into(),
            "527040m".into(),
            "527041m".into(),
            "0ms".into(),
            "1ms".into(),
            "1MS".into(),
            "1mS".into(),
            "ms".into(),
            "s".into(),
            "1e3".into(),
            "inf".into(),
            "-nan".into(),
            "1.5".into(),
            ".5".into(),
            "5.".into(),
            "0.0000000000001".into(),
            "0.00000000000001".into(),
            "1e-400".into(),
            "1e400".into(),
        ];
        for digits in 1..=22 {
            for lead in ["1", "9"] {
                let plain = format!("{lead}{}", "0".repeat(digits - 1));
                for unit in ["", "ms", "s", "m", "h", "d"] {
                    words.push(format!("{plain}{unit}"));
                    words.push(format!("-{plain}{unit}"));
                    words.push(format!("0.{plain}{unit}"));
                }
            }
        }
        for word in &words {
            if let Err(e) = every_reader_agrees(word.as_bytes()) {
                panic!("{word:?}: {e}");
            }
        }
    }

    proptest! {
        #[test]
        fn every_reader_agrees_on_number_like_words(
            word in "[-+]?[0-9]{0,20}(\\.[0-9]{0,20})?([eE][-+]?[0-9]{0,4})?(ms|MS|[smhdSMHDx])?"
        ) {
            every_reader_agrees(word.as_bytes())?;
        }

        #[test]
        fn every_reader_agrees_on_words_of_number_bytes(
            word in "[-+0-9.eEinfaINFAmsdh ]{0,24}"
        ) {
            every_reader_agrees(word.as_bytes())?;
        }

        #[test]
        fn every_reader_agrees_on_plain_numbers(value in any::<u64>(), dot in 0usize..22, unit in "(|ms|s|m|h|d)") {
            let digits = value.to_string();
            every_reader_agrees(format!("{digits}{unit}").as_bytes())?;
            every_reader_agrees(format!("-{digits}").as_bytes())?;
            let at = dot.min(digits.len());
            let (int, frac) = digits.split_at(at);
            every_reader_agrees(format!("{int}.{frac}{unit}").as_bytes())?;
        }

        #[test]
        fn every_reader_agrees_on_any_bytes(word in proptest::collection::vec(any::<u8>(), 0..24)) {
            every_reader_agrees(&word)?;
        }
    }
}
