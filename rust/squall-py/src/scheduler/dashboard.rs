//! Read-only figures for the dashboard, `/metrics` and the JSON routes
//! (docs/dashboard.md): one call per kind, each O(prefixes + groups + workers), none a
//! pass over the tasks.

use super::Scheduler;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use squall_core::{TaskState, WorkerLoad};

/// `{state name: count}` over all 8 states of a counts array.
fn states_dict<'py>(py: Python<'py>, counts: &[u64; 8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for s in TaskState::ALL {
        d.set_item(s.name(), counts[s as usize])?;
    }
    Ok(d)
}

/// The load fields of a worker's heartbeat, 0 where missing: a dict by name or a
/// tuple in the order of [`WorkerLoad`]'s fields.
pub(super) fn load_from_py(load: &Bound<'_, PyAny>) -> PyResult<WorkerLoad> {
    if let Ok(d) = load.cast::<PyDict>() {
        let f = |k: &str| -> PyResult<f64> {
            d.get_item(k)?
                .filter(|v| !v.is_none())
                .map_or(Ok(0.0), |v| v.extract::<f64>())
        };
        let n = |k: &str| -> PyResult<u64> { Ok(f(k)?.max(0.0) as u64) };
        return Ok(WorkerLoad {
            cpu: f("cpu")?,
            read_bps: f("read_bps")?,
            write_bps: f("write_bps")?,
            executing: n("executing")?,
            ready: n("ready")?,
            in_flight: n("in_flight")?,
            in_memory: n("in_memory")?,
        });
    }
    let (cpu, read_bps, write_bps, executing, ready, in_flight, in_memory) = load
        .extract::<(f64, f64, f64, u64, u64, u64, u64)>()
        .map_err(|e| PyValueError::new_err(format!("a worker load is a dict or a 7-tuple: {e}")))?;
    Ok(WorkerLoad {
        cpu,
        read_bps,
        write_bps,
        executing,
        ready,
        in_flight,
        in_memory,
    })
}

pub(super) fn load_dict<'py>(py: Python<'py>, l: &WorkerLoad) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("cpu", l.cpu)?;
    d.set_item("read_bps", l.read_bps)?;
    d.set_item("write_bps", l.write_bps)?;
    d.set_item("executing", l.executing)?;
    d.set_item("ready", l.ready)?;
    d.set_item("in_flight", l.in_flight)?;
    d.set_item("in_memory", l.in_memory)?;
    Ok(d)
}

/// A group still counts as active while any of its tasks waits or runs.
fn is_active(counts: &[u64; 8]) -> bool {
    [
        TaskState::Waiting,
        TaskState::Queued,
        TaskState::NoWorker,
        TaskState::Processing,
    ]
    .iter()
    .any(|&s| counts[s as usize] > 0)
}

#[pymethods]
impl Scheduler {
    /// Cluster-wide totals (monotonic), live task counts per state and workers per
    /// state of business.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner;
        let t = s.totals();
        let d = PyDict::new(py);
        let states = states_dict(py, &s.counters().state_counts)?;
        states.del_item(TaskState::Forgotten.name())?;
        d.set_item("states", states)?;
        d.set_item("tasks_forgotten", t.tasks_forgotten)?;
        d.set_item("tasks_computed", t.tasks_computed)?;
        d.set_item("tasks_erred", t.tasks_erred)?;
        d.set_item("tasks_suspicious", t.tasks_suspicious)?;
        d.set_item("transitions", t.transitions)?;
        d.set_item("workers_added", t.workers_added)?;
        d.set_item("workers_removed", t.workers_removed)?;
        d.set_item("compute_seconds", t.compute_seconds)?;
        d.set_item("transfer_seconds", t.transfer_seconds)?;
        d.set_item("task_groups", s.task_groups().count())?;
        let w = s.worker_states();
        let workers = PyDict::new(py);
        workers.set_item("idle", w.idle)?;
        workers.set_item("partially_saturated", w.partially_saturated)?;
        workers.set_item("saturated", w.saturated)?;
        workers.set_item("paused", w.paused)?;
        workers.set_item("retiring", w.retiring)?;
        d.set_item("workers", workers)?;
        Ok(d)
    }

    /// Every prefix ever seen: live counts per state (`forgotten`: ever), entries into
    /// each state ever (`totals`), durations, suspicious marks and result bytes.
    fn prefix_states<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let s = &self.inner;
        let mut nbytes = vec![0i64; s.task_prefixes().count()];
        for (_, g) in s.task_groups() {
            nbytes[g.prefix.idx()] += g.nbytes_total;
        }
        let out = PyList::empty(py);
        for (p, tp) in s.task_prefixes() {
            let d = PyDict::new(py);
            d.set_item("name", &tp.name)?;
            d.set_item("states", states_dict(py, &tp.state_counts)?)?;
            d.set_item("totals", states_dict(py, &tp.state_totals)?)?;
            d.set_item(
                "duration_average",
                (tp.duration_average >= 0.0).then_some(tp.duration_average),
            )?;
            d.set_item("compute_total", tp.compute_total)?;
            d.set_item("transfer_total", tp.seconds_of("transfer"))?;
            d.set_item("suspicious", tp.suspicious)?;
            d.set_item("nbytes_total", nbytes[p.idx()])?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// The live groups, active ones first, then newest first; at most `limit`.
    #[pyo3(signature = (limit=None))]
    fn group_states<'py>(
        &self,
        py: Python<'py>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let s = &self.inner;
        let mut groups: Vec<_> = s.task_groups().map(|(_, g)| g).collect();
        groups.sort_unstable_by_key(|g| (!is_active(&g.state_counts), std::cmp::Reverse(g.uid)));
        groups.truncate(limit.unwrap_or(usize::MAX));
        let out = PyList::empty(py);
        for g in groups {
            let d = PyDict::new(py);
            d.set_item("name", &g.name)?;
            d.set_item("prefix", &s.prefix(g.prefix).name)?;
            d.set_item("len", g.len)?;
            d.set_item("states", states_dict(py, &g.state_counts)?)?;
            d.set_item("nbytes_total", g.nbytes_total)?;
            d.set_item("duration", g.duration)?;
            d.set_item("typename", g.typename.as_deref())?;
            let deps: Vec<&str> = g
                .dependencies
                .iter()
                .filter_map(|&r| s.group_by_ref(r).map(|x| x.name.as_str()))
                .collect();
            d.set_item("dependencies", deps)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// `worker_info` of every registered worker, in address order, in one call.
    fn workers_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for w in self.inner.worker_ids() {
            out.append(self.worker_dict(py, w, self.inner.worker(w))?)?;
        }
        Ok(out)
    }
}
