//! The scheduler: arenas of tasks, workers, clients, groups and prefixes, and the
//! scheduler-wide collections of docs/scheduling.md#scheduler-wide-sets. Behaviour lives in sibling modules
//! (`transitions`, `decide`, `occupancy`, `stimuli`, `graph`, `stealing`, …), each an
//! `impl Scheduler` block.

use crate::commands::Command;
use crate::config::Config;
use crate::feed::TransitionFeed;
use crate::group::{TaskGroup, TaskPrefix};
use crate::ids::{ClientId, GroupId, PrefixId, TaskId, WorkerId};
use crate::key::{key_split, key_split_group, Key, KeyRef};
use crate::stealing::Stealing;
use crate::story::TransitionLog;
use crate::task::{Task, TaskState, TaskText};
use crate::worker::{IdIndexMap, Worker};
use crate::workerset::WorkerSet;
use hashbrown::HashTable;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Space between consecutive worker ranks after a renumbering (see `rank_joined`).
const RANK_GAP: u64 = 1 << 16;
/// How many groups `group_by_stem` tries.
const GROUP_STEMS: usize = 8;

pub struct Client {
    pub id: String,
    /// Tasks this client wants; each task's `who_wants` link records its index here.
    pub wants_what: Vec<TaskId>,
    pub last_seen: f64,
}

/// The name of the pseudo-client that keeps fire-and-forget tasks alive.
pub const FIRE_AND_FORGET: &str = "fire-and-forget";

pub struct Scheduler {
    pub config: Config,
    pub(crate) tasks: Vec<Option<Task>>,
    pub(crate) free_tasks: Vec<TaskId>,
    /// Forgotten slots whose ids may still appear in undrained commands.
    pub(crate) pending_free: Vec<TaskId>,
    /// Forgotten slots named only by the last drained batch: free at the next drain.
    pub(crate) recyclable: Vec<TaskId>,
    /// Task ids by key hash, each beside 32 bits of its key's hash: growing the index
    /// rehashes from those alone, never visiting the tasks (visiting a million of them
    /// held the scheduler for over 100 ms). May also hold ids of forgotten tasks (even
    /// of recycled slots): every live task has its entry, and lookups check the task.
    pub(crate) key_index: HashTable<(u32, TaskId)>,
    /// Entries of forgotten tasks in `key_index`.
    pub(crate) stale_keys: usize,
    pub(crate) n_tasks_live: usize,

    pub(crate) groups: Vec<Option<TaskGroup>>,
    pub(crate) free_groups: Vec<GroupId>,
    pub(crate) group_index: FxHashMap<String, GroupId>,
    /// The group of the last task created (a cache for `group_for`).
    pub(crate) last_group: Option<GroupId>,
    /// (group, its uid, stem): the group of the last `stem-<digits>` str key.
    pub(crate) group_hint: Option<(GroupId, u64, Vec<u8>)>,
    /// (group, its uid) of recent groups whose name `N` names every str key
    /// `N-<a word with a digit>…` (e.g. `add-<uuid>`): a few, since a graph's
    /// groups interleave.
    pub(crate) group_stems: Vec<(GroupId, u64)>,
    pub(crate) prefixes: Vec<TaskPrefix>,
    pub(crate) prefix_index: FxHashMap<String, PrefixId>,

    pub(crate) workers: Vec<Option<Worker>>,
    /// address → id, in address order.
    pub(crate) worker_index: BTreeMap<String, WorkerId>,
    /// Rank of each worker slot: live workers' ranks increase in address order, with
    /// gaps, so a worker joining takes a free number between its neighbours' and the
    /// others keep theirs (valid for live workers).
    pub(crate) worker_rank: Vec<u32>,
    pub(crate) running: WorkerSet,
    pub(crate) idle: WorkerSet,
    pub(crate) idle_task_count: crate::slotset::SlotSet,
    pub(crate) saturated: WorkerSet,
    pub(crate) total_nthreads: u64,
    pub(crate) total_memory: u64,
    /// Σ `nbytes` over live workers (for the adaptive target, docs/runtime.md#adaptive-scaling).
    pub(crate) total_nbytes: i64,
    /// Σ `processing.len()` over live workers.
    pub(crate) n_processing: usize,

