//! Errors the core reports for bad input. Every error leaves the state untouched.

use crate::key::Key;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    #[error("cycle in task graph through keys {0:?}")]
    Cycle(Vec<Key>),
    #[error("task {key:?} depends on {dep:?}, which is neither in the graph nor known to the scheduler (it may have been lost or released)")]
    UnknownDependency { key: Key, dep: Key },
    #[error("key {0:?} was submitted again with a different definition")]
    DuplicateKey(Key),
    #[error("unknown key {0:?}")]
    UnknownKey(Key),
    #[error("unknown task id {0}")]
    UnknownTask(u32),
    #[error("unknown worker id {0}")]
    UnknownWorker(u32),
    #[error("a worker is already registered at {0}")]
    WorkerExists(String),
    #[error("unknown client id {0}")]
    UnknownClient(u32),
    #[error("stale report for {key:?}: run_id {got} is not the current run ({current})")]
    StaleRunId { key: Key, got: u64, current: u64 },
    #[error("invalid argument: {0}")]
    Invalid(String),
}

pub type CoreResult<T> = Result<T, CoreError>;
