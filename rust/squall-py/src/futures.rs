//! The client's futures made in bulk: a `map` chunk's futures and the states they
//! share, bound and entered in the client's table of states in one C loop
//! (docs/runtime.md#futures-in-bulk).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyInt, PyList, PyString, PyType};
use pyo3::{ffi, intern};
use squall_wire::keys::read_keys;

use crate::convert::key_to_py;
use crate::errors::wire_error;
use crate::future_table::{FutureTable, Held};

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

/// The object slot `name` of a class (one of its `__slots__`): its member descriptor
/// and that descriptor type's `__get__` and `__set__`, so that reading or filling the
/// slot of many instances skips looking the name up each time. A TypeError if `name`
/// is no slot.
struct Slot<'py> {
    descr: Bound<'py, PyAny>,
    get: ffi::descrgetfunc,
    set: ffi::descrsetfunc,
}

impl<'py> Slot<'py> {
    fn of(ty: &Bound<'py, PyType>, name: &str) -> PyResult<Self> {
        let descr = ty.getattr(name)?;
        // SAFETY: `descr` is live; the member descriptor type is a static type whose
        // `tp_descr_get` and `tp_descr_set` are always set (PyType_GetSlot reads static
        // types from 3.10 on).
        let funcs = unsafe {
            let dt = ffi::Py_TYPE(descr.as_ptr());
            if dt != std::ptr::addr_of_mut!(ffi::PyMemberDescr_Type) {
                None
            } else {
                let get = ffi::PyType_GetSlot(dt, ffi::Py_tp_descr_get);
                let set = ffi::PyType_GetSlot(dt, ffi::Py_tp_descr_set);
                (!get.is_null() && !set.is_null()).then(|| {
                    (
                        std::mem::transmute::<*mut std::ffi::c_void, ffi::descrgetfunc>(get),
                        std::mem::transmute::<*mut std::ffi::c_void, ffi::descrsetfunc>(set),
                    )
                })
            }
        };
        match funcs {
            Some((get, set)) => Ok(Self { descr, get, set }),
            None => Err(PyTypeError::new_err(format!(
                "{} has no object slot {name}",
                ty.name()?
            ))),
        }
    }

    /// `obj.<name>`; the descriptor checks `obj` is an instance of its class.
    fn get(&self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: live descriptor and object; the getter returns a new reference, or
        // NULL with an error set (an unset slot, another class's object).
        unsafe {
            let p = (self.get)(
                self.descr.as_ptr(),
                obj.as_ptr(),
                ffi::Py_TYPE(obj.as_ptr()).cast(),
            );
            Bound::from_owned_ptr_or_err(obj.py(), p)
        }
    }

    /// `obj.<name> = value`; the descriptor checks `obj` is an instance of its class.
    fn put(&self, obj: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> PyResult<()> {
        // SAFETY: live descriptor, object and value; the setter takes its own reference
        // to `value` and returns -1 with an error set on failure.
        let rc = unsafe { (self.set)(self.descr.as_ptr(), obj.as_ptr(), value.as_ptr()) };
        if rc < 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(())
    }
}

/// Some slots of a class, in the order named.
fn slots<'py, const N: usize>(
    ty: &Bound<'py, PyType>,
    names: [&str; N],
) -> PyResult<[Slot<'py>; N]> {
    let mut out = Vec::with_capacity(N);
    for name in names {
        out.push(Slot::of(ty, name)?);
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("one setter per name")))
}

