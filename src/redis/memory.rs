//! The maxmemory rule of the check commands. They are not flagged
//! `deny-oom`, because most requests need no new memory (peeks, denials,
//! updates of a state in place) and an application at `maxmemory` still
//! needs its decisions. A request that would create a key or grow its state
//! is refused exactly when Redis would refuse a write of its own: used
//! memory is over `maxmemory` and nothing can be evicted (the policy is
//! `noeviction`, or no key is a candidate: none at all for `allkeys-*`,
//! none with an expiry for `volatile-*`). While Redis can evict, it ran its
//! eviction before this command (as before every command), and the little
//! this command's own handles add on top is evicted before the next one.

use std::cell::Cell;

use super::ffi::{config_get, db_size, info_keyspace, on_config_change, Ctx};

/// Which keys `maxmemory-policy` may evict.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    NoEviction,
    AllKeys,
    Volatile,
}

thread_local! {
    /// The policy as last read; `None` until read, and after any `CONFIG SET`.
    static POLICY: Cell<Option<Policy>> = const { Cell::new(None) };
    /// Whether the server tells us of configuration changes, so that the
    /// policy read may be kept until one comes.
    static KEEP_POLICY: Cell<bool> = const { Cell::new(false) };
}

/// Forgets the policy on every configuration change (at load time). Without
/// that event, the policy is read every time it is needed.
pub fn init(ctx: Ctx<'_>) {
    let follows = on_config_change(ctx, || POLICY.with(|p| p.set(None)));
    KEEP_POLICY.with(|keep| keep.set(follows));
}

fn policy(ctx: Ctx<'_>) -> Policy {
    if let Some(policy) = POLICY.with(Cell::get) {
        return policy;
    }
    let policy = match config_get(ctx, c"maxmemory-policy").as_deref() {
        Some(name) if name.starts_with(b"allkeys-") => Policy::AllKeys,
        Some(name) if name.starts_with(b"volatile-") => Policy::Volatile,
        _ => Policy::NoEviction,
    };
    if KEEP_POLICY.with(Cell::get) {
        POLICY.with(|p| p.set(Some(policy)));
    }
    policy
}

/// Whether a write that needs memory must be refused now. Inlined always:
/// on every check that grows a state, which is nearly never near the limit.
#[inline(always)]
pub fn refuses_growth(ctx: Ctx<'_>) -> bool {
    ctx.out_of_memory() && refuses_growth_when_full(ctx)
}

/// [`refuses_growth`] once Redis says it is out of memory: whether its
/// policy can free anything.
#[cold]
#[inline(never)]
fn refuses_growth_when_full(ctx: Ctx<'_>) -> bool {
    match policy(ctx) {
        Policy::NoEviction => true,
        Policy::AllKeys => db_size(ctx) == 0 && candidates(ctx, b"keys=") == 0,
        Policy::Volatile => candidates(ctx, b"expires=") == 0,
    }
}

/// The sum of `field` (`keys=` or `expires=`) over the databases of
/// `INFO keyspace` (lines like `db0:keys=3,expires=1,avg_ttl=0`).
fn candidates(ctx: Ctx<'_>, field: &[u8]) -> u64 {
    info_keyspace(ctx).map_or(0, |text| count_of(&text, field))
}

fn count_of(info: &[u8], field: &[u8]) -> u64 {
    info.split(|&b| b == b'\n')
        .filter(|line| line.starts_with(b"db"))
        .flat_map(|line| line.split(|&b| b == b',' || b == b':'))
        .filter_map(|part| part.strip_prefix(field))
        .filter_map(|n| std::str::from_utf8(n).ok()?.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::count_of;

    #[test]
    fn keys_and_expires_are_summed_over_every_database() {
        let info =
            b"# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=0\r\ndb5:keys=4,expires=0,avg_ttl=0\r\n";
        assert_eq!(count_of(info, b"keys="), 7);
        assert_eq!(count_of(info, b"expires="), 1);
        assert_eq!(count_of(b"# Keyspace\r\n", b"keys="), 0);
    }
}
