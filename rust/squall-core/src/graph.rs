//! Graph submission (`update-graph`, docs/scheduling.md#graph-submission): validate everything first,
//! then create tasks, order them, assign priorities and recommend them to run.

use crate::blobs::{self, Blob};
use crate::commands::Command;
use crate::error::{CoreError, CoreResult};
use crate::ids::{ClientId, GroupId, TaskId};
use crate::key::{Key, KeyRef};
use crate::recs::Recs;
use crate::state::Scheduler;
use crate::stimuli::Slots;
use crate::task::{
    Restrictions, RunSpec, TaskState as S, TaskText, F_DATA_PRODUCER, F_HAS_PRIORITY,
};
use hashbrown::HashTable;
use rustc_hash::FxHashMap;
use squall_priority::Priority;
use std::sync::Arc;

/// A dependency: another task of the same submission (by index) or a known key.
#[derive(Clone, Debug, PartialEq)]
pub enum DepRef {
    Local(u32),
    Key(Key),
}

/// Per-task annotations, and the per-call defaults (`priority=`, `retries=`, `workers=` …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskOptions {
    pub priority: Option<i64>,
    pub retries: Option<u32>,
    pub restrictions: Option<Restrictions>,
    pub actor: bool,
    /// False: a root-ish task bypasses queuing.
    pub queueable: Option<bool>,
    /// Opaque annotations to echo to workers.
    pub annotations: Option<Arc<[u8]>>,
}

#[derive(Clone, Debug)]
pub struct NewTask {
    /// Its key and run spec (None = pure data, which cannot be recomputed), in the one
    /// allocation its record keeps.
    pub text: TaskText,
    pub deps: Vec<DepRef>,
    pub options: Option<Box<TaskOptions>>,
    /// I/O or array-creation task: root-ish whatever its group size.
    pub data_producer: bool,
}

impl NewTask {
    pub fn new(key: Key, deps: Vec<DepRef>, run_spec: Option<RunSpec>) -> Self {
        NewTask::of_text(TaskText::new(&key, run_spec.as_deref()), deps)
    }

    /// A task whose key and spec are already in one allocation (off the wire).
    pub fn of_text(text: TaskText, deps: Vec<DepRef>) -> Self {
        NewTask {
            text,
            deps,
            options: None,
            data_producer: false,
        }
    }

    #[inline]
    pub fn key(&self) -> &KeyRef {
        self.text.key()
    }

    #[inline]
    pub fn run_spec(&self) -> Option<&[u8]> {
        self.text.run_spec()
    }
}

/// How the graph-order element of priorities is obtained.
#[derive(Clone, Debug, Default)]
pub enum GraphOrder {
    /// Compute with squall's `dask.order` equivalent (compute/persist/get).
    #[default]
    Compute,
    /// Every task gets 0 (`submit`).
    Zero,
    /// Index in the submission (`map`).
    Sequential,
    /// Given per task by the client.
    Given(Vec<u64>),
}

#[derive(Clone, Debug, Default)]
pub struct Submission {
    pub tasks: Vec<NewTask>,
    /// Keys the client holds futures on.
    pub wanted: Vec<DepRef>,
    pub defaults: TaskOptions,
    /// Seconds within which submissions share a FIFO generation.
    pub fifo_timeout: f64,
    /// Key of the task submitting this graph from inside a worker, if any.
    pub submitting_task: Option<Key>,
    pub order: GraphOrder,
    /// The blobs cut out of this graph's specs (`crate::blobs`), by index.
    pub blobs: Vec<Blob>,
}

#[derive(Clone, Debug, Default)]
pub struct SubmitResult {
    /// The task id of each submitted task, in submission order.
    pub ids: Vec<TaskId>,
    pub wanted: Vec<TaskId>,
    /// Known tasks the submission gave other dependencies: kept as they were.
    pub redefined: Vec<TaskId>,
}

/// The indices of `keys` in ascending priority if they differ in graph order alone, each
/// order distinct and below twice their number (a counting placement); None otherwise.
fn place_by_order(keys: &[Priority]) -> Option<Vec<u32>> {
    let first = keys.first()?;
    let bound = keys.len().checked_mul(2)?;
    let mut slots = vec![u32::MAX; bound];
    for (i, k) in keys.iter().enumerate() {
        let same_rest =
            k.neg_user == first.neg_user && k.generation.to_bits() == first.generation.to_bits();
        let slot = slots.get_mut(k.order as usize).filter(|s| **s == u32::MAX);
        match slot {
            Some(slot) if same_rest => *slot = i as u32,
            _ => return None,
        }
    }
    Some(slots.into_iter().filter(|&i| i != u32::MAX).collect())
}

