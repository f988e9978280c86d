//! Events, by name: a flag, false until set; waits return once it is set. An event
//! that is clear and waited on by no one is forgotten (clear is the default).

use crate::{Coord, Holder, Outcome, Place, RequestId, Waiter};
use std::collections::VecDeque;
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
        if Self::bad_timeout(timeout) {
            return self.answer(
                holder,
                request,
                Outcome::Failed("timeout is not a number".into()),
            );
        }
        if self.events.get(name).is_some_and(|e| e.set) {
            self.answer(holder, request, Outcome::Granted);
        } else if timeout.is_some_and(|t| t <= 0.0) {
            self.answer(holder, request, Outcome::TimedOut);
        } else {
            let w = self.waiter(Place::Event(name.to_owned()), holder, request, timeout);
            self.events
                .entry(name.to_owned())
                .or_default()
                .waiters
                .push_back(w);
        }
    }

    /// `Event.set`: the flag is true and every waiter returns. Answers `Done`.
    pub fn event_set(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        let e = self.events.entry(name.to_owned()).or_default();
        e.set = true;
        let waiters = std::mem::take(&mut e.waiters);
        for w in waiters {
            self.unschedule(&w);
            self.answer(w.holder, w.request, Outcome::Granted);
        }
        self.answer(holder, request, Outcome::Done);
    }

    /// `Event.clear`: the flag is false. Answers `Done`.
    pub fn event_clear(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        if let Some(e) = self.events.get_mut(name) {
            e.set = false;
        }
        self.forget_idle_event(name);
        self.answer(holder, request, Outcome::Done);
    }

    /// `Event.is_set`: `Count(1)` if set, else `Count(0)`.
    pub fn event_is_set(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        let set = self.events.get(name).is_some_and(|e| e.set);
        self.answer(holder, request, Outcome::Count(u64::from(set)));
    }

    fn forget_idle_event(&mut self, name: &str) {
        if self
            .events
            .get(name)
            .is_some_and(|e| !e.set && e.waiters.is_empty())
        {
            self.events.remove(name);
        }
    }

    pub(crate) fn event_timed_out(&mut self, name: &str, holder: Holder, request: RequestId) {
        if let Some(e) = self.events.get_mut(name) {
            if Self::take_waiter(&mut e.waiters, holder, request).is_some() {
                self.answer(holder, request, Outcome::TimedOut);
            }
        }
        self.forget_idle_event(name);
    }

    pub(crate) fn events_holder_gone(&mut self, holder: Holder) {
        let names: Vec<String> = self.events.keys().cloned().collect();
        for name in names {
            let mut waiters =
                std::mem::take(&mut self.events.get_mut(&name).expect("listed").waiters);
            self.fail_waiters_of(&mut waiters, holder);
            self.events.get_mut(&name).expect("listed").waiters = waiters;
            self.forget_idle_event(&name);
        }
    }
}
