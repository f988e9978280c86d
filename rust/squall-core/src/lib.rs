//! squall-core: Dask's distributed scheduling policies as a pure, deterministic,
//! sans-IO state machine. Events go in through [`Scheduler`] methods; [`Command`]s
//! come out and are drained by the I/O layer. No clocks, no threads, no I/O: every
//! input carries the time it happened.

mod adaptive;
pub mod blobs;
mod commands;
mod config;
mod counters;
mod decide;
mod error;
mod feed;
mod graph;
mod group;
mod ids;
mod idset;
pub mod key;
mod links;
#[cfg(feature = "microbench")]
pub mod microbench;
mod occupancy;
mod progress;
mod queue;
mod recs;
mod replicas;
mod retire;
mod slotset;
mod state;
mod stealing;
mod stimuli;
mod story;
mod task;
mod tasklist;
mod transitions;
mod validate;
mod worker;
mod workerset;

// The public API is what is re-exported here; modules stay private so that their
// helpers do not become API by accident.
pub use commands::{CancelReason, Command};
pub use config::{Config, Kind, Setting, Value, SETTINGS};
pub use counters::{Counters, Totals, WorkerStates};
pub use error::{CoreError, CoreResult};
pub use feed::FeedEntry;
pub use graph::{DepRef, GraphOrder, NewTask, Submission, SubmitResult, TaskOptions};
pub use group::{TaskGroup, TaskPrefix};
pub use ids::{ClientId, GroupId, PrefixId, TaskId, WorkerId};
pub use idset::{IdSet, IdSetIter};
pub use key::{Key, KeyRef, KeyValue};
pub use links::{Holders, Links, Wanters};
pub use progress::{PrefixProgress, ProgressWatch};
pub use replicas::{Measure, Rebalance, RebalanceSettings};
pub use retire::{RetireOutcome, Retirement, REASK};
pub use squall_priority::Priority;
pub use state::{Client, Scheduler};
pub use stealing::{Stealing, WorkerTaskState};
pub use stimuli::{heartbeat_interval, Finished, Outcome, Scattered};
pub use story::LogEntry;
pub use task::{ErrorInfo, ErrorKind, Restrictions, RunSpec, Task, TaskExtra, TaskState, TaskText};
pub use tasklist::TaskList;
pub use worker::{
    Fetches, PrefixCounts, Seceded, Worker, WorkerLoad, WorkerMemory, WorkerSpec, WorkerStatus,
};

impl Scheduler {
    /// The retained transitions of `key`, oldest first.
    pub fn story(&self, key: &KeyRef) -> Vec<LogEntry> {
        self.log.story(key, &self.tasks)
    }

    /// Switches the transition feed on or off (off by default; off drops what was
    /// not taken). While on, every transition is kept until `take_transitions`.
    pub fn set_transition_feed(&mut self, on: bool) {
        self.feed.set(on);
    }

    pub fn transition_feed(&self) -> bool {
        self.feed.on()
    }

    /// The oldest `max` transitions not taken yet, oldest first (none while off).
    pub fn take_transitions(&mut self, max: usize) -> Vec<FeedEntry> {
        self.feed.take(&self.tasks, max)
    }
}
