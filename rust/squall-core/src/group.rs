//! Task groups and prefixes (docs/scheduling.md#groups-and-prefixes): shared statistics of related tasks.

use crate::ids::{GroupId, PrefixId, WorkerId};
use crate::task::TaskState;

pub struct TaskPrefix {
    pub name: String,
    /// EMA of compute durations in seconds, −1 while unknown.
    pub duration_average: f64,
    /// Longest execution seen in heartbeats, −1 while none.
    pub max_exec_time: f64,
    pub suspicious: u64,
    /// Configured as taking ≤ 1 ms: never worth stealing.
    pub fast: bool,
    /// Tasks of this prefix in each state (indexed by `TaskState as usize`).
    pub state_counts: [u64; 8],
    /// Entries into each state ever (monotonic; creation counts as entering released).
    pub state_totals: [u64; 8],
    /// Total seconds of compute.
    pub compute_total: f64,
    /// Total seconds per other startstop action (transfer, disk, …).
    pub all_durations: Vec<(String, f64)>,
}

pub struct TaskGroup {
    pub name: String,
    pub prefix: PrefixId,
    /// Number of tasks ever created in the group (never decremented).
    pub len: u64,
    pub state_counts: [u64; 8],
    /// Unique over the scheduler's life: group slots are recycled, so references to
    /// other groups carry the uid they expect.
    pub uid: u64,
    /// (group, uid) of groups any of this group's tasks depend on, in first-seen order.
    pub dependencies: Vec<(GroupId, u64)>,
    pub last_worker: Option<WorkerId>,
    pub last_worker_tasks_left: i64,
    pub nbytes_total: i64,
    pub duration: f64,
    pub typename: Option<String>,
    /// Each distinct blob its tasks' specs refer to (`crate::blobs`), kept while the
    /// group has tasks.
    pub blobs: Vec<crate::blobs::Blob>,
}

impl TaskGroup {
    pub fn new(name: String, prefix: PrefixId, uid: u64) -> Self {
        TaskGroup {
            name,
            prefix,
            uid,
            len: 0,
            state_counts: [0; 8],
            dependencies: Vec::new(),
            last_worker: None,
            last_worker_tasks_left: 0,
            nbytes_total: 0,
            duration: 0.0,
            typename: None,
            blobs: Vec::new(),
        }
    }

    pub fn count(&self, s: TaskState) -> u64 {
        self.state_counts[s as usize]
    }

    /// Every task of the group has been forgotten.
    pub fn all_forgotten(&self) -> bool {
        self.state_counts
            .iter()
            .take(TaskState::Forgotten as usize)
            .all(|&c| c == 0)
    }
}

impl TaskPrefix {
    /// `default_duration`: configured seconds (≤ 1 ms marks a prefix never stolen).
    pub fn new(name: String, default_duration: Option<f64>) -> Self {
        TaskPrefix {
            name,
            duration_average: default_duration.unwrap_or(-1.0),
            max_exec_time: -1.0,
            suspicious: 0,
            fast: default_duration.is_some_and(|d| d <= 0.001),
            state_counts: [0; 8],
            state_totals: [0; 8],
            compute_total: 0.0,
            all_durations: Vec::new(),
        }
    }

    /// Seconds of one non-compute action (e.g. `"transfer"`), 0 if none was seen.
    pub fn seconds_of(&self, action: &str) -> f64 {
        self.all_durations
            .iter()
            .find(|(a, _)| a == action)
            .map_or(0.0, |(_, t)| *t)
    }

    /// Feed one non-compute startstop (transfer, disk, …): statistics only.
    pub fn add_duration(&mut self, action: &str, seconds: f64) {
        if action == "compute" {
            return self.add_compute(seconds);
        }
        let d = round_us(seconds);
        match self.all_durations.iter_mut().find(|(a, _)| a == action) {
            Some((_, t)) => *t += d,
            None => self.all_durations.push((action.to_owned(), d)),
        }
    }

    /// Feed a compute duration: the EMA behind `est(prefix)` (docs/scheduling.md#duration-estimates).
    pub fn add_compute(&mut self, seconds: f64) {
        let d = round_us(seconds);
        self.compute_total += d;
        self.duration_average = if self.duration_average < 0.0 {
            d
        } else {
            0.5 * d + 0.5 * self.duration_average
        };
    }

    /// A heartbeat saw a task of this prefix executing for `t` seconds (docs/scheduling.md#duration-estimates).
    pub fn add_exec_time(&mut self, t: f64) {
        self.max_exec_time = self.max_exec_time.max(t);
        if t > 2.0 * self.duration_average {
            self.duration_average = -1.0;
        }
    }
}

/// Durations are rounded to whole microseconds and floored at 0 before use.
fn round_us(seconds: f64) -> f64 {
    (seconds * 1e6).round().max(0.0) / 1e6
}
