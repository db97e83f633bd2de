//! The keys denied most often, counted in bounded memory: the Space-Saving
//! algorithm (Metwally, Agrawal and El Abbadi, "Efficient Computation of
//! Frequent and Top-k Elements in Data Streams", ICDT 2005), with its
//! *stream summary* so that counting one occurrence costs O(1).
//!
//! Terms:
//! - `capacity` (m): how many keys the sketch tracks at most, one *slot* each;
//! - `total` (N): how many occurrences it was given;
//! - a slot's `count`: an estimate of its key's true count, never below it;
//! - a slot's `error`: how much of `count` may not be the key's own: the
//!   count the slot had when the key took it over from another key.
//!
//! A key already tracked has its count raised by one. A new key takes a free
//! slot (count 1, error 0) or, when all m are taken, the slot of a key with
//! the smallest count `min`, and counts on from there: count `min + 1`, error
//! `min`. The evicted key's true count was at most `min`, which is why the
//! counts never fall below the truth. What follows, for every stream:
//! - `count - error <= true count <= count` for every tracked key;
//! - the counts of the slots add up to N, so `min <= N / m`, and every
//!   `error <= N / m`;
//! - every key whose true count exceeds N / m (more exactly: exceeds `min`)
//!   is tracked;
//! - while at most m distinct keys were given, every count is exact.
//!
//! The stream summary: slots with the same count hang together in a
//! *bucket* (a doubly linked list of slots), and the buckets form a doubly
//! linked list in increasing count. Raising a count by one moves a slot from
//! its bucket to the next one up (made when missing), so no search or sort
//! is needed; the smallest count is the first bucket. Slots and buckets live
//! in arenas, linked by index; a hash map finds a key's slot. The map hashes
//! with the standard library's randomly keyed SipHash, so clients choosing
//! key names cannot make its lookups slow.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::rc::Rc;

/// No slot or bucket: the end of a list.
const NONE: u32 = u32::MAX;

/// The most keys a sketch can track (indices are `u32`, one value of which
/// marks the end of a list).
pub const MAX_CAPACITY: u32 = NONE - 1;

/// A bounded count of the occurrences of keys (byte strings), keeping the
/// most frequent. See the module documentation for what its counts promise.
#[derive(Debug)]
pub struct TopKeys {
    capacity: u32,
    total: u64,
    slots: Vec<Slot>,
    buckets: Vec<Bucket>,
    /// The first free bucket of the arena, whose `larger` links the next.
    free_bucket: u32,
    /// The bucket of the smallest count, and of the largest.
    smallest: u32,
    largest: u32,
    /// Each tracked key's slot. The key's bytes are shared with the slot.
    index: HashMap<Rc<[u8]>, u32>,
}

#[derive(Debug)]
struct Slot {
    key: Rc<[u8]>,
    error: u64,
    bucket: u32,
    /// The other slots of the same bucket.
    prev: u32,
    next: u32,
}

#[derive(Debug)]
struct Bucket {
    count: u64,
    /// One of its slots; the rest follow by `next`.
    first: u32,
    /// The neighbouring buckets, by count.
    smaller: u32,
    larger: u32,
}

/// One tracked key, as [`TopKeys::top`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked<'a> {
    pub key: &'a [u8],
    /// At least the key's true count.
    pub count: u64,
    /// How much `count` may exceed the true count.
    pub error: u64,
}

impl Tracked<'_> {
    /// The order of a listing: larger counts first; among equal counts the
    /// surer one (smaller error) first, then by the key's bytes, so that a
    /// listing does not depend on the order keys arrived in.
    fn listing_order(&self, other: &Self) -> Ordering {
        other
            .count
            .cmp(&self.count)
            .then(self.error.cmp(&other.error))
            .then(self.key.cmp(other.key))
    }
}

