//! `squall.order`'s engine: squall-order's `dask.order` equivalent, fed either an
//! index graph ([`order_graph`]) or a Dask graph mapping converted here, in one pass
//! over the mapping without per-node Python calls ([`order_mapping`]).

use std::fmt::Write as _;

use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFrozenSet, PyInt, PyList, PyString, PyTuple, PyType};
use squall_order::{order, Node, OrderError};

/// Orders a graph given per node: dependency indices, whether it is a runnable task,
/// and `str(key)`. Returns the priority of each node (lower runs first). The first
/// `n_internal` nodes are the graph; any after them are placeholders for external keys
/// (existing data): they are ordered but, as in dask, consume no number and are dropped.
#[pyfunction]
#[pyo3(signature = (deps, is_task, names, n_internal=None))]
pub fn order_graph(
    py: Python<'_>,
    deps: Vec<Vec<u32>>,
    is_task: Vec<bool>,
    names: Vec<String>,
    n_internal: Option<usize>,
) -> PyResult<Vec<u32>> {
    if deps.len() != is_task.len() || deps.len() != names.len() {
        return Err(PyValueError::new_err(
            "deps, is_task and names must have equal lengths",
        ));
    }
    let n_internal = n_internal.unwrap_or(deps.len()).min(deps.len());
    let nodes: Vec<Node> = deps
        .into_iter()
        .zip(is_task)
        .zip(names)
        .map(|((deps, is_task), name)| Node {
            deps,
            is_task,
            name,
        })
        .collect();
    run(py, &nodes, n_internal)
}

/// `dask.order.order` on a graph dict: returns `{key: priority}` for the keys of `dsk`.
///
/// Dependencies are, per key, `dependencies[key]` when that mapping is given, else the
/// node's `.dependencies` (task-spec nodes, including keys outside `dsk`, which become
/// placeholders like dask's), else the keys of `dsk` found in the value the way
/// `dask.core.get_dependencies` walks legacy tasks. `istask` follows `dask.core.istask`.
/// The ordering itself runs without the GIL.
#[pyfunction]
#[pyo3(signature = (dsk, dependencies=None))]
pub fn order_mapping<'py>(
    py: Python<'py>,
    dsk: &Bound<'py, PyDict>,
    dependencies: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    if dsk.is_empty() {
        return Ok(out);
    }
    let mut b = Builder::new(dsk)?;
    for (i, (k, v)) in dsk.iter().enumerate() {
        let explicit = match dependencies {
            Some(m) => Some(m.get_item(&k)?),
            None => None,
        };
        b.add(i, &k, &v, explicit.as_ref())?;
    }
    let n_internal = b.n_internal;
    let (keys, nodes) = b.finish()?;
    let prio = run(py, &nodes, n_internal)?;
    drop(nodes);
    for (k, p) in keys.iter().zip(prio) {
        out.set_item(k, p)?;
    }
    Ok(out)
}

/// Orders without the GIL, drops the placeholders' numbers and maps errors.
fn run(py: Python<'_>, nodes: &[Node], n_internal: usize) -> PyResult<Vec<u32>> {
    let ordered = py.detach(|| order(nodes).map(|p| drop_placeholders(p, n_internal)));
    ordered.map_err(|e| match e {
        OrderError::Cycle(ref idx) => crate::errors::CycleError::new_err(format!(
            "cycle detected in task graph through nodes {:?}",
            idx.iter()
                .map(|&i| nodes[i as usize].name.clone())
                .collect::<Vec<_>>()
        )),
        other => PyValueError::new_err(other.to_string()),
    })
}

/// Removes placeholder numbers: each internal node's number drops by the count of
/// placeholders numbered before it, which is what not consuming a number means.
fn drop_placeholders(mut prio: Vec<u32>, n_internal: usize) -> Vec<u32> {
    if n_internal == prio.len() {
        return prio;
    }
    let mut external: Vec<u32> = prio[n_internal..].to_vec();
    external.sort_unstable();
    prio.truncate(n_internal);
    for p in &mut prio {
        *p -= external.partition_point(|&e| e < *p) as u32;
    }
    prio
}

/// What a value's type says about it, decided once per type.
#[derive(Clone, Copy)]
enum Kind {
    /// `tuple`, `list`, `dict`, `str`, …: walked like `dask.core.get_dependencies`.
    Legacy,
    /// A `dask._task_spec.GraphNode`; `slot` if `.dependencies` is GraphNode's own
    /// property, so the `_dependencies` slot can be read directly.
    Spec { is_task: bool, slot: bool },
    /// Anything else: `.dependencies` if it has one (as `DependenciesMapping` asks),
    /// else walked like a legacy value.
    Other,
}

/// `dask._task_spec` classes, if dask is importable.
struct Classes<'py> {
    graph_node: Bound<'py, PyType>,
    data_node: Bound<'py, PyType>,
    task_ref: Bound<'py, PyType>,
    dependencies_property: Bound<'py, PyAny>,
}

