//! The ordering walk: follow a critical path towards one leaf at a time and
//! let cheap, freely runnable side branches run when they free memory.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::csr::Csr;
use crate::graph::Graph;
use crate::index_set::IndexSet;
use crate::leaf_degrees::LeafDegrees;
use crate::leaf_links::LeafLinks;
use crate::metrics::Metrics;
use crate::normalize::Normalized;
use crate::pressure::Tracker;
use crate::sort_key::SortKeys;
use crate::Input;

const UNNUMBERED: i64 = i64::MIN;

/// The order in which dependents made ready together join the runnable list
/// (upstream: a set's iteration order). The list is processed from its end, so
/// `Ascending` runs the highest index first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadyOrder {
    Ascending,
    Descending,
}

/// What a walk changes and cannot cheaply recompute, to run it again from the
/// start with the sort keys' caches warm.
pub(crate) struct Snapshot {
    leaf_list: Vec<u32>,
}

pub(crate) struct Walk<'g> {
    g: &'g Graph,
    keys: SortKeys<'g>,
    links: LeafLinks<'g>,
    degrees: LeafDegrees,
    requires: &'g Csr,
    norm: &'g Normalized,
    /// The leaves given to `degrees`, with their starting degrees.
    start_degrees: Vec<(u32, u32)>,

    result: Vec<i64>,
    numbered: usize,
    next_priority: i64,
    num_needed: Vec<u32>,
    /// Roots that are not also leaves: numbering one lowers leaf degrees.
    feeds_leaves: Vec<bool>,
    /// Upstream's `leaf_nodes`: live leaves not numbered yet.
    pending_leaf: Vec<bool>,
    /// Nodes reachable forward from numbered ones without loading new roots.
    runnable_hull: Vec<bool>,
    /// Unnumbered nodes with at least one numbered dependency.
    reachable_hull: IndexSet,
    runnable: Vec<u32>,
    /// Reducer → runnable paths that end in it.
    known_paths: FxHashMap<u32, Vec<Vec<u32>>>,
    critical_path: Vec<u32>,
    /// Targets for the trivial lookup, popped from the end.
    leaf_list: Vec<u32>,
    /// Reused buffers: `add_to_result`'s worklist and walk-back dependencies.
    next_items: Vec<u32>,
    scratch: Vec<u32>,
    ready_order: ReadyOrder,
    /// Whether a node made several dependents ready at once, not all of them
    /// leaves, so that `ready_order` may have mattered.
    ready_ties: bool,
    /// Follows the memory pressure as nodes are numbered, if asked to.
    tracker: Option<Tracker<'g>>,
    /// The tracker's limit was reached: the run stops early.
    aborted: bool,
}

