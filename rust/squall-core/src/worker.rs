//! Per-worker scheduler state (docs/scheduling.md#workers).

use crate::ids::{PrefixId, TaskId};
use crate::tasklist::TaskList;
use indexmap::{IndexMap, IndexSet};
use smallvec::SmallVec;

/// Insertion-ordered sets and maps keyed by ids. Their iteration order depends only on
/// the operations, never on the hasher. The id hash places sixteen consecutive ids in
/// one run of buckets and spreads the runs uniformly (docs/core.md#hashing-neighbours).
pub type IdIndexSet<T> = IndexSet<T, squall_hash::BuildIdHasher>;
pub type IdIndexMap<K, V> = IndexMap<K, V, squall_hash::BuildIdHasher>;

/// A worker's processing, non-long-running tasks per prefix, in insertion order with
/// swap-removal: the order an `IndexMap` keeps, so occupancy adds the same terms in the
/// same order. A worker runs few prefixes at once, and a short inline list scanned in
/// order costs less than a hash table's cache misses (docs/core.md#task-lists).
#[derive(Clone, Debug, Default)]
pub struct PrefixCounts(SmallVec<[(PrefixId, u32); 3]>);

impl PrefixCounts {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (PrefixId, u32)> + '_ {
        self.0.iter().copied()
    }

    pub fn get(&self, p: PrefixId) -> Option<u32> {
        self.0.iter().find(|(q, _)| *q == p).map(|&(_, n)| n)
    }

    pub(crate) fn add_one(&mut self, p: PrefixId) {
        match self.0.iter_mut().find(|(q, _)| *q == p) {
            Some((_, n)) => *n += 1,
            None => self.0.push((p, 1)),
        }
    }

    /// One fewer of `p`; it leaves the list at zero.
    pub(crate) fn remove_one(&mut self, p: PrefixId) {
        if let Some(i) = self.0.iter().position(|(q, _)| *q == p) {
            self.0[i].1 -= 1;
            if self.0[i].1 == 0 {
                self.0.swap_remove(i);
            }
        }
    }
}

/// A worker's long-running (seceded) tasks: boxed, so that a worker with none, nearly
/// every worker, keeps one null pointer among its per-task fields, where the set itself
/// spilled its length onto a cache line of its own, read at every task (`busy`).
#[derive(Debug, Default)]
pub struct Seceded(Option<Box<IdIndexSet<TaskId>>>);

impl Seceded {
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, t: TaskId) -> bool {
        self.0.as_ref().is_some_and(|s| s.contains(&t))
    }

    pub fn iter(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.0.iter().flat_map(|s| s.iter().copied())
    }

    pub(crate) fn insert(&mut self, t: TaskId) {
        self.0.get_or_insert_with(Default::default).insert(t);
    }

    pub(crate) fn remove(&mut self, t: TaskId) {
        if let Some(s) = &mut self.0 {
            s.swap_remove(&t);
            if s.is_empty() {
                self.0 = None;
            }
        }
    }
}

/// The dependencies a worker must fetch, each with the number of its processing tasks
/// that need it (`needs_what`): boxed like `Seceded`, since most workers fetch nothing
/// and `add_replica` asks at every task; the map inline pushed that question onto a
/// cache line of the record of its own.
#[derive(Debug, Default)]
pub struct Fetches(Option<Box<IdIndexMap<TaskId, u32>>>);

impl Fetches {
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, t: TaskId) -> Option<u32> {
        self.0.as_ref().and_then(|m| m.get(&t).copied())
    }

    /// One more processing task needs `t`; returns how many do now.
    pub(crate) fn add(&mut self, t: TaskId) -> u32 {
        let c = self
            .0
            .get_or_insert_with(Default::default)
            .entry(t)
            .or_insert(0);
        *c += 1;
        *c
    }

    /// `n` processing tasks need `t`; returns how many did before (0 if none).
    pub(crate) fn set(&mut self, t: TaskId, n: u32) -> u32 {
        let map = self.0.get_or_insert_with(Default::default);
        map.insert(t, n).unwrap_or(0)
    }

    /// One fewer processing task needs `t`; returns how many still do, None if none did.
    pub(crate) fn drop_one(&mut self, t: TaskId) -> Option<u32> {
        let map = self.0.as_mut()?;
        let c = map.get_mut(&t)?;
        *c -= 1;
        let left = *c;
        if left == 0 {
            self.remove(t);
        }
        Some(left)
    }

    /// `t` needs no fetching any more (it arrived); returns whether it was wanted.
    pub(crate) fn remove(&mut self, t: TaskId) -> bool {
        let Some(map) = &mut self.0 else {
            return false;
        };
        let wanted = map.swap_remove(&t).is_some();
        if map.is_empty() {
            self.0 = None;
        }
        wanted
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerStatus {
    Running,
    Paused,
    ClosingGracefully,
    Closed,
}

impl WorkerStatus {
    pub fn name(self) -> &'static str {
        match self {
            WorkerStatus::Running => "running",
            WorkerStatus::Paused => "paused",
            WorkerStatus::ClosingGracefully => "closing_gracefully",
            WorkerStatus::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => WorkerStatus::Running,
            "paused" => WorkerStatus::Paused,
            "closing_gracefully" => WorkerStatus::ClosingGracefully,
            "closed" => WorkerStatus::Closed,
            _ => return None,
        })
    }
}

