//! The task state machine (docs/scheduling.md#transitions): the 21 direct transitions, the
//! two-hop rule and the recommendations fixpoint.

use crate::commands::{CancelReason, Command};
use crate::ids::{ClientId, TaskId, WorkerId};
use crate::state::Scheduler;
use crate::task::{ErrorInfo, ErrorKind, TaskState as S, F_HAS_LOST_DEPS, F_LONG_RUNNING};
use std::sync::Arc;

pub use crate::recs::Recs;

/// Keyword data some transitions take (Dask's `**kwargs`).
#[derive(Default)]
pub(crate) enum Args {
    #[default]
    None,
    /// processing → memory: the report of a finished task.
    Finished {
        worker: WorkerId,
        nbytes: i64,
        typename: Option<String>,
        compute: Option<(f64, f64)>,
        startstops: Vec<(String, f64, f64)>,
    },
    /// → erred: who failed, where, and with what.
    Erred {
        worker: Option<WorkerId>,
        cause: Option<TaskId>,
        error: Option<Arc<ErrorInfo>>,
    },
}

impl Scheduler {
    /// Empty recommendations, reusing a position index from an earlier fixpoint.
    pub(crate) fn new_recs(&mut self) -> Recs {
        Recs::from_buffers(self.recs_pool.pop().unwrap_or_default())
    }

    /// Runs recommendations to a fixpoint.
    pub(crate) fn transitions(&mut self, mut recs: Recs, stim: u64) {
        loop {
            while let Some((t, finish)) = recs.pop() {
                self.transition(t, finish, stim, &mut recs, Args::None);
            }
            if self.blocked.is_empty() {
                break;
            }
            self.err_blocked(&mut recs);
            if recs.is_empty() {
                break;
            }
        }
        if let Some(buffers) = recs.into_buffers() {
            self.recs_pool.push(buffers);
        }
    }

    /// Deviation from Dask (which leaves such tasks stranded): a task that is needed
    /// (waiting, or released but wanted / waited on) while one of its dependencies is
    /// still erred once the fixpoint has settled can never run, so it inherits the
    /// dependency's failure, as a new task submitted on top of an erred one does.
    /// Checking only after the fixpoint keeps a client retry of several failed roots
    /// from erring their common dependents in between.
    fn err_blocked(&mut self, recs: &mut Recs) {
        for t in std::mem::take(&mut self.blocked) {
            let Some(ts) = self.get_task(t) else { continue };
            let needed = match ts.state {
                S::Waiting => true,
                S::Released => !ts.who_wants.is_empty() || !ts.waiters.is_empty(),
                _ => false,
            };
            let erred_dep = ts
                .dependencies
                .iter()
                .find(|&d| self.state_of(d) == S::Erred);
            let Some(e) = erred_dep.filter(|_| needed) else {
                continue;
            };
            let blame = self.task(e).exception_blame();
            let error = self.task(e).error().cloned();
            let extra = self.tm(t).extra_mut();
            extra.exception_blame = blame;
            extra.error = error;
            recs.insert(t, S::Erred);
        }
    }

    /// One transition (direct or two-hop), logged and seen by the stealing hook.
    pub(crate) fn transition(
        &mut self,
        t: TaskId,
        finish: S,
        stim: u64,
        recs: &mut Recs,
        args: Args,
    ) {
        let Some(ts) = self.get_task(t) else { return };
        let start = ts.state;
        if start == finish {
            return;
        }
        self.transition_counter += 1;
        if start == S::Processing {
            // Out of the stealing bins while the task still names its worker.
            self.stealing_remove_key(t);
        }
        // Where the feed sees this transition start: two hops are two entries to it, as
        // distributed's plugins see them; the log keeps one.
        let mut fed_from = start;
        let mut args = args;
        if !self.direct(t, start, finish, stim, recs, &mut args) {
            // The two-hop rule: through released, which every live state can reach.
            if start == S::Released || finish == S::Released {
                debug_assert!(false, "impossible transition {start:?} -> {finish:?}");
                return;
            }
            let hop = self.direct(t, start, S::Released, stim, recs, &mut args);
            debug_assert!(hop, "{start:?} -> released is direct");
            if self.feed.on() {
                self.feed.push(t, start, S::Released, stim);
                fed_from = S::Released;
            }
            if self.task(t).state == S::Released {
                let v = recs.get(&t).copied().unwrap_or(finish);
                if v != S::Released {
                    // Not direct (e.g. released -> processing): left to the recommendation.
                    self.direct(t, S::Released, v, stim, recs, &mut Args::None);
                }
            }
        }
        let actual = self.tasks[t.idx()]
            .as_ref()
            .map_or(S::Forgotten, |ts| ts.state);
        if self.log.enabled() {
            self.log.push(t, start, actual, stim, self.now);
        }
        if self.feed.on() {
            self.feed.push(t, fed_from, actual, stim);
        }
        self.stealing_on_transition(t, start, actual);
    }

