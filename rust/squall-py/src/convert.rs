//! Conversions between Python objects and core values.

use crate::errors::wire_error;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyString, PyTuple};
use squall_core::key::KeyEncoder;
use squall_core::{Key, KeyRef, KeyValue};
use squall_wire::packed::Packed;

/// Encodes a Dask key (str, bytes, int, float, or a tuple of those) without building
/// an intermediate tree.
pub fn key_from_py(ob: &Bound<'_, PyAny>) -> PyResult<Key> {
    let mut e = KeyEncoder::new();
    encode(ob, &mut e, 0)?;
    Ok(e.finish())
}

/// Appends a Dask key's canonical bytes to `out`, allocating nothing of its own.
pub fn put_key_from_py(ob: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
    let mut e = KeyEncoder::appending(std::mem::take(out));
    let r = encode(ob, &mut e, 0);
    *out = e.into_buffer();
    r
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

pub fn key_to_py<'py>(py: Python<'py>, key: &KeyRef) -> PyResult<Bound<'py, PyAny>> {
    // A str key (a map's, most of a graph's) straight from its bytes: no decoded copy.
    match key.as_str() {
        Some(s) => Ok(PyString::new(py, s).into_any()),
        None => value_to_py(py, &key.decode()),
    }
}

/// [`key_to_py`] of canonical key bytes checked already (a decoded message's).
pub fn key_bytes_to_py<'py>(py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let key = Key::from_encoded(key).expect("checked when the message was read");
    key_to_py(py, &key)
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

/// A packed little-endian array from a bytes-like buffer (a ragged one is a ValueError).
pub fn packed<T: Packed>(b: &[u8], what: &'static str) -> PyResult<Vec<T>> {
    squall_wire::packed::decode(b, what).map_err(wire_error)
}
