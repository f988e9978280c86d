//! Scheduling policies: worker choice, occupancy, priorities,
//! stealing (docs/scheduling.md), and bad input (every error leaves the state untouched).

mod common;
use common::*;
use squall_core::TaskState as S;
use squall_core::*;

fn many(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn roots(keys: &[String]) -> Vec<(&str, &[&str])> {
    keys.iter().map(|k| (k.as_str(), &[][..])).collect()
}

fn strs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

/// Submits `keys` as wanted independent roots, in order (as `client.map` does).
fn submit_roots(h: &mut H, keys: &[String]) {
    let opts = TaskOptions::default();
    h.submit_with(&roots(keys), &strs(keys), opts, GraphOrder::Sequential)
        .unwrap();
}

#[test]
fn queuing_fills_saturation_slots_then_releases_one_per_completion() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    let keys = many("root", 20);
    submit_roots(&mut h, &keys);
    // ceil(1.1 × 4) = 5 slots.
    assert_eq!(h.running.len(), 5);
    assert_eq!(h.s.n_queued(), 15);
    // Best priority first: the queue drains in graph order.
    let first = h.dispatched();
    assert_eq!(first, strs(&keys[..5]));
    h.finish(&first[0]);
    assert_eq!(h.running.len(), 5);
    assert_eq!(h.dispatched().last().unwrap(), &keys[5]);
    h.run_all();
    assert!(keys.iter().all(|k| h.state(k) == S::Memory));
}

/// squall's `worker_saturation_duration`: once a queued prefix is measured as tiny, a
/// worker gets enough of it for ~10 ms of work per thread instead of ceil(1.1 × n).
#[test]
fn queuing_batches_tiny_tasks_by_expected_duration() {
    let mut h = H::new();
    let w = h.worker("tcp://a", 1);
    let keys = many("tiny", 3000);
    submit_roots(&mut h, &keys);
    assert_eq!(
        h.running.len(),
        2,
        "unmeasured prefix: Dask's ceil(1.1 × 1)"
    );
    let (_, t, run) = h.running[0];
    let now = h.tick_time(0.001);
    let r = Finished::computed(t, run, 8, now - 2e-6, now);
    assert_eq!(h.s.task_finished(w, r, now).unwrap(), Outcome::Applied);
    h.drain();
    // 2 µs per task: 10 ms / 2 µs = 5000 slots, more than what is left.
    assert_eq!(h.s.n_queued(), 0);
    assert_eq!(h.running.len(), 2999);

    let mut slow = H::new();
    slow.worker("tcp://a", 1);
    slow.submit_with(
        &roots(&keys),
        &strs(&keys),
        TaskOptions::default(),
        GraphOrder::Sequential,
    )
    .unwrap();
    let first = slow.dispatched()[0].clone();
    slow.finish(&first); // 10 ms: no more than the count cap
    assert_eq!(slow.running.len(), 2);
}

#[test]
fn queuing_sends_to_least_busy_worker() {
    let mut h = H::new();
    h.worker("tcp://a", 2);
    h.worker("tcp://b", 2);
    let keys = many("root", 12);
    h.submit(&roots(&keys), &strs(&keys)).unwrap();
    let on_a = h
        .running
        .iter()
        .filter(|r| h.s.worker(r.0).address == "tcp://a")
        .count();
    assert_eq!(
        (on_a, h.running.len() - on_a),
        (3, 3),
        "ceil(1.1×2)=3 slots each"
    );
}

#[test]
fn co_assignment_without_queuing_batches_siblings() {
    let mut h = H::with(Config {
        worker_saturation: f64::INFINITY,
        ..cfg()
    });
    h.worker("tcp://a", 2);
    h.worker("tcp://b", 2);
    let keys = many("root", 16);
    submit_roots(&mut h, &keys);
    assert_eq!(h.s.n_queued(), 0, "no queuing with infinite saturation");
    // floor(16 / 4 × 2) = 8 consecutive siblings per worker.
    let places: Vec<String> = keys.iter().map(|k| h.worker_of(k).unwrap()).collect();
    assert!(places[..8].iter().all(|p| p == &places[0]));
    assert!(places[8..].iter().all(|p| p == &places[8]));
    assert_ne!(places[0], places[8]);
}

