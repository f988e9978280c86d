//! Replicas on demand: `replicate`, `rebalance` and the active memory manager's
//! ReduceReplicas pass (docs/runtime.md#replicas-and-rebalancing).

use super::Scheduler;
use crate::convert::key_to_py;
use crate::errors::{to_py, wire_error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use squall_core::{Measure, RebalanceSettings, WorkerId};
use squall_wire::keys::read_keys;

fn worker_ids(workers: Option<Vec<u32>>) -> Option<Vec<WorkerId>> {
    workers.map(|ws| ws.into_iter().map(WorkerId).collect())
}

#[pymethods]
impl Scheduler {
    /// One round of `replicate` (keys in `encode_keys` form): drops copies beyond `n`
    /// among `workers`, asks for the missing ones; returns how many are still missing.
    #[pyo3(signature = (keys, n, workers, branching_factor, *, now))]
    fn replicate(
        &mut self,
        py: Python<'_>,
        keys: &[u8],
        n: Option<usize>,
        workers: Option<Vec<u32>>,
        branching_factor: usize,
        now: f64,
    ) -> PyResult<usize> {
        let keys = read_keys(keys).map_err(wire_error)?;
        let ids = worker_ids(workers);
        self.core(py, move |s| {
            s.replicate(&keys, n, ids.as_deref(), branching_factor, now)
        })
    }

    /// `rebalance` (keys in `encode_keys` form, None: all): asks for the moves and
    /// returns how many, and the keys no worker holds (then nothing moved).
    /// `measure` is "managed" or "process".
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (keys, workers, *, measure, sender_min, recipient_max,
                        sender_recipient_gap, now))]
    fn rebalance<'py>(
        &mut self,
        py: Python<'py>,
        keys: Option<&[u8]>,
        workers: Option<Vec<u32>>,
        measure: &str,
        sender_min: f64,
        recipient_max: f64,
        sender_recipient_gap: f64,
        now: f64,
    ) -> PyResult<(usize, Vec<Bound<'py, PyAny>>)> {
        let measure = match measure {
            "managed" => Measure::Managed,
            "process" => Measure::Process,
            other => {
                return Err(PyValueError::new_err(format!(
                    "measure must be 'managed' or 'process', not {other:?}"
                )))
            }
        };
        let settings = RebalanceSettings {
            measure,
            sender_min,
            recipient_max,
            sender_recipient_gap,
        };
        let keys = keys.map(read_keys).transpose().map_err(wire_error)?;
        let ids = worker_ids(workers);
        let out = self.core(py, move |s| {
            s.rebalance(keys.as_deref(), ids.as_deref(), settings, now)
        })?;
        let missing = out
            .missing
            .iter()
            .map(|k| key_to_py(py, k))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((out.moves.len(), missing))
    }

    /// Rebalance moves whose copy has not arrived yet.
    fn moves_pending(&self) -> usize {
        self.inner.moves_pending()
    }

    /// Forgets the pending rebalance moves; returns their keys.
    fn end_moves<'py>(&mut self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let keys = self.inner.end_moves();
        keys.iter().map(|k| key_to_py(py, k)).collect()
    }

    /// The ReduceReplicas pass, once; returns how many copies it dropped.
    #[pyo3(signature = (*, now))]
    fn reduce_replicas(&mut self, py: Python<'_>, now: f64) -> PyResult<usize> {
        self.core(py, move |s| Ok(s.reduce_replicas(now)))
    }

    /// Starts the periodic pass, every `interval` seconds of ticks (no-op if started).
    fn amm_start(&mut self, interval: f64) -> PyResult<()> {
        self.inner.amm_start(interval).map_err(to_py)
    }

    fn amm_stop(&mut self) {
        self.inner.amm_stop();
    }

    #[getter]
    fn amm_running(&self) -> bool {
        self.inner.amm_running()
    }
}
