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

use super::{div_i128, ms_to_ns, ns_to_ms_ceil, Decision, Mode};
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
    /// when allowed. Also returns nanoseconds from now to the request's
    /// start (its turn), which the leaky bucket replies as a delay.
    pub fn check(&mut self, pace: Pace, now_ms: i64, cost: u64, mode: Mode) -> (Decision, i128) {
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
            reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
            delay_ms: None,
        };
        (decision, start.saturating_sub(now))
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
    pub fn fresh_at_ms(&self) -> i64 {
        ns_to_ms_ceil(self.due_ns)
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
