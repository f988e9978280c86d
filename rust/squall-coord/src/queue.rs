//! Queues, by name: values in arrival order, at most `maxsize` of them (0: no bound).
//! Gets wait for values and puts for room, each line served in arrival order. The
//! queue holds the keys of the futures in its values, waiting puts' included, until a
//! get hands them to its client. A queue lives until the last client that used it
//! closes it.

use crate::line::{take_waiter, take_waiters_of};
use crate::{Coord, Holder, Outcome, Owner, Place, RequestId, Value, Waiter};
use std::collections::{BTreeSet, VecDeque};
use std::hash::Hash;

/// How many values a get takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    /// One value, waiting for it (`batch=False`).
    One,
    /// Every value queued now, none to wait for (`batch=True`).
    All,
    /// This many, waiting for each (`batch=n`; no timeout).
    Count(usize),
}

#[derive(Debug)]
pub(crate) struct Getter<K> {
    pub w: Waiter,
    pub want: usize,
    /// Values taken so far by a batch still waiting for more (held by the queue).
    pub got: Vec<Value<K>>,
}

#[derive(Debug)]
pub(crate) struct Putter<K> {
    pub w: Waiter,
    pub value: Value<K>,
}

#[derive(Debug)]
pub(crate) struct QueueState<K> {
    pub maxsize: usize,
    pub items: VecDeque<Value<K>>,
    pub getters: VecDeque<Getter<K>>,
    pub putters: VecDeque<Putter<K>>,
    /// The holders that used it and did not close it.
    pub users: BTreeSet<Holder>,
}

impl<K> QueueState<K> {
    pub fn has_room(&self) -> bool {
        self.maxsize == 0 || self.items.len() < self.maxsize
    }
}

impl<K: Clone + Ord + Hash> Coord<K> {
    /// The queue `name`, made with `maxsize` on first use; `holder` is among its users.
    fn queue(&mut self, name: &str, maxsize: usize, holder: Holder) -> &mut QueueState<K> {
        let q = self
            .queues
            .entry(name.to_owned())
            .or_insert_with(|| QueueState {
                maxsize,
                items: VecDeque::new(),
                getters: VecDeque::new(),
                putters: VecDeque::new(),
                users: BTreeSet::new(),
            });
        q.users.insert(holder);
        q
    }

    /// `Queue.put`: `Done` once the value is queued (at once if there is room), or
    /// `TimedOut` if no room came within `timeout` seconds (None: forever).
    #[allow(clippy::too_many_arguments)]
    pub fn queue_put(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        maxsize: usize,
        value: Value<K>,
        timeout: Option<f64>,
        now: f64,
    ) {
        self.at(now);
        if self.refuse_timeout(holder, request, timeout) {
            return;
        }
        let q = self.queue(name, maxsize, holder);
        let room = q.has_room() && q.putters.is_empty();
        if !room && timeout.is_some_and(|t| t <= 0.0) {
            return self.answer(holder, request, Outcome::TimedOut);
        }
        self.hold(&Owner::Queue(name.to_owned()), &value.keys);
        if room {
            self.queues
                .get_mut(name)
                .expect("made")
                .items
                .push_back(value);
            self.answer(holder, request, Outcome::Done);
            self.serve_queue(name);
        } else {
            let w = self.waiter(Place::QueuePut(name.to_owned()), holder, request, timeout);
            let q = self.queues.get_mut(name).expect("made");
            q.putters.push_back(Putter { w, value });
        }
    }

    /// `Queue.get`: `Values` (their keys then held by the getter's client): one value,
    /// waiting up to `timeout` seconds (None: forever; then `TimedOut`); or every value
    /// queued now; or `n` of them, waiting as long as it takes.
    #[allow(clippy::too_many_arguments)]
    pub fn queue_get(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        maxsize: usize,
        batch: Batch,
        timeout: Option<f64>,
        now: f64,
    ) {
        self.at(now);
        if self.refuse_timeout(holder, request, timeout) {
            return;
        }
        if matches!(batch, Batch::Count(_)) && timeout.is_some() {
            let why =
                "Dask queues don't support simultaneous use of integer batch sizes and timeouts";
            return self.answer(holder, request, Outcome::Failed(why.into()));
        }
        let q = self.queue(name, maxsize, holder);
        let want = match batch {
            Batch::One => 1,
            Batch::Count(n) => n,
            Batch::All => {
                // What waiting puts would add counts as queued now.
                let mut values: Vec<Value<K>> = q.items.drain(..).collect();
                let putters: Vec<Putter<K>> = q.putters.drain(..).collect();
                for p in putters {
                    self.unschedule(&p.w);
                    self.answer(p.w.holder, p.w.request, Outcome::Done);
                    values.push(p.value);
                }
                return self.give(name, holder, request, values);
            }
        };
        let idle = q.items.is_empty() && q.putters.is_empty();
        if idle && timeout.is_some_and(|t| t <= 0.0) {
            return self.answer(holder, request, Outcome::TimedOut);
        }
        let w = self.waiter(Place::QueueGet(name.to_owned()), holder, request, timeout);
        let q = self.queues.get_mut(name).expect("made");
        q.getters.push_back(Getter {
            w,
            want,
            got: Vec::new(),
        });
        self.serve_queue(name);
    }

