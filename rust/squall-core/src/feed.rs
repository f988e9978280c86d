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
/// looked up when entries are taken, or earlier, before a forgotten task's slot is
/// recycled. Entries whose key is known are always the oldest ones. They are taken in
/// chunks (a cursor), so that the I/O layer never holds a huge batch at once.
#[derive(Default)]
pub(crate) struct TransitionFeed {
    on: bool,
    /// Transitions not all taken yet: (task, start, finish, stimulus).
    entries: Vec<(TaskId, TaskState, TaskState, u64)>,
    /// The keys of the first `keys.len()` entries (those before `taken` moved out).
    keys: Vec<Key>,
    /// Entries before this one were taken.
    taken: usize,
}

fn key_of(tasks: &[Option<Task>], t: TaskId) -> Key {
    tasks[t.idx()]
        .as_ref()
        .expect("fed task slot")
        .key()
        .to_owned()
}

impl TransitionFeed {
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// Switching off drops what was not taken.
    pub(crate) fn set(&mut self, on: bool) {
        if on {
            self.on = true;
        } else {
            *self = TransitionFeed::default();
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, t: TaskId, start: TaskState, finish: TaskState, stim: u64) {
        self.entries.push((t, start, finish, stim));
    }

    /// Looks up the keys of the first `end` entries not known yet; with `end` the
    /// number of entries, this must run before any fed slot is recycled.
    fn resolve_to(&mut self, tasks: &[Option<Task>], end: usize) {
        let known = self.keys.len();
        if known < end {
            self.keys
                .extend(self.entries[known..end].iter().map(|e| key_of(tasks, e.0)));
        }
    }

    pub(crate) fn resolve(&mut self, tasks: &[Option<Task>]) {
        self.resolve_to(tasks, self.entries.len());
    }

    /// The task ids of entries whose key is still to be looked up (for `validate`).
    pub(crate) fn unresolved(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.entries[self.keys.len()..].iter().map(|e| e.0)
    }

    /// The oldest `max` entries not taken yet, in order.
    pub(crate) fn take(&mut self, tasks: &[Option<Task>], max: usize) -> Vec<FeedEntry> {
        let end = self.taken.saturating_add(max).min(self.entries.len());
        self.resolve_to(tasks, end);
        let out = (self.taken..end)
            .map(|i| {
                let (_, start, finish, stimulus) = self.entries[i];
                FeedEntry {
                    key: std::mem::take(&mut self.keys[i]),
                    start,
                    finish,
                    stimulus,
                }
            })
            .collect();
        self.taken = end;
        if end == self.entries.len() {
            self.entries.clear();
            self.keys.clear();
            self.taken = 0;
        }
        out
    }
}
