//! `phases [map|tree] [n]`: per-phase timing of one lifecycle (ingest, run, release).
use squall_core::graph::Submission;
use squall_core::microbench as mb;
use squall_core::{Command, Config, DepRef, Finished, GraphOrder, Scheduler, WorkerSpec};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "map".into());
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let (tasks, order) = match shape.as_str() {
        "tree" => (mb::tree_tasks(n / 2), GraphOrder::Compute),
        _ => (mb::map_tasks("inc", n), GraphOrder::Sequential),
    };
    let count = tasks.len();
    let mut s = Scheduler::new(Config::default());
    let c = s.client_id("bench");
    for i in 0..16 {
        s.add_worker(
            WorkerSpec {
                address: format!("tcp://10.0.0.{i}:8000"),
                name: format!("w{i}"),
                host: format!("10.0.0.{i}"),
                nthreads: 1,
                ..Default::default()
            },
            0.0,
        )
        .unwrap();
    }
    s.take_commands();
    let sub = Submission {
        wanted: (0..count as u32).map(DepRef::Local).collect(),
        tasks,
        order,
        fifo_timeout: 0.1,
        ..Default::default()
    };
    let t0 = Instant::now();
    let ids = s.update_graph(c, sub, 0.0).unwrap().ids;
    let t1 = Instant::now();
    let mut now = 0.0;
    loop {
        let running: Vec<_> = s
            .take_commands()
            .into_iter()
            .filter_map(|c| match c {
                Command::ComputeTask {
                    worker,
                    task,
                    run_id,
                } => Some((worker, task, run_id)),
                _ => None,
            })
            .collect();
        if running.is_empty() {
            break;
        }
        now += 0.001;
        for (w, t, r) in running {
            s.task_finished(w, Finished::computed(t, r, 8, now - 0.001, now), now)
                .unwrap();
        }
    }
    let t2 = Instant::now();
    s.client_releases_tasks(c, &ids, now).unwrap();
    s.take_commands();
    let t3 = Instant::now();
    assert_eq!(s.n_tasks(), 0);
    let f = |a: Instant, b: Instant| (b - a).as_secs_f64();
    println!(
        "{shape} {count}: ingest {:.3} run {:.3} release {:.3} total {:.3} = {:.0}/s",
        f(t0, t1),
        f(t1, t2),
        f(t2, t3),
        f(t0, t3),
        count as f64 / f(t0, t3)
    );
}
