//! Property test: random small graphs whose keys this worker computes or fetches from
//! peers, random interleavings of scheduler messages, task threads and fetch results;
//! the bookkeeping's invariants are checked after every step, and once everything is
//! freed and every call has returned no key may be left.

use super::{key, ME};
use crate::*;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

const PEERS: [&str; 4] = [ME, "p1", "p2", "p3"];

#[derive(Clone, Debug)]
struct Node {
    deps: Vec<u32>,
    /// Who holds the key, per the scheduler (may name this worker, may be empty).
    holders: Vec<&'static str>,
    user: i32,
    order: u32,
    gpu: Option<f64>,
}

#[derive(Clone, Debug)]
enum Ev {
    /// Send one task (index mod n).
    Compute(u32),
    /// Send every task, in dependency order or reversed.
    ComputeAll(bool),
    Take,
    Complete(u32, bool),
    Free(u32),
    Steal(u32),
    RemoveReplica(u32),
    Fetches(u8),
    /// An in-flight fetch ends: 0..=5 value, 6..=8 peer lacks it, 9 load error.
    Fetched(u32, u8),
    GiveBack(u32),
    Secede(u32),
    Rejoin(u32),
    Scatter(u32),
    /// Spill up to this many least recently used values (their handle: the negated value).
    Spill(u8),
    Pause(bool),
}

fn node() -> impl Strategy<Value = Node> {
    (
        prop::collection::vec(any::<u32>(), 0..4),
        any::<u8>(),
        -1i32..2,
        0u32..4,
        prop_oneof![4 => Just(None), 1 => Just(Some(0.5)), 1 => Just(Some(1.0))],
    )
        .prop_map(|(deps, mask, user, order, gpu)| Node {
            deps,
            holders: (0..4)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| PEERS[i])
                .collect(),
            user,
            order,
            gpu,
        })
}

fn graph() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec(node(), 1..=30).prop_map(|mut nodes| {
        for (i, n) in nodes.iter_mut().enumerate() {
            // Dependencies on earlier tasks only (a DAG), without repeats.
            let mut deps: Vec<u32> = if i == 0 {
                Vec::new()
            } else {
                n.deps.iter().map(|d| d % i as u32 + 1).collect()
            };
            deps.sort_unstable();
            deps.dedup();
            n.deps = deps;
        }
        nodes
    })
}

fn event() -> impl Strategy<Value = Ev> {
    let x = any::<u32>();
    prop_oneof![
        6 => x.prop_map(Ev::Compute),
        1 => any::<bool>().prop_map(Ev::ComputeAll),
        6 => Just(Ev::Take),
        6 => (x, prop::bool::weighted(0.85)).prop_map(|(s, ok)| Ev::Complete(s, ok)),
        2 => x.prop_map(Ev::Free),
        1 => x.prop_map(Ev::Steal),
        1 => x.prop_map(Ev::RemoveReplica),
        3 => any::<u8>().prop_map(Ev::Fetches),
        4 => (x, 0u8..10).prop_map(|(s, k)| Ev::Fetched(s, k)),
        1 => x.prop_map(Ev::GiveBack),
        1 => x.prop_map(Ev::Secede),
        1 => x.prop_map(Ev::Rejoin),
        1 => x.prop_map(Ev::Scatter),
        2 => (0u8..4).prop_map(Ev::Spill),
        1 => any::<bool>().prop_map(Ev::Pause),
    ]
}

struct Held {
    job: Job,
    seceded: bool,
    /// Asked to rejoin, not granted yet (its thread is blocked: it cannot finish).
    rejoining: bool,
}

struct World {
    m: Machine<i64>,
    nodes: Vec<Node>,
    run_ids: u64,
    /// The run id last sent per task id.
    sent: HashMap<u32, u64>,
    reported: HashSet<(u32, u64)>,
    erred: HashSet<(u32, u64)>,
    jobs: Vec<Held>,
    in_flight: Vec<(String, KeyId)>,
    missing: Vec<Vec<(u32, u64)>>,
}

fn value_of(k: &[u8]) -> i64 {
    std::str::from_utf8(&k[1..])
        .unwrap()
        .parse::<i64>()
        .unwrap()
        * 10
}

impl World {
    fn n(&self) -> u32 {
        self.nodes.len() as u32
    }

