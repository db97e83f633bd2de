//! Sliding log: the exact sliding window, from a log of when each allowed
//! request happened.
//!
//! Terms: a request of cost `c` allowed at time `s` counts `c` in every
//! window-long span `(t - window_ms, t]` that contains `s`, that is from `s`
//! until `s + window_ms` (excluded). A request of cost `c` at `now` is allowed
//! when the costs counted at `now` plus `c` are at most `limit`. Unlike the
//! fixed window and the sliding window counter, this is exact: no span of one
//! window ever holds more than `limit`, and nothing is denied that would fit.
//!
//! The log is a queue of *entries*, oldest first, each a time and a count:
//! requests allowed in the same millisecond are merged into one entry, so a
//! request of any cost takes one entry, there are never more entries than
//! `limit`, and usually far fewer. An entry leaves the front of the queue once
//! it is out of the window; the sum of the counts is kept, so an allowed check
//! is O(1) amortised. A denied check walks from the front only as far as it
//! must for `cost` to fit, to answer `retry_after_ms` exactly: one entry for
//! a request of cost 1, at most `cost` entries in general.
//!
//! Memory: an entry is stored as the *gap* in ms since the entry before it
//! (the oldest one's time is kept as a plain field), in one 32-bit head word
//! whose top three bits say which extension words follow it in a second
//! queue:
//!
//! | head bits | meaning |
//! | --- | --- |
//! | 0-28  | the low 29 bits of the gap |
//! | 29    | one extension word holds the rest of the gap (`gap >> 29`) |
//! | 30    | one extension word holds the count (2 to 2^32 - 1) |
//! | 31    | two extension words hold the count (low, high), above 2^32 - 1 |
//!
//! An entry's extension words come in that order: gap, then count. No flag
//! means a count of 1 and a gap under 2^29 ms (6.2 days): 4 bytes, the usual
//! case. A count from 2 to 2^32 - 1 takes 8 bytes (12 after a long gap), at
//! most 6 per request; a larger count 12 or 16 bytes for billions of them. A
//! count of 1 after a gap of 6.2 days or more takes 8 bytes, and
//! since the gaps in the log add up to less than one window (at most 366
//! days), at most 58 entries can need that. So the log never takes more than 8
//! bytes per request remembered (a request of cost `c` counting as `c`), and
//! 4 when requests are a cost of 1 each and less than 6.2 days apart.
//! Queues grow by an eighth, not by doubling, and the copy the Redis layer
//! makes for each call keeps room for just one more entry, so little capacity
//! is held unused.

mod entries;

use super::shapes::{check_limit_and_window, limit_and_window, LIMIT, WINDOW};
use super::{Algorithm, Decision, Field, Mode, State, MAX_AMOUNT};
use crate::encoding::{ensure, put_i64, put_u64, DecodeError, Reader};
use crate::error::CommandError;
use crate::words::syntax::{duration_word, Syntax, Word};
use entries::{decode_entry, Entry, EntryQueue};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLogParams {
    /// The most allowed in any window-long span (costs counted).
    pub limit: u64,
    /// The length of the window, in ms.
    pub window_ms: u64,
}

/// `RL.SLIDINGLOG key limit window`.
impl Syntax for SlidingLogParams {
    const PARAMS: &'static [Word] = &[LIMIT, WINDOW];

    const SUMMARY: &'static str = "Sliding log: exactly at most limit requests in any window, remembering when each allowed request happened. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].";

    const COMPLEXITY: &'static str =
        "O(N) where N is the number of requests remembered in the window (at most limit)";

    fn from_words(words: &[&[u8]]) -> Result<Self, CommandError> {
        let (limit, window_ms) = limit_and_window(words)?;
        Ok(Self { limit, window_ms })
    }

    const EXAMPLE: &'static [&'static str] = &["100", "1m"];

    fn check(&self) -> Result<(), &'static str> {
        check_limit_and_window(self.limit, self.window_ms)
    }

    fn to_words(&self) -> Vec<String> {
        vec![self.limit.to_string(), duration_word(self.window_ms)]
    }
}

/// The window at some time, read off a log without changing it.
struct HeldAt {
    /// What the entries still inside the window count.
    held: u64,
    /// How many entries, from the oldest, have left the window.
    left_entries: usize,
    /// When the newest of those happened (the oldest entry's time when none
    /// has left): the time the gaps of the entries inside count from.
    last_left_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingLog {
    params: SlidingLogParams,
    entries: EntryQueue,
    /// The sum of the entries' counts: what the window holds, at most `limit`.
    total: u64,
    /// When the oldest entry happened (0 when the log is empty).
    oldest_ms: i64,
    /// When the newest entry happened (0 when the log is empty).
    newest_ms: i64,
    /// The latest time seen (Unix ms). Every entry is at most this and less
    /// than a window before it.
    updated_ms: i64,
}

/// A gap as a time difference; gaps in a log are shorter than a window.
fn gap_ms(entry: Entry) -> i64 {
    i64::try_from(entry.gap).unwrap_or(i64::MAX)
}

impl SlidingLog {
    /// What the window holds at the last time seen.
    pub fn used(&self) -> u64 {
        self.total
    }

    /// Entries remembered (requests merged per millisecond).
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    fn window(&self) -> i64 {
        i64::try_from(self.params.window_ms).unwrap_or(i64::MAX)
    }

    /// The most entries the log can hold: each counts at least one request.
    fn max_entries(&self) -> usize {
        usize::try_from(self.params.limit).unwrap_or(usize::MAX)
    }

