//! Leaky bucket, as a queue: smooths a stream instead of only cutting it.
//!
//! Terms: the bucket is a queue of room `capacity`; its content leaks out at
//! `rate_per_s` units a second, one every *leak interval* `I = 1 / rate`. A
//! request of cost `c` joins when there is room for `c` units, and its *turn*
//! comes when everything queued before it has leaked out. An allowed reply
//! carries `delay_ms`, the wait until that turn: a caller that waits it
//! before acting acts at the steady rate, never closer than `c * I` after
//! the request before it (throttle rather than reject). A request finding the
//! queue empty acts at once; `capacity` requests arriving together are let
//! out over `capacity * I`; the next one is denied until room leaks free.
//!
//! The state is one time, the *drain time*: when the queue will be empty. At
//! `now` the queue holds `(drain - now) / I` units (a fraction while a
//! request is leaking out). A request of cost `c` has its turn at
//! `start = max(drain, now)`, moves the drain time to `start + c * I`, and is
//! allowed when that leaves at most `capacity` units queued:
//! `start + c * I - now <= capacity * I`. (As a meter this is GCRA with
//! `tau + T = capacity * I`; what it adds is the delay.)
//!
//! Arithmetic is exact: times are integer nanoseconds in `i128`, and
//! `I = 10^9 / rate` ns rounded to the nearest nanosecond once, from 1 ns
//! (rates above 10^9 per second) to 366 days (rates below one per 366 days).
//! Replies round up to whole milliseconds, so no caller acts too early.

use super::schedule::{Pace, Schedule};
use super::shapes::{capacity_and_rate, check_capacity_and_rate};
use super::{Algorithm, Decision, Field, Mode, State, MAX_DURATION_MS, NS_PER_MS};
use crate::encoding::{put_f64, put_u64, DecodeError, Reader};
use crate::error::CommandError;
use crate::words::syntax::{Kind, Syntax, Word};

/// The slowest leak: one unit per 366 days.
const MAX_INTERVAL_NS: i128 = MAX_DURATION_MS as i128 * NS_PER_MS;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeakyBucketParams {
    /// The most units the queue holds (`1..=MAX_AMOUNT`).
    pub capacity: u64,
    /// Units leaking out per second: a finite decimal greater than 0.
    pub rate_per_s: f64,
}

impl LeakyBucketParams {
    /// `I`: nanoseconds for one unit to leak out, `1..=366 d`.
    ///
    /// Rounded to the nearest, halves up, as `f64::round` (a library call
    /// on this target) rounds a positive value, on every check: `1e9 /
    /// rate` is positive (or +inf, a tiny rate); from `MAX_INTERVAL_NS` on
    /// it is that bound; below it, it is under 2^55, so truncating it to
    /// an `i64` is exact, and so is its fraction (below 2^52 the two lie
    /// within one binade of each other; from 2^52 on every double is
    /// whole, its fraction 0).
    #[inline(always)]
    pub fn leak_interval_ns(&self) -> i128 {
        let ns = 1e9 / self.rate_per_s;
        // Also a rate that is not above 0 (NaN compares false).
        if !(self.rate_per_s > 0.0 && ns < MAX_INTERVAL_NS as f64) {
            return MAX_INTERVAL_NS;
        }
        let whole = ns as i64;
        let up = ns - whole as f64 >= 0.5;
        i128::from((whole + i64::from(up)).max(1))
    }

    /// The schedule of these parameters: one unit leaks out per `I`, and
    /// the queue holds `capacity` (`capacity * I` ahead of now at most).
    #[inline(always)]
    fn pace(&self) -> Pace {
        Pace {
            interval_ns: self.leak_interval_ns(),
            limit: self.capacity,
        }
    }
}

