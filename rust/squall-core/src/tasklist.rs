//! A worker's list of tasks — its processing tasks, one of its stealing bins — where
//! every member records its own place in the list (in its `Task`), so adding and
//! removing a member is a write to a ring with no hashing (docs/core.md#task-lists).
//! A place is a position counted from the list's start, never reused while the member
//! stays: removing the first member (tasks mostly finish in the order they were
//! given) or the last moves no other, and a member removed from between moves the
//! first into its place, so that only one other member's record is written.

use crate::ids::TaskId;

/// A ring of `TaskId`s whose capacity is a power of two: the member at place `p` is in
/// slot `p & (capacity - 1)`, so places stay valid as the ring's start moves on.
#[derive(Clone, Debug, Default)]
pub struct TaskList {
    slots: Box<[TaskId]>,
    /// The first member's place (wrapping).
    start: u32,
    len: u32,
}

impl TaskList {
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, place: u32) -> usize {
        place as usize & (self.slots.len() - 1)
    }

    /// The members from first to last, with their places.
    pub fn places(&self) -> impl Iterator<Item = (u32, TaskId)> + '_ {
        (0..self.len).map(|i| {
            let place = self.start.wrapping_add(i);
            (place, self.slots[self.slot(place)])
        })
    }

    /// The members from first to last.
    pub fn iter(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.places().map(|(_, t)| t)
    }

    /// Whether `t`, which records `place`, is the member there.
    pub fn holds(&self, t: TaskId, place: u32) -> bool {
        place.wrapping_sub(self.start) < self.len && self.slots[self.slot(place)] == t
    }

    /// Appends `t`; returns its place, for the task to record.
    pub(crate) fn push(&mut self, t: TaskId) -> u32 {
        assert!(
            self.len < u32::MAX / 2,
            "fewer than 2**31 tasks on a worker"
        );
        if self.len as usize == self.slots.len() {
            self.grow();
        }
        let place = self.start.wrapping_add(self.len);
        let i = self.slot(place);
        self.slots[i] = t;
        self.len += 1;
        place
    }

    /// Doubles the ring; every member keeps its place.
    fn grow(&mut self) {
        let mut slots = vec![TaskId(0); (self.slots.len() * 2).max(4)].into_boxed_slice();
        let mask = slots.len() - 1;
        for (place, t) in self.places() {
            slots[place as usize & mask] = t;
        }
        self.slots = slots;
    }

    /// Removes `t` from `place`; returns the member moved into `place` (the former
    /// first one), whose recorded place the caller updates.
    pub(crate) fn remove(&mut self, t: TaskId, place: u32) -> Option<TaskId> {
        debug_assert!(self.holds(t, place), "a task's recorded place holds it");
        let offset = place.wrapping_sub(self.start);
        self.len -= 1;
        if offset == self.len {
            return None;
        }
        let first = self.slots[self.slot(self.start)];
        self.start = self.start.wrapping_add(1);
        if offset == 0 {
            return None;
        }
        let i = self.slot(place);
        self.slots[i] = first;
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes `t` from a plain vector as `TaskList::remove` does.
    fn model_remove(model: &mut Vec<TaskId>, t: TaskId) {
        let i = model.iter().position(|&m| m == t).expect("a member");
        if i == model.len() - 1 {
            model.pop();
        } else if i == 0 {
            model.remove(0);
        } else {
            let first = model.remove(0);
            model[i - 1] = first;
        }
    }

    /// Random pushes and removals, from a start about to wrap: the members stay in the
    /// model's order, and every recorded place stays true.
    #[test]
    fn places_stay_true_through_growth_and_wrapping() {
        let mut list = TaskList {
            start: u32::MAX - 40,
            ..Default::default()
        };
        let mut places: Vec<Option<u32>> = vec![None; 64];
        let mut model: Vec<TaskId> = Vec::new();
        let mut x: u64 = 7;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = TaskId((x >> 33) as u32 % 64);
            match places[t.idx()] {
                None => {
                    places[t.idx()] = Some(list.push(t));
                    model.push(t);
                }
                Some(place) => {
                    assert!(list.holds(t, place));
                    if let Some(moved) = list.remove(t, place) {
                        places[moved.idx()] = Some(place);
                    }
                    places[t.idx()] = None;
                    model_remove(&mut model, t);
                    assert!(!list.holds(t, place));
                }
            }
            assert!(list.iter().eq(model.iter().copied()));
            for (i, p) in places.iter().enumerate() {
                if let Some(p) = p {
                    assert!(list.holds(TaskId(i as u32), *p));
                }
            }
        }
    }

    /// Members removed first-in first-out, or last-in first-out, move no other.
    #[test]
    fn removing_either_end_moves_nothing() {
        let mut list = TaskList::default();
        let placed: Vec<(TaskId, u32)> = (0..100)
            .map(|i| (TaskId(i), list.push(TaskId(i))))
            .collect();
        for &(t, place) in &placed[..50] {
            assert_eq!(list.remove(t, place), None);
        }
        for &(t, place) in placed[50..].iter().rev() {
            assert_eq!(list.remove(t, place), None);
        }
        assert!(list.is_empty());
        assert!(!list.holds(TaskId(0), placed[0].1));
    }
}
