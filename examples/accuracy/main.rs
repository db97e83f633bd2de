//! The accuracy study: how close each algorithm keeps to "100 requests a
//! minute" under the same traffic, measured on the pure cores with a fake
//! clock (no Redis involved), and how often the sliding counter's estimate
//! decides otherwise than the exact sliding window.
//!
//! Run `make accuracy` (`cargo run --release --example accuracy`): it writes
//! `docs/accuracy.md` and the SVG charts under `docs/accuracy/`. The traffic
//! comes from a seeded generator, so every run writes the same files.
//! Options: `--out DIR` (default: the repository's `docs`), `--keys N` (keys
//! of the random trace of part (c); fewer for a quick look).

mod charts;
mod sim;

use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use charts::Panel;
use sim::{
    allowed_times, error_study, span_series, study_limiters, study_patterns, worst_span,
    ErrorStats, Limiter, Pattern, Trace, LIMIT, RATE_BANDS, T0, WINDOW_MS,
};

/// Seeds the traffic of every part of the study.
const SEED: u64 = 7;

/// Sliding counter precisions compared with the exact log in part (c).
const PRECISIONS: [u16; 4] = [1, 3, 10, 60];

/// Keys of the random trace: about 10 million requests in all.
const TRACE_KEYS: u64 = 1700;

/// Cloudflare's published figure for its sliding counter (precision 1):
/// 0.003% of 400 million requests decided wrongly.
const CLOUDFLARE_PERCENT: f64 = 0.003;

struct Options {
    out: PathBuf,
    keys: u64,
}

fn options() -> Result<Options, Box<dyn Error>> {
    let mut options = Options {
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs"),
        keys: TRACE_KEYS,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--out" => options.out = PathBuf::from(value()?),
            "--keys" => options.keys = value()?.parse()?,
            _ => return Err(format!("unknown argument {arg}; see the doc comment").into()),
        }
    }
    Ok(options)
}

/// What one limiter let through in one pattern.
struct Outcome {
    name: String,
    times: Vec<i64>,
    worst: usize,
}

