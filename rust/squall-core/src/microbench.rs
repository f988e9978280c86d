//! Benchmark kernels shared by the criterion benches and `squall bench core`: each
//! builds its own input, times only the operation under test, and returns seconds.

use crate::graph::{GraphOrder, NewTask, Submission};
use crate::ids::{TaskId, WorkerId};
use crate::key::Key;
use crate::state::Scheduler;
use crate::stimuli::Scattered;
use crate::task::RunSpec;
use crate::worker::WorkerSpec;
use crate::{Config, DepRef};
use std::time::Instant;

fn worker(i: usize, nthreads: u32) -> WorkerSpec {
    WorkerSpec {
        address: format!("tcp://10.0.{}.{}:8000", i / 250, i % 250),
        name: format!("w{i}"),
        host: format!("10.0.{}.{}", i / 250, i % 250),
        nthreads,
        ..Default::default()
    }
}

fn spec() -> RunSpec {
    b"f"[..].into()
}

/// Independent tasks `prefix-i`, as `client.map` submits them.
pub fn map_tasks(prefix: &str, n: usize) -> Vec<NewTask> {
    let s = spec();
    (0..n)
        .map(|i| {
            NewTask::new(
                Key::str(&format!("{prefix}-{i}")),
                Vec::new(),
                Some(s.clone()),
            )
        })
        .collect()
}

/// A binary tree reduction over `n_leaves` leaves (≈ 2 × n_leaves tasks).
pub fn tree_tasks(n_leaves: usize) -> Vec<NewTask> {
    let s = spec();
    let mut tasks: Vec<NewTask> = (0..n_leaves)
        .map(|i| {
            NewTask::new(
                Key::tuple_str_ints("leaf", &[i as i64]),
                Vec::new(),
                Some(s.clone()),
            )
        })
        .collect();
    let mut level: Vec<u32> = (0..n_leaves as u32).collect();
    let mut depth = 0;
    while level.len() > 1 {
        depth += 1;
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        for (j, pair) in level.chunks(2).enumerate() {
            let deps = pair.iter().map(|&i| DepRef::Local(i)).collect();
            next.push(tasks.len() as u32);
            tasks.push(NewTask::new(
                Key::tuple_str_ints(&format!("sum-{depth}"), &[j as i64]),
                deps,
                Some(s.clone()),
            ));
        }
        level = next;
    }
    tasks
}

fn submission(tasks: Vec<NewTask>, order: GraphOrder) -> Submission {
    let n = tasks.len() as u32;
    Submission {
        tasks,
        wanted: (0..n).map(DepRef::Local).collect(),
        order,
        fifo_timeout: 0.1,
        ..Default::default()
    }
}

/// A scheduler holding `n` queued map tasks (for memory measurements).
pub fn ingested(n: usize) -> Scheduler {
    let mut s = Scheduler::new(Config::default());
    let c = s.client_id("bench");
    s.update_graph(
        c,
        submission(map_tasks("ingest", n), GraphOrder::Sequential),
        0.0,
    )
    .expect("valid graph");
    s.take_commands();
    s
}

/// Seconds to ingest `n` independent tasks with no workers (they queue).
pub fn ingest(n: usize) -> f64 {
    let mut s = Scheduler::new(Config::default());
    let c = s.client_id("bench");
    let sub = submission(map_tasks("ingest", n), GraphOrder::Sequential);
    let t0 = Instant::now();
    s.update_graph(c, sub, 0.0).expect("valid graph");
    t0.elapsed().as_secs_f64()
}

/// Seconds spent in each phase of a graph's life.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub ingest: f64,
    pub run: f64,
    pub release: f64,
}

impl Phases {
    pub fn total(&self) -> f64 {
        self.ingest + self.run + self.release
    }
}

/// Seconds for the whole life of a graph on `n_workers` simulated single-thread workers:
/// ingest, every task finished (reports in batches per round), all keys released.
pub fn lifecycle(tasks: Vec<NewTask>, n_workers: usize, order: GraphOrder) -> f64 {
    lifecycle_phases(tasks, n_workers, order).total()
}

