//! The accuracy study's simulation: every algorithm's pure core, driven by
//! the same traffic on a fake clock, and the measures taken of what it let
//! through. Shared by the study (`examples/accuracy/main.rs`), which draws
//! and publishes the results, and by `tests/accuracy.rs`, which pins a small
//! version of its findings so that they cannot silently change.
//!
//! Terms: a *limiter* is one algorithm with its parameters; a *pattern* is a
//! list of request times (Unix ms, sorted); a *span* is a window-long stretch
//! of time `(t - window, t]`, the stretch every "100 a minute" limit is about.

use std::collections::VecDeque;
use std::rc::Rc;

use redis_ratelimit::algorithms::registry::{each_algorithm, Each, Listed};
use redis_ratelimit::algorithms::sliding_counter::{SlidingCounter, SlidingCounterParams};
use redis_ratelimit::algorithms::sliding_log::{SlidingLog, SlidingLogParams};
use redis_ratelimit::algorithms::{Algorithm, Decision, Mode};
use redis_ratelimit::parse::Syntax;

/// The limit every limiter of the study enforces: `LIMIT` per `WINDOW_MS`.
pub const LIMIT: u64 = 100;

pub const WINDOW_MS: i64 = 60_000;

/// Where every pattern starts: a Unix time on a minute boundary, so the
/// fixed windows (and the sliding counter's buckets), which are aligned to
/// the epoch, start there too.
pub const T0: i64 = 1_700_000_040_000;

/// A small, fast, seeded generator (SplitMix64), so every run of the study
/// sees the same traffic without a dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed with the given mean: the gaps of a Poisson
    /// stream.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// The decision on each request of a pattern, for one algorithm with its
/// parameters.
type Run = Rc<dyn Fn(&[i64]) -> Vec<Decision>>;

/// One algorithm with its parameters, whichever algorithm of the registry.
#[derive(Clone)]
pub struct Limiter {
    /// The algorithm's registry name.
    pub algorithm: &'static str,
    name: String,
    /// The parameters (and own options) as a command writes them.
    words: Vec<String>,
    run: Run,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.command())
    }
}

/// The refill (or leak) rate that matches `LIMIT` per `WINDOW_MS`.
pub fn limit_rate_per_s() -> f64 {
    LIMIT as f64 * 1000.0 / WINDOW_MS as f64
}

/// What the study calls an algorithm in its tables and legends, and where it
/// puts it: the algorithms it discusses by name first, in its own order;
/// any other by its registry name, after them.
const TITLES: &[(&str, &str)] = &[
    ("fixedwindow", "fixed window"),
    ("slidingcounter", "sliding counter"),
    ("slidinglog", "sliding log"),
    ("tokenbucket", "token bucket"),
    ("gcra", "GCRA"),
    ("leakybucket", "leaky bucket"),
];

fn title(algorithm: &str) -> (usize, String) {
    TITLES
        .iter()
        .position(|(name, _)| *name == algorithm)
        .map_or((TITLES.len(), algorithm.to_string()), |i| {
            (i, TITLES[i].1.to_string())
        })
}

impl Limiter {
    /// The algorithm `A` under `params`.
    pub fn of<A: Listed>(params: A::Params) -> Limiter {
        let mut name = title(A::NAME).1;
        if let Some(precision) = own_option::<A>(&params, "PRECISION") {
            name = format!("{name} P{precision}");
        }
        Limiter {
            algorithm: A::NAME,
            name,
            words: params.to_words(),
            run: Rc::new(move |arrivals: &[i64]| run_key::<A>(params, arrivals)),
        }
    }

    /// A short name, for tables and legends.
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// The module command that applies these parameters (whole seconds
    /// written as such).
    pub fn command(&self) -> String {
        let mut command = format!("RL.{} key", self.algorithm.to_ascii_uppercase());
        for word in &self.words {
            let seconds = word
                .strip_suffix("ms")
                .and_then(|ms| ms.parse::<u64>().ok())
                .filter(|ms| ms % 1000 == 0)
                .map(|ms| format!("{}s", ms / 1000));
            command.push(' ');
            command.push_str(seconds.as_deref().unwrap_or(word));
        }
        command
    }

