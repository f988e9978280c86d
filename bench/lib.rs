//! Measuring squall-core: the kernels of its benchmarks ([`microbench`], which live in
//! the core behind its `microbench` feature as they time internals; run by the
//! criterion benches in `benches/` and by `squall bench core`) and a counting
//! allocator for its memory ([`heap`]). `squall._core` links this crate only in its
//! bench build (squall-py's feature `bench`), never in the wheel.

pub mod heap;
pub use squall_core::microbench;
