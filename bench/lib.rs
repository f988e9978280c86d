//! Criterion benchmarks of squall-core live in `benches/`; the kernels they time are
//! `squall_core::microbench` (shared with `squall bench core`).
