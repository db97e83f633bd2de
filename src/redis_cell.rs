//! redis-cell's `CL.THROTTLE`: its arguments and its reply, mapped onto this
//! module's GCRA (`crate::algorithms::gcra`), so that redis-cell users can
//! switch without changing a line, while getting its input checked, its
//! state replicated correctly and the server safe from a wrong-type key.
//! Plain Rust: the Redis layer only calls these.

use crate::algorithms::gcra::GcraParams;
use crate::algorithms::{Decision, Mode, MAX_AMOUNT, MAX_DURATION_MS};
use crate::error::CommandError;
use crate::words::values::plain_whole_in;

/// A signed 64-bit integer, as redis-cell reads its arguments (their
/// ranges are checked by [`cl_throttle_args`]), in any decimal form whose
/// value is whole (`1e3`, `60.0`), as every numeric argument here.
fn integer(arg: &[u8], name: &str) -> Result<i64, CommandError> {
    crate::words::values::whole_in(arg, name, i64::MIN..=i64::MAX, "an integer")
}

/// `CL.THROTTLE key max_burst count period [quantity]`, after the key.
pub fn cl_throttle(args: &[&[u8]]) -> Result<ClThrottleArgs, CommandError> {
    // Every number in its plain form, read in place (a check parses them
    // on every call); any other word, in full, with its refusal. Either
    // way the integers are then checked in the same order.
    let any = i64::MIN..=i64::MAX;
    let quantity = match args {
        [_, _, _] => Some(1),
        [_, _, _, q] => plain_whole_in(q, &any),
        _ => None,
    };
    if let ([b, c, p, ..], Some(quantity)) = (args, quantity) {
        if let (Some(max_burst), Some(count), Some(period)) = (
            plain_whole_in(b, &any),
            plain_whole_in(c, &any),
            plain_whole_in(p, &any),
        ) {
            return cl_throttle_args(max_burst, count, period, quantity);
        }
    }
    cl_throttle_in_full(args)
}

/// [`cl_throttle`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn cl_throttle_in_full(args: &[&[u8]]) -> Result<ClThrottleArgs, CommandError> {
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

/// The arguments of `CL.THROTTLE key max_burst count period [quantity]`
/// (redis-cell), as this module's GCRA takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClThrottleArgs {
    pub params: GcraParams,
    /// The quantity; 0 with [`Mode::Peek`].
    pub cost: u64,
    /// A quantity of 0 only looks (redis-cell's "peek").
    pub mode: Mode,
}

/// Maps `CL.THROTTLE`'s integers (`period` in seconds, `quantity` 1 when not
/// given) to GCRA parameters, a cost and a mode, or the error reply.
/// redis-cell takes any `i64` and misbehaves on negative values; here each
/// must be in range, and `count` at most one per nanosecond of `period`
/// (redis-cell replies "Zero rates are not supported" beyond that).
pub fn cl_throttle_args(
    max_burst: i64,
    count: i64,
    period_s: i64,
    quantity: i64,
) -> Result<ClThrottleArgs, CommandError> {
    let in_range =
        |v: i64, min: u64, max: u64| u64::try_from(v).ok().filter(|v| (min..=max).contains(v));
    let burst = in_range(max_burst, 0, MAX_AMOUNT - 1).ok_or_else(|| {
        CommandError::must_be("max_burst", "an integer from 0 to 9007199254740990")
    })?;
    let max_period_s = MAX_DURATION_MS / 1000;
    let period_s = in_range(period_s, 1, max_period_s).ok_or_else(|| {
        CommandError::must_be(
            "period",
            &format!("an integer from 1 to {max_period_s} (seconds)"),
        )
    })?;
    let count = in_range(count, 1, MAX_AMOUNT)
        .ok_or_else(|| CommandError::must_be("count", "an integer from 1 to 9007199254740991"))?;
    if u128::from(count) > u128::from(period_s) * 1_000_000_000 {
        return Err(CommandError::must_be(
            "count",
            "at most 1000000000 per second of period",
        ));
    }
    let cost = in_range(quantity, 0, MAX_AMOUNT).ok_or_else(|| {
        CommandError::must_be("quantity", "an integer from 0 to 9007199254740991")
    })?;
    Ok(ClThrottleArgs {
        params: GcraParams {
            burst,
            count,
            period_ms: period_s * 1000,
        },
        cost,
        mode: if cost == 0 { Mode::Peek } else { Mode::Take },
    })
}

