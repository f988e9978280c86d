//! The worker's task state machine (docs/scheduling.md#the-worker-side): what the scheduler sent, what is
//! ready, running, held or fetched. Events in (compute, free, steal, results, fetched
//! data), answers and buffered reports out; no IO and no clock of its own (callers
//! pass `now` in seconds).

use crate::keys::{Fetch, KeyId, Keys};
use ready::ReadyQueue;
use rustc_hash::{FxHashMap, FxHashSet};
use squall_priority::Priority;
use squall_wire::finished::FinishedBatch;
use std::cmp::Reverse;
use std::collections::VecDeque;

mod counts;
mod memory;
mod ready;
mod tasks;
pub use counts::Counts;
pub use memory::Memory;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Waiting,
    Ready,
    Constrained,
    Executing,
    Memory,
    Error,
    /// Freed by the scheduler while executing: its result will be dropped.
    Cancelled,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Ready => "ready",
            State::Constrained => "constrained",
            State::Executing => "executing",
            State::Memory => "memory",
            State::Error => "error",
            State::Cancelled => "cancelled",
        }
    }

    fn queued(self) -> bool {
        matches!(self, State::Waiting | State::Ready | State::Constrained)
    }
}

/// A task's change of state as worker plugins' `transition` hook sees it: distributed's
/// state names, with "released" and then "forgotten" for a task this worker lets go of
/// (docs/runtime.md#worker-and-nanny-plugins).
#[derive(Debug, PartialEq, Eq)]
pub struct Transition {
    /// The key, encoded as the machine holds it.
    pub key: Box<[u8]>,
    pub start: &'static str,
    pub finish: &'static str,
}

pub struct DepIn {
    pub key: Vec<u8>,
    pub holders: Vec<String>,
}

/// One task of a `compute` message.
pub struct TaskIn<S = Vec<u8>> {
    pub id: u32,
    pub run_id: u64,
    pub key: Vec<u8>,
    pub priority: Priority,
    pub spec: S,
    pub resources: Vec<(String, f64)>,
    pub deps: Vec<DepIn>,
}

/// A task's record, kept by task id.
pub struct Task<S = Vec<u8>> {
    pub key: KeyId,
    pub state: State,
    /// Distinguishes this record from earlier ones of the same task id.
    pub instance: u64,
    pub run_id: u64,
    /// What the task needs until its result is held, then dropped: a held result's
    /// record stays small (None also for scattered data).
    todo: Option<Box<Todo<S>>>,
}

/// The part of a task's record that only a task not yet in memory needs.
struct Todo<S> {
    priority: Priority,
    spec: S,
    resources: Vec<(String, f64)>,
    deps: Vec<KeyId>,
    missing: u32,
    start: f64,
}

impl<S> Task<S> {
    pub fn deps(&self) -> &[KeyId] {
        self.todo.as_ref().map_or(&[], |t| &t.deps)
    }

    fn missing(&self) -> u32 {
        self.todo.as_ref().map_or(0, |t| t.missing)
    }

    fn start(&self) -> f64 {
        self.todo.as_ref().map_or(0.0, |t| t.start)
    }

    /// Whether the record still holds what a task not yet done needs.
    #[cfg(test)]
    pub(crate) fn has_todo(&self) -> bool {
        self.todo.is_some()
    }

    /// The record of a task not yet run (queued or running tasks keep theirs).
    fn todo(&mut self) -> &mut Todo<S> {
        self.todo
            .as_deref_mut()
            .expect("a task not yet done has its todo")
    }
}

/// A task taken to run: its spec and the keys whose values it is called with.
pub struct Job<S = Vec<u8>> {
    pub id: u32,
    pub instance: u64,
    /// Where the task's record was when taken.
    slot: u32,
    pub key: KeyId,
    pub spec: S,
    pub deps: Vec<KeyId>,
    resources: Vec<(String, f64)>,
}

/// What became of a finished job.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Reported in the next `finished` batch.
    Finished,
    /// Report it as erred with this run id.
    Erred { run_id: u64 },
    /// Freed, stolen or superseded meanwhile: nothing to report.
    Dropped,
}

/// A key no peer could provide: after a pause the caller gives these waiters back.
pub struct Missing {
    pub key: KeyId,
    pub waiters: Vec<(u32, u64)>,
}

/// A ready task; the greatest runs first: the best priority, then among equal
/// priorities the later arrival (`instance` is unique). `slot` is where its record
/// was: taking it reads the record there, with no lookup by id.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    priority: Reverse<Priority>,
    instance: u64,
    id: u32,
    slot: u32,
}

