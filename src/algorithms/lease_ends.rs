//! The leases of a large lease set (see `concurrency`) in the order they
//! end: `(ends_ms, id)`, earliest first, ties by id.
//!
//! Kept in blocks of up to `2 * BLOCK` leases, each block sorted and every
//! block's leases after the previous block's, so that a command on a key
//! holding a million leases, many of them ended and not dropped yet, costs
//! about a microsecond, not a walk of the million:
//! - counting the leases that ended by a time, or finding the first that has
//!   not, walks the blocks that ended whole (adding their lengths), then
//!   searches one block: O(n / BLOCK + log BLOCK);
//! - adding or removing one lease searches for its block, then shifts at
//!   most `2 * BLOCK` entries of it: O(log n + BLOCK);
//! - dropping ended leases takes them from the front, as many as the caller
//!   allows (see `concurrency::MAX_SWEPT`).

use std::rc::Rc;

/// A lease id, shared with the index by id.
pub(crate) type Id = Rc<[u8]>;

/// The usual number of leases in a block: a block splits in two above
/// twice this, and merges with the next below a quarter of it.
const BLOCK: usize = 512;

/// A run of leases, in order, with the end of its last one kept beside
/// it, so that walking the blocks reads one array and no lease.
#[derive(Debug, Clone)]
struct Block {
    /// The end of the last lease in `leases`.
    last_end: i64,
    /// Never empty while the block is in a list.
    leases: Vec<(i64, Id)>,
}

impl Block {
    fn new(leases: Vec<(i64, Id)>) -> Self {
        let mut block = Self {
            last_end: 0,
            leases,
        };
        block.refresh();
        block
    }

    /// Brings `last_end` up to date after a change of `leases`.
    fn refresh(&mut self) {
        self.last_end = self.leases.last().map_or(i64::MIN, |(end, _)| *end);
    }

