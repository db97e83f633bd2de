//! Sliding window counter: an estimate of the requests in the last `window`,
//! kept in `precision` counters instead of one timestamp per request.
//!
//! Terms: the time line is cut into buckets of `window / precision`, aligned
//! to the Unix epoch. The sliding window `(now - window, now]` covers the
//! current bucket, the `precision - 1` before it, and part of the oldest one,
//! whose count is weighted by the share of it still inside the window (it is
//! assumed to have been spread evenly). With `precision` 1 this is
//! Cloudflare's estimate: `previous * overlap + current`.
//!
//! Arithmetic is exact: times are kept in *ticks* of `1/precision` ms, so a
//! bucket is exactly `window_ms` ticks long, and the weighted count is
//! compared as an integer scaled by `window_ms`.

use super::shapes::{check_limit_and_window, limit_and_window, LIMIT, WINDOW};
use super::{Algorithm, Decision, Field, Mode, State, MAX_AMOUNT, MAX_TIMESTAMP_MS};
use crate::encoding::{ensure, put_i64, put_u16, put_u64, DecodeError, Reader};
use crate::error::CommandError;
use crate::words::syntax::{duration_word, Kind, OptionWord, Syntax, Word};
use crate::words::values::small_count;
use std::num::NonZeroU64;

/// The most sub-windows a window may be cut into.
pub const MAX_PRECISION: u16 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounterParams {
    /// The most requests allowed in any `window`.
    pub limit: u64,
    pub window_ms: u64,
    /// How many buckets a window is cut into (1 to [`MAX_PRECISION`]).
    pub precision: u16,
}

/// `RL.SLIDINGCOUNTER key limit window [PRECISION n]`; `PRECISION`
/// defaults to 1 (Cloudflare's two-window estimate).
impl Syntax for SlidingCounterParams {
    const PARAMS: &'static [Word] = &[LIMIT, WINDOW];

