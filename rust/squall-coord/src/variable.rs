//! Variables, by name: one value (bytes, and the futures' keys it holds alive), gets
//! waiting until there is one.

use crate::{Coord, Holder, Outcome, Owner, Place, RequestId, Value, Waiter};
use std::collections::VecDeque;
use std::hash::Hash;

#[derive(Debug)]
pub(crate) struct VariableState<K> {
    pub value: Option<Value<K>>,
    pub waiters: VecDeque<Waiter>,
}

impl<K> Default for VariableState<K> {
    fn default() -> Self {
        VariableState {
            value: None,
            waiters: VecDeque::new(),
        }
    }
}

impl<K: Clone + Ord + Hash> Coord<K> {
    /// `Variable.set`: the new value's keys are held before the old value's are
    /// released (a key in both stays alive); waiting gets receive it. Answers `Done`.
    pub fn variable_set(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        value: Value<K>,
        now: f64,
    ) {
        self.at(now);
        let owner = Owner::Variable(name.to_owned());
        self.hold(&owner, &value.keys);
        let var = self.variables.entry(name.to_owned()).or_default();
        let waiters = std::mem::take(&mut var.waiters);
        if let Some(old) = var.value.replace(value.clone()) {
            self.release(&owner, &old.keys);
        }
        for w in waiters {
            self.unschedule(&w);
            self.hand_over(w.holder, w.request, vec![value.clone()]);
        }
        self.answer(holder, request, Outcome::Done);
    }

    /// `Variable.get`: the value (its keys then held by the getter's client), at once or
    /// once set within `timeout` seconds (None: forever); else `TimedOut`.
    pub fn variable_get(
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
        if let Some(v) = self.variables.get(name).and_then(|v| v.value.clone()) {
            self.hand_over(holder, request, vec![v]);
        } else if timeout.is_some_and(|t| t <= 0.0) {
            self.answer(holder, request, Outcome::TimedOut);
        } else {
            let w = self.waiter(Place::Variable(name.to_owned()), holder, request, timeout);
            self.variables
                .entry(name.to_owned())
                .or_default()
                .waiters
                .push_back(w);
        }
    }

    /// `Variable.delete`: forgets the value and releases its keys (gets still waiting
    /// go on waiting for a new one). Answers `Done`.
    pub fn variable_delete(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        if let Some(old) = self.variables.get_mut(name).and_then(|v| v.value.take()) {
            self.release(&Owner::Variable(name.to_owned()), &old.keys);
        }
        self.forget_idle_variable(name);
        self.answer(holder, request, Outcome::Done);
    }

    fn forget_idle_variable(&mut self, name: &str) {
        if self
            .variables
            .get(name)
            .is_some_and(|v| v.value.is_none() && v.waiters.is_empty())
        {
            self.variables.remove(name);
        }
    }

    pub(crate) fn variable_timed_out(&mut self, name: &str, holder: Holder, request: RequestId) {
        if let Some(v) = self.variables.get_mut(name) {
            if Self::take_waiter(&mut v.waiters, holder, request).is_some() {
                self.answer(holder, request, Outcome::TimedOut);
            }
        }
        self.forget_idle_variable(name);
    }

    pub(crate) fn variables_holder_gone(&mut self, holder: Holder) {
        let names: Vec<String> = self.variables.keys().cloned().collect();
        for name in names {
            let mut waiters =
                std::mem::take(&mut self.variables.get_mut(&name).expect("listed").waiters);
            self.fail_waiters_of(&mut waiters, holder);
            self.variables.get_mut(&name).expect("listed").waiters = waiters;
            self.forget_idle_variable(&name);
        }
    }
}