/// `RL.LEAKYBUCKET key capacity rate`.
impl Syntax for LeakyBucketParams {
    const PARAMS: &'static [Word] = &[
        Word {
            name: "capacity",
            kind: Kind::Integer,
            summary: "The most requests the queue holds: a whole number from 1 to 2^53-1.",
        },
        Word {
            name: "rate",
            kind: Kind::Decimal,
            summary: "Requests leaving the queue a second: a decimal greater than 0 (0.5, 1000).",
        },
    ];

    const SUMMARY: &'static str = "Leaky bucket as a queue: a request joins while fewer than capacity are queued; they leave at rate a second. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms] and, when allowed, delay_ms.";

    fn from_words(words: &[&[u8]]) -> Result<Self, CommandError> {
        let (capacity, rate_per_s) = capacity_and_rate(words)?;
        Ok(Self {
            capacity,
            rate_per_s,
        })
    }

    const EXAMPLE: &'static [&'static str] = &["10", "2"];

    fn check(&self) -> Result<(), &'static str> {
        check_capacity_and_rate(self.capacity, self.rate_per_s)
    }

    fn to_words(&self) -> Vec<String> {
        vec![
            self.capacity.to_string(),
            crate::words::values::rate_word(self.rate_per_s),
        ]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeakyBucket {
    params: LeakyBucketParams,
    /// The drain time (when the queue is empty) and the last update.
    schedule: Schedule,
}

impl Algorithm for LeakyBucket {
    type Params = LeakyBucketParams;

    fn fresh(params: LeakyBucketParams, now_ms: i64) -> Self {
        Self {
            params,
            schedule: Schedule::fresh(now_ms),
        }
    }

    fn params(&self) -> LeakyBucketParams {
        self.params
    }

    fn limit_of(limit: u64, window_ms: u64) -> LeakyBucketParams {
        LeakyBucketParams {
            capacity: limit,
            rate_per_s: limit as f64 * 1000.0 / window_ms as f64,
        }
    }

    /// The queue carries over as what it is: requests already given their
    /// turns, which still leave at them. So the drain time is kept, and new
    /// requests queue behind them at the new rate (the level, counted in
    /// units of the new interval, scales by old / new interval). The queue is
    /// then cut to the new capacity: the drain time is clamped to
    /// `capacity' * I'` after the key was last used (see
    /// [`Schedule::reconfigure`]).
    fn reconfigure(&mut self, params: LeakyBucketParams, now_ms: i64) {
        self.params = params;
        self.schedule.reconfigure(params.pace(), now_ms);
    }

    fn last_seen_ms(&self) -> i64 {
        self.schedule.updated_ms
    }

    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        let (decision, until_turn_ms) = self.schedule.check(self.params.pace(), now_ms, cost, mode);
        Decision {
            delay_ms: decision.allowed.then_some(until_turn_ms),
            ..decision
        }
    }

    /// The default's answer, without its copy of the whole state: a take
    /// under the stored parameters is checked on a copy of the schedule
    /// alone (24 bytes, kept when the request is allowed), inlined into the
    /// engine's take; the rest (new parameters, a peek) is the default's
    /// copy, out of line.
    #[inline(always)]
    fn check_stored(
        &mut self,
        params: LeakyBucketParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if mode != Mode::Take || self.params != params {
            return self.check_copy_out_of_line(params, now_ms, cost, mode);
        }
        let (decision, until_turn_ms) = self.schedule.take_if_allowed(params.pace(), now_ms, cost);
        if !decision.allowed {
            return (decision, false);
        }
        let decision = Decision {
            delay_ms: Some(until_turn_ms),
            ..decision
        };
        (decision, true)
    }
}

impl State for LeakyBucket {
    fn describe(&self, _now_ms: i64) -> Vec<(&'static str, Field)> {
        vec![
            ("capacity", Field::Int(self.params.capacity as i64)),
            ("rate_per_s", Field::Float(self.params.rate_per_s)),
            ("empty_at_ms", Field::Int(self.schedule.fresh_at_ms())),
            ("updated_ms", Field::Int(self.schedule.updated_ms)),
        ]
    }

