//! dask's `Task` nodes rebuilt from their pickles in one compiled call: the client
//! pickles a task as `restore_task(state)`, its slot values in `Task.get_all_slots()`
//! order (`squall.dask.graphs`), where dask's own `__setstate__` is a Python loop of
//! `setattr` calls that was a third of a worker's unpickling of a collection's task
//! (docs/runtime.md#fused-tasks).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

/// `dask._task_spec.Task`, `object.__new__` and the task's slot names, looked up once.
struct TaskClass {
    class: Py<PyType>,
    new: Py<PyAny>,
    slots: Vec<Py<PyString>>,
}

static TASK: PyOnceLock<TaskClass> = PyOnceLock::new();

fn task_class(py: Python<'_>) -> PyResult<&TaskClass> {
    TASK.get_or_try_init(py, || {
        let class = py
            .import("dask._task_spec")?
            .getattr("Task")?
            .cast_into::<PyType>()?;
        let slots = class
            .call_method0(intern!(py, "get_all_slots"))?
            .try_iter()?
            .map(|s| Ok(s?.cast_into::<PyString>()?.unbind()))
            .collect::<PyResult<Vec<_>>>()?;
        let new = py
            .import("builtins")?
            .getattr("object")?
            .getattr("__new__")?;
        Ok(TaskClass {
            class: class.unbind(),
            new: new.unbind(),
            slots,
        })
    })
}

/// A `Task` whose slots hold `state` (what `Task.__getstate__` gives), as unpickling
/// it with dask's `__setstate__` makes it.
#[pyfunction]
pub fn restore_task<'py>(
    py: Python<'py>,
    state: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let task = task_class(py)?;
    if state.len() != task.slots.len() {
        return Err(PyValueError::new_err(format!(
            "a pickled dask Task holds {} slot values where this dask's Task has {} \
             (client and worker run different dask versions?)",
            state.len(),
            task.slots.len()
        )));
    }
    let obj = task.new.bind(py).call1((task.class.bind(py),))?;
    for (name, value) in task.slots.iter().zip(state.iter()) {
        obj.setattr(name.bind(py), value)?;
    }
    Ok(obj)
}
