//! The client's futures made in bulk: a `map` chunk's futures and the states they
//! share, bound and entered in the client's table of states in one C loop
//! (docs/runtime.md#futures-in-the-client).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyType};
use pyo3::{ffi, intern};

/// A new instance of `ty` with its slots unset, as `object.__new__(ty)`: the type's
/// own allocator, no `__init__`.
fn alloc<'py>(ty: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = ty.py();
    // SAFETY: `ty` is a live type object; its `tp_alloc` slot is always set (inherited
    // from `object` at the least) and returns a new reference or NULL with an error set.
    unsafe {
        let slot = ffi::PyType_GetSlot(ty.as_type_ptr(), ffi::Py_tp_alloc);
        let tp_alloc: ffi::allocfunc = std::mem::transmute(slot);
        Bound::from_owned_ptr_or_err(py, tp_alloc(ty.as_type_ptr(), 0))
    }
}

/// `ClientConnection.acquire_many` under its lock: a future of `future_type` for each
/// of `keys`, bound to `client` and to the key's state in `table` (a new one of
/// `state_type`, of `generation`, for a key it lacks; a held one counts one more
/// reference). Returns the futures and the indices of the keys that got a new state
/// (None: all did).
///
/// A new state holds only atoms (its key, two ints, its status) until its rare part is
/// made: it is left untracked by the cyclic collector, as CPython leaves a dict of
/// atoms, so collections after a large map walk half the objects
/// (`FutureState._more` tracks it again).
#[pyfunction]
pub fn hold_keys<'py>(
    table: &Bound<'py, PyDict>,
    keys: &Bound<'py, PyList>,
    future_type: &Bound<'py, PyType>,
    state_type: &Bound<'py, PyType>,
    client: &Bound<'py, PyAny>,
    generation: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, Option<Vec<usize>>)> {
    let py = table.py();
    let (key_name, refs_name) = (intern!(py, "key"), intern!(py, "refs"));
    let pending = intern!(py, "pending");
    let one = 1i64.into_pyobject(py)?;
    let keys: Vec<Bound<'py, PyAny>> = keys.iter().collect();
    let mut futures = Vec::with_capacity(keys.len());
    let mut fresh: Option<Vec<usize>> = None;
    for (i, key) in keys.iter().enumerate() {
        let made = alloc(state_type)?;
        made.setattr(key_name, key)?;
        made.setattr(intern!(py, "generation"), generation)?;
        made.setattr(refs_name, &one)?;
        made.setattr(intern!(py, "status"), pending)?;
        made.setattr(intern!(py, "_rare"), py.None())?;
        // One lookup: the key's state, `made` if it had none.
        // SAFETY: live dict, key and value; the result is borrowed from the dict (or
        // NULL with an error set, an unhashable key), owned here before anything else runs.
        let state = unsafe {
            Bound::from_borrowed_ptr_or_err(
                py,
                ffi::PyDict_SetDefault(table.as_ptr(), key.as_ptr(), made.as_ptr()),
            )?
        };
        if state.is(&made) {
            // SAFETY: `made` is a live object of a GC type (a class with slots) and is
            // tracked (its allocator tracked it); it refers only to atoms.
            unsafe { ffi::PyObject_GC_UnTrack(made.as_ptr().cast()) };
            if let Some(fresh) = fresh.as_mut() {
                fresh.push(i);
            }
        } else {
            let refs = state.getattr(refs_name)?.add(&one)?;
            state.setattr(refs_name, refs)?;
            fresh.get_or_insert_with(|| (0..i).collect());
        }
        let future = alloc(future_type)?;
        future.setattr(key_name, key)?;
        future.setattr(intern!(py, "_client"), client)?;
        future.setattr(intern!(py, "_state"), state)?;
        future.setattr(intern!(py, "_cleared"), false)?;
        futures.push(future);
    }
    Ok((PyList::new(py, futures)?, fresh))
}

/// Has the cyclic collector track `obj` again (a state given its rare part, see
/// [`hold_keys`]); nothing if it already does.
#[pyfunction]
pub fn gc_track(obj: &Bound<'_, PyAny>) {
    let p = obj.as_ptr();
    // SAFETY: `p` is a live object; tracking applies only to a GC type's object that
    // is not tracked yet, as checked first.
    unsafe {
        if ffi::PyObject_IS_GC(p) == 1 && ffi::PyObject_GC_IsTracked(p) == 0 {
            ffi::PyObject_GC_Track(p.cast());
        }
    }
}
