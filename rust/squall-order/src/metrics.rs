//! Per-node numbers computed once before the walk.

use crate::graph::Graph;
use crate::OrderError;

/// Cycles are reported with at most this many of their nodes.
const CYCLE_REPORT_LEN: usize = 10;

pub(crate) struct Metrics {
    /// Live nodes, each after all of its dependencies.
    pub(crate) topo: Vec<u32>,
    /// For a root its number of dependents; otherwise the maximum over its
    /// dependencies, i.e. the largest fan-out among the roots it descends from.
    /// (Upstream skips dependencies with an identical root set, which cannot
    /// change a maximum of this kind.)
    pub(crate) max_dependents: Vec<u32>,
}

impl Metrics {
    pub(crate) fn compute(g: &Graph, alive: &[bool], n_alive: usize) -> Result<Self, OrderError> {
        let topo = topological_order(g, alive, n_alive)?;
        let mut max_dependents = vec![0u32; g.len()];
        for &k in &topo {
            let deps = g.deps.row(k);
            max_dependents[k as usize] = if deps.is_empty() {
                g.dependents.degree(k) as u32
            } else {
                deps.iter()
                    .map(|&d| max_dependents[d as usize])
                    .max()
                    .unwrap_or(0)
            };
        }
        Ok(Metrics {
            topo,
            max_dependents,
        })
    }
}

fn topological_order(g: &Graph, alive: &[bool], n_alive: usize) -> Result<Vec<u32>, OrderError> {
    let n = g.len();
    let mut waiting: Vec<u32> = (0..n as u32).map(|k| g.deps.degree(k) as u32).collect();
    let mut topo: Vec<u32> = (0..n as u32)
        .filter(|&k| alive[k as usize] && waiting[k as usize] == 0)
        .collect();
    topo.reserve(n_alive.saturating_sub(topo.len()));
    let mut next = 0;
    while next < topo.len() {
        let k = topo[next];
        next += 1;
        for &d in g.dependents.row(k) {
            waiting[d as usize] -= 1;
            if waiting[d as usize] == 0 {
                topo.push(d);
            }
        }
    }
    if topo.len() == n_alive {
        return Ok(topo);
    }
    let start = (0..n as u32)
        .find(|&k| alive[k as usize] && waiting[k as usize] > 0)
        .expect("an unsorted live node exists when the sort is incomplete");
    Err(OrderError::Cycle(find_cycle(g, &waiting, start)))
}

/// Every node left with unmet dependencies has one that is itself unsorted,
/// so following those must revisit a node; the revisited stretch is a cycle,
/// listed so that each node depends on the next.
fn find_cycle(g: &Graph, waiting: &[u32], start: u32) -> Vec<u32> {
    let mut seen_at = rustc_hash::FxHashMap::default();
    let mut trail = Vec::new();
    let mut k = start;
    while !seen_at.contains_key(&k) {
        seen_at.insert(k, trail.len());
        trail.push(k);
        k = *g
            .deps
            .row(k)
            .iter()
            .find(|&&d| waiting[d as usize] > 0)
            .expect("an unsorted node has an unsorted dependency");
    }
    let mut cycle = trail.split_off(seen_at[&k]);
    cycle.truncate(CYCLE_REPORT_LEN);
    cycle
}