impl<'g> Walk<'g> {
    pub(crate) fn new(
        nodes: &'g dyn Input,
        g: &'g Graph,
        norm: &'g Normalized,
        metrics: Metrics,
    ) -> Self {
        let n = g.len();
        let alive = &norm.alive;
        let is_root: Vec<bool> = (0..n)
            .map(|k| alive[k] && g.deps.degree(k as u32) == 0)
            .collect();
        let is_leaf: Vec<bool> = (0..n)
            .map(|k| alive[k] && g.dependents.degree(k as u32) == 0)
            .collect();
        let roots: Vec<u32> = (0..n as u32).filter(|&k| is_root[k as usize]).collect();
        let feeding_roots: Vec<u32> = roots
            .iter()
            .copied()
            .filter(|&r| !is_leaf[r as usize])
            .collect();

        let mut keys = SortKeys::new(nodes, g, &metrics.topo, metrics.max_dependents);
        let mut links = LeafLinks::new(g, &metrics.topo, &feeding_roots);

        // Degree of a leaf = number of roots it needs; counted from the root side.
        let mut degree = vec![0u32; n];
        for &r in &feeding_roots {
            links.for_each_leaf(r, |leaf| degree[leaf as usize] += 1);
        }
        let start_degrees: Vec<(u32, u32)> = (0..n as u32)
            .filter(|&k| is_leaf[k as usize] && !is_root[k as usize])
            .map(|k| (k, degree[k as usize]))
            .collect();
        let degrees = LeafDegrees::new(n, &start_degrees, norm.n_alive as u32);

        let n_leaves = is_leaf.iter().filter(|&&l| l).count();
        let longest_path = use_longest_path(&roots, n_leaves, &is_leaf, &mut links);
        let mut leaf_list: Vec<u32> = (0..n as u32).filter(|&k| is_leaf[k as usize]).collect();
        keys.sort(&mut leaf_list);
        if !longest_path {
            leaf_list.reverse();
        }

        let mut result = vec![UNNUMBERED; n];
        for &(leaf, prio) in &norm.fixed {
            result[leaf as usize] = prio;
        }
        Walk {
            g,
            keys,
            links,
            degrees,
            requires: &norm.requires,
            norm,
            start_degrees,
            result,
            numbered: norm.fixed.len(),
            next_priority: 0,
            num_needed: (0..n as u32).map(|k| g.deps.degree(k) as u32).collect(),
            feeds_leaves: (0..n).map(|k| is_root[k] && !is_leaf[k]).collect(),
            pending_leaf: is_leaf,
            runnable_hull: vec![false; n],
            reachable_hull: IndexSet::new(n),
            runnable: Vec::new(),
            known_paths: FxHashMap::default(),
            critical_path: Vec::new(),
            leaf_list,
            next_items: Vec::new(),
            scratch: Vec::new(),
            ready_order: ReadyOrder::Ascending,
            ready_ties: false,
            tracker: None,
            aborted: false,
        }
    }

    /// Follow the pressure of the next run on the graph `deps` (every node
    /// numbered one by one, so exact when no alias leaf was removed), giving up
    /// as soon as `limit` results would be held at once.
    pub(crate) fn track_pressure(&mut self, deps: &'g Csr, limit: Option<u32>) {
        self.tracker = Some(Tracker::new(deps, limit));
        self.aborted = false;
    }

    /// The peak pressure of the last run if tracked, `None` if it was given up.
    pub(crate) fn tracked_peak(&self) -> Option<u32> {
        match &self.tracker {
            Some(t) if !self.aborted => Some(t.peak()),
            _ => None,
        }
    }

    /// The state before [`Walk::run`], for [`Walk::restore`].
    pub(crate) fn snapshot(&self) -> Snapshot {
        debug_assert!(self.next_priority == 0 && self.runnable.is_empty());
        Snapshot {
            leaf_list: self.leaf_list.clone(),
        }
    }

    /// Back to the state of `snapshot`, to walk again with another
    /// `ready_order`; the sort keys keep what they computed.
    pub(crate) fn restore(&mut self, s: Snapshot, ready_order: ReadyOrder) {
        let g = self.g;
        let n = g.len();
        let alive = &self.norm.alive;
        self.degrees = LeafDegrees::new(n, &self.start_degrees, self.norm.n_alive as u32);
        self.result.clear();
        self.result.resize(n, UNNUMBERED);
        for &(leaf, prio) in &self.norm.fixed {
            self.result[leaf as usize] = prio;
        }
        self.numbered = self.norm.fixed.len();
        self.next_priority = 0;
        for (k, (needed, leaf)) in self
            .num_needed
            .iter_mut()
            .zip(self.pending_leaf.iter_mut())
            .enumerate()
        {
            *needed = g.deps.degree(k as u32) as u32;
            *leaf = alive[k] && g.dependents.degree(k as u32) == 0;
        }
        self.runnable_hull.fill(false);
        self.reachable_hull.clear();
        self.runnable.clear();
        self.known_paths.clear();
        self.critical_path.clear();
        self.leaf_list = s.leaf_list;
        self.ready_order = ready_order;
        self.ready_ties = false;
        self.tracker = None;
        self.aborted = false;
    }

