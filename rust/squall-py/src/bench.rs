//! The bench build (cargo feature `bench`, never in the wheel): what `squall bench core`
//! needs beyond the product. The counting allocator makes `heap_bytes()` the live Rust
//! heap of this module (the scheduler's own memory); `microbench()` runs one of the
//! core's benchmark kernels (seconds, GIL released).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use squall_bench::heap::{live_bytes, CountingAlloc};
use squall_bench::microbench as mb;
use squall_core::GraphOrder;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Bytes currently allocated on the Rust heap by squall's core and bindings.
#[pyfunction]
pub fn heap_bytes() -> usize {
    live_bytes()
}

#[pyfunction]
#[pyo3(signature = (name, n, *, workers=16))]
pub fn microbench(py: Python<'_>, name: &str, n: usize, workers: usize) -> PyResult<f64> {
    let kernel: Box<dyn FnOnce() -> f64 + Send> = match name {
        "ingest" => Box::new(move || mb::ingest(n)),
        "lifecycle-map" => Box::new(move || {
            mb::lifecycle(mb::map_tasks("inc", n), workers, GraphOrder::Sequential)
        }),
        "lifecycle-tree" => Box::new(move || {
            mb::lifecycle(mb::tree_tasks(n.div_ceil(2)), workers, GraphOrder::Compute)
        }),
        "steal-bins" => Box::new(move || mb::steal_bins(n)),
        "worker-choice" => Box::new(move || mb::worker_choice(workers, n)),
        "order-tree" => Box::new(move || mb::order("tree", n)),
        "order-map" => Box::new(move || mb::order("map", n)),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown microbenchmark {other:?}"
            )))
        }
    };
    Ok(py.detach(kernel))
}
