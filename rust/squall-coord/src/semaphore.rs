//! Semaphores, by name: at most `max_leases` leases at once, waiting acquires granted in
//! arrival order as leases come back. A `Lock` is a semaphore of one lease.

use crate::line::Line;
use crate::{Coord, Holder, Outcome, Place, RequestId, Waiter};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
pub(crate) struct Semaphore {
    pub max_leases: u32,
    /// (holder, the id of the acquire that took it).
    pub leases: BTreeSet<(Holder, RequestId)>,
    pub waiters: VecDeque<Waiter>,
}

impl<K: Clone + Ord + Hash> Coord<K> {
    /// `acquire`: a lease of semaphore `name` (made with `max_leases` if new; naming an
    /// existing one with another `max_leases` fails), now, or when one comes back
    /// before `timeout` seconds (None: forever). Answers `Granted` or `TimedOut`.
    #[allow(clippy::too_many_arguments)]
    pub fn semaphore_acquire(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        max_leases: u32,
        timeout: Option<f64>,
        now: f64,
    ) {
        self.at(now);
        if let Some(error) = self.semaphore_refusal(name, max_leases, timeout) {
            return self.answer(holder, request, Outcome::Failed(error));
        }
        let sem = self
            .semaphores
            .entry(name.to_owned())
            .or_insert_with(|| Semaphore {
                max_leases,
                leases: BTreeSet::new(),
                waiters: VecDeque::new(),
            });
        if sem.leases.len() < sem.max_leases as usize {
            sem.leases.insert((holder, request));
            self.answer(holder, request, Outcome::Granted);
        } else {
            self.wait_in::<Semaphore>(name, holder, request, timeout);
        }
    }

    fn semaphore_refusal(
        &self,
        name: &str,
        max_leases: u32,
        timeout: Option<f64>,
    ) -> Option<String> {
        if Self::bad_timeout(timeout) {
            return Some("timeout is not a number".into());
        }
        if max_leases == 0 {
            return Some("max_leases must be at least 1".into());
        }
        match self.semaphores.get(name) {
            Some(sem) if sem.max_leases != max_leases => Some(format!(
                "Inconsistent max leases: {max_leases}, expected: {}",
                sem.max_leases
            )),
            _ => None,
        }
    }

    /// `release`: gives back `holder`'s lease `lease` (the id of the acquire that took
    /// it); a lease not held (released already, or taken back when its holder left) is
    /// ignored. Answers `Done`.
    pub fn semaphore_release(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        lease: RequestId,
        now: f64,
    ) {
        self.at(now);
        if let Some(sem) = self.semaphores.get_mut(name) {
            if sem.leases.remove(&(holder, lease)) {
                self.grant_waiting(name);
            }
        }
        self.answer(holder, request, Outcome::Done);
    }

    /// `get_value`: the number of leases held (0 for an unknown semaphore).
    pub fn semaphore_value(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        let n = self.semaphores.get(name).map_or(0, |s| s.leases.len());
        self.answer(holder, request, Outcome::Count(n as u64));
    }

    /// `close`: forgets the semaphore; its leases are gone and its waiting acquires
    /// answered `TimedOut` (not acquired).
    pub fn semaphore_close(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        if let Some(sem) = self.semaphores.remove(name) {
            self.answer_waiters(&sem.waiters, Outcome::TimedOut);
        }
        self.answer(holder, request, Outcome::Done);
    }

    /// Grants leases to waiters, oldest first, while there are any to give.
    fn grant_waiting(&mut self, name: &str) {
        loop {
            let Some(sem) = self.semaphores.get_mut(name) else {
                return;
            };
            if sem.leases.len() >= sem.max_leases as usize {
                return;
            }
            let Some(w) = sem.waiters.pop_front() else {
                return;
            };
            sem.leases.insert((w.holder, w.request));
            self.unschedule(&w);
            self.answer(w.holder, w.request, Outcome::Granted);
        }
    }

    pub(crate) fn semaphores_holder_gone(&mut self, holder: Holder) {
        let names: Vec<String> = self.semaphores.keys().cloned().collect();
        for name in names {
            let sem = self.semaphores.get_mut(&name).expect("listed");
            sem.leases.retain(|(h, _)| *h != holder);
            self.line_holder_gone::<Semaphore>(&name, holder);
            self.grant_waiting(&name);
        }
    }
}

/// A semaphore is kept until it is closed (its `max_leases` with it).
impl<K> Line<K> for Semaphore {
    fn table(coord: &mut Coord<K>) -> &mut BTreeMap<String, Self> {
        &mut coord.semaphores
    }
    fn place(name: &str) -> Place {
        Place::Semaphore(name.to_owned())
    }
    fn waiters(&mut self) -> &mut VecDeque<Waiter> {
        &mut self.waiters
    }
    fn idle(&self) -> bool {
        false
    }
}
