//! The values a command's words hold: amounts, rates, durations with units.
//! Every failure is a [`CommandError`] naming the parameter and what it
//! accepts.

use crate::error::CommandError;

/// The largest limit, capacity or cost accepted: 2^53 - 1, the largest integer
/// every client language (including JavaScript and Lua) represents exactly.
pub const MAX_AMOUNT: u64 = (1 << 53) - 1;

/// The longest window or period (366 days), which states are held to too.
pub use crate::encoding::MAX_DURATION_MS;

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
///
/// One pass reads and checks it, and the rates people write (`10`, `0.5`,
/// `1000.25`) take the fast path: when the digits, point removed, form an
/// integer below 2^53 and at most 22 of them follow the point, that integer
/// and the power of ten are both exact `f64`s, and one IEEE division rounds
/// correctly — the same value the general parser gives, in a fraction of its
/// time (a check parses its rate on every call).
pub(crate) fn decimal(text: &[u8]) -> Option<f64> {
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

/// A rate: a decimal that [`is_rate`] (per second).
pub fn rate(arg: &[u8], name: &str) -> Result<f64, CommandError> {
    match decimal(arg) {
        Some(v) if is_rate(v) => Ok(v),
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
        // Regression (issue 20): 1.0996e-308 a second, a subnormal float,
        // was a rate, and its key's expiry passed 2^53 ms.
        let subnormal = format!("0.{}10996080332984074", "0".repeat(307));
        assert!(rate(subnormal.as_bytes(), "rate").is_err(), "subnormal");
        let smallest = format!("0.{}22250738585072014", "0".repeat(307));
        assert_eq!(rate(smallest.as_bytes(), "rate"), Ok(f64::MIN_POSITIVE));
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
