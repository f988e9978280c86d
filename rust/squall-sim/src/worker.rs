//! The worker side of docs/scheduling.md#the-worker-side, reduced to what the scheduler can observe:
//! tasks wait for their dependencies, then sit in a ready heap ordered by
//! (scheduler priority, worker-local counter), at most `nthreads` execute at once, and
//! results count against the worker's memory until freed. Fetched copies are kept
//! while a local task needs them, as the runtime's worker does (docs/runtime.md).
//!
//! Everything here is local bookkeeping; the simulation does the timing and the
//! messaging.

use crate::messages::ComputeMsg;
use indexmap::{IndexMap, IndexSet};
use rustc_hash::FxBuildHasher;
use squall_core::{Priority, WorkerId, WorkerTaskState};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(crate) type FxIndexMap<K, V> = IndexMap<K, V, FxBuildHasher>;
pub(crate) type FxIndexSet<T> = IndexSet<T, FxBuildHasher>;

/// (priority, counter, task): smallest first. The counter decreases with every
/// compute-task received, so equal priorities run last-in first-out.
type Heap = BinaryHeap<Reverse<(Priority, i64, usize)>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Some dependencies are still being fetched.
    Waiting,
    Ready,
    Executing(u64),
}

/// A task the scheduler asked this worker to compute.
struct Assigned {
    run_id: u64,
    priority: Priority,
    counter: i64,
    stage: Stage,
    /// All its dependencies: each counts this task as a user while it is assigned.
    deps: Vec<usize>,
    /// Dependencies not yet held here.
    waiting_for: Vec<usize>,
    resources: Vec<(String, f64)>,
}

/// One run on a thread.
pub(crate) struct Execution {
    pub task: usize,
    pub start: f64,
    /// Freed by the scheduler while running: the result will be discarded.
    pub cancelled: bool,
    resources: Vec<(String, f64)>,
}

pub(crate) struct WorkerSim {
    nthreads: usize,
    pub core: Option<WorkerId>,
    pub alive: bool,
    /// Died (possibly before arriving): never comes back.
    pub dead: bool,
    assigned: FxIndexMap<usize, Assigned>,
    pub executing: FxIndexMap<u64, Execution>,
    ready: Heap,
    /// Ready tasks that need resources.
    constrained: Heap,
    counter: i64,
    /// Results held here (computed or fetched): task → bytes.
    pub data: FxIndexMap<usize, u64>,
    pub held: u64,
    pub peak: u64,
    /// Where each dependency can be fetched from, as last told by the scheduler.
    pub who_has: FxIndexMap<usize, Vec<usize>>,
    /// Dependency → local tasks waiting for it.
    waiters: FxIndexMap<usize, Vec<usize>>,
    /// Dependencies being transferred here.
    pub fetching: FxIndexSet<usize>,
    /// Dependencies with no reachable holder: their waiting tasks go back to the
    /// scheduler (`reschedule`) unless a new compute-task names holders first.
    pub missing: FxIndexSet<usize>,
    /// Dependency → number of assigned tasks that need it.
    users: FxIndexMap<usize, usize>,
    /// Fetched copies held here (announced with add-replicas).
    fetched: FxIndexSet<usize>,
    /// Fetched copies dropped since the last [`Self::take_dropped`] (for drop-replicas).
    dropped: Vec<usize>,
    available: Vec<(String, f64)>,
    /// When the inbound link finishes its queued transfers.
    pub inbound_free_at: f64,
    /// Measured transfer bandwidth (reported in heartbeats).
    pub bandwidth: f64,
}

impl WorkerSim {
    pub fn new(nthreads: u32, resources: &[(String, f64)], bandwidth: f64) -> Self {
        WorkerSim {
            nthreads: nthreads as usize,
            core: None,
            alive: false,
            dead: false,
            assigned: Default::default(),
            executing: Default::default(),
            ready: Heap::new(),
            constrained: Heap::new(),
            counter: 0,
            data: Default::default(),
            held: 0,
            peak: 0,
            who_has: Default::default(),
            waiters: Default::default(),
            fetching: Default::default(),
            missing: Default::default(),
            users: Default::default(),
            fetched: Default::default(),
            dropped: Vec::new(),
            available: resources.to_vec(),
            inbound_free_at: 0.0,
            bandwidth,
        }
    }