    /// The decision on each request of `arrivals` (sorted Unix ms), each of
    /// cost 1, on one key that starts fresh.
    pub fn run(&self, arrivals: &[i64]) -> Vec<Decision> {
        (self.run)(arrivals)
    }
}

/// The value of the own option `token` in `params`' words, if it has one.
fn own_option<A: Algorithm>(params: &A::Params, token: &str) -> Option<String> {
    let words = params.to_words();
    let position = words.iter().position(|w| w.eq_ignore_ascii_case(token))?;
    words.get(position + 1).cloned()
}

pub fn sliding_counter(precision: u16) -> Limiter {
    Limiter::of::<SlidingCounter>(SlidingCounterParams {
        limit: LIMIT,
        window_ms: WINDOW_MS as u64,
        precision,
    })
}

/// Each algorithm of the registry at "100 a minute" (`Algorithm::limit_of`).
struct AtTheLimit;

impl Each for AtTheLimit {
    type Out = Limiter;
    fn algorithm<A: Listed>(&mut self) -> Limiter {
        Limiter::of::<A>(A::limit_of(LIMIT, WINDOW_MS as u64))
    }
}

/// Every algorithm of the registry, set to "100 a minute" as closely as its
/// parameters allow (the buckets and GCRA hold a burst of 100 and refill 100
/// a minute), in the study's order; the sliding counter twice, at the
/// precisions the study compares (1 and 10).
pub fn study_limiters() -> Vec<Limiter> {
    let mut limiters = Vec::new();
    for limiter in each_algorithm(&mut AtTheLimit) {
        if limiter.algorithm == "slidingcounter" {
            limiters.extend([sliding_counter(1), sliding_counter(10)]);
        } else {
            limiters.push(limiter);
        }
    }
    limiters.sort_by_key(|l| title(l.algorithm).0);
    limiters
}

/// One key's state, checked the way the Redis layer checks a stored key
/// (`check_stored`), or created by the first allowed request (`check_with`).
pub struct Key<A: Algorithm> {
    params: A::Params,
    state: Option<A>,
}

impl<A: Algorithm> Key<A> {
    pub fn new(params: A::Params) -> Self {
        Self {
            params,
            state: None,
        }
    }

    /// Decides on a request of cost 1 at `now_ms`, taking it when allowed.
    pub fn take(&mut self, now_ms: i64) -> Decision {
        match &mut self.state {
            Some(state) => state.check_stored(self.params, now_ms, 1, Mode::Take).0,
            None => {
                let (decision, next) = A::check_with(None, self.params, now_ms, 1, Mode::Take);
                self.state = next;
                decision
            }
        }
    }
}

fn run_key<A: Algorithm>(params: A::Params, arrivals: &[i64]) -> Vec<Decision> {
    let mut key = Key::<A>::new(params);
    arrivals.iter().map(|&now| key.take(now)).collect()
}

/// The times of the allowed requests among `arrivals`. With `as_sent`, each
/// is moved by its `delay_ms` (the leaky bucket's throttling): when a caller
/// that follows the advice acts.
pub fn allowed_times(arrivals: &[i64], decisions: &[Decision], as_sent: bool) -> Vec<i64> {
    let mut times: Vec<i64> = arrivals
        .iter()
        .zip(decisions)
        .filter(|(_, d)| d.allowed)
        .map(|(&t, d)| {
            if as_sent {
                t + d.delay_ms.unwrap_or(0)
            } else {
                t
            }
        })
        .collect();
    times.sort_unstable();
    times
}