pub struct Machine<V, S = Vec<u8>> {
    address: String,
    nthreads: usize,
    pub keys: Keys<V>,
    tasks: tasks::Tasks<S>,
    /// Freed while executing, by task id (revived if sent again).
    cancelled: FxHashMap<u32, Task<S>>,
    /// Freed while executing and replaced since, by instance: released when done.
    orphans: FxHashMap<u64, Task<S>>,
    ready: ReadyQueue<Entry>,
    instances: u64,
    /// Every ready task needs resources that are in use: nothing to take until some
    /// are given back or another task becomes ready (idle threads sleep meanwhile).
    waiting_for_resources: bool,
    n_executing: usize,
    executing: FxHashSet<u32>,
    /// Seceded calls, by task instance (an id may name a newer record meanwhile).
    seceded: FxHashSet<u64>,
    /// Seceded calls waiting to count again, by instance, first come first served.
    rejoining: VecDeque<u64>,
    granted: FxHashSet<u64>,
    free_resources: Vec<(String, f64)>,
    to_fetch: Vec<KeyId>,
    /// Keys being fetched (`Fetch::InFlight`), for the load counts.
    in_flight: usize,
    pub finished: FinishedBatch,
    /// Keys of fetched copies to announce to the scheduler, and of announced copies
    /// dropped since (in this order: a copy may come and go between two reports).
    pub replicas_added: Vec<Box<[u8]>>,
    pub replicas_dropped: Vec<Box<[u8]>>,
    /// Values let go of, for the caller to drop when convenient (Python values run
    /// arbitrary code when freed, which must not happen under the caller's lock).
    pub graveyard: Vec<V>,
    rng: u64,
    /// Counts stores and reads of values: the recency of each key's last use.
    uses: u64,
    /// Bytes held in memory and spilled (docs/runtime.md#memory).
    memory: Memory,
    /// Memory is short: start no task (running ones finish).
    paused: bool,
    spill_target: Option<i64>,
    /// State changes recorded for a `transition` plugin; None (the default): nobody
    /// listens, and nothing is recorded.
    transitions: Option<Vec<Transition>>,
}

impl<V, S: Default> Machine<V, S> {
    pub fn new(address: &str, nthreads: usize, resources: Vec<(String, f64)>) -> Self {
        Self {
            address: address.to_owned(),
            nthreads,
            keys: Keys::default(),
            tasks: tasks::Tasks::default(),
            cancelled: FxHashMap::default(),
            orphans: FxHashMap::default(),
            ready: ReadyQueue::default(),
            instances: 0,
            waiting_for_resources: false,
            n_executing: 0,
            executing: FxHashSet::default(),
            seceded: FxHashSet::default(),
            rejoining: VecDeque::new(),
            granted: FxHashSet::default(),
            free_resources: resources,
            to_fetch: Vec::new(),
            in_flight: 0,
            finished: FinishedBatch::default(),
            replicas_added: Vec::new(),
            replicas_dropped: Vec::new(),
            graveyard: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
            uses: 0,
            memory: Memory::default(),
            paused: false,
            spill_target: None,
            transitions: None,
        }
    }

    /// Records state changes (for `take_transitions`) or stops (forgetting those
    /// not taken).
    pub fn feed_transitions(&mut self, on: bool) {
        self.transitions = on.then(|| self.transitions.take().unwrap_or_default());
    }