    pub(crate) clients: Vec<Client>,
    pub(crate) client_index: FxHashMap<String, ClientId>,

    /// Queued tasks by (priority, insertion sequence).
    pub(crate) queued: crate::queue::TaskQueue,
    /// No-worker tasks in insertion order: sequence → (task, since).
    pub(crate) unrunnable: BTreeMap<u64, (TaskId, f64)>,
    pub(crate) replicated_tasks: usize,

    pub(crate) bandwidth: f64,
    pub(crate) generation: f64,
    pub(crate) last_fifo_time: f64,
    /// Number of `_add_to_processing` calls ever (round-robin cursor).
    pub(crate) n_processing_assignments: u64,
    /// Last run id handed out (one per compute-task).
    pub(crate) last_run_id: u64,
    /// Last place in line handed out (queued and no-worker tasks).
    pub(crate) last_queue_seq: u64,
    /// Last group uid handed out (tells a reused group slot from its predecessor).
    pub(crate) last_group_uid: u64,
    pub(crate) stimulus_counter: u64,
    pub(crate) now: f64,
    pub(crate) no_workers_since: Option<f64>,

    pub(crate) prefix_count_global: IdIndexMap<PrefixId, u64>,
    pub(crate) network_occ_global: i64,

    pub(crate) stealing: Stealing,
    pub(crate) log: TransitionLog,
    /// Transitions for the I/O layer's scheduler plugins, while switched on.
    pub(crate) feed: TransitionFeed,
    pub(crate) erred_history: std::collections::VecDeque<TaskId>,
    pub(crate) commands: Vec<Command>,
    /// Position indexes of drained recommendation sets, for reuse.
    pub(crate) recs_pool: Vec<crate::recs::RecsBuffers>,
    pub(crate) transition_counter: u64,
    /// Cluster-wide counts and totals kept as things happen (docs/dashboard.md).
    pub(crate) counters: crate::counters::Counters,
    /// Tasks that needed to wait on an erred dependency during the current fixpoint;
    /// resolved (→ erred) once it settles, see `transitions`.
    pub(crate) blocked: Vec<TaskId>,
    /// When the copy of each result held only by retiring workers was last asked for
    /// (docs/runtime.md#retiring-workers).
    pub(crate) replicas_asked: FxHashMap<TaskId, f64>,
    /// Copies `replicate` and `rebalance` asked for and not arrived yet
    /// (docs/scheduling.md#replicas).
    pub(crate) copies: FxHashMap<TaskId, crate::replicas::CopiesAsked>,
    /// The active memory manager's periodic pass, when started.
    pub(crate) amm: Option<crate::replicas::AmmTimer>,
}

impl Scheduler {
    pub fn new(config: Config) -> Self {
        let mut s = Scheduler {
            bandwidth: config.bandwidth,
            stealing: Stealing::default(),
            log: TransitionLog::new(config.transition_log_length),
            feed: TransitionFeed::default(),
            config,
            tasks: Vec::new(),
            free_tasks: Vec::new(),
            pending_free: Vec::new(),
            recyclable: Vec::new(),
            key_index: HashTable::new(),
            stale_keys: 0,
            n_tasks_live: 0,
            groups: Vec::new(),
            free_groups: Vec::new(),
            group_index: FxHashMap::default(),
            last_group: None,
            group_hint: None,
            group_stems: Vec::new(),
            prefixes: Vec::new(),
            prefix_index: FxHashMap::default(),
            workers: Vec::new(),
            worker_index: BTreeMap::new(),
            worker_rank: Vec::new(),
            running: WorkerSet::default(),
            idle: WorkerSet::default(),
            idle_task_count: Default::default(),
            saturated: WorkerSet::default(),
            total_nthreads: 0,
            total_memory: 0,
            total_nbytes: 0,
            n_processing: 0,
            clients: Vec::new(),
            client_index: FxHashMap::default(),
            queued: Default::default(),
            unrunnable: BTreeMap::new(),
            replicated_tasks: 0,
            generation: 0.0,
            last_fifo_time: 0.0,
            n_processing_assignments: 0,
            last_run_id: 0,
            last_queue_seq: 0,
            last_group_uid: 0,
            stimulus_counter: 0,
            now: 0.0,
            no_workers_since: None,
            prefix_count_global: IdIndexMap::default(),
            network_occ_global: 0,
            erred_history: Default::default(),
            commands: Vec::new(),
            recs_pool: Vec::new(),
            transition_counter: 0,
            counters: Default::default(),
            blocked: Vec::new(),
            replicas_asked: FxHashMap::default(),
            copies: FxHashMap::default(),
            amm: None,
        };
        s.client_id(FIRE_AND_FORGET);
        s
    }

