//! The invariant checker (docs/scheduling.md#task-states and the bookkeeping of docs/scheduling.md#workers), run after every
//! stimulus in tests.

use crate::ids::{PrefixId, TaskId, WorkerId};
use crate::state::Scheduler;
use crate::task::TaskState as S;
use crate::worker::WorkerStatus;
use rustc_hash::FxHashMap;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

impl Scheduler {
    /// Checks every invariant; returns a description of the first violation.
    pub fn validate(&self) -> Result<(), String> {
        let mut n_live = 0;
        let mut counts = [0u64; 8];
        let mut queued = 0;
        let mut unrunnable = 0;
        let mut replicated = 0;
        for t in self.task_ids() {
            n_live += 1;
            self.validate_task(t)?;
            let ts = self.task(t);
            counts[ts.state as usize] += 1;
            queued += usize::from(ts.state == S::Queued);
            unrunnable += usize::from(ts.state == S::NoWorker);
            replicated += usize::from(ts.who_has.len() >= 2);
            if let Some(spec) = &ts.run_spec() {
                crate::blobs::check(spec, self.group(ts.group).blobs.len())
                    .map_err(|e| format!("{:?}: {e} (its group's blobs)", ts.key()))?;
            }
            ensure!(
                self.lookup(ts.key()) == Some(t),
                "{:?} is not indexed under its key",
                ts.key()
            );
        }
        self.validate_stealing()?;
        // A fed transition whose key is not looked up yet needs its slot (live or a
        // tombstone): slots are recycled only after the feed looked their keys up.
        for t in self.feed.unresolved() {
            ensure!(
                self.tasks.get(t.idx()).is_some_and(Option::is_some),
                "the transition feed names recycled slot {t:?}"
            );
        }
        ensure!(
            n_live == self.n_tasks_live,
            "live count {} != {}",
            self.n_tasks_live,
            n_live
        );
        // Forgotten tasks are gone: that slot of the counters is a total, not a count.
        counts[S::Forgotten as usize] = self.counters.state_counts[S::Forgotten as usize];
        ensure!(
            counts == self.counters.state_counts,
            "state counts {:?} != recount {:?}",
            self.counters.state_counts,
            counts
        );
        ensure!(
            queued == self.queued.len(),
            "queued heap has {} entries, {} tasks queued",
            self.queued.len(),
            queued
        );
        ensure!(
            unrunnable == self.unrunnable.len(),
            "unrunnable has {} entries, {} tasks no-worker",
            self.unrunnable.len(),
            unrunnable
        );
        ensure!(
            replicated == self.replicated_tasks,
            "replicated count {} != {}",
            self.replicated_tasks,
            replicated
        );
        let ranks: Vec<u32> = self.worker_ids().map(|w| self.rank(w)).collect();
        ensure!(
            ranks.windows(2).all(|r| r[0] < r[1]),
            "worker ranks do not increase in address order: {ranks:?}"
        );
        for (&t, asked) in &self.copies {
            ensure!(
                self.get_task(t).is_some() && !asked.is_empty(),
                "copies asked for task id {} which is forgotten, or none",
                t.0
            );
            ensure!(
                asked.iter().all(|c| c.then_drop != Some(c.dest)),
                "{:?}: a move to its own sender",
                self.task(t).key()
            );
        }
        ensure!(
            self.queued_tasks().len() == self.queued.len(),
            "queued heap holds {} live entries, counts {}",
            self.queued_tasks().len(),
            self.queued.len()
        );
        for (&seq, &(t, _)) in &self.unrunnable {
            ensure!(
                self.get_task(t)
                    .is_some_and(|ts| ts.state == S::NoWorker && ts.queue_seq() == seq),
                "unrunnable holds a task that is not no-worker under that sequence"
            );
        }
        let mut prefix_total: FxHashMap<PrefixId, u64> = FxHashMap::default();
        let mut nthreads = 0u64;
        let (mut nbytes, mut processing) = (0i64, 0usize);
        for w in self.worker_ids() {
            self.validate_worker(w)?;
            let ws = self.worker(w);
            nthreads += u64::from(ws.nthreads);
            nbytes += ws.nbytes;
            processing += ws.processing.len();
            for (p, c) in ws.task_prefix_count.iter() {
                *prefix_total.entry(p).or_insert(0) += u64::from(c);
            }
        }
        ensure!(
            nthreads == self.total_nthreads,
            "total_nthreads {} != {}",
            self.total_nthreads,
            nthreads
        );
        ensure!(
            nbytes == self.total_nbytes,
            "total_nbytes {} != {}",
            self.total_nbytes,
            nbytes
        );
        ensure!(
            processing == self.n_processing,
            "n_processing {} != {}",
            self.n_processing,
            processing
        );
        for (&p, &c) in &self.prefix_count_global {
            ensure!(
                prefix_total.get(&p).copied().unwrap_or(0) == c,
                "global prefix count of {} is off",
                self.prefix(p).name
            );
        }
        for c in &self.clients {
            for &t in &c.wants_what {
                ensure!(
                    self.get_task(t)
                        .is_some_and(|ts| ts.who_wants.iter().any(|x| self.client(x).id == c.id)),
                    "client {} wants a task that does not know it",
                    c.id
                );
            }
        }
        Ok(())
    }

