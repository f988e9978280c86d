//! Stimuli from workers and clients (docs/scheduling.md#stimuli). Each public method
//! is one event: it validates, runs the transitions to a fixpoint, and leaves the
//! resulting commands pending.

use crate::commands::{CancelReason, Command};
use crate::error::{CoreError, CoreResult};
use crate::ids::{ClientId, TaskId, WorkerId};
use crate::key::Key;
use crate::state::Scheduler;
use crate::task::{ErrorInfo, ErrorKind, TaskState as S, TaskText, F_LONG_RUNNING};
use crate::transitions::{Args, Recs};
use crate::worker::{Worker, WorkerLoad, WorkerMemory, WorkerSpec, WorkerStatus};
use rustc_hash::FxHashSet;
use std::sync::Arc;

/// A worker's report that a task finished.
#[derive(Clone, Debug)]
pub struct Finished {
    pub task: TaskId,
    pub run_id: u64,
    pub nbytes: i64,
    /// (start, stop) of the compute, in seconds: feeds duration estimates.
    pub compute: Option<(f64, f64)>,
    /// Other (action, start, stop) spans (transfers, disk, …), kept as statistics.
    pub startstops: Vec<(String, f64, f64)>,
    pub typename: Option<String>,
}

impl Finished {
    pub fn computed(task: TaskId, run_id: u64, nbytes: i64, start: f64, stop: f64) -> Self {
        Finished {
            task,
            run_id,
            nbytes,
            compute: Some((start, stop)),
            startstops: Vec::new(),
            typename: None,
        }
    }
}

/// Data a client placed on workers (`scatter`): its key, its size (negative: unknown)
/// and the addresses of the workers holding it.
#[derive(Clone, Debug)]
pub struct Scattered {
    pub key: Key,
    pub nbytes: i64,
    pub holders: Vec<String>,
}

/// How a worker report was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It changed the scheduler's state.
    Applied,
    /// It was expected but changes nothing (e.g. a result nobody needs any more; a
    /// free-keys may have been sent back).
    Ignored,
}

/// Heartbeat interval Dask asks of `n` workers (docs/scheduling.md#heartbeats-and-liveness).
pub fn heartbeat_interval(n: usize) -> f64 {
    match n {
        0..=10 => 0.5,
        11..=49 => 1.0,
        50..=199 => 2.0,
        _ => n as f64 / 200.0 + 1.0,
    }
}

/// A stimulus being handled: its id (for the transition log) and the recommendations
/// its handler makes, settled by [`Scheduler::stimulus`] once the handler returns.
pub(crate) struct Stimulus {
    pub(crate) id: u64,
    pub(crate) recs: Recs,
}

/// Whether a stimulus may have freed processing slots, which queued tasks then take.
/// Every handler must say (it is part of its return type): a forgotten refill would
/// leave queued tasks waiting beside idle threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slots {
    /// Refill them from the queue (`stimulus_queue_slots_maybe_opened`, docs/scheduling.md#queuing).
    MayHaveOpened,
    /// No refill: as in Dask, which refills only after the stimuli that free slots.
    Unchanged,
}

impl Scheduler {
    pub(crate) fn check_worker(&self, w: WorkerId) -> CoreResult<()> {
        if self.is_registered(w) {
            Ok(())
        } else {
            Err(CoreError::UnknownWorker(w.0))
        }
    }

    fn check_task(&self, t: TaskId) -> CoreResult<()> {
        match self.tasks.get(t.idx()) {
            Some(Some(_)) => Ok(()),
            _ => Err(CoreError::UnknownTask(t.0)),
        }
    }

    /// The one way in for an event. The handler runs with a fresh stimulus id and an
    /// empty set of recommendations; afterwards the same epilogue always follows: the
    /// recommendations run to their fixpoint, queuing slots are refilled if the handler
    /// says they may have opened, and tests check the invariants. Generic over the
    /// handler so that it inlines: no allocation or indirection per stimulus.
    #[inline]
    pub(crate) fn stimulus<R>(
        &mut self,
        now: f64,
        handler: impl FnOnce(&mut Self, &mut Stimulus) -> (R, Slots),
    ) -> R {
        let id = self.next_stimulus(now);
        let mut st = Stimulus {
            id,
            recs: self.new_recs(),
        };
        let (result, slots) = handler(self, &mut st);
        self.transitions(st.recs, id);
        if slots == Slots::MayHaveOpened {
            self.queue_slots_maybe_opened(id);
        }
        if self.config.validate {
            if let Err(e) = self.validate() {
                panic!("scheduler invariant violated: {e}");
            }
        }
        result
    }