    /// The state changes recorded since the last call, in order.
    pub fn take_transitions(&mut self) -> Vec<Transition> {
        self.transitions
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn note(&mut self, key: KeyId, start: &'static str, finish: &'static str) {
        if let Some(feed) = &mut self.transitions {
            let key = self.keys.get(key).bytes.clone();
            feed.push(Transition { key, start, finish });
        }
    }

    /// A task leaves this worker's records from state `from`.
    fn note_forgotten(&mut self, key: KeyId, from: State) {
        if self.transitions.is_some() {
            self.note(key, from.name(), "released");
            self.note(key, "released", "forgotten");
        }
    }

    pub fn set_address(&mut self, address: &str) {
        self.address = address.to_owned();
    }

    pub fn task(&self, id: u32) -> Option<&Task<S>> {
        self.tasks.get(&id)
    }

    /// The tasks known, with their ids.
    pub fn tasks(&self) -> impl Iterator<Item = (u32, &Task<S>)> {
        self.tasks.iter()
    }

    pub fn value(&self, key: &[u8]) -> Option<&V> {
        self.keys
            .find(key)
            .and_then(|k| self.keys.get(k).value.as_ref())
    }

    pub fn n_executing(&self) -> usize {
        self.n_executing
    }

    pub fn n_seceded(&self) -> usize {
        self.seceded.len()
    }

    /// Whether a thread asking now could be given a task or a rejoin.
    pub fn runnable(&self) -> bool {
        let ready = !self.ready.is_empty() && !self.waiting_for_resources && !self.paused;
        self.n_executing < self.nthreads && (ready || !self.rejoining.is_empty())
    }

    /// How many dependencies a waiting task still lacks (None if not tracked).
    pub fn missing(&self, id: u32) -> Option<u32> {
        self.tasks.get(&id).map(Task::missing)
    }

    /// Checks the bookkeeping's invariants (tests and debugging): dependency counts,
    /// users, held values, the ready heap and the slot count agree with the records.
    pub fn validate(&self) -> Result<(), String> {
        let mut users: FxHashMap<KeyId, u32> = FxHashMap::default();
        let running = self
            .tasks
            .values()
            .filter(|t| t.state == State::Executing)
            .chain(self.cancelled.values())
            .chain(self.orphans.values());
        let queued = self.tasks.values().filter(|t| t.state.queued());
        for t in running.chain(queued) {
            for &d in t.deps() {
                *users.entry(d).or_default() += 1;
            }
        }
        for (k, slot) in self.keys.iter() {
            let want = users.get(&k).copied().unwrap_or(0);
            if slot.users != want {
                return Err(format!("key {k:?}: users {} != {want}", slot.users));
            }
            if let Some(id) = slot.task {
                if self.tasks.get(&id).is_none_or(|t| t.key != k) {
                    return Err(format!("key {k:?}: task {id} does not compute it"));
                }
            }
            let known = slot
                .task
                .and_then(|t| self.tasks.get(&t))
                .is_some_and(|t| t.state == State::Memory);
            if slot.value.is_some() && !known && slot.users == 0 {
                return Err(format!("key {k:?}: a private replica nobody needs"));
            }
            let freed = self.cancelled.values().chain(self.orphans.values());
            let running = freed.filter(|t| t.key == k).count() as u32;
            if slot.running() != running {
                return Err(format!(
                    "key {k:?}: running {} != {running}",
                    slot.running()
                ));
            }
            if slot.unused() {
                return Err(format!("key {k:?}: live but unused"));
            }
        }
        for t in self.cancelled.values().chain(self.orphans.values()) {
            if self.keys.try_get(t.key).is_none() {
                return Err(format!("freed running call {}: key forgotten", t.instance));
            }
        }
        for (id, t) in self.tasks.iter() {
            if self.keys.try_get(t.key).is_none() {
                return Err(format!("task {}: key {:?} forgotten", id, t.key));
            }
            let lacking = t
                .deps()
                .iter()
                .filter(|&&d| self.keys.try_get(d).is_none_or(|s| s.value.is_none()))
                .count() as u32;
            match t.state {
                State::Waiting if t.missing() != lacking || lacking == 0 => {
                    return Err(format!(
                        "task {}: waiting, missing {} but {lacking} lacking",
                        id,
                        t.missing()
                    ));
                }
                State::Ready | State::Constrained | State::Executing if lacking > 0 => {
                    return Err(format!("task {}: {:?} lacking {lacking} deps", id, t.state));
                }
                State::Memory if self.keys.get(t.key).value.is_none() => {
                    return Err(format!("task {}: in memory without a value", id));
                }
                State::Ready | State::Constrained
                    if !self
                        .ready
                        .iter()
                        .any(|e| e.id == id && e.instance == t.instance) =>
                {
                    return Err(format!("task {}: ready but not queued", id));
                }
                State::Cancelled => return Err(format!("task {}: tracked cancelled", id)),
                _ => {}
            }
            if (t.state == State::Executing) != self.executing.contains(&id) {
                return Err(format!("task {}: executing set disagrees", id));
            }
        }
        let running = self.executing.len() + self.cancelled.len() + self.orphans.len();
        if self.n_executing + self.seceded.len() != running {
            return Err(format!(
                "n_executing {} + seceded {} != running {running}",
                self.n_executing,
                self.seceded.len()
            ));
        }
        self.validate_counts()?;
        self.validate_memory()
    }

    // ----- scheduler messages -----------------------------------------------------

    /// Room for a batch of `n` more tasks and keys, made at once rather than by
    /// repeated growth (each growth copies the tables).
    pub fn reserve(&mut self, n: usize) {
        self.tasks.reserve(n);
        self.keys.reserve(n);
    }

    pub fn compute(&mut self, t: TaskIn<S>) {
        if let Some(ts) = self.tasks.get_mut(&t.id) {
            if Some(ts.key) == self.keys.find(&t.key) && ts.state != State::Error {
                // Re-sent (after a failed steal or a give-back, say): keep its state,
                // but look again for dependencies nobody is fetching, at the holders
                // the scheduler names now.
                ts.run_id = t.run_id;
                match ts.state {
                    State::Memory => {
                        let nbytes = self.keys.get(ts.key).nbytes;
                        self.report(t.id, t.run_id, nbytes, 0.0);
                    }
                    State::Waiting => {
                        for dep in t.deps {
                            if let Some(d) = self.keys.find(&dep.key) {
                                self.fetch_if_needed(d, dep.holders);
                            }
                        }
                    }
                    _ => {}
                }
                return;
            }
            // Retried after an error, or the id now names another key.
            self.free(t.id);
        }
        // Interned only now: the free may have forgotten the key (its slot may even
        // be reused).
        let key = self.keys.intern(t.key);
        if let Some(mut old) = self.cancelled.remove(&t.id) {
            if old.key == key {
                // Freed while executing and wanted again: the running call counts.
                old.run_id = t.run_id;
                old.state = State::Executing;
                self.keys.get_mut(key).with_rare(|r| r.running -= 1);
                self.track(t.id, old);
                self.note(key, "cancelled", "executing");
                return;
            }
            self.orphans.insert(old.instance, old);
        }
        self.instances += 1;
        let instance = self.instances;
        let mut ts = Task {
            key,
            state: State::Waiting,
            instance,
            run_id: t.run_id,
            todo: None,
        };
        self.note(key, "released", "waiting");
        if self.keys.get(key).value.is_some() {
            // Already held here (a private replica): it is this task's result.
            let slot = self.track(t.id, ts);
            let nbytes = self.keys.get(key).nbytes;
            self.set_memory(t.id, slot, nbytes, 0.0);
            return;
        }
        let mut todo = Todo {
            priority: t.priority,
            spec: t.spec,
            resources: t.resources,
            deps: Vec::with_capacity(t.deps.len()),
            missing: 0,
            start: 0.0,
        };
        for dep in t.deps {
            let d = self.keys.intern(dep.key);
            todo.deps.push(d);
            let slot = self.keys.get_mut(d);
            slot.users += 1;
            if slot.value.is_some() {
                continue;
            }
            todo.missing += 1;
            slot.with_rare(|r| r.waiters.push((t.id, instance)));
            self.fetch_if_needed(d, dep.holders);
        }
        let ready = todo.missing == 0;
        ts.todo = Some(Box::new(todo));
        let slot = self.track(t.id, ts);
        if ready {
            self.make_ready(t.id, slot);
        }
    }

    /// Queues a fetch of dependency `d` from `holders` unless it is held, already on
    /// its way, or computed here.
    fn fetch_if_needed(&mut self, d: KeyId, holders: Vec<String>) {
        let local_pending = self
            .keys
            .get(d)
            .task
            .and_then(|l| self.tasks.get(&l))
            .is_some_and(|l| {
                matches!(
                    l.state,
                    State::Waiting | State::Ready | State::Constrained | State::Executing
                )
            });
        let slot = self.keys.get_mut(d);
        if slot.value.is_some() || slot.fetch != Fetch::No || local_pending {
            return;
        }
        let holders = holders.into_iter().filter(|h| *h != self.address).collect();
        slot.with_rare(|r| r.holders = holders);
        slot.fetch = Fetch::Queued;
        self.to_fetch.push(d);
    }

    /// `free-keys`: forget the task; a running one finishes but its result is dropped.
    pub fn free(&mut self, id: u32) {
        let Some(mut ts) = self.untrack(id) else {
            if let Some(old) = self.cancelled.remove(&id) {
                self.orphans.insert(old.instance, old); // released when its call returns
            }
            return;
        };
        match ts.state {
            State::Executing => {
                self.note(ts.key, "executing", "cancelled");
                ts.state = State::Cancelled;
                self.keys.get_mut(ts.key).with_rare(|r| r.running += 1);
                self.executing.remove(&id);
                self.cancelled.insert(id, ts);
                return;
            }
            s if s.queued() => self.release_deps(ts.deps()),
            _ => {}
        }
        self.note_forgotten(ts.key, ts.state);
        self.maybe_drop(ts.key);
    }

    /// `remove-replicas`: the scheduler no longer counts this copy.
    pub fn remove_replica(&mut self, id: u32) {
        if self
            .tasks
            .get(&id)
            .is_some_and(|t| t.state == State::Memory)
        {
            let ts = self.untrack(id).expect("tracked");
            self.note_forgotten(ts.key, State::Memory);
            self.maybe_drop(ts.key); // kept (privately) while a local task needs it
        }
    }

    /// `steal-request`: give the task up unless it started; returns its state then.
    pub fn steal(&mut self, id: u32) -> Option<State> {
        let state = self.tasks.get(&id)?.state;
        if state.queued() {
            let ts = self.untrack(id).expect("tracked");
            self.note_forgotten(ts.key, state);
            self.release_deps(ts.deps());
            self.keys.collect(ts.key);
        }
        Some(state)
    }

    /// Scattered data the scheduler registered as task `id`: `value` is the key's value.
    pub fn put_scattered(&mut self, id: u32, key: &[u8], value: V, nbytes: i64) {
        let same = self
            .tasks
            .get(&id)
            .map(|ts| ts.state == State::Memory && self.keys.find(key) == Some(ts.key));
        if same == Some(false) {
            // Free the old record first: it would drop the value stored below.
            self.free(id);
        }
        let k = self.keys.intern(key);
        self.store(k, value, nbytes);
        let slot = self.keys.get_mut(k);
        slot.announced = false; // a registered result now
                                // Local tasks waiting for this key have it now.
        let waiters = slot.take_waiters();
        self.deps_arrived(&waiters);
        if same == Some(true) {
            return;
        }
        self.instances += 1;
        let ts = Task {
            key: k,
            state: State::Memory,
            instance: self.instances,
            run_id: 0,
            todo: None,
        };
        self.note(k, "released", "memory");
        self.track(id, ts);
    }

    // ----- execution --------------------------------------------------------------

    /// The best ready task that fits, now executing; None if no slot or none fits.
    pub fn take_ready(&mut self, now: f64) -> Option<Job<S>> {
        self.grant_rejoins();
        if self.n_executing >= self.nthreads || self.paused {
            return None;
        }
        let mut skipped = Vec::new();
        let mut job = None;
        let mut from = State::Ready;
        while let Some(e) = self.ready.pop() {
            let Some(ts) = self.tasks.at_mut(e.slot) else {
                continue;
            };
            if ts.instance != e.instance || !matches!(ts.state, State::Ready | State::Constrained) {
                continue; // stale: stolen, freed or superseded
            }
            let todo = ts.todo.as_deref_mut().expect("a queued task has its todo");
            if !todo.resources.is_empty() {
                let free = &mut self.free_resources;
                let fits = todo.resources.iter().all(|(name, amount)| {
                    free.iter().any(|(n, have)| n == name && *have >= *amount)
                });
                if !fits {
                    skipped.push(e);
                    continue;
                }
                for (name, amount) in &todo.resources {
                    if let Some((_, have)) = free.iter_mut().find(|(n, _)| n == name) {
                        *have -= amount;
                    }
                }
            }
            todo.start = now;
            from = ts.state;
            ts.state = State::Executing;
            self.n_executing += 1;
            self.executing.insert(e.id);
            job = Some(Job {
                id: e.id,
                instance: ts.instance,
                slot: e.slot,
                key: ts.key,
                spec: std::mem::take(&mut todo.spec),
                deps: todo.deps.clone(),
                resources: todo.resources.clone(),
            });
            break;
        }
        self.waiting_for_resources = job.is_none() && !skipped.is_empty();
        self.ready.extend(skipped);
        if let Some(job) = &job {
            for &d in &job.deps {
                self.touch(d);
            }
            self.note(job.key, from.name(), "executing");
        }
        job
    }

    /// Records a job's result (`Some((value, nbytes))`) or failure (`None`).
    pub fn complete(&mut self, job: Job<S>, result: Option<(V, i64)>, seconds: f64) -> Outcome {
        if !self.seceded.remove(&job.instance) {
            self.n_executing -= 1; // a seceded task gave its slot up already
        }
        // Where the job's record is, if still tracked: mostly where it was taken (its
        // instance names it alone), unless freed and revived meanwhile.
        let slot = Some(job.slot)
            .filter(|&i| self.tasks.at(i).is_some_and(|t| t.instance == job.instance))
            .or_else(|| {
                let (i, t) = self.tasks.get_at(&job.id)?;
                (t.instance == job.instance).then_some(i)
            });
        if slot.is_some() {
            self.executing.remove(&job.id); // not a newer task of the same id
        }
        for (name, amount) in &job.resources {
            if let Some((_, have)) = self.free_resources.iter_mut().find(|(n, _)| n == name) {
                *have += amount;
                self.waiting_for_resources = false;
            }
        }
        let freed = match self.cancelled.get(&job.id) {
            Some(t) if t.instance == job.instance => self.cancelled.remove(&job.id),
            _ => self.orphans.remove(&job.instance),
        };
        if let Some(ts) = freed {
            self.note_forgotten(ts.key, State::Cancelled);
            self.orphan(ts);
            self.graveyard.extend(result.map(|r| r.0));
            return Outcome::Dropped;
        }
        let current =
            slot.filter(|&i| self.tasks.at(i).expect("tracked").state == State::Executing);
        let Some(slot) = current else {
            self.graveyard.extend(result.map(|r| r.0));
            return Outcome::Dropped;
        };
        let ts = self.tasks.at_mut(slot).expect("current");
        let run_id = ts.run_id;
        if result.is_none() {
            ts.state = State::Error;
        }
        self.release_deps(&job.deps);
        match result {
            Some((value, nbytes)) => {
                self.store(job.key, value, nbytes);
                self.set_memory(job.id, slot, nbytes, seconds);
                Outcome::Finished
            }
            None => {
                self.note(job.key, "executing", "error");
                Outcome::Erred { run_id }
            }
        }
    }

    /// Running tasks and their start times (heartbeats).
    pub fn executing(&self) -> impl Iterator<Item = (u32, f64)> + '_ {
        self.executing
            .iter()
            .filter_map(|id| self.tasks.get(id).map(|t| (*id, t.start())))
    }

