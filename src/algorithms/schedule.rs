//! The arithmetic GCRA and the leaky bucket share: a *schedule*.
//!
//! Terms: a schedule is one time, `due_ns`, when everything taken so far is
//! paid off; a time in the past means the same as now. Units are paid off
//! one every `interval_ns`. A request of cost `c` at `now` starts at
//! `start = max(due, now)` and moves `due` to `start + c * interval`; it is
//! allowed when that leaves `due` at most `span_ns` ahead of now, and `c` is
//! at most `limit` (`span = limit * interval`, so a fresh schedule allows
//! `limit` at once). GCRA calls `due` the theoretical arrival time and
//! `span` its `tau + T`; the leaky bucket calls `due` the drain time, when
//! its queue is empty, and `start` the request's turn.
//!
//! Arithmetic is exact: integer nanoseconds in `i128`. Replies round up to
//! whole milliseconds, so a caller that waits what it is told is never early.

use super::{div_i128, ms_to_ns, ns_to_ms_ceil, Decision, Mode, NS_PER_MS};
use crate::encoding::{ensure, put_i64, DecodeError, Reader};

/// How fast a schedule pays off, and how far ahead it may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// Nanoseconds per unit, at least 1.
    pub interval_ns: i128,
    /// The most units at once.
    pub limit: u64,
}

impl Pace {
    /// `limit * interval`: how far `due` may run ahead of now.
    pub fn span_ns(&self) -> i128 {
        self.interval_ns.saturating_mul(i128::from(self.limit))
    }
}

/// Packed to 8-byte alignment: an `i128` aligns to 16, which would pad the
/// schedule to 32 bytes and every GCRA state by 16 (measured: `MEMORY
/// USAGE` 96 B against 80). Fields are read and written by value only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(8))]
pub(crate) struct Schedule {
    /// When everything taken is paid off (Unix ns), in
    /// `updated_ms..=updated_ms + span` once brought up to date.
    pub due_ns: i128,
    /// The latest time seen (Unix ms).
    pub updated_ms: i64,
}

/// `ns` (in `0..=i64::MAX`) in milliseconds, rounded up: what
/// `ns_to_ms_ceil` answers for it, with one unsigned division by a
/// constant (no 2^63 - 1 ns is anywhere near `MAX_TIMESTAMP_MS`).
///
/// Not `u64::div_ceil`, which tests the remainder (four instructions more,
/// four times a check); `ns + 999_999` cannot overflow a `u64`.
#[inline]
#[allow(clippy::manual_div_ceil)]
fn ceil_ms(ns: i64) -> i64 {
    debug_assert!(ns >= 0);
    ((ns as u64 + (NS_PER_MS as u64 - 1)) / NS_PER_MS as u64) as i64
}

impl Schedule {
    /// Nothing owed.
    pub fn fresh(now_ms: i64) -> Self {
        Self {
            due_ns: ms_to_ns(now_ms),
            updated_ms: now_ms,
        }
    }

    /// Bring the schedule to `now_ms` (never earlier than already seen): a
    /// due time in the past becomes now. Returns the time used, in ns.
    fn advance(&mut self, now_ms: i64) -> i128 {
        self.updated_ms = self.updated_ms.max(now_ms);
        let now = ms_to_ns(self.updated_ms);
        self.due_ns = self.due_ns.max(now);
        now
    }

    /// Takes on a new pace: what is owed is kept (it is time, whatever the
    /// rate), clamped to the new span after the last update, so a key never
    /// owes more than one emptied under the new pace would. Measured from
    /// the last update, not from `now`: until an allowed request stores the
    /// new parameters every call reconfigures the stored state again, and a
    /// promised `retry_after_ms` must stay true across those calls.
    pub fn reconfigure(&mut self, pace: Pace, now_ms: i64) {
        let most = ms_to_ns(self.updated_ms).saturating_add(pace.span_ns());
        self.due_ns = self.due_ns.min(most);
        self.advance(now_ms);
    }

    /// Decides a request of `cost` at `now_ms`, taking it in [`Mode::Take`]
    /// when allowed. Also returns the milliseconds from now to the
    /// request's start (its turn), rounded up, which the leaky bucket
    /// replies as a delay.
    ///
    /// In 64-bit arithmetic when every time involved fits (a time from 1970
    /// to 2262, a span under 292 years: nearly always), with the 128-bit
    /// [`Schedule::check_wide`] otherwise; both answer the same, bit for
    /// bit (a property test compares them).
    #[inline(always)]
    pub fn check(&mut self, pace: Pace, now_ms: i64, cost: u64, mode: Mode) -> (Decision, i64) {
        match self.check_narrow(pace, now_ms, cost, mode) {
            Some(answer) => answer,
            None => self.check_wide(pace, now_ms, cost, mode),
        }
    }

