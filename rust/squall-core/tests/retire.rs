//! Retiring and restarting workers, and scatter's checks (docs/runtime.md#cluster-lifecycle).
//! Every stimulus runs with `validate` on (the invariants are checked after each).

mod common;

use common::*;
use squall_core::TaskState as S;
use squall_core::*;

#[test]
fn results_only_a_retiring_worker_holds_go_to_the_least_loaded_running_worker() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    let c = h.worker("tcp://c", 1);
    scatter(&mut h, vec![item("on-c", 100, &["tcp://c"])]);
    scatter(
        &mut h,
        vec![
            item("d0", 60, &["tcp://a"]),
            item("d1", 60, &["tcp://a"]),
            item("d2", 10, &["tcp://a"]),
            item("both", 10, &["tcp://a", "tcp://b"]),
        ],
    );
    h.clear_log();
    assert_eq!(retire(&mut h, &[a]), vec![a]);
    assert_eq!(h.s.worker(a).status, WorkerStatus::ClosingGracefully);
    // b (0 bytes) takes d0, then d1 (60 < 100); then c (100 < 120) takes d2. `both`
    // has a holder outside: it stays.
    assert_eq!(
        h.ops("acquire"),
        [
            "d0@tcp://b<-tcp://a",
            "d1@tcp://b<-tcp://a",
            "d2@tcp://c<-tcp://a"
        ]
    );
    assert_eq!(h.s.retirement(a), Ok(Retirement::Copying(3)));
    assert!(retire(&mut h, &[a]).is_empty(), "retiring already");
    fetched(&mut h, b, &["d0", "d1"]);
    assert_eq!(h.s.retirement(a), Ok(Retirement::Copying(1)));
    fetched(&mut h, c, &["d2"]);
    assert_eq!(h.s.retirement(a), Ok(Retirement::Done));
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[a], false, true, now).unwrap();
    h.drain();
    assert_eq!(out.retired, vec![a]);
    assert!(out.kept.is_empty());
    assert_eq!(h.s.worker(a).status, WorkerStatus::Closed);
    for k in ["d0", "d1", "d2", "both"] {
        assert_eq!(h.state(k), S::Memory, "{k} kept");
    }
}

#[test]
fn copies_not_made_are_asked_for_again_after_reask_on_a_tick() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    scatter(&mut h, vec![item("d", 8, &["tcp://a"])]);
    retire(&mut h, &[a]);
    assert_eq!(h.ops("acquire").len(), 1);
    tick(&mut h, REASK / 2.0);
    assert_eq!(h.ops("acquire").len(), 1, "not yet");
    tick(&mut h, REASK / 2.0 + 0.01);
    assert_eq!(h.ops("acquire").len(), 2, "asked again");
}

#[test]
fn results_finished_while_retiring_are_copied_on_the_next_tick() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    assert_eq!(h.worker_of("x").as_deref(), Some("tcp://a"));
    h.worker("tcp://b", 1);
    retire(&mut h, &[a]);
    assert_eq!(h.s.retirement(a), Ok(Retirement::Running));
    h.finish("x");
    assert_eq!(h.s.retirement(a), Ok(Retirement::Copying(1)));
    assert!(h.ops("acquire").is_empty());
    tick(&mut h, 0.1);
    assert_eq!(h.ops("acquire"), ["x@tcp://b<-tcp://a"]);
}

#[test]
fn a_worker_whose_results_have_nowhere_to_go_is_kept_running() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    scatter(&mut h, vec![item("d", 8, &["tcp://a"])]);
    // Both retire: neither may take the other's results.
    assert_eq!(retire(&mut h, &[a, b]), vec![a, b]);
    assert!(h.ops("acquire").is_empty());
    assert_eq!(h.s.retirement(a), Ok(Retirement::Stuck(1)));
    assert_eq!(h.s.retirement(b), Ok(Retirement::Done));
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[a, b], false, true, now).unwrap();
    h.drain();
    assert_eq!(out.retired, vec![b]);
    assert_eq!(
        out.kept,
        vec![(
            a,
            "no other running worker can take its results".to_string()
        )]
    );
    assert_eq!(h.s.worker(a).status, WorkerStatus::Running);
    assert_eq!(h.s.retirement(a), Ok(Retirement::NotRetiring));
    // Not retiring any more: a second end is refused, nothing changes.
    let now = h.tick_time(0.01);
    assert!(matches!(
        h.s.end_retirement(&[a], false, true, now),
        Err(CoreError::Invalid(_))
    ));
}

#[test]
fn copies_not_made_in_time_keep_the_worker_unless_it_leaves_anyway() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    scatter(&mut h, vec![item("d", 8, &["tcp://a"])]);
    scatter(&mut h, vec![item("e", 8, &["tcp://b"])]);
    retire(&mut h, &[a, b]);
    h.worker("tcp://c", 1);
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[a], false, true, now).unwrap();
    assert_eq!(
        out.kept,
        vec![(
            a,
            "1 results held only here were not copied in time".to_string()
        )]
    );
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[b], true, true, now).unwrap();
    h.drain();
    assert_eq!(out.retired, vec![b]);
    assert_eq!(h.state("e"), S::Forgotten, "scattered data lost with b");
}

#[test]
fn retiring_without_removal_leaves_the_worker_closing_and_a_gone_worker_counts_as_retired() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    h.worker("tcp://c", 1);
    retire(&mut h, &[a, b]);
    let now = h.tick_time(0.01);
    h.s.remove_worker(b, false, now).unwrap();
    assert_eq!(h.s.retirement(b), Ok(Retirement::Gone));
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[a, b], false, false, now).unwrap();
    assert_eq!(out.retired, vec![a, b]);
    assert_eq!(h.s.worker(a).status, WorkerStatus::ClosingGracefully);
    // A stale id is an error, and nothing starts.
    let now = h.tick_time(0.01);
    assert_eq!(
        h.s.retire_workers(&[WorkerId(99)], now),
        Err(CoreError::UnknownWorker(99))
    );
}

