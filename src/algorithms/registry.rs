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