    /// The start time of a running task (or one freed while running).
    pub fn started(&self, id: u32) -> Option<f64> {
        self.tasks
            .get(&id)
            .or_else(|| self.cancelled.get(&id))
            .map(Task::start)
    }

    /// `secede()` from call `instance` of task `id` (its job's): the call stops
    /// counting against `nthreads`. Returns the run id to report as long-running (None
    /// if the task was freed meanwhile), or None if there is nothing to do.
    pub fn secede(&mut self, id: u32, instance: u64) -> Option<Option<u64>> {
        let ts = self.call(id, instance)?;
        let run_id = (ts.state == State::Executing).then_some(ts.run_id);
        if !self.seceded.insert(instance) {
            return None;
        }
        self.n_executing -= 1;
        Some(run_id)
    }

    /// The record of call `instance` of task `id` while it runs (freed since or not).
    fn call(&self, id: u32, instance: u64) -> Option<&Task<S>> {
        let running = |t: &&Task<S>| {
            t.instance == instance && matches!(t.state, State::Executing | State::Cancelled)
        };
        let found = self.tasks.get(&id).filter(running);
        let found = found.or_else(|| self.cancelled.get(&id).filter(running));
        found.or_else(|| self.orphans.get(&instance).filter(running))
    }

    /// `rejoin()` from call `instance`: true if it may go on now; otherwise it polls
    /// `poll_rejoin` until granted (rejoining calls take free slots before queued
    /// tasks do).
    pub fn rejoin(&mut self, instance: u64) -> bool {
        if !self.seceded.contains(&instance) {
            return true;
        }
        if !self.rejoining.contains(&instance) {
            self.rejoining.push_back(instance);
        }
        self.poll_rejoin(instance)
    }