/// Every limiter on `pattern`; one that advises a `delay_ms` (the leaky
/// bucket) twice: when its requests are admitted, and when they are sent by
/// callers that wait the delay.
fn outcomes(limiters: &[Limiter], pattern: &Pattern) -> Vec<Outcome> {
    let mut rows = Vec::new();
    for limiter in limiters {
        let decisions = limiter.run(&pattern.arrivals);
        let mut views = vec![(limiter.name(), false)];
        if decisions.iter().any(|d| d.delay_ms.is_some()) {
            views.push((format!("{}, as sent", limiter.name()), true));
        }
        for (name, as_sent) in views {
            let times = allowed_times(&pattern.arrivals, &decisions, as_sent);
            let worst = worst_span(&times, WINDOW_MS);
            rows.push(Outcome { name, times, worst });
        }
    }
    rows
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// A markdown table from a header and rows; the columns from `numbers_from`
/// on hold numbers, aligned right.
fn table(
    out: &mut String,
    header: &[String],
    rows: &[Vec<String>],
    numbers_from: usize,
) -> std::fmt::Result {
    writeln!(out, "| {} |", header.join(" | "))?;
    let rule: Vec<&str> = (0..header.len())
        .map(|i| if i < numbers_from { "---" } else { "---:" })
        .collect();
    writeln!(out, "|{}|", rule.join("|"))?;
    for row in rows {
        writeln!(out, "| {} |", row.join(" | "))?;
    }
    writeln!(out)
}

fn main() -> Result<(), Box<dyn Error>> {
    let options = options()?;
    let started = Instant::now();
    let charts_dir = options.out.join("accuracy");
    std::fs::create_dir_all(&charts_dir)?;

    let limiters = study_limiters();
    let patterns = study_patterns(SEED);
    let results: Vec<Vec<Outcome>> = patterns.iter().map(|p| outcomes(&limiters, p)).collect();

    // (a) one chart per pattern.
    for (pattern, rows) in patterns.iter().zip(&results) {
        let series =
            |times: &[i64]| span_series(times, pattern.start_ms, pattern.end_ms, 1000, WINDOW_MS);
        let panels: Vec<Panel> = rows
            .iter()
            .map(|row| Panel {
                name: row.name.clone(),
                series: series(&row.times),
            })
            .collect();
        charts::pattern_chart(
            &charts_dir.join(format!("{}.svg", pattern.slug)),
            pattern.title,
            (WINDOW_MS / 1000) as u64,
            LIMIT,
            &series(&pattern.arrivals),
            &panels,
        )?;
    }

    // (b) the worst span of each limiter in each pattern.
    let groups: Vec<(String, Vec<(String, f64)>)> = patterns
        .iter()
        .zip(&results)
        .map(|(pattern, rows)| {
            let bars = rows.iter().map(|r| (r.name.clone(), r.worst as f64));
            (pattern.title.to_string(), bars.collect())
        })
        .collect();
    charts::bar_chart(
        &charts_dir.join("worst-span.svg"),
        "The most requests allowed in any 60 s span",
        "worst 60 s span",
        Some((LIMIT as f64, "the limit (100)")),
        &groups,
    )?;

    // (c) the sliding counter against the exact rule.
    let trace = Trace {
        seed: SEED,
        keys: options.keys,
        duration_ms: 2 * 3_600_000,
        mean_on_s: 120.0,
        mean_off_s: 240.0,
        min_rate: 0.2,
        max_rate: 5.0,
    };
    let by_band = error_study(&trace, &PRECISIONS);
    let errors: Vec<ErrorStats> = by_band
        .iter()
        .map(|bands| bands.iter().fold(ErrorStats::default(), |a, b| a.merged(b)))
        .collect();
    charts::error_chart(
        &charts_dir.join("sliding-counter-error.svg"),
        &format!(
            "Sliding counter vs the exact sliding window ({} requests)",
            errors.first().map_or(0, |e| e.requests)
        ),
        &PRECISIONS
            .iter()
            .zip(&errors)
            .map(|(p, e)| {
                (
                    format!("PRECISION {p}"),
                    percent(e.wrongly_allowed, e.requests),
                    percent(e.wrongly_denied, e.requests),
                )
            })
            .collect::<Vec<_>>(),
    )?;

    let report = report(&limiters, &patterns, &results, &trace, &errors, &by_band)?;
    let report_path = options.out.join("accuracy.md");
    std::fs::write(&report_path, report)?;
    println!(
        "wrote {} and the charts in {} in {:.1} s",
        report_path.display(),
        charts_dir.display(),
        started.elapsed().as_secs_f64()
    );
    for (p, e) in PRECISIONS.iter().zip(&errors) {
        println!(
            "PRECISION {p}: {} requests, {} wrongly allowed, {} wrongly denied",
            e.requests, e.wrongly_allowed, e.wrongly_denied
        );
    }
    Ok(())
}

/// What the limiter of this name let through in the pattern of this slug.
fn outcome<'a>(
    patterns: &[Pattern],
    results: &'a [Vec<Outcome>],
    slug: &str,
    name: &str,
) -> Option<&'a Outcome> {
    patterns
        .iter()
        .zip(results)
        .filter(|(p, _)| p.slug == slug)
        .find_map(|(_, rows)| rows.iter().find(|r| r.name == name))
}

