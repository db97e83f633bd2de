//! The fuzz targets' seeds and dictionary words of every algorithm of the
//! registry, made from the algorithm itself (its `Syntax::EXAMPLE`), so that
//! a new algorithm is fuzzed from a good start with nothing written for it.
//! `make fuzz` writes them beside the hand-written seeds of what is not an
//! algorithm (`fuzz/seeds/`: `RL.ALL`, options, `CL.THROTTLE`, `RL.ACQUIRE`,
//! the leases) and the fixed dictionary (`fuzz/parse_args.dict`):
//!
//! ```text
//! cargo run --example fuzz_seeds -- fuzz/corpus/generated
//! ```
//!
//! writes `<dir>/parse_args/<name>`, `<dir>/parse_args/options-<name>`
//! (for an algorithm with options of its own), `<dir>/states/<name>` and
//! `<dir>/states/penalized_<name>`, and `<dir>/parse_args.dict`: the fixed
//! dictionary, then each algorithm's name and own option tokens.

use std::error::Error;
use std::path::Path;

use redis_ratelimit::algorithms::penalty::{Penalized, Stamp};
use redis_ratelimit::algorithms::registry::{each_algorithm, Each, Listed};
use redis_ratelimit::algorithms::{Mode, State};
use redis_ratelimit::parse::{check_args, Syntax};

/// When the seed states were last used (Unix ms, November 2023).
const T0_MS: i64 = 1_700_000_000_000;

/// One seed: its folder (the target's), its file name, its bytes.
pub type Seed = (&'static str, String, Vec<u8>);

/// A `decode_state`/`check_sequence` input: `[len: u16 LE][state][rest]`,
/// the rest 48 bytes to drive the checks.
fn state_input(state: &[u8]) -> Vec<u8> {
    let len = u16::try_from(state.len()).unwrap_or(u16::MAX);
    let mut input = len.to_le_bytes().to_vec();
    input.extend_from_slice(state);
    input.extend(7u8..55);
    input
}

struct Seeds;

impl Each for Seeds {
    type Out = (Vec<Seed>, Vec<String>);
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        let name = A::NAME;
        let example = A::Params::EXAMPLE;
        let mut seeds: Vec<Seed> = vec![(
            "parse_args",
            name.to_string(),
            [&[name][..], example].concat().join("\n").into_bytes(),
        )];
        let mut words = vec![name.to_string(), name.to_ascii_uppercase()];
        if !A::Params::OPTIONS.is_empty() {
            let parser = format!("options-{name}");
            // The example's own options, else each option's token alone.
            let own = example.get(A::Params::PARAMS.len()..).unwrap_or(&[]);
            let mut lines = vec![parser.as_str()];
            if own.is_empty() {
                lines.extend(A::Params::OPTIONS.iter().map(|o| o.token));
            } else {
                lines.extend(own);
            }
            seeds.push(("parse_args", parser.clone(), lines.join("\n").into_bytes()));
            words.push(parser);
        }
        for option in A::Params::OPTIONS {
            words.extend([option.token.to_string(), option.token.to_ascii_lowercase()]);
        }
        let args: Vec<&[u8]> = example.iter().map(|w| w.as_bytes()).collect();
        // No state seed when the example does not parse: `tests/fuzz_inputs.rs`
        // then says which algorithm has none.
        if let Ok((params, _)) = check_args::<A::Params>(&args) {
            let mut state = A::fresh(params, T0_MS);
            state.check(T0_MS, 1, Mode::Take);
            let mut plain = Vec::new();
            state.encode(&mut plain);
            let mut penalized = Vec::new();
            Penalized {
                until_ms: T0_MS + 1_000_000,
                stamp: Stamp::NONE,
                state,
            }
            .encode(&mut penalized);
            seeds.push(("states", name.to_string(), state_input(&plain)));
            seeds.push((
                "states",
                format!("penalized_{name}"),
                state_input(&penalized),
            ));
        }
        (seeds, words)
    }
}

/// Every algorithm's seeds, and its words for the `parse_args` dictionary.
pub fn generated() -> (Vec<Seed>, Vec<String>) {
    let (mut seeds, mut words) = (Vec::new(), Vec::new());
    for (s, w) in each_algorithm(&mut Seeds) {
        seeds.extend(s);
        words.extend(w);
    }
    (seeds, words)
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("the directory to write the seeds to is missing")?;
    let dir = Path::new(&dir);
    let (seeds, words) = generated();
    for (folder, file, bytes) in seeds {
        std::fs::create_dir_all(dir.join(folder))?;
        std::fs::write(dir.join(folder).join(file), bytes)?;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dictionary = std::fs::read_to_string(root.join("fuzz/parse_args.dict"))?;
    dictionary.push_str("# Made from the registry (examples/fuzz_seeds.rs).\n");
    for word in words {
        dictionary.push_str(&format!("\"{word}\"\n"));
    }
    std::fs::write(dir.join("parse_args.dict"), dictionary)?;
    Ok(())
}
