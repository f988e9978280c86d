//! Variables, by name: one value (bytes, and the futures' keys it holds alive), gets
//! waiting until there is one.

use crate::line::Line;
use crate::{Coord, Holder, Outcome, Owner, Place, RequestId, Value, Waiter};
use std::collections::{BTreeMap, VecDeque};
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
        if self.refuse_timeout(holder, request, timeout) {
            return;
        }
        let var = self.variables.entry(name.to_owned()).or_default();
        if let Some(v) = var.value.clone() {
            self.hand_over(holder, request, vec![v]);
        } else {
            self.wait_in::<VariableState<K>>(name, holder, request, timeout);
        }
    }

    /// `Variable.delete`: forgets the value and releases its keys (gets still waiting
    /// go on waiting for a new one). Answers `Done`.
    pub fn variable_delete(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        if let Some(old) = self.variables.get_mut(name).and_then(|v| v.value.take()) {
            self.release(&Owner::Variable(name.to_owned()), &old.keys);
        }
        self.forget_if_idle::<VariableState<K>>(name);
        self.answer(holder, request, Outcome::Done);
    }
}

impl<K> Line<K> for VariableState<K> {
    fn table(coord: &mut Coord<K>) -> &mut BTreeMap<String, Self> {
        &mut coord.variables
    }
    fn place(name: &str) -> Place {
        Place::Variable(name.to_owned())
    }
    fn waiters(&mut self) -> &mut VecDeque<Waiter> {
        &mut self.waiters
    }
    fn idle(&self) -> bool {
        self.value.is_none() && self.waiters.is_empty()
    }
}
