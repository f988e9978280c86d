//! dask's task-spec nodes and a graph's shared functions rebuilt from their pickles
//! through one function, `restore_node(kind, *args)` (`squall.dask.graphs` pickles
//! them so). One global per pickle rather than one per class: pickling a global and
//! finding it again on unpickling each cost a module import and an attribute lookup,
//! about a microsecond, in every task's pickle. A `Task` is rebuilt from its slot
//! values in one compiled call, where dask's own `__setstate__` is a Python loop of
//! `setattr` (docs/runtime.md#fused-tasks).

use crate::specs::load_function;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString, PyTuple, PyType};

/// What `restore_node` makes, by its first argument (the values `squall.dask.graphs`
/// writes: keep the two in step).
const TASK: u8 = 0;
const TASK_REF: u8 = 1;
const DATA_NODE: u8 = 2;
const ALIAS: u8 = 3;
const FUNCTION: u8 = 4;

/// dask's node classes, `object.__new__` and the slot names of `Task`, looked up once.
struct Classes {
    task: Py<PyType>,
    task_ref: Py<PyType>,
    data_node: Py<PyType>,
    alias: Py<PyType>,
    new: Py<PyAny>,
    task_slots: Vec<Py<PyString>>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let spec = py.import("dask._task_spec")?;
        let class = |name: &str| -> PyResult<Py<PyType>> {
            Ok(spec.getattr(name)?.cast_into::<PyType>()?.unbind())
        };
        let task = class("Task")?;
        let task_slots = task
            .bind(py)
            .call_method0(intern!(py, "get_all_slots"))?
            .try_iter()?
            .map(|s| Ok(s?.cast_into::<PyString>()?.unbind()))
            .collect::<PyResult<Vec<_>>>()?;
        let new = py
            .import("builtins")?
            .getattr("object")?
            .getattr("__new__")?;
        Ok(Classes {
            task,
            task_ref: class("TaskRef")?,
            data_node: class("DataNode")?,
            alias: class("Alias")?,
            new: new.unbind(),
            task_slots,
        })
    })
}

/// The node or function of `kind` made from `args`: a `Task` from its slot values
/// (what `Task.__getstate__` gives, as unpickling it with dask's `__setstate__`
/// makes it); a `TaskRef`, `DataNode` or `Alias` from its class's own `__reduce__`
/// arguments; a function from its pickled bytes (`load_function`).
#[pyfunction]
#[pyo3(signature = (kind, *args))]
pub fn restore_node<'py>(
    py: Python<'py>,
    kind: u8,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let c = classes(py)?;
    match kind {
        TASK => {
            let state = args.get_item(0)?.cast_into::<PyTuple>()?;
            restore_task(py, c, &state)
        }
        TASK_REF => c.task_ref.bind(py).call1(args),
        DATA_NODE => c.data_node.bind(py).call1(args),
        ALIAS => c.alias.bind(py).call1(args),
        FUNCTION => {
            let blob = args.get_item(0)?.cast_into::<PyBytes>()?;
            Ok(load_function(py, blob.as_bytes())?.into_bound(py))
        }
        _ => Err(PyValueError::new_err(format!(
            "restore_node: no node kind {kind} (client and worker run different squall versions?)"
        ))),
    }
}

fn restore_task<'py>(
    py: Python<'py>,
    c: &Classes,
    state: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    if state.len() != c.task_slots.len() {
        return Err(PyValueError::new_err(format!(
            "a pickled dask Task holds {} slot values where this dask's Task has {} \
             (client and worker run different dask versions?)",
            state.len(),
            c.task_slots.len()
        )));
    }
    let obj = c.new.bind(py).call1((c.task.bind(py),))?;
    for (name, value) in c.task_slots.iter().zip(state.iter()) {
        obj.setattr(name.bind(py), value)?;
    }
    Ok(obj)
}
