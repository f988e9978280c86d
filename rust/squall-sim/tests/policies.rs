//! The seed documents' scenarios, run end to end: co-assignment and queuing (000),
//! work stealing (001/003), FIFO and user priorities (004), restrictions.

mod common;
use common::*;
use squall_core::{Config, Key, Restrictions, TaskOptions};
use squall_sim::{graphs, Cost, RunOutcome, SimGraph, SimSubmission, SimWorker};

const MB: u64 = 1_000_000;

/// Seed 000, co-assignment: with queuing off, consecutive sibling roots go to one worker
/// in batches, so the pairs they feed need no transfer; queuing scatters them.
#[test]
fn co_assignment_keeps_sibling_roots_together() {
    let n = 64;
    let graph = || {
        graphs::wide_then_reduce(
            "root",
            n,
            Cost::new(1.0, 10 * MB),
            Cost::new(0.5, 10 * MB),
            Cost::new(0.5, 10 * MB),
        )
    };
    let siblings_together = |r: &squall_sim::SimReport| {
        (0..n as i64 / 2)
            .filter(|j| {
                worker_of(r, &k("root", &[2 * j])) == worker_of(r, &k("root", &[2 * j + 1]))
            })
            .count()
    };
    let co = run(
        no_queuing(),
        SimWorker::many(4, 2),
        vec![SimSubmission::compute(graph(), 0.0)],
    );
    assert_eq!(siblings_together(&co), n / 2, "{co}");
    // Batches of 64 / 8 threads × 2 = 16 roots: only the top of the tree crosses workers.
    assert!(co.n_transfers <= 3, "{co}");

    let queued = run(
        cfg(),
        SimWorker::many(4, 2),
        vec![SimSubmission::compute(graph(), 0.0)],
    );
    assert!(siblings_together(&queued) < n / 4, "{queued}");
    assert!(queued.n_transfers > 10 * co.n_transfers.max(1), "{queued}");
}

/// Seed 000, queuing: on `(a + b).sum()` co-assignment puts a(i) and b(i) on different
/// workers; without queuing, workers run root after root while the adds wait for
/// transfers. With worker-saturation 1.1 a root is released only when a slot opens.
#[test]
fn queuing_keeps_memory_low_on_a_wide_graph() {
    let graph = || {
        graphs::zip_then_reduce(
            "x",
            128,
            Cost::new(0.05, 50 * MB),
            Cost::new(0.05, 1_000),
            Cost::new(0.01, 1_000),
        )
    };
    let sub = || vec![SimSubmission::compute(graph(), 0.0)];
    let queued = run(cfg(), SimWorker::many(4, 2), sub());
    let unqueued = run(no_queuing(), SimWorker::many(4, 2), sub());
    assert!(
        queued.peak_memory() * 4 < unqueued.peak_memory(),
        "peak with queuing {} vs without {}",
        queued.peak_memory(),
        unqueued.peak_memory()
    );
    assert!(queued.makespan < unqueued.makespan);
}

/// Tasks `(name, i)` that each need one `data` task's result; few enough not to be
/// root-ish, so they all go where the data is.
fn pile_on_data(data_bytes: u64, n: usize, seconds: f64) -> SimSubmission {
    let mut g = SimGraph::new();
    let d = g.add(Key::str("data"), &[], 0.01, data_bytes);
    for i in 0..n {
        g.add(
            Key::tuple_str_ints("work", &[i as i64]),
            &[d],
            seconds,
            1_000,
        );
    }
    SimSubmission::compute(g, 0.0)
}

fn stealing(on: bool) -> Config {
    Config {
        work_stealing: on,
        ..cfg()
    }
}

/// Seeds 001/003, good example: 100 s tasks needing a tiny input are worth moving.
#[test]
fn long_task_with_tiny_dependency_is_stolen() {
    let off = run(
        stealing(false),
        SimWorker::many(2, 1),
        vec![pile_on_data(100, 4, 100.0)],
    );
    let on = run(
        stealing(true),
        SimWorker::many(2, 1),
        vec![pile_on_data(100, 4, 100.0)],
    );
    assert_eq!(off.workers[1].tasks_executed, 0, "{off}");
    assert!(off.makespan >= 400.0);
    assert!(on.n_steals >= 1, "{on}");
    assert!(on.workers[1].tasks_executed >= 1, "{on}");
    assert!(
        on.makespan < 0.6 * off.makespan,
        "{} vs {}",
        on.makespan,
        off.makespan
    );
    assert_eq!(
        on.n_reexecuted, 0,
        "transactional stealing never duplicates work"
    );
}

