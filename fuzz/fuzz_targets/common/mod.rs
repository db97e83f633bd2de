//! What the fuzz targets share: the six algorithms behind one trait that
//! knows how to make parameters the parser could accept, the checks every
//! decision and every stored state must pass, and the split of a fuzz input
//! into an encoded state and the bytes that drive the checks.
//!
//! Terms: a *reachable* input is one a client, an RDB file or a replication
//! stream can give: parameters within what `redis_ratelimit::parse` accepts,
//! times within `0..=MAX_TIMESTAMP_MS` (the server's Unix clock, which may
//! step backwards), costs from 1 to `MAX_AMOUNT` (0 for `CL.THROTTLE`'s
//! peek). The targets only make reachable inputs, so every failed assertion
//! is a bug a client could trigger.
#![allow(dead_code)]

use libfuzzer_sys::arbitrary::Unstructured;
use redis_ratelimit::algorithms::fixed_window::{FixedWindow, FixedWindowParams};
use redis_ratelimit::algorithms::gcra::{Gcra, GcraParams};
use redis_ratelimit::algorithms::leaky_bucket::{LeakyBucket, LeakyBucketParams};
use redis_ratelimit::algorithms::sliding_counter::{
    SlidingCounter, SlidingCounterParams, MAX_PRECISION,
};
use redis_ratelimit::algorithms::sliding_log::{SlidingLog, SlidingLogParams};
use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
use redis_ratelimit::algorithms::{
    Algorithm, Decision, Mode, State, MAX_AMOUNT, MAX_DURATION_MS, MAX_TIMESTAMP_MS,
};

/// An algorithm as the fuzz targets drive it.
pub trait Fuzzed: Algorithm + std::fmt::Debug {
    /// Parameters the command parser could have produced.
    fn arbitrary_params(u: &mut Unstructured<'_>) -> Self::Params;
    /// The `limit` a decision under `params` must report.
    fn limit(params: &Self::Params) -> u64;
    /// The time over which `params` play out (a window, a period, the time
    /// to refill), in ms: time steps around it reach the edges.
    fn scale_ms(params: &Self::Params) -> u64;
    /// Whether a cost of 0 is reachable (only `CL.THROTTLE`'s peek).
    const ZERO_COST_PEEKS: bool = false;
}

/// Milliseconds to refill `capacity` at `rate_per_s`, saturated.
fn refill_ms(capacity: u64, rate_per_s: f64) -> u64 {
    let ms = capacity as f64 / rate_per_s * 1000.0;
    if ms.is_finite() && ms < MAX_DURATION_MS as f64 * 4.0 {
        ms.ceil() as u64
    } else {
        MAX_DURATION_MS * 4
    }
}

/// Calls `$f::<A>($args)` for the rate-limiting algorithm whose tag is
/// `$tag`, the way the Redis layer's `dispatch_on_tag!` does (which also
/// knows the concurrency limiter's tag, fuzzed on its own); `$otherwise` for
/// any other tag.
#[macro_export]
macro_rules! dispatch {
    ($tag:expr, $f:ident($($args:expr),*), $otherwise:expr) => {{
        use redis_ratelimit::algorithms::State as _;
        use redis_ratelimit::algorithms::{
            fixed_window::FixedWindow, gcra::Gcra, leaky_bucket::LeakyBucket,
            sliding_counter::SlidingCounter, sliding_log::SlidingLog,
            token_bucket::TokenBucket,
        };
        match $tag {
            TokenBucket::TAG => $f::<TokenBucket>($($args),*),
            SlidingCounter::TAG => $f::<SlidingCounter>($($args),*),
            FixedWindow::TAG => $f::<FixedWindow>($($args),*),
            SlidingLog::TAG => $f::<SlidingLog>($($args),*),
            LeakyBucket::TAG => $f::<LeakyBucket>($($args),*),
            Gcra::TAG => $f::<Gcra>($($args),*),
            _ => $otherwise,
        }
    }};
}

/// The tags of the six algorithms, to pick one when the input names none.
pub const TAGS: [u8; 6] = [
    TokenBucket::TAG,
    SlidingCounter::TAG,
    FixedWindow::TAG,
    SlidingLog::TAG,
    LeakyBucket::TAG,
    Gcra::TAG,
];

/// Splits an input into `[len: u16 LE][state: len bytes][rest]`; a length
/// beyond the input takes what there is.
pub fn split_state(data: &[u8]) -> (&[u8], &[u8]) {
    let (len, body) = match data {
        [lo, hi, body @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])), body),
        _ => (0, &[][..]),
    };
    body.split_at(len.min(body.len()))
}

