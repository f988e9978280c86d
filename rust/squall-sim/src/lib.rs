//! squall-sim: a deterministic discrete-event simulator of a Dask-like cluster whose
//! scheduler is squall-core.
//!
//! ```
//! use squall_core::Config;
//! use squall_sim::{graphs, Cost, SimSubmission, SimWorker, Simulation};
//!
//! let graph = graphs::tree_reduction("x", 16, Cost::new(1.0, 1_000_000), Cost::new(0.1, 1_000));
//! let mut sim = Simulation::new(Config::default(), SimWorker::many(2, 2));
//! sim.submit(SimSubmission::compute(graph, 0.0)).unwrap();
//! let report = sim.run();
//! assert!(report.completed);
//! ```
//!
//! # Model
//!
//! A virtual clock and one event queue ordered by (time, insertion sequence); all
//! state lives in index-ordered collections, so the same inputs give the same report.
//! The scheduler is the real [`squall_core::Scheduler`], driven through its public
//! stimuli; its commands become messages to simulated workers, which play the worker
//! side of Dask (docs/scheduling.md#the-worker-side):
//!
//! * compute-task: dependencies not held locally are fetched from a holder listed in the
//!   message (who_has at dispatch time; the choice among live holders is a fixed
//!   function of the worker and key indices); then the task enters a ready heap ordered
//!   by (scheduler priority, a per-worker counter decreasing per compute-task), so equal
//!   priorities run LIFO; at most `nthreads` run at once; tasks needing resources run
//!   only when the worker's free amounts suffice (Dask's "constrained").
//! * A finished task's result is stored (its bytes count against the worker's memory)
//!   and reported with task-finished and a compute startstop; a fetched dependency is
//!   kept while a local task needs it, announced with add-replicas on arrival and with
//!   drop-replicas when dropped.
//! * free-keys drops data and cancels a task; a running one finishes but its result is
//!   discarded (a new compute-task meanwhile resumes it, like Dask's "resumed").
//! * steal-request: a waiting, ready or constrained task is dropped and that state is
//!   answered; otherwise the current state (executing, memory, cancelled or none).
//! * A failed fetch (the holder died) tries another holder; with none, the tasks
//!   waiting for it are given back with reschedule after
//!   [`SimOptions::missing_data_retry`], unless a new compute-task re-sent them (its
//!   holders are tried then).
//! * Death: `remove_worker(expected = false)` at the moment of death; everything the
//!   worker held, ran or was sending vanishes.
//! * `tick` runs every `work_stealing_interval`; each worker heartbeats at the interval
//!   the core asks for, reporting running tasks and its measured bandwidth.
//!
//! # Simplifications
//!
//! * Transfers: each worker's inbound link carries one dependency at a time at
//!   [`SimOptions::bandwidth`], plus [`SimOptions::transfer_latency`] per transfer;
//!   senders, switches and (de)serialisation cost nothing, fetches are not batched per
//!   holder and not limited in count.
//! * Messages: every scheduler↔worker message takes [`SimOptions::message_latency`];
//!   the scheduler itself computes in zero time.
//! * Memory: only results are counted (no task working memory, no spilling, no pausing);
//!   `memory_limit` only arms the scheduler's memory guard.
//! * Tasks always succeed and never secede (no long-running); durations and result
//!   sizes are exact and fixed per task.
//! * No Active Memory Manager runs.
//! * Clients hold their futures forever (keys are never released), and a worker dies
//!   without a grace period (no TTL wait).

mod cluster;
mod events;
mod graph;
pub mod graphs;
mod messages;
mod network;
mod report;
pub mod rng;
mod sim;
mod worker;

pub use cluster::{SimOptions, SimWorker};
pub use graph::{SimGraph, SimSubmission, SimTask};
pub use graphs::Cost;
pub use report::{RunOutcome, SimReport, TimelineEntry, WorkerReport};
pub use sim::Simulation;