    /// Whether every lease here sorts before `(ends_ms, id)`.
    fn before(&self, ends_ms: i64, id: &[u8]) -> bool {
        self.last_end < ends_ms
            || (self.last_end == ends_ms
                && self.leases.last().is_some_and(|l| key(l) < (ends_ms, id)))
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseEnds {
    blocks: Vec<Block>,
    len: usize,
}

/// The same leases in the same order are the same, however blocked.
impl PartialEq for LeaseEnds {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for LeaseEnds {}

fn key(lease: &(i64, Id)) -> (i64, &[u8]) {
    (lease.0, &lease.1)
}

impl LeaseEnds {
    /// The leases of `sorted`, which is in order.
    pub fn from_sorted(sorted: impl IntoIterator<Item = (i64, Id)>) -> Self {
        let mut ends = Self::default();
        let mut leases = Vec::with_capacity(BLOCK);
        for lease in sorted {
            leases.push(lease);
            if leases.len() == BLOCK {
                let full = std::mem::replace(&mut leases, Vec::with_capacity(BLOCK));
                ends.len += full.len();
                ends.blocks.push(Block::new(full));
            }
        }
        if !leases.is_empty() {
            ends.len += leases.len();
            ends.blocks.push(Block::new(leases));
        }
        ends
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Every lease, earliest end first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &(i64, Id)> + '_ {
        self.blocks.iter().flat_map(|block| &block.leases)
    }

    /// The index of the block where `(ends_ms, id)` is or belongs: the first
    /// whose last lease is not before it, or the last block.
    fn block_of(&self, ends_ms: i64, id: &[u8]) -> usize {
        let at = self
            .blocks
            .partition_point(|block| block.before(ends_ms, id));
        at.min(self.blocks.len().saturating_sub(1))
    }

    /// Adds a lease (of an id that holds none).
    pub fn insert(&mut self, ends_ms: i64, id: Id) {
        let b = self.block_of(ends_ms, &id);
        let Some(block) = self.blocks.get_mut(b) else {
            self.blocks.push(Block::new(vec![(ends_ms, id)]));
            self.len += 1;
            return;
        };
        let at = block.leases.partition_point(|l| key(l) < (ends_ms, &id));
        block.leases.insert(at, (ends_ms, id));
        block.refresh();
        self.len += 1;
        if block.leases.len() > 2 * BLOCK {
            let upper = Block::new(block.leases.split_off(BLOCK));
            block.refresh();
            self.blocks.insert(b + 1, upper);
        }
    }

    /// Removes the lease `(ends_ms, id)`; whether it was there.
    pub fn remove(&mut self, ends_ms: i64, id: &[u8]) -> bool {
        let b = self.block_of(ends_ms, id);
        let Some(block) = self.blocks.get_mut(b) else {
            return false;
        };
        let Ok(at) = block
            .leases
            .binary_search_by(|l| key(l).cmp(&(ends_ms, id)))
        else {
            return false;
        };
        block.leases.remove(at);
        block.refresh();
        self.len -= 1;
        let small = block.leases.len() < BLOCK / 4;
        if block.leases.is_empty() {
            self.blocks.remove(b);
        } else if small
            && self
                .blocks
                .get(b + 1)
                .is_some_and(|next| next.leases.len() < BLOCK)
        {
            let next = self.blocks.remove(b + 1);
            if let Some(block) = self.blocks.get_mut(b) {
                block.leases.extend(next.leases);
                block.refresh();
            }
        }
        true
    }

    /// How many leases ended by `now_ms` (end at or before it).
    pub fn ended_by(&self, now_ms: i64) -> usize {
        let mut ended = 0;
        for block in &self.blocks {
            if block.last_end > now_ms {
                return ended + block.leases.partition_point(|(end, _)| *end <= now_ms);
            }
            ended += block.leases.len();
        }
        ended
    }

    /// The leases that have not ended at `now_ms`, earliest end first: the
    /// ended ones (always the first) are skipped by a search of the blocks,
    /// not a walk, so taking a few costs O(log n) however many ended.
    pub fn live_at(&self, now_ms: i64) -> impl Iterator<Item = &(i64, Id)> + '_ {
        let b = self
            .blocks
            .partition_point(|block| block.last_end <= now_ms);
        let (first, rest) = match self.blocks.get(b..) {
            Some([first, rest @ ..]) => {
                let at = first.leases.partition_point(|(end, _)| *end <= now_ms);
                (first.leases.get(at..).unwrap_or(&[]), rest)
            }
            _ => (&[][..], &[][..]),
        };
        first
            .iter()
            .chain(rest.iter().flat_map(|block| &block.leases))
    }

    /// The end of the first lease that has not ended at `now_ms`.
    pub fn first_after(&self, now_ms: i64) -> Option<i64> {
        let block = self.blocks.iter().find(|block| block.last_end > now_ms)?;
        let at = block.leases.partition_point(|(end, _)| *end <= now_ms);
        block.leases.get(at).map(|(end, _)| *end)
    }

    /// Removes up to `most` leases that ended by `now_ms`, earliest first,
    /// handing each id to `dropped`.
    pub fn drop_ended(&mut self, now_ms: i64, most: usize, mut dropped: impl FnMut(Id)) {
        let mut left = most;
        while left > 0 {
            let Some(block) = self.blocks.first_mut() else {
                return;
            };
            let n = block
                .leases
                .partition_point(|(end, _)| *end <= now_ms)
                .min(left);
            if n == 0 {
                return;
            }
            block.leases.drain(..n).for_each(|(_, id)| dropped(id));
            self.len -= n;
            left -= n;
            if !block.leases.is_empty() {
                return;
            }
            self.blocks.remove(0);
        }
    }

    /// Bytes of heap the blocks take (not the ids).
    pub fn heap_bytes(&self) -> usize {
        let lease = std::mem::size_of::<(i64, Id)>();
        self.blocks.capacity() * std::mem::size_of::<Block>()
            + self
                .blocks
                .iter()
                .map(|b| b.leases.capacity() * lease)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn id(n: u64) -> Id {
        Id::from(format!("id-{n}").as_bytes())
    }

    /// Against the plain ordered set it replaces, over random operations
    /// on a few thousand leases, so that blocks split, empty and merge:
    /// ends on a coarse grid (many leases end at the same moment, across
    /// the edges of blocks, and at the very time asked about), drops rare
    /// and large (they span blocks), and once everything dropped.
    #[test]
    fn it_counts_finds_and_drops_as_an_ordered_set_does() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut model: BTreeSet<(i64, Id)> = (0..3000)
            .map(|n| {
                let end = 100 * next(400) as i64;
                (end, Id::from(format!("first-{n}").as_bytes()))
            })
            .collect();
        let mut ends = LeaseEnds::from_sorted(model.iter().cloned());
        let (mut most_blocks, mut spanning_drops) = (0, 0);
        for step in 0..20_000 {
            let now = 10 * step as i64;
            if step == 10_000 {
                let mut dropped = 0;
                ends.drop_ended(i64::MAX, usize::MAX, |_| dropped += 1);
                assert_eq!((dropped, ends.len()), (model.len(), 0));
                assert!(ends.blocks.is_empty());
                model.clear();
            }
            // No drop before step 5000, then one of up to 2,500 leases (the
            // first ones have all ended): a drop across blocks.
            let choice = match (step, next(50)) {
                (5000, _) => 49,
                (step, 49) if step < 5000 => 0,
                (_, choice) => choice,
            };
            match choice {
                0..=29 => {
                    let lease = (now + 100 * next(300) as i64, id(next(5000)));
                    if model.insert(lease.clone()) {
                        ends.insert(lease.0, lease.1);
                    }
                }
                30..=48 => {
                    let pick = model.iter().nth(next(model.len().max(1) as u64) as usize);
                    if let Some(lease) = pick.cloned() {
                        model.remove(&lease);
                        assert!(ends.remove(lease.0, &lease.1));
                    }
                    assert!(!ends.remove(now, b"absent"));
                }
                _ => {
                    let most = if step == 5000 {
                        2500
                    } else {
                        next(3000) as usize
                    };
                    let mut dropped = Vec::new();
                    ends.drop_ended(now, most, |id| dropped.push(id));
                    let expected: Vec<Id> = model
                        .iter()
                        .take_while(|(end, _)| *end <= now)
                        .take(most)
                        .map(|(_, id)| id.clone())
                        .collect();
                    assert_eq!(dropped, expected, "step {step}");
                    spanning_drops += usize::from(dropped.len() > 2 * BLOCK);
                    for _ in 0..expected.len() {
                        model.pop_first();
                    }
                }
            }
            assert_eq!(ends.len(), model.len());
            let ended = model.iter().take_while(|(end, _)| *end <= now).count();
            assert_eq!(ends.ended_by(now), ended, "step {step}");
            let first = model.iter().map(|l| l.0).find(|end| *end > now);
            assert_eq!(ends.first_after(now), first);
            assert!(ends
                .live_at(now)
                .take(3)
                .eq(model.iter().filter(|(end, _)| *end > now).take(3)));
            assert_eq!(ends.iter().next_back(), model.last());
            assert!(ends.blocks.iter().all(|b| {
                !b.leases.is_empty()
                    && b.leases.len() <= 2 * BLOCK
                    && b.leases.last().map(|l| l.0) == Some(b.last_end)
            }));
            if step % 1000 == 0 {
                assert!(ends.iter().eq(model.iter()));
                assert!(ends
                    .live_at(now)
                    .eq(model.iter().filter(|(end, _)| *end > now)));
            }
            most_blocks = most_blocks.max(ends.blocks.len());
        }
        assert!(most_blocks > 3, "blocks: {most_blocks}");
        assert!(spanning_drops > 0, "no drop spanned blocks");
        assert_eq!(LeaseEnds::from_sorted(model.iter().cloned()), ends);
    }
}