impl TopKeys {
    /// An empty sketch of `capacity` slots (0: it counts nothing). It takes
    /// memory as keys arrive, not up front.
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity: capacity.min(MAX_CAPACITY),
            total: 0,
            slots: Vec::new(),
            buckets: Vec::new(),
            free_bucket: NONE,
            smallest: NONE,
            largest: NONE,
            index: HashMap::new(),
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// How many occurrences were counted (N).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many keys are tracked (at most the capacity).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Counts one occurrence of `key`: O(1) (amortized: the arenas and the
    /// map grow as keys arrive, up to the capacity).
    pub fn add(&mut self, key: &[u8]) {
        if self.capacity == 0 {
            return;
        }
        self.total = self.total.saturating_add(1);
        if let Some(&slot) = self.index.get(key) {
            self.increment(slot);
        } else if self.slots.len() < self.capacity as usize {
            self.take_free_slot(key);
        } else {
            self.take_over_smallest(key);
        }
    }

    /// The `n` tracked keys of the largest counts, largest first (ties: see
    /// [`Tracked`]). Walks the buckets down from the largest count until it
    /// holds `n` keys: O(n log n) plus the size of the last bucket walked.
    pub fn top(&self, n: usize) -> Vec<Tracked<'_>> {
        let mut listed = Vec::new();
        let mut bucket = self.largest;
        while bucket != NONE && listed.len() < n {
            let b = self.bucket(bucket);
            let mut slot = b.first;
            while slot != NONE {
                let s = self.slot(slot);
                listed.push(Tracked {
                    key: &s.key,
                    count: b.count,
                    error: s.error,
                });
                slot = s.next;
            }
            bucket = b.smaller;
        }
        if listed.len() > n {
            // The last bucket went past `n`: keep the first of it in order.
            listed.select_nth_unstable_by(n, Tracked::listing_order);
            listed.truncate(n);
        }
        listed.sort_unstable_by(Tracked::listing_order);
        listed
    }

    /// What the sketch holds for `key`, if it tracks it.
    pub fn get(&self, key: &[u8]) -> Option<Tracked<'_>> {
        let s = self.slot(*self.index.get(key)?);
        Some(Tracked {
            key: &s.key,
            count: self.bucket(s.bucket).count,
            error: s.error,
        })
    }

    /// A new slot for `key`, of count 1.
    fn take_free_slot(&mut self, key: &[u8]) {
        let slot = self.slots.len() as u32;
        let key: Rc<[u8]> = Rc::from(key);
        grow_up_to(&mut self.slots, self.capacity as usize);
        self.slots.push(Slot {
            key: Rc::clone(&key),
            error: 0,
            bucket: NONE,
            prev: NONE,
            next: NONE,
        });
        self.index.insert(key, slot);
        let ones = if self.smallest != NONE && self.bucket(self.smallest).count == 1 {
            self.smallest
        } else {
            self.new_bucket(1, NONE, self.smallest)
        };
        self.attach(slot, ones);
    }

    /// Gives `key` the slot of a key of the smallest count, counting on
    /// from that count (which becomes its error).
    fn take_over_smallest(&mut self, key: &[u8]) {
        let smallest = self.smallest;
        if smallest == NONE {
            return; // no slot at all: capacity 0, turned away in `add`
        }
        let (slot, min) = {
            let b = self.bucket(smallest);
            (b.first, b.count)
        };
        let key: Rc<[u8]> = Rc::from(key);
        let evicted = std::mem::replace(&mut self.slot_mut(slot).key, Rc::clone(&key));
        self.index.remove(&evicted);
        self.index.insert(key, slot);
        self.slot_mut(slot).error = min;
        self.increment(slot);
    }

    /// Raises `slot`'s count by one: into the next bucket up when its count
    /// is one more, else its bucket's count goes up when it is alone there,
    /// else into a new bucket between the two.
    fn increment(&mut self, slot: u32) {
        let bucket = self.slot(slot).bucket;
        let (count, larger) = {
            let b = self.bucket(bucket);
            (b.count.saturating_add(1), b.larger)
        };
        if larger != NONE && self.bucket(larger).count == count {
            self.detach(slot);
            self.attach(slot, larger);
        } else if self.bucket(bucket).first == slot && self.slot(slot).next == NONE {
            self.bucket_mut(bucket).count = count;
        } else {
            let up = self.new_bucket(count, bucket, larger);
            self.detach(slot);
            self.attach(slot, up);
        }
    }

    /// Puts `slot` at the head of `bucket`'s list.
    fn attach(&mut self, slot: u32, bucket: u32) {
        let first = self.bucket(bucket).first;
        if first != NONE {
            self.slot_mut(first).prev = slot;
        }
        let s = self.slot_mut(slot);
        s.bucket = bucket;
        s.prev = NONE;
        s.next = first;
        self.bucket_mut(bucket).first = slot;
    }

    /// Takes `slot` out of its bucket's list, and the bucket out of the
    /// bucket list when that leaves it empty.
    fn detach(&mut self, slot: u32) {
        let (bucket, prev, next) = {
            let s = self.slot(slot);
            (s.bucket, s.prev, s.next)
        };
        if prev == NONE {
            self.bucket_mut(bucket).first = next;
        } else {
            self.slot_mut(prev).next = next;
        }
        if next != NONE {
            self.slot_mut(next).prev = prev;
        }
        if self.bucket(bucket).first == NONE {
            self.remove_bucket(bucket);
        }
    }

    /// A bucket of `count` between the buckets `smaller` and `larger`
    /// (either `NONE` at an end), from the free list when it has one.
    fn new_bucket(&mut self, count: u64, smaller: u32, larger: u32) -> u32 {
        let bucket = Bucket {
            count,
            first: NONE,
            smaller,
            larger,
        };
        let id = if self.free_bucket == NONE {
            grow_up_to(&mut self.buckets, self.capacity as usize);
            self.buckets.push(bucket);
            self.buckets.len() as u32 - 1
        } else {
            let id = self.free_bucket;
            self.free_bucket = self.bucket(id).larger;
            *self.bucket_mut(id) = bucket;
            id
        };
        if smaller == NONE {
            self.smallest = id;
        } else {
            self.bucket_mut(smaller).larger = id;
        }
        if larger == NONE {
            self.largest = id;
        } else {
            self.bucket_mut(larger).smaller = id;
        }
        id
    }

    /// Unlinks an empty bucket and puts it on the free list.
    fn remove_bucket(&mut self, bucket: u32) {
        let (smaller, larger) = {
            let b = self.bucket(bucket);
            (b.smaller, b.larger)
        };
        if smaller == NONE {
            self.smallest = larger;
        } else {
            self.bucket_mut(smaller).larger = larger;
        }
        if larger == NONE {
            self.largest = smaller;
        } else {
            self.bucket_mut(larger).smaller = smaller;
        }
        let free = self.free_bucket;
        let b = self.bucket_mut(bucket);
        b.smaller = NONE;
        b.larger = free;
        self.free_bucket = bucket;
    }

    // The arenas are indexed only by indices the sketch made itself and
    // keeps valid through every operation above (the tests check every link
    // after every step); no index comes from a client.
    #[allow(clippy::indexing_slicing)]
    fn slot(&self, id: u32) -> &Slot {
        &self.slots[id as usize]
    }

    #[allow(clippy::indexing_slicing)]
    fn slot_mut(&mut self, id: u32) -> &mut Slot {
        &mut self.slots[id as usize]
    }

    #[allow(clippy::indexing_slicing)]
    fn bucket(&self, id: u32) -> &Bucket {
        &self.buckets[id as usize]
    }

    #[allow(clippy::indexing_slicing)]
    fn bucket_mut(&mut self, id: u32) -> &mut Bucket {
        &mut self.buckets[id as usize]
    }
}