#[test]
fn dependent_goes_where_its_data_is() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    let wx = h.worker_of("x").unwrap();
    h.finish_sized("x", 50_000_000);
    h.submit(&[("y", &["x"])], &["y"]).unwrap();
    assert_eq!(h.worker_of("y").unwrap(), wx);
}

#[test]
fn round_robin_among_empty_workers_for_independent_tasks() {
    let mut h = H::new();
    for w in ["tcp://a", "tcp://b", "tcp://c"] {
        h.worker(w, 1);
    }
    // Three single-task groups: not root-ish, no deps → the fast path.
    h.submit(&[("f-1", &[])], &["f-1"]).unwrap();
    h.submit(&[("g-1", &[])], &["g-1"]).unwrap();
    h.submit(&[("h-1", &[])], &["h-1"]).unwrap();
    let mut places: Vec<String> = ["f-1", "g-1", "h-1"]
        .iter()
        .map(|k| h.worker_of(k).unwrap())
        .collect();
    places.sort();
    assert_eq!(places, vec!["tcp://a", "tcp://b", "tcp://c"]);
}

#[test]
fn worker_and_resource_restrictions_are_hard_unless_loose() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.worker_spec(WorkerSpec {
        address: "tcp://gpu".into(),
        name: "gpu-box".into(),
        host: "10.0.0.2".into(),
        nthreads: 1,
        resources: vec![("GPU".into(), 1.0)],
        ..Default::default()
    });
    // Submits one task named `k` under these restrictions.
    let submit = |h: &mut H, k: &str, r: Restrictions| {
        let opts = TaskOptions {
            restrictions: Some(r),
            ..Default::default()
        };
        h.submit_with(&[(k, &[])], &[k], opts, GraphOrder::Compute)
            .unwrap();
    };
    let gpu = Restrictions {
        resources: vec![("GPU".into(), 1.0)],
        ..Default::default()
    };
    submit(&mut h, "train", gpu);
    assert_eq!(h.worker_of("train").unwrap(), "tcp://gpu");
    let by_name = Restrictions {
        workers: vec!["gpu-box".into()],
        ..Default::default()
    };
    submit(&mut h, "named", by_name);
    assert_eq!(h.worker_of("named").unwrap(), "tcp://gpu");
    let by_host = Restrictions {
        hosts: vec!["10.0.0.2".into()],
        ..Default::default()
    };
    submit(&mut h, "hosted", by_host);
    assert_eq!(h.worker_of("hosted").unwrap(), "tcp://gpu");
    let hard = Restrictions {
        resources: vec![("TPU".into(), 1.0)],
        ..Default::default()
    };
    submit(&mut h, "tpu", hard);
    assert_eq!(h.state("tpu"), S::NoWorker);
    let loose = Restrictions {
        workers: vec!["tcp://gone".into()],
        loose: true,
        ..Default::default()
    };
    submit(&mut h, "anywhere", loose);
    assert_eq!(h.state("anywhere"), S::Processing);
}

#[test]
fn rootish_needs_a_large_group_with_few_dependency_groups() {
    let mut h = H::new();
    h.worker("tcp://a", 2);
    let small = many("small", 4);
    h.submit(&roots(&small), &strs(&small)).unwrap();
    assert!(
        !h.s.is_rootish(h.t("small-0")),
        "4 tasks is not > 2 × 2 threads"
    );
    let big = many("big", 5);
    h.submit(&roots(&big), &strs(&big)).unwrap();
    assert!(h.s.is_rootish(h.t("big-0")));
}

#[test]
fn user_priority_beats_graph_order_and_fifo() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    let low = many("low", 10);
    h.submit(&roots(&low), &strs(&low)).unwrap();
    h.tick_time(1.0);
    let high = many("high", 10);
    let opts = TaskOptions {
        priority: Some(10),
        ..Default::default()
    };
    h.submit_with(&roots(&high), &strs(&high), opts, GraphOrder::Sequential)
        .unwrap();
    // Let everything already dispatched finish; what comes next is high priority.
    let done = h.run_all();
    let first_high = done.iter().position(|k| k.starts_with("high")).unwrap();
    let last_high = done.iter().rposition(|k| k.starts_with("high")).unwrap();
    assert!(done[first_high..=last_high]
        .iter()
        .all(|k| k.starts_with("high")));
    assert!(
        first_high <= 2,
        "only the already dispatched low tasks run before: {done:?}"
    );
}

