//! One test (or more) per transition of the table in docs/scheduling.md#the-transition-table, driven through
//! the public events, with the invariant checker on after every stimulus.

mod common;
use common::*;
use squall_core::TaskState as S;
use squall_core::*;

#[test]
fn chain_runs_in_order_and_leaves_nothing_behind() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[]), ("y", &["x"]), ("z", &["y"])], &["z"])
        .unwrap();
    assert_eq!(h.state("x"), S::Processing);
    assert_eq!(h.state("y"), S::Waiting);
    assert_eq!(h.state("z"), S::Waiting);
    assert_eq!(h.run_all(), vec!["x", "y", "z"]);
    assert_eq!(h.state("z"), S::Memory);
    // Intermediate results were released as soon as nobody needed them.
    assert_eq!(h.state("x"), S::Released);
    assert!(h.ops("free").contains(&"x@tcp://a".to_string()));
    assert_eq!(h.ops("key-in-memory"), vec!["z"]);
    h.release(&["z"]);
    assert_eq!(
        h.s.n_tasks(),
        0,
        "releasing the only wanted key forgets the graph"
    );
    h.s.validate().unwrap();
}

#[test]
fn released_to_waiting_recurses_into_released_dependencies() {
    let mut h = H::new();
    h.worker("tcp://a", 2);
    h.submit(&[("a", &[]), ("b", &["a"])], &["b"]).unwrap();
    assert_eq!(h.state("a"), S::Processing);
    let b = h.t("b");
    assert_eq!(h.s.task(b).waiting_on, 1);
    assert!(h.s.task(h.t("a")).waiters.contains(b));
}

#[test]
fn waiting_to_memory_is_a_harmless_race() {
    // A worker reports a task finished while the scheduler thinks it is waiting
    // (its dependency was lost meanwhile): nothing breaks and the state stays coherent.
    let mut h = H::new();
    let wa = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    h.submit(&[("a", &[]), ("b", &["a"])], &["b"]).unwrap();
    h.finish("a");
    let (w, t, run) = *h.running.iter().find(|r| h.name(r.1) == "b").unwrap();
    // Lose a's data: b goes back to waiting, a is recomputed.
    let holder = h.s.task(h.t("a")).who_has.first().unwrap();
    let now = h.tick_time(0.1);
    h.s.release_worker_data(holder, h.t("a"), now).unwrap();
    h.drain();
    assert_eq!(h.state("b"), S::Waiting);
    let now = h.tick_time(0.1);
    // The report of b's earlier run arrives now: a no-op, b still waits for a.
    let late =
        h.s.task_finished(w, Finished::computed(t, run, 1, now, now), now);
    assert_eq!(late, Ok(Outcome::Ignored));
    assert_eq!(h.state("b"), S::Waiting);
    let _ = wa;
    h.run_all();
    assert_eq!(h.state("b"), S::Memory);
}

#[test]
fn processing_to_released_to_waiting_on_worker_loss() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    let w = h.worker_of("x").unwrap();
    let victim = h.s.worker_by_address(&w).unwrap();
    let now = h.tick_time(1.0);
    h.s.remove_worker(victim, false, now).unwrap();
    h.drain();
    assert_eq!(h.state("x"), S::Processing);
    assert_ne!(h.worker_of("x").unwrap(), w);
    assert_eq!(h.s.task(h.t("x")).suspicious, 1);
    assert!(h.ops("worker-removed").contains(&w));
    let _ = a;
}

#[test]
fn memory_to_released_recomputes_lost_data_chain() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.submit(&[("x", &[]), ("y", &["x"]), ("z", &["y"])], &["y", "z"])
        .unwrap();
    h.finish("x");
    h.finish("y");
    // z now runs on a; add b, then kill a: y (wanted) and x are recomputed on b.
    h.worker("tcp://b", 1);
    let now = h.tick_time(1.0);
    h.s.remove_worker(a, false, now).unwrap();
    h.drain();
    assert!(h.ops("lost-data").contains(&"y".to_string()));
    assert_eq!(h.state("x"), S::Processing);
    assert_eq!(h.state("y"), S::Waiting);
    assert_eq!(h.state("z"), S::Waiting);
    h.run_all();
    assert_eq!(h.state("z"), S::Memory);
    assert_eq!(h.state("y"), S::Memory);
}