    // ----- tasks -------------------------------------------------------------------

    #[inline]
    pub fn task(&self, t: TaskId) -> &Task {
        self.tasks[t.idx()].as_ref().expect("live task id")
    }

    #[inline]
    pub(crate) fn tm(&mut self, t: TaskId) -> &mut Task {
        self.tasks[t.idx()].as_mut().expect("live task id")
    }

    /// The task in slot `t` if the slot holds a task that is not forgotten.
    pub fn get_task(&self, t: TaskId) -> Option<&Task> {
        self.tasks
            .get(t.idx())?
            .as_ref()
            .filter(|ts| ts.state != TaskState::Forgotten)
    }

    /// The task in slot `t`, including a forgotten one whose id is still named by the
    /// last drained commands.
    pub fn task_slot(&self, t: TaskId) -> Option<&Task> {
        self.tasks.get(t.idx())?.as_ref()
    }

    #[inline]
    pub fn state_of(&self, t: TaskId) -> TaskState {
        self.task(t).state
    }

    pub fn lookup(&self, key: &KeyRef) -> Option<TaskId> {
        let f = key_fragment(key);
        let tasks = &self.tasks;
        // Entries of forgotten tasks linger (see `remove_task`): only a live task with
        // this very key is an answer, and there is at most one.
        self.key_index
            .find(index_hash(f), |&(g, t)| {
                g == f
                    && tasks[t.idx()]
                        .as_ref()
                        .is_some_and(|ts| ts.state != TaskState::Forgotten && ts.key() == key)
            })
            .map(|&(_, t)| t)
    }

    /// Number of tasks the scheduler knows (not forgotten).
    pub fn n_tasks(&self) -> usize {
        self.n_tasks_live
    }