/// Makes room for one more element, growing by doubling as usual but never
/// past `limit` elements: an arena that will hold at most the capacity
/// should not reserve twice that.
fn grow_up_to<T>(arena: &mut Vec<T>, limit: usize) {
    if arena.len() == arena.capacity() {
        let more = arena.len().max(4).min(limit.saturating_sub(arena.len()));
        arena.reserve_exact(more.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl TopKeys {
        /// Every link, count and index agrees; panics naming what does not.
        fn check_links(&self) {
            let mut seen = vec![false; self.slots.len()];
            let mut bucket = self.smallest;
            let mut previous: Option<(u32, u64)> = None;
            let mut sum = 0u64;
            while bucket != NONE {
                let b = self.bucket(bucket);
                assert_ne!(b.first, NONE, "empty bucket {bucket} in the list");
                match previous {
                    None => assert_eq!(b.smaller, NONE),
                    Some((id, count)) => {
                        assert_eq!(b.smaller, id, "bucket {bucket}'s smaller link");
                        assert!(count < b.count, "counts must increase");
                    }
                }
                let mut slot = b.first;
                let mut prev = NONE;
                while slot != NONE {
                    let s = self.slot(slot);
                    assert!(!seen[slot as usize], "slot {slot} listed twice");
                    seen[slot as usize] = true;
                    assert_eq!(s.bucket, bucket);
                    assert_eq!(s.prev, prev);
                    assert!(s.error < b.count, "an error is below its count");
                    assert_eq!(self.index.get(&*s.key), Some(&slot));
                    sum += b.count;
                    prev = slot;
                    slot = s.next;
                }
                previous = Some((bucket, b.count));
                bucket = b.larger;
            }
            assert_eq!(self.largest, previous.map_or(NONE, |(id, _)| id));
            assert!(seen.iter().all(|&s| s), "a slot in no bucket");
            assert_eq!(self.index.len(), self.slots.len());
            assert_eq!(sum, self.total, "the counts add up to the total");
            assert!(self.slots.len() <= self.capacity as usize);
        }
    }

    fn listing(sketch: &TopKeys, n: usize) -> Vec<(String, u64, u64)> {
        sketch
            .top(n)
            .iter()
            .map(|t| {
                (
                    String::from_utf8_lossy(t.key).into_owned(),
                    t.count,
                    t.error,
                )
            })
            .collect()
    }

    fn owned(rows: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
        rows.iter()
            .map(|(k, c, e)| (k.to_string(), *c, *e))
            .collect()
    }

    #[test]
    fn counts_are_exact_while_every_key_has_a_slot() {
        let mut sketch = TopKeys::new(3);
        for key in ["a", "b", "a", "c", "a", "b"] {
            sketch.add(key.as_bytes());
            sketch.check_links();
        }
        assert_eq!(
            listing(&sketch, 10),
            owned(&[("a", 3, 0), ("b", 2, 0), ("c", 1, 0)])
        );
        assert_eq!(sketch.total(), 6);
        assert_eq!(sketch.len(), 3);
    }

    #[test]
    fn a_new_key_takes_over_the_smallest_count_as_its_error() {
        let mut sketch = TopKeys::new(2);
        for key in ["a", "a", "a", "b", "b", "c"] {
            sketch.add(key.as_bytes());
        }
        sketch.check_links();
        // c took b's slot (count 2): 3 at most, of which 2 may be b's.
        assert_eq!(listing(&sketch, 10), owned(&[("a", 3, 0), ("c", 3, 2)]));
        assert_eq!(sketch.get(b"b"), None);
    }

    #[test]
    fn ties_list_the_surer_count_first_then_by_key() {
        let mut sketch = TopKeys::new(2);
        for key in ["x", "x", "y", "c"] {
            sketch.add(key.as_bytes());
        }
        // c took y's slot (count 1): x (2, 0) and c (2, 1) tie at 2.
        assert_eq!(listing(&sketch, 10), owned(&[("x", 2, 0), ("c", 2, 1)]));
        let mut ties = TopKeys::new(5);
        for key in ["d", "b", "c", "a"] {
            ties.add(key.as_bytes());
        }
        assert_eq!(
            listing(&ties, 2),
            owned(&[("a", 1, 0), ("b", 1, 0)]),
            "the first of a tie in key order, whatever the arrival order"
        );
    }

    #[test]
    fn top_lists_at_most_what_is_asked_and_what_is_tracked() {
        let mut sketch = TopKeys::new(100);
        for i in 0..10u8 {
            for _ in 0..=i {
                sketch.add(&[b'k', b'0' + i]);
            }
        }
        assert_eq!(sketch.top(3).len(), 3);
        assert_eq!(sketch.top(3)[0].key, b"k9");
        assert_eq!(sketch.top(1000).len(), 10);
        assert!(sketch.top(0).is_empty());
    }

    #[test]
    fn a_sketch_of_no_slots_counts_nothing() {
        let mut sketch = TopKeys::new(0);
        sketch.add(b"a");
        assert_eq!(sketch.total(), 0);
        assert!(sketch.top(10).is_empty());
        assert!(sketch.is_empty());
    }

    #[test]
    fn one_slot_follows_the_latest_key_and_counts_everything() {
        let mut sketch = TopKeys::new(1);
        for key in ["a", "b", "b", "c"] {
            sketch.add(key.as_bytes());
            sketch.check_links();
        }
        assert_eq!(listing(&sketch, 5), owned(&[("c", 4, 3)]));
    }

    #[test]
    fn empty_and_long_keys_are_keys_like_any_other() {
        let long = vec![7u8; 100_000];
        let mut sketch = TopKeys::new(4);
        for key in [&b""[..], &long, b"", &long, &long] {
            sketch.add(key);
        }
        sketch.check_links();
        assert_eq!(sketch.get(&long).map(|t| t.count), Some(3));
        assert_eq!(sketch.get(b"").map(|t| t.count), Some(2));
    }

    #[test]
    fn the_arenas_never_reserve_past_the_capacity() {
        let mut sketch = TopKeys::new(5);
        for i in 0..50u8 {
            sketch.add(&[i]);
            sketch.add(&[i % 3]);
        }
        sketch.check_links();
        assert!(sketch.slots.capacity() <= 5);
        assert!(sketch.buckets.capacity() <= 5);
    }

    /// Keys from a small alphabet with a few frequent ones, so that streams
    /// both fit and overflow the sketch and evictions happen often.
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                3 => 0u8..4,   // heavy hitters
                2 => 0u8..64,  // the long tail
            ],
            0..600,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Space-Saving's guarantees, against an exact count of the same
        /// stream, after every step.
        #[test]
        fn counts_bound_the_truth_and_every_frequent_key_is_tracked(
            capacity in 1u32..24,
            keys in stream(),
        ) {
            let mut sketch = TopKeys::new(capacity);
            let mut exact: HashMap<u8, u64> = HashMap::new();
            for (step, key) in keys.iter().enumerate() {
                sketch.add(&[*key]);
                *exact.entry(*key).or_default() += 1;
                let n = step as u64 + 1;
                prop_assert_eq!(sketch.total(), n);
                if step % 25 == 0 || step + 1 == keys.len() {
                    sketch.check_links();
                }
                let m = u64::from(capacity);
                let min = sketch.top(usize::MAX).last().map_or(0, |t| t.count);
                for (&k, &truth) in &exact {
                    match sketch.get(&[k]) {
                        Some(t) => {
                            prop_assert!(t.count - t.error <= truth, "{k}: {t:?} > {truth}");
                            prop_assert!(truth <= t.count, "{k}: {t:?} < {truth}");
                            prop_assert!(t.error * m <= n, "error {} > N/m", t.error);
                        }
                        None => {
                            prop_assert!(truth * m <= n, "{k} ({truth} of {n}) untracked");
                            prop_assert!(truth <= min, "{k} ({truth}) untracked, min {min}");
                        }
                    }
                }
                if exact.len() <= capacity as usize {
                    for (&k, &truth) in &exact {
                        prop_assert_eq!(sketch.get(&[k]).map(|t| (t.count, t.error)), Some((truth, 0)));
                    }
                }
            }
        }

        /// A listing is the tracked keys in listing order, cut at `n`.
        #[test]
        fn top_n_is_the_first_n_of_every_tracked_key_in_order(
            capacity in 1u32..24,
            keys in stream(),
            n in 0usize..30,
        ) {
            let mut sketch = TopKeys::new(capacity);
            for key in &keys {
                sketch.add(&[*key]);
            }
            let mut all: Vec<Tracked<'_>> = sketch
                .index
                .keys()
                .filter_map(|k| sketch.get(k))
                .collect();
            all.sort_by(Tracked::listing_order);
            all.truncate(n);
            prop_assert_eq!(sketch.top(n), all);
        }
    }
}
