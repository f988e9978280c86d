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

/// A run entry: the task and the low 32 bits of its queue sequence. Its priority is
/// the task's own (set once, never changed), read back when needed, so the run costs
/// 8 bytes per queued task rather than 32 (docs/core.md#memory-per-task). Two entries
/// of one task differ in their sequence's low bits unless 2³² queuings lie between
/// them, and compaction drops a stale entry long before that.
type RunEntry = (TaskId, u32);

/// What the queue asks of the scheduler: a queued task's priority and current queue
/// sequence, None for a task that is not queued.
pub trait Current: Fn(TaskId) -> Option<(Priority, u64)> {}
impl<F: Fn(TaskId) -> Option<(Priority, u64)>> Current for F {}

#[derive(Clone, Copy)]
enum End {
    Front,
    Back,
}

/// Below this capacity the run's buffer is never shrunk.
const SHRINK_FLOOR: usize = 1024;

#[derive(Default)]
pub struct TaskQueue {
    run: VecDeque<RunEntry>,
    heap: BinaryHeap<Reverse<Entry>>,
    live: usize,
}

/// The full entry of run entry `(t, low)` if it is current.
fn run_entry(current: &impl Current, (t, low): RunEntry) -> Option<Entry> {
    current(t)
        .filter(|&(_, seq)| seq as u32 == low)
        .map(|(p, seq)| (p, seq, t))
}

fn heap_live(current: &impl Current, &(_, seq, t): &Entry) -> bool {
    current(t).is_some_and(|(_, s)| s == seq)
}

impl TaskQueue {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// `seq` must grow with every insertion, and `current` must already answer
    /// `(p, seq)` for `t`.
    pub fn insert(&mut self, p: Priority, seq: u64, t: TaskId, current: impl Current) {
        let e = (p, seq, t);
        // The last live entry of the run decides; stale ones behind it go.
        if self.live_end(&current, End::Back).is_none_or(|b| b <= e) {
            self.run.push_back((t, seq as u32));
        } else {
            self.heap.push(Reverse(e));
        }
        self.live += 1;
    }

    /// Forgets an entry; `current` must from now on reject it.
    pub fn remove(&mut self, current: impl Current) {
        self.live -= 1;
        if self.run.len() + self.heap.len() > 2 * self.live + 1024 {
            self.run.retain(|&r| run_entry(&current, r).is_some());
            let heap = std::mem::take(&mut self.heap).into_vec();
            self.heap = heap
                .into_iter()
                .filter(|Reverse(e)| heap_live(&current, e))
                .collect();
            self.shrink();
        }
    }

    /// The best live task, dropping stale entries in front of it.
    pub fn first(&mut self, current: impl Current) -> Option<TaskId> {
        let front = self.live_end(&current, End::Front);
        while self
            .heap
            .peek()
            .is_some_and(|Reverse(e)| !heap_live(&current, e))
        {
            self.heap.pop();
        }
        self.shrink();
        match (front, self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => Some(if a <= *b { a.2 } else { b.2 }),
            (Some(a), None) => Some(a.2),
            (None, Some(Reverse(b))) => Some(b.2),
            (None, None) => None,
        }
    }

    /// The run's first or last live entry, dropping the stale entries outside it.
    fn live_end(&mut self, current: &impl Current, end: End) -> Option<Entry> {
        loop {
            let r = match end {
                End::Front => self.run.front(),
                End::Back => self.run.back(),
            };
            if let Some(e) = run_entry(current, *r?) {
                return Some(e);
            }
            match end {
                End::Front => self.run.pop_front(),
                End::Back => self.run.pop_back(),
            };
        }
    }

    /// Gives back most of the run's buffer once it has drained to a quarter, so that a
    /// large graph's peak does not stay held after it has run.
    fn shrink(&mut self) {
        let cap = self.run.capacity();
        if cap > SHRINK_FLOOR && self.run.len() < cap / 4 {
            self.run.shrink_to((self.run.len() * 2).max(SHRINK_FLOOR));
        }
    }

