//! The event loop: feeds the core its stimuli at virtual times, turns its commands into
//! delayed messages, and plays every worker's part.

use crate::cluster::{SimOptions, SimWorker};
use crate::events::EventQueue;
use crate::graph::{SimSubmission, TaskTable};
use crate::messages::{translate, Outgoing, ToScheduler, ToWorker};
use crate::network::{Network, Transfer};
use crate::report::{RunOutcome, SimReport, TimelineEntry, WorkerReport};
use crate::worker::{FxIndexSet, WorkerSim};
use squall_core::{
    heartbeat_interval, Config, CoreError, DepRef, Finished, NewTask, Outcome, Scheduler,
    Submission, TaskState, TaskText, WorkerSpec,
};
use std::time::{Duration, Instant};

enum Event {
    Submit(usize),
    Arrive(usize),
    Die(usize),
    /// Periodic scheduler work (stealing balance, timeouts).
    Tick,
    /// Periodic, per worker.
    Heartbeat(usize),
    ToWorker(usize, ToWorker),
    ToScheduler(usize, ToScheduler),
    RunEnded {
        worker: usize,
        exec: u64,
    },
    /// missing-data-retry expired for these (task, run id) of a worker.
    GiveBack {
        worker: usize,
        waiters: Vec<(usize, u64)>,
    },
    TransferArrived(u64),
}

impl Event {
    fn is_periodic(&self) -> bool {
        matches!(self, Event::Tick | Event::Heartbeat(_))
    }
}

/// A cluster of simulated workers around one squall-core scheduler.
pub struct Simulation {
    s: Scheduler,
    options: SimOptions,
    specs: Vec<SimWorker>,
    workers: Vec<WorkerSim>,
    /// Core worker id → simulation index.
    sim_worker: Vec<Option<usize>>,
    tasks: TaskTable,
    submissions: Vec<Option<SimSubmission>>,
    /// Simulation index of each task, per submission.
    submission_ids: Vec<Vec<usize>>,
    queue: EventQueue<Event>,
    /// Queued events other than ticks and heartbeats: none left means nothing can happen.
    pending_work: usize,
    last_work: f64,
    now: f64,
    network: Network,
    next_id: u64,
    ran: bool,
    wanted: FxIndexSet<usize>,
    outstanding: FxIndexSet<usize>,
    undelivered_submissions: usize,
    last_resolved: f64,
    runs_per_worker: Vec<u64>,
    runs_per_task: Vec<u32>,
    n_given_back: u64,
    timeline: Vec<TimelineEntry>,
    completion: Vec<Option<f64>>,
    failed: FxIndexSet<usize>,
    rejected: Vec<String>,
    /// Wall time spent inside the core (see [`Simulation::core_seconds`]).
    core_time: Duration,
    /// Wall time of [`Simulation::run`].
    run_time: Duration,
}

impl Simulation {
    /// Worker names must be unique (they become addresses).
    pub fn new(config: Config, workers: Vec<SimWorker>) -> Self {
        for (i, w) in workers.iter().enumerate() {
            assert!(
                workers[..i].iter().all(|o| o.name != w.name),
                "duplicate worker name {}",
                w.name
            );
        }
        let options = SimOptions::default();
        Simulation {
            workers: workers
                .iter()
                .map(|w| WorkerSim::new(w.nthreads, &w.resources, config.bandwidth))
                .collect(),
            runs_per_worker: vec![0; workers.len()],
            specs: workers,
            s: Scheduler::new(config),
            network: Network::new(options.bandwidth, options.transfer_latency),
            options,
            sim_worker: Vec::new(),
            tasks: TaskTable::default(),
            submissions: Vec::new(),
            submission_ids: Vec::new(),
            queue: EventQueue::new(),
            pending_work: 0,
            last_work: 0.0,
            now: 0.0,
            next_id: 0,
            ran: false,
            wanted: Default::default(),
            outstanding: Default::default(),
            undelivered_submissions: 0,
            last_resolved: 0.0,
            runs_per_task: Vec::new(),
            n_given_back: 0,
            timeline: Vec::new(),
            completion: Vec::new(),
            failed: Default::default(),
            rejected: Vec::new(),
            core_time: Duration::ZERO,
            run_time: Duration::ZERO,
        }
    }

