//! Calling a task: call specs run directly (their functions from the per-process cache,
//! `crate::specs`), dask's nodes through `crate::nodes::call_node`; failures packed for
//! the report.

use super::blobs::{Parts, Spec};
use super::{key_of, WorkerCore};
use crate::convert::key_to_py;
use crate::errors::wire_error;
use crate::nodes::call_node;
use crate::specs::load_function;
use pyo3::exceptions::{PyKeyError, PyRuntimeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString, PyTuple};
use squall_core::Key;
use squall_wire::plain_pickle::{read_call, Arg, Plain};
use squall_wire::spec::{split_call, CallSpec};
type Job = squall_worker::Job<Spec>;

impl WorkerCore {
    /// Calls a job; Ok((value, nbytes)) or the packed error.
    pub(super) fn call(
        &self,
        py: Python<'_>,
        job: &Job,
        deps: &[(Key, Py<PyAny>)],
    ) -> Result<(Py<PyAny>, i64), Py<PyAny>> {
        // A Rust panic inside the task (a PyO3-based library's, re-raised by PyO3 when
        // the task's exception is fetched) is the task's failure, not the worker's.
        let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let value = self.call_spec(py, &job.spec, deps)?;
            let n = match scalar_size(value.bind(py)) {
                Some(n) => n,
                None => self
                    .hooks
                    .sizeof
                    .call1(py, (value.bind(py),))?
                    .extract(py)?,
            };
            Ok((value, n))
        }));
        let failed: PyErr = match called {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(e)) => e,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                PyRuntimeError::new_err(format!("the task panicked in Rust code: {msg}"))
            }
        };
        Err(self.pack_error(py, failed))
    }

    /// `(exception text, traceback text, pickled exception, pickled traceback)` for an
    /// error; if packing it fails too, a plain RuntimeError saying so is packed.
    fn pack_error(&self, py: Python<'_>, e: PyErr) -> Py<PyAny> {
        let name = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        self.hooks
            .pack_error
            .call1(py, (e.into_value(py),))
            .or_else(|_| {
                let plain = PyRuntimeError::new_err(format!(
                    "the task raised {name}, which could not be reported"
                ));
                self.hooks.pack_error.call1(py, (plain.into_value(py),))
            })
            .unwrap_or_else(|e| {
                let text = format!("the task failed and its error could not be reported: {e}");
                (text, "", PyBytes::new(py, b""), PyBytes::new(py, b""))
                    .into_pyobject(py)
                    .map(|t| t.into_any().unbind())
                    .unwrap_or_else(|_| py.None())
            })
    }

    fn call_spec(
        &self,
        py: Python<'_>,
        spec: &Spec,
        deps: &[(Key, Py<PyAny>)],
    ) -> PyResult<Py<PyAny>> {
        let data = || -> PyResult<Bound<'_, PyDict>> {
            let d = PyDict::new(py);
            for (k, v) in deps {
                d.set_item(key_to_py(py, k)?, v.bind(py))?;
            }
            Ok(d)
        };
        let whole;
        let (func, call) = match spec.parts(py)? {
            Parts::Call(func, call) => (func, call),
            Parts::Whole(spec) => {
                whole = spec;
                let Some(CallSpec { function, call }) = split_call(&whole).map_err(wire_error)?
                else {
                    // A dask task-spec node (docs/protocol.md#run-specs).
                    let node = self
                        .hooks
                        .loads
                        .bind(py)
                        .call1((PyBytes::new(py, &whole),))?;
                    return Ok(call_node(&node, data()?.as_any())?.unbind());
                };
                (load_function(py, function)?, call)
            }
        };
        if deps.is_empty() {
            if let Some(args) = plain_args(py, call)? {
                return Ok(func.bind(py).call1(args)?.unbind());
            }
        }
        let call = self.hooks.loads.call1(py, (PyBytes::new(py, call),))?;
        let mut call = call.bind(py).clone();
        if !deps.is_empty() {
            let (args, kwargs) = call.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            call = self
                .hooks
                .fill_call
                .bind(py)
                .call1((args, kwargs, data()?))?;
        }
        let (args, kwargs) = call.extract::<(Bound<'_, PyTuple>, Bound<'_, PyDict>)>()?;
        let kwargs = if kwargs.is_empty() {
            None
        } else {
            Some(&kwargs)
        };
        Ok(func.bind(py).call(args, kwargs)?.unbind())
    }

    /// Replaces the spill handles at `at` in `deps` by the values they load (one Python
    /// call per spilled value only); a failure to load is the task's (packed).
    pub(super) fn load_spilled(
        &self,
        py: Python<'_>,
        deps: &mut [(Key, Py<PyAny>)],
        at: &[usize],
    ) -> Result<(), Py<PyAny>> {
        for &i in at {
            let loaded = deps[i].1.call_method0(py, "load");
            deps[i].1 = loaded.map_err(|e| self.pack_error(py, e))?;
        }
        Ok(())
    }

    /// The error of a job whose dependency's value went away before it ran.
    pub(super) fn lost_dependency(
        &self,
        py: Python<'_>,
        dep: &Key,
        job: &Job,
    ) -> PyResult<Py<PyAny>> {
        let key = key_of(&self.lock(py).m, job.key);
        let msg = format!(
            "dependency {} of {} is no longer held",
            key_to_py(py, dep)?.repr()?,
            key_to_py(py, &key)?.repr()?
        );
        Ok(self.pack_error(py, PyKeyError::new_err(msg)))
    }
}

/// The arguments of a call of plain values as the client writes it (a `map` item's:
/// squall-wire's `plain_pickle`), made directly: what `pickle.loads` would give, without
/// an unpickler per task. None for any other call.
fn plain_args<'py>(py: Python<'py>, call: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(4);
    let plain = read_call(call, |arg| {
        let item = match arg {
            Arg::Same(j) => items[j].clone(),
            Arg::Value(Plain::None) => py.None().into_bound(py),
            Arg::Value(Plain::Bool(b)) => PyBool::new(py, b).to_owned().into_any(),
            Arg::Value(Plain::Int(i)) => PyInt::new(py, i).into_any(),
            Arg::Value(Plain::Float(f)) => PyFloat::new(py, f).into_any(),
            Arg::Value(Plain::Str(s)) => PyString::new(py, s).into_any(),
            Arg::Value(Plain::Bytes(b)) => PyBytes::new(py, b).into_any(),
        };
        items.push(item);
    });
    if !plain {
        return Ok(None);
    }
    PyTuple::new(py, items).map(Some)
}

/// The size of a result of an exact scalar type (int, float, bool, None), as
/// `squall.worker.memory.sizeof_value` gives it (`sys.getsizeof`, which for these
/// non-collected objects is `__sizeof__`), without a call into Python code of its own:
/// the results of a large map of small tasks are mostly these. None for anything else.
fn scalar_size(value: &Bound<'_, PyAny>) -> Option<i64> {
    let scalar = value.is_none()
        || value.is_exact_instance_of::<PyInt>()
        || value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyBool>();
    if !scalar {
        return None;
    }
    value
        .call_method0(intern!(value.py(), "__sizeof__"))
        .ok()?
        .extract()
        .ok()
}
