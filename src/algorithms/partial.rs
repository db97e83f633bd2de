//! Partial grants (`COST n UPTO`) and refunds: how a client takes quota in
//! batches and gives back what it did not spend.
//!
//! Terms: a request of `COST n UPTO` is *granted* as much of `n` as the
//! limit allows now, possibly 0; a *refund* gives back units a grant took
//! and the client did not spend. Both are defined for the algorithms whose
//! state is a count that a refund can lower exactly as if the grant had been
//! smaller (the token bucket, GCRA, the fixed window, the sliding counter:
//! [`Algorithm::refund`]). The others refuse both: the sliding log would
//! have to find the grant's entry by its millisecond among the others, the
//! leaky bucket has told the requests queued behind a grant when to act
//! (`delay_ms`), and a concurrency slot is given back by `RL.RELEASE`.
//!
//! A grant is an ordinary check of the amount available: [`upto_cost`]
//! finds it, and the check itself (and so every rule a check keeps: the
//! clock, penalties, replies, replication) is the plain one. A grant of 0 is
//! the plain check's denial of 1 unit, so its `retry_after_ms` is the wait
//! until at least 1 can be granted.
//!
//! What a refund may give back, per algorithm (the state never holds more
//! than a fresh key would, and never goes below empty):
//! - token bucket: the tokens go back in, up to the capacity;
//! - GCRA: the theoretical arrival time moves back by the units' emission
//!   intervals, never before now (a TAT of now is a full bucket);
//! - fixed window: the units leave the count of the window the grant was
//!   made in, if that window is still the current one (otherwise nothing:
//!   the window they were counted in is over, and lowering a later window's
//!   count would let that window pass more than its limit);
//! - sliding counter: the units leave the count of the sub-window the grant
//!   was made in, while that sub-window still counts.
//!
//! Buckets have no windows: a refund's tokens are as good as any. So in a
//! token bucket (or GCRA) a grant held for `L` before a part of it comes back
//! may, in the worst case, let through on top what the bucket refilled during
//! `L` (had the part never been taken, the bucket would have been full and
//! lost that refill). Takes minus refunds in any span of `T` never exceed
//! `capacity + rate * T` (a property test holds this).

use super::{Algorithm, Mode};
use crate::words::syntax::Syntax;

/// What a partial grant (`COST n UPTO`) took, as its reply's 6th and 7th
/// elements say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The units granted (0 when denied); with `PEEK`, those that would be.
    pub granted: u64,
    /// The time the grant was made at (Unix ms), on the clock the check
    /// used: what a refund names (`AT`) to go back into the grant's window.
    pub at_ms: i64,
}

/// The cost a request of up to `cost` (`COST cost UPTO`) asks of the
/// plain check at `now_ms`: what is available now, at most `cost`, or 1 when
/// nothing is (so that the check's denial says how long until 1 is). The
/// check given this cost allows it exactly when something is available.
pub fn upto_cost<A: Algorithm>(
    stored: Option<&A>,
    params: A::Params,
    now_ms: i64,
    cost: u64,
) -> u64 {
    let (one, _) = A::check_with(stored, params, now_ms, 1, Mode::Peek);
    if one.allowed {
        one.remaining.clamp(1, cost.max(1))
    } else {
        1
    }
}

/// The time a grant at `now_ms` is made at, as a refund names it (`AT`):
/// the clock as the check uses it, never before what the state has seen.
pub fn granted_at_ms<A: Algorithm>(stored: Option<&A>, now_ms: i64) -> i64 {
    stored.map_or(now_ms, |s| now_ms.max(s.last_seen_ms()))
}

