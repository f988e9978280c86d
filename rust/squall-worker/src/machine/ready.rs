//! The ready queue: the best entry first. Tasks mostly become ready in priority order
//! (a `map`'s batch, a layer of a collection), so entries that come no better than the
//! last one queued go to a sorted run, taken from its front in O(1) and read in memory
//! order; only the others go to a heap, whose pops jump across a large array (cache
//! misses on every level, docs/runtime.md#memory). The best of both fronts is taken.

use std::collections::{BinaryHeap, VecDeque};

pub(super) struct ReadyQueue<E> {
    /// Best first: each entry is no better than the one before it.
    run: VecDeque<E>,
    heap: BinaryHeap<E>,
}

impl<E: Ord> Default for ReadyQueue<E> {
    fn default() -> Self {
        Self {
            run: VecDeque::new(),
            heap: BinaryHeap::new(),
        }
    }
}

impl<E: Ord> ReadyQueue<E> {
    pub(super) fn push(&mut self, e: E) {
        match self.run.back() {
            Some(last) if e > *last => self.heap.push(e),
            _ => self.run.push_back(e),
        }
    }

    /// The best entry (the greatest).
    pub(super) fn pop(&mut self) -> Option<E> {
        match (self.run.front(), self.heap.peek()) {
            (Some(r), Some(h)) if h > r => self.heap.pop(),
            (Some(_), _) => self.run.pop_front(),
            (None, _) => self.heap.pop(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.run.is_empty() && self.heap.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &E> {
        self.run.iter().chain(self.heap.iter())
    }
}

impl<E: Ord> Extend<E> for ReadyQueue<E> {
    fn extend<I: IntoIterator<Item = E>>(&mut self, entries: I) {
        entries.into_iter().for_each(|e| self.push(e));
    }
}

#[cfg(test)]
mod tests {
    use super::ReadyQueue;
    use proptest::prelude::*;

    proptest! {
        /// Pops come out greatest first, however pushes and pops interleave.
        #[test]
        fn pops_are_the_greatest_first(ops in prop::collection::vec(prop::option::of(0u8..20), 0..200)) {
            let mut q = ReadyQueue::default();
            let mut model: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Some(e) => { q.push(e); model.push(e); }
                    None => {
                        model.sort_unstable();
                        prop_assert_eq!(q.pop(), model.pop());
                    }
                }
                prop_assert_eq!(q.is_empty(), model.is_empty());
            }
        }
    }
}
