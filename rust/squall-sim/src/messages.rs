//! Messages between the scheduler and the simulated workers, and the translation of
//! the core's drained [`Command`]s into them: the ops the runtime's workers exchange
//! with its scheduler (docs/protocol.md), one key or task per message.
//!
//! Messages name tasks by simulation index, never by core `TaskId`: a delayed message
//! may arrive after the core recycled the id's slot, while keys (and so indices) are
//! stable. Worker→scheduler messages are resolved back through the key on delivery.

use crate::graph::TaskTable;
use squall_core::{Command, Priority, Scheduler, TaskId, WorkerId, WorkerTaskState};

/// Dask's compute-task message: what to run and where its inputs are.
#[derive(Clone, Debug)]
pub(crate) struct ComputeMsg {
    pub task: usize,
    pub run_id: u64,
    pub priority: Priority,
    /// Each dependency with the workers holding it when the message was sent.
    pub deps: Vec<(usize, Vec<usize>)>,
    pub resources: Vec<(String, f64)>,
}

#[derive(Clone, Debug)]
pub(crate) enum ToWorker {
    Compute(ComputeMsg),
    FreeKeys(usize),
    StealRequest { task: usize, stimulus: u64 },
    RemoveReplica(usize),
}

#[derive(Clone, Debug)]
pub(crate) enum ToScheduler {
    TaskFinished {
        task: usize,
        run_id: u64,
        start: f64,
        stop: f64,
    },
    /// add-replicas: a fetched copy is kept here.
    AddReplicas(usize),
    /// drop-replicas: a fetched copy is no longer needed here and was dropped.
    DropReplicas(usize),
    StealResponse {
        task: usize,
        state: Option<WorkerTaskState>,
        stimulus: u64,
    },
    /// reschedule: a task whose dependency no holder could provide is given back.
    Reschedule(usize),
}

/// What a drained command turns into.
pub(crate) enum Outgoing {
    Worker(usize, ToWorker),
    /// A wanted key reached memory (key-in-memory).
    KeyInMemory(usize),
    /// A wanted key will never arrive (task-erred, cancelled-keys).
    KeyFailed(usize),
    /// A wanted key's data was lost; it will be recomputed.
    KeyLost(usize),
}

pub(crate) fn translate(
    s: &Scheduler,
    cmds: &[Command],
    tasks: &TaskTable,
    sim_worker: &[Option<usize>],
) -> Vec<Outgoing> {
    let idx = |t: TaskId| {
        tasks
            .get(s.task(t).key())
            .expect("every scheduler task came from a simulated submission")
    };
    let wk = |w: WorkerId| sim_worker[w.idx()].expect("known worker");
    let holders = |t: TaskId| s.task(t).who_has.iter().map(wk).collect::<Vec<_>>();
    let mut out = Vec::with_capacity(cmds.len());
    for c in cmds {
        match *c {
            Command::ComputeTask {
                worker,
                task,
                run_id,
            } => {
                let ts = s.task(task);
                let msg = ComputeMsg {
                    task: idx(task),
                    run_id,
                    priority: ts.priority,
                    deps: ts
                        .dependencies
                        .iter()
                        .map(|d| (idx(d), holders(d)))
                        .collect(),
                    resources: ts
                        .restrictions()
                        .map(|r| r.resources.clone())
                        .unwrap_or_default(),
                };
                out.push(Outgoing::Worker(wk(worker), ToWorker::Compute(msg)));
            }
            Command::FreeKeys { worker, task } => {
                out.push(Outgoing::Worker(wk(worker), ToWorker::FreeKeys(idx(task))));
            }
            Command::StealRequest {
                worker,
                task,
                stimulus,
            } => out.push(Outgoing::Worker(
                wk(worker),
                ToWorker::StealRequest {
                    task: idx(task),
                    stimulus,
                },
            )),
            Command::RemoveReplicas { worker, task } => {
                out.push(Outgoing::Worker(
                    wk(worker),
                    ToWorker::RemoveReplica(idx(task)),
                ));
            }
            Command::KeyInMemory { task, .. } => out.push(Outgoing::KeyInMemory(idx(task))),
            Command::TaskErred { task, .. } | Command::CancelledKeys { task, .. } => {
                out.push(Outgoing::KeyFailed(idx(task)))
            }
            Command::LostData { task, .. } => out.push(Outgoing::KeyLost(idx(task))),
            // Workers learn about departures when a fetch from the dead worker fails.
            // A simulated worker is never silent past the TTL while alive.
            Command::CloseWorker { .. }
            | Command::AcquireReplica { .. }
            | Command::RestartWorker { .. }
            | Command::WorkerRemoved { .. }
            | Command::TaskRetried { .. } => {}
        }
    }
    out
}
