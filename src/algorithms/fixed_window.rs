//! Fixed window: one counter per window.
//!
//! Terms: the time line is cut into windows of `window_ms`, aligned to the
//! Unix epoch (window `k` covers `[k * window_ms, (k + 1) * window_ms)`), so
//! every client and every server agrees on when a window starts and ends. A
//! request of cost `c` is allowed when the window's count plus `c` is at most
//! `limit`, and adds `c` to the count. A new window starts at zero.
//!
//! This is the cheapest algorithm and the easiest to explain ("100 a minute,
//! the minute on the clock"), at a documented price: a burst at the end of one
//! window and another at the start of the next can let up to twice the limit
//! through within a few milliseconds. Use the sliding log or the sliding
//! window counter where that matters.
//!
//! The state is the count and the time of the last update: the window the
//! count belongs to is the window of that time, so a count from an older
//! window is simply read as zero and nothing has to run in the background.

use super::shapes::{check_limit_and_window, limit_and_window, LIMIT, WINDOW};
use super::{Algorithm, Decision, Field, Mode, State, MAX_AMOUNT};
use crate::encoding::{ensure, put_i64, put_u64, DecodeError, Reader};
use crate::error::CommandError;
use crate::words::syntax::{duration_word, Syntax, Word};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowParams {
    /// The most allowed in one window (costs counted).
    pub limit: u64,
    /// The length of a window, in ms.
    pub window_ms: u64,
}

/// `RL.FIXEDWINDOW key limit window`.
impl Syntax for FixedWindowParams {
    const PARAMS: &'static [Word] = &[LIMIT, WINDOW];

    const SUMMARY: &'static str = "Fixed window: at most limit requests per window, windows aligned to the Unix epoch. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].";

    #[inline]
    fn from_words(words: &[&[u8]]) -> Result<Self, CommandError> {
        let (limit, window_ms) = limit_and_window(words)?;
        Ok(Self { limit, window_ms })
    }

    const PARTIAL: bool = true;

    const WINDOWED: bool = true;

