//! Token bucket.
//!
//! Terms: the bucket holds up to `capacity` tokens and starts full; it refills
//! continuously at `rate_per_s` tokens a second; a request of cost `c` is
//! allowed when at least `c` tokens are there, and takes them. Bursts of up to
//! `capacity` pass at once, and the long-run rate is `rate_per_s`.
//!
//! The state is the token count at the last update and the time of that
//! update: the count at any later time follows from the rate, so nothing has
//! to run in the background and a denial needs no write.

use super::{ceil_ms, Algorithm, Decision, Field, Mode, State, MAX_AMOUNT, MAX_TIMESTAMP_MS};
use crate::encoding::{ensure, put_f64, put_i64, put_u64, DecodeError, Reader};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucketParams {
    /// The most tokens the bucket holds: the largest burst.
    pub capacity: u64,
    /// Tokens added per second.
    pub rate_per_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    params: TokenBucketParams,
    /// Tokens in the bucket at `updated_ms`, in `0..=capacity`.
    tokens: f64,
    /// When `tokens` was last brought up to date (Unix ms).
    updated_ms: i64,
}

/// Rounds away the float noise of a refill (0.3 * 3 = 0.8999999999999999), so
/// that a bucket that should hold a whole token does.
fn snap(tokens: f64) -> f64 {
    let whole = tokens.round();
    if (tokens - whole).abs() <= 1e-9 * whole.abs().max(1.0) {
        whole
    } else {
        tokens
    }
}

impl TokenBucket {
    /// Tokens now in the bucket.
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    fn refill(&mut self, now_ms: i64) {
        let elapsed_ms = now_ms.saturating_sub(self.updated_ms);
        if elapsed_ms > 0 {
            let refilled = self.tokens + elapsed_ms as f64 * self.params.rate_per_s / 1000.0;
            self.tokens = snap(refilled.min(self.params.capacity as f64));
            self.updated_ms = now_ms;
        }
    }

    /// Milliseconds until the bucket has `tokens` more than now.
    fn ms_to_gain(&self, tokens: f64) -> i64 {
        ceil_ms(tokens / self.params.rate_per_s)
    }
}

impl Algorithm for TokenBucket {
    type Params = TokenBucketParams;

    fn fresh(params: TokenBucketParams, now_ms: i64) -> Self {
        Self {
            params,
            tokens: params.capacity as f64,
            updated_ms: now_ms,
        }
    }

    fn params(&self) -> TokenBucketParams {
        self.params
    }

    /// The new parameters apply from the last stored update on: the tokens
    /// then carry over, clamped to the new capacity, and refill at the new
    /// rate since. Measured from the last update rather than from `now`
    /// because a denial stores nothing: every call until the next allowed one
    /// re-applies the change to the same stored state, so an answer (and the
    /// `retry_after_ms` it promises) must not depend on when it is asked.
    fn reconfigure(&mut self, params: TokenBucketParams, _now_ms: i64) {
        self.params = params;
        self.tokens = self.tokens.min(params.capacity as f64);
    }

    fn last_seen_ms(&self) -> i64 {
        self.updated_ms
    }

    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        self.refill(now_ms);
        let capacity = self.params.capacity;
        let wanted = cost as f64;
        let allowed = cost <= capacity && self.tokens >= wanted;
        let retry_after_ms = if allowed {
            0
        } else if cost > capacity {
            -1
        } else {
            self.ms_to_gain(wanted - self.tokens).max(1)
        };
        if allowed && mode == Mode::Take {
            self.tokens -= wanted;
        }
        Decision {
            allowed,
            limit: capacity,
            remaining: self.tokens.floor() as u64,
            retry_after_ms,
            reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }
}

impl State for TokenBucket {
    const TAG: u8 = 1;
    const NAME: &'static str = "tokenbucket";

