//! Scaling: the adaptive target, the workers to close first (docs/runtime.md#adaptive-scaling),
//! and retiring workers (docs/runtime.md#retiring-workers).

use super::Scheduler;
use crate::errors::to_py;
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

    /// Starts retiring these workers (docs/runtime.md#retiring-workers); returns those
    /// whose retirement this started (not those retiring already or gone).
    #[pyo3(signature = (workers, *, now))]
    fn retire_workers(
        &mut self,
        py: Python<'_>,
        workers: Vec<u32>,
        now: f64,
    ) -> PyResult<Vec<u32>> {
        let ids: Vec<WorkerId> = workers.into_iter().map(WorkerId).collect();
        let started = self.core(py, move |s| s.retire_workers(&ids, now))?;
        Ok(started.into_iter().map(|w| w.0).collect())
    }

    /// Whether waiting may still change how the retirement of any of these workers
    /// ends (tasks still run there, or results only they hold are being copied).
    fn retirement_pending(&self, workers: Vec<u32>) -> PyResult<bool> {
        for w in workers {
            if self.inner.retirement(WorkerId(w)).map_err(to_py)?.waiting() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Ends the retirement of these workers: `(retired, [(kept, why)])`.
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (workers, *, anyway, remove, now))]
    fn end_retirement(
        &mut self,
        py: Python<'_>,
        workers: Vec<u32>,
        anyway: bool,
        remove: bool,
        now: f64,
    ) -> PyResult<(Vec<u32>, Vec<(u32, String)>)> {
        let ids: Vec<WorkerId> = workers.into_iter().map(WorkerId).collect();
        let out = self.core(py, move |s| s.end_retirement(&ids, anyway, remove, now))?;
        let retired = out.retired.into_iter().map(|w| w.0).collect();
        let kept = out.kept.into_iter().map(|(w, why)| (w.0, why)).collect();
        Ok((retired, kept))
    }

    /// Workers that may be given tasks now (status running).
    #[getter]
    fn n_running(&self) -> usize {
        self.inner.n_running()
    }
}