/// Where each submitted task's dependencies point, once validated.
#[derive(Clone, Copy)]
enum Resolved {
    Local(u32),
    Known(TaskId),
}

/// Every submitted task's resolved dependencies in one buffer (no Vec per task):
/// task `i`'s are `all[ends[i - 1]..ends[i]]` (from 0 for `i = 0`).
struct ResolvedDeps {
    ends: Vec<usize>,
    all: Vec<Resolved>,
}

impl ResolvedDeps {
    fn of(&self, i: usize) -> &[Resolved] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.all[start..self.ends[i]]
    }
}

impl Scheduler {
    /// `update-graph`: adds tasks for `client` and starts what is wanted.
    pub fn update_graph(
        &mut self,
        client: ClientId,
        sub: Submission,
        now: f64,
    ) -> CoreResult<SubmitResult> {
        if client.idx() >= self.clients.len() {
            return Err(CoreError::UnknownClient(client.0));
        }
        let plan = self.validate_submission(&sub)?;
        Ok(self.stimulus(now, |s, st| {
            let result = s.apply_submission(client, sub, plan, &mut st.recs, now);
            (result, Slots::Unchanged)
        }))
    }

    fn validate_submission(&self, sub: &Submission) -> CoreResult<Plan> {
        let n = sub.tasks.len();
        let mut first_of: Vec<u32> = (0..n as u32).collect();
        let mut local: HashTable<u32> = HashTable::with_capacity(n);
        let h = |k: &KeyRef| squall_hash::neighbour_hash(k.as_bytes());
        for (i, t) in sub.tasks.iter().enumerate() {
            if let Some(spec) = t.run_spec() {
                blobs::check(spec, sub.blobs.len())
                    .map_err(|e| CoreError::Invalid(format!("task {:?}: {e}", t.key())))?;
            }
            let hash = h(t.key());
            match local.find(hash, |&j| sub.tasks[j as usize].key() == t.key()) {
                Some(&j) => {
                    let other = &sub.tasks[j as usize];
                    if other.text != t.text || other.deps != t.deps {
                        return Err(CoreError::DuplicateKey(t.key().to_owned()));
                    }
                    first_of[i] = j;
                }
                None => {
                    local.insert_unique(hash, i as u32, |&j| h(sub.tasks[j as usize].key()));
                }
            }
        }
        let resolve = |d: &DepRef, owner: &KeyRef| -> CoreResult<Resolved> {
            match d {
                DepRef::Local(i) if (*i as usize) < n => Ok(Resolved::Local(first_of[*i as usize])),
                DepRef::Local(i) => Err(CoreError::Invalid(format!(
                    "task {owner:?} names dependency index {i}, but the graph has {n} tasks"
                ))),
                DepRef::Key(k) => {
                    if let Some(&j) = local.find(h(k), |&j| sub.tasks[j as usize].key() == &**k) {
                        Ok(Resolved::Local(j))
                    } else if let Some(t) = self.lookup(k) {
                        Ok(Resolved::Known(t))
                    } else {
                        Err(CoreError::UnknownDependency {
                            key: owner.to_owned(),
                            dep: k.clone(),
                        })
                    }
                }
            }
        };
        let mut deps = ResolvedDeps {
            ends: Vec::with_capacity(n),
            all: Vec::with_capacity(sub.tasks.iter().map(|t| t.deps.len()).sum()),
        };
        let mut existing: Vec<Option<TaskId>> = Vec::with_capacity(n);
        let mut redefined = Vec::new();
        for (i, t) in sub.tasks.iter().enumerate() {
            let start = deps.all.len();
            for d in &t.deps {
                deps.all.push(resolve(d, t.key())?);
            }
            let known = if first_of[i] == i as u32 {
                self.lookup(t.key())
            } else {
                None
            };
            if let Some(e) = known {
                if self.redefines(e, &deps.all[start..], sub) {
                    redefined.push(e);
                }
            }
            existing.push(known);
            deps.ends.push(deps.all.len());
        }
        let mut wanted = Vec::with_capacity(sub.wanted.len());
        for w in &sub.wanted {
            match w {
                DepRef::Local(i) if (*i as usize) < n => {
                    wanted.push(Resolved::Local(first_of[*i as usize]))
                }
                DepRef::Local(i) => {
                    return Err(CoreError::Invalid(format!("wanted index {i} out of range")))
                }
                DepRef::Key(k) => {
                    match local.find(h(k), |&j| sub.tasks[j as usize].key() == &**k) {
                        Some(&j) => wanted.push(Resolved::Local(j)),
                        None => wanted.push(Resolved::Known(
                            self.lookup(k)
                                .ok_or_else(|| CoreError::UnknownKey(k.clone()))?,
                        )),
                    }
                }
            }
        }
        check_acyclic(sub, &first_of, &existing, &deps)?;
        Ok(Plan {
            first_of,
            existing,
            deps,
            wanted,
            redefined,
        })
    }

