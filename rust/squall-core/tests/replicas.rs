//! `replicate`, `rebalance` and the ReduceReplicas pass (docs/scheduling.md#replicas).
//! Every stimulus runs with `validate` on (the invariants are checked after each).

mod common;

use common::*;
use squall_core::*;

fn holders(h: &H, k: &str) -> Vec<String> {
    let mut out: Vec<String> =
        h.s.task(h.t(k))
            .who_has
            .iter()
            .map(|w| h.s.worker(w).address.clone())
            .collect();
    out.sort();
    out
}

fn replicate(h: &mut H, keys: &[&str], n: Option<usize>, workers: Option<&[WorkerId]>) -> usize {
    let now = h.tick_time(0.01);
    let keys: Vec<Key> = keys.iter().map(|k| key(k)).collect();
    let missing = h.s.replicate(&keys, n, workers, 2, now).unwrap();
    h.drain();
    missing
}

fn managed() -> RebalanceSettings {
    RebalanceSettings {
        measure: Measure::Managed,
        ..RebalanceSettings::default()
    }
}

fn rebalance(h: &mut H, keys: Option<&[&str]>, workers: Option<&[WorkerId]>) -> Rebalance {
    let now = h.tick_time(0.01);
    let keys: Option<Vec<Key>> = keys.map(|ks| ks.iter().map(|k| key(k)).collect());
    let out =
        h.s.rebalance(keys.as_deref(), workers, managed(), now)
            .unwrap();
    h.drain();
    out
}

#[test]
fn replicate_copies_in_a_tree_until_every_chosen_worker_holds_the_result() {
    let mut h = H::new();
    let ws: Vec<WorkerId> = (0..5)
        .map(|i| h.worker(&format!("tcp://w{i}"), 1))
        .collect();
    scatter(&mut h, vec![item("x", 100, &["tcp://w0"])]);
    h.clear_log();
    // One holder, branching factor 2: two copies at a time from it.
    assert_eq!(replicate(&mut h, &["x"], None, None), 4);
    assert_eq!(
        h.ops("acquire"),
        ["x@tcp://w1<-tcp://w0", "x@tcp://w2<-tcp://w0"]
    );
    // Asked already and not arrived: nothing more until they do.
    h.clear_log();
    assert_eq!(replicate(&mut h, &["x"], None, None), 4);
    assert!(h.ops("acquire").is_empty());
    fetched(&mut h, ws[1], &["x"]);
    assert_eq!(replicate(&mut h, &["x"], None, None), 3);
    // Two holders now: up to four under way, one of which (w2) already is.
    assert_eq!(
        h.ops("acquire"),
        ["x@tcp://w3<-tcp://w0", "x@tcp://w4<-tcp://w1"]
    );
    fetched(&mut h, ws[2], &["x"]);
    fetched(&mut h, ws[3], &["x"]);
    fetched(&mut h, ws[4], &["x"]);
    assert_eq!(replicate(&mut h, &["x"], None, None), 0);
    assert_eq!(holders(&h, "x").len(), 5);
}

#[test]
fn replicate_to_n_of_the_chosen_workers_drops_copies_beyond_n_among_them_only() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    let c = h.worker("tcp://c", 1);
    let d = h.worker("tcp://d", 1);
    scatter(
        &mut h,
        vec![item("x", 10, &["tcp://a", "tcp://b", "tcp://c", "tcp://d"])],
    );
    scatter(&mut h, vec![item("big", 500, &["tcp://b"])]);
    // Among a, b, c: keep one; d's copy lies outside and stays. b holds the most data:
    // it drops first, then c (ties by address).
    assert_eq!(replicate(&mut h, &["x"], Some(1), Some(&[a, b, c])), 0);
    assert_eq!(holders(&h, "x"), ["tcp://a", "tcp://d"]);
    assert_eq!(h.ops("remove-replicas"), ["x", "x"]);
    // n above the number of workers chosen means all of them.
    h.clear_log();
    assert_eq!(replicate(&mut h, &["x"], Some(9), Some(&[a, c])), 1);
    assert_eq!(h.ops("acquire"), ["x@tcp://c<-tcp://a"]);
    fetched(&mut h, c, &["x"]);
    assert_eq!(replicate(&mut h, &["x"], Some(9), Some(&[a, c])), 0);
    assert_eq!(holders(&h, "x"), ["tcp://a", "tcp://c", "tcp://d"]);
    let _ = (b, d);
}

