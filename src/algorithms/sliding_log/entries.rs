//! The sliding log's memory: a queue of entries, each a gap in ms since the
//! entry before it and a count, packed in 32-bit words (the layout is
//! described in the parent module). This file knows nothing of windows or
//! limits, only how entries are stored, grown, shrunk and encoded.

use std::collections::VecDeque;

use crate::encoding::{ensure, put_u32, DecodeError, Reader};

/// Bits of the gap kept in the head word.
const GAP_BITS: u32 = 29;
const GAP_LOW: u32 = (1 << GAP_BITS) - 1;
/// Head flag: an extension word holds `gap >> GAP_BITS`.
pub(crate) const GAP_HIGH: u32 = 1 << 29;
/// Head flag: one extension word holds the count.
pub(crate) const COUNT32: u32 = 1 << 30;
/// Head flag: two extension words (low, high) hold the count.
pub(crate) const COUNT64: u32 = 1 << 31;

/// One remembered millisecond: `count` allowed `gap` ms after the entry
/// before it (the oldest entry's gap is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub gap: u64,
    pub count: u64,
}

/// An entry's words: its head and up to three extension words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packed {
    head: u32,
    extra: [u32; 3],
    len: usize,
}

impl Packed {
    fn push(&mut self, word: u32) {
        if let Some(slot) = self.extra.get_mut(self.len) {
            *slot = word;
            self.len += 1;
        }
    }

    fn extra(&self) -> &[u32] {
        self.extra.get(..self.len).unwrap_or(&[])
    }
}

/// The shortest words for `entry`: the only form decoding accepts.
fn pack(entry: Entry) -> Packed {
    let mut packed = Packed {
        head: (entry.gap & u64::from(GAP_LOW)) as u32,
        extra: [0; 3],
        len: 0,
    };
    let gap_high = entry.gap >> GAP_BITS;
    if gap_high != 0 {
        packed.head |= GAP_HIGH;
        packed.push(u32::try_from(gap_high).unwrap_or(u32::MAX));
    }
    match u32::try_from(entry.count) {
        Ok(0 | 1) => {}
        Ok(count) => {
            packed.head |= COUNT32;
            packed.push(count);
        }
        Err(_) => {
            packed.head |= COUNT64;
            packed.push(entry.count as u32);
            packed.push((entry.count >> 32) as u32);
        }
    }
    packed
}

/// How many extension words follow a head.
fn extra_len(head: u32) -> usize {
    let gap = usize::from(head & GAP_HIGH != 0);
    let count = if head & COUNT64 != 0 {
        2
    } else {
        usize::from(head & COUNT32 != 0)
    };
    gap + count
}

/// The entry of `head`, its extension words taken from `words`; `None` when
/// words are missing or the head is not one [`pack`] writes.
fn unpack(head: u32, words: &mut impl Iterator<Item = u32>) -> Option<Entry> {
    let mut gap = u64::from(head & GAP_LOW);
    if head & GAP_HIGH != 0 {
        gap |= u64::from(words.next()?) << GAP_BITS;
    }
    let count = match (head & COUNT32 != 0, head & COUNT64 != 0) {
        (false, false) => 1,
        (true, false) => u64::from(words.next()?),
        (false, true) => {
            let low = words.next()?;
            let high = words.next()?;
            u64::from(low) | u64::from(high) << 32
        }
        (true, true) => return None,
    };
    Some(Entry { gap, count })
}

/// Makes room for `words` more, growing by an eighth rather than doubling:
/// still O(1) amortised, and at most about 12% of the capacity left unused;
/// never beyond `max_len` (the most the queue can ever hold) unless `words`
/// needs it, so a full log holds no spare room.
fn reserve(queue: &mut VecDeque<u32>, words: usize, max_len: usize) {
    if queue.capacity() - queue.len() < words {
        let room = max_len.saturating_sub(queue.len());
        queue.reserve_exact((queue.len() / 8 + 4).min(room).max(words));
    }
}

/// Gives back capacity once the queue is under a quarter full.
fn shrink(queue: &mut VecDeque<u32>) {
    if queue.capacity() >= 64 && queue.len() < queue.capacity() / 4 {
        queue.shrink_to(queue.len() * 2);
    }
}

/// The entries, oldest first, as head words and extension words.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EntryQueue {
    /// One word per entry: flags and the low bits of the gap.
    heads: VecDeque<u32>,
    /// The extension words of the entries whose heads ask for them, in entry
    /// order.
    extra: VecDeque<u32>,
}

impl Clone for EntryQueue {
    /// Leaves room for the one entry a check may add, and no more: the Redis
    /// layer checks on a copy and stores that copy, so without the room every
    /// allowed request would double the capacity, and with more the stored
    /// logs would hold it unused.
    fn clone(&self) -> Self {
        let mut heads = VecDeque::with_capacity(self.heads.len() + 1);
        heads.extend(self.heads.iter().copied());
        let room = if self.extra.is_empty() { 0 } else { 3 };
        let mut extra = VecDeque::with_capacity(self.extra.len() + room);
        extra.extend(self.extra.iter().copied());
        Self { heads, extra }
    }
}

impl EntryQueue {
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn front(&self) -> Option<Entry> {
        let head = *self.heads.front()?;
        unpack(head, &mut self.extra.iter().copied())
    }

