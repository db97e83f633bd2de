//! redis-ratelimit: rate limiting as native Redis commands.
//!
//! `algorithms` holds each algorithm as plain Rust with an injected clock;
//! `words` (below the algorithms), `parse` (above them) and `encoding` are
//! plain Rust too; `redis` is the thin layer that talks to the Redis module
//! API, all of its calls in `redis::ffi`. The layers and what each may
//! import: tests/layers.rs.

// Every module takes client arguments or stored bytes: no indexing or
// slicing that can panic, no `panic!` or `unreachable!` anywhere, the Redis
// layer included (clippy.toml exempts tests). Arithmetic is left to the
// overflow checks of the debug test build and of the fuzz targets (fuzz/):
// linting every `+` would bury the algorithms' few lines under checked calls.
#![deny(clippy::indexing_slicing, clippy::panic, clippy::unreachable)]
pub mod algorithms;
pub mod cluster;
pub mod encoding;
pub mod error;
pub mod log_throttle;
pub mod parse;
pub mod policies;
mod redis;
pub mod redis_cell;
pub mod replay;
pub mod top;
#[doc(hidden)]
pub mod typed_keys;
pub mod wait;
pub mod words;

use redis::init;

// The data types are created by `init`, from the registry.
redis_module::redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (redis::ffi::alloc::ModuleAlloc, redis::ffi::alloc::ModuleAlloc),
    data_types: [],
    init: init,
}
