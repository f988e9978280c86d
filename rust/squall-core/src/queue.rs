//! The scheduler's `queued` set (Dask's HeapSet): queued tasks by priority, ties by
//! insertion. A binary heap with lazy deletion: removing a task only forgets it, and
//! stale entries are dropped when they reach the top (or by compaction), so pushing a
//! graph's tasks in priority order costs O(1) each.

use crate::ids::TaskId;
use crate::priority::Priority;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

type Entry = (Priority, u64, TaskId);

#[derive(Default)]
pub struct TaskQueue {
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

    /// `seq` must be unique per insertion; the task keeps it while queued.
    pub fn insert(&mut self, p: Priority, seq: u64, t: TaskId) {
        self.heap.push(Reverse((p, seq, t)));
        self.live += 1;
    }

    /// Forgets an entry; `is_live` must from now on reject (t, seq).
    pub fn remove(&mut self, is_live: impl Fn(TaskId, u64) -> bool) {
        self.live -= 1;
        if self.heap.len() > 2 * self.live + 1024 {
            let entries = std::mem::take(&mut self.heap).into_vec();
            self.heap = entries
                .into_iter()
                .filter(|Reverse((_, s, t))| is_live(*t, *s))
                .collect();
        }
    }

    /// The best live task, dropping stale entries above it.
    pub fn first(&mut self, is_live: impl Fn(TaskId, u64) -> bool) -> Option<TaskId> {
        while let Some(&Reverse((_, seq, t))) = self.heap.peek() {
            if is_live(t, seq) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// Live tasks, best first.
    pub fn sorted(&self, is_live: impl Fn(TaskId, u64) -> bool) -> Vec<TaskId> {
        let mut v: Vec<Entry> = self
            .heap
            .iter()
            .map(|r| r.0)
            .filter(|&(_, s, t)| is_live(t, s))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, _, t)| t).collect()
    }
}
