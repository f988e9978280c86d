//! Graph submission: from Python lists (`submit`) and an `update-graph` payload as it
//! came off the wire (`submit_wire`).

use super::Scheduler;
use crate::convert::key_from_py;
use crate::errors::wire_error;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict};
use squall_core::blobs::Blob;
use squall_core::{
    ClientId, DepRef, GraphOrder, Key, NewTask, Restrictions, RunSpec, Submission, TaskOptions,
};
use squall_wire::graph::decode_update_graph;
use std::sync::Arc;

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
            "actor" => o.actor = value.extract()?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown task option {other:?} (expected priority, retries, workers, \
                     hosts, resources, allow_other_workers or actor)"
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
        Ok(Some(ob.cast::<PyBytes>()?.as_bytes().into()))
    }
}

/// A submission of `tasks`; `wanted` (task indices) defaults to all of them.
fn submission(
    tasks: Vec<NewTask>,
    blobs: Vec<Blob>,
    wanted: Option<Vec<u32>>,
    order: GraphOrder,
    defaults: TaskOptions,
    fifo_timeout: f64,
) -> Submission {
    let wanted = match wanted {
        Some(w) => w.into_iter().map(DepRef::Local).collect(),
        None => (0..tasks.len() as u32).map(DepRef::Local).collect(),
    };
    Submission {
        tasks,
        wanted,
        defaults,
        fifo_timeout,
        submitting_task: None,
        order,
        blobs,
    }
}

impl Scheduler {
    /// Submits on the core (GIL released); returns the task ids as packed u32.
    fn submit_graph(
        &mut self,
        py: Python<'_>,
        client: u32,
        sub: Submission,
        now: f64,
    ) -> PyResult<Py<PyBytes>> {
        let r = self.core(py, move |s| s.update_graph(ClientId(client), sub, now))?;
        let inner = &self.inner;
        self.redefined
            .extend(r.redefined.iter().map(|&t| inner.task(t).key().to_owned()));
        let ids = squall_wire::packed::encode(r.ids.iter().map(|t| t.0));
        Ok(PyBytes::new(py, &ids).unbind())
    }
}

#[pymethods]
impl Scheduler {
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
        let keys: Vec<Key> = keys
            .try_iter()?
            .map(|k| key_from_py(&k?))
            .collect::<PyResult<_>>()?;
        let n = keys.len();
        let specs: Vec<Option<RunSpec>> = match specs {
            Some(specs) => {
                let specs: Vec<Option<RunSpec>> = specs
                    .try_iter()?
                    .map(|s| spec_of(&s?))
                    .collect::<PyResult<_>>()?;
                match specs.len() {
                    count if count == n => specs,
                    count if count > n => {
                        return Err(PyValueError::new_err("more specs than keys"))
                    }
                    count => {
                        return Err(PyValueError::new_err(format!("{count} specs for {n} keys")))
                    }
                }
            }
            // Without specs every task is computable with an empty spec.
            None => vec![Some(RunSpec::default()); n],
        };
        let mut tasks: Vec<NewTask> = keys
            .into_iter()
            .zip(specs)
            .map(|(k, spec)| NewTask::new(k, Vec::new(), spec))
            .collect();
        if let Some(deps) = deps {
            for (i, ds) in deps.try_iter()?.enumerate() {
                let t = tasks
                    .get_mut(i)
                    .ok_or_else(|| PyValueError::new_err("more deps entries than keys"))?;
                for d in ds?.try_iter()? {
                    let d = d?;
                    t.deps.push(match d.extract::<u32>() {
                        Ok(j) if !d.is_instance_of::<PyBool>() => DepRef::Local(j),
                        _ => DepRef::Key(key_from_py(&d)?),
                    });
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
        let sub = Submission {
            submitting_task: submitting_task.map(key_from_py).transpose()?,
            ..submission(tasks, Vec::new(), wanted, order, opts, fifo_timeout)
        };
        self.submit_graph(py, client, sub, now)
    }

    /// Submits an `update-graph` payload as it came off the wire (see
    /// squall-wire's `graph`), so the scheduler makes no Python object per task.
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
        // The payload is an immutable `bytes` the call holds: decoded with the GIL released.
        let decoded = py.detach(|| decode_update_graph(payload, n, keys_bytes));
        let (mut tasks, blobs) = decoded.map_err(wire_error)?;
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
        let sub = submission(tasks, blobs, wanted, order, opts, fifo_timeout);
        self.submit_graph(py, client, sub, now)
    }
}