    /// The direct transitions (docs/scheduling.md#the-transition-table): this match is
    /// their only list. False when `start -> finish` is not one of them, having changed
    /// nothing (`args` untouched, for the hop through released). The arguments are
    /// lent, not moved: moving the 88-byte enum in and back out cost about 30
    /// instructions a transition.
    fn direct(
        &mut self,
        t: TaskId,
        start: S,
        finish: S,
        stim: u64,
        recs: &mut Recs,
        args: &mut Args,
    ) -> bool {
        use S::*;
        match (start, finish) {
            (Released, Waiting) => self.released_waiting(t, recs),
            (Waiting, Processing) => self.waiting_processing(t, stim, recs),
            (Waiting, Queued) => self.enter_queued(t),
            (Waiting, NoWorker) => self.enter_no_worker(t),
            (Waiting, Memory) => {} // a race: the cancel is already on its way
            (Queued, Processing) => {
                if let Some(ws) = self.decide_worker_rootish_queuing_enabled() {
                    self.leave_queued(t);
                    self.add_to_processing(t, ws, stim, recs);
                }
            }
            (Queued, Released) => {
                self.leave_queued(t);
                self.propagate_released(t, recs);
            }
            (Queued, Erred) => {
                self.leave_queued(t);
                self.propagate_erred(t, std::mem::take(args), recs);
            }
            (NoWorker, Processing) => {
                if let Some(ws) = self.decide_worker_non_rootish(t) {
                    self.leave_no_worker(t);
                    self.add_to_processing(t, ws, stim, recs);
                }
            }
            (NoWorker, Released) => {
                self.leave_no_worker(t);
                self.propagate_released(t, recs);
            }
            (NoWorker, Erred) => {
                self.leave_no_worker(t);
                self.propagate_erred(t, std::mem::take(args), recs);
            }
            (Processing, Memory) => self.processing_memory(t, std::mem::take(args), recs),
            (Processing, Released) => {
                if let Some(ws) = self.exit_processing_common(t) {
                    self.emit(Command::FreeKeys {
                        worker: ws,
                        task: t,
                    });
                }
                self.propagate_released(t, recs);
            }
            (Processing, Erred) => {
                self.exit_processing_common(t);
                self.propagate_erred(t, std::mem::take(args), recs);
            }
            (Memory, Released) => self.memory_released(t, recs),
            (Memory, Erred) => self.memory_erred(t, recs),
            (Memory, Forgotten) => self.forget(t, recs),
            (Released, Forgotten) => self.forget(t, recs),
            (Released, Erred) => self.released_erred(t, recs),
            (Erred, Released) => self.erred_released(t, recs),
            (Waiting, Released) => self.waiting_released(t, recs),
            _ => return false,
        }
        true
    }

    // ----- into waiting / processing ----------------------------------------------

