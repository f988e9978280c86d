//! Focused regression tests for core bugs found by the property tests
//! (tests/properties.rs). The invariant checker runs after every stimulus.

mod common;
use common::*;
use squall_core::TaskState as S;
use squall_core::*;

/// Finishes the oldest dispatched task.
fn finish_next(h: &mut H) -> String {
    let k = h.dispatched()[0].clone();
    h.finish(&k);
    k
}

/// A worker dies holding a task and its dependency while their dependents are
/// processing: the dependents re-enter waiting (counting the lost dependency) before
/// the dependency's own memory→released adds itself to their `waiting_on` again.
/// Dask's `waiting_on` is a set; the counter must not count it twice.
#[test]
fn losing_a_worker_does_not_double_count_a_lost_dependency() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.submit(
        &[
            ("load-0", &[]),
            ("inc-0", &["load-0"]),
            ("add-1", &["inc-0"]),
            ("add-2", &["load-0", "inc-0"]),
            ("inc-3", &["load-0"]),
            ("inc-4", &["load-0"]),
        ],
        &["add-1", "add-2", "inc-3", "inc-4"],
    )
    .unwrap();
    for _ in 0..3 {
        finish_next(&mut h);
    }
    assert_eq!(h.state("inc-0"), S::Memory);
    assert_eq!(h.state("add-2"), S::Processing);
    let now = h.tick_time(1.0);
    h.s.remove_worker(a, false, now).unwrap(); // panicked: waiting_on 2 but 1 lack data
    h.drain();
    let inc0 = h.t("inc-0");
    assert_eq!(h.s.task(inc0).waiting_on, 1);
    assert_eq!(h.s.task(h.t("add-2")).waiting_on, 2);
    h.worker("tcp://b", 1);
    h.run_all();
    for k in ["add-1", "add-2", "inc-3", "inc-4"] {
        assert_eq!(h.state(k), S::Memory, "{k}");
    }
}

/// `f` fails; its waiters `w` and `v` are recommended erred, but `v` erring first
/// releases `w` (its last waiter left), superseding `w`'s erred recommendation and
/// leaving a blame on a task that is not erred. After `f` is retried, resubmitting
/// the graph must not err `v` because of that stale blame.
#[test]
fn a_superseded_erred_recommendation_leaves_no_stale_blame() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    let graph: &[(&str, &[&str])] = &[("f", &[]), ("w", &["f"]), ("v", &["f", "w"])];
    h.submit(graph, &["v"]).unwrap();
    h.fail("f");
    assert_eq!(h.state("v"), S::Erred);
    assert_ne!(h.state("w"), S::Processing);
    h.retry("v");
    assert_eq!(h.state("f"), S::Processing);
    for t in h.s.task_ids().collect::<Vec<_>>() {
        let ts = h.s.task(t);
        assert!(
            ts.state == S::Erred || ts.exception_blame().is_none(),
            "{:?} is {} but blamed",
            ts.key(),
            ts.state.name()
        );
    }
    h.clear_log();
    h.submit(graph, &["v"]).unwrap();
    assert_ne!(
        h.state("v"),
        S::Erred,
        "v erred because of a retried failure"
    );
    assert!(h.ops("task-erred").is_empty());
    h.run_all();
    assert_eq!(h.state("v"), S::Memory);
}

