//! What the fuzz targets share: every stored type of the registry behind one
//! dispatch, parameters made the way a client makes them (words, read by
//! the real parser), what a decision under some parameters must look like
//! (learnt from a fresh state), the checks every decision and every stored
//! state must pass, and the split of a fuzz input into an encoded state and
//! the bytes that drive the checks.
//!
//! Nothing here is written per algorithm: the lists and the dispatch come
//! from the registry's walk (`redis_ratelimit::algorithms::registry`), so an
//! algorithm added there is fuzzed by every target as it is. The registry's other states (the concurrency
//! limiter's leases) are driven by their own operations, through [`Other`]:
//! a new one without an `Other` impl does not build.
//!
//! Terms: a *reachable* input is one a client, an RDB file or a replication
//! stream can give: parameters `redis_ratelimit::parse` accepts (or a
//! decoder accepts), times within `0..=MAX_TIMESTAMP_MS` (the server's Unix
//! clock, which may step backwards), costs from 1 to `MAX_AMOUNT` (0 for
//! `CL.THROTTLE`'s peek). The targets only make reachable inputs, so every
//! failed assertion is a bug a client could trigger.
#![allow(dead_code)]

use std::any::TypeId;

use libfuzzer_sys::arbitrary::Unstructured;
use redis_ratelimit::algorithms::registry::{self, Listed};
use redis_ratelimit::algorithms::{
    Decision, Field, Mode, State, MAX_AMOUNT, MAX_DURATION_MS, MAX_TIMESTAMP_MS,
};
use redis_ratelimit::encoding::Horizon;
use redis_ratelimit::error::CommandError;
use redis_ratelimit::parse::syntax::{Kind, Word};
use redis_ratelimit::parse::{self, check_args, Syntax};
use redis_ratelimit::redis_cell::ClThrottleArgs;

/// A rate-limiting algorithm as the fuzz targets drive it: any algorithm
/// of the registry (`registry::Listed`), nothing to write for it.
pub trait Fuzzed: Listed {}

impl<A: Listed> Fuzzed for A {}

