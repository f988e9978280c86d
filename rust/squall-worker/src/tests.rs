//! Tests of the worker state machine: one per transition, then a property test over
//! random graphs and event interleavings (see `prop`).

use crate::*;

mod prop;

type M = Machine<i64>;

const ME: &str = "tcp://me:1";

fn machine(nthreads: usize) -> M {
    Machine::new(ME, nthreads, Vec::new())
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

fn kid(m: &M, i: u32) -> KeyId {
    m.keys.find(&key(i)).expect("key interned")
}

/// Task `id` computing `k{id}`, run id 1, no dependencies, default priority.
fn task(id: u32) -> TaskIn {
    TaskIn {
        id,
        run_id: 1,
        key: key(id),
        priority: Priority::default(),
        spec: vec![id as u8],
        resources: Vec::new(),
        deps: Vec::new(),
    }
}

trait Build {
    fn dep(self, j: u32, holders: &[&str]) -> Self;
    fn run(self, run_id: u64) -> Self;
    fn prio(self, user: i32, generation: f64, order: u32) -> Self;
    fn res(self, name: &str, amount: f64) -> Self;
    fn key(self, k: u32) -> Self;
}

impl Build for TaskIn {
    fn dep(mut self, j: u32, holders: &[&str]) -> Self {
        self.deps.push(DepIn {
            key: key(j),
            holders: holders.iter().map(|h| h.to_string()).collect(),
        });
        self
    }
    fn run(mut self, run_id: u64) -> Self {
        self.run_id = run_id;
        self
    }
    fn prio(mut self, user: i32, generation: f64, order: u32) -> Self {
        self.priority = Priority {
            neg_user: -user,
            generation,
            order,
        };
        self
    }
    fn res(mut self, name: &str, amount: f64) -> Self {
        self.resources.push((name.to_owned(), amount));
        self
    }
    fn key(mut self, k: u32) -> Self {
        self.key = key(k);
        self
    }
}

fn state(m: &M, id: u32) -> Option<State> {
    m.task(id).map(|t| t.state)
}

fn users(m: &M, i: u32) -> u32 {
    m.keys.find(&key(i)).map_or(0, |k| m.keys.get(k).users)
}

fn ok(m: &M) {
    if let Err(e) = m.validate() {
        panic!("invariant broken: {e}");
    }
}

/// Takes the next job, which must be task `id`.
fn take(m: &mut M, id: u32) -> Job {
    let job = m.take_ready(0.0).expect("a ready task");
    assert_eq!(job.id, id);
    assert_eq!(state(m, id), Some(State::Executing));
    job
}

fn run_ok(m: &mut M, id: u32) {
    let job = take(m, id);
    assert_eq!(
        m.complete(job, Some((id as i64 * 10, 8)), 0.5),
        Outcome::Finished
    );
}

fn never(_: &str) -> bool {
    false
}

/// The fetch plan as (holder, key names) for easy comparison.
type Plan = Vec<(String, Vec<Vec<u8>>)>;

fn plan(m: &mut M, prefer: &dyn Fn(&str) -> bool) -> (Plan, Vec<Missing>) {
    let (p, missing) = m.take_fetches(prefer);
    let p = p
        .into_iter()
        .map(|(h, ks)| {
            (
                h,
                ks.iter().map(|&k| m.keys.get(k).bytes.to_vec()).collect(),
            )
        })
        .collect();
    (p, missing)
}

fn finished_ids(m: &mut M) -> Vec<(u32, u64)> {
    let f = std::mem::take(&mut m.finished);
    f.tasks.into_iter().zip(f.run_ids).collect()
}

// ----- ready heap, slots, resources -------------------------------------------------

#[test]
fn ready_tasks_run_in_priority_order() {
    let mut m = machine(10);
    // Arrival order 1..=7; expected run order below.
    m.compute(task(1).prio(0, 2.0, 0));
    m.compute(task(2).prio(5, 9.0, 9)); // highest user priority wins first
    m.compute(task(3).prio(0, 1.0, 5)); // earlier generation
    m.compute(task(4).prio(0, 1.0, 3)); // same generation, lower order
    m.compute(task(5).prio(0, 2.0, 0)); // equal to 1: later arrival first
    m.compute(task(6).prio(-1, 0.0, 0)); // low user priority: last
    m.compute(task(7).prio(0, 2.0, 0)); // equal to 1 and 5: latest first
    for id in 1..=7 {
        assert_eq!(state(&m, id), Some(State::Ready));
    }
    ok(&m);
    let order: Vec<u32> = std::iter::from_fn(|| m.take_ready(0.0).map(|j| j.id)).collect();
    assert_eq!(order, vec![2, 4, 3, 7, 5, 1, 6]);
    assert_eq!(m.n_executing(), 7);
    ok(&m);
}

#[test]
fn nthreads_limits_executing() {
    let mut m = machine(2);
    for id in 1..=3 {
        m.compute(task(id).prio(0, 0.0, id));
    }
    assert!(m.runnable());
    let a = take(&mut m, 1);
    let _b = take(&mut m, 2);
    assert!(m.take_ready(0.0).is_none());
    assert!(!m.runnable());
    assert_eq!(m.n_executing(), 2);
    assert_eq!(state(&m, 3), Some(State::Ready));
    assert_eq!(m.complete(a, Some((1, 1)), 0.0), Outcome::Finished);
    assert!(m.runnable());
    take(&mut m, 3);
    assert_eq!(m.n_executing(), 2);
    ok(&m);
}

#[test]
fn constrained_tasks_wait_for_resources() {
    let mut m = Machine::new(ME, 8, vec![("GPU".into(), 1.0), ("MEM".into(), 10.0)]);
    m.compute(task(1).prio(0, 0.0, 1).res("GPU", 0.6));
    m.compute(task(2).prio(0, 0.0, 2).res("GPU", 0.6).res("MEM", 1.0));
    m.compute(task(3).prio(0, 0.0, 3)); // unconstrained
    m.compute(task(4).prio(0, 0.0, 4).res("TPU", 1.0)); // never fits
    m.compute(task(5).prio(0, 0.0, 5).res("MEM", 10.0));
    assert_eq!(state(&m, 1), Some(State::Constrained));
    assert_eq!(state(&m, 3), Some(State::Ready));
    let j1 = take(&mut m, 1);
    // 2 does not fit next to 1 (0.6 + 0.6 > 1): 3 and 5 go first; 4 never runs.
    let j3 = take(&mut m, 3);
    let j5 = take(&mut m, 5);
    assert!(m.runnable());
    assert!(m.take_ready(0.0).is_none());
    assert!(
        !m.runnable(),
        "idle threads sleep while only tasks that do not fit are ready"
    );
    assert_eq!(state(&m, 2), Some(State::Constrained));
    assert_eq!(state(&m, 4), Some(State::Constrained));
    m.complete(j3, Some((3, 1)), 0.0);
    assert!(m.take_ready(0.0).is_none(), "freeing a thread frees no GPU");
    m.complete(j5, Some((5, 1)), 0.0);
    assert!(m.take_ready(0.0).is_none());
    m.complete(j1, Some((1, 1)), 0.0);
    assert!(m.runnable(), "the GPU is back");
    let j2 = take(&mut m, 2);
    assert!(m.take_ready(0.0).is_none());
    // A failure gives its resources back too.
    m.complete(j2, None, 0.0);
    m.compute(task(6).res("GPU", 1.0).res("MEM", 10.0));
    take(&mut m, 6);
    ok(&m);
}

// ----- results --------------------------------------------------------------------

#[test]
fn completion_is_reported_in_finished() {
    let mut m = machine(2);
    m.compute(task(1).run(11).prio(0, 0.0, 1));
    m.compute(task(2).run(22).prio(0, 0.0, 2));
    let a = take(&mut m, 1);
    let b = take(&mut m, 2);
    assert!(m.finished.is_empty());
    assert_eq!(m.complete(b, Some((20, 200)), 1.5), Outcome::Finished);
    assert_eq!(m.complete(a, Some((10, -1)), 0.25), Outcome::Finished);
    assert_eq!(state(&m, 1), Some(State::Memory));
    assert_eq!(m.value(&key(1)), Some(&10));
    assert_eq!(m.value(&key(2)), Some(&20));
    let f = &m.finished;
    assert_eq!(f.len(), 2);
    assert_eq!(f.tasks, vec![2, 1]);
    assert_eq!(f.run_ids, vec![22, 11]);
    assert_eq!(f.nbytes, vec![200, -1]);
    assert_eq!(f.seconds, vec![1.5, 0.25]);
    ok(&m);
}

#[test]
fn failure_errs_with_the_run_id() {
    let mut m = machine(1);
    m.compute(task(1));
    run_ok(&mut m, 1);
    m.compute(task(2).run(42).dep(1, &[]));
    let job = take(&mut m, 2);
    assert_eq!(users(&m, 1), 1);
    assert_eq!(m.complete(job, None, 0.0), Outcome::Erred { run_id: 42 });
    assert_eq!(state(&m, 2), Some(State::Error));
    assert_eq!(
        finished_ids(&mut m),
        vec![(1, 1)],
        "an error is not `finished`"
    );
    assert_eq!(users(&m, 1), 0, "dependencies released");
    assert_eq!(m.value(&key(2)), None);
    assert_eq!(m.n_executing(), 0);
    ok(&m);
}

#[test]
fn retry_after_an_error_runs_again() {
    let mut m = machine(1);
    m.compute(task(1));
    let job = take(&mut m, 1);
    assert_eq!(m.complete(job, None, 0.0), Outcome::Erred { run_id: 1 });
    ok(&m);
    // The scheduler retries it (same id and key, new run id).
    m.compute(task(1).run(2));
    assert_eq!(state(&m, 1), Some(State::Ready));
    ok(&m);
    let job = take(&mut m, 1);
    assert_eq!(m.complete(job, Some((7, 1)), 0.0), Outcome::Finished);
    assert_eq!(finished_ids(&mut m), vec![(1, 2)]);
    ok(&m);
}

// ----- dependencies -----------------------------------------------------------------

#[test]
fn local_chain_makes_dependent_ready() {
    let mut m = machine(1);
    m.compute(task(1));
    m.compute(task(2).dep(1, &[]));
    assert_eq!(state(&m, 2), Some(State::Waiting));
    assert_eq!(m.missing(2), Some(1));
    let (p, missing) = plan(&mut m, &never);
    assert!(
        p.is_empty() && missing.is_empty(),
        "computed here: not fetched"
    );
    ok(&m);
    run_ok(&mut m, 1);
    assert_eq!(state(&m, 2), Some(State::Ready));
    assert_eq!(m.missing(2), Some(0));
    let job = take(&mut m, 2);
    assert_eq!(job.deps, vec![kid(&m, 1)]);
    assert_eq!(m.keys.get(job.deps[0]).value, Some(10));
    m.complete(job, Some((20, 1)), 0.0);
    assert_eq!(users(&m, 1), 0);
    assert_eq!(m.value(&key(1)), Some(&10), "a known result stays");
    ok(&m);
}

#[test]
fn a_dependency_computed_here_under_constraints_is_not_fetched() {
    let mut m = Machine::new(ME, 1, vec![("GPU".into(), 1.0)]);
    m.compute(task(1).res("GPU", 1.0));
    assert_eq!(state(&m, 1), Some(State::Constrained));
    m.compute(task(2).dep(1, &[]));
    let (p, missing) = plan(&mut m, &never);
    assert!(p.is_empty(), "{p:?}");
    assert!(missing.is_empty(), "no holder needed: computed here");
    run_ok(&mut m, 1);
    assert_eq!(state(&m, 2), Some(State::Ready));
    ok(&m);
}

#[test]
fn fetch_plan_groups_per_holder_and_prefers_cached_peers() {
    let mut m = machine(1);
    m.compute(
        task(10)
            .dep(1, &[ME, "p1"])
            .dep(2, &["p1"])
            .dep(3, &["p2", "p3"]),
    );
    m.compute(task(11).dep(3, &["p9"]).dep(4, &["p2", "p3"]).dep(5, &[ME]));
    assert_eq!(m.missing(10), Some(3));
    // Key 3 was queued by task 10 already: task 11's holders for it are not used.
    let slot3 = m.keys.get(kid(&m, 3));
    assert_eq!(slot3.holders(), vec!["p2".to_string(), "p3".to_string()]);
    assert_eq!(slot3.fetch, Fetch::Queued);
    assert!(m.keys.get(kid(&m, 1)).holders().iter().all(|h| h != ME));
    let (p, missing) = plan(&mut m, &|h| h == "p3");
    assert_eq!(
        p,
        vec![
            ("p1".to_string(), vec![key(1), key(2)]),
            ("p3".to_string(), vec![key(3), key(4)]),
        ]
    );
    // Key 5's only holder was this worker: nobody to ask.
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].key, kid(&m, 5));
    assert_eq!(missing[0].waiters, vec![(11, 1)]);
    for i in 1..=4 {
        assert_eq!(m.keys.get(kid(&m, i)).fetch, Fetch::InFlight);
    }
    let (p, missing) = plan(&mut m, &never);
    assert!(p.is_empty() && missing.is_empty(), "nothing queued twice");
    ok(&m);
    // Without a cached peer, some holder is picked.
    m.compute(task(12).dep(6, &["p7", "p8"]));
    let (p, _) = plan(&mut m, &never);
    assert_eq!(p.len(), 1);
    assert!(p[0].0 == "p7" || p[0].0 == "p8");
    ok(&m);
}

