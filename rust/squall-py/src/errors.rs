//! Core and wire errors → Python exceptions, in one place.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use squall_core::CoreError;
use squall_wire::WireError;

create_exception!(
    _core,
    SchedulerError,
    PyException,
    "Bad input to the scheduler; its state is unchanged."
);
create_exception!(
    _core,
    CycleError,
    SchedulerError,
    "The task graph has a cycle."
);
create_exception!(
    _core,
    UnknownDependencyError,
    SchedulerError,
    "A task depends on a key that does not exist."
);
create_exception!(
    _core,
    DuplicateKeyError,
    SchedulerError,
    "A key was submitted again with another definition."
);
create_exception!(
    _core,
    UnknownKeyError,
    SchedulerError,
    "The key is not known to the scheduler."
);
create_exception!(
    _core,
    UnknownTaskError,
    SchedulerError,
    "The task id is not known to the scheduler."
);
create_exception!(
    _core,
    UnknownWorkerError,
    SchedulerError,
    "The worker is not registered."
);
create_exception!(
    _core,
    StaleReportError,
    SchedulerError,
    "A report about an earlier run of a task."
);
create_exception!(
    _core,
    InternalError,
    SchedulerError,
    "A bug in squall's core (please report it)."
);

pub fn to_py(e: CoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        CoreError::Cycle(_) => CycleError::new_err(msg),
        CoreError::UnknownDependency { .. } => UnknownDependencyError::new_err(msg),
        CoreError::DuplicateKey(_) => DuplicateKeyError::new_err(msg),
        CoreError::UnknownKey(_) => UnknownKeyError::new_err(msg),
        CoreError::UnknownTask(_) => UnknownTaskError::new_err(msg),
        CoreError::UnknownWorker(_) => UnknownWorkerError::new_err(msg),
        CoreError::UnknownClient(_) | CoreError::Invalid(_) | CoreError::WorkerExists(_) => {
            SchedulerError::new_err(msg)
        }
        CoreError::StaleRunId { .. } => StaleReportError::new_err(msg),
    }
}

/// A malformed message is a ValueError saying what is wrong with it.
pub fn wire_error(e: WireError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Runs core work without the GIL and turns a panic into `InternalError` instead of
/// letting it unwind into the interpreter.
pub fn guarded<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, CoreError> + Send,
) -> PyResult<T> {
    let r = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(e)),
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(InternalError::new_err(format!(
                "internal error in squall core: {what}"
            )))
        }
    }
}