/// A stored type of the registry that is not an algorithm (its `others`):
/// it has operations of its own, so the targets need to be told how to
/// drive it.
pub trait Other: State + std::fmt::Debug {
    /// A life of one key from `start` (a decoded state) or from no key,
    /// driven by `u`, checking every step.
    fn run(start: Option<Self>, u: Unstructured<'_>);
    /// What a stored state must satisfy (see [`check_storable`]).
    fn check_storable(&self, what: &str) -> Vec<u8>;
}

/// The algorithms' tags, in registry order.
pub const ALGORITHM_TAGS: &[u8] = registry::TAGS;
/// The other states' tags, in registry order.
pub const OTHER_TAGS: &[u8] = registry::OTHER_TAGS;
/// The algorithms' names (their command is `RL.<NAME>`).
pub const ALGORITHM_NAMES: &[&str] = registry::NAMES;

/// Whether `tag` is one of the registry's.
pub fn registered(tag: u8) -> bool {
    ALGORITHM_TAGS.contains(&tag) || OTHER_TAGS.contains(&tag)
}

/// The tag of the `index`-th stored type, algorithms first, wrapping.
pub fn nth_tag(index: usize) -> u8 {
    let all: Vec<u8> = ALGORITHM_TAGS.iter().chain(OTHER_TAGS).copied().collect();
    all[index % all.len()]
}

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

/// Checks a parser's error: one line, `ERR ...` (arity errors are Redis's
/// own text, added by the Redis layer).
pub fn check_error(e: &CommandError) {
    if *e != CommandError::Arity {
        let text = e.text();
        assert!(text.starts_with("ERR "), "{text:?}");
        assert!(!text.contains(['\r', '\n']), "{text:?}");
    }
}

// Words a client could write, by the kind of value `COMMAND DOCS` says a
// parameter takes: mostly valid, biased to everyday values and to the edges
// of what is accepted, sometimes just beyond them.

/// A whole number: small, 2^53-1 and around it, anything accepted, 0 (a
/// GCRA burst), sometimes one too many or any `u64`; now and then with
/// leading zeros. (The first choice, all an exhausted input gets, is valid
/// for every parameter, so that every input runs.)
pub fn integer_word(u: &mut Unstructured<'_>) -> String {
    let n: u64 = match u.choose_index(10).unwrap_or(0) {
        0 => u.int_in_range(1..=10).unwrap_or(1),
        1 | 2 => u.int_in_range(1..=1000).unwrap_or(1),
        3 => MAX_AMOUNT,
        4 => u
            .int_in_range(MAX_AMOUNT - 1000..=MAX_AMOUNT)
            .unwrap_or(MAX_AMOUNT),
        5 | 6 => u.int_in_range(1..=MAX_AMOUNT).unwrap_or(1),
        7 => 0,
        8 => MAX_AMOUNT + 1,
        _ => u.arbitrary().unwrap_or(1),
    };
    if u.ratio(1, 32).unwrap_or(false) {
        format!("00{n}")
    } else {
        n.to_string()
    }
}

/// A decimal (a rate): everyday values with a few digits after the point,
/// the extremes of `f64`, or any positive finite `f64` written in full
/// (Rust writes floats without an exponent, as the parser wants them, and
/// reads them back exactly).
pub fn decimal_word(u: &mut Unstructured<'_>) -> String {
    match u.choose_index(4).unwrap_or(0) {
        0 => {
            let units = u.int_in_range(1u32..=100_000).unwrap_or(1).to_string();
            let scale = u.int_in_range(0usize..=4).unwrap_or(0);
            if scale == 0 {
                units
            } else {
                let padded = format!("{units:0>width$}", width = scale + 1);
                let (whole, fraction) = padded.split_at(padded.len() - scale);
                match u.choose_index(4).unwrap_or(0) {
                    0 if whole == "0" => format!(".{fraction}"),
                    _ => format!("{whole}.{fraction}"),
                }
            }
        }
        1 => [
            5e-324,
            f64::MIN_POSITIVE,
            1e-300,
            1e-9,
            1e12,
            1e300,
            f64::MAX,
        ][u.choose_index(7).unwrap_or(0)]
        .to_string(),
        _ => {
            let r = f64::from_bits(u.arbitrary::<u64>().unwrap_or(0)).abs();
            if r.is_finite() && r > 0.0 {
                r.to_string()
            } else {
                "1".to_string()
            }
        }
    }
}

/// A duration: a number of ms from 1 to 366 days (biased to short ones and
/// the longest), written in one of the units that states it exactly, in
/// any case; sometimes a fraction of a unit, which may round to nothing.
pub fn duration_word(u: &mut Unstructured<'_>) -> String {
    let ms: u64 = match u.choose_index(5).unwrap_or(0) {
        0 => u.int_in_range(1..=2000).unwrap_or(1),
        1 => MAX_DURATION_MS,
        2 => u.int_in_range(1..=86_400_000).unwrap_or(1),
        3 => u.int_in_range(1..=MAX_DURATION_MS).unwrap_or(1),
        _ => {
            let tenths = u.int_in_range(1u64..=100).unwrap_or(1);
            let unit = ["ms", "s", "m", "h", "d", ""][u.choose_index(6).unwrap_or(0)];
            return format!("{}.{}{unit}", tenths / 10, tenths % 10);
        }
    };
    let units: [(u64, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
        (1000, ""),
    ];
    let exact: Vec<(u64, &str)> = units
        .into_iter()
        .filter(|(n, _)| ms.is_multiple_of(*n))
        .collect();
    let word = match u.choose_index(exact.len() + 2).unwrap_or(0) {
        i if i < exact.len() => format!("{}{}", ms / exact[i].0, exact[i].1),
        i if i == exact.len() => format!("{}.{:03}", ms / 1000, ms % 1000),
        _ => format!("{ms}ms"),
    };
    if u.ratio(1, 8).unwrap_or(false) {
        word.to_ascii_uppercase()
    } else {
        word
    }
}

pub fn word_of(kind: Kind, u: &mut Unstructured<'_>) -> String {
    match kind {
        Kind::Integer => integer_word(u),
        Kind::Decimal => decimal_word(u),
        Kind::Duration => duration_word(u),
    }
}

/// The words of a check command after the key: a word for each of the
/// algorithm's parameters, then some of its own options (each at most once,
/// in any order and case).
pub fn arbitrary_words<P: Syntax>(u: &mut Unstructured<'_>) -> Vec<String> {
    let mut words: Vec<String> = P::PARAMS.iter().map(|w| word_of(w.kind, u)).collect();
    let mut options: Vec<_> = P::OPTIONS
        .iter()
        .filter(|_| u.ratio(1, 2).unwrap_or(false))
        .collect();
    if options.len() > 1 && u.ratio(1, 2).unwrap_or(false) {
        options.reverse();
    }
    for option in options {
        let token = if u.ratio(1, 4).unwrap_or(false) {
            option.token.to_ascii_lowercase()
        } else {
            option.token.to_string()
        };
        words.push(token);
        words.push(word_of(option.value.kind, u));
    }
    words
}

/// Parameters a client could send, made as a client makes them: words
/// parsed by the real parser, keeping the first that parses (the others
/// must be refused with a proper error). `None` when none of a few tries
/// parse (the input ran out, mostly).
pub fn arbitrary_params<A: Fuzzed>(u: &mut Unstructured<'_>) -> Option<A::Params> {
    for _ in 0..8 {
        let words = arbitrary_words::<A::Params>(u);
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        match check_args::<A::Params>(&args) {
            Ok((params, _)) => {
                check_params_are_the_words::<A>(params, &args);
                return Some(params);
            }
            Err(e) => {
                assert_ne!(e, CommandError::Arity, "{words:?}: every word was given");
                check_error(&e);
            }
        }
        if u.is_empty() {
            break;
        }
    }
    None
}

/// The value of the field `RL.INFO` shows for the parameter or option
/// `name` (`window` is shown as `window_ms`, `rate` as `rate_per_s`...).
fn shown_as<'f>(fields: &'f [(&'static str, Field)], name: &str) -> Option<&'f Field> {
    fields.iter().find_map(|(field, value)| {
        let named = *field == name
            || field
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('_'));
        named.then_some(value)
    })
}

/// What the words of one parameter say, as `RL.INFO` shows it, checked to
/// be within the range its kind documents.
fn value_of_word(word: &Word, text: &[u8]) -> Field {
    let what = String::from_utf8_lossy(text);
    match word.kind {
        Kind::Integer => {
            let n: u64 = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{}: {what:?} accepted as an integer", word.name));
            assert!(n <= MAX_AMOUNT, "{}: {n} accepted", word.name);
            Field::Int(n as i64)
        }
        Kind::Decimal => {
            let r = parse::rate(text, word.name)
                .unwrap_or_else(|e| panic!("{}: {what:?} accepted, yet {e:?}", word.name));
            assert!(r.is_finite() && r > 0.0, "{}: {r} accepted", word.name);
            Field::Float(r)
        }
        Kind::Duration => {
            let ms = parse::duration_ms(text, word.name)
                .unwrap_or_else(|e| panic!("{}: {what:?} accepted, yet {e:?}", word.name));
            assert!(
                (1..=MAX_DURATION_MS).contains(&ms),
                "{}: {ms} ms accepted",
                word.name
            );
            Field::Int(ms as i64)
        }
    }
}

/// What is accepted is what the words say: a state with the parameters
/// parsed from `args` (`check_args`'s input, with any of the algorithm's own
/// options) shows each parameter and each option given with the value its
/// word holds, within the range of its kind.
pub fn check_params_are_the_words<A: Fuzzed>(params: A::Params, args: &[&[u8]]) {
    let fields = A::fresh(params, 0).describe(0);
    let (words, rest) = args.split_at(A::Params::PARAMS.len());
    for (word, text) in A::Params::PARAMS.iter().zip(words) {
        let Some(shown) = shown_as(&fields, word.name) else {
            panic!(
                "{}: RL.INFO does not show {}: {fields:?}",
                A::NAME,
                word.name
            );
        };
        assert_eq!(
            *shown,
            value_of_word(word, text),
            "{}: {} is not the word given",
            A::NAME,
            word.name
        );
    }
    for option in A::Params::OPTIONS {
        let given = rest
            .iter()
            .position(|w| w.eq_ignore_ascii_case(option.token.as_bytes()))
            .and_then(|i| rest.get(i + 1));
        if let Some(text) = given {
            let Some(shown) = shown_as(&fields, option.value.name) else {
                panic!("{}: RL.INFO does not show {}", A::NAME, option.value.name);
            };
            let value = (option.parse)(text).unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(*shown, Field::Int(value as i64), "{}", option.token);
        }
    }
}

/// What a decision under some parameters must say whatever else happens,
/// and the time over which the parameters play out, learnt from a fresh
/// state: no algorithm needs describing to the targets.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// The `limit` every decision under these parameters reports: what a
    /// fresh key would allow at once.
    pub limit: u64,
    /// How long a fresh key takes to be fresh again after its whole limit
    /// was taken at once at a window boundary (a window, a period, the time
    /// to refill), at least 1 ms: time steps around it reach the edges.
    pub scale_ms: u64,
    /// Whether an allowed request is told a `delay_ms` (the leaky bucket).
    pub delays: bool,
    /// Whether a cost of 0 is reachable: only `CL.THROTTLE`'s peek, on the
    /// algorithm its parameters are for.
    pub zero_cost_peeks: bool,
}

/// The profile of `params`, checking on the way what a fresh key promises:
/// a peek finds the whole limit there, a request of the whole limit is
/// allowed and leaves nothing.
pub fn profile<A: Fuzzed>(params: A::Params) -> Profile {
    // The Unix epoch: every epoch-aligned window starts there.
    let start = 0;
    let (peek, _) = A::check_with(None, params, start, 1, Mode::Peek);
    let limit = peek.limit;
    let what = format!("{} {params:?}, fresh", A::NAME);
    assert!((1..=MAX_AMOUNT).contains(&limit), "{what}: {peek:?}");
    assert!(peek.allowed && peek.remaining == limit, "{what}: {peek:?}");
    let (all, taken) = A::check_with(None, params, start, limit, Mode::Take);
    assert!(
        all.allowed && all.remaining == 0 && all.limit == limit && taken.is_some(),
        "{what}, the whole limit at once: {all:?}"
    );
    let (one, _) = A::check_with(None, params, start, 1, Mode::Take);
    assert_eq!(
        all.delay_ms.is_some(),
        one.delay_ms.is_some(),
        "{what}: {all:?} {one:?}"
    );
    let cl_throttle = |a: &ClThrottleArgs| a.params;
    Profile {
        limit,
        scale_ms: u64::try_from(all.reset_after_ms).unwrap_or(0).max(1),
        delays: one.delay_ms.is_some(),
        zero_cost_peeks: TypeId::of::<A::Params>() == type_id_of_result(cl_throttle),
    }
}

fn type_id_of_result<T: 'static>(_: impl Fn(&ClThrottleArgs) -> T) -> TypeId {
    TypeId::of::<T>()
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

/// A cost a command could carry under `profile`, with the edges.
pub fn cost(u: &mut Unstructured<'_>, profile: &Profile, mode: Mode) -> u64 {
    if profile.zero_cost_peeks && mode == Mode::Peek && u.ratio(1, 8).unwrap_or(false) {
        return 0;
    }
    let limit = profile.limit;
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
pub fn check_decision(d: &Decision, profile: &Profile, cost: u64, what: &str) {
    let limit = profile.limit;
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
    assert_eq!(
        d.delay_ms.is_some(),
        profile.delays && d.allowed,
        "{what}: delay_ms on every allowed request of an algorithm that has one, \
         on nothing else: {d:?}"
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
    let replica = match A::decode(&bytes, Horizon::NONE) {
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

/// The concurrency limiter (`RL.ACQUIRE`/`RL.RELEASE`), which is a
/// [`State`] but not an [`Algorithm`]: driven by its own operations.
pub mod leases {
    use super::*;
    use redis_ratelimit::algorithms::concurrency::{LeaseParams, Leases, MAX_ID_BYTES};
    use redis_ratelimit::algorithms::Field;

    impl Other for Leases {
        fn run(start: Option<Self>, u: Unstructured<'_>) {
            run(start, u);
        }
        fn check_storable(&self, what: &str) -> Vec<u8> {
            check_storable(self, what)
        }
    }

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
    /// `updated_ms`: every lease stored, ended or not (described as of the
    /// earliest time, so none has ended).
    fn described(state: &Leases) -> (Vec<(Vec<u8>, i64)>, i64) {
        let (mut leases, mut updated) = (Vec::new(), 0);
        for (name, field) in state.describe(i64::MIN) {
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
        match Leases::decode(&bytes, Horizon::NONE) {
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
                        // A lease ends no later than the last time a state
                        // carries: one taken at that very millisecond (a
                        // clock no server reaches) has ended as it starts,
                        // and its key is as good as new at once.
                        // (The state's time: a check's `now`, or its own
                        // last update when that is later.)
                        let at_end = described(&state).1 >= MAX_TIMESTAMP_MS;
                        assert!(
                            at_end || state.clone().release(now, &id),
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
                            at_end || state.fresh_at_ms() > now,
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
