//! The scheduler's `queued` set (Dask's HeapSet): queued tasks by priority, ties by
//! insertion order.
//!
//! Graphs queue their tasks in priority order, so entries that arrive in order go to
//! a sorted run (O(1) at both ends, sequential memory); only out-of-order entries go to
//! a binary heap. Removal is lazy: a removed entry is recognised as stale (the caller's
//! `is_live`) and dropped when it reaches the front, or by compaction.

use crate::ids::TaskId;
use squall_priority::Priority;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

type Entry = (Priority, u64, TaskId);

#[derive(Default)]
pub struct TaskQueue {
    run: VecDeque<Entry>,
    heap: BinaryHeap<Reverse<Entry>>,
    live: usize,
}

impl TaskQueue {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// `seq` must grow with every insertion; the task keeps it while queued.
    pub fn insert(&mut self, p: Priority, seq: u64, t: TaskId) {
        let e = (p, seq, t);
        if self.run.back().is_none_or(|b| *b <= e) {
            self.run.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
        self.live += 1;
    }

    /// Forgets an entry; `is_live` must from now on reject it.
    pub fn remove(&mut self, is_live: impl Fn(TaskId, u64) -> bool) {
        self.live -= 1;
        if self.run.len() + self.heap.len() > 2 * self.live + 1024 {
            self.run.retain(|&(_, s, t)| is_live(t, s));
            let heap = std::mem::take(&mut self.heap).into_vec();
            self.heap = heap
                .into_iter()
                .filter(|Reverse((_, s, t))| is_live(*t, *s))
                .collect();
        }
    }

    /// The best live task, dropping stale entries in front of it.
    pub fn first(&mut self, is_live: impl Fn(TaskId, u64) -> bool) -> Option<TaskId> {
        while self.run.front().is_some_and(|&(_, s, t)| !is_live(t, s)) {
            self.run.pop_front();
        }
        while self
            .heap
            .peek()
            .is_some_and(|Reverse((_, s, t))| !is_live(*t, *s))
        {
            self.heap.pop();
        }
        match (self.run.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => Some(if a <= b { a.2 } else { b.2 }),
            (Some(a), None) => Some(a.2),
            (None, Some(Reverse(b))) => Some(b.2),
            (None, None) => None,
        }
    }

    /// Live tasks in storage order (not priority order), without sorting: a cheap
    /// sample of the queue.
    pub fn iter_live<'a>(
        &'a self,
        is_live: impl Fn(TaskId, u64) -> bool + 'a,
    ) -> impl Iterator<Item = TaskId> + 'a {
        self.run
            .iter()
            .copied()
            .chain(self.heap.iter().map(|r| r.0))
            .filter(move |&(_, s, t)| is_live(t, s))
            .map(|(_, _, t)| t)
    }

    /// Live tasks, best first.
    pub fn sorted(&self, is_live: impl Fn(TaskId, u64) -> bool) -> Vec<TaskId> {
        let mut v: Vec<Entry> = self
            .run
            .iter()
            .copied()
            .chain(self.heap.iter().map(|r| r.0))
            .collect();
        v.retain(|&(_, s, t)| is_live(t, s));
        v.sort_unstable();
        v.into_iter().map(|(_, _, t)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_first_with_ties_in_insertion_order_and_lazy_removal() {
        let mut q = TaskQueue::default();
        let p = |o: u64| Priority::new(0, 1.0, o);
        let dead = std::cell::RefCell::new(Vec::new());
        let live = |t: TaskId, _| !dead.borrow().contains(&t);
        q.insert(p(1), 1, TaskId(1));
        q.insert(p(3), 2, TaskId(3));
        q.insert(p(2), 3, TaskId(2)); // out of order: heap
        q.insert(p(2), 4, TaskId(4)); // ties with 2, inserted later
        assert_eq!(
            q.sorted(live),
            vec![TaskId(1), TaskId(2), TaskId(4), TaskId(3)]
        );
        assert_eq!(q.first(live), Some(TaskId(1)));
        dead.borrow_mut().push(TaskId(1));
        q.remove(live);
        assert_eq!(q.first(live), Some(TaskId(2)));
        dead.borrow_mut().push(TaskId(2));
        q.remove(live);
        assert_eq!(q.first(live), Some(TaskId(4)));
        assert_eq!(q.len(), 2);
    }
}
