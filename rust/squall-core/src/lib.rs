//! squall-core: Dask's distributed scheduling policies as a pure, deterministic,
//! sans-IO state machine. Events go in through [`Scheduler`] methods; [`Command`]s
//! come out and are drained by the I/O layer. No clocks, no threads, no I/O: every
//! input carries the time it happened.

pub mod commands;
pub mod config;
mod decide;
pub mod error;
pub mod graph;
pub mod group;
pub mod heap;
pub mod ids;
pub mod idset;
pub mod key;
pub mod links;
pub mod microbench;
mod occupancy;
mod queue;
mod recs;
pub mod state;
pub mod stealing;
pub mod stimuli;
pub mod story;
pub mod task;
mod transitions;
mod validate;
pub mod worker;

pub use commands::{CancelReason, Command};
pub use config::Config;
pub use error::{CoreError, CoreResult};
pub use graph::{DepRef, GraphOrder, NewTask, Submission, SubmitResult, TaskOptions};
pub use ids::{ClientId, GroupId, PrefixId, TaskId, WorkerId};
pub use key::{Key, KeyValue};
pub use squall_priority::Priority;
pub use state::Scheduler;
pub use stealing::WorkerTaskState;
pub use stimuli::{heartbeat_interval, Finished, Outcome};
pub use task::{ErrorInfo, ErrorKind, Restrictions, RunSpec, TaskState};
pub use worker::{WorkerSpec, WorkerStatus};

impl Scheduler {
    /// The retained transitions of `key`, oldest first.
    pub fn story(&self, key: &Key) -> Vec<story::LogEntry> {
        self.log.story(key, &self.tasks)
    }
}
