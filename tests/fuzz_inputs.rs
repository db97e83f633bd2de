//! The fuzz targets (`fuzz/`, `make fuzz`) take their lists of algorithms
//! from the registry, and so do their seeds and dictionary words of each
//! algorithm (`examples/fuzz_seeds.rs`, from its `Syntax::EXAMPLE`); the
//! rest is written by hand (`fuzz/seeds/`, `fuzz/parse_args.dict`). These
//! tests fail when the registry has a stored type without a seed state, an
//! algorithm without a `parse_args` seed or dictionary words, or a seed
//! state that no longer decodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[allow(dead_code)]
#[path = "../examples/fuzz_seeds.rs"]
mod fuzz_seeds;

use redis_ratelimit::algorithms::concurrency::Leases;
use redis_ratelimit::algorithms::penalty::Penalized;
use redis_ratelimit::algorithms::registry::{each_state, Each, EachState, Listed};
use redis_ratelimit::algorithms::State;
use redis_ratelimit::encoding::Horizon;
use redis_ratelimit::parse::Syntax;

/// A stored type of the registry: its name, and whether bytes decode as it.
struct Stored {
    name: String,
    decodes: fn(&[u8]) -> bool,
}

/// An algorithm of the registry: its name and its own options' tokens.
struct Checked {
    name: &'static str,
    own_options: Vec<&'static str>,
}

fn decodes<S: State>(bytes: &[u8]) -> bool {
    S::decode(bytes, Horizon::NONE).is_ok()
}

/// Reads a stored type of the registry, or an algorithm with its options.
struct Read;

impl Each for Read {
    type Out = (Stored, Option<Stored>, Option<Checked>);
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        (
            Stored {
                name: A::NAME.to_string(),
                decodes: decodes::<A>,
            },
            Some(Stored {
                name: format!("penalized {}", A::NAME),
                decodes: decodes::<Penalized<A>>,
            }),
            Some(Checked {
                name: A::NAME,
                own_options: A::Params::OPTIONS.iter().map(|o| o.token).collect(),
            }),
        )
    }
}

impl EachState for Read {
    fn concurrency(&mut self) -> Self::Out {
        (other::<Leases>(), None, None)
    }
}

/// A stored type that is not an algorithm.
fn other<S: State>() -> Stored {
    Stored {
        name: S::NAME.to_string(),
        decodes: decodes::<S>,
    }
}

/// Every stored type: each algorithm, plain and penalized, and the others.
fn stored() -> Vec<Stored> {
    let mut stored = vec![];
    for (plain, penalized, _) in each_state(&mut Read) {
        stored.push(plain);
        stored.extend(penalized);
    }
    stored
}

fn algorithms() -> Vec<Checked> {
    each_state(&mut Read)
        .into_iter()
        .filter_map(|(_, _, checked)| checked)
        .collect()
}

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The seeds of a target's folder, name and bytes: those in
/// `fuzz/seeds/<folder>`, then those made from the registry.
fn seeds(folder: &str) -> Vec<(String, Vec<u8>)> {
    let mut seeds = written_seeds(folder);
    for (into, file, bytes) in fuzz_seeds::generated().0 {
        if into == folder {
            seeds.push((format!("{file} (made)"), bytes));
        }
    }
    seeds
}

/// The files of `fuzz/seeds/<folder>`: name and bytes.
fn written_seeds(folder: &str) -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> =
        std::fs::read_dir(fuzz_dir().join("seeds").join(folder))
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(entry.path()).unwrap())
            })
            .collect();
    seeds.sort();
    seeds
}

/// The state of a `decode_state`/`check_sequence` input: `[len: u16 LE]
/// [state: len bytes][rest]` (the fuzz targets' `split_state`).
fn state_of(input: &[u8]) -> &[u8] {
    let len = usize::from(u16::from_le_bytes([input[0], input[1]]));
    &input[2..2 + len]
}

#[test]
fn every_stored_type_has_a_seed_state_and_every_seed_state_decodes() {
    let seeds = seeds("states");
    for (file, input) in &seeds {
        let state = state_of(input);
        assert!(
            stored().iter().any(|s| (s.decodes)(state)),
            "fuzz/seeds/states/{file} decodes as no stored type"
        );
    }
    for s in stored() {
        assert!(
            seeds.iter().any(|(_, input)| (s.decodes)(state_of(input))),
            "fuzz/seeds/states has no state of {} (one valid state, then 48 bytes \
             to drive checks: see fuzz/README.md)",
            s.name
        );
    }
}

#[test]
fn every_parser_of_parse_args_has_a_seed() {
    let seeds = seeds("parse_args");
    let firsts: Vec<&[u8]> = seeds
        .iter()
        .map(|(_, input)| input.split(|&b| b == b'\n').next().unwrap())
        .collect();
    let mut parsers = vec![];
    for a in algorithms() {
        parsers.push(a.name.to_string());
        if !a.own_options.is_empty() {
            parsers.push(format!("options-{}", a.name));
        }
    }
    parsers.extend(["cl.throttle", "options", "all", "acquire"].map(String::from));
    for parser in &parsers {
        assert!(
            firsts.contains(&parser.as_bytes()),
            "fuzz/seeds/parse_args has no seed whose first line is {parser}"
        );
    }
    for (file, input) in &seeds {
        let first = input.split(|&b| b == b'\n').next().unwrap();
        assert!(
            parsers.iter().any(|p| p.as_bytes() == first),
            "fuzz/seeds/parse_args/{file} names no parser"
        );
    }
}

#[test]
fn the_parse_args_dictionary_has_every_algorithm_and_option_word() {
    let mut dict = std::fs::read_to_string(fuzz_dir().join("parse_args.dict")).unwrap();
    for word in fuzz_seeds::generated().1 {
        dict.push_str(&format!("\"{word}\"\n"));
    }
    let entries: Vec<&str> = dict
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    for a in algorithms() {
        let mut words = vec![a.name.to_string(), a.name.to_ascii_uppercase()];
        if !a.own_options.is_empty() {
            words.push(format!("options-{}", a.name));
        }
        for token in &a.own_options {
            words.push(token.to_string());
            words.push(token.to_ascii_lowercase());
        }
        for word in words {
            let entry = format!("\"{word}\"");
            assert!(
                entries.contains(&entry.as_str()),
                "fuzz/parse_args.dict lacks {entry}"
            );
        }
    }
}
