//! The bounded transition log behind `story(key)` (Dask's `transition_log`).

use crate::key::Key;
use crate::task::TaskState;
use std::collections::VecDeque;
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

pub struct TransitionLog {
    cap: usize,
    entries: VecDeque<LogEntry>,
}

pub(crate) fn key_hash(key: &Key) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key.as_bytes())
}

impl TransitionLog {
    pub fn new(cap: usize) -> Self {
        TransitionLog {
            cap,
            entries: VecDeque::with_capacity(cap.min(4096)),
        }
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.cap > 0
    }

    pub fn push(&mut self, e: LogEntry) {
        if self.entries.len() == self.cap {
            self.entries.pop_front();
        }
        self.entries.push_back(e);
    }

    /// The retained transitions of `key`, oldest first.
    pub fn story(&self, key: &Key) -> Vec<LogEntry> {
        let h = key_hash(key);
        self.entries
            .iter()
            .filter(|e| e.key_hash == h)
            .cloned()
            .collect()
    }
}
