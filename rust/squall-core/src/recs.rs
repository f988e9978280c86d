//! Recommendations for the transition fixpoint (Dask's insertion-ordered dict).
//!
//! Semantics of docs/scheduling.md#the-recommendations-fixpoint: pop the most recently inserted entry (LIFO); inserting
//! a key already present updates its target in place (it keeps its position). As
//! entries only leave from the end, a stack plus a dense `TaskId → position` index is
//! enough; the index is a buffer recycled between fixpoints (every pop resets its
//! slot, so a drained buffer is clean) and indexed sequentially by the ids of a fresh
//! graph, which keeps ingest cache-friendly where a hash map was not.

use crate::ids::TaskId;
use crate::task::TaskState;

const ABSENT: u32 = u32::MAX;

/// The (empty) stack and clean position index of a drained `Recs`.
pub(crate) type RecsBuffers = (Vec<(TaskId, Option<TaskState>)>, Vec<u32>);

#[derive(Default)]
pub struct Recs {
    /// (task, target); None marks an entry removed from the middle.
    stack: Vec<(TaskId, Option<TaskState>)>,
    pos: Vec<u32>,
}

impl Recs {
    /// Empty recommendations reusing the buffers of a drained `Recs`.
    pub(crate) fn from_buffers((stack, pos): RecsBuffers) -> Self {
        debug_assert!(stack.is_empty());
        Recs { stack, pos }
    }

    /// Both buffers back, once every entry has been popped. (A stack grown by a big
    /// graph is not kept: only the index is worth its memory.)
    pub(crate) fn into_buffers(mut self) -> Option<RecsBuffers> {
        if !self.stack.is_empty() {
            return None;
        }
        if self.stack.capacity() > 4096 {
            self.stack = Vec::new();
        }
        Some((self.stack, self.pos))
    }

    pub fn is_empty(&self) -> bool {
        self.stack.iter().all(|(_, s)| s.is_none())
    }

    pub fn reserve(&mut self, n: usize) {
        self.stack.reserve(n);
    }

    pub fn insert(&mut self, t: TaskId, s: TaskState) {
        let i = t.idx();
        if i >= self.pos.len() {
            self.pos.resize((i + 1).next_power_of_two(), ABSENT);
        }
        match self.pos[i] {
            ABSENT => {
                self.pos[i] = self.stack.len() as u32;
                self.stack.push((t, Some(s)));
            }
            p => self.stack[p as usize].1 = Some(s),
        }
    }

    pub fn pop(&mut self) -> Option<(TaskId, TaskState)> {
        while let Some((t, s)) = self.stack.pop() {
            self.pos[t.idx()] = ABSENT;
            if let Some(s) = s {
                return Some((t, s));
            }
        }
        None
    }

    pub fn get(&self, t: &TaskId) -> Option<&TaskState> {
        match self.pos.get(t.idx()) {
            Some(&p) if p != ABSENT => self.stack[p as usize].1.as_ref(),
            _ => None,
        }
    }

    /// Removes an entry; inserting the key again later puts it at the end.
    pub fn shift_remove(&mut self, t: &TaskId) {
        if let Some(&p) = self.pos.get(t.idx()) {
            if p != ABSENT {
                self.stack[p as usize].1 = None;
                self.pos[t.idx()] = ABSENT;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    #[test]
    fn lifo_with_update_in_place() {
        let mut r = Recs::default();
        r.insert(TaskId(1), Waiting);
        r.insert(TaskId(2), Waiting);
        r.insert(TaskId(1), Processing); // keeps its slot, takes the new target
        assert_eq!(r.get(&TaskId(1)), Some(&Processing));
        assert_eq!(r.pop(), Some((TaskId(2), Waiting)));
        r.insert(TaskId(3), Released);
        r.shift_remove(&TaskId(3));
        r.insert(TaskId(4), Memory);
        r.shift_remove(&TaskId(4));
        assert!(!r.is_empty());
        r.insert(TaskId(4), Erred);
        assert_eq!(r.pop(), Some((TaskId(4), Erred)));
        assert_eq!(r.pop(), Some((TaskId(1), Processing)));
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
        assert!(r
            .into_buffers()
            .is_some_and(|(_, p)| p.iter().all(|&x| x == ABSENT)));
    }
}
