//! Choosing a worker (docs/scheduling.md#choosing-a-worker). Ties that Dask leaves to set iteration order are
//! broken by worker address order, so the same inputs always give the same choice.

use crate::ids::{TaskId, WorkerId};
use crate::state::Scheduler;
use crate::worker::WorkerStatus;
use smallvec::SmallVec;

/// Below this many workers the no-dependency fast path compares occupancies; above it,
/// it assigns round-robin.
const FAST_PATH_SCAN_LIMIT: usize = 20;

impl Scheduler {
    /// `is_rootish` (docs/scheduling.md#root-ish-tasks).
    pub fn is_rootish(&self, t: TaskId) -> bool {
        let ts = self.task(t);
        // An actor never queues: each is placed at once, on the worker with the fewest
        // actors (docs/actors.md).
        if ts.has_restrictions() || ts.is_actor() {
            return false;
        }
        if ts.is_data_producer() {
            return true;
        }
        let g = self.group(ts.group);
        if g.len <= 2 * self.total_nthreads {
            return false;
        }
        if g.dependencies.len() >= self.config.rootish_taskgroup {
            return false;
        }
        let dep_tasks: u64 = g
            .dependencies
            .iter()
            .filter_map(|&(dg, uid)| self.groups[dg.idx()].as_ref().filter(|x| x.uid == uid))
            .map(|x| x.len)
            .sum();
        dep_tasks < self.config.rootish_taskgroup_dependencies as u64
    }

    /// Queuing on: the least busy worker with a free slot, else None (docs/scheduling.md#queuing).
    /// With `validate` on, the index's answer is checked against the scan it replaces.
    pub(crate) fn decide_worker_rootish_queuing_enabled(&self) -> Option<WorkerId> {
        let chosen = self.idle_task_count.least_loaded();
        if self.config.validate {
            let scanned = self.least_loaded_by_scan();
            assert_eq!(chosen, scanned, "queuing choice: index and scan disagree");
        }
        chosen
    }

    /// The queuing choice by its definition: the first worker in address order among
    /// those with the fewest processing tasks per thread.
    pub(crate) fn least_loaded_by_scan(&self) -> Option<WorkerId> {
        let mut best: Option<(f64, WorkerId)> = None;
        for w in self.idle_task_count.iter() {
            let load = self.queuing_load(w);
            if best.is_none_or(|(b, _)| load < b) {
                best = Some((load, w));
            }
        }
        best.map(|(_, w)| w)
    }

    /// Queuing off: co-assign consecutive siblings to the same worker (docs/scheduling.md#co-assignment-without-queuing).
    pub(crate) fn decide_worker_rootish_queuing_disabled(&mut self, t: TaskId) -> Option<WorkerId> {
        let pool: Vec<WorkerId> = if self.idle.is_empty() {
            self.running.iter().collect()
        } else {
            self.idle.iter().collect()
        };
        if pool.is_empty() {
            return None;
        }
        let g = self.task(t).group;
        let group = self.group(g);
        let reuse = group.last_worker.filter(|&lw| {
            group.last_worker_tasks_left > 0
                && self
                    .get_worker(lw)
                    .is_some_and(|ws| ws.status == WorkerStatus::Running)
        });
        let ws = match reuse {
            Some(lw) => lw,
            None => {
                let ws = self.argmin_objective(t, pool.iter().copied())?;
                let share = self.group(g).len as f64 / self.total_nthreads as f64
                    * f64::from(self.worker(ws).nthreads);
                self.group_mut(g).last_worker_tasks_left = share.floor() as i64;
                ws
            }
        };
        let group = self.group_mut(g);
        let unassigned = group.count(crate::task::TaskState::Released)
            + group.count(crate::task::TaskState::Waiting);
        group.last_worker = (unassigned > 1).then_some(ws);
        group.last_worker_tasks_left -= 1;
        Some(ws)
    }

    /// Workers the task may run on: None = unrestricted (`valid_workers`, docs/scheduling.md#restrictions).
    pub fn valid_workers(&self, t: TaskId) -> Option<Vec<WorkerId>> {
        let r = self.task(t).restrictions()?;
        if r.is_empty() {
            return None;
        }
        let mut s: Option<Vec<WorkerId>> = None;
        if !r.workers.is_empty() {
            let mut v: Vec<WorkerId> = r
                .workers
                .iter()
                .filter_map(|a| self.resolve_worker(a))
                .collect();
            v.sort_by_key(|&w| self.rank(w));
            v.dedup();
            s = Some(v);
        }
        if !r.hosts.is_empty() {
            let hosts: Vec<String> = r
                .hosts
                .iter()
                .map(|h| {
                    self.resolve_worker(h)
                        .map_or(h.clone(), |w| self.worker(w).host.clone())
                })
                .collect();
            let on_hosts = self
                .worker_ids()
                .filter(|&w| hosts.contains(&self.worker(w).host));
            let mut v = s.take().unwrap_or_default();
            v.extend(on_hosts);
            v.sort_by_key(|&w| self.rank(w));
            v.dedup();
            s = Some(v);
        }
        if !r.resources.is_empty() {
            let fits = |w: WorkerId| {
                let ws = self.worker(w);
                r.resources
                    .iter()
                    .all(|(name, need)| ws.resource(name).is_some_and(|have| have >= *need))
            };
            s = Some(match s {
                Some(v) => v.into_iter().filter(|&w| fits(w)).collect(),
                None => self.worker_ids().filter(|&w| fits(w)).collect(),
            });
        }
        let mut v = s.unwrap_or_default();
        if self.running.len() < self.worker_index.len() {
            v.retain(|&w| self.running.contains(self.rank(w), w));
        }
        Some(v)
    }

