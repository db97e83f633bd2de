//! Concurrency limiter: requests in flight rather than requests per second.
//!
//! Terms: a key holds up to `limit` *leases*; each lease has an `id` (chosen
//! by the caller, or drawn at random by the server) and ends by itself at
//! `ends_ms`, `lease_ms` after it was taken or last renewed, so a caller that
//! crashes without releasing gives its slot back when its lease runs out. A
//! lease that has ended counts for nothing, whether or not it was dropped
//! from the list yet: nothing runs in the background, ended leases are
//! dropped the next time the key is written.
//!
//! Acquiring with an id that already holds a live lease renews it (a
//! heartbeat) and takes no second slot. Changed parameters apply from that
//! call on: a lower limit revokes nothing, it only stops new leases until
//! enough have ended; a new lease length applies to leases taken or renewed
//! from then on.
//!
//! Up to [`FEW`] leases are kept in one vector ordered by end time, which
//! takes the least memory and is quick to walk at that size. Beyond that
//! they are indexed twice, by id and by end (`LeaseEnds`), so that taking,
//! renewing or releasing one, or counting those that ended, costs about a
//! microsecond however many are held (a key may hold a million). Either way
//! the leases are in the same order, earliest end first (ties by id), so a
//! state's encoding does not depend on which of the two a server happens to
//! hold. A command that writes drops up to [`MAX_SWEPT`] of the leases that
//! ended, earliest first, the rest on the writes that follow (so no command
//! stalls the server freeing a million); a denial, which writes nothing,
//! counts past them. Ended leases count for nothing either way.

use std::collections::HashMap;

use super::lease_ends::{Id, LeaseEnds};

use super::{Decision, Field, State, MAX_AMOUNT, MAX_DURATION_MS, MAX_TIMESTAMP_MS};
use crate::encoding::{ensure, put_i64, put_u64, DecodeError, Reader};

/// The longest lease id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 64;

/// The most leases `RL.INFO` lists (it says how many there are).
pub const INFO_LEASES: usize = 100;

/// The most leases kept in the plain vector; more are indexed.
const FEW: usize = 64;

/// The most ended leases a write drops. Dropping one from a large set costs
/// about a microsecond (cache misses in the index by id, the free): an
/// `RL.ACQUIRE` on a key whose million leases all ended took 0.21-0.27 ms
/// with 256 (1-1.6 s before, dropping all at once; 0.7 ms with 1000; a
/// release build on a busy 2-core machine), so the key empties over some
/// 4,000 writes, none of which stalls the server. At
/// least [`FEW`], so a vector's sweep (of everything ended) drops no more
/// than the index's: both forms of the same leases stay the same.
pub const MAX_SWEPT: usize = 256;
const _: () = assert!(MAX_SWEPT >= FEW);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseParams {
    /// The most leases held at once (`1..=MAX_AMOUNT`).
    pub limit: u64,
    /// How long a lease lasts unless released or renewed (`1..=MAX_DURATION_MS`).
    pub lease_ms: u64,
}

/// The leases, earliest end first (ties by id).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Book {
    /// Up to [`FEW`]: `(ends_ms, id)`, sorted.
    Few(Vec<(i64, Box<[u8]>)>),
    /// More: by id, and the same leases sorted by `(ends_ms, id)`.
    Many {
        ends_by_id: HashMap<Id, i64>,
        by_end: LeaseEnds,
    },
}

impl Book {
    fn len(&self) -> usize {
        match self {
            Book::Few(leases) => leases.len(),
            Book::Many { by_end, .. } => by_end.len(),
        }
    }