    /// Whether a submission redefines known task `e` with other dependencies. The
    /// known task is kept either way (its result may exist and others depend on it);
    /// dask's optimiser can give a key another (fused) body in a later graph, and only
    /// other dependencies are worth a warning (docs/scheduling.md#bad-input-is-an-error).
    fn redefines(&self, e: TaskId, ds: &[Resolved], sub: &Submission) -> bool {
        let ets = self.task(e);
        if !ets.has_run_spec() {
            return false;
        }
        let mut old: Vec<&KeyRef> = ets
            .dependencies
            .iter()
            .map(|d| self.task(d).key())
            .collect();
        let mut new: Vec<&KeyRef> = ds
            .iter()
            .map(|d| match d {
                Resolved::Local(j) => sub.tasks[*j as usize].key(),
                Resolved::Known(k) => self.task(*k).key(),
            })
            .collect();
        old.sort();
        new.sort();
        new.dedup();
        // A dependency may have been forgotten since (then the task lost it), so only
        // a dependency the old definition lacks counts.
        new.iter().any(|k| old.binary_search(k).is_err()) && !ets.has_lost_dependencies()
    }

    /// Points task `t`'s spec (checked against `graph_blobs`) at its group's blob
    /// table, adding the blobs the group lacks (one copy per distinct blob).
    fn adopt_blobs(
        &mut self,
        t: TaskId,
        graph_blobs: &[Blob],
        adopted: &mut FxHashMap<(GroupId, u32), u32>,
    ) {
        let ts = self.task(t);
        let g = ts.group;
        if !ts.run_spec().is_some_and(blobs::is_holed) {
            return;
        }
        // Rewritten in place.
        let spec = self.tasks[t.idx()]
            .as_mut()
            .expect("live task")
            .run_spec_mut();
        let spec = spec.expect("a holed spec");
        let group = self.groups[g.idx()].as_mut().expect("live group");
        let mut map = |b: u32| {
            *adopted.entry((g, b)).or_insert_with(|| {
                let blob = &graph_blobs[b as usize];
                let at = group.blobs.iter().position(|x| x[..] == blob[..]);
                at.unwrap_or_else(|| {
                    group.blobs.push(blob.clone());
                    group.blobs.len() - 1
                }) as u32
            })
        };
        blobs::remap(spec, &mut map);
    }

