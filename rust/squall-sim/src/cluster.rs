//! The simulated cluster: workers, their lifetimes, and the network.

/// One worker process: capacity, and when it joins and (maybe) dies.
#[derive(Clone, Debug, PartialEq)]
pub struct SimWorker {
    /// Unique; the worker registers at address `sim://<name>`.
    pub name: String,
    /// For host restrictions; defaults to the name.
    pub host: String,
    pub nthreads: u32,
    /// Bytes announced to the scheduler (0 = no limit). Only the scheduler's memory
    /// guard uses it: workers neither spill nor pause.
    pub memory_limit: u64,
    pub resources: Vec<(String, f64)>,
    /// Virtual time the worker registers.
    pub arrive: f64,
    /// Virtual time it dies abruptly, if ever.
    pub die: Option<f64>,
}

impl SimWorker {
    pub fn new(name: &str, nthreads: u32) -> Self {
        SimWorker {
            name: name.into(),
            host: name.into(),
            nthreads,
            memory_limit: 0,
            resources: Vec::new(),
            arrive: 0.0,
            die: None,
        }
    }

    /// `n` identical workers named `w0`, `w1`, ….
    pub fn many(n: usize, nthreads: u32) -> Vec<Self> {
        (0..n)
            .map(|i| SimWorker::new(&format!("w{i}"), nthreads))
            .collect()
    }

    pub fn with_resource(mut self, name: &str, amount: f64) -> Self {
        self.resources.push((name.into(), amount));
        self
    }

    pub fn arriving_at(mut self, t: f64) -> Self {
        self.arrive = t;
        self
    }

    pub fn dying_at(mut self, t: f64) -> Self {
        self.die = Some(t);
        self
    }

    pub fn address(&self) -> String {
        format!("sim://{}", self.name)
    }
}

/// Network and messaging parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// Bytes/s of each worker's inbound link; a worker's fetches share it one after
    /// another (senders are not a bottleneck).
    pub bandwidth: f64,
    /// Seconds added to every worker-to-worker transfer.
    pub transfer_latency: f64,
    /// One-way delay of every scheduler↔worker message, seconds.
    pub message_latency: f64,
    /// Seconds a worker waits before giving back (`reschedule`) tasks whose dependency
    /// no holder could provide (`squall.worker.missing-data-retry`).
    pub missing_data_retry: f64,
    /// Virtual time after which the run stops, reported as incomplete.
    pub max_time: f64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            bandwidth: 100_000_000.0,
            transfer_latency: 0.001,
            message_latency: 0.0,
            missing_data_retry: 0.25,
            max_time: 1.0e7,
        }
    }
}
