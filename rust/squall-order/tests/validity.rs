//! Properties that must hold on any graph, error reporting, and the
//! upstream quirks that are reproduced on purpose.

mod common;

use std::time::Instant;

use common::{k1, Dsk};
use squall_order::{order, Node, OrderError};

/// xorshift64*: small, deterministic, good enough to shape test graphs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random DAG: node `i` may depend on any earlier node, then the indices
/// are shuffled so dependencies point both ways.
fn random_dag(rng: &mut Rng, n: usize, max_deps: u64, non_task_percent: u64) -> Vec<Node> {
    let mut perm: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut nodes: Vec<Node> = (0..n)
        .map(|_| Node {
            deps: vec![],
            is_task: true,
            name: String::new(),
        })
        .collect();
    for i in 0..n {
        let mut deps: Vec<u32> = if i == 0 {
            vec![]
        } else {
            (0..rng.below(max_deps + 1))
                .map(|_| perm[rng.below(i as u64) as usize])
                .collect()
        };
        deps.sort_unstable();
        deps.dedup();
        let node = &mut nodes[perm[i] as usize];
        node.deps = deps;
        node.is_task = rng.below(100) >= non_task_percent;
        node.name = format!("('n', {})", rng.below(10 * n as u64));
    }
    nodes
}

/// Every node runs after its dependencies, except alias leaves: upstream
/// removes non-task nodes with several inputs once nothing depends on them
/// (repeatedly, so a whole alias layer can go) and numbers them from the top
/// end with a formula that can undercut their inputs' numbers.
fn assert_valid(nodes: &[Node], prio: &[u32]) {
    assert_eq!(prio.len(), nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if !node.is_task && node.deps.len() > 1 {
            continue;
        }
        for &d in &node.deps {
            assert!(
                prio[d as usize] < prio[i],
                "node {i} runs before its dependency {d}"
            );
        }
    }
}

#[test]
fn random_task_graphs_get_a_topological_permutation() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..2000 {
        let n = 1 + rng.below([10, 40, 200][round % 3]) as usize;
        let max_deps = 1 + rng.below(6);
        let nodes = random_dag(&mut rng, n, max_deps, 0);
        let prio = order(&nodes).unwrap();
        assert_valid(&nodes, &prio);
        let mut sorted = prio.clone();
        sorted.sort_unstable();
        assert!(
            sorted.iter().enumerate().all(|(i, &p)| p == i as u32),
            "not a permutation"
        );
    }
}

#[test]
fn random_graphs_with_data_nodes_stay_valid() {
    let mut rng = Rng(42);
    for round in 0..2000 {
        let n = 1 + rng.below([10, 40, 200][round % 3]) as usize;
        let max_deps = 1 + rng.below(6);
        let nodes = random_dag(&mut rng, n, max_deps, [10, 30, 60][round % 3]);
        assert_valid(&nodes, &order(&nodes).unwrap());
    }
}

#[test]
fn output_does_not_depend_on_dependency_listing_order() {
    let mut rng = Rng(7);
    for _ in 0..300 {
        let mut nodes = random_dag(&mut rng, 60, 5, 20);
        let first = order(&nodes).unwrap();
        assert_eq!(order(&nodes).unwrap(), first, "not deterministic");
        for node in &mut nodes {
            node.deps.reverse();
            // Repeating an edge must not change anything either.
            if let Some(&d) = node.deps.first() {
                node.deps.push(d);
            }
        }
        assert_eq!(order(&nodes).unwrap(), first);
    }
}

/// The reported nodes must form a real cycle, each depending on the next.
fn assert_reports_cycle(nodes: &[Node]) {
    match order(nodes) {
        Err(OrderError::Cycle(cycle)) => {
            assert!(!cycle.is_empty());
            for (i, &k) in cycle.iter().enumerate() {
                let next = cycle[(i + 1) % cycle.len()];
                assert!(
                    nodes[k as usize].deps.contains(&next),
                    "{cycle:?} is not a cycle"
                );
            }
        }
        other => panic!("expected a cycle error, got {other:?}"),
    }
}

#[test]
fn cycles_are_reported_with_nodes_on_the_cycle() {
    let graph = |edges: &[&[u32]]| -> Vec<Node> {
        edges
            .iter()
            .enumerate()
            .map(|(i, deps)| Node {
                deps: deps.to_vec(),
                is_task: i != 3,
                name: format!("n{i}"),
            })
            .collect()
    };
    assert_reports_cycle(&graph(&[&[0]]));
    assert_reports_cycle(&graph(&[&[1], &[2], &[0]]));
    assert_reports_cycle(&graph(&[&[1], &[2], &[0, 3], &[]]));
    assert_reports_cycle(&graph(&[&[1], &[2], &[0, 3], &[1]]));
    // A valid prefix feeding a cycle, and a tail hanging off it.
    assert_reports_cycle(&graph(&[&[], &[0, 3], &[1], &[2], &[3]]));

    let err = order(&graph(&[&[1], &[0]])).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("cycle detected in task graph involving: ["));
}

