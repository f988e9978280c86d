//! Scheduler knobs (docs/config.md#squallscheduler) with Dask's defaults.

use std::collections::HashMap;

#[derive(Clone, Debug)]
pub struct Config {
    /// `worker-saturation`; `f64::INFINITY` disables queuing.
    pub worker_saturation: f64,
    /// squall's extension of queuing for tiny tasks: a worker may hold more than
    /// `worker_saturation × nthreads` queued-root tasks while they amount to less than
    /// this many seconds of expected work per thread (0 disables).
    pub worker_saturation_duration: f64,
    pub rootish_taskgroup: usize,
    pub rootish_taskgroup_dependencies: usize,
    pub work_stealing: bool,
    /// Seconds between stealing balance passes (driven by `Tick` events).
    pub work_stealing_interval: f64,
    pub allowed_failures: u32,
    /// Seconds assumed for a task whose prefix has no measurement yet.
    pub unknown_task_duration: f64,
    /// Seconds per prefix known in advance (prefixes at ≤ 1 ms are never stolen).
    pub default_task_durations: HashMap<String, f64>,
    /// Bytes assumed for a result of unknown size.
    pub default_data_size: i64,
    /// Initial bandwidth estimate, bytes/s.
    pub bandwidth: f64,
    /// Seconds of silence after which a worker is removed (at least 10 heartbeats).
    pub worker_ttl: Option<f64>,
    pub no_workers_timeout: Option<f64>,
    /// Length of the transition log behind `story()`; 0 disables logging.
    pub transition_log_length: usize,
    pub erred_tasks_max_history: usize,
    /// Arms the memory guard of `_add_to_processing` (worker.memory.terminate).
    pub memory_terminate: bool,
    /// Run the invariant checker after every stimulus (tests).
    pub validate: bool,
}

impl Default for Config {
    fn default() -> Self {
        let fast = [
            "rechunk-split",
            "split-shuffle",
            "split-taskshuffle",
            "split-stage",
        ];
        Config {
            worker_saturation: 1.1,
            worker_saturation_duration: 0.01,
            rootish_taskgroup: 5,
            rootish_taskgroup_dependencies: 5,
            work_stealing: true,
            work_stealing_interval: 1.0,
            allowed_failures: 3,
            unknown_task_duration: 0.5,
            default_task_durations: fast.iter().map(|p| (p.to_string(), 1e-6)).collect(),
            default_data_size: 1024,
            bandwidth: 100_000_000.0,
            worker_ttl: Some(300.0),
            no_workers_timeout: None,
            transition_log_length: 1000,
            erred_tasks_max_history: 100,
            memory_terminate: true,
            validate: false,
        }
    }
}

impl Config {
    /// The one place the knobs' ranges are checked: an error names the knob (Dask's
    /// name) and what it must be.
    pub fn check(&self) -> Result<(), String> {
        let seconds = [
            (
                "worker-saturation-duration",
                Some(self.worker_saturation_duration),
            ),
            ("work-stealing-interval", Some(self.work_stealing_interval)),
            ("unknown-task-duration", Some(self.unknown_task_duration)),
            ("worker-ttl", self.worker_ttl),
            ("no-workers-timeout", self.no_workers_timeout),
        ];
        let durations = self
            .default_task_durations
            .values()
            .map(|&d| ("default-task-durations", Some(d)));
        for (name, value) in seconds.into_iter().chain(durations) {
            if let Some(v) = value.filter(|v| v.is_nan() || *v < 0.0) {
                return Err(format!("{name}: must be >= 0 seconds, got {v}"));
            }
        }
        if self.worker_saturation.is_nan() || self.worker_saturation <= 0.0 {
            let v = self.worker_saturation;
            return Err(format!("worker-saturation: must be > 0 or 'inf', got {v}"));
        }
        if self.default_data_size < 0 {
            let v = self.default_data_size;
            return Err(format!("default-data-size: must be >= 0 bytes, got {v}"));
        }
        if self.bandwidth.is_nan() || self.bandwidth < 0.0 {
            let v = self.bandwidth;
            return Err(format!("bandwidth: must be >= 0 bytes/s, got {v}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Config;

    #[test]
    fn check_names_the_knob_out_of_range() {
        assert_eq!(Config::default().check(), Ok(()));
        let ttl = Config {
            worker_ttl: Some(-1.0),
            ..Config::default()
        };
        assert_eq!(
            ttl.check(),
            Err("worker-ttl: must be >= 0 seconds, got -1".into())
        );
        let sat = Config {
            worker_saturation: f64::NAN,
            ..Config::default()
        };
        assert!(sat.check().unwrap_err().starts_with("worker-saturation:"));
        let inf = Config {
            worker_saturation: f64::INFINITY,
            ..Config::default()
        };
        assert_eq!(inf.check(), Ok(()));
    }
}