    /// `Queue.qsize`: `Count` of the values queued.
    pub fn queue_size(
        &mut self,
        holder: Holder,
        request: RequestId,
        name: &str,
        maxsize: usize,
        now: f64,
    ) {
        self.at(now);
        let n = self.queue(name, maxsize, holder).items.len();
        self.answer(holder, request, Outcome::Count(n as u64));
    }

    /// `Queue.close`: `holder` no longer uses the queue; after the last user, the queue
    /// is forgotten with its values (their keys released), and the requests still
    /// waiting on it answered `Failed`. Answers `Done`.
    pub fn queue_close(&mut self, holder: Holder, request: RequestId, name: &str, now: f64) {
        self.at(now);
        let last = self.queues.get_mut(name).is_some_and(|q| {
            q.users.remove(&holder);
            q.users.is_empty()
        });
        if last {
            let q = self.queues.remove(name).expect("checked");
            let owner = Owner::Queue(name.to_owned());
            for v in &q.items {
                self.release(&owner, &v.keys);
            }
            for g in q.getters {
                self.unschedule(&g.w);
                for v in &g.got {
                    self.release(&owner, &v.keys);
                }
                self.answer(
                    g.w.holder,
                    g.w.request,
                    Outcome::Failed("the queue was closed".into()),
                );
            }
            for p in q.putters {
                self.unschedule(&p.w);
                self.release(&owner, &p.value.keys);
                self.answer(
                    p.w.holder,
                    p.w.request,
                    Outcome::Failed("the queue was closed".into()),
                );
            }
        }
        self.answer(holder, request, Outcome::Done);
    }

    /// Answers a get with `values`: its client holds their keys, then the queue not.
    fn give(&mut self, name: &str, holder: Holder, request: RequestId, values: Vec<Value<K>>) {
        let keys: Vec<K> = values.iter().flat_map(|v| v.keys.iter().cloned()).collect();
        self.hand_over(holder, request, values);
        self.release(&Owner::Queue(name.to_owned()), &keys);
    }

    /// Hands values to waiting gets and admits waiting puts, in arrival order, while
    /// either can go on.
    fn serve_queue(&mut self, name: &str) {
        loop {
            let Some(q) = self.queues.get_mut(name) else {
                return;
            };
            if q.getters.front().is_some_and(|g| g.got.len() >= g.want) {
                let g = q.getters.pop_front().expect("checked");
                self.unschedule(&g.w);
                self.give(name, g.w.holder, g.w.request, g.got);
            } else if !q.getters.is_empty() && !q.items.is_empty() {
                let v = q.items.pop_front().expect("checked");
                q.getters.front_mut().expect("checked").got.push(v);
            } else if q.has_room() && !q.putters.is_empty() {
                let p = q.putters.pop_front().expect("checked");
                q.items.push_back(p.value);
                self.unschedule(&p.w);
                self.answer(p.w.holder, p.w.request, Outcome::Done);
            } else {
                return;
            }
        }
    }

    pub(crate) fn queue_get_timed_out(&mut self, name: &str, holder: Holder, request: RequestId) {
        let Some(q) = self.queues.get_mut(name) else {
            return;
        };
        let Some(g) = take_waiter(&mut q.getters, holder, request) else {
            return;
        };
        // Only single gets time out, and they take nothing before they are answered.
        for v in g.got.into_iter().rev() {
            q.items.push_front(v);
        }
        self.answer(holder, request, Outcome::TimedOut);
        self.serve_queue(name);
    }

    pub(crate) fn queue_put_timed_out(&mut self, name: &str, holder: Holder, request: RequestId) {
        let Some(q) = self.queues.get_mut(name) else {
            return;
        };
        let Some(p) = take_waiter(&mut q.putters, holder, request) else {
            return;
        };
        self.release(&Owner::Queue(name.to_owned()), &p.value.keys);
        self.answer(holder, request, Outcome::TimedOut);
    }

    pub(crate) fn queues_holder_gone(&mut self, holder: Holder) {
        let names: Vec<String> = self.queues.keys().cloned().collect();
        for name in names {
            let q = self.queues.get_mut(&name).expect("listed");
            q.users.remove(&holder);
            let gone = take_waiters_of(&mut q.getters, holder);
            // Values a gone batch had taken go back to the front, in order.
            for v in gone.iter().rev().flat_map(|g| g.got.iter().rev()) {
                q.items.push_front(v.clone());
            }
            let gone_puts = take_waiters_of(&mut q.putters, holder);
            self.fail_gone(gone.iter().map(AsRef::as_ref));
            for p in gone_puts {
                self.release(&Owner::Queue(name.clone()), &p.value.keys);
                self.fail_gone([&p.w]);
            }
            self.serve_queue(&name);
        }
    }
}

impl<K> AsRef<Waiter> for Getter<K> {
    fn as_ref(&self) -> &Waiter {
        &self.w
    }
}

impl<K> AsRef<Waiter> for Putter<K> {
    fn as_ref(&self) -> &Waiter {
        &self.w
    }
}
