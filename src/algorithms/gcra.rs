//! GCRA, the generic cell rate algorithm, with redis-cell's meaning of its
//! parameters (its `CL.THROTTLE` arguments and reply: `crate::redis_cell`).
//!
//! Terms (as in governor's `gcra.rs`): `count` requests per `period` are
//! allowed in the long run, so requests are nominally spaced by the
//! *emission interval* `T = period / count`. The *tolerance* `tau = T * burst`
//! is how far ahead of that schedule a request may arrive. The state is one
//! time, the *theoretical arrival time* (TAT): when the key would be back to
//! fresh had every allowed request arrived exactly on schedule. A TAT in the
//! past means the same as a TAT of now.
//!
//! A request of cost `q` at `now` moves the TAT to
//! `new_tat = max(tat, now) + q * T`, and is allowed when
//! `new_tat - now <= tau + T`: its last unit arrives no earlier than its own
//! theoretical arrival time minus `tau`. So a fresh key allows `burst + 1`
//! (the *limit*) at once, then one more every `T`; a cost above the limit is
//! never allowed. This is redis-cell's rule, whose "delay variation
//! tolerance" is our `tau + T`.
//!
//! Arithmetic is exact: times are integer nanoseconds in `i128`, and
//! `T = floor(period_ns / count)` as in redis-cell (which computes the
//! quotient in `f64`, the same value for periods up to 104 days), but at
//! least 1 ns, so a rate above 10^9 per second counts as 10^9 per second.
//! Replies round up to whole milliseconds: a caller that waits
//! `retry_after_ms` is allowed, one that waits a millisecond less is not.

use super::schedule::{Pace, Schedule};
use super::{
    div_i128, Algorithm, Decision, Field, Mode, State, MAX_AMOUNT, MAX_DURATION_MS, NS_PER_MS,
};
use crate::encoding::{put_u64, DecodeError, Reader};
use crate::error::CommandError;
use crate::words::syntax::{duration_word, Kind, Syntax, Word};
use crate::words::values::{
    amount, duration_ms, plain_amount, plain_duration_ms, plain_whole_in, whole_in,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraParams {
    /// How many requests beyond the first may arrive at once (`0..=MAX_AMOUNT
    /// - 1`); the limit is `burst + 1`.
    pub burst: u64,
    /// Requests allowed per `period` in the long run (`1..=MAX_AMOUNT`).
    pub count: u64,
    /// `1..=MAX_DURATION_MS`.
    pub period_ms: u64,
}

impl GcraParams {
    /// The most a fresh key allows at once: `burst + 1`.
    pub fn limit(&self) -> u64 {
        self.burst.saturating_add(1)
    }

    /// `T`: the nominal spacing of requests, in nanoseconds (at least 1).
    ///
    /// In `u64` whenever the period in ns fits (any period accepted): one
    /// machine division, on every check; [`GcraParams::wide_interval_ns`]
    /// otherwise, which answers the same (a property test compares them).
    #[inline(always)]
    pub fn emission_interval_ns(&self) -> i128 {
        match self.period_ms.checked_mul(NS_PER_MS as u64) {
            Some(period_ns) => i128::from((period_ns / self.count.max(1)).max(1)),
            None => self.wide_interval_ns(),
        }
    }

    /// [`GcraParams::emission_interval_ns`] for any period, in `i128`.
    #[inline(never)]
    fn wide_interval_ns(&self) -> i128 {
        let period_ns = i128::from(self.period_ms).saturating_mul(NS_PER_MS);
        div_i128(period_ns, i128::from(self.count.max(1))).max(1)
    }

    /// The schedule of these parameters: one request per `T`, `limit` at
    /// once (`tau + T = T * limit` ahead of now at most).
    #[inline(always)]
    fn pace(&self) -> Pace {
        Pace {
            interval_ns: self.emission_interval_ns(),
            limit: self.limit(),
        }
    }
}

/// `RL.GCRA key burst count period`: `burst` may be 0 (then the limit is
/// 1); `count` is at most one a nanosecond.
impl Syntax for GcraParams {
    const PARAMS: &'static [Word] = &[
        Word {
            name: "burst",
            kind: Kind::Integer,
            summary: "Requests allowed at once beyond the steady rate (the limit is burst + 1): a whole number from 0.",
        },
        Word {
            name: "count",
            kind: Kind::Integer,
            summary: "Requests allowed per period: a whole number from 1 to 2^53-1.",
        },
        Word {
            name: "period",
            kind: Kind::Duration,
            summary: "The period's length: a decimal with an optional unit ms, s, m, h or d (seconds when none: 60, 1.5s, 250ms, 1h), from 1ms to 366d.",
        },
    ];

    const SUMMARY: &'static str = "GCRA (the leaky bucket as a meter): count requests per period, with bursts of burst beyond the steady rate. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].";

    fn from_words(words: &[&[u8]]) -> Result<Self, CommandError> {
        // All three in their plain forms, read in place (a check parses
        // them on every call); any other word, in full, with its refusal.
        if let [burst, count, period] = words {
            if let (Some(burst), Some(count), Some(period_ms)) = (
                plain_whole_in(burst, &(0..=MAX_AMOUNT as i64 - 1)),
                plain_amount(count),
                plain_duration_ms(period),
            ) {
                if fast_enough(count, period_ms) {
                    return Ok(Self {
                        burst: burst as u64,
                        count,
                        period_ms,
                    });
                }
            }
        }
        gcra_params_in_full(words)
    }

    const PARTIAL: bool = true;

    const EXAMPLE: &'static [&'static str] = &["4", "10", "1s"];

    fn check(&self) -> Result<(), &'static str> {
        if self.burst >= MAX_AMOUNT {
            Err("burst out of range")
        } else if !(1..=MAX_AMOUNT).contains(&self.count) {
            Err("count out of range")
        } else if !(1..=MAX_DURATION_MS).contains(&self.period_ms) {
            Err("period out of range")
        } else if !fast_enough(self.count, self.period_ms) {
            Err("count out of range for its period")
        } else {
            Ok(())
        }
    }

    fn to_words(&self) -> Vec<String> {
        vec![
            self.burst.to_string(),
            self.count.to_string(),
            duration_word(self.period_ms),
        ]
    }
}