    /// Runs the stimulus's recommendations so far to their fixpoint, for handlers with
    /// work that must see the settled state.
    pub(crate) fn settle(&mut self, st: &mut Stimulus) {
        let recs = std::mem::take(&mut st.recs);
        self.transitions(recs, st.id);
        st.recs = self.new_recs();
    }

    /// `stimulus_queue_slots_maybe_opened` (docs/scheduling.md#queuing).
    pub(crate) fn queue_slots_maybe_opened(&mut self, stim: u64) {
        if self.queued.is_empty() {
            return;
        }
        let slots: i64 = self
            .idle_task_count
            .iter()
            .map(|w| self.task_slots_available(w).max(0))
            .fold(0i64, |a, b| a.saturating_add(b));
        for _ in 0..slots {
            let tasks = &self.tasks;
            let Some(head) = self.queued.first(|t| crate::state::queued_entry(tasks, t)) else {
                break;
            };
            let mut recs = self.new_recs();
            recs.insert(head, S::Processing);
            self.transitions(recs, stim);
            if self.get_task(head).is_some_and(|ts| ts.state == S::Queued) {
                break; // no worker has room: every further attempt would fail too
            }
        }
    }

    // ----- workers --------------------------------------------------------------------

    /// `add_worker`: registers a running worker.
    pub fn add_worker(&mut self, spec: WorkerSpec, now: f64) -> CoreResult<WorkerId> {
        if self.worker_index.contains_key(&spec.address) {
            return Err(CoreError::WorkerExists(spec.address));
        }
        if spec.nthreads == 0 {
            return Err(CoreError::Invalid(format!(
                "worker {} has no threads",
                spec.address
            )));
        }
        Ok(self.stimulus(now, |s, st| {
            let w = WorkerId(s.workers.len() as u32);
            s.total_nthreads += u64::from(spec.nthreads);
            s.total_memory += spec.memory_limit;
            s.counters.workers_added += 1;
            s.worker_index.insert(spec.address.clone(), w);
            s.workers
                .push(Some(Worker::new(spec, now, s.config.bandwidth)));
            s.rank_joined(w);
            (w, s.worker_became_running(w, st))
        }))
    }

    pub(crate) fn worker_became_running(&mut self, w: WorkerId, st: &mut Stimulus) -> Slots {
        let rank = self.rank(w);
        self.running.insert(rank, w);
        self.check_idle_saturated(w, None);
        let mut runnable: Vec<TaskId> = Vec::new();
        for &(t, _) in self.unrunnable.values() {
            // Deviation from Dask, which skips loose-restricted tasks here unless `w`
            // satisfies them: such a task went no-worker only because no worker was
            // running, and would otherwise wait for a preferred worker forever.
            let loose = self.task(t).restrictions().is_some_and(|r| r.loose);
            if loose || self.valid_workers(t).is_none_or(|v| v.contains(&w)) {
                runnable.push(t);
            }
        }
        runnable.sort_by_key(|&t| std::cmp::Reverse(self.task(t).priority));
        for t in runnable {
            st.recs.insert(t, S::Processing);
        }
        self.settle(st);
        self.refresh_no_workers_since();
        Slots::MayHaveOpened
    }

    /// `worker-status-change`: running ⇄ paused / closing_gracefully.
    pub fn worker_status_change(
        &mut self,
        w: WorkerId,
        status: WorkerStatus,
        now: f64,
    ) -> CoreResult<()> {
        self.check_worker(w)?;
        if status == WorkerStatus::Closed {
            return Err(CoreError::Invalid(
                "use remove_worker to close a worker".into(),
            ));
        }
        self.stimulus(now, |s, st| {
            let old = s.worker(w).status;
            s.wm(w).status = status;
            if old == status {
                return ((), Slots::Unchanged);
            }
            if status == WorkerStatus::Running {
                return ((), s.worker_became_running(w, st));
            }
            s.leave_worker_sets(w);
            ((), Slots::Unchanged)
        });
        Ok(())
    }

    /// Takes `w` out of the sets of workers that may be given tasks.
    pub(crate) fn leave_worker_sets(&mut self, w: WorkerId) {
        let rank = self.rank(w);
        for set in [&mut self.running, &mut self.idle, &mut self.saturated] {
            set.remove(rank, w);
        }
        self.idle_task_count.remove(rank, w);
    }

