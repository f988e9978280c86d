//! For every root, the leaves it feeds (upstream's `leafs_connected`).

use crate::graph::Graph;
use crate::reach::{Atoms, Reach};

const NONE: u32 = u32::MAX;

pub(crate) struct LeafLinks<'g> {
    /// Reachability on the reversed graph, whose sources are the leaves.
    reach: Reach<'g>,
    /// Per atom, its range in `leaves`; atoms feed disjoint leaf sets, so all
    /// expansions together hold each leaf at most once.
    span: Vec<(u32, u32)>,
    leaves: Vec<u32>,
}

impl<'g> LeafLinks<'g> {
    /// `topo` lists the live nodes dependencies-first; `roots` are the live
    /// roots that are not also leaves.
    pub(crate) fn new(g: &'g Graph, topo: &[u32], roots: &[u32]) -> Self {
        let mut links = LeafLinks {
            reach: Reach::new(&g.dependents, &g.deps, topo.iter().rev().copied()),
            span: vec![(NONE, 0); g.len()],
            leaves: Vec::new(),
        };
        let mut stack = Vec::new();
        for &root in roots {
            match links.reach.atoms(root) {
                Atoms::Itself => links.expand(g, root, &mut stack),
                Atoms::Set(id) => {
                    for i in 0..links.reach.set_elems(id).len() {
                        let atom = links.reach.set_elems(id)[i];
                        links.expand(g, atom, &mut stack);
                    }
                }
            }
        }
        links
    }

    /// Collects the leaves under a tree-like node; below it every node has a
    /// single dependency, so the search never meets a node twice.
    fn expand(&mut self, g: &Graph, atom: u32, stack: &mut Vec<u32>) {
        if self.span[atom as usize].0 != NONE {
            return;
        }
        let start = self.leaves.len() as u32;
        stack.push(atom);
        while let Some(k) = stack.pop() {
            let dependents = g.dependents.row(k);
            if dependents.is_empty() {
                self.leaves.push(k);
            } else {
                stack.extend(dependents.iter().rev());
            }
        }
        self.span[atom as usize] = (start, self.leaves.len() as u32 - start);
    }

    /// How many leaves `root` feeds.
    pub(crate) fn count(&mut self, root: u32) -> u32 {
        self.reach.count(root)
    }

    /// Calls `f` for every leaf fed by `root` (one of the roots given to `new`).
    pub(crate) fn for_each_leaf(&mut self, root: u32, mut f: impl FnMut(u32)) {
        let mut visit = |atom: u32| {
            let (start, len) = self.span[atom as usize];
            for &leaf in &self.leaves[start as usize..(start + len) as usize] {
                f(leaf);
            }
        };
        match self.reach.atoms(root) {
            Atoms::Itself => visit(root),
            Atoms::Set(id) => self.reach.set_elems(id).iter().for_each(|&a| visit(a)),
        }
    }
}
