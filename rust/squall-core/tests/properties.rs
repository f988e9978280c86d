//! Property tests: random DAGs, random cluster shapes and random interleavings of
//! worker, client and timer events, driven against a model of what every worker was
//! told (docs/scheduling.md: task-state invariants, the steal protocol, failures, memory release).
//!
//! The driver plays honest workers: a worker runs what it was sent (`compute-task`)
//! until it reports it, is told to drop it (`free-keys`), gives it up to a steal, or
//! dies; it holds a result from its accepted `task-finished` until `free-keys`, its
//! own `release-worker-data`, or its death; a worker asked to copy a retiring worker's
//! result (`acquire-replicas`) holds it once it fetched it while the result was in
//! memory. Checked after every step:
//!
//! * P1: `validate()` (also run inside every stimulus via `Config::validate`);
//! * the scheduler's view agrees with the workers': processing tasks ⇔ live
//!   assignments (same worker, same run id), `who_has` ⇔ results held, client wants;
//! * P3: a `compute-task` is sent only while every dependency is held by some worker,
//!   and a finish is accepted only while every dependency is held;
//! * P4: a key is dispatched / accepted as finished again only after its previous
//!   result was dropped everywhere (worker death, release-worker-data, free-keys after
//!   a release), and never to two workers at once.
//!
//! At the end of every scenario: P2 (liveness: with failures stopped, a running worker
//! and every dispatched task finished, each wanted key is in memory, or erred because of
//! an ancestor that failed with no retries left or was killed with its workers) and P5
//! (releasing every wanted key forgets everything, empties every worker and the
//! stealing tables). A separate property checks that a scenario replayed on a fresh
//! scheduler produces the identical command stream.
//!
//! Graphs: 1–4 components of up to 60 tasks in all, each a group of roots (shared
//! root prefixes make some groups root-ish, small ones are not) and up to 20 tasks with
//! 1–4 dependencies on earlier tasks, some with `retries`, a few with worker, loose or
//! resource restrictions. Clusters: 1–4 workers of 1–3 threads, worker-saturation
//! 1.0 / 1.1 / 2.0 / inf, stealing mostly on. Events: up to 120 of those in [`Op`].
//!
//! Debugging: `SQUALL_PROP_TRACE=1` prints every event and command of each scenario
//! run; `SQUALL_PROP_CASES_SCALE=n` multiplies the case counts; the ignored
//! `coverage_report` test counts what the generated scenarios exercise.

use proptest::prelude::*;
use proptest::test_runner::Config as PtConfig;
use squall_core::TaskState as S;
use squall_core::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

// ----- scenario generation -------------------------------------------------------------

const MAX_TASKS: usize = 60;
const ROOT_NAMES: [&str; 4] = ["load", "read", "x", "zeros"];
const OP_NAMES: [&str; 6] = ["inc", "add", "sum", "mul", "agg", "rechunk-split"];

#[derive(Clone, Debug)]
struct TaskGen {
    name: u8,
    deps: Vec<u16>,
    retries: u8,
    want: bool,
    /// 0: none; 1: must run on tcp://w01; 2: prefers tcp://w02 (loose); 3: needs a GPU.
    restrict: u8,
}

#[derive(Clone, Debug)]
struct CompGen {
    root_name: u8,
    n_roots: u8,
    root_retries: u8,
    tasks: Vec<TaskGen>,
    at_start: bool,
}

#[derive(Clone, Debug)]
struct ClusterGen {
    threads: Vec<u8>,
    saturation: f64,
    stealing: bool,
}

#[derive(Clone, Debug)]
enum Op {
    /// Finish the n-th live assignment (result size selector).
    Finish(u16, u8),
    /// The n-th live assignment raises.
    Fail(u16),
    /// A worker joins (threads; reuse a dead worker's address).
    AddWorker(u8, bool),
    /// A worker leaves: expected (0), dies unexplained (1), dies with its nanny's
    /// account of the tasks executing (2: the oldest it was given), or is restarted (3).
    KillWorker(u16, u8),
    /// A worker starts retiring.
    Retire(u16),
    /// A retiring worker's retirement ends (anyway if true): removed, or kept running.
    EndRetire(u16, bool),
    /// A worker asked to copy a retiring worker's result fetches it.
    Acquire(u16),
    /// Time passes; stealing may balance.
    Tick(u8),
    /// Answer a steal request (which, worker-state selector, mode: 0 = stale id).
    Steal(u16, u8, u8),
    /// The client drops one wanted key, or (true) all wanted keys of its component.
    Release(u16, bool),
    /// The client retries an erred key.
    Retry(u16),
    /// (Re)submit a component.
    Submit(u16),
    /// A late report of a superseded run (erred if true).
    Late(u16, bool),
    /// A worker drops one of its results on its own.
    ReleaseData(u16),
    /// A worker asks to reschedule a task it was given.
    Reschedule(u16),
    /// A task secedes from its worker's thread pool.
    LongRunning(u16),
    /// Pause (true) or resume a worker.
    Pause(u16, bool),
    /// A report from a worker that already left (rejected).
    DeadReport(u16),
    /// Replicas on demand: replicate a held key to n workers, rebalance, end the
    /// pending moves, or run ReduceReplicas once (docs/scheduling.md#replicas).
    Replicas(u16, u8),
}

#[derive(Clone, Debug)]
struct Scenario {
    comps: Vec<CompGen>,
    cluster: ClusterGen,
    ops: Vec<Op>,
}

fn task_gen() -> impl Strategy<Value = TaskGen> {
    (
        0u8..OP_NAMES.len() as u8,
        prop::collection::vec(any::<u16>(), 1..=4),
        prop_oneof![6 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8)],
        prop::bool::weighted(0.2),
        prop_oneof![24 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
    )
        .prop_map(|(name, deps, retries, want, restrict)| TaskGen {
            name,
            deps,
            retries,
            want,
            restrict,
        })
}

fn comp_gen() -> impl Strategy<Value = CompGen> {
    (
        0u8..ROOT_NAMES.len() as u8,
        1u8..=16,
        prop_oneof![3 => Just(0u8), 1 => Just(1u8)],
        prop::collection::vec(task_gen(), 0..=20),
        prop::bool::weighted(0.75),
    )
        .prop_map(
            |(root_name, n_roots, root_retries, tasks, at_start)| CompGen {
                root_name,
                n_roots,
                root_retries,
                tasks,
                at_start,
            },
        )
}