#[test]
fn erred_propagates_blame_and_retry_recovers() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[]), ("y", &["x"]), ("z", &["y"])], &["z"])
        .unwrap();
    h.fail("x");
    assert_eq!(h.state("x"), S::Erred);
    assert_eq!(h.state("y"), S::Erred);
    assert_eq!(h.state("z"), S::Erred);
    let x = h.t("x");
    assert_eq!(h.s.task(h.t("z")).exception_blame(), Some(x));
    assert_eq!(h.ops("task-erred"), vec!["z"]);
    let err = h.s.task(h.t("z")).error().unwrap().clone();
    assert_eq!(err.exception_text, "boom in x");
    // Client retry: erred → released → waiting from the first failure down.
    h.retry("z");
    assert!(h.ops("task-retried").contains(&"z".to_string()));
    assert_eq!(h.state("x"), S::Processing);
    h.run_all();
    assert_eq!(h.state("z"), S::Memory);
}

#[test]
fn automatic_retries_rerun_before_erring() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    let opts = TaskOptions {
        retries: Some(1),
        ..Default::default()
    };
    h.submit_with(&[("x", &[])], &["x"], opts, GraphOrder::Compute)
        .unwrap();
    h.fail("x");
    assert_eq!(h.state("x"), S::Processing, "first failure is retried");
    h.fail("x");
    assert_eq!(h.state("x"), S::Erred);
}

#[test]
fn submitting_on_top_of_an_erred_task_errs_at_once() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    h.fail("x");
    h.submit(&[("y", &["x"])], &["y"]).unwrap();
    assert_eq!(h.state("y"), S::Erred);
    assert_eq!(h.s.task(h.t("y")).exception_blame(), Some(h.t("x")));
}

#[test]
fn waiting_to_released_and_forgotten_on_client_release() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[]), ("y", &["x"])], &["y"]).unwrap();
    h.release(&["y"]);
    // x was processing: it is released, the worker told to drop it, all forgotten.
    assert_eq!(h.s.n_tasks(), 0);
    assert!(h.ops("free").contains(&"x@tcp://a".to_string()));
}

