//! `heap_bytes()`: the live Rust heap of this module (the scheduler's own memory),
//! counted by squall-bench's counting allocator.

use pyo3::prelude::*;
use squall_bench::heap::{live_bytes, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Bytes currently allocated on the Rust heap by squall's core and bindings.
#[pyfunction]
pub fn heap_bytes() -> usize {
    live_bytes()
}
