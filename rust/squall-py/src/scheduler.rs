//! The `Scheduler` Python class: a thin batch-in / batch-out face over squall-core.

use crate::commands::Commands;
use crate::convert::{config_from_py, key_from_py, key_to_py, le_array};
use crate::errors::{guarded, InternalError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use squall_core as core;
use squall_core::{
    ClientId, DepRef, ErrorInfo, Finished, GraphOrder, Key, NewTask, Outcome, Restrictions,
    RunSpec, Submission, TaskId, TaskOptions, WorkerId, WorkerSpec, WorkerStatus, WorkerTaskState,
};
use std::sync::Arc;

#[pyclass(module = "squall._core")]
pub struct Scheduler {
    inner: core::Scheduler,
    /// Keys the last submissions redefined with other dependencies (kept as they were),
    /// until `take_redefined`.
    redefined: Vec<Key>,
}

fn ids_to_bytes(py: Python<'_>, ids: &[TaskId]) -> Py<PyBytes> {
    let mut out = Vec::with_capacity(ids.len() * 4);
    for t in ids {
        out.extend_from_slice(&t.0.to_le_bytes());
    }
    PyBytes::new(py, &out).unbind()
}

fn outcome(o: Outcome) -> &'static str {
    match o {
        Outcome::Applied => "applied",
        Outcome::Ignored => "ignored",
    }
}

fn graph_order(order: &str, given: Option<Vec<u64>>) -> PyResult<GraphOrder> {
    Ok(match (order, given) {
        (_, Some(v)) => GraphOrder::Given(v),
        ("compute", None) => GraphOrder::Compute,
        ("zero", None) => GraphOrder::Zero,
        ("sequential", None) => GraphOrder::Sequential,
        (other, None) => {
            return Err(PyValueError::new_err(format!(
                "order must be 'compute', 'zero' or 'sequential', not {other:?}"
            )))
        }
    })
}

/// Per-call options (`priority=`, `retries=`, `workers=` …) as task defaults.
#[allow(clippy::too_many_arguments)]
fn defaults(
    priority: i64,
    retries: Option<u32>,
    workers: Option<Vec<String>>,
    hosts: Option<Vec<String>>,
    resources: Option<Vec<(String, f64)>>,
    allow_other_workers: bool,
    actor: bool,
    annotations: Option<Vec<u8>>,
) -> TaskOptions {
    let r = Restrictions {
        workers: workers.unwrap_or_default(),
        hosts: hosts.unwrap_or_default(),
        resources: resources.unwrap_or_default(),
        loose: allow_other_workers,
    };
    TaskOptions {
        priority: Some(priority),
        retries,
        restrictions: (!r.is_empty()).then_some(r),
        actor,
        queueable: None,
        annotations: annotations.map(Arc::from),
    }
}

fn task_at(tasks: &mut [NewTask], i: u32) -> PyResult<&mut NewTask> {
    let n = tasks.len();
    tasks
        .get_mut(i as usize)
        .ok_or_else(|| PyValueError::new_err(format!("task index {i} out of range for {n} keys")))
}

/// Per-task annotations and data producers (indices into `tasks`).
fn annotate(
    tasks: &mut [NewTask],
    task_options: Option<&Bound<'_, PyAny>>,
    data_producers: Option<Vec<u32>>,
) -> PyResult<()> {
    if let Some(classes) = task_options {
        apply_task_options(tasks, classes)?;
    }
    for i in data_producers.unwrap_or_default() {
        task_at(tasks, i)?.data_producer = true;
    }
    Ok(())
}

