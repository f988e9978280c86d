//! Two-sided links between a task and the few workers holding it (`who_has` ⇄
//! `has_what`) or clients wanting it (`who_wants` ⇄ `wants_what`). The task side keeps,
//! per link, the task's index in the other side's plain list, so adding or dropping a
//! link is O(1) on both sides without a large hash set per worker or client (those
//! were the ingest/release bottleneck).

use crate::ids::{ClientId, TaskId, WorkerId};
use smallvec::SmallVec;

#[derive(Clone, Debug)]
pub struct Links<I>(SmallVec<[(I, u32); 1]>);

/// The workers holding a task's result.
pub type Holders = Links<WorkerId>;
/// The clients holding futures on a task.
pub type Wanters = Links<ClientId>;

impl<I> Default for Links<I> {
    fn default() -> Self {
        Links(SmallVec::new())
    }
}

/// Appends `t` to the other side's list, returning its index for the task's link.
pub(crate) fn push_back(list: &mut Vec<TaskId>, t: TaskId) -> u32 {
    list.push(t);
    (list.len() - 1) as u32
}

/// Removes index `pos` from the other side's list; returns the task moved into `pos`,
/// whose link must be repointed.
pub(crate) fn swap_out(list: &mut Vec<TaskId>, pos: u32) -> Option<TaskId> {
    list.swap_remove(pos as usize);
    list.get(pos as usize).copied()
}

impl<I: Copy + Eq> Links<I> {
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[inline]
    pub fn contains(&self, w: I) -> bool {
        self.0.iter().any(|&(x, _)| x == w)
    }

    pub fn iter(&self) -> impl Iterator<Item = I> + '_ {
        self.0.iter().map(|&(w, _)| w)
    }

    pub fn first(&self) -> Option<I> {
        self.0.first().map(|&(w, _)| w)
    }

    #[inline]
    pub fn to_vec(&self) -> SmallVec<[I; 4]> {
        let mut v = SmallVec::new();
        match self.0.as_slice() {
            [] => {}
            [(a, _)] => v.push(*a),
            more => v.extend(more.iter().map(|&(w, _)| w)),
        }
        v
    }

    pub(crate) fn push(&mut self, w: I, pos: u32) {
        self.0.push((w, pos));
    }

    /// Drops `w`, returning the task's index in `w`'s list.
    pub(crate) fn remove(&mut self, w: I) -> Option<u32> {
        let i = self.0.iter().position(|&(x, _)| x == w)?;
        Some(self.0.swap_remove(i).1)
    }

    pub(crate) fn position(&self, w: I) -> Option<u32> {
        self.0.iter().find(|&&(x, _)| x == w).map(|&(_, p)| p)
    }

    pub(crate) fn set_position(&mut self, w: I, pos: u32) {
        if let Some(e) = self.0.iter_mut().find(|(x, _)| *x == w) {
            e.1 = pos;
        }
    }
}