    pub fn task_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.iter().enumerate().filter_map(|(i, t)| {
            t.as_ref()
                .filter(|ts| ts.state != TaskState::Forgotten)
                .map(|_| TaskId(i as u32))
        })
    }

    /// Makes room for `n` more tasks at once rather than growing step by step.
    pub(crate) fn reserve_tasks(&mut self, n: usize) {
        let want = n.saturating_sub(self.free_tasks.len());
        self.tasks.reserve(want);
        self.reserve_keys(n);
    }

    /// Room for `n` more key index entries. Where the index would have to grow while it
    /// holds entries of forgotten tasks, it is rebuilt from the live tasks instead.
    fn reserve_keys(&mut self, n: usize) {
        if self.key_index.capacity() - self.key_index.len() >= n {
            return;
        }
        if self.stale_keys == 0 {
            self.key_index.reserve(n, |&(f, _)| index_hash(f));
            return;
        }
        let live = self.n_tasks_live;
        let mut index = HashTable::with_capacity((live + n).max(2 * live));
        for (i, ts) in self.tasks.iter().enumerate() {
            if let Some(ts) = ts.as_ref().filter(|ts| ts.state != TaskState::Forgotten) {
                let f = key_fragment(ts.key());
                index.insert_unique(index_hash(f), (f, TaskId(i as u32)), |_| {
                    unreachable!("sized")
                });
            }
        }
        self.key_index = index;
        self.stale_keys = 0;
    }

    /// Creates a released task; the caller guarantees the key is new.
    pub(crate) fn create_task(&mut self, text: TaskText) -> TaskId {
        let group = self.group_for(text.key());
        let f = key_fragment(text.key());
        let task = Task::new(text, group);
        self.reserve_keys(1);
        let t = match self.free_tasks.pop() {
            Some(t) => {
                self.tasks[t.idx()] = Some(task);
                t
            }
            None => {
                self.tasks.push(Some(task));
                TaskId((self.tasks.len() - 1) as u32)
            }
        };
        self.key_index
            .insert_unique(index_hash(f), (f, t), |&(g, _)| index_hash(g));
        self.n_tasks_live += 1;
        let g = self.groups[group.idx()].as_mut().expect("live group");
        g.len += 1;
        g.state_counts[TaskState::Released as usize] += 1;
        let p = g.prefix;
        let prefix = &mut self.prefixes[p.idx()];
        prefix.state_counts[TaskState::Released as usize] += 1;
        prefix.state_totals[TaskState::Released as usize] += 1;
        self.counters.state_counts[TaskState::Released as usize] += 1;
        t
    }

    /// Retires a forgotten task; its slot is recycled on drain. Its key index entry is
    /// left in place (lookups skip it) and dropped when the index is rebuilt instead of
    /// growing, or emptied with the scheduler: a removal costs no random access.
    pub(crate) fn remove_task(&mut self, t: TaskId) {
        self.n_tasks_live -= 1;
        if !self.replicas_asked.is_empty() {
            self.replicas_asked.remove(&t); // its slot may be recycled
        }
        if !self.copies.is_empty() {
            self.copies.remove(&t);
        }
        self.stale_keys += 1;
        if self.n_tasks_live == 0 {
            self.key_index = HashTable::new();
            self.stale_keys = 0;
        }
        self.pending_free.push(t);
        let g = self.task(t).group;
        if self.groups[g.idx()]
            .as_ref()
            .is_some_and(|g| g.all_forgotten())
        {
            let group = self.groups[g.idx()].take().expect("live group");
            self.group_index.remove(&group.name);
            self.free_groups.push(g);
        }
    }

    /// Sets a task's state and keeps group, prefix and cluster-wide counters in step.
    #[inline]
    pub(crate) fn set_state(&mut self, t: TaskId, s: TaskState) {
        let ts = self.tasks[t.idx()].as_mut().expect("live task id");
        let old = ts.state;
        ts.state = s;
        let g = ts.group;
        let counts = &mut self.counters.state_counts;
        counts[old as usize] -= 1;
        counts[s as usize] += 1;
        if let Some(group) = self.groups[g.idx()].as_mut() {
            group.state_counts[old as usize] -= 1;
            group.state_counts[s as usize] += 1;
            let p = group.prefix;
            let prefix = &mut self.prefixes[p.idx()];
            prefix.state_counts[old as usize] -= 1;
            prefix.state_counts[s as usize] += 1;
            prefix.state_totals[s as usize] += 1;
        }
    }

    fn group_for(&mut self, key: &KeyRef) -> GroupId {
        // `key_split_group` ignores a final all-digit word of a str key, so `stem-<digits>`
        // keys all belong to the group found for the last key with that stem.
        let stem = digit_stem(key);
        if let (Some(st), Some((g, uid, cached))) = (stem, &self.group_hint) {
            if cached.as_slice() == st
                && self.groups[g.idx()].as_ref().is_some_and(|x| x.uid == *uid)
            {
                let g = *g;
                self.last_group = Some(g);
                return g;
            }
        }
        let g = self.group_for_slow(key);
        if let Some(st) = stem {
            let uid = self.group(g).uid;
            match &mut self.group_hint {
                Some((hg, huid, cached)) => {
                    *hg = g;
                    *huid = uid;
                    cached.clear();
                    cached.extend_from_slice(st);
                }
                None => self.group_hint = Some((g, uid, st.to_vec())),
            }
        }
        g
    }

    /// The recent group named by `key`'s start, if `key` is `<its name>-<a word
    /// with a digit>…`: `key_split` stops at such a word.
    fn group_by_stem(&self, key: &KeyRef) -> Option<GroupId> {
        let s = key.str_bytes()?;
        self.group_stems.iter().find_map(|&(g, uid)| {
            let group = self.groups[g.idx()].as_ref().filter(|x| x.uid == uid)?;
            let rest = s.strip_prefix(group.name.as_bytes())?.strip_prefix(b"-")?;
            let word = rest.split(|&c| c == b'-').next()?;
            word.iter().any(u8::is_ascii_digit).then_some(g)
        })
    }

    /// Remembers `g` for `group_by_stem` if its name qualifies: non-empty, starting
    /// with a letter and kept whole by `key_split` before such a word.
    fn learn_stem(&mut self, g: GroupId) {
        let group = self.group(g);
        let name = &group.name;
        let qualifies = name.chars().next().is_some_and(char::is_alphabetic)
            && key_split_group(&Key::str(&format!("{name}-0"))) == name.as_str();
        if qualifies {
            let entry = (g, group.uid);
            if self.group_stems.len() == GROUP_STEMS {
                self.group_stems.remove(0);
            }
            self.group_stems.push(entry);
        }
    }

    fn group_for_slow(&mut self, key: &KeyRef) -> GroupId {
        if let Some(g) = self.group_by_stem(key) {
            self.last_group = Some(g);
            return g;
        }
        let g = self.group_by_name(key);
        let entry = (g, self.group(g).uid);
        if key.str_bytes().is_some() && !self.group_stems.contains(&entry) {
            self.learn_stem(g);
        }
        g
    }

    fn group_by_name(&mut self, key: &KeyRef) -> GroupId {
        let name = key_split_group(key);
        // Consecutive tasks of a submission usually share a group.
        if let Some(g) = self.last_group {
            if self.groups[g.idx()]
                .as_ref()
                .is_some_and(|x| x.name == *name)
            {
                return g;
            }
        }
        if let Some(&g) = self.group_index.get(name.as_ref()) {
            self.last_group = Some(g);
            return g;
        }
        let prefix = self.prefix_for(&key_split(key));
        self.last_group_uid += 1;
        let uid = self.last_group_uid;
        let group = TaskGroup::new(name.clone().into_owned(), prefix, uid);
        let g = match self.free_groups.pop() {
            Some(g) => {
                self.groups[g.idx()] = Some(group);
                g
            }
            None => {
                self.groups.push(Some(group));
                GroupId((self.groups.len() - 1) as u32)
            }
        };
        self.group_index.insert(name.into_owned(), g);
        self.last_group = Some(g);
        g
    }

    fn prefix_for(&mut self, name: &str) -> PrefixId {
        if let Some(&p) = self.prefix_index.get(name) {
            return p;
        }
        let default = self.config.default_task_durations.get(name).copied();
        self.prefixes
            .push(TaskPrefix::new(name.to_owned(), default));
        let p = PrefixId((self.prefixes.len() - 1) as u32);
        self.prefix_index.insert(name.to_owned(), p);
        p
    }

    #[inline]
    pub fn group(&self, g: GroupId) -> &TaskGroup {
        self.groups[g.idx()].as_ref().expect("live group")
    }

    #[inline]
    pub(crate) fn group_mut(&mut self, g: GroupId) -> &mut TaskGroup {
        self.groups[g.idx()].as_mut().expect("live group")
    }

    pub fn prefix(&self, p: PrefixId) -> &TaskPrefix {
        &self.prefixes[p.idx()]
    }

    #[inline]
    pub(crate) fn prefix_of(&self, t: TaskId) -> PrefixId {
        self.group(self.task(t).group).prefix
    }

    // ----- workers and clients -----------------------------------------------------

    #[inline]
    pub fn worker(&self, w: WorkerId) -> &Worker {
        self.workers[w.idx()].as_ref().expect("live worker id")
    }

    #[inline]
    pub(crate) fn wm(&mut self, w: WorkerId) -> &mut Worker {
        self.workers[w.idx()].as_mut().expect("live worker id")
    }

    pub fn get_worker(&self, w: WorkerId) -> Option<&Worker> {
        self.workers.get(w.idx())?.as_ref()
    }

    pub fn worker_by_address(&self, address: &str) -> Option<WorkerId> {
        self.worker_index.get(address).copied()
    }

    /// Live workers in address order.
    pub fn worker_ids(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.worker_index.values().copied()
    }

    pub fn n_workers(&self) -> usize {
        self.worker_index.len()
    }

    #[inline]
    pub(crate) fn rank(&self, w: WorkerId) -> u32 {
        self.worker_rank[w.idx()]
    }

    /// Ranks a worker just added to `worker_index`: halfway between its neighbours'
    /// ranks, or [`RANK_GAP`] past the last (or before the first). Renumbering every
    /// worker, O(workers), happens only when there is no free number there; ranking
    /// each joining worker by renumbering made a cluster's start quadratic in its size.
    pub(crate) fn rank_joined(&mut self, w: WorkerId) {
        use std::ops::Bound::{Excluded, Unbounded};
        self.worker_rank.resize(self.workers.len(), u32::MAX);
        let address = self.worker(w).address.as_str();
        let neighbour = |x: Option<(&String, &WorkerId)>| x.map(|(_, &n)| u64::from(self.rank(n)));
        let prev = neighbour(
            self.worker_index
                .range::<str, _>((Unbounded, Excluded(address)))
                .next_back(),
        );
        let next = neighbour(
            self.worker_index
                .range::<str, _>((Excluded(address), Unbounded))
                .next(),
        );
        // Free numbers are lo..hi; u32::MAX stays unused.
        let lo = prev.map_or(0, |p| p + 1);
        let hi = next.unwrap_or(u64::from(u32::MAX));
        let rank = match (prev, next) {
            (Some(p), None) => p + RANK_GAP,
            (None, Some(n)) if n >= RANK_GAP => n - RANK_GAP,
            _ => lo + (hi - lo) / 2,
        };
        if lo <= rank && rank < hi {
            self.worker_rank[w.idx()] = rank as u32;
        } else {
            self.renumber_workers();
        }
    }

    /// Renumbers the live workers in address order, [`RANK_GAP`] apart (closer when
    /// that many would not fit), and re-files the worker sets under the new numbers.
    pub(crate) fn renumber_workers(&mut self) {
        self.worker_rank.resize(self.workers.len(), u32::MAX);
        let gap = (u64::from(u32::MAX) / (self.worker_index.len() as u64 + 1)).min(RANK_GAP);
        for (i, &w) in self.worker_index.values().enumerate() {
            self.worker_rank[w.idx()] = (i as u64 * gap) as u32;
        }
        let rank = &self.worker_rank;
        for set in [&mut self.running, &mut self.idle, &mut self.saturated] {
            set.rerank(rank);
        }
        self.idle_task_count.rerank(rank);
    }

    /// The id of a client, registering it on first sight.
    pub fn client_id(&mut self, name: &str) -> ClientId {
        if let Some(&c) = self.client_index.get(name) {
            return c;
        }
        self.clients.push(Client {
            id: name.to_owned(),
            wants_what: Vec::new(),
            last_seen: self.now,
        });
        let c = ClientId((self.clients.len() - 1) as u32);
        self.client_index.insert(name.to_owned(), c);
        c
    }

    /// Links `c` as wanting `t` (both sides); false if it already did.
    pub(crate) fn add_want(&mut self, t: TaskId, c: ClientId) -> bool {
        if self.task(t).who_wants.contains(c) {
            return false;
        }
        let pos = crate::links::push_back(&mut self.clients[c.idx()].wants_what, t);
        self.tm(t).who_wants.push(c, pos);
        true
    }

    /// Unlinks `c` from `t` (both sides); false if it did not want it.
    pub(crate) fn remove_want(&mut self, t: TaskId, c: ClientId) -> bool {
        let Some(pos) = self.tm(t).who_wants.remove(c) else {
            return false;
        };
        if let Some(moved) = crate::links::swap_out(&mut self.clients[c.idx()].wants_what, pos) {
            self.tm(moved).who_wants.set_position(c, pos);
        }
        true
    }

    pub fn client(&self, c: ClientId) -> &Client {
        &self.clients[c.idx()]
    }

    pub fn fire_and_forget_client(&self) -> ClientId {
        ClientId(0)
    }

    // ----- counters and outputs ----------------------------------------------------

    #[inline]
    pub(crate) fn next_run_id(&mut self) -> u64 {
        self.last_run_id += 1;
        self.last_run_id
    }

    /// Sequences start at 1: 0 marks a task in no line.
    #[inline]
    pub(crate) fn next_queue_seq(&mut self) -> u64 {
        self.last_queue_seq += 1;
        self.last_queue_seq
    }

    pub(crate) fn next_stimulus(&mut self, now: f64) -> u64 {
        self.now = self.now.max(now);
        self.stimulus_counter += 1;
        self.stimulus_counter
    }

    #[inline]
    pub(crate) fn emit(&mut self, c: Command) {
        self.commands.push(c);
    }

    /// Commands produced since the last drain (still resolvable).
    pub fn pending_commands(&self) -> &[Command] {
        &self.commands
    }

    /// Takes the pending commands out. Task ids in them stay resolvable (forgotten
    /// tasks remain as tombstones) until the *next* call, which recycles those slots.
    pub fn take_commands(&mut self) -> Vec<Command> {
        self.recycle_slots();
        self.recyclable = std::mem::take(&mut self.pending_free);
        std::mem::take(&mut self.commands)
    }

    /// Hands the pending commands to `f` while every id in them still resolves.
    pub fn drain<R>(&mut self, f: impl FnOnce(&Scheduler, &[Command]) -> R) -> R {
        let cmds = self.take_commands();
        f(self, &cmds)
    }

    fn recycle_slots(&mut self) {
        if !self.recyclable.is_empty() {
            self.log.resolve(&self.tasks);
            self.feed.resolve(&self.tasks);
        }
        for t in self.recyclable.drain(..) {
            self.tasks[t.idx()] = None;
            self.free_tasks.push(t);
        }
    }

    pub fn now(&self) -> f64 {
        self.now
    }

    pub fn bandwidth(&self) -> f64 {
        self.bandwidth
    }

    pub fn total_nthreads(&self) -> u64 {
        self.total_nthreads
    }

    /// Bytes: the sum of the live workers' memory limits (0 = unlimited ones add 0).
    pub fn total_memory(&self) -> u64 {
        self.total_memory
    }

    pub fn n_queued(&self) -> usize {
        self.queued.len()
    }

    pub fn n_unrunnable(&self) -> usize {
        self.unrunnable.len()
    }

    pub fn idle_workers(&self) -> Vec<WorkerId> {
        self.idle.iter().collect()
    }

    /// The queued tasks, best first.
    pub fn queued_tasks(&self) -> Vec<TaskId> {
        let tasks = &self.tasks;
        self.queued.sorted(|t| queued_entry(tasks, t))
    }
}

