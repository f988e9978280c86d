//! The core's knobs from and to Python, under Dask's names (`worker-saturation`, …).
//! Everything about them (names, defaults, kinds, ranges, "inf") is the core's table
//! (`squall_core::SETTINGS`, `Config::set`, `Config::check`); this module only converts values, the same way for all.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use pyo3::IntoPyObjectExt;
use squall_core::{Config, Value};

/// A Python value as the core reads settings; what it cannot be stays `Other`, shown
/// by its repr in the core's error.
fn value_from_py(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let other = || Ok(Value::Other(v.repr()?.to_string()));
    Ok(if v.is_none() {
        Value::Null
    } else if let Ok(b) = v.cast::<PyBool>() {
        Value::Flag(b.is_true())
    } else if v.is_instance_of::<PyInt>() {
        match v.extract() {
            Ok(i) => Value::Int(i),
            Err(_) => return other(),
        }
    } else if v.is_instance_of::<PyFloat>() {
        Value::Number(v.extract()?)
    } else if let Ok(s) = v.cast::<PyString>() {
        Value::Text(s.to_str()?.to_owned())
    } else if let Ok(d) = v.cast::<PyDict>() {
        let mut entries = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let Ok(k) = k.extract::<String>() else {
                return other();
            };
            entries.push((k, value_from_py(&v)?));
        }
        Value::Map(entries)
    } else {
        return other();
    })
}

fn value_to_py(py: Python<'_>, v: Value) -> PyResult<Py<PyAny>> {
    match v {
        Value::Null => Ok(py.None()),
        Value::Flag(b) => b.into_py_any(py),
        Value::Int(i) => i.into_py_any(py),
        Value::Number(x) => x.into_py_any(py),
        Value::Text(s) | Value::Other(s) => s.into_py_any(py),
        Value::Map(entries) => {
            let d = PyDict::new(py);
            for (k, v) in entries {
                d.set_item(k, value_to_py(py, v)?)?;
            }
            d.into_py_any(py)
        }
    }
}

/// Builds a checked core config from Dask-style names (`_` or `-`); durations in
/// seconds, sizes in bytes (the Python layer parses "500ms"/"1kiB" first).
pub fn config_from_py(d: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    let mut c = Config::default();
    for (k, v) in d.into_iter().flat_map(|d| d.iter()) {
        let name = k.extract::<String>()?.replace('_', "-");
        c.set(&name, value_from_py(&v)?)
            .map_err(PyValueError::new_err)?;
    }
    c.check().map_err(PyValueError::new_err)?;
    Ok(c)
}

/// The complete config a scheduler made with `config` would run with, under Dask's
/// names; raises ValueError naming the knob if `config` would not make one.
#[pyfunction]
#[pyo3(signature = (config))]
pub fn check_config<'py>(
    py: Python<'py>,
    config: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (s, v) in config_from_py(Some(config))?.values() {
        d.set_item(s.name, value_to_py(py, v)?)?;
    }
    Ok(d)
}

/// A row of `core_settings`: (name, kind, nullable, default).
type SettingRow = (&'static str, &'static str, bool, Py<PyAny>);

/// The core's settings table, in its order.
#[pyfunction]
pub fn core_settings(py: Python<'_>) -> PyResult<Vec<SettingRow>> {
    Config::default()
        .values()
        .into_iter()
        .map(|(s, v)| Ok((s.name, s.kind.name(), s.nullable, value_to_py(py, v)?)))
        .collect()
}
