//! Removal of non-task nodes that cannot influence memory use.
//!
//! Alias/list leaves (non-task, several dependencies) are taken out and
//! numbered from the top end straight away; data roots (non-task, several
//! dependents) are taken out and numbered later, just before the first of their
//! dependents. Removing them simplifies the topology the walk sees.

use crate::csr::Csr;
use crate::graph::Graph;

pub(crate) struct Normalized {
    pub(crate) alive: Vec<bool>,
    pub(crate) n_alive: usize,
    /// `(leaf, priority)` for every removed alias leaf; upstream's formula can
    /// go negative when most of the graph is alias leaves.
    pub(crate) fixed: Vec<(u32, i64)>,
    /// Per node, the removed data roots it needs, ascending.
    pub(crate) requires: Csr,
}

/// Scans run in ascending node index where upstream iterates hash sets.
pub(crate) fn normalize(g: &Graph, is_task: impl Fn(u32) -> bool) -> Normalized {
    let n = g.len();
    let mut alive = vec![true; n];
    let mut n_alive = n;
    let mut ndeps: Vec<u32> = (0..n as u32).map(|k| g.deps.degree(k) as u32).collect();
    let mut ndependents: Vec<u32> = (0..n as u32)
        .map(|k| g.dependents.degree(k) as u32)
        .collect();
    let mut is_leaf: Vec<bool> = ndependents.iter().map(|&c| c == 0).collect();
    let mut is_root: Vec<bool> = ndeps.iter().map(|&c| c == 0).collect();

    // A node that was checked once and kept can never become removable later
    // (its counts only shrink and it keeps being a root/leaf), so each pass only
    // needs to look at the leaves and roots created by the previous one.
    let mut leaf_candidates: Vec<u32> = (0..n as u32).filter(|&k| is_leaf[k as usize]).collect();
    let mut root_candidates: Vec<u32> = (0..n as u32).filter(|&k| is_root[k as usize]).collect();
    let mut fixed = Vec::new();
    let mut requires: Vec<(u32, u32)> = Vec::new();

    loop {
        let removed_before = fixed.len();
        let mut new_leaves = Vec::new();
        for &leaf in &leaf_candidates {
            let l = leaf as usize;
            if is_root[l] || is_task(leaf) || ndeps[l] <= 1 {
                continue;
            }
            // Upstream counts the graph size before deleting and subtracts the
            // removals so far, so consecutive removals step down by two.
            let prio = n_alive as i64 - 1 - fixed.len() as i64;
            fixed.push((leaf, prio));
            is_leaf[l] = false;
            alive[l] = false;
            n_alive -= 1;
            for &dep in g.deps.row(leaf) {
                let d = dep as usize;
                if alive[d] {
                    ndependents[d] -= 1;
                    if ndependents[d] == 0 {
                        is_leaf[d] = true;
                        new_leaves.push(dep);
                    }
                }
            }
        }
        let removed_leaves = fixed.len() > removed_before;

        let mut new_roots = Vec::new();
        for &root in &root_candidates {
            let r = root as usize;
            if is_leaf[r] || is_task(root) || ndependents[r] <= 1 {
                continue;
            }
            alive[r] = false;
            is_root[r] = false;
            n_alive -= 1;
            for &dependent in g.dependents.row(root) {
                let d = dependent as usize;
                if alive[d] {
                    requires.push((dependent, root));
                    ndeps[d] -= 1;
                    if ndeps[d] == 0 {
                        is_root[d] = true;
                        new_roots.push(dependent);
                    }
                }
            }
        }

        // Upstream only repeats when a leaf was removed in this pass.
        if !removed_leaves {
            break;
        }
        new_leaves.sort_unstable();
        new_roots.sort_unstable();
        leaf_candidates = new_leaves;
        root_candidates = new_roots;
    }

    requires.sort_unstable();
    Normalized {
        alive,
        n_alive,
        fixed,
        requires: Csr::from_pairs(n, &requires),
    }
}