    fn released_waiting(&mut self, t: TaskId, recs: &mut Recs) {
        if self.task(t).has_lost_dependencies() {
            recs.insert(t, S::Forgotten);
            return;
        }
        self.set_state(t, S::Waiting);
        // A blame left over from an erred recommendation that a later one superseded
        // (e.g. by `released`) is stale: a task that starts waiting is not erred.
        if let Some(extra) = self.tm(t).extra.as_mut() {
            extra.exception_blame = None;
            extra.error = None;
        }
        let deps = self.task(t).dependencies.to_vec();
        let mut waiting_on = 0;
        let mut blocked = false;
        for d in deps {
            let dts = self.tm(d);
            if dts.who_has.is_empty() {
                waiting_on += 1;
            }
            match dts.state {
                S::Released => {
                    recs.insert(d, S::Waiting);
                }
                // Not a waiter of an erred task (Dask makes it one): once this task
                // leaves waiting, that would release the erred task, i.e. silently
                // retry it. If the dependency is retried in this same fixpoint, it
                // re-collects its waiting dependents on entering waiting.
                S::Erred => blocked = true,
                _ => {
                    dts.waiters.insert(t);
                }
            }
        }
        let waiting_dependents: Vec<TaskId> = self
            .task(t)
            .dependents
            .iter()
            .filter(|&d| self.state_of(d) == S::Waiting)
            .collect();
        if blocked {
            self.blocked.push(t);
        }
        let ts = self.tm(t);
        ts.waiting_on = waiting_on;
        ts.waiters = crate::idset::IdSet::from_vec(waiting_dependents);
        if waiting_on == 0 {
            recs.insert(t, S::Processing);
        }
    }

    fn waiting_processing(&mut self, t: TaskId, stim: u64, recs: &mut Recs) {
        let ws = if self.is_rootish(t) {
            if self.config.worker_saturation.is_infinite() || !self.task(t).queueable() {
                match self.decide_worker_rootish_queuing_disabled(t) {
                    Some(ws) => ws,
                    None => {
                        recs.insert(t, S::NoWorker);
                        return;
                    }
                }
            } else {
                match self.decide_worker_rootish_queuing_enabled() {
                    Some(ws) => ws,
                    None => {
                        recs.insert(t, S::Queued);
                        return;
                    }
                }
            }
        } else {
            match self.decide_worker_non_rootish(t) {
                Some(ws) => ws,
                None => {
                    recs.insert(t, S::NoWorker);
                    return;
                }
            }
        };
        self.add_to_processing(t, ws, stim, recs);
    }

    fn enter_queued(&mut self, t: TaskId) {
        self.set_state(t, S::Queued);
        let seq = self.next_queue_seq();
        let ts = self.tm(t);
        ts.set_queue_seq(seq);
        let p = ts.priority;
        let tasks = &self.tasks;
        self.queued
            .insert(p, seq, t, |t| crate::state::queued_entry(tasks, t));
    }

    fn leave_queued(&mut self, t: TaskId) {
        // Invalidate the entry first: the queue recognises live entries by sequence, and
        // no entry has sequence 0.
        self.tm(t).set_queue_seq(0);
        let tasks = &self.tasks;
        self.queued.remove(|t| crate::state::queued_entry(tasks, t));
    }

    fn enter_no_worker(&mut self, t: TaskId) {
        self.set_state(t, S::NoWorker);
        let seq = self.next_queue_seq();
        self.tm(t).set_queue_seq(seq);
        let now = self.now;
        self.unrunnable.insert(seq, (t, now));
    }

    fn leave_no_worker(&mut self, t: TaskId) {
        let seq = self.task(t).queue_seq();
        self.unrunnable.remove(&seq);
    }

    /// `WorkerState.add_to_processing`: count the task on `w` and the bytes it must fetch.
    /// Returns Σ raw nbytes of its dependencies (for the memory guard).
    pub(crate) fn attach_to_worker(&mut self, t: TaskId, w: WorkerId) -> i64 {
        let prefix = self.prefix_of(t);
        let default_size = self.config.default_data_size;
        let mut dep_bytes: i64 = 0;
        let mut new_net: i64 = 0;
        for d in self.task(t).dependencies.to_vec() {
            let nb = self.task(d).nbytes;
            dep_bytes += nb.max(0);
            let held = self.task(d).who_has.contains(w);
            let ws = self.wm(w);
            if !held && ws.needs_what.add(d) == 1 {
                let eff = if nb >= 0 { nb } else { default_size };
                ws.network_occ += eff;
                new_net += eff;
            }
        }
        self.network_occ_global += new_net;
        let resources = self
            .task(t)
            .restrictions()
            .map(|r| r.resources.clone())
            .unwrap_or_default();
        let ws = self.wm(w);
        ws.task_prefix_count.add_one(prefix);
        let place = ws.processing.push(t);
        for (name, amount) in resources {
            ws.adjust_used(&name, amount);
        }
        self.tm(t).set_processing_place(place);
        self.n_processing += 1;
        *self.prefix_count_global.entry(prefix).or_insert(0) += 1;
        dep_bytes
    }

