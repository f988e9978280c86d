//! The bounded transition log behind `story(key)` (Dask's `transition_log`).

use crate::ids::TaskId;
use crate::key::KeyRef;
use crate::task::{Task, TaskState};
use std::hash::BuildHasher;

#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    /// Hash of the key: entries outlive their task slot, so they cannot hold its id.
    pub key_hash: u64,
    pub start: TaskState,
    pub finish: TaskState,
    pub stimulus: u64,
    pub time: f64,
}

/// A ring buffer. Entries are pushed with the task id only; the key hash is computed
/// lazily (most entries fall out of the bounded log before anyone asks), at the latest
/// before the task's slot is recycled. Unresolved entries are always the newest ones.
pub struct TransitionLog {
    cap: usize,
    /// Physical slots; once full, the oldest entry is at `head`.
    entries: Vec<LogEntry>,
    /// The task of each slot (meaningful while its entry is unresolved).
    tasks: Vec<TaskId>,
    head: usize,
    /// How many of the newest entries still lack their key hash.
    pending: usize,
}

pub(crate) fn key_hash(key: &KeyRef) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key.as_bytes())
}

fn hash_of(tasks: &[Option<Task>], t: TaskId) -> u64 {
    key_hash(tasks[t.idx()].as_ref().expect("logged task slot").key())
}

impl TransitionLog {
    pub fn new(cap: usize) -> Self {
        TransitionLog {
            cap,
            entries: Vec::with_capacity(cap.min(4096)),
            tasks: Vec::with_capacity(cap.min(4096)),
            head: 0,
            pending: 0,
        }
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// Physical slot of the `i`-th oldest entry.
    #[inline]
    fn slot(&self, i: usize) -> usize {
        let j = self.head + i;
        if j >= self.entries.len() {
            j - self.entries.len()
        } else {
            j
        }
    }

    /// Logs a transition of live task `t`; its key hash is filled in by `resolve`.
    #[inline]
    pub(crate) fn push(
        &mut self,
        t: TaskId,
        start: TaskState,
        finish: TaskState,
        stimulus: u64,
        time: f64,
    ) {
        let e = LogEntry {
            key_hash: 0,
            start,
            finish,
            stimulus,
            time,
        };
        if self.entries.len() < self.cap {
            self.entries.push(e);
            self.tasks.push(t);
        } else {
            self.entries[self.head] = e;
            self.tasks[self.head] = t;
            self.head += 1;
            if self.head == self.cap {
                self.head = 0;
            }
        }
        self.pending = (self.pending + 1).min(self.entries.len());
    }

    /// Computes the pending key hashes; must run before any logged slot is recycled.
    pub(crate) fn resolve(&mut self, tasks: &[Option<Task>]) {
        let n = self.entries.len();
        for i in n - self.pending..n {
            let j = self.slot(i);
            self.entries[j].key_hash = hash_of(tasks, self.tasks[j]);
        }
        self.pending = 0;
    }

    /// The retained transitions of `key`, oldest first.
    pub(crate) fn story(&self, key: &KeyRef, tasks: &[Option<Task>]) -> Vec<LogEntry> {
        let h = key_hash(key);
        let n = self.entries.len();
        (0..n)
            .filter_map(|i| {
                let j = self.slot(i);
                let e = &self.entries[j];
                let eh = if i >= n - self.pending {
                    hash_of(tasks, self.tasks[j])
                } else {
                    e.key_hash
                };
                (eh == h).then(|| LogEntry {
                    key_hash: eh,
                    ..e.clone()
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::GroupId;
    use crate::key::Key;
    use crate::task::TaskText;

    #[test]
    fn ring_keeps_the_newest_and_resolves_lazily() {
        let task = |k: &str| Some(Task::new(TaskText::new(&Key::str(k), None), GroupId(0)));
        let mut tasks = vec![task("a"), task("b")];
        let mut log = TransitionLog::new(3);
        let (a, b) = (TaskId(0), TaskId(1));
        for (i, t) in [a, b, a, b, a].into_iter().enumerate() {
            log.push(t, TaskState::Released, TaskState::Waiting, i as u64, 0.0);
            if i == 1 {
                log.resolve(&tasks);
            }
        }
        let stims = |log: &TransitionLog, k: &str, tasks: &[Option<Task>]| {
            log.story(&Key::str(k), tasks)
                .iter()
                .map(|e| e.stimulus)
                .collect::<Vec<_>>()
        };
        assert_eq!(stims(&log, "a", &tasks), vec![2, 4]);
        assert_eq!(stims(&log, "b", &tasks), vec![3]);
        log.resolve(&tasks);
        tasks[0] = task("c");
        assert_eq!(stims(&log, "a", &tasks), vec![2, 4]);
        assert_eq!(stims(&log, "c", &tasks), Vec::<u64>::new());
        assert!(log
            .story(&Key::str("a"), &tasks)
            .iter()
            .all(|e| e.key_hash == key_hash(&Key::str("a"))));
    }
}