/// [`lifecycle`], timed per phase.
pub fn lifecycle_phases(tasks: Vec<NewTask>, n_workers: usize, order: GraphOrder) -> Phases {
    let mut s = Scheduler::new(Config::default());
    let c = s.client_id("bench");
    for i in 0..n_workers {
        s.add_worker(worker(i, 1), 0.0).expect("new worker");
    }
    s.take_commands();
    let t0 = Instant::now();
    let ids = s
        .update_graph(c, submission(tasks, order), 0.0)
        .expect("valid graph")
        .ids;
    let t1 = Instant::now();
    let now = s.run_dispatched_to_memory(8, 0.0);
    let t2 = Instant::now();
    s.client_releases_tasks(c, &ids, now).expect("known client");
    s.take_commands();
    assert_eq!(s.n_tasks(), 0, "the core is empty again");
    let t3 = Instant::now();
    Phases {
        ingest: (t1 - t0).as_secs_f64(),
        run: (t2 - t1).as_secs_f64(),
        release: (t3 - t2).as_secs_f64(),
    }
}

/// Seconds to add and then remove `n` tasks in the stealing bins.
pub fn steal_bins(n: usize) -> f64 {
    let mut s = Scheduler::new(Config {
        worker_saturation: f64::INFINITY,
        ..Config::default()
    });
    let c = s.client_id("bench");
    s.add_worker(worker(0, 1), 0.0).expect("new worker");
    s.update_graph(
        c,
        submission(map_tasks("steal", n), GraphOrder::Sequential),
        0.0,
    )
    .expect("valid graph");
    let tasks: Vec<TaskId> = s.task_ids().collect();
    for &t in &tasks {
        s.stealing_remove_key(t);
    }
    let t0 = Instant::now();
    for &t in &tasks {
        s.put_key_in_stealable(t);
    }
    for &t in &tasks {
        s.stealing_remove_key(t);
    }
    t0.elapsed().as_secs_f64()
}

/// Seconds per worker decision among `n_workers` workers, for `n` tasks that each need
/// data held on two different workers (the candidate/objective path).
pub fn worker_choice(n_workers: usize, n: usize) -> f64 {
    let mut s = Scheduler::new(Config::default());
    let c = s.client_id("bench");
    let ws: Vec<WorkerId> = (0..n_workers)
        .map(|i| s.add_worker(worker(i, 2), 0.0).expect("new worker"))
        .collect();
    let data: Vec<Scattered> = (0..n_workers)
        .map(|i| Scattered {
            key: Key::str(&format!("data-{i}")),
            nbytes: 1000,
            holders: vec![s.worker(ws[i]).address.clone()],
        })
        .collect();
    s.scatter(c, &data, 0.0).expect("scatter");
    let sp = spec();
    let tasks: Vec<NewTask> = (0..n)
        .map(|i| {
            let deps = vec![
                DepRef::Key(data[i % n_workers].key.clone()),
                DepRef::Key(data[(i * 7 + 1) % n_workers].key.clone()),
            ];
            NewTask::new(Key::str(&format!("use-{i}")), deps, Some(sp.clone()))
        })
        .collect();
    let ids = s
        .update_graph(c, submission(tasks, GraphOrder::Zero), 0.0)
        .expect("valid graph")
        .ids;
    let t0 = Instant::now();
    for &t in &ids {
        std::hint::black_box(s.decide_worker_non_rootish(t));
    }
    t0.elapsed().as_secs_f64() / n as f64
}

/// Seconds to order an `n`-node graph in Rust: `"tree"` (binary reduction) or `"map"`
/// (independent tasks).
pub fn order(shape: &str, n: usize) -> f64 {
    let tasks = match shape {
        "tree" => tree_tasks(n.div_ceil(2)),
        _ => map_tasks("order", n),
    };
    let nodes: Vec<squall_order::Node> = tasks
        .iter()
        .map(|t| squall_order::Node {
            deps: t
                .deps
                .iter()
                .filter_map(|d| {
                    if let DepRef::Local(i) = d {
                        Some(*i)
                    } else {
                        None
                    }
                })
                .collect(),
            is_task: true,
            name: t.key().python_str().into_owned(),
        })
        .collect();
    let t0 = Instant::now();
    std::hint::black_box(squall_order::order(&nodes).expect("acyclic"));
    t0.elapsed().as_secs_f64()
}