    /// `remove_worker` (docs/scheduling.md#lost-workers). `expected` (retirement) spares tasks a suspicious mark.
    pub fn remove_worker(&mut self, w: WorkerId, expected: bool, now: f64) -> CoreResult<()> {
        let suspects = if expected {
            Suspects::None
        } else {
            Suspects::All
        };
        self.remove_worker_with(w, suspects, now)
    }

    /// `worker_died` (docs/scheduling.md#lost-workers): the worker's process died while
    /// running exactly `executing` (its nanny's account); only those of its tasks
    /// become more suspicious, the others are rescheduled as after an expected departure.
    pub fn worker_died(&mut self, w: WorkerId, executing: &[TaskId], now: f64) -> CoreResult<()> {
        let executing: FxHashSet<TaskId> = executing.iter().copied().collect();
        self.remove_worker_with(w, Suspects::Only(&executing), now)
    }

    fn remove_worker_with(
        &mut self,
        w: WorkerId,
        suspects: Suspects<'_>,
        now: f64,
    ) -> CoreResult<()> {
        self.check_worker(w)?;
        self.stimulus(now, |s, st| {
            s.remove_worker_in(w, suspects, st);
            ((), Slots::Unchanged)
        });
        Ok(())
    }

    pub(crate) fn remove_worker_in(
        &mut self,
        w: WorkerId,
        suspects: Suspects<'_>,
        st: &mut Stimulus,
    ) {
        let stim = st.id;
        self.leave_worker_sets(w);
        let (address, nthreads, memory) = {
            let ws = self.worker(w);
            (ws.address.clone(), ws.nthreads, ws.memory_limit)
        };
        self.worker_index.remove(&address);
        self.total_nthreads -= u64::from(nthreads);
        self.total_memory -= memory;
        // The others keep their ranks: still increasing in address order.
        self.wm(w).status = WorkerStatus::Closed;
        self.counters.workers_removed += 1;

        let recs = &mut st.recs;
        let allowed = self.config.allowed_failures;
        for t in self.worker(w).processing.iter().collect::<Vec<_>>() {
            if self.state_of(t) != S::Processing {
                continue;
            }
            recs.insert(t, S::Released);
            if suspects.includes(t) {
                let p = self.prefix_of(t);
                self.prefixes[p.idx()].suspicious += 1;
                let ts = self.tm(t);
                ts.suspicious = ts.suspicious.saturating_add(1);
                if u32::from(ts.suspicious) > allowed {
                    recs.shift_remove(&t);
                    let text = format!(
                        "Attempted to run task {} on {} different workers, but all those workers died while running it. The last worker that attempt to run the task was {}.",
                        ts.key(),
                        allowed + 1,
                        address
                    );
                    self.err_diagnosed(t, w, ErrorKind::KilledWorker, text, stim, recs);
                }
            }
        }
        for t in self.worker(w).has_what.clone() {
            if self.worker(w).actors.contains(&t) {
                recs.insert(t, S::Erred);
            }
            self.remove_replica(t, w);
            let ts = self.task(t);
            if ts.who_has.is_empty() {
                let target = if ts.has_run_spec() {
                    S::Released
                } else {
                    S::Forgotten
                };
                recs.insert(t, target);
            }
        }
        self.settle(st);
        self.refresh_no_workers_since();
        self.stealing_remove_worker(w);
        let others: Vec<WorkerId> = self.worker_ids().collect();
        for o in others {
            self.emit(Command::WorkerRemoved {
                worker: o,
                removed: w,
            });
        }
        self.n_processing -= self.worker(w).processing.len();
        let ws = self.wm(w);
        ws.processing = Default::default();
        ws.long_running = Default::default();
        ws.has_what = Default::default();
        ws.needs_what = Default::default();
        ws.task_prefix_count = Default::default();
        ws.actors = Default::default();
    }

    /// A heartbeat: liveness, bandwidth learning, running times, memory and load (docs/scheduling.md#heartbeats-and-liveness).
    /// Returns the heartbeat interval the worker should use.
    pub fn heartbeat(
        &mut self,
        w: WorkerId,
        now: f64,
        bandwidth: Option<f64>,
        executing: &[(TaskId, f64)],
        memory: Option<WorkerMemory>,
        load: Option<WorkerLoad>,
    ) -> CoreResult<f64> {
        self.check_worker(w)?;
        self.now = self.now.max(now);
        let n = self.worker_index.len();
        let ws = self.wm(w);
        ws.last_seen = now;
        if let Some(m) = memory {
            ws.memory = m;
        }
        if let Some(l) = load {
            ws.load = l;
        }
        if let Some(bw) = bandwidth.filter(|b| b.is_finite() && *b > 0.0) {
            ws.bandwidth = bw;
            let f = 1.0 / n.max(1) as f64;
            self.bandwidth = self.bandwidth * (1.0 - f) + bw * f;
        }
        for &(t, secs) in executing {
            if let Some(ts) = self.get_task(t) {
                let p = self.group(ts.group).prefix;
                self.prefixes[p.idx()].add_exec_time(secs);
            }
        }
        Ok(heartbeat_interval(n))
    }