fn cluster_gen() -> impl Strategy<Value = ClusterGen> {
    (
        prop::collection::vec(1u8..=3, 1..=4),
        prop_oneof![
            3 => Just(1.1f64),
            1 => Just(1.0f64),
            1 => Just(2.0f64),
            2 => Just(f64::INFINITY)
        ],
        prop::bool::weighted(0.8),
    )
        .prop_map(|(threads, saturation, stealing)| ClusterGen {
            threads,
            saturation,
            stealing,
        })
}

fn op_gen() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (any::<u16>(), any::<u8>()).prop_map(|(a, b)| Op::Finish(a, b)),
        4 => any::<u16>().prop_map(Op::Fail),
        3 => (1u8..=3, prop::bool::weighted(0.3)).prop_map(|(a, b)| Op::AddWorker(a, b)),
        3 => (any::<u16>(), 0..4u8).prop_map(|(a, b)| Op::KillWorker(a, b)),
        2 => any::<u16>().prop_map(Op::Retire),
        1 => (any::<u16>(), any::<bool>()).prop_map(|(a, b)| Op::EndRetire(a, b)),
        3 => any::<u16>().prop_map(Op::Acquire),
        5 => any::<u8>().prop_map(Op::Tick),
        6 => (any::<u16>(), any::<u8>(), 0u8..5).prop_map(|(a, b, c)| Op::Steal(a, b, c)),
        3 => (any::<u16>(), prop::bool::weighted(0.3)).prop_map(|(a, b)| Op::Release(a, b)),
        2 => any::<u16>().prop_map(Op::Retry),
        2 => any::<u16>().prop_map(Op::Submit),
        3 => (any::<u16>(), any::<bool>()).prop_map(|(a, b)| Op::Late(a, b)),
        2 => any::<u16>().prop_map(Op::ReleaseData),
        1 => any::<u16>().prop_map(Op::Reschedule),
        1 => any::<u16>().prop_map(Op::LongRunning),
        2 => (any::<u16>(), any::<bool>()).prop_map(|(a, b)| Op::Pause(a, b)),
        1 => any::<u16>().prop_map(Op::DeadReport),
        2 => (any::<u16>(), any::<u8>()).prop_map(|(a, b)| Op::Replicas(a, b)),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(comp_gen(), 1..=4),
        cluster_gen(),
        prop::collection::vec(op_gen(), 0..=120),
    )
        .prop_map(|(comps, cluster, ops)| Scenario {
            comps,
            cluster,
            ops,
        })
}

// ----- the concrete graph --------------------------------------------------------------

struct GTask {
    key: String,
    /// Global indices of its dependencies.
    deps: Vec<usize>,
    retries: u32,
    restrict: u8,
}

struct Graph {
    tasks: Vec<GTask>,
    /// Global task indices of each component (dependencies first).
    comps: Vec<Vec<usize>>,
    wanted: Vec<Vec<usize>>,
    at_start: Vec<bool>,
    index: HashMap<String, usize>,
    ancestors: Vec<BTreeSet<usize>>,
}

impl Graph {
    fn build(gens: &[CompGen]) -> Graph {
        let mut tasks: Vec<GTask> = Vec::new();
        let mut comps = Vec::new();
        let mut wanted = Vec::new();
        let mut at_start = Vec::new();
        for (c, cg) in gens.iter().enumerate() {
            if tasks.len() >= MAX_TASKS {
                break;
            }
            let mut idx: Vec<usize> = Vec::new();
            for i in 0..cg.n_roots as usize {
                if tasks.len() >= MAX_TASKS {
                    break;
                }
                idx.push(tasks.len());
                tasks.push(GTask {
                    key: format!("{}-{c}-{i}", ROOT_NAMES[cg.root_name as usize]),
                    deps: Vec::new(),
                    retries: if i % 3 == 0 {
                        u32::from(cg.root_retries)
                    } else {
                        0
                    },
                    restrict: 0,
                });
            }
            let mut extra_wanted = Vec::new();
            for (j, tg) in cg.tasks.iter().enumerate() {
                if tasks.len() >= MAX_TASKS {
                    break;
                }
                let local = idx.len();
                let mut deps: Vec<usize> =
                    tg.deps.iter().map(|&d| idx[d as usize % local]).collect();
                deps.sort_unstable();
                deps.dedup();
                let gi = tasks.len();
                idx.push(gi);
                tasks.push(GTask {
                    key: format!("{}-{c}-{}", OP_NAMES[tg.name as usize], j),
                    deps,
                    retries: u32::from(tg.retries),
                    restrict: tg.restrict,
                });
                if tg.want {
                    extra_wanted.push(gi);
                }
            }
            let mut w: Vec<usize> = idx
                .iter()
                .copied()
                .filter(|&i| !idx.iter().any(|&d| tasks[d].deps.contains(&i)))
                .collect();
            w.extend(extra_wanted);
            w.sort_unstable();
            w.dedup();
            comps.push(idx);
            wanted.push(w);
            at_start.push(cg.at_start || c == 0);
        }
        let mut ancestors: Vec<BTreeSet<usize>> = Vec::with_capacity(tasks.len());
        for t in &tasks {
            let mut a = BTreeSet::new();
            for &d in &t.deps {
                a.insert(d);
                a.extend(ancestors[d].iter().copied());
            }
            ancestors.push(a);
        }
        let index = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.key.clone(), i))
            .collect();
        Graph {
            tasks,
            comps,
            wanted,
            at_start,
            index,
            ancestors,
        }
    }

    fn deps_of(&self, key: &str) -> Vec<String> {
        let i = self.index[key];
        self.tasks[i]
            .deps
            .iter()
            .map(|&d| self.tasks[d].key.clone())
            .collect()
    }
}

// ----- the driver ----------------------------------------------------------------------

/// A compute-task a worker holds: (worker, key, run id).
#[derive(Clone, Debug, PartialEq)]
struct Rec {
    w: WorkerId,
    key: String,
    run: u64,
}

#[derive(Clone, Debug)]
struct PendingSteal {
    victim: WorkerId,
    key: String,
    stim: u64,
    /// The victim's assignment when the request reached it.
    run: Option<u64>,
}

enum Ev {
    Compute(WorkerId, String, u64),
    Free(WorkerId, String),
    Steal(WorkerId, String, u64),
    /// (destination, key, retiring holder).
    Acquire(WorkerId, String, WorkerId),
    /// The worker's copy no longer counts.
    Remove(WorkerId, String),
    Other,
}