    /// A take of `cost` at `now_ms` ([`Schedule::check`] in [`Mode::Take`])
    /// checked on a copy of the schedule, kept only when the request is
    /// allowed: a denial leaves the schedule as it was. The in-place take
    /// of the algorithms kept on a schedule (the leaky bucket, GCRA).
    #[inline(always)]
    pub fn take_if_allowed(&mut self, pace: Pace, now_ms: i64, cost: u64) -> (Decision, i64) {
        // `check` clamps the time to the last it saw itself.
        let mut schedule = *self;
        let answer = schedule.check(pace, now_ms, cost, Mode::Take);
        if answer.0.allowed {
            *self = schedule;
        }
        answer
    }

    /// [`Schedule::check`] in `i64` nanoseconds, or `None` (nothing
    /// changed) when a time it needs does not fit: `now` from 0 to
    /// `i64::MAX` ns, the due time and `now + span` at most `i64::MAX`.
    /// Then `owed = max(due, now) - now` is in `0..=i64::MAX`, and so is
    /// every value below (see each), none overflowing; the answers are
    /// [`Schedule::check_wide`]'s with the saturations that cannot happen
    /// left out, and `ns_to_ms_ceil` of a value in `0..=i64::MAX` (whose
    /// millisecond count is below `MAX_TIMESTAMP_MS`, so it is not
    /// clamped) as an unsigned division.
    #[inline(always)]
    fn check_narrow(
        &mut self,
        pace: Pace,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> Option<(Decision, i64)> {
        const PER_MS: i64 = NS_PER_MS as i64;
        let now_ms = self.updated_ms.max(now_ms);
        if !(0..=i64::MAX / PER_MS).contains(&now_ms) {
            return None;
        }
        let now = now_ms * PER_MS;
        let interval = i64::try_from(pace.interval_ns).ok().filter(|&i| i >= 1)?;
        let span = interval.checked_mul(i64::try_from(pace.limit).ok()?)?;
        let owed = i64::try_from(self.due_ns).ok()?.max(now) - now;
        // `cost * interval <= span` when `cost <= limit`.
        let allowed = cost <= pace.limit && owed <= span - cost as i64 * interval;
        let retry_after_ms = if allowed {
            0
        } else if cost > pace.limit {
            -1
        } else {
            // `owed + cost * interval - span`, in `1..=owed`: at least 1 ms
            // once rounded up.
            ceil_ms(owed - (span - cost as i64 * interval))
        };
        // Owed once the request is taken: at most `span` when it is.
        let owes = if allowed && mode == Mode::Take {
            owed + cost as i64 * interval
        } else {
            owed
        };
        // `owes <= span` or `owed >= 0`: no overflow; the room at most
        // `limit`.
        let room = (span - owes).max(0) / interval;
        // `max(due, now)` when nothing is taken, which fits.
        let due = now.checked_add(owes)?;
        self.updated_ms = now_ms;
        self.due_ns = i128::from(due);
        let decision = Decision {
            allowed,
            limit: pace.limit,
            remaining: (room as u64).min(pace.limit),
            retry_after_ms,
            // `ceil((now + owes) / 1 ms) - now_ms`, `now` whole ms.
            reset_after_ms: ceil_ms(owes),
            delay_ms: None,
        };
        Some((decision, ceil_ms(owed)))
    }

    /// [`Schedule::check`] in `i128` nanoseconds, saturating: for any
    /// times, paces and costs.
    #[inline(never)]
    fn check_wide(&mut self, pace: Pace, now_ms: i64, cost: u64, mode: Mode) -> (Decision, i64) {
        let now = self.advance(now_ms);
        let now_ms = self.updated_ms;
        let interval = pace.interval_ns;
        let span = pace.span_ns();
        let start = self.due_ns;
        let new_due = start.saturating_add(i128::from(cost).saturating_mul(interval));
        let ahead = new_due.saturating_sub(now);
        let allowed = cost <= pace.limit && ahead <= span;
        let retry_after_ms = if allowed {
            0
        } else if cost > pace.limit {
            -1
        } else {
            // Allowed once now' >= new_due - span (`due` is ahead of now',
            // so it does not move).
            ns_to_ms_ceil(ahead - span).max(1)
        };
        if allowed && mode == Mode::Take {
            self.due_ns = new_due;
        }
        let room = div_i128(
            span.saturating_sub(self.due_ns.saturating_sub(now)).max(0),
            interval,
        );
        let decision = Decision {
            allowed,
            limit: pace.limit,
            remaining: u64::try_from(room).unwrap_or(0).min(pace.limit),
            retry_after_ms,
            reset_after_ms: ns_to_ms_ceil(self.due_ns).saturating_sub(now_ms).max(0),
            delay_ms: None,
        };
        (decision, ns_to_ms_ceil(start.saturating_sub(now)))
    }

    /// Gives back `amount` units at `now_ms`: the due time moves back by
    /// their intervals, never before now (a due time of now is nothing
    /// owed, the most a schedule can hold). Returns the units given back, a
    /// last one counted when it went back in part: nothing given back is
    /// exactly nothing changed.
    pub fn give_back(&mut self, pace: Pace, now_ms: i64, amount: u64) -> u64 {
        let now = self.advance(now_ms);
        let before = self.due_ns;
        let back = i128::from(amount).saturating_mul(pace.interval_ns);
        self.due_ns = before.saturating_sub(back).max(now);
        let gained = before - self.due_ns;
        let given = (gained + pace.interval_ns - 1) / pace.interval_ns;
        u64::try_from(given).unwrap_or(0).min(amount)
    }

    /// The due time, rounded up to the millisecond: when the key is fresh.
    /// In 64 bits when the due time is from 1970 to 2262 (`ns_to_ms_ceil`
    /// clamps no such time): twice on every check.
    #[inline(always)]
    pub fn fresh_at_ms(&self) -> i64 {
        match i64::try_from(self.due_ns) {
            Ok(due) if due >= 0 => ceil_ms(due),
            _ => ns_to_ms_ceil(self.due_ns),
        }
    }

    /// `updated_ms` i64, then `due_ns` as an i128, little-endian (low 8
    /// bytes, then high 8).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_i64(out, self.updated_ms);
        out.extend_from_slice(&self.due_ns.to_le_bytes());
    }

