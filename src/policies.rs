//! Named policies, held in the module's memory (not in keys): each a name,
//! a version that only increases, its current definition and the last few
//! before it. Plain Rust: the commands (`crate::redis::commands::policy`)
//! read and change the one [`STORE`], the RDB's module aux data saves and
//! loads it through [`Store::encode`] and [`Store::decode`], and replicas
//! and AOF files receive each change as its effect ([`Store::load`]).
//!
//! A check takes the policy's definition as an `Arc`, so a change made
//! while nothing else runs (Redis's one thread) replaces a whole
//! definition: no check can see half of one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::algorithms::penalty::Stamp;
use crate::encoding::{ensure, put_u32, put_u64, DecodeError, Reader};
use crate::error::{shown, CommandError};
use crate::parse::policy::{definition, name, Definition};

/// How many keys hold a state stamped with each policy (by name hash):
/// one more for each stamped value given to Redis (stored, loaded from an
/// RDB file or a `RESTORE`, copied), one less for each freed, moved when a
/// value is restamped to another policy. Redis frees values in background
/// threads too (`FLUSHALL ASYNC`, lazy free): hence a lock of its own, not
/// the store's, taken only where a stamped value is made or freed.
static KEY_COUNTS: Mutex<BTreeMap<u64, i64>> = Mutex::new(BTreeMap::new());

/// Counts `delta` keys for the policy whose name hashes to `hash` (none
/// for 0).
pub fn count_keys(hash: u64, delta: i64) {
    if hash != 0 {
        let mut counts = KEY_COUNTS.lock().unwrap_or_else(PoisonError::into_inner);
        *counts.entry(hash).or_insert(0) += delta;
    }
}

/// A value restamped from the policy hashing to `from` to `to`'s.
pub fn move_key(from: u64, to: u64) {
    if from != to {
        count_keys(from, -1);
        count_keys(to, 1);
    }
}

/// How many keys hold a state stamped with the policy named `name`.
pub fn keys_of(name: &[u8]) -> i64 {
    let counts = KEY_COUNTS.lock().unwrap_or_else(PoisonError::into_inner);
    counts
        .get(&crate::algorithms::penalty::name_hash(name))
        .copied()
        .unwrap_or(0)
}

/// How many versions of a policy are kept (the current one included), for
/// `RL.POLICY HISTORY` and `ROLLBACK`.
pub const KEPT_VERSIONS: usize = 5;

/// One kept version of a policy.
#[derive(Debug, Clone)]
pub struct Version {
    pub version: u64,
    pub definition: Arc<Definition>,
    /// The definition's normalised words (`Definition::words`).
    pub words: Arc<Vec<Vec<u8>>>,
    /// What a check's replay carries in place of the policy's name
    /// (`RL.APPLYCHECK`), made once: the stamp (see [`replayed_word`]), then
    /// the words, space-separated.
    pub replayed: Arc<Vec<u8>>,
    /// What the keys this version decides are stamped with.
    pub stamp: Stamp,
}

impl Version {
    fn new(name: &[u8], version: u64, definition: Definition) -> Self {
        let words = Arc::new(definition.words());
        let stamp = Stamp::of(name, version);
        let replayed = Arc::new(replayed_word(stamp, &words));
        Self {
            version,
            definition: Arc::new(definition),
            words,
            replayed,
            stamp,
        }
    }
}

/// The word a check's replay carries for a policy's version: `@`, the
/// stamp's policy hash in 16 hex digits, `.`, its version in decimal, a
/// space, then the definition's words, space-separated. The stamp lets a
/// replica and an AOF replay migrate and stamp the keys exactly as the
/// primary did (see `crate::redis::engine::migrate`); a replay written
/// before stamps existed starts with the first tier's name, and stamps
/// nothing.
pub fn replayed_word(stamp: Stamp, words: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("@{:016x}.{} ", stamp.policy, stamp.version).into_bytes();
    out.extend_from_slice(&words.join(&b' '));
    out
}

