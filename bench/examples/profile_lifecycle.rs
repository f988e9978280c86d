//! `cargo run --release -p squall-bench --example profile_lifecycle [map|tree] [n]`:
//! one lifecycle run of the core, for profilers (perf, callgrind).

use squall_core::microbench as mb;
use squall_core::GraphOrder;

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "map".into());
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let (tasks, order) = match shape.as_str() {
        "tree" => (mb::tree_tasks(n / 2), GraphOrder::Compute),
        _ => (mb::map_tasks("inc", n), GraphOrder::Sequential),
    };
    let count = tasks.len();
    let secs = mb::lifecycle(tasks, 16, order);
    println!(
        "{shape}: {count} tasks in {secs:.3} s = {:.0} tasks/s",
        count as f64 / secs
    );
}
