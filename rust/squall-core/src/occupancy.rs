//! Duration estimates, occupancy and the idle/saturated classification (docs/scheduling.md#occupancy-and-duration-estimates).

use crate::ids::{PrefixId, TaskId, WorkerId};
use crate::state::Scheduler;
use crate::worker::WorkerStatus;

impl Scheduler {
    /// `est(prefix)`: learned average, else 2 × longest observed run, else the default.
    pub fn prefix_duration(&self, p: PrefixId) -> f64 {
        let pf = &self.prefixes[p.idx()];
        if pf.duration_average >= 0.0 {
            pf.duration_average
        } else if pf.max_exec_time > 0.0 {
            2.0 * pf.max_exec_time
        } else {
            self.config.unknown_task_duration
        }
    }

    /// Whether `est(prefix)` comes from the prefix's own measurements.
    pub(crate) fn prefix_duration_known(&self, p: PrefixId) -> bool {
        self.prefixes[p.idx()].duration_average >= 0.0
    }

    pub fn task_duration(&self, t: TaskId) -> f64 {
        self.prefix_duration(self.prefix_of(t))
    }

    /// Expected seconds of work queued on a worker (derived, never stored).
    pub fn occupancy(&self, w: WorkerId) -> f64 {
        let ws = self.worker(w);
        let compute: f64 = ws
            .task_prefix_count
            .iter()
            .map(|(p, n)| f64::from(n) * self.prefix_duration(p))
            .sum();
        (compute + ws.network_occ as f64 / self.bandwidth).max(0.0)
    }

    pub fn total_occupancy(&self) -> f64 {
        let compute: f64 = self
            .prefix_count_global
            .iter()
            .map(|(&p, &n)| n as f64 * self.prefix_duration(p))
            .sum();
        (compute + self.network_occ_global as f64 / self.bandwidth).max(0.0)
    }

    /// Effective size of a task's result for cost estimates.
    #[inline]
    pub(crate) fn eff_nbytes(&self, t: TaskId) -> i64 {
        let nb = self.task(t).nbytes;
        if nb >= 0 {
            nb
        } else {
            self.config.default_data_size
        }
    }

    /// Seconds to bring the dependencies `w` lacks.
    pub fn comm_cost(&self, t: TaskId, w: WorkerId) -> f64 {
        let bytes: i64 = self
            .task(t)
            .dependencies
            .iter()
            .filter(|&d| !self.task(d).who_has.contains(w))
            .map(|d| self.eff_nbytes(d))
            .sum();
        bytes as f64 / self.bandwidth
    }

    pub(crate) fn is_unoccupied(&self, w: WorkerId, occ: f64, p: usize) -> bool {
        let nthreads = self.worker(w).nthreads as usize;
        p < nthreads || unoccupied(nthreads, p, occ, self.average_occupancy())
    }

    /// Occupancy per thread, cluster-wide (a sum over the task prefixes in flight).
    fn average_occupancy(&self) -> f64 {
        self.total_occupancy() / self.total_nthreads as f64
    }

    /// Free queuing slots (docs/scheduling.md#queuing); may be negative.
    pub(crate) fn task_slots_available(&self, w: WorkerId) -> i64 {
        if self.config.worker_saturation.is_infinite() {
            return i64::MAX;
        }
        let ws = self.worker(w);
        ws.slot_cap - ws.busy() as i64
    }

    /// What the queuing choice compares: processing tasks (seceded ones included) per thread.
    pub(crate) fn queuing_load(&self, w: WorkerId) -> f64 {
        let ws = self.worker(w);
        ws.processing.len() as f64 / f64::from(ws.nthreads.max(1))
    }

    /// How many tasks worker `w` may hold: Dask's `ceil(worker-saturation × nthreads)`,
    /// raised for tiny tasks so that one round trip to the worker carries about
    /// `worker_saturation_duration` seconds of work per thread. The estimate is the
    /// learned duration of the next queued task's prefix; an unmeasured prefix keeps
    /// Dask's cap, so queuing still protects memory for tasks of unknown cost.
    fn slot_cap(&mut self, w: WorkerId) -> i64 {
        let nthreads = f64::from(self.worker(w).nthreads);
        let by_count = ((self.config.worker_saturation * nthreads).ceil() as i64).max(1);
        let target = self.config.worker_saturation_duration;
        if target <= 0.0 || self.queued.is_empty() {
            return by_count;
        }
        let tasks = &self.tasks;
        let Some(head) = self.queued.first(|t| crate::state::queued_entry(tasks, t)) else {
            return by_count;
        };
        let p = self.prefix_of(head);
        if !self.prefix_duration_known(p) {
            return by_count;
        }
        let per_task = self.prefix_duration(p).max(1e-7);
        let by_time = (nthreads * target / per_task).min(1e6) as i64;
        by_count.max(by_time)
    }

    /// `check_idle_saturated`: re-files the worker in idle / saturated / idle_task_count.
    pub(crate) fn check_idle_saturated(&mut self, w: WorkerId, occ: Option<f64>) {
        if self.config.worker_saturation.is_finite() {
            self.wm(w).slot_cap = self.slot_cap(w);
        }
        let ws = self.worker(w);
        if self.total_nthreads == 0 || ws.status == WorkerStatus::Closed {
            return;
        }
        let rank = self.rank(w);
        let running = ws.status == WorkerStatus::Running;
        let p = ws.processing.len();
        let nc = ws.nthreads as usize;
        self.saturated.remove(rank, w);
        if !running {
            self.idle.remove(rank, w);
        } else {
            // Occupancy is needed only once every thread is busy; the cluster's average
            // is summed once for both tests (`is_unoccupied`'s, then saturation's).
            let (occ, avg) = if p < nc {
                (0.0, 0.0)
            } else {
                let occ = occ.unwrap_or_else(|| self.occupancy(w));
                (occ, self.average_occupancy())
            };
            if unoccupied(nc, p, occ, avg) {
                self.idle.insert(rank, w);
            } else {
                self.idle.remove(rank, w);
                if p > nc {
                    let pending = occ * (p - nc) as f64 / (p * nc) as f64;
                    if pending > 0.4 && pending > 1.9 * avg {
                        self.saturated.insert(rank, w);
                    }
                }
            }
        }
        if running && self.task_slots_available(w) > 0 {
            let load = self.queuing_load(w);
            self.idle_task_count.insert(rank, w, load);
        } else {
            self.idle_task_count.remove(rank, w);
        }
    }
}

/// Dask's idle test: a thread free, or under half the cluster's average occupancy per
/// thread (`avg`) for its `nthreads` with `p` tasks processing.
fn unoccupied(nthreads: usize, p: usize, occ: f64, avg: f64) -> bool {
    p < nthreads || occ < nthreads as f64 * avg / 2.0
}