    fn validate_task(&self, t: TaskId) -> Result<(), String> {
        let ts = self.task(t);
        let k = ts.key();
        for d in ts.dependencies.iter() {
            let dts = self
                .get_task(d)
                .ok_or_else(|| format!("{k:?} depends on a forgotten task"))?;
            ensure!(
                dts.dependents.contains(t),
                "{k:?} -> {:?} lacks the reverse edge",
                dts.key()
            );
        }
        for d in ts.dependents.iter() {
            let dts = self
                .get_task(d)
                .ok_or_else(|| format!("{k:?} has a forgotten dependent"))?;
            ensure!(
                dts.dependencies.contains(t),
                "{:?} <- {k:?} lacks the reverse edge",
                dts.key()
            );
        }
        for d in ts.waiters.iter() {
            ensure!(
                ts.dependents.contains(d),
                "{k:?} has a waiter that is not a dependent"
            );
        }
        ensure!(
            ts.processing_on().is_some() == (ts.state == S::Processing),
            "{k:?}: processing_on set iff processing (state {})",
            ts.state.name()
        );
        if ts.is_actor() {
            self.validate_actor(t)?;
        }
        ensure!(
            ts.who_has.is_empty() != (ts.state == S::Memory),
            "{k:?}: who_has non-empty iff memory (state {})",
            ts.state.name()
        );
        for w in ts.who_has.iter() {
            ensure!(
                self.is_registered(w)
                    && ts.who_has.position(w).is_some_and(|p| self
                        .worker(w)
                        .has_what
                        .get(p as usize)
                        == Some(&t)),
                "{k:?}: holder does not list it"
            );
        }
        for c in ts.who_wants.iter() {
            ensure!(
                ts.who_wants
                    .position(c)
                    .is_some_and(|p| self.client(c).wants_what.get(p as usize) == Some(&t)),
                "{k:?}: wanting client does not list it"
            );
        }
        let deps_in_memory = ts
            .dependencies
            .iter()
            .all(|d| self.state_of(d) == S::Memory);
        let waiter_of_deps = ts
            .dependencies
            .iter()
            .all(|d| self.task(d).waiters.contains(t));
        match ts.state {
            S::Released => {
                ensure!(
                    ts.waiting_on == 0,
                    "{k:?}: released but waiting on {}",
                    ts.waiting_on
                );
                for d in ts.dependencies.iter() {
                    ensure!(
                        !self.task(d).waiters.contains(t),
                        "{k:?}: released yet a waiter of a dependency"
                    );
                }
            }
            S::Waiting => {
                let missing = ts
                    .dependencies
                    .iter()
                    .filter(|&d| self.task(d).who_has.is_empty())
                    .count() as u32;
                ensure!(
                    ts.waiting_on == missing,
                    "{k:?}: waiting_on {} but {} dependencies lack data",
                    ts.waiting_on,
                    missing
                );
                ensure!(
                    missing > 0,
                    "{k:?}: waiting with every dependency in memory"
                );
                for d in ts.dependencies.iter() {
                    let ds = self.state_of(d);
                    ensure!(
                        ds == S::Released || self.task(d).waiters.contains(t),
                        "{k:?}: not a waiter of its dependency"
                    );
                }
            }
            S::Queued => {
                ensure!(!ts.has_restrictions(), "{k:?}: queued with restrictions");
                ensure!(
                    deps_in_memory && waiter_of_deps,
                    "{k:?}: queued before its dependencies are ready"
                );
            }
            S::NoWorker => {
                ensure!(
                    deps_in_memory && waiter_of_deps,
                    "{k:?}: no-worker before its dependencies are ready"
                );
            }
            S::Processing => {
                let w = ts.processing_on().expect("checked above");
                ensure!(
                    self.get_worker(w)
                        .is_some_and(|ws| ws.processing.holds(t, ts.processing_place())),
                    "{k:?}: not in its worker's processing"
                );
                ensure!(
                    deps_in_memory && waiter_of_deps,
                    "{k:?}: processing before its dependencies are ready"
                );
            }
            S::Memory => {
                ensure!(
                    !ts.waiters.is_empty() || !ts.who_wants.is_empty(),
                    "{k:?}: in memory but nobody needs it"
                );
                for d in ts.dependents.iter() {
                    let want = self.state_of(d).is_waiter_state();
                    ensure!(
                        ts.waiters.contains(d) == want,
                        "{k:?}: waiter set disagrees with dependent {:?} in {}",
                        self.task(d).key(),
                        self.state_of(d).name()
                    );
                }
            }
            S::Erred => {
                ensure!(ts.exception_blame().is_some(), "{k:?}: erred without blame");
            }
            S::Forgotten => return Err(format!("{k:?}: forgotten task still indexed")),
        }
        Ok(())
    }