/// A wanted result is lost while one of its dependencies is erred (it failed after a
/// retry). Dask leaves the key released forever; it now errs with that failure.
#[test]
fn a_wanted_result_lost_while_a_dependency_is_erred_errs() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(
        &[("x", &[]), ("y", &["x"]), ("z", &["y"]), ("w", &["y"])],
        &["z", "w"],
    )
    .unwrap();
    h.finish("x");
    h.finish("y");
    h.fail("w");
    h.finish("z");
    assert_eq!(h.state("y"), S::Released);
    h.retry("w");
    h.fail("x");
    assert_eq!(h.state("y"), S::Erred);
    assert_eq!(h.state("z"), S::Memory);
    h.clear_log();
    let z = h.t("z");
    let holder = h.s.task(z).who_has.first().unwrap();
    let now = h.tick_time(0.1);
    h.s.release_worker_data(holder, z, now).unwrap();
    h.drain();
    assert_eq!(h.state("z"), S::Erred, "was stranded in released");
    assert_eq!(h.s.task(z).exception_blame(), Some(h.t("x")));
    assert_eq!(h.ops("lost-data"), vec!["z"]);
    assert_eq!(h.ops("task-erred"), vec!["z"]);
    // Retrying z now walks down to x and recomputes everything.
    h.retry("z");
    h.run_all();
    assert_eq!(h.state("z"), S::Memory);
}

/// `d` needs two roots that failed independently. Retrying one of them makes `d`
/// wait on the other, still erred, root: Dask parks it there (and would silently
/// retry that root as soon as `d` left waiting). It now errs with that root's failure,
/// the root stays erred, and retrying it later recovers `d`.
#[test]
fn a_retried_task_still_needing_an_erred_dependency_errs() {
    let mut h = two_failed_roots();
    assert_eq!(h.s.task(h.t("d")).exception_blame(), Some(h.t("a")));
    h.clear_log();
    h.retry("a");
    // a's failure is cleared; nothing needs a while d cannot run, so it is released.
    assert_eq!(h.state("a"), S::Released);
    assert_eq!(
        h.state("b"),
        S::Erred,
        "b must not be retried behind the client's back"
    );
    assert_eq!(h.state("d"), S::Erred, "was parked in waiting");
    assert_eq!(h.s.task(h.t("d")).exception_blame(), Some(h.t("b")));
    assert_eq!(h.ops("task-erred"), vec!["d"]);
    h.retry("b");
    h.run_all();
    assert_eq!(h.state("d"), S::Memory);
}

/// Retrying several failed roots at once must not err their common dependent in
/// between (it only waits on roots that are retried in the same stimulus).
#[test]
fn retrying_all_failed_roots_at_once_does_not_err_their_dependent() {
    let mut h = two_failed_roots();
    h.clear_log();
    h.retry("d");
    assert!(h.ops("task-erred").is_empty(), "{:?}", h.log);
    assert_eq!(h.state("d"), S::Waiting);
    h.run_all();
    assert_eq!(h.state("d"), S::Memory);
}

/// A loosely restricted task goes no-worker while no worker runs. When a worker that
/// does not match its (mere) preference starts running, it must be scheduled there:
/// Dask only retries tasks the new worker satisfies, stranding it.
#[test]
fn a_loosely_restricted_no_worker_task_runs_on_any_worker_that_resumes() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let now = h.tick_time(0.1);
    h.s.worker_status_change(a, WorkerStatus::Paused, now)
        .unwrap();
    let opts = TaskOptions {
        restrictions: Some(Restrictions {
            workers: vec!["tcp://b".into()],
            loose: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    h.submit_with(&[("x", &[])], &["x"], opts, GraphOrder::Compute)
        .unwrap();
    assert_eq!(h.state("x"), S::NoWorker);
    let now = h.tick_time(0.1);
    h.s.worker_status_change(a, WorkerStatus::Running, now)
        .unwrap();
    h.drain();
    assert_eq!(h.state("x"), S::Processing, "stranded in no-worker");
    assert_eq!(h.worker_of("x").unwrap(), "tcp://a");
    h.run_all();
    assert_eq!(h.state("x"), S::Memory);
}

/// `d` needs the roots `a` and `b` (both wanted), and both failed.
fn two_failed_roots() -> H {
    let mut h = H::new();
    h.worker("tcp://a", 2);
    h.submit(&[("a", &[]), ("b", &[]), ("d", &["a", "b"])], &["b", "d"])
        .unwrap();
    h.fail("a");
    h.fail("b");
    h
}
