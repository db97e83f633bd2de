//! redis-ratelimit: rate limiting as native Redis commands.
//!
//! `algorithms` holds each algorithm as plain Rust with an injected clock;
//! `parse` and `encoding` are plain Rust too; `redis` is the thin layer that
//! talks to the Redis module API.

// The pure modules take every client argument and every stored byte: no
// indexing or slicing that can panic, no `panic!` or `unreachable!` there
// (clippy.toml exempts tests). Arithmetic is left to the overflow checks of
// the debug test build and of the fuzz targets (fuzz/): linting every `+`
// would bury the algorithms' few lines under checked calls.
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod algorithms;
#[cfg(not(test))]
mod alloc;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod encoding;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod error;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod log_throttle;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod parse;
#[cfg(not(test))]
mod redis;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod redis_cell;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod replay;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod top;
#[deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod words;

#[cfg(not(test))]
use redis::init;

// The data types are created by `init`, from the registry.
#[cfg(not(test))]
redis_module::redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (alloc::ModuleAlloc, alloc::ModuleAlloc),
    data_types: [],
    init: init,
}