#[test]
fn fetched_value_makes_waiters_ready() {
    let mut m = machine(2);
    m.compute(task(10).dep(1, &["p1"]).dep(2, &["p1"]));
    m.compute(task(11).dep(1, &["p1"]));
    let (p, _) = m.take_fetches(&never);
    assert_eq!(p.len(), 1);
    let (k1, k2) = (kid(&m, 1), kid(&m, 2));
    assert_eq!(m.fetched("p1", k1, Ok(Some((100, 8)))), vec![]);
    ok(&m);
    assert_eq!(state(&m, 10), Some(State::Waiting));
    assert_eq!(m.missing(10), Some(1));
    assert_eq!(state(&m, 11), Some(State::Ready));
    assert_eq!(m.keys.get(k1).fetch, Fetch::No);
    assert_eq!(m.keys.get(k1).nbytes, 8);
    m.fetched("p1", k2, Ok(Some((200, 8))));
    assert_eq!(state(&m, 10), Some(State::Ready));
    assert_eq!(users(&m, 1), 2);
    ok(&m);
    let a = m.take_ready(0.0).unwrap();
    let b = m.take_ready(0.0).unwrap();
    m.complete(a, Some((1, 1)), 0.0);
    m.complete(b, Some((1, 1)), 0.0);
    // The fetched copies were private: gone once used.
    assert_eq!(m.keys.find(&key(1)), None);
    assert_eq!(m.keys.find(&key(2)), None);
    ok(&m);
}

