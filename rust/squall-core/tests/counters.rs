//! The dashboard's counters (docs/dashboard.md) through real stimuli; the invariant
//! checker compares the cluster-wide counts with a recount after each one.

mod common;
use common::*;
use squall_core::TaskState as S;

#[test]
fn totals_follow_a_computation() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 2);
    h.submit(
        &[
            ("x-1", &[]),
            ("x-2", &[]),
            ("y-1", &["x-1", "x-2"]),
            ("bad-1", &[]),
        ],
        &["y-1", "bad-1"],
    )
    .unwrap();
    assert_eq!(h.s.count_in(S::Released) + h.s.count_in(S::Waiting), 1);
    assert_eq!(
        h.s.n_tasks_with_waiters(),
        2,
        "x-1 and x-2: y-1 waits on them"
    );
    h.finish_sized("x-1", 100);
    h.finish_sized("x-2", 50);
    h.fail("bad-1");
    h.run_all();
    // x-1, x-2 released once y-1, their only dependent, has its result.
    assert_eq!(h.s.n_tasks_with_waiters(), 0);
    assert_eq!(h.s.count_in(S::Memory), 1);
    assert_eq!(h.s.count_in(S::Released), 2);
    assert_eq!(h.s.count_in(S::Erred), 1);
    let t = h.s.totals();
    assert_eq!(
        (t.tasks_computed, t.tasks_erred, t.tasks_forgotten),
        (3, 1, 0)
    );
    assert!(t.compute_seconds > 0.0);
    assert!(t.transitions >= 8);

    let x = h.s.task_prefixes().find(|(_, p)| p.name == "x").unwrap().0;
    assert_eq!(h.s.prefix_nbytes_total(x), 150);
    let (_, y) = h.s.task_groups().find(|(_, g)| g.name == "y").unwrap();
    let deps: Vec<&str> = y
        .dependencies
        .iter()
        .filter_map(|&d| h.s.group_by_ref(d).map(|g| g.name.as_str()))
        .collect();
    assert_eq!(deps, ["x"]);

    h.release(&["y-1", "bad-1"]);
    let t = h.s.totals();
    assert_eq!(t.tasks_forgotten, 4);
    assert_eq!(h.s.n_tasks(), 0);
    assert_eq!(
        h.s.task_groups().count(),
        0,
        "groups go with their last task"
    );
    let x = h.s.task_prefixes().find(|(_, p)| p.name == "x").unwrap().1;
    assert_eq!(
        x.state_totals[S::Memory as usize],
        2,
        "prefixes keep their totals"
    );
    assert_eq!(x.state_counts[S::Memory as usize], 0);

    h.s.remove_worker(a, false, h.now + 1.0).unwrap();
    let t = h.s.totals();
    assert_eq!((t.workers_added, t.workers_removed), (1, 1));
}