#[test]
fn fifo_generations_run_earlier_submissions_first() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    let first = many("first", 10);
    h.submit(&roots(&first), &strs(&first)).unwrap();
    h.tick_time(1.0);
    let second = many("second", 10);
    h.submit(&roots(&second), &strs(&second)).unwrap();
    let done = h.run_all();
    let last_first = done.iter().rposition(|k| k.starts_with("first")).unwrap();
    let first_second = done.iter().position(|k| k.starts_with("second")).unwrap();
    assert!(last_first < first_second, "{done:?}");
    let p1 = h.s.task(h.t("first-0")).priority;
    let p2 = h.s.task(h.t("second-0")).priority;
    assert!(p1.generation < p2.generation);
}

#[test]
fn occupancy_uses_learned_durations() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.submit(&[("slow-1", &[])], &["slow-1"]).unwrap();
    assert!(
        (h.s.occupancy(a) - 0.5).abs() < 1e-9,
        "unknown duration = 500 ms"
    );
    h.finish("slow-1"); // took 10 ms
    h.submit(&[("slow-2", &[])], &["slow-2"]).unwrap();
    assert!(
        (h.s.occupancy(a) - 0.01).abs() < 1e-6,
        "{}",
        h.s.occupancy(a)
    );
}

#[test]
fn memory_guard_errs_tasks_whose_inputs_exceed_the_limit() {
    let mut h = H::new();
    h.worker_spec(WorkerSpec {
        address: "tcp://a".into(),
        nthreads: 1,
        memory_limit: 1000,
        ..Default::default()
    });
    h.submit(&[("big", &[])], &["big"]).unwrap();
    h.finish_sized("big", 5000);
    h.submit(&[("use", &["big"])], &["use"]).unwrap();
    assert_eq!(h.state("use"), S::Erred);
    assert_eq!(
        h.s.task(h.t("use")).error().unwrap().kind,
        ErrorKind::MemoryError
    );
}

/// Twelve tasks that all need data living on the only worker, a, so they pile up there
/// (five inputs: the group is too dependent to be root-ish, so nothing queues).
fn pile_on_a(h: &mut H) -> Vec<String> {
    let inputs = many("x", 5);
    h.submit(&roots(&inputs), &strs(&inputs)).unwrap();
    h.run_all();
    let work = many("work", 12);
    let all: Vec<&str> = strs(&inputs);
    let tasks: Vec<(&str, &[&str])> = work.iter().map(|k| (k.as_str(), all.as_slice())).collect();
    h.submit(&tasks, &strs(&work)).unwrap();
    work
}

#[test]
fn stealing_moves_queued_work_to_an_idle_worker() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let deps = pile_on_a(&mut h);
    assert!(deps
        .iter()
        .all(|k| h.worker_of(k).as_deref() == Some("tcp://a")));
    let b = h.worker("tcp://b", 1);
    assert!(h.s.idle_workers().contains(&b));
    let now = h.tick_time(2.0);
    h.s.tick(now);
    h.drain();
    let requests = h.ops("steal");
    assert!(
        !requests.is_empty(),
        "an idle thief must steal from the busy victim"
    );
    // The victim answers: the first stolen task had not started.
    let stolen = requests[0].split('@').next().unwrap().to_string();
    let t = h.t(&stolen);
    let stimulus = (1..100).find(|&s| {
        h.s.steal_response(a, t, Some(WorkerTaskState::Ready), s, now)
            .unwrap_or(false)
    });
    assert!(stimulus.is_some(), "the matching response moves the task");
    h.drain();
    assert_eq!(h.worker_of(&stolen).unwrap(), "tcp://b");
    assert!(h.s.stealing_stats().moves >= 1);
    h.run_all();
    assert!(deps.iter().all(|k| h.state(k) == S::Memory));
}