/// [`GcraParams`]' `from_words` in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn gcra_params_in_full(words: &[&[u8]]) -> Result<GcraParams, CommandError> {
    let [burst, count, period] = words else {
        return Err(CommandError::Arity);
    };
    let burst = if *burst == b"0" {
        0
    } else {
        whole_in(
            burst,
            "burst",
            0..=MAX_AMOUNT as i64 - 1,
            "an integer from 0 to 9007199254740990",
        )? as u64
    };
    let count = amount(count, "count")?;
    let period_ms = duration_ms(period, "period")?;
    if !fast_enough(count, period_ms) {
        return Err(CommandError::must_be(
            "count",
            "at most 1000000 per millisecond of period",
        ));
    }
    Ok(GcraParams {
        burst,
        count,
        period_ms,
    })
}

/// At most one request a nanosecond: `T` of at least 1 ns.
fn fast_enough(count: u64, period_ms: u64) -> bool {
    u128::from(count) <= u128::from(period_ms) * 1_000_000
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    params: GcraParams,
    /// The theoretical arrival time (TAT) and the last update.
    schedule: Schedule,
}

impl Algorithm for Gcra {
    type Params = GcraParams;

    fn fresh(params: GcraParams, now_ms: i64) -> Self {
        Self {
            params,
            schedule: Schedule::fresh(now_ms),
        }
    }

    fn params(&self) -> GcraParams {
        self.params
    }

    fn limit_of(limit: u64, window_ms: u64) -> GcraParams {
        GcraParams {
            burst: limit.saturating_sub(1),
            count: limit,
            period_ms: window_ms,
        }
    }