#[test]
fn queued_to_released_and_no_worker_to_released() {
    let mut h = H::new();
    // No workers: a big group is root-ish (0 threads) and queues.
    let tasks: Vec<(String, Vec<&str>)> = (0..4).map(|i| (format!("r-{i}"), vec![])).collect();
    let refs: Vec<(&str, &[&str])> = tasks
        .iter()
        .map(|(k, d)| (k.as_str(), d.as_slice()))
        .collect();
    let keys: Vec<&str> = tasks.iter().map(|(k, _)| k.as_str()).collect();
    h.submit(&refs, &keys).unwrap();
    assert!(keys.iter().all(|k| h.state(k) == S::Queued));
    // A restricted task cannot be root-ish: it waits in no-worker.
    let opts = TaskOptions {
        restrictions: Some(Restrictions {
            workers: vec!["tcp://nowhere".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    h.submit_with(&[("pinned", &[])], &["pinned"], opts, GraphOrder::Compute)
        .unwrap();
    assert_eq!(h.state("pinned"), S::NoWorker);
    h.release(&keys);
    h.release(&["pinned"]);
    assert_eq!(h.s.n_tasks(), 0);
    assert_eq!(h.s.n_queued(), 0);
    assert_eq!(h.s.n_unrunnable(), 0);
}

#[test]
fn no_worker_to_processing_when_a_worker_arrives() {
    let mut h = H::new();
    h.submit(&[("x", &[])], &["x"]).unwrap();
    // A lone task with no workers: root-ish with 0 threads, so it queues.
    assert_eq!(h.state("x"), S::Queued);
    h.worker("tcp://a", 1);
    assert_eq!(h.state("x"), S::Processing);
    let opts = TaskOptions {
        restrictions: Some(Restrictions {
            workers: vec!["tcp://b".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    h.submit_with(&[("y", &[])], &["y"], opts, GraphOrder::Compute)
        .unwrap();
    assert_eq!(h.state("y"), S::NoWorker);
    h.worker("tcp://b", 1);
    assert_eq!(h.state("y"), S::Processing);
    assert_eq!(h.worker_of("y").unwrap(), "tcp://b");
}

#[test]
fn queued_and_no_worker_to_erred_after_no_workers_timeout() {
    let mut h = H::with(Config {
        no_workers_timeout: Some(5.0),
        ..cfg()
    });
    h.submit(&[("x", &[])], &["x"]).unwrap();
    let opts = TaskOptions {
        restrictions: Some(Restrictions {
            workers: vec!["tcp://b".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    h.worker("tcp://a", 1);
    h.submit_with(&[("y", &[])], &["y"], opts, GraphOrder::Compute)
        .unwrap();
    assert_eq!(h.state("y"), S::NoWorker);
    let now = h.tick_time(1.0);
    h.s.tick(now);
    assert_eq!(h.state("y"), S::NoWorker);
    let now = h.tick_time(10.0);
    h.s.tick(now);
    h.drain();
    assert_eq!(h.state("y"), S::Erred);
    let e = h.s.task(h.t("y")).error().unwrap().clone();
    assert_eq!(e.kind, ErrorKind::NoValidWorker);
}

#[test]
fn memory_to_forgotten_frees_holders_and_tells_clients() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    h.finish("x");
    h.clear_log();
    h.release(&["x"]);
    assert_eq!(h.ops("free"), vec!["x@tcp://a"]);
    assert_eq!(
        h.ops("cancelled"),
        Vec::<String>::new(),
        "the releasing client no longer wants it"
    );
    assert_eq!(h.s.n_tasks(), 0);
}

#[test]
fn erred_to_forgotten_via_two_hops() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    h.fail("x");
    h.release(&["x"]);
    assert_eq!(h.s.n_tasks(), 0);
    let story = h.s.story(&key("x"));
    let states: Vec<(S, S)> = story.iter().map(|e| (e.start, e.finish)).collect();
    assert_eq!(
        states,
        vec![
            (S::Released, S::Waiting),
            (S::Waiting, S::Processing),
            (S::Processing, S::Erred),
            (S::Erred, S::Forgotten)
        ]
    );
}

#[test]
fn scattered_data_is_forgotten_when_lost_and_dependents_are_cancelled() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let now = h.tick_time(0.1);
    let item = Scattered {
        key: key("data"),
        nbytes: 100,
        holders: vec!["tcp://a".into()],
    };
    h.s.scatter(h.client, &[item], now).unwrap();
    h.drain();
    assert_eq!(h.state("data"), S::Memory);
    h.submit(&[("use", &["data"])], &["use"]).unwrap();
    h.worker("tcp://b", 1);
    let now = h.tick_time(0.1);
    h.s.remove_worker(a, false, now).unwrap();
    h.drain();
    assert_eq!(h.state("data"), S::Forgotten);
    assert_eq!(h.state("use"), S::Forgotten);
    assert!(h.ops("cancelled").contains(&"use".to_string()));
}

#[test]
fn killed_worker_after_allowed_failures() {
    let mut h = H::new();
    h.submit(&[("x", &[])], &["x"]).unwrap();
    for i in 0..4 {
        let w = h.worker(&format!("tcp://w{i}"), 1);
        assert_eq!(h.state("x"), S::Processing);
        let now = h.tick_time(1.0);
        h.s.remove_worker(w, false, now).unwrap();
        h.drain();
    }
    assert_eq!(h.state("x"), S::Erred);
    let e = h.s.task(h.t("x")).error().unwrap().clone();
    assert_eq!(e.kind, ErrorKind::KilledWorker);
    assert!(e.exception_text.contains("4 different workers"));
}

#[test]
fn expected_removal_is_not_suspicious() {
    let mut h = H::new();
    let w = h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    let now = h.tick_time(1.0);
    h.s.remove_worker(w, true, now).unwrap();
    assert_eq!(h.s.task(h.t("x")).suspicious, 0);
}

#[test]
fn a_death_with_known_executing_tasks_suspects_only_those() {
    let mut h = H::new();
    // Root-ish tasks queue two per thread here, so "a" and "b" both process on w.
    h.submit(&[("a", &[]), ("b", &[])], &["a", "b"]).unwrap();
    let w = h.worker("tcp://a", 1);
    h.drain();
    assert_eq!((h.state("a"), h.state("b")), (S::Processing, S::Processing));
    let now = h.tick_time(1.0);
    h.s.worker_died(w, &[h.t("a")], now).unwrap();
    assert_eq!(h.s.task(h.t("a")).suspicious, 1);
    assert_eq!(h.s.task(h.t("b")).suspicious, 0);
    // Innocent tasks survive any number of such deaths; the culprit errs at the fourth.
    for i in 0..3 {
        let w = h.worker(&format!("tcp://w{i}"), 1);
        h.drain();
        let now = h.tick_time(1.0);
        h.s.worker_died(w, &[h.t("a")], now).unwrap();
        h.drain();
    }
    assert_eq!(h.state("a"), S::Erred);
    assert_eq!(h.s.task(h.t("b")).suspicious, 0);
    assert_ne!(h.state("b"), S::Erred);
}

#[test]
fn fire_and_forget_keeps_tasks_until_done() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[]), ("y", &["x"])], &["y"]).unwrap();
    let now = h.tick_time(0.1);
    h.s.fire_and_forget(&[key("y")], now).unwrap();
    h.release(&["y"]);
    assert_eq!(h.state("y"), S::Waiting, "fire-and-forget still wants it");
    h.run_all();
    assert_eq!(h.s.n_tasks(), 0, "done fire-and-forget work is dropped");
}

#[test]
fn cancel_releases_dependents_first() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[]), ("y", &["x"])], &["x", "y"]).unwrap();
    let now = h.tick_time(0.1);
    h.s.cancel_keys(h.client, &[key("x")], false, now).unwrap();
    h.drain();
    assert_eq!(h.ops("cancelled"), vec!["y", "x"]);
    assert_eq!(h.s.n_tasks(), 0);
}

#[test]
fn long_running_frees_a_queue_slot() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    let tasks: Vec<String> = (0..6).map(|i| format!("r-{i}")).collect();
    let refs: Vec<(&str, &[&str])> = tasks.iter().map(|k| (k.as_str(), &[][..])).collect();
    let keys: Vec<&str> = tasks.iter().map(String::as_str).collect();
    h.submit(&refs, &keys).unwrap();
    // ceil(1.1 × 1) = 2 slots.
    assert_eq!(h.running.len(), 2);
    let (w, t, run) = h.running[0];
    let now = h.tick_time(0.1);
    assert_eq!(
        h.s.long_running(w, t, run, 0.05, now).unwrap(),
        Outcome::Applied
    );
    h.drain();
    assert_eq!(h.running.len(), 3, "a seceded task does not hold a slot");
    assert!(h.s.worker(w).long_running.contains(t));
    h.run_all();
    assert!(keys.iter().all(|k| h.state(k) == S::Memory));
}