    // ----- task reports ----------------------------------------------------------------

    /// Runs to memory, without workers, every task dispatched so far and every one then
    /// dispatched in turn: each round takes the pending commands (dropping all but
    /// `compute-task`) and reports each dispatched task finished 1 ms later with a
    /// result of `nbytes`. For benchmarks and tests of the core alone; returns the time
    /// reached from `now`.
    pub fn run_dispatched_to_memory(&mut self, nbytes: i64, mut now: f64) -> f64 {
        loop {
            let running: Vec<(WorkerId, TaskId, u64)> = self
                .take_commands()
                .into_iter()
                .filter_map(|c| match c {
                    Command::ComputeTask {
                        worker,
                        task,
                        run_id,
                    } => Some((worker, task, run_id)),
                    _ => None,
                })
                .collect();
            if running.is_empty() {
                return now;
            }
            now += 0.001;
            for (w, t, r) in running {
                self.task_finished(w, Finished::computed(t, r, nbytes, now - 0.001, now), now)
                    .expect("a fresh report of a dispatched task");
            }
        }
    }

    /// `task-finished` (docs/scheduling.md#task-reports): the table of what a report means in each state.
    pub fn task_finished(
        &mut self,
        w: WorkerId,
        report: Finished,
        now: f64,
    ) -> CoreResult<Outcome> {
        self.check_worker(w)?;
        let t = report.task;
        self.check_task(t)?;
        self.stimulus(now, |s, st| s.task_finished_in(w, report, st))
    }

    fn task_finished_in(
        &mut self,
        w: WorkerId,
        report: Finished,
        st: &mut Stimulus,
    ) -> (CoreResult<Outcome>, Slots) {
        let t = report.task;
        let ts = self.task(t);
        if ts.run_id != report.run_id {
            if ts.state == S::Processing && ts.processing_on() == Some(w) {
                st.recs.insert(t, S::Released);
                return (Ok(Outcome::Applied), Slots::MayHaveOpened);
            }
            let stale = CoreError::StaleRunId {
                key: ts.key().to_owned(),
                got: report.run_id,
                current: ts.run_id,
            };
            return (Err(stale), Slots::Unchanged);
        }
        match ts.state {
            S::Forgotten | S::Released | S::Queued | S::NoWorker | S::Erred => {
                self.emit(Command::FreeKeys { worker: w, task: t });
                (Ok(Outcome::Ignored), Slots::Unchanged)
            }
            S::Memory => {
                self.add_replicas_in(w, &[t]);
                (Ok(Outcome::Applied), Slots::Unchanged)
            }
            // The race of row 5: its dependency was lost meanwhile; the cancel is on its way.
            S::Waiting => (Ok(Outcome::Ignored), Slots::Unchanged),
            S::Processing => {
                let args = Args::Finished {
                    worker: w,
                    nbytes: report.nbytes,
                    typename: report.typename,
                    compute: report.compute,
                    startstops: report.startstops,
                };
                self.transition(t, S::Memory, st.id, &mut st.recs, args);
                (Ok(Outcome::Applied), Slots::MayHaveOpened)
            }
        }
    }

    /// A batch of (reporting worker, `task-finished`) reports, each its own stimulus,
    /// handled one after another as Dask would; the indices of the rejected ones (stale,
    /// or naming an unknown worker or task) are returned.
    pub fn tasks_finished(
        &mut self,
        reports: impl IntoIterator<Item = (WorkerId, Finished)>,
        now: f64,
    ) -> Vec<usize> {
        let mut rejected = Vec::new();
        for (i, (w, r)) in reports.into_iter().enumerate() {
            if self.task_finished(w, r, now).is_err() {
                rejected.push(i);
            }
        }
        rejected
    }

