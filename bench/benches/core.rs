//! `cargo bench -p squall-bench`: the core's hot paths at sizes that finish quickly.
//! `squall bench core` runs the same kernels at 1,000,000 tasks and prints a table.

use criterion::{criterion_group, criterion_main, Criterion};
use squall_bench::microbench as mb;
use squall_core::GraphOrder;
use std::time::Duration;

const N: usize = 100_000;

/// Criterion wants a routine it can repeat `iters` times; the kernels time themselves.
fn timed(iters: u64, kernel: impl Fn() -> f64) -> Duration {
    Duration::from_secs_f64((0..iters).map(|_| kernel()).sum())
}

fn core(c: &mut Criterion) {
    let mut g = c.benchmark_group("core");
    g.sample_size(10);
    g.bench_function("ingest-map-100k", |b| {
        b.iter_custom(|i| timed(i, || mb::ingest(N)))
    });
    g.bench_function("lifecycle-map-100k-16w", |b| {
        b.iter_custom(|i| {
            timed(i, || {
                mb::lifecycle(mb::map_tasks("inc", N), 16, GraphOrder::Sequential)
            })
        })
    });
    g.bench_function("lifecycle-tree-100k-16w", |b| {
        b.iter_custom(|i| {
            timed(i, || {
                mb::lifecycle(mb::tree_tasks(N / 2), 16, GraphOrder::Compute)
            })
        })
    });
    g.bench_function("order-tree-100k", |b| {
        b.iter_custom(|i| timed(i, || mb::order("tree", N)))
    });
    g.bench_function("steal-bins-100k", |b| {
        b.iter_custom(|i| timed(i, || mb::steal_bins(N)))
    });
    g.bench_function("worker-choice-1000w", |b| {
        b.iter_custom(|i| timed(i, || mb::worker_choice(1000, 1000) * 1000.0))
    });
    g.finish();
}

criterion_group!(benches, core);
criterion_main!(benches);