#[test]
fn steal_response_for_started_task_keeps_it_on_the_victim() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    pile_on_a(&mut h);
    h.worker("tcp://b", 1);
    let now = h.tick_time(2.0);
    h.s.tick(now);
    h.drain();
    let stolen = h.ops("steal")[0].split('@').next().unwrap().to_string();
    let t = h.t(&stolen);
    let moved: Vec<bool> = (1..100)
        .map(|s| {
            h.s.steal_response(a, t, Some(WorkerTaskState::Executing), s, now)
                .unwrap()
        })
        .collect();
    assert!(moved.iter().all(|m| !m));
    assert_eq!(h.worker_of(&stolen).unwrap(), "tcp://a");
    // A second (stale) answer is ignored.
    assert_eq!(
        h.s.steal_response(a, t, Some(WorkerTaskState::Ready), 1, now),
        Ok(false)
    );
}

#[test]
fn dependency_free_tasks_bin_at_level_zero_and_fast_prefixes_never() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("free-1", &[])], &["free-1"]).unwrap();
    assert_eq!(h.s.steal_bin_of(h.t("free-1")).map(|b| b.1), Some(0));
    h.submit(&[("rechunk-split-1", &["free-1"])], &["rechunk-split-1"])
        .unwrap();
    h.finish("free-1");
    assert_eq!(h.state("rechunk-split-1"), S::Processing);
    assert_eq!(h.s.steal_bin_of(h.t("rechunk-split-1")), None);
}

// ----- bad input ---------------------------------------------------------------------

fn snapshot(h: &H) -> (usize, usize, Vec<Command>) {
    (
        h.s.n_tasks(),
        h.s.n_queued(),
        h.s.pending_commands().to_vec(),
    )
}

#[test]
fn cycles_are_rejected_naming_keys_on_the_cycle() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    let before = snapshot(&h);
    let err = h
        .submit(
            &[("a", &["c"]), ("b", &["a"]), ("c", &["b"]), ("d", &[])],
            &["d"],
        )
        .unwrap_err();
    match err {
        CoreError::Cycle(keys) => {
            let mut names: Vec<String> = keys.iter().map(|k| k.python_str().into_owned()).collect();
            names.sort();
            assert_eq!(names, vec!["a", "b", "c"]);
        }
        e => panic!("expected a cycle error, got {e}"),
    }
    assert_eq!(snapshot(&h), before);
    let self_loop = h.submit(&[("s", &["s"])], &["s"]).unwrap_err();
    assert!(matches!(self_loop, CoreError::Cycle(_)));
}

#[test]
fn unknown_dependencies_and_keys_are_rejected() {
    let mut h = H::new();
    let before = snapshot(&h);
    let err = h.submit(&[("a", &["ghost"])], &["a"]).unwrap_err();
    assert!(err.to_string().contains("ghost"), "{err}");
    let err = h.submit(&[("a", &[])], &["nope"]).unwrap_err();
    assert_eq!(err, CoreError::UnknownKey(key("nope")));
    assert_eq!(snapshot(&h), before);
}

