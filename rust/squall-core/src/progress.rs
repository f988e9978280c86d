//! Progress of a set of keys and everything they depend on, per task prefix
//! (`squall.progress`, docs/runtime.md#progress).
//!
//! A watch walks the dependency graph once, when it is made, and keeps the tasks not
//! finished yet. Each update looks at a bounded number of those, dropping the ones
//! that finished, so no update costs more than its budget however many tasks are
//! watched; the scheduler's transitions carry no bookkeeping for it.

use crate::ids::TaskId;
use crate::key::Key;
use crate::state::Scheduler;
use crate::task::{Task, TaskState};
use rustc_hash::FxHashMap;

/// Per prefix: tasks counted, finished in memory, erred.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixProgress {
    pub name: String,
    pub total: u64,
    pub done: u64,
    pub erred: u64,
}

/// A task not finished when last looked at.
struct Pending {
    task: TaskId,
    /// Where its key lives, and its group: a recycled slot holding another task is
    /// told apart by them without reading the key (one memory access per task).
    key_at: usize,
    group: u32,
    prefix: u32,
    /// One of the keys asked for (not a dependency of them).
    asked: bool,
}

enum Seen {
    Pending,
    Done,
    Erred,
    /// A key asked for is no longer wanted: cancelled, or released by its holders.
    Cancelled,
}

pub struct ProgressWatch {
    prefixes: Vec<PrefixProgress>,
    pending: Vec<Pending>,
    /// Where the next update starts looking in `pending`.
    cursor: usize,
    cancelled: u64,
}

fn key_at(ts: &Task) -> usize {
    ts.key().as_bytes().as_ptr() as usize
}

/// A set of task ids as bits.
#[derive(Default)]
struct TaskBits(Vec<u64>);

impl TaskBits {
    /// Adds `t`; false if it was there.
    fn insert(&mut self, t: TaskId) -> bool {
        let (word, bit) = (t.idx() / 64, 1u64 << (t.idx() % 64));
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        let new = self.0[word] & bit == 0;
        self.0[word] |= bit;
        new
    }

    fn contains(&self, t: TaskId) -> bool {
        self.0
            .get(t.idx() / 64)
            .is_some_and(|w| w & (1u64 << (t.idx() % 64)) != 0)
    }
}

impl ProgressWatch {
    /// Watches `keys` (unknown ones are returned in the error) and their dependencies.
    /// With `complete`, dependencies already in memory are counted (as done) and their
    /// own dependencies walked; without, the walk stops at results in memory, as
    /// distributed's `complete=False` does.
    pub fn new(s: &Scheduler, keys: &[Key], complete: bool) -> Result<ProgressWatch, Vec<Key>> {
        let mut asked = TaskBits::default();
        let mut stack = Vec::with_capacity(keys.len());
        let mut unknown = Vec::new();
        for k in keys {
            match s.lookup(k) {
                Some(t) => {
                    asked.insert(t);
                    stack.push(t);
                }
                None => unknown.push(k.clone()),
            }
        }
        if !unknown.is_empty() {
            return Err(unknown);
        }
        let mut watch = ProgressWatch {
            prefixes: Vec::new(),
            pending: Vec::new(),
            cursor: 0,
            cancelled: 0,
        };
        let mut prefix_index: FxHashMap<u32, u32> = FxHashMap::default();
        let mut seen = TaskBits::default();
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            let ts = s.task(t);
            let is_asked = asked.contains(t);
            if !complete && ts.state == TaskState::Memory && !is_asked {
                continue;
            }
            let prefix = s.group(ts.group).prefix;
            let next = prefix_index.len() as u32;
            let p = *prefix_index.entry(prefix.0).or_insert_with(|| {
                watch.prefixes.push(PrefixProgress {
                    name: s.prefix(prefix).name.clone(),
                    ..Default::default()
                });
                next
            });
            watch.prefixes[p as usize].total += 1;
            let entry = Pending {
                task: t,
                key_at: key_at(ts),
                group: ts.group.0,
                prefix: p,
                asked: is_asked,
            };
            if watch.settle(s, &entry) {
                watch.pending.push(entry);
            }
            stack.extend(ts.dependencies.iter());
        }
        Ok(watch)
    }

    /// What became of a task: a dependency gone from the scheduler (or released)
    /// while the keys asked for are still wanted had run, since they needed it.
    fn seen(s: &Scheduler, p: &Pending) -> Seen {
        let state = s
            .get_task(p.task)
            .filter(|ts| key_at(ts) == p.key_at && ts.group.0 == p.group)
            .map_or(TaskState::Forgotten, |ts| ts.state);
        match state {
            TaskState::Memory => Seen::Done,
            TaskState::Erred => Seen::Erred,
            TaskState::Released | TaskState::Forgotten if p.asked => Seen::Cancelled,
            TaskState::Released | TaskState::Forgotten => Seen::Done,
            _ => Seen::Pending,
        }
    }

    /// Counts a task that finished; true if it is still pending.
    fn settle(&mut self, s: &Scheduler, p: &Pending) -> bool {
        let counts = &mut self.prefixes[p.prefix as usize];
        match Self::seen(s, p) {
            Seen::Pending => return true,
            Seen::Done => counts.done += 1,
            Seen::Erred => counts.erred += 1,
            Seen::Cancelled => {
                counts.total -= 1;
                self.cancelled += 1;
            }
        }
        false
    }

    /// Looks again at up to `budget` of the tasks not finished, going on from where
    /// the last update stopped (every one is looked at in turn); returns how many are
    /// still not finished.
    pub fn update(&mut self, s: &Scheduler, budget: usize) -> usize {
        let mut i = self.cursor;
        for _ in 0..budget.min(self.pending.len()) {
            if self.pending.is_empty() {
                break;
            }
            if i >= self.pending.len() {
                i = 0;
            }
            let p = &self.pending[i];
            let still = Self::seen(s, p);
            if matches!(still, Seen::Pending) {
                i += 1;
                continue;
            }
            // Finished: the last one takes its place, and is looked at next.
            let p = self.pending.swap_remove(i);
            self.settle(s, &p);
        }
        self.cursor = i;
        self.pending.len()
    }

    /// Tasks not finished (neither in memory nor erred) at the last look.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }

    /// Counts per prefix, in the order the walk met them.
    pub fn prefixes(&self) -> &[PrefixProgress] {
        &self.prefixes
    }

    /// Keys asked for that stopped being wanted (cancelled, or released by every
    /// holder): they will not finish, and are not counted.
    pub fn cancelled(&self) -> u64 {
        self.cancelled
    }
}
