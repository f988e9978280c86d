//! Task priorities (docs/scheduling.md#priorities): smaller runs earlier. One type for the scheduler,
//! which assigns them, and the worker, which runs its ready tasks in their order; a
//! crate of its own so that the worker need not depend on the scheduling core.

use std::cmp::Ordering;

/// `(−user_priority, generation, graph order)`, compared lexicographically.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Priority {
    /// Negated user priority (clamped to 32 bits).
    pub neg_user: i32,
    /// FIFO generation; fractional for submissions from inside a task.
    pub generation: f64,
    /// Graph order index (dask.order) or submission index.
    pub order: u32,
}

impl Priority {
    pub fn new(user_priority: i64, generation: f64, order: u64) -> Self {
        let neg = user_priority
            .saturating_neg()
            .clamp(i64::from(i32::MIN), i64::from(i32::MAX));
        Priority {
            neg_user: neg as i32,
            generation,
            order: order.min(u64::from(u32::MAX)) as u32,
        }
    }
}

impl Eq for Priority {}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Priority {
    fn cmp(&self, other: &Self) -> Ordering {
        self.neg_user
            .cmp(&other.neg_user)
            .then(self.generation.total_cmp(&other.generation))
            .then(self.order.cmp(&other.order))
    }
}
