//! `idle_task_count` (docs/scheduling.md#queuing): the running workers with a free
//! queuing slot, kept in address order and also ordered by load, then address, so that
//! the queuing choice (fewest processing tasks per thread, first in address order on
//! ties) is the first entry instead of a scan over every member — with thousands of
//! workers that scan was most of the scheduler's time per task
//! (docs/core.md#many-workers).

use crate::ids::WorkerId;
use crate::workerset::WorkerSet;
use std::collections::BTreeSet;

#[derive(Clone, Debug, Default)]
pub struct SlotSet {
    members: WorkerSet,
    /// `(load key, address rank, worker)` of every member: the first is the choice. One
    /// ordered set rather than a map of load → members: with tiny tasks the slot cap is
    /// large and each worker's load its own, so a group per load held one worker, and
    /// every task a worker was given or finished dropped a group and made one.
    by_load: BTreeSet<(u64, u32, WorkerId)>,
    /// Each member's load key, by worker index (None: not a member).
    key: Vec<Option<u64>>,
}

/// The map key of a load: for non-negative floats the order of the bits is the order
/// of the numbers, so the first entry is a least loaded worker.
fn load_key(load: f64) -> u64 {
    debug_assert!(load >= 0.0 && load.is_finite(), "load {load}");
    load.to_bits()
}

impl SlotSet {
    pub fn contains(&self, rank: u32, w: WorkerId) -> bool {
        self.members.contains(rank, w)
    }

    /// Members in address order.
    pub fn iter(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.members.iter()
    }

    /// Adds `w` with its current load, or moves it to its new load.
    pub fn insert(&mut self, rank: u32, w: WorkerId, load: f64) {
        let k = load_key(load);
        let i = w.idx();
        if self.key.len() <= i {
            self.key.resize(i + 1, None);
        }
        match self.key[i] {
            Some(old) if old == k => return,
            Some(old) => {
                self.by_load.remove(&(old, rank, w));
            }
            None => self.members.insert(rank, w),
        }
        self.by_load.insert((k, rank, w));
        self.key[i] = Some(k);
    }

    pub fn remove(&mut self, rank: u32, w: WorkerId) {
        if let Some(old) = self.key.get_mut(w.idx()).and_then(Option::take) {
            self.members.remove(rank, w);
            self.by_load.remove(&(old, rank, w));
        }
    }

    /// The least loaded member, the first in address order among equals.
    pub fn least_loaded(&self) -> Option<WorkerId> {
        self.by_load.first().map(|&(_, _, w)| w)
    }

    /// The load `w` was filed with, if it is a member.
    pub fn load_of(&self, w: WorkerId) -> Option<f64> {
        self.key.get(w.idx()).copied().flatten().map(f64::from_bits)
    }

    /// Address ranks changed (a worker joined or left).
    pub(crate) fn rerank(&mut self, rank: &[u32]) {
        self.members.rerank(rank);
        self.by_load = (self.by_load.iter())
            .map(|&(k, _, w)| (k, rank[w.idx()], w))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule the index replaces: a scan in address order keeping the first strict minimum.
    fn by_scan(model: &[(u32, WorkerId, f64)]) -> Option<WorkerId> {
        let mut sorted = model.to_vec();
        sorted.sort_by_key(|&(rank, w, _)| (rank, w));
        let mut best: Option<(f64, WorkerId)> = None;
        for (_, w, load) in sorted {
            if best.is_none_or(|(b, _)| load < b) {
                best = Some((load, w));
            }
        }
        best.map(|(_, w)| w)
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Worker, processing tasks, threads.
        Insert(u32, u32, u32),
        Remove(u32),
        /// Reverse the address order of all workers.
        Rerank,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..12, 0u32..6, 1u32..4).prop_map(|(w, p, n)| Op::Insert(w, p, n)),
            2 => (0u32..12).prop_map(Op::Remove),
            1 => Just(Op::Rerank),
        ]
    }

    proptest! {
        #[test]
        fn least_loaded_is_the_first_minimum_in_address_order(ops in prop::collection::vec(op(), 1..80)) {
            let mut set = SlotSet::default();
            let mut rank: Vec<u32> = (0..12).collect();
            let mut model: Vec<(u32, WorkerId, f64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(w, p, n) => {
                        let (w, load) = (WorkerId(w), f64::from(p) / f64::from(n));
                        set.insert(rank[w.idx()], w, load);
                        model.retain(|&(_, x, _)| x != w);
                        model.push((rank[w.idx()], w, load));
                    }
                    Op::Remove(w) => {
                        let w = WorkerId(w);
                        set.remove(rank[w.idx()], w);
                        model.retain(|&(_, x, _)| x != w);
                    }
                    Op::Rerank => {
                        for r in rank.iter_mut() {
                            *r = 11 - *r;
                        }
                        set.rerank(&rank);
                        for m in model.iter_mut() {
                            m.0 = rank[m.1.idx()];
                        }
                    }
                }
                prop_assert_eq!(set.least_loaded(), by_scan(&model));
                                let mut members: Vec<WorkerId> = model.iter().map(|m| m.1).collect();
                members.sort_by_key(|w| rank[w.idx()]);
                prop_assert_eq!(set.iter().collect::<Vec<_>>(), members);
                for &(_, w, load) in &model {
                    prop_assert_eq!(set.load_of(w), Some(load));
                }
            }
        }
    }
}
