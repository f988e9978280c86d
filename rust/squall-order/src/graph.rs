//! The validated input graph in both directions.

use crate::csr::Csr;
use crate::{Input, OrderError};

pub(crate) struct Graph {
    /// Dependencies of each node, ascending and deduplicated.
    pub(crate) deps: Csr,
    /// Dependents of each node, ascending.
    pub(crate) dependents: Csr,
}

impl Graph {
    pub(crate) fn from_input(nodes: &dyn Input) -> Result<Self, OrderError> {
        let n = nodes.len();
        let mut scratch = Vec::new();
        let mut rows: Vec<u32> = Vec::with_capacity((0..n).map(|i| nodes.deps(i).len()).sum());
        let mut ends = Vec::with_capacity(n);
        for i in 0..n {
            scratch.clear();
            scratch.extend_from_slice(nodes.deps(i));
            if let Some(&dep) = scratch.iter().find(|&&d| d as usize >= n) {
                return Err(OrderError::BadIndex {
                    node: i as u32,
                    dep,
                });
            }
            // Callers are asked to deduplicate, but a repeated edge would corrupt
            // every dependency count below, so normalise defensively.
            scratch.sort_unstable();
            scratch.dedup();
            rows.extend_from_slice(&scratch);
            ends.push(rows.len());
        }
        let mut start = 0;
        let deps = Csr::from_rows(ends.iter().map(|&end| {
            let row = &rows[start..end];
            start = end;
            row
        }));
        let dependents = deps.transpose();
        Ok(Graph { deps, dependents })
    }

    /// The subgraph induced by the nodes still alive; dead nodes keep their
    /// index but lose every edge.
    pub(crate) fn restricted(&self, alive: &[bool]) -> Self {
        let deps = self.deps.restricted(alive);
        let dependents = deps.transpose();
        Graph { deps, dependents }
    }

    pub(crate) fn len(&self) -> usize {
        self.deps.len()
    }
}
