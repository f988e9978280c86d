//! How many tasks and keys are in each stage, for the worker's heartbeat load figures
//! (docs/runtime.md#task-stream): kept as counters where the stage changes, or read
//! from the ready heap, never by a pass over every task or key.

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

impl<V, S> Machine<V, S> {
    /// O(ready heap): its stale entries (stolen, freed, superseded tasks) are skipped.
    pub fn counts(&self) -> Counts {
        let ready = self
            .ready
            .iter()
            .filter(|e| {
                self.tasks.get(&e.id).is_some_and(|t| {
                    t.instance == e.instance && matches!(t.state, State::Ready | State::Constrained)
                })
            })
            .count();
        Counts {
            executing: self.n_executing,
            ready,
            in_flight: self.in_flight,
            in_memory: self.memory.in_memory + self.memory.spilled,
        }
    }

    /// The counts agree with the tasks and keys (`validate`).
    pub(super) fn validate_counts(&self) -> Result<(), String> {
        let ready = self
            .tasks
            .values()
            .filter(|t| matches!(t.state, State::Ready | State::Constrained))
            .count();
        let in_flight = self
            .keys
            .iter()
            .filter(|(_, s)| s.fetch == Fetch::InFlight)
            .count();
        let c = self.counts();
        if (c.ready, c.in_flight) != (ready, in_flight) {
            return Err(format!(
                "counts: ready {} in flight {} != {ready}, {in_flight}",
                c.ready, c.in_flight
            ));
        }
        Ok(())
    }
}