    /// compute-task: returns the dependencies to start fetching.
    pub fn compute(&mut self, msg: ComputeMsg) -> Vec<usize> {
        self.counter -= 1;
        if let Some(a) = self.assigned.get_mut(&msg.task) {
            // A re-dispatch of a task already here: a new run id, and holders to try
            // for what it still misses.
            a.run_id = msg.run_id;
            let waiting_for = a.waiting_for.clone();
            let mut to_fetch = Vec::new();
            for (dep, holders) in msg.deps {
                if waiting_for.contains(&dep) && !self.fetching.contains(&dep) {
                    self.who_has.insert(dep, holders);
                    self.missing.swap_remove(&dep);
                    to_fetch.push(dep);
                }
            }
            return to_fetch;
        }
        if let Some((&id, ex)) = self
            .executing
            .iter_mut()
            .find(|(_, e)| e.task == msg.task && e.cancelled)
        {
            // Dask's "resumed": the cancelled run still executing counts again.
            ex.cancelled = false;
            let deps: Vec<usize> = msg.deps.into_iter().map(|(d, _)| d).collect();
            self.use_deps(&deps);
            self.assigned.insert(
                msg.task,
                Assigned {
                    run_id: msg.run_id,
                    priority: msg.priority,
                    counter: self.counter,
                    stage: Stage::Executing(id),
                    deps,
                    waiting_for: Vec::new(),
                    resources: msg.resources,
                },
            );
            return Vec::new();
        }
        let mut waiting_for = Vec::new();
        let mut to_fetch = Vec::new();
        let mut deps = Vec::with_capacity(msg.deps.len());
        for (dep, holders) in msg.deps {
            deps.push(dep);
            self.who_has.insert(dep, holders);
            if self.data.contains_key(&dep) {
                continue;
            }
            waiting_for.push(dep);
            self.waiters.entry(dep).or_default().push(msg.task);
            // Fresh holders make a missing dependency worth another try.
            if !self.fetching.contains(&dep) && !to_fetch.contains(&dep) {
                self.missing.swap_remove(&dep);
                to_fetch.push(dep);
            }
        }
        self.use_deps(&deps);
        let a = Assigned {
            run_id: msg.run_id,
            priority: msg.priority,
            counter: self.counter,
            stage: Stage::Waiting,
            deps,
            waiting_for,
            resources: msg.resources,
        };
        let now_ready = a.waiting_for.is_empty();
        self.assigned.insert(msg.task, a);
        if now_ready {
            self.make_ready(msg.task);
        }
        to_fetch
    }

    fn make_ready(&mut self, task: usize) {
        let a = self.assigned.get_mut(&task).expect("assigned");
        a.stage = Stage::Ready;
        let entry = Reverse((a.priority, a.counter, task));
        if a.resources.is_empty() {
            self.ready.push(entry);
        } else {
            self.constrained.push(entry);
        }
    }

    /// Whether a local task still waits for `dep`.
    pub fn needs(&self, dep: usize) -> bool {
        self.waiters.contains_key(&dep)
    }

    fn use_deps(&mut self, deps: &[usize]) {
        for &d in deps {
            *self.users.entry(d).or_insert(0) += 1;
        }
    }

    /// A task left: its dependencies lose a user, and fetched copies nobody here
    /// needs any more are dropped (to be reported with drop-replicas).
    fn release_deps(&mut self, deps: &[usize]) {
        for d in deps {
            let Some(n) = self.users.get_mut(d) else {
                continue;
            };
            *n -= 1;
            if *n > 0 {
                continue;
            }
            self.users.swap_remove(d);
            self.missing.swap_remove(d);
            if self.fetched.contains(d) {
                self.drop_data(*d);
                self.dropped.push(*d);
            }
        }
    }