    pub fn iter(&self) -> impl Iterator<Item = Entry> + '_ {
        let mut words = self.extra.iter().copied();
        self.heads
            .iter()
            .map_while(move |&head| unpack(head, &mut words))
    }

    /// Appends `entry`; the queue will never hold more than `max_entries`.
    #[inline(always)]
    pub fn push_back(&mut self, entry: Entry, max_entries: usize) {
        if entry.count == 1 && entry.gap <= u64::from(GAP_LOW) {
            // What `pack` writes for it: the gap alone in the head, no
            // extension word (a request of cost 1 less than 6.2 days after
            // the one before it: nearly every entry).
            reserve(&mut self.heads, 1, max_entries);
            self.heads.push_back(entry.gap as u32);
            return;
        }
        self.push_back_packed(entry, max_entries);
    }

    /// [`EntryQueue::push_back`] of any entry.
    fn push_back_packed(&mut self, entry: Entry, max_entries: usize) {
        let packed = pack(entry);
        reserve(&mut self.heads, 1, max_entries);
        reserve(&mut self.extra, packed.len, usize::MAX);
        self.heads.push_back(packed.head);
        self.extra.extend(packed.extra().iter().copied());
    }

    pub fn push_front(&mut self, entry: Entry, max_entries: usize) {
        let packed = pack(entry);
        reserve(&mut self.heads, 1, max_entries);
        reserve(&mut self.extra, packed.len, usize::MAX);
        for &word in packed.extra().iter().rev() {
            self.extra.push_front(word);
        }
        self.heads.push_front(packed.head);
    }

    pub fn pop_front(&mut self) -> Option<Entry> {
        let head = self.heads.pop_front()?;
        let extra = &mut self.extra;
        let mut words = std::iter::from_fn(|| extra.pop_front()).take(extra_len(head));
        let entry = unpack(head, &mut words);
        words.for_each(drop);
        entry
    }

    pub fn pop_back(&mut self) -> Option<Entry> {
        let head = self.heads.pop_back()?;
        let mut words = [0; 3];
        let len = extra_len(head).min(words.len());
        for slot in words.iter_mut().take(len).rev() {
            *slot = self.extra.pop_back()?;
        }
        unpack(head, &mut words.into_iter().take(len))
    }

    pub fn shrink(&mut self) {
        shrink(&mut self.heads);
        shrink(&mut self.extra);
    }

    pub fn heap_bytes(&self) -> usize {
        (self.heads.capacity() + self.extra.capacity()) * std::mem::size_of::<u32>()
    }

    /// Room for `entries` more heads, exactly (a log being decoded).
    pub fn reserve_exact(&mut self, entries: usize) {
        self.heads.reserve_exact(entries);
    }

    /// Gives back every unused word of capacity.
    pub fn shrink_to_fit(&mut self) {
        self.heads.shrink_to_fit();
        self.extra.shrink_to_fit();
    }

    /// Extension words held (for tests of the packing).
    #[cfg(test)]
    pub fn extra_words(&self) -> usize {
        self.extra.len()
    }

    /// Each entry's words as little-endian `u32`s, oldest first: its head,
    /// then its extension words.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut words = self.extra.iter();
        for &head in &self.heads {
            put_u32(out, head);
            for &word in words.by_ref().take(extra_len(head)) {
                put_u32(out, word);
            }
        }
    }
}

/// Reads one entry written by [`EntryQueue::encode`]: only the shortest form
/// [`pack`] writes is accepted, so every state has one encoding.
pub(crate) fn decode_entry(input: &mut Reader<'_>) -> Result<Entry, DecodeError> {
    let head = input.u32()?;
    let mut words = [0; 3];
    let len = extra_len(head).min(words.len());
    for slot in words.iter_mut().take(len) {
        *slot = input.u32()?;
    }
    let entry = unpack(head, &mut words.into_iter().take(len))
        .ok_or(DecodeError("entry flags out of range"))?;
    let canonical = Packed {
        head,
        extra: words,
        len,
    };
    ensure(pack(entry) == canonical, "entry not in its shortest form")?;
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Gaps and counts on both sides of every edge of the packing.
    fn edge_u64() -> impl Strategy<Value = u64> {
        let low = u64::from(GAP_LOW);
        prop_oneof![
            0u64..=3,
            (0u64..=2).prop_map(move |d| low - 1 + d),
            (0u64..=2).prop_map(|d| u64::from(u32::MAX) - 1 + d),
            (0u64..=3).prop_map(|d| u64::MAX - d),
            any::<u64>(),
            0u64..1_000_000,
        ]
    }

    proptest! {
        /// Appending a plain entry (a count of 1, a short gap) without
        /// packing it leaves the queue, its capacity included, as packing
        /// it does.
        #[test]
        fn a_plain_entry_is_appended_as_packing_appends_it(
            entries in prop::collection::vec((edge_u64(), prop_oneof![Just(1u64), edge_u64()]), 1..60),
            max_entries in prop_oneof![Just(usize::MAX), 1usize..40],
        ) {
            let (mut fast, mut packed) = (EntryQueue::default(), EntryQueue::default());
            for (gap, count) in entries {
                let entry = Entry { gap, count };
                fast.push_back(entry, max_entries);
                packed.push_back_packed(entry, max_entries);
                prop_assert_eq!(&fast, &packed);
                prop_assert_eq!(fast.heads.capacity(), packed.heads.capacity());
                prop_assert_eq!(fast.extra.capacity(), packed.extra.capacity());
            }
        }
    }
}