    /// Whether the rejoin of call `instance` was granted (and it counts again).
    pub fn take_granted(&mut self, instance: u64) -> bool {
        self.granted.remove(&instance)
    }

    /// A waiting `rejoin()` asks again (a slot may have freed): true once granted.
    pub fn poll_rejoin(&mut self, instance: u64) -> bool {
        self.grant_rejoins();
        self.take_granted(instance)
    }

    fn grant_rejoins(&mut self) {
        while self.n_executing < self.nthreads {
            let Some(instance) = self.rejoining.pop_front() else {
                break;
            };
            self.seceded.remove(&instance);
            self.n_executing += 1;
            self.granted.insert(instance);
        }
    }

    // ----- dependencies -----------------------------------------------------------

    /// Keys to request, grouped per peer (`prefer` says which peers already have a
    /// connection), and keys nobody can provide any more.
    pub fn take_fetches(
        &mut self,
        prefer: &dyn Fn(&str) -> bool,
    ) -> (Vec<(String, Vec<KeyId>)>, Vec<Missing>) {
        let mut plan: Vec<(String, Vec<KeyId>)> = Vec::new();
        let mut missing = Vec::new();
        for k in std::mem::take(&mut self.to_fetch) {
            // The id may have been forgotten (and even reused) since it was queued.
            let Some(slot) = self.keys.try_get(k).filter(|s| s.fetch == Fetch::Queued) else {
                continue;
            };
            if slot.users == 0 || slot.value.is_some() {
                // Not needed, or held since (computed here, scattered, fetched).
                self.keys.get_mut(k).fetch = Fetch::No;
                self.keys.collect(k);
                continue;
            }
            if slot.holders().is_empty() {
                let waiters = self.live_waiters(k);
                self.keys.get_mut(k).fetch = Fetch::No;
                missing.push(Missing { key: k, waiters });
                continue;
            }
            let holder = match slot.holders().iter().find(|h| prefer(h)) {
                Some(h) => h.clone(),
                None => {
                    let n = slot.holders().len() as u64;
                    let i = self.next_random() % n;
                    self.keys.get(k).holders()[i as usize].clone()
                }
            };
            self.keys.get_mut(k).fetch = Fetch::InFlight;
            self.in_flight += 1;
            match plan.iter_mut().find(|(h, _)| *h == holder) {
                Some((_, ks)) => ks.push(k),
                None => plan.push((holder, vec![k])),
            }
        }
        (plan, missing)
    }

