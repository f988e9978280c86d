//! Waiting requests, as every primitive keeps them: a line in arrival order, whose
//! members time out or leave with their holder. [`Line`] is a named primitive with one
//! such line (a semaphore, an event, a variable); its waits, time-outs and departures
//! are handled here once for all of them.

use crate::{Coord, Holder, Outcome, Place, RequestId, Waiter};
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;

const HOLDER_GONE: &str = "its client or worker left";

/// A named primitive whose requests wait in one line.
pub(crate) trait Line<K>: Sized {
    /// The primitives of this kind, by name.
    fn table(coord: &mut Coord<K>) -> &mut BTreeMap<String, Self>;
    /// Where the deadlines of its waiters point.
    fn place(name: &str) -> Place;
    fn waiters(&mut self) -> &mut VecDeque<Waiter>;
    /// Whether it can be forgotten: it is in its default state and nobody waits.
    fn idle(&self) -> bool;
}

impl<K: Clone + Ord + Hash> Coord<K> {
    /// Answers `Failed` if `timeout` is NaN (true: answered).
    pub(crate) fn refuse_timeout(
        &mut self,
        holder: Holder,
        request: RequestId,
        timeout: Option<f64>,
    ) -> bool {
        let bad = Self::bad_timeout(timeout);
        if bad {
            let why = "timeout is not a number".into();
            self.answer(holder, request, Outcome::Failed(why));
        }
        bad
    }

    /// Whether `timeout` is unusable: a number that is NaN (None is forever).
    pub(crate) fn bad_timeout(timeout: Option<f64>) -> bool {
        timeout.is_some_and(f64::is_nan)
    }

    /// A request that cannot be answered yet: `TimedOut` at once if `timeout` is zero
    /// or less, else it waits in the line of `name` (which the caller made).
    pub(crate) fn wait_in<T: Line<K>>(
        &mut self,
        name: &str,
        holder: Holder,
        request: RequestId,
        timeout: Option<f64>,
    ) {
        if timeout.is_some_and(|t| t <= 0.0) {
            self.answer(holder, request, Outcome::TimedOut);
            self.forget_if_idle::<T>(name);
        } else {
            let w = self.waiter(T::place(name), holder, request, timeout);
            let line = T::table(self).get_mut(name).expect("made by the caller");
            line.waiters().push_back(w);
        }
    }

    /// The deadline of `(holder, request)`, waiting in the line of `name`, passed.
    pub(crate) fn line_timed_out<T: Line<K>>(
        &mut self,
        name: &str,
        holder: Holder,
        request: RequestId,
    ) {
        if let Some(line) = T::table(self).get_mut(name) {
            if take_waiter(line.waiters(), holder, request).is_some() {
                self.answer(holder, request, Outcome::TimedOut);
            }
        }
        self.forget_if_idle::<T>(name);
    }

    /// `holder` left: its requests waiting in the line of `name` are answered `Failed`.
    pub(crate) fn line_holder_gone<T: Line<K>>(&mut self, name: &str, holder: Holder) {
        let line = T::table(self).get_mut(name).expect("known");
        let gone = take_waiters_of(line.waiters(), holder);
        self.fail_gone(gone.iter().map(AsRef::as_ref));
        self.forget_if_idle::<T>(name);
    }

    /// `holder` left: its requests waiting in every line of this kind are answered
    /// `Failed`.
    pub(crate) fn lines_holder_gone<T: Line<K>>(&mut self, holder: Holder) {
        let names: Vec<String> = T::table(self).keys().cloned().collect();
        for name in names {
            self.line_holder_gone::<T>(&name, holder);
        }
    }

    pub(crate) fn forget_if_idle<T: Line<K>>(&mut self, name: &str) {
        let table = T::table(self);
        if table.get(name).is_some_and(T::idle) {
            table.remove(name);
        }
    }

    /// Answers `outcome` to waiters taken out of their line.
    pub(crate) fn answer_waiters<'a>(
        &mut self,
        waiters: impl IntoIterator<Item = &'a Waiter>,
        outcome: Outcome<K>,
    ) {
        for w in waiters {
            self.unschedule(w);
            self.answer(w.holder, w.request, outcome.clone());
        }
    }

    /// Answers `Failed` to waiters taken out of their line because their holder left.
    pub(crate) fn fail_gone<'a>(&mut self, gone: impl IntoIterator<Item = &'a Waiter>) {
        self.answer_waiters(gone, Outcome::Failed(HOLDER_GONE.into()));
    }
}

impl AsRef<Waiter> for Waiter {
    fn as_ref(&self) -> &Waiter {
        self
    }
}

/// Removes `(holder, request)`'s entry from `list` (None if it is not there).
pub(crate) fn take_waiter<T: AsRef<Waiter>>(
    list: &mut VecDeque<T>,
    holder: Holder,
    request: RequestId,
) -> Option<T> {
    let i = list.iter().position(|x| {
        let w = x.as_ref();
        w.holder == holder && w.request == request
    })?;
    list.remove(i)
}

/// Removes the entries of `holder` from `list`, and returns them in order.
pub(crate) fn take_waiters_of<T: AsRef<Waiter>>(
    list: &mut VecDeque<T>,
    holder: Holder,
) -> VecDeque<T> {
    let (gone, kept): (VecDeque<T>, VecDeque<T>) =
        list.drain(..).partition(|x| x.as_ref().holder == holder);
    *list = kept;
    gone
}
