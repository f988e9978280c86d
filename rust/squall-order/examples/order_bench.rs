//! Times `order` on large synthetic graphs.
//!
//! ```text
//! cargo run --release -p squall-order --example order_bench [n_nodes] [only]
//! ```
//!
//! `only` restricts the run to graphs whose label contains it.

use std::time::Instant;

use squall_order::{order, Node};

/// Dask-like key text, so name comparisons cost what they cost in practice.
fn key(prefix: &str, i: usize) -> String {
    format!("('{prefix}-6f1c0d9e2b7a4c3f8e5d1a0b9c8d7e6f', {i})")
}

/// Binary reduction tree over `leaves` inputs (2·leaves − 1 nodes).
fn tree_reduction(leaves: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = (0..leaves)
        .map(|i| Node {
            deps: vec![],
            is_task: true,
            name: key("random_sample", i),
        })
        .collect();
    let (mut level_start, mut level_len, mut level) = (0, leaves, 0);
    while level_len > 1 {
        let next_start = nodes.len();
        for i in 0..level_len.div_ceil(2) {
            let a = level_start + 2 * i;
            let deps = if 2 * i + 1 < level_len {
                vec![a as u32, a as u32 + 1]
            } else {
                vec![a as u32]
            };
            nodes.push(Node {
                deps,
                is_task: true,
                name: format!("('sum-partial-{level}-6f1c0d9e2b7a4c3f', {i})"),
            });
        }
        (level_start, level_len, level) = (next_start, level_len.div_ceil(2), level + 1);
    }
    nodes
}

/// Independent chains `load → map → map → map`.
fn map_chains(chains: usize, length: usize) -> Vec<Node> {
    let mut nodes = Vec::with_capacity(chains * length);
    for step in 0..length {
        for c in 0..chains {
            nodes.push(Node {
                deps: if step == 0 {
                    vec![]
                } else {
                    vec![((step - 1) * chains + c) as u32]
                },
                is_task: true,
                name: key(&format!("map{step}"), c),
            });
        }
    }
    nodes
}

/// Tasks without any dependencies.
fn independent(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node {
            deps: vec![],
            is_task: true,
            name: key("submit", i),
        })
        .collect()
}

/// `(x + x.T).sum()` on an `side × side` grid of chunks, summed in a tree of
/// fan-in 4 the way dask.array's `split_every` does.
fn x_plus_xt_sum(side: usize) -> Vec<Node> {
    let idx = |i: usize, j: usize| i * side + j;
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..side {
        for j in 0..side {
            nodes.push(Node {
                deps: vec![],
                is_task: true,
                name: format!("('x', {i}, {j})"),
            });
        }
    }
    let cells = side * side;
    for i in 0..side {
        for j in 0..side {
            nodes.push(Node {
                deps: vec![idx(j, i) as u32],
                is_task: true,
                name: format!("('transpose', {i}, {j})"),
            });
        }
    }
    for i in 0..side {
        for j in 0..side {
            nodes.push(Node {
                deps: vec![idx(i, j) as u32, (cells + idx(i, j)) as u32],
                is_task: true,
                name: format!("('add', {i}, {j})"),
            });
        }
    }
    for i in 0..side {
        for j in 0..side {
            nodes.push(Node {
                deps: vec![(2 * cells + idx(i, j)) as u32],
                is_task: true,
                name: format!("('sum-chunk', {i}, {j})"),
            });
        }
    }
    let mut level: Vec<u32> = (3 * cells..4 * cells).map(|k| k as u32).collect();
    let mut depth = 0;
    while level.len() > 1 {
        let mut next = Vec::new();
        for (g, group) in level.chunks(4).enumerate() {
            next.push(nodes.len() as u32);
            nodes.push(Node {
                deps: group.to_vec(),
                is_task: true,
                name: format!("('sum-combine-{depth}', {g})"),
            });
        }
        level = next;
        depth += 1;
    }
    nodes
}

fn time(label: &str, build: impl FnOnce() -> Vec<Node>) {
    let only = std::env::args().nth(2).unwrap_or_default();
    if !label.contains(&only) {
        return;
    }
    let nodes = build();
    let start = Instant::now();
    let priorities = order(&nodes).expect("benchmark graphs are acyclic");
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(priorities.len(), nodes.len());
    println!("{label:<34} {:>9} nodes  {secs:>8.3} s", nodes.len());
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("n_nodes must be an integer"))
        .unwrap_or(1_000_000);
    time("binary tree reduction", || tree_reduction(n.div_ceil(2)));
    time("map chains (length 4)", || map_chains(n / 4, 4));
    time("independent tasks", || independent(n));
    time("(x + x.T).sum()", || {
        x_plus_xt_sum(((n / 4) as f64).sqrt() as usize)
    });
}