/// A replay's word split into its stamp (none for a replay written before
/// stamps) and the definition's words.
pub fn split_replayed(word: &[u8]) -> Result<(Stamp, &[u8]), DecodeError> {
    let Some(rest) = word.strip_prefix(b"@") else {
        return Ok((Stamp::NONE, word));
    };
    let bad = DecodeError("bad policy stamp in a replay");
    let space = rest.iter().position(|&b| b == b' ').ok_or(bad.clone())?;
    let (head, tail) = rest.split_at(space);
    let head = std::str::from_utf8(head).map_err(|_| bad.clone())?;
    let (hash, version) = head.split_once('.').ok_or(bad.clone())?;
    let stamp = Stamp {
        policy: u64::from_str_radix(hash, 16).map_err(|_| bad.clone())?,
        version: version.parse().map_err(|_| bad.clone())?,
    };
    ensure(
        hash.len() == 16 && stamp.policy != 0 && stamp.version != 0,
        bad.0,
    )?;
    Ok((stamp, tail.get(1..).unwrap_or_default()))
}

/// A policy's counters, for `INFO ratelimit`.
#[derive(Debug, Default)]
pub struct Counters {
    pub checks: AtomicU64,
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub shadow_denied: AtomicU64,
}

impl Counters {
    /// Counts one decided request (a peek is not one).
    pub fn count(&self, allowed: bool, shadow: bool) {
        self.checks.fetch_add(1, Relaxed);
        let counter = match (allowed, shadow) {
            (true, _) => &self.allowed,
            (false, false) => &self.denied,
            (false, true) => &self.shadow_denied,
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// A policy: its kept versions, newest (the current one) first.
#[derive(Debug, Clone)]
pub struct Policy {
    versions: VecDeque<Version>,
    pub counters: Arc<Counters>,
}

impl Policy {
    pub fn current(&self) -> Option<&Version> {
        self.versions.front()
    }

    pub fn version(&self) -> u64 {
        self.current().map_or(0, |v| v.version)
    }

    /// The kept versions, newest first.
    pub fn history(&self) -> impl Iterator<Item = &Version> {
        self.versions.iter()
    }

    fn push(&mut self, version: Version) {
        self.versions.push_front(version);
        self.versions.truncate(KEPT_VERSIONS);
    }
}

/// Every policy, by name (sorted, as `RL.POLICY LIST` answers).
#[derive(Debug, Default)]
pub struct Store {
    policies: BTreeMap<Vec<u8>, Policy>,
}

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// The policy now has this new version.
    To(u64),
    /// The definition was the current one: nothing changed.
    Same(u64),
}

impl Changed {
    pub fn version(self) -> u64 {
        match self {
            Changed::To(v) | Changed::Same(v) => v,
        }
    }
}

/// The one store of this server's policies.
pub static STORE: Mutex<Store> = Mutex::new(Store {
    policies: BTreeMap::new(),
});

/// How many times any store of policies has changed (a policy loaded,
/// deleted, every one cleared or replaced): a memo of a lookup holds while
/// this has not moved (the Redis layer's check by name keeps one).
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// See [`CHANGES`].
pub fn changes() -> u64 {
    CHANGES.load(Relaxed)
}

fn changed() {
    CHANGES.fetch_add(1, Relaxed);
}

/// The store, locked (only Redis's main thread and a fork's copy of it use
/// it; a panic elsewhere cannot leave it half changed, as each change is
/// one insert).
pub fn store() -> MutexGuard<'static, Store> {
    STORE.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Store {
    pub fn get(&self, name: &[u8]) -> Option<&Policy> {
        self.policies.get(name)
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Every policy, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Policy)> {
        self.policies.iter().map(|(n, p)| (&n[..], p))
    }

    /// The version `definition` would have as `name`'s: the current one
    /// when it is the same definition, the next otherwise.
    pub fn would_be(&self, name: &[u8], definition: &Definition) -> Changed {
        match self.policies.get(name).and_then(Policy::current) {
            Some(current) if *current.definition == *definition => Changed::Same(current.version),
            Some(current) => Changed::To(current.version + 1),
            None => Changed::To(1),
        }
    }

    /// Makes `definition` the current one of `name` (a new version, unless
    /// it is the current one already).
    pub fn set(&mut self, name: &[u8], definition: Definition) -> Changed {
        let changed = self.would_be(name, &definition);
        if let Changed::To(version) = changed {
            self.load(name, version, definition);
        }
        changed
    }

    /// Makes `definition` the current one of `name` at exactly `version`:
    /// a change as the primary made it (a replica's, an AOF file's).
    pub fn load(&mut self, name: &[u8], version: u64, definition: Definition) {
        let policy = self
            .policies
            .entry(name.to_vec())
            .or_insert_with(|| Policy {
                versions: VecDeque::new(),
                counters: Arc::default(),
            });
        policy.push(Version::new(name, version, definition));
        changed();
    }

    /// The definition of a kept `version` of `name`, to make current again.
    pub fn kept(&self, name: &[u8], version: u64) -> Option<Definition> {
        self.policies
            .get(name)?
            .history()
            .find(|v| v.version == version)
            .map(|v| Definition::clone(&v.definition))
    }

    /// The name of the policy whose name hashes to `hash` (a stamp's), if
    /// this node holds one.
    pub fn name_of(&self, hash: u64) -> Option<Vec<u8>> {
        self.policies
            .keys()
            .find(|name| crate::algorithms::penalty::name_hash(name) == hash)
            .cloned()
    }

    /// Forgets `name` and its versions; whether it was there.
    pub fn delete(&mut self, name: &[u8]) -> bool {
        changed();
        self.policies.remove(name).is_some()
    }

    /// Forgets every policy (before a full load replaces them).
    pub fn clear(&mut self) {
        changed();
        self.policies.clear();
    }

    /// Holds `other`'s policies in place of its own (an RDB file's).
    pub fn replace(&mut self, other: Store) {
        changed();
        *self = other;
    }

    /// A digest over every policy's name, version and definition: equal on
    /// nodes holding the same policies. Two 64-bit FNV-1a hashes (different
    /// starting points) over a length-prefixed listing, as 32 hex digits;
    /// a check of agreement, not a defence against forgery.
    pub fn digest(&self) -> String {
        let mut bytes = Vec::new();
        for (name, policy) in &self.policies {
            if let Some(current) = policy.current() {
                put_words(&mut bytes, std::iter::once(&name[..]));
                put_u64(&mut bytes, current.version);
                put_words(&mut bytes, current.words.iter().map(Vec::as_slice));
            }
        }
        format!(
            "{:016x}{:016x}",
            fnv1a(0xcbf2_9ce4_8422_2325, &bytes),
            fnv1a(0x6c62_272e_07bb_0142, &bytes)
        )
    }

    /// Every policy with its kept versions, as bytes (the RDB's aux data):
    /// a format byte, the number of policies, then for each its name and
    /// its versions (oldest first), each a version and its words.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_u32(&mut out, self.policies.len() as u32);
        for (name, policy) in &self.policies {
            put_words(&mut out, std::iter::once(&name[..]));
            put_u32(&mut out, policy.versions.len() as u32);
            for version in policy.versions.iter().rev() {
                put_u64(&mut out, version.version);
                put_words(&mut out, version.words.iter().map(Vec::as_slice));
            }
        }
        out
    }

    /// The store [`Store::encode`] wrote; every definition parsed again,
    /// so bytes this module did not write are refused, never trusted.
    pub fn decode(bytes: &[u8]) -> Result<Store, DecodeError> {
        let mut reader = Reader::new(bytes);
        ensure(reader.u8()? == FORMAT, "unknown policies format")?;
        let mut store = Store::default();
        for _ in 0..reader.u32()? {
            let name_words = read_words(&mut reader)?;
            let [policy_name] = &name_words[..] else {
                return Err(DecodeError("a policy name is one word"));
            };
            name(policy_name).map_err(|_| DecodeError("invalid policy name"))?;
            let count = reader.u32()? as usize;
            ensure(
                (1..=KEPT_VERSIONS).contains(&count),
                "a policy keeps 1 to 5 versions",
            )?;
            let mut last = 0;
            for _ in 0..count {
                let version = reader.u64()?;
                ensure(version > last, "versions must increase")?;
                last = version;
                let words = read_words(&mut reader)?;
                let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
                let (definition, dryrun) =
                    definition(&refs).map_err(|_| DecodeError("invalid policy definition"))?;
                ensure(!dryrun, "invalid policy definition")?;
                store.load(policy_name, version, definition);
            }
        }
        reader.finish()?;
        Ok(store)
    }
}

/// The encoding's format byte.
const FORMAT: u8 = 1;

fn put_words<'w>(out: &mut Vec<u8>, words: impl ExactSizeIterator<Item = &'w [u8]>) {
    put_u32(out, words.len() as u32);
    for word in words {
        put_u32(out, word.len() as u32);
        out.extend_from_slice(word);
    }
}