    /// xorshift: spreads fetches over holders, deterministically.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// A fetch from `holder` ended: `Ok(Some((value, nbytes)))` arrived, `Ok(None)`
    /// the peer lacks it (try another), `Err(())` the bytes would not load; then the
    /// returned waiters have erred (report them).
    pub fn fetched(
        &mut self,
        holder: &str,
        k: KeyId,
        got: Result<Option<(V, i64)>, ()>,
    ) -> Vec<(u32, u64)> {
        if self.keys.try_get(k).is_none() {
            // Not a key this machine planned a fetch of (in flight, keys stay).
            if let Ok(Some((value, _))) = got {
                self.graveyard.push(value);
            }
            return Vec::new();
        }
        let slot = self.keys.get_mut(k);
        if slot.fetch == Fetch::InFlight {
            slot.fetch = Fetch::No;
            self.in_flight -= 1;
        }
        let mut erred = Vec::new();
        match got {
            Ok(None) => {
                slot.with_rare(|r| r.holders.retain(|h| h != holder));
                if slot.fetch == Fetch::No {
                    slot.fetch = Fetch::Queued;
                    self.to_fetch.push(k);
                }
            }
            Ok(Some((value, nbytes))) => {
                slot.with_rare(|r| r.holders.clear());
                let waiters = slot.take_waiters();
                if slot.value.is_none() && slot.users > 0 {
                    slot.announced = true;
                    self.replicas_added.push(slot.bytes.clone());
                    self.store(k, value, nbytes);
                    self.deps_arrived(&waiters);
                } else {
                    self.graveyard.push(value);
                }
            }
            Err(()) => {
                slot.with_rare(|r| r.holders.clear());
                for (id, _) in self.live_waiters(k) {
                    let ts = self.tasks.get_mut(&id).expect("live");
                    ts.state = State::Error;
                    let (run_id, key) = (ts.run_id, ts.key);
                    let deps = std::mem::take(&mut ts.todo().deps);
                    self.release_deps(&deps);
                    self.note(key, "waiting", "error");
                    erred.push((id, run_id));
                }
            }
        }
        if self.keys.try_get(k).is_some() {
            self.keys.collect(k);
        }
        erred
    }

