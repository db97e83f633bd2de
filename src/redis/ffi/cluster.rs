//! The Redis Cluster this server may be a node of: which node serves a
//! key's slot now, as this node sees it, and what a waiter whose keys are
//! not served here is answered ([`redirect_for`]; the rules, in plain Rust,
//! are in `crate::cluster`).
//!
//! Redis 7.0 gives modules no way to ask who serves a slot (nor, before
//! 7.2, a key's slot), so this reads what `CLUSTER NODES` tells a client,
//! the same text on Redis 7.0 and 8.2 and on Valkey 8.1. That costs running
//! a command and parsing its reply, so it is for rare paths (a waited key
//! gone); outside a cluster it costs one flag read.

use std::ffi::c_int;

use redis_module::raw;

use super::api::rm;
use super::args::KeyName;
use super::ctx::Ctx;
use super::server::CallReply;
use crate::cluster::{key_slot, owner_in, redirect};
use crate::error::CommandError;

pub use crate::cluster::SlotOwner;

/// Whether this server runs as a node of a Redis Cluster.
pub fn in_cluster(ctx: Ctx<'_>) -> bool {
    ctx.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0
}

/// Whether `key` exists in the context's selected database (its LRU and
/// the server's hit and miss counts untouched).
pub fn key_exists(ctx: Ctx<'_>, key: KeyName<'_>) -> bool {
    // SAFETY: a live context; `key` is a live string object.
    unsafe { rm!(RedisModule_KeyExists)(ctx.raw(), key.raw()) != 0 }
}

/// Which node serves `key`'s slot now. In a cluster it runs `CLUSTER
/// NODES`: for rare paths only.
pub fn slot_owner(ctx: Ctx<'_>, key: &[u8]) -> SlotOwner {
    if !in_cluster(ctx) {
        return SlotOwner::NotCluster;
    }
    let slot = key_slot(key);
    match cluster_nodes(ctx) {
        Some(text) => owner_in(&String::from_utf8_lossy(&text), slot),
        None => SlotOwner::Unknown { slot },
    }
}

/// What a waiter on `keys` (of one slot, in the context's selected
/// database) is answered instead of being decided on this node: `ASK` or
/// `MOVED` to the node that serves them now, or `TRYAGAIN` / `CLUSTERDOWN`
/// (`crate::cluster::redirect` says when); `None` when it is decided here.
///
/// Outside a cluster it reads one flag. In a cluster it checks that the
/// keys exist, and only when one is missing reads the cluster's layout: a
/// node that holds a key serves its slot (Redis refuses to give a slot away
/// while it holds keys of it, and deletes them when it learns the slot went
/// elsewhere), and a key is only ever missing on the node that was giving
/// it up once `MIGRATE` moved it.
pub fn redirect_for(ctx: Ctx<'_>, keys: &[KeyName<'_>]) -> Option<CommandError> {
    if !in_cluster(ctx) {
        return None;
    }
    let missing = keys.iter().filter(|key| !key_exists(ctx, **key)).count();
    if missing == 0 {
        return None;
    }
    let owner = slot_owner(ctx, keys.first()?.bytes());
    redirect(&owner, missing == keys.len())
}

/// `CLUSTER NODES`, as Redis writes it.
fn cluster_nodes(ctx: Ctx<'_>) -> Option<Vec<u8>> {
    // SAFETY: a live context; the format "c" takes one C string.
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.raw(),
            c"CLUSTER".as_ptr(),
            c"c".as_ptr(),
            c"NODES".as_ptr(),
        )
    };
    CallReply::new(reply).text(None)
}