    /// `task-erred` (docs/scheduling.md#task-errors-and-retries).
    pub fn task_erred(
        &mut self,
        w: WorkerId,
        t: TaskId,
        run_id: u64,
        error: ErrorInfo,
        now: f64,
    ) -> CoreResult<Outcome> {
        self.check_worker(w)?;
        self.check_task(t)?;
        self.stimulus(now, |s, st| {
            let ts = s.task(t);
            if ts.state != S::Processing {
                return (Ok(Outcome::Ignored), Slots::Unchanged);
            }
            if ts.run_id != run_id && ts.processing_on() != Some(w) {
                let stale = CoreError::StaleRunId {
                    key: ts.key().to_owned(),
                    got: run_id,
                    current: ts.run_id,
                };
                return (Err(stale), Slots::Unchanged);
            }
            let (stale, retries) = (ts.run_id != run_id, ts.retries());
            if stale {
                st.recs.insert(t, S::Released);
            } else if retries > 0 {
                s.tm(t).extra_mut().retries -= 1;
                s.transition(t, S::Waiting, st.id, &mut st.recs, Args::None);
            } else {
                let args = Args::Erred {
                    worker: Some(w),
                    cause: Some(t),
                    error: Some(Arc::new(error)),
                };
                s.transition(t, S::Erred, st.id, &mut st.recs, args);
            }
            (Ok(Outcome::Applied), Slots::MayHaveOpened)
        })
    }

    /// `long-running`: the task seceded from its worker's thread pool (docs/scheduling.md#long-running-tasks).
    pub fn long_running(
        &mut self,
        w: WorkerId,
        t: TaskId,
        run_id: u64,
        compute_duration: f64,
        now: f64,
    ) -> CoreResult<Outcome> {
        self.check_worker(w)?;
        self.check_task(t)?;
        let ts = self.task(t);
        if ts.state != S::Processing
            || ts.processing_on() != Some(w)
            || ts.run_id != run_id
            || ts.is_long_running()
        {
            return Ok(Outcome::Ignored);
        }
        self.stimulus(now, |s, _| {
            s.stealing_remove_key(t);
            let p = s.prefix_of(t);
            let pf = &mut s.prefixes[p.idx()];
            pf.duration_average = if pf.duration_average < 0.0 {
                compute_duration
            } else {
                (pf.duration_average + compute_duration) / 2.0
            };
            s.tm(t).set_flag(F_LONG_RUNNING, true);
            s.wm(w).long_running.insert(t);
            s.dec_prefix_count(w, p);
            s.check_idle_saturated(w, None);
            ((), Slots::MayHaveOpened)
        });
        Ok(Outcome::Applied)
    }

    /// `reschedule`: the worker asks for the task to run elsewhere.
    pub fn reschedule(&mut self, w: WorkerId, t: TaskId, now: f64) -> CoreResult<Outcome> {
        self.check_worker(w)?;
        self.check_task(t)?;
        let ts = self.task(t);
        if ts.state != S::Processing || ts.processing_on() != Some(w) {
            return Ok(Outcome::Ignored);
        }
        self.stimulus(now, |_, st| {
            st.recs.insert(t, S::Released);
            ((), Slots::Unchanged)
        });
        Ok(Outcome::Applied)
    }

    /// `release-worker-data`: the worker dropped its replica.
    pub fn release_worker_data(&mut self, w: WorkerId, t: TaskId, now: f64) -> CoreResult<Outcome> {
        self.check_worker(w)?;
        self.check_task(t)?;
        if !self.task(t).who_has.contains(w) {
            return Ok(Outcome::Ignored);
        }
        self.stimulus(now, |s, st| {
            s.remove_replica(t, w);
            s.restore_needs(t, w);
            if s.task(t).who_has.is_empty() {
                st.recs.insert(t, S::Released);
            }
            ((), Slots::Unchanged)
        });
        Ok(Outcome::Applied)
    }

    /// `drop-replicas`: the worker no longer holds these fetched copies, one
    /// `release-worker-data` stimulus per key. Keys it was not counted for, or unknown
    /// ones, are ignored.
    pub fn drop_replicas(&mut self, w: WorkerId, keys: &[Key], now: f64) -> CoreResult<()> {
        for k in keys {
            if let Some(t) = self.lookup(k) {
                self.release_worker_data(w, t, now)?;
            }
        }
        Ok(())
    }

    /// `w` lost its copy of `t`: tasks processing there that depend on `t` must fetch
    /// it again (`needs_what`, network occupancy), as if assigned without it.
    pub(crate) fn restore_needs(&mut self, t: TaskId, w: WorkerId) {
        let n = self
            .task(t)
            .dependents
            .iter()
            .filter(|&d| self.task(d).processing_on() == Some(w))
            .count() as u32;
        if n == 0 {
            return;
        }
        let eff = self.eff_nbytes(t);
        let ws = self.wm(w);
        if ws.needs_what.set(t, n) == 0 {
            ws.network_occ += eff;
            self.network_occ_global += eff;
        }
    }

