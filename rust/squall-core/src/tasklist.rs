//! A worker's list of tasks — its processing tasks, one of its stealing bins — in
//! insertion order, where every member records its own place in the list (in its
//! `Task`), so adding and removing a member is a vector write with no hashing
//! (docs/core.md#task-lists). Removal moves the last member into the gap, the same
//! order an `IndexSet`'s `swap_remove` leaves, so decisions that walk a list are
//! unchanged.

use crate::ids::TaskId;

#[derive(Clone, Debug, Default)]
pub struct TaskList(Vec<TaskId>);

impl TaskList {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, TaskId> {
        self.0.iter()
    }

    /// Whether `t`, which records `place`, is the member there.
    pub fn holds(&self, t: TaskId, place: u32) -> bool {
        self.0.get(place as usize) == Some(&t)
    }

    /// Appends `t`; returns its place, for the task to record.
    pub(crate) fn push(&mut self, t: TaskId) -> u32 {
        let place = u32::try_from(self.0.len()).expect("fewer than 2**32 tasks on a worker");
        self.0.push(t);
        place
    }

    /// Removes `t` from `place`; returns the member moved into `place` (the former last
    /// one), whose recorded place the caller updates.
    pub(crate) fn swap_remove(&mut self, t: TaskId, place: u32) -> Option<TaskId> {
        let removed = self.0.swap_remove(place as usize);
        debug_assert_eq!(removed, t, "a task's recorded place holds it");
        self.0.get(place as usize).copied()
    }
}

impl<'a> IntoIterator for &'a TaskList {
    type Item = &'a TaskId;
    type IntoIter = std::slice::Iter<'a, TaskId>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indexmap::IndexSet;

    /// Pushes and removals keep the order an IndexSet's swap_remove keeps, and every
    /// recorded place stays true.
    #[test]
    fn orders_like_swap_remove() {
        let mut list = TaskList::default();
        let mut places: Vec<Option<u32>> = vec![None; 64];
        let mut model: IndexSet<TaskId> = IndexSet::new();
        let mut x: u64 = 7;
        for _ in 0..5_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = TaskId((x >> 33) as u32 % 64);
            match places[t.idx()] {
                None => {
                    places[t.idx()] = Some(list.push(t));
                    model.insert(t);
                }
                Some(place) => {
                    assert!(list.holds(t, place));
                    if let Some(moved) = list.swap_remove(t, place) {
                        places[moved.idx()] = Some(place);
                    }
                    places[t.idx()] = None;
                    model.swap_remove(&t);
                }
            }
            assert!(list.iter().eq(model.iter()));
            for (i, p) in places.iter().enumerate() {
                if let Some(p) = p {
                    assert!(list.holds(TaskId(i as u32), *p));
                }
            }
        }
    }
}
