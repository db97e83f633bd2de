//! Everything that calls the Redis module API, behind small safe functions:
//! no other file of the module holds `unsafe`. Raw pointers become typed
//! handles with lifetimes here ([`Ctx`], [`Args`], [`KeyName`]), once, where
//! Redis calls the module.
//!
//! - [`alloc`]: the module's global allocator;
//! - [`api`]: the table of API functions, checked at load time;
//! - [`ctx`]: the running command's context and replies, and the token
//!   each call lends to the keys it opens;
//! - [`args`]: its arguments and key names;
//! - [`block`]: blocked clients and timers;
//! - [`cluster`]: which node of a Redis Cluster serves a key's slot;
//! - [`commands`]: registering and documenting a command;
//! - [`config`]: the module's settings;
//! - [`key`]: a key opened for a command, its value and expiry;
//! - [`main_thread`]: a value only Redis's main thread touches;
//! - [`info`]: the module's section of `INFO`;
//! - [`replicate`]: propagating to replicas and the AOF;
//! - [`server`]: the clock, pauses, events, and Redis's own commands;
//! - [`types`]: the data types' callbacks, and values typed by their Redis type.

pub mod alloc;
pub mod api;
pub mod args;
pub mod block;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod ctx;
pub mod info;
pub mod key;
pub mod main_thread;
pub mod replicate;
pub mod server;
pub mod types;

pub use api::missing_apis;
pub use args::{Args, KeyName, Words};
pub use commands::Command;
pub(crate) use ctx::command;
pub use ctx::{Ctx, Handler, KeyToken, Status};
pub use server::{
    config_get, db_size, detached, info_keyspace, init_detached, now_ms, on_config_change,
    on_flush, on_swap, random_hex, writes_paused,
};
