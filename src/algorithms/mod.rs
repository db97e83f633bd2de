//! The rate-limiting algorithms, as plain Rust.
//!
//! Nothing in this folder knows about Redis. Each algorithm is a state value
//! with its parameters inside it, and one entry point, [`Algorithm::check`],
//! that takes the time explicitly (`now_ms`, Unix milliseconds) so that every
//! time-dependent behaviour can be tested with a fake clock. The Redis layer
//! (`crate::redis`) only parses, loads, calls, stores, replicates and replies.
//!
//! Which algorithms there are is said once, in [`registry`]: everything that
//! lists them (commands, types, `RL.ALL`, counters, fuzz targets, benches) is
//! made from that list.

pub mod concurrency;
pub mod expiry;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
mod lease_ends;
pub mod migration;
pub mod partial;
pub mod penalty;
pub mod registry;
mod schedule;
pub mod shapes;
pub mod sliding_counter;
pub mod sliding_log;
#[cfg(test)]
mod strictness;
#[cfg(test)]
pub(crate) mod testkit;
pub mod token_bucket;

use crate::encoding::{ensure, DecodeError, Horizon, Reader};
use crate::words::syntax::Syntax;

/// The bounds of the values a command accepts (`crate::words::values`),
/// which no state may exceed either.
pub use crate::words::values::MAX_AMOUNT;

pub use crate::encoding::{MAX_DURATION_MS, MAX_TIMESTAMP_MS};

/// What a check answers, the same shape for every algorithm, so that replies,
/// statistics and HTTP headers are written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is (or, for a peek, would be) allowed.
    pub allowed: bool,
    /// The most the key allows at once: capacity, limit or burst.
    pub limit: u64,
    /// How much more would be allowed right now, after this call.
    pub remaining: u64,
    /// 0 when allowed; otherwise milliseconds until the same request would be
    /// allowed; -1 when it never can be (cost above the limit).
    pub retry_after_ms: i64,
    /// Milliseconds until the key is back to its fresh state.
    pub reset_after_ms: i64,
    /// Leaky bucket only: how long an allowed caller should wait before
    /// acting so that the output flows at the steady rate. Replied as a 6th
    /// element when present.
    pub delay_ms: Option<i64>,
}

impl Decision {
    /// The answer of several tiers checked together (RL.ALL): allowed only
    /// when every tier allows; the limit and remaining of the tightest tier
    /// (the least remaining, then the smallest limit); the longest wait
    /// (never, -1, when any tier can never allow); the latest reset.
    pub fn all_of(tiers: &[Decision]) -> Decision {
        let tightest = tiers
            .iter()
            .min_by_key(|d| (d.remaining, d.limit))
            .copied()
            .unwrap_or(Decision {
                allowed: false,
                limit: 0,
                remaining: 0,
                retry_after_ms: -1,
                reset_after_ms: 0,
                delay_ms: None,
            });
        let allowed = !tiers.is_empty() && tiers.iter().all(|d| d.allowed);
        let retry_after_ms = if allowed {
            0
        } else if tiers.iter().any(|d| d.retry_after_ms < 0) {
            -1
        } else {
            tiers.iter().map(|d| d.retry_after_ms).max().unwrap_or(0)
        };
        Decision {
            allowed,
            limit: tightest.limit,
            remaining: tightest.remaining,
            retry_after_ms,
            reset_after_ms: tiers.iter().map(|d| d.reset_after_ms).max().unwrap_or(0),
            delay_ms: None,
        }
    }
}

/// Whether a check takes what it allows, or only looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Consume `cost` when allowed.
    Take,
    /// Answer what would happen and change nothing that matters: `remaining`
    /// is what is available now, before anything is taken.
    Peek,
}

/// One value of RL.INFO's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    /// A whole number (counts, limits, Unix ms, ms).
    Int(i64),
    /// A rate or a fractional amount.
    Float(f64),
    /// Bytes such as a lease id.
    Text(Vec<u8>),
    /// Several values (a sliding counter's buckets, a limiter's leases).
    List(Vec<Field>),
}

/// What the registry says of a stored type (see [`registry`]); implemented
/// for every type listed there, and only there.
pub trait Registered {
    /// The tag that starts this value's encoding (see `crate::encoding`).
    const TAG: u8;
    /// The algorithm's name: its command without `RL.`, lower case; its word
    /// in `RL.ALL`; its name in `RL.INFO` and `INFO ratelimit`.
    const NAME: &'static str;
    /// The Redis data type's name (nine characters).
    const TYPE_NAME: &'static str;
}