    /// `add-keys`: the worker holds these results (e.g. after fetching them).
    pub fn add_keys(&mut self, w: WorkerId, tasks: &[TaskId], now: f64) -> CoreResult<()> {
        self.check_worker(w)?;
        self.stimulus(now, |s, _| {
            s.add_replicas_in(w, tasks);
            ((), Slots::Unchanged)
        });
        Ok(())
    }

    fn add_replicas_in(&mut self, w: WorkerId, tasks: &[TaskId]) {
        for &t in tasks {
            match self.get_task(t) {
                Some(ts) if ts.state == S::Memory => {
                    self.add_replica(t, w);
                    if !self.copies.is_empty() {
                        self.copy_arrived(t, w);
                    }
                }
                Some(_) => self.emit(Command::RemoveReplicas { worker: w, task: t }),
                None => {}
            }
        }
    }

    /// `add-replicas`: [`Self::add_keys`] by key; unknown keys are ignored.
    pub fn add_replicas(&mut self, w: WorkerId, keys: &[Key], now: f64) -> CoreResult<()> {
        let tasks: Vec<TaskId> = keys.iter().filter_map(|k| self.lookup(k)).collect();
        self.add_keys(w, &tasks, now)
    }

    // ----- clients -----------------------------------------------------------------

    fn check_client(&self, c: ClientId) -> CoreResult<()> {
        if c.idx() < self.clients.len() {
            Ok(())
        } else {
            Err(CoreError::UnknownClient(c.0))
        }
    }

    fn resolve_keys(&self, keys: &[Key]) -> CoreResult<Vec<TaskId>> {
        keys.iter()
            .map(|k| {
                self.lookup(k)
                    .ok_or_else(|| CoreError::UnknownKey(k.clone()))
            })
            .collect()
    }

    /// `client-desires-keys`: the client holds futures on these keys.
    pub fn client_desires_keys(&mut self, c: ClientId, keys: &[Key], now: f64) -> CoreResult<()> {
        self.check_client(c)?;
        let tasks = self.resolve_keys(keys)?;
        self.stimulus(now, |s, _| {
            for t in tasks {
                s.add_want(t, c);
                match s.state_of(t) {
                    S::Memory => s.emit(Command::KeyInMemory { client: c, task: t }),
                    S::Erred => {
                        let blame = s.task(t).exception_blame().unwrap_or(t);
                        s.emit(Command::TaskErred {
                            client: c,
                            task: t,
                            blame,
                        })
                    }
                    _ => {}
                }
            }
            ((), Slots::Unchanged)
        });
        Ok(())
    }

    /// `client-releases-keys`: futures were dropped. Unknown keys are ignored (they may
    /// have been forgotten already).
    pub fn client_releases_keys(&mut self, c: ClientId, keys: &[Key], now: f64) -> CoreResult<()> {
        self.check_client(c)?;
        let tasks: Vec<TaskId> = keys.iter().filter_map(|k| self.lookup(k)).collect();
        self.client_releases_tasks(c, &tasks, now)
    }

    /// As [`Self::client_releases_keys`], by task id.
    pub fn client_releases_tasks(
        &mut self,
        c: ClientId,
        tasks: &[TaskId],
        now: f64,
    ) -> CoreResult<()> {
        self.check_client(c)?;
        self.stimulus(now, |s, st| {
            s.client_releases_keys_into(tasks, c, &mut st.recs);
            ((), Slots::MayHaveOpened)
        });
        Ok(())
    }

    /// `cancel-keys`: release keys (and dependents first) wanted only by this client,
    /// or by everybody with `force`.
    pub fn cancel_keys(
        &mut self,
        c: ClientId,
        keys: &[Key],
        force: bool,
        now: f64,
    ) -> CoreResult<()> {
        self.check_client(c)?;
        self.stimulus(now, |s, st| {
            let tasks: Vec<TaskId> = keys.iter().filter_map(|k| s.lookup(k)).collect();
            for t in tasks {
                s.cancel_task(t, c, force, st);
            }
            ((), Slots::MayHaveOpened)
        });
        Ok(())
    }