    /// Reads what [`Schedule::encode`] writes, unchecked: the caller reads
    /// its own fields first, then checks them, then [`Schedule::validate`].
    pub fn read(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let updated_ms = input.timestamp("timestamp out of range")?;
        let due_low = input.u64()?;
        let due_high = input.i64()?;
        Ok(Self {
            due_ns: (i128::from(due_high) << 64) | i128::from(due_low),
            updated_ms,
        })
    }

    /// Whether this is a schedule a key of `pace` can hold; `what` names the
    /// due time in the error.
    pub fn validate(&self, pace: Pace, what: &'static str) -> Result<(), DecodeError> {
        let updated_ns = ms_to_ns(self.updated_ms);
        ensure(
            (updated_ns..=updated_ns.saturating_add(pace.span_ns())).contains(&{ self.due_ns }),
            what,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::MAX_TIMESTAMP_MS;
    use proptest::prelude::*;

    /// Nanoseconds near every edge the two paths have: 0, whole ms, the
    /// ends of `i64`, a time now, the last time a state carries.
    fn edge_ns() -> impl Strategy<Value = i128> {
        let max = i128::from(i64::MAX);
        prop_oneof![
            any::<i64>().prop_map(i128::from),
            any::<i128>(),
            (-3i128..=3).prop_map(move |d| max + d),
            (-3i128..=3).prop_map(move |d| -max + d),
            (-3i128..=3).prop_map(|d| ms_to_ns(1_700_000_000_000) + d),
            (-3i128..=3).prop_map(|d| ms_to_ns(MAX_TIMESTAMP_MS) + d),
            (-2_000_000i128..=2_000_000),
        ]
    }

    fn edge_ms() -> impl Strategy<Value = i64> {
        let narrow = i64::MAX / NS_PER_MS as i64;
        prop_oneof![
            any::<i64>(),
            (-3i64..=3),
            (-3i64..=3).prop_map(move |d| narrow + d),
            (-3i64..=3).prop_map(|d| 1_700_000_000_000 + d),
            (-3i64..=3).prop_map(|d| MAX_TIMESTAMP_MS + d),
            (0i64..=MAX_TIMESTAMP_MS),
        ]
    }

    fn edge_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (0u64..=3),
            (0u64..=3).prop_map(|d| u64::MAX - d),
            (0u64..=3).prop_map(|d| (i64::MAX as u64) - 1 + d),
            (0u64..=3).prop_map(|d| (1 << 53) - 1 + d),
            (0u64..1000),
        ]
    }