#[test]
fn peer_lacking_the_key_requeues_it_for_another_holder() {
    let mut m = machine(1);
    m.compute(task(10).dep(1, &["p1", "p2"]));
    let (p, _) = plan(&mut m, &|h| h == "p1");
    assert_eq!(p, vec![("p1".to_string(), vec![key(1)])]);
    let k = kid(&m, 1);
    assert_eq!(m.fetched("p1", k, Ok(None)), vec![]);
    assert_eq!(m.keys.get(k).fetch, Fetch::Queued);
    assert_eq!(m.keys.get(k).holders(), vec!["p2".to_string()]);
    ok(&m);
    // p1 is still "cached" but no longer a holder.
    let (p, missing) = plan(&mut m, &|h| h == "p1");
    assert_eq!(p, vec![("p2".to_string(), vec![key(1)])]);
    assert!(missing.is_empty());
    m.fetched("p2", k, Ok(Some((1, 1))));
    assert_eq!(state(&m, 10), Some(State::Ready));
    ok(&m);
}

#[test]
fn no_holder_left_gives_back_the_live_waiters() {
    let mut m = machine(1);
    m.compute(task(10).run(5).dep(1, &["p1"]));
    m.compute(task(11).run(6).dep(1, &["p1"]).dep(2, &["p2"]));
    m.compute(task(12).run(7).dep(1, &["p1"]));
    m.compute(task(13).run(8).dep(1, &["p1"]));
    m.take_fetches(&never);
    let k = kid(&m, 1);
    m.fetched("p1", k, Ok(None));
    m.free(12); // freed meanwhile: not a live waiter
    let (p, missing) = m.take_fetches(&never);
    assert!(p.is_empty());
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].key, k);
    let mut waiters = missing[0].waiters.clone();
    waiters.sort();
    assert_eq!(waiters, vec![(10, 5), (11, 6), (13, 8)]);
    assert_eq!(m.keys.get(k).fetch, Fetch::No);
    ok(&m);
    // Before the pause ends: 10 is re-sent (new run id), 13 is freed.
    m.compute(task(10).run(9).dep(1, &["p1"]));
    m.free(13);
    assert_eq!(state(&m, 10), Some(State::Waiting));
    assert_eq!(m.task(10).unwrap().run_id, 9);
    let back = m.give_back(&waiters);
    assert_eq!(back, vec![11]);
    assert_eq!(state(&m, 11), None);
    assert_eq!(state(&m, 10), Some(State::Waiting));
    assert_eq!(users(&m, 1), 1);
    assert_eq!(
        users(&m, 2),
        0,
        "given-back tasks release their dependencies"
    );
    assert_eq!(m.give_back(&waiters), Vec::<u32>::new(), "only once");
    ok(&m);
    m.free(10);
    m.take_fetches(&never);
    m.fetched("p2", kid(&m, 2), Ok(Some((0, 0))));
    assert!(m.keys.is_empty(), "{} keys left", m.keys.len());
    ok(&m);
}