/// The 32 bits of a key's hash its index entry keeps.
fn key_fragment(key: &KeyRef) -> u32 {
    squall_hash::neighbour_hash(key.as_bytes()) as u32
}

/// The key index's hash of a stored fragment. A fragment keeps the place its key's
/// hash gives within a run of sixteen (its low four bits) and names the run in the
/// rest, so hashing it as a task id keeps a map's neighbouring keys in one run of
/// buckets (docs/core.md#hashing-neighbours).
fn index_hash(fragment: u32) -> u64 {
    squall_hash::id_hash(fragment)
}

/// For a str key `stem-<digits>` (one or more ASCII digits), the stem's bytes.
fn digit_stem(key: &KeyRef) -> Option<&[u8]> {
    let payload = key.str_bytes()?;
    // `(…` and `<…` keys are named from the whole string, digits included.
    if matches!(payload.first(), Some(b'(' | b'<')) {
        return None;
    }
    let digits = payload
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .count();
    let dash = payload.len().checked_sub(digits + 1)?;
    (digits > 0 && payload[dash] == b'-').then(|| &payload[..dash])
}

/// A queued task's priority and current queue sequence, None if `t` is not queued:
/// what the queue reads to order and recognise its entries (`queue::Current`).
pub(crate) fn queued_entry(
    tasks: &[Option<Task>],
    t: TaskId,
) -> Option<(squall_priority::Priority, u64)> {
    tasks[t.idx()]
        .as_ref()
        .filter(|ts| ts.state == TaskState::Queued)
        .map(|ts| (ts.priority, ts.queue_seq()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digit_stems_share_their_group() {
        let stems = [
            "inc",
            "hello-world",
            "x-1",
            "",
            "a,b",
            "_(x)",
            "ae05086432ca935f6eba409a8ecd489",
            "abcdefab",
            "x-abcdefab",
            "sum-aggregate-e1a2c3d4e5f6a7b8c9d0e1f2a3b4c5d6",
            "ñandú-ü",
        ];
        for st in stems {
            let a = Key::str(&format!("{st}-1"));
            let b = Key::str(&format!("{st}-20981234"));
            assert_eq!(digit_stem(&a), Some(st.as_bytes()));
            assert_eq!(key_split_group(&a), key_split_group(&b), "{st}");
        }
        for k in ["(x-1", "<f-2", "x", "x-", "x-1a", "-"] {
            assert_eq!(digit_stem(&Key::str(k)), None, "{k}");
        }
        assert_eq!(digit_stem(&Key::tuple_str_ints("x", &[1])), None);
        let long = "y".repeat(300);
        assert_eq!(
            digit_stem(&Key::str(&format!("{long}-7"))),
            Some(long.as_bytes())
        );
    }

    #[test]
    fn key_index_skips_forgotten_and_recycled_slots() {
        let mut s = Scheduler::new(Config::default());
        let forget = |s: &mut Scheduler, t: TaskId| {
            s.set_state(t, TaskState::Forgotten);
            s.remove_task(t);
        };
        let k = |i: usize| Key::str(&format!("k-{i}"));
        let ids: Vec<TaskId> = (0..3000)
            .map(|i| s.create_task(TaskText::new(&k(i), None)))
            .collect();
        for &t in &ids[..2000] {
            forget(&mut s, t);
        }
        assert_eq!(s.lookup(&k(0)), None, "a forgotten tombstone is no answer");
        assert_eq!(s.lookup(&k(2500)), Some(ids[2500]));
        s.take_commands();
        s.take_commands(); // the 2000 slots are free now
                           // Same key in a recycled slot, other keys in others, then growth (a rebuild).
        let again = s.create_task(TaskText::new(&k(0), None));
        assert_eq!(s.lookup(&k(0)), Some(again));
        let more: Vec<TaskId> = (3000..9000)
            .map(|i| s.create_task(TaskText::new(&k(i), None)))
            .collect();
        assert_eq!(s.stale_keys, 0, "growth rebuilt the index");
        for i in 1..2000 {
            assert_eq!(s.lookup(&k(i)), None);
        }
        assert_eq!(s.lookup(&k(0)), Some(again));
        assert_eq!(s.lookup(&k(2999)), Some(ids[2999]));
        assert_eq!(s.lookup(&k(8999)), Some(more[5999]));
        for t in s.task_ids().collect::<Vec<_>>() {
            forget(&mut s, t);
        }
        assert_eq!(s.key_index.len(), 0, "an empty scheduler drops its index");
        assert_eq!(s.lookup(&k(0)), None);
    }

    #[test]
    fn groups_by_hints_match_the_slow_path() {
        let mut s = Scheduler::new(Config::default());
        for k in [
            "a-1",
            "a-2",
            "(a-1",
            "(a-2",
            "b-x-3",
            "b-x-4",
            "a-3",
            // Stems followed by a word with a digit, interleaved (`group_by_stem`).
            "add-2ad4-1c70",
            "noop-9b-x",
            "add-b1-x",
            "noop-7",
            "add-x-1",
            "add-x-y2",
            "add-abcdefab-1",
            "add-abcdefab-2",
            "add-1-x",
            "add-",
            "add-x",
            "noop-x1",
            "data-1",
            "0123456789abcdef0123456789abcdef",
            "data-2",
            "_a-1",
            "a-1b",
            "x,y-1",
            "x,y-2",
            "<f>-1",
            "Other-1",
            "é-1",
            "é-2",
        ] {
            let key = Key::str(k);
            let g = s.group_for(&key);
            assert_eq!(s.group(g).name, key_split_group(&key), "{k}");
        }
    }
}