    /// Cancels `t` (dependents first), settling each task's release before the next.
    fn cancel_task(&mut self, t: TaskId, c: ClientId, force: bool, st: &mut Stimulus) {
        let Some(ts) = self.get_task(t) else { return };
        if ts.who_wants.is_empty() {
            return;
        }
        let only_this = ts.who_wants.len() == 1 && ts.who_wants.contains(c);
        if force || only_this {
            for d in ts.dependents.to_vec() {
                self.cancel_task(d, c, force, st);
            }
            if let Some(ts) = self.get_task(t) {
                for cl in ts.who_wants.to_vec() {
                    self.emit(Command::CancelledKeys {
                        client: cl,
                        task: t,
                        reason: CancelReason::Cancelled,
                    });
                }
            }
        }
        let Some(ts) = self.get_task(t) else { return };
        let clients = if force {
            ts.who_wants.to_vec()
        } else {
            smallvec::smallvec![c]
        };
        for cl in clients {
            self.client_releases_keys_into(&[t], cl, &mut st.recs);
        }
        self.settle(st);
    }

    /// `retry`: re-run erred keys from their first erred ancestors.
    pub fn retry(&mut self, keys: &[Key], now: f64) -> CoreResult<()> {
        let tasks = self.resolve_keys(keys)?;
        self.stimulus(now, |s, st| {
            s.retry_in(tasks, st);
            ((), Slots::Unchanged)
        });
        Ok(())
    }