#[test]
fn a_load_error_errs_the_waiters() {
    let mut m = machine(1);
    m.compute(task(10).run(5).dep(1, &["p1"]).dep(2, &["p1"]));
    m.compute(task(11).run(6).dep(1, &["p1"]));
    m.compute(task(12).run(7).dep(2, &["p1"]));
    m.take_fetches(&never);
    let mut erred = m.fetched("p1", kid(&m, 1), Err(()));
    erred.sort();
    assert_eq!(erred, vec![(10, 5), (11, 6)]);
    assert_eq!(state(&m, 10), Some(State::Error));
    assert_eq!(state(&m, 11), Some(State::Error));
    assert_eq!(m.keys.find(&key(1)), None, "nobody needs key 1 now");
    assert_eq!(users(&m, 2), 1, "task 10 released key 2");
    ok(&m);
    m.fetched("p1", kid(&m, 2), Ok(Some((2, 1))));
    assert_eq!(state(&m, 12), Some(State::Ready));
    ok(&m);
}

// ----- free, remove-replica, steal ----------------------------------------------------

#[test]
fn free_of_a_queued_task_releases_its_dependencies() {
    let mut m = machine(1);
    m.compute(task(10).dep(1, &["p1"]));
    m.compute(task(11).dep(1, &["p1"]).dep(2, &["p2"]));
    m.take_fetches(&never);
    m.fetched("p1", kid(&m, 1), Ok(Some((1, 1))));
    assert_eq!(state(&m, 10), Some(State::Ready));
    assert_eq!(users(&m, 1), 2);
    m.free(10); // ready
    assert_eq!(state(&m, 10), None);
    assert_eq!(users(&m, 1), 1);
    assert_eq!(m.value(&key(1)), Some(&1), "still needed by 11");
    ok(&m);
    m.free(11); // waiting
    assert_eq!(
        m.keys.find(&key(1)),
        None,
        "a private replica nobody needs goes"
    );
    // Key 2 is in flight: kept until the fetch ends, then dropped.
    assert!(m.keys.find(&key(2)).is_some());
    m.fetched("p2", kid(&m, 2), Ok(Some((2, 1))));
    assert!(m.keys.is_empty());
    assert!(m.take_ready(0.0).is_none(), "stale heap entries skipped");
    ok(&m);
    m.free(99); // unknown: nothing happens
    ok(&m);
}

#[test]
fn free_of_a_result_keeps_it_while_a_local_task_needs_it() {
    let mut m = machine(1);
    m.compute(task(1));
    run_ok(&mut m, 1);
    m.compute(task(2).dep(1, &[]));
    m.free(1);
    assert_eq!(state(&m, 1), None);
    assert_eq!(m.value(&key(1)), Some(&10), "kept privately for task 2");
    ok(&m);
    run_ok(&mut m, 2);
    assert_eq!(m.keys.find(&key(1)), None);
    ok(&m);
}

#[test]
fn free_of_an_executing_task_drops_its_result() {
    let mut m = machine(1);
    m.compute(task(1));
    run_ok(&mut m, 1);
    m.compute(task(2).dep(1, &[]));
    let job = take(&mut m, 2);
    m.free(2);
    assert_eq!(state(&m, 2), None);
    assert_eq!(m.started(2), Some(0.0), "still running");
    assert_eq!(m.n_executing(), 1);
    assert_eq!(users(&m, 1), 1, "the running call still uses key 1");
    ok(&m);
    finished_ids(&mut m);
    assert_eq!(m.complete(job, Some((20, 1)), 0.0), Outcome::Dropped);
    assert!(m.finished.is_empty());
    assert_eq!(m.value(&key(2)), None);
    assert_eq!(m.keys.find(&key(2)), None);
    assert_eq!(users(&m, 1), 0);
    assert_eq!(m.n_executing(), 0);
    ok(&m);
}

#[test]
fn a_freed_running_task_sent_again_is_revived() {
    let mut m = machine(1);
    m.compute(task(1).run(1));
    let job = take(&mut m, 1);
    m.free(1);
    m.compute(task(1).run(2));
    assert_eq!(state(&m, 1), Some(State::Executing));
    assert_eq!(m.task(1).unwrap().run_id, 2);
    assert!(m.take_ready(0.0).is_none(), "not queued a second time");
    ok(&m);
    assert_eq!(m.complete(job, Some((5, 3)), 0.0), Outcome::Finished);
    assert_eq!(finished_ids(&mut m), vec![(1, 2)]);
    assert_eq!(state(&m, 1), Some(State::Memory));
    ok(&m);
}