#[test]
fn reschedule_moves_a_task_back_through_waiting() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    let (w, t, _) = h.running[0];
    let now = h.tick_time(0.1);
    h.s.reschedule(w, t, now).unwrap();
    h.drain();
    assert_eq!(h.state("x"), S::Processing);
    let story: Vec<(S, S)> =
        h.s.story(&key("x"))
            .iter()
            .map(|e| (e.start, e.finish))
            .collect();
    assert!(story.contains(&(S::Processing, S::Released)));
}

#[test]
fn add_keys_adds_replicas_or_asks_to_remove() {
    let (mut h, x, other) = x_in_memory_on_one_of_two();
    let now = h.tick_time(0.1);
    h.s.add_keys(other, &[x], now).unwrap();
    assert_eq!(h.s.task(x).who_has.len(), 2);
    h.submit(&[("y", &[])], &["y"]).unwrap();
    let y = h.t("y");
    h.s.add_keys(other, &[y], now).unwrap();
    h.drain();
    assert_eq!(h.ops("remove-replicas"), vec!["y"]);
}

#[test]
fn a_dropped_fetched_copy_is_needed_again_by_tasks_processing_there() {
    let (mut h, x, other) = x_in_memory_on_one_of_two();
    let now = h.tick_time(0.1);
    h.s.add_keys(other, &[x], now).unwrap();
    // A dependent lands on a worker holding x, then that copy goes before it ran.
    h.submit(&[("y", &["x"])], &["y"]).unwrap();
    let on = h.s.task(h.t("y")).processing_on().unwrap();
    let now = h.tick_time(0.1);
    h.s.release_worker_data(on, x, now).unwrap();
    h.s.validate().unwrap();
    assert_eq!(h.s.worker(on).needs_what.len(), 1);
    h.run_all();
    assert_eq!(h.state("y"), S::Memory);
}