#[test]
fn a_known_key_keeps_its_definition_and_duplicates_within_a_graph_are_rejected() {
    let mut h = H::new();
    h.submit(&[("a", &[]), ("b", &[])], &["a", "b"]).unwrap();
    // Same key, same definition: fine.
    h.submit(&[("a", &[])], &["a"]).unwrap();
    let a = h.t("a");
    let spec_before = h.s.task(a).run_spec().map(<[u8]>::to_vec);
    // Another body and other dependencies for a known key (dask's optimiser fuses a
    // key differently in a later graph): the known task is kept as it was, the rest
    // of the graph is accepted, and the redefinition is reported.
    let other = Submission {
        tasks: vec![
            NewTask::new(
                key("a"),
                vec![DepRef::Key(key("b")), DepRef::Local(2)],
                spec("something else"),
            ),
            NewTask::new(key("c"), vec![DepRef::Local(0)], spec("c")),
            // Needed only by the new definition of "a", which is not used: an orphan.
            NewTask::new(key("n"), vec![], spec("n")),
        ],
        wanted: vec![DepRef::Local(1)],
        ..Default::default()
    };
    let now = h.tick_time(0.001);
    let r = h.s.update_graph(h.client, other, now).unwrap();
    h.drain();
    assert_eq!(r.ids[0], a);
    assert_eq!(r.redefined, vec![a]);
    assert_eq!(h.s.task(a).run_spec(), spec_before.as_deref());
    assert!(h.s.task(a).dependencies.is_empty());
    assert!(h.s.task(h.t("c")).dependencies.contains(a));
    assert_eq!(h.state("n"), TaskState::Forgotten, "an orphan is not run");
    h.s.validate().unwrap();
    // Another body alone (same dependencies) is kept silently, as distributed does.
    let body = Submission {
        tasks: vec![NewTask::new(key("a"), vec![], spec("a third body"))],
        wanted: vec![DepRef::Local(0)],
        ..Default::default()
    };
    let now = h.tick_time(0.001);
    let r = h.s.update_graph(h.client, body, now).unwrap();
    h.drain();
    assert!(r.redefined.is_empty());
    assert_eq!(h.s.task(a).run_spec(), spec_before.as_deref());
    // Within one graph a key with two definitions is ambiguous: an error.
    let before = snapshot(&h);
    let twice = Submission {
        tasks: vec![
            NewTask::new(key("d"), vec![], spec("one")),
            NewTask::new(key("d"), vec![], spec("two")),
        ],
        ..Default::default()
    };
    assert_eq!(
        h.submit_raw(twice).unwrap_err(),
        CoreError::DuplicateKey(key("d"))
    );
    assert_eq!(snapshot(&h), before);
}

#[test]
fn events_for_unknown_workers_tasks_and_stale_runs_are_errors() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    let (w, t, run) = h.running[0];
    let now = h.tick_time(0.1);
    let ghost = WorkerId(99);
    assert_eq!(
        h.s.task_finished(ghost, Finished::computed(t, run, 1, now, now), now),
        Err(CoreError::UnknownWorker(99))
    );
    assert_eq!(
        h.s.task_finished(w, Finished::computed(TaskId(12345), 1, 1, now, now), now),
        Err(CoreError::UnknownTask(12345))
    );
    let stale =
        h.s.task_finished(w, Finished::computed(t, run + 1000, 1, now, now), now);
    assert_eq!(h.state("x"), S::Released.max(S::Processing));
    // A stale run on the worker that processes the task makes it re-dispatch (Dask's rule);
    // from elsewhere it is an error.
    assert_eq!(stale, Ok(Outcome::Applied));
    h.drain();
    let b = h.worker("tcp://b", 1);
    let (_, t, run) = h.running[0];
    let other = if h.s.task(t).processing_on() == Some(a) {
        b
    } else {
        a
    };
    let err =
        h.s.task_finished(other, Finished::computed(t, run + 7, 1, now, now), now)
            .unwrap_err();
    assert!(matches!(err, CoreError::StaleRunId { .. }));
    assert_eq!(
        h.s.add_worker(
            WorkerSpec {
                address: "tcp://a".into(),
                nthreads: 1,
                ..Default::default()
            },
            now
        ),
        Err(CoreError::WorkerExists("tcp://a".into()))
    );
    h.s.validate().unwrap();
}

#[test]
fn a_tick_every_interval_balances_every_time() {
    // 4.1 - 4.0 < 0.1 in floating point: the pass must still run.
    let mut h = H::with(Config {
        work_stealing_interval: 0.1,
        ..cfg()
    });
    h.worker("tcp://a", 1);
    pile_on_a(&mut h);
    h.s.tick(4.0);
    h.now = 4.05;
    h.worker("tcp://b", 1);
    h.s.tick(4.1);
    assert!(h.s.stealing_stats().requests > 0);
}

/// A task's place in the queue is not a run: a late report of its last run, arriving
/// while the task is queued again, is answered as for a released task (free-keys).
#[test]
fn a_late_report_of_a_requeued_task_is_ignored_and_its_result_freed() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    let keys = many("root", 10);
    submit_roots(&mut h, &keys);
    let (_, t, run) = *h.running.iter().find(|r| r.0 == a).unwrap();
    let now = h.tick_time(1.0);
    h.s.worker_status_change(a, WorkerStatus::Paused, now)
        .unwrap();
    h.s.reschedule(a, t, now).unwrap();
    h.drain();
    assert_eq!(h.s.task(t).state, S::Queued, "b has no free slot");
    h.clear_log();
    let late =
        h.s.task_finished(a, Finished::computed(t, run, 8, now, now), now);
    assert_eq!(late, Ok(Outcome::Ignored));
    h.drain();
    assert_eq!(h.ops("free"), vec![format!("{}@tcp://a", h.name(t))]);
}