pub fn encode<A: State>(state: &A) -> Vec<u8> {
    let mut out = Vec::new();
    state.encode(&mut out);
    out
}

/// A whole number from 1 to `MAX_AMOUNT`, biased to small values and edges.
pub fn amount(u: &mut Unstructured<'_>) -> u64 {
    match u.choose_index(5).unwrap_or(0) {
        0 => u.int_in_range(1..=10).unwrap_or(1),
        1 => u.int_in_range(1..=1000).unwrap_or(1),
        2 => MAX_AMOUNT,
        3 => u
            .int_in_range(MAX_AMOUNT - 1000..=MAX_AMOUNT)
            .unwrap_or(MAX_AMOUNT),
        _ => u.int_in_range(1..=MAX_AMOUNT).unwrap_or(1),
    }
}

/// A window or period, `1..=MAX_DURATION_MS`.
pub fn duration_ms(u: &mut Unstructured<'_>) -> u64 {
    match u.choose_index(4).unwrap_or(0) {
        0 => u.int_in_range(1..=2000).unwrap_or(1),
        1 => MAX_DURATION_MS,
        2 => u.int_in_range(1..=86_400_000).unwrap_or(1),
        _ => u.int_in_range(1..=MAX_DURATION_MS).unwrap_or(1),
    }
}

/// A rate per second: any finite number above 0 (every one of them is some
/// decimal the parser accepts), biased to everyday values and extremes.
pub fn rate(u: &mut Unstructured<'_>) -> f64 {
    match u.choose_index(4).unwrap_or(0) {
        0 => {
            let units = u.int_in_range(1u32..=100_000).unwrap_or(1);
            let scale = u.int_in_range(0i32..=4).unwrap_or(0);
            f64::from(units) / 10f64.powi(scale)
        }
        1 => [
            5e-324,
            f64::MIN_POSITIVE,
            1e-300,
            1e-9,
            1e12,
            1e300,
            f64::MAX,
        ][u.choose_index(7).unwrap_or(0)],
        _ => {
            let r = f64::from_bits(u.arbitrary::<u64>().unwrap_or(0)).abs();
            if r.is_finite() && r > 0.0 {
                r
            } else {
                1.0
            }
        }
    }
}

/// A time step: mostly forwards, often around `scale_ms`, sometimes far,
/// sometimes backwards (a clock that stepped back).
pub fn step_ms(u: &mut Unstructured<'_>, scale_ms: u64) -> i64 {
    let scale = i64::try_from(scale_ms).unwrap_or(MAX_TIMESTAMP_MS);
    match u.choose_index(16).unwrap_or(0) {
        0..=3 => 0,
        4..=6 => u.int_in_range(0..=3).unwrap_or(0),
        7..=9 => u.int_in_range(0..=scale.saturating_mul(2)).unwrap_or(0),
        10 | 11 => scale.saturating_add(u.int_in_range(-2..=2).unwrap_or(0)),
        12 => u.int_in_range(-1000..=0).unwrap_or(0),
        13 | 14 => u.int_in_range(0..=MAX_DURATION_MS as i64 * 2).unwrap_or(0),
        _ => u.int_in_range(0..=MAX_TIMESTAMP_MS).unwrap_or(0),
    }
}

/// A time a server clock can show.
pub fn time_ms(u: &mut Unstructured<'_>) -> i64 {
    match u.choose_index(3).unwrap_or(0) {
        0 => 1_700_000_000_000 + u.int_in_range(0..=100_000_000_000).unwrap_or(0),
        1 => MAX_TIMESTAMP_MS - u.int_in_range(0..=MAX_DURATION_MS as i64).unwrap_or(0),
        _ => u.int_in_range(0..=MAX_TIMESTAMP_MS).unwrap_or(0),
    }
}