    /// Forget the oldest entry; the next one becomes the oldest, its gap
    /// turned into the new `oldest_ms`.
    fn drop_oldest(&mut self) {
        let Some(oldest) = self.entries.pop_front() else {
            return;
        };
        self.total = self.total.saturating_sub(oldest.count);
        match self.entries.pop_front() {
            Some(next) => {
                self.oldest_ms = self.oldest_ms.saturating_add(gap_ms(next));
                self.entries.push_front(
                    Entry {
                        gap: 0,
                        count: next.count,
                    },
                    self.max_entries(),
                );
            }
            None => {
                self.total = 0;
                self.oldest_ms = 0;
                self.newest_ms = 0;
            }
        }
    }

    /// Forget the entries at or before `cutoff_ms`. Inlined always: on
    /// every check, which nearly always has nothing to forget.
    #[inline(always)]
    fn forget_until(&mut self, cutoff_ms: i64) {
        if self.entries.is_empty() || self.oldest_ms > cutoff_ms {
            return;
        }
        self.forget_until_walking(cutoff_ms);
    }

    /// [`SlidingLog::forget_until`] of a log whose oldest entry has left.
    #[inline(never)]
    fn forget_until_walking(&mut self, cutoff_ms: i64) {
        while !self.entries.is_empty() && self.oldest_ms <= cutoff_ms {
            self.drop_oldest();
        }
    }

    /// Forget the oldest entries (and part of the oldest kept one's count)
    /// until at most `limit` is remembered.
    fn keep_newest(&mut self, limit: u64) {
        while self.total > limit {
            let Some(oldest) = self.entries.front() else {
                return;
            };
            let excess = self.total - limit;
            if oldest.count <= excess {
                self.drop_oldest();
            } else {
                self.entries.pop_front();
                self.entries.push_front(
                    Entry {
                        gap: 0,
                        count: oldest.count - excess,
                    },
                    self.max_entries(),
                );
                self.total = limit;
            }
        }
    }

    /// Remember `cost` allowed at `now_ms`, not earlier than the newest entry.
    /// Inlined always: on every allowed check.
    #[inline(always)]
    fn append(&mut self, now_ms: i64, cost: u64) {
        if cost == 0 {
            return;
        }
        if self.entries.is_empty() {
            self.entries.push_back(
                Entry {
                    gap: 0,
                    count: cost,
                },
                self.max_entries(),
            );
            self.oldest_ms = now_ms;
        } else if now_ms <= self.newest_ms {
            if let Some(newest) = self.entries.pop_back() {
                self.entries.push_back(
                    Entry {
                        gap: newest.gap,
                        count: newest.count.saturating_add(cost),
                    },
                    self.max_entries(),
                );
            }
        } else {
            let gap = u64::try_from(now_ms - self.newest_ms).unwrap_or(0);
            self.entries
                .push_back(Entry { gap, count: cost }, self.max_entries());
        }
        self.newest_ms = self.newest_ms.max(now_ms);
        self.total = self.total.saturating_add(cost);
    }

    /// What the window holds at `now_ms`, the entries that left it being
    /// skipped rather than dropped.
    #[inline]
    fn held_at(&self, now_ms: i64) -> HeldAt {
        let cutoff_ms = now_ms.saturating_sub(self.window());
        if self.oldest_ms > cutoff_ms {
            // Times only grow along the log (gaps are never negative): no
            // entry has left, what the walk below finds at its first
            // entry without unpacking it (every allowed check of a log
            // whose oldest request is inside the window).
            return HeldAt {
                held: self.total,
                left_entries: 0,
                last_left_ms: self.oldest_ms,
            };
        }
        self.held_at_walking(cutoff_ms)
    }

    /// [`SlidingLog::held_at`] by walking the log from its oldest entry,
    /// for any log.
    fn held_at_walking(&self, cutoff_ms: i64) -> HeldAt {
        let mut at_ms = self.oldest_ms;
        let mut last_left_ms = self.oldest_ms;
        let mut left = 0u64;
        let mut left_entries = 0;
        for entry in self.entries.iter() {
            at_ms = at_ms.saturating_add(gap_ms(entry));
            if at_ms > cutoff_ms {
                break;
            }
            left = left.saturating_add(entry.count);
            left_entries += 1;
            last_left_ms = at_ms;
        }
        HeldAt {
            held: self.total.saturating_sub(left),
            left_entries,
            last_left_ms,
        }
    }

    /// Milliseconds from `now_ms` until `cost` more fits: until the oldest
    /// entries holding the excess have left the window. The log must be
    /// brought up to `now_ms`, and `cost` be at most the limit.
    fn ms_until_fits(&self, now_ms: i64, cost: u64) -> i64 {
        let excess = u128::from(self.total) + u128::from(cost);
        let need = excess.saturating_sub(u128::from(self.params.limit));
        let mut freed = 0u128;
        let mut at_ms = self.oldest_ms;
        for entry in self.entries.iter() {
            at_ms = at_ms.saturating_add(gap_ms(entry));
            freed += u128::from(entry.count);
            if freed >= need {
                return at_ms
                    .saturating_add(self.window())
                    .saturating_sub(now_ms)
                    .max(1);
            }
        }
        self.fresh_at_ms().saturating_sub(now_ms).max(1)
    }
}

impl SlidingLog {
    /// [`Algorithm::check_stored`] as the trait's default does it, out of
    /// line: a request that may be denied, new parameters, a peek.
    #[inline(never)]
    fn check_stored_out_of_line(
        &mut self,
        params: SlidingLogParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if self.params == params {
            let now_ms = now_ms.max(self.updated_ms);
            if let Some(decision) = self.decide_in_place(now_ms, cost) {
                if !(decision.allowed && mode == Mode::Take) {
                    return (decision, false);
                }
            }
        }
        self.check_copy(params, now_ms, cost, mode)
    }
}

/// 32-bit words are written as two `u16`s, low first: the same bytes as a
/// little-endian `u32`, with the helpers `crate::encoding` has.
impl Algorithm for SlidingLog {
    type Params = SlidingLogParams;

