//! Worker deaths and arrivals, determinism, and random graphs.

mod common;
use common::*;
use squall_core::{Config, DepRef, Restrictions, TaskOptions};
use squall_sim::rng::SplitMix64;
use squall_sim::{
    graphs, Cost, RunOutcome, SimOptions, SimReport, SimSubmission, SimWorker, Simulation,
};

const MB: u64 = 1_000_000;

fn wide() -> SimSubmission {
    SimSubmission::compute(
        graphs::wide_then_reduce(
            "w",
            48,
            Cost::new(1.0, 10 * MB),
            Cost::new(0.5, 10 * MB),
            Cost::new(0.5, 10 * MB),
        ),
        0.0,
    )
}

/// Keys that ran on `worker`, and (transitively) their dependencies: what a death
/// there may force to run again.
fn exposed_to(sub: &SimSubmission, r: &SimReport, worker: usize) -> Vec<String> {
    let tasks = &sub.graph.tasks;
    let names: Vec<String> = tasks
        .iter()
        .map(|t| t.key.python_str().into_owned())
        .collect();
    let mut stack: Vec<usize> = (0..tasks.len())
        .filter(|&i| r.runs_of(&names[i]).any(|e| e.worker == worker))
        .collect();
    let mut seen = vec![false; tasks.len()];
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        stack.extend(tasks[i].deps.iter().map(|d| match d {
            DepRef::Local(j) => *j as usize,
            DepRef::Key(_) => unreachable!("one submission"),
        }));
    }
    (0..tasks.len())
        .filter(|&i| seen[i])
        .map(|i| names[i].clone())
        .collect()
}

#[test]
fn worker_death_mid_graph_recomputes_only_what_it_lost() {
    let healthy = run(cfg(), SimWorker::many(3, 2), vec![wide()]);
    assert_eq!(healthy.n_reexecuted, 0);

    let mut workers = SimWorker::many(3, 2);
    workers[1] = workers[1].clone().dying_at(6.0);
    let r = run(cfg(), workers, vec![wide()]);
    assert!(r.n_reexecuted > 0, "{r}");
    assert!(r.makespan > healthy.makespan);
    assert!(r.timeline.iter().any(|e| e.outcome == RunOutcome::Lost));
    assert!(r
        .timeline
        .iter()
        .filter(|e| e.worker == 1)
        .all(|e| e.start < 6.0));
    let exposed = exposed_to(&wide(), &r, 1);
    let mut rerun: Vec<&str> = Vec::new();
    for e in &r.timeline {
        if r.runs_of(&e.key).count() > 1 && !rerun.contains(&e.key.as_str()) {
            rerun.push(&e.key);
        }
    }
    assert_eq!(rerun.len(), r.n_reexecuted);
    for key in rerun {
        assert!(
            exposed.iter().any(|x| x == key),
            "{key} re-ran without cause"
        );
    }
}

#[test]
fn late_worker_takes_work_and_early_death_is_survived() {
    let workers = vec![
        SimWorker::new("early", 2),
        SimWorker::new("late", 2).arriving_at(5.0),
        SimWorker::new("doomed", 2).dying_at(0.5),
    ];
    let r = run(cfg(), workers, vec![wide()]);
    let late: Vec<_> = r.timeline.iter().filter(|e| e.worker == 1).collect();
    assert!(!late.is_empty(), "{r}");
    assert!(late.iter().all(|e| e.start >= 5.0));
    assert!(r
        .timeline
        .iter()
        .filter(|e| e.worker == 2)
        .all(|e| e.outcome == RunOutcome::Lost));
}

/// A cluster that loses a worker, with message latency and stealing: a stress scenario.
fn eventful(seed: u64) -> (Simulation, SimOptions) {
    let graph = graphs::random_dag(
        "r",
        &graphs::RandomDag {
            n: 300,
            seed,
            ..graphs::RandomDag::default()
        },
    );
    let mut workers = SimWorker::many(4, 2);
    workers[2] = workers[2].clone().dying_at(8.0);
    workers.push(SimWorker::new("late", 3).arriving_at(4.0));
    let mut sim = Simulation::new(cfg(), workers);
    sim.submit(SimSubmission::compute(graph, 0.0)).unwrap();
    let options = SimOptions {
        message_latency: 0.002,
        ..SimOptions::default()
    };
    (sim, options)
}

#[test]
fn identical_inputs_give_identical_reports() {
    let reports: Vec<SimReport> = (0..2)
        .map(|_| {
            let (sim, options) = eventful(7);
            let mut sim = sim.with_options(options);
            let r = sim.run();
            sim.scheduler().validate().unwrap();
            r
        })
        .collect();
    assert!(reports[0].completed, "{}", reports[0]);
    assert!(!reports[0].timeline.is_empty());
    assert_eq!(reports[0], reports[1]);
}

