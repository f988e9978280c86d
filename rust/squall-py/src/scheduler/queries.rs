//! Read-only queries: keys and ids, states, snapshots for diagnostics, counts.

use super::Scheduler;
use crate::convert::{key_from_py, key_to_py};
use crate::errors::{UnknownTaskError, UnknownWorkerError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use squall_core::{TaskId, TaskState, Worker, WorkerId, WorkerMemory, WorkerStatus};
use std::collections::{BTreeMap, HashMap};

fn unknown_task(task: u32) -> PyErr {
    UnknownTaskError::new_err(format!("unknown task id {task}"))
}

#[pymethods]
impl Scheduler {
    fn lookup(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        Ok(self.inner.lookup(&key_from_py(key)?).map(|t| t.0))
    }

    fn key_of<'py>(&self, py: Python<'py>, task: u32) -> PyResult<Bound<'py, PyAny>> {
        let ts = self
            .inner
            .task_slot(TaskId(task))
            .ok_or_else(|| unknown_task(task))?;
        key_to_py(py, ts.key())
    }

    /// The state name of a key ("forgotten" if unknown).
    fn state(&self, key: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let k = key_from_py(key)?;
        Ok(self
            .inner
            .lookup(&k)
            .map_or("forgotten", |t| self.inner.state_of(t).name()))
    }

    /// A snapshot of one task's scheduler state, for diagnostics and the runtime.
    fn task_info<'py>(&self, py: Python<'py>, task: u32) -> PyResult<Bound<'py, PyDict>> {
        let ts = self
            .inner
            .get_task(TaskId(task))
            .ok_or_else(|| unknown_task(task))?;
        let s = &self.inner;
        let d = PyDict::new(py);
        d.set_item("key", key_to_py(py, ts.key())?)?;
        d.set_item("state", ts.state.name())?;
        d.set_item(
            "priority",
            (
                ts.priority.neg_user,
                ts.priority.generation,
                ts.priority.order,
            ),
        )?;
        d.set_item("run_id", ts.run_id)?;
        d.set_item("nbytes", ts.nbytes)?;
        d.set_item(
            "processing_on",
            ts.processing_on().map(|w| s.worker(w).address.clone()),
        )?;
        d.set_item(
            "who_has",
            ts.who_has
                .iter()
                .map(|w| s.worker(w).address.clone())
                .collect::<Vec<_>>(),
        )?;
        let deps: Vec<Bound<'py, PyAny>> = ts
            .dependencies
            .iter()
            .map(|t| key_to_py(py, s.task(t).key()))
            .collect::<PyResult<_>>()?;
        d.set_item("dependencies", deps)?;
        d.set_item("suspicious", ts.suspicious)?;
        d.set_item("group", &s.group(ts.group).name)?;
        d.set_item("prefix", &s.prefix(s.group(ts.group).prefix).name)?;
        if let Some(e) = ts.error() {
            d.set_item("exception", PyBytes::new(py, &e.exception))?;
            d.set_item("traceback", PyBytes::new(py, &e.traceback))?;
            d.set_item("exception_text", &e.exception_text)?;
            d.set_item("traceback_text", &e.traceback_text)?;
            d.set_item("error_kind", format!("{:?}", e.kind))?;
        }
        if let Some(spec) = &ts.run_spec() {
            let whole = squall_core::blobs::join(spec, &s.group(ts.group).blobs);
            d.set_item("run_spec", PyBytes::new(py, &whole))?;
        }
        Ok(d)
    }

    fn worker_info<'py>(&self, py: Python<'py>, worker: u32) -> PyResult<Bound<'py, PyDict>> {
        let Some(ws) = self.inner.get_worker(WorkerId(worker)) else {
            return Err(UnknownWorkerError::new_err(format!(
                "unknown worker id {worker}"
            )));
        };
        self.worker_dict(py, WorkerId(worker), ws)
    }

    /// The keys of every task the scheduler knows, in slot order: a pass over the
    /// tasks, for admin code (`run_on_scheduler`'s `tasks`), never a hot path.
    fn task_keys<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.inner
            .task_ids()
            .map(|t| key_to_py(py, self.inner.task(t).key()))
            .collect()
    }

    /// Addresses → ids of the registered workers, in address order.
    fn workers(&self) -> Vec<(String, u32)> {
        self.inner
            .worker_ids()
            .map(|w| (self.inner.worker(w).address.clone(), w.0))
            .collect()
    }

    /// The keys a worker holds (`"has_what"`) or runs and queues (`"processing"`),
    /// with their sizes in bytes (diagnostics: `Client.has_what`, `.processing`).
    fn worker_keys<'py>(
        &self,
        py: Python<'py>,
        worker: u32,
        which: &str,
    ) -> PyResult<Vec<(Bound<'py, PyAny>, i64)>> {
        let Some(ws) = self.inner.get_worker(WorkerId(worker)) else {
            return Err(UnknownWorkerError::new_err(format!(
                "unknown worker id {worker}"
            )));
        };
        let tasks: Vec<TaskId> = match which {
            "has_what" => ws.has_what.clone(),
            "processing" => ws.processing.iter().collect(),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown worker key set {which:?}"
                )))
            }
        };
        tasks
            .into_iter()
            .map(|t| {
                let ts = self.inner.task(t);
                Ok((key_to_py(py, ts.key())?, ts.nbytes))
            })
            .collect()
    }

    /// The retained transitions of a key: (start, finish, stimulus, time).
    fn story(
        &self,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(&'static str, &'static str, u64, f64)>> {
        let k = key_from_py(key)?;
        Ok(self
            .inner
            .story(&k)
            .into_iter()
            .map(|e| (e.start.name(), e.finish.name(), e.stimulus, e.time))
            .collect())
    }

    #[getter]
    fn n_tasks(&self) -> usize {
        self.inner.n_tasks()
    }

    /// Tasks some unfinished task waits on (a pass over the tasks).
    fn n_tasks_with_waiters(&self) -> usize {
        self.inner.n_tasks_with_waiters()
    }

    #[getter]
    fn n_queued(&self) -> usize {
        self.inner.n_queued()
    }

    #[getter]
    fn total_nthreads(&self) -> u64 {
        self.inner.total_nthreads()
    }

    #[getter]
    fn total_memory(&self) -> u64 {
        self.inner.total_memory()
    }

    /// Task-state counts over all live tasks (the states some task is in), kept by the
    /// core as tasks move: O(1).
    fn state_counts(&self) -> BTreeMap<&'static str, u64> {
        TaskState::ALL
            .into_iter()
            .filter(|&s| s != TaskState::Forgotten)
            .map(|s| (s.name(), self.inner.count_in(s)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

impl Scheduler {
    /// What `worker_info` tells of a worker.
    pub(super) fn worker_dict<'py>(
        &self,
        py: Python<'py>,
        w: WorkerId,
        ws: &Worker,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("address", &ws.address)?;
        d.set_item("name", &ws.name)?;
        d.set_item("host", &ws.host)?;
        d.set_item("nthreads", ws.nthreads)?;
        d.set_item("memory_limit", ws.memory_limit)?;
        d.set_item(
            "resources",
            ws.resources.iter().cloned().collect::<HashMap<_, _>>(),
        )?;
        d.set_item("status", ws.status.name())?;
        d.set_item("processing", ws.processing.len())?;
        d.set_item("long_running", ws.long_running.len())?;
        d.set_item("has_what", ws.has_what.len())?;
        d.set_item("nbytes", ws.nbytes)?;
        d.set_item("bandwidth", ws.bandwidth)?;
        d.set_item("metrics", memory_metrics(py, &ws.memory)?)?;
        d.set_item("load", super::dashboard::load_dict(py, &ws.load)?)?;
        d.set_item(
            "occupancy",
            if ws.status == WorkerStatus::Closed {
                0.0
            } else {
                self.inner.occupancy(w)
            },
        )?;
        Ok(d)
    }
}

/// A worker's memory with distributed's metric names (`memory` is the process's RSS,
/// `unmanaged` what it holds beyond its results), and the count of spilled values.
fn memory_metrics<'py>(py: Python<'py>, m: &WorkerMemory) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("memory", m.process)?;
    d.set_item("managed_bytes", m.managed)?;
    d.set_item("unmanaged", m.process.saturating_sub(m.managed))?;
    let spilled = PyDict::new(py);
    spilled.set_item("memory", m.spilled_memory)?;
    spilled.set_item("disk", m.spilled_disk)?;
    d.set_item("spilled_bytes", spilled)?;
    d.set_item("spilled_count", m.spilled_count)?;
    Ok(d)
}
