//! How many workers the work needs, which workers to let go first, and what they
//! must hand over before they go (docs/runtime.md#adaptive-scaling). Both read counters kept incrementally
//! (`total_occupancy`, `n_processing`, `total_nbytes`, `total_memory`) plus a bounded
//! sample of the queue; neither walks the tasks.

use crate::ids::{TaskId, WorkerId};
use crate::state::{queued_entry, Scheduler};

/// Queued tasks whose durations are summed; the rest are assumed alike.
const QUEUE_SAMPLE: usize = 100;
/// Memory in use above this fraction of the cluster's limit asks for twice the workers.
const MEMORY_PRESSURE: f64 = 0.6;
/// `workers_to_close` without a count keeps workers whose memory limit covers this
/// multiple of the data held.
const MEMORY_RATIO: f64 = 2.0;

impl Scheduler {
    /// Dask's `adaptive_target`: enough workers that the known work (occupancy of the
    /// processing tasks plus an estimate of the queued and unrunnable ones) takes
    /// about `target_duration` seconds, never more threads than there are tasks to
    /// run, twice the workers under memory pressure, and when that is fewer than
    /// there are, as many as would remain after [`Self::workers_to_close`].
    pub fn adaptive_target(&self, target_duration: f64) -> usize {
        let tasks = &self.tasks;
        let sample: Vec<TaskId> = self
            .queued
            .iter_live(|t| queued_entry(tasks, t))
            .chain(self.unrunnable.values().map(|&(t, _)| t))
            .take(QUEUE_SAMPLE)
            .collect();
        let ready = self.queued.len() + self.unrunnable.len();
        let mut queued_occupancy: f64 = sample.iter().map(|&t| self.task_duration(t)).sum();
        if ready > QUEUE_SAMPLE {
            queued_occupancy *= ready as f64 / QUEUE_SAMPLE as f64;
        }
        let duration = target_duration.max(f64::MIN_POSITIVE);
        let wanted = ((self.total_occupancy() + queued_occupancy) / duration).ceil();
        // A few long tasks do not ask for more threads than there are tasks.
        let mut cpu = (wanted.min(usize::MAX as f64) as usize).min(ready + self.n_processing);
        let n = self.worker_index.len();
        if n > 0 {
            cpu = (cpu as f64 / self.total_nthreads as f64 * n as f64).ceil() as usize;
        } else if ready > 0 {
            cpu = cpu.max(1);
        }
        let limit = self.total_memory as f64;
        let memory = if limit > 0.0 && self.total_nbytes as f64 > MEMORY_PRESSURE * limit {
            2 * n
        } else {
            0
        };
        let target = memory.max(cpu);
        if target >= n {
            target
        } else {
            n - self.workers_to_close(None, None, 0).len()
        }
    }

    /// Dask's `workers_to_close`: idle workers first, those holding the least data
    /// first, never one running a long-running task (it may be a client of the
    /// cluster). With `target` (workers to keep) or `n` (workers to close) it picks
    /// that many if it can; with neither it picks the idle workers whose going leaves
    /// enough memory limit for twice the data held. Never below `minimum` workers.
    pub fn workers_to_close(
        &self,
        n: Option<usize>,
        target: Option<usize>,
        minimum: usize,
    ) -> Vec<WorkerId> {
        let total_workers = self.worker_index.len();
        let n = n.or_else(|| target.map(|t| total_workers.saturating_sub(t)));
        let keep = n.map_or(0, |n| total_workers.saturating_sub(n));
        let busy = |w: WorkerId| !self.worker(w).processing.is_empty();
        if n.is_none_or(|n| n == 0) && self.worker_ids().all(busy) {
            return Vec::new();
        }
        let mut candidates: Vec<WorkerId> = self
            .worker_ids()
            .filter(|&w| self.worker(w).long_running.is_empty())
            .collect();
        // Address order breaks ties (worker_ids is in address order; the sort is stable).
        candidates.sort_by_key(|&w| (busy(w), self.worker(w).nbytes));
        let mut limit: f64 = candidates
            .iter()
            .map(|&w| self.worker(w).memory_limit as f64)
            .sum();
        let total: f64 = candidates
            .iter()
            .map(|&w| self.worker(w).nbytes as f64)
            .sum();
        let mut chosen = Vec::new();
        let mut remain = total_workers;
        for w in candidates {
            if n.is_none() && busy(w) {
                break;
            }
            if minimum > 0 && remain <= minimum {
                break;
            }
            limit -= self.worker(w).memory_limit as f64;
            let by_count = n.is_some() && remain > keep;
            let by_memory = n.is_none() && limit >= MEMORY_RATIO * total;
            if !(by_count || by_memory) {
                break;
            }
            chosen.push(w);
            remain -= 1;
        }
        chosen
    }

    /// The results held by none but `workers` (which a graceful retirement of them
    /// must copy elsewhere first), each with the first of its holders; a pass over
    /// what they hold, not over all tasks. Actors are not among them: an actor's
    /// instance cannot be copied (docs/actors.md).
    pub fn held_only_by(&self, workers: &[WorkerId]) -> Vec<(TaskId, WorkerId)> {
        let leaving = |w: WorkerId| workers.contains(&w);
        let mut out = Vec::new();
        for &w in workers {
            let Some(ws) = self.get_worker(w) else {
                continue;
            };
            for &t in &ws.has_what {
                let ts = self.task(t);
                // Listed once: under the first of its holders.
                if !ts.is_actor()
                    && ts.who_has.iter().all(leaving)
                    && ts.who_has.iter().next() == Some(w)
                {
                    out.push((t, w));
                }
            }
        }
        out
    }

    /// Workers that may be given tasks now.
    pub fn n_running(&self) -> usize {
        self.running.len()
    }
}