/// The most requests among `times` (sorted) in any span `(t - window_ms, t]`.
/// The count only rises at a request, so the spans ending at each request are
/// the only ones to look at.
pub fn worst_span(times: &[i64], window_ms: i64) -> usize {
    let mut first = 0;
    let mut worst = 0;
    for (i, &t) in times.iter().enumerate() {
        while times[first] <= t - window_ms {
            first += 1;
        }
        worst = worst.max(i + 1 - first);
    }
    worst
}

/// How many of `times` (sorted) fall in the span `(t - window_ms, t]`.
pub fn count_in_span(times: &[i64], t: i64, window_ms: i64) -> usize {
    times.partition_point(|&x| x <= t) - times.partition_point(|&x| x <= t - window_ms)
}

/// The requests in the span ending at each step of `step_ms` from `start`
/// to `end`, taking the highest count within each step so that no peak is
/// lost between two samples. Returns `(seconds since start, count)`.
pub fn span_series(
    times: &[i64],
    start: i64,
    end: i64,
    step_ms: i64,
    window_ms: i64,
) -> Vec<(f64, f64)> {
    let mut series = Vec::new();
    let mut i = 0;
    let mut first = 0;
    let mut t = start;
    while t <= end {
        let mut peak = count_in_span(times, t, window_ms);
        while i < times.len() && times[i] <= t {
            while times[first] <= times[i] - window_ms {
                first += 1;
            }
            peak = peak.max(i + 1 - first);
            i += 1;
        }
        series.push(((t - start) as f64 / 1000.0, peak as f64));
        t += step_ms;
    }
    series
}

/// One traffic pattern: who sends what, when.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// Names the pattern's chart file.
    pub slug: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub start_ms: i64,
    pub end_ms: i64,
    /// Request times, sorted.
    pub arrivals: Vec<i64>,
}

/// A Poisson stream at `per_s` requests a second over `[start, end)`.
pub fn poisson(rng: &mut SplitMix64, start: i64, end: i64, per_s: f64) -> Vec<i64> {
    let mut times = Vec::new();
    let mut t = start as f64;
    loop {
        t += rng.exponential(1000.0 / per_s);
        let ms = t.floor() as i64;
        if ms >= end {
            return times;
        }
        times.push(ms);
    }
}

/// `n` requests evenly spread over `[start, end)`.
pub fn spread(n: u64, start: i64, end: i64) -> Vec<i64> {
    let len = i128::from(end - start);
    (0..n)
        .map(|i| start + (i128::from(i) * len / i128::from(n)) as i64)
        .collect()
}

/// The patterns of the study, each on one key starting fresh at [`T0`].
pub fn study_patterns(seed: u64) -> Vec<Pattern> {
    let mut rng = SplitMix64::new(seed);
    let s = |seconds: i64| T0 + seconds * 1000;
    let mut bursty = Vec::new();
    for cycle in 0..6 {
        bursty.extend(spread(200, s(80 * cycle), s(80 * cycle + 8)));
    }
    let steady_below = poisson(&mut rng, s(0), s(300), 1.0);
    let steady_above = poisson(&mut rng, s(0), s(300), 3.0);
    let mut burst_then_steady = spread(LIMIT, s(59), s(60));
    burst_then_steady.extend(poisson(&mut rng, s(60), s(180), 3.0));
    let mut boundary_attack = spread(LIMIT, s(59), s(60));
    boundary_attack.extend(spread(LIMIT, s(60), s(61)));
    vec![
        Pattern {
            slug: "steady-below",
            title: "Steady, below the limit",
            description: "Poisson arrivals at 1 a second (60 a minute) for 5 minutes.",
            start_ms: s(0),
            end_ms: s(300),
            arrivals: steady_below,
        },
        Pattern {
            slug: "steady-above",
            title: "Steady, above the limit",
            description: "Poisson arrivals at 3 a second (180 a minute) for 5 minutes.",
            start_ms: s(0),
            end_ms: s(300),
            arrivals: steady_above,
        },
        Pattern {
            slug: "bursty",
            title: "Bursty, on and off",
            description: "200 requests evenly over 8 s, then 72 s of silence; 6 times \
                          (8 minutes, 150 a minute on average).",
            start_ms: s(0),
            end_ms: s(480),
            arrivals: bursty,
        },
        Pattern {
            slug: "boundary-attack",
            title: "Boundary attack",
            description: "100 requests in the last second of a fixed window \
                          ([59 s, 60 s)), 100 in the first second of the next ([60 s, 61 s)).",
            start_ms: s(0),
            end_ms: s(180),
            arrivals: boundary_attack,
        },
        Pattern {
            slug: "burst-then-steady",
            title: "Boundary burst, then steady",
            description: "100 requests in the last second of a window ([59 s, 60 s)), \
                          then Poisson arrivals at 3 a second for 2 minutes: the worst \
                          case of the sliding counter's estimate, which assumes the \
                          previous window's requests were spread evenly.",
            start_ms: s(0),
            end_ms: s(240),
            arrivals: burst_then_steady,
        },
    ]
}