/// `docs/accuracy.md`: the parameters, the tables, the findings and the
/// charts.
fn report(
    limiters: &[Limiter],
    patterns: &[Pattern],
    results: &[Vec<Outcome>],
    trace: &Trace,
    errors: &[ErrorStats],
    by_band: &[Vec<ErrorStats>],
) -> Result<String, std::fmt::Error> {
    let mut md = String::new();
    let w = &mut md;
    writeln!(w, "# How accurate is each algorithm?\n")?;
    writeln!(
        w,
        "<!-- Written by examples/accuracy/main.rs (`make accuracy`); edit that, not this. -->\n"
    )?;
    writeln!(
        w,
        "Every algorithm of the module, set to allow **{LIMIT} requests a minute**, meets the \
         same traffic. The study drives the algorithms' pure cores \
         (`redis_ratelimit::algorithms`) on a fake clock, exactly as the commands run them \
         on a stored key, and counts what each one lets through in every **span of {} s**: \
         the stretch of time a \"{LIMIT} a minute\" limit is about.\n",
        WINDOW_MS / 1000
    )?;
    writeln!(
        w,
        "Reproduce: `make accuracy` (that is, `cargo run --release --example accuracy`; \
         about a minute once built). The traffic is drawn from a seeded generator \
         (SplitMix64, seed {SEED}), so every run writes the same results. \
         `tests/accuracy.rs` checks a small version of the findings on every `make test`.\n"
    )?;

    writeln!(w, "## The limiters\n")?;
    let rows: Vec<Vec<String>> = limiters
        .iter()
        .map(|l| vec![l.name(), format!("`{}`", l.command())])
        .collect();
    table(w, &["name".into(), "command".into()], &rows, 2)?;
    writeln!(
        w,
        "The token bucket, GCRA and the leaky bucket hold a burst of {LIMIT} and refill \
         {LIMIT} a minute: the usual way to say \"{LIMIT} a minute\" with a bucket. \
         *P1*, *P10* are the sliding counter's `PRECISION`. The leaky bucket appears twice: \
         *leaky bucket* counts its requests when it admits them, *leaky bucket, as sent* \
         when callers that wait the `delay_ms` it advises act.\n"
    )?;

    writeln!(w, "## The traffic\n")?;
    let rows: Vec<Vec<String>> = patterns
        .iter()
        .map(|p| {
            vec![
                p.title.to_string(),
                p.description.to_string(),
                p.arrivals.len().to_string(),
            ]
        })
        .collect();
    table(
        w,
        &["pattern".into(), "what is sent".into(), "requests".into()],
        &rows,
        2,
    )?;
    writeln!(
        w,
        "Each pattern is one key that starts fresh at a minute boundary (Unix time \
         {T0} ms), so the fixed windows start there.\n"
    )?;

    writeln!(
        w,
        "## The most allowed in any {} s span\n",
        WINDOW_MS / 1000
    )?;
    writeln!(
        w,
        "The worst case a limiter allowed, against its limit of {LIMIT}; the last row is \
         what was sent.\n"
    )?;
    let mut header = vec!["limiter".to_string()];
    header.extend(patterns.iter().map(|p| p.title.to_string()));
    let mut rows: Vec<Vec<String>> = (0..results.first().map_or(0, |r| r.len()))
        .map(|i| {
            let mut row = vec![results[0][i].name.clone()];
            row.extend(results.iter().map(|r| {
                let worst = r[i].worst;
                if worst > LIMIT as usize {
                    format!("**{worst}**")
                } else {
                    worst.to_string()
                }
            }));
            row
        })
        .collect();
    let mut sent = vec!["*sent*".to_string()];
    sent.extend(
        patterns
            .iter()
            .map(|p| format!("*{}*", worst_span(&p.arrivals, WINDOW_MS))),
    );
    rows.push(sent);
    table(w, &header, &rows, 1)?;
    writeln!(w, "Bold: above the limit.\n")?;
    writeln!(
        w,
        "![The worst span of each limiter in each pattern](accuracy/worst-span.svg)\n"
    )?;

    writeln!(w, "Allowed in total over each pattern:\n")?;
    let mut rows: Vec<Vec<String>> = (0..results.first().map_or(0, |r| r.len()))
        .filter(|&i| !results[0][i].name.ends_with("as sent"))
        .map(|i| {
            let mut row = vec![results[0][i].name.clone()];
            row.extend(results.iter().map(|r| r[i].times.len().to_string()));
            row
        })
        .collect();
    let mut sent = vec!["*sent*".to_string()];
    sent.extend(patterns.iter().map(|p| format!("*{}*", p.arrivals.len())));
    rows.push(sent);
    table(w, &header, &rows, 1)?;

    writeln!(w, "### What this shows\n")?;
    let worst =
        |slug: &str, name: &str| outcome(patterns, results, slug, name).map_or(0, |o| o.worst);
    let total = |slug: &str, name: &str| {
        outcome(patterns, results, slug, name).map_or(0, |o| o.times.len())
    };
    let sliding_log_worst = patterns
        .iter()
        .map(|p| worst(p.slug, "sliding log"))
        .max()
        .unwrap_or(0);
    writeln!(
        w,
        "- **Fixed window**: the boundary attack gets {} requests through within 2 seconds \
         ({:.1}x the limit), as documented.",
        worst("boundary-attack", "fixed window"),
        worst("boundary-attack", "fixed window") as f64 / LIMIT as f64
    )?;
    writeln!(
        w,
        "- **Sliding log**: never more than the limit in any span, in any pattern \
         (at most {sliding_log_worst})."
    )?;
    writeln!(
        w,
        "- **Sliding counter**: the boundary attack gets {} (P1) and {} (P10) through. \
         Its weak spot is a burst at the end of a window followed by steady traffic: \
         the estimate counts the burst as if it had been spread over the previous \
         window, so it fades too soon; P1 then allows {} in one span, P10 {}. A higher \
         precision shortens the time over which the burst is underestimated. The same \
         assumption also errs the other way: after the bursts of the on/off pattern, \
         P1 allowed {} in all where the exact log allowed {}.",
        worst("boundary-attack", "sliding counter P1"),
        worst("boundary-attack", "sliding counter P10"),
        worst("burst-then-steady", "sliding counter P1"),
        worst("burst-then-steady", "sliding counter P10"),
        total("bursty", "sliding counter P1"),
        total("bursty", "sliding log"),
    )?;
    writeln!(
        w,
        "- **Token bucket, GCRA, leaky bucket** (admitted): they limit a burst to {LIMIT}, \
         not a span: a full bucket plus a minute of refill lets up to about 2x the \
         limit through in one span ({} in the steady traffic above the limit), by design. \
         Where \"{LIMIT} in any minute\" must hold, use a window algorithm or a smaller \
         capacity.",
        worst("steady-above", "token bucket"),
    )?;
    writeln!(
        w,
        "- **Leaky bucket, as sent**: callers that wait the advised `delay_ms` act at \
         the steady rate, at most {} in any span, whatever the traffic.\n",
        patterns
            .iter()
            .map(|p| worst(p.slug, "leaky bucket, as sent"))
            .max()
            .unwrap_or(0)
    )?;

    writeln!(w, "## What each algorithm let through, over time\n")?;
    writeln!(
        w,
        "For each pattern, one panel per limiter: the requests sent (grey) and allowed \
         (blue) in the {} s span ending at each moment, against the limit (red).\n",
        WINDOW_MS / 1000
    )?;
    for p in patterns {
        writeln!(w, "### {}\n\n{}\n", p.title, p.description)?;
        writeln!(w, "![{}](accuracy/{}.svg)\n", p.title, p.slug)?;
    }

    writeln!(
        w,
        "## The sliding counter against the exact sliding window\n"
    )?;
    let requests = errors.first().map_or(0, |e| e.requests);
    writeln!(
        w,
        "A random trace of {requests} requests over {} keys and {} hours: each key \
         alternates on and off periods (exponential, {:.0} s and {:.0} s on average) and, \
         while on, sends Poisson traffic at a rate drawn between {}x and {}x its limit's \
         (log-uniform). Many requests thus arrive near or above the limit, where the \
         estimate matters: traffic well below a limit is allowed by every algorithm, so \
         real traffic, mostly below its limits, shows fewer differences (see the table \
         by rate below).\n",
        trace.keys,
        trace.duration_ms / 3_600_000,
        trace.mean_on_s,
        trace.mean_off_s,
        trace.min_rate,
        trace.max_rate,
    )?;
    writeln!(
        w,
        "Each request's decision is compared with the exact rule on the same history: \
         allow when the requests the counter allowed in the last {} s, plus this one, \
         are at most {LIMIT}. *Wrongly allowed*: the counter said yes, the exact rule no; \
         *wrongly denied*: the reverse. Under overload nearly every request is decided \
         at the limit, so there the counts say more about *which* requests pass than \
         how many: compare *allowed* with what a separate sliding log, keeping its own \
         history, allowed on the same trace ({:.1}%). The last column counts the \
         requests that log decided otherwise, where one difference can lead to \
         others.\n",
        WINDOW_MS / 1000,
        errors
            .first()
            .map_or(0.0, |e| percent(e.allowed_by_log, e.requests)),
    )?;
    let rows: Vec<Vec<String>> = PRECISIONS
        .iter()
        .zip(errors)
        .map(|(p, e)| {
            vec![
                format!("PRECISION {p}"),
                format!(
                    "{} ({:.4}%)",
                    e.wrongly_allowed,
                    percent(e.wrongly_allowed, e.requests)
                ),
                format!(
                    "{} ({:.4}%)",
                    e.wrongly_denied,
                    percent(e.wrongly_denied, e.requests)
                ),
                format!("{:.4}%", percent(e.differently(), e.requests)),
                format!("{:.1}%", percent(e.allowed, e.requests)),
                e.worst_span.to_string(),
                format!("{} of {}", e.keys_over_limit, trace.keys),
                format!("{:.3}%", percent(e.differ_from_log, e.requests)),
            ]
        })
        .collect();
    table(
        w,
        &[
            "sliding counter".into(),
            "wrongly allowed".into(),
            "wrongly denied".into(),
            "decided differently".into(),
            "allowed".into(),
            "worst 60 s span".into(),
            "keys ever over the limit".into(),
            "differs from a separate log".into(),
        ],
        &rows,
        1,
    )?;
    writeln!(
        w,
        "![Sliding counter errors by precision](accuracy/sliding-counter-error.svg)\n"
    )?;
    writeln!(
        w,
        "Where the differences are: the same trace, its keys grouped by their rate while \
         sending (a multiple of the limit's rate). Each cell: wrongly allowed / wrongly \
         denied, in % of that group's requests.\n"
    )?;
    let mut header = vec![
        "rate while on".to_string(),
        "keys".into(),
        "requests".into(),
    ];
    header.extend(PRECISIONS.iter().map(|p| format!("PRECISION {p}")));
    let rows: Vec<Vec<String>> = RATE_BANDS
        .iter()
        .enumerate()
        .map(|(band, (_, name))| {
            let first = by_band.first().map(|b| b[band]).unwrap_or_default();
            let mut row = vec![
                name.to_string(),
                first.keys.to_string(),
                first.requests.to_string(),
            ];
            row.extend(by_band.iter().map(|b| {
                let e = b[band];
                format!(
                    "{:.4} / {:.4}",
                    percent(e.wrongly_allowed, e.requests),
                    percent(e.wrongly_denied, e.requests)
                )
            }));
            row
        })
        .collect();
    table(w, &header, &rows, 1)?;
    if let Some(first) = errors.first() {
        let below = by_band.first().map_or(ErrorStats::default(), |b| {
            b.iter()
                .zip(RATE_BANDS)
                .filter(|(_, (upper, _))| *upper <= 0.8)
                .fold(ErrorStats::default(), |a, (e, _)| a.merged(e))
        });
        writeln!(
            w,
            "Cloudflare reported {CLOUDFLARE_PERCENT}% of 400 million requests decided \
             wrongly by the estimate of PRECISION 1, on its real traffic, where most \
             sources stay far below their limits. Here PRECISION 1 decides {:.4}% of all \
             requests differently, and {:.4}% of those of keys sending at under 0.8x \
             their limit's rate: the estimate errs almost only near and above the limit, where \
             it also lets a span hold up to {} requests against {LIMIT}. Each step up in \
             precision cuts both.\n",
            percent(first.differently(), first.requests),
            percent(below.differently(), below.requests),
            first.worst_span,
        )?;
    }
    Ok(md)
}
