//! Runs two dask.array-like graphs on a small cluster (one worker dies mid-way), with
//! and without scheduler-side queuing, and prints each report.
//!
//! `cargo run -p squall-sim --example sim_demo`

use squall_core::Config;
use squall_sim::{graphs, Cost, SimOptions, SimSubmission, SimWorker, Simulation};

const MB: u64 = 1_000_000;

fn main() {
    let block = Cost::new(0.05, 50 * MB);
    let scenarios = [
        (
            "(a + b).sum(), 2 × 128 blocks",
            graphs::zip_then_reduce("x", 128, block, Cost::new(0.05, 1_000), Cost::new(0.01, 8)),
        ),
        (
            "(x + x.T).sum(), 12 × 12 blocks",
            graphs::x_plus_xt_sum("x", 12, block, 0.02),
        ),
    ];
    for (title, graph) in scenarios {
        for saturation in [1.1, f64::INFINITY] {
            let config = Config {
                worker_saturation: saturation,
                ..Config::default()
            };
            let mut workers = SimWorker::many(4, 2);
            workers[3] = workers[3].clone().dying_at(1.0);
            let options = SimOptions {
                message_latency: 0.001,
                ..SimOptions::default()
            };
            let mut sim = Simulation::new(config, workers).with_options(options);
            sim.submit(SimSubmission::compute(graph.clone(), 0.0))
                .expect("a valid submission");
            let report = sim.run();
            println!("{title}, worker-saturation {saturation}, w3 dies at 1 s:\n{report}");
        }
    }
}