    fn fresh(params: SlidingLogParams, now_ms: i64) -> Self {
        Self {
            params,
            entries: EntryQueue::default(),
            total: 0,
            oldest_ms: 0,
            newest_ms: 0,
            updated_ms: now_ms,
        }
    }

    fn params(&self) -> SlidingLogParams {
        self.params
    }

    fn limit_of(limit: u64, window_ms: u64) -> SlidingLogParams {
        SlidingLogParams { limit, window_ms }
    }

    /// The entries carry over as they are: every request the log holds
    /// counts under the new parameters for as long as it is inside the new
    /// window, so from the change on no window-long span of the new length
    /// holds more than the new limit of the requests the log remembers.
    ///
    /// - Entries outside the new window are forgotten. A longer window counts
    ///   every request still held: the whole old window before the last
    ///   update, and perhaps older ones not dropped yet. Requests the log had
    ///   already dropped do not come back.
    /// - When more than the new limit is held, the oldest entries are
    ///   forgotten (and the count of the oldest one kept cut) until exactly
    ///   the new limit is. This changes no answer: as long as a forgotten
    ///   request would still be in the window, the newer ones kept are in it
    ///   too and already fill the limit. It keeps the log within `limit`.
    ///
    /// Either way the outcome does not depend on when the change is applied,
    /// so a `retry_after_ms` answered under new parameters that were not
    /// stored (a denial or a peek) still holds when they are.
    fn reconfigure(&mut self, params: SlidingLogParams, now_ms: i64) {
        let now_ms = now_ms.max(self.updated_ms);
        let window = i64::try_from(params.window_ms).unwrap_or(i64::MAX);
        self.forget_until(now_ms.saturating_sub(window));
        self.params = params;
        self.keep_newest(params.limit);
        self.entries.shrink();
    }

    fn last_seen_ms(&self) -> i64 {
        self.updated_ms
    }

    #[inline(always)]
    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        let now_ms = now_ms.max(self.updated_ms);
        self.updated_ms = now_ms;
        self.forget_until(now_ms.saturating_sub(self.window()));
        self.entries.shrink();
        let limit = self.params.limit;
        let fits = self.total.checked_add(cost).is_some_and(|n| n <= limit);
        let allowed = cost <= limit && fits;
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            self.ms_until_fits(now_ms, cost)
        };
        if allowed && mode == Mode::Take {
            self.append(now_ms, cost);
        }
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(self.total),
            retry_after_ms,
            reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }

    /// The default's answer, its take in place inlined into the engine's
    /// take (the check of nearly every allowed request: no call, the
    /// decision in registers); the rest, the default's, out of line.
    #[inline(always)]
    fn check_stored(
        &mut self,
        params: SlidingLogParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if mode == Mode::Take
            && self.params == params
            && self.allows_in_place(now_ms.max(self.updated_ms), cost) == Some(true)
        {
            return (self.check(now_ms, cost, Mode::Take), true);
        }
        self.check_stored_out_of_line(params, now_ms, cost, mode)
    }

    /// A request in a millisecond that already has an entry adds to its
    /// count; any other adds an entry.
    fn grows_with(&self, _params: SlidingLogParams, now_ms: i64, _cost: u64) -> bool {
        self.entries.is_empty() || now_ms.max(self.updated_ms) > self.newest_ms
    }

    /// Walks only the entries that left the window by `now_ms`: O(1)
    /// amortised, as the next allowed check drops them.
    #[inline(always)]
    fn allows_in_place(&self, now_ms: i64, cost: u64) -> Option<bool> {
        let held = self.held_at(now_ms).held;
        let limit = self.params.limit;
        Some(cost <= limit && held.checked_add(cost).is_some_and(|n| n <= limit))
    }

    /// What [`SlidingLog::check`] answers, read off the log as it is: the
    /// entries that left the window are skipped rather than dropped, and a
    /// denial's wait is found from the first entry still inside, walking
    /// only as far as `cost` needs (one entry for a cost of 1). A million
    /// entries cost a denial no more than ten do.
    fn decide_in_place(&self, now_ms: i64, cost: u64) -> Option<Decision> {
        let now_ms = now_ms.max(self.updated_ms);
        let at = self.held_at(now_ms);
        let limit = self.params.limit;
        let allowed = cost <= limit && at.held.checked_add(cost).is_some_and(|n| n <= limit);
        let fresh_at_ms = if at.held == 0 {
            now_ms
        } else {
            self.newest_ms.saturating_add(self.window())
        };
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            let need = (u128::from(at.held) + u128::from(cost)).saturating_sub(u128::from(limit));
            let mut freed = 0u128;
            let mut at_ms = at.last_left_ms;
            let mut found = None;
            for entry in self.entries.iter().skip(at.left_entries) {
                at_ms = at_ms.saturating_add(gap_ms(entry));
                freed += u128::from(entry.count);
                if freed >= need {
                    found = Some(at_ms);
                    break;
                }
            }
            found
                .map_or(fresh_at_ms, |at_ms| at_ms.saturating_add(self.window()))
                .saturating_sub(now_ms)
                .max(1)
        };
        Some(Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(at.held),
            retry_after_ms,
            reset_after_ms: fresh_at_ms.saturating_sub(now_ms).max(0),
            delay_ms: None,
        })
    }
}