    /// `WorkerState.remove_from_processing`, plus releasing reserved resources.
    pub(crate) fn detach_from_worker(&mut self, t: TaskId, w: WorkerId) {
        let prefix = self.prefix_of(t);
        let long_running = self.task(t).is_long_running();
        self.tm(t).set_flag(F_LONG_RUNNING, false);
        if !long_running {
            self.dec_prefix_count(w, prefix);
        }
        let default_size = self.config.default_data_size;
        let resources = self
            .task(t)
            .restrictions()
            .map(|r| r.resources.clone())
            .unwrap_or_default();
        let place = self.task(t).processing_place();
        let ws = self.wm(w);
        let moved = ws.processing.remove(t, place);
        if long_running {
            ws.long_running.remove(t);
        }
        for (name, amount) in resources {
            ws.adjust_used(&name, -amount);
        }
        if let Some(m) = moved {
            self.tm(m).set_processing_place(place);
        }
        self.n_processing -= 1;
        let mut freed: i64 = 0;
        for d in self.task(t).dependencies.to_vec() {
            let nb = self.task(d).nbytes;
            let ws = self.wm(w);
            if ws.needs_what.drop_one(d) == Some(0) {
                let eff = if nb >= 0 { nb } else { default_size };
                let before = ws.network_occ;
                ws.network_occ = (ws.network_occ - eff).max(0);
                freed += before - ws.network_occ;
            }
        }
        self.network_occ_global = (self.network_occ_global - freed).max(0);
    }

    /// Errs `t`, which was bound for or running on `w`, with a failure the scheduler
    /// diagnosed itself (no exception from a worker).
    pub(crate) fn err_diagnosed(
        &mut self,
        t: TaskId,
        w: WorkerId,
        kind: ErrorKind,
        exception_text: String,
        stim: u64,
        recs: &mut Recs,
    ) {
        let error = ErrorInfo {
            kind,
            exception_text,
            ..Default::default()
        };
        let args = Args::Erred {
            worker: Some(w),
            cause: Some(t),
            error: Some(Arc::new(error)),
        };
        self.transition(t, S::Erred, stim, recs, args);
    }

    /// `_add_to_processing` (docs/scheduling.md#entering-processing).
    pub(crate) fn add_to_processing(&mut self, t: TaskId, w: WorkerId, stim: u64, recs: &mut Recs) {
        let dep_bytes = self.attach_to_worker(t, w);
        self.tm(t).set_processing_on(Some(w));
        self.set_state(t, S::Processing);
        self.check_idle_saturated(w, None);
        self.n_processing_assignments += 1;
        if self.task(t).is_actor() {
            self.wm(w).actors.insert(t);
        }
        // A task without dependencies (most) does not read the limit, off the record's
        // per-task lines.
        let limit = if dep_bytes > 0 {
            self.worker(w).memory_limit
        } else {
            0
        };
        if limit > 0 && dep_bytes as u64 > limit && self.config.memory_terminate {
            let text = format!(
                "Task {} has {} bytes of dependencies, more than the memory limit of {} ({} bytes)",
                self.task(t).key(),
                dep_bytes,
                self.worker(w).address,
                limit
            );
            self.err_diagnosed(t, w, ErrorKind::MemoryError, text, stim, recs);
            return;
        }
        let run_id = self.next_run_id();
        self.tm(t).run_id = run_id;
        self.emit(Command::ComputeTask {
            worker: w,
            task: t,
            run_id,
        });
    }