/// A worker's memory as its last heartbeat reported it (bytes; docs/runtime.md#memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerMemory {
    /// The process's resident memory.
    pub process: u64,
    /// Results held in memory (their `sizeof`).
    pub managed: u64,
    /// Spilled results: their `sizeof` before spilling, their bytes on disk, how many.
    pub spilled_memory: u64,
    pub spilled_disk: u64,
    pub spilled_count: u64,
}

/// A worker's load as its last heartbeat reported it (docs/dashboard.md): reported
/// only, for the dashboard and metrics; no scheduling decision reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkerLoad {
    /// CPU use of the worker's process, in percent of one core.
    pub cpu: f64,
    /// Bytes per second read from and written to the network.
    pub read_bps: f64,
    pub write_bps: f64,
    /// Tasks executing, ready to execute, being fetched, held in memory.
    pub executing: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub in_memory: u64,
}

/// What a worker announces when it registers.
#[derive(Clone, Debug, Default)]
pub struct WorkerSpec {
    pub address: String,
    pub name: String,
    pub host: String,
    pub nthreads: u32,
    /// Bytes; 0 = no limit.
    pub memory_limit: u64,
    pub resources: Vec<(String, f64)>,
}

/// Laid out by hand, the fields read or written at every task first: with thousands of
/// workers their records do not stay in the CPU caches, and the compiler's order spread
/// one task's fields over six of a record's nine cache lines. Now they fill the first
/// two, and a record starts on a line (docs/core.md#many-workers).
#[repr(C, align(64))]
pub struct Worker {
    pub status: WorkerStatus,
    pub nthreads: u32,
    /// Queuing capacity, refreshed by `check_idle_saturated` (docs/scheduling.md#queuing and
    /// `worker_saturation_duration`).
    pub slot_cap: i64,
    /// Σ effective nbytes of `has_what`.
    pub nbytes: i64,
    /// Σ effective nbytes over `needs_what`.
    pub network_occ: i64,
    /// Each member's place is in its task (`processing_place`).
    pub processing: TaskList,
    /// Processing, non-long-running tasks per prefix.
    pub task_prefix_count: PrefixCounts,
    /// Results held here; each task's `who_has` entry records its index in this list.
    pub has_what: Vec<TaskId>,
    pub long_running: Seceded,
    /// Dependencies to fetch: number of processing tasks here needing each.
    pub needs_what: Fetches,
    /// Bytes; 0 = no limit.
    pub memory_limit: u64,
    pub actors: IdIndexSet<TaskId>,
    pub resources: Vec<(String, f64)>,
    pub used_resources: Vec<(String, f64)>,
    pub address: String,
    pub name: String,
    pub host: String,
    pub last_seen: f64,
    /// Bandwidth the worker measured (bytes/s), from heartbeats.
    pub bandwidth: f64,
    /// Memory, from heartbeats (reported only: no scheduling decision reads it yet).
    pub memory: WorkerMemory,
    /// Load, from heartbeats (reported only, like `memory`).
    pub load: WorkerLoad,
}

impl Worker {
    pub(crate) fn new(spec: WorkerSpec, now: f64, bandwidth: f64) -> Self {
        Worker {
            address: spec.address,
            name: spec.name,
            host: spec.host,
            nthreads: spec.nthreads,
            memory_limit: spec.memory_limit,
            status: WorkerStatus::Running,
            processing: Default::default(),
            long_running: Default::default(),
            has_what: Vec::new(),
            nbytes: 0,
            used_resources: spec
                .resources
                .iter()
                .map(|(n, _)| (n.clone(), 0.0))
                .collect(),
            resources: spec.resources,
            actors: Default::default(),
            task_prefix_count: Default::default(),
            needs_what: Default::default(),
            network_occ: 0,
            last_seen: now,
            bandwidth,
            memory: WorkerMemory::default(),
            load: WorkerLoad::default(),
            slot_cap: 0,
        }
    }

    pub fn resource(&self, name: &str) -> Option<f64> {
        self.resources
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    pub(crate) fn adjust_used(&mut self, name: &str, delta: f64) {
        match self.used_resources.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v += delta,
            None => self.used_resources.push((name.to_owned(), delta)),
        }
    }

    /// Non-long-running tasks assigned here.
    pub fn busy(&self) -> usize {
        self.processing.len() - self.long_running.len()
    }
}
