//! The one list of what the module stores: every rate-limiting algorithm,
//! then the other states (the concurrency limiter's leases), each named once.
//!
//! A line reads `tag Type: module, "name", "type_name";`:
//! - `tag`, the byte that starts the state's encoding (RDB, AOF,
//!   `RL.SETSTATE`): never reused, never changed;
//! - `Type`, the state in `algorithms::module`;
//! - `name`, what the algorithm is called everywhere else: its command is
//!   `RL.<NAME>`, its word in `RL.ALL` is `NAME` (any case), `RL.INFO` says
//!   `algorithm name`, `INFO ratelimit` counts `ratelimit_name_allowed`/`_denied`;
//! - `type_name`, the Redis data type's name (exactly nine characters).
//!
//! The list is read by two macros only, both of which make what Rust needs
//! one item of per line: `registered` below (the `Registered` impls, each
//! line's place, the penalized type names, the [`Tier`] of `RL.ALL` and
//! the walks) and, in the Redis layer, the data types' static array
//! (`redis::ffi::types`). A column added at the end of every line (`, column`,
//! one token tree: wrap anything longer in parentheses) is an edit here and
//! in whichever of the two uses it: their line patterns end with
//! `$(, $more:tt)*`, which takes the columns they do not name and ignores
//! them.
//!
//! Everything else that goes over the algorithms is generic code over one
//! dispatch: [`Each`] (with [`EachState`] for the other states, one method
//! each) through the walks [`each_algorithm`], [`each_state`],
//! [`find_algorithm`], [`find_state`], [`on_tag`], [`on_algorithm_tag`] and
//! [`on_name`]; and [`OnTier`] through [`Tier::visit`], for a tier's
//! algorithm with its parameters. Every algorithm of the list is a
//! [`Listed`] type, and the layers above implement what they need of it
//! generically for every `Listed` type (its Redis data type, its counter,
//! its check command), so that an algorithm needs no item of its own
//! anywhere else: the command table, the counters, `RL.ALL`, the tests,
//! fuzz targets and their seeds, the accuracy study, benches and `make
//! bench` all follow the list, with [`Algorithm::limit_of`](super::Algorithm::limit_of)
//! for parameters. Adding an algorithm is its file in this folder (the
//! state, its `Algorithm` and its `Syntax`, with the command's
//! documentation) and one line here.

/// Calls the macro `$then` with the registry: `algorithms { lines }` then
/// `others { lines }`, each line as described in the module documentation.
#[macro_export]
macro_rules! registry {
    ($then:ident) => {
        $then! {
            algorithms {
                1 TokenBucket: token_bucket, "tokenbucket", "rl_tokbkt";
                2 SlidingCounter: sliding_counter, "slidingcounter", "rl_slcntr";
                3 FixedWindow: fixed_window, "fixedwindow", "rl_fixwin";
                4 SlidingLog: sliding_log, "slidinglog", "rl_slolog";
                5 LeakyBucket: leaky_bucket, "leakybucket", "rl_leakyb";
                6 Gcra: gcra, "gcra", "rl_gcrast";
            }
            others {
                7 Leases: concurrency, "concurrency", "rl_leases";
            }
        }
    };
}