    /// `_exit_processing_common` (docs/scheduling.md#leaving-processing): returns the worker if it is still registered.
    pub(crate) fn exit_processing_common(&mut self, t: TaskId) -> Option<WorkerId> {
        let w = self.task(t).processing_on()?;
        if self.task(t).is_actor() {
            self.wm(w).actors.swap_remove(&t);
        }
        self.tm(t).set_processing_on(None);
        self.detach_from_worker(t, w);
        if !self.is_registered(w) {
            return None;
        }
        self.check_idle_saturated(w, None);
        Some(w)
    }

    pub(crate) fn dec_prefix_count(&mut self, w: WorkerId, prefix: crate::ids::PrefixId) {
        self.wm(w).task_prefix_count.remove_one(prefix);
        if let Some(c) = self.prefix_count_global.get_mut(&prefix) {
            *c -= 1;
            if *c == 0 {
                self.prefix_count_global.swap_remove(&prefix);
            }
        }
    }

    pub(crate) fn is_registered(&self, w: WorkerId) -> bool {
        self.get_worker(w)
            .is_some_and(|ws| ws.status != crate::worker::WorkerStatus::Closed)
    }

    // ----- into memory --------------------------------------------------------------

    fn processing_memory(&mut self, t: TaskId, args: Args, recs: &mut Recs) {
        let Args::Finished {
            worker,
            nbytes,
            typename,
            compute,
            startstops,
        } = args
        else {
            debug_assert!(false, "processing->memory needs a finished report");
            return;
        };
        if !self.is_registered(worker) {
            recs.insert(t, S::Released);
            return;
        }
        if self.task(t).processing_on() != Some(worker) {
            debug_assert!(
                false,
                "finished report from a worker the task is not processing on"
            );
            return;
        }
        let g = self.task(t).group;
        let p = self.group(g).prefix;
        if let Some((start, stop)) = compute {
            let d = (stop - start).max(0.0);
            self.prefixes[p.idx()].add_compute(d);
            self.group_mut(g).duration += d;
        }
        for (action, start, stop) in &startstops {
            self.prefixes[p.idx()].add_duration(action, (stop - start).max(0.0));
        }
        self.set_nbytes(t, nbytes);
        self.exit_processing_common(t);
        self.counters.tasks_computed += 1;
        if self.task(t).is_actor() {
            // The instance lives where it was built.
            self.wm(worker).actors.insert(t);
        }
        self.add_to_memory(t, worker, typename, recs);
    }

    /// Records a result size, keeping holders' and the group's totals in step.
    pub(crate) fn set_nbytes(&mut self, t: TaskId, nbytes: i64) {
        let default_size = self.config.default_data_size;
        let ts = self.tm(t);
        let old = ts.nbytes;
        ts.nbytes = nbytes;
        let holders = ts.who_has.to_vec();
        let g = ts.group;
        let eff = |n: i64| if n >= 0 { n } else { default_size };
        self.group_mut(g).nbytes_total += nbytes - old.max(0);
        for w in holders {
            self.wm(w).nbytes += eff(nbytes) - eff(old);
            self.total_nbytes += eff(nbytes) - eff(old);
        }
    }

    pub(crate) fn add_replica(&mut self, t: TaskId, w: WorkerId) {
        if self.task(t).who_has.contains(w) {
            return;
        }
        let eff = self.eff_nbytes(t);
        self.total_nbytes += eff;
        let ws = self.wm(w);
        let pos = crate::links::push_back(&mut ws.has_what, t);
        ws.nbytes += eff;
        if ws.needs_what.remove(t) {
            let before = ws.network_occ;
            ws.network_occ = (ws.network_occ - eff).max(0);
            let freed = before - ws.network_occ;
            self.network_occ_global = (self.network_occ_global - freed).max(0);
        }
        let ts = self.tm(t);
        ts.who_has.push(w, pos);
        if ts.who_has.len() == 2 {
            self.replicated_tasks += 1;
        }
    }