    const EXAMPLE: &'static [&'static str] = &["100", "1m"];

    fn check(&self) -> Result<(), &'static str> {
        check_limit_and_window(self.limit, self.window_ms)
    }

    fn to_words(&self) -> Vec<String> {
        vec![self.limit.to_string(), duration_word(self.window_ms)]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow {
    params: FixedWindowParams,
    /// Used in the window of `updated_ms`, at most [`MAX_AMOUNT`]. Usually at
    /// most `limit`, but a lowered limit leaves it as it was.
    count: u64,
    /// The latest time seen (Unix ms); `count` belongs to its window.
    updated_ms: i64,
}

impl FixedWindow {
    fn window_of(&self, t_ms: i64) -> i128 {
        // In i64 (a window is at most 366 days): one machine division, not
        // the 128-bit routine, on every check.
        match i64::try_from(self.params.window_ms) {
            Ok(window_ms) if window_ms > 0 => i128::from(t_ms.div_euclid(window_ms)),
            _ => i128::from(t_ms).div_euclid(i128::from(self.params.window_ms)),
        }
    }

    /// When the window of `t_ms` ends (the start of the next one).
    fn window_end_ms(&self, t_ms: i64) -> i64 {
        let end = (self.window_of(t_ms) + 1) * i128::from(self.params.window_ms);
        i64::try_from(end).unwrap_or(i64::MAX)
    }

    /// [`Algorithm::check`] with the end of the stored window found once
    /// and used for all three questions: whether `now_ms` is still in it
    /// (for a time after the last update, in the same window exactly when
    /// before its end: windows follow each other), when it ends (the
    /// retry and the reset), and so when the key is fresh. A second
    /// division only when a new window has started. `None`, nothing
    /// changed, when the window is longer than `i64::MAX` ms or an end
    /// overflows `i64` (where [`FixedWindow::window_end_ms`] saturates).
    #[inline]
    fn check_narrow(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Option<Decision> {
        let window_ms = i64::try_from(self.params.window_ms)
            .ok()
            .filter(|&w| w > 0)?;
        let end_of = |t_ms: i64| {
            t_ms.div_euclid(window_ms)
                .checked_add(1)?
                .checked_mul(window_ms)
        };
        let stored_end = end_of(self.updated_ms)?;
        let now_ms = now_ms.max(self.updated_ms);
        let (count, end_ms) = if now_ms < stored_end {
            (self.count, stored_end)
        } else {
            (0, end_of(now_ms)?)
        };
        let limit = self.params.limit;
        let fits = count.checked_add(cost).is_some_and(|n| n <= limit);
        let allowed = cost <= limit && fits;
        // `now_ms` is in the window ending at `end_ms`: `end_ms - now_ms`
        // is in `1..=window_ms`.
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            end_ms - now_ms
        };
        let count = if allowed && mode == Mode::Take {
            count.saturating_add(cost)
        } else {
            count
        };
        self.count = count;
        self.updated_ms = now_ms;
        Some(Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(count),
            retry_after_ms,
            reset_after_ms: if count == 0 { 0 } else { end_ms - now_ms },
            delay_ms: None,
        })
    }

    /// [`Algorithm::check`] for any window and time, in `i128` where it
    /// must.
    #[inline(never)]
    fn check_wide(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        self.advance(now_ms);
        let now_ms = now_ms.max(self.updated_ms);
        let limit = self.params.limit;
        let fits = self.count.checked_add(cost).is_some_and(|n| n <= limit);
        let allowed = cost <= limit && fits;
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            // The next window starts at zero and the cost fits in it.
            self.window_end_ms(now_ms).saturating_sub(now_ms).max(1)
        };
        if allowed && mode == Mode::Take {
            self.count = self.count.saturating_add(cost);
        }
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(self.count),
            retry_after_ms,
            reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }

    /// Move to `now_ms`: a count from an earlier window no longer counts.
    fn advance(&mut self, now_ms: i64) {
        if now_ms <= self.updated_ms {
            return;
        }
        if self.window_of(now_ms) != self.window_of(self.updated_ms) {
            self.count = 0;
        }
        self.updated_ms = now_ms;
    }
}

impl Algorithm for FixedWindow {
    type Params = FixedWindowParams;

    fn fresh(params: FixedWindowParams, now_ms: i64) -> Self {
        Self {
            params,
            count: 0,
            updated_ms: now_ms,
        }
    }

    fn params(&self) -> FixedWindowParams {
        self.params
    }

    fn limit_of(limit: u64, window_ms: u64) -> FixedWindowParams {
        FixedWindowParams { limit, window_ms }
    }

    /// A new limit applies to the count as it is (a count above a lowered
    /// limit denies everything until its window ends). A new window length
    /// moves the windows themselves: the count is treated as made at the last
    /// update, so it stays counted in the new-length window that contains the
    /// last update, and is zero from that window's end on (at once, when that
    /// window is already over). When the change comes within that window,
    /// which is the usual case, nothing used is forgotten.
    ///
    /// The outcome does not depend on when the change is applied, so a
    /// `retry_after_ms` answered under new parameters that were not stored (a
    /// denial or a peek) still holds when they are.
    fn reconfigure(&mut self, params: FixedWindowParams, _now_ms: i64) {
        self.params = params;
    }

    fn last_seen_ms(&self) -> i64 {
        self.updated_ms
    }

    /// Back into the count of the grant's window, if that window is still
    /// the current one; a window that ended gives nothing back (its count is
    /// gone, and lowering the current one would let it pass more than its
    /// limit).
    fn refund(&mut self, now_ms: i64, amount: u64, granted_at_ms: i64) -> Option<u64> {
        self.advance(now_ms);
        if self.window_of(granted_at_ms) != self.window_of(self.updated_ms) {
            return Some(0);
        }
        let given = amount.min(self.count);
        self.count -= given;
        Some(given)
    }

