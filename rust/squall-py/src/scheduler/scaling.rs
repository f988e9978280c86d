//! Scaling queries: the adaptive target, the workers to close first, and what
//! retiring workers must hand over (docs/runtime.md#adaptive-scaling).

use super::Scheduler;
use crate::convert::key_to_py;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use squall_core::WorkerId;

#[pymethods]
impl Scheduler {
    /// Dask's `adaptive_target`: the number of workers the current work needs.
    fn adaptive_target(&self, target_duration: f64) -> PyResult<usize> {
        if target_duration.is_nan() || target_duration <= 0.0 {
            return Err(PyValueError::new_err(format!(
                "target_duration must be positive, not {target_duration}"
            )));
        }
        Ok(self.inner.adaptive_target(target_duration))
    }

    /// Dask's `workers_to_close`: worker ids, the first to close first.
    #[pyo3(signature = (*, n=None, target=None, minimum=0))]
    fn workers_to_close(
        &self,
        n: Option<usize>,
        target: Option<usize>,
        minimum: usize,
    ) -> Vec<u32> {
        self.inner
            .workers_to_close(n, target, minimum)
            .into_iter()
            .map(|w| w.0)
            .collect()
    }

    /// (task id, key, nbytes, a holder's id) of the results held by none but
    /// `workers` (known worker ids).
    #[allow(clippy::type_complexity)]
    fn held_only_by<'py>(
        &self,
        py: Python<'py>,
        workers: Vec<u32>,
    ) -> PyResult<Vec<(u32, Bound<'py, PyAny>, i64, u32)>> {
        let ids: Vec<WorkerId> = workers.into_iter().map(WorkerId).collect();
        self.inner
            .held_only_by(&ids)
            .into_iter()
            .map(|(t, w)| {
                let ts = self.inner.task(t);
                Ok((t.0, key_to_py(py, &ts.key)?, ts.nbytes, w.0))
            })
            .collect()
    }

    /// Workers that may be given tasks now (status running).
    #[getter]
    fn n_running(&self) -> usize {
        self.inner.n_running()
    }
}