/// Everything that needs one item per line of the registry, made here and
/// nowhere else: the [`Registered`](super::Registered) impls (and
/// [`Line`], the line's place), each algorithm's penalized type name, the
/// [`Tier`] of `RL.ALL` with [`IntoTier`] for each algorithm's parameters,
/// and the walks (over all, by tag, by name, over a tier). A compile-time
/// check that tags and type names are unique and type names nine characters
/// long (what Redis requires). Everything else that goes over the
/// algorithms is generic code over [`Each`], [`EachState`] and [`OnTier`].
macro_rules! registered {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal $(, $more:tt)*;)* }
        others { $($otag:literal $oty:ident: $omodule:ident, $oname:literal, $otype_name:literal $(, $omore:tt)*;)* }
    ) => {
        $(impl super::Registered for super::$module::$ty {
            const TAG: u8 = $tag;
            const NAME: &'static str = $name;
            const TYPE_NAME: &'static str = $type_name;
        }
        impl Line for super::$module::$ty {
            const LINE: usize = line_of($tag);
        }
        impl super::penalty::Penalizable for super::$module::$ty {
            const PENALIZED_TYPE_NAME: &'static str = {
                const NAME: [u8; 9] = super::penalty::penalized_type_name($type_name);
                match core::str::from_utf8(&NAME) {
                    Ok(name) => name,
                    Err(_) => panic!("a type name is ASCII"),
                }
            };
        }
        impl IntoTier for <super::$module::$ty as super::Algorithm>::Params {
            type Algorithm = super::$module::$ty;
            #[inline]
            fn into_tier(self) -> Tier {
                Tier::$ty(self)
            }
            #[inline]
            fn of_tier(tier: Tier) -> Option<Self> {
                match tier {
                    Tier::$ty(params) => Some(params),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        })*
        $(impl super::Registered for super::$omodule::$oty {
            const TAG: u8 = $otag;
            const NAME: &'static str = $oname;
            const TYPE_NAME: &'static str = $otype_name;
        }
        impl Line for super::$omodule::$oty {
            const LINE: usize = line_of($otag);
        })*
        const _: () = check(
            &[$($tag,)* $($otag,)*],
            &[$($type_name,)* $($otype_name,)*],
        );

        /// One tier of `RL.ALL` (and of a policy, `RL.PEEK`, `RL.REFUND`, a
        /// single check): an algorithm and its parameters.
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum Tier {
            $($ty(<super::$module::$ty as super::Algorithm>::Params),)*
        }

        impl Tier {
            /// Calls `op` with the tier's algorithm and parameters: the one
            /// dispatch on a tier.
            #[inline]
            pub fn visit<O: OnTier>(self, op: O) -> O::Out {
                match self {
                    $(Tier::$ty(params) => op.on::<super::$module::$ty>(params),)*
                }
            }
        }

        /// The algorithms' names, in registry order (their command is
        /// `RL.<NAME>`, their word in `RL.ALL` is `<NAME>`).
        pub const NAMES: &[&str] = &[$($name),*];
        /// The algorithms' tags, in registry order.
        pub const TAGS: &[u8] = &[$($tag),*];
        /// The other states' tags, in registry order.
        pub const OTHER_TAGS: &[u8] = &[$($otag),*];
        /// The other states' names, in registry order.
        pub const OTHER_NAMES: &[&str] = &[$($oname),*];

        /// `each` with every algorithm, in registry order.
        pub fn each_algorithm<E: Each>(each: &mut E) -> Vec<E::Out> {
            vec![$(each.algorithm::<super::$module::$ty>()),*]
        }

        /// `each` with every algorithm in registry order, until one answers.
        #[inline]
        pub fn find_algorithm<R, E: Each<Out = Option<R>>>(each: &mut E) -> Option<R> {
            $(if let Some(found) = each.algorithm::<super::$module::$ty>() {
                return Some(found);
            })*
            None
        }

        /// What [`EachState`] does besides [`Each`]: one method for each
        /// other state of the registry (named by its module), which has
        /// operations of its own, so code going over every stored type
        /// says what it does with each.
        pub trait EachState: Each {
            $(#[doc = concat!("`", stringify!($oty), "`, the ", $oname, " state.")]
            fn $omodule(&mut self) -> Self::Out;)*
        }

        /// `each` with every stored type: the algorithms, then the others.
        pub fn each_state<E: EachState>(each: &mut E) -> Vec<E::Out> {
            let mut out = each_algorithm(each);
            $(out.push(each.$omodule());)*
            out
        }

        /// `each` with every stored type, algorithms first, until one answers.
        pub fn find_state<R, E: EachState<Out = Option<R>>>(each: &mut E) -> Option<R> {
            if let Some(found) = find_algorithm(each) {
                return Some(found);
            }
            $(if let Some(found) = each.$omodule() {
                return Some(found);
            })*
            None
        }

        /// `each` with the stored type whose tag is `tag` (how a stored
        /// state is dispatched); `None` for a tag no type has.
        #[inline]
        pub fn on_tag<E: EachState>(tag: u8, each: &mut E) -> Option<E::Out> {
            match tag {
                $($tag => Some(each.algorithm::<super::$module::$ty>()),)*
                $($otag => Some(each.$omodule()),)*
                _ => None,
            }
        }

        /// `each` with the algorithm whose tag is `tag`; `None` for a tag no
        /// algorithm has (the other states' included).
        #[inline]
        pub fn on_algorithm_tag<E: Each>(tag: u8, each: &mut E) -> Option<E::Out> {
            match tag {
                $($tag => Some(each.algorithm::<super::$module::$ty>()),)*
                _ => None,
            }
        }

        /// `each` with the algorithm named `name` (any case); `None` for a
        /// name no algorithm has.
        pub fn on_name<E: Each>(name: impl AsRef<[u8]>, each: &mut E) -> Option<E::Out> {
            let name = name.as_ref();
            $(if name.eq_ignore_ascii_case($name.as_bytes()) {
                return Some(each.algorithm::<super::$module::$ty>());
            })*
            None
        }

        /// How many algorithms the registry has.
        pub const ALGORITHMS: usize = TAGS.len();
        /// How many lines the registry has: algorithms and other states.
        pub const LINES: usize = ALL_TAGS.len();
        /// Every tag, algorithms first, in registry order (see [`Line`]).
        const ALL_TAGS: &[u8] = &[$($tag,)* $($otag,)*];
    };
}
crate::registry!(registered);