/// Per-task annotations, given as classes `(options, task indices)` so that a layer's
/// tasks share one decoded set; options use the per-call keyword names.
fn apply_task_options(tasks: &mut [NewTask], classes: &Bound<'_, PyAny>) -> PyResult<()> {
    for item in classes.try_iter()? {
        let (opts, indices): (Bound<'_, PyDict>, Vec<u32>) = item?.extract()?;
        let opts = Box::new(task_options_from(&opts)?);
        for i in indices {
            task_at(tasks, i)?.options = Some(opts.clone());
        }
    }
    Ok(())
}

fn task_options_from(d: &Bound<'_, PyDict>) -> PyResult<TaskOptions> {
    let mut r = Restrictions::default();
    let mut o = TaskOptions::default();
    for (name, value) in d.iter() {
        if value.is_none() {
            continue;
        }
        match name.extract::<String>()?.as_str() {
            "priority" => o.priority = Some(value.extract()?),
            "retries" => o.retries = Some(value.extract()?),
            "workers" => r.workers = value.extract()?,
            "hosts" => r.hosts = value.extract()?,
            "resources" => r.resources = value.extract()?,
            "allow_other_workers" => r.loose = value.extract()?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown task option {other:?} (expected priority, retries, workers, \
                     hosts, resources or allow_other_workers)"
                )))
            }
        }
    }
    o.restrictions = (!r.is_empty()).then_some(r);
    Ok(o)
}

