//! The worker's task counts for its `/metrics` (docs/dashboard.md#metrics): one pass
//! over the tasks this worker holds, under the lock, with no Python object per task.

use super::WorkerCore;
use pyo3::prelude::*;
use std::collections::BTreeMap;

#[pymethods]
impl WorkerCore {
    /// Tasks known here by state name (states with none are left out).
    fn task_counts(&self, py: Python<'_>) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for (_, t) in self.lock(py).m.tasks() {
            *counts.entry(t.state.name()).or_insert(0) += 1;
        }
        counts
    }
}