/// A refund of `amount` at `now_ms` of units granted at `granted_at_ms`,
/// on the stored state, under `params`: how much was given back (0 when
/// nothing could be, or when `params` are not the key's: quota goes back only
/// to the limit it was taken from), and whether the state changed. `None`
/// when the algorithm takes no refunds.
pub fn refund_stored<A: Algorithm>(
    stored: &mut A,
    params: A::Params,
    now_ms: i64,
    amount: u64,
    granted_at_ms: i64,
) -> Option<u64> {
    if stored.params() != params {
        return <A::Params as Syntax>::PARTIAL.then_some(0);
    }
    let now_ms = now_ms.max(stored.last_seen_ms());
    if granted_at_ms > now_ms {
        // No grant is made after the time the state has seen.
        return <A::Params as Syntax>::PARTIAL.then_some(0);
    }
    stored.refund(now_ms, amount, granted_at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::fixed_window::{FixedWindow, FixedWindowParams};
    use crate::algorithms::gcra::{Gcra, GcraParams};
    use crate::algorithms::leaky_bucket::LeakyBucket;
    use crate::algorithms::registry::{each_algorithm, Each, Listed};
    use crate::algorithms::sliding_counter::{SlidingCounter, SlidingCounterParams};
    use crate::algorithms::sliding_log::SlidingLog;
    use crate::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
    use crate::algorithms::{Decision, State};
    use proptest::prelude::*;

    /// A minute boundary, so windows of a minute start here.
    const T0: i64 = 1_700_000_040_000;

    /// One `COST cost UPTO` the way the Redis layer makes it: the decision,
    /// what was granted, and the state stored after.
    fn upto<A: Algorithm>(
        state: &mut Option<A>,
        params: A::Params,
        now_ms: i64,
        cost: u64,
        mode: Mode,
    ) -> (Decision, u64) {
        let asked = upto_cost(state.as_ref(), params, now_ms, cost);
        let (decision, next) = A::check_with(state.as_ref(), params, now_ms, asked, mode);
        if let Some(next) = next {
            *state = Some(next);
        }
        (decision, if decision.allowed { asked } else { 0 })
    }

    fn refund<A: Algorithm>(
        state: &mut Option<A>,
        params: A::Params,
        now_ms: i64,
        amount: u64,
        at: i64,
    ) -> u64 {
        match state {
            Some(s) => refund_stored(s, params, now_ms, amount, at).unwrap_or(0),
            None => 0,
        }
    }

    fn tb(capacity: u64, rate_per_s: f64) -> TokenBucketParams {
        TokenBucketParams {
            capacity,
            rate_per_s,
        }
    }

    fn fw(limit: u64, window_ms: u64) -> FixedWindowParams {
        FixedWindowParams { limit, window_ms }
    }

    fn gcra(burst: u64, count: u64, period_ms: u64) -> GcraParams {
        GcraParams {
            burst,
            count,
            period_ms,
        }
    }

    fn sc(limit: u64, window_ms: u64, precision: u16) -> SlidingCounterParams {
        SlidingCounterParams {
            limit,
            window_ms,
            precision,
        }
    }

    #[test]
    fn upto_grants_all_asked_when_it_is_there() {
        let mut s = None;
        let (d, granted) = upto::<TokenBucket>(&mut s, tb(10, 1.0), T0, 4, Mode::Take);
        assert_eq!((d.allowed, d.remaining, granted), (true, 6, 4));
    }

    #[test]
    fn upto_grants_exactly_what_is_available_and_no_more() {
        let mut s = None;
        let p = tb(10, 1.0);
        upto::<TokenBucket>(&mut s, p, T0, 7, Mode::Take);
        let (d, granted) = upto::<TokenBucket>(&mut s, p, T0 + 500, 5, Mode::Take);
        assert_eq!(
            (d.allowed, d.remaining, granted),
            (true, 0, 3),
            "3.5 tokens: 3 granted"
        );
        let (d, granted) = upto::<TokenBucket>(&mut s, p, T0 + 500, 5, Mode::Take);
        assert_eq!((d.allowed, granted), (false, 0));
        assert_eq!(
            d.retry_after_ms, 500,
            "the half token left needs 500 ms to make one"
        );
    }

    #[test]
    fn a_grant_of_nothing_is_a_denial_with_the_wait_for_one_unit() {
        let mut s = None;
        let p = fw(5, 60_000);
        upto::<FixedWindow>(&mut s, p, T0, 5, Mode::Take);
        let before = s.clone();
        let (d, granted) = upto::<FixedWindow>(&mut s, p, T0 + 10_000, 3, Mode::Take);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after_ms, granted),
            (false, 0, 50_000, 0)
        );
        assert_eq!(s, before, "a grant of nothing stores nothing");
    }

    #[test]
    fn upto_on_a_cost_above_the_limit_grants_the_limit() {
        let mut s = None;
        let (d, granted) = upto::<Gcra>(&mut s, gcra(4, 10, 1000), T0, 100, Mode::Take);
        assert_eq!((d.allowed, d.limit, d.remaining, granted), (true, 5, 0, 5));
    }

    #[test]
    fn upto_with_peek_says_what_could_be_granted_and_takes_nothing() {
        let mut s = None;
        let p = sc(10, 60_000, 6);
        upto::<SlidingCounter>(&mut s, p, T0, 8, Mode::Take);
        let before = s.clone();
        let (d, granted) = upto::<SlidingCounter>(&mut s, p, T0 + 1, 5, Mode::Peek);
        assert_eq!((d.allowed, d.remaining, granted), (true, 2, 2));
        assert_eq!(s, before);
    }

    #[test]
    fn a_token_bucket_refund_goes_back_in_up_to_capacity() {
        let mut s = None;
        let p = tb(10, 1.0);
        upto::<TokenBucket>(&mut s, p, T0, 6, Mode::Take);
        assert_eq!(refund(&mut s, p, T0, 2, T0), 2);
        let d = TokenBucket::check_with(s.as_ref(), p, T0, 1, Mode::Peek).0;
        assert_eq!(d.remaining, 6);
        // 2 refilled meanwhile: only 2 of the 4 fit.
        assert_eq!(refund(&mut s, p, T0 + 2000, 4, T0), 2);
        let d = TokenBucket::check_with(s.as_ref(), p, T0 + 2000, 1, Mode::Peek).0;
        assert_eq!((d.remaining, d.reset_after_ms), (10, 0));
        assert_eq!(
            refund(&mut s, p, T0 + 2000, 1, T0),
            0,
            "a full bucket takes nothing back"
        );
    }

    #[test]
    fn a_refund_then_a_check_sees_the_units_back() {
        let mut s = None;
        let p = tb(3, 0.001);
        upto::<TokenBucket>(&mut s, p, T0, 3, Mode::Take);
        assert!(
            !TokenBucket::check_with(s.as_ref(), p, T0 + 1, 1, Mode::Take)
                .0
                .allowed
        );
        refund(&mut s, p, T0 + 1, 2, T0);
        let (d, granted) = upto::<TokenBucket>(&mut s, p, T0 + 1, 3, Mode::Take);
        assert_eq!((d.allowed, granted), (true, 2));
    }

    #[test]
    fn a_gcra_refund_moves_the_tat_back_never_before_now() {
        let mut s = None;
        let p = gcra(9, 10, 1000);
        upto::<Gcra>(&mut s, p, T0, 10, Mode::Take);
        assert_eq!(refund(&mut s, p, T0, 3, T0), 3);
        let d = Gcra::check_with(s.as_ref(), p, T0, 1, Mode::Peek).0;
        assert_eq!((d.remaining, d.reset_after_ms), (3, 700));
        // 500 ms later 5 came back by themselves; 5 of the 7 owed fit.
        assert_eq!(refund(&mut s, p, T0 + 500, 7, T0), 2);
        let d = Gcra::check_with(s.as_ref(), p, T0 + 500, 1, Mode::Peek).0;
        assert_eq!((d.remaining, d.reset_after_ms), (10, 0));
        assert_eq!(s.as_ref().map(|g| g.fresh_at_ms()), Some(T0 + 500));
    }

    #[test]
    fn a_fixed_window_refund_goes_back_into_its_own_window_only() {
        let mut s = None;
        let p = fw(10, 60_000);
        let at = T0 + 59_000;
        upto::<FixedWindow>(&mut s, p, at, 8, Mode::Take);
        assert_eq!(refund(&mut s, p, T0 + 59_500, 3, at), 3);
        let d = FixedWindow::check_with(s.as_ref(), p, T0 + 59_500, 1, Mode::Peek).0;
        assert_eq!(d.remaining, 5);
        assert_eq!(
            refund(&mut s, p, T0 + 59_500, 50, at),
            5,
            "never below zero"
        );
        // The next window: the grant's window is over, nothing goes back.
        upto::<FixedWindow>(&mut s, p, T0 + 60_000, 10, Mode::Take);
        assert_eq!(refund(&mut s, p, T0 + 60_001, 4, at), 0);
        let d = FixedWindow::check_with(s.as_ref(), p, T0 + 60_001, 1, Mode::Peek).0;
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn a_sliding_counter_refund_leaves_its_sub_window_while_that_counts() {
        let mut s = None;
        let p = sc(10, 60_000, 6);
        upto::<SlidingCounter>(&mut s, p, T0 + 1_000, 6, Mode::Take);
        upto::<SlidingCounter>(&mut s, p, T0 + 25_000, 4, Mode::Take);
        // Each sub-window gives back at most what it counted.
        assert_eq!(refund(&mut s, p, T0 + 30_000, 9, T0 + 1_000), 6);
        let d = SlidingCounter::check_with(s.as_ref(), p, T0 + 30_000, 1, Mode::Peek).0;
        assert_eq!(d.remaining, 6);
        // Once its sub-window has slid out, a grant's refund gives nothing.
        assert_eq!(refund(&mut s, p, T0 + 95_000, 4, T0 + 25_000), 0);
    }

    #[test]
    fn a_refund_under_other_parameters_or_from_the_future_gives_nothing() {
        let mut s = None;
        let p = tb(10, 1.0);
        upto::<TokenBucket>(&mut s, p, T0, 6, Mode::Take);
        let before = s.clone();
        assert_eq!(refund(&mut s, tb(20, 1.0), T0, 2, T0), 0);
        assert_eq!(refund(&mut s, p, T0, 2, T0 + 1), 0);
        assert_eq!(s, before);
    }

    #[test]
    fn a_refund_on_a_clock_that_stepped_back_uses_the_time_the_state_has_seen() {
        let mut s = None;
        let p = fw(10, 60_000);
        upto::<FixedWindow>(&mut s, p, T0 + 60_000, 5, Mode::Take);
        let at = granted_at_ms(s.as_ref(), T0 + 59_000);
        assert_eq!(at, T0 + 60_000);
        assert_eq!(refund(&mut s, p, T0 + 59_000, 5, at), 5);
    }

    /// Which algorithms take partial grants and refunds, and that the two
    /// answers agree: the parser's (`Syntax::PARTIAL`) and the state's.
    struct Offers;

    impl Each for Offers {
        type Out = (&'static str, bool);
        fn algorithm<A: Listed>(&mut self) -> (&'static str, bool) {
            let partial = <A::Params as Syntax>::PARTIAL;
            let mut state = A::fresh(A::limit_of(10, 1000), T0);
            let given = state.refund(T0, 1, T0);
            assert_eq!(given.is_some(), partial, "{}", A::NAME);
            (A::NAME, partial)
        }
    }

    #[test]
    fn partial_grants_and_refunds_are_offered_by_the_counting_algorithms_only() {
        assert_eq!(
            each_algorithm(&mut Offers),
            [
                ("tokenbucket", true),
                ("slidingcounter", true),
                ("fixedwindow", true),
                ("slidinglog", false),
                ("leakybucket", false),
                ("gcra", true),
            ]
        );
        let mut log = SlidingLog::fresh(SlidingLog::limit_of(3, 1000), T0);
        assert_eq!(
            refund_stored(&mut log, SlidingLog::limit_of(3, 1000), T0, 1, T0),
            None
        );
        let mut leaky = LeakyBucket::fresh(LeakyBucket::limit_of(3, 1000), T0);
        assert_eq!(
            refund_stored(&mut leaky, LeakyBucket::limit_of(3, 1000), T0, 1, T0),
            None
        );
    }

    /// One step of a history: a partial grant of up to `cost`, or a refund
    /// of up to `amount` of the grant made `back` grants ago.
    #[derive(Debug, Clone)]
    enum Step {
        Grant {
            after_ms: i64,
            cost: u64,
        },
        Refund {
            after_ms: i64,
            back: usize,
            amount: u64,
        },
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(
            prop_oneof![
                (0i64..700, 1u64..8).prop_map(|(after_ms, cost)| Step::Grant { after_ms, cost }),
                (0i64..700, 0usize..4, 1u64..8).prop_map(|(after_ms, back, amount)| Step::Refund {
                    after_ms,
                    back,
                    amount
                }),
            ],
            1..120,
        )
    }

    /// A time (Unix ms) and an amount.
    type Event = (i64, u64);

    /// Runs `steps` on one key: each grant's time and amount, each refund's
    /// time and what it gave back (checked: never more than its grant kept).
    fn run<A: Algorithm>(params: A::Params, steps: &[Step]) -> (Vec<Event>, Vec<Event>) {
        let mut state: Option<A> = None;
        let mut now = T0;
        let mut grants: Vec<(i64, u64)> = Vec::new();
        let mut kept: Vec<u64> = Vec::new();
        let mut refunds = Vec::new();
        for step in steps {
            match *step {
                Step::Grant { after_ms, cost } => {
                    now += after_ms;
                    let available = A::check_with(state.as_ref(), params, now, 1, Mode::Peek).0;
                    let (d, granted) = upto(&mut state, params, now, cost, Mode::Take);
                    let could = if available.allowed {
                        available.remaining
                    } else {
                        0
                    };
                    assert_eq!(granted, could.min(cost), "grants exactly what is there");
                    assert_eq!(d.allowed, granted > 0);
                    if granted > 0 {
                        let at = granted_at_ms(state.as_ref(), now);
                        grants.push((at, granted));
                        kept.push(granted);
                    }
                }
                Step::Refund {
                    after_ms,
                    back,
                    amount,
                } => {
                    now += after_ms;
                    let Some(i) = grants.len().checked_sub(back + 1) else {
                        continue;
                    };
                    let (at, _) = grants[i];
                    let amount = amount.min(kept[i]);
                    let given = refund(&mut state, params, now, amount, at);
                    assert!(given <= amount, "gives back at most what was asked");
                    kept[i] -= given;
                    if given > 0 {
                        refunds.push((now, given));
                    }
                }
            }
        }
        (grants, refunds)
    }

    fn in_span(events: &[(i64, u64)], from: i64, to: i64) -> u64 {
        events
            .iter()
            .filter(|(t, _)| (from..to).contains(t))
            .map(|(_, n)| n)
            .sum()
    }

    /// Replays `grants`, each less what refunds gave back of it, at its
    /// time on a fresh key: each must be allowed.
    fn kept_history_is_allowed<A: Algorithm>(
        params: A::Params,
        grants: &[(i64, u64)],
        history: &[Step],
    ) -> Result<(), TestCaseError> {
        let kept = kept_of::<A>(params, history);
        prop_assert_eq!(kept.len(), grants.len());
        let mut state: Option<A> = None;
        for (&(at, _), &k) in grants.iter().zip(&kept) {
            if k == 0 {
                continue;
            }
            let (d, next) = A::check_with(state.as_ref(), params, at, k, Mode::Take);
            prop_assert!(d.allowed, "kept {} at {} denied: {:?}", k, at, d);
            state = next.or(state);
        }
        Ok(())
    }

    /// What each grant of `history` kept after its refunds.
    fn kept_of<A: Algorithm>(params: A::Params, history: &[Step]) -> Vec<u64> {
        let mut state: Option<A> = None;
        let mut now = T0;
        let mut grants: Vec<i64> = Vec::new();
        let mut kept: Vec<u64> = Vec::new();
        for step in history {
            match *step {
                Step::Grant { after_ms, cost } => {
                    now += after_ms;
                    let (_, granted) = upto(&mut state, params, now, cost, Mode::Take);
                    if granted > 0 {
                        grants.push(granted_at_ms(state.as_ref(), now));
                        kept.push(granted);
                    }
                }
                Step::Refund {
                    after_ms,
                    back,
                    amount,
                } => {
                    now += after_ms;
                    let Some(i) = grants.len().checked_sub(back + 1) else {
                        continue;
                    };
                    let amount = amount.min(kept[i]);
                    kept[i] -= refund(&mut state, params, now, amount, grants[i]);
                }
            }
        }
        kept
    }

    proptest! {
        /// Windows: what grants took in a window, less what came back in
        /// it, never exceeds the limit.
        #[test]
        fn a_fixed_windows_grants_less_refunds_never_exceed_its_limit(history in steps()) {
            let (grants, refunds) = run::<FixedWindow>(fw(10, 1000), &history);
            let first = T0.div_euclid(1000);
            for w in first..first + 90 {
                let (from, to) = (w * 1000, (w + 1) * 1000);
                let net = in_span(&grants, from, to) as i64 - in_span(&refunds, from, to) as i64;
                prop_assert!(net <= 10, "window {w}: {net}");
            }
        }

        /// Windows count linearly, so a refund leaves the state exactly as if
        /// its grant had been smaller: every grant, as what it kept after
        /// its refunds, replayed at its time on a fresh key is allowed.
        #[test]
        fn a_fixed_windows_kept_grants_are_a_history_it_allows(history in steps()) {
            let (grants, _) = run::<FixedWindow>(fw(10, 1000), &history);
            kept_history_is_allowed::<FixedWindow>(fw(10, 1000), &grants, &history)?;
        }

        #[test]
        fn a_sliding_counters_kept_grants_are_a_history_it_allows(history in steps()) {
            let (grants, _) = run::<SlidingCounter>(sc(10, 1000, 4), &history);
            kept_history_is_allowed::<SlidingCounter>(sc(10, 1000, 4), &grants, &history)?;
        }

        /// Buckets: takes less refunds in any span of T never exceed
        /// capacity + rate * T.
        #[test]
        fn a_token_buckets_grants_less_refunds_never_exceed_capacity_plus_refill(history in steps()) {
            let (grants, refunds) = run::<TokenBucket>(tb(10, 5.0), &history);
            let times: Vec<i64> = grants.iter().chain(&refunds).map(|(t, _)| *t).collect();
            for &from in &times {
                for &to in &times {
                    if to < from { continue; }
                    let net = in_span(&grants, from, to + 1) as i64 - in_span(&refunds, from, to + 1) as i64;
                    let allowance = 10 + (to - from) * 5 / 1000;
                    prop_assert!(net <= allowance, "{from}..={to}: {net} > {allowance}");
                }
            }
        }

        #[test]
        fn gcras_grants_less_refunds_never_exceed_its_limit_plus_the_rate(history in steps()) {
            // 10 at once, 1 each 200 ms.
            let (grants, refunds) = run::<Gcra>(gcra(9, 5, 1000), &history);
            let times: Vec<i64> = grants.iter().chain(&refunds).map(|(t, _)| *t).collect();
            for &from in &times {
                for &to in &times {
                    if to < from { continue; }
                    let net = in_span(&grants, from, to + 1) as i64 - in_span(&refunds, from, to + 1) as i64;
                    let allowance = 10 + (to - from) / 200;
                    prop_assert!(net <= allowance, "{from}..={to}: {net} > {allowance}");
                }
            }
        }
    }
}
