//! Events, by name: a flag, false until set; waits return once it is set. An event
//! that is clear and waited on by no one is forgotten (clear is the default).

use crate::line::Line;
use crate::{Coord, Holder, Outcome, Place, RequestId, Waiter};
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;

#[derive(Debug, Default)]
pub(crate) struct EventState {
    pub set: bool,
    pub waiters: VecDeque<Waiter>,
}

impl<K: Clone + Ord + Hash> Coord<K> {
    /// `Event.wait`: `Granted` once the event is set (at once if it is), `TimedOut` if
    /// it is not within `timeout` seconds (None: forever).
    pub fn event_wait(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        timeout: Option<f64>,
        now: f64,
    ) {
        self.at(now);
        if self.refuse_timeout(holder, request, timeout) {
            return;
        }
        let e = self.events.entry(name.to_owned()).or_default();
        if e.set {
            self.answer(holder, request, Outcome::Granted);
        } else {
            self.wait_in::<EventState>(name, holder, request, timeout);
        }
    }

    /// `Event.set`: the flag is true and every waiter returns. Answers `Done`.
    pub fn event_set(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        let e = self.events.entry(name.to_owned()).or_default();
        e.set = true;
        let waiters = std::mem::take(&mut e.waiters);
        self.answer_waiters(&waiters, Outcome::Granted);
        self.answer(holder, request, Outcome::Done);
    }

    /// `Event.clear`: the flag is false. Answers `Done`.
    pub fn event_clear(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        if let Some(e) = self.events.get_mut(name) {
            e.set = false;
        }
        self.forget_if_idle::<EventState>(name);
        self.answer(holder, request, Outcome::Done);
    }

    /// `Event.is_set`: `Count(1)` if set, else `Count(0)`.
    pub fn event_is_set(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        let set = self.events.get(name).is_some_and(|e| e.set);
        self.answer(holder, request, Outcome::Count(u64::from(set)));
    }
}

impl<K> Line<K> for EventState {
    fn table(coord: &mut Coord<K>) -> &mut BTreeMap<String, Self> {
        &mut coord.events
    }
    fn place(name: &str) -> Place {
        Place::Event(name.to_owned())
    }
    fn waiters(&mut self) -> &mut VecDeque<Waiter> {
        &mut self.waiters
    }
    fn idle(&self) -> bool {
        !self.set && self.waiters.is_empty()
    }
}
