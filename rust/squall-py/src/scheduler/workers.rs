//! Worker events: membership and heartbeats, task reports, replicas, steal answers.

use super::Scheduler;
use crate::convert::packed;
use crate::errors::wire_error;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use squall_core::{
    ErrorInfo, ErrorKind, Finished, Outcome, TaskId, WorkerId, WorkerMemory, WorkerSpec,
    WorkerStatus, WorkerTaskState,
};
use squall_wire::finished::FinishedBatch;
use squall_wire::keys::read_keys;
use std::sync::Arc;

fn outcome(o: Outcome) -> &'static str {
    match o {
        Outcome::Applied => "applied",
        Outcome::Ignored => "ignored",
    }
}

#[pymethods]
impl Scheduler {
    #[pyo3(signature = (address, nthreads, *, now, name=None, host=None, memory_limit=0, resources=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_worker(
        &mut self,
        py: Python<'_>,
        address: String,
        nthreads: u32,
        now: f64,
        name: Option<String>,
        host: Option<String>,
        memory_limit: u64,
        resources: Option<Vec<(String, f64)>>,
    ) -> PyResult<u32> {
        let host = host.unwrap_or_else(|| host_of(&address));
        let spec = WorkerSpec {
            name: name.unwrap_or_else(|| address.clone()),
            address,
            host,
            nthreads,
            memory_limit,
            resources: resources.unwrap_or_default(),
        };
        Ok(self.core(py, move |s| s.add_worker(spec, now))?.0)
    }

    #[pyo3(signature = (worker, *, now, expected=false))]
    fn remove_worker(
        &mut self,
        py: Python<'_>,
        worker: u32,
        now: f64,
        expected: bool,
    ) -> PyResult<()> {
        self.core(py, move |s| {
            s.remove_worker(WorkerId(worker), expected, now)
        })
    }

    /// `Client.restart`: every task is forgotten and every worker removed, to be
    /// restarted (`restart` commands); returns those workers.
    #[pyo3(signature = (*, now))]
    fn restart(&mut self, py: Python<'_>, now: f64) -> PyResult<Vec<u32>> {
        let ids = self.core(py, move |s| Ok(s.restart(now)))?;
        Ok(ids.into_iter().map(|w| w.0).collect())
    }

    /// These workers are removed, to be restarted (`restart` commands).
    #[pyo3(signature = (workers, *, now))]
    fn restart_workers(&mut self, py: Python<'_>, workers: Vec<u32>, now: f64) -> PyResult<()> {
        let ids: Vec<WorkerId> = workers.into_iter().map(WorkerId).collect();
        self.core(py, move |s| s.restart_workers(&ids, now))
    }

    /// The worker's process died while running exactly ``executing`` (task ids, as its
    /// nanny saw): only those become more suspicious (docs/scheduling.md#lost-workers).
    #[pyo3(signature = (worker, executing, *, now))]
    fn worker_died(
        &mut self,
        py: Python<'_>,
        worker: u32,
        executing: Vec<u32>,
        now: f64,
    ) -> PyResult<()> {
        let executing: Vec<TaskId> = executing.into_iter().map(TaskId).collect();
        self.core(py, move |s| {
            s.worker_died(WorkerId(worker), &executing, now)
        })
    }

    #[pyo3(signature = (worker, status, *, now))]
    fn worker_status_change(
        &mut self,
        py: Python<'_>,
        worker: u32,
        status: &str,
        now: f64,
    ) -> PyResult<()> {
        let status = WorkerStatus::parse(status)
            .ok_or_else(|| PyValueError::new_err(format!("unknown worker status {status:?}")))?;
        self.core(py, move |s| {
            s.worker_status_change(WorkerId(worker), status, now)
        })
    }

    /// Returns the heartbeat interval the worker should keep. `memory`: the
    /// process's RSS, managed bytes, spilled bytes (in memory, on disk) and count.
    /// `load`: the worker's load (docs/dashboard.md), a dict (missing keys are 0) or a
    /// tuple (cpu, read_bps, write_bps, executing, ready, in_flight, in_memory).
    #[pyo3(signature = (worker, *, now, bandwidth=None, executing=None, memory=None, load=None))]
    #[allow(clippy::too_many_arguments)]
    fn heartbeat(
        &mut self,
        py: Python<'_>,
        worker: u32,
        now: f64,
        bandwidth: Option<f64>,
        executing: Option<Vec<(u32, f64)>>,
        memory: Option<(u64, u64, u64, u64, u64)>,
        load: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        let load = load.map(super::dashboard::load_from_py).transpose()?;
        let executing: Vec<(TaskId, f64)> = executing
            .unwrap_or_default()
            .into_iter()
            .map(|(t, s)| (TaskId(t), s))
            .collect();
        let memory = memory.map(|m| WorkerMemory {
            process: m.0,
            managed: m.1,
            spilled_memory: m.2,
            spilled_disk: m.3,
            spilled_count: m.4,
        });
        self.core(py, move |s| {
            s.heartbeat(WorkerId(worker), now, bandwidth, &executing, memory, load)
        })
    }

    #[pyo3(signature = (worker, task, run_id, nbytes, *, now, start=0.0, stop=0.0, typename=None))]
    #[allow(clippy::too_many_arguments)]
    fn task_finished(
        &mut self,
        py: Python<'_>,
        worker: u32,
        task: u32,
        run_id: u64,
        nbytes: i64,
        now: f64,
        start: f64,
        stop: f64,
        typename: Option<String>,
    ) -> PyResult<&'static str> {
        let mut f = Finished::computed(TaskId(task), run_id, nbytes, start, stop);
        f.typename = typename;
        self.core(py, move |s| s.task_finished(WorkerId(worker), f, now))
            .map(outcome)
    }

    /// A worker's `finished` message (docs/protocol.md#finished): its `n` reports
    /// decoded from the payload as they came. Handled in order, as Dask handles a batch;
    /// returns the indices rejected (stale or unknown). A malformed payload is a
    /// ValueError.
    #[pyo3(signature = (worker, payload, n, *, now))]
    fn finished_wire(
        &mut self,
        py: Python<'_>,
        worker: u32,
        payload: &[u8],
        n: usize,
        now: f64,
    ) -> PyResult<Vec<usize>> {
        let f = FinishedBatch::decode(n, payload).map_err(wire_error)?;
        let workers = vec![worker; n];
        self.apply_finished(py, workers, f, now)
    }

    /// Many finished reports as packed little-endian buffers: the reporting worker of
    /// each (u32, or one int for all), u32 task ids, u64 run ids, i64 sizes and optional
    /// f64 compute seconds. Handled in order; returns the indices rejected.
    #[pyo3(signature = (workers, tasks, run_ids, nbytes, durations=None, *, now))]
    #[allow(clippy::too_many_arguments)]
    fn tasks_finished(
        &mut self,
        py: Python<'_>,
        workers: &Bound<'_, PyAny>,
        tasks: &[u8],
        run_ids: &[u8],
        nbytes: &[u8],
        durations: Option<&[u8]>,
        now: f64,
    ) -> PyResult<Vec<usize>> {
        let tasks = packed::<u32>(tasks, "tasks")?;
        let n = tasks.len();
        let workers = match workers.extract::<u32>() {
            Ok(w) => vec![w; n],
            Err(_) => packed::<u32>(workers.cast::<PyBytes>()?.as_bytes(), "workers")?,
        };
        let f = FinishedBatch {
            tasks,
            run_ids: packed::<u64>(run_ids, "run_ids")?,
            nbytes: packed::<i64>(nbytes, "nbytes")?,
            seconds: match durations {
                Some(d) => packed::<f64>(d, "durations")?,
                None => vec![0.0; n],
            },
        };
        if workers.len() != n || f.run_ids.len() != n || f.nbytes.len() != n || f.seconds.len() != n
        {
            return Err(PyValueError::new_err(
                "workers, tasks, run_ids, nbytes and durations must have equal lengths",
            ));
        }
        self.apply_finished(py, workers, f, now)
    }

    #[pyo3(signature = (worker, task, run_id, *, now, exception=None, traceback=None,
        exception_text=None, traceback_text=None))]
    #[allow(clippy::too_many_arguments)]
    fn task_erred(
        &mut self,
        py: Python<'_>,
        worker: u32,
        task: u32,
        run_id: u64,
        now: f64,
        exception: Option<Vec<u8>>,
        traceback: Option<Vec<u8>>,
        exception_text: Option<String>,
        traceback_text: Option<String>,
    ) -> PyResult<&'static str> {
        let e = ErrorInfo {
            kind: ErrorKind::Remote,
            exception: Arc::from(exception.unwrap_or_default()),
            traceback: Arc::from(traceback.unwrap_or_default()),
            exception_text: exception_text.unwrap_or_default(),
            traceback_text: traceback_text.unwrap_or_default(),
        };
        self.core(py, move |s| {
            s.task_erred(WorkerId(worker), TaskId(task), run_id, e, now)
        })
        .map(outcome)
    }

    #[pyo3(signature = (worker, task, run_id, compute_duration, *, now))]
    fn long_running(
        &mut self,
        py: Python<'_>,
        worker: u32,
        task: u32,
        run_id: u64,
        compute_duration: f64,
        now: f64,
    ) -> PyResult<&'static str> {
        self.core(py, move |s| {
            s.long_running(
                WorkerId(worker),
                TaskId(task),
                run_id,
                compute_duration,
                now,
            )
        })
        .map(outcome)
    }

    #[pyo3(signature = (worker, task, *, now))]
    fn reschedule(
        &mut self,
        py: Python<'_>,
        worker: u32,
        task: u32,
        now: f64,
    ) -> PyResult<&'static str> {
        self.core(py, move |s| {
            s.reschedule(WorkerId(worker), TaskId(task), now)
        })
        .map(outcome)
    }

    #[pyo3(signature = (worker, task, *, now))]
    fn release_worker_data(
        &mut self,
        py: Python<'_>,
        worker: u32,
        task: u32,
        now: f64,
    ) -> PyResult<&'static str> {
        self.core(py, move |s| {
            s.release_worker_data(WorkerId(worker), TaskId(task), now)
        })
        .map(outcome)
    }

    /// `add-replicas` (keys in `encode_keys` form): a worker fetched these; those in
    /// memory count it as a holder, others are sent back as `remove-replicas`, unknown
    /// keys are ignored.
    #[pyo3(signature = (worker, keys, *, now))]
    fn add_replicas(&mut self, py: Python<'_>, worker: u32, keys: &[u8], now: f64) -> PyResult<()> {
        let keys = read_keys(keys).map_err(wire_error)?;
        self.core(py, move |s| s.add_replicas(WorkerId(worker), &keys, now))
    }

    /// `drop-replicas` (keys in `encode_keys` form): a worker no longer holds these
    /// fetched copies; keys it was not counted for, or unknown ones, are ignored.
    #[pyo3(signature = (worker, keys, *, now))]
    fn drop_replicas(
        &mut self,
        py: Python<'_>,
        worker: u32,
        keys: &[u8],
        now: f64,
    ) -> PyResult<()> {
        let keys = read_keys(keys).map_err(wire_error)?;
        self.core(py, move |s| s.drop_replicas(WorkerId(worker), &keys, now))
    }

    /// The victim's answer to a steal request; True if the task moved or was rescheduled.
    #[pyo3(signature = (worker, task, state, stimulus, *, now))]
    fn steal_response(
        &mut self,
        py: Python<'_>,
        worker: u32,
        task: u32,
        state: Option<&str>,
        stimulus: u64,
        now: f64,
    ) -> PyResult<bool> {
        let state = match state {
            None => None,
            Some(s) => Some(WorkerTaskState::parse(s).ok_or_else(|| {
                PyValueError::new_err(format!("unknown worker task state {s:?}"))
            })?),
        };
        self.core(py, move |s| {
            s.steal_response(WorkerId(worker), TaskId(task), state, stimulus, now)
        })
    }
}

/// Host part of a `proto://host:port` address.
fn host_of(address: &str) -> String {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    match rest.rsplit_once(':') {
        Some((h, _)) => h.trim_matches(|c| c == '[' || c == ']').to_owned(),
        None => rest.to_owned(),
    }
}

impl Scheduler {
    /// Hands report `i` of `f`, from `workers[i]`, to the core: it ran for its seconds
    /// up to `now`.
    fn apply_finished(
        &mut self,
        py: Python<'_>,
        workers: Vec<u32>,
        f: FinishedBatch,
        now: f64,
    ) -> PyResult<Vec<usize>> {
        self.core(py, move |s| {
            let reports = (0..f.len()).map(|i| {
                let (task, secs) = (TaskId(f.tasks[i]), f.seconds[i]);
                let r = Finished::computed(task, f.run_ids[i], f.nbytes[i], now - secs, now);
                (WorkerId(workers[i]), r)
            });
            Ok(s.tasks_finished(reports, now))
        })
    }
}