    /// The drain time, rounded up to the millisecond. Inlined always: twice
    /// on every check.
    #[inline(always)]
    fn fresh_at_ms(&self) -> i64 {
        self.schedule.fresh_at_ms()
    }

    /// `capacity` u64, `rate_per_s` f64, then the schedule (`updated_ms`,
    /// the drain time in ns as an i128); 40 bytes.
    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.capacity);
        put_f64(out, self.params.rate_per_s);
        self.schedule.encode(out);
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let capacity = input.u64()?;
        let rate_per_s = input.f64()?;
        let schedule = Schedule::read(input)?;
        let params = LeakyBucketParams {
            capacity,
            rate_per_s,
        };
        params.check().map_err(DecodeError)?;
        schedule.validate(params.pace(), "drain time out of range")?;
        Ok(Self { params, schedule })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{call, stored_and_new_when_fresh};
    use crate::algorithms::{ms_to_ns, MAX_AMOUNT, MAX_TIMESTAMP_MS};
    use proptest::prelude::*;

    const T0: i64 = 1_700_000_000_000;

    fn params(capacity: u64, rate_per_s: f64) -> LeakyBucketParams {
        LeakyBucketParams {
            capacity,
            rate_per_s,
        }
    }

    /// `(allowed, remaining, retry_after_ms, reset_after_ms, delay_ms)`.
    fn summary(d: Decision) -> (bool, u64, i64, i64, Option<i64>) {
        (
            d.allowed,
            d.remaining,
            d.retry_after_ms,
            d.reset_after_ms,
            d.delay_ms,
        )
    }

    #[test]
    fn requests_arriving_together_are_let_out_one_interval_apart() {
        let mut s = None;
        let p = params(5, 10.0);
        for (i, left) in [4, 3, 2, 1, 0].into_iter().enumerate() {
            let d = call(&mut s, p, T0, 1, Mode::Take);
            let waited = 100 * i as i64;
            assert_eq!(summary(d), (true, left, 0, waited + 100, Some(waited)));
            assert_eq!(d.limit, 5);
        }
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 100, 500, None));
    }

    #[test]
    fn a_steady_stream_faster_than_the_rate_gets_growing_delays() {
        let mut s = None;
        let p = params(3, 10.0);
        // One request every 50 ms against 10/s: each acts 100 ms after the
        // one before, until the queue is full.
        let expected = [Some(0), Some(50), Some(100), Some(150), Some(200), None];
        for (i, delay) in expected.into_iter().enumerate() {
            let now = T0 + 50 * i as i64;
            let d = call(&mut s, p, now, 1, Mode::Take);
            assert_eq!(d.delay_ms, delay, "request {i}");
            if let Some(delay) = delay {
                assert_eq!(now + delay, T0 + 100 * i as i64);
            } else {
                // 3.5 units would be queued; room for one at T0 + 300.
                assert_eq!(d.retry_after_ms, 50);
            }
        }
    }

    #[test]
    fn a_request_finding_the_queue_empty_acts_at_once() {
        let mut s = None;
        let p = params(2, 1.0);
        call(&mut s, p, T0, 2, Mode::Take);
        let d = call(&mut s, p, T0 + 2000, 1, Mode::Take);
        assert_eq!(summary(d), (true, 1, 0, 1000, Some(0)));
        let d = call(&mut s, p, T0 + 2500, 1, Mode::Take);
        assert_eq!(summary(d), (true, 0, 0, 1500, Some(500)));
    }

    #[test]
    fn retry_after_is_exact_to_the_millisecond() {
        // I = 1/3 s: times that are not whole milliseconds.
        let p = params(4, 3.0);
        for cost in 1..=4 {
            let mut s = None;
            call(&mut s, p, T0, 3, Mode::Take);
            call(&mut s, p, T0 + 123, 1, Mode::Take);
            let d = call(&mut s, p, T0 + 200, cost, Mode::Peek);
            assert!(!d.allowed, "cost {cost}");
            let at = T0 + 200 + d.retry_after_ms;
            assert!(
                !call(&mut s, p, at - 1, cost, Mode::Peek).allowed,
                "cost {cost}"
            );
            assert!(call(&mut s, p, at, cost, Mode::Peek).allowed, "cost {cost}");
        }
    }

    #[test]
    fn fractional_intervals_round_each_turn_up() {
        let mut s = None;
        let p = params(10, 3.0);
        let delays: Vec<Option<i64>> = (0..4)
            .map(|_| call(&mut s, p, T0, 1, Mode::Take).delay_ms)
            .collect();
        assert_eq!(delays, [Some(0), Some(334), Some(667), Some(1000)]);
        assert_eq!(p.leak_interval_ns(), 333_333_333);
    }

    #[test]
    fn cost_takes_that_much_room_and_time() {
        let mut s = None;
        let p = params(5, 2.0);
        let d = call(&mut s, p, T0, 3, Mode::Take);
        assert_eq!(summary(d), (true, 2, 0, 1500, Some(0)));
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(summary(d), (true, 1, 0, 2000, Some(1500)));
        // 4 queued, 2 more need the queue down to 3: at T0 + 500.
        let d = call(&mut s, p, T0, 2, Mode::Take);
        assert_eq!(summary(d), (false, 1, 500, 2000, None));
    }

    #[test]
    fn cost_above_capacity_can_never_be_allowed() {
        let mut s = None;
        let d = call(&mut s, params(5, 1.0), T0, 6, Mode::Take);
        assert_eq!(summary(d), (false, 5, -1, 0, None));
        assert!(s.is_none(), "a denial stores nothing");
    }

    #[test]
    fn a_denial_leaves_the_stored_state_unchanged() {
        let mut s = None;
        let p = params(2, 1.0);
        call(&mut s, p, T0, 2, Mode::Take);
        let before = s.clone();
        assert!(!call(&mut s, p, T0 + 300, 1, Mode::Take).allowed);
        assert_eq!(s, before);
    }

    #[test]
    fn peek_answers_without_taking() {
        let mut s = None;
        let p = params(4, 1.0);
        let d = call(&mut s, p, T0, 3, Mode::Peek);
        assert_eq!(summary(d), (true, 4, 0, 0, Some(0)));
        assert!(s.is_none());
        call(&mut s, p, T0, 3, Mode::Take);
        let before = s.clone();
        let d = call(&mut s, p, T0, 1, Mode::Peek);
        assert_eq!(summary(d), (true, 1, 0, 3000, Some(3000)));
        let d = call(&mut s, p, T0, 2, Mode::Peek);
        assert_eq!(summary(d), (false, 1, 1000, 3000, None));
        assert_eq!(s, before);
    }

    #[test]
    fn a_clock_stepping_back_means_no_time_passed() {
        let mut s = None;
        let p = params(2, 1.0);
        call(&mut s, p, T0, 2, Mode::Take);
        let d = call(&mut s, p, T0 - 60_000, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1000, 2000, None));
        let d = call(&mut s, p, T0 + 1000, 1, Mode::Take);
        assert_eq!(d.delay_ms, Some(1000));
    }

    #[test]
    fn reset_is_when_the_queue_is_empty() {
        let mut s = None;
        let p = params(10, 0.5);
        let d = call(&mut s, p, T0, 3, Mode::Take);
        assert_eq!(d.reset_after_ms, 6000);
        assert_eq!(s.as_ref().map(|s| s.fresh_at_ms()), Some(T0 + 6000));
        let d = call(&mut s, p, T0 + 6000, 1, Mode::Peek);
        assert_eq!(summary(d), (true, 10, 0, 0, Some(0)));
    }

    #[test]
    fn a_new_rate_keeps_the_turns_already_given() {
        let mut s = None;
        call(&mut s, params(10, 1.0), T0, 4, Mode::Take);
        // Queued until T0 + 4 s; at 4/s that is 16 units of room.
        let p = params(20, 4.0);
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(summary(d), (true, 3, 0, 4250, Some(4000)));
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(d.delay_ms, Some(4250));
    }

    #[test]
    fn a_smaller_capacity_cuts_the_queue() {
        let mut s = None;
        call(&mut s, params(10, 1.0), T0, 10, Mode::Take);
        let p = params(2, 1.0);
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1000, 2000, None));
        // Still the old parameters stored: the retry_after holds anyway.
        let d = call(&mut s, p, T0 + 999, 1, Mode::Take);
        assert_eq!(summary(d), (false, 0, 1, 1001, None));
        let d = call(&mut s, p, T0 + 1000, 1, Mode::Take);
        assert_eq!(summary(d), (true, 0, 0, 2000, Some(1000)));
        assert_eq!(s.as_ref().map(|s| s.params()), Some(p));
    }

    #[test]
    fn a_larger_capacity_gives_no_more_than_the_room_left() {
        let mut s = None;
        call(&mut s, params(3, 1.0), T0, 3, Mode::Take);
        let d = call(&mut s, params(5, 1.0), T0, 1, Mode::Peek);
        assert_eq!((d.limit, d.remaining, d.delay_ms), (5, 2, Some(3000)));
    }

    #[test]
    fn the_leak_interval_is_clamped_to_sane_bounds() {
        assert_eq!(params(1, 1e12).leak_interval_ns(), 1);
        assert_eq!(params(1, 1e-300).leak_interval_ns(), MAX_INTERVAL_NS);
        assert_eq!(params(1, 0.0).leak_interval_ns(), MAX_INTERVAL_NS);
        assert_eq!(params(1, f64::NAN).leak_interval_ns(), MAX_INTERVAL_NS);
        assert_eq!(params(1, 7.0).leak_interval_ns(), 142_857_143);
    }

    #[test]
    fn the_largest_parameters_do_not_overflow() {
        let p = params(MAX_AMOUNT, 1e-300);
        let mut s = None;
        let d = call(&mut s, p, T0, MAX_AMOUNT, Mode::Take);
        assert_eq!((d.allowed, d.remaining, d.delay_ms), (true, 0, Some(0)));
        assert_eq!(d.reset_after_ms, MAX_TIMESTAMP_MS - T0, "saturated");
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(
            (d.allowed, d.retry_after_ms),
            (false, MAX_DURATION_MS as i64)
        );
        let mut buf = Vec::new();
        if let Some(state) = &s {
            state.encode_body(&mut buf);
        }
        assert_eq!(LeakyBucket::decode_body(&mut Reader::new(&buf)).ok(), s);
        let odd = params(u64::MAX, f64::INFINITY);
        call(&mut None, odd, -T0, u64::MAX, Mode::Take);
        call(&mut s, odd, T0, u64::MAX, Mode::Take);
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_values() {
        let mut s = None;
        call(&mut s, params(7, 3.0), T0, 4, Mode::Take);
        let state = s.unwrap_or_else(|| LeakyBucket::fresh(params(1, 1.0), 0));
        let mut buf = Vec::new();
        state.encode_body(&mut buf);
        assert_eq!(buf.len(), 40);
        let mut r = Reader::new(&buf);
        assert_eq!(LeakyBucket::decode_body(&mut r), Ok(state.clone()));
        assert_eq!(r.remaining(), 0);
        assert!(LeakyBucket::decode_body(&mut Reader::new(&buf[..39])).is_err());

        let bad = |f: &dyn Fn(&mut LeakyBucket)| {
            let mut bad = state.clone();
            f(&mut bad);
            let mut buf = Vec::new();
            bad.encode_body(&mut buf);
            LeakyBucket::decode_body(&mut Reader::new(&buf)).is_err()
        };
        assert!(bad(&|b| b.params.capacity = 0));
        assert!(bad(&|b| b.params.capacity = MAX_AMOUNT + 1));
        assert!(bad(&|b| b.params.rate_per_s = 0.0));
        assert!(bad(&|b| b.params.rate_per_s = f64::NAN));
        assert!(bad(&|b| b.params.rate_per_s = f64::INFINITY));
        assert!(bad(&|b| b.schedule.updated_ms = MAX_TIMESTAMP_MS + 1));
        assert!(bad(&|b| b.schedule.due_ns = ms_to_ns(T0) - 1));
        assert!(bad(
            &|b| b.schedule.due_ns = ms_to_ns(T0) + 7 * 333_333_333 + 1
        ));
        assert!(!bad(&|b| b.schedule.due_ns = ms_to_ns(T0) + 7 * 333_333_333));
    }

    /// `leak_interval_ns` as first written: `f64::round`, then `as i128`.
    fn leak_interval_by_the_library(rate_per_s: f64) -> i128 {
        if rate_per_s > 0.0 {
            ((1e9 / rate_per_s).round() as i128).clamp(1, MAX_INTERVAL_NS)
        } else {
            MAX_INTERVAL_NS
        }
    }

    #[test]
    fn the_leak_interval_is_the_librarys_on_edge_rates() {
        let mut rates = vec![
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -1.0,
        ];
        // Rates whose intervals are whole or half nanoseconds, at the
        // clamps' bounds and past `i64`'s range.
        // From 2^52 on, where adding a half rounds to even, odd ones too.
        let two52 = 2f64.powi(52);
        for interval in [
            0.5,
            1.0,
            1.5,
            2.5,
            1e6,
            1e9 / 7.0,
            two52 + 1.0,
            two52 + 3.0,
            2.0 * two52 - 1.0,
            MAX_INTERVAL_NS as f64,
            2f64.powi(63),
            1e300,
        ] {
            let rate = 1e9 / interval;
            rates.extend([rate, rate.next_up(), rate.next_down()]);
        }
        for rate in rates {
            assert_eq!(
                params(1, rate).leak_interval_ns(),
                leak_interval_by_the_library(rate),
                "{rate:e}"
            );
        }
    }

    proptest! {
        #[test]
        fn the_leak_interval_is_the_librarys_on_any_rate(
            bits in any::<u64>(),
            rate in 1e-9f64..1e10,
            interval in 0.0f64..4e16,
        ) {
            for rate in [f64::from_bits(bits), rate, 1e9 / interval] {
                prop_assert_eq!(params(1, rate).leak_interval_ns(), leak_interval_by_the_library(rate));
            }
        }
    }

    proptest! {
        /// Callers that wait their delays act at the rate: never closer
        /// than `cost * I` after the previous allowed request (up to the
        /// millisecond rounding of each turn, which never accumulates), and
        /// a denial's retry_after is exact.
        #[test]
        fn delays_never_let_requests_act_closer_than_the_rate(
            capacity in 1u64..10,
            rate in prop::sample::select(vec![0.5, 1.0, 2.0, 3.0, 7.0, 10.0, 33.3, 250.0, 1000.0]),
            steps in proptest::collection::vec((0i64..400, 1u64..4), 1..80),
        ) {
            let p = params(capacity, rate);
            let interval = p.leak_interval_ns();
            let mut s = None;
            let mut now = T0;
            let mut acted: Vec<(i64, u64)> = Vec::new();
            for (dt, cost) in steps {
                now += dt;
                let d = call(&mut s, p, now, cost, Mode::Take);
                prop_assert!(d.remaining <= capacity);
                match d.delay_ms {
                    Some(delay) => {
                        prop_assert!(d.allowed);
                        prop_assert!(ms_to_ns(delay) < p.pace().span_ns() + NS_PER_MS);
                        acted.push((now + delay, cost));
                    }
                    None if cost > capacity => {
                        prop_assert!(!d.allowed && d.retry_after_ms == -1);
                    }
                    None => {
                        prop_assert!(!d.allowed && d.retry_after_ms > 0);
                        let wait = d.retry_after_ms;
                        prop_assert!(!call(&mut s.clone(), p, now + wait - 1, cost, Mode::Peek).allowed);
                        prop_assert!(call(&mut s.clone(), p, now + wait, cost, Mode::Peek).allowed);
                    }
                }
            }
            for i in 0..acted.len() {
                let mut leaked = 0i128;
                for j in i + 1..acted.len() {
                    leaked += i128::from(acted[j - 1].1) * interval;
                    let whole_ms = leaked / NS_PER_MS;
                    prop_assert!(i128::from(acted[j].0 - acted[i].0) >= whole_ms);
                }
            }
        }

        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = LeakyBucket::decode_body(&mut Reader::new(&bytes));
        }

        /// A stored state checked in place (`check_stored`) gives the
        /// decision, and is left as, the copy the default `check_stored`
        /// checked (`check_with`, kept when taken), for any schedule, time,
        /// cost, mode and parameters (the same or others).
        #[test]
        fn a_stored_state_is_checked_in_place_as_on_a_copy(
            capacity in prop_oneof![1u64..10, Just(MAX_AMOUNT), any::<u64>()],
            // Not NaN, which no state holds, and which would make the two
            // states unequal (`PartialEq`) however alike.
            rate in prop_oneof![1e-9f64..1e10, any::<u64>().prop_map(f64::from_bits)]
                .prop_filter("a number", |r| !r.is_nan()),
            due_ns in prop_oneof![any::<i128>(), any::<i64>().prop_map(i128::from), (-3_000_000_000i128..3_000_000_000).prop_map(|d| ms_to_ns(T0) + d)],
            updated_ms in prop_oneof![any::<i64>(), (-3_000i64..3_000).prop_map(|d| T0 + d), Just(MAX_TIMESTAMP_MS)],
            now in prop_oneof![any::<i64>(), (-3_000i64..3_000).prop_map(|d| T0 + d)],
            cost in prop_oneof![0u64..12, any::<u64>()],
            take in any::<bool>(),
            other in proptest::option::of((1u64..10, 0.5f64..100.0)),
        ) {
            let stored = LeakyBucket {
                params: params(capacity, rate),
                schedule: Schedule { due_ns, updated_ms },
            };
            let asked = other.map_or(stored.params, |(c, r)| params(c, r));
            let mode = if take { Mode::Take } else { Mode::Peek };
            let (expected, kept) = match LeakyBucket::check_with(Some(&stored), asked, now, cost, mode) {
                (decision, Some(next)) => (decision, next),
                (decision, None) => (decision, stored.clone()),
            };
            let mut in_place = stored.clone();
            let (decision, changed) = in_place.check_stored(asked, now, cost, mode);
            prop_assert_eq!(decision, expected);
            prop_assert_eq!(changed, expected.allowed && take);
            prop_assert_eq!(&in_place, &kept);
        }

        /// Unlike the token bucket's float refill, the drain time is exact
        /// (integer ns, rounded up to the ms): at its fresh moment the
        /// state answers a request of its whole capacity as a new key
        /// would, for any capacity and rate accepted (when the moment comes
        /// before the last time a state can carry).
        #[test]
        fn a_bucket_is_as_good_as_new_at_its_fresh_moment(
            bits in 0u32..=53,
            seed in any::<u64>(),
            exp in -9i32..=9,
            mantissa in 1.0f64..10.0,
            first in 0.0f64..=1.0,
            later in proptest::option::of((0i64..10_000_000, 0.0f64..=1.0)),
        ) {
            let capacity = 1 + seed % (1u64 << bits).min(MAX_AMOUNT);
            let p = params(capacity, mantissa * 10f64.powi(exp));
            let answers = stored_and_new_when_fresh(p, capacity, T0, first, later);
            prop_assume!(answers.is_some());
            if let Some((stored, new)) = answers {
                prop_assert_eq!(summary(stored), summary(new));
            }
        }
    }
}
