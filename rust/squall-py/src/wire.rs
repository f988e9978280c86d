//! The wire codecs' Python face (formats: squall-wire, docs/protocol.md#hot-payload-layouts).

use crate::convert::{key_bytes_to_py, key_from_py, key_to_py, put_key_from_py};
use crate::errors::wire_error;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use rustc_hash::FxHashMap;
use squall_wire::keys::{put_key, read_keys};

/// Decodes a `compute` payload for inspection (tests, tools): a list of
/// `(task, run_id, key, priority, run_spec, actor, resources, deps)` where priority is
/// `(−user, generation, order)` and deps is `[(key, nbytes, [holder address, …]), …]`.
/// Specs are put back together from `held`, the blobs the reader holds by id, which the
/// payload's drops and additions update first, as a worker's cache is updated (without
/// `held`, only from the blobs this payload carries); naming a blob not held is a
/// ValueError. Workers read payloads straight into their compiled state instead.
#[pyfunction]
#[pyo3(signature = (payload, addresses, held=None))]
pub fn decode_compute<'py>(
    py: Python<'py>,
    payload: &[u8],
    addresses: Vec<String>,
    held: Option<Bound<'py, PyDict>>,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let batch = squall_wire::compute::decode_compute(payload, &addresses).map_err(wire_error)?;
    let held = held.unwrap_or_else(|| PyDict::new(py));
    for id in &batch.dropped {
        if held.contains(id)? {
            held.del_item(id)?;
        } else {
            return Err(PyValueError::new_err(format!(
                "dropped blob {id} is not held"
            )));
        }
    }
    for (id, blob) in &batch.added {
        held.set_item(id, PyBytes::new(py, blob))?;
    }
    let mut blobs: FxHashMap<u32, Vec<u8>> = FxHashMap::default();
    for (id, blob) in held.iter() {
        blobs.insert(id.extract()?, blob.extract()?);
    }
    let mut out = Vec::with_capacity(batch.tasks.len());
    for t in batch.tasks {
        let spec = match squall_core::blobs::references(t.spec) {
            None => t.spec.to_vec(),
            Some(refs) => {
                let (refs, body) = refs.map_err(PyValueError::new_err)?;
                let mut spec = Vec::new();
                let mut at = 0;
                for (offset, id) in refs {
                    let blob = blobs
                        .get(&id)
                        .ok_or_else(|| PyValueError::new_err(format!("blob {id} is not held")))?;
                    spec.extend_from_slice(&body[at..offset]);
                    spec.extend_from_slice(blob);
                    at = offset;
                }
                spec.extend_from_slice(&body[at..]);
                spec
            }
        };
        let mut deps = Vec::with_capacity(t.deps.len());
        for d in t.deps {
            deps.push((key_bytes_to_py(py, d.key)?, d.nbytes, d.holders).into_pyobject(py)?);
        }
        let p = t.priority;
        let item = (
            t.task,
            t.run_id,
            key_bytes_to_py(py, t.key)?,
            (p.neg_user, p.generation, p.order),
            PyBytes::new(py, &spec),
            t.actor,
            t.resources,
            deps,
        );
        out.push(item.into_pyobject(py)?);
    }
    Ok(out)
}

/// Encodes an `update-graph` payload (squall-wire's `graph`): `(n, keys_bytes, payload)`.
/// `specs[i]` is None for data; `deps` holds each task's dependencies (keys), or is None
/// when no task has any; `blobs` are bytes the specs share, sent once and cut out of
/// the specs.
#[pyfunction]
#[pyo3(signature = (keys, specs, deps=None, blobs=None))]
pub fn encode_update_graph<'py>(
    py: Python<'py>,
    keys: Vec<Bound<'py, PyAny>>,
    specs: Vec<Option<Bound<'py, PyBytes>>>,
    deps: Option<Vec<Vec<Bound<'py, PyAny>>>>,
    blobs: Option<Vec<Bound<'py, PyBytes>>>,
) -> PyResult<(usize, usize, Bound<'py, PyBytes>)> {
    let deps = deps.unwrap_or_default();
    if specs.len() != keys.len() || !(deps.is_empty() || deps.len() == keys.len()) {
        return Err(PyValueError::new_err(
            "update-graph: one spec and one list of dependencies per key",
        ));
    }
    let specs: Vec<Option<&[u8]>> = specs
        .iter()
        .map(|s| s.as_ref().map(|b| b.as_bytes()))
        .collect();
    let blobs = blobs.unwrap_or_default();
    let blobs: Vec<&[u8]> = blobs.iter().map(|b| b.as_bytes()).collect();
    let g = squall_wire::graph::encode_update_graph(&keys, &specs, &deps, &blobs, put_key_from_py)?;
    let payload = PyBytes::new_with(py, g.size(), |out| {
        g.write_to(out);
        Ok(())
    })?;
    Ok((g.n, g.keys_bytes, payload))
}

/// Encodes Python keys for the wire (a key list: squall-wire's `keys`).
#[pyfunction]
pub fn encode_keys<'py>(
    py: Python<'py>,
    keys: Vec<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::new();
    for k in &keys {
        put_key(&mut out, key_from_py(k)?.as_bytes());
    }
    Ok(PyBytes::new(py, &out))
}

/// Decodes keys written by `encode_keys`; malformed input is a ValueError.
#[pyfunction]
pub fn decode_keys<'py>(py: Python<'py>, payload: &[u8]) -> PyResult<Vec<Bound<'py, PyAny>>> {
    read_keys(payload)
        .map_err(wire_error)?
        .iter()
        .map(|k| key_to_py(py, k))
        .collect()
}