/// Every value the module stores: its encoding, when it is as good as new,
/// and what it says about itself to a person (RL.INFO).
pub trait State: Registered + Clone + Sized {
    /// The moment (Unix ms) from which this state is as good as a fresh one:
    /// the key's expiry time.
    fn fresh_at_ms(&self) -> i64;

    /// Bytes of heap memory this state owns beyond its own size.
    fn heap_bytes(&self) -> usize {
        0
    }

    /// About how many allocations freeing this state frees, at least 1:
    /// Redis frees a value of more than 64 in a background thread when asked
    /// to (`UNLINK`, `lazyfree-lazy-*`), rather than in the command that
    /// deleted it (and any value of 0).
    fn free_effort(&self) -> usize {
        1
    }

    /// The name hash of the named policy whose stamp this state carries
    /// (`penalty::Stamp`); 0 for none: what `INFO ratelimit` counts a
    /// policy's keys by.
    fn policy_hash(&self) -> u64 {
        0
    }

    /// The parameters as last used, then the state as stored, as named
    /// fields (units in the names), as seen at `now_ms`: what has ended by
    /// then (a lease) is not shown, dropped from the state or not.
    fn describe(&self, now_ms: i64) -> Vec<(&'static str, Field)>;

    /// Append the encoding of the state, after its tag, to `out`.
    fn encode_body(&self, out: &mut Vec<u8>);

    /// Read a state written by [`State::encode_body`], rejecting anything
    /// that is not a state this code could have produced.
    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// The state's full encoding: its tag, then its body.
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(Self::TAG);
        self.encode_body(out);
    }

    /// Reads a full encoding written by [`State::encode`], every byte of it,
    /// none of its times after `horizon`.
    fn decode(bytes: &[u8], horizon: Horizon) -> Result<Self, DecodeError> {
        let mut input = Reader::within(bytes, horizon);
        ensure(input.u8()? == Self::TAG, "state is of another algorithm")?;
        let state = Self::decode_body(&mut input)?;
        input.finish()?;
        Ok(state)
    }
}

/// One rate-limiting algorithm: its state, which carries its parameters.
pub trait Algorithm: State {
    /// The numbers a caller gives with each check (capacity, rate, window...),
    /// and how they are written in a command.
    type Params: Syntax;

    /// A state as good as new: nothing used yet.
    fn fresh(params: Self::Params, now_ms: i64) -> Self;

    /// The parameters as last used.
    fn params(&self) -> Self::Params;

    /// Parameters under which a fresh key allows `limit` at once (costs
    /// counted), then gives it back at the pace of `limit` per `window_ms`
    /// (a bucket refills, a window ends or slides), a denial waiting at
    /// most about `window_ms` plus a third: how tests, examples and benches
    /// ask every algorithm of the registry for the same limit without
    /// writing its parameters. Both are at least 1 and in range.
    fn limit_of(limit: u64, window_ms: u64) -> Self::Params;

    /// Take on new parameters from `now_ms` on, carrying the state over in the
    /// way the README documents for this algorithm.
    fn reconfigure(&mut self, params: Self::Params, now_ms: i64);

    /// The latest time this state has seen. The Redis layer never calls
    /// [`Algorithm::check`] with an earlier time: a clock that steps backwards
    /// is treated as no time having passed.
    fn last_seen_ms(&self) -> i64;

    /// Decide on a request of `cost` at `now_ms` (never earlier than
    /// [`Algorithm::last_seen_ms`]). In [`Mode::Take`] an allowed request is
    /// taken from the state. The state may be brought up to date either way;
    /// callers keep it only when a request was taken.
    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision;

    /// For algorithms whose state is costly to copy (the sliding log): whether
    /// [`Algorithm::check`] at `now_ms` (already clamped) would allow `cost`,
    /// answered without changing anything. `None`, the default, means the
    /// algorithm does not offer this, and callers check on a copy.
    fn allows_in_place(&self, _now_ms: i64, _cost: u64) -> Option<bool> {
        None
    }

    /// Whether taking `cost` at `now_ms` under `params` would grow the state
    /// (an entry more in the sliding log), which the Redis layer refuses at
    /// `maxmemory`. States of a fixed size never grow: the default.
    fn grows_with(&self, _params: Self::Params, _now_ms: i64, _cost: u64) -> bool {
        false
    }

