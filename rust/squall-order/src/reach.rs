//! Which sources each node is connected to, without a set per node.
//!
//! Upstream keeps, for every node, the frozenset of roots it descends from
//! (and, on the reversed graph, of leaves it feeds), sharing identical sets.
//! The walk only needs the *sizes* of those sets and, per root, the leaves it
//! feeds, so this module stores far less:
//!
//! * A node is *tree-like* when every in-neighbour has it as its only
//!   out-neighbour and is tree-like itself: its in-closure is a tree, each
//!   source in it has exactly one path to the node, and no other node reaches
//!   those sources except through it. Its source count is a plain sum.
//! * Any other node reaches a union of disjoint tree-like "atoms" (tree-like
//!   in-neighbours of non-tree-like nodes). Those unions are computed only on
//!   demand, as sorted atom lists interned so equal unions are stored once.
//!
//! "In" means towards the sources: dependencies when sources are roots,
//! dependents when sources are leaves.

use rustc_hash::FxHashMap;

use crate::csr::Csr;

const NONE: u32 = u32::MAX;

/// From this many input sets on, unions are built by one sort instead of
/// repeated pairwise merges.
const WIDE_UNION: usize = 8;

pub(crate) struct Reach<'g> {
    ins: &'g Csr,
    tree: Vec<bool>,
    /// Number of sources behind a tree-like node (1 for a source).
    weight: Vec<u32>,
    /// Interned atom set of a non-tree-like node, `NONE` until needed.
    set_of: Vec<u32>,
    sets: SetArena,
    stack: Vec<(u32, usize)>,
    atoms: Vec<u32>,
    ids: Vec<u32>,
    merged: Vec<u32>,
    spare: Vec<u32>,
}