    /// In `i64` with one division when the window's end fits (see
    /// [`FixedWindow::check_narrow`]), else [`FixedWindow::check_wide`]:
    /// the same answers, bit for bit (a property test compares them).
    #[inline(always)]
    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        match self.check_narrow(now_ms, cost, mode) {
            Some(decision) => decision,
            None => self.check_wide(now_ms, cost, mode),
        }
    }

    /// The default's decision (this algorithm decides nothing in place
    /// before its check), made on the stored state itself, inlined into
    /// the engine's take, instead of on a copy checked out of line and
    /// copied back: a check changes only the count and the time, which a
    /// request not taken puts back as they were. New parameters are
    /// checked on a copy, out of line, as the default does.
    #[inline(always)]
    fn check_stored(
        &mut self,
        params: FixedWindowParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if self.params != params {
            return self.check_copy_out_of_line(params, now_ms, cost, mode);
        }
        let (count, updated_ms) = (self.count, self.updated_ms);
        let now_ms = now_ms.max(updated_ms);
        let decision = self.check(now_ms, cost, mode);
        let taken = decision.allowed && mode == Mode::Take;
        if !taken {
            self.count = count;
            self.updated_ms = updated_ms;
        }
        (decision, taken)
    }
}

impl State for FixedWindow {
    fn describe(&self, _now_ms: i64) -> Vec<(&'static str, Field)> {
        vec![
            ("limit", Field::Int(self.params.limit as i64)),
            ("window_ms", Field::Int(self.params.window_ms as i64)),
            ("count", Field::Int(self.count as i64)),
            (
                "window_end_ms",
                Field::Int(self.window_end_ms(self.updated_ms)),
            ),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    /// The end of the current window, when anything was counted in it.
    #[inline(always)]
    fn fresh_at_ms(&self) -> i64 {
        if self.count == 0 {
            return self.updated_ms;
        }
        // In i64 with one division when the end fits, as the check finds
        // it (the same value); else in i128, saturating.
        if let Ok(window_ms) = i64::try_from(self.params.window_ms) {
            if window_ms > 0 {
                let next = self.updated_ms.div_euclid(window_ms).checked_add(1);
                if let Some(end_ms) = next.and_then(|n| n.checked_mul(window_ms)) {
                    return end_ms;
                }
            }
        }
        self.window_end_ms(self.updated_ms)
    }

    /// Layout after the tag: `limit` u64, `window_ms` u64, `count` u64,
    /// `updated_ms` i64; 32 bytes.
    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.limit);
        put_u64(out, self.params.window_ms);
        put_u64(out, self.count);
        put_i64(out, self.updated_ms);
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let limit = input.u64()?;
        let window_ms = input.u64()?;
        let count = input.u64()?;
        let updated_ms = input.timestamp("timestamp out of range")?;
        let params = FixedWindowParams { limit, window_ms };
        params.check().map_err(DecodeError)?;
        ensure(count <= MAX_AMOUNT, "count out of range")?;
        Ok(Self {
            params,
            count,
            updated_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{call, encode_body as encode};
    use crate::algorithms::{MAX_DURATION_MS, MAX_TIMESTAMP_MS};
    use proptest::prelude::*;

    /// A time on a minute boundary, so windows of 60 s start here.
    const T0: i64 = 1_700_000_040_000;

    fn params(limit: u64, window_ms: u64) -> FixedWindowParams {
        FixedWindowParams { limit, window_ms }
    }

    /// Times, windows, counts and costs near every edge of the two paths.
    fn edge_i64() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            -3i64..=3,
            (0i64..=3).prop_map(|d| i64::MAX - d),
            (0i64..=3).prop_map(|d| i64::MIN + d),
            (-3i64..=3).prop_map(|d| T0 + d),
            (-3i64..=3).prop_map(|d| MAX_TIMESTAMP_MS + d),
            T0 - 200_000..T0 + 200_000,
        ]
    }

    fn edge_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            0u64..=3,
            (0u64..=3).prop_map(|d| u64::MAX - d),
            (0u64..=3).prop_map(|d| i64::MAX as u64 - 1 + d),
            (0u64..=3).prop_map(|d| MAX_DURATION_MS - 1 + d),
            1u64..200_000,
        ]
    }

    proptest! {
        /// The one-division path answers and leaves the state as the
        /// general one does, whenever it answers, for any state.
        #[test]
        fn the_narrow_check_answers_as_the_wide_one(
            limit in edge_u64(),
            // At least 1 ms (the parser's and the decoder's bound; the
            // general path divides by it).
            window_ms in edge_u64().prop_map(|w| w.max(1)),
            count in edge_u64(),
            updated_ms in edge_i64(),
            now in prop_oneof![edge_i64(), (-70_000i64..70_000).prop_map(|d| T0 + d)],
            cost in edge_u64(),
            take in any::<bool>(),
        ) {
            let before = FixedWindow { params: params(limit, window_ms), count, updated_ms };
            let mode = if take { Mode::Take } else { Mode::Peek };
            let mut narrow = before.clone();
            let answer = narrow.check_narrow(now, cost, mode);
            let mut wide = before.clone();
            let expected = wide.check_wide(now, cost, mode);
            match answer {
                Some(answer) => {
                    prop_assert_eq!(answer, expected);
                    prop_assert_eq!(&narrow, &wide);
                }
                None => prop_assert_eq!(&narrow, &before),
            }
            let mut both = before;
            prop_assert_eq!(both.check(now, cost, mode), expected);
            prop_assert_eq!(both, wide);
        }

        /// A stored state checked in place (`check_stored`) gives the
        /// decision, and is left as, the copy the default `check_stored`
        /// checked (kept when taken), for any state, time, cost, mode and
        /// parameters (the same or others); and `fresh_at_ms`, in one
        /// division where the end fits, is the general end, saturating.
        #[test]
        fn a_stored_state_is_checked_in_place_as_on_a_copy(
            limit in edge_u64(),
            window_ms in edge_u64().prop_map(|w| w.max(1)),
            count in edge_u64(),
            updated_ms in edge_i64(),
            now in prop_oneof![edge_i64(), (-70_000i64..70_000).prop_map(|d| T0 + d)],
            cost in edge_u64(),
            take in any::<bool>(),
            other in proptest::option::of((edge_u64(), edge_u64().prop_map(|w| w.max(1)))),
        ) {
            let stored = FixedWindow { params: params(limit, window_ms), count, updated_ms };
            let asked = other.map_or(stored.params, |(l, w)| params(l, w));
            let mode = if take { Mode::Take } else { Mode::Peek };
            let (expected, kept) = match FixedWindow::check_with(Some(&stored), asked, now, cost, mode) {
                (decision, Some(next)) => (decision, next),
                (decision, None) => (decision, stored.clone()),
            };
            let mut in_place = stored.clone();
            let (decision, changed) = in_place.check_stored(asked, now, cost, mode);
            prop_assert_eq!(decision, expected);
            prop_assert_eq!(changed, expected.allowed && take);
            prop_assert_eq!(&in_place, &kept);
            for state in [&stored, &kept] {
                let general = if state.count == 0 {
                    state.updated_ms
                } else {
                    state.window_end_ms(state.updated_ms)
                };
                prop_assert_eq!(state.fresh_at_ms(), general);
            }
        }

        /// Today's keys take the one-division path (else the test above
        /// would compare nothing).
        #[test]
        fn the_narrow_check_answers_for_todays_keys(
            window_ms in 1u64..=MAX_DURATION_MS,
            updated in 0i64..=4_000_000_000_000i64,
            later in 0i64..=MAX_DURATION_MS as i64 * 2,
            cost in 0u64..10,
        ) {
            let mut s = FixedWindow { params: params(5, window_ms), count: 1, updated_ms: updated };
            prop_assert!(s.check_narrow(updated + later, cost, Mode::Take).is_some());
        }
    }

    #[test]
    fn t0_is_on_a_window_boundary() {
        assert_eq!(T0 % 60_000, 0);
    }

    #[test]
    fn a_fresh_window_allows_a_burst_of_the_limit_then_denies() {
        let mut s = None;
        let p = params(3, 60_000);
        for left in [2, 1, 0] {
            let d = call(&mut s, p, T0 + 10_000, 1, Mode::Take);
            assert!(d.allowed);
            assert_eq!((d.limit, d.remaining, d.retry_after_ms), (3, left, 0));
            assert_eq!(d.reset_after_ms, 50_000);
        }
        let d = call(&mut s, p, T0 + 15_000, 1, Mode::Take);
        assert!(!d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after_ms, d.reset_after_ms),
            (0, 45_000, 45_000)
        );
    }

    #[test]
    fn the_count_resets_at_the_end_of_the_window() {
        let mut s = None;
        let p = params(2, 60_000);
        call(&mut s, p, T0 + 59_000, 2, Mode::Take);
        assert!(!call(&mut s, p, T0 + 59_999, 1, Mode::Take).allowed);
        let d = call(&mut s, p, T0 + 60_000, 1, Mode::Take);
        assert_eq!(
            (d.allowed, d.remaining, d.reset_after_ms),
            (true, 1, 60_000)
        );
    }

    #[test]
    fn windows_are_aligned_to_the_epoch_not_to_the_first_request() {
        let mut s = None;
        let p = params(1, 60_000);
        let d = call(&mut s, p, T0 + 45_000, 1, Mode::Take);
        assert_eq!(d.reset_after_ms, 15_000);
        assert!(call(&mut s, p, T0 + 60_000, 1, Mode::Take).allowed);
    }

    #[test]
    fn a_burst_across_a_boundary_lets_twice_the_limit_through_as_documented() {
        let mut s = None;
        let p = params(100, 60_000);
        let mut allowed = 0;
        for t in [T0 + 59_999, T0 + 60_000] {
            for _ in 0..100 {
                allowed += u32::from(call(&mut s, p, t, 1, Mode::Take).allowed);
            }
        }
        assert_eq!(allowed, 200, "two windows, two full limits, 1 ms apart");
    }

    #[test]
    fn retry_after_is_exactly_the_end_of_the_window() {
        let mut s = None;
        let p = params(10, 1000);
        call(&mut s, p, T0 + 250, 8, Mode::Take);
        for cost in [3, 10] {
            let d = call(&mut s, p, T0 + 400, cost, Mode::Peek);
            assert!(!d.allowed);
            assert_eq!(d.retry_after_ms, 600);
            let at = T0 + 400 + d.retry_after_ms;
            assert!(!call(&mut s, p, at - 1, cost, Mode::Peek).allowed);
            assert!(call(&mut s, p, at, cost, Mode::Peek).allowed);
        }
    }

    #[test]
    fn cost_counts_as_that_many_requests() {
        let mut s = None;
        let p = params(10, 1000);
        let d = call(&mut s, p, T0, 7, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 3));
        let d = call(&mut s, p, T0, 4, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (false, 3));
        let d = call(&mut s, p, T0, 3, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
    }

    #[test]
    fn cost_above_the_limit_can_never_be_allowed_and_stores_nothing() {
        let mut s = None;
        let d = call(&mut s, params(5, 1000), T0, 6, Mode::Take);
        assert_eq!((d.allowed, d.retry_after_ms), (false, -1));
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
        assert!(s.is_none());
    }

    #[test]
    fn a_denial_leaves_the_stored_state_unchanged() {
        let mut s = None;
        let p = params(2, 1000);
        call(&mut s, p, T0 + 100, 2, Mode::Take);
        let before = s.clone();
        assert!(!call(&mut s, p, T0 + 300, 1, Mode::Take).allowed);
        assert_eq!(s, before);
    }

    #[test]
    fn peek_answers_without_taking() {
        let mut s = None;
        let p = params(4, 1000);
        let d = call(&mut s, p, T0, 3, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 4, 0));
        assert!(s.is_none());
        call(&mut s, p, T0 + 100, 3, Mode::Take);
        let before = s.clone();
        let d = call(&mut s, p, T0 + 200, 2, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 1, 800));
        let d = call(&mut s, p, T0 + 200, 1, Mode::Peek);
        assert_eq!((d.allowed, d.remaining), (true, 1));
        assert_eq!(s, before);
    }

    #[test]
    fn a_clock_stepping_back_allows_nothing_extra() {
        let mut s = None;
        let p = params(2, 1000);
        call(&mut s, p, T0 + 1500, 2, Mode::Take);
        // Back into the previous window: still the count of the newer one.
        let d = call(&mut s, p, T0 + 900, 1, Mode::Take);
        assert!(!d.allowed);
        assert_eq!((d.retry_after_ms, d.reset_after_ms), (500, 500));
        assert_eq!(s.as_ref().map(|s| s.updated_ms), Some(T0 + 1500));
        assert!(call(&mut s, p, T0 + 2000, 1, Mode::Take).allowed);
    }

    #[test]
    fn a_new_limit_applies_to_the_count_as_it_is() {
        let mut s = None;
        call(&mut s, params(10, 1000), T0, 7, Mode::Take);
        let d = call(&mut s, params(8, 1000), T0 + 10, 1, Mode::Take);
        assert_eq!((d.allowed, d.limit, d.remaining), (true, 8, 0));
        let d = call(&mut s, params(5, 1000), T0 + 20, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 0, 980));
        let d = call(&mut s, params(20, 1000), T0 + 30, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 11));
    }

    #[test]
    fn a_longer_window_carries_the_count_into_the_window_of_the_last_update() {
        let mut s = None;
        call(&mut s, params(10, 1000), T0 + 500, 6, Mode::Take);
        // The 10 s window [T0, T0 + 10 000) holds the 6 until it ends, even
        // though the old 1 s window they were counted in is over.
        let d = call(&mut s, params(10, 10_000), T0 + 1000, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 3, 9000));
        assert!(!call(&mut s, params(10, 10_000), T0 + 9999, 4, Mode::Peek).allowed);
        assert!(call(&mut s, params(10, 10_000), T0 + 10_000, 10, Mode::Peek).allowed);
    }

    #[test]
    fn a_shorter_window_keeps_the_count_until_its_window_of_the_last_update_ends() {
        let mut s = None;
        call(&mut s, params(10, 10_000), T0 + 4500, 7, Mode::Take);
        let d = call(&mut s, params(10, 1000), T0 + 4600, 1, Mode::Peek);
        assert_eq!(
            (d.remaining, d.retry_after_ms, d.reset_after_ms),
            (3, 0, 400)
        );
        let d = call(&mut s, params(10, 1000), T0 + 4600, 4, Mode::Peek);
        assert_eq!((d.allowed, d.retry_after_ms), (false, 400));
        let d = call(&mut s, params(10, 1000), T0 + 5000, 10, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
    }

    #[test]
    fn a_retry_after_under_new_parameters_holds_before_they_are_stored() {
        for (first, second) in [((4, 1000), (3, 7000)), ((4, 7000), (6, 1000))] {
            let (old, new) = (params(first.0, first.1), params(second.0, second.1));
            let mut s = None;
            call(&mut s, old, T0 + 3200, 4, Mode::Take);
            let d = call(&mut s, new, T0 + 3300, 3, Mode::Peek);
            assert!(!d.allowed);
            let at = T0 + 3300 + d.retry_after_ms;
            assert!(!call(&mut s, new, at - 1, 3, Mode::Peek).allowed);
            assert!(call(&mut s, new, at, 3, Mode::Peek).allowed);
        }
    }

    #[test]
    fn reset_is_the_end_of_the_window_once_anything_is_counted() {
        let mut s = None;
        let p = params(5, 60_000);
        let d = call(&mut s, p, T0 + 12_345, 1, Mode::Take);
        assert_eq!(d.reset_after_ms, 47_655);
        assert_eq!(s.as_ref().map(|s| s.fresh_at_ms()), Some(T0 + 60_000));
        let d = call(&mut s, p, T0 + 60_000, 1, Mode::Peek);
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
    }

    #[test]
    fn the_largest_values_do_not_overflow() {
        let mut s = None;
        let p = params(MAX_AMOUNT, MAX_DURATION_MS);
        let d = call(&mut s, p, MAX_TIMESTAMP_MS, MAX_AMOUNT, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        let d = call(&mut s, p, MAX_TIMESTAMP_MS, MAX_AMOUNT, Mode::Take);
        assert!(!d.allowed);
        assert!(d.retry_after_ms > 0 && d.retry_after_ms <= MAX_DURATION_MS as i64);
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_buffers() {
        let mut s = None;
        call(&mut s, params(9, 60_000), T0 + 12_345, 4, Mode::Take);
        let state = s.unwrap_or_else(|| FixedWindow::fresh(params(1, 1), 0));
        let buf = encode(&state);
        assert_eq!(buf.len(), 32);
        let mut r = Reader::new(&buf);
        assert_eq!(FixedWindow::decode_body(&mut r), Ok(state.clone()));
        assert_eq!(r.remaining(), 0);

        assert!(FixedWindow::decode_body(&mut Reader::new(&buf[..31])).is_err());
        let mut longer = buf.clone();
        longer.push(0);
        let mut r = Reader::new(&longer);
        let decoded = FixedWindow::decode_body(&mut r);
        assert!(decoded.is_ok_and(|_| r.finish().is_err()));
        let bad_field = |range: std::ops::Range<usize>, value: u64| {
            let mut bad = buf.clone();
            bad[range].copy_from_slice(&value.to_le_bytes());
            FixedWindow::decode_body(&mut Reader::new(&bad)).is_err()
        };
        assert!(bad_field(0..8, 0), "zero limit");
        assert!(bad_field(0..8, MAX_AMOUNT + 1), "limit too large");
        assert!(bad_field(8..16, 0), "zero window");
        assert!(bad_field(8..16, MAX_DURATION_MS + 1), "window too long");
        assert!(bad_field(16..24, MAX_AMOUNT + 1), "count too large");
        assert!(bad_field(24..32, u64::MAX), "negative timestamp");
        assert!(
            bad_field(24..32, MAX_TIMESTAMP_MS as u64 + 1),
            "timestamp too large"
        );
    }

    proptest! {
        #[test]
        fn no_epoch_aligned_window_admits_more_than_the_limit(
            limit in 1u64..20,
            window_ms in 1u64..2000,
            ops in prop::collection::vec((0i64..700, 1u64..8, any::<bool>()), 1..200),
        ) {
            let p = params(limit, window_ms);
            let mut s = None;
            let mut now = T0;
            let mut used: std::collections::HashMap<i64, u64> = Default::default();
            for (step, cost, peek) in ops {
                now += step;
                let mode = if peek { Mode::Peek } else { Mode::Take };
                let before = s.clone();
                let d = call(&mut s, p, now, cost, mode);
                if peek || !d.allowed {
                    prop_assert_eq!(&s, &before);
                }
                if d.allowed && !peek {
                    let window = now.div_euclid(window_ms as i64);
                    let n = used.entry(window).or_default();
                    *n += cost;
                    prop_assert!(*n <= limit);
                    prop_assert_eq!(d.remaining, limit - *n);
                } else if !d.allowed && cost > limit {
                    prop_assert_eq!(d.retry_after_ms, -1);
                } else if !d.allowed {
                    // Exactly: denied until the window ends, allowed then.
                    let at = now + d.retry_after_ms;
                    prop_assert!(!call(&mut s.clone(), p, at - 1, cost, Mode::Peek).allowed);
                    prop_assert!(call(&mut s.clone(), p, at, cost, Mode::Peek).allowed);
                }
            }
        }

        #[test]
        fn encoding_round_trips_for_any_reachable_state(
            limit in 1u64..=MAX_AMOUNT,
            window_ms in 1u64..=MAX_DURATION_MS,
            now in 0i64..=MAX_TIMESTAMP_MS,
            cost in 1u64..=MAX_AMOUNT,
        ) {
            let mut s = None;
            call(&mut s, params(limit, window_ms), now, cost.min(limit), Mode::Take);
            let state = s.unwrap_or_else(|| FixedWindow::fresh(params(1, 1), 0));
            let buf = encode(&state);
            let mut r = Reader::new(&buf);
            prop_assert_eq!(FixedWindow::decode_body(&mut r), Ok(state));
            prop_assert_eq!(r.remaining(), 0);
        }
    }
}