    fn retry_in(&mut self, tasks: Vec<TaskId>, st: &mut Stimulus) {
        let mut stack = tasks;
        let mut seen = rustc_hash::FxHashSet::default();
        let mut roots: Vec<TaskId> = Vec::new();
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            let erred: Vec<TaskId> = self
                .task(t)
                .dependencies
                .iter()
                .filter(|&d| self.state_of(d) == S::Erred)
                .collect();
            if erred.is_empty() {
                roots.push(t);
            } else {
                stack.extend(erred);
            }
        }
        for t in roots {
            if self.state_of(t) == S::Erred {
                st.recs.insert(t, S::Waiting);
            }
        }
    }

    /// A client disconnected: release everything it wanted.
    pub fn remove_client(&mut self, c: ClientId, now: f64) -> CoreResult<()> {
        self.check_client(c)?;
        if c == self.fire_and_forget_client() {
            return Err(CoreError::Invalid(
                "the fire-and-forget client cannot be removed".into(),
            ));
        }
        let tasks = self.clients[c.idx()].wants_what.clone();
        self.client_releases_tasks(c, &tasks, now)
    }

    /// Release every key given to `fire_and_forget` (a restart forgets all tasks).
    pub fn release_fire_and_forget_keys(&mut self, now: f64) -> CoreResult<()> {
        let ff = self.fire_and_forget_client();
        let tasks = self.clients[ff.idx()].wants_what.clone();
        self.client_releases_tasks(ff, &tasks, now)
    }

    /// `fire_and_forget`: keep these keys running until they finish, with no future.
    pub fn fire_and_forget(&mut self, keys: &[Key], now: f64) -> CoreResult<()> {
        let ff = self.fire_and_forget_client();
        self.client_desires_keys(ff, keys, now)
    }

    /// `update_data` (scatter): data a client placed on workers, each item on the
    /// workers at its holders' addresses, now wanted by `c`. An item without holders, a
    /// holder address no registered worker has, or a key that exists in another state
    /// than memory refuses the whole call, naming the key, before anything changes.
    pub fn scatter(
        &mut self,
        c: ClientId,
        items: &[Scattered],
        now: f64,
    ) -> CoreResult<Vec<TaskId>> {
        self.check_client(c)?;
        let mut holders: Vec<Vec<WorkerId>> = Vec::with_capacity(items.len());
        for it in items {
            let k = &it.key;
            if it.holders.is_empty() {
                return Err(CoreError::Invalid(format!(
                    "cannot scatter {k:?}: no worker to hold it"
                )));
            }
            let gone: Vec<&str> = (it.holders.iter())
                .filter(|a| self.worker_by_address(a).is_none())
                .map(String::as_str)
                .collect();
            if !gone.is_empty() {
                return Err(CoreError::Invalid(format!(
                    "cannot scatter {k:?}: no worker at {}",
                    gone.join(", ")
                )));
            }
            if let Some(t) = self.lookup(k) {
                if self.state_of(t) != S::Memory {
                    return Err(CoreError::Invalid(format!(
                        "cannot scatter {k:?}: the key exists and is {}",
                        self.state_of(t).name()
                    )));
                }
            }
            holders.push(
                (it.holders.iter())
                    .filter_map(|a| self.worker_by_address(a))
                    .collect(),
            );
        }
        Ok(self.stimulus(now, |s, _| {
            let mut out = Vec::with_capacity(items.len());
            for (it, workers) in items.iter().zip(holders) {
                let t = match s.lookup(&it.key) {
                    Some(t) => t,
                    None => {
                        let t = s.create_task(TaskText::new(&it.key, None));
                        s.set_state(t, S::Memory);
                        t
                    }
                };
                if it.nbytes >= 0 {
                    s.set_nbytes(t, it.nbytes);
                }
                for w in workers {
                    s.add_replica(t, w);
                }
                s.add_want(t, c);
                s.emit(Command::KeyInMemory { client: c, task: t });
                out.push(t);
            }
            (out, Slots::Unchanged)
        }))
    }

    // ----- time-driven work -------------------------------------------------------------

    /// Periodic work: work stealing, no-worker timeouts, worker TTL, the copies retiring
    /// workers' results still need (docs/scheduling.md#periodic-work).
    pub fn tick(&mut self, now: f64) {
        self.stimulus(now, |s, st| {
            // A driver ticking once per interval must not miss passes to float rounding.
            let due = now - s.stealing.last_balance >= s.config.work_stealing_interval - 1e-9;
            if s.config.work_stealing && due {
                s.stealing.last_balance = now;
                s.balance();
            }
            s.check_no_workers(now, st);
            s.check_worker_ttl(now);
            s.ask_replicas(now);
            s.amm_tick(now);
            ((), Slots::Unchanged)
        })
    }

    pub(crate) fn refresh_no_workers_since(&mut self) {
        if !self.running.is_empty() || (self.queued.is_empty() && self.unrunnable.is_empty()) {
            self.no_workers_since = None;
        } else if self.no_workers_since.is_none() {
            self.no_workers_since = Some(self.now);
        }
    }

    fn check_no_workers(&mut self, now: f64, st: &mut Stimulus) {
        let Some(timeout) = self.config.no_workers_timeout else {
            return;
        };
        self.refresh_no_workers_since();
        let mut expired: Vec<(TaskId, ErrorKind)> = Vec::new();
        for &(t, since) in self.unrunnable.values() {
            if now <= since + timeout {
                break;
            }
            let kind = match self.no_workers_since {
                Some(nws) if nws < since => ErrorKind::NoWorker,
                _ => ErrorKind::NoValidWorker,
            };
            expired.push((t, kind));
        }
        if self.no_workers_since.is_some_and(|nws| now > nws + timeout) {
            expired.extend(
                self.queued_tasks()
                    .into_iter()
                    .map(|t| (t, ErrorKind::NoWorker)),
            );
        }
        for (t, kind) in expired {
            if self.get_task(t).is_none() || !matches!(self.state_of(t), S::NoWorker | S::Queued) {
                continue;
            }
            let text = match kind {
                ErrorKind::NoValidWorker => format!(
                    "Task {} has no valid worker: its restrictions {:?} match no running worker, for longer than no-workers-timeout ({timeout}s)",
                    self.task(t).key(),
                    self.task(t).restrictions()
                ),
                _ => format!(
                    "Task {} could not run: there were no workers for longer than no-workers-timeout ({timeout}s)",
                    self.task(t).key()
                ),
            };
            let err = ErrorInfo {
                kind,
                exception_text: text,
                ..Default::default()
            };
            let args = Args::Erred {
                worker: None,
                cause: Some(t),
                error: Some(Arc::new(err)),
            };
            self.transition(t, S::Erred, st.id, &mut st.recs, args);
        }
        self.settle(st);
    }

    fn check_worker_ttl(&mut self, now: f64) {
        let Some(ttl) = self.config.worker_ttl else {
            return;
        };
        let limit = ttl.max(10.0 * heartbeat_interval(self.worker_index.len()));
        let stale: Vec<WorkerId> = self
            .worker_ids()
            .filter(|&w| now - self.worker(w).last_seen > limit)
            .collect();
        for w in stale {
            let _ = self.remove_worker(w, false, now);
            self.emit(Command::CloseWorker { worker: w });
        }
    }
}

/// Which of a departing worker's processing tasks may have killed it.
#[derive(Clone, Copy)]
pub(crate) enum Suspects<'a> {
    /// An expected departure (retirement): none.
    None,
    /// An unexplained death: all of them, as Dask counts.
    All,
    /// A death whose executing tasks are known.
    Only(&'a FxHashSet<TaskId>),
}

impl Suspects<'_> {
    fn includes(self, t: TaskId) -> bool {
        match self {
            Suspects::None => false,
            Suspects::All => true,
            Suspects::Only(set) => set.contains(&t),
        }
    }
}
