//! squall-coord: the state and policy of the coordination primitives — `Semaphore`
//! (and `Lock`, a semaphore of one lease), `MultiLock`, `Event`, `Variable`, `Queue` —
//! as a pure, deterministic, sans-IO state machine (docs/primitives.md).
//!
//! Every event is a [`Coord`] method that carries the time it happened; a waiting
//! request (an acquire, an event's wait, a variable's or a queue's get, a put into a
//! full queue) carries an optional timeout, turned into a deadline here, so that the
//! I/O layer arms one timer for [`Coord::next_deadline`] and calls [`Coord::expire`].
//! What to do comes out as [`Command`]s ([`Coord::take_commands`]): every request gets
//! exactly one [`Command::Answer`], addressed to its holder and request id, and the
//! keys of futures stored in variables and queues are held and released through
//! [`Command::Hold`] and [`Command::Release`]. Values are opaque bytes: the scheduler
//! never unpickles user data.

mod event;
mod line;
mod multi_lock;
mod queue;
mod semaphore;
mod validate;
mod variable;

#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use event::EventState;
use semaphore::Semaphore;
use variable::VariableState;

pub use queue::Batch;

/// Who holds leases and waits: the scheduler's id of a client connection (a user's
/// client, or a worker's task client).
pub type Holder = u32;
/// A request's id, unique per holder; the answer carries it back. A granted acquire's
/// id names the lease it took (the release names it again).
pub type RequestId = u64;

/// A value stored in a variable or a queue: its bytes, and the keys of the futures it
/// contains, which stay alive while the value is stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Value<K> {
    pub data: Vec<u8>,
    pub keys: Vec<K>,
}

/// Who holds a future's key: a variable or a queue (a pseudo-client of the scheduler,
/// by name), or a client that was handed the value (its own futures hold it from then).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    Variable(String),
    Queue(String),
    Client(Holder),
}

/// What a request is answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<K> {
    /// Acquired, the event is set, the put was accepted.
    Granted,
    /// Done (a release, a set, a clear, a delete, a close).
    Done,
    /// The deadline passed first (an acquire or a wait is false; a get or a put raises).
    TimedOut,
    /// A count: leases held, items queued, an event's flag (0 or 1).
    Count(u64),
    /// The values a get takes (one, or a batch).
    Values(Vec<Value<K>>),
    /// Refused, or dropped (its holder was removed, its primitive closed): why.
    Failed(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command<K> {
    Answer {
        holder: Holder,
        request: RequestId,
        outcome: Outcome<K>,
    },
    /// `owner` now holds these keys (each was not held by it before).
    Hold { owner: Owner, keys: Vec<K> },
    /// `owner` no longer holds these keys.
    Release { owner: Owner, keys: Vec<K> },
}

/// A deadline in the index: the time, then a sequence number for ties.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Due(f64, u64);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// Which waiting list a deadline points into.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Place {
    Semaphore(String),
    MultiLock,
    Event(String),
    Variable(String),
    QueueGet(String),
    QueuePut(String),
}

/// A waiting request.
#[derive(Clone, Debug)]
pub(crate) struct Waiter {
    pub holder: Holder,
    pub request: RequestId,
    pub due: Option<Due>,
}

/// The coordination state of one scheduler. `K` is the key type of futures.
#[derive(Debug)]
pub struct Coord<K> {
    pub(crate) semaphores: BTreeMap<String, Semaphore>,
    pub(crate) multi: multi_lock::MultiLocks,
    pub(crate) events: BTreeMap<String, EventState>,
    pub(crate) variables: BTreeMap<String, VariableState<K>>,
    pub(crate) queues: BTreeMap<String, queue::QueueState<K>>,
    deadlines: BTreeMap<Due, (Place, Holder, RequestId)>,
    seq: u64,
    /// How many stored values hold each key, per variable or queue.
    held: BTreeMap<Owner, BTreeMap<K, u32>>,
    out: Vec<Command<K>>,
    now: f64,
}

impl<K: Clone + Ord + Hash> Default for Coord<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Ord + Hash> Coord<K> {
    pub fn new() -> Self {
        Coord {
            semaphores: BTreeMap::new(),
            multi: multi_lock::MultiLocks::default(),
            events: BTreeMap::new(),
            variables: BTreeMap::new(),
            queues: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            seq: 0,
            held: BTreeMap::new(),
            out: Vec::new(),
            now: f64::NEG_INFINITY,
        }
    }

    /// The commands produced since the last call, in order.
    pub fn take_commands(&mut self) -> Vec<Command<K>> {
        std::mem::take(&mut self.out)
    }

    /// The earliest deadline of a waiting request (arm one timer for it).
    pub fn next_deadline(&self) -> Option<f64> {
        self.deadlines.keys().next().map(|d| d.0)
    }

