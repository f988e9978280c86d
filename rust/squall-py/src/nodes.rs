//! dask's task-spec nodes and a graph's shared functions, reduced for pickling
//! (`NodeReducer`, the `reducer_override` of `squall.dask.graphs`' pickler) and rebuilt
//! from their pickles through one function, `restore_node(kind, *args)`, which a
//! pickle names by its extension code rather than as a global: pickling a global and
//! finding it again on unpickling each cost a module import and an attribute lookup,
//! about a microsecond, in every task's pickle. A `Task` travels as its slot values and
//! is rebuilt from them in one compiled call, where dask's own `__getstate__` and
//! `__setstate__` are Python loops (docs/runtime.md#fused-tasks).

use crate::specs::load_function;
use pyo3::exceptions::{PyImportError, PyKeyError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBytes, PyDict, PyFrozenSet, PyList, PyModule, PySet, PyString, PyTuple, PyType,
};
use pyo3::BoundObject;
use rustc_hash::FxHashMap;

/// `restore_node`'s code in copyreg's extension registry (from the range PEP 307 leaves
/// to third parties): a node's pickle opens by naming it with this code (`EXT1`),
/// which the unpickler finds in a cache, where a name makes both pickler and
/// unpickler import its module, about a microsecond each per spec
/// (docs/runtime.md#fused-tasks).
pub const RESTORE_NODE_CODE: u8 = 213;

/// Registers [`RESTORE_NODE_CODE`] in this process: every process that reads or writes
/// node pickles imports this module first. A code another library registered first is
/// an import error naming both, where going on would call that library's object in
/// `restore_node`'s place.
pub fn register_restore_node(py: Python<'_>) -> PyResult<()> {
    py.import("copyreg")?
        .call_method1(
            intern!(py, "add_extension"),
            ("squall._core", "restore_node", RESTORE_NODE_CODE),
        )
        .map_err(|e| {
            PyImportError::new_err(format!(
                "squall needs pickle extension code {RESTORE_NODE_CODE} for \
                 squall._core.restore_node: {e}"
            ))
        })?;
    Ok(())
}

/// What `restore_node` makes, by its first argument (the values `NodeReducer` writes).
const TASK: u8 = 0;
const TASK_REF: u8 = 1;
const DATA_NODE: u8 = 2;
const ALIAS: u8 = 3;
const FUNCTION: u8 = 4;

