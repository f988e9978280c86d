//! Outputs of the core: what the I/O layer must send (docs/scheduling.md#commands).
//!
//! Commands name tasks by id; the ids stay resolvable (key, run spec, …) until the
//! batch is drained with [`crate::Scheduler::drain`], after which forgotten slots may
//! be recycled.

use crate::ids::{ClientId, TaskId, WorkerId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// The client released or cancelled the key.
    Cancelled,
    /// The key depends on data that no longer exists anywhere.
    LostDependencies,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Run `task` on `worker`; details (spec, who_has of deps) via `Scheduler::compute_msg`.
    ComputeTask {
        worker: WorkerId,
        task: TaskId,
        run_id: u64,
    },
    /// Drop the task (and its data) from the worker.
    FreeKeys {
        worker: WorkerId,
        task: TaskId,
    },
    /// Ask the victim to give up a task it has not started.
    StealRequest {
        worker: WorkerId,
        task: TaskId,
        stimulus: u64,
    },
    /// Drop a surplus replica (the worker must not report it as lost).
    RemoveReplicas {
        worker: WorkerId,
        task: TaskId,
    },
    /// Close the connection of `worker`, which the core removed on its own (silent for
    /// longer than the TTL): a worker that was only stopped or cut off then finds itself
    /// disconnected and leaves, instead of lingering connected yet unknown.
    CloseWorker {
        worker: WorkerId,
    },
    /// Have `worker` copy `task`'s result from `holder`, a retiring worker
    /// (docs/runtime.md#retiring-workers); the I/O layer sends one message per
    /// destination and holder.
    AcquireReplica {
        worker: WorkerId,
        task: TaskId,
        holder: WorkerId,
    },
    /// Restart `worker`, which the core removed (`restart`, `restart_workers`): through
    /// its nanny, which starts a fresh worker process, or the worker itself.
    RestartWorker {
        worker: WorkerId,
    },
    /// Tell `worker` that `removed` left the cluster.
    WorkerRemoved {
        worker: WorkerId,
        removed: WorkerId,
    },
    KeyInMemory {
        client: ClientId,
        task: TaskId,
    },
    /// `task` failed because of `blame` (itself or an ancestor).
    TaskErred {
        client: ClientId,
        task: TaskId,
        blame: TaskId,
    },
    LostData {
        client: ClientId,
        task: TaskId,
    },
    TaskRetried {
        client: ClientId,
        task: TaskId,
    },
    CancelledKeys {
        client: ClientId,
        task: TaskId,
        reason: CancelReason,
    },
}
