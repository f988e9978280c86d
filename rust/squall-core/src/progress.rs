//! Progress of a set of keys and everything they depend on, per task prefix
//! (`squall.progress`, docs/runtime.md#progress).
//!
//! A watch walks the dependency graph once, when it is made, and keeps the tasks not
//! finished yet. Each update looks only at those, dropping the ones that finished, so
//! its cost is the number of tasks still to run; the scheduler's transitions carry no
//! bookkeeping for it.

use crate::ids::TaskId;
use crate::key::Key;
use crate::state::Scheduler;
use crate::task::TaskState;
use rustc_hash::{FxHashMap, FxHashSet};
use std::hash::BuildHasher;

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
    /// Its key's hash: a recycled slot holding another task is told apart by it.
    key_hash: u64,
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
    cancelled: u64,
}

fn key_hash(key: &Key) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key.as_bytes())
}

impl ProgressWatch {
    /// Watches `keys` (unknown ones are returned in the error) and their dependencies.
    /// With `complete`, dependencies already in memory are counted (as done) and their
    /// own dependencies walked; without, the walk stops at results in memory, as
    /// distributed's `complete=False` does.
    pub fn new(s: &Scheduler, keys: &[Key], complete: bool) -> Result<ProgressWatch, Vec<Key>> {
        let unknown: Vec<Key> = keys
            .iter()
            .filter(|k| s.lookup(k).is_none())
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(unknown);
        }
        let mut watch = ProgressWatch {
            prefixes: Vec::new(),
            pending: Vec::new(),
            cancelled: 0,
        };
        let mut prefix_index: FxHashMap<u32, u32> = FxHashMap::default();
        let asked: FxHashSet<TaskId> = keys.iter().filter_map(|k| s.lookup(k)).collect();
        let mut seen: FxHashSet<TaskId> = FxHashSet::default();
        let mut stack: Vec<TaskId> = asked.iter().copied().collect();
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            let ts = s.task(t);
            if !complete && ts.state == TaskState::Memory && !asked.contains(&t) {
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
                key_hash: key_hash(&ts.key),
                prefix: p,
                asked: asked.contains(&t),
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
            .filter(|ts| key_hash(&ts.key) == p.key_hash)
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

    /// Looks again at the tasks not finished; returns how many still are.
    pub fn update(&mut self, s: &Scheduler) -> usize {
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|p| self.settle(s, p));
        self.pending = pending;
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