/// What the sliding counter decided differently from the exact rule, over a
/// trace of many keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorStats {
    pub keys: u64,
    pub requests: u64,
    /// Allowed by the counter, denied by the exact rule on the same history.
    pub wrongly_allowed: u64,
    /// Denied by the counter, allowed by the exact rule on the same history.
    pub wrongly_denied: u64,
    pub allowed: u64,
    /// The most the counter let through in any span, over all keys.
    pub worst_span: u64,
    /// Keys that had some span holding more than the limit.
    pub keys_over_limit: u64,
    /// Requests that a separate sliding log, run on the same trace with its
    /// own history, decided otherwise.
    pub differ_from_log: u64,
    /// Requests that separate sliding log allowed.
    pub allowed_by_log: u64,
}

impl ErrorStats {
    pub fn differently(&self) -> u64 {
        self.wrongly_allowed + self.wrongly_denied
    }

    /// The statistics of two sets of keys together.
    pub fn merged(&self, other: &ErrorStats) -> ErrorStats {
        ErrorStats {
            keys: self.keys + other.keys,
            requests: self.requests + other.requests,
            wrongly_allowed: self.wrongly_allowed + other.wrongly_allowed,
            wrongly_denied: self.wrongly_denied + other.wrongly_denied,
            allowed: self.allowed + other.allowed,
            worst_span: self.worst_span.max(other.worst_span),
            keys_over_limit: self.keys_over_limit + other.keys_over_limit,
            differ_from_log: self.differ_from_log + other.differ_from_log,
            allowed_by_log: self.allowed_by_log + other.allowed_by_log,
        }
    }
}

/// The bands of a key's rate while it sends, as multiples of the limit's
/// rate: each band's upper bound (excluded) and its name.
pub const RATE_BANDS: [(f64, &str); 5] = [
    (0.5, "under 0.5x"),
    (0.8, "0.5x to 0.8x"),
    (1.25, "0.8x to 1.25x"),
    (2.0, "1.25x to 2x"),
    (f64::INFINITY, "2x and more"),
];

fn rate_band(multiple: f64) -> usize {
    RATE_BANDS
        .iter()
        .position(|(upper, _)| multiple < *upper)
        .unwrap_or(RATE_BANDS.len() - 1)
}

/// A trace of many keys, each on its own: on and off periods (exponential,
/// `mean_on_s` and `mean_off_s`), Poisson arrivals while on, at a rate drawn
/// log-uniformly between `min_rate` and `max_rate` times the limit's rate.
#[derive(Debug, Clone, Copy)]
pub struct Trace {
    pub seed: u64,
    pub keys: u64,
    pub duration_ms: i64,
    pub mean_on_s: f64,
    pub mean_off_s: f64,
    pub min_rate: f64,
    pub max_rate: f64,
}

