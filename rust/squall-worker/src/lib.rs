//! squall-worker: the bookkeeping of a squall worker process as a sans-IO state
//! machine over the scheduler's task ids and interned keys. The process drives it:
//! decoded messages in, tasks to run and reports out. Values are generic, so the
//! Python bindings store Python objects and the tests store plain numbers.

pub mod keys;
pub mod machine;
pub mod sampler;

pub use keys::{Fetch, KeyId, Keys, Slot};
pub use machine::{
    Counts, DepIn, Job, Machine, Memory, Missing, Outcome, State, Task, TaskIn, Transition,
};
pub use sampler::Sampler;
pub use squall_priority::Priority;
pub use squall_wire::finished::FinishedBatch;

#[cfg(test)]
mod tests;
