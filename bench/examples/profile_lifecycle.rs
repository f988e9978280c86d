//! `cargo run --release -p squall-bench --example profile_lifecycle [map|tree|ingest|memory] [n]`:
//! one lifecycle run of the core, for profilers (perf, callgrind).

use squall_core::microbench as mb;
use squall_core::GraphOrder;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Counts live heap bytes, for the `memory` mode.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Relaxed);
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "map".into());
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    if shape == "memory" {
        let before = LIVE.load(Relaxed);
        let s = mb::ingested(n);
        let bytes = LIVE.load(Relaxed) - before;
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
    let secs = mb::lifecycle(tasks, 16, order);
    println!(
        "{shape}: {count} tasks in {secs:.3} s = {:.0} tasks/s",
        count as f64 / secs
    );
}