    /// Gives back tasks still waiting for a key no peer had (and not re-sent since);
    /// returns the task ids to report with `reschedule`.
    pub fn give_back(&mut self, waiters: &[(u32, u64)]) -> Vec<u32> {
        let mut out = Vec::new();
        for &(id, run_id) in waiters {
            let back = self
                .tasks
                .get(&id)
                .is_some_and(|t| t.state == State::Waiting && t.run_id == run_id);
            if back {
                let ts = self.untrack(id).expect("tracked");
                self.note_forgotten(ts.key, State::Waiting);
                self.release_deps(ts.deps());
                self.keys.collect(ts.key);
                out.push(id);
            }
        }
        out
    }

    /// Waiting tasks that need `k`, with their run ids; the stale entries go.
    fn live_waiters(&mut self, k: KeyId) -> Vec<(u32, u64)> {
        let tasks = &self.tasks;
        let slot = self.keys.get_mut(k);
        slot.with_rare(|r| {
            r.waiters.retain(|(id, inst)| {
                tasks
                    .get(id)
                    .is_some_and(|t| t.instance == *inst && t.state == State::Waiting)
            });
        });
        slot.waiters()
            .iter()
            .map(|(id, _)| (*id, tasks.get(id).expect("live waiter").run_id))
            .collect()
    }

