//! A set of workers in address order (the order Dask iterates `idle` and `running`
//! in), as a sorted list cut into blocks of at most `2 × BLOCK` members.
//!
//! A sorted vector made a worker joining or leaving `idle`, or a load group of
//! `idle_task_count`, shift half the vector, and that happens at every task: with
//! 10,000 workers it was most of the scheduler's time that grew with the workers
//! (docs/core.md#many-workers). In blocks, a change shifts one block (and, rarely, the
//! list of blocks); lookups binary-search the blocks' last members, kept side by side
//! in one vector (reading them from the blocks was a cache miss per step of the search
//! with thousands of workers), then one block. The `i`-th member, which the round-robin
//! choice asks for, walks the block lengths.

use crate::ids::WorkerId;

/// Blocks split in two past twice this many members.
const BLOCK: usize = 64;

type Item = (u32, WorkerId);

#[derive(Clone, Debug, Default)]
pub struct WorkerSet {
    /// Sorted, each ≤ 2 × BLOCK, every member of one below every member of the next;
    /// none empty but a sole block, kept so that a set that empties and fills again
    /// at every task (`idle` with one worker) does not allocate each time.
    blocks: Vec<Vec<Item>>,
    /// Each non-empty block's last member, in block order.
    lasts: Vec<Item>,
    len: usize,
}

impl WorkerSet {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block that holds `x` if any member does: the first whose last member is
    /// not below it (`blocks.len()` if none).
    fn block_of(&self, x: Item) -> usize {
        self.lasts.partition_point(|&last| last < x)
    }

    pub fn contains(&self, rank: u32, w: WorkerId) -> bool {
        let x = (rank, w);
        let b = self.block_of(x);
        b < self.blocks.len() && self.blocks[b].binary_search(&x).is_ok()
    }

    pub fn insert(&mut self, rank: u32, w: WorkerId) {
        let x = (rank, w);
        if self.blocks.is_empty() {
            self.blocks.push(Vec::new());
        }
        // Past every member: it goes to the end of the last block.
        let b = self.block_of(x).min(self.blocks.len() - 1);
        let block = &mut self.blocks[b];
        let Err(i) = block.binary_search(&x) else {
            return;
        };
        block.insert(i, x);
        self.len += 1;
        if i + 1 == block.len() {
            match self.lasts.get_mut(b) {
                Some(last) => *last = x,
                None => self.lasts.push(x), // the sole block was empty
            }
        }
        if block.len() > 2 * BLOCK {
            let upper = block.split_off(BLOCK);
            self.lasts[b] = block[BLOCK - 1];
            self.lasts.insert(b + 1, upper[upper.len() - 1]);
            self.blocks.insert(b + 1, upper);
        }
    }

    pub fn remove(&mut self, rank: u32, w: WorkerId) {
        let x = (rank, w);
        let b = self.block_of(x);
        let Some(block) = self.blocks.get_mut(b) else {
            return;
        };
        let Ok(i) = block.binary_search(&x) else {
            return;
        };
        block.remove(i);
        self.len -= 1;
        match block.last() {
            None => {
                self.lasts.remove(b);
                if self.blocks.len() > 1 {
                    self.blocks.remove(b);
                }
            }
            Some(&last) if i == block.len() => self.lasts[b] = last,
            Some(_) => {}
        }
    }

    /// Members in address order.
    pub fn iter(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.blocks.iter().flatten().map(|&(_, w)| w)
    }

    /// The `i`-th member in address order; `i` must be below `len()`.
    pub fn get(&self, mut i: usize) -> WorkerId {
        for block in &self.blocks {
            if i < block.len() {
                return block[i].1;
            }
            i -= block.len();
        }
        panic!("worker set index {i} past its end ({} members)", self.len)
    }

    /// Address ranks changed (a worker joined or left): `rank` is every worker's new one.
    pub(crate) fn rerank(&mut self, rank: &[u32]) {
        let mut items: Vec<Item> = self
            .blocks
            .iter()
            .flatten()
            .map(|&(_, w)| (rank[w.idx()], w))
            .collect();
        items.sort_unstable();
        self.blocks = items.chunks(BLOCK).map(<[Item]>::to_vec).collect();
        self.lasts = self
            .blocks
            .iter()
            .filter_map(|b| b.last().copied())
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32),
        Remove(u32),
        /// Reverse the address order of all workers.
        Rerank,
    }

    fn op(workers: u32) -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..workers).prop_map(Op::Insert),
            3 => (0..workers).prop_map(Op::Remove),
            1 => Just(Op::Rerank),
        ]
    }

    proptest! {
        /// Against an ordered set: membership, order, length and the i-th member, across
        /// block splits (up to 600 workers: several blocks) and emptied blocks.
        #[test]
        fn behaves_as_an_ordered_set(ops in prop::collection::vec(op(600), 1..1500)) {
            let mut set = WorkerSet::default();
            let mut model: BTreeSet<Item> = BTreeSet::new();
            let mut rank: Vec<u32> = (0..600).map(|w| w * 7).collect();
            for op in ops {
                match op {
                    Op::Insert(w) => {
                        set.insert(rank[w as usize], WorkerId(w));
                        model.insert((rank[w as usize], WorkerId(w)));
                    }
                    Op::Remove(w) => {
                        set.remove(rank[w as usize], WorkerId(w));
                        model.remove(&(rank[w as usize], WorkerId(w)));
                    }
                    Op::Rerank => {
                        for r in rank.iter_mut() {
                            *r = 600 * 7 - *r;
                        }
                        set.rerank(&rank);
                        model = model.iter().map(|&(_, w)| (rank[w.idx()], w)).collect();
                    }
                }
                prop_assert_eq!(set.len(), model.len());
                let members: Vec<WorkerId> = model.iter().map(|&(_, w)| w).collect();
                prop_assert_eq!(set.iter().collect::<Vec<_>>(), members.clone());
                for (i, &w) in members.iter().enumerate().step_by(37) {
                    prop_assert_eq!(set.get(i), w);
                    prop_assert!(set.contains(rank[w.idx()], w));
                }
                prop_assert!(set.blocks.iter().all(|b| b.len() <= 2 * BLOCK));
                prop_assert!(set.blocks.len() == 1 || set.blocks.iter().all(|b| !b.is_empty()));
                let lasts: Vec<Item> = set.blocks.iter().filter_map(|b| b.last().copied()).collect();
                prop_assert_eq!(&set.lasts, &lasts);
            }
        }
    }
}
