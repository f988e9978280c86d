//! The task records by scheduler task id: the records in a slab, and a hash table
//! from id to slab index. The table's entries stay small (8 bytes): growing it copies
//! every entry while the old and new tables both live, and its slack is paid per
//! entry; the slab grows in place (docs/runtime.md#memory).

use super::Task;
use squall_hash::BuildIdHasher;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

#[derive(Default)]
pub(super) struct Tasks<S> {
    /// Hashed so that consecutive ids (a map's) share runs of buckets.
    index: HashMap<u32, u32, BuildIdHasher>,
    records: Vec<Option<Task<S>>>,
    /// Slab entries to reuse.
    free: Vec<u32>,
}

impl<S> Tasks<S> {
    pub(super) fn get(&self, id: &u32) -> Option<&Task<S>> {
        let &i = self.index.get(id)?;
        self.records[i as usize].as_ref()
    }

    /// The record and where it is (for [`Self::at`]).
    pub(super) fn get_at(&self, id: &u32) -> Option<(u32, &Task<S>)> {
        let &i = self.index.get(id)?;
        Some((i, self.records[i as usize].as_ref()?))
    }

    /// The record and where it is (for [`Self::at_mut`]).
    pub(super) fn get_mut_at(&mut self, id: &u32) -> Option<(u32, &mut Task<S>)> {
        let &i = self.index.get(id)?;
        Some((i, self.records[i as usize].as_mut()?))
    }

    /// The record at `slot`, whichever task it is now (callers check its instance).
    pub(super) fn at(&self, slot: u32) -> Option<&Task<S>> {
        self.records.get(slot as usize)?.as_ref()
    }

    /// The record at `slot`, whichever task it is now (callers check its instance).
    pub(super) fn at_mut(&mut self, slot: u32) -> Option<&mut Task<S>> {
        self.records.get_mut(slot as usize)?.as_mut()
    }

    pub(super) fn get_mut(&mut self, id: &u32) -> Option<&mut Task<S>> {
        let &i = self.index.get(id)?;
        self.records[i as usize].as_mut()
    }

    /// Tracks `ts` as task `id`'s record (replacing any); returns where it is.
    pub(super) fn insert(&mut self, id: u32, ts: Task<S>) -> u32 {
        let entry = match self.index.entry(id) {
            Entry::Occupied(e) => {
                let i = *e.get();
                self.records[i as usize] = Some(ts);
                return i;
            }
            Entry::Vacant(e) => e,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.records[i as usize] = Some(ts);
                i
            }
            None => {
                self.records.push(Some(ts));
                self.records.len() as u32 - 1
            }
        };
        entry.insert(i);
        i
    }

    pub(super) fn remove(&mut self, id: &u32) -> Option<Task<S>> {
        let i = self.index.remove(id)?;
        self.free.push(i);
        self.records[i as usize].take()
    }

    /// Room for `n` more records without growing.
    pub(super) fn reserve(&mut self, n: usize) {
        self.index.reserve(n);
        self.records.reserve(n.saturating_sub(self.free.len()));
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Task<S>> {
        self.records.iter().filter_map(Option::as_ref)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &Task<S>)> {
        let records = &self.records;
        self.index.iter().map(move |(&id, &i)| {
            let ts = records[i as usize].as_ref();
            (id, ts.expect("indexed records are live"))
        })
    }
}