#[test]
fn a_freed_running_task_sent_again_with_another_key_is_dropped_once() {
    let mut m = machine(2);
    m.compute(task(1));
    run_ok(&mut m, 1);
    m.compute(task(2).dep(1, &[]));
    let old = take(&mut m, 2);
    m.free(2);
    // The scheduler reuses id 2 for key 3, also depending on key 1.
    m.compute(task(2).key(3).run(7).dep(1, &[]));
    assert_eq!(state(&m, 2), Some(State::Ready));
    assert_eq!(users(&m, 1), 2, "old (orphaned) call and new task");
    ok(&m);
    let new = take(&mut m, 2);
    assert_eq!(new.key, kid(&m, 3));
    m.free(1);
    assert_eq!(m.value(&key(1)), Some(&10), "both calls still need it");
    assert_eq!(m.complete(old, Some((20, 1)), 0.0), Outcome::Dropped);
    assert_eq!(users(&m, 1), 1);
    assert_eq!(m.value(&key(1)), Some(&10));
    assert_eq!(m.keys.find(&key(2)), None);
    ok(&m);
    finished_ids(&mut m);
    assert_eq!(m.complete(new, Some((30, 1)), 0.0), Outcome::Finished);
    assert_eq!(finished_ids(&mut m), vec![(2, 7)]);
    assert_eq!(m.keys.find(&key(1)), None);
    assert_eq!(m.value(&key(3)), Some(&30));
    ok(&m);
    // And the same when the replacement is freed before the old call ends.
    m.compute(task(4));
    let old = take(&mut m, 4);
    m.free(4);
    m.compute(task(4).key(5));
    m.free(4);
    assert_eq!(m.complete(old, Some((0, 0)), 0.0), Outcome::Dropped);
    m.free(2);
    assert!(m.keys.is_empty());
    ok(&m);
}

#[test]
fn remove_replica_forgets_a_copy() {
    let mut m = machine(1);
    m.compute(task(1));
    run_ok(&mut m, 1);
    m.compute(task(2));
    run_ok(&mut m, 2);
    m.compute(task(3).dep(2, &[]));
    m.remove_replica(1);
    assert_eq!(state(&m, 1), None);
    assert_eq!(m.keys.find(&key(1)), None);
    m.remove_replica(2);
    assert_eq!(state(&m, 2), None);
    assert_eq!(m.value(&key(2)), Some(&20), "kept privately for task 3");
    m.remove_replica(3); // not in memory: no-op
    assert_eq!(state(&m, 3), Some(State::Ready));
    ok(&m);
    run_ok(&mut m, 3);
    assert_eq!(m.keys.find(&key(2)), None);
    ok(&m);
}

#[test]
fn steal_gives_up_queued_tasks_only() {
    let mut m = Machine::new(ME, 1, vec![("GPU".into(), 1.0)]);
    m.compute(task(1));
    m.compute(task(2).dep(9, &["p1"])); // waiting
    m.compute(task(3).res("GPU", 1.0)); // constrained
    m.compute(task(4).prio(5, 0.0, 0)); // ready, runs first
    let job = take(&mut m, 4);
    assert_eq!(m.steal(4), Some(State::Executing));
    assert_eq!(state(&m, 4), Some(State::Executing));
    assert_eq!(m.steal(2), Some(State::Waiting));
    assert_eq!(m.steal(3), Some(State::Constrained));
    assert_eq!(m.steal(1), Some(State::Ready));
    assert_eq!(m.steal(2), None);
    assert_eq!(m.steal(77), None);
    for id in 1..=3 {
        assert_eq!(state(&m, id), None);
    }
    assert_eq!(m.keys.find(&key(9)), None);
    ok(&m);
    m.complete(job, Some((4, 1)), 0.0);
    assert_eq!(m.steal(4), Some(State::Memory));
    assert_eq!(state(&m, 4), Some(State::Memory));
    assert!(m.take_ready(0.0).is_none());
    assert_eq!(m.keys.len(), 1);
    ok(&m);
}

#[test]
fn compute_resent_keeps_state_and_rereports_memory() {
    let mut m = machine(1);
    m.compute(task(1).run(1));
    run_ok(&mut m, 1);
    assert_eq!(finished_ids(&mut m), vec![(1, 1)]);
    m.compute(task(1).run(2));
    assert_eq!(m.finished.tasks, vec![1]);
    assert_eq!(m.finished.run_ids, vec![2]);
    assert_eq!(m.finished.nbytes, vec![8]);
    assert_eq!(m.finished.seconds, vec![0.0]);
    finished_ids(&mut m);
    // Re-sent while executing: the new run id is the one reported.
    m.compute(task(2).run(1));
    let job = take(&mut m, 2);
    m.compute(task(2).run(3));
    assert_eq!(state(&m, 2), Some(State::Executing));
    m.complete(job, Some((2, 2)), 0.0);
    assert_eq!(finished_ids(&mut m), vec![(2, 3)]);
    // Re-sent while waiting.
    m.compute(task(3).run(1).dep(9, &["p1"]));
    m.compute(task(3).run(4).dep(9, &["p1"]));
    assert_eq!(m.task(3).unwrap().run_id, 4);
    assert_eq!(users(&m, 9), 1, "not counted twice");
    ok(&m);
}

#[test]
fn compute_of_a_private_replica_reports_it_at_once() {
    let mut m = machine(1);
    m.compute(task(10).dep(1, &["p1"]));
    m.take_fetches(&never);
    m.fetched("p1", kid(&m, 1), Ok(Some((100, 16))));
    // The scheduler now asks this worker to compute key 1 (as task 1).
    m.compute(task(1).run(3).dep(0, &["p1"]));
    assert_eq!(state(&m, 1), Some(State::Memory));
    assert_eq!(m.finished.tasks, vec![1]);
    assert_eq!(m.finished.run_ids, vec![3]);
    assert_eq!(m.finished.nbytes, vec![16]);
    assert_eq!(
        m.keys.find(&key(0)),
        None,
        "its dependencies are not needed"
    );
    ok(&m);
    run_ok(&mut m, 10);
    assert_eq!(m.value(&key(1)), Some(&100), "now a known result: kept");
    ok(&m);
}

// ----- secede / rejoin ----------------------------------------------------------------