    fn describe(&self) -> Vec<(&'static str, Field)> {
        vec![
            ("capacity", Field::Int(self.params.capacity as i64)),
            ("rate_per_s", Field::Float(self.params.rate_per_s)),
            ("tokens", Field::Float(self.tokens)),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    fn fresh_at_ms(&self) -> i64 {
        let missing = self.params.capacity as f64 - self.tokens;
        self.updated_ms.saturating_add(self.ms_to_gain(missing))
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.capacity);
        put_f64(out, self.params.rate_per_s);
        put_f64(out, self.tokens);
        put_i64(out, self.updated_ms);
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let capacity = input.u64()?;
        let rate_per_s = input.f64()?;
        let tokens = input.f64()?;
        let updated_ms = input.i64()?;
        ensure(
            (1..=MAX_AMOUNT).contains(&capacity),
            "capacity out of range",
        )?;
        ensure(
            rate_per_s.is_finite() && rate_per_s > 0.0,
            "rate out of range",
        )?;
        ensure(
            tokens.is_finite() && (0.0..=capacity as f64).contains(&tokens),
            "tokens out of range",
        )?;
        ensure(
            (0..=MAX_TIMESTAMP_MS).contains(&updated_ms),
            "timestamp out of range",
        )?;
        Ok(Self {
            params: TokenBucketParams {
                capacity,
                rate_per_s,
            },
            tokens,
            updated_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn params(capacity: u64, rate_per_s: f64) -> TokenBucketParams {
        TokenBucketParams {
            capacity,
            rate_per_s,
        }
    }

    /// Runs one command against `state` the way the Redis layer does.
    fn call(
        state: &mut Option<TokenBucket>,
        p: TokenBucketParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> Decision {
        let (decision, next) = TokenBucket::check_with(state.as_ref(), p, now_ms, cost, mode);
        if let Some(next) = next {
            *state = Some(next);
        }
        decision
    }

    #[test]
    fn a_fresh_bucket_allows_a_burst_of_capacity_then_denies() {
        let mut s = None;
        let p = params(3, 1.0);
        for left in [2, 1, 0] {
            let d = call(&mut s, p, T0, 1, Mode::Take);
            assert!(d.allowed);
            assert_eq!((d.limit, d.remaining, d.retry_after_ms), (3, left, 0));
        }
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after_ms, 1000);
        assert_eq!(d.reset_after_ms, 3000);
    }

    #[test]
    fn tokens_refill_continuously_at_the_rate() {
        let mut s = None;
        let p = params(10, 2.0);
        call(&mut s, p, T0, 10, Mode::Take);
        assert!(!call(&mut s, p, T0 + 499, 1, Mode::Take).allowed);
        let d = call(&mut s, p, T0 + 500, 1, Mode::Take);
        assert!(d.allowed, "one token after half a second at 2/s");
        assert_eq!(d.remaining, 0);
        let d = call(&mut s, p, T0 + 2500, 1, Mode::Peek);
        assert_eq!(d.remaining, 4);
    }

    #[test]
    fn refill_stops_at_capacity() {
        let mut s = None;
        let p = params(5, 100.0);
        call(&mut s, p, T0, 1, Mode::Take);
        let d = call(&mut s, p, T0 + 3_600_000, 1, Mode::Take);
        assert_eq!(d.remaining, 4);
    }

    #[test]
    fn retry_after_is_the_wait_for_the_missing_tokens() {
        let mut s = None;
        let p = params(10, 4.0);
        call(&mut s, p, T0, 10, Mode::Take);
        let d = call(&mut s, p, T0 + 100, 3, Mode::Take);
        assert!(!d.allowed);
        // 0.4 tokens there, 2.6 missing at 4/s = 650 ms.
        assert_eq!(d.retry_after_ms, 650);
        assert!(!call(&mut s, p, T0 + 749, 3, Mode::Take).allowed);
        assert!(call(&mut s, p, T0 + 750, 3, Mode::Take).allowed);
    }

    #[test]
    fn cost_takes_that_many_tokens() {
        let mut s = None;
        let p = params(10, 1.0);
        let d = call(&mut s, p, T0, 7, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 3));
        let d = call(&mut s, p, T0, 4, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (false, 3));
    }

    #[test]
    fn cost_above_capacity_can_never_be_allowed() {
        let mut s = None;
        let d = call(&mut s, params(5, 1.0), T0, 6, Mode::Take);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, -1);
        assert!(s.is_none(), "a denial stores nothing");
    }

    #[test]
    fn a_denial_leaves_the_stored_state_unchanged() {
        let mut s = None;
        let p = params(2, 1.0);
        call(&mut s, p, T0, 2, Mode::Take);
        let before = s.clone();
        call(&mut s, p, T0 + 300, 1, Mode::Take);
        assert_eq!(s, before);
    }

    #[test]
    fn peek_answers_without_taking() {
        let mut s = None;
        let p = params(4, 1.0);
        let d = call(&mut s, p, T0, 3, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 4, 0));
        assert!(s.is_none());
        call(&mut s, p, T0, 3, Mode::Take);
        let before = s.clone();
        let d = call(&mut s, p, T0, 2, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 1, 1000));
        assert_eq!(s, before);
    }