    /// A worker by address, or by name.
    pub fn resolve_worker(&self, addr_or_name: &str) -> Option<WorkerId> {
        self.worker_index.get(addr_or_name).copied().or_else(|| {
            self.worker_ids()
                .find(|&w| self.worker(w).name == addr_or_name)
        })
    }

    /// `decide_worker_non_rootish` (docs/scheduling.md#other-tasks).
    pub(crate) fn decide_worker_non_rootish(&self, t: TaskId) -> Option<WorkerId> {
        if self.running.is_empty() {
            return None;
        }
        let mut valid = self.valid_workers(t);
        if valid.is_none() && self.running.len() < self.worker_index.len() {
            valid = Some(self.running.iter().collect());
        }
        if !self.task(t).dependencies.is_empty() || valid.is_some() {
            return self.decide_worker(t, valid);
        }
        let pool = if self.idle.is_empty() {
            &self.running
        } else {
            &self.idle
        };
        let n = pool.len();
        if n < FAST_PATH_SCAN_LIMIT {
            let mut best: Option<(f64, WorkerId)> = None;
            for w in pool.iter() {
                let occ = self.occupancy(w);
                if best.is_none_or(|(b, _)| occ < b) {
                    best = Some((occ, w));
                }
            }
            let (occ, ws) = best?;
            if occ == 0.0 {
                let start = (self.n_processing_assignments % n as u64) as usize;
                for i in 0..n {
                    let wp = pool.get((i + start) % n);
                    if self.occupancy(wp) == 0.0 {
                        return Some(wp);
                    }
                }
            }
            Some(ws)
        } else {
            Some(pool.get((self.n_processing_assignments % n as u64) as usize))
        }
    }

    /// Module-level `decide_worker`: prefer workers holding dependencies.
    fn decide_worker(&self, t: TaskId, valid: Option<Vec<WorkerId>>) -> Option<WorkerId> {
        let ts = self.task(t);
        // Inline for the usual few holders: a heap vector here was an allocation per
        // decision.
        let mut candidates: SmallVec<[WorkerId; 8]> = if ts.is_actor() {
            self.running.iter().collect()
        } else {
            let mut v = SmallVec::new();
            for d in ts.dependencies.iter() {
                for w in self.task(d).who_has.iter() {
                    if self.running.contains(self.rank(w), w) && !v.contains(&w) {
                        v.push(w);
                    }
                }
            }
            v
        };
        match &valid {
            None => {
                if candidates.is_empty() {
                    candidates = self.running.iter().collect();
                }
            }
            Some(valid) => {
                candidates.retain(|w| valid.contains(w));
                if candidates.is_empty() {
                    candidates = SmallVec::from_slice(valid);
                    if candidates.is_empty() && ts.restrictions().is_some_and(|r| r.loose) {
                        return self.decide_worker(t, None);
                    }
                }
            }
        }
        match candidates.len() {
            0 => None,
            1 => Some(candidates[0]),
            _ => {
                candidates.sort_by_key(|&w| self.rank(w));
                self.argmin_objective(t, candidates.into_iter())
            }
        }
    }

    /// First worker (in the given order) minimising the worker objective (docs/scheduling.md#the-worker-objective).
    pub(crate) fn argmin_objective(
        &self,
        t: TaskId,
        pool: impl Iterator<Item = WorkerId>,
    ) -> Option<WorkerId> {
        let actor = self.task(t).is_actor();
        let mut best: Option<((usize, f64, i64), WorkerId)> = None;
        for w in pool {
            let ws = self.worker(w);
            let start = self.occupancy(w) / f64::from(ws.nthreads.max(1)) + self.comm_cost(t, w);
            let obj = (if actor { ws.actors.len() } else { 0 }, start, ws.nbytes);
            if best.as_ref().is_none_or(|(b, _)| obj < *b) {
                best = Some((obj, w));
            }
        }
        best.map(|(_, w)| w)
    }
}
