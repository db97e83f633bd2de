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
//! Everything that lists algorithms is made from this list through
//! [`registry!`]: the command table and its documentation, the data types,
//! the dispatch on a state's tag, `RL.ALL`'s tiers, `RL.INFO`, the counters,
//! the fuzz targets and `make bench` (scripts/bench reads this file).
//! Adding an algorithm is its file in this folder (the state, its
//! `Algorithm` and its `Syntax`, with the command's documentation) and one
//! line here.

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

/// Implements [`Registered`](super::Registered) for every line of the registry, and checks at
/// compile time that tags and type names are unique and type names nine
/// characters long (what Redis requires).
macro_rules! registered {
    (
        algorithms { $($tag:literal $ty:ident: $module:ident, $name:literal, $type_name:literal;)* }
        others { $($otag:literal $oty:ident: $omodule:ident, $oname:literal, $otype_name:literal;)* }
    ) => {
        $(impl super::Registered for super::$module::$ty {
            const TAG: u8 = $tag;
            const NAME: &'static str = $name;
            const TYPE_NAME: &'static str = $type_name;
        }
        impl super::penalty::Penalizable for super::$module::$ty {
            const PENALIZED_TYPE_NAME: &'static str = {
                const NAME: [u8; 9] = super::penalty::penalized_type_name($type_name);
                match core::str::from_utf8(&NAME) {
                    Ok(name) => name,
                    Err(_) => panic!("a type name is ASCII"),
                }
            };
        })*
        $(impl super::Registered for super::$omodule::$oty {
            const TAG: u8 = $otag;
            const NAME: &'static str = $oname;
            const TYPE_NAME: &'static str = $otype_name;
        })*
        const _: () = check(
            &[$($tag,)* $($otag,)*],
            &[$($type_name,)* $($otype_name,)*],
        );
    };
}
crate::registry!(registered);

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