#[test]
fn secede_frees_a_slot() {
    let mut m = machine(1);
    m.compute(task(1).run(4).prio(0, 0.0, 1));
    m.compute(task(2).prio(0, 0.0, 2));
    let a = take(&mut m, 1);
    assert!(m.take_ready(0.0).is_none());
    assert_eq!(m.secede(1, a.instance), Some(Some(4)));
    assert_eq!(m.secede(1, a.instance), None, "once");
    assert_eq!(m.secede(2, a.instance + 1), None, "not running");
    assert_eq!(m.n_executing(), 0);
    assert_eq!(m.n_seceded(), 1);
    ok(&m);
    let b = take(&mut m, 2);
    assert_eq!(m.n_executing(), 1);
    assert_eq!(m.complete(a, Some((1, 1)), 0.0), Outcome::Finished);
    assert_eq!(
        m.n_executing(),
        1,
        "a seceded task gave its slot up already"
    );
    assert_eq!(m.n_seceded(), 0);
    m.complete(b, Some((2, 1)), 0.0);
    assert_eq!(m.n_executing(), 0);
    ok(&m);
    // A freed running task may still secede: nothing to report.
    m.compute(task(3));
    let c = take(&mut m, 3);
    m.free(3);
    assert_eq!(m.secede(3, c.instance), Some(None));
    assert_eq!(m.n_executing(), 0);
    ok(&m);
    assert_eq!(m.complete(c, Some((3, 1)), 0.0), Outcome::Dropped);
    assert_eq!(m.n_executing(), 0);
    ok(&m);
}

#[test]
fn rejoin_waits_for_a_slot_and_goes_before_queued_tasks() {
    let mut m = machine(1);
    m.compute(task(1).prio(0, 0.0, 1));
    m.compute(task(2).prio(0, 0.0, 2));
    m.compute(task(3).prio(0, 0.0, 3));
    let a = take(&mut m, 1);
    assert!(m.rejoin(a.instance), "never seceded: go on");
    m.secede(1, a.instance);
    let b = take(&mut m, 2);
    assert!(!m.rejoin(a.instance), "no free slot");
    assert!(!m.take_granted(a.instance));
    assert!(m.runnable() || m.n_executing() == 1);
    ok(&m);
    m.complete(b, Some((2, 1)), 0.0);
    assert!(m.runnable(), "a rejoin is waiting for the free slot");
    assert!(
        m.take_ready(0.0).is_none(),
        "the rejoin took the slot, not task 3"
    );
    assert!(m.take_granted(a.instance));
    assert!(!m.take_granted(a.instance));
    assert_eq!(m.n_executing(), 1);
    assert_eq!(m.n_seceded(), 0);
    assert_eq!(state(&m, 3), Some(State::Ready));
    ok(&m);
    m.complete(a, Some((1, 1)), 0.0);
    assert_eq!(m.n_executing(), 0);
    take(&mut m, 3);
    ok(&m);
    // Granted at once when a slot is free.
    let mut m = machine(2);
    m.compute(task(1));
    let j = m.take_ready(0.0).unwrap();
    m.secede(1, j.instance);
    assert!(m.rejoin(j.instance));
    assert_eq!(m.n_executing(), 1);
    ok(&m);
}

// ----- scattered data, forgetting keys -------------------------------------------------

#[test]
fn put_scattered_registers_a_result() {
    let mut m = machine(1);
    m.put_scattered(1, &key(1), 11, 8);
    assert_eq!(state(&m, 1), Some(State::Memory));
    assert_eq!(m.value(&key(1)), Some(&11));
    assert!(m.finished.is_empty(), "the scheduler knows already");
    m.put_scattered(1, &key(1), 12, 9);
    assert_eq!(m.value(&key(1)), Some(&12));
    assert_eq!(m.keys.get(kid(&m, 1)).nbytes, 9);
    ok(&m);
    m.compute(task(2).dep(1, &["p1"]));
    assert_eq!(state(&m, 2), Some(State::Ready));
    let job = take(&mut m, 2);
    assert_eq!(m.keys.get(job.deps[0]).value, Some(12));
    m.complete(job, Some((2, 1)), 0.0);
    m.free(1);
    m.free(2);
    assert!(m.keys.is_empty());
    ok(&m);
    // Scattered under the id of a task still queued for the same key.
    m.compute(task(3).dep(4, &["p1"]));
    m.put_scattered(3, &key(3), 33, 1);
    assert_eq!(state(&m, 3), Some(State::Memory));
    assert_eq!(m.value(&key(3)), Some(&33));
    ok(&m);
}

#[test]
fn keys_are_forgotten_after_a_full_run() {
    let mut m = machine(2);
    let round = |m: &mut M| {
        // 1 -> 2 -> 4 <- 3 (3 on a peer), 5 depends on 4 and a peer's 6.
        m.compute(task(1));
        m.compute(task(2).dep(1, &[]));
        m.compute(task(4).dep(2, &[]).dep(3, &["p1", ME]));
        m.compute(task(5).dep(4, &[]).dep(6, &["p2"]));
        let (p, missing) = m.take_fetches(&never);
        assert!(missing.is_empty());
        assert_eq!(p.len(), 2);
        let mut done = 0;
        for (h, ks) in p {
            for k in ks {
                m.fetched(&h, k, Ok(Some((0, 1))));
            }
        }
        while done < 4 {
            let job = m.take_ready(0.0).expect("progress");
            m.complete(job, Some((1, 1)), 0.0);
            done += 1;
            ok(m);
        }
        assert_eq!(m.finished.len(), 4);
        m.finished = FinishedBatch::default();
        for id in [1, 2, 4, 5] {
            m.free(id);
            ok(m);
        }
        assert_eq!(m.keys.len(), 0);
        assert!(m.tasks().next().is_none());
    };
    round(&mut m);
    round(&mut m);
    // The interner's slots are reused: six keys never need more than six slots.
    let ids: Vec<u32> = (1..=6).map(|i| m.keys.intern(key(i)).0).collect();
    assert!(ids.iter().all(|&i| i < 6), "{ids:?}");
}