    const OPTIONS: &'static [OptionWord] = &[OptionWord {
        token: "PRECISION",
        value: Word {
            name: "precision",
            kind: Kind::Integer,
            summary: "Counters a window is cut into, from 1 (default: the current and the previous window) to 1000; more is closer to exact, at 8 bytes a counter.",
        },
        parse: |value| small_count(value, "PRECISION", MAX_PRECISION).map(u64::from),
    }];

    const SUMMARY: &'static str = "Sliding window counter: at most limit requests in any window, estimated from counters of sub-windows. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].";

    const COMPLEXITY: &'static str = "O(P) where P is the PRECISION (1 by default)";

    fn from_words(words: &[&[u8]]) -> Result<Self, CommandError> {
        let (limit, window_ms) = limit_and_window(words)?;
        Ok(Self {
            limit,
            window_ms,
            precision: 1,
        })
    }

    const PARTIAL: bool = true;

    const WINDOWED: bool = true;

    const EXAMPLE: &'static [&'static str] = &["100", "1m", "PRECISION", "6"];

    fn check(&self) -> Result<(), &'static str> {
        check_limit_and_window(self.limit, self.window_ms)?;
        if (1..=MAX_PRECISION).contains(&self.precision) {
            Ok(())
        } else {
            Err("precision out of range")
        }
    }

    fn to_words(&self) -> Vec<String> {
        vec![
            self.limit.to_string(),
            duration_word(self.window_ms),
            "PRECISION".to_string(),
            self.precision.to_string(),
        ]
    }

    fn with_options(self, values: &[Option<u64>]) -> Self {
        let precision = values
            .first()
            .copied()
            .flatten()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(self.precision);
        Self { precision, ..self }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingCounter {
    /// The parameters' limit and window; their precision is the length of
    /// the ring less one.
    limit: u64,
    window_ms: u64,
    /// Requests counted in bucket `i`, at `counts[i % (precision + 1)]`, for
    /// the buckets from `newest - precision` to `newest`, where `newest` is
    /// the bucket of `updated_ms`.
    counts: Box<[u64]>,
    /// When the counts were last brought up to date (Unix ms).
    updated_ms: i64,
    /// The state's fresh moment ([`State::fresh_at_ms`], the key's expiry,
    /// asked for up to three times a check), kept up to date by every
    /// change of the counts or of `updated_ms` (see `settle`). It takes the
    /// 8 bytes a precision of its own would (with its padding), so the
    /// state is no bigger than without it.
    fresh_at_ms: i64,
}

impl SlidingCounter {
    /// The parameters' precision: the ring holds `precision + 1` counts
    /// (at most `u16::MAX + 1`).
    fn precision(&self) -> u16 {
        self.counts.len().wrapping_sub(1) as u16
    }

    /// The fresh moment, computed (see [`State::fresh_at_ms`]).
    fn fresh_moment(&self) -> i64 {
        self.fresh_moment_fast()
            .unwrap_or_else(|| self.fresh_moment_wide())
    }

    /// Brings the stored fresh moment up to date after a change.
    fn settle(&mut self) {
        self.fresh_at_ms = self.fresh_moment();
    }

    fn n(&self) -> i128 {
        i128::from(self.precision())
    }

    fn w(&self) -> i128 {
        i128::from(self.window_ms)
    }

    fn ticks(&self, t_ms: i64) -> i128 {
        i128::from(t_ms) * self.n()
    }

    fn bucket_of(&self, t_ms: i64) -> i128 {
        // Times, precisions and windows are bounded (2^53 ms, 1000, 366 d), so
        // ticks fit an i64 and the division is one machine instruction
        // rather than a 128-bit division routine (the 128-bit path, a
        // refund, a new window and RL.INFO come here).
        match t_ms.checked_mul(i64::from(self.precision())) {
            Some(ticks) => i128::from(ticks.div_euclid(self.window_ms.max(1) as i64)),
            None => self.ticks(t_ms).div_euclid(self.w()),
        }
    }

    fn slot(&self, bucket: i128) -> usize {
        let ring = i64::from(self.precision()) + 1;
        match i64::try_from(bucket) {
            Ok(bucket) => bucket.rem_euclid(ring) as usize,
            Err(_) => bucket.rem_euclid(i128::from(ring)) as usize,
        }
    }

    fn count(&self, bucket: i128) -> i128 {
        i128::from(self.counts.get(self.slot(bucket)).copied().unwrap_or(0))
    }

    /// Forget the buckets that slid out of the window by `now_ms`.
    fn advance(&mut self, now_ms: i64) {
        let newest = self.bucket_of(self.updated_ms);
        let current = self.bucket_of(now_ms);
        let stale = (current - newest).clamp(0, self.n() + 1);
        for k in 1..=stale {
            let slot = self.slot(newest + k);
            if let Some(count) = self.counts.get_mut(slot) {
                *count = 0;
            }
        }
        self.updated_ms = self.updated_ms.max(now_ms);
    }

    /// Requests in the window ending at `now_ms`, with the oldest bucket
    /// weighted, times `window_ms`. The state must be advanced to `now_ms`.
    fn used_scaled(&self, now_ms: i64) -> i128 {
        self.used_scaled_by(now_ms, |b| self.count(b))
    }

    /// [`Self::used_scaled`] with the count of each bucket from `count`.
    fn used_scaled_by(&self, now_ms: i64, count: impl Fn(i128) -> i128) -> i128 {
        let (n, w) = (self.n(), self.w());
        let current = self.bucket_of(now_ms);
        let into_bucket = self.ticks(now_ms) - current * w;
        let recent: i128 = (current - n + 1..=current).map(&count).sum();
        count(current - n) * (w - into_bucket) + recent * w
    }

    /// The count of `bucket` as it will be once the state is advanced past
    /// the last update, without advancing it: buckets after the newest (the
    /// bucket of the last update, `newest`, given by the caller, which
    /// reads several), or older than the ring holds, count nothing.
    fn count_seen(&self, bucket: i128, newest: i128) -> i128 {
        if bucket > newest || bucket < newest - self.n() {
            0
        } else {
            self.count(bucket)
        }
    }

    /// Milliseconds from `now_ms` until `cost` more fits under the limit.
    /// The weighted count only falls as time passes (the oldest bucket fades,
    /// then drops out), so the first moment it fits is found bucket by bucket.
    fn ms_until_fits(&self, now_ms: i64, cost: u64) -> i64 {
        self.ms_until_fits_by(now_ms, cost, |b| self.count(b))
    }

    /// [`Self::ms_until_fits`] with the count of each bucket from `count`.
    fn ms_until_fits_by(&self, now_ms: i64, cost: u64, count: impl Fn(i128) -> i128) -> i64 {
        let (n, w) = (self.n(), self.w());
        let now_ticks = self.ticks(now_ms);
        let current = self.bucket_of(now_ms);
        let limit = i128::from(self.limit);
        let cost = i128::from(cost);
        // The buckets after the oldest, from the window ending in `current`;
        // each step forward drops the one that becomes the oldest, so the
        // search is linear in the precision, not quadratic.
        let mut recent: i128 = (current - n + 1..=current).map(&count).sum();
        for k in 0..=n {
            let bucket = current + k;
            let oldest = count(bucket - n);
            if k > 0 {
                recent -= oldest;
            }
            let room = limit - recent - cost;
            if room < 0 {
                continue;
            }
            // Need oldest * (w - into) <= room * w.
            let into = if oldest == 0 {
                0
            } else {
                w - (room * w / oldest).min(w)
            };
            if into >= w {
                continue;
            }
            let at = (bucket * w + into).max(now_ticks);
            return ticks_to_ms_ceil(at - now_ticks, n);
        }
        ticks_to_ms_ceil((current + n + 1) * w - now_ticks, n)
    }
}

/// The check's arithmetic in 64 bits (products in 128 from 64-bit factors,
/// one machine multiply each), exact within its range, which covers every
/// state a command can make: times from 0 whose ticks fit a `u64` (2^53 ms
/// times 1000 do), a window and a precision of at least 1, a window of at
/// most `i64::MAX` ms, a time not before the last update, the ring of its
/// full length. Outside it each `*_fast` function answers `None` and the
/// caller takes the 128-bit path (`*_wide`), which the fast one must equal
/// bit for bit (the `fast_and_wide` property tests compare them with a
/// frozen copy of the 128-bit code).
impl SlidingCounter {
    /// The precision and the window when the fast path applies to them
    /// (the ring is always `precision + 1` long).
    fn shape(&self) -> Option<(NonZeroU64, NonZeroU64)> {
        let n = NonZeroU64::new((self.counts.len() as u64).saturating_sub(1))?;
        let w = NonZeroU64::new(self.window_ms).filter(|w| w.get() <= i64::MAX as u64)?;
        Some((n, w))
    }

    /// The bucket of `t_ms` and the ticks into it, when `t_ms` is at least 0
    /// and its ticks fit a `u64`: one multiply and one division.
    fn place(t_ms: i64, n: NonZeroU64, w: NonZeroU64) -> Option<(u64, u64)> {
        let ticks = u64::try_from(t_ms).ok()?.checked_mul(n.get())?;
        Some((ticks / w, ticks % w))
    }

    /// The buckets of the last update and of `now_ms`, and the ticks into
    /// the latter, when the fast path applies.
    fn places(&self, now_ms: i64) -> Option<(u64, u64, u64, NonZeroU64, NonZeroU64)> {
        let (n, w) = self.shape()?;
        if now_ms < self.updated_ms {
            return None;
        }
        let ticks = u64::try_from(now_ms).ok()?.checked_mul(n.get())?;
        let (current, into) = (ticks / w, ticks % w);
        // The last update nearly always falls in the same bucket, which
        // starts `into` ticks before now: a multiply tells, not a division.
        // Its ticks fit, being no more than now's.
        let updated_ticks = u64::try_from(self.updated_ms).ok()? * n.get();
        let newest = if updated_ticks >= ticks - into {
            current
        } else {
            updated_ticks / w
        };
        Some((newest, current, into, n, w))
    }

    /// The `len` slots of the ring from `from` on, wrapping round: at most
    /// two runs of the slice.
    fn runs(&self, from: usize, len: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let ring = self.counts.len();
        let end = from + len;
        if end <= ring {
            (from..end, 0..0)
        } else {
            (from..ring, 0..end - ring)
        }
    }

    /// The count at `slot` of the ring.
    fn count_at(&self, slot: usize) -> u64 {
        self.counts.get(slot).copied().unwrap_or(0)
    }

    /// Every count of the ring, summed (wide enough for any counts).
    fn total(&self) -> u128 {
        match *self.counts {
            // The default precision's two counts, without a loop.
            [older, newer] => u128::from(older) + u128::from(newer),
            ref counts => counts.iter().map(|&count| u128::from(count)).sum(),
        }
    }

    /// The slot of the oldest bucket of the window whose newest bucket sits
    /// in `slot`: bucket `current - n` is `current + 1` round the ring.
    fn after(&self, slot: usize) -> usize {
        if slot + 1 == self.counts.len() {
            0
        } else {
            slot + 1
        }
    }

    /// Whether `cost` more fits beside the window's recent buckets and its
    /// oldest, weighted: `part + (recent + cost) * w <= limit * w`.
    fn fits(&self, view: &View, cost: u64) -> bool {
        let Some(room) = self.limit.checked_sub(cost) else {
            return false;
        };
        match u128::from(room).checked_sub(view.recent) {
            Some(room) => view.part <= room * u128::from(view.w.get()),
            None => false,
        }
    }

    /// Where a check at `now_ms` stands, read off the state without
    /// changing it; `None` outside the fast path's range.
    #[inline(always)]
    fn view(&self, now_ms: i64) -> Option<View> {
        let (newest, current, into, n, w) = self.places(now_ms)?;
        let (recent, old) = self.seen(newest, current);
        Some(View {
            newest,
            current,
            recent,
            part: u128::from(old) * u128::from(w.get() - into),
            n,
            w,
        })
    }

    /// The window's recent buckets' counts, summed, and its oldest bucket's
    /// count, as the check at bucket `current` would see them once the
    /// state, last updated in bucket `newest`, is advanced: the slots of
    /// the buckets that slid out count nothing.
    fn seen(&self, newest: u64, current: u64) -> (u128, u64) {
        let ring = self.counts.len();
        let stale = current - newest;
        if stale >= ring as u64 {
            return (0, 0);
        }
        let slot = (current % ring as u64) as usize;
        let old = self.count_at(self.after(slot));
        let mut recent = self.total() - u128::from(old);
        if stale > 0 {
            let (a, b) = self.runs(self.after((newest % ring as u64) as usize), stale as usize);
            for run in [a, b] {
                let run = self.counts.get(run).unwrap_or_default();
                recent -= run.iter().map(|&count| u128::from(count)).sum::<u128>();
            }
        }
        (recent, old)
    }

    /// [`Algorithm::check`] in 64 bits; `None` outside its range, before
    /// anything is changed.
    fn check_fast(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Option<Decision> {
        let view = self.view(now_ms)?;
        if mode == Mode::Take && self.fits(&view, cost) {
            return Some(self.take_viewed(&view, now_ms, cost));
        }
        // Answered as a stored state's denial or peek is, then the state
        // brought up to date, as a check does.
        let decision = self.decide_viewed(&view, now_ms, cost);
        self.advance_viewed(&view, now_ms, 0);
        Some(decision)
    }

    /// Takes `cost`, which fits (see [`Self::fits`]).
    #[inline(always)]
    fn take_viewed(&mut self, view: &View, now_ms: i64, cost: u64) -> Decision {
        self.advance_viewed(view, now_ms, cost);
        Decision {
            allowed: true,
            limit: self.limit,
            remaining: remaining(
                self.limit,
                view.recent + u128::from(cost),
                view.part,
                view.w,
            ),
            retry_after_ms: 0,
            reset_after_ms: self.fresh_at_ms.saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }

    /// Brings the state up to `now_ms` (see `advance`), `taken` counted in
    /// its bucket, the fresh moment kept up to date.
    #[inline(always)]
    fn advance_viewed(&mut self, view: &View, now_ms: i64, taken: u64) {
        let ring = self.counts.len();
        let stale = view.current - view.newest;
        if stale > 0 {
            let stale = usize::try_from(stale).map_or(ring, |stale| stale.min(ring));
            let (a, b) = self.runs(self.after((view.newest % ring as u64) as usize), stale);
            for run in [a, b] {
                if let Some(run) = self.counts.get_mut(run) {
                    run.fill(0);
                }
            }
        }
        self.updated_ms = now_ms;
        let slot = (view.current % ring as u64) as usize;
        // The newest bucket of the last update still the newest, and it
        // counted something: the fresh moment, which follows from that
        // bucket alone, stays as it was (nearly every check of a key in use).
        let fresh_kept = stale == 0 && self.count_at(slot) > 0;
        if let Some(count) = self.counts.get_mut(slot) {
            *count = count.saturating_add(taken);
        }
        if !fresh_kept {
            self.fresh_at_ms = self.fresh_from(view.current, slot, view.n, view.w);
        }
    }

    /// What a check would answer without taking anything (a peek, or a
    /// denial), from the view, and from the fresh moment as kept:
    /// advancing forgets only buckets that no longer count by now, and when
    /// it forgets every count, the kept moment is no later than now, when
    /// the advanced state is fresh. Kept out of line: the path of a
    /// request taken does not carry it.
    #[inline(never)]
    fn decide_viewed(&self, view: &View, now_ms: i64, cost: u64) -> Decision {
        let limit = self.limit;
        let allowed = self.fits(view, cost);
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            let newest = i128::from(view.newest);
            self.ms_until_fits_by(now_ms, cost, |b| self.count_seen(b, newest))
                .max(1)
        };
        Decision {
            allowed,
            limit,
            remaining: remaining(limit, view.recent, view.part, view.w),
            retry_after_ms,
            reset_after_ms: self.fresh_at_ms.saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }

    /// The fresh moment (see [`State::fresh_at_ms`]) of a state whose last
    /// update fell in bucket `newest`, at `slot`: from the newest bucket
    /// that counts something, found by walking the ring back from `slot`.
    fn fresh_from(&self, newest: u64, slot: usize, n: NonZeroU64, w: NonZeroU64) -> i64 {
        let used = |count: &u64| *count > 0;
        let back = if self.count_at(slot) > 0 {
            Some(0)
        } else {
            let (before, after) = self.counts.split_at_checked(slot).unwrap_or_default();
            match before.iter().rposition(used) {
                Some(at) => Some(slot - at),
                None => after
                    .iter()
                    .rposition(used)
                    .map(|at| self.counts.len() - at),
            }
        };
        let Some(back) = back else {
            return self.updated_ms;
        };
        // ceil((newest - back + n + 1) * w / n), where back <= n.
        let ms = newest
            .checked_add(n.get() + 1 - back as u64)
            .and_then(|bucket| bucket.checked_mul(w.get()))
            .map(|ticks| ticks / n + u64::from(ticks % n != 0))
            .and_then(|ms| i64::try_from(ms).ok());
        ms.unwrap_or_else(|| self.fresh_moment_wide())
    }

    /// [`SlidingCounter::fresh_moment`] in 64 bits.
    fn fresh_moment_fast(&self) -> Option<i64> {
        let (n, w) = self.shape()?;
        let (newest, _) = Self::place(self.updated_ms, n, w)?;
        let slot = (newest % self.counts.len() as u64) as usize;
        Some(self.fresh_from(newest, slot, n, w))
    }
}

/// Where a check stands (see [`SlidingCounter::view`]).
struct View {
    /// The bucket of the last update, and of now.
    newest: u64,
    current: u64,
    /// The counts of the window's buckets after its oldest, summed, as the
    /// check sees them once the state is advanced.
    recent: u128,
    /// The oldest bucket's count times its ticks still in the window.
    part: u128,
    n: NonZeroU64,
    w: NonZeroU64,
}

/// What remains under the limit: `floor((limit * w - used) / w)`, at
/// least 0, with `used = part + recent * w`; that is `limit - recent -
/// ceil(part / w)`.
fn remaining(limit: u64, recent: u128, part: u128, w: NonZeroU64) -> u64 {
    let left = u128::from(limit)
        .checked_sub(recent)
        .map_or(0, |room| room.saturating_sub(ceil_div(part, w)));
    u64::try_from(left).unwrap_or(0)
}

/// `ceil(part / w)`, in 64 bits when `part` fits (a count times a window
/// in ms nearly always does): no 128-bit division routine.
fn ceil_div(part: u128, w: NonZeroU64) -> u128 {
    match u64::try_from(part) {
        // Nothing of the oldest bucket counts (the window's first bucket
        // since it was last used, or the oldest is empty): no division.
        Ok(0) => 0,
        Ok(part) => u128::from(part / w + u64::from(part % w != 0)),
        Err(_) => part.div_ceil(u128::from(w.get())),
    }
}

fn ticks_to_ms_ceil(ticks: i128, n: i128) -> i64 {
    // In i64 when it fits (always, for times and windows in range): one
    // machine division rather than a 128-bit division routine.
    if let (Ok(ticks), Ok(n)) = (i64::try_from(ticks), i64::try_from(n)) {
        if let Some(up) = ticks.checked_add(n - 1) {
            return up.div_euclid(n).max(0);
        }
    }
    let ms = (ticks + n - 1).div_euclid(n);
    i64::try_from(ms.max(0)).unwrap_or(MAX_TIMESTAMP_MS)
}

/// `scaled / w` for a count scaled by a window of `w` ticks (both at least
/// 0 and 1), in u64 when it fits (a limit times a window in ms nearly
/// always does): no 128-bit division routine.
fn unscale(scaled: i128, w: i128) -> i128 {
    match (u64::try_from(scaled), u64::try_from(w)) {
        (Ok(scaled), Ok(w)) if w > 0 => i128::from(scaled / w),
        _ => scaled / w,
    }
}

impl Algorithm for SlidingCounter {
    type Params = SlidingCounterParams;

    fn fresh(params: SlidingCounterParams, now_ms: i64) -> Self {
        Self {
            limit: params.limit,
            window_ms: params.window_ms,
            counts: vec![0; usize::from(params.precision) + 1].into_boxed_slice(),
            updated_ms: now_ms,
            // Nothing counted: fresh from the start.
            fresh_at_ms: now_ms,
        }
    }

    fn params(&self) -> SlidingCounterParams {
        SlidingCounterParams {
            limit: self.limit,
            window_ms: self.window_ms,
            precision: self.precision(),
        }
    }

    fn limit_of(limit: u64, window_ms: u64) -> SlidingCounterParams {
        // Three buckets: a denial waits at most a third of a window more.
        SlidingCounterParams {
            limit,
            window_ms,
            precision: 3,
        }
    }

    /// A new limit applies to the counts as they are. A new window or
    /// precision changes the buckets themselves: the estimate at the last
    /// stored update (rounded up) moves into the new bucket of that moment, so
    /// nothing counted is forgotten, and it then slides out over one new
    /// window. Measured at the last update, not at `now`, so that the answer
    /// does not depend on how many denied calls (which store nothing) came
    /// between.
    fn reconfigure(&mut self, params: SlidingCounterParams, _now_ms: i64) {
        if params.window_ms == self.window_ms && params.precision == self.precision() {
            // The fresh moment does not depend on the limit.
            self.limit = params.limit;
            return;
        }
        let at_ms = self.updated_ms;
        let used = self.used_scaled(at_ms);
        let carried = (used + self.w() - 1).div_euclid(self.w());
        let mut next = Self::fresh(params, at_ms);
        let slot = next.slot(next.bucket_of(at_ms));
        if let Some(count) = next.counts.get_mut(slot) {
            *count = u64::try_from(carried).unwrap_or(MAX_AMOUNT).min(MAX_AMOUNT);
        }
        next.settle();
        *self = next;
    }

    fn last_seen_ms(&self) -> i64 {
        self.updated_ms
    }

    /// Back out of the count of the grant's sub-window, while it still
    /// counts (it is among the `precision + 1` the estimate reads); at most
    /// what that sub-window counted.
    fn refund(&mut self, now_ms: i64, amount: u64, granted_at_ms: i64) -> Option<u64> {
        let given = self.give_back(now_ms, amount, granted_at_ms);
        self.settle();
        Some(given)
    }

    fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        match self.check_fast(now_ms, cost, mode) {
            Some(decision) => decision,
            None => self.check_wide(now_ms, cost, mode),
        }
    }

    /// Decided without a copy of the counts: the counts as the check would
    /// see them once advanced (see [`SlidingCounter::count_seen`]).
    fn allows_in_place(&self, now_ms: i64, cost: u64) -> Option<bool> {
        match self.view(now_ms) {
            Some(view) => Some(self.fits(&view, cost)),
            None => self.allows_in_place_wide(now_ms, cost),
        }
    }

    /// [`Algorithm::check_stored`] in one pass over the counts: the trait's
    /// default asks [`Algorithm::allows_in_place`], then checks, two passes
    /// (about 100 instructions more a request). The same answers and state
    /// (the property tests compare it with a check of a copy); outside the
    /// fast path's range, or under other parameters, a copy is checked, as
    /// the default does then.
    fn check_stored(
        &mut self,
        params: SlidingCounterParams,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, bool) {
        if self.params() == params {
            let now_ms = now_ms.max(self.updated_ms);
            if let Some(view) = self.view(now_ms) {
                if mode == Mode::Take && self.fits(&view, cost) {
                    return (self.take_viewed(&view, now_ms, cost), true);
                }
                return (self.decide_viewed(&view, now_ms, cost), false);
            }
        }
        self.check_copy(params, now_ms, cost, mode)
    }

    /// A denial or a peek answered without a copy of the counts (see
    /// [`SlidingCounter::decide_viewed`]); outside the 64-bit path's range,
    /// `None`: the caller checks a copy.
    // Kept out of line, as it was when there was none: a denial's path
    // should not weigh on the callers' path of a request taken.
    #[inline(never)]
    fn decide_in_place(&self, now_ms: i64, cost: u64) -> Option<Decision> {
        let view = self.view(now_ms)?;
        Some(self.decide_viewed(&view, now_ms, cost))
    }
}

impl SlidingCounter {
    /// [`Algorithm::refund`] but for the fresh moment: what it gives back.
    fn give_back(&mut self, now_ms: i64, amount: u64, granted_at_ms: i64) -> u64 {
        self.advance(now_ms);
        let current = self.bucket_of(self.updated_ms);
        let bucket = self.bucket_of(granted_at_ms);
        if bucket > current || bucket < current - self.n() {
            return 0;
        }
        let slot = self.slot(bucket);
        self.counts.get_mut(slot).map_or(0, |count| {
            let given = amount.min(*count);
            *count -= given;
            given
        })
    }

    // The 128-bit path of the check, for what the fast one leaves out.
    #[cold]
    #[inline(never)]
    fn check_wide(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
        self.advance(now_ms);
        let w = self.w();
        let limit = self.limit;
        let used = self.used_scaled(now_ms);
        let allowed = cost <= limit && used + i128::from(cost) * w <= i128::from(limit) * w;
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            -1
        } else {
            self.ms_until_fits(now_ms, cost).max(1)
        };
        let mut used_after = used;
        if allowed && mode == Mode::Take {
            let slot = self.slot(self.bucket_of(now_ms));
            if let Some(count) = self.counts.get_mut(slot) {
                *count = count.saturating_add(cost);
            }
            used_after += i128::from(cost) * w;
        }
        self.settle();
        let remaining = unscale((i128::from(limit) * w - used_after).max(0), w);
        Decision {
            allowed,
            limit,
            remaining: u64::try_from(remaining).unwrap_or(0),
            retry_after_ms,
            reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
            delay_ms: None,
        }
    }

    #[cold]
    #[inline(never)]
    fn allows_in_place_wide(&self, now_ms: i64, cost: u64) -> Option<bool> {
        let w = self.w();
        let limit = i128::from(self.limit);
        let newest = self.bucket_of(self.updated_ms);
        let used = self.used_scaled_by(now_ms, |b| self.count_seen(b, newest));
        Some(cost <= self.limit && used + i128::from(cost) * w <= limit * w)
    }

    #[cold]
    #[inline(never)]
    fn fresh_moment_wide(&self) -> i64 {
        let newest = self.bucket_of(self.updated_ms);
        let n = self.n();
        // The buckets from the newest back, `k` buckets back, by walking the
        // ring back from the newest one's slot: one division in all rather
        // than one a bucket.
        let ring = usize::from(self.precision()) + 1;
        let newest_slot = self.slot(newest);
        let back = (0..ring).find(|&k| {
            let slot = if k <= newest_slot {
                newest_slot - k
            } else {
                newest_slot + ring - k
            };
            self.counts.get(slot).is_some_and(|&count| count > 0)
        });
        match back {
            Some(k) => ticks_to_ms_ceil((newest - k as i128 + n + 1) * self.w(), n),
            None => self.updated_ms,
        }
    }
}

impl State for SlidingCounter {
    fn describe(&self, _now_ms: i64) -> Vec<(&'static str, Field)> {
        let newest = self.bucket_of(self.updated_ms);
        let counts = (newest - self.n()..=newest)
            .map(|bucket| Field::Int(i64::try_from(self.count(bucket)).unwrap_or(i64::MAX)))
            .collect();
        vec![
            ("limit", Field::Int(self.limit as i64)),
            ("window_ms", Field::Int(self.window_ms as i64)),
            ("precision", Field::Int(i64::from(self.precision()))),
            ("bucket_counts", Field::List(counts)),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    /// The newest bucket holding a request stops counting once it has slid
    /// wholly out of the window: `precision + 1` buckets after its start.
    fn fresh_at_ms(&self) -> i64 {
        self.fresh_at_ms
    }

    fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.counts)
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.limit);
        put_u64(out, self.window_ms);
        put_u16(out, self.precision());
        put_i64(out, self.updated_ms);
        for &count in self.counts.iter() {
            put_u64(out, count);
        }
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let limit = input.u64()?;
        let window_ms = input.u64()?;
        let precision = input.u16()?;
        let updated_ms = input.timestamp("timestamp out of range")?;
        let params = SlidingCounterParams {
            limit,
            window_ms,
            precision,
        };
        params.check().map_err(DecodeError)?;
        let slots = usize::from(precision) + 1;
        ensure(input.remaining() == slots * 8, "wrong number of counters")?;
        let mut counts = Vec::with_capacity(slots);
        for _ in 0..slots {
            let count = input.u64()?;
            ensure(count <= MAX_AMOUNT, "counter out of range")?;
            counts.push(count);
        }
        let mut state = Self {
            limit,
            window_ms,
            counts: counts.into_boxed_slice(),
            updated_ms,
            fresh_at_ms: updated_ms,
        };
        state.settle();
        Ok(state)
    }
}

