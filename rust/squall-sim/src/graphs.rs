//! Ready-made graphs of the shapes the scheduling policies are about. Keys are
//! `(name, i, …)` tuples, so each layer is one task group, as in dask collections.

use crate::graph::SimGraph;
use crate::rng::SplitMix64;
use squall_core::Key;

/// What one task costs: compute seconds and result bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub duration: f64,
    pub nbytes: u64,
}

impl Cost {
    pub const fn new(duration: f64, nbytes: u64) -> Self {
        Cost { duration, nbytes }
    }
}

fn key(name: &str, idx: &[usize]) -> Key {
    let idx: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
    Key::tuple_str_ints(name, &idx)
}

/// `n` independent tasks `(name, i)` (a `client.map`).
pub fn map(name: &str, n: usize, cost: Cost) -> SimGraph {
    let mut g = SimGraph::new();
    for i in 0..n {
        g.add(key(name, &[i]), &[], cost.duration, cost.nbytes);
    }
    g
}

/// Combines `inputs` `fan_in` at a time into one task `(name, level, j)`; returns it.
fn reduce_into(
    g: &mut SimGraph,
    name: &str,
    mut inputs: Vec<usize>,
    fan_in: usize,
    cost: Cost,
) -> usize {
    let mut level = 0;
    while inputs.len() > 1 {
        inputs = inputs
            .chunks(fan_in)
            .enumerate()
            .map(|(j, chunk)| g.add(key(name, &[level, j]), chunk, cost.duration, cost.nbytes))
            .collect();
        level += 1;
    }
    inputs[0]
}

/// A binary tree reduction: `n` leaves `(name, i)`, combined pairwise by
/// `(name-sum, level, j)` tasks.
pub fn tree_reduction(name: &str, n: usize, leaf: Cost, combine: Cost) -> SimGraph {
    let mut g = map(name, n, leaf);
    let leaves = (0..n).collect();
    reduce_into(&mut g, &format!("{name}-sum"), leaves, 2, combine);
    g
}

/// `n` roots `(name, i)`, each with one dependent `(name-inc, i)`, then a binary tree
/// reduction of the dependents.
pub fn wide_then_reduce(name: &str, n: usize, root: Cost, mid: Cost, combine: Cost) -> SimGraph {
    let mut g = map(name, n, root);
    let inc = format!("{name}-inc");
    let mids = (0..n)
        .map(|i| g.add(key(&inc, &[i]), &[i], mid.duration, mid.nbytes))
        .collect();
    reduce_into(&mut g, &format!("{name}-sum"), mids, 2, combine);
    g
}

/// `(a + b).sum()`: two groups of `n` roots `(name-a, i)` and `(name-b, i)`, added
/// elementwise by `(name-add, i)`, then a binary tree reduction. Co-assignment works
/// per group, so without queuing a(i) and b(i) tend to land on different workers.
pub fn zip_then_reduce(name: &str, n: usize, root: Cost, add: Cost, combine: Cost) -> SimGraph {
    let mut g = map(&format!("{name}-a"), n, root);
    let b = format!("{name}-b");
    for i in 0..n {
        g.add(key(&b, &[i]), &[], root.duration, root.nbytes);
    }
    let add_name = format!("{name}-add");
    let sums = (0..n)
        .map(|i| g.add(key(&add_name, &[i]), &[i, n + i], add.duration, add.nbytes))
        .collect();
    reduce_into(&mut g, &format!("{name}-sum"), sums, 2, combine);
    g
}