    /// Whether the last run had several dependents become ready at once, i.e.
    /// whether another `ready_order` could give another result.
    pub(crate) fn had_ready_ties(&self) -> bool {
        self.ready_ties
    }

    /// Runs the walk and returns upstream's priorities (possibly negative, see
    /// `normalize`).
    pub(crate) fn run(&mut self) -> Vec<i64> {
        let n = self.result.len();
        while self.numbered < n && !self.aborted {
            let Some(target) = self.next_target() else {
                break;
            };
            self.build_critical_path(target);
            self.walk_critical_path();
            self.process_runnables();
        }
        // Only data roots whose every dependent was itself removed as an alias
        // leaf can be left over (upstream runs out of targets and fails there).
        for k in 0..n {
            if self.result[k] == UNNUMBERED && !self.aborted {
                self.assign(k as u32);
            }
        }
        std::mem::take(&mut self.result)
    }

    #[inline]
    fn is_numbered(&self, k: u32) -> bool {
        self.result[k as usize] != UNNUMBERED
    }

    fn assign(&mut self, k: u32) {
        self.result[k as usize] = self.next_priority;
        self.next_priority += 1;
        self.numbered += 1;
        if let Some(t) = &mut self.tracker {
            if !t.run(k) {
                self.aborted = true;
            }
        }
    }

    /// Prefers a leaf needing the fewest further roots, ideally one already
    /// touched; otherwise the next leaf of the precomputed list.
    fn next_target(&mut self) -> Option<u32> {
        let all_reachable = self.degrees.min == self.degrees.max;
        if !self.reachable_hull.is_empty() && !all_reachable {
            let d = self.degrees.min;
            let degrees = &self.degrees;
            let hull = &self.reachable_hull;
            let in_both = if hull.len() <= degrees.bucket_len(d) {
                self.keys.min_of(
                    hull.as_slice()
                        .iter()
                        .copied()
                        .filter(|&k| degrees.degree(k) == d),
                )
            } else {
                self.keys
                    .min_of(degrees.bucket(d).filter(|&k| hull.contains(k)))
            };
            if let Some(target) = in_both.or_else(|| self.keys.min_of(degrees.bucket(d))) {
                return Some(target);
            }
        }
        // A numbered leaf would make an empty round, so skip it here.
        while let Some(leaf) = self.leaf_list.pop() {
            if !self.is_numbered(leaf) {
                return Some(leaf);
            }
        }
        None
    }

    /// From the target, repeatedly step to the dependency with the largest
    /// key, also stacking that node's other unnumbered dependencies.
    fn build_critical_path(&mut self, target: u32) {
        let g = self.g;
        self.critical_path.push(target);
        // Upstream does not filter numbered nodes on the first step.
        let mut next = self.keys.max_of(g.deps.row(target).iter().copied());
        while let Some(item) = next {
            self.critical_path.push(item);
            let start = self.critical_path.len();
            for &d in g.deps.row(item) {
                if !self.is_numbered(d) {
                    self.critical_path.push(d);
                }
            }
            next = self
                .keys
                .max_of(self.critical_path[start..].iter().copied());
        }
    }

    fn walk_critical_path(&mut self) {
        let g = self.g;
        let mut walked_back = false;
        while let Some(item) = self.critical_path.pop() {
            if self.aborted {
                self.critical_path.clear();
                return;
            }
            if self.is_numbered(item) {
                continue;
            }
            if self.num_needed[item as usize] > 0 {
                self.critical_path.push(item);
                let mut deps = std::mem::take(&mut self.scratch);
                deps.clear();
                deps.extend(
                    g.deps
                        .row(item)
                        .iter()
                        .copied()
                        .filter(|&d| !self.is_numbered(d)),
                );
                self.keys.sort(&mut deps);
                // Unknown dependencies go on first so that stored runnable
                // paths end up on top, first node uppermost.
                let unknown = deps
                    .iter()
                    .filter(|d| !self.known_paths.contains_key(d))
                    .count();
                if unknown > 1 {
                    walked_back = true;
                }
                for &d in &deps {
                    if !self.known_paths.contains_key(&d) {
                        self.critical_path.push(d);
                    }
                }
                for &d in &deps {
                    if let Some(paths) = self.known_paths.remove(&d) {
                        for path in paths {
                            self.critical_path.extend(path.iter().rev());
                        }
                    }
                }
                self.scratch = deps;
            } else {
                if walked_back && self.runnable.len() < self.critical_path.len() {
                    self.process_runnables();
                }
                self.add_to_result(item);
            }
        }
    }