    pub(crate) fn remove_replica(&mut self, t: TaskId, w: WorkerId) {
        let eff = self.eff_nbytes(t);
        if self.task(t).is_actor() {
            // Only the worker that built the actor lists it; other holders have handles.
            self.wm(w).actors.swap_remove(&t);
        }
        let ts = self.tm(t);
        let Some(pos) = ts.who_has.remove(w) else {
            return;
        };
        if ts.who_has.len() == 1 {
            self.replicated_tasks -= 1;
        }
        self.total_nbytes -= eff;
        let ws = self.wm(w);
        ws.nbytes -= eff;
        if let Some(moved) = crate::links::swap_out(&mut ws.has_what, pos) {
            self.tm(moved).who_has.set_position(w, pos);
        }
    }

    fn remove_all_replicas(&mut self, t: TaskId) {
        for w in self.task(t).who_has.to_vec() {
            self.remove_replica(t, w);
        }
    }

    /// `_add_to_memory` (docs/scheduling.md#reaching-memory).
    fn add_to_memory(&mut self, t: TaskId, w: WorkerId, typename: Option<String>, recs: &mut Recs) {
        self.add_replica(t, w);
        let mut dependents = self.task(t).dependents.to_vec();
        if dependents.len() > 1 {
            dependents.sort_by_key(|&t| std::cmp::Reverse(self.task(t).priority));
        }
        for d in dependents {
            let dts = self.tm(d);
            if dts.state == S::Waiting && dts.waiting_on > 0 {
                dts.waiting_on -= 1;
                if dts.waiting_on == 0 {
                    recs.insert(d, S::Processing);
                }
            }
        }
        for d in self.task(t).dependencies.to_vec() {
            let dts = self.tm(d);
            dts.waiters.remove(t);
            if dts.waiters.is_empty() && dts.who_wants.is_empty() {
                recs.insert(d, S::Released);
            }
        }
        let ts = self.task(t);
        if ts.waiters.is_empty() && ts.who_wants.is_empty() {
            recs.insert(t, S::Released);
        } else {
            for c in ts.who_wants.to_vec() {
                self.emit(Command::KeyInMemory { client: c, task: t });
            }
        }
        self.set_state(t, S::Memory);
        if let Some(tn) = typename {
            let g = self.task(t).group;
            self.group_mut(g).typename = Some(tn);
        }
        self.release_fire_and_forget(t, recs);
    }

    fn release_fire_and_forget(&mut self, t: TaskId, recs: &mut Recs) {
        let ff = self.fire_and_forget_client();
        if self.task(t).who_wants.contains(ff) {
            self.client_releases_keys_into(&[t], ff, recs);
        }
    }

    // ----- release, error, forget -----------------------------------------------------

    /// `_propagate_released` (docs/scheduling.md#propagating-a-release).
    fn propagate_released(&mut self, t: TaskId, recs: &mut Recs) {
        self.set_state(t, S::Released);
        let ts = self.task(t);
        let rewait = if ts.has_lost_dependencies() {
            recs.insert(t, S::Forgotten);
            false
        } else if !ts.waiters.is_empty() || !ts.who_wants.is_empty() {
            recs.insert(t, S::Waiting);
            true
        } else {
            false
        };
        if !rewait {
            for d in self.task(t).dependencies.to_vec() {
                let dts = self.tm(d);
                if dts.state != S::Released {
                    dts.waiters.remove(t);
                    if dts.waiters.is_empty() && dts.who_wants.is_empty() {
                        recs.insert(d, S::Released);
                    }
                }
            }
            self.tm(t).waiters.clear();
        }
    }

    /// `_propagate_erred` (docs/scheduling.md#propagating-an-error).
    fn propagate_erred(&mut self, t: TaskId, args: Args, recs: &mut Recs) {
        self.set_state(t, S::Erred);
        if let Args::Erred {
            worker,
            cause,
            error,
        } = args
        {
            let extra = self.tm(t).extra_mut();
            if let Some(w) = worker {
                if !extra.erred_on.contains(&w) {
                    extra.erred_on.push(w);
                }
            }
            if let Some(e) = error {
                extra.error = Some(e);
            }
            if let Some(c) = cause {
                extra.exception_blame = Some(c);
            }
        }
        self.erred_history.push_back(t);
        if self.erred_history.len() > self.config.erred_tasks_max_history {
            self.erred_history.pop_front();
        }
        let blame = self.task(t).exception_blame().unwrap_or(t);
        let error = self.task(t).error().cloned();
        for w in self.tm(t).waiters.take() {
            let extra = self.tm(w).extra_mut();
            extra.exception_blame = Some(blame);
            extra.error = error.clone();
            recs.insert(w, S::Erred);
        }
        for d in self.task(t).dependencies.to_vec() {
            let dts = self.tm(d);
            dts.waiters.remove(t);
            if dts.waiters.is_empty() && dts.who_wants.is_empty() {
                recs.insert(d, S::Released);
            }
        }
        for c in self.task(t).who_wants.to_vec() {
            self.emit(Command::TaskErred {
                client: c,
                task: t,
                blame,
            });
        }
        self.release_fire_and_forget(t, recs);
    }

