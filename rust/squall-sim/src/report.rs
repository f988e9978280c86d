//! The outcome of a run.

use std::fmt;

/// How a run on a thread ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// Finished and reported to the scheduler.
    Finished,
    /// Finished, but the scheduler had freed the task meanwhile: result discarded.
    Discarded,
    /// The worker died while it ran.
    Lost,
}

/// One run of a task on a worker thread.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineEntry {
    /// Python's `str(key)`.
    pub key: String,
    /// Index into the simulation's worker list.
    pub worker: usize,
    pub start: f64,
    pub end: f64,
    pub outcome: RunOutcome,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkerReport {
    pub name: String,
    /// Most bytes of results (computed or fetched) held at once.
    pub peak_memory: u64,
    /// Runs started here, whatever their outcome.
    pub tasks_executed: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// Every wanted key reached memory (or failed for good) before `max_time`.
    pub completed: bool,
    /// Virtual time at which the last wanted key was resolved.
    pub makespan: f64,
    pub bytes_transferred: u64,
    pub n_transfers: u64,
    /// Steals confirmed by the victim (the task moved).
    pub n_steals: u64,
    /// Steal requests sent.
    pub n_steal_requests: u64,
    /// Keys run more than once.
    pub n_reexecuted: usize,
    /// Tasks workers gave back (`reschedule`): no holder could provide a dependency.
    pub n_given_back: u64,
    pub workers: Vec<WorkerReport>,
    /// Every run, in the order the runs ended.
    pub timeline: Vec<TimelineEntry>,
    /// (key, time its result was last accepted by the scheduler), in submission order.
    pub completion: Vec<(String, f64)>,
    /// Wanted keys that erred or were cancelled.
    pub failed: Vec<String>,
    /// Submissions the scheduler rejected, with the reason.
    pub rejected: Vec<String>,
}

impl SimReport {
    pub fn completion_of(&self, key: &str) -> Option<f64> {
        self.completion
            .iter()
            .find(|(k, _)| k == key)
            .map(|&(_, t)| t)
    }

    /// The runs of one key, in the order they ended.
    pub fn runs_of<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a TimelineEntry> + 'a {
        self.timeline.iter().filter(move |e| e.key == key)
    }

    /// The largest peak over all workers.
    pub fn peak_memory(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.peak_memory)
            .max()
            .unwrap_or(0)
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} in {:.3} s: {} runs, {} re-executed keys, {} steals ({} requested), {} transfers ({:.1} MB)",
            if self.completed { "completed" } else { "INCOMPLETE" },
            self.makespan,
            self.timeline.len(),
            self.n_reexecuted,
            self.n_steals,
            self.n_steal_requests,
            self.n_transfers,
            self.bytes_transferred as f64 / 1e6,
        )?;
        for w in &self.workers {
            writeln!(
                f,
                "  {:>8}: {:>5} runs, peak memory {:>10.1} MB",
                w.name,
                w.tasks_executed,
                w.peak_memory as f64 / 1e6
            )?;
        }
        for r in &self.rejected {
            writeln!(f, "  rejected: {r}")?;
        }
        if !self.failed.is_empty() {
            writeln!(f, "  failed keys: {}", self.failed.join(", "))?;
        }
        Ok(())
    }
}