#[test]
fn replicate_refuses_unknown_keys_absent_data_and_zero_copies_changing_nothing() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    scatter(&mut h, vec![item("x", 10, &["tcp://a"])]);
    h.submit(&[("y", &[])], &["y"]).unwrap();
    h.drain();
    let now = h.tick_time(0.01);
    let err =
        h.s.replicate(&[key("nope")], None, None, 2, now)
            .unwrap_err();
    assert_eq!(err, CoreError::UnknownKey(key("nope")));
    let err = h.s.replicate(&[key("y")], None, None, 2, now).unwrap_err();
    assert!(err.to_string().contains("no worker holds"), "{err}");
    let err =
        h.s.replicate(&[key("x")], Some(0), None, 2, now)
            .unwrap_err();
    assert!(err.to_string().contains("delete data"), "{err}");
    let err =
        h.s.replicate(&[key("x")], None, Some(&[WorkerId(7)]), 2, now)
            .unwrap_err();
    assert_eq!(err, CoreError::UnknownWorker(7));
    h.drain();
    assert!(h.ops("acquire").is_empty() && h.ops("remove-replicas").is_empty());
    let _ = a;
}

#[test]
fn a_replicate_copy_that_never_arrives_is_asked_for_again() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    scatter(&mut h, vec![item("x", 10, &["tcp://a"])]);
    h.clear_log();
    assert_eq!(replicate(&mut h, &["x"], None, None), 1);
    h.tick_time(REASK);
    assert_eq!(replicate(&mut h, &["x"], None, None), 1);
    assert_eq!(
        h.ops("acquire"),
        ["x@tcp://b<-tcp://a", "x@tcp://b<-tcp://a"]
    );
}

#[test]
fn rebalance_moves_results_from_the_loaded_worker_until_near_the_mean() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    let c = h.worker("tcp://c", 1);
    let items = (0..6)
        .map(|i| item(&format!("k{i}"), 100, &["tcp://a"]))
        .collect();
    scatter(&mut h, items);
    h.clear_log();
    // Mean 200: a sends 400 bytes, b and c take 200 each, farthest from the mean first.
    let out = rebalance(&mut h, None, None);
    assert!(out.missing.is_empty());
    assert_eq!(out.moves.len(), 4);
    assert_eq!(
        h.ops("acquire"),
        [
            "k0@tcp://b<-tcp://a",
            "k1@tcp://c<-tcp://a",
            "k2@tcp://b<-tcp://a",
            "k3@tcp://c<-tcp://a"
        ]
    );
    assert_eq!(h.s.moves_pending(), 4);
    // Nothing is dropped before the copy arrives; then the sender's copy goes.
    assert_eq!(holders(&h, "k0"), ["tcp://a"]);
    fetched(&mut h, b, &["k0", "k2"]);
    assert_eq!(holders(&h, "k0"), ["tcp://b"]);
    assert_eq!(h.ops("remove-replicas"), ["k0", "k2"]);
    assert_eq!(h.s.moves_pending(), 2);
    fetched(&mut h, c, &["k1"]);
    // The last one does not arrive in time: forgotten, both copies kept if it comes.
    assert_eq!(h.s.end_moves(), vec![key("k3")]);
    assert_eq!(h.s.moves_pending(), 0);
    fetched(&mut h, c, &["k3"]);
    assert_eq!(holders(&h, "k3"), ["tcp://a", "tcp://c"]);
    let nbytes: Vec<i64> = [a, b, c].iter().map(|&w| h.s.worker(w).nbytes).collect();
    assert_eq!(nbytes, [300, 200, 200]);
}

