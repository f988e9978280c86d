//! How many tasks and keys are in each stage, for the worker's heartbeat load figures
//! (docs/runtime.md#task-stream). Counted on demand, a heartbeat at a time, so that
//! the task path keeps no counters of its own.

use super::{Machine, State};
use crate::keys::Fetch;

/// Tasks executing and ready to run; keys being fetched and held (in memory or spilled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub executing: usize,
    pub ready: usize,
    pub in_flight: usize,
    pub in_memory: usize,
}

impl<V> Machine<V> {
    /// One pass over the tasks and keys known (O(tasks + keys)).
    pub fn counts(&self) -> Counts {
        let ready = self
            .tasks
            .values()
            .filter(|t| matches!(t.state, State::Ready | State::Constrained))
            .count();
        let (mut in_flight, mut in_memory) = (0, 0);
        for (_, slot) in self.keys.iter() {
            in_flight += usize::from(slot.fetch == Fetch::InFlight);
            in_memory += usize::from(slot.value.is_some());
        }
        Counts {
            executing: self.n_executing,
            ready,
            in_flight,
            in_memory,
        }
    }
}