#[test]
fn a_seceded_call_freed_and_replaced_keeps_its_own_slot_accounting() {
    let mut m = machine(1);
    m.compute(task(1));
    let old = take(&mut m, 1);
    assert_eq!(m.secede(1, old.instance), Some(Some(1)));
    m.free(1); // cancelled
    m.free(1); // freed again: orphaned
    m.compute(task(1).run(2)); // a new record (and call) for id 1
    let new = take(&mut m, 1);
    assert_eq!(m.n_executing(), 1);
    ok(&m);
    assert_eq!(m.complete(new, Some((1, 1)), 0.0), Outcome::Finished);
    assert_eq!(m.n_executing(), 0, "the new call held a slot");
    assert_eq!(m.n_seceded(), 1, "the old call is still seceded");
    ok(&m);
    assert_eq!(m.complete(old, Some((1, 1)), 0.0), Outcome::Dropped);
    assert_eq!(m.n_executing(), 0);
    assert_eq!(m.n_seceded(), 0);
    ok(&m);
}

#[test]
fn a_waiting_task_sent_again_fetches_from_the_new_holders() {
    let mut m = machine(1);
    m.compute(task(10).run(5).dep(1, &["p1"]));
    m.take_fetches(&never);
    let k = kid(&m, 1);
    m.fetched("p1", k, Ok(None));
    let (_, missing) = m.take_fetches(&never);
    assert_eq!(missing.len(), 1, "no holder left");
    // The scheduler re-sends the task (a new run id) naming where the key is now.
    m.compute(task(10).run(6).dep(1, &["p2"]));
    let (plan, missing) = m.take_fetches(&never);
    assert!(missing.is_empty());
    assert_eq!(plan, vec![("p2".to_owned(), vec![k])]);
    m.fetched("p2", k, Ok(Some((3, 8))));
    assert_eq!(state(&m, 10), Some(State::Ready));
    ok(&m);
}

#[test]
fn a_fetch_result_for_an_unknown_key_is_ignored() {
    let mut m = machine(1);
    assert!(m.fetched("p1", KeyId(4242), Ok(Some((1, 1)))).is_empty());
    assert!(m.fetched("p1", KeyId(4242), Ok(None)).is_empty());
    assert!(m.fetched("p1", KeyId(4242), Err(())).is_empty());
    assert_eq!(
        m.graveyard,
        vec![1],
        "the value is handed back to be dropped"
    );
    ok(&m);
}

#[test]
fn two_seceded_calls_of_one_task_id_rejoin_separately() {
    let mut m = machine(1);
    m.compute(task(1));
    let old = take(&mut m, 1);
    assert_eq!(m.secede(1, old.instance), Some(Some(1)));
    m.free(1);
    m.free(1); // the old call is an orphan now
    m.compute(task(1).key(7).run(2)); // the id names another key
    let new = take(&mut m, 1);
    assert_eq!(m.secede(1, new.instance), Some(Some(2)));
    // Both rejoin; the one slot goes to the first, the other waits for it.
    assert!(m.rejoin(old.instance));
    assert!(!m.rejoin(new.instance));
    assert_eq!(m.n_executing(), 1);
    assert_eq!(m.complete(old, Some((1, 1)), 0.0), Outcome::Dropped);
    assert!(
        m.poll_rejoin(new.instance),
        "the freed slot goes to the other call"
    );
    assert_eq!(m.n_executing(), 1);
    assert_eq!(m.complete(new, Some((7, 1)), 0.0), Outcome::Finished);
    assert_eq!(m.n_executing(), 0);
    assert_eq!(m.n_seceded(), 0);
    ok(&m);
}

#[test]
fn fetched_copies_are_announced_and_their_drop_too() {
    let mut m = machine(1);
    m.compute(task(10).dep(1, &["p1"]));
    m.take_fetches(&never);
    let k = kid(&m, 1);
    m.fetched("p1", k, Ok(Some((5, 8))));
    assert_eq!(m.replicas_added, vec![key(1).into_boxed_slice()]);
    assert!(m.replicas_dropped.is_empty());
    let j = take(&mut m, 10);
    assert!(
        m.replicas_dropped.is_empty(),
        "kept while its dependent runs"
    );
    m.complete(j, Some((6, 1)), 0.0);
    assert_eq!(m.replicas_dropped, vec![key(1).into_boxed_slice()]);
    ok(&m);
    // A copy that becomes a result the scheduler knows of is not reported dropped.
    let mut m = machine(1);
    m.compute(task(10).dep(1, &["p1"]));
    m.take_fetches(&never);
    m.fetched("p1", kid(&m, 1), Ok(Some((5, 8))));
    m.put_scattered(1, &key(1), 5, 8);
    let j = take(&mut m, 10);
    m.complete(j, Some((6, 1)), 0.0);
    m.free(1);
    assert!(m.replicas_dropped.is_empty());
    ok(&m);
}

// ----- memory: recency, spilling, pause ----------------------------------------------

#[test]
fn least_recently_used_values_are_spill_candidates_first() {
    let mut m = machine(1);
    for id in 1..=3 {
        m.compute(task(id));
        run_ok(&mut m, id); // 8 bytes each
    }
    assert_eq!(m.memory().managed, 24);
    m.compute(task(4).dep(1, &[ME])); // k1 is read by task 4, then k4 stored
    run_ok(&mut m, 4);
    let order: Vec<KeyId> = m.spill_candidates(17);
    assert_eq!(order, vec![kid(&m, 2), kid(&m, 3), kid(&m, 1)]);
    assert_eq!(m.spill_candidates(0), Vec::<KeyId>::new());
    assert!(!m.over_target());
    m.set_spill_target(Some(31));
    assert!(m.over_target()); // 32 bytes held
    ok(&m);
}

