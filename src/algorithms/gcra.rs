//! GCRA, the generic cell rate algorithm, with redis-cell's meaning of its
//! parameters, and the reply mapping of redis-cell's `CL.THROTTLE`.
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

use super::{
    ms_to_ns, ns_to_ms_ceil, Algorithm, Decision, Field, Mode, State, MAX_AMOUNT, MAX_DURATION_MS,
    MAX_TIMESTAMP_MS, NS_PER_MS,
};
use crate::encoding::{ensure, put_i64, put_u64, DecodeError, Reader};
use crate::error::CommandError;

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
    pub fn emission_interval_ns(&self) -> i128 {
        let period_ns = i128::from(self.period_ms).saturating_mul(NS_PER_MS);
        (period_ns / i128::from(self.count.max(1))).max(1)
    }

    /// `tau + T = T * limit`: how far the TAT may run ahead of now.
    fn window_ns(&self) -> i128 {
        self.emission_interval_ns()
            .saturating_mul(i128::from(self.limit()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    params: GcraParams,
    /// The theoretical arrival time (Unix ns), in
    /// `updated_ms..=updated_ms + tau + T` once brought up to date.
    tat_ns: i128,
    /// The latest time seen (Unix ms).
    updated_ms: i64,
}

impl Gcra {
    /// The theoretical arrival time (Unix ns).
    pub fn tat_ns(&self) -> i128 {
        self.tat_ns
    }

    /// Bring the state to `now_ms` (never earlier than already seen): a TAT
    /// in the past becomes now. Returns the time used, in ns.
    fn advance(&mut self, now_ms: i64) -> i128 {
        self.updated_ms = self.updated_ms.max(now_ms);
        let now = ms_to_ns(self.updated_ms);
        self.tat_ns = self.tat_ns.max(now);
        now
    }
}

impl Algorithm for Gcra {
    type Params = GcraParams;

    fn fresh(params: GcraParams, now_ms: i64) -> Self {
        Self {
            params,
            tat_ns: ms_to_ns(now_ms),
            updated_ms: now_ms,
        }
    }

    fn params(&self) -> GcraParams {
        self.params
    }

    /// The TAT is a time, not a count, so it carries over as it is: what the
    /// key owes is time to wait, whatever the new rate. Since the TAT is
    /// never before now, a larger limit gives no more than a fresh key would
    /// have. The TAT is then clamped to `tau' + T'` (the new parameters)
    /// after the key was last used, so a key never owes more than one emptied
    /// under the new parameters would. The clamp is measured from the last
    /// use, not from `now`: until an allowed request stores the new
    /// parameters every call reconfigures the stored state again, and a
    /// promised `retry_after_ms` must stay true across those calls.
    fn reconfigure(&mut self, params: GcraParams, now_ms: i64) {
        let most = ms_to_ns(self.updated_ms).saturating_add(params.window_ns());
        self.params = params;
        self.tat_ns = self.tat_ns.min(most);
        self.advance(now_ms);
    }

    fn last_seen_ms(&self) -> i64 {
        self.updated_ms
    }

    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        let now = self.advance(now_ms);
        let now_ms = self.updated_ms;
        let t = self.params.emission_interval_ns();
        let window = self.params.window_ns();
        let limit = self.params.limit();
        let new_tat = self
            .tat_ns
            .saturating_add(i128::from(cost).saturating_mul(t));
        let ahead = new_tat.saturating_sub(now);
        let allowed = cost <= limit && ahead <= window;
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            // Allowed once now' >= new_tat - window (the TAT is ahead of
            // now', so it does not move).
            ns_to_ms_ceil(ahead - window).max(1)
        };
        if allowed && mode == Mode::Take {
            self.tat_ns = new_tat;
        }
        let room = window
            .saturating_sub(self.tat_ns.saturating_sub(now))
            .max(0)
            / t;
        Decision {
            allowed,
            limit,
            remaining: u64::try_from(room).unwrap_or(0).min(limit),
            retry_after_ms,
            reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }
}

impl State for Gcra {
    const TAG: u8 = 6;
    const NAME: &'static str = "gcra";

    fn describe(&self) -> Vec<(&'static str, Field)> {
        vec![
            ("burst", Field::Int(self.params.burst as i64)),
            ("count", Field::Int(self.params.count as i64)),
            ("period_ms", Field::Int(self.params.period_ms as i64)),
            ("tat_ms", Field::Int(ns_to_ms_ceil(self.tat_ns))),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    /// The TAT, rounded up to the millisecond.
    fn fresh_at_ms(&self) -> i64 {
        ns_to_ms_ceil(self.tat_ns)
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.burst);
        put_u64(out, self.params.count);
        put_u64(out, self.params.period_ms);
        put_i64(out, self.updated_ms);
        // The TAT as an i128, little-endian: low 8 bytes, then high 8.
        out.extend_from_slice(&self.tat_ns.to_le_bytes());
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let burst = input.u64()?;
        let count = input.u64()?;
        let period_ms = input.u64()?;
        let updated_ms = input.i64()?;
        let tat_low = input.u64()?;
        let tat_high = input.i64()?;
        ensure(burst < MAX_AMOUNT, "burst out of range")?;
        ensure((1..=MAX_AMOUNT).contains(&count), "count out of range")?;
        ensure(
            (1..=MAX_DURATION_MS).contains(&period_ms),
            "period out of range",
        )?;
        ensure(
            (0..=MAX_TIMESTAMP_MS).contains(&updated_ms),
            "timestamp out of range",
        )?;
        let params = GcraParams {
            burst,
            count,
            period_ms,
        };
        let tat_ns = (i128::from(tat_high) << 64) | i128::from(tat_low);
        let updated_ns = ms_to_ns(updated_ms);
        ensure(
            (updated_ns..=updated_ns.saturating_add(params.window_ns())).contains(&tat_ns),
            "theoretical arrival time out of range",
        )?;
        Ok(Self {
            params,
            tat_ns,
            updated_ms,
        })
    }
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
    use proptest::prelude::*;

    const T0: i64 = 1_700_000_000_000;

    fn params(burst: u64, count: u64, period_ms: u64) -> GcraParams {
        GcraParams {
            burst,
            count,
            period_ms,
        }
    }

    /// Runs one command against `state` the way the Redis layer does.
    fn call(
        state: &mut Option<Gcra>,
        p: GcraParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> Decision {
        let (decision, next) = Gcra::check_with(state.as_ref(), p, now_ms, cost, mode);
        if let Some(next) = next {
            *state = Some(next);
        }
        decision
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
        assert!(bad(&|g| g.updated_ms = -1));
        assert!(bad(&|g| g.tat_ns = ms_to_ns(T0) - 1));
        assert!(bad(&|g| g.tat_ns = ms_to_ns(T0) + 6 * 333_333_333 + 1));
        assert!(!bad(&|g| g.tat_ns = ms_to_ns(T0) + 6 * 333_333_333));
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
    }
}