impl State for SlidingLog {
    fn describe(&self, _now_ms: i64) -> Vec<(&'static str, Field)> {
        vec![
            ("limit", Field::Int(self.params.limit as i64)),
            ("window_ms", Field::Int(self.params.window_ms as i64)),
            ("count", Field::Int(self.total as i64)),
            ("entries", Field::Int(self.entries.len() as i64)),
            ("oldest_ms", Field::Int(self.oldest_ms)),
            ("newest_ms", Field::Int(self.newest_ms)),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    /// When the newest entry leaves the window.
    fn fresh_at_ms(&self) -> i64 {
        if self.entries.is_empty() {
            self.updated_ms
        } else {
            self.newest_ms.saturating_add(self.window())
        }
    }

    fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes()
    }

    /// Layout after the tag: `limit` u64, `window_ms` u64, `updated_ms` i64,
    /// the number of entries u64, `oldest_ms` i64 (0 when there are none),
    /// then each entry's words as little-endian `u32`s, oldest first: its head
    /// and its extension words, in the form described at the top of this
    /// file. 40 bytes plus, usually, 4 per entry.
    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.limit);
        put_u64(out, self.params.window_ms);
        put_i64(out, self.updated_ms);
        put_u64(out, self.entries.len() as u64);
        put_i64(out, self.oldest_ms);
        self.entries.encode(out);
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let limit = input.u64()?;
        let window_ms = input.u64()?;
        let updated_ms = input.timestamp("timestamp out of range")?;
        let count = input.u64()?;
        let oldest_ms = input.i64()?;
        SlidingLogParams { limit, window_ms }
            .check()
            .map_err(DecodeError)?;
        ensure(count <= limit, "more entries than the limit")?;
        // Checked before allocating: a count can only be as large as the
        // words that follow it.
        let count = usize::try_from(count)
            .ok()
            .filter(|&n| n <= input.remaining() / 4)
            .ok_or(DecodeError("state is truncated"))?;
        if count == 0 {
            ensure(oldest_ms == 0, "timestamp of an empty log")?;
        }
        ensure(
            (0..=updated_ms).contains(&oldest_ms),
            "timestamp out of range",
        )?;
        let window = i64::try_from(window_ms).unwrap_or(i64::MAX);
        let mut state = Self::fresh(SlidingLogParams { limit, window_ms }, updated_ms);
        state.entries.reserve_exact(count);
        let mut newest_ms = oldest_ms;
        for i in 0..count {
            let entry = decode_entry(input)?;
            ensure(
                (1..=MAX_AMOUNT).contains(&entry.count),
                "entry count out of range",
            )?;
            if i == 0 {
                ensure(entry.gap == 0, "gap before the oldest entry")?;
            } else {
                ensure(entry.gap >= 1, "entries out of order")?;
            }
            ensure(entry.gap < window_ms, "gap longer than the window")?;
            newest_ms = newest_ms.saturating_add(gap_ms(entry));
            ensure(
                newest_ms - oldest_ms < window,
                "entries span more than the window",
            )?;
            state.total = state.total.saturating_add(entry.count);
            ensure(state.total <= limit, "entries above the limit")?;
            state
                .entries
                .push_back(entry, usize::try_from(limit).unwrap_or(usize::MAX));
        }
        if count > 0 {
            ensure(newest_ms <= updated_ms, "entry after the last update")?;
            ensure(
                oldest_ms > updated_ms.saturating_sub(window),
                "entry outside the window",
            )?;
            state.oldest_ms = oldest_ms;
            state.newest_ms = newest_ms;
        }
        state.entries.shrink_to_fit();
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{call, decode_body, encode_body as encode};
    use crate::algorithms::MAX_DURATION_MS;
    use crate::algorithms::MAX_TIMESTAMP_MS;
    use entries::{COUNT32, COUNT64, GAP_HIGH};
    use proptest::prelude::*;

    const T0: i64 = 1_700_000_000_000;

    fn params(limit: u64, window_ms: u64) -> SlidingLogParams {
        SlidingLogParams { limit, window_ms }
    }

    fn decode(buf: &[u8]) -> Result<SlidingLog, DecodeError> {
        decode_body(buf)
    }

    /// The (time, count) of every entry, oldest first.
    fn entries(state: &Option<SlidingLog>) -> Vec<(i64, u64)> {
        let Some(state) = state else {
            return Vec::new();
        };
        let mut at = state.oldest_ms;
        state
            .entries
            .iter()
            .map(|e| {
                at += e.gap as i64;
                (at, e.count)
            })
            .collect()
    }