    /// Numbers `item` and, while it has a single dependent, the chain that
    /// becomes ready behind it.
    fn add_to_result(&mut self, item: u32) {
        let g = self.g;
        let mut next_items = std::mem::take(&mut self.next_items);
        next_items.push(item);
        while let Some(x) = next_items.pop() {
            self.runnable_hull[x as usize] = false;
            self.reachable_hull.remove(x);
            self.pending_leaf[x as usize] = false;
            if self.is_numbered(x) {
                continue;
            }
            self.number_required_data(x);
            self.assign(x);
            if self.feeds_leaves[x as usize] {
                let pending = &self.pending_leaf;
                let degrees = &mut self.degrees;
                self.links.for_each_leaf(x, |leaf| {
                    if pending[leaf as usize] {
                        degrees.decrement(leaf);
                    }
                });
            }
            let dependents = g.dependents.row(x);
            let first_ready = self.runnable.len();
            for &d in dependents {
                self.num_needed[d as usize] -= 1;
                self.reachable_hull.insert(d);
                if self.num_needed[d as usize] == 0 {
                    if dependents.len() == 1 {
                        next_items.push(d);
                    } else {
                        self.runnable.push(d);
                    }
                }
            }
            let ready = &mut self.runnable[first_ready..];
            // Leaves made ready are numbered as they come, so only the
            // position of other nodes among them can make a difference.
            if ready.len() > 1 && ready.iter().any(|&d| g.dependents.degree(d) > 0) {
                self.ready_ties = true;
                if self.ready_order == ReadyOrder::Descending {
                    ready.reverse();
                }
            }
        }
        self.next_items = next_items;
    }

    /// Numbers the removed data roots `x` needs (and theirs), depth first.
    fn number_required_data(&mut self, x: u32) {
        let requires = self.requires;
        if requires.degree(x) == 0 {
            return;
        }
        let mut stack = vec![(x, 0usize)];
        while let Some(&(node, pos)) = stack.last() {
            let row = requires.row(node);
            match row[pos..].iter().position(|&r| !self.is_numbered(r)) {
                Some(skip) => {
                    let top = stack.len() - 1;
                    stack[top].1 = pos + skip + 1;
                    stack.push((row[pos + skip], 0));
                }
                None => {
                    stack.pop();
                    if node != x && !self.is_numbered(node) {
                        self.assign(node);
                    }
                }
            }
        }
    }

    /// Walks forward from every runnable node, running paths that finish a
    /// leaf or complete a reducer and remembering the rest for later.
    fn process_runnables(&mut self) {
        let g = self.g;
        while !self.runnable.is_empty() {
            let mut candidates = std::mem::take(&mut self.runnable);
            while let Some(key) = candidates.pop() {
                if self.aborted {
                    self.runnable.clear();
                    return;
                }
                if self.runnable_hull[key as usize] || self.is_numbered(key) {
                    continue;
                }
                if self.pending_leaf[key as usize] {
                    self.add_to_result(key);
                    continue;
                }
                let mut branches: VecDeque<(u32, Vec<u32>)> = VecDeque::from([(0, vec![key])]);
                while let Some((mut nsplits, mut path)) = branches.pop_front() {
                    loop {
                        let current = *path.last().expect("paths are never empty");
                        self.runnable_hull[current as usize] = true;
                        let downstream = g.dependents.row(current);
                        let n_upstream = g.deps.degree(current);
                        if downstream.is_empty() {
                            if self.num_needed[current as usize] <= 1 {
                                self.add_path(&path);
                            } else {
                                self.runnable_hull[current as usize] = false;
                            }
                        } else if path.len() == 1 || n_upstream == 1 {
                            if downstream.len() == 1 {
                                path.push(downstream[0]);
                                continue;
                            }
                            // A splitter: follow each dependent that needs only it.
                            nsplits += 1;
                            let mut split = downstream.to_vec();
                            self.keys.sort(&mut split);
                            for d in split {
                                if g.deps.degree(d) == 1 {
                                    let mut branch = path.clone();
                                    branch.push(d);
                                    branches.push_back((nsplits, branch));
                                }
                            }
                        } else if self.known_paths.contains_key(&current) {
                            self.runnable_hull[current as usize] = false;
                            self.join_reducer(current, path, nsplits, &mut branches);
                        } else if n_upstream > 1 && self.num_needed[current as usize] <= 1 {
                            self.add_path(&path);
                        } else {
                            self.known_paths.insert(current, vec![path]);
                            self.runnable_hull[current as usize] = false;
                        }
                        break;
                    }
                }
            }
        }
    }