    /// The TAT is a time, not a count, so it carries over as it is: what the
    /// key owes is time to wait, whatever the new rate. Since the TAT is
    /// never before now, a larger limit gives no more than a fresh key would
    /// have. The TAT is then clamped to `tau' + T'` (the new parameters)
    /// after the key was last used (see [`Schedule::reconfigure`]).
    fn reconfigure(&mut self, params: GcraParams, now_ms: i64) {
        self.params = params;
        self.schedule.reconfigure(params.pace(), now_ms);
    }

    fn last_seen_ms(&self) -> i64 {
        self.schedule.updated_ms
    }

    fn refund(&mut self, now_ms: i64, amount: u64, _granted_at_ms: i64) -> Option<u64> {
        Some(self.schedule.give_back(self.params.pace(), now_ms, amount))
    }

    #[inline]
    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        self.schedule
            .check(self.params.pace(), now_ms, cost, mode)
            .0
    }

    /// The default's answer, without its copy of the whole state: a take
    /// under the stored parameters is checked on a copy of the schedule
    /// alone (24 bytes, kept when the request is allowed), inlined into the
    /// engine's take; the rest (new parameters, a peek) is the default's
    /// copy, out of line.
    #[inline(always)]
    fn check_stored(
        &mut self,
        params: GcraParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if mode != Mode::Take || self.params != params {
            return self.check_copy_out_of_line(params, now_ms, cost, mode);
        }
        let (decision, _) = self.schedule.take_if_allowed(params.pace(), now_ms, cost);
        (decision, decision.allowed)
    }
}

impl State for Gcra {
    fn describe(&self, _now_ms: i64) -> Vec<(&'static str, Field)> {
        vec![
            ("burst", Field::Int(self.params.burst as i64)),
            ("count", Field::Int(self.params.count as i64)),
            ("period_ms", Field::Int(self.params.period_ms as i64)),
            ("tat_ms", Field::Int(self.schedule.fresh_at_ms())),
            ("updated_ms", Field::Int(self.schedule.updated_ms)),
        ]
    }

    /// The TAT, rounded up to the millisecond. Inlined always: twice on
    /// every check.
    #[inline(always)]
    fn fresh_at_ms(&self) -> i64 {
        self.schedule.fresh_at_ms()
    }