    /// Every lease as `(ends_ms, id)`, earliest end first.
    fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = (i64, &[u8])> + '_> {
        match self {
            Book::Few(leases) => Box::new(leases.iter().map(|(end, id)| (*end, &**id))),
            Book::Many { by_end, .. } => Box::new(by_end.iter().map(|(end, id)| (*end, &**id))),
        }
    }

    /// When `id`'s lease ends, if it holds one.
    fn end_of(&self, id: &[u8]) -> Option<i64> {
        match self {
            Book::Few(leases) => leases.iter().find(|(_, i)| **i == *id).map(|(end, _)| *end),
            Book::Many { ends_by_id, .. } => ends_by_id.get(id).copied(),
        }
    }

    /// The first lease ending after `now_ms`, and the last lease.
    fn live_ends(&self, now_ms: i64) -> (Option<i64>, Option<i64>) {
        let last = self
            .iter()
            .next_back()
            .map(|(end, _)| end)
            .filter(|&e| e > now_ms);
        let first = match self {
            Book::Few(leases) => leases.iter().map(|(end, _)| *end).find(|&e| e > now_ms),
            Book::Many { by_end, .. } => by_end.first_after(now_ms),
        };
        (first, last)
    }

    /// The leases live at `now_ms` (all but those that ended), earliest end
    /// first, without walking the ended ones.
    fn live(&self, now_ms: i64) -> Box<dyn Iterator<Item = (i64, &[u8])> + '_> {
        match self {
            Book::Few(leases) => Box::new(
                leases
                    .iter()
                    .filter(move |(end, _)| *end > now_ms)
                    .map(|(end, id)| (*end, &**id)),
            ),
            Book::Many { by_end, .. } => {
                Box::new(by_end.live_at(now_ms).map(|(end, id)| (*end, &**id)))
            }
        }
    }

    /// Leases live at `now_ms`: all but those that ended.
    fn live_count(&self, now_ms: i64) -> u64 {
        let ended = match self {
            Book::Few(leases) => leases.iter().take_while(|(end, _)| *end <= now_ms).count(),
            Book::Many { by_end, .. } => by_end.ended_by(now_ms),
        };
        (self.len() - ended) as u64
    }

    /// Drops `id`'s lease, and up to [`MAX_SWEPT`] of those that ended by
    /// `now_ms`, earliest first.
    fn drop_ended_and(&mut self, now_ms: i64, id: &[u8]) {
        match self {
            Book::Few(leases) => leases.retain(|(end, i)| *end > now_ms && **i != *id),
            Book::Many { ends_by_id, by_end } => {
                if let Some((id, end)) = ends_by_id.remove_entry(id) {
                    by_end.remove(end, &id);
                }
                by_end.drop_ended(now_ms, MAX_SWEPT, |id| {
                    ends_by_id.remove(&id);
                });
            }
        }
        self.resize();
    }

    /// Adds a lease for an id that holds none.
    fn insert(&mut self, ends_ms: i64, id: &[u8]) {
        match self {
            Book::Few(leases) => {
                let at = leases.partition_point(|(end, i)| (*end, &**i) < (ends_ms, id));
                leases.insert(at, (ends_ms, id.into()));
            }
            Book::Many { ends_by_id, by_end } => {
                let id = Id::from(id);
                ends_by_id.insert(id.clone(), ends_ms);
                by_end.insert(ends_ms, id);
            }
        }
        self.resize();
    }

    /// Indexes a book grown beyond [`FEW`]; goes back to the vector once it
    /// holds a quarter of that.
    fn resize(&mut self) {
        let len = self.len();
        match self {
            Book::Few(leases) if len > FEW => {
                let by_end =
                    LeaseEnds::from_sorted(leases.drain(..).map(|(end, id)| (end, Id::from(id))));
                let ends_by_id = by_end.iter().map(|(end, id)| (id.clone(), *end)).collect();
                *self = Book::Many { ends_by_id, by_end };
            }
            Book::Many { by_end, .. } if len <= FEW / 4 => {
                let leases = by_end
                    .iter()
                    .map(|(end, id)| (*end, Box::<[u8]>::from(&**id)))
                    .collect();
                *self = Book::Few(leases);
            }
            _ => {}
        }
    }

    fn heap_bytes(&self) -> usize {
        let ids: usize = self.iter().map(|(_, id)| id.len()).sum();
        let lease = std::mem::size_of::<(i64, Id)>();
        ids + match self {
            Book::Few(leases) => leases.capacity() * lease,
            // Each id's reference counts, the hash table's slots (a
            // control byte each), the blocks.
            Book::Many { ends_by_id, by_end } => {
                by_end.len() * 2 * std::mem::size_of::<usize>()
                    + ends_by_id.capacity() * (std::mem::size_of::<(Id, i64)>() + 1)
                    + by_end.heap_bytes()
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    params: LeaseParams,
    /// Every lease not dropped yet, ended or not.
    book: Book,
    /// The latest time seen (Unix ms): an earlier clock reading is treated
    /// as this one.
    updated_ms: i64,
}

impl Leases {
    /// A key holding no lease yet.
    pub fn new(params: LeaseParams, now_ms: i64) -> Self {
        Self {
            params,
            book: Book::Few(Vec::new()),
            updated_ms: now_ms,
        }
    }

    pub fn params(&self) -> LeaseParams {
        self.params
    }

    /// Whether no lease is held any more (the key can go).
    pub fn is_empty(&self) -> bool {
        self.book.len() == 0
    }

    /// Leases held, ended or not (not dropped yet).
    pub fn len(&self) -> usize {
        self.book.len()
    }

    /// Whether `id` holds a live lease at `now_ms`.
    fn holds(&self, id: &[u8], now_ms: i64) -> bool {
        self.book.end_of(id).is_some_and(|end| end > now_ms)
    }

    /// What the key looks like at `now_ms`, under `limit`, for a request
    /// that was `allowed`.
    fn decision(&self, limit: u64, now_ms: i64, allowed: bool) -> Decision {
        let (first_end, last_end) = self.book.live_ends(now_ms);
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(self.book.live_count(now_ms)),
            retry_after_ms: if allowed {
                0
            } else {
                first_end.map_or(0, |end| end - now_ms)
            },
            reset_after_ms: last_end.map_or(0, |end| end - now_ms),
            delay_ms: None,
        }
    }

    /// Takes a slot for `id` at `now_ms` (or renews the live lease `id`
    /// holds) under `params`. Returns the decision and whether the state
    /// changed; a denial changes nothing.
    pub fn acquire(&mut self, params: LeaseParams, now_ms: i64, id: &[u8]) -> (Decision, bool) {
        let now_ms = now_ms.max(self.updated_ms);
        let held = self.holds(id, now_ms);
        if !held && self.book.live_count(now_ms) >= params.limit {
            return (self.decision(params.limit, now_ms, false), false);
        }
        self.params = params;
        self.updated_ms = now_ms;
        self.book.drop_ended_and(now_ms, id);
        // A lease ends no later than the last time a state carries.
        let ends_ms = now_ms
            .saturating_add(params.lease_ms as i64)
            .min(MAX_TIMESTAMP_MS);
        self.book.insert(ends_ms, id);
        (self.decision(params.limit, now_ms, true), true)
    }

    /// Whether `id` holds a live lease at `now_ms`: acquiring for it renews
    /// that lease, taking no slot.
    pub fn renews(&self, id: &[u8], now_ms: i64) -> bool {
        self.holds(id, now_ms.max(self.updated_ms))
    }

    /// Whether acquiring for `id` at `now_ms` would take a new slot (rather
    /// than renew `id`'s, or be denied): the state grows by a lease.
    pub fn would_add(&self, params: LeaseParams, now_ms: i64, id: &[u8]) -> bool {
        let now_ms = now_ms.max(self.updated_ms);
        !self.holds(id, now_ms) && self.book.live_count(now_ms) < params.limit
    }

    /// Gives back the live lease `id` holds. Returns whether there was one;
    /// when there was not, nothing changes.
    pub fn release(&mut self, now_ms: i64, id: &[u8]) -> bool {
        let now_ms = now_ms.max(self.updated_ms);
        if !self.holds(id, now_ms) {
            return false;
        }
        self.updated_ms = now_ms;
        self.book.drop_ended_and(now_ms, id);
        true
    }

    /// The key as seen at `now_ms`, changing nothing (for RL.INFO).
    pub fn peek(&self, now_ms: i64) -> Decision {
        self.peek_with(self.params, now_ms)
    }

    /// What an acquire of a new slot under `params` would be told at
    /// `now_ms`, changing nothing.
    pub fn peek_with(&self, params: LeaseParams, now_ms: i64) -> Decision {
        let now_ms = now_ms.max(self.updated_ms);
        let allowed = self.book.live_count(now_ms) < params.limit;
        self.decision(params.limit, now_ms, allowed)
    }
}

impl State for Leases {
    /// The leases live at `now_ms` (`lease_count`), and the first
    /// [`INFO_LEASES`] of them as `[id, ends_ms]` pairs, earliest end first.
    /// Ended leases the bounded sweep has not dropped yet are not shown: they
    /// count for nothing, as in every decision. Counting and finding the
    /// first live lease search the index, so this costs the same however
    /// many ended (`RL.INFO` is for a person, and listing 100,000 leases
    /// would hold the server for some 40 ms).
    fn describe(&self, now_ms: i64) -> Vec<(&'static str, Field)> {
        let now_ms = now_ms.max(self.updated_ms);
        let leases = self
            .book
            .live(now_ms)
            .take(INFO_LEASES)
            .map(|(end, id)| Field::List(vec![Field::Text(id.to_vec()), Field::Int(end)]))
            .collect();
        vec![
            ("limit", Field::Int(self.params.limit as i64)),
            ("lease_ms", Field::Int(self.params.lease_ms as i64)),
            (
                "lease_count",
                Field::Int(self.book.live_count(now_ms) as i64),
            ),
            ("leases", Field::List(leases)),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    /// When the last lease ends.
    fn fresh_at_ms(&self) -> i64 {
        self.book
            .iter()
            .next_back()
            .map_or(self.updated_ms, |(end, _)| end)
    }

    fn heap_bytes(&self) -> usize {
        self.book.heap_bytes()
    }

    /// An id (two once indexed) a lease: a million leases take some 90 ms
    /// to free (measured, release build). At least 1: Redis reads 0 as
    /// "always free in the background".
    fn free_effort(&self) -> usize {
        self.book.len().max(1)
    }

    /// `limit`, `lease_ms`, `updated_ms`, the number of leases, then each
    /// lease, earliest end first (ties by id): `ends_ms` i64, the id's length
    /// (a byte), the id.
    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.limit);
        put_u64(out, self.params.lease_ms);
        put_i64(out, self.updated_ms);
        put_u64(out, self.book.len() as u64);
        for (end, id) in self.book.iter() {
            put_i64(out, end);
            out.push(id.len() as u8);
            out.extend_from_slice(id);
        }
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let limit = input.u64()?;
        let lease_ms = input.u64()?;
        let updated_ms = input.timestamp("timestamp out of range")?;
        let count = input.u64()?;
        ensure((1..=MAX_AMOUNT).contains(&limit), "limit out of range")?;
        ensure(
            (1..=MAX_DURATION_MS).contains(&lease_ms),
            "lease out of range",
        )?;
        // Each lease takes at least 10 bytes: a count larger than what is
        // left cannot be right, and must not size an allocation.
        ensure(
            count <= (input.remaining() / 10) as u64,
            "lease count larger than the data",
        )?;
        let mut leases: Vec<(i64, Box<[u8]>)> = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let ends_ms = input.timestamp("lease end out of range")?;
            let len = usize::from(input.u8()?);
            ensure(
                (1..=MAX_ID_BYTES).contains(&len),
                "lease id length out of range",
            )?;
            let id = input.bytes(len)?;
            leases.push((ends_ms, id.into()));
        }
        // Any order is read (older versions wrote leases as they were
        // taken); ids are unique, checked by sorting them, so a large state
        // costs n log n, not n squared.
        let mut ids: Vec<&[u8]> = leases.iter().map(|(_, id)| &**id).collect();
        ids.sort_unstable();
        ensure(
            ids.windows(2).all(|pair| !matches!(pair, [a, b] if a == b)),
            "lease id repeated",
        )?;
        leases.sort_unstable();
        let mut book = Book::Few(leases);
        book.resize();
        Ok(Self {
            params: LeaseParams { limit, lease_ms },
            book,
            updated_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::encode as encoded;
    use crate::algorithms::Registered;
    use crate::encoding::Horizon;

    const T0: i64 = 1_700_000_000_000;

    #[test]
    fn info_counts_every_lease_and_lists_the_first_hundred_earliest_first() {
        let p = params(1000, 60_000);
        let mut leases = Leases::new(p, T0);
        for i in 0..150 {
            leases.acquire(p, T0 + i, format!("id-{i}").as_bytes());
        }
        let fields = leases.describe(T0);
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| f.clone())
        };
        assert_eq!(field("lease_count"), Some(Field::Int(150)));
        let Some(Field::List(listed)) = field("leases") else {
            panic!("no leases field: {fields:?}");
        };
        assert_eq!(listed.len(), INFO_LEASES);
        assert_eq!(
            listed.first(),
            Some(&Field::List(vec![
                Field::Text(b"id-0".to_vec()),
                Field::Int(T0 + 60_000)
            ]))
        );
    }

    #[test]
    fn leases_written_in_the_order_taken_are_read_and_written_back_sorted() {
        // Versions before the indexed set wrote leases as they were taken:
        // here "late" (ends later) before "early". Their RDB files load.
        let mut old = vec![Leases::TAG];
        put_u64(&mut old, 3);
        put_u64(&mut old, 30_000);
        put_i64(&mut old, T0);
        put_u64(&mut old, 2);
        for (end, id) in [(T0 + 30_000, &b"late"[..]), (T0 + 10_000, b"early")] {
            put_i64(&mut old, end);
            old.push(id.len() as u8);
            old.extend_from_slice(id);
        }
        let leases = Leases::decode(&old, Horizon::NONE).unwrap();
        let written = encoded(&leases);
        assert_ne!(written, old, "written back sorted");
        assert_eq!(
            encoded(&Leases::decode(&written, Horizon::NONE).unwrap()),
            written
        );
        assert_eq!(written.len(), old.len());
        let early_at = written.windows(5).position(|w| w == b"early").unwrap();
        let late_at = written.windows(4).position(|w| w == b"late").unwrap();
        assert!(early_at < late_at, "the earlier end first");
    }

    fn params(limit: u64, lease_ms: u64) -> LeaseParams {
        LeaseParams { limit, lease_ms }
    }

    fn summary(d: Decision) -> (bool, u64, i64, i64) {
        (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms)
    }

    #[test]
    fn leases_are_given_up_to_the_limit_then_refused_until_the_first_ends() {
        let p = params(2, 1000);
        let mut s = Leases::new(p, T0);
        assert_eq!(summary(s.acquire(p, T0, b"a").0), (true, 1, 0, 1000));
        assert_eq!(summary(s.acquire(p, T0 + 100, b"b").0), (true, 0, 0, 1000));
        let before = encoded(&s);
        let (denied, changed) = s.acquire(p, T0 + 200, b"c");
        assert_eq!(summary(denied), (false, 0, 800, 900));
        assert!(!changed);
        assert_eq!(encoded(&s), before, "a denial changes nothing");
        assert!(s.acquire(p, T0 + 1000, b"c").0.allowed, "a's lease ended");
    }

    #[test]
    fn a_release_gives_the_slot_back_once() {
        let p = params(1, 60_000);
        let mut s = Leases::new(p, T0);
        assert!(s.acquire(p, T0, b"a").0.allowed);
        assert!(!s.acquire(p, T0, b"b").0.allowed);
        assert!(s.release(T0 + 5, b"a"));
        assert!(!s.release(T0 + 6, b"a"), "a second release finds nothing");
        assert!(s.is_empty());
        assert!(s.acquire(p, T0 + 7, b"b").0.allowed);
    }

    #[test]
    fn releasing_an_ended_or_unknown_lease_answers_no_and_changes_nothing() {
        let p = params(3, 100);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        let before = encoded(&s);
        assert!(!s.release(T0 + 100, b"a"), "ended at T0 + 100");
        assert!(!s.release(T0 + 1, b"zz"));
        assert_eq!(encoded(&s), before);
    }

    #[test]
    fn acquiring_again_with_a_held_id_renews_it_without_a_second_slot() {
        let p = params(2, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        let (renewed, changed) = s.acquire(p, T0 + 500, b"a");
        assert!(changed);
        assert_eq!(summary(renewed), (true, 1, 0, 1000));
        assert_eq!(s.fresh_at_ms(), T0 + 1500);
    }

    #[test]
    fn a_renewal_is_allowed_even_when_the_limit_is_reached() {
        let p = params(1, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        assert!(s.acquire(p, T0 + 10, b"a").0.allowed);
    }

    #[test]
    fn ended_leases_count_for_nothing_and_are_dropped_on_the_next_write() {
        let p = params(2, 100);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        s.acquire(p, T0 + 50, b"b");
        assert_eq!(s.peek(T0 + 120).remaining, 1);
        s.acquire(p, T0 + 120, b"c");
        assert_eq!(s.len(), 2, "a was dropped");
    }

    #[test]
    fn a_lower_limit_revokes_nothing_but_stops_new_leases() {
        let mut s = Leases::new(params(3, 1000), T0);
        for id in [&b"a"[..], b"b", b"c"] {
            s.acquire(params(3, 1000), T0, id);
        }
        let (d, _) = s.acquire(params(1, 1000), T0 + 1, b"d");
        assert_eq!(summary(d), (false, 0, 999, 999));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_clock_stepping_back_means_no_time_passed() {
        let p = params(1, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0 + 500, b"a");
        let (d, _) = s.acquire(p, T0, b"b");
        assert_eq!(summary(d), (false, 0, 1000, 1000));
    }

    #[test]
    fn the_key_is_fresh_when_the_last_lease_ends() {
        let p = params(5, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        s.acquire(params(5, 3000), T0 + 10, b"b");
        s.acquire(p, T0 + 20, b"c");
        assert_eq!(s.fresh_at_ms(), T0 + 3010);
    }

    /// Regression (found by fuzzing): a lease taken at the latest time a
    /// state carries ends after it, and decoding refused its end, so the
    /// state the key stored could not be loaded or replicated. (It now
    /// ends at that latest time, as a penalty does.)
    #[test]
    fn a_lease_taken_at_the_latest_time_a_state_carries_decodes() {
        let p = params(3, MAX_DURATION_MS);
        let mut s = Leases::new(p, MAX_TIMESTAMP_MS);
        assert!(s.acquire(p, MAX_TIMESTAMP_MS, b"w").1);
        assert_eq!(Leases::decode(&encoded(&s), Horizon::NONE), Ok(s));
    }

    /// Regression (issue 20): the first write on a key whose million leases
    /// had ended dropped them all, holding the server some 250 ms. A write
    /// now drops at most [`MAX_SWEPT`], the writes after it the rest, and
    /// the leases not dropped yet count for nothing meanwhile.
    #[test]
    fn a_write_drops_at_most_max_swept_ended_leases_and_answers_exactly() {
        let p = params(10_000, 1000);
        let mut s = Leases::new(p, T0);
        let n = 2 * MAX_SWEPT + 50;
        for i in 0..n {
            assert!(s.acquire(p, T0, format!("old-{i}").as_bytes()).1);
        }
        let later = T0 + 5000;
        let (d, changed) = s.acquire(p, later, b"new-0");
        assert!(d.allowed && changed);
        assert_eq!(summary(d), (true, 9_999, 0, 1000));
        assert_eq!(s.len(), n - MAX_SWEPT + 1, "dropped MAX_SWEPT");
        // Exact with ended leases still held: one live lease.
        let d = s.peek_with(params(1, 1000), later + 10);
        assert_eq!(summary(d), (false, 0, 990, 990));
        assert!(!s.would_add(params(1, 1000), later, b"x"));
        assert!(s.release(later + 1, b"new-0"));
        assert_eq!(s.len(), n - 2 * MAX_SWEPT);
        assert!(s.acquire(p, later + 2, b"new-1").1);
        assert_eq!(s.len(), 1, "the rest dropped");
        assert_eq!(summary(s.peek(later + 2)), (true, 9_999, 0, 1000));
    }

    /// Issue 28, item 4: `RL.INFO` counted and listed the ended leases the
    /// sweep had not dropped yet (745 and 744 ended ids, after 1,000 leases
    /// had ended and one write). It shows what every decision sees: the
    /// live leases, in the vector and in the index, before any write.
    #[test]
    fn info_shows_live_leases_only_whether_or_not_ended_ones_were_dropped() {
        for (ended, live) in [(10, 3), (1000, 1), (3000, 150)] {
            let (short, long) = (params(100_000, 100), params(100_000, 1000));
            let mut s = Leases::new(short, T0);
            for i in 0..ended {
                assert!(s.acquire(short, T0, format!("old-{i:04}").as_bytes()).1);
            }
            for i in 0..live {
                assert!(s.acquire(long, T0, format!("new-{i:04}").as_bytes()).1);
            }
            let later = T0 + 200;
            assert_eq!(s.len(), ended + live, "nothing dropped yet");
            let fields = s.describe(later);
            let field = |name: &str| fields.iter().find(|(n, _)| *n == name).map(|(_, f)| f);
            assert_eq!(field("lease_count"), Some(&Field::Int(live as i64)));
            let Some(Field::List(listed)) = field("leases") else {
                panic!("no leases field: {fields:?}");
            };
            let expected: Vec<Field> = (0..live.min(INFO_LEASES))
                .map(|i| {
                    Field::List(vec![
                        Field::Text(format!("new-{i:04}").into_bytes()),
                        Field::Int(T0 + 1000),
                    ])
                })
                .collect();
            assert_eq!(listed, &expected, "{ended} ended, {live} live");
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_values() {
        let p = params(10, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"first");
        s.acquire(p, T0 + 1, &[0xff; MAX_ID_BYTES]);
        let bytes = encoded(&s);
        assert_eq!(Leases::decode(&bytes, Horizon::NONE), Ok(s.clone()));
        for cut in 0..bytes.len() {
            assert!(
                Leases::decode(&bytes[..cut], Horizon::NONE).is_err(),
                "cut at {cut}"
            );
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(Leases::decode(&trailing, Horizon::NONE).is_err());
        let mut huge_count = bytes.clone();
        huge_count[25..33].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Leases::decode(&huge_count, Horizon::NONE).is_err());
        // Hand-written: the state itself cannot hold these.
        let lease_state = |leases: &[(i64, &[u8])]| {
            let mut out = vec![<Leases as crate::algorithms::Registered>::TAG];
            put_u64(&mut out, 10);
            put_u64(&mut out, 1000);
            put_i64(&mut out, T0);
            put_u64(&mut out, leases.len() as u64);
            for (end, id) in leases {
                put_i64(&mut out, *end);
                out.push(id.len() as u8);
                out.extend_from_slice(id);
            }
            out
        };
        assert!(Leases::decode(&lease_state(&[(T0 + 5, b"x")]), Horizon::NONE).is_ok());
        assert!(
            Leases::decode(&lease_state(&[(T0, b"x"), (T0 + 5, b"x")]), Horizon::NONE).is_err()
        );
        let empty_id = lease_state(&[(T0, b"")]);
        assert!(Leases::decode(&empty_id, Horizon::NONE).is_err());
    }

    /// The leases as a naive model keeps them: id -> end, every question
    /// answered by a full walk.
    #[derive(Default)]
    struct Model {
        ends: std::collections::BTreeMap<Vec<u8>, i64>,
        updated_ms: i64,
    }

    impl Model {
        fn live(&self, now: i64) -> impl Iterator<Item = i64> + '_ {
            self.ends.values().copied().filter(move |&end| end > now)
        }

        fn decision(&self, limit: u64, now: i64, allowed: bool) -> (bool, u64, i64, i64) {
            let live = self.live(now).count() as u64;
            let first = self.live(now).min();
            let last = self.live(now).max();
            (
                allowed,
                limit.saturating_sub(live),
                if allowed {
                    0
                } else {
                    first.map_or(0, |e| e - now)
                },
                last.map_or(0, |e| e - now),
            )
        }

        fn acquire(&mut self, p: LeaseParams, now: i64, id: &[u8]) -> (bool, u64, i64, i64) {
            let now = now.max(self.updated_ms);
            let held = self.ends.get(id).is_some_and(|&e| e > now);
            if !held && self.live(now).count() as u64 >= p.limit {
                return self.decision(p.limit, now, false);
            }
            self.updated_ms = now;
            self.ends.retain(|_, e| *e > now);
            self.ends.insert(id.to_vec(), now + p.lease_ms as i64);
            self.decision(p.limit, now, true)
        }

        fn release(&mut self, now: i64, id: &[u8]) -> bool {
            let now = now.max(self.updated_ms);
            if self.ends.get(id).is_none_or(|&e| e <= now) {
                return false;
            }
            self.updated_ms = now;
            self.ends.retain(|i, e| *e > now && **i != *id);
            true
        }

        /// The leases in encoding order: earliest end first, ties by id.
        fn sorted(&self) -> Vec<(i64, Vec<u8>)> {
            let mut all: Vec<_> = self.ends.iter().map(|(i, e)| (*e, i.clone())).collect();
            all.sort();
            all
        }
    }

    proptest::proptest! {
        /// Below and above the size where the leases get indexed, and back,
        /// every answer and every encoding is the naive model's.
        #[test]
        fn leases_answer_as_a_naive_model_at_any_size(
            ops in proptest::collection::vec(
                (0i64..60, 0u8..120, proptest::bool::weighted(0.3), 1u64..200, 50u64..2000),
                1..400,
            ),
        ) {
            let mut model = Model::default();
            let mut s = Leases::new(params(1, 1), T0);
            model.updated_ms = T0;
            let mut now = T0;
            for (step, who, release, limit, lease_ms) in ops {
                now += step;
                let id = format!("w{who}");
                if release {
                    proptest::prop_assert_eq!(s.release(now, id.as_bytes()), model.release(now, id.as_bytes()));
                } else {
                    let p = params(limit, lease_ms);
                    let (d, _) = s.acquire(p, now, id.as_bytes());
                    proptest::prop_assert_eq!(summary(d), model.acquire(p, now, id.as_bytes()));
                }
                let held: Vec<(i64, Vec<u8>)> = s.book.iter().map(|(e, i)| (e, i.to_vec())).collect();
                proptest::prop_assert_eq!(&held, &model.sorted());
                proptest::prop_assert_eq!(Leases::decode(&encoded(&s), Horizon::NONE).map(|d| encoded(&d)), Ok(encoded(&s)));
            }
        }
    }

    #[test]
    fn a_large_book_is_indexed_and_a_small_one_is_not() {
        let p = params(1000, 60_000);
        let mut s = Leases::new(p, T0);
        for i in 0..FEW + 1 {
            s.acquire(p, T0, format!("w{i:03}").as_bytes());
        }
        assert!(matches!(s.book, Book::Many { .. }));
        for i in 0..FEW + 1 - FEW / 4 {
            assert!(s.release(T0 + 1, format!("w{i:03}").as_bytes()));
        }
        assert!(matches!(s.book, Book::Few(_)));
        assert_eq!(s.len(), FEW / 4);
    }
}