fn read_words(reader: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    let count = reader.u32()? as usize;
    ensure(count <= reader.remaining() / 4, "truncated words")?;
    (0..count)
        .map(|_| {
            let len = reader.u32()? as usize;
            Ok(reader.bytes(len)?.to_vec())
        })
        .collect()
}

fn fnv1a(start: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(start, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The error of a check by the name of a policy this node does not hold.
pub fn no_policy(policy: &[u8]) -> CommandError {
    CommandError::Reply(format!("ERR no policy '{}'", shown(policy)).into())
}

/// The error of a check by the name of a policy of `n` tiers given another
/// number of keys.
pub fn wrong_keys(policy: &[u8], n: usize) -> CommandError {
    CommandError::Reply(
        format!(
            "ERR policy '{}' has {n} tier{}: give {n} key{} after its name, then COST, PEEK or BLOCK",
            shown(policy),
            if n == 1 { "" } else { "s" },
            if n == 1 { "" } else { "s" },
        )
        .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(words: &[&str]) -> Definition {
        let w: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        definition(&w).unwrap().0
    }

    #[test]
    fn versions_increase_on_change_only_and_keep_the_last_five() {
        let mut store = Store::default();
        assert_eq!(
            store.set(b"p", def(&["TOKENBUCKET", "10", "1"])),
            Changed::To(1)
        );
        assert_eq!(
            store.set(b"p", def(&["tokenbucket", "10", "1.0"])),
            Changed::Same(1)
        );
        for limit in 11..20 {
            let limit = limit.to_string();
            store.set(b"p", def(&["TOKENBUCKET", &limit, "1"]));
        }
        let p = store.get(b"p").unwrap();
        assert_eq!(p.version(), 10);
        let kept: Vec<u64> = p.history().map(|v| v.version).collect();
        assert_eq!(kept, vec![10, 9, 8, 7, 6]);
        assert!(store.kept(b"p", 5).is_none());
        assert!(store.kept(b"p", 6).is_some());
    }

    /// Every kind of change of a store moves `changes()` (a memo of a
    /// lookup holds only while it does not). Other tests' stores may move
    /// it too (tests run in parallel), so each step asks only that it
    /// moved.
    #[test]
    fn every_change_of_a_store_moves_its_change_count() {
        let mut store = Store::default();
        let moved = |store: &mut Store, change: &dyn Fn(&mut Store)| {
            let before = changes();
            change(store);
            changes() != before
        };
        assert!(moved(&mut store, &|s| {
            s.set(b"p", def(&["TOKENBUCKET", "10", "1"]));
        }));
        assert!(moved(&mut store, &|s| s.load(
            b"p",
            7,
            def(&["GCRA", "1", "1", "1s"])
        )));
        assert!(moved(&mut store, &|s| {
            s.delete(b"p");
        }));
        assert!(moved(&mut store, &|s| s.clear()));
        assert!(moved(&mut store, &|s| s.replace(Store::default())));
    }

    #[test]
    fn the_encoding_round_trips_and_the_digest_follows_content() {
        let mut store = Store::default();
        let empty = store.digest();
        store.set(b"a", def(&["GCRA", "0", "1", "1s", "PENALTY", "1m"]));
        store.set(b"a", def(&["GCRA", "1", "1", "1s", "SHADOW"]));
        store.set(
            b"b",
            def(&["SLIDINGLOG", "5", "10s", "FIXEDWINDOW", "5", "1h"]),
        );
        let back = Store::decode(&store.encode()).unwrap();
        assert_eq!(back.digest(), store.digest());
        assert_ne!(store.digest(), empty);
        assert_eq!(back.get(b"a").unwrap().history().count(), 2);
        let mut bytes = store.encode();
        bytes.pop();
        assert!(Store::decode(&bytes).is_err());
        assert!(Store::decode(&[]).is_err());
        store.delete(b"a");
        store.delete(b"b");
        assert_eq!(store.digest(), empty);
    }
}
