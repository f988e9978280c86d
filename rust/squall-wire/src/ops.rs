//! The op names of the scheduler's commands (docs/protocol.md#messages), spelled once:
//! the notices travel under them and the binding reports drained commands by them
//! (`squall._core.COMMAND_OPS`, checked against `squall.protocol.ops` by the tests).

use squall_core::Command;

macro_rules! command_ops {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// The op name of a command.
        pub fn op_name(c: &Command) -> &'static str {
            match c {
                $(Command::$variant { .. } => $name,)*
            }
        }

        /// Every command's op name, in declaration order.
        pub const COMMAND_OPS: &[&str] = &[$($name),*];
    };
}

command_ops! {
    ComputeTask => "compute-task",
    FreeKeys => "free-keys",
    StealRequest => "steal-request",
    RemoveReplicas => "remove-replicas",
    CloseWorker => "close-worker",
    AcquireReplica => "acquire-replicas",
    RestartWorker => "restart",
    WorkerRemoved => "remove-worker",
    KeyInMemory => "key-in-memory",
    TaskErred => "task-erred",
    LostData => "lost-data",
    TaskRetried => "task-retried",
    CancelledKeys => "cancelled-keys",
}