    /// For algorithms whose state is costly to copy (the sliding log): what
    /// [`Algorithm::check`] at `now_ms` (already clamped) would answer for a
    /// request that is not taken (a peek, or a denial), without changing or
    /// copying anything. `None`, the default, means the algorithm does not
    /// offer this. When the answer allows a request of [`Mode::Take`], the
    /// caller must not use it, but check and take.
    fn decide_in_place(&self, _now_ms: i64, _cost: u64) -> Option<Decision> {
        None
    }

    /// Gives back `amount` units that a request granted at `granted_at_ms`
    /// took and did not spend, at `now_ms` (already clamped, and not before
    /// `granted_at_ms`): the units given back, never more than `amount`, and
    /// never so many that the state holds more than a fresh one or less than
    /// nothing (see [`partial`]). `None`, the default, means the algorithm
    /// takes no refunds (and no partial grants: `Syntax::PARTIAL`).
    fn refund(&mut self, _now_ms: i64, _amount: u64, _granted_at_ms: i64) -> Option<u64> {
        None
    }

    /// [`Algorithm::check_with`] for a state already stored, updating it in
    /// place. Returns the decision and whether the state changed (a request
    /// was taken). When the algorithm can tell up front that the request will
    /// be taken, the check runs on the state itself, without a copy; when it
    /// can answer a request that will not be taken in place, it does.
    fn check_stored(
        &mut self,
        params: Self::Params,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if self.params() == params {
            let now_ms = now_ms.max(self.last_seen_ms());
            if mode == Mode::Take && self.allows_in_place(now_ms, cost) == Some(true) {
                return (self.check(now_ms, cost, Mode::Take), true);
            }
            if let Some(decision) = self.decide_in_place(now_ms, cost) {
                if !(decision.allowed && mode == Mode::Take) {
                    return (decision, false);
                }
            }
        }
        self.check_copy(params, now_ms, cost, mode)
    }

    /// [`Algorithm::check_copy`] kept out of line: for an algorithm whose
    /// own `check_stored` is inlined into the engine's take, so that the
    /// rarer path (a request that may be denied, new parameters, a peek)
    /// does not weigh on the path of a request taken in place.
    #[inline(never)]
    fn check_copy_out_of_line(
        &mut self,
        params: Self::Params,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        self.check_copy(params, now_ms, cost, mode)
    }

    /// What [`Algorithm::check_stored`] does when the state cannot be
    /// checked in place: [`Algorithm::check_with`] on a copy, kept when the
    /// request changed it. An algorithm that overrides `check_stored` ends
    /// with it too.
    #[inline]
    fn check_copy(
        &mut self,
        params: Self::Params,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        match Self::check_with(Some(self), params, now_ms, cost, mode) {
            (decision, Some(next)) => {
                *self = next;
                (decision, true)
            }
            (decision, None) => (decision, false),
        }
    }

    /// [`Algorithm::check_stored`] of a peek, on a state lent to read only:
    /// the same decision (a peek changes nothing there either).
    fn peek_stored(&self, params: Self::Params, now_ms: i64, cost: u64) -> Decision {
        if self.params() == params {
            let now_ms = now_ms.max(self.last_seen_ms());
            if let Some(decision) = self.decide_in_place(now_ms, cost) {
                return decision;
            }
        }
        Self::check_with(Some(self), params, now_ms, cost, Mode::Peek).0
    }

    /// The whole life of one command, shared by every algorithm: start from
    /// the stored state (or a fresh one), take on `params`, check at `now_ms`
    /// clamped to the latest time the state has seen (a clock that stepped
    /// backwards means no time has passed). Returns the decision and, only when
    /// a request was taken, the state to store: a denial or a peek leaves the
    /// stored state exactly as it was.
    fn check_with(
        stored: Option<&Self>,
        params: Self::Params,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, Option<Self>) {
        let (mut next, now_ms) = match stored {
            Some(stored) => {
                let mut next = stored.clone();
                let now_ms = now_ms.max(next.last_seen_ms());
                if next.params() != params {
                    next.reconfigure(params, now_ms);
                }
                (next, now_ms)
            }
            None => (Self::fresh(params, now_ms), now_ms),
        };
        let decision = next.check(now_ms, cost, mode);
        let taken = decision.allowed && mode == Mode::Take;
        (decision, taken.then_some(next))
    }
}

/// Nanoseconds in a millisecond, for the algorithms that keep exact times.
pub(crate) const NS_PER_MS: i128 = 1_000_000;

