//! Big states for `make bench` (scripts/bench.py): a sliding log of many
//! entries, or a key holding many leases, encoded as `RL.SETSTATE key <state>`
//! takes it. Reaching such a state through the server takes too long (a
//! million entries need a million distinct milliseconds; each acquire on a
//! lease set of n leases costs O(n)), so the state is built here with the
//! crate's own pure code and written out in its own encoding.
//!
//! ```text
//! cargo run --release --example bench_states -- cases
//! cargo run --release --example bench_states -- sliding-log \
//!     --now-ms N --entries M --limit L --window-ms W [--out FILE]
//! cargo run --release --example bench_states -- leases \
//!     --now-ms N --entries M --limit L --lease-ms D [--out FILE]
//! ```
//!
//! `sliding-log`: M requests of cost 1, one a millisecond, the last at N, under
//! limit L and window W ms (M entries; every one must be allowed). `leases`:
//! M leases with the ids `lease-0` ... `lease-<M-1>`, all taken at N for D ms
//! under limit L. The encoded state goes to FILE, or to standard output.
//! `cases`: the bench's case of every algorithm of the registry, one JSON
//! object a line, in registry order: `name`, `params` (the words of
//! `limit_of(100, 1 min)`, what the throughput figures check) and
//! `memory_params` (`limit_of(100, 1 h)`: no key expires while counted).

use std::error::Error;
use std::io::Write as _;

use redis_ratelimit::algorithms::concurrency::{LeaseParams, Leases};
use redis_ratelimit::algorithms::registry::{each_algorithm, Each, Listed};
use redis_ratelimit::algorithms::sliding_log::{SlidingLog, SlidingLogParams};
use redis_ratelimit::algorithms::{Algorithm, Mode, State};
use redis_ratelimit::parse::Syntax;

/// The bench's case of an algorithm, as a line of JSON (the words are plain
/// numbers, units and option names: nothing to escape).
struct BenchCase;

impl Each for BenchCase {
    type Out = String;
    fn algorithm<A: Listed>(&mut self) -> String {
        let list = |words: Vec<String>| {
            let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
            format!("[{}]", quoted.join(", "))
        };
        format!(
            "{{\"name\": \"{}\", \"params\": {}, \"memory_params\": {}}}",
            A::NAME,
            list(A::limit_of(100, 60_000).to_words()),
            list(A::limit_of(100, 3_600_000).to_words()),
        )
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map(String::as_str).unwrap_or("");
    if kind == "cases" {
        for line in each_algorithm(&mut BenchCase) {
            println!("{line}");
        }
        return Ok(());
    }
    let number = |name: &str| -> Result<u64, Box<dyn Error>> {
        let at = args
            .iter()
            .position(|a| a == name)
            .ok_or_else(|| format!("{name} is missing"))?;
        let value = args
            .get(at + 1)
            .ok_or_else(|| format!("{name} needs a value"))?;
        Ok(value.parse().map_err(|e| format!("{name} {value}: {e}"))?)
    };
    let now_ms = i64::try_from(number("--now-ms")?)?;
    let entries = number("--entries")?;
    let limit = number("--limit")?;
    let mut encoded = Vec::new();
    match kind {
        "sliding-log" => {
            let params = SlidingLogParams {
                limit,
                window_ms: number("--window-ms")?,
            };
            let first_ms = now_ms - i64::try_from(entries)? + 1;
            let mut log = SlidingLog::fresh(params, first_ms);
            for at_ms in first_ms..=now_ms {
                // In place, as the Redis layer checks a stored state: O(1)
                // for an allowed request (check_with would copy the log).
                if !log.check(at_ms, 1, Mode::Take).allowed {
                    return Err(
                        format!("request at {at_ms} ms denied: limit or window too small").into(),
                    );
                }
            }
            log.encode(&mut encoded);
        }
        "leases" => {
            let params = LeaseParams {
                limit,
                lease_ms: number("--lease-ms")?,
            };
            let mut leases = Leases::new(params, now_ms);
            for i in 0..entries {
                if !leases
                    .acquire(params, now_ms, format!("lease-{i}").as_bytes())
                    .0
                    .allowed
                {
                    return Err(format!("lease {i} refused: limit too small").into());
                }
            }
            leases.encode(&mut encoded);
        }
        _ => return Err("the first argument is cases, sliding-log or leases".into()),
    }
    match args.iter().position(|a| a == "--out") {
        Some(at) => std::fs::write(args.get(at + 1).ok_or("--out needs a file")?, &encoded)?,
        None => std::io::stdout().write_all(&encoded)?,
    }
    Ok(())
}