/// `now + step`, kept to the times a server clock can show.
pub fn advance(now: i64, step: i64) -> i64 {
    now.saturating_add(step).clamp(0, MAX_TIMESTAMP_MS)
}

/// A cost a command could carry under `limit`, with the edges.
pub fn cost<A: Fuzzed>(u: &mut Unstructured<'_>, limit: u64, mode: Mode) -> u64 {
    if A::ZERO_COST_PEEKS && mode == Mode::Peek && u.ratio(1, 8).unwrap_or(false) {
        return 0;
    }
    match u.choose_index(6).unwrap_or(0) {
        0 => 1,
        1 => u.int_in_range(1..=16).unwrap_or(1),
        2 => limit.clamp(1, MAX_AMOUNT),
        3 => limit.saturating_add(1).min(MAX_AMOUNT),
        4 => amount(u),
        _ => u.int_in_range(1..=limit.clamp(1, MAX_AMOUNT)).unwrap_or(1),
    }
}

/// What every decision promises, whatever the algorithm.
pub fn check_decision<A: Fuzzed>(d: &Decision, params: &A::Params, cost: u64, what: &str) {
    let limit = A::limit(params);
    assert_eq!(d.limit, limit, "{what}: limit");
    assert!(
        d.remaining <= d.limit,
        "{what}: remaining above the limit: {d:?}"
    );
    assert!(d.reset_after_ms >= 0, "{what}: negative reset_after: {d:?}");
    if d.allowed {
        assert_eq!(
            d.retry_after_ms, 0,
            "{what}: allowed with a retry_after: {d:?}"
        );
        assert!(cost <= limit, "{what}: cost above the limit allowed: {d:?}");
    } else if cost > limit {
        assert_eq!(d.retry_after_ms, -1, "{what}: a never-allowed cost: {d:?}");
    } else {
        assert!(
            d.retry_after_ms >= 1,
            "{what}: denied without a wait: {d:?}"
        );
    }
    let is_leaky = A::TAG == LeakyBucket::TAG;
    assert_eq!(
        d.delay_ms.is_some(),
        is_leaky && d.allowed,
        "{what}: delay_ms only on an allowed leaky bucket: {d:?}"
    );
    if let Some(delay) = d.delay_ms {
        assert!(delay >= 0, "{what}: negative delay: {d:?}");
    }
}

/// What every state the Redis layer stores must satisfy: it encodes to bytes
/// that decode to the very same state (a replica fed `RL.SETSTATE` and a
/// server loading the RDB file hold what the primary holds), and it is fresh
/// again no earlier than it was last used.
pub fn check_storable<A: Fuzzed>(state: &A, what: &str) -> Vec<u8> {
    let bytes = encode(state);
    let replica = match A::decode(&bytes) {
        Ok(replica) => replica,
        Err(e) => panic!("{what}: a stored state does not decode ({e}): {state:?} {bytes:?}"),
    };
    assert_eq!(encode(&replica), bytes, "{what}: the replica differs");
    assert!(
        state.fresh_at_ms() >= state.last_seen_ms(),
        "{what}: fresh before last seen: {state:?}"
    );
    bytes
}

impl Fuzzed for TokenBucket {
    fn arbitrary_params(u: &mut Unstructured<'_>) -> TokenBucketParams {
        TokenBucketParams {
            capacity: amount(u),
            rate_per_s: rate(u),
        }
    }
    fn scale_ms(p: &TokenBucketParams) -> u64 {
        refill_ms(p.capacity, p.rate_per_s)
    }
    fn limit(p: &TokenBucketParams) -> u64 {
        p.capacity
    }
}

impl Fuzzed for LeakyBucket {
    fn arbitrary_params(u: &mut Unstructured<'_>) -> LeakyBucketParams {
        LeakyBucketParams {
            capacity: amount(u),
            rate_per_s: rate(u),
        }
    }
    fn scale_ms(p: &LeakyBucketParams) -> u64 {
        refill_ms(p.capacity, p.rate_per_s)
    }
    fn limit(p: &LeakyBucketParams) -> u64 {
        p.capacity
    }
}