/// Seeds 001/003, bad example: a fast task needing a huge input stays put.
#[test]
fn fast_task_with_huge_dependency_is_not_stolen() {
    let sub = || vec![pile_on_data(2_000 * MB, 4, 2.0)];
    let off = run(stealing(false), SimWorker::many(2, 1), sub());
    let on = run(stealing(true), SimWorker::many(2, 1), sub());
    assert_eq!((on.n_steals, on.n_transfers), (0, 0), "{on}");
    assert_eq!(on.workers[1].tasks_executed, 0);
    assert_eq!(on.makespan, off.makespan);
}

/// Seed 004: on a busy cluster, a computation submitted later (after its FIFO window)
/// starts only once the earlier one has started everything.
#[test]
fn earlier_submissions_run_first() {
    let subs = |fifo_timeout: f64| {
        let first = SimSubmission::map(graphs::map("first", 20, Cost::new(1.0, 1_000)), 0.0);
        let mut second = SimSubmission::map(graphs::map("second", 20, Cost::new(1.0, 1_000)), 2.5);
        second.fifo_timeout = fifo_timeout;
        vec![first, second]
    };
    let r = run(cfg(), SimWorker::many(2, 1), subs(0.1));
    assert!(
        last_start(&r, "first") < first_start(&r, "second"),
        "FIFO: {} vs {}",
        last_start(&r, "first"),
        first_start(&r, "second")
    );
    // Within one FIFO window the two share a generation and interleave by graph order.
    let same_generation = run(cfg(), SimWorker::many(2, 1), subs(60.0));
    assert!(first_start(&same_generation, "second") < last_start(&same_generation, "first"));
}

/// Seed 004: a later, high-priority computation overtakes the queued earlier one.
#[test]
fn user_priority_overtakes_earlier_work() {
    let low = SimSubmission::map(graphs::map("low", 20, Cost::new(1.0, 1_000)), 0.0);
    let high =
        SimSubmission::map(graphs::map("high", 10, Cost::new(1.0, 1_000)), 2.5).with_priority(10);
    let r = run(cfg(), SimWorker::many(2, 1), vec![low, high]);
    let (first, last) = (first_start(&r, "high"), last_start(&r, "high"));
    // Only tasks already handed to workers before the submission can run in between.
    assert!(
        first <= 4.0,
        "high starts after at most one more low task: {first}"
    );
    assert!(
        starts(&r, "low").iter().all(|&t| t < first || t > last),
        "no low-priority task starts while high-priority ones remain"
    );
    assert!(last < last_start(&r, "low"));
}

fn restricted(mut g: SimGraph, r: Restrictions) -> SimGraph {
    for t in &mut g.tasks {
        t.options = Some(TaskOptions {
            restrictions: Some(r.clone()),
            ..TaskOptions::default()
        });
    }
    g
}

/// Worker and resource restrictions are hard: such tasks run only where allowed, and a
/// worker runs only as many as its resources allow at once.
#[test]
fn restricted_tasks_run_only_where_allowed() {
    let workers = vec![
        SimWorker::new("cpu0", 2),
        SimWorker::new("cpu1", 2),
        SimWorker::new("gpu", 2).with_resource("GPU", 1.0),
    ];
    let gpu = restricted(
        graphs::map("train", 6, Cost::new(1.0, 1_000)),
        Restrictions {
            resources: vec![("GPU".into(), 1.0)],
            ..Restrictions::default()
        },
    );
    let pinned = restricted(
        graphs::map("pinned", 8, Cost::new(0.5, 1_000)),
        Restrictions {
            workers: vec!["cpu1".into()],
            ..Restrictions::default()
        },
    );
    let free = graphs::map("free", 12, Cost::new(0.5, 1_000));
    let subs = [gpu, pinned, free]
        .into_iter()
        .map(|g| SimSubmission::compute(g, 0.0))
        .collect();
    let r = run(cfg(), workers, subs);
    let on = |prefix: &str| -> Vec<usize> {
        let head = format!("('{prefix}',");
        r.timeline
            .iter()
            .filter(|e| e.key.starts_with(&head) && e.outcome == RunOutcome::Finished)
            .map(|e| e.worker)
            .collect()
    };
    assert_eq!(on("train"), vec![2; 6], "{r}");
    assert_eq!(on("pinned"), vec![1; 8], "{r}");
    // One GPU: the six 1 s training runs never overlap.
    let mut train: Vec<(f64, f64)> = r
        .timeline
        .iter()
        .filter(|e| e.key.starts_with("('train',"))
        .map(|e| (e.start, e.end))
        .collect();
    train.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(train.windows(2).all(|w| w[0].1 <= w[1].0), "{train:?}");
    assert!(
        on("free").iter().any(|&w| w != 2),
        "unrestricted work spreads"
    );
}