impl<'g> Reach<'g> {
    /// `from_sources` lists the live nodes, each after all its in-neighbours.
    pub(crate) fn new(ins: &'g Csr, outs: &Csr, from_sources: impl Iterator<Item = u32>) -> Self {
        let n = ins.len();
        let mut tree = vec![false; n];
        let mut weight = vec![0u32; n];
        for k in from_sources {
            let row = ins.row(k);
            let is_tree = row.iter().all(|&d| tree[d as usize] && outs.degree(d) == 1);
            if is_tree {
                tree[k as usize] = true;
                weight[k as usize] = if row.is_empty() {
                    1
                } else {
                    row.iter().map(|&d| weight[d as usize]).sum()
                };
            }
        }
        Reach {
            ins,
            tree,
            weight,
            set_of: vec![NONE; n],
            sets: SetArena::default(),
            stack: Vec::new(),
            atoms: Vec::new(),
            ids: Vec::new(),
            merged: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Number of distinct sources reachable from `k` (a source counts itself).
    pub(crate) fn count(&mut self, k: u32) -> u32 {
        if self.tree[k as usize] {
            self.weight[k as usize]
        } else {
            let id = self.ensure_set(k);
            self.sets.weight[id as usize]
        }
    }

    /// The atoms behind `k`.
    pub(crate) fn atoms(&mut self, k: u32) -> Atoms {
        if self.tree[k as usize] {
            Atoms::Itself
        } else {
            Atoms::Set(self.ensure_set(k))
        }
    }

    pub(crate) fn set_elems(&self, id: u32) -> &[u32] {
        self.sets.elems(id)
    }

    /// Computes the atom sets of `k` and of every non-tree-like node behind it
    /// that lacks one, in post-order, without recursion.
    fn ensure_set(&mut self, k: u32) -> u32 {
        if self.set_of[k as usize] == NONE {
            self.stack.push((k, 0));
            'frames: while let Some(&(x, start)) = self.stack.last() {
                let row = self.ins.row(x);
                for (pos, &d) in row.iter().enumerate().skip(start) {
                    if !self.tree[d as usize] && self.set_of[d as usize] == NONE {
                        let top = self.stack.len() - 1;
                        self.stack[top].1 = pos + 1;
                        self.stack.push((d, 0));
                        continue 'frames;
                    }
                }
                self.stack.pop();
                let id = self.union_of(x);
                self.set_of[x as usize] = id;
            }
        }
        self.set_of[k as usize]
    }

    /// The atom set of a non-tree-like node whose in-neighbours are all known.
    fn union_of(&mut self, x: u32) -> u32 {
        self.atoms.clear();
        self.ids.clear();
        for &d in self.ins.row(x) {
            if self.tree[d as usize] {
                self.atoms.push(d);
            } else {
                self.ids.push(self.set_of[d as usize]);
            }
        }
        self.ids.sort_unstable();
        self.ids.dedup();
        if self.atoms.is_empty() && self.ids.len() == 1 {
            return self.ids[0];
        }
        // Grow the largest input set by whatever the others add; when they add
        // nothing (common on dense graphs, where paths share ancestors) the
        // input set itself is the answer.
        let base = self
            .ids
            .iter()
            .copied()
            .max_by_key(|&id| self.sets.elems(id).len());
        let base_elems = base.map_or(&[][..], |id| self.sets.elems(id));
        let mut grown = false;
        if self.ids.len() < WIDE_UNION {
            let others = std::iter::once(&self.atoms[..]).chain(
                self.ids
                    .iter()
                    .filter(|&&id| Some(id) != base)
                    .map(|&id| self.sets.elems(id)),
            );
            for other in others {
                let current = if grown { &self.merged[..] } else { base_elems };
                if is_subset(other, current) {
                    continue;
                }
                if !grown {
                    self.merged.clear();
                    self.merged.extend_from_slice(base_elems);
                    grown = true;
                }
                merge_sorted(&mut self.merged, other, &mut self.spare);
            }
        } else if !is_subset(&self.atoms, base_elems)
            || self
                .ids
                .iter()
                .any(|&id| !is_subset(self.sets.elems(id), base_elems))
        {
            // Many inputs: one sort beats repeated pairwise merges.
            self.merged.clear();
            self.merged.extend_from_slice(&self.atoms);
            for &id in &self.ids {
                self.merged.extend_from_slice(self.sets.elems(id));
            }
            self.merged.sort_unstable();
            self.merged.dedup();
            grown = true;
        }
        match base {
            Some(id) if !grown => id,
            _ => {
                let weight = &self.weight;
                self.sets.intern(&self.merged, |a| weight[a as usize])
            }
        }
    }
}

/// Whether sorted `small` ⊆ sorted `big`; the range test settles most misses.
fn is_subset(small: &[u32], big: &[u32]) -> bool {
    let (Some(first), Some(last)) = (small.first(), small.last()) else {
        return true;
    };
    if small.len() > big.len() || big.first() > Some(first) || big.last() < Some(last) {
        return false;
    }
    let mut rest = big;
    if big.len() <= 8 * small.len() {
        // Comparable sizes: walk both lists.
        small.iter().all(|e| {
            let skip = rest.iter().take_while(|&x| x < e).count();
            rest = &rest[skip..];
            rest.first() == Some(e)
        })
    } else {
        small.iter().all(|e| {
            let at = rest.partition_point(|x| x < e);
            rest = &rest[at..];
            rest.first() == Some(e)
        })
    }
}

/// `acc ∪= other`, both sorted and duplicate-free; `spare` is scratch space.
fn merge_sorted(acc: &mut Vec<u32>, other: &[u32], spare: &mut Vec<u32>) {
    spare.clear();
    spare.reserve(acc.len() + other.len());
    let (mut i, mut j) = (0, 0);
    while i < acc.len() && j < other.len() {
        let (a, b) = (acc[i], other[j]);
        spare.push(a.min(b));
        i += usize::from(a <= b);
        j += usize::from(b <= a);
    }
    spare.extend_from_slice(&acc[i..]);
    spare.extend_from_slice(&other[j..]);
    std::mem::swap(acc, spare);
}

#[derive(Clone, Copy)]
pub(crate) enum Atoms {
    /// The node is tree-like: it is its own single atom.
    Itself,
    /// An interned set, read with [`Reach::set_elems`].
    Set(u32),
}

/// Hash-consed sorted atom lists.
#[derive(Default)]
struct SetArena {
    elems: Vec<u32>,
    spans: Vec<(usize, usize)>,
    /// Sum of atom weights, i.e. the number of sources reached.
    weight: Vec<u32>,
    first_by_hash: FxHashMap<u64, u32>,
    next_same_hash: Vec<u32>,
}

impl SetArena {
    fn elems(&self, id: u32) -> &[u32] {
        let (start, end) = self.spans[id as usize];
        &self.elems[start..end]
    }