impl Fuzzed for FixedWindow {
    fn arbitrary_params(u: &mut Unstructured<'_>) -> FixedWindowParams {
        FixedWindowParams {
            limit: amount(u),
            window_ms: duration_ms(u),
        }
    }
    fn scale_ms(p: &FixedWindowParams) -> u64 {
        p.window_ms
    }
    fn limit(p: &FixedWindowParams) -> u64 {
        p.limit
    }
}

impl Fuzzed for SlidingLog {
    fn arbitrary_params(u: &mut Unstructured<'_>) -> SlidingLogParams {
        SlidingLogParams {
            limit: amount(u),
            window_ms: duration_ms(u),
        }
    }
    fn scale_ms(p: &SlidingLogParams) -> u64 {
        p.window_ms
    }
    fn limit(p: &SlidingLogParams) -> u64 {
        p.limit
    }
}

impl Fuzzed for SlidingCounter {
    fn arbitrary_params(u: &mut Unstructured<'_>) -> SlidingCounterParams {
        SlidingCounterParams {
            limit: amount(u),
            window_ms: duration_ms(u),
            precision: u.int_in_range(1..=MAX_PRECISION).unwrap_or(1),
        }
    }
    fn scale_ms(p: &SlidingCounterParams) -> u64 {
        p.window_ms
    }
    fn limit(p: &SlidingCounterParams) -> u64 {
        p.limit
    }
}

impl Fuzzed for Gcra {
    fn arbitrary_params(u: &mut Unstructured<'_>) -> GcraParams {
        let period_ms = duration_ms(u);
        let most = MAX_AMOUNT.min(period_ms.saturating_mul(1_000_000));
        let count = match u.choose_index(3).unwrap_or(0) {
            0 => u.int_in_range(1..=100).unwrap_or(1).min(most),
            1 => most,
            _ => u.int_in_range(1..=most).unwrap_or(1),
        };
        GcraParams {
            burst: amount(u) - 1,
            count,
            period_ms,
        }
    }
    fn scale_ms(p: &GcraParams) -> u64 {
        p.period_ms
    }
    fn limit(p: &GcraParams) -> u64 {
        p.limit()
    }
    const ZERO_COST_PEEKS: bool = true;
}

/// The concurrency limiter (`RL.ACQUIRE`/`RL.RELEASE`), which is a
/// [`State`] but not an [`Algorithm`]: driven by its own operations.
pub mod leases {
    use super::*;
    use redis_ratelimit::algorithms::concurrency::{LeaseParams, Leases, MAX_ID_BYTES};
    use redis_ratelimit::algorithms::Field;

    pub fn params(u: &mut Unstructured<'_>) -> LeaseParams {
        let limit = match u.choose_index(3).unwrap_or(0) {
            0 | 1 => u.int_in_range(1..=4).unwrap_or(1),
            _ => amount(u),
        };
        LeaseParams {
            limit,
            lease_ms: duration_ms(u),
        }
    }

    /// Mostly one of a few ids, so that leases are renewed and released.
    fn id(u: &mut Unstructured<'_>) -> Vec<u8> {
        match u.choose_index(5).unwrap_or(0) {
            0..=3 => vec![b'a' + u.int_in_range(0..=4).unwrap_or(0)],
            _ => {
                let len = u.int_in_range(1..=MAX_ID_BYTES).unwrap_or(1);
                (0..len).map(|_| u.arbitrary::<u8>().unwrap_or(0)).collect()
            }
        }
    }

    /// The leases as RL.INFO describes them: `(id, ends_ms)`, and
    /// `updated_ms`.
    fn described(state: &Leases) -> (Vec<(Vec<u8>, i64)>, i64) {
        let (mut leases, mut updated) = (Vec::new(), 0);
        for (name, field) in state.describe() {
            match (name, field) {
                ("leases", Field::List(list)) => {
                    for lease in list {
                        if let Field::List(pair) = lease {
                            if let [Field::Text(id), Field::Int(end)] = &pair[..] {
                                leases.push((id.clone(), *end));
                            }
                        }
                    }
                }
                ("updated_ms", Field::Int(t)) => updated = t,
                _ => {}
            }
        }
        (leases, updated)
    }

