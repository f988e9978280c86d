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
    small.iter().all(|e| {
        let at = rest.partition_point(|x| x < e);
        let found = rest.get(at) == Some(e);
        rest = &rest[at..];
        found
    })
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