fn spec_of(ob: &Bound<'_, PyAny>) -> PyResult<Option<RunSpec>> {
    if ob.is_none() {
        Ok(None)
    } else {
        Ok(Some(Arc::from(ob.cast::<PyBytes>()?.as_bytes())))
    }
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    fn submit_inner(
        &mut self,
        py: Python<'_>,
        client: u32,
        tasks: Vec<NewTask>,
        wanted: Option<Vec<u32>>,
        order: GraphOrder,
        opts: TaskOptions,
        fifo_timeout: f64,
        submitting_task: Option<Key>,
        now: f64,
    ) -> PyResult<Py<PyBytes>> {
        let n = tasks.len() as u32;
        let wanted = wanted.unwrap_or_else(|| (0..n).collect());
        let sub = Submission {
            tasks,
            wanted: wanted.into_iter().map(DepRef::Local).collect(),
            defaults: opts,
            fifo_timeout,
            submitting_task,
            order,
        };
        let inner = &mut self.inner;
        let r = guarded(py, move || inner.update_graph(ClientId(client), sub, now))?;
        let inner = &self.inner;
        self.redefined
            .extend(r.redefined.iter().map(|&t| inner.task(t).key.clone()));
        Ok(ids_to_bytes(py, &r.ids))
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
        })
    }

    /// The id of a client (registered on first use).
    fn client(&mut self, name: &str) -> u32 {
        self.inner.client_id(name).0
    }

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
        let inner = &mut self.inner;
        Ok(guarded(py, move || inner.add_worker(spec, now))?.0)
    }

    #[pyo3(signature = (worker, *, now, expected=false))]
    fn remove_worker(
        &mut self,
        py: Python<'_>,
        worker: u32,
        now: f64,
        expected: bool,
    ) -> PyResult<()> {
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.remove_worker(WorkerId(worker), expected, now)
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
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.worker_status_change(WorkerId(worker), status, now)
        })
    }

    /// Returns the heartbeat interval the worker should keep.
    #[pyo3(signature = (worker, *, now, bandwidth=None, executing=None))]
    fn heartbeat(
        &mut self,
        py: Python<'_>,
        worker: u32,
        now: f64,
        bandwidth: Option<f64>,
        executing: Option<Vec<(u32, f64)>>,
    ) -> PyResult<f64> {
        let executing: Vec<(TaskId, f64)> = executing
            .unwrap_or_default()
            .into_iter()
            .map(|(t, s)| (TaskId(t), s))
            .collect();
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.heartbeat(WorkerId(worker), now, bandwidth, &executing)
        })
    }

    /// Submits a graph: `keys[i]` depends on `deps[i]` (indices into `keys`, or keys
    /// already known to the scheduler). `specs[i]` are opaque run specs (None = data).
    /// Returns the task ids as packed little-endian u32.
    #[pyo3(signature = (client, keys, deps=None, *, now, specs=None, wanted=None, order="compute",
        order_given=None, priority=0, fifo_timeout=0.0, retries=None, workers=None, hosts=None,
        resources=None, allow_other_workers=false, actor=false, annotations=None, submitting_task=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: &Bound<'_, PyAny>,
        deps: Option<&Bound<'_, PyAny>>,
        now: f64,
        specs: Option<&Bound<'_, PyAny>>,
        wanted: Option<Vec<u32>>,
        order: &str,
        order_given: Option<Vec<u64>>,
        priority: i64,
        fifo_timeout: f64,
        retries: Option<u32>,
        workers: Option<Vec<String>>,
        hosts: Option<Vec<String>>,
        resources: Option<Vec<(String, f64)>>,
        allow_other_workers: bool,
        actor: bool,
        annotations: Option<Vec<u8>>,
        submitting_task: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyBytes>> {
        let mut tasks: Vec<NewTask> = Vec::new();
        for k in keys.try_iter()? {
            tasks.push(NewTask::new(key_from_py(&k?)?, Vec::new(), None));
        }
        let n = tasks.len();
        if let Some(deps) = deps {
            for (i, ds) in deps.try_iter()?.enumerate() {
                let t = tasks
                    .get_mut(i)
                    .ok_or_else(|| PyValueError::new_err("more deps entries than keys"))?;
                for d in ds?.try_iter()? {
                    let d = d?;
                    t.deps.push(match d.extract::<u32>() {
                        Ok(j) if !d.is_instance_of::<pyo3::types::PyBool>() => DepRef::Local(j),
                        _ => DepRef::Key(key_from_py(&d)?),
                    });
                }
            }
        }
        match specs {
            Some(specs) => {
                let mut count = 0;
                for (i, s) in specs.try_iter()?.enumerate() {
                    let t = tasks
                        .get_mut(i)
                        .ok_or_else(|| PyValueError::new_err("more specs than keys"))?;
                    t.run_spec = spec_of(&s?)?;
                    count += 1;
                }
                if count != n {
                    return Err(PyValueError::new_err(format!("{count} specs for {n} keys")));
                }
            }
            // Without specs every task is computable with an empty spec.
            None => {
                let empty: RunSpec = Arc::from(&[][..]);
                for t in &mut tasks {
                    t.run_spec = Some(empty.clone());
                }
            }
        }
        let order = graph_order(order, order_given)?;
        let opts = defaults(
            priority,
            retries,
            workers,
            hosts,
            resources,
            allow_other_workers,
            actor,
            annotations,
        );
        let parent = submitting_task.map(key_from_py).transpose()?;
        self.submit_inner(
            py,
            client,
            tasks,
            wanted,
            order,
            opts,
            fifo_timeout,
            parent,
            now,
        )
    }

    /// Submits an `update-graph` payload as it came off the wire (see
    /// `wire::decode_graph`), so the scheduler makes no Python object per task.
    /// Options are `submit`'s. Returns packed u32 task ids.
    #[pyo3(signature = (client, payload, n, keys_bytes, *, now, wanted=None, order="compute",
        priority=0, fifo_timeout=0.0, retries=None, workers=None, hosts=None, resources=None,
        allow_other_workers=false, task_options=None, data_producers=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit_wire(
        &mut self,
        py: Python<'_>,
        client: u32,
        payload: &[u8],
        n: usize,
        keys_bytes: usize,
        now: f64,
        wanted: Option<Vec<u32>>,
        order: &str,
        priority: i64,
        fifo_timeout: f64,
        retries: Option<u32>,
        workers: Option<Vec<String>>,
        hosts: Option<Vec<String>>,
        resources: Option<Vec<(String, f64)>>,
        allow_other_workers: bool,
        task_options: Option<&Bound<'_, PyAny>>,
        data_producers: Option<Vec<u32>>,
    ) -> PyResult<Py<PyBytes>> {
        let mut tasks = crate::wire::decode_graph(payload, n, keys_bytes)?;
        annotate(&mut tasks, task_options, data_producers)?;
        let opts = defaults(
            priority,
            retries,
            workers,
            hosts,
            resources,
            allow_other_workers,
            false,
            None,
        );
        let order = graph_order(order, None)?;
        self.submit_inner(
            py,
            client,
            tasks,
            wanted,
            order,
            opts,
            fifo_timeout,
            None,
            now,
        )
    }

    /// Submits a graph with dependencies in CSR form: task i depends on
    /// `dep_indices[dep_offsets[i]..dep_offsets[i+1]]` (packed little-endian u32 buffers).
    #[pyo3(signature = (client, keys, dep_offsets, dep_indices, *, now, order="compute", priority=0,
        fifo_timeout=0.0, wanted=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit_csr(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: &Bound<'_, PyList>,
        dep_offsets: &[u8],
        dep_indices: &[u8],
        now: f64,
        order: &str,
        priority: i64,
        fifo_timeout: f64,
        wanted: Option<Vec<u32>>,
    ) -> PyResult<Py<PyBytes>> {
        let offsets = le_array(dep_offsets, u32::from_le_bytes, "dep_offsets")?;
        let indices = le_array(dep_indices, u32::from_le_bytes, "dep_indices")?;
        if offsets.len() != keys.len() + 1 {
            return Err(PyValueError::new_err(
                "dep_offsets must have len(keys) + 1 entries",
            ));
        }
        let empty: RunSpec = Arc::from(&[][..]);
        let mut tasks = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let (a, b) = (offsets[i] as usize, offsets[i + 1] as usize);
            let ds = indices
                .get(a..b)
                .ok_or_else(|| PyValueError::new_err("dep_offsets out of range"))?
                .iter()
                .map(|&j| DepRef::Local(j))
                .collect();
            tasks.push(NewTask::new(key_from_py(&k)?, ds, Some(empty.clone())));
        }
        let order = graph_order(order, None)?;
        let opts = defaults(priority, None, None, None, None, false, false, None);
        self.submit_inner(
            py,
            client,
            tasks,
            wanted,
            order,
            opts,
            fifo_timeout,
            None,
            now,
        )
    }

    /// `client.map` in one call: `n` independent tasks keyed `"{prefix}-{start + i}"`,
    /// sharing one spec, ordered by index. Returns packed u32 task ids.
    #[pyo3(signature = (client, prefix, n, *, now, start=0, spec=None, priority=0, fifo_timeout=0.1))]
    #[allow(clippy::too_many_arguments)]
    fn submit_map(
        &mut self,
        py: Python<'_>,
        client: u32,
        prefix: &str,
        n: u64,
        now: f64,
        start: u64,
        spec: Option<Vec<u8>>,
        priority: i64,
        fifo_timeout: f64,
    ) -> PyResult<Py<PyBytes>> {
        let spec: RunSpec = Arc::from(spec.unwrap_or_default());
        let prefix = prefix.to_owned();
        let tasks = py.detach(|| {
            let mut buf = String::with_capacity(prefix.len() + 12);
            (start..start + n)
                .map(|i| {
                    buf.clear();
                    buf.push_str(&prefix);
                    buf.push('-');
                    buf.push_str(itoa(i).as_str());
                    NewTask::new(Key::str(&buf), Vec::new(), Some(spec.clone()))
                })
                .collect::<Vec<_>>()
        });
        let opts = defaults(priority, None, None, None, None, false, false, None);
        self.submit_inner(
            py,
            client,
            tasks,
            None,
            GraphOrder::Sequential,
            opts,
            fifo_timeout,
            None,
            now,
        )
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
        let inner = &mut self.inner;
        guarded(py, move || inner.task_finished(WorkerId(worker), f, now)).map(outcome)
    }

    /// Many finished reports as packed little-endian buffers: the reporting worker of
    /// each (u32, or one int for all), u32 task ids, u64 run ids, i64 sizes and optional
    /// f64 compute seconds. Handled in order, as Dask handles a batch; returns the
    /// indices rejected (stale or unknown).
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
        let tasks = le_array(tasks, u32::from_le_bytes, "tasks")?;
        let n = tasks.len();
        let workers = match workers.extract::<u32>() {
            Ok(w) => vec![w; n],
            Err(_) => le_array(
                workers.cast::<PyBytes>()?.as_bytes(),
                u32::from_le_bytes,
                "workers",
            )?,
        };
        let runs = le_array(run_ids, u64::from_le_bytes, "run_ids")?;
        let sizes = le_array(nbytes, i64::from_le_bytes, "nbytes")?;
        let durs = durations
            .map(|d| le_array(d, f64::from_le_bytes, "durations"))
            .transpose()?;
        if workers.len() != n
            || runs.len() != n
            || sizes.len() != n
            || durs.as_ref().is_some_and(|d| d.len() != n)
        {
            return Err(PyValueError::new_err(
                "workers, tasks, run_ids, nbytes and durations must have equal lengths",
            ));
        }
        let inner = &mut self.inner;
        guarded(py, move || {
            let reports = (0..n).map(|i| {
                let d = durs.as_ref().map_or(0.0, |d| d[i]);
                let r = Finished::computed(TaskId(tasks[i]), runs[i], sizes[i], now - d, now);
                (WorkerId(workers[i]), r)
            });
            Ok(inner.tasks_finished(reports, now))
        })
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
            kind: core::ErrorKind::Remote,
            exception: Arc::from(exception.unwrap_or_default()),
            traceback: Arc::from(traceback.unwrap_or_default()),
            exception_text: exception_text.unwrap_or_default(),
            traceback_text: traceback_text.unwrap_or_default(),
        };
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.task_erred(WorkerId(worker), TaskId(task), run_id, e, now)
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
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.long_running(
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
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.reschedule(WorkerId(worker), TaskId(task), now)
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
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.release_worker_data(WorkerId(worker), TaskId(task), now)
        })
        .map(outcome)
    }

    #[pyo3(signature = (worker, tasks, *, now))]
    fn add_keys(&mut self, py: Python<'_>, worker: u32, tasks: Vec<u32>, now: f64) -> PyResult<()> {
        let tasks: Vec<TaskId> = tasks.into_iter().map(TaskId).collect();
        let inner = &mut self.inner;
        guarded(py, move || inner.add_keys(WorkerId(worker), &tasks, now))
    }

    /// `add-replicas` (keys in `encode_keys` form): a worker fetched these; those in
    /// memory count it as a holder, others are sent back as `remove-replicas`, unknown
    /// keys are ignored.
    #[pyo3(signature = (worker, keys, *, now))]
    fn add_replicas(&mut self, py: Python<'_>, worker: u32, keys: &[u8], now: f64) -> PyResult<()> {
        let keys = crate::wire::read_keys(keys)?;
        let inner = &mut self.inner;
        guarded(py, move || inner.add_replicas(WorkerId(worker), &keys, now))
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
        let keys = crate::wire::read_keys(keys)?;
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.drop_replicas(WorkerId(worker), &keys, now)
        })
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
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.steal_response(WorkerId(worker), TaskId(task), state, stimulus, now)
        })
    }

    #[pyo3(signature = (client, keys, *, now))]
    fn client_desires_keys(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        let keys = keys.iter().map(key_from_py).collect::<PyResult<Vec<_>>>()?;
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.client_desires_keys(ClientId(client), &keys, now)
        })
    }

    #[pyo3(signature = (client, keys, *, now))]
    fn client_releases_keys(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        let keys = keys.iter().map(key_from_py).collect::<PyResult<Vec<_>>>()?;
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.client_releases_keys(ClientId(client), &keys, now)
        })
    }

    /// Releases tasks by id (packed little-endian u32).
    #[pyo3(signature = (client, tasks, *, now))]
    fn client_releases_tasks(
        &mut self,
        py: Python<'_>,
        client: u32,
        tasks: &[u8],
        now: f64,
    ) -> PyResult<()> {
        let tasks: Vec<TaskId> = le_array(tasks, u32::from_le_bytes, "tasks")?
            .into_iter()
            .map(TaskId)
            .collect();
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.client_releases_tasks(ClientId(client), &tasks, now)
        })
    }

    #[pyo3(signature = (client, keys, *, now, force=false))]
    fn cancel(
        &mut self,
        py: Python<'_>,
        client: u32,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
        force: bool,
    ) -> PyResult<()> {
        let keys = keys.iter().map(key_from_py).collect::<PyResult<Vec<_>>>()?;
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.cancel_keys(ClientId(client), &keys, force, now)
        })
    }

    #[pyo3(signature = (keys, *, now))]
    fn retry(&mut self, py: Python<'_>, keys: Vec<Bound<'_, PyAny>>, now: f64) -> PyResult<()> {
        let keys = keys.iter().map(key_from_py).collect::<PyResult<Vec<_>>>()?;
        let inner = &mut self.inner;
        guarded(py, move || inner.retry(&keys, now))
    }

    #[pyo3(signature = (client, *, now))]
    fn remove_client(&mut self, py: Python<'_>, client: u32, now: f64) -> PyResult<()> {
        let inner = &mut self.inner;
        guarded(py, move || inner.remove_client(ClientId(client), now))
    }

    #[pyo3(signature = (keys, *, now))]
    fn fire_and_forget(
        &mut self,
        py: Python<'_>,
        keys: Vec<Bound<'_, PyAny>>,
        now: f64,
    ) -> PyResult<()> {
        let keys = keys.iter().map(key_from_py).collect::<PyResult<Vec<_>>>()?;
        let inner = &mut self.inner;
        guarded(py, move || inner.fire_and_forget(&keys, now))
    }

    /// Data placed on workers by a client: `items` = [(key, nbytes)]. Returns task ids.
    #[pyo3(signature = (client, items, workers, *, now))]
    fn scatter(
        &mut self,
        py: Python<'_>,
        client: u32,
        items: Vec<(Bound<'_, PyAny>, i64)>,
        workers: Vec<u32>,
        now: f64,
    ) -> PyResult<Vec<u32>> {
        let items = items
            .iter()
            .map(|(k, n)| Ok((key_from_py(k)?, *n)))
            .collect::<PyResult<Vec<_>>>()?;
        let workers: Vec<WorkerId> = workers.into_iter().map(WorkerId).collect();
        let inner = &mut self.inner;
        let ids = guarded(py, move || {
            inner.scatter(ClientId(client), &items, &workers, now)
        })?;
        Ok(ids.into_iter().map(|t| t.0).collect())
    }

    /// Periodic work: stealing balance, no-worker timeouts, worker TTL.
    #[pyo3(signature = (*, now))]
    fn tick(&mut self, py: Python<'_>, now: f64) -> PyResult<()> {
        let inner = &mut self.inner;
        guarded(py, move || {
            inner.tick(now);
            Ok(())
        })
    }

    /// The commands produced since the last call. Their task ids resolve (`key_of`)
    /// until the next call.
    fn take_commands(&mut self) -> Commands {
        Commands::new(self.inner.take_commands())
    }

    /// The compute-task commands of `cmds` (from the last `take_commands`), grouped by
    /// worker and encoded as wire payloads: {worker: (address table, payload, count)}.
    fn encode_compute<'py>(
        &self,
        py: Python<'py>,
        cmds: &Commands,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (w, batch) in crate::wire::encode_compute(&self.inner, cmds.commands()) {
            let payload = PyBytes::new(py, &batch.payload);
            out.set_item(w.0, (batch.addresses, payload, batch.count))?;
        }
        Ok(out)
    }

    /// The per-task notices of `cmds` as one payload per recipient and op:
    /// `([(worker, op, packed u32 tasks)], [(client, op, encoded keys)])`.
    #[allow(clippy::type_complexity)]
    fn encode_notices<'py>(
        &self,
        py: Python<'py>,
        cmds: &Commands,
    ) -> (
        Vec<(u32, &'static str, Bound<'py, PyBytes>)>,
        Vec<(u32, &'static str, Bound<'py, PyBytes>)>,
    ) {
        let n = crate::wire::encode_notices(&self.inner, cmds.commands());
        let out = |m: std::collections::BTreeMap<(u32, &'static str), Vec<u8>>| {
            m.into_iter()
                .map(|((to, op), b)| (to, op, PyBytes::new(py, &b)))
                .collect()
        };
        (out(n.to_workers), out(n.to_clients))
    }

    // ----- queries ------------------------------------------------------------------

    fn lookup(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        Ok(self.inner.lookup(&key_from_py(key)?).map(|t| t.0))
    }

    fn key_of<'py>(&self, py: Python<'py>, task: u32) -> PyResult<Bound<'py, PyAny>> {
        match self.inner.task_slot(TaskId(task)) {
            Some(ts) => key_to_py(py, &ts.key),
            None => Err(crate::errors::UnknownTaskError::new_err(format!(
                "unknown task id {task}"
            ))),
        }
    }

    /// Who holds these keys (`encode_keys` form), packed for the `who-has` reply:
    /// `(addresses, payload)` where the payload holds, per key in order, a u16 count
    /// then that many u16 indices into `addresses` (unknown keys: count 0).
    fn who_has_wire<'py>(
        &self,
        py: Python<'py>,
        keys: &[u8],
    ) -> PyResult<(Vec<String>, Bound<'py, PyBytes>)> {
        let keys = crate::wire::read_keys(keys)?;
        let mut addresses: Vec<String> = Vec::new();
        let mut index: std::collections::HashMap<u32, u16> = std::collections::HashMap::new();
        let mut out = Vec::with_capacity(keys.len() * 4);
        for k in &keys {
            let holders: Vec<WorkerId> = match self.inner.lookup(k) {
                Some(t) => self.inner.task(t).who_has.iter().collect(),
                None => Vec::new(),
            };
            out.extend_from_slice(&(holders.len() as u16).to_le_bytes());
            for w in holders {
                let i = *index.entry(w.0).or_insert_with(|| {
                    addresses.push(self.inner.worker(w).address.clone());
                    (addresses.len() - 1) as u16
                });
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
        Ok((addresses, PyBytes::new(py, &out)))
    }

    /// Keys of many task ids (packed little-endian u32).
    fn keys_of<'py>(&self, py: Python<'py>, tasks: &[u8]) -> PyResult<Vec<Bound<'py, PyAny>>> {
        le_array(tasks, u32::from_le_bytes, "tasks")?
            .into_iter()
            .map(|t| self.key_of(py, t))
            .collect()
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
        let Some(ts) = self.inner.get_task(TaskId(task)) else {
            return Err(crate::errors::UnknownTaskError::new_err(format!(
                "unknown task id {task}"
            )));
        };
        let s = &self.inner;
        let d = PyDict::new(py);
        d.set_item("key", key_to_py(py, &ts.key)?)?;
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
            ts.processing_on.map(|w| s.worker(w).address.clone()),
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
            .map(|t| key_to_py(py, &s.task(t).key))
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
        if let Some(spec) = &ts.run_spec {
            d.set_item("run_spec", PyBytes::new(py, spec))?;
        }
        Ok(d)
    }

    fn worker_info<'py>(&self, py: Python<'py>, worker: u32) -> PyResult<Bound<'py, PyDict>> {
        let Some(ws) = self.inner.get_worker(WorkerId(worker)) else {
            return Err(crate::errors::UnknownWorkerError::new_err(format!(
                "unknown worker id {worker}"
            )));
        };
        let d = PyDict::new(py);
        d.set_item("address", &ws.address)?;
        d.set_item("name", &ws.name)?;
        d.set_item("host", &ws.host)?;
        d.set_item("nthreads", ws.nthreads)?;
        d.set_item("status", ws.status.name())?;
        d.set_item("processing", ws.processing.len())?;
        d.set_item("long_running", ws.long_running.len())?;
        d.set_item("has_what", ws.has_what.len())?;
        d.set_item("nbytes", ws.nbytes)?;
        d.set_item("bandwidth", ws.bandwidth)?;
        d.set_item(
            "occupancy",
            if ws.status == WorkerStatus::Closed {
                0.0
            } else {
                self.inner.occupancy(WorkerId(worker))
            },
        )?;
        Ok(d)
    }

    /// Addresses → ids of the registered workers, in address order.
    fn workers(&self) -> Vec<(String, u32)> {
        self.inner
            .worker_ids()
            .map(|w| (self.inner.worker(w).address.clone(), w.0))
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

    #[getter]
    fn n_tasks(&self) -> usize {
        self.inner.n_tasks()
    }

    #[getter]
    fn n_queued(&self) -> usize {
        self.inner.n_queued()
    }

    #[getter]
    fn n_unrunnable(&self) -> usize {
        self.inner.n_unrunnable()
    }

    #[getter]
    fn total_nthreads(&self) -> u64 {
        self.inner.total_nthreads()
    }

    /// Task-state counts over all live tasks.
    fn state_counts(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut m = std::collections::BTreeMap::new();
        for t in self.inner.task_ids() {
            *m.entry(self.inner.state_of(t).name()).or_insert(0) += 1;
        }
        m
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

/// Decimal digits of `i` without going through `format!`.
fn itoa(mut i: u64) -> ItoaBuf {
    let mut buf = ItoaBuf {
        bytes: [0; 20],
        start: 20,
    };
    loop {
        buf.start -= 1;
        buf.bytes[buf.start] = b'0' + (i % 10) as u8;
        i /= 10;
        if i == 0 {
            return buf;
        }
    }
}

struct ItoaBuf {
    bytes: [u8; 20],
    start: usize,
}

impl ItoaBuf {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[self.start..]).expect("ascii digits")
    }
}