/// `CL.THROTTLE`'s reply for a GCRA decision: `[limited (1 or 0), limit,
/// remaining, retry_after_s (-1 when allowed or never), reset_after_s]`,
/// seconds rounded up. redis-cell rounds up from whole milliseconds (it drops
/// a sub-millisecond excess over a whole second, which can tell a caller to
/// retry a fraction of a millisecond too early); this rounds up the exact
/// value, so the two differ only in that case. redis-cell also divides for
/// `remaining` in whole microseconds; this divides exact nanoseconds, the
/// same whenever `T` is a whole number of microseconds.
pub fn cl_throttle_reply(d: &Decision) -> [i64; 5] {
    let secs = |ms: i64| ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) > 0);
    let retry_after_s = if d.allowed || d.retry_after_ms < 0 {
        -1
    } else {
        secs(d.retry_after_ms)
    };
    [
        i64::from(!d.allowed),
        i64::try_from(d.limit).unwrap_or(i64::MAX),
        i64::try_from(d.remaining).unwrap_or(i64::MAX),
        retry_after_s,
        secs(d.reset_after_ms.max(0)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::call;

    const T0: i64 = 1_700_000_000_000;

    fn params(burst: u64, count: u64, period_ms: u64) -> GcraParams {
        GcraParams {
            burst,
            count,
            period_ms,
        }
    }

    fn text(r: Result<impl std::fmt::Debug, CommandError>) -> String {
        match r {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        }
    }

    #[test]
    fn cl_throttle_takes_redis_cell_integers_and_refuses_bad_ones() {
        let a = cl_throttle(&[b"4", b"10", b"60"]).map(|a| (a.params.burst, a.cost));
        assert_eq!(a, Ok((4, 1)));
        assert!(matches!(cl_throttle(&[b"4", b"10", b"60", b"0"]), Ok(a) if a.mode == Mode::Peek));
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
    fn cl_throttle_arguments_map_to_params_cost_and_mode() {
        let args = cl_throttle_args(15, 30, 60, 1);
        assert_eq!(
            args,
            Ok(ClThrottleArgs {
                params: params(15, 30, 60_000),
                cost: 1,
                mode: Mode::Take
            })
        );
        let peek = cl_throttle_args(0, 1, 1, 0).map(|a| (a.cost, a.mode));
        assert_eq!(peek, Ok((0, Mode::Peek)));
        assert!(cl_throttle_args(-1, 1, 1, 1).is_err());
        assert!(cl_throttle_args(0, 0, 1, 1).is_err());
        assert!(cl_throttle_args(0, 1, 0, 1).is_err());
        assert!(cl_throttle_args(0, 1, 31_622_401, 1).is_err());
        assert!(cl_throttle_args(0, 1, 1, -1).is_err());
        assert!(cl_throttle_args(0, 1_000_000_001, 1, 1).is_err());
        assert!(cl_throttle_args(0, 1_000_000_000, 1, 1).is_ok());
        assert!(cl_throttle_args(9_007_199_254_740_990, 1, 1, 9_007_199_254_740_991).is_ok());
    }

    #[test]
    fn cl_throttle_replies_in_whole_seconds_rounded_up() {
        let d = Decision {
            allowed: false,
            limit: 5,
            remaining: 0,
            retry_after_ms: 1001,
            reset_after_ms: 4000,
            delay_ms: None,
        };
        assert_eq!(cl_throttle_reply(&d), [1, 5, 0, 2, 4]);
        let never = Decision {
            retry_after_ms: -1,
            ..d
        };
        assert_eq!(cl_throttle_reply(&never), [1, 5, 0, -1, 4]);
        let allowed = Decision {
            allowed: true,
            remaining: 3,
            retry_after_ms: 0,
            reset_after_ms: 1,
            ..d
        };
        assert_eq!(cl_throttle_reply(&allowed), [0, 5, 3, -1, 1]);
    }

    /// Replays `tests/data/cl_throttle.tsv`, recorded from redis-cell 0.5.0:
    /// each case on a fresh key, its rows in order, all at one time.
    #[test]
    fn cl_throttle_replies_match_the_recorded_redis_cell_vectors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cl_throttle.tsv");
        let text = std::fs::read_to_string(path).expect("vector file");
        let (mut case, mut state, mut rows) = (None, None, 0);
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 6, "{line}");
            let num = |i: usize| cols[i].parse::<i64>().expect("integer");
            if case != Some(cols[0]) {
                case = Some(cols[0]);
                state = None;
            }
            let args = cl_throttle_args(num(1), num(2), num(3), num(4)).expect("valid args");
            let d = call(&mut state, args.params, T0, args.cost, args.mode);
            let expected: Vec<i64> = cols[5]
                .split(' ')
                .map(|v| v.parse().expect("integer"))
                .collect();
            assert_eq!(cl_throttle_reply(&d).to_vec(), expected, "{line}");
            rows += 1;
        }
        assert_eq!(rows, 181);
    }
}