#[test]
fn a_spilled_value_is_held_as_its_handle_and_freed_with_the_key() {
    let mut m = machine(1);
    m.compute(task(1));
    run_ok(&mut m, 1);
    let k = kid(&m, 1);
    // Written out meanwhile recomputed: refused, the handle comes back.
    assert_eq!(m.spilled(k, &key(1), |v| *v == 99, -10, 5), Err(-10));
    assert_eq!(m.spilled(k, &key(1), |v| *v == 10, -10, 5), Ok(()));
    assert_eq!(
        m.memory(),
        Memory {
            managed: 0,
            in_memory: 0,
            spilled_memory: 8,
            spilled_disk: 5,
            spilled: 1
        }
    );
    assert_eq!(m.read(&key(1)), Some((&-10, true)));
    assert_eq!(std::mem::take(&mut m.graveyard), vec![10]); // the in-memory value
                                                            // A dependent runs with the handle (the caller loads it).
    m.compute(task(2).dep(1, &[ME]));
    let job = take(&mut m, 2);
    assert_eq!(m.keys.get(job.deps[0]).value, Some(-10));
    m.complete(job, Some((20, 8)), 0.1);
    m.free(1);
    assert_eq!(std::mem::take(&mut m.graveyard), vec![-10]); // the caller deletes its file
    assert_eq!(m.memory().spilled, 0);
    assert_eq!(m.memory().managed, 8);
    ok(&m);
}

#[test]
fn a_paused_machine_starts_nothing_until_resumed() {
    let mut m = machine(2);
    m.compute(task(1));
    m.set_paused(true);
    assert!(!m.runnable());
    assert!(m.take_ready(0.0).is_none());
    m.set_paused(false);
    assert!(m.runnable());
    run_ok(&mut m, 1);
    ok(&m);
}

// ----- load counts ----------------------------------------------------------------

fn counts(executing: usize, ready: usize, in_flight: usize, in_memory: usize) -> Counts {
    Counts {
        executing,
        ready,
        in_flight,
        in_memory,
    }
}

#[test]
fn counts_follow_tasks_and_keys_through_their_stages() {
    let mut m = machine(1);
    assert_eq!(m.counts(), counts(0, 0, 0, 0));
    m.compute(task(1));
    m.compute(task(2));
    m.compute(task(3).dep(9, &["tcp://peer:1"]));
    assert_eq!(m.counts(), counts(0, 2, 0, 0));
    let (p, _) = plan(&mut m, &never);
    assert_eq!(p.len(), 1);
    let job = take(&mut m, 2);
    assert_eq!(m.counts(), counts(1, 1, 1, 0));
    m.complete(job, Some((20, 8)), 0.1);
    m.fetched("tcp://peer:1", kid(&m, 9), Ok(Some((90, 8))));
    assert_eq!(m.counts(), counts(0, 2, 0, 2));
    ok(&m);
}

fn transitions(m: &mut M) -> Vec<(String, &'static str, &'static str)> {
    m.take_transitions()
        .into_iter()
        .map(|t| (String::from_utf8(t.key.into()).unwrap(), t.start, t.finish))
        .collect()
}

#[test]
fn transitions_are_recorded_only_while_fed() {
    let mut m = machine(1);
    m.compute(task(1));
    run_ok(&mut m, 1);
    assert!(m.take_transitions().is_empty(), "off by default");
    m.feed_transitions(true);
    m.compute(task(2));
    run_ok(&mut m, 2);
    m.free(2);
    let k2 = |a, b| ("k2".to_owned(), a, b);
    assert_eq!(
        transitions(&mut m),
        [
            k2("released", "waiting"),
            k2("waiting", "ready"),
            k2("ready", "executing"),
            k2("executing", "memory"),
            k2("memory", "released"),
            k2("released", "forgotten"),
        ]
    );
    // A failure, and a task freed while it runs.
    m.compute(task(3));
    let job = take(&mut m, 3);
    m.complete(job, None, 0.0);
    m.compute(task(4));
    let job = take(&mut m, 4);
    m.free(4);
    assert_eq!(m.complete(job, Some((1, 1)), 0.0), Outcome::Dropped);
    let seen = transitions(&mut m);
    assert!(
        seen.contains(&("k3".to_owned(), "executing", "error")),
        "{seen:?}"
    );
    let k4: Vec<_> = seen
        .iter()
        .filter(|t| t.0 == "k4")
        .map(|t| (t.1, t.2))
        .collect();
    assert_eq!(
        k4[2..],
        [
            ("ready", "executing"),
            ("executing", "cancelled"),
            ("cancelled", "released"),
            ("released", "forgotten"),
        ]
    );
    m.feed_transitions(false);
    m.compute(task(5));
    assert!(m.take_transitions().is_empty());
    ok(&m);
}

/// A held result costs its key's slot and its task's record (in slabs), beyond the
/// key's bytes, the value and the index entries: pinned, since every held result pays
/// any growth (docs/runtime.md#memory). `Box<u8>` stands for the binding's
/// pointer-sized values.
#[test]
fn a_held_results_records_stay_small() {
    use std::mem::size_of;
    assert_eq!(size_of::<Option<Slot<Box<u8>>>>(), 64);
    assert_eq!(size_of::<Option<Task>>(), 32);
}

/// A held result keeps neither its task's todo nor the key's rare record.
#[test]
fn a_held_result_drops_what_only_running_needs() {
    let mut m = machine(1);
    m.compute(task(1));
    let job = m.take_ready(0.0).expect("ready");
    assert_eq!(m.complete(job, Some((7, 8)), 0.0), Outcome::Finished);
    let t = m.task(1).expect("held");
    assert!(t.deps().is_empty() && !t.has_todo());
    assert!(!m.keys.get(kid(&m, 1)).has_rare());
    m.validate().unwrap();
}