    fn compute(&mut self, id: u32) {
        let n = &self.nodes[id as usize - 1];
        self.run_ids += 1;
        let t = TaskIn {
            id,
            run_id: self.run_ids,
            key: key(id),
            priority: Priority {
                neg_user: -n.user,
                generation: 0.0,
                order: n.order,
            },
            spec: vec![1],
            resources: n.gpu.map(|g| ("GPU".to_string(), g)).into_iter().collect(),
            deps: n
                .deps
                .iter()
                .map(|&d| DepIn {
                    key: key(d),
                    holders: self.nodes[d as usize - 1]
                        .holders
                        .iter()
                        .map(|h| h.to_string())
                        .collect(),
                })
                .collect(),
        };
        self.sent.insert(id, self.run_ids);
        self.m.compute(t);
    }

    fn erred(&mut self, id: u32, run_id: u64) {
        assert_eq!(
            self.sent.get(&id),
            Some(&run_id),
            "erred {id} with a stale run id"
        );
        assert!(
            self.erred.insert((id, run_id)),
            "{id} erred twice for run {run_id}"
        );
        assert!(
            !self.reported.contains(&(id, run_id)),
            "{id} erred after finishing"
        );
    }

    fn step(&mut self, ev: &Ev) {
        let n = self.n();
        match *ev {
            Ev::Compute(s) => self.compute(s % n + 1),
            Ev::ComputeAll(ordered) => {
                let mut ids: Vec<u32> = (1..=n).collect();
                if !ordered {
                    ids.reverse();
                }
                for id in ids {
                    self.compute(id);
                }
            }
            Ev::Take => {
                if let Some(job) = self.m.take_ready(0.0) {
                    let ts = self.m.task(job.id).expect("taken from the records");
                    assert_eq!(ts.state, State::Executing);
                    assert_eq!(ts.instance, job.instance);
                    assert_eq!(self.m.keys.get(job.key).bytes.as_ref(), key(job.id));
                    for &d in &job.deps {
                        let slot = self.m.keys.get(d);
                        let want = value_of(&slot.bytes);
                        let want = if slot.spilled().is_some() {
                            -want
                        } else {
                            want
                        };
                        assert_eq!(slot.value, Some(want), "dep of {}", job.id);
                    }
                    self.jobs.push(Held {
                        job,
                        seceded: false,
                        rejoining: false,
                    });
                }
            }
            Ev::Complete(s, success) => {
                let free: Vec<usize> = (0..self.jobs.len())
                    .filter(|&i| !self.jobs[i].rejoining)
                    .collect();
                if !free.is_empty() {
                    let i = free[s as usize % free.len()];
                    self.complete(i, success);
                }
            }
            Ev::Free(s) => self.m.free(s % n + 1),
            Ev::Steal(s) => {
                let id = s % n + 1;
                let before = self.m.task(id).map(|t| t.state);
                let got = self.m.steal(id);
                assert_eq!(got, before);
                let queued = matches!(
                    before,
                    Some(State::Waiting | State::Ready | State::Constrained)
                );
                assert_eq!(self.m.task(id).is_none(), before.is_none() || queued);
            }
            Ev::RemoveReplica(s) => self.m.remove_replica(s % n + 1),
            Ev::Fetches(mask) => {
                let prefer = |h: &str| (1..4).any(|i| mask & (1 << i) != 0 && h == PEERS[i]);
                let (plan, missing) = self.m.take_fetches(&prefer);
                let mut seen = HashSet::new();
                for (h, ks) in plan {
                    assert_ne!(h, ME, "never fetch from this worker");
                    assert!(seen.insert(h.clone()), "one group per holder");
                    for k in ks {
                        let slot = self.m.keys.get(k);
                        assert_eq!(slot.fetch, Fetch::InFlight);
                        assert!(slot.holders().contains(&h));
                        assert!(
                            self.in_flight.iter().all(|(_, f)| *f != k),
                            "twice in flight"
                        );
                        self.in_flight.push((h.clone(), k));
                    }
                }
                for mi in missing {
                    for &(id, run_id) in &mi.waiters {
                        let ts = self.m.task(id).expect("a live waiter");
                        assert_eq!(ts.state, State::Waiting);
                        assert_eq!(ts.run_id, run_id);
                        assert!(ts.deps().contains(&mi.key));
                    }
                    self.missing.push(mi.waiters);
                }
            }
            Ev::Fetched(s, kind) => {
                if !self.in_flight.is_empty() {
                    let i = s as usize % self.in_flight.len();
                    let (h, k) = self.in_flight.swap_remove(i);
                    self.fetched(&h, k, kind);
                }
            }
            Ev::GiveBack(s) => {
                if !self.missing.is_empty() {
                    let i = s as usize % self.missing.len();
                    let waiters = self.missing.swap_remove(i);
                    for id in self.m.give_back(&waiters) {
                        assert!(self.m.task(id).is_none());
                    }
                }
            }
            Ev::Secede(s) => {
                if !self.jobs.is_empty() {
                    let i = s as usize % self.jobs.len();
                    let (id, instance) = (self.jobs[i].job.id, self.jobs[i].job.instance);
                    let r = self.m.secede(id, instance);
                    if self.jobs[i].seceded {
                        assert_eq!(r, None, "seceded twice");
                    } else {
                        assert!(r.is_some(), "a running call may secede");
                    }
                    if let Some(Some(run_id)) = r {
                        let ts = self.m.task(id).unwrap();
                        assert_eq!(ts.instance, instance);
                        assert_eq!(self.sent.get(&id), Some(&run_id));
                    }
                    if r.is_some() {
                        self.jobs[i].seceded = true;
                    }
                }
            }
            Ev::Rejoin(s) => {
                let seceded: Vec<usize> = (0..self.jobs.len())
                    .filter(|&i| self.jobs[i].seceded && !self.jobs[i].rejoining)
                    .collect();
                if !seceded.is_empty() {
                    let i = seceded[s as usize % seceded.len()];
                    if self.m.rejoin(self.jobs[i].job.instance) {
                        self.jobs[i].seceded = false;
                    } else {
                        self.jobs[i].rejoining = true;
                    }
                }
            }
            Ev::Scatter(s) => {
                let id = s % n + 1;
                self.m.put_scattered(id, &key(id), id as i64 * 10, 1);
                assert_eq!(self.m.task(id).map(|t| t.state), Some(State::Memory));
            }
            Ev::Spill(count) => self.spill(count as usize),
            Ev::Pause(paused) => self.m.set_paused(paused),
        }
        if std::env::var_os("SQUALL_TRACE").is_some() {
            let mut ts: Vec<_> = self
                .m
                .tasks()
                .map(|(id, t)| (id, t.state, t.instance))
                .collect();
            ts.sort_by_key(|t| t.0);
            eprintln!("{ev:?} -> {ts:?}");
        }
        self.check();
    }