    /// An actor lives on one worker: the one processing it, then the one of its holders
    /// that built it (others hold handles); it never queues (docs/actors.md).
    fn validate_actor(&self, t: TaskId) -> Result<(), String> {
        let ts = self.task(t);
        let k = ts.key();
        ensure!(ts.state != S::Queued, "{k:?}: an actor is queued");
        let homes = self
            .worker_ids()
            .filter(|&w| self.worker(w).actors.contains(&t))
            .count();
        match ts.state {
            S::Processing => {
                let w = ts.processing_on().expect("processing");
                ensure!(
                    self.worker(w).actors.contains(&t) && homes == 1,
                    "{k:?}: a processing actor is listed by its worker alone"
                );
            }
            S::Memory => ensure!(
                homes == 1
                    && ts
                        .who_has
                        .iter()
                        .any(|w| self.worker(w).actors.contains(&t)),
                "{k:?}: an actor in memory lives on exactly one of its holders"
            ),
            _ => ensure!(
                homes == 0,
                "{k:?}: listed as an actor in state {}",
                ts.state.name()
            ),
        }
        Ok(())
    }

    fn validate_worker(&self, w: WorkerId) -> Result<(), String> {
        let ws = self.worker(w);
        let a = &ws.address;
        for &t in &ws.actors {
            let ts = self
                .get_task(t)
                .ok_or_else(|| format!("{a}: lists a forgotten actor"))?;
            ensure!(ts.is_actor(), "{a}: lists {:?} as an actor", ts.key());
        }
        ensure!(
            ws.status != WorkerStatus::Closed,
            "{a}: closed worker still indexed"
        );
        let mut prefix_counts: FxHashMap<PrefixId, u32> = FxHashMap::default();
        let mut needs: FxHashMap<TaskId, u32> = FxHashMap::default();
        for (place, t) in ws.processing.places() {
            let ts = self
                .get_task(t)
                .ok_or_else(|| format!("{a}: processing a forgotten task"))?;
            ensure!(
                ts.processing_on() == Some(w),
                "{a}: lists {:?} which processes elsewhere",
                ts.key()
            );
            ensure!(
                ts.processing_place() == place,
                "{a}: lists {:?} at {place}, the task says {}",
                ts.key(),
                ts.processing_place()
            );
            if !ts.is_long_running() {
                *prefix_counts.entry(self.prefix_of(t)).or_insert(0) += 1;
            }
            for d in ts.dependencies.iter() {
                if !self.task(d).who_has.contains(w) {
                    *needs.entry(d).or_insert(0) += 1;
                }
            }
        }
        for t in ws.long_running.iter() {
            ensure!(
                self.get_task(t)
                    .is_some_and(|ts| ts.processing_on() == Some(w)),
                "{a}: long-running task not processing"
            );
        }
        ensure!(
            prefix_counts.len() == ws.task_prefix_count.len(),
            "{a}: prefix counts disagree"
        );
        for (p, c) in prefix_counts {
            ensure!(
                ws.task_prefix_count.get(p) == Some(c),
                "{a}: prefix count of {} is off",
                self.prefix(p).name
            );
        }
        // needs_what may keep entries for dependencies acquired since assignment only
        // until the replica arrives (add_replica removes them), so compare exactly.
        ensure!(
            needs.len() == ws.needs_what.len(),
            "{a}: needs_what has {} entries, expected {}",
            ws.needs_what.len(),
            needs.len()
        );
        for (d, c) in needs {
            ensure!(
                ws.needs_what.get(d) == Some(c),
                "{a}: needs_what counts {:?} for {:?}, expected {c}",
                ws.needs_what.get(d),
                self.task(d).key()
            );
        }
        let mut nbytes = 0i64;
        for &t in &ws.has_what {
            let ts = self
                .get_task(t)
                .ok_or_else(|| format!("{a}: holds a forgotten task"))?;
            ensure!(
                ts.who_has.contains(w),
                "{a}: holds {:?} which does not list it",
                ts.key()
            );
            nbytes += self.eff_nbytes(t);
        }
        ensure!(
            nbytes == ws.nbytes,
            "{a}: nbytes {} != {}",
            ws.nbytes,
            nbytes
        );
        let rank = self.rank(w);
        let running = ws.status == WorkerStatus::Running;
        ensure!(
            self.running.contains(rank, w) == running,
            "{a}: running set disagrees with status"
        );
        ensure!(
            !self.idle.contains(rank, w) || running,
            "{a}: idle but not running"
        );
        ensure!(
            self.idle_task_count.contains(rank, w) == (running && self.task_slots_available(w) > 0),
            "{a}: idle_task_count disagrees with free slots"
        );
        ensure!(
            self.idle_task_count.load_of(w)
                == self
                    .idle_task_count
                    .contains(rank, w)
                    .then(|| self.queuing_load(w)),
            "{a}: filed in idle_task_count with a stale load"
        );
        Ok(())
    }
}