    fn apply_submission(
        &mut self,
        client: ClientId,
        mut sub: Submission,
        plan: Plan,
        recs: &mut Recs,
        now: f64,
    ) -> SubmitResult {
        let Plan {
            first_of,
            existing,
            deps,
            wanted,
            redefined,
        } = plan;
        let n = sub.tasks.len();
        let mut ids: Vec<TaskId> = Vec::with_capacity(n);
        let mut created = vec![false; n];
        // (group, index in the graph's blob table) -> index in the group's.
        let mut adopted: FxHashMap<(GroupId, u32), u32> = FxHashMap::default();
        self.reserve_tasks(n);
        for (i, t) in sub.tasks.iter_mut().enumerate() {
            let j = first_of[i] as usize;
            if j != i {
                ids.push(ids[j]);
                continue;
            }
            match existing[i] {
                Some(e) => {
                    if !self.task(e).has_run_spec() && t.run_spec().is_some() {
                        self.tm(e).set_run_spec(t.run_spec());
                        self.adopt_blobs(e, &sub.blobs, &mut adopted);
                    }
                    ids.push(e);
                }
                None => {
                    // The key and run spec move into the task; later steps read them
                    // from there.
                    let id = self.create_task(std::mem::take(&mut t.text));
                    self.adopt_blobs(id, &sub.blobs, &mut adopted);
                    ids.push(id);
                    created[i] = true;
                }
            }
        }
        for i in 0..n {
            if !created[i] {
                continue;
            }
            let t = ids[i];
            for d in deps.of(i) {
                let dt = match d {
                    Resolved::Local(j) => ids[*j as usize],
                    Resolved::Known(k) => *k,
                };
                self.add_dependency(t, dt);
            }
        }
        let order = self.graph_order(&sub, &first_of, &deps, &ids, &created);
        let generation = self.next_generation(&sub, now);
        for (i, t) in sub.tasks.iter().enumerate() {
            if first_of[i] as usize != i {
                continue;
            }
            let tid = ids[i];
            if created[i] {
                self.apply_options(tid, t, &sub.defaults);
            }
            if !self.task(tid).flag(F_HAS_PRIORITY) {
                let user = t
                    .options
                    .as_ref()
                    .and_then(|o| o.priority)
                    .or(sub.defaults.priority)
                    .unwrap_or(0);
                let ts = self.tm(tid);
                ts.priority = Priority::new(user, generation, order[i]);
                ts.set_flag(F_HAS_PRIORITY, true);
            }
        }
        let plan_wanted_known: Vec<bool> = wanted
            .iter()
            .map(|w| matches!(w, Resolved::Known(_)))
            .collect();
        let wanted: Vec<TaskId> = wanted
            .iter()
            .map(|w| match w {
                Resolved::Local(j) => ids[*j as usize],
                Resolved::Known(k) => *k,
            })
            .collect();
        for &t in &wanted {
            self.add_want(t, client);
        }
        // Every distinct submitted task, plus wanted keys from earlier graphs.
        let mut touched: Vec<TaskId> = (0..n)
            .filter(|&i| first_of[i] as usize == i)
            .map(|i| ids[i])
            .collect();
        let mut earlier: Vec<TaskId> = wanted
            .iter()
            .zip(&plan_wanted_known)
            .filter(|(_, &known)| known)
            .map(|(&t, _)| t)
            .collect();
        earlier.sort_unstable();
        earlier.dedup();
        touched.extend(earlier);
        // Descending priority, so the best is popped first.
        self.sort_by_priority_descending(&mut touched);
        recs.reserve(touched.len());
        for &t in &touched {
            let ts = self.task(t);
            if ts.state == S::Released && ts.has_run_spec() {
                // A task nothing wants nor depends on is an orphan (the new dependencies
                // of a key that kept its first definition): not worth running.
                let needed = !ts.who_wants.is_empty() || !ts.dependents.is_empty();
                recs.insert(t, if needed { S::Waiting } else { S::Forgotten });
            }
        }
        for &t in &touched {
            // Only an erred dependency passes its blame on; a blame on a task in any
            // other state is a stale leftover of a superseded erred recommendation.
            let blame = self.task(t).dependencies.iter().find_map(|d| {
                let dts = self.task(d);
                (dts.state == S::Erred)
                    .then(|| dts.exception_blame().map(|b| (b, dts.error().cloned())))
                    .flatten()
            });
            if let Some((b, err)) = blame {
                if !matches!(self.state_of(t), S::Memory | S::Erred) {
                    let extra = self.tm(t).extra_mut();
                    extra.exception_blame = Some(b);
                    extra.error = err;
                    recs.insert(t, S::Erred);
                }
            }
        }
        for &t in &wanted {
            match self.state_of(t) {
                S::Memory => self.emit(Command::KeyInMemory { client, task: t }),
                S::Erred => {
                    let blame = self.task(t).exception_blame().unwrap_or(t);
                    self.emit(Command::TaskErred {
                        client,
                        task: t,
                        blame,
                    })
                }
                _ => {}
            }
        }
        SubmitResult {
            ids,
            wanted,
            redefined,
        }
    }

    fn add_dependency(&mut self, t: TaskId, dep: TaskId) {
        if !self.tm(t).dependencies.insert(dep) {
            return;
        }
        self.tm(dep).dependents.insert(t);
        let dg = self.task(dep).group;
        let dep_ref = (dg, self.group(dg).uid);
        let g = self.task(t).group;
        let group = self.group_mut(g);
        if !group.dependencies.contains(&dep_ref) {
            group.dependencies.push(dep_ref);
        }
    }