    /// Fetched copies dropped since the last call.
    pub fn take_dropped(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.dropped)
    }

    /// A fetched dependency arrived: keep it if still needed (returns whether kept).
    pub fn dependency_arrived(&mut self, dep: usize, nbytes: u64) -> bool {
        self.fetching.swap_remove(&dep);
        let Some(tasks) = self.waiters.swap_remove(&dep) else {
            return false;
        };
        self.store(dep, nbytes);
        self.fetched.insert(dep);
        for t in tasks {
            let a = self.assigned.get_mut(&t).expect("waiters are assigned");
            a.waiting_for.retain(|&d| d != dep);
            if a.waiting_for.is_empty() {
                self.make_ready(t);
            }
        }
        true
    }

    pub fn store(&mut self, task: usize, nbytes: u64) {
        if self.data.insert(task, nbytes).is_none() {
            self.held += nbytes;
            self.peak = self.peak.max(self.held);
        }
    }

    pub fn drop_data(&mut self, task: usize) {
        self.fetched.swap_remove(&task);
        if let Some(n) = self.data.swap_remove(&task) {
            self.held -= n;
        }
    }

    /// Forgets an assigned task (one that has not started, or whose run is being
    /// cancelled or has ended).
    fn unassign(&mut self, task: usize) {
        let a = self.assigned.swap_remove(&task).expect("assigned");
        self.release_deps(&a.deps);
        for dep in a.waiting_for {
            if let Some(ws) = self.waiters.get_mut(&dep) {
                ws.retain(|&t| t != task);
                if ws.is_empty() {
                    self.waiters.swap_remove(&dep);
                }
            }
        }
    }

    /// free-keys: drop the data, cancel the task (a running one finishes unreported).
    pub fn free(&mut self, task: usize) {
        self.drop_data(task);
        match self.assigned.get(&task).map(|a| a.stage) {
            Some(Stage::Executing(id)) => {
                self.executing[&id].cancelled = true;
                self.unassign(task);
            }
            Some(_) => self.unassign(task),
            None => {}
        }
    }

    /// steal-request: give up a task that has not started; report the local state.
    pub fn steal(&mut self, task: usize) -> Option<WorkerTaskState> {
        let Some(a) = self.assigned.get(&task) else {
            if self.executing.values().any(|e| e.task == task) {
                return Some(WorkerTaskState::Cancelled);
            }
            return self
                .data
                .contains_key(&task)
                .then_some(WorkerTaskState::Memory);
        };
        let state = match a.stage {
            Stage::Executing(_) => return Some(WorkerTaskState::Executing),
            Stage::Waiting => WorkerTaskState::Waiting,
            Stage::Ready if a.resources.is_empty() => WorkerTaskState::Ready,
            Stage::Ready => WorkerTaskState::Constrained,
        };
        self.unassign(task);
        Some(state)
    }

    /// missing-data-retry expired: gives `task` back if it still waits in run `run_id`
    /// (it was not freed or re-sent meanwhile); true if it is to be rescheduled.
    pub fn give_back(&mut self, task: usize, run_id: u64) -> bool {
        let back = self
            .assigned
            .get(&task)
            .is_some_and(|a| a.stage == Stage::Waiting && a.run_id == run_id);
        if back {
            self.unassign(task);
        }
        back
    }

    /// Waiting tasks that need `dep`, with their run ids.
    pub fn waiters_of(&self, dep: usize) -> Vec<(usize, u64)> {
        self.waiters
            .get(&dep)
            .into_iter()
            .flatten()
            .map(|t| (*t, self.assigned[t].run_id))
            .collect()
    }

    fn fits(&self, need: &[(String, f64)]) -> bool {
        need.iter().all(|(name, amount)| {
            self.available
                .iter()
                .any(|(n, have)| n == name && have >= amount)
        })
    }

    /// The best runnable task if a thread is free: the better head of the ready and
    /// constrained heaps, the latter only when its resources are available.
    pub fn next_runnable(&mut self) -> Option<usize> {
        if self.executing.len() >= self.nthreads {
            return None;
        }
        let assigned = &self.assigned;
        let current = |&Reverse((_, c, t)): &Reverse<(Priority, i64, usize)>| {
            assigned
                .get(&t)
                .is_some_and(|a| a.stage == Stage::Ready && a.counter == c)
        };
        for heap in [&mut self.ready, &mut self.constrained] {
            while heap.peek().is_some_and(|e| !current(e)) {
                heap.pop();
            }
        }
        let ready = self.ready.peek().map(|e| e.0);
        let constrained = self
            .constrained
            .peek()
            .map(|e| e.0)
            .filter(|&(_, _, t)| self.fits(&self.assigned[&t].resources));
        let heap = match (ready, constrained) {
            (Some(r), Some(c)) if c < r => &mut self.constrained,
            (Some(_), _) => &mut self.ready,
            (None, Some(_)) => &mut self.constrained,
            (None, None) => return None,
        };
        heap.pop().map(|Reverse((_, _, t))| t)
    }

    /// Puts a task returned by [`Self::next_runnable`] on a thread.
    pub fn start(&mut self, task: usize, exec: u64, now: f64) {
        let a = self.assigned.get_mut(&task).expect("assigned");
        a.stage = Stage::Executing(exec);
        let resources = a.resources.clone();
        for (name, amount) in &resources {
            if let Some((_, have)) = self.available.iter_mut().find(|(n, _)| n == name) {
                *have -= amount;
            }
        }
        self.executing.insert(
            exec,
            Execution {
                task,
                start: now,
                cancelled: false,
                resources,
            },
        );
    }

    /// A run ended: frees its thread and resources. Returns the run and, unless it was
    /// cancelled, the run id to report.
    pub fn finish(&mut self, exec: u64) -> Option<(Execution, Option<u64>)> {
        let ex = self.executing.swap_remove(&exec)?;
        for (name, amount) in &ex.resources {
            if let Some((_, have)) = self.available.iter_mut().find(|(n, _)| n == name) {
                *have += amount;
            }
        }
        let run_id = match self.assigned.get(&ex.task) {
            Some(a) if !ex.cancelled => Some(a.run_id),
            _ => None,
        };
        if run_id.is_some() {
            self.unassign(ex.task);
        }
        Some((ex, run_id))
    }

    /// The worker died: everything it held or ran vanishes. Returns the interrupted runs.
    pub fn kill(&mut self) -> Vec<Execution> {
        self.alive = false;
        self.dead = true;
        self.assigned.clear();
        self.ready.clear();
        self.constrained.clear();
        self.data.clear();
        self.held = 0;
        self.waiters.clear();
        self.fetching.clear();
        self.missing.clear();
        self.users.clear();
        self.fetched.clear();
        self.dropped.clear();
        self.executing.drain(..).map(|(_, e)| e).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(task: usize, run_id: u64, order: u64, deps: Vec<usize>) -> ComputeMsg {
        ComputeMsg {
            task,
            run_id,
            priority: Priority::new(0, 1.0, order),
            deps: deps.into_iter().map(|d| (d, vec![9])).collect(),
            resources: Vec::new(),
        }
    }

    #[test]
    fn ready_heap_is_priority_then_lifo() {
        let mut w = WorkerSim::new(1, &[], 1e8);
        w.compute(msg(1, 1, 5, vec![]));
        w.compute(msg(2, 2, 5, vec![]));
        w.compute(msg(3, 3, 1, vec![]));
        assert_eq!(w.next_runnable(), Some(3), "best priority first");
        w.start(3, 100, 0.0);
        assert_eq!(w.next_runnable(), None, "one thread");
        let (_, run) = w.finish(100).unwrap();
        assert_eq!(run, Some(3));
        assert_eq!(
            w.next_runnable(),
            Some(2),
            "equal priorities: last received first"
        );
    }

    #[test]
    fn steal_gives_up_only_tasks_not_started() {
        let mut w = WorkerSim::new(1, &[], 1e8);
        assert_eq!(w.compute(msg(1, 1, 0, vec![7])), vec![7]);
        w.compute(msg(2, 2, 1, vec![]));
        let t = w.next_runnable().unwrap();
        w.start(t, 1, 0.0);
        assert_eq!(w.steal(2), Some(WorkerTaskState::Executing));
        assert_eq!(w.steal(1), Some(WorkerTaskState::Waiting));
        assert!(!w.needs(7), "the stolen task no longer waits for its input");
        assert_eq!(w.steal(1), None);
    }

    #[test]
    fn freed_running_task_is_discarded_then_resumed_by_a_new_dispatch() {
        let mut w = WorkerSim::new(1, &[], 1e8);
        w.compute(msg(1, 1, 0, vec![]));
        let t = w.next_runnable().unwrap();
        w.start(t, 5, 0.0);
        w.free(1);
        assert_eq!(w.steal(1), Some(WorkerTaskState::Cancelled));
        w.compute(msg(1, 2, 0, vec![]));
        let (_, run) = w.finish(5).unwrap();
        assert_eq!(run, Some(2), "the resumed run reports the new run id");
    }

    #[test]
    fn fetched_copy_is_kept_while_a_local_task_needs_it() {
        let mut w = WorkerSim::new(1, &[], 1e8);
        assert_eq!(w.compute(msg(1, 1, 0, vec![7])), vec![7]);
        w.compute(msg(2, 2, 1, vec![7]));
        assert!(w.dependency_arrived(7, 10));
        let t = w.next_runnable().unwrap();
        w.start(t, 1, 0.0);
        w.finish(1);
        assert!(w.data.contains_key(&7), "the other task still needs it");
        assert!(w.take_dropped().is_empty());
        w.free(if t == 1 { 2 } else { 1 });
        assert!(!w.data.contains_key(&7));
        assert_eq!(w.take_dropped(), vec![7], "reported with drop-replicas");
        assert_eq!(w.held, 0);
    }

    #[test]
    fn give_back_only_a_task_still_waiting_in_the_same_run() {
        let mut w = WorkerSim::new(1, &[], 1e8);
        w.compute(msg(1, 1, 0, vec![7]));
        assert_eq!(w.waiters_of(7), vec![(1, 1)]);
        w.compute(msg(1, 2, 0, vec![7])); // re-sent: a new run
        assert!(!w.give_back(1, 1), "re-sent meanwhile");
        assert!(w.give_back(1, 2));
        assert!(!w.needs(7), "given back: no longer waits");
        assert!(!w.give_back(1, 2), "gone");
    }

    #[test]
    fn constrained_tasks_wait_for_resources() {
        let mut w = WorkerSim::new(4, &[("GPU".into(), 1.0)], 1e8);
        for t in 1..=2 {
            let mut m = msg(t, t as u64, t as u64, vec![]);
            m.resources = vec![("GPU".into(), 1.0)];
            w.compute(m);
        }
        let t = w.next_runnable().unwrap();
        w.start(t, 1, 0.0);
        assert_eq!(w.next_runnable(), None, "the only GPU is taken");
        w.finish(1);
        assert!(w.next_runnable().is_some());
    }
}