impl<'py> Classes<'py> {
    fn load(py: Python<'py>) -> Option<Self> {
        let m = py.import("dask._task_spec").ok()?;
        let class = |name: &str| -> Option<Bound<'py, PyType>> {
            m.getattr(name).ok()?.cast_into::<PyType>().ok()
        };
        let graph_node = class("GraphNode")?;
        let dependencies_property = graph_node
            .getattr(intern!(py, "__dict__"))
            .ok()?
            .get_item("dependencies")
            .ok()?;
        Some(Classes {
            data_node: class("DataNode")?,
            task_ref: class("TaskRef")?,
            graph_node,
            dependencies_property,
        })
    }
}

struct Builder<'py> {
    py: Python<'py>,
    /// key → index, for the keys of the graph and then the external keys met.
    index: Bound<'py, PyDict>,
    keys: Vec<Bound<'py, PyAny>>,
    n_internal: usize,
    nodes: Vec<Node>,
    classes: Option<Classes<'py>>,
    kinds: Vec<(usize, Kind)>,
    work: Vec<Bound<'py, PyAny>>,
}

impl<'py> Builder<'py> {
    fn new(dsk: &Bound<'py, PyDict>) -> PyResult<Self> {
        let py = dsk.py();
        let n = dsk.len();
        let index = PyDict::new(py);
        let mut keys = Vec::with_capacity(n);
        for (i, k) in dsk.keys().iter().enumerate() {
            index.set_item(&k, i)?;
            keys.push(k);
        }
        Ok(Builder {
            py,
            index,
            keys,
            n_internal: n,
            nodes: Vec::with_capacity(n),
            classes: Classes::load(py),
            kinds: Vec::new(),
            work: Vec::new(),
        })
    }

    fn kind(&mut self, v: &Bound<'py, PyAny>) -> PyResult<Kind> {
        let ty = v.get_type_ptr() as usize;
        if let Some(&(_, kind)) = self.kinds.iter().find(|(t, _)| *t == ty) {
            return Ok(kind);
        }
        let kind = self.classify(v)?;
        self.kinds.push((ty, kind));
        Ok(kind)
    }

    fn classify(&self, v: &Bound<'py, PyAny>) -> PyResult<Kind> {
        if v.is_exact_instance_of::<PyTuple>()
            || v.is_exact_instance_of::<PyList>()
            || v.is_exact_instance_of::<PyDict>()
            || v.is_exact_instance_of::<PyString>()
            || v.is_exact_instance_of::<PyInt>()
            || v.is_exact_instance_of::<PyBool>()
            || v.is_none()
        {
            return Ok(Kind::Legacy);
        }
        let Some(c) = &self.classes else {
            return Ok(Kind::Other);
        };
        if !v.is_instance(&c.graph_node)? {
            return Ok(Kind::Other);
        }
        let ty = v.get_type();
        let slot = match ty.getattr(intern!(self.py, "dependencies")) {
            // A class attribute lookup returns the property object itself.
            Ok(p) => p.is(&c.dependencies_property),
            Err(_) => false,
        };
        Ok(Kind::Spec {
            is_task: !v.is_instance(&c.data_node)?,
            slot,
        })
    }

    /// Adds node `i` (key `k`, value `v`).
    fn add(
        &mut self,
        i: usize,
        k: &Bound<'py, PyAny>,
        v: &Bound<'py, PyAny>,
        explicit: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        debug_assert_eq!(i, self.nodes.len());
        let py = self.py;
        let mut deps = Vec::new();
        let kind = self.kind(v)?;
        let is_task = match kind {
            Kind::Spec { is_task, .. } => is_task,
            Kind::Legacy => legacy_is_task(v),
            Kind::Other => false,
        };
        if let Some(ds) = explicit {
            for d in ds.try_iter()? {
                deps.push(self.index_or_external(&d?)?);
            }
        } else {
            let node_deps = match kind {
                Kind::Spec { slot: true, .. } => Some(v.getattr(intern!(py, "_dependencies"))?),
                Kind::Spec { slot: false, .. } => Some(v.getattr(intern!(py, "dependencies"))?),
                Kind::Legacy => None,
                Kind::Other => match v.getattr(intern!(py, "dependencies")) {
                    Ok(ds) => Some(ds),
                    Err(e) if e.is_instance_of::<PyAttributeError>(py) => None,
                    Err(e) => return Err(e),
                },
            };
            match node_deps {
                Some(ds) => {
                    if let Ok(fs) = ds.cast::<PyFrozenSet>() {
                        for d in fs.iter() {
                            deps.push(self.index_or_external(&d)?);
                        }
                    } else {
                        for d in ds.try_iter()? {
                            deps.push(self.index_or_external(&d?)?);
                        }
                    }
                }
                None => self.legacy_deps(v, &mut deps)?,
            }
        }
        self.nodes.push(Node {
            deps,
            is_task,
            name: key_str(k)?,
        });
        Ok(())
    }

