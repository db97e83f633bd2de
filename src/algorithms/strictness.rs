//! A state's decoder (RDB, `RL.SETSTATE`, a replica's sync) accepts exactly
//! the parameters its command's parser gives: a state a client cannot create
//! with a command cannot be loaded either. For every algorithm of the
//! registry, both ways:
//! - any state that decodes carries parameters that pass `Syntax::check`
//!   and that the parser reads back, unchanged, from `Syntax::to_words`;
//! - any parameters the parser gives make a state that decodes.

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::registry::{each_algorithm, Each, Listed};
use super::{Algorithm, State};
use crate::encoding::Horizon;
use crate::parse::check_args;
use crate::words::syntax::{Kind, Syntax};

const T0: i64 = 1_700_000_000_000;

/// Words a client might send for a value of `kind`: in range, at the
/// edges, and just beyond them.
fn word(kind: Kind) -> BoxedStrategy<String> {
    match kind {
        Kind::Integer => prop_oneof![
            (0u64..20).prop_map(|n| n.to_string()),
            Just("9007199254740990".to_string()),
            Just("9007199254740991".to_string()),
            Just("9007199254740992".to_string()),
            Just("1000000".to_string()),
            Just("1000001".to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
        ]
        .boxed(),
        Kind::Decimal => prop_oneof![
            Just("0".to_string()),
            Just("0.5".to_string()),
            Just("1000".to_string()),
            Just("0.000001".to_string()),
            (1u64..1_000_000).prop_map(|n| format!("0.{n:06}")),
            any::<u64>().prop_map(|n| n.to_string()),
        ]
        .boxed(),
        Kind::Duration => prop_oneof![
            Just("0".to_string()),
            Just("1ms".to_string()),
            Just("0.4ms".to_string()),
            Just("366d".to_string()),
            Just("367d".to_string()),
            (1u64..100_000).prop_map(|n| format!("{n}ms")),
            (1u64..1000).prop_map(|n| format!("{n}s")),
        ]
        .boxed(),
    }
}

/// The words of a check command after the key: a word for each parameter,
/// then each of the algorithm's own options, with a value, or not given.
fn words<P: Syntax>() -> BoxedStrategy<Vec<String>> {
    let params: Vec<_> = P::PARAMS.iter().map(|w| word(w.kind)).collect();
    let options: Vec<_> = P::OPTIONS
        .iter()
        .map(|o| {
            let token = o.token.to_string();
            proptest::option::of(word(o.value.kind)).prop_map(move |value| match value {
                Some(value) => vec![token.clone(), value],
                None => Vec::new(),
            })
        })
        .collect();
    (params, options)
        .prop_map(|(mut words, options)| {
            words.extend(options.into_iter().flatten());
            words
        })
        .boxed()
}

fn parse<P: Syntax>(words: &[String]) -> Option<P> {
    let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    check_args::<P>(&words).ok().map(|(params, _)| params)
}

/// The encoding of a fresh state of `A` with its example's parameters.
fn example<A: Algorithm>() -> Vec<u8> {
    let words: Vec<String> = A::Params::EXAMPLE.iter().map(|w| w.to_string()).collect();
    let params = parse::<A::Params>(&words).unwrap_or_else(|| panic!("{}'s example", A::NAME));
    let mut out = Vec::new();
    A::fresh(params, T0).encode(&mut out);
    out
}

fn decoded_parameters_parse<A: Algorithm>(mutations: &[(usize, u8)]) -> Result<(), TestCaseError> {
    let mut bytes = example::<A>();
    for &(at, byte) in mutations {
        if let Some(b) = bytes.get_mut(1 + at) {
            *b = byte;
        }
    }
    if let Ok(state) = A::decode(&bytes, Horizon::NONE) {
        let params = state.params();
        prop_assert_eq!(params.check(), Ok(()), "{}", A::NAME);
        prop_assert_eq!(
            parse::<A::Params>(&params.to_words()),
            Some(params),
            "{}",
            A::NAME
        );
    }
    Ok(())
}

fn parsed_parameters_decode<A: Algorithm>(words: &[String]) -> Result<(), TestCaseError> {
    if let Some(params) = parse::<A::Params>(words) {
        prop_assert_eq!(params.check(), Ok(()), "{} {:?}", A::NAME, words);
        let mut bytes = Vec::new();
        A::fresh(params, T0).encode(&mut bytes);
        let decoded = A::decode(&bytes, Horizon::NONE).map(|s| s.params());
        prop_assert_eq!(decoded, Ok(params), "{} {:?}", A::NAME, words);
    }
    Ok(())
}

/// Both properties, for one algorithm: each run as `proptest!` runs a
/// test (its default configuration, so as many cases), the failure naming
/// the algorithm and the minimal input.
struct Strict;

impl Each for Strict {
    type Out = ();
    fn algorithm<A: Listed>(&mut self) {
        let mutations = proptest::collection::vec((0usize..48, any::<u8>()), 1..5);
        if let Err(e) = TestRunner::default().run(&mutations, |m| decoded_parameters_parse::<A>(&m))
        {
            panic!(
                "{}: a state decodes only with parameters its command accepts: {e}",
                A::NAME
            );
        }
        if let Err(e) = TestRunner::default().run(&words::<A::Params>(), |words| {
            parsed_parameters_decode::<A>(&words)
        }) {
            panic!(
                "{}: parameters its command accepts make a state that decodes: {e}",
                A::NAME
            );
        }
    }
}

#[test]
fn every_algorithm_decodes_exactly_the_parameters_its_command_accepts() {
    assert_eq!(
        each_algorithm(&mut Strict).len(),
        super::registry::NAMES.len()
    );
}

/// Regression (issue "strict states"): `RL.SETSTATE` took a GCRA state of
/// 2^53-1 requests per millisecond, which `RL.GCRA` refuses.
#[test]
fn a_gcra_state_faster_than_one_request_a_nanosecond_is_refused() {
    use super::gcra::{Gcra, GcraParams};
    let params = GcraParams {
        burst: 0,
        count: (1 << 53) - 1,
        period_ms: 1,
    };
    let mut bytes = Vec::new();
    Gcra::fresh(params, T0).encode(&mut bytes);
    assert!(Gcra::decode(&bytes, Horizon::NONE).is_err());
    let ok = GcraParams {
        count: 1_000_000,
        ..params
    };
    let mut bytes = Vec::new();
    Gcra::fresh(ok, T0).encode(&mut bytes);
    assert!(Gcra::decode(&bytes, Horizon::NONE).is_ok());
}