/// Unix ms to Unix ns.
pub(crate) fn ms_to_ns(ms: i64) -> i128 {
    i128::from(ms) * NS_PER_MS
}

/// `a / b`, truncated as `/` truncates, in 64 bits when both fit (nearly
/// always: times in ns until the year 2262, intervals, counts): one machine
/// division rather than the 128-bit division routine, on every check of the
/// algorithms that count in nanoseconds.
pub(crate) fn div_i128(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b != 0 && !(a == i64::MIN && b == -1) => i128::from(a / b),
        _ => a / b,
    }
}

/// Nanoseconds to milliseconds, rounded up, within `0..=MAX_TIMESTAMP_MS`.
pub(crate) fn ns_to_ms_ceil(ns: i128) -> i64 {
    // In 64 bits when it fits (see `div_i128`).
    if let Ok(ns) = i64::try_from(ns) {
        let per_ms = NS_PER_MS as i64;
        let ms = ns.div_euclid(per_ms) + i64::from(ns.rem_euclid(per_ms) > 0);
        return ms.clamp(0, MAX_TIMESTAMP_MS);
    }
    let ms = ns.div_euclid(NS_PER_MS) + i128::from(ns.rem_euclid(NS_PER_MS) > 0);
    i64::try_from(ms.clamp(0, i128::from(MAX_TIMESTAMP_MS))).unwrap_or(MAX_TIMESTAMP_MS)
}

/// Milliseconds, rounded up, for a duration given in seconds as a float;
/// saturates instead of overflowing, so no input can make it panic.
pub(crate) fn ceil_ms(seconds: f64) -> i64 {
    // Rounded up after the range is checked, where the integer conversion
    // rounds exactly (`f64::ceil` is a library call on this target: a
    // token bucket's check makes several).
    let ms = seconds * 1000.0;
    if ms.is_nan() || ms <= 0.0 {
        0
    } else if ms >= MAX_TIMESTAMP_MS as f64 {
        MAX_TIMESTAMP_MS
    } else {
        // 0 < ms < 2^53: the conversion truncates, which is rounding down,
        // and the truncated value converts back exactly.
        let down = ms as i64;
        down + i64::from((down as f64) < ms)
    }
}

