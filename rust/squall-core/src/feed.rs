//! The transition feed: every transition the core makes, in order, for the I/O layer to
//! hand to scheduler plugins in batches (docs/runtime.md#scheduler-plugins). Off by
//! default; while off, a transition pays one branch for it.

use crate::ids::TaskId;
use crate::key::Key;
use crate::task::{Task, TaskState};

/// One transition as the feed reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedEntry {
    pub key: Key,
    pub start: TaskState,
    pub finish: TaskState,
    /// The stimulus that caused it (as in `story`).
    pub stimulus: u64,
}

/// Entries are pushed with the task id only (no key copy on the hot path); keys are
/// looked up when the feed is taken, or earlier, before a forgotten task's slot is
/// recycled. Entries whose key is known are always the oldest ones.
#[derive(Default)]
pub(crate) struct TransitionFeed {
    on: bool,
    /// Transitions since the last take: (task, start, finish, stimulus).
    entries: Vec<(TaskId, TaskState, TaskState, u64)>,
    /// The keys of the first `keys.len()` entries.
    keys: Vec<Key>,
}

fn key_of(tasks: &[Option<Task>], t: TaskId) -> Key {
    tasks[t.idx()].as_ref().expect("fed task slot").key.clone()
}

impl TransitionFeed {
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// Switching off drops what was not taken.
    pub(crate) fn set(&mut self, on: bool) {
        self.on = on;
        if !on {
            self.entries = Vec::new();
            self.keys = Vec::new();
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, t: TaskId, start: TaskState, finish: TaskState, stim: u64) {
        self.entries.push((t, start, finish, stim));
    }

    /// Looks up the keys not known yet; must run before any fed slot is recycled.
    pub(crate) fn resolve(&mut self, tasks: &[Option<Task>]) {
        let known = self.keys.len();
        self.keys
            .extend(self.entries[known..].iter().map(|e| key_of(tasks, e.0)));
    }

    /// The task ids of entries whose key is still to be looked up (for `validate`).
    pub(crate) fn unresolved(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.entries[self.keys.len()..].iter().map(|e| e.0)
    }

    /// Everything fed since the last take, oldest first.
    pub(crate) fn take(&mut self, tasks: &[Option<Task>]) -> Vec<FeedEntry> {
        self.resolve(tasks);
        let keys = std::mem::take(&mut self.keys);
        std::mem::take(&mut self.entries)
            .into_iter()
            .zip(keys)
            .map(|((_, start, finish, stimulus), key)| FeedEntry {
                key,
                start,
                finish,
                stimulus,
            })
            .collect()
    }
}