struct World {
    s: Scheduler,
    g: Graph,
    now: f64,
    client: ClientId,
    /// Registered workers, in join order.
    workers: Vec<WorkerId>,
    dead: Vec<WorkerId>,
    paused: BTreeSet<WorkerId>,
    retiring: BTreeSet<WorkerId>,
    /// Copies asked for and not fetched yet: (destination, key, holder).
    acquires: Vec<(WorkerId, String, WorkerId)>,
    next_addr: u32,
    /// Assignments the workers hold (oldest first).
    active: Vec<Rec>,
    /// Assignments a worker was told to drop but might still report.
    stale: Vec<Rec>,
    /// Which workers hold each key's result.
    holders: BTreeMap<String, BTreeSet<WorkerId>>,
    finishes: HashMap<String, u32>,
    losses: HashMap<String, u32>,
    /// Keys whose own failure (no retries left) made them erred.
    failed: BTreeSet<String>,
    steals: Vec<PendingSteal>,
    answered: Vec<(WorkerId, String, u64)>,
    wanted: BTreeSet<String>,
    /// Every command and report outcome, rendered.
    log: Vec<String>,
    step: usize,
    /// Each key's last state the transition feed reported.
    fed: HashMap<String, S>,
}

fn render(s: &Scheduler, c: &Command) -> (String, Ev) {
    let k = |t: &TaskId| s.task(*t).key().as_str().unwrap_or("?").to_string();
    let a = |w: &WorkerId| s.get_worker(*w).map_or("?".into(), |ws| ws.address.clone());
    match c {
        Command::ComputeTask {
            worker,
            task,
            run_id,
        } => (
            format!("compute {} @{} run={run_id}", k(task), a(worker)),
            Ev::Compute(*worker, k(task), *run_id),
        ),
        Command::FreeKeys { worker, task } => (
            format!("free {} @{}", k(task), a(worker)),
            Ev::Free(*worker, k(task)),
        ),
        Command::StealRequest {
            worker,
            task,
            stimulus,
        } => (
            format!("steal {} @{} stim={stimulus}", k(task), a(worker)),
            Ev::Steal(*worker, k(task), *stimulus),
        ),
        Command::AcquireReplica {
            worker,
            task,
            holder,
        } => (
            format!("acquire {} @{} <-{}", k(task), a(worker), a(holder)),
            Ev::Acquire(*worker, k(task), *holder),
        ),
        Command::RemoveReplicas { worker, task } => (
            format!("remove-replicas {} @{}", k(task), a(worker)),
            Ev::Remove(*worker, k(task)),
        ),
        other => {
            let txt = match other {
                Command::CloseWorker { worker } => format!("close-worker @{}", a(worker)),
                Command::WorkerRemoved { worker, removed } => {
                    format!("worker-removed {} @{}", a(removed), a(worker))
                }
                Command::KeyInMemory { task, .. } => format!("key-in-memory {}", k(task)),
                Command::TaskErred { task, blame, .. } => {
                    format!("task-erred {} blame={}", k(task), k(blame))
                }
                Command::LostData { task, .. } => format!("lost-data {}", k(task)),
                Command::TaskRetried { task, .. } => format!("task-retried {}", k(task)),
                Command::CancelledKeys { task, reason, .. } => {
                    format!("cancelled {} {reason:?}", k(task))
                }
                other => format!("{other:?}"),
            };
            (txt, Ev::Other)
        }
    }
}

impl World {
    fn new(scn: &Scenario) -> World {
        let cfg = Config {
            validate: true,
            worker_saturation: scn.cluster.saturation,
            work_stealing: scn.cluster.stealing,
            worker_ttl: None,
            ..Config::default()
        };
        let mut s = Scheduler::new(cfg);
        s.set_transition_feed(true);
        let client = s.client_id("client-1");
        let mut w = World {
            s,
            g: Graph::build(&scn.comps),
            now: 1.0,
            client,
            workers: Vec::new(),
            dead: Vec::new(),
            paused: BTreeSet::new(),
            retiring: BTreeSet::new(),
            acquires: Vec::new(),
            next_addr: 0,
            active: Vec::new(),
            stale: Vec::new(),
            holders: BTreeMap::new(),
            finishes: HashMap::new(),
            losses: HashMap::new(),
            failed: BTreeSet::new(),
            steals: Vec::new(),
            answered: Vec::new(),
            wanted: BTreeSet::new(),
            log: Vec::new(),
            step: 0,
            fed: HashMap::new(),
        };
        for &n in &scn.cluster.threads {
            w.add_worker(u32::from(n), false);
        }
        for c in 0..w.g.comps.len() {
            if w.g.at_start[c] {
                w.submit(c);
            }
        }
        w
    }

    fn tick(&mut self) -> f64 {
        self.now += 0.01;
        self.now
    }

    fn lookup(&self, key: &str) -> Option<TaskId> {
        self.s.lookup(&Key::str(key))
    }

    fn is_current(&self, r: &Rec) -> bool {
        self.lookup(&r.key).is_some_and(|t| {
            let ts = self.s.task(t);
            ts.state == S::Processing && ts.processing_on() == Some(r.w) && ts.run_id == r.run
        })
    }

    fn addr(&self, w: WorkerId) -> String {
        self.s.worker(w).address.clone()
    }

    fn lose_holder(&mut self, key: &str, w: WorkerId) {
        if let Some(h) = self.holders.get_mut(key) {
            if h.remove(&w) && h.is_empty() {
                *self.losses.entry(key.to_string()).or_insert(0) += 1;
            }
        }
    }

    /// Drains the commands, plays them on the workers' model, and checks agreement.
    fn pump(&mut self) {
        let evs: Vec<(String, Ev)> = self
            .s
            .drain(|s, cmds| cmds.iter().map(|c| render(s, c)).collect());
        for (txt, ev) in evs {
            self.log.push(txt);
            match ev {
                Ev::Compute(w, key, run) => self.on_compute(w, key, run),
                Ev::Free(w, key) => {
                    let (gone, keep): (Vec<Rec>, Vec<Rec>) = std::mem::take(&mut self.active)
                        .into_iter()
                        .partition(|r| r.w == w && r.key == key);
                    self.active = keep;
                    self.stale.extend(gone);
                    self.lose_holder(&key, w);
                }
                Ev::Steal(w, key, stim) => {
                    let run = self
                        .active
                        .iter()
                        .find(|r| r.w == w && r.key == key)
                        .map(|r| r.run);
                    self.steals.push(PendingSteal {
                        victim: w,
                        key,
                        stim,
                        run,
                    });
                }
                Ev::Acquire(w, key, holder) => self.acquires.push((w, key, holder)),
                Ev::Remove(w, key) => self.lose_holder(&key, w),
                Ev::Other => {}
            }
        }
        // Taken in chunks, all of it every third step and one chunk on some others, so
        // that forgotten slots get recycled while entries wait, some half taken.
        match self.step % 3 {
            0 => self.check_feed(true),
            1 => self.check_feed(false),
            _ => {}
        }
        self.check();
    }