    #[test]
    fn a_clock_stepping_back_means_no_time_passed() {
        let mut s = None;
        let p = params(2, 1.0);
        call(&mut s, p, T0, 2, Mode::Take);
        let d = call(&mut s, p, T0 - 60_000, 1, Mode::Take);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, 1000);
        assert!(call(&mut s, p, T0 + 1000, 1, Mode::Take).allowed);
    }

    #[test]
    fn a_smaller_capacity_clamps_the_tokens() {
        let mut s = None;
        call(&mut s, params(10, 1.0), T0, 1, Mode::Take);
        let d = call(&mut s, params(4, 1.0), T0, 1, Mode::Take);
        assert_eq!((d.limit, d.remaining), (4, 3));
    }

    #[test]
    fn a_new_rate_applies_from_the_last_update_on() {
        let mut s = None;
        call(&mut s, params(10, 1.0), T0, 10, Mode::Take);
        let faster = params(10, 10.0);
        let d = call(&mut s, faster, T0 + 50, 1, Mode::Take);
        assert_eq!((d.allowed, d.retry_after_ms), (false, 50));
        let d = call(&mut s, faster, T0 + 100, 1, Mode::Take);
        assert!(d.allowed, "the retry_after promised after a change holds");
        let d = call(&mut s, faster, T0 + 600, 1, Mode::Peek);
        assert_eq!(d.remaining, 5);
    }

    #[test]
    fn reset_is_when_the_bucket_is_full_again() {
        let mut s = None;
        let p = params(10, 0.5);
        let d = call(&mut s, p, T0, 3, Mode::Take);
        assert_eq!(d.reset_after_ms, 6000);
        assert_eq!(s.as_ref().map(|s| s.fresh_at_ms()), Some(T0 + 6000));
    }

    #[test]
    fn fractional_rates_refill_without_float_drift() {
        let mut s = None;
        let p = params(1, 0.3);
        call(&mut s, p, T0, 1, Mode::Take);
        // 0.3/s: one token after 3333.33 ms; float arithmetic must not make
        // it later than the ms the retry_after promised.
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!(d.retry_after_ms, 3334);
        assert!(call(&mut s, p, T0 + 3334, 1, Mode::Take).allowed);
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_values() {
        let mut s = None;
        call(&mut s, params(7, 0.25), T0, 3, Mode::Take);
        let state = s.unwrap_or_else(|| TokenBucket::fresh(params(1, 1.0), 0));
        let mut buf = Vec::new();
        state.encode_body(&mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(TokenBucket::decode_body(&mut r), Ok(state.clone()));
        assert_eq!(r.remaining(), 0);

        let mut bad = state.clone();
        bad.tokens = 8.0;
        let mut buf = Vec::new();
        bad.encode_body(&mut buf);
        assert!(TokenBucket::decode_body(&mut Reader::new(&buf)).is_err());
        assert!(TokenBucket::decode_body(&mut Reader::new(&buf[..10])).is_err());
    }
}
