//! A driver for tests: builds graphs by key name, plays the workers' part, and keeps a
//! readable record of every command the core emitted.
#![allow(dead_code)]

use squall_core::*;

pub struct H {
    pub s: Scheduler,
    pub now: f64,
    pub client: ClientId,
    /// Every drained command rendered as ("op", key-or-address).
    pub log: Vec<(String, String)>,
    /// Compute-task commands not yet finished by the test: (worker, task, run_id).
    pub running: Vec<(WorkerId, TaskId, u64)>,
}

pub fn cfg() -> Config {
    Config {
        validate: true,
        ..Config::default()
    }
}

pub fn spec(data: &str) -> Option<RunSpec> {
    Some(data.as_bytes().into())
}

pub fn key(k: &str) -> Key {
    Key::str(k)
}

impl H {
    pub fn new() -> Self {
        Self::with(cfg())
    }

    pub fn with(config: Config) -> Self {
        let mut s = Scheduler::new(config);
        let client = s.client_id("client-1");
        H {
            s,
            now: 1.0,
            client,
            log: Vec::new(),
            running: Vec::new(),
        }
    }

    pub fn tick_time(&mut self, dt: f64) -> f64 {
        self.now += dt;
        self.now
    }

    pub fn worker(&mut self, addr: &str, nthreads: u32) -> WorkerId {
        self.worker_spec(WorkerSpec {
            address: addr.into(),
            name: addr.into(),
            host: "127.0.0.1".into(),
            nthreads,
            ..Default::default()
        })
    }

    pub fn worker_spec(&mut self, spec: WorkerSpec) -> WorkerId {
        let now = self.tick_time(0.001);
        let w = self.s.add_worker(spec, now).unwrap();
        self.drain();
        w
    }

    /// Submits `(key, deps)` tasks (deps by key) and wants `wanted`.
    pub fn submit(
        &mut self,
        tasks: &[(&str, &[&str])],
        wanted: &[&str],
    ) -> CoreResult<Vec<TaskId>> {
        self.submit_with(tasks, wanted, TaskOptions::default(), GraphOrder::Compute)
    }

    pub fn submit_with(
        &mut self,
        tasks: &[(&str, &[&str])],
        wanted: &[&str],
        defaults: TaskOptions,
        order: GraphOrder,
    ) -> CoreResult<Vec<TaskId>> {
        let sub = Submission {
            tasks: tasks
                .iter()
                .map(|(k, deps)| {
                    NewTask::new(
                        key(k),
                        deps.iter().map(|d| DepRef::Key(key(d))).collect(),
                        spec(k),
                    )
                })
                .collect(),
            wanted: wanted.iter().map(|k| DepRef::Key(key(k))).collect(),
            defaults,
            fifo_timeout: 0.1,
            submitting_task: None,
            order,
            blobs: Vec::new(),
        };
        self.submit_raw(sub)
    }

    pub fn submit_raw(&mut self, sub: Submission) -> CoreResult<Vec<TaskId>> {
        let now = self.tick_time(0.001);
        let r = self.s.update_graph(self.client, sub, now)?;
        self.drain();
        Ok(r.ids)
    }

    pub fn t(&self, k: &str) -> TaskId {
        self.s
            .lookup(&key(k))
            .unwrap_or_else(|| panic!("no task {k}"))
    }

    pub fn state(&self, k: &str) -> TaskState {
        self.s
            .lookup(&key(k))
            .map_or(TaskState::Forgotten, |t| self.s.state_of(t))
    }

    pub fn name(&self, t: TaskId) -> String {
        self.s.task(t).key().python_str().into_owned()
    }

    pub fn drain(&mut self) {
        let (log, running) = self.s.drain(|s, cmds| {
            let mut log = Vec::new();
            let mut running = Vec::new();
            for c in cmds {
                let k = |t: &TaskId| s.task(*t).key().python_str().into_owned();
                let a = |w: &WorkerId| s.get_worker(*w).unwrap().address.clone();
                let entry = match c {
                    Command::ComputeTask {
                        worker,
                        task,
                        run_id,
                    } => {
                        running.push((*worker, *task, *run_id));
                        ("compute".into(), format!("{}@{}", k(task), a(worker)))
                    }
                    Command::FreeKeys { worker, task } => {
                        ("free".into(), format!("{}@{}", k(task), a(worker)))
                    }
                    Command::StealRequest { worker, task, .. } => {
                        ("steal".into(), format!("{}@{}", k(task), a(worker)))
                    }
                    Command::RemoveReplicas { task, .. } => ("remove-replicas".into(), k(task)),
                    Command::CloseWorker { worker } => ("close-worker".into(), a(worker)),
                    Command::AcquireReplica {
                        worker,
                        task,
                        holder,
                    } => (
                        "acquire".into(),
                        format!("{}@{}<-{}", k(task), a(worker), a(holder)),
                    ),
                    Command::RestartWorker { worker } => ("restart".into(), a(worker)),
                    Command::WorkerRemoved { removed, .. } => ("worker-removed".into(), a(removed)),
                    Command::KeyInMemory { task, .. } => ("key-in-memory".into(), k(task)),
                    Command::TaskErred { task, .. } => ("task-erred".into(), k(task)),
                    Command::LostData { task, .. } => ("lost-data".into(), k(task)),
                    Command::TaskRetried { task, .. } => ("task-retried".into(), k(task)),
                    Command::CancelledKeys { task, .. } => ("cancelled".into(), k(task)),
                };
                log.push(entry);
            }
            (log, running)
        });
        self.log.extend(log);
        // A newer dispatch of the same task supersedes an older one.
        for r in running {
            self.running.retain(|x| x.1 != r.1);
            self.running.push(r);
        }
        let s = &self.s;
        self.running.retain(|&(w, t, run)| {
            s.get_task(t)
                .is_some_and(|ts| ts.run_id == run && ts.processing_on() == Some(w))
        });
    }