    fn memory_released(&mut self, t: TaskId, recs: &mut Recs) {
        let ts = self.task(t);
        if ts.is_actor() && !ts.who_wants.is_empty() {
            self.blame_actor_lost(t);
            recs.insert(t, S::Erred);
            return;
        }
        for w in ts.who_has.to_vec() {
            if self.is_registered(w) {
                self.emit(Command::FreeKeys { worker: w, task: t });
            }
        }
        self.remove_all_replicas(t);
        self.set_state(t, S::Released);
        for c in self.task(t).who_wants.to_vec() {
            self.emit(Command::LostData { client: c, task: t });
        }
        let ts = self.task(t);
        if !ts.has_run_spec() || ts.has_lost_dependencies() {
            recs.insert(t, S::Forgotten);
        } else if !ts.who_wants.is_empty() || !ts.waiters.is_empty() {
            if ts.dependencies.iter().any(|d| self.state_of(d) == S::Erred) {
                // Dask leaves it released; see `err_blocked`.
                self.blocked.push(t);
            } else {
                recs.insert(t, S::Waiting);
            }
        } else if ts.dependents.is_empty() {
            // Deviation from Dask (which keeps it): nothing can need it again (a later
            // graph naming the key defines it anew), so it goes, and with it the
            // dependencies it alone kept (docs/scheduling.md#no-orphan-outlives-its-use).
            recs.insert(t, S::Forgotten);
        }
        for w in self.task(t).waiters.to_vec() {
            match self.state_of(w) {
                S::NoWorker | S::Processing | S::Queued => {
                    recs.insert(w, S::Waiting);
                }
                S::Waiting => {
                    // Dask adds `t` to the waiter's `waiting_on` *set*, which is idempotent.
                    // The waiter may already count `t` (it re-entered waiting after `t`'s
                    // replicas were dropped earlier in this stimulus), so recount rather
                    // than increment.
                    let missing = self
                        .task(w)
                        .dependencies
                        .iter()
                        .filter(|&d| self.task(d).who_has.is_empty())
                        .count() as u32;
                    self.tm(w).waiting_on = missing;
                }
                _ => {}
            }
        }
    }

    fn blame_actor_lost(&mut self, t: TaskId) {
        let err = ErrorInfo {
            kind: ErrorKind::ActorLost,
            exception_text: "Worker holding Actor was lost".into(),
            ..Default::default()
        };
        let extra = self.tm(t).extra_mut();
        extra.exception_blame = Some(t);
        extra.error = Some(Arc::new(err));
    }

    fn memory_erred(&mut self, t: TaskId, recs: &mut Recs) {
        self.blame_actor_lost(t);
        self.remove_all_replicas(t);
        let args = Args::Erred {
            worker: None,
            cause: Some(t),
            error: None,
        };
        self.propagate_erred(t, args, recs);
    }

    fn released_erred(&mut self, t: TaskId, recs: &mut Recs) {
        let Some(blame) = self.task(t).exception_blame() else {
            debug_assert!(false, "released->erred without blame");
            return;
        };
        let error = self.task(t).error().cloned();
        for d in self.task(t).dependents.to_vec() {
            let dts = self.tm(d);
            if dts.who_has.is_empty() {
                let extra = dts.extra_mut();
                extra.exception_blame = Some(blame);
                extra.error = error.clone();
                recs.insert(d, S::Erred);
            }
        }
        for c in self.task(t).who_wants.to_vec() {
            self.emit(Command::TaskErred {
                client: c,
                task: t,
                blame,
            });
        }
        self.set_state(t, S::Erred);
        self.release_fire_and_forget(t, recs);
    }