    fn complete(&mut self, i: usize, success: bool) {
        let held = self.jobs.swap_remove(i);
        let id = held.job.id;
        let result = success.then_some((id as i64 * 10, id as i64));
        let before = self.m.finished.len();
        match self.m.complete(held.job, result, 0.125) {
            Outcome::Finished => {
                assert!(success);
                assert_eq!(self.m.finished.tasks.last(), Some(&id));
                assert_eq!(self.m.finished.len(), before + 1);
                assert_eq!(self.m.task(id).unwrap().state, State::Memory);
            }
            Outcome::Erred { run_id } => {
                assert!(!success);
                assert_eq!(self.m.task(id).unwrap().state, State::Error);
                self.erred(id, run_id);
            }
            Outcome::Dropped => assert_eq!(self.m.finished.len(), before),
        }
    }

    /// Spills the `count` least recently used values; each must be refused once it is
    /// no longer the value written (spilled already, or under another key's name).
    fn spill(&mut self, count: usize) {
        let before = self.m.memory();
        let keys: Vec<KeyId> = self
            .m
            .spill_candidates(i64::MAX)
            .into_iter()
            .take(count)
            .collect();
        let mut moved = 0;
        for k in keys {
            let slot = self.m.keys.get(k);
            let (bytes, value, nbytes) = (slot.bytes.to_vec(), slot.value.unwrap(), slot.nbytes);
            assert!(slot.spilled().is_none() && value == value_of(&bytes));
            assert!(self
                .m
                .spilled(k, b"other", |v| *v == value, -value, 7)
                .is_err());
            assert_eq!(
                self.m.spilled(k, &bytes, |v| *v == value, -value, 7),
                Ok(())
            );
            assert!(self
                .m
                .spilled(k, &bytes, |v| *v == value, -value, 7)
                .is_err());
            moved += nbytes;
        }
        let after = self.m.memory();
        assert_eq!(after.managed, before.managed - moved);
        assert_eq!(after.spilled_memory, before.spilled_memory + moved);
    }