/// Sets the slots of `obj` to `values`: what `setattr` does, without looking each name up.
fn fill<'py, const N: usize>(
    obj: &Bound<'py, PyAny>,
    setters: &[Slot<'py>; N],
    values: [&Bound<'py, PyAny>; N],
) -> PyResult<()> {
    for (setter, value) in setters.iter().zip(values) {
        setter.put(obj, value)?;
    }
    Ok(())
}

/// `ClientConnection.acquire_many` under its lock: a future of `future_type` for each
/// of `keys`, bound to `client` and to the key's state in `table` (a new one of
/// `state_type` for a key it lacks; a held one counts one more reference). Returns the
/// futures and the indices of the keys that got a new state (None: all did). The slots
/// are written as `ClientConnection.hold` and `Future._bind` would, with no `__init__`
/// (docs/runtime.md#futures-in-bulk). `run`, `(head, start)`, says that key `i` is
/// `head` followed by `start + i` in eight hex digits (a `map` chunk's): the keys are
/// then held as one run of the table if it can be made
/// (docs/runtime.md#the-table-of-states).
///
/// A new state holds only atoms (its status and its count) until its rare part is made:
/// it is left untracked by the cyclic collector, as CPython leaves a dict of atoms
/// (`FutureState._more` tracks it again).
#[pyfunction]
#[pyo3(signature = (table, keys, future_type, state_type, client, run = None))]
pub fn hold_keys<'py>(
    table: &Bound<'py, FutureTable>,
    keys: &Bound<'py, PyList>,
    future_type: &Bound<'py, PyType>,
    state_type: &Bound<'py, PyType>,
    client: &Bound<'py, PyAny>,
    run: Option<(PyBackedStr, u64)>,
) -> PyResult<(Bound<'py, PyList>, Option<Vec<usize>>)> {
    let py = table.py();
    let mut table = table.borrow_mut();
    let future_slots = slots(future_type, ["key", "_client", "_state"])?;
    let state_slots = slots(state_type, ["status", "_x"])?;
    let refs_name = intern!(py, "refs");
    let pending = intern!(py, "pending").as_any();
    let one = 1i64.into_pyobject(py)?.into_any();
    let new_state = || -> PyResult<Bound<'py, PyAny>> {
        let made = alloc(state_type)?;
        fill(&made, &state_slots, [pending, &one])?;
        // SAFETY: `made` is a live object of a GC type (a class with slots) and is
        // tracked (its allocator tracked it); it refers only to atoms.
        unsafe { ffi::PyObject_GC_UnTrack(made.as_ptr().cast()) };
        Ok(made)
    };
    let keys: Vec<Bound<'py, PyAny>> = keys.iter().collect();
    let mut states = Vec::with_capacity(keys.len());
    let mut fresh: Option<Vec<usize>> = None;
    let in_run = match &run {
        Some((head, start)) => table.hold_run(py, head, *start, &keys, &mut || {
            let st = new_state()?;
            states.push(st.clone());
            Ok(st.unbind())
        })?,
        None => false,
    };
    if !in_run {
        for (i, key) in keys.iter().enumerate() {
            let state = match table.get(key)? {
                Held::State(state) => {
                    let refs = state.getattr(refs_name)?.add(&one)?;
                    state.setattr(refs_name, refs)?;
                    fresh.get_or_insert_with(|| (0..i).collect());
                    state
                }
                Held::Absent => {
                    let made = new_state()?;
                    table.insert(key, &made)?;
                    if let Some(fresh) = fresh.as_mut() {
                        fresh.push(i);
                    }
                    made
                }
            };
            states.push(state);
        }
    }
    let mut futures = Vec::with_capacity(keys.len());
    for (key, state) in keys.iter().zip(&states) {
        let future = alloc(future_type)?;
        fill(&future, &future_slots, [key, client, state])?;
        futures.push(future);
    }
    Ok((PyList::new(py, futures)?, fresh))
}