/// A line of the registry: its place, counting from 0, algorithms first
/// (an algorithm's is below [`ALGORITHMS`]), so that what the layers above
/// keep one of per line (a Redis data type, a counter) can be an array
/// indexed by it rather than an item per type.
pub trait Line {
    const LINE: usize;
}

/// The place of the line tagged `tag` (see [`Line`]).
#[allow(clippy::indexing_slicing)]
const fn line_of(tag: u8) -> usize {
    let mut i = 0;
    while ALL_TAGS[i] != tag {
        i += 1;
    }
    i
}

/// Something done with one tier's algorithm and parameters, whichever the
/// algorithm (see [`Tier::visit`]).
pub trait OnTier {
    type Out;
    fn on<A: Listed>(self, params: A::Params) -> Self::Out;
}

/// The parameters of an algorithm of the registry: the algorithm they are
/// for, and them as its tier.
pub trait IntoTier: Copy + 'static {
    type Algorithm: Listed<Params = Self>;
    fn into_tier(self) -> Tier;
    /// The parameters of a tier of this algorithm; `None` for another's.
    fn of_tier(tier: Tier) -> Option<Self>;
}

/// Fails the build when two lines share a tag or a type name, a tag is not
/// below the penalty's (`penalty::PENALTY_TAG`), or a type name is not the
/// nine characters Redis requires. Only ever evaluated at compile
/// time (in a `const _`), so its indexing and asserts stop the build, never
/// the server.
#[allow(clippy::indexing_slicing)]
pub(crate) const fn check(tags: &[u8], type_names: &[&str]) {
    let mut i = 0;
    while i < tags.len() {
        assert!(
            tags[i] < super::penalty::PENALTY_TAG,
            "a registry tag is below the penalty's"
        );
        let mut j = i + 1;
        while j < tags.len() {
            assert!(tags[i] != tags[j], "two registry lines share a tag");
            j += 1;
        }
        i += 1;
    }
    let mut i = 0;
    while i < type_names.len() {
        assert!(
            type_names[i].len() == 9,
            "a Redis type name must be nine characters"
        );
        let mut j = i + 1;
        while j < type_names.len() {
            assert!(
                !same(type_names[i].as_bytes(), type_names[j].as_bytes()),
                "two registry lines share a type name"
            );
            j += 1;
        }
        i += 1;
    }
}

