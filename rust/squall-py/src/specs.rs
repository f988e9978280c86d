//! Call specs' Python face (format: squall-wire's `spec`, docs/protocol.md#run-specs)
//! and the one per-process cache of their functions: the client builds specs with
//! `call_prefix`; the worker's compiled loop and `squall.protocol.specs` split them with
//! `split_call` and look their functions up with `load_function`, as do dask graphs
//! whose pickles carry functions (`squall.dask.graphs`).

use crate::errors::wire_error;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyBytes;
use rustc_hash::FxHashMap;
use squall_wire::spec::CallSpec;
use std::sync::{Mutex, MutexGuard};

/// Functions kept unpickled per process, and the pickled bytes they may add up to;
/// beyond either the cache starts over, and a function pickled larger than the byte
/// bound is not kept at all (docs/runtime.md#execution-on-workers): what released
/// functions can pin stays bounded.
const MAX_FUNCTIONS: usize = 256;
const MAX_FUNCTION_BYTES: usize = 128 << 20;

#[derive(Default)]
struct Functions {
    by_blob: FxHashMap<Box<[u8]>, Py<PyAny>>,
    bytes: usize,
}

/// Taken only while holding the GIL and never across a call into Python.
static FUNCTIONS: Mutex<Option<Functions>> = Mutex::new(None);
static CLOUDPICKLE_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn functions() -> MutexGuard<'static, Option<Functions>> {
    FUNCTIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The function pickled in `blob` (by cloudpickle on the client), unpickled once per
/// process while it stays cached: later calls with the same bytes return the same object.
#[pyfunction]
pub fn load_function(py: Python<'_>, blob: &[u8]) -> PyResult<Py<PyAny>> {
    if let Some(f) = functions().as_ref().and_then(|m| m.by_blob.get(blob)) {
        return Ok(f.clone_ref(py));
    }
    let loads = CLOUDPICKLE_LOADS.get_or_try_init(py, || {
        PyResult::Ok(py.import("cloudpickle")?.getattr("loads")?.unbind())
    })?;
    let f = loads.call1(py, (PyBytes::new(py, blob),))?;
    if blob.len() > MAX_FUNCTION_BYTES {
        return Ok(f);
    }
    let mut g = functions();
    let m = g.get_or_insert_with(Functions::default);
    let full = m.by_blob.len() >= MAX_FUNCTIONS || m.bytes + blob.len() > MAX_FUNCTION_BYTES;
    let old = full.then(|| std::mem::take(m));
    // Another thread may have loaded it meanwhile: that copy goes too.
    let replaced = m.by_blob.insert(blob.into(), f.clone_ref(py));
    if replaced.is_none() {
        m.bytes += blob.len();
    }
    // Freeing Python objects may run arbitrary code: not under the lock.
    drop(g);
    drop((old, replaced));
    Ok(f)
}

/// Functions cached now and the pickled bytes they came from (tests, diagnostics).
#[pyfunction]
pub fn function_cache_size() -> (usize, usize) {
    functions()
        .as_ref()
        .map_or((0, 0), |m| (m.by_blob.len(), m.bytes))
}

/// Forget every cached function, so that the next call of each unpickles it again:
/// after an uploaded module is reloaded, functions pickled by reference to it must be
/// looked up anew (docs/runtime.md#uploading-code).
#[pyfunction]
pub fn clear_function_cache() {
    let old = functions().take();
    drop(old); // not under the lock (see `load_function`)
}

/// The part of a call spec naming the function (shared by the specs of a `map`).
#[pyfunction]
pub fn call_prefix<'py>(py: Python<'py>, function: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let prefix = squall_wire::spec::call_prefix(function).map_err(wire_error)?;
    Ok(PyBytes::new(py, &prefix))
}

/// A call spec's function bytes and pickled `(args, kwargs)`; None for another kind of
/// spec; a malformed call spec is a ValueError.
#[pyfunction]
pub fn split_call<'py>(
    py: Python<'py>,
    spec: &[u8],
) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let parts = squall_wire::spec::split_call(spec).map_err(wire_error)?;
    Ok(parts
        .map(|CallSpec { function, call }| (PyBytes::new(py, function), PyBytes::new(py, call))))
}