#[test]
fn long_cycles_are_reported_in_part() {
    let n = 1000;
    let nodes: Vec<Node> = (0..n)
        .map(|i| Node {
            deps: vec![(i + 1) % n],
            is_task: true,
            name: format!("n{i}"),
        })
        .collect();
    match order(&nodes) {
        Err(OrderError::Cycle(shown)) => {
            assert!(!shown.is_empty() && shown.len() <= 10);
            for w in shown.windows(2) {
                assert!(nodes[w[0] as usize].deps.contains(&w[1]));
            }
        }
        other => panic!("expected a cycle error, got {other:?}"),
    }
}

#[test]
fn out_of_range_dependencies_are_rejected() {
    let nodes = vec![
        Node {
            deps: vec![],
            is_task: true,
            name: "a".into(),
        },
        Node {
            deps: vec![0, 7],
            is_task: true,
            name: "b".into(),
        },
    ];
    match order(&nodes) {
        Err(OrderError::BadIndex { node: 1, dep: 7 }) => {}
        other => panic!("expected BadIndex, got {other:?}"),
    }
}

#[test]
fn alias_leaves_are_numbered_from_the_top() {
    // A list node over two tasks is taken out and numbered last.
    let mut g = Dsk::new();
    g.root("t0");
    g.root("t1");
    g.data("y", &["t0", "t1"]);
    let o = g.order();
    assert_eq!(o["y"], 2);

    // Upstream's formula steps down by two per removal and goes negative
    // here (7, 5, 3, 1, -1, -3 for the lists; 0 and 1 for the values); all
    // numbers are shifted up by 3 to stay unsigned.
    let mut g = Dsk::new();
    g.value("a");
    g.value("b");
    for i in 0..6 {
        g.data(format!("x{i}"), &["a", "b"]);
    }
    let prio = g.try_order().unwrap();
    assert_eq!(prio, [4, 3, 10, 8, 6, 4, 2, 0]);
}

#[test]
fn shared_data_roots_are_numbered_just_before_their_first_user() {
    let mut g = Dsk::new();
    g.value("shared");
    for i in 0..3 {
        g.root(k1("load", i));
        g.task(k1("use", i), &["shared".to_owned(), k1("load", i)]);
    }
    let o = g.order();
    let first_user = (0..3).map(|i| o[&k1("use", i)]).min().unwrap();
    assert_eq!(o["shared"] + 1, first_user);
}

#[test]
fn data_root_whose_users_all_vanish_still_gets_a_number() {
    // "d" is removed as a shared data root; both of its users later become
    // alias leaves and are removed too. Upstream fails on this graph.
    let mut g = Dsk::new();
    for r in ["a", "b", "w"] {
        g.root(r);
    }
    g.value("d");
    g.data("x", &["d", "a", "b"]);
    g.data("y", &["d", "a", "b"]);
    g.data("zx", &["x", "w"]);
    g.data("zy", &["y", "w"]);
    let prio = g.try_order().unwrap();
    assert_eq!(prio.len(), g.len());
}

/// Two towers whose rungs each need both nodes of the rung below: totals
/// double per rung and outgrow u64, so only exact arithmetic tells them apart.
#[test]
fn huge_dependency_totals_are_compared_exactly() {
    let mut g = Dsk::new();
    for (tower, rungs) in [("tower-a", 70), ("tower-b", 69)] {
        let node = |r: i64, i: i64| format!("('{tower}', {r}, {i})");
        g.root(node(0, 0));
        g.root(node(0, 1));
        for r in 1..rungs {
            for i in 0..2 {
                g.task(node(r, i), &[node(r - 1, 0), node(r - 1, 1)]);
            }
        }
        g.task(
            format!("{tower}-top"),
            &[node(rungs - 1, 0), node(rungs - 1, 1)],
        );
    }
    g.task("out", &["tower-a-top", "tower-b-top"]);
    let o = g.order();
    // The taller tower has the larger total and is walked first, even though
    // the name tie-break would pick tower-b.
    assert!(o["tower-a-top"] < o["('tower-b', 0, 0)"]);
}

/// Binary reduction over `inputs` roots, built level by level.
fn tree_reduction(inputs: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = (0..inputs)
        .map(|i| Node {
            deps: vec![],
            is_task: true,
            name: format!("('load', {i})"),
        })
        .collect();
    let (mut start, mut len, mut level) = (0, inputs, 0);
    while len > 1 {
        let next = nodes.len();
        for i in 0..len.div_ceil(2) {
            let deps = ((start + 2 * i)..(start + 2 * i + 2).min(start + len))
                .map(|d| d as u32)
                .collect();
            nodes.push(Node {
                deps,
                is_task: true,
                name: format!("('sum-{level}', {i})"),
            });
        }
        (start, len, level) = (next, len.div_ceil(2), level + 1);
    }
    nodes
}

#[test]
#[ignore = "timing smoke test; run with --release -- --ignored"]
fn million_node_tree_reduction_orders_quickly() {
    let nodes = tree_reduction(500_000);
    assert!(nodes.len() > 999_000);
    let start = Instant::now();
    let prio = order(&nodes).unwrap();
    let elapsed = start.elapsed();
    println!("ordered {} nodes in {elapsed:?}", nodes.len());
    assert_valid(&nodes, &prio);
    if !cfg!(debug_assertions) {
        assert!(elapsed.as_secs_f64() < 1.0, "took {elapsed:?}");
    }
}