    /// The transition feed tells each key's story without a gap: every transition
    /// starts where the last one left it (a forgotten key comes back released), and
    /// the last one is where the task is now.
    fn check_feed(&mut self, all: bool) {
        const CHUNK: usize = 5;
        loop {
            let chunk = self.s.take_transitions(CHUNK);
            let done = chunk.len() < CHUNK;
            for e in chunk {
                let key = e.key.as_str().unwrap_or("?").to_string();
                let last = self.fed.get(&key).copied().unwrap_or(S::Released);
                let from = if last == S::Forgotten {
                    S::Released
                } else {
                    last
                };
                assert_eq!(
                    e.start, from,
                    "step {}: {key} fed {:?} -> {:?} after {last:?}",
                    self.step, e.start, e.finish
                );
                self.fed.insert(key, e.finish);
            }
            if done || !all {
                break;
            }
        }
        if !all {
            return;
        }
        for (key, &last) in &self.fed {
            let now = self
                .lookup(key)
                .map_or(S::Forgotten, |t| self.s.state_of(t));
            assert_eq!(
                now, last,
                "step {}: {key} is {now:?}, fed {last:?}",
                self.step
            );
        }
    }

    fn on_compute(&mut self, w: WorkerId, key: String, run: u64) {
        let ctx = format!("step {}: compute {key} on {}", self.step, self.addr(w));
        // P3: every input is held somewhere at the moment of dispatch.
        for d in self.g.deps_of(&key) {
            assert!(
                self.holders.get(&d).is_some_and(|h| !h.is_empty()),
                "P3 violated ({ctx}): dependency {d} is held by no worker"
            );
        }
        // P4: no recomputation while a result exists, no second concurrent assignment.
        assert!(
            self.holders.get(&key).is_none_or(|h| h.is_empty()),
            "P4 violated ({ctx}): its result is still held by {:?}",
            self.holders[&key]
        );
        if let Some(other) = self.active.iter().find(|r| r.key == key) {
            panic!(
                "P4 violated ({ctx}): {} still holds an assignment of it (run {})",
                self.addr(other.w),
                other.run
            );
        }
        self.active.push(Rec { w, key, run });
    }

    /// The scheduler's view agrees with what the workers were told.
    fn check(&self) {
        let ctx = format!("after step {}", self.step);
        if let Err(e) = self.s.validate() {
            panic!("P1 violated {ctx}: {e}");
        }
        // Processing tasks ⇔ live assignments.
        for r in &self.active {
            assert!(
                self.is_current(r),
                "{ctx}: {} still runs {} (run {}) but the scheduler thinks otherwise",
                self.addr(r.w),
                r.key,
                r.run
            );
        }
        let mut n_processing = 0;
        for (key, holders) in self.g.index.keys().map(|k| (k, self.holders.get(k))) {
            let Some(t) = self.lookup(key) else {
                assert!(
                    holders.is_none_or(|h| h.is_empty()),
                    "{ctx}: {key} was forgotten but workers still hold it: {holders:?}"
                );
                continue;
            };
            let ts = self.s.task(t);
            if ts.state == S::Processing {
                n_processing += 1;
            }
            let who: BTreeSet<WorkerId> = ts.who_has.iter().collect();
            let empty = BTreeSet::new();
            assert_eq!(
                &who,
                holders.unwrap_or(&empty),
                "{ctx}: who_has of {key} disagrees with the workers"
            );
        }
        assert_eq!(
            n_processing,
            self.active.len(),
            "{ctx}: a processing task has no live assignment on its worker"
        );
        let wants: BTreeSet<String> = self
            .s
            .client(self.client)
            .wants_what
            .iter()
            .map(|&t| self.s.task(t).key().as_str().unwrap().to_string())
            .collect();
        assert_eq!(wants, self.wanted, "{ctx}: client wants disagree");
    }

    // ----- events ----------------------------------------------------------------------

    fn add_worker(&mut self, nthreads: u32, reuse: bool) {
        let reusable = self
            .dead
            .iter()
            .map(|&w| self.addr(w))
            .find(|a| self.s.worker_by_address(a).is_none());
        let address = match reusable.filter(|_| reuse) {
            Some(a) => a,
            None => {
                self.next_addr += 1;
                format!("tcp://w{:02}", self.next_addr)
            }
        };
        self.add_worker_at(address, nthreads);
    }

