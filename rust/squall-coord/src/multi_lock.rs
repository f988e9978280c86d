//! MultiLocks: named locks taken together. A request queues on each of its locks (the
//! least contended first) and is granted once it is first in line on `num_locks` of
//! them; it then leaves the lines where it is not first, so that a holder never blocks
//! a lock it did not need. Releasing (or timing out, or the holder leaving) leaves
//! every line, which may grant the requests behind.

use crate::{Coord, Holder, Outcome, Place, RequestId, Waiter};
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;

type Id = (Holder, RequestId);

#[derive(Debug, Default)]
pub(crate) struct MultiLocks {
    /// Each lock's line, first in line holds it.
    pub lines: BTreeMap<String, VecDeque<Id>>,
    pub requests: BTreeMap<Id, Request>,
}

#[derive(Debug)]
pub(crate) struct Request {
    pub names: Vec<String>,
    pub num_locks: usize,
    /// None once granted; the waiter (and its deadline) while waiting.
    pub waiting: Option<Waiter>,
}

impl<K: Clone + Ord + Hash> Coord<K> {
    /// `MultiLock.acquire`: `num_locks` of the locks `names` (all if None), now or before
    /// `timeout` seconds (None: forever). Answers `Granted` or `TimedOut`; the lock is
    /// named by the holder and this request's id.
    #[allow(clippy::too_many_arguments)]
    pub fn multi_lock_acquire(
        &mut self,
        holder: Holder,
        request: RequestId,
        names: &[String],
        num_locks: Option<usize>,
        timeout: Option<f64>,
        now: f64,
    ) {
        self.at(now);
        let mut names: Vec<String> = names.to_vec();
        names.sort();
        names.dedup();
        let num_locks = num_locks.unwrap_or(names.len());
        let id = (holder, request);
        if Self::bad_timeout(timeout)
            || num_locks > names.len()
            || self.multi.requests.contains_key(&id)
        {
            let why = format!("cannot take {num_locks} of the locks {names:?}");
            return self.answer(holder, request, Outcome::Failed(why));
        }
        // The least contended lines first (ties by name, for determinism).
        names.sort_by_key(|n| self.multi.lines.get(n).map_or(0, VecDeque::len));
        for n in &names {
            self.multi.lines.entry(n.clone()).or_default().push_back(id);
        }
        self.multi.requests.insert(
            id,
            Request {
                names,
                num_locks,
                waiting: None,
            },
        );
        if self.fronts(id) >= num_locks {
            self.leave_lines(id, false);
            return self.answer(holder, request, Outcome::Granted);
        }
        if timeout.is_some_and(|t| t <= 0.0) {
            self.drop_request(id);
            return self.answer(holder, request, Outcome::TimedOut);
        }
        let w = self.waiter(Place::MultiLock, holder, request, timeout);
        self.multi.requests.get_mut(&id).expect("inserted").waiting = Some(w);
    }

    /// `MultiLock.release`: gives back the locks the acquire `lease` took (ignored if
    /// they are not held). Answers `Done`.
    pub fn multi_lock_release(
        &mut self,
        holder: Holder,
        request: RequestId,
        lease: RequestId,
        now: f64,
    ) {
        self.at(now);
        let id = (holder, lease);
        if self
            .multi
            .requests
            .get(&id)
            .is_some_and(|r| r.waiting.is_none())
        {
            self.drop_request(id);
        }
        self.answer(holder, request, Outcome::Done);
    }

    /// On how many of its lines `id` is first.
    fn fronts(&self, id: Id) -> usize {
        let r = &self.multi.requests[&id];
        r.names
            .iter()
            .filter(|n| self.multi.lines.get(*n).and_then(|l| l.front()) == Some(&id))
            .count()
    }

    /// `id` leaves its lines (all of them, or only those where it is not first), then
    /// the requests that became first on enough lines are granted, and so on.
    fn leave_lines(&mut self, id: Id, all: bool) {
        let mut promoted = Vec::new();
        let names = self.multi.requests[&id].names.clone();
        let mut kept = Vec::new();
        for n in names {
            let line = self.multi.lines.get_mut(&n).expect("queued on it");
            if !all && line.front() == Some(&id) {
                kept.push(n);
                continue;
            }
            let was_first = line.front() == Some(&id);
            line.retain(|x| *x != id);
            if was_first {
                promoted.extend(line.front().copied());
            }
            if line.is_empty() {
                self.multi.lines.remove(&n);
            }
        }
        self.multi.requests.get_mut(&id).expect("known").names = kept;
        for next in promoted {
            let Some(r) = self.multi.requests.get(&next) else {
                continue;
            };
            if r.waiting.is_some() && self.fronts(next) >= r.num_locks {
                let w = self
                    .multi
                    .requests
                    .get_mut(&next)
                    .and_then(|r| r.waiting.take())
                    .expect("waiting");
                self.unschedule(&w);
                self.leave_lines(next, false);
                self.answer(w.holder, w.request, Outcome::Granted);
            }
        }
    }

    /// Forgets request `id`, leaving all its lines.
    fn drop_request(&mut self, id: Id) {
        self.leave_lines(id, true);
        self.multi.requests.remove(&id);
    }

    pub(crate) fn multi_lock_timed_out(&mut self, holder: Holder, request: RequestId) {
        let id = (holder, request);
        if self
            .multi
            .requests
            .get(&id)
            .is_some_and(|r| r.waiting.is_some())
        {
            self.drop_request(id);
            self.answer(holder, request, Outcome::TimedOut);
        }
    }

    pub(crate) fn multi_lock_holder_gone(&mut self, holder: Holder) {
        let ids: Vec<Id> = self
            .multi
            .requests
            .keys()
            .filter(|(h, _)| *h == holder)
            .copied()
            .collect();
        for id in ids {
            let waiting = self
                .multi
                .requests
                .get_mut(&id)
                .and_then(|r| r.waiting.take());
            self.drop_request(id);
            self.fail_gone(&waiting);
        }
    }
}
