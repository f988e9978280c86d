//! The adaptive target and the choice of workers to close (docs/runtime.md#adaptive-scaling).

mod common;
use common::*;
use squall_core::*;

fn roots(h: &mut H, prefix: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let tasks: Vec<(&str, &[&str])> = keys.iter().map(|k| (k.as_str(), &[][..])).collect();
    let wanted: Vec<&str> = keys.iter().map(String::as_str).collect();
    h.submit_with(
        &tasks,
        &wanted,
        TaskOptions::default(),
        GraphOrder::Sequential,
    )
    .unwrap();
    keys
}

#[test]
fn unrunnable_work_asks_for_workers_by_its_estimated_duration() {
    let mut h = H::new();
    roots(&mut h, "x", 200);
    // 200 tasks × 0.5 s (unknown duration) / 5 s.
    assert_eq!(h.s.adaptive_target(5.0), 20);
    assert_eq!(h.s.adaptive_target(1000.0), 1, "some work needs one worker");
}

#[test]
fn queued_work_is_divided_by_threads_per_worker() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    roots(&mut h, "x", 200);
    assert_eq!(h.s.n_queued(), 195);
    // (5 processing + 195 queued) × 0.5 s / 5 s = 20 threads = 5 workers of 4.
    assert_eq!(h.s.adaptive_target(5.0), 5);
}

#[test]
fn a_few_long_tasks_ask_for_no_more_threads_than_tasks() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    roots(&mut h, "x", 3);
    assert_eq!(h.s.adaptive_target(0.001), 3);
}

#[test]
fn memory_pressure_doubles_the_workers() {
    let mut h = H::new();
    for a in ["tcp://a", "tcp://b"] {
        h.worker_spec(WorkerSpec {
            address: a.into(),
            name: a.into(),
            host: "h".into(),
            nthreads: 1,
            memory_limit: 100,
            ..Default::default()
        });
    }
    roots(&mut h, "x", 2);
    h.finish_sized("x-0", 70);
    assert_eq!(h.s.adaptive_target(5.0), 2, "70 of 200 bytes: no pressure");
    h.finish_sized("x-1", 70);
    assert_eq!(h.s.adaptive_target(5.0), 4);
    h.s.validate().unwrap();
}

#[test]
fn idle_workers_holding_least_data_close_first() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    let c = h.worker("tcp://c", 1);
    roots(&mut h, "x", 3);
    let on = |h: &H, k: &str| h.worker_of(k).unwrap();
    let (ka, kb) = {
        let d = h.dispatched();
        let find = |addr: &str| d.iter().find(|k| on(&h, k) == addr).unwrap().clone();
        (find("tcp://a"), find("tcp://b"))
    };
    h.finish_sized(&ka, 10);
    h.finish_sized(&kb, 1000);
    // c is busy, a holds less than b.
    assert_eq!(h.s.workers_to_close(Some(1), None, 0), vec![a]);
    assert_eq!(h.s.workers_to_close(None, Some(1), 0), vec![a, b]);
    assert_eq!(h.s.workers_to_close(Some(3), None, 2), vec![a]);
    assert_eq!(h.s.workers_to_close(Some(3), None, 0), vec![a, b, c]);
    // No count: only idle workers, and only if the memory left covers twice the data
    // (no limits here, and data is held).
    assert!(h.s.workers_to_close(None, None, 0).is_empty());
    // Idle work and nothing queued: the target is what remains after closing.
    h.run_all();
    h.release(&["x-0", "x-1", "x-2"]);
    assert_eq!(h.s.adaptive_target(5.0), 0);
    assert_eq!(h.s.workers_to_close(None, None, 0).len(), 3);
}

#[test]
fn held_only_by_lists_results_with_no_holder_outside() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    roots(&mut h, "x", 4);
    h.run_all();
    let on_a: Vec<TaskId> = (0..4)
        .map(|i| h.t(&format!("x-{i}")))
        .filter(|&t| h.s.task(t).who_has.contains(a))
        .collect();
    assert!(!on_a.is_empty());
    let mut only_a: Vec<TaskId> =
        h.s.held_only_by(&[a])
            .iter()
            .map(|&(t, w)| {
                assert_eq!(w, a);
                t
            })
            .collect();
    only_a.sort();
    assert_eq!(only_a, on_a);
    // A copy elsewhere: no longer only there.
    h.s.add_keys(b, &on_a[..1], h.now).unwrap();
    assert_eq!(h.s.held_only_by(&[a]).len(), on_a.len() - 1);
    assert_eq!(h.s.held_only_by(&[a, b]).len(), 4, "each once");
}