/// A `key-in-memory` notice applied: each of the keys in `payload` (a key list) that
/// `table` holds a state of (of `state_type`) is finished, in one loop with no Python
/// call per key (and no Python string for a key of a run). Returns the states among
/// them that have a rare part (`_x` is no count), whose events the caller sets
/// (docs/runtime.md#futures-in-bulk).
#[pyfunction]
pub fn finish_keys<'py>(
    table: &Bound<'py, FutureTable>,
    payload: &[u8],
    state_type: &Bound<'py, PyType>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = table.py();
    let mut table = table.borrow_mut();
    let [status, rare] = slots(state_type, ["status", "_x"])?;
    let finished = intern!(py, "finished").as_any();
    let mut signal = Vec::new();
    for key in read_keys(payload).map_err(wire_error)? {
        let held = match key.as_str() {
            Some(text) => table.get_str(py, text)?,
            None => table.get(&key_to_py(py, &key)?)?,
        };
        let Held::State(state) = held else {
            continue;
        };
        status.put(&state, finished)?;
        if !rare.get(&state)?.is_exact_instance_of::<PyInt>() {
            signal.push(state);
        }
    }
    Ok(signal)
}

/// `ClientConnection.settle_releases` under its lock: one reference dropped from each
/// state of `pairs` (a state of `state_type`, then its key, once per future released).
/// A state whose count reaches 0 leaves `table` if it is still its key's (`cancel` may
/// have replaced it); returns the keys freed, to release, unless another state holds
/// them. A count below 0 (futures from before a restart, which zeroed it) frees nothing.
#[pyfunction]
pub fn release_states<'py>(
    table: &Bound<'py, FutureTable>,
    pairs: &Bound<'py, PyList>,
    state_type: &Bound<'py, PyType>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = table.py();
    let mut table = table.borrow_mut();
    let [count] = slots(state_type, ["_x"])?;
    let refs_name = intern!(py, "refs");
    if pairs.len() % 2 != 0 {
        return Err(PyValueError::new_err(
            "release_states takes (state, key) pairs",
        ));
    }
    let items: Vec<Bound<'py, PyAny>> = pairs.iter().collect();
    let mut gone = Vec::new();
    for pair in items.chunks_exact(2) {
        let (state, key) = (&pair[0], &pair[1]);
        // The count is the slot itself, or its rare part's once that is made.
        let x = count.get(state)?;
        let refs = if x.is_exact_instance_of::<PyInt>() {
            let refs = x.extract::<i64>()? - 1;
            count.put(state, &refs.into_pyobject(py)?.into_any())?;
            refs
        } else {
            let refs = x.getattr(refs_name)?.extract::<i64>()? - 1;
            x.setattr(refs_name, refs)?;
            refs
        };
        if refs != 0 {
            continue;
        }
        let key = key.clone();
        match table.remove(&key, Some(state))? {
            Held::State(held) if !held.is(state) => continue,
            _ => gone.push(key),
        }
    }
    Ok(gone)
}

/// Has the cyclic collector track `obj` again (a state given its rare part, see
/// [`hold_keys`]); nothing if it already does.
#[pyfunction]
pub fn gc_track(obj: &Bound<'_, PyAny>) {
    let p = obj.as_ptr();
    // SAFETY: `p` is a live object; tracking applies only to a GC type's object that
    // is not tracked yet, as checked first.
    unsafe {
        let gc_type = ffi::PyType_GetFlags(ffi::Py_TYPE(p)) & ffi::Py_TPFLAGS_HAVE_GC != 0;
        if gc_type && ffi::PyObject_GC_IsTracked(p) == 0 {
            ffi::PyObject_GC_Track(p.cast());
        }
    }
}

/// Whether the `name` attributes of `items` (a sized iterable, each item's attribute
/// alive while the items are) are distinct objects, by identity: a gather's states, which
/// repeat only when futures of one key (or one future) are given twice. Sorting their
/// addresses costs a word per item, where a dict or a list of them costs more.
#[pyfunction]
pub fn distinct_attributes(items: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<bool> {
    let mut addresses: Vec<usize> = Vec::with_capacity(items.len()?);
    for item in items.try_iter()? {
        addresses.push(item?.getattr(name)?.as_ptr() as usize);
    }
    // A stable sort: the states of a map were allocated in ascending runs.
    addresses.sort();
    Ok(addresses.windows(2).all(|w| w[0] != w[1]))
}
