//! Progress watches (`squall.progress`, docs/runtime.md#progress): made from a packed
//! key list in one call, updated in one call per poll, each with the GIL released.

use super::Scheduler;
use crate::errors::{guarded, wire_error, UnknownKeyError};
use pyo3::prelude::*;
use squall_core as core;
use squall_wire::keys;

/// The tasks of some keys and their dependencies, counted per prefix.
#[pyclass(module = "squall._core")]
pub struct ProgressWatch {
    inner: core::ProgressWatch,
}

#[pymethods]
impl ProgressWatch {
    /// Per prefix: (name, tasks, done, erred), in the order the walk met them.
    fn counts(&self) -> Vec<(String, u64, u64, u64)> {
        self.inner
            .prefixes()
            .iter()
            .map(|p| (p.name.clone(), p.total, p.done, p.erred))
            .collect()
    }

    /// Tasks neither in memory nor erred at the last update.
    #[getter]
    fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    /// Keys asked for that stopped being wanted (cancelled or released).
    #[getter]
    fn cancelled(&self) -> u64 {
        self.inner.cancelled()
    }
}

#[pymethods]
impl Scheduler {
    /// A watch over the packed `keys` (`encode_keys`) and their dependencies; raises
    /// `UnknownKeyError` naming the keys the scheduler does not know.
    fn progress_watch(
        &self,
        py: Python<'_>,
        keys: &[u8],
        complete: bool,
    ) -> PyResult<ProgressWatch> {
        let keys = keys::read_keys(keys).map_err(wire_error)?;
        let s = &self.inner;
        let made = guarded(py, move || Ok(core::ProgressWatch::new(s, &keys, complete)))?;
        match made {
            Ok(inner) => Ok(ProgressWatch { inner }),
            Err(unknown) => Err(UnknownKeyError::new_err(format!(
                "unknown keys: {}",
                unknown
                    .iter()
                    .take(5)
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Looks again at up to `budget` of the watch's unfinished tasks, going on from
    /// where the last update stopped; returns how many are still not finished.
    fn progress_update(
        &self,
        py: Python<'_>,
        mut watch: PyRefMut<'_, ProgressWatch>,
        budget: usize,
    ) -> PyResult<usize> {
        let s = &self.inner;
        let w = &mut watch.inner;
        guarded(py, move || Ok(w.update(s, budget)))
    }
}