#[test]
fn restart_forgets_every_task_and_restarts_every_worker() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    h.submit(&[("x", &[]), ("y", &["x"])], &["y"]).unwrap();
    h.finish("x");
    let now = h.tick_time(0.01);
    h.s.fire_and_forget(&[key("x")], now).unwrap();
    scatter(&mut h, vec![item("d", 8, &["tcp://b"])]);
    h.clear_log();
    let now = h.tick_time(0.01);
    assert_eq!(h.s.restart(now), vec![a, b]);
    h.drain();
    assert_eq!(h.s.n_tasks(), 0);
    assert_eq!(h.s.n_workers(), 0);
    assert_eq!(h.ops("restart"), ["tcp://a", "tcp://b"]);
}

#[test]
fn restarting_some_workers_reschedules_their_tasks_without_suspicion() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.submit(&[("x", &[])], &["x"]).unwrap();
    h.worker("tcp://b", 1);
    let now = h.tick_time(0.01);
    h.s.restart_workers(&[a], now).unwrap();
    h.drain();
    assert_eq!(h.ops("restart"), ["tcp://a"]);
    assert_eq!(h.worker_of("x").as_deref(), Some("tcp://b"));
    assert_eq!(h.s.task(h.t("x")).suspicious, 0);
    // Gone already: skipped; never registered: an error.
    let now = h.tick_time(0.01);
    h.s.restart_workers(&[a], now).unwrap();
    assert_eq!(
        h.s.restart_workers(&[WorkerId(42)], now),
        Err(CoreError::UnknownWorker(42))
    );
}

#[test]
fn scatter_refuses_unknown_holders_and_keys_in_other_states_changing_nothing() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.submit(&[("busy", &[])], &["busy"]).unwrap();
    let n = h.s.n_tasks();
    let now = h.tick_time(0.01);
    let refused = [
        (
            vec![
                item("new", 8, &["tcp://a"]),
                item("far", 8, &["tcp://a", "tcp://gone"]),
            ],
            "cannot scatter 'far': no worker at tcp://gone",
        ),
        (
            vec![item("new", 8, &["tcp://a"]), item("busy", 8, &["tcp://a"])],
            "cannot scatter 'busy': the key exists and is processing",
        ),
        (
            vec![item("new", 8, &[])],
            "cannot scatter 'new': no worker to hold it",
        ),
    ];
    for (items, why) in refused {
        let err = h.s.scatter(h.client, &items, now).unwrap_err();
        assert_eq!(err, CoreError::Invalid(why.to_string()));
        assert_eq!(h.s.n_tasks(), n, "nothing created");
        assert!(h.s.pending_commands().is_empty());
    }
    // Scattering a key in memory again adds holders.
    h.finish("busy");
    h.worker("tcp://b", 1);
    scatter(&mut h, vec![item("busy", 8, &["tcp://b"])]);
    assert_eq!(h.s.task(h.t("busy")).who_has.len(), 2);
}

fn actor_on_a(h: &mut H, k: &str) {
    let opts = TaskOptions {
        actor: true,
        restrictions: Some(Restrictions {
            workers: vec!["tcp://a".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    h.submit_with(&[(k, &[])], &[k], opts, GraphOrder::Compute)
        .unwrap();
    assert_eq!(h.worker_of(k).as_deref(), Some("tcp://a"));
}

#[test]
fn a_worker_holding_an_actor_is_kept_and_its_actor_never_copied() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    actor_on_a(&mut h, "counter");
    h.finish("counter");
    scatter(&mut h, vec![item("d", 8, &["tcp://a"])]);
    retire(&mut h, &[a]);
    assert_eq!(h.s.retirement(a), Ok(Retirement::HoldsActors(1)));
    // The plain result is copied; the actor is not.
    assert_eq!(h.ops("acquire"), ["d@tcp://b<-tcp://a"]);
    tick(&mut h, REASK + 0.1);
    assert!(h.ops("acquire").iter().all(|x| !x.starts_with("counter")));
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[a], false, true, now).unwrap();
    h.drain();
    assert_eq!(
        out.kept,
        vec![(a, "it holds 1 actors, which cannot be moved".to_string())]
    );
    assert_eq!(h.state("counter"), S::Memory);
    assert_eq!(h.s.worker(a).status, WorkerStatus::Running);
}

#[test]
fn a_worker_holding_an_actor_leaves_anyway_and_the_actor_is_lost() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    actor_on_a(&mut h, "counter");
    h.finish("counter");
    retire(&mut h, &[a]);
    let now = h.tick_time(0.01);
    let out = h.s.end_retirement(&[a], true, true, now).unwrap();
    h.drain();
    assert_eq!(out.retired, vec![a]);
    assert_eq!(h.state("counter"), S::Erred);
    assert_eq!(
        h.s.task(h.t("counter")).error().unwrap().kind,
        ErrorKind::ActorLost
    );
    assert_eq!(h.ops("task-erred"), vec!["counter"]);
}

#[test]
fn adaptive_handover_skips_actors() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    actor_on_a(&mut h, "counter");
    h.finish("counter");
    scatter(&mut h, vec![item("d", 8, &["tcp://a"])]);
    let held: Vec<TaskId> = h.s.held_only_by(&[a]).into_iter().map(|(t, _)| t).collect();
    assert_eq!(held, vec![h.t("d")]);
}
