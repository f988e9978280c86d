//! The invariant checker: tests call [`Coord::validate`] after every event.

use crate::{Coord, Due, Owner, Place, Waiter};
use std::collections::BTreeMap;
use std::hash::Hash;

impl<K: Clone + Ord + Hash + std::fmt::Debug> Coord<K> {
    /// Checks every invariant of the state; the first broken one is the error.
    pub fn validate(&self) -> Result<(), String> {
        let mut dues: BTreeMap<Due, (Place, u32, u64)> = BTreeMap::new();
        let mut note = |place: Place, w: &Waiter| -> Result<(), String> {
            if let Some(d) = w.due {
                if dues.insert(d, (place, w.holder, w.request)).is_some() {
                    return Err(format!("deadline {d:?} used twice"));
                }
            }
            Ok(())
        };
        for (name, s) in &self.semaphores {
            if s.leases.len() > s.max_leases as usize {
                return Err(format!(
                    "semaphore {name}: {} leases > {}",
                    s.leases.len(),
                    s.max_leases
                ));
            }
            if !s.waiters.is_empty() && s.leases.len() < s.max_leases as usize {
                return Err(format!(
                    "semaphore {name}: a waiter waits while a lease is free"
                ));
            }
            for w in &s.waiters {
                note(Place::Semaphore(name.clone()), w)?;
            }
        }
        for (id, r) in &self.multi.requests {
            let fronts = r
                .names
                .iter()
                .filter(|n| self.multi.lines.get(*n).and_then(|l| l.front()) == Some(id))
                .count();
            match &r.waiting {
                Some(w) => {
                    if fronts >= r.num_locks {
                        return Err(format!(
                            "multi-lock {id:?} waits while first on enough lines"
                        ));
                    }
                    note(Place::MultiLock, w)?;
                }
                None if fronts != r.names.len() || fronts < r.num_locks => {
                    return Err(format!(
                        "multi-lock {id:?} granted but not first on its lines"
                    ));
                }
                None => {}
            }
            for n in &r.names {
                if !self.multi.lines.get(n).is_some_and(|l| l.contains(id)) {
                    return Err(format!("multi-lock {id:?} not in the line of {n}"));
                }
            }
        }
        for (n, line) in &self.multi.lines {
            if line.is_empty() {
                return Err(format!("multi-lock line {n} kept empty"));
            }
            for id in line {
                if !self
                    .multi
                    .requests
                    .get(id)
                    .is_some_and(|r| r.names.contains(n))
                {
                    return Err(format!("multi-lock line {n} holds unknown {id:?}"));
                }
            }
        }
        for (name, e) in &self.events {
            if e.set && !e.waiters.is_empty() {
                return Err(format!("event {name}: set with waiters"));
            }
            if !e.set && e.waiters.is_empty() {
                return Err(format!("event {name}: clear and idle but kept"));
            }
            for w in &e.waiters {
                note(Place::Event(name.clone()), w)?;
            }
        }
        let mut expected: BTreeMap<Owner, BTreeMap<K, u32>> = BTreeMap::new();
        let mut count = |owner: Owner, keys: &[K]| {
            let c = expected.entry(owner).or_default();
            for k in keys {
                *c.entry(k.clone()).or_insert(0) += 1;
            }
        };
        for (name, v) in &self.variables {
            if v.value.is_some() && !v.waiters.is_empty() {
                return Err(format!("variable {name}: a get waits while it has a value"));
            }
            if v.value.is_none() && v.waiters.is_empty() {
                return Err(format!("variable {name}: empty and idle but kept"));
            }
            if let Some(value) = &v.value {
                count(Owner::Variable(name.clone()), &value.keys);
            }
            for w in &v.waiters {
                note(Place::Variable(name.clone()), w)?;
            }
        }
        for (name, q) in &self.queues {
            if !q.getters.is_empty() && !q.items.is_empty() {
                return Err(format!("queue {name}: a get waits while values are queued"));
            }
            if !q.putters.is_empty() && q.has_room() {
                return Err(format!("queue {name}: a put waits while there is room"));
            }
            if q.maxsize > 0 && q.items.len() > q.maxsize {
                return Err(format!("queue {name}: over its maxsize"));
            }
            let owner = Owner::Queue(name.clone());
            for v in &q.items {
                count(owner.clone(), &v.keys);
            }
            for g in &q.getters {
                if g.got.len() >= g.want {
                    return Err(format!("queue {name}: a satisfied get still waits"));
                }
                for v in &g.got {
                    count(owner.clone(), &v.keys);
                }
                note(Place::QueueGet(name.clone()), &g.w)?;
            }
            for p in &q.putters {
                count(owner.clone(), &p.value.keys);
                note(Place::QueuePut(name.clone()), &p.w)?;
            }
        }
        expected.retain(|_, c| !c.is_empty());
        if expected != self.held {
            return Err(format!(
                "holds {:?} != stored values' keys {expected:?}",
                self.held
            ));
        }
        if dues != self.deadlines {
            return Err("the deadline index does not match the waiters".into());
        }
        Ok(())
    }
}
