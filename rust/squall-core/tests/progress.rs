//! Progress watches (docs/runtime.md#progress): counts per prefix over keys and their
//! dependencies, updated by looking only at the tasks not finished yet.

mod common;
use common::*;
use squall_core::*;

fn counts(w: &ProgressWatch) -> Vec<(String, u64, u64, u64)> {
    let mut out: Vec<_> = w
        .prefixes()
        .iter()
        .map(|p| (p.name.clone(), p.total, p.done, p.erred))
        .collect();
    out.sort();
    out
}

fn row(name: &str, total: u64, done: u64, erred: u64) -> (String, u64, u64, u64) {
    (name.to_string(), total, done, erred)
}

const GRAPH: &[(&str, &[&str])] = &[
    ("inc-1", &[]),
    ("inc-2", &[]),
    ("inc-3", &[]),
    ("sum-1", &["inc-1", "inc-2", "inc-3"]),
];

#[test]
fn counts_the_keys_and_their_dependencies_until_all_finish() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    h.submit(GRAPH, &["sum-1"]).unwrap();
    let mut w = ProgressWatch::new(&h.s, &[key("sum-1")], true).unwrap();
    assert_eq!(w.remaining(), 4);
    assert_eq!(counts(&w), vec![row("inc", 3, 0, 0), row("sum", 1, 0, 0)]);
    h.finish("inc-1");
    assert_eq!(w.update(&h.s, usize::MAX), 3);
    assert_eq!(counts(&w), vec![row("inc", 3, 1, 0), row("sum", 1, 0, 0)]);
    // Intermediate results are released once used: they count as done.
    h.run_all();
    assert_eq!(h.state("inc-1"), TaskState::Released);
    assert_eq!(w.update(&h.s, usize::MAX), 0);
    assert_eq!(counts(&w), vec![row("inc", 3, 3, 0), row("sum", 1, 1, 0)]);
    assert_eq!(w.cancelled(), 0);
}

#[test]
fn complete_false_leaves_out_results_already_in_memory() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    h.submit(&[("inc-1", &[]), ("inc-2", &[])], &["inc-1", "inc-2"])
        .unwrap();
    h.finish("inc-1");
    h.submit(&[("sum-1", &["inc-1", "inc-2"])], &["sum-1"])
        .unwrap();
    let partial = ProgressWatch::new(&h.s, &[key("sum-1")], false).unwrap();
    assert_eq!(
        counts(&partial),
        vec![row("inc", 1, 0, 0), row("sum", 1, 0, 0)]
    );
    let full = ProgressWatch::new(&h.s, &[key("sum-1")], true).unwrap();
    assert_eq!(
        counts(&full),
        vec![row("inc", 2, 1, 0), row("sum", 1, 0, 0)]
    );
}

#[test]
fn erred_tasks_and_their_dependents_count_as_erred() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    h.submit(GRAPH, &["sum-1"]).unwrap();
    let mut w = ProgressWatch::new(&h.s, &[key("sum-1")], true).unwrap();
    h.finish("inc-1");
    h.fail("inc-2");
    assert_eq!(h.state("sum-1"), TaskState::Erred);
    h.run_all();
    assert_eq!(w.update(&h.s, usize::MAX), 0);
    assert_eq!(counts(&w), vec![row("inc", 3, 2, 1), row("sum", 1, 0, 1)]);
}

#[test]
fn released_keys_count_as_cancelled_and_unknown_keys_are_refused() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    h.submit(GRAPH, &["sum-1"]).unwrap();
    let mut w = ProgressWatch::new(&h.s, &[key("sum-1")], true).unwrap();
    h.release(&["sum-1"]);
    assert_eq!(w.update(&h.s, usize::MAX), 0);
    assert_eq!(w.cancelled(), 1);
    assert_eq!(
        ProgressWatch::new(&h.s, &[key("nope")], true).err(),
        Some(vec![key("nope")])
    );
}

#[test]
fn an_update_looks_at_no_more_than_its_budget_and_all_in_turn() {
    let mut h = H::new();
    h.worker("tcp://a", 4);
    h.submit(GRAPH, &["sum-1"]).unwrap();
    let mut w = ProgressWatch::new(&h.s, &[key("sum-1")], true).unwrap();
    h.run_all();
    let mut left = vec![w.remaining()];
    while w.remaining() > 0 {
        left.push(w.update(&h.s, 1));
    }
    assert_eq!(left, vec![4, 3, 2, 1, 0]);
    assert_eq!(counts(&w), vec![row("inc", 3, 3, 0), row("sum", 1, 1, 0)]);
    // Some finished, some not: each update of one goes on from the last.
    let mut h = H::new();
    h.worker("tcp://a", 4);
    h.submit(GRAPH, &["sum-1"]).unwrap();
    let mut w = ProgressWatch::new(&h.s, &[key("sum-1")], true).unwrap();
    h.finish("inc-3");
    let looks: Vec<usize> = (0..4).map(|_| w.update(&h.s, 1)).collect();
    assert_eq!(looks.last(), Some(&3));
    assert_eq!(counts(&w), vec![row("inc", 3, 1, 0), row("sum", 1, 0, 0)]);
}