    #[test]
    fn a_fresh_log_allows_a_burst_of_the_limit_then_denies() {
        let mut s = None;
        let p = params(3, 1000);
        for left in [2, 1, 0] {
            let d = call(&mut s, p, T0, 1, Mode::Take);
            assert!(d.allowed);
            assert_eq!((d.limit, d.remaining, d.retry_after_ms), (3, left, 0));
            assert_eq!(d.reset_after_ms, 1000);
        }
        let d = call(&mut s, p, T0 + 100, 1, Mode::Take);
        assert!(!d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after_ms, d.reset_after_ms),
            (0, 900, 900)
        );
        assert_eq!(entries(&s), vec![(T0, 3)], "one entry for one millisecond");
    }

    #[test]
    fn each_request_leaves_the_window_exactly_one_window_after_it() {
        let mut s = None;
        let p = params(2, 1000);
        call(&mut s, p, T0, 1, Mode::Take);
        call(&mut s, p, T0 + 400, 1, Mode::Take);
        assert!(!call(&mut s, p, T0 + 999, 1, Mode::Take).allowed);
        let d = call(&mut s, p, T0 + 1000, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        assert!(!call(&mut s, p, T0 + 1399, 1, Mode::Take).allowed);
        assert!(call(&mut s, p, T0 + 1400, 1, Mode::Take).allowed);
    }

    #[test]
    fn a_burst_across_any_boundary_is_never_let_through_twice() {
        let mut s = None;
        let p = params(100, 60_000);
        let mut allowed = 0;
        for t in [T0 + 59_999, T0 + 60_000] {
            for _ in 0..100 {
                allowed += u32::from(call(&mut s, p, t, 1, Mode::Take).allowed);
            }
        }
        assert_eq!(allowed, 100, "the limit, once, in any 60 s");
    }

    #[test]
    fn retry_after_is_exactly_when_enough_has_left_the_window() {
        let p = params(10, 1000);
        let mut s = None;
        call(&mut s, p, T0 + 100, 3, Mode::Take);
        call(&mut s, p, T0 + 300, 2, Mode::Take);
        call(&mut s, p, T0 + 700, 4, Mode::Take);
        call(&mut s, p, T0 + 800, 1, Mode::Take);
        for (cost, expected) in [(1, 200), (3, 200), (4, 400), (5, 400), (9, 800), (10, 900)] {
            let d = call(&mut s, p, T0 + 900, cost, Mode::Peek);
            assert!(!d.allowed);
            assert_eq!(d.retry_after_ms, expected, "cost {cost}");
            let at = T0 + 900 + d.retry_after_ms;
            assert!(!call(&mut s, p, at - 1, cost, Mode::Peek).allowed);
            assert!(call(&mut s, p, at, cost, Mode::Peek).allowed, "cost {cost}");
        }
    }

    #[test]
    fn a_request_of_any_cost_takes_one_entry() {
        let mut s = None;
        let p = params(MAX_AMOUNT, 60_000);
        let d = call(&mut s, p, T0, 7, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, MAX_AMOUNT - 7));
        call(&mut s, p, T0 + 1, 1 << 40, Mode::Take);
        call(&mut s, p, T0 + 2, MAX_AMOUNT - 7 - (1 << 40), Mode::Take);
        assert_eq!(
            entries(&s),
            vec![
                (T0, 7),
                (T0 + 1, 1 << 40),
                (T0 + 2, MAX_AMOUNT - 7 - (1 << 40))
            ]
        );
        let d = call(&mut s, p, T0 + 3, 1, Mode::Take);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after_ms),
            (false, 0, 59_997)
        );
        assert!(s.as_ref().is_some_and(|s| s.heap_bytes() <= 3 * 16));
    }

    #[test]
    fn cost_above_the_limit_can_never_be_allowed_and_stores_nothing() {
        let mut s = None;
        let d = call(&mut s, params(5, 1000), T0, 6, Mode::Take);
        assert_eq!((d.allowed, d.retry_after_ms), (false, -1));
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
        assert!(s.is_none());
        call(&mut s, params(5, 1000), T0, 2, Mode::Take);
        let before = s.clone();
        let d = call(&mut s, params(5, 1000), T0 + 1, 6, Mode::Take);
        assert_eq!((d.allowed, d.retry_after_ms, d.remaining), (false, -1, 3));
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
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 1, 900));
        let d = call(&mut s, p, T0 + 200, 1, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 1, 900));
        assert_eq!(s, before);
    }

    #[test]
    fn a_clock_stepping_back_allows_nothing_extra() {
        let mut s = None;
        let p = params(2, 1000);
        call(&mut s, p, T0 + 5000, 1, Mode::Take);
        // Seen as the latest time: merged into the same entry, not before it.
        let d = call(&mut s, p, T0 + 1000, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 0, 1000));
        assert_eq!(entries(&s), vec![(T0 + 5000, 2)]);
        let d = call(&mut s, p, T0, 1, Mode::Take);
        assert_eq!((d.allowed, d.retry_after_ms), (false, 1000));
        assert!(!call(&mut s, p, T0 + 5999, 1, Mode::Take).allowed);
        assert!(call(&mut s, p, T0 + 6000, 1, Mode::Take).allowed);
    }

    #[test]
    fn a_smaller_limit_keeps_only_the_newest_requests_that_matter() {
        let mut s = None;
        let p = params(10, 1000);
        call(&mut s, p, T0, 4, Mode::Take);
        call(&mut s, p, T0 + 100, 3, Mode::Take);
        call(&mut s, p, T0 + 200, 2, Mode::Take);
        let d = call(&mut s, params(4, 1000), T0 + 300, 1, Mode::Peek);
        assert_eq!((d.allowed, d.limit, d.remaining), (false, 4, 0));
        // Denied until T0 + 100 is out of the window and 2 are left.
        assert_eq!(d.retry_after_ms, 800);
        let mut trimmed = s.clone().unwrap_or_else(|| SlidingLog::fresh(p, 0));
        trimmed.reconfigure(params(4, 1000), T0 + 300);
        assert_eq!(trimmed.used(), 4);
        let trimmed = Some(trimmed);
        assert_eq!(entries(&trimmed), vec![(T0 + 100, 2), (T0 + 200, 2)]);
        // The same answers from the whole log and from the trimmed one.
        for (at, cost) in [
            (T0 + 300, 1),
            (T0 + 1099, 2),
            (T0 + 1100, 2),
            (T0 + 1100, 3),
        ] {
            let whole = call(&mut s.clone(), params(4, 1000), at, cost, Mode::Peek);
            let kept = call(&mut trimmed.clone(), params(4, 1000), at, cost, Mode::Peek);
            assert_eq!(whole, kept, "at {} cost {cost}", at - T0);
        }
        let d = call(&mut s, params(4, 1000), T0 + 1200, 4, Mode::Take);
        assert!(d.allowed);
        assert_eq!(entries(&s), vec![(T0 + 1200, 4)]);
    }

    #[test]
    fn a_larger_limit_applies_to_the_requests_remembered() {
        let mut s = None;
        call(&mut s, params(5, 1000), T0, 5, Mode::Take);
        let d = call(&mut s, params(8, 1000), T0 + 10, 3, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        assert!(!call(&mut s, params(8, 1000), T0 + 999, 1, Mode::Peek).allowed);
    }

    #[test]
    fn a_shorter_window_forgets_what_is_outside_it() {
        let mut s = None;
        let p = params(5, 10_000);
        call(&mut s, p, T0, 3, Mode::Take);
        call(&mut s, p, T0 + 5000, 2, Mode::Take);
        let d = call(&mut s, params(5, 2000), T0 + 6000, 3, Mode::Take);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 0, 2000));
        assert_eq!(entries(&s), vec![(T0 + 5000, 2), (T0 + 6000, 3)]);
    }

    #[test]
    fn a_longer_window_counts_every_request_the_log_still_holds() {
        let mut s = None;
        let p = params(5, 1000);
        call(&mut s, p, T0, 2, Mode::Take);
        call(&mut s, p, T0 + 800, 3, Mode::Take);
        // T0 left the 1 s window at T0 + 1000, but no stored check dropped it:
        // the 10 s window still holds it.
        let d = call(&mut s, params(5, 10_000), T0 + 1000, 1, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 0, 9000));
        // Once a stored check has dropped it, it does not come back.
        call(&mut s, p, T0 + 1500, 2, Mode::Take);
        let d = call(&mut s, params(5, 10_000), T0 + 1600, 1, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 0, 9200));
        assert_eq!(entries(&s), vec![(T0 + 800, 3), (T0 + 1500, 2)]);
    }

    #[test]
    fn a_retry_after_under_new_parameters_holds_before_they_are_stored() {
        for (first, second) in [((4, 1000), (3, 5000)), ((4, 5000), (6, 1000))] {
            let mut s = None;
            let (old, new) = (params(first.0, first.1), params(second.0, second.1));
            call(&mut s, old, T0, 2, Mode::Take);
            call(&mut s, old, T0 + 700, 2, Mode::Take);
            let d = call(&mut s, new, T0 + 900, 3, Mode::Peek);
            assert!(!d.allowed);
            let at = T0 + 900 + d.retry_after_ms;
            assert!(!call(&mut s, new, at - 1, 3, Mode::Peek).allowed);
            assert!(call(&mut s, new, at, 3, Mode::Peek).allowed);
        }
    }

    #[test]
    fn reset_is_when_the_newest_request_leaves_the_window() {
        let mut s = None;
        let p = params(5, 60_000);
        call(&mut s, p, T0, 1, Mode::Take);
        let d = call(&mut s, p, T0 + 12_345, 1, Mode::Take);
        assert_eq!(d.reset_after_ms, 60_000);
        assert_eq!(s.as_ref().map(|s| s.fresh_at_ms()), Some(T0 + 72_345));
        let d = call(&mut s, p, T0 + 72_344, 1, Mode::Peek);
        assert_eq!((d.remaining, d.reset_after_ms), (4, 1));
        let d = call(&mut s, p, T0 + 72_345, 1, Mode::Peek);
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
    }

    #[test]
    fn a_thousand_requests_take_about_four_bytes_each() {
        let mut s = None;
        let p = params(1000, 60_000);
        for i in 0..1000 {
            assert!(call(&mut s, p, T0 + i, 1, Mode::Take).allowed);
        }
        assert!(!call(&mut s, p, T0 + 1000, 1, Mode::Take).allowed);
        let state = s.unwrap_or_else(|| SlidingLog::fresh(p, 0));
        assert_eq!(state.entry_count(), 1000);
        let per_entry = state.heap_bytes() as f64 / 1000.0;
        println!("heap bytes per entry: {per_entry}");
        assert!(per_entry <= 8.0);
        assert!(per_entry <= 4.01, "{per_entry}");
        assert_eq!(encode(&state).len(), 40 + 4 * 1000);
    }

    #[test]
    fn gaps_of_days_and_counts_of_billions_take_extension_words() {
        let mut s = None;
        let p = params(MAX_AMOUNT, MAX_DURATION_MS);
        let day = 86_400_000;
        let steps = [
            (0, 1),
            (1, 1),
            (30 * day, 1),
            (1, 5),
            (200 * day, 1 << 33),
            (1, 1),
        ];
        let mut now = T0;
        let mut expected = Vec::new();
        for (step, cost) in steps {
            now += step;
            assert!(call(&mut s, p, now, cost, Mode::Take).allowed);
            expected.push((now, cost));
        }
        assert_eq!(entries(&s), expected);
        let state = s.clone().unwrap_or_else(|| SlidingLog::fresh(p, 0));
        // Heads 6 words; extension: 1 (gap), 1 (count 5), 1 + 2 (gap, count).
        assert_eq!(state.entries.extra_words(), 5);
        assert_eq!(decode(&encode(&state)), Ok(state.clone()));
        // The 30-day gap leaves with the entries before it.
        let d = call(&mut s, p, T0 + 1 + MAX_DURATION_MS as i64, 1, Mode::Take);
        assert!(d.allowed);
        assert_eq!(entries(&s).first(), Some(&(T0 + 1 + 30 * day, 1)));
    }

    #[test]
    fn the_largest_values_do_not_overflow() {
        let mut s = None;
        let p = params(MAX_AMOUNT, MAX_DURATION_MS);
        let d = call(&mut s, p, MAX_TIMESTAMP_MS, MAX_AMOUNT, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        let d = call(&mut s, p, MAX_TIMESTAMP_MS, MAX_AMOUNT, Mode::Take);
        assert_eq!(
            (d.allowed, d.retry_after_ms),
            (false, MAX_DURATION_MS as i64)
        );
        let state = s.unwrap_or_else(|| SlidingLog::fresh(p, 0));
        assert_eq!(decode(&encode(&state)), Ok(state));
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_buffers() {
        let mut s = None;
        let p = params(9, 60_000);
        call(&mut s, p, T0, 1, Mode::Take);
        call(&mut s, p, T0 + 12_345, 4, Mode::Take);
        let state = s.unwrap_or_else(|| SlidingLog::fresh(p, 0));
        let buf = encode(&state);
        assert_eq!(buf.len(), 40 + 4 + 8);
        assert_eq!(decode(&buf), Ok(state.clone()));
        let empty = SlidingLog::fresh(p, T0);
        assert_eq!(decode(&encode(&empty)), Ok(empty));

        for len in 0..buf.len() {
            assert!(decode(&buf[..len]).is_err(), "truncated to {len}");
        }
        let mut longer = buf.clone();
        longer.extend_from_slice(&[0; 4]);
        assert!(decode(&longer).is_err());
        let with = |at: usize, bytes: &[u8]| {
            let mut bad = buf.clone();
            bad[at..at + bytes.len()].copy_from_slice(bytes);
            decode(&bad)
        };
        assert!(with(0, &0u64.to_le_bytes()).is_err(), "zero limit");
        assert!(with(0, &3u64.to_le_bytes()).is_err(), "entries above limit");
        assert!(with(8, &0u64.to_le_bytes()).is_err(), "zero window");
        assert!(with(8, &(MAX_DURATION_MS + 1).to_le_bytes()).is_err());
        assert!(with(8, &12_345u64.to_le_bytes()).is_err(), "span > window");
        assert!(with(16, &(T0 + 72_345).to_le_bytes()).is_err(), "expired");
        assert!(
            with(16, &(T0 + 12_344).to_le_bytes()).is_err(),
            "future entry"
        );
        assert!(with(24, &3u64.to_le_bytes()).is_err(), "entry count");
        assert!(
            with(24, &u64::MAX.to_le_bytes()).is_err(),
            "huge entry count"
        );
        assert!(with(32, &(-1i64).to_le_bytes()).is_err(), "negative time");
        assert!(with(40, &1u32.to_le_bytes()).is_err(), "oldest gap not 0");
        assert!(with(44, &0u32.to_le_bytes()).is_err(), "gap of 0");
        assert!(with(44, &(COUNT32 | COUNT64).to_le_bytes()).is_err());
        assert!(
            with(44, &(GAP_HIGH | 12_345).to_le_bytes()).is_err(),
            "gap longer than the window"
        );
        assert!(with(48, &1u32.to_le_bytes()).is_err(), "count 1 as a word");
        assert!(with(48, &0u32.to_le_bytes()).is_err(), "count 0");
    }

    #[test]
    fn every_byte_of_an_encoding_is_checked() {
        let mut s = None;
        let p = params(1000, 86_400_000 * 20);
        for (step, cost) in [(0, 1), (5, 7), (86_400_000 * 7, 1), (1, 1 << 2)] {
            let now = s.as_ref().map_or(T0, |s: &SlidingLog| s.updated_ms) + step;
            call(&mut s, p, now, cost, Mode::Take);
        }
        let state = s.unwrap_or_else(|| SlidingLog::fresh(p, 0));
        let buf = encode(&state);
        for at in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[at] ^= 1 << bit;
                if let Ok(decoded) = decode(&bad) {
                    // Only a different valid state: never the same one twice.
                    assert_eq!(encode(&decoded), bad, "byte {at} bit {bit}");
                }
            }
        }
    }

    /// Calls as the proptests make them: a time step and a cost.
    fn op() -> impl Strategy<Value = (i64, u64, bool)> {
        (
            prop_oneof![0i64..3, 0i64..400, 0i64..3000],
            prop_oneof![Just(1u64), 1u64..12],
            prop::bool::weighted(0.2),
        )
    }

    proptest! {
        /// Reading the window off a log without walking it, when its oldest
        /// entry is inside, answers what the walk does, at any time.
        #[test]
        fn the_window_read_without_a_walk_is_the_walks(
            limit in 1u64..30,
            window_ms in 1u64..2000,
            ops in prop::collection::vec(op(), 1..100),
            probes in prop::collection::vec(-3000i64..5000, 1..20),
        ) {
            let p = params(limit, window_ms);
            let mut s = None;
            let mut now = T0;
            for (step, cost, peek) in ops {
                now += step;
                call(&mut s, p, now, cost, if peek { Mode::Peek } else { Mode::Take });
            }
            let Some(log) = s else { return Ok(()) };
            let w = window_ms as i64;
            let edges = [log.oldest_ms + w - 1, log.oldest_ms + w, log.oldest_ms + w + 1, i64::MIN, i64::MAX];
            for at in probes.into_iter().map(|d| now + d).chain(edges) {
                let read = log.held_at(at);
                let walked = log.held_at_walking(at.saturating_sub(log.window()));
                prop_assert_eq!(
                    (read.held, read.left_entries, read.last_left_ms),
                    (walked.held, walked.left_entries, walked.last_left_ms),
                    "at {}", at
                );
            }
        }
    }

    proptest! {
        #[test]
        fn checking_a_stored_log_in_place_answers_and_stores_exactly_as_a_copy_would(
            limit in 1u64..30,
            window_ms in 1u64..2000,
            ops in prop::collection::vec(op(), 1..200),
        ) {
            let p = params(limit, window_ms);
            let (mut copy_path, mut in_place): (Option<SlidingLog>, Option<SlidingLog>) = (None, None);
            let mut now = T0;
            for (step, cost, peek) in ops {
                now += step;
                let mode = if peek { Mode::Peek } else { Mode::Take };
                let d = call(&mut copy_path, p, now, cost, mode);
                let e = match in_place.as_mut() {
                    Some(state) => state.check_stored(p, now, cost, mode).0,
                    None => call(&mut in_place, p, now, cost, mode),
                };
                prop_assert_eq!(d, e);
                let encoded = |s: &Option<SlidingLog>| s.as_ref().map(encode);
                prop_assert_eq!(encoded(&copy_path), encoded(&in_place));
            }
        }

        #[test]
        fn no_window_long_span_ever_holds_more_than_the_limit_and_nothing_fitting_is_denied(
            limit in 1u64..30,
            window_ms in 1u64..2000,
            ops in prop::collection::vec(op(), 1..200),
        ) {
            let p = params(limit, window_ms);
            let w = window_ms as i64;
            let mut s = None;
            let mut now = T0;
            let mut log: Vec<(i64, u64)> = Vec::new();
            for (step, cost, peek) in ops {
                now += step;
                let used: u64 = log.iter().filter(|&&(t, _)| t > now - w).map(|&(_, c)| c).sum();
                let mode = if peek { Mode::Peek } else { Mode::Take };
                let before = s.clone();
                let d = call(&mut s, p, now, cost, mode);
                prop_assert_eq!(d.allowed, used + cost <= limit, "exact at {}", now - T0);
                if peek || !d.allowed {
                    prop_assert_eq!(&s, &before);
                } else {
                    log.push((now, cost));
                    prop_assert_eq!(d.remaining, limit - used - cost);
                    // The span of one window ending now; those ending at the
                    // earlier requests were checked when they were made.
                    let span: u64 = log.iter()
                        .filter(|&&(t, _)| t > now - w)
                        .map(|&(_, c)| c)
                        .sum();
                    prop_assert!(span <= limit);
                    let entries = s.as_ref().map_or(0, SlidingLog::entry_count) as u64;
                    prop_assert!(entries <= limit);
                }
                if !d.allowed && cost <= limit {
                    let at = now + d.retry_after_ms;
                    prop_assert!(d.retry_after_ms >= 1);
                    prop_assert!(!call(&mut s.clone(), p, at - 1, cost, Mode::Peek).allowed);
                    prop_assert!(call(&mut s.clone(), p, at, cost, Mode::Peek).allowed);
                } else if !d.allowed {
                    prop_assert_eq!(d.retry_after_ms, -1);
                }
            }
        }

        #[test]
        fn after_a_parameter_change_the_new_limit_holds_over_the_new_window(
            before in (1u64..30, 1u64..2000),
            after in (1u64..30, 1u64..2000),
            ops in prop::collection::vec(op(), 2..200),
            change_at in 0usize..200,
        ) {
            let (old, new) = (params(before.0, before.1), params(after.0, after.1));
            let mut s = None;
            let mut now = T0;
            let mut log: Vec<(i64, u64)> = Vec::new();
            let change_at = change_at % ops.len();
            let mut last_before_change = i64::MIN / 2;
            for (i, (step, cost, peek)) in ops.into_iter().enumerate() {
                now += step;
                let p = if i < change_at { old } else { new };
                // After the change, the log holds what it held at its last
                // update before: one old window back from the last request.
                let cutoff = if i >= change_at {
                    last_before_change - old.window_ms as i64
                } else {
                    i64::MIN
                };
                let w = p.window_ms as i64;
                let used: u64 = log.iter()
                    .filter(|&&(t, _)| t > now - w && t > cutoff)
                    .map(|&(_, c)| c)
                    .sum();
                let mode = if peek { Mode::Peek } else { Mode::Take };
                let d = call(&mut s, p, now, cost, mode);
                prop_assert_eq!(d.allowed, used + cost <= p.limit, "op {} at {}", i, now - T0);
                let took = if d.allowed && !peek { cost } else { 0 };
                prop_assert_eq!(d.remaining, p.limit.saturating_sub(used + took));
                if took > 0 {
                    log.push((now, cost));
                    if i < change_at {
                        last_before_change = now;
                    }
                    let entries = s.as_ref().map_or(0, SlidingLog::entry_count) as u64;
                    prop_assert!(entries <= p.limit);
                }
                if !d.allowed && cost <= p.limit {
                    let at = now + d.retry_after_ms;
                    prop_assert!(!call(&mut s.clone(), p, at - 1, cost, Mode::Peek).allowed);
                    prop_assert!(call(&mut s.clone(), p, at, cost, Mode::Peek).allowed);
                }
            }
        }

        #[test]
        fn peek_answers_what_take_would_and_changes_nothing(
            limit in 1u64..30,
            window_ms in 1u64..2000,
            ops in prop::collection::vec(op(), 1..200),
        ) {
            let p = params(limit, window_ms);
            let mut s = None;
            let mut now = T0;
            for (step, cost, _) in ops {
                now += step;
                let before = s.clone();
                let peeked = call(&mut s, p, now, cost, Mode::Peek);
                prop_assert_eq!(&s, &before);
                let taken = call(&mut s, p, now, cost, Mode::Take);
                prop_assert_eq!(peeked.allowed, taken.allowed);
                prop_assert_eq!(peeked.retry_after_ms, taken.retry_after_ms);
                let took = if taken.allowed { cost } else { 0 };
                prop_assert_eq!(peeked.remaining, taken.remaining + took);
            }
        }

        #[test]
        fn encoding_round_trips_for_any_reachable_state(
            limit in prop_oneof![1u64..50, 1u64..=MAX_AMOUNT],
            window_ms in prop_oneof![1u64..5000, 1u64..=MAX_DURATION_MS],
            ops in prop::collection::vec(
                (prop_oneof![0i64..3, 0i64..1 << 31, 0i64..1 << 36], any::<u64>()),
                1..100,
            ),
        ) {
            let p = params(limit, window_ms);
            let mut s = None;
            let mut now = T0;
            for (step, cost) in ops {
                now += step;
                call(&mut s, p, now, cost % limit + 1, Mode::Take);
                let state = s.clone().unwrap_or_else(|| SlidingLog::fresh(p, now));
                let buf = encode(&state);
                prop_assert_eq!(decode(&buf), Ok(state.clone()));
                prop_assert!(state.heap_bytes() as u64 <= 8 * state.used() + 16);
            }
        }
    }
}
