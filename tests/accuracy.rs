//! A small version of the accuracy study (`make accuracy`, published in
//! `docs/accuracy.md`), so that its findings cannot silently change: the
//! same simulation code, the same traffic patterns, a smaller random trace.

#[allow(dead_code)]
#[path = "../examples/accuracy/sim.rs"]
mod sim;

use sim::{
    allowed_times, error_study, study_limiters, study_patterns, worst_span, ErrorStats, Limiter,
    Pattern, Trace, LIMIT, RATE_BANDS, WINDOW_MS,
};

const SEED: u64 = 7;

/// The name of every algorithm of the registry.
const ALGORITHMS: &[&str] = redis_ratelimit::algorithms::registry::NAMES;

fn pattern(slug: &str) -> Pattern {
    study_patterns(SEED)
        .into_iter()
        .find(|p| p.slug == slug)
        .unwrap_or_else(|| panic!("no pattern {slug}"))
}

fn limiter(name: &str) -> Limiter {
    study_limiters()
        .into_iter()
        .find(|l| l.name() == name)
        .unwrap_or_else(|| panic!("no limiter {name}"))
}

/// The most `limiter` lets through in any window-long span of `pattern`.
fn worst(limiter: &Limiter, pattern: &Pattern) -> usize {
    let decisions = limiter.run(&pattern.arrivals);
    worst_span(
        &allowed_times(&pattern.arrivals, &decisions, false),
        WINDOW_MS,
    )
}

fn allowed(limiter: &Limiter, pattern: &Pattern) -> Vec<bool> {
    limiter
        .run(&pattern.arrivals)
        .iter()
        .map(|d| d.allowed)
        .collect()
}

const LIMIT_USIZE: usize = LIMIT as usize;

#[test]
fn the_worst_span_counts_requests_in_half_open_window_long_spans() {
    assert_eq!(worst_span(&[], 1000), 0);
    assert_eq!(worst_span(&[0, 999], 1000), 2);
    assert_eq!(worst_span(&[0, 1000], 1000), 1);
    assert_eq!(worst_span(&[0, 5, 5, 1004, 1005, 3000], 1000), 3);
}

#[test]
fn the_fixed_window_lets_twice_the_limit_through_in_the_boundary_attack() {
    let attack = pattern("boundary-attack");
    assert_eq!(worst(&limiter("fixed window"), &attack), 2 * LIMIT_USIZE);
}

#[test]
fn the_sliding_log_never_lets_more_than_the_limit_through_in_any_span() {
    let log = limiter("sliding log");
    for p in study_patterns(SEED) {
        assert!(worst(&log, &p) <= LIMIT_USIZE, "{}", p.slug);
    }
    // ...and it is not merely strict: the attack gets exactly the limit.
    assert_eq!(worst(&log, &pattern("boundary-attack")), LIMIT_USIZE);
}

#[test]
fn the_sliding_counter_stops_the_boundary_attack_within_a_few_percent() {
    let attack = pattern("boundary-attack");
    for precision in [1, 10] {
        let got = worst(&sim::sliding_counter(precision), &attack);
        assert!(got <= LIMIT_USIZE * 105 / 100, "P{precision}: {got}");
    }
}

#[test]
fn a_burst_at_a_window_end_then_steady_traffic_nearly_doubles_the_sliding_counter_at_precision_1() {
    let ramp = pattern("burst-then-steady");
    let p1 = worst(&sim::sliding_counter(1), &ramp);
    let p10 = worst(&sim::sliding_counter(10), &ramp);
    assert!(p1 > LIMIT_USIZE * 3 / 2, "P1: {p1}");
    assert!(p10 < LIMIT_USIZE * 5 / 4, "P10: {p10}");
}

#[test]
fn buckets_limit_a_burst_to_the_capacity_but_a_span_only_to_capacity_plus_a_window_of_refill() {
    let above = pattern("steady-above");
    for name in ["token bucket", "GCRA", "leaky bucket"] {
        let got = worst(&limiter(name), &above);
        assert!(got > LIMIT_USIZE * 3 / 2, "{name}: {got}");
        assert!(got <= 2 * LIMIT_USIZE, "{name}: {got}");
    }
}

#[test]
fn callers_that_wait_the_leaky_buckets_delay_never_exceed_the_limit_in_any_span() {
    let leaky = limiter("leaky bucket");
    for p in study_patterns(SEED) {
        let decisions = leaky.run(&p.arrivals);
        let sent = allowed_times(&p.arrivals, &decisions, true);
        assert!(worst_span(&sent, WINDOW_MS) <= LIMIT_USIZE, "{}", p.slug);
    }
}

#[test]
fn token_bucket_gcra_and_leaky_bucket_with_the_same_burst_and_rate_admit_the_same_requests() {
    for p in study_patterns(SEED) {
        let gcra = allowed(&limiter("GCRA"), &p);
        assert_eq!(allowed(&limiter("token bucket"), &p), gcra, "{}", p.slug);
        assert_eq!(allowed(&limiter("leaky bucket"), &p), gcra, "{}", p.slug);
    }
}

#[test]
fn the_sliding_counter_errs_only_near_the_limit_and_less_with_more_precision() {
    let trace = Trace {
        seed: SEED,
        keys: 24,
        duration_ms: 30 * 60_000,
        mean_on_s: 120.0,
        mean_off_s: 240.0,
        min_rate: 0.2,
        max_rate: 5.0,
    };
    let precisions = [1, 10, 60];
    let by_band = error_study(&trace, &precisions);
    let total: Vec<ErrorStats> = by_band
        .iter()
        .map(|bands| bands.iter().fold(ErrorStats::default(), |a, b| a.merged(b)))
        .collect();
    assert!(total[0].requests > 10_000, "{:?}", total[0]);
    // Keys sending at under half the limit's rate are decided exactly.
    assert_eq!(RATE_BANDS[0].0, 0.5);
    for bands in &by_band {
        assert!(bands[0].requests > 0);
        assert_eq!(bands[0].differently(), 0, "{:?}", bands[0]);
    }
    // More precision, fewer wrongly allowed and a smaller worst span.
    assert!(total[0].wrongly_allowed > 0);
    for pair in total.windows(2) {
        assert!(
            pair[1].wrongly_allowed < pair[0].wrongly_allowed,
            "{pair:?}"
        );
        assert!(pair[1].worst_span <= pair[0].worst_span, "{pair:?}");
    }
    assert!(total[2].worst_span <= LIMIT * 11 / 10, "{:?}", total[2]);
}

/// The study (`examples/accuracy/`) lists its algorithms by hand: it must
/// compare every algorithm of the registry, and only those.
#[test]
fn the_study_compares_every_algorithm_of_the_registry() {
    let mut studied: Vec<String> = study_limiters()
        .iter()
        .map(|l| {
            let command = l.command();
            command.split(' ').next().unwrap().to_string()
        })
        .collect();
    studied.sort();
    studied.dedup();
    let mut registry: Vec<String> = ALGORITHMS
        .iter()
        .map(|a| format!("RL.{}", a.to_ascii_uppercase()))
        .collect();
    registry.sort();
    assert_eq!(studied, registry);
}