#[test]
fn rebalance_honours_keys_workers_limits_and_existing_copies() {
    let mut h = H::new();
    let a = h.worker_spec(WorkerSpec {
        address: "tcp://a".into(),
        name: "a".into(),
        host: "127.0.0.1".into(),
        nthreads: 1,
        memory_limit: 10_000,
        resources: vec![],
    });
    let b = h.worker("tcp://b", 1);
    let c = h.worker("tcp://c", 1);
    let items = (0..4)
        .map(|i| item(&format!("k{i}"), 100, &["tcp://a"]))
        .collect();
    scatter(&mut h, items);
    // a is below sender-min (30% of 10 kB): nothing moves.
    assert!(rebalance(&mut h, None, None).moves.is_empty());
    scatter(&mut h, vec![item("huge", 3000, &["tcp://a"])]);
    // Only k1 and k2 may move, only to b: c is not among the workers.
    h.clear_log();
    let out = rebalance(&mut h, Some(&["k1", "k2"]), Some(&[a, b]));
    assert_eq!(out.moves.len(), 2);
    assert_eq!(
        h.ops("acquire"),
        ["k1@tcp://b<-tcp://a", "k2@tcp://b<-tcp://a"]
    );
    // Missing keys: nothing moves, they are named.
    let out = rebalance(&mut h, Some(&["k0", "nope"]), None);
    assert_eq!(out.missing, vec![key("nope")]);
    // A recipient holding a copy already is skipped: c, farthest from the mean, holds
    // k3; b takes it.
    fetched(&mut h, b, &["k1", "k2"]);
    fetched(&mut h, c, &["k3"]);
    h.clear_log();
    let out = rebalance(&mut h, Some(&["k1", "k2", "k3"]), None);
    assert_eq!(out.moves, vec![(a, b, h.t("k3"))]);
    assert_eq!(h.ops("acquire"), ["k3@tcp://b<-tcp://a"]);
}

#[test]
fn reduce_replicas_keeps_one_copy_and_those_running_dependents_need() {
    let mut h = H::new();
    let a = h.worker("tcp://a", 1);
    let b = h.worker("tcp://b", 1);
    let c = h.worker("tcp://c", 1);
    scatter(
        &mut h,
        vec![
            item("x", 10, &["tcp://a", "tcp://b", "tcp://c"]),
            item("y", 10, &["tcp://a", "tcp://b"]),
        ],
    );
    scatter(&mut h, vec![item("big", 500, &["tcp://c"])]);
    let now = h.tick_time(0.01);
    assert_eq!(h.s.reduce_replicas(now), 3);
    h.drain();
    // The most loaded drop first, counting what the pass dropped: c, then b (a tie:
    // the last address); then a, holding more than b now.
    assert_eq!(holders(&h, "x"), ["tcp://a"]);
    assert_eq!(holders(&h, "y"), ["tcp://b"]);
    let _ = (a, b, c);
}

#[test]
fn reduce_replicas_spares_a_copy_a_processing_dependent_uses() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    scatter(&mut h, vec![item("x", 10, &["tcp://a", "tcp://b"])]);
    h.submit(&[("z", &["x"])], &["z"]).unwrap();
    h.drain();
    let on = h.worker_of("z").unwrap();
    let now = h.tick_time(0.01);
    assert_eq!(h.s.reduce_replicas(now), 1);
    h.drain();
    assert_eq!(holders(&h, "x"), [on]);
}

#[test]
fn the_periodic_pass_runs_on_ticks_while_started() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    assert!(!h.s.amm_running());
    assert!(h.s.amm_start(0.0).is_err());
    h.s.amm_start(2.0).unwrap();
    assert!(h.s.amm_running());
    scatter(&mut h, vec![item("x", 10, &["tcp://a", "tcp://b"])]);
    tick(&mut h, 0.1);
    assert_eq!(
        holders(&h, "x").len(),
        1,
        "the first pass runs at the first tick"
    );
    scatter(&mut h, vec![item("y", 10, &["tcp://a", "tcp://b"])]);
    tick(&mut h, 0.1);
    assert_eq!(holders(&h, "y").len(), 2, "not due yet");
    tick(&mut h, 2.0);
    assert_eq!(holders(&h, "y").len(), 1);
    h.s.amm_stop();
    assert!(!h.s.amm_running());
    scatter(&mut h, vec![item("w", 10, &["tcp://a", "tcp://b"])]);
    tick(&mut h, 5.0);
    assert_eq!(holders(&h, "w").len(), 2);
}

#[test]
fn replicate_copies_are_not_reduced_while_under_way_and_forgetting_clears_them() {
    let mut h = H::new();
    h.worker("tcp://a", 1);
    h.worker("tcp://b", 1);
    h.worker("tcp://c", 1);
    scatter(&mut h, vec![item("x", 10, &["tcp://a", "tcp://b"])]);
    assert_eq!(replicate(&mut h, &["x"], None, None), 1);
    let now = h.tick_time(0.01);
    assert_eq!(h.s.reduce_replicas(now), 0);
    h.release(&["x"]);
    assert!(h.s.lookup(&key("x")).is_none());
    assert_eq!(h.s.moves_pending(), 0);
}