    pub fn ops(&self, op: &str) -> Vec<String> {
        self.log
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, k)| k.clone())
            .collect()
    }

    pub fn clear_log(&mut self) {
        self.log.clear();
    }

    /// Keys currently dispatched, in dispatch order.
    pub fn dispatched(&self) -> Vec<String> {
        self.running.iter().map(|&(_, t, _)| self.name(t)).collect()
    }

    pub fn finish(&mut self, k: &str) {
        self.finish_sized(k, 8);
    }

    pub fn finish_sized(&mut self, k: &str, nbytes: i64) {
        let t = self.t(k);
        let &(w, _, run) = self
            .running
            .iter()
            .find(|r| r.1 == t)
            .unwrap_or_else(|| panic!("{k} is not running"));
        let now = self.tick_time(0.01);
        let r = Finished::computed(t, run, nbytes, now - 0.01, now);
        assert_eq!(self.s.task_finished(w, r, now).unwrap(), Outcome::Applied);
        self.drain();
    }

    pub fn fail(&mut self, k: &str) {
        let t = self.t(k);
        let &(w, _, run) = self.running.iter().find(|r| r.1 == t).unwrap();
        let now = self.tick_time(0.01);
        let e = ErrorInfo {
            exception_text: format!("boom in {k}"),
            ..Default::default()
        };
        self.s.task_erred(w, t, run, e, now).unwrap();
        self.drain();
    }

    /// Finishes whatever runs, oldest first, until nothing runs.
    pub fn run_all(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        while let Some(&(_, t, _)) = self.running.first() {
            let k = self.name(t);
            self.finish(&k);
            done.push(k);
        }
        done
    }

    /// The client retries `k` (an erred task), a moment later.
    pub fn retry(&mut self, k: &str) {
        let now = self.tick_time(0.1);
        self.s.retry(&[key(k)], now).unwrap();
        self.drain();
    }

    pub fn release(&mut self, keys: &[&str]) {
        let now = self.tick_time(0.001);
        let keys: Vec<Key> = keys.iter().map(|k| key(k)).collect();
        self.s
            .client_releases_keys(self.client, &keys, now)
            .unwrap();
        self.drain();
    }

    pub fn worker_of(&self, k: &str) -> Option<String> {
        let t = self.t(k);
        self.s
            .task(t)
            .processing_on()
            .map(|w| self.s.worker(w).address.clone())
    }
}

// ----- data placement (retirement, replicas) -----

pub fn item(k: &str, nbytes: i64, holders: &[&str]) -> Scattered {
    Scattered {
        key: key(k),
        nbytes,
        holders: holders.iter().map(|a| a.to_string()).collect(),
    }
}

pub fn scatter(h: &mut H, items: Vec<Scattered>) -> Vec<TaskId> {
    let now = h.tick_time(0.01);
    let ids = h.s.scatter(h.client, &items, now).unwrap();
    h.drain();
    ids
}

pub fn retire(h: &mut H, ws: &[WorkerId]) -> Vec<WorkerId> {
    let now = h.tick_time(0.01);
    let started = h.s.retire_workers(ws, now).unwrap();
    h.drain();
    started
}

pub fn tick(h: &mut H, dt: f64) {
    let now = h.tick_time(dt);
    h.s.tick(now);
    h.drain();
}

/// The destination fetched what it was asked for and says so (`add-replicas`).
pub fn fetched(h: &mut H, w: WorkerId, keys: &[&str]) {
    let now = h.tick_time(0.01);
    let keys: Vec<Key> = keys.iter().map(|k| key(k)).collect();
    h.s.add_replicas(w, &keys, now).unwrap();
    h.drain();
}