/// The arithmetic as it was before the 64-bit path (commit cc50335), frozen:
/// the oracle the `fast_and_wide` property tests compare every answer,
/// stored state and fresh moment with.
#[cfg(test)]
mod oracle {
    use super::SlidingCounterParams as P;
    use crate::algorithms::{Decision, Mode, MAX_AMOUNT, MAX_TIMESTAMP_MS};

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) struct Old {
        pub(super) params: P,
        pub(super) counts: Box<[u64]>,
        pub(super) updated_ms: i64,
    }

    impl Old {
        pub(super) fn n(&self) -> i128 {
            i128::from(self.params.precision)
        }

        pub(super) fn w(&self) -> i128 {
            i128::from(self.params.window_ms)
        }

        pub(super) fn ticks(&self, t_ms: i64) -> i128 {
            i128::from(t_ms) * self.n()
        }

        pub(super) fn bucket_of(&self, t_ms: i64) -> i128 {
            // Times, precisions and windows are bounded (2^53 ms, 1000, 366 d), so
            // ticks fit an i64 and the division is one machine instruction
            // rather than a 128-bit division routine: this runs on every check.
            match t_ms.checked_mul(i64::from(self.params.precision)) {
                Some(ticks) => i128::from(ticks.div_euclid(self.params.window_ms.max(1) as i64)),
                None => self.ticks(t_ms).div_euclid(self.w()),
            }
        }

        pub(super) fn slot(&self, bucket: i128) -> usize {
            let ring = i64::from(self.params.precision) + 1;
            match i64::try_from(bucket) {
                Ok(bucket) => bucket.rem_euclid(ring) as usize,
                Err(_) => bucket.rem_euclid(i128::from(ring)) as usize,
            }
        }

        pub(super) fn count(&self, bucket: i128) -> i128 {
            i128::from(self.counts.get(self.slot(bucket)).copied().unwrap_or(0))
        }

        /// Forget the buckets that slid out of the window by `now_ms`.
        pub(super) fn advance(&mut self, now_ms: i64) {
            let newest = self.bucket_of(self.updated_ms);
            let current = self.bucket_of(now_ms);
            let stale = (current - newest).clamp(0, self.n() + 1);
            for k in 1..=stale {
                let slot = self.slot(newest + k);
                if let Some(count) = self.counts.get_mut(slot) {
                    *count = 0;
                }
            }
            self.updated_ms = self.updated_ms.max(now_ms);
        }

        /// Requests in the window ending at `now_ms`, with the oldest bucket
        /// weighted, times `window_ms`. The state must be advanced to `now_ms`.
        pub(super) fn used_scaled(&self, now_ms: i64) -> i128 {
            self.used_scaled_by(now_ms, |b| self.count(b))
        }

        /// [`Self::used_scaled`] with the count of each bucket from `count`.
        pub(super) fn used_scaled_by(&self, now_ms: i64, count: impl Fn(i128) -> i128) -> i128 {
            let (n, w) = (self.n(), self.w());
            let current = self.bucket_of(now_ms);
            let into_bucket = self.ticks(now_ms) - current * w;
            let recent: i128 = (current - n + 1..=current).map(&count).sum();
            count(current - n) * (w - into_bucket) + recent * w
        }

        /// The count of `bucket` as it will be once the state is advanced past
        /// the last update, without advancing it: buckets after the newest (the
        /// bucket of the last update, `newest`, given by the caller, which
        /// reads several), or older than the ring holds, count nothing.
        pub(super) fn count_seen(&self, bucket: i128, newest: i128) -> i128 {
            if bucket > newest || bucket < newest - self.n() {
                0
            } else {
                self.count(bucket)
            }
        }

        /// Milliseconds from `now_ms` until `cost` more fits under the limit.
        /// The weighted count only falls as time passes (the oldest bucket fades,
        /// then drops out), so the first moment it fits is found bucket by bucket.
        pub(super) fn ms_until_fits(&self, now_ms: i64, cost: u64) -> i64 {
            let (n, w) = (self.n(), self.w());
            let now_ticks = self.ticks(now_ms);
            let current = self.bucket_of(now_ms);
            let limit = i128::from(self.params.limit);
            let cost = i128::from(cost);
            // The buckets after the oldest, from the window ending in `current`;
            // each step forward drops the one that becomes the oldest, so the
            // search is linear in the precision, not quadratic.
            let mut recent: i128 = (current - n + 1..=current).map(|b| self.count(b)).sum();
            for k in 0..=n {
                let bucket = current + k;
                let oldest = self.count(bucket - n);
                if k > 0 {
                    recent -= oldest;
                }
                let room = limit - recent - cost;
                if room < 0 {
                    continue;
                }
                // Need oldest * (w - into) <= room * w.
                let into = if oldest == 0 {
                    0
                } else {
                    w - (room * w / oldest).min(w)
                };
                if into >= w {
                    continue;
                }
                let at = (bucket * w + into).max(now_ticks);
                return ticks_to_ms_ceil(at - now_ticks, n);
            }
            ticks_to_ms_ceil((current + n + 1) * w - now_ticks, n)
        }
    }

    fn ticks_to_ms_ceil(ticks: i128, n: i128) -> i64 {
        // In i64 when it fits (always, for times and windows in range): one
        // machine division rather than a 128-bit division routine, on every
        // check (the key's fresh moment and reset_after_ms come from here).
        if let (Ok(ticks), Ok(n)) = (i64::try_from(ticks), i64::try_from(n)) {
            if let Some(up) = ticks.checked_add(n - 1) {
                return up.div_euclid(n).max(0);
            }
        }
        let ms = (ticks + n - 1).div_euclid(n);
        i64::try_from(ms.max(0)).unwrap_or(MAX_TIMESTAMP_MS)
    }

    /// `scaled / w` for a count scaled by a window of `w` ticks (both at least
    /// 0 and 1), in u64 when it fits (a limit times a window in ms nearly
    /// always does): no 128-bit division routine on every check.
    fn unscale(scaled: i128, w: i128) -> i128 {
        match (u64::try_from(scaled), u64::try_from(w)) {
            (Ok(scaled), Ok(w)) if w > 0 => i128::from(scaled / w),
            _ => scaled / w,
        }
    }

    impl Old {
        pub(super) fn fresh(params: P, now_ms: i64) -> Self {
            Self {
                params,
                counts: vec![0; usize::from(params.precision) + 1].into_boxed_slice(),
                updated_ms: now_ms,
            }
        }

        /// A new limit applies to the counts as they are. A new window or
        /// precision changes the buckets themselves: the estimate at the last
        /// stored update (rounded up) moves into the new bucket of that moment, so
        /// nothing counted is forgotten, and it then slides out over one new
        /// window. Measured at the last update, not at `now`, so that the answer
        /// does not depend on how many denied calls (which store nothing) came
        /// between.
        pub(super) fn reconfigure(&mut self, params: P, _now_ms: i64) {
            if params.window_ms == self.params.window_ms
                && params.precision == self.params.precision
            {
                self.params.limit = params.limit;
                return;
            }
            let at_ms = self.updated_ms;
            let used = self.used_scaled(at_ms);
            let carried = (used + self.w() - 1).div_euclid(self.w());
            let mut next = Self::fresh(params, at_ms);
            let slot = next.slot(next.bucket_of(at_ms));
            if let Some(count) = next.counts.get_mut(slot) {
                *count = u64::try_from(carried).unwrap_or(MAX_AMOUNT).min(MAX_AMOUNT);
            }
            *self = next;
        }

        /// Back out of the count of the grant's sub-window, while it still
        /// counts (it is among the `precision + 1` the estimate reads); at most
        /// what that sub-window counted.
        pub(super) fn refund(
            &mut self,
            now_ms: i64,
            amount: u64,
            granted_at_ms: i64,
        ) -> Option<u64> {
            self.advance(now_ms);
            let current = self.bucket_of(self.updated_ms);
            let bucket = self.bucket_of(granted_at_ms);
            if bucket > current || bucket < current - self.n() {
                return Some(0);
            }
            let slot = self.slot(bucket);
            let given = self.counts.get_mut(slot).map_or(0, |count| {
                let given = amount.min(*count);
                *count -= given;
                given
            });
            Some(given)
        }

        pub(super) fn check(&mut self, now_ms: i64, cost: u64, mode: Mode) -> Decision {
            self.advance(now_ms);
            let w = self.w();
            let limit = self.params.limit;
            let used = self.used_scaled(now_ms);
            let allowed = cost <= limit && used + i128::from(cost) * w <= i128::from(limit) * w;
            let retry_after_ms = if allowed {
                0
            } else if cost > limit {
                -1
            } else {
                self.ms_until_fits(now_ms, cost).max(1)
            };
            let mut used_after = used;
            if allowed && mode == Mode::Take {
                let slot = self.slot(self.bucket_of(now_ms));
                if let Some(count) = self.counts.get_mut(slot) {
                    *count = count.saturating_add(cost);
                }
                used_after += i128::from(cost) * w;
            }
            let remaining = unscale((i128::from(limit) * w - used_after).max(0), w);
            Decision {
                allowed,
                limit,
                remaining: u64::try_from(remaining).unwrap_or(0),
                retry_after_ms,
                reset_after_ms: self.fresh_at_ms().saturating_sub(now_ms).max(0),
                delay_ms: None,
            }
        }

        /// Decided without a copy of the counts: the counts as the check would
        /// see them once advanced (see [`Old::count_seen`]).
        pub(super) fn allows_in_place(&self, now_ms: i64, cost: u64) -> Option<bool> {
            let w = self.w();
            let limit = i128::from(self.params.limit);
            let newest = self.bucket_of(self.updated_ms);
            let used = self.used_scaled_by(now_ms, |b| self.count_seen(b, newest));
            Some(cost <= self.params.limit && used + i128::from(cost) * w <= limit * w)
        }

        /// The newest bucket holding a request stops counting once it has slid
        /// wholly out of the window: `precision + 1` buckets after its start.
        pub(super) fn fresh_at_ms(&self) -> i64 {
            let newest = self.bucket_of(self.updated_ms);
            let n = self.n();
            // The buckets from the newest back, `k` buckets back, by walking the
            // ring back from the newest one's slot: one division in all rather
            // than one a bucket (this runs three times a check).
            let ring = usize::from(self.params.precision) + 1;
            let newest_slot = self.slot(newest);
            let back = (0..ring).find(|&k| {
                let slot = if k <= newest_slot {
                    newest_slot - k
                } else {
                    newest_slot + ring - k
                };
                self.counts.get(slot).is_some_and(|&count| count > 0)
            });
            match back {
                Some(k) => ticks_to_ms_ceil((newest - k as i128 + n + 1) * self.w(), n),
                None => self.updated_ms,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{call, encode};

    /// A time on a minute boundary, so windows of 60 s start here.
    const T0: i64 = 1_700_000_040_000;

    fn params(limit: u64, window_ms: u64, precision: u16) -> SlidingCounterParams {
        SlidingCounterParams {
            limit,
            window_ms,
            precision,
        }
    }

    #[test]
    fn t0_is_on_a_window_boundary() {
        assert_eq!(T0 % 60_000, 0);
    }

    #[test]
    fn allows_up_to_the_limit_within_one_window() {
        let mut s = None;
        let p = params(3, 60_000, 1);
        for left in [2, 1, 0] {
            let d = call(&mut s, p, T0 + 10, 1, Mode::Take);
            assert_eq!((d.allowed, d.remaining), (true, left));
        }
        assert!(!call(&mut s, p, T0 + 20, 1, Mode::Take).allowed);
    }

    #[test]
    fn the_previous_window_counts_by_its_overlap() {
        let mut s = None;
        let p = params(100, 60_000, 1);
        call(&mut s, p, T0 + 30_000, 80, Mode::Take);
        // 15 s into the next window, 75% of the previous one overlaps:
        // estimate 80 * 0.75 = 60, so 40 remain.
        let d = call(&mut s, p, T0 + 75_000, 1, Mode::Peek);
        assert_eq!(d.remaining, 40);
        let d = call(&mut s, p, T0 + 75_000, 41, Mode::Take);
        assert!(!d.allowed);
        let d = call(&mut s, p, T0 + 75_000, 40, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
    }

    #[test]
    fn a_burst_across_a_boundary_is_not_let_through_twice() {
        for precision in [1, 4, 60] {
            let mut s = None;
            let p = params(100, 60_000, precision);
            let mut allowed = 0;
            for t in [T0 + 59_999, T0 + 60_000] {
                for _ in 0..100 {
                    allowed += u32::from(call(&mut s, p, t, 1, Mode::Take).allowed);
                }
            }
            assert!(allowed <= 101, "precision {precision}: {allowed} in 1 ms");
        }
    }

    #[test]
    fn retry_after_is_the_first_moment_the_request_fits() {
        for precision in [1, 3, 10] {
            let p = params(10, 1000, precision);
            let mut s = None;
            call(&mut s, p, T0 + 200, 6, Mode::Take);
            call(&mut s, p, T0 + 700, 4, Mode::Take);
            for cost in [1, 5, 10] {
                let d = call(&mut s, p, T0 + 900, cost, Mode::Peek);
                assert!(!d.allowed);
                let at = T0 + 900 + d.retry_after_ms;
                assert!(!call(&mut s, p, at - 1, cost, Mode::Peek).allowed);
                assert!(
                    call(&mut s, p, at, cost, Mode::Peek).allowed,
                    "precision {precision} cost {cost}"
                );
            }
        }
    }

    #[test]
    fn finer_precision_forgets_old_requests_sooner() {
        let coarse = params(10, 1000, 1);
        let fine = params(10, 1000, 10);
        let (mut a, mut b) = (None, None);
        call(&mut a, coarse, T0 + 50, 10, Mode::Take);
        call(&mut b, fine, T0 + 50, 10, Mode::Take);
        let ra = call(&mut a, coarse, T0 + 1050, 1, Mode::Peek);
        let rb = call(&mut b, fine, T0 + 1150, 1, Mode::Peek);
        // Exactly: all 10 requests left the window by T0 + 1051.
        assert_eq!(rb.remaining, 10);
        assert!(ra.remaining < 10);
    }

    #[test]
    fn cost_above_the_limit_can_never_be_allowed() {
        let mut s = None;
        let d = call(&mut s, params(5, 1000, 1), T0, 6, Mode::Take);
        assert_eq!((d.allowed, d.retry_after_ms), (false, -1));
        assert!(s.is_none());
    }

    #[test]
    fn reset_is_when_the_last_request_has_slid_out() {
        let mut s = None;
        let p = params(5, 1000, 1);
        let d = call(&mut s, p, T0 + 300, 1, Mode::Take);
        // Counted in the window [T0, T0+1000), weighted until T0 + 2000.
        assert_eq!(d.reset_after_ms, 1700);
        let d = call(&mut s, p, T0 + 1999, 1, Mode::Peek);
        assert_eq!(d.remaining, 4);
        let d = call(&mut s, p, T0 + 2000, 1, Mode::Peek);
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
    }

    #[test]
    fn the_fresh_moment_follows_the_newest_bucket_used_wherever_it_sits_in_the_ring() {
        // One request, then the state brought forward by up to `precision`
        // buckets with nothing more counted: the newest bucket used sits at
        // every distance behind the newest bucket, and both at every place
        // in the ring (the ring's slots wrap around).
        for precision in [1u16, 2, 3, 5] {
            let p = params(100, 60_000, precision);
            let n = i64::from(precision);
            let bucket_ms = 60_000 / n;
            for first in 0..=n {
                for later in 0..=n {
                    let t1 = T0 + first * bucket_ms + 7;
                    let mut s = SlidingCounter::fresh(p, t1);
                    s.check(t1, 1, Mode::Take);
                    s.check(t1 + later * bucket_ms, 1, Mode::Peek);
                    // The request's bucket slides wholly out of the window
                    // `precision + 1` buckets after it starts.
                    let start = (t1 - T0).div_euclid(bucket_ms) * bucket_ms + T0;
                    assert_eq!(
                        s.fresh_at_ms(),
                        start + (n + 1) * bucket_ms,
                        "precision {precision}, bucket {first}, {later} later"
                    );
                }
            }
        }
    }

    #[test]
    fn keeping_the_fresh_moment_makes_a_counter_no_bigger() {
        // Its 8 bytes are those a precision of its own took (2 and their
        // padding): a key's MEMORY USAGE stays as documented.
        assert_eq!(std::mem::size_of::<SlidingCounter>(), 48);
    }

    #[test]
    fn a_clock_stepping_back_means_no_time_passed() {
        let mut s = None;
        let p = params(2, 1000, 1);
        call(&mut s, p, T0 + 500, 2, Mode::Take);
        let d = call(&mut s, p, T0 - 5000, 1, Mode::Take);
        assert!(!d.allowed);
        assert_eq!(s.as_ref().map(|s| s.updated_ms), Some(T0 + 500));
    }

    #[test]
    fn a_new_window_carries_the_estimate_over() {
        let mut s = None;
        call(&mut s, params(10, 1000, 1), T0 + 100, 7, Mode::Take);
        let d = call(&mut s, params(10, 5000, 2), T0 + 200, 1, Mode::Take);
        assert_eq!(d.remaining, 2);
    }

    #[test]
    fn the_retry_after_promised_after_a_window_change_holds() {
        let mut s = None;
        call(&mut s, params(10, 1000, 1), T0 + 100, 10, Mode::Take);
        let changed = params(10, 3000, 3);
        let d = call(&mut s, changed, T0 + 200, 4, Mode::Take);
        assert!(!d.allowed);
        let at = T0 + 200 + d.retry_after_ms;
        assert!(!call(&mut s, changed, at - 1, 4, Mode::Take).allowed);
        assert!(call(&mut s, changed, at, 4, Mode::Take).allowed);
    }

    #[test]
    fn a_new_limit_applies_to_the_counts_as_they_are() {
        let mut s = None;
        call(&mut s, params(10, 1000, 1), T0 + 100, 7, Mode::Take);
        let d = call(&mut s, params(8, 1000, 1), T0 + 200, 1, Mode::Take);
        assert_eq!((d.allowed, d.remaining), (true, 0));
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_values() {
        let mut s = None;
        call(&mut s, params(9, 60_000, 6), T0 + 12_345, 4, Mode::Take);
        let state = s.unwrap_or_else(|| SlidingCounter::fresh(params(1, 1, 1), 0));
        let mut buf = Vec::new();
        state.encode_body(&mut buf);
        assert_eq!(
            SlidingCounter::decode_body(&mut Reader::new(&buf)),
            Ok(state.clone())
        );
        assert!(SlidingCounter::decode_body(&mut Reader::new(&buf[..buf.len() - 8])).is_err());
        let mut longer = buf.clone();
        longer.extend_from_slice(&[0; 8]);
        assert!(SlidingCounter::decode_body(&mut Reader::new(&longer)).is_err());
        let mut zero_window = buf.clone();
        zero_window[8..16].fill(0);
        assert!(SlidingCounter::decode_body(&mut Reader::new(&zero_window)).is_err());
    }

    fn encoded(state: &Option<SlidingCounter>) -> Option<Vec<u8>> {
        state.as_ref().map(encode)
    }

    use crate::algorithms::{MAX_DURATION_MS, MAX_TIMESTAMP_MS};
    use proptest::prelude::prop_oneof;
    use proptest::strategy::{Just, Strategy};

    proptest::proptest! {
        #[test]
        fn checking_a_stored_counter_in_place_answers_and_stores_exactly_as_a_copy_would(
            limit in 1u64..30,
            window_ms in 1u64..2000,
            precision in 1u16..8,
            ops in proptest::collection::vec(
                (0i64..700, 1u64..6, proptest::bool::weighted(0.2), proptest::bool::weighted(0.05)),
                1..150,
            ),
        ) {
            let (mut copy_path, mut in_place) = (None, None);
            let mut now = T0;
            for (step, cost, peek, back) in ops {
                // Now and then the clock steps back, which the check clamps.
                now = if back { now - step } else { now + step };
                let p = params(limit, window_ms, precision);
                let mode = if peek { Mode::Peek } else { Mode::Take };
                let d = call(&mut copy_path, p, now, cost, mode);
                let e = match in_place.as_mut() {
                    Some(state) => SlidingCounter::check_stored(state, p, now, cost, mode).0,
                    None => call(&mut in_place, p, now, cost, mode),
                };
                proptest::prop_assert_eq!(d, e);
                proptest::prop_assert_eq!(encoded(&copy_path), encoded(&in_place));
            }
        }

        #[test]
        fn a_denied_request_fits_exactly_retry_after_ms_later_and_not_a_ms_sooner(
            limit in 1u64..40,
            window_ms in 1u64..5000,
            precision in prop_oneof![1u16..12, Just(1000u16)],
            ops in proptest::collection::vec((0i64..900, 1u64..8), 1..120),
        ) {
            let p = params(limit, window_ms, precision);
            let mut state = None;
            let mut now = T0;
            for (step, cost) in ops {
                now += step;
                let d = call(&mut state, p, now, cost, Mode::Take);
                if d.allowed || d.retry_after_ms < 0 {
                    continue;
                }
                let at = |t: i64| SlidingCounter::check_with(state.as_ref(), p, t, cost, Mode::Peek).0;
                proptest::prop_assert!(at(now + d.retry_after_ms).allowed, "{:?}", d);
                if d.retry_after_ms > 1 {
                    proptest::prop_assert!(!at(now + d.retry_after_ms - 1).allowed, "{:?}", d);
                }
            }
        }
    }

    /// A stored state with these parts (the ring of `precision + 1` counts,
    /// oldest slot anywhere), and the oracle's copy of it.
    fn both(
        params: SlidingCounterParams,
        counts: &[u64],
        updated_ms: i64,
    ) -> (SlidingCounter, oracle::Old) {
        let counts: Box<[u64]> = counts.into();
        let mut state = SlidingCounter {
            limit: params.limit,
            window_ms: params.window_ms,
            counts: counts.clone(),
            updated_ms,
            fresh_at_ms: 0,
        };
        state.settle();
        let old = oracle::Old {
            params,
            counts,
            updated_ms,
        };
        (state, old)
    }

    fn same(state: &SlidingCounter, old: &oracle::Old) -> bool {
        state.params() == old.params
            && state.counts == old.counts
            && state.updated_ms == old.updated_ms
    }

    /// Parameters, counts and a last update for the `fast_and_wide` tests:
    /// precisions of 1 to a few and up to 1000; windows of 1 ms, of a year
    /// and beyond what a command accepts (10 years, 2^40 ms, `i64::MAX`);
    /// limits small, near `MAX_AMOUNT` and near `u64::MAX`; counts mostly
    /// 0 (a ring with gaps), small, near `MAX_AMOUNT` or anything; times
    /// from 0 to 2^53 ms and just below it, and a few before 1970. Where
    /// the window is beyond 2^40 ms, limits and counts stay within
    /// `MAX_AMOUNT`: the oracle's 128-bit sums would overflow otherwise.
    fn any_state() -> impl Strategy<Value = (SlidingCounterParams, Vec<u64>, i64)> {
        let precision = prop_oneof![1u16..=4, 1u16..=1000, Just(1000u16)];
        let window_ms = prop_oneof![
            Just(1u64),
            1u64..100,
            1u64..=MAX_DURATION_MS,
            Just(MAX_DURATION_MS),
            Just(10 * MAX_DURATION_MS),
            Just(1u64 << 40),
            Just(i64::MAX as u64),
        ];
        let limit = prop_oneof![
            1u64..50,
            MAX_AMOUNT - 5..=MAX_AMOUNT,
            u64::MAX - 5..=u64::MAX,
        ];
        let updated_ms = prop_oneof![
            0i64..=MAX_TIMESTAMP_MS,
            MAX_TIMESTAMP_MS - 100_000..=MAX_TIMESTAMP_MS,
            T0 - 100_000..T0 + 100_000,
            Just(0i64),
            -100_000i64..0,
        ];
        (precision, window_ms, limit, updated_ms)
            .prop_flat_map(|(precision, window_ms, limit, updated_ms)| {
                let count = prop_oneof![
                    4 => Just(0u64),
                    3 => 0u64..60,
                    1 => MAX_AMOUNT - 5..=MAX_AMOUNT,
                    1 => proptest::num::u64::ANY,
                ];
                let counts = proptest::collection::vec(count, usize::from(precision) + 1);
                (Just((precision, window_ms, limit, updated_ms)), counts)
            })
            .prop_map(
                |((precision, window_ms, mut limit, updated_ms), mut counts)| {
                    if window_ms > 1 << 40 {
                        limit = limit.min(MAX_AMOUNT);
                        counts
                            .iter_mut()
                            .for_each(|count| *count = (*count).min(MAX_AMOUNT));
                    }
                    (params(limit, window_ms, precision), counts, updated_ms)
                },
            )
    }

    /// A moment after (or now and then before) `updated_ms`: the same ms,
    /// a few ms, up to a few windows, anything up to 2^53 ms later.
    fn any_later() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(0i64),
            0i64..10,
            0i64..100_000,
            0i64..3 * MAX_DURATION_MS as i64,
            0i64..=MAX_TIMESTAMP_MS,
            -100_000i64..0,
        ]
    }

    /// A cost from a pick: small, just under, at and over the limit, or
    /// anything.
    fn cost_of(limit: u64, window_ms: u64, pick: (u8, u64)) -> u64 {
        let cost = match pick.0 % 5 {
            0 => pick.1 % 8,
            1 => limit.saturating_sub(pick.1 % 8),
            2 => limit,
            3 => limit.saturating_add(1 + pick.1 % 3),
            _ => pick.1,
        };
        if window_ms > 1 << 40 {
            cost.min(MAX_AMOUNT)
        } else {
            cost
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]

        #[test]
        fn fast_and_wide_checks_answer_and_store_exactly_as_the_128_bit_arithmetic_did(
            (p, counts, updated_ms) in any_state(),
            later in any_later(),
            pick in (proptest::num::u8::ANY, proptest::num::u64::ANY),
            peek in proptest::bool::ANY,
        ) {
            let (state, old) = both(p, &counts, updated_ms);
            let now = updated_ms.saturating_add(later);
            let cost = cost_of(p.limit, p.window_ms, pick);
            let mode = if peek { Mode::Peek } else { Mode::Take };
            proptest::prop_assert_eq!(state.fresh_at_ms(), old.fresh_at_ms());
            // As `check_stored` asks (the time clamped), and unclamped.
            let clamped = now.max(updated_ms);
            proptest::prop_assert_eq!(state.allows_in_place(clamped, cost), old.allows_in_place(clamped, cost));
            proptest::prop_assert_eq!(state.allows_in_place(now, cost), old.allows_in_place(now, cost));
            // A peek or a denial answered in place: the answer of a check
            // of a copy (a denial answers as a peek does).
            let decided = state.decide_in_place(clamped, cost);
            if updated_ms >= 0 && clamped <= MAX_TIMESTAMP_MS {
                proptest::prop_assert!(decided.is_some());
            }
            if let Some(decided) = decided {
                proptest::prop_assert_eq!(decided, old.clone().check(clamped, cost, Mode::Peek));
            }
            // A stored state checked as the Redis layer does: the state
            // changes only when the request is taken.
            let mut stored = state.clone();
            let mut checked = old.clone();
            let (decision, changed) = stored.check_stored(p, now, cost, mode);
            proptest::prop_assert_eq!(decision, checked.check(clamped, cost, mode));
            proptest::prop_assert_eq!(changed, decision.allowed && mode == Mode::Take);
            if changed {
                proptest::prop_assert!(same(&stored, &checked), "{:?} {:?}", stored, checked);
                proptest::prop_assert_eq!(stored.fresh_at_ms(), checked.fresh_at_ms());
            } else {
                proptest::prop_assert_eq!(&stored, &state);
            }
            let (mut state, mut old) = (state, old);
            proptest::prop_assert_eq!(state.check(now, cost, mode), old.check(now, cost, mode));
            proptest::prop_assert!(same(&state, &old), "{:?} {:?}", state, old);
            proptest::prop_assert_eq!(state.fresh_at_ms(), old.fresh_at_ms());
        }

        #[test]
        fn fast_and_wide_counters_live_the_same_life_as_with_the_128_bit_arithmetic(
            (p, counts, updated_ms) in any_state(),
            ops in proptest::collection::vec(
                (any_later(), (proptest::num::u8::ANY, proptest::num::u64::ANY), 0u8..10),
                1..40,
            ),
        ) {
            let (mut state, mut old) = both(p, &counts, updated_ms);
            let mut now = updated_ms;
            for (later, pick, what) in ops {
                // Mostly steps a bucket's length or less, to cross buckets
                // often without leaving the window.
                let step = later % (p.window_ms / u64::from(p.precision) + 2).min(i64::MAX as u64) as i64;
                now = now.saturating_add(if what < 5 { step } else { later });
                let cost = cost_of(p.limit, p.window_ms, pick);
                let mode = if what % 3 == 0 { Mode::Peek } else { Mode::Take };
                let clamped = now.max(state.updated_ms);
                proptest::prop_assert_eq!(state.allows_in_place(clamped, cost), old.allows_in_place(clamped, cost));
                if let Some(decided) = state.decide_in_place(clamped, cost) {
                    proptest::prop_assert_eq!(decided, old.clone().check(clamped, cost, Mode::Peek));
                }
                proptest::prop_assert_eq!(state.check(clamped, cost, mode), old.check(clamped, cost, mode));
                if what == 9 {
                    let back = clamped.saturating_sub(step);
                    proptest::prop_assert_eq!(state.refund(clamped, cost, back), old.refund(clamped, cost, back));
                }
                if what == 8 && p.window_ms <= MAX_DURATION_MS {
                    let other = params(p.limit, p.window_ms / 2 + 1, p.precision % 7 + 1);
                    state.reconfigure(other, clamped);
                    old.reconfigure(other, clamped);
                    state.reconfigure(p, clamped);
                    old.reconfigure(p, clamped);
                }
                proptest::prop_assert!(same(&state, &old), "{:?} {:?}", state, old);
                proptest::prop_assert_eq!(state.fresh_at_ms(), old.fresh_at_ms());
            }
        }
    }
}
