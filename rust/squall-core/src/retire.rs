//! Retiring workers gracefully and restarting them (docs/runtime.md#cluster-lifecycle).
//!
//! The retiring workers are those `closing_gracefully`: they get no new tasks, and every
//! result that no other worker holds is copied to a running worker (`acquire-replicas`)
//! before they may leave; a worker holding actors is not retired, as their instances
//! cannot move (docs/actors.md). The core chooses where each result goes and asks again for
//! the copies that have not arrived after [`REASK`] seconds; the I/O layer only sends
//! the commands and bounds the wait (docs/scheduling.md#retirement).

use crate::commands::Command;
use crate::error::{CoreError, CoreResult};
use crate::ids::{ClientId, TaskId, WorkerId};
use crate::state::Scheduler;
use crate::stimuli::{Slots, Stimulus, Suspects};
use crate::worker::WorkerStatus;
use rustc_hash::FxHashSet;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A result still held only by retiring workers this long (seconds) after its copy was
/// asked for is asked for again: the destination may have died or failed to fetch it.
pub const REASK: f64 = 5.0;

/// Where a worker's retirement stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// It is not retiring (running or paused).
    NotRetiring,
    /// It left the cluster.
    Gone,
    /// Tasks still run there.
    Running,
    /// Nothing runs there; this many results only retiring workers hold are being
    /// copied elsewhere.
    Copying(usize),
    /// Nothing runs there, but this many results only retiring workers hold have
    /// nowhere to go: no running worker outside the retiring ones.
    Stuck(usize),
    /// It holds this many actors, which cannot move: it is not retired (as Dask's
    /// retirement refuses such a worker).
    HoldsActors(usize),
    /// Nothing runs there and everything it holds is held elsewhere too: it may leave.
    Done,
}

impl Retirement {
    /// Whether waiting longer may change the outcome.
    pub fn waiting(self) -> bool {
        matches!(self, Retirement::Running | Retirement::Copying(_))
    }

    pub fn name(self) -> &'static str {
        match self {
            Retirement::NotRetiring => "not-retiring",
            Retirement::Gone => "gone",
            Retirement::Running => "running",
            Retirement::Copying(_) => "copying",
            Retirement::Stuck(_) => "stuck",
            Retirement::HoldsActors(_) => "holds-actors",
            Retirement::Done => "done",
        }
    }
}

/// How [`Scheduler::end_retirement`] ended each worker's retirement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetireOutcome {
    /// Retired: removed from the core (if asked) or gone already.
    pub retired: Vec<WorkerId>,
    /// Kept, back to running, with the reason.
    pub kept: Vec<(WorkerId, String)>,
}

impl Scheduler {
    fn is_retiring(&self, w: WorkerId) -> bool {
        self.worker(w).status == WorkerStatus::ClosingGracefully
    }

    /// The retiring workers, in address order.
    fn retiring(&self) -> Vec<WorkerId> {
        self.worker_ids().filter(|&w| self.is_retiring(w)).collect()
    }

    /// Starts retiring `workers`: each becomes `closing_gracefully` (it leaves the sets
    /// of workers that may be given tasks) and the copies of the results that only
    /// retiring workers hold are asked for at once. Returns the workers whose retirement
    /// this started: not those retiring already, nor those that left. A worker id never
    /// registered is an error.
    pub fn retire_workers(&mut self, workers: &[WorkerId], now: f64) -> CoreResult<Vec<WorkerId>> {
        if let Some(&w) = workers.iter().find(|w| self.get_worker(**w).is_none()) {
            return Err(CoreError::UnknownWorker(w.0));
        }
        Ok(self.stimulus(now, |s, _| {
            let mut started = Vec::new();
            for &w in workers {
                if s.is_registered(w) && s.worker(w).status != WorkerStatus::ClosingGracefully {
                    s.wm(w).status = WorkerStatus::ClosingGracefully;
                    s.leave_worker_sets(w);
                    started.push(w);
                }
            }
            s.ask_replicas(now);
            (started, Slots::Unchanged)
        }))
    }

    /// Where the retirement of `w` stands (a query).
    pub fn retirement(&self, w: WorkerId) -> CoreResult<Retirement> {
        let ws = self.get_worker(w).ok_or(CoreError::UnknownWorker(w.0))?;
        Ok(match ws.status {
            WorkerStatus::Closed => Retirement::Gone,
            WorkerStatus::Running | WorkerStatus::Paused => Retirement::NotRetiring,
            WorkerStatus::ClosingGracefully if !ws.actors.is_empty() => {
                Retirement::HoldsActors(ws.actors.len())
            }
            WorkerStatus::ClosingGracefully if !ws.processing.is_empty() => Retirement::Running,
            WorkerStatus::ClosingGracefully => match self.n_only_on_retiring(w) {
                0 => Retirement::Done,
                n if self.running.is_empty() => Retirement::Stuck(n),
                n => Retirement::Copying(n),
            },
        })
    }

    /// The results `w` holds that no worker outside the retiring ones holds.
    fn n_only_on_retiring(&self, w: WorkerId) -> usize {
        let ws = self.worker(w);
        ws.has_what
            .iter()
            .filter(|&&t| self.task(t).who_has.iter().all(|h| self.is_retiring(h)))
            .count()
    }

