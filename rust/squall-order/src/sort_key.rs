//! Upstream's `sort_key`: `(total_dependencies, #dependencies, #roots reached,
//! -max_dependents, str(key))`, compared lazily field by field.

use std::cmp::Ordering;

use crate::graph::Graph;
use crate::reach::Reach;
use crate::total::TotalDeps;
use crate::Input;

pub(crate) struct SortKeys<'g> {
    nodes: &'g dyn Input,
    g: &'g Graph,
    total: TotalDeps,
    max_dependents: Vec<u32>,
    /// Only consulted when the first two fields tie, which keeps the costly
    /// unions of root sets off most graphs.
    roots: Reach<'g>,
}

impl<'g> SortKeys<'g> {
    pub(crate) fn new(
        nodes: &'g dyn Input,
        g: &'g Graph,
        topo: &[u32],
        max_dependents: Vec<u32>,
    ) -> Self {
        SortKeys {
            nodes,
            g,
            total: TotalDeps::compute(&g.deps, topo),
            max_dependents,
            roots: Reach::new(&g.deps, &g.dependents, topo.iter().copied()),
        }
    }

    /// Upstream's `len(roots_connected[k])`: roots map to the empty set.
    fn roots_reached(&mut self, k: u32) -> u32 {
        if self.g.deps.degree(k) == 0 {
            0
        } else {
            self.roots.count(k)
        }
    }

    /// Total order: equal upstream keys (duplicate names) fall back to index.
    pub(crate) fn cmp(&mut self, a: u32, b: u32) -> Ordering {
        if a == b {
            return Ordering::Equal;
        }
        self.total
            .cmp(a, b)
            .then_with(|| self.g.deps.degree(a).cmp(&self.g.deps.degree(b)))
            .then_with(|| {
                let ra = self.roots_reached(a);
                ra.cmp(&self.roots_reached(b))
            })
            .then_with(|| self.max_dependents[b as usize].cmp(&self.max_dependents[a as usize]))
            .then_with(|| self.nodes.name(a as usize).cmp(self.nodes.name(b as usize)))
            .then_with(|| a.cmp(&b))
    }

    /// First element with the smallest key.
    pub(crate) fn min_of(&mut self, items: impl IntoIterator<Item = u32>) -> Option<u32> {
        items
            .into_iter()
            .reduce(|best, x| if self.cmp(x, best).is_lt() { x } else { best })
    }

    /// First element with the largest key.
    pub(crate) fn max_of(&mut self, items: impl IntoIterator<Item = u32>) -> Option<u32> {
        items
            .into_iter()
            .reduce(|best, x| if self.cmp(x, best).is_gt() { x } else { best })
    }

    pub(crate) fn sort(&mut self, items: &mut [u32]) {
        items.sort_by(|&a, &b| self.cmp(a, b));
    }
}