/// `(x + x.T).sum()` on an `n × n` grid of blocks: blocks `(name, i, j)` are created
/// (data producers); `(name-add, i, j)` needs blocks (i, j) and (j, i); each sum is
/// reduced to a scalar per block, then aggregated 4 at a time.
pub fn x_plus_xt_sum(name: &str, n: usize, block: Cost, op_seconds: f64) -> SimGraph {
    let mut g = SimGraph::new();
    for i in 0..n {
        for j in 0..n {
            let b = g.add(key(name, &[i, j]), &[], block.duration, block.nbytes);
            g.tasks[b].data_producer = true;
        }
    }
    // Blocks were added row by row.
    let x = |i: usize, j: usize| i * n + j;
    let (add, chunk) = (format!("{name}-add"), format!("{name}-sum-chunk"));
    let mut partials = Vec::with_capacity(n * n);
    for i in 0..n {
        for j in 0..n {
            let a = g.add(
                key(&add, &[i, j]),
                &[x(i, j), x(j, i)],
                op_seconds,
                block.nbytes,
            );
            partials.push(g.add(key(&chunk, &[i, j]), &[a], op_seconds, 8));
        }
    }
    let agg = Cost::new(op_seconds, 8);
    reduce_into(&mut g, &format!("{name}-sum-agg"), partials, 4, agg);
    g
}

/// Parameters of [`random_dag`].
#[derive(Clone, Debug, PartialEq)]
pub struct RandomDag {
    pub n: usize,
    /// Each task draws 0..=max_deps dependencies…
    pub max_deps: usize,
    /// …among the `window` tasks created just before it (locality, like real graphs).
    pub window: usize,
    /// Uniform ranges (inclusive).
    pub duration: (f64, f64),
    pub nbytes: (u64, u64),
    pub seed: u64,
}

impl Default for RandomDag {
    fn default() -> Self {
        RandomDag {
            n: 100,
            max_deps: 3,
            window: 20,
            duration: (0.1, 1.0),
            nbytes: (1_000, 10_000_000),
            seed: 0,
        }
    }
}

/// A random DAG; the same parameters always give the same graph. A task's group is its
/// depth (`(name-d<depth>, i)`).
pub fn random_dag(name: &str, p: &RandomDag) -> SimGraph {
    let mut rng = SplitMix64::new(p.seed);
    let mut g = SimGraph::new();
    let mut depth = Vec::with_capacity(p.n);
    for i in 0..p.n {
        let lo = i.saturating_sub(p.window);
        let mut deps: Vec<usize> = Vec::new();
        if i > lo {
            for _ in 0..rng.range_u64(0, p.max_deps as u64) {
                deps.push(lo + rng.below((i - lo) as u64) as usize);
            }
        }
        deps.sort_unstable();
        deps.dedup();
        let d = deps.iter().map(|&x| depth[x] + 1).max().unwrap_or(0);
        depth.push(d);
        let duration = rng.range_f64(p.duration.0, p.duration.1);
        let nbytes = rng.range_u64(p.nbytes.0, p.nbytes.1);
        g.add(key(&format!("{name}-d{d}"), &[i]), &deps, duration, nbytes);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_the_expected_sizes_and_single_sinks() {
        let c = Cost::new(1.0, 10);
        assert_eq!(map("m", 5, c).len(), 5);
        let t = tree_reduction("t", 8, c, c);
        assert_eq!((t.len(), t.sinks().len()), (15, 1));
        let w = wide_then_reduce("w", 8, c, c, c);
        assert_eq!((w.len(), w.sinks().len()), (8 + 8 + 7, 1));
        let z = zip_then_reduce("z", 8, c, c, c);
        assert_eq!((z.len(), z.sinks().len()), (8 + 8 + 8 + 7, 1));
        let x = x_plus_xt_sum("x", 3, c, 0.1);
        // 9 blocks, 9 adds, 9 chunk sums, 3 + 1 aggregates.
        assert_eq!((x.len(), x.sinks().len()), (31, 1));
    }

    #[test]
    fn random_dag_is_reproducible_and_acyclic() {
        let p = RandomDag {
            seed: 42,
            ..RandomDag::default()
        };
        let a = random_dag("r", &p);
        assert_eq!(a, random_dag("r", &p));
        assert_ne!(a, random_dag("r", &RandomDag { seed: 43, ..p }));
        for (i, t) in a.tasks.iter().enumerate() {
            for d in &t.deps {
                assert!(matches!(d, squall_core::DepRef::Local(j) if (*j as usize) < i));
            }
        }
    }
}