    pub fn with_options(mut self, options: SimOptions) -> Self {
        self.network = Network::new(options.bandwidth, options.transfer_latency);
        self.options = options;
        self
    }

    /// Adds a submission. Keys must be new to the simulation; dependencies by key must
    /// name tasks of submissions added before.
    pub fn submit(&mut self, sub: SimSubmission) -> Result<(), String> {
        let n = sub.graph.len();
        let mut keys: Vec<_> = sub.graph.tasks.iter().map(|t| &t.key).collect();
        keys.sort();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("key {} appears twice", w[0].python_str()));
        }
        for t in &sub.graph.tasks {
            if self.tasks.get(&t.key).is_some() {
                return Err(format!("key {} was submitted before", t.key.python_str()));
            }
            for d in &t.deps {
                let ok = match d {
                    DepRef::Local(i) => (*i as usize) < n,
                    DepRef::Key(k) => self.tasks.get(k).is_some(),
                };
                if !ok {
                    return Err(format!(
                        "task {} has an unknown dependency {d:?}",
                        t.key.python_str()
                    ));
                }
            }
        }
        if let Some(&i) = sub.wanted.iter().find(|&&i| i >= n) {
            return Err(format!("wanted index {i} out of range"));
        }
        let ids = sub
            .graph
            .tasks
            .iter()
            .map(|t| self.tasks.insert(t).expect("checked above"))
            .collect();
        self.runs_per_task.resize(self.tasks.len(), 0);
        self.completion.resize(self.tasks.len(), None);
        self.submission_ids.push(ids);
        self.submissions.push(Some(sub));
        Ok(())
    }

    /// The scheduler (for inspection, e.g. `validate()` after a run).
    pub fn scheduler(&self) -> &Scheduler {
        &self.s
    }

    /// Seconds (monotonic clock) the last run spent inside the scheduler core: its
    /// stimuli, key lookups and taking its commands, not the simulated workers nor the
    /// translation of commands into messages. Kept out of the report, which must be
    /// the same on every run.
    pub fn core_seconds(&self) -> f64 {
        self.core_time.as_secs_f64()
    }

    /// Seconds (monotonic clock) the last run took in all.
    pub fn run_seconds(&self) -> f64 {
        self.run_time.as_secs_f64()
    }

    /// Runs `f` on the core, adding its time to `core_time`.
    fn core<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let start = Instant::now();
        let r = f(self);
        self.core_time += start.elapsed();
        r
    }

    /// Runs until every wanted key is resolved, nothing more can happen, or
    /// `max_time` passes. A simulation runs once.
    pub fn run(&mut self) -> SimReport {
        assert!(!self.ran, "a simulation runs once");
        self.ran = true;
        let start = Instant::now();
        for i in 0..self.specs.len() {
            self.push(self.specs[i].arrive, Event::Arrive(i));
            if let Some(t) = self.specs[i].die {
                self.push(t, Event::Die(i));
            }
        }
        for i in 0..self.submissions.len() {
            let t = self.submissions[i]
                .as_ref()
                .expect("not yet delivered")
                .time;
            self.push(t, Event::Submit(i));
        }
        self.undelivered_submissions = self.submissions.len();
        self.push(self.tick_interval(), Event::Tick);
        let mut completed = false;
        while let Some((t, ev)) = self.queue.pop() {
            if t > self.options.max_time {
                break;
            }
            self.now = t;
            if !ev.is_periodic() {
                self.pending_work -= 1;
                self.last_work = t;
            }
            self.handle(ev);
            self.flush();
            if self.undelivered_submissions == 0 && self.outstanding.is_empty() {
                completed = true;
                break;
            }
            if self.stalled() {
                break;
            }
        }
        self.run_time = start.elapsed();
        self.report(completed)
    }

    fn tick_interval(&self) -> f64 {
        // A zero interval would tick forever without time advancing.
        self.s.config.work_stealing_interval.max(1e-3)
    }

    /// Only ticks and heartbeats are left, and no scheduler timeout can still fire.
    fn stalled(&self) -> bool {
        if self.pending_work > 0 {
            return false;
        }
        match self.s.config.no_workers_timeout {
            None => true,
            Some(timeout) => self.now > self.last_work + timeout + 2.0 * self.tick_interval(),
        }
    }

    fn push(&mut self, t: f64, ev: Event) {
        if !ev.is_periodic() {
            self.pending_work += 1;
        }
        self.queue.push(t, ev);
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn send_to_worker(&mut self, w: usize, m: ToWorker) {
        self.push(
            self.now + self.options.message_latency,
            Event::ToWorker(w, m),
        );
    }

    fn send_to_scheduler(&mut self, w: usize, m: ToScheduler) {
        self.push(
            self.now + self.options.message_latency,
            Event::ToScheduler(w, m),
        );
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Submit(i) => self.deliver_submission(i),
            Event::Arrive(i) => self.arrive(i),
            Event::Die(i) => self.die(i),
            Event::Tick => {
                self.core(|sim| sim.s.tick(sim.now));
                self.push(self.now + self.tick_interval(), Event::Tick);
            }
            Event::Heartbeat(i) => self.heartbeat(i),
            // Messages to or from a dead worker are lost with its connection.
            Event::ToWorker(i, m) if self.workers[i].alive => self.worker_receives(i, m),
            Event::ToScheduler(i, m) if self.workers[i].alive => {
                self.core(|sim| sim.scheduler_receives(i, m))
            }
            Event::ToWorker(..) | Event::ToScheduler(..) => {}
            Event::RunEnded { worker, exec } => self.run_ended(worker, exec),
            Event::GiveBack { worker, waiters } => self.give_back(worker, waiters),
            Event::TransferArrived(id) => self.transfer_arrived(id),
        }
    }

    /// Hands the core's pending commands on: to workers as delayed messages, to
    /// clients at once.
    fn flush(&mut self) {
        let Simulation {
            s,
            tasks,
            sim_worker,
            core_time,
            ..
        } = self;
        let start = Instant::now();
        let out = s.drain(|s, cmds| {
            *core_time += start.elapsed();
            translate(s, cmds, tasks, sim_worker)
        });
        for o in out {
            match o {
                Outgoing::Worker(w, m) => self.send_to_worker(w, m),
                Outgoing::KeyInMemory(t) => self.resolve(t),
                Outgoing::KeyFailed(t) => {
                    if self.outstanding.contains(&t) {
                        self.failed.insert(t);
                    }
                    self.resolve(t);
                }
                Outgoing::KeyLost(t) => {
                    if self.wanted.contains(&t) {
                        self.outstanding.insert(t);
                    }
                }
            }
        }
    }

    fn resolve(&mut self, t: usize) {
        if self.outstanding.swap_remove(&t) {
            self.last_resolved = self.now;
        }
    }

    // ----- clients and cluster membership ------------------------------------------

    fn deliver_submission(&mut self, i: usize) {
        let sub = self.submissions[i].take().expect("delivered once");
        self.undelivered_submissions -= 1;
        let ids = &self.submission_ids[i];
        let wanted: Vec<usize> = sub.wanted.iter().map(|&j| ids[j]).collect();
        for &t in &wanted {
            self.wanted.insert(t);
            self.outstanding.insert(t);
        }
        let client = self.s.client_id(&sub.client);
        let core_sub = Submission {
            tasks: sub
                .graph
                .tasks
                .into_iter()
                .map(|t| NewTask {
                    text: TaskText::new(&t.key, Some(t.key.as_bytes())),
                    deps: t.deps,
                    options: t.options.map(Box::new),
                    data_producer: t.data_producer,
                })
                .collect(),
            wanted: sub
                .wanted
                .iter()
                .map(|&j| DepRef::Local(j as u32))
                .collect(),
            defaults: sub.defaults,
            fifo_timeout: sub.fifo_timeout,
            submitting_task: None,
            order: sub.order,
            blobs: Vec::new(),
        };
        let now = self.now;
        if let Err(e) = self.core(|sim| sim.s.update_graph(client, core_sub, now)) {
            self.rejected
                .push(format!("submission {i} at t={}: {e}", sub.time));
            for t in wanted {
                self.resolve(t);
            }
        }
    }

    fn arrive(&mut self, i: usize) {
        if self.workers[i].dead {
            return;
        }
        let spec = &self.specs[i];
        let core_spec = WorkerSpec {
            address: spec.address(),
            name: spec.name.clone(),
            host: spec.host.clone(),
            nthreads: spec.nthreads,
            memory_limit: spec.memory_limit,
            resources: spec.resources.clone(),
        };
        let now = self.now;
        let id = self
            .core(|sim| sim.s.add_worker(core_spec, now))
            .expect("worker names are unique and nthreads > 0");
        if self.sim_worker.len() <= id.idx() {
            self.sim_worker.resize(id.idx() + 1, None);
        }
        self.sim_worker[id.idx()] = Some(i);
        let w = &mut self.workers[i];
        w.alive = true;
        w.core = Some(id);
        let next = self.now + heartbeat_interval(self.s.n_workers());
        self.push(next, Event::Heartbeat(i));
    }

    fn die(&mut self, i: usize) {
        let w = &mut self.workers[i];
        if w.dead {
            return;
        }
        let was_alive = w.alive;
        for ex in w.kill() {
            self.timeline.push(TimelineEntry {
                key: self.tasks.names[ex.task].clone(),
                worker: i,
                start: ex.start,
                end: self.now,
                outcome: RunOutcome::Lost,
            });
        }
        if !was_alive {
            return;
        }
        for t in self.network.worker_died(i) {
            self.fetch_failed(t);
        }
        let core = self.workers[i].core.expect("arrived");
        let now = self.now;
        self.core(|sim| sim.s.remove_worker(core, false, now))
            .expect("a live worker is registered");
    }

    fn heartbeat(&mut self, i: usize) {
        if !self.workers[i].alive {
            return;
        }
        let interval = self.core(|sim| {
            let w = &sim.workers[i];
            let executing: Vec<_> = w
                .executing
                .values()
                .filter(|e| !e.cancelled)
                .filter_map(|e| {
                    let t = sim.s.lookup(&sim.tasks.keys[e.task])?;
                    Some((t, sim.now - e.start))
                })
                .collect();
            let core = w.core.expect("arrived");
            sim.s
                .heartbeat(core, sim.now, Some(w.bandwidth), &executing, None, None)
                .expect("a live worker is registered")
        });
        self.push(self.now + interval, Event::Heartbeat(i));
    }

    // ----- the worker side ---------------------------------------------------------

    fn worker_receives(&mut self, i: usize, m: ToWorker) {
        match m {
            ToWorker::Compute(msg) => {
                for dep in self.workers[i].compute(msg) {
                    self.fetch(i, dep);
                }
                self.ensure_computing(i);
            }
            ToWorker::FreeKeys(t) => self.workers[i].free(t),
            ToWorker::StealRequest { task, stimulus } => {
                let state = self.workers[i].steal(task);
                self.send_to_scheduler(
                    i,
                    ToScheduler::StealResponse {
                        task,
                        state,
                        stimulus,
                    },
                );
            }
            ToWorker::RemoveReplica(t) => self.workers[i].drop_data(t),
        }
        self.report_dropped(i);
    }

    /// drop-replicas for the fetched copies worker `i` no longer keeps.
    fn report_dropped(&mut self, i: usize) {
        for dep in self.workers[i].take_dropped() {
            self.send_to_scheduler(i, ToScheduler::DropReplicas(dep));
        }
    }

    /// missing-data-retry expired: tasks still waiting in the same run go back to the
    /// scheduler.
    fn give_back(&mut self, i: usize, waiters: Vec<(usize, u64)>) {
        if !self.workers[i].alive {
            return;
        }
        for (task, run_id) in waiters {
            if self.workers[i].give_back(task, run_id) {
                self.n_given_back += 1;
                self.send_to_scheduler(i, ToScheduler::Reschedule(task));
            }
        }
        self.report_dropped(i);
    }

    /// Starts fetching `dep` to worker `dst` from a live holder; with none, its
    /// waiting tasks are given back after `missing_data_retry` (as the runtime's
    /// worker does, docs/runtime.md).
    fn fetch(&mut self, dst: usize, dep: usize) {
        let workers = &self.workers;
        let holders: Vec<usize> = workers[dst]
            .who_has
            .get(&dep)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&h| h != dst && workers[h].alive && workers[h].data.contains_key(&dep))
            .collect();
        if holders.is_empty() {
            if self.workers[dst].missing.insert(dep) {
                let waiters = self.workers[dst].waiters_of(dep);
                let at = self.now + self.options.missing_data_retry;
                self.push(
                    at,
                    Event::GiveBack {
                        worker: dst,
                        waiters,
                    },
                );
            }
            return;
        }
        // Deterministic, yet spread over holders rather than always the first.
        let src = holders[(dst + dep) % holders.len()];
        let id = self.next_id();
        let w = &mut self.workers[dst];
        w.missing.swap_remove(&dep);
        w.fetching.insert(dep);
        let transfer = Transfer {
            src,
            dst,
            dep,
            bytes: self.tasks.nbytes[dep],
            start: self.now,
        };
        let arrival = self.network.send(id, transfer, &mut w.inbound_free_at);
        self.push(arrival, Event::TransferArrived(id));
    }

    fn fetch_failed(&mut self, t: Transfer) {
        let w = &mut self.workers[t.dst];
        w.fetching.swap_remove(&t.dep);
        if let Some(hs) = w.who_has.get_mut(&t.dep) {
            hs.retain(|&h| h != t.src);
        }
        if w.needs(t.dep) {
            self.fetch(t.dst, t.dep);
        }
    }

    fn transfer_arrived(&mut self, id: u64) {
        let Some(t) = self.network.arrive(id) else {
            return;
        };
        let w = &mut self.workers[t.dst];
        if t.bytes > 1_000_000 {
            // The worker's bandwidth estimate (reported in heartbeats).
            let seconds = (self.now - t.start).max(0.001);
            w.bandwidth = 0.95 * w.bandwidth + 0.05 * (t.bytes as f64 / seconds);
        }
        if w.dependency_arrived(t.dep, t.bytes) {
            self.send_to_scheduler(t.dst, ToScheduler::AddReplicas(t.dep));
            self.ensure_computing(t.dst);
        }
    }

    fn ensure_computing(&mut self, i: usize) {
        while let Some(t) = self.workers[i].next_runnable() {
            let exec = self.next_id();
            self.workers[i].start(t, exec, self.now);
            self.runs_per_worker[i] += 1;
            self.runs_per_task[t] += 1;
            let end = self.now + self.tasks.duration[t];
            self.push(end, Event::RunEnded { worker: i, exec });
        }
    }

    fn run_ended(&mut self, i: usize, exec: u64) {
        // A dead worker's runs were recorded as lost when it died.
        if !self.workers[i].alive {
            return;
        }
        let Some((ex, run_id)) = self.workers[i].finish(exec) else {
            return;
        };
        self.timeline.push(TimelineEntry {
            key: self.tasks.names[ex.task].clone(),
            worker: i,
            start: ex.start,
            end: self.now,
            outcome: if run_id.is_some() {
                RunOutcome::Finished
            } else {
                RunOutcome::Discarded
            },
        });
        if let Some(run_id) = run_id {
            self.workers[i].store(ex.task, self.tasks.nbytes[ex.task]);
            self.send_to_scheduler(
                i,
                ToScheduler::TaskFinished {
                    task: ex.task,
                    run_id,
                    start: ex.start,
                    stop: self.now,
                },
            );
        }
        self.report_dropped(i);
        self.ensure_computing(i);
    }

    // ----- the scheduler side ------------------------------------------------------

    fn scheduler_receives(&mut self, i: usize, m: ToScheduler) {
        let w = self.workers[i].core.expect("arrived");
        let now = self.now;
        match m {
            ToScheduler::TaskFinished {
                task,
                run_id,
                start,
                stop,
            } => {
                let Some(t) = self.s.lookup(&self.tasks.keys[task]) else {
                    // Unknown key: Dask answers free-keys.
                    self.send_to_worker(i, ToWorker::FreeKeys(task));
                    return;
                };
                let current = self.s.get_task(t).is_some_and(|ts| {
                    ts.state == TaskState::Processing
                        && ts.run_id == run_id
                        && ts.processing_on() == Some(w)
                });
                let nbytes = self.tasks.nbytes[task] as i64;
                let report = Finished::computed(t, run_id, nbytes, start, stop);
                match self.s.task_finished(w, report, now) {
                    Ok(Outcome::Applied) if current => self.completion[task] = Some(now),
                    Ok(_) | Err(CoreError::StaleRunId { .. }) => {}
                    Err(e) => panic!("task-finished rejected: {e}"),
                }
            }
            ToScheduler::AddReplicas(task) => {
                let key = &self.tasks.keys[task];
                self.s
                    .add_replicas(w, std::slice::from_ref(key), now)
                    .expect("live worker");
            }
            ToScheduler::DropReplicas(task) => {
                let key = &self.tasks.keys[task];
                self.s
                    .drop_replicas(w, std::slice::from_ref(key), now)
                    .expect("live worker");
            }
            ToScheduler::Reschedule(task) => {
                if let Some(t) = self.s.lookup(&self.tasks.keys[task]) {
                    self.s.reschedule(w, t, now).expect("live worker");
                }
            }
            ToScheduler::StealResponse {
                task,
                state,
                stimulus,
            } => {
                if let Some(t) = self.s.lookup(&self.tasks.keys[task]) {
                    self.s
                        .steal_response(w, t, state, stimulus, now)
                        .expect("a valid steal response");
                }
            }
        }
    }

    fn report(&self, completed: bool) -> SimReport {
        let stealing = self.s.stealing_stats();
        SimReport {
            completed,
            makespan: self.last_resolved,
            bytes_transferred: self.network.bytes,
            n_transfers: self.network.count,
            n_steals: stealing.moves,
            n_steal_requests: stealing.requests,
            n_reexecuted: self.runs_per_task.iter().filter(|&&n| n > 1).count(),
            n_given_back: self.n_given_back,
            workers: self
                .specs
                .iter()
                .zip(&self.workers)
                .zip(&self.runs_per_worker)
                .map(|((spec, w), &runs)| WorkerReport {
                    name: spec.name.clone(),
                    peak_memory: w.peak,
                    tasks_executed: runs,
                })
                .collect(),
            timeline: self.timeline.clone(),
            completion: self
                .completion
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.map(|t| (self.tasks.names[i].clone(), t)))
                .collect(),
            failed: self
                .failed
                .iter()
                .map(|&t| self.tasks.names[t].clone())
                .collect(),
            rejected: self.rejected.clone(),
        }
    }
}