    fn erred_released(&mut self, t: TaskId, recs: &mut Recs) {
        let erred_on = match self.tm(t).extra.as_mut() {
            Some(extra) => {
                extra.error = None;
                extra.exception_blame = None;
                std::mem::take(&mut extra.erred_on)
            }
            None => Vec::new(),
        };
        for d in self.task(t).dependents.to_vec() {
            if self.state_of(d) == S::Erred {
                recs.insert(d, S::Waiting);
            }
        }
        for w in erred_on {
            if self.is_registered(w) {
                self.emit(Command::FreeKeys { worker: w, task: t });
            }
        }
        for c in self.task(t).who_wants.to_vec() {
            self.emit(Command::TaskRetried { client: c, task: t });
        }
        self.set_state(t, S::Released);
    }

    fn waiting_released(&mut self, t: TaskId, recs: &mut Recs) {
        for d in self.task(t).dependencies.to_vec() {
            let dts = self.tm(d);
            if dts.waiters.remove(t) && dts.waiters.is_empty() && dts.who_wants.is_empty() {
                recs.insert(d, S::Released);
            }
        }
        self.tm(t).waiting_on = 0;
        self.set_state(t, S::Released);
        let ts = self.task(t);
        if ts.has_lost_dependencies() {
            recs.insert(t, S::Forgotten);
        } else if ts.exception_blame().is_none()
            && (!ts.who_wants.is_empty() || !ts.waiters.is_empty())
        {
            recs.insert(t, S::Waiting);
        } else {
            self.tm(t).waiters.clear();
        }
    }

    /// memory/released → forgotten: `_propagate_forgotten`, the client report, `_remove_key`.
    fn forget(&mut self, t: TaskId, recs: &mut Recs) {
        self.set_state(t, S::Forgotten);
        let had_holders = !self.task(t).who_has.is_empty();
        for d in self.tm(t).dependents.take() {
            let dts = self.tm(d);
            dts.set_flag(F_HAS_LOST_DEPS, true);
            dts.dependencies.remove(t);
            if dts.state == S::Waiting && !had_holders && dts.waiting_on > 0 {
                dts.waiting_on -= 1;
            }
            if !matches!(dts.state, S::Memory | S::Erred) {
                recs.insert(d, S::Forgotten);
            }
        }
        self.tm(t).waiters.clear();
        for d in self.tm(t).dependencies.take() {
            let dts = self.tm(d);
            dts.dependents.remove(t);
            dts.waiters.remove(t);
            if dts.dependents.is_empty() && dts.who_wants.is_empty() {
                recs.insert(d, S::Forgotten);
            }
        }
        self.tm(t).waiting_on = 0;
        for w in self.task(t).who_has.to_vec() {
            if self.is_registered(w) {
                self.emit(Command::FreeKeys { worker: w, task: t });
            }
        }
        self.remove_all_replicas(t);
        for c in self.task(t).who_wants.to_vec() {
            self.emit(Command::CancelledKeys {
                client: c,
                task: t,
                reason: CancelReason::Cancelled,
            });
            self.remove_want(t, c);
        }
        self.tm(t).set_processing_on(None);
        self.remove_task(t);
    }

    /// `_client_releases_keys` (docs/scheduling.md#client-releases), adding to `recs`.
    pub(crate) fn client_releases_keys_into(
        &mut self,
        keys: &[TaskId],
        c: ClientId,
        recs: &mut Recs,
    ) {
        for &t in keys {
            if self.get_task(t).is_none() || !self.remove_want(t, c) {
                continue;
            }
            let ts = self.task(t);
            if ts.who_wants.is_empty() {
                if ts.dependents.is_empty() {
                    recs.insert(t, S::Forgotten);
                } else if ts.state != S::Erred && ts.waiters.is_empty() {
                    recs.insert(t, S::Released);
                }
            }
        }
    }
}