    /// Live tasks in storage order (not priority order), without sorting: a cheap
    /// sample of the queue.
    pub fn iter_live<'a>(
        &'a self,
        current: impl Current + Copy + 'a,
    ) -> impl Iterator<Item = TaskId> + 'a {
        let run = self
            .run
            .iter()
            .filter_map(move |&r| run_entry(&current, r).map(|e| e.2));
        let heap = self
            .heap
            .iter()
            .filter(move |Reverse(e)| heap_live(&current, e))
            .map(|r| r.0 .2);
        run.chain(heap)
    }

    /// Live tasks, best first.
    pub fn sorted(&self, current: impl Current) -> Vec<TaskId> {
        let mut v: Vec<Entry> = self
            .run
            .iter()
            .filter_map(|&r| run_entry(&current, r))
            .chain(
                self.heap
                    .iter()
                    .map(|r| r.0)
                    .filter(|e| heap_live(&current, e)),
            )
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, _, t)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// Queued tasks as the scheduler would hold them: task → (priority, queue seq).
    #[derive(Default)]
    struct Tasks {
        queued: RefCell<HashMap<TaskId, (Priority, u64)>>,
        seq: std::cell::Cell<u64>,
    }

    impl Tasks {
        fn current(&self) -> impl Current + Copy + '_ {
            |t| self.queued.borrow().get(&t).copied()
        }
        fn enqueue(&self, q: &mut TaskQueue, order: u64, t: u32) {
            self.seq.set(self.seq.get() + 1);
            let (p, seq) = (Priority::new(0, 1.0, order), self.seq.get());
            self.queued.borrow_mut().insert(TaskId(t), (p, seq));
            q.insert(p, seq, TaskId(t), self.current());
        }
        fn dequeue(&self, q: &mut TaskQueue, t: u32) {
            self.queued.borrow_mut().remove(&TaskId(t));
            q.remove(self.current());
        }
    }

    #[test]
    fn best_first_with_ties_in_insertion_order_and_lazy_removal() {
        let (mut q, tasks) = (TaskQueue::default(), Tasks::default());
        tasks.enqueue(&mut q, 1, 1);
        tasks.enqueue(&mut q, 3, 3);
        tasks.enqueue(&mut q, 2, 2); // out of order: heap
        tasks.enqueue(&mut q, 2, 4); // ties with 2, inserted later
        assert_eq!(
            q.sorted(tasks.current()),
            vec![TaskId(1), TaskId(2), TaskId(4), TaskId(3)]
        );
        assert_eq!(q.first(tasks.current()), Some(TaskId(1)));
        tasks.dequeue(&mut q, 1);
        assert_eq!(q.first(tasks.current()), Some(TaskId(2)));
        tasks.dequeue(&mut q, 2);
        assert_eq!(q.first(tasks.current()), Some(TaskId(4)));
        assert_eq!(q.len(), 2);
        let mut live: Vec<_> = q.iter_live(tasks.current()).collect();
        live.sort();
        assert_eq!(live, vec![TaskId(3), TaskId(4)]);
    }

    #[test]
    fn a_requeued_task_is_ordered_by_its_new_entry_only() {
        let (mut q, tasks) = (TaskQueue::default(), Tasks::default());
        tasks.enqueue(&mut q, 1, 1);
        tasks.enqueue(&mut q, 5, 5);
        // Task 5 leaves and comes back: its first run entry is stale, and the
        // insertion behind it compares with task 1, the last live entry.
        tasks.dequeue(&mut q, 5);
        tasks.enqueue(&mut q, 3, 3);
        tasks.enqueue(&mut q, 5, 5);
        assert_eq!(
            q.sorted(tasks.current()),
            vec![TaskId(1), TaskId(3), TaskId(5)]
        );
        for t in [1, 3, 5] {
            assert_eq!(q.first(tasks.current()), Some(TaskId(t)));
            tasks.dequeue(&mut q, t);
        }
        assert_eq!(q.first(tasks.current()), None);
        assert!(q.is_empty());
    }

    #[test]
    fn a_drained_run_gives_its_buffer_back() {
        let (mut q, tasks) = (TaskQueue::default(), Tasks::default());
        let n = 100_000;
        for t in 0..n {
            tasks.enqueue(&mut q, u64::from(t), t);
        }
        let peak = q.run.capacity();
        assert!(peak >= n as usize);
        for t in 0..n - 10 {
            assert_eq!(q.first(tasks.current()), Some(TaskId(t)));
            tasks.dequeue(&mut q, t);
        }
        assert_eq!(q.first(tasks.current()), Some(TaskId(n - 10)));
        assert!(
            q.run.capacity() <= SHRINK_FLOOR,
            "{} of {peak}",
            q.run.capacity()
        );
        assert_eq!(q.len(), 10);
    }
}