    fn live(state: &Leases, now: i64) -> usize {
        let (leases, updated) = described(state);
        leases
            .iter()
            .filter(|(_, end)| *end > now.max(updated))
            .count()
    }

    /// What a stored lease state must satisfy (see `check_storable`).
    pub fn check_storable(state: &Leases, what: &str) -> Vec<u8> {
        let bytes = encode(state);
        match Leases::decode(&bytes) {
            Ok(replica) => assert_eq!(encode(&replica), bytes, "{what}: the replica differs"),
            Err(e) => panic!("{what}: a stored state does not decode ({e}): {state:?}"),
        }
        bytes
    }

    /// Checks a decision of the limiter under `limit`.
    fn check_decision(d: &Decision, limit: u64, what: &str) {
        assert_eq!(d.limit, limit, "{what}: limit");
        assert!(
            d.remaining <= d.limit,
            "{what}: remaining above the limit: {d:?}"
        );
        assert!(d.reset_after_ms >= 0, "{what}: negative reset_after: {d:?}");
        if d.allowed {
            assert_eq!(d.retry_after_ms, 0, "{what}: {d:?}");
        } else {
            assert!(
                d.retry_after_ms >= 1,
                "{what}: denied without a wait: {d:?}"
            );
        }
        assert_eq!(d.delay_ms, None, "{what}: {d:?}");
    }

    /// A life of one key: acquires, renewals, releases and peeks, as
    /// `RL.ACQUIRE`, `RL.RELEASE` and `RL.INFO` run them, from `start` (a
    /// decoded state) or from no key.
    pub fn run(start: Option<Leases>, mut u: Unstructured<'_>) {
        let mut stored = start;
        let mut params = match &stored {
            Some(s) => s.params(),
            None => params(&mut u),
        };
        let mut now = match &stored {
            Some(s) => described(s).1,
            None => time_ms(&mut u),
        };
        for step in 0..64 {
            if u.ratio(1, 8).unwrap_or(false) {
                params = self::params(&mut u);
            }
            now = advance(now, step_ms(&mut u, params.lease_ms));
            let what = format!("lease step {step}");
            let id = id(&mut u);
            match u.choose_index(4).unwrap_or(0) {
                0 | 1 => {
                    let (mut state, fresh) = match &stored {
                        Some(s) => (s.clone(), false),
                        None => (Leases::new(params, now), true),
                    };
                    let before = encode(&state);
                    let live_before = live(&state, now);
                    let (d, changed) = state.acquire(params, now, &id);
                    check_decision(&d, params.limit, &what);
                    assert_eq!(changed, d.allowed, "{what}: changed only when allowed");
                    assert!(
                        !fresh || d.allowed,
                        "{what}: a new key takes its first lease"
                    );
                    if changed {
                        check_storable(&state, &what);
                        assert!(
                            state.clone().release(now, &id),
                            "{what}: the lease is not live"
                        );
                        let most = usize::try_from(params.limit)
                            .unwrap_or(usize::MAX)
                            .max(live_before);
                        assert!(
                            live(&state, now) <= most,
                            "{what}: more leases than the limit"
                        );
                        assert!(
                            state.fresh_at_ms() > now,
                            "{what}: expires before the lease ends"
                        );
                        stored = Some(state);
                    } else {
                        assert_eq!(encode(&state), before, "{what}: a denial changed the state");
                    }
                }
                2 => {
                    if let Some(s) = &stored {
                        let mut state = s.clone();
                        let before = encode(&state);
                        if state.release(now, &id) {
                            check_storable(&state, &what);
                            assert!(!state.clone().release(now, &id), "{what}: released twice");
                            stored = (!state.is_empty()).then_some(state);
                        } else {
                            assert_eq!(
                                encode(&state),
                                before,
                                "{what}: a refused release changed the state"
                            );
                        }
                    }
                }
                _ => {
                    if let Some(s) = &stored {
                        let d = s.peek(now);
                        check_decision(&d, s.params().limit, &what);
                    }
                }
            }
            if u.is_empty() {
                break;
            }
        }
    }
}
