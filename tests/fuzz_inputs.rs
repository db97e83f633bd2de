//! The fuzz targets (`fuzz/`, `make fuzz`) take their lists of algorithms
//! from the registry; what they start from is data that cannot: the seeds
//! and the dictionary. These tests fail when the registry has a stored type
//! without a seed state, an algorithm without a `parse_args` seed or
//! dictionary words, or a seed state that no longer decodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use redis_ratelimit::algorithms::penalty::Penalized;
use redis_ratelimit::algorithms::{Algorithm, State};
use redis_ratelimit::encoding::Horizon;
use redis_ratelimit::parse::Syntax;

/// A stored type of the registry: its name, and whether bytes decode as it.
struct Stored {
    name: &'static str,
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

fn own_options<A: Algorithm>() -> Vec<&'static str> {
    A::Params::OPTIONS.iter().map(|o| o.token).collect()
}

macro_rules! registered {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($otag:literal $oty:ident: $omodule:ident, $oname:literal, $otype_name:literal;)* }
    ) => {
        fn stored() -> Vec<Stored> {
            vec![
                $(Stored { name: $name, decodes: decodes::<redis_ratelimit::algorithms::$module::$ty> },)*
                $(Stored {
                    name: concat!("penalized ", $name),
                    decodes: decodes::<Penalized<redis_ratelimit::algorithms::$module::$ty>>,
                },)*
                $(Stored { name: $oname, decodes: decodes::<redis_ratelimit::algorithms::$omodule::$oty> },)*
            ]
        }

        fn algorithms() -> Vec<Checked> {
            vec![$(Checked {
                name: $name,
                own_options: own_options::<redis_ratelimit::algorithms::$module::$ty>(),
            },)*]
        }
    };
}
redis_ratelimit::registry!(registered);

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of a seed folder: name and bytes.
fn seeds(folder: &str) -> Vec<(String, Vec<u8>)> {
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
    let dict = std::fs::read_to_string(fuzz_dir().join("parse_args.dict")).unwrap();
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
