//! The core's knobs from and to Python, under Dask's names (`worker-saturation`, …).
//! `squall.yaml` holds the defaults users see; `default_config` lets a test check them
//! against `Config::default`, and `Config::check` is the one place their ranges live.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use squall_core::Config;

fn seconds(v: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    v.extract::<f64>().map_err(|_| {
        PyValueError::new_err(format!("config {name:?}: expected seconds as a number"))
    })
}

/// Seconds, or None to disable.
fn optional_seconds(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<f64>> {
    (!v.is_none()).then(|| seconds(v, name)).transpose()
}

/// Builds a checked core config from Dask-style names; durations in seconds, sizes in
/// bytes (the Python layer parses "500ms"/"1kiB" first).
pub fn config_from_py(d: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    let mut c = Config::default();
    let Some(d) = d else { return Ok(c) };
    for (k, v) in d.iter() {
        let name: String = k.extract()?;
        match name.replace('_', "-").as_str() {
            "worker-saturation" => {
                c.worker_saturation = match v.extract::<String>() {
                    Ok(s) if s == "inf" => f64::INFINITY,
                    _ => v.extract::<f64>()?,
                }
            }
            "worker-saturation-duration" => c.worker_saturation_duration = seconds(&v, &name)?,
            "rootish-taskgroup" => c.rootish_taskgroup = v.extract()?,
            "rootish-taskgroup-dependencies" => c.rootish_taskgroup_dependencies = v.extract()?,
            "work-stealing" => c.work_stealing = v.extract()?,
            "work-stealing-interval" => c.work_stealing_interval = seconds(&v, &name)?,
            "allowed-failures" => c.allowed_failures = v.extract()?,
            "unknown-task-duration" => c.unknown_task_duration = seconds(&v, &name)?,
            "default-task-durations" => {
                for (p, s) in v.cast::<PyDict>()?.iter() {
                    c.default_task_durations
                        .insert(p.extract()?, seconds(&s, &name)?);
                }
            }
            "default-data-size" => c.default_data_size = v.extract()?,
            "bandwidth" => c.bandwidth = v.extract()?,
            "worker-ttl" => c.worker_ttl = optional_seconds(&v, &name)?,
            "no-workers-timeout" => c.no_workers_timeout = optional_seconds(&v, &name)?,
            "transition-log-length" => c.transition_log_length = v.extract()?,
            "erred-tasks-max-history" => c.erred_tasks_max_history = v.extract()?,
            "memory-terminate" => c.memory_terminate = v.extract()?,
            "validate" => c.validate = v.extract()?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown scheduler config option {other:?}"
                )))
            }
        }
    }
    c.check().map_err(PyValueError::new_err)?;
    Ok(c)
}

/// Raises ValueError naming the knob if `config` would not make a scheduler.
#[pyfunction]
#[pyo3(signature = (config))]
pub fn check_config(config: &Bound<'_, PyDict>) -> PyResult<()> {
    config_from_py(Some(config)).map(drop)
}

/// The core's defaults, under the names `squall.yaml` uses.
#[pyfunction]
pub fn default_config(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let c = Config::default();
    let d = PyDict::new(py);
    d.set_item("worker-saturation", c.worker_saturation)?;
    d.set_item("worker-saturation-duration", c.worker_saturation_duration)?;
    d.set_item("rootish-taskgroup", c.rootish_taskgroup)?;
    d.set_item(
        "rootish-taskgroup-dependencies",
        c.rootish_taskgroup_dependencies,
    )?;
    d.set_item("work-stealing", c.work_stealing)?;
    d.set_item("work-stealing-interval", c.work_stealing_interval)?;
    d.set_item("allowed-failures", c.allowed_failures)?;
    d.set_item("unknown-task-duration", c.unknown_task_duration)?;
    d.set_item("default-task-durations", c.default_task_durations)?;
    d.set_item("default-data-size", c.default_data_size)?;
    d.set_item("bandwidth", c.bandwidth)?;
    d.set_item("worker-ttl", c.worker_ttl)?;
    d.set_item("no-workers-timeout", c.no_workers_timeout)?;
    d.set_item("transition-log-length", c.transition_log_length)?;
    d.set_item("erred-tasks-max-history", c.erred_tasks_max_history)?;
    d.set_item("memory-terminate", c.memory_terminate)?;
    d.set_item("validate", c.validate)?;
    Ok(d)
}
