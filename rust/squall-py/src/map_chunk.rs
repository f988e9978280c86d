//! A `map` chunk's `update-graph` made in one call: the specs of its items (plain
//! arguments pickled by squall-wire's `plain_pickle`), its keys and the payload, with no
//! Python call per item (docs/runtime.md#map).

use crate::convert::put_key_from_py;
use crate::errors::wire_error;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString};
use squall_wire::plain_pickle::{write_call, Plain};
use squall_wire::spec::split_call;

/// One item's argument as a plain value, or None where it is not of a plain type
/// (exactly: a subclass pickles otherwise) or is an int beyond 64 bits.
fn plain<'a>(ob: &'a Bound<'_, PyAny>) -> Option<Plain<'a>> {
    if ob.is_none() {
        Some(Plain::None)
    } else if ob.is_exact_instance_of::<PyBool>() {
        Some(Plain::Bool(ob.is_truthy().ok()?))
    } else if ob.is_exact_instance_of::<PyInt>() {
        ob.extract::<i64>().ok().map(Plain::Int)
    } else if ob.is_exact_instance_of::<PyFloat>() {
        Some(Plain::Float(ob.cast::<PyFloat>().ok()?.value()))
    } else if ob.is_exact_instance_of::<PyString>() {
        // None for a string with lone surrogates: the pickler escapes those.
        ob.cast::<PyString>().ok()?.to_str().ok().map(Plain::Str)
    } else if ob.is_exact_instance_of::<PyBytes>() {
        Some(Plain::Bytes(ob.cast::<PyBytes>().ok()?.as_bytes()))
    } else {
        None
    }
}

/// Appends `i` as `format!("{i:08x}")` does, without the formatter (a call per key).
fn push_index(key: &mut String, i: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (usize::BITS - i.leading_zeros()).div_ceil(4).max(8);
    for d in (0..digits).rev() {
        key.push(char::from(HEX[(i >> (4 * d)) & 15]));
    }
}

/// A chunk's keys, then `update-graph`'s `n`, `keys_bytes` and payload, and what the
/// keys start with (their head).
type EncodedChunk<'py> = (
    Bound<'py, PyList>,
    usize,
    usize,
    Bound<'py, PyBytes>,
    String,
);

/// The `update-graph` of one `map` chunk whose arguments are all plain, as
/// `(keys, n, keys_bytes, payload, head)`; None if one is not (the caller then pickles the
/// chunk itself). Item `i` (of `columns[*][i]`) runs `prefix` (a call prefix) on its
/// arguments; its key is `f"{name}-{token}{start + i:08x}"`, as Python's `map_keys`
/// names it (docs/runtime.md#map). `token` is a str, or a
/// function of every spec of the chunk, concatenated in order (a pure map's token).
#[pyfunction]
pub fn encode_map_chunk<'py>(
    py: Python<'py>,
    prefix: &[u8],
    columns: Vec<Bound<'py, PyList>>,
    name: &str,
    start: usize,
    token: Bound<'py, PyAny>,
) -> PyResult<Option<EncodedChunk<'py>>> {
    let n = columns.iter().map(|c| c.len()).min().unwrap_or(0);
    let mut arena = Vec::with_capacity(n * (prefix.len() + 16 + 12 * columns.len()));
    let mut ends = Vec::with_capacity(n);
    let mut items = Vec::with_capacity(columns.len());
    for i in 0..n {
        items.clear();
        for c in &columns {
            items.push(c.get_item(i)?);
        }
        let mut args = Vec::with_capacity(items.len());
        let mut same = Vec::with_capacity(items.len());
        for (j, ob) in items.iter().enumerate() {
            let Some(arg) = plain(ob) else {
                return Ok(None);
            };
            args.push(arg);
            same.push(items[..j].iter().position(|o| o.is(ob)));
        }
        arena.extend_from_slice(prefix);
        if !write_call(&mut arena, &args, &same) {
            return Ok(None);
        }
        ends.push(arena.len());
    }
    let token: String = match token.cast::<PyString>() {
        Ok(s) => s.to_str()?.to_owned(),
        Err(_) => token.call1((PyBytes::new(py, &arena),))?.extract()?,
    };
    let head = format!("{name}-{token}");
    let mut key = String::with_capacity(head.len() + 16);
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        key.clear();
        key.push_str(&head);
        push_index(&mut key, start + i);
        keys.push(PyString::new(py, &key).into_any());
    }
    let mut at = 0;
    let specs: Vec<Option<&[u8]>> = ends
        .iter()
        .map(|&end| {
            let spec = &arena[at..end];
            at = end;
            Some(spec)
        })
        .collect();
    let no_deps: [Vec<Bound<'py, PyAny>>; 0] = [];
    // The function's bytes, which every spec repeats, travel once in the graph's blob
    // table (docs/protocol.md#run-specs): the scheduler holds them once, not per task.
    let function = split_call(prefix)
        .map_err(wire_error)?
        .map_or(&[][..], |c| c.function);
    let blobs: &[&[u8]] = if function.is_empty() {
        &[]
    } else {
        &[function]
    };
    let g =
        squall_wire::graph::encode_update_graph(&keys, &specs, &no_deps, blobs, put_key_from_py)?;
    let payload = PyBytes::new_with(py, g.size(), |out| {
        g.write_to(out);
        Ok(())
    })?;
    Ok(Some((
        PyList::new(py, &keys)?,
        g.n,
        g.keys_bytes,
        payload,
        head,
    )))
}