    fn fetched(&mut self, h: &str, k: KeyId, kind: u8) {
        let bytes = self.m.keys.get(k).bytes.to_vec();
        let got = match kind {
            0..=5 => Ok(Some((value_of(&bytes), 3))),
            6..=8 => Ok(None),
            _ => Err(()),
        };
        for (id, run_id) in self.m.fetched(h, k, got) {
            assert_eq!(self.m.task(id).unwrap().state, State::Error);
            self.erred(id, run_id);
        }
    }

    fn check(&mut self) {
        for held in &mut self.jobs {
            if held.rejoining && self.m.take_granted(held.job.instance) {
                held.rejoining = false;
                held.seceded = false;
            }
        }
        if let Err(e) = self.m.validate() {
            panic!("invariant broken: {e}");
        }
        let running = self.jobs.iter().filter(|h| !h.seceded).count();
        assert_eq!(self.m.n_executing(), running, "n_executing");
        let seceded = self.jobs.iter().filter(|h| h.seceded).count();
        assert_eq!(self.m.n_seceded(), seceded, "n_seceded");
        let f = std::mem::take(&mut self.m.finished);
        for (id, run_id) in f.tasks.into_iter().zip(f.run_ids) {
            assert_eq!(
                self.sent.get(&id),
                Some(&run_id),
                "{id} finished with a stale run id"
            );
            assert!(
                self.reported.insert((id, run_id)),
                "{id} finished twice for run {run_id}"
            );
            assert!(!self.erred.contains(&(id, run_id)));
            assert_eq!(self.m.task(id).map(|t| t.state), Some(State::Memory));
        }
        for (id, t) in self.m.tasks() {
            if t.state == State::Waiting {
                assert!(self.m.missing(id).unwrap() > 0);
            }
        }
    }

    /// Frees everything, lets every call return and every fetch end: nothing is left.
    fn drain(&mut self) {
        self.m.set_paused(false);
        for id in 1..=self.n() {
            self.m.free(id);
            self.check();
        }
        let mut rounds = 0;
        while !self.jobs.is_empty() || !self.in_flight.is_empty() {
            rounds += 1;
            assert!(rounds < 10_000, "no progress");
            if let Some(i) = (0..self.jobs.len()).find(|&i| !self.jobs[i].rejoining) {
                let ok = rounds % 3 != 0;
                self.complete(i, ok);
            }
            assert!(self.m.take_ready(0.0).is_none(), "everything was freed");
            if let Some((h, k)) = self.in_flight.pop() {
                self.fetched(&h, k, (rounds % 10) as u8);
            }
            let (plan, missing) = self.m.take_fetches(&|_| false);
            assert!(
                plan.is_empty() && missing.is_empty(),
                "nobody needs a key now"
            );
            self.check();
        }
        for waiters in std::mem::take(&mut self.missing) {
            assert!(self.m.give_back(&waiters).is_empty());
        }
        assert_eq!(self.m.n_executing(), 0);
        assert_eq!(self.m.n_seceded(), 0);
        assert!(self.m.tasks().next().is_none());
        assert!(self.m.keys.is_empty(), "{} keys left", self.m.keys.len());
        assert_eq!(self.m.memory(), Memory::default());
        self.check();
    }
}

proptest! {
    // PROPTEST_CASES=20000 for a longer search.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(500),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_graphs_and_interleavings(
        nodes in graph(),
        nthreads in 1usize..4,
        events in prop::collection::vec(event(), 0..250),
        fed in any::<bool>(),
    ) {
        let mut w = World {
            m: Machine::new(ME, nthreads, vec![("GPU".to_string(), 1.0)]),
            nodes,
            run_ids: 0,
            sent: HashMap::new(),
            reported: HashSet::new(),
            erred: HashSet::new(),
            jobs: Vec::new(),
            in_flight: Vec::new(),
            missing: Vec::new(),
        };
        // With a transition feed on (a worker plugin's), the same rules hold.
        w.m.feed_transitions(fed);
        for ev in &events {
            w.step(ev);
        }
        w.drain();
        let recorded = w.m.take_transitions();
        prop_assert!(fed || recorded.is_empty());
    }
}