#[test]
fn a_worker_silent_past_the_ttl_is_removed_and_its_connection_closed() {
    let mut h = H::with(Config {
        worker_ttl: Some(10.0),
        ..cfg()
    });
    let quiet = h.worker("tcp://a:1", 1);
    let alive = h.worker("tcp://b:1", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    h.clear_log();
    let now = h.tick_time(8.0);
    h.s.heartbeat(alive, now, None, &[], None, None).unwrap();
    let now = h.tick_time(4.0); // 12 s since `quiet` joined, 4 s since `alive` beat
    h.s.tick(now);
    h.drain();
    assert!(h.s.get_worker(quiet).unwrap().status == WorkerStatus::Closed);
    assert_eq!(h.ops("close-worker"), ["tcp://a:1"]);
    assert_eq!(h.ops("worker-removed"), ["tcp://a:1"]);
    assert_eq!(h.s.n_workers(), 1);
    assert_eq!(h.s.total_memory(), 0);
}

#[test]
fn actors_are_never_queued_nor_stolen_and_spread_by_actor_count() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let keys = many("actor", 12);
    let opts = TaskOptions {
        actor: true,
        ..Default::default()
    };
    // A group far larger than the cluster: root-ish were it not for the actor flag.
    h.submit_with(&roots(&keys), &strs(&keys), opts, GraphOrder::Compute)
        .unwrap();
    assert!(h.s.queued_tasks().is_empty());
    assert!(keys.iter().all(|k| h.state(k) == S::Processing));
    assert_eq!(h.s.worker(a).actors.len(), 12);
    let b = h.worker("tcp://b", 1);
    assert!(h.s.idle_workers().contains(&b));
    for _ in 0..5 {
        let now = h.tick_time(2.0);
        h.s.tick(now);
        h.drain();
    }
    assert!(h.ops("steal").is_empty(), "an actor is never stolen");
    assert_eq!(h.s.stealing_stats().n_stealable(), 0);
    // New actors go to the worker with the fewest.
    let more = many("late", 4);
    let opts = TaskOptions {
        actor: true,
        ..Default::default()
    };
    h.submit_with(&roots(&more), &strs(&more), opts, GraphOrder::Compute)
        .unwrap();
    assert!(more
        .iter()
        .all(|k| h.worker_of(k).as_deref() == Some("tcp://b")));
    h.run_all();
    assert_eq!(h.s.worker(a).actors.len(), 12);
    assert_eq!(h.s.worker(b).actors.len(), 4);
}

/// Each worker here joins between "tcp://a" and the worker that joined before it, using
/// up the free ranks there until the scheduler renumbers everybody; address order (the
/// tie-break of every worker choice) holds throughout (`validate` checks the ranks at
/// every stimulus), and queued roots go to the emptiest worker, the first in address
/// order among equals.
#[test]
fn workers_joining_between_others_keep_address_order() {
    let mut h = H::new();
    let mut addrs = vec!["tcp://a".to_string(), "tcp://b".to_string()];
    h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    for zeros in (1..=40).rev() {
        let a = format!("tcp://a{}", "0".repeat(zeros));
        h.worker(&a, 1);
        addrs.push(a);
    }
    addrs.sort();
    let listed: Vec<String> =
        h.s.worker_ids()
            .map(|w| h.s.worker(w).address.clone())
            .collect();
    assert_eq!(listed, addrs);
    let keys = many("root", 200);
    submit_roots(&mut h, &keys);
    let first_round: Vec<String> = h.running[..addrs.len()]
        .iter()
        .map(|&(w, _, _)| h.s.worker(w).address.clone())
        .collect();
    assert_eq!(first_round, addrs);
    h.run_all();
    assert!(keys.iter().all(|k| h.state(k) == S::Memory));
}