    fn intern(&mut self, sorted: &[u32], weight_of: impl Fn(u32) -> u32) -> u32 {
        use std::hash::{Hash, Hasher};
        let mut hasher = rustc_hash::FxHasher::default();
        sorted.hash(&mut hasher);
        let hash = hasher.finish();
        let mut candidate = self.first_by_hash.get(&hash).copied().unwrap_or(NONE);
        while candidate != NONE {
            if self.elems(candidate) == sorted {
                return candidate;
            }
            candidate = self.next_same_hash[candidate as usize];
        }
        let id = self.spans.len() as u32;
        let start = self.elems.len();
        self.elems.extend_from_slice(sorted);
        self.spans.push((start, self.elems.len()));
        self.weight.push(sorted.iter().map(|&a| weight_of(a)).sum());
        self.next_same_hash
            .push(self.first_by_hash.insert(hash, id).unwrap_or(NONE));
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random DAG edges `i → j` (j < i) in CSR form, both directions.
    fn random_dag(seed: u64, n: usize, max_ins: u64) -> (Csr, Csr) {
        let mut state = seed;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let rows: Vec<Vec<u32>> = (0..n)
            .map(|i| {
                let mut row: Vec<u32> = if i == 0 {
                    vec![]
                } else {
                    (0..next(max_ins + 1))
                        .map(|_| next(i as u64) as u32)
                        .collect()
                };
                row.sort_unstable();
                row.dedup();
                row
            })
            .collect();
        let ins = Csr::from_rows(rows.iter().map(Vec::as_slice));
        let outs = ins.transpose();
        (ins, outs)
    }

    fn brute_force_count(ins: &Csr, k: u32) -> u32 {
        let mut seen = vec![false; ins.len()];
        let mut stack = vec![k];
        let mut sources = 0;
        while let Some(x) = stack.pop() {
            if std::mem::replace(&mut seen[x as usize], true) {
                continue;
            }
            if ins.degree(x) == 0 {
                sources += 1;
            }
            stack.extend_from_slice(ins.row(x));
        }
        sources
    }

    #[test]
    fn counts_match_brute_force() {
        for (seed, n, max_ins) in [
            (1, 50, 2),
            (2, 200, 3),
            (3, 300, 12),
            (4, 120, 40),
            (5, 400, 1),
        ] {
            let (ins, outs) = random_dag(seed, n, max_ins);
            let mut reach = Reach::new(&ins, &outs, 0..n as u32);
            // Query in a scrambled order so sets get built from different ends.
            for k in (0..n as u32).map(|i| (i * 7919) % n as u32) {
                assert_eq!(reach.count(k), brute_force_count(&ins, k), "node {k}");
            }
        }
    }

    #[test]
    fn unions_merge_and_detect_subsets() {
        let mut acc = vec![1, 4, 9];
        merge_sorted(&mut acc, &[0, 4, 10], &mut Vec::new());
        assert_eq!(acc, [0, 1, 4, 9, 10]);
        assert!(is_subset(&[1, 9], &acc));
        assert!(is_subset(&[], &acc));
        assert!(!is_subset(&[2], &acc));
        assert!(!is_subset(&[0, 11], &acc));
        let big: Vec<u32> = (0..1000).map(|x| 2 * x).collect();
        assert!(is_subset(&[0, 500, 1998], &big));
        assert!(!is_subset(&[0, 501, 1998], &big));
    }
}