    // ----- bookkeeping ------------------------------------------------------------

    /// Tracks `ts` as task `id`'s record; returns where the record is.
    fn track(&mut self, id: u32, ts: Task<S>) -> u32 {
        if ts.state == State::Executing {
            self.executing.insert(id);
        }
        self.keys.get_mut(ts.key).task = Some(id);
        self.tasks.insert(id, ts)
    }

    fn untrack(&mut self, id: u32) -> Option<Task<S>> {
        let ts = self.tasks.remove(&id)?;
        let slot = self.keys.get_mut(ts.key);
        if slot.task == Some(id) {
            slot.task = None;
        }
        Some(ts)
    }

    /// A record freed while running has finished (or was replaced): let go of it.
    fn orphan(&mut self, ts: Task<S>) {
        self.keys.get_mut(ts.key).with_rare(|r| r.running -= 1);
        self.release_deps(ts.deps());
        self.keys.collect(ts.key);
    }

    /// Queues task `id`, whose record is at `slot`.
    fn make_ready(&mut self, id: u32, slot: u32) {
        self.waiting_for_resources = false;
        let ts = self.tasks.at_mut(slot).expect("tracked");
        let todo = ts.todo.as_deref().expect("a queued task has its todo");
        let priority = todo.priority;
        ts.state = if todo.resources.is_empty() {
            State::Ready
        } else {
            State::Constrained
        };
        let (key, state) = (ts.key, ts.state);
        self.ready.push(Entry {
            priority: Reverse(priority),
            instance: ts.instance,
            id,
            slot,
        });
        self.note(key, "waiting", state.name());
    }

    /// Task `id`, whose record is at `slot`, is done: its result is held.
    fn set_memory(&mut self, id: u32, slot: u32, nbytes: i64, seconds: f64) {
        let ts = self.tasks.at_mut(slot).expect("tracked");
        let from = ts.state;
        ts.state = State::Memory;
        ts.todo = None;
        let (run_id, key) = (ts.run_id, ts.key);
        self.note(key, from.name(), "memory");
        self.keys.get_mut(key).announced = false; // the scheduler's result now
        self.report(id, run_id, nbytes, seconds);
        let waiters = self.keys.get_mut(key).take_waiters();
        self.deps_arrived(&waiters);
    }

    fn report(&mut self, id: u32, run_id: u64, nbytes: i64, seconds: f64) {
        self.finished.push(id, run_id, nbytes, seconds);
    }

    fn deps_arrived(&mut self, waiters: &[(u32, u64)]) {
        for &(id, instance) in waiters {
            let Some((slot, ts)) = self.tasks.get_mut_at(&id) else {
                continue;
            };
            if ts.instance == instance && ts.state == State::Waiting {
                let todo = ts.todo();
                todo.missing -= 1;
                if todo.missing == 0 {
                    self.make_ready(id, slot);
                }
            }
        }
    }

    /// The tasks needing `deps` are done with them: private replicas nobody needs go.
    fn release_deps(&mut self, deps: &[KeyId]) {
        for &d in deps {
            let slot = self.keys.get_mut(d);
            slot.users -= 1;
            if slot.users == 0 {
                slot.take_waiters();
                self.maybe_drop(d);
            }
        }
    }

    /// Drops `k`'s value unless it is a result the scheduler knows of or a local task
    /// still needs it.
    fn maybe_drop(&mut self, k: KeyId) {
        let slot = self.keys.get(k);
        let known = slot
            .task
            .and_then(|t| self.tasks.get(&t))
            .is_some_and(|t| t.state == State::Memory);
        if known || slot.users > 0 {
            return;
        }
        let old = self.unstore(k);
        let slot = self.keys.get_mut(k);
        if std::mem::take(&mut slot.announced) && old.is_some() {
            self.replicas_dropped.push(slot.bytes.clone());
        }
        self.graveyard.extend(old);
        self.keys.collect(k);
    }
}