    fn apply_options(&mut self, t: TaskId, nt: &NewTask, defaults: &TaskOptions) {
        let o = nt.options.as_deref();
        let pick = |f: fn(&TaskOptions) -> bool| o.is_some_and(f);
        let retries = o.and_then(|o| o.retries).or(defaults.retries).unwrap_or(0);
        let restrictions = o
            .and_then(|o| o.restrictions.clone())
            .or_else(|| defaults.restrictions.clone())
            .filter(|r| !r.is_empty());
        let actor = pick(|o| o.actor) || defaults.actor;
        let queueable = o
            .and_then(|o| o.queueable)
            .or(defaults.queueable)
            .unwrap_or(true);
        let annotations = o
            .and_then(|o| o.annotations.clone())
            .or_else(|| defaults.annotations.clone());
        let ts = self.tm(t);
        ts.set_flag(F_DATA_PRODUCER, nt.data_producer);
        if retries > 0 || restrictions.is_some() || actor || !queueable || annotations.is_some() {
            let e = ts.extra_mut();
            e.retries = retries;
            e.restrictions = restrictions;
            e.actor = actor;
            e.unqueueable = !queueable;
            e.annotations = annotations;
        }
    }

    /// The graph-order index of every submitted task (0 for duplicates).
    /// `tasks` from the lowest priority to the highest. Each task's priority is read
    /// once, not once per comparison (random reads of the tasks). A graph's own tasks
    /// share their user priority and generation and have distinct graph orders: they
    /// are then placed by order, in linear time, where a comparison sort spent about
    /// 900 instructions a task on a 200,000-task graph.
    fn sort_by_priority_descending(&self, tasks: &mut Vec<TaskId>) {
        let keys: Vec<Priority> = tasks.iter().map(|&t| self.task(t).priority).collect();
        if let Some(placed) = place_by_order(&keys) {
            *tasks = placed
                .into_iter()
                .rev()
                .map(|i| tasks[i as usize])
                .collect();
            return;
        }
        // Ties keep submission order, as a stable sort would.
        let mut by_key: Vec<(std::cmp::Reverse<Priority>, u32)> =
            keys.into_iter().map(std::cmp::Reverse).zip(0..).collect();
        by_key.sort_unstable();
        *tasks = by_key.into_iter().map(|(_, i)| tasks[i as usize]).collect();
    }

    fn graph_order(
        &self,
        sub: &Submission,
        first_of: &[u32],
        deps: &ResolvedDeps,
        ids: &[TaskId],
        created: &[bool],
    ) -> Vec<u64> {
        let n = sub.tasks.len();
        match &sub.order {
            GraphOrder::Zero => vec![0; n],
            GraphOrder::Sequential => (0..n as u64).collect(),
            GraphOrder::Given(v) => (0..n).map(|i| v.get(i).copied().unwrap_or(0)).collect(),
            GraphOrder::Compute => {
                // In flat form (no Vec per node), names made only when ties need them.
                let mut g = squall_order::FlatGraph {
                    dep_ends: Vec::with_capacity(n),
                    deps: Vec::with_capacity(deps.all.len()),
                    is_task: Vec::with_capacity(n),
                    ..Default::default()
                };
                for i in 0..n {
                    if first_of[i] as usize == i {
                        g.deps.extend(deps.of(i).iter().filter_map(|d| match d {
                            Resolved::Local(j) => Some(*j),
                            Resolved::Known(_) => None,
                        }));
                    }
                    g.dep_ends.push(g.deps.len());
                    g.is_task.push(if created[i] {
                        self.task(ids[i]).has_run_spec()
                    } else {
                        sub.tasks[i].run_spec().is_some()
                    });
                }
                match squall_order::order_flat_named(&g, |i| {
                    self.task(ids[i]).key().python_str_utf8()
                }) {
                    Ok(o) => o.into_iter().map(u64::from).collect(),
                    // Validation already proved the graph acyclic.
                    Err(_) => (0..n as u64).collect(),
                }
            }
        }
    }

    /// The FIFO generation for a submission arriving at `now` (docs/scheduling.md#fifo-generations).
    fn next_generation(&mut self, sub: &Submission, now: f64) -> f64 {
        if let Some(parent) = sub.submitting_task.as_ref().and_then(|k| self.lookup(k)) {
            return self.task(parent).priority.neg_user as f64 - 0.01;
        }
        if sub.submitting_task.is_some() {
            return self.generation;
        }
        if self.last_fifo_time + sub.fifo_timeout < now {
            self.generation += 1.0;
            self.last_fifo_time = now;
        }
        self.generation
    }
}

struct Plan {
    first_of: Vec<u32>,
    existing: Vec<Option<TaskId>>,
    deps: ResolvedDeps,
    wanted: Vec<Resolved>,
    redefined: Vec<TaskId>,
}

