//! Shared helpers: every run validates the scheduler after each stimulus and at the end.
#![allow(dead_code)]

use squall_core::{Config, Key};
use squall_sim::{SimOptions, SimReport, SimSubmission, SimWorker, Simulation};

pub fn cfg() -> Config {
    Config {
        validate: true,
        ..Config::default()
    }
}

pub fn no_queuing() -> Config {
    Config {
        worker_saturation: f64::INFINITY,
        ..cfg()
    }
}

pub fn run(config: Config, workers: Vec<SimWorker>, subs: Vec<SimSubmission>) -> SimReport {
    run_with(config, workers, subs, SimOptions::default())
}

pub fn run_with(
    config: Config,
    workers: Vec<SimWorker>,
    subs: Vec<SimSubmission>,
    options: SimOptions,
) -> SimReport {
    let mut sim = Simulation::new(config, workers).with_options(options);
    for s in subs {
        sim.submit(s).unwrap();
    }
    let report = sim.run();
    sim.scheduler().validate().unwrap();
    assert!(report.completed, "incomplete run:\n{report}");
    assert!(
        report.failed.is_empty() && report.rejected.is_empty(),
        "{report}"
    );
    report
}

/// Python's `str` of the key `(name, i…)`, as the report spells keys.
pub fn k(name: &str, idx: &[i64]) -> String {
    Key::tuple_str_ints(name, idx).python_str().into_owned()
}

/// The worker of the (single) run of `key`.
pub fn worker_of(r: &SimReport, key: &str) -> usize {
    let runs: Vec<_> = r.runs_of(key).collect();
    assert_eq!(runs.len(), 1, "{key} ran {} times", runs.len());
    runs[0].worker
}

pub fn first_start(r: &SimReport, prefix: &str) -> f64 {
    starts(r, prefix).into_iter().fold(f64::INFINITY, f64::min)
}

pub fn last_start(r: &SimReport, prefix: &str) -> f64 {
    starts(r, prefix)
        .into_iter()
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Start times of the runs whose key begins with `('<prefix>',`.
pub fn starts(r: &SimReport, prefix: &str) -> Vec<f64> {
    let head = format!("('{prefix}',");
    r.timeline
        .iter()
        .filter(|e| e.key.starts_with(&head))
        .map(|e| e.start)
        .collect()
}
