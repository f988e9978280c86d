//! Measuring squall-core: the kernels of its benchmarks ([`microbench`], which live in
//! the core behind its `microbench` feature as they time internals; run by the
//! criterion benches in `benches/` and by `squall bench core`) and a counting
//! allocator for its memory ([`heap`]).

pub mod heap;
pub use squall_core::microbench;
