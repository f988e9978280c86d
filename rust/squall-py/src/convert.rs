//! Conversions between Python objects and core values.

use crate::errors::wire_error;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyString, PyTuple};
use squall_core::key::KeyEncoder;
use squall_core::{Config, Key, KeyValue};
use squall_wire::packed::Packed;

/// Encodes a Dask key (str, bytes, int, float, or a tuple of those) without building
/// an intermediate tree.
pub fn key_from_py(ob: &Bound<'_, PyAny>) -> PyResult<Key> {
    let mut e = KeyEncoder::new();
    encode(ob, &mut e, 0)?;
    Ok(e.finish())
}

fn encode(ob: &Bound<'_, PyAny>, e: &mut KeyEncoder, depth: usize) -> PyResult<()> {
    if let Ok(s) = ob.cast::<PyString>() {
        e.str(s.to_str()?);
    } else if let Ok(t) = ob.cast::<PyTuple>() {
        if depth > 16 {
            return Err(PyValueError::new_err("key tuples nest too deeply"));
        }
        e.tuple(t.len());
        for item in t.iter() {
            encode(&item, e, depth + 1)?;
        }
    } else if ob.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "invalid key {ob}: bool is not a key type"
        )));
    } else if let Ok(i) = ob.cast::<PyInt>() {
        e.int(i.extract::<i64>()?);
    } else if let Ok(f) = ob.cast::<PyFloat>() {
        e.float(f.value());
    } else if let Ok(b) = ob.cast::<PyBytes>() {
        e.bytes(b.as_bytes());
    } else if let Some(i) = index_of(ob) {
        // numpy integers (dask's vindex puts them in keys): the int they equal and
        // hash as, as distributed accepts them.
        e.int(i?);
    } else {
        return Err(PyTypeError::new_err(format!(
            "invalid key {}: keys are str, bytes, int, float or tuples of those",
            ob.repr()?
        )));
    }
    Ok(())
}

/// `operator.index(ob)` for integer-like objects that are not `int` (None otherwise).
fn index_of(ob: &Bound<'_, PyAny>) -> Option<PyResult<i64>> {
    if !ob
        .hasattr(pyo3::intern!(ob.py(), "__index__"))
        .unwrap_or(false)
    {
        return None;
    }
    let i = ob.call_method0(pyo3::intern!(ob.py(), "__index__")).ok()?;
    Some(i.extract::<i64>())
}

pub fn key_to_py<'py>(py: Python<'py>, key: &Key) -> PyResult<Bound<'py, PyAny>> {
    value_to_py(py, &key.decode())
}

fn value_to_py<'py>(py: Python<'py>, v: &KeyValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        KeyValue::Str(s) => PyString::new(py, s).into_any(),
        KeyValue::Bytes(b) => PyBytes::new(py, b).into_any(),
        KeyValue::Int(i) => i.into_pyobject(py)?.into_any(),
        KeyValue::Float(f) => PyFloat::new(py, *f).into_any(),
        KeyValue::Tuple(items) => {
            let items: Vec<Bound<'py, PyAny>> = items
                .iter()
                .map(|x| value_to_py(py, x))
                .collect::<PyResult<_>>()?;
            PyTuple::new(py, items)?.into_any()
        }
    })
}

fn seconds(v: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    v.extract::<f64>().map_err(|_| {
        PyValueError::new_err(format!("config {name:?}: expected seconds as a number"))
    })
}

/// Seconds, or None to disable.
fn optional_seconds(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<f64>> {
    (!v.is_none()).then(|| seconds(v, name)).transpose()
}

/// Builds a core config from Dask-style names (`worker-saturation`, …); durations in
/// seconds, sizes in bytes (the Python layer parses "500ms"/"1kiB" first).
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
                };
                if c.worker_saturation.is_nan() || c.worker_saturation <= 0.0 {
                    return Err(PyValueError::new_err(
                        "worker-saturation must be > 0 or 'inf'",
                    ));
                }
            }
            "worker-saturation-duration" => {
                c.worker_saturation_duration = seconds(&v, &name)?;
                if c.worker_saturation_duration.is_nan() || c.worker_saturation_duration < 0.0 {
                    return Err(PyValueError::new_err(
                        "worker-saturation-duration must be >= 0 seconds",
                    ));
                }
            }
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
    Ok(c)
}

/// A packed little-endian array from a bytes-like buffer (a ragged one is a ValueError).
pub fn packed<T: Packed>(b: &[u8], what: &'static str) -> PyResult<Vec<T>> {
    squall_wire::packed::decode(b, what).map_err(wire_error)
}