    /// `burst`, `count`, `period_ms` u64, then the schedule (`updated_ms`,
    /// the TAT in ns as an i128); 48 bytes.
    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.burst);
        put_u64(out, self.params.count);
        put_u64(out, self.params.period_ms);
        self.schedule.encode(out);
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let burst = input.u64()?;
        let count = input.u64()?;
        let period_ms = input.u64()?;
        let schedule = Schedule::read(input)?;
        let params = GcraParams {
            burst,
            count,
            period_ms,
        };
        params.check().map_err(DecodeError)?;
        schedule.validate(params.pace(), "theoretical arrival time out of range")?;
        Ok(Self { params, schedule })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{call, stored_and_new_when_fresh};
    use crate::algorithms::{ms_to_ns, MAX_TIMESTAMP_MS};
    use proptest::prelude::*;

    const T0: i64 = 1_700_000_000_000;

    fn params(burst: u64, count: u64, period_ms: u64) -> GcraParams {
        GcraParams {
            burst,
            count,
            period_ms,
        }
    }

    /// `(allowed, remaining, retry_after_ms, reset_after_ms)`.
    type Summary = (bool, u64, i64, i64);

    fn summary(d: Decision) -> Summary {
        (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms)
    }

    #[test]
    fn a_fresh_key_allows_burst_plus_one_then_one_per_interval() {
        let mut s = None;
        let p = params(2, 1, 1000);
        for left in [2, 1, 0] {
            let d = call(&mut s, p, T0, 1, Mode::Take);
            assert_eq!((d.allowed, d.limit, d.remaining), (true, 3, left));
        }
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1000, 3000));
        assert!(!call(&mut s, p, T0 + 999, 1, Mode::Take).allowed);
        let d = call(&mut s, p, T0 + 1000, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
    }

    #[test]
    fn it_answers_like_redis_cells_own_test_table() {
        // redis-cell's `it_rate_limits`: limit 5, one per second.
        let p = params(4, 1, 1000);
        let mut s = None;
        let cases: [(i64, u64, Summary); 15] = [
            (0, 6, (false, 5, -1, 0)),
            (0, 1, (true, 4, 0, 1000)),
            (0, 1, (true, 3, 0, 2000)),
            (0, 1, (true, 2, 0, 3000)),
            (0, 1, (true, 1, 0, 4000)),
            (0, 1, (true, 0, 0, 5000)),
            (0, 1, (false, 0, 1000, 5000)),
            (3000, 1, (true, 2, 0, 3000)),
            (3100, 1, (true, 1, 0, 3900)),
            (4000, 1, (true, 1, 0, 4000)),
            (8000, 1, (true, 4, 0, 1000)),
            (9500, 1, (true, 4, 0, 1000)),
            (9500, 0, (true, 4, 0, 1000)),
            (9500, 2, (true, 2, 0, 3000)),
            (9500, 5, (false, 2, 3000, 3000)),
        ];
        for (i, (at, cost, expected)) in cases.into_iter().enumerate() {
            let mode = if cost == 0 { Mode::Peek } else { Mode::Take };
            let d = call(&mut s, p, T0 + at, cost, mode);
            assert_eq!(summary(d), expected, "case {i}");
        }
    }

    #[test]
    fn retry_after_is_exact_to_the_millisecond() {
        // T = 1/3 s: times that are not whole milliseconds.
        let p = params(4, 3, 1000);
        for cost in 1..=5 {
            let mut s = None;
            call(&mut s, p, T0, 5, Mode::Take);
            call(&mut s, p, T0 + 123, 1, Mode::Take);
            let d = call(&mut s, p, T0 + 200, cost, Mode::Peek);
            assert!(!d.allowed);
            let at = T0 + 200 + d.retry_after_ms;
            assert!(
                !call(&mut s, p, at - 1, cost, Mode::Peek).allowed,
                "cost {cost}"
            );
            assert!(call(&mut s, p, at, cost, Mode::Peek).allowed, "cost {cost}");
        }
    }

    #[test]
    fn cost_above_the_limit_can_never_be_allowed() {
        let mut s = None;
        let d = call(&mut s, params(4, 1, 1000), T0, 6, Mode::Take);
        assert_eq!(summary(d), (false, 5, -1, 0));
        assert!(s.is_none(), "a denial stores nothing");
    }

    #[test]
    fn cost_moves_the_tat_by_that_many_intervals() {
        let mut s = None;
        let p = params(9, 10, 1000);
        let d = call(&mut s, p, T0, 7, Mode::Take);
        assert_eq!(summary(d), (true, 3, 0, 700));
        let d = call(&mut s, p, T0, 4, Mode::Take);
        assert_eq!(summary(d), (false, 3, 100, 700));
    }

    #[test]
    fn a_denial_leaves_the_stored_state_unchanged() {
        let mut s = None;
        let p = params(1, 1, 1000);
        call(&mut s, p, T0, 2, Mode::Take);
        let before = s.clone();
        assert!(!call(&mut s, p, T0 + 300, 1, Mode::Take).allowed);
        assert_eq!(s, before);
    }

    #[test]
    fn peek_answers_without_taking() {
        let mut s = None;
        let p = params(3, 1, 1000);
        let d = call(&mut s, p, T0, 3, Mode::Peek);
        assert_eq!(summary(d), (true, 4, 0, 0));
        assert!(s.is_none());
        call(&mut s, p, T0, 3, Mode::Take);
        let before = s.clone();
        let d = call(&mut s, p, T0, 2, Mode::Peek);
        assert_eq!(summary(d), (false, 1, 1000, 3000));
        let d = call(&mut s, p, T0, 0, Mode::Peek);
        assert_eq!(summary(d), (true, 1, 0, 3000));
        assert_eq!(s, before);
    }

    #[test]
    fn a_clock_stepping_back_means_no_time_passed() {
        let mut s = None;
        let p = params(1, 1, 1000);
        call(&mut s, p, T0, 2, Mode::Take);
        let d = call(&mut s, p, T0 - 60_000, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1000, 2000));
        assert!(call(&mut s, p, T0 + 1000, 1, Mode::Take).allowed);
    }

    #[test]
    fn reset_is_when_the_tat_is_reached() {
        let mut s = None;
        let p = params(9, 3, 1000);
        let d = call(&mut s, p, T0, 2, Mode::Take);
        // TAT = T0 + 666.67 ms, rounded up.
        assert_eq!(d.reset_after_ms, 667);
        assert_eq!(s.as_ref().map(|s| s.fresh_at_ms()), Some(T0 + 667));
        let d = call(&mut s, p, T0 + 667, 1, Mode::Peek);
        assert_eq!((d.remaining, d.reset_after_ms), (10, 0));
    }

    #[test]
    fn the_interval_is_floored_to_whole_nanoseconds_but_never_zero() {
        assert_eq!(params(0, 3, 1000).emission_interval_ns(), 333_333_333);
        assert_eq!(params(0, 7, 1).emission_interval_ns(), 142_857);
        assert_eq!(params(0, MAX_AMOUNT, 1).emission_interval_ns(), 1);
    }

    #[test]
    fn a_larger_limit_does_not_give_more_than_a_fresh_key() {
        let mut s = None;
        call(&mut s, params(4, 1, 1000), T0, 5, Mode::Take);
        // The key owes 5 s; the new limit 10 allows 5 more right away.
        let d = call(&mut s, params(9, 1, 1000), T0, 1, Mode::Peek);
        assert_eq!((d.limit, d.remaining), (10, 5));
        let d = call(&mut s, params(9, 1, 1000), T0 + 100_000, 1, Mode::Peek);
        assert_eq!(d.remaining, 10);
    }

    #[test]
    fn a_smaller_limit_clamps_the_wait_to_that_of_an_emptied_key() {
        let mut s = None;
        call(&mut s, params(9, 1, 1000), T0, 10, Mode::Take);
        let p = params(1, 1, 1000);
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1000, 2000));
        // Still the old parameters stored: the retry_after holds anyway.
        let d = call(&mut s, p, T0 + 999, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1, 1001));
        let d = call(&mut s, p, T0 + 1000, 1, Mode::Take);
        assert_eq!(summary(d), (true, 0, 0, 2000));
        assert_eq!(s.as_ref().map(|s| s.params()), Some(p));
    }

    #[test]
    fn a_new_rate_keeps_the_time_owed() {
        let mut s = None;
        call(&mut s, params(9, 10, 1000), T0, 5, Mode::Take);
        // 500 ms owed; at 1 per 100 ms under the old rate, 1 per 50 ms now.
        let d = call(&mut s, params(9, 20, 1000), T0, 1, Mode::Peek);
        assert_eq!((d.remaining, d.reset_after_ms), (0, 500));
        let d = call(&mut s, params(9, 20, 1000), T0 + 250, 1, Mode::Peek);
        assert_eq!(d.remaining, 5);
    }

    #[test]
    fn the_largest_parameters_do_not_overflow() {
        let p = params(MAX_AMOUNT - 1, 1, MAX_DURATION_MS);
        let mut s = None;
        let d = call(&mut s, p, T0, MAX_AMOUNT, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        assert_eq!(d.reset_after_ms, MAX_TIMESTAMP_MS - T0, "saturated");
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(
            (d.allowed, d.retry_after_ms),
            (false, MAX_DURATION_MS as i64)
        );
        let d = call(&mut s, p, T0, u64::MAX, Mode::Take);
        assert_eq!(d.retry_after_ms, -1);
        let mut s = None;
        let d = call(&mut s, p, MAX_TIMESTAMP_MS, MAX_AMOUNT, Mode::Take);
        assert!(d.allowed);
        let mut buf = Vec::new();
        if let Some(state) = &s {
            state.encode_body(&mut buf);
        }
        assert_eq!(Gcra::decode_body(&mut Reader::new(&buf)).ok(), s);
        // Out-of-range parameters (never accepted by the parser) only
        // saturate.
        let odd = params(u64::MAX, 0, u64::MAX);
        call(&mut None, odd, T0, u64::MAX, Mode::Take);
        call(&mut None, odd, -T0, 1, Mode::Take);
        call(&mut Some(Gcra::fresh(p, T0)), odd, T0, 1, Mode::Take);
    }

    #[test]
    fn gcra_takes_a_zero_burst_and_bounds_the_rate() {
        let parse = |words: &[&[u8]]| crate::parse::check_args::<GcraParams>(words);
        let text = |words: &[&[u8]]| match parse(words) {
            Ok(v) => format!("ok {v:?}"),
            Err(e) => e.text().to_string(),
        };
        assert_eq!(parse(&[b"0", b"10", b"1s"]).map(|(p, _)| p.burst), Ok(0));
        assert!(text(&[b"-1", b"10", b"1s"]).starts_with("ERR burst must be"));
        assert!(text(&[b"1", b"1000001", b"1ms"]).starts_with("ERR count must be"));
        assert_eq!(parse(&[b"1", b"10"]).map(|_| ()), Err(CommandError::Arity));
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_values() {
        let mut s = None;
        call(&mut s, params(5, 3, 1000), T0, 4, Mode::Take);
        let state = s.unwrap_or_else(|| Gcra::fresh(params(0, 1, 1), 0));
        let mut buf = Vec::new();
        state.encode_body(&mut buf);
        assert_eq!(buf.len(), 48);
        let mut r = Reader::new(&buf);
        assert_eq!(Gcra::decode_body(&mut r), Ok(state.clone()));
        assert_eq!(r.remaining(), 0);
        assert!(Gcra::decode_body(&mut Reader::new(&buf[..40])).is_err());

        let bad = |f: &dyn Fn(&mut Gcra)| {
            let mut bad = state.clone();
            f(&mut bad);
            let mut buf = Vec::new();
            bad.encode_body(&mut buf);
            Gcra::decode_body(&mut Reader::new(&buf)).is_err()
        };
        assert!(bad(&|g| g.params.burst = MAX_AMOUNT));
        assert!(bad(&|g| g.params.count = 0));
        assert!(bad(&|g| g.params.period_ms = 0));
        assert!(bad(&|g| g.schedule.updated_ms = -1));
        assert!(bad(&|g| g.schedule.due_ns = ms_to_ns(T0) - 1));
        assert!(bad(
            &|g| g.schedule.due_ns = ms_to_ns(T0) + 6 * 333_333_333 + 1
        ));
        assert!(!bad(&|g| g.schedule.due_ns = ms_to_ns(T0) + 6 * 333_333_333));
    }

    /// Periods and counts on both sides of the edges of the 64-bit path
    /// (a period whose ns overflow `u64`), and of the parser's bounds.
    fn edge_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            0u64..=3,
            (0u64..=3).prop_map(|d| u64::MAX - d),
            (0u64..=3).prop_map(|d| u64::MAX / 1_000_000 - 1 + d),
            (0u64..=3).prop_map(|d| MAX_DURATION_MS - 1 + d),
            (0u64..=3).prop_map(|d| MAX_AMOUNT - 1 + d),
            1u64..=10_000_000,
        ]
    }

    proptest! {
        /// The interval in `u64` is the one in `i128`, for any period and
        /// count.
        #[test]
        fn the_emission_interval_is_the_wide_one(period_ms in edge_u64(), count in edge_u64(), burst in edge_u64()) {
            let p = params(burst, count, period_ms);
            prop_assert_eq!(p.emission_interval_ns(), p.wide_interval_ns());
        }
    }

    proptest! {
        /// GCRA's promise: in any span of time, no more than `limit` plus one
        /// per emission interval is allowed.
        #[test]
        fn no_span_allows_more_than_the_limit_plus_the_rate(
            burst in 0u64..5,
            count in 1u64..20,
            period_ms in 1u64..5000,
            steps in proptest::collection::vec((0i64..400, 1u64..4), 1..80),
        ) {
            let p = params(burst, count, period_ms);
            let t = p.emission_interval_ns();
            let mut s = None;
            let mut now = T0;
            let mut taken: Vec<(i64, u64)> = Vec::new();
            for (dt, cost) in steps {
                now += dt;
                let d = call(&mut s, p, now, cost, Mode::Take);
                if d.allowed {
                    taken.push((now, cost));
                } else if d.retry_after_ms > 0 {
                    let wait = d.retry_after_ms;
                    prop_assert!(!call(&mut s.clone(), p, now + wait - 1, cost, Mode::Peek).allowed);
                    prop_assert!(call(&mut s.clone(), p, now + wait, cost, Mode::Peek).allowed);
                }
            }
            for i in 0..taken.len() {
                let mut units = 0u64;
                for &(at, cost) in &taken[i..] {
                    units += cost;
                    let span_ns = ms_to_ns(at - taken[i].0);
                    let bound = i128::from(p.limit()) + span_ns / t;
                    prop_assert!(i128::from(units) <= bound);
                }
            }
        }

        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Gcra::decode_body(&mut Reader::new(&bytes));
        }

        /// A stored state checked in place (`check_stored`) gives the
        /// decision, and is left as, the copy the default `check_stored`
        /// checked (`check_with`, kept when taken), for any schedule, time,
        /// cost, mode and parameters (the same or others).
        #[test]
        fn a_stored_state_is_checked_in_place_as_on_a_copy(
            burst in edge_u64(),
            count in edge_u64().prop_map(|c| c.max(1)),
            period_ms in edge_u64().prop_map(|p| p.max(1)),
            due_ns in prop_oneof![any::<i128>(), any::<i64>().prop_map(i128::from), (-3_000_000_000i128..3_000_000_000).prop_map(|d| ms_to_ns(T0) + d)],
            updated_ms in prop_oneof![any::<i64>(), (-3_000i64..3_000).prop_map(|d| T0 + d)],
            now in prop_oneof![any::<i64>(), (-3_000i64..3_000).prop_map(|d| T0 + d)],
            cost in prop_oneof![0u64..12, edge_u64()],
            take in any::<bool>(),
            other in proptest::option::of((0u64..10, 1u64..10, 1u64..100_000)),
        ) {
            let stored = Gcra {
                params: params(burst, count, period_ms),
                schedule: Schedule { due_ns, updated_ms },
            };
            let asked = other.map_or(stored.params, |(b, c, p)| params(b, c, p));
            let mode = if take { Mode::Take } else { Mode::Peek };
            let (expected, kept) = match Gcra::check_with(Some(&stored), asked, now, cost, mode) {
                (decision, Some(next)) => (decision, next),
                (decision, None) => (decision, stored.clone()),
            };
            let mut in_place = stored.clone();
            let (decision, changed) = in_place.check_stored(asked, now, cost, mode);
            prop_assert_eq!(decision, expected);
            prop_assert_eq!(changed, expected.allowed && take);
            prop_assert_eq!(&in_place, &kept);
        }

        /// Unlike the token bucket's float refill, the TAT is exact (integer
        /// ns, rounded up to the ms): at its fresh moment the state answers
        /// a request of its whole limit as a new key would, for any
        /// parameters accepted (when the moment comes before the last time
        /// a state can carry).
        #[test]
        fn a_state_is_as_good_as_new_at_its_fresh_moment(
            burst in 0u64..1_000_000,
            count in 1u64..1_000_000,
            period_ms in 1u64..=MAX_DURATION_MS,
            first in 0.0f64..=1.0,
            later in proptest::option::of((0i64..10_000_000, 0.0f64..=1.0)),
        ) {
            let p = params(burst, count, period_ms);
            prop_assume!(crate::words::syntax::Syntax::check(&p).is_ok());
            let answers = stored_and_new_when_fresh(p, burst + 1, T0, first, later);
            prop_assume!(answers.is_some());
            if let Some((stored, new)) = answers {
                prop_assert_eq!(summary(stored), summary(new));
            }
        }
    }
}