#[allow(clippy::indexing_slicing)]
const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// What every algorithm of the registry is, so that code generic over them
/// (tests, fuzz targets, the accuracy study, benches) can ask it of any.
pub trait Listed:
    super::Algorithm<Params: IntoTier>
    + Line
    + super::penalty::Penalizable
    + PartialEq
    + std::fmt::Debug
    + 'static
{
}

impl<A> Listed for A where
    A: super::Algorithm<Params: IntoTier>
        + Line
        + super::penalty::Penalizable
        + PartialEq
        + std::fmt::Debug
        + 'static
{
}

/// Something to do with an algorithm of the registry, whichever it is: the
/// one way to go over the registry (see the walks); [`EachState`] adds the
/// other states, [`OnTier`] is the same for a tier, with its parameters.
pub trait Each {
    type Out;
    fn algorithm<A: Listed>(&mut self) -> Self::Out;
}

#[cfg(test)]
mod tests {
    use super::super::Mode;
    use super::*;
    use crate::parse::Syntax;

    /// Checks [`Algorithm::limit_of`]'s promise for one algorithm.
    struct LimitOf;

    impl Each for LimitOf {
        type Out = ();
        fn algorithm<A: Listed>(&mut self) {
            for (limit, window_ms) in [(1, 1), (5, 3_600_000), (10, 10_000), (60, 60_000)] {
                let what = format!("{} limit_of({limit}, {window_ms})", A::NAME);
                let params = A::limit_of(limit, window_ms);
                assert_eq!(params.check(), Ok(()), "{what}");
                let words = params.to_words();
                let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
                let parsed = crate::parse::check_args::<A::Params>(&args).map(|(p, _)| p);
                assert_eq!(parsed, Ok(params), "{what}: {words:?}");
                let now = 1_700_000_000_000;
                let (all, state) = A::check_with(None, params, now, limit, Mode::Take);
                assert!(all.allowed && all.limit == limit, "{what}: {all:?}");
                let Some(mut state) = state else {
                    panic!("{what}: nothing taken")
                };
                let denied = state.check(now, 1, Mode::Take);
                assert!(!denied.allowed, "{what}: {denied:?}");
                let wait = i64::try_from(window_ms + window_ms / 3 + 1).unwrap_or(i64::MAX);
                assert!(
                    (1..=wait).contains(&denied.retry_after_ms),
                    "{what}: {denied:?}"
                );
                let later = state.check(now + wait, limit, Mode::Peek);
                assert!(later.allowed, "{what}: all back after {wait} ms: {later:?}");
            }
        }
    }

    #[test]
    fn limit_of_gives_every_algorithm_that_limit_at_once_and_back_within_the_window() {
        assert_eq!(each_algorithm(&mut LimitOf).len(), NAMES.len());
    }

    struct Name;

    impl Each for Name {
        type Out = &'static str;
        fn algorithm<A: Listed>(&mut self) -> &'static str {
            A::NAME
        }
    }

    #[test]
    fn the_walks_go_over_the_registry_in_its_order() {
        assert_eq!(each_algorithm(&mut Name), NAMES);
        for (name, tag) in NAMES.iter().zip(TAGS) {
            assert_eq!(on_name(name.to_ascii_uppercase(), &mut Name), Some(*name));
            assert_eq!(on_tag(*tag, &mut Name), Some(*name));
        }
        assert_eq!(on_name("bogus", &mut Name), None);
        assert_eq!(on_tag(0, &mut Name), None);
    }

    impl EachState for Name {
        fn concurrency(&mut self) -> &'static str {
            <super::super::concurrency::Leases as super::super::Registered>::NAME
        }
    }
}