#[test]
fn queued_to_erred_when_no_worker_returns_in_time() {
    let mut h = H::with(Config {
        no_workers_timeout: Some(5.0),
        ..cfg()
    });
    let w = h.worker("tcp://a", 1);
    let keys: Vec<String> = (0..6).map(|i| format!("r-{i}")).collect();
    let refs: Vec<(&str, &[&str])> = keys.iter().map(|k| (k.as_str(), &[][..])).collect();
    let wanted: Vec<&str> = keys.iter().map(String::as_str).collect();
    h.submit(&refs, &wanted).unwrap();
    assert_eq!(h.s.n_queued(), 4);
    let now = h.tick_time(0.1);
    h.s.remove_worker(w, false, now).unwrap();
    h.drain();
    let now = h.tick_time(1.0);
    h.s.tick(now); // the no-workers period starts being tracked
    let now = h.tick_time(10.0);
    h.s.tick(now);
    h.drain();
    assert!(
        wanted.iter().all(|k| h.state(k) == S::Erred),
        "{:?}",
        h.s.queued_tasks()
    );
    let e = h.s.task(h.t("r-5")).error().unwrap().clone();
    assert_eq!(e.kind, ErrorKind::NoWorker);
    assert_eq!(h.ops("task-erred").len(), 6);
}

#[test]
fn memory_to_erred_when_the_worker_holding_an_actor_dies() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    let opts = TaskOptions {
        actor: true,
        ..Default::default()
    };
    h.submit_with(&[("counter", &[])], &["counter"], opts, GraphOrder::Compute)
        .unwrap();
    let holder = h.worker_of("counter").unwrap();
    h.finish("counter");
    assert_eq!(h.state("counter"), S::Memory);
    let w = if holder == "tcp://a" {
        a
    } else {
        h.s.worker_by_address("tcp://b").unwrap()
    };
    let now = h.tick_time(1.0);
    h.s.remove_worker(w, false, now).unwrap();
    h.drain();
    assert_eq!(h.state("counter"), S::Erred);
    assert_eq!(
        h.s.task(h.t("counter")).error().unwrap().kind,
        ErrorKind::ActorLost
    );
    assert_eq!(h.ops("task-erred"), vec!["counter"]);
}

/// Two workers, and `x` in memory on one of them; returns the other.
fn x_in_memory_on_one_of_two() -> (H, TaskId, WorkerId) {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    h.finish("x");
    let x = h.t("x");
    let holder = h.s.task(x).who_has.first().unwrap();
    (h, x, if holder == a { b } else { a })
}

#[test]
fn transition_feed_reports_every_transition_with_its_key_once_switched_on() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("before", &[])], &["before"]).unwrap();
    assert!(!h.s.transition_feed());
    assert!(
        h.s.take_transitions(usize::MAX).is_empty(),
        "off by default"
    );
    h.s.set_transition_feed(true);
    h.submit(&[("x", &[]), ("y", &["x"])], &["y"]).unwrap();
    h.run_all();
    h.release(&["y"]);
    // Drain twice more: the forgotten tasks' slots are recycled, and a new task may
    // take one; the feed looked the keys up before.
    h.drain();
    h.drain();
    h.submit(&[("z", &[])], &["z"]).unwrap();
    h.s.validate().unwrap();
    // Taken in chunks: the first two, then the rest.
    let mut taken = h.s.take_transitions(2);
    assert_eq!(taken.len(), 2);
    taken.extend(h.s.take_transitions(usize::MAX));
    let fed: Vec<(String, &str, &str)> = taken
        .iter()
        .map(|e| {
            (
                e.key.python_str().into_owned(),
                e.start.name(),
                e.finish.name(),
            )
        })
        .collect();
    let of = |k: &str| -> Vec<(&str, &str)> {
        fed.iter()
            .filter(|e| e.0 == k)
            .map(|e| (e.1, e.2))
            .collect()
    };
    assert_eq!(
        of("x"),
        vec![
            ("released", "waiting"),
            ("waiting", "processing"),
            ("processing", "memory"),
            ("memory", "released"),
            ("released", "forgotten"),
        ]
    );
    assert_eq!(
        of("y"),
        vec![
            ("released", "waiting"),
            ("waiting", "processing"),
            ("processing", "memory"),
            ("memory", "forgotten"),
        ]
    );
    assert_eq!(
        of("z"),
        vec![("released", "waiting"), ("waiting", "processing")]
    );
    assert_eq!(of("before"), vec![("processing", "memory")], "fed once on");
    assert!(h.s.take_transitions(usize::MAX).is_empty(), "taken once");
    h.s.set_transition_feed(false);
    h.run_all();
    assert!(h.s.take_transitions(usize::MAX).is_empty(), "off again");
}