#[test]
fn random_graphs_complete_under_failures() {
    for seed in 0..4 {
        let (sim, options) = eventful(seed);
        let mut sim = sim.with_options(options);
        let r = sim.run();
        sim.scheduler().validate().unwrap();
        assert!(r.completed && r.failed.is_empty(), "seed {seed}: {r}");
        // Every task ran to completion at least once.
        assert_eq!(r.completion.len(), 300, "seed {seed}");
    }
}

/// Random clusters (deaths, late arrivals, latencies, bandwidths, queuing and stealing
/// settings) running random graphs with priorities and restrictions always finish.
#[test]
fn randomized_clusters_always_finish() {
    for seed in 0..16 {
        let mut rng = SplitMix64::new(seed);
        let mut workers: Vec<SimWorker> = (0..rng.range_u64(1, 5))
            .map(|i| SimWorker::new(&format!("w{i}"), rng.range_u64(1, 4) as u32))
            .collect();
        for w in &mut workers {
            if rng.next_f64() < 0.3 {
                w.die = Some(rng.range_f64(0.0, 20.0));
            }
            if rng.next_f64() < 0.2 {
                w.arrive = rng.range_f64(0.0, 10.0);
            }
        }
        let survivor = SimWorker::new("survivor", 2).with_resource("R", 2.0);
        workers.push(survivor.arriving_at(rng.range_f64(0.0, 5.0)));
        let config = Config {
            worker_saturation: [1.0, 1.1, 2.0, f64::INFINITY][rng.below(4) as usize],
            work_stealing: rng.next_f64() < 0.8,
            work_stealing_interval: [0.1, 1.0][rng.below(2) as usize],
            ..cfg()
        };
        let options = SimOptions {
            message_latency: [0.0, 0.001, 0.05][rng.below(3) as usize],
            bandwidth: [1e7, 1e8, 1e9][rng.below(3) as usize],
            ..SimOptions::default()
        };
        let mut sim = Simulation::new(config, workers).with_options(options);
        for s in 0..rng.range_u64(1, 3) {
            let params = graphs::RandomDag {
                n: rng.range_u64(10, 100) as usize,
                max_deps: rng.range_u64(1, 5) as usize,
                window: rng.range_u64(2, 50) as usize,
                duration: (0.01, 2.0),
                nbytes: (10, 50 * MB),
                seed: rng.next_u64(),
            };
            let mut g = graphs::random_dag(&format!("s{s}"), &params);
            for t in &mut g.tasks {
                let x = rng.next_f64();
                let restrictions = if x < 0.05 {
                    Restrictions {
                        workers: vec!["survivor".into()],
                        loose: rng.next_f64() < 0.5,
                        ..Restrictions::default()
                    }
                } else if x < 0.1 {
                    Restrictions {
                        resources: vec![("R".into(), 1.0)],
                        ..Restrictions::default()
                    }
                } else {
                    continue;
                };
                t.options = Some(TaskOptions {
                    restrictions: Some(restrictions),
                    ..TaskOptions::default()
                });
            }
            let mut sub = SimSubmission::compute(g, rng.range_f64(0.0, 10.0));
            if rng.next_f64() < 0.3 {
                sub = sub.with_priority(rng.range_u64(0, 10) as i64 - 5);
            }
            sim.submit(sub).unwrap();
        }
        let r = sim.run();
        sim.scheduler().validate().unwrap();
        assert!(r.completed && r.failed.is_empty(), "seed {seed}: {r}");
    }
}

#[test]
fn unsatisfiable_restrictions_stop_instead_of_spinning() {
    let mut g = graphs::map("gpu", 3, Cost::new(1.0, 10));
    for t in &mut g.tasks {
        t.options = Some(TaskOptions {
            restrictions: Some(Restrictions {
                resources: vec![("GPU".into(), 1.0)],
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let mut sim = Simulation::new(cfg(), SimWorker::many(1, 1));
    sim.submit(SimSubmission::compute(g, 0.0)).unwrap();
    let r = sim.run();
    assert!(!r.completed);
    assert!(r.timeline.is_empty());
}

#[test]
fn tasks_without_a_reachable_holder_are_given_back_and_rescheduled() {
    // Slow messages and no missing-data grace: workers give tasks back (reschedule)
    // before the scheduler's own correction (free-keys) reaches them.
    let mut given_back = 0;
    for seed in 0..4 {
        let (sim, options) = eventful(seed);
        let options = SimOptions {
            message_latency: 0.05,
            missing_data_retry: 0.0,
            ..options
        };
        let mut sim = sim.with_options(options);
        let r = sim.run();
        sim.scheduler().validate().unwrap();
        assert!(r.completed && r.failed.is_empty(), "seed {seed}: {r}");
        given_back += r.n_given_back;
    }
    assert!(given_back > 0, "the scenario exercises the give-back path");
}