/// Kahn's algorithm over the new tasks; on failure, name the keys of one cycle.
fn check_acyclic(
    sub: &Submission,
    first_of: &[u32],
    existing: &[Option<TaskId>],
    deps: &ResolvedDeps,
) -> CoreResult<()> {
    // Only edges between the graph's own tasks can close a cycle (a `map` has none).
    if !deps.all.iter().any(|d| matches!(d, Resolved::Local(_))) {
        return Ok(());
    }
    let n = sub.tasks.len();
    let is_new = |i: usize| first_of[i] as usize == i && existing[i].is_none();
    let new_deps = |i: usize| {
        deps.of(i).iter().filter_map(move |d| match *d {
            Resolved::Local(j) if is_new(i) && is_new(j as usize) => Some(j as usize),
            _ => None,
        })
    };
    // Each task's dependents among the new ones, in one buffer: task `j`'s are
    // `dependents[starts[j]..starts[j + 1]]`.
    let mut starts = vec![0usize; n + 1];
    let mut indeg: Vec<u32> = (0..n)
        .map(|i| {
            new_deps(i).fold(0, |count, j| {
                starts[j + 1] += 1;
                count + 1
            })
        })
        .collect();
    for j in 0..n {
        starts[j + 1] += starts[j];
    }
    let mut fill = starts.clone();
    let mut dependents = vec![0u32; starts[n]];
    for i in 0..n {
        for j in new_deps(i) {
            dependents[fill[j]] = i as u32;
            fill[j] += 1;
        }
    }
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&i| is_new(i as usize) && indeg[i as usize] == 0)
        .collect();
    let mut seen = 0usize;
    while let Some(i) = stack.pop() {
        seen += 1;
        for &d in &dependents[starts[i as usize]..starts[i as usize + 1]] {
            indeg[d as usize] -= 1;
            if indeg[d as usize] == 0 {
                stack.push(d);
            }
        }
    }
    let total = (0..n).filter(|&i| is_new(i)).count();
    if seen == total {
        return Ok(());
    }
    // Walk dependency edges inside the leftover (all on or behind a cycle) until a repeat.
    let mut pos = vec![usize::MAX; n];
    let mut path: Vec<u32> = Vec::new();
    let mut cur = (0..n)
        .find(|&i| is_new(i) && indeg[i] > 0)
        .expect("leftover node") as u32;
    loop {
        if pos[cur as usize] != usize::MAX {
            let cycle = &path[pos[cur as usize]..];
            let keys = cycle
                .iter()
                .take(10)
                .map(|&i| sub.tasks[i as usize].key().to_owned())
                .collect();
            return Err(CoreError::Cycle(keys));
        }
        pos[cur as usize] = path.len();
        path.push(cur);
        cur = deps
            .of(cur as usize)
            .iter()
            .find_map(|d| match d {
                Resolved::Local(j) if is_new(*j as usize) && indeg[*j as usize] > 0 => Some(*j),
                _ => None,
            })
            .expect("a node left by Kahn's algorithm has an unprocessed dependency");
    }
}

#[cfg(test)]
mod tests {
    use super::place_by_order;
    use squall_priority::Priority;

    #[test]
    fn placing_by_order_is_sorting_when_only_orders_differ() {
        let keys: Vec<Priority> = [5u64, 0, 3, 1]
            .iter()
            .map(|&o| Priority::new(0, 1.0, o))
            .collect();
        let placed = place_by_order(&keys).expect("distinct orders below 8");
        let mut sorted: Vec<u32> = (0..4).collect();
        sorted.sort_by_key(|&i| keys[i as usize]);
        assert_eq!(placed, sorted);
    }

    #[test]
    fn placing_by_order_declines_ties_other_fields_and_sparse_orders() {
        let p = |user: i64, generation: f64, order: u64| Priority::new(user, generation, order);
        assert_eq!(place_by_order(&[]), None);
        assert_eq!(place_by_order(&[p(0, 1.0, 1), p(0, 1.0, 1)]), None);
        assert_eq!(place_by_order(&[p(0, 1.0, 0), p(1, 1.0, 1)]), None);
        assert_eq!(place_by_order(&[p(0, 1.0, 0), p(0, 2.0, 1)]), None);
        assert_eq!(place_by_order(&[p(0, 1.0, 0), p(0, 1.0, 4)]), None);
    }
}