    fn add_path(&mut self, path: &[u32]) {
        for &k in path {
            self.add_to_result(k);
        }
    }

    /// Another runnable path reached `reducer`; once there are enough to
    /// satisfy it, run them (or, inside nested splits, continue as one path).
    fn join_reducer(
        &mut self,
        reducer: u32,
        path: Vec<u32>,
        nsplits: u32,
        branches: &mut VecDeque<(u32, Vec<u32>)>,
    ) {
        let needed = self.num_needed[reducer as usize] as usize;
        let paths = self
            .known_paths
            .get_mut(&reducer)
            .expect("checked by caller");
        paths.push(path);
        if paths.len() < needed {
            return;
        }
        let all = self.known_paths.remove(&reducer).expect("present");
        let mut pruned: VecDeque<Vec<u32>> = all
            .into_iter()
            .filter(|p| !self.is_numbered(p[p.len() - 2]))
            .collect();
        if pruned.len() < needed {
            self.known_paths.insert(reducer, pruned.into());
        } else if nsplits > 1 {
            branches.push_back((nsplits - 1, pruned.into_iter().flatten().collect()));
        } else {
            // Run the paths in turn; one blocked on an unmet dependency goes to
            // the back. Upstream would spin forever if none can progress.
            let mut stalled = 0;
            while let Some(p) = pruned.pop_front() {
                let before = self.numbered;
                let mut blocked = false;
                for &k in &p {
                    if self.num_needed[k as usize] > 0 {
                        blocked = true;
                        break;
                    }
                    self.add_to_result(k);
                }
                if blocked {
                    pruned.push_back(p);
                }
                stalled = if self.numbered == before {
                    stalled + 1
                } else {
                    0
                };
                if stalled > pruned.len() {
                    break;
                }
            }
        }
    }
}

/// Heavy reducer or splitter topologies do best with a classic longest
/// critical path; graphs of roughly constant width that are asymmetric
/// (roots feeding different numbers of leaves) do better with the shortest.
///
/// Upstream scans the roots in set order, skipping roots that feed no leaf
/// (isolated nodes) only until the first that does; a later one then counts as
/// a different size. So with both kinds present it almost always answers
/// false, unless by chance every isolated root comes first; this answers
/// false whenever both kinds are present.
fn use_longest_path(
    roots: &[u32],
    n_leaves: usize,
    is_leaf: &[bool],
    links: &mut LeafLinks,
) -> bool {
    let n_roots = roots.len();
    if (n_roots as f64 - n_leaves as f64).abs() / n_roots as f64 >= 0.8 {
        return true;
    }
    let mut size = 0;
    let mut isolated = false;
    for &r in roots {
        if is_leaf[r as usize] {
            isolated = true;
            continue;
        }
        let count = links.count(r);
        if size == 0 {
            size = count;
        } else if size != count {
            return false;
        }
    }
    !(isolated && size > 0)
}