    /// Answers every waiting request whose deadline is `now` or earlier (timed out),
    /// and what that frees up.
    pub fn expire(&mut self, now: f64) {
        self.at(now);
    }

    /// Advances the clock (time never goes back) and expires what is due.
    pub(crate) fn at(&mut self, now: f64) {
        if now > self.now {
            self.now = now;
        }
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (place, holder, request) = entry.remove();
            self.time_out(place, holder, request);
        }
    }

    fn time_out(&mut self, place: Place, holder: Holder, request: RequestId) {
        match place {
            Place::Semaphore(name) => self.line_timed_out::<Semaphore>(&name, holder, request),
            Place::MultiLock => self.multi_lock_timed_out(holder, request),
            Place::Event(name) => self.line_timed_out::<EventState>(&name, holder, request),
            Place::Variable(name) => {
                self.line_timed_out::<VariableState<K>>(&name, holder, request)
            }
            Place::QueueGet(name) => self.queue_get_timed_out(&name, holder, request),
            Place::QueuePut(name) => self.queue_put_timed_out(&name, holder, request),
        }
    }

    /// A holder left (its connection closed, or the worker it lives on was removed):
    /// its leases and locks are released, its waiting requests answered `Failed`.
    pub fn holder_gone(&mut self, holder: Holder, now: f64) {
        self.at(now);
        self.semaphores_holder_gone(holder);
        self.multi_lock_holder_gone(holder);
        self.lines_holder_gone::<EventState>(holder);
        self.lines_holder_gone::<VariableState<K>>(holder);
        self.queues_holder_gone(holder);
    }

    // ----- helpers for the primitives' modules ------------------------------------------

    pub(crate) fn answer(&mut self, holder: Holder, request: RequestId, outcome: Outcome<K>) {
        self.out.push(Command::Answer {
            holder,
            request,
            outcome,
        });
    }

    /// A waiter for `(holder, request)` at `place`: its deadline, if any, is indexed.
    pub(crate) fn waiter(
        &mut self,
        place: Place,
        holder: Holder,
        request: RequestId,
        timeout: Option<f64>,
    ) -> Waiter {
        let due = timeout.map(|t| {
            self.seq += 1;
            let due = Due(self.now + t, self.seq);
            self.deadlines.insert(due, (place, holder, request));
            due
        });
        Waiter {
            holder,
            request,
            due,
        }
    }

    /// A waiter leaves its list (answered): its deadline is dropped.
    pub(crate) fn unschedule(&mut self, w: &Waiter) {
        if let Some(due) = w.due {
            self.deadlines.remove(&due);
        }
    }

    /// `owner` holds `keys` once more (Hold for those it did not hold).
    pub(crate) fn hold(&mut self, owner: &Owner, keys: &[K]) {
        if keys.is_empty() {
            return;
        }
        let counts = self.held.entry(owner.clone()).or_default();
        let mut fresh = Vec::new();
        for k in keys {
            let n = counts.entry(k.clone()).or_insert(0);
            if *n == 0 {
                fresh.push(k.clone());
            }
            *n += 1;
        }
        if !fresh.is_empty() {
            self.out.push(Command::Hold {
                owner: owner.clone(),
                keys: fresh,
            });
        }
    }

    /// `owner` holds `keys` once less (Release for those it no longer holds).
    pub(crate) fn release(&mut self, owner: &Owner, keys: &[K]) {
        let Some(counts) = self.held.get_mut(owner) else {
            return;
        };
        let mut gone = Vec::new();
        for k in keys {
            if let Some(n) = counts.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(k);
                    gone.push(k.clone());
                }
            }
        }
        if counts.is_empty() {
            self.held.remove(owner);
        }
        if !gone.is_empty() {
            self.out.push(Command::Release {
                owner: owner.clone(),
                keys: gone,
            });
        }
    }

    /// Answers a get with `values`: the getter's client holds their keys from now on.
    pub(crate) fn hand_over(&mut self, holder: Holder, request: RequestId, values: Vec<Value<K>>) {
        let keys: BTreeSet<K> = values.iter().flat_map(|v| v.keys.iter().cloned()).collect();
        self.answer(holder, request, Outcome::Values(values));
        if !keys.is_empty() {
            self.out.push(Command::Hold {
                owner: Owner::Client(holder),
                keys: keys.into_iter().collect(),
            });
        }
    }

    /// The keys each variable and queue holds (for checks).
    pub fn held_keys(&self) -> BTreeMap<Owner, BTreeSet<K>> {
        self.held
            .iter()
            .map(|(o, c)| (o.clone(), c.keys().cloned().collect()))
            .collect()
    }
}