/// dask's node classes, `object.__new__`, the slot names of `Task` and the classes of
/// the functions a graph shares, looked up once.
struct Classes {
    task: Py<PyType>,
    graph_node: Py<PyType>,
    task_ref: Py<PyType>,
    data_node: Py<PyType>,
    alias: Py<PyType>,
    new: Py<PyAny>,
    task_slots: Vec<Py<PyString>>,
    shared: Vec<Py<PyType>>,
    builtin_function: Py<PyType>,
    restore: Py<PyAny>,
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
        let types = py.import("types")?;
        let type_of = |module: &Bound<'_, PyModule>, name: &str| -> PyResult<Py<PyType>> {
            Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind())
        };
        // Functions pickled by value (lambdas, closures, methods, and toolz's
        // compositions of them, which dask's reductions use) are the costly part of a
        // task's pickle and are shared by every task of a layer.
        let shared = vec![
            type_of(&types, "FunctionType")?,
            type_of(&types, "MethodType")?,
            type_of(&py.import("functools")?, "partial")?,
            type_of(&py.import("toolz.functoolz")?, "Compose")?,
        ];
        Ok(Classes {
            task,
            graph_node: class("GraphNode")?,
            task_ref: class("TaskRef")?,
            data_node: class("DataNode")?,
            alias: class("Alias")?,
            new: new.unbind(),
            task_slots,
            shared,
            builtin_function: type_of(&types, "BuiltinFunctionType")?,
            restore: py.import("squall._core")?.getattr("restore_node")?.unbind(),
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

/// How `NodeReducer` treats the objects of one class, worked out once per class.
#[derive(Clone, Copy)]
enum Kind {
    /// A function every task of a layer shares: pickled once per graph, as a blob.
    Shared,
    /// A built-in function: shared when it is a module's (`operator.add`, `len`), not
    /// when bound to an object (`some_list.append`), which tasks could mutate through.
    Builtin,
    /// A class: by value if cloudpickle must send it so, else a shared blob.
    Class,
    /// A `TaskRef` subclass (a client's future): travels as its key.
    Ref,
    /// Anything else: the pickler's own way.
    Other,
}

/// numpy's functions and ufuncs, shared too, known by their classes' names (numpy need
/// not be imported): naming a global costs an import and a lookup per task's pickle to
/// write and to read, a shared blob a cache hit.
const NUMPY_FUNCTION_TYPES: [(&str, &str); 2] =
    [("numpy", "ufunc"), ("numpy", "_ArrayFunctionDispatcher")];

/// The `reducer_override` of one graph's pickler (`squall.dask.graphs`): the C pickler
/// asks it about every object but atoms and built-in containers, so the common answers
/// (dask's nodes, by exact class) are a few pointer compares here. A shared function,
/// and a class cloudpickle's reducer (`by_value(class)`) would name by reference, is
/// pickled once per graph by `blob(function) -> bytes`; a class it sends by value
/// takes its reduction. Both answers are kept per object for the graph, the object
/// with them so that its id is not reused meanwhile.
#[pyclass(module = "squall._core")]
pub struct NodeReducer {
    blob: Py<PyAny>,
    by_value: Py<PyAny>,
    once: FxHashMap<usize, (Py<PyAny>, Py<PyAny>)>,
    kinds: FxHashMap<usize, (Py<PyType>, Kind)>,
}

#[pymethods]
impl NodeReducer {
    #[new]
    fn new(blob: Py<PyAny>, by_value: Py<PyAny>) -> Self {
        Self {
            blob,
            by_value,
            once: FxHashMap::default(),
            kinds: FxHashMap::default(),
        }
    }

    fn __call__<'py>(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = obj.py();
        if obj.is_exact_instance_of::<PyTuple>()
            || obj.is_exact_instance_of::<PyDict>()
            || obj.is_exact_instance_of::<PyList>()
            || obj.is_exact_instance_of::<PyFrozenSet>()
            || obj.is_exact_instance_of::<PySet>()
        {
            return Ok(not_implemented(py));
        }
        let c = classes(py)?;
        let t = obj.get_type();
        if t.is(c.task.bind(py)) {
            let state = c.task_slots.iter().map(|s| obj.getattr(s.bind(py)));
            let state = PyTuple::new(py, state.collect::<PyResult<Vec<_>>>()?)?;
            return reduction(py, c, (TASK, state));
        }
        if t.is(c.task_ref.bind(py)) {
            return reduction(py, c, (TASK_REF, obj.getattr(intern!(py, "key"))?));
        }
        if t.is(c.data_node.bind(py)) {
            let key = obj.getattr(intern!(py, "key"))?;
            return reduction(py, c, (DATA_NODE, key, obj.getattr(intern!(py, "value"))?));
        }
        if t.is(c.alias.bind(py)) {
            let key = obj.getattr(intern!(py, "key"))?;
            return reduction(py, c, (ALIAS, key, obj.getattr(intern!(py, "target"))?));
        }
        let id = obj.as_ptr() as usize;
        if let Some((_, value)) = self.once.get(&id) {
            return Ok(value.bind(py).clone());
        }
        let value = match self.kind(c, &t)? {
            Kind::Shared => self.shared(c, obj)?,
            Kind::Builtin
                if !obj.is(c.restore.bind(py))
                    && obj
                        .getattr(intern!(py, "__self__"))?
                        .is_instance_of::<PyModule>() =>
            {
                self.shared(c, obj)?
            }
            Kind::Class => {
                let reduced = self.by_value.bind(py).call1((obj,))?;
                if reduced.is(not_implemented(py)) {
                    // Importable: a shared blob too, whose load is a cache hit where a
                    // global would be an import in every spec that names the class.
                    self.shared(c, obj)?
                } else {
                    reduced
                }
            }
            Kind::Ref => return reduction(py, c, (TASK_REF, obj.getattr(intern!(py, "key"))?)),
            Kind::Builtin | Kind::Other => return Ok(not_implemented(py)),
        };
        self.once
            .insert(id, (obj.clone().unbind(), value.clone().unbind()));
        Ok(value)
    }
}

impl NodeReducer {
    fn kind(&mut self, c: &Classes, t: &Bound<'_, PyType>) -> PyResult<Kind> {
        let py = t.py();
        let id = t.as_ptr() as usize;
        if let Some((_, kind)) = self.kinds.get(&id) {
            return Ok(*kind);
        }
        let kind = if c.shared.iter().any(|s| t.is(s.bind(py))) || is_numpy_function(t) {
            Kind::Shared
        } else if t.is(c.builtin_function.bind(py)) {
            Kind::Builtin
        } else if t.is_subclass_of::<PyType>()? {
            Kind::Class
        } else if t.is_subclass(c.task_ref.bind(py))? {
            Kind::Ref
        } else {
            Kind::Other
        };
        self.kinds.insert(id, (t.clone().unbind(), kind));
        Ok(kind)
    }

    fn shared<'py>(
        &self,
        c: &Classes,
        function: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = function.py();
        let blob = self.blob.bind(py).call1((function,))?;
        reduction(py, c, (FUNCTION, blob))
    }
}

fn is_numpy_function(t: &Bound<'_, PyType>) -> bool {
    let py = t.py();
    let name = |attr| -> Option<String> { t.getattr(attr).ok()?.extract().ok() };
    match (
        name(intern!(py, "__module__")),
        name(intern!(py, "__qualname__")),
    ) {
        (Some(module), Some(qualname)) => {
            NUMPY_FUNCTION_TYPES.contains(&(module.as_str(), qualname.as_str()))
        }
        _ => false,
    }
}