    /// Paces of tiny and huge intervals and limits (an interval is at
    /// least 1 ns: both constructors clamp it so).
    fn edge_pace() -> impl Strategy<Value = Pace> {
        let interval = prop_oneof![
            (1i128..=3),
            (1i128..=1_000_000_000_000),
            (0i128..=3).prop_map(|d| i128::from(i64::MAX) - d),
            (1i128..=i128::MAX),
            Just(ms_to_ns(366 * 86_400_000)),
        ];
        (interval, edge_u64()).prop_map(|(interval_ns, limit)| Pace { interval_ns, limit })
    }

    /// A schedule as a key holds it: the due time anywhere from the last
    /// update to a span after it (or any value at all).
    fn schedule(pace: Pace) -> impl Strategy<Value = Schedule> {
        (edge_ms(), edge_ns(), any::<bool>(), 0.0f64..=1.0).prop_map(
            move |(updated_ms, due_ns, valid, part)| {
                let due_ns = if valid {
                    let updated = ms_to_ns(updated_ms);
                    let span = pace.span_ns().min(1 << 100);
                    updated + (span as f64 * part) as i128
                } else {
                    due_ns
                };
                Schedule { due_ns, updated_ms }
            },
        )
    }

    proptest! {
        /// The 64-bit path answers what the 128-bit one does, bit for bit,
        /// and leaves the same schedule, whenever it answers.
        #[test]
        fn the_narrow_check_answers_as_the_wide_one(
            (pace, before) in edge_pace().prop_flat_map(|p| (Just(p), schedule(p))),
            now_ms in edge_ms(),
            cost in edge_u64(),
            take in any::<bool>(),
        ) {
            let mode = if take { Mode::Take } else { Mode::Peek };
            let mut narrow = before;
            let answer = narrow.check_narrow(pace, now_ms, cost, mode);
            let mut wide = before;
            let expected = wide.check_wide(pace, now_ms, cost, mode);
            match answer {
                Some(answer) => {
                    prop_assert_eq!(answer, expected);
                    prop_assert_eq!(narrow, wide);
                }
                None => prop_assert_eq!(narrow, before, "nothing changed"),
            }
            let mut both = before;
            prop_assert_eq!(both.check(pace, now_ms, cost, mode), expected);
            prop_assert_eq!(both, wide);
        }

        /// Keys of times up to the year 2096 and spans up to 136 years
        /// (one a day for 50,000 days) take the 64-bit path (else the test
        /// above would compare nothing).
        #[test]
        fn the_narrow_check_answers_for_todays_keys(
            interval_ns in 1i128..=ms_to_ns(86_400_000),
            limit in 1u64..=50_000,
            owed in 0.0f64..=1.0,
            now_ms in 0i64..=4_000_000_000_000i64,
            cost in 0u64..=1_000_001,
            take in any::<bool>(),
        ) {
            let pace = Pace { interval_ns, limit };
            let before = Schedule {
                due_ns: ms_to_ns(now_ms) + (pace.span_ns() as f64 * owed) as i128,
                updated_ms: now_ms,
            };
            let mode = if take { Mode::Take } else { Mode::Peek };
            let mut narrow = before;
            prop_assert!(narrow.check_narrow(pace, now_ms, cost, mode).is_some());
        }

        #[test]
        fn the_fresh_moment_is_the_due_time_rounded_up(due_ns in edge_ns(), updated_ms in edge_ms()) {
            let s = Schedule { due_ns, updated_ms };
            prop_assert_eq!(s.fresh_at_ms(), ns_to_ms_ceil(due_ns));
        }
    }

    #[test]
    fn whole_milliseconds_round_up_as_ns_to_ms_ceil_does() {
        for ns in [0, 1, 999_999, 1_000_000, 1_000_001, i64::MAX - 1, i64::MAX] {
            assert_eq!(ceil_ms(ns), ns_to_ms_ceil(i128::from(ns)), "{ns}");
        }
    }
}