impl Trace {
    /// Key `k`'s rate while on (a multiple of the limit's rate) and its
    /// request times, sorted.
    pub fn key(&self, k: u64) -> (f64, Vec<i64>) {
        let mut rng = SplitMix64::new(self.seed ^ k.wrapping_mul(0xd1b5_4a32_d192_ed03));
        let (lo, hi) = (self.min_rate.ln(), self.max_rate.ln());
        let multiple = (lo + (hi - lo) * rng.unit()).exp();
        let per_s = limit_rate_per_s() * multiple;
        // Keys start at random phases.
        let end = T0 + self.duration_ms;
        let mut t = T0 + (rng.unit() * WINDOW_MS as f64) as i64;
        let mut times = Vec::new();
        while t < end {
            let on_end = (t + (rng.exponential(self.mean_on_s) * 1000.0) as i64).min(end);
            times.extend(poisson(&mut rng, t, on_end, per_s));
            t = on_end + (rng.exponential(self.mean_off_s) * 1000.0) as i64;
        }
        (multiple, times)
    }
}

/// Runs the sliding counter at each of `precisions` over `trace`, key by key,
/// and compares each decision with the exact rule (allow when the requests
/// the counter allowed in the span ending now, plus this one, are at most
/// the limit) on the counter's own history, so that one difference does not
/// cascade into others. Also runs a sliding log on the same trace, with its
/// own history, for the looser comparison of two separate limiters.
///
/// Returns, for each precision, the statistics of each [`RATE_BANDS`] band.
/// Keys are independent, so they are shared out among threads; the totals
/// do not depend on how.
pub fn error_study(trace: &Trace, precisions: &[u16]) -> Vec<Vec<ErrorStats>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let per_thread = trace.keys.div_ceil(threads);
    let parts: Vec<Vec<Vec<ErrorStats>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let keys = t * per_thread..((t + 1) * per_thread).min(trace.keys);
                scope.spawn(move || error_study_of_keys(trace, precisions, keys))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut stats = vec![vec![ErrorStats::default(); RATE_BANDS.len()]; precisions.len()];
    for part in parts {
        for (total, part) in stats.iter_mut().flatten().zip(part.iter().flatten()) {
            *total = total.merged(part);
        }
    }
    stats
}

fn error_study_of_keys(
    trace: &Trace,
    precisions: &[u16],
    keys: std::ops::Range<u64>,
) -> Vec<Vec<ErrorStats>> {
    let mut stats = vec![vec![ErrorStats::default(); RATE_BANDS.len()]; precisions.len()];
    let log_params = SlidingLogParams {
        limit: LIMIT,
        window_ms: WINDOW_MS as u64,
    };
    for k in keys {
        let (multiple, arrivals) = trace.key(k);
        let band = rate_band(multiple);
        let by_log: Vec<bool> = run_key::<SlidingLog>(log_params, &arrivals)
            .iter()
            .map(|d| d.allowed)
            .collect();
        for (precision, by_band) in precisions.iter().zip(stats.iter_mut()) {
            let stats = &mut by_band[band];
            let mut key = Key::<SlidingCounter>::new(SlidingCounterParams {
                limit: LIMIT,
                window_ms: WINDOW_MS as u64,
                precision: *precision,
            });
            let mut window: VecDeque<i64> = VecDeque::new();
            let mut over_limit = false;
            for (&now, &log_allowed) in arrivals.iter().zip(&by_log) {
                while window.front().is_some_and(|&t| t <= now - WINDOW_MS) {
                    window.pop_front();
                }
                let exact = (window.len() as u64) < LIMIT;
                let allowed = key.take(now).allowed;
                stats.requests += 1;
                stats.wrongly_allowed += u64::from(allowed && !exact);
                stats.wrongly_denied += u64::from(!allowed && exact);
                stats.differ_from_log += u64::from(allowed != log_allowed);
                stats.allowed_by_log += u64::from(log_allowed);
                if allowed {
                    stats.allowed += 1;
                    window.push_back(now);
                    let span = window.len() as u64;
                    stats.worst_span = stats.worst_span.max(span);
                    over_limit |= span > LIMIT;
                }
            }
            stats.keys += 1;
            stats.keys_over_limit += u64::from(over_limit);
        }
    }
    stats
}
