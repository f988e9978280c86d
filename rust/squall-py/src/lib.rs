//! `squall._core`: the only crate that touches Python. It converts batches, releases
//! the GIL while the core works, and maps core errors to Python exceptions in one place
//! ([`errors::to_py`]). Nothing here is called once per task from Python.

#[cfg(feature = "bench")]
mod bench;
mod commands;
mod config;
mod convert;
mod coordination;
mod errors;
mod future_table;
mod futures;
mod lifeline;
mod map_chunk;
mod nodes;
mod order;
mod scheduler;
mod sim;
mod specs;
mod wire;
mod worker;

use pyo3::prelude::*;

#[pymodule]
mod _core {
    #[cfg(feature = "bench")]
    #[pymodule_export]
    use super::bench::{heap_bytes, microbench};
    #[pymodule_export]
    use super::commands::Commands;
    #[pymodule_export]
    use super::config::{check_config, core_settings};
    #[pymodule_export]
    use super::coordination::{CoordCommand, Coordination};
    #[pymodule_export]
    use super::errors::{
        CycleError, DuplicateKeyError, InternalError, SchedulerError, StaleReportError,
        UnknownDependencyError, UnknownKeyError, UnknownTaskError, UnknownWorkerError,
    };
    #[pymodule_export]
    use super::future_table::FutureTable;
    #[pymodule_export]
    use super::futures::{distinct_attributes, finish_keys, gc_track, hold_keys, release_states};
    #[pymodule_export]
    use super::lifeline::watch_stdin;
    #[pymodule_export]
    use super::map_chunk::encode_map_chunk;
    #[pymodule_export]
    use super::nodes::{call_node, restore_node, NodeReducer};
    #[pymodule_export]
    use super::order::order_mapping;
    #[pymodule_export]
    use super::scheduler::{ProgressWatch, Scheduler};
    #[pymodule_export]
    use super::sim::simulate;
    #[pymodule_export]
    use super::specs::{
        call_prefix, clear_function_cache, function_cache_size, load_function, split_call,
    };
    #[pymodule_export]
    use super::wire::{decode_compute, decode_keys, encode_keys, encode_update_graph};
    #[pymodule_export]
    use super::worker::{read_executing_record, RunAnswer, WorkerCore};
    use pyo3::prelude::*;

    /// How this extension was built (docs/install.md#versions): which Python ABI it
    /// targets, the profile, features and compiler.
    fn build_info(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("version", env!("CARGO_PKG_VERSION"))?;
        let abi = if cfg!(feature = "abi3") {
            "abi3-py310"
        } else {
            "version-specific"
        };
        d.set_item("abi", abi)?;
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        d.set_item("profile", profile)?;
        d.set_item("bench", cfg!(feature = "bench"))?;
        d.set_item("rustc", env!("SQUALL_RUSTC"))?;
        d.set_item("target", env!("SQUALL_TARGET"))?;
        Ok(d)
    }

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("BUILD", build_info(m.py())?)?;
        m.add("RESTORE_NODE_CODE", super::nodes::RESTORE_NODE_CODE)?;
        super::nodes::register_restore_node(m.py())?;
        // The core's task states, in its order (docs/scheduling.md#task-states).
        let states = squall_core::TaskState::ALL.map(squall_core::TaskState::name);
        m.add("TASK_STATES", pyo3::types::PyTuple::new(m.py(), states)?)?;
        // The commands' op names (`Commands.counts`, `records`), which the tests check
        // `squall.protocol.ops` against.
        m.add(
            "COMMAND_OPS",
            pyo3::types::PyTuple::new(m.py(), squall_wire::ops::COMMAND_OPS)?,
        )
    }
}
