//! The `Scheduler` Python class: a thin batch-in / batch-out face over squall-core.
//! Its methods are grouped by concern, one `#[pymethods]` block per file (pyo3's
//! `multiple-pymethods`): graph submission, worker and client events, the drained
//! commands as wire payloads, and read-only queries.

mod clients;
mod dashboard;
mod dispatch;
mod feed;
mod progress;
mod queries;
mod replicas;
mod scaling;
mod submit;
mod workers;

use crate::config::config_from_py;
use crate::convert::{key_from_py, key_to_py};
use crate::errors::{guarded, InternalError};
pub use progress::ProgressWatch;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rustc_hash::FxHashMap;
use squall_core as core;
use squall_core::{CoreError, Key};
use squall_wire::compute::SentBlobs;

#[pyclass(module = "squall._core")]
pub struct Scheduler {
    inner: core::Scheduler,
    /// Keys the last submissions redefined with other dependencies (kept as they were),
    /// until `take_redefined`.
    redefined: Vec<Key>,
    /// The blobs each worker holds (docs/protocol.md#compute).
    sent_blobs: FxHashMap<core::WorkerId, SentBlobs>,
}

impl Scheduler {
    /// Runs `f` on the core with the GIL released (errors and panics mapped by
    /// [`guarded`]).
    fn core<T: Send>(
        &mut self,
        py: Python<'_>,
        f: impl FnOnce(&mut core::Scheduler) -> Result<T, CoreError> + Send,
    ) -> PyResult<T> {
        let inner = &mut self.inner;
        guarded(py, move || f(inner))
    }

    /// [`Self::core`] for a stimulus about Python keys, converted first.
    fn on_keys(
        &mut self,
        py: Python<'_>,
        keys: &[Bound<'_, PyAny>],
        f: impl FnOnce(&mut core::Scheduler, &[Key]) -> Result<(), CoreError> + Send,
    ) -> PyResult<()> {
        let keys = keys.iter().map(key_from_py).collect::<PyResult<Vec<_>>>()?;
        self.core(py, move |s| f(s, &keys))
    }
}

#[pymethods]
impl Scheduler {
    #[new]
    #[pyo3(signature = (config=None))]
    fn new(config: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        Ok(Scheduler {
            inner: core::Scheduler::new(config_from_py(config)?),
            redefined: Vec::new(),
            sent_blobs: FxHashMap::default(),
        })
    }

    /// The id of a client (registered on first use).
    fn client(&mut self, name: &str) -> u32 {
        self.inner.client_id(name).0
    }

    /// Periodic work: stealing balance, no-worker timeouts, worker TTL.
    #[pyo3(signature = (*, now))]
    fn tick(&mut self, py: Python<'_>, now: f64) -> PyResult<()> {
        self.core(py, move |s| {
            s.tick(now);
            Ok(())
        })
    }

    /// Keys that graphs submitted since the last call redefined with other
    /// dependencies; each kept its first definition.
    fn take_redefined<'py>(&mut self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        std::mem::take(&mut self.redefined)
            .iter()
            .map(|k| key_to_py(py, k))
            .collect()
    }

    /// Runs the invariant checker; raises InternalError on a violation.
    fn validate(&self) -> PyResult<()> {
        self.inner.validate().map_err(InternalError::new_err)
    }
}