    /// Ends the retirement of `workers` (each retiring or gone): one that holds no actor
    /// and whose results all have a holder outside the retiring workers — or any, with
    /// `anyway` — is retired:
    /// removed from the core as an expected departure when `remove` (what still runs
    /// there goes elsewhere without counting as suspicious), left `closing_gracefully`
    /// otherwise. The others are kept: running again, with the reason.
    pub fn end_retirement(
        &mut self,
        workers: &[WorkerId],
        anyway: bool,
        remove: bool,
        now: f64,
    ) -> CoreResult<RetireOutcome> {
        for &w in workers {
            if let Retirement::NotRetiring = self.retirement(w)? {
                return Err(CoreError::Invalid(format!(
                    "worker {} is not retiring",
                    self.worker(w).address
                )));
            }
        }
        Ok(self.stimulus(now, |s, st| {
            let mut out = RetireOutcome::default();
            let mut slots = Slots::Unchanged;
            let mut seen = FxHashSet::default();
            for &w in workers {
                if !seen.insert(w) {
                    continue;
                }
                if !s.is_registered(w) {
                    out.retired.push(w);
                    continue;
                }
                let actors = s.worker(w).actors.len();
                let left = s.n_only_on_retiring(w);
                if (actors == 0 && left == 0) || anyway {
                    if remove {
                        s.remove_worker_in(w, Suspects::None, st);
                    }
                    out.retired.push(w);
                    continue;
                }
                let why = if actors > 0 {
                    format!("it holds {actors} actors, which cannot be moved")
                } else if s.running.is_empty() {
                    "no other running worker can take its results".to_string()
                } else {
                    format!("{left} results held only here were not copied in time")
                };
                s.wm(w).status = WorkerStatus::Running;
                slots = s.worker_became_running(w, st);
                out.kept.push((w, why));
            }
            (out, slots)
        }))
    }

    /// Asks for a copy of every result only retiring workers hold whose copy was not
    /// asked for in the last [`REASK`] seconds: each goes to the running worker holding
    /// the least data so far, counting what this pass already gave it (as Dask's
    /// retirement spreads data; ties in address order). Part of `retire_workers` and of
    /// every `tick`.
    pub(crate) fn ask_replicas(&mut self, now: f64) {
        let retiring = self.retiring();
        if retiring.is_empty() {
            self.replicas_asked.clear();
            return;
        }
        let held = self.held_only_by(&retiring);
        let live: FxHashSet<TaskId> = held.iter().map(|&(t, _)| t).collect();
        self.replicas_asked.retain(|t, _| live.contains(t));
        let mut load: BinaryHeap<Reverse<(i64, u32, u32)>> = self
            .running
            .iter()
            .map(|w| Reverse((self.worker(w).nbytes, self.rank(w), w.0)))
            .collect();
        if load.is_empty() {
            return;
        }
        for (t, holder) in held {
            if self
                .replicas_asked
                .get(&t)
                .is_some_and(|&at| now - at < REASK)
            {
                continue;
            }
            let Reverse((used, rank, dest)) = load.pop().expect("not empty");
            self.emit(Command::AcquireReplica {
                worker: WorkerId(dest),
                task: t,
                holder,
            });
            self.replicas_asked.insert(t, now);
            load.push(Reverse((used + self.task(t).nbytes.max(0), rank, dest)));
        }
    }

    /// `restart` (Client.restart): every client releases everything it wants (the
    /// fire-and-forget keys too), so that every task is forgotten, then every worker
    /// restarts as in [`Self::restart_workers`]. Returns those workers.
    pub fn restart(&mut self, now: f64) -> Vec<WorkerId> {
        self.stimulus(now, |s, st| {
            for c in 0..s.clients.len() {
                let c = ClientId(c as u32);
                let tasks = s.clients[c.idx()].wants_what.clone();
                s.client_releases_keys_into(&tasks, c, &mut st.recs);
            }
            s.settle(st);
            let workers: Vec<WorkerId> = s.worker_ids().collect();
            s.restart_workers_in(&workers, st);
            (workers, Slots::Unchanged)
        })
    }

    /// `restart_workers`: each worker leaves the core at once as an expected departure
    /// (its tasks go elsewhere without counting as suspicious; what only it held is
    /// recomputed when needed) and is to be restarted ([`Command::RestartWorker`]).
    /// Workers that left already are skipped; a worker id never registered is an error.
    pub fn restart_workers(&mut self, workers: &[WorkerId], now: f64) -> CoreResult<()> {
        if let Some(&w) = workers.iter().find(|w| self.get_worker(**w).is_none()) {
            return Err(CoreError::UnknownWorker(w.0));
        }
        self.stimulus(now, |s, st| {
            s.restart_workers_in(workers, st);
            ((), Slots::Unchanged)
        });
        Ok(())
    }

    fn restart_workers_in(&mut self, workers: &[WorkerId], st: &mut Stimulus) {
        for &w in workers {
            if self.is_registered(w) {
                self.remove_worker_in(w, Suspects::None, st);
                self.emit(Command::RestartWorker { worker: w });
            }
        }
    }
}
