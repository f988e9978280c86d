//! `cargo run --release -p squall-bench --example profile_lifecycle [map|tree|ingest|memory] [n]`:
//! one lifecycle run of the core, for profilers (perf, callgrind).

use squall_bench::heap::{live_bytes, CountingAlloc};
use squall_bench::microbench as mb;
use squall_core::GraphOrder;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "map".into());
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    if shape == "memory" {
        let before = live_bytes();
        let s = mb::ingested(n);
        let bytes = live_bytes() - before;
        println!(
            "memory: {} bytes of heap per held task ({n} queued map tasks)",
            bytes / n
        );
        drop(s);
        return;
    }
    if shape == "ingest" {
        let secs = mb::ingest(n);
        println!(
            "ingest: {n} tasks in {secs:.3} s = {:.0} tasks/s",
            n as f64 / secs
        );
        return;
    }
    let (tasks, order) = match shape.as_str() {
        "tree" => (mb::tree_tasks(n / 2), GraphOrder::Compute),
        _ => (mb::map_tasks("inc", n), GraphOrder::Sequential),
    };
    let count = tasks.len();
    let p = mb::lifecycle_phases(tasks, 16, order);
    let secs = p.total();
    println!(
        "{shape}: {count} tasks in {secs:.3} s = {:.0} tasks/s (ingest {:.3}, run {:.3}, release {:.3})",
        count as f64 / secs,
        p.ingest,
        p.run,
        p.release
    );
}
