//! `simulate`: runs squall-sim (the real core against simulated workers) and returns
//! its report as plain Python data.

use crate::config::config_from_py;
use crate::convert::key_from_py;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use squall_sim::{
    graphs, Cost, RunOutcome, SimGraph, SimOptions, SimReport, SimSubmission, SimWorker, Simulation,
};

/// CPU time of the calling thread: the simulation runs on it alone.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A built-in workload of about `n` tasks.
fn workload(name: &str, n: usize) -> PyResult<SimGraph> {
    let block = Cost::new(0.1, 10_000_000);
    let small = Cost::new(0.01, 1_000);
    Ok(match name {
        "map" => graphs::map("inc", n, Cost::new(0.01, 100)),
        "tree" => graphs::tree_reduction("sum", n.div_ceil(2).max(1), block, small),
        "wide" => graphs::wide_then_reduce("wide", n.div_ceil(3).max(1), block, block, small),
        "array" => {
            let side = ((n as f64 / 3.0).sqrt().ceil() as usize).max(1);
            graphs::x_plus_xt_sum("x", side, block, 0.01)
        }
        other => return Err(PyValueError::new_err(format!("unknown workload {other:?}"))),
    })
}

/// A graph given as parallel lists: key, dependency indices, seconds, result bytes.
fn graph_from_lists(
    keys: &Bound<'_, PyList>,
    deps: Vec<Vec<usize>>,
    durations: Vec<f64>,
    nbytes: Vec<u64>,
) -> PyResult<SimGraph> {
    let n = keys.len();
    if deps.len() != n || durations.len() != n || nbytes.len() != n {
        return Err(PyValueError::new_err(
            "keys, deps, durations and nbytes must have equal lengths",
        ));
    }
    let mut g = SimGraph::new();
    for (i, k) in keys.iter().enumerate() {
        if let Some(&bad) = deps[i].iter().find(|&&d| d >= i) {
            return Err(PyValueError::new_err(format!(
                "task {i} depends on {bad}: dependencies must come earlier in the lists"
            )));
        }
        g.add(key_from_py(&k)?, &deps[i], durations[i], nbytes[i]);
    }
    Ok(g)
}

fn report_to_py<'py>(
    py: Python<'py>,
    r: &SimReport,
    names: &[String],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("completed", r.completed)?;
    d.set_item("makespan", r.makespan)?;
    d.set_item("bytes_transferred", r.bytes_transferred)?;
    d.set_item("n_transfers", r.n_transfers)?;
    d.set_item("n_steals", r.n_steals)?;
    d.set_item("n_steal_requests", r.n_steal_requests)?;
    d.set_item("n_reexecuted", r.n_reexecuted)?;
    let workers = PyList::empty(py);
    for w in &r.workers {
        let wd = PyDict::new(py);
        wd.set_item("name", &w.name)?;
        wd.set_item("peak_memory", w.peak_memory)?;
        wd.set_item("tasks_executed", w.tasks_executed)?;
        workers.append(wd)?;
    }
    d.set_item("workers", workers)?;
    let timeline: Vec<(&str, &str, f64, f64, &str)> = r
        .timeline
        .iter()
        .map(|e| {
            let outcome = match e.outcome {
                RunOutcome::Finished => "finished",
                RunOutcome::Discarded => "discarded",
                RunOutcome::Lost => "lost",
            };
            (
                e.key.as_str(),
                names[e.worker].as_str(),
                e.start,
                e.end,
                outcome,
            )
        })
        .collect();
    d.set_item("timeline", timeline)?;
    d.set_item("completion", r.completion.clone())?;
    d.set_item("failed", &r.failed)?;
    Ok(d)
}

/// Simulates `workers` × `threads` running a workload (a built-in name, or the graph
/// given by `keys`/`deps`/`durations`/`nbytes`). `deaths` = [(worker index, time)].
/// With `timing`, the report also has `seconds`: the run's wall and CPU time and the
/// wall time spent in the core (not deterministic, hence optional).
#[pyfunction]
#[pyo3(signature = (*, workload_name=None, n=1000, keys=None, deps=None, durations=None, nbytes=None,
    workers=4, threads=2, config=None, deaths=None, bandwidth=100e6, latency=0.001, timing=false))]
#[allow(clippy::too_many_arguments)]
pub fn simulate<'py>(
    py: Python<'py>,
    workload_name: Option<&str>,
    n: usize,
    keys: Option<&Bound<'py, PyList>>,
    deps: Option<Vec<Vec<usize>>>,
    durations: Option<Vec<f64>>,
    nbytes: Option<Vec<u64>>,
    workers: usize,
    threads: u32,
    config: Option<&Bound<'py, PyDict>>,
    deaths: Option<Vec<(usize, f64)>>,
    bandwidth: f64,
    latency: f64,
    timing: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let graph = match (workload_name, keys) {
        (Some(w), None) => workload(w, n)?,
        (None, Some(keys)) => {
            let n = keys.len();
            graph_from_lists(
                keys,
                deps.unwrap_or_else(|| vec![Vec::new(); n]),
                durations.unwrap_or_else(|| vec![0.01; n]),
                nbytes.unwrap_or_else(|| vec![1000; n]),
            )?
        }
        _ => return Err(PyValueError::new_err("give either workload_name or keys")),
    };
    if workers == 0 || threads == 0 {
        return Err(PyValueError::new_err(
            "need at least one worker with one thread",
        ));
    }
    let mut ws = SimWorker::many(workers, threads);
    for (i, t) in deaths.unwrap_or_default() {
        let w = ws
            .get_mut(i)
            .ok_or_else(|| PyValueError::new_err(format!("no worker {i} to kill")))?;
        w.die = Some(t);
    }
    let names: Vec<String> = ws.iter().map(|w| w.name.clone()).collect();
    let config = config_from_py(config)?;
    let options = SimOptions {
        bandwidth,
        transfer_latency: latency,
        ..SimOptions::default()
    };
    let report = py.detach(move || {
        let mut sim = Simulation::new(config, ws).with_options(options);
        sim.submit(SimSubmission::compute(graph, 0.0)).map(|()| {
            let cpu = thread_cpu_seconds();
            let report = sim.run();
            let cpu = thread_cpu_seconds() - cpu;
            (report, sim.run_seconds(), cpu, sim.core_seconds())
        })
    });
    let (report, run_s, run_cpu_s, core_s) = report.map_err(PyValueError::new_err)?;
    let d = report_to_py(py, &report, &names)?;
    if timing {
        let seconds = PyDict::new(py);
        seconds.set_item("run", run_s)?;
        seconds.set_item("run_cpu", run_cpu_s)?;
        seconds.set_item("scheduler", core_s)?;
        d.set_item("seconds", seconds)?;
    }
    Ok(d)
}
