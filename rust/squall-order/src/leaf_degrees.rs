//! Leaves bucketed by how many of their roots are still unnumbered.

const NONE: u32 = u32::MAX;

/// Buckets are intrusive doubly linked lists so moving a leaf is O(1) and no
/// per-bucket allocation is needed.
#[derive(Clone)]
pub(crate) struct LeafDegrees {
    /// Current degree per node; 0 for nodes that are not tracked.
    degree: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    head: Vec<u32>,
    len: Vec<u32>,
    /// Lowest non-empty bucket, or `max` once all have drained.
    pub(crate) min: u32,
    /// Upstream's sentinel: the working graph size.
    pub(crate) max: u32,
}

impl LeafDegrees {
    /// `leaves` are `(leaf, degree)` with degree ≥ 1; `graph_size` is the
    /// number of live nodes.
    pub(crate) fn new(n: usize, leaves: &[(u32, u32)], graph_size: u32) -> Self {
        let top = leaves.iter().map(|&(_, d)| d).max().unwrap_or(0);
        let mut buckets = LeafDegrees {
            degree: vec![0; n],
            next: vec![NONE; n],
            prev: vec![NONE; n],
            head: vec![NONE; top as usize + 1],
            len: vec![0; top as usize + 1],
            min: graph_size,
            max: graph_size.max(top),
        };
        for &(leaf, d) in leaves {
            buckets.insert(leaf, d);
            buckets.min = buckets.min.min(d);
        }
        buckets
    }

    pub(crate) fn degree(&self, leaf: u32) -> u32 {
        self.degree[leaf as usize]
    }

    pub(crate) fn bucket_len(&self, d: u32) -> usize {
        self.len.get(d as usize).map_or(0, |&l| l as usize)
    }

    /// Members of bucket `d`, in no particular order.
    pub(crate) fn bucket(&self, d: u32) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.head.get(d as usize).copied().unwrap_or(NONE);
        std::iter::from_fn(move || {
            (cur != NONE).then(|| {
                let leaf = cur;
                cur = self.next[leaf as usize];
                leaf
            })
        })
    }

    /// One more root of `leaf` got numbered.
    pub(crate) fn decrement(&mut self, leaf: u32) {
        let d = self.degree[leaf as usize];
        if d == 0 {
            return;
        }
        self.remove(leaf);
        let new = d - 1;
        if new > 0 {
            self.min = self.min.min(new);
            self.insert(leaf, new);
        } else if self.len[d as usize] == 0 {
            // The lowest bucket just drained: move up to the next non-empty one.
            while self.min != self.max && self.bucket_len(self.min) == 0 {
                self.min += 1;
                if self.min as usize >= self.len.len() {
                    // No bucket exists above: all drained.
                    self.min = self.max;
                }
            }
        }
    }

    fn insert(&mut self, leaf: u32, d: u32) {
        let old_head = self.head[d as usize];
        self.next[leaf as usize] = old_head;
        self.prev[leaf as usize] = NONE;
        if old_head != NONE {
            self.prev[old_head as usize] = leaf;
        }
        self.head[d as usize] = leaf;
        self.len[d as usize] += 1;
        self.degree[leaf as usize] = d;
    }

    fn remove(&mut self, leaf: u32) {
        let d = self.degree[leaf as usize];
        let (p, nx) = (self.prev[leaf as usize], self.next[leaf as usize]);
        if p == NONE {
            self.head[d as usize] = nx;
        } else {
            self.next[p as usize] = nx;
        }
        if nx != NONE {
            self.prev[nx as usize] = p;
        }
        self.len[d as usize] -= 1;
        self.degree[leaf as usize] = 0;
    }
}