/// `(restore_node, args)`: what the pickler writes as a call of `restore_node(*args)`.
fn reduction<'py, A: IntoPyObject<'py>>(
    py: Python<'py>,
    c: &Classes,
    args: A,
) -> PyResult<Bound<'py, PyAny>> {
    let args = args
        .into_pyobject(py)
        .map_err(Into::into)?
        .into_any()
        .into_bound();
    Ok(PyTuple::new(py, [c.restore.bind(py).clone(), args])?.into_any())
}

fn not_implemented(py: Python<'_>) -> Bound<'_, PyAny> {
    py.NotImplemented().into_bound(py)
}

/// `node(values)`, as dask's task-spec nodes define it, with an exact `Task` (almost
/// every node of a graph) run here rather than by dask's `Task.__call__`: that method's
/// checks, closure and argument loop are Python, about a microsecond a task, more than
/// many tasks' own work (docs/runtime.md#fused-tasks). The same checks, errors and
/// order: `values` must hold the task's dependencies (else dask's `RuntimeError`), each
/// argument that is a node is called with the values of its own dependencies (a nested
/// `Task` here too), a `TaskRef` is replaced by its value, anything else is passed as it
/// is, and then the task's function is called. Any other node calls itself.
#[pyfunction]
pub fn call_node<'py>(
    node: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = node.py();
    let c = classes(py)?;
    if !node.get_type().is(c.task.bind(py)) {
        return node.call1((values,));
    }
    let missing = missing_dependencies(node, values)?;
    if !missing.is_empty() {
        let missing = PySet::new(py, missing)?;
        return Err(PyRuntimeError::new_err(format!(
            "Not enough arguments provided: missing keys {missing}"
        )));
    }
    call_task(c, node, values, 0)
}

/// Nested `Task`s deeper than this are called by dask's own `__call__`, whose Python
/// recursion limit then reports a pathological nesting as a `RecursionError`, where
/// recursing here could overflow the thread's stack.
const MAX_NATIVE_DEPTH: u32 = 64;

/// The dependencies of `task` (a `Task`) that `values` lacks, in its own order.
fn missing_dependencies<'py>(
    task: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut missing = Vec::new();
    for dep in task
        .getattr(intern!(task.py(), "_dependencies"))?
        .try_iter()?
    {
        let dep = dep?;
        if !values.contains(&dep)? {
            missing.push(dep);
        }
    }
    Ok(missing)
}

/// A `Task`'s function called on its evaluated arguments (its dependencies checked).
fn call_task<'py>(
    c: &Classes,
    task: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
    depth: u32,
) -> PyResult<Bound<'py, PyAny>> {
    let py = task.py();
    let args = task.getattr(intern!(py, "args"))?;
    let args = args
        .try_iter()?
        .map(|a| evaluate(c, &a?, values, depth))
        .collect::<PyResult<Vec<_>>>()?;
    let args = PyTuple::new(py, args)?;
    let func = task.getattr(intern!(py, "func"))?;
    let kwargs = task.getattr(intern!(py, "kwargs"))?;
    if !kwargs.is_truthy()? {
        return func.call1(args);
    }
    let evaluated = PyDict::new(py);
    for item in kwargs.call_method0(intern!(py, "items"))?.try_iter()? {
        let (name, value) = item?.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
        evaluated.set_item(name, evaluate(c, &value, values, depth)?)?;
    }
    func.call(args, Some(&evaluated))
}

/// One argument of a task, as dask's `Task.__call__` evaluates it.
fn evaluate<'py>(
    c: &Classes,
    arg: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
    depth: u32,
) -> PyResult<Bound<'py, PyAny>> {
    let py = arg.py();
    let t = arg.get_type();
    if t.is(c.task_ref.bind(py)) {
        return values.get_item(arg.getattr(intern!(py, "key"))?);
    }
    if t.is(c.task.bind(py)) && depth < MAX_NATIVE_DEPTH {
        // dask calls it with a dict of its dependencies' values, whose making raises
        // the KeyError of a missing one; the task itself reads only those.
        if let Some(dep) = missing_dependencies(arg, values)?.into_iter().next() {
            return Err(PyKeyError::new_err(dep.unbind()));
        }
        return call_task(c, arg, values, depth + 1);
    }
    if arg.is_instance(c.graph_node.bind(py))? {
        let own = PyDict::new(py);
        for dep in arg.getattr(intern!(py, "dependencies"))?.try_iter()? {
            let dep = dep?;
            own.set_item(&dep, values.get_item(&dep)?)?;
        }
        return arg.call1((own,));
    }
    if arg.is_instance(c.task_ref.bind(py))? {
        return values.get_item(arg.getattr(intern!(py, "key"))?);
    }
    Ok(arg.clone())
}