/// `x.round()` (halves away from zero, the sign of a zero kept) without the
/// library call `f64::round` is on this target; a token bucket's refill
/// makes one on every check.
pub(crate) fn round(x: f64) -> f64 {
    // From 2^52 on every double is whole (and NaN and the infinities are
    // their own rounding): the library's answer, which is `x`.
    if x.is_nan() || x.abs() >= (1u64 << 52) as f64 {
        return x.round();
    }
    // |x| < 2^52: truncating is exact, and so is `x - whole` (both lie
    // within one binade of each other, or `whole` is 0).
    let whole = (x as i64 as f64).copysign(x);
    let fraction = x - whole;
    if fraction >= 0.5 {
        whole + 1.0
    } else if fraction <= -0.5 {
        whole - 1.0
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Doubles on both sides of every edge the rounding helpers have: 0,
    /// halves, whole numbers, 2^52, 2^53, the timestamp limit, the
    /// infinities and NaN.
    fn rounding_edges() -> Vec<f64> {
        let mut values = vec![
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
            f64::MIN,
            0.49999999999999994,
            -0.49999999999999994,
        ];
        for edge in [
            0.5,
            1.0,
            1.5,
            2.5,
            1e3,
            1e6,
            2f64.powi(52),
            2f64.powi(53),
            2f64.powi(63),
        ] {
            for x in [edge, edge.next_up(), edge.next_down()] {
                values.extend([x, -x]);
            }
        }
        values
    }

    #[test]
    fn round_is_the_library_round_bit_for_bit() {
        for x in rounding_edges() {
            assert_eq!(round(x).to_bits(), x.round().to_bits(), "round({x:e})");
        }
    }

    #[test]
    fn ceil_ms_rounds_up_as_the_library_ceil_does() {
        let library = |seconds: f64| {
            let ms = (seconds * 1000.0).ceil();
            if ms.is_nan() || ms <= 0.0 {
                0
            } else if ms >= MAX_TIMESTAMP_MS as f64 {
                MAX_TIMESTAMP_MS
            } else {
                ms as i64
            }
        };
        for x in rounding_edges() {
            for seconds in [x, x / 1000.0, x / 3.0] {
                assert_eq!(ceil_ms(seconds), library(seconds), "ceil_ms({seconds:e})");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn round_and_ceil_ms_match_the_library_on_any_double(bits: u64) {
            let x = f64::from_bits(bits);
            proptest::prop_assert_eq!(round(x).to_bits(), x.round().to_bits());
            let ms = (x * 1000.0).ceil();
            let library = if ms.is_nan() || ms <= 0.0 {
                0
            } else if ms >= MAX_TIMESTAMP_MS as f64 {
                MAX_TIMESTAMP_MS
            } else {
                ms as i64
            };
            proptest::prop_assert_eq!(ceil_ms(x), library);
        }

        #[test]
        fn round_and_ceil_ms_match_the_library_on_halves_and_whole_milliseconds(n in -(1i64 << 54)..(1i64 << 54)) {
            let half = n as f64 / 2.0;
            proptest::prop_assert_eq!(round(half).to_bits(), half.round().to_bits());
            let seconds = n as f64 / 1000.0;
            let ms = (seconds * 1000.0).ceil();
            let library = if ms <= 0.0 { 0 } else if ms >= MAX_TIMESTAMP_MS as f64 { MAX_TIMESTAMP_MS } else { ms as i64 };
            proptest::prop_assert_eq!(ceil_ms(seconds), library);
        }

        #[test]
        fn round_matches_the_library_on_tokens_a_bucket_holds(x in -1e7f64..1e10) {
            proptest::prop_assert_eq!(round(x).to_bits(), x.round().to_bits());
            proptest::prop_assert_eq!(ceil_ms(x / 7.0), {
                let ms = (x / 7.0 * 1000.0).ceil();
                if ms <= 0.0 { 0 } else if ms >= MAX_TIMESTAMP_MS as f64 { MAX_TIMESTAMP_MS } else { ms as i64 }
            });
        }
    }

    /// Values on both sides of the 64-bit fast paths' edges.
    fn wide_values() -> Vec<i128> {
        let mut values = vec![
            0, 1, -1, 999_999, 1_000_000, 1_000_001, -999_999, -1_000_001,
        ];
        for edge in [i128::from(i64::MAX), i128::from(i64::MIN)] {
            values.extend([edge - 1, edge, edge + 1]);
        }
        values.extend([i128::MAX, i128::MIN + 1, 1_700_000_000_123_456_789]);
        values
    }

    #[test]
    fn a_division_in_64_bits_gives_what_the_128_bit_one_gives() {
        for a in wide_values() {
            for b in wide_values().into_iter().filter(|&b| b != 0) {
                if a == i128::MIN + 1 && b == -1 {
                    continue;
                }
                assert_eq!(div_i128(a, b), a / b, "{a} / {b}");
            }
        }
    }

    #[test]
    fn nanoseconds_round_up_to_milliseconds_alike_on_both_paths() {
        for ns in wide_values() {
            let ms = ns.div_euclid(NS_PER_MS) + i128::from(ns.rem_euclid(NS_PER_MS) > 0);
            let expected = i64::try_from(ms.clamp(0, i128::from(MAX_TIMESTAMP_MS)))
                .unwrap_or(MAX_TIMESTAMP_MS);
            assert_eq!(ns_to_ms_ceil(ns), expected, "{ns}");
        }
    }

    fn decision(allowed: bool, limit: u64, remaining: u64, retry: i64, reset: i64) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after_ms: retry,
            reset_after_ms: reset,
            delay_ms: None,
        }
    }

    #[test]
    fn tiers_allow_together_with_the_tightest_remaining_and_the_latest_reset() {
        let all = Decision::all_of(&[
            decision(true, 10, 7, 0, 3000),
            decision(true, 100, 2, 0, 60_000),
            decision(true, 1000, 900, 0, 5000),
        ]);
        assert_eq!(all, decision(true, 100, 2, 0, 60_000));
    }

    #[test]
    fn one_denying_tier_denies_with_the_longest_wait() {
        let all = Decision::all_of(&[
            decision(false, 10, 0, 400, 3000),
            decision(true, 100, 50, 0, 1000),
            decision(false, 5, 0, 900, 900),
        ]);
        assert_eq!(all, decision(false, 5, 0, 900, 3000));
    }

    #[test]
    fn a_tier_that_can_never_allow_makes_the_wait_never() {
        let all = Decision::all_of(&[
            decision(false, 10, 5, 100, 10),
            decision(false, 3, 3, -1, 0),
        ]);
        assert_eq!(all.retry_after_ms, -1);
        assert!(!all.allowed);
    }
}