    /// Workers with an even address number have a GPU.
    fn add_worker_at(&mut self, address: String, nthreads: u32) {
        let n: u32 = address.trim_start_matches("tcp://w").parse().unwrap();
        let now = self.tick();
        let spec = WorkerSpec {
            address: address.clone(),
            name: address,
            host: "127.0.0.1".into(),
            nthreads,
            resources: if n.is_multiple_of(2) {
                vec![("GPU".into(), 1.0)]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let w = self.s.add_worker(spec, now).expect("add worker");
        self.workers.push(w);
        self.pump();
    }

    fn submit(&mut self, c: usize) {
        let idx = self.g.comps[c].clone();
        let local: HashMap<usize, u32> = idx
            .iter()
            .enumerate()
            .map(|(i, &gi)| (gi, i as u32))
            .collect();
        let tasks = idx
            .iter()
            .map(|&gi| {
                let gt = &self.g.tasks[gi];
                let mut nt = NewTask::new(
                    Key::str(&gt.key),
                    gt.deps.iter().map(|d| DepRef::Local(local[d])).collect(),
                    Some(gt.key.as_bytes().into()),
                );
                let restrictions = match gt.restrict {
                    1 => Some(Restrictions {
                        workers: vec!["tcp://w01".into()],
                        ..Default::default()
                    }),
                    2 => Some(Restrictions {
                        workers: vec!["tcp://w02".into()],
                        loose: true,
                        ..Default::default()
                    }),
                    3 => Some(Restrictions {
                        resources: vec![("GPU".into(), 1.0)],
                        ..Default::default()
                    }),
                    _ => None,
                };
                if gt.retries > 0 || restrictions.is_some() {
                    nt.options = Some(Box::new(TaskOptions {
                        retries: (gt.retries > 0).then_some(gt.retries),
                        restrictions,
                        ..Default::default()
                    }));
                }
                nt
            })
            .collect();
        let sub = Submission {
            tasks,
            wanted: self.g.wanted[c]
                .iter()
                .map(|gi| DepRef::Local(local[gi]))
                .collect(),
            defaults: TaskOptions::default(),
            fifo_timeout: 0.1,
            submitting_task: None,
            order: GraphOrder::Compute,
            blobs: Vec::new(),
        };
        let now = self.tick();
        self.s
            .update_graph(self.client, sub, now)
            .unwrap_or_else(|e| panic!("step {}: submitting component {c}: {e}", self.step));
        for &gi in &self.g.wanted[c] {
            self.wanted.insert(self.g.tasks[gi].key.clone());
        }
        self.pump();
    }

    /// A worker reports the assignment `active[i]` finished.
    fn finish(&mut self, i: usize, nbytes: i64) {
        let r = self.active.remove(i);
        let ctx = format!("step {}: finish {} on {}", self.step, r.key, self.addr(r.w));
        let t = self
            .lookup(&r.key)
            .expect("a live assignment names a live task");
        // P3: the finish is accepted, so every input must exist somewhere.
        for d in self.g.deps_of(&r.key) {
            assert!(
                self.holders.get(&d).is_some_and(|h| !h.is_empty()),
                "P3 violated ({ctx}): dependency {d} is held by no worker"
            );
        }
        // P4: a second accepted finish needs the previous result to have been lost.
        let before = self.finishes.get(&r.key).copied().unwrap_or(0);
        let lost = self.losses.get(&r.key).copied().unwrap_or(0);
        assert!(
            before <= lost,
            "P4 violated ({ctx}): finished {before} times before, lost only {lost} times"
        );
        let now = self.tick();
        let rep = Finished::computed(t, r.run, nbytes, now - 0.005, now);
        let out = self.s.task_finished(r.w, rep, now);
        assert_eq!(out, Ok(Outcome::Applied), "{ctx}");
        self.log.push(format!("finished {} -> {out:?}", r.key));
        self.holders.entry(r.key.clone()).or_default().insert(r.w);
        *self.finishes.entry(r.key.clone()).or_insert(0) += 1;
        self.pump();
    }

    fn fail(&mut self, i: usize) {
        let r = self.active.remove(i);
        let t = self.lookup(&r.key).expect("live task");
        let retries = self.s.task(t).retries();
        let now = self.tick();
        let err = ErrorInfo {
            exception_text: format!("boom in {}", r.key),
            ..Default::default()
        };
        let out = self.s.task_erred(r.w, t, r.run, err, now);
        assert_eq!(
            out,
            Ok(Outcome::Applied),
            "step {}: fail {}",
            self.step,
            r.key
        );
        self.log.push(format!("erred {} -> {out:?}", r.key));
        self.pump();
        let st = self.lookup(&r.key).map(|t| self.s.state_of(t));
        if retries > 0 {
            assert_ne!(st, Some(S::Erred), "{} erred with retries left", r.key);
        } else {
            assert_eq!(st, Some(S::Erred), "{} did not err", r.key);
            self.failed.insert(r.key);
        }
    }

    fn kill_worker(&mut self, i: usize, how: u8) {
        let w = self.workers[i];
        let now = self.tick();
        match how {
            2 => {
                let executing: Vec<TaskId> = (self.active.iter())
                    .filter(|r| r.w == w)
                    .take(1)
                    .filter_map(|r| self.lookup(&r.key))
                    .collect();
                self.s.worker_died(w, &executing, now)
            }
            3 => self.s.restart_workers(&[w], now),
            _ => self.s.remove_worker(w, how == 0, now),
        }
        .expect("remove worker");
        self.log.push(format!("removed {}", self.addr(w)));
        self.forget_worker(w);
    }

    /// The model's side of a worker leaving: it holds and runs nothing any more.
    fn forget_worker(&mut self, w: WorkerId) {
        self.workers.retain(|&x| x != w);
        self.dead.push(w);
        self.retiring.remove(&w);
        self.acquires.retain(|&(d, _, h)| d != w && h != w);
        self.paused.remove(&w);
        self.active.retain(|r| r.w != w);
        self.stale.retain(|r| r.w != w);
        self.steals.retain(|p| p.victim != w);
        let keys: Vec<String> = self.holders.keys().cloned().collect();
        for k in keys {
            self.lose_holder(&k, w);
        }
        self.pump();
    }

    /// Answers a pending steal request as an honest victim would have when it got it.
    fn answer_steal(&mut self, i: usize, choice: u8) {
        use WorkerTaskState as W;
        let p = self.steals.remove(i);
        let Some(t) = self.lookup(&p.key) else {
            return; // forgotten meanwhile: the I/O layer drops the response
        };
        let ctx = format!(
            "step {}: steal-response {} from {}",
            self.step,
            p.key,
            self.addr(p.victim)
        );
        let run = p.run.unwrap_or_else(|| {
            panic!("{ctx}: steal request for a task the victim was never given")
        });
        let pos = self
            .active
            .iter()
            .position(|r| r.w == p.victim && r.key == p.key && r.run == run);
        let now = self.tick();
        let (state, expect) = match pos {
            Some(pos) => {
                let state = [
                    W::Ready,
                    W::Waiting,
                    W::Constrained,
                    W::Executing,
                    W::LongRunning,
                ][choice as usize % 5];
                let gives_up = matches!(state, W::Ready | W::Waiting | W::Constrained);
                if gives_up {
                    self.active.remove(pos);
                }
                (state, Some(gives_up))
            }
            // The victim already finished, failed or dropped that run: whatever it said,
            // the task left processing since, so the answer must be ignored.
            None => (
                [W::Memory, W::Executing, W::Cancelled, W::Released][choice as usize % 4],
                Some(false),
            ),
        };
        let out = self.s.steal_response(p.victim, t, Some(state), p.stim, now);
        self.log
            .push(format!("steal-response {} {state:?} -> {out:?}", p.key));
        assert_eq!(out, Ok(expect.unwrap()), "{ctx} ({state:?})");
        self.answered.push((p.victim, p.key, p.stim));
        self.pump();
    }

    /// A response with a stimulus id the scheduler is not waiting for: ignored, silently.
    fn stale_steal(&mut self, sel: usize, choice: u8) {
        use WorkerTaskState as W;
        let (victim, key, stim) = if !self.answered.is_empty() && choice & 1 == 0 {
            self.answered[sel % self.answered.len()].clone()
        } else if !self.steals.is_empty() {
            let p = &self.steals[sel % self.steals.len()];
            (p.victim, p.key.clone(), p.stim + 1_000_000)
        } else {
            return;
        };
        if !self.workers.contains(&victim) {
            return;
        }
        let Some(t) = self.lookup(&key) else { return };
        let state = [None, Some(W::Released), Some(W::Ready), Some(W::Executing)]
            [(choice / 2) as usize % 4];
        let now = self.tick();
        let out = self.s.steal_response(victim, t, state, stim, now);
        assert_eq!(
            out,
            Ok(false),
            "step {}: stale steal-response for {key}",
            self.step
        );
        assert!(
            self.s.pending_commands().is_empty(),
            "a stale steal-response emitted commands"
        );
        self.pump();
    }

    fn late_report(&mut self, i: usize, erred: bool) {
        let r = self.stale.remove(i);
        let Some(t) = self.lookup(&r.key) else { return };
        assert!(
            !self.is_current(&r),
            "a dropped assignment is current again"
        );
        let now = self.tick();
        let out = if erred {
            let err = ErrorInfo {
                exception_text: "late".into(),
                ..Default::default()
            };
            self.s.task_erred(r.w, t, r.run, err, now)
        } else {
            let rep = Finished::computed(t, r.run, 8, now - 0.005, now);
            self.s.task_finished(r.w, rep, now)
        };
        self.log
            .push(format!("late {} {} -> {out:?}", r.key, r.run));
        if out.is_err() {
            assert!(
                self.s.pending_commands().is_empty(),
                "a rejected report emitted commands"
            );
        }
        self.pump();
    }

    fn release_data(&mut self, sel: usize) {
        let pairs: Vec<(String, WorkerId)> = self
            .holders
            .iter()
            .flat_map(|(k, ws)| ws.iter().map(move |&w| (k.clone(), w)))
            .collect();
        if pairs.is_empty() {
            return;
        }
        let (key, w) = pairs[sel % pairs.len()].clone();
        let t = self.lookup(&key).expect("held keys are live");
        let now = self.tick();
        let out = self.s.release_worker_data(w, t, now);
        assert_eq!(out, Ok(Outcome::Applied));
        self.log.push(format!("release-worker-data {key}"));
        self.lose_holder(&key, w);
        self.pump();
    }

    fn retire(&mut self, w: WorkerId) {
        let now = self.tick();
        let started = self.s.retire_workers(&[w], now).expect("retire");
        assert_eq!(started, vec![w], "a running worker starts retiring");
        self.log.push(format!("retire {}", self.addr(w)));
        self.retiring.insert(w);
        self.pump();
    }

    fn end_retirement(&mut self, w: WorkerId, anyway: bool) {
        let now = self.tick();
        let state = self.s.retirement(w).expect("retiring");
        let out = self.s.end_retirement(&[w], anyway, true, now).expect("end");
        self.log.push(format!(
            "end-retirement {} {state:?} -> {out:?}",
            self.addr(w)
        ));
        // Retired only if every result it holds is held outside the retiring workers.
        let done = !self
            .holders
            .values()
            .any(|h| h.contains(&w) && h.iter().all(|x| self.retiring.contains(x)));
        if out.retired == [w] {
            assert!(
                anyway || done,
                "retired {} with results only it held",
                self.addr(w)
            );
            self.forget_worker(w);
        } else {
            assert!(!anyway && !done, "kept {} for nothing", self.addr(w));
            self.retiring.remove(&w);
        }
        self.pump();
    }

    /// The destination of a copy fetches it from the retiring holder, if that still
    /// holds it, and announces it; the core counts it only if the result is in memory.
    fn acquire(&mut self, i: usize) {
        let (w, key, holder) = self.acquires.remove(i);
        if !self.holders.get(&key).is_some_and(|h| h.contains(&holder)) {
            return; // dropped meanwhile: the fetch fails
        }
        let t = self.lookup(&key).expect("held keys are live");
        let now = self.tick();
        self.s.add_keys(w, &[t], now).expect("add keys");
        self.log.push(format!("acquired {key} @{}", self.addr(w)));
        if self.s.state_of(t) == S::Memory {
            self.holders.entry(key).or_default().insert(w);
        }
        self.pump();
    }

    fn replicas(&mut self, i: usize, what: u8) {
        let now = self.tick();
        match what % 4 {
            0 => {
                let held: Vec<String> = (self.holders.iter())
                    .filter(|(_, h)| !h.is_empty())
                    .map(|(k, _)| k.clone())
                    .collect();
                if held.is_empty() {
                    return;
                }
                let key = Key::str(&held[i % held.len()]);
                let n = usize::from(what / 4) % 4;
                let n = (n > 0).then_some(n);
                if self.s.replicate(&[key], n, None, 2, now).is_err() {
                    return; // no running worker: refused, nothing changed
                }
                self.log.push(format!("replicate n={n:?}"));
            }
            1 => {
                let settings = RebalanceSettings {
                    measure: Measure::Managed,
                    ..RebalanceSettings::default()
                };
                let out = self
                    .s
                    .rebalance(None, None, settings, now)
                    .expect("rebalance");
                self.log
                    .push(format!("rebalance: {} moves", out.moves.len()));
            }
            2 => {
                let keys = self.s.end_moves();
                self.log.push(format!("end moves: {keys:?}"));
            }
            _ => {
                let n = self.s.reduce_replicas(now);
                self.log.push(format!("reduce replicas: {n} dropped"));
            }
        }
        self.pump();
    }

    fn step_op(&mut self, op: &Op) {
        self.step += 1;
        let n_active = self.active.len();
        match *op {
            Op::Finish(i, nb) if n_active > 0 => {
                let nbytes = [0i64, 8, 1000, 100_000, 50_000_000][nb as usize % 5];
                self.finish(i as usize % n_active, nbytes)
            }
            Op::Fail(i) if n_active > 0 => self.fail(i as usize % n_active),
            Op::AddWorker(n, reuse) if self.workers.len() < 6 => {
                self.add_worker(u32::from(n), reuse)
            }
            Op::KillWorker(i, how) if !self.workers.is_empty() => {
                self.kill_worker(i as usize % self.workers.len(), how)
            }
            Op::Retire(i) => {
                let free: Vec<WorkerId> = (self.workers.iter().copied())
                    .filter(|w| !self.retiring.contains(w) && !self.paused.contains(w))
                    .collect();
                if !free.is_empty() {
                    self.retire(free[i as usize % free.len()]);
                }
            }
            Op::EndRetire(i, anyway) if !self.retiring.is_empty() => {
                let w = *self
                    .retiring
                    .iter()
                    .nth(i as usize % self.retiring.len())
                    .unwrap();
                self.end_retirement(w, anyway);
            }
            Op::Acquire(i) if !self.acquires.is_empty() => {
                self.acquire(i as usize % self.acquires.len())
            }
            Op::Tick(dt) => {
                self.now += 1.0 + f64::from(dt) / 100.0;
                let now = self.now;
                self.s.tick(now);
                self.pump();
            }
            Op::Steal(i, choice, 0) => self.stale_steal(i as usize, choice),
            Op::Steal(i, choice, _) if !self.steals.is_empty() => {
                self.answer_steal(i as usize % self.steals.len(), choice)
            }
            Op::Release(i, whole) if !self.wanted.is_empty() => {
                let key = self
                    .wanted
                    .iter()
                    .nth(i as usize % self.wanted.len())
                    .unwrap()
                    .clone();
                let keys: Vec<String> = if whole {
                    let gi = self.g.index[&key];
                    let c = self.g.comps.iter().position(|c| c.contains(&gi)).unwrap();
                    self.g.wanted[c]
                        .iter()
                        .map(|&gi| self.g.tasks[gi].key.clone())
                        .filter(|k| self.wanted.contains(k))
                        .collect()
                } else {
                    vec![key]
                };
                let now = self.tick();
                let ks: Vec<Key> = keys.iter().map(|k| Key::str(k)).collect();
                self.s
                    .client_releases_keys(self.client, &ks, now)
                    .expect("release");
                self.log.push(format!("release {keys:?}"));
                for k in keys {
                    self.wanted.remove(&k);
                }
                self.pump();
            }
            Op::Retry(i) => {
                let erred: Vec<String> = self
                    .g
                    .tasks
                    .iter()
                    .map(|t| t.key.clone())
                    .filter(|k| {
                        self.lookup(k)
                            .is_some_and(|t| self.s.state_of(t) == S::Erred)
                    })
                    .collect();
                if !erred.is_empty() {
                    let key = erred[i as usize % erred.len()].clone();
                    let now = self.tick();
                    self.s.retry(&[Key::str(&key)], now).expect("retry");
                    self.log.push(format!("retry {key}"));
                    self.pump();
                }
            }
            Op::Submit(c) => self.submit(c as usize % self.g.comps.len()),
            Op::Late(i, erred) => {
                self.stale.retain(|r| self.workers.contains(&r.w));
                if !self.stale.is_empty() {
                    self.late_report(i as usize % self.stale.len(), erred)
                }
            }
            Op::ReleaseData(i) => self.release_data(i as usize),
            Op::Reschedule(i) if n_active > 0 => {
                let r = self.active.remove(i as usize % n_active);
                let t = self.lookup(&r.key).unwrap();
                let now = self.tick();
                let out = self.s.reschedule(r.w, t, now);
                assert_eq!(out, Ok(Outcome::Applied));
                self.log.push(format!("reschedule {}", r.key));
                self.pump();
            }
            Op::LongRunning(i) if n_active > 0 => {
                let r = self.active[i as usize % n_active].clone();
                let t = self.lookup(&r.key).unwrap();
                let now = self.tick();
                let out = self.s.long_running(r.w, t, r.run, 0.05, now);
                assert!(out.is_ok());
                self.log.push(format!("long-running {} -> {out:?}", r.key));
                self.pump();
            }
            Op::Pause(i, pause) if !self.workers.is_empty() => {
                let w = self.workers[i as usize % self.workers.len()];
                if self.retiring.contains(&w) {
                    return; // a retiring worker's pausing does not change its status
                }
                let status = if pause {
                    self.paused.insert(w);
                    WorkerStatus::Paused
                } else {
                    self.paused.remove(&w);
                    WorkerStatus::Running
                };
                let now = self.tick();
                self.s.worker_status_change(w, status, now).expect("status");
                self.log
                    .push(format!("status {} {}", self.addr(w), status.name()));
                self.pump();
            }
            Op::Replicas(i, what) => self.replicas(i as usize, what),
            Op::DeadReport(i) if !self.dead.is_empty() => {
                let w = self.dead[i as usize % self.dead.len()];
                if let Some(t) = self.g.tasks.iter().find_map(|t| self.lookup(&t.key)) {
                    let now = self.tick();
                    let out = self
                        .s
                        .task_finished(w, Finished::computed(t, 1, 8, now, now), now);
                    assert_eq!(out, Err(CoreError::UnknownWorker(w.0)));
                    assert!(self.s.pending_commands().is_empty());
                    self.pump();
                }
            }
            _ => {}
        }
    }

    /// Stop failing, keep a running worker, answer every steal and finish everything
    /// dispatched until nothing runs.
    fn settle(&mut self) {
        self.step += 1;
        for w in std::mem::take(&mut self.retiring) {
            let now = self.tick();
            self.s
                .worker_status_change(w, WorkerStatus::Running, now)
                .unwrap();
            self.pump();
        }
        for w in std::mem::take(&mut self.paused) {
            let now = self.tick();
            self.s
                .worker_status_change(w, WorkerStatus::Running, now)
                .unwrap();
            self.pump();
        }
        if self.workers.is_empty() {
            self.add_worker(2, false);
        }
        // Hard restrictions must be satisfiable again.
        let needs = |r: u8| self.g.tasks.iter().any(|t| t.restrict == r);
        let (pinned, gpus) = (needs(1), needs(3));
        if pinned && self.s.worker_by_address("tcp://w01").is_none() {
            self.add_worker_at("tcp://w01".into(), 1);
        }
        let gpu = |w: &WorkerId| self.s.worker(*w).resource("GPU").is_some();
        if gpus && !self.workers.iter().any(gpu) {
            self.next_addr += 2 - self.next_addr % 2;
            self.add_worker_at(format!("tcp://w{:02}", self.next_addr), 1);
        }
        let mut guard = 0;
        loop {
            guard += 1;
            assert!(guard < 10_000, "settling does not terminate");
            self.step += 1;
            if !self.steals.is_empty() {
                let choice = (self.steals[0].stim % 5) as u8;
                self.answer_steal(0, choice);
            } else if !self.active.is_empty() {
                self.finish(0, 64);
            } else {
                break;
            }
        }
    }

    fn story(&self, key: &str) -> String {
        self.s
            .story(&Key::str(key))
            .iter()
            .map(|e| format!("{}->{}@{}", e.start.name(), e.finish.name(), e.stimulus))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// An erred key's blame chain (Dask re-points the blame of an erred task when an
    /// upstream task errs later) ends, through erred ancestors, at a task that failed
    /// for good on a worker or was killed with its workers.
    fn check_blame(&self, key: &str) {
        let mut cur = key.to_string();
        for _ in 0..=MAX_TASKS {
            let t = self
                .lookup(&cur)
                .unwrap_or_else(|| panic!("P2: {key}: {cur} forgotten"));
            let ts = self.s.task(t);
            assert_eq!(
                ts.state,
                S::Erred,
                "P2: {key} blames {cur}, which is not erred; {}",
                self.story(&cur)
            );
            let b = ts.exception_blame().expect("an erred task has a blame");
            let bkey = self
                .s
                .get_task(b)
                .unwrap_or_else(|| panic!("P2: {cur} blames a forgotten task"))
                .key()
                .as_str()
                .unwrap()
                .to_string();
            let (ci, bi) = (self.g.index[&cur], self.g.index[&bkey]);
            assert!(
                ci == bi || self.g.ancestors[ci].contains(&bi),
                "P2: {cur} blames {bkey}, which is not an ancestor"
            );
            if bkey == cur {
                let killed = ts
                    .error()
                    .is_some_and(|e| e.kind == ErrorKind::KilledWorker);
                assert!(
                    killed || self.failed.contains(&cur),
                    "P2: {key} erred because of {cur}, which never failed for good"
                );
                return;
            }
            cur = bkey;
        }
        panic!("P2: the blame chain of {key} does not end");
    }

    /// P2: what every wanted key ended as, and why.
    fn check_liveness(&self) {
        assert_eq!(self.s.n_queued(), 0, "P2: tasks stuck in the queue");
        assert_eq!(self.s.n_unrunnable(), 0, "P2: tasks stuck in no-worker");
        for key in &self.wanted {
            let t = self
                .lookup(key)
                .unwrap_or_else(|| panic!("P2: wanted {key} forgotten"));
            let ts = self.s.task(t);
            match ts.state {
                S::Memory => {}
                S::Erred => self.check_blame(key),
                st => panic!(
                    "P2: wanted {key} ended {}; story {}",
                    st.name(),
                    self.story(key)
                ),
            }
        }
    }

    /// P5: releasing everything leaves nothing behind.
    fn release_everything(&mut self) {
        self.step += 1;
        let keys: Vec<Key> = self.wanted.iter().map(|k| Key::str(k)).collect();
        let now = self.tick();
        self.s
            .client_releases_keys(self.client, &keys, now)
            .unwrap();
        self.wanted.clear();
        self.pump();
        // Anything still asked of a victim is answered; it must be ignored by now.
        while !self.steals.is_empty() {
            self.answer_steal(0, 1);
        }
        assert_eq!(self.s.n_tasks(), 0, "P5: tasks leaked");
        assert_eq!(self.s.n_queued(), 0, "P5: queue leaked");
        assert_eq!(self.s.n_unrunnable(), 0, "P5: unrunnable leaked");
        for &w in &self.workers {
            let ws = self.s.worker(w);
            assert!(
                ws.processing.is_empty(),
                "P5: {} still processing",
                ws.address
            );
            assert!(
                ws.long_running.is_empty(),
                "P5: {} long-running",
                ws.address
            );
            assert!(
                ws.has_what.is_empty(),
                "P5: {} still holds data",
                ws.address
            );
            assert!(
                ws.needs_what.is_empty(),
                "P5: {} still needs data",
                ws.address
            );
            assert_eq!(ws.nbytes, 0, "P5: {} nbytes", ws.address);
        }
        assert!(
            self.holders.values().all(|h| h.is_empty()),
            "P5: workers were never told to drop {:?}",
            self.holders
        );
        assert!(self.active.is_empty());
        let st = self.s.stealing_stats();
        assert_eq!(st.n_stealable(), 0, "P5: stealable tasks leaked");
        assert_eq!(st.n_in_flight(), 0, "P5: in-flight steals leaked");
        assert!(
            self.s.total_occupancy().abs() < 1e-9,
            "P5: occupancy leaked: {}",
            self.s.total_occupancy()
        );
    }
}

/// Plays a whole scenario, checking every property; returns the command log.
fn run(scn: &Scenario) -> Vec<String> {
    let trace = std::env::var_os("SQUALL_PROP_TRACE").is_some();
    let mut w = World::new(scn);
    let mut shown = 0;
    if trace {
        for (i, t) in w.g.tasks.iter().enumerate() {
            let deps: Vec<&str> = t.deps.iter().map(|&d| w.g.tasks[d].key.as_str()).collect();
            eprintln!(
                "task {i} {} <- {deps:?} retries={} restrict={}",
                t.key, t.retries, t.restrict
            );
        }
        eprintln!("wanted {:?}", w.wanted);
    }
    for op in &scn.ops {
        w.step_op(op);
        if trace {
            eprintln!("== {op:?}");
            for l in &w.log[shown..] {
                eprintln!("   {l}");
            }
            shown = w.log.len();
        }
    }
    w.settle();
    if trace {
        eprintln!("== settle");
        for l in &w.log[shown..] {
            eprintln!("   {l}");
        }
        for t in &w.g.tasks {
            let st = w.lookup(&t.key).map(|x| w.s.state_of(x).name());
            eprintln!("story {} ({st:?}): {}", t.key, w.story(&t.key));
        }
    }
    w.check_liveness();
    w.release_everything();
    w.log
}

/// `SQUALL_PROP_CASES_SCALE=n` multiplies the case counts for longer local runs.
fn pt_config(cases: u32) -> PtConfig {
    let scale: u32 = std::env::var("SQUALL_PROP_CASES_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    PtConfig {
        cases: cases * scale,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..PtConfig::default()
    }
}

proptest! {
    #![proptest_config(pt_config(800))]

    /// P1–P5 on random graphs, clusters and event interleavings.
    #[test]
    fn random_interleavings_keep_every_property(scn in scenario()) {
        run(&scn);
    }
}

proptest! {
    #![proptest_config(pt_config(48))]

    /// The same event sequence on a fresh scheduler gives the same command stream.
    #[test]
    fn replay_is_deterministic(scn in scenario()) {
        let a = run(&scn);
        let b = run(&scn);
        prop_assert_eq!(a, b);
    }
}

/// What the generated scenarios exercise (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn coverage_report() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..400 {
        let scn = scenario().new_tree(&mut runner).unwrap().current();
        for line in run(&scn) {
            let mut words = line.split(' ');
            let op = words.next().unwrap_or("").to_string();
            let tail = line.rsplit("-> ").next().unwrap_or("");
            let tail = tail.split([' ', '{']).next().unwrap_or("");
            let key = if line.contains("-> ") {
                format!("{op} -> {tail}")
            } else {
                op
            };
            *counts.entry(key).or_insert(0) += 1;
        }
    }
    for (k, v) in counts {
        println!("{v:>8}  {k}");
    }
}

/// The same fixed-seed scenarios, replayed, give the same command streams.
#[test]
fn fixed_seed_replay_is_deterministic() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    for _ in 0..8 {
        let scn = scenario().new_tree(&mut runner).unwrap().current();
        let a = run(&scn);
        assert!(!a.is_empty());
        assert_eq!(a, run(&scn));
    }
}