    /// The index of key `d`, registering it as an external key if it is new.
    fn index_or_external(&mut self, d: &Bound<'py, PyAny>) -> PyResult<u32> {
        if let Some(i) = self.index.get_item(d)? {
            return i.extract();
        }
        let i = self.keys.len();
        self.index.set_item(d, i)?;
        self.keys.push(d.clone());
        Ok(i as u32)
    }

    /// `dask.core.keys_in_tasks(dsk, [v])`: the keys of the graph found in `v`.
    fn legacy_deps(&mut self, v: &Bound<'py, PyAny>, out: &mut Vec<u32>) -> PyResult<()> {
        let py = self.py;
        let mut work = std::mem::take(&mut self.work);
        work.push(v.clone());
        while let Some(w) = work.pop() {
            if let Ok(t) = w.cast_exact::<PyTuple>() {
                if legacy_is_task(&w) {
                    work.extend(t.iter().skip(1));
                    continue;
                }
            } else if let Ok(l) = w.cast_exact::<PyList>() {
                work.extend(l.iter());
                continue;
            } else if let Ok(d) = w.cast_exact::<PyDict>() {
                work.extend(d.values().iter());
                continue;
            } else if !w.is_exact_instance_of::<PyString>() && !w.is_exact_instance_of::<PyInt>() {
                if let Some(c) = &self.classes {
                    if w.is_instance(&c.graph_node)? {
                        let ds = w.getattr(intern!(py, "dependencies"))?;
                        for d in ds.try_iter()? {
                            work.push(d?);
                        }
                        continue;
                    }
                    if w.is_instance(&c.task_ref)? {
                        work.push(w.getattr(intern!(py, "key"))?);
                        continue;
                    }
                }
            }
            match self.index.get_item(&w) {
                // Only keys of the graph itself count here, not external ones.
                Ok(Some(i)) => {
                    let i: usize = i.extract()?;
                    if i < self.n_internal {
                        out.push(i as u32);
                    }
                }
                Ok(None) => {}
                Err(e) if e.is_instance_of::<PyTypeError>(py) => {} // unhashable
                Err(e) => {
                    self.work = work;
                    return Err(e);
                }
            }
        }
        self.work = work;
        Ok(())
    }

    /// The keys (graph, then external) and the nodes to order.
    fn finish(mut self) -> PyResult<(Vec<Bound<'py, PyAny>>, Vec<Node>)> {
        for k in &self.keys[self.n_internal..] {
            self.nodes.push(Node {
                deps: Vec::new(),
                is_task: false,
                name: key_str(k)?,
            });
        }
        self.keys.truncate(self.n_internal);
        Ok((self.keys, self.nodes))
    }
}

/// `dask.core.istask` for a value that is not a task-spec node.
fn legacy_is_task(v: &Bound<'_, PyAny>) -> bool {
    match v.cast_exact::<PyTuple>() {
        Ok(t) => t.get_item(0).is_ok_and(|f| f.is_callable()),
        Err(_) => false,
    }
}

/// Python's `str(k)`: built here for the usual key types (str, int and tuples of
/// those), through `str()`/`repr()` otherwise.
fn key_str(k: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = k.cast_exact::<PyString>() {
        return Ok(s.to_string_lossy().into_owned());
    }
    let mut out = String::new();
    if k.is_exact_instance_of::<PyTuple>() || k.is_exact_instance_of::<PyInt>() {
        repr_into(k, &mut out, 0)?;
    } else {
        out.push_str(&k.str()?.to_string_lossy());
    }
    Ok(out)
}

/// Appends `repr(ob)`.
fn repr_into(ob: &Bound<'_, PyAny>, out: &mut String, depth: usize) -> PyResult<()> {
    if let Ok(s) = ob.cast_exact::<PyString>() {
        if let Ok(text) = s.to_str() {
            // Printable ASCII without quotes or backslashes is repr'd verbatim.
            if text
                .bytes()
                .all(|c| (b' '..=b'~').contains(&c) && c != b'\'' && c != b'"' && c != b'\\')
            {
                out.push('\'');
                out.push_str(text);
                out.push('\'');
                return Ok(());
            }
        }
    } else if ob.is_exact_instance_of::<PyInt>() {
        if let Ok(i) = ob.extract::<i64>() {
            write!(out, "{i}").expect("writing to a String cannot fail");
            return Ok(());
        }
    } else if depth < 32 {
        if let Ok(t) = ob.cast_exact::<PyTuple>() {
            out.push('(');
            for (j, item) in t.iter().enumerate() {
                if j > 0 {
                    out.push_str(", ");
                }
                repr_into(&item, out, depth + 1)?;
            }
            if t.len() == 1 {
                out.push(',');
            }
            out.push(')');
            return Ok(());
        }
    }
    out.push_str(&ob.repr()?.to_string_lossy());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::drop_placeholders;

    #[test]
    fn placeholders_consume_no_number() {
        assert_eq!(drop_placeholders(vec![0, 2, 3, 1], 3), vec![0, 1, 2]);
        assert_eq!(drop_placeholders(vec![1, 0], 2), vec![1, 0]);
    }
}
