//! `order_graph`: squall's `dask.order` equivalent over an index graph.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
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
    let ordered = py.detach(|| order(&nodes).map(|p| drop_placeholders(p, n_internal)));
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
