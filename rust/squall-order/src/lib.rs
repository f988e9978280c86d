//! Static task-graph ordering equivalent to `dask.order.order` (dask 2026.8).
//!
//! [`order`] numbers every node of a task graph the way a single-threaded,
//! memory-conscious execution would visit it: it follows a critical path
//! towards one output at a time, finishes branches before loading new roots,
//! and runs cheap freely runnable side branches when that releases memory.
//! Lower numbers run earlier; the scheduler uses them as tie-breakers.
//!
//! # Fidelity to upstream
//!
//! The algorithm is a port of upstream's: graph normalisation, the sort key
//! `(total dependencies, #dependencies, #roots reached, −max dependents,
//! name)`, leaf-degree buckets, the longest-path strategy switch, the
//! critical-path walk and runnable-path processing. Upstream iterates several
//! hash sets; here every such iteration is in **ascending node index**:
//!
//! * normalisation scans leaves and roots in index order, which fixes the
//!   numbers given to removed alias leaves and the order in which removed
//!   data roots are numbered (ascending index, just before their first user);
//! * the roots scanned by the longest-path switch;
//! * the dependents made ready when a node is numbered (so the runnable list
//!   is processed from the highest index down);
//! * the unnumbered dependencies pushed while building a critical path (so
//!   the highest index is walked first).
//!
//! Keys that compare equal including `name` (possible when different Python
//! keys share a `str`) are ordered by index. Upstream reports results under
//! different hash orders as "equivalent, not identical"; on graphs where hash
//! order cannot matter the output is identical to upstream's.
//!
//! Where upstream misbehaves, this crate does the following instead:
//!
//! * Removed alias leaves are numbered from the top end with upstream's
//!   formula, which can repeat numbers and undercut their inputs' numbers
//!   (reproduced) and, when alias leaves make up most of the graph, go
//!   negative: then all numbers are shifted up by the same amount so the
//!   smallest is 0.
//! * A removed data root all of whose users were later removed as alias
//!   leaves is never reached by the walk (upstream fails with an
//!   `IndexError`); such nodes are numbered last, in index order.
//! * Running a reducer's stored paths can, in principle, stall with every
//!   path blocked (upstream would loop forever); the attempt is abandoned and
//!   the walk carries on.
//! * `total_dependencies` counts shared ancestors once per path and grows
//!   exponentially on lattice-like graphs; it is compared exactly, as with
//!   Python integers.
//!
//! # External keys
//!
//! Dependencies outside the graph (e.g. existing futures) are best omitted
//! from `deps`. Passing one instead as a non-task node without dependencies
//! reproduces upstream's placeholder exactly in structure; it then receives a
//! number of its own, which the caller discards (upstream does not consume a
//! number for it, so later numbers differ by a constant per placeholder, but
//! the relative order is the same).
//!
//! # Cost
//!
//! Upstream materialises, per node, the set of roots it descends from and of
//! leaves it feeds. Here sizes are computed from a tree decomposition where
//! possible, and unions of shared sub-results are only built (and interned)
//! for the nodes whose comparisons need them; see `reach`. A million-node
//! reduction, map or independent-task graph orders in well under a second.

mod csr;
mod graph;
mod index_set;
mod leaf_degrees;
mod leaf_links;
mod metrics;
mod normalize;
mod reach;
mod sort_key;
mod total;
mod walk;

/// One node of the graph to order. Indices refer to positions in the `nodes` slice.
pub struct Node {
    /// Indices of this node's dependencies (deduplicated by the caller; order irrelevant).
    pub deps: Vec<u32>,
    /// true if the node is a runnable task (dask `istask`), false for a pure data/alias/list node.
    pub is_task: bool,
    /// Python `str(key)` of the node's key, the final deterministic tie-break of sort_key.
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// Some node indices on a dependency cycle, each depending on the next
    /// (at most 10 are shown).
    #[error("cycle detected in task graph involving: {0:?}")]
    Cycle(Vec<u32>),
    #[error("dependency index {dep} of node {node} is out of range")]
    BadIndex { node: u32, dep: u32 },
}

/// Returns `priority[i]` for every node `i`: a permutation-like numbering (lower runs earlier)
/// equivalent to dask.order.order on the same graph.
///
/// # Panics
///
/// If `nodes` has `u32::MAX` entries or more.
pub fn order(nodes: &[Node]) -> Result<Vec<u32>, OrderError> {
    assert!(
        nodes.len() < u32::MAX as usize,
        "graph too large for u32 indices"
    );
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let input = graph::Graph::from_nodes(nodes)?;
    let norm = normalize::normalize(&input, |k| nodes[k as usize].is_task);
    let g = if norm.n_alive == nodes.len() {
        input
    } else {
        input.restricted(&norm.alive)
    };
    let metrics = metrics::Metrics::compute(&g, &norm.alive, norm.n_alive)?;
    let priorities = walk::Walk::new(nodes, &g, &norm, metrics).run();
    let shift = priorities.iter().copied().min().unwrap_or(0).min(0);
    Ok(priorities.into_iter().map(|p| (p - shift) as u32).collect())
}
