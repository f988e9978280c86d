//! The client's futures made in bulk: a `map` chunk's futures and the states they
//! share, bound and entered in the client's table of states in one C loop
//! (docs/runtime.md#futures-in-bulk).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyType};
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

/// Where a class keeps the writable object slot `name` (one of its `__slots__`): its
/// offset in an instance. A TypeError if `name` is no such slot.
fn slot_offset(ty: &Bound<'_, PyType>, name: &str) -> PyResult<isize> {
    let descr = ty.getattr(name)?;
    let p = descr.as_ptr();
    // SAFETY: `p` is live; it is read as a member descriptor only once its type is
    // checked to be that, whose `d_member` points to its static definition.
    unsafe {
        if ffi::Py_TYPE(p) == std::ptr::addr_of_mut!(ffi::PyMemberDescr_Type) {
            let member =
                (*p.cast::<ffi::PyMemberDescrObject>()).d_member as *const ffi::PyMemberDef;
            if (*member).type_code == ffi::Py_T_OBJECT_EX && (*member).flags & ffi::Py_READONLY == 0
            {
                return Ok((*member).offset);
            }
        }
    }
    Err(PyTypeError::new_err(format!(
        "{} has no object slot {name}",
        ty.name()?
    )))
}

/// The offsets of some slots of a class, in the order named.
fn slot_offsets<const N: usize>(ty: &Bound<'_, PyType>, names: [&str; N]) -> PyResult<[isize; N]> {
    let mut out = [0; N];
    for (o, name) in out.iter_mut().zip(names) {
        *o = slot_offset(ty, name)?;
    }
    Ok(out)
}

/// Sets the slots at `offsets` of `obj`, a new instance from [`alloc`] of the class they
/// were read from (all unset), to `values`: what `setattr` does, without looking each
/// name up.
fn fill<const N: usize>(
    obj: &Bound<'_, PyAny>,
    offsets: &[isize; N],
    values: [&Bound<'_, PyAny>; N],
) {
    for (&offset, value) in offsets.iter().zip(values) {
        // SAFETY: `offset` is that of an object slot of `obj`'s class (`slot_offset`),
        // which is unset (NULL) in a new instance; the slot takes a new reference.
        unsafe {
            let slot = obj
                .as_ptr()
                .cast::<u8>()
                .offset(offset)
                .cast::<*mut ffi::PyObject>();
            debug_assert!((*slot).is_null());
            *slot = value.clone().into_ptr();
        }
    }
}

/// `ClientConnection.acquire_many` under its lock: a future of `future_type` for each
/// of `keys`, bound to `client` and to the key's state in `table` (a new one of
/// `state_type` for a key it lacks; a held one counts one more
/// reference). Returns the futures and the indices of the keys that got a new state
/// (None: all did). The slots are written as `ClientConnection.hold` and `Future._bind`
/// would, with no `__init__` (docs/runtime.md#futures-in-bulk).
///
/// A new state holds only atoms (its key, its count, its status) until its rare part is
/// made: it is left untracked by the cyclic collector, as CPython leaves a dict of
/// atoms (`FutureState._more` tracks it again).
#[pyfunction]
pub fn hold_keys<'py>(
    table: &Bound<'py, PyDict>,
    keys: &Bound<'py, PyList>,
    future_type: &Bound<'py, PyType>,
    state_type: &Bound<'py, PyType>,
    client: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, Option<Vec<usize>>)> {
    let py = table.py();
    let future_slots = slot_offsets(future_type, ["key", "_client", "_state", "_cleared"])?;
    let state_slots = slot_offsets(state_type, ["key", "refs", "status", "_rare"])?;
    let refs_name = intern!(py, "refs");
    let pending = intern!(py, "pending").as_any();
    let one = 1i64.into_pyobject(py)?.into_any();
    let (none, cleared) = (
        py.None().into_bound(py),
        PyBool::new(py, false).to_owned().into_any(),
    );
    let keys: Vec<Bound<'py, PyAny>> = keys.iter().collect();
    let mut futures = Vec::with_capacity(keys.len());
    let mut fresh: Option<Vec<usize>> = None;
    for (i, key) in keys.iter().enumerate() {
        let made = alloc(state_type)?;
        fill(&made, &state_slots, [key, &one, pending, &none]);
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
        fill(&future, &future_slots, [key, client, &state, &cleared]);
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
